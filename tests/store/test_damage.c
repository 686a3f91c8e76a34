/*
 * test_damage.c - damage to the store's own files and to the directory it
 * lives in: a flipped bit in a segment header or in the superblock never
 * costs more than what it hit (never the whole store); a segment cut short
 * or deleted is reported, not silently lost; segment names are exactly the
 * ones the store writes; a directory that is not a store (also one of
 * files only named like segments) is not taken over, and files the store
 * did not write are never deleted; leftovers of a killed repair are
 * cleaned up; a failed record write leaves no hole; opening a cleanly
 * closed store does not read every record, nor does an open or fsck read
 * a preallocated head's unused rest; a record failing its check is named
 * the same way by the open, a get and fsck.
 */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cmocka.h>

#include "kvstash/log.h"
#include "store_internal.h"
#include "store_test.h"

enum { NB = 48 };

static struct test_blk blocks[NB];

static int setup(void **state)
{
	return test_blocks_make(blocks, NB, 3100, 8);
}

static int teardown(void **state)
{
	test_blocks_free(blocks, NB);
	return 0;
}

static int misses(struct kvs_store *s, int from, int to)
{
	int n = 0;

	for (int i = from; i < to; i++)
		n += test_check_get(s, &blocks[i]) != 0;
	return n;
}

/* @dir opens with @o and serves blocks [0, @n) (then closes). */
static void open_serves(const char *dir, const struct kvs_store_opts *o, int n)
{
	struct kvs_store *s;

	assert_int_equal(kvs_store_open(dir, o, &s), 0);
	assert_int_equal(misses(s, 0, n), 0);
	assert_int_equal(kvs_store_close(s), 0);
}

/* Small segments (256 KiB), so that NB blocks take several. */
static void small_opts(struct kvs_store_opts *o)
{
	test_opts(o, 0, 16 << 20, 256 << 10);
}

static void fill(const char *dir, int n)
{
	struct kvs_store_opts o;
	struct kvs_store *s;

	small_opts(&o);
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	for (int i = 0; i < n; i++)
		assert_int_equal(kvs_store_put(s, blocks[i].obj, blocks[i].len,
					       KVS_DURABILITY_DURABLE, NULL),
				 0);
	kvs_store_close(s);
}

static void path_of(const char *dir, const char *name, char *out, size_t n)
{
	snprintf(out, n, "%s/%s", dir, name);
}

static void seg_file(const char *dir, uint64_t id, char *out, size_t n)
{
	snprintf(out, n, "%s/seg-%016llx.kvs", dir, (unsigned long long)id);
}

static uint8_t *slurp(const char *path, size_t *len)
{
	struct stat st;
	uint8_t *buf;
	int fd = open(path, O_RDONLY);

	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &st), 0);
	buf = malloc(st.st_size ? (size_t)st.st_size : 1);
	assert_non_null(buf);
	assert_int_equal(pread(fd, buf, (size_t)st.st_size, 0), st.st_size);
	close(fd);
	*len = (size_t)st.st_size;
	return buf;
}

static void spill(const char *path, const uint8_t *buf, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, buf, len), (ssize_t)len);
	close(fd);
}

static bool exists(const char *path)
{
	return access(path, F_OK) == 0;
}

static int count_segments(const char *dir)
{
	struct kvs_fsck_report rep;

	assert_int_equal(kvs_store_fsck(dir, 0, NULL, NULL, NULL, &rep), 0);
	return (int)rep.segments;
}

/* Any single bit of a segment header flipped (magic, version, id,
 * checksum): the store still opens and serves every block, since records
 * describe themselves; fsck names the header and --repair rewrites it. */
static void test_segment_header_flip(void **state)
{
	static const size_t positions[] = {
		0, 7, 8, 9, 11, 12, 16, 23, 24, 31
	};
	struct kvs_fsck_report rep;
	struct kvs_store_opts o;
	struct kvs_store *s;
	char *dir = test_mkdir(), path[4200];
	uint8_t *pristine;
	size_t len;

	fill(dir, NB);
	assert_true(count_segments(dir) >= 2);
	seg_file(dir, 0, path, sizeof(path));
	pristine = slurp(path, &len);
	small_opts(&o);
	for (size_t p = 0; p < sizeof(positions) / sizeof(positions[0]); p++) {
		pristine[positions[p]] ^= 0x01;
		spill(path, pristine, len);
		pristine[positions[p]] ^= 0x01;
		assert_int_equal(kvs_store_open(dir, &o, &s), 0);
		assert_int_equal(misses(s, 0, NB), 0);
		kvs_store_close(s);
		assert_int_equal(kvs_store_fsck(dir, 0, NULL, NULL, NULL, &rep),
				 0);
		assert_int_equal(rep.bad_segments, 1);
		assert_int_equal(rep.good, NB);
	}
	assert_int_equal(
		kvs_store_fsck(dir, KVS_FSCK_REPAIR, NULL, NULL, NULL, &rep),
		0);
	assert_int_equal(kvs_store_fsck(dir, 0, NULL, NULL, NULL, &rep), 0);
	assert_int_equal(rep.bad_segments, 0);
	assert_int_equal(rep.good, NB);
	free(pristine);
	test_rmdir(dir);
}

/* Any bit of the superblock flipped: the store opens from its second
 * copy; both copies gone: open says so, fsck --repair rebuilds it. */
static void test_superblock_flip(void **state)
{
	struct kvs_fsck_report rep;
	struct kvs_store_opts o;
	struct kvs_store *s;
	char *dir = test_mkdir(), path[4200];
	uint8_t *pristine, *zeros;
	size_t len;

	fill(dir, 8);
	path_of(dir, "KVSTASH", path, sizeof(path));
	pristine = slurp(path, &len);
	small_opts(&o);
	for (size_t bit = 0; bit < 64 * 8; bit += 5) {
		pristine[bit / 8] ^= (uint8_t)(1u << bit % 8);
		spill(path, pristine, len);
		pristine[bit / 8] ^= (uint8_t)(1u << bit % 8);
		open_serves(dir, &o, 8);
	}
	/* both copies lost */
	zeros = calloc(1, len);
	spill(path, zeros, len);
	assert_true(kvs_store_open(dir, &o, &s) < 0);
	assert_true(kvs_store_fsck(dir, 0, NULL, NULL, NULL, &rep) < 0);
	assert_int_equal(
		kvs_store_fsck(dir, KVS_FSCK_REPAIR, NULL, NULL, NULL, &rep),
		0);
	open_serves(dir, &o, 8);
	/* and the file deleted: open refuses to start a new store over the
	 * segments, fsck --repair rebuilds it */
	assert_int_equal(unlink(path), 0);
	assert_true(kvs_store_open(dir, &o, &s) < 0);
	assert_false(exists(path));
	assert_int_equal(
		kvs_store_fsck(dir, KVS_FSCK_REPAIR, NULL, NULL, NULL, &rep),
		0);
	open_serves(dir, &o, 8);
	free(zeros);
	free(pristine);
	test_rmdir(dir);
}

/* Only names the store writes are segments: seg-, 16 lower-case hex
 * digits, .kvs.  Look-alikes (that sscanf("%16llx") would take for the
 * same id) are neither opened nor deleted. */
static void test_segment_names(void **state)
{
	static const char *const lookalikes[] = {
		"seg-000000000000000A.kvs",  "seg-0x00000000000000.kvs",
		"seg-+000000000000000.kvs",  "seg- 000000000000000.kvs",
		"seg-00000000000000000.kvs", "seg-0000000000000000.kvsx",
	};
	struct kvs_store_stats st;
	struct kvs_store_opts o;
	struct kvs_store *s;
	char *dir = test_mkdir(), path[4200], copy[4200];
	uint8_t *seg;
	size_t len;

	test_opts(&o, 0, 16 << 20, 1 << 20);
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	for (int i = 0; i < 8; i++)
		assert_int_equal(kvs_store_put(s, blocks[i].obj, blocks[i].len,
					       KVS_DURABILITY_DURABLE, NULL),
				 0);
	kvs_store_close(s);
	seg_file(dir, 0, path, sizeof(path));
	seg = slurp(path, &len);
	for (size_t i = 0; i < sizeof(lookalikes) / sizeof(lookalikes[0]);
	     i++) {
		path_of(dir, lookalikes[i], copy, sizeof(copy));
		spill(copy, seg, len);
	}
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	kvs_store_stats_get(s, &st);
	assert_int_equal(st.segments, 1);
	assert_int_equal(st.nvme.blocks, 8);
	assert_int_equal(misses(s, 0, 8), 0);
	assert_int_equal(kvs_store_put(s, blocks[8].obj, blocks[8].len,
				       KVS_DURABILITY_DURABLE, NULL),
			 0);
	kvs_store_close(s);
	assert_int_equal(count_segments(dir), 1);
	for (size_t i = 0; i < sizeof(lookalikes) / sizeof(lookalikes[0]);
	     i++) {
		path_of(dir, lookalikes[i], copy, sizeof(copy));
		assert_true(exists(copy));
	}
	free(seg);
	test_rmdir(dir);
}

static int dir_entries(const char *dir)
{
	struct dirent *de;
	DIR *d = opendir(dir);
	int n = 0;

	assert_non_null(d);
	while ((de = readdir(d)))
		n += de->d_name[0] != '.';
	closedir(d);
	return n;
}

/* A directory that holds other files is not made a store; opening (not
 * creating) a directory that is not a store leaves nothing behind; an
 * empty one, or a fresh file system's root (lost+found), becomes one. */
static void test_not_a_store(void **state)
{
	struct kvs_store_opts o;
	struct kvs_store *s;
	char *dir = test_mkdir(), path[4200];

	test_opts(&o, 0, 16 << 20, 1 << 20);
	path_of(dir, "notes.txt", path, sizeof(path));
	spill(path, (const uint8_t *)"hello\n", 6);
	assert_true(kvs_store_open(dir, &o, &s) < 0);
	assert_int_equal(dir_entries(dir), 1);
	o.create = false;
	assert_int_equal(kvs_store_open(dir, &o, &s), -ENOENT);
	assert_int_equal(dir_entries(dir), 1);
	assert_int_equal(unlink(path), 0);
	assert_int_equal(kvs_store_open(dir, &o, &s), -ENOENT);
	assert_int_equal(dir_entries(dir), 0);
	/* the root of a fresh file system */
	path_of(dir, "lost+found", path, sizeof(path));
	assert_int_equal(mkdir(path, 0700), 0);
	o.create = true;
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	assert_int_equal(kvs_store_put(s, blocks[0].obj, blocks[0].len,
				       KVS_DURABILITY_DURABLE, NULL),
			 0);
	kvs_store_close(s);
	assert_int_equal(count_segments(dir), 1);
	test_rmdir(dir);
}

/* Files named like segments that the store cannot parse, in a store's
 * directory, are left alone (reported, never deleted). */
static void test_foreign_files_kept(void **state)
{
	struct kvs_store_opts o;
	struct kvs_store *s;
	uint8_t junk[100], zeros[8192] = { 0 };
	char *dir = test_mkdir(), p5[4200], p6[4200];
	uint64_t rng = 99;
	size_t len;
	uint8_t *back;

	for (size_t i = 0; i < sizeof(junk); i++)
		junk[i] = (uint8_t)test_rand(&rng);
	fill(dir, 4);
	seg_file(dir, 5, p5, sizeof(p5));
	seg_file(dir, 6, p6, sizeof(p6));
	spill(p5, junk, sizeof(junk));
	spill(p6, zeros, sizeof(zeros));
	small_opts(&o);
	for (int round = 0; round < 2; round++) {
		assert_int_equal(kvs_store_open(dir, &o, &s), 0);
		assert_int_equal(misses(s, 0, 4), 0);
		assert_int_equal(kvs_store_put(s, blocks[4 + round].obj,
					       blocks[4 + round].len,
					       KVS_DURABILITY_DURABLE, NULL),
				 0);
		kvs_store_close(s);
	}
	back = slurp(p5, &len);
	assert_int_equal(len, sizeof(junk));
	assert_memory_equal(back, junk, len);
	free(back);
	back = slurp(p6, &len);
	assert_int_equal(len, sizeof(zeros));
	free(back);
	test_rmdir(dir);
}

/* A directory holding only files named like segments whose contents are
 * not (no valid header, no record) is not a store: no open takes it, with
 * or without create, and fsck --repair writes nothing there.  One file
 * with a store's records, its header damaged, makes it a store to rebuild
 * (the other files left alone). */
static void test_lookalike_segments_not_a_store(void **state)
{
	struct kvs_fsck_report rep;
	struct kvs_store_opts o;
	struct kvs_store *s;
	uint8_t junk[3 * 4096];
	char *dir = test_mkdir(), *src = test_mkdir(), p0[4200], p1[4200],
	     p2[4200];
	uint64_t rng = 7;
	uint8_t *seg, *back;
	size_t len;

	for (size_t i = 0; i < sizeof(junk); i++)
		junk[i] = (uint8_t)test_rand(&rng);
	seg_file(dir, 0, p0, sizeof(p0));
	seg_file(dir, 1, p1, sizeof(p1));
	spill(p0, junk, sizeof(junk));
	spill(p1, junk, 100);
	small_opts(&o);
	assert_int_equal(
		kvs_store_fsck(dir, KVS_FSCK_REPAIR, NULL, NULL, NULL, &rep),
		-ENOENT);
	assert_int_equal(kvs_store_fsck(dir, 0, NULL, NULL, NULL, &rep),
			 -ENOENT);
	assert_int_equal(kvs_store_open(dir, &o, &s), -ENOTEMPTY);
	o.read_only = true;
	assert_int_equal(kvs_store_open(dir, &o, &s), -ENOENT);
	o.read_only = false;
	assert_int_equal(dir_entries(dir), 2);
	back = slurp(p0, &len);
	assert_int_equal(len, sizeof(junk));
	assert_memory_equal(back, junk, len);
	free(back);
	/* a store's segment, its header damaged, among them */
	fill(src, 4);
	seg_file(src, 0, p2, sizeof(p2));
	seg = slurp(p2, &len);
	seg[0] ^= 0x01;
	seg_file(dir, 2, p2, sizeof(p2));
	spill(p2, seg, len);
	assert_true(kvs_store_open(dir, &o, &s) < 0);
	assert_int_equal(
		kvs_store_fsck(dir, KVS_FSCK_REPAIR, NULL, NULL, NULL, &rep),
		0);
	open_serves(dir, &o, 4);
	back = slurp(p0, &len);
	assert_memory_equal(back, junk, len);
	free(back);
	free(seg);
	test_rmdir(src);
	test_rmdir(dir);
}

/* What a killed fsck --repair leaves (seg-*.kvs.tmp) is removed at the
 * next open; a .tmp the store did not write is not. */
static void test_tmp_cleanup(void **state)
{
	struct kvs_store_opts o;
	struct kvs_store *s;
	uint8_t header[SEG_HEADER_SIZE], junk[64];
	char *dir = test_mkdir(), ours[4200], empty[4200], other[4200];

	memset(junk, 0x5a, sizeof(junk));
	fill(dir, 4);
	seg_header_encode(0, header);
	path_of(dir, "seg-0000000000000000.kvs.tmp", ours, sizeof(ours));
	path_of(dir, "seg-0000000000000001.kvs.tmp", empty, sizeof(empty));
	path_of(dir, "seg-0000000000000002.kvs.tmp", other, sizeof(other));
	spill(ours, header, sizeof(header));
	spill(empty, header, 0);
	spill(other, junk, sizeof(junk));
	small_opts(&o);
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	assert_int_equal(misses(s, 0, 4), 0);
	kvs_store_close(s);
	assert_false(exists(ours));
	assert_false(exists(empty));
	assert_true(exists(other));
	test_rmdir(dir);
}

/* A new store directory is made durable in its parent. */
static void test_parent_synced(void **state)
{
	struct kvs_store_io_ops ops;
	struct kvs_store_opts o;
	struct test_spy spy;
	struct kvs_store *s;
	char *dir = test_mkdir(), sub[4200];

	spy_ops(&ops, &spy);
	test_opts(&o, 0, 16 << 20, 1 << 20);
	o.io = &ops;
	path_of(dir, "store", sub, sizeof(sub));
	assert_int_equal(kvs_store_open(sub, &o, &s), 0);
	kvs_store_close(s);
	assert_true(spy_dir_synced(&spy, dir));
	spy_free(&spy);
	test_rmdir(dir);
}

/* Writes fail (EIO) during a put that rolls the head and carries records
 * forward: the put fails, the store goes on, and no failed write leaves a
 * hole behind (fsck finds no damage, no open counts any). */
static void test_failed_writes_leave_no_hole(void **state)
{
	enum { N = 200 };
	struct test_faults f = { .fault = FAULT_EIO, .countdown = -1 };
	struct kvs_store_io_ops ops;
	struct kvs_store_opts o;
	struct kvs_store_stats st;
	struct kvs_fsck_report rep;
	struct kvs_store *s;
	struct test_tally t = { 0 };
	struct test_blk *b = calloc(N, sizeof(*b));
	char *dir = test_mkdir();
	int failed = 0;

	assert_int_equal(test_blocks_make(b, N, 7100, 8), 0);
	fault_ops(&ops, &f);
	test_opts(&o, 0, 768 << 10, 256 << 10);
	o.io = &ops;
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	for (int i = 0; i < N; i++) {
		struct kvs_store_ref *ref;
		uint64_t rec = record_size(b[i].len);

		/* about to roll with three segments: the reclaim carries
		 * the records read since written, and every write fails */
		kvs_store_stats_get(s, &st);
		if (st.segments == 3 && !nvme_head_fits(s, rec) &&
		    failed == 0) {
			f.countdown = 0;
			failed += kvs_store_put(s, b[i].obj, b[i].len,
						KVS_DURABILITY_WRITTEN,
						NULL) != 0;
			f.countdown = -1;
			continue;
		}
		assert_int_equal(kvs_store_put(s, b[i].obj, b[i].len,
					       KVS_DURABILITY_WRITTEN, NULL),
				 0);
		/* everything is read once: worth carrying */
		assert_int_equal(kvs_store_get(s, &b[i].key, &ref), 0);
		kvs_store_ref_release(ref);
	}
	assert_int_equal(failed, 1);
	assert_true(f.injected >= 2);
	kvs_store_close(s);
	o.io = NULL;
	assert_int_equal(kvs_store_fsck(dir, 0, NULL, test_tally_cb, &t, &rep),
			 0);
	assert_int_equal(t.corrupt + t.torn, 0);
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	kvs_store_stats_get(s, &st);
	assert_int_equal(st.corrupt_dropped + st.torn_dropped, 0);
	kvs_store_close(s);
	test_blocks_free(b, N);
	free(b);
	test_rmdir(dir);
}

/* Opening a cleanly closed store reads record headers, not every record
 * of the newest segment. */
static void test_open_reads_little(void **state)
{
	struct kvs_store_io_ops ops;
	struct kvs_store_opts o;
	struct kvs_store_stats st;
	struct test_spy spy;
	struct kvs_store *s;
	char *dir = test_mkdir();

	test_opts(&o, 0, 64 << 20, 8 << 20);
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	for (uint64_t i = 0; i < 400; i++) {
		size_t len;
		uint8_t *obj = test_block(50000 + i, 16, &len, NULL);

		assert_int_equal(kvs_store_put(s, obj, len,
					       KVS_DURABILITY_WRITTEN, NULL),
				 0);
		free(obj);
	}
	kvs_store_close(s);
	spy_ops(&ops, &spy);
	o.io = &ops;
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	kvs_store_stats_get(s, &st);
	assert_int_equal(st.nvme.blocks, 400);
	assert_int_equal(st.segments, 1);
	print_message("open read %llu of %llu bytes\n",
		      (unsigned long long)spy.read_bytes,
		      (unsigned long long)st.nvme_file_bytes);
	assert_true(spy.read_bytes < st.nvme_file_bytes / 2);
	kvs_store_close(s);
	spy_free(&spy);
	test_rmdir(dir);
}

/* Offset of record @nth (0-based) of segment 0, from fsck. */
struct nth_rec {
	int want, seen;
	uint64_t offset, length;
};

static void nth_cb(void *arg, const struct kvs_fsck_record *r)
{
	struct nth_rec *n = arg;

	if (r->segment == 0 && r->status == KVS_FSCK_GOOD &&
	    n->seen++ == n->want) {
		n->offset = r->offset;
		n->length = r->length;
	}
}

static void flip_in_record(const char *dir, int nth)
{
	struct nth_rec n = { .want = nth };
	struct kvs_fsck_report rep;
	char path[4200];
	uint8_t b;
	int fd;

	assert_int_equal(kvs_store_fsck(dir, 0, NULL, nth_cb, &n, &rep), 0);
	assert_true(n.length > 0);
	seg_file(dir, 0, path, sizeof(path));
	fd = open(path, O_RDWR);
	assert_true(fd >= 0);
	/* a byte of the object, past the record header */
	assert_int_equal(pread(fd, &b, 1, (off_t)(n.offset + 200)), 1);
	b ^= 0x10;
	assert_int_equal(pwrite(fd, &b, 1, (off_t)(n.offset + 200)), 1);
	close(fd);
}

/* A child process puts blocks [0, 8) into @dir durably, then closes the
 * store if @closes, else dies holding it (its head as it was). */
static void child_puts(const char *dir, const struct kvs_store_opts *o,
		       bool closes)
{
	struct kvs_store *s;
	int status;
	pid_t pid = fork();

	assert_true(pid >= 0);
	if (pid == 0) {
		if (kvs_store_open(dir, o, &s))
			_exit(1);
		for (int i = 0; i < 8; i++)
			if (kvs_store_put(s, blocks[i].obj, blocks[i].len,
					  KVS_DURABILITY_DURABLE, NULL))
				_exit(2);
		if (closes && kvs_store_close(s))
			_exit(3);
		_exit(0);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* Garbage (not a record) right after record @nth of segment 0: a write
 * that a crash tore, past the log end of a head closed cleanly. */
static void garbage_after(const char *dir, int nth)
{
	struct nth_rec n = { .want = nth };
	struct kvs_fsck_report rep;
	uint8_t junk[4096];
	char path[4200];
	int fd;

	memset(junk, 0x5a, sizeof(junk));
	assert_int_equal(kvs_store_fsck(dir, 0, NULL, nth_cb, &n, &rep), 0);
	assert_true(n.length > 0);
	seg_file(dir, 0, path, sizeof(path));
	fd = open(path, O_RDWR);
	assert_true(fd >= 0);
	assert_int_equal(
		pwrite(fd, junk, sizeof(junk), (off_t)(n.offset + n.length)),
		(ssize_t)sizeof(junk));
	close(fd);
}

enum head_end {
	HEAD_CLEAN, /* closed cleanly */
	HEAD_CRASHED, /* its writer killed */
	HEAD_GROWN, /* closed cleanly, then a later writer's write torn */
};

/* A record failing its checksum in the newest segment, in its middle or
 * as its last record, is named the same way by the open that finds it
 * (after a crash, when the open checks the newest segment), by a get and
 * by fsck: corrupt, except the last record of a head whose writer was
 * killed, which is torn (a write the crash cut short: absent).  A head
 * closed cleanly holds nothing torn up to the end it was closed at, also
 * when a later writer tore a write past it. */
static void test_corrupt_named_alike(void **state)
{
	static const int nths[] = { 3, 7 };
	struct kvs_store_opts o;
	struct kvs_store_stats st;
	struct kvs_fsck_report rep;
	struct kvs_store *s;
	char *dir;

	test_opts(&o, 0, 16 << 20, 1 << 20);
	for (int end = HEAD_CLEAN; end <= HEAD_GROWN; end++) {
		for (size_t k = 0; k < sizeof(nths) / sizeof(nths[0]); k++) {
			int nth = nths[k];
			bool torn = end == HEAD_CRASHED && nth == 7;
			int extra = end == HEAD_GROWN; /* the garbage page */
			struct test_tally t = { 0 };

			dir = test_mkdir();
			child_puts(dir, &o, end != HEAD_CRASHED);
			if (end == HEAD_GROWN)
				garbage_after(dir, 7);
			flip_in_record(dir, nth);
			/* fsck first: a writable open cuts a torn tail */
			assert_int_equal(kvs_store_fsck(dir, 0, NULL,
							test_tally_cb, &t,
							&rep),
					 0);
			assert_int_equal(t.corrupt, !torn);
			assert_int_equal(t.torn, torn + extra);
			assert_int_equal(kvs_store_open(dir, &o, &s), 0);
			assert_int_equal(test_check_get(s, &blocks[nth]),
					 torn ? -KVS_ENOTFOUND : -KVS_ECORRUPT);
			assert_int_equal(misses(s, 0, 8), 1);
			kvs_store_stats_get(s, &st);
			assert_int_equal(st.corrupt_dropped, !torn);
			assert_int_equal(st.torn_dropped, torn + extra);
			kvs_store_close(s);
			test_rmdir(dir);
		}
	}
}

struct seg_records {
	uint64_t seg;
	uint64_t last_off; /* offset of its last good record */
	int n;
};

static void seg_records_cb(void *arg, const struct kvs_fsck_record *r)
{
	struct seg_records *c = arg;

	if (r->segment == c->seg && r->status == KVS_FSCK_GOOD) {
		c->last_off = r->offset;
		c->n++;
	}
}

struct verdict_count {
	int missing, bad;
};

static void verdict_cb(void *arg, const struct kvs_fsck_record *r)
{
	struct verdict_count *v = arg;

	v->missing += r->status == KVS_FSCK_MISSING;
	v->bad += r->status == KVS_FSCK_CORRUPT || r->status == KVS_FSCK_TORN;
}

/* After damage to segment 0: the open reports it, fsck names it missing,
 * every block outside it is served; --repair acknowledges the loss, and
 * from then on the store is clean. */
static void expect_loss(const char *dir, int lost_blocks)
{
	struct kvs_store_opts o;
	struct kvs_store_stats st;
	struct kvs_fsck_report rep;
	struct kvs_store *s;
	struct verdict_count v = { 0 };

	small_opts(&o);
	o.read_only = true;
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	kvs_store_stats_get(s, &st);
	assert_int_equal(st.lost_segments, 1);
	assert_int_equal(misses(s, 0, NB), lost_blocks);
	assert_int_equal(kvs_store_close(s), 0);
	assert_int_equal(kvs_store_fsck(dir, 0, NULL, verdict_cb, &v, &rep), 0);
	assert_int_equal(v.missing, 1);
	assert_int_equal(rep.missing, 1);
	assert_int_equal(
		kvs_store_fsck(dir, KVS_FSCK_REPAIR, NULL, NULL, NULL, &rep),
		0);
	assert_int_equal(kvs_store_fsck(dir, 0, NULL, NULL, NULL, &rep), 0);
	assert_int_equal(rep.missing + rep.corrupt + rep.torn, 0);
	o.read_only = false;
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	kvs_store_stats_get(s, &st);
	assert_int_equal(st.lost_segments, 0);
	assert_int_equal(misses(s, 0, NB), lost_blocks);
	assert_int_equal(kvs_store_close(s), 0);
}

/* An older (sealed) segment cut short exactly at a record boundary, and
 * one deleted: neither loss is silent. */
static void test_lost_segments_reported(void **state)
{
	struct seg_records c = { .seg = 0 };
	struct kvs_fsck_report rep;
	char *dir = test_mkdir(), path[4200];

	fill(dir, NB);
	assert_true(count_segments(dir) >= 2);
	assert_int_equal(kvs_store_fsck(dir, 0, NULL, seg_records_cb, &c, &rep),
			 0);
	assert_true(c.n >= 2);
	/* its last record and its footer gone */
	seg_file(dir, 0, path, sizeof(path));
	assert_int_equal(truncate(path, (off_t)c.last_off), 0);
	expect_loss(dir, 1);
	test_rmdir(dir);

	dir = test_mkdir();
	fill(dir, NB);
	seg_file(dir, 0, path, sizeof(path));
	assert_int_equal(unlink(path), 0);
	expect_loss(dir, c.n);
	test_rmdir(dir);
}

/* A read-only open of @dir (@o, its ops spied on by @spy) reads less than
 * @bound bytes, and serves blocks [0, 8). */
static void open_reads_under(const char *dir, struct kvs_store_opts *o,
			     struct test_spy *spy, uint64_t bound)
{
	struct kvs_store_stats st;
	struct kvs_store *s;

	spy->read_bytes = 0;
	o->read_only = true;
	assert_int_equal(kvs_store_open(dir, o, &s), 0);
	print_message("open read %llu bytes\n",
		      (unsigned long long)spy->read_bytes);
	assert_true(spy->read_bytes < bound);
	kvs_store_stats_get(s, &st);
	assert_int_equal(st.nvme.blocks, 8);
	assert_int_equal(misses(s, 0, 8), 0);
	assert_int_equal(kvs_store_close(s), 0);
}

/* A process dies with a head of 16 GiB preallocated as a sparse file: the
 * next open checks the head's records without reading its holes (the
 * scan of a large store is fast, not 16 GiB of zeros read in silence). */
static void test_sparse_head_not_read(void **state)
{
	struct kvs_store_io_ops ops;
	struct kvs_store_opts o;
	struct test_spy spy;
	char *dir = test_mkdir();

	spy_ops(&ops, &spy);
	ops.fallocate = test_no_fallocate;
	test_opts(&o, 0, 64ull << 30, 16ull << 30);
	o.io = &ops;
	child_puts(dir, &o, false); /* dies: the head stays 16 GiB */
	open_reads_under(dir, &o, &spy, 16u << 20);
	spy_free(&spy);
	test_rmdir(dir);
}

/* A process dies with a head of 256 MiB preallocated (fallocate: extents
 * allocated, never written): fsck walks its records without reading the
 * rest, and leaves nothing in the page cache that makes the next open
 * read it either. */
static void test_fallocated_head_not_read(void **state)
{
	struct kvs_store_io_ops ops;
	struct kvs_store_opts o;
	struct kvs_fsck_report rep;
	struct test_spy spy;
	struct test_tally t = { 0 };
	char *dir = test_mkdir();

	test_opts(&o, 0, 1ull << 30, 256ull << 20);
	child_puts(dir, &o, false); /* dies: the head stays 256 MiB */
	spy_ops(&ops, &spy);
	o.io = &ops;
	assert_int_equal(kvs_store_fsck(dir, 0, &o, test_tally_cb, &t, &rep),
			 0);
	print_message("fsck read %llu bytes in %llu reads\n",
		      (unsigned long long)spy.read_bytes,
		      (unsigned long long)spy.reads);
	assert_int_equal(t.good, 8);
	assert_int_equal(t.corrupt + t.torn, 0);
	assert_true(spy.read_bytes < (1u << 20));
	open_reads_under(dir, &o, &spy, 1u << 20);
	spy_free(&spy);
	test_rmdir(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_segment_header_flip),
		cmocka_unit_test(test_superblock_flip),
		cmocka_unit_test(test_segment_names),
		cmocka_unit_test(test_not_a_store),
		cmocka_unit_test(test_foreign_files_kept),
		cmocka_unit_test(test_lookalike_segments_not_a_store),
		cmocka_unit_test(test_tmp_cleanup),
		cmocka_unit_test(test_parent_synced),
		cmocka_unit_test(test_failed_writes_leave_no_hole),
		cmocka_unit_test(test_open_reads_little),
		cmocka_unit_test(test_corrupt_named_alike),
		cmocka_unit_test(test_lost_segments_reported),
		cmocka_unit_test(test_sparse_head_not_read),
		cmocka_unit_test(test_fallocated_head_not_read),
	};

	kvs_log_set_level(KVS_LOG_ERR);
	return cmocka_run_group_tests(tests, setup, teardown);
}
