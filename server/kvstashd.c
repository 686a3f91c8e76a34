/*
 * kvstashd.c - the kvstash daemon: a store directory served over UCX
 * (include/kvstash/server.h).  This file is the thin layer around the
 * server: flags and a configuration file, the tenants' keys, signals
 * (SIGTERM/SIGINT: drain and exit 0; SIGHUP: reopen the log file) and
 * the log (one line per event on stderr, or --log-file).
 *
 * The configuration file holds "name = value" lines whose names are the
 * long flags ("listen = 127.0.0.1:7070", "dram-capacity = 1G"), '#'
 * starts a comment; a flag given on the command line wins over the file.
 *
 * The key file holds one tenant a line: "TENANT HEXKEY", or a bare
 * "HEXKEY" for the tenant "default".  --namespace TENANT=NS[,...] binds a
 * tenant to a namespace (default: the tenant's own name).
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli_util.h"
#include "common/clock.h"
#include "kvstash/log.h"
#include "kvstash/store.h"
#include "kvstash/server.h"
#include "kvstashd_cluster.h"
#include "transport/keyfile.h"
#include "transport/ucx.h"

#define MAX_TENANTS 256
#define N_OPTS 30

static const char usage[] =
	"usage: kvstashd --listen HOST:PORT --dir DIR --auth-key-file FILE\n"
	"                [--metrics HOST:PORT] [--config FILE]\n"
	"                [--dram-capacity BYTES] [--nvme-capacity BYTES]\n"
	"                [--segment-size BYTES] [--durability memory|written|"
	"durable]\n"
	"                [--eviction prefix|s3fifo|lru]\n"
	"                [--namespace TENANT=NS[,TENANT=NS...]]\n"
	"                [--max-batch N] [--max-object BYTES] "
	"[--max-payload BYTES]\n"
	"                [--max-inflight N] [--max-connections N]\n"
	"                [--tail-capacity BYTES] [--tail-max-ttl-ms N]\n"
	"                [--log-level error|warn|info|debug] [--log-file "
	"FILE]\n"
	"                [--ready-file FILE] [--shared-memory]\n"
	"                [--etcd http://HOST:PORT[,...] --cluster NAME "
	"--node-id ID\n"
	"                 [--advertise HOST:PORT] [--advertise-capacity "
	"BYTES]\n"
	"                 [--lease-ttl S] [--etcd-timeout-ms N]]\n"
	"\n"
	"Serves the store in DIR (created if missing) to kvstash clients.\n"
	"Port 0 picks a free port; the line 'kvstashd: listening on ...' and\n"
	"--ready-file (\"PORT METRICS_PORT\") tell which.  SIGTERM drains and\n"
	"exits 0; SIGHUP reopens --log-file.  --shared-memory lets clients of\n"
	"this host use UCX's shared-memory transports (faster; a client\n"
	"killed while it sends can stall them: see docs/PROTOCOL.md).\n"
	"With --etcd the node joins cluster NAME (docs/CLUSTER.md): it\n"
	"registers ID with the listen address (or --advertise) and the\n"
	"store's capacity under a lease of --lease-ttl seconds (10), serves\n"
	"while etcd is away and registers once it answers; SIGTERM leaves\n"
	"the cluster before draining.\n"
	"--eviction picks the DRAM tier's policy: prefix (the default,\n"
	"prefix-aware and adaptive), s3fifo or lru (store/README.md).\n";

struct daemon_args {
	const char *listen, *dir, *key_file, *metrics, *config, *durability;
	const char *eviction;
	const char *namespaces, *log_level, *log_file, *ready_file;
	const char *etcd, *cluster, *node_id, *advertise;
	uint64_t dram, nvme, segment, max_object, max_payload, tail_capacity;
	uint64_t advertise_capacity;
	uint32_t max_batch, max_inflight, max_conns, tail_ttl;
	uint32_t lease_ttl, etcd_timeout_ms;
	bool shared_memory;
	enum kvs_store_eviction policy; /* --eviction, parsed */
};

static struct kvs_server *the_server;
/* with --etcd: SIGTERM leaves the cluster first, then stops the server */
static struct kvsd_cluster *the_cluster;

/* The store's DRAM arena, as its registration option hands it over:
 * mapped with the server's UCX context once the server exists. */
struct arena {
	void *base;
	size_t len;
};

static int note_arena(void *ctx, void *base, size_t len, bool unregister)
{
	struct arena *a = ctx;

	a->base = unregister ? NULL : base;
	a->len = unregister ? 0 : len;
	return 0;
}
static volatile sig_atomic_t reopen_log;
static const char *log_path;

/* when the first stop signal came (clock_gettime is async-signal-safe) */
static volatile uint64_t stop_signal_ns;

static void on_signal(int sig)
{
	if (sig == SIGHUP) {
		reopen_log = 1;
		return;
	}
	if (!stop_signal_ns)
		stop_signal_ns = kvs_now_ns();
	if (the_cluster)
		kvsd_cluster_leave(the_cluster);
	else if (the_server)
		kvs_server_stop(the_server);
}

static void tick(void *arg)
{
	if (!reopen_log || !log_path)
		return;
	reopen_log = 0;
	if (!freopen(log_path, "a", stderr))
		return; /* nowhere left to say so */
	setvbuf(stderr, NULL, _IOLBF, 0);
	fprintf(stderr, "kvstashd: log reopened\n");
}

static void opts_table(struct daemon_args *a, struct kvs_cli_opt *o)
{
	struct kvs_cli_opt t[N_OPTS] = {
		KVS_OPT_STR("listen", &a->listen, false),
		KVS_OPT_STR("dir", &a->dir, false),
		KVS_OPT_STR("auth-key-file", &a->key_file, false),
		KVS_OPT_STR("metrics", &a->metrics, false),
		KVS_OPT_STR("config", &a->config, false),
		KVS_OPT_SIZE("dram-capacity", &a->dram, 0, 0, false),
		KVS_OPT_SIZE("nvme-capacity", &a->nvme, 0, 0, false),
		KVS_OPT_SIZE("segment-size", &a->segment, 256u << 10, 1u << 30,
			     false),
		KVS_OPT_STR("durability", &a->durability, false),
		KVS_OPT_STR("eviction", &a->eviction, false),
		KVS_OPT_STR("namespace", &a->namespaces, false),
		KVS_OPT_U32("max-batch", &a->max_batch, 1, 508, false),
		KVS_OPT_SIZE("max-object", &a->max_object, 4096, 1u << 30,
			     false),
		KVS_OPT_SIZE("max-payload", &a->max_payload, 4096, 1ull << 34,
			     false),
		KVS_OPT_U32("max-inflight", &a->max_inflight, 1, 65536, false),
		KVS_OPT_U32("max-connections", &a->max_conns, 1, 1u << 20,
			    false),
		KVS_OPT_SIZE("tail-capacity", &a->tail_capacity, 0, 0, false),
		KVS_OPT_U32("tail-max-ttl-ms", &a->tail_ttl, 1, 86400000,
			    false),
		KVS_OPT_STR("log-level", &a->log_level, false),
		KVS_OPT_STR("log-file", &a->log_file, false),
		KVS_OPT_STR("ready-file", &a->ready_file, false),
		KVS_OPT_FLAG("shared-memory", &a->shared_memory),
		KVS_OPT_STR("etcd", &a->etcd, false),
		KVS_OPT_STR("cluster", &a->cluster, false),
		KVS_OPT_STR("node-id", &a->node_id, false),
		KVS_OPT_STR("advertise", &a->advertise, false),
		KVS_OPT_SIZE("advertise-capacity", &a->advertise_capacity, 1,
			     INT64_MAX, false),
		KVS_OPT_U32("lease-ttl", &a->lease_ttl, 1, 3600, false),
		KVS_OPT_U32("etcd-timeout-ms", &a->etcd_timeout_ms, 1, 600000,
			    false),
	};

	memcpy(o, t, sizeof(t));
}

/* The config file as "--name=value" words, appended to @words. */
static int config_words(const char *path, char ***words, int *n)
{
	FILE *f = fopen(path, "r");
	char line[1024];
	int lineno = 0;

	if (!f) {
		kvs_cli_error("kvstashd", "%s: %s", path, strerror(errno));
		return -errno;
	}
	while (fgets(line, sizeof(line), f)) {
		char *p = line, *eq, *end, *key, *val, *w, **grown;

		lineno++;
		p[strcspn(p, "#\r\n")] = '\0';
		while (*p == ' ' || *p == '\t')
			p++;
		if (*p == '\0')
			continue;
		eq = strchr(p, '=');
		if (!eq) {
			kvs_cli_error("kvstashd",
				      "%s:%d: expected 'name = value'", path,
				      lineno);
			fclose(f);
			return -KVS_EPARAM;
		}
		key = p;
		for (end = eq;
		     end > key && (end[-1] == ' ' || end[-1] == '\t');)
			*--end = '\0';
		*eq = '\0';
		val = eq + 1;
		while (*val == ' ' || *val == '\t')
			val++;
		for (end = val + strlen(val);
		     end > val && (end[-1] == ' ' || end[-1] == '\t');)
			*--end = '\0';
		w = malloc(strlen(key) + strlen(val) + 4);
		grown = realloc(*words, (size_t)(*n + 2) * sizeof(char *));
		if (!w || !grown) {
			free(w);
			fclose(f);
			return -ENOMEM;
		}
		*words = grown;
		sprintf(w, "--%s=%s", key, val);
		(*words)[(*n)++] = w;
	}
	fclose(f);
	return 0;
}

/* Options from the config file for those the command line lacks. */
static int apply_config(struct daemon_args *a, struct kvs_cli_opt *cli)
{
	struct kvs_cli_opt o[N_OPTS];
	union {
		uint64_t u;
		const char *s;
		bool b;
	} scratch[N_OPTS];
	char **words = calloc(1, sizeof(char *));
	int n = 1, err;

	if (!words)
		return -ENOMEM;
	words[0] = "kvstashd";
	err = config_words(a->config, &words, &n);
	opts_table(a, o);
	for (int i = 0; i < N_OPTS && o[i].name; i++)
		if (cli[i].seen) /* the command line's value stays */
			o[i].value = &scratch[i];
	if (!err)
		err = kvs_cli_parse("kvstashd", n, words, o, N_OPTS, NULL, 0,
				    NULL);
	/* the words stay: the string values point into them */
	return err;
}

static int parse_durability(const char *s, enum kvs_durability *out)
{
	static const char *const names[] = { "memory", "written", "durable" };

	for (int i = 0; i < 3; i++)
		if (strcmp(s, names[i]) == 0) {
			*out = (enum kvs_durability)i;
			return 0;
		}
	kvs_cli_error("kvstashd",
		      "--durability: '%s' is not memory, "
		      "written or durable",
		      s);
	return -KVS_EPARAM;
}

static int parse_log_level(const char *s)
{
	static const char *const names[] = { "error", "warn", "info", "debug" };

	for (int i = 0; i < 4; i++)
		if (strcmp(s, names[i]) == 0) {
			kvs_log_set_level((enum kvs_log_level)i);
			return 0;
		}
	kvs_cli_error("kvstashd",
		      "--log-level: '%s' is not error, warn, info "
		      "or debug",
		      s);
	return -KVS_EPARAM;
}

static int write_ready(const char *path, int port, int mport)
{
	char tmp[4096];
	FILE *f;

	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	f = fopen(tmp, "w");
	if (!f)
		return -errno;
	fprintf(f, "%d %d\n", port, mport);
	if (fclose(f) || rename(tmp, path))
		return -errno;
	return 0;
}

/*
 * The address the node registers: --advertise, else the listen address
 * with the port the listener got (port 0 picks one).  A wildcard host
 * cannot be reached as such: --advertise must say where.
 */
static int advertised(const struct daemon_args *a, int port, char *out,
		      size_t size)
{
	const char *colon = strrchr(a->listen, ':');
	int hlen = colon ? (int)(colon - a->listen) : 0;

	if (a->advertise) {
		snprintf(out, size, "%s", a->advertise);
		return 0;
	}
	if (hlen == 0 || strncmp(a->listen, "0.0.0.0:", 8) == 0 ||
	    strncmp(a->listen, "[::]:", 5) == 0) {
		kvs_cli_error("kvstashd",
			      "--listen %s is no address clients can reach: "
			      "give --advertise HOST:PORT",
			      a->listen);
		return -KVS_EPARAM;
	}
	snprintf(out, size, "%.*s:%d", hlen, a->listen, port);
	return 0;
}

/* Joins the cluster of --etcd (the daemon's capacity by default). */
static int join_cluster(const struct daemon_args *a, struct kvs_store *store)
{
	struct kvsd_cluster_args ca = {
		.etcd = a->etcd,
		.cluster = a->cluster,
		.node_id = a->node_id,
		.ttl_s = a->lease_ttl,
		.timeout_ms = a->etcd_timeout_ms,
		.capacity = a->advertise_capacity,
	};
	char address[300];
	int err;

	err = advertised(a, kvs_server_port(the_server, 0), address,
			 sizeof(address));
	if (err)
		return err;
	if (!ca.capacity) {
		struct kvs_store_stats st;

		kvs_store_stats_get(store, &st);
		ca.capacity = st.dram.capacity + st.nvme.capacity;
	}
	ca.address = address;
	err = kvsd_cluster_start(&ca, the_server, &the_cluster);
	if (err)
		fprintf(stderr, "kvstashd: cluster %s: %s\n", a->cluster,
			kvs_strerror(err));
	return err;
}

static int setup(struct daemon_args *a, struct kvs_server_opts *so,
		 struct kvs_server_tenant *tenants, size_t *n_tenants)
{
	int err;

	if (!a->listen || !a->dir || !a->key_file) {
		kvs_cli_error("kvstashd", "--%s is required",
			      !a->listen ? "listen"
			      : !a->dir	 ? "dir"
					 : "auth-key-file");
		return -KVS_EPARAM;
	}
	if ((a->cluster || a->node_id || a->advertise) && !a->etcd) {
		kvs_cli_error("kvstashd", "--%s needs --etcd",
			      a->cluster   ? "cluster"
			      : a->node_id ? "node-id"
					   : "advertise");
		return -KVS_EPARAM;
	}
	if (a->etcd && (!a->cluster || !a->node_id)) {
		kvs_cli_error("kvstashd", "--etcd needs --%s",
			      !a->cluster ? "cluster" : "node-id");
		return -KVS_EPARAM;
	}
	if (a->log_level && parse_log_level(a->log_level))
		return -KVS_EPARAM;
	else if (!a->log_level)
		kvs_log_set_level(KVS_LOG_INFO);
	if (a->durability &&
	    parse_durability(a->durability, &so->min_durability))
		return -KVS_EPARAM;
	if (a->eviction && kvs_store_eviction_parse(a->eviction, &a->policy)) {
		kvs_cli_error("kvstashd",
			      "--eviction: '%s' is not prefix, s3fifo or lru",
			      a->eviction);
		return -KVS_EPARAM;
	}
	err = kvs_keyfile_read_tenants(a->key_file, tenants, MAX_TENANTS,
				       n_tenants);
	if (err) {
		kvs_cli_error("kvstashd", "%s: %s", a->key_file,
			      kvs_strerror(err));
		return err;
	}
	if (a->namespaces) {
		err = kvs_keyfile_bind_namespaces(a->namespaces, tenants,
						  *n_tenants);
		if (err) {
			kvs_cli_error("kvstashd",
				      "--namespace: '%s': expected "
				      "TENANT=NS for known tenants",
				      a->namespaces);
			return err;
		}
	}
	so->listen = a->listen;
	so->metrics = a->metrics;
	so->tenants = tenants;
	so->n_tenants = *n_tenants;
	so->max_batch = a->max_batch;
	so->max_object = (uint32_t)a->max_object;
	so->max_payload = a->max_payload;
	so->max_inflight = a->max_inflight;
	so->max_connections = a->max_conns;
	so->tail_capacity = a->tail_capacity;
	so->tail_max_ttl_ms = a->tail_ttl;
	so->tick = tick;
	so->shared_memory = a->shared_memory;
	return 0;
}

int main(int argc, char **argv)
{
	static struct kvs_server_tenant tenants[MAX_TENANTS];
	struct daemon_args a = { 0 };
	struct kvs_cli_opt o[N_OPTS];
	struct kvs_server_opts so = { 0 };
	struct kvs_store_opts sto;
	struct kvs_store *store = NULL;
	struct sigaction sa = { .sa_handler = on_signal };
	struct arena arena = { 0 };
	struct kvsd_cluster *cluster;
	size_t n_tenants = 0;
	int rc, err, cerr;
	uint64_t t_close;

	kvs_ucx_listener_defaults();
	opts_table(&a, o);
	rc = kvs_cli_parse("kvstashd", argc, argv, o, N_OPTS, NULL, 0, NULL);
	if (rc)
		return kvs_cli_usage("kvstashd", usage, rc);
	if (a.config && apply_config(&a, o))
		return KVS_EXIT_USAGE;
	if (setup(&a, &so, tenants, &n_tenants))
		return KVS_EXIT_USAGE;
	if (a.log_file) {
		log_path = a.log_file;
		if (!freopen(log_path, "a", stderr))
			return KVS_EXIT_FAIL;
		setvbuf(stderr, NULL, _IOLBF, 0);
	}
	kvs_store_opts_default(&sto);
	if (a.dram)
		sto.dram_capacity = a.dram;
	if (a.nvme)
		sto.nvme_capacity = a.nvme;
	sto.segment_size = a.segment;
	sto.eviction = a.policy;
	sto.write_through = so.min_durability > KVS_DURABILITY_MEMORY;
	sto.register_arena = note_arena;
	sto.register_ctx = &arena;
	err = kvs_store_open(a.dir, &sto, &store);
	if (err) {
		fprintf(stderr, "kvstashd: %s: %s\n", a.dir, kvs_strerror(err));
		return KVS_EXIT_FAIL;
	}
	so.store = store;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	err = kvs_server_create(&so, &the_server);
	if (err) {
		fprintf(stderr, "kvstashd: %s: %s\n", a.listen,
			kvs_strerror(err));
		kvs_store_close(store);
		return KVS_EXIT_FAIL;
	}
	if (arena.base)
		kvs_server_map_arena(the_server, arena.base, arena.len);
	fprintf(stderr, "kvstashd: listening on %s (port %d)", a.listen,
		kvs_server_port(the_server, 0));
	if (a.metrics)
		fprintf(stderr, ", metrics on port %d",
			kvs_server_port(the_server, 1));
	fprintf(stderr, ", %zu tenants, store %s\n", n_tenants, a.dir);
	if (a.etcd && join_cluster(&a, store)) {
		kvs_server_destroy(the_server);
		kvs_store_close(store);
		return KVS_EXIT_FAIL;
	}
	if (a.ready_file)
		write_ready(a.ready_file, kvs_server_port(the_server, 0),
			    kvs_server_port(the_server, 1));
	err = kvs_server_run(the_server);
	/* leaves the cluster (if the server stopped by itself) */
	cluster = the_cluster;
	the_cluster = NULL;
	kvsd_cluster_stop(cluster);
	kvs_server_destroy(the_server);
	the_server = NULL;
	t_close = kvs_now_ns();
	cerr = kvs_store_close(store);
	kvs_log(KVS_LOG_INFO, "kvstashd: store closed in %llu ms",
		(unsigned long long)((kvs_now_ns() - t_close) / 1000000));
	if (cerr) {
		fprintf(stderr, "kvstashd: closing the store: %s\n",
			kvs_strerror(cerr));
		if (!err)
			err = cerr;
	}
	if (stop_signal_ns)
		kvs_log(KVS_LOG_INFO, "kvstashd: %llu ms since the signal",
			(unsigned long long)((kvs_now_ns() - stop_signal_ns) /
					     1000000));
	fprintf(stderr, "kvstashd: stopped%s%s\n", err ? ": " : "",
		err ? kvs_strerror(err) : "");
	return err ? KVS_EXIT_FAIL : KVS_EXIT_OK;
}
