/*
 * bench_transport.c - `kvstash bench transport --server HOST:PORT
 * --auth-key-file FILE`: the service through libkvstash, with 1 and 8
 * client threads (one connection each):
 *   get and put GB/s of single 96 KiB blocks (one layer of 128 tokens,
 *   8 KV heads, head dim 128, 2-bit, fp16 metadata) and of 3 MiB batches
 *   (32 such blocks a request), every get verified by the client as in
 *   use; puts at memory durability (the network and the DRAM tier, not
 *   the disk);
 *   lookup latency p50/p99 of a 256-block chain.
 * Each phase runs for --seconds.  bench/transport_vs_perftest.sh runs
 * ucx_perftest over the same transport and sizes in the same run and
 * prints the ratios.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_gen.h"
#include "bench_net.h"
#include "cli_util.h"
#include "bench_cmd.h"
#include "kvstash/client.h"

static const char bench_usage[] =
	"usage: kvstash bench transport --server HOST:PORT --auth-key-file "
	"FILE\n"
	"                               [--seconds S] [--threads N] [--json]\n"
	"                               [--window N] [--shared-memory]\n"
	"                               [--only get|get-batch|put|put-batch|"
	"lookup]\n"
	"\n"
	"Puts a 24 MiB working set of 96 KiB blocks (memory durability), "
	"then\n"
	"measures get and put throughput (single blocks and 3 MiB batches) "
	"and\n"
	"the latency of a 256-block chain lookup with 1 and N threads "
	"(default 8).\n"
	"Each thread keeps --window requests in flight (default 8; lookups: "
	"one).\n";

static int connect_client(const struct bench *b, struct kvs_client **out)
{
	struct kvs_client_opts o;

	kvs_client_opts_default(&o);
	o.address = b->server;
	o.key_file = b->key_file;
	o.shared_memory = b->shared_memory;
	return kvs_client_connect(&o, out);
}

int kvs_bench_transport(int argc, char **argv)
{
	struct bench b = { .seconds = 2.0, .window = 8 };
	uint32_t threads_max = 8;
	const char *only = NULL;
	bool json = false;
	struct kvs_cli_opt opts[] = {
		KVS_OPT_STR("server", &b.server, true),
		KVS_OPT_STR("auth-key-file", &b.key_file, true),
		KVS_OPT_DOUBLE("seconds", &b.seconds, false),
		KVS_OPT_U32("threads", &threads_max, 1, 64, false),
		KVS_OPT_STR("only", &only, false),
		KVS_OPT_U32("window", &b.window, 1, 64, false),
		KVS_OPT_FLAG("json", &json),
		KVS_OPT_FLAG("shared-memory", &b.shared_memory),
	};
	struct kvs_client *clients[64] = { NULL };
	struct kvs_cli_json j;
	int rc, err, res[BATCH];
	int counts[2] = { 1, 0 }, n_counts;

	rc = kvs_cli_parse("bench transport", argc, argv, opts,
			   sizeof(opts) / sizeof(opts[0]), NULL, 0, NULL);
	if (rc)
		return kvs_cli_usage("bench transport", bench_usage, rc);
	counts[1] = (int)threads_max;
	n_counts = threads_max > 1 ? 2 : 1; /* --threads 1: one pass */
	err = bench_make_set(&b);
	for (uint32_t i = 0; !err && i < threads_max; i++)
		err = connect_client(&b, &clients[i]);
	/* the working set, in batches */
	for (size_t i = 0; !err && i < SET; i += BATCH)
		err = kvs_client_put(clients[0], &b.ptrs[i], &b.lens[i], BATCH,
				     KVS_DURABILITY_MEMORY, res);
	if (err) {
		kvs_cli_error("bench transport", "%s: %s", b.server,
			      kvs_strerror(err));
		rc = KVS_EXIT_FAIL;
		goto out;
	}
	if (json) {
		kvs_cli_json_init(&j, stdout);
		kvs_cli_json_object_begin(&j, NULL);
		kvs_cli_json_u64(&j, "block_bytes", b.size);
		kvs_cli_json_array_begin(&j, "results");
	} else {
		printf("block: %zu bytes; batch: %d blocks (%.2f MiB)\n",
		       b.size, BATCH, (double)b.size * BATCH / (1 << 20));
	}
	for (int ti = 0; ti < n_counts; ti++) {
		for (int p = GET_ONE; p <= LOOKUP; p++) {
			struct result r = { 0 };

			if (only && strcmp(only, phase_flags[p]) != 0)
				continue;

			if (bench_run_phase(&b, clients, counts[ti],
					    (enum phase)p, &r))
				r.errors = 1;
			if (json) {
				kvs_cli_json_object_begin(&j, NULL);
				kvs_cli_json_str(&j, "phase", phase_names[p]);
				kvs_cli_json_u64(&j, "threads",
						 (uint64_t)counts[ti]);
				kvs_cli_json_double(&j, "gbps", r.gbps);
				kvs_cli_json_double(&j, "ops_per_s",
						    (double)r.ops / b.seconds);
				if (p == LOOKUP) {
					kvs_cli_json_double(&j, "p50_us",
							    r.p50_us);
					kvs_cli_json_double(&j, "p99_us",
							    r.p99_us);
				}
				kvs_cli_json_u64(&j, "errors", r.errors);
				kvs_cli_json_object_end(&j);
			} else if (p == LOOKUP) {
				printf("%-16s %2d threads: p50 %7.1f us, p99 "
				       "%7.1f us (%" PRIu64 " lookups, %" PRIu64
				       " errors)\n",
				       phase_names[p], counts[ti], r.p50_us,
				       r.p99_us, r.ops, r.errors);
			} else {
				printf("%-16s %2d threads: %7.2f GB/s (%" PRIu64
				       " requests, %" PRIu64 " errors)\n",
				       phase_names[p], counts[ti], r.gbps,
				       r.ops, r.errors);
			}
			if (r.errors)
				rc = KVS_EXIT_FAIL;
		}
	}
	if (json) {
		kvs_cli_json_array_end(&j);
		kvs_cli_json_object_end(&j);
		kvs_cli_json_finish(&j);
	}
out:
	for (uint32_t i = 0; i < threads_max; i++)
		kvs_client_close(clients[i]);
	free(b.objs);
	return rc;
}
