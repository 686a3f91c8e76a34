/*
 * merge_floor.cu - what a second, dependent kernel costs after a grid like
 * the fused attention's at small batch (a diagnostic, not a comparison).
 *
 * A grid of 384 CTAs of 128 threads, three an SM (their shared memory), each
 * busy for SPIN ns by %globaltimer and then writing a 528-byte partial per
 * head of 4; alone, or followed by a merge-like kernel of 32 CTAs that
 * waits for it (griddepcontrol.wait), loads 48 partials per head in one
 * round trip, folds them, meets its warps in shared memory and stores --
 * launched as a programmatic dependent (the attention kernel lets it in at
 * its top, as attn_kernel does) or plainly, with its CTAs able to share the
 * SMs with the grid or not (40 KB of shared memory each).  CUDA graphs of
 * 10 calls, medians of 50 replays; prints the time per call and what the
 * merge adds: the floor beside the merge-and-launch time of
 * attn_trace.py's timelines.  Built by bench/meson.build
 * (build-dir/bench/merge_floor), or by hand:
 *
 *     nvcc -O2 -arch=sm_90 -o /tmp/merge_floor bench/merge_floor.cu
 *     /tmp/merge_floor
 */
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <cuda_runtime.h>

#include "cuda_check.h"

#define CTAS 384
#define HEADS 4
#define PITCH 132                       /* floats a partial, as D + 4 */
#define SPLITS 48
#define GRID_SMEM (70 * 1024)           /* three CTAs an SM */

static __device__ __forceinline__ unsigned long long now_ns(void)
{
	unsigned long long t;

	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

__global__ void __launch_bounds__(128) busy_grid(float *ws, int spin,
						 int let_in)
{
	extern __shared__ float sm[];
	const unsigned long long t0 = now_ns();
	float x = threadIdx.x;

	if (let_in)
		asm volatile("griddepcontrol.launch_dependents;");
	while (now_ns() - t0 < (unsigned long long)spin)
		x = x * 0.999f + 1.0f;
	sm[threadIdx.x] = x;
	__syncthreads();
	for (int i = threadIdx.x; i < HEADS * PITCH; i += 128)
		ws[(size_t)blockIdx.x * HEADS * PITCH + i] = sm[i & 127];
}

/* CTA = head; warp w takes splits w, w + 4, ... in one round trip */
__global__ void merge(const float *ws, float *out, int wait)
{
	__shared__ float red[4][128];
	const int h = blockIdx.x, lane = threadIdx.x & 31;
	const int w = threadIdx.x >> 5;
	float acc[4] = { 0, 0, 0, 0 }, m = 0, v[16][4];

	if (wait)
		asm volatile("griddepcontrol.wait;" ::: "memory");
#pragma unroll
	for (int u = 0; u < 16; u++) {
		const int s = w + 4 * u;
		const float *r = ws + ((size_t)s * HEADS + h % HEADS) * PITCH;

#pragma unroll
		for (int j = 0; j < 4; j++)
			v[u][j] = s < SPLITS ? r[lane + 32 * j] : 0.0f;
	}
#pragma unroll
	for (int u = 0; u < 16; u++) {
		m += v[u][0];
#pragma unroll
		for (int j = 0; j < 4; j++)
			acc[j] = fmaf(0.5f, v[u][j], acc[j]);
	}
#pragma unroll
	for (int j = 0; j < 4; j++)
		red[w][lane + 32 * j] = acc[j] + m;
	__syncthreads();
	if (w == 0)
		for (int j = 0; j < 4; j++) {
			const int c = lane + 32 * j;

			out[h * 128 + c] = red[0][c] + red[1][c] + red[2][c] +
					   red[3][c];
		}
}

/* Microseconds a call: 0 the grid alone, 1 + merge (PDL), 2 + merge */
static float per_call(int mode, int spin, int merge_smem, float *ws,
		      float *out, cudaStream_t st)
{
	cudaGraph_t g;
	cudaGraphExec_t ge;
	cudaEvent_t e0, e1;
	std::vector<float> t;

	CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
	for (int c = 0; c < 10; c++) {
		busy_grid<<<CTAS, 128, GRID_SMEM, st>>>(ws, spin, mode == 1);
		if (!mode)
			continue;
		cudaLaunchConfig_t cfg = {};
		cudaLaunchAttribute at[1];

		at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
		at[0].val.programmaticStreamSerializationAllowed = 1;
		cfg.gridDim = dim3(32);
		cfg.blockDim = dim3(128);
		cfg.dynamicSmemBytes = merge_smem;
		cfg.stream = st;
		cfg.attrs = at;
		cfg.numAttrs = mode == 1 ? 1 : 0;
		CK(cudaLaunchKernelEx(&cfg, merge, (const float *)ws, out,
				      mode == 1 ? 1 : 0));
	}
	CK(cudaStreamEndCapture(st, &g));
	CK(cudaGraphInstantiate(&ge, g, 0));
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	for (int r = 0; r < 60; r++) {
		float ms;

		CK(cudaEventRecord(e0, st));
		CK(cudaGraphLaunch(ge, st));
		CK(cudaEventRecord(e1, st));
		CK(cudaEventSynchronize(e1));
		CK(cudaEventElapsedTime(&ms, e0, e1));
		if (r >= 10)
			t.push_back(ms * 1000.0f / 10);
	}
	std::sort(t.begin(), t.end());
	cudaEventDestroy(e0);
	cudaEventDestroy(e1);
	cudaGraphExecDestroy(ge);
	cudaGraphDestroy(g);
	return t[t.size() / 2];
}

int main(void)
{
	float *ws, *out;
	cudaStream_t st;
	int occ = 0;

	CK(cudaMalloc(&ws, sizeof(float) * CTAS * HEADS * PITCH));
	CK(cudaMalloc(&out, sizeof(float) * 32 * 128));
	CK(cudaStreamCreate(&st));
	CK(cudaFuncSetAttribute(busy_grid,
				cudaFuncAttributeMaxDynamicSharedMemorySize,
				GRID_SMEM));
	CK(cudaFuncSetAttribute(merge,
				cudaFuncAttributeMaxDynamicSharedMemorySize,
				40 * 1024));
	CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, busy_grid, 128,
							 GRID_SMEM));
	printf("grid: %d CTAs, %d an SM\n", CTAS, occ);
	for (int msm : { 0, 40 * 1024 })
		for (int spin : { 0, 10000 })
			for (int pass = 0; pass < 2; pass++) {
				const float a = per_call(0, spin, msm, ws, out,
							 st);
				const float p = per_call(1, spin, msm, ws, out,
							 st);
				const float n = per_call(2, spin, msm, ws, out,
							 st);

				printf("merge smem %5d B, busy %5d ns: grid "
				       "alone %.2f us, + merge (PDL) %.2f "
				       "(+%.2f), + merge (plain) %.2f "
				       "(+%.2f)\n", msm, spin, a, p, p - a, n,
				       n - a);
			}
	return 0;
}
