/*
 * test_stream - one layer of one request driven through prefill and many
 * decode steps in both orders, checked step by step against a dense
 * double-precision reference that rebuilds, from the step's trace row,
 * which Keys and Values are quantized; the stream's blocks against
 * kvs_block_seal of the same tokens; ids, the tail, and failures that must
 * leave the stream as it was.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "kvstash/stream.h"
#include "test_stream_util.h"

struct stream_case {
	uint32_t kv_heads, ratio, head_dim, group, residual, span, bits;
	enum kvs_dtype meta;
};

static const struct stream_case cases[] = {
	{ 1, 1, 32, 8, 8, 8, 2, KVS_DTYPE_F16 },
	{ 2, 4, 64, 16, 32, 64, 2, KVS_DTYPE_F16 },
	{ 2, 2, 32, 8, 16, 48, 4, KVS_DTYPE_BF16 },
	{ 1, 8, 128, 32, 32, 32, 2, KVS_DTYPE_F32 },
};

/* Everything one run needs: inputs for all tokens, their dequantized
 * images, the stream. */
struct run {
	struct kvs_stream_config cfg;
	uint32_t H, D, q_heads, total;
	size_t row;
	float *k, *v, *khat, *vhat, *seen_k, *seen_v, *q, *out;
	double *want;
	struct kvs_stream *st;
};

static void run_init(struct run *r, const struct stream_case *c,
		     enum kvs_order order, uint32_t tokens,
		     struct kvs_rng *seed)
{
	struct kvs_shape *shape = &r->cfg.shape;
	struct kvs_ident zero;
	struct test_block blk;
	uint32_t b, i;
	size_t n;

	memset(r, 0, sizeof(*r));
	memset(&zero, 0, sizeof(zero));
	*shape = (struct kvs_shape){
		.kv_heads = (uint16_t)c->kv_heads,
		.head_dim = (uint16_t)c->head_dim,
		.group = (uint16_t)c->group,
		.bits = (uint8_t)c->bits,
		.meta_type = (uint8_t)c->meta,
		.span = c->span,
		.residual = c->residual,
	};
	r->cfg.order = order;
	r->cfg.q_heads = c->kv_heads * c->ratio;
	for (i = 0; i < KVS_ID_SIZE; i++)
		r->cfg.ident.model_fp[i] = (uint8_t)(i * 7 + 1);
	r->cfg.ident.layer = 3;
	if (c->span != c->residual)
		r->cfg.ident.parent_id[0] = 0x5a;
	r->H = c->kv_heads;
	r->D = c->head_dim;
	r->q_heads = r->cfg.q_heads;
	r->row = (size_t)r->H * r->D;
	r->total = (tokens + c->span - 1) / c->span * c->span;
	n = r->total * r->row;
	r->k = malloc(sizeof(float) * 6 * n);
	assert_non_null(r->k);
	r->v = r->k + n;
	r->khat = r->k + 2 * n;
	r->vhat = r->k + 3 * n;
	r->seen_k = r->k + 4 * n;
	r->seen_v = r->k + 5 * n;
	r->q = malloc(sizeof(float) * r->total * r->q_heads * r->D);
	r->out = malloc(sizeof(float) * r->total * r->q_heads * r->D);
	r->want = malloc(sizeof(double) * r->q_heads * r->D);
	assert_true(r->q && r->out && r->want);
	fill_rows(seed, r->k, r->total, r->H, r->D);
	fill_rows(seed, r->v, r->total, r->H, r->D);
	for (n = 0; n < (size_t)r->total * r->q_heads * r->D; n++)
		r->q[n] = kvs_rng_uniform(seed, -1.0f, 1.0f);
	/* Key groups are G tokens and Value groups one token, so a token's
	 * dequantized K/V is the same in any block image holding it. */
	for (b = 0; b < r->total / c->span; b++) {
		assert_int_equal(test_block_make(shape, &zero, r->k, r->v,
						 b * c->span, &blk, r->khat,
						 r->vhat),
				 0);
		test_block_free(&blk);
	}
	assert_int_equal(kvs_stream_create(&r->cfg, &r->st), 0);
}

static void run_free(struct run *r)
{
	kvs_stream_destroy(r->st);
	free(r->want);
	free(r->out);
	free(r->q);
	free(r->k);
}

/* Dense reference for query token @t over tokens [0, @tokens), Keys below
 * @k_quant and Values below @v_quant dequantized. */
static void check_step(struct run *r, uint32_t t, uint32_t tokens,
		       uint32_t k_quant, uint32_t v_quant, const float *got)
{
	size_t qn = (size_t)r->q_heads * r->D;
	uint32_t i;
	double err;

	for (i = 0; i < tokens; i++) {
		const float *ks = i < k_quant ? r->khat : r->k;
		const float *vs = i < v_quant ? r->vhat : r->v;

		memcpy(r->seen_k + i * r->row, ks + i * r->row,
		       sizeof(float) * r->row);
		memcpy(r->seen_v + i * r->row, vs + i * r->row,
		       sizeof(float) * r->row);
	}
	dense_attend(r->q_heads, r->H, r->D, 1.0 / sqrt(r->D), r->q + t * qn,
		     r->seen_k, r->seen_v, tokens, r->want);
	err = rel_error(got, r->want, qn);
	if (err > 1e-5)
		fail_msg("token %u (kq %u vq %u): rel error %g", t, k_quant,
			 v_quant, err);
}

/* Blocks are kvs_block_seal of the same tokens, with position ids. */
static void check_blocks(struct run *r)
{
	uint32_t S = r->cfg.shape.span, count, i, p;
	uint32_t *positions = malloc(sizeof(*positions) * S);
	uint8_t id[KVS_ID_SIZE];

	count = kvs_stream_block_count(r->st);
	assert_null(kvs_stream_block(r->st, count));
	assert_null(kvs_stream_block_data(r->st, count, NULL));
	for (i = 0; i < count; i++) {
		const struct kvs_view *view = kvs_stream_block(r->st, i);
		const uint8_t *parent;
		struct test_block blk;
		const uint8_t *data;
		size_t len;

		assert_non_null(view);
		data = kvs_stream_block_data(r->st, i, &len);
		assert_non_null(data);
		assert_int_equal(test_block_make(&r->cfg.shape,
						 &view->hdr.ident, r->k, r->v,
						 i * S, &blk, NULL, NULL),
				 0);
		assert_int_equal(blk.len, len);
		assert_memory_equal(blk.obj, data, len);
		test_block_free(&blk);

		assert_int_equal(view->hdr.ident.layer, 3);
		assert_int_equal(view->hdr.ident.first_pos, (uint64_t)i * S);
		assert_memory_equal(view->hdr.ident.model_fp,
				    r->cfg.ident.model_fp, KVS_ID_SIZE);
		if (i > 0)
			parent = kvs_stream_block(r->st, i - 1)
					 ->hdr.ident.block_id;
		else
			parent = r->cfg.ident.parent_id[0]
					 ? r->cfg.ident.parent_id
					 : NULL;
		for (p = 0; p < S; p++)
			positions[p] = i * S + p;
		assert_int_equal(kvs_span_id(KVS_STREAM_POSITION_NS,
					     r->cfg.ident.model_fp, parent,
					     positions, S, id),
				 0);
		assert_memory_equal(view->hdr.ident.block_id, id, KVS_ID_SIZE);
	}
	free(positions);
}

/* The tail holds every token not in a finished block. */
static void check_tail(struct run *r)
{
	uint32_t T = kvs_stream_tokens(r->st), S = r->cfg.shape.span;
	uint32_t key_first = kvs_stream_block_count(r->st) * S;
	uint32_t val_first = T - kvs_stream_r_v(r->st), h, t;
	struct kvs_view view;
	uint8_t *obj;
	size_t len;

	if (val_first > key_first)
		val_first = key_first;
	if (T - key_first >= r->cfg.shape.residual) {
		/* S > R with sealed Keys in the open block: no tail form. */
		assert_int_equal(
			kvs_stream_tail(r->st, KVS_DTYPE_F32, &obj, &len),
			-KVS_EPARAM);
		return;
	}
	assert_int_equal(kvs_stream_tail(r->st, KVS_DTYPE_F32, &obj, &len), 0);
	assert_int_equal(kvs_object_open(obj, len, 0, &view), 0);
	assert_int_equal(view.hdr.kind, KVS_KIND_TAIL);
	assert_int_equal(view.hdr.r_k, T - key_first);
	assert_int_equal(view.hdr.r_v, T - val_first);
	for (h = 0; h < r->H; h++) {
		for (t = key_first; t < T; t++)
			assert_memory_equal(
				(const float *)view.section[KVS_SEC_KEY_RESID] +
					((size_t)h * (T - key_first) + t -
					 key_first) *
						r->D,
				r->k + t * r->row + h * r->D,
				sizeof(float) * r->D);
		for (t = val_first; t < T; t++)
			assert_memory_equal(
				(const float *)view.section[KVS_SEC_VAL_RESID] +
					((size_t)h * (T - val_first) + t -
					 val_first) *
						r->D,
				r->v + t * r->row + h * r->D,
				sizeof(float) * r->D);
	}
	kvs_view_release(&view);
	free(obj);
	assert_int_equal(kvs_stream_tail(r->st, KVS_DTYPE_F16, &obj, &len), 0);
	free(obj);
}

static void drive(const struct stream_case *c, enum kvs_order order,
		  uint32_t prefill, uint32_t steps, struct kvs_rng *seed)
{
	uint32_t R = c->residual, T = prefill + steps, t;
	struct kvs_trace_row *trace = malloc(sizeof(*trace) * T);
	size_t qn;
	struct run r;

	run_init(&r, c, order, T, seed);
	qn = (size_t)r.q_heads * r.D;
	assert_int_equal(kvs_trace(R, c->group, order, T, trace), 0);
	if (prefill) {
		assert_int_equal(
			kvs_stream_prefill(r.st, r.q, r.k, r.v, prefill, r.out),
			0);
		for (t = 0; t < prefill; t++)
			check_step(&r, t, t + 1, 0, 0, r.out + t * qn);
	}
	for (t = prefill; t < T; t++) {
		struct kvs_trace_row row;

		assert_int_equal(
			kvs_stream_step(r.st, r.q + t * qn, r.k + t * r.row,
					r.v + t * r.row, r.out + t * qn, &row),
			0);
		assert_memory_equal(&row, &trace[t], sizeof(row));
		check_step(&r, t, t + 1, row.k_compute_quant,
			   row.v_compute_quant, r.out + t * qn);
	}
	assert_int_equal(kvs_stream_tokens(r.st), T);
	assert_int_equal(kvs_stream_r_k(r.st), T % R);
	assert_int_equal(kvs_stream_r_v(r.st), T < R ? T : R);
	assert_int_equal(kvs_stream_block_count(r.st), (T - T % R) / c->span);
	check_blocks(&r);
	check_tail(&r);
	run_free(&r);
	free(trace);
}

static void test_against_dense(void **state)
{
	struct kvs_rng seed = { 0x5eed5742ull };
	size_t i;
	int o, p;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const struct stream_case *c = &cases[i];
		uint32_t prefills[] = { 0, 1, c->residual - 1, c->residual,
					c->span + c->residual / 2 + 1 };

		uint32_t steps = 2 * c->span + c->residual + 2;

		for (o = 0; o < 2; o++)
			for (p = 0; p < 5; p++)
				drive(c, o ? KVS_ORDER_PAPER : KVS_ORDER_KIVI,
				      prefills[p], steps, &seed);
	}
}

/* A seal that fails (fp16 step overflow) leaves the stream as it was. */
static void test_failed_step_changes_nothing(void **state)
{
	const struct stream_case *c = &cases[0];
	uint32_t R = c->residual;
	struct kvs_rng seed = { 0xbadc0deull };
	struct kvs_trace_row row;
	size_t qn;
	struct run r;
	float *huge;
	int o;

	(void)state;
	for (o = 0; o < 2; o++) {
		run_init(&r, c, o ? KVS_ORDER_PAPER : KVS_ORDER_KIVI, 2 * R,
			 &seed);
		qn = (size_t)r.q_heads * r.D;
		huge = malloc(sizeof(float) * r.row);
		assert_int_equal(
			kvs_stream_prefill(r.st, NULL, r.k, r.v, R - 1, NULL),
			0);
		memcpy(huge, r.k + (R - 1) * r.row, sizeof(float) * r.row);
		huge[0] = 1e6f;
		row.tokens = 12345;
		assert_int_equal(kvs_stream_step(r.st, r.q, huge,
						 r.v + (R - 1) * r.row, r.out,
						 &row),
				 -KVS_ERANGE);
		assert_int_equal(row.tokens, 12345);
		assert_int_equal(kvs_stream_tokens(r.st), R - 1);
		assert_int_equal(kvs_stream_r_k(r.st), R - 1);
		assert_int_equal(kvs_stream_block_count(r.st), 0);

		huge[0] = NAN;
		assert_int_equal(kvs_stream_step(r.st, r.q, huge,
						 r.v + (R - 1) * r.row, r.out,
						 NULL),
				 -KVS_ENONFINITE);
		assert_int_equal(kvs_stream_tokens(r.st), R - 1);

		assert_int_equal(kvs_stream_step(r.st, r.q + (R - 1) * qn,
						 r.k + (R - 1) * r.row,
						 r.v + (R - 1) * r.row, r.out,
						 &row),
				 0);
		check_step(&r, R - 1, R, row.k_compute_quant,
			   row.v_compute_quant, r.out);
		assert_int_equal(kvs_stream_block_count(r.st), 1);
		check_blocks(&r);
		free(huge);
		run_free(&r);
	}
}

/* The handoff of stream @from: its blocks' bytes and its tail. */
struct handoff {
	const uint8_t **blocks;
	size_t *lens;
	uint32_t count;
	uint8_t *tail;
	size_t tail_len;
};

static void handoff_take(struct kvs_stream *from, struct handoff *h)
{
	uint32_t i;

	h->count = kvs_stream_block_count(from);
	h->blocks = calloc(h->count + 1, sizeof(*h->blocks));
	h->lens = calloc(h->count + 1, sizeof(*h->lens));
	assert_true(h->blocks && h->lens);
	for (i = 0; i < h->count; i++)
		h->blocks[i] = kvs_stream_block_data(from, i, &h->lens[i]);
	assert_int_equal(
		kvs_stream_tail(from, KVS_DTYPE_F32, &h->tail, &h->tail_len),
		0);
}

static void handoff_free(struct handoff *h)
{
	free(h->tail);
	free(h->lens);
	free(h->blocks);
}

/* Prefill A, hand off to a fresh B, then both decode the same tokens with
 * the same results, bit for bit. */
static void resume_case(const struct stream_case *c, enum kvs_order order,
			uint32_t prefill, struct kvs_rng *seed)
{
	uint32_t extra = c->span + c->residual + 3, t, i;
	struct kvs_stream *b;
	struct handoff h;
	size_t qn, len_a, len_b;
	struct run r;
	float *out_b;

	run_init(&r, c, order, prefill + extra, seed);
	qn = (size_t)r.q_heads * r.D;
	out_b = malloc(sizeof(float) * qn);
	assert_int_equal(
		kvs_stream_prefill(r.st, NULL, r.k, r.v, prefill, NULL), 0);
	handoff_take(r.st, &h);
	assert_int_equal(kvs_stream_create(&r.cfg, &b), 0);
	assert_int_equal(kvs_stream_resume(b, h.blocks, h.lens, h.count, h.tail,
					   h.tail_len),
			 0);
	assert_int_equal(kvs_stream_tokens(b), prefill);
	assert_int_equal(kvs_stream_r_k(b), kvs_stream_r_k(r.st));
	assert_int_equal(kvs_stream_r_v(b), kvs_stream_r_v(r.st));
	assert_int_equal(kvs_stream_block_count(b), h.count);
	for (t = prefill; t < prefill + extra; t++) {
		struct kvs_trace_row row_a, row_b;

		assert_int_equal(
			kvs_stream_step(r.st, r.q + t * qn, r.k + t * r.row,
					r.v + t * r.row, r.out, &row_a),
			0);
		assert_int_equal(
			kvs_stream_step(b, r.q + t * qn, r.k + t * r.row,
					r.v + t * r.row, out_b, &row_b),
			0);
		assert_memory_equal(&row_a, &row_b, sizeof(row_a));
		assert_memory_equal(r.out, out_b, sizeof(float) * qn);
	}
	assert_int_equal(kvs_stream_block_count(b),
			 kvs_stream_block_count(r.st));
	for (i = 0; i < kvs_stream_block_count(b); i++) {
		const uint8_t *a_bytes = kvs_stream_block_data(r.st, i, &len_a);
		const uint8_t *b_bytes = kvs_stream_block_data(b, i, &len_b);

		assert_int_equal(len_a, len_b);
		assert_memory_equal(a_bytes, b_bytes, len_a);
	}
	kvs_stream_destroy(b);
	handoff_free(&h);
	free(out_b);
	run_free(&r);
}

static void test_resume(void **state)
{
	struct kvs_rng seed = { 0x4e5ull };
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const struct stream_case *c = &cases[i];
		/* With S > R, prompts that leave the open block empty. */
		uint32_t prefills[] = { 1, c->residual - 1,
					c->span + c->residual - 1,
					2 * c->span };
		size_t p;

		for (p = 0; p < 4; p++)
			resume_case(c, p % 2 ? KVS_ORDER_PAPER : KVS_ORDER_KIVI,
				    prefills[p], &seed);
	}
}

/* A handoff that does not fit is refused and leaves the stream empty. */
static void test_resume_refused(void **state)
{
	const struct stream_case *c = &cases[0]; /* S = R = 8 */
	struct kvs_rng seed = { 0x4e5eull };
	struct kvs_stream_config cfg;
	struct kvs_stream *b;
	struct handoff h;
	const uint8_t *swap;
	uint8_t *bad;
	struct run r;

	(void)state;
	run_init(&r, c, KVS_ORDER_KIVI, 3 * c->span + 2, &seed);
	assert_int_equal(
		kvs_stream_prefill(r.st, NULL, r.k, r.v, 3 * c->span + 2, NULL),
		0);
	handoff_take(r.st, &h);
	assert_int_equal(h.count, 3);
	assert_int_equal(kvs_stream_create(&r.cfg, &b), 0);

	/* Blocks out of order, one missing, a tail as a block. */
	swap = h.blocks[0];
	h.blocks[0] = h.blocks[1];
	h.blocks[1] = swap;
	assert_int_equal(
		kvs_stream_resume(b, h.blocks, h.lens, 3, h.tail, h.tail_len),
		-KVS_EPARAM);
	assert_int_equal(kvs_stream_tokens(b), 0);
	assert_int_equal(kvs_stream_block_count(b), 0);
	h.blocks[1] = h.blocks[0];
	h.blocks[0] = swap;
	assert_int_equal(
		kvs_stream_resume(b, h.blocks, h.lens, 2, h.tail, h.tail_len),
		-KVS_EPARAM);
	h.blocks[3] = h.tail;
	h.lens[3] = h.tail_len;
	assert_int_equal(
		kvs_stream_resume(b, h.blocks, h.lens, 4, h.tail, h.tail_len),
		-KVS_EKIND);
	assert_int_equal(kvs_stream_resume(b, h.blocks, h.lens, 3, h.blocks[2],
					   h.lens[2]),
			 -KVS_EKIND);

	/* A flipped byte in a block is that block's validation error. */
	bad = malloc(h.lens[1]);
	memcpy(bad, h.blocks[1], h.lens[1]);
	bad[h.lens[1] - 300] ^= 0x10;
	h.blocks[1] = bad;
	assert_int_equal(
		kvs_stream_resume(b, h.blocks, h.lens, 3, h.tail, h.tail_len),
		kvs_object_verify(bad, h.lens[1], 0));
	assert_true(kvs_object_verify(bad, h.lens[1], 0) < 0);
	assert_int_equal(kvs_stream_block_count(b), 0);
	h.blocks[1] = kvs_stream_block_data(r.st, 1, NULL);
	free(bad);
	kvs_stream_destroy(b);

	/* Another layer. */
	cfg = r.cfg;
	cfg.ident.layer = 4;
	assert_int_equal(kvs_stream_create(&cfg, &b), 0);
	assert_int_equal(
		kvs_stream_resume(b, h.blocks, h.lens, 3, h.tail, h.tail_len),
		-KVS_EPARAM);
	kvs_stream_destroy(b);

	/* Only into an empty stream; then it works. */
	assert_int_equal(kvs_stream_resume(r.st, h.blocks, h.lens, 3, h.tail,
					   h.tail_len),
			 -KVS_EPARAM);
	assert_int_equal(kvs_stream_create(&r.cfg, &b), 0);
	assert_int_equal(
		kvs_stream_resume(b, h.blocks, h.lens, 3, h.tail, h.tail_len),
		0);
	assert_int_equal(kvs_stream_tokens(b), 3 * c->span + 2);
	kvs_stream_destroy(b);
	handoff_free(&h);
	run_free(&r);
}

/* A backend that counts its calls and hands them to the CPU one: the
 * stream computes and seals only through the configured ops. */
static unsigned seal_calls, attend_calls;

static int counting_seal(const struct kvs_shape *shape,
			 const struct kvs_ident *ident, enum kvs_dtype in_dtype,
			 const void *keys, const void *values, uint8_t *image)
{
	seal_calls++;
	return kvs_backend_cpu()->seal(shape, ident, in_dtype, keys, values,
				       image);
}

static int counting_attend(const struct kvs_attn *args)
{
	attend_calls++;
	return kvs_backend_cpu()->attend(args);
}

static void test_backend_ops(void **state)
{
	static const struct kvs_backend_ops counting = {
		.name = "counting",
		.seal = counting_seal,
		.attend = counting_attend,
	};
	const struct stream_case *c = &cases[2]; /* R = 16, S = 48 */
	struct kvs_rng seed = { 0xc0047ull };
	size_t qn;
	struct run r;
	uint32_t t;

	(void)state;
	run_init(&r, c, KVS_ORDER_KIVI, 100, &seed);
	kvs_stream_destroy(r.st);
	r.cfg.backend = &counting;
	assert_int_equal(kvs_stream_create(&r.cfg, &r.st), 0);
	qn = (size_t)r.q_heads * r.D;
	assert_int_equal(kvs_stream_prefill(r.st, r.q, r.k, r.v, 20, r.out), 0);
	/* One causal attention per prompt token, one seal of R Keys. */
	assert_int_equal(attend_calls, 20);
	assert_int_equal(seal_calls, 1);
	for (t = 20; t < 100; t++)
		assert_int_equal(kvs_stream_step(r.st, r.q + t * qn,
						 r.k + t * r.row,
						 r.v + t * r.row, r.out, NULL),
				 0);
	/* One attention per step; a seal at every R Keys (each rebuilds the
	 * open block's image until S Keys finish it). */
	assert_int_equal(attend_calls, 100);
	assert_int_equal(seal_calls, 100 / 16);
	assert_int_equal(kvs_stream_block_count(r.st), 2);
	check_blocks(&r);
	run_free(&r);
}

static void test_bad_arguments(void **state)
{
	const struct stream_case *c = &cases[1];
	struct kvs_rng seed = { 0x0a5e11ull };
	struct kvs_stream_config cfg;
	struct kvs_stream *st = (struct kvs_stream *)&seed;
	struct run r;
	float saved;

	(void)state;
	run_init(&r, c, KVS_ORDER_KIVI, 8, &seed);
	cfg = r.cfg;
	cfg.q_heads = 3;
	assert_int_equal(kvs_stream_create(&cfg, &st), -KVS_EPARAM);
	cfg = r.cfg;
	cfg.shape.span = cfg.shape.residual + 1;
	assert_int_equal(kvs_stream_create(&cfg, &st), -KVS_EPARAM);
	cfg = r.cfg;
	cfg.order = (enum kvs_order)9;
	assert_int_equal(kvs_stream_create(&cfg, &st), -KVS_EPARAM);
	assert_int_equal(kvs_stream_create(NULL, &st), -KVS_EPARAM);
	assert_int_equal(kvs_stream_create(&r.cfg, NULL), -KVS_EPARAM);
	assert_true(st == (struct kvs_stream *)&seed);

	/* An empty stream has an empty tail. */
	check_tail(&r);

	/* A non-finite prefill leaves the stream empty and usable. */
	saved = r.v[5];
	r.v[5] = INFINITY;
	assert_int_equal(kvs_stream_prefill(r.st, r.q, r.k, r.v, 4, r.out),
			 -KVS_ENONFINITE);
	assert_int_equal(kvs_stream_tokens(r.st), 0);
	r.v[5] = saved;
	assert_int_equal(kvs_stream_prefill(r.st, r.q, r.k, r.v, 0, r.out),
			 -KVS_EPARAM);
	assert_int_equal(kvs_stream_prefill(r.st, NULL, r.k, r.v, 4, r.out),
			 -KVS_EPARAM);
	assert_int_equal(kvs_stream_prefill(r.st, r.q, r.k, r.v, 4, r.out), 0);
	assert_int_equal(kvs_stream_prefill(r.st, r.q, r.k, r.v, 4, r.out),
			 -KVS_EPARAM);
	assert_int_equal(kvs_stream_tokens(r.st), 4);
	assert_int_equal(kvs_stream_step(r.st, NULL, r.k, r.v, r.out, NULL),
			 -KVS_EPARAM);
	assert_int_equal(kvs_stream_tail(r.st, (enum kvs_dtype)0, NULL, NULL),
			 -KVS_EPARAM);
	assert_int_equal(kvs_stream_tokens(NULL), 0);
	assert_null(kvs_stream_block(NULL, 0));
	kvs_stream_destroy(NULL);
	run_free(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_against_dense),
		cmocka_unit_test(test_failed_step_changes_nothing),
		cmocka_unit_test(test_backend_ops),
		cmocka_unit_test(test_resume),
		cmocka_unit_test(test_resume_refused),
		cmocka_unit_test(test_bad_arguments),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
