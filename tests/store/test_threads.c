/*
 * test_threads.c - one store, four threads: puts (single, batched, every
 * durability), gets (single and batched) whose references are handed to
 * another thread to read and release, syncs, statistics and prefix
 * lookups, all at once, with DRAM and NVMe tiers small enough that
 * eviction, spills, reclaim, carries and compaction run all the time.
 * Every hit is byte-identical to a version put for its key; at the end
 * the store closes (no reference left) and reopens clean.  Built and run
 * under ThreadSanitizer by scripts/test.sh (suite "tsan").
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "kvstash/log.h"
#include "store_test.h"

enum { KEYS = 96, NVER = 2, THREADS = 4, ROUNDS = 300, HANDOFF = 16 };

static struct test_blk pool[KEYS][NVER];

/* References passed from the getting threads to the releasing one. */
static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct kvs_store_ref *refs[HANDOFF];
	int keys[HANDOFF];
	int n;
	bool done;
} handoff = { .lock = PTHREAD_MUTEX_INITIALIZER,
	      .cond = PTHREAD_COND_INITIALIZER };

struct worker {
	struct kvs_store *s;
	int id;
	int bad; /* wrong bytes, unexpected errors */
};

static int setup(void **state)
{
	for (int k = 0; k < KEYS; k++)
		for (int v = 0; v < NVER; v++) {
			struct test_blk *b = &pool[k][v];

			b->obj = test_block_version(
				(uint64_t)k + 500, (uint64_t)v,
				(uint16_t)(1 + k % 6), &b->len, &b->key);
			if (!b->obj)
				return -1;
		}
	return 0;
}

static int teardown(void **state)
{
	for (int k = 0; k < KEYS; k++)
		test_blocks_free(pool[k], NVER);
	return 0;
}

/* Whether @ref holds a version of key @k. */
static bool is_version(int k, const struct kvs_store_ref *ref)
{
	for (int v = 0; v < NVER; v++)
		if (kvs_store_ref_len(ref) == pool[k][v].len &&
		    !memcmp(kvs_store_ref_data(ref), pool[k][v].obj,
			    pool[k][v].len))
			return true;
	return false;
}

static bool is_miss(int err)
{
	return err == -KVS_ENOTFOUND || err == -KVS_ECORRUPT;
}

/* Hands @ref over to the releasing thread (waits while it is full). */
static void hand_off(struct kvs_store_ref *ref, int k)
{
	pthread_mutex_lock(&handoff.lock);
	while (handoff.n == HANDOFF)
		pthread_cond_wait(&handoff.cond, &handoff.lock);
	handoff.refs[handoff.n] = ref;
	handoff.keys[handoff.n++] = k;
	pthread_cond_broadcast(&handoff.cond);
	pthread_mutex_unlock(&handoff.lock);
}

static void *releaser(void *arg)
{
	struct worker *w = arg;

	pthread_mutex_lock(&handoff.lock);
	for (;;) {
		while (handoff.n == 0 && !handoff.done)
			pthread_cond_wait(&handoff.cond, &handoff.lock);
		if (handoff.n == 0)
			break;
		struct kvs_store_ref *ref = handoff.refs[--handoff.n];
		int k = handoff.keys[handoff.n];

		pthread_cond_broadcast(&handoff.cond);
		pthread_mutex_unlock(&handoff.lock);
		w->bad += !is_version(k, ref);
		kvs_store_ref_release(ref);
		pthread_mutex_lock(&handoff.lock);
	}
	pthread_mutex_unlock(&handoff.lock);
	return NULL;
}

static void one_round(struct worker *w, uint64_t *rng)
{
	unsigned r = (unsigned)(test_rand(rng) % 100);
	int k = (int)(test_rand(rng) % KEYS), v = (int)(test_rand(rng) % NVER);
	struct kvs_store_ref *ref;
	int err;

	if (r < 35) {
		err = kvs_store_put(w->s, pool[k][v].obj, pool[k][v].len,
				    (enum kvs_durability)(test_rand(rng) % 3),
				    NULL);
		w->bad += err != 0;
	} else if (r < 45) {
		const uint8_t *objs[4];
		size_t lens[4];
		int res[4];

		for (int i = 0; i < 4; i++) {
			int kk = (k + i * 7) % KEYS;

			objs[i] = pool[kk][v].obj;
			lens[i] = pool[kk][v].len;
		}
		w->bad += kvs_store_put_batch(w->s, objs, lens, 4,
					      KVS_DURABILITY_WRITTEN, res) != 0;
	} else if (r < 70) {
		err = kvs_store_get(w->s, &pool[k][0].key, &ref);
		if (!err)
			hand_off(ref, k);
		else
			w->bad += !is_miss(err);
	} else if (r < 85) {
		struct kvs_store_key keys[6];
		struct kvs_store_ref *refs[6];
		int res[6];

		for (int i = 0; i < 6; i++)
			keys[i] = pool[(k + i) % KEYS][0].key;
		w->bad += kvs_store_get_batch(w->s, keys, 6, refs, res) != 0;
		for (int i = 0; i < 6; i++) {
			if (res[i]) {
				w->bad += !is_miss(res[i]);
				continue;
			}
			w->bad += !is_version((k + i) % KEYS, refs[i]);
			kvs_store_ref_release(refs[i]);
		}
	} else if (r < 90) {
		w->bad += kvs_store_sync(w->s) != 0;
	} else if (r < 95) {
		struct kvs_store_stats st;

		kvs_store_stats_get(w->s, &st);
		w->bad += st.dram.bytes > st.dram.capacity;
	} else {
		uint8_t spans[3][KVS_ID_SIZE];
		uint32_t layers[1];

		for (int i = 0; i < 3; i++)
			memcpy(spans[i], pool[(k + i) % KEYS][0].key.span_id,
			       KVS_ID_SIZE);
		layers[0] = pool[k][0].key.layer;
		w->bad +=
			kvs_store_lookup_prefix(w->s, spans, 3, layers, 1) > 3;
	}
}

static void *worker_run(void *arg)
{
	struct worker *w = arg;
	uint64_t rng = 1000 + (uint64_t)w->id;

	for (int i = 0; i < ROUNDS; i++)
		one_round(w, &rng);
	return NULL;
}

static void test_threads(void **state)
{
	struct kvs_store_opts o;
	struct kvs_store_stats st;
	struct kvs_store *s;
	struct worker w[THREADS], rel = { 0 };
	pthread_t t[THREADS], rt;
	char *dir = test_mkdir();

	/* 256 KiB of DRAM, three segments of 256 KiB: everything churns */
	test_opts(&o, 256 << 10, 768 << 10, 256 << 10);
	o.write_through = false;
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	rel.s = s;
	assert_int_equal(pthread_create(&rt, NULL, releaser, &rel), 0);
	for (int i = 0; i < THREADS; i++) {
		w[i] = (struct worker){ .s = s, .id = i };
		assert_int_equal(pthread_create(&t[i], NULL, worker_run, &w[i]),
				 0);
	}
	for (int i = 0; i < THREADS; i++) {
		pthread_join(t[i], NULL);
		assert_int_equal(w[i].bad, 0);
	}
	pthread_mutex_lock(&handoff.lock);
	handoff.done = true;
	pthread_cond_broadcast(&handoff.cond);
	pthread_mutex_unlock(&handoff.lock);
	pthread_join(rt, NULL);
	assert_int_equal(rel.bad, 0);
	kvs_store_stats_get(s, &st);
	print_message("%llu evictions, %llu spills, %llu carried, %llu "
		      "compactions\n",
		      (unsigned long long)st.evictions,
		      (unsigned long long)st.spills,
		      (unsigned long long)st.carried,
		      (unsigned long long)st.compactions);
	assert_true(st.evictions > 0);
	assert_int_equal(kvs_store_close(s), 0);
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	kvs_store_stats_get(s, &st);
	assert_int_equal(
		st.corrupt_dropped + st.torn_dropped + st.lost_segments, 0);
	assert_int_equal(kvs_store_close(s), 0);
	test_rmdir(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_threads),
	};

	kvs_log_set_level(KVS_LOG_ERR);
	return cmocka_run_group_tests(tests, setup, teardown);
}
