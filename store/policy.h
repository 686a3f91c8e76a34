/*
 * policy.h - the DRAM tier's eviction policy (policy.c): the prefix-aware
 * ARC (the default), S3-FIFO and LRU, chosen by opts.eviction, and the
 * ghosts of evicted keys.
 */
#ifndef KVSTASH_STORE_POLICY_H
#define KVSTASH_STORE_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "index.h"
#include "list.h"

struct kvs_store;

/* The queues of the prefix policy, indexed by enum dram_queue less DQ_U,
 * and the LRU list. */
enum { PQ_U, PQ_T1, PQ_T2, PQ_B1, PQ_B2, PQ_N };

struct dram_policy {
	struct list q[PQ_N];
	uint64_t n[PQ_N]; /* entries in each */
	double p; /* ARC's target size of T1, in objects */
	uint64_t c; /* objects the tier held when it was last full */
	/* set dueling: ghost hits of ARC's leaders less LRU's, saturating;
	 * over 0 the other keys take LRU's order */
	int psel;
	struct list lru;
};

void dram_policy_init(struct dram_policy *pol);
/* At close: frees the released entries that children still named. */
void dram_policy_fini(struct kvs_store *s);

/* The entry of the parent of @e's object @obj (its header's parent span
 * id, @e's layer) for the prefix policy, or NULL: another policy, a
 * first span, a parent not in the index. */
struct entry *dram_parent_of(struct kvs_store *s, const struct entry *e,
			     const uint8_t *obj, size_t len);
/* @e's slot was just set: it enters the policy's queues.  @parent: as
 * dram_parent_of, or NULL. */
void dram_insert(struct kvs_store *s, struct entry *e, struct entry *parent);
void dram_hit(struct kvs_store *s, struct entry *e);
/* Removes @e's DRAM copy (slot freed unless pinned: then at unpin). */
void dram_drop(struct kvs_store *s, struct entry *e);
/* Takes @e out of a ghost queue, if it is in one. */
void dram_forget_ghost(struct kvs_store *s, struct entry *e);
/* Allocates a slot of @cls for @e (NULL: a reservation), evicting (and
 * spilling) as needed; @parent (dram_parent_of) is never evicted for it,
 * and with the prefix policy an @e whose parent is indexed without a
 * DRAM copy gets no slot (it could not be hit before its parent is put
 * again).  Returns the slot or NULL (everything pinned / no tier). */
uint8_t *dram_make_room(struct kvs_store *s, int cls, struct entry *e,
			struct entry *parent);
/* Frees @e if it holds nothing and nobody pins it. */
void entry_maybe_free(struct kvs_store *s, struct entry *e);

#endif
