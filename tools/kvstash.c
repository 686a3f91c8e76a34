/*
 * kvstash.c - entry point of the `kvstash` command line: a table from the
 * first word to the subcommand that handles the rest.  Every command runs
 * between kvs_cli_begin() and kvs_cli_end() (cli_util.h), which give it
 * one-line messages and a checked stdout.
 */
#include <stdio.h>
#include <string.h>

#include "cli_util.h"
#include "bench_cmd.h"
#include "cmd.h"
#include "demo_cmd.h"
#include "kvs_config.h"

struct command {
	const char *name;
	int (*run)(int argc, char **argv);
	bool has_subcommands; /* its first word names a subcommand */
	const char *help; /* NULL: not listed (the demo's own processes) */
};

static const char bench_usage[] =
	"usage: kvstash bench format [options]   (kvstash bench format "
	"--help)\n"
	"       kvstash bench store --dir DIR [options]\n"
	"       kvstash bench trace TRACE [options]\n"
	"       kvstash bench transport|attach --server HOST:PORT "
	"--auth-key-file FILE\n"
	"                                      [options]\n"
	"       kvstash bench cluster --server A,B,C [options]\n"
	"\n"
	"format: pack, unpack and verify on one core beside memcpy.\n"
	"store: the store engine's DRAM and NVMe throughput and recovery.\n"
	"trace: a serving trace replayed through the store beside an LRU,\n"
	"       2-bit against fp16 (docs/REPLAY.md).\n"
	"transport: a kvstashd's get/put throughput and lookup latency.\n"
	"cluster: the same against 1, 2, ... nodes as a cluster.\n"
	"attach: a cached prefix made ready to decode from a kvstashd,\n"
	"        2-bit blocks against fp16 K/V.\n";

static int cmd_bench(int argc, char **argv)
{
	if (argc >= 2 && strcmp(argv[1], "format") == 0)
		return kvs_bench_format(argc - 1, argv + 1);
	if (argc >= 2 && strcmp(argv[1], "store") == 0)
		return kvs_bench_store(argc - 1, argv + 1);
	if (argc >= 2 && strcmp(argv[1], "trace") == 0)
		return kvs_bench_trace(argc - 1, argv + 1);
#if KVS_HAVE_UCX
	if (argc >= 2 && strcmp(argv[1], "transport") == 0)
		return kvs_bench_transport(argc - 1, argv + 1);
	if (argc >= 2 && strcmp(argv[1], "cluster") == 0)
		return kvs_bench_cluster(argc - 1, argv + 1);
#endif
#if KVS_DEMO_FULL
	if (argc >= 2 && strcmp(argv[1], "attach") == 0)
		return kvs_bench_attach(argc - 1, argv + 1);
#endif
	if (argc >= 2 &&
	    (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0))
		return kvs_cli_usage("bench", bench_usage, KVS_CLI_HELP);
	if (argc >= 2)
		return kvs_cli_usage_error("bench", "unknown benchmark '%s'",
					   argv[1]);
	return kvs_cli_usage_error("bench",
				   "which benchmark? format, store, "
				   "trace, transport, cluster or attach");
}

static const struct command commands[] = {
	{ "block", kvs_cmd_block, true,
	  "pack, unpack, inspect and verify blocks" },
	{ "trace", kvs_cmd_trace, false, "residual lengths per decode step" },
	{ "memory", kvs_cmd_memory, false,
	  "the memory formula beside format bytes" },
	{ "demo", kvs_cmd_demo, false,
	  "the system on one machine: daemon, prefill, decode" },
	{ "store", kvs_cmd_store, true,
	  "put/get/stat/fsck on a store directory" },
	{ "bench", cmd_bench, true,
	  "benchmarks: format, store, trace, transport, cluster, attach" },
#if KVS_DEMO_FULL
	{ "demo-node", kvs_cmd_demo_node, false, NULL },
#endif
};

static void usage(void)
{
	printf("usage: kvstash <command> [options]\n"
	       "       kvstash --version\n\ncommands:\n");
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		if (commands[i].help)
			printf("  %-8s %s\n", commands[i].name,
			       commands[i].help);
	printf("\n'kvstash <command> --help' describes each.  Exit status: 0 "
	       "ok, 1 failure,\n2 usage error, 3 not found.\n");
}

/* The name messages use: "store put" for a command with subcommands. */
static void command_name(const struct command *c, int argc, char **argv,
			 char *out, size_t size)
{
	if (c->has_subcommands && argc >= 3 && argv[2][0] != '-')
		snprintf(out, size, "%s %s", c->name, argv[2]);
	else
		snprintf(out, size, "%s", c->name);
}

int main(int argc, char **argv)
{
	char name[64];

	if (argc < 2) {
		kvs_cli_begin("");
		return kvs_cli_end(kvs_cli_usage_error(NULL,
						       "which command? "
						       "(kvstash --help lists "
						       "them)"));
	}
#if KVS_HAVE_UCX
	if (strncmp(argv[1], "--server", 8) == 0 ||
	    strncmp(argv[1], "--auth-key-file", 15) == 0 ||
	    strncmp(argv[1], "--etcd", 6) == 0 ||
	    strncmp(argv[1], "--cluster", 9) == 0) {
		kvs_cli_begin("remote");
		return kvs_cli_end(kvs_cmd_remote(argc, argv));
	}
#endif
	if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
		kvs_cli_begin("");
		usage();
		return kvs_cli_end(KVS_EXIT_OK);
	}
	if (strcmp(argv[1], "--version") == 0) {
		kvs_cli_begin("");
		printf("kvstash %s\n", KVS_VERSION);
		return kvs_cli_end(KVS_EXIT_OK);
	}
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
		if (strcmp(argv[1], commands[i].name) != 0)
			continue;
		command_name(&commands[i], argc, argv, name, sizeof(name));
		kvs_cli_begin(name);
		return kvs_cli_end(commands[i].run(argc - 1, argv + 1));
	}
	kvs_cli_begin("");
	return kvs_cli_end(
		kvs_cli_usage_error(NULL, "unknown command '%s'", argv[1]));
}
