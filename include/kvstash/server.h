/*
 * server - the kvstash server: a store behind UCX (ucp), speaking the
 * wire protocol of docs/PROTOCOL.md (server/).
 *
 * One server owns one UCX worker and runs one request loop on the calling
 * thread (kvs_server_run); the store it serves is the caller's and must
 * outlive it.  Clients reach it with libkvstash (include/kvstash/client.h).
 * The daemon's main (server/kvstashd.c) is a thin layer over this header:
 * configuration, signals and logs.
 */
#ifndef KVSTASH_SERVER_H
#define KVSTASH_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "kvstash/store.h"
#include "kvstash/tenant.h"

#ifdef __cplusplus
extern "C" {
#endif

struct kvs_server_opts {
	const char *listen; /* "HOST:PORT"; port 0 picks a free one */
	const char *metrics; /* "HOST:PORT" of /metrics, or NULL */
	struct kvs_store *store; /* served, not owned */
	const struct kvs_server_tenant *tenants; /* copied */
	size_t n_tenants;
	/* limits (0 = default) */
	uint32_t max_batch; /* items a request (default 256) */
	uint32_t max_object; /* bytes an object (default 16 MiB) */
	uint64_t max_payload; /* bytes a request (default 64 MiB) */
	uint32_t max_inflight; /* requests a connection (default 64) */
	uint32_t max_connections; /* (default 1024) */
	uint64_t tail_capacity; /* bytes of residual tails (default 256 MiB) */
	uint32_t tail_max_ttl_ms; /* (default 600000) */
	enum kvs_durability min_durability; /* puts are raised to this */
	uint32_t spin_us; /* busy-poll after work before sleeping (50) */
	/* allow UCX's shared-memory transports for clients of this host
	 * (transport/ucx.h says why it is off by default) */
	bool shared_memory;
	/* Called from the loop at least every 100 ms (log reopening). */
	void (*tick)(void *arg);
	void *tick_arg;
};

struct kvs_server;

/*
 * kvs_server_create - listen on opts->listen and, with opts->metrics,
 * serve Prometheus metrics there.  Returns 0 and *@out (release with
 * kvs_server_destroy), -KVS_EPARAM for a bad address or option, or the
 * UCX / HTTP error (logged).
 */
int kvs_server_create(const struct kvs_server_opts *opts,
		      struct kvs_server **out);

/*
 * kvs_server_map_arena - registers the store's DRAM arena (what
 * kvs_store_opts.register_arena was given) with the server's UCX context
 * (ucp_mem_map), so transfers into and out of the store's slots need no
 * registration of their own on transports that want one.  0 or the UCX
 * error (logged; the server works without).
 */
int kvs_server_map_arena(struct kvs_server *srv, void *base, size_t len);

/* The port the listener (or, with @metrics, the metrics server) is
 * bound to. */
int kvs_server_port(const struct kvs_server *srv, int metrics);

/*
 * kvs_server_run - the request loop, until kvs_server_stop(): then stops
 * accepting, finishes the requests in flight (at most 5 s), closes every
 * connection and returns 0.  A negative error if the worker broke.
 */
int kvs_server_run(struct kvs_server *srv);

/* Asks the loop to stop; async-signal-safe. */
void kvs_server_stop(struct kvs_server *srv);

/* Closes the listener, the metrics server and every connection; the
 * store is left open (the caller closes it).  NULL is a no-op. */
void kvs_server_destroy(struct kvs_server *srv);

#ifdef __cplusplus
}
#endif

#endif
