/*
 * conn.c - one client connection to one server, on the progress thread.
 *
 * Requests in flight sit in a table by request id until their reply
 * arrives; a request is finished when both its send and its reply (and
 * the reply's payload, received straight into the caller's buffers by
 * rendezvous) are done.  A peer error or a deadline fails the whole
 * connection: the endpoint is force-closed, which makes UCX give up every
 * operation on the caller's memory, and every request in flight finishes
 * with the error.  A late reply to a forgotten request is dropped.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "client_internal.h"
#include "common/bytes.h"
#include "kvstash/error.h"
#include "kvstash/log.h"

static unsigned id_hash(uint64_t id)
{
	return (unsigned)(id % CONN_HASH);
}

static void table_add(struct kvs_conn *conn, struct kvs_client_req *req)
{
	unsigned h = id_hash(req->id);

	req->hnext = conn->table[h];
	conn->table[h] = req;
	req->in_table = true;
	conn->inflight++;
}

static void table_del(struct kvs_conn *conn, struct kvs_client_req *req)
{
	struct kvs_client_req **p = &conn->table[id_hash(req->id)];

	if (!req->in_table)
		return;
	for (; *p; p = &(*p)->hnext)
		if (*p == req) {
			*p = req->hnext;
			break;
		}
	req->in_table = false;
	conn->inflight--;
}

static struct kvs_client_req *table_find(struct kvs_conn *conn, uint64_t id)
{
	for (struct kvs_client_req *r = conn->table[id_hash(id)]; r;
	     r = r->hnext)
		if (r->id == id)
			return r;
	return NULL;
}

/* Finishes @req once its send and its reply are both over. */
static void maybe_finish(struct kvs_client_req *req)
{
	if (req->sending || req->receiving || !req->replied)
		return;
	table_del(req->conn, req);
	req_complete(req);
}

static void on_ep_error(void *arg, ucp_ep_h ep, ucs_status_t status)
{
	struct kvs_conn *conn = arg;

	kvs_log(KVS_LOG_INFO, "kvstash client: connection to %s lost: %s",
		conn->address, ucs_status_string(status));
	conn_fail(conn, -KVS_ECONN);
}

int conn_open(struct kvs_client *cl, struct kvs_conn *conn, const char *address)
{
	struct sockaddr_storage ss;
	socklen_t slen;
	ucp_ep_params_t params = {
		.field_mask = UCP_EP_PARAM_FIELD_FLAGS |
			      UCP_EP_PARAM_FIELD_SOCK_ADDR |
			      UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
			      UCP_EP_PARAM_FIELD_ERR_HANDLER,
		.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER,
		.err_mode = UCP_ERR_HANDLING_MODE_PEER,
	};
	ucs_status_t st;

	conn->cl = cl;
	if (kvs_ucx_parse_addr(address, &ss, &slen)) {
		kvs_log(KVS_LOG_ERR, "kvstash client: bad address '%s'",
			address);
		return -KVS_EPARAM;
	}
	params.sockaddr.addr = (const struct sockaddr *)&ss;
	params.sockaddr.addrlen = slen;
	params.err_handler.cb = on_ep_error;
	params.err_handler.arg = conn;
	st = ucp_ep_create(cl->ucx.worker, &params, &conn->ep);
	if (st != UCS_OK) {
		kvs_log(KVS_LOG_ERR, "kvstash client: connect to %s: %s",
			address, ucs_status_string(st));
		conn->ep = NULL;
		return -KVS_ECONN;
	}
	return 0;
}

static void on_sent(void *request, ucs_status_t status, void *user_data)
{
	struct kvs_client_req *req = user_data;

	if (request)
		ucp_request_free(request);
	req->send_req = NULL;
	req->sending = false;
	if (status != UCS_OK && !req->replied) {
		req->status = kvs_ucx_error(status);
		req->replied = true;
	}
	maybe_finish(req);
}

void conn_send(struct kvs_conn *conn, struct kvs_client_req *req)
{
	ucp_request_param_t param = {
		.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
				UCP_OP_ATTR_FIELD_USER_DATA |
				UCP_OP_ATTR_FIELD_FLAGS,
		.cb.send = on_sent,
		.user_data = req,
		.flags = UCP_AM_SEND_FLAG_REPLY,
	};
	const void *data = req->payload;
	size_t count = req->payload_len;
	void *sreq;

	req->conn = conn;
	if (conn->broken || !conn->ep) {
		req->status =
			conn->fail_status ? conn->fail_status : -KVS_ECONN;
		req_complete(req);
		return;
	}
	if (req->iov_n == 1) { /* contiguous: see reply_send */
		data = req->iov[0].buffer;
		count = req->iov[0].length;
	} else if (req->iov_n) {
		param.op_attr_mask |= UCP_OP_ATTR_FIELD_DATATYPE;
		param.datatype = ucp_dt_make_iov();
		data = req->iov;
		count = req->iov_n;
	}
	table_add(conn, req);
	req->sending = true;
	sreq = ucp_am_send_nbx(conn->ep, KVS_PROTO_AM_REQUEST, req->frame,
			       req->frame_len, data, count, &param);
	if (UCS_PTR_IS_PTR(sreq))
		req->send_req = sreq;
	else
		on_sent(NULL, UCS_PTR_STATUS(sreq), req);
}

/* ---- replies --------------------------------------------------------- */

static void on_data(void *request, ucs_status_t status, size_t length,
		    void *user_data)
{
	struct kvs_client_req *req = user_data;

	ucp_request_free(request);
	req->recv_req = NULL;
	req->receiving = false;
	if (status != UCS_OK && req->status == 0)
		req->status = kvs_ucx_error(status);
	maybe_finish(req);
}

/* Lands @len bytes of reply payload in req->riov. */
static void receive(struct kvs_client_req *req, void *data, size_t len,
		    const ucp_am_recv_param_t *param)
{
	ucp_request_param_t rp = {
		.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
				UCP_OP_ATTR_FIELD_USER_DATA |
				UCP_OP_ATTR_FIELD_DATATYPE,
		.cb.recv_am = on_data,
		.user_data = req,
		.datatype = ucp_dt_make_iov(),
	};
	void *rreq;

	if (!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) {
		const uint8_t *p = data;

		for (size_t i = 0; i < req->riov_n; i++) {
			memcpy(req->riov[i].buffer, p, req->riov[i].length);
			p += req->riov[i].length;
		}
		return;
	}
	req->receiving = true;
	if (req->riov_n == 1) /* contiguous: see the server's reply_send */
		rp.op_attr_mask &= ~(uint32_t)UCP_OP_ATTR_FIELD_DATATYPE;
	rreq = ucp_am_recv_data_nbx(
		req->cl->ucx.worker, data,
		req->riov_n == 1 ? req->riov[0].buffer : (void *)req->riov,
		req->riov_n == 1 ? req->riov[0].length : req->riov_n, &rp);
	if (rreq == NULL) {
		req->receiving = false;
	} else if (UCS_PTR_IS_ERR(rreq)) {
		req->receiving = false;
		req->status = kvs_ucx_error(UCS_PTR_STATUS(rreq));
	} else {
		req->recv_req = rreq;
	}
}

/* Places a get reply's objects: the caller's buffers, or scratch for an
 * object larger than its buffer.  0 or -ENOMEM. */
static int place_get(struct kvs_client_req *req,
		     const struct kvs_proto_frame *f)
{
	size_t scratch = 0, off = 0;

	req->riov = calloc(req->count, sizeof(*req->riov));
	if (!req->riov)
		return -ENOMEM;
	for (uint32_t i = 0; i < req->count; i++) {
		const uint8_t *it = f->body + (size_t)i * KVS_PROTO_ITEM_SIZE;
		int32_t st = (int32_t)kvs_get32(it);
		uint32_t len = kvs_get32(it + 4);

		req->results[i] = st;
		req->lens[i] = st ? 0 : len;
		if (!st && len > req->caps[i])
			scratch = scratch > len ? scratch : len;
	}
	if (scratch && !(req->scratch = malloc(scratch)))
		return -ENOMEM;
	for (uint32_t i = 0; i < req->count; i++) {
		if (req->results[i])
			continue;
		req->riov[req->riov_n].length = req->lens[i];
		if (req->lens[i] > req->caps[i]) {
			/* the bytes must go somewhere: the scratch, reused */
			req->riov[req->riov_n++].buffer = req->scratch;
			req->results[i] = -ENOSPC;
		} else {
			req->riov[req->riov_n++].buffer = req->bufs[i];
		}
		off += req->lens[i];
	}
	req->verify = true;
	return 0;
}

static int place_tail(struct kvs_client_req *req,
		      const struct kvs_proto_frame *f)
{
	uint32_t len = kvs_get32(f->body);

	*req->tail_len = len;
	req->riov = calloc(1, sizeof(*req->riov));
	if (!req->riov)
		return -ENOMEM;
	req->riov[0].length = len;
	if (len > req->tail_cap) {
		req->scratch = malloc(len);
		if (!req->scratch)
			return -ENOMEM;
		req->riov[0].buffer = req->scratch;
		req->riov_n = 1;
		return -ENOSPC; /* received all the same, into scratch */
	} else {
		req->riov[0].buffer = req->tail_buf;
		req->verify = true;
	}
	req->riov_n = 1;
	return 0;
}

static int take_reply(struct kvs_client_req *req,
		      const struct kvs_proto_frame *f)
{
	const uint8_t *b = f->body;

	switch (req->opcode) {
	case KVS_OP_HELLO:
		memcpy(req->hello, b, sizeof(req->hello));
		return 0;
	case KVS_OP_LOOKUP:
		*req->prefix = kvs_get32(b);
		return 0;
	case KVS_OP_EXISTS:
		for (uint32_t i = 0; i < req->count; i++)
			req->present[i] = b[i] != 0;
		return 0;
	case KVS_OP_GET:
		return place_get(req, f);
	case KVS_OP_PUT:
	case KVS_OP_DELETE:
		for (uint32_t i = 0; i < req->count; i++)
			req->results[i] = (int32_t)kvs_get32(
				b + (size_t)i * KVS_PROTO_ITEM_SIZE);
		return 0;
	case KVS_OP_STAT:
		req->stat_n = f->count;
		for (uint32_t i = 0; i < f->count; i++)
			req->stat[i] = kvs_get64(b + (size_t)i * 8);
		return 0;
	case KVS_OP_TAIL_TAKE:
		return place_tail(req, f);
	default:
		return 0;
	}
}

ucs_status_t conn_on_reply(void *arg, const void *header, size_t header_len,
			   void *data, size_t len,
			   const ucp_am_recv_param_t *param)
{
	struct kvs_conn *conn = arg;
	struct kvs_proto_frame f;
	struct kvs_client_req *req;
	int err = kvs_proto_frame_decode(header, header_len, &f);

	if (err) {
		kvs_log(KVS_LOG_ERR, "kvstash client: bad reply frame: %s",
			kvs_strerror(err));
		conn_fail(conn, -KVS_EPROTO);
		return UCS_OK;
	}
	if (f.opcode == KVS_OP_ERROR) {
		/* the server could not read a frame of ours: it closes */
		kvs_log(KVS_LOG_ERR, "kvstash client: server: %s",
			kvs_strerror(f.status));
		conn_fail(conn, f.status ? f.status : -KVS_EPROTO);
		return UCS_OK;
	}
	req = table_find(conn, f.req_id);
	if (!req || req->replied)
		return UCS_OK; /* timed out and forgotten */
	req->replied = true;
	err = kvs_proto_reply_check(&f, req->opcode, req->count, len);
	if (err) {
		kvs_log(KVS_LOG_ERR, "kvstash client: bad %s reply",
			kvs_proto_opcode_name(req->opcode));
		req->status = err;
	} else if (f.status < 0) {
		req->status = f.status;
	} else {
		req->status = take_reply(req, &f);
		if ((req->status == 0 || req->status == -ENOSPC) && req->riov_n)
			receive(req, data, len, param);
	}
	maybe_finish(req);
	return UCS_OK;
}

/* ---- failure --------------------------------------------------------- */

void conn_close(struct kvs_conn *conn)
{
	ucp_request_param_t param = {
		.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
		.flags = 0, /* flush: the server sees an orderly close */
	};
	void *creq;

	if (conn->broken || conn->inflight || !conn->ep) {
		conn_fail(conn, -KVS_ECONN);
		return;
	}
	conn->broken = true;
	conn->fail_status = -KVS_ECONN;
	creq = ucp_ep_close_nbx(conn->ep, &param);
	conn->closing = true;
	conn->close_req = UCS_PTR_IS_PTR(creq) ? creq : NULL;
	conn->ep = NULL;
}

void conn_fail(struct kvs_conn *conn, int status)
{
	ucp_request_param_t param = {
		.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
		.flags = UCP_EP_CLOSE_FLAG_FORCE,
	};
	uint64_t now = kvs_now_ns();
	void *creq;

	if (conn->broken)
		return;
	conn->broken = true;
	conn->fail_status = status;
	if (conn->node)
		route_conn_failed(conn, status);
	for (unsigned h = 0; h < CONN_HASH; h++)
		for (struct kvs_client_req *r = conn->table[h]; r;
		     r = r->hnext) {
			if (r->recv_req)
				ucp_request_cancel(conn->cl->ucx.worker,
						   r->recv_req);
			if (!r->replied) {
				r->replied = true;
				r->status = r->deadline_ns <= now
						    ? -KVS_ETIMEDOUT
						    : status;
			}
		}
	if (!conn->ep)
		return;
	/* a forced close gives up every operation on the endpoint, so the
	 * callers' buffers are free once their callbacks ran */
	creq = ucp_ep_close_nbx(conn->ep, &param);
	conn->closing = true;
	conn->close_req = UCS_PTR_IS_PTR(creq) ? creq : NULL;
	conn->ep = NULL;
}

void conn_progress_close(struct kvs_conn *conn)
{
	if (!conn->closing)
		return;
	if (conn->close_req &&
	    ucp_request_check_status(conn->close_req) == UCS_INPROGRESS)
		return;
	if (conn->close_req)
		ucp_request_free(conn->close_req);
	conn->close_req = NULL;
	conn->closing = false;
	/* whatever UCX did not call back for is over now */
	for (unsigned h = 0; h < CONN_HASH; h++) {
		struct kvs_client_req *r = conn->table[h], *next;

		for (; r; r = next) {
			next = r->hnext;
			r->sending = false;
			r->receiving = false;
			r->send_req = r->recv_req = NULL;
			maybe_finish(r);
		}
	}
}

void conn_check_deadlines(struct kvs_conn *conn, uint64_t now)
{
	for (unsigned h = 0; h < CONN_HASH; h++)
		for (struct kvs_client_req *r = conn->table[h]; r; r = r->hnext)
			if (r->deadline_ns <= now) {
				conn->cl->counters.timeouts++;
				kvs_log(KVS_LOG_INFO,
					"kvstash client: %s to %s timed out",
					kvs_proto_opcode_name(r->opcode),
					conn->address);
				conn->timed_out = true;
				conn_fail(conn, -KVS_ECONN);
				return;
			}
}

bool conn_idle(struct kvs_conn *conn)
{
	return !conn->closing && conn->inflight == 0;
}

bool conn_inflight_only_close(struct kvs_conn *conn)
{
	return conn->inflight == 0;
}
