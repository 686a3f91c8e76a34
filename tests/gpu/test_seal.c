/*
 * test_seal.c - the CUDA seal and dequantize kernels against the CPU
 * reference: codes and metadata bit-identical to kvs_block_quantize() on
 * fresh random inputs read through engine-layout strides (rows padded with
 * NaN the kernel must not read), with outlier channels, constant groups,
 * groups of signed zeros and ranges too tiny for a step; the warp-per-tile
 * fast path (G 32, D 64/128, fp16/bf16 input) and the generic kernel (other
 * G, fp32 input), through block strides or per-block source pointers
 * (16-byte aligned or not) with destination indices; non-finite input and
 * metadata overflow refused with the CPU's errors on both paths; groups
 * whose quotients fall exactly on half-integers (rounding ties); the
 * backend's whole images equal to the CPU backend's; dequantization
 * bit-exact.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "gpu_util.h"
#include "kvstash/stream.h"

static struct kvs_rng rng;

/* How the kernel reads its input. */
enum seal_src {
	SRC_STRIDES,    /* keys/values + n * block_stride */
	SRC_ARRAY,      /* src[2n], src[2n + 1], images at dst[n] */
	SRC_UNALIGNED,  /* as SRC_ARRAY, pointers one element off 16 bytes */
};

struct seal_case {
	struct kvs_shape shape;
	enum kvs_dtype in;
	uint32_t blocks;
	uint32_t pad;           /* elements after each token's H x D */
	enum seal_src src;
};

/* Engine-layout input [blocks*S][H][D] with the features the contract
 * must survive; returns a malloc'd buffer of @in elements. */
static void *make_input(const struct seal_case *c, int key)
{
	const struct kvs_shape *s = &c->shape;
	size_t n = (size_t)c->blocks * s->span * s->kv_heads * s->head_dim;
	size_t esz = kvs_dtype_size(c->in);
	uint8_t *buf = malloc(n * esz);
	int huge = c->in == KVS_DTYPE_BF16 && s->meta_type == KVS_DTYPE_F32;

	assert_non_null(buf);
	for (size_t i = 0; i < n; i++) {
		uint32_t d = i % s->head_dim;
		size_t tok = i / ((size_t)s->kv_heads * s->head_dim);
		float x = kvs_rng_normal(&rng);

		if (key && d % 17 == 3)
			x = x * 40.0f + 25.0f;          /* outlier channel */
		if (key && d == 5 && tok % s->span < s->group)
			x = 0.71875f;                  /* constant Key group */
		if (key && d == 9 && (tok / s->group) % 3 == 1)
			x = (kvs_rng_next(&rng) & 1) ? 5.9604645e-8f : 0.0f;
		if (key && d == 11 && (tok / s->group) % 4 == 2)
			x = (kvs_rng_next(&rng) & 1) ? -0.0f : 0.0f;
		if (!key && tok % 13 == 6 && d >= 2u * s->group &&
		    d < 3u * s->group)
			x = (kvs_rng_next(&rng) & 1) ? -0.0f : 0.0f;
		if (!key && tok % 7 == 3 && d < s->group)
			x = -1.25f;             /* constant Value group */
		if (!key && tok % 11 == 5 && d >= s->group &&
		    d < 2u * s->group)
			x = (kvs_rng_next(&rng) & 1) ? 1e-30f : 0.0f;
		/* a step whose reciprocal would overflow (bf16 input) */
		if (!key && tok % 17 == 8 &&
		    d >= (uint32_t)s->head_dim - s->group)
			x = (kvs_rng_next(&rng) & 1) ? 1e-38f : 0.0f;
		if (key && d == 13 && (tok / s->group) % 5 == 3)
			x = (kvs_rng_next(&rng) & 1) ? -2e-38f : 1e-39f;
		/* ranges near FLT_MAX, which only fp32 metadata holds */
		if (huge && key && d == 15 && (tok / s->group) % 7 == 4)
			x = (kvs_rng_next(&rng) & 1) ? -1.5e38f : 1.5e38f;
		if (huge && !key && tok % 19 == 2 && d < s->group)
			x = (kvs_rng_next(&rng) & 1) ? -1.5e38f : 1.7e38f;
		/* halves of 0 .. 3: groups whose quotients land exactly on
		 * the half-integers where the code rounds to even */
		if (key && d == 21)
			x = (float)(kvs_rng_next(&rng) % 7) * 0.5f;
		if (!key && tok % 23 == 4)
			x = (float)(kvs_rng_next(&rng) % 7) * 0.5f;
		kvs_dtype_store(c->in, buf, i, kvs_round_to(c->in, x));
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

/* Image slot block @b is sealed into: reversed under SRC_ARRAY. */
static uint32_t dst_of(const struct seal_case *c, uint32_t b)
{
	return c->src == SRC_STRIDES ? b : c->blocks - 1 - b;
}

/* Device copy of engine-layout @src with @c->pad NaN elements after each
 * token's rows, starting @lead elements into the allocation (*base). */
static uint8_t *padded_dup(const struct seal_case *c, const uint8_t *src,
			   size_t lead, void **base)
{
	const struct kvs_shape *s = &c->shape;
	size_t esz = kvs_dtype_size(c->in), row = (size_t)s->kv_heads *
						   s->head_dim;
	size_t tokens = (size_t)c->blocks * s->span, pitch = row + c->pad;
	size_t n = (lead + tokens * pitch) * esz;
	uint8_t *buf = malloc(n), *dev;

	assert_non_null(buf);
	for (size_t i = 0; i < n / esz; i++)
		kvs_dtype_store(c->in, buf, i, NAN);
	for (size_t t = 0; t < tokens; t++)
		memcpy(buf + (lead + t * pitch) * esz, src + t * row * esz,
		       row * esz);
	dev = gpu_dup(buf, n);
	free(buf);
	*base = dev;
	return dev + lead * esz;
}

/* Runs the GPU seal on engine-layout K/V; returns its error, images in
 * @host (blocks x stride bytes, block b in slot dst_of(b)) on success. */
static int gpu_seal(const struct seal_case *c, const void *k, const void *v,
		    uint8_t *host, uint64_t stride)
{
	const struct kvs_shape *s = &c->shape;
	size_t lead = c->src == SRC_UNALIGNED ? 1 : 0;
	size_t esz = kvs_dtype_size(c->in);
	void *bk, *bv, **src = NULL;
	uint8_t *dk = padded_dup(c, k, lead, &bk);
	uint8_t *dv = padded_dup(c, v, lead, &bv);
	uint8_t *img = gpu_alloc(c->blocks * stride);
	int32_t *dst = NULL;
	struct kvs_cuda_seal a;
	int rc;

	gpu_poison(img, c->blocks * stride);
	memset(&a, 0, sizeof(a));
	a.shape = *s;
	a.in_dtype = c->in;
	a.token_stride = (int64_t)s->kv_heads * s->head_dim + c->pad;
	a.head_stride = s->head_dim;
	a.block_stride = (int64_t)s->span * a.token_stride;
	a.blocks = c->blocks;
	a.images = img;
	a.image_stride = stride;
	if (c->src == SRC_STRIDES) {
		a.keys = dk;
		a.values = dv;
	} else {
		void **hs = malloc(2 * c->blocks * sizeof(*hs));
		int32_t *hd = malloc(c->blocks * sizeof(*hd));

		assert_non_null(hs);
		assert_non_null(hd);
		for (uint32_t b = 0; b < c->blocks; b++) {
			hs[2 * b] = dk + b * a.block_stride * esz;
			hs[2 * b + 1] = dv + b * a.block_stride * esz;
			hd[b] = (int32_t)dst_of(c, b);
		}
		src = gpu_dup(hs, 2 * c->blocks * sizeof(*hs));
		dst = gpu_dup(hd, c->blocks * sizeof(*hd));
		free(hs);
		free(hd);
		a.src = (const void *const *)src;
		a.dst = dst;
	}
	rc = kvs_cuda_seal_blocks(&a);
	if (rc == 0)
		gpu_get(host, img, c->blocks * stride);
	cudaFree(src);
	cudaFree(dst);
	cudaFree(bk);
	cudaFree(bv);
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
			const uint8_t *g = gpu + dst_of(c, b) * stride +
					   lay.offset[sec];
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
		/* fast path: G 32, D 64/128, b 2/4, fp16/bf16 in, all metas */
		{ { 2, 128, 32, 2, KVS_DTYPE_F16, 128, 128 },
		  KVS_DTYPE_F16, 3, 0, SRC_STRIDES },
		{ { 8, 128, 32, 2, KVS_DTYPE_F16, 128, 128 },
		  KVS_DTYPE_BF16, 4, 0, SRC_STRIDES },
		{ { 3, 128, 32, 2, KVS_DTYPE_F16, 128, 128 },
		  KVS_DTYPE_F16, 5, 40, SRC_STRIDES },
		{ { 2, 128, 32, 4, KVS_DTYPE_BF16, 128, 128 },
		  KVS_DTYPE_BF16, 3, 8, SRC_ARRAY },
		{ { 2, 128, 32, 4, KVS_DTYPE_F32, 256, 128 },
		  KVS_DTYPE_F16, 2, 16, SRC_STRIDES },
		{ { 3, 128, 32, 2, KVS_DTYPE_BF16, 128, 128 },
		  KVS_DTYPE_BF16, 2, 8, SRC_UNALIGNED },
		{ { 4, 64, 32, 2, KVS_DTYPE_F16, 128, 128 },
		  KVS_DTYPE_F16, 3, 8, SRC_STRIDES },
		{ { 4, 64, 32, 4, KVS_DTYPE_BF16, 256, 128 },
		  KVS_DTYPE_BF16, 2, 0, SRC_ARRAY },
		{ { 1, 64, 32, 2, KVS_DTYPE_F32, 128, 128 },
		  KVS_DTYPE_BF16, 3, 24, SRC_STRIDES },
		{ { 3, 64, 32, 4, KVS_DTYPE_F32, 128, 128 },
		  KVS_DTYPE_F16, 2, 0, SRC_UNALIGNED },
		{ { 2, 64, 32, 4, KVS_DTYPE_F16, 128, 128 },
		  KVS_DTYPE_F16, 2, 16, SRC_ARRAY },
		{ { 2, 128, 32, 4, KVS_DTYPE_F32, 128, 128 },
		  KVS_DTYPE_BF16, 2, 0, SRC_ARRAY },
		/* generic kernel: other G, fp32 input, unaligned rows */
		{ { 3, 64, 16, 4, KVS_DTYPE_BF16, 256, 128 },
		  KVS_DTYPE_BF16, 2, 0, SRC_STRIDES },
		{ { 1, 128, 64, 2, KVS_DTYPE_F32, 128, 128 },
		  KVS_DTYPE_F16, 2, 0, SRC_STRIDES },
		{ { 2, 128, 32, 2, KVS_DTYPE_F16, 128, 128 },
		  KVS_DTYPE_F32, 2, 4, SRC_ARRAY },
		{ { 2, 64, 32, 4, KVS_DTYPE_BF16, 128, 128 },
		  KVS_DTYPE_F16, 2, 3, SRC_STRIDES },
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		for (int rep = 0; rep < 3; rep++)
			check_case(&cases[i]);
}

/* One bad element: both implementations refuse with the same error. */
static void check_refused(const struct seal_case *c, float bad, int key,
			  int want)
{
	const struct kvs_shape *s = &c->shape;
	size_t per_block = (size_t)s->span * s->kv_heads * s->head_dim;
	struct kvs_layout lay;
	uint8_t *k = make_input(c, 1), *v = make_input(c, 0);
	size_t at = kvs_rng_below(&rng, (uint32_t)(c->blocks * per_block));
	uint8_t *host, *cpu;
	void *bk, *bv;

	kvs_dtype_store(c->in, key ? k : v, at, bad);
	assert_int_equal(kvs_block_layout(s, &lay), 0);
	host = malloc(c->blocks * (size_t)lay.total_size + 4096);
	cpu = malloc(lay.total_size);
	assert_int_equal(gpu_seal(c, k, v, host, (lay.total_size + 255) /
						 256 * 256), want);
	bk = block_input(c, k, (uint32_t)(at / per_block));
	bv = block_input(c, v, (uint32_t)(at / per_block));
	assert_int_equal(kvs_block_quantize(s, c->in, bk, bv, cpu), want);
	free(bk);
	free(bv);
	free(cpu);
	free(host);
	free(k);
	free(v);
}

static void test_refusals(void **state)
{
	/* fast path (both D, both widths, an src array) and generic */
	static const struct seal_case fast[] = {
		{ { 2, 128, 32, 2, KVS_DTYPE_F16, 128, 128 },
		  KVS_DTYPE_F16, 2, 0, SRC_STRIDES },
		{ { 2, 64, 32, 4, KVS_DTYPE_F16, 128, 128 },
		  KVS_DTYPE_F16, 2, 8, SRC_ARRAY },
		{ { 2, 128, 16, 2, KVS_DTYPE_F16, 128, 128 },
		  KVS_DTYPE_F16, 2, 0, SRC_STRIDES },
	};

	(void)state;
	for (size_t i = 0; i < sizeof(fast) / sizeof(fast[0]); i++) {
		struct seal_case c = fast[i];

		check_refused(&c, NAN, 1, -KVS_ENONFINITE);
		check_refused(&c, INFINITY, 0, -KVS_ENONFINITE);
		c.in = KVS_DTYPE_BF16;
		check_refused(&c, -INFINITY, 1, -KVS_ENONFINITE);
		check_refused(&c, NAN, 0, -KVS_ENONFINITE);
		/* bf16 input far outside fp16: the origin or the step
		 * (also at b = 4) overflows fp16 metadata */
		check_refused(&c, -1.0e6f, 1, -KVS_ERANGE);
		check_refused(&c, 1.1e6f, 0, -KVS_ERANGE);
	}
}

/* The CUDA backend's whole images (header, checksums) equal the CPU's,
 * and dequantizing them on the GPU gives the CPU's floats bit for bit. */
static void test_backend(void **state)
{
	const struct kvs_backend_ops *gpu = kvs_backend_cuda();
	const struct kvs_backend_ops *cpu = kvs_backend_cpu();
	struct seal_case c = { { 4, 128, 32, 2, KVS_DTYPE_F16, 128, 128 },
			       KVS_DTYPE_F16, 1, 0, SRC_STRIDES };
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
