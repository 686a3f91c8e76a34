/*
 * test_faults.c - the store under damage and failing I/O: a flipped byte
 * anywhere in a segment (that record a miss and counted, its neighbours
 * served, fsck names it, --repair drops it); injected EIO, ENOSPC, short
 * and torn writes and failing syncs (an error to the caller, no
 * acknowledgement after a failed flush, the store stays usable); a full
 * disk (blocks already stored stay readable, now and after reopening);
 * a file system refusing O_DIRECT (buffered fallback, reported); failing
 * mkdir, LOCK file and directory listing (an error, nothing lost).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cmocka.h>

#include "kvstash/log.h"
#include "store_test.h"

enum { NB = 24 };

static struct test_blk blocks[NB];

static int setup(void **state)
{
	return test_blocks_make(blocks, NB, 700, 3);
}

static int teardown(void **state)
{
	test_blocks_free(blocks, NB);
	return 0;
}

static void fill(const char *dir, int n)
{
	struct kvs_store_opts o;
	struct kvs_store *s;

	test_opts(&o, 0, 16 << 20, 1 << 20);
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	for (int i = 0; i < n; i++)
		assert_int_equal(kvs_store_put(s, blocks[i].obj, blocks[i].len,
					       KVS_DURABILITY_DURABLE, NULL),
				 0);
	kvs_store_close(s);
}

static uint8_t *read_file(const char *path, size_t *len)
{
	struct stat st;
	uint8_t *buf;
	int fd = open(path, O_RDONLY);

	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &st), 0);
	buf = malloc((size_t)st.st_size);
	assert_int_equal(pread(fd, buf, (size_t)st.st_size, 0), st.st_size);
	close(fd);
	*len = (size_t)st.st_size;
	return buf;
}

static void write_file(const char *path, const uint8_t *buf, size_t len)
{
	int fd = open(path, O_WRONLY | O_TRUNC);

	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, buf, len, 0), (ssize_t)len);
	close(fd);
}

static void test_flipped_byte(void **state)
{
	struct kvs_store_opts o;
	struct kvs_store_stats st;
	struct kvs_store *s;
	char path[4200], man_path[4200];
	size_t len, man_len;
	uint64_t rng = 7;
	char *dir = test_mkdir();

	fill(dir, NB);
	snprintf(path, sizeof(path), "%s/seg-%016llx.kvs", dir, 0ull);
	snprintf(man_path, sizeof(man_path), "%s/MANIFEST", dir);
	uint8_t *pristine = read_file(path, &len);
	uint8_t *man = read_file(man_path, &man_len);
	uint8_t *copy = malloc(len);

	test_opts(&o, 1 << 20, 16 << 20, 1 << 20);
	for (int round = 0; round < 24; round++) {
		/* a byte inside a record's header or object (not padding);
		 * the last record is spared: losing it reads as torn.  The
		 * first rounds hit the segment header: every record stays. */
		bool in_header = round < 3;
		size_t pos = test_rand(&rng) % 32;
		int misses = 0;

		while (!in_header) {
			pos = 4096 + test_rand(&rng) % (len - 4096);
			size_t rec_off = pos / 4096 * 4096;
			uint64_t rec_len;

			while (rec_off > 4096 &&
			       memcmp(pristine + rec_off, "KVSR", 4) != 0)
				rec_off -= 4096;
			memcpy(&rec_len, pristine + rec_off + 16, 4);
			rec_len &= 0xffffffffu;
			if (pos < rec_off + 128 + rec_len &&
			    rec_off + 128 + rec_len < len - 4096)
				break;
		}
		memcpy(copy, pristine, len);
		copy[pos] ^= (uint8_t)(1u << (test_rand(&rng) % 8));
		write_file(path, copy, len);
		/* the manifest of the store as it was (an open that found
		 * the damage may have sealed the segment since) */
		write_file(man_path, man, man_len);

		struct test_tally t = { 0 };
		struct kvs_fsck_report rep;

		assert_int_equal(
			kvs_store_fsck(dir, 0, NULL, test_tally_cb, &t, &rep),
			0);
		assert_int_equal(t.good, NB - !in_header);
		assert_int_equal(t.corrupt + t.torn, 1);

		assert_int_equal(kvs_store_open(dir, &o, &s), 0);
		for (int i = 0; i < NB; i++)
			misses += test_check_get(s, &blocks[i]) != 0;
		kvs_store_stats_get(s, &st);
		assert_int_equal(misses, !in_header);
		assert_true(st.corrupt_dropped + st.torn_dropped >= 1);
		kvs_store_close(s);
	}
	/* --repair drops it for good */
	assert_int_equal(kvs_store_fsck(dir, KVS_FSCK_REPAIR, NULL, NULL, NULL,
					&(struct kvs_fsck_report){ 0 }),
			 0);
	struct test_tally t = { 0 };
	struct kvs_fsck_report rep;

	assert_int_equal(kvs_store_fsck(dir, 0, NULL, test_tally_cb, &t, &rep),
			 0);
	assert_int_equal(t.good, NB - 1);
	assert_int_equal(t.corrupt + t.torn, 0);
	free(pristine);
	free(man);
	free(copy);
	test_rmdir(dir);
}

struct find_end {
	struct kvs_store_key key;
	uint64_t end;
};

static void find_end_cb(void *arg, const struct kvs_fsck_record *r)
{
	struct find_end *f = arg;

	if (r->key_valid && r->status == KVS_FSCK_GOOD &&
	    memcmp(&r->key, &f->key, sizeof(r->key)) == 0)
		f->end = r->offset + r->length;
}

/* Where the good record of @key ends in its segment, from fsck. */
static uint64_t record_end(const char *dir, const struct kvs_store_key *key)
{
	struct find_end f = { .key = *key };
	struct kvs_fsck_report rep;

	assert_int_equal(kvs_store_fsck(dir, 0, NULL, find_end_cb, &f, &rep),
			 0);
	assert_true(f.end > 0);
	return f.end;
}

static void test_torn_tail(void **state)
{
	struct kvs_store_opts o;
	struct kvs_store_stats st;
	struct kvs_store *s;
	struct test_tally t = { 0 };
	struct kvs_fsck_report rep;
	struct test_blk big;
	char path[4200];
	uint64_t big_end;
	char *dir = test_mkdir();
	int misses = 0, status;
	pid_t pid;

	big.obj = test_block(99, 16, &big.len, &big.key);
	assert_true(big.len > 8192);
	fill(dir, NB);
	test_opts(&o, 1 << 20, 16 << 20, 1 << 20);
	/* a process puts the big record and dies before closing */
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		if (kvs_store_open(dir, &o, &s) ||
		    kvs_store_put(s, big.obj, big.len, KVS_DURABILITY_DURABLE,
				  NULL))
			_exit(1);
		_exit(0);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	/* the newest segment ends 4096 bytes into the big record's end:
	 * cut it short, as a crash mid-write would */
	big_end = record_end(dir, &big.key);
	snprintf(path, sizeof(path), "%s/seg-%016llx.kvs", dir, 0ull);
	assert_int_equal(truncate(path, (off_t)big_end - 4096), 0);
	assert_int_equal(kvs_store_fsck(dir, 0, NULL, test_tally_cb, &t, &rep),
			 0);
	assert_int_equal(t.torn, 1);
	assert_int_equal(t.good, NB);
	/* the first open counts the torn record and cuts it off, durably;
	 * the next ones see a whole log that takes new records again */
	for (int open = 0; open < 3; open++) {
		assert_int_equal(kvs_store_open(dir, &o, &s), 0);
		for (int i = 0; i < NB; i++)
			misses += test_check_get(s, &blocks[i]) != 0;
		assert_int_equal(misses, 0);
		assert_int_equal(test_check_get(s, &big),
				 open == 2 ? 0 : -KVS_ENOTFOUND);
		kvs_store_stats_get(s, &st);
		assert_int_equal(st.torn_dropped, open == 0);
		assert_int_equal(st.corrupt_dropped, 0);
		if (open == 1)
			assert_int_equal(kvs_store_put(s, big.obj, big.len,
						       KVS_DURABILITY_DURABLE,
						       NULL),
					 0);
		kvs_store_close(s);
	}
	memset(&t, 0, sizeof(t));
	assert_int_equal(kvs_store_fsck(dir, 0, NULL, test_tally_cb, &t, &rep),
			 0);
	assert_int_equal(t.torn + t.corrupt, 0);
	assert_int_equal(t.good, NB + 1);
	free(big.obj);
	test_rmdir(dir);
}

/* A record lost in the middle of the newest segment (its header page
 * zeroed) is not a tail: nothing is cut, it is counted at every open
 * until fsck --repair drops it; its neighbours are served throughout. */
static void test_torn_middle(void **state)
{
	struct kvs_store_opts o;
	struct kvs_store_stats st;
	struct kvs_fsck_report rep;
	struct kvs_store *s;
	uint8_t zero[4096] = { 0 };
	char path[4200];
	char *dir = test_mkdir();
	int fd;

	fill(dir, NB);
	snprintf(path, sizeof(path), "%s/seg-%016llx.kvs", dir, 0ull);
	fd = open(path, O_WRONLY);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, zero, sizeof(zero), 4096), 4096);
	close(fd);
	test_opts(&o, 0, 16 << 20, 1 << 20);
	for (int open = 0; open < 3; open++) {
		if (open == 2)
			assert_int_equal(kvs_store_fsck(dir, KVS_FSCK_REPAIR,
							NULL, NULL, NULL, &rep),
					 0);
		assert_int_equal(kvs_store_open(dir, &o, &s), 0);
		kvs_store_stats_get(s, &st);
		assert_int_equal(st.torn_dropped + st.corrupt_dropped,
				 open < 2);
		assert_int_equal(test_check_get(s, &blocks[0]), -KVS_ENOTFOUND);
		for (int i = 1; i < NB; i++)
			assert_int_equal(test_check_get(s, &blocks[i]), 0);
		kvs_store_close(s);
	}
	test_rmdir(dir);
}

static void injected(enum test_fault fault, bool durable)
{
	struct test_faults f = { .fault = fault, .countdown = -1 };
	struct kvs_store_io_ops ops;
	struct kvs_store_opts o;
	struct kvs_store *s;
	enum kvs_durability dur =
		durable ? KVS_DURABILITY_DURABLE : KVS_DURABILITY_WRITTEN;
	char *dir = test_mkdir();

	fault_ops(&ops, &f);
	test_opts(&o, 0, 16 << 20, 1 << 20);
	o.io = &ops;
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	for (int i = 0; i < 8; i++)
		assert_int_equal(kvs_store_put(s, blocks[i].obj, blocks[i].len,
					       dur, NULL),
				 0);
	/* the next write (or sync) fails: an error, no acknowledgement */
	f.countdown = 0;
	assert_true(kvs_store_put(s, blocks[8].obj, blocks[8].len, dur, NULL) <
		    0);
	assert_int_equal(f.injected, 1);
	/* still usable */
	f.countdown = -1;
	for (int i = 9; i < 16; i++)
		assert_int_equal(kvs_store_put(s, blocks[i].obj, blocks[i].len,
					       dur, NULL),
				 0);
	for (int i = 0; i < 16; i++)
		if (i != 8)
			assert_int_equal(test_check_get(s, &blocks[i]), 0);
	test_check_get(s, &blocks[8]);
	kvs_store_close(s);
	/* and after reopening with healthy I/O */
	o.io = NULL;
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	for (int i = 0; i < 16; i++)
		if (i != 8)
			assert_int_equal(test_check_get(s, &blocks[i]), 0);
	test_check_get(s, &blocks[8]);
	kvs_store_close(s);
	test_rmdir(dir);
}

static void test_eio(void **state)
{
	injected(FAULT_EIO, false);
	injected(FAULT_EIO, true);
}

static void test_enospc(void **state)
{
	injected(FAULT_ENOSPC, true);
}

static void test_short_write(void **state)
{
	injected(FAULT_SHORT, true);
}

static void test_torn_write(void **state)
{
	injected(FAULT_TORN, true);
}

static void test_sync_fails(void **state)
{
	injected(FAULT_SYNC_EIO, true);
}

static void test_full_disk(void **state)
{
	struct test_faults f = { .fault = FAULT_NONE, .countdown = -1 };
	struct kvs_store_io_ops ops;
	struct kvs_store_opts o;
	struct kvs_store *s;
	char *dir = test_mkdir();
	int failed = 0;

	fault_ops(&ops, &f);
	/* small segments, so the full disk is met when rolling as well */
	test_opts(&o, 64 << 10, 64 << 20, 256 << 10);
	o.io = &ops;
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	for (int i = 0; i < 12; i++)
		assert_int_equal(kvs_store_put(s, blocks[i].obj, blocks[i].len,
					       KVS_DURABILITY_DURABLE, NULL),
				 0);
	f.fault = FAULT_FULL;
	for (int round = 0; round < 20; round++)
		for (int i = 12; i < NB; i++)
			failed += kvs_store_put(s, blocks[i].obj, blocks[i].len,
						KVS_DURABILITY_DURABLE,
						NULL) == -ENOSPC;
	assert_int_equal(failed, 20 * (NB - 12));
	for (int i = 0; i < 12; i++)
		assert_int_equal(test_check_get(s, &blocks[i]), 0);
	f.fault = FAULT_NONE;
	kvs_store_close(s);
	o.io = NULL;
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	for (int i = 0; i < 12; i++)
		assert_int_equal(test_check_get(s, &blocks[i]), 0);
	/* space is back: puts work again */
	for (int i = 12; i < NB; i++)
		assert_int_equal(kvs_store_put(s, blocks[i].obj, blocks[i].len,
					       KVS_DURABILITY_DURABLE, NULL),
				 0);
	kvs_store_close(s);
	test_rmdir(dir);
}

/* A file system refusing O_DIRECT (injected: EINVAL at open): the store
 * falls back to buffered I/O, says so in the stats, and loses nothing;
 * reopened with the real I/O it is back on O_DIRECT. */
static void test_direct_refused(void **state)
{
	struct test_faults f = { .fault = FAULT_NO_DIRECT, .countdown = -1 };
	struct kvs_store_io_ops ops;
	struct kvs_store_opts o;
	struct kvs_store_stats st;
	struct kvs_store *s;
	char *dir = test_mkdir();

	fault_ops(&ops, &f);
	test_opts(&o, 0, 16 << 20, 1 << 20);
	o.io = &ops;
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	kvs_store_stats_get(s, &st);
	assert_false(st.direct_io);
	assert_true(f.injected > 0);
	for (int i = 0; i < NB; i++)
		assert_int_equal(kvs_store_put(s, blocks[i].obj, blocks[i].len,
					       KVS_DURABILITY_DURABLE, NULL),
				 0);
	for (int i = 0; i < NB; i++)
		assert_int_equal(test_check_get(s, &blocks[i]), 0);
	kvs_store_close(s);
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	for (int i = 0; i < NB; i++)
		assert_int_equal(test_check_get(s, &blocks[i]), 0);
	kvs_store_stats_get(s, &st);
	assert_false(st.direct_io);
	kvs_store_close(s);
	o.io = NULL;
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	kvs_store_stats_get(s, &st);
	assert_true(st.direct_io);
	for (int i = 0; i < NB; i++)
		assert_int_equal(test_check_get(s, &blocks[i]), 0);
	kvs_store_close(s);
	test_rmdir(dir);
}

/* Directory housekeeping failing (mkdir, the LOCK file, listing the
 * segments, at opendir or mid-way through readdir): open and fsck fail
 * with that error, a partial listing never opens a partial store, and
 * nothing stored is lost. */
static void test_dir_faults(void **state)
{
	static const struct {
		enum test_fault fault;
		int err;
	} cases[] = {
		{ FAULT_LOCK, -ENOLCK },
		{ FAULT_LIST, -EACCES },
		{ FAULT_LIST_EIO, -EIO },
	};
	struct test_faults f = { .countdown = -1 };
	struct kvs_fsck_report rep;
	struct kvs_store_io_ops ops;
	struct kvs_store_opts o;
	struct kvs_store *s;
	char *dir = test_mkdir(), sub[4200];

	fault_ops(&ops, &f);
	test_opts(&o, 0, 16 << 20, 1 << 20);
	o.io = &ops;
	/* a new store whose directory cannot be made */
	f.fault = FAULT_MKDIR;
	snprintf(sub, sizeof(sub), "%s/new", dir);
	assert_int_equal(kvs_store_open(sub, &o, &s), -EACCES);
	assert_int_equal(f.injected, 1);
	assert_int_equal(access(sub, F_OK), -1);
	fill(dir, NB);
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		f.fault = cases[c].fault;
		f.injected = 0;
		assert_int_equal(kvs_store_open(dir, &o, &s), cases[c].err);
		assert_int_equal(f.injected, 1);
		assert_int_equal(kvs_store_fsck(dir, KVS_FSCK_REPAIR, &o, NULL,
						NULL, &rep),
				 cases[c].err);
	}
	/* the failures changed nothing */
	f.fault = FAULT_NONE;
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	for (int i = 0; i < NB; i++)
		assert_int_equal(test_check_get(s, &blocks[i]), 0);
	kvs_store_close(s);
	assert_int_equal(kvs_store_fsck(dir, 0, NULL, NULL, NULL, &rep), 0);
	assert_int_equal(rep.good, NB);
	assert_int_equal(rep.corrupt + rep.torn, 0);
	test_rmdir(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_flipped_byte),
		cmocka_unit_test(test_torn_tail),
		cmocka_unit_test(test_torn_middle),
		cmocka_unit_test(test_eio),
		cmocka_unit_test(test_enospc),
		cmocka_unit_test(test_short_write),
		cmocka_unit_test(test_torn_write),
		cmocka_unit_test(test_sync_fails),
		cmocka_unit_test(test_full_disk),
		cmocka_unit_test(test_direct_refused),
		cmocka_unit_test(test_dir_faults),
	};

	kvs_log_set_level(KVS_LOG_ERR);
	return cmocka_run_group_tests(tests, setup, teardown);
}
