/*
 * replay_opt.c - the offline optimum of `kvstash bench trace`: Belady's
 * rule over whole blocks, respecting the chain.  Requests are replayed in
 * order as the LRU baseline replays them (longest cached prefix, then
 * every block of the request touched in order); a block's priority is
 * (the index of the next request whose chain holds it, its depth), and
 * when the cache is full the block with the largest priority goes: the
 * farthest next use, the deeper block on a tie.  The block being touched
 * competes too: if it ranks last it is not cached (bypass).
 *
 * Every request holding a block also holds its parent, so a parent's
 * next use is never later than its child's and, with ties to the deeper
 * block, a victim never has a cached child: the cache stays closed under
 * prefixes, and its block hits (the most any policy can have, since
 * blocks are of one size) are all prefix hits.
 *
 * Two tiers: the priority does not depend on the capacity, so the cache
 * of the DRAM capacity always holds a subset of the cache of both tiers
 * together (a stack algorithm).  DRAM serves the part of a hit prefix the
 * smaller cache holds, NVMe the rest.  Next uses come from one backward
 * pass over the requests; the cache is a binary max-heap over nodes.
 */
#include <errno.h>
#include <stdlib.h>

#include "replay.h"

#define NEVER UINT32_MAX
#define NOT_CACHED UINT32_MAX

struct opt_cache {
	uint64_t capacity, count;
	uint32_t *heap; /* nodes, the largest priority first */
	uint32_t *pos; /* per node: its place in @heap, or NOT_CACHED */
	uint32_t *next; /* per node: its priority's next use */
	const struct trace_node *nodes;
	uint64_t evictions;
};

/* Whether node @a ranks after node @b (leaves the cache first). */
static bool worse(const struct opt_cache *c, uint32_t a, uint32_t b)
{
	if (c->next[a] != c->next[b])
		return c->next[a] > c->next[b];
	return c->nodes[a].depth > c->nodes[b].depth;
}

static void put_at(struct opt_cache *c, uint32_t i, uint32_t n)
{
	c->heap[i] = n;
	c->pos[n] = i;
}

static void sift_up(struct opt_cache *c, uint32_t i)
{
	uint32_t n = c->heap[i];

	while (i > 0 && worse(c, n, c->heap[(i - 1) / 2])) {
		put_at(c, i, c->heap[(i - 1) / 2]);
		i = (i - 1) / 2;
	}
	put_at(c, i, n);
}

static void sift_down(struct opt_cache *c, uint32_t i)
{
	uint32_t n = c->heap[i];

	for (;;) {
		uint64_t l = 2 * (uint64_t)i + 1, m = l;

		if (l >= c->count)
			break;
		if (l + 1 < c->count && worse(c, c->heap[l + 1], c->heap[l]))
			m = l + 1;
		if (!worse(c, c->heap[m], n))
			break;
		put_at(c, i, c->heap[m]);
		i = (uint32_t)m;
	}
	put_at(c, i, n);
}

/* Node @n is used now; its next use is @next.  Returns whether it is
 * cached afterwards. */
static bool opt_touch(struct opt_cache *c, uint32_t n, uint32_t next)
{
	uint32_t i = c->pos[n];

	c->next[n] = next;
	if (i != NOT_CACHED) {
		sift_up(c, i);
		sift_down(c, c->pos[n]);
		return true;
	}
	if (c->capacity == 0)
		return false;
	if (c->count == c->capacity) {
		uint32_t v = c->heap[0];

		if (!worse(c, v, n))
			return false; /* @n ranks last: bypassed */
		c->pos[v] = NOT_CACHED;
		c->evictions++;
		put_at(c, 0, n);
		sift_down(c, 0);
		return true;
	}
	put_at(c, (uint32_t)c->count++, n);
	sift_up(c, (uint32_t)c->count - 1);
	return true;
}

static int opt_init(struct opt_cache *c, const struct trace *t,
		    uint64_t capacity, uint32_t *next)
{
	c->capacity = capacity < t->n_nodes ? capacity : t->n_nodes;
	c->count = 0;
	c->evictions = 0;
	c->nodes = t->nodes;
	c->next = next;
	c->heap = malloc((c->capacity + 1) * sizeof(*c->heap));
	c->pos = malloc((t->n_nodes + 1) * sizeof(*c->pos));
	if (!c->heap || !c->pos) {
		free(c->heap);
		free(c->pos);
		return -ENOMEM;
	}
	for (size_t i = 0; i < t->n_nodes; i++)
		c->pos[i] = NOT_CACHED;
	return 0;
}

static void opt_fini(struct opt_cache *c)
{
	free(c->heap);
	free(c->pos);
}

/* The longest prefix of @chain (@n blocks) that @c holds. */
static uint64_t cached_prefix(const struct opt_cache *c, const uint32_t *chain,
			      uint32_t n)
{
	uint64_t hit = 0;

	while (hit < n && c->pos[chain[hit]] != NOT_CACHED)
		hit++;
	return hit;
}

int replay_opt(const struct trace *t, const struct replay_plan *plan,
	       uint64_t dram_capacity, uint64_t nvme_capacity,
	       struct replay_tally *out)
{
	uint64_t block = (uint64_t)plan->objects_per_block * plan->object_bytes;
	uint64_t cap_dram = dram_capacity / plan->full_block_bytes;
	uint64_t cap_all = cap_dram + nvme_capacity / plan->full_block_bytes;
	bool two = nvme_capacity / plan->full_block_bytes > 0 && cap_dram > 0;
	struct replay_tally tl = { 0 };
	struct opt_cache all = { 0 }, dram = { 0 };
	uint32_t *uses, *last, *next_all, *next_dram = NULL;
	int rc = -ENOMEM;

	/* uses[k]: the next request holding the block at chain position k */
	uses = malloc((t->n_chain + 1) * sizeof(*uses));
	last = malloc((t->n_nodes + 1) * sizeof(*last));
	next_all = malloc((t->n_nodes + 1) * sizeof(*next_all));
	if (two)
		next_dram = malloc((t->n_nodes + 1) * sizeof(*next_dram));
	if (!uses || !last || !next_all || (two && !next_dram))
		goto out_free;
	for (size_t i = 0; i < t->n_nodes; i++)
		last[i] = NEVER;
	for (size_t r = t->n_requests; r-- > 0;) {
		const struct trace_request *rq = &t->requests[r];

		for (uint32_t k = 0; k < rq->n_blocks; k++) {
			uint32_t n = t->chain[rq->first + k];

			uses[rq->first + k] = last[n];
			last[n] = (uint32_t)r;
		}
	}
	if (opt_init(&all, t, cap_all, next_all))
		goto out_free;
	if (two && opt_init(&dram, t, cap_dram, next_dram)) {
		opt_fini(&all);
		goto out_free;
	}
	for (size_t r = 0; r < t->n_requests; r++) {
		const struct trace_request *rq = &t->requests[r];
		const uint32_t *chain = t->chain + rq->first;
		uint64_t hit = cached_prefix(&all, chain, rq->n_blocks);
		uint64_t in_dram =
			two ? cached_prefix(&dram, chain, rq->n_blocks) : hit;

		if (!two && cap_dram == 0)
			in_dram = 0;
		tl.dram_hit_blocks += in_dram;
		tl.nvme_hit_blocks += hit - in_dram;
		for (uint32_t k = 0; k < rq->n_blocks; k++) {
			opt_touch(&all, chain[k], uses[rq->first + k]);
			if (two)
				opt_touch(&dram, chain[k], uses[rq->first + k]);
		}
		replay_tally_request(&tl, rq, hit, plan->block_tokens);
		tl.bytes_read += hit * block;
		tl.bytes_written += (rq->n_blocks - hit) * block;
	}
	tl.evicted_blocks = all.evictions;
	/* blocks the DRAM cache let go of that both tiers kept */
	tl.demoted_blocks = two && dram.evictions > all.evictions
				    ? dram.evictions - all.evictions
				    : 0;
	replay_tally_finish(&tl, plan, two);
	if (two)
		opt_fini(&dram);
	opt_fini(&all);
	*out = tl;
	rc = 0;
out_free:
	free(uses);
	free(last);
	free(next_all);
	free(next_dram);
	return rc;
}
