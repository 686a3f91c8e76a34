/*
 * common.cuh - what every kernel family shares: the CUDA error check that
 * turns a cudaError_t into -KVS_ECUDA (logged once, at the boundary),
 * element loads and stores by kvs_dtype, metadata rounding, and the device
 * view of a block's canonical layout.
 */
#ifndef KVS_KERNELS_COMMON_CUH
#define KVS_KERNELS_COMMON_CUH

#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <stdint.h>

#include "kvstash/error.h"
#include "kvstash/kernels.h"
#include "kvstash/log.h"

/* Logs a failed CUDA call with its site and evaluates to -KVS_ECUDA, or 0. */
static inline int kvs_cuda_err(cudaError_t e, const char *what,
			       const char *file, int line)
{
	if (e == cudaSuccess)
		return 0;
	kvs_log(KVS_LOG_ERR, "cuda: %s failed at %s:%d: %s", what, file, line,
		cudaGetErrorString(e));
	return -KVS_ECUDA;
}
#define KVS_CUDA_CHECK(call) kvs_cuda_err((call), #call, __FILE__, __LINE__)

/* Section offsets of one block image, as kvs_block_layout() gives them. */
struct dev_layout {
	uint32_t off[KVS_BLOCK_SECTIONS];
};

/* Fills @out from @shape; 0 or -KVS_EPARAM. */
int kvs_cuda_layout(const struct kvs_shape *shape, struct dev_layout *out,
		    uint32_t *total);

/* launch.cu: answers kept per thread and kernel. */
/* Streaming multiprocessors of the current device; 0 on failure (logged). */
int kvs_cuda_sm_count(void);
/* Lets @fn use @smem bytes of dynamic shared memory (needed above 48 KB);
 * 0 or -KVS_ECUDA. */
int kvs_cuda_grant_smem(const void *fn, size_t smem);
/* CTAs of @fn (@threads threads, @smem dynamic shared memory, granted
 * here) resident on the whole device at once; 0 on failure (logged). */
int kvs_cuda_resident_ctas(const void *fn, int threads, size_t smem);
/* Dynamic shared memory a CTA may be granted at most; 0 on failure. */
size_t kvs_cuda_smem_optin(void);
/* @cfg (its one attribute in @attr) for a launch of @fn in clusters of
 * @size CTAs of @threads threads and @smem dynamic shared memory, one
 * cluster (the caller sets the grid and stream); grants the memory and,
 * above 8, the non-portable size.  0 or -KVS_ECUDA. */
int kvs_cuda_cluster_config(const void *fn, int size, int threads,
			    size_t smem, cudaLaunchConfig_t *cfg,
			    cudaLaunchAttribute *attr);
/* Clusters of @size CTAs of @fn (@threads threads, @smem dynamic shared
 * memory, granted here) resident on the device at once; 0 where none fit
 * or on failure (logged). */
int kvs_cuda_resident_clusters(const void *fn, int threads, size_t smem,
			       int size);

/* Element @i's bits (a float's 32, or 16) and, apart, their value: loads
 * issued through ld_bits() stay in flight together until bits_float()
 * needs them (ld_elem() converts at once, so a loop of them waits for
 * each load in turn). */
__device__ __forceinline__ uint32_t ld_bits(int dt, const void *p, size_t i)
{
	if (dt == KVS_DTYPE_F32)
		return ((const uint32_t *)p)[i];
	return ((const uint16_t *)p)[i];
}

__device__ __forceinline__ float bits_float(int dt, uint32_t x)
{
	if (dt == KVS_DTYPE_F32)
		return __uint_as_float(x);
	if (dt == KVS_DTYPE_F16)
		return __half2float(__ushort_as_half((unsigned short)x));
	return __uint_as_float(x << 16);
}

/* Element @i as a float, loaded and converted at once. */
__device__ __forceinline__ float ld_elem(int dt, const void *p, size_t i)
{
	return bits_float(dt, ld_bits(dt, p, i));
}

__device__ __forceinline__ void st_elem(int dt, void *p, size_t i, float x)
{
	if (dt == KVS_DTYPE_F32)
		((float *)p)[i] = x;
	else if (dt == KVS_DTYPE_F16)
		((__half *)p)[i] = __float2half_rn(x);
	else
		((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(x);
}

/* Round-to-nearest-even into the metadata type, back as float (overflow
 * gives infinity, as kvs_round_to). */
__device__ __forceinline__ float round_meta(int mt, float x)
{
	if (mt == KVS_DTYPE_F16)
		return __half2float(__float2half_rn(x));
	if (mt == KVS_DTYPE_BF16)
		return __bfloat162float(__float2bfloat16_rn(x));
	return x;
}

/* Metadata element @i of type @mt (2 or 4 bytes) at @base. */
__device__ __forceinline__ float ld_meta(int mt, const uint8_t *base, size_t i)
{
	return ld_elem(mt, base, i);
}

static inline size_t kvs_div_up(size_t a, size_t b)
{
	return (a + b - 1) / b;
}

#endif
