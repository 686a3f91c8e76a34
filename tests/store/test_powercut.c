/*
 * test_powercut.c - the crash test: writer processes killed at random
 * operations and power cuts between them, checked against an expected
 * state kept in a file across every kill and reopen (the manner of
 * RocksDB's crash test), to check the promises of store.h: a block
 * acknowledged WRITTEN survives kill -9 of its process, one acknowledged
 * DURABLE survives power loss too.
 *
 * The model (vcache.h): a disk with a volatile write cache under a file
 * system that keeps no more than POSIX promises.  Writers run the store on
 * a real directory through an ops table that does every call for real and
 * remembers what is not durable yet.  A write or size change (ftruncate,
 * fallocate, O_TRUNC) of a file is durable at the file's next fsync or
 * fdatasync; creating a file, rename and unlink at the next fsync of the
 * directory (the weakest POSIX promise, which the store's contract relies
 * on), never by fsync of the file; an unlinked file can come back.  The
 * model's state is shared by the writer processes of one power cycle:
 * a killed writer's files stay as it wrote them (the page cache survives
 * it), and what it left not durable stays so for the next writer.  At a
 * random modelled operation of the last writer (which then never happens)
 * the power goes: each file is rebuilt from its durable content plus its
 * pending writes in order, each applied whole, dropped or torn (each
 * 512-byte sector new or old), each size change and directory operation
 * kept or not.
 *
 * Each writer mixes durable puts (single and batched), WRITTEN / MEMORY
 * puts, re-puts of the same bytes, a second version of some keys,
 * deletes at every level (a key deleted stays a miss after a kill, and
 * after a power cut when the delete was DURABLE), gets and syncs on a
 * store (a third of the puts and half the deletes through the
 * asynchronous batches) of 3 segments of 256 KiB (half the puts go to a
 * key put lately, by this writer or a killed one, so that the same bytes
 * are often put again across a kill; a writer after a killed one starts
 * with a durable re-put of the last key put WRITTEN, and half the time the
 * power goes within a few operations after: the acknowledgement of a
 * record a killed writer left unsynced is what is most at risk), so
 * segment creation,
 * rollover, reclaim (with carry-forward) and compaction happen under the
 * kills and the cut.  A writer that is not the cycle's last is killed at a
 * random operation of its own (one that runs out of calls closes the
 * store cleanly instead); the next one first gets every key: each block
 * acknowledged WRITTEN or DURABLE and still held at the kill must be there,
 * byte for byte (the expected state).  After the cut, the real recovery
 * (default ops) must serve every block acknowledged DURABLE whose record
 * still held it when the power went (not evicted, not carried: carrying is
 * best effort), byte for byte, in particular one a writer acknowledged by
 * keeping a record an earlier, killed writer had left unsynced; no get may
 * return anything but a version put for its key; every record fsck finds
 * damaged must overlap a write pending at the cut and none may be missing;
 * --repair leaves a store that reopens clean and takes new puts.  Each
 * round runs two cycles (a fresh store, then the recovered one: a third of
 * the time unrepaired, so the writers recover, run and are cut again with
 * the damage) and prints its seed; KVS_POWERCUT_SEED=<seed> replays that
 * round alone.  The rounds run for KVS_POWERCUT_SECONDS (default 6, as in
 * CI; longer on demand), at least 10 of them.
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
	MIN_ROUNDS = 10,
	CYCLES = 2,
	MAX_WRITERS = 3, /* a cycle: up to 2 killed, then the cut */
	MAX_CALLS = 300,
	MAX_REGIONS = 8192,
	MAX_UNLINKED = 64,
};

#define SEG_SIZE (256ull << 10)
#define DEFAULT_SECONDS 6.0

/* ---- the expected state: a file, shared by the writers and the checker */

struct region {
	uint64_t seg, off, len;
};

struct expected {
	int failed; /* a writer found something wrong */
	char why[512];
	uint8_t want[NKEYS]; /* 1 + version owed after a power cut, or 0 */
	uint8_t written[NKEYS]; /* 1 + version owed after a kill, or 0 */
	uint8_t ever[NKEYS]; /* bit v: version v was put */
	/* deleted, acknowledged DURABLE (a miss after a power cut) or
	 * WRITTEN (a miss after a kill), and not put since */
	uint8_t gone_want[NKEYS], gone_written[NKEYS];
	int recent[8]; /* the last keys put, by any writer */
	uint64_t nrecent; /* puts recorded there */
	int lazy_key; /* the last key put WRITTEN (not DURABLE), or -1 */
	uint64_t calls, ops, kills, clean_exits, kill_checks;
	uint64_t gone_checks; /* deleted keys checked after a kill or cut */
	uint32_t nregions;
	struct region regions[MAX_REGIONS]; /* writes pending at the cut */
};

static struct expected *sh;
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
	for (int k = 0; k < NKEYS; k++)
		for (int v = 0; v < NVER; v++) {
			struct test_blk *b = &pool[k][v];

			b->obj = test_block_version((uint64_t)k, (uint64_t)v,
						    (uint16_t)(1 + k % 8),
						    &b->len, &b->key);
			if (!b->obj)
				return -1;
		}
	vcache_init();
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

/* The writer's view of the store, to keep the expected state true. */
static struct {
	struct kvs_store *store;
	uint64_t want_seq[NKEYS], written_seq[NKEYS]; /* records owed */
	uint64_t want_seg[NKEYS], written_seg[NKEYS];
	int last_ver[NKEYS]; /* version last put or found, -1 none */
	uint8_t in_call[NKEYS]; /* bit v: the call under way puts version v */
	uint8_t del_call[NKEYS]; /* the call under way deletes the key */
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

static struct entry *entry_of(int k)
{
	return index_find(&w.store->index, &pool[k][0].key);
}

/* Whether the record of key @k owed at (@seq, @seg) may be gone by the
 * call under way: reclaimed (the store drops a segment from its index and
 * its manifest before it unlinks the file), moved, or replaced by another
 * version of the key. */
static bool maybe_dropped(int k, uint8_t owed, uint64_t seq, uint64_t seg)
{
	struct entry *e = w.store ? entry_of(k) : NULL;

	return was_unlinked(seg) ||
	       (w.store && (!e || !e->seg || e->tomb || e->seq != seq)) ||
	       (w.in_call[k] & ~(1u << (owed - 1))) || w.del_call[k];
}

/* The writer stops (power cut or kill) inside a call: what is owed is
 * what was acknowledged and still held at the last return to the writer,
 * less what the call under way may legitimately have dropped. */
static void forget_dropped(void)
{
	for (int k = 0; k < NKEYS; k++) {
		if (sh->want[k] &&
		    maybe_dropped(k, sh->want[k], w.want_seq[k], w.want_seg[k]))
			sh->want[k] = 0;
		if (sh->written[k] &&
		    maybe_dropped(k, sh->written[k], w.written_seq[k],
				  w.written_seg[k]))
			sh->written[k] = 0;
		/* a put under way may have landed */
		if (w.in_call[k])
			sh->gone_want[k] = sh->gone_written[k] = 0;
	}
}

static void on_cut(uint64_t ops)
{
	forget_dropped();
	sh->ops = ops;
}

static void on_died(uint64_t ops)
{
	forget_dropped();
	sh->kills++;
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
	.died = on_died,
	.unlinked = on_unlinked,
	.pending = on_pending,
};

/* ---- the writer ----------------------------------------------------- */

/* After a call returned: forget what it moved or dropped, then take its
 * acknowledgements (@written[k], @durable[k]: 1 + version acknowledged;
 * with @put, each must have its record on NVMe). */
static void settle(const uint8_t *written, const uint8_t *durable, bool put)
{
	for (int k = 0; k < NKEYS; k++) {
		struct entry *e = entry_of(k);
		bool held = e && e->seg && !e->tomb;

		if (sh->want[k] && (!held || e->seq != w.want_seq[k]))
			sh->want[k] = 0;
		if (sh->written[k] && (!held || e->seq != w.written_seq[k]))
			sh->written[k] = 0;
		if (put && written[k] && !held)
			writer_fail("key %d acknowledged written, no record",
				    k);
		if (written[k] && held) {
			sh->written[k] = written[k];
			w.written_seq[k] = e->seq;
			w.written_seg[k] = e->seg->id;
		}
		if (durable[k] && held) {
			sh->want[k] = durable[k];
			w.want_seq[k] = e->seq;
			w.want_seg[k] = e->seg->id;
		}
	}
	memset(w.in_call, 0, sizeof(w.in_call));
	memset(w.del_call, 0, sizeof(w.del_call));
	w.nunlinked = 0;
}

static void async_done(void *arg, int status)
{
	*(int *)arg = 1;
}

/* Runs an asynchronous batch to its end, as a loop would (the model's
 * requests complete when they start): @rc is what its call returned. */
static void async_wait(int rc, int *called)
{
	if (rc < 0)
		writer_fail("asynchronous batch refused: %s", kvs_strerror(rc));
	for (int i = 0; rc == 0 && !*called && i < 100000; i++)
		kvs_store_poll(w.store);
	if (rc == 0 && !*called)
		writer_fail("asynchronous batch never finished");
}

static void put_call(uint64_t *rng, enum kvs_durability dur, unsigned n)
{
	const uint8_t *objs[4];
	size_t lens[4];
	int ks[4], vs[4], res[4];
	uint8_t written[NKEYS] = { 0 }, durable[NKEYS] = { 0 };

	for (unsigned i = 0; i < n; i++) {
		/* half the time a key put lately, maybe by a writer since
		 * killed: its same bytes again (a record kept, not written) */
		if (sh->nrecent && test_rand(rng) % 2) {
			uint64_t held = sh->nrecent < 8 ? sh->nrecent : 8;

			ks[i] = sh->recent[test_rand(rng) % held];
			vs[i] = w.last_ver[ks[i]] > 0;
		} else {
			ks[i] = (int)(test_rand(rng) % NKEYS);
			/* a quarter of the keys have a second version */
			vs[i] = ks[i] % 4 == 0 && test_rand(rng) % 4 == 0;
		}
		sh->recent[sh->nrecent++ % 8] = ks[i];
		objs[i] = pool[ks[i]][vs[i]].obj;
		lens[i] = pool[ks[i]][vs[i]].len;
		w.in_call[ks[i]] |= (uint8_t)(1u << vs[i]);
		sh->ever[ks[i]] |= (uint8_t)(1u << vs[i]);
	}
	/* a third of them through the asynchronous engine */
	if (test_rand(rng) % 3 == 0) {
		int called = 0;

		async_wait(kvs_store_put_batch_async(w.store, objs, lens, n,
						     dur, res, async_done,
						     &called),
			   &called);
	} else {
		kvs_store_put_batch(w.store, objs, lens, n, dur, res);
	}
	for (unsigned i = 0; i < n; i++) {
		int k = ks[i];

		if (res[i])
			writer_fail("put of key %d failed: %s", k,
				    kvs_strerror(res[i]));
		w.last_ver[k] = vs[i];
		sh->gone_want[k] = sh->gone_written[k] = 0;
		sh->lazy_key = dur == KVS_DURABILITY_WRITTEN ? k : -1;
		/* a later put of the same key in the batch wins */
		written[k] = durable[k] = 0;
		if (dur >= KVS_DURABILITY_WRITTEN)
			written[k] = (uint8_t)(1 + vs[i]);
		if (dur == KVS_DURABILITY_DURABLE)
			durable[k] = (uint8_t)(1 + vs[i]);
	}
	settle(written, durable, true);
}

/* A durable put of the key put last WRITTEN (or else of the key put last),
 * with the bytes it was put with. */
static void put_recent_durable(uint64_t *rng)
{
	uint8_t written[NKEYS] = { 0 }, durable[NKEYS] = { 0 };
	int k = sh->lazy_key >= 0 ? sh->lazy_key
				  : sh->recent[(sh->nrecent - 1) % 8];
	int v = w.last_ver[k] > 0;
	int err;

	w.in_call[k] |= (uint8_t)(1u << v);
	sh->ever[k] |= (uint8_t)(1u << v);
	err = kvs_store_put(w.store, pool[k][v].obj, pool[k][v].len,
			    KVS_DURABILITY_DURABLE, NULL);
	if (err)
		writer_fail("put of key %d failed: %s", k, kvs_strerror(err));
	w.last_ver[k] = v;
	sh->gone_want[k] = sh->gone_written[k] = 0;
	sh->lazy_key = -1;
	written[k] = durable[k] = (uint8_t)(1 + v);
	settle(written, durable, true);
}

/* Deletes one to three keys (half of them put lately): acknowledged, a
 * key is a miss from then on, after a kill (any level: a tombstone is
 * always written) and, DURABLE, after a power cut. */
static void delete_call(uint64_t *rng, enum kvs_durability dur)
{
	uint8_t none[NKEYS] = { 0 };
	struct kvs_store_key keys[3];
	int ks[3], res[3];
	unsigned n = 1 + (unsigned)(test_rand(rng) % 3);

	for (unsigned i = 0; i < n; i++) {
		if (sh->nrecent && test_rand(rng) % 2) {
			uint64_t held = sh->nrecent < 8 ? sh->nrecent : 8;

			ks[i] = sh->recent[test_rand(rng) % held];
		} else {
			ks[i] = (int)(test_rand(rng) % NKEYS);
		}
		keys[i] = pool[ks[i]][0].key;
		w.del_call[ks[i]] = 1;
	}
	if (test_rand(rng) % 2) {
		int called = 0;

		async_wait(kvs_store_delete_batch_async(w.store, keys, n, dur,
							res, async_done,
							&called),
			   &called);
	} else if (kvs_store_delete_batch(w.store, keys, n, dur, res)) {
		writer_fail("delete: %s", kvs_strerror(res[0]));
	}
	for (unsigned i = 0; i < n; i++) {
		int k = ks[i];

		if (res[i] && res[i] != -KVS_ENOTFOUND)
			writer_fail("delete of key %d: %s", k,
				    kvs_strerror(res[i]));
		w.last_ver[k] = -1;
		if (res[i])
			continue; /* nothing was there: nothing promised */
		sh->written[k] = sh->want[k] = 0;
		sh->gone_written[k] = 1;
		if (dur == KVS_DURABILITY_DURABLE)
			sh->gone_want[k] = 1;
		if (sh->lazy_key == k)
			sh->lazy_key = -1;
	}
	settle(none, none, false);
}

static void get_call(uint64_t *rng)
{
	uint8_t none[NKEYS] = { 0 };
	int k = (int)(test_rand(rng) % NKEYS);
	struct kvs_store_ref *ref;
	int err = kvs_store_get(w.store, &pool[k][0].key, &ref);

	/* a miss; or a record that failed its check: also a miss, named so
	 * (damage a cut left where a write was pending) */
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
	settle(none, none, false);
}

static void sync_call(void)
{
	uint8_t none[NKEYS] = { 0 }, durable[NKEYS] = { 0 };
	int err = kvs_store_sync(w.store);

	if (err)
		writer_fail("sync: %s", kvs_strerror(err));
	sh->lazy_key = -1;
	/* whatever was written is durable now, by earlier writers too */
	for (int k = 0; k < NKEYS; k++)
		durable[k] = sh->written[k];
	settle(none, durable, false);
}

/* A writer's first act: every key read back.  What a killed writer was
 * told WRITTEN or DURABLE and still held must be there as it was; the
 * versions found are the ones later gets expect. */
static void check_kill_promise(void)
{
	for (int k = 0; k < NKEYS; k++) {
		struct kvs_store_ref *ref;
		struct entry *e;
		int v = -1, err = kvs_store_get(w.store, &pool[k][0].key, &ref);

		if (err && err != -KVS_ENOTFOUND && err != -KVS_ECORRUPT)
			writer_fail("get of key %d: %s", k, kvs_strerror(err));
		if (!err) {
			v = version_of(k, kvs_store_ref_data(ref),
				       kvs_store_ref_len(ref));
			kvs_store_ref_release(ref);
			if (v < 0 || !(sh->ever[k] & (1u << v)))
				writer_fail("key %d: a version never put", k);
		}
		if (sh->written[k] && v + 1 != sh->written[k])
			writer_fail("key %d: acknowledged version %d, after "
				    "the kill %d",
				    k, sh->written[k] - 1, v);
		if (sh->gone_written[k] && v >= 0)
			writer_fail("key %d: deleted, version %d after the "
				    "kill",
				    k, v);
		w.last_ver[k] = v;
		e = entry_of(k);
		if (sh->written[k] || sh->want[k]) {
			if (!e || !e->seg || e->tomb)
				writer_fail("key %d owed, no record", k);
			w.written_seq[k] = w.want_seq[k] = e->seq;
			w.written_seg[k] = w.want_seg[k] = e->seg->id;
		}
		sh->kill_checks += sh->written[k] != 0;
		sh->gone_checks += sh->gone_written[k];
	}
}

/* Writer @life of @lives in this power cycle: killed at a random
 * operation unless it is the last, which the power cut ends. */
static __attribute__((noreturn)) void writer(const char *dir, uint64_t seed,
					     int life, int lives)
{
	struct kvs_store_io_ops ops = vcache_ops;
	struct kvs_store_opts o;
	uint64_t rng = seed * 31 + 5 + (uint64_t)life * 7919;
	bool last = life == lives - 1;
	bool dram;
	int err;

	/* about 1.5 modelled ops a call: mostly inside the stream, now and
	 * then after its end */
	if (life == 0)
		vcache_start(dir, seed ^ 0x5eed, MAX_CALLS * 3 / 2, !last,
			     &hooks);
	else
		vcache_resume(MAX_CALLS * 3 / 2, !last);
	memset(&w, 0, sizeof(w));
	round_opts(&o, seed);
	dram = o.dram_capacity > 0;
	o.io = &ops;
	err = kvs_store_open(dir, &o, &w.store);
	if (err)
		writer_fail("open: %s", kvs_strerror(err));
	check_kill_promise();
	memset(w.in_call, 0, sizeof(w.in_call));
	vcache_arm();
	for (sh->calls = 0; sh->calls < MAX_CALLS; sh->calls++) {
		unsigned r = (unsigned)(test_rand(&rng) % 100);

		/* after a kill, first a durable re-put of what the killed
		 * writer put lately (its record may be there, unsynced) */
		if (sh->calls == 0 && life > 0 && sh->nrecent) {
			put_recent_durable(&rng);
			continue;
		}
		enum kvs_durability lazy = dram && !o.write_through
						   ? KVS_DURABILITY_MEMORY
						   : KVS_DURABILITY_WRITTEN;

		if (r < 36)
			put_call(&rng, KVS_DURABILITY_DURABLE, 1);
		else if (r < 54)
			put_call(&rng, lazy, 1);
		else if (r < 68)
			put_call(&rng, r & 1 ? KVS_DURABILITY_DURABLE : lazy,
				 2 + (unsigned)(test_rand(&rng) % 3));
		else if (r < 76)
			delete_call(&rng, (enum kvs_durability)(r % 3));
		else if (r < 94)
			get_call(&rng);
		else
			sync_call();
	}
	if (last)
		vcache_cut(); /* the stream ended first: the power goes now */
	/* not killed before its stream ended: it closes the store (whose
	 * spills may reclaim segments: what they held is not owed) */
	memset(w.in_call, 0, sizeof(w.in_call));
	if (kvs_store_close(w.store))
		writer_fail("close refused");
	w.store = NULL;
	forget_dropped();
	sh->clean_exits++;
	_exit(0);
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

/* Damage only where a write was pending; good records only of keys put;
 * nothing missing. */
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
		if (sh->gone_want[k] && v >= 0)
			print_message("  key %d: deleted durably, got %d\n", k,
				      v);
		assert_true(!sh->gone_want[k] || v < 0);
		sh->gone_checks += sh->gone_want[k];
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
 * a new put; leaves in the expected state what the next cycle starts
 * with. */
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
	kvs_store_stats_get(s, &st);
	assert_int_equal(st.lost_segments, 0);
	check_gets(s, found);
	assert_int_equal(kvs_store_close(s), 0);
	if (repair) {
		assert_int_equal(kvs_store_fsck(dir, KVS_FSCK_REPAIR, NULL,
						NULL, NULL, &rep),
				 0);
		assert_int_equal(kvs_store_fsck(dir, 0, NULL, NULL, NULL, &rep),
				 0);
		assert_int_equal(rep.corrupt + rep.torn + rep.bad_segments +
					 rep.missing + rep.leftovers,
				 0);
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
	sh->gone_want[k] = sh->gone_written[k] = 0;
	assert_int_equal(kvs_store_put(s, pool[k][v].obj, pool[k][v].len,
				       KVS_DURABILITY_DURABLE, NULL),
			 0);
	assert_int_equal(kvs_store_close(s), 0);
	/* the put may have evicted others: the next cycle starts from what
	 * a fresh open finds (gets alone write nothing) */
	memset(sh->want, 0, NKEYS);
	sh->want[k] = (uint8_t)(1 + v);
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	check_gets(s, found);
	assert_int_equal(kvs_store_close(s), 0);
	memcpy(sh->want, found, NKEYS);
	memcpy(sh->written, found, NKEYS);
	memset(sh->gone_want, 0, NKEYS);
	memset(sh->gone_written, 0, NKEYS);
}

static void run_round(uint64_t seed, uint64_t *calls, uint64_t *kept)
{
	char *dir = test_mkdir();
	bool repaired = true;

	assert_non_null(dir);
	memset(sh, 0, offsetof(struct expected, recent));
	sh->nrecent = 0;
	sh->lazy_key = -1;
	sh->nregions = 0;
	for (int cycle = 0; cycle < CYCLES; cycle++) {
		uint64_t cycle_seed = seed * CYCLES + (uint64_t)cycle;
		int lives = 1 + (int)(cycle_seed / 7 % MAX_WRITERS);

		/* damage left unrepaired is explained by the writes then
		 * pending: the next writers recover (and are cut) with it */
		if (repaired)
			sh->nregions = 0;
		repaired = cycle_seed % 3 != 0;
		for (int life = 0; life < lives; life++) {
			int status;
			pid_t pid;

			sh->failed = 0;
			pid = fork();
			assert_true(pid >= 0);
			if (pid == 0)
				writer(dir, cycle_seed, life, lives);
			assert_int_equal(waitpid(pid, &status, 0), pid);
			if (sh->failed)
				print_message("  writer %d of %d: %s\n",
					      life + 1, lives, sh->why);
			assert_false(sh->failed);
			assert_true(WIFEXITED(status) &&
				    WEXITSTATUS(status) == 0);
			*calls += sh->calls;
		}
		for (int k = 0; k < NKEYS; k++)
			*kept += sh->want[k] != 0;
		check_after_cut(dir, cycle_seed, repaired);
	}
	test_rmdir(dir);
}

/* The expected state lives in a file (mapped shared): it outlives every
 * writer, and what a failed run leaves can be looked at. */
static struct expected *expected_map(char *path, size_t len)
{
	const char *base = getenv("KVS_TEST_DIR");
	struct expected *e;
	int fd;

	snprintf(path, len, "%s/powercut-expected-XXXXXX", base ? base : ".");
	fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, sizeof(*e)), 0);
	e = mmap(NULL, sizeof(*e), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	assert_true(e != MAP_FAILED);
	return e;
}

static void test_powercut(void **state)
{
	const char *replay = getenv("KVS_POWERCUT_SEED");
	const char *secs = getenv("KVS_POWERCUT_SECONDS");
	double budget = secs ? strtod(secs, NULL) : DEFAULT_SECONDS;
	uint64_t base = replay ? strtoull(replay, NULL, 0)
			       : (uint64_t)time(NULL) * 1000;
	uint64_t calls = 0, kept = 0;
	double t0 = now_s();
	char path[4200];
	int rounds = 0;

	sh = expected_map(path, sizeof(path));
	for (uint64_t r = 0;; r++) {
		if (replay ? r == 1
			   : now_s() - t0 > budget && rounds >= MIN_ROUNDS)
			break;
		print_message("round %llu seed %llu\n", (unsigned long long)r,
			      (unsigned long long)(base + r));
		run_round(base + r, &calls, &kept);
		rounds++;
	}
	print_message("%d rounds, %.1f s: %llu calls, %llu writers killed "
		      "(%llu blocks checked after a kill), %llu closed, "
		      "%llu durable blocks checked after a power cut, %llu "
		      "deleted blocks checked missing\n",
		      rounds, now_s() - t0, (unsigned long long)calls,
		      (unsigned long long)sh->kills,
		      (unsigned long long)sh->kill_checks,
		      (unsigned long long)sh->clean_exits,
		      (unsigned long long)kept,
		      (unsigned long long)sh->gone_checks);
	assert_true(rounds >= (replay ? 1 : MIN_ROUNDS));
	assert_true(kept > 0);
	munmap(sh, sizeof(*sh));
	unlink(path);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_powercut),
	};

	if (!getenv("KVS_LOG_LEVEL")) /* set it to follow a replay */
		kvs_log_set_level(KVS_LOG_ERR);
	return cmocka_run_group_tests(tests, pool_make, pool_free);
}
