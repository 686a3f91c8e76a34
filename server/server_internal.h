/*
 * server_internal.h - private structures of the server.
 *
 *   server.c   listener, connections, frame intake, the request loop
 *   serve.c    one handler per opcode, replies
 *   tails.c    the residual-tail table (put with a TTL, take-and-delete)
 *   metrics.c  counters and the Prometheus /metrics endpoint
 *
 * Everything but the metrics thread runs on the loop's thread; the
 * counters the metrics thread reads are updated with relaxed atomics.
 */
#ifndef KVS_TRANSPORT_SERVER_INTERNAL_H
#define KVS_TRANSPORT_SERVER_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include <openssl/evp.h>

#include "kvstash/server.h"
#include "transport/proto.h"
#include "transport/ucx.h"

#define SRV_HASH 1024u
#define SRV_LAT_BUCKETS 16

struct srv_tenant {
	struct kvs_server_tenant cfg;
	EVP_MD_CTX *ns_prefix; /* SHA-256 with the namespace absorbed */
	/* where ns_span_id works: the server's loop is its one user, so a
	 * lookup of a long chain allocates nothing per id */
	EVP_MD_CTX *ns_scratch;
};

struct srv_conn {
	struct kvs_server *srv;
	ucp_ep_h ep;
	uint64_t id;
	unsigned refs; /* the loop's list, requests and replies */
	uint32_t inflight; /* requests received, not answered */
	uint32_t sending; /* replies whose send has not completed */
	bool authed;
	bool dead; /* the peer failed: force close */
	bool close_requested; /* close once nothing is in flight */
	bool closing; /* ucp_ep_close_nbx issued */
	bool nonce_valid; /* a challenge was issued, not yet answered */
	bool over_limit; /* accepted past max_connections: refused */
	uint8_t nonce[KVS_PROTO_NONCE_SIZE];
	char tenant_name[KVS_PROTO_TENANT_MAX + 1];
	struct srv_tenant *tenant; /* once authenticated */
	void *close_req;
	struct srv_conn *hnext; /* by endpoint */
	struct srv_conn *next; /* all connections */
};

struct srv_req {
	struct srv_req *next;
	struct srv_conn *conn;
	struct kvs_proto_frame f; /* body points into frame */
	uint8_t frame[KVS_PROTO_MAX_FRAME];
	uint8_t *payload;
	uint64_t payload_len;
	void *am_data; /* UCX data held (released after serving) */
	bool owned; /* payload malloc'd */
	/* a put received straight into reserved store slots */
	struct kvs_store_reservation **resv; /* NULL once committed */
	uint8_t **dsts;
	ucp_dt_iov_t *riov;
	/* a rendezvous receive in flight (the server's receiving list) */
	struct srv_req *rnext, *rprev;
	bool receiving;
	uint64_t recv_start_ns;
	struct timespec start;
};

struct srv_reply {
	struct srv_conn *conn;
	uint16_t opcode; /* of the request */
	bool close_after;
	struct timespec start;
	uint64_t bytes;
	uint8_t frame[KVS_PROTO_MAX_FRAME];
	size_t frame_len;
	ucp_dt_iov_t *iov;
	size_t iov_n;
	struct kvs_store_ref **refs;
	size_t n_refs;
	uint8_t *owned; /* header copies, a tail: freed after the send */
	/* while UCX holds its send: on the server's list of them */
	struct srv_reply *snext, **sprev;
};

/* Counters read by /metrics (relaxed atomics). */
struct srv_metrics {
	uint64_t requests[KVS_OP_COUNT];
	uint64_t errors[KVS_OP_COUNT];
	uint64_t bytes_in[KVS_OP_COUNT];
	uint64_t bytes_out[KVS_OP_COUNT];
	uint64_t lat_bucket[KVS_OP_COUNT][SRV_LAT_BUCKETS + 1];
	uint64_t lat_sum_ns[KVS_OP_COUNT];
	uint64_t auth_failures;
	uint64_t refused[4]; /* size, batch, inflight, connections */
	uint64_t protocol_errors;
	uint64_t connections, connections_total;
	uint64_t tails, tail_bytes, tails_expired, tails_taken;
	uint64_t get_hits, get_misses;
	/* rendezvous payload receives, with and without the arena's memory
	 * handle passed to UCX */
	uint64_t rndv_memh, rndv_plain;
};

struct tail_table;

struct kvs_server {
	struct kvs_server_opts opts;
	struct kvs_proto_limits limits;
	uint32_t limits_inflight, limits_conns;
	struct srv_tenant *tenants;
	size_t n_tenants;
	struct kvs_ucx ucx;
	ucp_listener_h listener;
	int port;
	int stop_fd; /* eventfd: kvs_server_stop() */
	volatile int stopping;
	uint64_t next_conn_id;
	struct srv_conn *conns;
	struct srv_conn *by_ep[SRV_HASH];
	uint32_t n_conns;
	struct srv_req *ready, **ready_tail;
	/* replies whose send UCX has not called back yet: a send to a peer
	 * gone mid-rendezvous may never be; freed (their store references
	 * released) once the worker is destroyed */
	struct srv_reply *sending_replies;
	struct srv_req *receiving; /* rendezvous receives in flight */
	int store_fd; /* the store's completion event fd */
	ucp_mem_h arena_memh; /* the store's DRAM arena, mapped */
	const uint8_t *arena_base; /* with arena_memh */
	size_t arena_len;
	struct tail_table *tails;
	struct srv_metrics m;
	struct timespec started;
	void *http; /* struct MHD_Daemon */
	int metrics_port;
};

/* server.c */
void conn_put(struct srv_conn *c);
/* Ends @req: its connection's in-flight count, payload, reference. */
void req_done(struct srv_req *req);
void conn_request_close(struct srv_conn *c);
/* Sends @r (frame and iov set) and takes ownership of it. */
void reply_send(struct kvs_server *srv, struct srv_reply *r);
struct srv_reply *reply_new(struct srv_req *req);
/* Frees a reply never sent (its refs too); NULL is a no-op. */
void reply_discard(struct srv_reply *r);
/* An error reply (status @err, no body) to @req. */
void reply_error(struct kvs_server *srv, struct srv_req *req, int err,
		 bool close);
uint64_t elapsed_ns(const struct timespec *start);

/* serve.c: serves one request whose payload is in place; consumes it. */
void serve(struct kvs_server *srv, struct srv_req *req);
/* The stored span id of @span_id in @t's namespace. */
void ns_span_id(struct srv_tenant *t, const uint8_t *span_id,
		uint8_t out[KVS_ID_SIZE]);

/* tails.c */
int tails_create(uint64_t capacity, struct tail_table **out);
void tails_destroy(struct tail_table *t);
/* Takes @obj (malloc'd) on success; -ENOSPC when over capacity. */
int tails_put(struct tail_table *t, const uint8_t key[KVS_ID_SIZE],
	      uint8_t *obj, size_t len, uint64_t expires_ns);
/* 0 and the object (caller frees), or -KVS_ENOTFOUND. */
int tails_take(struct tail_table *t, const uint8_t key[KVS_ID_SIZE],
	       uint64_t now_ns, uint8_t **obj, size_t *len);
/* Drops expired tails; returns how many. */
uint64_t tails_expire(struct tail_table *t, uint64_t now_ns);
void tails_usage(const struct tail_table *t, uint64_t *count, uint64_t *bytes);
uint64_t now_ns(void);

/* metrics.c */
int metrics_start(struct kvs_server *srv, const char *addr);
void metrics_stop(struct kvs_server *srv);
void metrics_latency(struct srv_metrics *m, unsigned op, uint64_t ns);

#define M_ADD(field, v) __atomic_fetch_add(&(field), (v), __ATOMIC_RELAXED)
#define M_SET(field, v) __atomic_store_n(&(field), (v), __ATOMIC_RELAXED)
#define M_GET(field) __atomic_load_n(&(field), __ATOMIC_RELAXED)

#endif
