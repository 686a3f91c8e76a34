/*
 * nvme.h - the NVMe tier: segments and what nvme.c (append, seal, reserve,
 * roll) and segments.c (create, reclaim, compact) do with them.
 */
#ifndef KVSTASH_STORE_NVME_H
#define KVSTASH_STORE_NVME_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "index.h"
#include "kvstash/store.h"
#include "list.h"

struct kvs_store;

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

/* ---- what the store does with them ---------------------------------- */

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

/* ---- shared by nvme.c and segments.c ---------------------------------- */

/* Whether @err says the file system (or a quota) is full. */
static inline bool nvme_is_nospc(int err)
{
	return err == -ENOSPC || err == -EDQUOT;
}

/* A segment's bytes on disk: its log and its footer page. */
static inline uint64_t seg_file_bytes(const struct segment *seg)
{
	return seg->size + (seg->footer ? KVS_STORE_ALIGN : 0);
}

/* Logs an I/O failure, once per full-disk episode for ENOSPC (a batch on
 * a full disk would otherwise say it once per object and segment tried). */
void __attribute__((format(printf, 3, 4)))
nvme_log_io_error(struct kvs_store *s, int err, const char *fmt, ...);
/* Reads the record of @rec bytes at @off of @seg into @buf; 0 or the error. */
int nvme_read_record(struct kvs_store *s, struct segment *seg, uint64_t off,
		     uint8_t *buf, uint64_t rec);
/* Appends @image (the record of @e, @rec bytes) to the head synchronously,
 * stamped at the next sequence, and attaches it; 0 or the error (the
 * reservation taken back). */
int nvme_append(struct kvs_store *s, struct segment *head, struct entry *e,
		uint8_t *image, uint64_t rec, int buf_index);
/* Keeps the NVMe ghost queue within its bound. */
void nvme_nghost_trim(struct kvs_store *s);

#endif
