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
 *
 * This file: files, records, appending, reserving and syncing;
 * segments.c: sealing, creating, reclaiming and compacting segments.
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

void seg_path(const struct kvs_store *s, uint64_t id, char *out, size_t n)
{
	char name[32];

	seg_name(id, name);
	snprintf(out, n, "%s/%s", s->dir, name);
}

void nvme_log_io_error(struct kvs_store *s, int err, const char *fmt, ...)
{
	char line[512];
	va_list ap;

	if (nvme_is_nospc(err)) {
		if (s->nospc_logged)
			return;
		s->nospc_logged = true;
	}
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (nvme_is_nospc(err))
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
			nvme_log_io_error(s, fd, "open %s", path);
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

void nvme_nghost_trim(struct kvs_store *s)
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
		nvme_log_io_error(s, err, "%s segment %llu at %llu",
				  op == KVS_STORE_IO_READ ? "read" : "write",
				  (unsigned long long)seg->id,
				  (unsigned long long)off);
	return err;
}

int nvme_read_record(struct kvs_store *s, struct segment *seg, uint64_t off,
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
	err = nvme_read_record(s, e->seg, e->off, buf, rec);
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

int nvme_append(struct kvs_store *s, struct segment *head, struct entry *e,
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
