/*
 * attn_fast.cuh - the fast path over one split of a unit: a fast CTA of
 * the split-and-merge plans, the share of the tiles a generic CTA takes
 * after its tokens (hybrid), or one quad of a cluster-plan CTA.  The
 * prologue issues its global loads together (page indices, query,
 * sequence) before it uses any; under the pieces plan each warp first
 * takes its turn of the residual tail's pieces (attn_pieces.cuh); then
 * each warp streams its tiles through its STAGES-deep cp.async ring and
 * computes them (attn_tile.cuh); at the end the four warps' states meet in
 * shared memory and the split's partial goes to the workspace, into the
 * cluster's shared memory (cluster plan), or, where a unit has one CTA,
 * to the output itself, normalised as the merge would.
 *
 * Invariants: warp w takes tiles tb + w, tb + w + 4, ... of its split (so
 * the cursor only adds); the ring holds at most STAGES - 1 tiles in flight
 * and the stage just computed is the one refilled next; the SUB scale of
 * the Value accumulators is undone here, before the partial leaves the
 * CTA; a quad waits only for its own four warps (quad_sync).
 */
#ifndef KVS_KERNELS_ATTN_FAST_CUH
#define KVS_KERNELS_ATTN_FAST_CUH

#include <cooperative_groups.h>

#include "attn_pieces.cuh"

namespace cg = cooperative_groups;

/* The CTA's barrier, or in a cluster-plan CTA (@CL) its quad's (barrier
 * @quad, the quad's 128 threads): quads do not wait for each other. */
template <bool CL>
static __device__ __forceinline__ void quad_sync(int quad)
{
	if (CL)
		asm volatile("bar.sync %0, %1;\n" :: "r"(quad),
			     "n"(WARPS * 32) : "memory");
	else
		__syncthreads();
}

/*
 * The fast path over tiles [@tb, @tb + @tps) of a unit (those its sequence
 * has; warp w takes every fourth from tb + w): one partial per query head
 * into workspace slot @slot.  A fast CTA, or a generic CTA's share, or
 * (@CL) quad @quad of a cluster-plan CTA with its shared memory at @smem,
 * which sends its partial to the cluster's meeting areas at @meet (this
 * CTA's; the same offset in every CTA of the cluster).
 */
template <bool SUB, bool QSH, bool CL>
static __device__ void fast_cta(const attn_params &p, int tb, int tps,
				int slot, int h, int sub, int b, uint8_t *smem,
				int quad, uint8_t *meet)
{
	const int tid = CL ? threadIdx.x - quad * WARPS * 32 : threadIdx.x;
	const int warp = tid >> 5;
	const int lane = tid & 31;
	const int gi = lane >> 2, ti = lane & 3;
	const int hq0 = h * p.gq + sub * HPC, nh = min(HPC, p.gq - sub * HPC);
	uint8_t *wsm = smem + warp * WARP_SMEM;
	uint8_t *scratch = wsm + STAGES * TILE_BYTES;
	float *p_s = reinterpret_cast<float *>(scratch + SCRATCH_BYTES);
	/* the scaled query rows [head][w][QK_PITCH] (16 channels, padded
	 * against bank conflicts) and the warps' Key B pairs, then this CTA's
	 * page indices, staged once: all the split could cover, read while
	 * the sequence's lengths are (entries past its end are in the table
	 * and never used) */
	float *qk_s = reinterpret_cast<float *>(smem + WARPS * WARP_SMEM);
	int32_t *pages = reinterpret_cast<int32_t *>(qk_s + QK_FLOATS);
	const int page0 = tb * TILE / p.S;
	ATTN_PROBE_EVENT(p, 2);
	const int npages = min((tb + tps - 1) * TILE / p.S - page0 + 1,
			       (int)p.max_pages - page0);
	/* the prologue's global loads first, its shared stores after, so
	 * that they are one round trip: a page index and four query
	 * channels a thread (a longer page list loops), the sequence */
	constexpr int QV = HPC * FAST_D / (WARPS * 32);
	const int32_t *ptab = p.page_table + (size_t)b * p.max_pages + page0;
	const int32_t pv = tid < npages ? ptab[tid] : 0;
	uint32_t qv[QV];

#pragma unroll
	for (int k = 0; k < QV; k++) {
		const int e = tid + k * WARPS * 32;

		qv[k] = e / FAST_D < nh ? ld_bits(p.qdt, p.q, (size_t)(b *
			p.Hq + hq0) * FAST_D + e) : 0;
	}
	const kvs_cuda_seq sq = p.seqs[b];
	const int tiles = fast_end(p, sq) / TILE;
	const int te = min(tiles, tb + tps);
	const int first = tb + warp;
	const int mine = first < te ? (te - first + WARPS - 1) / WARPS : 0;

	if (tid < npages)
		pages[tid] = pv;
	for (int i = tid + WARPS * 32; i < npages; i += WARPS * 32)
		pages[i] = ptab[i];
#pragma unroll
	for (int k = 0; k < QV; k++) {
		const int e = tid + k * WARPS * 32, d = e % FAST_D;

		qk_s[(e / FAST_D * 8 + d / 16) * QK_PITCH + d % 16] =
			bits_float(p.qdt, qv[k]) * p.scale_log2;
	}
	fast_state st;

#pragma unroll
	for (int nt = 0; nt < 8; nt++)
#pragma unroll
		for (int e = 0; e < 4; e++)
			st.acc[nt][e] = 0.0f;
#pragma unroll
	for (int g = 0; g < 4; g++)
		st.so[g] = 0.0f;
	st.m = -INFINITY;
	st.l = 0.0f;
	quad_sync<CL>(quad);
	ATTN_PROBE_EVENT(p, 3);
	ATTN_PROBE_COUNT(p, 7, mine);
	tile_cursor cur;
	uint8_t *stage[STAGES];

	for (int s = 0; s < STAGES; s++)
		stage[s] = wsm + s * TILE_BYTES;
	auto ring_start = [&]() {
		cursor_init(cur, p, h, first, page0, lane);
#pragma unroll
		for (int s = 0; s < STAGES - 1; s++) {
			if (s < mine) {
				issue_tile(p, cur, pages, stage[s]);
				cursor_next(cur, p);
			}
			cp_commit();
		}
	};

	/* with the tail as pieces, the ring starts after them (below) */
	if (!p.pieces)
		ring_start();
	/* lane (h, w)'s 16 query channels 16w .. 16w+15 of head h, kept in
	 * registers for every tile (key_operand); q' = q 2^(e - 2k (SUB)),
	 * k = d % 4, in [-1, 1] for the head's largest |q| = f 2^-e */
	key_query kq;
	{
		const float4 *qv = reinterpret_cast<const float4 *>(
			qk_s + lane * QK_PITCH);
		float mx = 0.0f;

#pragma unroll
		for (int i = 0; i < 4; i++) {
			const float4 t = qv[i];

			kq.q[4 * i] = t.x; kq.q[4 * i + 1] = t.y;
			kq.q[4 * i + 2] = t.z; kq.q[4 * i + 3] = t.w;
			mx = fmaxf(mx, fmaxf(fmaxf(fabsf(t.x), fabsf(t.y)),
					     fmaxf(fabsf(t.z), fabsf(t.w))));
		}
		kq_split<SUB, QSH>(kq, mx, [&]() {
			return reinterpret_cast<uint4 *>(
				qk_s + QK_PART * (1 + warp) + lane * QK_PITCH);
		}, ti);
	}
	if (p.pieces) {
		/* the tail's pieces this warp takes, i = split + n w' + 4 n r
		 * with w' = 3 - w (the last warps have the fewest tiles where
		 * a split's tiles are not a multiple of 4), in the stage area
		 * before the tiles: at the start their round trips overlap
		 * the other warps' tiles */
		const int fe = fast_end(p, sq);
		const int np = ((int)(sq.k_quant_len + sq.k_resid_len) - fe +
				PIECE - 1) / PIECE;

		for (int i = slot + p.n_fast * (WARPS - 1 - warp); i < np;
		     i += WARPS * p.n_fast) {
			const piece_at a = piece_of(sq, fe, i);

			piece_load(p, sq, a, b, h, pages, page0, npages, wsm,
				   lane);
			if (p.rdt == KVS_DTYPE_BF16)
				piece_tile<SUB, QSH, true>(wsm, a, kq, qk_s,
							   scratch, p_s, st,
							   lane);
			else
				piece_tile<SUB, QSH, false>(wsm, a, kq, qk_s,
							    scratch, p_s, st,
							    lane);
		}
		ring_start();
	}
	for (int k = 0; k < mine; k++) {
		if (k + STAGES - 1 < mine && (!ATTN_PROBE_OMIT(1) || k == 0)) {
			issue_tile(p, cur, pages, stage[STAGES - 1]);
			cursor_next(cur, p);
		}
		cp_commit();
		if (!ATTN_PROBE_OMIT(128) || k < STAGES)
			cp_wait<STAGES - 1>();
		__syncwarp();
		if (k == 0)
			ATTN_PROBE_EVENT(p, 4);
		if (!ATTN_PROBE_OMIT(32))
			fast_tile<SUB, QSH>(stage[0], kq, scratch, p_s, st,
					    lane);
		/* rotate the ring: the stage just read is refilled next */
		uint8_t *done = stage[0];
#pragma unroll
		for (int s = 0; s < STAGES - 1; s++)
			stage[s] = stage[s + 1];
		stage[STAGES - 1] = done;
	}
	cp_wait<0>();
	ATTN_PROBE_EVENT(p, 5);

	/* per-warp results: the sum and the origin sums of head ti over the
	 * warp's tokens, from the eight lanes gi of column ti */
	auto column_sum = [](float x) {
#pragma unroll
		for (int o = 4; o < 32; o <<= 1)
			x += __shfl_xor_sync(0xffffffffu, x, o);
		return x;
	};
	const float l = column_sum(st.l);

#pragma unroll
	for (int g = 0; g < 4; g++)
		st.so[g] = column_sum(st.so[g]);
	quad_sync<CL>(quad);

	/* CTA merge area (reuses the stages): o[w][j][D], m[w][j], l[w][j],
	 * then the weights wt[w][j] and the maxima mx[j] */
	float *o_w = reinterpret_cast<float *>(smem);
	float *m_w = o_w + WARPS * HPC * FAST_D, *l_w = m_w + WARPS * HPC;
	/* lane (gi, ti): head ti, channels 64 hf + 8 gi + k (+ 4), whose
	 * group's column is gi / 4 (value_update) */
	const int gl = gi >> 2;
	float *orow = o_w + (warp * HPC + ti) * FAST_D + 8 * gi;

#pragma unroll
	for (int hf = 0; hf < 2; hf++) {
		const float o = gl ? st.so[2 * hf + 1] : st.so[2 * hf];
#pragma unroll
		for (int k = 0; k < 4; k++) {
			/* undo the codes' 4^k 2^-24 */
			const float sc = SUB ? pow2(24 - 2 * k) : 1.0f;
			const float *a = st.acc[4 * hf + k];

			orow[64 * hf + k] = fmaf(gl ? a[1] : a[0], sc, o);
			orow[64 * hf + k + 4] = fmaf(gl ? a[3] : a[2], sc, o);
		}
	}
	if (gi == 0) {
		m_w[warp * HPC + ti] = st.m;
		l_w[warp * HPC + ti] = l;
	}
	quad_sync<CL>(quad);
	/* each warp's weight per head, once: exp2(m_w - max over warps) */
	float *wt_s = l_w + WARPS * HPC, *mx_s = wt_s + WARPS * HPC;

	if (tid < WARPS * HPC) {
		const int jj = tid % HPC;
		const float mw = m_w[tid];
		float mx = -INFINITY;

		for (int w = 0; w < WARPS; w++)
			mx = fmaxf(mx, m_w[w * HPC + jj]);
		wt_s[tid] = mw == -INFINITY ? 0.0f : exp2f(mw - mx);
		if (tid < HPC)
			mx_s[jj] = mx;
	}
	quad_sync<CL>(quad);
	/* the partial: 16 bytes of a head's output a thread, then (m, l);
	 * with one CTA a unit (the pieces plan at large batch) the output
	 * itself, normalised as the merge would, which is then not launched */
	constexpr int C4 = FAST_D / 4;
	const float4 *o4 = reinterpret_cast<const float4 *>(o_w);
	const bool direct = unit_writes_out(p);
	/* head jj's output channels 4c .. 4c + 3 over the warps, and sum */
	auto fold = [&](int jj, int c) {
		float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);

#pragma unroll
		for (int w = 0; w < WARPS; w++) {
			const float wt = wt_s[w * HPC + jj];
			const float4 v = o4[(w * HPC + jj) * C4 + c];

			x.x = fmaf(wt, v.x, x.x);
			x.y = fmaf(wt, v.y, x.y);
			x.z = fmaf(wt, v.z, x.z);
			x.w = fmaf(wt, v.w, x.w);
		}
		return x;
	};
	auto head_sum = [&](int jj) {
		float lt = 0.0f;

		for (int w = 0; w < WARPS; w++)
			lt = fmaf(wt_s[w * HPC + jj], l_w[w * HPC + jj], lt);
		return lt;
	};

	if (CL) {
		/* every CTA of the cluster has started (the arrive at the
		 * kernel's top), so its shared memory may be written */
		cg::cluster_group cl = cg::this_cluster();
		const int C = (int)cl.num_blocks(), ns = C * QUADS;
		const int rows = cl_rows(C);

		asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
		for (int e = tid; e < nh * C4; e += WARPS * 32)
			cl.map_shared_rank(reinterpret_cast<float4 *>(meet),
					   e % C)[e / C * ns + slot] =
				fold(e / C4, e % C4);
		if (tid < nh * C)
			cl.map_shared_rank(reinterpret_cast<float2 *>(meet +
				(size_t)rows * ns * sizeof(float4)), tid / nh)
				[slot * HPC + tid % nh] = make_float2(
					mx_s[tid % nh], head_sum(tid % nh));
	} else if (!direct) {
		for (int e = tid; e < nh * C4; e += blockDim.x)
			reinterpret_cast<float4 *>(partial(p, b, hq0 + e / C4,
				slot))[e % C4] = fold(e / C4, e % C4);
		if (tid < nh)
			*reinterpret_cast<float2 *>(partial(p, b, hq0 + tid,
							    slot) + FAST_D) =
				make_float2(mx_s[tid], head_sum(tid));
	} else {
		for (int e = tid; e < nh * C4; e += blockDim.x) {
			const int jj = e / C4;
			const float4 x = fold(jj, e % C4);
			const float lt = head_sum(jj);
			const size_t at = (size_t)(b * p.Hq + hq0) * FAST_D +
					  4 * e;

			out_elem(p, at, x.x, lt);
			out_elem(p, at + 1, x.y, lt);
			out_elem(p, at + 2, x.z, lt);
			out_elem(p, at + 3, x.w, lt);
		}
	}
	ATTN_PROBE_EVENT(p, 6);
}

#endif
