/*
 * store.c - the public face of the store engine: open/close, put and get
 * (single and batched), longest-prefix lookup, statistics.
 *
 * A put validates the object, copies it into a DRAM slot laid out as its
 * NVMe record image ([record header][object][zero pad]), so the write to
 * NVMe goes straight from the slot (a registered buffer) with no copy, and
 * a promotion reads straight into one.  Batches reserve their records in
 * the head segment and submit them together; everything already reserved
 * is written before the head rolls, so at most the head segment has
 * writes in flight (recovery relies on that).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kvstash/log.h"
#include "store_internal.h"

#define DEFAULT_SEGMENT (32ull << 20)
#define MIN_SEGMENT (256ull << 10)
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
}

int kvs_store_key_of(const uint8_t *obj, size_t len,
		     struct kvs_store_key *out)
{
	struct kvs_header h;
	int err = kvs_header_decode(obj, len, 0, &h);

	if (err)
		return err;
	memcpy(out->span_id, h.ident.block_id, KVS_ID_SIZE);
	out->layer = h.ident.layer;
	return 0;
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
	if (o)
		s->opts = *o;
	else
		kvs_store_opts_default(&s->opts);
	s->io = s->opts.io ? s->opts.io : kvs_store_io_default();
	if (s->opts.queue_depth == 0)
		s->opts.queue_depth = 32;
	if (s->opts.segment_size == 0)
		s->opts.segment_size = DEFAULT_SEGMENT;
	s->opts.segment_size = s->opts.segment_size / KVS_STORE_ALIGN *
			       KVS_STORE_ALIGN;
	s->nvme_on = s->opts.nvme_capacity > 0;
	if (s->nvme_on && s->opts.nvme_capacity / s->opts.segment_size < 2)
		s->opts.segment_size = s->opts.nvme_capacity / 2 /
				       KVS_STORE_ALIGN * KVS_STORE_ALIGN;
	if (s->nvme_on && s->opts.segment_size < MIN_SEGMENT) {
		kvs_log(KVS_LOG_ERR,
			"store: NVMe capacity %llu too small (min %llu)",
			(unsigned long long)s->opts.nvme_capacity,
			2 * MIN_SEGMENT);
		return -EINVAL;
	}
	if (s->nvme_on)
		s->max_segs = s->opts.nvme_capacity / s->opts.segment_size;
	return 0;
}

static int take_lock(struct kvs_store *s)
{
	char path[4096];
	int err;

	if (s->opts.create && mkdir(s->dir, 0755) && errno != EEXIST) {
		err = -errno;
		kvs_log(KVS_LOG_ERR, "store: mkdir %s: %s", s->dir,
			strerror(errno));
		return err;
	}
	snprintf(path, sizeof(path), "%s/%s", s->dir, LOCK_NAME);
	s->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (s->lock_fd < 0) {
		err = -errno;
		if (err == -ENOENT)
			kvs_log(KVS_LOG_ERR, "store: no store at %s", s->dir);
		else
			kvs_log(KVS_LOG_ERR, "store: %s: %s", path,
				strerror(errno));
		return err;
	}
	while (flock(s->lock_fd, LOCK_EX) != 0) {
		if (errno != EINTR) {
			err = -errno;
			close(s->lock_fd);
			s->lock_fd = -1;
			return err;
		}
	}
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

	index_each(&s->index, free_entry_cb, NULL);
	index_fini(&s->index);
	while ((l = list_oldest(&s->segments)))
		seg_free(s, list_entry(l, struct segment, link));
	ring_destroy(s->ring);
	if (s->dram_on)
		dram_fini(&s->dram);
	free(s->scratch);
	if (s->lock_fd >= 0)
		close(s->lock_fd);
	pthread_mutex_destroy(&s->lock);
	free(s->dir);
	free(s);
}

int kvs_store_open(const char *dir, const struct kvs_store_opts *opts,
		   struct kvs_store **out)
{
	struct kvs_store *s = calloc(1, sizeof(*s));
	int err;

	if (!s)
		return -ENOMEM;
	s->lock_fd = -1;
	pthread_mutex_init(&s->lock, NULL);
	list_init(&s->small);
	list_init(&s->main);
	list_init(&s->ghost);
	list_init(&s->segments);
	list_init(&s->nghost);
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
	err = take_lock(s);
	if (err)
		goto fail;
	err = superblock_check(s->io, dir, s->opts.create);
	if (err)
		goto fail;
	s->direct = !s->opts.buffered_io;
	if (ring_create(s->opts.queue_depth, &s->ring))
		kvs_log(KVS_LOG_INFO, "store: no io_uring, synchronous I/O");
	if (s->opts.dram_capacity) {
		err = dram_init(&s->dram, s->opts.dram_capacity);
		if (err)
			goto fail;
		s->dram_on = true;
		register_arena(s);
	}
	if (s->nvme_on) {
		err = recover(s);
		if (err)
			goto fail;
	}
	*out = s;
	return 0;
fail:
	teardown(s);
	return err;
}

static void spill_cb(void *arg, struct entry *e)
{
	struct kvs_store *s = arg;

	if (e->slot && !e->seg &&
	    nvme_write_image(s, e, e->slot, buf_index_of(s, e->slot),
			     KVS_DURABILITY_WRITTEN) == 0)
		s->st.spills++;
}

void kvs_store_close(struct kvs_store *store)
{
	if (!store)
		return;
	pthread_mutex_lock(&store->lock);
	if (store->nvme_on) {
		index_each(&store->index, spill_cb, store);
		nvme_sync_dirty(store);
	}
	pthread_mutex_unlock(&store->lock);
	teardown(store);
}

/* ---- put ------------------------------------------------------------- */

struct pending {
	struct entry *e;
	uint8_t *image;
	bool owned;
	size_t i;               /* index in the batch */
	struct segment *seg;
	uint64_t off, seq;
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

/* Places one object in DRAM (and/or a bounce image); pins the entry. */
static int stage_one(struct kvs_store *s, const uint8_t *obj, size_t len,
		     bool need_write, struct pending *p)
{
	struct kvs_store_key key;
	struct entry *e;
	uint64_t rec = record_size(len);
	uint8_t *image = NULL;
	int cls, err;

	if (len < KVS_HEADER_SIZE || len > STORE_MAX_OBJECT)
		return -KVS_ETRUNC;
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
	cls = s->dram_on ? dram_class(&s->dram, rec) : -1;
	image = dram_make_room(s, cls);
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
	memcpy(image + REC_HEADER_SIZE, obj, len);
	memset(image + REC_HEADER_SIZE + len, 0, rec - REC_HEADER_SIZE - len);
	if (e->seg && e->len != len)
		nvme_detach(s, e); /* old record no longer describes it */
	e->len = (uint32_t)len;
	e->psum = payload_checksum(obj, len);
	if (!p->owned) {
		e->slot = image;
		e->cls = cls;
		nvme_detach(s, e); /* the DRAM copy is newer than the log */
		dram_insert(s, e);
	}
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
	p->e = NULL;
}

/* Writes pending[0..n) (already reserved); results per object. */
static int write_reserved(struct kvs_store *s, struct pending *p, size_t n,
			  int *results)
{
	struct kvs_store_io_req *req = calloc(n, sizeof(*req));
	int err;

	if (!req)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		struct rec_header h = {
			.seq = p[i].seq, .length = p[i].e->len,
			.payload_sum = p[i].e->psum, .key = p[i].e->key,
		};

		rec_header_encode(&h, p[i].image);
		req[i] = (struct kvs_store_io_req){
			.op = KVS_STORE_IO_WRITE, .fd = p[i].seg->fd,
			.buf = p[i].image, .len = (uint32_t)record_size(h.length),
			.off = p[i].off,
			.buf_index = p[i].owned ? -1 : buf_index_of(s, p[i].image),
		};
	}
	err = s->io->submit(s->io->ctx, s->ring, req, (unsigned)n,
			    s->opts.queue_depth);
	for (size_t i = 0; i < n; i++) {
		int r = err ? err : req[i].res < 0 ? req[i].res :
			req[i].res != (int32_t)req[i].len ? -EIO : 0;

		if (r) {
			kvs_log(KVS_LOG_ERR,
				"store: write segment %llu at %llu: %s",
				(unsigned long long)p[i].seg->id,
				(unsigned long long)p[i].off,
				kvs_strerror(r));
			results[p[i].i] = r;
		} else {
			nvme_attach(s, p[i].e, p[i].seg, p[i].off, p[i].seq);
		}
		release_pending(s, &p[i]);
	}
	free(req);
	return 0;
}

/* Reserves and writes every pending record, draining before each roll. */
static int flush_pending(struct kvs_store *s, struct pending *p, size_t n,
			 int *results)
{
	size_t first = 0;
	int err;

	for (size_t i = 0; i < n; i++) {
		uint64_t rec = record_size(p[i].e->len);

		if (!nvme_head_fits(s, rec) && i > first) {
			write_reserved(s, p + first, i - first, results);
			first = i;
		}
		err = nvme_reserve(s, rec, &p[i].seg, &p[i].off);
		if (err) {
			write_reserved(s, p + first, i - first, results);
			for (; i < n; i++) {
				results[p[i].i] = err;
				release_pending(s, &p[i]);
			}
			return err;
		}
		p[i].seq = s->next_seq++;
	}
	return write_reserved(s, p + first, n - first, results);
}

int kvs_store_put_batch(struct kvs_store *store, const uint8_t *const *objs,
			const size_t *lens, size_t n,
			enum kvs_durability durability, int *results)
{
	struct kvs_store *s = store;
	struct pending *p;
	size_t np = 0;
	int first_err = 0, err;

	if (durability < KVS_DURABILITY_WRITTEN &&
	    (s->opts.write_through || !s->dram_on))
		durability = KVS_DURABILITY_WRITTEN;
	if (durability > KVS_DURABILITY_MEMORY && !s->nvme_on) {
		kvs_log(KVS_LOG_ERR, "store: no NVMe tier for a written put");
		return -KVS_EPARAM;
	}
	p = calloc(n ? n : 1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	pthread_mutex_lock(&s->lock);
	for (size_t i = 0; i < n; i++) {
		struct kvs_store_key key;

		/* a key already in this batch: write what came before */
		if (kvs_store_key_of(objs[i], lens[i], &key) == 0) {
			struct entry *e = index_find(&s->index, &key);

			if (e && e->pins && np) {
				flush_pending(s, p, np, results);
				np = 0;
			}
		}
		results[i] = stage_one(s, objs[i], lens[i],
				       durability > KVS_DURABILITY_MEMORY,
				       &p[np]);
		if (results[i] == 0 && p[np].e) {
			p[np].i = i;
			np++;
		}
	}
	if (np)
		flush_pending(s, p, np, results);
	if (durability == KVS_DURABILITY_DURABLE) {
		err = nvme_sync_dirty(s);
		for (size_t i = 0; err && i < n; i++)
			if (results[i] == 0)
				results[i] = err;
	}
	for (size_t i = 0; i < n; i++)
		if (results[i] && !first_err)
			first_err = results[i];
	pthread_mutex_unlock(&s->lock);
	free(p);
	return first_err;
}

int kvs_store_put(struct kvs_store *store, const uint8_t *obj, size_t len,
		  enum kvs_durability durability,
		  struct kvs_store_key *key_out)
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
	err = store->nvme_on ? nvme_sync_dirty(store) : 0;
	pthread_mutex_unlock(&store->lock);
	return err;
}
