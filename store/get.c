/*
 * get.c - reads: DRAM hits are pinned and returned in place; NVMe hits
 * are read (a batch together, queue_depth in flight) straight into a DRAM
 * slot, which promotes them, or into a private buffer when there is no
 * room.  Every record read from NVMe is checked in full before it is
 * served; one that fails is dropped, counted and reported as a miss
 * named -KVS_ECORRUPT (so is a key whose record recovery dropped as
 * corrupt), until a new put of the key.  References are counted: the
 * store is not closed under them.  Also the longest-prefix lookup and
 * the statistics.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kvstash/log.h"
#include "store_internal.h"

struct kvs_store_ref {
	struct kvs_store *store;
	struct entry *entry; /* pinned, or NULL */
	uint8_t *owned; /* private record image, or NULL */
	const uint8_t *data;
	size_t len;
};

int store_check_read(struct kvs_store *s, struct entry *e, const uint8_t *rec)
{
	struct rec_header h;
	const char *check = "record sequence";
	int err;

	err = record_verify(rec, record_size(e->len), &e->key,
			    KVS_VERIFY_NO_CHECKSUMS, &h, &check);
	if (!err && (h.seq != e->seq || h.length != e->len))
		err = -KVS_ECORRUPT;
	e->rec_checked = !err;
	if (!err)
		return 0;
	e->bad = true;
	kvs_log(KVS_LOG_DEBUG,
		"store: record in segment %llu at %llu failed %s: a miss",
		(unsigned long long)(e->seg ? e->seg->id : 0),
		(unsigned long long)e->off, check);
	s->st.corrupt_dropped++;
	nvme_detach(s, e);
	return err;
}

static struct kvs_store_ref *ref_new(struct kvs_store *s, struct entry *pin,
				     uint8_t *owned, const uint8_t *image,
				     size_t len)
{
	struct kvs_store_ref *ref = calloc(1, sizeof(*ref));

	if (!ref)
		return NULL;
	s->nrefs++;
	ref->store = s;
	ref->entry = pin;
	ref->owned = owned;
	ref->data = image + REC_HEADER_SIZE;
	ref->len = len;
	return ref;
}

/* A get of @e served from its DRAM copy: *@ref pins it, *@result is 0
 * (or -ENOMEM, no ref). */
static void dram_ref(struct kvs_store *s, struct entry *e,
		     struct kvs_store_ref **ref, int *result)
{
	*ref = ref_new(s, e, NULL, e->slot, e->len);
	if (!*ref) {
		*result = -ENOMEM;
		return;
	}
	e->pins++;
	dram_hit(s, e);
	*result = 0;
	s->st.hits++;
	s->st.dram_hits++;
}

struct nvme_read {
	struct entry *e; /* pinned until finished */
	uint8_t *buf;
	bool in_dram;
	bool started, finished;
	size_t i;
	struct kvs_store_io_req req;
};

static void read_buf_free(struct kvs_store *s, struct nvme_read *r)
{
	if (r->buf && r->in_dram)
		dram_free(&s->dram, r->buf,
			  dram_class(&s->dram, record_size(r->e->len)));
	else
		free(r->buf);
	r->buf = NULL;
}

/* Finishes one NVMe read: check, then promote or hand over the buffer.
 * Consumes the read's pin on the entry (a promoted ref keeps it). */
static int finish_read(struct kvs_store *s, struct nvme_read *r, int res,
		       struct kvs_store_ref **ref)
{
	struct entry *e = r->e;
	bool promote = r->in_dram && !e->slot;
	int err = res;

	*ref = NULL;
	/* a record failing a check is dropped (and counted): a miss for
	 * the caller, named as one of a damaged record */
	if (!err && store_check_read(s, e, r->buf))
		err = -KVS_ECORRUPT;
	if (!err && r->in_dram && e->slot) {
		/* the same key twice in one batch: share the first copy */
		read_buf_free(s, r);
		r->buf = e->slot;
	}
	if (!err) {
		if (e->nfreq < 3)
			e->nfreq++;
		*ref = ref_new(s, r->in_dram ? e : NULL,
			       r->in_dram ? NULL : r->buf, r->buf, e->len);
		if (!*ref)
			err = -ENOMEM;
	}
	if (err) {
		if (promote || !r->in_dram)
			read_buf_free(s, r);
		e->pins--;
		entry_maybe_free(s, e);
		return err;
	}
	if (promote) {
		e->slot = r->buf;
		e->cls = dram_class(&s->dram, record_size(e->len));
		dram_insert(
			s, e,
			dram_parent_of(s, e, r->buf + REC_HEADER_SIZE, e->len));
		s->st.promotions++;
	}
	if (!r->in_dram) {
		e->pins--;
		entry_maybe_free(s, e);
	}
	return 0;
}

/* Records the outcome of one read (or of one that could not start). */
static void read_done(struct kvs_store *s, struct nvme_read *r, int res,
		      struct kvs_store_ref **refs, int *results)
{
	if (!r->started) {
		read_buf_free(s, r);
		r->e->pins--;
		entry_maybe_free(s, r->e);
	} else {
		if (res)
			kvs_log(KVS_LOG_ERR, "store: read segment %llu: %s",
				(unsigned long long)(r->e->seg ? r->e->seg->id
							       : 0),
				kvs_strerror(res));
		res = finish_read(s, r, res, &refs[r->i]);
	}
	r->finished = true;
	results[r->i] = res;
	if (res) {
		s->st.misses++;
	} else {
		s->st.hits++;
		s->st.nvme_hits++;
	}
}

/* Gives each pending read a buffer, then reads them with queue_depth in
 * flight, checking each one as it lands while the others are read. */
static int read_batch(struct kvs_store *s, struct nvme_read *rd, size_t n,
		      struct kvs_store_ref **refs, int *results)
{
	size_t next = 0, left = n;

	for (size_t k = 0; k < n; k++) {
		uint64_t rec = record_size(rd[k].e->len);
		int cls = s->dram_on ? dram_class(&s->dram, rec) : -1;

		rd[k].buf = dram_make_room(s, cls, rd[k].e, NULL);
		rd[k].in_dram = rd[k].buf != NULL;
		if (!rd[k].buf &&
		    posix_memalign((void **)&rd[k].buf, KVS_STORE_ALIGN, rec))
			rd[k].buf = NULL;
	}
	/* locations are read only now: making room may have moved records */
	for (size_t k = 0; k < n; k++) {
		struct nvme_read *r = &rd[k];
		struct entry *e = r->e;

		if (!r->buf || !e->seg) {
			read_done(s, r,
				  !r->buf  ? -ENOMEM
				  : e->bad ? -KVS_ECORRUPT
					   : -KVS_ENOTFOUND,
				  refs, results);
			left--;
			continue;
		}
		r->req = (struct kvs_store_io_req){
			.op = KVS_STORE_IO_READ,
			.fd = e->seg->fd,
			.buf = r->buf,
			.len = (uint32_t)record_size(e->len),
			.off = e->off,
			.buf_index = r->in_dram ? buf_index_of(s, r->buf) : -1,
		};
	}
	while (left) {
		bool progress = false;

		for (; next < n && s->inflight < s->opts.queue_depth; next++) {
			struct nvme_read *r = &rd[next];

			if (r->finished)
				continue;
			r->started = true;
			io_start(s, &r->req);
		}
		for (size_t k = 0; k < next; k++) {
			struct nvme_read *r = &rd[k];
			int res;

			if (!r->started || r->finished || !r->req.done)
				continue;
			res = r->req.res < 0			  ? r->req.res
			      : r->req.res != (int32_t)r->req.len ? -EIO
								  : 0;
			read_done(s, r, res, refs, results);
			left--;
			progress = true;
		}
		if (!progress && left) {
			int err = io_wait(s, 1);

			if (err)
				return err; /* the ring is broken */
		}
	}
	return 0;
}

int kvs_store_get_batch(struct kvs_store *store,
			const struct kvs_store_key *keys, size_t n,
			struct kvs_store_ref **refs, int *results)
{
	struct kvs_store *s = store;
	struct nvme_read *rd = calloc(n ? n : 1, sizeof(*rd));
	size_t nrd = 0;
	int err;

	if (!rd) {
		for (size_t i = 0; i < n; i++) {
			refs[i] = NULL;
			results[i] = -ENOMEM;
		}
		return -ENOMEM;
	}
	pthread_mutex_lock(&s->lock);
	for (size_t i = 0; i < n; i++) {
		struct entry *e = index_find(&s->index, &keys[i]);

		refs[i] = NULL;
		results[i] = -KVS_ENOTFOUND;
		if (e && e->slot) {
			dram_ref(s, e, &refs[i], &results[i]);
		} else if (e && e->seg && !e->tomb) {
			e->pins++;
			rd[nrd].e = e;
			rd[nrd].i = i;
			nrd++;
		} else {
			if (e && e->bad)
				results[i] = -KVS_ECORRUPT;
			s->st.misses++;
		}
	}
	err = read_batch(s, rd, nrd, refs, results);
	pthread_mutex_unlock(&s->lock);
	free(rd);
	return err;
}

/* ---- asynchronous gets ---------------------------------------------- */

/* One NVMe read of an asynchronous get: where the record was when the
 * read was prepared (the entry may move on while it is in flight). */
struct aread {
	struct aio io;
	struct entry *e; /* pinned until finished */
	uint8_t *buf;
	bool in_dram;
	struct segment *seg; /* its async_io counts this read */
	uint64_t off, seq;
	uint32_t len; /* object bytes */
	size_t i;
};

struct get_batch {
	struct abatch hdr;
	struct kvs_store_ref **refs;
	int *results;
	struct aread *rd;
	size_t left; /* reads not finished */
};

static void get_batch_release(struct abatch *b)
{
	struct get_batch *g = (struct get_batch *)b;

	free(g->rd);
	free(g);
}

/* Whether @r read what @e holds now (its record did not move or change
 * while the read was in flight). */
static bool still_current(const struct aread *r, const struct entry *e)
{
	return !e->tomb && e->seg == r->seg && e->off == r->off &&
	       e->seq == r->seq && e->len == r->len;
}

/* The ref of a read that landed and checked: promoted into DRAM where it
 * may be, else sharing the DRAM copy that appeared meanwhile, else a
 * private copy.  Consumes the read's pin (a promoted ref keeps it). */
static struct kvs_store_ref *aread_ref(struct kvs_store *s, struct aread *r,
				       bool current)
{
	struct entry *e = r->e;
	uint64_t rec = record_size(r->len);
	struct kvs_store_ref *ref;
	uint8_t *copy;

	if (r->in_dram && current && !e->slot && e->in_index) {
		ref = ref_new(s, e, NULL, r->buf, r->len);
		if (!ref)
			return NULL;
		e->slot = r->buf;
		e->cls = dram_class(&s->dram, rec);
		dram_insert(
			s, e,
			dram_parent_of(s, e, r->buf + REC_HEADER_SIZE, e->len));
		s->st.promotions++;
		r->buf = NULL;
		return ref;
	}
	if (r->in_dram && current && e->slot) {
		/* the same record got a DRAM copy meanwhile: share it */
		ref = ref_new(s, e, NULL, e->slot, r->len);
		if (ref)
			dram_hit(s, e);
		return ref;
	}
	copy = r->buf;
	if (r->in_dram) {
		if (posix_memalign((void **)&copy, KVS_STORE_ALIGN, rec))
			return NULL;
		memcpy(copy, r->buf, rec);
	}
	ref = ref_new(s, NULL, copy, copy, r->len);
	if (!ref) {
		if (copy != r->buf)
			free(copy);
		return NULL;
	}
	if (copy == r->buf)
		r->buf = NULL; /* the ref's now */
	e->pins--;
	entry_maybe_free(s, e);
	return ref;
}

static void aread_done(struct kvs_store *s, struct aio *io)
{
	struct aread *r = (struct aread *)io;
	struct get_batch *g = (struct get_batch *)io->batch;
	struct entry *e = r->e;
	bool current = still_current(r, e);
	int res = io->req.res < 0			? io->req.res
		  : io->req.res != (int32_t)io->req.len ? -EIO
							: 0;

	r->seg->async_io--;
	if (res)
		kvs_log(KVS_LOG_ERR, "store: read segment %llu: %s",
			(unsigned long long)r->seg->id, kvs_strerror(res));
	if (!res && current) {
		/* a record that fails is dropped, counted, named a miss */
		if (store_check_read(s, e, r->buf))
			res = -KVS_ECORRUPT;
	} else if (!res) {
		/* the record of the key moved on: the bytes read are checked
		 * as what was asked for then, and the entry left alone */
		struct rec_header h;

		if (record_verify(r->buf, record_size(r->len), &e->key,
				  KVS_VERIFY_NO_CHECKSUMS, &h, NULL) ||
		    h.seq != r->seq || h.length != r->len)
			res = -KVS_ECORRUPT;
	}
	if (!res) {
		if (current && e->nfreq < 3)
			e->nfreq++;
		g->refs[r->i] = aread_ref(s, r, current);
		if (!g->refs[r->i])
			res = -ENOMEM;
	}
	if (res) {
		e->pins--;
		entry_maybe_free(s, e);
	}
	if (r->buf && r->in_dram)
		dram_free(&s->dram, r->buf,
			  dram_class(&s->dram, record_size(r->len)));
	else
		free(r->buf);
	r->buf = NULL;
	g->results[r->i] = res;
	if (res) {
		s->st.misses++;
	} else {
		s->st.hits++;
		s->st.nvme_hits++;
	}
	if (--g->left == 0)
		async_finish(s, &g->hdr, 0);
}

/* Prepares the reads of @g (entries pinned, in @g->rd with their indexes)
 * and queues them; lock held.  A read that cannot have a buffer is a
 * failure of its item. */
static void get_batch_queue(struct kvs_store *s, struct get_batch *g,
			    size_t nrd)
{
	for (size_t k = 0; k < nrd; k++) {
		struct aread *r = &g->rd[k];
		uint64_t rec = record_size(r->e->len);
		int cls = s->dram_on ? dram_class(&s->dram, rec) : -1;

		r->buf = dram_make_room(s, cls, r->e, NULL);
		r->in_dram = r->buf != NULL;
		if (!r->buf &&
		    posix_memalign((void **)&r->buf, KVS_STORE_ALIGN, rec))
			r->buf = NULL;
	}
	/* locations are read only now: making room may have moved records */
	for (size_t k = 0; k < nrd; k++) {
		struct aread *r = &g->rd[k];
		struct entry *e = r->e;

		if (!r->buf || !e->seg || e->tomb) {
			g->results[r->i] = !r->buf  ? -ENOMEM
					   : e->bad ? -KVS_ECORRUPT
						    : -KVS_ENOTFOUND;
			s->st.misses++;
			if (r->buf && r->in_dram)
				dram_free(&s->dram, r->buf,
					  dram_class(&s->dram,
						     record_size(e->len)));
			else
				free(r->buf);
			r->buf = NULL;
			e->pins--;
			entry_maybe_free(s, e);
			g->left--;
			continue;
		}
		r->seg = e->seg;
		r->off = e->off;
		r->seq = e->seq;
		r->len = e->len;
		r->seg->async_io++;
		r->io.req = (struct kvs_store_io_req){
			.op = KVS_STORE_IO_READ,
			.fd = r->seg->fd,
			.buf = r->buf,
			.len = (uint32_t)record_size(r->len),
			.off = r->off,
			.buf_index = r->in_dram ? buf_index_of(s, r->buf) : -1,
		};
		r->io.complete = aread_done;
		r->io.batch = &g->hdr;
		async_queue(s, &r->io);
	}
	if (g->left == 0)
		async_finish(s, &g->hdr, 0);
}

int kvs_store_get_batch_async(struct kvs_store *store,
			      const struct kvs_store_key *keys, size_t n,
			      struct kvs_store_ref **refs, int *results,
			      kvs_store_done_fn done, void *arg)
{
	struct kvs_store *s = store;
	struct get_batch *g = NULL;
	struct store_async *a;
	size_t nrd = 0;
	int err;

	pthread_mutex_lock(&s->lock);
	a = async_get(s, &err);
	if (!async_has_ring(a)) {
		/* no ring (or no memory for the engine): served here */
		pthread_mutex_unlock(&s->lock);
		err = kvs_store_get_batch(s, keys, n, refs, results);
		return err ? err : 1;
	}
	for (size_t i = 0; i < n; i++) {
		struct entry *e = index_find(&s->index, &keys[i]);

		refs[i] = NULL;
		results[i] = -KVS_ENOTFOUND;
		if (e && e->slot) {
			dram_ref(s, e, &refs[i], &results[i]);
			continue;
		}
		if (e && e->seg && !e->tomb) {
			if (!g) {
				g = calloc(1, sizeof(*g));
				if (g)
					g->rd = calloc(n, sizeof(*g->rd));
				if (!g || !g->rd) {
					if (g)
						free(g);
					g = NULL;
					err = -ENOMEM;
					break;
				}
			}
			e->pins++;
			g->rd[nrd].e = e;
			g->rd[nrd++].i = i;
			continue;
		}
		if (e && e->bad)
			results[i] = -KVS_ECORRUPT;
		s->st.misses++;
	}
	if (err) {
		/* no memory: nothing is queued, nothing held */
		pthread_mutex_unlock(&s->lock);
		for (size_t i = 0; i < n; i++) {
			kvs_store_ref_release(refs[i]);
			refs[i] = NULL;
			results[i] = -ENOMEM;
		}
		return -ENOMEM;
	}
	if (!g) {
		pthread_mutex_unlock(&s->lock);
		return 1; /* everything in DRAM or missing */
	}
	g->hdr.done = done;
	g->hdr.arg = arg;
	g->hdr.release = get_batch_release;
	g->refs = refs;
	g->results = results;
	g->left = nrd;
	async_begin(s, &g->hdr);
	get_batch_queue(s, g, nrd);
	async_turn(s);
	pthread_mutex_unlock(&s->lock);
	return 0;
}

int kvs_store_get(struct kvs_store *store, const struct kvs_store_key *key,
		  struct kvs_store_ref **out)
{
	struct kvs_store_ref *ref;
	int result, err;

	err = kvs_store_get_batch(store, key, 1, &ref, &result);
	if (err)
		return err;
	if (result)
		return result;
	*out = ref;
	return 0;
}

const uint8_t *kvs_store_ref_data(const struct kvs_store_ref *ref)
{
	return ref->data;
}

size_t kvs_store_ref_len(const struct kvs_store_ref *ref)
{
	return ref->len;
}

void kvs_store_ref_release(struct kvs_store_ref *ref)
{
	struct kvs_store *s;
	struct entry *e;

	if (!ref)
		return;
	s = ref->store;
	e = ref->entry;
	pthread_mutex_lock(&s->lock);
	if (e) {
		e->pins--;
		entry_maybe_free(s, e);
	}
	s->nrefs--;
	pthread_mutex_unlock(&s->lock);
	free(ref->owned);
	free(ref);
}

size_t kvs_store_lookup_prefix(struct kvs_store *store,
			       const uint8_t (*span_ids)[KVS_ID_SIZE],
			       size_t n_spans, const uint32_t *layers,
			       size_t n_layers)
{
	struct kvs_store_key key;
	size_t i;

	pthread_mutex_lock(&store->lock);
	for (i = 0; i < n_spans; i++) {
		size_t l;

		memcpy(key.span_id, span_ids[i], KVS_ID_SIZE);
		for (l = 0; l < n_layers; l++) {
			struct entry *e;

			key.layer = layers[l];
			e = index_find(&store->index, &key);
			if (!e || e->tomb || (!e->slot && !e->seg))
				break;
		}
		if (l < n_layers)
			break;
	}
	pthread_mutex_unlock(&store->lock);
	return i;
}

void kvs_store_stats_get(struct kvs_store *store, struct kvs_store_stats *out)
{
	struct kvs_store *s = store;

	pthread_mutex_lock(&s->lock);
	*out = s->st;
	out->dram.blocks = s->dram_objects;
	out->dram.bytes = s->dram_obj_bytes;
	out->dram.capacity = s->dram_on ? s->opts.dram_capacity : 0;
	out->nvme.blocks = s->nvme_objects;
	out->tombstones = s->nvme_tombstones;
	out->nvme.bytes = s->nvme_obj_bytes;
	out->nvme.capacity = s->nvme_on ? s->opts.nvme_capacity : 0;
	out->segments = s->nsegs;
	out->nvme_file_bytes = s->nvme_file_bytes;
	out->direct_io = s->direct;
	out->hugepages = s->dram.huge;
	out->registered = s->registered;
	out->host_pinned = s->dram.host_registered;
	pthread_mutex_unlock(&s->lock);
}
