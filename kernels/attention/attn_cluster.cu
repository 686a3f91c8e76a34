/*
 * attn_cluster.cu - the cluster plan, which needs no second kernel: where
 * the units fill the device at one CTA an SM (fast format, 16-bit
 * residuals), a unit is one thread-block cluster of up to 16 CTAs, each
 * CTA four quads of four warps that run the fast path with the residual
 * tail as pieces (attn_fast.cuh); every quad sends its partial into the
 * shared memory of the cluster's CTAs that fold it, and they write the
 * output.  Here: the kernel, when the plan fits, and its launch.
 *
 * Invariants: every CTA of a cluster has arrived at the cluster barrier
 * before any quad writes into another CTA's shared memory; the meeting
 * area is at the same offset in every CTA (after its quads' shared
 * memory); the same work split gives the same bits, call after call.
 */
#include "attn_fast.cuh"

/*
 * The cluster plan: one cluster of p.cluster CTAs a unit, QUADS quads of
 * WARPS warps a CTA (one CTA an SM), split = rank * QUADS + quad.  Each
 * quad runs the fast path over its share of the tiles and pieces and
 * sends its partial, float4 by float4, to the CTA that folds that part of
 * the output (remote stores into distributed shared memory, cl_rows);
 * after one cluster barrier each CTA folds its outputs from its own
 * shared memory, p.cl_lanes lanes an output (one or two splits a lane,
 * shuffles), and writes them.  No workspace, no merge kernel; the same
 * work split gives the same bits.
 */
template <bool SUB>
__global__ void __launch_bounds__(QUADS * WARPS * 32, 1)
attn_cluster_kernel(const attn_params p)
{
	extern __shared__ __align__(16) uint8_t smem[];
	cg::cluster_group cl = cg::this_cluster();
	const int C = (int)cl.num_blocks(), rank = (int)cl.block_rank();
	const int quad = threadIdx.x / (WARPS * 32);
	int b, h, sub;

	unit_at(p, blockIdx.x / C, b, h, sub);
	const int split = rank * QUADS + quad, ns = C * QUADS;
	uint8_t *meet = smem + (size_t)QUADS * p.quad_smem;

	/* this CTA has started: the quads' sends wait for every CTA's
	 * arrival (fast_cta) */
	asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
	/* (a probe's timeline: the fold's points as a merge CTA's -- entry,
	 * released, first loads in, done) */
	ATTN_PROBE_EVENT(p, 0);
	ATTN_PROBE_MERGE(p, 0);
	fast_cta<SUB, true, true>(p, split * p.fast_tps, p.fast_tps, split, h,
				  sub, b, smem + quad * p.quad_smem, quad,
				  meet);
	cl.sync();
	ATTN_PROBE_MERGE(p, 1);

	constexpr int C4 = FAST_D / 4;
	const int L = p.cl_lanes, nh = min(HPC, p.gq - sub * HPC);
	const int lg = threadIdx.x % L, step = C * (int)(blockDim.x / L);
	const float4 *rx = reinterpret_cast<const float4 *>(meet);
	const float2 *rml = reinterpret_cast<const float2 *>(
		meet + (size_t)cl_rows(C) * ns * sizeof(float4));
	const size_t at0 = (size_t)(b * p.Hq + h * p.gq + sub * HPC) * FAST_D;

	/* the same trip count in every thread: the shuffles take all lanes */
	for (int e0 = 0; e0 < nh * C4; e0 += step) {
		const int row = e0 / C + (int)(threadIdx.x / L);
		const int e = rank + C * row;
		const bool act = e < nh * C4;
		const int jj = act ? e / C4 : 0, c = e % C4;
		float2 ml[2];
		float4 x[2];

#pragma unroll
		for (int k = 0; k < 2; k++) {
			const int s = lg + L * k;
			const bool in = act && s < ns;

			ml[k] = in ? rml[s * HPC + jj] :
				     make_float2(-INFINITY, 0.0f);
			x[k] = in ? rx[row * ns + s] :
				    make_float4(0.0f, 0.0f, 0.0f, 0.0f);
		}
		float mx = fmaxf(ml[0].x, ml[1].x), lt = 0.0f;
		float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);

		for (int d = L / 2; d > 0; d >>= 1)
			mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, d));
		if (!e0)
			ATTN_PROBE_MERGE(p, 3);
#pragma unroll
		for (int k = 0; k < 2; k++) {
			const float w = ml[k].x == -INFINITY ? 0.0f :
					exp2f(ml[k].x - mx);

			lt = fmaf(w, ml[k].y, lt);
			o.x = fmaf(w, x[k].x, o.x);
			o.y = fmaf(w, x[k].y, o.y);
			o.z = fmaf(w, x[k].z, o.z);
			o.w = fmaf(w, x[k].w, o.w);
		}
		for (int d = L / 2; d > 0; d >>= 1) {
			lt += __shfl_xor_sync(0xffffffffu, lt, d);
			o.x += __shfl_xor_sync(0xffffffffu, o.x, d);
			o.y += __shfl_xor_sync(0xffffffffu, o.y, d);
			o.z += __shfl_xor_sync(0xffffffffu, o.z, d);
			o.w += __shfl_xor_sync(0xffffffffu, o.w, d);
		}
		if (act && !lg) {
			const size_t at = at0 + (size_t)jj * FAST_D + 4 * c;

			out_elem(p, at, o.x, lt);
			out_elem(p, at + 1, o.y, lt);
			out_elem(p, at + 2, o.z, lt);
			out_elem(p, at + 3, o.w, lt);
		}
	}
	ATTN_PROBE_MERGE(p, 2);
}

/*
 * The cluster plan where it fits: the largest cluster (at most 16 CTAs, at
 * most the SMs a unit, at most a tile or piece a warp) of which @units can
 * be resident at once, each quad an equal share of the @tiles and the @np
 * pieces in turn (as piece_plan's CTAs), if the grid has @least CTAs
 * (SMs) or more.  1 with @p filled, or 0.
 */
int attn_cluster_plan(int units, int tiles, int np, int span, int least,
		      attn_params *p)
{
	const void *fn = (const void *)attn_cluster_kernel<true>;
	const int sms = kvs_cuda_sm_count(), most = (tiles + np + WARPS - 1) /
						    WARPS;
	const size_t optin = kvs_cuda_smem_optin();
	int c = units > 0 ? sms / units : 0;

	c = c > 16 ? 16 : c;
	c = c > (most + QUADS - 1) / QUADS ? (most + QUADS - 1) / QUADS : c;
	for (; c >= 1 && units * c >= least; c--) {
		const int n = c * QUADS, tps = (tiles + n - 1) / n;
		const size_t q = quad_smem(tps, span);
		const size_t all = QUADS * q + cl_meet_bytes(c);

		if (all > optin)
			continue;       /* a smaller cluster may fit */
		if (kvs_cuda_resident_clusters(fn, QUADS * WARPS * 32, all,
					       c) < units)
			continue;
		p->cluster = c;
		p->quad_smem = (int)q;
		p->cl_lanes = 1;
		while (p->cl_lanes < n && p->cl_lanes < 32)
			p->cl_lanes *= 2;
		p->n_fast = n;
		p->fast_tps = tps;
		p->n_gen = 0;
		p->hyb_tps = 0;
		p->gen_chunk = TILE;
		p->gen_tps = TILE;
		p->n_slots = 1;         /* no workspace used */
		p->pieces = 1;
		p->occ3 = 0;
		return 1;
	}
	return 0;
}

/* The cluster plan's one kernel: p.cluster CTAs a cluster, a cluster a
 * unit. */
int attn_cluster_launch(const attn_params &p, int sub, cudaStream_t stream)
{
	cudaLaunchConfig_t cfg = {};
	cudaLaunchAttribute attr[1];
	void (*fn)(const attn_params) = sub ? attn_cluster_kernel<true> :
					      attn_cluster_kernel<false>;
	const int rc = kvs_cuda_cluster_config((const void *)fn, p.cluster,
		QUADS * WARPS * 32, (size_t)QUADS * p.quad_smem +
		cl_meet_bytes(p.cluster), &cfg, attr);

	if (rc)
		return rc;
	cfg.gridDim = dim3((unsigned)(p.cluster * p.B * p.Hkv * p.nsub));
	cfg.stream = stream;
	kvs_log(KVS_LOG_DEBUG, "cuda attend: cluster plan, units %d, %d CTAs "
		"a cluster, %d tiles a quad, subnormal operands %d",
		p.B * p.Hkv * p.nsub, p.cluster, p.fast_tps, sub);
	return KVS_CUDA_CHECK(cudaLaunchKernelEx(&cfg, fn, p));
}
