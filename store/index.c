/*
 * index.c - hash table from (span id, layer) to entry, chained, grown by
 * doubling at load factor 1.  The hash is xxh3 of the whole key: span ids
 * are SHA-256 digests, but nothing here relies on callers' ids being
 * uniform.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "index.h"

static uint64_t key_hash(const struct kvs_store_key *key)
{
	return XXH3_64bits_withSeed(key->span_id, KVS_ID_SIZE, key->layer);
}

int index_init(struct index *ix)
{
	ix->count = 0;
	ix->bucket = calloc(1024, sizeof(*ix->bucket));
	/* an empty table (no buckets) when there is no memory: walking it
	 * (a failed open's cleanup) finds nothing */
	ix->nbuckets = ix->bucket ? 1024 : 0;
	return ix->bucket ? 0 : -ENOMEM;
}

void index_fini(struct index *ix)
{
	free(ix->bucket);
	ix->bucket = NULL;
}

struct entry *index_find(struct index *ix, const struct kvs_store_key *key)
{
	uint64_t h = key_hash(key);
	struct entry *e = ix->bucket[h & (ix->nbuckets - 1)];

	for (; e; e = e->hnext)
		if (e->hash == h && memcmp(&e->key, key, sizeof(*key)) == 0)
			return e;
	return NULL;
}

static void grow(struct index *ix)
{
	size_t n = ix->nbuckets * 2;
	struct entry **b = calloc(n, sizeof(*b));

	if (!b)
		return; /* keep the longer chains */
	for (size_t i = 0; i < ix->nbuckets; i++) {
		struct entry *e = ix->bucket[i], *next;

		for (; e; e = next) {
			next = e->hnext;
			e->hnext = b[e->hash & (n - 1)];
			b[e->hash & (n - 1)] = e;
		}
	}
	free(ix->bucket);
	ix->bucket = b;
	ix->nbuckets = n;
}

int index_insert(struct index *ix, const struct kvs_store_key *key,
		 struct entry **out)
{
	struct entry *e = calloc(1, sizeof(*e));
	size_t b;

	if (!e)
		return -ENOMEM;
	if (ix->count >= ix->nbuckets)
		grow(ix);
	e->key = *key;
	e->hash = key_hash(key);
	e->cls = -1;
	list_init(&e->dlink);
	list_init(&e->nlink);
	list_init(&e->tlink);
	b = e->hash & (ix->nbuckets - 1);
	e->hnext = ix->bucket[b];
	ix->bucket[b] = e;
	e->in_index = true;
	ix->count++;
	*out = e;
	return 0;
}

void index_remove(struct index *ix, struct entry *e)
{
	struct entry **p = &ix->bucket[e->hash & (ix->nbuckets - 1)];

	for (; *p; p = &(*p)->hnext) {
		if (*p == e) {
			*p = e->hnext;
			e->hnext = NULL;
			e->in_index = false;
			ix->count--;
			return;
		}
	}
}

void index_each(struct index *ix, void (*fn)(void *arg, struct entry *e),
		void *arg)
{
	for (size_t i = 0; i < ix->nbuckets; i++) {
		struct entry *e = ix->bucket[i], *next;

		for (; e; e = next) {
			next = e->hnext;
			fn(arg, e);
		}
	}
}
