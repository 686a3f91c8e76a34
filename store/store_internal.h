/*
 * store_internal.h - private structures of the store engine.
 *
 *   format.c   on-disk encodings: superblock, segment header, record header
 *   io.c       default ops table: system calls and the io_uring engine
 *   dram.c     the DRAM arena: slabs split into size-classed slots
 *   index.c    hash table from key to entry, intrusive lists
 *   policy.c   S3-FIFO queues of the DRAM tier, ghost bookkeeping
 *   nvme.c     segments: create, append, read, reclaim (cleaning)
 *   recover.c  rebuild the index from the segments at open
 *   store.c    public API: open/close, put, get, lookup, stats
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
#define LOCK_NAME "LOCK"
#define RING_MIN 64u /* ring entries, and recovery's depth */

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
	uint16_t flags;
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
/* 0, -KVS_EMAGIC, -KVS_EVERSION or -KVS_EHDRSUM; *id on success. */
int seg_header_decode(const uint8_t *buf, uint64_t *id);

/* Superblock: checks or creates @dir/KVSTASH. */
int superblock_check(const struct kvs_store_io_ops *io, const char *dir,
		     bool create);

/* Check of a record image: header, record checksum over every object
 * byte, kvs_object_verify(@verify_flags) and the object's key; @check_out
 * names the failed check.  0 or the error.  Reads pass
 * KVS_VERIFY_NO_CHECKSUMS: the record checksum already proves the bytes
 * are the ones whose section checksums were verified at put. */
int record_verify(const uint8_t *rec, size_t avail,
		  const struct kvs_store_key *expect, unsigned verify_flags,
		  struct rec_header *out, const char **check_out);

int dir_fsync(const struct kvs_store_io_ops *io, const char *dir);
/* seg-<16 hex>.kvs; parses back, 0 or -EINVAL. */
void seg_name(uint64_t id, char out[32]);
int seg_name_parse(const char *name, uint64_t *id);
/* Sorted segment ids found in @dir (malloc'd); 0 or -errno, logged. */
int seg_list(const struct kvs_store_io_ops *io, const char *dir, uint64_t **ids,
	     size_t *n);
/* With @create, makes @dir; opens @dir/LOCK and takes it (waiting).
 * 0 and *@fd_out, or -errno (logged; -ENOENT: no store there). */
int store_lock(const struct kvs_store_io_ops *io, const char *dir, bool create,
	       int *fd_out);

/* ---- io_uring engine (io.c) ------------------------------------------ */

/* *@out = *@in (NULL: the default table) with each NULL member replaced
 * by the default's. */
void io_ops_fill(struct kvs_store_io_ops *out,
		 const struct kvs_store_io_ops *in);

int ring_create(unsigned depth, struct kvs_store_ring **out);
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
	struct list nlink; /* seg->records, or the NVMe ghost queue */
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
	uint64_t size; /* bytes written (next append offset) */
	uint64_t live_bytes;
	uint64_t live_count;
	struct list records; /* entries whose newest record is here */
	struct list link; /* store's segment list, oldest first */
	uint32_t pending; /* writes started, not yet attached */
	bool sealed; /* no more appends */
	bool dirty; /* written since the last fdatasync */
	bool sync_failed; /* an fdatasync failed: never durable */
};

/* ---- the store (store.c) --------------------------------------------- */

struct kvs_store {
	pthread_mutex_t lock;
	char *dir;
	int lock_fd;
	struct kvs_store_opts opts;
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
	struct list nghost; /* NVMe ghosts, oldest at the tail */
	uint64_t nghost_n;
	struct list reservations; /* reserve.c, oldest last */
	struct store_async *async; /* async.c, made at first use */
	uint8_t *scratch; /* aligned bounce buffer, one record */
	uint64_t scratch_len;
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
/* 0 if @e's record is known whole, else reads it back and checks it:
 * 0, or the error (a record failing the check is dropped, counted). */
int nvme_check_record(struct kvs_store *s, struct entry *e);
/* Writes one record image synchronously to a fresh place. */
int nvme_write_image(struct kvs_store *s, struct entry *e, uint8_t *image,
		     int buf_index, enum kvs_durability dur);
int nvme_sync_dirty(struct kvs_store *s);
/* Preallocates a head segment file to the segment size. */
int seg_grow(struct kvs_store *s, int fd);
/* Cuts a segment file back to its log end. */
void seg_trim(struct kvs_store *s, struct segment *seg);
struct segment *seg_new(struct kvs_store *s, uint64_t id, int fd,
			uint64_t size);
void seg_free(struct kvs_store *s, struct segment *seg);
int buf_index_of(struct kvs_store *s, const uint8_t *p);

/* store.c: the body of kvs_store_put_batch.  With @adopt (reserve.c),
 * called with the lock held: object i already sits in the DRAM slot
 * adopt[i] of class adopt_cls[i]; a slot that becomes its entry's is set
 * to NULL in @adopt, those left are still the caller's. */
int store_put_batch(struct kvs_store *s, const uint8_t *const *objs,
		    const size_t *lens, size_t n,
		    enum kvs_durability durability, int *results,
		    uint8_t **adopt, const int *adopt_cls);

/* async.c: finishes the queued batches, stops the I/O thread. */
void async_fini(struct kvs_store *s);

/* reserve.c: forgets the reservations at close (the arena goes). */
void reservations_fini(struct kvs_store *s);

/* recover.c */
int recover(struct kvs_store *s);

/* Checks @rec of @e read from NVMe; on failure drops it and counts. */
int store_check_read(struct kvs_store *s, struct entry *e, const uint8_t *rec);

#endif
