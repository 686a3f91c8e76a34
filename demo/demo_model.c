/*
 * demo_model.c - the synthetic model of `kvstash demo` (demo.h): token
 * ids, K/V with outlier Key channels, queries, and the fp16 reference
 * attention the demo measures the 2-bit path against.  Everything is a
 * pure function of its arguments, so every process of the demo computes
 * the same numbers.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/rng.h"
#include "demo.h"
#include "kvstash/kvformat.h"

#define DEMO_CHANNEL 3 /* floats per channel: Key scale, Key bias, V mean */
#define DEMO_VALUE_SPREAD 0.5f
#define DEMO_QUERY_SCALE 1.5f

enum stream { STREAM_ID = 1, STREAM_KV = 2, STREAM_Q = 3, STREAM_CHANNEL = 4 };

/* One generator per (seed, stream, a, b, c). */
static struct kvs_rng rng_of(uint64_t seed, enum stream s, uint64_t a,
			     uint64_t b, uint64_t c)
{
	struct kvs_rng r;

	r.state = seed * 0x9E3779B97F4A7C15ull ^ (uint64_t)s << 56 ^ a << 40 ^
		  b * 0xD1B54A32D192ED03ull ^ c * 0xA0761D6478BD642Full;
	r.state = r.state * 0x2545F4914F6CDD1Dull + 0x632BE59BD9B4E019ull;
	if (!r.state)
		r.state = 1;
	for (int i = 0; i < 3; i++)
		kvs_rng_next(&r);
	return r;
}

uint32_t demo_token_id(const struct demo_model *m, uint32_t request,
		       uint32_t shared, uint32_t pos)
{
	struct kvs_rng r;

	if (request == 2 && pos < shared)
		request = 1;
	r = rng_of(m->seed, STREAM_ID, request, pos, 0);
	return kvs_rng_below(&r, 128000);
}

/* Channel @d of @head in @layer: its Key scale and bias, its Value mean.
 * About one Key channel in 24 is an outlier, with a bias of +-(10..20)
 * and a scale of 3..6.  Values vary around a mean per channel, as the
 * Values of a real layer do (not independent noise). */
static void channel(const struct demo_model *m, uint32_t layer, uint32_t head,
		    uint32_t d, float *ch)
{
	struct kvs_rng r = rng_of(m->seed, STREAM_CHANNEL, layer, head, d);

	ch[0] = 0.5f + 0.5f * fabsf(kvs_rng_normal(&r));
	ch[1] = 0.3f * kvs_rng_normal(&r);
	ch[2] = kvs_rng_normal(&r);
	if (kvs_rng_below(&r, 24) == 0) {
		float sign = kvs_rng_below(&r, 2) ? 1.0f : -1.0f;

		ch[1] = sign * kvs_rng_uniform(&r, 10.0f, 20.0f);
		ch[0] = kvs_rng_uniform(&r, 3.0f, 6.0f);
	}
}

void demo_model_default(struct demo_model *m)
{
	memset(m, 0, sizeof(*m));
	m->layers = 4;
	m->q_heads = 8;
	m->kv_heads = 2;
	m->head_dim = 128;
	m->residual = 128;
	m->seed = 0x6b7673746173ull; /* "kvstas" */
}

int demo_model_init(struct demo_model *m)
{
	size_t n = (size_t)m->layers * m->kv_heads * m->head_dim, i = 0;

	m->channels = malloc(sizeof(float) * DEMO_CHANNEL * n);
	if (!m->channels)
		return -ENOMEM;
	for (uint32_t l = 0; l < m->layers; l++)
		for (uint32_t h = 0; h < m->kv_heads; h++)
			for (uint32_t d = 0; d < m->head_dim; d++, i++)
				channel(m, l, h, d,
					&m->channels[DEMO_CHANNEL * i]);
	return 0;
}

void demo_model_fini(struct demo_model *m)
{
	free(m->channels);
	m->channels = NULL;
}

void demo_token_kv(const struct demo_model *m, uint32_t layer, uint32_t pos,
		   uint32_t id, float *k, float *v, size_t stride)
{
	struct kvs_rng r = rng_of(m->seed, STREAM_KV, layer, pos, id);
	const float *ch = m->channels + (size_t)DEMO_CHANNEL * layer *
						m->kv_heads * m->head_dim;

	for (uint32_t h = 0; h < m->kv_heads; h++) {
		for (uint32_t d = 0; d < m->head_dim; d++, ch += DEMO_CHANNEL) {
			k[h * stride + d] = kvs_round_to(
				KVS_DTYPE_F16,
				ch[1] + ch[0] * kvs_rng_normal(&r));
			v[h * stride + d] = kvs_round_to(
				KVS_DTYPE_F16,
				ch[2] + DEMO_VALUE_SPREAD * kvs_rng_normal(&r));
		}
	}
}

void demo_token_q(const struct demo_model *m, uint32_t layer, uint32_t pos,
		  uint32_t request, float *q)
{
	struct kvs_rng r = rng_of(m->seed, STREAM_Q, layer, pos, request);

	for (uint32_t i = 0; i < m->q_heads * m->head_dim; i++)
		q[i] = kvs_round_to(KVS_DTYPE_F16,
				    DEMO_QUERY_SCALE * kvs_rng_normal(&r));
}

int demo_attention(const struct demo_model *m, const float *q, const float *k,
		   const float *v, uint32_t n, uint32_t cap, float *out)
{
	const uint32_t D = m->head_dim, group = m->q_heads / m->kv_heads;
	const double scale = 1.0 / sqrt((double)D);
	double *logit = malloc(sizeof(double) * (n ? n : 1));
	double *acc = malloc(sizeof(double) * D);

	if (!logit || !acc) {
		free(logit);
		free(acc);
		return -ENOMEM;
	}
	for (uint32_t qh = 0; qh < m->q_heads; qh++) {
		const float *qv = q + (size_t)qh * D;
		const float *kh = k + (size_t)(qh / group) * cap * D;
		const float *vh = v + (size_t)(qh / group) * cap * D;
		double top = -INFINITY, sum = 0.0;

		for (uint32_t t = 0; t < n; t++) {
			double dot = 0.0;

			for (uint32_t d = 0; d < D; d++)
				dot += (double)qv[d] * kh[(size_t)t * D + d];
			logit[t] = dot * scale;
			if (logit[t] > top)
				top = logit[t];
		}
		memset(acc, 0, sizeof(double) * D);
		for (uint32_t t = 0; t < n; t++) {
			double p = exp(logit[t] - top);

			sum += p;
			for (uint32_t d = 0; d < D; d++)
				acc[d] += p * vh[(size_t)t * D + d];
		}
		for (uint32_t d = 0; d < D; d++)
			out[(size_t)qh * D + d] = (float)(acc[d] / sum);
	}
	free(logit);
	free(acc);
	return 0;
}

void demo_error_add(struct demo_error *e, const float *ref, const float *got,
		    size_t n)
{
	for (size_t i = 0; i < n; i++) {
		double diff = fabs((double)ref[i] - (double)got[i]);

		e->err2 += diff * diff;
		e->ref2 += (double)ref[i] * ref[i];
		if (diff > e->max_abs)
			e->max_abs = diff;
	}
	e->values += n;
}
