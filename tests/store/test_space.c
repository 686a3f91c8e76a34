/*
 * test_space.c - the store and its space: a file system that fills up (a
 * real tmpfs of 2 MiB, mounted in a private mount namespace) makes the
 * store reclaim and go on, not fail every later put; a disk that refuses
 * everything fails puts with one message, not one per object; segments
 * whose records were superseded are compacted away; segment sizes out of
 * range are refused, the smallest ones work, and a segment past 2 GiB (a
 * sparse file) reads back and checks.
 */
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>

#include <cmocka.h>

#include "kvstash/log.h"
#include "store_internal.h"
#include "store_test.h"

static void (*fs_fn)(const char *dir);

/* The store goes in a directory of the tmpfs. */
static void run_in_store(const char *base)
{
	char store[4200];

	snprintf(store, sizeof(store), "%s/store", base);
	fs_fn(store);
}

/* @fn(dir) with dir in a fresh tmpfs of @size; skipped where no tmpfs can
 * be mounted (store_test.h). */
static void in_small_fs(void (*fn)(const char *dir), const char *size)
{
	char *base = test_mkdir();
	int status;

	assert_non_null(base);
	fs_fn = fn;
	status = test_in_tmpfs(base, size, run_in_store);
	test_rmdir(base);
	if (status == 77)
		skip();
	assert_int_equal(status, 0);
}

static uint64_t fs_bytes(const char *dir)
{
	struct statvfs vfs;
	char parent[4200], *slash;

	snprintf(parent, sizeof(parent), "%s", dir);
	slash = strrchr(parent, '/');
	if (slash)
		*slash = '\0';
	CHILD_CHECK(statvfs(parent, &vfs) == 0);
	return (uint64_t)vfs.f_blocks * vfs.f_frsize;
}

/* Puts ~5 MiB of distinct blocks into a store as large as its 2 MiB file
 * system (as the command line sizes it by default): the store must
 * reclaim its oldest segments when the file system is full, every put
 * succeeding, the latest blocks readable, after reopening too. */
static void fill_small_fs(const char *dir)
{
	enum { N = 600, KEEP = 20 };
	struct kvs_store_opts o;
	struct kvs_store *s;

	test_opts(&o, 0, fs_bytes(dir), 256 << 10);
	CHILD_CHECK(kvs_store_open(dir, &o, &s) == 0);
	for (int i = 0; i < N; i++) {
		size_t len;
		uint8_t *obj = test_block(60000 + (uint64_t)i,
					  (uint16_t)(1 + i % 4), &len, NULL);
		int err = kvs_store_put(s, obj, len, KVS_DURABILITY_WRITTEN,
					NULL);

		if (err)
			fprintf(stderr, "put %d: %s\n", i, kvs_strerror(err));
		CHILD_CHECK(err == 0);
		free(obj);
	}
	kvs_store_close(s);
	CHILD_CHECK(kvs_store_open(dir, &o, &s) == 0);
	for (int i = N - KEEP; i < N; i++) {
		struct kvs_store_key key;
		struct kvs_store_ref *ref;
		size_t len;
		uint8_t *obj = test_block(60000 + (uint64_t)i,
					  (uint16_t)(1 + i % 4), &len, &key);

		CHILD_CHECK(kvs_store_get(s, &key, &ref) == 0);
		CHILD_CHECK(kvs_store_ref_len(ref) == len &&
			    memcmp(kvs_store_ref_data(ref), obj, len) == 0);
		kvs_store_ref_release(ref);
		free(obj);
	}
	kvs_store_close(s);
}

static void test_full_fs_reclaims(void **state)
{
	in_small_fs(fill_small_fs, "2m");
}

/* Lines written to stderr while @fn runs. */
static int stderr_lines(void (*fn)(void *arg), void *arg)
{
	char path[] = "/tmp/kvs-stderr-XXXXXX";
	int fd = mkstemp(path), saved = dup(2), lines = 0;
	FILE *f;
	int c;

	assert_true(fd >= 0 && saved >= 0);
	fflush(stderr);
	dup2(fd, 2);
	fn(arg);
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	f = fdopen(fd, "r");
	assert_non_null(f);
	rewind(f);
	while ((c = fgetc(f)) != EOF)
		lines += c == '\n';
	fclose(f);
	unlink(path);
	return lines;
}

struct batch_arg {
	struct kvs_store *s;
	const uint8_t *objs[32];
	size_t lens[32];
	int res[32];
	int err;
};

static void put_batch_cb(void *arg)
{
	struct batch_arg *b = arg;

	b->err = kvs_store_put_batch(b->s, b->objs, b->lens, 32,
				     KVS_DURABILITY_WRITTEN, b->res);
}

/* A disk that refuses every write and every new file: a batch of 32 puts
 * fails, each object with ENOSPC, and says so once, not once per object
 * (nor once per segment it tried to create). */
static void test_full_disk_one_message(void **state)
{
	struct test_faults f = { .fault = FAULT_NONE, .countdown = -1 };
	struct kvs_store_io_ops ops;
	struct kvs_store_opts o;
	struct batch_arg b = { 0 };
	uint8_t *objs[32];
	char *dir = test_mkdir();
	int lines;

	fault_ops(&ops, &f);
	test_opts(&o, 0, 16 << 20, 256 << 10);
	o.io = &ops;
	assert_int_equal(kvs_store_open(dir, &o, &b.s), 0);
	for (int i = 0; i < 32; i++) {
		objs[i] = test_block(80000 + (uint64_t)i, 8, &b.lens[i], NULL);
		b.objs[i] = objs[i];
	}
	f.fault = FAULT_FULL;
	lines = stderr_lines(put_batch_cb, &b);
	print_message("%d line(s) on stderr\n", lines);
	assert_int_equal(b.err, -ENOSPC);
	for (int i = 0; i < 32; i++)
		assert_int_equal(b.res[i], -ENOSPC);
	assert_true(lines >= 1 && lines <= 2);
	f.fault = FAULT_NONE;
	kvs_store_close(b.s);
	for (int i = 0; i < 32; i++)
		free(objs[i]);
	test_rmdir(dir);
}

/* 40 keys put again and again with new values: the superseded records'
 * segments are compacted away long before capacity is reached, and the
 * newest value of every key survives, after reopening too. */
static void test_superseded_compacted(void **state)
{
	enum { KEYS = 40, ROUNDS = 30 };
	struct kvs_store_opts o;
	struct kvs_store_stats st;
	struct kvs_store *s;
	char *dir = test_mkdir();
	uint64_t live = 0;

	test_opts(&o, 0, 64 << 20, 256 << 10);
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	for (int r = 0; r < ROUNDS; r++)
		for (int k = 0; k < KEYS; k++) {
			size_t len;
			uint8_t *obj = test_block_version(
				(uint64_t)k, (uint64_t)r, 8, &len, NULL);

			assert_int_equal(kvs_store_put(s, obj, len,
						       KVS_DURABILITY_WRITTEN,
						       NULL),
					 0);
			if (r == ROUNDS - 1)
				live += record_size(len);
			free(obj);
		}
	kvs_store_stats_get(s, &st);
	print_message("%llu segments, %llu file bytes for %llu live\n",
		      (unsigned long long)st.segments,
		      (unsigned long long)st.nvme_file_bytes,
		      (unsigned long long)live);
	/* at most about twice the live bytes, and the head */
	assert_true(st.nvme_file_bytes <= 2 * live + 2 * (256 << 10));
	kvs_store_close(s);
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	for (int k = 0; k < KEYS; k++) {
		struct kvs_store_key key;
		struct kvs_store_ref *ref;
		size_t len;
		uint8_t *obj = test_block_version((uint64_t)k, ROUNDS - 1, 8,
						  &len, &key);

		assert_int_equal(kvs_store_get(s, &key, &ref), 0);
		assert_int_equal(kvs_store_ref_len(ref), len);
		assert_memory_equal(kvs_store_ref_data(ref), obj, len);
		kvs_store_ref_release(ref);
		free(obj);
	}
	kvs_store_stats_get(s, &st);
	assert_int_equal(st.nvme.blocks, KEYS);
	assert_int_equal(st.corrupt_dropped + st.torn_dropped, 0);
	kvs_store_close(s);
	test_rmdir(dir);
}

/* Segment sizes below 256 KiB or above 1 TiB are refused, with an error
 * and nothing created; the smallest accepted size works, reclaiming. */
static void test_segment_size_bounds(void **state)
{
	static const uint64_t refused[] = {
		1, 4095, 4096, 100000, (256 << 10) - 4096, (1ull << 40) + 4096,
	};
	struct kvs_store_opts o;
	struct kvs_store_stats st;
	struct kvs_store *s;
	char *dir = test_mkdir(), sub[4200];

	snprintf(sub, sizeof(sub), "%s/store", dir);
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		test_opts(&o, 0, 2ull << 40, refused[i]);
		assert_int_equal(kvs_store_open(sub, &o, &s), -KVS_EPARAM);
		assert_int_equal(access(sub, F_OK), -1);
	}
	/* a capacity that cannot hold two of the smallest segments */
	test_opts(&o, 0, 400 << 10, 0);
	assert_int_equal(kvs_store_open(sub, &o, &s), -KVS_EPARAM);
	/* the smallest: two segments of 256 KiB */
	test_opts(&o, 0, 512 << 10, 256 << 10);
	assert_int_equal(kvs_store_open(sub, &o, &s), 0);
	for (uint64_t i = 0; i < 300; i++) {
		size_t len;
		uint8_t *obj = test_block(90000 + i, 4, &len, NULL);

		assert_int_equal(kvs_store_put(s, obj, len,
					       KVS_DURABILITY_DURABLE, NULL),
				 0);
		free(obj);
	}
	kvs_store_stats_get(s, &st);
	assert_true(st.evictions > 0);
	assert_true(st.nvme_file_bytes <= 512 << 10);
	kvs_store_close(s);
	test_rmdir(dir);
}

struct tally {
	int good, bad;
};

static void tally_cb(void *arg, const struct kvs_fsck_record *r)
{
	struct tally *t = arg;

	if (r->status == KVS_FSCK_GOOD)
		t->good++;
	else
		t->bad++;
}

/* A segment of 4 GiB whose records lie on both sides of 2 GiB (a sparse
 * file: the space between was never written): they read back after
 * reopening, and fsck checks every one of them. */
static void test_segment_past_2g(void **state)
{
	enum { N = 20 };
	struct kvs_store_io_ops ops = *kvs_store_io_default();
	struct kvs_store_opts o;
	struct kvs_fsck_report rep;
	struct kvs_store *s;
	struct test_blk b[N];
	struct tally t = { 0 };
	char *dir = test_mkdir();

	assert_int_equal(test_blocks_make(b, N, 95000, 8), 0);
	ops.fallocate = test_no_fallocate;
	test_opts(&o, 0, 16ull << 30, 4ull << 30);
	o.io = &ops;
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	for (int i = 0; i < N; i++) {
		if (i == N / 2) {
			/* skip ahead: the next records land past 2 GiB */
			struct segment *head = list_entry(s->segments.next,
							  struct segment, link);
			uint64_t to = (5ull << 29) + 4096;

			s->nvme_file_bytes += to - head->size;
			head->size = to;
		}
		assert_int_equal(kvs_store_put(s, b[i].obj, b[i].len,
					       KVS_DURABILITY_DURABLE, NULL),
				 0);
	}
	kvs_store_close(s);
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	for (int i = 0; i < N; i++) {
		struct kvs_store_ref *ref;

		assert_int_equal(kvs_store_get(s, &b[i].key, &ref), 0);
		assert_int_equal(kvs_store_ref_len(ref), b[i].len);
		assert_memory_equal(kvs_store_ref_data(ref), b[i].obj,
				    b[i].len);
		kvs_store_ref_release(ref);
	}
	kvs_store_close(s);
	assert_int_equal(kvs_store_fsck(dir, 0, &o, tally_cb, &t, &rep), 0);
	assert_int_equal(t.good, N);
	test_blocks_free(b, N);
	test_rmdir(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_full_fs_reclaims),
		cmocka_unit_test(test_full_disk_one_message),
		cmocka_unit_test(test_superseded_compacted),
		cmocka_unit_test(test_segment_past_2g),
		cmocka_unit_test(test_segment_size_bounds),
	};

	kvs_log_set_level(KVS_LOG_ERR);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
