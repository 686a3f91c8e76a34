/*
 * attn_generic.cuh - the generic CTA: everything the fast tiles do not
 * take.  That is the tokens past a sequence's last whole history tile (the
 * residual tail, at most the longer residual + 31 tokens) and, for other
 * formats (D != 128, 4 bits, G != 32, bf16 or fp32 metadata) or under
 * KVS_CUDA_ATTN_GENERIC, every token.  A generic CTA stages 32 tokens (or
 * 16, gen_chunk) of K and V as fp32 in shared memory, taking each token
 * from its page or its residual by the Key and the Value boundary
 * separately, and computes on the CUDA cores: a thread forms one token's
 * logits for all four heads, and holds the Value accumulators of one
 * channel quad for all four heads over a set of the chunk's tokens.  The
 * next chunk is in flight while a chunk is computed: in the fast build
 * copied whole into shared memory (raw_copy), elsewhere as raw 8-channel
 * items in registers (raw_ahead) where the types are 16-bit, or decoded
 * item by item (key8, val8) for fp32.
 *
 * Invariants: the last split of a unit takes every token left, so a
 * sequence whose residual outgrows max_resid_rows costs time, never
 * tokens; a chunk lies inside one page and one Key group wherever the raw
 * paths are taken (gen_raw_ok); each split leaves one partial, in the log2
 * domain, in workspace slot n_fast + split.
 */
#ifndef KVS_KERNELS_ATTN_GENERIC_CUH
#define KVS_KERNELS_ATTN_GENERIC_CUH

#include "attn_common.cuh"

/* Keys of channels d .. d+7 of token @tok: history or residual. */
static __device__ void key8(const attn_params &p, const kvs_cuda_seq &sq,
			    int b, int h, int tok, int d, float x[8])
{
	if ((uint32_t)tok >= sq.k_quant_len) {
		resid8(p.rdt, p.k_resid, k_resid_at(p, sq, b, h, tok, d), x);
		return;
	}
	const uint8_t *pg = page_of(p, b, tok);
	const int tt = tok % p.S, bits = p.bits;
	const uint32_t w = codes8(pg + p.lay.off[KVS_SEC_KEY_CODES] +
				  code_row(p, h, tt), d, bits);
	const size_t m = k_meta_at(p, h, tt, d);
	float o[8], st[8];

	meta8(p.meta, pg + p.lay.off[KVS_SEC_KEY_ORIGIN], m, o);
	meta8(p.meta, pg + p.lay.off[KVS_SEC_KEY_STEP], m, st);
#pragma unroll
	for (int k = 0; k < 8; k++)
		x[k] = fmaf(st[k], (float)((w >> (k * bits)) &
					   ((1u << bits) - 1)), o[k]);
}

/* Values of channels d .. d+7 of token @tok: history or residual FIFO. */
static __device__ void val8(const attn_params &p, const kvs_cuda_seq &sq,
			    int b, int h, int tok, int d, float x[8])
{
	if ((uint32_t)tok >= sq.v_quant_len) {
		resid8(p.rdt, p.v_resid, v_resid_at(p, sq, b, h, tok, d), x);
		return;
	}
	const uint8_t *pg = page_of(p, b, tok);
	const int tt = tok % p.S, bits = p.bits;
	const uint32_t w = codes8(pg + p.lay.off[KVS_SEC_VAL_CODES] +
				  code_row(p, h, tt), d, bits);
	const size_t m = v_meta_row(p, h, tt);
	const uint8_t *ob = pg + p.lay.off[KVS_SEC_VAL_ORIGIN];
	const uint8_t *sb = pg + p.lay.off[KVS_SEC_VAL_STEP];
	float o = ld_meta(p.meta, ob, m + d / p.G);
	float st = ld_meta(p.meta, sb, m + d / p.G);

#pragma unroll
	for (int k = 0; k < 8; k++) {
		if (p.G < 8 && k > 0) {
			o = ld_meta(p.meta, ob, m + (d + k) / p.G);
			st = ld_meta(p.meta, sb, m + (d + k) / p.G);
		}
		x[k] = fmaf(st, (float)((w >> (k * bits)) &
					((1u << bits) - 1)), o);
	}
}

/*
 * 16-bit element @k of @raw as float (dt f16 or bf16).
 */
static __device__ __forceinline__ float elem16(int dt, const uint4 &raw, int k)
{
	const uint32_t w = (&raw.x)[k >> 1];
	const uint32_t x = k & 1 ? w >> 16 : w & 0xffffu;

	/* both conversions and a select: no branch per element */
	const float h = __half2float(__ushort_as_half((unsigned short)x));
	return dt == KVS_DTYPE_F16 ? h : __uint_as_float(x << 16);
}

/*
 * One 8-channel item of Key and Value, loaded raw so that all of a
 * thread's loads are in flight before the first is used (decoding each
 * item as it arrives serialised eight to sixteen memory round trips per
 * 32-token chunk): a residual row, or the codes (.x) and, for the Value,
 * its origin | step << 16 (.y).  The Key's origin and step are shared by
 * the chunk's tokens and staged in shared memory once.
 */
struct raw_item {
	uint4 k, v;
};

/* Whether the raw loads apply: 16-bit residuals and metadata, a Value
 * group covering whole 8-channel items, and chunks inside one Key group
 * and one page (chunks start at multiples of 32 tokens). */
static __device__ __forceinline__ bool gen_raw_ok(const attn_params &p)
{
	return p.rdt != KVS_DTYPE_F32 && p.meta != KVS_DTYPE_F32 &&
	       p.G % 8 == 0 && p.G % TILE == 0 && p.S % TILE == 0;
}

/* Issues the loads of the item at (@tok, channels @d); @pg is the chunk's
 * page (null when the chunk is all residual). */
static __device__ __forceinline__ void raw_load(const attn_params &p,
						const kvs_cuda_seq &sq,
						const uint8_t *pg, int b,
						int h, int tok, int d,
						raw_item &r)
{
	const int tt = tok % p.S, bits = p.bits;
	const size_t row = code_row(p, h, tt);

	if ((uint32_t)tok < sq.k_quant_len)
		r.k.x = codes8(pg + p.lay.off[KVS_SEC_KEY_CODES] + row, d,
			       bits);
	else
		r.k = *reinterpret_cast<const uint4 *>(
			(const uint16_t *)p.k_resid +
			k_resid_at(p, sq, b, h, tok, d));
	if ((uint32_t)tok < sq.v_quant_len) {
		const size_t m = v_meta_row(p, h, tt) + d / p.G;
		const uint16_t *ob = reinterpret_cast<const uint16_t *>(
			pg + p.lay.off[KVS_SEC_VAL_ORIGIN]);
		const uint16_t *sb = reinterpret_cast<const uint16_t *>(
			pg + p.lay.off[KVS_SEC_VAL_STEP]);

		r.v.x = codes8(pg + p.lay.off[KVS_SEC_VAL_CODES] + row, d,
			       bits);
		r.v.y = ob[m] | (uint32_t)sb[m] << 16;
	} else {
		r.v = *reinterpret_cast<const uint4 *>(
			(const uint16_t *)p.v_resid +
			v_resid_at(p, sq, b, h, tok, d));
	}
}

/* The Keys and Values of @r, as key8() and val8() compute them; @km holds
 * the chunk's Key origins, then its steps. */
static __device__ __forceinline__ void raw_decode(const attn_params &p,
						  const kvs_cuda_seq &sq,
						  int tok, int d,
						  const raw_item &r,
						  const float *km,
						  float kx[8], float vx[8])
{
	const uint32_t mask = (1u << p.bits) - 1;

	if ((uint32_t)tok < sq.k_quant_len) {
#pragma unroll
		for (int k = 0; k < 8; k++)
			kx[k] = fmaf(km[p.D + d + k],
				     (float)((r.k.x >> (k * p.bits)) & mask),
				     km[d + k]);
	} else {
#pragma unroll
		for (int k = 0; k < 8; k++)
			kx[k] = elem16(p.rdt, r.k, k);
	}
	if ((uint32_t)tok < sq.v_quant_len) {
		const float o = elem16(p.meta, r.v, 2);
		const float st = elem16(p.meta, r.v, 3);
#pragma unroll
		for (int k = 0; k < 8; k++)
			vx[k] = fmaf(st, (float)((r.v.x >> (k * p.bits)) &
						 mask), o);
	} else {
#pragma unroll
		for (int k = 0; k < 8; k++)
			vx[k] = elem16(p.rdt, r.v, k);
	}
}

/* Eight floats to a 16-byte aligned row of shared memory, as two 16-byte
 * stores (as scalars, the stores of a warp's 8-float items, 32 bytes apart,
 * met four to a bank) */
static __device__ __forceinline__ void store8(float *dst, const float x[8])
{
	float4 *d4 = reinterpret_cast<float4 *>(dst);

	d4[0] = make_float4(x[0], x[1], x[2], x[3]);
	d4[1] = make_float4(x[4], x[5], x[6], x[7]);
}

/* Thread @tid (< 2 D / 8) stages its 8 Key metadata elements @m (origins,
 * then steps) of a history chunk at @c0 as floats in @km; then a barrier. */
static __device__ __forceinline__ void km_stage(const attn_params &p,
						const kvs_cuda_seq &sq, int c0,
						const uint4 &m, float *km)
{
	const int tid = threadIdx.x;

	if ((uint32_t)c0 < sq.k_quant_len && tid < p.D / 4)
#pragma unroll
		for (int k = 0; k < 8; k++)
			km[tid * 8 + k] = elem16(p.meta, m, k);
	__syncthreads();
}

/*
 * The fast build's generic CTA copies a whole chunk's bytes as they are
 * (cp.async) into one buffer of shared memory, one chunk ahead: per token a
 * Key and a Value row of RAW_ROW bytes (fp16/bf16 residual rows, or the 32
 * code bytes of a history token), the Value origins and steps of history
 * tokens (8 + 8 bytes), and the chunk's Key origins and steps.  Unlike the
 * items in registers (raw_ahead, half a chunk in the 4-CTA build), nothing
 * of the next chunk is left to load once the chunk starts.
 */

/* Issues the copies of the chunk at @c0 (@n tokens, page @pg) into @raw;
 * fast format only (D = 128, 2 bits, 16-bit rows and metadata). */
static __device__ __forceinline__ void raw_copy(const attn_params &p,
						const kvs_cuda_seq &sq,
						const uint8_t *pg, int b,
						int h, int c0, int n,
						uint8_t *raw)
{
	const int tid = threadIdx.x;

	/* 16-byte pieces j of token t's rows; a code row is pieces 0-1, and
	 * pieces 2-3 of a history Value carry its origins and steps */
	for (int i = tid; i < n * 16; i += WARPS * 32) {
		const int t = i >> 4, j = i & 15, tok = c0 + t;
		const int tt = tok % p.S;
		uint8_t *kr = raw + t * RAW_ROW, *vr = kr + TILE * RAW_ROW;

		/* a residual row, or the code row of section @off */
		auto row = [&](uint8_t *dst, bool resid, const void *base,
			       size_t at, uint64_t off) {
			if (resid)
				cp_async16(dst + 16 * j,
					   (const uint16_t *)base + at);
			else if (j < 2)
				cp_async16(dst + 16 * j, pg + off +
					   code_row(p, h, tt) + 16 * j);
		};
		const bool kres = (uint32_t)tok >= sq.k_quant_len;
		const bool vres = (uint32_t)tok >= sq.v_quant_len;

		row(kr, kres, p.k_resid, k_resid_at(p, sq, b, h, tok, 8 * j),
		    p.lay.off[KVS_SEC_KEY_CODES]);
		row(vr, vres, p.v_resid, v_resid_at(p, sq, b, h, tok, 8 * j),
		    p.lay.off[KVS_SEC_VAL_CODES]);
		if (!vres && j >= 2 && j < 4)
			cp_async8(raw + RAW_VM + 16 * t + 8 * (j - 2), pg +
				  (j == 2 ? p.lay.off[KVS_SEC_VAL_ORIGIN] :
					    p.lay.off[KVS_SEC_VAL_STEP]) +
				  2 * v_meta_row(p, h, tt));
	}
	/* the Key origins (pieces 0-15), then steps (16-31) */
	if (n > 0 && (uint32_t)c0 < sq.k_quant_len && tid < 32) {
		const size_t m = k_meta_at(p, h, c0 % p.S, (tid & 15) * 8);

		cp_async16(raw + RAW_KM + 16 * tid, pg +
			   (tid < 16 ? p.lay.off[KVS_SEC_KEY_ORIGIN] :
				       p.lay.off[KVS_SEC_KEY_STEP]) + 2 * m);
	}
	cp_commit();
}

/* Stages the chunk copied into @raw (raw_copy) in @kt and @vt as floats,
 * the Key metadata through @km; ends with the buffer free. */
static __device__ __forceinline__ void raw_unpack(const attn_params &p,
						  const kvs_cuda_seq &sq,
						  int c0, int n,
						  const uint8_t *raw,
						  float *km, float *kt,
						  float *vt, int pitch)
{
	const int tid = threadIdx.x;

	cp_wait<0>();
	__syncthreads();
	km_stage(p, sq, c0, tid < 32 ? *reinterpret_cast<const uint4 *>(
				 raw + RAW_KM + 16 * tid) : make_uint4(0, 0, 0, 0),
		 km);
	for (int i = tid; i < n * 16; i += WARPS * 32) {
		const int t = i >> 4, d = (i & 15) * 8, tok = c0 + t;
		const uint8_t *kr = raw + t * RAW_ROW, *vr = kr + TILE * RAW_ROW;
		raw_item r;
		float kx[8], vx[8];

		if ((uint32_t)tok < sq.k_quant_len)
			r.k.x = codes8(kr, d, p.bits);
		else
			r.k = *reinterpret_cast<const uint4 *>(kr + 2 * d);
		if ((uint32_t)tok < sq.v_quant_len) {
			const uint16_t *vm = reinterpret_cast<const uint16_t *>(
				raw + RAW_VM + 16 * t);

			r.v.x = codes8(vr, d, p.bits);
			r.v.y = vm[d / p.G] | (uint32_t)vm[4 + d / p.G] << 16;
		} else {
			r.v = *reinterpret_cast<const uint4 *>(vr + 2 * d);
		}
		raw_decode(p, sq, tok, d, r, km, kx, vx);
		store8(kt + t * pitch + d, kx);
		store8(vt + t * pitch + d, vx);
	}
	__syncthreads();
}

/*
 * A thread's first U items of a chunk and its word of the chunk's Key
 * metadata (threads 0 .. D/4-1: origins, then steps), loaded one chunk
 * ahead: their loads are in flight while the CTA computes the chunk
 * before.
 */
template <int U>
struct raw_ahead {
	raw_item r[U];
	uint4 meta;
};

/* Issues the loads of items [@base, @base + U * blockDim.x) of the chunk
 * at @c0 (@n tokens, page @pg, null when the chunk is all residual). */
template <int U>
static __device__ __forceinline__ void raw_issue(const attn_params &p,
						 const kvs_cuda_seq &sq,
						 const uint8_t *pg, int b, int h,
						 int c0, int n, int base,
						 raw_item (&r)[U])
{
	const int per_tok = p.D / 8, items = n * per_tok;

#pragma unroll
	for (int u = 0; u < U; u++) {
		const int i = base + u * blockDim.x + threadIdx.x;

		/* an item past the chunk is zero, not what the registers
		 * held: nothing stays live from an earlier chunk */
		r[u].k = r[u].v = make_uint4(0, 0, 0, 0);
		if (i < items)
			raw_load(p, sq, pg, b, h, c0 + i / per_tok,
				 i % per_tok * 8, r[u]);
	}
}

/* Decodes items [@base, @base + U * blockDim.x) of the chunk at @c0 into
 * the float rows of @kt and @vt (@km: the chunk's Key origins and steps,
 * in shared memory already). */
template <int U>
static __device__ __forceinline__ void raw_store(const attn_params &p,
						 const kvs_cuda_seq &sq,
						 int c0, int n, int base,
						 const raw_item (&r)[U],
						 const float *km, float *kt,
						 float *vt, int pitch)
{
	const int per_tok = p.D / 8, items = n * per_tok;

#pragma unroll
	for (int u = 0; u < U; u++) {
		const int i = base + u * blockDim.x + threadIdx.x;
		const int t = i / per_tok, d = i % per_tok * 8;
		float kx[8], vx[8];

		if (i >= items)
			continue;
		raw_decode(p, sq, c0 + t, d, r[u], km, kx, vx);
		store8(kt + t * pitch + d, kx);
		store8(vt + t * pitch + d, vx);
	}
}

/* Loads ahead the first items and the Key metadata of the chunk at @c0
 * (none for @n = 0). */
template <int U>
static __device__ __forceinline__ void raw_prefetch(const attn_params &p,
						    const kvs_cuda_seq &sq,
						    const uint8_t *pg, int b,
						    int h, int c0, int n,
						    raw_ahead<U> &a)
{
	const int per_tok = p.D / 8, tid = threadIdx.x;

	a.meta = make_uint4(0, 0, 0, 0);
	if (n > 0 && (uint32_t)c0 < sq.k_quant_len && tid < 2 * per_tok) {
		const int half = tid / per_tok;
		const size_t m = k_meta_at(p, h, c0 % p.S, tid % per_tok * 8);

		a.meta = *reinterpret_cast<const uint4 *>(
			pg + (half ? p.lay.off[KVS_SEC_KEY_STEP] :
				     p.lay.off[KVS_SEC_KEY_ORIGIN]) + 2 * m);
	}
	raw_issue<U>(p, sq, pg, b, h, c0, n, 0, a.r);
}

/*
 * Stages one chunk (tokens c0 .. c0 + n) in @kt and @vt as floats: its
 * first items and Key metadata from @a (loaded ahead), the rest loaded
 * U per thread, all of a batch in flight before the first is used.
 */
template <int U>
static __device__ __forceinline__ void raw_chunk(const attn_params &p,
						 const kvs_cuda_seq &sq,
						 const uint8_t *pg, int b, int h,
						 int c0, int n,
						 const raw_ahead<U> &a,
						 float *kt, float *vt,
						 float *km, int pitch)
{
	const int items = n * (p.D / 8);

	km_stage(p, sq, c0, a.meta, km);
	raw_store<U>(p, sq, c0, n, 0, a.r, km, kt, vt, pitch);
	for (int base = U * blockDim.x; base < items;
	     base += U * blockDim.x) {
		raw_item r[U];

		raw_issue<U>(p, sq, pg, b, h, c0, n, base, r);
		raw_store<U>(p, sq, c0, n, base, r, km, kt, vt, pitch);
	}
}

static __device__ __forceinline__ void va_scale(float4 &a, float s)
{
	a.x *= s;
	a.y *= s;
	a.z *= s;
	a.w *= s;
}

static __device__ __forceinline__ void va_fma(float4 &a, float w,
					      const float4 &v)
{
	a.x = fmaf(w, v.x, a.x);
	a.y = fmaf(w, v.y, a.y);
	a.z = fmaf(w, v.z, a.z);
	a.w = fmaf(w, v.w, a.w);
}

/* U: items in flight a thread (the register path); CP: the fast build's
 * whole-chunk copies (raw_copy) where the rows allow them */
template <int U, bool CP>
static __device__ __forceinline__ void generic_cta(const attn_params &p,
						   int split, int h, int sub,
						   int b, float *smem)
{
	/* rows of D + 4 floats: 16-byte aligned for float4 loads, and token
	 * rows 4 banks apart */
	const int D = p.D, pitch = D + 4, tid = threadIdx.x, gch = p.gen_chunk;
	const int hq0 = h * p.gq + sub * HPC, nh = min(HPC, p.gq - sub * HPC);
	const kvs_cuda_seq sq = p.seqs[b];
	const int T = sq.k_quant_len + sq.k_resid_len;
	const int t0 = fast_end(p, sq) + split * p.gen_tps;
	/* the last split takes everything left, so a sequence whose residual
	 * outgrows max_resid_rows costs time, never tokens */
	const int t1 = split == p.n_gen - 1 ? T : min(T, t0 + p.gen_tps);
	float *kt = smem, *vt = kt + TILE * pitch, *qs = vt + TILE * pitch;
	/* scores [token][head], then per head the running max, sum and the
	 * chunk's rescale factor */
	float *ss = smem + gen_rows(D), *ms = ss + HPC * TILE;
	float *ls = ms + HPC, *as = ls + HPC, *km = as + HPC;
	/* Value accumulators in registers: thread (vs, vc) holds channels
	 * 4 vc .. 4 vc + 3 of every head, over the chunk's tokens vs, vs + ns,
	 * ...; the token sets are summed once, at the end */
	const int qd = D / 4, ns = WARPS * 32 / qd;
	const int vc = tid % qd, vs = tid / qd;
	float4 va[HPC];
	int32_t *pg_s = reinterpret_cast<int32_t *>(km + 2 * D);
	const bool raw = gen_raw_ok(p), cp = CP && raw;
	uint8_t *rawb = reinterpret_cast<uint8_t *>(pg_s + GEN_PAGES);
	const uint32_t hist = max(sq.k_quant_len, sq.v_quant_len);
	const int page0 = t0 / p.S;
	/* a chunk's page (null when it is all residual): the first chunk's
	 * from the page table, the others' from the staged copy */
	auto chunk_page = [&](int c0) -> const uint8_t * {
		const int i = c0 / p.S - page0;

		if ((uint32_t)c0 >= hist)
			return nullptr;
		if (c0 == t0 || i >= GEN_PAGES)
			return page_of(p, b, c0);
		return p.pool + (uint64_t)pg_s[i] * p.page_stride;
	};
	/* the prologue's global loads first, its shared stores after, so
	 * that they are one round trip (the first chunk's items follow its
	 * page): the query, the page indices, the first chunk */
	constexpr int QV = HPC * 256 / (WARPS * 32);
	const uint32_t ptok = (uint32_t)(page0 + tid) * p.S;
	uint32_t qv[QV];

#pragma unroll
	for (int k = 0; k < QV; k++) {
		const int e = tid + k * WARPS * 32;

		qv[k] = e < HPC * D && e / D < nh ?
			ld_bits(p.qdt, p.q, (size_t)(b * p.Hq + hq0) * D + e) :
			0;
	}
	const int32_t pv = raw && tid < GEN_PAGES && ptok < hist &&
			   (int)ptok < t1 ?
			   p.page_table[(size_t)b * p.max_pages + page0 + tid] :
			   0;
	raw_ahead<U> ah;

	if (cp)
		raw_copy(p, sq, chunk_page(t0), b, h, t0,
			 max(0, min(gch, t1 - t0)), rawb);
	else if (raw)
		raw_prefetch<U>(p, sq, chunk_page(t0), b, h, t0,
				max(0, min(gch, t1 - t0)), ah);
	if (tid < GEN_PAGES)
		pg_s[tid] = pv;
#pragma unroll
	for (int k = 0; k < QV; k++) {
		const int e = tid + k * WARPS * 32;

		if (e < HPC * D)
			qs[e] = bits_float(p.qdt, qv[k]) * p.scale_log2;
	}
	if (tid < HPC) {
		ms[tid] = -INFINITY;
		ls[tid] = 0.0f;
	}
#pragma unroll
	for (int j = 0; j < HPC; j++)
		va[j] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
	for (int c0 = t0; c0 < t1; c0 += gch) {
		int n = min(gch, t1 - c0);

		__syncthreads();
		/* 8 channels per item, U items per thread in flight */
		const int per_tok = D / 8, items = n * per_tok;

		const int c1 = c0 + gch;

		if (cp) {
			raw_unpack(p, sq, c0, n, rawb, km, kt, vt, pitch);
			if (c0 == t0 && !p.hyb_tps)
				ATTN_PROBE_EVENT(p, 3); /* first chunk in */
			/* the next chunk's copies fly while this one is
			 * computed */
			if (c1 < t1)
				raw_copy(p, sq, chunk_page(c1), b, h, c1,
					 min(gch, t1 - c1), rawb);
		} else if (raw) {
			raw_chunk<U>(p, sq, chunk_page(c0), b, h, c0, n, ah,
				     kt, vt, km, pitch);
			if (c0 == t0 && !p.hyb_tps)
				ATTN_PROBE_EVENT(p, 3); /* first chunk in */
			/* the next chunk's first loads fly while this one
			 * is computed; past the last, none */
			raw_prefetch<U>(p, sq, chunk_page(c1), b, h, c1,
					max(0, min(gch, t1 - c1)), ah);
		}
		for (int base = 0; !raw && base < items;
		     base += U * blockDim.x) {
			float kx[U][8], vx[U][8];
#pragma unroll
			for (int u = 0; u < U; u++) {
				int i = base + u * blockDim.x + tid;

				int t = i / per_tok, d = i % per_tok * 8;

				if (i < items) {
					key8(p, sq, b, h, c0 + t, d, kx[u]);
					val8(p, sq, b, h, c0 + t, d, vx[u]);
				}
			}
#pragma unroll
			for (int u = 0; u < U; u++) {
				int i = base + u * blockDim.x + tid;

				int t = i / per_tok, d = i % per_tok * 8;
				if (i < items) {
					store8(kt + t * pitch + d, kx[u]);
					store8(vt + t * pitch + d, vx[u]);
				}
			}
		}
		__syncthreads();
		{
			/* token t's logits: P threads a token, each every P-th
			 * float4 of its Key row, for all four heads (the query
			 * rows are broadcasts), summed by shuffles */
			const int P = WARPS * 32 / gch;
			const int k = tid % P, t = tid / P;
			float2 a[HPC];

#pragma unroll
			for (int j = 0; j < HPC; j++)
				a[j] = make_float2(0.0f, 0.0f);
			if (t < n) {
				const float4 *kr = reinterpret_cast<const float4 *>(
					kt + t * pitch);

#pragma unroll 2
				for (int d = k; d < D / 4; d += P) {
					const float4 y = kr[d];

#pragma unroll
					for (int j = 0; j < HPC; j++) {
						const float4 x = reinterpret_cast<
							const float4 *>(qs + j * D)[d];

						a[j].x = fmaf(x.x, y.x, a[j].x);
						a[j].y = fmaf(x.y, y.y, a[j].y);
						a[j].x = fmaf(x.z, y.z, a[j].x);
						a[j].y = fmaf(x.w, y.w, a[j].y);
					}
				}
			}
			float s[HPC];

#pragma unroll
			for (int j = 0; j < HPC; j++)
				s[j] = a[j].x + a[j].y;
			for (int o = 1; o < P; o <<= 1)
#pragma unroll
				for (int j = 0; j < HPC; j++)
					s[j] += __shfl_xor_sync(0xffffffffu,
								s[j], o);
#pragma unroll
			for (int j = 0; j < HPC; j++)
				if (t >= n || j >= nh)
					s[j] = -INFINITY;
			if (k == 0)
				*reinterpret_cast<float4 *>(ss + t * HPC) =
					make_float4(s[0], s[1], s[2], s[3]);
		}
		__syncthreads();
		if (tid < HPC * 32) {
			int j = tid >> 5, lane = tid & 31;
			float s = lane < n ? ss[lane * HPC + j] : -INFINITY;
			float mo = ms[j], mn = fmaxf(mo, warp_max(s));
			float pr = s == -INFINITY ? 0.0f : exp2f(s - mn);
			float alpha = mo == -INFINITY ? 0.0f : exp2f(mo - mn);
			float sum = warp_sum(pr);

			ss[lane * HPC + j] = pr;
			__syncwarp();
			if (lane == 0) {
				ms[j] = mn;
				ls[j] = ls[j] * alpha + sum;
				as[j] = alpha;
			}
		}
		__syncthreads();
		if (vs < ns) {
			const float4 al = *reinterpret_cast<const float4 *>(as);

			va_scale(va[0], al.x);
			va_scale(va[1], al.y);
			va_scale(va[2], al.z);
			va_scale(va[3], al.w);
#pragma unroll 2
			for (int t = vs; t < n; t += ns) {
				const float4 v = *reinterpret_cast<const float4 *>(
					vt + t * pitch + 4 * vc);
				const float4 w = *reinterpret_cast<const float4 *>(
					ss + t * HPC);

				va_fma(va[0], w.x, v);
				va_fma(va[1], w.y, v);
				va_fma(va[2], w.z, v);
				va_fma(va[3], w.w, v);
			}
		}
	}
	__syncthreads();
	/* the token sets' accumulators meet in the (now free) chunk rows */
	float *red = smem;

	if (vs < ns)
#pragma unroll
		for (int j = 0; j < HPC; j++)
			*reinterpret_cast<float4 *>(red + (vs * HPC + j) * D +
						    4 * vc) = va[j];
	__syncthreads();
	for (int e = tid; e < nh * qd; e += blockDim.x) {
		const int j = e / qd, c = 4 * (e % qd);
		const float4 *r = reinterpret_cast<const float4 *>(
			red + j * D + c);
		float4 x = r[0];

#pragma unroll 4
		for (int s = 1; s < ns; s++)
			va_fma(x, 1.0f, r[s * HPC * D / 4]);
		*reinterpret_cast<float4 *>(partial(p, b, hq0 + j,
						    p.n_fast + split) + c) = x;
	}
	if (tid < nh) {
		float *o = partial(p, b, hq0 + tid, p.n_fast + split);

		o[D] = ms[tid];
		o[D + 1] = ls[tid];
	}
}

#endif
