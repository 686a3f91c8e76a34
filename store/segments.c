/*
 * segments.c - the NVMe tier's segments as a whole (nvme.c describes the
 * log): growing, cutting, syncing and sealing a segment, creating the
 * next head, and making room -- reclaiming the oldest segments (carrying
 * forward the records read since they were written) and compacting a
 * sealed segment that is mostly superseded.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvstash/log.h"
#include "store_internal.h"

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

/* ---- sealing, creating, deleting ------------------------------------- */

int seg_grow(struct kvs_store *s, int fd)
{
	off_t len = (off_t)s->opts.segment_size;
	int err = s->io->fallocate(s->io->ctx, fd, len);

	if (err == -EOPNOTSUPP)
		err = s->io->ftruncate(s->io->ctx, fd, len);
	if (err)
		nvme_log_io_error(s, err, "cannot size a segment in %s",
				  s->dir);
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
		nvme_log_io_error(s, err, "fdatasync segment %llu",
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
		nvme_log_io_error(s, err, "seal segment %llu",
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
	nvme_log_io_error(s, err, "cannot create segment %s", path);
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
	if (err && !nvme_is_nospc(err)) {
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
	if (nvme_read_record(s, seg, e->off, c->image, rec) ||
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
	nvme_nghost_trim(s);
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
		    nvme_append(s, head, e, c->image, c->rec, -1) == 0) {
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
	if (nvme_is_nospc(err) && s->nsegs > 0 && space_short(s) > 0) {
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
				err = nvme_append(s, head, e, tomb_page,
						  KVS_STORE_ALIGN, -1);
			} else {
				err = -ENOMEM;
			}
		} else if (e->slot) {
			/* the DRAM slot holds the record image */
			err = nvme_append(s, head, e, e->slot, rec,
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
				err = nvme_read_record(s, victim, e->off, buf,
						       rec);
			/* a damaged record is dropped (and counted) by the
			 * check, not copied */
			if (!err && (e->rec_checked ||
				     store_check_read(s, e, buf) == 0))
				err = nvme_append(s, head, e, buf, rec, -1);
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
