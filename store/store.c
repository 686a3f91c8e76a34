/*
 * store.c - the public face of the store engine: open/close, put and get
 * (single and batched), longest-prefix lookup, statistics.
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
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kvstash/log.h"
#include "store_internal.h"

#define DEFAULT_SEGMENT (32ull << 20)
#define DEFAULT_LOCK_TIMEOUT_MS 30000
#define REG_CHUNK (1ull << 30)

void kvs_store_opts_default(struct kvs_store_opts *opts)
{
	memset(opts, 0, sizeof(*opts));
	opts->dram_capacity = 256ull << 20;
	opts->nvme_capacity = 4ull << 30;
	opts->segment_size = DEFAULT_SEGMENT;
	opts->queue_depth = 32;
	opts->write_through = true;
	opts->create = true;
	opts->lock_timeout_ms = DEFAULT_LOCK_TIMEOUT_MS;
}

void kvs_store_key_format(const struct kvs_store_key *key,
			  char out[KVS_STORE_KEY_TEXT])
{
	char hex[65];

	kvs_id_to_hex(key->span_id, hex);
	snprintf(out, KVS_STORE_KEY_TEXT, "%s:%u", hex, key->layer);
}

int kvs_store_key_parse(const char *text, struct kvs_store_key *out)
{
	struct kvs_store_key key;
	const char *colon = strchr(text, ':');
	char hex[65], *end;
	unsigned long layer;

	if (!colon || colon - text != 64 || colon[1] < '0' || colon[1] > '9')
		return -KVS_EPARAM;
	memcpy(hex, text, 64);
	hex[64] = '\0';
	if (kvs_id_from_hex(hex, key.span_id))
		return -KVS_EPARAM;
	errno = 0;
	layer = strtoul(colon + 1, &end, 10);
	if (errno || *end != '\0' || layer > UINT32_MAX)
		return -KVS_EPARAM;
	key.layer = (uint32_t)layer;
	*out = key;
	return 0;
}

/* ---- open / close ---------------------------------------------------- */

static int settle_opts(struct kvs_store *s, const struct kvs_store_opts *o)
{
	uint64_t seg;

	if (o)
		s->opts = *o;
	else
		kvs_store_opts_default(&s->opts);
	io_ops_fill(&s->io_ops, s->opts.io);
	s->io = &s->io_ops;
	s->read_only = s->opts.read_only;
	if (s->opts.queue_depth == 0)
		s->opts.queue_depth = 32;
	seg = s->opts.segment_size ? s->opts.segment_size : DEFAULT_SEGMENT;
	if (seg < KVS_STORE_SEGMENT_MIN || seg > KVS_STORE_SEGMENT_MAX) {
		kvs_log(KVS_LOG_ERR,
			"store: segment size %llu out of range [%llu, %llu]",
			(unsigned long long)seg,
			(unsigned long long)KVS_STORE_SEGMENT_MIN,
			(unsigned long long)KVS_STORE_SEGMENT_MAX);
		return -KVS_EPARAM;
	}
	seg = seg / KVS_STORE_ALIGN * KVS_STORE_ALIGN;
	s->nvme_on = s->opts.nvme_capacity > 0;
	/* a capacity below two segments takes smaller segments (the
	 * default's), never below the minimum */
	if (s->nvme_on && s->opts.nvme_capacity / seg < 2 &&
	    !s->opts.segment_size)
		seg = s->opts.nvme_capacity / 2 / KVS_STORE_ALIGN *
		      KVS_STORE_ALIGN;
	if (s->nvme_on &&
	    (seg < KVS_STORE_SEGMENT_MIN || s->opts.nvme_capacity / seg < 2)) {
		kvs_log(KVS_LOG_ERR,
			"store: NVMe capacity %llu holds fewer than two "
			"segments of %llu bytes (at least %llu)",
			(unsigned long long)s->opts.nvme_capacity,
			(unsigned long long)seg,
			(unsigned long long)(2 * KVS_STORE_SEGMENT_MIN));
		return -KVS_EPARAM;
	}
	s->opts.segment_size = seg;
	if (s->nvme_on)
		s->max_segs = s->opts.nvme_capacity / seg;
	return 0;
}

static void register_arena(struct kvs_store *s)
{
	struct iovec iov[64];
	unsigned n = 0;

	if (!s->ring || !s->dram_on)
		return;
	for (uint64_t off = 0; off < s->dram.map_len && n < 64;
	     off += REG_CHUNK) {
		uint64_t left = s->dram.map_len - off;

		iov[n].iov_base = s->dram.base + off;
		iov[n++].iov_len = left < REG_CHUNK ? left : REG_CHUNK;
	}
	if (ring_register(s->ring, iov, n) == 0)
		s->registered = true;
	else
		kvs_log(KVS_LOG_INFO,
			"store: DRAM arena not registered with io_uring");
}

static void free_entry_cb(void *arg, struct entry *e)
{
	free(e);
}

static void teardown(struct kvs_store *s)
{
	struct list *l;

	reservations_fini(s);
	index_each(&s->index, free_entry_cb, NULL);
	index_fini(&s->index);
	while ((l = list_oldest(&s->segments)))
		seg_free(s, list_entry(l, struct segment, link));
	ring_destroy(s->ring);
	if (s->dram_on)
		dram_fini(&s->dram);
	free(s->scratch);
	free(s->missing);
	store_unlock(s->io, &s->dlock);
	pthread_mutex_destroy(&s->lock);
	free(s->dir);
	free(s);
}

/* No superblock: a new store, where the directory is empty; otherwise
 * the reason why not. */
static int superblock_missing(struct kvs_store *s, const char *dir)
{
	struct dir_listing ls;
	int err = dir_list(s->io, dir, &ls);

	if (err)
		return err;
	/* a manifest alone is a creation a crash cut short: created again */
	if (ls.segs.n) {
		kvs_log(KVS_LOG_ERR,
			"store: %s holds segments but no superblock; "
			"'kvstash store fsck --repair' rebuilds it",
			dir);
		err = -KVS_EHDRSUM;
	} else if (!s->opts.create || s->read_only) {
		kvs_log(KVS_LOG_ERR, "store: no store at %s", dir);
		err = -ENOENT;
	} else if (ls.others) {
		kvs_log(KVS_LOG_ERR,
			"store: %s holds other files and no kvstash store: "
			"refusing to create one there",
			dir);
		err = -ENOTEMPTY;
	} else {
		/* a new store: an empty manifest, then the superblock that
		 * says a store is here */
		s->format_version = KVS_STORE_FORMAT_VERSION;
		err = store_manifest_write(s, false);
		if (!err)
			err = superblock_write(s->io, dir);
	}
	dir_listing_free(&ls);
	return err;
}

static int open_superblock(struct kvs_store *s, const char *dir)
{
	struct sb_state sb;
	int err = superblock_read(s->io, dir, &sb);

	if (err == -ENOENT)
		return superblock_missing(s, dir);
	if (err)
		return err;
	s->format_version = sb.version;
	/* one damaged copy: rewritten from the good one */
	if (sb.copies_bad && !s->read_only && sb.version == 2)
		return superblock_write(s->io, dir);
	return 0;
}

/* A format-1 store opened for writing becomes format 2: recovery wrote
 * its manifest; the superblock follows. */
static int upgrade(struct kvs_store *s)
{
	int err;

	if (s->format_version == KVS_STORE_FORMAT_VERSION || s->read_only)
		return 0;
	err = superblock_write(s->io, s->dir);
	if (err)
		return err;
	kvs_log(KVS_LOG_WARN,
		"store: %s upgraded from store format %u to %u (older "
		"kvstash versions no longer open it)",
		s->dir, s->format_version, KVS_STORE_FORMAT_VERSION);
	s->format_version = KVS_STORE_FORMAT_VERSION;
	return 0;
}

int kvs_store_open(const char *dir, const struct kvs_store_opts *opts,
		   struct kvs_store **out)
{
	struct kvs_store *s = calloc(1, sizeof(*s));
	int err;

	if (!s)
		return -ENOMEM;
	s->dlock.fd = s->dlock.legacy_fd = -1;
	pthread_mutex_init(&s->lock, NULL);
	list_init(&s->small);
	list_init(&s->main);
	list_init(&s->ghost);
	list_init(&s->segments);
	list_init(&s->nghost);
	list_init(&s->reservations);
	s->next_seq = 1;
	s->dir = strdup(dir);
	err = s->dir ? settle_opts(s, opts) : -ENOMEM;
	if (!err)
		err = index_init(&s->index);
	if (!err && posix_memalign((void **)&s->scratch, KVS_STORE_ALIGN,
				   SEG_HEADER_SIZE))
		err = -ENOMEM;
	if (err)
		goto fail;
	err = store_lock(s->io, dir, !s->read_only,
			 s->opts.create && !s->read_only,
			 s->opts.lock_timeout_ms, &s->dlock);
	if (err)
		goto fail;
	err = open_superblock(s, dir);
	if (err)
		goto fail;
	s->direct = !s->opts.buffered_io;
	if (s->nvme_on)
		nvme_probe_direct(s);
	if (ring_create(s->opts.queue_depth > RING_MIN ? s->opts.queue_depth
						       : RING_MIN,
			&s->ring))
		kvs_log(KVS_LOG_INFO, "store: no io_uring, synchronous I/O");
	if (s->opts.dram_capacity) {
		err = dram_init(&s->dram, s->opts.dram_capacity);
		if (err)
			goto fail;
		s->dram_on = true;
		register_arena(s);
		dram_register(&s->dram, s->opts.register_arena,
			      s->opts.register_ctx);
	}
	if (s->nvme_on) {
		err = recover(s);
		if (!err)
			err = upgrade(s);
		if (err)
			goto fail;
	}
	*out = s;
	return 0;
fail:
	teardown(s);
	return err;
}

struct dirty_set {
	struct entry **v;
	size_t n, cap;
	bool short_of_memory;
};

/* Collects (and pins) the DRAM-only objects: spilling one may reclaim
 * segments and free other entries, so the index is not walked while
 * spilling. */
static void dirty_cb(void *arg, struct entry *e)
{
	struct dirty_set *d = arg;

	if (!e->slot || e->seg || d->short_of_memory)
		return;
	if (d->n == d->cap) {
		size_t cap = d->cap ? d->cap * 2 : 256;
		struct entry **v = realloc(d->v, cap * sizeof(*v));

		if (!v) {
			d->short_of_memory = true;
			return;
		}
		d->v = v;
		d->cap = cap;
	}
	e->pins++;
	d->v[d->n++] = e;
}

/* A DRAM-only object, or NULL. */
static struct entry *find_dirty(struct kvs_store *s)
{
	for (size_t b = 0; b < s->index.nbuckets; b++)
		for (struct entry *e = s->index.bucket[b]; e; e = e->hnext)
			if (e->slot && !e->seg)
				return e;
	return NULL;
}

static int spill_one(struct kvs_store *s, struct entry *e)
{
	int err = nvme_write_image(s, e, e->slot, buf_index_of(s, e->slot),
				   KVS_DURABILITY_WRITTEN);

	if (!err)
		s->st.spills++;
	return err;
}

/* 0, or the first error of a spill: the object is lost with the DRAM
 * tier. */
static int spill_all(struct kvs_store *s)
{
	struct dirty_set d = { 0 };
	struct entry *e;
	int err = 0, e2;

	index_each(&s->index, dirty_cb, &d);
	for (size_t i = 0; i < d.n; i++) {
		e = d.v[i];
		if (e->slot && !e->seg && (e2 = spill_one(s, e)) && !err)
			err = e2;
		e->pins--;
	}
	free(d.v);
	/* no memory to list them: one at a time, each found afresh (a spill
	 * may reclaim, moving or freeing others), until none is left or one
	 * cannot be written */
	while (!err && d.short_of_memory && (e = find_dirty(s)))
		err = spill_one(s, e);
	if (err)
		kvs_log(KVS_LOG_ERR,
			"store: objects of the DRAM tier could not be spilled "
			"at close: %s",
			kvs_strerror(err));
	return err;
}

/* At a clean close: the head's records synced, its preallocation cut,
 * and the manifest told so, so that the next open need not check them.
 * 0, or the error of a spill (MEMORY-level objects lost). */
static int close_nvme(struct kvs_store *s)
{
	struct segment *head;
	int lost, err;

	lost = spill_all(s);
	err = nvme_sync_dirty(s, false);
	head = head_seg(s);
	if (head) {
		seg_trim(s, head);
		if (!err && head->unsynced)
			err = seg_sync(s, head);
	}
	if (!err && !s->clean_on_disk)
		store_manifest_write(s, true);
	return lost;
}

int kvs_store_close(struct kvs_store *store)
{
	int err = 0;

	if (!store)
		return 0;
	/* queued batches finish first: their callbacks may release refs */
	async_fini(store);
	pthread_mutex_lock(&store->lock);
	if (store->nrefs) {
		kvs_log(KVS_LOG_ERR,
			"store: close of %s refused: %llu references from "
			"gets are still held",
			store->dir, (unsigned long long)store->nrefs);
		pthread_mutex_unlock(&store->lock);
		return -EBUSY;
	}
	if (store->nvme_on && !store->read_only)
		err = close_nvme(store);
	pthread_mutex_unlock(&store->lock);
	teardown(store);
	return err;
}

/* ---- put ------------------------------------------------------------- */

struct pending {
	struct entry *e; /* pinned until finished */
	uint8_t *image;
	bool owned;
	bool kept; /* its bytes are on NVMe already: no write unless lost */
	bool started, finished;
	size_t i; /* index in the batch */
	struct segment *seg;
	uint64_t off, seq;
	struct kvs_store_io_req req;
};

/* An entry for @key to hold a new object: the existing one (its DRAM
 * copy dropped), or a new one; a pinned old entry becomes a zombie that
 * lives until its last reader lets go and hands its record over. */
static int entry_for_put(struct kvs_store *s, const struct kvs_store_key *key,
			 struct entry **out)
{
	struct entry *old = index_find(&s->index, key), *e;
	int err;

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
	if (old && old->seg) {
		struct segment *seg = old->seg;
		uint64_t off = old->off, seq = old->seq;

		e->len = old->len;
		e->psum = old->psum; /* so a put of the same bytes keeps it */
		e->rec_checked = old->rec_checked;
		nvme_detach(s, old);
		nvme_attach(s, e, seg, off, seq);
	}
	if (old && old->dq == DQ_GHOST) {
		list_del(&old->dlink);
		s->nghost_d--;
		old->dq = DQ_NONE;
	}
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
	struct entry *e;
	uint64_t rec = record_size(len), psum;
	uint8_t *image = NULL;
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
	err = entry_for_put(s, &key, &e);
	if (err)
		return err;
	e->pins++;
	cls = adopt ? adopt_cls : s->dram_on ? dram_class(&s->dram, rec) : -1;
	image = adopt ? adopt : dram_make_room(s, cls);
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
		dram_insert(s, e);
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
	q->req = (struct kvs_store_io_req){
		.op = KVS_STORE_IO_WRITE,
		.fd = q->seg->fd,
		.buf = q->image,
		.len = (uint32_t)rec,
		.off = q->off,
		.buf_index = q->owned ? -1 : buf_index_of(s, q->image),
	};
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

int store_put_batch(struct kvs_store *s, const uint8_t *const *objs,
		    const size_t *lens, size_t n,
		    enum kvs_durability durability, int *results,
		    uint8_t **adopt, const int *adopt_cls)
{
	struct pending *p;
	size_t np = 0;
	int first_err = 0, err;

	if ((int)durability < KVS_DURABILITY_MEMORY ||
	    (int)durability > KVS_DURABILITY_DURABLE) {
		kvs_log(KVS_LOG_ERR, "store: durability %d is not a level",
			(int)durability);
		return refuse_batch(results, n, -KVS_EPARAM);
	}
	if (s->read_only) {
		kvs_log(KVS_LOG_ERR, "store: %s is open read-only", s->dir);
		return refuse_batch(results, n, -EROFS);
	}
	if (durability < KVS_DURABILITY_WRITTEN &&
	    (s->opts.write_through || !s->dram_on))
		durability = KVS_DURABILITY_WRITTEN;
	if (durability > KVS_DURABILITY_MEMORY && !s->nvme_on) {
		kvs_log(KVS_LOG_ERR, "store: no NVMe tier for a written put");
		return refuse_batch(results, n, -KVS_EPARAM);
	}
	p = calloc(n ? n : 1, sizeof(*p));
	if (!p)
		return refuse_batch(results, n, -ENOMEM);
	if (!adopt)
		pthread_mutex_lock(&s->lock);
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
	if (!adopt)
		pthread_mutex_unlock(&s->lock);
	free(p);
	return first_err;
}

int kvs_store_put_batch(struct kvs_store *store, const uint8_t *const *objs,
			const size_t *lens, size_t n,
			enum kvs_durability durability, int *results)
{
	return store_put_batch(store, objs, lens, n, durability, results, NULL,
			       NULL);
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
