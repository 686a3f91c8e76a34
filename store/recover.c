/*
 * recover.c - rebuild the index from the segment files at open, checking
 * them against the manifest.
 *
 * Which files are segments: every seg-<id>.kvs (exact names only) whose
 * header is valid, and those with a damaged header that the manifest
 * lists (their records describe themselves).  A file the manifest does
 * not list is a segment created just before a crash (an id at or above
 * its next id), a reclaim that did not finish (below it, with a valid
 * header: deleted now), a creation a crash cut short (the next id, all
 * zeros: deleted now), or not the store's: reported, never deleted.
 * A listed segment with no file is missing, and a sealed one without its
 * footer was cut short: both are reported at every open (lost_segments)
 * until fsck --repair acknowledges them.  Without a manifest (a format-1
 * store, or one whose manifest was lost) nothing is deleted and losses
 * cannot be told; a writable open writes one.
 *
 * Older segments are scanned together, one 4096-byte header read per
 * segment per round, submitted as one batch, so a store of many segments
 * recovers at the device's parallel rate.  A valid header indexes its
 * record (newest sequence number wins); pages that are not one are
 * skipped to the next valid header (walk.c's resync: holes are not read)
 * and named as walk.c names them.  Their payloads are not read: every
 * later read checks the record in full.
 *
 * The newest segment is the only one that can hold writes a crash cut
 * short.  If the manifest says it was closed cleanly and nothing was
 * written after (the file holds only zeros past the recorded log end), it
 * is scanned like the others; otherwise it is walked after them with
 * every record checked (walk.c), so that a record failing its check
 * leaves the key's older intact record in place.  Its torn tail is cut
 * off durably (counted by one open only), and a whole log takes new
 * records again; damage before a good record stays (counted at every
 * open until fsck --repair) and the segment is sealed.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvstash/log.h"
#include "store_internal.h"

enum seg_state { SEG_GOOD, SEG_BAD_HEADER };

struct scan {
	struct segment *seg;
	uint64_t off;
	bool done;
	bool bad_header;
	bool damaged; /* something was dropped */
	bool footer; /* its footer was found */
	struct seg_footer foot;
	uint32_t records; /* valid record headers */
	uint32_t tail_records; /* of them, after the last good record */
	uint64_t bad_first, bad_last; /* offsets of the first and last
				       * damage dropped, when damaged */
};

struct recovery {
	struct dir_listing ls;
	struct manifest man;
	bool have_man;
	bool rewrite_manifest; /* what the manifest says changed */
	bool dir_synced; /* the directory fsynced by this open */
	struct scan *sc; /* one per segment kept */
	struct scan **older; /* the ones scanned together */
	size_t nsc, nolder;
	uint64_t total; /* segment bytes, for progress */
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

static void count_damage(struct kvs_store *s, struct scan *sc,
			 enum kvs_fsck_status status, uint64_t off)
{
	if (status == KVS_FSCK_TORN)
		s->st.torn_dropped++;
	else
		s->st.corrupt_dropped++;
	mark_bad(sc, off);
}

int index_record(struct kvs_store *s, struct segment *seg, uint64_t off,
		 const struct rec_header *h)
{
	struct entry *e = index_find(&s->index, &h->key);
	int err;

	if (h->seq >= s->next_seq)
		s->next_seq = h->seq + 1;
	if (!e) {
		err = index_insert(&s->index, &h->key, &e);
		if (err)
			return err;
		e->first_seg = seg->id;
	}
	/* superseded records count too: a tombstone stays while they do */
	if (seg->id < e->first_seg || !e->on_disk)
		e->first_seg = seg->id;
	e->on_disk = true;
	if (e->seg && e->seq >= h->seq)
		return 0;
	nvme_detach(s, e);
	e->tomb = h->flags & REC_FLAG_TOMBSTONE;
	e->len = h->length;
	e->psum = h->payload_sum;
	e->bad = false;
	nvme_attach(s, e, seg, off, h->seq);
	/* a tombstone is its header: checked whole by its decoding */
	e->rec_checked = e->tomb;
	return 0;
}

/* ---- the scan of the older segments ---------------------------------- */

/* One scan step on the page read at sc->off. */
static int scan_step(struct kvs_store *s, struct scan *sc, const uint8_t *page,
		     int res, uint8_t *bulk)
{
	struct segment *seg = sc->seg;
	struct rec_header h;
	struct seg_footer f;
	uint64_t start = sc->off, found;
	bool zero;
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
	if (seg_footer_decode(page, &f) == 0 && f.id == seg->id &&
	    f.end == sc->off) {
		sc->footer = true;
		sc->foot = f;
		sc->done = true;
		/* the file is the log and its footer page */
		s->nvme_file_bytes -= seg->size - sc->off - KVS_STORE_ALIGN;
		seg->size = sc->off;
		seg->footer = true;
		return 0;
	}
	if (rec_header_decode(page, &h) == 0) {
		sc->records++;
		if (sc->off + record_size(h.length) > seg->size) {
			count_damage(s, sc, KVS_FSCK_TORN, sc->off);
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
	err = resync(s->io, seg->fd, seg->id, sc->off, seg->size, bulk, &found,
		     &zero);
	if (err) {
		sc->done = true;
		return err;
	}
	if (found < seg->size) {
		/* zeros: a record never written (in flight at a crash) */
		count_damage(s, sc, zero ? KVS_FSCK_TORN : KVS_FSCK_CORRUPT,
			     start);
		sc->off = found;
		return 0;
	}
	sc->done = true;
	if (zero) {
		/* the unwritten rest of a preallocated head: the log ends */
		s->nvme_file_bytes -= seg->size - start;
		seg->size = start;
	} else {
		count_damage(s, sc, KVS_FSCK_TORN, start);
	}
	return 0;
}

static void progress(struct kvs_store *s, uint64_t done, uint64_t total)
{
	if (s->opts.progress)
		s->opts.progress(s->opts.progress_arg, done, total);
}

static int scan_all(struct kvs_store *s, struct scan **sc, size_t n,
		    uint64_t total)
{
	struct kvs_store_io_req *req = calloc(n ? n : 1, sizeof(*req));
	uint8_t *pages = NULL, *bulk = NULL;
	size_t *map = calloc(n ? n : 1, sizeof(*map));
	uint64_t last_report = 0;
	int err = 0;

	if (!req || !map ||
	    posix_memalign((void **)&pages, KVS_STORE_ALIGN,
			   (n ? n : 1) * KVS_STORE_ALIGN) ||
	    posix_memalign((void **)&bulk, KVS_STORE_ALIGN, RESYNC_CHUNK)) {
		err = -ENOMEM;
		goto out;
	}
	for (;;) {
		uint64_t done = 0;
		unsigned nreq = 0;

		for (size_t i = 0; i < n; i++) {
			done += sc[i]->done ? sc[i]->seg->size : sc[i]->off;
			if (sc[i]->done)
				continue;
			req[nreq] = (struct kvs_store_io_req){
				.op = KVS_STORE_IO_READ,
				.fd = sc[i]->seg->fd,
				.buf = pages + nreq * KVS_STORE_ALIGN,
				.len = KVS_STORE_ALIGN,
				.off = sc[i]->off,
				.buf_index = -1,
			};
			map[nreq++] = i;
		}
		if (done - last_report >= PROGRESS_STEP) {
			progress(s, done, total);
			last_report = done;
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
			err = scan_step(s, sc[map[k]],
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

/* ---- the newest segment, checked in full ----------------------------- */

struct newest_walk {
	struct kvs_store *s;
	struct scan *sc;
	uint64_t before, total; /* bytes of the segments scanned before */
	int err;
};

/* A record of the newest segment that failed its check: the key keeps an
 * older record if it has one; if not, a corrupt one is remembered so that
 * a get says so (a torn one was never completed: simply absent). */
static int mark_failed(struct kvs_store *s, const struct walk_item *it,
		       uint64_t seg_id)
{
	struct entry *e = index_find(&s->index, &it->h.key);
	int err;

	if (it->status != KVS_FSCK_CORRUPT || (e && e->seg))
		return 0;
	if (!e) {
		err = index_insert(&s->index, &it->h.key, &e);
		if (err)
			return err;
		e->first_seg = seg_id;
	}
	e->tomb = false;
	e->bad = true;
	e->on_disk = true;
	return 0;
}

static int newest_cb(void *arg, const struct walk_item *it)
{
	struct newest_walk *nw = arg;
	struct kvs_store *s = nw->s;
	struct entry *e;
	int err;

	if (it->kind == WALK_FOOTER) {
		nw->sc->footer = true;
		nw->sc->foot = it->footer;
		return 0;
	}
	if (it->has_header) {
		nw->sc->records++;
		nw->sc->tail_records++;
	}
	if (it->status != KVS_FSCK_GOOD) {
		count_damage(s, nw->sc, it->status, it->off);
		return it->has_header ? mark_failed(s, it, nw->sc->seg->id) : 0;
	}
	nw->sc->tail_records = 0;
	err = index_record(s, nw->sc->seg, it->off, &it->h);
	if (err)
		return err;
	e = index_find(&s->index, &it->h.key);
	if (e && e->seg == nw->sc->seg && e->off == it->off)
		e->rec_checked = true;
	return 0;
}

/* Within a long walk of the newest segment: how far, over all. */
static void newest_progress(void *arg, uint64_t off)
{
	struct newest_walk *nw = arg;

	progress(nw->s, nw->before + off, nw->total);
}

/* The newest segment, every record checked.  A head closed cleanly and
 * written after (by a process that died) holds nothing torn up to where
 * it was closed: a record there that fails is corrupt, as fsck says. */
static int walk_newest(struct kvs_store *s, struct recovery *rc,
		       struct scan *sc)
{
	struct segment *seg = sc->seg;
	struct newest_walk nw = {
		.s = s,
		.sc = sc,
		.before = rc->total - seg->size,
		.total = rc->total,
	};
	struct walk_opts wo = {
		.verify_flags = KVS_VERIFY_NO_CHECKSUMS,
		.progress = newest_progress,
		.progress_arg = &nw,
	};
	struct walk_end end;
	int err;

	if (manifest_clean_head(&rc->man, rc->have_man, seg->id))
		wo.clean_end = rc->man.head_length;
	err = seg_walk_opts(s->io, seg->fd, seg->id, seg->size, &wo, newest_cb,
			    &nw, &end);
	if (err)
		return err;
	if (end.footer) {
		/* the file is the log and its footer page */
		s->nvme_file_bytes -= seg->size - end.log_end - KVS_STORE_ALIGN;
		seg->size = end.log_end;
		seg->footer = true;
	} else if (end.log_end < seg->size) {
		s->nvme_file_bytes -= seg->size - end.log_end;
		seg->size = end.log_end;
	}
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
	/* records the tail held (valid headers, failed checks) are gone */
	sc->records -= sc->tail_records;
	sc->tail_records = 0;
	sc->damaged = sc->bad_first < end;
}

/* ---- which files are segments ---------------------------------------- */

/* Opens segment file @id: its size and whether its header is good. */
static int open_segment(struct kvs_store *s, uint64_t id, int *fd_out,
			uint64_t *size_out, enum seg_state *state)
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
			"store: %s was written by a newer kvstash (segment "
			"layout > %u); refusing to open %s",
			path, SEG_LAYOUT_VERSION, s->dir);
		s->io->close(s->io->ctx, fd);
		return err;
	}
	if (!err && hdr_id != id)
		err = -KVS_ECORRUPT;
	*state = err ? SEG_BAD_HEADER : SEG_GOOD;
	*fd_out = fd;
	*size_out = file_size / KVS_STORE_ALIGN * KVS_STORE_ALIGN;
	return 0;
}

static void remove_file(struct kvs_store *s, struct recovery *rc,
			const char *path, const char *why)
{
	int err;

	/* a killed process may have renamed the manifest into place without
	 * the directory fsync that makes it durable: before anything is
	 * deleted on its word, it is made durable (else a power cut could
	 * bring back an older one listing the file deleted) */
	if (!rc->dir_synced) {
		err = dir_fsync(s->io, s->dir);
		if (err) {
			kvs_log(KVS_LOG_WARN, "store: %s kept: %s", path,
				kvs_strerror(err));
			return;
		}
		rc->dir_synced = true;
	}
	err = s->io->unlink(s->io->ctx, path);

	if (err)
		kvs_log(KVS_LOG_WARN, "store: cannot remove %s (%s): %s", path,
			why, kvs_strerror(err));
	else
		kvs_log(KVS_LOG_INFO, "store: removed %s (%s)", path, why);
}

/* Temporary files a killed repair or publication left: the store's own
 * (its magic, or nothing written yet) are removed; others are left. */
static void clean_leftovers(struct kvs_store *s, struct recovery *rc,
			    const struct dir_listing *ls)
{
	char path[4200];

	for (size_t i = 0; i < ls->tmps.n; i++) {
		char name[32];

		seg_name(ls->tmps.v[i], name);
		snprintf(path, sizeof(path), "%s/%s.tmp", s->dir, name);
		if (leftover_is_ours(s->io, path))
			remove_file(s, rc, path,
				    "left by an interrupted repair");
		else
			kvs_log(KVS_LOG_WARN,
				"store: %s is not the store's: left alone",
				path);
	}
	if (ls->superblock_tmp) {
		snprintf(path, sizeof(path), "%s/%s.tmp", s->dir,
			 SUPERBLOCK_NAME);
		if (leftover_is_ours(s->io, path))
			remove_file(s, rc, path, "an interrupted publication");
	}
	if (ls->manifest_tmp) {
		snprintf(path, sizeof(path), "%s/%s.tmp", s->dir,
			 MANIFEST_NAME);
		if (leftover_is_ours(s->io, path))
			remove_file(s, rc, path, "an interrupted publication");
	}
}

/* Decides what file @id is; keeps it as a segment (rc->sc) or not. */
static int take_file(struct kvs_store *s, struct recovery *rc, uint64_t id)
{
	enum seg_state state;
	uint64_t size;
	char path[4096];
	bool listed = rc->have_man && manifest_has(&rc->man, id);
	bool zero;
	int fd, err;

	if (id >= s->next_seg_id)
		s->next_seg_id = id + 1;
	err = open_segment(s, id, &fd, &size, &state);
	if (err)
		return err;
	seg_path(s, id, path, sizeof(path));
	if (rc->have_man && !listed && id < rc->man.next_id &&
	    state == SEG_GOOD) {
		/* removed from the manifest, not yet deleted */
		s->io->close(s->io->ctx, fd);
		if (!s->read_only)
			remove_file(s, rc, path, "reclaimed before a crash");
		return 0;
	}
	if (state == SEG_BAD_HEADER && !listed &&
	    !seg_starts_log(s->io, fd, size, s->scratch)) {
		err = file_is_zero(s->io, fd, 0, size, &zero);
		s->io->close(s->io->ctx, fd);
		if (err)
			return err;
		if (rc->have_man && id == rc->man.next_id && zero) {
			if (!s->read_only)
				remove_file(s, rc, path,
					    "its creation was cut short");
			return 0;
		}
		kvs_log(KVS_LOG_WARN,
			"store: %s is not a segment of this store (neither "
			"a valid header nor a record): ignored, not deleted",
			path);
		return 0;
	}
	if (rc->have_man && !listed)
		rc->rewrite_manifest = true; /* created just before a crash */
	struct scan *sc = &rc->sc[rc->nsc];

	memset(sc, 0, sizeof(*sc));
	sc->seg = seg_new(s, id, fd, size);
	if (!sc->seg) {
		s->io->close(s->io->ctx, fd);
		return -ENOMEM;
	}
	sc->seg->sealed = true;
	sc->seg->unsynced = true;
	sc->bad_header = state == SEG_BAD_HEADER;
	sc->off = SEG_HEADER_SIZE;
	sc->done = size <= SEG_HEADER_SIZE;
	if (sc->bad_header) {
		kvs_log(KVS_LOG_WARN,
			"store: segment %s: damaged header; its records are "
			"still read",
			path);
		s->st.corrupt_dropped++;
	}
	rc->total += size;
	rc->nsc++;
	return 0;
}

/* The ids the manifest lists that have no file: missing. */
static int find_missing(struct kvs_store *s, struct recovery *rc)
{
	struct id_vec miss = { 0 };
	size_t k = 0;

	for (uint32_t r = 0; rc->have_man && r < rc->man.nruns; r++)
		for (uint64_t id = rc->man.runs[r].first;
		     id < rc->man.runs[r].end; id++) {
			while (k < rc->ls.segs.n && rc->ls.segs.v[k] < id)
				k++;
			if (k < rc->ls.segs.n && rc->ls.segs.v[k] == id)
				continue;
			if (id_vec_push(&miss, id)) {
				free(miss.v);
				return -ENOMEM;
			}
			kvs_log(KVS_LOG_ERR,
				"store: segment %llu of %s is missing: its "
				"records are lost ('kvstash store fsck "
				"--repair' acknowledges it)",
				(unsigned long long)id, s->dir);
			s->st.lost_segments++;
		}
	s->missing = miss.v;
	s->nmissing = miss.n;
	return 0;
}

/* Whether the newest segment was closed cleanly and untouched since:
 * the manifest says so, and nothing follows its recorded log end. */
static bool newest_clean(struct kvs_store *s, struct recovery *rc,
			 struct scan *sc)
{
	bool zero = false;

	if (!manifest_clean_head(&rc->man, rc->have_man, sc->seg->id) ||
	    sc->bad_header || rc->man.head_length > sc->seg->size)
		return false;
	return file_is_zero(s->io, sc->seg->fd, rc->man.head_length,
			    sc->seg->size, &zero) == 0 &&
	       zero;
}

/* A sealed segment must end with its footer, holding what it counts. */
static void check_footer(struct kvs_store *s, struct recovery *rc,
			 struct scan *sc)
{
	struct segment *seg = sc->seg;

	seg->footer_unsure =
		sc->footer &&
		(!rc->have_man || !manifest_wants_footer(&rc->man, seg->id));
	if (sc->footer && sc->records < sc->foot.records && !sc->damaged) {
		kvs_log(KVS_LOG_ERR,
			"store: segment %llu of %s holds %u records, its "
			"footer counts %u: records are lost",
			(unsigned long long)seg->id, s->dir, sc->records,
			sc->foot.records);
		s->st.lost_segments++;
	}
	if (sc->footer || !rc->have_man ||
	    !manifest_wants_footer(&rc->man, seg->id))
		return;
	kvs_log(KVS_LOG_ERR,
		"store: segment %llu of %s ends without its footer: cut "
		"short, records are lost ('kvstash store fsck --repair' "
		"acknowledges it)",
		(unsigned long long)seg->id, s->dir);
	s->st.lost_segments++;
}

/* The head the manifest says was closed cleanly must hold at least what
 * it held then (it may have grown since). */
static void check_clean_head(struct kvs_store *s, struct recovery *rc,
			     struct scan *sc)
{
	if (!manifest_clean_head(&rc->man, rc->have_man, sc->seg->id) ||
	    sc->damaged)
		return;
	if (sc->seg->size >= rc->man.head_length &&
	    sc->records >= rc->man.head_records)
		return;
	kvs_log(KVS_LOG_ERR,
		"store: segment %llu of %s was closed at %llu bytes and %u "
		"records; %llu bytes and %u records remain: records are lost",
		(unsigned long long)sc->seg->id, s->dir,
		(unsigned long long)rc->man.head_length, rc->man.head_records,
		(unsigned long long)sc->seg->size, sc->records);
	s->st.lost_segments++;
}

/* The newest segment after its walk: its torn tail cut; whole, it takes
 * new records again (so short-lived processes do not leave a segment
 * each); otherwise it is sealed here. */
static void settle_newest(struct kvs_store *s, struct recovery *rc,
			  struct scan *sc)
{
	struct segment *seg = sc->seg;

	seg->nrec = sc->records;
	if (sc->footer || s->read_only)
		return;
	cut_torn_tail(s, sc);
	seg->nrec = sc->records;
	if (!sc->damaged && !sc->bad_header &&
	    seg->size < s->opts.segment_size && seg_grow(s, seg->fd) == 0) {
		seg->sealed = false;
		return;
	}
	seg_seal(s, seg);
	rc->rewrite_manifest = true;
}

/* Older segments that were a head at a crash (listed as the head, or
 * newer than the manifest) are sealed now, so that later opens know them
 * whole. */
static void seal_old_heads(struct kvs_store *s, struct recovery *rc,
			   struct scan *newest)
{
	for (size_t i = 0; i < rc->nsc; i++) {
		struct scan *sc = &rc->sc[i];

		sc->seg->nrec = sc->records;
		if (sc == newest || sc->footer || s->read_only ||
		    sc->bad_header || sc->damaged)
			continue;
		if (!rc->have_man || sc->seg->id == rc->man.head_id ||
		    sc->seg->id >= rc->man.next_id) {
			seg_seal(s, sc->seg);
			rc->rewrite_manifest = true;
		}
	}
}

static int load_manifest(struct kvs_store *s, struct recovery *rc)
{
	int err;

	if (s->format_version < 2)
		return 0; /* format 1 had none: written at the upgrade */
	err = manifest_load(s->io, s->dir, &rc->man);
	if (err == -ENOMEM)
		return err;
	rc->have_man = err == 0;
	if (rc->have_man)
		s->manifest_gen = rc->man.generation;
	if (err)
		kvs_log(KVS_LOG_ERR,
			"store: %s: manifest %s; rebuilt from the segments "
			"(a segment lost before now goes unnoticed)",
			s->dir, err == -ENOENT ? "missing" : "damaged");
	if (rc->have_man && rc->man.next_id > s->next_seg_id)
		s->next_seg_id = rc->man.next_id;
	return 0;
}

int recover(struct kvs_store *s)
{
	struct recovery rc = { 0 };
	struct scan *newest = NULL;
	int err;

	err = dir_list(s->io, s->dir, &rc.ls);
	if (err)
		return err;
	err = load_manifest(s, &rc);
	if (err)
		goto out;
	if (!s->read_only)
		clean_leftovers(s, &rc, &rc.ls);
	rc.sc = calloc(rc.ls.segs.n ? rc.ls.segs.n : 1, sizeof(*rc.sc));
	rc.older = calloc(rc.ls.segs.n ? rc.ls.segs.n : 1, sizeof(*rc.older));
	if (!rc.sc || !rc.older) {
		err = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < rc.ls.segs.n; i++) {
		err = take_file(s, &rc, rc.ls.segs.v[i]);
		if (err)
			goto out;
	}
	err = find_missing(s, &rc);
	if (err)
		goto out;
	if (!rc.have_man)
		rc.rewrite_manifest = true;
	for (size_t i = rc.nsc; i-- > 0;)
		if (!rc.sc[i].bad_header) {
			newest = &rc.sc[i];
			break;
		}
	for (size_t i = 0; i < rc.nsc; i++)
		if (&rc.sc[i] != newest || newest_clean(s, &rc, newest))
			rc.older[rc.nolder++] = &rc.sc[i];
	err = scan_all(s, rc.older, rc.nolder, rc.total);
	/* the newest, unless closed cleanly, after the others: a record
	 * failing its check falls back to the key's older one */
	if (!err && newest && rc.nolder < rc.nsc)
		err = walk_newest(s, &rc, newest);
	if (err)
		goto out;
	progress(s, rc.total, rc.total);
	for (size_t i = 0; i < rc.nsc; i++)
		check_footer(s, &rc, &rc.sc[i]);
	for (size_t i = 0; i < rc.nsc; i++)
		check_clean_head(s, &rc, &rc.sc[i]);
	seal_old_heads(s, &rc, newest);
	if (newest)
		settle_newest(s, &rc, newest);
	/* closed cleanly, found so, taken as the head again unchanged: the
	 * manifest still tells the truth (a later write says otherwise) */
	s->clean_on_disk = newest && rc.nolder == rc.nsc &&
			   head_seg(s) == newest->seg && !rc.rewrite_manifest;
	tombs_prune(s);
	if (!s->read_only && rc.rewrite_manifest)
		err = store_manifest_write(s, false);
	if (!err)
		kvs_log(KVS_LOG_INFO,
			"store: recovered %llu records from %zu segments",
			(unsigned long long)s->nvme_objects, rc.nsc);
out:
	free(rc.man.runs);
	free(rc.sc);
	free(rc.older);
	dir_listing_free(&rc.ls);
	return err;
}
