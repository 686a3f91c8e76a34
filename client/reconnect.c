/*
 * reconnect.c - a one-server client riding through a restart of its
 * server (a crash, an upgrade, a connection the network or a deadline
 * broke).
 *
 * Once the client has been connected, a failed connection is made again
 * on the progress thread as soon as a request wants it: a new endpoint,
 * then hello and proof as requests of the client's own (handshake_done),
 * tried again with a back-off (RECONNECT_MIN_MS doubling to
 * RECONNECT_MAX_MS) for as long as requests wait.  Requests wait in
 * client->waiting meanwhile, each within its own deadline: what could not
 * be sent in time fails with -KVS_ECONN (the server was unreachable), or
 * with the server's refusal of the key.  A client told to fail fast (the
 * decode runtime's block store, which takes an unreachable server for
 * misses) fails them at once instead and makes the connection again in
 * the background.
 *
 * A request in flight when the connection failed may or may not have been
 * carried out.  It is sent again on the new connection where that is safe
 * (retryable): lookup, exists, get and stat only read, and a put writes
 * blocks named by their content, so writing the same bytes under the same
 * id twice leaves what writing them once does.  Delete and the tail calls
 * are not sent again (a tail taken twice is lost, one put twice may come
 * back after its take): they fail with -KVS_ECONN.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "client_internal.h"
#include "common/bytes.h"
#include "kvstash/error.h"
#include "kvstash/log.h"

#define RECONNECT_MIN_MS 10u
#define RECONNECT_MAX_MS 200u

static bool stopping(struct kvs_client *cl)
{
	bool s;

	pthread_mutex_lock(&cl->lock);
	s = cl->stopping;
	pthread_mutex_unlock(&cl->lock);
	return s;
}

void client_mark_connected(struct kvs_client *cl)
{
	cl->connected = true;
	cl->backoff_ms = 0;
}

void kvs_client_fail_fast(struct kvs_client *client)
{
	if (client)
		__atomic_store_n(&client->fail_fast, true, __ATOMIC_RELAXED);
}

static bool fail_fast(struct kvs_client *cl)
{
	return __atomic_load_n(&cl->fail_fast, __ATOMIC_RELAXED);
}

bool client_may_send(struct kvs_client *cl)
{
	struct kvs_conn *conn = &cl->conn;

	if (conn->broken)
		/* nothing to wait for: conn_send fails the request */
		return !cl->connected || fail_fast(cl) || stopping(cl);
	return !cl->reconnecting && conn->inflight < conn->limits.max_inflight;
}

static bool retryable(uint16_t opcode)
{
	switch (opcode) {
	case KVS_OP_LOOKUP:
	case KVS_OP_EXISTS:
	case KVS_OP_GET:
	case KVS_OP_STAT:
	case KVS_OP_PUT:
		return true;
	default:
		return false;
	}
}

bool client_retry(struct kvs_client_req *req)
{
	struct kvs_client *cl = req->cl;

	if (cl->route || req->on_done || !cl->connected || fail_fast(cl) ||
	    !req->conn || !req->conn->broken ||
	    (req->status != -KVS_ECONN && req->status != -ECANCELED) ||
	    !retryable(req->opcode) || kvs_now_ns() >= req->deadline_ns ||
	    stopping(cl)) {
		/* a transfer cancelled with its connection: the cause is
		 * the connection */
		if (!cl->route && req->status == -ECANCELED && req->conn &&
		    req->conn->broken)
			req->status = -KVS_ECONN;
		return false;
	}
	/* what the lost exchange left is rewritten by the next reply */
	free(req->riov);
	free(req->scratch);
	req->riov = NULL;
	req->scratch = NULL;
	req->riov_n = 0;
	req->verify = false;
	req->send_req = req->recv_req = NULL;
	req->sending = req->receiving = req->in_table = false;
	req->replied = false;
	req->status = 0;
	req->conn = NULL;
	/* a new request id: a late reply of the old exchange is dropped */
	req_seal(cl, req, req->deadline_ns);
	__atomic_fetch_add(&cl->retries, 1, __ATOMIC_RELAXED);
	req->next = cl->waiting;
	cl->waiting = req;
	return true;
}

/* Fails the waiting requests that @keep does not keep with @status. */
static void fail_waiting(struct kvs_client *cl, uint64_t now, bool all,
			 int status)
{
	struct kvs_client_req **p = &cl->waiting;

	while (*p) {
		struct kvs_client_req *req = *p;

		if (!all && req->deadline_ns > now) {
			p = &req->next;
			continue;
		}
		*p = req->next;
		req->next = NULL;
		if (status == -KVS_ETIMEDOUT)
			cl->counters.timeouts++;
		req->status = status;
		req_complete(req);
	}
}

void client_waiting_deadlines(struct kvs_client *cl, uint64_t now)
{
	/* no connection to send them on: the server is unreachable */
	fail_waiting(cl, now, false,
		     cl->conn.broken || cl->reconnecting ? -KVS_ECONN
							 : -KVS_ETIMEDOUT);
}

static void schedule(struct kvs_client *cl, uint64_t now)
{
	uint32_t ms = cl->backoff_ms ? cl->backoff_ms * 2 : RECONNECT_MIN_MS;

	cl->backoff_ms = ms < RECONNECT_MAX_MS ? ms : RECONNECT_MAX_MS;
	/* clients that lost one server together spread their tries */
	ms = cl->backoff_ms +
	     (uint32_t)(((uintptr_t)cl >> 4) + cl->backoff_ms) %
		     RECONNECT_MIN_MS;
	cl->reconnect_at_ns = now + (uint64_t)ms * 1000000ull;
}

static void handshake_done(struct kvs_client_req *req);

/* Callers' threads read the limits (kvs_client_limits, the batch
 * check): a server restarted with the same ones leaves them unwritten. */
static void limit_set(uint32_t *limit, uint32_t value)
{
	if (*limit != value)
		__atomic_store_n(limit, value, __ATOMIC_RELAXED);
}

struct kvs_client_req *req_handshake_new(const struct kvs_server_tenant *t,
					 uint16_t opcode, const uint8_t *nonce)
{
	size_t tlen = strlen(t->name);
	struct kvs_client_req *req;

	if (opcode == KVS_OP_HELLO) {
		req = req_new(KVS_OP_HELLO, 0, 4 + tlen, 0);
		if (!req)
			return NULL;
		kvs_put16(req->frame + KVS_PROTO_HEADER_SIZE, (uint16_t)tlen);
		memcpy(req->frame + KVS_PROTO_HEADER_SIZE + 4, t->name, tlen);
		return req;
	}
	req = req_new(KVS_OP_AUTH, 0, KVS_PROTO_MAC_SIZE, 0);
	if (req && kvs_proto_auth_mac(t->key, t->key_len, nonce, t->name,
				      req->frame + KVS_PROTO_HEADER_SIZE)) {
		req_free(req);
		return NULL;
	}
	return req;
}

static struct kvs_client_req *handshake_req(struct kvs_client *cl,
					    uint16_t opcode)
{
	uint32_t ms = cl->opts.connect_timeout_ms;
	struct kvs_client_req *req =
		req_handshake_new(&cl->conn.tenant, opcode, cl->conn.nonce);

	if (!req)
		return NULL;
	req->on_done = handshake_done;
	req->owner = cl;
	req_seal(cl, req, kvs_now_ns() + (uint64_t)ms * 1000000ull);
	return req;
}

/* A hello or a proof of a new connection came back (or failed). */
static void handshake_done(struct kvs_client_req *req)
{
	struct kvs_client *cl = req->owner;
	struct kvs_conn *conn = &cl->conn;
	struct kvs_client_req *next = NULL;
	uint16_t opcode = req->opcode;
	int err = req->status;

	if (!err && opcode == KVS_OP_HELLO) {
		const uint8_t *b = req->hello;

		memcpy(conn->nonce, b, KVS_PROTO_NONCE_SIZE);
		limit_set(&conn->limits.max_batch, kvs_get32(b + 32));
		limit_set(&conn->limits.max_object, kvs_get32(b + 36));
		limit_set(&conn->limits.max_payload, kvs_get32(b + 40));
		limit_set(&conn->limits.max_inflight, kvs_get32(b + 44));
		if (!conn->limits.max_inflight || !conn->limits.max_batch)
			err = -KVS_EPROTO;
		else if (!(next = handshake_req(cl, KVS_OP_AUTH)))
			err = -ENOMEM;
	}
	req_free(req);
	if (!err && stopping(cl))
		err = -KVS_ECONN;
	if (next && !err) {
		conn_send(conn, next);
		return;
	}
	req_free(next);
	cl->reconnecting = false;
	if (!err) {
		__atomic_fetch_add(&cl->reconnects, 1, __ATOMIC_RELAXED);
		cl->backoff_ms = 0;
		kvs_log(KVS_LOG_INFO, "kvstash client: reconnected to %s",
			conn->address);
		return;
	}
	conn_fail(conn, err);
	schedule(cl, kvs_now_ns());
	if (err == -KVS_EAUTH || err == -KVS_EPROTO) {
		/* a refusal, not an outage: the waiting calls get it */
		kvs_log(KVS_LOG_ERR, "kvstash client: %s: reconnect: %s",
			conn->address, kvs_strerror(err));
		fail_waiting(cl, 0, true, err);
	}
}

/* A broken connection made fresh: the endpoint's state, none in flight. */
static void conn_reset(struct kvs_conn *conn)
{
	conn->broken = false;
	conn->timed_out = false;
	conn->closing = false;
	conn->close_req = NULL;
	conn->fail_status = 0;
	conn->ep = NULL;
}

void client_reconnect_turn(struct kvs_client *cl, uint64_t now)
{
	struct kvs_conn *conn = &cl->conn;
	struct kvs_client_req *hello;

	if (!cl->connected || !conn->broken || conn->closing ||
	    conn->inflight || cl->reconnecting ||
	    (!cl->waiting && !fail_fast(cl)) || now < cl->reconnect_at_ns)
		return;
	conn_reset(conn);
	if (conn_open(cl, conn, cl->address)) {
		conn->broken = true;
		conn->fail_status = -KVS_ECONN;
		schedule(cl, now);
		return;
	}
	hello = handshake_req(cl, KVS_OP_HELLO);
	if (!hello) {
		conn_fail(conn, -ENOMEM);
		schedule(cl, now);
		return;
	}
	cl->reconnecting = true;
	conn_send(conn, hello);
}
