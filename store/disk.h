/*
 * disk.h - the store's on-disk layer: the names and sizes of its files, the
 * encodings of the superblock, segment header and footer, record header
 * and manifest (format.c, pure), the directory (dir.c), the manifest
 * (manifest.c) and the walk over one segment's log (walk.c).  Every
 * function reads and writes through the I/O ops it is given.
 */
#ifndef KVSTASH_STORE_DISK_H
#define KVSTASH_STORE_DISK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/bytes.h"
#include "kvstash/store.h"

struct kvs_store;

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

#endif
