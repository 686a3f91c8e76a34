/*
 * attn_merge.cu - attn_merge_kernel, the last step of the split-and-merge
 * plans: one CTA per (sequence, query head) folds the p.n_slots partials
 * (acc[D], m, l in the log2 domain) of its unit's splits by log-sum-exp
 * into the normalised output, o / l, where l is 0 for a sequence with no
 * token (then the output is 0).  It is launched as a programmatic
 * dependent of attn_kernel, placed as soon as every attention CTA has
 * started, and waits for their results at griddepcontrol.wait.
 *
 * Invariants: the merge reads only the slots the plan gave out (n_slots)
 * and nothing a previous call left in the workspace; every weight
 * 2^(m_s - M) is taken against the global maximum M before it is used, so
 * the fold is plain sums; 128 registers a thread at most, so that a merge
 * CTA of up to five warps fits beside two 3-CTA attention CTAs on an SM.
 */
#include "attn_common.cuh"

/* The most warps of a merge CTA; the (m, l) pairs a merge lane keeps in
 * registers (up to 32 * MERGE_ML splits in one round trip). */
#define MERGE_WARPS 8
#define MERGE_ML 4

/* Channels a merge lane takes for head dimension @D (contiguous, one or
 * two vector loads), and the splits a merge warp loads in one round trip:
 * within 128 registers a thread (launch bounds), so that a merge CTA of up
 * to five warps ((1, 32K)'s) fits in the registers two 3-CTA build
 * attention CTAs leave on an SM and starts while they run. */
static __host__ __device__ __forceinline__ int merge_cpl(int D)
{
	return D <= 64 ? 2 : (D <= 128 ? 4 : 8);
}
#define MERGE_CHUNK(cpl) ((cpl) > 4 ? 8 : 16)

/* Warps of a merge CTA for @n splits of head dimension @D: one per chunk,
 * at most MERGE_WARPS. */
static __host__ __device__ __forceinline__ int merge_warps(int n, int D)
{
	const int ch = MERGE_CHUNK(merge_cpl(D));
	const int w = (n + ch - 1) / ch;

	return w < 1 ? 1 : (w > MERGE_WARPS ? MERGE_WARPS : w);
}

/* @N floats at @src (N = 2, 4 or 8; 8- or 16-byte aligned) into @x. */
template <int N>
static __device__ __forceinline__ void ld_vec(const float *src, float x[N])
{
	if constexpr (N == 2) {
		const float2 v = *reinterpret_cast<const float2 *>(src);

		x[0] = v.x;
		x[1] = v.y;
	} else {
#pragma unroll
		for (int k = 0; k < N; k += 4) {
			const float4 v = *reinterpret_cast<const float4 *>(
				src + k);

			x[k] = v.x;
			x[k + 1] = v.y;
			x[k + 2] = v.z;
			x[k + 3] = v.w;
		}
	}
}

/*
 * One CTA per (sequence, query head), a programmatic dependent of
 * attn_kernel: it may start while the last attention CTAs run and waits
 * for their results at griddepcontrol.wait, having first run its code dry
 * (no global loads or stores) so that the merge proper does not wait for
 * instruction fetches (0.2-0.4 us at batch 1 on an H200; the stores run
 * dry too, predicated off: left out of the dry pass they took ~0.5 us).
 *
 * Everything a CTA needs is asked for in one round trip: each lane loads
 * the (m, l) pairs of splits lane, lane + 32, ... (every warp all of
 * them), and warp w the partials of its splits w, w + W, ... (a chunk,
 * CPL contiguous channels a lane).  Every warp then knows the global
 * maximum M and sum l = sum_s 2^(m_s - M) l_s on its own (shuffles), so
 * that each split's weight is final when it is folded: no running
 * rescale, and the warps' sums meet in shared memory as plain sums, one
 * barrier, after which every thread stores channels of o / l.
 */
template <int CPL>
__global__ void __launch_bounds__(MERGE_WARPS * 32, 2)
attn_merge_kernel(const attn_params p)
{
	constexpr int CH = MERGE_CHUNK(CPL);
	/* per warp its sum of weighted partials, D floats */
	extern __shared__ __align__(16) float ws_s[];
	const int b = blockIdx.x / p.Hq, qh = blockIdx.x % p.Hq;
	const int D = p.D, pitch = ws_pitch(D);
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const int nw = blockDim.x >> 5;
	const int c0 = lane * CPL;              /* this lane's channels */
	const float *base = partial(p, b, qh, 0);
	const size_t out0 = (size_t)(b * p.Hq + qh) * D;

	ATTN_PROBE_MERGE(p, 0);
	/*
	 * Two passes through the same code: the first, a dry one that
	 * touches no global memory, runs while the attention grid does, so
	 * that the second -- the merge, after griddepcontrol.wait -- finds its
	 * instructions fetched (the pass number is hidden from the compiler,
	 * which would otherwise make two copies of the code).
	 */
#pragma unroll 1
	for (int pass = 0; pass < 2; pass++) {
		int dry;

		asm volatile("mov.b32 %0, %1;\n"
			     : "=r"(dry) : "r"(pass == 0 ? 1 : 0));
		const int n = dry ? 0 : p.n_slots;
		float xm[CH], x[CH][CPL], o[CPL];
		float2 ml[MERGE_ML];
		/* the m and channels of splits s0, s0 + nw, ... (none past n:
		 * m = -inf, weight 0) */
		auto load_chunk = [&](int s0) {
#pragma unroll
			for (int u = 0; u < CH; u++) {
				const int s = s0 + u * nw;
				const float *r = base + (size_t)s * pitch;

				xm[u] = s < n ? r[D] : -INFINITY;
				if (s < n && c0 < D)
					ld_vec<CPL>(r + c0, x[u]);
				else
#pragma unroll
					for (int j = 0; j < CPL; j++)
						x[u][j] = 0.0f;
			}
		};

		if (!dry) {
			asm volatile("griddepcontrol.wait;\n" ::: "memory");
			ATTN_PROBE_MERGE(p, 1);
		}
		load_chunk(warp);
#pragma unroll
		for (int i = 0; i < MERGE_ML; i++) {
			const int s = lane + 32 * i;

			ml[i] = s < n ? *reinterpret_cast<const float2 *>(
				base + (size_t)s * pitch + D) :
				make_float2(-INFINITY, 0.0f);
		}
		float mx = -INFINITY, l = 0.0f;

#pragma unroll
		for (int i = 0; i < MERGE_ML; i++)
			mx = fmaxf(mx, ml[i].x);
		for (int s = lane + 32 * MERGE_ML; s < n; s += 32)
			mx = fmaxf(mx, base[(size_t)s * pitch + D]);
		mx = warp_max(mx);
		if (!dry)
			ATTN_PROBE_MERGE(p, 3);
		if (mx == -INFINITY)
			mx = 0.0f;      /* no token in any split: weights 0 */
#pragma unroll
		for (int i = 0; i < MERGE_ML; i++)
			l = fmaf(exp2f(ml[i].x - mx), ml[i].y, l);
		for (int s = lane + 32 * MERGE_ML; s < n; s += 32) {
			const float2 v = *reinterpret_cast<const float2 *>(
				base + (size_t)s * pitch + D);

			l = fmaf(exp2f(v.x - mx), v.y, l);
		}
		l = warp_sum(l);
#pragma unroll
		for (int j = 0; j < CPL; j++)
			o[j] = 0.0f;
		for (int s0 = warp;;) {
#pragma unroll
			for (int u = 0; u < CH; u++) {
				const float w = exp2f(xm[u] - mx);

#pragma unroll
				for (int j = 0; j < CPL; j++)
					o[j] = fmaf(w, x[u][j], o[j]);
			}
			s0 += nw * CH;
			if (s0 >= n)
				break;
			load_chunk(s0);
		}
		if (!dry)
			ATTN_PROBE_MERGE(p, 4);
		/* out_elem's l > 0 rule, as one reciprocal: its division a
		 * channel took the stores 0.48 us against 0.38-0.42 (a probe's
		 * timeline on an H200) */
		const float inv = l > 0.0f ? 1.0f / l : 0.0f;

		if (nw == 1) {
			if (!dry)
				ATTN_PROBE_MERGE(p, 5);
#pragma unroll
			for (int j = 0; j < CPL; j++)
				if (c0 + j < D && !dry)
					st_elem(p.odt, p.out, out0 + c0 + j,
						o[j] * inv);
			continue;
		}
		if (c0 < D)
#pragma unroll
			for (int j = 0; j < CPL; j++)
				ws_s[warp * D + c0 + j] = o[j];
		__syncthreads();
		if (!dry)
			ATTN_PROBE_MERGE(p, 5);
		for (int c = threadIdx.x; c < D; c += blockDim.x) {
			float sum = 0.0f;

			for (int w = 0; w < nw; w++)
				sum += ws_s[w * D + c];
			if (!dry)
				st_elem(p.odt, p.out, out0 + c, sum * inv);
		}
		if (dry)
			__syncthreads();        /* rows reused */
	}
	ATTN_PROBE_MERGE(p, 2);
}

/*
 * The merge, as a programmatic dependent launch: its CTAs are placed as
 * soon as every attention CTA has started (attn_kernel lets them at its
 * top), which hides the launch gap between the two kernels.
 */
int attn_merge_launch(const attn_params &p, cudaStream_t stream)
{
	cudaLaunchConfig_t cfg = {};
	cudaLaunchAttribute attr[1];
	const int nw = merge_warps(p.n_slots, p.D), cpl = merge_cpl(p.D);
	void (*fn)(const attn_params) = cpl == 2 ? attn_merge_kernel<2> :
		cpl == 4 ? attn_merge_kernel<4> : attn_merge_kernel<8>;

	attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
	attr[0].val.programmaticStreamSerializationAllowed = 1;
	cfg.gridDim = dim3(p.B * p.Hq);
	cfg.blockDim = dim3(32 * nw);
	cfg.dynamicSmemBytes = nw > 1 ? sizeof(float) * nw * p.D : 0;
	cfg.stream = stream;
	cfg.attrs = attr;
	cfg.numAttrs = 1;
	return KVS_CUDA_CHECK(cudaLaunchKernelEx(&cfg, fn, p));
}
