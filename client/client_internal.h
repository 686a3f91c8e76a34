/*
 * client_internal.h - private structures of libkvstash.
 *
 *   conn.c    one connection to one server: endpoint, requests in
 *             flight, replies, failure (a multi-server client holds
 *             several on one worker)
 *   client.c  the public API: the progress thread, the submission
 *             queue, handles, synchronous forms
 *   device.c  kvs_client_get_to_device (CUDA builds)
 *   reconnect.c  a one-server client's connection made again after it
 *             failed, and the requests that are safe to send again
 *   nodes.c   a cluster client: its members (an etcd view or a fixed
 *             list), one lazily made connection per member, the
 *             handshake of those connections on the progress thread
 *   route.c   a cluster client's calls: each item placed by rendezvous
 *             hashing, sent to its nodes in rounds (batched per node),
 *             falling back on misses and failures
 *
 * UCX is driven by whoever holds client->progress: a thread waiting for
 * its own request (so a synchronous call costs no hop between threads),
 * else the progress thread (callbacks, and anything nobody waits for).
 * Requests reach it through the submission queue (under client->lock)
 * and the wake eventfd.
 */
#ifndef KVS_CLIENT_INTERNAL_H
#define KVS_CLIENT_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/clock.h"
#include "kvstash/client.h"
#include "kvstash/tenant.h"
#include "transport/proto.h"
#include "transport/ucx.h"

#define CONN_HASH 256u

struct kvs_conn;
struct kvs_node;
struct route;
struct route_op;

struct kvs_client_req {
	struct kvs_client *cl;
	struct kvs_conn *conn;
	struct kvs_client_req *next; /* submission queue */
	struct kvs_client_req *hnext; /* the connection's table */
	uint16_t opcode;
	uint32_t count;
	uint64_t id;
	uint64_t deadline_ns;
	uint8_t frame[KVS_PROTO_MAX_FRAME];
	size_t frame_len;
	/* request payload: an owned buffer or the caller's objects */
	uint8_t *payload;
	size_t payload_len;
	ucp_dt_iov_t *iov;
	size_t iov_n;
	/* outputs (the caller's) */
	const struct kvs_store_key *keys;
	void *const *bufs;
	const size_t *caps;
	size_t *lens;
	int *results;
	bool *present;
	size_t *prefix;
	void *tail_buf;
	size_t tail_cap;
	size_t *tail_len;
	uint8_t hello[KVS_PROTO_HELLO_REPLY_SIZE];
	uint64_t stat[KVS_PROTO_STAT_MAX];
	uint32_t stat_n;
	/* reply placement */
	ucp_dt_iov_t *riov;
	size_t riov_n;
	uint8_t *scratch;
	bool verify; /* objects landed: check them before handing out */
	/* state */
	void *send_req, *recv_req;
	bool sending, receiving, in_table, replied, done;
	int status;
	kvs_client_cb cb;
	void *arg;
	/* a request of the client's own (a cluster call's part, a
	 * handshake): on_done runs on the progress thread once UCX is
	 * left (client->deferred) and owns the request from then on */
	void (*on_done)(struct kvs_client_req *req);
	void *owner;
	uint32_t *items; /* a part: its items' indexes in the call */
	uint32_t part_node; /* a part: its node's index in the call */
	void *part_mem; /* a part's own arrays (freed with it) */
	struct route_op *op; /* a cluster call (the caller's handle) */
};

struct kvs_conn {
	struct kvs_client *cl;
	const char *address; /* the server's, for the log */
	struct kvs_node *node; /* a cluster member's connection, or NULL */
	ucp_ep_h ep;
	bool broken; /* failed or timed out: everything fails */
	bool timed_out; /* broken by a request past its deadline */
	bool closing;
	void *close_req;
	int fail_status;
	struct kvs_server_tenant tenant;
	struct kvs_client_limits limits;
	uint32_t inflight;
	struct kvs_client_req *table[CONN_HASH];
	/* a cluster member's: requests waiting for the handshake or for
	 * room under max_inflight, and the list of closing connections */
	bool ready;
	bool handshake; /* a hello or proof of it is out (or deferred) */
	struct kvs_client_req *pending, **pending_tail;
	uint8_t nonce[KVS_PROTO_NONCE_SIZE];
	struct kvs_conn *next;
};

struct kvs_client {
	struct kvs_client_opts opts;
	char *address;
	struct kvs_ucx ucx;
	struct kvs_conn conn;
	pthread_t thread;
	bool thread_started;
	int wake_fd;
	pthread_mutex_t lock; /* queue, done flags, stopping */
	pthread_cond_t cond;
	/* whoever holds it drives UCX: the progress thread, or a thread
	 * waiting in kvs_client_wait (then no hop between threads) */
	pthread_mutex_t progress;
	unsigned waiters; /* threads in kvs_client_wait (atomic) */
	uint64_t last_check;
	struct kvs_client_req *queue, **queue_tail;
	struct kvs_client_req *waiting; /* over max_inflight (thread) */
	bool stopping;
	uint64_t next_id;
	struct kvs_client_counters counters;
	const struct client_ops *ops; /* one daemon, or a cluster */
	/* a cluster client's members (kvs_client_connect_cluster), else NULL */
	struct route *route;
	/* finished requests with on_done (the progress thread's) */
	struct kvs_client_req *deferred, **deferred_tail;
	/* reconnect.c (the progress thread's): connected once, a new
	 * connection's handshake out, the next try and its back-off */
	bool connected, reconnecting;
	/* while the connection is down, requests fail at once rather than
	 * wait for the next one, made meanwhile (kvs_client_fail_fast; atomic)
	 */
	bool fail_fast;
	uint64_t reconnect_at_ns;
	uint32_t backoff_ms;
	uint64_t reconnects, retries;
};

/* request.c: building requests (the direct calls and cluster parts) */
struct kvs_client_req *req_new(uint16_t opcode, uint32_t count, size_t body_len,
			       uint32_t flags);
/* Keys as a request payload; 0 or -ENOMEM. */
int req_keys_payload(struct kvs_client_req *req,
		     const struct kvs_store_key *keys, size_t n);
/* An EXISTS, GET or DELETE (@op) of @keys; 0 or -ENOMEM. */
int req_keyed_new(uint16_t op, const struct kvs_store_key *keys, size_t n,
		  struct kvs_client_req **out);
/* A PUT of @n objects sent from the caller's memory. */
int req_put_new(const uint8_t *const *objs, const size_t *lens, size_t n,
		enum kvs_durability durability, struct kvs_client_req **out);
int req_tail_put_new(const uint8_t *request_id, const uint8_t *tail, size_t len,
		     uint32_t ttl_ms, struct kvs_client_req **out);
struct kvs_client_req *req_tail_take_new(const uint8_t *request_id);
/* Encodes @req's frame header (its id given). */
void req_encode_header(struct kvs_client_req *req);
/* Gives @req the next request id and encodes its frame header. */
void req_seal(struct kvs_client *cl, struct kvs_client_req *req,
	      uint64_t deadline_ns);
/* Checks the objects a reply landed (misses for those that fail). */
void req_verify(struct kvs_client_req *req);
void req_free(struct kvs_client_req *req);
/* client.c: queues a request built for a call; see kvs_client_*_async. */
int client_submit(struct kvs_client *c, struct kvs_client_req *req,
		  uint32_t timeout_ms, kvs_client_cb cb, void *arg,
		  struct kvs_client_req **req_out);
/* A client with its worker (client_direct_ops, replies to
 * conn_on_reply; or with @cluster client_cluster_ops and route_on_reply),
 * connected to nothing, with @tenant's key (NULL:
 * opts->key_file's); 0 or the error (logged). */
int client_create(const struct kvs_client_opts *opts,
		  const struct kvs_server_tenant *tenant, bool cluster,
		  struct kvs_client **out);
/* Starts the progress thread. */
int client_start(struct kvs_client *c);
/* request.c: the STAT counters of a reply, decoded. */
void client_stat_decode(const uint64_t *v, struct kvs_client_stat *out);

/* conn.c (progress thread) */
int conn_open(struct kvs_client *cl, struct kvs_conn *conn,
	      const char *address);
/* Sends @req or completes it with the connection's error. */
void conn_send(struct kvs_conn *conn, struct kvs_client_req *req);
/* Fails every request in flight with @status (timed-out ones with
 * -KVS_ETIMEDOUT) and closes the endpoint. */
void conn_fail(struct kvs_conn *conn, int status);
/* Closes an idle connection in order (flush), else as conn_fail. */
void conn_close(struct kvs_conn *conn);
/* Times out requests past their deadline (the whole connection). */
void conn_check_deadlines(struct kvs_conn *conn, uint64_t now);
/* True once the endpoint is closed and no request is left in flight. */
bool conn_idle(struct kvs_conn *conn);
/* True when nothing but the endpoint's close is pending. */
bool conn_inflight_only_close(struct kvs_conn *conn);
void conn_progress_close(struct kvs_conn *conn);
ucs_status_t conn_on_reply(void *arg, const void *header, size_t header_len,
			   void *data, size_t len,
			   const ucp_am_recv_param_t *param);

/* request.c: a request is finished (status set): wake or call back. */
void req_complete(struct kvs_client_req *req);

/* reconnect.c: a hello of @t's tenant, or (KVS_OP_AUTH) its proof of
 * @nonce's; NULL when out of memory. */
struct kvs_client_req *req_handshake_new(const struct kvs_server_tenant *t,
					 uint16_t opcode, const uint8_t *nonce);
/* reconnect.c (progress thread, a one-server client) */
/* The first connection is made: later failures are reconnected. */
void client_mark_connected(struct kvs_client *cl);
/* Whether the waiting requests may go now. */
bool client_may_send(struct kvs_client *cl);
/* Puts @req, failed with its connection, back to wait for the next one
 * when that is safe and its deadline allows; true if it did. */
bool client_retry(struct kvs_client_req *req);
/* Fails the waiting requests past their deadline. */
void client_waiting_deadlines(struct kvs_client *cl, uint64_t now);
/* Starts a new connection when one is due and requests wait for it. */
void client_reconnect_turn(struct kvs_client *cl, uint64_t now);

/* ---- the ops seam: one daemon or a cluster ---- */

/* A call, as the public functions (calls.c) describe it. */
enum client_call_kind {
	CALL_GET,
	CALL_EXISTS,
	CALL_LOOKUP,
	CALL_PUT,
	CALL_DELETE,
	CALL_TAIL_PUT,
	CALL_TAIL_TAKE,
	CALL_STAT, /* a cluster's, of its members (the nodes op) */
};

struct client_call {
	enum client_call_kind kind;
	const struct kvs_store_key *keys;
	size_t n;
	void *const *bufs;
	const size_t *caps;
	size_t *lens;
	int *results;
	bool *present;
	const uint8_t *const *objs;
	const size_t *obj_lens;
	enum kvs_durability durability;
	unsigned replicas; /* 0: the client's */
	const uint8_t (*spans)[KVS_ID_SIZE];
	size_t n_spans;
	const uint32_t *layers;
	size_t n_layers;
	size_t *prefix;
	const uint8_t *request_id;
	const uint8_t *tail;
	size_t tail_len;
	uint32_t ttl_ms;
	void *tail_buf;
	size_t tail_cap;
	size_t *tail_out;
	struct kvs_client_node *nodes; /* STAT: one per member */
	size_t n_nodes;
};

/*
 * The shape of a client: what the calls (calls.c) and the progress
 * thread (client.c) do through it, and nothing else of a client knows
 * whether it talks to one daemon (client_direct_ops, direct.c) or to the
 * members of a cluster (client_cluster_ops, route.c and nodes.c).
 */
struct client_ops {
	/* Queues @call, checked against the client's limits (any thread;
	 * the caller's handle or callback as for the *_async calls). */
	int (*submit)(struct kvs_client *c, const struct client_call *call,
		      kvs_client_cb cb, void *arg,
		      struct kvs_client_req **req_out);
	/* Starts @queued, the requests taken off the queue in order
	 * (progress thread, as the rest but nodes). */
	void (*start)(struct kvs_client *c, struct kvs_client_req *queued);
	/* Its own work after UCX's progress (closes, deadlines when @check,
	 * the member view); true if it did something. */
	bool (*progress)(struct kvs_client *c, uint64_t now, bool check);
	/* Whether anything is in flight or closing (then busy-poll). */
	bool (*busy)(struct kvs_client *c);
	/* Closes (the client stops); true once everything is idle.  @late:
	 * past the connect timeout, closes the peer never answers are left
	 * to the worker's destruction. */
	bool (*stop)(struct kvs_client *c, bool late);
	/* In kvs_client_close, the thread gone: closes what is left. */
	void (*destroy)(struct kvs_client *c);
	/* kvs_client_nodes (any thread). */
	int (*nodes)(struct kvs_client *c, bool ask,
		     struct kvs_client_node **out, size_t *n);
};

extern const struct client_ops client_direct_ops;
extern const struct client_ops client_cluster_ops;

/* client.c: runs the on_done of requests finished during the last UCX
 * progress; true if it ran any (progress thread). */
bool client_run_deferred(struct kvs_client *cl);
/* client.c: drives UCX (or lets another thread do it) until @req is
 * done. */
void client_drive(struct kvs_client *cl, struct kvs_client_req *req);

/* ---- a cluster client (nodes.c, route.c; progress thread) ---- */

/* route.c: queues a cluster call (the caller's handle or callback as
 * for the *_async calls). */
int route_submit(struct kvs_client *c, const struct client_call *call,
		 kvs_client_cb cb, void *arg, struct kvs_client_req **req_out);
/* route.c: starts a queued call (progress thread). */
void route_start(struct route *rt, struct kvs_client_req *req);
/* route.c: the call's members, as a node list for kvs_client_nodes. */
int route_members(struct route *rt, struct kvs_client_node **out, size_t *n);

/* nodes.c */
/* One turn of the cluster's own work: closing connections, pending
 * requests, deadlines, the member view; true if it did something. */
bool route_progress(struct route *rt, uint64_t now, bool check);
/* Whether anything is in flight or closing. */
bool route_busy(struct route *rt);
/* Closes every connection (the client stops); true once all are idle. */
bool route_shutdown(struct route *rt, bool force);
void route_destroy(struct route *rt);
/* A member's connection failed (conn_fail): marks the node down. */
void route_conn_failed(struct kvs_conn *conn, int status);
/* The handler of replies on a cluster client's worker. */
ucs_status_t route_on_reply(void *arg, const void *header, size_t header_len,
			    void *data, size_t len,
			    const ucp_am_recv_param_t *param);

#endif
