/*
 * cmd.h - the subcommands of the `kvstash` command line.  Each takes the
 * arguments after its own name (argv[0] is the subcommand name) and returns
 * the process exit status: KVS_EXIT_OK 0, KVS_EXIT_FAIL 1, KVS_EXIT_USAGE 2,
 * KVS_EXIT_NOTFOUND 3 (a miss); conventions in cli_util.h.
 */
#ifndef KVSTASH_TOOLS_CMD_H
#define KVSTASH_TOOLS_CMD_H

#include <stdbool.h>
#include <stdint.h>

int kvs_cmd_block(int argc, char **argv); /* cmd_block.c */
int kvs_cmd_trace(int argc, char **argv); /* cmd_trace.c */
int kvs_cmd_memory(int argc, char **argv); /* cmd_memory.c */
/* cmd_demo.c with the daemon (KVS_DEMO_FULL), else demo_block.c */
int kvs_cmd_demo(int argc, char **argv);
int kvs_cmd_demo_node(int argc, char **argv); /* demo_node.c */
int kvs_cmd_store(int argc, char **argv); /* cmd_store.c */
int kvs_bench_format(int argc, char **argv); /* bench_format.c */
int kvs_bench_store(int argc, char **argv); /* bench_store.c */
int kvs_bench_trace(int argc, char **argv); /* bench_trace.c */
struct kvs_store_opts;
struct kvs_cli_json;
struct kvs_store_stats;
/* The members of `store stat --json` (tiers and counters, with the
 * counters' @scope), inside an object already begun (cmd_store.c). */
void kvs_cli_store_stats_json(struct kvs_cli_json *j,
			      const struct kvs_store_stats *st,
			      const char *scope);
/* Pins the store's DRAM arena for CUDA copies where a GPU is usable. */
void kvs_cli_store_pinning(struct kvs_store_opts *o); /* cmd_store.c */
/* `kvstash --server HOST:PORT ...` (argv[0] is the program) */
int kvs_cmd_remote(int argc, char **argv); /* cmd_remote.c */
struct kvs_client;
/* Connects to @server with the key in @key_file (a @timeout_ms of 0: the
 * client's default): 0 and *@out (kvs_client_close it), or the error
 * after one line saying why (cmd_remote.c). */
int kvs_cli_client_connect(const char *cmd, const char *server,
			   const char *key_file, uint32_t timeout_ms,
			   bool shared_memory, struct kvs_client **out);
int kvs_bench_transport(int argc, char **argv); /* bench_transport.c */
int kvs_bench_cluster(int argc, char **argv); /* bench_cluster.c */
int kvs_bench_attach(int argc, char **argv); /* bench_attach.c */

#endif
