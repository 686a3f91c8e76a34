/*
 * kvformat - the numeric contract and the block format.
 *
 * Three layers, each usable alone:
 *   1. scalars: fp16/bf16 conversion with round-to-nearest-even;
 *   2. the group quantizer of DESIGN.md §1 and 2-bit/4-bit packing;
 *   3. objects: sealed blocks and residual tails, their canonical layout,
 *      encode, validate-and-open, dequantize, ids and memory accounting.
 *
 * Byte-level description: docs/FORMAT.md.  Everything is little-endian.
 *
 * Canonical layout of a block (layout id KVS_LAYOUT_TOKEN_MAJOR = 1):
 *   [header 512 B][sec 0][pad][sec 1][pad]...   sections start 256-aligned
 *   sec KEY_CODES   [head][token][D*b/8]   codes packed along channels,
 *                                            low bits first (seed pack2)
 *   sec KEY_ORIGIN  [head][token/G][D]     metadata type M
 *   sec KEY_STEP    [head][token/G][D]
 *   sec VAL_CODES   [head][token][D*b/8]
 *   sec VAL_ORIGIN  [head][token][D/G]
 *   sec VAL_STEP    [head][token][D/G]
 * A residual tail has two sections: KEY_RESID [head][r_K][D] and
 * VAL_RESID [head][r_V][D] in the tail dtype (fp16, bf16 or fp32).
 * An uncompressed block is the page the fused decode kernel reads as is.
 */
#ifndef KVSTASH_KVFORMAT_H
#define KVSTASH_KVFORMAT_H

#include <stddef.h>
#include <stdint.h>

#include "kvstash/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- scalars --------------------------------------------------------- */

enum kvs_dtype {
	KVS_DTYPE_F32 = 1,
	KVS_DTYPE_F16 = 2,
	KVS_DTYPE_BF16 = 3,
};

/* Size in bytes of one element of @t, 0 for an unknown type. */
size_t kvs_dtype_size(enum kvs_dtype t);
/* "f32", "f16", "bf16"; NULL for an unknown type. */
const char *kvs_dtype_name(enum kvs_dtype t);
/* Parses "f32|fp32|f16|fp16|bf16"; 0 or -KVS_EPARAM. */
int kvs_dtype_parse(const char *s, enum kvs_dtype *out);

/* IEEE binary16 / bfloat16 conversions, round to nearest even; overflow
 * gives infinity, NaN stays NaN.  Widening is exact. */
uint16_t kvs_f32_to_f16(float x);
float kvs_f16_to_f32(uint16_t h);
uint16_t kvs_f32_to_bf16(float x);
float kvs_bf16_to_f32(uint16_t h);

/* Rounds @x to the nearest value of type @t (RNE) and returns it as float. */
float kvs_round_to(enum kvs_dtype t, float x);
/* Loads element @i of a little-endian array of type @t, widened to float. */
float kvs_dtype_load(enum kvs_dtype t, const void *base, size_t i);
/* Stores @x (already representable, or rounded RNE) as element @i. */
void kvs_dtype_store(enum kvs_dtype t, void *base, size_t i, float x);

/* ---- group quantizer (DESIGN.md §1) ---------------------------------- */

/*
 * kvs_quant_group - quantize one group of @n values.
 * @x: n values read as x[i * stride].
 * @bits: 2 or 4.  @meta: metadata type the origin and step are rounded to.
 * @codes: out, n codes, one per byte (0 .. 2^bits - 1).
 * @origin, @step: out, the stored (rounded) metadata, as floats.
 * Returns 0, -KVS_ENONFINITE for NaN/inf input, -KVS_ERANGE when the
 * origin or the step overflows @meta, -KVS_EPARAM for a bad argument.
 * Outputs are written only on success.
 */
int kvs_quant_group(const float *x, size_t n, size_t stride, unsigned bits,
		    enum kvs_dtype meta, uint8_t *codes, float *origin,
		    float *step);

/* Reconstruction: fmaf(step, code, origin). */
float kvs_dequant(float origin, float step, unsigned code);

/* Packs @n codes of @bits each, low bits first; (n*bits+7)/8 bytes out.
 * Padding bits are zero. */
void kvs_pack_codes(const uint8_t *codes, size_t n, unsigned bits,
		    uint8_t *packed);
/* Code @i of a packed array. */
unsigned kvs_packed_code(const uint8_t *packed, size_t i, unsigned bits);

/* ---- objects --------------------------------------------------------- */

#define KVS_FORMAT_VERSION 1
#define KVS_HEADER_SIZE 512
#define KVS_SECTION_ALIGN 256
#define KVS_SECTION_MAX 8
#define KVS_ID_SIZE 32

enum kvs_kind {
	KVS_KIND_BLOCK = 1,
	KVS_KIND_TAIL = 2,
};

enum kvs_layout_id {
	KVS_LAYOUT_TOKEN_MAJOR = 1,
};

enum kvs_section_id {
	KVS_SEC_KEY_CODES = 0,
	KVS_SEC_KEY_ORIGIN,
	KVS_SEC_KEY_STEP,
	KVS_SEC_VAL_CODES,
	KVS_SEC_VAL_ORIGIN,
	KVS_SEC_VAL_STEP,
	KVS_BLOCK_SECTIONS,
	KVS_SEC_KEY_RESID = 0, /* tail sections */
	KVS_SEC_VAL_RESID = 1,
	KVS_TAIL_SECTIONS = 2,
};

enum kvs_codec {
	KVS_CODEC_RAW = 0,
	KVS_CODEC_LZ4 = 1,
};

/* Parameters that fix a block's byte layout. */
struct kvs_shape {
	uint16_t kv_heads;
	uint16_t head_dim; /* D, a multiple of group */
	uint16_t group; /* G, power of two */
	uint8_t bits; /* 2 or 4 */
	uint8_t meta_type; /* enum kvs_dtype */
	uint32_t span; /* S tokens per block, multiple of residual */
	uint32_t residual; /* R, multiple of group */
};

/* Default shape parameters (DESIGN.md): b=2, G=32, S=R=128, fp16 meta. */
void kvs_shape_default(struct kvs_shape *shape, uint16_t kv_heads,
		       uint16_t head_dim);
/* 0 if the shape is valid, else -KVS_EPARAM (and logs why). */
int kvs_shape_check(const struct kvs_shape *shape);

/* Identity and position of an object; all ids are SHA-256 digests. */
struct kvs_ident {
	uint8_t block_id[KVS_ID_SIZE]; /* span id (layer not folded in) */
	uint8_t parent_id[KVS_ID_SIZE]; /* all-zero for the first span */
	uint8_t model_fp[KVS_ID_SIZE];
	uint32_t layer;
	uint64_t first_pos; /* position of the first token */
};

struct kvs_section {
	uint32_t offset; /* from the start of the object */
	uint32_t stored_len; /* bytes in the object */
	uint32_t logical_len; /* bytes once decoded */
	uint8_t codec; /* enum kvs_codec */
	uint64_t checksum; /* xxh3-64 of the stored bytes */
};

/* Decoded header. */
struct kvs_header {
	uint16_t version;
	uint8_t kind; /* enum kvs_kind */
	uint8_t flags;
	uint8_t layout; /* enum kvs_layout_id */
	uint8_t tail_dtype; /* tails: enum kvs_dtype of K/V; blocks: 0 */
	struct kvs_shape shape;
	uint32_t tokens; /* logical tokens (blocks: == span) */
	uint32_t r_k, r_v; /* tails: residual rows */
	uint64_t total_size; /* bytes of the whole object */
	struct kvs_ident ident;
	uint32_t section_count;
	struct kvs_section section[KVS_SECTION_MAX];
};

/* Offsets and lengths of the sections in the canonical uncompressed
 * encoding of a block (or tail) of @shape. */
struct kvs_layout {
	uint32_t offset[KVS_SECTION_MAX];
	uint32_t length[KVS_SECTION_MAX];
	uint32_t section_count;
	uint32_t total_size;
};

/* Layout of a sealed block.  Returns 0 or -KVS_EPARAM. */
int kvs_block_layout(const struct kvs_shape *shape, struct kvs_layout *out);
/* Layout of a residual tail with @r_k key rows and @r_v value rows. */
int kvs_tail_layout(const struct kvs_shape *shape, enum kvs_dtype dtype,
		    uint32_t r_k, uint32_t r_v, struct kvs_layout *out);

/*
 * kvs_block_quantize - quantize S tokens of K/V into a block image.
 * @keys, @values: [kv_heads][span][head_dim] of @in_dtype.
 * @image: kvs_block_layout().total_size bytes; sections are written at their
 *   layout offsets (header and padding left for kvs_block_finish).
 * Returns 0 or -KVS_ENONFINITE / -KVS_ERANGE / -KVS_EPARAM; on error the
 * image content is unspecified and must not be finished.
 */
int kvs_block_quantize(const struct kvs_shape *shape, enum kvs_dtype in_dtype,
		       const void *keys, const void *values, uint8_t *image);

/*
 * kvs_block_finish - write the header, zero the padding and checksum the
 * sections of an uncompressed block image whose sections are filled in
 * (by kvs_block_quantize or by the GPU seal kernel).
 */
int kvs_block_finish(const struct kvs_shape *shape,
		     const struct kvs_ident *ident, uint8_t *image);

/*
 * kvs_object_set_ident - give an uncompressed or compressed object a new
 * identity in place: the header's span id, parent id, model fingerprint,
 * layer and first position become @ident and the header checksum is
 * recomputed; the sections and their checksums are untouched, so one
 * encoded object can stand for many (benchmarks, replays).  The header
 * must decode (kvs_header_decode); returns 0 or that error, @obj
 * unchanged on error.
 */
int kvs_object_set_ident(uint8_t *obj, size_t len,
			 const struct kvs_ident *ident);

/*
 * kvs_block_seal - quantize + finish, optionally LZ4 (flag KVS_ENCODE_LZ4).
 * @out: malloc'd encoded object, owned by the caller (free()).
 */
#define KVS_ENCODE_LZ4 0x1u
int kvs_block_seal(const struct kvs_shape *shape, const struct kvs_ident *ident,
		   enum kvs_dtype in_dtype, const void *keys,
		   const void *values, unsigned flags, uint8_t **out,
		   size_t *out_len);

/*
 * kvs_tail_encode - encode a residual tail.
 * @keys: [kv_heads][r_k][head_dim], @values: [kv_heads][r_v][head_dim], both
 * of @dtype (f16, bf16 or f32); values must be finite.
 * @out: malloc'd, owned by the caller.
 */
int kvs_tail_encode(const struct kvs_shape *shape,
		    const struct kvs_ident *ident, enum kvs_dtype dtype,
		    uint32_t r_k, uint32_t r_v, const void *keys,
		    const void *values, unsigned flags, uint8_t **out,
		    size_t *out_len);

/* Re-encodes an uncompressed object with LZ4 per section, keeping LZ4 only
 * where it saves space.  @out is malloc'd, owned by the caller. */
int kvs_object_compress(const uint8_t *obj, size_t len, uint8_t **out,
			size_t *out_len);

/*
 * kvs_header_set_block_id - writes @id as the block id of the object
 * header at @hdr (KVS_HEADER_SIZE bytes, already decoded) and its header
 * checksum again, every other byte as it was.  The namespace rewrite of
 * docs/PROTOCOL.md: the server binds a client's id to the tenant's
 * namespace with it, and the client writes back the id it asked for.
 * The sections' checksums do not cover the header, so a valid object
 * stays valid.
 */
void kvs_header_set_block_id(uint8_t *hdr, const uint8_t id[KVS_ID_SIZE]);

/*
 * kvs_header_decode - validate magic, version, header checksum and the
 * bounds of the section table, in that order; each failure has its own
 * error.  Does not read section payloads.  @out written only on success.
 */
/* skip the xxh3 checks: for fuzzing, and for objects that were verified
 * in full already */
#define KVS_VERIFY_NO_CHECKSUMS 0x1u
int kvs_header_decode(const uint8_t *buf, size_t len, unsigned flags,
		      struct kvs_header *out);

/* A validated object with its sections ready to read. */
struct kvs_view {
	struct kvs_header hdr;
	const uint8_t *section[KVS_SECTION_MAX]; /* logical bytes */
	uint8_t *owned; /* decompression buffer, or NULL */
};

/*
 * kvs_object_open - full validation in DESIGN.md order: header (as above),
 * section checksums, LZ4 output length, finite positive metadata.
 * Uncompressed sections point into @buf (which must outlive the view);
 * compressed ones are expanded into view->owned.  Release with
 * kvs_view_release().  Returns 0 or the first failed check's error.
 */
int kvs_object_open(const uint8_t *buf, size_t len, unsigned flags,
		    struct kvs_view *out);
void kvs_view_release(struct kvs_view *view);

/* Validate only (what a server does on every block): 0 or the error. */
int kvs_object_verify(const uint8_t *buf, size_t len, unsigned flags);

/* Short name of the check an error code corresponds to ("magic",
 * "version", "header checksum", ...), for `kvstash block verify`. */
const char *kvs_check_name(int err);

/*
 * kvs_block_dequantize - reconstruct a block's K and V in fp32.
 * @keys, @values: [kv_heads][span][head_dim] floats, written.
 */
int kvs_block_dequantize(const struct kvs_view *view, float *keys,
			 float *values);

/* Element accessors on an opened block (CPU reference paths). */
float kvs_block_key(const struct kvs_view *view, uint32_t head, uint32_t token,
		    uint32_t channel);
float kvs_block_value(const struct kvs_view *view, uint32_t head,
		      uint32_t token, uint32_t channel);

/* ---- identity -------------------------------------------------------- */

/* Everything that changes a block's bytes. */
struct kvs_model_desc {
	const char *model_id;
	uint32_t layers;
	enum kvs_dtype kv_dtype;
	struct kvs_shape shape;
	uint8_t layout;
};

/* SHA-256 over a canonical encoding of @desc. */
int kvs_model_fingerprint(const struct kvs_model_desc *desc,
			  uint8_t out[KVS_ID_SIZE]);

/*
 * kvs_span_id - SHA-256 over (namespace, model fingerprint, parent id,
 * token ids), each length-prefixed.  @parent may be NULL (first span).
 * The store key of a block is (span id, layer).
 */
int kvs_span_id(const char *ns, const uint8_t model_fp[KVS_ID_SIZE],
		const uint8_t *parent, const uint32_t *tokens, size_t n,
		uint8_t out[KVS_ID_SIZE]);

/* Lower-case hex of a 32-byte id: 65 bytes with the NUL. */
void kvs_id_to_hex(const uint8_t id[KVS_ID_SIZE], char out[65]);
/* Parses 64 hex digits; 0 or -KVS_EPARAM. */
int kvs_id_from_hex(const char *hex, uint8_t out[KVS_ID_SIZE]);

/* ---- memory accounting (DESIGN.md §3, seed §7) ------------------------ */

struct kvs_memory {
	double quantized_bytes; /* D (2T - r_K - r_V)(b/8 + 2e/G) */
	double residual_bytes; /* D (r_K + r_V) f */
	double total_bytes;
	uint64_t format_bytes; /* actual encoded blocks + tail, headers and
				  padding included */
};

/*
 * kvs_memory_account - the seed's formula per layer, per KV head, per
 * request, multiplied by @layers * @kv_heads * @batch, with the persisted
 * r_K = T mod R and r_V = min(T, R), beside the format's actual bytes
 * (uncompressed blocks of S = R tokens holding all @kv_heads, plus one tail
 * per layer and request, with f-byte residual elements).
 */
int kvs_memory_account(uint64_t tokens, uint32_t head_dim, uint32_t group,
		       uint32_t residual, unsigned bits, unsigned meta_bytes,
		       unsigned float_bytes, uint32_t layers, uint32_t kv_heads,
		       uint32_t batch, struct kvs_memory *out);

#ifdef __cplusplus
}
#endif

#endif
