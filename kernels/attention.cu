/*
 * attention.cu - fused decode attention over paged 2-bit history plus
 * full-precision residuals, for a batch of sequences of different lengths.
 *
 * Grid: x = split (fast splits, then generic splits), y = (KV head, group
 * of up to 4 query heads), z = sequence.  Each CTA produces, for each of its
 * query heads, an unnormalised partial (acc[D], running max m, sum l) in the
 * log2 domain; attn_merge_kernel combines the splits by log-sum-exp into
 * one global softmax per (sequence, query head).
 *
 * Fast CTAs (D=128, b=2, G=32, fp16 metadata) cover whole 32-token tiles
 * that are history for both Keys and Values.  Each warp streams its tiles
 * (3 KB: codes and metadata of K and V) through a 3-stage cp.async ring and
 * computes on tensor cores, never widening codes beyond registers:
 *   Key:   s[t,j] = sum_d q[j,d] o[d] + sum_d (q[j,d] step[d]) c[t,d]; the
 *          second sum is an m16n8k16 bf16 MMA with M = 16 tokens, N = 8
 *          columns = 4 heads x (hi, lo) halves of q*step (two bf16 terms
 *          hold 16 significant bits), K = 16 channels.
 *   Value: out[j,d] += sum_t (p[t,j] step[t,grp]) c[t,d] + sum_t p[t,j]
 *          o[t,grp]; an m16n8k16 fp16 MMA with M = 16 rows = 4 heads x 4
 *          channel groups, N = 8 channels, K = 16 tokens (rows whose group
 *          differs from the column's are computed and dropped).
 * Codes become MMA operands with mask-and-or magic numbers (128 + m*c in
 * bf16, 1024 + m*c in fp16) and one exact fma per pair.
 *
 * Generic CTAs handle everything else (the residual tail, partial tiles,
 * other formats): they stage 32 tokens of K and V as fp32 in shared memory,
 * taking each token from its page or its residual by the Key and the Value
 * boundary separately.
 */
#include "common.cuh"

#include <math.h>

#define HPC 4             /* query heads per CTA */
#define WARPS 4
#define TILE 32           /* tokens per fast tile (one Key group) */
#define STAGES 3
#define TILE_BYTES 3072
#define FAST_D 128
/* per-warp shared memory: stages, p[32][4], alpha[4] */
#define WARP_SMEM (STAGES * TILE_BYTES + TILE * HPC * 4 + 16)
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
	int gen_tps;            /* tokens per generic split, multiple of 32 */
	int fast_ok;
};

/* First token the generic CTAs handle for this sequence. */
static __device__ __forceinline__ int fast_end(const attn_params &p,
					       const kvs_cuda_seq &sq)
{
	if (!p.fast_ok)
		return 0;
	return (int)(min(sq.k_quant_len, sq.v_quant_len) / TILE) * TILE;
}

static __device__ __forceinline__ float *partial(const attn_params &p, int b,
						 int qh, int slot)
{
	return p.ws + ((size_t)(b * p.Hq + qh) * p.n_slots + slot) *
		(p.D + 2);
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

/* Keys of channels d .. d+7 of token @tok: history or residual. */
static __device__ void key8(const attn_params &p, const kvs_cuda_seq &sq,
			    int b, int h, int tok, int d, float x[8])
{
	if ((uint32_t)tok >= sq.k_quant_len) {
		resid8(p.rdt, p.k_resid, ((size_t)(b * p.Hkv + h) * p.k_stride +
			tok - sq.k_quant_len) * p.D + d, x);
		return;
	}
	const uint8_t *pg = page_of(p, b, tok);
	const int tt = tok % p.S, bits = p.bits;
	const uint32_t w = codes8(pg + p.lay.off[KVS_SEC_KEY_CODES] +
				  ((size_t)h * p.S + tt) * (p.D * bits / 8),
				  d, bits);
	const size_t m = ((size_t)h * (p.S / p.G) + tt / p.G) * p.D + d;
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
		resid8(p.rdt, p.v_resid, ((size_t)(b * p.Hkv + h) * p.v_stride +
			sq.v_resid_start + tok - sq.v_quant_len) * p.D + d, x);
		return;
	}
	const uint8_t *pg = page_of(p, b, tok);
	const int tt = tok % p.S, bits = p.bits;
	const uint32_t w = codes8(pg + p.lay.off[KVS_SEC_VAL_CODES] +
				  ((size_t)h * p.S + tt) * (p.D * bits / 8),
				  d, bits);
	const size_t m = ((size_t)h * p.S + tt) * (p.D / p.G);
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

static __device__ void generic_cta(const attn_params &p, int split, int h,
				   int sub, int b, float *smem)
{
	const int D = p.D, pitch = D + 1, tid = threadIdx.x;
	const int hq0 = h * p.gq + sub * HPC, nh = min(HPC, p.gq - sub * HPC);
	const kvs_cuda_seq sq = p.seqs[b];
	const int T = sq.k_quant_len + sq.k_resid_len;
	const int t0 = fast_end(p, sq) + split * p.gen_tps;
	const int t1 = min(T, t0 + p.gen_tps);
	float *kt = smem, *vt = kt + TILE * pitch;
	float *qs = vt + TILE * pitch, *acc = qs + HPC * D;
	float *ss = acc + HPC * D, *ms = ss + HPC * TILE;
	float *ls = ms + HPC, *as = ls + HPC;

	for (int e = tid; e < HPC * D; e += blockDim.x) {
		int j = e / D;
		qs[e] = j < nh ? ld_elem(p.qdt, p.q, (size_t)(b * p.Hq + hq0) *
					 D + e) * p.scale_log2 : 0.0f;
		acc[e] = 0.0f;
	}
	if (tid < HPC) {
		ms[tid] = -INFINITY;
		ls[tid] = 0.0f;
	}
	for (int c0 = t0; c0 < t1; c0 += TILE) {
		int n = min(TILE, t1 - c0);

		__syncthreads();
		/* 8 channels per item, 4 items per thread in flight */
		const int per_tok = D / 8, items = n * per_tok;
		for (int base = 0; base < items; base += 4 * blockDim.x) {
			float kx[4][8], vx[4][8];
#pragma unroll
			for (int u = 0; u < 4; u++) {
				int i = base + u * blockDim.x + tid;

				int t = i / per_tok, d = i % per_tok * 8;

				if (i < items) {
					key8(p, sq, b, h, c0 + t, d, kx[u]);
					val8(p, sq, b, h, c0 + t, d, vx[u]);
				}
			}
#pragma unroll
			for (int u = 0; u < 4; u++) {
				int i = base + u * blockDim.x + tid;

				int t = i / per_tok, d = i % per_tok * 8;
				float *kr = kt + t * pitch + d;
				float *vr = vt + t * pitch + d;

				if (i < items) {
#pragma unroll
					for (int k = 0; k < 8; k++) {
						kr[k] = kx[u][k];
						vr[k] = vx[u][k];
					}
				}
			}
		}
		__syncthreads();
		for (int e = tid; e < TILE * HPC; e += blockDim.x) {
			int t = e % TILE, j = e / TILE;
			float s = -INFINITY;

			if (t < n && j < nh) {
				const float *qr = qs + j * D;
				const float *kr = kt + t * pitch;

				s = 0.0f;
				for (int d = 0; d < D; d++)
					s = fmaf(qr[d], kr[d], s);
			}
			ss[j * TILE + t] = s;
		}
		__syncthreads();
		if (tid < HPC * 32) {
			int j = tid >> 5, lane = tid & 31;
			float s = ss[j * TILE + lane];
			float mo = ms[j], mn = fmaxf(mo, warp_max(s));
			float pr = s == -INFINITY ? 0.0f : exp2f(s - mn);
			float alpha = mo == -INFINITY ? 0.0f : exp2f(mo - mn);
			float sum = warp_sum(pr);

			ss[j * TILE + lane] = pr;
			__syncwarp();
			if (lane == 0) {
				ms[j] = mn;
				ls[j] = ls[j] * alpha + sum;
				as[j] = alpha;
			}
		}
		__syncthreads();
		for (int e = tid; e < HPC * D; e += blockDim.x) {
			int j = e / D, d = e % D;
			float a = acc[e] * as[j];

			const float *pr = ss + j * TILE, *vc = vt + d;

			for (int t = 0; t < n; t++)
				a = fmaf(pr[t], vc[t * pitch], a);
			acc[e] = a;
		}
	}
	__syncthreads();
	for (int e = tid; e < nh * (D + 2); e += blockDim.x) {
		int j = e / (D + 2), d = e % (D + 2);
		float x = d < D ? acc[j * D + d] : d == D ? ms[j] : ls[j];

		partial(p, b, hq0 + j, p.n_fast + split)[d] = x;
	}
}

/* ---- fast path: tensor cores over whole history tiles ---------------- */

static __device__ __forceinline__ void cp_async16(void *dst, const void *src)
{
	uint32_t s = (uint32_t)__cvta_generic_to_shared(dst);

	asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n"
		     :: "r"(s), "l"(src));
}

static __device__ __forceinline__ void cp_commit(void)
{
	asm volatile("cp.async.commit_group;\n" ::);
}

template <int N>
static __device__ __forceinline__ void cp_wait(void)
{
	asm volatile("cp.async.wait_group %0;\n" :: "n"(N));
}

static __device__ __forceinline__ void mma_bf16(float c[4], uint32_t a0,
						uint32_t a1, uint32_t a2,
						uint32_t a3, uint32_t b0,
						uint32_t b1)
{
	asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
	    "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
	    : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
	    : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

static __device__ __forceinline__ void mma_f16(float c[4], uint32_t a0,
					       uint32_t a1, uint32_t a2,
					       uint32_t a3, uint32_t b0,
					       uint32_t b1)
{
	asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
	    "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
	    : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
	    : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/*
 * Codes i and i+8 of a 32-bit word of 16 packed 2-bit codes (bits 2i and
 * 16+2i) as a bf16x2 pair (c_i, c_{i+8}): masked into 128 + 4^k c, then
 * one exact fma by (4^-k, -128 * 4^-k).
 */
static __device__ __forceinline__ uint32_t pair_bf16(uint32_t w, int i)
{
	const int sh = i < 3 ? 0 : (i < 6 ? 6 : 12);
	const int k = i - (i < 3 ? 0 : (i < 6 ? 3 : 6));
	const uint32_t scale = k == 0 ? 0x3F803F80u :
			       (k == 1 ? 0x3E803E80u : 0x3D803D80u);
	const uint32_t offset = k == 0 ? 0xC300C300u :
				(k == 1 ? 0xC200C200u : 0xC100C100u);
	uint32_t x = ((w >> sh) & (0x00030003u << (2 * k))) | 0x43004300u;
	uint32_t r;

	asm("fma.rn.bf16x2 %0, %1, %2, %3;\n"
	    : "=r"(r) : "r"(x), "r"(scale), "r"(offset));
	return r;
}

/* Same in fp16 with 1024 + 4^k c (k up to 4). */
static __device__ __forceinline__ uint32_t pair_f16(uint32_t w, int i)
{
	const int sh = i < 5 ? 0 : 10;
	const int k = i < 5 ? i : i - 5;
	const uint32_t scale = k == 0 ? 0x3C003C00u : k == 1 ? 0x34003400u :
			       k == 2 ? 0x2C002C00u : k == 3 ? 0x24002400u :
			       0x1C001C00u;
	const uint32_t offset = k == 0 ? 0xE400E400u : k == 1 ? 0xDC00DC00u :
				k == 2 ? 0xD400D400u : k == 3 ? 0xCC00CC00u :
				0xC400C400u;
	uint32_t x = ((w >> sh) & (0x00030003u << (2 * k))) | 0x64006400u;
	uint32_t r;

	asm("fma.rn.f16x2 %0, %1, %2, %3;\n"
	    : "=r"(r) : "r"(x), "r"(scale), "r"(offset));
	return r;
}

static __device__ __forceinline__ uint32_t pack_bf16(float lo, float hi)
{
	__nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);

	return *reinterpret_cast<uint32_t *>(&v);
}

static __device__ __forceinline__ uint32_t pack_f16(float lo, float hi)
{
	__half2 v = __floats2half2_rn(lo, hi);

	return *reinterpret_cast<uint32_t *>(&v);
}

/* Issues the cp.async copies of one tile (3 KB, 6 x 16 B per lane). */
static __device__ void issue_tile(const attn_params &p, int h, int tile,
				  const int32_t *pages, int first_page,
				  uint8_t *stage, int lane)
{
	const int tok = tile * TILE, tt0 = tok % p.S, g = tt0 / TILE;
	const uint8_t *pg = p.pool + (uint64_t)pages[tok / p.S - first_page] *
			    p.page_stride;
	const uint8_t *kc = pg + p.lay.off[KVS_SEC_KEY_CODES] +
			    ((size_t)h * p.S + tt0) * 32;
	const uint8_t *vc = pg + p.lay.off[KVS_SEC_VAL_CODES] +
			    ((size_t)h * p.S + tt0) * 32;
	size_t km = ((size_t)h * (p.S / TILE) + g) * FAST_D * 2;
	size_t vm = ((size_t)h * p.S + tt0) * 4 * 2;
	int half = lane & 15;

	cp_async16(stage + T_KC + 16 * lane, kc + 16 * lane);
	cp_async16(stage + T_KC + 512 + 16 * lane, kc + 512 + 16 * lane);
	cp_async16(stage + T_VC + 16 * lane, vc + 16 * lane);
	cp_async16(stage + T_VC + 512 + 16 * lane, vc + 512 + 16 * lane);
	if (lane < 16) {
		cp_async16(stage + T_KO + 16 * half,
			   pg + p.lay.off[KVS_SEC_KEY_ORIGIN] + km + 16 * half);
		cp_async16(stage + T_VO + 16 * half,
			   pg + p.lay.off[KVS_SEC_VAL_ORIGIN] + vm + 16 * half);
	} else {
		cp_async16(stage + T_KS + 16 * half,
			   pg + p.lay.off[KVS_SEC_KEY_STEP] + km + 16 * half);
		cp_async16(stage + T_VS + 16 * half,
			   pg + p.lay.off[KVS_SEC_VAL_STEP] + vm + 16 * half);
	}
}

struct fast_state {
	float acc[16][4];       /* value MMA accumulators */
	float acc_o[2];         /* sum p*origin, rows (j,grp0), (j,grp0+2) */
	float m, l;             /* running max, lane-partial sum; head ti */
};

/* One 32-token tile from a stage: logits, online softmax, value update. */
static __device__ __forceinline__ void fast_tile(const uint8_t *sg,
						 const float *qreg,
						 float *p_s, float *alpha_s,
						 fast_state &st, int lane)
{
	const int gi = lane >> 2, ti = lane & 3, part = gi & 1;
	float a_part = 0.0f;
	uint32_t breg[8][2];

	/* Key metadata: origin dot for head gi>>1, scaled q halves for B.
	 * q*step = hi + lo with hi its top 16 bits (a bf16, truncated) and lo
	 * the exact rest rounded to bf16: 16 significant bits in all. */
	const uint4 *ko = reinterpret_cast<const uint4 *>(sg + T_KO + 64 * ti);
	const uint4 *ks = reinterpret_cast<const uint4 *>(sg + T_KS + 64 * ti);
	float stp[32];
#pragma unroll
	for (int v = 0; v < 4; v++) {
		uint4 o4 = ko[v], s4 = ks[v];
		const uint32_t ow[4] = { o4.x, o4.y, o4.z, o4.w };
		const uint32_t sw[4] = { s4.x, s4.y, s4.z, s4.w };
#pragma unroll
		for (int e = 0; e < 4; e++) {
			float2 of = __half22float2(
				*reinterpret_cast<const __half2 *>(&ow[e]));
			float2 sf = __half22float2(
				*reinterpret_cast<const __half2 *>(&sw[e]));
			int c = 8 * v + 2 * e;

			a_part = fmaf(qreg[c], of.x, a_part);
			a_part = fmaf(qreg[c + 1], of.y, a_part);
			stp[c] = sf.x;
			stp[c + 1] = sf.y;
		}
	}
#pragma unroll
	for (int s = 0; s < 8; s++) {
#pragma unroll
		for (int r = 0; r < 2; r++) {
			int q = 2 * s + r, cl = 16 * (q >> 3) + (q & 7);
			int ch = cl + 8;
			float xl = qreg[cl] * stp[cl], xh = qreg[ch] * stp[ch];
			uint32_t bl = __float_as_uint(xl);
			uint32_t bh = __float_as_uint(xh);
			uint32_t hi = __byte_perm(bl, bh, 0x7632);
			uint32_t lo = pack_bf16(
				xl - __uint_as_float(bl & 0xffff0000u),
				xh - __uint_as_float(bh & 0xffff0000u));

			breg[s][r] = part ? lo : hi;
		}
	}
	a_part += __shfl_xor_sync(0xffffffffu, a_part, 1);
	a_part += __shfl_xor_sync(0xffffffffu, a_part, 2);
	const float a_j = __shfl_sync(0xffffffffu, a_part, (2 * ti) << 2);

	/* Key MMA: rows gi, gi+8 of two 16-token blocks, chains interleaved */
	float logit[4];
	{
		uint2 r[4];
		float c[2][4] = { { 0.0f, 0.0f, 0.0f, 0.0f },
				  { 0.0f, 0.0f, 0.0f, 0.0f } };
#pragma unroll
		for (int k = 0; k < 4; k++)
			r[k] = *reinterpret_cast<const uint2 *>(
				sg + T_KC + (gi + 8 * k) * 32 + 8 * ti);
#pragma unroll
		for (int s = 0; s < 8; s++) {
			int i0 = (2 * s) & 7, i1 = (2 * s + 1) & 7;
#pragma unroll
			for (int mb = 0; mb < 2; mb++) {
				uint32_t w0 = s < 4 ? r[2 * mb].x : r[2 * mb].y;
				uint32_t w1 = s < 4 ? r[2 * mb + 1].x :
						      r[2 * mb + 1].y;

				mma_bf16(c[mb], pair_bf16(w0, i0),
					 pair_bf16(w1, i0), pair_bf16(w0, i1),
					 pair_bf16(w1, i1), breg[s][0],
					 breg[s][1]);
			}
		}
#pragma unroll
		for (int mb = 0; mb < 2; mb++) {
			logit[2 * mb] = c[mb][0] + c[mb][1] + a_j;
			logit[2 * mb + 1] = c[mb][2] + c[mb][3] + a_j;
		}
	}

	/* online softmax for head ti over the warp's tokens */
	float tmax = fmaxf(fmaxf(logit[0], logit[1]),
			   fmaxf(logit[2], logit[3]));
	tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 4));
	tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 8));
	tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 16));
	const float m_new = fmaxf(st.m, tmax);
	const float alpha = exp2f(st.m - m_new);
	float psum = 0.0f;
#pragma unroll
	for (int r = 0; r < 4; r++) {
		float pr = exp2f(logit[r] - m_new);
		int tok = gi + 8 * r;

		psum += pr;
		p_s[tok * HPC + ti] = pr;
	}
	st.l = st.l * alpha + psum;
	st.m = m_new;
	if (gi == 0)
		alpha_s[ti] = alpha;
	__syncwarp();

	/* Value: rows (j, grp0) and (j, grp0 + 2) */
	const int j = gi & 3, grp0 = gi >> 2;
	const float al = alpha_s[j];
	if (__any_sync(0xffffffffu, al != 1.0f)) {
#pragma unroll
		for (int nt = 0; nt < 16; nt++)
#pragma unroll
			for (int e = 0; e < 4; e++)
				st.acc[nt][e] *= al;
		st.acc_o[0] *= al;
		st.acc_o[1] *= al;
	}
#pragma unroll
	for (int ksp = 0; ksp < 2; ksp++) {
		const int tA = 16 * ksp + 2 * ti;
		const int tk[4] = { tA, tA + 1, tA + 8, tA + 9 };
		float pv[4], s0[4], s1[4];
		uint32_t w[4];
#pragma unroll
		for (int e = 0; e < 4; e++) {
			const uint2 vo = *reinterpret_cast<const uint2 *>(
				sg + T_VO + tk[e] * 8);
			const uint2 vs = *reinterpret_cast<const uint2 *>(
				sg + T_VS + tk[e] * 8);
			/* groups grp0 and grp0 + 2: half grp0 of words x, y */
			const int sh = 16 * grp0;
			float o0 = __half2float(__ushort_as_half(
				(unsigned short)(vo.x >> sh)));
			float o1 = __half2float(__ushort_as_half(
				(unsigned short)(vo.y >> sh)));

			pv[e] = p_s[tk[e] * HPC + j];
			s0[e] = pv[e] * __half2float(__ushort_as_half(
				(unsigned short)(vs.x >> sh)));
			s1[e] = pv[e] * __half2float(__ushort_as_half(
				(unsigned short)(vs.y >> sh)));
			st.acc_o[0] = fmaf(pv[e], o0, st.acc_o[0]);
			st.acc_o[1] = fmaf(pv[e], o1, st.acc_o[1]);
			w[e] = *reinterpret_cast<const uint32_t *>(
				sg + T_VC + tk[e] * 32 + 4 * gi);
		}
		const uint32_t a0 = pack_f16(s0[0], s0[1]);
		const uint32_t a1 = pack_f16(s1[0], s1[1]);
		const uint32_t a2 = pack_f16(s0[2], s0[3]);
		const uint32_t a3 = pack_f16(s1[2], s1[3]);
		const uint32_t y01[2] = { __byte_perm(w[0], w[1], 0x5410),
					  __byte_perm(w[0], w[1], 0x7632) };
		const uint32_t y23[2] = { __byte_perm(w[2], w[3], 0x5410),
					  __byte_perm(w[2], w[3], 0x7632) };
#pragma unroll
		for (int nt = 0; nt < 16; nt++)
			mma_f16(st.acc[nt], a0, a1, a2, a3,
				pair_f16(y01[nt >> 3], nt & 7),
				pair_f16(y23[nt >> 3], nt & 7));
	}
	__syncwarp();
}

static __device__ void fast_cta(const attn_params &p, int split, int h,
				int sub, int b, uint8_t *smem)
{
	const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
	const int gi = lane >> 2, ti = lane & 3;
	const int hq0 = h * p.gq + sub * HPC, nh = min(HPC, p.gq - sub * HPC);
	const kvs_cuda_seq sq = p.seqs[b];
	const int tiles = fast_end(p, sq) / TILE;
	const int tb = split * p.fast_tps, te = min(tiles, tb + p.fast_tps);
	const int first = tb + warp;
	const int mine = first < te ? (te - first + WARPS - 1) / WARPS : 0;
	uint8_t *wsm = smem + warp * WARP_SMEM;
	float *p_s = reinterpret_cast<float *>(wsm + STAGES * TILE_BYTES);
	float *alpha_s = p_s + TILE * HPC;
	/* the scaled query rows [head][ti][36] (padded against bank
	 * conflicts), then this CTA's page indices, staged once: no pointer
	 * chase per tile */
	float *q_s = reinterpret_cast<float *>(smem + WARPS * WARP_SMEM);
	int32_t *pages = reinterpret_cast<int32_t *>(q_s + HPC * 4 * 36);
	const int page0 = tb * TILE / p.S;
	const int npages = te > tb ? (te - 1) * TILE / p.S - page0 + 1 : 0;
	for (int i = tid; i < npages; i += blockDim.x)
		pages[i] = p.page_table[(size_t)b * p.max_pages + page0 + i];
	for (int e = tid; e < HPC * FAST_D; e += blockDim.x) {
		int jb = e / FAST_D, d = e % FAST_D;

		q_s[(jb * 4 + d / 32) * 36 + d % 32] = jb < nh ?
			ld_elem(p.qdt, p.q, (size_t)(b * p.Hq + hq0) * FAST_D +
				e) * p.scale_log2 : 0.0f;
	}
	const float *qreg = q_s + ((gi >> 1) * 4 + ti) * 36;
	fast_state st;

#pragma unroll
	for (int nt = 0; nt < 16; nt++)
#pragma unroll
		for (int e = 0; e < 4; e++)
			st.acc[nt][e] = 0.0f;
	st.acc_o[0] = st.acc_o[1] = 0.0f;
	st.m = -INFINITY;
	st.l = 0.0f;
	__syncthreads();

#pragma unroll
	for (int s = 0; s < STAGES - 1; s++) {
		if (s < mine)
			issue_tile(p, h, first + WARPS * s, pages, page0,
				   wsm + s * TILE_BYTES, lane);
		cp_commit();
	}
	for (int k = 0; k < mine; k++) {
		int kk = k + STAGES - 1;

		if (kk < mine)
			issue_tile(p, h, first + WARPS * kk, pages, page0,
				   wsm + (kk % STAGES) * TILE_BYTES, lane);
		cp_commit();
		cp_wait<STAGES - 1>();
		__syncwarp();
		fast_tile(wsm + (k % STAGES) * TILE_BYTES, qreg, p_s, alpha_s,
			  st, lane);
	}
	cp_wait<0>();

	/* per-warp results */
	float l = st.l;
	l += __shfl_xor_sync(0xffffffffu, l, 4);
	l += __shfl_xor_sync(0xffffffffu, l, 8);
	l += __shfl_xor_sync(0xffffffffu, l, 16);
	float o0 = st.acc_o[0], o1 = st.acc_o[1];
	o0 += __shfl_xor_sync(0xffffffffu, o0, 1);
	o0 += __shfl_xor_sync(0xffffffffu, o0, 2);
	o1 += __shfl_xor_sync(0xffffffffu, o1, 1);
	o1 += __shfl_xor_sync(0xffffffffu, o1, 2);
	__syncthreads();

	/* CTA merge area (reuses the stages): o[w][j][D], m[w][j], l[w][j] */
	float *o_w = reinterpret_cast<float *>(smem);
	float *m_w = o_w + WARPS * HPC * FAST_D, *l_w = m_w + WARPS * HPC;
	const int j = gi & 3, grp0 = gi >> 2;
	float *orow = o_w + (warp * HPC + j) * FAST_D + 32 * ti;

	if (ti == grp0) {
#pragma unroll
		for (int nt = 0; nt < 16; nt++) {
			orow[nt] = st.acc[nt][0] + o0;
			orow[16 + nt] = st.acc[nt][1] + o0;
		}
	} else if (ti == grp0 + 2) {
#pragma unroll
		for (int nt = 0; nt < 16; nt++) {
			orow[nt] = st.acc[nt][2] + o1;
			orow[16 + nt] = st.acc[nt][3] + o1;
		}
	}
	if (gi == 0) {
		m_w[warp * HPC + ti] = st.m;
		l_w[warp * HPC + ti] = l;
	}
	__syncthreads();
	for (int e = tid; e < nh * (FAST_D + 2); e += blockDim.x) {
		int jj = e / (FAST_D + 2), d = e % (FAST_D + 2);
		float mx = -INFINITY, x = 0.0f;

		for (int w = 0; w < WARPS; w++)
			mx = fmaxf(mx, m_w[w * HPC + jj]);
		if (d == FAST_D) {
			x = mx;
		} else if (mx != -INFINITY) {
			for (int w = 0; w < WARPS; w++) {
				float mw = m_w[w * HPC + jj];
				float v = d < FAST_D ?
					o_w[(w * HPC + jj) * FAST_D + d] :
					l_w[w * HPC + jj];

				if (mw != -INFINITY)
					x += v * exp2f(mw - mx);
			}
		}
		partial(p, b, hq0 + jj, split)[d] = x;
	}
}

/*
 * 1-D grid: units (sequence, KV head, query-head group) x splits, the short
 * generic CTAs first so that the long fast ones are not left for the tail.
 */
template <bool FAST, int MIN_CTAS>
__global__ void __launch_bounds__(WARPS * 32, MIN_CTAS)
attn_kernel(const attn_params p)
{
	extern __shared__ __align__(16) uint8_t smem[];
	const int gen = p.n_gen * p.B * p.Hkv * p.nsub;
	int idx = blockIdx.x, n = idx < gen ? p.n_gen : p.n_fast;

	if (idx >= gen)
		idx -= gen;
	const int split = idx % n, u = idx / n;
	const int b = u / (p.Hkv * p.nsub), r = u % (p.Hkv * p.nsub);
	const int h = r / p.nsub, sub = r % p.nsub;

	if (FAST && (int)blockIdx.x >= gen)
		fast_cta(p, split, h, sub, b, smem);
	else
		generic_cta(p, split, h, sub, b,
			    reinterpret_cast<float *>(smem));
}

__global__ void attn_merge_kernel(const attn_params p)
{
	const int b = blockIdx.x / p.Hq, qh = blockIdx.x % p.Hq;
	const int D = p.D;
	const float *base = partial(p, b, qh, 0);
	float mx = -INFINITY;

	for (int s = 0; s < p.n_slots; s++)
		mx = fmaxf(mx, base[(size_t)s * (D + 2) + D]);
	for (int d = threadIdx.x; d < D; d += blockDim.x) {
		float o = 0.0f, l = 0.0f;

		if (mx != -INFINITY) {
			for (int s = 0; s < p.n_slots; s++) {
				const float *ps = base + (size_t)s * (D + 2);
				float m = ps[D];

				if (m == -INFINITY)
					continue;
				float w = exp2f(m - mx);
				o = fmaf(ps[d], w, o);
				l = fmaf(ps[D + 1], w, l);
			}
		}
		st_elem(p.odt, p.out, (size_t)(b * p.Hq + qh) * D + d,
			l > 0.0f ? o / l : 0.0f);
	}
}

/* ---- host side --------------------------------------------------------- */

static int sm_count(void)
{
	static int count;
	int dev = 0, n = 0;

	if (count)
		return count;
	if (cudaGetDevice(&dev) != cudaSuccess ||
	    cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) !=
	    cudaSuccess || n <= 0)
		n = 132;
	count = n;
	return count;
}

typedef void (*attn_fn)(const attn_params);

/* The build of the kernel for these arguments: generic only, or the fast
 * path capped at 127 registers for 4 CTAs per SM (default) or at 168 for
 * 3 (KVS_CUDA_ATTN_OCC3, for comparison). */
static attn_fn pick_kernel(int fast_ok, uint32_t flags, int *variant)
{
	*variant = !fast_ok ? 0 : (flags & KVS_CUDA_ATTN_OCC3) ? 1 : 2;
	return *variant == 0 ? attn_kernel<false, 1> :
	       *variant == 1 ? attn_kernel<true, 3> : attn_kernel<true, 4>;
}

/* Fast CTAs that fit on the device at once. */
static int resident_slots(int fast_ok, uint32_t flags)
{
	static int slots[3];
	int variant, per_sm = 0;
	attn_fn fn = pick_kernel(fast_ok, flags, &variant);

	if (slots[variant])
		return slots[variant];
	if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fn,
			WARPS * 32, WARPS * WARP_SMEM + 3072) != cudaSuccess ||
	    per_sm <= 0)
		per_sm = 2;
	slots[variant] = per_sm * sm_count();
	return slots[variant];
}

static int dtype_ok(int t)
{
	return t == KVS_DTYPE_F32 || t == KVS_DTYPE_F16 || t == KVS_DTYPE_BF16;
}

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
	const int slots = resident_slots(p->fast_ok, a->flags);
	const int target = slots;
	int max_tiles = p->fast_ok ? (int)(a->max_tokens / TILE) : 0;

	p->n_fast = 0;
	p->fast_tps = 1;
	if (max_tiles > 0) {
		/* fewest waves x tiles per CTA (+ a CTA's fixed cost) */
		int cap = (max_tiles + WARPS - 1) / WARPS, best = 1;
		double best_cost = 1e30;

		for (int n = 1; n <= cap && n <= 4 * slots; n++) {
			double waves = (units * n + slots - 1) / slots;
			double cost = waves * ((double)max_tiles / n + 8.0);

			if (cost < best_cost - 1e-9) {
				best_cost = cost;
				best = n;
			}
		}
		p->fast_tps = (max_tiles + best - 1) / best;
		p->n_fast = (max_tiles + p->fast_tps - 1) / p->fast_tps;
	}
	uint32_t rows = a->k_resid_stride > a->v_resid_stride ?
			a->k_resid_stride : a->v_resid_stride;
	uint32_t gen_total = p->fast_ok ? rows + TILE - 1 : a->max_tokens;
	if (gen_total > a->max_tokens)
		gen_total = a->max_tokens;
	int chunks = (int)((gen_total + TILE - 1) / TILE);
	int n = (2 * target + units - 1) / units;
	if (chunks < 1)
		chunks = 1;
	n = n < 1 ? 1 : (n > chunks ? chunks : n);
	p->gen_tps = TILE * ((chunks + n - 1) / n);
	p->n_gen = (int)((chunks * TILE + p->gen_tps - 1) / p->gen_tps);
	p->n_slots = p->n_fast + p->n_gen;
	return 0;
}

uint64_t kvs_cuda_attn_workspace(const struct kvs_cuda_attn *a)
{
	attn_params p;

	if (attn_plan(a, &p))
		return 0;
	return (uint64_t)p.B * p.Hq * p.n_slots * (p.D + 2) * sizeof(float);
}

static size_t generic_smem(int D)
{
	return ((size_t)2 * TILE * (D + 1) + 2 * HPC * D + HPC * TILE +
		3 * HPC) * sizeof(float);
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
	     (uintptr_t)a->pool) % 16) {
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

	size_t smem = generic_smem(p.D);
	size_t fast = (size_t)WARPS * WARP_SMEM + sizeof(float) * HPC * 4 * 36 +
		      sizeof(int32_t) * (p.fast_tps * TILE / p.S + 2);
	if (p.fast_ok && fast > smem)
		smem = fast;
	dim3 grid(p.n_slots * p.B * p.Hkv * p.nsub);
	int variant;
	attn_fn fn = pick_kernel(p.fast_ok, a->flags, &variant);

	if (smem > 48 * 1024)
		rc = KVS_CUDA_CHECK(cudaFuncSetAttribute((const void *)fn,
				cudaFuncAttributeMaxDynamicSharedMemorySize,
				(int)smem));
	if (!rc)
		fn<<<grid, WARPS * 32, smem, stream>>>(p);
	if (!rc)
		rc = KVS_CUDA_CHECK(cudaGetLastError());
	if (rc)
		return rc;
	attn_merge_kernel<<<p.B * p.Hq, 128, 0, stream>>>(p);
	return KVS_CUDA_CHECK(cudaGetLastError());
}
