/*
 * kvstash.c - entry point of the `kvstash` command line: a table from the
 * first word to the subcommand that handles the rest.
 */
#include <stdio.h>
#include <string.h>

#include "cmd.h"
#include "kvs_config.h"

struct command {
	const char *name;
	int (*run)(int argc, char **argv);
	const char *help;
};

static int cmd_bench(int argc, char **argv)
{
	if (argc >= 2 && strcmp(argv[1], "format") == 0)
		return kvs_bench_format(argc - 1, argv + 1);
	if (argc >= 2 && strcmp(argv[1], "store") == 0)
		return kvs_bench_store(argc - 1, argv + 1);
#if KVS_HAVE_UCX
	if (argc >= 2 && strcmp(argv[1], "transport") == 0)
		return kvs_bench_transport(argc - 1, argv + 1);
#endif
	fprintf(stderr,
		"usage: kvstash bench format|store|transport [options]\n");
	return 2;
}

static const struct command commands[] = {
	{ "block", kvs_cmd_block, "pack, unpack, inspect and verify blocks" },
	{ "trace", kvs_cmd_trace, "residual lengths per decode step" },
	{ "memory", kvs_cmd_memory, "the memory formula beside format bytes" },
	{ "demo", kvs_cmd_demo, "walk-through: pack, verify, unpack, report" },
	{ "store", kvs_cmd_store, "put/get/stat/fsck on a store directory" },
	{ "bench", cmd_bench, "benchmarks: format, store" },
};

static void usage(FILE *f)
{
	fprintf(f, "usage: kvstash <command> [options]\n\ncommands:\n");
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		fprintf(f, "  %-8s %s\n", commands[i].name, commands[i].help);
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
#if KVS_HAVE_UCX
	if (strncmp(argv[1], "--server", 8) == 0 ||
	    strncmp(argv[1], "--auth-key-file", 15) == 0)
		return kvs_cmd_remote(argc, argv);
#endif
	if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
		usage(stdout);
		return 0;
	}
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		if (strcmp(argv[1], commands[i].name) == 0)
			return commands[i].run(argc - 1, argv + 1);
	fprintf(stderr, "kvstash: unknown command '%s'\n", argv[1]);
	usage(stderr);
	return 2;
}
