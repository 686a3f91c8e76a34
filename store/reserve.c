/*
 * reserve.c - reserve-then-commit puts: a DRAM slot of an object's size
 * is handed out before the object exists, so the transport can receive it
 * straight into the slot (at the place it takes in the record image); the
 * commit then verifies it and makes the slot its entry's, copying nothing
 * (store_put_batch with adopted slots).  A reservation not committed or
 * released within opts.reserve_timeout_ms is reclaimed by the next
 * reserve, commit or kvs_store_reclaim: its slot returns to the arena and
 * a late commit fails with -ETIMEDOUT.  The caller must not write into a
 * reservation past its timeout (the server bounds its receives tighter).
 */
#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "kvstash/log.h"
#include "store_internal.h"

struct kvs_store_reservation {
	struct list link; /* store->reservations, until reclaimed */
	uint8_t *slot;
	int cls;
	size_t len;
	uint64_t deadline_ns;
	bool reclaimed;
};

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Frees the slots of expired reservations; lock held.  Returns how many. */
static unsigned reclaim_locked(struct kvs_store *s, uint64_t now)
{
	struct list *l = s->reservations.next, *next;
	unsigned n = 0;

	for (; l != &s->reservations; l = next) {
		struct kvs_store_reservation *r =
			list_entry(l, struct kvs_store_reservation, link);

		next = l->next;
		if (r->deadline_ns > now)
			continue;
		list_del(&r->link);
		dram_free(&s->dram, r->slot, r->cls);
		r->slot = NULL;
		r->reclaimed = true;
		n++;
	}
	if (n)
		kvs_log(KVS_LOG_WARN,
			"store: %u abandoned reservations reclaimed", n);
	return n;
}

void reservations_fini(struct kvs_store *s)
{
	/* the arena goes with the store; the handles stay their owners' */
	while (!list_empty(&s->reservations)) {
		struct kvs_store_reservation *r =
			list_entry(s->reservations.next,
				   struct kvs_store_reservation, link);

		list_del(&r->link);
		r->slot = NULL;
		r->reclaimed = true;
	}
}

int kvs_store_reserve(struct kvs_store *store, size_t len,
		      struct kvs_store_reservation **out, uint8_t **dst)
{
	struct kvs_store *s = store;
	struct kvs_store_reservation *r;
	uint64_t rec = record_size(len), now = mono_ns();
	int cls;

	if (len > STORE_MAX_OBJECT)
		return -EFBIG;
	if (len < KVS_HEADER_SIZE)
		return -KVS_ETRUNC;
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	pthread_mutex_lock(&s->lock);
	reclaim_locked(s, now);
	cls = s->dram_on ? dram_class(&s->dram, rec) : -1;
	r->slot = cls >= 0 ? dram_make_room(s, cls, NULL, NULL) : NULL;
	if (!r->slot) {
		pthread_mutex_unlock(&s->lock);
		free(r);
		return -ENOSPC;
	}
	r->cls = cls;
	r->len = len;
	r->deadline_ns = now + (uint64_t)(s->opts.reserve_timeout_ms
						  ? s->opts.reserve_timeout_ms
						  : 30000) *
				       1000000ull;
	list_push(&s->reservations, &r->link);
	pthread_mutex_unlock(&s->lock);
	*dst = r->slot + REC_HEADER_SIZE;
	*out = r;
	return 0;
}

void kvs_store_release(struct kvs_store *store, struct kvs_store_reservation *r)
{
	if (!r)
		return;
	pthread_mutex_lock(&store->lock);
	if (!r->reclaimed) {
		list_del(&r->link);
		dram_free(&store->dram, r->slot, r->cls);
	}
	pthread_mutex_unlock(&store->lock);
	free(r);
}

int kvs_store_commit_batch(struct kvs_store *store,
			   struct kvs_store_reservation *const *rs, size_t n,
			   enum kvs_durability durability, int *results)
{
	struct kvs_store *s = store;
	const uint8_t **objs = calloc(n ? n : 1, sizeof(*objs));
	size_t *lens = calloc(n ? n : 1, sizeof(*lens)), m = 0;
	uint8_t **slots = calloc(n ? n : 1, sizeof(*slots));
	int *cls = calloc(n ? n : 1, sizeof(*cls));
	int *res = calloc(n ? n : 1, sizeof(*res));
	size_t *idx = calloc(n ? n : 1, sizeof(*idx));
	int first = 0;

	pthread_mutex_lock(&s->lock);
	reclaim_locked(s, mono_ns());
	for (size_t i = 0; i < n; i++) {
		struct kvs_store_reservation *r = rs[i];

		results[i] = r->reclaimed ? -ETIMEDOUT : 0;
		if (r->reclaimed || !objs)
			continue;
		list_del(&r->link);
		r->reclaimed = true; /* the put below owns the slot now */
		if (!lens || !slots || !cls || !res || !idx) {
			dram_free(&s->dram, r->slot, r->cls);
			results[i] = -ENOMEM;
			continue;
		}
		objs[m] = r->slot + REC_HEADER_SIZE;
		lens[m] = r->len;
		slots[m] = r->slot;
		cls[m] = r->cls;
		idx[m++] = i;
	}
	if (m) {
		int err;

		/* a failure of the whole batch leaves its results unset */
		for (size_t k = 0; k < m; k++)
			res[k] = 1;
		err = store_put_batch(s, objs, lens, m, durability, res, slots,
				      cls);
		for (size_t k = 0; k < m; k++) {
			results[idx[k]] = res[k] == 1 ? err : res[k];
			/* a slot no entry took (the object failed a check)
			 * goes back to the arena */
			if (slots[k])
				dram_free(&s->dram, slots[k], cls[k]);
		}
	}
	pthread_mutex_unlock(&s->lock);
	for (size_t i = 0; i < n; i++) {
		if (results[i] && !first)
			first = results[i];
		free(rs[i]);
	}
	free(objs);
	free(lens);
	free(slots);
	free(cls);
	free(res);
	free(idx);
	return first;
}

int kvs_store_commit_batch_async(struct kvs_store *store,
				 struct kvs_store_reservation *const *rs,
				 size_t n, enum kvs_durability durability,
				 int *results, kvs_store_done_fn done,
				 void *arg)
{
	struct kvs_store *s = store;
	enum kvs_durability dur = durability;
	struct store_async *a;
	struct wbatch *w = NULL;
	int err, aerr;

	pthread_mutex_lock(&s->lock);
	err = put_level(s, &dur);
	a = async_get(s, &aerr);
	if (!err && dur > KVS_DURABILITY_MEMORY && async_has_ring(a))
		w = wb_new(n, dur, results, done, arg);
	if (!w) {
		/* refused, nothing for the device (a put over a deleted key
		 * aside), no ring, no memory: done here */
		pthread_mutex_unlock(&s->lock);
		kvs_store_commit_batch(s, rs, n, durability, results);
		return 1;
	}
	reclaim_locked(s, mono_ns());
	for (size_t i = 0; i < n; i++) {
		struct kvs_store_reservation *r = rs[i];
		uint8_t *slot = r->slot;

		if (r->reclaimed) {
			results[i] = -ETIMEDOUT;
			continue;
		}
		list_del(&r->link);
		r->reclaimed = true; /* the batch owns the slot now */
		wb_stage(s, w, i, slot + REC_HEADER_SIZE, r->len, &slot,
			 r->cls);
		/* a slot no entry took (the object failed a check) goes
		 * back to the arena */
		if (slot)
			dram_free(&s->dram, slot, r->cls);
	}
	wb_go(s, w);
	pthread_mutex_unlock(&s->lock);
	for (size_t i = 0; i < n; i++)
		free(rs[i]);
	return 0;
}

unsigned kvs_store_reclaim(struct kvs_store *store)
{
	unsigned n;

	pthread_mutex_lock(&store->lock);
	n = reclaim_locked(store, mono_ns());
	pthread_mutex_unlock(&store->lock);
	return n;
}
