/*
 * nodes.c - a cluster client's members and their connections
 * (kvs_client_connect_cluster).
 *
 * The members come from an etcd view (cluster/view.c, watched by its own
 * thread) or from a fixed list.  The progress thread reads the view's
 * latest snapshot every few milliseconds (route_refresh) and keeps one
 * struct kvs_node per member id.  A node's connection is made on first
 * use: the endpoint, then hello and proof sent as requests of the
 * client's own whose completions (handshake_done) run on the progress
 * thread; requests for the node wait on the connection's pending list
 * meanwhile, and afterwards whenever the server's max_inflight is
 * reached.  A connection that fails marks its node down in the client's
 * back-off table (route_conn_failed) and is replaced on the next use
 * after the back-off; a node that left the members has its connection
 * closed once idle, and is forgotten once no call holds it.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/bytes.h"
#include "kvstash/error.h"
#include "kvstash/log.h"
#include "route_internal.h"

void kvs_client_cluster_opts_default(struct kvs_client_cluster_opts *opts)
{
	memset(opts, 0, sizeof(*opts));
	opts->timeout_ms = 10000;
	opts->node_timeout_ms = 2000;
	opts->backoff_ms = 5000;
	opts->etcd_timeout_ms = KVS_CLUSTER_TIMEOUT_MS;
	opts->replicas = 1;
}

uint32_t route_node_timeout_ms(const struct route *rt)
{
	return rt->opts.node_timeout_ms;
}

/* ---- nodes ----------------------------------------------------------- */

static struct kvs_node *node_find(struct route *rt, const char *id)
{
	for (struct kvs_node *n = rt->nodes; n; n = n->next)
		if (strcmp(n->id, id) == 0)
			return n;
	return NULL;
}

static void conn_free(struct kvs_conn *conn)
{
	free(conn);
}

/* Fails the requests waiting on @conn with @status. */
static void fail_pending(struct kvs_conn *conn, int status)
{
	while (conn->pending) {
		struct kvs_client_req *req = conn->pending;

		conn->pending = req->next;
		req->next = NULL;
		req->status = status;
		req_complete(req);
	}
	conn->pending_tail = &conn->pending;
}

/* Hands @node's connection to the closing list (flushed when idle). */
static void node_detach(struct route *rt, struct kvs_node *node)
{
	struct kvs_conn *conn = node->conn;

	if (!conn)
		return;
	node->conn = NULL;
	conn->node = NULL;
	fail_pending(conn, conn->broken ? conn->fail_status : -KVS_ECONN);
	if (!conn->broken)
		conn_close(conn);
	conn->next = rt->closing;
	rt->closing = conn;
}

bool node_connecting(const struct kvs_node *node)
{
	return node->conn && !node->conn->ready && !node->conn->broken;
}

void route_conn_failed(struct kvs_conn *conn, int status)
{
	struct kvs_node *node = conn->node;
	struct route *rt = conn->cl->route;

	fail_pending(conn, status);
	if (rt->shutting)
		return;
	node->last_error = conn->timed_out ? -KVS_ETIMEDOUT : status;
	if (kvs_cluster_backoff_mark_down(rt->backoff, node->id,
					  rt->opts.backoff_ms) == 0)
		__atomic_fetch_add(&rt->cl->counters.marked_down, 1,
				   __ATOMIC_RELAXED);
	kvs_log(KVS_LOG_INFO,
		"kvstash client: node %s (%s): %s; skipped for %u ms", node->id,
		node->address,
		conn->timed_out ? "no answer in time" : kvs_strerror(status),
		rt->opts.backoff_ms);
}

/* ---- the handshake --------------------------------------------------- */

static void handshake_done(struct kvs_client_req *req);

static struct kvs_client_req *
handshake_req(struct route *rt, struct kvs_conn *conn, uint16_t opcode)
{
	struct kvs_client_req *req =
		req_handshake_new(&conn->tenant, opcode, conn->nonce);

	if (!req)
		return NULL;
	req->on_done = handshake_done;
	req->owner = conn;
	req_seal(rt->cl, req,
		 kvs_now_ns() +
			 (uint64_t)rt->opts.node_timeout_ms * 1000000ull);
	return req;
}

/* A hello or a proof came back (or failed): the next step. */
static void handshake_done(struct kvs_client_req *req)
{
	struct kvs_conn *conn = req->owner;
	struct route *rt = conn->cl->route;
	struct kvs_client_req *next = NULL;
	int err = req->status;

	if (!err && req->opcode == KVS_OP_HELLO) {
		const uint8_t *b = req->hello;

		memcpy(conn->nonce, b, KVS_PROTO_NONCE_SIZE);
		conn->limits.max_batch = kvs_get32(b + 32);
		conn->limits.max_object = kvs_get32(b + 36);
		conn->limits.max_payload = kvs_get32(b + 40);
		conn->limits.max_inflight = kvs_get32(b + 44);
		if (!conn->limits.max_inflight || !conn->limits.max_batch)
			err = -KVS_EPROTO;
		else if (!conn->broken &&
			 !(next = handshake_req(rt, conn, KVS_OP_AUTH)))
			err = -ENOMEM;
	} else if (!err && conn->node) {
		conn->ready = true;
		conn->node->limits = conn->limits;
		conn->node->limits_known = true;
		kvs_log(KVS_LOG_DEBUG,
			"kvstash client: connected to node %s (%s)",
			conn->node->id, conn->address);
	}
	req_free(req);
	if (next) {
		conn_send(conn, next);
		return;
	}
	conn->handshake = false; /* the connection may go now */
	if (err) {
		if (err == -KVS_EAUTH && conn->node)
			kvs_log(KVS_LOG_ERR,
				"kvstash client: node %s (%s) refused the key",
				conn->node->id, conn->address);
		conn_fail(conn, err);
	}
	route_unpark(rt, kvs_now_ns());
}

struct kvs_conn *node_conn(struct route *rt, struct kvs_node *node)
{
	struct kvs_client *cl = rt->cl;
	struct kvs_client_req *hello;
	struct kvs_conn *conn = node->conn;

	if (conn && !conn->broken)
		return conn;
	node_detach(rt, node);
	conn = calloc(1, sizeof(*conn));
	if (!conn)
		return NULL;
	conn->cl = cl;
	conn->address = node->address;
	conn->node = node;
	conn->tenant = cl->conn.tenant;
	conn->pending_tail = &conn->pending;
	conn->limits = node->limits;
	if (conn_open(cl, conn, node->address)) {
		route_conn_failed(conn, -KVS_ECONN);
		conn_free(conn);
		return NULL;
	}
	node->conn = conn;
	hello = handshake_req(rt, conn, KVS_OP_HELLO);
	if (!hello) {
		conn_fail(conn, -ENOMEM);
		return conn; /* broken: requests fail, the node is down */
	}
	conn->handshake = true;
	conn_send(conn, hello);
	return conn;
}

void node_send(struct route *rt, struct kvs_node *node,
	       struct kvs_client_req *part)
{
	struct kvs_conn *conn = node_conn(rt, node);

	if (!conn || conn->broken) {
		part->status = conn ? conn->fail_status : -KVS_ECONN;
		req_complete(part);
		return;
	}
	if (conn->ready && !conn->pending &&
	    conn->inflight < conn->limits.max_inflight) {
		conn_send(conn, part);
		return;
	}
	part->next = NULL;
	*conn->pending_tail = part;
	conn->pending_tail = &part->next;
}

/* ---- the members ----------------------------------------------------- */

static struct kvs_node *node_get(struct route *rt,
				 const struct kvs_cluster_member *m)
{
	struct kvs_node *node = node_find(rt, m->id);

	if (!node) {
		node = calloc(1, sizeof(*node));
		if (!node)
			return NULL;
		snprintf(node->id, sizeof(node->id), "%s", m->id);
		snprintf(node->address, sizeof(node->address), "%s",
			 m->address);
		node->lease = m->lease;
		node->next = rt->nodes;
		rt->nodes = node;
		/* a member seen again after it left (and was forgotten) is a
		 * new registration: what marked it down is past */
		kvs_cluster_backoff_clear(rt->backoff, node->id);
		return node;
	}
	if (strcmp(node->address, m->address) != 0) {
		/* registered again elsewhere: a new server */
		node_detach(rt, node);
		snprintf(node->address, sizeof(node->address), "%s",
			 m->address);
		node->limits_known = false;
	}
	if (node->lease != m->lease) {
		/* a new registration: what marked it down is past */
		kvs_cluster_backoff_clear(rt->backoff, node->id);
		node->lease = m->lease;
	}
	return node;
}

/* Makes @m the current members (the reference is taken over). */
static int apply(struct route *rt, struct kvs_cluster_members *m)
{
	size_t count = kvs_cluster_members_count(m);
	size_t n_prev =
		rt->members ? kvs_cluster_members_count(rt->members) : 0;
	struct kvs_node **by_index =
		calloc(count ? count : 1, sizeof(*by_index));
	long *prev_to_cur = calloc(n_prev ? n_prev : 1, sizeof(*prev_to_cur));

	if (!by_index || !prev_to_cur) {
		free(by_index);
		free(prev_to_cur);
		kvs_cluster_members_release(m);
		return -ENOMEM; /* the old members stay; tried again later */
	}
	for (struct kvs_node *n = rt->nodes; n; n = n->next)
		n->member = false;
	for (size_t i = 0; i < count; i++) {
		by_index[i] = node_get(rt, kvs_cluster_members_get(m, i));
		if (!by_index[i]) {
			free(by_index);
			free(prev_to_cur);
			kvs_cluster_members_release(m);
			for (size_t k = 0;
			     rt->by_index && rt->members &&
			     k < kvs_cluster_members_count(rt->members);
			     k++)
				rt->by_index[k]->member = true;
			return -ENOMEM;
		}
		by_index[i]->member = true;
	}
	for (size_t i = 0; i < n_prev; i++)
		prev_to_cur[i] = kvs_cluster_members_find(
			m, kvs_cluster_members_get(rt->members, i)->id);
	kvs_cluster_members_release(rt->previous);
	rt->previous = rt->members;
	rt->members = m;
	free(rt->by_index);
	rt->by_index = by_index;
	free(rt->prev_to_cur);
	rt->prev_to_cur = prev_to_cur;
	return 0;
}

void route_refresh(struct route *rt, bool force)
{
	struct kvs_cluster_view_stats st;
	struct kvs_cluster_members *m;
	uint64_t now = kvs_now_ns();

	if (!rt->view ||
	    (!force && now - rt->last_view_ns < ROUTE_VIEW_CHECK_NS))
		return;
	rt->last_view_ns = now;
	m = kvs_cluster_view_members(rt->view);
	if (kvs_cluster_members_generation(m) ==
	    kvs_cluster_members_generation(rt->members))
		kvs_cluster_members_release(m);
	else
		apply(rt, m);
	kvs_cluster_view_stats(rt->view, &st);
	if (st.state == KVS_CLUSTER_UNREACHABLE && !rt->unreachable) {
		kvs_log(KVS_LOG_WARN,
			"kvstash client: etcd unreachable: going on with the "
			"last %zu members seen",
			st.members);
		rt->unreachable = true;
	} else if (st.state == KVS_CLUSTER_CONNECTED && rt->unreachable) {
		kvs_log(KVS_LOG_WARN,
			"kvstash client: etcd answers again (%zu members)",
			st.members);
		rt->unreachable = false;
	}
}

int route_members(struct route *rt, struct kvs_client_node **out, size_t *n)
{
	struct kvs_cluster_members *m =
		rt->view ? kvs_cluster_view_members(rt->view)
			 : kvs_cluster_members_ref(rt->fixed);
	size_t count = kvs_cluster_members_count(m);
	struct kvs_client_node *nodes =
		calloc(count ? count : 1, sizeof(*nodes));

	if (!nodes) {
		kvs_cluster_members_release(m);
		return -ENOMEM;
	}
	for (size_t i = 0; i < count; i++) {
		const struct kvs_cluster_member *mb =
			kvs_cluster_members_get(m, i);

		snprintf(nodes[i].id, sizeof(nodes[i].id), "%s", mb->id);
		snprintf(nodes[i].address, sizeof(nodes[i].address), "%s",
			 mb->address);
		nodes[i].capacity = mb->capacity;
		nodes[i].marked_down =
			kvs_cluster_backoff_is_down(rt->backoff, mb->id);
		nodes[i].status = -KVS_ECONN;
	}
	kvs_cluster_members_release(m);
	*out = nodes;
	*n = count;
	return 0;
}

void kvs_client_membership(struct kvs_client *c,
			   struct kvs_client_membership *out)
{
	struct kvs_cluster_view_stats st;

	memset(out, 0, sizeof(*out));
	out->reachable = true;
	if (!c || !c->route) {
		out->members = c ? 1 : 0;
		out->generation = 1;
		return;
	}
	if (!c->route->view) {
		out->members = kvs_cluster_members_count(c->route->fixed);
		out->generation = 1;
		return;
	}
	kvs_cluster_view_stats(c->route->view, &st);
	out->etcd = true;
	out->reachable = st.state == KVS_CLUSTER_CONNECTED;
	out->unreachable_ms = st.unreachable_ms;
	out->generation = st.generation;
	out->members = st.members;
	out->reconnects = st.reconnects;
	out->resyncs = st.resyncs;
}

/* ---- the progress thread's turn -------------------------------------- */

/* Requests past their deadline before they were ever sent. */
static void pending_deadlines(struct kvs_conn *conn, uint64_t now)
{
	struct kvs_client_req **p = &conn->pending;

	while (*p) {
		struct kvs_client_req *req = *p;

		if (req->deadline_ns > now) {
			p = &req->next;
			continue;
		}
		*p = req->next;
		req->next = NULL;
		req->status = -KVS_ETIMEDOUT;
		req_complete(req);
	}
	conn->pending_tail = p;
}

/* One node's connection: sends what waits, closes what is over. */
static bool node_turn(struct route *rt, struct kvs_node *node, uint64_t now,
		      bool check)
{
	struct kvs_conn *conn = node->conn;
	bool moved = false;

	if (!conn)
		return false;
	conn_progress_close(conn);
	while (conn->ready && !conn->broken && conn->pending &&
	       conn->inflight < conn->limits.max_inflight) {
		struct kvs_client_req *req = conn->pending;

		conn->pending = req->next;
		if (!conn->pending)
			conn->pending_tail = &conn->pending;
		req->next = NULL;
		conn_send(conn, req);
		moved = true;
	}
	if (check && !conn->broken) {
		conn_check_deadlines(conn, now);
		pending_deadlines(conn, now);
	}
	if (conn->broken && !conn->closing && conn->inflight == 0 &&
	    !conn->handshake) {
		fail_pending(conn, conn->fail_status);
		node->conn = NULL;
		conn_free(conn);
	} else if (!node->member && conn->inflight == 0 && !conn->pending &&
		   !conn->handshake) {
		node_detach(rt, node);
	}
	return moved;
}

/* Forgets nodes that left and that no call holds. */
static void reap_nodes(struct route *rt)
{
	struct kvs_node **p = &rt->nodes;

	while (*p) {
		struct kvs_node *n = *p;

		if (n->member || n->users || n->conn) {
			p = &n->next;
			continue;
		}
		*p = n->next;
		free(n);
	}
}

bool route_progress(struct route *rt, uint64_t now, bool check)
{
	bool moved = false;

	for (struct kvs_node *n = rt->nodes; n; n = n->next)
		moved |= node_turn(rt, n, now, check);
	for (struct kvs_conn **p = &rt->closing; *p;) {
		struct kvs_conn *conn = *p;

		conn_progress_close(conn);
		if (check)
			conn_check_deadlines(conn, now);
		if (!conn->closing && conn->inflight == 0 && !conn->handshake) {
			*p = conn->next;
			conn_free(conn);
			continue;
		}
		p = &conn->next;
	}
	if (check) {
		route_refresh(rt, false);
		route_unpark(rt, now);
		reap_nodes(rt);
	}
	return moved;
}

bool route_busy(struct route *rt)
{
	if (rt->ops || rt->closing)
		return true;
	for (struct kvs_node *n = rt->nodes; n; n = n->next)
		if (n->conn &&
		    (n->conn->inflight || n->conn->closing || n->conn->pending))
			return true;
	return false;
}

bool route_shutdown(struct route *rt, bool force)
{
	bool idle = rt->ops == 0 && rt->closing == NULL;

	rt->shutting = true;
	route_fail_parked(rt);
	for (struct kvs_node *n = rt->nodes; n; n = n->next) {
		struct kvs_conn *conn = n->conn;

		if (!conn)
			continue;
		fail_pending(conn, -KVS_ECONN);
		if (force)
			conn_fail(conn, -KVS_ECONN);
		else if (!conn->broken)
			conn_close(conn);
		conn_progress_close(conn);
		if (conn->closing || conn->inflight)
			idle = false;
	}
	for (struct kvs_conn *conn = rt->closing; conn; conn = conn->next) {
		if (force)
			conn_fail(conn, -KVS_ECONN);
		conn_progress_close(conn);
	}
	route_progress(rt, kvs_now_ns(), false);
	return idle && rt->cl->deferred == NULL;
}

void route_destroy(struct route *rt)
{
	if (!rt)
		return;
	while (rt->nodes) {
		struct kvs_node *n = rt->nodes;

		rt->nodes = n->next;
		free(n->conn);
		free(n);
	}
	while (rt->closing) {
		struct kvs_conn *conn = rt->closing;

		rt->closing = conn->next;
		free(conn);
	}
	kvs_cluster_view_close(rt->view);
	kvs_cluster_members_release(rt->fixed);
	kvs_cluster_members_release(rt->members);
	kvs_cluster_members_release(rt->previous);
	kvs_cluster_backoff_destroy(rt->backoff);
	free(rt->by_index);
	free(rt->prev_to_cur);
	free(rt);
}

/* ---- the ops of a cluster client ------------------------------------ */

static void cluster_start(struct kvs_client *c, struct kvs_client_req *q)
{
	struct kvs_client_req *next;

	for (; q; q = next) {
		next = q->next;
		q->next = NULL;
		route_start(c->route, q);
	}
}

static bool cluster_progress(struct kvs_client *c, uint64_t now, bool check)
{
	bool moved = client_run_deferred(c);

	moved |= route_progress(c->route, now, check);
	moved |= client_run_deferred(c);
	return moved;
}

static bool cluster_busy(struct kvs_client *c)
{
	return route_busy(c->route) || c->deferred;
}

static bool cluster_stop(struct kvs_client *c, bool late)
{
	return route_shutdown(c->route, late);
}

static void cluster_destroy(struct kvs_client *c)
{
	if (!c->route)
		return;
	for (int i = 0; !route_shutdown(c->route, i > 0) && i < 1000000; i++) {
		ucp_worker_progress(c->ucx.worker);
		client_run_deferred(c);
	}
	route_destroy(c->route);
	c->route = NULL;
}

/* The members of the current view; with @ask, each one's STAT. */
static int cluster_nodes(struct kvs_client *c, bool ask,
			 struct kvs_client_node **out, size_t *n)
{
	struct kvs_client_node *nodes;
	struct kvs_client_req *req;
	size_t count;
	int err = route_members(c->route, &nodes, &count);

	if (err)
		return err;
	for (size_t i = 0; !ask && i < count; i++)
		nodes[i].status = 0;
	if (ask && count) {
		struct client_call call = { .kind = CALL_STAT,
					    .nodes = nodes,
					    .n_nodes = count,
					    .n = count };

		err = route_submit(c, &call, NULL, NULL, &req);
		if (!err)
			err = kvs_client_wait(req);
	}
	if (err) {
		free(nodes);
		return err;
	}
	*out = nodes;
	*n = count;
	return 0;
}

const struct client_ops client_cluster_ops = {
	.submit = route_submit,
	.start = cluster_start,
	.progress = cluster_progress,
	.busy = cluster_busy,
	.stop = cluster_stop,
	.destroy = cluster_destroy,
	.nodes = cluster_nodes,
};

/* ---- replies ---------------------------------------------------------- */

ucs_status_t route_on_reply(void *arg, const void *header, size_t header_len,
			    void *data, size_t len,
			    const ucp_am_recv_param_t *param)
{
	struct kvs_client *cl = arg;
	struct route *rt = cl->route;
	ucp_ep_h ep;

	if (!rt || !(param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP))
		return UCS_OK;
	ep = param->reply_ep;
	for (struct kvs_node *n = rt->nodes; n; n = n->next)
		if (n->conn && n->conn->ep == ep)
			return conn_on_reply(n->conn, header, header_len, data,
					     len, param);
	for (struct kvs_conn *c = rt->closing; c; c = c->next)
		if (c->ep == ep)
			return conn_on_reply(c, header, header_len, data, len,
					     param);
	return UCS_OK; /* a connection already given up */
}

/* ---- connect ---------------------------------------------------------- */

/* "HOST:PORT" as a member id: [A-Za-z0-9._-], the rest made '_'. */
static void id_of_address(const char *address, char *id, size_t size)
{
	size_t i = 0;

	for (; address[i] && i + 1 < size; i++) {
		char ch = address[i];

		id[i] = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
					(ch >= '0' && ch <= '9') || ch == '.' ||
					ch == '-' || ch == '_'
				? ch
				: '_';
	}
	id[i] = '\0';
}

/* The members of a fixed list "A,B,C" (each with capacity 1). */
static int fixed_members(const char *servers, struct kvs_cluster_members **out)
{
	struct kvs_cluster_member *list = NULL;
	struct sockaddr_storage ss;
	socklen_t slen;
	size_t n = 0, cap = 0;
	const char *p = servers;
	int err = 0;

	while (!err && *p) {
		size_t len = strcspn(p, ",");
		struct kvs_cluster_member *m;

		if (len == 0 || len > KVS_CLUSTER_ADDRESS_MAX ||
		    len > KVS_CLUSTER_NAME_MAX) {
			kvs_log(KVS_LOG_ERR,
				"kvstash client: '%.*s' is no server address",
				(int)len, p);
			err = -KVS_EPARAM;
			break;
		}
		if (n == cap) {
			size_t c2 = cap ? 2 * cap : 8;
			struct kvs_cluster_member *grown =
				realloc(list, c2 * sizeof(*grown));

			if (!grown) {
				err = -ENOMEM;
				break;
			}
			list = grown;
			cap = c2;
		}
		m = &list[n++];
		memset(m, 0, sizeof(*m));
		snprintf(m->address, sizeof(m->address), "%.*s", (int)len, p);
		if (kvs_ucx_parse_addr(m->address, &ss, &slen)) {
			kvs_log(KVS_LOG_ERR,
				"kvstash client: '%s' is no server address "
				"(HOST:PORT)",
				m->address);
			err = -KVS_EPARAM;
			break;
		}
		id_of_address(m->address, m->id, sizeof(m->id));
		m->capacity = 1;
		m->protocol = KVS_PROTO_VERSION;
		p += len;
		if (*p == ',')
			p++;
	}
	if (!err && n == 0)
		err = -KVS_EPARAM;
	if (!err) {
		err = kvs_cluster_members_create(list, n, 1, out);
		if (err) {
			kvs_log(KVS_LOG_ERR,
				"kvstash client: '%s': a server is listed "
				"twice",
				servers);
			err = -KVS_EPARAM;
		}
	}
	free(list);
	return err;
}

static int route_create(struct kvs_client *cl,
			const struct kvs_client_cluster_opts *opts,
			struct route **out)
{
	struct kvs_cluster_members *first = NULL;
	struct route *rt = calloc(1, sizeof(*rt));
	int err;

	if (!rt)
		return -ENOMEM;
	rt->cl = cl;
	rt->opts = *opts;
	rt->opts.etcd = rt->opts.cluster = rt->opts.servers = NULL;
	rt->opts.key_file = NULL;
	err = kvs_cluster_backoff_create(&rt->backoff);
	if (err)
		goto fail;
	if (opts->etcd) {
		struct kvs_cluster_config config = {
			.endpoints = opts->etcd,
			.cluster = opts->cluster,
			.timeout_ms = opts->etcd_timeout_ms,
		};

		err = kvs_cluster_view_open(&config, &rt->view);
		if (err) {
			kvs_log(KVS_LOG_ERR,
				"kvstash client: the members of cluster %s in "
				"etcd %s: %s",
				opts->cluster, opts->etcd, kvs_strerror(err));
			goto fail;
		}
		first = kvs_cluster_view_members(rt->view);
	} else {
		err = fixed_members(opts->servers, &rt->fixed);
		if (err)
			goto fail;
		first = kvs_cluster_members_ref(rt->fixed);
	}
	err = apply(rt, first);
	if (err)
		goto fail;
	*out = rt;
	return 0;
fail:
	route_destroy(rt);
	return err == -EINVAL ? -KVS_EPARAM : err;
}

int kvs_client_connect_cluster(const struct kvs_client_cluster_opts *opts,
			       struct kvs_client **out)
{
	struct kvs_client_opts co;
	struct kvs_client *c;
	int err;

	if (!opts || !opts->key_file || !out ||
	    !(opts->etcd ? opts->cluster && !opts->servers : !!opts->servers) ||
	    opts->replicas == 0 || opts->replicas > KVS_CLIENT_REPLICAS_MAX)
		return -KVS_EPARAM;
	kvs_client_opts_default(&co);
	co.key_file = opts->key_file;
	co.address = opts->etcd ? opts->cluster : opts->servers;
	co.shared_memory = opts->shared_memory;
	if (opts->timeout_ms)
		co.timeout_ms = opts->timeout_ms;
	co.connect_timeout_ms =
		opts->node_timeout_ms ? opts->node_timeout_ms : 2000;
	err = client_create(&co, NULL, true, &c);
	if (err)
		return err;
	/* a call may hold this many items; nodes get them in their own
	 * batches, within their own limits */
	c->conn.limits.max_batch = KVS_CLIENT_CLUSTER_BATCH;
	c->conn.limits.max_object = 16u << 20;
	c->conn.limits.max_payload = UINT32_MAX;
	c->conn.limits.max_inflight = 64;
	err = route_create(c, opts, &c->route);
	if (!err) {
		struct route *rt = c->route;

		if (!rt->opts.timeout_ms)
			rt->opts.timeout_ms = c->opts.timeout_ms;
		if (!rt->opts.node_timeout_ms)
			rt->opts.node_timeout_ms = 2000;
		if (rt->opts.node_timeout_ms > rt->opts.timeout_ms)
			rt->opts.node_timeout_ms = rt->opts.timeout_ms;
		if (!rt->opts.backoff_ms)
			rt->opts.backoff_ms = 5000;
		err = client_start(c);
	}
	if (err) {
		kvs_client_close(c);
		return err;
	}
	*out = c;
	return 0;
}
