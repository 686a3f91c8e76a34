/*
 * test_basic.c - store engine: key text, put/get byte-identical in each
 * tier and across them (spill, promotion), reopen after a clean close,
 * capacity under churn, S3-FIFO scan resistance (beside an LRU model that
 * fails the same trace), pinning, longest-prefix lookup, version refusal.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>
#include <sys/stat.h>
#include <xxhash.h>

#include "store_test.h"

static void make_blocks(struct test_blk *b, size_t n, uint64_t seed0,
			uint16_t max_heads)
{
	assert_int_equal(test_blocks_make(b, n, seed0, max_heads), 0);
}

/* Puts b[from..to) with @dur, each must succeed. */
static void put_range(struct kvs_store *s, const struct test_blk *b, int from,
		      int to, enum kvs_durability dur)
{
	for (int i = from; i < to; i++)
		assert_int_equal(
			kvs_store_put(s, b[i].obj, b[i].len, dur, NULL), 0);
}

/* 0 if @b reads back byte-identical, else the get's error (wrong bytes
 * fail the test). */
static int get_same(struct kvs_store *s, const struct test_blk *b)
{
	int err = test_get_cmp(s, &b->key, b->obj, b->len);

	assert_int_not_equal(err, 1);
	return err;
}

static void test_key_text(void **state)
{
	struct kvs_store_key k, back;
	char text[KVS_STORE_KEY_TEXT];
	size_t len;
	uint8_t *obj = test_block(5, 1, &len, &k);

	kvs_store_key_format(&k, text);
	assert_int_equal(strlen(text), 66);
	assert_int_equal(kvs_store_key_parse(text, &back), 0);
	assert_memory_equal(&k, &back, sizeof(k));
	assert_int_equal(kvs_store_key_parse("abc:1", &back), -KVS_EPARAM);
	text[64] = '\0';
	assert_int_equal(kvs_store_key_parse(text, &back), -KVS_EPARAM);
	text[64] = ':';
	strcpy(text + 65, "1x");
	assert_int_equal(kvs_store_key_parse(text, &back), -KVS_EPARAM);
	free(obj);
}

static void test_roundtrip_tiers(void **state)
{
	struct kvs_store_opts o;
	struct kvs_store_stats st;
	struct kvs_store *s;
	struct test_blk b[60];
	char *dir = test_mkdir();

	make_blocks(b, 60, 100, 4);
	/* DRAM only */
	test_opts(&o, 4 << 20, 0, 0);
	o.write_through = false;
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	put_range(s, b, 0, 60, KVS_DURABILITY_MEMORY);
	for (int i = 0; i < 60; i++)
		assert_int_equal(get_same(s, &b[i]), 0);
	kvs_store_stats_get(s, &st);
	assert_int_equal(st.dram.blocks, 60);
	assert_int_equal(st.dram_hits, 60);
	kvs_store_close(s);

	/* NVMe only, batched */
	test_opts(&o, 0, 8 << 20, 1 << 20);
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	const uint8_t *objs[60];
	size_t lens[60];
	int res[60];

	for (int i = 0; i < 60; i++) {
		objs[i] = b[i].obj;
		lens[i] = b[i].len;
	}
	assert_int_equal(kvs_store_put_batch(s, objs, lens, 60,
					     KVS_DURABILITY_DURABLE, res),
			 0);
	struct kvs_store_ref *refs[60];
	struct kvs_store_key keys[60];

	for (int i = 0; i < 60; i++)
		keys[i] = b[i].key;
	assert_int_equal(kvs_store_get_batch(s, keys, 60, refs, res), 0);
	for (int i = 0; i < 60; i++) {
		assert_int_equal(res[i], 0);
		assert_memory_equal(kvs_store_ref_data(refs[i]), b[i].obj,
				    b[i].len);
		kvs_store_ref_release(refs[i]);
	}
	kvs_store_stats_get(s, &st);
	assert_int_equal(st.nvme.blocks, 60);
	assert_int_equal(st.dram.blocks, 0);
	assert_int_equal(st.nvme_hits, 60);
	kvs_store_close(s);

	/* the same bytes again, in memory only: the NVMe records still
	 * describe them, nothing needs spilling */
	test_opts(&o, 128 << 10, 16 << 20, 1 << 20);
	o.write_through = false;
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	put_range(s, b, 0, 60, KVS_DURABILITY_MEMORY);
	kvs_store_stats_get(s, &st);
	assert_int_equal(st.spills, 0);
	kvs_store_close(s);
	test_rmdir(dir);

	/* both tiers, fresh: small DRAM, memory puts spill, reads promote */
	dir = test_mkdir();
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	for (int round = 0; round < 2; round++)
		put_range(s, b, 0, 60, KVS_DURABILITY_MEMORY);
	for (int i = 0; i < 60; i++)
		assert_int_equal(get_same(s, &b[i]), 0);
	kvs_store_stats_get(s, &st);
	assert_true(st.spills > 0);
	assert_true(st.promotions > 0);
	assert_true(st.dram.bytes <= st.dram.capacity);
	kvs_store_close(s);

	/* reopen after the clean close: all there, from NVMe */
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	for (int i = 0; i < 60; i++)
		assert_int_equal(get_same(s, &b[i]), 0);
	kvs_store_stats_get(s, &st);
	assert_int_equal(st.corrupt_dropped + st.torn_dropped, 0);
	kvs_store_close(s);
	test_blocks_free(b, 60);
	test_rmdir(dir);
}

static void test_capacity_churn(void **state)
{
	enum { NB = 300, OPS = 3000 };
	struct kvs_store_opts o;
	struct kvs_store_stats st;
	struct kvs_store *s;
	struct test_blk *b = calloc(NB, sizeof(*b));
	uint64_t rng = 42;
	char *dir = test_mkdir();

	make_blocks(b, NB, 1000, 8);
	test_opts(&o, 512 << 10, 2 << 20, 256 << 10);
	o.write_through = false;
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	for (int op = 0; op < OPS; op++) {
		struct test_blk *x = &b[test_rand(&rng) % NB];

		if (test_rand(&rng) % 3)
			assert_int_equal(kvs_store_put(s, x->obj, x->len,
						       test_rand(&rng) % 2,
						       NULL),
					 0);
		else {
			int err = get_same(s, x);

			assert_true(err == 0 || err == -KVS_ENOTFOUND);
		}
		kvs_store_stats_get(s, &st);
		assert_true(st.dram.bytes <= st.dram.capacity);
		assert_true(st.nvme_file_bytes <= st.nvme.capacity);
		assert_true(st.nvme.bytes <= st.nvme.capacity);
	}
	assert_true(st.evictions > 0);
	assert_int_equal(st.corrupt_dropped, 0);
	kvs_store_close(s);
	test_blocks_free(b, NB);
	free(b);
	test_rmdir(dir);
}

/* LRU over @n slots on the same trace: how many hot gets miss. */
static int lru_hot_misses(int slots, int hot, int scan)
{
	int *age = calloc((size_t)(hot + scan), sizeof(int));
	int *in = calloc((size_t)(hot + scan), sizeof(int));
	int clock = 0, used = 0, misses = 0;

	for (int step = 0; step < 2 * hot + scan + hot; step++) {
		int k = step < 2 * hot		? step % hot
			: step < 2 * hot + scan ? hot + step - 2 * hot
						: step - 2 * hot - scan;
		bool is_get =
			step < 2 * hot ? step >= hot : step >= 2 * hot + scan;

		if (in[k]) {
			age[k] = ++clock;
			continue;
		}
		if (is_get)
			misses++;
		if (used == slots) {
			int v = -1;

			for (int i = 0; i < hot + scan; i++)
				if (in[i] && (v < 0 || age[i] < age[v]))
					v = i;
			in[v] = 0;
			used--;
		}
		in[k] = 1;
		age[k] = ++clock;
		used++;
	}
	free(age);
	free(in);
	return misses;
}

static void test_scan_resistance(void **state)
{
	enum { HOT = 40, SCAN = 400 };
	struct kvs_store_opts o;
	struct kvs_store_stats st;
	struct kvs_store *s;
	struct test_blk *b = calloc(HOT + SCAN, sizeof(*b));
	char *dir = test_mkdir();
	int slots;

	make_blocks(b, HOT + SCAN, 5000, 1);
	/* 1 MiB of 4 KiB slots: 256 objects, the hot set is 40 */
	test_opts(&o, 1 << 20, 0, 0);
	o.write_through = false;
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	slots = (1 << 20) / 4096;
	put_range(s, b, 0, HOT, KVS_DURABILITY_MEMORY);
	for (int i = 0; i < HOT; i++)
		assert_int_equal(get_same(s, &b[i]), 0);
	put_range(s, b, HOT, HOT + SCAN, KVS_DURABILITY_MEMORY);
	kvs_store_stats_get(s, &st);
	assert_true(st.evictions >= (uint64_t)(SCAN - slots));
	for (int i = 0; i < HOT; i++)
		assert_int_equal(get_same(s, &b[i]), 0);
	/* the same trace under LRU loses the whole hot set */
	assert_int_equal(lru_hot_misses(slots, HOT, SCAN), HOT);
	kvs_store_close(s);
	test_blocks_free(b, HOT + SCAN);
	free(b);
	test_rmdir(dir);
}

/* The NVMe tier alone: segments are reclaimed whole, and records read
 * since they were written are carried forward, so a hot set survives a
 * scan several times the tier's capacity (a plain log FIFO loses it). */
static void test_nvme_scan_resistance(void **state)
{
	enum { HOT = 20, SCAN = 600 };
	struct kvs_store_opts o;
	struct kvs_store_stats st;
	struct kvs_store *s;
	struct test_blk *b = calloc(HOT + SCAN, sizeof(*b));
	char *dir = test_mkdir();

	make_blocks(b, HOT + SCAN, 20000, 1);
	/* 4 segments of 256 KiB: about 250 records of 4 KiB */
	test_opts(&o, 0, 1 << 20, 256 << 10);
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	put_range(s, b, 0, HOT, KVS_DURABILITY_WRITTEN);
	for (int i = HOT; i < HOT + SCAN; i++) {
		put_range(s, b, i, i + 1, KVS_DURABILITY_WRITTEN);
		if (i % 100 == 0)
			for (int h = 0; h < HOT; h++)
				assert_int_equal(get_same(s, &b[h]), 0);
	}
	for (int h = 0; h < HOT; h++)
		assert_int_equal(get_same(s, &b[h]), 0);
	kvs_store_stats_get(s, &st);
	assert_true(st.carried > 0);
	assert_true(st.evictions >= SCAN - 250);
	assert_true(st.nvme_file_bytes <= st.nvme.capacity);
	kvs_store_close(s);
	test_blocks_free(b, HOT + SCAN);
	free(b);
	test_rmdir(dir);
}

static void test_pinning(void **state)
{
	enum { N = 200 };
	struct kvs_store_opts o;
	struct kvs_store *s;
	struct kvs_store_ref *ref, *ref2;
	struct test_blk *b = calloc(N, sizeof(*b));
	char *dir = test_mkdir();

	make_blocks(b, N, 9000, 1);
	test_opts(&o, 256 << 10, 0, 0);
	o.write_through = false;
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	assert_int_equal(kvs_store_put(s, b[0].obj, b[0].len,
				       KVS_DURABILITY_MEMORY, NULL),
			 0);
	assert_int_equal(kvs_store_get(s, &b[0].key, &ref), 0);
	/* replace it while pinned, then churn everything out */
	assert_int_equal(kvs_store_put(s, b[0].obj, b[0].len,
				       KVS_DURABILITY_MEMORY, NULL),
			 0);
	assert_int_equal(kvs_store_get(s, &b[0].key, &ref2), 0);
	put_range(s, b, 1, N, KVS_DURABILITY_MEMORY);
	assert_memory_equal(kvs_store_ref_data(ref), b[0].obj, b[0].len);
	assert_memory_equal(kvs_store_ref_data(ref2), b[0].obj, b[0].len);
	kvs_store_ref_release(ref);
	kvs_store_ref_release(ref2);
	put_range(s, b, 1, N, KVS_DURABILITY_MEMORY);
	kvs_store_close(s);
	test_blocks_free(b, N);
	free(b);
	test_rmdir(dir);
}

struct worker {
	struct kvs_store *s;
	struct test_blk *b;
	int n, first;
	int bad;
};

static void *worker_run(void *arg)
{
	struct worker *w = arg;

	for (int round = 0; round < 20; round++) {
		for (int i = 0; i < w->n; i++) {
			int k = (w->first + i * 7 + round) % w->n;
			struct test_blk *x = &w->b[k];
			struct kvs_store_ref *ref;
			int err;

			if ((i + round) % 3 == 0) {
				w->bad += kvs_store_put(w->s, x->obj, x->len,
							KVS_DURABILITY_WRITTEN,
							NULL) != 0;
				continue;
			}
			err = kvs_store_get(w->s, &x->key, &ref);
			if (err) {
				w->bad += err != -KVS_ENOTFOUND;
				continue;
			}
			w->bad += kvs_store_ref_len(ref) != x->len ||
				  memcmp(kvs_store_ref_data(ref), x->obj,
					 x->len) != 0;
			kvs_store_ref_release(ref);
		}
	}
	return NULL;
}

/* Two threads putting and getting the same keys through one store, with
 * DRAM and NVMe small enough that eviction, spills and segment
 * reclaiming run all the time: every hit byte-identical. */
static void test_threads(void **state)
{
	enum { N = 150 };
	struct kvs_store_opts o;
	struct kvs_store *s;
	struct test_blk *b = calloc(N, sizeof(*b));
	struct worker w[2];
	pthread_t t[2];
	char *dir = test_mkdir();

	make_blocks(b, N, 40000, 4);
	test_opts(&o, 128 << 10, 1 << 20, 256 << 10);
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	for (int i = 0; i < 2; i++) {
		w[i] = (struct worker){
			.s = s, .b = b, .n = N, .first = i * 31
		};
		assert_int_equal(pthread_create(&t[i], NULL, worker_run, &w[i]),
				 0);
	}
	for (int i = 0; i < 2; i++) {
		pthread_join(t[i], NULL);
		assert_int_equal(w[i].bad, 0);
	}
	kvs_store_close(s);
	test_blocks_free(b, N);
	free(b);
	test_rmdir(dir);
}

static void test_lookup_prefix(void **state)
{
	struct kvs_store_opts o;
	struct kvs_store *s;
	struct kvs_ident id;
	uint8_t spans[5][KVS_ID_SIZE];
	uint32_t layers[2] = { 0, 1 };
	char *dir = test_mkdir();

	test_opts(&o, 4 << 20, 4 << 20, 1 << 20);
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	memset(&id, 0, sizeof(id));
	for (int sp = 0; sp < 5; sp++) {
		memset(spans[sp], 0x10 + sp, KVS_ID_SIZE);
		for (uint32_t l = 0; l < 2; l++) {
			size_t len;
			uint8_t *obj;

			if (sp == 4 || (sp == 3 && l == 1))
				continue;
			memcpy(id.block_id, spans[sp], KVS_ID_SIZE);
			id.layer = l;
			obj = test_block_ident(&id, (uint64_t)sp * 2 + l, 1,
					       &len);
			assert_int_equal(kvs_store_put(s, obj, len,
						       KVS_DURABILITY_WRITTEN,
						       NULL),
					 0);
			free(obj);
		}
	}
	assert_int_equal(kvs_store_lookup_prefix(s, spans, 5, layers, 2), 3);
	assert_int_equal(kvs_store_lookup_prefix(s, spans, 5, layers, 1), 4);
	assert_int_equal(kvs_store_lookup_prefix(s, spans + 4, 1, layers, 1),
			 0);
	kvs_store_close(s);
	/* persistent: the same answer after reopening */
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	assert_int_equal(kvs_store_lookup_prefix(s, spans, 5, layers, 2), 3);
	kvs_store_close(s);
	test_rmdir(dir);
}

/* Rewrites the 64-byte structure at @off of @path with a newer @version
 * at @ver_off and a valid checksum (xxh3 of the first @sum_len bytes at
 * @sum_off): what a newer kvstash would have written. */
static void write_newer(const char *path, off_t off, size_t ver_off,
			uint32_t version, size_t sum_off)
{
	uint8_t buf[64];
	uint64_t sum;
	int fd = open(path, O_RDWR);

	assert_true(fd >= 0);
	assert_int_equal(pread(fd, buf, sizeof(buf), off), sizeof(buf));
	memcpy(buf + ver_off, &version, 4);
	sum = XXH3_64bits(buf, sum_off);
	memcpy(buf + sum_off, &sum, 8);
	assert_int_equal(pwrite(fd, buf, sizeof(buf), off), sizeof(buf));
	close(fd);
}

static void test_version_refused(void **state)
{
	struct kvs_store_opts o;
	struct kvs_store *s;
	char path[4200];
	size_t len;
	char *dir = test_mkdir();
	uint8_t *obj = test_block(1, 1, &len, NULL);

	test_opts(&o, 1 << 20, 4 << 20, 1 << 20);
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	assert_int_equal(
		kvs_store_put(s, obj, len, KVS_DURABILITY_DURABLE, NULL), 0);
	kvs_store_close(s);
	/* a segment of a newer layout (valid checksum) */
	snprintf(path, sizeof(path), "%s/seg-%016llx.kvs", dir, 0ull);
	write_newer(path, 0, 8, 2, 24);
	assert_int_equal(kvs_store_open(dir, &o, &s), -KVS_EVERSION);
	assert_int_equal(kvs_store_fsck(dir, 0, NULL, NULL, NULL, NULL),
			 -KVS_EVERSION);
	write_newer(path, 0, 8, 1, 24);
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	kvs_store_close(s);
	/* a superblock from a newer store format (either copy) */
	snprintf(path, sizeof(path), "%s/KVSTASH", dir);
	write_newer(path, 4096, 8, KVS_STORE_FORMAT_VERSION + 1, 56);
	assert_int_equal(kvs_store_open(dir, &o, &s), -KVS_EVERSION);
	assert_int_equal(kvs_store_fsck(dir, 0, NULL, NULL, NULL, NULL),
			 -KVS_EVERSION);
	/* not a store at all, without create */
	o.create = false;
	snprintf(path, sizeof(path), "%s/nothing", dir);
	assert_int_equal(kvs_store_open(path, &o, &s), -ENOENT);
	free(obj);
	test_rmdir(dir);
}

static off_t file_size(const char *path)
{
	struct stat st;

	assert_int_equal(stat(path, &st), 0);
	return st.st_size;
}

/* A store of format 1 (one 64-byte superblock, no manifest): read as it
 * is by a read-only open; a writable open upgrades it to the current
 * format (both superblock copies, a manifest) and loses nothing. */
static void test_format1_upgraded(void **state)
{
	struct kvs_store_opts o;
	struct kvs_fsck_report rep;
	struct kvs_store *s;
	struct test_blk b[8];
	char sb[4200], man[4200];
	char *dir = test_mkdir();

	make_blocks(b, 8, 7700, 3);
	test_opts(&o, 1 << 20, 4 << 20, 1 << 20);
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	put_range(s, b, 0, 8, KVS_DURABILITY_DURABLE);
	kvs_store_close(s);
	/* what format 1 wrote: its superblock alone, no manifest */
	snprintf(sb, sizeof(sb), "%s/KVSTASH", dir);
	snprintf(man, sizeof(man), "%s/MANIFEST", dir);
	assert_int_equal(unlink(man), 0);
	assert_int_equal(truncate(sb, 64), 0);
	write_newer(sb, 0, 8, 1, 56);
	o.read_only = true;
	o.create = false;
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	for (int i = 0; i < 8; i++)
		assert_int_equal(get_same(s, &b[i]), 0);
	kvs_store_close(s);
	assert_int_equal(file_size(sb), 64);
	assert_int_equal(access(man, F_OK), -1);
	assert_int_equal(kvs_store_fsck(dir, 0, NULL, NULL, NULL, &rep), 0);
	assert_int_equal(rep.format_version, 1);
	assert_int_equal(rep.good, 8);
	o.read_only = false;
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	for (int i = 0; i < 8; i++)
		assert_int_equal(get_same(s, &b[i]), 0);
	kvs_store_close(s);
	assert_true(file_size(sb) > 4096);
	assert_int_equal(access(man, F_OK), 0);
	assert_int_equal(kvs_store_fsck(dir, 0, NULL, NULL, NULL, &rep), 0);
	assert_int_equal(rep.format_version, KVS_STORE_FORMAT_VERSION);
	assert_int_equal(rep.good, 8);
	assert_int_equal(rep.corrupt + rep.torn + rep.missing, 0);
	test_blocks_free(b, 8);
	test_rmdir(dir);
}

static void test_bad_object_refused(void **state)
{
	struct kvs_store_opts o;
	struct kvs_store *s;
	struct kvs_store_key key;
	struct kvs_store_ref *ref;
	size_t len;
	char *dir = test_mkdir();
	uint8_t *obj = test_block(3, 2, &len, &key);

	test_opts(&o, 1 << 20, 4 << 20, 1 << 20);
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	obj[len - 1] ^= 0x40;
	assert_true(kvs_store_put(s, obj, len, KVS_DURABILITY_WRITTEN, NULL) <
		    0);
	assert_true(kvs_store_put(s, obj, 100, KVS_DURABILITY_WRITTEN, NULL) <
		    0);
	assert_int_equal(kvs_store_get(s, &key, &ref), -KVS_ENOTFOUND);
	kvs_store_close(s);
	free(obj);
	test_rmdir(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_key_text),
		cmocka_unit_test(test_roundtrip_tiers),
		cmocka_unit_test(test_capacity_churn),
		cmocka_unit_test(test_scan_resistance),
		cmocka_unit_test(test_nvme_scan_resistance),
		cmocka_unit_test(test_pinning),
		cmocka_unit_test(test_threads),
		cmocka_unit_test(test_lookup_prefix),
		cmocka_unit_test(test_version_refused),
		cmocka_unit_test(test_format1_upgraded),
		cmocka_unit_test(test_bad_object_refused),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
