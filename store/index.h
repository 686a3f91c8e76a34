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
	DQ_SMALL,
	DQ_MAIN,
	DQ_GHOST,
};

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
	uint8_t dfreq;
	struct list dlink;
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
