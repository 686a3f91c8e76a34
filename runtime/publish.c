/*
 * publish.c - sealed spans to the block store, on the publish thread.
 *
 * kvs_seq_publish() picks, on the caller's thread, every span sealed here
 * whose token ids are known and whose key (span id, layer) the runtime
 * has not queued before (a set of keys, deduplicating across sequences),
 * takes a reference on each page so it outlives the sequence if need be,
 * and marks the step stream.  The thread waits for the mark (the seals
 * are done), asks the store which leading spans it already holds for
 * every layer (those are skipped), copies each page into a host image,
 * writes its header (kvs_block_finish: ident, checksums) and puts them in
 * one call.  A key whose put failed leaves the set, so a later publish
 * may try again.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kvstash/log.h"
#include "runtime_internal.h"

/* ---- the set of published keys ---------------------------------------------
 */

struct rt_key_set {
	struct kvs_store_key *slot; /* layer UINT32_MAX: empty */
	uint8_t *used; /* 0 empty, 1 live, 2 deleted */
	size_t cap, live, filled;
};

#define KEY_EMPTY 0
#define KEY_LIVE 1
#define KEY_GONE 2

struct rt_key_set *rt_key_set_create(void)
{
	struct rt_key_set *set = calloc(1, sizeof(*set));

	if (!set)
		return NULL;
	set->cap = 1024;
	set->slot = malloc(sizeof(*set->slot) * set->cap);
	set->used = calloc(set->cap, 1);
	if (!set->slot || !set->used) {
		rt_key_set_destroy(set);
		return NULL;
	}
	return set;
}

void rt_key_set_destroy(struct rt_key_set *set)
{
	if (!set)
		return;
	free(set->slot);
	free(set->used);
	free(set);
}

/* Span ids are SHA-256 digests: their first bytes are already uniform. */
static size_t key_hash(const struct kvs_store_key *key, size_t cap)
{
	uint64_t h;

	memcpy(&h, key->span_id, sizeof(h));
	return (size_t)((h ^ (uint64_t)key->layer * 0x9E3779B97F4A7C15ull) &
			(cap - 1));
}

static size_t key_find(const struct rt_key_set *set,
		       const struct kvs_store_key *key, bool *found)
{
	size_t i = key_hash(key, set->cap), first_gone = SIZE_MAX;

	for (;; i = (i + 1) & (set->cap - 1)) {
		if (set->used[i] == KEY_EMPTY) {
			*found = false;
			return first_gone != SIZE_MAX ? first_gone : i;
		}
		if (set->used[i] == KEY_GONE) {
			if (first_gone == SIZE_MAX)
				first_gone = i;
			continue;
		}
		if (set->slot[i].layer == key->layer &&
		    memcmp(set->slot[i].span_id, key->span_id, KVS_ID_SIZE) ==
			    0) {
			*found = true;
			return i;
		}
	}
}

static int key_grow(struct rt_key_set *set)
{
	struct rt_key_set bigger = { 0 };
	bool found;
	size_t i, at;

	bigger.cap = set->cap * 2;
	bigger.slot = malloc(sizeof(*bigger.slot) * bigger.cap);
	bigger.used = calloc(bigger.cap, 1);
	if (!bigger.slot || !bigger.used) {
		free(bigger.slot);
		free(bigger.used);
		return -ENOMEM;
	}
	for (i = 0; i < set->cap; i++) {
		if (set->used[i] != KEY_LIVE)
			continue;
		at = key_find(&bigger, &set->slot[i], &found);
		bigger.slot[at] = set->slot[i];
		bigger.used[at] = KEY_LIVE;
		bigger.live++;
		bigger.filled++;
	}
	free(set->slot);
	free(set->used);
	*set = bigger;
	return 0;
}

/* 1 if added, 0 if it was there, or -ENOMEM. */
static int key_add(struct rt_key_set *set, const struct kvs_store_key *key)
{
	bool found;
	size_t at;

	if ((set->filled + 1) * 2 > set->cap && key_grow(set))
		return -ENOMEM;
	at = key_find(set, key, &found);
	if (found)
		return 0;
	if (set->used[at] == KEY_EMPTY)
		set->filled++;
	set->slot[at] = *key;
	set->used[at] = KEY_LIVE;
	set->live++;
	return 1;
}

static void key_remove(struct rt_key_set *set, const struct kvs_store_key *key)
{
	bool found;
	size_t at = key_find(set, key, &found);

	if (found) {
		set->used[at] = KEY_GONE;
		set->live--;
	}
}

/* ---- publish jobs
 * ------------------------------------------------------------- */

struct publish_item {
	int32_t page;
	uint32_t index; /* span */
	struct kvs_ident ident;
};

struct rt_publish {
	struct rt_job job;
	void *mark;
	uint32_t spans; /* span ids [0, spans) for the store's lookup */
	uint8_t (*span_ids)[KVS_ID_SIZE];
	uint32_t n;
	struct publish_item *items;
};

static void publish_free(struct kvs_rt *rt, struct rt_publish *p)
{
	uint32_t i;

	for (i = 0; i < p->n; i++)
		rt_pool_put(rt, p->items[i].page);
	if (p->mark)
		rt->eng->mark_free(rt, p->mark);
	free(p->items);
	free(p->span_ids);
	free(p);
}

static void publish_failed(struct kvs_rt *rt, const struct publish_item *it,
			   int err)
{
	struct kvs_store_key key;

	memcpy(key.span_id, it->ident.block_id, KVS_ID_SIZE);
	key.layer = it->ident.layer;
	pthread_mutex_lock(&rt->lock);
	key_remove(rt->published, &key);
	rt->stats.publish_failed++;
	if (!rt->publish_error)
		rt->publish_error = err;
	pthread_mutex_unlock(&rt->lock);
}

/* Which leading spans the store holds for every layer already. */
static size_t held_prefix(struct kvs_rt *rt, const struct rt_publish *p)
{
	uint32_t *layers = malloc(sizeof(*layers) * rt->cfg.layers), l;
	size_t prefix = 0;

	if (!layers)
		return 0;
	for (l = 0; l < rt->cfg.layers; l++)
		layers[l] = l;
	if (kvs_blockstore_lookup(rt->store,
				  (const uint8_t(*)[KVS_ID_SIZE])p->span_ids,
				  p->spans, layers, rt->cfg.layers, &prefix))
		prefix = 0;
	free(layers);
	return prefix;
}

static void publish_run(struct kvs_rt *rt, struct rt_job *job)
{
	struct rt_publish *p = (struct rt_publish *)job;
	size_t size = rt->layout.total_size, prefix, *lens = NULL;
	const uint8_t **objs = NULL;
	struct publish_item **sent = NULL;
	uint8_t *images = NULL;
	int *results = NULL, err;
	uint32_t i, m = 0, skipped = 0, published = 0;

	err = rt->eng->mark_wait(rt, p->mark);
	if (err)
		goto fail_all;
	prefix = held_prefix(rt, p);
	err = -ENOMEM;
	images = calloc(p->n, size);
	objs = malloc(sizeof(*objs) * p->n);
	lens = malloc(sizeof(*lens) * p->n);
	results = malloc(sizeof(*results) * p->n);
	sent = malloc(sizeof(*sent) * p->n);
	if (!images || !objs || !lens || !results || !sent)
		goto fail_all;
	for (i = 0; i < p->n; i++) {
		struct publish_item *it = &p->items[i];
		uint8_t *image = images + (size_t)m * size;

		if (it->index < prefix) {
			skipped++;
			continue;
		}
		err = rt->eng->page_read(rt, it->page, image);
		if (!err)
			err = kvs_block_finish(&rt->cfg.shape, &it->ident,
					       image);
		if (err) {
			publish_failed(rt, it, err);
			continue;
		}
		objs[m] = image;
		lens[m] = size;
		results[m] = 0;
		sent[m++] = it;
	}
	err = m ? kvs_blockstore_put(rt->store, objs, lens, m, results) : 0;
	for (i = 0; i < m; i++) {
		int r = err ? err : results[i];

		if (r) {
			if (r != -KVS_ECONN) /* the block store logs outages */
				kvs_log(KVS_LOG_WARN, "publish: put failed: %s",
					kvs_strerror(r));
			publish_failed(rt, sent[i], r);
		} else {
			published++;
		}
	}
	rt_count(rt, &rt->stats.published, published);
	rt_count(rt, &rt->stats.publish_skipped, skipped);
	goto out;

fail_all:
	for (i = 0; i < p->n; i++)
		publish_failed(rt, &p->items[i], err);
out:
	free(images);
	free(objs);
	free(lens);
	free(results);
	free(sent);
	publish_free(rt, p);
}

int kvs_seq_publish(struct kvs_seq *seq)
{
	struct kvs_rt *rt;
	struct rt_publish *p;
	struct kvs_store_key key;
	uint32_t known, l, i, spans = 0, skipped = 0, cap;
	int err = -ENOMEM, added;

	if (!seq)
		return -KVS_EPARAM;
	rt = seq->batch->rt;
	if (!rt->store)
		return 0;
	known = rt_seq_span_ids(seq);
	p = calloc(1, sizeof(*p));
	if (!p)
		goto fail;
	cap = 0;
	for (l = 0; l < rt->cfg.layers; l++) {
		uint32_t blocks = kvs_seq_block_count(seq, l);

		cap += blocks < known ? blocks : known;
	}
	p->items = malloc(sizeof(*p->items) * (cap ? cap : 1));
	if (!p->items)
		goto fail_items;
	for (l = 0; l < rt->cfg.layers; l++) {
		struct rt_layer *ly = &seq->layer[l];
		uint32_t blocks = kvs_seq_block_count(seq, l);

		for (i = 0; i < blocks && i < known; i++) {
			if (ly->origin[i] != RT_PAGE_SEALED)
				continue;
			memcpy(key.span_id, seq->span_ids[i], KVS_ID_SIZE);
			key.layer = l;
			pthread_mutex_lock(&rt->lock);
			added = key_add(rt->published, &key);
			pthread_mutex_unlock(&rt->lock);
			if (added < 0)
				goto fail_items;
			ly->origin[i] = RT_PAGE_STORE;
			if (!added) {
				skipped++;
				continue;
			}
			rt_pool_ref(rt, ly->pages[i]);
			p->items[p->n].page = ly->pages[i];
			p->items[p->n].index = i;
			rt_seq_ident(seq, l, i, &p->items[p->n].ident);
			p->n++;
			if (i + 1 > spans)
				spans = i + 1;
		}
	}
	if (skipped)
		rt_count(rt, &rt->stats.publish_skipped, skipped);
	if (p->n == 0) {
		publish_free(rt, p);
		return 0;
	}
	p->spans = spans;
	p->span_ids = malloc(sizeof(*p->span_ids) * spans);
	if (!p->span_ids)
		goto fail_items;
	memcpy(p->span_ids, seq->span_ids, sizeof(*p->span_ids) * spans);
	err = rt->eng->mark(rt, false, &p->mark);
	if (err)
		goto fail_items;
	p->job.run = publish_run;
	rt_worker_queue(rt, &rt->publisher, &p->job);
	return 0;

fail_items:
	/* the keys queued so far go back, as if their put had failed */
	for (i = 0; i < p->n; i++) {
		memcpy(key.span_id, p->items[i].ident.block_id, KVS_ID_SIZE);
		key.layer = p->items[i].ident.layer;
		pthread_mutex_lock(&rt->lock);
		key_remove(rt->published, &key);
		pthread_mutex_unlock(&rt->lock);
		seq->layer[key.layer].origin[p->items[i].index] =
			RT_PAGE_SEALED;
	}
	publish_free(rt, p);
fail:
	if (err == -ENOMEM)
		kvs_log(KVS_LOG_ERR, "publish: out of memory");
	return err;
}
