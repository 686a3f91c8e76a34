/*
 * test_cluster_service.c - kvstash as a cluster, end to end: a real etcd,
 * three real kvstashd nodes registered in it, cluster clients putting
 * with 2 replicas (cluster_rig.h).
 *
 *   cluster.service (loopback, argument "loopback"): blocks land on the
 *     two members rendezvous hashing ranks first; lookup finds a chain
 *     spread over the nodes; kill -9 of one node under load: every get
 *     of an acknowledged block still succeeds from its other replica,
 *     the node leaves the client's view within the lease time, and once
 *     it is back (a new registration) a client that had marked it down
 *     uses it at once;
 *     SIGSTOP of another: calls that reach it end within the client's
 *     timeout and go elsewhere, its lease expires and it leaves, and
 *     after SIGCONT it joins again and serves; etcd killed: the client
 *     says so and goes on with its last members, a node started then
 *     serves and registers once etcd is back; SIGTERM: the node leaves at
 *     once; read repair (--repair-replicas) then puts every block read
 *     back on the members now ranked first for it.
 *   cluster.netns (argument "netns"): the same with each node in a
 *     network namespace of its own behind a veth pair and one node's
 *     link impaired (tc netem 20 ms and 5% loss, or 5% loss alone where
 *     the kernel has no netem); misses are allowed there, but no wrong
 *     block and no call past its timeout.  Exits 77 where namespaces
 *     cannot be made.
 *
 * Node 0 is killed, node 1 stopped and later stopped with SIGTERM, node
 * 2 the impaired one (netns).
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "cluster_rig.h"
#include "kvstash/cluster.h"
#include "kvstash/error.h"
#include "kvstash/log.h"

#define REPLICAS 2
#define TIMEOUT_MS 15000
/* the lease, etcd's expiry check (500 ms), the watch, a loaded machine */
#define LEAVE_MS ((long)rig_ttl_s(&rig) * 1000 + 2000)
#define CHAIN 24

static struct rig rig;
static struct kvs_client *client;
static struct pool pool;
static struct load load;
static bool netns_mode;
static uint32_t node_timeout_ms;

/* A one-server client of node @i; an impaired link may lose the
 * handshake's packets past its timeout now and then: tried 3 times. */
static struct kvs_client *direct_client(int i)
{
	struct kvs_client *c = NULL;
	int err = -KVS_ECONN;

	for (int attempt = 0; err && attempt < 3; attempt++)
		err = client_try(&rig.node[i], "alice", &c);
	if (err)
		fail_msg("connect to node %d: %s", i, kvs_strerror(err));
	return c;
}

/* Where the first blocks missed are (for the log of a failure). */
static void print_missed(const struct load_stats *st)
{
	for (uint64_t k = 0; k < st->gets_missed && k < 8; k++) {
		const struct kvs_store_key *key = &pool.key[st->missed[k]];

		printf("missed block %u on:", st->missed[k]);
		for (int i = 0; i < RIG_NODES_MAX; i++) {
			struct kvs_client *direct;
			bool present = false;

			if (rig.node[i].pid <= 0)
				continue;
			direct = direct_client(i);
			if (kvs_client_exists(direct, key, 1, &present) == 0 &&
			    present)
				printf(" %s", rig.id[i]);
			kvs_client_close(direct);
		}
		printf("\n");
	}
}

/*
 * Strict on loopback: every acknowledged block is found -- save those
 * whose put made one copy only (a node that did not answer in time, on a
 * machine too loaded to answer, leaves the put fewer members to try;
 * kvs_client_counters counts them): at most one miss each.
 */
static void check_load(const char *what, const struct load_stats *st)
{
	struct kvs_client_counters cn;

	kvs_client_counters(client, &cn);
	load_print(what, st);
	if (st->gets_missed)
		print_missed(st);
	if (cn.under_replicated)
		printf("%llu puts made one copy\n",
		       (unsigned long long)cn.under_replicated);
	assert_int_equal(st->wrong, 0);
	assert_int_equal(st->overran, 0);
	if (!netns_mode) {
		assert_true(st->gets_missed <= cn.under_replicated);
		assert_int_equal(st->gets_failed, 0);
	}
}

static void check_all_acked(const char *what)
{
	struct load_stats st;

	load_check_all(&load, &st);
	check_load(what, &st);
	assert_true(st.gets_ok > 0);
}

static int group_setup(void **state)
{
	(void)state;
	rig_up(&rig, netns_mode ? "clnetns" : "clsvc", 3, netns_mode,
	       netns_mode ? 2 : -1);
	/* below the lease (calls time out on a stopped node before it
	 * leaves), above what a loaded 2-core machine takes to answer; the
	 * impaired link retransmits lost packets after 200 ms and more */
	node_timeout_ms = 2500;
	client = rig_client(&rig, REPLICAS, node_timeout_ms, TIMEOUT_MS);
	pool_make(&pool, 3000, 0x5eed0000);
	load_init(&load, client, &pool, REPLICAS, TIMEOUT_MS);
	return rig_wait_members(client, 3, NULL, true, 10000) < 0 ? -1 : 0;
}

static int group_teardown(void **state)
{
	(void)state;
	load_stop(&load);
	load_free(&load);
	kvs_client_close(client);
	pool_free(&pool);
	rig_down(&rig);
	return 0;
}

/* The members as a snapshot, for the expected placement. */
static struct kvs_cluster_members *members_now(void)
{
	struct kvs_cluster_member list[RIG_NODES_MAX];
	struct kvs_cluster_members *m;
	struct kvs_client_node *nodes;
	size_t n;

	assert_int_equal(kvs_client_nodes(client, false, &nodes, &n), 0);
	assert_true(n <= RIG_NODES_MAX);
	memset(list, 0, sizeof(list));
	for (size_t i = 0; i < n; i++) {
		snprintf(list[i].id, sizeof(list[i].id), "%s", nodes[i].id);
		snprintf(list[i].address, sizeof(list[i].address), "%s",
			 nodes[i].address);
		list[i].capacity = nodes[i].capacity;
	}
	free(nodes);
	assert_int_equal(kvs_cluster_members_create(list, n, 1, &m), 0);
	return m;
}

/* Which rig node has member id @id. */
static int node_of(const char *id)
{
	for (int i = 0; i < RIG_NODES_MAX; i++)
		if (strcmp(rig.id[i], id) == 0)
			return i;
	fail_msg("no node %s", id);
	return -1;
}

/*
 * Blocks go to the two members ranked first; lookup finds a chain spread
 * over the nodes and stops at the first block deleted; stat lists the
 * members; a cluster client is not duplicated (kvs_client_dup).
 */
static void test_placement_and_lookup(void **state)
{
	uint8_t spans[CHAIN][KVS_ID_SIZE];
	const uint32_t layers[2] = { 0, 1 };
	struct kvs_store_key keys[2 * CHAIN];
	uint8_t *objs[2 * CHAIN];
	size_t lens[2 * CHAIN], prefix = 0;
	int res[2 * CHAIN];
	struct kvs_client *direct[3];
	struct kvs_cluster_members *m = members_now();
	struct kvs_client *dup = NULL;
	struct kvs_client_node *nodes;
	size_t n;

	(void)state;
	for (int i = 0; i < CHAIN; i++)
		for (uint32_t l = 0; l < 2; l++) {
			objs[2 * i + l] =
				make_block(0xc4a10000 + (uint64_t)i, l, 1, 128,
					   &lens[2 * i + l], &keys[2 * i + l]);
			memcpy(spans[i], keys[2 * i].span_id, KVS_ID_SIZE);
		}
	assert_int_equal(
		kvs_client_put_replicas(client, (const uint8_t *const *)objs,
					lens, 2 * CHAIN, KVS_DURABILITY_WRITTEN,
					REPLICAS, res),
		0);
	for (int i = 0; i < 2 * CHAIN; i++)
		assert_int_equal(res[i], 0);
	for (int i = 0; i < 3; i++)
		direct[i] = direct_client(i);
	/* a cluster client has no one server to connect to again */
	assert_int_equal(kvs_client_dup(client, &dup), -KVS_EPARAM);
	assert_null(dup);
	for (int k = 0; k < 2 * CHAIN && !netns_mode; k++) {
		uint32_t rank[REPLICAS];
		bool expect[3] = { false }, present;

		assert_int_equal(kvs_cluster_place(m, NULL, keys[k].span_id,
						   keys[k].layer, REPLICAS,
						   rank),
				 REPLICAS);
		for (int r = 0; r < REPLICAS; r++)
			expect[node_of(
				kvs_cluster_members_get(m, rank[r])->id)] =
				true;
		for (int i = 0; i < 3; i++) {
			assert_int_equal(kvs_client_exists(direct[i], &keys[k],
							   1, &present),
					 0);
			assert_int_equal(present, expect[i]);
		}
	}
	assert_int_equal(kvs_client_lookup(client,
					   (const uint8_t(*)[KVS_ID_SIZE])spans,
					   CHAIN, layers, 2, &prefix),
			 0);
	assert_int_equal(prefix, CHAIN);
	/* span 10's layer 1 deleted everywhere: the prefix ends there */
	assert_int_equal(kvs_client_delete(client, &keys[21], 1, res), 0);
	assert_int_equal(res[0], 0);
	assert_int_equal(kvs_client_lookup(client,
					   (const uint8_t(*)[KVS_ID_SIZE])spans,
					   CHAIN, layers, 2, &prefix),
			 0);
	assert_int_equal(prefix, 10);
	assert_int_equal(kvs_client_delete(client, &keys[21], 1, res), 0);
	assert_int_equal(res[0], -KVS_ENOTFOUND);
	assert_int_equal(kvs_client_nodes(client, true, &nodes, &n), 0);
	assert_int_equal(n, 3);
	for (size_t i = 0; i < n; i++)
		assert_int_equal(nodes[i].status, 0);
	free(nodes);
	for (int i = 0; i < 3; i++)
		kvs_client_close(direct[i]);
	for (int i = 0; i < 2 * CHAIN; i++)
		free(objs[i]);
	kvs_cluster_members_release(m);
}

/* Whether client @c has node @id marked down (after a call that read the
 * latest members). */
static bool marked_down(struct kvs_client *c, const char *id)
{
	struct kvs_client_node *nodes;
	bool down = false;
	size_t n;

	assert_int_equal(kvs_client_nodes(c, true, &nodes, &n), 0);
	free(nodes);
	assert_int_equal(kvs_client_nodes(c, false, &nodes, &n), 0);
	for (size_t i = 0; i < n; i++)
		if (strcmp(nodes[i].id, id) == 0)
			down = nodes[i].marked_down;
	free(nodes);
	return down;
}

/*
 * kill -9 of node 0 under load.  A second client with a back-off longer
 * than the test marks the dead node down; once the node is back on its
 * store (a new registration, at a new port), that mark is past: the node
 * serves that client at once.
 */
static void test_kill(void **state)
{
	struct kvs_client_cluster_opts o;
	struct kvs_client *watcher;
	struct load_stats st;
	long left;

	(void)state;
	rig_client_opts(&rig, REPLICAS, node_timeout_ms, TIMEOUT_MS, &o);
	o.backoff_ms = 600000;
	watcher = rig_connect(&rig, &o);
	load_start(&load);
	sleep(1);
	assert_int_equal(daemon_stop(&rig.node[0], SIGKILL, 5000), 128 + 9);
	kvs_log(KVS_LOG_INFO, "test: node 0 killed");
	assert_true(marked_down(watcher, "n0"));
	left = rig_wait_members(client, 2, "n0", false, LEAVE_MS + 2000);
	printf("killed node left the view after %ld ms\n", left);
	assert_true(left >= 0 && left <= LEAVE_MS);
	usleep(500000);
	load_stop(&load);
	check_load("load across kill -9", &load.st);
	assert_true(load.st.puts_ok > 0);
	check_all_acked("acknowledged blocks after kill -9");
	/* back, on its store: it registers again */
	rig_node_start(&rig, 0);
	assert_true(rig_wait_members(client, 3, "n0", true, 10000) >= 0);
	assert_true(rig_wait_members(watcher, 3, "n0", true, 10000) >= 0);
	assert_false(marked_down(watcher, "n0"));
	load.c = watcher;
	load_check_all(&load, &st);
	load.c = client;
	check_load("acknowledged blocks read by a client that had marked "
		   "the node down",
		   &st);
	assert_true(st.gets_ok > 0);
	kvs_client_close(watcher);
}

/* SIGSTOP of node 1 under load, then SIGCONT. */
static void test_stop(void **state)
{
	struct kvs_client_counters before, after;
	struct kvs_client_node *nodes;
	size_t n;
	long left, back;

	(void)state;
	kvs_client_counters(client, &before);
	load_start(&load);
	usleep(500000);
	kill(rig.node[1].pid, SIGSTOP);
	left = rig_wait_members(client, 2, "n1", false, LEAVE_MS + 2000);
	printf("stopped node left the view after %ld ms\n", left);
	assert_true(left >= 0 && left <= LEAVE_MS);
	kvs_client_counters(client, &after);
	printf("marked down %llu times, %llu fallbacks\n",
	       (unsigned long long)(after.marked_down - before.marked_down),
	       (unsigned long long)(after.fallbacks - before.fallbacks));
	/* calls reached it, gave up on it and went elsewhere */
	assert_true(after.marked_down > before.marked_down);
	assert_true(after.fallbacks > before.fallbacks);
	kill(rig.node[1].pid, SIGCONT);
	back = rig_wait_members(client, 3, "n1", true, 10000);
	printf("continued node back in the view after %ld ms\n", back);
	assert_true(back >= 0);
	sleep(1);
	load_stop(&load);
	check_load("load across SIGSTOP and SIGCONT", &load.st);
	check_all_acked("acknowledged blocks after SIGCONT");
	/* it serves again */
	assert_int_equal(kvs_client_nodes(client, true, &nodes, &n), 0);
	for (size_t i = 0; i < n; i++)
		assert_int_equal(nodes[i].status, 0);
	free(nodes);
}

/* etcd killed: the client goes on with its members; a node started
 * meanwhile serves, and registers once etcd is back. */
static void test_etcd_outage(void **state)
{
	struct kvs_client_membership m;
	struct kvs_client_node *nodes;
	struct kvs_client *direct;
	struct kvs_client_stat st;
	uint64_t t0;
	size_t n;

	(void)state;
	test_etcd_kill(&rig.etcd);
	t0 = ms_now();
	do {
		kvs_client_membership(client, &m);
		usleep(20000);
	} while (m.reachable && ms_now() - t0 < 10000);
	printf("client saw etcd unreachable after %llu ms\n",
	       (unsigned long long)(ms_now() - t0));
	assert_false(m.reachable);
	assert_int_equal(m.members, 3);
	check_all_acked("acknowledged blocks with etcd down");
	/* a fourth node, started while etcd is away, serves */
	{
		char what[32];

		snprintf(what, sizeof(what), "%s-n3",
			 netns_mode ? "clnetns" : "clsvc");
		daemon_prepare(&rig.node[3], what);
		snprintf(rig.id[3], sizeof(rig.id[3]), "n3");
		snprintf(rig.etcd_of[3], sizeof(rig.etcd_of[3]), "%s",
			 rig.etcd.endpoint);
		rig_node_start(&rig, 3);
	}
	direct = direct_client(3);
	assert_int_equal(kvs_client_stat(direct, &st), 0);
	kvs_client_close(direct);
	assert_int_equal(test_etcd_restart(&rig.etcd, false), 0);
	assert_true(rig_wait_members(client, 4, "n3", true, 10000) >= 0);
	kvs_client_membership(client, &m);
	assert_true(m.reachable);
	/* registered where it serves */
	assert_int_equal(kvs_client_nodes(client, true, &nodes, &n), 0);
	assert_int_equal(n, 4);
	for (size_t i = 0; i < n; i++)
		assert_int_equal(nodes[i].status, 0);
	free(nodes);
	/* a join moved some blocks' first ranks: found all the same */
	check_all_acked("acknowledged blocks after a join");
}

/* SIGTERM: the node revokes its lease and leaves at once. */
static void test_sigterm(void **state)
{
	long left;
	int rc;

	(void)state;
	assert_int_equal(kill(rig.node[1].pid, SIGTERM), 0);
	left = rig_wait_members(client, 3, "n1", false, 5000);
	printf("node stopped by SIGTERM left the view after %ld ms\n", left);
	/* at once: well before a lease's expiry (at least 2/3 of it) */
	assert_true(left >= 0 && left < 2500);
	rc = daemon_stop(&rig.node[1], SIGTERM, 10000);
	if (rc != 0) {
		char cmd[700];

		snprintf(cmd, sizeof(cmd), "tail -n 20 '%s'", rig.node[1].log);
		printf("kvstashd exited %d; its log ends:\n", rc);
		fflush(stdout);
		if (system(cmd) != 0)
			printf("(no log)\n");
	}
	assert_int_equal(rc, 0);
	check_all_acked("acknowledged blocks after a node left");
}

/* How many of the acknowledged blocks lack a copy on one of the two
 * members now ranked first for them. */
static size_t count_unreplicated(void)
{
	struct kvs_cluster_members *m = members_now();
	struct kvs_client *direct[RIG_NODES_MAX] = { NULL };
	size_t lacking = 0;

	for (int i = 0; i < RIG_NODES_MAX; i++)
		if (rig.node[i].pid > 0)
			direct[i] = direct_client(i);
	for (size_t a = 0; a < load.n_acked; a++) {
		const struct kvs_store_key *key = &pool.key[load.acked[a]];
		uint32_t rank[REPLICAS];
		size_t n = kvs_cluster_place(m, NULL, key->span_id, key->layer,
					     REPLICAS, rank);
		bool all = true;

		for (size_t r = 0; r < n; r++) {
			int i = node_of(
				kvs_cluster_members_get(m, rank[r])->id);
			bool present = false;

			assert_non_null(direct[i]);
			assert_int_equal(
				kvs_client_exists(direct[i], key, 1, &present),
				0);
			all &= present;
		}
		lacking += !all;
	}
	for (int i = 0; i < RIG_NODES_MAX; i++)
		kvs_client_close(direct[i]);
	kvs_cluster_members_release(m);
	return lacking;
}

/* --repair-replicas: a pass of reads puts the copies back. */
static void test_read_repair(void **state)
{
	struct kvs_client_cluster_opts o;
	struct kvs_client *repairer, *reader = load.c;
	struct kvs_client_counters cn = { 0 }, was;
	struct load_stats st;
	size_t before, after;
	uint64_t t0;

	(void)state;
	rig_client_opts(&rig, REPLICAS, node_timeout_ms, TIMEOUT_MS, &o);
	o.repair_replicas = true;
	repairer = rig_connect(&rig, &o);
	before = count_unreplicated();
	load.c = repairer;
	load_check_all(&load, &st);
	load.c = reader;
	check_load("acknowledged blocks read with repair", &st);
	/* the copies are put after the reads return: until they stop */
	t0 = ms_now();
	do {
		was = cn;
		usleep(300000);
		kvs_client_counters(repairer, &cn);
	} while (cn.repairs != was.repairs && ms_now() - t0 < 20000);
	kvs_client_close(repairer);
	after = count_unreplicated();
	printf("blocks short of a copy on their first two members: %zu "
	       "before, %zu after a read with repair (%llu copies put)\n",
	       before, after, (unsigned long long)cn.repairs);
	assert_true(before > 0);
	assert_true(cn.repairs > 0);
	if (!netns_mode)
		assert_int_equal(after, 0);
	else
		assert_true(after < before);
}

/* Log lines with the milliseconds since the start (to read a failure). */
static void log_line(enum kvs_log_level level, const char *line, void *arg)
{
	static uint64_t t0;

	(void)level;
	(void)arg;
	if (!t0)
		t0 = ms_now();
	fprintf(stderr, "%7.3f %s\n", (double)(ms_now() - t0) / 1000, line);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_placement_and_lookup),
		cmocka_unit_test(test_kill),
		cmocka_unit_test(test_stop),
		cmocka_unit_test(test_etcd_outage),
		cmocka_unit_test(test_sigterm),
		cmocka_unit_test(test_read_repair),
	};

	netns_mode = argc > 1 && strcmp(argv[1], "netns") == 0;
	/* the client's account of nodes it gave up on, in the test's log */
	kvs_log_set_level(KVS_LOG_INFO);
	kvs_log_set_sink(log_line, NULL);
	setvbuf(stdout, NULL, _IOLBF, 0);
	return cmocka_run_group_tests_name(netns_mode ? "cluster.netns"
						      : "cluster.service",
					   tests, group_setup, group_teardown);
}
