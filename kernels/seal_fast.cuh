/*
 * seal_fast.cuh - seal_fast_kernel, the seal for G = 32, D = 64 or 128
 * and fp16/bf16 rows 16-byte aligned, with its instantiations and its
 * launch (a persistent grid of what fits on the device).  How it works
 * and why its codes are the reference's: the comment below.
 *
 * Invariants: a warp owns its items and its two shared-memory stages
 * (no __syncthreads); a code computed the fast way is kept only where
 * both bracketing roundings agree, every other code is recomputed
 * exactly (exact_code), so the images are bit-exact with seal_kernel's.
 */
#ifndef KVS_KERNELS_SEAL_FAST_CUH
#define KVS_KERNELS_SEAL_FAST_CUH

#include "seal_common.cuh"

/*
 * Fast path (G = 32, D = 64 or 128, fp16/bf16 rows 16-byte aligned): one
 * warp per item, an item being the Key or the Value tile of one group of
 * 32 tokens of one head of one block; FAST_WARPS warps per CTA, each on its
 * own items with two private shared-memory stages, the next item's rows
 * copied in with cp.async while the current one is computed, and no
 * __syncthreads.  A lane holds 16 consecutive channels (32 bytes) of
 * D/16 tokens as packed pairs:
 *   Key:   partial min/max over its tokens (packed, NaN-propagating, so a
 *          non-finite input shows in the extremes), the partials of the
 *          D/16 lanes of a channel chunk combined through shared memory,
 *          then each lane runs group_meta for D/32 channels;
 *   Value: min/max of its 16 channels per token, the two lanes of a
 *          32-channel group combined through shared memory, each lane then
 *          the D/32 groups of one token.
 * Codes are written a 32-bit word (b = 2) or two (b = 4) per lane and
 * token: 128 contiguous bytes per warp store.
 * A code is u = sat((x - origin) * 1/(levels*step)) and the integer
 * rint(u * levels * (1 -+ 2^-20)) taken from the low bits of an FFMA with
 * 1.5 * 2^23: both bracket the IEEE quotient of the reference (the
 * roundings of the quotient, of levels*step, of the reciprocal (1 ulp) and
 * of the product add up to < 5 * 2^-24 relative), so where the two agree
 * every code is the reference's; the codes where they differ (a quotient
 * within ~1e-6 of a half-integer, exact ties included, which fp16/bf16
 * inputs make common) are recomputed with __fdiv_rn exactly as quant_code
 * does.
 */
#define FAST_WARPS 4
#define FAST_MAGIC 12582912.0f /* 1.5 * 2^23 */
#define FAST_MAGIC_BITS 0x4B400000u
/* Set to 0 to send every shape to seal_kernel. */
#define SEAL_FAST_PATH 1

/* Packed pairs of input elements held as 32-bit words: NaN-propagating
 * min and max (a non-finite element shows in the extremes), and element
 * 0/1 widened to float. */
template <typename P> struct in_pair {
	static __device__ __forceinline__ P h(uint32_t a)
	{
		P v;

		memcpy(&v, &a, 4);
		return v;
	}
	static __device__ __forceinline__ uint32_t u(P v)
	{
		uint32_t a;

		memcpy(&a, &v, 4);
		return a;
	}
	static __device__ __forceinline__ uint32_t mn(uint32_t a, uint32_t b)
	{
		return u(__hmin2_nan(h(a), h(b)));
	}
	static __device__ __forceinline__ uint32_t mx(uint32_t a, uint32_t b)
	{
		return u(__hmax2_nan(h(a), h(b)));
	}
};

struct in_f16 : in_pair<__half2> {
	static __device__ __forceinline__ float get(uint32_t a, int hi)
	{
		return hi ? __high2float(h(a)) : __low2float(h(a));
	}
};

struct in_bf16 : in_pair<__nv_bfloat162> {
	static __device__ __forceinline__ float get(uint32_t a, int hi)
	{
		return __uint_as_float(hi ? a & 0xffff0000u : a << 16);
	}
};

/* Sum over the codes of a word of the magic's bits shifted to each code's
 * place: a word built from FFMA results with + starts at minus this. */
template <int BITS> static __host__ __device__ constexpr uint32_t magic_sum()
{
	uint32_t c = 0;

	for (int k = 0; k < 32 / BITS; k++)
		c += FAST_MAGIC_BITS << (k * BITS);
	return c;
}

/* Position of 16-byte segment @s of row @t in a stage (rows of 2D bytes):
 * XOR-swizzled so that the cp.async writes and the 32-byte reads of a
 * lane's chunk are free of bank conflicts. */
static __device__ __forceinline__ int seg_pos(int t, int s)
{
	return s ^ ((s >> 3) & 1) ^ (t & 1);
}

static __device__ __forceinline__ void cp_async16(uint32_t dst,
						  const void *src)
{
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n"
		     :: "r"(dst), "l"(src) : "memory");
}

/* The reference's code for one element: quant_code with the IEEE
 * quotient (@cs: the step, infinity for a constant group). */
template <int BITS>
static __device__ __noinline__ unsigned exact_code(float x, float o, float cs)
{
	const float levels = (float)((1 << BITS) - 1);
	float q = __fdiv_rn(__fsub_rn(x, o), cs);
	int c;

	q = fminf(fmaxf(q, -1.0f), levels + 1.0f);
	c = __float_as_int(__fadd_rn(q, FAST_MAGIC)) - (int)FAST_MAGIC_BITS;
	return (unsigned)min(max(c, 0), (int)levels);
}

/*
 * group_meta without branches, for metadata type MT, plus the factor codes
 * multiply by: 1 / (levels * step) within 1 ulp (MUFU.RCP), 0 for a
 * constant group, NaN (the item then takes exact_code) when levels * step
 * is outside [2^-125, 2^125], where it or its reciprocal would not be a
 * normal number with its 2^-24 relative rounding.  Non-finite extremes
 * also raise KVS_CUDA_FLAG_NONFINITE.
 */
template <int MT, int BITS>
static __device__ __forceinline__ unsigned fast_meta(float lo, float hi,
						     float *o, float *s,
						     float *cs, float *rq)
{
	const float levels = (float)((1 << BITS) - 1);
	bool nonfinite = !isfinite(lo) || !isfinite(hi);
	float mo, ms, sl, r;
	bool flat, bad;

	lo = __fadd_rn(lo, 0.0f);
	hi = __fadd_rn(hi, 0.0f);
	mo = round_meta(MT, lo);
	ms = round_meta(MT, __fdiv_rn(__fsub_rn(hi, lo), levels));
	flat = hi == lo || ms == 0.0f;
	bad = !isfinite(mo) || !isfinite(ms) ||
	      (!flat && !isfinite(fmaf(ms, levels, mo)));
	sl = __fmul_rn(ms, levels);
	asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(sl));
	*o = mo;
	*s = flat || bad ? 1.0f : ms;
	*cs = flat || bad ? INFINITY : ms;
	*rq = flat || bad ? 0.0f :
	      sl >= __int_as_float(0x01000000) &&   /* 2^-125 */
	      sl <= __int_as_float(0x7e000000) ?    /* 2^125 */
	      r : __int_as_float(0x7fc00000);
	return (nonfinite ? KVS_CUDA_FLAG_NONFINITE : 0) |
	       (bad ? KVS_CUDA_FLAG_RANGE : 0);
}

/* Stores N consecutive metadata elements (N * size a multiple of 4, the
 * first aligned to N elements) at element @i of @base. */
template <int MT, int N>
static __device__ __forceinline__ void store_meta_vec(uint8_t *base,
						      size_t i, const float *x)
{
	uint32_t w[N];

#pragma unroll
	for (int k = 0; k < N; k++) {
		if (MT == KVS_DTYPE_F32)
			w[k] = __float_as_uint(x[k]);
		else if (k % 2 == 0 && MT == KVS_DTYPE_F16)
			w[k / 2] = in_f16::u(__floats2half2_rn(x[k],
							       x[k + 1]));
		else if (k % 2 == 0)
			w[k / 2] = in_bf16::u(__floats2bfloat162_rn(x[k],
								   x[k + 1]));
	}
	if (MT == KVS_DTYPE_F32 && N == 4)
		*(uint4 *)(base + i * 4) = make_uint4(w[0], w[1], w[2], w[3]);
	else if (MT == KVS_DTYPE_F32 || N == 4)
		*(uint2 *)(base + i * (MT == KVS_DTYPE_F32 ? 4 : 2)) =
			make_uint2(w[0], w[1]);
	else
		*(uint32_t *)(base + i * 2) = w[0];
}

/* u = sat((x - origin) * rq) of channel @ch of @x (8 packed pairs). */
template <typename X>
static __device__ __forceinline__ float sat_quot(const uint32_t *x, int ch,
						 float o, float rq)
{
	const float num = __fsub_rn(X::get(x[ch / 2], ch & 1), o);
	float u;

	asm("mul.rn.sat.f32 %0, %1, %2;" : "=f"(u) : "f"(num), "f"(rq));
	return u;
}

/*
 * Codes of a lane's 16 channels of one token (@x: 8 packed pairs) into
 * BITS/2 words at @out.  @o, @rq, @cs: per channel when PERCH, else one
 * value for all 16.
 */
template <typename X, int BITS, bool PERCH>
static __device__ __forceinline__ void quant_chunk(const uint32_t *x,
						   const float *o,
						   const float *rq,
						   const float *cs, bool exact,
						   uint32_t *out)
{
	constexpr int cpw = 32 / BITS;
	constexpr float levels = (float)((1 << BITS) - 1);
	constexpr float qlo = levels * (1.0f - 9.5367431640625e-07f);
	constexpr float qhi = levels * (1.0f + 9.5367431640625e-07f);

#pragma unroll
	for (int w = 0; w < BITS / 2; w++) {
		uint32_t wl = 0u - magic_sum<BITS>(), wh = wl;
		uint32_t sum = 0u - cpw * FAST_MAGIC_BITS;

#pragma unroll
		for (int k = 0; k < cpw; k++) {
			const int ch = w * cpw + k, j = PERCH ? ch : 0;
			const float u = sat_quot<X>(x, ch, o[j], rq[j]);
			uint32_t th;

			wl += __float_as_uint(__fmaf_rn(u, qlo, FAST_MAGIC))
			      << (k * BITS);
			th = __float_as_uint(__fmaf_rn(u, qhi, FAST_MAGIC));
			if (BITS == 2)
				sum += th;
			else
				wh += th << (k * BITS);
		}
		/* b = 2: the upper codes' sum against the lower codes' (each
		 * upper code is >= its lower one) costs half an add per code
		 * where a second word costs one shift-add */
		if (BITS == 2)
			wh = __popc(wl & 0x55555555u) +
			     2 * __popc(wl & 0xaaaaaaaau);
		else
			sum = wl;
		if (exact || sum != wh) {
			/* which codes the brackets disagree on: b = 2 kept
			 * only the upper codes' sum, so pack them again */
			uint32_t diff = ~0u;

			if (!exact && BITS == 2) {
				wh = 0u - magic_sum<BITS>();
#pragma unroll
				for (int k = 0; k < cpw; k++) {
					const int ch = w * cpw + k;
					const int j = PERCH ? ch : 0;
					const float u = sat_quot<X>(x, ch, o[j],
								   rq[j]);

					wh += __float_as_uint(__fmaf_rn(
						u, qhi, FAST_MAGIC)) << (k * BITS);
				}
			}
			if (!exact)
				diff = wl ^ wh;
			/* the IEEE division for those codes only (natural
			 * ties of fp16/bf16 inputs send ~0.3% of a lane's
			 * words here, a tenth of a warp's); the loop is
			 * unrolled so that the register arrays keep constant
			 * indices (a run-time index moves them to local
			 * memory, which cost the whole kernel 1.7x) */
#pragma unroll
			for (int k = 0; k < cpw; k++) {
				const int ch = w * cpw + k, j = PERCH ? ch : 0;
				const uint32_t m = ((1u << BITS) - 1) <<
						   (k * BITS);

				if (diff & m)
					wl = (wl & ~m) |
					     exact_code<BITS>(
						     X::get(x[ch / 2], ch & 1),
						     o[j], cs[j]) << (k * BITS);
			}
		}
		out[w] = wl;
	}
}

/* Stores a lane's BITS/2 code words of one token. */
template <int BITS>
static __device__ __forceinline__ void store_words(uint32_t *at,
						   const uint32_t *w)
{
	if (BITS == 2)
		*at = w[0];
	else
		*(uint2 *)at = make_uint2(w[0], w[1]);
}

/*
 * Item (value * blocks + n) * heads + h) * S/32 + g as its digits: all the
 * Key items, then all the Value items, so that the warps of an SM, which
 * advance together, run one of the two code paths at a time (each is
 * ~20 KB of instructions; both at once thrash the instruction cache).
 */
struct fast_item {
	uint32_t value, g, h, n;
};

static __device__ __forceinline__ fast_item fast_split(const seal_params &p,
							uint32_t it)
{
	uint32_t gpt = (uint32_t)p.S / 32, half = p.blocks * p.heads * gpt;
	uint32_t value = it >= half, tile = it - value * half;
	uint32_t rest = tile / gpt, n = rest / (uint32_t)p.heads;
	fast_item c = { value, tile - rest * gpt,
			rest - n * (uint32_t)p.heads, n };

	return c;
}

/* @c + @d digit by digit (each digit of @d below its radix), so that the
 * tile loop divides only once. */
static __device__ __forceinline__ fast_item fast_add(const seal_params &p,
						      fast_item c,
						      const fast_item &d)
{
	uint32_t gpt = (uint32_t)p.S / 32, heads = (uint32_t)p.heads;

	c.g += d.g;
	if (c.g >= gpt) {
		c.g -= gpt;
		c.h++;
	}
	c.h += d.h;
	if (c.h >= heads) {
		c.h -= heads;
		c.n++;
	}
	c.n += d.n;
	if (c.n >= p.blocks) {
		c.n -= p.blocks;
		c.value++;
	}
	c.value += d.value;
	return c;
}

/* Where the rows of an item start, and which tile it is. */
struct fast_item_pos {
	const uint8_t *src;
	uint8_t *img;
	int h, g, value;
};

static __device__ __forceinline__ fast_item_pos fast_locate(
	const seal_params &p, const fast_item &c)
{
	fast_item_pos q;
	uint32_t n = c.n;
	const uint8_t *base;

	q.value = (int)c.value;
	q.g = (int)c.g;
	q.h = (int)c.h;
	if (p.src)
		base = (const uint8_t *)p.src[2 * n + q.value];
	else
		base = (const uint8_t *)(q.value ? p.values : p.keys) +
		       (int64_t)n * p.block_stride * 2;
	q.src = base + ((int64_t)q.g * 32 * p.token_stride +
			(int64_t)q.h * (q.value ? p.v_head_stride :
					 p.head_stride)) * 2;
	q.img = p.images + (uint64_t)(p.dst ? p.dst[n] : (int32_t)n) *
		p.image_stride;
	return q;
}

/* Copies the 32 rows at @src into the stage @sm: cp.async when the
 * rows are 16-byte aligned (the launcher checked the strides; an src[]
 * pointer may still not be), element by element otherwise. */
template <int D>
static __device__ __forceinline__ void fast_issue(const seal_params &p,
						  const uint8_t *src,
						  uint8_t *sm, int lane)
{
	constexpr int segs = D / 8, rpi = 32 / segs, rowb = D * 2;
	const int64_t gstride = p.token_stride * 2;

	if (((uintptr_t)src & 15) == 0) {
		const int s = lane % segs, t = lane / segs;
		uint32_t sa = (uint32_t)__cvta_generic_to_shared(sm) +
			      t * rowb + seg_pos(t, s) * 16;
		const uint8_t *ga = src + t * gstride + s * 16;

#pragma unroll
		for (int k = 0; k < segs; k++)
			cp_async16(sa + k * rpi * rowb, ga + k * rpi * gstride);
	} else {
		for (int e = lane; e < 32 * D; e += 32) {
			int t = e / D, d = e % D, s = d / 8;

			*(uint16_t *)(sm + t * rowb + seg_pos(t, s) * 16 +
				      (d % 8) * 2) =
				*(const uint16_t *)(src + t * gstride + d * 2);
		}
	}
}

/* A lane's chunk (channels 16c..16c+15) of its D/16 tokens r + i*32*16/D
 * from the stage to registers. */
template <int D>
static __device__ __forceinline__ void fast_regs(const uint8_t *sm, int lane,
						 uint32_t (*x)[8])
{
	constexpr int nc = D / 16, rpt = 32 / nc, rowb = D * 2;
	const int c = lane % nc, r = lane / nc;
	const int sw = (((2 * c) >> 3) & 1) ^ (r & 1);
	const uint8_t *a = sm + r * rowb + 32 * c + 16 * sw;
	const uint8_t *b = sm + r * rowb + 32 * c + 16 * (sw ^ 1);

#pragma unroll
	for (int i = 0; i < nc; i++) {
		uint4 u = *(const uint4 *)(a + i * rpt * rowb);
		uint4 v = *(const uint4 *)(b + i * rpt * rowb);

		memcpy(&x[i][0], &u, 16);
		memcpy(&x[i][4], &v, 16);
	}
}

/*
 * Chunk @i (run-time) of a lane's register array, through a switch: x[i]
 * itself would move the array to local memory, and unrolling the chunk
 * loop instead repeats the quantizer's ~120 instructions per chunk, which
 * the instruction cache does not hold (its stall was the largest).
 */
template <int NC>
static __device__ __forceinline__ void pick_chunk(const uint32_t (*x)[8],
						  int i, uint32_t out[8])
{
#define PICK(k)							\
	case k:							\
		for (int e = 0; e < 8; e++)			\
			out[e] = x[(k) < NC ? (k) : 0][e];	\
		break
	switch (i) {
	PICK(0); PICK(1); PICK(2); PICK(3);
	PICK(4); PICK(5); PICK(6);
	default:
		for (int e = 0; e < 8; e++)
			out[e] = x[NC - 1][e];
	}
#undef PICK
}

/* Key item: metadata per channel over the 32 tokens. */
template <typename X, int D, int BITS, int MT>
static __device__ __forceinline__ void fast_key(const seal_params &p,
						const fast_item_pos &q,
						uint8_t *sm, int lane,
						unsigned *flag)
{
	constexpr int nc = D / 16, rpt = 32 / nc, mpl = D / 32;
	constexpr int wpr = D * BITS / 32;
	const int c = lane % nc, r = lane / nc, m0 = lane * mpl;
	uint32_t x[nc][8], lo[8], hi[8], l2[mpl / 2], h2[mpl / 2];
	uint32_t *plo = (uint32_t *)sm, *phi = plo + rpt * D / 2;
	float *ko = (float *)(sm + 2048), *krq = ko + D, *kcs = krq + D;
	float o[16], rq[16];
	bool tiny = false;

	fast_regs<D>(sm, lane, x);
	__syncwarp();
#pragma unroll
	for (int j = 0; j < 8; j++) {
		lo[j] = hi[j] = x[0][j];
#pragma unroll
		for (int i = 1; i < nc; i++) {
			lo[j] = X::mn(lo[j], x[i][j]);
			hi[j] = X::mx(hi[j], x[i][j]);
		}
	}
#pragma unroll
	for (int j = 0; j < 8; j += 4) {
		uint4 u, v;

		memcpy(&u, &lo[j], 16);
		memcpy(&v, &hi[j], 16);
		*(uint4 *)&plo[r * D / 2 + c * 8 + j] = u;
		*(uint4 *)&phi[r * D / 2 + c * 8 + j] = v;
	}
	__syncwarp();
#pragma unroll
	for (int k = 0; k < mpl / 2; k++) {
		l2[k] = plo[m0 / 2 + k];
		h2[k] = phi[m0 / 2 + k];
#pragma unroll
		for (int i = 1; i < rpt; i++) {
			l2[k] = X::mn(l2[k], plo[i * D / 2 + m0 / 2 + k]);
			h2[k] = X::mx(h2[k], phi[i * D / 2 + m0 / 2 + k]);
		}
	}
	{
		size_t mi = ((size_t)q.h * (p.S / 32) + q.g) * D + m0;
		uint8_t *so = q.img + p.lay.off[KVS_SEC_KEY_ORIGIN];
		uint8_t *ss = q.img + p.lay.off[KVS_SEC_KEY_STEP];

		float mo[mpl], ms[mpl], mc[mpl], mr[mpl];

#pragma unroll
		for (int k = 0; k < mpl; k++) {
			*flag |= fast_meta<MT, BITS>(X::get(l2[k / 2], k & 1),
						     X::get(h2[k / 2], k & 1),
						     &mo[k], &ms[k], &mc[k],
						     &mr[k]);
			ko[m0 + k] = mo[k];
			krq[m0 + k] = mr[k];
			kcs[m0 + k] = mc[k];
			tiny |= mr[k] != mr[k];
		}
		store_meta_vec<MT, mpl>(so, mi, mo);
		store_meta_vec<MT, mpl>(ss, mi, ms);
	}
	bool exact = __any_sync(0xffffffffu, tiny);

	__syncwarp();
#pragma unroll
	for (int j = 0; j < 16; j++) {
		o[j] = ko[c * 16 + j];
		rq[j] = krq[c * 16 + j];
	}
	uint32_t *kc = (uint32_t *)(q.img + p.lay.off[KVS_SEC_KEY_CODES]) +
		       ((size_t)q.h * p.S + q.g * 32) * wpr + c * (BITS / 2);
#pragma unroll 1
	for (int i = 0; i < nc; i++) {
		uint32_t w[BITS / 2], xi[8];

		pick_chunk<nc>(x, i, xi);
		quant_chunk<X, BITS, true>(xi, o, rq, kcs + c * 16, exact, w);
		store_words<BITS>(kc + (r + i * rpt) * wpr, w);
	}
}

/* Value item: metadata per token and 32-channel group. */
template <typename X, int D, int BITS, int MT>
static __device__ __forceinline__ void fast_value(const seal_params &p,
						  const fast_item_pos &q,
						  uint8_t *sm, int lane,
						  unsigned *flag)
{
	constexpr int nc = D / 16, rpt = 32 / nc, mpl = D / 32;
	constexpr int wpr = D * BITS / 32, vrowb = nc * 8 + 16;
	const int c = lane % nc, r = lane / nc;
	uint32_t x[nc][8];
	float2 *vpar = (float2 *)(sm + 32 * vrowb);
	float *vcs = (float *)(vpar + 32 * mpl);
	bool tiny = false;

	fast_regs<D>(sm, lane, x);
	__syncwarp();
#pragma unroll
	for (int i = 0; i < nc; i++) {
		uint32_t l = x[i][0], h = x[i][0];

#pragma unroll
		for (int j = 1; j < 8; j++) {
			l = X::mn(l, x[i][j]);
			h = X::mx(h, x[i][j]);
		}
		*(uint2 *)(sm + (r + i * rpt) * vrowb + c * 8) =
			make_uint2(l, h);
	}
	__syncwarp();
	{
		const uint4 *row = (const uint4 *)(sm + lane * vrowb);
		size_t mi = ((size_t)q.h * p.S + q.g * 32 + lane) * mpl;
		uint8_t *so = q.img + p.lay.off[KVS_SEC_VAL_ORIGIN];
		uint8_t *ss = q.img + p.lay.off[KVS_SEC_VAL_STEP];

		float mo[mpl], ms[mpl], mc[mpl], mr[mpl];

#pragma unroll
		for (int k = 0; k < mpl; k++) {
			uint4 e = row[k];
			uint32_t l = X::mn(e.x, e.z), h = X::mx(e.y, e.w);

			l = X::mn(l, __byte_perm(l, 0, 0x1032));
			h = X::mx(h, __byte_perm(h, 0, 0x1032));
			*flag |= fast_meta<MT, BITS>(X::get(l, 0), X::get(h, 0),
						     &mo[k], &ms[k], &mc[k],
						     &mr[k]);
			vpar[lane * mpl + k] = make_float2(mo[k], mr[k]);
			vcs[lane * mpl + k] = mc[k];
			tiny |= mr[k] != mr[k];
		}
		store_meta_vec<MT, mpl>(so, mi, mo);
		store_meta_vec<MT, mpl>(ss, mi, ms);
	}
	bool exact = __any_sync(0xffffffffu, tiny);

	__syncwarp();
	uint32_t *vc = (uint32_t *)(q.img + p.lay.off[KVS_SEC_VAL_CODES]) +
		       ((size_t)q.h * p.S + q.g * 32) * wpr + c * (BITS / 2);
#pragma unroll 1
	for (int i = 0; i < nc; i++) {
		const int t = r + i * rpt, j = t * mpl + c / 2;
		float2 pr = vpar[j];
		uint32_t w[BITS / 2], xi[8];

		pick_chunk<nc>(x, i, xi);
		quant_chunk<X, BITS, false>(xi, &pr.x, &pr.y, vcs + j, exact,
					    w);
		store_words<BITS>(vc + t * wpr, w);
	}
}

template <typename X, int D, int BITS, int MT>
static __global__ void __launch_bounds__(FAST_WARPS * 32, 3)
seal_fast_kernel(const seal_params p, uint32_t items)
{
	extern __shared__ uint4 fast_smem[];
	constexpr int stage = 32 * D * 2;
	const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
	uint8_t *buf = (uint8_t *)fast_smem + w * 2 * stage;
	const uint32_t nw = gridDim.x * FAST_WARPS;
	uint32_t it = blockIdx.x * FAST_WARPS + w;
	const fast_item step = fast_split(p, nw);
	fast_item at = fast_split(p, it < items ? it : 0);
	fast_item_pos q = fast_locate(p, at), next = q;
	unsigned flag = 0;
	int k = 0;

	if (it < items)
		fast_issue<D>(p, q.src, buf, lane);
	asm volatile("cp.async.commit_group;\n" ::: "memory");
	for (; it < items; it += nw, k ^= 1, q = next) {
		if (it + nw < items) {
			at = fast_add(p, at, step);
			next = fast_locate(p, at);
			fast_issue<D>(p, next.src, buf + (k ^ 1) * stage,
				      lane);
		}
		asm volatile("cp.async.commit_group;\n" ::: "memory");
		asm volatile("cp.async.wait_group 1;\n" ::: "memory");
		__syncwarp();
		if (q.value)
			fast_value<X, D, BITS, MT>(p, q, buf + k * stage, lane,
						   &flag);
		else
			fast_key<X, D, BITS, MT>(p, q, buf + k * stage, lane,
						 &flag);
		__syncwarp();
	}
	flag = __reduce_or_sync(0xffffffffu, flag);
	if (lane == 0 && flag && p.status)
		atomicOr(p.status, flag);
}

typedef void (*seal_fast_fn)(const seal_params, uint32_t);

/* The instantiation for metadata type @mt. */
template <typename X, int D, int BITS>
static seal_fast_fn seal_fast_meta(int mt)
{
	if (mt == KVS_DTYPE_F32)
		return seal_fast_kernel<X, D, BITS, KVS_DTYPE_F32>;
	if (mt == KVS_DTYPE_F16)
		return seal_fast_kernel<X, D, BITS, KVS_DTYPE_F16>;
	return seal_fast_kernel<X, D, BITS, KVS_DTYPE_BF16>;
}

/* The instantiation for head dim @d, @bits and metadata type @mt. */
template <typename X>
static seal_fast_fn seal_fast_shape(int d, int bits, int mt)
{
	if (d == 64)
		return bits == 2 ? seal_fast_meta<X, 64, 2>(mt) :
				   seal_fast_meta<X, 64, 4>(mt);
	return bits == 2 ? seal_fast_meta<X, 128, 2>(mt) :
			   seal_fast_meta<X, 128, 4>(mt);
}

/* The fast kernel for @a, or NULL when it takes seal_kernel. */
static seal_fast_fn seal_fast_pick(const struct kvs_cuda_seal *a,
				   uint64_t items)
{
	const struct kvs_shape *s = &a->shape;

	if (!SEAL_FAST_PATH || s->group != 32 ||
	    (s->head_dim != 64 && s->head_dim != 128) ||
	    (a->in_dtype != KVS_DTYPE_F16 && a->in_dtype != KVS_DTYPE_BF16) ||
	    a->token_stride % 8 || a->head_stride % 8 ||
	    a->v_head_stride % 8 || (uintptr_t)a->images % 16 || items >= (1u << 31))
		return NULL;
	if (!a->src && (a->block_stride % 8 || (uintptr_t)a->keys % 16 ||
			(uintptr_t)a->values % 16))
		return NULL;
	if (a->in_dtype == KVS_DTYPE_BF16)
		return seal_fast_shape<in_bf16>(s->head_dim, s->bits,
						 s->meta_type);
	return seal_fast_shape<in_f16>(s->head_dim, s->bits, s->meta_type);
}

/* Launches @fn on @items, a persistent grid of what fits on the device. */
static int seal_fast_launch(seal_fast_fn fn, const seal_params &p,
			    uint32_t items, cudaStream_t stream)
{
	const size_t smem = (size_t)FAST_WARPS * 2 * 32 * p.D * 2;
	const int fit = kvs_cuda_resident_ctas((const void *)fn,
					       FAST_WARPS * 32, smem);
	uint32_t grid = (items + FAST_WARPS - 1) / FAST_WARPS;

	if (fit <= 0)
		return -KVS_ECUDA;
	if (grid > (uint32_t)fit)
		grid = (uint32_t)fit;
	fn<<<grid, FAST_WARPS * 32, smem, stream>>>(p, items);
	return KVS_CUDA_CHECK(cudaGetLastError());
}

#endif /* KVS_KERNELS_SEAL_FAST_CUH */
