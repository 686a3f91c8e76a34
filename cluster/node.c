/*
 * node.c - a store node's registration: a lease, the node's key under it
 * (put only if absent, so two live nodes cannot share an id), and a
 * thread that renews the lease every TTL/3.
 *
 * When a renewal finds the lease gone (it expired while etcd was out of
 * reach, or etcd restarted from empty data), the thread grants a new
 * lease and puts the key again.  After an outage in which the lease
 * survived, it checks that the key is still there.  Deregistering stops
 * the thread and revokes the lease, which deletes the key at once.
 */
#include <errno.h>
#include <stdint.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cluster_internal.h"
#include "etcd_internal.h"
#include "kvstash/error.h"
#include "kvstash/log.h"

#define RETRY_MS 500 /* between attempts while etcd does not answer */

struct kvs_cluster_node {
	struct kvs_etcd *etcd;
	char key[KVS_CLUSTER_KEY_MAX];
	char address[KVS_CLUSTER_ADDRESS_MAX + 1];
	char *value; /* the member's JSON */
	unsigned ttl_s;
	pthread_t thread;

	pthread_mutex_t lock; /* guards what follows */
	pthread_cond_t wake;
	bool stop;
	int64_t lease;
	enum kvs_cluster_state state;
	uint64_t registrations, keepalive_failures;
};

/* Whether @existing (the value now under our key) is this node's: the
 * same address, so a restart of this node may take the key over. */
static bool is_ours(const struct kvs_cluster_node *node,
		    const struct kvs_etcd_kv *existing, const char *id)
{
	struct kvs_cluster_member m;
	const char *why;

	return kvs_cluster_member_decode(id, existing->value,
					 existing->value_len, &m, &why) == 0 &&
	       strcmp(m.address, node->address) == 0;
}

/*
 * One registration: grant, then put-if-absent.  A key held by a live node
 * with another address is -EEXIST; one with this address (this node,
 * restarted before its old lease expired) is replaced.
 */
static int register_once(struct kvs_cluster_node *node, const char *id,
			 int64_t *lease_out)
{
	struct kvs_etcd_kv existing = { 0 };
	size_t len = strlen(node->value);
	int64_t lease;
	int err;

	err = kvs_etcd_lease_grant(node->etcd, node->ttl_s, &lease);
	if (err)
		return err;
	err = kvs_etcd_put_if_absent(node->etcd, node->key, node->value, len,
				     lease, &existing);
	if (err == -EEXIST && is_ours(node, &existing, id))
		err = kvs_etcd_put(node->etcd, node->key, node->value, len,
				   lease);
	else if (err == -EEXIST)
		kvs_log(KVS_LOG_ERR,
			"cluster: node id %s is registered by another node "
			"(lease %lld)",
			id, (long long)existing.lease);
	kvs_etcd_kv_free(&existing);
	if (err) {
		/* Best effort: the lease would expire anyway. */
		kvs_etcd_lease_revoke(node->etcd, lease);
		return err;
	}
	*lease_out = lease;
	return 0;
}

/* After an outage that the lease survived: put the key back if it went
 * (deleted by hand, say). */
static int check_key(struct kvs_cluster_node *node, int64_t lease)
{
	struct kvs_etcd_range *range;
	int err = kvs_etcd_get(node->etcd, node->key, false, true, &range);

	if (err)
		return err;
	if (range->count == 0) {
		kvs_log(KVS_LOG_WARN,
			"cluster: %s was deleted; putting it back", node->key);
		err = kvs_etcd_put(node->etcd, node->key, node->value,
				   strlen(node->value), lease);
	}
	kvs_etcd_range_free(range);
	return err;
}

static void set_state(struct kvs_cluster_node *node,
		      enum kvs_cluster_state state, const char *why, int err)
{
	enum kvs_cluster_state was;

	pthread_mutex_lock(&node->lock);
	was = node->state;
	node->state = state;
	pthread_mutex_unlock(&node->lock);
	if (was == state)
		return;
	if (state == KVS_CLUSTER_UNREACHABLE)
		kvs_log(KVS_LOG_WARN, "cluster: %s: %s (%s); retrying",
			node->key, why, kvs_strerror(err));
	else
		kvs_log(KVS_LOG_WARN, "cluster: %s: %s", node->key, why);
}

static bool stopping(struct kvs_cluster_node *node)
{
	bool stop;

	pthread_mutex_lock(&node->lock);
	stop = node->stop;
	pthread_mutex_unlock(&node->lock);
	return stop;
}

/* One round of the thread; returns the milliseconds to the next. */
static unsigned keepalive_round(struct kvs_cluster_node *node)
{
	const char *id = strrchr(node->key, '/') + 1;
	unsigned interval = node->ttl_s * 1000 / 3;
	const char *how = "etcd answers again, lease kept";
	int64_t lease;
	bool was_out;
	int err;

	pthread_mutex_lock(&node->lock);
	lease = node->lease;
	was_out = node->state == KVS_CLUSTER_UNREACHABLE;
	pthread_mutex_unlock(&node->lock);

	err = kvs_etcd_lease_keepalive(node->etcd, lease, NULL);
	if (err == 0 && was_out)
		err = check_key(node, lease);
	if (err == -ENOENT && !stopping(node)) {
		kvs_log(KVS_LOG_WARN,
			"cluster: lease %lld of %s is gone; registering again",
			(long long)lease, node->key);
		err = register_once(node, id, &lease);
		how = "registered again";
		if (err == 0) {
			pthread_mutex_lock(&node->lock);
			node->lease = lease;
			node->registrations++;
			pthread_mutex_unlock(&node->lock);
		}
	}
	if (err) {
		pthread_mutex_lock(&node->lock);
		node->keepalive_failures++;
		pthread_mutex_unlock(&node->lock);
		set_state(node, KVS_CLUSTER_UNREACHABLE, "keepalive failed",
			  err);
		return interval < RETRY_MS ? interval : RETRY_MS;
	}
	set_state(node, KVS_CLUSTER_CONNECTED, how, 0);
	return interval;
}

static void *keepalive_thread(void *arg)
{
	struct kvs_cluster_node *node = arg;
	unsigned wait_ms = node->ttl_s * 1000 / 3;

	for (;;) {
		struct timespec until;

		kvs_cluster_deadline(wait_ms, &until);
		pthread_mutex_lock(&node->lock);
		while (!node->stop &&
		       pthread_cond_timedwait(&node->wake, &node->lock,
					      &until) == 0)
			;
		if (node->stop) {
			pthread_mutex_unlock(&node->lock);
			return NULL;
		}
		pthread_mutex_unlock(&node->lock);
		wait_ms = keepalive_round(node);
	}
}

/* -EINVAL (logged) for what cannot be registered. */
static int info_check(const struct kvs_cluster_node_info *info)
{
	if (info == NULL || !kvs_cluster_name_valid(info->id)) {
		kvs_log(KVS_LOG_ERR,
			"cluster: node id '%s': 1 to %d of A-Z "
			"a-z 0-9 . _ -",
			info && info->id ? info->id : "", KVS_CLUSTER_NAME_MAX);
		return -EINVAL;
	}
	if (info->address == NULL || info->address[0] == '\0' ||
	    strlen(info->address) > KVS_CLUSTER_ADDRESS_MAX) {
		kvs_log(KVS_LOG_ERR,
			"cluster: node %s: no address, or longer "
			"than %d bytes",
			info->id, KVS_CLUSTER_ADDRESS_MAX);
		return -EINVAL;
	}
	if (info->capacity > (uint64_t)INT64_MAX) {
		kvs_log(KVS_LOG_ERR, "cluster: node %s: capacity over 2^63-1",
			info->id);
		return -EINVAL;
	}
	if (info->ttl_s > 3600) {
		kvs_log(KVS_LOG_ERR, "cluster: lease TTL %u s over 3600",
			info->ttl_s);
		return -EINVAL;
	}
	return 0;
}

/* The member's JSON value, or NULL (out of memory). */
static char *node_value(const struct kvs_cluster_node_info *info)
{
	struct kvs_cluster_member m;

	memset(&m, 0, sizeof(m));
	strcpy(m.id, info->id);
	strcpy(m.address, info->address);
	m.capacity = info->capacity;
	m.protocol = info->protocol;
	m.start_time = (int64_t)time(NULL);
	return kvs_cluster_member_encode(&m);
}

static int node_sync_init(struct kvs_cluster_node *node)
{
	int err = pthread_mutex_init(&node->lock, NULL);

	if (err)
		return -err;
	err = kvs_cluster_cond_init(&node->wake);
	if (err)
		pthread_mutex_destroy(&node->lock);
	return err;
}

int kvs_cluster_node_register(const struct kvs_cluster_config *config,
			      const struct kvs_cluster_node_info *info,
			      struct kvs_cluster_node **out)
{
	struct kvs_cluster_node *node;
	int err;

	err = kvs_cluster_config_check(config);
	if (!err)
		err = info_check(info);
	if (err)
		return err;
	node = calloc(1, sizeof(*node));
	if (node == NULL)
		return -ENOMEM;
	node->ttl_s = info->ttl_s ? info->ttl_s : KVS_CLUSTER_TTL_S;
	strcpy(node->address, info->address);
	kvs_cluster_nodes_prefix(config->cluster, node->key);
	strcat(node->key, info->id);
	err = -ENOMEM;
	node->value = node_value(info);
	if (node->value == NULL)
		goto undo_node;
	err = kvs_etcd_open(config->endpoints, kvs_cluster_timeout_ms(config),
			    &node->etcd);
	if (err)
		goto undo_value;
	err = node_sync_init(node);
	if (err)
		goto undo_etcd;
	err = register_once(node, info->id, &node->lease);
	if (err) {
		if (err != -EEXIST)
			kvs_log(KVS_LOG_ERR,
				"cluster: registering %s at %s: %s", node->key,
				config->endpoints, kvs_strerror(err));
		goto undo_sync;
	}
	node->registrations = 1;
	err = -pthread_create(&node->thread, NULL, keepalive_thread, node);
	if (err)
		goto undo_lease;
	*out = node;
	return 0;

undo_lease:
	kvs_etcd_lease_revoke(node->etcd, node->lease);
undo_sync:
	pthread_cond_destroy(&node->wake);
	pthread_mutex_destroy(&node->lock);
undo_etcd:
	kvs_etcd_close(node->etcd);
undo_value:
	free(node->value);
undo_node:
	free(node);
	return err;
}

void kvs_cluster_node_stats(struct kvs_cluster_node *node,
			    struct kvs_cluster_node_stats *out)
{
	pthread_mutex_lock(&node->lock);
	out->state = node->state;
	out->lease = node->lease;
	out->registrations = node->registrations;
	out->keepalive_failures = node->keepalive_failures;
	pthread_mutex_unlock(&node->lock);
}

int kvs_cluster_node_deregister(struct kvs_cluster_node *node)
{
	int err;

	if (node == NULL)
		return 0;
	pthread_mutex_lock(&node->lock);
	node->stop = true;
	pthread_cond_signal(&node->wake);
	pthread_mutex_unlock(&node->lock);
	pthread_join(node->thread, NULL);
	err = kvs_etcd_lease_revoke(node->etcd, node->lease);
	if (err == -ENOENT)
		err = 0; /* expired already: the key is gone */
	if (err)
		kvs_log(KVS_LOG_WARN,
			"cluster: revoking the lease of %s: %s; the key "
			"leaves when it expires",
			node->key, kvs_strerror(err));
	pthread_cond_destroy(&node->wake);
	pthread_mutex_destroy(&node->lock);
	kvs_etcd_close(node->etcd);
	free(node->value);
	free(node);
	return err;
}
