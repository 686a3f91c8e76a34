/*
 * test_durability.c - what an acknowledgement promises, at its edges:
 * a durable re-put of bytes an earlier process wrote but never synced is
 * synced before it is acknowledged; a forged record at the top of the
 * sequence space cannot make a later acknowledged put revert; a torn
 * newest record falls back to the key's older intact record; durability
 * levels outside the enum are refused; a store is not closed under its
 * readers' feet.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cmocka.h>

#include "kvstash/log.h"
#include "store_internal.h"
#include "store_test.h"

/* 0 when @key reads back as @obj, else the get's error (other bytes fail
 * the test). */
static int get_is(struct kvs_store *s, const struct kvs_store_key *key,
		  const uint8_t *obj, size_t len)
{
	int err = test_get_cmp(s, key, obj, len);

	assert_int_not_equal(err, 1);
	return err;
}

/* A process puts @obj WRITTEN (not synced) and dies: no close. */
static void put_and_die(const char *dir, const struct kvs_store_opts *o,
			const uint8_t *obj, size_t len)
{
	struct kvs_store *s;
	int status;
	pid_t pid = fork();

	assert_true(pid >= 0);
	if (pid == 0) {
		if (kvs_store_open(dir, o, &s) ||
		    kvs_store_put(s, obj, len, KVS_DURABILITY_WRITTEN, NULL))
			_exit(1);
		_exit(0);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* A process puts a block WRITTEN (not synced) and dies; the next process
 * puts the same bytes DURABLE: the store may keep the record already on
 * disk, but only after syncing it, since nothing made it durable. */
static void test_durable_reput_syncs(void **state)
{
	struct kvs_store_io_ops ops;
	struct kvs_store_opts o;
	struct test_spy spy;
	struct kvs_store *s;
	struct kvs_store_key key;
	char *dir = test_mkdir();
	size_t len;
	uint8_t *obj = test_block(11, 2, &len, &key);

	test_opts(&o, 1 << 20, 16 << 20, 1 << 20);
	put_and_die(dir, &o, obj, len);

	spy_ops(&ops, &spy);
	o.io = &ops;
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	spy.syncs = 0;
	assert_int_equal(
		kvs_store_put(s, obj, len, KVS_DURABILITY_DURABLE, NULL), 0);
	assert_true(spy.syncs > 0);
	/* and once synced, a second durable re-put costs no sync */
	spy.syncs = 0;
	assert_int_equal(
		kvs_store_put(s, obj, len, KVS_DURABILITY_DURABLE, NULL), 0);
	assert_int_equal(spy.syncs, 0);
	assert_int_equal(get_is(s, &key, obj, len), 0);
	kvs_store_close(s);
	spy_free(&spy);
	free(obj);
	test_rmdir(dir);
}

/* The path of segment @id of @dir. */
static void seg_file(const char *dir, uint64_t id, char *out, size_t n)
{
	snprintf(out, n, "%s/seg-%016llx.kvs", dir, (unsigned long long)id);
}

static uint64_t file_size(const char *path)
{
	struct stat st;

	assert_int_equal(stat(path, &st), 0);
	return (uint64_t)st.st_size;
}

/* Appends at the end of segment 0 a record of @obj whose header carries
 * @seq and valid checksums (as a forger, or a bug, would write it). */
static void append_record(const char *dir, const uint8_t *obj, size_t len,
			  uint64_t seq)
{
	struct rec_header h = { .seq = seq, .length = (uint32_t)len };
	uint64_t rec = record_size(len);
	uint8_t *image = calloc(1, rec);
	char path[4200];
	int fd;

	assert_non_null(image);
	assert_int_equal(kvs_store_key_of(obj, len, &h.key), 0);
	h.payload_sum = payload_checksum(obj, len);
	rec_header_encode(&h, image);
	memcpy(image + REC_HEADER_SIZE, obj, len);
	seg_file(dir, 0, path, sizeof(path));
	fd = open(path, O_WRONLY);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, image, rec, (off_t)file_size(path)),
			 (ssize_t)rec);
	close(fd);
	free(image);
}

/* A record claiming the last sequence number (valid checksums) must not
 * make the next sequence wrap to 0: an acknowledged overwrite of its key
 * would then lose to it at the next open. */
static void test_sequence_wrap(void **state)
{
	struct kvs_store_opts o;
	struct kvs_store *s;
	struct kvs_store_key key;
	size_t len0, len1, lenx;
	char *dir = test_mkdir();
	uint8_t *v0 = test_block_version(5, 0, 2, &len0, &key);
	uint8_t *v1 = test_block_version(5, 1, 2, &len1, NULL);
	uint8_t *other = test_block(77, 1, &lenx, NULL);

	test_opts(&o, 1 << 20, 16 << 20, 1 << 20);
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	assert_int_equal(
		kvs_store_put(s, other, lenx, KVS_DURABILITY_DURABLE, NULL), 0);
	kvs_store_close(s);
	append_record(dir, v0, len0, UINT64_MAX);
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	assert_int_equal(
		kvs_store_put(s, v1, len1, KVS_DURABILITY_DURABLE, NULL), 0);
	assert_int_equal(get_is(s, &key, v1, len1), 0);
	kvs_store_close(s);
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	assert_int_equal(get_is(s, &key, v1, len1), 0);
	kvs_store_close(s);
	free(v0);
	free(v1);
	free(other);
	test_rmdir(dir);
}

struct find_rec {
	struct kvs_store_key key;
	uint64_t segment, offset, length;
	int found;
};

static void find_cb(void *arg, const struct kvs_fsck_record *r)
{
	struct find_rec *f = arg;

	if (r->status == KVS_FSCK_GOOD && r->key_valid && !r->superseded &&
	    memcmp(&r->key, &f->key, sizeof(r->key)) == 0) {
		f->segment = r->segment;
		f->offset = r->offset;
		f->length = r->length;
		f->found++;
	}
}

/* The newest record of a key torn by a crash (its last page never
 * written) while an older record of the key is intact in an older
 * segment: recovery serves the older one rather than dropping the key. */
static void test_torn_newest_falls_back(void **state)
{
	struct kvs_store_opts o;
	struct kvs_store_stats st;
	struct kvs_fsck_report rep;
	struct kvs_store *s;
	struct find_rec f = { 0 };
	size_t len0, len1;
	char *dir = test_mkdir(), path[4200];
	uint8_t *v0 = test_block_version(9, 0, 16, &len0, &f.key);
	uint8_t *v1 = test_block_version(9, 1, 16, &len1, NULL);
	uint8_t zero[4096] = { 0 };
	int status, fd;
	pid_t pid;

	assert_true(record_size(len1) > 2 * 4096);
	test_opts(&o, 0, 4 << 20, 256 << 10);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		/* v0 in segment 0, filler up to the roll, v1 in segment 1;
		 * then the process dies */
		if (kvs_store_open(dir, &o, &s) ||
		    kvs_store_put(s, v0, len0, KVS_DURABILITY_DURABLE, NULL))
			_exit(1);
		for (uint64_t i = 0;; i++) {
			size_t len;
			uint8_t *obj = test_block(1000 + i, 1, &len, NULL);

			if (kvs_store_put(s, obj, len, KVS_DURABILITY_WRITTEN,
					  NULL))
				_exit(2);
			free(obj);
			kvs_store_stats_get(s, &st);
			if (st.segments == 2)
				break;
		}
		if (kvs_store_put(s, v1, len1, KVS_DURABILITY_DURABLE, NULL))
			_exit(3);
		_exit(0);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	assert_int_equal(kvs_store_fsck(dir, 0, NULL, find_cb, &f, &rep), 0);
	assert_int_equal(f.found, 1);
	assert_int_equal(f.segment, 1);
	/* a crash during v1's write: its last page never made it */
	seg_file(dir, 1, path, sizeof(path));
	fd = open(path, O_WRONLY);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, zero, sizeof(zero),
				(off_t)(f.offset + f.length - 4096)),
			 4096);
	close(fd);
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	kvs_store_stats_get(s, &st);
	assert_int_equal(st.torn_dropped, 1);
	assert_int_equal(st.corrupt_dropped, 0);
	assert_int_equal(get_is(s, &f.key, v0, len0), 0);
	kvs_store_close(s);
	/* the fall-back is what the next open finds too */
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	assert_int_equal(get_is(s, &f.key, v0, len0), 0);
	kvs_store_close(s);
	free(v0);
	free(v1);
	test_rmdir(dir);
}

/* A durability level outside the enum is a caller's bug: refused, not
 * quietly taken as WRITTEN. */
static void test_bad_durability(void **state)
{
	struct kvs_store_opts o;
	struct kvs_store *s;
	struct kvs_store_key key;
	struct kvs_store_ref *ref;
	char *dir = test_mkdir();
	size_t len;
	uint8_t *obj = test_block(3, 1, &len, &key);
	const uint8_t *objs[1] = { obj };
	int res[1];

	test_opts(&o, 1 << 20, 16 << 20, 1 << 20);
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	assert_int_equal(
		kvs_store_put(s, obj, len, (enum kvs_durability)3, NULL),
		-KVS_EPARAM);
	assert_int_equal(
		kvs_store_put(s, obj, len, (enum kvs_durability) - 1, NULL),
		-KVS_EPARAM);
	assert_int_equal(kvs_store_put_batch(s, objs, &len, 1,
					     (enum kvs_durability)7, res),
			 -KVS_EPARAM);
	assert_int_equal(kvs_store_get(s, &key, &ref), -KVS_ENOTFOUND);
	kvs_store_close(s);
	free(obj);
	test_rmdir(dir);
}

/* A store is not closed under its readers: close refuses while a
 * reference is held (the store stays usable), and closes once released. */
static void test_close_with_refs(void **state)
{
	struct kvs_store_opts o;
	struct kvs_store *s;
	struct kvs_store_key key;
	struct kvs_store_ref *ref, *ref2;
	char *dir = test_mkdir();
	size_t len;
	uint8_t *obj = test_block(21, 2, &len, &key);

	test_opts(&o, 1 << 20, 16 << 20, 1 << 20);
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	assert_int_equal(
		kvs_store_put(s, obj, len, KVS_DURABILITY_WRITTEN, NULL), 0);
	assert_int_equal(kvs_store_get(s, &key, &ref), 0);
	assert_int_equal(kvs_store_close(s), -EBUSY);
	/* still open: the ref reads, a second get works */
	assert_memory_equal(kvs_store_ref_data(ref), obj, len);
	assert_int_equal(kvs_store_get(s, &key, &ref2), 0);
	kvs_store_ref_release(ref);
	assert_int_equal(kvs_store_close(s), -EBUSY);
	kvs_store_ref_release(ref2);
	assert_int_equal(kvs_store_close(s), 0);
	free(obj);
	test_rmdir(dir);
}

/* kvs_store_sync makes every object WRITTEN so far DURABLE, those of an
 * earlier process that died before syncing included. */
static void test_sync_covers_dead_writer(void **state)
{
	struct kvs_store_io_ops ops;
	struct kvs_store_opts o;
	struct test_spy spy;
	struct kvs_store *s;
	char *dir = test_mkdir();
	size_t len;
	uint8_t *obj = test_block(12, 2, &len, NULL);

	test_opts(&o, 1 << 20, 16 << 20, 1 << 20);
	put_and_die(dir, &o, obj, len);
	spy_ops(&ops, &spy);
	o.io = &ops;
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	spy.syncs = 0;
	assert_int_equal(kvs_store_sync(s), 0);
	assert_true(spy.syncs > 0);
	/* synced once: the next sync has nothing to do */
	spy.syncs = 0;
	assert_int_equal(kvs_store_sync(s), 0);
	assert_int_equal(spy.syncs, 0);
	assert_int_equal(kvs_store_close(s), 0);
	spy_free(&spy);
	free(obj);
	test_rmdir(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_durable_reput_syncs),
		cmocka_unit_test(test_sync_covers_dead_writer),
		cmocka_unit_test(test_sequence_wrap),
		cmocka_unit_test(test_torn_newest_falls_back),
		cmocka_unit_test(test_bad_durability),
		cmocka_unit_test(test_close_with_refs),
	};

	kvs_log_set_level(KVS_LOG_ERR);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
