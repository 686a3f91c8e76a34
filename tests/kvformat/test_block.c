/*
 * test_block.c - sealed blocks and residual tails through the format:
 * canonical layout, round trips for every bits x metadata x input type,
 * the section bytes against the group quantizer (the layout the fused
 * kernel reads), LZ4 kept only where it pays, tails, identities
 * (test_block_damage.c: what validation refuses).  Header offsets are the ones
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
#include "block_util.h"
#include "objedit.h"

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
		cmocka_unit_test(test_set_ident),
		cmocka_unit_test(test_tail_nonfinite_every_dtype),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
