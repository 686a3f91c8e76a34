/*
 * store.c - the public face of the store engine: options, keys, open and
 * close (with the spill of DRAM-only objects at close).  Puts are in
 * put.c, gets, lookups and statistics in get.c, deletes in delete.c, the
 * asynchronous engine in async.c.
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

static const char *const eviction_names[] = {
	[KVS_STORE_EVICT_PREFIX] = "prefix",
	[KVS_STORE_EVICT_S3FIFO] = "s3fifo",
	[KVS_STORE_EVICT_LRU] = "lru",
};

int kvs_store_eviction_parse(const char *name, enum kvs_store_eviction *out)
{
	for (size_t i = 0; i < sizeof(eviction_names) / sizeof(*eviction_names);
	     i++)
		if (strcmp(name, eviction_names[i]) == 0) {
			*out = (enum kvs_store_eviction)i;
			return 0;
		}
	return -KVS_EPARAM;
}

const char *kvs_store_eviction_name(enum kvs_store_eviction e)
{
	if ((unsigned)e >= sizeof(eviction_names) / sizeof(*eviction_names))
		return "?";
	return eviction_names[e];
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
	if (!kvs_store_eviction_name(s->opts.eviction)[1]) {
		kvs_log(KVS_LOG_ERR, "store: no eviction policy %d",
			(int)s->opts.eviction);
		return -KVS_EPARAM;
	}
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

int arena_register(struct kvs_store *s, struct kvs_store_ring *ring)
{
	struct iovec iov[64];
	unsigned n = 0;

	for (uint64_t off = 0; off < s->dram.map_len && n < 64;
	     off += REG_CHUNK) {
		uint64_t left = s->dram.map_len - off;

		iov[n].iov_base = s->dram.base + off;
		iov[n++].iov_len = left < REG_CHUNK ? left : REG_CHUNK;
	}
	return ring_register(ring, iov, n);
}

static void register_arena(struct kvs_store *s)
{
	if (!s->ring || !s->dram_on)
		return;
	if (arena_register(s, s->ring) == 0)
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
	dram_policy_fini(s);
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
	/* a manifest alone is a creation a crash cut short: created again;
	 * files only named like segments are other files */
	if (dir_shows_segments(s->io, dir, &ls)) {
		kvs_log(KVS_LOG_ERR,
			"store: %s holds segments but no superblock; "
			"'kvstash store fsck --repair' rebuilds it",
			dir);
		err = -KVS_EHDRSUM;
	} else if (!s->opts.create || s->read_only) {
		kvs_log(KVS_LOG_ERR, "store: no store at %s", dir);
		err = -ENOENT;
	} else if (ls.others || ls.segs.n) {
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
	/* a writer killed between the superblock's rename and the directory
	 * fsync after it left it in place but not durable: made durable
	 * before this open creates a segment beside it, else a power cut
	 * could keep the segment and lose the superblock */
	if (!s->read_only) {
		err = dir_fsync(s->io, dir);
		if (err)
			return err;
	}
	/* one damaged copy: rewritten from the good one */
	if (sb.copies_bad && !s->read_only &&
	    sb.version == KVS_STORE_FORMAT_VERSION)
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
	dram_policy_init(&s->pol);
	list_init(&s->segments);
	list_init(&s->nghost);
	list_init(&s->reservations);
	list_init(&s->tombs);
	s->next_seq = 1;
	s->stale_floor = UINT64_MAX;
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
