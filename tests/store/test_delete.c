/*
 * test_delete.c - deletes are persistent (tombstone records, store
 * format 3): a deleted block stays deleted across a reopen, a kill -9 of
 * the deleting process at every durability, and a power cut (the vcache.h
 * model) after a durable delete; a re-put after a delete wins; a delete
 * of what was never on disk writes nothing; segment cleaning keeps a
 * tombstone while an older record of its key remains and drops it after;
 * fsck counts tombstones and a repair keeps them; a format-2 store is
 * read as it is and upgraded by a writable open.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/wait.h>

#include <cmocka.h>
#include <xxhash.h>

#include "kvstash/log.h"
#include "store_internal.h"
#include "store_test.h"
#include "vcache.h"

#define NB 12
#define SEG (256ull << 10)

static struct test_blk blocks[NB];

static int setup(void **state)
{
	vcache_init();
	return test_blocks_make(blocks, NB, 8100, 4);
}

static int teardown(void **state)
{
	test_blocks_free(blocks, NB);
	return 0;
}

static void opts(struct kvs_store_opts *o)
{
	test_opts(o, 1 << 20, 8 * SEG, SEG);
}

/* A store in a fresh directory holding blocks[0..n) put DURABLE. */
static char *store_with(size_t n)
{
	struct kvs_store_opts o;
	struct kvs_store *s;
	char *dir = test_mkdir();

	opts(&o);
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	for (size_t i = 0; i < n; i++)
		assert_int_equal(kvs_store_put(s, blocks[i].obj, blocks[i].len,
					       KVS_DURABILITY_DURABLE, NULL),
				 0);
	assert_int_equal(kvs_store_close(s), 0);
	return dir;
}

/* Opens @dir, checks blocks[0..n): those of @gone (a bit each) miss, the
 * others read back; returns the tombstones the open keeps in its index
 * (those hiding an older record of their key). */
static uint64_t check_reopen(const char *dir, size_t n, unsigned gone)
{
	struct kvs_store_opts o;
	struct kvs_store_stats st;
	struct kvs_store *s;

	opts(&o);
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	for (size_t i = 0; i < n; i++) {
		int err = test_get_cmp(s, &blocks[i].key, blocks[i].obj,
				       blocks[i].len);

		if (gone & (1u << i))
			assert_int_equal(err, -KVS_ENOTFOUND);
		else
			assert_int_equal(err, 0);
	}
	kvs_store_stats_get(s, &st);
	assert_int_equal(kvs_store_close(s), 0);
	return st.tombstones;
}

/* Tombstone records in the segments of @dir (fsck). */
static uint64_t disk_tombstones(const char *dir)
{
	struct kvs_fsck_report rep;

	assert_int_equal(kvs_store_fsck(dir, 0, NULL, NULL, NULL, &rep), 0);
	assert_int_equal(rep.corrupt + rep.torn + rep.missing, 0);
	return rep.tombstones;
}

static void test_delete_reopen(void **state)
{
	struct kvs_store_opts o;
	struct kvs_store_stats st;
	struct kvs_store *s;
	struct kvs_store_key keys[3] = { blocks[1].key, blocks[3].key,
					 blocks[NB - 1].key };
	int res[3];
	char *dir = store_with(6);

	opts(&o);
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	/* two present, one never put */
	assert_int_equal(
		kvs_store_delete_batch(s, keys, 3, KVS_DURABILITY_WRITTEN, res),
		0);
	assert_int_equal(res[0], 0);
	assert_int_equal(res[1], 0);
	assert_int_equal(res[2], -KVS_ENOTFOUND);
	assert_int_equal(kvs_store_delete(s, &blocks[1].key), -KVS_ENOTFOUND);
	assert_int_equal(
		test_get_cmp(s, &blocks[1].key, blocks[1].obj, blocks[1].len),
		-KVS_ENOTFOUND);
	kvs_store_stats_get(s, &st);
	assert_int_equal(st.tombstones, 2);
	assert_int_equal(st.nvme.blocks, 4);
	/* a level outside the enum is refused, whole */
	assert_int_equal(
		kvs_store_delete_batch(s, keys, 1, (enum kvs_durability)3, res),
		-KVS_EPARAM);
	assert_int_equal(res[0], -KVS_EPARAM);
	assert_int_equal(kvs_store_close(s), 0);
	/* on disk, and the records they delete in the same segment: the
	 * open keeps none in its index (they hide nothing older) */
	assert_int_equal(disk_tombstones(dir), 2);
	assert_int_equal(check_reopen(dir, 6, 0x0a), 0);
	/* read-only: the deletion holds, and deletes are refused */
	o.read_only = true;
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	assert_int_equal(
		test_get_cmp(s, &blocks[3].key, blocks[3].obj, blocks[3].len),
		-KVS_ENOTFOUND);
	assert_int_equal(kvs_store_delete(s, &blocks[0].key), -EROFS);
	assert_int_equal(kvs_store_close(s), 0);
	/* put again after the delete: the newest wins, across a reopen */
	o.read_only = false;
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	assert_int_equal(kvs_store_put(s, blocks[3].obj, blocks[3].len,
				       KVS_DURABILITY_WRITTEN, NULL),
			 0);
	kvs_store_stats_get(s, &st);
	assert_int_equal(st.tombstones, 0);
	assert_int_equal(kvs_store_close(s), 0);
	check_reopen(dir, 6, 0x02);
	assert_int_equal(disk_tombstones(dir), 2);
	test_rmdir(dir);
}

/* A delete while a reader holds the block: the reader's bytes stay, the
 * key is gone for everyone else, and stays gone. */
static void test_delete_pinned(void **state)
{
	struct kvs_store_opts o;
	struct kvs_store *s;
	struct kvs_store_ref *ref;
	char *dir = store_with(3);

	opts(&o);
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	assert_int_equal(kvs_store_get(s, &blocks[2].key, &ref), 0);
	assert_int_equal(kvs_store_delete(s, &blocks[2].key), 0);
	assert_int_equal(
		test_get_cmp(s, &blocks[2].key, blocks[2].obj, blocks[2].len),
		-KVS_ENOTFOUND);
	assert_memory_equal(kvs_store_ref_data(ref), blocks[2].obj,
			    blocks[2].len);
	assert_int_equal(kvs_store_close(s), -EBUSY);
	kvs_store_ref_release(ref);
	assert_int_equal(kvs_store_close(s), 0);
	check_reopen(dir, 3, 0x4);
	assert_int_equal(disk_tombstones(dir), 1);
	test_rmdir(dir);
}

/* Only in DRAM (never written): nothing to log, nothing comes back. */
static void test_delete_memory_only(void **state)
{
	struct kvs_store_opts o;
	struct kvs_store_stats st;
	struct kvs_store *s;
	char *dir = test_mkdir();

	opts(&o);
	o.write_through = false;
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	assert_int_equal(kvs_store_put(s, blocks[0].obj, blocks[0].len,
				       KVS_DURABILITY_MEMORY, NULL),
			 0);
	assert_int_equal(kvs_store_delete(s, &blocks[0].key), 0);
	kvs_store_stats_get(s, &st);
	assert_int_equal(st.tombstones, 0);
	assert_int_equal(st.dram.blocks, 0);
	assert_int_equal(kvs_store_close(s), 0);
	check_reopen(dir, 1, 0x1);
	assert_int_equal(disk_tombstones(dir), 0);
	test_rmdir(dir);
}

/* Each level: a process deletes block 0 and dies without closing; the
 * next one does not find it. */
static void test_delete_killed(void **state)
{
	for (int dur = KVS_DURABILITY_MEMORY; dur <= KVS_DURABILITY_DURABLE;
	     dur++) {
		char *dir = store_with(4);
		struct kvs_store_opts o;
		int status;
		pid_t pid;

		opts(&o);
		pid = fork();
		assert_true(pid >= 0);
		if (pid == 0) {
			struct kvs_store *s;
			int res;

			CHILD_CHECK(kvs_store_open(dir, &o, &s) == 0);
			CHILD_CHECK(
				kvs_store_delete_batch(s, &blocks[0].key, 1,
						       (enum kvs_durability)dur,
						       &res) == 0 &&
				res == 0);
			_exit(0); /* killed: no close */
		}
		assert_int_equal(waitpid(pid, &status, 0), pid);
		assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
		check_reopen(dir, 4, 0x1);
		assert_int_equal(disk_tombstones(dir), 1);
		test_rmdir(dir);
	}
}

static void model_died(const char *msg)
{
	fprintf(stderr, "%s\n", msg);
	_exit(1);
}

static const struct vcache_hooks model_hooks = { .die = model_died };

/* Each level, several cuts: a process deletes block 0 and the power goes
 * right after the acknowledgement.  DURABLE: block 0 is gone after the
 * cut; below: it is gone or there as it was, nothing else; the others
 * are all there. */
static void test_delete_power_cut(void **state)
{
	for (int dur = KVS_DURABILITY_MEMORY; dur <= KVS_DURABILITY_DURABLE;
	     dur++) {
		for (uint64_t seed = 1; seed <= 6; seed++) {
			char *dir = store_with(4);
			struct kvs_store_io_ops ops = vcache_ops;
			struct kvs_store_opts o;
			struct kvs_store *s;
			int status, err;
			pid_t pid;

			opts(&o);
			o.buffered_io = true;
			pid = fork();
			assert_true(pid >= 0);
			if (pid == 0) {
				int res;

				vcache_start(dir, seed * 7 + (uint64_t)dur,
					     1000000, false, &model_hooks);
				/* the cut is ours: right after the delete */
				vc.cut_at = vc.cut_event = 0;
				vc.early = false;
				o.io = &ops;
				CHILD_CHECK(kvs_store_open(dir, &o, &s) == 0);
				CHILD_CHECK(kvs_store_delete_batch(
						    s, &blocks[0].key, 1,
						    (enum kvs_durability)dur,
						    &res) == 0 &&
					    res == 0);
				vcache_cut();
			}
			assert_int_equal(waitpid(pid, &status, 0), pid);
			assert_true(WIFEXITED(status) &&
				    WEXITSTATUS(status) == 0);
			opts(&o);
			assert_int_equal(kvs_store_open(dir, &o, &s), 0);
			err = test_get_cmp(s, &blocks[0].key, blocks[0].obj,
					   blocks[0].len);
			if (dur == KVS_DURABILITY_DURABLE)
				assert_int_equal(err, -KVS_ENOTFOUND);
			else
				assert_true(err == 0 || err == -KVS_ENOTFOUND);
			for (int i = 1; i < 4; i++)
				assert_int_equal(test_get_cmp(s, &blocks[i].key,
							      blocks[i].obj,
							      blocks[i].len),
						 0);
			assert_int_equal(kvs_store_close(s), 0);
			test_rmdir(dir);
		}
	}
}

struct key_records {
	struct kvs_store_key key;
	uint64_t newest_record, newest_tomb; /* sequence numbers, 0: none */
	unsigned tombs;
};

static void records_cb(void *arg, const struct kvs_fsck_record *r)
{
	struct key_records *k = arg;

	assert_int_equal(r->status, KVS_FSCK_GOOD);
	if (!r->key_valid || memcmp(&r->key, &k->key, sizeof(r->key)))
		return;
	if (r->tombstone) {
		k->tombs++;
		if (r->seq > k->newest_tomb)
			k->newest_tomb = r->seq;
	} else if (r->seq > k->newest_record) {
		k->newest_record = r->seq;
	}
}

/* Puts the keepers of test_tombstone_cleaning: blocks filling most of a
 * segment, so that it is not compacted while they live. */
static size_t keepers_make(struct test_blk *k, size_t max)
{
	uint64_t bytes = 0;
	size_t n = 0;

	while (n < max && bytes < SEG * 3 / 5) {
		k[n].obj = test_block(9000 + n, 8, &k[n].len, &k[n].key);
		assert_non_null(k[n].obj);
		bytes += record_size(k[n].len);
		n++;
	}
	assert_true(bytes >= SEG * 3 / 5);
	return n;
}

/* Block 0 is put, with keepers that fill most of its segment; blocks
 * 6.. are deleted and put again and again (each time a new record and a
 * tombstone: segments roll and get compacted).  Once block 0's segment is
 * sealed, block 0 is deleted; once its tombstone was seen moved by a
 * compaction (its record still on disk), the keepers are deleted too, so
 * that block 0's segment goes.  After every round, on disk: while a
 * record of block 0 remains, a newer tombstone of it does too; block 0
 * never comes back; once its records are gone, its tombstone goes too. */
static void test_tombstone_cleaning(void **state)
{
	struct test_blk keep[32];
	struct kvs_store_opts o;
	struct kvs_fsck_report rep;
	struct kvs_store *s;
	char *dir = test_mkdir();
	uint64_t last_tomb = 0;
	size_t nkeep = keepers_make(keep, 32);
	bool deleted = false, moved = false, gone = false, dropped = false;

	opts(&o);
	o.dram_capacity = 0; /* the records are what is looked at */
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	assert_int_equal(kvs_store_put(s, blocks[0].obj, blocks[0].len,
				       KVS_DURABILITY_WRITTEN, NULL),
			 0);
	for (size_t i = 0; i < nkeep; i++)
		assert_int_equal(kvs_store_put(s, keep[i].obj, keep[i].len,
					       KVS_DURABILITY_WRITTEN, NULL),
				 0);
	assert_int_equal(kvs_store_close(s), 0);
	for (int round = 0; round < 60 && !gone; round++) {
		struct key_records k = { .key = blocks[0].key };
		struct entry *e;
		uint64_t seq0 = 0;

		assert_int_equal(kvs_store_open(dir, &o, &s), 0);
		for (int i = 6; i < NB; i++) {
			int err = kvs_store_delete(s, &blocks[i].key);

			assert_true(err == 0 || err == -KVS_ENOTFOUND);
			assert_int_equal(
				kvs_store_put(s, blocks[i].obj, blocks[i].len,
					      KVS_DURABILITY_WRITTEN, NULL),
				0);
		}
		e = index_find(&s->index, &blocks[0].key);
		if (!deleted && e->seg && e->seg->sealed) {
			assert_int_equal(kvs_store_delete(s, &blocks[0].key),
					 0);
			deleted = true;
		}
		if (moved && !dropped) {
			for (size_t i = 0; i < nkeep; i++)
				assert_int_equal(
					kvs_store_delete(s, &keep[i].key), 0);
			dropped = true;
		}
		if (deleted) {
			e = index_find(&s->index, &blocks[0].key);
			assert_int_equal(test_get_cmp(s, &blocks[0].key,
						      blocks[0].obj,
						      blocks[0].len),
					 -KVS_ENOTFOUND);
			seq0 = e && e->tomb && e->seg ? e->seq : 0;
		}
		assert_int_equal(kvs_store_close(s), 0);
		assert_int_equal(
			kvs_store_fsck(dir, 0, NULL, records_cb, &k, &rep), 0);
		if (!deleted)
			continue;
		if (k.newest_record)
			assert_true(k.newest_tomb > k.newest_record);
		/* the tombstone copied forward, its record still there */
		moved |= k.newest_record && last_tomb && seq0 &&
			 seq0 != last_tomb;
		last_tomb = seq0;
		gone = !k.newest_record && !k.tombs;
	}
	assert_true(deleted);
	assert_true(moved);
	assert_true(gone);
	assert_int_equal(check_reopen(dir, 1, 0x1), 0);
	test_blocks_free(keep, nkeep);
	test_rmdir(dir);
}

/* fsck names tombstones; a repair of a damaged segment keeps them. */
static void test_fsck_tombstones(void **state)
{
	struct kvs_fsck_report rep;
	struct kvs_store_opts o;
	struct kvs_store *s;
	char *dir = store_with(5);

	opts(&o);
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	assert_int_equal(kvs_store_delete(s, &blocks[0].key), 0);
	assert_int_equal(kvs_store_delete(s, &blocks[4].key), 0);
	assert_int_equal(kvs_store_close(s), 0);
	assert_int_equal(kvs_store_fsck(dir, 0, NULL, NULL, NULL, &rep), 0);
	assert_int_equal(rep.tombstones, 2);
	assert_int_equal(rep.good, 7);
	assert_int_equal(rep.superseded, 2); /* the deleted records */
	assert_int_equal(rep.corrupt + rep.torn, 0);
	assert_int_equal(
		kvs_store_fsck(dir, KVS_FSCK_REPAIR, NULL, NULL, NULL, &rep),
		0);
	assert_int_equal(rep.tombstones, 2);
	check_reopen(dir, 5, 0x11);
	assert_int_equal(disk_tombstones(dir), 2);
	test_rmdir(dir);
}

/* Sets both superblock copies of @dir to format @version. */
static void set_format(const char *dir, uint32_t version)
{
	char path[4200];
	uint8_t buf[SB_SIZE];
	int fd;

	snprintf(path, sizeof(path), "%s/KVSTASH", dir);
	fd = open(path, O_RDWR);
	assert_true(fd >= 0);
	for (off_t off = 0; off <= SB_COPY_OFF; off += SB_COPY_OFF) {
		uint64_t sum;

		assert_int_equal(pread(fd, buf, sizeof(buf), off), sizeof(buf));
		kvs_put32(buf + 8, version);
		sum = XXH3_64bits(buf, 56);
		kvs_put64(buf + 56, sum);
		assert_int_equal(pwrite(fd, buf, sizeof(buf), off),
				 sizeof(buf));
	}
	close(fd);
}

/* A store of format 2 (no tombstones) is read as it is by a read-only
 * open and fsck; a writable open upgrades it before it can delete. */
static void test_format2_upgraded(void **state)
{
	struct kvs_fsck_report rep;
	struct kvs_store_opts o;
	struct kvs_store *s;
	char *dir = store_with(3);

	set_format(dir, 2);
	opts(&o);
	o.read_only = true;
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	assert_int_equal(
		test_get_cmp(s, &blocks[1].key, blocks[1].obj, blocks[1].len),
		0);
	assert_int_equal(kvs_store_close(s), 0);
	assert_int_equal(kvs_store_fsck(dir, 0, NULL, NULL, NULL, &rep), 0);
	assert_int_equal(rep.format_version, 2);
	o.read_only = false;
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	assert_int_equal(kvs_store_delete(s, &blocks[1].key), 0);
	assert_int_equal(kvs_store_close(s), 0);
	assert_int_equal(kvs_store_fsck(dir, 0, NULL, NULL, NULL, &rep), 0);
	assert_int_equal(rep.format_version, KVS_STORE_FORMAT_VERSION);
	assert_int_equal(rep.tombstones, 1);
	check_reopen(dir, 3, 0x2);
	test_rmdir(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_delete_reopen),
		cmocka_unit_test(test_delete_pinned),
		cmocka_unit_test(test_delete_memory_only),
		cmocka_unit_test(test_delete_killed),
		cmocka_unit_test(test_delete_power_cut),
		cmocka_unit_test(test_tombstone_cleaning),
		cmocka_unit_test(test_fsck_tombstones),
		cmocka_unit_test(test_format2_upgraded),
	};

	kvs_log_set_level(KVS_LOG_ERR);
	return cmocka_run_group_tests(tests, setup, teardown);
}
