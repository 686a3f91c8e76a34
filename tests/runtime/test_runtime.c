/*
 * test_runtime.c - the sequence runtime on the CPU device: its decode
 * steps against the streaming reference (kvs_stream, the seed's state
 * machine) bit for bit in both orders and all three K/V types; a batch of
 * sequences of different lengths against each sequence alone, also after
 * one leaves mid-way; page-pool exhaustion as a clear error that changes
 * nothing; sealed blocks and their dequantized history against the
 * format's reference; tails that do not fit refused; non-finite input
 * refused.
 */
#include "rt_test.h"

#include <errno.h>
#include <math.h>

#define SEED 7
#define ID_SEED 11

/* The reference: one kvs_stream per layer, fed the same numbers (fp32 of
 * the K/V type's values). */
static void stream_reference(enum kvs_dtype dtype, enum kvs_order order,
			     uint32_t prompt, uint32_t steps, float *out,
			     struct kvs_stream **streams)
{
	struct kvs_stream_config cfg;
	size_t row = (size_t)T_KV * T_D;
	float *k = malloc(sizeof(float) * row * prompt);
	float *v = malloc(sizeof(float) * row * prompt);
	float q[T_QH * T_D], kr[T_KV * T_D], vr[T_KV * T_D];

	assert_non_null(k);
	assert_non_null(v);
	memset(&cfg, 0, sizeof(cfg));
	kvs_shape_default(&cfg.shape, T_KV, T_D);
	cfg.shape.span = T_R;
	cfg.shape.residual = T_R;
	cfg.order = order;
	cfg.q_heads = T_QH;
	for (uint32_t l = 0; l < T_LAYERS; l++) {
		assert_int_equal(kvs_stream_create(&cfg, &streams[l]), 0);
		/* [T][kv][D]: token t, head h at t * row + h * D */
		for (uint32_t t = 0; t < prompt; t++)
			t_token_kv(SEED, l, t, KVS_DTYPE_F32, k, v, T_D,
				   t * row);
		/* the K/V type's rounding, as the runtime sees them */
		for (size_t i = 0; i < row * prompt; i++) {
			k[i] = kvs_round_to(dtype, k[i]);
			v[i] = kvs_round_to(dtype, v[i]);
		}
		assert_int_equal(kvs_stream_prefill(streams[l], NULL, k, v,
						    prompt, NULL),
				 0);
	}
	for (uint32_t s = 0; s < steps; s++) {
		for (uint32_t l = 0; l < T_LAYERS; l++) {
			t_token_q(SEED, l, prompt + s, KVS_DTYPE_F32, q, 0);
			t_token_kv(SEED, l, prompt + s, KVS_DTYPE_F32, kr, vr,
				   T_D, 0);
			for (size_t i = 0; i < T_QH * T_D; i++)
				q[i] = kvs_round_to(dtype, q[i]);
			for (size_t i = 0; i < row; i++) {
				kr[i] = kvs_round_to(dtype, kr[i]);
				vr[i] = kvs_round_to(dtype, vr[i]);
			}
			assert_int_equal(
				kvs_stream_step(streams[l], q, kr, vr,
						out + ((size_t)s * T_LAYERS +
						       l) * T_OUT,
						NULL),
				0);
		}
	}
	free(k);
	free(v);
}

static void check_against_stream(enum kvs_dtype dtype, enum kvs_order order,
				 uint32_t prompt, uint32_t steps)
{
	struct kvs_rt *rt = t_runtime(dtype, order, "", 256, NULL);
	struct kvs_stream *streams[T_LAYERS];
	struct kvs_batch *batch;
	struct kvs_seq *seq;
	size_t n = (size_t)steps * T_LAYERS * T_OUT;
	float *got = malloc(sizeof(float) * n),
	      *want = malloc(sizeof(float) * n);
	uint32_t *ids = t_ids(ID_SEED, prompt);

	assert_non_null(got);
	assert_non_null(want);
	assert_int_equal(kvs_batch_create(rt, 1, &batch), 0);
	assert_int_equal(kvs_seq_create(batch, &seq), 0);
	assert_int_equal(kvs_seq_append_ids(seq, ids, prompt), 0);
	assert_int_equal(t_prefill(seq, SEED, dtype, 0, prompt), 0);
	t_decode(seq, SEED, ID_SEED, dtype, prompt, steps, got);
	stream_reference(dtype, order, prompt, steps, want, streams);
	for (size_t i = 0; i < n; i++)
		if (memcmp(&got[i], &want[i], sizeof(float)) != 0)
			fail_msg("%s %s prompt %u: output %zu (step %zu) is "
				 "%.9g, the stream gives %.9g",
				 kvs_dtype_name(dtype), kvs_order_name(order),
				 prompt, i, i / (T_LAYERS * T_OUT), got[i],
				 want[i]);
	/* the blocks hold the same codes and metadata */
	for (uint32_t l = 0; l < T_LAYERS; l++) {
		uint32_t blocks = kvs_seq_block_count(seq, l);

		assert_int_equal(blocks, kvs_stream_block_count(streams[l]));
		assert_int_equal(blocks, (prompt + steps) / T_R);
		for (uint32_t b = 0; b < blocks; b++) {
			const struct kvs_view *ref =
				kvs_stream_block(streams[l], b);
			struct kvs_view view;
			uint8_t *obj;
			size_t len;

			assert_int_equal(kvs_seq_block(seq, l, b, &obj, &len),
					 0);
			assert_int_equal(kvs_object_open(obj, len, 0, &view),
					 0);
			for (int s = 0; s < KVS_BLOCK_SECTIONS; s++)
				assert_memory_equal(
					view.section[s], ref->section[s],
					view.hdr.section[s].logical_len);
			kvs_view_release(&view);
			free(obj);
		}
		kvs_stream_destroy(streams[l]);
	}
	kvs_batch_destroy(batch);
	kvs_rt_destroy(rt);
	free(ids);
	free(got);
	free(want);
}

static void test_matches_stream(void **state)
{
	static const enum kvs_dtype types[] = { KVS_DTYPE_F32, KVS_DTYPE_F16,
						KVS_DTYPE_BF16 };
	/* prompts below R, at R, between spans; decode across seals */
	static const uint32_t prompts[] = { 1, 20, 32, 77 };

	(void)state;
	for (size_t t = 0; t < 3; t++)
		for (size_t p = 0; p < 4; p++) {
			check_against_stream(types[t], KVS_ORDER_KIVI,
					     prompts[p], 70);
			check_against_stream(types[t], KVS_ORDER_PAPER,
					     prompts[p], 70);
		}
}

/* Steps every sequence of @batch once at position pos[i] of seed seeds[i]. */
static void batch_step(struct kvs_batch *batch, const uint64_t *seeds,
		       uint32_t *pos, float *out)
{
	uint32_t n = kvs_batch_size(batch);
	float *q = malloc(sizeof(float) * n * T_QH * T_D);
	float *k = malloc(sizeof(float) * n * T_KV * T_D);
	float *v = malloc(sizeof(float) * n * T_KV * T_D);

	for (uint32_t l = 0; l < T_LAYERS; l++) {
		for (uint32_t i = 0; i < n; i++) {
			t_token_q(seeds[i], l, pos[i], KVS_DTYPE_F32, q,
				  (size_t)i * T_QH * T_D);
			/* k, v: [n][kv][D] */
			t_token_kv(seeds[i], l, pos[i], KVS_DTYPE_F32, k, v,
				   T_D, (size_t)i * T_KV * T_D);
		}
		assert_int_equal(kvs_batch_step(batch, l, q, k, v,
						out + (size_t)l * n * T_OUT),
				 0);
	}
	for (uint32_t i = 0; i < n; i++)
		pos[i]++;
	free(q);
	free(k);
	free(v);
}

static void test_batch_equals_alone(void **state)
{
	static const uint32_t prompts[4] = { 5, 40, 100, 64 };
	uint64_t seeds[4] = { 101, 102, 103, 104 };
	uint32_t pos[4], alone_pos[4];
	struct kvs_rt *rt =
		t_runtime(KVS_DTYPE_F32, KVS_ORDER_KIVI, "", 512, NULL);
	struct kvs_batch *batch, *single[4];
	struct kvs_seq *seq[4], *alone[4];
	float out[T_LAYERS * 4 * T_OUT], ref[T_LAYERS * T_OUT];

	(void)state;
	assert_int_equal(kvs_batch_create(rt, 4, &batch), 0);
	for (int i = 0; i < 4; i++) {
		assert_int_equal(kvs_seq_create(batch, &seq[i]), 0);
		assert_int_equal(kvs_seq_index(seq[i]), i);
		assert_int_equal(t_prefill(seq[i], seeds[i], KVS_DTYPE_F32, 0,
					   prompts[i]),
				 0);
		assert_int_equal(kvs_batch_create(rt, 1, &single[i]), 0);
		assert_int_equal(kvs_seq_create(single[i], &alone[i]), 0);
		assert_int_equal(t_prefill(alone[i], seeds[i], KVS_DTYPE_F32, 0,
					   prompts[i]),
				 0);
		pos[i] = alone_pos[i] = prompts[i];
	}
	assert_int_equal(kvs_seq_create(batch, &(struct kvs_seq *){ NULL }),
			 -ENOSPC);
	for (int step = 0; step < 90; step++) {
		uint32_t n = kvs_batch_size(batch);

		if (step == 45) {
			/* the second sequence leaves; the others keep their
			 * order and state */
			kvs_seq_destroy(seq[1]);
			seq[1] = seq[2];
			seq[2] = seq[3];
			seeds[1] = seeds[2];
			seeds[2] = seeds[3];
			pos[1] = pos[2];
			pos[2] = pos[3];
			kvs_seq_destroy(alone[1]);
			kvs_batch_destroy(single[1]);
			single[1] = single[2];
			single[2] = single[3];
			alone[1] = alone[2];
			alone[2] = alone[3];
			alone_pos[1] = alone_pos[2];
			alone_pos[2] = alone_pos[3];
			n = kvs_batch_size(batch);
			assert_int_equal(n, 3);
			for (uint32_t i = 0; i < n; i++)
				assert_ptr_equal(kvs_batch_seq(batch, i),
						 seq[i]);
		}
		batch_step(batch, seeds, pos, out);
		for (uint32_t i = 0; i < n; i++) {
			batch_step(single[i], &seeds[i], &alone_pos[i], ref);
			for (uint32_t l = 0; l < T_LAYERS; l++)
				assert_memory_equal(out + ((size_t)l * n + i) *
								    T_OUT,
						    ref + (size_t)l * T_OUT,
						    sizeof(float) * T_OUT);
		}
	}
	for (int i = 0; i < 3; i++)
		kvs_batch_destroy(single[i]);
	kvs_batch_destroy(batch);
	kvs_rt_destroy(rt);
}

static void test_pool_exhaustion(void **state)
{
	/* 6 pages: 2 layers x 3 spans fit, 2 x 6 do not */
	struct kvs_rt *rt =
		t_runtime(KVS_DTYPE_F16, KVS_ORDER_KIVI, "", 6, NULL);
	struct kvs_rt *big =
		t_runtime(KVS_DTYPE_F16, KVS_ORDER_KIVI, "", 64, NULL);
	struct kvs_batch *batch, *ref_batch;
	struct kvs_seq *seq, *ref, *other;
	struct kvs_rt_stats st;
	uint8_t q[T_QH * T_D * 2], k[T_KV * T_D * 2], v[T_KV * T_D * 2];
	float out[T_OUT], want[T_OUT];

	(void)state;
	assert_int_equal(kvs_batch_create(rt, 2, &batch), 0);
	assert_int_equal(kvs_seq_create(batch, &seq), 0);
	/* layer 0 takes all six pages; layer 1 finds none and is left as
	 * it was */
	assert_int_equal(t_prefill(seq, SEED, KVS_DTYPE_F16, 0, 200), -ENOSPC);
	assert_int_equal(kvs_seq_tokens(seq, 0), 200);
	assert_int_equal(kvs_seq_tokens(seq, 1), 0);
	kvs_rt_stats(rt, &st);
	assert_int_equal(st.pages_free, 0);
	assert_int_equal(kvs_seq_reset(seq), 0);
	kvs_rt_stats(rt, &st);
	assert_int_equal(st.pages_free, 6);

	/* 95 tokens: 2 spans a layer, 4 pages; then decode to 96 */
	assert_int_equal(t_prefill(seq, SEED, KVS_DTYPE_F16, 0, 95), 0);
	assert_int_equal(kvs_batch_create(big, 1, &ref_batch), 0);
	assert_int_equal(kvs_seq_create(ref_batch, &ref), 0);
	assert_int_equal(t_prefill(ref, SEED, KVS_DTYPE_F16, 0, 95), 0);
	/* another sequence holds the last free pages */
	assert_int_equal(kvs_seq_create(batch, &other), 0);
	assert_int_equal(t_prefill(other, 99, KVS_DTYPE_F16, 0, 40), 0);
	kvs_rt_stats(rt, &st);
	assert_int_equal(st.pages_free, 0);
	/* the step to 96 tokens seals a span in each layer */
	t_token_q(SEED, 0, 95, KVS_DTYPE_F16, q, 0);
	t_token_kv(SEED, 0, 95, KVS_DTYPE_F16, k, v, T_D, 0);
	assert_int_equal(kvs_seq_step(seq, 0, q, k, v, out), -ENOSPC);
	assert_int_equal(kvs_seq_tokens(seq, 0), 95);
	/* pages come back when the other one goes; the step then runs as if
	 * it had never failed */
	kvs_seq_destroy(other);
	for (uint32_t l = 0; l < T_LAYERS; l++) {
		t_token_q(SEED, l, 95, KVS_DTYPE_F16, q, 0);
		t_token_kv(SEED, l, 95, KVS_DTYPE_F16, k, v, T_D, 0);
		assert_int_equal(kvs_seq_step(seq, l, q, k, v, out), 0);
		assert_int_equal(kvs_seq_step(ref, l, q, k, v, want), 0);
		assert_memory_equal(out, want, sizeof(out));
	}
	assert_int_equal(kvs_seq_block_count(seq, 1), 3);
	kvs_batch_destroy(batch);
	kvs_batch_destroy(ref_batch);
	kvs_rt_stats(rt, &st);
	assert_int_equal(st.pages_free, 6);
	kvs_rt_destroy(rt);
	kvs_rt_destroy(big);
}

static void test_blocks_and_history(void **state)
{
	struct kvs_rt *rt =
		t_runtime(KVS_DTYPE_BF16, KVS_ORDER_KIVI, "ns", 64, NULL);
	struct kvs_batch *batch;
	struct kvs_seq *seq;
	const uint32_t prompt = 100, S = T_R;
	uint32_t *ids = t_ids(ID_SEED, prompt);
	size_t row = (size_t)T_KV * T_D, block = row * S;
	float *k = malloc(sizeof(float) * block),
	      *v = malloc(sizeof(float) * block);
	float *hk = malloc(sizeof(float) * 2 * block), *hv = hk + block;
	float *rk = malloc(sizeof(float) * 2 * block), *rv = rk + block;
	uint8_t(*span)[KVS_ID_SIZE] = malloc(KVS_ID_SIZE * 3);
	struct kvs_shape shape;

	(void)state;
	kvs_shape_default(&shape, T_KV, T_D);
	shape.span = S;
	shape.residual = S;
	assert_int_equal(kvs_batch_create(rt, 1, &batch), 0);
	assert_int_equal(kvs_seq_create(batch, &seq), 0);
	assert_int_equal(kvs_seq_append_ids(seq, ids, prompt), 0);
	assert_int_equal(t_prefill(seq, SEED, KVS_DTYPE_BF16, 0, prompt), 0);
	for (uint32_t b = 0; b < 3; b++)
		assert_int_equal(kvs_span_id("ns", kvs_rt_model_fp(rt),
					     b ? span[b - 1] : NULL,
					     ids + b * S, S, span[b]),
				 0);
	for (uint32_t l = 0; l < T_LAYERS; l++) {
		assert_int_equal(kvs_seq_block_count(seq, l), 3);
		for (uint32_t b = 0; b < 3; b++) {
			struct kvs_ident ident;
			struct kvs_view view;
			uint8_t *got, *want;
			size_t got_len, want_len;

			/* [kv][S][D] of this span, as the prefill got it */
			for (uint32_t t = 0; t < S; t++)
				t_token_kv(SEED, l, b * S + t, KVS_DTYPE_F32, k,
					   v, (size_t)S * T_D, (size_t)t * T_D);
			for (size_t i = 0; i < block; i++) {
				k[i] = kvs_round_to(KVS_DTYPE_BF16, k[i]);
				v[i] = kvs_round_to(KVS_DTYPE_BF16, v[i]);
			}
			memset(&ident, 0, sizeof(ident));
			memcpy(ident.block_id, span[b], KVS_ID_SIZE);
			if (b)
				memcpy(ident.parent_id, span[b - 1],
				       KVS_ID_SIZE);
			memcpy(ident.model_fp, kvs_rt_model_fp(rt),
			       KVS_ID_SIZE);
			ident.layer = l;
			ident.first_pos = (uint64_t)b * S;
			assert_int_equal(kvs_block_seal(&shape, &ident,
							KVS_DTYPE_F32, k, v, 0,
							&want, &want_len),
					 0);
			assert_int_equal(
				kvs_seq_block(seq, l, b, &got, &got_len), 0);
			assert_int_equal(got_len, want_len);
			assert_memory_equal(got, want, got_len);

			/* the dequantized history is the reference's */
			assert_int_equal(
				kvs_object_open(want, want_len, 0, &view), 0);
			assert_int_equal(kvs_block_dequantize(&view, rk, rv),
					 0);
			assert_int_equal(kvs_seq_history(seq, l, b, 1,
							 KVS_DTYPE_F32, hk, hv),
					 0);
			assert_memory_equal(hk, rk, sizeof(float) * block);
			assert_memory_equal(hv, rv, sizeof(float) * block);
			kvs_view_release(&view);
			free(got);
			free(want);
		}
	}
	assert_int_equal(kvs_seq_history(seq, 0, 2, 2, KVS_DTYPE_F32, hk, hv),
			 -KVS_EPARAM);
	kvs_batch_destroy(batch);
	kvs_rt_destroy(rt);
	free(ids);
	free(span);
	free(k);
	free(v);
	free(hk);
	free(rk);
}

static void test_tail_checks(void **state)
{
	struct kvs_rt *rt =
		t_runtime(KVS_DTYPE_F16, KVS_ORDER_KIVI, "", 64, NULL);
	struct kvs_rt *rt32 =
		t_runtime(KVS_DTYPE_F32, KVS_ORDER_KIVI, "", 64, NULL);
	struct kvs_batch *batch, *b32;
	struct kvs_seq *a, *b, *c;
	struct kvs_view view;
	uint8_t *tail, *tail1;
	size_t len, len1;

	(void)state;
	assert_int_equal(kvs_batch_create(rt, 2, &batch), 0);
	assert_int_equal(kvs_batch_create(rt32, 1, &b32), 0);
	assert_int_equal(kvs_seq_create(batch, &a), 0);
	assert_int_equal(kvs_seq_create(batch, &b), 0);
	assert_int_equal(kvs_seq_create(b32, &c), 0);
	/* 20 tokens: no span, 20 Key and 20 Value rows */
	assert_int_equal(t_prefill(a, SEED, KVS_DTYPE_F16, 0, 20), 0);
	assert_int_equal(kvs_seq_tail_encode(a, 0, &tail, &len), 0);
	assert_int_equal(kvs_seq_tail_encode(a, 1, &tail1, &len1), 0);
	assert_int_equal(kvs_object_open(tail, len, 0, &view), 0);
	assert_int_equal(view.hdr.kind, KVS_KIND_TAIL);
	assert_int_equal(view.hdr.r_k, 20);
	assert_int_equal(view.hdr.r_v, 20);
	assert_int_equal(view.hdr.tail_dtype, KVS_DTYPE_F16);
	kvs_view_release(&view);

	/* another layer, another dtype, a layer not empty, a broken byte */
	assert_int_equal(kvs_seq_tail_load(b, 1, tail, len), -KVS_EPARAM);
	assert_int_equal(kvs_seq_tail_load(c, 0, tail, len), -KVS_EPARAM);
	assert_int_equal(kvs_seq_tail_load(a, 0, tail, len), -KVS_EPARAM);
	tail[len - 1] ^= 0x40;
	assert_true(kvs_seq_tail_load(b, 0, tail, len) < 0);
	assert_int_equal(kvs_seq_tokens(b, 0), 0);
	tail[len - 1] ^= 0x40;
	assert_int_equal(kvs_seq_tail_load(b, 0, tail, len), 0);
	assert_int_equal(kvs_seq_tail_load(b, 1, tail1, len1), 0);
	assert_int_equal(kvs_seq_tokens(b, 1), 20);
	free(tail);
	free(tail1);
	kvs_batch_destroy(batch);
	kvs_batch_destroy(b32);
	kvs_rt_destroy(rt);
	kvs_rt_destroy(rt32);
}

/* A prompt prefilled in parts (the second onto a layer holding residuals,
 * token by token) leaves the state a prefill of the whole leaves. */
static void test_prefill_in_parts(void **state)
{
	static const uint32_t parts[][2] = { { 50, 30 },
					     { 20, 100 },
					     { 64, 1 } };
	struct kvs_rt *rt =
		t_runtime(KVS_DTYPE_F16, KVS_ORDER_KIVI, "", 128, NULL);
	size_t n = (size_t)40 * T_LAYERS * T_OUT;
	float *got = malloc(sizeof(float) * n),
	      *want = malloc(sizeof(float) * n);

	(void)state;
	for (size_t i = 0; i < 3; i++) {
		uint32_t total = parts[i][0] + parts[i][1];
		struct kvs_batch *batch;
		struct kvs_seq *whole, *split;
		uint8_t *a, *b;
		size_t alen, blen;

		assert_int_equal(kvs_batch_create(rt, 2, &batch), 0);
		assert_int_equal(kvs_seq_create(batch, &whole), 0);
		assert_int_equal(kvs_seq_create(batch, &split), 0);
		assert_int_equal(
			t_prefill(whole, SEED, KVS_DTYPE_F16, 0, total), 0);
		assert_int_equal(
			t_prefill(split, SEED, KVS_DTYPE_F16, 0, parts[i][0]),
			0);
		assert_int_equal(t_prefill(split, SEED, KVS_DTYPE_F16,
					   parts[i][0], parts[i][1]),
				 0);
		for (uint32_t l = 0; l < T_LAYERS; l++) {
			assert_int_equal(
				kvs_seq_tail_encode(whole, l, &a, &alen), 0);
			assert_int_equal(
				kvs_seq_tail_encode(split, l, &b, &blen), 0);
			assert_int_equal(alen, blen);
			assert_memory_equal(a, b, alen);
			free(a);
			free(b);
		}
		t_decode(whole, SEED, ID_SEED, KVS_DTYPE_F16, total, 40, want);
		t_decode(split, SEED, ID_SEED, KVS_DTYPE_F16, total, 40, got);
		assert_memory_equal(got, want, sizeof(float) * n);
		kvs_batch_destroy(batch);
	}
	kvs_rt_destroy(rt);
	free(got);
	free(want);
}

static void test_bad_input(void **state)
{
	struct kvs_rt *rt =
		t_runtime(KVS_DTYPE_F32, KVS_ORDER_KIVI, "", 64, NULL);
	struct kvs_batch *batch;
	struct kvs_seq *seq;
	float q[T_QH * T_D], k[T_KV * T_D], v[T_KV * T_D], out[T_OUT];
	struct kvs_rt_config cfg;
	struct kvs_rt *bad;

	(void)state;
	assert_int_equal(kvs_batch_create(rt, 1, &batch), 0);
	assert_int_equal(kvs_seq_create(batch, &seq), 0);
	assert_int_equal(t_prefill(seq, SEED, KVS_DTYPE_F32, 0, 31), 0);
	t_token_q(SEED, 0, 31, KVS_DTYPE_F32, q, 0);
	t_token_kv(SEED, 0, 31, KVS_DTYPE_F32, k, v, T_D, 0);
	k[7] = NAN;
	assert_int_equal(kvs_seq_step(seq, 0, q, k, v, out), -KVS_ENONFINITE);
	assert_int_equal(kvs_seq_tokens(seq, 0), 31);
	assert_int_equal(kvs_seq_block_count(seq, 0), 0);
	assert_int_equal(kvs_seq_step(seq, T_LAYERS, q, k, v, out),
			 -KVS_EPARAM);
	kvs_batch_destroy(batch);
	kvs_rt_destroy(rt);

	/* configs: S != R, q_heads not a multiple, f32 on CUDA */
	kvs_rt_config_default(&cfg, 2, 4, 2, 64);
	cfg.shape.span = 256;
	assert_int_equal(kvs_rt_create(&cfg, &bad), -KVS_EPARAM);
	kvs_rt_config_default(&cfg, 2, 3, 2, 64);
	assert_int_equal(kvs_rt_create(&cfg, &bad), -KVS_EPARAM);
	kvs_rt_config_default(&cfg, 0, 4, 2, 64);
	assert_int_equal(kvs_rt_create(&cfg, &bad), -KVS_EPARAM);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_matches_stream),
		cmocka_unit_test(test_batch_equals_alone),
		cmocka_unit_test(test_pool_exhaustion),
		cmocka_unit_test(test_blocks_and_history),
		cmocka_unit_test(test_tail_checks),
		cmocka_unit_test(test_prefill_in_parts),
		cmocka_unit_test(test_bad_input),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
