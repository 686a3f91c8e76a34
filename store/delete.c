/*
 * delete.c - removal of objects from both tiers, logged by tombstones.
 *
 * The entry leaves the DRAM tier and its record the index at once, so no
 * later get or lookup finds it; a reader that still pins it keeps its
 * bytes until it lets go (the old entry is then a zombie, freed at the
 * last unpin, as a replaced one is).  Where a record of the key may be on
 * disk (entry->on_disk), a tombstone record is appended (store format 3):
 * recovery lets the newest of record and tombstone win, by sequence
 * number, so the deletion survives a restart at the level it was
 * acknowledged (written: kill -9; synced: power loss).  The key's entry
 * becomes the tombstone's (entry->tomb): segment cleaning keeps the
 * tombstone while a segment older than it may still hold an older record
 * of the key, and drops it after (nvme.c).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kvstash/log.h"
#include "store_internal.h"

int delete_prepare(struct kvs_store *s, const struct kvs_store_key *key,
		   struct entry **tomb)
{
	struct entry *e = index_find(&s->index, key), *t;
	bool log = s->nvme_on && e && e->on_disk;
	int err;

	*tomb = NULL;
	if (!e || e->tomb || (!e->slot && !e->seg && !e->bad))
		return -KVS_ENOTFOUND;
	if (e->pins) {
		/* readers keep the old entry (a zombie); the tombstone gets
		 * one of its own */
		index_remove(&s->index, e);
		dram_drop(s, e);
		nvme_detach(s, e);
		t = NULL;
		if (log) {
			err = index_insert(&s->index, key, &t);
			if (err) {
				/* the key is gone all the same: its older
				 * records keep the tombstones of others */
				entry_maybe_free(s, e);
				return err;
			}
			t->first_seg = e->first_seg;
			t->on_disk = true;
			e->on_disk = false;
		}
		entry_maybe_free(s, e);
	} else {
		t = e;
		dram_drop(s, e);
		nvme_detach(s, e);
		dram_forget_ghost(s, e);
		e->bad = false;
		if (!log) {
			entry_maybe_free(s, e);
			return 0;
		}
	}
	if (!t)
		return 0;
	t->tomb = true;
	t->len = 0;
	t->psum = 0;
	t->nfreq = 0;
	t->rec_checked = true;
	*tomb = t;
	return 0;
}

void delete_failed(struct kvs_store *s, struct entry *t, int err)
{
	kvs_log(KVS_LOG_ERR,
		"store: tombstone not written (%s): the deleted object may "
		"come back after a restart",
		kvs_strerror(err));
	t->tomb = false;
	entry_maybe_free(s, t);
}

/* A batch refused whole: every result says why. */
static int refuse(int *results, size_t n, int err)
{
	for (size_t i = 0; i < n; i++)
		results[i] = err;
	return err;
}

int delete_check(struct kvs_store *s, enum kvs_durability durability)
{
	if ((int)durability < KVS_DURABILITY_MEMORY ||
	    (int)durability > KVS_DURABILITY_DURABLE) {
		kvs_log(KVS_LOG_ERR, "store: durability %d is not a level",
			(int)durability);
		return -KVS_EPARAM;
	}
	if (s->read_only) {
		kvs_log(KVS_LOG_ERR, "store: %s is open read-only", s->dir);
		return -EROFS;
	}
	return 0;
}

int kvs_store_delete_batch(struct kvs_store *store,
			   const struct kvs_store_key *keys, size_t n,
			   enum kvs_durability durability, int *results)
{
	struct kvs_store *s = store;
	uint8_t *page = NULL;
	bool wrote = false;
	int first = 0, err;

	err = delete_check(s, durability);
	if (err)
		return refuse(results, n, err);
	if (s->nvme_on &&
	    posix_memalign((void **)&page, KVS_STORE_ALIGN, KVS_STORE_ALIGN))
		return refuse(results, n, -ENOMEM);
	pthread_mutex_lock(&s->lock);
	for (size_t i = 0; i < n; i++) {
		struct entry *t;

		results[i] = delete_prepare(s, &keys[i], &t);
		if (results[i] || !t)
			continue;
		memset(page, 0, KVS_STORE_ALIGN);
		results[i] = nvme_write_image(s, t, page, -1,
					      KVS_DURABILITY_WRITTEN);
		if (results[i])
			delete_failed(s, t, results[i]);
		else
			wrote = true;
	}
	if (wrote && durability == KVS_DURABILITY_DURABLE) {
		err = nvme_sync_dirty(s, false);
		for (size_t i = 0; err && i < n; i++)
			if (results[i] == 0)
				results[i] = err;
	}
	pthread_mutex_unlock(&s->lock);
	free(page);
	for (size_t i = 0; i < n; i++)
		if (results[i] && results[i] != -KVS_ENOTFOUND && !first)
			first = results[i];
	return first;
}

int kvs_store_delete_batch_async(struct kvs_store *store,
				 const struct kvs_store_key *keys, size_t n,
				 enum kvs_durability durability, int *results,
				 kvs_store_done_fn done, void *arg)
{
	struct kvs_store *s = store;
	struct store_async *a;
	struct wbatch *w = NULL;
	size_t staged = 0;
	int err;

	err = delete_check(s, durability);
	if (err)
		return refuse(results, n, err);
	pthread_mutex_lock(&s->lock);
	a = async_get(s, &err);
	if (!async_has_ring(a)) {
		pthread_mutex_unlock(&s->lock);
		kvs_store_delete_batch(s, keys, n, durability, results);
		return 1;
	}
	for (size_t i = 0; i < n; i++) {
		struct entry *t;

		results[i] = delete_prepare(s, &keys[i], &t);
		if (results[i] || !t)
			continue;
		if (!w)
			w = wb_new(n,
				   durability == KVS_DURABILITY_DURABLE
					   ? KVS_DURABILITY_DURABLE
					   : KVS_DURABILITY_WRITTEN,
				   results, done, arg);
		err = w ? wb_stage_tomb(s, w, i, t) : -ENOMEM;
		if (err) {
			results[i] = err;
			delete_failed(s, t, err);
			continue;
		}
		staged++;
	}
	if (!staged) {
		/* nothing to log: done here */
		pthread_mutex_unlock(&s->lock);
		if (w)
			wb_free(w);
		return 1;
	}
	wb_go(s, w);
	pthread_mutex_unlock(&s->lock);
	return 0;
}

int kvs_store_delete(struct kvs_store *store, const struct kvs_store_key *key)
{
	int result, err;

	err = kvs_store_delete_batch(store, key, 1, KVS_DURABILITY_WRITTEN,
				     &result);
	return err ? err : result;
}
