/*
 * walk.c - walking the log of one segment, in bounded reads: the newest
 * segment at open (recovery checks its records in full: only it can hold
 * writes a crash cut short) and every segment in fsck, so that both name
 * the same damage the same way.
 *
 * Records are read one at a time (at most 64 MiB and a page), never the
 * whole segment, so segments of any size (2 GiB and far beyond) walk in
 * constant memory.  Pages that hold no record are skipped in 1 MiB reads,
 * and holes (a sparse or preallocated file's unwritten space) are skipped
 * without reading, through seek_data.  That holds for a buffered file
 * (fsck's, or where O_DIRECT is refused) only without read-ahead, which
 * its opener turns off (file_no_readahead), and only while what a walk
 * read past the log end is not cached: it is dropped when the walk ends.
 *
 * The verdicts (walk.h contract in store_internal.h):
 *   - a record that verifies: good;
 *   - a record failing a check: torn if it is the last thing in the log of
 *     a segment without a footer (a write a crash cut short), corrupt
 *     otherwise (followed by a good record, or sealed: damage since), and
 *     corrupt too if it lies within the log end at which the segment, a
 *     head, was closed cleanly (all of that was synced: nothing in it can
 *     be torn; only writes of a later process past it can);
 *   - pages holding no record, followed by a record: torn when all zeros
 *     (a write never made), corrupt otherwise; running to the end of the
 *     file: torn unless all zeros (then they are the unused rest);
 *   - a record running past the end of the file: torn.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>

#include "kvstash/log.h"
#include "disk.h"

static bool page_zero(const uint8_t *p)
{
	for (size_t i = 0; i < KVS_STORE_ALIGN; i++)
		if (p[i])
			return false;
	return true;
}

/* The page at @off of segment @id ends the log: it is its footer. */
static bool is_footer(const uint8_t *page, uint64_t id, uint64_t off,
		      struct seg_footer *out)
{
	struct seg_footer f;

	if (seg_footer_decode(page, &f) || f.id != id || f.end != off)
		return false;
	if (out)
		*out = f;
	return true;
}

int resync(const struct kvs_store_io_ops *io, int fd, uint64_t id,
	   uint64_t from, uint64_t size, uint8_t *bulk, uint64_t *found,
	   bool *zero)
{
	struct rec_header h;
	uint64_t off = from;

	*zero = true;
	while (off < size) {
		uint64_t data, want;
		ssize_t n;
		int err = io->seek_data(io->ctx, fd, off, &data);

		if (err == -ENXIO)
			break; /* only a hole follows: zeros */
		if (!err && data > off)
			off = data / KVS_STORE_ALIGN * KVS_STORE_ALIGN;
		if (off >= size)
			break;
		want = size - off < RESYNC_CHUNK ? size - off : RESYNC_CHUNK;
		n = io->pread(io->ctx, fd, bulk, want, (off_t)off);
		if (n < 0) {
			kvs_log(KVS_LOG_ERR, "store: read segment %llu: %s",
				(unsigned long long)id, strerror((int)-n));
			return (int)n;
		}
		n = n / KVS_STORE_ALIGN * KVS_STORE_ALIGN;
		if (n == 0)
			break;
		for (ssize_t p = 0; p < n; p += KVS_STORE_ALIGN) {
			if (rec_header_decode(bulk + p, &h) == 0 ||
			    is_footer(bulk + p, id, off + (uint64_t)p, NULL)) {
				*found = off + (uint64_t)p;
				return 0;
			}
			if (*zero && !page_zero(bulk + p))
				*zero = false;
		}
		off += (uint64_t)n;
	}
	*found = size;
	return 0;
}

struct walker {
	const struct kvs_store_io_ops *io;
	int fd;
	uint64_t id, size;
	uint64_t clean_end; /* walk_opts */
	uint8_t *rec; /* one record, grown as needed */
	uint64_t rec_cap;
	uint8_t *bulk; /* RESYNC_CHUNK */
	struct walk_item failed; /* a failed record awaiting its verdict */
	bool has_failed;
	int (*cb)(void *arg, const struct walk_item *it);
	void *arg;
	struct walk_end end;
};

static int emit(struct walker *w, const struct walk_item *it)
{
	if (it->status != KVS_FSCK_GOOD)
		w->end.damaged = true;
	return w->cb ? w->cb(w->arg, it) : 0;
}

/* The failed record is followed by what tells its verdict. */
static int settle_failed(struct walker *w, enum kvs_fsck_status status)
{
	if (!w->has_failed)
		return 0;
	w->has_failed = false;
	if (w->failed.off + w->failed.len <= w->clean_end)
		status = KVS_FSCK_CORRUPT; /* synced at a clean close */
	w->failed.status = status;
	return emit(w, &w->failed);
}

/* Room for a record of @len bytes, keeping the header page read. */
static int grow_rec(struct walker *w, uint64_t len)
{
	uint8_t *p;

	if (len <= w->rec_cap)
		return 0;
	if (posix_memalign((void **)&p, KVS_STORE_ALIGN, len))
		return -ENOMEM;
	if (w->rec)
		memcpy(p, w->rec, KVS_STORE_ALIGN);
	free(w->rec);
	w->rec = p;
	w->rec_cap = len;
	return 0;
}

/* Reads the record whose header page is in w->rec at @off, whole. */
static int read_rest(struct walker *w, uint64_t off, uint64_t len)
{
	ssize_t n;

	if (len <= KVS_STORE_ALIGN)
		return 0;
	n = w->io->pread(w->io->ctx, w->fd, w->rec + KVS_STORE_ALIGN,
			 len - KVS_STORE_ALIGN, (off_t)(off + KVS_STORE_ALIGN));
	if (n < 0) {
		kvs_log(KVS_LOG_ERR, "store: read segment %llu at %llu: %s",
			(unsigned long long)w->id, (unsigned long long)off,
			strerror((int)-n));
		return (int)n;
	}
	return (uint64_t)n == len - KVS_STORE_ALIGN ? 0 : -KVS_ETRUNC;
}

/* The record at @off (its header page in w->rec): verdict or pending. */
static int walk_record(struct walker *w, uint64_t off,
		       const struct rec_header *h, unsigned verify_flags,
		       uint64_t *next)
{
	uint64_t len = record_size(h->length);
	struct walk_item it = {
		.kind = WALK_RECORD,
		.off = off,
		.len = len,
		.has_header = true,
		.h = *h,
	};
	int err;

	err = settle_failed(w, KVS_FSCK_CORRUPT);
	if (err)
		return err;
	w->end.records++;
	if (off + len > w->size) {
		/* the log ends inside it */
		it.status = KVS_FSCK_TORN;
		it.len = w->size - off;
		it.check = "record length";
		*next = w->size;
		return emit(w, &it);
	}
	err = grow_rec(w, len);
	if (!err)
		err = read_rest(w, off, len);
	if (err == -KVS_ETRUNC) {
		it.status = KVS_FSCK_TORN;
		it.check = "record length";
		*next = w->size;
		return emit(w, &it);
	}
	if (err)
		return err;
	*next = off + len;
	if (record_verify(w->rec, len, NULL, verify_flags, NULL, &it.check)) {
		w->failed = it;
		w->has_failed = true;
		return 0;
	}
	it.status = KVS_FSCK_GOOD;
	it.rec = w->rec;
	return emit(w, &it);
}

/* Pages at @off hold no record (@err: why the first one is not; its
 * page is in w->rec). */
static int walk_damage(struct walker *w, uint64_t off, int err, uint64_t *next)
{
	struct walk_item it = { .kind = WALK_DAMAGE, .off = off };
	uint64_t found;
	bool zero;

	/* zeros, most likely the log's end: the page just read is dropped
	 * from the page cache, or seek_data would take it for data and
	 * have the preallocated rest read */
	if (page_zero(w->rec))
		posix_fadvise(w->fd, (off_t)off, KVS_STORE_ALIGN,
			      POSIX_FADV_DONTNEED);
	err = resync(w->io, w->fd, w->id, off, w->size, w->bulk, &found, &zero);
	if (err)
		return err;
	if (found == w->size && zero) {
		/* the unused rest of the file: the log ends at @off */
		*next = w->size;
		return settle_failed(w, KVS_FSCK_TORN);
	}
	err = settle_failed(w, found == w->size ? KVS_FSCK_TORN
						: KVS_FSCK_CORRUPT);
	if (err)
		return err;
	it.len = found - off;
	if (found == w->size) {
		it.status = KVS_FSCK_TORN;
		it.check = "log ends in garbage";
	} else if (zero) {
		it.status = KVS_FSCK_TORN;
		it.check = "never written";
	} else {
		it.status = KVS_FSCK_CORRUPT;
		it.check = rec_check_name(err);
	}
	*next = found;
	w->end.log_end = found;
	return emit(w, &it);
}

int seg_walk_opts(const struct kvs_store_io_ops *io, int fd, uint64_t id,
		  uint64_t size, const struct walk_opts *wo,
		  int (*cb)(void *arg, const struct walk_item *it), void *arg,
		  struct walk_end *end)
{
	struct walker w = {
		.io = io,
		.fd = fd,
		.id = id,
		.size = size,
		.clean_end = wo->clean_end,
		.cb = cb,
		.arg = arg,
	};
	uint64_t off = SEG_HEADER_SIZE, next, reported = 0;
	struct rec_header h;
	int err = 0;

	/* a file shorter than its header has no log at all */
	w.end.log_end = size < SEG_HEADER_SIZE ? size : SEG_HEADER_SIZE;
	if (grow_rec(&w, KVS_STORE_ALIGN) ||
	    posix_memalign((void **)&w.bulk, KVS_STORE_ALIGN, RESYNC_CHUNK)) {
		err = -ENOMEM;
		goto out;
	}
	while (off + KVS_STORE_ALIGN <= size) {
		struct walk_item foot = { .kind = WALK_FOOTER, .off = off };
		ssize_t n = io->pread(io->ctx, fd, w.rec, KVS_STORE_ALIGN,
				      (off_t)off);
		int derr;

		if (n < 0) {
			kvs_log(KVS_LOG_ERR,
				"store: read segment %llu at %llu: %s",
				(unsigned long long)id, (unsigned long long)off,
				strerror((int)-n));
			err = (int)n;
			goto out;
		}
		if (n != KVS_STORE_ALIGN)
			break;
		if (is_footer(w.rec, id, off, &foot.footer)) {
			err = settle_failed(&w, KVS_FSCK_CORRUPT);
			foot.len = KVS_STORE_ALIGN;
			foot.status = KVS_FSCK_GOOD;
			w.end.footer = true;
			w.end.log_end = off;
			if (!err)
				err = emit(&w, &foot);
			goto out;
		}
		derr = rec_header_decode(w.rec, &h);
		if (derr == 0)
			err = walk_record(&w, off, &h, wo->verify_flags, &next);
		else
			err = walk_damage(&w, off, derr, &next);
		if (err)
			goto out;
		if (derr == 0)
			w.end.log_end = next;
		off = next;
		if (wo->progress && off - reported >= PROGRESS_STEP) {
			wo->progress(wo->progress_arg, off);
			reported = off;
		}
	}
	/* nothing follows the last record: if it failed, a crash cut it */
	err = settle_failed(&w, KVS_FSCK_TORN);
out:
	/* zeros read past the log end, cached, would be data to the
	 * seek_data of later walks and scans (advice: failures are no
	 * matter) */
	posix_fadvise(fd, (off_t)w.end.log_end, 0, POSIX_FADV_DONTNEED);
	if (end)
		*end = w.end;
	free(w.rec);
	free(w.bulk);
	return err;
}

int seg_walk(const struct kvs_store_io_ops *io, int fd, uint64_t id,
	     uint64_t size, unsigned verify_flags,
	     int (*cb)(void *arg, const struct walk_item *it), void *arg,
	     struct walk_end *end)
{
	struct walk_opts wo = { .verify_flags = verify_flags };

	return seg_walk_opts(io, fd, id, size, &wo, cb, arg, end);
}
