/*
 * direct.c - a client of one kvstashd (kvs_client_connect): the calls of
 * client_ops over the client's one connection.  A call becomes one
 * request of the wire protocol, queued by the caller's thread; the
 * progress thread sends the queued requests in order, holding back those
 * over the server's in-flight limit until replies make room.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client_internal.h"
#include "common/bytes.h"
#include "kvstash/error.h"

static int lookup_new(const struct client_call *call,
		      struct kvs_client_req **out)
{
	struct kvs_client_req *req;
	size_t n_layers = call->n_layers;

	req = req_new(KVS_OP_LOOKUP, (uint32_t)call->n_spans, 8, 0);
	if (!req)
		return -ENOMEM;
	kvs_put32(req->frame + KVS_PROTO_HEADER_SIZE, (uint32_t)n_layers);
	req->payload_len = n_layers * 4 + call->n_spans * KVS_ID_SIZE;
	req->payload = malloc(req->payload_len);
	if (!req->payload) {
		req_free(req);
		return -ENOMEM;
	}
	for (size_t i = 0; i < n_layers; i++)
		kvs_put32(req->payload + i * 4, call->layers[i]);
	memcpy(req->payload + n_layers * 4, call->spans,
	       call->n_spans * KVS_ID_SIZE);
	req->prefix = call->prefix;
	*out = req;
	return 0;
}

/* The request of @call, its outputs the caller's. */
static int request_of(struct kvs_client *c, const struct client_call *call,
		      struct kvs_client_req **out)
{
	struct kvs_client_req *req = NULL;
	uint64_t total = 0;
	int err;

	switch (call->kind) {
	case CALL_LOOKUP:
		return lookup_new(call, out);
	case CALL_EXISTS:
		err = req_keyed_new(KVS_OP_EXISTS, call->keys, call->n, &req);
		if (!err)
			req->present = call->present;
		break;
	case CALL_GET:
		err = req_keyed_new(KVS_OP_GET, call->keys, call->n, &req);
		if (!err) {
			req->bufs = call->bufs;
			req->caps = call->caps;
			req->lens = call->lens;
			req->results = call->results;
		}
		break;
	case CALL_DELETE:
		err = req_keyed_new(KVS_OP_DELETE, call->keys, call->n, &req);
		if (!err)
			req->results = call->results;
		break;
	case CALL_PUT:
		for (size_t i = 0; i < call->n; i++)
			total += call->obj_lens[i];
		if (total > c->conn.limits.max_payload)
			return -KVS_ETOOBIG;
		err = req_put_new(call->objs, call->obj_lens, call->n,
				  call->durability, &req);
		if (!err)
			req->results = call->results;
		break;
	case CALL_TAIL_PUT:
		err = req_tail_put_new(call->request_id, call->tail,
				       call->tail_len, call->ttl_ms, &req);
		break;
	case CALL_TAIL_TAKE:
		req = req_tail_take_new(call->request_id);
		err = req ? 0 : -ENOMEM;
		if (!err) {
			req->tail_buf = call->tail_buf;
			req->tail_cap = call->tail_cap;
			req->tail_len = call->tail_out;
		}
		break;
	default:
		return -KVS_EPARAM;
	}
	if (!err)
		*out = req;
	return err;
}

static int direct_submit(struct kvs_client *c, const struct client_call *call,
			 kvs_client_cb cb, void *arg,
			 struct kvs_client_req **req_out)
{
	struct kvs_client_req *req;
	int err = request_of(c, call, &req);

	if (err)
		return err;
	return client_submit(c, req, c->opts.timeout_ms, cb, arg, req_out);
}

/* Those over the server's in-flight limit wait their turn, in order. */
static void direct_start(struct kvs_client *cl, struct kvs_client_req *q)
{
	struct kvs_client_req *next;

	if (q) {
		struct kvs_client_req **t = &cl->waiting;

		while (*t)
			t = &(*t)->next;
		*t = q;
	}
	while ((q = cl->waiting) && client_may_send(cl)) {
		next = q->next;
		cl->waiting = next;
		q->next = NULL;
		conn_send(&cl->conn, q);
	}
}

static bool direct_progress(struct kvs_client *cl, uint64_t now, bool check)
{
	bool ran;

	conn_progress_close(&cl->conn);
	ran = client_run_deferred(cl);
	client_reconnect_turn(cl, now);
	if (check) {
		conn_check_deadlines(&cl->conn, now);
		client_waiting_deadlines(cl, now);
	}
	return ran;
}

static bool direct_busy(struct kvs_client *cl)
{
	return cl->conn.inflight || cl->conn.closing || cl->waiting ||
	       cl->deferred;
}

static bool direct_stop(struct kvs_client *cl, bool late)
{
	if (!cl->conn.broken)
		conn_close(&cl->conn);
	if (cl->waiting == NULL && conn_idle(&cl->conn))
		return true;
	return late && conn_inflight_only_close(&cl->conn);
}

static void direct_destroy(struct kvs_client *c)
{
	if (!c->conn.ep && !c->conn.closing)
		return;
	conn_fail(&c->conn, -KVS_ECONN);
	for (int i = 0; c->conn.closing && i < 1000000; i++) {
		ucp_worker_progress(c->ucx.worker);
		conn_progress_close(&c->conn);
	}
	client_run_deferred(c);
}

/* The server's STAT. */
static int stat_one(struct kvs_client *c, struct kvs_client_stat *out)
{
	struct kvs_client_req *req;
	uint64_t v[KVS_PROTO_STAT_MAX] = { 0 };
	int err;

	req = req_new(KVS_OP_STAT, 0, 0, 0);
	if (!req)
		return -ENOMEM;
	err = client_submit(c, req, c->opts.timeout_ms, NULL, NULL, &req);
	if (err)
		return err;
	client_drive(c, req);
	err = req->status;
	/* the counters after the base are read where the server sends them
	 * (zero otherwise) */
	if (!err && req->stat_n < KVS_STAT_BASE_N)
		err = -KVS_EPROTO;
	if (!err)
		memcpy(v, req->stat, sizeof(v));
	req_free(req);
	if (!err)
		client_stat_decode(v, out);
	return err;
}

static int direct_nodes(struct kvs_client *c, bool ask,
			struct kvs_client_node **out, size_t *n)
{
	struct kvs_client_node *nodes = calloc(1, sizeof(*nodes));

	if (!nodes)
		return -ENOMEM;
	snprintf(nodes->id, sizeof(nodes->id), "%s", c->address);
	snprintf(nodes->address, sizeof(nodes->address), "%s", c->address);
	nodes->status = ask ? stat_one(c, &nodes->stat) : 0;
	nodes->capacity = nodes->stat.store.dram.capacity +
			  nodes->stat.store.nvme.capacity;
	*out = nodes;
	*n = 1;
	return 0;
}

const struct client_ops client_direct_ops = {
	.submit = direct_submit,
	.start = direct_start,
	.progress = direct_progress,
	.busy = direct_busy,
	.stop = direct_stop,
	.destroy = direct_destroy,
	.nodes = direct_nodes,
};
