/*
 * route_answer.c - a cluster call's answers (route.c says how a call goes
 * in rounds): each part's replies item by item, a round's end when its
 * last part is back, and the read repair of a block found after misses.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kvstash/error.h"
#include "kvstash/log.h"
#include "route_internal.h"

/* ---- answers --------------------------------------------------------- */

static bool node_failure(int status)
{
	return status == -KVS_ECONN || status == -KVS_ETIMEDOUT ||
	       status == -ECANCELED || status == -KVS_EAUTH ||
	       status == -KVS_ECONNLIMIT || status == -KVS_EPROTO ||
	       status == -EIO;
}

/* The answer of node @j about item @i (r: its per-item status). */
static void answer(struct route_op *op, struct kvs_client_req *part, size_t k,
		   int r)
{
	struct route_item *it = &op->items[part->items[k]];
	size_t i = part->items[k];
	const struct client_call *c = &op->call;
	uint8_t pos = 0;

	for (uint8_t q = 0; q < it->n_cand; q++)
		if (it->cand[q] == part->part_node)
			pos = q;
	it->attempts++;
	it->answered = true;
	op->any_answer = true;
	switch (c->kind) {
	case CALL_GET:
	case CALL_TAIL_TAKE:
		if (r == 0 || r == -ENOSPC) {
			it->result = r;
			if (c->kind == CALL_GET)
				c->lens[i] = part->lens[k];
			it->present = r == 0;
			it->done = true;
			if (it->attempts > 1)
				__atomic_fetch_add(
					&op->rt->cl->counters.fallbacks, 1,
					__ATOMIC_RELAXED);
			return;
		}
		break;
	case CALL_EXISTS:
	case CALL_LOOKUP:
		if (part->present[k]) {
			it->present = true;
			it->done = true;
			return;
		}
		break;
	case CALL_PUT:
	case CALL_TAIL_PUT:
		if (r == 0)
			it->stored++;
		else if (r == -ENOSPC)
			it->fail = r; /* that node is full: the next one */
		else
			it->refused = r; /* the node refused the object */
		if (r == 0 && pos >= op->replicas)
			__atomic_fetch_add(&op->rt->cl->counters.fallbacks, 1,
					   __ATOMIC_RELAXED);
		return;
	case CALL_DELETE:
		if (r == 0)
			it->result = 0, it->present = true;
		else if (r != -KVS_ENOTFOUND && !it->present)
			it->result = r;
		return;
	case CALL_STAT:
		return;
	}
	/* a read that missed on this node */
	if (pos < it->n_cur) {
		it->answered_cur++;
		it->missed |= 1u << pos;
	} else {
		it->answered_prev++;
	}
}

/* Read repair's probes: the members that lack an item. */
static void probe_answer(struct route_op *op, struct kvs_client_req *part)
{
	for (uint32_t k = 0; part->status == 0 && k < part->count; k++) {
		struct route_item *it = &op->items[part->items[k]];

		for (uint8_t q = 0; q < it->n_cur; q++)
			if (it->cand[q] == part->part_node && !part->present[k])
				it->missed |= 1u << q;
	}
}

static void stat_answer(struct route_op *op, struct kvs_client_req *part)
{
	struct kvs_client_node *out = &op->call.nodes[part->items[0]];

	out->status = part->status;
	if (!out->status && part->stat_n < KVS_STAT_BASE_N)
		out->status = -KVS_EPROTO;
	if (!out->status)
		client_stat_decode(part->stat, &out->stat);
}

void route_part_done(struct kvs_client_req *part)
{
	struct route_op *op = part->owner;
	bool tail = op->call.kind == CALL_TAIL_PUT ||
		    op->call.kind == CALL_TAIL_TAKE;
	/* a tail's part has one item (its count is the wire's) */
	uint32_t n = tail ? 1 : part->count;
	int status;

	if (op->call.kind == CALL_GET || op->call.kind == CALL_TAIL_TAKE)
		req_verify(part);
	status = part->status;
	if (op->call.kind == CALL_STAT) {
		stat_answer(op, part);
	} else if (op->call.kind == CALL_GET && part->opcode == KVS_OP_EXISTS) {
		probe_answer(op, part);
	} else if (status == 0 ||
		   (tail && (status == -KVS_ENOTFOUND || status == -ENOSPC))) {
		for (uint32_t k = 0; k < n; k++)
			answer(op, part, k, tail ? status : part->results[k]);
	} else {
		/* the node failed, or refused the whole request */
		for (uint32_t k = 0; k < n; k++) {
			struct route_item *it = &op->items[part->items[k]];

			it->attempts++;
			if (node_failure(status)) {
				it->fail = status;
				op->fail = status;
			} else if (op->call.kind == CALL_PUT ||
				   op->call.kind == CALL_TAIL_PUT) {
				it->refused = status;
			} else {
				it->fail = status;
			}
		}
	}
	req_free(part);
	op->outstanding--;
	route_op_advance(op);
}

/* ---- read repair ----------------------------------------------------- */

static void repair_done(struct kvs_client_req *part)
{
	uint64_t ok = 0;

	for (uint32_t k = 0; part->status == 0 && k < part->count; k++)
		ok += part->results[k] == 0;
	__atomic_fetch_add(&part->cl->counters.repairs, ok, __ATOMIC_RELAXED);
	free(part->owner); /* the copies */
	req_free(part);
}

/* Puts each block found back to the current candidates that answered
 * 'miss' before it (one part per node and block: rare, and small). */
void route_repair(struct route_op *op)
{
	const struct client_call *c = &op->call;
	uint64_t deadline =
		kvs_now_ns() +
		(uint64_t)route_node_timeout_ms(op->rt) * 1000000ull;

	for (size_t i = 0; i < op->n_items; i++) {
		struct route_item *it = &op->items[i];

		if (it->result || !it->missed)
			continue;
		for (uint8_t p = 0; p < it->n_cur; p++) {
			struct kvs_node *node = op->nodes[it->cand[p]];
			struct kvs_client_req *part;
			uint8_t *copy;
			const uint8_t *obj;

			if (!(it->missed & 1u << p) ||
			    c->lens[i] > node->limits.max_object)
				continue;
			copy = malloc(c->lens[i]);
			if (!copy)
				return;
			memcpy(copy, c->bufs[i], c->lens[i]);
			obj = copy;
			if (req_put_new(&obj, &c->lens[i], 1,
					KVS_DURABILITY_MEMORY, &part)) {
				free(copy);
				return;
			}
			part->results = calloc(1, sizeof(int));
			part->part_mem = part->results;
			if (!part->results) {
				free(copy);
				req_free(part);
				return;
			}
			part->owner = copy;
			part->on_done = repair_done;
			req_seal(op->rt->cl, part, deadline);
			node_send(op->rt, node, part);
		}
	}
}
