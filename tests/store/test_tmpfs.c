/*
 * test_tmpfs.c - a store on tmpfs (/dev/shm): put, get, reopen, with the
 * I/O mode the file system allows (tmpfs refused O_DIRECT before Linux
 * 6.6, so there the store falls back to buffered I/O) and with buffered
 * I/O asked for; the mode in use is reported in the stats.  Exits 77 when
 * /dev/shm is not a tmpfs.  (test_faults.c covers a refusal of O_DIRECT
 * injected through the ops table, whatever the kernel.)
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/vfs.h>

#include <cmocka.h>
#include <linux/magic.h>

#include "kvstash/log.h"
#include "store_test.h"

#define SHM "/dev/shm"

enum { NB = 24 };

static struct test_blk blocks[NB];

static int setup(void **state)
{
	return test_blocks_make(blocks, NB, 900, 3);
}

static int teardown(void **state)
{
	test_blocks_free(blocks, NB);
	return 0;
}

static char *shm_mkdir(void)
{
	char *path = malloc(4096);

	snprintf(path, 4096, "%s/kvs-storetest-XXXXXX", SHM);
	assert_non_null(mkdtemp(path));
	return path;
}

/* Whether a file on tmpfs opens with O_DIRECT on this kernel. */
static bool shm_takes_direct(const char *dir)
{
	char path[4200];
	int fd;

	snprintf(path, sizeof(path), "%s/probe", dir);
	fd = open(path, O_RDWR | O_CREAT | O_DIRECT, 0644);
	if (fd < 0) {
		assert_int_equal(errno, EINVAL);
		return false;
	}
	close(fd);
	unlink(path);
	return true;
}

static void get_all(struct kvs_store *s)
{
	for (int i = 0; i < NB; i++) {
		struct kvs_store_ref *ref;

		assert_int_equal(kvs_store_get(s, &blocks[i].key, &ref), 0);
		assert_int_equal(kvs_store_ref_len(ref), blocks[i].len);
		assert_memory_equal(kvs_store_ref_data(ref), blocks[i].obj,
				    blocks[i].len);
		kvs_store_ref_release(ref);
	}
}

/* Puts every block (all three durability levels), reads them back,
 * reopens, reads them again; the stats report @direct each time. */
static void roundtrip(const char *dir, bool buffered, bool direct)
{
	static const enum kvs_durability dur[] = {
		KVS_DURABILITY_MEMORY,
		KVS_DURABILITY_WRITTEN,
		KVS_DURABILITY_DURABLE,
	};
	struct kvs_store_opts o;
	struct kvs_store_stats st;
	struct kvs_fsck_report rep;
	struct kvs_store *s;

	test_opts(&o, 256 << 10, 16 << 20, 1 << 20);
	o.write_through = false;
	o.buffered_io = buffered;
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	kvs_store_stats_get(s, &st);
	assert_int_equal(st.direct_io, direct);
	for (int i = 0; i < NB; i++)
		assert_int_equal(kvs_store_put(s, blocks[i].obj, blocks[i].len,
					       dur[i % 3], NULL),
				 0);
	get_all(s);
	kvs_store_stats_get(s, &st);
	assert_int_equal(st.direct_io, direct);
	assert_true(st.segments > 0);
	kvs_store_close(s);

	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	get_all(s);
	kvs_store_stats_get(s, &st);
	assert_int_equal(st.direct_io, direct);
	assert_int_equal(st.nvme.blocks, NB);
	assert_int_equal(st.corrupt_dropped + st.torn_dropped, 0);
	kvs_store_close(s);
	assert_int_equal(kvs_store_fsck(dir, 0, NULL, NULL, NULL, &rep), 0);
	assert_int_equal(rep.good, NB);
	assert_int_equal(rep.corrupt + rep.torn, 0);
}

static void test_tmpfs_default(void **state)
{
	char *dir = shm_mkdir();

	roundtrip(dir, false, shm_takes_direct(dir));
	test_rmdir(dir);
}

static void test_tmpfs_buffered(void **state)
{
	char *dir = shm_mkdir();

	roundtrip(dir, true, false);
	test_rmdir(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_tmpfs_default),
		cmocka_unit_test(test_tmpfs_buffered),
	};
	struct statfs fs;

	if (statfs(SHM, &fs) != 0 || fs.f_type != TMPFS_MAGIC) {
		printf("SKIP: %s is not a tmpfs; no buffered-I/O test\n", SHM);
		return 77;
	}
	kvs_log_set_level(KVS_LOG_ERR);
	return cmocka_run_group_tests(tests, setup, teardown);
}
