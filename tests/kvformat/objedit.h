/*
 * objedit.h - byte-level editing of encoded kvformat objects for tests and
 * the fuzz seed corpus: the header offsets docs/FORMAT.md documents,
 * written down independently of kvformat's own definitions, and helpers
 * that re-checksum a section or the header after a deliberate edit so
 * that only the check under test fails.
 */
#ifndef KVS_TESTS_KVFORMAT_OBJEDIT_H
#define KVS_TESTS_KVFORMAT_OBJEDIT_H

#include <stdint.h>

#include <xxhash.h>

#define FMT_MAGIC 0
#define FMT_VERSION 4
#define FMT_KIND 6
#define FMT_FLAGS 7
#define FMT_RESIDUAL 24
#define FMT_R_K 36
#define FMT_TOTAL_SIZE 56
#define FMT_SECTION_TABLE 160
#define FMT_SECTION_ENTRY 32
#define FMT_SEC_OFFSET 0
#define FMT_SEC_STORED 4
#define FMT_SEC_CHECKSUM 16
#define FMT_RESERVED 416
#define FMT_HDR_CHECKSUM 504

static inline void put_le(uint8_t *p, uint64_t v, int bytes)
{
	for (int i = 0; i < bytes; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint64_t get_le(const uint8_t *p, int bytes)
{
	uint64_t v = 0;

	for (int i = bytes - 1; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

/* Entry @i of the section table. */
static inline uint8_t *sec_entry(uint8_t *obj, int i)
{
	return obj + FMT_SECTION_TABLE + i * FMT_SECTION_ENTRY;
}

/* Offset of section @i's stored bytes. */
static inline uint32_t sec_offset(uint8_t *obj, int i)
{
	return (uint32_t)get_le(sec_entry(obj, i) + FMT_SEC_OFFSET, 4);
}

/* Re-checksums section @i's stored bytes into its table entry. */
static inline void fix_section_sum(uint8_t *obj, int i)
{
	uint8_t *e = sec_entry(obj, i);
	uint32_t len = (uint32_t)get_le(e + FMT_SEC_STORED, 4);

	put_le(e + FMT_SEC_CHECKSUM, XXH3_64bits(obj + sec_offset(obj, i), len),
	       8);
}

/* The header checksum: xxh3-64 (seed 0) of the header's first 504 bytes. */
static inline void fix_header_sum(uint8_t *obj)
{
	put_le(obj + FMT_HDR_CHECKSUM, XXH3_64bits(obj, FMT_HDR_CHECKSUM), 8);
}

#endif
