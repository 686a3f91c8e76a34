/*
 * decode.c - validation and reading of kvformat objects.
 *
 * Checks run in the order DESIGN.md §3 fixes, each with its own error:
 * length, magic, version, header checksum, header fields, section bounds
 * (in order, aligned, non-overlapping, logical lengths equal to the shape's
 * layout), zero padding, section checksums, LZ4 output length, finite
 * metadata.  Nothing is read before the check that makes it safe to read.
 */
#include <errno.h>
#include <lz4.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "format_internal.h"
#include "kvstash/kvformat.h"
#include "kvstash/log.h"
#include "quant_internal.h"

static int reject(int err, const char *what)
{
	kvs_log(KVS_LOG_DEBUG, "object rejected: %s (%s)", what,
		kvs_strerror(err));
	return err;
}

static void header_parse(const uint8_t *b, struct kvs_header *h)
{
	memset(h, 0, sizeof(*h));
	h->version = kvs_get16(b + HDR_VERSION);
	h->kind = b[HDR_KIND];
	h->flags = b[HDR_FLAGS];
	h->shape.bits = b[HDR_BITS];
	h->shape.meta_type = b[HDR_META];
	h->layout = b[HDR_LAYOUT];
	h->tail_dtype = b[HDR_TAIL_DTYPE];
	h->shape.group = kvs_get16(b + HDR_GROUP);
	h->shape.kv_heads = kvs_get16(b + HDR_KV_HEADS);
	h->shape.head_dim = kvs_get16(b + HDR_HEAD_DIM);
	h->section_count = kvs_get16(b + HDR_SECTIONS);
	h->shape.span = kvs_get32(b + HDR_SPAN);
	h->shape.residual = kvs_get32(b + HDR_RESIDUAL);
	h->ident.layer = kvs_get32(b + HDR_LAYER);
	h->tokens = kvs_get32(b + HDR_TOKENS);
	h->r_k = kvs_get32(b + HDR_R_K);
	h->r_v = kvs_get32(b + HDR_R_V);
	h->ident.first_pos = kvs_get64(b + HDR_FIRST_POS);
	h->total_size = kvs_get64(b + HDR_TOTAL_SIZE);
	memcpy(h->ident.block_id, b + HDR_BLOCK_ID, KVS_ID_SIZE);
	memcpy(h->ident.parent_id, b + HDR_PARENT_ID, KVS_ID_SIZE);
	memcpy(h->ident.model_fp, b + HDR_MODEL_FP, KVS_ID_SIZE);
	for (uint32_t i = 0; i < KVS_SECTION_MAX; i++) {
		const uint8_t *e =
			b + HDR_SECTION_TABLE + i * HDR_SECTION_ENTRY;

		h->section[i].offset = kvs_get32(e + SEC_OFFSET);
		h->section[i].stored_len = kvs_get32(e + SEC_STORED);
		h->section[i].logical_len = kvs_get32(e + SEC_LOGICAL);
		h->section[i].codec = e[SEC_CODEC];
		h->section[i].checksum = kvs_get64(e + SEC_CHECKSUM);
	}
}

static int all_zero(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i])
			return 0;
	return 1;
}

/* Field values a valid writer never produces (after the checksum passed,
 * these mean a buggy or hostile writer). */
static int header_fields_check(const uint8_t *b, const struct kvs_header *h,
			       struct kvs_layout *lay)
{
	uint32_t expect;

	if (kvs_get32(b + HDR_HEADER_SIZE) != KVS_HEADER_SIZE ||
	    h->layout != KVS_LAYOUT_TOKEN_MAJOR ||
	    (h->flags & ~KVS_FLAG_LZ4) != 0 ||
	    !all_zero(b + HDR_RESERVED, HDR_CHECKSUM - HDR_RESERVED))
		return reject(-KVS_ECORRUPT, "header size, layout or flags");
	if (h->kind == KVS_KIND_BLOCK) {
		if (h->tail_dtype != 0 || h->r_k != 0 || h->r_v != 0 ||
		    h->tokens != h->shape.span)
			return reject(-KVS_ECORRUPT, "block fields");
		expect = KVS_BLOCK_SECTIONS;
	} else if (h->kind == KVS_KIND_TAIL) {
		if (h->tokens != (h->r_k > h->r_v ? h->r_k : h->r_v))
			return reject(-KVS_ECORRUPT, "tail token count");
		expect = KVS_TAIL_SECTIONS;
	} else {
		return reject(-KVS_ECORRUPT, "unknown object kind");
	}
	if (h->section_count != expect)
		return reject(-KVS_ECORRUPT, "section count");
	if (kvs_object_layout(h, lay) < 0)
		return reject(-KVS_ECORRUPT, "shape parameters");
	for (uint32_t i = 0; i < KVS_SECTION_MAX; i++) {
		const uint8_t *e =
			b + HDR_SECTION_TABLE + i * HDR_SECTION_ENTRY;

		if (i >= expect ? !all_zero(e, HDR_SECTION_ENTRY)
				: !all_zero(e + SEC_CODEC + 1, 3) ||
					  !all_zero(e + SEC_CHECKSUM + 8, 8))
			return reject(-KVS_ECORRUPT,
				      "section table reserved bytes");
	}
	return 0;
}

static int sections_check(const struct kvs_header *h,
			  const struct kvs_layout *lay, size_t len)
{
	uint64_t end = KVS_HEADER_SIZE;

	if (h->total_size > len)
		return reject(-KVS_ETRUNC, "shorter than its total size");
	if (h->total_size < len)
		return reject(-KVS_EBOUNDS, "bytes past its total size");
	for (uint32_t i = 0; i < h->section_count; i++) {
		const struct kvs_section *s = &h->section[i];

		if (s->offset % KVS_SECTION_ALIGN || s->offset < end ||
		    (uint64_t)s->offset + s->stored_len > h->total_size)
			return reject(-KVS_EBOUNDS, "section offset");
		if (s->logical_len != lay->length[i])
			return reject(-KVS_EBOUNDS, "section logical length");
		if (s->codec == KVS_CODEC_RAW) {
			if (s->stored_len != s->logical_len)
				return reject(-KVS_EBOUNDS,
					      "raw section length");
		} else if (s->codec == KVS_CODEC_LZ4) {
			/* LZ4 expands at most about 255:1; refusing more
			 * keeps a forged header from making us allocate
			 * gigabytes before the decoder fails. */
			if (!(h->flags & KVS_FLAG_LZ4) ||
			    s->stored_len >= s->logical_len ||
			    s->stored_len == 0 ||
			    s->logical_len > 255ull * s->stored_len + 255)
				return reject(-KVS_EBOUNDS,
					      "lz4 section length");
		} else {
			return reject(-KVS_EBOUNDS, "unknown section codec");
		}
		end = (uint64_t)s->offset + s->stored_len;
	}
	if (end != h->total_size)
		return reject(-KVS_EBOUNDS, "total size");
	return 0;
}

int kvs_header_decode(const uint8_t *buf, size_t len, unsigned flags,
		      struct kvs_header *out)
{
	struct kvs_header h;
	struct kvs_layout lay;
	int rc;

	if (len < sizeof(kvs_magic))
		return reject(-KVS_ETRUNC, "shorter than the magic");
	if (memcmp(buf + HDR_MAGIC, kvs_magic, sizeof(kvs_magic)) != 0)
		return reject(-KVS_EMAGIC, "magic");
	if (len < HDR_VERSION + 2)
		return reject(-KVS_ETRUNC, "shorter than the version");
	if (kvs_get16(buf + HDR_VERSION) != KVS_FORMAT_VERSION)
		return reject(-KVS_EVERSION, "version");
	if (len < KVS_HEADER_SIZE)
		return reject(-KVS_ETRUNC, "shorter than the header");
	if (!(flags & KVS_VERIFY_NO_CHECKSUMS) &&
	    kvs_get64(buf + HDR_CHECKSUM) != kvs_xxh3(buf, HDR_CHECKSUM))
		return reject(-KVS_EHDRSUM, "header checksum");
	header_parse(buf, &h);
	rc = header_fields_check(buf, &h, &lay);
	if (rc < 0)
		return rc;
	rc = sections_check(&h, &lay, len);
	if (rc < 0)
		return rc;
	*out = h;
	return 0;
}

static int metadata_finite(enum kvs_dtype t, const uint8_t *origin,
			   const uint8_t *step, size_t n, float levels)
{
	int bad = 0;

	/* Branch-free scans: these run on every block a server touches. */
	if (t == KVS_DTYPE_F16 || t == KVS_DTYPE_BF16) {
		uint16_t inf = t == KVS_DTYPE_F16 ? 0x7c00u : 0x7f80u;

		for (size_t i = 0; i < n; i++) {
			uint16_t o = kvs_get16(origin + 2 * i);
			uint16_t s = kvs_get16(step + 2 * i);

			bad |= (o & inf) == inf;
			bad |= (s & inf) == inf;
			bad |= (s & 0x8000u) != 0 || (s & 0x7fffu) == 0;
		}
	} else {
		for (size_t i = 0; i < n; i++) {
			uint32_t o = kvs_get32(origin + 4 * i);
			uint32_t s = kvs_get32(step + 4 * i);

			bad |= (o & 0x7f800000u) == 0x7f800000u;
			bad |= (s & 0x7f800000u) == 0x7f800000u;
			bad |= (s & 0x80000000u) != 0 || (s & 0x7fffffffu) == 0;
		}
	}
	if (bad || t == KVS_DTYPE_F16)
		return bad ? -KVS_EMETA : 0;
	/* bf16 and fp32 metadata can hold finite values whose top code
	 * reconstructs past FLT_MAX; the sealer never writes them. */
	for (size_t i = 0; i < n; i++)
		bad |= !isfinite(fmaf(kvs_dtype_load(t, step, i), levels,
				      kvs_dtype_load(t, origin, i)));
	return bad ? -KVS_EMETA : 0;
}

/* Whether all @n values of type @t are finite: a value is not exactly
 * when its exponent bits are all ones.  A branch-free scan of the bits
 * (no widening): tails are checked whole on every put. */
static bool values_finite(enum kvs_dtype t, const uint8_t *p, size_t n)
{
	int bad = 0;

	if (t == KVS_DTYPE_F32) {
		for (size_t i = 0; i < n; i++)
			bad |= (kvs_get32(p + 4 * i) & 0x7f800000u) ==
			       0x7f800000u;
		return !bad;
	}
	uint16_t inf = t == KVS_DTYPE_F16 ? 0x7c00u : 0x7f80u;

	for (size_t i = 0; i < n; i++)
		bad |= (kvs_get16(p + 2 * i) & inf) == inf;
	return !bad;
}

static int payload_finite(const struct kvs_view *v)
{
	const struct kvs_header *h = &v->hdr;

	if (h->kind == KVS_KIND_BLOCK) {
		enum kvs_dtype m = (enum kvs_dtype)h->shape.meta_type;
		size_t e = kvs_dtype_size(m);
		float levels = (float)((1u << h->shape.bits) - 1u);

		if (metadata_finite(m, v->section[KVS_SEC_KEY_ORIGIN],
				    v->section[KVS_SEC_KEY_STEP],
				    h->section[KVS_SEC_KEY_ORIGIN].logical_len /
					    e,
				    levels) ||
		    metadata_finite(m, v->section[KVS_SEC_VAL_ORIGIN],
				    v->section[KVS_SEC_VAL_STEP],
				    h->section[KVS_SEC_VAL_ORIGIN].logical_len /
					    e,
				    levels))
			return reject(-KVS_EMETA, "metadata");
		return 0;
	}
	for (uint32_t i = 0; i < KVS_TAIL_SECTIONS; i++) {
		enum kvs_dtype t = (enum kvs_dtype)h->tail_dtype;
		size_t n = h->section[i].logical_len / kvs_dtype_size(t);

		if (!values_finite(t, v->section[i], n))
			return reject(-KVS_EMETA, "residual values");
	}
	return 0;
}

void kvs_view_release(struct kvs_view *view)
{
	if (view == NULL)
		return;
	free(view->owned);
	view->owned = NULL;
}

int kvs_object_open(const uint8_t *buf, size_t len, unsigned flags,
		    struct kvs_view *out)
{
	struct kvs_view v = { 0 };
	size_t owned_len = 0, at = 0;
	uint32_t end = KVS_HEADER_SIZE;
	int rc = kvs_header_decode(buf, len, flags, &v.hdr);

	if (rc < 0)
		return rc;
	for (uint32_t i = 0; i < v.hdr.section_count; i++) {
		const struct kvs_section *s = &v.hdr.section[i];

		if (!all_zero(buf + end, s->offset - end))
			return reject(-KVS_ECORRUPT, "non-zero padding");
		end = s->offset + s->stored_len;
		if (s->codec == KVS_CODEC_LZ4)
			owned_len += s->logical_len;
	}
	if (!(flags & KVS_VERIFY_NO_CHECKSUMS)) {
		for (uint32_t i = 0; i < v.hdr.section_count; i++) {
			const struct kvs_section *s = &v.hdr.section[i];

			if (kvs_xxh3(buf + s->offset, s->stored_len) !=
			    s->checksum)
				return reject(-KVS_ESECTSUM,
					      "section checksum");
		}
	}
	if (owned_len) {
		v.owned = malloc(owned_len);
		if (v.owned == NULL)
			return -ENOMEM;
	}
	for (uint32_t i = 0; i < v.hdr.section_count; i++) {
		const struct kvs_section *s = &v.hdr.section[i];
		int got;

		if (s->codec == KVS_CODEC_RAW) {
			v.section[i] = buf + s->offset;
			continue;
		}
		got = LZ4_decompress_safe(
			(const char *)buf + s->offset, (char *)v.owned + at,
			(int)s->stored_len, (int)s->logical_len);
		if (got != (int)s->logical_len) {
			rc = reject(-KVS_ELZ4, "lz4 section");
			goto out_release;
		}
		v.section[i] = v.owned + at;
		at += s->logical_len;
	}
	rc = payload_finite(&v);
	if (rc < 0)
		goto out_release;
	*out = v;
	return 0;

out_release:
	kvs_view_release(&v);
	return rc;
}

int kvs_object_verify(const uint8_t *buf, size_t len, unsigned flags)
{
	struct kvs_view v;
	int rc = kvs_object_open(buf, len, flags, &v);

	if (rc == 0)
		kvs_view_release(&v);
	return rc;
}

static inline float meta_at(const struct kvs_view *v, int sec, size_t i)
{
	return kvs_dtype_load((enum kvs_dtype)v->hdr.shape.meta_type,
			      v->section[sec], i);
}

float kvs_block_key(const struct kvs_view *v, uint32_t head, uint32_t token,
		    uint32_t channel)
{
	const struct kvs_shape *sh = &v->hdr.shape;
	size_t row = (size_t)head * sh->span + token;
	size_t m = ((size_t)head * (sh->span / sh->group) + token / sh->group) *
			   sh->head_dim +
		   channel;
	unsigned code =
		kvs_packed_code(v->section[KVS_SEC_KEY_CODES] +
					row * sh->head_dim * sh->bits / 8,
				channel, sh->bits);

	return kvs_dequant(meta_at(v, KVS_SEC_KEY_ORIGIN, m),
			   meta_at(v, KVS_SEC_KEY_STEP, m), code);
}

float kvs_block_value(const struct kvs_view *v, uint32_t head, uint32_t token,
		      uint32_t channel)
{
	const struct kvs_shape *sh = &v->hdr.shape;
	size_t row = (size_t)head * sh->span + token;
	size_t m = row * (sh->head_dim / sh->group) + channel / sh->group;
	unsigned code =
		kvs_packed_code(v->section[KVS_SEC_VAL_CODES] +
					row * sh->head_dim * sh->bits / 8,
				channel, sh->bits);

	return kvs_dequant(meta_at(v, KVS_SEC_VAL_ORIGIN, m),
			   meta_at(v, KVS_SEC_VAL_STEP, m), code);
}

/* One row of D reconstructions, fmaf(step, code, origin); built twice so
 * that CPUs with FMA run it as one vector instruction per 8 channels.
 * Not under ThreadSanitizer, which cannot run the clones' resolver (it
 * runs at load time, before the sanitizer's runtime exists); fmaf gives
 * the same results either way. */
#ifdef __SANITIZE_THREAD__
#define DEQUANT_CLONES
#else
#define DEQUANT_CLONES __attribute__((target_clones("fma", "default")))
#endif
DEQUANT_CLONES static void dequant_row(const uint8_t *codes,
				       const float *origin, const float *step,
				       uint32_t n, float *out)
{
	for (uint32_t d = 0; d < n; d++)
		out[d] = fmaf(step[d], (float)codes[d], origin[d]);
}

/* Spreads @groups per-group values over their G channels each, in place
 * from the back so that @x holds groups * G values afterwards. */
static void spread_groups(float *x, uint32_t groups, uint32_t g_n)
{
	for (uint32_t j = groups; j-- > 0;)
		for (uint32_t i = g_n; i-- > 0;)
			x[j * g_n + i] = x[j];
}

int kvs_block_dequantize(const struct kvs_view *view, float *keys,
			 float *values)
{
	const struct kvs_shape *sh = &view->hdr.shape;
	enum kvs_dtype m = (enum kvs_dtype)sh->meta_type;
	uint32_t d_n = sh->head_dim, g_n = sh->group, groups = d_n / g_n;
	size_t row_bytes = (size_t)d_n * sh->bits / 8;
	size_t rows = (size_t)sh->kv_heads * sh->span;
	float *o = malloc(sizeof(float) * 2 * d_n);
	float *s = o + d_n;
	uint8_t *c = malloc(d_n);
	int rc = -ENOMEM;

	if (view->hdr.kind != KVS_KIND_BLOCK) {
		rc = -KVS_EKIND;
		goto out_free;
	}
	if (o == NULL || c == NULL)
		goto out_free;
	for (size_t r = 0; keys && r < rows; r++) {
		/* Key metadata changes once per G tokens. */
		if (r % g_n == 0) {
			kvs_widen(m, view->section[KVS_SEC_KEY_ORIGIN],
				  r / g_n * d_n, d_n, o);
			kvs_widen(m, view->section[KVS_SEC_KEY_STEP],
				  r / g_n * d_n, d_n, s);
		}
		kvs_unpack_codes(view->section[KVS_SEC_KEY_CODES] +
					 r * row_bytes,
				 d_n, sh->bits, c);
		dequant_row(c, o, s, d_n, keys + r * d_n);
	}
	for (size_t r = 0; values && r < rows; r++) {
		kvs_widen(m, view->section[KVS_SEC_VAL_ORIGIN], r * groups,
			  groups, o);
		kvs_widen(m, view->section[KVS_SEC_VAL_STEP], r * groups,
			  groups, s);
		kvs_unpack_codes(view->section[KVS_SEC_VAL_CODES] +
					 r * row_bytes,
				 d_n, sh->bits, c);
		spread_groups(o, groups, g_n);
		spread_groups(s, groups, g_n);
		dequant_row(c, o, s, d_n, values + r * d_n);
	}
	rc = 0;
out_free:
	free(c);
	free(o);
	return rc;
}

/* The check an object failed, by its error (kvformat.h). */
const char *kvs_check_name(int err)
{
	switch (err < 0 ? -err : err) {
	case 0:
		return "ok";
	case KVS_ETRUNC:
		return "length";
	case KVS_EMAGIC:
		return "magic";
	case KVS_EVERSION:
		return "version";
	case KVS_EHDRSUM:
		return "header checksum";
	case KVS_ECORRUPT:
		return "header fields";
	case KVS_EBOUNDS:
		return "section bounds";
	case KVS_ESECTSUM:
		return "section checksum";
	case KVS_ELZ4:
		return "lz4 length";
	case KVS_EMETA:
		return "finite metadata";
	case KVS_EKIND:
		return "object kind";
	default:
		return "other";
	}
}
