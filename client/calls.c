/*
 * calls.c - the calls of include/kvstash/client.h: each checks its
 * arguments against the client's limits, describes itself as a struct
 * client_call and hands that to the client's ops (client_internal.h),
 * one daemon's (direct.c) or a cluster's (route.c); the synchronous forms
 * wait for the asynchronous ones.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "client_internal.h"
#include "kvstash/error.h"

static int check_call(struct kvs_client *c, size_t n, kvs_client_cb cb,
		      struct kvs_client_req **req_out)
{
	if (!c || (cb == NULL) == (req_out == NULL))
		return -KVS_EPARAM;
	if (n == 0)
		return -KVS_EPARAM;
	if (n > c->conn.limits.max_batch)
		return -KVS_EBATCH;
	return 0;
}

int kvs_client_lookup_async(struct kvs_client *c,
			    const uint8_t (*span_ids)[KVS_ID_SIZE],
			    size_t n_spans, const uint32_t *layers,
			    size_t n_layers, size_t *prefix, kvs_client_cb cb,
			    void *arg, struct kvs_client_req **req_out)
{
	struct client_call call = { .kind = CALL_LOOKUP,
				    .spans = span_ids,
				    .n_spans = n_spans,
				    .layers = layers,
				    .n_layers = n_layers,
				    .prefix = prefix };

	if (!c || (cb == NULL) == (req_out == NULL) || n_spans == 0 ||
	    n_spans > KVS_PROTO_CHAIN_MAX || n_layers == 0 ||
	    n_layers > KVS_PROTO_LAYERS_MAX)
		return -KVS_EPARAM;
	return c->ops->submit(c, &call, cb, arg, req_out);
}

int kvs_client_exists_async(struct kvs_client *c,
			    const struct kvs_store_key *keys, size_t n,
			    bool *present, kvs_client_cb cb, void *arg,
			    struct kvs_client_req **req_out)
{
	struct client_call call = {
		.kind = CALL_EXISTS, .keys = keys, .n = n, .present = present
	};
	int err = check_call(c, n, cb, req_out);

	return err ? err : c->ops->submit(c, &call, cb, arg, req_out);
}

int kvs_client_get_async(struct kvs_client *c, const struct kvs_store_key *keys,
			 size_t n, void *const *bufs, const size_t *caps,
			 size_t *lens, int *results, kvs_client_cb cb,
			 void *arg, struct kvs_client_req **req_out)
{
	struct client_call call = { .kind = CALL_GET,
				    .keys = keys,
				    .n = n,
				    .bufs = bufs,
				    .caps = caps,
				    .lens = lens,
				    .results = results };
	int err = check_call(c, n, cb, req_out);

	return err ? err : c->ops->submit(c, &call, cb, arg, req_out);
}

int kvs_client_delete_async(struct kvs_client *c,
			    const struct kvs_store_key *keys, size_t n,
			    int *results, kvs_client_cb cb, void *arg,
			    struct kvs_client_req **req_out)
{
	struct client_call call = {
		.kind = CALL_DELETE, .keys = keys, .n = n, .results = results
	};
	int err = check_call(c, n, cb, req_out);

	return err ? err : c->ops->submit(c, &call, cb, arg, req_out);
}

/* A put of @replicas copies (0: a cluster client's own count). */
static int put_copies(struct kvs_client *c, const uint8_t *const *objs,
		      const size_t *lens, size_t n,
		      enum kvs_durability durability, unsigned replicas,
		      int *results, kvs_client_cb cb, void *arg,
		      struct kvs_client_req **req_out)
{
	struct client_call call = { .kind = CALL_PUT,
				    .objs = objs,
				    .obj_lens = lens,
				    .n = n,
				    .durability = durability,
				    .replicas = replicas,
				    .results = results };
	int err = check_call(c, n, cb, req_out);

	if (err)
		return err;
	if (replicas > KVS_CLIENT_REPLICAS_MAX)
		return -KVS_EPARAM;
	for (size_t i = 0; i < n; i++) {
		if (lens[i] < KVS_HEADER_SIZE || lens[i] > UINT32_MAX)
			return -KVS_EPARAM;
		if (lens[i] > c->conn.limits.max_object)
			return -KVS_ETOOBIG;
	}
	return c->ops->submit(c, &call, cb, arg, req_out);
}

int kvs_client_put_replicas_async(struct kvs_client *c,
				  const uint8_t *const *objs,
				  const size_t *lens, size_t n,
				  enum kvs_durability durability,
				  unsigned replicas, int *results,
				  kvs_client_cb cb, void *arg,
				  struct kvs_client_req **req_out)
{
	if (replicas == 0)
		return -KVS_EPARAM;
	return put_copies(c, objs, lens, n, durability, replicas, results, cb,
			  arg, req_out);
}

int kvs_client_put_async(struct kvs_client *c, const uint8_t *const *objs,
			 const size_t *lens, size_t n,
			 enum kvs_durability durability, int *results,
			 kvs_client_cb cb, void *arg,
			 struct kvs_client_req **req_out)
{
	return put_copies(c, objs, lens, n, durability, 0, results, cb, arg,
			  req_out);
}

int kvs_client_tail_put_async(struct kvs_client *c,
			      const uint8_t request_id[KVS_CLIENT_REQUEST_ID],
			      const uint8_t *tail, size_t len, uint32_t ttl_ms,
			      kvs_client_cb cb, void *arg,
			      struct kvs_client_req **req_out)
{
	struct client_call call = { .kind = CALL_TAIL_PUT,
				    .n = 1,
				    .request_id = request_id,
				    .tail = tail,
				    .tail_len = len,
				    .ttl_ms = ttl_ms };
	int err = check_call(c, 1, cb, req_out);

	if (err)
		return err;
	if (len > c->conn.limits.max_object)
		return -KVS_ETOOBIG;
	if (len < KVS_HEADER_SIZE || ttl_ms == 0)
		return -KVS_EPARAM;
	return c->ops->submit(c, &call, cb, arg, req_out);
}

int kvs_client_tail_take_async(struct kvs_client *c,
			       const uint8_t request_id[KVS_CLIENT_REQUEST_ID],
			       void *buf, size_t cap, size_t *len,
			       kvs_client_cb cb, void *arg,
			       struct kvs_client_req **req_out)
{
	struct client_call call = { .kind = CALL_TAIL_TAKE,
				    .n = 1,
				    .request_id = request_id,
				    .tail_buf = buf,
				    .tail_cap = cap,
				    .tail_out = len };
	int err = check_call(c, 1, cb, req_out);

	return err ? err : c->ops->submit(c, &call, cb, arg, req_out);
}

/* ---- synchronous forms ----------------------------------------------- */

/* The outcome of an asynchronous call made with a handle: its error, or
 * what the handle finishes with. */
static int finish(int err, struct kvs_client_req **req)
{
	return err ? err : kvs_client_wait(*req);
}

int kvs_client_lookup(struct kvs_client *c,
		      const uint8_t (*span_ids)[KVS_ID_SIZE], size_t n_spans,
		      const uint32_t *layers, size_t n_layers, size_t *prefix)
{
	struct kvs_client_req *req;

	return finish(kvs_client_lookup_async(c, span_ids, n_spans, layers,
					      n_layers, prefix, NULL, NULL,
					      &req),
		      &req);
}

int kvs_client_exists(struct kvs_client *c, const struct kvs_store_key *keys,
		      size_t n, bool *present)
{
	struct kvs_client_req *req;

	return finish(
		kvs_client_exists_async(c, keys, n, present, NULL, NULL, &req),
		&req);
}

int kvs_client_get(struct kvs_client *c, const struct kvs_store_key *keys,
		   size_t n, void *const *bufs, const size_t *caps,
		   size_t *lens, int *results)
{
	struct kvs_client_req *req;

	return finish(kvs_client_get_async(c, keys, n, bufs, caps, lens,
					   results, NULL, NULL, &req),
		      &req);
}

int kvs_client_put(struct kvs_client *c, const uint8_t *const *objs,
		   const size_t *lens, size_t n, enum kvs_durability durability,
		   int *results)
{
	struct kvs_client_req *req;

	return finish(kvs_client_put_async(c, objs, lens, n, durability,
					   results, NULL, NULL, &req),
		      &req);
}

int kvs_client_put_replicas(struct kvs_client *c, const uint8_t *const *objs,
			    const size_t *lens, size_t n,
			    enum kvs_durability durability, unsigned replicas,
			    int *results)
{
	struct kvs_client_req *req;

	return finish(kvs_client_put_replicas_async(c, objs, lens, n,
						    durability, replicas,
						    results, NULL, NULL, &req),
		      &req);
}

int kvs_client_delete(struct kvs_client *c, const struct kvs_store_key *keys,
		      size_t n, int *results)
{
	struct kvs_client_req *req;

	return finish(
		kvs_client_delete_async(c, keys, n, results, NULL, NULL, &req),
		&req);
}

int kvs_client_tail_put(struct kvs_client *c,
			const uint8_t request_id[KVS_CLIENT_REQUEST_ID],
			const uint8_t *tail, size_t len, uint32_t ttl_ms)
{
	struct kvs_client_req *req;

	return finish(kvs_client_tail_put_async(c, request_id, tail, len,
						ttl_ms, NULL, NULL, &req),
		      &req);
}

int kvs_client_tail_take(struct kvs_client *c,
			 const uint8_t request_id[KVS_CLIENT_REQUEST_ID],
			 void *buf, size_t cap, size_t *len)
{
	struct kvs_client_req *req;

	return finish(kvs_client_tail_take_async(c, request_id, buf, cap, len,
						 NULL, NULL, &req),
		      &req);
}

/* ---- the nodes behind a client ---------------------------------------- */

/* Adds one node's counters to a cluster's totals. */
static void stat_add(struct kvs_client_stat *sum,
		     const struct kvs_client_stat *s)
{
	struct kvs_store_stats *t = &sum->store;
	const struct kvs_store_stats *n = &s->store;

	t->dram.blocks += n->dram.blocks;
	t->dram.bytes += n->dram.bytes;
	t->dram.capacity += n->dram.capacity;
	t->nvme.blocks += n->nvme.blocks;
	t->nvme.bytes += n->nvme.bytes;
	t->nvme.capacity += n->nvme.capacity;
	t->hits += n->hits;
	t->misses += n->misses;
	t->dram_hits += n->dram_hits;
	t->nvme_hits += n->nvme_hits;
	t->promotions += n->promotions;
	t->carried += n->carried;
	t->lost_segments += n->lost_segments;
	t->compactions += n->compactions;
	t->evictions += n->evictions;
	t->spills += n->spills;
	t->corrupt_dropped += n->corrupt_dropped;
	t->torn_dropped += n->torn_dropped;
	t->segments += n->segments;
	t->nvme_file_bytes += n->nvme_file_bytes;
	t->direct_io |= n->direct_io;
	t->hugepages |= n->hugepages;
	t->registered |= n->registered;
	sum->tails += s->tails;
	sum->tail_bytes += s->tail_bytes;
	sum->tails_expired += s->tails_expired;
	sum->connections += s->connections;
	if (s->uptime_s > sum->uptime_s)
		sum->uptime_s = s->uptime_s;
}

/* A cluster's counters are its members' summed (uptime: the longest);
 * one daemon's are its own. */
int kvs_client_stat(struct kvs_client *c, struct kvs_client_stat *out)
{
	struct kvs_client_node *nodes;
	size_t n;
	int err, last = -KVS_ECONN;
	bool any = false;

	if (!c)
		return -KVS_EPARAM;
	err = kvs_client_nodes(c, true, &nodes, &n);
	if (err)
		return err;
	memset(out, 0, sizeof(*out));
	for (size_t i = 0; i < n; i++) {
		if (nodes[i].status) {
			last = nodes[i].status;
			continue;
		}
		stat_add(out, &nodes[i].stat);
		any = true;
	}
	free(nodes);
	return any ? 0 : last;
}

int kvs_client_nodes(struct kvs_client *c, bool ask,
		     struct kvs_client_node **out, size_t *n)
{
	if (!c || !out || !n)
		return -KVS_EPARAM;
	return c->ops->nodes(c, ask, out, n);
}
