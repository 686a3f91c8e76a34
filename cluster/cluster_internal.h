/*
 * cluster_internal.h - what the cluster module's files share: names and
 * keys in etcd, the JSON value of a member, snapshots' placement seeds,
 * the monotonic clock (clock.c).
 */
#ifndef KVS_CLUSTER_INTERNAL_H
#define KVS_CLUSTER_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "kvstash/cluster.h"

/* "/kvstash/" + name + "/nodes/" + id, NUL */
#define KVS_CLUSTER_KEY_MAX                                                    \
	(9 + KVS_CLUSTER_NAME_MAX + 7 + KVS_CLUSTER_NAME_MAX + 1)
#define KVS_CLUSTER_VALUE_MAX 4096 /* bytes of a member's JSON value */

/* 1..KVS_CLUSTER_NAME_MAX of [A-Za-z0-9._-]: a cluster name or node id. */
bool kvs_cluster_name_valid(const char *name);
/* -EINVAL (logged) for a config the cluster calls cannot use. */
int kvs_cluster_config_check(const struct kvs_cluster_config *config);
/* The timeout of @config, the default filled in. */
unsigned kvs_cluster_timeout_ms(const struct kvs_cluster_config *config);

/* "/kvstash/<cluster>/nodes/" into @out (KVS_CLUSTER_KEY_MAX bytes). */
void kvs_cluster_nodes_prefix(const char *cluster,
			      char out[KVS_CLUSTER_KEY_MAX]);

/*
 * The JSON value of @member (without its lease, which etcd keeps):
 * {"id", "address", "capacity", "protocol", "start_time", "version"}.
 * A malloc'ed string the caller frees, or NULL.
 */
char *kvs_cluster_member_encode(const struct kvs_cluster_member *member);

/*
 * kvs_cluster_member_decode - a member from the value under key id @id.
 * Unknown fields are ignored (newer nodes may add some).  Returns 0, or
 * -EINVAL with the reason in @why (a static string) when the value is not
 * a member of that id.  @out is written only on success.
 */
int kvs_cluster_member_decode(const char *id, const uint8_t *value, size_t len,
			      struct kvs_cluster_member *out, const char **why);

/* The placement seed of member @i (a hash of its id). */
uint64_t kvs_cluster_members_seed(const struct kvs_cluster_members *members,
				  size_t i);

/* Whether two snapshots hold the same members (generations aside). */
bool kvs_cluster_members_same(const struct kvs_cluster_members *a,
			      const struct kvs_cluster_members *b);

/* Milliseconds of CLOCK_MONOTONIC. */
int64_t kvs_cluster_now_ms(void);
/* @ms from now on CLOCK_MONOTONIC, for pthread_cond_timedwait. */
void kvs_cluster_deadline(unsigned ms, struct timespec *out);
/* A condition variable whose timed waits use CLOCK_MONOTONIC.  0 or
 * -errno. */
int kvs_cluster_cond_init(pthread_cond_t *cond);

#endif
