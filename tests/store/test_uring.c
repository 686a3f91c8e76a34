/*
 * test_uring.c - a failed io_uring_submit: the request that could not be
 * submitted is reported failed (its caller then frees its buffer), so it
 * must never reach the kernel later, with the next submit, against memory
 * that is gone.  The test replaces io_uring_submit (the store, linked
 * statically, calls this one; it calls liburing's through dlsym): on
 * command it fails once without submitting, as a submit failing with
 * EBUSY leaves the SQE queued, and at every later submit it checks that
 * no queued SQE still names the failed request.  The same for the
 * asynchronous batches, whose turn submits many requests at once.  Exits
 * 77 without io_uring.
 */
#include <dlfcn.h>
#include <setjmp.h>
#include <unistd.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "kvs_config.h"
#include "kvstash/log.h"
#include "store_internal.h"
#include "store_test.h"

#if KVS_HAVE_IO_URING
#include <liburing.h>

static struct {
	int fail; /* submits to fail */
	int failed;
	bool pending; /* a failed submit's SQE is queued, unchecked */
	unsigned slot; /* its place in the ring */
	uint64_t data; /* its user data (the request) */
	int stale; /* submits that carried it as it was */
	int submits;
} uring;

int io_uring_submit(struct io_uring *ring)
{
	static int (*real)(struct io_uring *);
	struct io_uring_sq *sq = &ring->sq;

	if (!real)
		real = (int (*)(struct io_uring *))dlsym(RTLD_NEXT,
							 "io_uring_submit");
	uring.submits++;
	/* the next submit after a failed one carries its SQE: it must be a
	 * no-op by now, not the request its caller gave up */
	if (uring.pending && !uring.fail) {
		const struct io_uring_sqe *sqe =
			&sq->sqes[uring.slot & sq->ring_mask];

		if (sqe->opcode != IORING_OP_NOP &&
		    sqe->user_data == uring.data)
			uring.stale++;
		uring.pending = false;
	}
	if (uring.fail > 0 && sq->sqe_tail != sq->sqe_head) {
		uring.fail--;
		uring.failed++;
		uring.pending = true;
		uring.slot = sq->sqe_tail - 1;
		uring.data = sq->sqes[uring.slot & sq->ring_mask].user_data;
		return -EBUSY;
	}
	return real(ring);
}

enum { NB = 16 };

static struct test_blk blocks[NB];

static int setup(void **state)
{
	return test_blocks_make(blocks, NB, 5200, 4);
}

static int teardown(void **state)
{
	test_blocks_free(blocks, NB);
	return 0;
}

static void get_all(struct kvs_store *s, int *failed)
{
	struct kvs_store_key keys[NB];
	struct kvs_store_ref *refs[NB];
	int res[NB];

	for (int i = 0; i < NB; i++)
		keys[i] = blocks[i].key;
	assert_int_equal(kvs_store_get_batch(s, keys, NB, refs, res), 0);
	for (int i = 0; i < NB; i++) {
		if (res[i]) {
			assert_int_equal(res[i], -EBUSY);
			(*failed)++;
			continue;
		}
		assert_int_equal(kvs_store_ref_len(refs[i]), blocks[i].len);
		assert_memory_equal(kvs_store_ref_data(refs[i]), blocks[i].obj,
				    blocks[i].len);
		kvs_store_ref_release(refs[i]);
	}
}

/* Reads and writes whose submit fails: reported, and never run later. */
static void test_failed_submit(void **state)
{
	struct kvs_store_opts o;
	struct kvs_store *s;
	char *dir = test_mkdir();
	int failed = 0;

	/* no DRAM tier: every get reads the device into a private buffer */
	test_opts(&o, 0, 16 << 20, 1 << 20);
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	for (int i = 0; i < NB / 2; i++)
		assert_int_equal(kvs_store_put(s, blocks[i].obj, blocks[i].len,
					       KVS_DURABILITY_WRITTEN, NULL),
				 0);
	assert_true(uring.submits > 0); /* the ring is in use */
	/* a write whose submit fails: that put fails, nothing else */
	uring.fail = 1;
	assert_int_equal(kvs_store_put(s, blocks[NB / 2].obj,
				       blocks[NB / 2].len,
				       KVS_DURABILITY_WRITTEN, NULL),
			 -EBUSY);
	for (int i = NB / 2; i < NB; i++)
		assert_int_equal(kvs_store_put(s, blocks[i].obj, blocks[i].len,
					       KVS_DURABILITY_WRITTEN, NULL),
				 0);
	assert_int_equal(kvs_store_close(s), 0);
	/* a batch of reads, one of which fails to submit */
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	uring.fail = 1;
	get_all(s, &failed);
	assert_int_equal(failed, 1);
	/* every later submit is checked: no stale request among them */
	failed = 0;
	get_all(s, &failed);
	get_all(s, &failed);
	assert_int_equal(failed, 0);
	assert_int_equal(uring.failed, 2);
	assert_int_equal(uring.stale, 0);
	assert_int_equal(kvs_store_close(s), 0);
	test_rmdir(dir);
}

static void on_async_done(void *arg, int status)
{
	*(int *)arg += 1;
}

/* Gets all blocks in one asynchronous batch, polling until it is done;
 * the reads that failed (their submit refused) counted in *@failed. */
static void get_all_async(struct kvs_store *s, int *failed)
{
	struct kvs_store_key keys[NB];
	struct kvs_store_ref *refs[NB];
	int res[NB], calls = 0;

	for (int i = 0; i < NB; i++)
		keys[i] = blocks[i].key;
	assert_int_equal(kvs_store_get_batch_async(s, keys, NB, refs, res,
						   on_async_done, &calls),
			 0);
	for (int i = 0; i < 1000 && !calls; i++)
		if (!kvs_store_poll(s))
			usleep(1000);
	assert_int_equal(calls, 1);
	for (int i = 0; i < NB; i++) {
		if (res[i]) {
			assert_int_equal(res[i], -EBUSY);
			(*failed)++;
			continue;
		}
		assert_memory_equal(kvs_store_ref_data(refs[i]), blocks[i].obj,
				    blocks[i].len);
		kvs_store_ref_release(refs[i]);
	}
}

/* The asynchronous batches submit a turn's requests together: a submit
 * that fails fails each of them, and none runs later. */
static void test_failed_async_submit(void **state)
{
	struct kvs_store_opts o;
	struct kvs_store *s;
	char *dir = test_mkdir();
	int failed = 0, base = uring.failed;

	test_opts(&o, 0, 16 << 20, 1 << 20);
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	for (int i = 0; i < NB; i++)
		assert_int_equal(kvs_store_put(s, blocks[i].obj, blocks[i].len,
					       KVS_DURABILITY_WRITTEN, NULL),
				 0);
	assert_int_equal(kvs_store_close(s), 0);
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	uring.fail = 1;
	get_all_async(s, &failed);
	/* the first turn's submission carried every read queued then */
	assert_true(failed > 0);
	assert_int_equal(uring.failed, base + 1);
	failed = 0;
	get_all_async(s, &failed);
	get_all_async(s, &failed);
	assert_int_equal(failed, 0);
	assert_int_equal(uring.stale, 0);
	assert_int_equal(kvs_store_close(s), 0);
	test_rmdir(dir);
}

/* A roll that must first finish the asynchronous writes queued to the
 * head, whose submission fails: they fail (their batch says so), the
 * roll and its put go on, nothing runs later. */
static void test_failed_drain_submit(void **state)
{
	enum { NBIG = 64 };
	struct test_blk big[NBIG];
	const uint8_t *objs[NBIG];
	size_t lens[NBIG], k = 0;
	uint64_t room = (256u << 10) - 2 * KVS_STORE_ALIGN, used = 0;
	struct kvs_store_opts o;
	struct kvs_store *s;
	char *dir = test_mkdir();
	int res[NBIG], calls = 0, failed = 0, base = uring.failed;

	assert_int_equal(test_blocks_make(big, NBIG, 7100, 16), 0);
	for (int i = 0; i < NBIG; i++) {
		objs[i] = big[i].obj;
		lens[i] = big[i].len;
	}
	/* as many as the head holds, the next one does not fit */
	while (k < NBIG - 1 && used + record_size(lens[k]) <= room)
		used += record_size(lens[k++]);
	assert_true(k > 0 && k < NBIG - 1);
	test_opts(&o, 0, 16 << 20, 256 << 10);
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	assert_int_equal(kvs_store_put_batch_async(s, objs, lens, k,
						   KVS_DURABILITY_WRITTEN, res,
						   on_async_done, &calls),
			 0);
	/* queued, not submitted (no turn yet); the put below rolls */
	uring.fail = 1;
	assert_int_equal(kvs_store_put(s, objs[k], lens[k],
				       KVS_DURABILITY_WRITTEN, NULL),
			 0);
	assert_int_equal(uring.failed, base + 1);
	for (int i = 0; i < 1000 && !calls; i++)
		if (!kvs_store_poll(s))
			usleep(1000);
	assert_int_equal(calls, 1);
	for (size_t i = 0; i < k; i++) {
		assert_true(res[i] == 0 || res[i] == -EBUSY);
		failed += res[i] != 0;
	}
	assert_true(failed > 0);
	assert_int_equal(test_get_cmp(s, &big[k].key, objs[k], lens[k]), 0);
	assert_int_equal(uring.stale, 0);
	assert_int_equal(kvs_store_close(s), 0);
	test_blocks_free(big, NBIG);
	test_rmdir(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_failed_submit),
		cmocka_unit_test(test_failed_async_submit),
		cmocka_unit_test(test_failed_drain_submit),
	};

	kvs_log_set_level(KVS_LOG_ERR);
	return cmocka_run_group_tests(tests, setup, teardown);
}
#else
int main(void)
{
	fprintf(stderr, "no io_uring in this build\n");
	return 77;
}
#endif
