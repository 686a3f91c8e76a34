/*
 * test_attention.c - the fused decode attention kernel against the CPU
 * reference (kvs_backend_cpu()->attend) on the same quantized cache:
 * relative error <= 1e-3 per sequence over fresh random batches of 1 to 16
 * sequences of different lengths, from 1 token (no history) through exact
 * multiples of R to 128K; GQA 1, 4 and 8; both compute orders' boundaries
 * (an empty Key residual, a Value residual of R+1) and random ones; the
 * tensor-core path and the generic path; fp16 and bf16 inputs; pages
 * scattered through the pool, Value FIFOs starting mid-buffer; outputs
 * poisoned before every run; three calls on one poisoned workspace, with
 * bit-identical results; the split-and-merge plans and the cluster plan
 * (no merge kernel).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "gpu_util.h"
#include "kernels/kernels_test.h"
#include "kvstash/stream.h"

#define TOL 1e-3

static struct kvs_rng rng;

enum bounds { KIVI, PAPER, RANDOM };

struct attn_case {
	const char *name;
	uint32_t batch, kv_heads, gqa;
	struct kvs_shape shape;
	enum kvs_dtype dtype;
	enum bounds bounds;
	uint32_t min_tokens, max_tokens; /* random lengths in [min, max] */
	uint32_t multiple;               /* lengths rounded up to this */
	uint32_t flags;                  /* KVS_CUDA_ATTN_*, test flags */
};

/* test-only flags: max_resid_rows 1, below the truth (still exact); the
 * fast path's build left to the plan (otherwise a case without OCC3 runs
 * the 4-CTA build) */
#define SHORT_BOUND 0x80000000u
#define AUTO_BUILD 0x40000000u

struct seq_host {
	struct kvs_cuda_seq len;
	uint32_t tokens, blocks;
	uint8_t **objects;
	struct kvs_view *views;
	const struct kvs_view **view_ptrs;
	float *k_resid, *v_resid;        /* [kv][stride][D] */
};

static void lengths(const struct attn_case *c, uint32_t T, uint32_t stride,
		    struct kvs_cuda_seq *l)
{
	uint32_t R = c->shape.residual, G = c->shape.group;

	memset(l, 0, sizeof(*l));
	if (c->bounds == KIVI) {
		l->k_resid_len = (T - 1) % R + 1;
		l->v_resid_len = T < R + 1 ? T : R + 1;
	} else if (c->bounds == PAPER) {
		l->k_resid_len = T % R;
		l->v_resid_len = T < R ? T : R;
	} else {
		uint32_t kq = T - kvs_rng_below(&rng, (T < stride - G ? T :
						    stride - G) + 1);
		l->k_resid_len = T - kq / G * G;
		l->v_resid_len = kvs_rng_below(&rng, (T < stride ? T : stride) + 1);
	}
	l->k_quant_len = T - l->k_resid_len;
	l->v_quant_len = T - l->v_resid_len;
}

static float rounded(enum kvs_dtype t, float x)
{
	return kvs_round_to(t, x);
}

/* Random K/V for the blocks, sealed by the CPU reference. */
static void make_history(const struct attn_case *c, struct seq_host *s)
{
	const struct kvs_shape *sh = &c->shape;
	size_t n = (size_t)sh->kv_heads * sh->span * sh->head_dim;
	float *k = malloc(2 * n * sizeof(float)), *v = k + n;
	struct kvs_ident id;

	assert_non_null(k);
	memset(&id, 0, sizeof(id));
	s->objects = calloc(s->blocks + 1, sizeof(*s->objects));
	s->views = calloc(s->blocks + 1, sizeof(*s->views));
	s->view_ptrs = calloc(s->blocks + 1, sizeof(*s->view_ptrs));
	for (uint32_t b = 0; b < s->blocks; b++) {
		size_t len;

		for (size_t i = 0; i < n; i++) {
			uint32_t d = i % sh->head_dim;

			k[i] = kvs_rng_normal(&rng) * (d % 13 == 2 ? 8.0f : 1.0f) +
			       (d % 7 == 1 ? 3.0f : 0.0f);
			v[i] = kvs_rng_normal(&rng);
		}
		assert_int_equal(kvs_block_seal(sh, &id, KVS_DTYPE_F32, k, v, 0,
						&s->objects[b], &len), 0);
		assert_int_equal(kvs_object_open(s->objects[b], len, 0,
						 &s->views[b]), 0);
		s->view_ptrs[b] = &s->views[b];
	}
	free(k);
}

static void free_seq(struct seq_host *s)
{
	for (uint32_t b = 0; b < s->blocks; b++) {
		kvs_view_release(&s->views[b]);
		free(s->objects[b]);
	}
	free(s->objects);
	free(s->views);
	free(s->view_ptrs);
	free(s->k_resid);
	free(s->v_resid);
}

static void run_case(const struct attn_case *c)
{
	const struct kvs_shape *sh = &c->shape;
	const uint32_t B = c->batch, H = c->kv_heads, Hq = H * c->gqa;
	const uint32_t D = sh->head_dim, S = sh->span;
	const uint32_t stride = 2 * sh->residual + 2;
	const size_t esz = kvs_dtype_size(c->dtype);
	struct seq_host *seq = calloc(B, sizeof(*seq));
	struct kvs_cuda_seq *lens = calloc(B, sizeof(*lens));
	struct kvs_layout lay;
	uint32_t max_tokens = 0, max_pages = 1, total_pages = 0;
	uint64_t pstride;
	float *q = malloc(sizeof(float) * B * Hq * D);
	float *out = malloc(sizeof(float) * B * Hq * D);
	float *ref = malloc(sizeof(float) * B * Hq * D);
	float *first = malloc(sizeof(float) * B * Hq * D);
	size_t rsz = (size_t)B * H * stride * D;
	uint8_t *qd = malloc(B * Hq * D * esz);
	uint8_t *kd = calloc(rsz, esz), *vd = calloc(rsz, esz);
	double worst = 0.0;

	assert_int_equal(kvs_block_layout(sh, &lay), 0);
	pstride = (lay.total_size + 255) / 256 * 256;
	for (uint32_t b = 0; b < B; b++) {
		struct seq_host *s = &seq[b];
		uint32_t T = c->min_tokens + kvs_rng_below(&rng, c->max_tokens -
						       c->min_tokens + 1);

		if (c->multiple)
			T = (T + c->multiple - 1) / c->multiple * c->multiple;
		s->tokens = T;
		lengths(c, T, stride, &s->len);
		s->len.v_resid_start = kvs_rng_below(&rng, stride -
						 s->len.v_resid_len + 1);
		uint32_t hist = s->len.k_quant_len > s->len.v_quant_len ?
				s->len.k_quant_len : s->len.v_quant_len;
		s->blocks = (hist + S - 1) / S;
		make_history(c, s);
		total_pages += s->blocks;
		if (s->blocks > max_pages)
			max_pages = s->blocks;
		if (T > max_tokens)
			max_tokens = T;
		s->k_resid = calloc((size_t)H * stride * D, sizeof(float));
		s->v_resid = calloc((size_t)H * stride * D, sizeof(float));
		for (uint32_t h = 0; h < H; h++) {
			for (uint32_t r = 0; r < stride * D; r++) {
				size_t at = ((size_t)h * stride) * D + r;
				size_t dev = ((size_t)(b * H + h) * stride) * D;
				float kx = rounded(c->dtype, kvs_rng_normal(&rng) *
						   2.0f);
				float vx = rounded(c->dtype, kvs_rng_normal(&rng));

				s->k_resid[at] = kx;
				kvs_dtype_store(c->dtype, kd, dev + r, kx);
				/* the device FIFO starts at v_resid_start */
				s->v_resid[at] = vx;
				size_t vr = r +
					    (size_t)s->len.v_resid_start * D;
				if (vr < (size_t)stride * D)
					kvs_dtype_store(c->dtype, vd, dev + vr, vx);
			}
		}
		lens[b] = s->len;
	}
	for (size_t i = 0; i < (size_t)B * Hq * D; i++) {
		q[i] = rounded(c->dtype, kvs_rng_normal(&rng) * 1.5f);
		kvs_dtype_store(c->dtype, qd, i, q[i]);
	}

	/* pool: every sequence's pages, in a shuffled order */
	int32_t *table = calloc((size_t)B * max_pages, sizeof(int32_t));
	int32_t *perm = malloc(sizeof(int32_t) * (total_pages + 1));
	uint8_t *pool = malloc(pstride * (total_pages + 1));
	for (uint32_t i = 0; i < total_pages; i++)
		perm[i] = (int32_t)i;
	for (uint32_t i = total_pages; i > 1; i--) {
		uint32_t j = kvs_rng_below(&rng, i);
		int32_t t = perm[i - 1];

		perm[i - 1] = perm[j];
		perm[j] = t;
	}
	for (uint32_t b = 0, next = 0; b < B; b++) {
		for (uint32_t p = 0; p < seq[b].blocks; p++, next++) {
			int32_t slot = perm[next];

			table[(size_t)b * max_pages + p] = slot;
			memcpy(pool + (size_t)slot * pstride, seq[b].objects[p],
			       lay.total_size);
		}
	}

	struct kvs_cuda_attn a;
	memset(&a, 0, sizeof(a));
	a.shape = *sh;
	a.batch = B;
	a.q_heads = Hq;
	a.dtype = c->dtype;
	a.out_dtype = KVS_DTYPE_F32;
	a.scale = 1.0f / sqrtf((float)D);
	a.max_tokens = max_tokens;
	a.q = gpu_dup(qd, B * Hq * D * esz);
	a.pool = gpu_dup(pool, pstride * (total_pages + 1));
	a.page_stride = pstride;
	a.page_table = gpu_dup(table, sizeof(int32_t) * B * max_pages);
	a.max_pages = max_pages;
	a.seqs = gpu_dup(lens, sizeof(*lens) * B);
	a.k_resid = gpu_dup(kd, rsz * esz);
	a.v_resid = gpu_dup(vd, rsz * esz);
	a.k_resid_stride = a.v_resid_stride = stride;
	/* the tail bound: exact for the kivi and paper cases, the strides
	 * (0) for the random ones */
	for (uint32_t b = 0; c->bounds != RANDOM && b < B; b++) {
		if (lens[b].k_resid_len > a.max_resid_rows)
			a.max_resid_rows = lens[b].k_resid_len;
		if (lens[b].v_resid_len > a.max_resid_rows)
			a.max_resid_rows = lens[b].v_resid_len;
	}
	if (c->flags & SHORT_BOUND)
		a.max_resid_rows = 1;
	a.out = gpu_alloc(sizeof(float) * B * Hq * D);
	a.flags = c->flags & ~(SHORT_BOUND | AUTO_BUILD);
	/* the 4-CTA build unless the case names the 3-CTA one or leaves the
	 * choice to the plan */
	if (!(c->flags & (KVS_CUDA_ATTN_OCC3 | AUTO_BUILD)))
		a.flags |= KVS_CUDA_ATTN_OCC4;
	a.workspace_size = kvs_cuda_attn_workspace(&a);
	assert_true(a.workspace_size > 0);
	a.workspace = gpu_alloc(a.workspace_size);
	gpu_poison(a.workspace, a.workspace_size);
	for (uint32_t b = 0; b < B; b++) {
		struct seq_host *s = &seq[b];
		struct kvs_attn r;

		memset(&r, 0, sizeof(r));
		r.q_heads = Hq;
		r.kv_heads = H;
		r.head_dim = D;
		r.scale = a.scale;
		r.q = q + (size_t)b * Hq * D;
		r.blocks = s->view_ptrs;
		r.block_count = s->blocks;
		r.k_quant_len = s->len.k_quant_len;
		r.v_quant_len = s->len.v_quant_len;
		r.k_resid = s->k_resid;
		r.v_resid = s->v_resid;
		r.k_resid_len = s->len.k_resid_len;
		r.v_resid_len = s->len.v_resid_len;
		r.k_resid_stride = r.v_resid_stride = stride;
		r.out = ref + (size_t)b * Hq * D;
		assert_int_equal(kvs_backend_cpu()->attend(&r), 0);
	}
	/* three calls on one (poisoned) workspace: whatever a call leaves
	 * there must not change the next one's result */
	for (int call = 0; call < 3; call++) {
		gpu_poison(a.out, sizeof(float) * B * Hq * D);
		assert_int_equal(kvs_cuda_attend(&a), 0);
		assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
		gpu_get(out, a.out, sizeof(float) * B * Hq * D);
		for (uint32_t b = 0; b < B; b++) {
			const struct seq_host *s = &seq[b];
			const size_t o = (size_t)b * Hq * D;
			double e = gpu_rel_err(out + o, ref + o,
					       (size_t)Hq * D);

			if (e > worst)
				worst = e;
			if (!(e <= TOL))
				fail_msg("%s: call %d, sequence %u (T=%u kq=%u "
					 "kr=%u vq=%u vr=%u) relative error "
					 "%g", c->name, call, b, s->tokens,
					 s->len.k_quant_len, s->len.k_resid_len,
					 s->len.v_quant_len, s->len.v_resid_len,
					 e);
		}
		/* the same inputs, the same work split: the same bits */
		if (!call)
			memcpy(first, out, sizeof(float) * B * Hq * D);
		else
			assert_memory_equal(first, out,
					    sizeof(float) * B * Hq * D);
	}
	printf("%-28s batch %2u max T %6u: worst relative error %.3g\n",
	       c->name, B, max_tokens, worst);

	cudaFree((void *)a.q);
	cudaFree((void *)a.pool);
	cudaFree((void *)a.page_table);
	cudaFree((void *)a.seqs);
	cudaFree((void *)a.k_resid);
	cudaFree((void *)a.v_resid);
	cudaFree(a.out);
	cudaFree(a.workspace);
	for (uint32_t b = 0; b < B; b++)
		free_seq(&seq[b]);
	free(seq);
	free(lens);
	free(q);
	free(out);
	free(ref);
	free(first);
	free(qd);
	free(kd);
	free(vd);
	free(table);
	free(perm);
	free(pool);
}

#define SHAPE(H, D, G, b, S) { H, D, G, b, KVS_DTYPE_F16, S, 128 }

static void test_short(void **state)
{
	const struct attn_case cases[] = {
		{ "one token, no history", 1, 4, 1, SHAPE(4, 128, 32, 2, 128),
		  KVS_DTYPE_F16, KIVI, 1, 1, 0, 0 },
		{ "kivi mixed lengths", 4, 2, 4, SHAPE(2, 128, 32, 2, 128),
		  KVS_DTYPE_F16, KIVI, 1, 4096, 0, 0 },
		{ "random boundaries bf16", 16, 2, 8,
		  SHAPE(2, 128, 32, 2, 128), KVS_DTYPE_BF16, RANDOM, 1, 3000,
		  0, 0 },
		{ "paper, multiples of R", 8, 2, 4, SHAPE(2, 128, 32, 2, 128),
		  KVS_DTYPE_F16, PAPER, 128, 1024, 128, 0 },
		{ "kivi, multiples of R", 6, 2, 1, SHAPE(2, 128, 32, 2, 128),
		  KVS_DTYPE_F16, KIVI, 128, 2048, 128, 0 },
		{ "generic path forced", 5, 2, 4, SHAPE(2, 128, 32, 2, 128),
		  KVS_DTYPE_F16, RANDOM, 1, 2000, 0, KVS_CUDA_ATTN_GENERIC },
		{ "3-CTA build", 5, 2, 4, SHAPE(2, 128, 32, 2, 128),
		  KVS_DTYPE_F16, RANDOM, 1, 4000, 0, KVS_CUDA_ATTN_OCC3 },
		{ "residuals past max_resid_rows", 4, 2, 4,
		  SHAPE(2, 128, 32, 2, 128), KVS_DTYPE_F16, KIVI, 1, 3000, 0,
		  SHORT_BOUND },
		{ "biased code operands", 5, 2, 4, SHAPE(2, 128, 32, 2, 128),
		  KVS_DTYPE_F16, RANDOM, 1, 4000, 0,
		  KVS_CUDA_ATTN_NO_SUBNORMAL },
		{ "3-CTA, biased operands, bf16", 4, 2, 8,
		  SHAPE(2, 128, 32, 2, 128), KVS_DTYPE_BF16, KIVI, 1, 4000, 0,
		  KVS_CUDA_ATTN_OCC3 | KVS_CUDA_ATTN_NO_SUBNORMAL },
		{ "generic CTAs with tiles", 6, 2, 4,
		  SHAPE(2, 128, 32, 2, 128), KVS_DTYPE_F16, KIVI, 1, 5000, 0,
		  KVS_CUDA_ATTN_HYBRID },
		{ "generic CTAs with tiles, 3-CTA, short bound", 3, 2, 8,
		  SHAPE(2, 128, 32, 2, 128), KVS_DTYPE_BF16, RANDOM, 1, 4000,
		  0, KVS_CUDA_ATTN_HYBRID | KVS_CUDA_ATTN_OCC3 | SHORT_BOUND },
		{ "tail as pieces, kivi", 4, 2, 4, SHAPE(2, 128, 32, 2, 128),
		  KVS_DTYPE_F16, KIVI, 1, 4096, 0, KVS_CUDA_ATTN_PIECES },
		{ "tail as pieces, random boundaries, GQA 8", 8, 2, 8,
		  SHAPE(2, 128, 32, 2, 128), KVS_DTYPE_F16, RANDOM, 1, 3000,
		  0, KVS_CUDA_ATTN_PIECES },
		{ "tail as pieces, paper, GQA 1", 6, 2, 1,
		  SHAPE(2, 128, 32, 2, 128), KVS_DTYPE_F16, PAPER, 1, 2048,
		  0, KVS_CUDA_ATTN_PIECES },
		{ "tail as pieces, 3-CTA, biased operands, short bound", 5, 2,
		  4, SHAPE(2, 128, 32, 2, 128), KVS_DTYPE_F16, KIVI, 1, 3000,
		  0, KVS_CUDA_ATTN_PIECES | KVS_CUDA_ATTN_OCC3 |
		  KVS_CUDA_ATTN_NO_SUBNORMAL | SHORT_BOUND },
		{ "tail as pieces, bf16, random boundaries", 8, 2, 4,
		  SHAPE(2, 128, 32, 2, 128), KVS_DTYPE_BF16, RANDOM, 1, 3000,
		  0, KVS_CUDA_ATTN_PIECES },
		{ "tail as pieces, several a warp", 16, 9, 4,
		  SHAPE(9, 128, 32, 2, 128), KVS_DTYPE_F16, KIVI, 1, 1200, 0,
		  KVS_CUDA_ATTN_PIECES },
		{ "tail as pieces, one CTA a unit, no merge", 32, 9, 4,
		  SHAPE(9, 128, 32, 2, 128), KVS_DTYPE_F16, RANDOM, 1, 700,
		  0, KVS_CUDA_ATTN_PIECES },
		{ "one CTA a unit, 3-CTA, bf16", 24, 9, 4,
		  SHAPE(9, 128, 32, 2, 128), KVS_DTYPE_BF16, KIVI, 1, 900, 0,
		  KVS_CUDA_ATTN_PIECES | KVS_CUDA_ATTN_OCC3 },
		{ "cluster plan, kivi", 4, 2, 4, SHAPE(2, 128, 32, 2, 128),
		  KVS_DTYPE_F16, KIVI, 1, 4096, 0, KVS_CUDA_ATTN_CLUSTER },
		{ "cluster plan, random boundaries, GQA 8, bf16", 8, 2, 8,
		  SHAPE(2, 128, 32, 2, 128), KVS_DTYPE_BF16, RANDOM, 1, 3000,
		  0, KVS_CUDA_ATTN_CLUSTER },
		{ "cluster plan, paper, GQA 1, short bound", 6, 2, 1,
		  SHAPE(2, 128, 32, 2, 128), KVS_DTYPE_F16, PAPER, 1, 2048,
		  0, KVS_CUDA_ATTN_CLUSTER | SHORT_BOUND },
		{ "cluster plan, 16-CTA clusters, biased operands", 1, 2, 4,
		  SHAPE(2, 128, 32, 2, 128), KVS_DTYPE_F16, KIVI, 9000, 12000,
		  0, KVS_CUDA_ATTN_CLUSTER | KVS_CUDA_ATTN_NO_SUBNORMAL },
		{ "cluster plan, one CTA a unit", 16, 8, 4,
		  SHAPE(8, 128, 32, 2, 128), KVS_DTYPE_F16, RANDOM, 1, 1500,
		  0, KVS_CUDA_ATTN_CLUSTER },
		{ "D=64", 3, 2, 4, SHAPE(2, 64, 32, 2, 128), KVS_DTYPE_F16,
		  KIVI, 1, 1500, 0, 0 },
		/* the merge's lanes past D idle (D = 96), and its widest
		 * lanes (8 channels, D = 256) */
		{ "D=96", 3, 2, 4, SHAPE(2, 96, 32, 2, 128), KVS_DTYPE_F16,
		  RANDOM, 1, 1500, 0, 0 },
		{ "D=256", 2, 2, 4, SHAPE(2, 256, 32, 2, 128), KVS_DTYPE_BF16,
		  KIVI, 1, 1200, 0, 0 },
		{ "build left to the plan, kivi", 4, 2, 4,
		  SHAPE(2, 128, 32, 2, 128), KVS_DTYPE_F16, KIVI, 1, 4096, 0,
		  AUTO_BUILD },
		{ "4-bit, S=256, G=64", 3, 2, 8, SHAPE(2, 128, 64, 4, 256),
		  KVS_DTYPE_BF16, KIVI, 1, 1500, 0, 0 },
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		run_case(&cases[i]);
}

static void test_long(void **state)
{
	const struct attn_case cases[] = {
		{ "32K-ish batch of 5", 5, 2, 4, SHAPE(2, 128, 32, 2, 128),
		  KVS_DTYPE_F16, KIVI, 16384, 32768, 0, 0 },
		{ "128K, one sequence", 1, 2, 4, SHAPE(2, 128, 32, 2, 128),
		  KVS_DTYPE_F16, KIVI, 131072, 131072, 128, 0 },
		{ "32K-ish batch of 5, tail as pieces", 5, 2, 4,
		  SHAPE(2, 128, 32, 2, 128), KVS_DTYPE_F16, RANDOM, 16384,
		  32768, 0, KVS_CUDA_ATTN_PIECES },
		{ "32K-ish, 3-CTA build, bf16", 3, 2, 8,
		  SHAPE(2, 128, 32, 2, 128), KVS_DTYPE_BF16, RANDOM, 16384,
		  32768, 0, KVS_CUDA_ATTN_OCC3 },
		{ "32K-ish batch of 2, build left to the plan", 2, 2, 4,
		  SHAPE(2, 128, 32, 2, 128), KVS_DTYPE_F16, KIVI, 16384,
		  32768, 0, AUTO_BUILD },
		{ "32K-ish batch of 3, cluster plan, random boundaries", 3, 8,
		  4, SHAPE(8, 128, 32, 2, 128), KVS_DTYPE_F16, RANDOM, 16384,
		  32768, 0, KVS_CUDA_ATTN_CLUSTER },
		{ "128K, one sequence, cluster plan, bf16", 1, 2, 8,
		  SHAPE(2, 128, 32, 2, 128), KVS_DTYPE_BF16, KIVI, 131072,
		  131072, 128, KVS_CUDA_ATTN_CLUSTER },
		/* generic splits by the hundred: the merge's (m, l) pairs
		 * past its registers and its later chunks, at its narrowest
		 * and widest lanes */
		{ "D=64, one long sequence", 1, 2, 4,
		  SHAPE(2, 64, 32, 2, 128), KVS_DTYPE_F16, RANDOM, 20000,
		  24000, 0, 0 },
		{ "D=256, one long sequence, bf16", 1, 2, 4,
		  SHAPE(2, 256, 32, 2, 128), KVS_DTYPE_BF16, KIVI, 12000,
		  16000, 0, 0 },
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		run_case(&cases[i]);
}

/* The backend (host floats in and out) agrees with the CPU backend. */
static void test_backend(void **state)
{
	struct attn_case c = { "backend", 1, 2, 4, SHAPE(2, 128, 32, 2, 128),
			       KVS_DTYPE_F32, KIVI, 0, 0, 0, 0 };
	const uint32_t H = 2, Hq = 8, D = 128, T = 700, stride = 258;
	struct seq_host s;
	struct kvs_attn r;
	float q[8 * 128], out[8 * 128], ref[8 * 128];

	(void)state;
	memset(&s, 0, sizeof(s));
	lengths(&c, T, stride, &s.len);
	s.blocks = (s.len.k_quant_len + 127) / 128;
	make_history(&c, &s);
	s.k_resid = malloc(sizeof(float) * H * stride * D);
	s.v_resid = malloc(sizeof(float) * H * stride * D);
	for (size_t i = 0; i < (size_t)H * stride * D; i++) {
		s.k_resid[i] = kvs_rng_normal(&rng);
		s.v_resid[i] = kvs_rng_normal(&rng);
	}
	for (size_t i = 0; i < Hq * D; i++)
		q[i] = kvs_rng_normal(&rng);
	memset(&r, 0, sizeof(r));
	r.q_heads = Hq;
	r.kv_heads = H;
	r.head_dim = D;
	r.scale = 0.0883883f;
	r.q = q;
	r.blocks = s.view_ptrs;
	r.block_count = s.blocks;
	r.k_quant_len = s.len.k_quant_len;
	r.v_quant_len = s.len.v_quant_len;
	r.k_resid = s.k_resid;
	r.v_resid = s.v_resid;
	r.k_resid_len = s.len.k_resid_len;
	r.v_resid_len = s.len.v_resid_len;
	r.k_resid_stride = r.v_resid_stride = stride;
	r.out = ref;
	assert_int_equal(kvs_backend_cpu()->attend(&r), 0);
	memset(out, 0xff, sizeof(out));
	r.out = out;
	assert_non_null(kvs_backend_cuda());
	assert_int_equal(kvs_backend_cuda()->attend(&r), 0);
	assert_true(gpu_rel_err(out, ref, Hq * D) <= TOL);
	r.v_quant_len++;
	assert_int_equal(kvs_backend_cuda()->attend(&r), -KVS_EBOUNDARY);
	free_seq(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_short),
		cmocka_unit_test(test_long),
		cmocka_unit_test(test_backend),
	};

	gpu_require();
	gpu_rng_init(&rng);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
