/*
 * attention.cu - fused decode attention over paged 2-bit history plus
 * full-precision residuals, for a batch of sequences of different lengths.
 *
 * 1-D grid of CTAs over units (sequence, KV head, group of up to 4 query
 * heads) x splits.  Each CTA produces, for each of its query heads, an
 * unnormalised partial (acc[D], reference max m, sum l) in the log2 domain;
 * attn_merge_kernel combines the splits by log-sum-exp into one global
 * softmax per (sequence, query head).  Where the plan gives a unit one CTA
 * (the pieces plan at large batch) that CTA writes the output itself and
 * the merge is not launched.
 *
 * Fast CTAs (D=128, b=2, G=32, fp16 metadata) cover whole 32-token tiles
 * that are history for both Keys and Values.  Each warp streams its tiles
 * (3 KB: codes and metadata of K and V) through a 2-stage cp.async ring and
 * computes on tensor cores (mma.sync m16n8k16), never widening codes beyond
 * registers:
 *   Key:   s[t,j] = sum_d q[j,d] o[d] + sum_d (q[j,d] step[d]) c[t,d].  The
 *          warp builds B = q' * step (4 heads x hi/lo fp16 halves, 22
 *          significant bits, q' the query under a power-of-two scale) in
 *          shared memory once per tile (a tile is one Key group); A is the
 *          codes, masked in place.
 *   Value: out^T[d,j] += sum_t c[t,d] (p[t,j] step[t,g]) + sum_t p[t,j]
 *          o[t,g], transposed: A is the codes with channels as rows
 *          (ldmatrix.trans, masked in place), B = p * step and p * origin
 *          (fp16, columns 4 heads x 2 groups, built in registers); the
 *          columns whose group is not the row's are computed and dropped.
 * Where the tensor cores take fp16 subnormal operands exactly (probed
 * once), a code operand is one AND: the pair of subnormals c * 4^k * 2^-24,
 * whose scale the other operand or the output undoes; otherwise a
 * magic-number bias and one fma give the exact code.
 *
 * With 16-bit residuals and a plan whose generic CTAs would be a tenth of
 * the grid or more (large batch), the tokens past the last whole tile go
 * to the fast warps instead, as 8-token pieces on the tensor cores before
 * their tiles (piece_load, piece_tile): a piece's Key and Value come from
 * the codes or the residual rows per token, into the same state as tiles.
 *
 * Generic CTAs handle everything else (the residual tail, partial tiles,
 * other formats): they stage 32 tokens of K and V as fp32 in shared memory,
 * taking each token from its page or its residual by the Key and the Value
 * boundary separately; the next chunk is in flight while a chunk is
 * computed (in the fast build copied whole into shared memory, raw_copy),
 * and its page index comes from a copy staged once per CTA.
 * Both kinds of CTA issue their prologue's global loads (query, page
 * indices, sequence) together, before any of them is used.
 *
 * The cluster plan (where the units fill the device at one CTA an SM,
 * fast format, 16-bit residuals) needs no second kernel: a unit is one
 * thread-block cluster of up to 16 CTAs, one an SM, each CTA four quads of
 * four warps that run the fast path with the tail as pieces; every quad
 * sends its partial into the shared memory of the cluster's CTAs that
 * fold it, which write the output (attn_cluster_kernel).
 */
#include "common.cuh"

#include <cooperative_groups.h>
#include <math.h>

namespace cg = cooperative_groups;

#define HPC 4             /* query heads per CTA */
#define WARPS 4
#define QUADS 4           /* fast CTAs' worth of warps a cluster-plan CTA */
#define TILE 32           /* tokens per fast tile (one Key group) */
/* cp.async ring stages per warp: one tile in flight while one is computed.
 * A third stage (two in flight, ~96 KB a 4-CTA SM) kept the stream no
 * fuller and only lengthened the queue that every other load of the SM
 * waits behind: the first tiles and the residual tail's round trips
 * (docs/KERNELS.md, session 12).  -DKVS_ATTN_STAGES=n: another depth, for
 * measuring only */
#ifdef KVS_ATTN_STAGES
#define STAGES KVS_ATTN_STAGES
#else
#define STAGES 2
#endif
#define TILE_BYTES 3072
#define FAST_D 128
#define KB_PITCH 272      /* bytes per row of the Key B matrix (8 rows) */
#define P_PITCH 40        /* floats per head row of p[4][32] (conflict-free) */
/* the Key B matrix */
#define SCRATCH_BYTES (8 * KB_PITCH)
/* per-warp shared memory: stages, scratch, p[4][P_PITCH] */
#define WARP_SMEM (STAGES * TILE_BYTES + SCRATCH_BYTES + HPC * P_PITCH * 4)
/* query rows [head][w][QK_PITCH]: fp32 channels (QK_PART floats), then
 * each warp's copy of the Key B pairs (qh, ql), [warp][lane][QK_PITCH] */
#define QK_PITCH 20       /* 16 floats, padded against bank conflicts */
#define QK_PART (HPC * 8 * QK_PITCH)
#define QK_FLOATS ((1 + WARPS) * QK_PART)
/* tile byte offsets inside a stage */
#define T_KC 0
#define T_KO 1024
#define T_KS 1280
#define T_VC 1536
#define T_VO 2560
#define T_VS 2816

struct attn_params {
	int B, Hq, Hkv, D, G, bits, S, meta, gq, nsub;
	int qdt, rdt, odt;
	float scale_log2;
	struct dev_layout lay;
	const void *q;
	const uint8_t *pool;
	uint64_t page_stride;
	const int32_t *page_table;
	uint32_t max_pages;
	const struct kvs_cuda_seq *seqs;
	const void *k_resid, *v_resid;
	uint32_t k_stride, v_stride;
	void *out;
	float *ws;
	int n_fast, n_gen, n_slots;
	int fast_tps;           /* tiles per fast split */
	int gen_tps;            /* tokens per generic split, multiple of
				   gen_chunk */
	int gen_chunk;          /* tokens a generic CTA stages at a time:
				   TILE, or TILE / 2 (attn_plan) */
	int hyb_tps;            /* tiles a generic split takes after its
				   tokens (from n_fast * fast_tps on), or 0 */
	int fast_ok;
	int occ3;               /* the 3-CTA/SM build (want_occ3) */
	int pieces;             /* the tail as pieces on the fast CTAs'
				   warps (16-bit residuals), no generic
				   CTAs */
	int cluster;            /* CTAs a cluster (the cluster plan: a unit
				   a cluster, QUADS splits a CTA), or 0 */
	int quad_smem;          /* bytes of shared memory a quad */
	int cl_lanes;           /* lanes a cluster fold's output: the splits
				   rounded up to a power of two, at most 32 */
#ifdef KVS_ATTN_TRACE
	int tr;                 /* trace slot of this call */
#endif
};

/*
 * Diagnostic build only (-DKVS_ATTN_PARTS=mask, bench/attn_parts.sh): the
 * fast tile taken apart, to measure what each part costs.  Results are
 * wrong on purpose, times real.  Bits: 1 compute only (each warp's first
 * two tiles copied, then computed over and over); 2 no Key MMAs (nor their
 * code loads and ANDs); 4 no Value update; 8 no Key B operand (nor the
 * origin dot); 16 no Value origin sums; 32 copy only (no tile compute);
 * 64 the code operands by IMAD with an opaque 1 (the FMA pipe) instead of
 * the ALU's LOP3; 128 the tiles copied as always but waited for only
 * until every stage has held a tile (the stream's issue and shared-memory
 * writes beside the compute, without its latency); 256 every 16-byte copy
 * with a source size of 0 (zeros written, nothing read); 512 every tile
 * read from the first page of the CTA's list (the stream from L2); 1024
 * (with 1) the quad's tiles as bulk copies by one thread into a ring of
 * two 12 KB slots over the warps' stage areas, behind mbarriers, the
 * compute reading its first tiles as with 1 alone.
 */
#ifndef KVS_ATTN_PARTS
#define KVS_ATTN_PARTS 0
#endif
#define PART_OFF(bit) ((KVS_ATTN_PARTS & (bit)) != 0)
#if KVS_ATTN_PARTS & 64
__constant__ uint32_t parts_one[8] = { 1, 1, 1, 1, 1, 1, 1, 1 };
#endif

#ifdef KVS_ATTN_TRACE
/*
 * Diagnostic build only (-DKVS_ATTN_TRACE): %globaltimer at fixed points of
 * every warp (attention) and CTA (merge) of the last TR_CALLS calls, read
 * back by kvs_cuda_attn_trace_read().  Attention: [cta][warp][8] = kernel
 * entry, generic part done, fast part entry, prologue loaded, first tile
 * ready, tile loop done, fast part done, the warp's tile count (its SM's
 * number << 32); merge:
 * [cta][6] = entry, wait released, done, the (m, l) pairs in (the global
 * maximum known), warp 0's own splits folded, the stores begun (after the
 * warps' meeting where a CTA has more than one warp).
 */
#define TR_CALLS 10
#define TR_CTAS 2048
#define TR_ATT (TR_CTAS * WARPS * 8)
#define TR_CALL (TR_ATT + TR_CTAS * 6)
__device__ unsigned long long kvs_attn_trace[TR_CALLS * TR_CALL];

static __device__ __forceinline__ unsigned long long gtime(void)
{
	unsigned long long t;

	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

/* @v at @ev of this warp (attention) or, @merge, of this CTA (lane 0 of
 * warp 0) */
static __device__ __forceinline__ void trace_put(const attn_params &p,
						 bool merge, int ev,
						 unsigned long long v)
{
	const int warp = threadIdx.x >> 5;
	/* a cluster-plan CTA's quads count as CTAs of WARPS warps */
	const unsigned fw = blockIdx.x * (blockDim.x >> 5) + warp;

	if ((threadIdx.x & 31) || (merge ? blockIdx.x : fw / WARPS) >=
	    TR_CTAS || (merge && warp))
		return;
	kvs_attn_trace[p.tr * TR_CALL + (merge ? TR_ATT + blockIdx.x * 6 :
			 fw * 8) + ev] = v;
}
static __device__ __forceinline__ unsigned smid(void)
{
	unsigned x;

	asm volatile("mov.u32 %0, %%smid;" : "=r"(x));
	return x;
}
#define TRACE(ev) trace_put(p, false, ev, gtime())
#define TRACE_N(ev, v) trace_put(p, false, ev, v)
#define TRACE_M(ev) trace_put(p, true, ev, gtime())
#else
#define TRACE(ev) ((void)0)
#define TRACE_N(ev, v) ((void)0)
#define TRACE_M(ev) ((void)0)
#endif

/* First token the generic CTAs handle for this sequence. */
static __device__ __forceinline__ int fast_end(const attn_params &p,
					       const kvs_cuda_seq &sq)
{
	if (!p.fast_ok)
		return 0;
	return (int)(min(sq.k_quant_len, sq.v_quant_len) / TILE) * TILE;
}

/* A split's partial result: D channels, then its reference m and sum l,
 * padded to 16 bytes for the merge's vector loads. */
static __host__ __device__ __forceinline__ int ws_pitch(int D)
{
	return D + 4;
}

static __device__ __forceinline__ float *partial(const attn_params &p, int b,
						 int qh, int slot)
{
	return p.ws + ((size_t)(b * p.Hq + qh) * p.n_slots + slot) *
		ws_pitch(p.D);
}

/* Whether a unit's only CTA writes the output itself and no merge runs
 * (the pieces plan with one CTA a unit): fast_cta() and the launcher. */
static __host__ __device__ __forceinline__ bool unit_writes_out(
	const attn_params &p)
{
	return p.pieces && p.n_slots == 1;
}

/* Output element @i of the normalised sum: @x / @l, or 0 where @l is 0
 * (no token), as the merge and a unit's only CTA write it. */
static __device__ __forceinline__ void out_elem(const attn_params &p,
						size_t i, float x, float l)
{
	st_elem(p.odt, p.out, i, l > 0.0f ? x / l : 0.0f);
}

static __device__ __forceinline__ const uint8_t *page_of(const attn_params &p,
							 int b, int tok)
{
	int32_t pg = p.page_table[(size_t)b * p.max_pages + tok / p.S];

	return p.pool + (uint64_t)pg * p.page_stride;
}

/* 8 consecutive elements (16-byte aligned) of a residual row. */
static __device__ __forceinline__ void resid8(int dt, const void *base,
					      size_t at, float x[8])
{
	if (dt == KVS_DTYPE_F32) {
		float4 lo = *reinterpret_cast<const float4 *>(
			(const float *)base + at);
		float4 hi = *reinterpret_cast<const float4 *>(
			(const float *)base + at + 4);
		x[0] = lo.x; x[1] = lo.y; x[2] = lo.z; x[3] = lo.w;
		x[4] = hi.x; x[5] = hi.y; x[6] = hi.z; x[7] = hi.w;
		return;
	}
	uint4 raw = *reinterpret_cast<const uint4 *>((const uint16_t *)base +
						     at);
	const uint16_t *e = reinterpret_cast<const uint16_t *>(&raw);
#pragma unroll
	for (int k = 0; k < 8; k++)
		x[k] = ld_elem(dt, e, k);
}

/* Metadata elements i .. i+7 (i a multiple of 8, so 16-byte aligned). */
static __device__ __forceinline__ void meta8(int mt, const uint8_t *base,
					     size_t i, float x[8])
{
	resid8(mt, base, i, x);
}

/* The 8 codes of channels d .. d+7 of one packed row. */
static __device__ __forceinline__ uint32_t codes8(const uint8_t *row, int d,
						  int bits)
{
	const uint8_t *at = row + d * bits / 8;

	return bits == 2 ? *reinterpret_cast<const uint16_t *>(at) :
			   *reinterpret_cast<const uint32_t *>(at);
}

/* Where the generic path finds a token's parts, as element indices: its
 * Key and Value residual rows (channel @d), its Key metadata (per channel,
 * over its group of tokens) and its Value metadata row (per group of
 * channels); and the byte offset of its code row inside a page section. */
static __device__ __forceinline__ size_t k_resid_at(const attn_params &p,
						    const kvs_cuda_seq &sq,
						    int b, int h, int tok, int d)
{
	return ((size_t)(b * p.Hkv + h) * p.k_stride + tok - sq.k_quant_len) *
	       p.D + d;
}

static __device__ __forceinline__ size_t v_resid_at(const attn_params &p,
						    const kvs_cuda_seq &sq,
						    int b, int h, int tok, int d)
{
	return ((size_t)(b * p.Hkv + h) * p.v_stride + sq.v_resid_start +
		tok - sq.v_quant_len) * p.D + d;
}

static __device__ __forceinline__ size_t k_meta_at(const attn_params &p,
						   int h, int tt, int d)
{
	return ((size_t)h * (p.S / p.G) + tt / p.G) * p.D + d;
}

static __device__ __forceinline__ size_t v_meta_row(const attn_params &p,
						    int h, int tt)
{
	return ((size_t)h * p.S + tt) * (p.D / p.G);
}

static __device__ __forceinline__ size_t code_row(const attn_params &p,
						  int h, int tt)
{
	return ((size_t)h * p.S + tt) * (p.D * p.bits / 8);
}

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

static __device__ __forceinline__ float warp_max(float x)
{
	for (int o = 16; o; o >>= 1)
		x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
	return x;
}

static __device__ __forceinline__ float warp_sum(float x)
{
	for (int o = 16; o; o >>= 1)
		x += __shfl_xor_sync(0xffffffffu, x, o);
	return x;
}

/* ---- generic path: any format, residuals, partial tiles -------------- */

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

/* A shared-memory pointer as the 32-bit address PTX takes. */
static __device__ __forceinline__ uint32_t smem_u32(const void *x)
{
	return (uint32_t)__cvta_generic_to_shared(x);
}

/* PART 256: a source size of 0, so that nothing is read (zeros written) */
#if KVS_ATTN_PARTS & 256
#define CP16_SRC_SIZE ", 0"
#else
#define CP16_SRC_SIZE ""
#endif

static __device__ __forceinline__ void cp_async16(void *dst, const void *src)
{
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16"
		     CP16_SRC_SIZE ";\n" :: "r"(smem_u32(dst)), "l"(src));
}

static __device__ __forceinline__ void cp_async8(void *dst, const void *src)
{
	asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n"
		     :: "r"(smem_u32(dst)), "l"(src));
}

static __device__ __forceinline__ void cp_commit(void)
{
	asm volatile("cp.async.commit_group;\n" ::);
}

template <int N>
static __device__ __forceinline__ void cp_wait(void)
{
	asm volatile("cp.async.wait_group %0;\n" :: "n"(N) : "memory");
}

#if KVS_ATTN_PARTS & 1024
/* Diagnostic (PART 1024): mbarriers and bulk copies for a quad's ring */
static __device__ __forceinline__ void mbar_init(uint64_t *b, int count)
{
	asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n"
		     :: "r"(smem_u32(b)), "r"(count));
}

static __device__ __forceinline__ void mbar_arrive(uint64_t *b)
{
	asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n"
		     :: "r"(smem_u32(b)) : "memory");
}

static __device__ __forceinline__ void mbar_expect(uint64_t *b, uint32_t tx)
{
	asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n"
		     :: "r"(smem_u32(b)), "r"(tx) : "memory");
}

static __device__ __forceinline__ void mbar_wait(uint64_t *b, uint32_t par)
{
	asm volatile("{\n"
		     ".reg .pred P;\n"
		     "WAIT_%=:\n"
		     "mbarrier.try_wait.parity.shared::cta.b64 P, [%0], %1;\n"
		     "@!P bra WAIT_%=;\n"
		     "}\n" :: "r"(smem_u32(b)), "r"(par) : "memory");
}

static __device__ __forceinline__ void bulk_copy(void *dst, const void *src,
						 uint32_t n, uint64_t *b)
{
	asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::"
		     "complete_tx::bytes [%0], [%1], %2, [%3];\n"
		     :: "r"(smem_u32(dst)), "l"(src), "r"(n), "r"(smem_u32(b))
		     : "memory");
}
#endif

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
#define RAW_ROW 256
#define RAW_VM (2 * TILE * RAW_ROW)
#define RAW_KM (RAW_VM + TILE * 16)
#define RAW_BYTES (RAW_KM + 4 * FAST_D)

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

/* Page indices a generic CTA stages in shared memory (chunks past them
 * read the page table) */
#define GEN_PAGES 16

/* Floats of a generic CTA's shared memory before its scores: the chunk's
 * Key and Value rows and the query, and at least room for the Value
 * accumulators of every thread (a float4 per head), which meet there at
 * the end. */
static __host__ __device__ __forceinline__ int gen_rows(int D)
{
	const int n = 2 * TILE * (D + 4) + HPC * D, acc = 4 * HPC * WARPS * 32;

	return n > acc ? n : acc;
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
				TRACE(3);       /* first chunk staged */
			/* the next chunk's copies fly while this one is
			 * computed */
			if (c1 < t1)
				raw_copy(p, sq, chunk_page(c1), b, h, c1,
					 min(gch, t1 - c1), rawb);
		} else if (raw) {
			raw_chunk<U>(p, sq, chunk_page(c0), b, h, c0, n, ah,
				     kt, vt, km, pitch);
			if (c0 == t0 && !p.hyb_tps)
				TRACE(3);       /* first chunk staged */
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

/* ---- fast path: tensor cores over whole history tiles ---------------- */

/* D = A * B + D, m16n8k16, fp16 operands, fp32 accumulators. */
static __device__ __forceinline__ void mma16816(float c[4], uint32_t a0,
						uint32_t a1, uint32_t a2,
						uint32_t a3, uint32_t b0,
						uint32_t b1)
{
	asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
	    "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
	    : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
	    : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* Four 8x8 matrices of 16-bit elements from shared memory (lane L gives
 * the address of row L % 8 of matrix L / 8); TRANS delivers them
 * transposed. */
#define LDSM4(op) asm volatile(op " {%0,%1,%2,%3}, [%4];\n"		\
			       : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]),	\
				 "=r"(r[3]) : "r"(s) : "memory")

template <bool TRANS>
static __device__ __forceinline__ void ldsm4(uint32_t r[4], const void *p)
{
	const uint32_t s = smem_u32(p);

	if (TRANS)
		LDSM4("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16");
	else
		LDSM4("ldmatrix.sync.aligned.m8n8.x4.shared.b16");
}

/*
 * The codes at position @pos (0..7) of both 16-bit halves of a word of 16
 * packed codes (@w8 = @w >> 8 holds positions 4..7 at 0..3), as an fp16
 * MMA operand pair (low half first).  SUB: masked in place, nothing else:
 * the pair of subnormals c * 4^(pos % 4) * 2^-24, whose scale the other
 * operand or the output undoes.  Otherwise the exact value c through a
 * magic-number bias and one fma.
 */
template <bool SUB>
static __device__ __forceinline__ uint32_t code_pair(uint32_t w, uint32_t w8,
						     int pos)
{
	const uint32_t x = pos < 4 ? w : w8;
	const int k = pos & 3;

#if KVS_ATTN_PARTS & 64
	if (SUB)
		return x * parts_one[pos];
#endif
	if (SUB)
		return x & (0x00030003u << (2 * k));
	const uint32_t y = ((x >> (2 * k)) & 0x00030003u) | 0x64006400u;
	uint32_t r;

	asm("fma.rn.f16x2 %0, %1, %2, %3;\n"
	    : "=r"(r) : "r"(y), "r"(0x3C003C00u), "r"(0xE400E400u));
	return r;
}

/* 2^x for x <= 0 (the tile's probabilities and rescales): the MUFU
 * approximation alone (relative error below 2^-22), results below 2^-126
 * flushed to zero, which exp2f's range handling would keep */
static __device__ __forceinline__ float exp2_tile(float x)
{
	float y;

	asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
	return y;
}

/* log2 units of headroom the running reference keeps above the max */
#define LAZY_HEADROOM 2.0f

/* 2^n for -126 <= n <= 127, exactly: the exponent field alone */
static __device__ __forceinline__ float pow2(int n)
{
	return __uint_as_float((uint32_t)(127 + n) << 23);
}

static __device__ __forceinline__ float2 h2f(uint32_t x)
{
	return __half22float2(*reinterpret_cast<const __half2 *>(&x));
}

/*
 * Where a warp's next tile is: its page's slot in the CTA's page list and
 * its first token inside the page, plus this lane's byte offsets of the
 * tile's pieces inside a page for in-page token 0 (each grows by 32 or 8
 * bytes per token).  A warp's tiles are WARPS * TILE tokens apart, so the
 * cursor only adds, never divides.
 */
/*
 * Byte offset in a stage of its 16-byte chunk @j, for the Value codes (two
 * chunks per token) and the Key metadata rows: chunks 8..15 of every 16
 * swap in pairs, so that the transposing ldmatrix of value_update() and the
 * loads of key_operand() (8 rows 32 bytes apart) are free of bank
 * conflicts.  The cp.async copies and both readers place chunks through it.
 */
static __device__ __forceinline__ uint32_t stage_chunk(uint32_t j)
{
	return 16 * (j ^ ((j >> 3) & 1));
}

struct tile_cursor {
	int slot, tt0;
	uint32_t kc, km, vc, vm;        /* lane's source offsets */
	uint32_t d_kc, d_vc, d_km, d_vm; /* lane's stage offsets */
};

static __device__ __forceinline__ void cursor_init(tile_cursor &c,
						   const attn_params &p, int h,
						   int tile, int first_page,
						   int lane)
{
	const int tok = tile * TILE, half = lane & 15;
	const bool step = lane >= 16;   /* lanes 16..31 copy the steps */

	c.slot = tok / p.S - first_page;
	c.tt0 = tok % p.S;
	c.kc = p.lay.off[KVS_SEC_KEY_CODES] + (uint32_t)h * p.S * 32 +
	       16 * lane;
	c.vc = p.lay.off[KVS_SEC_VAL_CODES] + (uint32_t)h * p.S * 32 +
	       16 * lane;
	c.km = p.lay.off[step ? KVS_SEC_KEY_STEP : KVS_SEC_KEY_ORIGIN] +
	       (uint32_t)h * (p.S / TILE) * FAST_D * 2 + 16 * half;
	c.vm = p.lay.off[step ? KVS_SEC_VAL_STEP : KVS_SEC_VAL_ORIGIN] +
	       (uint32_t)h * p.S * 8 + 16 * half;
	c.d_kc = 16 * lane;
	const uint32_t meta = step ? T_KS - T_KO : 0;

	c.d_vc = stage_chunk(lane);
	c.d_km = meta + stage_chunk(half);
	c.d_vm = meta + 16 * half;
}

static __device__ __forceinline__ void cursor_next(tile_cursor &c,
						   const attn_params &p)
{
	c.tt0 += WARPS * TILE;
	while (c.tt0 >= p.S) {
		c.tt0 -= p.S;
		c.slot++;
	}
}

/* Issues the cp.async copies of one tile (3 KB, 6 x 16 B per lane). */
static __device__ __forceinline__ void issue_tile(const attn_params &p,
						  const tile_cursor &c,
						  const int32_t *pages,
						  uint8_t *stage)
{
	/* PART 512: every tile from the staged list's first page (L2 hits) */
	const uint8_t *pg = p.pool + (uint64_t)pages[PART_OFF(512) ? 0 :
						     c.slot] * p.page_stride;
	const uint32_t t32 = (uint32_t)c.tt0 * 32, t8 = (uint32_t)c.tt0 * 8;

	/* one 64-bit page address, then 32-bit offsets (left to itself the
	 * compiler folds each offset into its own 64-bit multiply-add) */
	asm("" : "+l"(pg));
	const uint8_t *kc = pg + (c.kc + t32), *vc = pg + (c.vc + t32);

	cp_async16(stage + T_KC + c.d_kc, kc);
	cp_async16(stage + T_KC + 512 + c.d_kc, kc + 512);
	/* Value codes and Key metadata through stage_chunk() */
	cp_async16(stage + T_VC + c.d_vc, vc);
	cp_async16(stage + T_VC + 512 + c.d_vc, vc + 512);
	/* Key metadata: one 256-byte row per 32-token group (t8 = g * 256) */
	cp_async16(stage + T_KO + c.d_km, pg + (c.km + t8));
	cp_async16(stage + T_VO + c.d_vm, pg + (c.vm + t8));
}

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
	const float a_j = PART_OFF(8) ? kq.ls :
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
	for (int pr = 0; pr < (PART_OFF(2) ? 0 : 4); pr++) {
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
		if (!PART_OFF(16))
			origin_fma(st, pr, *reinterpret_cast<const uint2 *>(
					   sg + T_VO + 8 * tok));
	}
	st.l += psum;
	__syncwarp();

	if (!PART_OFF(4))
		value_update<SUB>(sg, p_s, st, lane);
	__syncwarp();
}

/* ---- the residual tail as 8-token pieces on the tensor cores ---------- */

/*
 * Where the tokens past the last whole history tile go when the residual
 * rows are 16-bit (p.pieces): 8-token pieces, each done by one warp of a fast
 * CTA before its tiles, with the tile's operand layouts, into the warp's
 * own state (so no generic CTA and no extra partial).  A piece's Key comes
 * from the codes below k_quant_len and from the residual rows above it,
 * its Value per token from the codes below v_quant_len and from the FIFO
 * above; both parts are computed where present and the token's own is
 * selected.  Layout in the warp's stage area (both stages, free before
 * the ring starts): Key codes rows (32 B a token) at PK_C, the group's Key
 * origins and steps where a tile has them (T_KO, T_KS, for key_operand),
 * Value codes rows at PV_C, Value origins and steps (8 B a token) at PV_O
 * and PV_S, Key and Value residual rows (256 B a token) at PK_R and PV_R.
 */
#define PIECE 8
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

/*
 * The cluster plan's meeting area, at the same offset of every CTA of a
 * cluster, after its quads' shared memory: the unit's output float4 e
 * (head e / 32, channels 4 (e % 32)) is folded by CTA e % C, which
 * receives row e / C of every split s (float4 [row][split]), and the
 * (m, l) of every split's heads ([split][HPC] float2).
 */
static __host__ __device__ __forceinline__ int cl_rows(int C)
{
	return (HPC * FAST_D / 4 + C - 1) / C;
}

static __host__ __device__ __forceinline__ size_t cl_meet_bytes(int C)
{
	return (size_t)cl_rows(C) * C * QUADS * sizeof(float4) +
	       (size_t)C * QUADS * HPC * sizeof(float2);
}

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
	TRACE(2);
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
#if KVS_ATTN_PARTS & 1024
	/* the quad's four tiles an iteration as six bulk copies issued by
	 * thread 0 (12 KB: Key and Value codes 4 KB each, four 1 KB metadata
	 * rows) into a two-slot ring over the warps' stage areas, full and
	 * empty mbarriers; the compute as PART 1 (results wrong, times real) */
	__shared__ uint64_t bulk_bars[QUADS][4];
	uint64_t *bb = bulk_bars[CL ? quad : 0];
	const int mine0 = tb < te ? (te - tb + WARPS - 1) / WARPS : 0;
	tile_cursor bc;

	cursor_init(bc, p, h, tb, page0, 0);
	if (tid == 0) {
		mbar_init(&bb[0], 1);
		mbar_init(&bb[1], 1);
		mbar_init(&bb[2], WARPS);
		mbar_init(&bb[3], WARPS);
		asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
	}
	/* lane 0's cursor: its source offsets are the sections' (origins
	 * for the metadata) for token 0 of the head; the four tiles from
	 * the page's last 128 tokens where fewer are left (S >= 128, the
	 * benchmark's) */
	auto bulk_issue = [&](int it) {
		const int sl = it & 1;
		const uint8_t *pg = p.pool + (uint64_t)pages[bc.slot] *
				    p.page_stride;
		const uint32_t t0 = min((uint32_t)bc.tt0,
					(uint32_t)(p.S - WARPS * TILE));
		const uint32_t kstep = p.lay.off[KVS_SEC_KEY_STEP] -
				       p.lay.off[KVS_SEC_KEY_ORIGIN];
		const uint32_t vstep = p.lay.off[KVS_SEC_VAL_STEP] -
				       p.lay.off[KVS_SEC_VAL_ORIGIN];
		uint8_t *da = smem + 2 * sl * WARP_SMEM, *db = da + WARP_SMEM;
		const uint8_t *km = pg + bc.km + t0 * 8, *vm = pg + bc.vm + t0 * 8;

		mbar_expect(&bb[sl], 12288);
		bulk_copy(da, pg + bc.kc + t0 * 32, 4096, &bb[sl]);
		bulk_copy(db, pg + bc.vc + t0 * 32, 4096, &bb[sl]);
		bulk_copy(da + 4096, km, 1024, &bb[sl]);
		bulk_copy(da + 5120, km + kstep, 1024, &bb[sl]);
		bulk_copy(db + 4096, vm, 1024, &bb[sl]);
		bulk_copy(db + 5120, vm + vstep, 1024, &bb[sl]);
		cursor_next(bc, p);
	};
#endif
	quad_sync<CL>(quad);
	TRACE(3);
#if KVS_ATTN_PARTS & 1024
	if (tid == 0 && mine0 > 0)
		bulk_issue(0);
#endif
	TRACE_N(7, mine | (unsigned long long)smid() << 32);
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
		if (k + STAGES - 1 < mine && (!PART_OFF(1) || k == 0)) {
			issue_tile(p, cur, pages, stage[STAGES - 1]);
			cursor_next(cur, p);
		}
		cp_commit();
		if (!PART_OFF(128) || k < STAGES)
			cp_wait<STAGES - 1>();
#if KVS_ATTN_PARTS & 1024
		if (tid == 0 && k + 1 < mine0) {
			if (k > 0)
				mbar_wait(&bb[2 + ((k - 1) & 1)],
					  ((k - 1) >> 1) & 1);
			bulk_issue(k + 1);
		}
		mbar_wait(&bb[k & 1], (k >> 1) & 1);
#endif
		__syncwarp();
		if (k == 0)
			TRACE(4);
		if (!PART_OFF(32))
			fast_tile<SUB, QSH>(stage[0], kq, scratch, p_s, st,
					    lane);
#if KVS_ATTN_PARTS & 1024
		__syncwarp();
		if (lane == 0)
			mbar_arrive(&bb[2 + (k & 1)]);
#endif
		/* rotate the ring: the stage just read is refilled next */
		uint8_t *done = stage[0];
#pragma unroll
		for (int s = 0; s < STAGES - 1; s++)
			stage[s] = stage[s + 1];
		stage[STAGES - 1] = done;
	}
	cp_wait<0>();
	TRACE(5);

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
	TRACE(6);
}

/* Unit @u's sequence @b, KV head @h and query-head group @sub. */
static __device__ __forceinline__ void unit_at(const attn_params &p, int u,
					       int &b, int &h, int &sub)
{
	const int r = u % (p.Hkv * p.nsub);

	b = u / (p.Hkv * p.nsub);
	h = r / p.nsub;
	sub = r % p.nsub;
}

/*
 * 1-D grid: units (sequence, KV head, query-head group) x splits, the short
 * generic CTAs first so that the long fast ones are not left for the tail.
 */
template <bool FAST, int MIN_CTAS, bool SUB>
__global__ void __launch_bounds__(WARPS * 32, MIN_CTAS)
attn_kernel(const attn_params p)
{
	extern __shared__ __align__(16) uint8_t smem[];
	const int gen = p.n_gen * p.B * p.Hkv * p.nsub;
	int idx = blockIdx.x, n = idx < gen ? p.n_gen : p.n_fast;

	if (idx >= gen)
		idx -= gen;
	const int split = idx % n;
	int b, h, sub;

	unit_at(p, idx / n, b, h, sub);

	/* the merge may be placed now; it waits for this grid's results */
	asm volatile("griddepcontrol.launch_dependents;\n");
	TRACE(0);
	int tb = split * p.fast_tps, tps = p.fast_tps, slot = split;

	if (!FAST || (int)blockIdx.x < gen) {
		/* the 4-CTA build keeps two raw items in flight, not four,
		 * to stay within 128 registers; in the fast build the format
		 * is the fast path's, and its constants make the generic
		 * code for it smaller (shifts for divisions, no selects on
		 * the metadata type) */
		attn_params g = p;

		if (FAST) {
			g.D = FAST_D;
			g.G = TILE;
			g.bits = 2;
			g.meta = KVS_DTYPE_F16;
		}
		generic_cta<MIN_CTAS >= 4 ? 2 : 4, FAST>(g, split, h, sub, b,
			    reinterpret_cast<float *>(smem));
		TRACE(1);
		if (!FAST || !p.hyb_tps)
			return;
		/* then its share of the tiles, so that its slot does not
		 * idle while the fast CTAs finish */
		__syncthreads();
		tb = p.n_fast * p.fast_tps + split * p.hyb_tps;
		tps = p.hyb_tps;
		slot = p.n_fast + p.n_gen + split;
	}
	fast_cta<SUB, (MIN_CTAS >= 4), false>(p, tb, tps, slot, h, sub, b, smem, 0,
				      nullptr);
}

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
	/* (trace: the fold's times as a merge CTA's -- entry, released,
	 * first loads in, done) */
	TRACE(0);
	TRACE_M(0);
	fast_cta<SUB, true, true>(p, split * p.fast_tps, p.fast_tps, split, h,
				  sub, b, smem + quad * p.quad_smem, quad,
				  meet);
	cl.sync();
	TRACE_M(1);

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
			TRACE_M(3);
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
	TRACE_M(2);
}

/*
 * Whether the tensor cores take fp16 subnormal operands exactly (the SUB
 * code operands, and Key B products under 2^-14): one warp; A = 3 * 2^-24,
 * B = 1; A = 1, B = 2^-24 and 3 * 2^-24; A = B = 2^-24.
 */
__global__ void subnormal_probe(int *ok)
{
	float c[4] = { 0, 0, 0, 0 }, d[4] = { 0, 0, 0, 0 };
	float e[4] = { 0, 0, 0, 0 };
	const int lane = threadIdx.x;

	mma16816(c, 0x00030003u, 0x00030003u, 0x00030003u, 0x00030003u,
		 0x3C003C00u, 0x3C003C00u);
	mma16816(d, 0x3C003C00u, 0x3C003C00u, 0x3C003C00u, 0x3C003C00u,
		 0x00010001u, 0x00030003u);
	mma16816(e, 0x00010001u, 0x00010001u, 0x00010001u, 0x00010001u,
		 0x00010001u, 0x00010001u);
	bool good = true;

	for (int i = 0; i < 4; i++)
		good = good && c[i] == 48.0f * 0x1p-24f &&
		       d[i] == 32.0f * 0x1p-24f && e[i] == 0x1p-44f;
	if (!__all_sync(0xffffffffu, good) && lane == 0)
		*ok = 0;
}

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
 * instruction fetches (session 14: 0.2-0.4 us at batch 1; session 20's
 * trace found the stores, the one step the dry pass left out, taking
 * ~0.5 us).
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

	TRACE_M(0);
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
			TRACE_M(1);
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
			TRACE_M(3);
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
			TRACE_M(4);
		/* out_elem's l > 0 rule, as one reciprocal: its division a
		 * channel took the stores 0.48 us against 0.38-0.42 (trace,
		 * session 21) */
		const float inv = l > 0.0f ? 1.0f / l : 0.0f;

		if (nw == 1) {
			if (!dry)
				TRACE_M(5);
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
			TRACE_M(5);
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
	TRACE_M(2);
}

/* ---- host side --------------------------------------------------------- */

/*
 * Whether this device's tensor cores take subnormal operands exactly,
 * asked once by subnormal_probe.  Not asked while the stream is being
 * captured into a graph (the probe synchronises): the exact-bias operands
 * are used until it has been asked.
 */
static int subnormal_ok(cudaStream_t stream, uint32_t flags)
{
	static int known = -1;
	cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
	int *d = NULL, h = 0;

	if (flags & KVS_CUDA_ATTN_NO_SUBNORMAL)
		return 0;
	if (known >= 0)
		return known;
	if (cudaStreamIsCapturing(stream, &cs) != cudaSuccess ||
	    cs != cudaStreamCaptureStatusNone)
		return 0;
	known = 0;
	if (KVS_CUDA_CHECK(cudaMalloc((void **)&d, sizeof(int))))
		return 0;
	h = 1;
	if (!KVS_CUDA_CHECK(cudaMemcpy(d, &h, sizeof(int),
				       cudaMemcpyHostToDevice))) {
		subnormal_probe<<<1, 32>>>(d);
		if (!KVS_CUDA_CHECK(cudaMemcpy(&h, d, sizeof(int),
					       cudaMemcpyDeviceToHost)))
			known = h;
	}
	cudaFree(d);
	if (!known)
		kvs_log(KVS_LOG_INFO, "cuda attend: tensor cores flush "
			"subnormal operands; using biased operands");
	return known;
}

typedef void (*attn_fn)(const attn_params);

/* The build of the kernel for these arguments: generic only, or the fast
 * path capped at 128 registers for 4 CTAs per SM or at 168 for 3 (@occ3),
 * with subnormal or biased code operands. */
static attn_fn pick_kernel(int fast_ok, int occ3, int sub)
{
	static const attn_fn fast[2][2] = {
		{ attn_kernel<true, 4, false>, attn_kernel<true, 4, true> },
		{ attn_kernel<true, 3, false>, attn_kernel<true, 3, true> },
	};

	return !fast_ok ? attn_kernel<false, 3, false>
			: fast[occ3 != 0][sub != 0];
}

/* Bytes of dynamic shared memory of a fast CTA covering @tps tiles. */
static size_t fast_smem(int tps, int span)
{
	return (size_t)WARPS * WARP_SMEM + sizeof(float) * QK_FLOATS +
	       sizeof(int32_t) * (tps * TILE / span + 2);
}

/* @fast: the fast build's generic CTA, which also holds a chunk's bytes
 * (raw_copy) */
static size_t generic_smem(int D, bool fast)
{
	return ((size_t)gen_rows(D) + HPC * TILE + 3 * HPC + 2 * D +
		GEN_PAGES) * sizeof(float) + (fast ? RAW_BYTES : 0);
}

/* Fast CTAs that fit on the device at once. */
static int resident_slots(int fast_ok, int occ3)
{
	attn_fn fn = pick_kernel(fast_ok, occ3, 1);
	const size_t smem = fast_smem(64, 32), gen = generic_smem(FAST_D,
								  fast_ok);
	int slots = kvs_cuda_resident_ctas((const void *)fn, WARPS * 32,
					   smem > gen ? smem : gen);

	if (slots > 0)
		return slots;
	kvs_log(KVS_LOG_WARN, "cuda attend: occupancy query failed, "
		"planning for 2 CTAs on each of 132 SMs");
	return 2 * 132;
}

static int dtype_ok(int t)
{
	return t == KVS_DTYPE_F32 || t == KVS_DTYPE_F16 || t == KVS_DTYPE_BF16;
}

/* A generic CTA's 32-token chunk costs about this many fast tiles of one
 * warp (H200, version 4: ~8 us against ~2 us), its first chunk at least:
 * the chunks after it are copied while the one before is computed
 * (raw_copy, the fast build with 16-bit rows) and cost GEN_NEXT_COST (3
 * until session 17; 4 since the 3-CTA build, whose fast warps are faster,
 * runs the small batches: (1, 32K) 16.4 -> 15.5 us, one chunk a generic
 * CTA instead of two).  KVS_CUDA_GEN_COST and KVS_CUDA_GEN_COST_NEXT in
 * the environment override them, for measuring. */
#define GEN_CHUNK_COST 4
#define GEN_NEXT_COST 4

static double gen_chunk_cost(int next)
{
	static double cost[2] = { -1.0, -1.0 };

	if (cost[next] < 0.0) {
		const char *e = getenv(next ? "KVS_CUDA_GEN_COST_NEXT" :
					      "KVS_CUDA_GEN_COST");
		const double x = e ? atof(e) : 0.0;

		cost[next] = x > 0.0 && x < 100.0 ? x :
			     next ? GEN_NEXT_COST : GEN_CHUNK_COST;
	}
	return cost[next];
}

/* a generic CTA's share of the tiles costs its tiles per warp + this
 * (the fast CTA's prologue and epilogue a second time, after its chunks;
 * 2 measured slower at (1, 32K) in the 3-CTA build) */
#define HYB_COST 4

struct split_plan {
	int n_fast, n_gen;      /* CTAs per unit */
	int fast_tps;           /* tiles per fast CTA */
	int hyb_tps;            /* tiles per generic CTA after its tokens */
};

/*
 * Fast and generic splits per unit: both kinds run side by side, so the
 * plan minimises waves x the longest CTA (in fast-tile units: a fast CTA's
 * tiles per warp + a fixed cost, a generic CTA's chunks) over all the
 * splits that fit.  In a single wave a generic CTA's slot would idle once
 * its chunks are done, so it also takes a share of the tiles, sized to end
 * with the fast CTAs (its second prologue counted as HYB_COST tiles); with
 * more waves the block scheduler fills a freed slot anyway, and holding it
 * measured slower.  @force: a share of at least one tile per warp in any
 * case, for tests.  @ahead: a generic CTA copies each chunk after its first
 * while it computes the one before (GEN_NEXT_COST).  The last answer is
 * kept per thread: decode steps
 * repeat shapes.
 */
static void plan_split(int units, int slots, int tiles, int chunks,
		       int force, int ahead, struct split_plan *out)
{
	static thread_local int key[6];
	static thread_local struct split_plan ans;
	const int cap = (tiles + WARPS - 1) / WARPS;
	double best = 1e30;

	if (key[0] == units && key[1] == slots && key[2] == tiles &&
	    key[3] == chunks && key[4] == force + 1 && key[5] == ahead) {
		*out = ans;
		return;
	}
	*out = (struct split_plan){ 1, 1, tiles, 0 };
	for (int g = 1; g <= chunks; g++) {
		const double t_g = gen_chunk_cost(0) + gen_chunk_cost(ahead) *
				   ((chunks + g - 1) / g - 1) + 1;

		for (int f = 1; f <= cap && f <= 4 * slots; f++) {
			const double waves = (units * (f + g) + slots - 1) /
					     slots;
			/* t_f = F / W + 2 = t_g + H / W + HYB_COST where
			 * f F + g H covers the tiles */
			int h0 = (int)((tiles - WARPS * f *
					(t_g + HYB_COST - 2)) / (f + g));

			h0 = h0 > 0 && waves < 2 ? h0 / WARPS * WARPS : 0;
			if (force && h0 < WARPS)
				h0 = WARPS;
			for (int hy = h0; hy <= h0 + (h0 ? WARPS : 0);
			     hy += WARPS) {
				const int rest = tiles - g * hy;

				if (rest < f)
					continue;
				const int F = (rest + f - 1) / f;
				const double t_f = (F + WARPS - 1) / WARPS + 2;
				const double t_h = t_g + (hy ? (hy + WARPS - 1) /
							  WARPS + HYB_COST : 0);
				const double cost = waves *
						    (t_f > t_h ? t_f : t_h);

				if (cost < best - 1e-9) {
					best = cost;
					*out = (struct split_plan){ f, g, F,
								    hy };
				}
			}
		}
	}
	key[0] = units;
	key[1] = slots;
	key[2] = tiles;
	key[3] = chunks;
	key[4] = force + 1;
	key[5] = ahead;
	ans = *out;
}

/*
 * The plan with the tail as pieces: every CTA a fast one with an equal
 * share of the @tiles, one wave where the units fit (at most a tile or a
 * piece a warp, @np pieces a unit).
 */
static void piece_plan(int units, int slots, int tiles, int np,
		       attn_params *p)
{
	const int most = (tiles + np + WARPS - 1) / WARPS;
	int n = units >= slots ? 1 : slots / units;

	n = n > most ? most : n;
	n = n < 1 ? 1 : n;
	p->fast_tps = (tiles + n - 1) / n;
	p->n_fast = tiles > 0 ? (tiles + p->fast_tps - 1) / p->fast_tps : n;
	p->n_gen = 0;
	p->hyb_tps = 0;
	p->gen_chunk = TILE;
	p->gen_tps = TILE;
	p->n_slots = p->n_fast;
}

/* History tiles per 4-CTA slot up to which the 3-CTA build is taken */
#define OCC3_TILES_PER_SLOT 64

/*
 * The fast path's build where the flags leave it open.  The 3-CTA/SM one
 * (168 registers) where the calls' history is short beside the device: a
 * tile or more a slot, at most OCC3_TILES_PER_SLOT (16 a warp).  Each warp
 * then has few tiles, and the faster warps of that build finish first:
 * in one process against the 4-CTA build on an H200 (session 17), (1, 8K)
 * and (2, 32K) 5-6% faster, (1, 32K), (4, 32K) and (1, 128K) 2-4%.  The
 * 4-CTA one (16 warps an SM) where the warps' streams are long ((2, 128K)
 * 1% faster, (8, 32K) and (8, 128K) even) or the call is a few tiles
 * ((1, 512) 1%).  (16, 8K), at the bound, is even either way.
 */
static int want_occ3(uint32_t flags, int fast_ok, int units, int max_tiles)
{
	if (!fast_ok || (flags & KVS_CUDA_ATTN_OCC4))
		return 0;
	if (flags & KVS_CUDA_ATTN_OCC3)
		return 1;
	const int64_t tiles = (int64_t)units * max_tiles;
	const int64_t slots = resident_slots(fast_ok, 0);

	return tiles >= slots && tiles <= OCC3_TILES_PER_SLOT * slots;
}

/* Bytes of shared memory of a cluster-plan quad covering @tps tiles (a
 * fast CTA's, in 128-byte steps). */
static size_t quad_smem(int tps, int span)
{
	return (fast_smem(tps, span) + 127) / 128 * 128;
}

/*
 * The cluster plan where it fits: the largest cluster (at most 16 CTAs, at
 * most the SMs a unit, at most a tile or piece a warp) of which @units can
 * be resident at once, each quad an equal share of the @tiles and the @np
 * pieces in turn (as piece_plan's CTAs), if the grid has @least CTAs
 * (SMs) or more.  1 with @p filled, or 0.
 */
static int cluster_plan(int units, int tiles, int np, int span, int least,
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

/* Flags that force another plan than the cluster one. */
#define NOT_CLUSTER (KVS_CUDA_ATTN_OCC3 | KVS_CUDA_ATTN_OCC4 |		\
		     KVS_CUDA_ATTN_HYBRID | KVS_CUDA_ATTN_PIECES |	\
		     KVS_CUDA_ATTN_NO_PIECES | KVS_CUDA_ATTN_NO_CLUSTER)

/* Fills everything but pointers' validity; 0 or -KVS_EPARAM. */
static int attn_plan(const struct kvs_cuda_attn *a, attn_params *p)
{
	const struct kvs_shape *s = &a->shape;
	int rc = kvs_cuda_layout(s, &p->lay, NULL);

	if (rc)
		return rc;
	if (!a->batch || !s->kv_heads || a->q_heads % s->kv_heads ||
	    s->head_dim > 256 || !dtype_ok(a->dtype) ||
	    !dtype_ok(a->out_dtype) || a->page_stride % 16 ||
	    s->head_dim % 8) {
		kvs_log(KVS_LOG_ERR, "cuda attend: unsupported arguments");
		return -KVS_EPARAM;
	}
	p->B = a->batch;
	p->Hq = a->q_heads;
	p->Hkv = s->kv_heads;
	p->D = s->head_dim;
	p->G = s->group;
	p->bits = s->bits;
	p->S = s->span;
	p->meta = s->meta_type;
	p->gq = a->q_heads / s->kv_heads;
	p->nsub = (p->gq + HPC - 1) / HPC;
	p->qdt = a->dtype;
	p->rdt = a->dtype;
	p->odt = a->out_dtype;
	p->scale_log2 = a->scale * 1.4426950408889634f;
	p->fast_ok = s->head_dim == FAST_D && s->bits == 2 &&
		     s->group == TILE && s->meta_type == KVS_DTYPE_F16 &&
		     !(a->flags & KVS_CUDA_ATTN_GENERIC);

	const int units = p->B * p->Hkv * p->nsub;
	const int max_tiles = p->fast_ok ? (int)(a->max_tokens / TILE) : 0;

	p->occ3 = want_occ3(a->flags, p->fast_ok, units, max_tiles);
	const int slots = resident_slots(p->fast_ok, p->occ3);
	uint32_t rows = a->k_resid_stride > a->v_resid_stride ?
			a->k_resid_stride : a->v_resid_stride;
	/* the tail past the last whole history tile is at most the longer
	 * residual + 31 tokens */
	if (a->max_resid_rows && a->max_resid_rows < rows)
		rows = a->max_resid_rows;
	uint32_t gen_total = p->fast_ok ? rows + TILE - 1 : a->max_tokens;
	if (gen_total > a->max_tokens)
		gen_total = a->max_tokens;
	int chunks = (int)((gen_total + TILE - 1) / TILE), n_gen;

	if (chunks < 1)
		chunks = 1;
	/* the cluster plan: 16-bit residuals (the tail as pieces), and where
	 * no flag forces another, a grid that leaves at most a 32nd of the
	 * SMs idle (it has no second wave and one CTA an SM) */
	p->cluster = 0;
	if (p->fast_ok && a->dtype != KVS_DTYPE_F32 && max_tiles > 0 &&
	    !(a->flags & KVS_CUDA_ATTN_NO_CLUSTER) &&
	    ((a->flags & KVS_CUDA_ATTN_CLUSTER) || !(a->flags & NOT_CLUSTER))) {
		const int sms = kvs_cuda_sm_count();
		const int least = (a->flags & KVS_CUDA_ATTN_CLUSTER) ? 0 :
				  sms - sms / 32;

		if (sms > 0 && cluster_plan(units, max_tiles,
				(int)((gen_total + PIECE - 1) / PIECE),
				s->span, least, p))
			return 0;
	}
	struct split_plan sp = { 0, 0, 1, 0 };

	if (max_tiles > 0)
		plan_split(units, slots, max_tiles, chunks,
			   (a->flags & KVS_CUDA_ATTN_HYBRID) != 0,
			   a->dtype != KVS_DTYPE_F32 && s->span % TILE == 0,
			   &sp);
	/* with 16-bit residuals the tail goes to the fast warps as pieces
	 * where the generic CTAs would share the tiles in one wave and be a
	 * tenth of the grid or more, or would need a second wave: there the
	 * SMs that hold no generic CTA end the call (session 13).  Where
	 * generic CTAs run beside the fast ones in a wave with room (small
	 * batch), or are few ((2, 128K): 16 of 528), they stay: measured
	 * faster there. */
	p->pieces = p->fast_ok && a->dtype != KVS_DTYPE_F32 &&
		    !(a->flags & KVS_CUDA_ATTN_NO_PIECES) &&
		    max_tiles > 0 && !(a->flags & KVS_CUDA_ATTN_HYBRID) &&
		    ((a->flags & KVS_CUDA_ATTN_PIECES) ||
		     (sp.hyb_tps > 0 &&
		      10 * sp.n_gen >= sp.n_fast + sp.n_gen) ||
		     (int64_t)units * (sp.n_fast + sp.n_gen) > slots);
	if (p->pieces) {
		piece_plan(units, slots, max_tiles,
			   (int)((gen_total + PIECE - 1) / PIECE), p);
		return 0;
	}
	n_gen = max_tiles > 0 ? sp.n_gen : (2 * slots + units - 1) / units;
	n_gen = n_gen < 1 ? 1 : (n_gen > chunks ? chunks : n_gen);
	p->gen_chunk = TILE;
	p->gen_tps = TILE * ((chunks + n_gen - 1) / n_gen);
	p->n_gen = (int)((chunks * TILE + p->gen_tps - 1) / p->gen_tps);
	/* the generic CTAs' share first (their count may have shrunk), the
	 * fast CTAs cover the rest */
	p->hyb_tps = sp.hyb_tps;
	p->fast_tps = sp.fast_tps;
	p->n_fast = 0;
	if (max_tiles > 0) {
		const int rest = max_tiles - p->n_gen * p->hyb_tps;

		p->n_fast = rest > 0 ? (rest + p->fast_tps - 1) / p->fast_tps
				     : 0;
	}
	/* where every generic split is one chunk, and twice the generic CTAs
	 * fit in the same wave, half chunks: such a CTA's time is its memory
	 * round trips and one chunk's staging and compute, and at small batch
	 * the call waits for it ((1, 512): 7.2 us, the fast warps done at 4.2;
	 * session 8) */
	if (p->gen_tps == TILE && !p->hyb_tps &&
	    units * (p->n_fast + 2 * p->n_gen) <= slots) {
		p->gen_chunk = TILE / 2;
		p->gen_tps = TILE / 2;
		p->n_gen *= 2;
	}
	p->n_slots = p->n_fast + p->n_gen * (p->hyb_tps ? 2 : 1);
	return 0;
}

uint64_t kvs_cuda_attn_workspace(const struct kvs_cuda_attn *a)
{
	attn_params p;

	if (attn_plan(a, &p))
		return 0;
	return (uint64_t)p.B * p.Hq * p.n_slots * ws_pitch(p.D) *
	       sizeof(float);
}

/*
 * The merge, as a programmatic dependent launch: its CTAs are placed as
 * soon as every attention CTA has started (attn_kernel lets them at its
 * top), which hides the launch gap between the two kernels.
 */
static int merge_launch(const attn_params &p, cudaStream_t stream)
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

/* The cluster plan's one kernel: p.cluster CTAs a cluster, a cluster a
 * unit. */
static int cluster_launch(const attn_params &p, int sub, cudaStream_t stream)
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

int kvs_cuda_attend(const struct kvs_cuda_attn *a)
{
	cudaStream_t stream = (cudaStream_t)a->stream;
	attn_params p;
	int rc = attn_plan(a, &p);

	if (rc)
		return rc;
	if (!a->q || !a->seqs || !a->out || !a->workspace ||
	    a->workspace_size < kvs_cuda_attn_workspace(a) ||
	    (a->max_tokens && (!a->page_table || !a->pool)) ||
	    ((uintptr_t)a->q | (uintptr_t)a->k_resid | (uintptr_t)a->v_resid |
	     (uintptr_t)a->pool | (uintptr_t)a->workspace) % 16) {
		kvs_log(KVS_LOG_ERR, "cuda attend: missing buffers");
		return -KVS_EPARAM;
	}
	p.q = a->q;
	p.pool = a->pool;
	p.page_stride = a->page_stride;
	p.page_table = a->page_table;
	p.max_pages = a->max_pages;
	p.seqs = a->seqs;
	p.k_resid = a->k_resid;
	p.v_resid = a->v_resid;
	p.k_stride = a->k_resid_stride;
	p.v_stride = a->v_resid_stride;
	p.out = a->out;
	p.ws = (float *)a->workspace;
#ifdef KVS_ATTN_TRACE
	static int trace_call;

	p.tr = trace_call++ % TR_CALLS;
#endif

	const int sub = p.fast_ok ? subnormal_ok(stream, a->flags) : 0;

	if (p.cluster)
		return cluster_launch(p, sub, stream);
	size_t smem = generic_smem(p.D, p.fast_ok);
	size_t fast = fast_smem(max(p.fast_tps, p.hyb_tps), p.S);
	if (p.fast_ok && fast > smem)
		smem = fast;
	dim3 grid((p.n_fast + p.n_gen) * p.B * p.Hkv * p.nsub);
	kvs_log(KVS_LOG_DEBUG, "cuda attend: units %d, fast %d x %d tiles, "
		"generic %d x (%d tokens + %d tiles), grid %u, %d-CTA build, "
		"subnormal operands %d", p.B * p.Hkv * p.nsub, p.n_fast,
		p.fast_tps, p.n_gen, p.gen_tps, p.hyb_tps, grid.x,
		p.occ3 ? 3 : 4, sub);
	attn_fn fn = pick_kernel(p.fast_ok, p.occ3, sub);

	rc = kvs_cuda_grant_smem((const void *)fn, smem);
	if (!rc)
		fn<<<grid, WARPS * 32, smem, stream>>>(p);
	if (!rc)
		rc = KVS_CUDA_CHECK(cudaGetLastError());
	if (rc || unit_writes_out(p))
		return rc;
	return merge_launch(p, stream);
}

#ifdef KVS_ATTN_TRACE
/* Copies the trace (TR_CALLS x TR_CALL timestamps) to @dst and clears it. */
extern "C" int kvs_cuda_attn_trace_read(void *dst, size_t bytes)
{
	const size_t n = sizeof(unsigned long long) * TR_CALLS * TR_CALL;
	void *sym;

	if (bytes < n ||
	    KVS_CUDA_CHECK(cudaGetSymbolAddress(&sym, kvs_attn_trace)) ||
	    KVS_CUDA_CHECK(cudaMemcpy(dst, sym, n, cudaMemcpyDeviceToHost)))
		return -KVS_EPARAM;
	return KVS_CUDA_CHECK(cudaMemset(sym, 0, n));
}
#endif
