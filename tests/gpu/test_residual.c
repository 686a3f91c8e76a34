/*
 * test_residual.c - a whole decode loop on the device (append, fused
 * attention, seal of the full Key residual, pop of the oldest Value, in the
 * `kivi` order) against the CPU stream (kvs_stream_step) fed the same
 * fp16-representable tokens: every step's output within 1e-3, and every
 * page the device sealed from its residuals bit-identical to the CPU
 * stream's block.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "gpu_util.h"
#include "kvstash/stream.h"

#define B 3
#define H 2
#define HQ 8
#define D 128
#define R 128
#define STEPS 400

static struct kvs_rng rng;

static void test_decode_loop(void **state)
{
	struct kvs_shape shape;
	struct kvs_stream *cpu[B];
	struct kvs_stream_config cfg;
	struct kvs_cuda_resid st;
	struct kvs_cuda_attn a;
	struct kvs_layout lay;
	/* different row counts for K and V: each part's head stride is its
	 * own (the Key residual needs R rows, the Value FIFO 2R + 2) */
	const uint32_t kstride = R + 3, stride = 2 * R + 2;
	const uint32_t max_pages = STEPS / R + 1;
	uint64_t pstride;
	float q[B][HQ * D], k[B][H * D], v[B][H * D];
	float out[B][HQ * D], ref[HQ * D];
	uint16_t qh[B * HQ * D], kh[B * H * D], vh[B * H * D];
	int32_t ids[B], pages[B];
	uint32_t next_page = 0;
	double worst = 0.0;

	(void)state;
	kvs_shape_default(&shape, H, D);
	assert_int_equal(kvs_block_layout(&shape, &lay), 0);
	pstride = (lay.total_size + 255) / 256 * 256;
	memset(&cfg, 0, sizeof(cfg));
	cfg.shape = shape;
	cfg.order = KVS_ORDER_KIVI;
	cfg.q_heads = HQ;
	for (int b = 0; b < B; b++)
		assert_int_equal(kvs_stream_create(&cfg, &cpu[b]), 0);

	memset(&st, 0, sizeof(st));
	st.shape = shape;
	st.batch = B;
	st.dtype = KVS_DTYPE_F16;
	st.k_resid = gpu_alloc((size_t)B * H * kstride * D * 2);
	st.v_resid = gpu_alloc((size_t)B * H * stride * D * 2);
	st.k_resid_stride = kstride;
	st.v_resid_stride = stride;
	st.seqs = gpu_alloc(sizeof(struct kvs_cuda_seq) * B);
	cudaMemset(st.seqs, 0, sizeof(struct kvs_cuda_seq) * B);
	st.page_table = gpu_alloc(sizeof(int32_t) * B * max_pages);
	st.max_pages = max_pages;
	uint8_t *pool = gpu_alloc(pstride * B * max_pages);
	int32_t *d_ids = gpu_alloc(sizeof(ids)), *d_pages = gpu_alloc(
		sizeof(pages));
	void *dq = gpu_alloc(sizeof(qh)), *dk = gpu_alloc(sizeof(kh));
	void *dv = gpu_alloc(sizeof(vh));

	memset(&a, 0, sizeof(a));
	a.shape = shape;
	a.batch = B;
	a.q_heads = HQ;
	a.dtype = KVS_DTYPE_F16;
	a.out_dtype = KVS_DTYPE_F32;
	a.scale = 1.0f / sqrtf((float)D);
	a.max_tokens = STEPS;
	a.q = dq;
	a.pool = pool;
	a.page_stride = pstride;
	a.page_table = st.page_table;
	a.max_pages = max_pages;
	a.seqs = st.seqs;
	a.k_resid = st.k_resid;
	a.v_resid = st.v_resid;
	a.k_resid_stride = kstride;
	a.v_resid_stride = stride;
	a.out = gpu_alloc(sizeof(out));
	a.workspace_size = kvs_cuda_attn_workspace(&a);
	a.workspace = gpu_alloc(a.workspace_size);

	for (uint32_t step = 0; step < STEPS; step++) {
		uint32_t T = step + 1;

		for (int b = 0; b < B; b++) {
			for (int i = 0; i < HQ * D; i++) {
				q[b][i] = kvs_round_to(KVS_DTYPE_F16,
						       kvs_rng_normal(&rng) * 1.5f);
				qh[b * HQ * D + i] = kvs_f32_to_f16(q[b][i]);
			}
			for (int i = 0; i < H * D; i++) {
				k[b][i] = kvs_round_to(KVS_DTYPE_F16,
					kvs_rng_normal(&rng) *
					(i % 9 == 4 ? 6 : 1));
				v[b][i] = kvs_round_to(KVS_DTYPE_F16,
						       kvs_rng_normal(&rng));
				kh[b * H * D + i] = kvs_f32_to_f16(k[b][i]);
				vh[b * H * D + i] = kvs_f32_to_f16(v[b][i]);
			}
		}
		gpu_put(dq, qh, sizeof(qh));
		gpu_put(dk, kh, sizeof(kh));
		gpu_put(dv, vh, sizeof(vh));
		assert_int_equal(kvs_cuda_resid_append(&st, dk, dv), 0);
		gpu_poison(a.out, sizeof(out));
		assert_int_equal(kvs_cuda_attend(&a), 0);
		if (T % R == 0) {
			for (int b = 0; b < B; b++) {
				ids[b] = b;
				pages[b] = (int32_t)next_page++;
			}
			gpu_put(d_ids, ids, sizeof(ids));
			gpu_put(d_pages, pages, sizeof(pages));
			assert_int_equal(kvs_cuda_resid_seal(&st, d_ids,
				d_pages, B, pool, pstride, NULL), 0);
		}
		assert_int_equal(kvs_cuda_resid_pop(&st), 0);
		gpu_get(out, a.out, sizeof(out));
		for (int b = 0; b < B; b++) {
			assert_int_equal(kvs_stream_step(cpu[b], q[b], k[b],
							 v[b], ref, NULL), 0);
			double e = gpu_rel_err(out[b], ref, HQ * D);

			if (e > worst)
				worst = e;
			if (!(e <= 1e-3))
				fail_msg("step %u sequence %d: relative "
					 "error %g", step, b, e);
		}
	}
	printf("decode loop: %d steps, worst relative error %.3g\n", STEPS,
	       worst);

	/* pages sealed on the device == the CPU stream's blocks */
	uint8_t *page = malloc(pstride);
	int32_t table[B * (STEPS / R + 1)];
	gpu_get(table, st.page_table, sizeof(table));
	for (int b = 0; b < B; b++) {
		assert_int_equal(kvs_stream_block_count(cpu[b]), STEPS / R);
		for (uint32_t i = 0; i < STEPS / R; i++) {
			const struct kvs_view *view =
				kvs_stream_block(cpu[b], i);

			gpu_get(page, pool + (size_t)table[b * max_pages + i] *
				pstride, pstride);
			for (int s = 0; s < KVS_BLOCK_SECTIONS; s++)
				assert_memory_equal(page + lay.offset[s],
						    view->section[s],
						    lay.length[s]);
		}
		kvs_stream_destroy(cpu[b]);
	}
	free(page);
	cudaFree(st.k_resid);
	cudaFree(st.v_resid);
	cudaFree(st.seqs);
	cudaFree(st.page_table);
	cudaFree(pool);
	cudaFree(d_ids);
	cudaFree(d_pages);
	cudaFree(dq);
	cudaFree(dk);
	cudaFree(dv);
	cudaFree(a.out);
	cudaFree(a.workspace);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_decode_loop),
	};

	gpu_require();
	gpu_rng_init(&rng);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
