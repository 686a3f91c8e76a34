/*
 * put.c - puts: the synchronous batch (kvs_store_put_batch) and the
 * asynchronous write batches of puts, commits and deletes.
 *
 * A put validates the object, copies it into a DRAM slot laid out as its
 * NVMe record image ([record header][object][zero pad]), so the write to
 * NVMe goes straight from the slot (a registered buffer) with no copy, and
 * a promotion reads straight into one.  A batch is pipelined: each
 * object's write starts as soon as it is staged (queue_depth in flight),
 * so copying and checking the next objects overlaps the device; the
 * writes in flight are drained before the head rolls, so only the head
 * segment ever has writes in flight (recovery relies on that).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kvstash/log.h"
#include "store_internal.h"

/* ---- put ------------------------------------------------------------- */

struct pending {
	struct entry *e; /* pinned until finished */
	uint8_t *image;
	bool owned;
	bool kept; /* its bytes are on NVMe already: no write unless lost */
	bool tomb; /* a tombstone (a delete's) */
	bool started, finished;
	size_t i; /* index in the batch */
	struct segment *seg;
	uint64_t off, seq;
	struct kvs_store_io_req req;
	struct aio io; /* the asynchronous batches' request */
};

/* An entry for @key to hold a new object: the existing one (its DRAM
 * copy dropped), or a new one; a pinned old entry becomes a zombie that
 * lives until its last reader lets go and hands its record over. */
static int entry_for_put(struct kvs_store *s, const struct kvs_store_key *key,
			 struct entry **out, bool *was_tomb)
{
	struct entry *old = index_find(&s->index, key), *e;
	int err;

	*was_tomb = old && old->tomb;
	if (old && !old->pins) {
		dram_drop(s, old);
		*out = old;
		return 0;
	}
	if (old) {
		index_remove(&s->index, old);
		dram_drop(s, old);
	}
	err = index_insert(&s->index, key, &e);
	if (err)
		return err;
	e->first_seg = old ? old->first_seg : nvme_first_seg(s);
	if (old && old->seg) {
		struct segment *seg = old->seg;
		uint64_t off = old->off, seq = old->seq;

		e->len = old->len;
		e->psum = old->psum; /* so a put of the same bytes keeps it */
		e->rec_checked = old->rec_checked;
		e->tomb = old->tomb;
		nvme_detach(s, old);
		nvme_attach(s, e, seg, off, seq);
	}
	if (old) {
		/* the key's records on disk are the new entry's to track */
		e->on_disk = old->on_disk;
		old->on_disk = false;
	} else {
		/* an entry of the key freed while a record of it remained
		 * (a put that could not write): any key may have one */
		e->on_disk = s->stale_floor != UINT64_MAX;
	}
	if (old)
		dram_forget_ghost(s, old);
	*out = e;
	return 0;
}

/* Places one object in DRAM (and/or a bounce image); pins the entry.
 * @need_write: the put asks for WRITTEN or more.  With @adopt (a
 * reserved DRAM slot of class @adopt_cls whose object bytes @obj already
 * sit at adopt + REC_HEADER_SIZE), the slot itself becomes the entry's
 * (*@adopted set): nothing is copied. */
static int stage_one(struct kvs_store *s, const uint8_t *obj, size_t len,
		     bool need_write, struct pending *p, uint8_t *adopt,
		     int adopt_cls, bool *adopted)
{
	struct kvs_store_key key;
	struct entry *e, *parent;
	uint64_t rec = record_size(len), psum;
	uint8_t *image = NULL;
	bool was_tomb;
	int cls, err;

	if (len > STORE_MAX_OBJECT) {
		kvs_log(KVS_LOG_ERR, "store: object of %zu bytes over %u", len,
			STORE_MAX_OBJECT);
		return -EFBIG;
	}
	err = kvs_object_verify(obj, len, 0);
	if (err) {
		kvs_log(KVS_LOG_ERR, "store: put refused: %s check failed",
			kvs_check_name(err));
		return err;
	}
	err = kvs_store_key_of(obj, len, &key);
	if (err)
		return err;
	err = entry_for_put(s, &key, &e, &was_tomb);
	if (err)
		return err;
	if (was_tomb) {
		/* a put after a delete: its record must supersede the
		 * tombstone, which is no longer tracked (a tombstone dropped
		 * before a newer record exists would let an older record
		 * back), so it is written whatever the durability asked */
		if (e->tomb)
			nvme_detach(s, e);
		e->tomb = false;
		need_write = true;
	}
	e->pins++;
	cls = adopt ? adopt_cls : s->dram_on ? dram_class(&s->dram, rec) : -1;
	parent = dram_parent_of(s, e, obj, len);
	image = adopt ? adopt : dram_make_room(s, cls, e, parent);
	p->owned = !image;
	if (!image) {
		if (!s->nvme_on) {
			err = -ENOSPC;
			goto unpin;
		}
		need_write = true;
		if (posix_memalign((void **)&image, KVS_STORE_ALIGN, rec)) {
			err = -ENOMEM;
			goto unpin;
		}
	}
	/* the record checksum is taken of the copy, as it is copied: the
	 * bytes stored are the bytes it describes */
	psum = adopt ? payload_checksum(obj, len)
		     : payload_copy_checksum(image + REC_HEADER_SIZE, obj, len);
	memset(image + REC_HEADER_SIZE + len, 0, rec - REC_HEADER_SIZE - len);
	/* an NVMe record of other bytes no longer describes the key (one
	 * of the same bytes still does: the DRAM copy stays clean) */
	if (e->seg && (e->len != len || e->psum != psum))
		nvme_detach(s, e);
	/* a record of these very bytes is there already: keep it rather
	 * than write it again, which would hang a block already durable on
	 * a new write that a crash can tear (recovery keeps only a key's
	 * newest record).  Only a record known whole: recovery checks only
	 * the headers of older segments (a power cut may have torn the
	 * rest), so such a one is read back and checked first, and dropped
	 * if it fails (a record that cannot be read now is not kept: a new
	 * one is written).  A DURABLE put is then served by the sync that
	 * ends the batch (or a later kvs_store_sync): when the record may
	 * have been written by an earlier process that nothing synced since,
	 * its segment is made dirty so that the sync includes it.
	 * kept_check() writes it after all if the batch reclaims it.  Not
	 * after a failed sync of its segment, which no later sync vouches
	 * for.  The put counts as a use. */
	p->kept = need_write && e->seg && nvme_check_record(s, e) == 0 &&
		  e->seg && !e->seg->sync_failed;
	if (p->kept && e->seg->unsynced)
		e->seg->dirty = true;
	if (p->kept && e->nfreq < 3)
		e->nfreq++;
	e->len = (uint32_t)len;
	e->psum = psum;
	e->bad = false;
	if (!p->owned) {
		e->slot = image;
		e->cls = cls;
		dram_insert(s, e, parent);
	}
	if (adopt)
		*adopted = true;
	if (!need_write) {
		p->e = NULL;
		e->pins--;
		return 0;
	}
	p->e = e;
	p->image = image;
	return 0;
unpin:
	e->pins--;
	entry_maybe_free(s, e);
	return err;
}

static void release_pending(struct kvs_store *s, struct pending *p)
{
	if (p->owned)
		free(p->image);
	p->e->pins--;
	entry_maybe_free(s, p->e);
	p->finished = true;
}

/* Attaches the finished writes of p[0..n), reports the failed ones. */
static void reap(struct kvs_store *s, struct pending *p, size_t n, int *results)
{
	for (size_t i = 0; i < n; i++) {
		struct pending *q = &p[i];
		int r;

		if (!q->started || q->finished || !q->req.done)
			continue;
		r = q->req.res < 0			? q->req.res
		    : q->req.res != (int32_t)q->req.len ? -EIO
							: 0;
		q->seg->pending--;
		seg_written(q->seg);
		if (r) {
			if (!s->nospc_logged || r != -ENOSPC)
				kvs_log(KVS_LOG_ERR,
					"store: write segment %llu at %llu: %s",
					(unsigned long long)q->seg->id,
					(unsigned long long)q->off,
					kvs_strerror(r));
			s->nospc_logged |= r == -ENOSPC;
			/* no hole left behind; the head takes no more */
			nvme_write_failed(s, q->seg, q->off, q->req.len);
			results[q->i] = r;
		} else {
			q->seg->nrec++;
			nvme_attach(s, q->e, q->seg, q->off, q->seq);
			q->e->rec_checked = true;
		}
		release_pending(s, q);
	}
}

/* Waits for every started write of p[0..n) and finishes them. */
static void drain(struct kvs_store *s, struct pending *p, size_t n,
		  int *results)
{
	for (size_t i = 0; i < n; i++)
		while (p[i].started && !p[i].req.done)
			if (io_wait(s, 1))
				break;
	reap(s, p, n, results);
}

/* The write of @q's record (@rec bytes) at its reserved place. */
static void write_req(struct kvs_store *s, const struct pending *q,
		      uint64_t rec, struct kvs_store_io_req *req)
{
	*req = (struct kvs_store_io_req){
		.op = KVS_STORE_IO_WRITE,
		.fd = q->seg->fd,
		.buf = q->image,
		.len = (uint32_t)rec,
		.off = q->off,
		.buf_index = q->owned ? -1 : buf_index_of(s, q->image),
	};
}

/* Reserves the record of p[k] and starts its write, keeping at most
 * queue_depth in flight; writes in flight are drained before a roll. */
static void start_write(struct kvs_store *s, struct pending *p, size_t k,
			int *results)
{
	struct pending *q = &p[k];
	uint64_t rec = record_size(q->e->len);
	struct rec_header h = {
		.length = q->e->len,
		.payload_sum = q->e->psum,
		.key = q->e->key,
	};
	int err;

	if (!nvme_head_fits(s, rec))
		drain(s, p, k, results);
	err = nvme_reserve(s, rec, &q->seg, &q->off);
	if (err) {
		results[q->i] = err;
		release_pending(s, q);
		return;
	}
	q->seq = h.seq = s->next_seq++;
	rec_header_encode(&h, q->image);
	write_req(s, q, rec, &q->req);
	while (s->inflight >= s->opts.queue_depth && io_wait(s, 1) == 0)
		reap(s, p, k, results);
	q->seg->pending++;
	q->started = true;
	io_start(s, &q->req);
	reap(s, p, k + 1, results);
}

/* Writes the kept objects of p[0..n) whose records the batch itself
 * reclaimed (a roll, a spill) and releases the others, once nothing is
 * in flight; a write may reclaim again, so until none is left. */
static void kept_check(struct kvs_store *s, struct pending *p, size_t n,
		       int *results)
{
	bool wrote;

	do {
		wrote = false;
		for (size_t k = 0; k < n; k++) {
			struct pending *q = &p[k];

			if (!q->kept || q->started || q->finished ||
			    q->e->seg || !q->e->in_index)
				continue;
			start_write(s, p, k, results);
			wrote = true;
		}
		drain(s, p, n, results);
	} while (wrote);
	for (size_t k = 0; k < n; k++)
		if (p[k].kept && !p[k].started && !p[k].finished)
			release_pending(s, &p[k]);
}

/* The whole batch refused before any object was looked at: every result
 * says so. */
static int refuse_batch(int *results, size_t n, int err)
{
	for (size_t i = 0; i < n; i++)
		results[i] = err;
	return err;
}

int put_level(struct kvs_store *s, enum kvs_durability *dur)
{
	if ((int)*dur < KVS_DURABILITY_MEMORY ||
	    (int)*dur > KVS_DURABILITY_DURABLE) {
		kvs_log(KVS_LOG_ERR, "store: durability %d is not a level",
			(int)*dur);
		return -KVS_EPARAM;
	}
	if (s->read_only) {
		kvs_log(KVS_LOG_ERR, "store: %s is open read-only", s->dir);
		return -EROFS;
	}
	if (*dur < KVS_DURABILITY_WRITTEN &&
	    (s->opts.write_through || !s->dram_on))
		*dur = KVS_DURABILITY_WRITTEN;
	if (*dur > KVS_DURABILITY_MEMORY && !s->nvme_on) {
		kvs_log(KVS_LOG_ERR, "store: no NVMe tier for a written put");
		return -KVS_EPARAM;
	}
	return 0;
}

int store_put_batch(struct kvs_store *s, const uint8_t *const *objs,
		    const size_t *lens, size_t n,
		    enum kvs_durability durability, int *results,
		    uint8_t **adopt, const int *adopt_cls)
{
	struct pending *p;
	size_t np = 0;
	int first_err = 0, err;

	err = put_level(s, &durability);
	if (err)
		return refuse_batch(results, n, err);
	p = calloc(n ? n : 1, sizeof(*p));
	if (!p)
		return refuse_batch(results, n, -ENOMEM);
	for (size_t i = 0; i < n; i++) {
		struct kvs_store_key key;

		/* a key whose earlier copy in this batch is still being
		 * written: let that finish first */
		if (kvs_store_key_of(objs[i], lens[i], &key) == 0) {
			struct entry *e = index_find(&s->index, &key);

			if (e && e->pins)
				drain(s, p, np, results);
		}
		bool taken = false;

		results[i] = stage_one(s, objs[i], lens[i],
				       durability > KVS_DURABILITY_MEMORY,
				       &p[np], adopt ? adopt[i] : NULL,
				       adopt ? adopt_cls[i] : -1, &taken);
		if (taken)
			adopt[i] = NULL;
		if (results[i] == 0 && p[np].e) {
			p[np].i = i;
			if (!p[np].kept)
				start_write(s, p, np, results);
			np++;
		}
	}
	drain(s, p, np, results);
	kept_check(s, p, np, results);
	if (durability == KVS_DURABILITY_DURABLE) {
		err = nvme_sync_dirty(s, false);
		for (size_t i = 0; err && i < n; i++)
			if (results[i] == 0)
				results[i] = err;
	}
	for (size_t i = 0; i < n; i++)
		if (results[i] && !first_err)
			first_err = results[i];
	free(p);
	return first_err;
}

/* ---- asynchronous write batches: puts, commits, deletes --------------- */

enum wb_phase {
	WB_WRITE, /* reserving and writing, in order */
	WB_SYNC, /* DURABLE: syncing the segments written */
};

struct wsync {
	struct aio io;
	struct segment *seg; /* its async_io counts this sync */
	uint64_t wgen; /* seg->wgen when the sync was queued */
};

struct wbatch {
	struct abatch hdr;
	enum kvs_durability durability;
	bool deletes; /* misses are no errors */
	int *results;
	size_t n;
	struct pending *p; /* what is written (or kept) */
	size_t np, next; /* next to reserve and start */
	unsigned writing; /* writes queued or in flight */
	enum wb_phase phase;
	struct wsync *syncs;
	unsigned nsyncs, syncing;
	int sync_err;
};

static void wb_release(struct abatch *b)
{
	struct wbatch *w = (struct wbatch *)b;

	free(w->p);
	free(w->syncs);
	free(w);
}

static void wb_write_done(struct kvs_store *s, struct aio *io)
{
	struct pending *q =
		(struct pending *)((char *)io - offsetof(struct pending, io));
	struct wbatch *w = (struct wbatch *)io->batch;
	struct segment *seg = q->seg;
	int r = io->req.res < 0			      ? io->req.res
		: io->req.res != (int32_t)io->req.len ? -EIO
						      : 0;

	seg->pending--;
	seg->apending--;
	seg_written(seg);
	if (r) {
		if (!s->nospc_logged || r != -ENOSPC)
			kvs_log(KVS_LOG_ERR,
				"store: write segment %llu at %llu: %s",
				(unsigned long long)seg->id,
				(unsigned long long)q->off, kvs_strerror(r));
		s->nospc_logged |= r == -ENOSPC;
		/* no hole left behind; the head takes no more */
		nvme_write_failed(s, seg, q->off, io->req.len);
		w->results[q->i] = r;
		if (q->tomb) {
			kvs_log(KVS_LOG_ERR,
				"store: tombstone not written: the deleted "
				"object may come back after a restart");
			q->e->tomb = false;
		}
	} else {
		seg->nrec++;
		nvme_attach(s, q->e, seg, q->off, q->seq);
		q->e->rec_checked = true;
	}
	release_pending(s, q);
	if (!seg->apending)
		async_head_drained(s);
	if (--w->writing == 0)
		async_runnable(s, &w->hdr);
}

static void wb_sync_done(struct kvs_store *s, struct aio *io)
{
	struct wsync *y = (struct wsync *)io;
	struct wbatch *w = (struct wbatch *)io->batch;
	struct segment *seg = y->seg;

	seg->async_io--;
	if (io->req.res < 0) {
		/* as seg_sync: the file's state is unknown, never durable */
		seg->sealed = true;
		seg->sync_failed = true;
		kvs_log(KVS_LOG_ERR, "store: fdatasync segment %llu: %s",
			(unsigned long long)seg->id, kvs_strerror(io->req.res));
		if (!w->sync_err)
			w->sync_err = io->req.res;
	} else {
		/* what completed before the sync started is durable; a write
		 * completed since keeps the segment dirty */
		if (seg->wgen == y->wgen)
			seg->dirty = false;
		seg->unsynced = false;
	}
	if (--w->syncing == 0)
		async_runnable(s, &w->hdr);
}

/* Reserves and queues the write of @q; false when the batch must wait
 * for the head to drain first (a roll waits for the writes in flight). */
static bool wb_start(struct kvs_store *s, struct wbatch *w, struct pending *q)
{
	uint64_t rec = record_size(q->e->len);
	struct segment *newest = newest_seg(s);
	int err;

	if (!nvme_head_fits(s, rec) && newest && newest->apending) {
		async_wait_head(s, &w->hdr);
		return false;
	}
	err = nvme_reserve(s, rec, &q->seg, &q->off);
	if (err) {
		w->results[q->i] = err;
		if (q->tomb) {
			kvs_log(KVS_LOG_ERR,
				"store: tombstone not written (%s): the "
				"deleted object may come back after a restart",
				kvs_strerror(err));
			q->e->tomb = false;
		}
		release_pending(s, q);
		return true;
	}
	q->seq = s->next_seq++;
	record_stamp(q->e, q->image, q->seq);
	q->seg->pending++;
	q->seg->apending++;
	q->started = true;
	write_req(s, q, rec, &q->io.req);
	q->io.complete = wb_write_done;
	q->io.batch = &w->hdr;
	w->writing++;
	async_queue(s, &q->io);
	return true;
}

/* Queues a sync of every segment written since its last one; their
 * number (0: nothing to sync), or -ENOMEM. */
static int wb_syncs(struct kvs_store *s, struct wbatch *w)
{
	unsigned n = 0;
	struct list *l;

	for (l = s->segments.next; l != &s->segments; l = l->next) {
		struct segment *seg = list_entry(l, struct segment, link);

		n += seg->dirty && !seg->sync_failed;
	}
	if (!n)
		return 0;
	w->syncs = calloc(n, sizeof(*w->syncs));
	if (!w->syncs)
		return -ENOMEM;
	for (l = s->segments.next; l != &s->segments; l = l->next) {
		struct segment *seg = list_entry(l, struct segment, link);
		struct wsync *y = &w->syncs[w->nsyncs];

		if (!seg->dirty || seg->sync_failed)
			continue;
		y->seg = seg;
		y->wgen = seg->wgen;
		seg->async_io++;
		y->io.req = (struct kvs_store_io_req){
			.op = KVS_STORE_IO_SYNC,
			.fd = seg->fd,
			.buf_index = -1,
		};
		y->io.complete = wb_sync_done;
		y->io.batch = &w->hdr;
		w->nsyncs++;
		w->syncing++;
		async_queue(s, &y->io);
	}
	return (int)w->nsyncs;
}

/* The batch is over: its results, its callback. */
static void wb_end(struct kvs_store *s, struct wbatch *w)
{
	int first = 0;

	for (size_t i = 0; i < w->n; i++) {
		int r = w->results[i];

		if (w->sync_err && r == 0)
			r = w->results[i] = w->sync_err;
		if (r && !first && !(w->deletes && r == -KVS_ENOTFOUND))
			first = r;
	}
	async_finish(s, &w->hdr, first);
}

static void wb_step(struct kvs_store *s, struct abatch *b)
{
	struct wbatch *w = (struct wbatch *)b;
	bool again = false;
	int n;

	if (w->phase == WB_WRITE) {
		for (; w->next < w->np; w->next++) {
			struct pending *q = &w->p[w->next];

			if (q->finished || q->kept)
				continue;
			if (!wb_start(s, w, q))
				return;
		}
		if (w->writing)
			return; /* their completions make it runnable */
		/* kept records the batch itself reclaimed (a roll, a
		 * spill) are written after all; a write may reclaim
		 * again, so until none is left */
		for (size_t k = 0; k < w->np; k++) {
			struct pending *q = &w->p[k];

			if (q->kept && !q->finished && !q->e->seg &&
			    q->e->in_index) {
				q->kept = false;
				again = true;
			}
		}
		if (again) {
			w->next = 0;
			async_runnable(s, b);
			return;
		}
		for (size_t k = 0; k < w->np; k++)
			if (w->p[k].kept && !w->p[k].finished)
				release_pending(s, &w->p[k]);
		w->phase = WB_SYNC;
		if (w->durability == KVS_DURABILITY_DURABLE) {
			n = wb_syncs(s, w);
			if (n < 0)
				w->sync_err = n;
			if (n > 0)
				return;
		}
	}
	if (w->syncing)
		return;
	wb_end(s, w);
}

struct wbatch *wb_new(size_t n, enum kvs_durability dur, int *results,
		      kvs_store_done_fn done, void *arg)
{
	struct wbatch *w = calloc(1, sizeof(*w));

	if (!w)
		return NULL;
	w->p = calloc(n ? n : 1, sizeof(*w->p));
	if (!w->p) {
		free(w);
		return NULL;
	}
	w->hdr.done = done;
	w->hdr.arg = arg;
	w->hdr.step = wb_step;
	w->hdr.release = wb_release;
	w->durability = dur;
	w->results = results;
	w->n = n;
	return w;
}

void wb_free(struct wbatch *w)
{
	wb_release(&w->hdr);
}

void wb_stage(struct kvs_store *s, struct wbatch *w, size_t i,
	      const uint8_t *obj, size_t len, uint8_t **adopt, int adopt_cls)
{
	struct pending *q = &w->p[w->np];
	bool taken = false;

	w->results[i] =
		stage_one(s, obj, len, w->durability > KVS_DURABILITY_MEMORY, q,
			  adopt ? *adopt : NULL, adopt_cls, &taken);
	if (taken)
		*adopt = NULL;
	if (w->results[i] == 0 && q->e) {
		q->i = i;
		w->np++;
	}
}

int wb_stage_tomb(struct kvs_store *s, struct wbatch *w, size_t i,
		  struct entry *t)
{
	struct pending *q = &w->p[w->np];

	if (posix_memalign((void **)&q->image, KVS_STORE_ALIGN,
			   KVS_STORE_ALIGN))
		return -ENOMEM;
	memset(q->image, 0, KVS_STORE_ALIGN);
	q->owned = true;
	q->tomb = true;
	q->e = t;
	q->i = i;
	t->pins++;
	w->deletes = true;
	w->np++;
	return 0;
}

void wb_go(struct kvs_store *s, struct wbatch *w)
{
	async_begin(s, &w->hdr);
	async_runnable(s, &w->hdr);
	async_turn(s);
}

int kvs_store_put_batch_async(struct kvs_store *store,
			      const uint8_t *const *objs, const size_t *lens,
			      size_t n, enum kvs_durability durability,
			      int *results, kvs_store_done_fn done, void *arg)
{
	struct kvs_store *s = store;
	enum kvs_durability dur = durability;
	struct store_async *a;
	struct wbatch *w;
	int err;

	pthread_mutex_lock(&s->lock);
	err = put_level(s, &dur);
	if (err) {
		pthread_mutex_unlock(&s->lock);
		return refuse_batch(results, n, err);
	}
	a = async_get(s, &err);
	if (dur == KVS_DURABILITY_MEMORY || !async_has_ring(a)) {
		/* nothing for the device (a put over a deleted key aside),
		 * or no ring: served here */
		store_put_batch(s, objs, lens, n, durability, results, NULL,
				NULL);
		pthread_mutex_unlock(&s->lock);
		return 1;
	}
	w = wb_new(n, dur, results, done, arg);
	if (!w) {
		pthread_mutex_unlock(&s->lock);
		return refuse_batch(results, n, -ENOMEM);
	}
	for (size_t i = 0; i < n; i++)
		wb_stage(s, w, i, objs[i], lens[i], NULL, -1);
	wb_go(s, w);
	pthread_mutex_unlock(&s->lock);
	return 0;
}

int kvs_store_put_batch(struct kvs_store *store, const uint8_t *const *objs,
			const size_t *lens, size_t n,
			enum kvs_durability durability, int *results)
{
	int err;

	pthread_mutex_lock(&store->lock);
	err = store_put_batch(store, objs, lens, n, durability, results, NULL,
			      NULL);
	pthread_mutex_unlock(&store->lock);
	return err;
}

int kvs_store_put(struct kvs_store *store, const uint8_t *obj, size_t len,
		  enum kvs_durability durability, struct kvs_store_key *key_out)
{
	struct kvs_store_key key;
	int result, err;

	err = kvs_store_put_batch(store, &obj, &len, 1, durability, &result);
	if (err)
		return err;
	if (key_out && kvs_store_key_of(obj, len, &key) == 0)
		*key_out = key;
	return 0;
}

int kvs_store_sync(struct kvs_store *store)
{
	int err;

	pthread_mutex_lock(&store->lock);
	/* every object written so far: by earlier processes too */
	err = store->nvme_on && !store->read_only ? nvme_sync_dirty(store, true)
						  : 0;
	pthread_mutex_unlock(&store->lock);
	return err;
}
