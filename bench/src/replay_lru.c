/*
 * replay_lru.c - the LRU baseline of `kvstash bench trace`: the trace's
 * requests against two LRU lists of whole blocks (DRAM in front of NVMe;
 * a block pushed out of DRAM is demoted to the head of NVMe, a block read
 * from NVMe moves back to the head of DRAM), which together behave as one
 * LRU of the summed capacity.  Same steps as the store replay: longest
 * cached prefix, reads of its blocks in order, then the blocks after it
 * inserted (or refreshed) in order.  Nodes index the lists directly.
 */
#include <errno.h>
#include <stdlib.h>

#include "replay.h"

enum { NOWHERE = 0, IN_DRAM = 1, IN_NVME = 2 };

struct list {
	uint32_t head, tail; /* most and least recently used */
	uint64_t count, capacity;
};

struct lru {
	uint32_t *prev, *next;
	uint8_t *where;
	struct list tier[3]; /* indexed by IN_DRAM, IN_NVME */
};

static void unlink_node(struct lru *c, uint32_t n)
{
	struct list *l = &c->tier[c->where[n]];

	if (c->prev[n] != TRACE_NO_NODE)
		c->next[c->prev[n]] = c->next[n];
	else
		l->head = c->next[n];
	if (c->next[n] != TRACE_NO_NODE)
		c->prev[c->next[n]] = c->prev[n];
	else
		l->tail = c->prev[n];
	l->count--;
	c->where[n] = NOWHERE;
}

static void push_head(struct lru *c, int tier, uint32_t n)
{
	struct list *l = &c->tier[tier];

	c->prev[n] = TRACE_NO_NODE;
	c->next[n] = l->head;
	if (l->head != TRACE_NO_NODE)
		c->prev[l->head] = n;
	else
		l->tail = n;
	l->head = n;
	l->count++;
	c->where[n] = (uint8_t)tier;
}

/* Makes @n the most recent block, demoting and dropping as needed. */
static void touch(struct lru *c, uint32_t n, struct replay_tally *t)
{
	struct list *dram = &c->tier[IN_DRAM], *nvme = &c->tier[IN_NVME];

	if (c->where[n] != NOWHERE)
		unlink_node(c, n);
	if (dram->capacity == 0 && nvme->capacity == 0)
		return;
	push_head(c, dram->capacity ? IN_DRAM : IN_NVME, n);
	if (dram->count > dram->capacity) {
		uint32_t v = dram->tail;

		unlink_node(c, v);
		if (nvme->capacity) {
			push_head(c, IN_NVME, v);
			t->demoted_blocks++;
		} else {
			t->evicted_blocks++;
		}
	}
	if (nvme->count > nvme->capacity) {
		unlink_node(c, nvme->tail);
		t->evicted_blocks++;
	}
}

void replay_tally_finish(struct replay_tally *tl,
			 const struct replay_plan *plan, bool demoted)
{
	uint64_t block = (uint64_t)plan->objects_per_block * plan->object_bytes;

	tl->objects_read = tl->hit_blocks * plan->objects_per_block;
	tl->objects_put =
		(tl->lookup_blocks - tl->hit_blocks) * plan->objects_per_block;
	tl->dram_bytes_read = tl->dram_hit_blocks * block;
	tl->nvme_bytes_read = tl->nvme_hit_blocks * block;
	tl->nvme_bytes_written = demoted ? tl->demoted_blocks * block : 0;
	tl->target.evictions = tl->evicted_blocks * plan->objects_per_block;
}

int replay_lru(const struct trace *t, const struct replay_plan *plan,
	       uint64_t dram_capacity, uint64_t nvme_capacity,
	       struct replay_tally *out)
{
	uint64_t block = (uint64_t)plan->objects_per_block * plan->object_bytes;
	struct replay_tally tl = { 0 };
	struct lru c = { 0 };

	c.prev = malloc(t->n_nodes * sizeof(*c.prev) + 1);
	c.next = malloc(t->n_nodes * sizeof(*c.next) + 1);
	c.where = calloc(t->n_nodes + 1, 1);
	if (!c.prev || !c.next || !c.where) {
		free(c.prev);
		free(c.next);
		free(c.where);
		return -ENOMEM;
	}
	for (int i = IN_DRAM; i <= IN_NVME; i++)
		c.tier[i].head = c.tier[i].tail = TRACE_NO_NODE;
	c.tier[IN_DRAM].capacity = dram_capacity / plan->full_block_bytes;
	c.tier[IN_NVME].capacity = nvme_capacity / plan->full_block_bytes;
	for (size_t r = 0; r < t->n_requests; r++) {
		const struct trace_request *rq = &t->requests[r];
		const uint32_t *chain = t->chain + rq->first;
		uint64_t hit = 0;

		while (hit < rq->n_blocks && c.where[chain[hit]] != NOWHERE)
			hit++;
		for (uint64_t b = 0; b < rq->n_blocks; b++) {
			if (b < hit) {
				if (c.where[chain[b]] == IN_NVME)
					tl.nvme_hit_blocks++;
				else
					tl.dram_hit_blocks++;
			}
			touch(&c, chain[b], &tl);
		}
		replay_tally_request(&tl, rq, hit, plan->block_tokens);
		tl.bytes_read += hit * block;
		tl.bytes_written += (rq->n_blocks - hit) * block;
	}
	replay_tally_finish(&tl, plan, nvme_capacity > 0);
	free(c.prev);
	free(c.next);
	free(c.where);
	*out = tl;
	return 0;
}
