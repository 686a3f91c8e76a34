/*
 * dram.c - the DRAM arena: one fixed mapping (hugepages when the system
 * has them, else normal pages with a transparent-hugepage hint), cut into
 * equal slabs; a slab serves one size class of 4096-aligned slots at a
 * time and returns to the shared pool as soon as it is empty.  Classes
 * grow by 1/8, so a slot wastes under 12.5%; slabs are uniform, so churn
 * never leaves free space that cannot be reused (no external
 * fragmentation).  Free slots are chained through their first 4 bytes.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "kvstash/log.h"
#include "common/bytes.h"
#include "dram.h"
#include "kvstash/store.h"

#define NONE UINT32_MAX
#define SLAB_MAX (4u << 20)
#define SLAB_MIN (64u << 10)
#define HUGE_2M (2u << 20)

static void build_classes(struct dram *d)
{
	uint32_t size = KVS_STORE_ALIGN;

	d->nclasses = 0;
	while (d->nclasses < 63) {
		d->class_size[d->nclasses++] = size;
		if (size >= d->slab_size)
			break;
		uint64_t next =
			kvs_align_up((uint64_t)size * 9 / 8, KVS_STORE_ALIGN);
		if (next < size + KVS_STORE_ALIGN)
			next = size + KVS_STORE_ALIGN;
		size = next > d->slab_size ? d->slab_size : (uint32_t)next;
	}
	for (uint32_t i = 0; i < d->nclasses; i++)
		list_init(&d->partial[i]);
}

static void *map_arena(size_t len, bool *huge)
{
	void *p;

	if (len % HUGE_2M == 0) {
		p = mmap(NULL, len, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
		if (p != MAP_FAILED) {
			*huge = true;
			return p;
		}
	}
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		 -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	madvise(p, len, MADV_HUGEPAGE);
	*huge = false;
	return p;
}

int dram_init(struct dram *d, uint64_t capacity)
{
	memset(d, 0, sizeof(*d));
	d->slab_size = SLAB_MAX;
	while (d->slab_size > SLAB_MIN && capacity / d->slab_size < 16)
		d->slab_size /= 2;
	d->nslabs = (uint32_t)(capacity / d->slab_size);
	if (d->nslabs == 0) {
		kvs_log(KVS_LOG_ERR, "store: DRAM capacity %llu below %u",
			(unsigned long long)capacity, SLAB_MIN);
		return -EINVAL;
	}
	d->capacity = capacity;
	d->map_len = (size_t)d->nslabs * d->slab_size;
	d->base = map_arena(d->map_len, &d->huge);
	if (!d->base) {
		kvs_log(KVS_LOG_ERR, "store: cannot map %zu bytes of DRAM",
			d->map_len);
		return -ENOMEM;
	}
	d->slabs = calloc(d->nslabs, sizeof(*d->slabs));
	d->free_slabs = calloc(d->nslabs, sizeof(*d->free_slabs));
	if (!d->slabs || !d->free_slabs) {
		dram_fini(d);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < d->nslabs; i++) {
		d->slabs[i].cls = NONE;
		list_init(&d->slabs[i].link);
		d->free_slabs[i] = d->nslabs - 1 - i;
	}
	d->nfree_slabs = d->nslabs;
	build_classes(d);
	return 0;
}

void dram_register(struct dram *d,
		   int (*fn)(void *ctx, void *base, size_t len,
			     bool unregister),
		   void *ctx)
{
	if (!fn || fn(ctx, d->base, d->map_len, false) != 0)
		return;
	d->register_fn = fn;
	d->register_ctx = ctx;
	d->host_registered = true;
}

void dram_fini(struct dram *d)
{
	if (d->host_registered)
		d->register_fn(d->register_ctx, d->base, d->map_len, true);
	if (d->base)
		munmap(d->base, d->map_len);
	free(d->slabs);
	free(d->free_slabs);
	memset(d, 0, sizeof(*d));
}

int dram_class(const struct dram *d, uint64_t rec)
{
	for (uint32_t i = 0; i < d->nclasses; i++)
		if (d->class_size[i] >= rec)
			return (int)i;
	return -1;
}

uint8_t *dram_alloc(struct dram *d, int cls)
{
	uint32_t csize = d->class_size[cls], si, idx;
	struct slab *sl;
	uint8_t *slot;

	if (!list_empty(&d->partial[cls])) {
		sl = list_entry(d->partial[cls].next, struct slab, link);
	} else {
		if (d->nfree_slabs == 0)
			return NULL;
		si = d->free_slabs[--d->nfree_slabs];
		sl = &d->slabs[si];
		sl->cls = (uint32_t)cls;
		sl->nslots = d->slab_size / csize;
		sl->nfree = sl->nslots;
		sl->carved = 0;
		sl->free_head = NONE;
		list_push(&d->partial[cls], &sl->link);
	}
	si = (uint32_t)(sl - d->slabs);
	if (sl->free_head != NONE) {
		idx = sl->free_head;
		slot = d->base + (size_t)si * d->slab_size +
		       (size_t)idx * csize;
		memcpy(&sl->free_head, slot, sizeof(uint32_t));
	} else {
		idx = sl->carved++;
		slot = d->base + (size_t)si * d->slab_size +
		       (size_t)idx * csize;
	}
	if (--sl->nfree == 0)
		list_del(&sl->link);
	d->used_bytes += csize;
	return slot;
}

void dram_free(struct dram *d, uint8_t *slot, int cls)
{
	size_t off = (size_t)(slot - d->base);
	uint32_t si = (uint32_t)(off / d->slab_size);
	uint32_t csize = d->class_size[cls];
	uint32_t idx = (uint32_t)(off % d->slab_size / csize);
	struct slab *sl = &d->slabs[si];

	memcpy(slot, &sl->free_head, sizeof(uint32_t));
	sl->free_head = idx;
	if (sl->nfree++ == 0)
		list_push(&d->partial[cls], &sl->link);
	d->used_bytes -= csize;
	if (sl->nfree == sl->nslots) {
		list_del(&sl->link);
		sl->cls = NONE;
		d->free_slabs[d->nfree_slabs++] = si;
	}
}
