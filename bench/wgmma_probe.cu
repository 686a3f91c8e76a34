/*
 * wgmma_probe.cu - the fast tile's compute with warpgroup MMAs, against
 * the fast tile itself, both without memory traffic (a diagnostic; not a
 * comparison with a baseline).
 *
 * Both kernels run CTAs of 128 threads, four an SM (the 4-CTA build's
 * occupancy), over NT 32-token tiles held in shared memory in the stage
 * layout the cp.async ring writes, cycling through them ITERS times:
 *
 *   fast: attn_tile.cuh's fast_tile() as it is (each warp its own tiles,
 *         mma.sync, its own online softmax), the 4-CTA build's query pairs
 *         reread from shared memory;
 *   wg:   the CTA's four warps on two tiles at once (64 tokens): the Key B
 *         operand of both tiles built by all 128 threads into shared memory
 *         (core-matrix layout, no swizzle), Key logits as eight
 *         wgmma.m64n16k16 with the codes in registers as A (each warp 16
 *         tokens; a tile's rows keep its own 8 columns), one reference max
 *         per head over the warpgroup (the Value accumulators are shared:
 *         a warp holds 16 channels of each half), p * step written as the
 *         Value B operand, eight wgmma.m64n8k16 with the Value codes
 *         (ldmatrix.trans, masked in place) as A.  Three named barriers a
 *         pair.  DEFER: the Value group is waited for only before the next
 *         pair's Key MMAs, so that it runs under the next Key B build.
 *
 * The wg kernel's output (CTA 0, normalised) is checked against a double
 * reference over the NT tiles; the run stops if it is off by more than
 * 1e-3 relative.  Prints tiles a microsecond an SM, medians of RUNS.
 * Built with -DKVS_ATTN_PARTS=mask, both kernels leave out the same parts
 * (attn_probe.cuh's bits: 2 no Key MMAs nor their ANDs, 4 no Value update,
 * 8 no Key B operand nor origin dot) and the check is not run.
 *
 * Built by bench/meson.build (build-dir/bench/wgmma_probe), or by hand
 * from the project root:
 *
 *     nvcc -O2 -std=c++17 -gencode arch=compute_90a,code=sm_90a \
 *          --expt-relaxed-constexpr -Ikernels -Iinclude -I. \
 *          [-DKVS_ATTN_PARTS=mask] -o /tmp/wgmma_probe bench/wgmma_probe.cu
 *     /tmp/wgmma_probe [iters]
 */
#ifndef KVS_ATTN_PARTS
#define KVS_ATTN_PARTS 0
#endif
#include "attn_probe.cuh"
#include "tile_probe.cuh"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cuda_check.h"

#define NT 8                    /* tiles in shared memory, even */
#define TILES_SMEM (NT * TILE_BYTES)
/* wg kernel: Key B (2 tiles x 4 heads x hi/lo = 16 columns, 128 channels)
 * and Value B (2 halves x 64 tokens x 8 columns), fp16, core matrices of
 * 8 rows x 16 bytes; LBO along K, SBO along N */
#define KB_LBO 128
#define KB_SBO 2048
#define VB_LBO 128
#define WG_KB TILES_SMEM
#define WG_VB (WG_KB + 4096)
#define WG_MAX (WG_VB + 2048)           /* [warp][head] floats */
#define WG_OD (WG_MAX + 64)             /* [tile][head] origin dots */
#define WG_RED (WG_OD + 32)             /* [warp][head][5] */
#define WG_SMEM (WG_RED + 4 * 4 * 5 * 4)
/* fast kernel: tiles, then per warp scratch + p, then query pairs */
#define FW_SMEM (SCRATCH_BYTES + HPC * P_PITCH * 4)
#define FAST_SMEM (TILES_SMEM + WARPS * FW_SMEM + WARPS * 32 * 64)

static __device__ __forceinline__ void load_tiles(uint8_t *sm,
						  const uint8_t *g)
{
	for (int i = threadIdx.x; i < TILES_SMEM / 16; i += blockDim.x)
		reinterpret_cast<uint4 *>(sm)[i] =
			reinterpret_cast<const uint4 *>(g)[i];
	__syncthreads();
}

/* ---- the fast tile as it is --------------------------------------- */

__global__ void __launch_bounds__(128, 4)
k_fast(const uint8_t *tiles, const float *q, int iters, float *sink)
{
	extern __shared__ __align__(128) uint8_t sm[];
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	uint8_t *wsm = sm + TILES_SMEM + warp * FW_SMEM;
	uint8_t *scratch = wsm;
	float *p_s = reinterpret_cast<float *>(wsm + SCRATCH_BYTES);
	uint4 *qrow = reinterpret_cast<uint4 *>(sm + TILES_SMEM +
						WARPS * FW_SMEM) +
		      (warp * 32 + lane) * 4;

	load_tiles(sm, tiles);
	key_query kq;
	fast_state st;

	probe_start(q, qrow, lane, kq, st);
	__syncwarp();
	for (int it = 0; it < iters; it++)
		fast_tile<true, true>(sm + ((warp + WARPS * it) % NT) *
				      TILE_BYTES, kq, scratch, p_s, st, lane);
	sink[blockIdx.x * blockDim.x + threadIdx.x] = probe_sum(st);
}

/* ---- the same with warpgroup MMAs --------------------------------- */

static __device__ __forceinline__ uint64_t wg_desc(const void *p,
						   uint32_t lbo, uint32_t sbo)
{
	const uint32_t a = (uint32_t)__cvta_generic_to_shared(p);

	return (uint64_t)((a & 0x3FFFFu) >> 4) |
	       (uint64_t)(lbo >> 4) << 16 | (uint64_t)(sbo >> 4) << 32;
}

static __device__ __forceinline__ void wg_fence(void)
{
	asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}

static __device__ __forceinline__ void wg_commit(void)
{
	asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

static __device__ __forceinline__ void wg_wait0(void)
{
	asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
}

static __device__ __forceinline__ void proxy_fence(void)
{
	asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

static __device__ __forceinline__ void wg_bar(int id)
{
	asm volatile("bar.sync %0, 128;\n" :: "r"(id) : "memory");
}

static __device__ __forceinline__ void wg_k16(float (&d)[8],
					      const uint32_t (&a)[4],
					      uint64_t desc)
{
	asm volatile("wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 "
		     "{%0,%1,%2,%3,%4,%5,%6,%7}, {%8,%9,%10,%11}, %12, 1, "
		     "1, 1, 0;\n"
		     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]),
		       "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
		     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc));
}

static __device__ __forceinline__ void wg_v8(float (&d)[4], uint32_t a0,
					     uint32_t a1, uint32_t a2,
					     uint32_t a3, uint64_t desc)
{
	asm volatile("wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 "
		     "{%0,%1,%2,%3}, {%4,%5,%6,%7}, %8, 1, 1, 1, 0;\n"
		     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
		     : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc));
}

template <bool DEFER>
__global__ void __launch_bounds__(128, 4)
k_wg(const uint8_t *tiles, const float *q, int iters, float *out)
{
	extern __shared__ __align__(128) uint8_t sm[];
	const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
	const int gi = lane >> 2, ti = lane & 3;
	uint8_t *kb = sm + WG_KB, *vb = sm + WG_VB;
	float *wmax = reinterpret_cast<float *>(sm + WG_MAX);
	float *od = reinterpret_cast<float *>(sm + WG_OD);
	float *red = reinterpret_cast<float *>(sm + WG_RED);

	load_tiles(sm, tiles);
	/* the heads' exponents: q' = q 2^(-ex - 2k) in [-1, 1] */
	int *exs = reinterpret_cast<int *>(red);

	if (tid < HPC) {
		float mx = 0.0f;

		for (int c = 0; c < FAST_D; c++)
			mx = fmaxf(mx, fabsf(q[tid * FAST_D + c]));
		exs[tid] = mx > 0.0f ? min(max((int)(__float_as_uint(mx) >>
						     23) - 126, -120), 100) : 0;
	}
	__syncthreads();
	/* Key B role: tile bt of the pair, head bh, unit bu (16 channels),
	 * code positions bs0 .. bs0 + 3: the pairs (16 bu + s, 16 bu + 8 + s) */
	const int bt = warp >> 1, bh = 2 * (warp & 1) + (lane >> 4);
	const int bu = (lane >> 1) & 7, bs0 = 4 * (lane & 1);
	float qf[8];
	uint32_t qh[4], ql[4];

	for (int i = 0; i < 4; i++) {
		const int s = bs0 + i;
		const float f = pow2(-exs[bh] - 2 * (s & 3));

		qf[i] = q[bh * FAST_D + 16 * bu + s];
		qf[4 + i] = q[bh * FAST_D + 16 * bu + 8 + s];
		qh[i] = split2(false, false, qf[i] * f, qf[4 + i] * f);
		ql[i] = split2(false, true, qf[i] * f, qf[4 + i] * f);
	}
	const float ls = pow2(24 + exs[ti]);
	/* Key A: this warp's 16 tokens, rows r0 and r0 + 8 of tile warp / 2 */
	const int kt = warp >> 1, r0 = 16 * (warp & 1) + gi;
	/* Value A: ldmatrix.trans row addresses as value_update() */
	const uint32_t vrow = stage_chunk(2 * ((lane & 7) + (lane & 8)) +
					  ((lane >> 4) & 1));
	const uint32_t vmask = 0x00030003u << (2 * warp);
	float acc[2][4], so[4];
	float m = -INFINITY, l = 0.0f;

	for (int hf = 0; hf < 2; hf++)
		for (int e = 0; e < 4; e++)
			acc[hf][e] = 0.0f;
	for (int g = 0; g < 4; g++)
		so[g] = 0.0f;
	__syncthreads();

	for (int it = 0; it < iters; it++) {
		/* tile j of the pair */
		auto tg = [&](int j) {
			return sm + ((2 * it + j) % NT) * TILE_BYTES;
		};
		/* Key B of tile bt: hi, lo per pair, and the origin dot */
		if (!ATTN_PROBE_OMIT(8) || it == 0) {
			const uint8_t *sg = tg(bt);
			const uint32_t off = 8 * (lane & 1);
			const uint2 s0 = *reinterpret_cast<const uint2 *>(
				sg + T_KS + stage_chunk(2 * bu) + off);
			const uint2 s1 = *reinterpret_cast<const uint2 *>(
				sg + T_KS + stage_chunk(2 * bu + 1) + off);
			const uint2 o0 = *reinterpret_cast<const uint2 *>(
				sg + T_KO + stage_chunk(2 * bu) + off);
			const uint2 o1 = *reinterpret_cast<const uint2 *>(
				sg + T_KO + stage_chunk(2 * bu + 1) + off);
			const float2 f0 = h2f(o0.x), f1 = h2f(o0.y);
			const float2 f2 = h2f(o1.x), f3 = h2f(o1.y);
			float a = qf[0] * f0.x;

			a = fmaf(qf[1], f0.y, a);
			a = fmaf(qf[2], f1.x, a);
			a = fmaf(qf[3], f1.y, a);
			a = fmaf(qf[4], f2.x, a);
			a = fmaf(qf[5], f2.y, a);
			a = fmaf(qf[6], f3.x, a);
			a = fmaf(qf[7], f3.y, a);
#pragma unroll
			for (int i = 0; i < 4; i++) {
				const int s = bs0 + i;
				const uint32_t sp = __byte_perm(
					i < 2 ? s0.x : s0.y,
					i < 2 ? s1.x : s1.y,
					(i & 1) ? 0x7632 : 0x5410);
				uint32_t hi, lo;

				step_split(qh[i], ql[i], sp, hi, lo);
				uint8_t *w = kb + (2 * s + (bu & 1)) * KB_LBO +
					     bt * KB_SBO + 2 * bh * 16 +
					     4 * (bu >> 1);
				*reinterpret_cast<uint32_t *>(w) = hi;
				*reinterpret_cast<uint32_t *>(w + 16) = lo;
			}
			a += __shfl_xor_sync(0xffffffffu, a, 1);
			a += __shfl_xor_sync(0xffffffffu, a, 2);
			a += __shfl_xor_sync(0xffffffffu, a, 4);
			a += __shfl_xor_sync(0xffffffffu, a, 8);
			if ((lane & 15) == 0)
				od[bt * HPC + bh] = a;
		}
		const uint8_t *ka = tg(kt);

		if (DEFER && it > 0)
			wg_wait0();
		proxy_fence();
		wg_bar(1);
		float d[8] = { 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f };

		if (!ATTN_PROBE_OMIT(2)) {
			const uint2 x0 = *reinterpret_cast<const uint2 *>(
				ka + T_KC + r0 * 32 + 8 * ti);
			const uint2 x1 = *reinterpret_cast<const uint2 *>(
				ka + T_KC + (r0 + 8) * 32 + 8 * ti);
			uint32_t ak[8][4];

#pragma unroll
			for (int s = 0; s < 8; s++) {
				ak[s][0] = code_pair<true>(x0.x, x0.x >> 8, s);
				ak[s][1] = code_pair<true>(x1.x, x1.x >> 8, s);
				ak[s][2] = code_pair<true>(x0.y, x0.y >> 8, s);
				ak[s][3] = code_pair<true>(x1.y, x1.y >> 8, s);
			}
			wg_fence();
#pragma unroll
			for (int s = 0; s < 8; s++)
				wg_k16(d, ak[s], wg_desc(kb + s * 2 * KB_LBO,
							 KB_LBO, KB_SBO));
			wg_commit();
			wg_wait0();
		}
		const float aj = od[kt * HPC + ti];
		const float c0 = kt ? d[4] + d[5] : d[0] + d[1];
		const float c1 = kt ? d[6] + d[7] : d[2] + d[3];
		const float lg0 = fmaf(c0, ls, aj), lg1 = fmaf(c1, ls, aj);
		float tmax = fmaxf(lg0, lg1);

		tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 4));
		tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 8));
		tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 16));
		if (gi == 0)
			wmax[warp * HPC + ti] = tmax;
		wg_bar(2);
		const float mx = fmaxf(fmaxf(wmax[ti], wmax[HPC + ti]),
				       fmaxf(wmax[2 * HPC + ti],
					     wmax[3 * HPC + ti]));
		if (mx > m) {
			const float mn = mx + LAZY_HEADROOM;
			const float al = exp2_tile(m - mn);

			l *= al;
			for (int g = 0; g < 4; g++)
				so[g] *= al;
			for (int hf = 0; hf < 2; hf++)
				for (int e = 0; e < 4; e++)
					acc[hf][e] *= al;
			m = mn;
		}
		/* p of this lane's two tokens, their Value B entries (both
		 * halves, both groups of a half) and origin sums */
#pragma unroll
		for (int r = 0; r < 2; r++) {
			const int tok = r0 + 8 * r, T = 32 * kt + tok;
			const float pr = exp2_tile((r ? lg1 : lg0) - m);
			const uint2 vo = *reinterpret_cast<const uint2 *>(
				ka + T_VO + 8 * tok);
			const uint2 vs = *reinterpret_cast<const uint2 *>(
				ka + T_VS + 8 * tok);
			const __half2 p2 = __float2half2_rn(pr);
			const __half2 b01 = __hmul2(p2,
				*reinterpret_cast<const __half2 *>(&vs.x));
			const __half2 b23 = __hmul2(p2,
				*reinterpret_cast<const __half2 *>(&vs.y));
			__half *w = reinterpret_cast<__half *>(
				vb + (T >> 3) * VB_LBO + 2 * ti * 16 +
				(T & 7) * 2);

			if (!ATTN_PROBE_OMIT(4)) {
				w[0] = __low2half(b01);
				w[8] = __high2half(b01);
				w[512] = __low2half(b23);
				w[512 + 8] = __high2half(b23);
			}
			l += pr;
			const float2 o01 = h2f(vo.x), o23 = h2f(vo.y);

			so[0] = fmaf(pr, o01.x, so[0]);
			so[1] = fmaf(pr, o01.y, so[1]);
			so[2] = fmaf(pr, o23.x, so[2]);
			so[3] = fmaf(pr, o23.y, so[3]);
		}
		if (ATTN_PROBE_OMIT(4))
			continue;
		proxy_fence();
		wg_bar(3);
		/* Value: M-block (hf, k = warp) of each half, K = 64 tokens */
		uint32_t av[4][2][4];

#pragma unroll
		for (int ks = 0; ks < 4; ks++) {
			uint32_t rr[4];

			ldsm4<true>(rr, tg(ks >> 1) + T_VC + vrow +
				    512 * (ks & 1));
#pragma unroll
			for (int hf = 0; hf < 2; hf++) {
				av[ks][hf][0] = rr[2 * hf] & vmask;
				av[ks][hf][1] = (rr[2 * hf] >> 8) & vmask;
				av[ks][hf][2] = rr[2 * hf + 1] & vmask;
				av[ks][hf][3] = (rr[2 * hf + 1] >> 8) & vmask;
			}
		}
		wg_fence();
#pragma unroll
		for (int ks = 0; ks < 4; ks++)
#pragma unroll
			for (int hf = 0; hf < 2; hf++)
				wg_v8(acc[hf], av[ks][hf][0], av[ks][hf][1],
				      av[ks][hf][2], av[ks][hf][3],
				      wg_desc(vb + hf * 1024 + ks * 2 * VB_LBO,
					      VB_LBO, 1024));
		wg_commit();
		if (!DEFER)
			wg_wait0();
	}
	if (DEFER)
		wg_wait0();
	/* epilogue: sums over the warpgroup, the normalised output */
	auto col = [](float x) {
		for (int o = 4; o < 32; o <<= 1)
			x += __shfl_xor_sync(0xffffffffu, x, o);
		return x;
	};
	const float lw = col(l);
	float sw[4];

	for (int g = 0; g < 4; g++)
		sw[g] = col(so[g]);
	__syncthreads();
	if (gi == 0) {
		red[(warp * HPC + ti) * 5] = lw;
		for (int g = 0; g < 4; g++)
			red[(warp * HPC + ti) * 5 + 1 + g] = sw[g];
	}
	__syncthreads();
	float lt = 0.0f, ot[4] = { 0.0f, 0.0f, 0.0f, 0.0f };

	for (int w = 0; w < 4; w++) {
		lt += red[(w * HPC + ti) * 5];
		for (int g = 0; g < 4; g++)
			ot[g] += red[(w * HPC + ti) * 5 + 1 + g];
	}
	const int gl = gi >> 2;
	float *o = out + (size_t)blockIdx.x * HPC * FAST_D + ti * FAST_D;

#pragma unroll
	for (int hf = 0; hf < 2; hf++) {
		const float sc = pow2(24 - 2 * warp);
		const float og = gl ? ot[2 * hf + 1] : ot[2 * hf];
		const int ch = 64 * hf + 8 * gi + warp;

		o[ch] = fmaf(gl ? acc[hf][1] : acc[hf][0], sc, og) / lt;
		o[ch + 4] = fmaf(gl ? acc[hf][3] : acc[hf][2], sc, og) / lt;
	}
}

/* ---- host ------------------------------------------------------------ */

static uint16_t f2h(float x)
{
	const __half h = __float2half_rn(x);

	return *reinterpret_cast<const uint16_t *>(&h);
}

static float h2fh(uint16_t x)
{
	return __half2float(*reinterpret_cast<const __half *>(&x));
}

static uint32_t host_chunk(uint32_t j)
{
	return 16 * (j ^ ((j >> 3) & 1));
}

int main(int argc, char **argv)
{
	const int iters = argc > 1 ? atoi(argv[1]) : 4096;
	const int runs = 9;
	int dev = 0, sms = 0;

	CK(cudaGetDevice(&dev));
	CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount,
				  dev));
	srand(7);
	auto uni = []() { return (float)rand() / (float)RAND_MAX; };
	/* logical tiles: codes, fp16 origins and steps */
	std::vector<uint8_t> kc(NT * 32 * 128), vc(NT * 32 * 128);
	std::vector<uint16_t> ko(NT * 128), ks(NT * 128);
	std::vector<uint16_t> vo(NT * 32 * 4), vs(NT * 32 * 4);
	std::vector<float> q(HPC * FAST_D);

	for (auto &c : kc)
		c = rand() & 3;
	for (auto &c : vc)
		c = rand() & 3;
	for (int i = 0; i < NT * 128; i++) {
		const float big = (i % 128) % 17 == 3 ? 8.0f : 1.0f;

		ko[i] = f2h((uni() - 0.5f) * big);
		ks[i] = f2h((0.05f + 0.3f * uni()) * big / 3.0f);
	}
	for (int i = 0; i < NT * 32 * 4; i++) {
		vo[i] = f2h(uni() - 0.5f);
		vs[i] = f2h((0.05f + 0.3f * uni()) / 3.0f);
	}
	for (auto &x : q)
		x = (uni() - 0.5f) * 1.2f;
	/* stage images */
	std::vector<uint8_t> img(TILES_SMEM, 0);

	for (int t = 0; t < NT; t++) {
		uint8_t *s = img.data() + t * TILE_BYTES;
		uint8_t kraw[1024], vraw[1024];

		for (int tok = 0; tok < 32; tok++)
			for (int b = 0; b < 32; b++) {
				uint8_t x = 0, y = 0;

				for (int k = 0; k < 4; k++) {
					x |= kc[(t * 32 + tok) * 128 + 4 * b +
						k] << (2 * k);
					y |= vc[(t * 32 + tok) * 128 + 4 * b +
						k] << (2 * k);
				}
				kraw[tok * 32 + b] = x;
				vraw[tok * 32 + b] = y;
			}
		memcpy(s + T_KC, kraw, 1024);
		for (int j = 0; j < 64; j++)
			memcpy(s + T_VC + host_chunk(j), vraw + 16 * j, 16);
		for (int j = 0; j < 16; j++) {
			memcpy(s + T_KO + host_chunk(j), &ko[t * 128 + 8 * j],
			       16);
			memcpy(s + T_KS + host_chunk(j), &ks[t * 128 + 8 * j],
			       16);
		}
		memcpy(s + T_VO, &vo[t * 128], 256);
		memcpy(s + T_VS, &vs[t * 128], 256);
	}
	/* reference over the NT tiles (what any whole number of cycles
	 * through them gives) */
	std::vector<double> ref(HPC * FAST_D, 0.0);

	for (int h = 0; h < HPC; h++) {
		std::vector<double> lg(NT * 32);
		double mx = -1e300, sum = 0.0;

		for (int T = 0; T < NT * 32; T++) {
			const int t = T / 32;
			double a = 0.0;

			for (int c = 0; c < 128; c++)
				a += (double)q[h * 128 + c] *
				     ((double)h2fh(ko[t * 128 + c]) +
				      (double)h2fh(ks[t * 128 + c]) *
					      kc[T * 128 + c]);
			lg[T] = a;
			mx = std::max(mx, a);
		}
		for (int T = 0; T < NT * 32; T++) {
			const double p = exp2(lg[T] - mx);

			sum += p;
			for (int c = 0; c < 128; c++)
				ref[h * 128 + c] += p *
					((double)h2fh(vo[T * 4 + c / 32]) +
					 (double)h2fh(vs[T * 4 + c / 32]) *
						 vc[T * 128 + c]);
		}
		for (int c = 0; c < 128; c++)
			ref[h * 128 + c] /= sum;
	}
	uint8_t *d_tiles;
	float *d_q, *d_out, *d_sink;
	const int ctas = 4 * sms;

	CK(cudaMalloc(&d_tiles, TILES_SMEM));
	CK(cudaMalloc(&d_q, q.size() * 4));
	CK(cudaMalloc(&d_out, (size_t)ctas * HPC * FAST_D * 4));
	CK(cudaMalloc(&d_sink, (size_t)ctas * 128 * 4));
	CK(cudaMemcpy(d_tiles, img.data(), TILES_SMEM,
		      cudaMemcpyHostToDevice));
	CK(cudaMemcpy(d_q, q.data(), q.size() * 4, cudaMemcpyHostToDevice));
	CK(cudaFuncSetAttribute(k_fast,
				cudaFuncAttributeMaxDynamicSharedMemorySize,
				FAST_SMEM));
	CK(cudaFuncSetAttribute(k_wg<false>,
				cudaFuncAttributeMaxDynamicSharedMemorySize,
				WG_SMEM));
	CK(cudaFuncSetAttribute(k_wg<true>,
				cudaFuncAttributeMaxDynamicSharedMemorySize,
				WG_SMEM));
	int occ_f = 0, occ_w = 0;

	CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ_f, k_fast, 128,
							 FAST_SMEM));
	CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ_w, k_wg<true>,
							 128, WG_SMEM));
	printf("parts mask %d (0: whole tiles)\n", KVS_ATTN_PARTS);
	printf("SMs %d, CTAs %d, resident an SM: fast %d, wg %d; %d tiles "
	       "a warp (fast) / %d pairs a CTA (wg)\n", sms, ctas, occ_f,
	       occ_w, iters, 2 * iters);
	/* check both wait placements (not in a parts build, whose results
	 * are wrong on purpose) */
	for (int defer = 0; defer < 2 && !KVS_ATTN_PARTS; defer++) {
		std::vector<float> out(HPC * FAST_D);

		CK(cudaMemset(d_out, 0xff, (size_t)ctas * HPC * FAST_D * 4));
		if (defer)
			k_wg<true><<<1, 128, WG_SMEM>>>(d_tiles, d_q, 4 * NT,
							d_out);
		else
			k_wg<false><<<1, 128, WG_SMEM>>>(d_tiles, d_q, 4 * NT,
							 d_out);
		CK(cudaGetLastError());
		CK(cudaMemcpy(out.data(), d_out, out.size() * 4,
			      cudaMemcpyDeviceToHost));
		double err = 0.0, scale = 0.0;

		for (size_t i = 0; i < out.size(); i++) {
			scale = std::max(scale, fabs(ref[i]));
			err = std::max(err, fabs(out[i] - ref[i]));
		}
		const bool ok = err <= 1e-3 * scale;

		printf("check wg defer=%d: max abs err %.3g (scale %.3g) %s\n",
		       defer, err, scale, ok ? "ok" : "WRONG");
		if (!ok)
			return 1;
	}
	cudaEvent_t e0, e1;

	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	auto time = [&](auto launch) {
		std::vector<float> t;

		launch();
		CK(cudaDeviceSynchronize());
		for (int r = 0; r < runs; r++) {
			float ms = 0.0f;

			CK(cudaEventRecord(e0));
			launch();
			CK(cudaEventRecord(e1));
			CK(cudaEventSynchronize(e1));
			CK(cudaEventElapsedTime(&ms, e0, e1));
			t.push_back(ms);
		}
		std::sort(t.begin(), t.end());
		return t[runs / 2];
	};
	for (int pass = 0; pass < 2; pass++) {
		const float tf = time([&] {
			k_fast<<<ctas, 128, FAST_SMEM>>>(d_tiles, d_q, iters,
							 d_sink);
		});
		const float tw = time([&] {
			k_wg<false><<<ctas, 128, WG_SMEM>>>(d_tiles, d_q,
							    2 * iters, d_out);
		});
		const float td = time([&] {
			k_wg<true><<<ctas, 128, WG_SMEM>>>(d_tiles, d_q,
							   2 * iters, d_out);
		});
		/* tiles a CTA: fast 4 warps x iters, wg 2 x 2 iters */
		const double tiles_f = (double)ctas * 4 * iters;
		const double tiles_w = tiles_f;
		auto rate = [&](double tl, float ms) {
			return tl / (ms * 1e3) / sms;
		};
		printf("pass %d: fast %.3f ms (%.2f tiles/us/SM, %.1f ns a "
		       "tile an SM)\n", pass, tf, rate(tiles_f, tf),
		       1e3 / rate(tiles_f, tf));
		printf("pass %d: wg   %.3f ms (%.2f tiles/us/SM, %.1f ns), "
		       "wg/fast %.3f\n", pass, tw, rate(tiles_w, tw),
		       1e3 / rate(tiles_w, tw),
		       rate(tiles_f, tf) / rate(tiles_w, tw));
		printf("pass %d: wg deferred %.3f ms (%.2f tiles/us/SM, %.1f "
		       "ns), wgd/fast %.3f\n", pass, td, rate(tiles_w, td),
		       1e3 / rate(tiles_w, td),
		       rate(tiles_f, tf) / rate(tiles_w, td));
	}
	return 0;
}
