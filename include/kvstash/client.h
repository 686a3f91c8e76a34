/*
 * client - libkvstash: reach a kvstashd over UCX (docs/PROTOCOL.md).
 *
 * A client holds one authenticated connection to one server, and a
 * progress thread of its own that drives UCX: calls from any number of
 * threads queue their requests to it and either wait on a handle or get a
 * completion callback (run on the progress thread: it must not block and
 * must not call kvs_client_wait).  Every function here is thread safe,
 * except that kvs_client_close() must not race with calls on the same
 * client.
 *
 * Every request has a deadline (opts.timeout_ms): a dead, unreachable or
 * stopped server gives -KVS_ETIMEDOUT or -KVS_ECONN in bounded time, never
 * a hang.  A timeout closes the connection (so that UCX lets go of the
 * caller's buffers before the call returns).
 *
 * A client rides through a restart of its server (a crash, an upgrade):
 * once connected, a connection that fails -- closed by the server, reset,
 * timed out -- is made again and authenticated again by the client itself
 * as soon as a call wants it, tried again with a back-off (10 ms doubling
 * to 200 ms) within each waiting call's timeout.  Calls made meanwhile
 * wait for it; those it does not come in time for fail with -KVS_ECONN
 * (or the server's refusal of the key, -KVS_EAUTH).  A call in flight when
 * the connection failed may or may not have been carried out; it is sent
 * again on the new connection where that is safe, within its timeout:
 * lookup, exists, get and stat (they only read) and put (blocks are named
 * by their content: the same bytes under the same id a second time leave
 * the store as once).  Delete and the tail calls are not sent again: they
 * fail with -KVS_ECONN, and their effect may or may not have happened (a
 * tail taken twice would be lost).  Blocks are verified as below on every
 * connection, so a restart never hands out wrong bytes.
 * kvs_client_counters counts the reconnections and the calls sent again.
 *
 * Blocks are verified by the client before they are handed out
 * (kvs_object_verify, and the block's own id and layer against the key
 * asked for): one that fails is reported as a miss (-KVS_ENOTFOUND) and
 * counted (kvs_client_counters).  Keys are (span id, layer) as in
 * store.h; the server maps them into the tenant's namespace.
 *
 * Batches hold at most the server's max_batch items (kvs_client_limits);
 * a larger one is refused with -KVS_EBATCH before anything is sent.
 *
 * A cluster client (kvs_client_connect_cluster) reaches many kvstashd
 * nodes through the same calls: the members come from etcd (watched) or
 * from a fixed list, each block goes to the members that weighted
 * rendezvous hashing ranks first (docs/CLUSTER.md), one connection per
 * member, made on first use.  A node that fails or does not answer
 * within node_timeout_ms is marked down for backoff_ms and its items go
 * to the next ranked member; a batch is split per node and sent in
 * parallel.  Misses are allowed, wrong blocks never: every block is
 * checked as above wherever it comes from.  A timeout there closes only
 * that node's connection; the client goes on.
 */
#ifndef KVSTASH_CLIENT_H
#define KVSTASH_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvstash/store.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KVS_CLIENT_REQUEST_ID 32 /* bytes of a tail's request id */

struct kvs_client;
struct kvs_client_req;

struct kvs_client_opts {
	const char *address; /* "HOST:PORT" of the server */
	const char *key_file; /* "TENANT HEXKEY" or "HEXKEY" (tenant
				 "default"); the first line is used */
	uint32_t connect_timeout_ms; /* connect + authenticate (5000) */
	uint32_t timeout_ms; /* each request (10000) */
	/* allow UCX's shared-memory transports to a server of this host
	 * that allows them too (docs/PROTOCOL.md: a client killed while it
	 * sends can stall the server's shared-memory receive) */
	bool shared_memory;
};

void kvs_client_opts_default(struct kvs_client_opts *opts);

#define KVS_CLIENT_REPLICAS_MAX 8
#define KVS_CLIENT_CLUSTER_BATCH 4096 /* items of one cluster call */

struct kvs_client_cluster_opts {
	/* the members: etcd's client URLs "http://H:P[,...]" and the
	 * cluster name, or instead a fixed list "HOST:PORT[,HOST:PORT...]"
	 * (each with capacity 1; its id is the address, ':' and other
	 * characters outside [A-Za-z0-9._-] made '_') */
	const char *etcd;
	const char *cluster;
	const char *servers;
	const char *key_file; /* as kvs_client_opts */
	uint32_t timeout_ms; /* each call, its fallbacks included (10000) */
	uint32_t node_timeout_ms; /* one request to one node, and a
				     connection's handshake (2000) */
	uint32_t backoff_ms; /* a node that failed is skipped (5000) */
	uint32_t etcd_timeout_ms; /* each etcd call (2000) */
	/* copies a put writes (the top-ranked members that answer) and
	 * members a read asks in rank order before it calls a miss (1) */
	unsigned replicas;
	/* read repair: a get that finds a block past a live member that
	 * should hold it (it answered 'miss') writes the block back there,
	 * so copies lost with a node come back as blocks are read */
	bool repair_replicas;
	bool shared_memory; /* as kvs_client_opts */
};

void kvs_client_cluster_opts_default(struct kvs_client_cluster_opts *opts);

/*
 * kvs_client_connect_cluster - a client of many kvstashd nodes.  With
 * opts->etcd, reads the members of opts->cluster (and then watches
 * them: joins and leaves reach the client within the lease time); with
 * opts->servers, uses that list.  Connects to no node yet.  Returns 0
 * and *@out (release with kvs_client_close), -KVS_EPARAM for bad options
 * or key file, or the etcd error when the first read of the members
 * failed (-ETIMEDOUT, -ECONNREFUSED, ...).  When etcd stops answering
 * later, the client goes on with the last members it saw (logged once;
 * kvs_client_membership says so).
 */
int kvs_client_connect_cluster(const struct kvs_client_cluster_opts *opts,
			       struct kvs_client **out);

/*
 * kvs_client_connect - connect and authenticate (HMAC challenge-response;
 * the key never crosses the wire).  Returns 0 and *@out (release with
 * kvs_client_close), -KVS_EAUTH when the server refused the key,
 * -KVS_ECONN / -KVS_ETIMEDOUT when it could not be reached, -KVS_EPARAM
 * for a bad address or key file, or another error.
 */
int kvs_client_connect(const struct kvs_client_opts *opts,
		       struct kvs_client **out);

/*
 * kvs_client_dup - another connection of @c's (a client of one server,
 * not a cluster's): the same server, tenant key and options, its own
 * progress thread.  Returns 0 and *@out, -KVS_EPARAM for a cluster
 * client, or kvs_client_connect's errors.
 */
int kvs_client_dup(struct kvs_client *c, struct kvs_client **out);

/* Fails what is still in flight with -KVS_ECONN, closes, frees.  NULL is
 * a no-op. */
void kvs_client_close(struct kvs_client *client);

/* The server's limits, from its hello. */
struct kvs_client_limits {
	uint32_t max_batch, max_object, max_payload, max_inflight;
};
void kvs_client_limits(const struct kvs_client *client,
		       struct kvs_client_limits *out);

/* Requests, timeouts, blocks this client refused after receiving them
 * (failed a check); and, for a cluster client: items that went past
 * their first node (fallbacks), nodes marked down, puts that made fewer
 * copies than asked (though at least one), copies written back by read
 * repair; for a one-server client: connections made again after one
 * failed (reconnects) and requests sent again on them (retries). */
struct kvs_client_counters {
	uint64_t requests, timeouts, corrupt_dropped;
	uint64_t fallbacks, marked_down, under_replicated, repairs;
	uint64_t reconnects, retries;
};
void kvs_client_counters(const struct kvs_client *client,
			 struct kvs_client_counters *out);

/*
 * kvs_client_fail_fast - from now on, while @client's connection is down
 * its calls fail at once with -KVS_ECONN instead of waiting for the next
 * connection, which the client makes in the background (tried with the
 * same back-off); calls in flight when it fails are not sent again.  For
 * callers that take an unreachable server for misses (the decode
 * runtime's block store does).  A cluster client is unchanged.
 */
void kvs_client_fail_fast(struct kvs_client *client);

/* ---- asynchronous requests -------------------------------------------
 *
 * Each *_async call takes its output arrays and buffers, which must stay
 * valid until the request completes, and either @cb (then @req_out is
 * NULL: @cb gets the request's status once, on the progress thread) or
 * @req_out (then @cb is NULL: pass the handle to kvs_client_wait).  It
 * returns 0 once the request is queued, or an error (nothing queued, no
 * callback).  The status of a batch is 0 when the exchange succeeded --
 * per-item outcomes are in the results arrays -- or the error that
 * failed the whole request.
 */
typedef void (*kvs_client_cb)(void *arg, int status);

/* Waits for a request, frees its handle, returns its status. */
int kvs_client_wait(struct kvs_client_req *req);

/* Longest prefix of @span_ids present for every layer of @layers. */
int kvs_client_lookup_async(struct kvs_client *c,
			    const uint8_t (*span_ids)[KVS_ID_SIZE],
			    size_t n_spans, const uint32_t *layers,
			    size_t n_layers, size_t *prefix, kvs_client_cb cb,
			    void *arg, struct kvs_client_req **req_out);

/* present[i]: whether keys[i] is held (a get may still miss). */
int kvs_client_exists_async(struct kvs_client *c,
			    const struct kvs_store_key *keys, size_t n,
			    bool *present, kvs_client_cb cb, void *arg,
			    struct kvs_client_req **req_out);

/*
 * Gets keys[i] into bufs[i] (caps[i] bytes): results[i] is 0 and lens[i]
 * the object's length, -KVS_ENOTFOUND for a miss (or a block that failed
 * the client's checks), -ENOSPC when caps[i] was too small (lens[i] then
 * says how much is needed).  Bytes past lens[i] are unspecified.
 */
int kvs_client_get_async(struct kvs_client *c, const struct kvs_store_key *keys,
			 size_t n, void *const *bufs, const size_t *caps,
			 size_t *lens, int *results, kvs_client_cb cb,
			 void *arg, struct kvs_client_req **req_out);

/*
 * Puts encoded blocks (sent from the caller's memory, no copy), each
 * acknowledged at @durability or better: results[i] 0 or the error that
 * refused objs[i] (a failed check, -ENOSPC, ...).  A put in flight when
 * the connection fails is sent again on the next one (see above): blocks
 * are content-addressed, so a put that was carried out twice stores what
 * one does.  Only blocks go through here; the tail handoff has its own
 * calls, which are not sent again.
 */
int kvs_client_put_async(struct kvs_client *c, const uint8_t *const *objs,
			 const size_t *lens, size_t n,
			 enum kvs_durability durability, int *results,
			 kvs_client_cb cb, void *arg,
			 struct kvs_client_req **req_out);

/* The same with @replicas copies (1..KVS_CLIENT_REPLICAS_MAX) on a
 * cluster client: results[i] is 0 once at least one node holds objs[i]
 * (fewer than @replicas: counted as under_replicated), else the refusal
 * or the failure.  A one-server client writes one copy. */
int kvs_client_put_replicas_async(struct kvs_client *c,
				  const uint8_t *const *objs,
				  const size_t *lens, size_t n,
				  enum kvs_durability durability,
				  unsigned replicas, int *results,
				  kvs_client_cb cb, void *arg,
				  struct kvs_client_req **req_out);

/* results[i]: 0, or -KVS_ENOTFOUND when there was nothing to delete.  A
 * cluster client deletes on every live member. */
int kvs_client_delete_async(struct kvs_client *c,
			    const struct kvs_store_key *keys, size_t n,
			    int *results, kvs_client_cb cb, void *arg,
			    struct kvs_client_req **req_out);

/* Hands a residual tail over under @request_id for @ttl_ms. */
int kvs_client_tail_put_async(struct kvs_client *c,
			      const uint8_t request_id[KVS_CLIENT_REQUEST_ID],
			      const uint8_t *tail, size_t len, uint32_t ttl_ms,
			      kvs_client_cb cb, void *arg,
			      struct kvs_client_req **req_out);

/* Takes (and so deletes) the tail of @request_id into @buf: status 0 and
 * *@len, -KVS_ENOTFOUND (none, expired or taken), -ENOSPC (*@len needed;
 * the tail is taken all the same). */
int kvs_client_tail_take_async(struct kvs_client *c,
			       const uint8_t request_id[KVS_CLIENT_REQUEST_ID],
			       void *buf, size_t cap, size_t *len,
			       kvs_client_cb cb, void *arg,
			       struct kvs_client_req **req_out);

/* ---- synchronous forms: *_async + kvs_client_wait --------------------- */

int kvs_client_lookup(struct kvs_client *c,
		      const uint8_t (*span_ids)[KVS_ID_SIZE], size_t n_spans,
		      const uint32_t *layers, size_t n_layers, size_t *prefix);
int kvs_client_exists(struct kvs_client *c, const struct kvs_store_key *keys,
		      size_t n, bool *present);
int kvs_client_get(struct kvs_client *c, const struct kvs_store_key *keys,
		   size_t n, void *const *bufs, const size_t *caps,
		   size_t *lens, int *results);
int kvs_client_put(struct kvs_client *c, const uint8_t *const *objs,
		   const size_t *lens, size_t n, enum kvs_durability durability,
		   int *results);
int kvs_client_put_replicas(struct kvs_client *c, const uint8_t *const *objs,
			    const size_t *lens, size_t n,
			    enum kvs_durability durability, unsigned replicas,
			    int *results);
int kvs_client_delete(struct kvs_client *c, const struct kvs_store_key *keys,
		      size_t n, int *results);
int kvs_client_tail_put(struct kvs_client *c,
			const uint8_t request_id[KVS_CLIENT_REQUEST_ID],
			const uint8_t *tail, size_t len, uint32_t ttl_ms);
int kvs_client_tail_take(struct kvs_client *c,
			 const uint8_t request_id[KVS_CLIENT_REQUEST_ID],
			 void *buf, size_t cap, size_t *len);

/* The daemon's store and service counters (docs/PROTOCOL.md, STAT). */
struct kvs_client_stat {
	struct kvs_store_stats store; /* hits, misses, ... of the daemon */
	uint64_t tails, tail_bytes, tails_expired;
	uint64_t connections, uptime_s;
};
/* A cluster client sums the counters of the members that answered
 * (an error only when none did). */
int kvs_client_stat(struct kvs_client *c, struct kvs_client_stat *out);

/* One member of a cluster client (a one-server client: its server). */
struct kvs_client_node {
	char id[65];
	char address[256];
	uint64_t capacity; /* as registered: the placement weight */
	bool marked_down; /* this client skips it for now */
	int status; /* 0: @stat is its answer; else why there was none */
	struct kvs_client_stat stat;
};

/*
 * kvs_client_nodes - the members now; with @ask, each asked for its STAT
 * (in parallel, each within node_timeout_ms), else none is (status 0,
 * stat zero).  *@out: an array of *@n the caller frees (free()).
 * Returns 0 or -ENOMEM.
 */
int kvs_client_nodes(struct kvs_client *c, bool ask,
		     struct kvs_client_node **out, size_t *n);

/* Where a cluster client's members come from, and how current they are. */
struct kvs_client_membership {
	bool etcd; /* an etcd view (else a fixed list) */
	bool reachable; /* etcd answers (a fixed list: true) */
	int64_t unreachable_ms; /* how long it has not */
	uint64_t generation; /* grows with every change of the members */
	size_t members;
	uint64_t reconnects, resyncs; /* of the watch */
};
void kvs_client_membership(struct kvs_client *c,
			   struct kvs_client_membership *out);

/*
 * kvs_client_get_to_device - gets keys[i] into GPU memory at dev_bufs[i]
 * (caps[i] bytes) through pinned host staging and cudaMemcpyAsync on
 * @stream (a cudaStream_t; NULL: the default stream), synchronized before
 * it returns.  Results as kvs_client_get.  -KVS_ENODEV when built
 * without CUDA or without a device.
 */
int kvs_client_get_to_device(struct kvs_client *c,
			     const struct kvs_store_key *keys, size_t n,
			     void *const *dev_bufs, const size_t *caps,
			     size_t *lens, int *results, void *stream);

#ifdef __cplusplus
}
#endif

#endif
