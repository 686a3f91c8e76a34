/*
 * test_attention - the CPU backend's decode attention over the mixed
 * cache: the seed's 117/17 global-softmax example (and the 13.5 of a
 * per-part softmax, which we must not give), the Key boundary refused for
 * Values, argument checks, and random shapes against a plain double dense
 * computation on the dequantized cache.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "kvstash/stream.h"
#include "test_stream_util.h"

/* The seed's step 9: Keys 8 quantized + 1 full, Values 4 + 5. */
struct seed_case {
	struct kvs_shape shape;
	struct test_block blk;
	const struct kvs_view *views[1];
	float q[4], k_resid[4], v_resid[5][4], out[4];
	struct kvs_attn a;
};

static void seed_case_init(struct seed_case *c)
{
	struct kvs_ident ident;
	float keys[8][4], values[8][4], kd[8][4], vd[8][4];
	uint32_t t, d;

	memset(c, 0, sizeof(*c));
	memset(&ident, 0, sizeof(ident));
	c->shape = (struct kvs_shape){ .kv_heads = 1,
				       .head_dim = 4,
				       .group = 4,
				       .bits = 2,
				       .meta_type = KVS_DTYPE_F16,
				       .span = 8,
				       .residual = 8 };
	/* Keys 0 quantize exactly (constant groups); Values of token t,
	 * [t, t + 1, t + 2, t + 3], sit on their own grid (origin t, step 1,
	 * codes 0..3). */
	for (t = 0; t < 8; t++)
		for (d = 0; d < 4; d++) {
			keys[t][d] = 0.0f;
			values[t][d] = (float)(t + 1 + d);
		}
	assert_int_equal(test_block_make(&c->shape, &ident, &keys[0][0],
					 &values[0][0], 0, &c->blk, &kd[0][0],
					 &vd[0][0]),
			 0);
	for (t = 0; t < 8; t++)
		for (d = 0; d < 4; d++) {
			assert_true(kd[t][d] == 0.0f);
			assert_true(vd[t][d] == values[t][d]);
		}
	c->views[0] = &c->blk.view;
	c->q[0] = 1.0f;
	c->k_resid[0] = logf(9.0f);
	for (t = 0; t < 5; t++)
		for (d = 0; d < 4; d++)
			c->v_resid[t][d] = (float)(t + 5 + d);
	c->a = (struct kvs_attn){
		.q_heads = 1,
		.kv_heads = 1,
		.head_dim = 4,
		.scale = 1.0f,
		.q = c->q,
		.blocks = c->views,
		.block_count = 1,
		.k_quant_len = 8,
		.v_quant_len = 4,
		.k_resid = c->k_resid,
		.v_resid = &c->v_resid[0][0],
		.k_resid_len = 1,
		.v_resid_len = 5,
		.k_resid_stride = 1,
		.v_resid_stride = 5,
		.out = c->out,
	};
}

/* softmax of each Key part on its own, the bug the seed warns about. */
static double per_part_softmax_output(void)
{
	double logits[9] = { 0, 0, 0, 0, 0, 0, 0, 0, log(9.0) };
	double p[9], sum_q = 0.0, out = 0.0;
	int t;

	for (t = 0; t < 8; t++)
		sum_q += exp(logits[t]);
	for (t = 0; t < 8; t++)
		p[t] = exp(logits[t]) / sum_q;
	p[8] = 1.0;
	for (t = 0; t < 9; t++)
		out += p[t] * (t + 1);
	return out;
}

static void test_seed_global_softmax(void **state)
{
	const struct kvs_backend_ops *cpu = kvs_backend_cpu();
	struct seed_case c;
	int d;

	(void)state;
	seed_case_init(&c);
	assert_string_equal(cpu->name, "cpu");
	assert_int_equal(cpu->attend(&c.a), 0);
	for (d = 0; d < 4; d++)
		assert_true(fabs(c.out[d] - (117.0 / 17.0 + d)) < 1e-6);

	assert_true(fabs(per_part_softmax_output() - 13.5) < 1e-12);
	assert_true(fabs(c.out[0] - 13.5) > 1.0);
	test_block_free(&c.blk);
}

static void test_key_boundary_refused(void **state)
{
	const struct kvs_backend_ops *cpu = kvs_backend_cpu();
	struct seed_case c;

	(void)state;
	seed_case_init(&c);
	/* Cutting Values at the Key boundary: 8 + 5 != 8 + 1. */
	c.a.v_quant_len = 8;
	c.out[0] = c.out[3] = -7.0f;
	assert_int_equal(cpu->attend(&c.a), -KVS_EBOUNDARY);
	assert_true(c.out[0] == -7.0f && c.out[3] == -7.0f);
	/* And the Value boundary used for Keys. */
	c.a.v_quant_len = 4;
	c.a.k_quant_len = 4;
	assert_int_equal(cpu->attend(&c.a), -KVS_EBOUNDARY);
	test_block_free(&c.blk);
}

static void test_bad_arguments(void **state)
{
	const struct kvs_backend_ops *cpu = kvs_backend_cpu();
	struct seed_case c;
	struct kvs_attn a;

	(void)state;
	seed_case_init(&c);

	a = c.a;
	a.k_quant_len = a.v_quant_len = 0;
	a.k_resid_len = a.v_resid_len = 0;
	assert_int_equal(cpu->attend(&a), -KVS_EPARAM);
	a = c.a;
	a.q_heads = 3;
	a.kv_heads = 2;
	assert_int_equal(cpu->attend(&a), -KVS_EPARAM);
	a = c.a;
	a.k_quant_len = 7; /* not a multiple of G = 4 */
	a.k_resid_len = 2;
	assert_int_equal(cpu->attend(&a), -KVS_EPARAM);
	a = c.a;
	a.k_quant_len = 12; /* beyond one block of 8 */
	a.v_quant_len = 8;
	assert_int_equal(cpu->attend(&a), -KVS_EPARAM);
	a = c.a;
	a.block_count = 0;
	assert_int_equal(cpu->attend(&a), -KVS_EPARAM);
	a = c.a;
	a.head_dim = 8;
	assert_int_equal(cpu->attend(&a), -KVS_EPARAM);
	a = c.a;
	a.v_resid_stride = 4;
	assert_int_equal(cpu->attend(&a), -KVS_EPARAM);
	a = c.a;
	a.k_resid = NULL;
	assert_int_equal(cpu->attend(&a), -KVS_EPARAM);
	a = c.a;
	c.q[1] = NAN;
	assert_int_equal(cpu->attend(&a), -KVS_ENONFINITE);
	c.q[1] = 0.0f;
	c.v_resid[2][1] = INFINITY;
	assert_int_equal(cpu->attend(&a), -KVS_ENONFINITE);
	test_block_free(&c.blk);
}

/* One random problem against the dense reference on the dequantized
 * cache. */
struct random_case {
	uint32_t kv_heads, ratio, head_dim, group, bits, span, blocks;
	enum kvs_dtype meta;
	uint32_t k_quant, k_resid, v_quant, v_resid;
};

static void run_random_case(struct kvs_rng *seed, const struct random_case *rc)
{
	struct kvs_shape shape = {
		.kv_heads = (uint16_t)rc->kv_heads,
		.head_dim = (uint16_t)rc->head_dim,
		.group = (uint16_t)rc->group,
		.bits = (uint8_t)rc->bits,
		.meta_type = (uint8_t)rc->meta,
		.span = rc->span,
		.residual = rc->span,
	};
	uint32_t H = rc->kv_heads, D = rc->head_dim, S = rc->span;
	uint32_t q_heads = H * rc->ratio;
	uint32_t tokens = rc->k_quant + rc->k_resid;
	uint32_t hist = rc->blocks * S, stride = tokens + 3, b, t, h;
	size_t row = (size_t)H * D, all = (size_t)(hist + tokens) * row;
	float *k = malloc(sizeof(float) * all);
	float *v = malloc(sizeof(float) * all);
	float *khat = malloc(sizeof(float) * all);
	float *vhat = malloc(sizeof(float) * all);
	float *kr = malloc(sizeof(float) * H * stride * D);
	float *vr = malloc(sizeof(float) * H * stride * D);
	float *q = malloc(sizeof(float) * q_heads * D);
	float *out = malloc(sizeof(float) * q_heads * D);
	double *want = malloc(sizeof(double) * q_heads * D);
	struct test_block *blk = calloc(rc->blocks + 1, sizeof(*blk));
	const struct kvs_view **views = calloc(rc->blocks + 1, sizeof(*views));
	struct kvs_ident ident;
	struct kvs_attn a;

	memset(&ident, 0, sizeof(ident));
	fill_rows(seed, k, hist + tokens, H, D);
	fill_rows(seed, v, hist + tokens, H, D);
	for (t = 0; t < q_heads * D; t++)
		q[t] = kvs_rng_uniform(seed, -1.0f, 1.0f);
	memcpy(khat, k, sizeof(float) * all);
	memcpy(vhat, v, sizeof(float) * all);
	for (b = 0; b < rc->blocks; b++) {
		assert_int_equal(test_block_make(&shape, &ident, k, v, b * S,
						 &blk[b], khat, vhat),
				 0);
		views[b] = &blk[b].view;
	}
	/* The cache seen: dequantized rows below each boundary, the
	 * original rows above; residual rows copied with a stride. */
	for (t = 0; t < tokens; t++) {
		float *kt = khat + (size_t)t * row;
		float *vt = vhat + (size_t)t * row;

		if (t >= rc->k_quant)
			memcpy(kt, k + (size_t)t * row, sizeof(float) * row);
		if (t >= rc->v_quant)
			memcpy(vt, v + (size_t)t * row, sizeof(float) * row);
		for (h = 0; h < H; h++) {
			if (t >= rc->k_quant)
				memcpy(kr + ((size_t)h * stride + t -
					     rc->k_quant) *
						       D,
				       kt + (size_t)h * D, sizeof(float) * D);
			if (t >= rc->v_quant)
				memcpy(vr + ((size_t)h * stride + t -
					     rc->v_quant) *
						       D,
				       vt + (size_t)h * D, sizeof(float) * D);
		}
	}
	dense_attend(q_heads, H, D, 1.0 / sqrt(D), q, khat, vhat, tokens, want);

	a = (struct kvs_attn){
		.q_heads = q_heads,
		.kv_heads = H,
		.head_dim = D,
		.scale = (float)(1.0 / sqrt(D)),
		.q = q,
		.blocks = views,
		.block_count = rc->blocks,
		.k_quant_len = rc->k_quant,
		.v_quant_len = rc->v_quant,
		.k_resid = kr,
		.v_resid = vr,
		.k_resid_len = rc->k_resid,
		.v_resid_len = rc->v_resid,
		.k_resid_stride = stride,
		.v_resid_stride = stride,
		.out = out,
	};
	assert_int_equal(kvs_backend_cpu()->attend(&a), 0);
	if (rel_error(out, want, (size_t)q_heads * D) > 1e-5)
		fail_msg("H=%u ratio=%u D=%u G=%u b=%u S=%u kq=%u kr=%u vq=%u "
			 "vr=%u: rel error %g",
			 H, rc->ratio, D, rc->group, rc->bits, S, rc->k_quant,
			 rc->k_resid, rc->v_quant, rc->v_resid,
			 rel_error(out, want, (size_t)q_heads * D));

	for (b = 0; b < rc->blocks; b++)
		test_block_free(&blk[b]);
	free(views);
	free(blk);
	free(want);
	free(out);
	free(q);
	free(vr);
	free(kr);
	free(vhat);
	free(khat);
	free(v);
	free(k);
}

/* Picks lengths; @shape_kind 0: random, 1: no history, 2: no Key
 * residual, 3: no Value residual. */
static void pick_lengths(struct kvs_rng *seed, struct random_case *rc,
			 int shape_kind)
{
	uint32_t hist = rc->blocks * rc->span, tokens;

	if (shape_kind == 1)
		rc->blocks = hist = 0;
	rc->k_quant = rc->group * kvs_rng_below(seed, hist / rc->group + 1);
	if (shape_kind == 1)
		rc->k_quant = 0;
	rc->k_resid =
		shape_kind == 2 ? 0 : 1 + kvs_rng_below(seed, 2 * rc->span);
	if (rc->k_quant + rc->k_resid == 0)
		rc->k_resid = 1;
	tokens = rc->k_quant + rc->k_resid;
	rc->v_quant = kvs_rng_below(seed, (tokens < hist ? tokens : hist) + 1);
	if (shape_kind == 3)
		rc->v_quant = tokens < hist ? tokens : hist;
	rc->v_resid = tokens - rc->v_quant;
}

static void test_random_against_dense(void **state)
{
	static const uint32_t dims[] = { 32, 64, 128 };
	static const uint32_t groups[] = { 8, 16, 32 };
	static const uint32_t ratios[] = { 1, 2, 4, 8 };
	static const enum kvs_dtype metas[] = { KVS_DTYPE_F16, KVS_DTYPE_BF16,
						KVS_DTYPE_F32 };
	struct kvs_rng seed = { 0xa77e2d5eedull };
	int iter;

	(void)state;
	for (iter = 0; iter < 96; iter++) {
		struct random_case rc;

		rc.kv_heads = 1 + kvs_rng_below(&seed, 2);
		rc.ratio = ratios[iter % 4];
		rc.head_dim = dims[kvs_rng_below(&seed, 3)];
		rc.group = groups[kvs_rng_below(&seed, 3)];
		rc.bits = iter % 2 ? 4 : 2;
		rc.meta = metas[(iter / 2) % 3];
		rc.span = rc.group * (1 + kvs_rng_below(&seed, 4));
		rc.blocks = kvs_rng_below(&seed, 4);
		pick_lengths(&seed, &rc, (iter / 6) % 4);
		run_random_case(&seed, &rc);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_seed_global_softmax),
		cmocka_unit_test(test_key_boundary_refused),
		cmocka_unit_test(test_bad_arguments),
		cmocka_unit_test(test_random_against_dense),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
