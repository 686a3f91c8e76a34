/*
 * policy.h - the DRAM tier's eviction policy (policy.c): S3-FIFO queues and
 * the ghost of evicted keys.
 */
#ifndef KVSTASH_STORE_POLICY_H
#define KVSTASH_STORE_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "index.h"

struct kvs_store;

void dram_insert(struct kvs_store *s, struct entry *e);
void dram_hit(struct entry *e);
/* Removes @e's DRAM copy (slot freed unless pinned: then at unpin). */
void dram_drop(struct kvs_store *s, struct entry *e);
/* Allocates a slot of @cls, evicting (and spilling) as needed.
 * Returns the slot or NULL (everything pinned / no tier). */
uint8_t *dram_make_room(struct kvs_store *s, int cls);
void ghost_trim(struct kvs_store *s);
/* Frees @e if it holds nothing and nobody pins it. */
void entry_maybe_free(struct kvs_store *s, struct entry *e);

#endif
