/*
 * format_internal.h - byte offsets of the object header (docs/FORMAT.md)
 * and little-endian field access, shared by the encoder (block.c), the
 * validator (decode.c) and the LZ4 re-encoder (compress.c).  Field access
 * goes through common/bytes.h.
 *
 *   off  size  field                 off  size  field
 *     0     4  magic "KVST"           32     4  tokens
 *     4     2  version                36     4  r_k (tails)
 *     6     1  kind                   40     4  r_v (tails)
 *     7     1  flags                  44     4  header size (512)
 *     8     1  bits                   48     8  first token position
 *     9     1  metadata type          56     8  total size
 *    10     1  layout id              64    32  block (span) id
 *    11     1  tail dtype             96    32  parent id
 *    12     2  group G               128    32  model fingerprint
 *    14     2  kv heads              160   256  section table, 8 x 32
 *    16     2  head dim              416    88  reserved, zero
 *    18     2  section count         504     8  xxh3-64 of bytes 0..503
 *    20     4  span S
 *    24     4  residual R
 *    28     4  layer
 * Section entry (32 bytes): offset u32, stored length u32, logical length
 * u32, codec u8, 3 reserved bytes, xxh3-64 of the stored bytes u64,
 * 8 reserved bytes.  Unused entries and reserved bytes are zero.
 */
#ifndef KVS_FORMAT_INTERNAL_H
#define KVS_FORMAT_INTERNAL_H

#include <stdint.h>

#include "common/bytes.h"
#include "kvstash/kvformat.h"

#define HDR_MAGIC 0
#define HDR_VERSION 4
#define HDR_KIND 6
#define HDR_FLAGS 7
#define HDR_BITS 8
#define HDR_META 9
#define HDR_LAYOUT 10
#define HDR_TAIL_DTYPE 11
#define HDR_GROUP 12
#define HDR_KV_HEADS 14
#define HDR_HEAD_DIM 16
#define HDR_SECTIONS 18
#define HDR_SPAN 20
#define HDR_RESIDUAL 24
#define HDR_LAYER 28
#define HDR_TOKENS 32
#define HDR_R_K 36
#define HDR_R_V 40
#define HDR_HEADER_SIZE 44
#define HDR_FIRST_POS 48
#define HDR_TOTAL_SIZE 56
#define HDR_BLOCK_ID 64
#define HDR_PARENT_ID 96
#define HDR_MODEL_FP 128
#define HDR_SECTION_TABLE 160
#define HDR_SECTION_ENTRY 32
#define HDR_RESERVED 416
#define HDR_CHECKSUM 504

#define SEC_OFFSET 0
#define SEC_STORED 4
#define SEC_LOGICAL 8
#define SEC_CODEC 12
#define SEC_CHECKSUM 16

/* Flag bit: at least one section is LZ4-compressed. */
#define KVS_FLAG_LZ4 0x01u

_Static_assert(HDR_SECTION_TABLE + KVS_SECTION_MAX * HDR_SECTION_ENTRY ==
		       HDR_RESERVED,
	       "section table ends where the reserved bytes begin");
_Static_assert(HDR_CHECKSUM + 8 == KVS_HEADER_SIZE,
	       "the header checksum is the header's last 8 bytes");
_Static_assert(HDR_MODEL_FP + KVS_ID_SIZE == HDR_SECTION_TABLE,
	       "ids are contiguous before the section table");

static const uint8_t kvs_magic[4] = { 'K', 'V', 'S', 'T' };

/* xxh3-64 over @len bytes (seed 0). */
uint64_t kvs_xxh3(const void *p, size_t len);

/* Serialises @hdr into the first KVS_HEADER_SIZE bytes of @out, zeroing
 * reserved bytes and writing the header checksum last. */
void kvs_header_write(const struct kvs_header *hdr, uint8_t *out);

/* Computes the layout of an object of @kind; shared by the encoder and the
 * validator (which checks that logical lengths match it). */
int kvs_object_layout(const struct kvs_header *hdr, struct kvs_layout *out);

#endif
