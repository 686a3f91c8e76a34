/*
 * index.h - an object's entry (its state in both tiers) and the hash table
 * from key to entry (index.c).
 */
#ifndef KVSTASH_STORE_INDEX_H
#define KVSTASH_STORE_INDEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvstash/store.h"
#include "list.h"

/* ---- entries and index (index.c) ------------------------------------- */

enum dram_queue {
	DQ_NONE = 0,
	DQ_SMALL, /* s3fifo */
	DQ_MAIN,
	DQ_GHOST,
	DQ_U, /* prefix: put, never read, never extended */
	DQ_T1, /* prefix: extended, seen once */
	DQ_T2, /* prefix: read, or seen again */
	DQ_B1, /* prefix: ghost of T1 */
	DQ_B2, /* prefix: ghost of T2 */
	DQ_LRU, /* lru */
};

/* Whether @dq is a queue of keys without a DRAM copy (a ghost). */
static inline bool dq_ghost(uint8_t dq)
{
	return dq == DQ_GHOST || dq == DQ_B1 || dq == DQ_B2;
}

struct segment;

struct entry {
	struct kvs_store_key key;
	uint64_t hash;
	struct entry *hnext;
	uint32_t len; /* object bytes */
	uint64_t psum; /* xxh3-64 of the object bytes */
	uint32_t pins;
	bool in_index;
	/* DRAM tier */
	uint8_t *slot; /* record image: header, object, pad */
	int cls;
	uint8_t dq; /* enum dram_queue */
	/* s3fifo: reads since the last pass (2 bits); prefix: 1 when the
	 * next DRAM copy goes to T2 (the key was cached or a ghost) */
	uint8_t dfreq;
	struct list dlink;
	/* prefix: the parent's entry (parent span id, same layer) while
	 * this entry has a DRAM copy and the parent had one when it was
	 * placed, and how many entries name this one so (a struct named by
	 * a child outlives its release until the last child lets go) */
	struct entry *dparent;
	uint32_t nkids;
	/* NVMe tier */
	struct segment *seg; /* segment of the newest record, or NULL */
	uint64_t off;
	uint64_t seq;
	bool rec_checked; /* the record is known whole: written or read back
			   * and checked by this process (recovery checks
			   * only the headers of older segments) */
	uint8_t nfreq;
	bool nghost;
	/* the key's newest record failed a check (dropped, counted): gets
	 * say -KVS_ECORRUPT rather than -KVS_ENOTFOUND until a new put */
	bool bad;
	/* the key is deleted: @seg (once written) holds its tombstone, kept
	 * while an older record of the key may remain in an older segment;
	 * no DRAM copy, gets miss */
	bool tomb;
	/* a record of the key may be on disk (newest or superseded); with
	 * @first_seg, the oldest segment that may hold one */
	bool on_disk;
	uint64_t first_seg;
	struct list nlink; /* seg->records, or the NVMe ghost queue */
	struct list tlink; /* store->tombs, while a tombstone is attached */
};

struct index {
	struct entry **bucket;
	size_t nbuckets, count;
};

int index_init(struct index *ix);
void index_fini(struct index *ix);
struct entry *index_find(struct index *ix, const struct kvs_store_key *key);
/* New entry for @key (must be absent), 0 or -ENOMEM. */
int index_insert(struct index *ix, const struct kvs_store_key *key,
		 struct entry **out);
void index_remove(struct index *ix, struct entry *e);
/* Calls @fn on every entry (which may remove it). */
void index_each(struct index *ix, void (*fn)(void *arg, struct entry *e),
		void *arg);

#endif
