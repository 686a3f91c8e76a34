/*
 * recover.c - rebuild the index from the segment files at open; there is
 * no other metadata to disagree with them.
 *
 * Segments are scanned together, one 4096-byte record-header read per
 * segment per round, submitted as one batch, so a store of many segments
 * recovers at the device's parallel rate rather than one seek at a time.
 * A valid header indexes its record (newest sequence number wins); a page
 * that is not a valid header starts a bad run, skipped page by page (all
 * records are 4096-aligned, so the scan resynchronises on the next valid
 * header; the skipping reads 1 MiB at a time): a run of garbage that a
 * valid header ends was a corrupt record, a run of zeros a record never
 * written (torn), a run of garbage to the end of the file or a record
 * extending past it a torn one, and zeros to the end of the file are the
 * unused, preallocated rest of a head segment (the log ends there).
 * Payloads are not read here, except in the newest segment, the only one
 * that can hold writes cut short by a crash: its records are checked in
 * full, and if all are whole it becomes the head again.  A torn tail of
 * the newest segment is cut off durably, so only one open counts it;
 * damage before a good record is counted at every open until fsck
 * --repair.  Every later read from NVMe checks the record again.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kvstash/log.h"
#include "store_internal.h"

#define RESYNC_CHUNK (1u << 20)

struct scan {
	struct segment *seg;
	uint64_t off;
	bool done;
	bool damaged; /* something was dropped */
	bool bad_header;
	uint64_t bad_first, bad_last; /* offsets of the first and last
				       * damage dropped, when damaged */
};

/* Something starting at @off of the segment was dropped. */
static void mark_bad(struct scan *sc, uint64_t off)
{
	if (!sc->damaged || off < sc->bad_first)
		sc->bad_first = off;
	if (!sc->damaged || off > sc->bad_last)
		sc->bad_last = off;
	sc->damaged = true;
}

/* Indexes the record at @off of @seg unless a newer one is known. */
static int index_record(struct kvs_store *s, struct segment *seg, uint64_t off,
			const struct rec_header *h)
{
	struct entry *e = index_find(&s->index, &h->key);
	int err;

	if (h->seq >= s->next_seq)
		s->next_seq = h->seq + 1;
	if (e && e->seg && e->seq >= h->seq)
		return 0;
	if (!e) {
		err = index_insert(&s->index, &h->key, &e);
		if (err)
			return err;
	}
	nvme_detach(s, e);
	e->len = h->length;
	e->psum = h->payload_sum;
	nvme_attach(s, e, seg, off, h->seq);
	e->rec_checked = false;
	return 0;
}

static bool page_zero(const uint8_t *p)
{
	for (size_t i = 0; i < KVS_STORE_ALIGN; i++)
		if (p[i])
			return false;
	return true;
}

/* From the invalid page at sc->off, reads ahead in big chunks to the next
 * valid record header (*@found, sc->off moved there) or the end of the
 * file; *@zero says whether every page skipped was all zeros. */
static int resync(struct kvs_store *s, struct scan *sc, uint8_t *bulk,
		  bool *found, bool *zero)
{
	struct segment *seg = sc->seg;
	uint64_t off = sc->off;
	struct rec_header h;

	*found = false;
	*zero = true;
	while (off < seg->size) {
		uint64_t want = seg->size - off < RESYNC_CHUNK ? seg->size - off
							       : RESYNC_CHUNK;
		ssize_t n = s->io->pread(s->io->ctx, seg->fd, bulk, want,
					 (off_t)off);

		if (n < 0) {
			kvs_log(KVS_LOG_ERR, "store: scan segment %llu: %s",
				(unsigned long long)seg->id, strerror((int)-n));
			return (int)n;
		}
		n = n / KVS_STORE_ALIGN * KVS_STORE_ALIGN;
		if (n == 0)
			break;
		for (ssize_t p = 0; p < n; p += KVS_STORE_ALIGN) {
			if (rec_header_decode(bulk + p, &h) == 0) {
				sc->off = off + (uint64_t)p;
				*found = true;
				return 0;
			}
			if (*zero && !page_zero(bulk + p))
				*zero = false;
		}
		off += (uint64_t)n;
	}
	return 0;
}

/* One scan step on the page read at sc->off. */
static int scan_step(struct kvs_store *s, struct scan *sc, const uint8_t *page,
		     int res, uint8_t *bulk)
{
	struct segment *seg = sc->seg;
	struct rec_header h;
	uint64_t start = sc->off;
	bool found, zero;
	int err;

	if (res != (int)KVS_STORE_ALIGN) {
		sc->done = true;
		if (res < 0) {
			kvs_log(KVS_LOG_ERR, "store: scan segment %llu: %s",
				(unsigned long long)seg->id, strerror(-res));
			return res;
		}
		return 0;
	}
	if (rec_header_decode(page, &h) == 0) {
		if (sc->off + record_size(h.length) > seg->size) {
			s->st.torn_dropped++;
			mark_bad(sc, sc->off);
			sc->done = true;
			return 0;
		}
		err = index_record(s, seg, sc->off, &h);
		if (err)
			return err;
		sc->off += record_size(h.length);
		if (sc->off + KVS_STORE_ALIGN > seg->size)
			sc->done = true;
		return 0;
	}
	err = resync(s, sc, bulk, &found, &zero);
	if (err) {
		sc->done = true;
		return err;
	}
	if (found) {
		/* zeros: a record never written (in flight at a crash) */
		if (zero)
			s->st.torn_dropped++;
		else
			s->st.corrupt_dropped++;
		mark_bad(sc, start);
		return 0;
	}
	sc->done = true;
	if (zero) {
		/* the unwritten rest of a preallocated head: the log ends */
		s->nvme_file_bytes -= seg->size - start;
		seg->size = start;
	} else {
		s->st.torn_dropped++;
		mark_bad(sc, start);
	}
	return 0;
}

static int scan_all(struct kvs_store *s, struct scan *sc, size_t n)
{
	struct kvs_store_io_req *req = calloc(n ? n : 1, sizeof(*req));
	uint8_t *pages = NULL, *bulk = NULL;
	size_t *map = calloc(n ? n : 1, sizeof(*map));
	int err = 0;

	if (!req || !map ||
	    posix_memalign((void **)&pages, KVS_STORE_ALIGN,
			   (n ? n : 1) * KVS_STORE_ALIGN) ||
	    posix_memalign((void **)&bulk, KVS_STORE_ALIGN, RESYNC_CHUNK)) {
		err = -ENOMEM;
		goto out;
	}
	for (;;) {
		unsigned nreq = 0;

		for (size_t i = 0; i < n; i++) {
			if (sc[i].done)
				continue;
			req[nreq] = (struct kvs_store_io_req){
				.op = KVS_STORE_IO_READ,
				.fd = sc[i].seg->fd,
				.buf = pages + nreq * KVS_STORE_ALIGN,
				.len = KVS_STORE_ALIGN,
				.off = sc[i].off,
				.buf_index = -1,
			};
			map[nreq++] = i;
		}
		if (nreq == 0)
			break;
		/* headers are small: read deeper than queue_depth */
		err = io_run(s, req, nreq,
			     s->opts.queue_depth > RING_MIN
				     ? s->opts.queue_depth
				     : RING_MIN);
		if (err)
			goto out;
		for (unsigned k = 0; k < nreq; k++) {
			err = scan_step(s, &sc[map[k]],
					pages + k * KVS_STORE_ALIGN, req[k].res,
					bulk);
			if (err)
				goto out;
		}
	}
out:
	free(bulk);
	free(pages);
	free(map);
	free(req);
	return err;
}

/* Checks every record of the newest segment in full; the ones that fail
 * are dropped and marked in @sc. */
static int verify_newest(struct kvs_store *s, struct scan *sc)
{
	struct segment *seg = sc->seg;
	struct list *l, *next;
	uint8_t *buf;
	ssize_t n;

	if (list_empty(&seg->records))
		return 0;
	if (posix_memalign((void **)&buf, KVS_STORE_ALIGN, seg->size))
		return -ENOMEM;
	n = s->io->pread(s->io->ctx, seg->fd, buf, seg->size, 0);
	if (n < 0 || (uint64_t)n != seg->size) {
		free(buf);
		kvs_log(KVS_LOG_ERR, "store: read segment %llu: %s",
			(unsigned long long)seg->id,
			n < 0 ? strerror((int)-n) : "short read");
		return n < 0 ? (int)n : -EIO;
	}
	for (l = seg->records.next; l != &seg->records; l = next) {
		struct entry *e = list_entry(l, struct entry, nlink);

		next = l->next;
		if (record_verify(buf + e->off, seg->size - e->off, &e->key,
				  KVS_VERIFY_NO_CHECKSUMS, NULL, NULL) == 0) {
			e->rec_checked = true;
			continue;
		}
		s->st.torn_dropped++;
		mark_bad(sc, e->off);
		nvme_detach(s, e);
		entry_maybe_free(s, e);
	}
	free(buf);
	return 0;
}

/*
 * A torn tail of the newest segment (damage after its last good record:
 * the writes a crash cut short) is cut off the file, durably (ftruncate,
 * fsync), so it is counted by this open only.  Damage before a good
 * record stays (it is counted at every open until fsck --repair).  A
 * failure to cut is logged and changes nothing.
 */
static void cut_torn_tail(struct kvs_store *s, struct scan *sc)
{
	struct segment *seg = sc->seg;
	uint64_t end = SEG_HEADER_SIZE;
	struct list *l;
	int err;

	for (l = seg->records.next; l != &seg->records; l = l->next) {
		struct entry *e = list_entry(l, struct entry, nlink);
		uint64_t rec_end = e->off + record_size(e->len);

		if (rec_end > end)
			end = rec_end;
	}
	if (!sc->damaged || sc->bad_last < end)
		return;
	err = s->io->ftruncate(s->io->ctx, seg->fd, (off_t)end);
	if (!err)
		err = s->io->fsync(s->io->ctx, seg->fd);
	if (err) {
		kvs_log(KVS_LOG_WARN,
			"store: cannot cut the torn tail of segment %llu: %s",
			(unsigned long long)seg->id, kvs_strerror(err));
		return;
	}
	kvs_log(KVS_LOG_INFO, "store: cut segment %llu at %llu (torn tail)",
		(unsigned long long)seg->id, (unsigned long long)end);
	if (seg->size > end) {
		s->nvme_file_bytes -= seg->size - end;
		seg->size = end;
	}
	sc->damaged = sc->bad_first < end;
}

/* Opens segment @id and checks its header; adds it to the store.  A
 * damaged header is counted but its records are still scanned (they
 * describe themselves); *@bad_header says so. */
static int open_segment(struct kvs_store *s, uint64_t id, struct segment **out,
			bool *bad_header)
{
	char path[4096];
	uint64_t hdr_id, file_size;
	ssize_t n;
	int fd, err;

	seg_path(s, id, path, sizeof(path));
	err = nvme_open_file(s, path, false, &fd);
	if (err)
		return err;
	err = s->io->size(s->io->ctx, fd, &file_size);
	if (err) {
		s->io->close(s->io->ctx, fd);
		return err;
	}
	n = s->io->pread(s->io->ctx, fd, s->scratch, SEG_HEADER_SIZE, 0);
	err = n != SEG_HEADER_SIZE ? -KVS_ETRUNC
				   : seg_header_decode(s->scratch, &hdr_id);
	if (err == -KVS_EVERSION) {
		kvs_log(KVS_LOG_ERR,
			"store: %s was written by a newer kvstash (store "
			"format > %u); refusing to open %s",
			path, KVS_STORE_FORMAT_VERSION, s->dir);
		s->io->close(s->io->ctx, fd);
		return err;
	}
	if (!err && hdr_id != id)
		err = -KVS_ECORRUPT;
	*out = seg_new(s, id, fd,
		       file_size / KVS_STORE_ALIGN * KVS_STORE_ALIGN);
	if (!*out) {
		s->io->close(s->io->ctx, fd);
		return -ENOMEM;
	}
	(*out)->sealed = true;
	*bad_header = err != 0;
	if (err) {
		kvs_log(KVS_LOG_WARN, "store: segment %s: bad header (%s)",
			path, kvs_strerror(err));
		if (err != -KVS_ETRUNC && !page_zero(s->scratch))
			s->st.corrupt_dropped++;
	}
	return 0;
}

/* Deletes a segment whose header never made it and that holds nothing
 * (a crash while creating it). */
static void drop_empty(struct kvs_store *s, struct scan *sc)
{
	struct segment *seg = sc->seg;
	char path[4096];

	if (seg->live_count || sc->damaged)
		return;
	seg_path(s, seg->id, path, sizeof(path));
	seg_free(s, seg);
	sc->seg = NULL;
	if (s->io->unlink(s->io->ctx, path) == 0)
		kvs_log(KVS_LOG_INFO, "store: removed empty segment %s", path);
}

int recover(struct kvs_store *s)
{
	struct scan *sc = NULL, *newest = NULL;
	uint64_t *ids = NULL;
	size_t n = 0, nsc = 0;
	int err;

	err = seg_list(s->io, s->dir, &ids, &n);
	if (err)
		return err;
	sc = calloc(n ? n : 1, sizeof(*sc));
	if (!sc) {
		err = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		struct segment *seg;

		err = open_segment(s, ids[i], &seg, &sc[nsc].bad_header);
		if (err)
			goto out;
		sc[nsc].seg = seg;
		sc[nsc].off = SEG_HEADER_SIZE;
		sc[nsc].done = seg->size <= SEG_HEADER_SIZE;
		nsc++;
	}
	err = scan_all(s, sc, nsc);
	for (size_t i = 0; !err && i < nsc; i++) {
		if (sc[i].bad_header)
			drop_empty(s, &sc[i]);
		else
			newest = &sc[i];
	}
	if (!err && newest) {
		err = verify_newest(s, newest);
		if (!err)
			cut_torn_tail(s, newest);
		/* a newest segment found whole (or whole once its torn tail
		 * is cut) takes new records again, so short-lived processes
		 * do not leave a segment each */
		if (!err && !newest->damaged && newest == &sc[nsc - 1] &&
		    newest->seg->size < s->opts.segment_size &&
		    seg_grow(s, newest->seg->fd) == 0)
			newest->seg->sealed = false;
	}
	if (!err)
		kvs_log(KVS_LOG_INFO,
			"store: recovered %llu records from %zu segments",
			(unsigned long long)s->nvme_objects, n);
out:
	free(sc);
	free(ids);
	return err;
}
