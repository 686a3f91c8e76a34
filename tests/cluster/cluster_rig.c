/*
 * cluster_rig.c - the cluster of the service tests (cluster_rig.h).
 *
 * Namespaces: node i lives in "kvsclu<pid>-<i>" at 10.<a>.0.<i+2>,
 * linked by a veth pair to a bridge of this namespace, "kcb<pid>", at
 * 10.<a>.0.1, its default route (one subnet on one interface here: UCX
 * reaches a peer from whichever of its interfaces it likes, and each
 * must be answerable).  etcd also serves on 10.<a>.0.1.  Namespaces and
 * bridges left by a test that died are removed by the next run (their
 * pid is gone).  Commands run through the shell with their
 * output in the test's directory (rig.log).
 */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <setjmp.h>
#include <stddef.h>
#include <cmocka.h>

#include "cluster_rig.h"
#include "kvstash/error.h"

#define NS_PREFIX "kvsclu"

static char rig_log[600];

/* Runs a shell command (output to the rig's log); its exit status. */
static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...)
{
	char cmd[2000], line[1200];
	va_list ap;
	int rc;

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	snprintf(cmd, sizeof(cmd), "%s >>'%s' 2>&1", line,
		 rig_log[0] ? rig_log : "/dev/null");
	rc = system(cmd);
	return rc == -1 ? -1 : WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

/* Namespaces (or, @bridge, bridges) of earlier runs whose process is
 * gone. */
static void remove_stale(const char *dir, const char *prefix, bool bridge)
{
	DIR *d = opendir(dir);
	struct dirent *e;

	if (!d)
		return;
	while ((e = readdir(d))) {
		long pid;

		if (strncmp(e->d_name, prefix, strlen(prefix)) != 0)
			continue;
		pid = strtol(e->d_name + strlen(prefix), NULL, 10);
		if (pid <= 0 || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
			continue;
		if (bridge)
			sh("ip link del %s", e->d_name);
		else
			sh("ip netns del %s", e->d_name);
	}
	closedir(d);
}

static void give_up(struct rig *r, const char *why)
{
	printf("%s: test skipped\n", why);
	fflush(stdout);
	rig_down(r);
	exit(77);
}

/* The impairment of node @i's link, both ways. */
static void impair(struct rig *r, int i)
{
	const char *bpf = getenv("KVS_TEST_LOSS_BPF");
	char vh[32];

	snprintf(vh, sizeof(vh), "kc%dh%d", (int)(getpid() % 100000), i);
	if (sh("tc qdisc add dev %s root netem delay 20ms loss 5%%", vh) == 0 &&
	    sh("ip netns exec %s tc qdisc add dev kc%dn%d root netem delay "
	       "20ms loss 5%%",
	       r->ns[i], (int)(getpid() % 100000), i) == 0) {
		snprintf(r->impaired, sizeof(r->impaired),
			 "node %d: tc netem 20 ms delay, 5%% loss each way", i);
		return;
	}
	if (bpf && access(bpf, R_OK) == 0 &&
	    sh("tc qdisc add dev %s clsact && tc filter add dev %s egress "
	       "bpf da obj '%s' sec tc",
	       vh, vh, bpf) == 0 &&
	    sh("ip netns exec %s sh -c \"tc qdisc add dev kc%dn%d clsact && "
	       "tc filter add dev kc%dn%d egress bpf da obj '%s' sec tc\"",
	       r->ns[i], (int)(getpid() % 100000), i, (int)(getpid() % 100000),
	       i, bpf) == 0) {
		snprintf(r->impaired, sizeof(r->impaired),
			 "node %d: 5%% loss each way by a tc eBPF program "
			 "(this kernel has no netem: no added delay)",
			 i);
		return;
	}
	snprintf(r->impaired, sizeof(r->impaired),
		 "none (this kernel has neither netem nor tc eBPF)");
}

/* The bridge the nodes' veth pairs hang on. */
static bool make_bridge(struct rig *r)
{
	int pid = (int)(getpid() % 100000), a = 100 + (int)(getpid() % 100);

	snprintf(r->bridge, sizeof(r->bridge), "kcb%d", pid);
	if (sh("ip link add %s type bridge", r->bridge))
		return false;
	r->has_bridge = true;
	for (int i = 0; i < RIG_NODES_MAX; i++)
		snprintf(r->host_ip[i], sizeof(r->host_ip[i]), "10.%d.0.1", a);
	return sh("ip addr add %s/24 dev %s && ip link set %s up",
		  r->host_ip[0], r->bridge, r->bridge) == 0;
}

/* Node @i's namespace and veth pair; false if they cannot be made. */
static bool make_namespace(struct rig *r, int i)
{
	int pid = (int)(getpid() % 100000), a = 100 + (int)(getpid() % 100);

	snprintf(r->ns[i], sizeof(r->ns[i]), NS_PREFIX "%d-%d", (int)getpid(),
		 i);
	snprintf(r->node_ip[i], sizeof(r->node_ip[i]), "10.%d.0.%d", a, i + 2);
	if (sh("ip netns add %s", r->ns[i]))
		return false;
	r->n_ns = i + 1;
	return sh("ip link add kc%dh%d type veth peer name kc%dn%d", pid, i,
		  pid, i) == 0 &&
	       sh("ip link set kc%dn%d netns %s", pid, i, r->ns[i]) == 0 &&
	       sh("ip link set kc%dh%d master %s && ip link set kc%dh%d up",
		  pid, i, r->bridge, pid, i) == 0 &&
	       sh("ip netns exec %s sh -c \"ip addr add %s/24 dev kc%dn%d && "
		  "ip link set kc%dn%d up && ip link set lo up && "
		  "ip route add default via %s\"",
		  r->ns[i], r->node_ip[i], pid, i, pid, i, r->host_ip[i]) == 0;
}

unsigned rig_ttl_s(const struct rig *r)
{
	/* twice a node timeout (calls time out on a stopped node before it
	 * leaves), and more than a loaded 2-core machine stalls etcd or a
	 * node for; an impaired link loses keepalives now and then */
	return r->netns ? 6 : 5;
}

void rig_node_start(struct rig *r, int i)
{
	char ttl[16];
	const char *extra[] = {
		"--etcd",      r->etcd_of[i], "--cluster",
		r->cluster,    "--node-id",   r->id[i],
		"--lease-ttl", ttl,	      "--etcd-timeout-ms",
		"1000",	       "--log-level", "info",
		NULL
	};

	snprintf(ttl, sizeof(ttl), "%u", rig_ttl_s(r));
	daemon_start(&r->node[i], extra);
}

void rig_up(struct rig *r, const char *name, int n, bool netns, int impaired)
{
	char hosts[200] = "";

	memset(r, 0, sizeof(*r));
	r->netns = netns;
	snprintf(r->cluster, sizeof(r->cluster), "%s-%d", name, (int)getpid());
	snprintf(r->impaired, sizeof(r->impaired), "none");
	if (test_etcd_binary() == NULL)
		give_up(r, "etcd not installed (etcd-server)");
	/* the nodes' stores in memory (buffered, as the store falls back to
	 * where O_DIRECT is refused): a disk that other jobs keep busy
	 * would stall writes past the client's timeouts */
	if (access("/dev/shm", W_OK) == 0)
		setenv("KVS_TEST_DIR", "/dev/shm", 1);
	for (int i = 0; i < n; i++) {
		char what[32];

		snprintf(what, sizeof(what), "%s-n%d", name, i);
		daemon_prepare(&r->node[i], what);
		snprintf(r->id[i], sizeof(r->id[i]), "n%d", i);
	}
	snprintf(rig_log, sizeof(rig_log), "%s/rig.log", r->node[0].dir);
	if (netns) {
		if (geteuid() != 0)
			give_up(r, "network namespaces need root");
		remove_stale("/run/netns", NS_PREFIX, false);
		remove_stale("/sys/class/net", "kcb", true);
		if (!make_bridge(r))
			give_up(r, "ip link: cannot make a bridge here");
		for (int i = 0; i < n; i++)
			if (!make_namespace(r, i))
				give_up(r, "ip netns: cannot make a network "
					   "namespace with a veth pair here");
		snprintf(hosts, sizeof(hosts), "%s", r->host_ip[0]);
		if (impaired >= 0)
			impair(r, impaired);
		printf("namespaces: %d nodes behind veth pairs; impaired: %s\n",
		       n, r->impaired);
	}
	assert_int_equal(test_etcd_start_on(&r->etcd, hosts), 0);
	for (int i = 0; i < n; i++) {
		if (netns) {
			snprintf(r->etcd_of[i], sizeof(r->etcd_of[i]),
				 "http://%s:%d", r->host_ip[i],
				 r->etcd.client_port);
			r->node[i].netns = r->ns[i];
			r->node[i].host = r->node_ip[i];
		} else {
			snprintf(r->etcd_of[i], sizeof(r->etcd_of[i]), "%s",
				 r->etcd.endpoint);
		}
		rig_node_start(r, i);
	}
}

void rig_down(struct rig *r)
{
	/* (the directories, the log's among them, go below) */
	rig_log[0] = '\0';
	for (int i = 0; i < RIG_NODES_MAX; i++)
		if (r->node[i].dir[0]) {
			/* a stopped node must go on to die */
			if (r->node[i].pid > 0)
				kill(r->node[i].pid, SIGCONT);
			daemon_cleanup(&r->node[i]);
		}
	test_etcd_destroy(&r->etcd);
	for (int i = 0; i < r->n_ns; i++)
		sh("ip netns del %s", r->ns[i]);
	r->n_ns = 0;
	if (r->has_bridge)
		sh("ip link del %s", r->bridge);
	r->has_bridge = false;
}

void rig_client_opts(struct rig *r, unsigned replicas, uint32_t node_timeout_ms,
		     uint32_t timeout_ms, struct kvs_client_cluster_opts *o)
{
	kvs_client_cluster_opts_default(o);
	o->etcd = r->etcd.endpoint;
	o->cluster = r->cluster;
	o->key_file = key_path(&r->node[0], "alice");
	o->replicas = replicas;
	o->node_timeout_ms = node_timeout_ms;
	o->timeout_ms = timeout_ms;
	o->backoff_ms = 2000;
	o->etcd_timeout_ms = 1000;
}

struct kvs_client *rig_connect(struct rig *r,
			       const struct kvs_client_cluster_opts *o)
{
	struct kvs_client *c = NULL;
	int err = kvs_client_connect_cluster(o, &c);

	if (err)
		fail_msg("connect to cluster %s: %s", r->cluster,
			 kvs_strerror(err));
	return c;
}

struct kvs_client *rig_client(struct rig *r, unsigned replicas,
			      uint32_t node_timeout_ms, uint32_t timeout_ms)
{
	struct kvs_client_cluster_opts o;

	rig_client_opts(r, replicas, node_timeout_ms, timeout_ms, &o);
	return rig_connect(r, &o);
}

static bool has_member(struct kvs_client *c, const char *id)
{
	struct kvs_client_node *nodes;
	size_t n;
	bool found = false;

	if (kvs_client_nodes(c, false, &nodes, &n))
		return false;
	for (size_t i = 0; i < n; i++)
		found |= strcmp(nodes[i].id, id) == 0;
	free(nodes);
	return found;
}

long rig_wait_members(struct kvs_client *c, size_t n, const char *id,
		      bool present, int timeout_ms)
{
	uint64_t t0 = ms_now();

	for (;;) {
		struct kvs_client_membership m;

		kvs_client_membership(c, &m);
		if (m.members == n && (!id || has_member(c, id) == present))
			return (long)(ms_now() - t0);
		if (ms_now() - t0 > (uint64_t)timeout_ms)
			return -1;
		usleep(20000);
	}
}

/* ---- blocks and load ------------------------------------------------- */

void pool_make(struct pool *p, size_t n, uint64_t seed)
{
	p->n = n;
	p->obj = calloc(n, sizeof(*p->obj));
	p->len = calloc(n, sizeof(*p->len));
	p->key = calloc(n, sizeof(*p->key));
	assert_non_null(p->obj);
	assert_non_null(p->len);
	assert_non_null(p->key);
	for (size_t i = 0; i < n; i++)
		p->obj[i] =
			make_block(seed + i, 0, 1, 128, &p->len[i], &p->key[i]);
}

void pool_free(struct pool *p)
{
	for (size_t i = 0; i < p->n; i++)
		free(p->obj[i]);
	free(p->obj);
	free(p->len);
	free(p->key);
	memset(p, 0, sizeof(*p));
}

void load_init(struct load *l, struct kvs_client *c, struct pool *p,
	       unsigned replicas, uint32_t timeout_ms)
{
	memset(l, 0, sizeof(*l));
	l->c = c;
	l->pool = p;
	l->replicas = replicas;
	l->timeout_ms = timeout_ms;
	l->acked = calloc(p->n, sizeof(*l->acked));
	assert_non_null(l->acked);
	pthread_mutex_init(&l->lock, NULL);
}

/* A call that took @ms: counted, and against the timeout. */
static void note_call(struct load_stats *st, uint64_t ms, uint32_t timeout_ms)
{
	st->calls++;
	if (ms > st->max_call_ms)
		st->max_call_ms = ms;
	/* slack: the scheduling of a loaded 2-core machine */
	if (ms > timeout_ms + 1000ull)
		st->overran++;
}

/* Gets pool blocks @idx[0 .. n) and checks them against the pool. */
static void get_and_check(struct load *l, const uint32_t *idx, size_t n,
			  struct load_stats *st)
{
	struct kvs_store_key keys[64];
	void *bufs[64];
	size_t caps[64], lens[64];
	int res[64], err;
	uint64_t t0 = ms_now();

	for (size_t k = 0; k < n; k++) {
		keys[k] = l->pool->key[idx[k]];
		caps[k] = l->pool->len[idx[k]] + 4096;
		bufs[k] = malloc(caps[k]);
		assert_non_null(bufs[k]);
	}
	err = kvs_client_get(l->c, keys, n, bufs, caps, lens, res);
	note_call(st, ms_now() - t0, l->timeout_ms);
	for (size_t k = 0; k < n; k++) {
		int r = err ? err : res[k];

		if (r == 0 &&
		    (lens[k] != l->pool->len[idx[k]] ||
		     memcmp(bufs[k], l->pool->obj[idx[k]], lens[k]) != 0))
			st->wrong++;
		else if (r == 0)
			st->gets_ok++;
		else if (r == -KVS_ENOTFOUND && st->gets_missed < 8)
			st->missed[st->gets_missed++] = idx[k];
		else if (r == -KVS_ENOTFOUND)
			st->gets_missed++;
		else
			st->gets_failed++, st->last_error = r;
		free(bufs[k]);
	}
}

static void *load_main(void *arg)
{
	struct load *l = arg;
	unsigned seed = (unsigned)(uintptr_t)pthread_self();

	for (;;) {
		struct load_stats st = { 0 };
		uint32_t idx[8];
		size_t first, n = 0;
		bool stop;

		pthread_mutex_lock(&l->lock);
		stop = l->stop;
		first = l->next;
		if (first + 4 <= l->pool->n)
			l->next += 4;
		pthread_mutex_unlock(&l->lock);
		if (stop)
			break;
		if (first + 4 <= l->pool->n) {
			int res[4], err;
			uint64_t t0 = ms_now();

			err = kvs_client_put_replicas(
				l->c,
				(const uint8_t *const *)&l->pool->obj[first],
				&l->pool->len[first], 4, KVS_DURABILITY_WRITTEN,
				l->replicas, res);
			note_call(&st, ms_now() - t0, l->timeout_ms);
			pthread_mutex_lock(&l->lock);
			for (size_t k = 0; k < 4; k++) {
				if (err || res[k]) {
					st.puts_failed++;
					st.last_error = err ? err : res[k];
					continue;
				}
				st.puts_ok++;
				l->acked[l->n_acked++] = (uint32_t)(first + k);
			}
			pthread_mutex_unlock(&l->lock);
		}
		pthread_mutex_lock(&l->lock);
		for (; l->n_acked && n < 8; n++)
			idx[n] = l->acked[(size_t)rand_r(&seed) % l->n_acked];
		pthread_mutex_unlock(&l->lock);
		if (n)
			get_and_check(l, idx, n, &st);
		pthread_mutex_lock(&l->lock);
		l->st.puts_ok += st.puts_ok;
		l->st.puts_failed += st.puts_failed;
		l->st.gets_ok += st.gets_ok;
		l->st.gets_failed += st.gets_failed;
		for (uint64_t k = 0; k < st.gets_missed; k++)
			if (l->st.gets_missed + k < 8)
				l->st.missed[l->st.gets_missed + k] =
					st.missed[k];
		l->st.gets_missed += st.gets_missed;
		l->st.wrong += st.wrong;
		l->st.calls += st.calls;
		l->st.overran += st.overran;
		if (st.max_call_ms > l->st.max_call_ms)
			l->st.max_call_ms = st.max_call_ms;
		if (st.last_error)
			l->st.last_error = st.last_error;
		pthread_mutex_unlock(&l->lock);
		usleep(10000); /* room for the daemons on 2 cores */
	}
	return NULL;
}

void load_start(struct load *l)
{
	pthread_mutex_lock(&l->lock);
	l->stop = false;
	memset(&l->st, 0, sizeof(l->st));
	pthread_mutex_unlock(&l->lock);
	l->threads = 2;
	for (int i = 0; i < l->threads; i++)
		assert_int_equal(
			pthread_create(&l->thread[i], NULL, load_main, l), 0);
}

void load_stop(struct load *l)
{
	pthread_mutex_lock(&l->lock);
	l->stop = true;
	pthread_mutex_unlock(&l->lock);
	for (int i = 0; i < l->threads; i++)
		pthread_join(l->thread[i], NULL);
	l->threads = 0;
}

void load_check_all(struct load *l, struct load_stats *st)
{
	memset(st, 0, sizeof(*st));
	for (size_t at = 0; at < l->n_acked; at += 64) {
		size_t n = l->n_acked - at < 64 ? l->n_acked - at : 64;

		get_and_check(l, l->acked + at, n, st);
	}
}

void load_free(struct load *l)
{
	free(l->acked);
	pthread_mutex_destroy(&l->lock);
}

void load_print(const char *what, const struct load_stats *st)
{
	printf("%s: puts %llu ok, %llu failed; gets %llu ok, %llu missed, "
	       "%llu failed, %llu wrong; %llu calls, longest %llu ms, %llu "
	       "over the timeout%s%s\n",
	       what, (unsigned long long)st->puts_ok,
	       (unsigned long long)st->puts_failed,
	       (unsigned long long)st->gets_ok,
	       (unsigned long long)st->gets_missed,
	       (unsigned long long)st->gets_failed,
	       (unsigned long long)st->wrong, (unsigned long long)st->calls,
	       (unsigned long long)st->max_call_ms,
	       (unsigned long long)st->overran,
	       st->last_error ? "; last error: " : "",
	       st->last_error ? kvs_strerror(st->last_error) : "");
	fflush(stdout);
}
