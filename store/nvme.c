/*
 * nvme.c - the NVMe tier: a log of segment files.  Records are appended to
 * the newest segment (the head) at 4096-aligned offsets; a full head is
 * sealed (a footer page after its log end stating that length and its
 * record count, the file cut there, fdatasync) and a new segment created
 * (header written, fsync, fsync of the directory, so a durable record's
 * file is always findable), then listed in the manifest.  The head is
 * preallocated to the full segment size: ext4 and others complete
 * O_DIRECT writes that extend a file one at a time, so appends stay
 * inside it; a segment's file never exceeds the segment size.
 *
 * Capacity is counted in whole segments: at most nvme_capacity /
 * segment_size files, and never more than the file system has room for
 * (its free space is asked before a segment is created; a full file
 * system makes the store reclaim, not fail).  When one more is needed,
 * the oldest segment is reclaimed whole: a record read since it was
 * written (freq > 0, the S3-FIFO "main" rule applied to a log) is carried
 * forward, re-appended to the new head (or, if DRAM holds a copy, left
 * there to be spilled again); the others are dropped and their keys kept
 * as NVMe ghosts, so that a re-put of one starts with freq 1.  Carrying is
 * best effort: a crash between deleting the old file and rewriting loses
 * those records, which a cache may do.  A segment leaves the manifest,
 * durably, before its file is deleted.
 *
 * Superseded records are not left to accumulate until capacity: after a
 * roll, the sealed segment with the fewest live bytes, if at most half
 * its log is live, is compacted -- its live records copied to the new
 * head, the head synced (the copies are as durable as the originals were),
 * then the segment deleted.
 *
 * A failed record write never leaves a hole: the last reservation is
 * taken back, and the head takes no more records (sealed at the next
 * roll, which cuts off whatever part of the failed write landed).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvstash/log.h"
#include "store_internal.h"

#define REG_CHUNK (1ull << 30)
#define SPACE_SLACK (1ull << 20) /* beyond a segment: manifest, metadata */

struct carry {
	struct entry *e;
	uint8_t *image;
	uint64_t rec;
};

struct carry_set {
	struct carry *v;
	size_t n, cap;
};

void seg_path(const struct kvs_store *s, uint64_t id, char *out, size_t n)
{
	char name[32];

	seg_name(id, name);
	snprintf(out, n, "%s/%s", s->dir, name);
}

static bool is_nospc(int err)
{
	return err == -ENOSPC || err == -EDQUOT;
}

/* Logs an I/O failure, once per full-disk episode for ENOSPC (a batch on a
 * full disk would otherwise say it once per object and segment tried). */
static void __attribute__((format(printf, 3, 4)))
log_io_error(struct kvs_store *s, int err, const char *fmt, ...)
{
	char line[512];
	va_list ap;

	if (is_nospc(err)) {
		if (s->nospc_logged)
			return;
		s->nospc_logged = true;
	}
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (is_nospc(err))
		kvs_log(KVS_LOG_ERR,
			"store: %s: %s (the file system of %s is full: "
			"puts fail until space is freed; said once)",
			line, kvs_strerror(err), s->dir);
	else
		kvs_log(KVS_LOG_ERR, "store: %s: %s", line, kvs_strerror(err));
}

/* The file system of the store refuses O_DIRECT (EINVAL at open, as
 * tmpfs did before Linux 6.6): buffered I/O from now on, reported in the
 * stats' direct_io. */
static void direct_refused(struct kvs_store *s)
{
	kvs_log(KVS_LOG_WARN, "store: %s refuses O_DIRECT; using buffered I/O",
		s->dir);
	s->direct = false;
}

void nvme_probe_direct(struct kvs_store *s)
{
	char path[4096];
	int fd;

	if (!s->direct)
		return;
	snprintf(path, sizeof(path), "%s/%s", s->dir, SUPERBLOCK_NAME);
	fd = s->io->open(s->io->ctx, path, O_RDONLY | O_DIRECT, 0);
	if (fd == -EINVAL)
		direct_refused(s);
	else if (fd >= 0)
		s->io->close(s->io->ctx, fd);
}

int nvme_open_file(struct kvs_store *s, const char *path, bool create,
		   int *fd_out)
{
	int flags = (s->read_only ? O_RDONLY : O_RDWR) |
		    (create ? O_CREAT | O_EXCL : 0);
	int fd;

	if (s->direct) {
		fd = s->io->open(s->io->ctx, path, flags | O_DIRECT, 0644);
		if (fd != -EINVAL)
			goto done;
		direct_refused(s);
	}
	fd = s->io->open(s->io->ctx, path, flags, 0644);
	if (fd >= 0)
		file_no_readahead(fd);
done:
	if (fd < 0) {
		if (fd != -EEXIST)
			log_io_error(s, fd, "open %s", path);
		return fd;
	}
	*fd_out = fd;
	return 0;
}

int buf_index_of(struct kvs_store *s, const uint8_t *p)
{
	if (!s->registered || p < s->dram.base ||
	    p >= s->dram.base + s->dram.map_len)
		return -1;
	return (int)((uint64_t)(p - s->dram.base) / REG_CHUNK);
}

/* Bytes of @seg's file counted in nvme_file_bytes: the log (the head's
 * preallocated rest is not), and the footer once written. */
static uint64_t seg_file_bytes(const struct segment *seg)
{
	return seg->size + (seg->footer ? KVS_STORE_ALIGN : 0);
}

struct segment *seg_new(struct kvs_store *s, uint64_t id, int fd, uint64_t size)
{
	struct segment *seg = calloc(1, sizeof(*seg));

	if (!seg)
		return NULL;
	seg->id = id;
	seg->fd = fd;
	seg->size = size;
	list_init(&seg->records);
	list_push(&s->segments, &seg->link);
	s->nsegs++;
	s->nvme_file_bytes += size;
	if (id >= s->next_seg_id)
		s->next_seg_id = id + 1;
	return seg;
}

void seg_free(struct kvs_store *s, struct segment *seg)
{
	list_del(&seg->link);
	s->nsegs--;
	s->nvme_file_bytes -= seg_file_bytes(seg);
	s->io->close(s->io->ctx, seg->fd);
	free(seg);
}

struct segment *newest_seg(struct kvs_store *s)
{
	if (list_empty(&s->segments))
		return NULL;
	return list_entry(s->segments.next, struct segment, link);
}

struct segment *head_seg(struct kvs_store *s)
{
	if (list_empty(&s->segments))
		return NULL;
	struct segment *seg =
		list_entry(s->segments.next, struct segment, link);

	return seg->sealed ? NULL : seg;
}

bool nvme_head_fits(struct kvs_store *s, uint64_t rec)
{
	struct segment *head = head_seg(s);

	/* room for the record and, after it, the footer */
	return head && !head->write_failed &&
	       head->size + rec + KVS_STORE_ALIGN <= s->opts.segment_size;
}

void nvme_attach(struct kvs_store *s, struct entry *e, struct segment *seg,
		 uint64_t off, uint64_t seq)
{
	nvme_detach(s, e);
	if (e->nghost) {
		list_del(&e->nlink);
		e->nghost = false;
		s->nghost_n--;
		e->nfreq = 1;
	}
	e->seg = seg;
	e->off = off;
	e->seq = seq;
	e->bad = false;
	e->on_disk = true;
	list_push(&seg->records, &e->nlink);
	seg->live_bytes += record_size(e->len);
	seg->live_count++;
	if (e->tomb) {
		s->nvme_tombstones++;
		list_push(&s->tombs, &e->tlink);
	} else {
		s->nvme_objects++;
		s->nvme_obj_bytes += e->len;
	}
}

void nvme_detach(struct kvs_store *s, struct entry *e)
{
	if (!e->seg)
		return;
	list_del(&e->nlink);
	e->seg->live_bytes -= record_size(e->len);
	e->seg->live_count--;
	e->seg = NULL;
	if (e->tomb) {
		s->nvme_tombstones--;
		list_del(&e->tlink);
	} else {
		s->nvme_objects--;
		s->nvme_obj_bytes -= e->len;
	}
}

uint64_t nvme_first_seg(struct kvs_store *s)
{
	/* records go to the newest segment or to one made after it */
	if (list_empty(&s->segments))
		return s->next_seg_id;
	return list_entry(s->segments.next, struct segment, link)->id;
}

bool nvme_tomb_droppable(struct kvs_store *s, const struct entry *e,
			 const struct segment *seg)
{
	uint64_t floor =
		e->first_seg < s->stale_floor ? e->first_seg : s->stale_floor;
	struct list *l;

	/* oldest first: the list is in id order */
	for (l = s->segments.prev; l != &s->segments; l = l->prev) {
		const struct segment *o = list_entry(l, struct segment, link);

		if (o->id >= seg->id)
			break;
		if (o->id >= floor)
			return false;
	}
	return true;
}

void tomb_drop(struct kvs_store *s, struct entry *e)
{
	nvme_detach(s, e);
	/* every older record of the key is gone with it */
	e->on_disk = false;
	e->tomb = false;
	entry_maybe_free(s, e);
}

void tombs_prune(struct kvs_store *s)
{
	struct list *l = s->tombs.next, *next;

	/* the record stays in its segment, harmless: the index forgets it,
	 * and the segment's live bytes no longer count it */
	for (; l != &s->tombs; l = next) {
		struct entry *e = list_entry(l, struct entry, tlink);

		next = l->next;
		if (!e->pins && nvme_tomb_droppable(s, e, e->seg))
			tomb_drop(s, e);
	}
}

static void nghost_trim(struct kvs_store *s)
{
	uint64_t limit = s->nvme_objects > 256 ? s->nvme_objects : 256;
	struct list *l;

	while (s->nghost_n > limit && (l = list_oldest(&s->nghost))) {
		struct entry *e = list_entry(l, struct entry, nlink);

		list_del(&e->nlink);
		e->nghost = false;
		s->nghost_n--;
		entry_maybe_free(s, e);
	}
}

/* One whole-record read or write at @off of @seg; a short transfer is
 * -EIO.  Logs the failure. */
static int record_io(struct kvs_store *s, struct segment *seg, int op,
		     uint64_t off, uint8_t *buf, uint64_t rec, int buf_index)
{
	struct kvs_store_io_req req = {
		.op = op,
		.fd = seg->fd,
		.buf = buf,
		.len = (uint32_t)rec,
		.off = off,
		.buf_index = buf_index,
	};
	int err = io_run(s, &req, 1, s->opts.queue_depth);

	if (!err && req.res < 0)
		err = req.res;
	else if (!err && (uint64_t)req.res != rec)
		err = -EIO;
	if (err)
		log_io_error(s, err, "%s segment %llu at %llu",
			     op == KVS_STORE_IO_READ ? "read" : "write",
			     (unsigned long long)seg->id,
			     (unsigned long long)off);
	return err;
}

static int read_record(struct kvs_store *s, struct segment *seg, uint64_t off,
		       uint8_t *buf, uint64_t rec)
{
	return record_io(s, seg, KVS_STORE_IO_READ, off, buf, rec, -1);
}

static int write_at(struct kvs_store *s, struct segment *seg, uint64_t off,
		    uint8_t *image, uint64_t rec, int buf_index)
{
	int err = record_io(s, seg, KVS_STORE_IO_WRITE, off, image, rec,
			    buf_index);

	seg_written(seg);
	return err;
}

void seg_written(struct segment *seg)
{
	seg->dirty = true;
	seg->wgen++;
}

int nvme_check_record(struct kvs_store *s, struct entry *e)
{
	uint64_t rec = record_size(e->len);
	uint8_t *buf;
	int err;

	if (e->rec_checked)
		return 0;
	if (posix_memalign((void **)&buf, KVS_STORE_ALIGN, rec))
		return -ENOMEM;
	err = read_record(s, e->seg, e->off, buf, rec);
	if (!err)
		err = store_check_read(s, e, buf);
	free(buf);
	return err;
}

/* ---- appending ------------------------------------------------------- */

void record_stamp(struct entry *e, uint8_t *image, uint64_t seq)
{
	struct rec_header h = {
		.flags = e->tomb ? REC_FLAG_TOMBSTONE : 0,
		.seq = seq,
		.length = e->len,
		.payload_sum = e->psum,
		.key = e->key,
	};

	rec_header_encode(&h, image);
}

void nvme_write_failed(struct kvs_store *s, struct segment *seg, uint64_t off,
		       uint64_t rec)
{
	/* the last reservation is taken back: no hole is left; the head
	 * takes nothing more, and sealing it cuts off what landed */
	if (off + rec == seg->size) {
		seg->size = off;
		s->nvme_file_bytes -= rec;
	}
	seg->write_failed = true;
}

/* Appends @image (the record of @e) to the head synchronously. */
static int append(struct kvs_store *s, struct segment *head, struct entry *e,
		  uint8_t *image, uint64_t rec, int buf_index)
{
	uint64_t off = head->size, seq;
	int err;

	if (s->next_seq > REC_SEQ_MAX)
		return -EOVERFLOW;
	seq = s->next_seq++;
	record_stamp(e, image, seq);
	head->size += rec;
	s->nvme_file_bytes += rec;
	head->dirty = true;
	s->clean_on_disk = false;
	err = write_at(s, head, off, image, rec, buf_index);
	if (err) {
		nvme_write_failed(s, head, off, rec);
		return err;
	}
	head->nrec++;
	nvme_attach(s, e, head, off, seq);
	e->rec_checked = true;
	return 0;
}

/* ---- sealing, creating, deleting ------------------------------------- */

int seg_grow(struct kvs_store *s, int fd)
{
	off_t len = (off_t)s->opts.segment_size;
	int err = s->io->fallocate(s->io->ctx, fd, len);

	if (err == -EOPNOTSUPP)
		err = s->io->ftruncate(s->io->ctx, fd, len);
	if (err)
		log_io_error(s, err, "cannot size a segment in %s", s->dir);
	return err;
}

void seg_trim(struct kvs_store *s, struct segment *seg)
{
	int err = s->io->ftruncate(s->io->ctx, seg->fd,
				   (off_t)seg_file_bytes(seg));

	if (err)
		kvs_log(KVS_LOG_WARN, "store: trim segment %llu: %s",
			(unsigned long long)seg->id, strerror(-err));
}

int seg_sync(struct kvs_store *s, struct segment *seg)
{
	int err = s->io->fdatasync(s->io->ctx, seg->fd);

	if (err) {
		/* after a failed sync the file's state is unknown: stop
		 * appending to it and never report it durable */
		seg->sealed = true;
		seg->sync_failed = true;
		log_io_error(s, err, "fdatasync segment %llu",
			     (unsigned long long)seg->id);
		return err;
	}
	seg->dirty = false;
	seg->unsynced = false;
	return 0;
}

void seg_seal(struct kvs_store *s, struct segment *seg)
{
	struct seg_footer f = { .id = seg->id,
				.end = seg->size,
				.records = seg->nrec };
	ssize_t n;
	int err;

	seg->sealed = true;
	if (seg->footer)
		return;
	seg_footer_encode(&f, s->scratch);
	n = s->io->pwrite(s->io->ctx, seg->fd, s->scratch, KVS_STORE_ALIGN,
			  (off_t)seg->size);
	err = n < 0 ? (int)n : n != KVS_STORE_ALIGN ? -EIO : 0;
	if (!err) {
		seg->footer = true;
		s->nvme_file_bytes += KVS_STORE_ALIGN;
	}
	/* cut after the footer (or the log): preallocation, and whatever
	 * part of a failed write landed, go */
	seg_trim(s, seg);
	if (err)
		log_io_error(s, err, "seal segment %llu",
			     (unsigned long long)seg->id);
	else
		seg_sync(s, seg);
}

static int create_segment(struct kvs_store *s)
{
	char path[4096];
	ssize_t n;
	uint64_t id;
	int fd, err;

	/* a file a crash revived may hold an id: take the next one */
	do {
		id = s->next_seg_id++;
		seg_path(s, id, path, sizeof(path));
		err = nvme_open_file(s, path, true, &fd);
	} while (err == -EEXIST);
	if (err)
		return err;
	seg_header_encode(id, s->scratch);
	n = s->io->pwrite(s->io->ctx, fd, s->scratch, SEG_HEADER_SIZE, 0);
	err = n < 0 ? (int)n : n != SEG_HEADER_SIZE ? -EIO : 0;
	if (!err)
		err = seg_grow(s, fd);
	if (!err)
		err = s->io->fsync(s->io->ctx, fd);
	if (!err)
		err = dir_fsync(s->io, s->dir);
	if (err)
		goto remove_file;
	if (!seg_new(s, id, fd, SEG_HEADER_SIZE)) {
		err = -ENOMEM;
		goto remove_file;
	}
	s->nospc_logged = false;
	return 0;
remove_file:
	log_io_error(s, err, "cannot create segment %s", path);
	s->io->close(s->io->ctx, fd);
	s->io->unlink(s->io->ctx, path);
	return err;
}

/* Deletes @n segments (already emptied): out of the manifest, durably,
 * then their files.  A manifest that cannot be written (a full disk) does
 * not keep them: the files go anyway, to make room, and the manifest is
 * written again at once. */
static void drop_segments(struct kvs_store *s, struct segment **v, size_t n)
{
	uint64_t *ids = malloc((n ? n : 1) * sizeof(*ids));
	char path[4096];
	int err;

	for (size_t i = 0; i < n; i++) {
		if (ids)
			ids[i] = v[i]->id;
		seg_free(s, v[i]);
	}
	tombs_prune(s);
	err = store_manifest_write(s, false);
	/* the files go without the manifest's word only to make room on a
	 * full disk; otherwise (no memory, say) they stay: listed, they come
	 * back at the next open, which is consistent, where deleted they
	 * would be reported missing */
	if (err && !is_nospc(err)) {
		free(ids);
		return;
	}
	for (size_t i = 0; ids && i < n; i++) {
		int uerr;

		seg_path(s, ids[i], path, sizeof(path));
		uerr = s->io->unlink(s->io->ctx, path);
		if (uerr)
			kvs_log(KVS_LOG_WARN, "store: unlink %s: %s", path,
				strerror(-uerr));
	}
	if (err)
		store_manifest_write(s, false);
	free(ids);
}

/* Reads @e's record into a new slot of @set; false if it cannot. */
static bool carry_add(struct kvs_store *s, struct carry_set *set,
		      struct segment *seg, struct entry *e)
{
	uint64_t rec = record_size(e->len);
	struct carry *c;

	if (set->n == set->cap) {
		size_t cap = set->cap ? set->cap * 2 : 64;
		struct carry *v = realloc(set->v, cap * sizeof(*v));

		if (!v)
			return false;
		set->v = v;
		set->cap = cap;
	}
	c = &set->v[set->n];
	if (posix_memalign((void **)&c->image, KVS_STORE_ALIGN, rec))
		return false;
	/* a record recovery did not check may be torn: carrying it would
	 * only move the damage; it is dropped (and counted) instead */
	if (read_record(s, seg, e->off, c->image, rec) ||
	    (!e->rec_checked && store_check_read(s, e, c->image))) {
		free(c->image);
		return false;
	}
	c->e = e;
	c->rec = rec;
	e->pins++;
	set->n++;
	return true;
}

/* Empties @seg, keeping in @set the records worth carrying that DRAM does
 * not hold; the others become NVMe ghosts. */
static void evict_segment(struct kvs_store *s, struct segment *seg,
			  struct carry_set *set)
{
	struct list *l;

	while ((l = list_oldest(&seg->records))) {
		struct entry *e = list_entry(l, struct entry, nlink);
		bool keep = false;

		/* reclaims take the oldest segments: every older record of a
		 * deleted key goes with this one or went before */
		if (e->tomb) {
			tomb_drop(s, e);
			continue;
		}
		/* its older records are gone too (older segments first) */
		e->on_disk = false;
		if (e->nfreq > 0) {
			e->nfreq--;
			if (e->slot) {
				s->st.carried++; /* DRAM copy is dirty again */
				keep = true;
			} else {
				keep = carry_add(s, set, seg, e);
			}
		}
		nvme_detach(s, e);
		if (keep)
			continue;
		s->st.evictions++;
		e->nghost = true;
		list_push(&s->nghost, &e->nlink);
		s->nghost_n++;
	}
	nghost_trim(s);
}

/* Re-appends carried records to the (new, empty) head, leaving room for
 * the @reserve bytes the roll is for, and carrying at most half a
 * segment: a roll whose carries filled the head would only roll again,
 * churning through the tier (every record read since written is carried)
 * and evicting the newest records.  Those that do not fit, or when @write
 * is false or a write fails, are dropped (evicted). */
static void write_carries(struct kvs_store *s, struct carry_set *set,
			  bool write, uint64_t reserve)
{
	uint64_t carried = 0;

	for (size_t i = 0; i < set->n; i++) {
		struct carry *c = &set->v[i];
		struct entry *e = c->e;
		struct segment *head = head_seg(s);

		if (write && e->in_index && !e->seg &&
		    carried + c->rec <= s->opts.segment_size / 2 &&
		    nvme_head_fits(s, c->rec + reserve) &&
		    append(s, head, e, c->image, c->rec, -1) == 0) {
			s->st.carried++;
			carried += c->rec;
		} else if (!e->seg) {
			s->st.evictions++;
		}
		free(c->image);
		e->pins--;
		entry_maybe_free(s, e);
	}
	free(set->v);
	set->v = NULL;
	set->n = set->cap = 0;
}

/* Bytes the file system lacks for a new segment (0: enough, or unknown). */
static uint64_t space_short(struct kvs_store *s)
{
	uint64_t avail, need = s->opts.segment_size + SPACE_SLACK;

	if (s->io->space(s->io->ctx, s->dir, &avail))
		return 0;
	return avail >= need ? 0 : need - avail;
}

/* Picks the oldest segments to reclaim before one more is created: as
 * many as capacity demands, then as many as the file system's free space
 * demands (@short_bytes).  At most @max into @v; their number. */
static size_t pick_victims(struct kvs_store *s, uint64_t short_bytes,
			   struct segment **v, size_t max)
{
	uint64_t freed = 0;
	size_t n = 0;
	struct list *l;

	for (l = s->segments.prev; l != &s->segments && n < max; l = l->prev) {
		struct segment *seg = list_entry(l, struct segment, link);
		bool by_count = s->nsegs - n + 1 > s->max_segs;

		if (!by_count && freed >= short_bytes)
			break;
		if (seg->pending || seg->async_io)
			break; /* I/O in flight: not before it finishes */
		freed += seg_file_bytes(seg);
		v[n++] = seg;
	}
	return n;
}

/* Reclaims @n segments: their carries read, then out of the manifest and
 * deleted. */
static void reclaim(struct kvs_store *s, struct segment **v, size_t n,
		    struct carry_set *set)
{
	for (size_t i = 0; i < n; i++)
		evict_segment(s, v[i], set);
	if (n)
		drop_segments(s, v, n);
}

/* Creates the next head, reclaiming what capacity and the file system's
 * free space demand first.  A file system full regardless (ENOSPC though
 * it said there was room) makes it reclaim one more and try again, once,
 * when the free space it then reports is short. */
static int roll_create(struct kvs_store *s, struct carry_set *set)
{
	struct segment *v[64];
	size_t n;
	int err;

	do {
		n = pick_victims(s, space_short(s), v, 64);
		reclaim(s, v, n, set);
	} while (n == 64);
	err = create_segment(s);
	if (is_nospc(err) && s->nsegs > 0 && space_short(s) > 0) {
		n = pick_victims(s, UINT64_MAX, v, 1);
		reclaim(s, v, n, set);
		err = create_segment(s);
	}
	return err;
}

/* Copies the live records of @victim to the head, syncs the head, deletes
 * @victim.  Stops (keeping @victim) at a failure. */
static void compact_one(struct kvs_store *s, struct segment *victim)
{
	struct segment *head = head_seg(s);
	uint8_t *buf = NULL, *tomb_page = NULL;
	uint64_t buf_len = 0;
	struct list *l;
	int err = 0;

	while (!err && (l = list_oldest(&victim->records))) {
		struct entry *e = list_entry(l, struct entry, nlink);
		uint64_t rec = record_size(e->len);

		/* a tombstone goes where no older record of its key is left
		 * to hide, else it is copied like a record */
		if (e->tomb && nvme_tomb_droppable(s, e, victim)) {
			tomb_drop(s, e);
			continue;
		}
		e->pins++;
		if (e->tomb) {
			if (!tomb_page &&
			    posix_memalign((void **)&tomb_page, KVS_STORE_ALIGN,
					   KVS_STORE_ALIGN))
				tomb_page = NULL;
			if (tomb_page) {
				memset(tomb_page, 0, KVS_STORE_ALIGN);
				err = append(s, head, e, tomb_page,
					     KVS_STORE_ALIGN, -1);
			} else {
				err = -ENOMEM;
			}
		} else if (e->slot) {
			/* the DRAM slot holds the record image */
			err = append(s, head, e, e->slot, rec,
				     buf_index_of(s, e->slot));
		} else {
			if (rec > buf_len) {
				free(buf);
				buf_len = 0;
				if (posix_memalign((void **)&buf,
						   KVS_STORE_ALIGN, rec)) {
					buf = NULL;
					err = -ENOMEM;
				} else {
					buf_len = rec;
				}
			}
			if (!err)
				err = read_record(s, victim, e->off, buf, rec);
			/* a damaged record is dropped (and counted) by the
			 * check, not copied */
			if (!err && (e->rec_checked ||
				     store_check_read(s, e, buf) == 0))
				err = append(s, head, e, buf, rec, -1);
		}
		e->pins--;
		entry_maybe_free(s, e);
	}
	free(buf);
	free(tomb_page);
	if (err || !list_empty(&victim->records) ||
	    (head->dirty && seg_sync(s, head)))
		return;
	drop_segments(s, &victim, 1);
	s->st.compactions++;
}

/* After a roll: the sealed segment with the lowest live ratio, if at most
 * half its log is live and its records fit the head beside @reserve. */
static void compact(struct kvs_store *s, uint64_t reserve)
{
	struct segment *head = head_seg(s), *best = NULL;
	struct list *l;

	if (!head)
		return;
	for (l = s->segments.prev; l != &s->segments; l = l->prev) {
		struct segment *seg = list_entry(l, struct segment, link);
		uint64_t log = seg->size - SEG_HEADER_SIZE;

		if (seg == head || seg->pending || seg->async_io ||
		    seg->sync_failed || seg->live_bytes * 2 > log)
			continue;
		if (!best || seg->live_bytes * (best->size - SEG_HEADER_SIZE) <
				     best->live_bytes * log)
			best = seg;
	}
	if (best && head->size + best->live_bytes + reserve + KVS_STORE_ALIGN <=
			    s->opts.segment_size)
		compact_one(s, best);
}

int nvme_reserve(struct kvs_store *s, uint64_t rec, struct segment **seg,
		 uint64_t *off)
{
	struct carry_set set = { 0 };
	struct segment *head;
	int err;

	if (rec + SEG_HEADER_SIZE + KVS_STORE_ALIGN > s->opts.segment_size) {
		kvs_log(KVS_LOG_ERR,
			"store: record of %llu bytes exceeds the segment size",
			(unsigned long long)rec);
		return -EFBIG;
	}
	if (s->next_seq > REC_SEQ_MAX) {
		kvs_log(KVS_LOG_ERR, "store: sequence numbers exhausted");
		return -EOVERFLOW;
	}
	/* a roll waits for the writes in flight to the newest segment (the
	 * asynchronous batches'): only it may hold writes a crash cuts */
	if (!nvme_head_fits(s, rec) && newest_seg(s) && newest_seg(s)->apending)
		async_drain_seg(s, newest_seg(s));
	while (!nvme_head_fits(s, rec)) {
		head = head_seg(s);
		if (head)
			seg_seal(s, head);
		err = roll_create(s, &set);
		if (!err)
			err = store_manifest_write(s, false);
		write_carries(s, &set, err == 0, rec);
		if (err)
			return err;
		compact(s, rec);
	}
	head = head_seg(s);
	*seg = head;
	*off = head->size;
	head->size += rec;
	s->nvme_file_bytes += rec;
	head->dirty = true;
	s->clean_on_disk = false;
	return 0;
}

int nvme_sync_dirty(struct kvs_store *s, bool unsynced_too)
{
	struct list *l;
	int err = 0, e2;

	for (l = s->segments.next; l != &s->segments; l = l->next) {
		struct segment *seg = list_entry(l, struct segment, link);
		bool want = seg->dirty || (unsynced_too && seg->unsynced);

		if (want && !seg->sync_failed && (e2 = seg_sync(s, seg)) &&
		    !err)
			err = e2;
	}
	return err;
}

int nvme_write_image(struct kvs_store *s, struct entry *e, uint8_t *image,
		     int buf_index, enum kvs_durability dur)
{
	uint64_t rec = record_size(e->len), off, seq;
	struct segment *seg;
	int err;

	e->pins++;
	err = nvme_reserve(s, rec, &seg, &off);
	if (err)
		goto unpin;
	seq = s->next_seq++;
	record_stamp(e, image, seq);
	err = write_at(s, seg, off, image, rec, buf_index);
	if (err) {
		nvme_write_failed(s, seg, off, rec);
		goto unpin;
	}
	seg->nrec++;
	if (dur == KVS_DURABILITY_DURABLE) {
		err = seg_sync(s, seg);
		if (err)
			goto unpin;
	}
	nvme_attach(s, e, seg, off, seq);
	e->rec_checked = true;
unpin:
	e->pins--;
	return err;
}
