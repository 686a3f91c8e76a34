/*
 * view.c - a client's view of the cluster's members: one read of
 * /kvstash/<cluster>/nodes/, then a watch of that prefix from the
 * revision after it.
 *
 * The watch thread alone edits the working list (work); after each batch
 * of events it builds a new immutable snapshot and, when the members
 * differ, publishes it under the lock with the next generation.  Readers
 * take a reference to the current snapshot.  When etcd stops answering,
 * the view keeps its last snapshot, says UNREACHABLE (one warning in the
 * log), and the watch reconnects by itself.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cluster_internal.h"
#include "etcd_internal.h"
#include "kvstash/error.h"
#include "kvstash/log.h"

struct kvs_cluster_view {
	struct kvs_etcd *etcd;
	struct kvs_etcd_watch *watch;
	char prefix[KVS_CLUSTER_KEY_MAX];
	size_t prefix_len;

	/* the watch thread's (and open's, before the watch starts) */
	struct kvs_cluster_member *work;
	size_t work_count, work_cap;
	bool watched; /* a stream was up once */

	pthread_mutex_t lock; /* guards what follows */
	pthread_cond_t changed; /* a new generation */
	struct kvs_cluster_members *current;
	enum kvs_cluster_state state;
	int64_t unreachable_since_ms;
	uint64_t reconnects, resyncs, bad_values;
};

/* ---- the working list ---- */

static long work_find(const struct kvs_cluster_view *view, const char *id)
{
	for (size_t i = 0; i < view->work_count; i++)
		if (strcmp(view->work[i].id, id) == 0)
			return (long)i;
	return -1;
}

static void work_remove(struct kvs_cluster_view *view, const char *id)
{
	long i = work_find(view, id);

	if (i < 0)
		return;
	kvs_log(KVS_LOG_INFO, "cluster: node %s (%s) left", id,
		view->work[i].address);
	view->work[i] = view->work[--view->work_count];
}

static int work_put(struct kvs_cluster_view *view,
		    const struct kvs_cluster_member *m)
{
	long i = work_find(view, m->id);

	if (i >= 0) {
		view->work[i] = *m;
		return 0;
	}
	if (view->work_count == view->work_cap) {
		size_t cap = view->work_cap ? 2 * view->work_cap : 8;
		struct kvs_cluster_member *grown =
			realloc(view->work, cap * sizeof(*grown));

		if (grown == NULL)
			return -ENOMEM;
		view->work = grown;
		view->work_cap = cap;
	}
	kvs_log(KVS_LOG_INFO, "cluster: node %s (%s) joined", m->id,
		m->address);
	view->work[view->work_count++] = *m;
	return 0;
}

/* A key-value pair of the prefix into the working list. */
static int work_apply(struct kvs_cluster_view *view,
		      enum kvs_etcd_event_type type,
		      const struct kvs_etcd_kv *kv)
{
	struct kvs_cluster_member m;
	const char *id = kv->key + view->prefix_len;
	const char *why;

	if (strncmp(kv->key, view->prefix, view->prefix_len) != 0)
		return 0;
	if (type == KVS_ETCD_EVENT_DELETE) {
		work_remove(view, id);
		return 0;
	}
	if (kvs_cluster_member_decode(id, kv->value, kv->value_len, &m, &why) !=
	    0) {
		kvs_log(KVS_LOG_WARN, "cluster: ignoring the value of %s: %s",
			kv->key, why);
		pthread_mutex_lock(&view->lock);
		view->bad_values++;
		pthread_mutex_unlock(&view->lock);
		/* Whatever the key held before is no longer a member. */
		work_remove(view, id);
		return 0;
	}
	m.lease = kv->lease;
	return work_put(view, &m);
}

/* Publishes the working list when it differs from the current one. */
static int publish(struct kvs_cluster_view *view)
{
	struct kvs_cluster_members *next, *old;
	uint64_t generation =
		view->current
			? kvs_cluster_members_generation(view->current) + 1
			: 1;
	int err;

	/* Only this thread replaces view->current: reading it unlocked
	 * here is safe. */
	err = kvs_cluster_members_create(view->work, view->work_count,
					 generation, &next);
	if (err)
		return err;
	if (view->current != NULL &&
	    kvs_cluster_members_same(view->current, next)) {
		kvs_cluster_members_release(next);
		return 0;
	}
	pthread_mutex_lock(&view->lock);
	old = view->current;
	view->current = next;
	pthread_cond_broadcast(&view->changed);
	pthread_mutex_unlock(&view->lock);
	kvs_log(KVS_LOG_DEBUG, "cluster: %zu members, generation %llu",
		view->work_count, (unsigned long long)generation);
	kvs_cluster_members_release(old);
	return 0;
}

/*
 * Reads every member and makes the working list exactly that.  Returns
 * the revision to watch from (the read's + 1), or a negative error.
 */
static int64_t load_all(struct kvs_cluster_view *view)
{
	struct kvs_etcd_range *range;
	int64_t revision;
	int err;

	err = kvs_etcd_get(view->etcd, view->prefix, true, false, &range);
	if (err)
		return err;
	/* Members that are gone leave the list with a log line, as if
	 * deleted. */
	for (size_t i = view->work_count; i-- > 0;) {
		bool kept = false;

		for (size_t k = 0; k < range->count && !kept; k++)
			kept = strcmp(range->kvs[k].key + view->prefix_len,
				      view->work[i].id) == 0;
		if (!kept)
			work_remove(view, view->work[i].id);
	}
	for (size_t k = 0; k < range->count && !err; k++)
		err = work_apply(view, KVS_ETCD_EVENT_PUT, &range->kvs[k]);
	revision = range->header.revision;
	kvs_etcd_range_free(range);
	if (!err)
		err = publish(view);
	return err ? err : revision + 1;
}

/* ---- what the watch tells ---- */

static void on_events(void *arg, const struct kvs_etcd_event *events,
		      size_t count)
{
	struct kvs_cluster_view *view = arg;

	for (size_t i = 0; i < count; i++)
		if (work_apply(view, events[i].type, &events[i].kv) != 0)
			kvs_log(KVS_LOG_ERR,
				"cluster: out of memory; member "
				"%s not applied",
				events[i].kv.key);
	if (publish(view) != 0)
		kvs_log(KVS_LOG_ERR, "cluster: out of memory publishing the "
				     "members");
}

static void on_state(void *arg, bool connected)
{
	struct kvs_cluster_view *view = arg;
	enum kvs_cluster_state was;
	size_t members;
	uint64_t generation;

	pthread_mutex_lock(&view->lock);
	was = view->state;
	members = kvs_cluster_members_count(view->current);
	generation = kvs_cluster_members_generation(view->current);
	if (connected) {
		view->state = KVS_CLUSTER_CONNECTED;
		view->reconnects += view->watched;
		view->watched = true;
	} else if (was == KVS_CLUSTER_CONNECTED) {
		view->state = KVS_CLUSTER_UNREACHABLE;
		view->unreachable_since_ms = kvs_cluster_now_ms();
	}
	pthread_mutex_unlock(&view->lock);
	if (!connected && was == KVS_CLUSTER_CONNECTED)
		kvs_log(KVS_LOG_WARN,
			"cluster: etcd unreachable; keeping the last %zu "
			"members (generation %llu)",
			members, (unsigned long long)generation);
	else if (connected && was == KVS_CLUSTER_UNREACHABLE)
		kvs_log(KVS_LOG_WARN, "cluster: etcd answers again");
}

static int64_t on_resync(void *arg)
{
	struct kvs_cluster_view *view = arg;
	int64_t revision = load_all(view);

	if (revision > 0) {
		pthread_mutex_lock(&view->lock);
		view->resyncs++;
		pthread_mutex_unlock(&view->lock);
	}
	return revision;
}

static const struct kvs_etcd_watch_ops view_watch_ops = {
	.events = on_events,
	.state = on_state,
	.resync = on_resync,
};

/* ---- the public calls ---- */

int kvs_cluster_view_open(const struct kvs_cluster_config *config,
			  struct kvs_cluster_view **out)
{
	struct kvs_cluster_view *view;
	int64_t revision;
	int err;

	err = kvs_cluster_config_check(config);
	if (err)
		return err;
	view = calloc(1, sizeof(*view));
	if (view == NULL)
		return -ENOMEM;
	kvs_cluster_nodes_prefix(config->cluster, view->prefix);
	view->prefix_len = strlen(view->prefix);
	err = kvs_etcd_open(config->endpoints, kvs_cluster_timeout_ms(config),
			    &view->etcd);
	if (err)
		goto undo_view;
	err = -pthread_mutex_init(&view->lock, NULL);
	if (err)
		goto undo_etcd;
	err = kvs_cluster_cond_init(&view->changed);
	if (err)
		goto undo_lock;
	revision = load_all(view);
	if (revision < 0) {
		err = (int)revision;
		kvs_log(KVS_LOG_ERR, "cluster: reading %s from etcd %s: %s",
			view->prefix, config->endpoints, kvs_strerror(err));
		goto undo_members;
	}
	view->state = KVS_CLUSTER_CONNECTED;
	err = kvs_etcd_watch_start(view->etcd, view->prefix, revision,
				   kvs_cluster_timeout_ms(config),
				   &view_watch_ops, view, &view->watch);
	if (err)
		goto undo_members;
	*out = view;
	return 0;

undo_members:
	kvs_cluster_members_release(view->current);
	free(view->work);
	pthread_cond_destroy(&view->changed);
undo_lock:
	pthread_mutex_destroy(&view->lock);
undo_etcd:
	kvs_etcd_close(view->etcd);
undo_view:
	free(view);
	return err;
}

void kvs_cluster_view_close(struct kvs_cluster_view *view)
{
	if (view == NULL)
		return;
	kvs_etcd_watch_stop(view->watch);
	kvs_cluster_members_release(view->current);
	free(view->work);
	pthread_cond_destroy(&view->changed);
	pthread_mutex_destroy(&view->lock);
	kvs_etcd_close(view->etcd);
	free(view);
}

struct kvs_cluster_members *
kvs_cluster_view_members(struct kvs_cluster_view *view)
{
	struct kvs_cluster_members *m;

	pthread_mutex_lock(&view->lock);
	m = kvs_cluster_members_ref(view->current);
	pthread_mutex_unlock(&view->lock);
	return m;
}

int kvs_cluster_view_wait(struct kvs_cluster_view *view, uint64_t generation,
			  unsigned timeout_ms)
{
	struct timespec until;
	int err = 0;

	kvs_cluster_deadline(timeout_ms, &until);
	pthread_mutex_lock(&view->lock);
	while (kvs_cluster_members_generation(view->current) <= generation &&
	       err == 0)
		err = pthread_cond_timedwait(&view->changed, &view->lock,
					     &until);
	pthread_mutex_unlock(&view->lock);
	return err ? -ETIMEDOUT : 0;
}

void kvs_cluster_view_stats(struct kvs_cluster_view *view,
			    struct kvs_cluster_view_stats *out)
{
	pthread_mutex_lock(&view->lock);
	out->state = view->state;
	out->generation = kvs_cluster_members_generation(view->current);
	out->members = kvs_cluster_members_count(view->current);
	out->reconnects = view->reconnects;
	out->resyncs = view->resyncs;
	out->bad_values = view->bad_values;
	out->unreachable_ms =
		view->state == KVS_CLUSTER_UNREACHABLE
			? kvs_cluster_now_ms() - view->unreachable_since_ms
			: 0;
	pthread_mutex_unlock(&view->lock);
}
