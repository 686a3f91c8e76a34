/*
 * policy.c - S3-FIFO for the DRAM tier (Yang et al., SOSP'23), in bytes of
 * slots: new objects enter the small FIFO (10% of the arena); an object
 * leaving the small FIFO moves to the main FIFO if it was read while there,
 * else it is evicted and its key remembered in the ghost FIFO; a put of a
 * ghost key goes straight to main.  The main FIFO reinserts objects read
 * since their last pass (a 2-bit counter), evicting the others.  A one-time
 * scan therefore passes through the small FIFO without touching the hot
 * set in main.  Pinned objects are never evicted; they are passed over.
 * An evicted object with no NVMe copy is spilled there first.
 */
#include <stdlib.h>

#include "kvstash/log.h"
#include "store_internal.h"

static uint64_t slot_bytes(const struct kvs_store *s, const struct entry *e)
{
	return s->dram.class_size[e->cls];
}

static void ghost_push(struct kvs_store *s, struct entry *e)
{
	e->dq = DQ_GHOST;
	list_push(&s->ghost, &e->dlink);
	s->nghost_d++;
}

void ghost_trim(struct kvs_store *s)
{
	uint64_t limit = s->nmain > 256 ? s->nmain : 256;
	struct list *l;

	while (s->nghost_d > limit && (l = list_oldest(&s->ghost))) {
		struct entry *e = list_entry(l, struct entry, dlink);

		list_del(&e->dlink);
		e->dq = DQ_NONE;
		s->nghost_d--;
		entry_maybe_free(s, e);
	}
}

void dram_insert(struct kvs_store *s, struct entry *e)
{
	uint64_t b = slot_bytes(s, e);

	if (e->dq == DQ_GHOST) {
		list_del(&e->dlink);
		s->nghost_d--;
		e->dq = DQ_MAIN;
		list_push(&s->main, &e->dlink);
		s->main_bytes += b;
		s->nmain++;
	} else {
		e->dq = DQ_SMALL;
		list_push(&s->small, &e->dlink);
		s->small_bytes += b;
	}
	e->dfreq = 0;
	s->dram_objects++;
	s->dram_obj_bytes += e->len;
}

void dram_hit(struct entry *e)
{
	if (e->dfreq < 3)
		e->dfreq++;
}

/* Takes @e out of its DRAM queue (the slot stays). */
static void dram_unlink(struct kvs_store *s, struct entry *e)
{
	uint64_t b = slot_bytes(s, e);

	if (e->dq == DQ_SMALL) {
		s->small_bytes -= b;
	} else if (e->dq == DQ_MAIN) {
		s->main_bytes -= b;
		s->nmain--;
	} else {
		return;
	}
	list_del(&e->dlink);
	e->dq = DQ_NONE;
	s->dram_objects--;
	s->dram_obj_bytes -= e->len;
}

void entry_maybe_free(struct kvs_store *s, struct entry *e)
{
	if (e->pins)
		return;
	if (e->in_index &&
	    (e->slot || e->seg || e->dq == DQ_GHOST || e->nghost || e->bad))
		return;
	if (e->in_index)
		index_remove(&s->index, e);
	/* older records of the key may be left (a put that could not write
	 * its replacement, say): no tombstone is dropped while they may
	 * remain */
	if (e->on_disk && e->first_seg < s->stale_floor)
		s->stale_floor = e->first_seg;
	/* a zombie (replaced while pinned) may still be on lists */
	if (e->dq == DQ_GHOST) {
		list_del(&e->dlink);
		s->nghost_d--;
		e->dq = DQ_NONE;
	}
	if (e->slot) {
		dram_unlink(s, e);
		dram_free(&s->dram, e->slot, e->cls);
	}
	if (e->nghost) {
		list_del(&e->nlink);
		s->nghost_n--;
	}
	nvme_detach(s, e);
	free(e);
}

void dram_drop(struct kvs_store *s, struct entry *e)
{
	if (!e->slot)
		return;
	dram_unlink(s, e);
	if (e->pins)
		return; /* freed by the last unpin (entry is a zombie) */
	dram_free(&s->dram, e->slot, e->cls);
	e->slot = NULL;
	e->cls = -1;
}

/* Moves the oldest of @from to the head of main. */
static void to_main(struct kvs_store *s, struct entry *e)
{
	uint64_t b = slot_bytes(s, e);

	list_del(&e->dlink);
	if (e->dq == DQ_SMALL) {
		s->small_bytes -= b;
		s->main_bytes += b;
		s->nmain++;
	}
	e->dq = DQ_MAIN;
	list_push(&s->main, &e->dlink);
}

/* The next object to evict, taken out of its queue; NULL if none can be.
 * *@from_small says whether it leaves the small FIFO (-> ghost). */
static struct entry *pick_victim(struct kvs_store *s, bool *from_small)
{
	uint64_t small_target = s->dram.map_len / 10;
	uint64_t tries = 2 * (s->dram_objects + 2) + 8;
	struct list *l;

	while (tries--) {
		bool use_small = !list_empty(&s->small) &&
				 (s->small_bytes >= small_target ||
				  list_empty(&s->main));

		l = list_oldest(use_small ? &s->small : &s->main);
		if (!l)
			return NULL;
		struct entry *e = list_entry(l, struct entry, dlink);

		if (use_small) {
			if (e->pins || e->dfreq > 0) {
				e->dfreq = 0;
				to_main(s, e);
				continue;
			}
		} else if (e->pins || e->dfreq > 0) {
			if (e->dfreq > 0)
				e->dfreq--;
			to_main(s, e);
			continue;
		}
		*from_small = use_small;
		dram_unlink(s, e);
		return e;
	}
	return NULL;
}

static void evict(struct kvs_store *s, struct entry *e, bool from_small)
{
	int buf_index;

	if (!e->seg && s->nvme_on) {
		buf_index = buf_index_of(s, e->slot);
		if (nvme_write_image(s, e, e->slot, buf_index,
				     KVS_DURABILITY_WRITTEN) == 0)
			s->st.spills++;
		else
			kvs_log(KVS_LOG_WARN,
				"store: spill failed, object dropped");
	}
	dram_free(&s->dram, e->slot, e->cls);
	e->slot = NULL;
	e->cls = -1;
	s->st.evictions++;
	if (from_small) {
		ghost_push(s, e);
		ghost_trim(s);
	} else {
		entry_maybe_free(s, e);
	}
}

uint8_t *dram_make_room(struct kvs_store *s, int cls)
{
	uint8_t *slot;
	bool from_small;

	if (!s->dram_on || cls < 0)
		return NULL;
	for (;;) {
		slot = dram_alloc(&s->dram, cls);
		if (slot)
			return slot;
		struct entry *v = pick_victim(s, &from_small);

		if (!v)
			return NULL;
		evict(s, v, from_small);
	}
}
