/*
 * cmd.h - the subcommands of the `kvstash` command line that live in
 * tools/.  Each takes the arguments after its own name (argv[0] is the
 * subcommand name) and returns the process exit status: KVS_EXIT_OK 0,
 * KVS_EXIT_FAIL 1, KVS_EXIT_USAGE 2, KVS_EXIT_NOTFOUND 3 (a miss);
 * conventions in cli/cli_util.h.  The benchmarks' subcommands are
 * bench/src/bench_cmd.h's, the demo's demo/demo_cmd.h's.
 */
#ifndef KVSTASH_TOOLS_CMD_H
#define KVSTASH_TOOLS_CMD_H

int kvs_cmd_block(int argc, char **argv); /* cmd_block.c */
int kvs_cmd_trace(int argc, char **argv); /* cmd_trace.c */
int kvs_cmd_memory(int argc, char **argv); /* cmd_memory.c */
int kvs_cmd_store(int argc, char **argv); /* cmd_store.c */
/* `kvstash --server HOST:PORT ...` (argv[0] is the program) */
int kvs_cmd_remote(int argc, char **argv); /* cmd_remote.c */

#endif
