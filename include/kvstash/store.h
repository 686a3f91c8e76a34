/*
 * store - the cache engine: a DRAM tier and an NVMe tier holding encoded
 * kvformat objects (sealed blocks and residual tails) byte for byte.
 *
 * A process opens a store directory directly (like SQLite); the daemon of a
 * later issue puts the same engine behind the network.  Layout of a store
 * directory, details in store/README.md:
 *   KVSTASH          superblock: magic + store format version (published by
 *                    write -> fsync -> rename -> fsync of the directory)
 *   LOCK             flock()ed by the process that has the store open
 *   seg-<id>.kvs     log segments: a 4096-byte segment header, then records,
 *                    each [128-byte record header][object][zero pad] padded
 *                    to 4096 bytes.
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
 * All functions are thread safe (one mutex per store); a reference returned
 * by a get pins its bytes until released.
 */
#ifndef KVSTASH_STORE_H
#define KVSTASH_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "kvstash/kvformat.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KVS_STORE_FORMAT_VERSION 1
#define KVS_STORE_ALIGN 4096u /* record and I/O alignment */
#define KVS_STORE_RECORD_HEADER 128u /* bytes before the object */
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
};

/* One read or write.  @res and @done are set when it completes; the
 * request must stay in place until then. */
struct kvs_store_io_req {
	uint8_t op; /* enum kvs_store_io_op */
	int fd;
	void *buf;
	uint32_t len;
	uint64_t off;
	int buf_index; /* registered buffer, or -1 */
	int32_t res; /* out: bytes moved or -errno */
	bool done; /* out */
};

struct kvs_store_ring; /* io_uring engine, opaque */

/*
 * Every system call the store makes.  Each returns what the system call
 * returns, except that errors are -errno.  Data reads and writes go
 * through @start and @complete: @start begins one request (the store keeps
 * at most queue_depth in flight) and returns 0 or -errno (then it did not
 * start); a request may also complete inside @start.  @complete waits for
 * at least @min started requests to finish, sets their res and done, and
 * returns how many finished.  Without io_uring @start runs the request at
 * once.  Directory housekeeping goes through it too: @mkdir (creating a
 * store), @open and @lock (the LOCK file), @list (finding segments).  A
 * NULL member means the default's (tables written before a member was
 * added keep working).
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
	int (*lock)(void *ctx, int fd); /* flock(LOCK_EX), waits */
	/* Calls @fn with each name in @dir until it returns non-zero (then
	 * returned); 0 when all were seen, or -errno of opendir/readdir. */
	int (*list)(void *ctx, const char *dir,
		    int (*fn)(void *arg, const char *name), void *arg);
	int (*start)(void *ctx, struct kvs_store_ring *ring,
		     struct kvs_store_io_req *req);
	int (*complete)(void *ctx, struct kvs_store_ring *ring, unsigned min);
	void *ctx;
};

/* The real system calls and io_uring; a static table, never NULL. */
const struct kvs_store_io_ops *kvs_store_io_default(void);

/* ---- open / close ---------------------------------------------------- */

struct kvs_store_opts {
	uint64_t dram_capacity; /* bytes of DRAM arena; 0 = no DRAM tier */
	uint64_t nvme_capacity; /* bytes of segment files; 0 = no NVMe tier */
	uint64_t segment_size; /* bytes per segment file; 0 = default */
	unsigned queue_depth; /* io_uring depth; 0 = default (32) */
	bool write_through; /* every put at least WRITTEN */
	bool create; /* create the directory/store if missing */
	bool buffered_io; /* do not even try O_DIRECT */
	const struct kvs_store_io_ops *io; /* NULL = kvs_store_io_default() */
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
};

/* Defaults: 256 MiB DRAM, 4 GiB NVMe, 32 MiB segments, QD 32,
 * write-through, create. */
void kvs_store_opts_default(struct kvs_store_opts *opts);

/*
 * kvs_store_open - open (and with opts->create, create) the store in @dir,
 * recovering the index from its segments.  Waits for another process that
 * has it open.  Returns 0 and *@out (owned by the caller, release with
 * kvs_store_close), -KVS_EVERSION for a store written by a newer format,
 * -ENOENT for a missing store without create, or another -errno.
 */
int kvs_store_open(const char *dir, const struct kvs_store_opts *opts,
		   struct kvs_store **out);

/* Spills DRAM-only objects to the NVMe tier, syncs, frees.  Fails (and
 * logs) only by losing memory-level objects.  NULL is a no-op. */
void kvs_store_close(struct kvs_store *store);

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
 * check.  Returns once @durability (raised to WRITTEN by write_through) is
 * reached; a later put of the same key replaces it.  @key_out may be NULL.
 */
int kvs_store_put(struct kvs_store *store, const uint8_t *obj, size_t len,
		  enum kvs_durability durability,
		  struct kvs_store_key *key_out);

/*
 * kvs_store_put_batch - put @n objects, submitting their NVMe writes
 * together (up to queue_depth in flight).  @results[i] gets each object's
 * 0 or error; returns 0 if all succeeded, else the first error.  With
 * DURABLE, no object is reported 0 unless the sync after it succeeded.
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
 * with kvs_store_ref_release), -KVS_ENOTFOUND on a miss, or -errno.
 */
int kvs_store_get(struct kvs_store *store, const struct kvs_store_key *key,
		  struct kvs_store_ref **out);

/* Gets @n objects, reading the NVMe ones together (queue_depth in
 * flight).  refs[i] is NULL and results[i] the error for a miss.
 * Returns 0 (misses are not errors) or -errno. */
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
 * kvs_store_delete - remove the object of @key from both tiers: no later
 * get or lookup of this process finds it (a ref already taken stays
 * valid).  Not logged: a record still in a segment file returns at the
 * next open.  0 or -KVS_ENOTFOUND.
 */
int kvs_store_delete(struct kvs_store *store, const struct kvs_store_key *key);

/* ---- asynchronous batches --------------------------------------------
 *
 * For an event loop (the daemon's).  Each call takes the same arguments
 * as its synchronous form plus a callback.  A batch that needs no device
 * I/O (a get whose objects are all in DRAM or missing; a put or commit
 * at memory durability without write-through) is served inline: the call
 * returns 1, its results are set and @done is not called.  Any other is
 * queued to the store's I/O thread and the call returns 0; @done(@arg,
 * status) then runs later, on the thread that calls kvs_store_poll(),
 * with what the synchronous call would have returned.  Every array must
 * stay valid until then.  A negative return: nothing was queued.
 * Queued batches finish before kvs_store_close() returns (their
 * callbacks run inside it if nobody polled).
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

/* Readable while completions wait for kvs_store_poll(); -1 without
 * memory.  Owned by the store. */
int kvs_store_event_fd(struct kvs_store *store);
/* Runs the callbacks of finished batches; returns how many. */
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

/* Makes every object WRITTEN so far DURABLE.  0 or -errno. */
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
	KVS_FSCK_TORN = 2, /* the log ends inside this record */
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
};

struct kvs_fsck_report {
	uint64_t segments, records, good, corrupt, torn, superseded;
	uint64_t bad_segments; /* segment header unreadable */
	uint64_t repaired_segments; /* rewritten by --repair */
};

#define KVS_FSCK_REPAIR 0x1u

/*
 * kvs_store_fsck - offline check of the store in @dir: every record of
 * every segment, fully verified, reported through @cb (may be NULL) in
 * segment and offset order.  With KVS_FSCK_REPAIR, each segment holding a
 * bad record is rewritten without it (new file, fsync, rename, fsync of
 * the directory).  @io may be NULL.  Returns 0 (whatever was found),
 * -KVS_EVERSION, or -errno.
 */
int kvs_store_fsck(const char *dir, unsigned flags,
		   const struct kvs_store_io_ops *io,
		   void (*cb)(void *arg, const struct kvs_fsck_record *rec),
		   void *arg, struct kvs_fsck_report *report);

#ifdef __cplusplus
}
#endif

#endif
