/*
 * server.c - the server's listener, connections and request loop.
 *
 * A ucp_listener accepts connections; each gets a server endpoint with
 * peer error handling, so a vanished client is an error callback that
 * closes its connection, never a hang.  Requests arrive as active
 * messages (on_request): the frame is checked at once (a frame that
 * cannot be read, an unknown version or opcode: an error reply, and that
 * connection closes once it is sent; a limit: an error reply, the
 * connection goes on), the payload is received -- rendezvous payloads
 * with ucp_am_recv_data_nbx -- and the request joins the ready queue,
 * which the loop serves between progress calls.  Each turn ends with the
 * store's (kvs_store_poll): the reads and writes the turn's requests
 * queued go to the device in one submission, and the batches finished
 * send their replies.  The loop sleeps on the worker's event fd
 * (ucp_worker_arm), the store's (its ring's completions) and the stop
 * eventfd, 100 ms at most.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <openssl/rand.h>

#include "common/bytes.h"
#include "kvstash/error.h"
#include "kvstash/log.h"
#include "server_internal.h"

#define DRAIN_NS (5ull * 1000 * 1000 * 1000)
#define RECV_TIMEOUT_NS (10ull * 1000 * 1000 * 1000)

uint64_t elapsed_ns(const struct timespec *start)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return (uint64_t)(now.tv_sec - start->tv_sec) * 1000000000ull +
	       (uint64_t)(now.tv_nsec - start->tv_nsec);
}

static unsigned ep_hash(ucp_ep_h ep)
{
	return (unsigned)(((uintptr_t)ep >> 4) % SRV_HASH);
}

static struct srv_conn *conn_of_ep(struct kvs_server *srv, ucp_ep_h ep)
{
	for (struct srv_conn *c = srv->by_ep[ep_hash(ep)]; c; c = c->hnext)
		if (c->ep == ep)
			return c;
	return NULL;
}

static void conn_unhash(struct srv_conn *c)
{
	struct srv_conn **p = &c->srv->by_ep[ep_hash(c->ep)];

	for (; *p; p = &(*p)->hnext)
		if (*p == c) {
			*p = c->hnext;
			return;
		}
}

void conn_put(struct srv_conn *c)
{
	if (--c->refs)
		return;
	free(c);
}

void conn_request_close(struct srv_conn *c)
{
	c->close_requested = true;
}

static void on_ep_error(void *arg, ucp_ep_h ep, ucs_status_t status)
{
	struct srv_conn *c = arg;

	kvs_log(KVS_LOG_INFO, "kvstashd: connection %llu lost: %s",
		(unsigned long long)c->id, ucs_status_string(status));
	c->dead = true;
	c->close_requested = true;
}

static void on_connect(ucp_conn_request_h creq, void *arg)
{
	struct kvs_server *srv = arg;
	struct srv_conn *c;
	ucp_ep_params_t params = {
		.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST |
			      UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
			      UCP_EP_PARAM_FIELD_ERR_HANDLER,
		.conn_request = creq,
		.err_mode = UCP_ERR_HANDLING_MODE_PEER,
	};
	ucs_status_t st;

	if (srv->stopping) {
		ucp_listener_reject(srv->listener, creq);
		return;
	}
	if (srv->n_conns >= srv->limits_conns) {
		/* accepted only to be told why: the client reads the code */
		M_ADD(srv->m.refused[3], 1);
	}
	c = calloc(1, sizeof(*c));
	if (!c) {
		ucp_listener_reject(srv->listener, creq);
		return;
	}
	c->srv = srv;
	c->id = ++srv->next_conn_id;
	c->refs = 1;
	params.err_handler.cb = on_ep_error;
	params.err_handler.arg = c;
	st = ucp_ep_create(srv->ucx.worker, &params, &c->ep);
	if (st != UCS_OK) {
		kvs_log(KVS_LOG_ERR, "kvstashd: accept: %s",
			ucs_status_string(st));
		free(c);
		return;
	}
	c->over_limit = srv->n_conns >= srv->limits_conns;
	c->next = srv->conns;
	srv->conns = c;
	c->hnext = srv->by_ep[ep_hash(c->ep)];
	srv->by_ep[ep_hash(c->ep)] = c;
	srv->n_conns++;
	M_SET(srv->m.connections, srv->n_conns);
	M_ADD(srv->m.connections_total, 1);
	kvs_log(KVS_LOG_INFO, "kvstashd: connection %llu accepted",
		(unsigned long long)c->id);
}

static void ready_push(struct kvs_server *srv, struct srv_req *req)
{
	req->next = NULL;
	*srv->ready_tail = req;
	srv->ready_tail = &req->next;
}

static void receiving_del(struct kvs_server *srv, struct srv_req *req)
{
	if (!req->receiving)
		return;
	if (req->rprev)
		req->rprev->rnext = req->rnext;
	else
		srv->receiving = req->rnext;
	if (req->rnext)
		req->rnext->rprev = req->rprev;
	req->receiving = false;
}

static void req_free(struct kvs_server *srv, struct srv_req *req)
{
	receiving_del(srv, req);
	for (uint32_t i = 0; req->resv && i < req->f.count; i++)
		kvs_store_release(srv->opts.store, req->resv[i]);
	free(req->resv);
	free(req->dsts);
	free(req->riov);
	if (req->am_data)
		ucp_am_data_release(srv->ucx.worker, req->am_data);
	else if (req->owned)
		free(req->payload);
	free(req);
}

void req_done(struct srv_req *req)
{
	struct srv_conn *c = req->conn;

	c->inflight--;
	req_free(c->srv, req);
	conn_put(c);
}

static void on_payload(void *request, ucs_status_t status, size_t length,
		       void *user_data)
{
	struct srv_req *req = user_data;
	struct kvs_server *srv = req->conn->srv;

	if (request)
		ucp_request_free(request);
	receiving_del(srv, req);
	if (status != UCS_OK || length != req->payload_len) {
		/* a client that vanished mid-transfer: nothing was stored */
		kvs_log(KVS_LOG_INFO,
			"kvstashd: connection %llu: payload lost: %s",
			(unsigned long long)req->conn->id,
			ucs_status_string(status));
		req_done(req);
		return;
	}
	ready_push(srv, req);
}

static void reply_free(struct srv_reply *r);

struct srv_reply *reply_new(struct srv_req *req)
{
	struct srv_reply *r = calloc(1, sizeof(*r));

	if (!r)
		return NULL;
	r->conn = req->conn;
	r->conn->refs++;
	r->opcode = req->f.opcode;
	r->start = req->start;
	return r;
}

void reply_discard(struct srv_reply *r)
{
	if (r)
		reply_free(r);
}

static void reply_free(struct srv_reply *r)
{
	for (size_t i = 0; i < r->n_refs; i++)
		kvs_store_ref_release(r->refs[i]);
	free(r->refs);
	free(r->iov);
	free(r->owned);
	conn_put(r->conn);
	free(r);
}

static void on_reply_sent(void *request, ucs_status_t status, void *user_data)
{
	struct srv_reply *r = user_data;

	if (request)
		ucp_request_free(request);
	if (r->sprev) {
		*r->sprev = r->snext;
		if (r->snext)
			r->snext->sprev = r->sprev;
		r->sprev = NULL;
	}
	r->conn->sending--;
	if (r->close_after)
		conn_request_close(r->conn);
	reply_free(r);
}

void reply_send(struct kvs_server *srv, struct srv_reply *r)
{
	struct srv_conn *c = r->conn;
	ucp_request_param_t param = {
		.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
				UCP_OP_ATTR_FIELD_USER_DATA |
				UCP_OP_ATTR_FIELD_FLAGS,
		.cb.send = on_reply_sent,
		.user_data = r,
		.flags = UCP_AM_SEND_FLAG_REPLY,
	};
	unsigned op = r->opcode < KVS_OP_COUNT ? r->opcode : 0;
	void *sreq, *data = NULL;
	size_t count = 0;

	if (c->dead || c->closing) {
		reply_free(r);
		return;
	}
	/* one object goes as a contiguous buffer (UCX's zero-copy paths
	 * take those more readily than an iov), several as an iov */
	if (r->iov_n == 1) {
		data = r->iov[0].buffer;
		count = r->iov[0].length;
	} else if (r->iov_n) {
		param.op_attr_mask |= UCP_OP_ATTR_FIELD_DATATYPE;
		param.datatype = ucp_dt_make_iov();
		data = r->iov;
		count = r->iov_n;
	}
	M_ADD(srv->m.bytes_out[op], r->bytes);
	metrics_latency(&srv->m, op, elapsed_ns(&r->start));
	c->sending++;
	sreq = ucp_am_send_nbx(c->ep, KVS_PROTO_AM_REPLY, r->frame,
			       r->frame_len, data, count, &param);
	if (UCS_PTR_IS_PTR(sreq)) {
		r->snext = srv->sending_replies;
		if (r->snext)
			r->snext->sprev = &r->snext;
		r->sprev = &srv->sending_replies;
		srv->sending_replies = r;
		return;
	}
	on_reply_sent(NULL, UCS_PTR_STATUS(sreq), r);
}

static void reply_error_to(struct kvs_server *srv, struct srv_conn *c,
			   uint16_t opcode, uint64_t req_id, int err,
			   bool close)
{
	struct srv_req tmp = { .conn = c, .f.opcode = opcode };
	struct srv_reply *r;
	struct kvs_proto_frame f = {
		.version = KVS_PROTO_VERSION,
		.opcode = opcode >= KVS_OP_COUNT || opcode == 0
				  ? KVS_OP_ERROR
				  : (uint16_t)(opcode | KVS_OP_REPLY),
		.req_id = req_id,
		.status = err,
	};

	clock_gettime(CLOCK_MONOTONIC, &tmp.start);
	if (err && opcode < KVS_OP_COUNT)
		M_ADD(srv->m.errors[opcode], 1);
	r = reply_new(&tmp);
	if (!r) {
		conn_request_close(c);
		return;
	}
	kvs_proto_header_encode(&f, r->frame);
	r->frame_len = KVS_PROTO_HEADER_SIZE;
	r->close_after = close;
	reply_send(srv, r);
}

void reply_error(struct kvs_server *srv, struct srv_req *req, int err,
		 bool close)
{
	reply_error_to(srv, req->conn, req->f.opcode, req->f.req_id, err,
		       close);
}

/* The first check of a request frame; 0 to go on, else answered. */
static int intake_check(struct kvs_server *srv, struct srv_conn *c,
			const void *header, size_t header_len, size_t len,
			struct kvs_proto_frame *f)
{
	int err = kvs_proto_frame_decode(header, header_len, f);

	if (err) {
		kvs_log(KVS_LOG_INFO,
			"kvstashd: connection %llu: bad frame (%s): closed",
			(unsigned long long)c->id, kvs_strerror(err));
		M_ADD(srv->m.protocol_errors, 1);
		reply_error_to(srv, c, KVS_OP_ERROR, 0, err, true);
		return err;
	}
	err = kvs_proto_request_check(f, len, &srv->limits);
	if (err == -KVS_EBATCH || err == -KVS_ETOOBIG) {
		M_ADD(srv->m.refused[err == -KVS_ETOOBIG ? 0 : 1], 1);
		reply_error_to(srv, c, f->opcode, f->req_id, err, false);
		return err;
	}
	if (err) {
		kvs_log(KVS_LOG_INFO,
			"kvstashd: connection %llu: %s request refused (%s): "
			"closed",
			(unsigned long long)c->id,
			kvs_proto_opcode_name(f->opcode), kvs_strerror(err));
		M_ADD(srv->m.protocol_errors, 1);
		reply_error_to(srv, c, f->opcode, f->req_id, err, true);
		return err;
	}
	if (c->over_limit) {
		reply_error_to(srv, c, f->opcode, f->req_id, -KVS_ECONNLIMIT,
			       true);
		return -KVS_ECONNLIMIT;
	}
	if (!c->authed && f->opcode != KVS_OP_HELLO &&
	    f->opcode != KVS_OP_AUTH) {
		M_ADD(srv->m.auth_failures, 1);
		reply_error_to(srv, c, f->opcode, f->req_id, -KVS_EAUTH, true);
		return -KVS_EAUTH;
	}
	if (c->inflight >= srv->limits_inflight) {
		M_ADD(srv->m.refused[2], 1);
		reply_error_to(srv, c, f->opcode, f->req_id, -KVS_EBUSY, false);
		return -KVS_EBUSY;
	}
	return 0;
}

/* Reserves a store slot for every object of a put, so its payload lands
 * in place; 0, or an error after which nothing is reserved (the payload
 * then goes to a buffer of its own). */
static int reserve_put(struct kvs_server *srv, struct srv_req *req)
{
	uint32_t n = req->f.count;

	req->resv = calloc(n, sizeof(*req->resv));
	req->dsts = calloc(n, sizeof(*req->dsts));
	req->riov = calloc(n, sizeof(*req->riov));
	if (!req->resv || !req->dsts || !req->riov)
		goto undo;
	for (uint32_t i = 0; i < n; i++) {
		uint32_t len = kvs_get32(req->f.body +
					 (size_t)i * KVS_PROTO_ITEM_SIZE);

		if (kvs_store_reserve(srv->opts.store, len, &req->resv[i],
				      &req->dsts[i]))
			goto undo;
		req->riov[i].buffer = req->dsts[i];
		req->riov[i].length = len;
	}
	return 0;
undo:
	for (uint32_t i = 0; req->resv && i < n; i++)
		kvs_store_release(srv->opts.store, req->resv[i]);
	free(req->resv);
	free(req->dsts);
	free(req->riov);
	req->resv = NULL;
	req->dsts = NULL;
	req->riov = NULL;
	return -ENOSPC;
}

/* Whether @len bytes at @p lie in the store's arena, mapped for UCX. */
static bool in_arena(const struct kvs_server *srv, const void *p, size_t len)
{
	const uint8_t *b = p;

	return srv->arena_memh && b >= srv->arena_base &&
	       len <= srv->arena_len &&
	       (size_t)(b - srv->arena_base) <= srv->arena_len - len;
}

/* Starts the rendezvous receive of @req's payload into @buf (@count iov
 * entries with @iov, else contiguous); tracked for its timeout.  A
 * payload landing in store slots is received with the arena's memory
 * handle, so UCX registers nothing for it (UCX 1.13 uses the handle for a
 * contiguous buffer and ignores it for an iov; later versions use it for
 * both, every entry lying in the one mapping). */
static void receive_payload(struct kvs_server *srv, struct srv_req *req,
			    void *data, void *buf, size_t count, bool iov)
{
	ucp_request_param_t rparam = {
		.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
				UCP_OP_ATTR_FIELD_USER_DATA,
		.cb.recv_am = on_payload,
		.user_data = req,
	};
	bool mapped = count > 0;
	void *rreq;

	if (iov) {
		const ucp_dt_iov_t *v = buf;

		rparam.op_attr_mask |= UCP_OP_ATTR_FIELD_DATATYPE;
		rparam.datatype = ucp_dt_make_iov();
		for (size_t i = 0; i < count && mapped; i++)
			mapped = in_arena(srv, v[i].buffer, v[i].length);
	} else {
		mapped = in_arena(srv, buf, count);
	}
	if (mapped) {
		rparam.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
		rparam.memh = srv->arena_memh;
		M_ADD(srv->m.rndv_memh, 1);
	} else {
		M_ADD(srv->m.rndv_plain, 1);
	}
	req->receiving = true;
	req->recv_start_ns = now_ns();
	req->rprev = NULL;
	req->rnext = srv->receiving;
	if (srv->receiving)
		srv->receiving->rprev = req;
	srv->receiving = req;
	rreq = ucp_am_recv_data_nbx(srv->ucx.worker, data, buf, count, &rparam);
	if (rreq == NULL)
		on_payload(NULL, UCS_OK, req->payload_len, req);
	else if (UCS_PTR_IS_ERR(rreq))
		on_payload(NULL, UCS_PTR_STATUS(rreq), 0, req);
}

static ucs_status_t on_request(void *arg, const void *header, size_t header_len,
			       void *data, size_t len,
			       const ucp_am_recv_param_t *param)
{
	struct kvs_server *srv = arg;
	bool rndv = param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV;
	struct kvs_proto_frame f;
	struct srv_conn *c;
	struct srv_req *req;

	if (!(param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP))
		return UCS_OK; /* no way to answer */
	c = conn_of_ep(srv, param->reply_ep);
	if (!c || c->dead || c->close_requested)
		return UCS_OK;
	if (intake_check(srv, c, header, header_len, len, &f))
		return UCS_OK;
	req = calloc(1, sizeof(*req));
	if (!req) {
		reply_error_to(srv, c, f.opcode, f.req_id, -ENOMEM, false);
		return UCS_OK;
	}
	clock_gettime(CLOCK_MONOTONIC, &req->start);
	memcpy(req->frame, header, header_len);
	req->f = f;
	req->f.body = req->frame + KVS_PROTO_HEADER_SIZE;
	req->conn = c;
	req->payload_len = len;
	c->refs++;
	c->inflight++;
	M_ADD(srv->m.requests[f.opcode], 1);
	M_ADD(srv->m.bytes_in[f.opcode], len + header_len);
	if (len == 0) {
		ready_push(srv, req);
		return UCS_OK;
	}
	/* a put lands in store slots reserved for it: no copy later */
	if (f.opcode == KVS_OP_PUT && reserve_put(srv, req) == 0) {
		if (rndv && f.count == 1)
			receive_payload(srv, req, data, req->dsts[0], len,
					false);
		else if (rndv)
			receive_payload(srv, req, data, req->riov, f.count,
					true);
		if (rndv)
			return UCS_OK;
		const uint8_t *p = data;

		for (uint32_t i = 0; i < f.count; i++) {
			memcpy(req->dsts[i], p, req->riov[i].length);
			p += req->riov[i].length;
		}
		ready_push(srv, req);
		return UCS_OK;
	}
	if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_DATA) {
		req->am_data = data;
		req->payload = data;
		ready_push(srv, req);
		return UCS_INPROGRESS;
	}
	req->payload = malloc(len);
	req->owned = true;
	if (!req->payload) {
		c->inflight--;
		conn_put(c);
		free(req);
		reply_error_to(srv, c, f.opcode, f.req_id, -ENOMEM, false);
		return UCS_OK;
	}
	if (!rndv) {
		memcpy(req->payload, data, len);
		ready_push(srv, req);
		return UCS_OK;
	}
	receive_payload(srv, req, data, req->payload, len, false);
	return UCS_OK;
}

/* ---- closing --------------------------------------------------------- */

static void conn_unlink(struct kvs_server *srv, struct srv_conn *c)
{
	struct srv_conn **p = &srv->conns;

	for (; *p; p = &(*p)->next)
		if (*p == c) {
			*p = c->next;
			break;
		}
	conn_unhash(c);
	srv->n_conns--;
	M_SET(srv->m.connections, srv->n_conns);
	conn_put(c);
}

/* Starts the close of connections asked to close and nothing in flight,
 * and reaps those whose close completed. */
static void reap_connections(struct kvs_server *srv, bool force_all)
{
	struct srv_conn *c, *next;

	for (c = srv->conns; c; c = next) {
		next = c->next;
		if (c->closing) {
			if (c->close_req &&
			    ucp_request_check_status(c->close_req) ==
				    UCS_INPROGRESS)
				continue;
			if (c->close_req)
				ucp_request_free(c->close_req);
			c->close_req = NULL;
			kvs_log(KVS_LOG_INFO,
				"kvstashd: connection %llu closed",
				(unsigned long long)c->id);
			conn_unlink(srv, c);
			continue;
		}
		if (!force_all && (!c->close_requested ||
				   (!c->dead && (c->inflight || c->sending))))
			continue;
		ucp_request_param_t param = {
			.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
			.flags = (c->dead || force_all)
					 ? UCP_EP_CLOSE_FLAG_FORCE
					 : 0,
		};
		void *req = ucp_ep_close_nbx(c->ep, &param);

		c->closing = true;
		c->close_req = UCS_PTR_IS_PTR(req) ? req : NULL;
	}
}

/* ---- the loop -------------------------------------------------------- */

static void serve_ready(struct kvs_server *srv)
{
	struct srv_req *req;

	while ((req = srv->ready)) {
		srv->ready = req->next;
		if (!srv->ready)
			srv->ready_tail = &srv->ready;
		/* stopping: what was not begun is left to the next daemon
		 * (the client resends it after its reconnect) */
		if (req->conn->dead || req->conn->closing || srv->stopping) {
			req_done(req);
			continue;
		}
		if (kvs_proto_payload_check(&req->f, req->payload,
					    req->payload_len)) {
			M_ADD(srv->m.protocol_errors, 1);
			reply_error(srv, req, -KVS_EPROTO, true);
			req_done(req);
			continue;
		}
		serve(srv, req);
	}
}

static void housekeeping(struct kvs_server *srv)
{
	uint64_t now = now_ns(), expired = tails_expire(srv->tails, now);
	uint64_t n, bytes;

	/* a payload that does not arrive in time: its sender is stuck; the
	 * connection goes (which cancels the receive) well before the
	 * store reclaims the slots reserved for it */
	for (struct srv_req *r = srv->receiving; r; r = r->rnext)
		if (now - r->recv_start_ns > RECV_TIMEOUT_NS &&
		    !r->conn->dead) {
			kvs_log(KVS_LOG_WARN,
				"kvstashd: connection %llu: payload not "
				"received in %llu s: closed",
				(unsigned long long)r->conn->id,
				(unsigned long long)(RECV_TIMEOUT_NS /
						     1000000000ull));
			r->conn->dead = true;
			r->conn->close_requested = true;
		}

	if (expired) {
		M_ADD(srv->m.tails_expired, expired);
		kvs_log(KVS_LOG_INFO, "kvstashd: %llu tails expired",
			(unsigned long long)expired);
	}
	tails_usage(srv->tails, &n, &bytes);
	M_SET(srv->m.tails, n);
	M_SET(srv->m.tail_bytes, bytes);
	if (srv->opts.tick)
		srv->opts.tick(srv->opts.tick_arg);
}

static bool busy(struct kvs_server *srv)
{
	for (struct srv_conn *c = srv->conns; c; c = c->next)
		if (!c->dead && (c->inflight || c->sending))
			return true;
	return srv->ready != NULL;
}

int kvs_server_run(struct kvs_server *srv)
{
	struct timespec last = { 0 }, drain_start;
	uint64_t v, last_work = now_ns(), spin_ns, drained_ns;
	unsigned turns = 0;

	spin_ns = (uint64_t)(srv->opts.spin_us ? srv->opts.spin_us : 50) * 1000;
	while (!srv->stopping) {
		unsigned progressed = 0, n;
		bool served = srv->ready != NULL;
		int fds[2] = { srv->stop_fd, srv->store_fd };

		while ((n = ucp_worker_progress(srv->ucx.worker)))
			progressed += n;
		served |= srv->ready != NULL;
		serve_ready(srv);
		/* the store's turn: this turn's reads and writes go to the
		 * device together, finished batches send their replies */
		progressed += kvs_store_poll(srv->opts.store);
		reap_connections(srv, false);
		if (progressed || served)
			last_work = now_ns();
		if (elapsed_ns(&last) > 100000000ull) {
			housekeeping(srv);
			clock_gettime(CLOCK_MONOTONIC, &last);
		}
		/* busy for a while after work: some transports (shared memory
		 * copies) raise no event for every step of a transfer, and a
		 * wakeup costs more than the step */
		if (now_ns() - last_work < spin_ns) {
			if ((++turns & 1023) == 0 &&
			    read(srv->stop_fd, &v, sizeof(v)) > 0)
				srv->stopping = 1;
			sched_yield();
			continue;
		}
		if ((kvs_ucx_wait_fds(&srv->ucx, fds, 2, 100) & 1) &&
		    read(srv->stop_fd, &v, sizeof(v)) > 0)
			srv->stopping = 1;
		last_work = now_ns();
	}
	/* stop accepting; finish what is in flight, then close everyone */
	kvs_log(KVS_LOG_INFO, "kvstashd: stopping: draining requests");
	if (srv->listener) {
		ucp_listener_destroy(srv->listener);
		srv->listener = NULL;
	}
	/* each connection closes once its requests begun are answered;
	 * new ones are not read */
	for (struct srv_conn *c = srv->conns; c; c = c->next)
		conn_request_close(c);
	clock_gettime(CLOCK_MONOTONIC, &drain_start);
	while (busy(srv) && elapsed_ns(&drain_start) < DRAIN_NS) {
		kvs_ucx_wait(&srv->ucx, srv->store_fd, 1);
		while (ucp_worker_progress(srv->ucx.worker))
			;
		serve_ready(srv);
		kvs_store_poll(srv->opts.store);
		reap_connections(srv, false);
	}
	drained_ns = elapsed_ns(&drain_start);
	reap_connections(srv, true);
	clock_gettime(CLOCK_MONOTONIC, &drain_start);
	while (srv->conns && elapsed_ns(&drain_start) < DRAIN_NS) {
		ucp_worker_progress(srv->ucx.worker);
		reap_connections(srv, false);
	}
	kvs_log(KVS_LOG_INFO,
		"kvstashd: drained in %llu ms, connections closed in %llu ms",
		(unsigned long long)(drained_ns / 1000000),
		(unsigned long long)(elapsed_ns(&drain_start) / 1000000));
	return 0;
}

void kvs_server_stop(struct kvs_server *srv)
{
	uint64_t one = 1;

	/* a write to an eventfd is async-signal-safe */
	if (write(srv->stop_fd, &one, sizeof(one)) < 0)
		srv->stopping = 1;
}

/* ---- create / destroy ------------------------------------------------ */

static int tenants_init(struct kvs_server *srv, const struct kvs_server_opts *o)
{
	srv->tenants =
		calloc(o->n_tenants ? o->n_tenants : 1, sizeof(*srv->tenants));
	if (!srv->tenants)
		return -ENOMEM;
	for (size_t i = 0; i < o->n_tenants; i++) {
		struct srv_tenant *t = &srv->tenants[i];
		/* label, namespace length, namespace, zero fill: exactly two
		 * SHA-256 blocks, absorbed once per tenant */
		uint8_t prefix[128] = "kvstash-ns-v1";
		size_t nlen = strnlen(o->tenants[i].ns, KVS_TENANT_MAX);

		t->cfg = o->tenants[i];
		prefix[16] = (uint8_t)nlen;
		memcpy(prefix + 17, t->cfg.ns, nlen);
		t->ns_prefix = EVP_MD_CTX_new();
		t->ns_scratch = EVP_MD_CTX_new();
		srv->n_tenants++;
		if (!t->ns_prefix || !t->ns_scratch ||
		    !EVP_DigestInit_ex(t->ns_prefix, EVP_sha256(), NULL) ||
		    !EVP_DigestUpdate(t->ns_prefix, prefix, sizeof(prefix)))
			return -ENOMEM;
	}
	return 0;
}

int kvs_server_create(const struct kvs_server_opts *opts,
		      struct kvs_server **out)
{
	struct kvs_server *srv = calloc(1, sizeof(*srv));
	struct sockaddr_storage ss;
	socklen_t slen;
	ucp_am_handler_param_t am = {
		.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID |
			      UCP_AM_HANDLER_PARAM_FIELD_CB |
			      UCP_AM_HANDLER_PARAM_FIELD_ARG,
		.id = KVS_PROTO_AM_REQUEST,
		.cb = on_request,
	};
	ucp_listener_params_t lp = {
		.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR |
			      UCP_LISTENER_PARAM_FIELD_CONN_HANDLER,
	};
	ucp_listener_attr_t la = {
		.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR,
	};
	ucs_status_t st;
	int err;

	if (!srv)
		return -ENOMEM;
	srv->opts = *opts;
	srv->stop_fd = -1;
	srv->ready_tail = &srv->ready;
	clock_gettime(CLOCK_MONOTONIC, &srv->started);
	srv->limits.max_batch = opts->max_batch ? opts->max_batch : 256;
	if (srv->limits.max_batch > KVS_PROTO_BATCH_CEILING)
		srv->limits.max_batch = KVS_PROTO_BATCH_CEILING;
	srv->limits.max_object =
		opts->max_object ? opts->max_object : 16u << 20;
	srv->limits.max_payload =
		opts->max_payload ? opts->max_payload : 64ull << 20;
	srv->limits_inflight = opts->max_inflight ? opts->max_inflight : 64;
	srv->limits_conns =
		opts->max_connections ? opts->max_connections : 1024;
	if (!opts->store || !opts->listen ||
	    kvs_ucx_parse_addr(opts->listen, &ss, &slen)) {
		kvs_log(KVS_LOG_ERR, "kvstashd: bad listen address '%s'",
			opts->listen ? opts->listen : "");
		err = -KVS_EPARAM;
		goto fail;
	}
	err = tenants_init(srv, opts);
	if (err)
		goto fail;
	err = tails_create(opts->tail_capacity ? opts->tail_capacity
					       : 256ull << 20,
			   &srv->tails);
	if (err)
		goto fail;
	srv->stop_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (srv->stop_fd < 0) {
		err = -errno;
		goto fail;
	}
	srv->store_fd = kvs_store_event_fd(opts->store);
	err = kvs_ucx_init(&srv->ucx, opts->shared_memory, false);
	if (err)
		goto fail;
	am.arg = srv;
	st = ucp_worker_set_am_recv_handler(srv->ucx.worker, &am);
	if (st != UCS_OK)
		goto fail_ucx;
	lp.sockaddr.addr = (const struct sockaddr *)&ss;
	lp.sockaddr.addrlen = slen;
	lp.conn_handler.cb = on_connect;
	lp.conn_handler.arg = srv;
	st = ucp_listener_create(srv->ucx.worker, &lp, &srv->listener);
	if (st != UCS_OK)
		goto fail_ucx;
	st = ucp_listener_query(srv->listener, &la);
	if (st != UCS_OK)
		goto fail_ucx;
	srv->port =
		ntohs(la.sockaddr.ss_family == AF_INET6
			      ? ((struct sockaddr_in6 *)&la.sockaddr)->sin6_port
			      : ((struct sockaddr_in *)&la.sockaddr)->sin_port);
	if (opts->metrics) {
		err = metrics_start(srv, opts->metrics);
		if (err)
			goto fail;
	}
	*out = srv;
	return 0;
fail_ucx:
	kvs_log(KVS_LOG_ERR, "kvstashd: listen on %s: %s", opts->listen,
		ucs_status_string(st));
	err = kvs_ucx_error(st);
fail:
	kvs_server_destroy(srv);
	return err;
}

int kvs_server_map_arena(struct kvs_server *srv, void *base, size_t len)
{
	ucp_mem_map_params_t p = {
		.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS |
			      UCP_MEM_MAP_PARAM_FIELD_LENGTH,
		.address = base,
		.length = len,
	};
	ucs_status_t st;

	if (srv->arena_memh)
		return -KVS_EPARAM;
	st = ucp_mem_map(srv->ucx.context, &p, &srv->arena_memh);
	if (st != UCS_OK) {
		kvs_log(KVS_LOG_WARN, "kvstashd: arena not mapped: %s",
			ucs_status_string(st));
		srv->arena_memh = NULL;
		return kvs_ucx_error(st);
	}
	srv->arena_base = base;
	srv->arena_len = len;
	return 0;
}

int kvs_server_port(const struct kvs_server *srv, int metrics)
{
	return metrics ? srv->metrics_port : srv->port;
}

void kvs_server_destroy(struct kvs_server *srv)
{
	struct srv_req *req;

	if (!srv)
		return;
	metrics_stop(srv);
	if (srv->listener)
		ucp_listener_destroy(srv->listener);
	if (srv->arena_memh)
		ucp_mem_unmap(srv->ucx.context, srv->arena_memh);
	if (srv->ucx.worker) {
		reap_connections(srv, true);
		for (int i = 0; srv->conns && i < 100000; i++) {
			ucp_worker_progress(srv->ucx.worker);
			reap_connections(srv, false);
		}
	}
	while ((req = srv->ready)) {
		srv->ready = req->next;
		req_done(req);
	}
	kvs_ucx_fini(&srv->ucx);
	/* sends UCX never finished (a peer gone mid-rendezvous): the worker
	 * is gone, so their buffers and store references are free now */
	while (srv->sending_replies) {
		struct srv_reply *r = srv->sending_replies;

		srv->sending_replies = r->snext;
		kvs_log(KVS_LOG_INFO,
			"kvstashd: connection %llu: a reply never sent "
			"released",
			(unsigned long long)r->conn->id);
		reply_free(r);
	}
	tails_destroy(srv->tails);
	for (size_t i = 0; i < srv->n_tenants; i++) {
		EVP_MD_CTX_free(srv->tenants[i].ns_prefix);
		EVP_MD_CTX_free(srv->tenants[i].ns_scratch);
	}
	free(srv->tenants);
	if (srv->stop_fd >= 0)
		close(srv->stop_fd);
	free(srv);
}
