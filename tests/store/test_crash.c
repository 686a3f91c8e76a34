/*
 * test_crash.c - kill -9 of a writer in the middle of a stream of durable
 * puts, many times over the same store.  A child puts blocks (singly and
 * in batches) with KVS_DURABILITY_DURABLE and reports each acknowledged
 * block over a pipe; the parent kills it at a random moment, reopens the
 * store, and checks that every acknowledged block is readable and
 * byte-identical, and that no block is ever served corrupt (the ones in
 * flight at the kill are a miss or intact).  Bounded to about 20 s.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/wait.h>
#include <time.h>

#include <cmocka.h>

#include "store_test.h"

enum { ROUNDS = 30, MAX_ACKS = 20000, BLOCKS_PER_ROUND = 1000 };

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void crash_opts(struct kvs_store_opts *o)
{
	/* small segments so rolls (and their directory fsyncs) happen */
	test_opts(o, 256 << 10, 1ull << 30, 512 << 10);
}

static void child(const char *dir, int fd, uint64_t first)
{
	struct kvs_store_opts o;
	struct kvs_store *s;
	uint64_t rng = first;

	crash_opts(&o);
	if (kvs_store_open(dir, &o, &s))
		_exit(3);
	for (uint64_t seed = first; seed < first + BLOCKS_PER_ROUND;) {
		uint8_t *objs[4];
		size_t lens[4];
		int res[4];
		unsigned n = test_rand(&rng) % 3 == 0 ? 4 : 1;

		for (unsigned i = 0; i < n; i++)
			objs[i] = test_block(seed + i,
					     (uint16_t)(1 + (seed + i) % 5),
					     &lens[i], NULL);
		kvs_store_put_batch(s, (const uint8_t *const *)objs, lens, n,
				    KVS_DURABILITY_DURABLE, res);
		for (unsigned i = 0; i < n; i++) {
			uint64_t acked = seed + i;

			if (res[i] == 0 &&
			    write(fd, &acked, sizeof(acked)) != sizeof(acked))
				_exit(4);
			free(objs[i]);
		}
		seed += n;
	}
	_exit(0);
}

/* 0 identical, 1 miss; fails the test on anything corrupt. */
static int check(struct kvs_store *s, uint64_t seed)
{
	struct kvs_store_key key;
	struct kvs_store_ref *ref;
	size_t len;
	uint8_t *obj = test_block(seed, (uint16_t)(1 + seed % 5), &len, &key);
	int err = kvs_store_get(s, &key, &ref);

	if (err) {
		assert_int_equal(err, -KVS_ENOTFOUND);
		free(obj);
		return 1;
	}
	assert_int_equal(kvs_store_ref_len(ref), len);
	assert_memory_equal(kvs_store_ref_data(ref), obj, len);
	kvs_store_ref_release(ref);
	free(obj);
	return 0;
}

static void test_kill_durable(void **state)
{
	uint64_t *acked = calloc(MAX_ACKS, sizeof(*acked));
	size_t nacked = 0;
	uint64_t rng = (uint64_t)time(NULL);
	char *dir = test_mkdir();
	double t0 = now_s();
	int rounds = 0;

	for (int round = 0; round < ROUNDS && now_s() - t0 < 20; round++) {
		uint64_t first = (uint64_t)round * BLOCKS_PER_ROUND + 1;
		int p[2];
		pid_t pid;

		assert_int_equal(pipe(p), 0);
		pid = fork();
		assert_true(pid >= 0);
		if (pid == 0) {
			close(p[0]);
			child(dir, p[1], first);
		}
		close(p[1]);
		usleep((useconds_t)(2000 + test_rand(&rng) % 150000));
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);

		uint64_t seed, last = first - 1;

		while (read(p[0], &seed, sizeof(seed)) == sizeof(seed)) {
			assert_true(nacked < MAX_ACKS);
			acked[nacked++] = seed;
			if (seed > last)
				last = seed;
		}
		close(p[0]);

		struct kvs_store_opts o;
		struct kvs_store *s;

		crash_opts(&o);
		assert_int_equal(kvs_store_open(dir, &o, &s), 0);
		for (size_t i = 0; i < nacked; i++)
			assert_int_equal(check(s, acked[i]), 0);
		/* in flight when killed: a miss or intact, never corrupt */
		for (uint64_t sd = last + 1; sd < last + 5; sd++)
			check(s, sd);
		kvs_store_close(s);
		rounds++;
	}
	print_message("%d kills, %zu acknowledged blocks checked\n", rounds,
		      nacked);
	assert_true(rounds >= 5);
	assert_true(nacked > 0);
	free(acked);
	test_rmdir(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_kill_durable),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
