/*
 * block_util.h - the sealed blocks of the block format's tests
 * (test_block.c, test_block_damage.c): small shapes, a fixed identity,
 * K/V inputs with outlier channels and constant groups, and a sealed
 * block with its reference input.
 */
#ifndef KVSTASH_TEST_BLOCK_UTIL_H
#define KVSTASH_TEST_BLOCK_UTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kvstash/kvformat.h"
#include "testutil.h"

static const enum kvs_dtype all_types[]
	__attribute__((unused)) = { KVS_DTYPE_F32, KVS_DTYPE_F16,
				    KVS_DTYPE_BF16 };

static inline void small_shape(struct kvs_shape *sh, unsigned bits,
			       enum kvs_dtype meta)
{
	kvs_shape_default(sh, 2, 64);
	sh->bits = (uint8_t)bits;
	sh->meta_type = (uint8_t)meta;
	sh->span = 64;
	sh->residual = 64;
}

static inline void tiny_shape(struct kvs_shape *sh)
{
	kvs_shape_default(sh, 1, 32);
	sh->span = 32;
	sh->residual = 32;
}

static inline void test_ident_fill(struct kvs_ident *id)
{
	memset(id, 0, sizeof(*id));
	for (int i = 0; i < KVS_ID_SIZE; i++) {
		id->block_id[i] = (uint8_t)(i + 1);
		id->parent_id[i] = (uint8_t)(0x80 | i);
		id->model_fp[i] = (uint8_t)(0x33 ^ i);
	}
	id->layer = 7;
	id->first_pos = 4096;
}

/*
 * K/V of @n elements in @dtype: keys with a few outlier channels (the
 * per-channel case the format is for), values with per-token scales,
 * some constant groups, and @ref the values as the block sees them.
 */
static inline void *make_input(const struct kvs_shape *sh, enum kvs_dtype dtype,
			       int is_key, uint64_t seed, float *ref)
{
	size_t n = (size_t)sh->kv_heads * sh->span * sh->head_dim;
	uint8_t *buf = malloc(n * kvs_dtype_size(dtype));
	struct kvs_rng rng = { seed | 1 };

	assert_non_null(buf);
	for (size_t i = 0; i < n; i++) {
		size_t d = i % sh->head_dim, t = i / sh->head_dim % sh->span;
		float x = kvs_rng_uniform(&rng, -1.0f, 1.0f);

		if (is_key && d % 13 == 3)
			x = 40.0f + 8.0f * x; /* outlier channel */
		else if (!is_key)
			x *= (float)(1 + t % 5);
		if (d / sh->group == 1 && t % 7 == 0 && !is_key)
			x = 0.25f; /* a constant Value group */
		kvs_dtype_store(dtype, buf, i, x);
		ref[i] = kvs_dtype_load(dtype, buf, i);
	}
	return buf;
}

struct sealed {
	struct kvs_shape shape;
	enum kvs_dtype dtype;
	float *keys, *values; /* reference input, as floats */
	void *raw_keys, *raw_values;
	uint8_t *obj;
	size_t len;
};

static inline void seal_block(struct sealed *s, const struct kvs_shape *sh,
			      enum kvs_dtype dtype, unsigned flags,
			      uint64_t seed)
{
	size_t n = (size_t)sh->kv_heads * sh->span * sh->head_dim;
	struct kvs_ident id;

	s->shape = *sh;
	s->dtype = dtype;
	s->keys = malloc(n * sizeof(float));
	s->values = malloc(n * sizeof(float));
	assert_non_null(s->keys);
	assert_non_null(s->values);
	s->raw_keys = make_input(sh, dtype, 1, seed, s->keys);
	s->raw_values = make_input(sh, dtype, 0, seed * 31 + 7, s->values);
	test_ident_fill(&id);
	assert_int_equal(kvs_block_seal(sh, &id, dtype, s->raw_keys,
					s->raw_values, flags, &s->obj, &s->len),
			 0);
}

static inline void sealed_free(struct sealed *s)
{
	free(s->keys);
	free(s->values);
	free(s->raw_keys);
	free(s->raw_values);
	free(s->obj);
}

#endif
