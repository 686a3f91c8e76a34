/*
 * remote.c - the runtime's block store over a kvstashd: struct
 * kvs_blockstore_ops (runtime.h) in terms of the client library
 * (client.h), so that a decode runtime publishes to, attaches from and
 * hands tails over through a daemon.
 *
 * A call of the runtime may hold more items than the server takes in one
 * request (max_batch items; max_payload bytes for a put), and a get of a
 * layer's blocks more bytes than one reply moves well: it is cut into
 * requests of the server's limits (a get's of about 4 MiB of replies)
 * that are all queued at once (the client keeps at most max_inflight of
 * them on the wire) and then waited for in order, so the transfers of a
 * large get overlap.  With lanes (kvs_blockstore_remote_lanes) a get's
 * requests go round several connections of the same tenant, each with
 * its own progress thread; the waiter checks each reply as it waits.  A request
 * that failed as a whole fails the call; items of the requests that succeeded
 * keep their results.  The block store's 32-byte tail keys are the client's
 * request ids.  Puts are acknowledged at memory durability, as the local block
 * store's.  The client verifies every object it hands out, so the runtime does
 * not checksum them again.  An unreachable daemon (down, restarting) makes
 * lookups and gets misses at once, so the runtime recomputes, and puts fail
 * with -KVS_ECONN, with one line in the log for the outage; the client makes
 * the connection again in the background meanwhile (kvs_client_fail_fast).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "kvstash/client.h"
#include "kvstash/log.h"
#include "kvstash/runtime.h"

struct remote_bs {
	struct kvs_client *client; /* lane[0] */
	struct kvs_client *lane[KVS_BLOCKSTORE_LANES_MAX];
	unsigned lanes;
	bool down; /* the last call found the daemon unreachable (atomic) */
	char address[256]; /* the daemon's, for the log */
};

/* Whether @err says that the daemon is unreachable (logged once for the
 * outage); a success marks it reachable again. */
static bool unreachable(struct remote_bs *rb, int err)
{
	bool down = err == -KVS_ECONN || err == -KVS_ETIMEDOUT;

	if (err && !down)
		return false;
	if (__atomic_exchange_n(&rb->down, down, __ATOMIC_RELAXED) == down)
		return down;
	if (down)
		kvs_log(KVS_LOG_WARN,
			"block store: kvstashd %s unreachable (%s): lookups "
			"and gets are misses, puts fail, until it answers",
			rb->address, kvs_strerror(err));
	else
		kvs_log(KVS_LOG_INFO, "block store: kvstashd %s answers again",
			rb->address);
	return down;
}

/* Bytes of replies one get request asks for, at most: a layer's blocks
 * go as several requests in flight at once rather than one reply of
 * them all, so the server answers the first while it reads the next and
 * the transfers of several replies overlap. */
#define REMOTE_GET_BYTES (4u << 20)

/* Items per request of a get (@caps given) or a delete of @n items; a
 * get's requests as many as a multiple of the @lanes they go over. */
static size_t chunk_of(const struct kvs_client *c, size_t n, const size_t *caps,
		       unsigned lanes)
{
	struct kvs_client_limits lim;
	size_t step, k;

	kvs_client_limits(c, &lim);
	step = lim.max_batch < n ? lim.max_batch : n;
	if (caps && caps[0] && step * caps[0] > REMOTE_GET_BYTES)
		step = caps[0] < REMOTE_GET_BYTES ? REMOTE_GET_BYTES / caps[0]
						  : 1;
	k = (n + step - 1) / step;
	k = (k + lanes - 1) / lanes * lanes;
	return (n + k - 1) / k;
}

/* Waits for every queued request; returns the first failure. */
static int wait_all(struct kvs_client_req **reqs, size_t n, int err)
{
	for (size_t i = 0; i < n; i++) {
		int r = kvs_client_wait(reqs[i]);

		if (r && !err)
			err = r;
	}
	return err;
}

static int remote_lookup(void *ctx, const uint8_t (*span_ids)[KVS_ID_SIZE],
			 size_t n_spans, const uint32_t *layers,
			 size_t n_layers, size_t *prefix)
{
	struct remote_bs *rb = ctx;
	int err;

	if (n_spans == 0 || n_layers == 0) {
		*prefix = 0;
		return 0;
	}
	err = kvs_client_lookup(rb->client, span_ids, n_spans, layers, n_layers,
				prefix);
	if (!unreachable(rb, err))
		return err;
	*prefix = 0;
	return 0;
}

/* A get (@bufs given) or a delete (@bufs NULL) of @n keys, in requests
 * of the server's batch limit, all queued before the first is waited
 * for; a get's requests go round the lanes. */
static int keyed_batches(struct remote_bs *rb, const struct kvs_store_key *keys,
			 size_t n, void *const *bufs, const size_t *caps,
			 size_t *lens, int *results)
{
	unsigned lanes = bufs ? rb->lanes : 1;
	size_t step = chunk_of(rb->client, n, caps, lanes), queued = 0, i;
	struct kvs_client_req **reqs;
	int err = 0;

	if (n == 0)
		return 0;
	reqs = calloc((n + step - 1) / step, sizeof(*reqs));
	if (!reqs)
		return -ENOMEM;
	for (i = 0; i < n && !err; i += step) {
		size_t m = n - i < step ? n - i : step;

		if (bufs)
			err = kvs_client_get_async(
				rb->lane[queued % lanes], keys + i, m, bufs + i,
				caps + i, lens + i, results + i, NULL, NULL,
				&reqs[queued]);
		else
			err = kvs_client_delete_async(rb->client, keys + i, m,
						      results + i, NULL, NULL,
						      &reqs[queued]);
		if (!err)
			queued++;
	}
	err = wait_all(reqs, queued, err);
	free(reqs);
	return err;
}

static int remote_get(void *ctx, const struct kvs_store_key *keys, size_t n,
		      void *const *bufs, const size_t *caps, size_t *lens,
		      int *results)
{
	int err = keyed_batches(ctx, keys, n, bufs, caps, lens, results);

	if (!unreachable(ctx, err))
		return err;
	for (size_t i = 0; i < n; i++)
		results[i] = -KVS_ENOTFOUND;
	return 0;
}

/* The next put request: items [from, *to) within the server's limits. */
static size_t put_span(const struct kvs_client_limits *lim, const size_t *lens,
		       size_t from, size_t n)
{
	uint64_t bytes = 0;
	size_t to = from;

	while (to < n && to - from < lim->max_batch &&
	       (to == from || bytes + lens[to] <= lim->max_payload))
		bytes += lens[to++];
	return to;
}

static int remote_put(void *ctx, const uint8_t *const *objs, const size_t *lens,
		      size_t n, int *results)
{
	struct remote_bs *rb = ctx;
	struct kvs_client_limits lim;
	struct kvs_client_req **reqs;
	size_t queued = 0, i, to;
	int err = 0;

	if (n == 0)
		return 0;
	kvs_client_limits(rb->client, &lim);
	reqs = calloc(n, sizeof(*reqs));
	if (!reqs)
		return -ENOMEM;
	for (i = 0; i < n && !err; i = to) {
		to = put_span(&lim, lens, i, n);
		err = kvs_client_put_async(rb->client, objs + i, lens + i,
					   to - i, KVS_DURABILITY_MEMORY,
					   results + i, NULL, NULL,
					   &reqs[queued]);
		if (err == -KVS_ETOOBIG) {
			/* one object over the server's limit: refused alone,
			 * the others still go */
			results[i] = err;
			to = i + 1;
			err = 0;
			continue;
		}
		if (!err)
			queued++;
	}
	err = wait_all(reqs, queued, err);
	free(reqs);
	(void)unreachable(rb, err);
	return err;
}

static int remote_remove(void *ctx, const struct kvs_store_key *keys, size_t n,
			 int *results)
{
	return keyed_batches(ctx, keys, n, NULL, NULL, NULL, results);
}

static int remote_tail_put(void *ctx, const uint8_t key[KVS_ID_SIZE],
			   const uint8_t *tail, size_t len, uint32_t ttl_ms)
{
	struct remote_bs *rb = ctx;

	return kvs_client_tail_put(rb->client, key, tail, len, ttl_ms);
}

static int remote_tail_take(void *ctx, const uint8_t key[KVS_ID_SIZE],
			    void *buf, size_t cap, size_t *len)
{
	struct remote_bs *rb = ctx;

	return kvs_client_tail_take(rb->client, key, buf, cap, len);
}

static void remote_destroy(void *ctx)
{
	struct remote_bs *rb = ctx;

	if (!rb)
		return;
	for (unsigned i = rb->lanes; i-- > 0;)
		kvs_client_close(rb->lane[i]);
	free(rb);
}

/* @client's server, as kvs_client_nodes names it ("" if it cannot). */
static void address_of(struct kvs_client *client, char *out, size_t size)
{
	struct kvs_client_node *nodes = NULL;
	size_t n = 0;

	out[0] = '\0';
	if (kvs_client_nodes(client, false, &nodes, &n) == 0 && n)
		snprintf(out, size, "%s",
			 n == 1 ? nodes[0].address : "cluster");
	free(nodes);
}

static const struct kvs_blockstore_ops remote_ops = {
	.name = "remote",
	.lookup = remote_lookup,
	.get = remote_get,
	.put = remote_put,
	.tail_put = remote_tail_put,
	.tail_take = remote_tail_take,
	.destroy = remote_destroy,
	.remove = remote_remove,
	.verified = true, /* the client verifies what it receives */
};

_Static_assert(KVS_CLIENT_REQUEST_ID == KVS_ID_SIZE,
	       "tail keys are request ids");

int kvs_blockstore_remote_lanes(struct kvs_client *client, unsigned lanes,
				struct kvs_blockstore **out)
{
	struct remote_bs *rb;
	int err = 0;

	if (!client || !out || lanes == 0 || lanes > KVS_BLOCKSTORE_LANES_MAX)
		return -KVS_EPARAM;
	rb = calloc(1, sizeof(*rb));
	if (!rb) {
		kvs_log(KVS_LOG_ERR, "block store: out of memory");
		return -ENOMEM;
	}
	rb->client = rb->lane[0] = client;
	for (rb->lanes = 1; rb->lanes < lanes && !err; rb->lanes++) {
		err = kvs_client_dup(client, &rb->lane[rb->lanes]);
		if (err) {
			kvs_log(KVS_LOG_ERR,
				"block store: connection %u of %u: %s",
				rb->lanes + 1, lanes, kvs_strerror(err));
			break;
		}
	}
	for (unsigned i = 0; !err && i < rb->lanes; i++)
		kvs_client_fail_fast(rb->lane[i]);
	if (!err)
		address_of(client, rb->address, sizeof(rb->address));
	if (!err)
		err = kvs_blockstore_create(&remote_ops, rb, out);
	if (err) {
		/* the client stays the caller's */
		while (rb->lanes-- > 1)
			kvs_client_close(rb->lane[rb->lanes]);
		free(rb);
	}
	return err;
}

int kvs_blockstore_remote(struct kvs_client *client,
			  struct kvs_blockstore **out)
{
	return kvs_blockstore_remote_lanes(client, 1, out);
}

struct kvs_client *kvs_blockstore_remote_client(const struct kvs_blockstore *bs)
{
	if (!bs || kvs_blockstore_ops(bs) != &remote_ops)
		return NULL;
	return ((const struct remote_bs *)kvs_blockstore_ctx(bs))->client;
}
