/*
 * dequant.cu - reconstruct pages (block images in device memory) to
 * full-precision K and V: each element fmaf(step, code, origin), as the CPU
 * reference, then rounded to the output type.  For prefill over a cached
 * prefix and for checks; decode attention never calls it.
 *
 * One CTA per (Key group, head, page); threads walk the group's G x D
 * elements with the channel fastest, so code bytes and outputs coalesce.
 */
#include "common.cuh"

struct dequant_params {
	int heads, D, G, bits, S, meta, out_dtype;
	struct dev_layout lay;
	const uint8_t *pool;
	uint64_t page_stride;
	const int32_t *pages;
	void *keys, *values;
};

static __global__ void dequant_kernel(const dequant_params p)
{
	const int D = p.D, G = p.G, bits = p.bits;
	const int g = blockIdx.x, h = blockIdx.y, n = blockIdx.z;
	const uint8_t *img = p.pool + (uint64_t)p.pages[n] * p.page_stride;
	const size_t row = (size_t)D * bits / 8, ngrp = D / G;
	const unsigned mask = (1u << bits) - 1;
	const uint8_t *kc = img + p.lay.off[KVS_SEC_KEY_CODES];
	const uint8_t *ko = img + p.lay.off[KVS_SEC_KEY_ORIGIN];
	const uint8_t *ks = img + p.lay.off[KVS_SEC_KEY_STEP];
	const uint8_t *vc = img + p.lay.off[KVS_SEC_VAL_CODES];
	const uint8_t *vo = img + p.lay.off[KVS_SEC_VAL_ORIGIN];
	const uint8_t *vs = img + p.lay.off[KVS_SEC_VAL_STEP];

	for (int i = threadIdx.x; i < G * D; i += blockDim.x) {
		int t = g * G + i / D, d = i % D;
		size_t tok = (size_t)h * p.S + t;
		unsigned sh = (d * bits) % 8;
		unsigned kcode = (kc[tok * row + d * bits / 8] >> sh) & mask;
		unsigned vcode = (vc[tok * row + d * bits / 8] >> sh) & mask;
		size_t km = ((size_t)h * (p.S / G) + g) * D + d;
		size_t vm = tok * ngrp + d / G;
		float k = fmaf(ld_meta(p.meta, ks, km), (float)kcode,
			       ld_meta(p.meta, ko, km));
		float v = fmaf(ld_meta(p.meta, vs, vm), (float)vcode,
			       ld_meta(p.meta, vo, vm));
		size_t out = ((size_t)n * p.heads * p.S + tok) * D + d;

		st_elem(p.out_dtype, p.keys, out, k);
		st_elem(p.out_dtype, p.values, out, v);
	}
}

int kvs_cuda_dequantize(const struct kvs_shape *shape, const uint8_t *pool,
			uint64_t page_stride, const int32_t *pages,
			uint32_t count, enum kvs_dtype out_dtype, void *keys,
			void *values, void *stream)
{
	dequant_params p;
	int rc;

	if (kvs_shape_check(shape) || !pool || !pages || !keys || !values ||
	    (out_dtype != KVS_DTYPE_F32 && out_dtype != KVS_DTYPE_F16 &&
	     out_dtype != KVS_DTYPE_BF16)) {
		kvs_log(KVS_LOG_ERR, "cuda dequantize: bad arguments");
		return -KVS_EPARAM;
	}
	if (!count)
		return 0;
	rc = kvs_cuda_layout(shape, &p.lay, NULL);
	if (rc)
		return rc;
	p.heads = shape->kv_heads;
	p.D = shape->head_dim;
	p.G = shape->group;
	p.bits = shape->bits;
	p.S = shape->span;
	p.meta = shape->meta_type;
	p.out_dtype = out_dtype;
	p.pool = pool;
	p.page_stride = page_stride;
	p.pages = pages;
	p.keys = keys;
	p.values = values;
	dim3 grid(p.S / p.G, p.heads, count);
	dequant_kernel<<<grid, 256, 0, (cudaStream_t)stream>>>(p);
	return KVS_CUDA_CHECK(cudaGetLastError());
}
