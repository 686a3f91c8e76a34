/*
 * cli_kvs.h - what the commands of `kvstash` (tools/, bench/src/, demo/)
 * share beyond cli_util.h's argument and output plumbing: a store's
 * pinning and counters (cli_store.c) and a client connection
 * (cli_client.c, where the build has the client).
 */
#ifndef KVSTASH_TOOLS_CLI_KVS_H
#define KVSTASH_TOOLS_CLI_KVS_H

#include <stdbool.h>
#include <stdint.h>

struct kvs_cli_json;
struct kvs_client;
struct kvs_store_opts;
struct kvs_store_stats;

/* Pins the store's DRAM arena for CUDA copies where a GPU is usable. */
void kvs_cli_store_pinning(struct kvs_store_opts *o);

/* The members of `store stat --json` (tiers and counters, with the
 * counters' @scope), inside an object already begun. */
void kvs_cli_store_stats_json(struct kvs_cli_json *j,
			      const struct kvs_store_stats *st,
			      const char *scope);

/* Connects to @server with the key in @key_file (a @timeout_ms of 0: the
 * client's default): 0 and *@out (kvs_client_close it), or the error
 * after one line saying why. */
int kvs_cli_client_connect(const char *cmd, const char *server,
			   const char *key_file, uint32_t timeout_ms,
			   bool shared_memory, struct kvs_client **out);

#endif
