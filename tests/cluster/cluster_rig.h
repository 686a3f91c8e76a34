/*
 * cluster_rig.h - a whole cluster for the service tests: a real etcd
 * (etcd_harness.h), real kvstashd nodes registered in it
 * (tests/transport/service_util.h), on loopback or each in a network
 * namespace of its own behind a veth pair, with one node's link impaired;
 * a pool of blocks; and a load of client threads that put with replicas
 * and read back what was acknowledged, counting hits, misses, failures,
 * wrong blocks and calls that overran their timeout.
 */
#ifndef KVS_TEST_CLUSTER_RIG_H
#define KVS_TEST_CLUSTER_RIG_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../server/service_util.h"
#include "etcd_harness.h"
#include "kvstash/client.h"

#define RIG_NODES_MAX 4

struct rig {
	bool netns;
	struct test_etcd etcd;
	struct daemon node[RIG_NODES_MAX];
	char id[RIG_NODES_MAX][16];
	char etcd_of[RIG_NODES_MAX][64]; /* the endpoint node i uses */
	char cluster[32];
	char ns[RIG_NODES_MAX][32];
	char host_ip[RIG_NODES_MAX][20], node_ip[RIG_NODES_MAX][20];
	char impaired[160]; /* how the impaired node's link is impaired */
	int n_ns;
	char bridge[16];
	bool has_bridge;
};

/*
 * rig_up - etcd, then @n nodes "n0".. registered in cluster @name.  With
 * @netns each node runs in a namespace of its own and node @impair (-1:
 * none) gets 20 ms delay and 5% loss each way (tc netem; where the kernel
 * has no netem, 5% loss by a tc eBPF program, no delay).  Exits 77 with a
 * message where there is no etcd, or no namespaces can be made.
 */
void rig_up(struct rig *r, const char *name, int n, bool netns, int impair);
/* The nodes' lease TTL: 5 s on loopback, 6 s in namespaces. */
unsigned rig_ttl_s(const struct rig *r);
/* Starts node @i (again, on the same store) and waits for its ready
 * file; it registers by itself. */
void rig_node_start(struct rig *r, int i);
/* Kills everything, removes namespaces and directories. */
void rig_down(struct rig *r);

/* A cluster client of the rig's etcd (tenant alice): its options
 * (back-off 2 s, etcd calls 1 s), for a caller to change, then the
 * connection; rig_client does both. */
void rig_client_opts(struct rig *r, unsigned replicas, uint32_t node_timeout_ms,
		     uint32_t timeout_ms, struct kvs_client_cluster_opts *o);
struct kvs_client *rig_connect(struct rig *r,
			       const struct kvs_client_cluster_opts *o);
struct kvs_client *rig_client(struct rig *r, unsigned replicas,
			      uint32_t node_timeout_ms, uint32_t timeout_ms);
/* Waits until the client's members are @n (and, with @id, include or,
 * with !@present, exclude it); returns the milliseconds it took, or -1
 * after @timeout_ms. */
long rig_wait_members(struct kvs_client *c, size_t n, const char *id,
		      bool present, int timeout_ms);

/* ---- blocks and load ------------------------------------------------- */

struct pool {
	size_t n;
	uint8_t **obj;
	size_t *len;
	struct kvs_store_key *key;
};

/* @n blocks of layer 0 (about 10 KiB each), ids from @seed. */
void pool_make(struct pool *p, size_t n, uint64_t seed);
void pool_free(struct pool *p);

struct load_stats {
	uint64_t puts_ok, puts_failed, gets_ok, gets_missed, gets_failed;
	uint64_t wrong; /* a block that differs from what was put */
	uint64_t calls, overran; /* calls past timeout + slack */
	uint64_t max_call_ms;
	int last_error;
	uint32_t missed[8]; /* pool indexes of the first misses */
};

struct load {
	struct kvs_client *c;
	struct pool *pool;
	unsigned replicas;
	uint32_t timeout_ms; /* the client's: no call may take longer */
	pthread_t thread[2];
	int threads;
	bool stop;
	pthread_mutex_t lock; /* guards what follows */
	size_t next; /* next pool block to put */
	uint32_t *acked; /* pool indexes acknowledged, in order */
	size_t n_acked;
	struct load_stats st;
};

void load_init(struct load *l, struct kvs_client *c, struct pool *p,
	       unsigned replicas, uint32_t timeout_ms);
/* Two threads: put 4 new blocks, get 8 acknowledged ones, again. */
void load_start(struct load *l);
void load_stop(struct load *l);
/* Gets every acknowledged block once more, adding to @st (zeroed
 * first). */
void load_check_all(struct load *l, struct load_stats *st);
void load_free(struct load *l);
void load_print(const char *what, const struct load_stats *st);

#endif
