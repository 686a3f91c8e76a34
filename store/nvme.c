/*
 * nvme.c - the NVMe tier: a log of segment files.  Records are appended to
 * the newest segment (the head) at 4096-aligned offsets; a full head is
 * sealed and a new segment created (header written, fsync, fsync of the
 * directory, so a durable record's file is always findable).  The head is
 * preallocated to the full segment size: ext4 and others complete O_DIRECT
 * writes that extend a file one at a time, so appends stay inside it; a
 * sealed segment (and the head at close) is cut back to its log end.
 *
 * Capacity is counted in whole segments: at most nvme_capacity /
 * segment_size files.  When one more is needed, the oldest segment is
 * reclaimed whole: a record read since it was written (freq > 0, the
 * S3-FIFO "main" rule applied to a log) is carried forward, re-appended to
 * the new head (or, if DRAM holds a copy, left there to be spilled again);
 * the others are dropped and their keys kept as NVMe ghosts, so that a
 * re-put of one starts with freq 1.  Carrying is best effort: a crash
 * between deleting the old file and rewriting loses those records, which
 * a cache may do.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvstash/log.h"
#include "store_internal.h"

#define REG_CHUNK (1ull << 30)

struct carry {
	struct entry *e;
	uint8_t *image;
	uint64_t rec;
};

void seg_path(const struct kvs_store *s, uint64_t id, char *out, size_t n)
{
	char name[32];

	seg_name(id, name);
	snprintf(out, n, "%s/%s", s->dir, name);
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
	int flags = O_RDWR | (create ? O_CREAT | O_EXCL : 0);
	int fd;

	if (s->direct) {
		fd = s->io->open(s->io->ctx, path, flags | O_DIRECT, 0644);
		if (fd != -EINVAL)
			goto done;
		direct_refused(s);
	}
	fd = s->io->open(s->io->ctx, path, flags, 0644);
done:
	if (fd < 0) {
		kvs_log(KVS_LOG_ERR, "store: open %s: %s", path, strerror(-fd));
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
	s->nvme_file_bytes -= seg->size;
	s->io->close(s->io->ctx, seg->fd);
	free(seg);
}

static struct segment *head_seg(struct kvs_store *s)
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

	return head && head->size + rec <= s->opts.segment_size;
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
	list_push(&seg->records, &e->nlink);
	seg->live_bytes += record_size(e->len);
	seg->live_count++;
	s->nvme_objects++;
	s->nvme_obj_bytes += e->len;
}

void nvme_detach(struct kvs_store *s, struct entry *e)
{
	if (!e->seg)
		return;
	list_del(&e->nlink);
	e->seg->live_bytes -= record_size(e->len);
	e->seg->live_count--;
	e->seg = NULL;
	s->nvme_objects--;
	s->nvme_obj_bytes -= e->len;
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
		kvs_log(KVS_LOG_ERR, "store: %s segment %llu at %llu: %s",
			op == KVS_STORE_IO_READ ? "read" : "write",
			(unsigned long long)seg->id, (unsigned long long)off,
			kvs_strerror(err));
	return err;
}

static int read_record(struct kvs_store *s, struct segment *seg, uint64_t off,
		       uint8_t *buf, uint64_t rec)
{
	return record_io(s, seg, KVS_STORE_IO_READ, off, buf, rec, -1);
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

struct carry_set {
	struct carry *v;
	size_t n, cap;
};

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

/* Empties the oldest segment, keeping in @set the records worth carrying
 * that DRAM does not hold, and deletes it. */
static void reclaim_oldest(struct kvs_store *s, struct carry_set *set)
{
	struct segment *seg =
		list_entry(s->segments.prev, struct segment, link);
	char path[4096];
	struct list *l;
	int err;

	while ((l = list_oldest(&seg->records))) {
		struct entry *e = list_entry(l, struct entry, nlink);
		bool keep = false;

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
	seg_path(s, seg->id, path, sizeof(path));
	seg_free(s, seg);
	err = s->io->unlink(s->io->ctx, path);
	if (err)
		kvs_log(KVS_LOG_WARN, "store: unlink %s: %s", path,
			strerror(-err));
}

int seg_grow(struct kvs_store *s, int fd)
{
	off_t len = (off_t)s->opts.segment_size;
	int err = s->io->fallocate(s->io->ctx, fd, len);

	if (err == -EOPNOTSUPP)
		err = s->io->ftruncate(s->io->ctx, fd, len);
	if (err)
		kvs_log(KVS_LOG_ERR, "store: cannot size a segment in %s: %s",
			s->dir, strerror(-err));
	return err;
}

void seg_trim(struct kvs_store *s, struct segment *seg)
{
	int err = s->io->ftruncate(s->io->ctx, seg->fd, (off_t)seg->size);

	if (err)
		kvs_log(KVS_LOG_WARN, "store: trim segment %llu: %s",
			(unsigned long long)seg->id, strerror(-err));
}

static int create_segment(struct kvs_store *s)
{
	uint64_t id = s->next_seg_id++;
	char path[4096];
	ssize_t n;
	int fd, err;

	seg_path(s, id, path, sizeof(path));
	err = nvme_open_file(s, path, true, &fd);
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
	return 0;
remove_file:
	kvs_log(KVS_LOG_ERR, "store: cannot create segment %s: %s", path,
		kvs_strerror(err));
	s->io->close(s->io->ctx, fd);
	s->io->unlink(s->io->ctx, path);
	return err;
}

static int write_at(struct kvs_store *s, struct segment *seg, uint64_t off,
		    uint8_t *image, uint64_t rec, int buf_index)
{
	return record_io(s, seg, KVS_STORE_IO_WRITE, off, image, rec,
			 buf_index);
}

static void stamp(struct kvs_store *s, struct entry *e, uint8_t *image,
		  uint64_t seq)
{
	struct rec_header h = {
		.seq = seq,
		.length = e->len,
		.payload_sum = e->psum,
		.key = e->key,
	};

	rec_header_encode(&h, image);
}

/* Re-appends carried records to the (new, empty) head; those that do not
 * fit, or when @write is false, are dropped. */
static void write_carries(struct kvs_store *s, struct carry_set *set,
			  bool write)
{
	struct segment *head = head_seg(s);

	for (size_t i = 0; i < set->n; i++) {
		struct carry *c = &set->v[i];
		struct entry *e = c->e;
		uint64_t seq = s->next_seq++;
		bool kept = false;

		if (write && head && e->in_index && !e->seg &&
		    head->size + c->rec <= s->opts.segment_size) {
			stamp(s, e, c->image, seq);
			if (write_at(s, head, head->size, c->image, c->rec,
				     -1) == 0) {
				nvme_attach(s, e, head, head->size, seq);
				s->st.carried++;
				kept = true;
			}
			head->size += c->rec;
			s->nvme_file_bytes += c->rec;
			head->dirty = true;
		}
		if (!kept && !e->seg)
			s->st.evictions++;
		free(c->image);
		e->pins--;
		entry_maybe_free(s, e);
	}
	free(set->v);
	set->v = NULL;
	set->n = set->cap = 0;
}

int nvme_reserve(struct kvs_store *s, uint64_t rec, struct segment **seg,
		 uint64_t *off)
{
	struct carry_set set = { 0 };
	struct segment *head;
	int err;

	if (rec + SEG_HEADER_SIZE > s->opts.segment_size) {
		kvs_log(KVS_LOG_ERR,
			"store: record of %llu bytes exceeds the segment size",
			(unsigned long long)rec);
		return -EFBIG;
	}
	while (!nvme_head_fits(s, rec)) {
		head = head_seg(s);
		if (head) {
			head->sealed = true;
			seg_trim(s, head);
		}
		while (s->nsegs + 1 > s->max_segs && s->nsegs > 0) {
			struct segment *old = list_entry(s->segments.prev,
							 struct segment, link);

			if (old->pending) {
				/* its writes are still in flight: no room */
				kvs_log(KVS_LOG_ERR, "store: NVMe tier full, "
						     "writes in flight");
				write_carries(s, &set, false);
				return -EBUSY;
			}
			reclaim_oldest(s, &set);
		}
		err = create_segment(s);
		write_carries(s, &set, err == 0);
		if (err)
			return err;
	}
	head = head_seg(s);
	*seg = head;
	*off = head->size;
	head->size += rec;
	s->nvme_file_bytes += rec;
	head->dirty = true;
	return 0;
}

static int sync_seg(struct kvs_store *s, struct segment *seg)
{
	int err = s->io->fdatasync(s->io->ctx, seg->fd);

	if (err) {
		/* after a failed sync the file's state is unknown: stop
		 * appending to it and never report it durable */
		seg->sealed = true;
		seg->sync_failed = true;
		kvs_log(KVS_LOG_ERR, "store: fdatasync segment %llu: %s",
			(unsigned long long)seg->id, strerror(-err));
		return err;
	}
	seg->dirty = false;
	return 0;
}

int nvme_sync_dirty(struct kvs_store *s)
{
	struct list *l;
	int err = 0, e2;

	for (l = s->segments.next; l != &s->segments; l = l->next) {
		struct segment *seg = list_entry(l, struct segment, link);

		if (seg->dirty && (e2 = sync_seg(s, seg)) && !err)
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
	stamp(s, e, image, seq);
	err = write_at(s, seg, off, image, rec, buf_index);
	if (err)
		goto unpin;
	if (dur == KVS_DURABILITY_DURABLE) {
		err = sync_seg(s, seg);
		if (err)
			goto unpin;
	}
	nvme_attach(s, e, seg, off, seq);
	e->rec_checked = true;
unpin:
	e->pins--;
	return err;
}
