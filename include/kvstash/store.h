/*
 * store - the cache engine: a DRAM tier and an NVMe tier holding encoded
 * kvformat objects (sealed blocks and residual tails) byte for byte.
 *
 * A process opens a store directory directly (like SQLite); the network
 * service puts the same engine behind the network.  Layout of a store
 * directory, details in store/README.md:
 *   KVSTASH          superblock: magic + store format version, two copies
 *                    (published by write -> fsync -> rename -> fsync of the
 *                    directory)
 *   MANIFEST         which segments exist, and whether the head was closed
 *                    cleanly (same publication), so that a segment deleted
 *                    or cut short is reported, never silently lost
 *   seg-<id>.kvs     log segments: a 4096-byte segment header, then records,
 *                    each [128-byte record header][object][zero pad] padded
 *                    to 4096 bytes; a sealed segment ends with a footer page
 *                    (its length and record count).
 * The directory itself is flock()ed: exclusively by a writer, shared by
 * read-only opens (opts.read_only).
 *
 * The key of an object is (span id = header ident.block_id, layer).
 * The DRAM tier lives only as long as the process: the persistent state is
 * the NVMe tier, rebuilt from the segments at every open.
 *
 * Durability levels (what an acknowledgement means):
 *   KVS_DURABILITY_MEMORY   in this process's DRAM tier only; spilled to the
 *                           NVMe tier on eviction or at close.
 *   KVS_DURABILITY_WRITTEN  the record write completed (O_DIRECT: handed to
 *                           the device; buffered fallback: page cache).
 *                           Survives kill -9 of the process, not power loss.
 *   KVS_DURABILITY_DURABLE  written and fdatasync()ed (the segment file's
 *                           directory entry was fsync()ed when it was
 *                           created): survives kill -9 and power loss.
 *
 * All functions are thread safe (one mutex per store; the asynchronous
 * batches hold it to prepare and to finish their I/O, never while the
 * device works); a reference returned by a get pins its bytes until
 * released, and the store cannot be closed while one is held.  Deletes
 * are logged by tombstone records and kept at their level as puts are.
 * store/README.md ("Guarantees") states the promises in full.
 */
#ifndef KVSTASH_STORE_H
#define KVSTASH_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "kvstash/kvformat.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1: no manifest, one superblock; 2: no tombstones (deletes were not
 * persistent); 3: tombstone records.  Older stores are read as they are
 * and upgraded by the first writable open. */
#define KVS_STORE_FORMAT_VERSION 3
#define KVS_STORE_ALIGN 4096u /* record and I/O alignment */
#define KVS_STORE_RECORD_HEADER 128u /* bytes before the object */
/* Bytes of a segment that hold no record: its header page and, once it is
 * sealed, its footer page. */
#define KVS_STORE_SEGMENT_OVERHEAD (2u * KVS_STORE_ALIGN)
#define KVS_STORE_KEY_TEXT 76 /* "64 hex:layer" + NUL, max */

struct kvs_store;

/* The store key of an object. */
struct kvs_store_key {
	uint8_t span_id[KVS_ID_SIZE];
	uint32_t layer;
};

enum kvs_durability {
	KVS_DURABILITY_MEMORY = 0,
	KVS_DURABILITY_WRITTEN = 1,
	KVS_DURABILITY_DURABLE = 2,
};

/* ---- I/O ops table (tests inject faults here) ------------------------ */

enum kvs_store_io_op {
	KVS_STORE_IO_READ = 1,
	KVS_STORE_IO_WRITE = 2,
	KVS_STORE_IO_SYNC = 3, /* fdatasync of @fd (buf, len, off unused) */
};

/* One read, write or sync.  @res and @done are set when it completes; the
 * request must stay in place until then. */
struct kvs_store_io_req {
	uint8_t op; /* enum kvs_store_io_op */
	int fd;
	void *buf;
	uint32_t len;
	uint64_t off;
	int buf_index; /* registered buffer, or -1 */
	int32_t res; /* out: bytes moved (0 for a sync) or -errno */
	bool done; /* out */
};

struct kvs_store_ring; /* io_uring engine, opaque */

/*
 * Every system call the store makes.  Each returns what the system call
 * returns, except that errors are -errno.  Data reads and writes go
 * through @start and @complete: @start begins one request (the store keeps
 * at most queue_depth in flight) and returns 0 or -errno (then it did not
 * start); a request may also complete inside @start.  @complete waits for
 * at least @min started requests to finish (0: none, it only collects
 * what finished), sets their res and done, and returns how many finished.
 * Without io_uring @start runs the request at once.  The asynchronous
 * batches use a ring of their own on which @start only queues a request
 * and @submit hands everything queued to the kernel in one system call
 * (io_uring_submit), once per turn of the caller's event loop: 0, or
 * -errno and then every request it held is done with that error and
 * none reaches the kernel later.  They also sync through @start
 * (KVS_STORE_IO_SYNC): a table that replaces @fdatasync to model a disk
 * must handle those too.  Directory housekeeping goes through the table
 * too: @mkdir (creating a store), @open and @lock (the directory's flock),
 * @list (finding segments), @stat, @space (free bytes, before a segment is
 * created) and @seek_data (skipping holes).  A NULL member means the
 * default's (tables written before a member was added keep working).
 */
struct kvs_store_io_ops {
	int (*open)(void *ctx, const char *path, int flags, mode_t mode);
	int (*close)(void *ctx, int fd);
	ssize_t (*pread)(void *ctx, int fd, void *buf, size_t len, off_t off);
	ssize_t (*pwrite)(void *ctx, int fd, const void *buf, size_t len,
			  off_t off);
	int (*fsync)(void *ctx, int fd);
	int (*fdatasync)(void *ctx, int fd);
	int (*ftruncate)(void *ctx, int fd, off_t len);
	int (*fallocate)(void *ctx, int fd, off_t len); /* mode 0 from 0 */
	int (*size)(void *ctx, int fd, uint64_t *out); /* fstat st_size */
	int (*rename)(void *ctx, const char *from, const char *to);
	int (*unlink)(void *ctx, const char *path);
	int (*mkdir)(void *ctx, const char *path, mode_t mode);
	/* flock(@exclusive ? LOCK_EX : LOCK_SH) without waiting: 0,
	 * -EWOULDBLOCK while another process holds it, or -errno */
	int (*lock)(void *ctx, int fd, bool exclusive);
	/* Calls @fn with each name in @dir until it returns non-zero (then
	 * returned); 0 when all were seen, or -errno of opendir/readdir. */
	int (*list)(void *ctx, const char *dir,
		    int (*fn)(void *arg, const char *name), void *arg);
	/* stat(@path), or fstat(@fd) when @path is NULL */
	int (*stat)(void *ctx, const char *path, int fd, struct stat *out);
	/* f_bavail * f_frsize of the file system holding @dir */
	int (*space)(void *ctx, const char *dir, uint64_t *avail);
	/* lseek(SEEK_DATA): the first data at or after @off in *@out, or
	 * -ENXIO when only a hole (zeros) follows */
	int (*seek_data)(void *ctx, int fd, uint64_t off, uint64_t *out);
	int (*start)(void *ctx, struct kvs_store_ring *ring,
		     struct kvs_store_io_req *req);
	int (*complete)(void *ctx, struct kvs_store_ring *ring, unsigned min);
	int (*submit)(void *ctx, struct kvs_store_ring *ring);
	void *ctx;
};

/* The real system calls and io_uring; a static table, never NULL. */
const struct kvs_store_io_ops *kvs_store_io_default(void);

/* ---- open / close ---------------------------------------------------- */

/* The DRAM tier's eviction policy (store/README.md, "Eviction"). */
enum kvs_store_eviction {
	/* prefix-aware ARC: leaves of the prefix tree first, recency and
	 * frequency queues adapting to the workload (the default) */
	KVS_STORE_EVICT_PREFIX = 0,
	KVS_STORE_EVICT_S3FIFO = 1, /* S3-FIFO over independent objects */
	KVS_STORE_EVICT_LRU = 2, /* least recently used first */
};

/* "prefix", "s3fifo" or "lru" into *@out: 0, or -KVS_EPARAM. */
int kvs_store_eviction_parse(const char *name, enum kvs_store_eviction *out);
/* The name kvs_store_eviction_parse takes, or "?" for no policy. */
const char *kvs_store_eviction_name(enum kvs_store_eviction e);

#define KVS_STORE_SEGMENT_MIN (256ull << 10)
#define KVS_STORE_SEGMENT_MAX (1ull << 40)

struct kvs_store_opts {
	uint64_t dram_capacity; /* bytes of DRAM arena; 0 = no DRAM tier */
	uint64_t nvme_capacity; /* bytes of segment files; 0 = no NVMe tier */
	/* bytes per segment file, in [KVS_STORE_SEGMENT_MIN,
	 * KVS_STORE_SEGMENT_MAX] (rounded down to 4096); 0 = default */
	uint64_t segment_size;
	unsigned queue_depth; /* io_uring depth; 0 = default (32) */
	bool write_through; /* every put at least WRITTEN */
	bool create; /* create the directory/store if missing */
	bool buffered_io; /* do not even try O_DIRECT */
	/* open for reading: nothing in the directory is created or changed
	 * (works on read-only media), the lock is shared with other readers,
	 * puts fail with -EROFS */
	bool read_only;
	/* how long to wait for another process's lock, in ms: 0 = not at all,
	 * < 0 = for ever; the wait is logged with the holder's pid */
	int lock_timeout_ms;
	const struct kvs_store_io_ops *io; /* NULL = kvs_store_io_default() */
	/* called now and then during a long recovery or fsck scan with the
	 * segment bytes scanned so far and in all; may be NULL */
	void (*progress)(void *arg, uint64_t done, uint64_t total);
	void *progress_arg;
	/*
	 * Registration of the DRAM arena with whoever moves its bytes (UCX
	 * ucp_mem_map, CUDA host registration): called once with the arena
	 * after it is mapped, and with @unregister at close.  A failure (not
	 * 0) leaves the arena unregistered and the store working.  NULL: no
	 * registration.
	 */
	int (*register_arena)(void *ctx, void *base, size_t len,
			      bool unregister);
	void *register_ctx;
	/* Reservations (kvs_store_reserve) not committed within this long
	 * are reclaimed; 0 = default (30000). */
	uint32_t reserve_timeout_ms;
	/* The DRAM tier's eviction policy (0 = KVS_STORE_EVICT_PREFIX). */
	enum kvs_store_eviction eviction;
};

/* Defaults: 256 MiB DRAM, 4 GiB NVMe, 32 MiB segments, QD 32,
 * write-through, create, a lock timeout of 30 s. */
void kvs_store_opts_default(struct kvs_store_opts *opts);

/*
 * kvs_store_open - open (and with opts->create, create) the store in @dir,
 * recovering the index from its segments.  A new store is created only in
 * a missing or empty directory.  Waits up to opts->lock_timeout_ms for
 * another process that has it open.  Returns 0 and *@out (owned by the
 * caller, release with kvs_store_close), -KVS_EPARAM for options out of
 * range, -KVS_EVERSION for a store written by a newer format, -ENOENT for
 * a missing store without create, -ENOTEMPTY for a directory that holds
 * other files and no store, -EBUSY when the lock was not obtained in
 * time, -KVS_EHDRSUM for a superblock damaged beyond its second copy (see
 * kvs_store_fsck), or another -errno.
 */
int kvs_store_open(const char *dir, const struct kvs_store_opts *opts,
		   struct kvs_store **out);

/* Spills DRAM-only objects to the NVMe tier, syncs, marks the store
 * closed cleanly, frees.  Refuses (-EBUSY, logged; the store stays open
 * and usable) while references from gets are held: release them first.
 * Otherwise the store is closed and the result is 0, or the error of a
 * spill that failed (logged): MEMORY-level objects were lost; nothing
 * acknowledged WRITTEN or DURABLE is.  NULL: 0. */
int kvs_store_close(struct kvs_store *store);

/* ---- put / get ------------------------------------------------------- */

/* The store key of an encoded object (from its header).  0 or the
 * kvs_header_decode() error. */
int kvs_store_key_of(const uint8_t *obj, size_t len, struct kvs_store_key *out);

/* "<64 hex>:<layer>" into @out (KVS_STORE_KEY_TEXT bytes). */
void kvs_store_key_format(const struct kvs_store_key *key,
			  char out[KVS_STORE_KEY_TEXT]);
/* Parses the text form; 0 or -KVS_EPARAM. */
int kvs_store_key_parse(const char *text, struct kvs_store_key *out);

/*
 * kvs_store_put - validate and store a copy of one encoded object.
 * The object is refused (-KVS_E* of kvs_object_verify) if it fails any
 * check; a @durability outside the enum is refused (-KVS_EPARAM); a store
 * opened read-only refuses puts (-EROFS).  Returns once @durability
 * (raised to WRITTEN by write_through) is reached; a later put of the
 * same key replaces it.  @key_out may be NULL.
 */
int kvs_store_put(struct kvs_store *store, const uint8_t *obj, size_t len,
		  enum kvs_durability durability,
		  struct kvs_store_key *key_out);

/*
 * kvs_store_put_batch - put @n objects, submitting their NVMe writes
 * together (up to queue_depth in flight).  @results[i] gets each object's
 * 0 or error (all of them, also when the whole batch is refused); returns
 * 0 if all succeeded, else the first error.  With DURABLE, no object is
 * reported 0 unless the sync after it succeeded.
 */
int kvs_store_put_batch(struct kvs_store *store, const uint8_t *const *objs,
			const size_t *lens, size_t n,
			enum kvs_durability durability, int *results);

/* A pinned object returned by a get. */
struct kvs_store_ref;

/*
 * kvs_store_get - find an object, promoting it from NVMe into DRAM.
 * Every object read from NVMe is checked (record header, checksum,
 * kvs_object_verify); one that fails is dropped, counted in
 * corrupt_dropped and reported as a miss.  Returns 0 and *@out (release
 * with kvs_store_ref_release, before kvs_store_close), or a miss:
 * -KVS_ENOTFOUND (no such object), -KVS_ECORRUPT (its record failed a
 * check, now or when this process opened the store: dropped, counted;
 * also a miss, named so that the damage is not mistaken for absence);
 * or -errno.
 */
int kvs_store_get(struct kvs_store *store, const struct kvs_store_key *key,
		  struct kvs_store_ref **out);

/* Gets @n objects, reading the NVMe ones together (queue_depth in
 * flight).  refs[i] is NULL and results[i] the error for a miss
 * (-KVS_ENOTFOUND or -KVS_ECORRUPT, as kvs_store_get) or a failure of
 * that object (-ENOMEM, -EIO...).  Returns 0 (misses are not errors) or
 * -errno (with -ENOMEM every result is -ENOMEM and every ref NULL). */
int kvs_store_get_batch(struct kvs_store *store,
			const struct kvs_store_key *keys, size_t n,
			struct kvs_store_ref **refs, int *results);

/* The object bytes of a ref; valid until the ref is released. */
const uint8_t *kvs_store_ref_data(const struct kvs_store_ref *ref);
size_t kvs_store_ref_len(const struct kvs_store_ref *ref);
/* Unpins; NULL is a no-op. */
void kvs_store_ref_release(struct kvs_store_ref *ref);

/*
 * kvs_store_lookup_prefix - how many leading spans of @span_ids are
 * present for every layer in @layers (the scheduler's first question).
 * Presence only: a later get may still miss on a corrupt record.
 */
size_t kvs_store_lookup_prefix(struct kvs_store *store,
			       const uint8_t (*span_ids)[KVS_ID_SIZE],
			       size_t n_spans, const uint32_t *layers,
			       size_t n_layers);

/*
 * kvs_store_delete_batch - delete the objects of @n keys from both
 * tiers: no later get or lookup finds them (a ref already taken stays
 * valid).  Where a record of a key may be on NVMe, the deletion is logged
 * by a tombstone record, so it survives a restart as a put at the same
 * level would: WRITTEN (MEMORY is raised to it: a tombstone is always
 * written) survives kill -9, DURABLE (synced) power loss too.  results[i]
 * is 0, -KVS_ENOTFOUND (nothing to delete: no tombstone), or the error of
 * its tombstone (-EIO, -ENOSPC...: the object is gone from this process
 * but may come back after a restart).  A key whose record failed a check
 * (gets say -KVS_ECORRUPT) is deleted like any other.  Returns 0 (misses
 * are not errors) or the first other error; -KVS_EPARAM for a level
 * outside the enum, -EROFS on a read-only store (every result set).
 */
int kvs_store_delete_batch(struct kvs_store *store,
			   const struct kvs_store_key *keys, size_t n,
			   enum kvs_durability durability, int *results);

/* kvs_store_delete_batch of one key at WRITTEN: 0, -KVS_ENOTFOUND or the
 * error. */
int kvs_store_delete(struct kvs_store *store, const struct kvs_store_key *key);

/* ---- asynchronous batches --------------------------------------------
 *
 * For an event loop (the daemon's).  Each call takes the same arguments
 * as its synchronous form plus a callback.  A batch that needs no device
 * I/O (a get whose objects are all in DRAM or missing; a put or commit
 * at memory durability without write-through; a delete with nothing to
 * log) is served inline: the call returns 1, its results are set and
 * @done is not called.  Any other is prepared under the store's lock --
 * index and DRAM state, pins, space in the head segment -- and its reads,
 * writes and syncs become io_uring requests; the call returns 0 without
 * waiting for the device.  The requests are submitted together by the
 * next kvs_store_poll() (call it once per turn of the loop, after the
 * turn's asynchronous calls) and their completions collected by later
 * ones, when kvs_store_event_fd() is readable; @done(@arg, status) runs
 * inside kvs_store_poll() with what the synchronous call would have
 * returned.  Every array must stay valid until then.  No lock is held
 * while the device works, so synchronous calls from other threads go on
 * meanwhile (a roll of the head segment, a spill, the check of a record
 * recovery did not read run synchronously, on the calling thread).  A
 * negative return: the batch was refused whole (every result says why)
 * and nothing was queued.  Batches not finished at kvs_store_close()
 * finish there (their callbacks run inside it).  The asynchronous calls
 * and kvs_store_poll() come from one thread at a time (the loop's).
 */
typedef void (*kvs_store_done_fn)(void *arg, int status);

int kvs_store_get_batch_async(struct kvs_store *store,
			      const struct kvs_store_key *keys, size_t n,
			      struct kvs_store_ref **refs, int *results,
			      kvs_store_done_fn done, void *arg);
int kvs_store_put_batch_async(struct kvs_store *store,
			      const uint8_t *const *objs, const size_t *lens,
			      size_t n, enum kvs_durability durability,
			      int *results, kvs_store_done_fn done, void *arg);

/* kvs_store_delete_batch in the asynchronous form: the tombstones are
 * written (and, DURABLE, synced) by the engine. */
int kvs_store_delete_batch_async(struct kvs_store *store,
				 const struct kvs_store_key *keys, size_t n,
				 enum kvs_durability durability, int *results,
				 kvs_store_done_fn done, void *arg);

/* Readable while completions wait for kvs_store_poll() (the eventfd
 * registered with the asynchronous batches' io_uring); -1 without
 * memory.  Owned by the store. */
int kvs_store_event_fd(struct kvs_store *store);
/* One turn of the asynchronous engine: submits the requests queued since
 * the last turn (one io_uring_submit), finishes the completions there
 * are, and runs the callbacks of the batches that finished; returns how
 * many.  Never waits for the device. */
unsigned kvs_store_poll(struct kvs_store *store);

/* ---- reserve-then-commit puts ---------------------------------------- */

/* A DRAM slot handed out before its object exists. */
struct kvs_store_reservation;

/*
 * kvs_store_reserve - a DRAM slot for an object of @len bytes, evicting
 * (and spilling) as a put would.  The caller writes the object at *@dst
 * (for example a network receive straight into it), then commits or
 * releases the reservation within opts.reserve_timeout_ms; after that
 * the slot is reclaimed and the caller must not write into it.  Returns
 * 0, *@out and *@dst; -ENOSPC without room (no DRAM tier, or all
 * pinned), -EFBIG, -KVS_ETRUNC (under a header) or -ENOMEM.
 */
int kvs_store_reserve(struct kvs_store *store, size_t len,
		      struct kvs_store_reservation **out, uint8_t **dst);

/*
 * kvs_store_commit_batch - verify and store the objects written into
 * @n reservations, as kvs_store_put_batch would (the same checks,
 * durability and results), without copying them.  Consumes every
 * reservation, whatever the outcome; results[i] is -ETIMEDOUT for one
 * already reclaimed.  Returns 0 or the first error.
 */
int kvs_store_commit_batch(struct kvs_store *store,
			   struct kvs_store_reservation *const *rs, size_t n,
			   enum kvs_durability durability, int *results);

/* kvs_store_commit_batch in the asynchronous form (above). */
int kvs_store_commit_batch_async(struct kvs_store *store,
				 struct kvs_store_reservation *const *rs,
				 size_t n, enum kvs_durability durability,
				 int *results, kvs_store_done_fn done,
				 void *arg);

/* Gives a reservation back uncommitted; NULL is a no-op. */
void kvs_store_release(struct kvs_store *store,
		       struct kvs_store_reservation *r);

/* Reclaims the reservations past their timeout now (reserve and commit
 * also do); returns how many. */
unsigned kvs_store_reclaim(struct kvs_store *store);

/* Makes every object WRITTEN so far DURABLE -- by this process or by an
 * earlier one that died before syncing.  0 or -errno. */
int kvs_store_sync(struct kvs_store *store);

/* ---- statistics ------------------------------------------------------ */

struct kvs_store_tier_stats {
	uint64_t blocks;
	uint64_t bytes; /* object bytes held */
	uint64_t capacity;
};

struct kvs_store_stats {
	struct kvs_store_tier_stats dram, nvme;
	uint64_t hits, misses;
	uint64_t dram_hits, nvme_hits;
	uint64_t evictions; /* objects dropped from the store */
	uint64_t spills; /* DRAM -> NVMe writes on eviction */
	uint64_t promotions; /* NVMe -> DRAM reads */
	uint64_t carried; /* records moved forward by segment cleaning */
	uint64_t corrupt_dropped; /* failed a check on read or at recovery */
	uint64_t torn_dropped; /* incomplete records found at recovery */
	/* segments found missing, or cut short (sealed, their footer gone),
	 * at open: data lost outside the store's control, reported until
	 * kvs_store_fsck with KVS_FSCK_REPAIR acknowledges it */
	uint64_t lost_segments;
	uint64_t compactions; /* segments emptied of superseded records */
	/* deletions held on NVMe (tombstone records kept while an older
	 * record of their key may remain) */
	uint64_t tombstones;
	uint64_t segments;
	uint64_t nvme_file_bytes; /* segment file bytes, headers and padding */
	bool direct_io; /* O_DIRECT in use */
	bool hugepages; /* DRAM arena on hugepages */
	bool registered; /* DRAM arena registered with io_uring */
	bool host_pinned; /* DRAM arena registered by opts.register_arena */
};

/* Counters since open. */
void kvs_store_stats_get(struct kvs_store *store, struct kvs_store_stats *out);

/* ---- fsck ------------------------------------------------------------ */

enum kvs_fsck_status {
	KVS_FSCK_GOOD = 0,
	KVS_FSCK_CORRUPT = 1, /* a complete record failed a check */
	KVS_FSCK_TORN = 2, /* a write cut short: the log ends inside it */
	/* data known to have been here is gone: a segment file missing, a
	 * sealed segment cut short (its footer gone), or fewer records than
	 * its footer counts */
	KVS_FSCK_MISSING = 3,
	/* a file the store left behind (a temporary file of a killed
	 * repair, a segment reclaimed but not yet deleted): removed by
	 * --repair, by a writable open too */
	KVS_FSCK_LEFTOVER = 4,
};

struct kvs_fsck_record {
	uint64_t segment; /* segment id */
	uint64_t offset; /* record offset in the segment file */
	uint64_t length; /* bytes this verdict covers */
	uint64_t seq; /* 0 if the header is unreadable */
	bool key_valid;
	struct kvs_store_key key;
	enum kvs_fsck_status status;
	const char *check; /* failed check, NULL when good */
	bool superseded; /* good, but a newer record has its key */
	bool tombstone; /* a deletion of the key (no object) */
};

struct kvs_fsck_report {
	uint64_t segments, records, good, corrupt, torn, superseded;
	uint64_t tombstones; /* good records that are tombstones */
	uint64_t bad_segments; /* segment header unreadable */
	uint64_t repaired_segments; /* rewritten by --repair */
	uint64_t missing; /* KVS_FSCK_MISSING verdicts */
	uint64_t leftovers; /* KVS_FSCK_LEFTOVER verdicts */
	uint64_t foreign; /* segment-named files that are not segments:
			   * reported, never deleted */
	bool superblock_damaged; /* a copy (or both) failed its check */
	bool manifest_damaged; /* missing or failed its check */
	bool repaired; /* --repair changed something */
	uint32_t format_version; /* of the store found */
};

#define KVS_FSCK_REPAIR 0x1u

/*
 * kvs_store_fsck - offline check of the store in @dir: every record of
 * every segment, fully verified, reported through @cb (may be NULL) in
 * segment and offset order, then the segments found missing or cut short
 * and the leftovers.  Without KVS_FSCK_REPAIR nothing is changed (read-only
 * media work; the lock is shared with readers).  With it: each segment
 * holding a bad record is rewritten without it (new file, fsync, rename,
 * fsync of the directory), the manifest is rewritten to acknowledge lost
 * segments, leftovers are removed, and a damaged superblock is rebuilt
 * (only where a manifest or a segment shows a store was there).  @opts
 * (NULL: defaults) gives the I/O table, the lock timeout and a progress
 * callback.  Returns 0 (whatever was found), -KVS_EVERSION, -EBUSY, or
 * -errno.
 */
int kvs_store_fsck(const char *dir, unsigned flags,
		   const struct kvs_store_opts *opts,
		   void (*cb)(void *arg, const struct kvs_fsck_record *rec),
		   void *arg, struct kvs_fsck_report *report);

#ifdef __cplusplus
}
#endif

#endif
