/*
 * dram.h - the DRAM arena (dram.c): slabs of page-aligned memory split into
 * size-classed slots for record images.
 */
#ifndef KVSTASH_STORE_DRAM_H
#define KVSTASH_STORE_DRAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "list.h"

/* ---- DRAM arena (dram.c) --------------------------------------------- */

struct slab {
	struct list link; /* in its class's partial list */
	uint32_t cls; /* UINT32_MAX: free slab */
	uint32_t free_head; /* first free slot index, UINT32_MAX: none */
	uint32_t nfree;
	uint32_t nslots;
	uint32_t carved; /* slots handed out at least once */
};

struct dram {
	uint8_t *base;
	size_t map_len;
	uint64_t capacity;
	uint32_t slab_size;
	uint32_t nslabs;
	struct slab *slabs;
	uint32_t *free_slabs; /* stack */
	uint32_t nfree_slabs;
	uint32_t nclasses;
	uint32_t class_size[64];
	struct list partial[64];
	uint64_t used_bytes; /* slot bytes handed out */
	bool huge, host_registered;
	int (*register_fn)(void *ctx, void *base, size_t len, bool unregister);
	void *register_ctx;
};

int dram_init(struct dram *d, uint64_t capacity);
/* Registers the arena through @fn (opts.register_arena), if any. */
void dram_register(struct dram *d,
		   int (*fn)(void *ctx, void *base, size_t len,
			     bool unregister),
		   void *ctx);
void dram_fini(struct dram *d);
/* Class for a record of @rec bytes, or -1 if it cannot live in DRAM. */
int dram_class(const struct dram *d, uint64_t rec);
/* A slot of class @cls, or NULL if none is free. */
uint8_t *dram_alloc(struct dram *d, int cls);
void dram_free(struct dram *d, uint8_t *slot, int cls);

#endif
