/*
 * rt_test.h - what the runtime tests share: a small model (layers, heads,
 * S = R = 32), deterministic K/V/Q per (seed, layer, position) so two
 * sequences fed the same positions see the same numbers, token ids,
 * prefill and decode drivers that collect every output, and scratch store
 * directories under $KVS_TEST_DIR.  Header-only: each test is one
 * translation unit.
 */
#ifndef KVS_TESTS_RT_TEST_H
#define KVS_TESTS_RT_TEST_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/rng.h"
#include "kvstash/runtime.h"

#define T_LAYERS 2
#define T_KV 2
#define T_QH 4
#define T_D 64
#define T_R 32

/* A runtime of the test model on the CPU with @dtype K/V. */
static inline struct kvs_rt *t_runtime(enum kvs_dtype dtype,
				       enum kvs_order order, const char *ns,
				       uint32_t pool_pages,
				       struct kvs_blockstore *store)
{
	struct kvs_rt_config cfg;
	struct kvs_rt *rt = NULL;

	kvs_rt_config_default(&cfg, T_LAYERS, T_QH, T_KV, T_D);
	cfg.shape.span = T_R;
	cfg.shape.residual = T_R;
	cfg.kv_dtype = dtype;
	cfg.out_dtype = KVS_DTYPE_F32;
	cfg.order = order;
	cfg.device = KVS_RT_CPU;
	cfg.max_tokens = 1024;
	cfg.pool_pages = pool_pages;
	cfg.model_id = "test-model";
	cfg.name_space = ns;
	cfg.store = store;
	assert_int_equal(kvs_rt_create(&cfg, &rt), 0);
	return rt;
}

/* One deterministic generator per (seed, layer, position, stream). */
static inline struct kvs_rng t_rng(uint64_t seed, uint32_t layer, uint32_t pos,
				   uint32_t what)
{
	struct kvs_rng r;

	r.state = (seed * 0x9E3779B97F4A7C15ull) ^
		  ((uint64_t)layer << 40 | (uint64_t)pos << 8 | what);
	r.state = r.state * 0xD1B54A32D192ED03ull + 1;
	if (!r.state)
		r.state = 1;
	for (int i = 0; i < 4; i++)
		kvs_rng_next(&r);
	return r;
}

/* Stores @x as element @i of @dtype. */
static inline void t_store(enum kvs_dtype dtype, void *base, size_t i, float x)
{
	kvs_dtype_store(dtype, base, i, kvs_round_to(dtype, x));
}

/* Key and Value rows of one token: [kv][D] each, at element offsets
 * h * stride + d of @k and @v (stride D for a row, n * D for a prompt). */
static inline void t_token_kv(uint64_t seed, uint32_t layer, uint32_t pos,
			      enum kvs_dtype dtype, void *k, void *v,
			      size_t stride, size_t at)
{
	struct kvs_rng r = t_rng(seed, layer, pos, 1);

	for (uint32_t h = 0; h < T_KV; h++) {
		for (uint32_t d = 0; d < T_D; d++) {
			/* Keys carry channel outliers, as real ones do */
			float key = kvs_rng_normal(&r) *
					    (d % 13 == 5 ? 6.0f : 1.0f) +
				    (d % 7 == 3 ? 2.5f : 0.0f);
			float value = kvs_rng_normal(&r);

			t_store(dtype, k, h * stride + at + d, key);
			t_store(dtype, v, h * stride + at + d, value);
		}
	}
}

static inline void t_token_q(uint64_t seed, uint32_t layer, uint32_t pos,
			     enum kvs_dtype dtype, void *q, size_t at)
{
	struct kvs_rng r = t_rng(seed, layer, pos, 2);

	for (uint32_t i = 0; i < T_QH * T_D; i++)
		t_store(dtype, q, at + i, kvs_rng_normal(&r) * 1.5f);
}

static inline uint32_t t_id(uint64_t seed, uint32_t pos)
{
	struct kvs_rng r = t_rng(seed, 0xffff, pos, 3);

	return kvs_rng_below(&r, 32000);
}

static inline uint32_t *t_ids(uint64_t seed, uint32_t n)
{
	uint32_t *ids = malloc(sizeof(*ids) * (n ? n : 1));

	assert_non_null(ids);
	for (uint32_t i = 0; i < n; i++)
		ids[i] = t_id(seed, i);
	return ids;
}

/* Prefills positions [from, from + n) of every layer. */
static inline int t_prefill(struct kvs_seq *seq, uint64_t seed,
			    enum kvs_dtype dtype, uint32_t from, uint32_t n)
{
	size_t es = kvs_dtype_size(dtype), elems = (size_t)T_KV * n * T_D;
	uint8_t *k = malloc(es * elems), *v = malloc(es * elems);
	int err = 0;

	assert_non_null(k);
	assert_non_null(v);
	for (uint32_t l = 0; l < T_LAYERS && !err; l++) {
		for (uint32_t t = 0; t < n; t++)
			t_token_kv(seed, l, from + t, dtype, k, v,
				   (size_t)n * T_D, (size_t)t * T_D);
		err = kvs_seq_prefill(seq, l, k, v, n);
	}
	free(k);
	free(v);
	return err;
}

#define T_OUT (T_QH * T_D) /* floats of one layer's output */

/*
 * Decodes positions [from, from + steps) one token at a time (every
 * layer), appending each token's id; out[step][layer][T_OUT] floats.
 */
static inline void t_decode(struct kvs_seq *seq, uint64_t seed,
			    uint64_t id_seed, enum kvs_dtype dtype,
			    uint32_t from, uint32_t steps, float *out)
{
	size_t es = kvs_dtype_size(dtype);
	uint8_t q[T_QH * T_D * 4], k[T_KV * T_D * 4], v[T_KV * T_D * 4];

	for (uint32_t s = 0; s < steps; s++) {
		uint32_t pos = from + s, id = t_id(id_seed, pos);

		for (uint32_t l = 0; l < T_LAYERS; l++) {
			t_token_q(seed, l, pos, dtype, q, 0);
			t_token_kv(seed, l, pos, dtype, k, v, T_D, 0);
			assert_int_equal(
				kvs_seq_step(seq, l, q, k, v,
					     out + ((size_t)s * T_LAYERS + l) *
							     T_OUT),
				0);
		}
		assert_int_equal(kvs_seq_append_ids(seq, &id, 1), 0);
	}
	(void)es;
}

/* A fresh directory under $KVS_TEST_DIR (or .), removed by t_rmdir. */
static inline char *t_mkdir(void)
{
	const char *base = getenv("KVS_TEST_DIR");
	char *path = malloc(4096);

	assert_non_null(path);
	snprintf(path, 4096, "%s/rttest-XXXXXX", base ? base : ".");
	assert_non_null(mkdtemp(path));
	return path;
}

static inline void t_rmdir(char *path)
{
	char cmd[4200];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", path);
	if (system(cmd) != 0)
		fprintf(stderr, "cannot remove %s\n", path);
	free(path);
}

/* A local block store in a fresh directory (small tiers). */
static inline struct kvs_blockstore *t_store_open(const char *dir)
{
	struct kvs_store_opts opts;
	struct kvs_blockstore *bs = NULL;

	kvs_store_opts_default(&opts);
	opts.dram_capacity = 64ull << 20;
	opts.nvme_capacity = 256ull << 20;
	opts.segment_size = 8ull << 20;
	opts.write_through = false;
	assert_int_equal(kvs_blockstore_local(dir, &opts, &bs), 0);
	return bs;
}

#endif
