/*
 * test_prefix.c - prefix reuse through a local block store: a prefill that
 * attaches the cached spans of its prompt decodes bit for bit as the one
 * that computed them all (same blocks, same outputs); publishing is
 * deduplicated; namespaces do not share; a block deleted (by the store's
 * own delete), corrupted or swapped between the lookup and the fetch
 * becomes a shorter prefix (or,
 * once a layer is in use, a clear error the caller recovers from by
 * recomputing), never a wrong output; a pool too small for the prefix is
 * a clear error that changes nothing.
 */
#include "faulty_store.h"

#include <errno.h>

#define SEED 21
#define ID_SEED 23
#define PROMPT 200
#define STEPS 50
#define OUT_FLOATS ((size_t)STEPS * T_LAYERS * T_OUT)

struct fixture {
	char *dir;
	struct kvs_blockstore *store;
	uint32_t *ids;
	uint8_t (*span_ids)[KVS_ID_SIZE]; /* of the prompt, tenant-a */
	float *want; /* decode outputs of the sequence that computed all */
};

/* Decodes STEPS from a sequence holding the prompt; out: OUT_FLOATS. */
static void decode(struct kvs_seq *seq, float *out)
{
	t_decode(seq, SEED, ID_SEED, KVS_DTYPE_F16, PROMPT, STEPS, out);
}

static int setup(void **state)
{
	struct fixture *fx = calloc(1, sizeof(*fx));
	struct kvs_rt *rt;
	struct kvs_batch *batch;
	struct kvs_seq *seq, *twin;
	struct kvs_rt_stats st;

	fx->dir = t_mkdir();
	fx->store = t_store_open(fx->dir);
	fx->ids = t_ids(ID_SEED, PROMPT);
	fx->span_ids = malloc(KVS_ID_SIZE * (PROMPT / T_R));
	fx->want = malloc(sizeof(float) * OUT_FLOATS);

	/* the first request computes and publishes its prompt */
	rt = t_runtime(KVS_DTYPE_F16, KVS_ORDER_KIVI, "tenant-a", 128,
		       fx->store);
	assert_int_equal(kvs_batch_create(rt, 2, &batch), 0);
	assert_int_equal(kvs_seq_create(batch, &seq), 0);
	assert_int_equal(kvs_seq_append_ids(seq, fx->ids, PROMPT), 0);
	assert_int_equal(t_prefill(seq, SEED, KVS_DTYPE_F16, 0, PROMPT), 0);
	assert_int_equal(kvs_seq_publish(seq), 0);
	assert_int_equal(kvs_rt_flush(rt), 0);
	kvs_rt_stats(rt, &st);
	assert_int_equal(st.published, (PROMPT / T_R) * T_LAYERS);
	/* again, and a twin request: nothing new goes out */
	assert_int_equal(kvs_seq_publish(seq), 0);
	assert_int_equal(kvs_seq_create(batch, &twin), 0);
	assert_int_equal(kvs_seq_append_ids(twin, fx->ids, PROMPT), 0);
	assert_int_equal(t_prefill(twin, SEED, KVS_DTYPE_F16, 0, PROMPT), 0);
	assert_int_equal(kvs_seq_publish(twin), 0);
	assert_int_equal(kvs_rt_flush(rt), 0);
	kvs_rt_stats(rt, &st);
	assert_int_equal(st.published, (PROMPT / T_R) * T_LAYERS);
	assert_int_equal(st.publish_skipped, (PROMPT / T_R) * T_LAYERS);
	decode(seq, fx->want);
	kvs_batch_destroy(batch);
	kvs_rt_destroy(rt);

	*state = fx;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *fx = *state;

	kvs_blockstore_release(fx->store);
	t_rmdir(fx->dir);
	free(fx->ids);
	free(fx->span_ids);
	free(fx->want);
	free(fx);
	return 0;
}

/* A reader runtime over @store in namespace @ns. */
static struct kvs_rt *reader(struct kvs_blockstore *store, const char *ns,
			     uint32_t pages)
{
	return t_runtime(KVS_DTYPE_F16, KVS_ORDER_KIVI, ns, pages, store);
}

/* Attaches, finishes (degrading as needed), prefills the rest, decodes
 * and compares with the outputs of the sequence that computed it all;
 * returns the tokens attached. */
static uint32_t attach_and_check(struct fixture *fx, struct kvs_rt *rt,
				 uint32_t expect_lookup)
{
	struct kvs_batch *batch;
	struct kvs_seq *seq;
	float *got = malloc(sizeof(float) * OUT_FLOATS);
	uint32_t attached, kept;

	assert_int_equal(kvs_batch_create(rt, 1, &batch), 0);
	assert_int_equal(kvs_seq_create(batch, &seq), 0);
	assert_int_equal(kvs_seq_attach_prefix(seq, fx->ids, PROMPT, UINT32_MAX,
					       &attached),
			 0);
	assert_int_equal(attached, expect_lookup);
	assert_int_equal(kvs_seq_attach_finish(seq, &kept), 0);
	assert_true(kept <= attached && kept % T_R == 0);
	for (uint32_t l = 0; l < T_LAYERS; l++)
		assert_int_equal(kvs_seq_tokens(seq, l), kept);
	assert_int_equal(
		t_prefill(seq, SEED, KVS_DTYPE_F16, kept, PROMPT - kept), 0);
	decode(seq, got);
	assert_memory_equal(got, fx->want, sizeof(float) * OUT_FLOATS);
	kvs_batch_destroy(batch);
	free(got);
	return kept;
}

static void test_attach_equals_recompute(void **state)
{
	struct fixture *fx = *state;
	struct kvs_rt *rt = reader(fx->store, "tenant-a", 64);
	struct kvs_rt_stats st;
	uint32_t tokens;

	/* six spans are cached; five leave the last R tokens to compute */
	assert_int_equal(kvs_rt_lookup_prefix(rt, fx->ids, PROMPT, &tokens), 0);
	assert_int_equal(tokens, 192);
	assert_int_equal(attach_and_check(fx, rt, 160), 160);
	kvs_rt_stats(rt, &st);
	assert_int_equal(st.attached, 5 * T_LAYERS);
	assert_int_equal(st.fetch_missed + st.fetch_corrupt, 0);
	assert_int_equal(st.pages_free, st.pages_total);
	kvs_rt_destroy(rt);
}

static void test_namespaces_do_not_share(void **state)
{
	struct fixture *fx = *state;
	struct kvs_rt *rt = reader(fx->store, "tenant-b", 64);
	uint32_t tokens;

	assert_int_equal(kvs_rt_lookup_prefix(rt, fx->ids, PROMPT, &tokens), 0);
	assert_int_equal(tokens, 0);
	assert_int_equal(attach_and_check(fx, rt, 0), 0);
	kvs_rt_destroy(rt);
}

/* The prompt's span ids in tenant-a, for the faulty store's keys. */
static void prompt_span_ids(struct fixture *fx, struct kvs_rt *rt)
{
	for (uint32_t i = 0; i < PROMPT / T_R; i++)
		assert_int_equal(kvs_span_id("tenant-a", kvs_rt_model_fp(rt),
					     i ? fx->span_ids[i - 1] : NULL,
					     fx->ids + i * T_R, T_R,
					     fx->span_ids[i]),
				 0);
}

static void check_fault(struct fixture *fx, enum fault_kind kind, uint32_t span,
			uint32_t layer, uint32_t expect_kept, bool corrupt)
{
	struct faulty f = {
		.inner = fx->store, .kind = kind, .span = span, .layer = layer
	};
	struct kvs_blockstore *bs = faulty_store(&f);
	struct kvs_rt *rt = reader(bs, "tenant-a", 64);
	struct kvs_rt_stats st;

	prompt_span_ids(fx, rt);
	f.span_ids = (const uint8_t(*)[KVS_ID_SIZE])fx->span_ids;
	assert_int_equal(attach_and_check(fx, rt, 160), expect_kept);
	assert_int_equal(f.hits, 1);
	kvs_rt_stats(rt, &st);
	assert_int_equal(corrupt ? st.fetch_corrupt : st.fetch_missed, 1);
	assert_int_equal(st.pages_free, st.pages_total);
	if (kind == FAULT_LOST) {
		/* deleted in the store itself: a lookup now stops there */
		uint32_t layers[T_LAYERS] = { 0, 1 };
		size_t prefix = 99;

		assert_non_null(f.saved);
		assert_int_equal(kvs_blockstore_lookup(fx->store, f.span_ids,
						       PROMPT / T_R, layers,
						       T_LAYERS, &prefix),
				 0);
		assert_int_equal(prefix, span);
		faulty_restore(&f);
	}
	kvs_rt_destroy(rt);
	kvs_blockstore_release(bs);
}

static void test_lost_block_degrades(void **state)
{
	check_fault(*state, FAULT_LOST, 3, 1, 96, false);
	check_fault(*state, FAULT_LOST, 0, 0, 0, false);
}

static void test_corrupt_block_degrades(void **state)
{
	check_fault(*state, FAULT_FLIP, 2, 0, 64, true);
	/* a valid block, but not the one asked for */
	check_fault(*state, FAULT_SWAP, 4, 1, 128, true);
}

/* The engine used layer 0 before layer 1 turned out short: a clear error,
 * then a reset and a full prefill. */
static void test_lost_block_in_use(void **state)
{
	struct fixture *fx = *state;
	struct faulty f = {
		.inner = fx->store, .kind = FAULT_LOST, .span = 1, .layer = 1
	};
	struct kvs_blockstore *bs = faulty_store(&f);
	struct kvs_rt *rt = reader(bs, "tenant-a", 64);
	struct kvs_batch *batch;
	struct kvs_seq *seq;
	float *got = malloc(sizeof(float) * OUT_FLOATS);
	uint32_t attached;

	prompt_span_ids(fx, rt);
	f.span_ids = (const uint8_t(*)[KVS_ID_SIZE])fx->span_ids;
	assert_int_equal(kvs_batch_create(rt, 1, &batch), 0);
	assert_int_equal(kvs_seq_create(batch, &seq), 0);
	assert_int_equal(kvs_seq_attach_prefix(seq, fx->ids, PROMPT, UINT32_MAX,
					       &attached),
			 0);
	assert_int_equal(attached, 160);
	assert_int_equal(kvs_seq_attach_wait(seq, 0), 0);
	assert_int_equal(kvs_seq_tokens(seq, 0), 160);
	assert_int_equal(kvs_seq_attach_wait(seq, 1), -KVS_ENOTFOUND);
	assert_int_equal(kvs_seq_attach_finish(seq, &attached), -KVS_ENOTFOUND);
	/* a prefill of the broken layer says so too */
	assert_int_equal(t_prefill(seq, SEED, KVS_DTYPE_F16, 160, 40),
			 -KVS_ENOTFOUND);
	assert_int_equal(kvs_seq_reset(seq), 0);
	assert_int_equal(kvs_seq_tokens(seq, 0), 0);
	assert_int_equal(kvs_seq_append_ids(seq, fx->ids, PROMPT), 0);
	assert_int_equal(t_prefill(seq, SEED, KVS_DTYPE_F16, 0, PROMPT), 0);
	decode(seq, got);
	assert_memory_equal(got, fx->want, sizeof(float) * OUT_FLOATS);
	kvs_batch_destroy(batch);
	kvs_rt_destroy(rt);
	kvs_blockstore_release(bs);
	faulty_restore(&f);
	free(got);
}

static void test_attach_pool_short(void **state)
{
	struct fixture *fx = *state;
	/* 5 spans x 2 layers do not fit in 9 pages */
	struct kvs_rt *rt = reader(fx->store, "tenant-a", 9);
	struct kvs_batch *batch;
	struct kvs_seq *seq;
	struct kvs_rt_stats st;
	uint32_t attached = 77;

	assert_int_equal(kvs_batch_create(rt, 1, &batch), 0);
	assert_int_equal(kvs_seq_create(batch, &seq), 0);
	assert_int_equal(kvs_seq_attach_prefix(seq, fx->ids, PROMPT, UINT32_MAX,
					       &attached),
			 -ENOSPC);
	assert_int_equal(kvs_seq_id_count(seq), 0);
	kvs_rt_stats(rt, &st);
	assert_int_equal(st.pages_free, 9);
	/* a limit the pool can take */
	assert_int_equal(
		kvs_seq_attach_prefix(seq, fx->ids, PROMPT, 100, &attached), 0);
	assert_int_equal(attached, 96);
	assert_int_equal(kvs_seq_attach_finish(seq, &attached), 0);
	assert_int_equal(attached, 96);
	kvs_rt_stats(rt, &st);
	assert_int_equal(st.pages_free, 3);
	kvs_batch_destroy(batch);
	kvs_rt_destroy(rt);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_attach_equals_recompute),
		cmocka_unit_test(test_namespaces_do_not_share),
		cmocka_unit_test(test_lost_block_degrades),
		cmocka_unit_test(test_corrupt_block_degrades),
		cmocka_unit_test(test_lost_block_in_use),
		cmocka_unit_test(test_attach_pool_short),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
