/*
 * kvstashd_cluster.h - kvstashd's membership in a cluster (docs/CLUSTER.md):
 * registration in etcd at start, kept up by the cluster module's
 * keepalive thread, and the orderly leave on SIGTERM (the lease revoked
 * before the server drains, so clients stop sending at once).
 */
#ifndef KVSTASH_TOOLS_KVSTASHD_CLUSTER_H
#define KVSTASH_TOOLS_KVSTASHD_CLUSTER_H

#include <stdint.h>

struct kvs_server;

struct kvsd_cluster_args {
	const char *etcd; /* "http://HOST:PORT[,...]" */
	const char *cluster;
	const char *node_id;
	const char *address; /* what clients connect to: "HOST:PORT" */
	uint64_t capacity; /* the placement weight, bytes */
	uint32_t ttl_s; /* lease TTL; 0: the default */
	uint32_t timeout_ms; /* each etcd call; 0: the default */
};

struct kvsd_cluster;

/*
 * kvsd_cluster_start - register @a's node and start the membership thread
 * of @srv.  When etcd does not answer, the node serves all the same and
 * the thread registers it once etcd does (a warning says so).  Returns 0
 * and *@out, or the error that makes starting pointless (a bad argument,
 * another live node holding the id: logged).
 */
int kvsd_cluster_start(const struct kvsd_cluster_args *a,
		       struct kvs_server *srv, struct kvsd_cluster **out);

/*
 * kvsd_cluster_leave - async-signal-safe: ask the membership thread to
 * revoke the lease and then stop the server (kvs_server_stop).
 */
void kvsd_cluster_leave(struct kvsd_cluster *c);

/* Leaves (if not done yet), joins the thread, frees.  NULL is a no-op. */
void kvsd_cluster_stop(struct kvsd_cluster *c);

#endif
