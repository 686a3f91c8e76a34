/*
 * seal_generic.cuh - seal_kernel, the seal for every shape the fast path
 * does not take: one CTA per (Key group of G tokens, head, block), the
 * G x D tiles of K and V staged in shared memory as fp32, metadata by
 * one thread per channel (Key) or per (token, channel group) (Value),
 * then the codes packed 32 bits at a time.
 *
 * Invariants: every arithmetic step is the reference's (fp32 min/max,
 * metadata rounded to nearest even, __fsub_rn/__fdiv_rn, rint, clamp),
 * so its images are bit-exact with kvformat's; a non-finite input or
 * metadata that overflows its type sets a bit in *p.status and never
 * stops the other CTAs.
 */
#ifndef KVS_KERNELS_SEAL_GENERIC_CUH
#define KVS_KERNELS_SEAL_GENERIC_CUH

#include "seal_common.cuh"

/* Loads the G x D tile of tokens [t0, t0+G) of one head to smem rows of
 * D+1 floats; returns nonzero if any value is not finite. */
static __device__ int load_tile(const seal_params &p, const void *src,
				int64_t head_stride, int t0, int h,
				float *tile)
{
	const int D = p.D, G = p.G, pitch = D + 1;
	int bad = 0;
	size_t esz = p.in_dtype == KVS_DTYPE_F32 ? 4 : 2;
	const uint8_t *base = (const uint8_t *)src +
		((int64_t)t0 * p.token_stride +
		 (int64_t)h * head_stride) * esz;
	bool vec = esz == 2 && (D % 8) == 0 && (p.token_stride % 8) == 0 &&
		   ((uintptr_t)base % 16) == 0;

	if (vec) {
		int per_row = D / 8;
		for (int i = threadIdx.x; i < G * per_row; i += blockDim.x) {
			int t = i / per_row, c = (i % per_row) * 8;
			uint4 raw = __ldg((const uint4 *)(base +
				((int64_t)t * p.token_stride + c) * 2));
			const uint16_t *e = (const uint16_t *)&raw;
			for (int k = 0; k < 8; k++) {
				float x = ld_elem(p.in_dtype, e, k);
				bad |= !isfinite(x);
				tile[t * pitch + c + k] = x;
			}
		}
	} else {
		for (int i = threadIdx.x; i < G * D; i += blockDim.x) {
			int t = i / D, d = i % D;
			float x = ld_elem(p.in_dtype, base,
					  (size_t)t * p.token_stride + d);
			bad |= !isfinite(x);
			tile[t * pitch + d] = x;
		}
	}
	return bad;
}

/*
 * The group quantizer's metadata step (kvformat's quant_params): @origin and
 * @step as stored, @code_step the divisor for codes (infinity for a
 * constant group, so that every code is 0).  Returns KVS_CUDA_FLAG_RANGE
 * when the origin or the step overflows the metadata type or the top code
 * would reconstruct to infinity.
 */
static __device__ unsigned group_meta(int mt, int bits, float lo, float hi,
				      float *origin, float *step,
				      float *code_step)
{
	const float levels = (float)((1 << bits) - 1);
	float o;

	/* -0 + +0 = +0: the zero's sign of a min/max depends on the order of
	 * the reduction; both implementations make it canonical */
	lo = __fadd_rn(lo, 0.0f);
	hi = __fadd_rn(hi, 0.0f);
	o = round_meta(mt, lo);
	float s = round_meta(mt, __fdiv_rn(__fsub_rn(hi, lo), levels));

	*origin = o;
	*step = 1.0f;
	*code_step = INFINITY;
	if (!isfinite(o) || !isfinite(s))
		return KVS_CUDA_FLAG_RANGE;
	if (hi == lo || s == 0.0f)
		return 0;
	*step = s;
	*code_step = s;
	return isfinite(fmaf(s, levels, o)) ? 0 : KVS_CUDA_FLAG_RANGE;
}

/*
 * code = clamp(rint((x - origin) / step), 0, 2^b - 1) with the IEEE
 * quotient, without paying for an IEEE division per element: x - origin
 * times the reciprocal @rstep (0 for an infinite step) is within a few ulps
 * of the rounded quotient, so both round to the same integer unless the
 * product lies within 1e-4 of a half-integer; those take __fdiv_rn.  Like
 * kvformat's quant_code, q is clamped to [-1, 2^b] first and rounded to
 * nearest even by adding and subtracting 1.5 * 2^23.
 */
static __device__ __forceinline__ unsigned quant_code(float x, float origin,
						      const float *step,
						      float rstep, int qmax)
{
	const float magic = 12582912.0f;
	float num = __fsub_rn(x, origin);
	float q = fminf(fmaxf(__fmul_rn(num, rstep), -1.0f), qmax + 1.0f);
	float t = __fadd_rn(q, magic);

	if (fabsf(__fsub_rn(q, __fsub_rn(t, magic))) > 0.4999f) {
		q = fminf(fmaxf(__fdiv_rn(num, *step), -1.0f), qmax + 1.0f);
		t = __fadd_rn(q, magic);
	}
	int c = __float_as_int(t) - 0x4B400000;

	return (unsigned)min(max(c, 0), qmax);
}

/* Packs the G x D codes of a staged tile, one 32-bit word (32/BITS
 * channels of one token) per iteration, into @kc and @vc. */
template <int BITS>
static __device__ void pack_tile(const float *ktile, const float *vtile,
				 int pitch, int D, int G, const float *korig,
				 const float *kstep, const float *krcp,
				 const float *vorig, const float *vstep,
				 const float *vrcp, uint32_t *kc, uint32_t *vc)
{
	const int cpw = 32 / BITS, wpr = D / cpw, ngrp = D / G;
	const int qmax = (1 << BITS) - 1;

	for (int i = threadIdx.x; i < G * wpr; i += blockDim.x) {
		int t = i / wpr, d0 = (i % wpr) * cpw;
		int j = t * ngrp + d0 / G;
		float vo = vorig[j], vr = vrcp[j];
		const float *vs = vstep + j;
		uint32_t kw = 0, vw = 0;
#pragma unroll
		for (int k = 0; k < cpw; k++) {
			int d = d0 + k;

			if (G < cpw && d % G == 0) {
				j = t * ngrp + d / G;
				vo = vorig[j];
				vr = vrcp[j];
				vs = vstep + j;
			}
			kw |= quant_code(ktile[t * pitch + d], korig[d],
					 kstep + d, krcp[d], qmax) << (k * BITS);
			vw |= quant_code(vtile[t * pitch + d], vo, vs, vr,
					 qmax) << (k * BITS);
		}
		kc[i] = kw;
		vc[i] = vw;
	}
}

static __device__ void store_meta(int mt, uint8_t *base, size_t i, float x)
{
	st_elem(mt, base, i, x);
}

static __global__ void seal_kernel(const seal_params p)
{
	extern __shared__ float smem[];
	const int D = p.D, G = p.G, pitch = D + 1, bits = p.bits;
	const int g = blockIdx.x, h = blockIdx.y, n = blockIdx.z;
	const int t0 = g * G, ngrp = D / G;
	float *ktile = smem, *vtile = ktile + G * pitch;
	float *korig = vtile + G * pitch, *kstep = korig + D;
	float *vorig = kstep + D, *vstep = vorig + G * ngrp;
	float *krcp = vstep + G * ngrp, *vrcp = krcp + D;
	__shared__ unsigned flags;
	const void *ksrc, *vsrc;
	unsigned flag = 0;

	if (p.src) {
		ksrc = p.src[2 * n];
		vsrc = p.src[2 * n + 1];
	} else {
		size_t esz = p.in_dtype == KVS_DTYPE_F32 ? 4 : 2;
		ksrc = (const uint8_t *)p.keys + n * p.block_stride * esz;
		vsrc = (const uint8_t *)p.values + n * p.block_stride * esz;
	}
	uint8_t *img = p.images + (uint64_t)(p.dst ? p.dst[n] : n) *
		       p.image_stride;
	if (threadIdx.x == 0)
		flags = 0;
	if (load_tile(p, ksrc, p.head_stride, t0, h, ktile) |
	    load_tile(p, vsrc, p.v_head_stride, t0, h, vtile))
		flag |= KVS_CUDA_FLAG_NONFINITE;
	__syncthreads();

	uint8_t *ko = img + p.lay.off[KVS_SEC_KEY_ORIGIN];
	uint8_t *ks = img + p.lay.off[KVS_SEC_KEY_STEP];
	for (int d = threadIdx.x; d < D; d += blockDim.x) {
		float lo = ktile[d], hi = lo;
		for (int t = 1; t < G; t++) {
			float x = ktile[t * pitch + d];
			lo = fminf(lo, x);
			hi = fmaxf(hi, x);
		}
		float s;
		flag |= group_meta(p.meta, bits, lo, hi, &korig[d], &s,
				   &kstep[d]);
		size_t i = ((size_t)h * (p.S / G) + g) * D + d;
		store_meta(p.meta, ko, i, korig[d]);
		store_meta(p.meta, ks, i, s);
		krcp[d] = __frcp_rn(kstep[d]);
	}
	uint8_t *vo = img + p.lay.off[KVS_SEC_VAL_ORIGIN];
	uint8_t *vs = img + p.lay.off[KVS_SEC_VAL_STEP];
	for (int i = threadIdx.x; i < G * ngrp; i += blockDim.x) {
		/* token fastest across lanes: rows of D+1 floats, no
		 * bank conflicts */
		int t = i % G, j = i / G;
		const float *row = vtile + t * pitch + j * G;
		float lo = row[0], hi = lo;
		for (int c = 1; c < G; c++) {
			lo = fminf(lo, row[c]);
			hi = fmaxf(hi, row[c]);
		}
		float o, s;
		flag |= group_meta(p.meta, bits, lo, hi, &o, &s,
				   &vstep[t * ngrp + j]);
		vorig[t * ngrp + j] = o;
		vrcp[t * ngrp + j] = __frcp_rn(vstep[t * ngrp + j]);
		size_t e = ((size_t)h * p.S + t0 + t) * ngrp + j;
		store_meta(p.meta, vo, e, o);
		store_meta(p.meta, vs, e, s);
	}
	__syncthreads();

	/* pack: one 32-bit word = 32/bits consecutive channels of a token */
	const int wpr = D * bits / 32;
	uint32_t *kc = (uint32_t *)(img + p.lay.off[KVS_SEC_KEY_CODES]) +
		       ((size_t)h * p.S + t0) * wpr;
	uint32_t *vc = (uint32_t *)(img + p.lay.off[KVS_SEC_VAL_CODES]) +
		       ((size_t)h * p.S + t0) * wpr;
	if (bits == 2)
		pack_tile<2>(ktile, vtile, pitch, D, G, korig, kstep, krcp,
			     vorig, vstep, vrcp, kc, vc);
	else
		pack_tile<4>(ktile, vtile, pitch, D, G, korig, kstep, krcp,
			     vorig, vstep, vrcp, kc, vc);
	if (flag)
		atomicOr(&flags, flag);
	__syncthreads();
	if (threadIdx.x == 0 && flags && p.status)
		atomicOr(p.status, flags);
}

#endif /* KVS_KERNELS_SEAL_GENERIC_CUH */
