/*
 * test_powercut.c - power loss, simulated at the I/O-ops layer, to check
 * the promise of store.h: an acknowledged-durable block survives it.
 *
 * The model (vcache.h): a disk with a volatile write cache under a file
 * system that keeps no more than POSIX promises.  A forked writer runs
 * the store on a real directory through an ops table that does every call
 * for real and remembers what is not durable yet.  A write or size change
 * (ftruncate, fallocate, O_TRUNC) of a file is durable at the file's next
 * fsync or fdatasync; creating a file, rename and unlink at the next fsync
 * of the directory (the weakest POSIX promise, which the store's contract
 * relies on: it fsyncs the directory after creating a segment or the
 * superblock), never by fsync of the file; an unlinked file can come
 * back.  At a random modelled operation (which then never happens) the
 * power goes: each file is rebuilt from its durable content plus its
 * pending writes in order, each applied whole, dropped or torn (each
 * 512-byte sector new or old), each size change and directory operation
 * kept or not.  The writer then _exits.
 *
 * The writer mixes durable puts (single and batched), WRITTEN / MEMORY
 * puts, re-puts of the same bytes, a second version of some keys, gets
 * and syncs on a store of 3 segments of 256 KiB, so segment creation,
 * rollover and reclaim (with carry-forward) happen under the cut.  Then
 * the real recovery (default ops) must serve every block whose durable
 * put was acknowledged and whose record still held it when the power
 * went (not evicted, not carried: carrying is best effort), byte for
 * byte; no get may return anything but a version put for its key; every
 * record fsck finds damaged must overlap a write pending at the cut;
 * --repair leaves a store that reopens clean and takes new puts.  Each
 * round runs two phases (a fresh store, then the recovered one: a third
 * of the time unrepaired, so the writer recovers, runs and is cut again
 * with the damage) and prints its seed; KVS_POWERCUT_SEED=<seed> replays
 * that round alone.
 */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include <cmocka.h>

#include "kvstash/log.h"
#include "store_internal.h"
#include "store_test.h"
#include "vcache.h"

enum {
	NKEYS = 192,
	NVER = 2,
	ROUNDS = 200,
	PHASES = 2,
	MAX_CALLS = 300,
	MAX_REGIONS = 8192,
	MAX_UNLINKED = 64,
};

#define SEG_SIZE (256ull << 10)
#define TIME_BUDGET_S 6.0

/* ---- what the writer and the checker share (MAP_SHARED) ------------- */

struct region {
	uint64_t seg, off, len;
};

struct shared {
	int failed; /* the writer found something wrong */
	char why[512];
	uint8_t want[NKEYS]; /* 1 + version that must survive, or 0 */
	uint8_t ever[NKEYS]; /* bit v: version v was put */
	uint64_t calls, ops; /* done before the cut */
	uint32_t nregions;
	struct region regions[MAX_REGIONS]; /* writes pending at the cut */
};

static struct shared *sh;
static struct test_blk pool[NKEYS][NVER];

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Both versions of key @k share its ident, so its store key. */
static int pool_make(void **state)
{
	for (int k = 0; k < NKEYS; k++) {
		struct kvs_ident ident;
		uint64_t st = (uint64_t)k * 7919 + 11;

		memset(&ident, 0, sizeof(ident));
		for (int i = 0; i < KVS_ID_SIZE; i += 8) {
			uint64_t r = test_rand(&st);

			memcpy(ident.block_id + i, &r, 8);
		}
		ident.layer = (uint32_t)(k % 4);
		ident.first_pos = (uint64_t)k * 32;
		for (int v = 0; v < NVER; v++) {
			struct test_blk *b = &pool[k][v];

			b->obj = test_block_ident(
				&ident, (uint64_t)k * NVER + v,
				(uint16_t)(1 + k % 8), &b->len);
			if (!b->obj ||
			    kvs_store_key_of(b->obj, b->len, &b->key))
				return -1;
		}
	}
	return 0;
}

static int pool_free(void **state)
{
	for (int k = 0; k < NKEYS; k++)
		test_blocks_free(pool[k], NVER);
	return 0;
}

/* Key @k's version v if @obj is one of its versions, else -1. */
static int version_of(int k, const uint8_t *obj, size_t len)
{
	for (int v = 0; v < NVER; v++)
		if (pool[k][v].len == len && !memcmp(pool[k][v].obj, obj, len))
			return v;
	return -1;
}

static int key_index(const struct kvs_store_key *key)
{
	for (int k = 0; k < NKEYS; k++)
		if (!memcmp(&pool[k][0].key, key, sizeof(*key)))
			return k;
	return -1;
}

static void round_opts(struct kvs_store_opts *o, uint64_t seed)
{
	/* half the rounds without DRAM (gets read NVMe, so records get
	 * carried), half with a small arena, some not write-through (MEMORY
	 * puts, spilled on eviction) */
	bool dram = seed & 1;

	test_opts(o, dram ? 256 << 10 : 0, 3 * SEG_SIZE, SEG_SIZE);
	o->write_through = !dram || (seed & 2);
	/* the model, not the disk, decides what survives: stay in the page
	 * cache (O_DIRECT reads of what the cut rewrote cost the most) */
	o->buffered_io = true;
}

/* ---- the writer's side: failing it ---------------------------------- */

static __attribute__((noreturn, format(printf, 1, 2))) void
writer_fail(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(sh->why, sizeof(sh->why), fmt, ap);
	va_end(ap);
	sh->failed = 1;
	_exit(1);
}

/* The writer's view of the store, for the expectations at the cut. */
static struct {
	struct kvs_store *store;
	uint64_t acked_seq[NKEYS], acked_seg[NKEYS];
	int last_ver[NKEYS]; /* version last put or found, -1 none */
	uint8_t in_call[NKEYS]; /* bit v: the call under way puts version v */
	uint64_t unlinked[MAX_UNLINKED]; /* segments, by the call under way */
	size_t nunlinked;
} w;

static bool was_unlinked(uint64_t seg)
{
	for (size_t i = 0; i < w.nunlinked; i++)
		if (w.unlinked[i] == seg)
			return true;
	return false;
}

static struct entry *entry_of(int k);

/* The power goes: what must survive is the acknowledged records still
 * held at the last return to the writer, less those the call under way
 * may legitimately have dropped (reclaimed, or replaced by another
 * version of the key). */
static void on_cut(uint64_t ops)
{
	for (int k = 0; k < NKEYS; k++) {
		struct entry *e;

		if (!sh->want[k])
			continue;
		/* the store drops a reclaimed segment from its index and
		 * its manifest before it unlinks the file: a record the
		 * call under way no longer holds is not owed */
		e = w.store ? entry_of(k) : NULL;
		if (was_unlinked(w.acked_seg[k]) ||
		    (w.store && (!e || !e->seg || e->seq != w.acked_seq[k])) ||
		    (w.in_call[k] & ~(1u << (sh->want[k] - 1))))
			sh->want[k] = 0;
	}
	sh->ops = ops;
}

static void on_unlinked(uint64_t seg)
{
	if (w.nunlinked < MAX_UNLINKED)
		w.unlinked[w.nunlinked++] = seg;
}

static void on_pending(uint64_t seg, uint64_t off, uint64_t len)
{
	if (sh->nregions < MAX_REGIONS)
		sh->regions[sh->nregions++] =
			(struct region){ .seg = seg, .off = off, .len = len };
}

static void on_fail(const char *msg)
{
	writer_fail("%s", msg);
}

static const struct vcache_hooks hooks = {
	.die = on_fail,
	.cut = on_cut,
	.unlinked = on_unlinked,
	.pending = on_pending,
};

/* ---- the writer ----------------------------------------------------- */

static struct entry *entry_of(int k)
{
	return index_find(&w.store->index, &pool[k][0].key);
}

/* After a call returned: forget what it moved or dropped, then take its
 * acknowledgements (@acked[k]: 1 + version made durable; with @put, each
 * must have its record on NVMe). */
static void settle(const uint8_t *acked, bool put)
{
	for (int k = 0; k < NKEYS; k++) {
		struct entry *e = entry_of(k);

		if (sh->want[k] && (!e || !e->seg || e->seq != w.acked_seq[k]))
			sh->want[k] = 0;
		if (put && acked[k] && (!e || !e->seg))
			writer_fail("key %d acknowledged durable, no record",
				    k);
		if (acked[k] && e && e->seg) {
			sh->want[k] = acked[k];
			w.acked_seq[k] = e->seq;
			w.acked_seg[k] = e->seg->id;
		}
	}
	memset(w.in_call, 0, sizeof(w.in_call));
	w.nunlinked = 0;
}

static void put_call(uint64_t *rng, enum kvs_durability dur, unsigned n)
{
	const uint8_t *objs[4];
	size_t lens[4];
	int ks[4], vs[4], res[4];
	uint8_t acked[NKEYS] = { 0 };

	for (unsigned i = 0; i < n; i++) {
		ks[i] = (int)(test_rand(rng) % NKEYS);
		/* a quarter of the keys have a second version */
		vs[i] = ks[i] % 4 == 0 && test_rand(rng) % 4 == 0;
		objs[i] = pool[ks[i]][vs[i]].obj;
		lens[i] = pool[ks[i]][vs[i]].len;
		w.in_call[ks[i]] |= (uint8_t)(1u << vs[i]);
		sh->ever[ks[i]] |= (uint8_t)(1u << vs[i]);
	}
	kvs_store_put_batch(w.store, objs, lens, n, dur, res);
	for (unsigned i = 0; i < n; i++) {
		if (res[i])
			writer_fail("put of key %d failed: %s", ks[i],
				    kvs_strerror(res[i]));
		w.last_ver[ks[i]] = vs[i];
		acked[ks[i]] = dur == KVS_DURABILITY_DURABLE
				       ? (uint8_t)(1 + vs[i])
				       : 0;
	}
	settle(acked, true);
}

static void get_call(uint64_t *rng)
{
	uint8_t acked[NKEYS] = { 0 };
	int k = (int)(test_rand(rng) % NKEYS);
	struct kvs_store_ref *ref;
	int err = kvs_store_get(w.store, &pool[k][0].key, &ref);

	if (err && err != -KVS_ENOTFOUND && err != -KVS_ECORRUPT)
		writer_fail("get of key %d: %s", k, kvs_strerror(err));
	if (!err) {
		int v = version_of(k, kvs_store_ref_data(ref),
				   kvs_store_ref_len(ref));

		kvs_store_ref_release(ref);
		if (v < 0 || v != w.last_ver[k])
			writer_fail("get of key %d: version %d, last put %d", k,
				    v, w.last_ver[k]);
	}
	settle(acked, false);
}

static void sync_call(void)
{
	uint8_t acked[NKEYS] = { 0 };
	int err = kvs_store_sync(w.store);

	if (err)
		writer_fail("sync: %s", kvs_strerror(err));
	/* whatever was written is durable now */
	for (int k = 0; k < NKEYS; k++)
		if (w.last_ver[k] >= 0)
			acked[k] = (uint8_t)(1 + w.last_ver[k]);
	settle(acked, false);
}

static __attribute__((noreturn)) void writer(const char *dir, uint64_t seed)
{
	struct kvs_store_io_ops ops = vcache_ops;
	struct kvs_store_opts o;
	uint64_t rng = seed * 31 + 5;
	bool dram;
	int err;

	/* about 1.5 modelled ops a call: mostly inside the stream, now and
	 * then after its end */
	vcache_start(dir, seed ^ 0x5eed, MAX_CALLS * 3 / 2, &hooks);
	memset(&w, 0, sizeof(w));
	for (int k = 0; k < NKEYS; k++)
		w.last_ver[k] = sh->want[k] ? sh->want[k] - 1 : -1;
	round_opts(&o, seed);
	dram = o.dram_capacity > 0;
	o.io = &ops;
	err = kvs_store_open(dir, &o, &w.store);
	if (err)
		writer_fail("open: %s", kvs_strerror(err));
	/* what the checker found is held, durably, at the start */
	for (int k = 0; k < NKEYS; k++) {
		struct entry *e = entry_of(k);

		if (!sh->want[k])
			continue;
		if (!e || !e->seg)
			writer_fail("key %d lost by the reopen", k);
		w.acked_seq[k] = e->seq;
		w.acked_seg[k] = e->seg->id;
	}
	for (sh->calls = 0; sh->calls < MAX_CALLS; sh->calls++) {
		unsigned r = (unsigned)(test_rand(&rng) % 100);
		enum kvs_durability lazy = dram && !o.write_through
						   ? KVS_DURABILITY_MEMORY
						   : KVS_DURABILITY_WRITTEN;

		if (r < 40)
			put_call(&rng, KVS_DURABILITY_DURABLE, 1);
		else if (r < 60)
			put_call(&rng, lazy, 1);
		else if (r < 75)
			put_call(&rng, r & 1 ? KVS_DURABILITY_DURABLE : lazy,
				 2 + (unsigned)(test_rand(&rng) % 3));
		else if (r < 94)
			get_call(&rng);
		else
			sync_call();
	}
	vcache_cut(); /* the stream ended first: the power goes now */
}

/* ---- the checker ---------------------------------------------------- */

struct fsck_check {
	unsigned unexplained, unknown, bad;
};

static bool explained(const struct kvs_fsck_record *r)
{
	/* a verdict of no bytes (an empty file) is at its offset */
	uint64_t end = r->offset + (r->length ? r->length : 1);

	for (uint32_t i = 0; i < sh->nregions; i++) {
		const struct region *g = &sh->regions[i];

		if (g->seg == r->segment && g->off < end &&
		    r->offset < g->off + g->len)
			return true;
	}
	return false;
}

/* Damage only where a write was pending; good records only of keys put. */
static void fsck_cb(void *arg, const struct kvs_fsck_record *r)
{
	struct fsck_check *c = arg;
	int k = r->key_valid ? key_index(&r->key) : -1;

	/* a segment the manifest dropped, its unlink not yet durable: a
	 * leftover the next writable open deletes, nothing lost */
	if (r->status == KVS_FSCK_LEFTOVER)
		return;
	/* data that was durable and is gone: never, under this model */
	if (r->status == KVS_FSCK_MISSING) {
		c->unexplained++;
		print_message("  lost: segment %llu: %s\n",
			      (unsigned long long)r->segment, r->check);
		return;
	}
	if (r->status != KVS_FSCK_GOOD) {
		c->bad++;
		if (!explained(r)) {
			c->unexplained++;
			print_message("  unexplained: segment %llu at %llu "
				      "(%llu bytes): %s\n",
				      (unsigned long long)r->segment,
				      (unsigned long long)r->offset,
				      (unsigned long long)r->length,
				      r->check ? r->check : "?");
		}
	} else if (k < 0 || !sh->ever[k]) {
		c->unknown++;
	}
}

/* Gets every key: a hit is a version put for it, a wanted key is there
 * in the wanted version.  @found[k] gets 1 + version, or 0. */
static void check_gets(struct kvs_store *s, uint8_t *found)
{
	for (int k = 0; k < NKEYS; k++) {
		struct kvs_store_ref *ref;
		int v = -1, err = kvs_store_get(s, &pool[k][0].key, &ref);

		if (err) {
			/* a miss; or a record that failed its check: also a
			 * miss, named so (damage where a write was pending) */
			assert_true(err == -KVS_ENOTFOUND ||
				    err == -KVS_ECORRUPT);
		} else {
			v = version_of(k, kvs_store_ref_data(ref),
				       kvs_store_ref_len(ref));
			kvs_store_ref_release(ref);
			assert_true(v >= 0);
			assert_true(sh->ever[k] & (1u << v));
		}
		if (sh->want[k] && v + 1 != sh->want[k])
			print_message("  key %d: wanted version %d, got %d\n",
				      k, sh->want[k] - 1, v);
		assert_true(!sh->want[k] || v + 1 == sh->want[k]);
		found[k] = (uint8_t)(v + 1);
	}
}

static bool has_superblock(const char *dir)
{
	char path[4200];

	snprintf(path, sizeof(path), "%s/KVSTASH", dir);
	return access(path, F_OK) == 0;
}

/* After a cut: fsck, recovery, with @repair a repair and a clean reopen,
 * a new put; leaves in sh->want what the next phase starts with. */
static void check_after_cut(const char *dir, uint64_t seed, bool repair)
{
	struct kvs_store_opts o;
	struct kvs_store_stats st;
	struct kvs_fsck_report rep;
	struct fsck_check fc = { 0 };
	struct kvs_store *s;
	uint8_t found[NKEYS];
	uint64_t rng = seed * 13 + 3;
	int k, v;

	round_opts(&o, seed);
	if (has_superblock(dir)) {
		assert_int_equal(
			kvs_store_fsck(dir, 0, NULL, fsck_cb, &fc, &rep), 0);
		assert_int_equal(fc.unexplained, 0);
		assert_int_equal(fc.unknown, 0);
	}
	/* real recovery, with the default ops */
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	check_gets(s, found);
	kvs_store_close(s);
	if (repair) {
		assert_int_equal(kvs_store_fsck(dir, KVS_FSCK_REPAIR, NULL,
						NULL, NULL, &rep),
				 0);
		assert_int_equal(kvs_store_fsck(dir, 0, NULL, NULL, NULL, &rep),
				 0);
		assert_int_equal(rep.corrupt + rep.torn + rep.bad_segments, 0);
	}
	/* (repaired: opens clean,) still serves them, takes new puts */
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	kvs_store_stats_get(s, &st);
	if (repair)
		assert_int_equal(st.corrupt_dropped + st.torn_dropped, 0);
	check_gets(s, found);
	k = (int)(test_rand(&rng) % NKEYS);
	v = k % 4 == 0 && (rng & 1);
	sh->ever[k] |= (uint8_t)(1u << v);
	assert_int_equal(kvs_store_put(s, pool[k][v].obj, pool[k][v].len,
				       KVS_DURABILITY_DURABLE, NULL),
			 0);
	kvs_store_close(s);
	/* the put may have evicted others: the next phase starts from what
	 * a fresh open finds (gets alone write nothing) */
	memset(sh->want, 0, NKEYS);
	sh->want[k] = (uint8_t)(1 + v);
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	check_gets(s, found);
	kvs_store_close(s);
	memcpy(sh->want, found, NKEYS);
}

static void run_round(uint64_t seed, uint64_t *calls, uint64_t *kept)
{
	char *dir = test_mkdir();

	bool repaired = true;

	assert_non_null(dir);
	memset(sh, 0, sizeof(*sh));
	for (int phase = 0; phase < PHASES; phase++) {
		uint64_t phase_seed = seed * PHASES + (uint64_t)phase;
		int status;
		pid_t pid;

		sh->failed = 0;
		/* damage left unrepaired is explained by the writes then
		 * pending: the next writer recovers (and crashes) with it */
		if (repaired)
			sh->nregions = 0;
		repaired = phase_seed % 3 != 0;
		pid = fork();
		assert_true(pid >= 0);
		if (pid == 0)
			writer(dir, phase_seed);
		assert_int_equal(waitpid(pid, &status, 0), pid);
		if (sh->failed)
			print_message("  writer: %s\n", sh->why);
		assert_false(sh->failed);
		assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
		for (int k = 0; k < NKEYS; k++)
			*kept += sh->want[k] != 0;
		*calls += sh->calls;
		check_after_cut(dir, phase_seed, repaired);
	}
	test_rmdir(dir);
}

static void test_powercut(void **state)
{
	const char *replay = getenv("KVS_POWERCUT_SEED");
	uint64_t base = replay ? strtoull(replay, NULL, 0)
			       : (uint64_t)time(NULL) * 1000;
	uint64_t calls = 0, kept = 0;
	double t0 = now_s();
	int rounds = 0;

	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE,
		  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	assert_true(sh != MAP_FAILED);
	for (int r = 0; r < (replay ? 1 : ROUNDS); r++) {
		if (now_s() - t0 > TIME_BUDGET_S)
			break;
		print_message("round %d seed %llu\n", r,
			      (unsigned long long)(base + (uint64_t)r));
		run_round(base + (uint64_t)r, &calls, &kept);
		rounds++;
	}
	print_message("%d rounds of %d power cuts, %.1f s: %llu calls, %llu "
		      "durable blocks checked\n",
		      rounds, PHASES, now_s() - t0, (unsigned long long)calls,
		      (unsigned long long)kept);
	assert_true(rounds >= (replay ? 1 : 10));
	assert_true(kept > 0);
	munmap(sh, sizeof(*sh));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_powercut),
	};

	kvs_log_set_level(KVS_LOG_ERR);
	return cmocka_run_group_tests(tests, pool_make, pool_free);
}
