/*
 * test_handoff.c - the prefill -> decode handoff through a local block
 * store: a prefill runtime computes the prompt, publishes its spans and
 * exports every layer's residual tail under a request id; a decode runtime
 * imports them (blocks fetched, tails taken) and decodes bit for bit as
 * the prefill side would have without the handoff -- in both orders, for
 * prompts shorter than R, on a span boundary and between spans.  A tail
 * is taken once; a missing block or tail is a clear error that leaves the
 * decode side's sequence empty.
 */
#include "faulty_store.h"

#include <errno.h>

#define SEED 31
#define ID_SEED 37
#define STEPS 80

struct fixture {
	char *dir;
	struct kvs_blockstore *store;
};

static int setup(void **state)
{
	struct fixture *fx = calloc(1, sizeof(*fx));

	fx->dir = t_mkdir();
	fx->store = t_store_open(fx->dir);
	*state = fx;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *fx = *state;

	kvs_blockstore_release(fx->store);
	t_rmdir(fx->dir);
	free(fx);
	return 0;
}

static void request_id(uint32_t n, uint8_t id[KVS_ID_SIZE])
{
	memset(id, 0, KVS_ID_SIZE);
	memcpy(id, &n, sizeof(n));
	id[31] = 0x5a;
}

static void check_handoff(struct fixture *fx, enum kvs_dtype dtype,
			  enum kvs_order order, uint32_t prompt, uint32_t req)
{
	struct kvs_rt *pre = t_runtime(dtype, order, "t", 64, fx->store);
	struct kvs_rt *dec = t_runtime(dtype, order, "t", 64, fx->store);
	struct kvs_batch *pb, *db;
	struct kvs_seq *a, *b;
	size_t n = (size_t)STEPS * T_LAYERS * T_OUT;
	float *want = malloc(sizeof(float) * n),
	      *got = malloc(sizeof(float) * n);
	uint32_t *ids = t_ids(ID_SEED + req, prompt);
	uint8_t rid[KVS_ID_SIZE];

	request_id(req, rid);
	assert_int_equal(kvs_batch_create(pre, 1, &pb), 0);
	assert_int_equal(kvs_batch_create(dec, 1, &db), 0);
	assert_int_equal(kvs_seq_create(pb, &a), 0);
	assert_int_equal(kvs_seq_create(db, &b), 0);
	assert_int_equal(kvs_seq_append_ids(a, ids, prompt), 0);
	assert_int_equal(t_prefill(a, SEED + req, dtype, 0, prompt), 0);
	assert_int_equal(kvs_seq_export_tail(a, rid, 60000), 0);

	assert_int_equal(kvs_seq_import_tail(b, ids, prompt, rid), 0);
	for (uint32_t l = 0; l < T_LAYERS; l++) {
		assert_int_equal(kvs_seq_tokens(b, l), prompt);
		assert_int_equal(kvs_seq_block_count(b, l), prompt / T_R);
	}
	t_decode(a, SEED + req, ID_SEED + req, dtype, prompt, STEPS, want);
	t_decode(b, SEED + req, ID_SEED + req, dtype, prompt, STEPS, got);
	if (memcmp(got, want, sizeof(float) * n) != 0)
		fail_msg("%s %s prompt %u: decoding after the handoff differs",
			 kvs_dtype_name(dtype), kvs_order_name(order), prompt);

	/* taken once */
	assert_int_equal(kvs_seq_reset(b), 0);
	assert_int_equal(kvs_seq_import_tail(b, ids, prompt, rid),
			 -KVS_ENOTFOUND);
	assert_int_equal(kvs_seq_tokens(b, 0), 0);
	assert_int_equal(kvs_seq_id_count(b), 0);
	kvs_batch_destroy(pb);
	kvs_batch_destroy(db);
	kvs_rt_destroy(pre);
	kvs_rt_destroy(dec);
	free(ids);
	free(want);
	free(got);
}

static void test_handoff_bit_exact(void **state)
{
	static const uint32_t prompts[] = { 20, 32, 128, 150 };
	uint32_t req = 1;

	for (size_t p = 0; p < 4; p++) {
		check_handoff(*state, KVS_DTYPE_F16, KVS_ORDER_KIVI, prompts[p],
			      req++);
		check_handoff(*state, KVS_DTYPE_BF16, KVS_ORDER_PAPER,
			      prompts[p], req++);
	}
	check_handoff(*state, KVS_DTYPE_F32, KVS_ORDER_KIVI, 150, req++);
}

static void test_handoff_missing_block(void **state)
{
	struct fixture *fx = *state;
	struct faulty f = {
		.inner = fx->store, .kind = FAULT_LOST, .span = 2, .layer = 1
	};
	struct kvs_blockstore *bs = faulty_store(&f);
	struct kvs_rt *pre =
		t_runtime(KVS_DTYPE_F16, KVS_ORDER_KIVI, "m", 64, fx->store);
	struct kvs_rt *dec =
		t_runtime(KVS_DTYPE_F16, KVS_ORDER_KIVI, "m", 64, bs);
	struct kvs_batch *pb, *db;
	struct kvs_seq *a, *b;
	uint32_t *ids = t_ids(ID_SEED, 150);
	uint8_t(*span_ids)[KVS_ID_SIZE] = malloc(KVS_ID_SIZE * 4);
	uint8_t rid[KVS_ID_SIZE];
	struct kvs_rt_stats st;

	request_id(900, rid);
	for (uint32_t i = 0; i < 4; i++)
		assert_int_equal(kvs_span_id("m", kvs_rt_model_fp(dec),
					     i ? span_ids[i - 1] : NULL,
					     ids + i * T_R, T_R, span_ids[i]),
				 0);
	f.span_ids = (const uint8_t(*)[KVS_ID_SIZE])span_ids;
	assert_int_equal(kvs_batch_create(pre, 1, &pb), 0);
	assert_int_equal(kvs_batch_create(dec, 1, &db), 0);
	assert_int_equal(kvs_seq_create(pb, &a), 0);
	assert_int_equal(kvs_seq_create(db, &b), 0);
	assert_int_equal(kvs_seq_append_ids(a, ids, 150), 0);
	assert_int_equal(t_prefill(a, SEED, KVS_DTYPE_F16, 0, 150), 0);
	assert_int_equal(kvs_seq_export_tail(a, rid, 60000), 0);
	assert_int_equal(kvs_seq_import_tail(b, ids, 150, rid), -KVS_ENOTFOUND);
	assert_int_equal(f.hits, 1);
	assert_int_equal(kvs_seq_tokens(b, 0), 0);
	assert_int_equal(kvs_seq_tokens(b, 1), 0);
	kvs_rt_stats(dec, &st);
	assert_int_equal(st.pages_free, st.pages_total);
	/* and the caller recomputes: the sequence is usable */
	assert_int_equal(kvs_seq_append_ids(b, ids, 150), 0);
	assert_int_equal(t_prefill(b, SEED, KVS_DTYPE_F16, 0, 150), 0);
	/* too few ids for the blocks the tail follows */
	request_id(901, rid);
	assert_int_equal(kvs_seq_export_tail(a, rid, 60000), 0);
	assert_int_equal(kvs_seq_reset(b), 0);
	assert_int_equal(kvs_seq_import_tail(b, ids, 64, rid), -KVS_EPARAM);
	assert_int_equal(kvs_seq_tokens(b, 0), 0);
	kvs_batch_destroy(pb);
	kvs_batch_destroy(db);
	kvs_rt_destroy(pre);
	kvs_rt_destroy(dec);
	kvs_blockstore_release(bs);
	faulty_restore(&f);
	free(ids);
	free(span_ids);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_handoff_bit_exact),
		cmocka_unit_test(test_handoff_missing_block),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
