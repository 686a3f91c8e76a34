/*
 * test_seal.c - the CUDA seal and dequantize kernels against the CPU
 * reference: codes and metadata bit-identical to kvs_block_quantize() on
 * fresh random inputs read through engine-layout strides, with outlier
 * channels, constant groups, groups of signed zeros and ranges too tiny
 * for a step; non-finite input and metadata overflow refused with the
 * CPU's errors; the backend's whole images equal to the CPU backend's;
 * dequantization bit-exact.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "gpu_util.h"
#include "kvstash/stream.h"

static struct gpu_rng rng;

struct seal_case {
	struct kvs_shape shape;
	enum kvs_dtype in;
	uint32_t blocks;
};

/* Engine-layout input [blocks*S][H][D] with the features the contract
 * must survive; returns a malloc'd buffer of @in elements. */
static void *make_input(const struct seal_case *c, int key)
{
	const struct kvs_shape *s = &c->shape;
	size_t n = (size_t)c->blocks * s->span * s->kv_heads * s->head_dim;
	size_t esz = kvs_dtype_size(c->in);
	uint8_t *buf = malloc(n * esz);

	assert_non_null(buf);
	for (size_t i = 0; i < n; i++) {
		uint32_t d = i % s->head_dim;
		size_t tok = i / ((size_t)s->kv_heads * s->head_dim);
		float x = gpu_normal(&rng);

		if (key && d % 17 == 3)
			x = x * 40.0f + 25.0f;          /* outlier channel */
		if (key && d == 5 && tok % s->span < s->group)
			x = 0.71875f;                  /* constant Key group */
		if (key && d == 9 && (tok / s->group) % 3 == 1)
			x = (gpu_rng_next(&rng) & 1) ? 5.9604645e-8f : 0.0f;
		if (key && d == 11 && (tok / s->group) % 4 == 2)
			x = (gpu_rng_next(&rng) & 1) ? -0.0f : 0.0f;
		if (!key && tok % 13 == 6 && d >= 2u * s->group &&
		    d < 3u * s->group)
			x = (gpu_rng_next(&rng) & 1) ? -0.0f : 0.0f;
		if (!key && tok % 7 == 3 && d < s->group)
			x = -1.25f;             /* constant Value group */
		if (!key && tok % 11 == 5 && d >= s->group &&
		    d < 2u * s->group)
			x = (gpu_rng_next(&rng) & 1) ? 1e-30f : 0.0f;
		kvs_store(c->in, buf, i, kvs_round_to(c->in, x));
	}
	return buf;
}

/* [H][S][D] copy of block @b of an engine-layout buffer. */
static void *block_input(const struct seal_case *c, const uint8_t *src,
			 uint32_t b)
{
	const struct kvs_shape *s = &c->shape;
	size_t esz = kvs_dtype_size(c->in), D = s->head_dim;
	uint8_t *out = malloc((size_t)s->kv_heads * s->span * D * esz);

	assert_non_null(out);
	for (uint32_t h = 0; h < s->kv_heads; h++)
		for (uint32_t t = 0; t < s->span; t++)
			memcpy(out + (((size_t)h * s->span + t) * D) * esz,
			       src + ((((size_t)b * s->span + t) *
				       s->kv_heads + h) * D) * esz, D * esz);
	return out;
}

/* Runs the GPU seal on engine-layout K/V; returns its error, images in
 * @host (blocks x stride bytes) on success. */
static int gpu_seal(const struct seal_case *c, const void *k, const void *v,
		    uint8_t *host, uint64_t stride)
{
	const struct kvs_shape *s = &c->shape;
	size_t n = (size_t)c->blocks * s->span * s->kv_heads * s->head_dim *
		   kvs_dtype_size(c->in);
	void *dk = gpu_dup(k, n), *dv = gpu_dup(v, n);
	uint8_t *img = gpu_alloc(c->blocks * stride);
	struct kvs_cuda_seal a;
	int rc;

	gpu_poison(img, c->blocks * stride);
	memset(&a, 0, sizeof(a));
	a.shape = *s;
	a.in_dtype = c->in;
	a.keys = dk;
	a.values = dv;
	a.token_stride = (int64_t)s->kv_heads * s->head_dim;
	a.head_stride = s->head_dim;
	a.block_stride = (int64_t)s->span * a.token_stride;
	a.blocks = c->blocks;
	a.images = img;
	a.image_stride = stride;
	rc = kvs_cuda_seal_blocks(&a);
	if (rc == 0)
		gpu_get(host, img, c->blocks * stride);
	cudaFree(dk);
	cudaFree(dv);
	cudaFree(img);
	return rc;
}

static void check_case(const struct seal_case *c)
{
	const struct kvs_shape *s = &c->shape;
	struct kvs_layout lay;
	uint8_t *k = make_input(c, 1), *v = make_input(c, 0);
	uint64_t stride;
	uint8_t *gpu, *cpu;

	assert_int_equal(kvs_block_layout(s, &lay), 0);
	stride = (lay.total_size + 255) / 256 * 256;
	gpu = malloc(c->blocks * stride);
	cpu = calloc(1, lay.total_size);
	assert_non_null(gpu);
	assert_non_null(cpu);
	assert_int_equal(gpu_seal(c, k, v, gpu, stride), 0);
	for (uint32_t b = 0; b < c->blocks; b++) {
		void *bk = block_input(c, k, b), *bv = block_input(c, v, b);

		assert_int_equal(kvs_block_quantize(s, c->in, bk, bv, cpu), 0);
		for (int sec = 0; sec < KVS_BLOCK_SECTIONS; sec++) {
			const uint8_t *g = gpu + b * stride + lay.offset[sec];
			const uint8_t *r = cpu + lay.offset[sec];

			for (uint32_t i = 0; i < lay.length[sec]; i++)
				if (g[i] != r[i])
					fail_msg("block %u section %d byte %u: "
						 "gpu %02x cpu %02x", b, sec, i,
						 g[i], r[i]);
		}
		free(bk);
		free(bv);
	}
	free(cpu);
	free(gpu);
	free(k);
	free(v);
}

static void test_bit_exact(void **state)
{
	static const struct seal_case cases[] = {
		{ { 2, 128, 32, 2, KVS_DTYPE_F16, 128, 128 },
		  KVS_DTYPE_F16, 3 },
		{ { 3, 64, 16, 4, KVS_DTYPE_BF16, 256, 128 },
		  KVS_DTYPE_BF16, 2 },
		{ { 1, 128, 64, 2, KVS_DTYPE_F32, 128, 128 },
		  KVS_DTYPE_F16, 2 },
		{ { 8, 128, 32, 2, KVS_DTYPE_F16, 128, 128 },
		  KVS_DTYPE_BF16, 4 },
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		for (int rep = 0; rep < 3; rep++)
			check_case(&cases[i]);
}

/* One bad element: both implementations refuse with the same error. */
static void check_refused(enum kvs_dtype in, enum kvs_dtype meta, float bad,
			  int key, int want)
{
	struct seal_case c = { { 2, 128, 32, 2, (uint8_t)meta, 128, 128 },
			       in, 2 };
	struct kvs_layout lay;
	uint8_t *k = make_input(&c, 1), *v = make_input(&c, 0);
	size_t n = (size_t)c.blocks * 128 * 2 * 128;
	size_t at = gpu_below(&rng, (uint32_t)n);
	uint8_t *host, *cpu;
	void *bk, *bv;

	kvs_store(in, key ? k : v, at, bad);
	assert_int_equal(kvs_block_layout(&c.shape, &lay), 0);
	host = malloc(c.blocks * (size_t)lay.total_size + 4096);
	cpu = malloc(lay.total_size);
	assert_int_equal(gpu_seal(&c, k, v, host, (lay.total_size + 255) /
						  256 * 256), want);
	bk = block_input(&c, k, (uint32_t)(at / (128 * 2 * 128)));
	bv = block_input(&c, v, (uint32_t)(at / (128 * 2 * 128)));
	assert_int_equal(kvs_block_quantize(&c.shape, in, bk, bv, cpu), want);
	free(bk);
	free(bv);
	free(cpu);
	free(host);
	free(k);
	free(v);
}

static void test_refusals(void **state)
{
	(void)state;
	check_refused(KVS_DTYPE_F16, KVS_DTYPE_F16, NAN, 1, -KVS_ENONFINITE);
	check_refused(KVS_DTYPE_F16, KVS_DTYPE_F16, INFINITY, 0,
		      -KVS_ENONFINITE);
	check_refused(KVS_DTYPE_BF16, KVS_DTYPE_F16, -INFINITY, 1,
		      -KVS_ENONFINITE);
	/* bf16 input far outside fp16: the origin overflows fp16 metadata */
	check_refused(KVS_DTYPE_BF16, KVS_DTYPE_F16, -1.0e6f, 1, -KVS_ERANGE);
	check_refused(KVS_DTYPE_BF16, KVS_DTYPE_F16, 3.0e5f, 0, -KVS_ERANGE);
}

/* The CUDA backend's whole images (header, checksums) equal the CPU's,
 * and dequantizing them on the GPU gives the CPU's floats bit for bit. */
static void test_backend(void **state)
{
	const struct kvs_backend_ops *gpu = kvs_backend_cuda();
	const struct kvs_backend_ops *cpu = kvs_backend_cpu();
	struct seal_case c = { { 4, 128, 32, 2, KVS_DTYPE_F16, 128, 128 },
			       KVS_DTYPE_F16, 1 };
	struct kvs_ident id;
	struct kvs_layout lay;
	struct kvs_view view;
	uint8_t *k = make_input(&c, 1), *v = make_input(&c, 0);
	void *bk = block_input(&c, k, 0), *bv = block_input(&c, v, 0);
	uint8_t *ig, *ic;
	size_t n = 4 * 128 * 128;
	float *kg, *vg, *kc, *vc;

	(void)state;
	assert_non_null(gpu);
	memset(&id, 0, sizeof(id));
	id.layer = 7;
	id.block_id[0] = 0x5a;
	assert_int_equal(kvs_block_layout(&c.shape, &lay), 0);
	ig = calloc(1, lay.total_size);
	ic = calloc(1, lay.total_size);
	assert_int_equal(gpu->seal(&c.shape, &id, c.in, bk, bv, ig), 0);
	assert_int_equal(cpu->seal(&c.shape, &id, c.in, bk, bv, ic), 0);
	assert_memory_equal(ig, ic, lay.total_size);
	assert_int_equal(kvs_object_open(ig, lay.total_size, 0, &view), 0);
	kg = malloc(4 * n * sizeof(float));
	vg = kg + n;
	kc = vg + n;
	vc = kc + n;
	memset(kg, 0xff, 2 * n * sizeof(float));
	assert_int_equal(gpu->dequantize(&view, kg, vg), 0);
	assert_int_equal(kvs_block_dequantize(&view, kc, vc), 0);
	assert_memory_equal(kg, kc, n * sizeof(float));
	assert_memory_equal(vg, vc, n * sizeof(float));
	kvs_view_release(&view);
	free(kg);
	free(ig);
	free(ic);
	free(bk);
	free(bv);
	free(k);
	free(v);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_bit_exact),
		cmocka_unit_test(test_refusals),
		cmocka_unit_test(test_backend),
	};

	gpu_require();
	gpu_rng_init(&rng);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
