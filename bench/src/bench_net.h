/*
 * bench_net.h - what the service benchmarks share (`kvstash bench
 * transport`, `kvstash bench cluster`): a working set of benchmark blocks
 * (bench_gen.h) whose first 256 form a lookup chain, and phases run by
 * client threads, each keeping a window of requests in flight:
 *   get and put of single 96 KiB blocks and of 3 MiB batches (32 blocks
 *   a request), every get verified by the client as in use; puts at
 *   memory durability (the network and the DRAM tier, not the disk);
 *   lookup latency p50/p99 of the 256-block chain (one at a time).
 */
#ifndef KVSTASH_TOOLS_BENCH_NET_H
#define KVSTASH_TOOLS_BENCH_NET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvstash/client.h"

#define BATCH 32
#define CHAIN 256
#define SET 256 /* blocks of the working set (24 MiB) */

struct bench {
	const char *server, *key_file;
	bool shared_memory;
	double seconds;
	unsigned window;
	struct kvs_shape shape;
	size_t size;
	uint8_t *objs; /* SET blocks, size bytes apart */
	const uint8_t *ptrs[SET];
	size_t lens[SET];
	struct kvs_store_key keys[SET];
	uint8_t chain[CHAIN][KVS_ID_SIZE];
};

enum phase {
	GET_ONE,
	GET_BATCH,
	PUT_ONE,
	PUT_BATCH,
	LOOKUP,
};

extern const char *const phase_names[];
extern const char *const phase_flags[];

struct result {
	double gbps, p50_us, p99_us;
	uint64_t ops, errors;
};

/* The working set into b->objs (free() it); 0 or an error. */
int bench_make_set(struct bench *b);

/* Runs @phase for b->seconds on @threads threads, thread i on
 * clients[i]; 0 or -ENOMEM. */
int bench_run_phase(const struct bench *b, struct kvs_client **clients,
		    int threads, enum phase phase, struct result *r);

#endif
