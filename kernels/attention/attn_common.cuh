/*
 * attn_common.cuh - what every part of the fused decode attention shares:
 * the kernels' parameters, the probe hooks, the tile and its layout in
 * shared memory, the copy ring that streams tiles into it, the tensor-core
 * primitives, where a token's parts are in a page or a residual row, the
 * shared memory of each kind of CTA, and the host functions through which
 * the files of the attention reach each other.
 *
 * The attention, file by file (all private to kernels/):
 *   attention.cu       arguments checked, plan asked for, kernels launched
 *   attn_plan.cu       the plans: splits, pieces, the CTA build
 *   attn_split.cu      attn_kernel, the split-and-merge plans' kernel
 *   attn_cluster.cu    attn_cluster_kernel and when its plan fits
 *   attn_merge.cu      attn_merge_kernel, the log-sum-exp of the splits
 *   attn_fast.cuh      a fast CTA: its split's pieces and tiles, its warps'
 *                      partials folded and sent
 *   attn_tile.cuh      one 32-token tile on the tensor cores
 *   attn_pieces.cuh    the residual tail as 8-token pieces
 *   attn_generic.cuh   any format, the residual tail, partial tiles
 *
 * Invariants every part keeps:
 * - The fast format is D = 128, b = 2, G = 32 with fp16 metadata; one
 *   tile of TILE tokens is exactly one Key group, and its six sections
 *   (Key and Value codes, origins and steps) take TILE_BYTES of a stage at
 *   the T_* offsets.
 * - A unit is (sequence, KV head, group of up to HPC query heads).  Each
 *   split of a unit leaves, per query head, an unnormalised partial
 *   (acc[D], reference max m, sum l in the log2 domain) ws_pitch(D)
 *   floats apart in the workspace, or, under the cluster plan, in the
 *   cluster's shared memory; only the merge (or a unit's only CTA)
 *   normalises.
 * - A warp's tiles are WARPS * TILE tokens apart, so its cursor only adds.
 * - The 16-byte chunks of the Value codes and the Key metadata rows go
 *   through stage_chunk() on the copy side and on both readers' side.
 */
#ifndef KVS_KERNELS_ATTN_COMMON_CUH
#define KVS_KERNELS_ATTN_COMMON_CUH

#include "../common.cuh"

#include <math.h>

/*
 * Probe hooks.  The probe library of bench/ compiles these sources again
 * with bench/attn_probe.cuh included first, which defines them to leave
 * parts of the fast path out or to record a timeline of each call
 * (bench/attn_parts.sh, bench/attn_trace.py).  Here they are empty, and
 * the library's code is what it would be without them:
 *   ATTN_PROBE_PARAMS          fields the probe adds to attn_params
 *   ATTN_PROBE_CALL(p)         host, once a call, on its parameters
 *   ATTN_PROBE_STAGES          another depth of the copy ring
 *   ATTN_PROBE_CP16_SRC        the 16-byte copies' source-size operand
 *   ATTN_PROBE_OMIT(bit)       whether a part of the fast path is left out
 *   ATTN_PROBE_CODE_PAIR(x, k) a statement: another code operand
 *   ATTN_PROBE_EVENT(p, ev)    this warp reached point @ev
 *   ATTN_PROBE_COUNT(p, ev, n) this warp's count @n, recorded at @ev
 *   ATTN_PROBE_MERGE(p, ev)    this merge (or cluster fold) CTA reached @ev
 */
#ifndef ATTN_PROBE_PARAMS
#define ATTN_PROBE_PARAMS
#endif
#ifndef ATTN_PROBE_CALL
#define ATTN_PROBE_CALL(p) ((void)0)
#endif
#ifndef ATTN_PROBE_CP16_SRC
#define ATTN_PROBE_CP16_SRC ""
#endif
#ifndef ATTN_PROBE_OMIT
#define ATTN_PROBE_OMIT(bit) false
#endif
#ifndef ATTN_PROBE_CODE_PAIR
#define ATTN_PROBE_CODE_PAIR(x, k)
#endif
#ifndef ATTN_PROBE_EVENT
#define ATTN_PROBE_EVENT(p, ev) ((void)0)
#endif
#ifndef ATTN_PROBE_COUNT
#define ATTN_PROBE_COUNT(p, ev, n) ((void)0)
#endif
#ifndef ATTN_PROBE_MERGE
#define ATTN_PROBE_MERGE(p, ev) ((void)0)
#endif

/* ---- the tile and its layouts ----------------------------------------- */

#define HPC 4             /* query heads per CTA */
#define WARPS 4
#define QUADS 4           /* fast CTAs' worth of warps a cluster-plan CTA */
#define TILE 32           /* tokens per fast tile (one Key group) */
#define PIECE 8           /* tokens per piece of the residual tail */
/* cp.async ring stages per warp: one tile in flight while one is computed.
 * A third stage (two in flight, ~96 KB a 4-CTA SM) kept the stream no
 * fuller and only lengthened the queue that every other load of the SM
 * waits behind: the first tiles and the residual tail's round trips. */
#ifdef ATTN_PROBE_STAGES
#define STAGES ATTN_PROBE_STAGES
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
	ATTN_PROBE_PARAMS
};


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

/* ---- the copy ring ------------------------------------------------------ */

/* A shared-memory pointer as the 32-bit address PTX takes. */
static __device__ __forceinline__ uint32_t smem_u32(const void *x)
{
	return (uint32_t)__cvta_generic_to_shared(x);
}

static __device__ __forceinline__ void cp_async16(void *dst, const void *src)
{
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16"
		     ATTN_PROBE_CP16_SRC ";\n" :: "r"(smem_u32(dst)), "l"(src));
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

/*
 * Where a warp's next tile is: its page's slot in the CTA's page list and
 * its first token inside the page, plus this lane's byte offsets of the
 * tile's pieces inside a page for in-page token 0 (each grows by 32 or 8
 * bytes per token).  A warp's tiles are WARPS * TILE tokens apart, so the
 * cursor only adds, never divides.
 */
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
	const int slot = ATTN_PROBE_OMIT(512) ? 0 : c.slot;
	const uint8_t *pg = p.pool + (uint64_t)pages[slot] * p.page_stride;
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

/* ---- tensor-core primitives -------------------------------------------- */

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

	ATTN_PROBE_CODE_PAIR(x, pos)
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

/* Unit @u's sequence @b, KV head @h and query-head group @sub. */
static __device__ __forceinline__ void unit_at(const attn_params &p, int u,
					       int &b, int &h, int &sub)
{
	const int r = u % (p.Hkv * p.nsub);

	b = u / (p.Hkv * p.nsub);
	h = r / p.nsub;
	sub = r % p.nsub;
}

/* ---- shared memory of each kind of CTA ---------------------------------- */

/* A generic CTA of the fast build copies each chunk whole, one chunk ahead
 * (raw_copy, attn_generic.cuh): per token a Key and a Value row of RAW_ROW
 * bytes, the history Values' origins and steps, the chunk's Key origins
 * and steps. */
#define RAW_ROW 256
#define RAW_VM (2 * TILE * RAW_ROW)
#define RAW_KM (RAW_VM + TILE * 16)
#define RAW_BYTES (RAW_KM + 4 * FAST_D)

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

/* Bytes of dynamic shared memory of a fast CTA covering @tps tiles. */
static inline size_t fast_smem(int tps, int span)
{
	return (size_t)WARPS * WARP_SMEM + sizeof(float) * QK_FLOATS +
	       sizeof(int32_t) * (tps * TILE / span + 2);
}

/* ... of a generic CTA; @fast: the fast build's, which also holds a
 * chunk's bytes (raw_copy). */
static inline size_t generic_smem(int D, bool fast)
{
	return ((size_t)gen_rows(D) + HPC * TILE + 3 * HPC + 2 * D +
		GEN_PAGES) * sizeof(float) + (fast ? RAW_BYTES : 0);
}

/* ... of a cluster-plan quad covering @tps tiles (a fast CTA's, in
 * 128-byte steps). */
static inline size_t quad_smem(int tps, int span)
{
	return (fast_smem(tps, span) + 127) / 128 * 128;
}

/* ---- host: how the files of a call reach each other --------------------- */

/* attn_plan.cu: the plan for @a -- the kind and number of CTAs a unit, the
 * tiles and tokens of each, the build of the fast path -- into @p, whose
 * shape and types attention.cu has filled.  Cannot fail: a device that
 * does not answer the occupancy queries gets a conservative plan. */
void attn_plan(const struct kvs_cuda_attn *a, attn_params *p);

/* attn_split.cu: the split-and-merge plans' kernel as attn_plan picks it --
 * generic only (@fast_ok 0), or the fast path capped at 128 registers for
 * 4 CTAs an SM or (@occ3) at 168 for 3, with subnormal (@sub) or biased
 * code operands -- for occupancy queries; and its launch.  0 or
 * -KVS_ECUDA. */
const void *attn_split_kernel(int fast_ok, int occ3, int sub);
int attn_split_launch(const attn_params &p, int sub, cudaStream_t stream);

/* attn_cluster.cu: 1 and @p filled with the cluster plan where it fits
 * (units x clusters of up to 16 CTAs, all resident at once, at least
 * @least CTAs in all), else 0; and its launch, 0 or -KVS_ECUDA. */
int attn_cluster_plan(int units, int tiles, int np, int span, int least,
		      attn_params *p);
int attn_cluster_launch(const attn_params &p, int sub, cudaStream_t stream);

/* attn_merge.cu: the merge of the p.n_slots partials of every (sequence,
 * query head), enqueued after the attention kernel on @stream as its
 * programmatic dependent.  0 or -KVS_ECUDA. */
int attn_merge_launch(const attn_params &p, cudaStream_t stream);

#endif
