/*
 * test_stream_util - helpers shared by the stream, attention and trace
 * tests: token rows from common/rng.h, a plain double-precision dense
 * attention, and sealing a block of token-major K/V into an opened view.
 */
#ifndef KVSTASH_TEST_STREAM_UTIL_H
#define KVSTASH_TEST_STREAM_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/rng.h"
#include "kvstash/kvformat.h"
#include "kvstash/stream.h"

/*
 * Fills @n token rows of [kv_heads][D] (token-major) with values in
 * [-2, 2), channel 1 of every head shifted by +40 (a Key outlier channel
 * when used for Keys; harmless for Values).
 */
static inline void fill_rows(struct kvs_rng *rng, float *rows, size_t n,
			     uint32_t kv_heads, uint32_t head_dim)
{
	size_t i;

	for (i = 0; i < n * kv_heads * head_dim; i++)
		rows[i] = kvs_rng_uniform(rng, -2.0f, 2.0f) +
			  (i % head_dim == 1 ? 40.0f : 0.0f);
}

/*
 * Dense decode attention in double over @tokens token-major rows
 * keys[t][kv_heads][D], values[t][kv_heads][D]; q [q_heads][D];
 * out [q_heads][D].
 */
static inline void dense_attend(uint32_t q_heads, uint32_t kv_heads,
				uint32_t head_dim, double scale, const float *q,
				const float *keys, const float *values,
				uint32_t tokens, double *out)
{
	uint32_t ratio = q_heads / kv_heads, qh, t, d;
	double *logit = malloc(sizeof(double) * tokens);

	for (qh = 0; qh < q_heads; qh++) {
		uint32_t h = qh / ratio;
		double peak = -INFINITY, sum = 0.0;

		const float *qv = q + (size_t)qh * head_dim;

		for (t = 0; t < tokens; t++) {
			const float *k =
				keys + ((size_t)t * kv_heads + h) * head_dim;
			double s = 0.0;

			for (d = 0; d < head_dim; d++)
				s += (double)qv[d] * k[d];
			logit[t] = s * scale;
			if (logit[t] > peak)
				peak = logit[t];
		}
		for (t = 0; t < tokens; t++) {
			logit[t] = exp(logit[t] - peak);
			sum += logit[t];
		}
		for (d = 0; d < head_dim; d++) {
			double acc = 0.0;

			for (t = 0; t < tokens; t++)
				acc += logit[t] * values[((size_t)t * kv_heads +
							  h) * head_dim +
							 d];
			out[(size_t)qh * head_dim + d] = acc / sum;
		}
	}
	free(logit);
}

/* max |got - want| / max(max |want|, 1e-30). */
static inline double rel_error(const float *got, const double *want, size_t n)
{
	double err = 0.0, mag = 1e-30;
	size_t i;

	for (i = 0; i < n; i++) {
		if (fabs(got[i] - want[i]) > err)
			err = fabs(got[i] - want[i]);
		if (fabs(want[i]) > mag)
			mag = fabs(want[i]);
	}
	return err / mag;
}

/* [token][head][D] rows [first, first + n) -> [head][n][D]. */
static inline void to_head_major(const float *rows, uint32_t first, uint32_t n,
				 uint32_t kv_heads, uint32_t head_dim,
				 float *out)
{
	uint32_t t, h;

	for (t = 0; t < n; t++)
		for (h = 0; h < kv_heads; h++)
			memcpy(out + ((size_t)h * n + t) * head_dim,
			       rows + (((size_t)first + t) * kv_heads + h) *
					       head_dim,
			       sizeof(float) * head_dim);
}

/* An opened block and the bytes it points into. */
struct test_block {
	uint8_t *obj;
	size_t len;
	struct kvs_view view;
};

/*
 * Seals tokens [first, first + S) of token-major @keys/@values with
 * @ident and opens it; on success also writes the dequantized rows back
 * token-major into @khat/@vhat (when not NULL).  Returns 0 or the error.
 */
static inline int test_block_make(const struct kvs_shape *shape,
				  const struct kvs_ident *ident,
				  const float *keys, const float *values,
				  uint32_t first, struct test_block *blk,
				  float *khat, float *vhat)
{
	uint32_t H = shape->kv_heads, D = shape->head_dim, S = shape->span;
	size_t n = (size_t)H * S * D;
	float *kh = malloc(sizeof(float) * 4 * n);
	float *vh = kh + n, *kd = kh + 2 * n, *vd = kh + 3 * n;
	uint32_t t, h;
	int err;

	to_head_major(keys, first, S, H, D, kh);
	to_head_major(values, first, S, H, D, vh);
	err = kvs_block_seal(shape, ident, KVS_DTYPE_F32, kh, vh, 0, &blk->obj,
			     &blk->len);
	if (!err)
		err = kvs_object_open(blk->obj, blk->len, 0, &blk->view);
	if (!err && khat)
		err = kvs_block_dequantize(&blk->view, kd, vd);
	if (!err && khat) {
		for (t = 0; t < S; t++)
			for (h = 0; h < H; h++) {
				size_t dst = (((size_t)first + t) * H + h) * D;
				size_t src = ((size_t)h * S + t) * D;

				memcpy(khat + dst, kd + src, sizeof(float) * D);
				memcpy(vhat + dst, vd + src, sizeof(float) * D);
			}
	}
	free(kh);
	return err;
}

static inline void test_block_free(struct test_block *blk)
{
	kvs_view_release(&blk->view);
	free(blk->obj);
}

#endif
