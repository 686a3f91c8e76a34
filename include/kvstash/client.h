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
 * caller's buffers before the call returns); every later call then fails
 * with -KVS_ECONN: close the client and connect again.
 *
 * Blocks are verified by the client before they are handed out
 * (kvs_object_verify, and the block's own id and layer against the key
 * asked for): one that fails is reported as a miss (-KVS_ENOTFOUND) and
 * counted (kvs_client_counters).  Keys are (span id, layer) as in
 * store.h; the server maps them into the tenant's namespace.
 *
 * Batches hold at most the server's max_batch items (kvs_client_limits);
 * a larger one is refused with -KVS_EBATCH before anything is sent.
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

/*
 * kvs_client_connect - connect and authenticate (HMAC challenge-response;
 * the key never crosses the wire).  Returns 0 and *@out (release with
 * kvs_client_close), -KVS_EAUTH when the server refused the key,
 * -KVS_ECONN / -KVS_ETIMEDOUT when it could not be reached, -KVS_EPARAM
 * for a bad address or key file, or another error.
 */
int kvs_client_connect(const struct kvs_client_opts *opts,
		       struct kvs_client **out);

/* Fails what is still in flight with -KVS_ECONN, closes, frees.  NULL is
 * a no-op. */
void kvs_client_close(struct kvs_client *client);

/* The server's limits, from its hello. */
struct kvs_client_limits {
	uint32_t max_batch, max_object, max_payload, max_inflight;
};
void kvs_client_limits(const struct kvs_client *client,
		       struct kvs_client_limits *out);

/* Blocks this client refused after receiving them (failed a check). */
struct kvs_client_counters {
	uint64_t requests, timeouts, corrupt_dropped;
};
void kvs_client_counters(const struct kvs_client *client,
			 struct kvs_client_counters *out);

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
 * refused objs[i] (a failed check, -ENOSPC, ...).
 */
int kvs_client_put_async(struct kvs_client *c, const uint8_t *const *objs,
			 const size_t *lens, size_t n,
			 enum kvs_durability durability, int *results,
			 kvs_client_cb cb, void *arg,
			 struct kvs_client_req **req_out);

/* results[i]: 0, or -KVS_ENOTFOUND when there was nothing to delete. */
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
int kvs_client_stat(struct kvs_client *c, struct kvs_client_stat *out);

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

/* ---- the decode runtime's block store -------------------------------- */

struct kvs_blockstore;

/*
 * kvs_blockstore_remote - the block store of the decode runtime
 * (runtime.h) over @client's server: lookup, get, put and delete in
 * requests of the server's limits (a large call is several requests in
 * flight at once), puts acknowledged at memory durability, residual
 * tails through the tail handoff (the block store's tail keys are the
 * request ids).  On success the block store owns @client and closes it
 * when its last reference goes (kvs_blockstore_release); on failure the
 * caller keeps it.  Returns 0 and *@out, -KVS_EPARAM or -ENOMEM.
 */
int kvs_blockstore_remote(struct kvs_client *client,
			  struct kvs_blockstore **out);

/* The client of a block store made by kvs_blockstore_remote (NULL for
 * another kind): for the calls the block store interface has not (stat,
 * exists); owned by @bs, valid while it is. */
struct kvs_client *
kvs_blockstore_remote_client(const struct kvs_blockstore *bs);

#ifdef __cplusplus
}
#endif

#endif
