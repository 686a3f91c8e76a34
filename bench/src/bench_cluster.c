/*
 * bench_cluster.c - `kvstash bench cluster --server A --server B ...
 * --auth-key-file FILE`: the cluster client against 1, 2, ... of the
 * given nodes (the first k of the list, placed by rendezvous hashing as
 * a cluster of k), beside the one-server client on the first node, in
 * the same run (bench_net.h's phases):
 *   throughput of 3 MiB get and put batches with N threads (a cluster
 *   client each), every block verified;
 *   p50/p99 of a 256-block chain lookup, one thread, the chain spread
 *   over the k nodes (a one-server client: the server's LOOKUP; a
 *   cluster: per-block presence, batched per node, in parallel).
 * Then the ratios against one node.  bench/cluster_bench.sh starts the
 * nodes on this host and runs it.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "bench_gen.h"
#include "bench_net.h"
#include "cli_util.h"
#include "bench_cmd.h"
#include "kvstash/client.h"

#define NODES_MAX 8
#define THREADS_MAX 64

static const char cluster_usage[] =
	"usage: kvstash bench cluster --server HOST:PORT[,HOST:PORT...] "
	"--auth-key-file FILE\n"
	"                             [--seconds S] [--threads N] [--window N]"
	"\n"
	"                             [--json] [--shared-memory]\n"
	"\n"
	"--server lists the nodes (or is repeated).  For k = 1 .. the number\n"
	"of nodes, a cluster client of the first k puts a 24 MiB working set\n"
	"of 96 KiB blocks (memory durability, one copy), then measures get\n"
	"and put throughput of 3 MiB batches with N threads (default 4) and\n"
	"the latency of a 256-block chain lookup; the one-server client on\n"
	"the first node runs the same first, as the baseline.  Prints each\n"
	"row and the ratios against one node.\n";

static const enum phase phases[] = { GET_BATCH, PUT_BATCH, LOOKUP };

struct row {
	const char *label;
	int nodes;
	struct result r[3];
};

/* The first @k servers of @list ("A,B,C") into @out. */
static void first_servers(const char *list, int k, char *out, size_t size)
{
	size_t len = 0;

	for (int i = 0; i < k && list[len]; i++) {
		len += strcspn(list + len, ",");
		if (i + 1 < k && list[len] == ',')
			len++;
	}
	snprintf(out, size, "%.*s", (int)len, list);
}

static int count_servers(const char *list)
{
	int n = 1;

	for (const char *p = list; *p; p++)
		n += *p == ',';
	return n;
}

/* @threads clients: one-server (@k 0) or a cluster of the first @k. */
static int connect_all(const struct bench *b, const char *list, int k,
		       int threads, struct kvs_client **clients)
{
	char servers[4096];
	int err = 0;

	for (int i = 0; !err && i < threads; i++) {
		if (k == 0) {
			struct kvs_client_opts o;

			kvs_client_opts_default(&o);
			first_servers(list, 1, servers, sizeof(servers));
			o.address = servers;
			o.key_file = b->key_file;
			o.shared_memory = b->shared_memory;
			err = kvs_client_connect(&o, &clients[i]);
		} else {
			struct kvs_client_cluster_opts o;

			kvs_client_cluster_opts_default(&o);
			first_servers(list, k, servers, sizeof(servers));
			o.servers = servers;
			o.key_file = b->key_file;
			o.shared_memory = b->shared_memory;
			err = kvs_client_connect_cluster(&o, &clients[i]);
		}
	}
	return err;
}

/* One row: the working set put, then the phases. */
static int run_row(struct bench *b, const char *list, struct row *row,
		   int threads)
{
	struct kvs_client *clients[THREADS_MAX] = { NULL };
	int res[BATCH], err;

	err = connect_all(b, list, row->nodes, threads, clients);
	for (size_t i = 0; !err && i < SET; i += BATCH) {
		err = kvs_client_put(clients[0], &b->ptrs[i], &b->lens[i],
				     BATCH, KVS_DURABILITY_MEMORY, res);
		for (int k = 0; !err && k < BATCH; k++)
			err = res[k];
	}
	for (int p = 0; !err && p < 3; p++) {
		int n = phases[p] == LOOKUP ? 1 : threads;

		err = bench_run_phase(b, clients, n, phases[p], &row->r[p]);
	}
	for (int i = 0; i < threads; i++)
		kvs_client_close(clients[i]);
	return err;
}

static void print_row(const struct row *row, struct kvs_cli_json *j)
{
	if (j) {
		kvs_cli_json_object_begin(j, NULL);
		kvs_cli_json_str(j, "client", row->label);
		kvs_cli_json_u64(j, "nodes",
				 (uint64_t)(row->nodes ? row->nodes : 1));
		kvs_cli_json_double(j, "get_batch_gbps", row->r[0].gbps);
		kvs_cli_json_double(j, "put_batch_gbps", row->r[1].gbps);
		kvs_cli_json_double(j, "lookup_p50_us", row->r[2].p50_us);
		kvs_cli_json_double(j, "lookup_p99_us", row->r[2].p99_us);
		kvs_cli_json_u64(j, "errors",
				 row->r[0].errors + row->r[1].errors +
					 row->r[2].errors);
		kvs_cli_json_object_end(j);
		return;
	}
	printf("%-22s %6.2f GB/s   %6.2f GB/s   %8.1f us  %8.1f us  %" PRIu64
	       "\n",
	       row->label, row->r[0].gbps, row->r[1].gbps, row->r[2].p50_us,
	       row->r[2].p99_us,
	       row->r[0].errors + row->r[1].errors + row->r[2].errors);
}

int kvs_bench_cluster(int argc, char **argv)
{
	struct bench b = { .seconds = 2.0, .window = 8 };
	uint32_t threads = 4;
	bool json = false;
	struct kvs_cli_opt opts[] = {
		KVS_OPT_STR("auth-key-file", &b.key_file, true),
		KVS_OPT_DOUBLE("seconds", &b.seconds, false),
		KVS_OPT_U32("threads", &threads, 1, THREADS_MAX, false),
		KVS_OPT_U32("window", &b.window, 1, 64, false),
		KVS_OPT_FLAG("json", &json),
		KVS_OPT_FLAG("shared-memory", &b.shared_memory),
	};
	static char labels[NODES_MAX][32];
	struct row rows[NODES_MAX + 1];
	struct kvs_cli_json j;
	char **rest = calloc((size_t)argc + 1, sizeof(*rest));
	char *servers = NULL;
	int rc, err, n_nodes, n_rest;

	if (!rest)
		return KVS_EXIT_FAIL;
	rc = kvs_cli_take_repeated("bench cluster", "server", argc, argv, rest,
				   &n_rest, &servers);
	if (!rc)
		rc = kvs_cli_parse("bench cluster", n_rest, rest, opts,
				   sizeof(opts) / sizeof(opts[0]), NULL, 0,
				   NULL);
	free(rest);
	if (!rc && !servers) {
		kvs_cli_error("bench cluster", "--server is required");
		rc = -KVS_EPARAM;
	}
	if (rc) {
		free(servers);
		return kvs_cli_usage("bench cluster", cluster_usage, rc);
	}
	b.server = servers;
	n_nodes = count_servers(b.server);
	if (n_nodes > NODES_MAX) {
		free(servers);
		return kvs_cli_usage_error("bench cluster",
					   "at most %d servers", NODES_MAX);
	}
	err = bench_make_set(&b);
	if (err) {
		kvs_cli_error("bench cluster", "%s", kvs_strerror(err));
		free(servers);
		return KVS_EXIT_FAIL;
	}
	if (json) {
		kvs_cli_json_init(&j, stdout);
		kvs_cli_json_object_begin(&j, NULL);
		kvs_cli_json_u64(&j, "block_bytes", b.size);
		kvs_cli_json_u64(&j, "threads", threads);
		kvs_cli_json_array_begin(&j, "results");
	} else {
		printf("block: %zu bytes; batch: %d blocks (%.2f MiB); %u "
		       "threads; lookup: %d blocks, one thread\n"
		       "%-22s %11s   %11s   %11s  %11s  errors\n",
		       b.size, BATCH, (double)b.size * BATCH / (1 << 20),
		       threads, CHAIN, "client", "get batch", "put batch",
		       "lookup p50", "lookup p99");
	}
	for (int k = 0; k <= n_nodes; k++) {
		struct row *row = &rows[k];

		memset(row, 0, sizeof(*row));
		row->nodes = k;
		row->label = "one server (direct)";
		if (k > 0) {
			snprintf(labels[k - 1], sizeof(labels[k - 1]),
				 "cluster of %d", k);
			row->label = labels[k - 1];
		}
		err = run_row(&b, b.server, row, (int)threads);
		if (err) {
			kvs_cli_error("bench cluster", "%s: %s", row->label,
				      kvs_strerror(err));
			rc = KVS_EXIT_FAIL;
			break;
		}
		print_row(row, json ? &j : NULL);
		if (row->r[0].errors || row->r[1].errors || row->r[2].errors)
			rc = KVS_EXIT_FAIL;
	}
	if (json) {
		kvs_cli_json_array_end(&j);
		kvs_cli_json_object_end(&j);
		kvs_cli_json_finish(&j);
	} else if (!err && n_nodes > 1) {
		const struct row *one = &rows[1], *all = &rows[n_nodes];

		printf("cluster of %d against 1: get batch x%.2f, put batch "
		       "x%.2f, lookup p99 x%.2f\n",
		       n_nodes, all->r[0].gbps / one->r[0].gbps,
		       all->r[1].gbps / one->r[1].gbps,
		       all->r[2].p99_us / one->r[2].p99_us);
		printf("cluster of 1 against one server (direct): get batch "
		       "x%.2f, put batch x%.2f, lookup p99 x%.2f\n",
		       one->r[0].gbps / rows[0].r[0].gbps,
		       one->r[1].gbps / rows[0].r[1].gbps,
		       one->r[2].p99_us / rows[0].r[2].p99_us);
	}
	free(b.objs);
	free(servers);
	return rc;
}
