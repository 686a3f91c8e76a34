/*
 * test_runtime.c - the sequence runtime on the CUDA device against the
 * same runtime on the CPU device, step by step: a batch of three sequences
 * of different prompt lengths (prefilled from device K/V), 1,000 decode
 * steps in each compute order, every step's output within the fused
 * kernel's tolerance (relative error 1e-3 per sequence, as
 * test_attention.c), and every block the device sealed bit-identical to
 * the CPU's.  Then the two devices hand work to each other through a local
 * block store: blocks published and tails exported by the GPU are imported
 * by the CPU, and a prefix published by the CPU is attached by the GPU;
 * both decode on within the tolerance.  Exits 77 without a device.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "gpu_util.h"
#include "kvstash/runtime.h"

#define TOL 1e-3
#define LAYERS 2
#define KV 2
#define QH 8
#define D 128
#define B 3
#define STEPS 1000

static struct kvs_rng rng;

static struct kvs_rt *make_rt(enum kvs_rt_device device, enum kvs_order order,
			      const char *ns, struct kvs_blockstore *store)
{
	struct kvs_rt_config cfg;
	struct kvs_rt *rt = NULL;

	kvs_rt_config_default(&cfg, LAYERS, QH, KV, D);
	cfg.kv_dtype = KVS_DTYPE_F16;
	cfg.out_dtype = KVS_DTYPE_F32;
	cfg.order = order;
	cfg.device = device;
	cfg.max_tokens = 2048;
	cfg.pool_pages = 256;
	cfg.model_id = "gpu-runtime-test";
	cfg.name_space = ns;
	cfg.store = store;
	assert_int_equal(kvs_rt_create(&cfg, &rt), 0);
	assert_int_equal(kvs_rt_device(rt), device);
	return rt;
}

/* @n fp16 values: host bits in @h, their fp32 values in @f (may be NULL). */
static void fill(uint16_t *h, float *f, size_t n, float scale, int outliers)
{
	for (size_t i = 0; i < n; i++) {
		float x = kvs_rng_normal(&rng) * scale *
			  (outliers && i % 17 == 3 ? 6.0f : 1.0f);

		h[i] = kvs_f32_to_f16(x);
		if (f)
			f[i] = kvs_f16_to_f32(h[i]);
	}
}

/* Prefills @n tokens of every layer into @gpu (device K/V) and @cpu
 * (host, the same values). */
static void prefill_both(struct kvs_seq *gpu, struct kvs_seq *cpu, uint32_t n)
{
	size_t count = (size_t)KV * n * D, bytes = count * 2;
	uint16_t *k = malloc(bytes), *v = malloc(bytes);
	void *dk = gpu_alloc(bytes), *dv = gpu_alloc(bytes);

	for (uint32_t l = 0; l < LAYERS; l++) {
		fill(k, NULL, count, 1.0f, 1);
		fill(v, NULL, count, 1.0f, 0);
		gpu_put(dk, k, bytes);
		gpu_put(dv, v, bytes);
		if (gpu)
			assert_int_equal(kvs_seq_prefill(gpu, l, dk, dv, n), 0);
		if (cpu)
			assert_int_equal(kvs_seq_prefill(cpu, l, k, v, n), 0);
	}
	cudaFree(dk);
	cudaFree(dv);
	free(k);
	free(v);
}

/* One step of layer @l for both batches of @n sequences; returns the worst
 * relative error of a sequence. */
static double step_both(struct kvs_batch *gb, struct kvs_batch *cb, uint32_t n,
			uint32_t l, void *dq, void *dk, void *dv, float *dout)
{
	uint16_t q[B * QH * D], k[B * KV * D], v[B * KV * D];
	float got[B * QH * D], want[B * QH * D];
	double worst = 0.0;

	fill(q, NULL, (size_t)n * QH * D, 1.5f, 0);
	fill(k, NULL, (size_t)n * KV * D, 1.0f, 1);
	fill(v, NULL, (size_t)n * KV * D, 1.0f, 0);
	gpu_put(dq, q, sizeof(uint16_t) * n * QH * D);
	gpu_put(dk, k, sizeof(uint16_t) * n * KV * D);
	gpu_put(dv, v, sizeof(uint16_t) * n * KV * D);
	gpu_poison(dout, sizeof(float) * n * QH * D);
	assert_int_equal(kvs_batch_step(gb, l, dq, dk, dv, dout), 0);
	assert_int_equal(kvs_batch_step(cb, l, q, k, v, want), 0);
	gpu_get(got, dout, sizeof(float) * n * QH * D);
	for (uint32_t i = 0; i < n; i++) {
		double e = gpu_rel_err(got + (size_t)i * QH * D,
				       want + (size_t)i * QH * D, QH * D);

		if (!(e <= TOL))
			fail_msg("layer %u sequence %u: relative error %g", l,
				 i, e);
		if (e > worst)
			worst = e;
	}
	return worst;
}

static void same_blocks(struct kvs_seq *a, struct kvs_seq *b)
{
	for (uint32_t l = 0; l < LAYERS; l++) {
		uint32_t blocks = kvs_seq_block_count(a, l);

		assert_int_equal(blocks, kvs_seq_block_count(b, l));
		for (uint32_t i = 0; i < blocks; i++) {
			uint8_t *x, *y;
			size_t xn, yn;

			assert_int_equal(kvs_seq_block(a, l, i, &x, &xn), 0);
			assert_int_equal(kvs_seq_block(b, l, i, &y, &yn), 0);
			assert_int_equal(xn, yn);
			assert_memory_equal(x, y, xn);
			free(x);
			free(y);
		}
	}
}

static void run_order(enum kvs_order order)
{
	static const uint32_t prompts[B] = { 1, 200, 640 };
	struct kvs_rt *grt = make_rt(KVS_RT_CUDA, order, "", NULL);
	struct kvs_rt *crt = make_rt(KVS_RT_CPU, order, "", NULL);
	struct kvs_batch *gb, *cb;
	struct kvs_seq *gs[B], *cs[B];
	void *dq = gpu_alloc(2 * B * QH * D), *dk = gpu_alloc(2 * B * KV * D);
	void *dv = gpu_alloc(2 * B * KV * D), *dout = gpu_alloc(4 * B * QH * D);
	double worst = 0.0;

	assert_int_equal(kvs_batch_create(grt, B, &gb), 0);
	assert_int_equal(kvs_batch_create(crt, B, &cb), 0);
	for (int i = 0; i < B; i++) {
		assert_int_equal(kvs_seq_create(gb, &gs[i]), 0);
		assert_int_equal(kvs_seq_create(cb, &cs[i]), 0);
		prefill_both(gs[i], cs[i], prompts[i]);
	}
	for (uint32_t s = 0; s < STEPS; s++) {
		for (uint32_t l = 0; l < LAYERS; l++) {
			double e = step_both(gb, cb, B, l, dq, dk, dv, dout);

			if (e > worst)
				worst = e;
		}
	}
	assert_int_equal(kvs_rt_sync(grt), 0);
	for (int i = 0; i < B; i++) {
		assert_int_equal(kvs_seq_tokens(gs[i], 1), prompts[i] + STEPS);
		same_blocks(gs[i], cs[i]);
	}
	printf("%s: %d steps x %d layers, batch of %d, worst relative error "
	       "%.3g\n",
	       kvs_order_name(order), STEPS, LAYERS, B, worst);
	kvs_rt_destroy(grt);
	kvs_rt_destroy(crt);
	cudaFree(dq);
	cudaFree(dk);
	cudaFree(dv);
	cudaFree(dout);
}

static void test_cuda_matches_cpu_kivi(void **state)
{
	(void)state;
	run_order(KVS_ORDER_KIVI);
}

static void test_cuda_matches_cpu_paper(void **state)
{
	(void)state;
	run_order(KVS_ORDER_PAPER);
}

/* GPU prefill -> CPU decode through blocks and tails; CPU prefix -> GPU
 * attach.  Both sides continue within the tolerance. */
static void test_cross_device_handoff(void **state)
{
	char dir[] = "/tmp/kvs-gpu-rt-XXXXXX";
	struct kvs_blockstore *store;
	struct kvs_rt *grt, *crt;
	struct kvs_batch *gb, *cb, *gb2, *cb2;
	struct kvs_seq *g, *c, *g2, *c2;
	uint32_t ids[700], attached;
	uint8_t rid[KVS_ID_SIZE];
	void *dq = gpu_alloc(2 * QH * D), *dk = gpu_alloc(2 * KV * D);
	void *dv = gpu_alloc(2 * KV * D), *dout = gpu_alloc(4 * QH * D);
	char cmd[128];

	(void)state;
	assert_non_null(mkdtemp(dir));
	assert_int_equal(kvs_blockstore_local(dir, NULL, &store), 0);
	grt = make_rt(KVS_RT_CUDA, KVS_ORDER_KIVI, "x", store);
	crt = make_rt(KVS_RT_CPU, KVS_ORDER_KIVI, "x", store);
	for (uint32_t i = 0; i < 700; i++)
		ids[i] = kvs_rng_below(&rng, 32000);
	memset(rid, 0x42, sizeof(rid));

	/* the GPU prefills 700 tokens and hands them over */
	assert_int_equal(kvs_batch_create(grt, 1, &gb), 0);
	assert_int_equal(kvs_batch_create(crt, 1, &cb), 0);
	assert_int_equal(kvs_seq_create(gb, &g), 0);
	assert_int_equal(kvs_seq_create(cb, &c), 0);
	assert_int_equal(kvs_seq_append_ids(g, ids, 700), 0);
	prefill_both(g, NULL, 700);
	assert_int_equal(kvs_seq_export_tail(g, rid, 60000), 0);
	assert_int_equal(kvs_seq_import_tail(c, ids, 700, rid), 0);
	same_blocks(g, c);
	for (uint32_t s = 0; s < 300; s++)
		for (uint32_t l = 0; l < LAYERS; l++)
			step_both(gb, cb, 1, l, dq, dk, dv, dout);

	/* the GPU attaches what the GPU published, the CPU too, and both
	 * decode alike */
	assert_int_equal(kvs_batch_create(grt, 1, &gb2), 0);
	assert_int_equal(kvs_batch_create(crt, 1, &cb2), 0);
	assert_int_equal(kvs_seq_create(gb2, &g2), 0);
	assert_int_equal(kvs_seq_create(cb2, &c2), 0);
	assert_int_equal(
		kvs_seq_attach_prefix(g2, ids, 700, UINT32_MAX, &attached), 0);
	assert_int_equal(attached, 512);
	assert_int_equal(kvs_seq_attach_finish(g2, &attached), 0);
	assert_int_equal(attached, 512);
	assert_int_equal(
		kvs_seq_attach_prefix(c2, ids, 700, UINT32_MAX, &attached), 0);
	assert_int_equal(kvs_seq_attach_finish(c2, &attached), 0);
	assert_int_equal(attached, 512);
	prefill_both(g2, c2, 188);
	same_blocks(g2, c2);
	for (uint32_t s = 0; s < 200; s++)
		for (uint32_t l = 0; l < LAYERS; l++)
			step_both(gb2, cb2, 1, l, dq, dk, dv, dout);

	kvs_rt_destroy(grt);
	kvs_rt_destroy(crt);
	kvs_blockstore_release(store);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	assert_int_equal(system(cmd), 0);
	cudaFree(dq);
	cudaFree(dk);
	cudaFree(dv);
	cudaFree(dout);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cuda_matches_cpu_kivi),
		cmocka_unit_test(test_cuda_matches_cpu_paper),
		cmocka_unit_test(test_cross_device_handoff),
	};

	gpu_require();
	gpu_rng_init(&rng);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
