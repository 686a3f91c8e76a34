/*
 * test_async.c - the store's entry points for an event loop:
 * reserve-then-commit (the object written in place, verified, adopted
 * without a copy; a bad object refused and its slot returned; abandoned
 * reservations reclaimed after their timeout), the asynchronous batches
 * (inline when no device I/O is needed; else their I/O submitted by
 * kvs_store_poll and the callback run from it): gets from NVMe with more
 * requests than the queue depth, puts that roll segments while writes are
 * in flight, durable puts synced through the ring, deletes, commits, a
 * close with batches in flight; no lock held while the device works (a
 * device held by the test: other threads' calls go on); the asynchronous
 * loop beside synchronous threads on the same keys (also run under
 * ThreadSanitizer); and the arena registration option.
 */
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "store_internal.h"
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

/* Polls until @d was called (5 s at most), waiting on the event fd
 * between turns, as a loop does. */
static void wait_done(struct kvs_store *s, struct done_rec *d)
{
	struct pollfd p = { .fd = kvs_store_event_fd(s), .events = POLLIN };

	for (int i = 0; i < 500 && !d->calls; i++) {
		if (kvs_store_poll(s))
			break;
		poll(&p, 1, 10);
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

/* ---- batches in flight ------------------------------------------------ */

/* Polls until every one of @n records was called (10 s at most). */
static void wait_all(struct kvs_store *s, struct done_rec *d, int n)
{
	struct pollfd p = { .fd = kvs_store_event_fd(s), .events = POLLIN };

	for (int i = 0; i < 1000; i++) {
		int left = 0;

		kvs_store_poll(s);
		for (int k = 0; k < n; k++)
			left += !d[k].calls;
		if (!left)
			break;
		poll(&p, 1, 10);
	}
	for (int k = 0; k < n; k++)
		assert_int_equal(d[k].calls, 1);
}

#define NG 48

/* Gets from NVMe, four batches of 16 in flight on a queue of depth 4:
 * keys shared between batches, one twice in a batch, one never put. */
static void test_async_nvme_gets(void **state)
{
	char *dir = test_mkdir();
	struct kvs_store_opts o;
	struct kvs_store *s;
	struct kvs_store_stats st;
	struct test_blk b[NG];
	struct kvs_store_key keys[4][16], absent;
	struct kvs_store_ref *refs[4][16];
	int res[4][16], want_hits = 0;
	struct done_rec d[4] = { 0 };
	uint8_t *none;
	size_t nlen;

	test_opts(&o, 4u << 20, 32u << 20, 1u << 20);
	o.queue_depth = 4;
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	assert_int_equal(test_blocks_make(b, NG, 700, 3), 0);
	for (int i = 0; i < NG; i++)
		assert_int_equal(kvs_store_put(s, b[i].obj, b[i].len,
					       KVS_DURABILITY_WRITTEN, NULL),
				 0);
	assert_int_equal(kvs_store_close(s), 0);
	none = test_block(99999, 1, &nlen, &absent);
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	for (int k = 0; k < 4; k++)
		for (int j = 0; j < 16; j++)
			keys[k][j] = b[(k * 12 + j) % NG].key;
	keys[3][5] = absent;
	keys[3][9] = keys[3][8];
	for (int k = 0; k < 4; k++)
		assert_int_equal(kvs_store_get_batch_async(s, keys[k], 16,
							   refs[k], res[k],
							   on_done, &d[k]),
				 0);
	wait_all(s, d, 4);
	for (int k = 0; k < 4; k++) {
		assert_int_equal(d[k].status, 0);
		for (int j = 0; j < 16; j++) {
			const struct test_blk *t = &b[(k * 12 + j) % NG];

			if (k == 3 && j == 5) {
				assert_int_equal(res[k][j], -KVS_ENOTFOUND);
				assert_null(refs[k][j]);
				continue;
			}
			if (k == 3 && j == 9)
				t = &b[(k * 12 + 8) % NG];
			assert_int_equal(res[k][j], 0);
			assert_int_equal(kvs_store_ref_len(refs[k][j]), t->len);
			assert_memory_equal(kvs_store_ref_data(refs[k][j]),
					    t->obj, t->len);
			kvs_store_ref_release(refs[k][j]);
			want_hits++;
		}
	}
	kvs_store_stats_get(s, &st);
	assert_int_equal(st.hits, want_hits);
	assert_int_equal(st.misses, 1);
	assert_true(st.promotions > 0);
	assert_int_equal(kvs_store_close(s), 0);
	free(none);
	test_blocks_free(b, NG);
	test_rmdir(dir);
}

#define NP 100

/* Durable puts, four batches submitted before any turn (each may need a
 * roll while the writes of the ones before are queued: it waits for the
 * head), then a synchronous batch (its roll completes the queued writes
 * itself); every put acknowledged, synced through the ring, there after
 * a reopen. */
static void test_async_puts_roll(void **state)
{
	char *dir = test_mkdir();
	struct kvs_store_io_ops ops;
	struct test_spy spy;
	struct kvs_store_opts o;
	struct kvs_store *s;
	struct kvs_store_stats st;
	struct test_blk b[NP + 10];
	const uint8_t *objs[NP + 10];
	size_t lens[NP + 10];
	int res[NP + 10];
	struct done_rec d[4] = { 0 };

	assert_int_equal(test_blocks_make(b, NP + 10, 900, 16), 0);
	for (int i = 0; i < NP + 10; i++) {
		objs[i] = b[i].obj;
		lens[i] = b[i].len;
	}
	spy_ops(&ops, &spy);
	test_opts(&o, 0, 8u << 20, 256u << 10);
	o.queue_depth = 8;
	o.io = &ops;
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	for (int k = 0; k < 4; k++)
		assert_int_equal(kvs_store_put_batch_async(
					 s, objs + k * 25, lens + k * 25, 25,
					 KVS_DURABILITY_DURABLE, res + k * 25,
					 on_done, &d[k]),
				 0);
	assert_int_equal(kvs_store_put_batch(s, objs + NP, lens + NP, 10,
					     KVS_DURABILITY_WRITTEN, res + NP),
			 0);
	wait_all(s, d, 4);
	for (int k = 0; k < 4; k++)
		assert_int_equal(d[k].status, 0);
	for (int i = 0; i < NP + 10; i++)
		assert_int_equal(res[i], 0);
	assert_true(spy.syncs > 0);
	kvs_store_stats_get(s, &st);
	assert_true(st.nvme_file_bytes > 3 * (256u << 10)); /* rolled */
	assert_true(st.segments >= 3);
	assert_int_equal(kvs_store_close(s), 0);
	spy_free(&spy);
	o.io = NULL;
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	for (int i = 0; i < NP + 10; i++)
		assert_int_equal(test_get_cmp(s, &b[i].key, b[i].obj, b[i].len),
				 0);
	assert_int_equal(kvs_store_close(s), 0);
	test_blocks_free(b, NP + 10);
	test_rmdir(dir);
}

/* Deletes and commits through the engine: tombstones written and synced
 * (a restart keeps the deletion), committed slots written. */
static void test_async_delete_commit(void **state)
{
	char *dir = test_mkdir();
	struct kvs_store_opts o;
	struct kvs_store *s;
	struct test_blk b[12];
	struct kvs_store_key keys[4];
	struct kvs_store_reservation *r[2];
	struct done_rec d[2] = { 0 };
	uint8_t *dst;
	int res[4];

	test_opts(&o, 8u << 20, 32u << 20, 1u << 20);
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	assert_int_equal(test_blocks_make(b, 12, 1300, 3), 0);
	for (int i = 0; i < 8; i++)
		assert_int_equal(kvs_store_put(s, b[i].obj, b[i].len,
					       KVS_DURABILITY_WRITTEN, NULL),
				 0);
	keys[0] = b[1].key;
	keys[1] = b[4].key;
	keys[2] = b[11].key; /* never put */
	keys[3] = b[6].key;
	assert_int_equal(kvs_store_delete_batch_async(s, keys, 4,
						      KVS_DURABILITY_DURABLE,
						      res, on_done, &d[0]),
			 0);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(
			kvs_store_reserve(s, b[8 + i].len, &r[i], &dst), 0);
		memcpy(dst, b[8 + i].obj, b[8 + i].len);
	}
	{
		int cres[2];

		assert_int_equal(kvs_store_commit_batch_async(
					 s, r, 2, KVS_DURABILITY_DURABLE, cres,
					 on_done, &d[1]),
				 0);
		wait_all(s, d, 2);
		assert_int_equal(cres[0], 0);
		assert_int_equal(cres[1], 0);
	}
	assert_int_equal(d[0].status, 0);
	assert_int_equal(d[1].status, 0);
	assert_int_equal(res[0], 0);
	assert_int_equal(res[1], 0);
	assert_int_equal(res[2], -KVS_ENOTFOUND);
	assert_int_equal(res[3], 0);
	assert_int_equal(test_get_cmp(s, &b[4].key, b[4].obj, b[4].len),
			 -KVS_ENOTFOUND);
	assert_int_equal(kvs_store_close(s), 0);
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	for (int i = 0; i < 10; i++) {
		bool gone = i == 1 || i == 4 || i == 6;

		assert_int_equal(test_get_cmp(s, &b[i].key, b[i].obj, b[i].len),
				 gone ? -KVS_ENOTFOUND : 0);
	}
	/* nothing on disk to log: served inline */
	assert_int_equal(kvs_store_delete_batch_async(s, keys + 2, 1,
						      KVS_DURABILITY_WRITTEN,
						      res, on_done, &d[0]),
			 1);
	assert_int_equal(res[0], -KVS_ENOTFOUND);
	assert_int_equal(kvs_store_close(s), 0);
	test_blocks_free(b, 12);
	test_rmdir(dir);
}

/* ---- no lock across device I/O --------------------------------------- */

/* A device that holds the requests started while @hold is set, until the
 * test runs them (on the loop's thread, as the completions would come). */
struct held {
	bool hold;
	struct kvs_store_io_req *reqs[64];
	int n, released;
};

static int held_start(void *ctx, struct kvs_store_ring *ring,
		      struct kvs_store_io_req *req)
{
	struct held *h = ctx;

	if (!h->hold || h->n == 64)
		return kvs_store_io_default()->start(NULL, ring, req);
	req->done = false;
	h->reqs[h->n++] = req;
	return 0;
}

static int held_complete(void *ctx, struct kvs_store_ring *ring, unsigned min)
{
	struct held *h = ctx;
	int n = h->released, d;

	h->released = 0;
	d = kvs_store_io_default()->complete(NULL, ring,
					     (unsigned)n >= min ? 0 : min - n);
	return n + (d > 0 ? d : 0);
}

static void held_release(struct held *h)
{
	for (int i = 0; i < h->n; i++) {
		struct kvs_store_io_req *r = h->reqs[i];

		assert_int_equal(r->op, KVS_STORE_IO_READ);
		r->res = (int32_t)pread(r->fd, r->buf, r->len, (off_t)r->off);
		r->done = true;
	}
	h->released = h->n;
	h->n = 0;
	h->hold = false;
}

struct bystander {
	struct kvs_store *s;
	const struct test_blk *in_dram, *fresh;
	int finished; /* 1 when every call returned as expected */
};

/* Synchronous calls that need no device: they must not wait for the
 * asynchronous batch's reads. */
static void *bystander_main(void *arg)
{
	struct bystander *by = arg;
	struct kvs_store_stats st;
	int ok;

	ok = test_get_cmp(by->s, &by->in_dram->key, by->in_dram->obj,
			  by->in_dram->len) == 0;
	ok &= kvs_store_put(by->s, by->fresh->obj, by->fresh->len,
			    KVS_DURABILITY_MEMORY, NULL) == 0;
	kvs_store_stats_get(by->s, &st);
	ok &= kvs_store_delete(by->s, &by->fresh->key) == 0;
	__atomic_store_n(&by->finished, ok ? 1 : -1, __ATOMIC_RELEASE);
	return NULL;
}

static void test_async_device_held(void **state)
{
	char *dir = test_mkdir();
	struct kvs_store_io_ops ops = *kvs_store_io_default();
	struct held h = { 0 };
	struct kvs_store_opts o;
	struct kvs_store *s;
	struct test_blk b[5];
	struct kvs_store_key keys[2];
	struct kvs_store_ref *refs[2];
	struct done_rec d = { 0 };
	struct bystander by;
	pthread_t t;
	int res[2], done = 0;

	assert_int_equal(test_blocks_make(b, 5, 1900, 2), 0);
	test_opts(&o, 8u << 20, 32u << 20, 1u << 20);
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	for (int i = 0; i < 4; i++)
		assert_int_equal(kvs_store_put(s, b[i].obj, b[i].len,
					       KVS_DURABILITY_WRITTEN, NULL),
				 0);
	assert_int_equal(kvs_store_close(s), 0);
	ops.start = held_start;
	ops.complete = held_complete;
	ops.ctx = &h;
	o.io = &ops;
	o.write_through = false;
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	/* block 0 into DRAM, for real */
	assert_int_equal(test_get_cmp(s, &b[0].key, b[0].obj, b[0].len), 0);
	h.hold = true;
	keys[0] = b[1].key;
	keys[1] = b[2].key;
	assert_int_equal(
		kvs_store_get_batch_async(s, keys, 2, refs, res, on_done, &d),
		0);
	assert_int_equal(kvs_store_poll(s), 0);
	assert_int_equal(h.n, 2); /* both reads at the device */
	by = (struct bystander){ .s = s, .in_dram = &b[0], .fresh = &b[4] };
	assert_int_equal(pthread_create(&t, NULL, bystander_main, &by), 0);
	for (int i = 0; i < 3000 && !done; i++) {
		done = __atomic_load_n(&by.finished, __ATOMIC_ACQUIRE);
		if (!done)
			usleep(1000);
	}
	/* the store's lock was free while the device held the reads */
	assert_int_equal(done, 1);
	pthread_join(t, NULL);
	assert_int_equal(d.calls, 0);
	held_release(&h);
	wait_done(s, &d);
	assert_int_equal(d.status, 0);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(res[i], 0);
		assert_memory_equal(kvs_store_ref_data(refs[i]), b[1 + i].obj,
				    b[1 + i].len);
		kvs_store_ref_release(refs[i]);
	}
	assert_int_equal(kvs_store_close(s), 0);
	test_blocks_free(b, 5);
	test_rmdir(dir);
}

/* ---- the loop beside synchronous threads ------------------------------ */

#define TK 24
#define T_ITERS 150

static struct test_blk tver[TK][2];

/* Whether @ref (of key @k) holds one of the versions put for it. */
static bool is_version(int k, const struct kvs_store_ref *ref)
{
	for (int v = 0; v < 2; v++)
		if (kvs_store_ref_len(ref) == tver[k][v].len &&
		    !memcmp(kvs_store_ref_data(ref), tver[k][v].obj,
			    tver[k][v].len))
			return true;
	return false;
}

static int key_of_blk(const struct kvs_store_key *key)
{
	for (int k = 0; k < TK; k++)
		if (!memcmp(&tver[k][0].key, key, sizeof(*key)))
			return k;
	return -1;
}

struct syncer {
	struct kvs_store *s;
	uint64_t seed;
	int bad;
};

static void *syncer_main(void *arg)
{
	struct syncer *y = arg;
	uint64_t rng = y->seed;

	for (int it = 0; it < T_ITERS; it++) {
		int k = (int)(test_rand(&rng) % TK), v = (int)(rng >> 40 & 1);
		struct kvs_store_ref *ref;
		unsigned r = (unsigned)(test_rand(&rng) % 10);
		int err;

		if (r < 4) {
			err = kvs_store_get(y->s, &tver[k][0].key, &ref);
			if (!err) {
				y->bad += !is_version(k, ref);
				kvs_store_ref_release(ref);
			} else {
				y->bad += err != -KVS_ENOTFOUND;
			}
		} else if (r < 7) {
			y->bad += kvs_store_put(y->s, tver[k][v].obj,
						tver[k][v].len,
						r == 6 ? KVS_DURABILITY_DURABLE
						       : KVS_DURABILITY_WRITTEN,
						NULL) != 0;
		} else if (r < 9) {
			err = kvs_store_delete(y->s, &tver[k][0].key);
			y->bad += err && err != -KVS_ENOTFOUND;
		} else {
			y->bad += kvs_store_sync(y->s) != 0;
		}
	}
	return NULL;
}

enum { L_GET, L_PUT, L_DEL };

struct lbatch {
	int kind;
	bool busy, done;
	int status;
	struct kvs_store_key keys[4];
	const uint8_t *objs[4];
	size_t lens[4];
	struct kvs_store_ref *refs[4];
	int res[4];
};

static void lb_done(void *arg, int status)
{
	struct lbatch *lb = arg;

	lb->busy = false;
	lb->done = true;
	lb->status = status;
}

/* A batch that finished: each result as its kind allows; refs are
 * versions of their keys.  Failures counted in *@bad. */
static void lb_check(struct lbatch *lb, int *bad)
{
	for (int i = 0; i < 4; i++) {
		int r = lb->res[i];

		if (lb->kind == L_GET && r == 0) {
			*bad += !is_version(key_of_blk(&lb->keys[i]),
					    lb->refs[i]);
			kvs_store_ref_release(lb->refs[i]);
		} else if (lb->kind != L_PUT) {
			*bad += r && r != -KVS_ENOTFOUND;
		} else {
			*bad += r != 0;
		}
	}
	*bad += lb->kind != L_GET && lb->status != 0;
}

/* The loop (this thread): gets, puts and deletes in asynchronous
 * batches, three in flight, while two threads do the same synchronously
 * on the same keys in a store whose segments roll, get reclaimed and
 * compacted.  Every answer is one a put gave the key; a reopen finds
 * nothing else. */
static void test_async_beside_sync(void **state)
{
	char *dir = test_mkdir();
	struct kvs_store_opts o;
	struct kvs_store *s;
	struct syncer y[2];
	pthread_t t[2];
	struct lbatch lb[3] = { 0 };
	struct pollfd p;
	uint64_t rng = 4242;
	int bad = 0, started = 0, finished = 0;

	for (int k = 0; k < TK; k++)
		for (int v = 0; v < 2; v++) {
			tver[k][v].obj = test_block_version(
				(uint64_t)k, (uint64_t)v, (uint16_t)(1 + k % 3),
				&tver[k][v].len, &tver[k][v].key);
			assert_non_null(tver[k][v].obj);
		}
	test_opts(&o, 1u << 20, 2u << 20, 256u << 10);
	o.queue_depth = 4;
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	p = (struct pollfd){ .fd = kvs_store_event_fd(s), .events = POLLIN };
	for (int i = 0; i < 2; i++) {
		y[i] = (struct syncer){ .s = s, .seed = 77 + (uint64_t)i };
		assert_int_equal(
			pthread_create(&t[i], NULL, syncer_main, &y[i]), 0);
	}
	while (finished < T_ITERS) {
		for (int j = 0; j < 3 && started < T_ITERS; j++) {
			struct lbatch *b = &lb[j];
			int rc;

			if (b->busy || b->done)
				continue;
			b->kind = (int)(test_rand(&rng) % 3);
			for (int i = 0; i < 4; i++) {
				int k = (int)(test_rand(&rng) % TK);
				int v = (int)(rng >> 40 & 1);

				b->keys[i] = tver[k][0].key;
				b->objs[i] = tver[k][v].obj;
				b->lens[i] = tver[k][v].len;
			}
			b->busy = true;
			started++;
			rc = b->kind == L_GET ? kvs_store_get_batch_async(
							s, b->keys, 4, b->refs,
							b->res, lb_done, b)
			     : b->kind == L_PUT
				     ? kvs_store_put_batch_async(
					       s, b->objs, b->lens, 4,
					       j ? KVS_DURABILITY_WRITTEN
						 : KVS_DURABILITY_DURABLE,
					       b->res, lb_done, b)
				     : kvs_store_delete_batch_async(
					       s, b->keys, 4,
					       KVS_DURABILITY_WRITTEN, b->res,
					       lb_done, b);
			if (rc < 0)
				bad++;
			if (rc != 0) {
				b->busy = false;
				b->status = 0;
				b->done = true;
			}
		}
		kvs_store_poll(s);
		for (int j = 0; j < 3; j++)
			if (lb[j].done) {
				lb[j].done = false;
				lb_check(&lb[j], &bad);
				finished++;
			}
		if (lb[0].busy && lb[1].busy && lb[2].busy)
			poll(&p, 1, 10);
	}
	for (int i = 0; i < 2; i++) {
		pthread_join(t[i], NULL);
		bad += y[i].bad;
	}
	assert_int_equal(bad, 0);
	assert_int_equal(kvs_store_close(s), 0);
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	for (int k = 0; k < TK; k++) {
		struct kvs_store_ref *ref;
		int err = kvs_store_get(s, &tver[k][0].key, &ref);

		if (!err) {
			assert_true(is_version(k, ref));
			kvs_store_ref_release(ref);
		} else {
			assert_int_equal(err, -KVS_ENOTFOUND);
		}
	}
	assert_int_equal(kvs_store_close(s), 0);
	for (int k = 0; k < TK; k++)
		test_blocks_free(tver[k], 2);
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
		cmocka_unit_test(test_async_nvme_gets),
		cmocka_unit_test(test_async_puts_roll),
		cmocka_unit_test(test_async_delete_commit),
		cmocka_unit_test(test_async_device_held),
		cmocka_unit_test(test_async_beside_sync),
		cmocka_unit_test(test_register_option),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
