/*
 * cuda_check.h - CK(call): a CUDA runtime call in the bench probes
 * (merge_floor.cu, wgmma_probe.cu, ring_probe.cu), which print the error
 * with its place and exit: they are programs run by hand, not library
 * code.
 */
#ifndef KVS_BENCH_CUDA_CHECK_H
#define KVS_BENCH_CUDA_CHECK_H

#include <cstdio>
#include <cstdlib>

#include <cuda_runtime.h>

#define CK(x)                                                              \
	do {                                                               \
		cudaError_t e_ = (x);                                      \
		if (e_ != cudaSuccess) {                                   \
			fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, \
				cudaGetErrorString(e_));                   \
			exit(1);                                           \
		}                                                          \
	} while (0)

#endif
