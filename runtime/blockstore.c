/*
 * blockstore.c - the block store interface the runtime talks through, and
 * its in-process implementation over a store directory (store.h).
 *
 * Every call of the runtime goes through kvs_blockstore_get() and its
 * siblings, which count objects and bytes per store (the demo's "bytes
 * moved" and the benchmarks read them).
 *
 * The local block store keeps blocks in the store engine (DRAM tier, then
 * the NVMe tier's segments) and residual tails in this process's memory,
 * a list with a time to live each: tails are per request and short lived,
 * as in the daemon.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "kvstash/log.h"
#include "kvstash/runtime.h"

struct kvs_blockstore {
	const struct kvs_blockstore_ops *ops;
	void *ctx;
	atomic_uint refs;
	/* struct kvs_blockstore_counters, member by member */
	atomic_uint_fast64_t lookups, gets, got, got_bytes, get_missed;
	atomic_uint_fast64_t puts, put, put_bytes;
	atomic_uint_fast64_t tail_puts, tail_put_bytes;
	atomic_uint_fast64_t tail_takes, tail_take_bytes, removed;
};

int kvs_blockstore_create(const struct kvs_blockstore_ops *ops, void *ctx,
			  struct kvs_blockstore **out)
{
	struct kvs_blockstore *bs;

	if (!ops || !out || !ops->lookup || !ops->get || !ops->put ||
	    !ops->tail_put || !ops->tail_take) {
		kvs_log(KVS_LOG_ERR, "block store: incomplete ops table");
		return -KVS_EPARAM;
	}
	bs = calloc(1, sizeof(*bs));
	if (!bs) {
		kvs_log(KVS_LOG_ERR, "block store: out of memory");
		return -ENOMEM;
	}
	bs->ops = ops;
	bs->ctx = ctx;
	atomic_init(&bs->refs, 1);
	/* calloc's zeroes are the counters' initial values */
	*out = bs;
	return 0;
}

struct kvs_blockstore *kvs_blockstore_ref(struct kvs_blockstore *bs)
{
	atomic_fetch_add(&bs->refs, 1);
	return bs;
}

void kvs_blockstore_release(struct kvs_blockstore *bs)
{
	if (!bs || atomic_fetch_sub(&bs->refs, 1) != 1)
		return;
	if (bs->ops->destroy)
		bs->ops->destroy(bs->ctx);
	free(bs);
}

const struct kvs_blockstore_ops *
kvs_blockstore_ops(const struct kvs_blockstore *bs)
{
	return bs->ops;
}

void *kvs_blockstore_ctx(const struct kvs_blockstore *bs)
{
	return bs->ctx;
}

/* ---- counted calls ---------------------------------------------------- */

static void add(atomic_uint_fast64_t *counter, uint64_t n)
{
	atomic_fetch_add_explicit(counter, n, memory_order_relaxed);
}

int kvs_blockstore_lookup(struct kvs_blockstore *bs,
			  const uint8_t (*span_ids)[KVS_ID_SIZE],
			  size_t n_spans, const uint32_t *layers,
			  size_t n_layers, size_t *prefix)
{
	add(&bs->lookups, 1);
	return bs->ops->lookup(bs->ctx, span_ids, n_spans, layers, n_layers,
			       prefix);
}

int kvs_blockstore_get(struct kvs_blockstore *bs,
		       const struct kvs_store_key *keys, size_t n,
		       void *const *bufs, const size_t *caps, size_t *lens,
		       int *results)
{
	uint64_t got = 0, bytes = 0;
	int err;

	add(&bs->gets, 1);
	err = bs->ops->get(bs->ctx, keys, n, bufs, caps, lens, results);
	if (err)
		return err;
	for (size_t i = 0; i < n; i++) {
		if (results[i] == 0) {
			got++;
			bytes += lens[i];
		}
	}
	add(&bs->got, got);
	add(&bs->got_bytes, bytes);
	add(&bs->get_missed, n - got);
	return 0;
}

int kvs_blockstore_put(struct kvs_blockstore *bs, const uint8_t *const *objs,
		       const size_t *lens, size_t n, int *results)
{
	uint64_t put = 0, bytes = 0;
	int err;

	add(&bs->puts, 1);
	err = bs->ops->put(bs->ctx, objs, lens, n, results);
	if (err)
		return err;
	for (size_t i = 0; i < n; i++) {
		if (results[i] == 0) {
			put++;
			bytes += lens[i];
		}
	}
	add(&bs->put, put);
	add(&bs->put_bytes, bytes);
	return 0;
}

int kvs_blockstore_tail_put(struct kvs_blockstore *bs,
			    const uint8_t key[KVS_ID_SIZE], const uint8_t *tail,
			    size_t len, uint32_t ttl_ms)
{
	int err = bs->ops->tail_put(bs->ctx, key, tail, len, ttl_ms);

	if (!err) {
		add(&bs->tail_puts, 1);
		add(&bs->tail_put_bytes, len);
	}
	return err;
}

int kvs_blockstore_tail_take(struct kvs_blockstore *bs,
			     const uint8_t key[KVS_ID_SIZE], void *buf,
			     size_t cap, size_t *len)
{
	int err = bs->ops->tail_take(bs->ctx, key, buf, cap, len);

	if (!err) {
		add(&bs->tail_takes, 1);
		add(&bs->tail_take_bytes, *len);
	}
	return err;
}

int kvs_blockstore_remove(struct kvs_blockstore *bs,
			  const struct kvs_store_key *keys, size_t n,
			  int *results)
{
	uint64_t removed = 0;
	int err;

	if (!bs->ops->remove)
		return -EOPNOTSUPP;
	err = bs->ops->remove(bs->ctx, keys, n, results);
	if (err)
		return err;
	for (size_t i = 0; i < n; i++)
		removed += results[i] == 0;
	add(&bs->removed, removed);
	return 0;
}

void kvs_blockstore_counters(const struct kvs_blockstore *cbs,
			     struct kvs_blockstore_counters *out)
{
	/* atomic loads of a const object are reads all the same */
	struct kvs_blockstore *bs = (struct kvs_blockstore *)cbs;

	out->lookups = atomic_load(&bs->lookups);
	out->gets = atomic_load(&bs->gets);
	out->got = atomic_load(&bs->got);
	out->got_bytes = atomic_load(&bs->got_bytes);
	out->get_missed = atomic_load(&bs->get_missed);
	out->puts = atomic_load(&bs->puts);
	out->put = atomic_load(&bs->put);
	out->put_bytes = atomic_load(&bs->put_bytes);
	out->tail_puts = atomic_load(&bs->tail_puts);
	out->tail_put_bytes = atomic_load(&bs->tail_put_bytes);
	out->tail_takes = atomic_load(&bs->tail_takes);
	out->tail_take_bytes = atomic_load(&bs->tail_take_bytes);
	out->removed = atomic_load(&bs->removed);
}

/* ---- the local block store ---------------------------------------------- */

struct local_tail {
	struct local_tail *next;
	uint8_t key[KVS_ID_SIZE];
	uint8_t *obj;
	size_t len;
	uint64_t expires_ns;
};

struct local_bs {
	struct kvs_store *store;
	pthread_mutex_t lock; /* the tail list */
	struct local_tail *tails;
};

static int local_lookup(void *ctx, const uint8_t (*span_ids)[KVS_ID_SIZE],
			size_t n_spans, const uint32_t *layers, size_t n_layers,
			size_t *prefix)
{
	struct local_bs *lb = ctx;

	*prefix = kvs_store_lookup_prefix(lb->store, span_ids, n_spans, layers,
					  n_layers);
	return 0;
}

static int local_get(void *ctx, const struct kvs_store_key *keys, size_t n,
		     void *const *bufs, const size_t *caps, size_t *lens,
		     int *results)
{
	struct local_bs *lb = ctx;
	struct kvs_store_ref **refs;
	size_t i, len;
	int err;

	refs = calloc(n ? n : 1, sizeof(*refs));
	if (!refs)
		return -ENOMEM;
	err = kvs_store_get_batch(lb->store, keys, n, refs, results);
	for (i = 0; i < n; i++) {
		if (err || !refs[i])
			continue;
		len = kvs_store_ref_len(refs[i]);
		lens[i] = len;
		if (len > caps[i])
			results[i] = -ENOSPC;
		else
			memcpy(bufs[i], kvs_store_ref_data(refs[i]), len);
		kvs_store_ref_release(refs[i]);
	}
	free(refs);
	return err;
}

static int local_put(void *ctx, const uint8_t *const *objs, const size_t *lens,
		     size_t n, int *results)
{
	struct local_bs *lb = ctx;

	/* the return value is the first of the per-object outcomes, which
	 * are in @results */
	(void)kvs_store_put_batch(lb->store, objs, lens, n,
				  KVS_DURABILITY_MEMORY, results);
	return 0;
}

/* Drops expired tails; the lock is held. */
static void local_expire(struct local_bs *lb, uint64_t now)
{
	struct local_tail **p = &lb->tails, *t;

	while ((t = *p)) {
		if (t->expires_ns <= now) {
			*p = t->next;
			free(t->obj);
			free(t);
		} else {
			p = &t->next;
		}
	}
}

static int local_tail_put(void *ctx, const uint8_t key[KVS_ID_SIZE],
			  const uint8_t *tail, size_t len, uint32_t ttl_ms)
{
	struct local_bs *lb = ctx;
	struct kvs_header h;
	struct local_tail *t, **p;
	uint64_t now = kvs_now_ns();
	int err;

	if (ttl_ms == 0)
		return -KVS_EPARAM;
	err = kvs_object_verify(tail, len, 0);
	if (!err)
		err = kvs_header_decode(tail, len, 0, &h);
	if (err)
		return err;
	if (h.kind != KVS_KIND_TAIL)
		return -KVS_EKIND;
	t = calloc(1, sizeof(*t));
	if (t)
		t->obj = malloc(len);
	if (!t || !t->obj) {
		free(t);
		return -ENOMEM;
	}
	memcpy(t->key, key, KVS_ID_SIZE);
	memcpy(t->obj, tail, len);
	t->len = len;
	t->expires_ns = now + (uint64_t)ttl_ms * 1000000ull;
	pthread_mutex_lock(&lb->lock);
	local_expire(lb, now);
	/* a later put under the same key replaces the tail */
	for (p = &lb->tails; *p; p = &(*p)->next) {
		if (memcmp((*p)->key, key, KVS_ID_SIZE) == 0) {
			struct local_tail *old = *p;

			*p = old->next;
			free(old->obj);
			free(old);
			break;
		}
	}
	t->next = lb->tails;
	lb->tails = t;
	pthread_mutex_unlock(&lb->lock);
	return 0;
}

static int local_tail_take(void *ctx, const uint8_t key[KVS_ID_SIZE], void *buf,
			   size_t cap, size_t *len)
{
	struct local_bs *lb = ctx;
	struct local_tail **p, *t;
	int err = -KVS_ENOTFOUND;

	pthread_mutex_lock(&lb->lock);
	local_expire(lb, kvs_now_ns());
	for (p = &lb->tails; (t = *p); p = &t->next) {
		if (memcmp(t->key, key, KVS_ID_SIZE) != 0)
			continue;
		*len = t->len;
		if (t->len > cap) {
			err = -ENOSPC;
			break;
		}
		memcpy(buf, t->obj, t->len);
		*p = t->next;
		free(t->obj);
		free(t);
		err = 0;
		break;
	}
	pthread_mutex_unlock(&lb->lock);
	return err;
}

static int local_remove(void *ctx, const struct kvs_store_key *keys, size_t n,
			int *results)
{
	struct local_bs *lb = ctx;

	for (size_t i = 0; i < n; i++)
		results[i] = kvs_store_delete(lb->store, &keys[i]);
	return 0;
}

static void local_destroy(void *ctx)
{
	struct local_bs *lb = ctx;
	struct local_tail *t;

	if (!lb)
		return;
	while ((t = lb->tails)) {
		lb->tails = t->next;
		free(t->obj);
		free(t);
	}
	kvs_store_close(lb->store);
	pthread_mutex_destroy(&lb->lock);
	free(lb);
}

static const struct kvs_blockstore_ops local_ops = {
	.name = "local",
	.lookup = local_lookup,
	.get = local_get,
	.put = local_put,
	.tail_put = local_tail_put,
	.tail_take = local_tail_take,
	.destroy = local_destroy,
	.remove = local_remove,
};

int kvs_blockstore_local(const char *dir, const struct kvs_store_opts *opts,
			 struct kvs_blockstore **out)
{
	struct kvs_store_opts defaults;
	struct local_bs *lb;
	int err;

	if (!dir || !out)
		return -KVS_EPARAM;
	if (!opts) {
		kvs_store_opts_default(&defaults);
		opts = &defaults;
	}
	lb = calloc(1, sizeof(*lb));
	if (!lb) {
		kvs_log(KVS_LOG_ERR, "block store: out of memory");
		return -ENOMEM;
	}
	pthread_mutex_init(&lb->lock, NULL);
	err = kvs_store_open(dir, opts, &lb->store);
	if (err) {
		kvs_log(KVS_LOG_ERR, "block store: cannot open %s: %s", dir,
			kvs_strerror(err));
		pthread_mutex_destroy(&lb->lock);
		free(lb);
		return err;
	}
	err = kvs_blockstore_create(&local_ops, lb, out);
	if (err)
		local_destroy(lb);
	return err;
}

int kvs_blockstore_local_open(const char *dir, uint64_t dram_capacity,
			      uint64_t nvme_capacity, uint64_t segment_size,
			      struct kvs_blockstore **out)
{
	struct kvs_store_opts opts;

	kvs_store_opts_default(&opts);
	if (dram_capacity)
		opts.dram_capacity = dram_capacity;
	if (nvme_capacity)
		opts.nvme_capacity = nvme_capacity;
	if (segment_size)
		opts.segment_size = segment_size;
	opts.write_through = false;
	return kvs_blockstore_local(dir, &opts, out);
}

struct kvs_store *kvs_blockstore_local_store(const struct kvs_blockstore *bs)
{
	if (!bs || bs->ops != &local_ops)
		return NULL;
	return ((const struct local_bs *)bs->ctx)->store;
}
