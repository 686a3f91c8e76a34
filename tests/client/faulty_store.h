/*
 * faulty_store.h - a block store that forwards to a real local one and,
 * through the block store interface's ops table, injects what happens
 * between a lookup and a fetch in a shared cache: a block gone (evicted
 * or deleted by another client: the get misses), a block whose bytes
 * went bad in flight (one byte flipped), another block's bytes served
 * under this key.  The lookup always answers from the real store.
 */
#ifndef KVS_TESTS_FAULTY_STORE_H
#define KVS_TESTS_FAULTY_STORE_H

#include "rt_test.h"

enum fault_kind {
	FAULT_NONE,
	FAULT_LOST, /* the get of (span, layer) misses */
	FAULT_FLIP, /* one byte of its codes flipped */
	FAULT_SWAP, /* the previous span's object served instead */
};

struct faulty {
	struct kvs_blockstore *inner;
	enum fault_kind kind;
	uint32_t span, layer; /* the span's index in the prompt */
	const uint8_t (*span_ids)[KVS_ID_SIZE]; /* of the prompt */
	unsigned hits;
};

static int faulty_lookup(void *ctx, const uint8_t (*span_ids)[KVS_ID_SIZE],
			 size_t n_spans, const uint32_t *layers,
			 size_t n_layers, size_t *prefix)
{
	struct faulty *f = ctx;

	return kvs_blockstore_ops(f->inner)->lookup(
		kvs_blockstore_ctx(f->inner), span_ids, n_spans, layers,
		n_layers, prefix);
}

static int faulty_get(void *ctx, const struct kvs_store_key *keys, size_t n,
		      void *const *bufs, const size_t *caps, size_t *lens,
		      int *results)
{
	struct faulty *f = ctx;
	const struct kvs_blockstore_ops *ops = kvs_blockstore_ops(f->inner);
	int err;

	err = ops->get(kvs_blockstore_ctx(f->inner), keys, n, bufs, caps, lens,
		       results);
	if (err || f->kind == FAULT_NONE)
		return err;
	for (size_t i = 0; i < n; i++) {
		if (keys[i].layer != f->layer ||
		    memcmp(keys[i].span_id, f->span_ids[f->span],
			   KVS_ID_SIZE) != 0 ||
		    results[i] != 0)
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

static int faulty_put(void *ctx, const uint8_t *const *objs, const size_t *lens,
		      size_t n, int *results)
{
	struct faulty *f = ctx;

	return kvs_blockstore_ops(f->inner)->put(kvs_blockstore_ctx(f->inner),
						 objs, lens, n, results);
}

static int faulty_tail_put(void *ctx, const uint8_t key[KVS_ID_SIZE],
			   const uint8_t *tail, size_t len, uint32_t ttl_ms)
{
	struct faulty *f = ctx;

	return kvs_blockstore_ops(f->inner)->tail_put(
		kvs_blockstore_ctx(f->inner), key, tail, len, ttl_ms);
}

static int faulty_tail_take(void *ctx, const uint8_t key[KVS_ID_SIZE],
			    void *buf, size_t cap, size_t *len)
{
	struct faulty *f = ctx;

	return kvs_blockstore_ops(f->inner)->tail_take(
		kvs_blockstore_ctx(f->inner), key, buf, cap, len);
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
