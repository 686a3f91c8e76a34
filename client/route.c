/*
 * route.c - a cluster client's calls (client_internal.h, client_call):
 * submit, start, rounds and the end of a call; route_answer.c takes the
 * answers and repairs.
 *
 * A call becomes a struct route_op, started on the progress thread with
 * the members of that moment (route_start).  Each item -- a block key,
 * or a node for STAT -- gets its candidates once: the current members'
 * first replicas + 2 in rendezvous order, then the previous members'
 * first replicas that are still members (where a block put before the
 * last change still lives).  A call whose candidates include nodes never
 * connected waits (parked) for their handshakes, which tell the nodes'
 * limits.
 *
 * Then the call goes in rounds.  A round gives every unfinished item its
 * next target(s) -- candidates this client has not marked down, in rank
 * order -- groups the items by node, and sends each node its parts
 * (batches within the node's limits) in parallel.  When every part of
 * the round is back, the next round starts:
 *   get, exists, lookup, tail take: one node at a time; a hit ends the
 *     item; a miss counts as an answer; after `replicas` + 1 answers
 *     among the current members (the one more finds a block put while a
 *     member ranked above it was down or away) the previous members are
 *     asked; a failure (no answer in time, a lost connection) counts for
 *     nothing and the next candidate is tried; a candidate marked down
 *     is passed over, and asked after the others if its mark has ended
 *     by then (a node back from a pause, or registered again);
 *   put, tail put: the first `replicas` candidates at once, then the
 *     next ones for copies that failed;
 *   delete, stat: every member at once, one round.
 * A lookup asks only for spans before the first one found missing.  The
 * call ends when no item has a target left, or at its deadline.  Gets
 * are verified per part (client.c's checks), so a block that fails them
 * is a miss on that node and the next replica is asked.  With
 * repair_replicas, a get's first round also asks its other first
 * `replicas` members whether they hold the block (EXISTS, batched like
 * the rest), and a block found puts itself back to every one of those
 * members that lacks it (and to those that missed it before the hit).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kvstash/error.h"
#include "kvstash/log.h"
#include "route_internal.h"

#define NO_NODE 0xffffu

static const struct kvs_store_key *op_key(const struct route_op *op, size_t i)
{
	switch (op->call.kind) {
	case CALL_LOOKUP:
	case CALL_PUT:
		return &op->keys[i];
	case CALL_TAIL_PUT:
	case CALL_TAIL_TAKE:
		return &op->tail_key;
	default:
		return &op->call.keys[i];
	}
}

static bool single_target(enum client_call_kind kind)
{
	return kind == CALL_GET || kind == CALL_EXISTS || kind == CALL_LOOKUP ||
	       kind == CALL_TAIL_TAKE;
}

static bool everywhere(enum client_call_kind kind)
{
	return kind == CALL_DELETE || kind == CALL_STAT;
}

/* ---- submit and start ------------------------------------------------ */

static void op_free(struct route_op *op)
{
	if (!op)
		return;
	for (size_t j = 0; j < op->n_nodes; j++)
		op->nodes[j]->users--;
	kvs_cluster_members_release(op->members);
	free(op->nodes);
	free(op->need);
	free(op->items);
	free(op->keys);
	free(op);
}

int route_submit(struct kvs_client *c, const struct client_call *call,
		 kvs_client_cb cb, void *arg, struct kvs_client_req **req_out)
{
	struct route *rt = c->route;
	struct route_op *op = calloc(1, sizeof(*op));
	struct kvs_client_req *req = calloc(1, sizeof(*req));
	size_t n = call->n;

	if (!op || !req)
		goto nomem;
	op->rt = rt;
	op->call = *call;
	op->replicas = call->replicas ? call->replicas : rt->opts.replicas;
	if (call->kind == CALL_TAIL_PUT || call->kind == CALL_TAIL_TAKE) {
		/* a tail lives on one node, placed by its request id */
		op->replicas = 1;
		memcpy(op->tail_key.span_id, call->request_id, KVS_ID_SIZE);
		op->tail_key.layer = UINT32_MAX;
	}
	if (call->kind == CALL_LOOKUP) {
		if (call->n_spans * call->n_layers > ROUTE_LOOKUP_MAX) {
			free(op);
			free(req);
			return -KVS_EBATCH;
		}
		n = call->n_spans * call->n_layers;
		op->keys = malloc(n * sizeof(*op->keys));
		if (!op->keys)
			goto nomem;
		for (size_t s = 0; s < call->n_spans; s++)
			for (size_t l = 0; l < call->n_layers; l++) {
				struct kvs_store_key *k =
					&op->keys[s * call->n_layers + l];

				memcpy(k->span_id, call->spans[s], KVS_ID_SIZE);
				k->layer = call->layers[l];
			}
	}
	op->n_items = n;
	op->items = calloc(n ? n : 1, sizeof(*op->items));
	if (!op->items)
		goto nomem;
	if (call->kind == CALL_PUT) {
		/* placed by the id in each block's header */
		op->keys = calloc(n, sizeof(*op->keys));
		if (!op->keys)
			goto nomem;
		for (size_t i = 0; i < n; i++) {
			struct kvs_header h;
			int err = kvs_header_decode(call->objs[i],
						    call->obj_lens[i], 0, &h);

			if (err) {
				/* what the server would refuse it for */
				op->items[i].done = true;
				op->items[i].result = err;
				continue;
			}
			memcpy(op->keys[i].span_id, h.ident.block_id,
			       KVS_ID_SIZE);
			op->keys[i].layer = h.ident.layer;
		}
	}
	op->req = req;
	req->op = op;
	req->frame_len = KVS_PROTO_HEADER_SIZE;
	return client_submit(c, req, c->opts.timeout_ms, cb, arg, req_out);
nomem:
	if (op) {
		free(op->keys);
		free(op->items);
	}
	free(op);
	free(req);
	return -ENOMEM;
}

/* The candidates of item @i (op->nodes indexes). */
static void candidates(struct route_op *op, size_t i)
{
	struct route *rt = op->rt;
	struct route_item *it = &op->items[i];
	const struct kvs_store_key *key = op_key(op, i);
	uint32_t rank[KVS_CLUSTER_PLACE_MAX];
	size_t depth = op->replicas + 2, k;

	k = kvs_cluster_place(op->members, NULL, key->span_id, key->layer,
			      depth, rank);
	for (size_t j = 0; j < k; j++)
		it->cand[j] = (uint16_t)rank[j];
	it->n_cand = it->n_cur = (uint8_t)k;
	if (!rt->previous || op->members != rt->members)
		return;
	k = kvs_cluster_place(rt->previous, NULL, key->span_id, key->layer,
			      op->replicas, rank);
	for (size_t j = 0; j < k && it->n_cand < ROUTE_CAND_MAX; j++) {
		long cur = rt->prev_to_cur[rank[j]];
		bool seen = cur < 0;

		for (size_t q = 0; !seen && q < it->n_cand; q++)
			seen = it->cand[q] == (uint16_t)cur;
		if (!seen)
			it->cand[it->n_cand++] = (uint16_t)cur;
	}
}

/* STAT: item k is the member of call.nodes[k] (NO_NODE if it left). */
static void stat_targets(struct route_op *op)
{
	for (size_t k = 0; k < op->n_items; k++) {
		long j = kvs_cluster_members_find(op->members,
						  op->call.nodes[k].id);
		struct route_item *it = &op->items[k];

		it->cand[0] = j < 0 ? NO_NODE : (uint16_t)j;
		it->n_cand = it->n_cur = 1;
	}
}

/* Whether a node @op may use is still in its handshake. */
static bool op_waiting(const struct route_op *op)
{
	for (size_t j = 0; j < op->n_nodes; j++)
		if (op->need[j] && node_connecting(op->nodes[j]))
			return true;
	return false;
}

static void park(struct route_op *op)
{
	op->next_parked = op->rt->parked;
	op->rt->parked = op;
}

/*
 * Nodes @op may use whose limits are unknown (never connected, or
 * registered again elsewhere): their handshakes start, and the call
 * waits for them -- true when it has to (then it is parked).  Asked at
 * every round: a node that came back during a round is connected then.
 */
static bool wait_for_limits(struct route_op *op)
{
	struct route *rt = op->rt;

	for (size_t j = 0; j < op->n_nodes && !rt->shutting; j++) {
		struct kvs_node *node = op->nodes[j];

		if (op->need[j] && !node->limits_known &&
		    !node_connecting(node) &&
		    !kvs_cluster_backoff_is_down(rt->backoff, node->id))
			node_conn(rt, node);
	}
	if (!op_waiting(op))
		return false;
	park(op);
	return true;
}

void route_start(struct route *rt, struct kvs_client_req *req)
{
	struct route_op *op = req->op;
	size_t n;

	rt->ops++;
	/* a stat lists the members of the latest view (route_members) */
	route_refresh(rt, op->call.kind == CALL_STAT);
	op->members = kvs_cluster_members_ref(rt->members);
	n = op->n_nodes = kvs_cluster_members_count(op->members);
	op->nodes = calloc(n ? n : 1, sizeof(*op->nodes));
	op->need = calloc(n ? 2 * n : 2, sizeof(*op->need));
	if (!op->nodes || !op->need) {
		op->n_nodes = 0;
		op->fail = -ENOMEM;
		route_op_advance(op);
		return;
	}
	op->down = op->need + n;
	for (size_t j = 0; j < n; j++) {
		op->nodes[j] = rt->by_index[j];
		op->nodes[j]->users++;
	}
	if (op->call.kind == CALL_STAT)
		stat_targets(op);
	for (size_t i = 0; i < op->n_items; i++) {
		struct route_item *it = &op->items[i];

		if (op->call.kind != CALL_STAT && !everywhere(op->call.kind) &&
		    !it->done)
			candidates(op, i);
		for (size_t q = 0; q < it->n_cand; q++)
			if (it->cand[q] != NO_NODE)
				op->need[it->cand[q]] = true;
	}
	if (op->call.kind == CALL_DELETE)
		memset(op->need, 1, n);
	route_op_advance(op);
}

void route_unpark(struct route *rt, uint64_t now)
{
	struct route_op **p = &rt->parked, *ready = NULL;

	while (*p) {
		struct route_op *op = *p;

		if (op_waiting(op) && now < op->req->deadline_ns &&
		    !rt->shutting) {
			p = &op->next_parked;
			continue;
		}
		*p = op->next_parked;
		op->next_parked = ready;
		ready = op;
	}
	while (ready) {
		struct route_op *op = ready;

		ready = op->next_parked;
		route_op_advance(op);
	}
}

void route_fail_parked(struct route *rt)
{
	route_unpark(rt, UINT64_MAX);
}

/* ---- finishing ------------------------------------------------------- */

static void op_finish(struct route_op *op)
{
	struct route *rt = op->rt;
	struct kvs_client_req *req = op->req;
	const struct client_call *c = &op->call;
	int status = op->any_answer ? 0 : op->fail ? op->fail : -KVS_ECONN;

	for (size_t i = 0; i < op->n_items; i++) {
		struct route_item *it = &op->items[i];

		switch (c->kind) {
		case CALL_GET:
			c->results[i] = it->result;
			if (it->result && it->result != -ENOSPC)
				c->lens[i] = 0;
			break;
		case CALL_EXISTS:
			c->present[i] = it->present;
			break;
		case CALL_PUT:
		case CALL_DELETE:
			c->results[i] = it->result;
			break;
		case CALL_TAIL_PUT:
		case CALL_TAIL_TAKE:
			status = it->result;
			break;
		default:
			break;
		}
	}
	if (c->kind == CALL_LOOKUP) {
		size_t prefix = 0;

		while (prefix < c->n_spans) {
			size_t l = 0;

			while (l < c->n_layers &&
			       op->items[prefix * c->n_layers + l].present)
				l++;
			if (l < c->n_layers)
				break;
			prefix++;
		}
		*c->prefix = prefix;
	}
	if (c->kind == CALL_STAT)
		status = 0;
	if (c->kind == CALL_GET && rt->opts.repair_replicas && !rt->shutting)
		route_repair(op);
	req->status = status;
	req->op = NULL;
	rt->ops--;
	op_free(op);
	req_complete(req);
}

/* ---- rounds ---------------------------------------------------------- */

/* Whether node @j is down for this round (its last failure noted). */
static bool skip(struct route_op *op, struct route_item *it, uint16_t j)
{
	if (!op->down[j])
		return false;
	if (!it->fail)
		it->fail = op->nodes[j]->last_error ? op->nodes[j]->last_error
						    : -KVS_ECONN;
	return true;
}

/* Whether a read of @it may still ask the candidate at position @p. */
static bool read_wants(const struct route_op *op, const struct route_item *it,
		       uint8_t p)
{
	return p < it->n_cur
		       ? it->answered_cur < op->replicas + ROUTE_READ_EXTRA
		       : it->answered_prev < op->replicas;
}

/*
 * A read's next target, or false when it has none (then it is done).
 * Candidates in rank order; one marked down is passed over, and asked
 * once the others are done if its mark has ended by then (a member that
 * came back, or registered again, holds what it held).
 */
static bool next_read_target(struct route_op *op, struct route_item *it,
			     uint16_t *node, uint8_t *pos)
{
	while (it->pos < it->n_cand) {
		uint8_t p = it->pos;

		if (!read_wants(op, it, p)) {
			if (p >= it->n_cur)
				break;
			it->pos = it->n_cur;
			continue;
		}
		it->pos++;
		if (skip(op, it, it->cand[p])) {
			it->skipped |= 1u << p;
			continue;
		}
		*node = it->cand[p];
		*pos = p;
		return true;
	}
	for (uint8_t p = 0; p < it->n_cand; p++) {
		if (!(it->skipped & (1u << p)) || op->down[it->cand[p]] ||
		    !read_wants(op, it, p))
			continue;
		it->skipped &= ~(1u << p);
		*node = it->cand[p];
		*pos = p;
		return true;
	}
	return false;
}

/* An item has no target left: its outcome. */
static void item_end(struct route_op *op, struct route_item *it)
{
	int none = it->fail ? it->fail : -KVS_ECONN; /* nobody answered */

	it->done = true;
	switch (op->call.kind) {
	case CALL_PUT:
	case CALL_TAIL_PUT:
		it->result = it->stored ? 0 : it->refused ? it->refused : none;
		if (it->stored && it->stored < op->replicas)
			__atomic_fetch_add(
				&op->rt->cl->counters.under_replicated, 1,
				__ATOMIC_RELAXED);
		break;
	case CALL_DELETE:
		/* result: 0 once a node deleted it, else a node's error */
		if (!it->present && !it->result)
			it->result = it->answered ? -KVS_ENOTFOUND : none;
		break;
	case CALL_STAT:
		break;
	default:
		if (!it->present && it->result != -ENOSPC)
			it->result = it->answered ? -KVS_ENOTFOUND : none;
		break;
	}
}

/* Lookups: the first span with a layer found nowhere; items at or past it
 * need no more asking. */
static void lookup_bound(struct route_op *op)
{
	size_t layers = op->call.n_layers, bound = op->call.n_spans;

	for (size_t i = 0; i < op->n_items; i++)
		if (op->items[i].done && !op->items[i].present &&
		    i / layers < bound)
			bound = i / layers;
	for (size_t i = bound * layers; i < op->n_items; i++)
		op->items[i].done = true;
}

/* A (node, item, candidate position) to send this round; a probe asks
 * only whether the node holds the item (read repair). */
struct target {
	uint16_t node;
	uint8_t pos;
	bool probe;
	uint32_t item;
};

/*
 * Read repair: with a get's first target, probes (EXISTS) of the other
 * members among its first `replicas` up candidates, in the same round,
 * so that a block found anywhere can be put back to all of those that
 * lack it.
 */
static size_t probes(struct route_op *op, const struct route_item *it,
		     uint8_t read_pos, uint32_t i, struct target *t)
{
	size_t n = 0;
	unsigned up = 0;

	for (uint8_t p = 0; p < it->n_cur && up < op->replicas; p++) {
		if (op->down[it->cand[p]])
			continue;
		up++;
		if (p != read_pos)
			t[n++] = (struct target){ it->cand[p], p, true, i };
	}
	return n;
}

/* This round's targets of every unfinished item; returns how many. */
static size_t plan(struct route_op *op, struct target *t)
{
	enum client_call_kind kind = op->call.kind;
	size_t n = 0;

	if (kind == CALL_LOOKUP)
		lookup_bound(op);
	for (size_t i = 0; i < op->n_items; i++) {
		struct route_item *it = &op->items[i];
		uint16_t node;
		uint8_t pos;
		unsigned k = 0;

		if (it->done)
			continue;
		if (single_target(kind)) {
			if (!next_read_target(op, it, &node, &pos)) {
				item_end(op, it);
				continue;
			}
			t[n++] = (struct target){ node, pos, false,
						  (uint32_t)i };
			if (kind == CALL_GET && op->rounds == 0 &&
			    op->rt->opts.repair_replicas)
				n += probes(op, it, pos, (uint32_t)i, t + n);
			continue;
		}
		if (everywhere(kind)) {
			/* one round, to every member (stat: its own node) */
			for (size_t j = 0; it->pos == 0 && j < op->n_nodes;
			     j++) {
				bool mine = kind == CALL_STAT ? it->cand[0] == j
							      : !op->down[j];

				if (mine)
					t[n++] = (struct target){ (uint16_t)j,
								  0, false,
								  (uint32_t)i };
				k += mine;
			}
			if (it->pos++ || k == 0)
				item_end(op, it);
			continue;
		}
		/* puts: the copies still missing, in rank order */
		while (it->stored + k < op->replicas && it->pos < it->n_cur &&
		       !it->refused) {
			uint8_t p = it->pos++;

			if (skip(op, it, it->cand[p]))
				continue;
			t[n++] = (struct target){ it->cand[p], p, false,
						  (uint32_t)i };
			k++;
		}
		if (k == 0)
			item_end(op, it);
	}
	return n;
}

/* Counting sort of the targets by node, a node's probes after its
 * reads. */
static struct target *by_node(struct route_op *op, struct target *t, size_t n,
			      size_t *start)
{
	struct target *sorted = malloc((n ? n : 1) * sizeof(*sorted));

	if (!sorted)
		return NULL;
	memset(start, 0, (op->n_nodes + 1) * sizeof(*start));
	for (size_t k = 0; k < n; k++)
		start[t[k].node + 1]++;
	for (size_t j = 0; j < op->n_nodes; j++)
		start[j + 1] += start[j];
	for (int probe = 0; probe < 2; probe++)
		for (size_t k = 0; k < n; k++)
			if (t[k].probe == probe)
				sorted[start[t[k].node]++] = t[k];
	for (size_t j = op->n_nodes; j > 0; j--)
		start[j] = start[j - 1];
	start[0] = 0;
	return sorted;
}

/* How many of @t's targets (one node's, from @at) fit one part. */
static size_t part_size(const struct route_op *op, const struct kvs_node *node,
			const struct target *t, size_t at, size_t end)
{
	size_t n = 0, max = node->limits.max_batch;
	uint64_t bytes = 0;

	if (op->call.kind == CALL_STAT || op->call.kind == CALL_TAIL_PUT ||
	    op->call.kind == CALL_TAIL_TAKE)
		return 1;
	while (at + n < end && n < max && t[at + n].probe == t[at].probe) {
		if (op->call.kind == CALL_PUT) {
			size_t len = op->call.obj_lens[t[at + n].item];

			if (n && bytes + len > node->limits.max_payload)
				break;
			bytes += len;
		}
		n++;
	}
	return n ? n : 1;
}

/* A part: the request for targets t[0 .. n) of one node. */
static struct kvs_client_req *part_new(struct route_op *op,
				       const struct target *t, size_t n)
{
	const struct client_call *c = &op->call;
	struct kvs_client_req *part = NULL;
	/* the part's arrays in one block, by decreasing alignment */
	char *mem = calloc(
		n, sizeof(void *) + 2 * sizeof(size_t) + sizeof(uint8_t *) +
			   sizeof(struct kvs_store_key) + sizeof(uint32_t) +
			   sizeof(int) + sizeof(bool));
	void **bufs = (void **)mem;
	size_t *caps = (size_t *)(bufs + n), *lens = caps + n;
	const uint8_t **objs = (const uint8_t **)(lens + n);
	struct kvs_store_key *keys = (struct kvs_store_key *)(objs + n);
	uint32_t *items = (uint32_t *)(keys + n);
	int *results = (int *)(items + n);
	bool *present = (bool *)(results + n);
	uint16_t op_code;

	if (!mem)
		return NULL;

	for (size_t k = 0; k < n; k++) {
		uint32_t i = t[k].item;

		items[k] = i;
		if (c->kind == CALL_STAT || c->kind == CALL_TAIL_PUT ||
		    c->kind == CALL_TAIL_TAKE)
			continue;
		if (c->kind == CALL_PUT) {
			objs[k] = c->objs[i];
			lens[k] = c->obj_lens[i];
			continue;
		}
		keys[k] = *op_key(op, i);
		if (c->kind == CALL_GET) {
			bufs[k] = c->bufs[i];
			caps[k] = c->caps[i];
		}
	}
	switch (c->kind) {
	case CALL_PUT:
		if (req_put_new(objs, lens, n, c->durability, &part))
			part = NULL;
		break;
	case CALL_TAIL_PUT:
		if (req_tail_put_new(c->request_id, c->tail, c->tail_len,
				     c->ttl_ms, &part))
			part = NULL;
		break;
	case CALL_TAIL_TAKE:
		part = req_tail_take_new(c->request_id);
		if (part) {
			part->tail_buf = c->tail_buf;
			part->tail_cap = c->tail_cap;
			part->tail_len = c->tail_out;
		}
		break;
	case CALL_STAT:
		part = req_new(KVS_OP_STAT, 0, 0, 0);
		break;
	default:
		op_code = c->kind == CALL_GET && !t[0].probe ? KVS_OP_GET
			  : c->kind == CALL_DELETE	     ? KVS_OP_DELETE
							     : KVS_OP_EXISTS;
		part = req_new(op_code, (uint32_t)n, 0, 0);
		if (part && req_keys_payload(part, keys, n)) {
			req_free(part);
			part = NULL;
		}
		break;
	}
	if (!part) {
		free(mem);
		return NULL;
	}
	part->part_mem = mem;
	part->items = items;
	part->keys = keys;
	part->bufs = bufs;
	part->caps = caps;
	part->lens = lens;
	part->results = results;
	part->present = present;
	part->on_done = route_part_done;
	part->owner = op;
	return part;
}

/* Sends this round's parts; false when there was nothing to send. */
static bool send_round(struct route_op *op, struct target *t, size_t n)
{
	size_t *start = malloc((op->n_nodes + 1) * sizeof(*start));
	struct target *sorted = start ? by_node(op, t, n, start) : NULL;
	uint64_t deadline =
		kvs_now_ns() +
		(uint64_t)route_node_timeout_ms(op->rt) * 1000000ull;

	if (deadline > op->req->deadline_ns)
		deadline = op->req->deadline_ns;
	if (!sorted) {
		free(start);
		for (size_t k = 0; k < n; k++) {
			op->items[t[k].item].fail = -ENOMEM;
			item_end(op, &op->items[t[k].item]);
		}
		return false;
	}
	for (size_t j = 0; j < op->n_nodes; j++) {
		struct kvs_node *node = op->nodes[j];

		for (size_t at = start[j]; at < start[j + 1];) {
			size_t m =
				part_size(op, node, sorted, at, start[j + 1]);
			struct kvs_client_req *part =
				part_new(op, sorted + at, m);

			if (!part) {
				for (size_t k = at; k < at + m; k++) {
					op->items[sorted[k].item].fail =
						-ENOMEM;
					item_end(op,
						 &op->items[sorted[k].item]);
				}
				at += m;
				continue;
			}
			part->part_node = (uint32_t)j;
			req_seal(op->rt->cl, part, deadline);
			op->outstanding++;
			node_send(op->rt, node, part);
			at += m;
		}
	}
	free(sorted);
	free(start);
	return op->outstanding > 0;
}

void route_op_advance(struct route_op *op)
{
	struct target *t;
	size_t n, per_item;

	if (op->outstanding)
		return;
	if (op->rt->shutting || kvs_now_ns() >= op->req->deadline_ns ||
	    op->fail == -ENOMEM) {
		int why = op->rt->shutting	? -KVS_ECONN
			  : op->fail == -ENOMEM ? -ENOMEM
						: -KVS_ETIMEDOUT;

		for (size_t i = 0; i < op->n_items; i++)
			if (!op->items[i].done) {
				op->items[i].fail = why;
				item_end(op, &op->items[i]);
			}
		op->fail = why;
		op_finish(op);
		return;
	}
	if (wait_for_limits(op))
		return;
	for (size_t j = 0; j < op->n_nodes; j++)
		op->down[j] = op->call.kind != CALL_STAT &&
			      (!op->nodes[j]->limits_known ||
			       kvs_cluster_backoff_is_down(op->rt->backoff,
							   op->nodes[j]->id));
	/* targets an item may have in one round */
	per_item = op->call.kind == CALL_DELETE ? op->n_nodes
		   : op->call.kind == CALL_PUT || op->call.kind == CALL_GET
			   ? op->replicas
			   : 1;
	t = malloc((op->n_items * per_item + 1) * sizeof(*t));
	if (!t) {
		op->fail = -ENOMEM;
		route_op_advance(op);
		return;
	}
	n = plan(op, t);
	op->rounds++;
	if (n == 0 || !send_round(op, t, n)) {
		free(t);
		op_finish(op);
		return;
	}
	free(t);
}
