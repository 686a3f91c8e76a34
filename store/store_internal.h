/*
 * store_internal.h - private structures of the store engine.
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
 *   policy.c   S3-FIFO queues of the DRAM tier, ghost bookkeeping
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
#include "kvstash/store.h"

#define SEG_HEADER_SIZE 4096u
#define REC_HEADER_SIZE KVS_STORE_RECORD_HEADER
#define STORE_MAX_OBJECT (64u << 20)
#define SUPERBLOCK_NAME "KVSTASH"
#define MANIFEST_NAME "MANIFEST"
#define LEGACY_LOCK_NAME "LOCK" /* taken by store format 1 */
#define RING_MIN 64u /* ring entries, and recovery's depth */
#define SEG_LAYOUT_VERSION 1 /* segment header, footer, record header */
#define REC_FLAG_TOMBSTONE 0x1u /* a deletion, no object (format 3) */
#define REC_SEQ_MAX ((1ull << 63) - 1)
#define SB_SIZE 64u
#define SB_COPY_OFF 4096u /* second copy of the superblock */
#define SB_FILE_SIZE (SB_COPY_OFF + SB_SIZE)
#define MANIFEST_VERSION 1
#define MANIFEST_HEADER 64u
#define MANIFEST_RUN 16u
#define MANIFEST_MAX_RUNS (1u << 24)
#define MANIFEST_NO_HEAD UINT64_MAX
#define MANIFEST_CLEAN 0x1u /* the head was closed cleanly */
#define RESYNC_CHUNK (1u << 20) /* bulk reads while skipping damage */
#define PROGRESS_STEP (256ull << 20) /* a long scan reports this often */

/* Bytes of the record holding an object of @len bytes. */
static inline uint64_t record_size(uint64_t len)
{
	return kvs_align_up(REC_HEADER_SIZE + len, KVS_STORE_ALIGN);
}

/* ---- lists ----------------------------------------------------------- */

struct list {
	struct list *prev, *next;
};

static inline void list_init(struct list *l)
{
	l->prev = l->next = l;
}

static inline bool list_empty(const struct list *l)
{
	return l->next == l;
}

/* Inserts @n right after @head (the "newest" end). */
static inline void list_push(struct list *head, struct list *n)
{
	n->next = head->next;
	n->prev = head;
	head->next->prev = n;
	head->next = n;
}

static inline void list_del(struct list *n)
{
	n->prev->next = n->next;
	n->next->prev = n->prev;
	n->prev = n->next = n;
}

/* The oldest element (tail), or NULL. */
static inline struct list *list_oldest(struct list *head)
{
	return list_empty(head) ? NULL : head->prev;
}

#define list_entry(ptr, type, member)                                          \
	((type *)((char *)(ptr)-offsetof(type, member)))

/* ---- on-disk encodings (format.c) ------------------------------------ */

struct rec_header {
	uint16_t version;
	uint16_t flags; /* REC_FLAG_TOMBSTONE or 0 */
	uint64_t seq;
	uint32_t length; /* object bytes */
	uint64_t payload_sum; /* xxh3-64 of the object bytes */
	struct kvs_store_key key;
};

void rec_header_encode(const struct rec_header *h, uint8_t *buf);
/* 0, -KVS_EMAGIC, -KVS_EVERSION, -KVS_EHDRSUM or -KVS_EBOUNDS. */
int rec_header_decode(const uint8_t *buf, struct rec_header *out);
uint64_t payload_checksum(const uint8_t *obj, size_t len);
/* Copies @len bytes to @dst and returns payload_checksum() of the copy,
 * in one pass (each chunk hashed while it is hot in cache). */
uint64_t payload_copy_checksum(uint8_t *dst, const uint8_t *src, size_t len);
/* Name of the record-header check an error of rec_header_decode names. */
const char *rec_check_name(int err);

void seg_header_encode(uint64_t id, uint8_t *buf);
/* 0, -KVS_EMAGIC, -KVS_EHDRSUM or -KVS_EVERSION; *id on success. */
int seg_header_decode(const uint8_t *buf, uint64_t *id);

/* The last page of a sealed segment: where its log ends, how many
 * records it holds (a segment cut short has lost it). */
struct seg_footer {
	uint64_t id;
	uint64_t end; /* offset of the footer page: the log end */
	uint32_t records;
};

void seg_footer_encode(const struct seg_footer *f, uint8_t *page);
/* 0, -KVS_EMAGIC, -KVS_EHDRSUM, -KVS_EVERSION or -KVS_EBOUNDS. */
int seg_footer_decode(const uint8_t *page, struct seg_footer *out);

/* One superblock copy (SB_SIZE bytes) of the current format. */
void sb_encode(uint8_t *buf);
/* 0 and *@version, -KVS_EMAGIC, -KVS_EHDRSUM, or -KVS_EVERSION (a
 * version this code does not know, with a valid checksum). */
int sb_decode(const uint8_t *buf, uint32_t *version);

/* Segment ids [first, end). */
struct id_run {
	uint64_t first, end;
};

/* The manifest: which segments exist (runs of ids), the next id to use,
 * the head and, when it was closed cleanly, its log end and records. */
struct manifest {
	uint32_t flags; /* MANIFEST_CLEAN */
	uint64_t generation;
	uint64_t next_id; /* every id below was used */
	uint64_t head_id; /* MANIFEST_NO_HEAD when none */
	uint64_t head_length; /* with MANIFEST_CLEAN */
	uint32_t head_records; /* with MANIFEST_CLEAN */
	uint32_t nruns;
	struct id_run *runs; /* malloc'd: the segments */
	/* the segments with no footer, rightly: the head, those whose seal
	 * failed, those of format 1; every other one must end with its
	 * footer (else it was cut short) */
	uint32_t nbare;
	struct id_run *bare; /* malloc'd with runs (one array) */
};

/* Whether @m (read: @have) says segment @id was the head and was closed
 * cleanly: its log up to m->head_length was synced then. */
static inline bool manifest_clean_head(const struct manifest *m, bool have,
				       uint64_t id)
{
	return have && (m->flags & MANIFEST_CLEAN) && m->head_id == id;
}

size_t manifest_encoded_size(uint32_t nruns, uint32_t nbare);
void manifest_encode(const struct manifest *m, uint8_t *buf);
/* 0 (out->runs malloc'd, out->bare inside it: free out->runs),
 * -KVS_EMAGIC, -KVS_EHDRSUM, -KVS_EVERSION, -KVS_EBOUNDS or -ENOMEM. */
int manifest_decode(const uint8_t *buf, size_t len, struct manifest *out);
bool manifest_has(const struct manifest *m, uint64_t id);
/* Whether the manifest lists @id as a sealed segment that must end with
 * its footer. */
bool manifest_wants_footer(const struct manifest *m, uint64_t id);
/* Appends @id (ascending) to @runs, which has room. */
void id_runs_add(struct id_run *runs, uint32_t *n, uint64_t id);
/* Whether the 8 bytes at @p are the magic of the superblock, a segment
 * header or a manifest (what the store's temporary files start with). */
bool store_magic(const uint8_t *p);

/* Check of a record image: header, record checksum over every object
 * byte, kvs_object_verify(@verify_flags) and the object's key; @check_out
 * names the failed check.  0 or the error.  Reads pass
 * KVS_VERIFY_NO_CHECKSUMS: the record checksum already proves the bytes
 * are the ones whose section checksums were verified at put. */
int record_verify(const uint8_t *rec, size_t avail,
		  const struct kvs_store_key *expect, unsigned verify_flags,
		  struct rec_header *out, const char **check_out);

/* seg-<16 hex>.kvs; parses back exactly, 0 or -EINVAL. */
void seg_name(uint64_t id, char out[32]);
int seg_name_parse(const char *name, uint64_t *id);
/* seg-<16 hex>.kvs.tmp (fsck --repair's temporary files). */
int seg_tmp_name_parse(const char *name, uint64_t *id);

/* ---- the store directory (dir.c) ------------------------------------- */

int dir_fsync(const struct kvs_store_io_ops *io, const char *dir);

/* A locked store directory. */
struct store_lock {
	int fd; /* the directory, flock()ed */
	int legacy_fd; /* LOCK of a format-1 store, or -1 */
};

/*
 * store_lock - lock @dir (exclusively, or shared with readers), waiting
 * up to @timeout_ms (< 0: for ever) and logging the wait with the
 * holder's pid.  With @create, makes @dir first (and fsyncs its parent).
 * 0 and *@out, -ENOENT (no such directory), -EBUSY (timed out), or
 * -errno; logged.
 */
int store_lock(const struct kvs_store_io_ops *io, const char *dir,
	       bool exclusive, bool create, int timeout_ms,
	       struct store_lock *out);
void store_unlock(const struct kvs_store_io_ops *io, struct store_lock *l);

/* A growing array of segment ids. */
struct id_vec {
	uint64_t *v;
	size_t n, cap;
};

/* 0 or -ENOMEM. */
int id_vec_push(struct id_vec *vec, uint64_t id);

/* What a directory holds, by the store's names. */
struct dir_listing {
	struct id_vec segs; /* sorted ids of seg-<id>.kvs */
	struct id_vec tmps; /* ids of seg-<id>.kvs.tmp */
	bool superblock, manifest, superblock_tmp, manifest_tmp;
	size_t others; /* names the store does not use (".", ".." aside) */
};

/* 0 and *@out (free with dir_listing_free), or -errno (logged: a partial
 * listing never counts). */
int dir_list(const struct kvs_store_io_ops *io, const char *dir,
	     struct dir_listing *out);
void dir_listing_free(struct dir_listing *l);

/* The superblock's state. */
struct sb_state {
	uint32_t version; /* of the good copy (or copies) */
	int copies_bad; /* 0, 1 or 2 */
	bool missing; /* no KVSTASH file */
};

/* Reads both copies of @dir/KVSTASH.  0 when at least one is good;
 * -ENOENT when there is no file; -KVS_EVERSION when a good copy is of a
 * newer format; -KVS_EHDRSUM when no copy is good.  Logs. */
int superblock_read(const struct kvs_store_io_ops *io, const char *dir,
		    struct sb_state *out);
/* Publishes a superblock of the current format (both copies): write ->
 * fsync -> rename -> fsync of the directory.  0 or -errno, logged. */
int superblock_write(const struct kvs_store_io_ops *io, const char *dir);

/* Whether segment file @fd (@size bytes), its header damaged, still
 * begins a log of records (then it is the store's: its records describe
 * themselves).  @page: KVS_STORE_ALIGN bytes, aligned (O_DIRECT). */
bool seg_starts_log(const struct kvs_store_io_ops *io, int fd, uint64_t size,
		    uint8_t *page);
/* Whether any segment file @ls lists in @dir shows that a store is there:
 * a valid segment header (its checksum verified) or a record after it.
 * Files that only bear a segment's name, or cannot be read, do not. */
bool dir_shows_segments(const struct kvs_store_io_ops *io, const char *dir,
			const struct dir_listing *ls);
/* Whether @path (a .tmp the store may have left) is provably the
 * store's: empty, all zeros, or starting with one of its magics. */
bool leftover_is_ours(const struct kvs_store_io_ops *io, const char *path);
/* Turns read-ahead off for @fd, a segment file opened buffered, before
 * its first read.  The store reads whole records at scattered offsets;
 * and pages read ahead into a preallocated file's unwritten extents are
 * data to seek_data from then on (while cached, to every process), so
 * that each read of a walk or scan past the log end would read ahead the
 * next, and a preallocated head of gigabytes be read whole.  Advice: a
 * failure changes nothing but speed. */
void file_no_readahead(int fd);
/* Whether bytes [@from, @size) of the file are all zeros, skipping holes
 * (@from 4096-aligned; the file may be open with O_DIRECT). */
int file_is_zero(const struct kvs_store_io_ops *io, int fd, uint64_t from,
		 uint64_t size, bool *zero);

/* ---- the manifest (manifest.c) --------------------------------------- */

/* Reads @dir/MANIFEST: 0 and *@out (free out->runs), -ENOENT, or the
 * decoding error (logged). */
int manifest_load(const struct kvs_store_io_ops *io, const char *dir,
		  struct manifest *out);
/* Publishes @m: write -> fsync -> rename -> fsync of the directory. */
int manifest_store(const struct kvs_store_io_ops *io, const char *dir,
		   const struct manifest *m);
/* Publishes the store's manifest: its segments (and the missing ones),
 * its head, and with @clean the head's log end and records (closed
 * cleanly: nothing was written after).  0 or -errno, logged. */
struct kvs_store;
int store_manifest_write(struct kvs_store *s, bool clean);

/* ---- walking a segment (walk.c) -------------------------------------- */

enum walk_kind {
	WALK_RECORD, /* a record (status good, corrupt or torn) */
	WALK_DAMAGE, /* pages that hold no record (corrupt or torn) */
	WALK_FOOTER, /* the footer: the log ends */
};

struct walk_item {
	enum walk_kind kind;
	enum kvs_fsck_status status;
	uint64_t off, len;
	const char *check; /* failed check, NULL when good */
	bool has_header; /* @h is valid */
	struct rec_header h;
	const uint8_t *rec; /* the record image (good records) */
	struct seg_footer footer; /* WALK_FOOTER */
};

/* How a walk ended. */
struct walk_end {
	uint64_t log_end; /* after the last record, damage or the footer */
	uint32_t records; /* with a valid header (good or not) */
	bool footer; /* found its footer */
	bool damaged; /* a corrupt or torn verdict */
};

/*
 * seg_walk - walks the log of segment @id (@fd, @size bytes) from its
 * first record, each record read whole and verified (@verify_flags of
 * kvs_object_verify), pages that hold no record skipped in bounded reads
 * (holes skipped by seek_data; a buffered @fd must be opened without
 * read-ahead, file_no_readahead; what the walk read past the log end is
 * dropped from the page cache after, so that a preallocated file's
 * unwritten extents stay holes to later walks), calling @cb on each item
 * in order; stops at its footer or the end of the file.  A record failing
 * its checks is "torn" when it is the last one of an unsealed log (a
 * crash cut it short) and does not end within @clean_end of
 * seg_walk_opts, else "corrupt"; pages holding no record are "torn" when
 * all zeros (never written) or when they run to the end of the file, else
 * "corrupt"; zeros to the end are the unused rest of the file.  @cb
 * returning non-zero stops the walk with that value.  0, or -errno of a
 * read (logged).
 */
int seg_walk(const struct kvs_store_io_ops *io, int fd, uint64_t id,
	     uint64_t size, unsigned verify_flags,
	     int (*cb)(void *arg, const struct walk_item *it), void *arg,
	     struct walk_end *end);

/* What a walk knows of its segment beyond the file. */
struct walk_opts {
	unsigned verify_flags; /* of kvs_object_verify */
	/* the log end the manifest recorded when the segment, the head, was
	 * closed cleanly (0: it was not): everything before it was synced,
	 * so a record within it that fails is corrupt, never torn */
	uint64_t clean_end;
	/* told the offset reached every PROGRESS_STEP bytes (NULL: not) */
	void (*progress)(void *arg, uint64_t off);
	void *progress_arg;
};

/* seg_walk, told @wo. */
int seg_walk_opts(const struct kvs_store_io_ops *io, int fd, uint64_t id,
		  uint64_t size, const struct walk_opts *wo,
		  int (*cb)(void *arg, const struct walk_item *it), void *arg,
		  struct walk_end *end);

/*
 * resync - from the page at @from (not a record), reads ahead in chunks of
 * RESYNC_CHUNK into @bulk (skipping holes) to the next page that is a
 * valid record header or a footer of segment @id: *@found (its offset)
 * or @size when none; *@zero whether everything skipped was zeros.
 */
int resync(const struct kvs_store_io_ops *io, int fd, uint64_t id,
	   uint64_t from, uint64_t size, uint8_t *bulk, uint64_t *found,
	   bool *zero);

/* ---- io_uring engine (io.c) ------------------------------------------ */

/* *@out = *@in (NULL: the default table) with each NULL member replaced
 * by the default's. */
void io_ops_fill(struct kvs_store_io_ops *out,
		 const struct kvs_store_io_ops *in);

int ring_create(unsigned depth, struct kvs_store_ring **out);
/* A ring whose start() only queues (submit() submits) and whose
 * completions make @event_fd readable; 0 or -errno. */
int ring_create_batching(unsigned depth, int event_fd,
			 struct kvs_store_ring **out);
void ring_destroy(struct kvs_store_ring *ring);
/* Registers @n iovecs; 0 or -errno (the store then runs unregistered). */
int ring_register(struct kvs_store_ring *ring, const struct iovec *iov,
		  unsigned n);
struct kvs_store;
/* Runs @n requests, at most @depth in flight (counting others already
 * started); 0 once all are done (each with its own res) or -errno. */
int io_run(struct kvs_store *s, struct kvs_store_io_req *reqs, unsigned n,
	   unsigned depth);
/* Starts @req; one that cannot start is done with the error. */
void io_start(struct kvs_store *s, struct kvs_store_io_req *req);
/* Waits for at least @min started requests to complete. */
int io_wait(struct kvs_store *s, unsigned min);

/* ---- DRAM arena (dram.c) --------------------------------------------- */

struct slab {
	struct list link; /* in its class's partial list */
	uint32_t cls; /* UINT32_MAX: free slab */
	uint32_t free_head; /* first free slot index, UINT32_MAX: none */
	uint32_t nfree;
	uint32_t nslots;
	uint32_t carved; /* slots handed out at least once */
};

struct dram {
	uint8_t *base;
	size_t map_len;
	uint64_t capacity;
	uint32_t slab_size;
	uint32_t nslabs;
	struct slab *slabs;
	uint32_t *free_slabs; /* stack */
	uint32_t nfree_slabs;
	uint32_t nclasses;
	uint32_t class_size[64];
	struct list partial[64];
	uint64_t used_bytes; /* slot bytes handed out */
	bool huge, host_registered;
	int (*register_fn)(void *ctx, void *base, size_t len, bool unregister);
	void *register_ctx;
};

int dram_init(struct dram *d, uint64_t capacity);
/* Registers the arena through @fn (opts.register_arena), if any. */
void dram_register(struct dram *d,
		   int (*fn)(void *ctx, void *base, size_t len,
			     bool unregister),
		   void *ctx);
void dram_fini(struct dram *d);
/* Class for a record of @rec bytes, or -1 if it cannot live in DRAM. */
int dram_class(const struct dram *d, uint64_t rec);
/* A slot of class @cls, or NULL if none is free. */
uint8_t *dram_alloc(struct dram *d, int cls);
void dram_free(struct dram *d, uint8_t *slot, int cls);

/* ---- entries and index (index.c) ------------------------------------- */

enum dram_queue {
	DQ_NONE = 0,
	DQ_SMALL,
	DQ_MAIN,
	DQ_GHOST,
};

struct segment;

struct entry {
	struct kvs_store_key key;
	uint64_t hash;
	struct entry *hnext;
	uint32_t len; /* object bytes */
	uint64_t psum; /* xxh3-64 of the object bytes */
	uint32_t pins;
	bool in_index;
	/* DRAM tier */
	uint8_t *slot; /* record image: header, object, pad */
	int cls;
	uint8_t dq; /* enum dram_queue */
	uint8_t dfreq;
	struct list dlink;
	/* NVMe tier */
	struct segment *seg; /* segment of the newest record, or NULL */
	uint64_t off;
	uint64_t seq;
	bool rec_checked; /* the record is known whole: written or read back
			   * and checked by this process (recovery checks
			   * only the headers of older segments) */
	uint8_t nfreq;
	bool nghost;
	/* the key's newest record failed a check (dropped, counted): gets
	 * say -KVS_ECORRUPT rather than -KVS_ENOTFOUND until a new put */
	bool bad;
	/* the key is deleted: @seg (once written) holds its tombstone, kept
	 * while an older record of the key may remain in an older segment;
	 * no DRAM copy, gets miss */
	bool tomb;
	/* a record of the key may be on disk (newest or superseded); with
	 * @first_seg, the oldest segment that may hold one */
	bool on_disk;
	uint64_t first_seg;
	struct list nlink; /* seg->records, or the NVMe ghost queue */
	struct list tlink; /* store->tombs, while a tombstone is attached */
};

struct index {
	struct entry **bucket;
	size_t nbuckets, count;
};

int index_init(struct index *ix);
void index_fini(struct index *ix);
struct entry *index_find(struct index *ix, const struct kvs_store_key *key);
/* New entry for @key (must be absent), 0 or -ENOMEM. */
int index_insert(struct index *ix, const struct kvs_store_key *key,
		 struct entry **out);
void index_remove(struct index *ix, struct entry *e);
/* Calls @fn on every entry (which may remove it). */
void index_each(struct index *ix, void (*fn)(void *arg, struct entry *e),
		void *arg);

/* ---- NVMe segments (nvme.c) ------------------------------------------ */

struct segment {
	uint64_t id;
	int fd;
	uint64_t size; /* log end: bytes written (next append offset) */
	uint64_t live_bytes;
	uint64_t live_count;
	uint32_t nrec; /* records in the log, live or not (the footer's) */
	struct list records; /* entries whose newest record is here */
	struct list link; /* store's segment list, oldest first */
	uint32_t pending; /* writes started, not yet attached */
	bool sealed; /* no more appends */
	bool footer; /* ends with its footer */
	bool dirty; /* written since the last fdatasync */
	bool sync_failed; /* an fdatasync failed: never durable */
	bool write_failed; /* a record write failed: sealed at the next roll */
	bool unsynced; /* may hold writes of an earlier process that nothing
			* synced since (every segment found at open) */
	bool footer_unsure; /* a footer an earlier process wrote that the
			     * manifest does not vouch for yet: synced
			     * before a manifest lists it as sealed */
	uint32_t apending; /* of @pending, the asynchronous batches' */
	uint32_t async_io; /* asynchronous reads and syncs in flight: the
			    * segment is neither reclaimed nor compacted */
	uint64_t wgen; /* record writes completed: a sync clears @dirty
			* only if none completed since it started */
};

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
	struct list small, main, ghost;
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

/* policy.c */
void dram_insert(struct kvs_store *s, struct entry *e);
void dram_hit(struct entry *e);
/* Removes @e's DRAM copy (slot freed unless pinned: then at unpin). */
void dram_drop(struct kvs_store *s, struct entry *e);
/* Allocates a slot of @cls, evicting (and spilling) as needed.
 * Returns the slot or NULL (everything pinned / no tier). */
uint8_t *dram_make_room(struct kvs_store *s, int cls);
void ghost_trim(struct kvs_store *s);
/* Frees @e if it holds nothing and nobody pins it. */
void entry_maybe_free(struct kvs_store *s, struct entry *e);

/* nvme.c */
void seg_path(const struct kvs_store *s, uint64_t id, char *out, size_t n);
/* Seals @seg: its footer after the log end, cut there, fdatasync.  Nothing
 * may be in flight to it.  A failure is logged (the segment is sealed
 * without a proof of its length). */
void seg_seal(struct kvs_store *s, struct segment *seg);
/* The head segment (unsealed, newest), or NULL. */
struct segment *head_seg(struct kvs_store *s);
int nvme_open_file(struct kvs_store *s, const char *path, bool create,
		   int *fd_out);
/* Tries O_DIRECT on the superblock at open, so that the fallback to
 * buffered I/O is known (s->direct) before any segment is opened. */
void nvme_probe_direct(struct kvs_store *s);
/* Reserves room for a record of @rec bytes in the head segment, rolling
 * (and reclaiming) segments as needed; nothing may be in flight. */
int nvme_reserve(struct kvs_store *s, uint64_t rec, struct segment **seg,
		 uint64_t *off);
/* True if the head segment has room for @rec more bytes. */
bool nvme_head_fits(struct kvs_store *s, uint64_t rec);
/* Points @e at its new record (replacing an older one). */
void nvme_attach(struct kvs_store *s, struct entry *e, struct segment *seg,
		 uint64_t off, uint64_t seq);
/* Forgets @e's NVMe record (as data, not as ghost). */
void nvme_detach(struct kvs_store *s, struct entry *e);
/* The oldest segment a record written from now on may land in (for the
 * first_seg of an entry made now). */
uint64_t nvme_first_seg(struct kvs_store *s);
/* Whether the tombstone of @e in @seg may be dropped: no segment older
 * than @seg that may hold an older record of its key remains. */
bool nvme_tomb_droppable(struct kvs_store *s, const struct entry *e,
			 const struct segment *seg);
/* Frees @e, a tombstone no longer needed (its record detached). */
void tomb_drop(struct kvs_store *s, struct entry *e);
/* Drops the tombstones that hide no older record any more (after
 * segments are deleted, and at open), so that they count as live bytes
 * of their segments no longer. */
void tombs_prune(struct kvs_store *s);
/* 0 if @e's record is known whole, else reads it back and checks it:
 * 0, or the error (a record failing the check is dropped, counted). */
int nvme_check_record(struct kvs_store *s, struct entry *e);
/* A write of @rec bytes at @off of @seg failed: the reservation is taken
 * back if it was the last, and @seg takes no more records. */
void nvme_write_failed(struct kvs_store *s, struct segment *seg, uint64_t off,
		       uint64_t rec);
/* A record write to @seg completed (or failed): a later sync must cover
 * it (syncs that started before clear @dirty no more). */
void seg_written(struct segment *seg);
/* Stamps the record header of @e's record at @seq into @image. */
void record_stamp(struct entry *e, uint8_t *image, uint64_t seq);
/* The newest segment (the head, or the last one sealed), or NULL. */
struct segment *newest_seg(struct kvs_store *s);
/* Writes one record image synchronously to a fresh place. */
int nvme_write_image(struct kvs_store *s, struct entry *e, uint8_t *image,
		     int buf_index, enum kvs_durability dur);
/* fdatasync of every segment written since its last one, and with
 * @unsynced_too of those an earlier process may have left unsynced. */
int nvme_sync_dirty(struct kvs_store *s, bool unsynced_too);
/* fdatasync of @seg; a failure seals it for good (never durable). */
int seg_sync(struct kvs_store *s, struct segment *seg);
/* Preallocates a head segment file to the segment size. */
int seg_grow(struct kvs_store *s, int fd);
/* Cuts a segment file back to its log end. */
void seg_trim(struct kvs_store *s, struct segment *seg);
struct segment *seg_new(struct kvs_store *s, uint64_t id, int fd,
			uint64_t size);
void seg_free(struct kvs_store *s, struct segment *seg);
int buf_index_of(struct kvs_store *s, const uint8_t *p);

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
