/*
 * test_membership.c - node registration and the member view against a
 * real etcd: a registration appears in a view with its fields; revoking
 * (deregister, SIGTERM of a node process) removes it at once; a node
 * killed with SIGKILL leaves when its lease expires; one stopped with
 * SIGSTOP leaves too, and comes back after SIGCONT; a second node with
 * the same id is refused; values that are not members are ignored; with
 * etcd killed, calls fail within their deadlines and the view keeps its
 * members and says UNREACHABLE; etcd restarted with its data, the watch
 * resumes; restarted from empty data, the node registers again and the
 * view reads again.
 *
 * Each test uses its own cluster name on the one etcd of the program.
 * Lease TTL 2 s, etcd calls 1 s; SLACK_MS allows for a loaded machine
 * and for etcd's lease checker, which runs every 500 ms.
 */
#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "cluster_internal.h"
#include "etcd_harness.h"
#include "etcd_internal.h"
#include "kvstash/cluster.h"

#define TTL_S 2
#define TIMEOUT_MS 1000
#define SLACK_MS 1500

static struct test_etcd server;
static const char *node_program;

static int group_setup(void **state)
{
	if (test_etcd_binary() == NULL) {
		printf("etcd not installed (etcd-server): test skipped\n");
		exit(77);
	}
	node_program = getenv("KVS_TEST_NODE");
	if (node_program == NULL) {
		printf("KVS_TEST_NODE not set (run through meson test)\n");
		return -1;
	}
	return test_etcd_start(&server);
}

static int group_teardown(void **state)
{
	test_etcd_destroy(&server);
	return 0;
}

static struct kvs_cluster_config config_of(const char *cluster)
{
	struct kvs_cluster_config c = { .endpoints = server.endpoint,
					.cluster = cluster,
					.timeout_ms = TIMEOUT_MS };

	return c;
}

static struct kvs_cluster_node *node_up(const char *cluster, const char *id,
					const char *address)
{
	struct kvs_cluster_config c = config_of(cluster);
	struct kvs_cluster_node_info info = { .id = id,
					      .address = address,
					      .capacity = 1ull << 30,
					      .protocol = 3,
					      .ttl_s = TTL_S };
	struct kvs_cluster_node *node;

	assert_int_equal(kvs_cluster_node_register(&c, &info, &node), 0);
	return node;
}

static struct kvs_cluster_view *view_of(const char *cluster)
{
	struct kvs_cluster_config c = config_of(cluster);
	struct kvs_cluster_view *view;

	assert_int_equal(kvs_cluster_view_open(&c, &view), 0);
	return view;
}

/* Whether the view holds @id now. */
static bool has(struct kvs_cluster_view *view, const char *id)
{
	struct kvs_cluster_members *m = kvs_cluster_view_members(view);
	bool found = kvs_cluster_members_find(m, id) >= 0;

	kvs_cluster_members_release(m);
	return found;
}

/* Waits until has(view, id) == @want; the ms it took, or -1 after @ms. */
static int64_t wait_member(struct kvs_cluster_view *view, const char *id,
			   bool want, int64_t ms)
{
	int64_t t0 = kvs_cluster_now_ms();

	while (has(view, id) != want) {
		struct kvs_cluster_members *m = kvs_cluster_view_members(view);
		uint64_t generation = kvs_cluster_members_generation(m);
		int64_t left = ms - (kvs_cluster_now_ms() - t0);

		kvs_cluster_members_release(m);
		if (left <= 0)
			return -1;
		if (has(view, id) == want)
			break;
		kvs_cluster_view_wait(view, generation, (unsigned)left);
	}
	return kvs_cluster_now_ms() - t0;
}

/* Waits until the view's state is @state; the ms, or -1 after @ms. */
static int64_t wait_view_state(struct kvs_cluster_view *view,
			       enum kvs_cluster_state state, int64_t ms)
{
	int64_t t0 = kvs_cluster_now_ms();
	struct kvs_cluster_view_stats st;

	for (;;) {
		kvs_cluster_view_stats(view, &st);
		if (st.state == state)
			return kvs_cluster_now_ms() - t0;
		if (kvs_cluster_now_ms() - t0 > ms)
			return -1;
		usleep(20 * 1000);
	}
}

static int64_t wait_node_state(struct kvs_cluster_node *node,
			       enum kvs_cluster_state state,
			       uint64_t registrations, int64_t ms)
{
	int64_t t0 = kvs_cluster_now_ms();
	struct kvs_cluster_node_stats st;

	for (;;) {
		kvs_cluster_node_stats(node, &st);
		if (st.state == state && st.registrations >= registrations)
			return kvs_cluster_now_ms() - t0;
		if (kvs_cluster_now_ms() - t0 > ms)
			return -1;
		usleep(20 * 1000);
	}
}

/* ---- a node in its own process ---- */

struct node_process {
	pid_t pid;
	int out; /* its stdout */
};

/* Reads one line of the node's output within @ms into @line. */
static bool read_line(struct node_process *p, char *line, size_t size, int ms)
{
	size_t len = 0;

	while (len + 1 < size) {
		struct pollfd pfd = { .fd = p->out, .events = POLLIN };

		if (poll(&pfd, 1, ms) != 1 || read(p->out, line + len, 1) != 1)
			break;
		if (line[len++] == '\n')
			break;
	}
	line[len] = '\0';
	return len > 0 && line[len - 1] == '\n';
}

/* Starts node @id of @cluster in a process of its own and waits until
 * @view holds it. */
static void node_start(struct node_process *p, struct kvs_cluster_view *view,
		       const char *cluster, const char *id, const char *address)
{
	char ttl[16], timeout[16], line[128];
	int pipefd[2];

	snprintf(ttl, sizeof(ttl), "%d", TTL_S);
	snprintf(timeout, sizeof(timeout), "%d", TIMEOUT_MS);
	assert_int_equal(pipe(pipefd), 0);
	p->pid = fork();
	assert_true(p->pid >= 0);
	if (p->pid == 0) {
		dup2(pipefd[1], 1);
		close(pipefd[0]);
		close(pipefd[1]);
		execl(node_program, node_program, server.endpoint, cluster, id,
		      address, "1073741824", ttl, timeout, (char *)NULL);
		_exit(127);
	}
	close(pipefd[1]);
	p->out = pipefd[0];
	assert_true(read_line(p, line, sizeof(line), 10000));
	assert_memory_equal(line, "registered ", 11);
	assert_true(wait_member(view, id, true, 2000) >= 0);
}

/* Sends @sig and reaps the process; its exit status (-1: killed). */
static int node_signal(struct node_process *p, int sig)
{
	int status;

	kill(p->pid, sig);
	assert_int_equal(waitpid(p->pid, &status, 0), p->pid);
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* ---- tests ---- */

static void test_register_and_view(void **state)
{
	struct kvs_cluster_view *view = view_of("c1");
	struct kvs_cluster_view_stats st;
	struct kvs_cluster_node_stats ns;
	struct kvs_cluster_members *m;
	struct kvs_cluster_node *node;
	const struct kvs_cluster_member *member;
	struct kvs_cluster_view *late;
	int64_t took;

	kvs_cluster_view_stats(view, &st);
	assert_int_equal(st.state, KVS_CLUSTER_CONNECTED);
	assert_int_equal(st.members, 0);

	node = node_up("c1", "n1", "127.0.0.1:7001");
	took = wait_member(view, "n1", true, 2000);
	printf("registration seen by the view after %lld ms\n",
	       (long long)took);
	assert_true(took >= 0);
	kvs_cluster_node_stats(node, &ns);
	assert_int_equal(ns.state, KVS_CLUSTER_CONNECTED);
	assert_int_equal(ns.registrations, 1);

	m = kvs_cluster_view_members(view);
	assert_int_equal(kvs_cluster_members_count(m), 1);
	assert_true(kvs_cluster_members_generation(m) > st.generation);
	member = kvs_cluster_members_get(m, 0);
	assert_string_equal(member->id, "n1");
	assert_string_equal(member->address, "127.0.0.1:7001");
	assert_true(member->capacity == 1ull << 30);
	assert_int_equal(member->protocol, 3);
	assert_true(llabs(member->start_time - (int64_t)time(NULL)) < 60);
	assert_true(member->lease == ns.lease);
	kvs_cluster_members_release(m);

	/* a view opened later reads it at once */
	late = view_of("c1");
	assert_true(has(late, "n1"));
	kvs_cluster_view_close(late);

	/* revoking removes it at once, long before the TTL */
	assert_int_equal(kvs_cluster_node_deregister(node), 0);
	took = wait_member(view, "n1", false, 2000);
	printf("deregistered node left the view after %lld ms\n",
	       (long long)took);
	assert_true(took >= 0 && took < 1000);
	kvs_cluster_view_close(view);
}

static void test_same_id(void **state)
{
	struct kvs_cluster_config c = config_of("c2");
	struct kvs_cluster_node_info other = { .id = "n1",
					       .address = "127.0.0.1:9999",
					       .capacity = 1,
					       .ttl_s = TTL_S };
	struct kvs_cluster_view *view = view_of("c2");
	struct kvs_cluster_node *first = node_up("c2", "n1", "127.0.0.1:7002");
	struct kvs_cluster_node *second, *refused = NULL;
	struct kvs_cluster_node_stats ns;
	struct kvs_cluster_members *m;

	/* another node cannot take a live node's id */
	assert_int_equal(kvs_cluster_node_register(&c, &other, &refused),
			 -EEXIST);
	assert_null(refused);
	/* the same node (same address) starting again takes it over */
	second = node_up("c2", "n1", "127.0.0.1:7002");
	kvs_cluster_node_stats(second, &ns);
	assert_true(wait_member(view, "n1", true, 2000) >= 0);
	/* the old registration's revoke leaves the new one's key */
	assert_int_equal(kvs_cluster_node_deregister(first), 0);
	usleep(300 * 1000);
	m = kvs_cluster_view_members(view);
	assert_int_equal(kvs_cluster_members_find(m, "n1"), 0);
	assert_true(kvs_cluster_members_get(m, 0)->lease == ns.lease);
	kvs_cluster_members_release(m);
	assert_int_equal(kvs_cluster_node_deregister(second), 0);
	assert_true(wait_member(view, "n1", false, 2000) >= 0);
	kvs_cluster_view_close(view);
}

static void test_bad_input(void **state)
{
	struct kvs_cluster_config c = config_of("c3");
	struct kvs_cluster_node_info info = { .id = "n/1", .address = "a:1" };
	struct kvs_cluster_view *view = view_of("c3"), *bad_view;
	struct kvs_cluster_node *node;
	struct kvs_cluster_view_stats st;
	struct kvs_etcd *etcd;
	int64_t t0;

	assert_int_equal(kvs_cluster_node_register(&c, &info, &node), -EINVAL);
	info.id = "n1";
	info.address = "";
	assert_int_equal(kvs_cluster_node_register(&c, &info, &node), -EINVAL);
	info.address = "a:1";
	info.capacity = 1ull << 63;
	assert_int_equal(kvs_cluster_node_register(&c, &info, &node), -EINVAL);
	info.capacity = 1;
	info.ttl_s = 3601;
	assert_int_equal(kvs_cluster_node_register(&c, &info, &node), -EINVAL);
	c.cluster = "bad name";
	assert_int_equal(kvs_cluster_view_open(&c, &bad_view), -EINVAL);

	/* values under the prefix that are not members are left out */
	assert_int_equal(kvs_etcd_open(server.endpoint, TIMEOUT_MS, &etcd), 0);
	assert_int_equal(
		kvs_etcd_put(etcd, "/kvstash/c3/nodes/junk", "not json", 8, 0),
		0);
	assert_int_equal(kvs_etcd_put(etcd, "/kvstash/c3/nodes/x/y",
				      "{\"id\":\"x/y\"}", 12, 0),
			 0);
	node = node_up("c3", "good", "127.0.0.1:7003");
	assert_true(wait_member(view, "good", true, 2000) >= 0);
	kvs_cluster_view_stats(view, &st);
	assert_int_equal(st.members, 1);
	assert_int_equal(st.bad_values, 2);

	/* a member whose value turns bad leaves */
	assert_int_equal(
		kvs_etcd_put(etcd, "/kvstash/c3/nodes/good", "{}", 2, 0), 0);
	assert_true(wait_member(view, "good", false, 2000) >= 0);
	kvs_cluster_node_deregister(node);

	/* nothing listens: the view cannot open, and says so quickly */
	c.cluster = "c3";
	c.endpoints = "http://127.0.0.1:1";
	t0 = kvs_cluster_now_ms();
	assert_int_equal(kvs_cluster_view_open(&c, &bad_view), -ECONNREFUSED);
	assert_true(kvs_cluster_now_ms() - t0 < TIMEOUT_MS);
	kvs_etcd_delete(etcd, "/kvstash/c3/", true, NULL);
	kvs_etcd_close(etcd);
	kvs_cluster_view_close(view);
}

/* A node process killed with SIGKILL revokes nothing: it leaves when its
 * lease expires. */
static void test_lease_expiry(void **state)
{
	struct kvs_cluster_view *view = view_of("c4");
	struct node_process p;
	int64_t took;

	node_start(&p, view, "c4", "crash", "127.0.0.1:7004");
	assert_int_equal(node_signal(&p, SIGKILL), -1);
	close(p.out);
	took = wait_member(view, "crash", false, TTL_S * 1000 + SLACK_MS);
	printf("killed node left the view %lld ms after SIGKILL (TTL %d s)\n",
	       (long long)took, TTL_S);
	assert_true(took >= 0);
	kvs_cluster_view_close(view);
}

/* SIGTERM: the node deregisters, revoking its lease: it leaves at once. */
static void test_sigterm_revokes(void **state)
{
	struct kvs_cluster_view *view = view_of("c5");
	struct node_process p;
	char line[64];
	int64_t took;

	node_start(&p, view, "c5", "polite", "127.0.0.1:7005");
	assert_int_equal(node_signal(&p, SIGTERM), 0);
	assert_true(read_line(&p, line, sizeof(line), 1000));
	assert_string_equal(line, "deregistered 0\n");
	close(p.out);
	took = wait_member(view, "polite", false, 2000);
	printf("terminated node left the view %lld ms after its exit\n",
	       (long long)took);
	assert_true(took >= 0 && took < 1000);
	kvs_cluster_view_close(view);
}

/* SIGSTOP: the node stops renewing and leaves when its lease expires;
 * SIGCONT: it finds the lease gone and registers again. */
static void test_node_paused(void **state)
{
	struct kvs_cluster_view *view = view_of("c8");
	struct node_process p;
	int64_t took;

	node_start(&p, view, "c8", "sleepy", "127.0.0.1:7008");
	kill(p.pid, SIGSTOP);
	took = wait_member(view, "sleepy", false, TTL_S * 1000 + SLACK_MS);
	printf("stopped node left the view %lld ms after SIGSTOP\n",
	       (long long)took);
	assert_true(took >= 0);
	kill(p.pid, SIGCONT);
	took = wait_member(view, "sleepy", true, TTL_S * 1000 + SLACK_MS);
	printf("node back in the view %lld ms after SIGCONT\n",
	       (long long)took);
	assert_true(took >= 0);
	assert_int_equal(node_signal(&p, SIGTERM), 0);
	close(p.out);
	assert_true(wait_member(view, "sleepy", false, 2000) >= 0);
	kvs_cluster_view_close(view);
}

/* etcd killed: errors within deadlines, the view keeps its members and
 * says UNREACHABLE; restarted with its data: both recover, and the watch
 * resumes (a node registered afterwards shows up). */
static void test_etcd_outage(void **state)
{
	struct kvs_cluster_config c = config_of("c6");
	struct kvs_cluster_view *view = view_of("c6"), *none;
	struct kvs_cluster_node *node = node_up("c6", "n1", "127.0.0.1:7006");
	struct kvs_cluster_node_info info = { .id = "n9",
					      .address = "127.0.0.1:7099",
					      .ttl_s = TTL_S };
	struct kvs_cluster_node *refused, *later;
	struct kvs_cluster_view_stats st;
	struct kvs_cluster_node_stats ns;
	struct kvs_cluster_members *before, *during;
	int64_t t0, took;

	assert_true(wait_member(view, "n1", true, 2000) >= 0);
	before = kvs_cluster_view_members(view);

	test_etcd_kill(&server);
	took = wait_view_state(view, KVS_CLUSTER_UNREACHABLE, 3000);
	printf("view UNREACHABLE %lld ms after etcd was killed\n",
	       (long long)took);
	assert_true(took >= 0);
	took = wait_node_state(node, KVS_CLUSTER_UNREACHABLE, 0,
			       TTL_S * 1000 / 3 + TIMEOUT_MS + SLACK_MS);
	printf("node UNREACHABLE %lld ms after etcd was killed\n",
	       (long long)took);
	assert_true(took >= 0);
	/* the last members stay */
	during = kvs_cluster_view_members(view);
	assert_true(kvs_cluster_members_generation(during) ==
		    kvs_cluster_members_generation(before));
	assert_int_equal(kvs_cluster_members_find(during, "n1"), 0);
	kvs_cluster_members_release(during);
	kvs_cluster_view_stats(view, &st);
	assert_int_equal(st.members, 1);
	assert_true(st.unreachable_ms > 0);
	/* new callers get errors, within their deadlines */
	t0 = kvs_cluster_now_ms();
	assert_true(kvs_cluster_view_open(&c, &none) < 0);
	assert_true(kvs_cluster_node_register(&c, &info, &refused) < 0);
	assert_true(kvs_cluster_now_ms() - t0 <= 2 * TIMEOUT_MS + SLACK_MS);

	assert_int_equal(test_etcd_restart(&server, false), 0);
	took = wait_view_state(view, KVS_CLUSTER_CONNECTED, 5000);
	printf("view CONNECTED %lld ms after etcd answered again\n",
	       (long long)took);
	assert_true(took >= 0);
	assert_true(wait_node_state(node, KVS_CLUSTER_CONNECTED, 1, 5000) >= 0);
	/* etcd kept the lease: no new registration was needed */
	kvs_cluster_node_stats(node, &ns);
	assert_int_equal(ns.registrations, 1);
	assert_true(has(view, "n1"));
	later = node_up("c6", "n2", "127.0.0.1:7016");
	assert_true(wait_member(view, "n2", true, 2000) >= 0);
	kvs_cluster_view_stats(view, &st);
	assert_true(st.reconnects >= 1);
	assert_int_equal(st.state, KVS_CLUSTER_CONNECTED);

	kvs_cluster_node_deregister(later);
	kvs_cluster_node_deregister(node);
	assert_true(wait_member(view, "n1", false, 2000) >= 0);
	kvs_cluster_members_release(before);
	kvs_cluster_view_close(view);
}

/* etcd restarted from empty data: the node finds its lease gone and
 * registers again; the view sees etcd's history start over and reads
 * the members again. */
static void test_etcd_data_loss(void **state)
{
	struct kvs_cluster_view *view = view_of("c7");
	struct kvs_cluster_node *node = node_up("c7", "n1", "127.0.0.1:7007");
	struct kvs_cluster_node_stats ns;
	struct kvs_cluster_view_stats st;
	bool back = false;
	int64_t took;

	assert_true(wait_member(view, "n1", true, 2000) >= 0);
	assert_int_equal(test_etcd_restart(&server, true), 0);
	took = wait_node_state(node, KVS_CLUSTER_CONNECTED, 2,
			       TTL_S * 1000 + SLACK_MS);
	printf("node registered again %lld ms after etcd restarted empty\n",
	       (long long)took);
	assert_true(took >= 0);
	kvs_cluster_node_stats(node, &ns);
	assert_int_equal(ns.registrations, 2);
	took = wait_view_state(view, KVS_CLUSTER_CONNECTED, 5000);
	assert_true(took >= 0);
	/* n1 is back, under the new lease */
	for (int64_t t0 = kvs_cluster_now_ms(); !back; usleep(20 * 1000)) {
		struct kvs_cluster_members *m = kvs_cluster_view_members(view);
		long i = kvs_cluster_members_find(m, "n1");

		back = i >= 0 &&
		       kvs_cluster_members_get(m, (size_t)i)->lease == ns.lease;
		kvs_cluster_members_release(m);
		if (kvs_cluster_now_ms() - t0 > 5000)
			break;
	}
	assert_true(back);
	kvs_cluster_view_stats(view, &st);
	assert_true(st.resyncs >= 1);
	assert_int_equal(kvs_cluster_node_deregister(node), 0);
	assert_true(wait_member(view, "n1", false, 2000) >= 0);
	kvs_cluster_view_close(view);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_register_and_view),
		cmocka_unit_test(test_same_id),
		cmocka_unit_test(test_bad_input),
		cmocka_unit_test(test_lease_expiry),
		cmocka_unit_test(test_sigterm_revokes),
		cmocka_unit_test(test_node_paused),
		cmocka_unit_test(test_etcd_outage),
		cmocka_unit_test(test_etcd_data_loss),
	};

	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
