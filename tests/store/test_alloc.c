/*
 * test_alloc.c - allocation failures at every allocation of the put, get,
 * recovery and close paths, the way SQLite tests them: each scenario runs
 * again and again, the Nth allocation made by the store's code failing
 * (once, then from the Nth on), for N = 1, 2, ... until a run makes no
 * allocation fail.  Every run must end with an error (-ENOMEM) or with
 * success, and nothing may be silently dropped: an object reported
 * stored reads back, after reopening too; the objects stored before are
 * all still there; a get either returns the bytes or -ENOMEM, never a miss
 * of an object that is there.
 *
 * The allocator is replaced at link time (-Wl,--wrap of malloc, calloc,
 * realloc, posix_memalign, strdup and mmap, see meson.build): only code
 * linked into this executable -- the store, kvformat -- goes through the
 * wrappers, which fail only while armed (never in cmocka, libc or
 * liburing).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include <cmocka.h>

#include "kvstash/log.h"
#include "store_test.h"

/* ---- the failing allocator ------------------------------------------ */

static struct {
	bool armed;
	long countdown; /* allocations to let through; then fail */
	bool persistent; /* keep failing after the first */
	long failed; /* allocations failed */
} af;

static int saved_stderr = -1;

/* Armed: the store's messages (one per failure, thousands of runs) go
 * nowhere, unless KVS_ALLOC_VERBOSE is set. */
static void arm(long n, bool persistent)
{
	int null =
		open(getenv("KVS_ALLOC_VERBOSE") ? "/dev/stderr" : "/dev/null",
		     O_WRONLY);

	fflush(stderr);
	saved_stderr = dup(2);
	dup2(null, 2);
	close(null);
	af.countdown = n;
	af.persistent = persistent;
	af.failed = 0;
	af.armed = true;
}

static long disarm(void)
{
	af.armed = false;
	fflush(stderr);
	dup2(saved_stderr, 2);
	close(saved_stderr);
	return af.failed;
}

static bool af_fail(void)
{
	if (!af.armed)
		return false;
	if (af.countdown > 0) {
		af.countdown--;
		return false;
	}
	if (af.failed && !af.persistent)
		return false;
	af.failed++;
	return true;
}

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);
int __real_posix_memalign(void **p, size_t align, size_t n);
char *__real_strdup(const char *s);
void *__real_mmap(void *addr, size_t len, int prot, int flags, int fd,
		  off_t off);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t n);
int __wrap_posix_memalign(void **p, size_t align, size_t n);
char *__wrap_strdup(const char *s);
void *__wrap_mmap(void *addr, size_t len, int prot, int flags, int fd,
		  off_t off);

void *__wrap_malloc(size_t n)
{
	return af_fail() ? NULL : __real_malloc(n);
}

void *__wrap_calloc(size_t n, size_t size)
{
	return af_fail() ? NULL : __real_calloc(n, size);
}

void *__wrap_realloc(void *p, size_t n)
{
	return af_fail() ? NULL : __real_realloc(p, n);
}

int __wrap_posix_memalign(void **p, size_t align, size_t n)
{
	return af_fail() ? ENOMEM : __real_posix_memalign(p, align, n);
}

char *__wrap_strdup(const char *s)
{
	return af_fail() ? NULL : __real_strdup(s);
}

void *__wrap_mmap(void *addr, size_t len, int prot, int flags, int fd,
		  off_t off)
{
	if (af_fail()) {
		errno = ENOMEM;
		return MAP_FAILED;
	}
	return __real_mmap(addr, len, prot, flags, fd, off);
}

/* ---- scenarios -------------------------------------------------------- */

enum { BASE = 24, NEW = 16, MAX_RUNS = 5000 };

static struct test_blk blocks[BASE + NEW];

static int setup(void **state)
{
	/* up to 16 heads: about 24 KiB a record, so that the new ones fill
	 * the head segment and roll (seal, create, manifest) */
	return test_blocks_make(blocks, BASE + NEW, 8800, 16);
}

static int teardown(void **state)
{
	test_blocks_free(blocks, BASE + NEW);
	return 0;
}

/* Small segments, so that puts roll (and seal, and write the manifest);
 * a capacity that never evicts; a small arena. */
static void alloc_opts(struct kvs_store_opts *o)
{
	test_opts(o, 256 << 10, 64 << 20, 256 << 10);
	o->write_through = false;
}

/* 0 if @b reads back byte-identical, else the get's error (wrong bytes
 * fail the test). */
static int get_same(struct kvs_store *s, const struct test_blk *b)
{
	int err = test_get_cmp(s, &b->key, b->obj, b->len);

	assert_int_not_equal(err, 1);
	return err;
}

/* A store holding blocks [0, BASE), closed. */
static char *base_store(void)
{
	struct kvs_store_opts o;
	struct kvs_store *s;
	char *dir = test_mkdir();

	alloc_opts(&o);
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	for (int i = 0; i < BASE; i++)
		assert_int_equal(kvs_store_put(s, blocks[i].obj, blocks[i].len,
					       KVS_DURABILITY_WRITTEN, NULL),
				 0);
	assert_int_equal(kvs_store_close(s), 0);
	return dir;
}

/* Every block of @ok (and of the base) reads back, after a reopen. */
static void check_reopen(const char *dir, const bool *ok)
{
	struct kvs_store_opts o;
	struct kvs_store *s;

	alloc_opts(&o);
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	for (int i = 0; i < BASE + NEW; i++)
		if (i < BASE || ok[i - BASE])
			assert_int_equal(get_same(s, &blocks[i]), 0);
	assert_int_equal(kvs_store_close(s), 0);
}

/* A batch of new blocks put WRITTEN, some MEMORY (spilled at close). */
static long run_put(long n, bool persistent)
{
	const uint8_t *objs[NEW];
	size_t lens[NEW];
	int res[NEW];
	bool ok[NEW];
	struct kvs_store_opts o;
	struct kvs_store *s;
	char *dir = base_store();
	long failed;
	int err, cerr;

	alloc_opts(&o);
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	for (int i = 0; i < NEW; i++) {
		objs[i] = blocks[BASE + i].obj;
		lens[i] = blocks[BASE + i].len;
	}
	arm(n, persistent);
	err = kvs_store_put_batch(s, objs, lens, NEW / 2,
				  KVS_DURABILITY_WRITTEN, res);
	for (int i = NEW / 2; i < NEW; i++)
		res[i] = kvs_store_put(s, objs[i], lens[i],
				       KVS_DURABILITY_MEMORY, NULL);
	/* and the close, which spills the MEMORY ones: a spill that fails
	 * is reported by the close (they are lost, not silently) */
	cerr = kvs_store_close(s);
	failed = disarm();
	assert_true(cerr == 0 || cerr == -ENOMEM);
	for (int i = 0; i < NEW; i++) {
		if (res[i] && res[i] != -ENOMEM)
			print_message("run %ld: put %d: %s\n", n, i,
				      kvs_strerror(res[i]));
		assert_true(res[i] == 0 || res[i] == -ENOMEM);
		ok[i] = res[i] == 0 && (i < NEW / 2 || cerr == 0);
	}
	assert_true(err == 0 || err == -ENOMEM);
	if (!failed)
		for (int i = 0; i < NEW; i++)
			assert_true(ok[i]);
	check_reopen(dir, ok);
	test_rmdir((char *)dir);
	return failed;
}

/* Gets of every block, one by one and in a batch, from NVMe and DRAM. */
static long run_get(long n, bool persistent)
{
	struct kvs_store_key keys[BASE];
	struct kvs_store_ref *refs[BASE];
	int res[BASE];
	struct kvs_store_opts o;
	struct kvs_store *s;
	char *dir = base_store();
	long failed;
	int err;

	alloc_opts(&o);
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	for (int i = 0; i < BASE; i++)
		keys[i] = blocks[i].key;
	arm(n, persistent);
	for (int i = 0; i < BASE / 2; i++) {
		err = get_same(s, &blocks[i]);
		/* never a miss for want of memory */
		assert_true(err == 0 || err == -ENOMEM);
	}
	err = kvs_store_get_batch(s, keys, BASE, refs, res);
	failed = disarm();
	assert_true(err == 0 || err == -ENOMEM);
	for (int i = 0; !err && i < BASE; i++) {
		assert_true(res[i] == 0 || res[i] == -ENOMEM);
		if (res[i] == 0)
			assert_memory_equal(kvs_store_ref_data(refs[i]),
					    blocks[i].obj, blocks[i].len);
		kvs_store_ref_release(refs[i]);
	}
	/* nothing was dropped */
	for (int i = 0; i < BASE; i++)
		assert_int_equal(get_same(s, &blocks[i]), 0);
	assert_int_equal(kvs_store_close(s), 0);
	test_rmdir(dir);
	return failed;
}

/* The open of a store a process left uncleanly (so recovery checks the
 * newest segment in full, seals, writes the manifest). */
static long run_open(long n, bool persistent)
{
	bool none[NEW] = { false };
	struct kvs_store_opts o;
	struct kvs_store *s;
	char *dir = base_store();
	long failed;
	int err, status;
	pid_t pid;

	alloc_opts(&o);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		/* more puts, then killed: the head is left unsealed, and
		 * unchecked */
		if (kvs_store_open(dir, &o, &s))
			_exit(1);
		for (int i = 0; i < BASE; i++)
			if (kvs_store_put(s, blocks[i].obj, blocks[i].len,
					  KVS_DURABILITY_WRITTEN, NULL))
				_exit(2);
		_exit(0);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	arm(n, persistent);
	err = kvs_store_open(dir, &o, &s);
	failed = disarm();
	assert_true(err == 0 || err == -ENOMEM);
	if (!err) {
		for (int i = 0; i < BASE; i++)
			assert_int_equal(get_same(s, &blocks[i]), 0);
		assert_int_equal(kvs_store_close(s), 0);
	}
	if (!failed)
		assert_int_equal(err, 0);
	/* whatever it did before failing lost nothing */
	check_reopen(dir, none);
	test_rmdir(dir);
	return failed;
}

/* Runs @scenario failing the 1st, 2nd, ... allocation, until a run fails
 * none: then every allocation of the path has been failed once. */
static void every_allocation(long (*scenario)(long n, bool persistent),
			     const char *name)
{
	long n;

	for (int persistent = 0; persistent < 2; persistent++) {
		for (n = 0; n < MAX_RUNS; n++)
			if (!scenario(n, persistent))
				break;
		print_message("%s: %ld allocations failed in turn (%s)\n", name,
			      n, persistent ? "and all after" : "once");
		assert_true(n > 0 && n < MAX_RUNS);
	}
}

static void test_put_paths(void **state)
{
	every_allocation(run_put, "put, spill at close");
}

static void test_get_paths(void **state)
{
	every_allocation(run_get, "get");
}

static void test_recovery_paths(void **state)
{
	every_allocation(run_open, "recovery");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_put_paths),
		cmocka_unit_test(test_get_paths),
		cmocka_unit_test(test_recovery_paths),
	};

	kvs_log_set_level(KVS_LOG_ERR);
	return cmocka_run_group_tests(tests, setup, teardown);
}
