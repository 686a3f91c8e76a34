/*
 * bench_cmd.h - the `kvstash bench ...` subcommands (the C side of the
 * benchmarks beside the scripts in bench/), as cmd.h's: the arguments
 * after the subcommand's name in, the exit status out.
 */
#ifndef KVSTASH_BENCH_CMD_H
#define KVSTASH_BENCH_CMD_H

int kvs_bench_format(int argc, char **argv); /* bench_format.c */
int kvs_bench_store(int argc, char **argv); /* bench_store.c */
int kvs_bench_trace(int argc, char **argv); /* bench_trace.c */
/* with the client (UCX) in the build */
int kvs_bench_transport(int argc, char **argv); /* bench_transport.c */
int kvs_bench_cluster(int argc, char **argv); /* bench_cluster.c */
int kvs_bench_attach(int argc, char **argv); /* bench_attach.c */

#endif
