/*
 * faulty_store.h - a block store that forwards to a real local one and,
 * through the block store interface's ops table, injects what happens
 * between a lookup and a fetch in a shared cache: a block gone (deleted
 * by another client: the store's real delete just before the get, so the
 * get misses in the store itself; a store without delete gets a miss
 * reported instead), a block whose bytes went bad in flight (one byte
 * flipped), another block's bytes served under this key.  The lookup
 * always answers from the real store.  faulty_restore() puts a deleted
 * block back for the next test.
 */
#ifndef KVS_TESTS_FAULTY_STORE_H
#define KVS_TESTS_FAULTY_STORE_H

#include "rt_test.h"

enum fault_kind {
	FAULT_NONE,
	FAULT_LOST, /* (span, layer) deleted before its get */
	FAULT_FLIP, /* one byte of its codes flipped */
	FAULT_SWAP, /* the previous span's object served instead */
};

struct faulty {
	struct kvs_blockstore *inner;
	enum fault_kind kind;
	uint32_t span, layer; /* the span's index in the prompt */
	const uint8_t (*span_ids)[KVS_ID_SIZE]; /* of the prompt */
	unsigned hits;
	uint8_t *saved; /* the deleted block, for faulty_restore */
	size_t saved_len;
};

static int faulty_lookup(void *ctx, const uint8_t (*span_ids)[KVS_ID_SIZE],
			 size_t n_spans, const uint32_t *layers,
			 size_t n_layers, size_t *prefix)
{
	struct faulty *f = ctx;

	return kvs_blockstore_lookup(f->inner, span_ids, n_spans, layers,
				     n_layers, prefix);
}

static bool faulty_target(const struct faulty *f,
			  const struct kvs_store_key *key)
{
	return key->layer == f->layer &&
	       memcmp(key->span_id, f->span_ids[f->span], KVS_ID_SIZE) == 0;
}

/* The real delete of the target among @keys, once; keeps a copy of the
 * block.  True when the store deleted it. */
static bool faulty_delete(struct faulty *f, const struct kvs_store_key *keys,
			  size_t n)
{
	for (size_t i = 0; i < n; i++) {
		size_t cap = 1u << 20, len = 0;
		void *buf;
		int res = -1;

		if (!faulty_target(f, &keys[i]) || f->saved)
			continue;
		buf = malloc(cap);
		assert_non_null(buf);
		assert_int_equal(kvs_blockstore_get(f->inner, &keys[i], 1, &buf,
						    &cap, &len, &res),
				 0);
		if (res != 0) {
			free(buf);
			return false;
		}
		if (kvs_blockstore_remove(f->inner, &keys[i], 1, &res) != 0) {
			free(buf); /* no delete here: a miss is reported */
			return false;
		}
		assert_int_equal(res, 0);
		f->saved = buf;
		f->saved_len = len;
		f->hits++;
		return true;
	}
	return false;
}

static int faulty_get(void *ctx, const struct kvs_store_key *keys, size_t n,
		      void *const *bufs, const size_t *caps, size_t *lens,
		      int *results)
{
	struct faulty *f = ctx;
	bool deleted = f->kind == FAULT_LOST && faulty_delete(f, keys, n);
	int err;

	err = kvs_blockstore_get(f->inner, keys, n, bufs, caps, lens, results);
	if (err || f->kind == FAULT_NONE || deleted)
		return err;
	for (size_t i = 0; i < n; i++) {
		if (!faulty_target(f, &keys[i]) || results[i] != 0)
			continue;
		f->hits++;
		if (f->kind == FAULT_LOST) {
			results[i] = -KVS_ENOTFOUND;
		} else if (f->kind == FAULT_FLIP) {
			/* a byte in the middle of the Key codes */
			((uint8_t *)bufs[i])[KVS_HEADER_SIZE + 100] ^= 0x10;
		} else if (i > 0) {
			memcpy(bufs[i], bufs[i - 1], lens[i - 1]);
			lens[i] = lens[i - 1];
		}
	}
	return 0;
}

/* Puts back the block a FAULT_LOST deleted (a no-op otherwise). */
static inline void faulty_restore(struct faulty *f)
{
	const uint8_t *obj = f->saved;
	int res = -1;

	if (!obj)
		return;
	assert_int_equal(
		kvs_blockstore_put(f->inner, &obj, &f->saved_len, 1, &res), 0);
	assert_int_equal(res, 0);
	free(f->saved);
	f->saved = NULL;
}

static int faulty_put(void *ctx, const uint8_t *const *objs, const size_t *lens,
		      size_t n, int *results)
{
	struct faulty *f = ctx;

	return kvs_blockstore_put(f->inner, objs, lens, n, results);
}

static int faulty_tail_put(void *ctx, const uint8_t key[KVS_ID_SIZE],
			   const uint8_t *tail, size_t len, uint32_t ttl_ms)
{
	struct faulty *f = ctx;

	return kvs_blockstore_tail_put(f->inner, key, tail, len, ttl_ms);
}

static int faulty_tail_take(void *ctx, const uint8_t key[KVS_ID_SIZE],
			    void *buf, size_t cap, size_t *len)
{
	struct faulty *f = ctx;

	return kvs_blockstore_tail_take(f->inner, key, buf, cap, len);
}

static const struct kvs_blockstore_ops faulty_ops = {
	.name = "faulty",
	.lookup = faulty_lookup,
	.get = faulty_get,
	.put = faulty_put,
	.tail_put = faulty_tail_put,
	.tail_take = faulty_tail_take,
	.destroy = NULL, /* the test owns the struct faulty */
};

/* A block store over @f (whose inner store the caller set). */
static inline struct kvs_blockstore *faulty_store(struct faulty *f)
{
	struct kvs_blockstore *bs = NULL;

	assert_int_equal(kvs_blockstore_create(&faulty_ops, f, &bs), 0);
	return bs;
}

#endif
