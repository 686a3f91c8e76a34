/*
 * cluster_test_node.c - a stand-in store node for the membership tests:
 * registers, prints "registered <lease>", and holds the registration
 * until SIGTERM or SIGINT, then deregisters and prints "deregistered
 * <rc>".  A test kills it with SIGKILL to make a node vanish without
 * revoking its lease.
 *
 * Usage: cluster_test_node ENDPOINTS CLUSTER ID ADDRESS CAPACITY TTL_S
 *        [TIMEOUT_MS]
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#include "kvstash/cluster.h"
#include "kvstash/error.h"

int main(int argc, char **argv)
{
	struct kvs_cluster_config config = { 0 };
	struct kvs_cluster_node_info info = { 0 };
	struct kvs_cluster_node_stats stats;
	struct kvs_cluster_node *node;
	sigset_t stop;
	int sig, err;

	if (argc < 7 || argc > 8) {
		fprintf(stderr,
			"usage: %s ENDPOINTS CLUSTER ID ADDRESS "
			"CAPACITY TTL_S [TIMEOUT_MS]\n",
			argv[0]);
		return 2;
	}
	/* Blocked before any thread starts, so sigwait gets them. */
	sigemptyset(&stop);
	sigaddset(&stop, SIGTERM);
	sigaddset(&stop, SIGINT);
	pthread_sigmask(SIG_BLOCK, &stop, NULL);

	config.endpoints = argv[1];
	config.cluster = argv[2];
	config.timeout_ms = argc == 8 ? (unsigned)atoi(argv[7]) : 0;
	info.id = argv[3];
	info.address = argv[4];
	info.capacity = strtoull(argv[5], NULL, 10);
	info.protocol = 1;
	info.ttl_s = (unsigned)atoi(argv[6]);
	err = kvs_cluster_node_register(&config, &info, &node);
	if (err) {
		fprintf(stderr, "cluster_test_node: %s\n", kvs_strerror(err));
		return 1;
	}
	kvs_cluster_node_stats(node, &stats);
	printf("registered %lld\n", (long long)stats.lease);
	fflush(stdout);
	sigwait(&stop, &sig);
	err = kvs_cluster_node_deregister(node);
	printf("deregistered %d\n", err);
	return err ? 1 : 0;
}
