/*
 * kvstashd_cluster.c - kvstashd in a cluster (kvstashd_cluster.h).
 *
 * One thread owns the registration.  It registers the node (again every
 * second while etcd does not answer: the node serves meanwhile), then
 * waits on a pipe.  SIGTERM's handler writes to that pipe; the thread
 * then revokes the lease -- the node leaves every client's view within
 * etcd's watch latency -- and only then stops the server, which drains.
 * A revoke that etcd does not answer ends at its deadline; the key then
 * leaves when the lease expires.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvstash/cluster.h"
#include "kvstash/error.h"
#include "kvstash/log.h"
#include "kvstash/server.h"
#include "kvstashd_cluster.h"
#include "transport/proto.h"

#define RETRY_MS 1000 /* between registrations while etcd is away */

struct kvsd_cluster {
	/* the strings config and info point to */
	char etcd[1024], cluster[KVS_CLUSTER_NAME_MAX + 1];
	char id[KVS_CLUSTER_NAME_MAX + 1], address[KVS_CLUSTER_ADDRESS_MAX + 1];
	struct kvs_cluster_config config;
	struct kvs_cluster_node_info info;
	struct kvs_server *srv;
	struct kvs_cluster_node *node; /* NULL until registered */
	int pipe[2]; /* [1]: the signal handler's end */
	pthread_t thread;
	bool thread_started;
};

static int try_register(struct kvsd_cluster *c, bool first)
{
	int err = kvs_cluster_node_register(&c->config, &c->info, &c->node);

	if (err == 0) {
		kvs_log(KVS_LOG_INFO,
			"kvstashd: registered as %s in cluster %s (%s)",
			c->info.id, c->config.cluster, c->info.address);
		return 0;
	}
	c->node = NULL;
	if (first && err != -EEXIST && err != -EINVAL)
		kvs_log(KVS_LOG_WARN,
			"kvstashd: etcd %s does not answer (%s): serving "
			"unregistered, registering once it does",
			c->config.endpoints, kvs_strerror(err));
	return err;
}

/* Revokes the lease (the key leaves etcd at once). */
static void leave(struct kvsd_cluster *c)
{
	int err;

	if (!c->node)
		return;
	err = kvs_cluster_node_deregister(c->node);
	c->node = NULL;
	if (err)
		kvs_log(KVS_LOG_WARN,
			"kvstashd: leaving the cluster: %s (the key goes when "
			"its lease expires)",
			kvs_strerror(err));
	else
		kvs_log(KVS_LOG_INFO, "kvstashd: left cluster %s",
			c->config.cluster);
}

static void *membership_main(void *arg)
{
	struct kvsd_cluster *c = arg;
	struct pollfd p = { .fd = c->pipe[0], .events = POLLIN };

	for (;;) {
		int r = poll(&p, 1, c->node ? -1 : RETRY_MS);

		if (r > 0)
			break;
		if (r < 0 && errno != EINTR)
			break;
		if (!c->node && try_register(c, false) == 0)
			kvs_log(KVS_LOG_WARN,
				"kvstashd: etcd answers again: registered");
	}
	leave(c);
	kvs_server_stop(c->srv);
	return NULL;
}

int kvsd_cluster_start(const struct kvsd_cluster_args *a,
		       struct kvs_server *srv, struct kvsd_cluster **out)
{
	struct kvsd_cluster *c = calloc(1, sizeof(*c));
	int err;

	if (!c)
		return -ENOMEM;
	c->pipe[0] = c->pipe[1] = -1;
	if (strlen(a->etcd) >= sizeof(c->etcd) ||
	    strlen(a->cluster) >= sizeof(c->cluster) ||
	    strlen(a->node_id) >= sizeof(c->id) ||
	    strlen(a->address) >= sizeof(c->address)) {
		kvs_log(KVS_LOG_ERR, "kvstashd: --etcd, --cluster, --node-id "
				     "or the address is too long");
		free(c);
		return -EINVAL;
	}
	/* the registration thread uses them after the caller's are gone */
	strcpy(c->etcd, a->etcd);
	strcpy(c->cluster, a->cluster);
	strcpy(c->id, a->node_id);
	strcpy(c->address, a->address);
	c->config.endpoints = c->etcd;
	c->config.cluster = c->cluster;
	c->config.timeout_ms = a->timeout_ms;
	c->info.id = c->id;
	c->info.address = c->address;
	c->info.capacity = a->capacity;
	c->info.protocol = KVS_PROTO_VERSION;
	c->info.ttl_s = a->ttl_s;
	c->srv = srv;
	if (pipe2(c->pipe, O_CLOEXEC | O_NONBLOCK)) {
		err = -errno;
		goto fail;
	}
	err = try_register(c, true);
	if (err == -EEXIST || err == -EINVAL)
		goto fail;
	err = pthread_create(&c->thread, NULL, membership_main, c);
	if (err) {
		err = -err;
		goto fail;
	}
	c->thread_started = true;
	*out = c;
	return 0;
fail:
	leave(c);
	if (c->pipe[0] >= 0) {
		close(c->pipe[0]);
		close(c->pipe[1]);
	}
	free(c);
	return err;
}

void kvsd_cluster_leave(struct kvsd_cluster *c)
{
	char one = 1;

	if (c)
		(void)!write(c->pipe[1], &one, 1);
}

void kvsd_cluster_stop(struct kvsd_cluster *c)
{
	if (!c)
		return;
	if (c->thread_started) {
		kvsd_cluster_leave(c);
		pthread_join(c->thread, NULL);
	}
	leave(c);
	close(c->pipe[0]);
	close(c->pipe[1]);
	free(c);
}
