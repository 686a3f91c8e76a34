/*
 * store_internal.h - the store engine's own structure (struct
 * kvs_store), its write batches and its asynchronous engine, over the
 * layers' headers: disk.h (format.c, dir.c, manifest.c, walk.c), io.h
 * (io.c), dram.h (dram.c), index.h (index.c), policy.h (policy.c), nvme.h
 * (nvme.c, segments.c).
 *
 *   format.c   on-disk encodings (pure): superblock, segment header and
 *              footer, record header, manifest, segment names
 *   dir.c      the store directory: lock, superblock, listing, leftovers
 *   manifest.c the manifest: load, publish, built from the segments held
 *   walk.c     walking one segment's log in bounded reads (recovery of
 *              the newest segment, fsck): verdicts good, corrupt, torn
 *   io.c       default ops table: system calls and the io_uring engine
 *   dram.c     the DRAM arena: slabs split into size-classed slots
 *   index.c    hash table from key to entry, intrusive lists
 *   policy.c   the DRAM tier's eviction: prefix-aware ARC, S3-FIFO, LRU
 *   nvme.c     segments: create, append, seal, read, reclaim, compact
 *   recover.c  rebuild the index from the segments at open
 *   store.c    public API: options, keys, open/close
 *   put.c      puts, synchronous and asynchronous (the write batches of
 *              puts, commits and deletes)
 *   get.c      gets (synchronous and asynchronous), lookup, stats
 *   delete.c   deletes: tombstones
 *   reserve.c  reserve-then-commit puts
 *   async.c    the asynchronous engine: its ring, turns, callbacks
 *   fsck.c     offline check and repair
 */
#ifndef KVSTASH_STORE_INTERNAL_H
#define KVSTASH_STORE_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "common/bytes.h"
#include "disk.h"
#include "dram.h"
#include "index.h"
#include "io.h"
#include "kvstash/store.h"
#include "list.h"
#include "nvme.h"
#include "policy.h"

/* ---- the store (store.c) --------------------------------------------- */

struct kvs_store {
	pthread_mutex_t lock;
	char *dir;
	struct store_lock dlock;
	struct kvs_store_opts opts;
	bool read_only;
	uint32_t format_version; /* of the superblock found (1 or 2) */
	const struct kvs_store_io_ops *io; /* &io_ops */
	struct kvs_store_io_ops io_ops; /* opts.io, NULLs filled */
	struct kvs_store_ring *ring;
	unsigned inflight; /* requests started, not completed */
	bool direct;
	struct index index;
	/* DRAM tier */
	struct dram dram;
	bool dram_on;
	struct dram_policy pol; /* prefix and lru (policy.c) */
	struct list small, main, ghost; /* s3fifo */
	uint64_t small_bytes, main_bytes;
	uint64_t nmain, nghost_d;
	uint64_t dram_objects, dram_obj_bytes;
	bool registered;
	/* NVMe tier */
	bool nvme_on;
	struct list segments; /* oldest first; the last is the head */
	uint64_t nsegs;
	uint64_t next_seg_id;
	uint64_t next_seq;
	uint64_t max_segs;
	uint64_t nvme_objects, nvme_obj_bytes, nvme_file_bytes;
	uint64_t nvme_tombstones;
	struct list tombs; /* entries holding a tombstone */
	/* the oldest segment that may hold a record of a key whose entry is
	 * gone (freed after a failed write, say): tombstones are dropped
	 * only once no segment from there on is older than theirs */
	uint64_t stale_floor;
	struct list nghost; /* NVMe ghosts, oldest at the tail */
	uint64_t nghost_n;
	struct list reservations; /* reserve.c, oldest last */
	struct store_async *async; /* async.c, made at first use */
	uint8_t *scratch; /* aligned bounce buffer, one page */
	/* the manifest as last read or published: missing ids stay listed
	 * (reported at every open) until fsck --repair */
	bool manifest_ok; /* a manifest is in force (format 2) */
	uint64_t manifest_gen;
	uint64_t *missing; /* ids the manifest lists, with no file */
	size_t nmissing;
	bool nospc_logged; /* one message per full-disk episode */
	bool clean_on_disk; /* the manifest says the head is closed cleanly
			     * and nothing was written since */
	uint64_t nrefs; /* references handed out by gets, not released */
	struct kvs_store_stats st;
};

/* put.c: the body of kvs_store_put_batch, lock held.  With @adopt
 * (reserve.c): object i already sits in the DRAM slot adopt[i] of class
 * adopt_cls[i]; a slot that becomes its entry's is set to NULL in
 * @adopt, those left are still the caller's. */
int store_put_batch(struct kvs_store *s, const uint8_t *const *objs,
		    const size_t *lens, size_t n,
		    enum kvs_durability durability, int *results,
		    uint8_t **adopt, const int *adopt_cls);

/* put.c: the level a put at *@dur gets (raised by write-through, or
 * without a DRAM tier), or why it is refused (logged). */
int put_level(struct kvs_store *s, enum kvs_durability *dur);

/* put.c: an asynchronous write batch (puts, commits, deletes): made for
 * @n results at @dur (already settled by put_level), staged, then
 * started by wb_go; NULL without memory. */
struct wbatch;
struct wbatch *wb_new(size_t n, enum kvs_durability dur, int *results,
		      kvs_store_done_fn done, void *arg);
/* Frees a batch wb_go did not start. */
void wb_free(struct wbatch *w);
/* Stages object @i (verified, copied or adopted from *@adopt of class
 * @adopt_cls, entry pinned); results[i] set when it is refused or needs
 * no write.  Lock held. */
void wb_stage(struct kvs_store *s, struct wbatch *w, size_t i,
	      const uint8_t *obj, size_t len, uint8_t **adopt, int adopt_cls);
/* Stages the tombstone of @t (delete_prepare's) for result @i; 0 or
 * -ENOMEM.  Lock held. */
int wb_stage_tomb(struct kvs_store *s, struct wbatch *w, size_t i,
		  struct entry *t);
/* Starts @w: reservations, writes, syncs, then its callback.  Lock
 * held. */
void wb_go(struct kvs_store *s, struct wbatch *w);

/* delete.c: takes the object of @key out of both tiers.  *@tomb: the
 * entry (pinned by nobody, marked tomb) whose tombstone must now be
 * written (its page stamped from the entry, then attached), or NULL when
 * no record of the key can be on disk.  0, -KVS_ENOTFOUND or -ENOMEM. */
int delete_prepare(struct kvs_store *s, const struct kvs_store_key *key,
		   struct entry **tomb);
/* The tombstone of @t could not be written (@err): logged, @t freed. */
void delete_failed(struct kvs_store *s, struct entry *t, int err);
/* 0, or why a delete at @durability is refused (logged). */
int delete_check(struct kvs_store *s, enum kvs_durability durability);

/* ---- the asynchronous engine (async.c) ------------------------------- */

struct abatch;

/* One device request of an asynchronous batch. */
struct aio {
	struct kvs_store_io_req req;
	/* lock held: @req finished (res set).  May queue more requests and
	 * make batches runnable, never reserve space (no roll here). */
	void (*complete)(struct kvs_store *s, struct aio *io);
	struct abatch *batch;
	struct aio *next; /* waiting to start, or in flight */
};

/* An asynchronous batch, embedded in what each kind keeps. */
struct abatch {
	kvs_store_done_fn done;
	void *arg;
	int status;
	/* lock held, at the engine's top level (an asynchronous call or
	 * kvs_store_poll, never a roll's drain): goes on (reserves, queues
	 * writes or syncs; a roll runs here) or finishes the batch */
	void (*step)(struct kvs_store *s, struct abatch *b);
	/* after the callback, without the lock: frees the batch */
	void (*release)(struct abatch *b);
	bool runnable;
	struct abatch *next; /* runnable, waiting for the head, finished */
};

/* The engine of @s, made at the first use (lock held): its ring, or NULL
 * when there is no io_uring (the calls then run synchronously); -ENOMEM
 * through *@err. */
struct store_async *async_get(struct kvs_store *s, int *err);
/* Whether the engine has a ring (lock held). */
bool async_has_ring(const struct store_async *a);
/* Queues @io to start once fewer than queue_depth are in flight; lock
 * held.  Nothing reaches the kernel before the next kvs_store_poll(). */
void async_queue(struct kvs_store *s, struct aio *io);
/* A batch was made: counted until it finishes; lock held. */
void async_begin(struct kvs_store *s, struct abatch *b);
/* @b is to be stepped at the engine's next top level; lock held. */
void async_runnable(struct kvs_store *s, struct abatch *b);
/* @b waits until no write is in flight to the newest segment (a roll
 * waits for them); lock held. */
void async_wait_head(struct kvs_store *s, struct abatch *b);
/* The writes in flight to a segment all completed: the batches waiting
 * for the head go on; lock held. */
void async_head_drained(struct kvs_store *s);
/* @b finished with @status: its callback runs at the next
 * kvs_store_poll(); lock held. */
void async_finish(struct kvs_store *s, struct abatch *b, int status);
/* Starts what waits, collects what finished, steps what is runnable,
 * until nothing moves; lock held, at the top level. */
void async_turn(struct kvs_store *s);
/* Completes the asynchronous writes in flight to @seg (before a roll);
 * lock held.  Steps no batch. */
void async_drain_seg(struct kvs_store *s, struct segment *seg);
/* async.c: finishes every batch (callbacks included), frees the engine;
 * without the lock. */
void async_fini(struct kvs_store *s);
/* store.c: registers the DRAM arena with @ring's fixed buffers; 0 or
 * -errno. */
int arena_register(struct kvs_store *s, struct kvs_store_ring *ring);

/* reserve.c: forgets the reservations at close (the arena goes). */
void reservations_fini(struct kvs_store *s);

/* recover.c */
int recover(struct kvs_store *s);
/* Indexes a record of @seg found at @off (newest sequence number wins). */
int index_record(struct kvs_store *s, struct segment *seg, uint64_t off,
		 const struct rec_header *h);

/* Checks @rec of @e read from NVMe; on failure drops it and counts. */
int store_check_read(struct kvs_store *s, struct entry *e, const uint8_t *rec);

#endif
