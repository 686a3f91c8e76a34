/*
 * seal_common.cuh - what the two seal kernels share: the launch's
 * parameters (seal_params), filled once by kvs_cuda_seal_blocks in
 * seal.cu and passed by value to either kernel.
 */
#ifndef KVS_KERNELS_SEAL_COMMON_CUH
#define KVS_KERNELS_SEAL_COMMON_CUH

#include "common.cuh"

#include <math.h>
#include <string.h>

struct seal_params {
	int heads, D, G, bits, S, meta, in_dtype;
	struct dev_layout lay;
	const void *keys, *values;
	int64_t block_stride, token_stride, head_stride, v_head_stride;
	const void *const *src;
	uint8_t *images;
	uint64_t image_stride;
	const int32_t *dst;
	uint32_t *status;
	uint32_t blocks;
};

#endif /* KVS_KERNELS_SEAL_COMMON_CUH */
