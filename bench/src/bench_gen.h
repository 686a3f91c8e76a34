/*
 * bench_gen.h - what the benchmarks share: the benchmark block (one layer
 * of 128 tokens, 8 KV heads, head dim 128, 2-bit codes, fp16 metadata:
 * 96.5 KiB), quantized once from a fixed pseudo-random K/V and finished
 * per id, and a monotonic clock in seconds.
 */
#ifndef KVSTASH_TOOLS_BENCH_GEN_H
#define KVSTASH_TOOLS_BENCH_GEN_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "kvstash/kvformat.h"

struct kvs_bench_gen {
	struct kvs_shape shape;
	size_t size; /* bytes of one block */
	uint8_t *image; /* quantized once, finished per id (free()) */
};

/* Quantizes the image; 0 or an error (nothing to free then). */
int kvs_bench_gen_init(struct kvs_bench_gen *g);

/* The image finished with @ident into @out (g->size bytes). */
int kvs_bench_gen_finish(const struct kvs_bench_gen *g,
			 const struct kvs_ident *ident, uint8_t *out);

static inline double kvs_bench_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

#endif
