/*
 * test_block.c - sealed blocks and residual tails through the format:
 * canonical layout, round trips for every bits x metadata x input type,
 * the section bytes against the group quantizer (the layout the fused
 * kernel reads), LZ4 kept only where it pays, and validation: every
 * single-byte corruption and every truncation refused, and each check's
 * own error in the documented order.  Header offsets are the ones
 * docs/FORMAT.md documents, written down here independently of the code.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kvstash/error.h"
#include "kvstash/kvformat.h"
#include "objedit.h"
#include "testutil.h"

static const enum kvs_dtype all_types[] = { KVS_DTYPE_F32, KVS_DTYPE_F16,
					    KVS_DTYPE_BF16 };

static void small_shape(struct kvs_shape *sh, unsigned bits,
			enum kvs_dtype meta)
{
	kvs_shape_default(sh, 2, 64);
	sh->bits = (uint8_t)bits;
	sh->meta_type = (uint8_t)meta;
	sh->span = 64;
	sh->residual = 64;
}

static void tiny_shape(struct kvs_shape *sh)
{
	kvs_shape_default(sh, 1, 32);
	sh->span = 32;
	sh->residual = 32;
}

static void test_ident_fill(struct kvs_ident *id)
{
	memset(id, 0, sizeof(*id));
	for (int i = 0; i < KVS_ID_SIZE; i++) {
		id->block_id[i] = (uint8_t)(i + 1);
		id->parent_id[i] = (uint8_t)(0x80 | i);
		id->model_fp[i] = (uint8_t)(0x33 ^ i);
	}
	id->layer = 7;
	id->first_pos = 4096;
}

/*
 * K/V of @n elements in @dtype: keys with a few outlier channels (the
 * per-channel case the format is for), values with per-token scales,
 * some constant groups, and @ref the values as the block sees them.
 */
static void *make_input(const struct kvs_shape *sh, enum kvs_dtype dtype,
			int is_key, uint64_t seed, float *ref)
{
	size_t n = (size_t)sh->kv_heads * sh->span * sh->head_dim;
	uint8_t *buf = malloc(n * kvs_dtype_size(dtype));
	struct kvs_rng rng = { seed | 1 };

	assert_non_null(buf);
	for (size_t i = 0; i < n; i++) {
		size_t d = i % sh->head_dim, t = i / sh->head_dim % sh->span;
		float x = kvs_rng_uniform(&rng, -1.0f, 1.0f);

		if (is_key && d % 13 == 3)
			x = 40.0f + 8.0f * x; /* outlier channel */
		else if (!is_key)
			x *= (float)(1 + t % 5);
		if (d / sh->group == 1 && t % 7 == 0 && !is_key)
			x = 0.25f; /* a constant Value group */
		kvs_dtype_store(dtype, buf, i, x);
		ref[i] = kvs_dtype_load(dtype, buf, i);
	}
	return buf;
}

struct sealed {
	struct kvs_shape shape;
	enum kvs_dtype dtype;
	float *keys, *values; /* reference input, as floats */
	void *raw_keys, *raw_values;
	uint8_t *obj;
	size_t len;
};

static void seal_block(struct sealed *s, const struct kvs_shape *sh,
		       enum kvs_dtype dtype, unsigned flags, uint64_t seed)
{
	size_t n = (size_t)sh->kv_heads * sh->span * sh->head_dim;
	struct kvs_ident id;

	s->shape = *sh;
	s->dtype = dtype;
	s->keys = malloc(n * sizeof(float));
	s->values = malloc(n * sizeof(float));
	assert_non_null(s->keys);
	assert_non_null(s->values);
	s->raw_keys = make_input(sh, dtype, 1, seed, s->keys);
	s->raw_values = make_input(sh, dtype, 0, seed * 31 + 7, s->values);
	test_ident_fill(&id);
	assert_int_equal(kvs_block_seal(sh, &id, dtype, s->raw_keys,
					s->raw_values, flags, &s->obj, &s->len),
			 0);
}

static void sealed_free(struct sealed *s)
{
	free(s->keys);
	free(s->values);
	free(s->raw_keys);
	free(s->raw_values);
	free(s->obj);
}

static void test_layout_canonical(void **state)
{
	struct kvs_shape sh;
	struct kvs_layout lay;
	uint32_t e = 2, end = KVS_HEADER_SIZE;
	uint32_t want[KVS_BLOCK_SECTIONS];

	(void)state;
	kvs_shape_default(&sh, 8, 128);
	assert_int_equal(kvs_block_layout(&sh, &lay), 0);
	assert_int_equal(lay.section_count, KVS_BLOCK_SECTIONS);
	want[KVS_SEC_KEY_CODES] = 8 * 128 * 128 * 2 / 8;
	want[KVS_SEC_KEY_ORIGIN] = 8 * (128 / 32) * 128 * e;
	want[KVS_SEC_KEY_STEP] = want[KVS_SEC_KEY_ORIGIN];
	want[KVS_SEC_VAL_CODES] = want[KVS_SEC_KEY_CODES];
	want[KVS_SEC_VAL_ORIGIN] = 8 * 128 * (128 / 32) * e;
	want[KVS_SEC_VAL_STEP] = want[KVS_SEC_VAL_ORIGIN];
	for (int i = 0; i < KVS_BLOCK_SECTIONS; i++) {
		assert_int_equal(lay.length[i], want[i]);
		assert_int_equal(lay.offset[i] % KVS_SECTION_ALIGN, 0);
		assert_true(lay.offset[i] >= end);
		assert_true(lay.offset[i] < end + KVS_SECTION_ALIGN);
		end = lay.offset[i] + lay.length[i];
	}
	assert_int_equal(lay.offset[0], KVS_HEADER_SIZE);
	assert_int_equal(lay.total_size, end);
	/* The 96 KiB of codes and metadata for this shape. */
	assert_int_equal(lay.total_size, 512 + 32768 * 2 + 8192 * 4);

	sh.residual = 96; /* S not a multiple of R */
	assert_int_equal(kvs_block_layout(&sh, &lay), -KVS_EPARAM);
	kvs_shape_default(&sh, 8, 128);
	sh.group = 48;
	assert_int_equal(kvs_block_layout(&sh, &lay), -KVS_EPARAM);
	kvs_shape_default(&sh, 8, 100); /* D not a multiple of G */
	assert_int_equal(kvs_block_layout(&sh, &lay), -KVS_EPARAM);
	kvs_shape_default(&sh, 8, 128);
	sh.bits = 3;
	assert_int_equal(kvs_block_layout(&sh, &lay), -KVS_EPARAM);
	kvs_shape_default(&sh, 8, 128);
	sh.meta_type = 0;
	assert_int_equal(kvs_block_layout(&sh, &lay), -KVS_EPARAM);
}

/* Reconstruction error of every Key and Value group within the bound. */
static void check_group_errors(const struct sealed *s, const float *keys,
			       const float *values)
{
	const struct kvs_shape *sh = &s->shape;
	enum kvs_dtype meta = (enum kvs_dtype)sh->meta_type;
	uint32_t D = sh->head_dim, S = sh->span, G = sh->group;

	for (uint32_t h = 0; h < sh->kv_heads; h++) {
		for (uint32_t t0 = 0; t0 < S; t0 += G) {
			for (uint32_t d = 0; d < D; d++) {
				float lo = INFINITY, hi = -INFINITY;
				size_t at = ((size_t)h * S + t0) * D + d;

				for (uint32_t t = 0; t < G; t++) {
					lo = fminf(lo, s->keys[at + t * D]);
					hi = fmaxf(hi, s->keys[at + t * D]);
				}
				for (uint32_t t = 0; t < G; t++)
					assert_true(
						fabs((double)keys[at + t * D] -
						     s->keys[at + t * D]) <=
						test_group_bound(lo, hi,
								 sh->bits,
								 meta));
			}
		}
		for (uint32_t t = 0; t < S; t++) {
			for (uint32_t d0 = 0; d0 < D; d0 += G) {
				size_t at = ((size_t)h * S + t) * D + d0;
				float lo = INFINITY, hi = -INFINITY;

				for (uint32_t c = 0; c < G; c++) {
					lo = fminf(lo, s->values[at + c]);
					hi = fmaxf(hi, s->values[at + c]);
				}
				for (uint32_t c = 0; c < G; c++)
					assert_true(
						fabs((double)values[at + c] -
						     s->values[at + c]) <=
						test_group_bound(lo, hi,
								 sh->bits,
								 meta));
			}
		}
	}
}

/*
 * The section bytes are the documented layout: Key codes [h][t][D*b/8]
 * and metadata [h][t/G][D]; Value codes [h][t][D*b/8] and metadata
 * [h][t][D/G]; each group bit-identical to kvs_quant_group's answer.
 */
static void check_sections(const struct sealed *s, const struct kvs_view *v)
{
	const struct kvs_shape *sh = &s->shape;
	enum kvs_dtype meta = (enum kvs_dtype)sh->meta_type;
	uint32_t D = sh->head_dim, S = sh->span, G = sh->group, b = sh->bits;
	size_t row = (size_t)D * b / 8;
	uint8_t codes[256];
	float o, st;

	for (uint32_t h = 0; h < sh->kv_heads; h++) {
		for (uint32_t g = 0; g < S / G; g++) {
			for (uint32_t d = 0; d < D; d++) {
				size_t m = ((size_t)h * (S / G) + g) * D + d;

				assert_int_equal(
					kvs_quant_group(s->keys +
								((size_t)h * S +
								 g * G) *
									D +
								d,
							G, D, b, meta, codes,
							&o, &st),
					0);
				assert_true(
					kvs_dtype_load(
						meta,
						v->section[KVS_SEC_KEY_ORIGIN],
						m) == o);
				assert_true(
					kvs_dtype_load(
						meta,
						v->section[KVS_SEC_KEY_STEP],
						m) == st);
				for (uint32_t t = 0; t < G; t++) {
					const uint8_t *r =
						v->section[KVS_SEC_KEY_CODES] +
						((size_t)h * S + g * G + t) *
							row;

					assert_int_equal(
						kvs_packed_code(r, d, b),
						codes[t]);
				}
			}
		}
		for (uint32_t t = 0; t < S; t++) {
			const uint8_t *r = v->section[KVS_SEC_VAL_CODES] +
					   ((size_t)h * S + t) * row;

			for (uint32_t g = 0; g < D / G; g++) {
				size_t m = ((size_t)h * S + t) * (D / G) + g;

				assert_int_equal(
					kvs_quant_group(s->values +
								((size_t)h * S +
								 t) * D +
								g * G,
							G, 1, b, meta, codes,
							&o, &st),
					0);
				assert_true(
					kvs_dtype_load(
						meta,
						v->section[KVS_SEC_VAL_ORIGIN],
						m) == o);
				assert_true(
					kvs_dtype_load(
						meta,
						v->section[KVS_SEC_VAL_STEP],
						m) == st);
				for (uint32_t c = 0; c < G; c++)
					assert_int_equal(
						kvs_packed_code(r, g * G + c,
								b),
						codes[c]);
			}
		}
	}
}

static void check_header(const struct sealed *s, const struct kvs_view *v)
{
	struct kvs_ident id;

	test_ident_fill(&id);
	assert_int_equal(v->hdr.version, KVS_FORMAT_VERSION);
	assert_int_equal(v->hdr.kind, KVS_KIND_BLOCK);
	assert_int_equal(v->hdr.layout, KVS_LAYOUT_TOKEN_MAJOR);
	assert_memory_equal(&v->hdr.shape, &s->shape, sizeof(s->shape));
	assert_int_equal(v->hdr.tokens, s->shape.span);
	assert_int_equal(v->hdr.total_size, s->len);
	assert_memory_equal(v->hdr.ident.block_id, id.block_id, KVS_ID_SIZE);
	assert_memory_equal(v->hdr.ident.parent_id, id.parent_id, KVS_ID_SIZE);
	assert_memory_equal(v->hdr.ident.model_fp, id.model_fp, KVS_ID_SIZE);
	assert_int_equal(v->hdr.ident.layer, id.layer);
	assert_int_equal(v->hdr.ident.first_pos, id.first_pos);
	assert_int_equal(v->hdr.section_count, KVS_BLOCK_SECTIONS);
}

static void test_round_trip_matrix(void **state)
{
	static const unsigned bit_widths[] = { 2, 4 };

	(void)state;
	for (int bi = 0; bi < 2; bi++) {
		for (int mi = 0; mi < 3; mi++) {
			for (int di = 0; di < 3; di++) {
				struct kvs_shape sh;
				struct sealed s;
				struct kvs_view v;
				size_t n;
				float *k, *val;

				small_shape(&sh, bit_widths[bi], all_types[mi]);
				seal_block(
					&s, &sh, all_types[di], 0,
					(uint64_t)(bi * 9 + mi * 3 + di + 1));
				assert_int_equal(
					kvs_object_open(s.obj, s.len, 0, &v),
					0);
				assert_null(v.owned);
				check_header(&s, &v);
				n = (size_t)sh.kv_heads * sh.span * sh.head_dim;
				k = malloc(n * sizeof(float));
				val = malloc(n * sizeof(float));
				assert_non_null(k);
				assert_non_null(val);
				assert_int_equal(
					kvs_block_dequantize(&v, k, val), 0);
				check_group_errors(&s, k, val);
				check_sections(&s, &v);
				for (size_t i = 0; i < n; i += 37) {
					uint32_t h =
						(uint32_t)(i /
							   ((size_t)sh.span *
							    sh.head_dim));
					uint32_t t =
						(uint32_t)(i / sh.head_dim %
							   sh.span);
					uint32_t d =
						(uint32_t)(i % sh.head_dim);

					assert_true(kvs_block_key(&v, h, t,
								  d) == k[i]);
					assert_true(
						kvs_block_value(&v, h, t, d) ==
						val[i]);
				}
				kvs_view_release(&v);
				free(k);
				free(val);
				sealed_free(&s);
			}
		}
	}
}

/* The seed's 4x4 Key and Value through a block (D = G = S = R = 4):
 * per-channel Keys come back exactly, the per-token Value row [1,0,1,0]
 * too (fp32 metadata). */
static void test_seed_example_block(void **state)
{
	static const float key[16] = {
		100, 0,	   1, -1, 101, 1.5f, 1.5f, -0.5f,
		102, 0.5f, 2, 0,  103, 1,    2.5f, 0.5f
	};
	static const float value[16] = { -100, -100, -100, -100, 1, 0, 1, 0,
					 100,  100,  100,  100,	 0, 0, 0, 0 };
	struct kvs_shape sh;
	struct kvs_ident id;
	struct kvs_view v;
	uint8_t *obj;
	size_t len;
	float k[16], val[16];

	(void)state;
	kvs_shape_default(&sh, 1, 4);
	sh.group = 4;
	sh.span = 4;
	sh.residual = 4;
	sh.meta_type = KVS_DTYPE_F32;
	test_ident_fill(&id);
	assert_int_equal(kvs_block_seal(&sh, &id, KVS_DTYPE_F32, key, value, 0,
					&obj, &len),
			 0);
	assert_int_equal(kvs_object_open(obj, len, 0, &v), 0);
	assert_int_equal(kvs_block_dequantize(&v, k, val), 0);
	assert_memory_equal(k, key, sizeof(key));
	for (int d = 0; d < 4; d++)
		assert_true(val[4 + d] == value[4 + d]);
	/* First Key column: codes 0,1,2,3 along time in the code rows. */
	for (unsigned t = 0; t < 4; t++)
		assert_int_equal(
			kvs_packed_code(v.section[KVS_SEC_KEY_CODES] + t, 0, 2),
			t);
	kvs_view_release(&v);
	free(obj);
}

static void test_deterministic_and_finish(void **state)
{
	struct kvs_shape sh;
	struct kvs_layout lay;
	struct kvs_ident id;
	struct sealed a, b;
	uint8_t *image;

	(void)state;
	small_shape(&sh, 2, KVS_DTYPE_F16);
	seal_block(&a, &sh, KVS_DTYPE_F16, 0, 42);
	seal_block(&b, &sh, KVS_DTYPE_F16, 0, 42);
	assert_int_equal(a.len, b.len);
	assert_memory_equal(a.obj, b.obj, a.len);

	/* quantize + finish over a dirty image gives the same bytes. */
	assert_int_equal(kvs_block_layout(&sh, &lay), 0);
	assert_int_equal(lay.total_size, a.len);
	image = malloc(lay.total_size);
	assert_non_null(image);
	memset(image, 0xA5, lay.total_size);
	test_ident_fill(&id);
	assert_int_equal(kvs_block_quantize(&sh, KVS_DTYPE_F16, a.raw_keys,
					    a.raw_values, image),
			 0);
	assert_int_equal(kvs_block_finish(&sh, &id, image), 0);
	assert_memory_equal(image, a.obj, a.len);
	assert_int_equal(kvs_object_verify(image, lay.total_size, 0), 0);
	free(image);
	sealed_free(&a);
	sealed_free(&b);
}

/* Residual values of every tail type: the largest finite values of both
 * signs and subnormals pass; an infinity of either sign or a NaN, first
 * or last in either section, is refused. */
static void test_tail_nonfinite_every_dtype(void **state)
{
	static const struct {
		enum kvs_dtype t;
		uint32_t finite[4], bad[3]; /* max, -max, subnormal, 0 */
	} cases[] = {
		{ KVS_DTYPE_F16,
		  { 0x7bff, 0xfbff, 0x0001, 0x8000 },
		  { 0x7c00, 0xfc00, 0x7e01 } },
		{ KVS_DTYPE_BF16,
		  { 0x7f7f, 0xff7f, 0x0001, 0x8000 },
		  { 0x7f80, 0xff80, 0x7fc1 } },
		{ KVS_DTYPE_F32,
		  { 0x7f7fffff, 0xff7fffff, 0x00000001, 0x80000000 },
		  { 0x7f800000, 0xff800000, 0x7fc00001 } },
	};
	struct kvs_shape sh;
	struct kvs_ident id;
	uint8_t rows[3 * 32 * 4], *obj;
	size_t len;

	(void)state;
	tiny_shape(&sh);
	test_ident_fill(&id);
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		enum kvs_dtype t = cases[c].t;
		int e = (int)kvs_dtype_size(t);

		for (int i = 0; i < 3 * 32; i++)
			put_le(rows + i * e, cases[c].finite[i % 4], e);
		assert_int_equal(kvs_tail_encode(&sh, &id, t, 2, 3, rows, rows,
						 0, &obj, &len),
				 0);
		assert_int_equal(kvs_object_verify(obj, len, 0), 0);
		for (int sec = KVS_SEC_KEY_RESID; sec <= KVS_SEC_VAL_RESID;
		     sec++) {
			uint32_t off = sec_offset(obj, sec);
			uint32_t n = (sec == KVS_SEC_KEY_RESID ? 2 : 3) * 32;

			for (int b = 0; b < 3; b++) {
				for (uint32_t at = 0; at < n; at += n - 1) {
					uint8_t *p = obj + off + at * e;
					uint64_t keep = get_le(p, e);

					put_le(p, cases[c].bad[b], e);
					fix_section_sum(obj, sec);
					fix_header_sum(obj);
					assert_int_equal(
						kvs_object_verify(obj, len, 0),
						-KVS_EMETA);
					put_le(p, keep, e);
					fix_section_sum(obj, sec);
					fix_header_sum(obj);
				}
			}
		}
		assert_int_equal(kvs_object_verify(obj, len, 0), 0);
		free(obj);
	}
}

/* A new identity stamped on an encoded object gives the bytes a seal
 * under that identity gives: block, LZ4 block and tail; a damaged header
 * is refused and left as it was. */
static void test_set_ident(void **state)
{
	struct kvs_ident id, other;
	struct kvs_header h;
	struct kvs_shape sh;
	struct sealed a;
	uint8_t *again, *lz, *lz_again, *tail, *tail_again, *copy;
	size_t again_len, lz_len, lz_again_len, tail_len, tail_again_len;
	uint16_t resid[2 * 3 * 64];

	(void)state;
	small_shape(&sh, 2, KVS_DTYPE_F16);
	seal_block(&a, &sh, KVS_DTYPE_F16, 0, 11);
	test_ident_fill(&id);
	other = id;
	other.block_id[0] ^= 0xff;
	other.parent_id[5] ^= 0x0f;
	other.model_fp[31] ^= 0x01;
	other.layer = 31;
	other.first_pos = 1u << 20;
	assert_int_equal(kvs_block_seal(&sh, &other, KVS_DTYPE_F16, a.raw_keys,
					a.raw_values, 0, &again, &again_len),
			 0);
	assert_int_equal(kvs_object_set_ident(a.obj, a.len, &other), 0);
	assert_int_equal(a.len, again_len);
	assert_memory_equal(a.obj, again, a.len);
	assert_int_equal(kvs_header_decode(a.obj, a.len, 0, &h), 0);
	assert_int_equal(h.ident.layer, 31);
	assert_int_equal(kvs_object_verify(a.obj, a.len, 0), 0);

	/* LZ4 sections stay compressed and checked. */
	assert_int_equal(kvs_block_seal(&sh, &id, KVS_DTYPE_F16, a.raw_keys,
					a.raw_values, KVS_ENCODE_LZ4, &lz,
					&lz_len),
			 0);
	assert_int_equal(kvs_block_seal(&sh, &other, KVS_DTYPE_F16, a.raw_keys,
					a.raw_values, KVS_ENCODE_LZ4, &lz_again,
					&lz_again_len),
			 0);
	assert_int_equal(kvs_object_set_ident(lz, lz_len, &other), 0);
	assert_int_equal(lz_len, lz_again_len);
	assert_memory_equal(lz, lz_again, lz_len);

	/* A tail. */
	for (size_t i = 0; i < sizeof(resid) / sizeof(resid[0]); i++)
		kvs_dtype_store(KVS_DTYPE_F16, resid, i, (float)(i % 9) - 4.0f);
	assert_int_equal(kvs_tail_encode(&sh, &id, KVS_DTYPE_F16, 3, 3, resid,
					 resid, 0, &tail, &tail_len),
			 0);
	assert_int_equal(kvs_tail_encode(&sh, &other, KVS_DTYPE_F16, 3, 3,
					 resid, resid, 0, &tail_again,
					 &tail_again_len),
			 0);
	assert_int_equal(kvs_object_set_ident(tail, tail_len, &other), 0);
	assert_int_equal(tail_len, tail_again_len);
	assert_memory_equal(tail, tail_again, tail_len);

	/* A header that fails its checksum is refused, nothing written. */
	tail[40] ^= 1;
	copy = malloc(tail_len);
	assert_non_null(copy);
	memcpy(copy, tail, tail_len);
	assert_int_equal(kvs_object_set_ident(tail, tail_len, &id),
			 -KVS_EHDRSUM);
	assert_memory_equal(tail, copy, tail_len);
	assert_int_equal(kvs_object_set_ident(tail, 100, &id), -KVS_ETRUNC);

	free(copy);
	free(tail);
	free(tail_again);
	free(lz);
	free(lz_again);
	free(again);
	sealed_free(&a);
}

static void test_seal_refuses_bad_input(void **state)
{
	struct kvs_shape sh;
	struct kvs_ident id;
	struct sealed s;
	uint8_t *obj = NULL;
	size_t len = 12345;
	float *k;

	(void)state;
	small_shape(&sh, 2, KVS_DTYPE_F16);
	seal_block(&s, &sh, KVS_DTYPE_F32, 0, 5);
	test_ident_fill(&id);
	k = s.raw_keys;
	k[77] = NAN;
	assert_int_equal(kvs_block_seal(&sh, &id, KVS_DTYPE_F32, k,
					s.raw_values, 0, &obj, &len),
			 -KVS_ENONFINITE);
	assert_null(obj);
	assert_int_equal(len, 12345);
	k[77] = 0.0f;
	((float *)s.raw_values)[3] = -INFINITY;
	assert_int_equal(kvs_block_seal(&sh, &id, KVS_DTYPE_F32, k,
					s.raw_values, 0, &obj, &len),
			 -KVS_ENONFINITE);
	((float *)s.raw_values)[3] = 0.0f;
	/* A Key group spanning 1e6 cannot have an fp16 step. */
	k[5] = 1e6f;
	assert_int_equal(kvs_block_seal(&sh, &id, KVS_DTYPE_F32, k,
					s.raw_values, 0, &obj, &len),
			 -KVS_ERANGE);
	assert_null(obj);
	k[5] = 0.0f;
	sh.group = 3;
	assert_int_equal(kvs_block_seal(&sh, &id, KVS_DTYPE_F32, k,
					s.raw_values, 0, &obj, &len),
			 -KVS_EPARAM);
	assert_null(obj);
	sealed_free(&s);
}

static int count_lz4(const struct kvs_header *h)
{
	int n = 0;

	for (uint32_t i = 0; i < h->section_count; i++) {
		if (h->section[i].codec == KVS_CODEC_LZ4) {
			assert_true(h->section[i].stored_len <
				    h->section[i].logical_len);
			n++;
		} else {
			assert_int_equal(h->section[i].codec, KVS_CODEC_RAW);
			assert_int_equal(h->section[i].stored_len,
					 h->section[i].logical_len);
		}
	}
	return n;
}

/* Opens @a and @b and asserts their sections hold the same bytes. */
static void assert_same_logical(const uint8_t *a, size_t alen, const uint8_t *b,
				size_t blen)
{
	struct kvs_view va, vb;

	assert_int_equal(kvs_object_open(a, alen, 0, &va), 0);
	assert_int_equal(kvs_object_open(b, blen, 0, &vb), 0);
	assert_int_equal(va.hdr.section_count, vb.hdr.section_count);
	for (uint32_t i = 0; i < va.hdr.section_count; i++) {
		assert_int_equal(va.hdr.section[i].logical_len,
				 vb.hdr.section[i].logical_len);
		assert_memory_equal(va.section[i], vb.section[i],
				    va.hdr.section[i].logical_len);
	}
	kvs_view_release(&va);
	kvs_view_release(&vb);
}

static void test_lz4_kept_where_it_pays(void **state)
{
	struct kvs_shape sh;
	struct kvs_ident id;
	struct kvs_header h;
	struct kvs_rng rng = { 1234 };
	size_t n;
	float *zero, *flat;
	uint8_t *raw, *lz, *re;
	size_t raw_len, lz_len, re_len;

	(void)state;
	/* Random input: codes and metadata do not compress; all stay RAW. */
	small_shape(&sh, 2, KVS_DTYPE_F32);
	n = (size_t)sh.kv_heads * sh.span * sh.head_dim;
	flat = malloc(n * sizeof(float));
	assert_non_null(flat);
	for (size_t i = 0; i < n; i++)
		flat[i] = kvs_rng_uniform(&rng, -1.0f, 1.0f);
	test_ident_fill(&id);
	assert_int_equal(kvs_block_seal(&sh, &id, KVS_DTYPE_F32, flat, flat,
					KVS_ENCODE_LZ4, &lz, &lz_len),
			 0);
	assert_int_equal(kvs_header_decode(lz, lz_len, 0, &h), 0);
	assert_int_equal(count_lz4(&h), 0);
	assert_int_equal(h.flags, 0);
	free(lz);
	free(flat);

	/* Constant groups: all codes 0, steps 1: LZ4 pays. */
	small_shape(&sh, 2, KVS_DTYPE_F16);
	zero = calloc(n, sizeof(float));
	assert_non_null(zero);
	for (size_t i = 0; i < n; i++)
		zero[i] = (float)(i % sh.head_dim); /* constant along time */
	test_ident_fill(&id);
	assert_int_equal(kvs_block_seal(&sh, &id, KVS_DTYPE_F32, zero, zero, 0,
					&raw, &raw_len),
			 0);
	assert_int_equal(kvs_block_seal(&sh, &id, KVS_DTYPE_F32, zero, zero,
					KVS_ENCODE_LZ4, &lz, &lz_len),
			 0);
	assert_int_equal(kvs_header_decode(lz, lz_len, 0, &h), 0);
	assert_true(count_lz4(&h) >= 2);
	assert_int_equal(h.section[KVS_SEC_KEY_CODES].codec, KVS_CODEC_LZ4);
	assert_true(lz_len < raw_len);
	assert_same_logical(raw, raw_len, lz, lz_len);

	/* Re-encoding the raw object gives the same object. */
	assert_int_equal(kvs_object_compress(raw, raw_len, &re, &re_len), 0);
	assert_int_equal(re_len, lz_len);
	assert_memory_equal(re, lz, lz_len);
	free(re);
	free(raw);
	free(lz);
	free(zero);
}

static void test_tails_round_trip(void **state)
{
	static const uint32_t rows[][2] = {
		{ 0, 1 }, { 7, 32 }, { 31, 32 }, { 0, 0 }
	};
	struct kvs_shape sh;
	struct kvs_ident id;
	struct kvs_rng rng = { 77 };

	(void)state;
	small_shape(&sh, 2, KVS_DTYPE_F16);
	sh.residual = 32;
	test_ident_fill(&id);
	for (int di = 0; di < 3; di++) {
		enum kvs_dtype t = all_types[di];
		size_t f = kvs_dtype_size(t);

		for (size_t ri = 0; ri < sizeof(rows) / sizeof(rows[0]); ri++) {
			uint32_t r_k = rows[ri][0], r_v = rows[ri][1];
			size_t nk = (size_t)sh.kv_heads * r_k * sh.head_dim;
			size_t nv = (size_t)sh.kv_heads * r_v * sh.head_dim;
			uint8_t *k = malloc(nk * f + 1),
				*v = malloc(nv * f + 1);
			uint8_t *obj;
			size_t len;
			struct kvs_view view;

			assert_non_null(k);
			assert_non_null(v);
			for (size_t i = 0; i < nk; i++)
				kvs_dtype_store(t, k, i,
						kvs_rng_uniform(&rng, -4, 4));
			for (size_t i = 0; i < nv; i++)
				kvs_dtype_store(
					t, v, i,
					(float)(i % 3)); /* compressible */
			for (unsigned flags = 0; flags <= KVS_ENCODE_LZ4;
			     flags += KVS_ENCODE_LZ4) {
				assert_int_equal(kvs_tail_encode(&sh, &id, t,
								 r_k, r_v, k, v,
								 flags, &obj,
								 &len),
						 0);
				assert_int_equal(
					kvs_object_open(obj, len, 0, &view), 0);
				assert_int_equal(view.hdr.kind, KVS_KIND_TAIL);
				assert_int_equal(view.hdr.tail_dtype, t);
				assert_int_equal(view.hdr.r_k, r_k);
				assert_int_equal(view.hdr.r_v, r_v);
				assert_int_equal(view.hdr.tokens,
						 r_k > r_v ? r_k : r_v);
				assert_memory_equal(
					view.section[KVS_SEC_KEY_RESID], k,
					nk * f);
				assert_memory_equal(
					view.section[KVS_SEC_VAL_RESID], v,
					nv * f);
				if (flags && nv * f >= 512)
					assert_int_equal(
						view.hdr.section
							[KVS_SEC_VAL_RESID]
								.codec,
						KVS_CODEC_LZ4);
				/* A tail is not a block. */
				assert_int_equal(
					kvs_block_dequantize(&view, NULL, NULL),
					-KVS_EKIND);
				kvs_view_release(&view);
				free(obj);
			}
			free(k);
			free(v);
		}
	}
	/* r_K must stay below R and r_V at most R. */
	assert_int_equal(kvs_tail_encode(&sh, &id, KVS_DTYPE_F16, 32, 0, NULL,
					 NULL, 0, NULL, NULL),
			 -KVS_EPARAM);
}

/* Dequantizes an accepted block view into buffers of its own shape. */
static void dequantize_accepted(const struct kvs_view *view)
{
	const struct kvs_shape *sh = &view->hdr.shape;
	size_t n = (size_t)sh->kv_heads * sh->span * sh->head_dim;
	float *k, *v;

	if (view->hdr.kind != KVS_KIND_BLOCK)
		return;
	k = malloc(n * sizeof(float));
	v = malloc(n * sizeof(float));
	assert_non_null(k);
	assert_non_null(v);
	assert_int_equal(kvs_block_dequantize(view, k, v), 0);
	free(k);
	free(v);
}

/*
 * Every byte of @obj flipped with several masks: open refuses each one.
 * With checksums off the parser must still never read out of bounds
 * (sanitizer builds catch it) and, when it accepts, dequantize safely.
 */
static void flip_every_byte(const uint8_t *obj, size_t len)
{
	static const uint8_t masks[] = { 0x01, 0x80, 0xFF, 0x10 };
	uint8_t *copy = malloc(len);
	struct kvs_view view;

	assert_non_null(copy);
	assert_int_equal(kvs_object_verify(obj, len, 0), 0);
	for (size_t i = 0; i < len; i++) {
		for (size_t m = 0; m < sizeof(masks); m++) {
			int rc;

			memcpy(copy, obj, len);
			copy[i] ^= masks[m];
			rc = kvs_object_open(copy, len, 0, &view);
			if (rc == 0)
				print_error("byte %zu ^ 0x%02x accepted\n", i,
					    masks[m]);
			assert_true(rc < 0);
			assert_int_equal(kvs_object_verify(copy, len, 0), rc);
			rc = kvs_object_open(copy, len, KVS_VERIFY_NO_CHECKSUMS,
					     &view);
			if (rc == 0) {
				dequantize_accepted(&view);
				kvs_view_release(&view);
			}
		}
	}
	free(copy);
}

static void test_every_byte_corruption(void **state)
{
	struct kvs_shape sh;
	struct kvs_ident id;
	struct sealed s;
	uint8_t *lz, *tail;
	size_t lz_len, tail_len;
	uint16_t resid[128];

	(void)state;
	tiny_shape(&sh);
	seal_block(&s, &sh, KVS_DTYPE_F16, 0, 99);
	flip_every_byte(s.obj, s.len);
	sealed_free(&s);

	/* 4 bits, two groups per token, fp32 metadata. */
	sh.bits = 4;
	sh.group = 16;
	sh.meta_type = KVS_DTYPE_F32;
	seal_block(&s, &sh, KVS_DTYPE_BF16, 0, 98);
	flip_every_byte(s.obj, s.len);
	sealed_free(&s);
	tiny_shape(&sh);

	/* A compressible block: LZ4 sections and their decoder in play. */
	sh.meta_type = KVS_DTYPE_BF16;
	seal_block(&s, &sh, KVS_DTYPE_F32, 0, 3);
	memset(s.raw_keys, 0, 32 * 32 * sizeof(float));
	test_ident_fill(&id);
	assert_int_equal(kvs_block_seal(&sh, &id, KVS_DTYPE_F32, s.raw_keys,
					s.raw_values, KVS_ENCODE_LZ4, &lz,
					&lz_len),
			 0);
	flip_every_byte(lz, lz_len);
	free(lz);
	sealed_free(&s);

	for (int i = 0; i < 128; i++)
		kvs_dtype_store(KVS_DTYPE_F16, resid, i, (float)(i % 5) - 2.0f);
	assert_int_equal(kvs_tail_encode(&sh, &id, KVS_DTYPE_F16, 1, 3, resid,
					 resid, KVS_ENCODE_LZ4, &tail,
					 &tail_len),
			 0);
	flip_every_byte(tail, tail_len);
	free(tail);
}

/* Every proper prefix of @obj is refused as truncated, with and without
 * the checksums. */
static void truncate_every_length(const uint8_t *obj, size_t len)
{
	for (size_t cut_len = 0; cut_len < len; cut_len++) {
		/* A fresh allocation of exactly @cut_len bytes: ASan sees
		 * any read past the end. */
		uint8_t *cut = malloc(cut_len ? cut_len : 1);

		assert_non_null(cut);
		memcpy(cut, obj, cut_len);
		assert_int_equal(kvs_object_verify(cut, cut_len, 0),
				 -KVS_ETRUNC);
		assert_int_equal(kvs_object_verify(cut, cut_len,
						   KVS_VERIFY_NO_CHECKSUMS),
				 -KVS_ETRUNC);
		free(cut);
	}
}

static void test_every_truncation(void **state)
{
	struct kvs_shape sh;
	struct kvs_ident id;
	struct kvs_header h;
	struct sealed s;
	uint16_t resid[4 * 32];
	uint8_t *obj;
	size_t len;

	(void)state;
	tiny_shape(&sh);
	seal_block(&s, &sh, KVS_DTYPE_F16, 0, 4);
	truncate_every_length(s.obj, s.len);

	/* An LZ4 block: zero Keys compress. */
	memset(s.raw_keys, 0, 32 * 32 * 2);
	test_ident_fill(&id);
	assert_int_equal(kvs_block_seal(&sh, &id, KVS_DTYPE_F16, s.raw_keys,
					s.raw_values, KVS_ENCODE_LZ4, &obj,
					&len),
			 0);
	assert_int_equal(kvs_header_decode(obj, len, 0, &h), 0);
	assert_int_equal(h.section[KVS_SEC_KEY_CODES].codec, KVS_CODEC_LZ4);
	truncate_every_length(obj, len);
	free(obj);
	sealed_free(&s);

	/* A tail. */
	for (int i = 0; i < 4 * 32; i++)
		kvs_dtype_store(KVS_DTYPE_F16, resid, i, (float)i);
	assert_int_equal(kvs_tail_encode(&sh, &id, KVS_DTYPE_F16, 3, 4, resid,
					 resid, 0, &obj, &len),
			 0);
	truncate_every_length(obj, len);
	free(obj);
}

/* Each check has its own error, in the documented order. */
static void test_error_order(void **state)
{
	struct kvs_shape sh;
	struct sealed s;
	uint8_t *c;
	uint32_t off;
	struct kvs_header h;

	(void)state;
	tiny_shape(&sh);
	seal_block(&s, &sh, KVS_DTYPE_F16, 0, 8);
	c = malloc(s.len);
	assert_non_null(c);

	/* magic */
	memcpy(c, s.obj, s.len);
	c[FMT_MAGIC] ^= 0x20;
	assert_int_equal(kvs_object_verify(c, s.len, 0), -KVS_EMAGIC);
	assert_int_equal(kvs_header_decode(c, s.len, 0, &h), -KVS_EMAGIC);

	/* version: a newer (and an older) one, with a valid checksum */
	for (unsigned ver = 0; ver < 4; ver++) {
		if (ver == KVS_FORMAT_VERSION)
			continue;
		memcpy(c, s.obj, s.len);
		put_le(c + FMT_VERSION, ver, 2);
		fix_header_sum(c);
		assert_int_equal(kvs_object_verify(c, s.len, 0), -KVS_EVERSION);
	}
	/* version is checked before the header checksum */
	memcpy(c, s.obj, s.len);
	put_le(c + FMT_VERSION, KVS_FORMAT_VERSION + 1, 2);
	assert_int_equal(kvs_object_verify(c, s.len, 0), -KVS_EVERSION);

	/* header checksum: the stored sum, and a header byte it covers */
	memcpy(c, s.obj, s.len);
	c[FMT_HDR_CHECKSUM + 3] ^= 0x04;
	assert_int_equal(kvs_object_verify(c, s.len, 0), -KVS_EHDRSUM);
	memcpy(c, s.obj, s.len);
	c[300] ^= 0x04;
	assert_int_equal(kvs_object_verify(c, s.len, 0), -KVS_EHDRSUM);

	/* bounds: a section offset past the end, checksum fixed up */
	memcpy(c, s.obj, s.len);
	put_le(sec_entry(c, KVS_SEC_VAL_STEP) + FMT_SEC_OFFSET,
	       (uint32_t)s.len + 256, 4);
	fix_header_sum(c);
	assert_int_equal(kvs_object_verify(c, s.len, 0), -KVS_EBOUNDS);
	/* bounds: two sections overlapping */
	memcpy(c, s.obj, s.len);
	off = sec_offset(c, 0);
	put_le(sec_entry(c, 1) + FMT_SEC_OFFSET, off, 4);
	fix_header_sum(c);
	assert_int_equal(kvs_object_verify(c, s.len, 0), -KVS_EBOUNDS);
	/* bounds: a stored length larger than the object */
	memcpy(c, s.obj, s.len);
	put_le(sec_entry(c, 0) + FMT_SEC_STORED, 0xFFFFFF00u, 4);
	fix_header_sum(c);
	assert_int_equal(kvs_object_verify(c, s.len, 0), -KVS_EBOUNDS);
	/* bounds: bytes after the declared end */
	memcpy(c, s.obj, s.len);
	put_le(c + FMT_TOTAL_SIZE, s.len - 1, 8);
	fix_header_sum(c);
	assert_int_not_equal(kvs_object_verify(c, s.len, 0), 0);

	/* header fields a valid writer never produces, checksum fixed up:
	 * an unknown flag, a reserved byte, an unknown kind, a tail field in
	 * a block, a shape that breaks the rules (R not a multiple of G) */
	for (int edit = 0; edit < 5; edit++) {
		static const int at[] = { FMT_FLAGS, FMT_RESERVED + 9, FMT_KIND,
					  FMT_R_K, FMT_RESIDUAL };
		static const uint8_t val[] = { 0x80, 0x01, 0x07, 0x01, 0x21 };

		memcpy(c, s.obj, s.len);
		c[at[edit]] = val[edit];
		fix_header_sum(c);
		assert_int_equal(kvs_object_verify(c, s.len, 0), -KVS_ECORRUPT);
	}
	/* a non-zero padding byte between sections (only the padding check
	 * sees it: no checksum covers padding) */
	memcpy(c, s.obj, s.len);
	off = sec_offset(c, KVS_SEC_KEY_ORIGIN);
	c[off + 64] = 0x01; /* 64-byte section, padded to 256 */
	assert_int_equal(kvs_object_verify(c, s.len, 0), -KVS_ECORRUPT);

	/* section checksum: a payload byte */
	memcpy(c, s.obj, s.len);
	off = sec_offset(c, KVS_SEC_VAL_CODES);
	c[off + 5] ^= 0x40;
	assert_int_equal(kvs_object_verify(c, s.len, 0), -KVS_ESECTSUM);

	/* metadata: NaN origin, zero step, negative step, infinite step;
	 * section and header checksums fixed up so only this check fails */
	for (int kind = 0; kind < 4; kind++) {
		static const uint16_t bits[] = { 0x7E00, 0x0000, 0xBC00,
						 0x7C00 };
		int sec = kind == 0 ? KVS_SEC_KEY_ORIGIN : KVS_SEC_VAL_STEP;

		memcpy(c, s.obj, s.len);
		off = sec_offset(c, sec);
		put_le(c + off + 2 * 3, bits[kind], 2);
		fix_section_sum(c, sec);
		fix_header_sum(c);
		assert_int_equal(kvs_object_verify(c, s.len, 0), -KVS_EMETA);
		/* without fixing up the section sum, that check fires first */
		memcpy(c, s.obj, s.len);
		put_le(c + off + 2 * 3, bits[kind], 2);
		assert_int_equal(kvs_object_verify(c, s.len, 0), -KVS_ESECTSUM);
	}
	free(c);
	sealed_free(&s);
}

/*
 * Seals an all-zero block of @sh with LZ4 (every section compresses) and
 * returns it with its decoded header and the index of the last LZ4 section
 * whose logical length is at least @min_logical.
 */
static uint8_t *seal_zero_lz4(const struct kvs_shape *sh, uint32_t min_logical,
			      size_t *len, struct kvs_header *h, int *sec)
{
	size_t n = (size_t)sh->kv_heads * sh->span * sh->head_dim;
	float *flat = calloc(n, sizeof(float));
	struct kvs_ident id;
	uint8_t *lz;

	assert_non_null(flat);
	test_ident_fill(&id);
	assert_int_equal(kvs_block_seal(sh, &id, KVS_DTYPE_F32, flat, flat,
					KVS_ENCODE_LZ4, &lz, len),
			 0);
	free(flat);
	assert_int_equal(kvs_header_decode(lz, *len, 0, h), 0);
	*sec = -1;
	for (uint32_t i = 0; i < h->section_count; i++)
		if (h->section[i].codec == KVS_CODEC_LZ4 &&
		    h->section[i].logical_len >= min_logical)
			*sec = (int)i;
	assert_true(*sec >= 0);
	return lz;
}

/* An LZ4 section that does not expand to its logical length. */
static void test_lz4_length_error(void **state)
{
	struct kvs_shape sh;
	struct kvs_header h;
	uint8_t *lz;
	size_t lz_len;
	int sec;

	(void)state;
	tiny_shape(&sh);
	lz = seal_zero_lz4(&sh, 0, &lz_len, &h, &sec);
	/* Garbage in place of the LZ4 stream, all checksums valid. */
	memset(lz + h.section[sec].offset, 0xF0, h.section[sec].stored_len);
	fix_section_sum(lz, sec);
	fix_header_sum(lz);
	assert_int_equal(kvs_object_verify(lz, lz_len, 0), -KVS_ELZ4);
	free(lz);
}

/* Finite bf16 metadata whose top code reconstructs past FLT_MAX is refused
 * like non-finite metadata; the sealer never writes it. */
static void test_meta_reconstruction_overflow(void **state)
{
	struct kvs_shape sh;
	struct sealed s;
	uint32_t off;

	(void)state;
	tiny_shape(&sh);
	sh.meta_type = KVS_DTYPE_BF16;
	seal_block(&s, &sh, KVS_DTYPE_F32, 0, 11);
	off = sec_offset(s.obj, KVS_SEC_KEY_STEP);
	put_le(s.obj + off, 0x7F7F, 2); /* finite step near FLT_MAX */
	fix_section_sum(s.obj, KVS_SEC_KEY_STEP);
	fix_header_sum(s.obj);
	assert_int_equal(kvs_object_verify(s.obj, s.len, 0), -KVS_EMETA);
	sealed_free(&s);
}

/* An LZ4 section claiming more than LZ4's 255:1 expansion is refused at
 * the bounds check, before anything is allocated for it. */
static void test_lz4_ratio_bound(void **state)
{
	struct kvs_shape sh;
	struct kvs_header h;
	uint8_t *lz;
	size_t lz_len;
	int sec;

	(void)state;
	tiny_shape(&sh);
	sh.kv_heads = 4; /* sections of a few KiB */
	sh.head_dim = 64;
	lz = seal_zero_lz4(&sh, 255 + 256, &lz_len, &h, &sec);
	/* One stored byte cannot expand to the section's logical length. */
	put_le(sec_entry(lz, sec) + FMT_SEC_STORED, 1, 4);
	fix_header_sum(lz);
	assert_int_equal(kvs_header_decode(lz, lz_len, 0, &h), -KVS_EBOUNDS);
	free(lz);
}

/* Non-finite residual values are refused like non-finite metadata; a
 * failed open leaves the caller's view alone; the fuzzing flag skips
 * exactly the checksums. */
static void test_tail_meta_and_flags(void **state)
{
	struct kvs_shape sh;
	struct kvs_ident id;
	struct kvs_view v;
	uint16_t rows[3 * 32];
	uint8_t *obj;
	size_t len;
	uint32_t off;

	(void)state;
	tiny_shape(&sh);
	test_ident_fill(&id);
	for (int i = 0; i < 3 * 32; i++)
		kvs_dtype_store(KVS_DTYPE_BF16, rows, i, (float)i / 8.0f);
	assert_int_equal(kvs_tail_encode(&sh, &id, KVS_DTYPE_BF16, 2, 3, rows,
					 rows, 0, &obj, &len),
			 0);
	off = sec_offset(obj, KVS_SEC_VAL_RESID);
	put_le(obj + off + 2 * 40, 0x7FC0, 2); /* bf16 NaN */
	fix_section_sum(obj, KVS_SEC_VAL_RESID);
	fix_header_sum(obj);
	memset(&v, 0x5A, sizeof(v));
	assert_int_equal(kvs_object_open(obj, len, 0, &v), -KVS_EMETA);
	assert_int_equal(v.hdr.version, 0x5A5A);
	assert_true(v.owned == (uint8_t *)(uintptr_t)0x5A5A5A5A5A5A5A5AULL);
	put_le(obj + off + 2 * 40, 0x3F80, 2); /* 1.0 */
	assert_int_equal(kvs_object_verify(obj, len, 0), -KVS_ESECTSUM);
	assert_int_equal(kvs_object_verify(obj, len, KVS_VERIFY_NO_CHECKSUMS),
			 0);
	obj[FMT_HDR_CHECKSUM] ^= 1;
	assert_int_equal(kvs_object_verify(obj, len, 0), -KVS_EHDRSUM);
	assert_int_equal(kvs_object_verify(obj, len, KVS_VERIFY_NO_CHECKSUMS),
			 0);
	free(obj);
}

static void test_strerror_names_every_code(void **state)
{
	(void)state;
	for (int e = KVS_ERROR_BASE; e < KVS_ERROR_END; e++) {
		const char *name = kvs_strerror(-e);

		assert_non_null(name);
		assert_true(strlen(name) > 0);
		assert_null(strstr(name, "nknown"));
		assert_string_equal(kvs_strerror(e), name);
		for (int f = KVS_ERROR_BASE; f < e; f++)
			assert_string_not_equal(kvs_strerror(-f), name);
	}
	/* Validation errors each name their check. */
	for (int e = KVS_ETRUNC; e <= KVS_EMETA; e++)
		assert_string_not_equal(kvs_check_name(-e), "other");
	assert_non_null(kvs_strerror(-12)); /* ENOMEM, from errno */
	assert_non_null(kvs_strerror(-KVS_ERROR_END));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_layout_canonical),
		cmocka_unit_test(test_round_trip_matrix),
		cmocka_unit_test(test_seed_example_block),
		cmocka_unit_test(test_deterministic_and_finish),
		cmocka_unit_test(test_seal_refuses_bad_input),
		cmocka_unit_test(test_lz4_kept_where_it_pays),
		cmocka_unit_test(test_tails_round_trip),
		cmocka_unit_test(test_every_byte_corruption),
		cmocka_unit_test(test_every_truncation),
		cmocka_unit_test(test_error_order),
		cmocka_unit_test(test_lz4_length_error),
		cmocka_unit_test(test_lz4_ratio_bound),
		cmocka_unit_test(test_meta_reconstruction_overflow),
		cmocka_unit_test(test_tail_meta_and_flags),
		cmocka_unit_test(test_strerror_names_every_code),
		cmocka_unit_test(test_set_ident),
		cmocka_unit_test(test_tail_nonfinite_every_dtype),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
