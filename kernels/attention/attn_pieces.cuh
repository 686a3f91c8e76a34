/*
 * attn_pieces.cuh - the residual tail on the tensor cores.  Where the
 * residual rows are 16-bit and the plan says so (p.pieces), the tokens
 * past a sequence's last whole history tile are cut into PIECE-token
 * pieces, each done by one warp of a fast CTA before its tiles, with the
 * tile's operand layouts, into the warp's own state: no generic CTA and no
 * extra partial.  A piece's Key comes from the codes below k_quant_len and
 * from the residual rows above it, its Value per token from the codes
 * below v_quant_len and from the FIFO above; both parts are computed where
 * present and each token takes its own.
 *
 * Layout in the warp's stage area (both stages, free before the ring
 * starts): Key code rows (32 B a token) at PK_C, the group's Key origins
 * and steps where a tile has them (T_KO, T_KS, for key_operand), Value
 * code rows at PV_C, Value origins and steps (8 B a token) at PV_O and
 * PV_S, Key and Value residual rows (256 B a token) at PK_R and PV_R.
 *
 * Invariants: a piece never crosses a page or a Key group (PIECE divides
 * TILE, and the tail starts on a tile boundary); a token's logit and
 * Value term enter the same running state as a tile's, under the same
 * scales (the query's 2^ex, the codes' 4^k 2^-24 under SUB).
 */
#ifndef KVS_KERNELS_ATTN_PIECES_CUH
#define KVS_KERNELS_ATTN_PIECES_CUH

#include "attn_tile.cuh"

#define PK_C 0
#define PV_C 256
#define PV_O 512
#define PV_S 576
#define PK_R 1536
#define PV_R 3584

struct piece_at {
	int t0, n;              /* first token, tokens (1 .. PIECE) */
	int krel, vrel;         /* tokens with Key / Value codes */
};

static __device__ __forceinline__ piece_at piece_of(const kvs_cuda_seq &sq,
						    int fe, int i)
{
	piece_at a;
	const int T = (int)(sq.k_quant_len + sq.k_resid_len);

	a.t0 = fe + PIECE * i;
	a.n = min(PIECE, T - a.t0);
	a.krel = max(0, min(PIECE, (int)sq.k_quant_len - a.t0));
	a.vrel = max(0, min(PIECE, (int)sq.v_quant_len - a.t0));
	return a;
}

/* Issues the copies of piece @a into the warp's stage area @ws and waits
 * for them. */
static __device__ __forceinline__ void piece_load(const attn_params &p,
						  const kvs_cuda_seq &sq,
						  const piece_at &a, int b,
						  int h, const int32_t *pages,
						  int page0, int npages,
						  uint8_t *ws, int lane)
{
	if (a.krel > 0 || a.vrel > 0) {
		/* a piece never crosses a page or a Key group; its page from
		 * the CTA's staged list where it is there */
		const int pi = a.t0 / p.S - page0;
		const uint8_t *pg = pi >= 0 && pi < npages ?
			p.pool + (uint64_t)pages[pi] * p.page_stride :
			page_of(p, b, a.t0);
		const int tt = a.t0 % p.S, j = lane & 15;

		if (lane < 16 ? a.krel > 0 : a.vrel > 0)
			cp_async16(ws + (lane < 16 ? PK_C : PV_C) + 16 * j, pg +
				   p.lay.off[lane < 16 ? KVS_SEC_KEY_CODES :
						 KVS_SEC_VAL_CODES] +
				   code_row(p, h, tt + j / 2) + 16 * (j & 1));
		if (a.krel > 0)
			cp_async16(ws + T_KO + (lane >= 16 ? T_KS - T_KO : 0) +
				   stage_chunk(j), pg +
				   p.lay.off[lane >= 16 ? KVS_SEC_KEY_STEP :
						 KVS_SEC_KEY_ORIGIN] +
				   2 * k_meta_at(p, h, tt, 8 * j));
		if (a.vrel > 0 && lane < 8)
			cp_async16(ws + (lane < 4 ? PV_O : PV_S) +
				   16 * (lane & 3), pg +
				   p.lay.off[lane < 4 ? KVS_SEC_VAL_ORIGIN :
						 KVS_SEC_VAL_STEP] +
				   2 * v_meta_row(p, h, tt) + 16 * (lane & 3));
	}
	/* residual rows: 16 pieces of 16 bytes a token */
#pragma unroll
	for (int m = 0; m < PIECE * 16 / 32; m++) {
		const int c = lane + 32 * m, t = c >> 4, j = c & 15;

		if (t >= a.krel && t < a.n)
			cp_async16(ws + PK_R + 256 * t + 16 * j,
				   (const uint16_t *)p.k_resid +
				   k_resid_at(p, sq, b, h, a.t0 + t, 8 * j));
		if (t >= a.vrel && t < a.n)
			cp_async16(ws + PV_R + 256 * t + 16 * j,
				   (const uint16_t *)p.v_resid +
				   v_resid_at(p, sq, b, h, a.t0 + t, 8 * j));
	}
	cp_commit();
	cp_wait<0>();
	__syncwarp();
}

/* mma16816() with fp16 or (@bf) bf16 operands. */
static __device__ __forceinline__ void mma16816x(bool bf, float c[4],
						 uint32_t a0, uint32_t a1,
						 uint32_t a2, uint32_t a3,
						 uint32_t b0, uint32_t b1)
{
	if (bf)
		asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
		    "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
		    : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
		    : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
	else
		mma16816(c, a0, a1, a2, a3, b0, b1);
}

/* One piece from the stage area @ws into the warp's state: logits, online
 * softmax, Value update, as fast_tile() does for a tile. */
template <bool SUB, bool QSH, bool BF>
static __device__ __forceinline__ void piece_tile(const uint8_t *ws,
						  const piece_at &a,
						  const key_query &kq,
						  const float *qk_s,
						  uint8_t *scratch, float *p_s,
						  fast_state &st, int lane)
{
	const int gi = lane >> 2, ti = lane & 3;
	float lc = -INFINITY, lf = -INFINITY;

	if (a.krel > 0) {
		/* Key codes: the tile's B operand, M-block rows gi only */
		const float a_j = key_b<QSH>(ws, kq, scratch, lane);
		const uint8_t *brow = scratch + (lane & 7) * KB_PITCH +
				      16 * (lane >> 3);
		const uint2 x = *reinterpret_cast<const uint2 *>(
			ws + PK_C + gi * 32 + 8 * ti);
		float c[4] = { 0.0f, 0.0f, 0.0f, 0.0f };

#pragma unroll
		for (int pr = 0; pr < 4; pr++) {
			uint32_t bm[4];

			ldsm4<false>(bm, brow + 64 * pr);
#pragma unroll
			for (int hs = 0; hs < 2; hs++) {
				const int s = 2 * pr + hs;

				mma16816(c, code_pair<SUB>(x.x, x.x >> 8, s),
					 0u, code_pair<SUB>(x.y, x.y >> 8, s),
					 0u, bm[2 * hs], bm[2 * hs + 1]);
			}
		}
		lc = fmaf(c[0] + c[1], kq.ls, a_j);
	}
	if (a.n > a.krel) {
		/* Key rows: A from the rows (fp16 or bf16), B the query q' =
		 * q 2^-ex of head gi / 2 in the rows' type, hi (gi even) or lo
		 * (gi odd), in channel order; the logit scale 2^ex */
		const float lsh = __shfl_sync(0xffffffffu, kq.ls, gi >> 1);
		const float qs = (SUB ? pow2(24) : 1.0f) / lsh;
		const float *qrow = qk_s + (gi >> 1) * 8 * QK_PITCH;
		float c[4] = { 0.0f, 0.0f, 0.0f, 0.0f };

#pragma unroll
		for (int kb = 0; kb < 8; kb++) {
			const float2 q0 = *reinterpret_cast<const float2 *>(
				qrow + kb * QK_PITCH + 2 * ti);
			const float2 q1 = *reinterpret_cast<const float2 *>(
				qrow + kb * QK_PITCH + 8 + 2 * ti);
			const uint32_t b0 = split2(BF, gi & 1, q0.x * qs,
						   q0.y * qs);
			const uint32_t b1 = split2(BF, gi & 1, q1.x * qs,
						   q1.y * qs);
			const uint8_t *kr = ws + PK_R + 256 * gi + 32 * kb +
					    4 * ti;

			mma16816x(BF, c,
				  *reinterpret_cast<const uint32_t *>(kr), 0u,
				  *reinterpret_cast<const uint32_t *>(kr + 16),
				  0u, b0, b1);
		}
		lf = (c[0] + c[1]) * (kq.ls * (SUB ? pow2(-24) : 1.0f));
	}
	const float logit = gi < a.krel ? lc : gi < a.n ? lf : -INFINITY;

	/* online softmax, as fast_tile() */
	raise_ref(st, logit);
	const float pr = gi < a.n ? exp2_tile(logit - st.m) : 0.0f;

	st.l += pr;
	p_s[ti * P_PITCH + gi] = pr;
	if (gi < a.vrel)
		origin_fma(st, pr, *reinterpret_cast<const uint2 *>(
				   ws + PV_O + 8 * gi));
	__syncwarp();
	/* B: p of head gi / 2 for tokens 2 ti, 2 ti + 1 (tokens 8 .. 15 of
	 * the MMA's K are empty: a2, a3 and b1 zero) */
	const float2 pp = *reinterpret_cast<const float2 *>(
		p_s + (gi >> 1) * P_PITCH + 2 * ti);
	const int t0 = 2 * ti, t1 = 2 * ti + 1;

	if (a.vrel > 0) {
		/* Value codes, as value_update(): unit gi of half hf of tokens
		 * t0, t1; their steps zeroed past v_quant_len */
		uint4 s4 = *reinterpret_cast<const uint4 *>(ws + PV_S +
							    8 * t0);
		uint32_t bs[2];

		if (t0 >= a.vrel)
			s4.x = s4.y = 0u;
		if (t1 >= a.vrel)
			s4.z = s4.w = 0u;
		value_b(pp, s4, gi, bs);

#pragma unroll
		for (int hf = 0; hf < 2; hf++) {
			const uint32_t u0 = *reinterpret_cast<const uint16_t *>(
				ws + PV_C + 32 * t0 + 16 * hf + 2 * gi);
			const uint32_t u1 = *reinterpret_cast<const uint16_t *>(
				ws + PV_C + 32 * t1 + 16 * hf + 2 * gi);
			const uint32_t r = u0 | u1 << 16, r8 = r >> 8;

#pragma unroll
			for (int k = 0; k < 4; k++)
				mma16816(st.acc[4 * hf + k],
					 code_pair<SUB>(r, r8, k),
					 code_pair<SUB>(r, r8, k + 4), 0u, 0u,
					 bs[hf], 0u);
		}
	}
	if (a.n > a.vrel) {
		/* Value rows: A rows as the codes' (channel 64 hf + 8 gi + k,
		 * + 4), B = p in the rows' type split hi (even columns) and lo
		 * (odd); into a zeroed product first, whose two columns of a
		 * head are added under the accumulators' scale 4^k 2^-24
		 * (SUB) to both */
		const bool v0 = t0 >= a.vrel && t0 < a.n;
		const bool v1 = t1 >= a.vrel && t1 < a.n;
		const uint32_t b0 = split2(BF, gi & 1, pp.x, pp.y);
		const uint4 z = make_uint4(0u, 0u, 0u, 0u);

#pragma unroll
		for (int hf = 0; hf < 2; hf++) {
			const uint4 x0 = v0 ? *reinterpret_cast<const uint4 *>(
				ws + PV_R + 256 * t0 + 128 * hf + 16 * gi) : z;
			const uint4 x1 = v1 ? *reinterpret_cast<const uint4 *>(
				ws + PV_R + 256 * t1 + 128 * hf + 16 * gi) : z;
			const uint32_t w0[4] = { x0.x, x0.y, x0.z, x0.w };
			const uint32_t w1[4] = { x1.x, x1.y, x1.z, x1.w };

#pragma unroll
			for (int k = 0; k < 4; k++) {
				const uint32_t sel = (k & 1) ? 0x7632u :
							       0x5410u;
				float c[4] = { 0.0f, 0.0f, 0.0f, 0.0f };
				const float sc = SUB ? pow2(2 * k - 24) : 1.0f;

				mma16816x(BF, c,
					  __byte_perm(w0[k >> 1], w1[k >> 1],
						      sel),
					  __byte_perm(w0[2 + (k >> 1)],
						      w1[2 + (k >> 1)], sel),
					  0u, 0u, b0, 0u);
#pragma unroll
				for (int e = 0; e < 4; e++)
					st.acc[4 * hf + k][e] = fmaf(
						c[e & 2] + c[(e & 2) + 1], sc,
						st.acc[4 * hf + k][e]);
			}
		}
	}
	__syncwarp();
}

#endif
