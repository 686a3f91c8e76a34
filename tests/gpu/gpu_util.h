/*
 * gpu_util.h - helpers shared by the GPU tests: skip (exit 77) when no
 * device is usable, the random generator's seed for a run, device
 * buffers that fail the test on error, typed host fills and the relative
 * error of two vectors.  Header-only so each test stays one translation
 * unit.
 */
#ifndef KVS_TESTS_GPU_UTIL_H
#define KVS_TESTS_GPU_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "common/rng.h"
#include "kvstash/kernels.h"
#include "kvstash/kvformat.h"

/* Exits 77 (meson SKIP) with the reason when no CUDA device is usable. */
static inline void gpu_require(void)
{
	int n = 0;
	cudaError_t e = cudaGetDeviceCount(&n);

	if (e != cudaSuccess || n == 0) {
		printf("SKIP: no CUDA device (%s)\n",
		       e != cudaSuccess ? cudaGetErrorString(e) : "count 0");
		exit(77);
	}
}

/* Fresh inputs on every run (common/rng.h's generator); the seed is printed
 * to reproduce a failure (KVS_TEST_SEED overrides it). */
static inline void gpu_rng_init(struct kvs_rng *r)
{
	const char *env = getenv("KVS_TEST_SEED");

	r->state = env ? strtoull(env, NULL, 0) :
			 (uint64_t)time(NULL) * 2654435761u + (uint64_t)clock();
	if (!r->state)
		r->state = 1;
	printf("seed %llu\n", (unsigned long long)r->state);
}

static inline void *gpu_alloc(size_t n)
{
	void *p = NULL;

	if (cudaMalloc(&p, n ? n : 16) != cudaSuccess) {
		fprintf(stderr, "cudaMalloc(%zu) failed\n", n);
		abort();
	}
	return p;
}

static inline void gpu_put(void *dst, const void *src, size_t n)
{
	if (cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice) != cudaSuccess)
		abort();
}

static inline void gpu_get(void *dst, const void *src, size_t n)
{
	if (cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost) != cudaSuccess)
		abort();
}

static inline void *gpu_dup(const void *src, size_t n)
{
	void *d = gpu_alloc(n);

	if (n)
		gpu_put(d, src, n);
	return d;
}

/* Fills a device buffer with NaN bytes so unwritten outputs show. */
static inline void gpu_poison(void *d, size_t n)
{
	if (cudaMemset(d, 0xff, n) != cudaSuccess)
		abort();
}

/* ||a - b|| / ||b|| in double; infinity if any element is not finite. */
static inline double gpu_rel_err(const float *a, const float *b, size_t n)
{
	double num = 0.0, den = 0.0;

	for (size_t i = 0; i < n; i++) {
		if (!isfinite(a[i]))
			return INFINITY;
		num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
		den += (double)b[i] * b[i];
	}
	return den > 0.0 ? sqrt(num / den) : sqrt(num);
}

#endif
