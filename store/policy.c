/*
 * policy.c - the DRAM tier's eviction, in three policies (opts.eviction):
 *
 * prefix (the default): ARC (Megiddo and Modha, FAST'03) over the prefix
 *   tree of the blocks.  An entry knows its parent's entry (the header's
 *   parent span id, same layer, looked up when its copy is placed) and
 *   counts its children with DRAM copies.  Queues, oldest at the tail:
 *   U (put, never read, never extended: request tails), T1 (extended,
 *   seen once), T2 (read, or seen again); ghosts B1 and B2 remember keys
 *   evicted from T1 and T2.  A ghost hit in B1 grows p, ARC's target size
 *   of T1, one in B2 shrinks it, so the split between recency and
 *   frequency follows the workload.  Victims are leaves: an entry with no
 *   child in DRAM, not pinned (a get's reference or a write in flight)
 *   and not the parent of the block being placed; U's leaves go first and
 *   leave no ghost.  A block placed after its parent in the same queue is
 *   linked just tail-side of it, so a queue's tail is almost always a
 *   leaf.  A block whose parent is indexed without a DRAM copy is not
 *   placed in DRAM (it could not be hit before its parent is put again).
 *   A one-time scan passes through U and T1 without touching T2.
 *   Within T2 a leaf read since its last pass gets another (a CLOCK
 *   counter of up to 3 reads, dfreq), so the blocks read most stay
 *   longest and the counter ages them out.  Two orders compete by set
 *   dueling: ARC's (an extended block to T1, reads counted in T2) and
 *   LRU's (an extended block straight to T2, no counter, so T2 is a
 *   plain LRU of the leaves).  One hash group of keys in 32 always
 *   takes each; a ghost hit (a key back after its eviction) of such a
 *   leader counts against its order, and the other keys follow the
 *   order that misses less.  ARC's p moves by 1 + c/500 per ghost hit,
 *   so that it settles within a few hundred misses at any size.
 * s3fifo: S3-FIFO (Yang et al., SOSP'23), in bytes of slots: new objects
 *   enter the small FIFO (10% of the arena); an object leaving the small
 *   FIFO moves to the main FIFO if it was read while there, else it is
 *   evicted and its key remembered in the ghost FIFO; a put of a ghost key
 *   goes straight to main.  The main FIFO reinserts objects read since
 *   their last pass (a 2-bit counter), evicting the others.
 * lru: one list, the least recently placed or read first.
 *
 * Pinned objects are never evicted; they are passed over.  An evicted
 * object with no NVMe copy is spilled there first.
 */
#include <stdlib.h>
#include <string.h>

#include "kvstash/log.h"
#include "store_internal.h"

/* ---- the chain (prefix) ---------------------------------------------- */

/* @e's DRAM copy goes: its parent no longer counts it.  A parent that
 * was released while it had children is freed now. */
static void chain_unlink(struct kvs_store *s, struct entry *e)
{
	struct entry *p = e->dparent;

	if (!p)
		return;
	e->dparent = NULL;
	p->nkids--;
	if (!p->nkids && !p->in_index)
		entry_maybe_free(s, p);
}

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

static void ghost_trim(struct kvs_store *s)
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

static void s3_insert(struct kvs_store *s, struct entry *e)
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

static void s3_hit(struct entry *e)
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
	} else if (e->dq >= DQ_U && e->dq <= DQ_T2) {
		s->pol.n[e->dq - DQ_U]--;
	} else if (e->dq != DQ_LRU) {
		return;
	}
	list_del(&e->dlink);
	e->dq = DQ_NONE;
	s->dram_objects--;
	s->dram_obj_bytes -= e->len;
	chain_unlink(s, e);
}

void entry_maybe_free(struct kvs_store *s, struct entry *e)
{
	if (e->pins)
		return;
	if (e->in_index &&
	    (e->slot || e->seg || dq_ghost(e->dq) || e->nghost || e->bad))
		return;
	if (e->in_index)
		index_remove(&s->index, e);
	/* older records of the key may be left (a put that could not write
	 * its replacement, say): no tombstone is dropped while they may
	 * remain */
	if (e->on_disk && e->first_seg < s->stale_floor)
		s->stale_floor = e->first_seg;
	/* a zombie (replaced while pinned) may still be on lists */
	dram_forget_ghost(s, e);
	if (e->slot) {
		dram_unlink(s, e);
		dram_free(&s->dram, e->slot, e->cls);
		e->slot = NULL;
		e->cls = -1;
	}
	if (e->nghost) {
		list_del(&e->nlink);
		e->nghost = false;
		s->nghost_n--;
	}
	nvme_detach(s, e);
	/* released: a child still naming it frees it when it lets go */
	if (e->nkids)
		return;
	free(e);
}

void dram_drop(struct kvs_store *s, struct entry *e)
{
	if (!e->slot)
		return;
	/* the prefix policy keeps a re-put key's standing: it was cached */
	if (e->dq >= DQ_U && e->dq <= DQ_T2)
		e->dfreq = 1;
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

/* Spills @e's copy (if it has no NVMe record) and frees its slot. */
static void evict_copy(struct kvs_store *s, struct entry *e)
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
}

static void evict(struct kvs_store *s, struct entry *e, bool from_small)
{
	evict_copy(s, e);
	if (from_small) {
		ghost_push(s, e);
		ghost_trim(s);
	} else {
		entry_maybe_free(s, e);
	}
}

static uint8_t *s3_make_room(struct kvs_store *s, int cls)
{
	uint8_t *slot;
	bool from_small;

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

/* ---- prefix: ARC over the prefix tree -------------------------------- */

/* Set dueling: leader groups of keys (by the index hash) and the bound
 * of psel, which starts on LRU's side (the order that needs no
 * learning on a trace of conversations). */
enum {
	DUEL_GROUPS = 32,
	DUEL_ARC = 0,
	DUEL_LRU = 1,
	PSEL_MAX = 256,
	PSEL_START = 64,
};

/* dfreq of a DRAM copy under the prefix policy: T2's CLOCK counter (a
 * read block), or for a block put and not read since, DF_UNREAD and the
 * length of the run of such blocks its chain ends with (a new chain's
 * blocks 1, 2, 3, ...; 1 after a read block).  Out of DRAM, dfreq says
 * whether the next copy goes to T2 (pq_place). */
enum {
	CLOCK_MAX = 3,
	DF_CLOCK = 3,
	DF_UNREAD = 0x80,
	DF_RUN_SHIFT = 2,
	DF_RUN_MAX = 31,
};

static unsigned unread_run(const struct entry *e)
{
	return e->dfreq & DF_UNREAD ? (e->dfreq >> DF_RUN_SHIFT) & DF_RUN_MAX
				    : 0;
}

static unsigned duel_group(const struct entry *e)
{
	return (unsigned)(e->hash >> 40) % DUEL_GROUPS;
}

/* Whether @e takes LRU's order (else ARC's). */
static bool lru_order(const struct dram_policy *g, const struct entry *e)
{
	unsigned grp = duel_group(e);

	if (grp == DUEL_ARC)
		return false;
	if (grp == DUEL_LRU)
		return true;
	return g->psel > 0;
}

/* A ghost hit of @e: a miss of its group's order. */
static void duel_miss(struct dram_policy *g, const struct entry *e)
{
	unsigned grp = duel_group(e);

	if (grp == DUEL_ARC && g->psel < PSEL_MAX)
		g->psel++;
	else if (grp == DUEL_LRU && g->psel > -PSEL_MAX)
		g->psel--;
}

static struct list *pq(struct kvs_store *s, uint8_t dq)
{
	return &s->pol.q[dq - DQ_U];
}

/* The longest run of never-read blocks LRU's order takes into T2, a
 * quarter of the tier in slots of @e's size (at most DF_RUN_MAX): a
 * longer one is a scan, left to T1, where it is not placed once T1 is
 * over its target. */
static unsigned scan_run(const struct kvs_store *s, const struct entry *e)
{
	uint64_t r = s->dram.map_len / slot_bytes(s, e) / 4;

	return r < 1 ? 1 : r > DF_RUN_MAX ? DF_RUN_MAX : (unsigned)r;
}

/* Links @e into queue @dq: just tail-side of its parent when the parent
 * is in the same queue (it was placed or read just before, in the same
 * request), else at the head. */
static void pq_insert(struct kvs_store *s, uint8_t dq, struct entry *e)
{
	struct entry *p = e->dparent;
	struct list *n = &e->dlink;

	if (p && p->dq == dq) {
		/* tail-side: toward the oldest (a list's ->next) */
		list_push(&p->dlink, n);
	} else {
		list_push(pq(s, dq), n);
	}
	e->dq = dq;
	s->pol.n[dq - DQ_U]++;
}

/* Moves @e (in queue U, T1 or T2) to queue @dq. */
static void pq_move(struct kvs_store *s, struct entry *e, uint8_t dq)
{
	list_del(&e->dlink);
	s->pol.n[e->dq - DQ_U]--;
	pq_insert(s, dq, e);
}

/* The tail-most leaf of queue @dq that may go: no child in DRAM, not
 * pinned, not @keep; in T2 a leaf with reads on its counter spends one
 * and goes to the head instead (each is passed at most CLOCK_MAX
 * times, so this ends).  NULL if none. */
static struct entry *pq_leaf(struct kvs_store *s, uint8_t dq,
			     const struct entry *keep)
{
	struct list *h = pq(s, dq);
	struct list *next;

	for (struct list *l = h->prev; l != h; l = next) {
		struct entry *e = list_entry(l, struct entry, dlink);

		next = l->prev;
		if (e->nkids || e->pins || e == keep)
			continue;
		if (dq != DQ_T2 || !(e->dfreq & DF_CLOCK))
			return e;
		e->dfreq--;
		list_del(&e->dlink);
		list_push(h, &e->dlink);
	}
	return NULL;
}

static void pq_ghost_drop(struct kvs_store *s, uint8_t dq)
{
	struct list *l = list_oldest(pq(s, dq));
	struct entry *e;

	if (!l)
		return;
	e = list_entry(l, struct entry, dlink);
	dram_forget_ghost(s, e);
	entry_maybe_free(s, e);
}

/* A bound on the ghosts whatever the sizes do between puts (ARC's own
 * rules, at each new key, keep them near c). */
static void pq_ghost_trim(struct kvs_store *s)
{
	struct dram_policy *g = &s->pol;

	while (g->n[PQ_B1] + g->n[PQ_B2] > 2 * g->c + 2)
		pq_ghost_drop(s, g->n[PQ_B1] > g->n[PQ_B2] ? DQ_B1 : DQ_B2);
}

/* Takes leaf @v out of its queue and evicts its copy; its dfreq goes
 * back to the meaning it has out of DRAM (0: the next copy to U). */
static void pq_evict(struct kvs_store *s, struct entry *v)
{
	dram_unlink(s, v);
	v->dfreq = 0;
	evict_copy(s, v);
}

/* Evicts one leaf for a block to be placed (@keep: its parent): U's
 * first, without a ghost; then T1's (to B1) when T1 is over its target
 * p, else T2's (to B2); with @no_ghost a T1 leaf leaves none either.
 * With @bypass (a new block), none when T1 is over its target without a
 * leaf.
 * Returns false if no leaf may go. */
static int pq_replace(struct kvs_store *s, const struct entry *keep,
		      bool from_b2, bool no_ghost, bool bypass)
{
	struct dram_policy *g = &s->pol;
	struct entry *v = pq_leaf(s, DQ_U, keep);
	bool t1;

	if (v) {
		pq_evict(s, v);
		entry_maybe_free(s, v);
		return 1;
	}
	t1 = g->n[PQ_T1] && (no_ghost || (double)g->n[PQ_T1] > g->p ||
			     (from_b2 && g->n[PQ_T1] == (uint64_t)g->p));
	for (int tries = 0; tries < 2; tries++, t1 = !t1) {
		uint8_t ghost = t1 ? DQ_B1 : DQ_B2;

		v = pq_leaf(s, t1 ? DQ_T1 : DQ_T2, keep);
		/* T1 is over its target and holds no leaf (one long chain
		 * never read: a scan): a new block is not placed rather than
		 * evict the frequent blocks of T2 */
		if (!v && t1 && !tries && !from_b2 && !no_ghost && bypass)
			return -1;
		if (!v)
			continue;
		pq_evict(s, v);
		if (no_ghost && t1) {
			entry_maybe_free(s, v);
			return 1;
		}
		list_push(pq(s, ghost), &v->dlink);
		v->dq = ghost;
		g->n[ghost - DQ_U]++;
		pq_ghost_trim(s);
		return 1;
	}
	return 0;
}

/* @e, without a DRAM copy, becomes the newest ghost of B1. */
static void pq_ghost_add(struct kvs_store *s, struct entry *e)
{
	list_push(pq(s, DQ_B1), &e->dlink);
	e->dq = DQ_B1;
	s->pol.n[PQ_B1]++;
	pq_ghost_trim(s);
}

enum admit { ADMIT_NEW, ADMIT_FROM_B2, ADMIT_NO_GHOST };

/* ARC's bookkeeping for @e about to be placed: a ghost adapts p and will
 * go to T2; a new key trims the ghosts as ARC's case IV does. */
static enum admit pq_admit(struct kvs_store *s, struct entry *e)
{
	struct dram_policy *g = &s->pol;
	double b1 = (double)g->n[PQ_B1], b2 = (double)g->n[PQ_B2];
	double step = 1 + (double)g->c / 500;
	bool from_b2 = e->dq == DQ_B2;

	if (dq_ghost(e->dq))
		duel_miss(g, e);
	if (e->dq == DQ_B1) {
		g->p += (b1 >= b2 ? 1 : b2 / b1) * step;
		if (g->p > (double)g->c)
			g->p = (double)g->c;
	} else if (e->dq == DQ_B2) {
		g->p -= (b2 >= b1 ? 1 : b1 / b2) * step;
		if (g->p < 0)
			g->p = 0;
	} else {
		uint64_t l1 = g->n[PQ_T1] + g->n[PQ_B1];

		if (e->dfreq || !g->c)
			return ADMIT_NEW;
		if (l1 >= g->c) {
			if (g->n[PQ_T1] >= g->c)
				return ADMIT_NO_GHOST;
			if (g->n[PQ_B1])
				pq_ghost_drop(s, DQ_B1);
		} else if (l1 + g->n[PQ_T2] + g->n[PQ_B2] >= 2 * g->c &&
			   g->n[PQ_B2]) {
			pq_ghost_drop(s, DQ_B2);
		}
		return ADMIT_NEW;
	}
	dram_forget_ghost(s, e);
	e->dfreq = 1;
	return from_b2 ? ADMIT_FROM_B2 : ADMIT_NEW;
}

static void pq_place(struct kvs_store *s, struct entry *e, struct entry *parent)
{
	uint8_t dq = e->dfreq ? DQ_T2 : DQ_U;
	unsigned run = 1;

	if (parent && parent != e && parent->slot && !e->dparent) {
		unsigned prun = unread_run(parent);

		e->dparent = parent;
		parent->nkids++;
		/* the parent is extended: no longer a request's tail; LRU's
		 * order takes it to T2 unless its chain is a scan */
		if (parent->dq == DQ_U)
			pq_move(s, parent,
				lru_order(&s->pol, parent) &&
						prun <= scan_run(s, parent)
					? DQ_T2
					: DQ_T1);
		if (prun)
			run = prun < DF_RUN_MAX ? prun + 1 : DF_RUN_MAX;
	}
	e->dfreq = dq == DQ_U ? (uint8_t)(DF_UNREAD | run << DF_RUN_SHIFT) : 0;
	pq_insert(s, dq, e);
}

static uint8_t *pq_make_room(struct kvs_store *s, int cls, struct entry *e,
			     struct entry *parent)
{
	enum admit how = ADMIT_NEW;
	uint8_t *slot;

	if (e && parent && parent != e && !parent->slot) {
		/* an orphan: its prefix misses before it.  Remembered as a
		 * ghost, so that its own children are orphans too. */
		if (!dq_ghost(e->dq))
			pq_ghost_add(s, e);
		return NULL;
	}
	if (e)
		how = pq_admit(s, e);
	for (;;) {
		slot = dram_alloc(&s->dram, cls);
		if (slot)
			return slot;
		/* full: what it holds now is the capacity ARC sizes by */
		if (s->dram_objects > s->pol.c)
			s->pol.c = s->dram_objects;
		int r = pq_replace(s, parent, how == ADMIT_FROM_B2,
				   how == ADMIT_NO_GHOST, e && !e->dfreq);

		/* bypassed: remembered as evicted from T1, so that the rest
		 * of its chain is an orphan */
		if (r < 0 && !dq_ghost(e->dq))
			pq_ghost_add(s, e);
		if (r <= 0)
			return NULL;
		how = ADMIT_NEW;
	}
}

/* ---- lru ------------------------------------------------------------- */

static uint8_t *lru_make_room(struct kvs_store *s, int cls)
{
	uint8_t *slot;

	for (;;) {
		struct entry *v = NULL;

		slot = dram_alloc(&s->dram, cls);
		if (slot)
			return slot;
		for (struct list *l = s->pol.lru.prev; l != &s->pol.lru;
		     l = l->prev) {
			struct entry *e = list_entry(l, struct entry, dlink);

			if (!e->pins) {
				v = e;
				break;
			}
		}
		if (!v)
			return NULL;
		dram_unlink(s, v);
		evict_copy(s, v);
		entry_maybe_free(s, v);
	}
}

/* ---- the policy's entry points --------------------------------------- */

void dram_policy_init(struct dram_policy *pol)
{
	memset(pol, 0, sizeof(*pol));
	pol->psel = PSEL_START;
	for (int i = 0; i < PQ_N; i++)
		list_init(&pol->q[i]);
	list_init(&pol->lru);
}

static void fini_cb(void *arg, struct entry *e)
{
	struct entry *p = e->dparent;

	(void)arg;
	if (!p)
		return;
	e->dparent = NULL;
	if (--p->nkids == 0 && !p->in_index)
		free(p);
}

void dram_policy_fini(struct kvs_store *s)
{
	index_each(&s->index, fini_cb, NULL);
}

struct entry *dram_parent_of(struct kvs_store *s, const struct entry *e,
			     const uint8_t *obj, size_t len)
{
	static const uint8_t first[KVS_ID_SIZE];
	struct kvs_store_key key;
	struct kvs_header h;

	if (s->opts.eviction != KVS_STORE_EVICT_PREFIX || !s->dram_on)
		return NULL;
	if (kvs_header_decode(obj, len, KVS_VERIFY_NO_CHECKSUMS, &h))
		return NULL;
	if (memcmp(h.ident.parent_id, first, KVS_ID_SIZE) == 0)
		return NULL;
	memcpy(key.span_id, h.ident.parent_id, KVS_ID_SIZE);
	key.layer = e->key.layer;
	return index_find(&s->index, &key);
}

void dram_insert(struct kvs_store *s, struct entry *e, struct entry *parent)
{
	switch (s->opts.eviction) {
	case KVS_STORE_EVICT_S3FIFO:
		s3_insert(s, e);
		return;
	case KVS_STORE_EVICT_LRU:
		e->dq = DQ_LRU;
		list_push(&s->pol.lru, &e->dlink);
		break;
	default:
		pq_place(s, e, parent);
		break;
	}
	s->dram_objects++;
	s->dram_obj_bytes += e->len;
}

void dram_hit(struct kvs_store *s, struct entry *e)
{
	switch (s->opts.eviction) {
	case KVS_STORE_EVICT_S3FIFO:
		s3_hit(e);
		return;
	case KVS_STORE_EVICT_LRU:
		if (e->dq == DQ_LRU) {
			list_del(&e->dlink);
			list_push(&s->pol.lru, &e->dlink);
		}
		return;
	default:
		/* a hit prefix is read in order: the parents were moved
		 * just before, so the chain order holds in T2 */
		if (e->dq < DQ_U || e->dq > DQ_T2)
			return;
		if (e->dfreq & DF_UNREAD)
			e->dfreq = 0;
		else if (e->dq == DQ_T2 && e->dfreq < CLOCK_MAX &&
			 !lru_order(&s->pol, e))
			e->dfreq++;
		pq_move(s, e, DQ_T2);
		return;
	}
}

void dram_forget_ghost(struct kvs_store *s, struct entry *e)
{
	if (e->dq == DQ_GHOST) {
		s->nghost_d--;
	} else if (e->dq == DQ_B1 || e->dq == DQ_B2) {
		s->pol.n[e->dq - DQ_U]--;
	} else {
		return;
	}
	list_del(&e->dlink);
	e->dq = DQ_NONE;
}

uint8_t *dram_make_room(struct kvs_store *s, int cls, struct entry *e,
			struct entry *parent)
{
	if (!s->dram_on || cls < 0)
		return NULL;
	switch (s->opts.eviction) {
	case KVS_STORE_EVICT_S3FIFO:
		return s3_make_room(s, cls);
	case KVS_STORE_EVICT_LRU:
		return lru_make_room(s, cls);
	default:
		return pq_make_room(s, cls, e, parent);
	}
}
