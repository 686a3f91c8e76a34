/*
 * test_quant.c - the group quantizer and code packing against the seed's
 * section 3 worked examples (Key per-token vs per-channel, the attention
 * argmax they change, the Value example, pack2 0xE4 and its padding,
 * constant groups) and against the contract's edge cases: non-finite
 * input, metadata overflow, every metadata type, round-half-even codes and
 * 4-bit groups.
 */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "kvstash/kvformat.h"
#include "testutil.h"

static const float seed_key[4][4] = {
	{ 100.0f, 0.0f, 1.0f, -1.0f },
	{ 101.0f, 1.5f, 1.5f, -0.5f },
	{ 102.0f, 0.5f, 2.0f, 0.0f },
	{ 103.0f, 1.0f, 2.5f, 0.5f },
};

static const float seed_value[4][4] = {
	{ -100.0f, -100.0f, -100.0f, -100.0f },
	{ 1.0f, 0.0f, 1.0f, 0.0f },
	{ 100.0f, 100.0f, 100.0f, 100.0f },
	{ 0.0f, 0.0f, 0.0f, 0.0f },
};

/* Quantize-dequantize @m with one group per row (per token). */
static void qdq_rows(const float m[4][4], enum kvs_dtype meta, float out[4][4])
{
	for (int t = 0; t < 4; t++) {
		uint8_t codes[4];
		float origin, step;

		assert_int_equal(kvs_quant_group(m[t], 4, 1, 2, meta, codes,
						 &origin, &step),
				 0);
		for (int d = 0; d < 4; d++)
			out[t][d] = kvs_dequant(origin, step, codes[d]);
	}
}

/* Quantize-dequantize @m with one group per column (per channel). */
static void qdq_columns(const float m[4][4], enum kvs_dtype meta,
			float out[4][4])
{
	for (int d = 0; d < 4; d++) {
		uint8_t codes[4];
		float origin, step;

		assert_int_equal(kvs_quant_group(&m[0][d], 4, 4, 2, meta, codes,
						 &origin, &step),
				 0);
		for (int t = 0; t < 4; t++)
			out[t][d] = kvs_dequant(origin, step, codes[t]);
	}
}

/* softmax(q K^T / sqrt(D)) in double, q = [0, 1, 0, 0]. */
static void seed_attention(const float keys[4][4], double p[4])
{
	const double q[4] = { 0.0, 1.0, 0.0, 0.0 };
	double logits[4], peak = -INFINITY, total = 0.0;

	for (int t = 0; t < 4; t++) {
		logits[t] = 0.0;
		for (int d = 0; d < 4; d++)
			logits[t] += q[d] * keys[t][d];
		logits[t] /= 2.0;
		peak = fmax(peak, logits[t]);
	}
	for (int t = 0; t < 4; t++) {
		p[t] = exp(logits[t] - peak);
		total += p[t];
	}
	for (int t = 0; t < 4; t++)
		p[t] /= total;
}

static int argmax4(const double p[4])
{
	int best = 0;

	for (int t = 1; t < 4; t++)
		if (p[t] > p[best])
			best = t;
	return best;
}

static void test_key_per_token_row(void **state)
{
	float tok[4][4];

	(void)state;
	/* fp32 metadata holds 101/3 closely enough for an exact first row. */
	qdq_rows(seed_key, KVS_DTYPE_F32, tok);
	assert_true(tok[0][0] == 100.0f);
	for (int d = 1; d < 4; d++)
		assert_true(tok[0][d] == -1.0f);

	/* fp16 rounds the step 101/3 to 33.65625: still the same codes. */
	qdq_rows(seed_key, KVS_DTYPE_F16, tok);
	assert_float_equal(tok[0][0], 100.0f, 0.05f);
	for (int d = 1; d < 4; d++)
		assert_true(tok[0][d] == -1.0f);
}

static void test_key_per_channel_exact(void **state)
{
	static const enum kvs_dtype metas[] = { KVS_DTYPE_F32, KVS_DTYPE_F16,
						KVS_DTYPE_BF16 };
	float chan[4][4];

	(void)state;
	/* Every column sits on its own grid (steps 1 and 0.5): exact in
	 * every metadata type. */
	for (size_t i = 0; i < sizeof(metas) / sizeof(metas[0]); i++) {
		qdq_columns(seed_key, metas[i], chan);
		assert_memory_equal(chan, seed_key, sizeof(chan));
	}
}

static void test_key_attention_argmax(void **state)
{
	float tok[4][4], chan[4][4];
	double p_orig[4], p_tok[4], p_chan[4], worst = 0.0;

	(void)state;
	qdq_rows(seed_key, KVS_DTYPE_F32, tok);
	qdq_columns(seed_key, KVS_DTYPE_F32, chan);
	seed_attention(seed_key, p_orig);
	seed_attention(tok, p_tok);
	seed_attention(chan, p_chan);
	assert_memory_equal(p_chan, p_orig, sizeof(p_orig));
	assert_int_equal(argmax4(p_orig), 1);
	assert_int_equal(argmax4(p_chan), 1);
	assert_int_equal(argmax4(p_tok), 3);
	for (int t = 0; t < 4; t++)
		worst = fmax(worst, fabs(p_orig[t] - p_tok[t]));
	assert_true(worst > 0.1);
}

static void test_value_example(void **state)
{
	static const double p[4] = { 0.0, 1.0, 0.0, 0.0 };
	float tok[4][4], chan[4][4];

	(void)state;
	qdq_rows(seed_value, KVS_DTYPE_F32, tok);
	qdq_columns(seed_value, KVS_DTYPE_F32, chan);
	for (int d = 0; d < 4; d++) {
		double out_tok = 0.0, out_chan = 0.0;

		for (int t = 0; t < 4; t++) {
			out_tok += p[t] * tok[t][d];
			out_chan += p[t] * chan[t][d];
		}
		assert_true(out_tok == seed_value[1][d]);
		/* The step 200/3 of the other rows decides this row's grid. */
		assert_float_equal(out_chan, 100.0 / 3.0, 1e-4);
	}
}

static void test_pack_e4(void **state)
{
	const float column[4] = { 100.0f, 101.0f, 102.0f, 103.0f };
	uint8_t codes[4], packed[1];
	float origin, step;

	(void)state;
	assert_int_equal(kvs_quant_group(column, 4, 1, 2, KVS_DTYPE_F16, codes,
					 &origin, &step),
			 0);
	for (unsigned i = 0; i < 4; i++)
		assert_int_equal(codes[i], i);
	assert_true(origin == 100.0f && step == 1.0f);
	kvs_pack_codes(codes, 4, 2, packed);
	assert_int_equal(packed[0], 0xE4);
	for (unsigned i = 0; i < 4; i++)
		assert_int_equal(kvs_packed_code(packed, i, 2), i);
}

static void test_pack_padding(void **state)
{
	const uint8_t codes[3] = { 0, 1, 2 };
	uint8_t packed[2] = { 0xFF, 0xAA };

	(void)state;
	kvs_pack_codes(codes, 3, 2, packed);
	/* One byte written, its fourth slot zero; the next byte untouched. */
	assert_int_equal(packed[0], 0x24);
	assert_int_equal(packed[1], 0xAA);
	for (unsigned i = 0; i < 3; i++)
		assert_int_equal(kvs_packed_code(packed, i, 2), codes[i]);
	assert_int_equal(kvs_packed_code(packed, 3, 2), 0);
}

static void test_pack_4bit(void **state)
{
	uint8_t codes[5] = { 1, 2, 15, 0, 9 }, packed[3] = { 0, 0, 0xCC };

	(void)state;
	kvs_pack_codes(codes, 5, 4, packed);
	assert_int_equal(packed[0], 0x21);
	assert_int_equal(packed[1], 0x0F);
	assert_int_equal(packed[2], 0x09); /* high nibble is padding */
	for (unsigned i = 0; i < 5; i++)
		assert_int_equal(kvs_packed_code(packed, i, 4), codes[i]);
}

static void test_constant_groups(void **state)
{
	static const enum kvs_dtype metas[] = { KVS_DTYPE_F32, KVS_DTYPE_F16,
						KVS_DTYPE_BF16 };
	static const float values[] = { 5.0f, 0.0f, -3.25f };

	(void)state;
	for (size_t m = 0; m < 3; m++) {
		for (size_t v = 0; v < 3; v++) {
			const float x[4] = { values[v], values[v], values[v],
					     values[v] };
			uint8_t codes[4] = { 9, 9, 9, 9 };
			float origin, step;

			assert_int_equal(kvs_quant_group(x, 4, 1, 2, metas[m],
							 codes, &origin, &step),
					 0);
			assert_true(origin == values[v]);
			assert_true(step == 1.0f);
			for (int i = 0; i < 4; i++) {
				assert_int_equal(codes[i], 0);
				assert_true(kvs_dequant(origin, step, 0) ==
					    values[v]);
			}
		}
	}
}

/* A step that rounds to zero in the metadata type is a constant group. */
static void test_step_underflow_is_constant(void **state)
{
	/* 1e-8 / 3 is under half of fp16's smallest subnormal (2^-24). */
	const float x[4] = { 0.0f, 0.0f, 0.0f, 1e-8f };
	uint8_t codes[4] = { 7, 7, 7, 7 };
	float origin, step;

	(void)state;
	assert_int_equal(kvs_quant_group(x, 4, 1, 2, KVS_DTYPE_F16, codes,
					 &origin, &step),
			 0);
	assert_true(origin == 0.0f && step == 1.0f);
	for (int i = 0; i < 4; i++)
		assert_int_equal(codes[i], 0);
	/* bf16 has fp32's exponent range: a real step, code 3 on top. */
	assert_int_equal(kvs_quant_group(x, 4, 1, 2, KVS_DTYPE_BF16, codes,
					 &origin, &step),
			 0);
	assert_true(step > 0.0f && step < 1e-8f);
	assert_int_equal(codes[3], 3);
}

static void test_nonfinite(void **state)
{
	const float bad[] = { NAN, INFINITY, -INFINITY };

	(void)state;
	for (size_t i = 0; i < 3; i++) {
		for (int pos = 0; pos < 4; pos++) {
			float x[4] = { 1.0f, 2.0f, 3.0f, 4.0f };
			uint8_t codes[4] = { 0xAA, 0xAA, 0xAA, 0xAA };
			float origin = -7.0f, step = -7.0f;

			x[pos] = bad[i];
			assert_int_equal(kvs_quant_group(x, 4, 1, 2,
							 KVS_DTYPE_F16, codes,
							 &origin, &step),
					 -KVS_ENONFINITE);
			/* Outputs are written only on success. */
			assert_true(origin == -7.0f && step == -7.0f);
		}
	}
}

static void test_range_errors(void **state)
{
	/* (hi - lo) / 3 = 66666.7 > 65520: the fp16 step overflows. */
	const float wide[4] = { 0.0f, 1.0f, 2.0f, 200000.0f };
	/* Just under the overflow threshold of a step: 3 * 65504. */
	const float edge[4] = { 0.0f, 0.0f, 0.0f, 3.0f * 65504.0f };
	const float far[4] = { 70000.0f, 70000.5f, 70001.0f, 70002.0f };
	const float far_neg[4] = { -70002.0f, -70001.0f, -70000.0f, 0.0f };
	const float huge[4] = { -3e38f, 0.0f, 1.0f, 3e38f };
	const float top[4] = { 0.0f, 1.0f, 2.0f, FLT_MAX };
	uint8_t codes[4];
	float origin, step;

	(void)state;
	assert_int_equal(kvs_quant_group(wide, 4, 1, 2, KVS_DTYPE_F16, codes,
					 &origin, &step),
			 -KVS_ERANGE);
	assert_int_equal(kvs_quant_group(edge, 4, 1, 2, KVS_DTYPE_F16, codes,
					 &origin, &step),
			 0);
	assert_true(step == 65504.0f);
	assert_int_equal(kvs_quant_group(far, 4, 1, 2, KVS_DTYPE_F16, codes,
					 &origin, &step),
			 -KVS_ERANGE);
	assert_int_equal(kvs_quant_group(far_neg, 4, 1, 2, KVS_DTYPE_F16, codes,
					 &origin, &step),
			 -KVS_ERANGE);
	/* A constant group whose origin overflows is refused as well. */
	assert_int_equal(kvs_quant_group(far, 1, 1, 2, KVS_DTYPE_F16, codes,
					 &origin, &step),
			 -KVS_ERANGE);
	/* bf16 and fp32 hold these ranges. */
	assert_int_equal(kvs_quant_group(wide, 4, 1, 2, KVS_DTYPE_BF16, codes,
					 &origin, &step),
			 0);
	assert_int_equal(kvs_quant_group(far, 4, 1, 2, KVS_DTYPE_F32, codes,
					 &origin, &step),
			 0);
	/* bf16 rounds the step FLT_MAX / 3 up: code 3 would reconstruct to
	 * infinity, so the group is refused; fp32 reconstructs FLT_MAX. */
	assert_int_equal(kvs_quant_group(top, 4, 1, 2, KVS_DTYPE_BF16, codes,
					 &origin, &step),
			 -KVS_ERANGE);
	assert_int_equal(kvs_quant_group(top, 4, 1, 2, KVS_DTYPE_F32, codes,
					 &origin, &step),
			 0);
	assert_true(isfinite(kvs_dequant(origin, step, codes[3])));
	/* hi - lo overflows fp32 itself: no metadata type holds the step. */
	assert_int_equal(kvs_quant_group(huge, 4, 1, 2, KVS_DTYPE_F32, codes,
					 &origin, &step),
			 -KVS_ERANGE);
}

static void test_bad_params(void **state)
{
	const float x[4] = { 1.0f, 2.0f, 3.0f, 4.0f };
	uint8_t codes[4];
	float origin, step;

	(void)state;
	assert_int_equal(kvs_quant_group(x, 4, 1, 3, KVS_DTYPE_F16, codes,
					 &origin, &step),
			 -KVS_EPARAM);
	assert_int_equal(kvs_quant_group(x, 4, 1, 8, KVS_DTYPE_F16, codes,
					 &origin, &step),
			 -KVS_EPARAM);
	assert_int_equal(kvs_quant_group(x, 0, 1, 2, KVS_DTYPE_F16, codes,
					 &origin, &step),
			 -KVS_EPARAM);
	assert_int_equal(kvs_quant_group(x, 4, 1, 2, (enum kvs_dtype)9, codes,
					 &origin, &step),
			 -KVS_EPARAM);
}

/* Codes come from rint: halves go to the even code. */
static void test_rint_ties(void **state)
{
	const float x2[5] = { 0.0f, 0.5f, 1.5f, 2.5f, 3.0f };
	const uint8_t want2[5] = { 0, 0, 2, 2, 3 };
	float x4[16];
	uint8_t codes[16];
	float origin, step;

	(void)state;
	assert_int_equal(kvs_quant_group(x2, 5, 1, 2, KVS_DTYPE_F16, codes,
					 &origin, &step),
			 0);
	assert_true(origin == 0.0f && step == 1.0f);
	assert_memory_equal(codes, want2, 5);

	/* 4 bits, step 1: x = k + 0.5 for k = 0..13, then 0 and 15. */
	for (int k = 0; k < 14; k++)
		x4[k] = (float)k + 0.5f;
	x4[14] = 0.0f;
	x4[15] = 15.0f;
	assert_int_equal(kvs_quant_group(x4, 16, 1, 4, KVS_DTYPE_F16, codes,
					 &origin, &step),
			 0);
	assert_true(origin == 0.0f && step == 1.0f);
	for (int k = 0; k < 14; k++)
		assert_int_equal(codes[k], (k % 2 == 0) ? k : k + 1);
	assert_int_equal(codes[14], 0);
	assert_int_equal(codes[15], 15);
}

/* Origin and step are rounded to the metadata type, ties to even. */
static void test_meta_rne(void **state)
{
	/* lo = 1 + 2^-11 is halfway between two fp16 values: goes to 1. */
	const float a[4] = { 1.0f + 0x1p-11f, 2.0f, 3.0f, 4.0f };
	/* lo = 1 + 3 * 2^-11: halfway, goes up to the even 1 + 2^-9. */
	const float b[4] = { 1.0f + 0x3p-11f, 2.0f, 3.0f, 4.0f };
	/* bf16: 1 + 2^-8 ties to 1, 1 + 3 * 2^-8 ties up to 1 + 2^-6. */
	const float c[4] = { 1.0f + 0x1p-8f, 9.0f, 9.0f, 9.0f };
	const float d[4] = { 1.0f + 0x3p-8f, 9.0f, 9.0f, 9.0f };
	uint8_t codes[4];
	float origin, step;

	(void)state;
	assert_int_equal(kvs_quant_group(a, 4, 1, 2, KVS_DTYPE_F16, codes,
					 &origin, &step),
			 0);
	assert_true(origin == 1.0f);
	assert_int_equal(kvs_quant_group(b, 4, 1, 2, KVS_DTYPE_F16, codes,
					 &origin, &step),
			 0);
	assert_true(origin == 1.0f + 0x1p-9f);
	assert_int_equal(kvs_quant_group(c, 4, 1, 2, KVS_DTYPE_BF16, codes,
					 &origin, &step),
			 0);
	assert_true(origin == 1.0f);
	assert_int_equal(kvs_quant_group(d, 4, 1, 2, KVS_DTYPE_BF16, codes,
					 &origin, &step),
			 0);
	assert_true(origin == 1.0f + 0x1p-6f);
	/* The stored step is exactly the metadata-rounded (hi - lo) / 3. */
	assert_true(step == kvs_round_to(KVS_DTYPE_BF16,
					 (9.0f - (1.0f + 0x3p-8f)) / 3.0f));
}

/* Random groups, every metadata type, 2 and 4 bits: codes in range,
 * metadata representable, error within half a step (+ rounding). */
static void test_random_groups(void **state)
{
	static const enum kvs_dtype metas[] = { KVS_DTYPE_F32, KVS_DTYPE_F16,
						KVS_DTYPE_BF16 };
	struct kvs_rng rng = { 0x9E3779B97F4A7C15ULL };

	(void)state;
	for (int iter = 0; iter < 3000; iter++) {
		enum kvs_dtype meta = metas[iter % 3];
		unsigned bits = (iter / 3) % 2 ? 4 : 2;
		float x[32], origin, step, lo = INFINITY, hi = -INFINITY;
		float scale = ldexpf(1.0f, (int)(kvs_rng_next(&rng) % 20) - 10);
		float center = kvs_rng_uniform(&rng, -50.0f, 50.0f);
		uint8_t codes[32];
		double bound;

		for (int i = 0; i < 32; i++) {
			x[i] = center + scale * kvs_rng_uniform(&rng, -1, 1);
			lo = fminf(lo, x[i]);
			hi = fmaxf(hi, x[i]);
		}
		assert_int_equal(kvs_quant_group(x, 32, 1, bits, meta, codes,
						 &origin, &step),
				 0);
		assert_true(kvs_round_to(meta, origin) == origin);
		assert_true(step > 0.0f);
		assert_true(step == 1.0f || kvs_round_to(meta, step) == step);
		bound = test_group_bound(lo, hi, bits, meta);
		for (int i = 0; i < 32; i++) {
			double err;

			assert_true(codes[i] < (1u << bits));
			err = fabs((double)x[i] -
				   kvs_dequant(origin, step, codes[i]));
			assert_true(err <= bound);
		}
	}
}

/* The stride walks a column of a row-major matrix. */
static void test_stride(void **state)
{
	uint8_t by_stride[4], copy_codes[4];
	float column[4], o1, s1, o2, s2;

	(void)state;
	for (int t = 0; t < 4; t++)
		column[t] = seed_value[t][2];
	assert_int_equal(kvs_quant_group(&seed_value[0][2], 4, 4, 2,
					 KVS_DTYPE_F16, by_stride, &o1, &s1),
			 0);
	assert_int_equal(kvs_quant_group(column, 4, 1, 2, KVS_DTYPE_F16,
					 copy_codes, &o2, &s2),
			 0);
	assert_memory_equal(by_stride, copy_codes, 4);
	assert_true(o1 == o2 && s1 == s2);
}

/* A group whose minimum is a zero stores the origin +0 whichever signed
 * zero comes first, in every metadata type and through a whole block, so
 * reductions in any order (the GPU's) agree on the bits. */
static void test_signed_zero_origin(void **state)
{
	static const enum kvs_dtype metas[] = { KVS_DTYPE_F16, KVS_DTYPE_BF16,
						KVS_DTYPE_F32 };
	float a[4] = { -0.0f, 0.0f, 1.0f, 2.0f };
	float b[4] = { 0.0f, -0.0f, 1.0f, 2.0f };
	float z[4] = { -0.0f, -0.0f, -0.0f, -0.0f };
	uint8_t codes[4];
	float o, s;

	(void)state;
	for (int m = 0; m < 3; m++) {
		assert_int_equal(
			kvs_quant_group(a, 4, 1, 2, metas[m], codes, &o, &s),
			0);
		assert_false(signbit(o));
		assert_int_equal(
			kvs_quant_group(b, 4, 1, 2, metas[m], codes, &o, &s),
			0);
		assert_false(signbit(o));
		assert_int_equal(
			kvs_quant_group(z, 4, 1, 2, metas[m], codes, &o, &s),
			0);
		assert_false(signbit(o));
		assert_true(s == 1.0f);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_key_per_token_row),
		cmocka_unit_test(test_signed_zero_origin),
		cmocka_unit_test(test_key_per_channel_exact),
		cmocka_unit_test(test_key_attention_argmax),
		cmocka_unit_test(test_value_example),
		cmocka_unit_test(test_pack_e4),
		cmocka_unit_test(test_pack_padding),
		cmocka_unit_test(test_pack_4bit),
		cmocka_unit_test(test_constant_groups),
		cmocka_unit_test(test_step_underflow_is_constant),
		cmocka_unit_test(test_nonfinite),
		cmocka_unit_test(test_range_errors),
		cmocka_unit_test(test_bad_params),
		cmocka_unit_test(test_rint_ties),
		cmocka_unit_test(test_meta_rne),
		cmocka_unit_test(test_random_groups),
		cmocka_unit_test(test_stride),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
