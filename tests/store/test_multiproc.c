/*
 * test_multiproc.c - several processes and one store directory: a second
 * writer waits for the first within its lock timeout and then fails,
 * naming the holder's pid; readers share the store with each other, not
 * with a writer; removing files from the directory (a LOCK file, as older
 * versions used) never lets a second writer in; a writer stopped with
 * SIGSTOP makes others fail after their timeout, not hang; read-only
 * opens create nothing and work on read-only media (a tmpfs remounted
 * read-only in a private mount namespace).
 */
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include <cmocka.h>

#include "kvstash/log.h"
#include "store_test.h"

enum { NB = 8 };

static struct test_blk blocks[NB];

static int setup(void **state)
{
	return test_blocks_make(blocks, NB, 4400, 3);
}

static int teardown(void **state)
{
	test_blocks_free(blocks, NB);
	return 0;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void opts_for(struct kvs_store_opts *o, bool read_only, int timeout_ms)
{
	test_opts(o, 1 << 20, 16 << 20, 1 << 20);
	o->read_only = read_only;
	o->create = !read_only;
	o->lock_timeout_ms = timeout_ms;
}

static void fill(const char *dir)
{
	struct kvs_store_opts o;
	struct kvs_store *s;

	opts_for(&o, false, 1000);
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	for (int i = 0; i < NB; i++)
		assert_int_equal(kvs_store_put(s, blocks[i].obj, blocks[i].len,
					       KVS_DURABILITY_DURABLE, NULL),
				 0);
	assert_int_equal(kvs_store_close(s), 0);
}

struct holder {
	pid_t pid;
	int release; /* write end: a byte (or EOF) lets it close */
};

/* A child that opens @dir (a writer, or a reader) and holds it until
 * released; with @stop it stops itself (SIGSTOP) while holding it. */
static struct holder hold(const char *dir, bool read_only, bool stop)
{
	struct holder h;
	int ready[2], release[2];
	char c = 0;

	assert_int_equal(pipe(ready), 0);
	assert_int_equal(pipe(release), 0);
	h.pid = fork();
	assert_true(h.pid >= 0);
	if (h.pid == 0) {
		struct kvs_store_opts o;
		struct kvs_store *s;

		close(ready[0]);
		close(release[1]);
		opts_for(&o, read_only, 5000);
		CHILD_CHECK(kvs_store_open(dir, &o, &s) == 0);
		CHILD_CHECK(write(ready[1], &c, 1) == 1);
		if (stop)
			raise(SIGSTOP);
		CHILD_CHECK(read(release[0], &c, 1) >= 0);
		CHILD_CHECK(kvs_store_close(s) == 0);
		_exit(0);
	}
	close(ready[1]);
	close(release[0]);
	assert_int_equal(read(ready[0], &c, 1), 1);
	close(ready[0]);
	h.release = release[1];
	return h;
}

static void unhold(struct holder *h)
{
	int status;

	/* a byte, not EOF: other holders forked since share the pipe */
	assert_int_equal(write(h->release, "x", 1), 1);
	close(h->release);
	assert_int_equal(waitpid(h->pid, &status, 0), h->pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* Opens @dir within @timeout_ms; the error, and in @msg what it said. */
static int try_open(const char *dir, bool read_only, int timeout_ms,
		    double *secs, char *msg, size_t msg_len)
{
	char path[] = "/tmp/kvs-stderr-XXXXXX";
	struct kvs_store_opts o;
	struct kvs_store *s;
	int fd = mkstemp(path), saved = dup(2), err;
	ssize_t n;
	double t0;

	assert_true(fd >= 0 && saved >= 0);
	opts_for(&o, read_only, timeout_ms);
	fflush(stderr);
	dup2(fd, 2);
	t0 = now_s();
	err = kvs_store_open(dir, &o, &s);
	*secs = now_s() - t0;
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	n = pread(fd, msg, msg_len - 1, 0);
	msg[n > 0 ? n : 0] = '\0';
	close(fd);
	unlink(path);
	if (!err)
		assert_int_equal(kvs_store_close(s), 0);
	return err;
}

/* A second writer waits about its timeout, then fails with -EBUSY and a
 * message naming the holder; once the holder is gone it gets in. */
static void test_lock_timeout(void **state)
{
	char *dir = test_mkdir(), msg[2048], pid[32];
	struct holder h;
	double secs;

	fill(dir);
	h = hold(dir, false, false);
	assert_int_equal(try_open(dir, false, 300, &secs, msg, sizeof(msg)),
			 -EBUSY);
	print_message("waited %.2f s: %s", secs, msg);
	assert_true(secs >= 0.25 && secs < 3);
	snprintf(pid, sizeof(pid), "pid %d", (int)h.pid);
	assert_non_null(strstr(msg, pid));
	/* nobody waits at all with a zero timeout */
	assert_int_equal(try_open(dir, true, 0, &secs, msg, sizeof(msg)),
			 -EBUSY);
	assert_true(secs < 0.2);
	unhold(&h);
	assert_int_equal(try_open(dir, false, 300, &secs, msg, sizeof(msg)), 0);
	test_rmdir(dir);
}

/* Readers share the store; a writer waits for them. */
static void test_readers_share(void **state)
{
	char *dir = test_mkdir(), msg[2048];
	struct holder r1, r2;
	double secs;

	fill(dir);
	r1 = hold(dir, true, false);
	r2 = hold(dir, true, false);
	assert_int_equal(try_open(dir, true, 300, &secs, msg, sizeof(msg)), 0);
	assert_int_equal(try_open(dir, false, 200, &secs, msg, sizeof(msg)),
			 -EBUSY);
	unhold(&r1);
	unhold(&r2);
	assert_int_equal(try_open(dir, false, 200, &secs, msg, sizeof(msg)), 0);
	test_rmdir(dir);
}

/* Whatever is deleted from the directory while a writer holds it (the
 * LOCK file older versions took, any other name), a second writer does
 * not get in. */
static void test_lock_file_removed(void **state)
{
	char *dir = test_mkdir(), msg[2048], path[4200];
	struct holder h;
	double secs;

	fill(dir);
	h = hold(dir, false, false);
	snprintf(path, sizeof(path), "%s/LOCK", dir);
	unlink(path);
	assert_int_equal(try_open(dir, false, 200, &secs, msg, sizeof(msg)),
			 -EBUSY);
	unhold(&h);
	test_rmdir(dir);
}

/* A writer stopped (SIGSTOP) with the store open: a reader gives up
 * after its timeout, naming it; the writer, continued, closes cleanly and
 * nothing it held is lost. */
static void test_stopped_writer(void **state)
{
	struct kvs_store_opts o;
	struct kvs_store *s;
	char *dir = test_mkdir(), msg[2048], pid[32];
	struct holder h;
	double secs;
	int status;

	fill(dir);
	h = hold(dir, false, true);
	assert_int_equal(waitpid(h.pid, &status, WUNTRACED), h.pid);
	assert_true(WIFSTOPPED(status));
	assert_int_equal(try_open(dir, true, 300, &secs, msg, sizeof(msg)),
			 -EBUSY);
	assert_true(secs < 3);
	snprintf(pid, sizeof(pid), "pid %d", (int)h.pid);
	assert_non_null(strstr(msg, pid));
	kill(h.pid, SIGCONT);
	unhold(&h);
	opts_for(&o, true, 1000);
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	for (int i = 0; i < NB; i++) {
		struct kvs_store_ref *ref;

		assert_int_equal(kvs_store_get(s, &blocks[i].key, &ref), 0);
		kvs_store_ref_release(ref);
	}
	assert_int_equal(kvs_store_close(s), 0);
	test_rmdir(dir);
}

static int count_entries(const char *dir)
{
	char cmd[4300];
	FILE *p;
	int n = -1;

	snprintf(cmd, sizeof(cmd), "ls -A '%s' | wc -l", dir);
	p = popen(cmd, "r");
	if (p) {
		if (fscanf(p, "%d", &n) != 1)
			n = -1;
		pclose(p);
	}
	return n;
}

/* In a child with its own mount namespace: a store on a tmpfs, the tmpfs
 * remounted read-only; a read-only open, gets, stats and fsck work and
 * change nothing; a writable open and a put are refused. */
static void read_only_media(const char *base)
{
	struct kvs_store_opts o;
	struct kvs_store_stats st;
	struct kvs_fsck_report rep;
	struct kvs_store *s;
	char dir[4200];
	int before;

	snprintf(dir, sizeof(dir), "%s/store", base);
	opts_for(&o, false, 1000);
	CHILD_CHECK(kvs_store_open(dir, &o, &s) == 0);
	for (int i = 0; i < NB; i++)
		CHILD_CHECK(kvs_store_put(s, blocks[i].obj, blocks[i].len,
					  KVS_DURABILITY_DURABLE, NULL) == 0);
	CHILD_CHECK(kvs_store_close(s) == 0);
	CHILD_CHECK(mount(NULL, base, NULL, MS_REMOUNT | MS_RDONLY, NULL) == 0);
	before = count_entries(dir);
	opts_for(&o, true, 1000);
	CHILD_CHECK(kvs_store_open(dir, &o, &s) == 0);
	for (int i = 0; i < NB; i++) {
		struct kvs_store_ref *ref;

		CHILD_CHECK(kvs_store_get(s, &blocks[i].key, &ref) == 0);
		CHILD_CHECK(kvs_store_ref_len(ref) == blocks[i].len);
		kvs_store_ref_release(ref);
	}
	kvs_store_stats_get(s, &st);
	CHILD_CHECK(st.nvme.blocks == NB);
	CHILD_CHECK(kvs_store_put(s, blocks[0].obj, blocks[0].len,
				  KVS_DURABILITY_WRITTEN, NULL) == -EROFS);
	CHILD_CHECK(kvs_store_close(s) == 0);
	CHILD_CHECK(kvs_store_fsck(dir, 0, NULL, NULL, NULL, &rep) == 0);
	CHILD_CHECK(rep.good == NB);
	opts_for(&o, false, 1000);
	CHILD_CHECK(kvs_store_open(dir, &o, &s) == -EROFS);
	CHILD_CHECK(count_entries(dir) == before);
}

static void test_read_only_media(void **state)
{
	char *base = test_mkdir();
	int status = test_in_tmpfs(base, "16m", read_only_media);

	test_rmdir(base);
	if (status == 77)
		skip();
	assert_int_equal(status, 0);
}

/* A read-only open of a directory that is not a store leaves nothing. */
static void test_read_only_creates_nothing(void **state)
{
	char *dir = test_mkdir(), msg[2048];
	double secs;

	assert_int_equal(try_open(dir, true, 100, &secs, msg, sizeof(msg)),
			 -ENOENT);
	assert_int_equal(count_entries(dir), 0);
	test_rmdir(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_lock_timeout),
		cmocka_unit_test(test_readers_share),
		cmocka_unit_test(test_lock_file_removed),
		cmocka_unit_test(test_stopped_writer),
		cmocka_unit_test(test_read_only_media),
		cmocka_unit_test(test_read_only_creates_nothing),
	};

	kvs_log_set_level(KVS_LOG_WARN);
	return cmocka_run_group_tests(tests, setup, teardown);
}
