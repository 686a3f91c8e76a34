/*
 * block.c - encoding of kvformat objects: shapes and their canonical
 * layouts, block quantization (Key per channel along time, Value per token
 * along channels), the header writer, and residual tails.
 *
 * An uncompressed object is the header followed by its sections at
 * 256-byte aligned offsets, zero padding between them; that image is what
 * the fused decode kernel reads as a page.  LZ4 re-encoding is compress.c.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "format_internal.h"
#include "kvstash/kvformat.h"
#include "kvstash/log.h"
#include "quant_internal.h"

uint64_t kvs_xxh3(const void *p, size_t len)
{
	return XXH3_64bits(p, len);
}

void kvs_shape_default(struct kvs_shape *shape, uint16_t kv_heads,
		       uint16_t head_dim)
{
	memset(shape, 0, sizeof(*shape));
	shape->kv_heads = kv_heads;
	shape->head_dim = head_dim;
	shape->group = 32;
	shape->bits = 2;
	shape->meta_type = KVS_DTYPE_F16;
	shape->span = 128;
	shape->residual = 128;
}

static int shape_invalid(const char *why, const struct kvs_shape *s)
{
	kvs_log(KVS_LOG_DEBUG,
		"invalid shape (%s): heads %u dim %u G %u bits %u meta %u "
		"S %u R %u",
		why, s->kv_heads, s->head_dim, s->group, s->bits, s->meta_type,
		s->span, s->residual);
	return -KVS_EPARAM;
}

int kvs_shape_check(const struct kvs_shape *s)
{
	uint64_t codes;

	if (s->bits != 2 && s->bits != 4)
		return shape_invalid("bits must be 2 or 4", s);
	if (s->group < 2 || (s->group & (s->group - 1)) != 0)
		return shape_invalid("G must be a power of two >= 2", s);
	if (s->kv_heads == 0 || s->head_dim == 0 || s->head_dim % s->group)
		return shape_invalid("D must be a positive multiple of G", s);
	if (s->head_dim * s->bits % 8)
		return shape_invalid("D codes must fill whole bytes", s);
	if (kvs_dtype_size((enum kvs_dtype)s->meta_type) == 0)
		return shape_invalid("unknown metadata type", s);
	if (s->residual == 0 || s->residual % s->group)
		return shape_invalid("R must be a positive multiple of G", s);
	if (s->span == 0 || s->span % s->residual)
		return shape_invalid("S must be a positive multiple of R", s);
	/* Offsets are 32-bit: keep the biggest section well inside. */
	codes = (uint64_t)s->kv_heads * s->span * s->head_dim;
	if (codes > (1ull << 30))
		return shape_invalid("block too large", s);
	return 0;
}

static void layout_fill(struct kvs_layout *out, const uint32_t *length,
			uint32_t count)
{
	uint32_t at = KVS_HEADER_SIZE;

	memset(out, 0, sizeof(*out));
	out->section_count = count;
	for (uint32_t i = 0; i < count; i++) {
		at = kvs_align_up(at, KVS_SECTION_ALIGN);
		out->offset[i] = at;
		out->length[i] = length[i];
		at += length[i];
	}
	out->total_size = at;
}

int kvs_block_layout(const struct kvs_shape *shape, struct kvs_layout *out)
{
	uint32_t len[KVS_BLOCK_SECTIONS];
	uint32_t heads = shape->kv_heads, s = shape->span, d = shape->head_dim;
	uint32_t e;
	int rc = kvs_shape_check(shape);

	if (rc < 0)
		return rc;
	e = (uint32_t)kvs_dtype_size((enum kvs_dtype)shape->meta_type);
	len[KVS_SEC_KEY_CODES] = heads * s * d * shape->bits / 8;
	len[KVS_SEC_KEY_ORIGIN] = heads * (s / shape->group) * d * e;
	len[KVS_SEC_KEY_STEP] = len[KVS_SEC_KEY_ORIGIN];
	len[KVS_SEC_VAL_CODES] = len[KVS_SEC_KEY_CODES];
	len[KVS_SEC_VAL_ORIGIN] = heads * s * (d / shape->group) * e;
	len[KVS_SEC_VAL_STEP] = len[KVS_SEC_VAL_ORIGIN];
	layout_fill(out, len, KVS_BLOCK_SECTIONS);
	return 0;
}

int kvs_tail_layout(const struct kvs_shape *shape, enum kvs_dtype dtype,
		    uint32_t r_k, uint32_t r_v, struct kvs_layout *out)
{
	uint32_t len[KVS_TAIL_SECTIONS];
	size_t f = kvs_dtype_size(dtype);
	int rc = kvs_shape_check(shape);

	if (rc < 0)
		return rc;
	if (f == 0 || r_k >= shape->residual || r_v > shape->residual) {
		kvs_log(KVS_LOG_DEBUG,
			"invalid tail: dtype %d r_k %u r_v %u R %u", (int)dtype,
			r_k, r_v, shape->residual);
		return -KVS_EPARAM;
	}
	len[KVS_SEC_KEY_RESID] =
		(uint32_t)(shape->kv_heads * r_k * shape->head_dim * f);
	len[KVS_SEC_VAL_RESID] =
		(uint32_t)(shape->kv_heads * r_v * shape->head_dim * f);
	layout_fill(out, len, KVS_TAIL_SECTIONS);
	return 0;
}

int kvs_object_layout(const struct kvs_header *hdr, struct kvs_layout *out)
{
	if (hdr->kind == KVS_KIND_BLOCK)
		return kvs_block_layout(&hdr->shape, out);
	if (hdr->kind == KVS_KIND_TAIL)
		return kvs_tail_layout(&hdr->shape,
				       (enum kvs_dtype)hdr->tail_dtype,
				       hdr->r_k, hdr->r_v, out);
	return -KVS_EKIND;
}

/* Refuses a tile holding NaN or infinity, naming the first bad element. */
static int tile_finite(const float *x, size_t n, const char *what,
		       uint32_t head, size_t first_token, uint32_t row_len)
{
	int bad = 0;

	for (size_t i = 0; i < n; i++)
		bad |= !isfinite(x[i]);
	if (!bad)
		return 0;
	for (size_t i = 0; i < n; i++) {
		if (!isfinite(x[i])) {
			kvs_log(KVS_LOG_DEBUG,
				"non-finite %s: head %u token %zu channel %zu",
				what, head, first_token + i / row_len,
				i % row_len);
			break;
		}
	}
	return -KVS_ENONFINITE;
}

/*
 * Key: one G x D tile at a time (one G-token group of one head): per-channel
 * extremes over the group, the origin and step of each channel, then each
 * token's row of codes.  Inner loops run along channels, contiguous.
 */
static int quantize_keys(const struct kvs_shape *sh, enum kvs_dtype in,
			 const void *keys, uint8_t *codes, uint8_t *origin,
			 uint8_t *step)
{
	uint32_t d_n = sh->head_dim, g_n = sh->group;
	enum kvs_dtype meta = (enum kvs_dtype)sh->meta_type;
	float levels = (float)((1u << sh->bits) - 1u);
	size_t row_bytes = (size_t)d_n * sh->bits / 8;
	float *tile = malloc(sizeof(float) * d_n * (g_n + 4));
	float *lo = tile + (size_t)g_n * d_n, *hi = lo + d_n, *o = hi + d_n;
	float *s = o + d_n;
	uint8_t *c = malloc(d_n);
	int rc = -ENOMEM;

	if (tile == NULL || c == NULL)
		goto out_free;
	rc = 0;
	for (uint32_t h = 0; h < sh->kv_heads; h++) {
		for (uint32_t t0 = 0; t0 < sh->span; t0 += g_n) {
			size_t first = (size_t)h * sh->span + t0;
			size_t meta_at = first / g_n * d_n;

			kvs_widen(in, keys, first * d_n, (size_t)g_n * d_n,
				  tile);
			rc = tile_finite(tile, (size_t)g_n * d_n, "key", h, t0,
					 d_n);
			if (rc < 0)
				goto out_free;
			memcpy(lo, tile, sizeof(float) * d_n);
			memcpy(hi, tile, sizeof(float) * d_n);
			for (uint32_t t = 1; t < g_n; t++) {
				const float *row = tile + (size_t)t * d_n;

				for (uint32_t d = 0; d < d_n; d++) {
					lo[d] = row[d] < lo[d] ? row[d] : lo[d];
					hi[d] = row[d] > hi[d] ? row[d] : hi[d];
				}
			}
			for (uint32_t d = 0; d < d_n; d++) {
				int kind = quant_params(lo[d], hi[d], sh->bits,
							meta, &o[d], &s[d]);

				if (kind < 0) {
					kvs_log(KVS_LOG_DEBUG,
						"key group out of %s range: "
						"head %u token %u channel %u",
						kvs_dtype_name(meta), h, t0, d);
					rc = kind;
					goto out_free;
				}
				kvs_dtype_store(meta, origin, meta_at + d,
						o[d]);
				kvs_dtype_store(meta, step, meta_at + d, s[d]);
				/* A constant channel codes 0 whatever its
				 * values: an infinite step gives q = 0. */
				if (kind == 1)
					s[d] = INFINITY;
			}
			for (uint32_t t = 0; t < g_n; t++) {
				const float *row = tile + (size_t)t * d_n;
				uint8_t *out = codes + (first + t) * row_bytes;

				for (uint32_t d = 0; d < d_n; d++)
					c[d] = quant_code(row[d], o[d], s[d],
							  levels);
				kvs_pack_codes(c, d_n, sh->bits, out);
			}
		}
	}
out_free:
	free(c);
	free(tile);
	return rc;
}

/* Value: each token's channels in groups of G, one origin/step per group. */
static int quantize_values(const struct kvs_shape *sh, enum kvs_dtype in,
			   const void *values, uint8_t *codes, uint8_t *origin,
			   uint8_t *step)
{
	uint32_t d_n = sh->head_dim, g_n = sh->group, groups = d_n / g_n;
	enum kvs_dtype meta = (enum kvs_dtype)sh->meta_type;
	float levels = (float)((1u << sh->bits) - 1u);
	size_t row_bytes = (size_t)d_n * sh->bits / 8;
	size_t tokens = (size_t)sh->kv_heads * sh->span;
	float *row = malloc(sizeof(float) * d_n);
	uint8_t *c = malloc(d_n);
	int rc = -ENOMEM;

	if (row == NULL || c == NULL)
		goto out_free;
	for (size_t ht = 0; ht < tokens; ht++) {
		kvs_widen(in, values, ht * d_n, d_n, row);
		rc = tile_finite(row, d_n, "value", (uint32_t)(ht / sh->span),
				 ht % sh->span, d_n);
		if (rc < 0)
			goto out_free;
		for (uint32_t j = 0; j < groups; j++) {
			const float *x = row + (size_t)j * g_n;
			float lo, hi, o, s;
			int kind;

			group_extremes(x, g_n, &lo, &hi);
			kind = quant_params(lo, hi, sh->bits, meta, &o, &s);
			if (kind < 0) {
				kvs_log(KVS_LOG_DEBUG,
					"value group out of %s range: head %zu "
					"token %zu group %u",
					kvs_dtype_name(meta), ht / sh->span,
					ht % sh->span, j);
				rc = kind;
				goto out_free;
			}
			kvs_dtype_store(meta, origin, ht * groups + j, o);
			kvs_dtype_store(meta, step, ht * groups + j, s);
			if (kind == 1)
				s = INFINITY;
			for (uint32_t i = 0; i < g_n; i++)
				c[(size_t)j * g_n + i] =
					quant_code(x[i], o, s, levels);
		}
		kvs_pack_codes(c, d_n, sh->bits, codes + ht * row_bytes);
	}
	rc = 0;
out_free:
	free(c);
	free(row);
	return rc;
}

int kvs_block_quantize(const struct kvs_shape *shape, enum kvs_dtype in_dtype,
		       const void *keys, const void *values, uint8_t *image)
{
	struct kvs_layout lay;
	int rc = kvs_block_layout(shape, &lay);

	if (rc < 0)
		return rc;
	if (kvs_dtype_size(in_dtype) == 0 || keys == NULL || values == NULL)
		return -KVS_EPARAM;
	rc = quantize_keys(shape, in_dtype, keys,
			   image + lay.offset[KVS_SEC_KEY_CODES],
			   image + lay.offset[KVS_SEC_KEY_ORIGIN],
			   image + lay.offset[KVS_SEC_KEY_STEP]);
	if (rc < 0)
		return rc;
	return quantize_values(shape, in_dtype, values,
			       image + lay.offset[KVS_SEC_VAL_CODES],
			       image + lay.offset[KVS_SEC_VAL_ORIGIN],
			       image + lay.offset[KVS_SEC_VAL_STEP]);
}

void kvs_header_write(const struct kvs_header *hdr, uint8_t *out)
{
	memset(out, 0, KVS_HEADER_SIZE);
	memcpy(out + HDR_MAGIC, kvs_magic, sizeof(kvs_magic));
	kvs_put16(out + HDR_VERSION, hdr->version);
	out[HDR_KIND] = hdr->kind;
	out[HDR_FLAGS] = hdr->flags;
	out[HDR_BITS] = hdr->shape.bits;
	out[HDR_META] = hdr->shape.meta_type;
	out[HDR_LAYOUT] = hdr->layout;
	out[HDR_TAIL_DTYPE] = hdr->tail_dtype;
	kvs_put16(out + HDR_GROUP, hdr->shape.group);
	kvs_put16(out + HDR_KV_HEADS, hdr->shape.kv_heads);
	kvs_put16(out + HDR_HEAD_DIM, hdr->shape.head_dim);
	kvs_put16(out + HDR_SECTIONS, (uint16_t)hdr->section_count);
	kvs_put32(out + HDR_SPAN, hdr->shape.span);
	kvs_put32(out + HDR_RESIDUAL, hdr->shape.residual);
	kvs_put32(out + HDR_LAYER, hdr->ident.layer);
	kvs_put32(out + HDR_TOKENS, hdr->tokens);
	kvs_put32(out + HDR_R_K, hdr->r_k);
	kvs_put32(out + HDR_R_V, hdr->r_v);
	kvs_put32(out + HDR_HEADER_SIZE, KVS_HEADER_SIZE);
	kvs_put64(out + HDR_FIRST_POS, hdr->ident.first_pos);
	kvs_put64(out + HDR_TOTAL_SIZE, hdr->total_size);
	memcpy(out + HDR_BLOCK_ID, hdr->ident.block_id, KVS_ID_SIZE);
	memcpy(out + HDR_PARENT_ID, hdr->ident.parent_id, KVS_ID_SIZE);
	memcpy(out + HDR_MODEL_FP, hdr->ident.model_fp, KVS_ID_SIZE);
	for (uint32_t i = 0; i < hdr->section_count; i++) {
		uint8_t *e = out + HDR_SECTION_TABLE + i * HDR_SECTION_ENTRY;

		kvs_put32(e + SEC_OFFSET, hdr->section[i].offset);
		kvs_put32(e + SEC_STORED, hdr->section[i].stored_len);
		kvs_put32(e + SEC_LOGICAL, hdr->section[i].logical_len);
		e[SEC_CODEC] = hdr->section[i].codec;
		kvs_put64(e + SEC_CHECKSUM, hdr->section[i].checksum);
	}
	kvs_put64(out + HDR_CHECKSUM, kvs_xxh3(out, HDR_CHECKSUM));
}

/* The wire's namespace rewrite (docs/PROTOCOL.md) names these offsets. */
_Static_assert(HDR_BLOCK_ID == 64 && HDR_CHECKSUM == 504,
	       "docs/FORMAT.md and docs/PROTOCOL.md give the block id at 64 "
	       "and the header checksum at 504");

void kvs_header_set_block_id(uint8_t *hdr, const uint8_t id[KVS_ID_SIZE])
{
	memcpy(hdr + HDR_BLOCK_ID, id, KVS_ID_SIZE);
	kvs_put64(hdr + HDR_CHECKSUM, kvs_xxh3(hdr, HDR_CHECKSUM));
}

/* Header of a raw object laid out as @lay; checksums the sections of
 * @image and zeroes its padding. */
static void finish_raw(struct kvs_header *hdr, const struct kvs_layout *lay,
		       uint8_t *image)
{
	uint32_t end = KVS_HEADER_SIZE;

	hdr->version = KVS_FORMAT_VERSION;
	hdr->layout = KVS_LAYOUT_TOKEN_MAJOR;
	hdr->section_count = lay->section_count;
	hdr->total_size = lay->total_size;
	for (uint32_t i = 0; i < lay->section_count; i++) {
		struct kvs_section *sec = &hdr->section[i];

		memset(image + end, 0, lay->offset[i] - end);
		sec->offset = lay->offset[i];
		sec->stored_len = sec->logical_len = lay->length[i];
		sec->codec = KVS_CODEC_RAW;
		sec->checksum = kvs_xxh3(image + sec->offset, sec->stored_len);
		end = lay->offset[i] + lay->length[i];
	}
	kvs_header_write(hdr, image);
}

int kvs_block_finish(const struct kvs_shape *shape,
		     const struct kvs_ident *ident, uint8_t *image)
{
	struct kvs_header hdr = { 0 };
	struct kvs_layout lay;
	int rc = kvs_block_layout(shape, &lay);

	if (rc < 0)
		return rc;
	hdr.kind = KVS_KIND_BLOCK;
	hdr.shape = *shape;
	hdr.tokens = shape->span;
	hdr.ident = *ident;
	finish_raw(&hdr, &lay, image);
	return 0;
}

int kvs_object_set_ident(uint8_t *obj, size_t len,
			 const struct kvs_ident *ident)
{
	struct kvs_header hdr;
	int rc = kvs_header_decode(obj, len, 0, &hdr);

	if (rc < 0)
		return rc;
	hdr.ident = *ident;
	kvs_header_write(&hdr, obj);
	return 0;
}

/* Hands @image out as the object, LZ4 re-encoded when asked. */
static int emit(uint8_t *image, size_t len, unsigned flags, uint8_t **out,
		size_t *out_len)
{
	int rc;

	if (flags & KVS_ENCODE_LZ4) {
		rc = kvs_object_compress(image, len, out, out_len);
		free(image);
		return rc;
	}
	*out = image;
	*out_len = len;
	return 0;
}

int kvs_block_seal(const struct kvs_shape *shape, const struct kvs_ident *ident,
		   enum kvs_dtype in_dtype, const void *keys,
		   const void *values, unsigned flags, uint8_t **out,
		   size_t *out_len)
{
	struct kvs_layout lay;
	uint8_t *image;
	int rc = kvs_block_layout(shape, &lay);

	if (rc < 0)
		return rc;
	image = calloc(1, lay.total_size);
	if (image == NULL)
		return -ENOMEM;
	rc = kvs_block_quantize(shape, in_dtype, keys, values, image);
	if (rc < 0)
		goto out_free_image;
	rc = kvs_block_finish(shape, ident, image);
	if (rc < 0)
		goto out_free_image;
	return emit(image, lay.total_size, flags, out, out_len);

out_free_image:
	free(image);
	return rc;
}

/* Copies @rows x D elements per head of @src into a @dtype section,
 * refusing non-finite values. */
static int tail_copy(const struct kvs_shape *sh, enum kvs_dtype dtype,
		     const void *src, uint32_t rows, uint8_t *dst)
{
	size_t n = (size_t)sh->kv_heads * rows * sh->head_dim;

	for (size_t i = 0; i < n; i++) {
		float v = kvs_dtype_load(dtype, src, i);

		if (!isfinite(v)) {
			kvs_log(KVS_LOG_DEBUG,
				"non-finite residual element %zu", i);
			return -KVS_ENONFINITE;
		}
	}
	memcpy(dst, src, n * kvs_dtype_size(dtype));
	return 0;
}

int kvs_tail_encode(const struct kvs_shape *shape,
		    const struct kvs_ident *ident, enum kvs_dtype dtype,
		    uint32_t r_k, uint32_t r_v, const void *keys,
		    const void *values, unsigned flags, uint8_t **out,
		    size_t *out_len)
{
	struct kvs_header hdr = { 0 };
	struct kvs_layout lay;
	uint8_t *image;
	int rc = kvs_tail_layout(shape, dtype, r_k, r_v, &lay);

	if (rc < 0)
		return rc;
	image = calloc(1, lay.total_size);
	if (image == NULL)
		return -ENOMEM;
	rc = tail_copy(shape, dtype, keys, r_k,
		       image + lay.offset[KVS_SEC_KEY_RESID]);
	if (rc < 0)
		goto out_free_image;
	rc = tail_copy(shape, dtype, values, r_v,
		       image + lay.offset[KVS_SEC_VAL_RESID]);
	if (rc < 0)
		goto out_free_image;
	hdr.kind = KVS_KIND_TAIL;
	hdr.tail_dtype = (uint8_t)dtype;
	hdr.shape = *shape;
	/* A tail covers tokens [first_pos, first_pos + max(r_k, r_v)): its
	 * Key rows are the last r_k of them, its Value rows the last r_v. */
	hdr.tokens = r_k > r_v ? r_k : r_v;
	hdr.r_k = r_k;
	hdr.r_v = r_v;
	hdr.ident = *ident;
	finish_raw(&hdr, &lay, image);
	return emit(image, lay.total_size, flags, out, out_len);

out_free_image:
	free(image);
	return rc;
}
