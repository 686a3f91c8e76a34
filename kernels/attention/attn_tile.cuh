/*
 * attn_tile.cuh - one 32-token history tile of the fast format (D = 128,
 * b = 2, G = 32, fp16 metadata) on the tensor cores, mma.sync m16n8k16,
 * from a stage of the copy ring into a warp's running state: the Key
 * logits, the online softmax, the Value update.  Codes are never widened
 * beyond registers:
 *   Key:   s[t,j] = sum_d q[j,d] o[d] + sum_d (q[j,d] step[d]) c[t,d].  The
 *          warp builds B = q' * step (4 heads x hi/lo fp16 halves, 22
 *          significant bits, q' the query under a power-of-two scale) in
 *          shared memory once per tile (a tile is one Key group); A is the
 *          codes, masked in place.
 *   Value: out^T[d,j] += sum_t c[t,d] (p[t,j] step[t,g]) + sum_t p[t,j]
 *          o[t,g], transposed: A is the codes with channels as rows
 *          (ldmatrix.trans, masked in place), B = p * step (fp16, columns
 *          4 heads x 2 groups, built in registers); the columns whose
 *          group is not the row's are computed and dropped, and the origin
 *          term is summed in fp32 by the lanes that hold p.
 * Where the tensor cores take fp16 subnormal operands exactly (SUB), a
 * code operand is one AND: the pair of subnormals c * 4^k * 2^-24, whose
 * scale the other operand or the output undoes; otherwise a magic-number
 * bias and one fma give the exact code.
 *
 * Invariants: the reference st.m is at or above every logit the warp has
 * seen, so every p <= 1 and the fp16 operands p * step and p * origin
 * cannot overflow; q' is within [-1, 1] and the steps are fp16, so B is
 * finite; under SUB the Value accumulators carry the codes' 4^k 2^-24,
 * which the CTA's epilogue undoes (attn_fast.cuh), and the Key sums the
 * query's scale, which kq.ls undoes.  bench/wgmma_probe.cu times
 * fast_tile() from this header as it is.
 */
#ifndef KVS_KERNELS_ATTN_TILE_CUH
#define KVS_KERNELS_ATTN_TILE_CUH

#include "attn_common.cuh"

/* Lane (h, w)'s query channels 16w .. 16w+15 of head h, scaled to log2
 * units (origin dot), and as the Key B operand's fp16 pairs (key_operand),
 * in registers or (QSH, the 4-CTA build) reread from the warp's own copy
 * in shared memory at @qsh for every tile; ls undoes the B operand's scale
 * for head ti, the lane's logit column. */
struct key_query {
	float q[16];
	uint4 qp[4];            /* qh[2i], qh[2i+1], ql[2i], ql[2i+1] */
	const uint4 *qsh;       /* the same, in shared memory */
	float ls;
};

struct fast_state {
	float acc[8][4];        /* value MMA accumulators (value_update) */
	float so[4];            /* lane-partial sum p*origin per group */
	float m, l;             /* reference max, lane-partial sum; head ti */
};

/* One word of the Key B operand: the fp16 pair @sp (two channels' steps)
 * times the query pair split as @qh + @ql, as @hi + @lo: hi = qh * sp
 * rounded, lo = ql * sp + the exact error of hi (key_operand below). */
static __device__ __forceinline__ void step_split(uint32_t qh, uint32_t ql,
						  uint32_t sp, uint32_t &hi,
						  uint32_t &lo)
{
	uint32_t r;

	asm("mul.rn.f16x2 %0, %1, %2;\n" : "=r"(hi) : "r"(qh), "r"(sp));
	asm("{\n\t.reg .b32 t;\n\tneg.f16x2 t, %3;\n\t"
	    "fma.rn.f16x2 %0, %1, %2, t;\n}\n"
	    : "=r"(r) : "r"(qh), "r"(sp), "r"(hi));
	asm("fma.rn.f16x2 %0, %1, %2, %3;\n" : "=r"(lo) : "r"(ql), "r"(sp),
	    "r"(r));
}

/*
 * Key B operand of one tile, built by the warp together: lane (h, w) takes
 * the 16 channels 16w .. 16w+15 of head h in the pairs (s, 8 + s) that are
 * one word of the matrix @kb (rows 2h: hi, 2h+1: lo; channel 16w + 8e + s
 * at k = 16s + 8(w&1) + 2(w>>1) + e, the K order of the A side).  B is
 * q' * step in fp16 as hi + lo, q' the query scaled into [-1, 1] and split
 * once per CTA into fp16 pairs @qh + @ql: hi = qh * step rounded, lo = ql *
 * step + the exact error of hi, three packed fp16 operations per pair
 * (22 significant bits; products under 2^-14 are subnormals, absolute error
 * 2^-25 of the scale of q').  Returns the head's origin dot sum_d q[d] o[d]
 * (log2 units, fp32), summed over the head's eight lanes.
 */
static __device__ __forceinline__ float key_operand(const uint8_t *sg,
						    const float (&q)[16],
						    const uint32_t (&qh)[8],
						    const uint32_t (&ql)[8],
						    uint8_t *kb, int lane)
{
	const int h = lane >> 3, w = lane & 7;
	const int word = 4 * (w & 1) + (w >> 1);
	uint32_t *hi_row = reinterpret_cast<uint32_t *>(kb + 2 * h * KB_PITCH);
	uint32_t *lo_row = reinterpret_cast<uint32_t *>(kb + (2 * h + 1) *
							KB_PITCH);
	uint32_t sw[2][4], ow[2][4];
	float ao[4] = { 0.0f, 0.0f, 0.0f, 0.0f };

#pragma unroll
	for (int i = 0; i < 2; i++) {
		const uint32_t at = stage_chunk(2 * w + i);
		const uint4 s4 = *reinterpret_cast<const uint4 *>(sg + T_KS +
								  at);
		const uint4 o4 = *reinterpret_cast<const uint4 *>(sg + T_KO +
								  at);

		sw[i][0] = s4.x; sw[i][1] = s4.y; sw[i][2] = s4.z;
		sw[i][3] = s4.w;
		ow[i][0] = o4.x; ow[i][1] = o4.y; ow[i][2] = o4.z;
		ow[i][3] = o4.w;
	}
#pragma unroll
	for (int e = 0; e < 4; e++) {
#pragma unroll
		for (int i = 0; i < 2; i++) {
			const int c = 8 * i + 2 * e;
			const float2 of = h2f(ow[i][e]);

			ao[c & 3] = fmaf(q[c], of.x, ao[c & 3]);
			ao[(c + 1) & 3] = fmaf(q[c + 1], of.y, ao[(c + 1) & 3]);
		}
#pragma unroll
		for (int hs = 0; hs < 2; hs++) {
			const int s = 2 * e + hs;
			const uint32_t sp = __byte_perm(sw[0][e], sw[1][e],
							hs ? 0x7632 : 0x5410);
			uint32_t hi, lo;

			step_split(qh[s], ql[s], sp, hi, lo);
			hi_row[8 * s + word] = hi;
			lo_row[8 * s + word] = lo;
		}
	}
	float a = (ao[0] + ao[1]) + (ao[2] + ao[3]);

	a += __shfl_xor_sync(0xffffffffu, a, 1);
	a += __shfl_xor_sync(0xffffffffu, a, 2);
	a += __shfl_xor_sync(0xffffffffu, a, 4);
	return a;
}

/* B of the Value codes' MMA for tokens t, t + 1 (their probabilities @pp
 * of head n / 2, their origins and steps @s4 as staged: x, y token t's
 * groups 0-1, 2-3; z, w token t + 1's): p * step of group 2 hf + n % 2,
 * for each channel half hf. */
static __device__ __forceinline__ void value_b(float2 pp, uint4 s4, int n,
					       uint32_t (&bs)[2])
{
	const uint32_t sel = (n & 1) ? 0x7632u : 0x5410u;
	const __half2 p2 = __floats2half2_rn(pp.x, pp.y);
	const uint32_t sp[2] = { __byte_perm(s4.x, s4.z, sel),
				 __byte_perm(s4.y, s4.w, sel) };

#pragma unroll
	for (int hf = 0; hf < 2; hf++) {
		const __half2 a = __hmul2(p2,
			*reinterpret_cast<const __half2 *>(&sp[hf]));

		bs[hf] = *reinterpret_cast<const uint32_t *>(&a);
	}
}

/* st.so[g] += p * origin[g] for a token's four Value origins @ow (fp16). */
static __device__ __forceinline__ void origin_fma(fast_state &st, float pr,
						  uint2 ow)
{
	const float2 o01 = h2f(ow.x), o23 = h2f(ow.y);

	st.so[0] = fmaf(pr, o01.x, st.so[0]);
	st.so[1] = fmaf(pr, o01.y, st.so[1]);
	st.so[2] = fmaf(pr, o23.x, st.so[2]);
	st.so[3] = fmaf(pr, o23.y, st.so[3]);
}

/*
 * Value update of one tile, transposed: out^T[d, j] += sum_t c[t,d]
 * (p[t,j] step[t,g(d)]) + sum_t p[t,j] origin[t,g(d)].
 *
 * A is the codes with channels as rows: ldmatrix.trans over the tile's
 * Value codes (8 tokens x 8 16-bit units of 8 channels per matrix) gives
 * lane (gi, ti) tokens 2ti, 2ti+1 of unit gi in one register, and the code
 * at position k of both halves is one AND (code_pair).  M-block (hf, k)
 * is channel half hf (64 channels, groups 2hf and 2hf+1), rows gi =
 * position k and gi + 8 = position k + 4 of unit gi: channel 64 hf + 8 gi
 * + k (+ 4), in group 2 hf + gi / 4.
 * B is p * step in fp16, column n = 2 j + gl for head j and group 2 hf +
 * gl, built in registers: lane (n, ti) takes p of tokens 2ti, 2ti+1 (+8)
 * of head n / 2 from @p_s and the steps of its group from the tile.  Of an
 * M-block's output a lane keeps, for head ti, the column of its rows' group
 * (half the products are dropped, against a quarter in the other order).
 * The origin term sum_t p[t,j] origin[t,g] is not here: fast_tile() sums it
 * in fp32 on the lanes that hold p.
 */
template <bool SUB>
static __device__ __forceinline__ void value_update(const uint8_t *sg,
						    const float *p_s,
						    fast_state &st, int lane)
{
	const int ti = lane & 3, n = lane >> 2;
	const float *ph = p_s + (n >> 1) * P_PITCH + 2 * ti;
	/* codes: matrix L / 8 = (half L / 16, tokens +8 if L & 8); the next
	 * 16 tokens are 512 bytes on, swizzled alike */
	const uint8_t *vrow = sg + T_VC +
			      stage_chunk(2 * ((lane & 7) + (lane & 8)) +
					  ((lane >> 4) & 1));

#pragma unroll
	for (int kb = 0; kb < 2; kb++) {
		uint32_t r[4], r8[4];

		ldsm4<true>(r, vrow + 512 * kb);
#pragma unroll
		for (int i = 0; i < 4; i++)
			r8[i] = r[i] >> 8;
		/* B: tokens 16 kb + 2 ti (+1) and (+8, +9) */
		uint32_t bs[2][2];
#pragma unroll
		for (int e = 0; e < 2; e++) {
			const int t = 16 * kb + 2 * ti + 8 * e;
			const float2 pp = *reinterpret_cast<const float2 *>(
				ph + 16 * kb + 8 * e);
			uint32_t be[2];

			value_b(pp, *reinterpret_cast<const uint4 *>(
					sg + T_VS + 8 * t), n, be);
			bs[0][e] = be[0];
			bs[1][e] = be[1];
		}
#pragma unroll
		for (int hf = 0; hf < 2; hf++) {
#pragma unroll
			for (int k = 0; k < 4; k++)
				mma16816(st.acc[4 * hf + k],
					code_pair<SUB>(r[2 * hf], r8[2 * hf], k),
					code_pair<SUB>(r[2 * hf], r8[2 * hf], k + 4),
					code_pair<SUB>(r[2 * hf + 1], r8[2 * hf + 1], k),
					code_pair<SUB>(r[2 * hf + 1], r8[2 * hf + 1], k + 4),
					bs[hf][0], bs[hf][1]);
		}
	}
}

/* The Key B operand of the group staged at @sg (key_operand, from the
 * query's pairs in registers or, QSH, shared memory) in @scratch; returns
 * the origin dot of head ti, the lane's logit column. */
template <bool QSH>
static __device__ __forceinline__ float key_b(const uint8_t *sg,
					      const key_query &kq,
					      uint8_t *scratch, int lane)
{
	uint32_t qh[8], ql[8];

#pragma unroll
	for (int i = 0; i < 4; i++) {
		const uint4 t = QSH ? kq.qsh[i] : kq.qp[i];

		qh[2 * i] = t.x; qh[2 * i + 1] = t.y;
		ql[2 * i] = t.z; ql[2 * i + 1] = t.w;
	}
	const float a_h = key_operand(sg, kq.q, qh, ql, scratch, lane);
	const float a_j = __shfl_sync(0xffffffffu, a_h, 8 * (lane & 3));

	__syncwarp();
	return a_j;
}

/* The online softmax's reference for head ti: st.m is at or above every
 * logit so far and is raised only when one (@tmax, this lane's largest)
 * passes it, then with LAZY_HEADROOM to spare, the lane's accumulators
 * (its own head ti's) and sums rescaled; one vote tells most tiles that
 * nothing passed, without the cross-lane max. */
static __device__ __forceinline__ void raise_ref(fast_state &st, float tmax)
{
	if (__any_sync(0xffffffffu, tmax > st.m)) {
		tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 4));
		tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 8));
		tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 16));
		const float m_new = tmax > st.m ? tmax + LAZY_HEADROOM : st.m;
		const float alpha = exp2_tile(st.m - m_new);

		st.l *= alpha;
		st.m = m_new;
#pragma unroll
		for (int nt = 0; nt < 8; nt++)
#pragma unroll
			for (int e = 0; e < 4; e++)
				st.acc[nt][e] *= alpha;
#pragma unroll
		for (int g = 0; g < 4; g++)
			st.so[g] *= alpha;
	}
}

/* One 32-token tile from a stage: logits, online softmax, value update. */
template <bool SUB, bool QSH>
static __device__ __forceinline__ void fast_tile(const uint8_t *sg,
						 const key_query &kq,
						 uint8_t *scratch, float *p_s,
						 fast_state &st, int lane)
{
	const int gi = lane >> 2, ti = lane & 3;

	/* Key: B operand through shared memory, A from the codes */
	const float a_j = ATTN_PROBE_OMIT(8) ? kq.ls :
			  key_b<QSH>(sg, kq, scratch, lane);
	/* per 16-token M-block, one accumulator chain of eight MMAs; each
	 * ldmatrix of B (two K-blocks) serves both M-blocks */
	const uint8_t *brow = scratch + (lane & 7) * KB_PITCH +
			      16 * (lane >> 3);
	uint2 w0[2], w1[2];
	float c[2][4];
#pragma unroll
	for (int mb = 0; mb < 2; mb++) {
		w0[mb] = *reinterpret_cast<const uint2 *>(
			sg + T_KC + (gi + 16 * mb) * 32 + 8 * ti);
		w1[mb] = *reinterpret_cast<const uint2 *>(
			sg + T_KC + (gi + 8 + 16 * mb) * 32 + 8 * ti);
#pragma unroll
		for (int e = 0; e < 4; e++)
			c[mb][e] = 0.0f;
	}
#pragma unroll
	for (int pr = 0; pr < (ATTN_PROBE_OMIT(2) ? 0 : 4); pr++) {
		uint32_t b[4];

		ldsm4<false>(b, brow + 64 * pr);
#pragma unroll
		for (int hs = 0; hs < 2; hs++)
#pragma unroll
			for (int mb = 0; mb < 2; mb++) {
				const int s = 2 * pr + hs;
				const uint2 x0 = w0[mb], x1 = w1[mb];

				mma16816(c[mb],
					 code_pair<SUB>(x0.x, x0.x >> 8, s),
					 code_pair<SUB>(x1.x, x1.x >> 8, s),
					 code_pair<SUB>(x0.y, x0.y >> 8, s),
					 code_pair<SUB>(x1.y, x1.y >> 8, s),
					 b[2 * hs], b[2 * hs + 1]);
			}
	}
	float logit[4];
#pragma unroll
	for (int mb = 0; mb < 2; mb++) {
		logit[2 * mb] = fmaf(c[mb][0] + c[mb][1], kq.ls, a_j);
		logit[2 * mb + 1] = fmaf(c[mb][2] + c[mb][3], kq.ls, a_j);
	}

	/* online softmax for head ti over the warp's tokens.  st.m is a
	 * reference at or above every logit so far, raised only when a logit
	 * passes it, and then with LAZY_HEADROOM to spare: p <= 1 always (the
	 * fp16 operands p * step and p * origin cannot overflow), and on most
	 * tiles no logit passes, which one vote tells without the cross-lane
	 * max or a rescale */
	float tmax = fmaxf(fmaxf(logit[0], logit[1]),
			   fmaxf(logit[2], logit[3]));
	raise_ref(st, tmax);
	float psum = 0.0f;
#pragma unroll
	for (int r = 0; r < 4; r++) {
		/* logit[r] is token gi + 8 * (r's row): rows 0, 8, 16, 24 */
		const int tok = gi + 8 * (r & 1) + 16 * (r >> 1);
		const float pr = exp2_tile(logit[r] - st.m);
		/* the token's Value origins, groups 0-1 and 2-3 */
		psum += pr;
		p_s[ti * P_PITCH + tok] = pr;
		if (!ATTN_PROBE_OMIT(16))
			origin_fma(st, pr, *reinterpret_cast<const uint2 *>(
					   sg + T_VO + 8 * tok));
	}
	st.l += psum;
	__syncwarp();

	if (!ATTN_PROBE_OMIT(4))
		value_update<SUB>(sg, p_s, st, lane);
	__syncwarp();
}

/* The pair (x0 low, x1 high) in fp16, or (@bf) bf16. */
static __device__ __forceinline__ uint32_t pack2(bool bf, float x0, float x1)
{
	if (bf) {
		const __nv_bfloat162 h = __floats2bfloat162_rn(x0, x1);

		return *reinterpret_cast<const uint32_t *>(&h);
	}
	const __half2 h = __floats2half2_rn(x0, x1);

	return *reinterpret_cast<const uint32_t *>(&h);
}

static __device__ __forceinline__ float2 unpack2(bool bf, uint32_t x)
{
	if (bf)
		return __bfloat1622float2(
			*reinterpret_cast<const __nv_bfloat162 *>(&x));
	return h2f(x);
}

/* x0, x1 in the operand pair of column @lo: its high part (even column),
 * or what that leaves (odd column) -- a B operand's hi / lo split. */
static __device__ __forceinline__ uint32_t split2(bool bf, bool lo, float x0,
						  float x1)
{
	const uint32_t h = pack2(bf, x0, x1);

	if (!lo)
		return h;
	const float2 f = unpack2(bf, h);

	return pack2(bf, x0 - f.x, x1 - f.y);
}

/* The rest of lane (h, w)'s key_query once kq.q holds its 16 channels
 * and @mx their largest |q|: the head's exponent (over its eight lanes),
 * q' split into fp16 pairs qh + ql, the warp's own copy at @row_at() (QSH;
 * called where it is needed, which keeps its address arithmetic out of the
 * way of the split's), the logit scale for head ti (fast_cta). */
template <bool SUB, bool QSH, typename ROW>
static __device__ __forceinline__ void kq_split(key_query &kq, float mx,
						ROW row_at, int ti)
{
	int ex = 0;

	mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
	mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
	mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
	/* frexpf's exponent from the bits, clamped so that every power of
	 * two below is a normal float (queries under 2^-121 are then scaled
	 * less than fully; NaN compares false) */
	if (mx > 0.0f)
		ex = min(max((int)(__float_as_uint(mx) >> 23) - 126, -120),
			 100);
	uint32_t qh[8], ql[8];

#pragma unroll
	for (int s = 0; s < 8; s++) {
		const float f = pow2(SUB ? -ex - 2 * (s & 3) : -ex);
		const float a = kq.q[s] * f, c = kq.q[8 + s] * f;

		qh[s] = split2(false, false, a, c);
		ql[s] = split2(false, true, a, c);
	}
	/* the warp's own copy (one copy written by every warp, the same
	 * values, was a race that racecheck reports) */
	uint4 *row = row_at();

	kq.qsh = row;
#pragma unroll
	for (int i = 0; i < 4; i++) {
		kq.qp[i] = make_uint4(qh[2 * i], qh[2 * i + 1], ql[2 * i],
				      ql[2 * i + 1]);
		if (QSH)
			row[i] = kq.qp[i];
	}
	/* logit = MMA sum * 2^(24 (SUB) + ex) for head ti */
	kq.ls = __shfl_sync(0xffffffffu, pow2((SUB ? 24 : 0) + ex), 8 * ti);
}

#endif
