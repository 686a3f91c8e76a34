/*
 * delete.c - removal of one object from both tiers.
 *
 * The entry leaves the index at once, so no later get or lookup finds it;
 * a reader that still pins it keeps its bytes until it lets go (the entry
 * is then a zombie, freed at the last unpin, as a replaced one is).  The
 * NVMe record is forgotten, not erased: segment cleaning reclaims its
 * space.  A delete is not logged, so a record that is still in a segment
 * file comes back at the next open (docs: a deleted block may reappear
 * after a restart; its bytes are still the bytes of its id).
 */
#include "store_internal.h"

int kvs_store_delete(struct kvs_store *store, const struct kvs_store_key *key)
{
	struct entry *e;
	int err = 0;

	pthread_mutex_lock(&store->lock);
	e = index_find(&store->index, key);
	if (!e || (!e->slot && !e->seg)) {
		err = -KVS_ENOTFOUND;
		goto out;
	}
	index_remove(&store->index, e);
	dram_drop(store, e);
	nvme_detach(store, e);
	entry_maybe_free(store, e);
out:
	pthread_mutex_unlock(&store->lock);
	return err;
}
