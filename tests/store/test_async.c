/*
 * test_async.c - the store's entry points for an event loop:
 * reserve-then-commit (the object written in place, verified, adopted
 * without a copy; a bad object refused and its slot returned; abandoned
 * reservations reclaimed after their timeout), the asynchronous batches
 * (inline when no device I/O is needed, else on the I/O thread with the
 * callback from kvs_store_poll), and the arena registration option.
 */
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <unistd.h>

#include <cmocka.h>

#include "store_test.h"

#define N 8

static void test_reserve_commit(void **state)
{
	char *dir = test_mkdir();
	struct kvs_store_opts o;
	struct kvs_store *s;
	struct test_blk b[N];
	struct kvs_store_reservation *r[N];
	struct kvs_store_stats st;
	struct kvs_store_ref *ref;
	uint8_t *dst;
	int res[N];

	test_opts(&o, 8u << 20, 32u << 20, 1u << 20);
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	assert_int_equal(test_blocks_make(b, N, 10, 2), 0);
	for (int i = 0; i < N - 1; i++) {
		assert_int_equal(kvs_store_reserve(s, b[i].len, &r[i], &dst),
				 0);
		memcpy(dst, b[i].obj, b[i].len);
	}
	/* one object damaged in its slot: refused, the others stored */
	assert_int_equal(kvs_store_reserve(s, b[0].len, &r[N - 1], &dst), 0);
	memcpy(dst, b[N - 1].obj,
	       b[N - 1].len > b[0].len ? b[0].len : b[N - 1].len);
	dst[700] ^= 0x40;
	assert_int_not_equal(
		kvs_store_commit_batch(s, r, N, KVS_DURABILITY_WRITTEN, res),
		0);
	for (int i = 0; i < N - 1; i++) {
		assert_int_equal(res[i], 0);
		assert_int_equal(kvs_store_get(s, &b[i].key, &ref), 0);
		assert_int_equal(kvs_store_ref_len(ref), b[i].len);
		assert_memory_equal(kvs_store_ref_data(ref), b[i].obj,
				    b[i].len);
		kvs_store_ref_release(ref);
	}
	assert_true(res[N - 1] < 0);
	kvs_store_stats_get(s, &st);
	assert_int_equal(st.dram.blocks, N - 1);
	assert_int_equal(st.nvme.blocks, N - 1); /* written */
	/* a release gives the slot back */
	assert_int_equal(kvs_store_reserve(s, b[0].len, &r[0], &dst), 0);
	kvs_store_release(s, r[0]);
	kvs_store_close(s);
	/* written through: there after a reopen */
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	for (int i = 0; i < N - 1; i++) {
		assert_int_equal(kvs_store_get(s, &b[i].key, &ref), 0);
		assert_memory_equal(kvs_store_ref_data(ref), b[i].obj,
				    b[i].len);
		kvs_store_ref_release(ref);
	}
	kvs_store_close(s);
	test_blocks_free(b, N);
	test_rmdir(dir);
}

static void test_reserve_timeout(void **state)
{
	char *dir = test_mkdir();
	struct kvs_store_opts o;
	struct kvs_store *s;
	struct kvs_store_reservation *r, *many[64];
	struct test_blk b[1];
	uint8_t *dst;
	int res, n = 0;

	test_opts(&o, 4u << 20, 0, 0);
	o.reserve_timeout_ms = 50;
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	assert_int_equal(test_blocks_make(b, 1, 3, 1), 0);
	assert_int_equal(kvs_store_reserve(s, b[0].len, &r, &dst), 0);
	memcpy(dst, b[0].obj, b[0].len);
	usleep(120000);
	assert_int_equal(kvs_store_reclaim(s), 1);
	assert_int_equal(
		kvs_store_commit_batch(s, &r, 1, KVS_DURABILITY_MEMORY, &res),
		-ETIMEDOUT);
	assert_int_equal(res, -ETIMEDOUT);
	/* abandoned reservations do not leak the arena: after their
	 * timeout the whole arena can be reserved again */
	while (n < 64 && kvs_store_reserve(s, 100u << 10, &many[n], &dst) == 0)
		n++;
	assert_true(n > 0 && n < 64);
	assert_int_equal(kvs_store_reserve(s, 100u << 10, &r, &dst), -ENOSPC);
	usleep(120000);
	assert_int_equal(kvs_store_reclaim(s), (unsigned)n);
	for (int i = 0; i < n; i++)
		kvs_store_release(s, many[i]);
	assert_int_equal(kvs_store_reserve(s, 100u << 10, &r, &dst), 0);
	kvs_store_release(s, r);
	/* no DRAM tier: nothing to reserve */
	kvs_store_close(s);
	test_opts(&o, 0, 32u << 20, 1u << 20);
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	assert_int_equal(kvs_store_reserve(s, b[0].len, &r, &dst), -ENOSPC);
	kvs_store_close(s);
	test_blocks_free(b, 1);
	test_rmdir(dir);
}

struct done_rec {
	int calls, status;
};

static void on_done(void *arg, int status)
{
	struct done_rec *d = arg;

	d->calls++;
	d->status = status;
}

/* Polls until @d was called (5 s at most), waiting on the event fd. */
static void wait_done(struct kvs_store *s, struct done_rec *d)
{
	struct pollfd p = { .fd = kvs_store_event_fd(s), .events = POLLIN };

	for (int i = 0; i < 500 && !d->calls; i++) {
		poll(&p, 1, 10);
		kvs_store_poll(s);
	}
	assert_int_equal(d->calls, 1);
}

static void test_async_batches(void **state)
{
	char *dir = test_mkdir();
	struct kvs_store_opts o;
	struct kvs_store *s;
	struct test_blk b[N];
	const uint8_t *objs[N];
	size_t lens[N];
	struct kvs_store_key keys[N];
	struct kvs_store_ref *refs[N];
	struct done_rec d = { 0 };
	int res[N];

	test_opts(&o, 8u << 20, 32u << 20, 1u << 20);
	o.write_through = false;
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	assert_int_equal(test_blocks_make(b, N, 40, 3), 0);
	for (int i = 0; i < N; i++) {
		objs[i] = b[i].obj;
		lens[i] = b[i].len;
		keys[i] = b[i].key;
	}
	/* durable: queued, the callback comes through poll */
	assert_int_equal(kvs_store_put_batch_async(s, objs, lens, N,
						   KVS_DURABILITY_DURABLE, res,
						   on_done, &d),
			 0);
	wait_done(s, &d);
	assert_int_equal(d.status, 0);
	for (int i = 0; i < N; i++)
		assert_int_equal(res[i], 0);
	/* in DRAM: served inline, no callback */
	d.calls = 0;
	assert_int_equal(
		kvs_store_get_batch_async(s, keys, N, refs, res, on_done, &d),
		1);
	assert_int_equal(d.calls, 0);
	for (int i = 0; i < N; i++) {
		assert_int_equal(res[i], 0);
		assert_memory_equal(kvs_store_ref_data(refs[i]), b[i].obj,
				    b[i].len);
		kvs_store_ref_release(refs[i]);
	}
	/* memory durability: inline too */
	assert_int_equal(kvs_store_put_batch_async(s, objs, lens, 2,
						   KVS_DURABILITY_MEMORY, res,
						   on_done, &d),
			 1);
	kvs_store_close(s);
	/* after a reopen everything is on NVMe only: a queued get */
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	d.calls = 0;
	assert_int_equal(
		kvs_store_get_batch_async(s, keys, N, refs, res, on_done, &d),
		0);
	wait_done(s, &d);
	assert_int_equal(d.status, 0);
	for (int i = 0; i < N; i++) {
		assert_int_equal(res[i], 0);
		assert_memory_equal(kvs_store_ref_data(refs[i]), b[i].obj,
				    b[i].len);
		kvs_store_ref_release(refs[i]);
	}
	/* a batch queued and never polled: its callback runs at close */
	d.calls = 0;
	assert_int_equal(kvs_store_put_batch_async(s, objs, lens, N,
						   KVS_DURABILITY_WRITTEN, res,
						   on_done, &d),
			 0);
	kvs_store_close(s);
	assert_int_equal(d.calls, 1);
	test_blocks_free(b, N);
	test_rmdir(dir);
}

static int reg_calls, unreg_calls;

static int fake_register(void *ctx, void *base, size_t len, bool unregister)
{
	assert_ptr_equal(ctx, &reg_calls);
	assert_non_null(base);
	assert_true(len >= (4u << 20));
	if (unregister)
		unreg_calls++;
	else
		reg_calls++;
	return 0;
}

static void test_register_option(void **state)
{
	char *dir = test_mkdir();
	struct kvs_store_opts o;
	struct kvs_store *s;
	struct kvs_store_stats st;

	test_opts(&o, 4u << 20, 0, 0);
	o.register_arena = fake_register;
	o.register_ctx = &reg_calls;
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	kvs_store_stats_get(s, &st);
	assert_true(st.host_pinned);
	assert_int_equal(reg_calls, 1);
	kvs_store_close(s);
	assert_int_equal(unreg_calls, 1);
	/* without the option: nothing registered */
	test_opts(&o, 4u << 20, 0, 0);
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	kvs_store_stats_get(s, &st);
	assert_false(st.host_pinned);
	kvs_store_close(s);
	assert_int_equal(reg_calls, 1);
	test_rmdir(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_reserve_commit),
		cmocka_unit_test(test_reserve_timeout),
		cmocka_unit_test(test_async_batches),
		cmocka_unit_test(test_register_option),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
