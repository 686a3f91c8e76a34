/*
 * bench_gen.c - the benchmark block (bench_gen.h).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "bench_gen.h"

int kvs_bench_gen_init(struct kvs_bench_gen *g)
{
	struct kvs_layout layout;
	size_t n;
	float *kv;
	uint64_t x = 88172645463325252ull;
	int err;

	kvs_shape_default(&g->shape, 8, 128);
	err = kvs_block_layout(&g->shape, &layout);
	if (err)
		return err;
	g->size = layout.total_size;
	n = (size_t)g->shape.kv_heads * g->shape.span * g->shape.head_dim;
	kv = malloc(2 * n * sizeof(float));
	g->image = calloc(1, g->size);
	if (!kv || !g->image) {
		free(kv);
		free(g->image);
		return -ENOMEM;
	}
	for (size_t i = 0; i < 2 * n; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		kv[i] = (float)(x % 4001) / 1000.0f - 2.0f;
	}
	err = kvs_block_quantize(&g->shape, KVS_DTYPE_F32, kv, kv + n,
				 g->image);
	free(kv);
	if (err)
		free(g->image);
	return err;
}

int kvs_bench_gen_finish(const struct kvs_bench_gen *g,
			 const struct kvs_ident *ident, uint8_t *out)
{
	memcpy(out, g->image, g->size);
	return kvs_block_finish(&g->shape, ident, out);
}
