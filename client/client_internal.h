/*
 * client_internal.h - private structures of libkvstash.
 *
 *   conn.c    one connection to one server: endpoint, requests in
 *             flight, replies, failure (a multi-server client holds
 *             several on one worker)
 *   client.c  the public API: the progress thread, the submission
 *             queue, handles, synchronous forms
 *   device.c  kvs_client_get_to_device (CUDA builds)
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

#include "kvstash/client.h"
#include "kvstash/transport.h"
#include "transport/proto.h"
#include "transport/ucx.h"

#define CONN_HASH 256u

struct kvs_conn;

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
};

struct kvs_conn {
	struct kvs_client *cl;
	ucp_ep_h ep;
	bool broken; /* failed or timed out: everything fails */
	bool closing;
	void *close_req;
	int fail_status;
	struct kvs_server_tenant tenant;
	struct kvs_client_limits limits;
	uint32_t inflight;
	struct kvs_client_req *table[CONN_HASH];
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
};

uint64_t client_now_ns(void);

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

/* client.c: a request is finished (status set): wake or call back. */
void req_complete(struct kvs_client_req *req);

#endif
