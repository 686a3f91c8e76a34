/*
 * attention - the CPU reference backend: seal and dequantize through the
 * kvformat reference, and decode attention over the mixed cache.
 *
 * Attention accumulates in double throughout: the logits scale * q.k of
 * every visible token (Keys [0, k_quant_len) from the history blocks, the
 * rest from the Key residual) go through ONE max-subtracted softmax, and
 * the probabilities are then split at the Value boundary v_quant_len:
 *   out = p[0, v_quant_len) . Vhat_q + p[v_quant_len, T) . V_r.
 * History is decoded straight from the block sections, one (block, KV
 * head) at a time, each Key group's origins and steps loaded once; the
 * reconstruction is kvs_dequant()'s fmaf(step, code, origin), bit for bit
 * what kvs_block_dequantize() gives.
 * Query head h reads KV head h / (q_heads / kv_heads).
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kvstash/log.h"
#include "kvstash/stream.h"
#include "stream_internal.h"

/* Per-row decoding scratch: one Key group's metadata, one row's codes. */
struct decode_scratch {
	float *origin, *step; /* [D] */
	uint8_t *codes; /* [D] */
};

/* Geometry of the history, taken from the first block. */
struct history {
	uint32_t span, group, head_dim, bits;
	enum kvs_dtype meta;
	size_t row_bytes; /* packed codes of one token of one head */
};

static int check_blocks(const struct kvs_attn *a, struct history *hist)
{
	uint32_t need = a->k_quant_len > a->v_quant_len ? a->k_quant_len
							: a->v_quant_len;
	const struct kvs_shape *shape;
	uint32_t i, used;
	int s;

	if (need == 0)
		return 0;
	if (a->block_count == 0 || !a->blocks || !a->blocks[0]) {
		kvs_log(KVS_LOG_ERR, "attend: %u history tokens but no blocks",
			need);
		return -KVS_EPARAM;
	}
	shape = &a->blocks[0]->hdr.shape;
	if (shape->span == 0 || shape->group == 0 ||
	    shape->kv_heads != a->kv_heads || shape->head_dim != a->head_dim ||
	    (shape->bits != 2 && shape->bits != 4) ||
	    shape->span % shape->group != 0 ||
	    shape->head_dim % shape->group != 0 ||
	    kvs_dtype_size((enum kvs_dtype)shape->meta_type) == 0) {
		kvs_log(KVS_LOG_ERR,
			"attend: block shape (H=%u D=%u G=%u S=%u b=%u) does "
			"not fit (H=%u D=%u)",
			shape->kv_heads, shape->head_dim, shape->group,
			shape->span, shape->bits, a->kv_heads, a->head_dim);
		return -KVS_EPARAM;
	}
	if ((uint64_t)a->block_count * shape->span < need) {
		kvs_log(KVS_LOG_ERR,
			"attend: %u history tokens but %u blocks of %u", need,
			a->block_count, shape->span);
		return -KVS_EPARAM;
	}
	if (a->k_quant_len % shape->group != 0) {
		kvs_log(KVS_LOG_ERR,
			"attend: k_quant_len %u is not a multiple of G=%u",
			a->k_quant_len, shape->group);
		return -KVS_EPARAM;
	}
	used = (need + shape->span - 1) / shape->span;
	for (i = 0; i < used; i++) {
		const struct kvs_view *view = a->blocks[i];

		if (!view || view->hdr.kind != KVS_KIND_BLOCK ||
		    !kvs_shape_same(&view->hdr.shape, shape)) {
			kvs_log(KVS_LOG_ERR,
				"attend: history block %u is missing, not a "
				"block or of another shape",
				i);
			return -KVS_EPARAM;
		}
		for (s = KVS_SEC_KEY_CODES; s < KVS_BLOCK_SECTIONS; s++) {
			if (!view->section[s]) {
				kvs_log(KVS_LOG_ERR,
					"attend: block %u has no section %d", i,
					s);
				return -KVS_EPARAM;
			}
		}
	}
	hist->span = shape->span;
	hist->group = shape->group;
	hist->head_dim = shape->head_dim;
	hist->bits = shape->bits;
	hist->meta = (enum kvs_dtype)shape->meta_type;
	hist->row_bytes = (size_t)shape->head_dim * shape->bits / 8;
	return 0;
}

static int all_finite(const float *x, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (!isfinite(x[i]))
			return 0;
	return 1;
}

/* Residual rows [0, len) of every head, @stride rows apart, finite. */
static int check_resid(const char *what, const float *rows, uint32_t len,
		       uint32_t stride, const struct kvs_attn *a)
{
	uint32_t h;

	if (len == 0)
		return 0;
	if (!rows || stride < len) {
		kvs_log(KVS_LOG_ERR, "attend: %s residual of %u rows: %s", what,
			len, rows ? "stride too small" : "no rows");
		return -KVS_EPARAM;
	}
	for (h = 0; h < a->kv_heads; h++) {
		if (!all_finite(rows + (size_t)h * stride * a->head_dim,
				(size_t)len * a->head_dim)) {
			kvs_log(KVS_LOG_ERR,
				"attend: non-finite %s residual (head %u)",
				what, h);
			return -KVS_ENONFINITE;
		}
	}
	return 0;
}

static int check_attn(const struct kvs_attn *a, struct history *hist)
{
	uint64_t k_total, v_total;
	int err;

	if (!a || !a->q || !a->out || a->kv_heads == 0 || a->head_dim == 0 ||
	    a->q_heads == 0 || a->q_heads % a->kv_heads != 0) {
		kvs_log(KVS_LOG_ERR,
			"attend: need q, out, kv_heads > 0, head_dim > 0 and "
			"q_heads a multiple of kv_heads");
		return -KVS_EPARAM;
	}
	k_total = (uint64_t)a->k_quant_len + a->k_resid_len;
	v_total = (uint64_t)a->v_quant_len + a->v_resid_len;
	if (k_total == 0 && v_total == 0) {
		kvs_log(KVS_LOG_ERR, "attend: no visible tokens");
		return -KVS_EPARAM;
	}
	if (k_total != v_total) {
		kvs_log(KVS_LOG_ERR,
			"attend: Keys cover %llu tokens (%u + %u), Values %llu "
			"(%u + %u)",
			(unsigned long long)k_total, a->k_quant_len,
			a->k_resid_len, (unsigned long long)v_total,
			a->v_quant_len, a->v_resid_len);
		return -KVS_EBOUNDARY;
	}
	if (k_total > UINT32_MAX) {
		kvs_log(KVS_LOG_ERR, "attend: too many tokens");
		return -KVS_EPARAM;
	}
	err = check_blocks(a, hist);
	if (err)
		return err;
	if (!isfinite(a->scale) ||
	    !all_finite(a->q, (size_t)a->q_heads * a->head_dim)) {
		kvs_log(KVS_LOG_ERR, "attend: non-finite query or scale");
		return -KVS_ENONFINITE;
	}
	err = check_resid("Key", a->k_resid, a->k_resid_len, a->k_resid_stride,
			  a);
	if (err)
		return err;
	return check_resid("Value", a->v_resid, a->v_resid_len,
			   a->v_resid_stride, a);
}

/* The @n codes of one packed row (low bits first, as kvs_pack_codes). */
static void unpack_row(const uint8_t *packed, uint32_t n, unsigned bits,
		       uint8_t *codes)
{
	unsigned per_byte = 8 / bits, mask = (1u << bits) - 1;
	uint32_t i;

	for (i = 0; i < n; i++)
		codes[i] =
			(packed[i / per_byte] >> (i % per_byte * bits)) & mask;
}

/* Keys of tokens [0, n) of @head in @view into rows[n][D]; each group's
 * origins and steps are loaded once. */
static void decode_keys(const struct history *hist, const struct kvs_view *view,
			uint32_t head, uint32_t n, struct decode_scratch *ds,
			float *rows)
{
	const uint8_t *codes = view->section[KVS_SEC_KEY_CODES];
	const void *origins = view->section[KVS_SEC_KEY_ORIGIN];
	const void *steps = view->section[KVS_SEC_KEY_STEP];
	uint32_t D = hist->head_dim, G = hist->group;
	size_t groups_per_head = hist->span / G;
	uint32_t t, d;

	for (t = 0; t < n; t++) {
		float *out = rows + (size_t)t * D;

		if (t % G == 0) {
			size_t base =
				((size_t)head * groups_per_head + t / G) * D;

			for (d = 0; d < D; d++) {
				ds->origin[d] = kvs_dtype_load(
					hist->meta, origins, base + d);
				ds->step[d] = kvs_dtype_load(hist->meta, steps,
							     base + d);
			}
		}
		unpack_row(codes + ((size_t)head * hist->span + t) *
					   hist->row_bytes,
			   D, hist->bits, ds->codes);
		/* kvs_dequant(): fmaf(step, code, origin). */
		for (d = 0; d < D; d++)
			out[d] = fmaf(ds->step[d], (float)ds->codes[d],
				      ds->origin[d]);
	}
}

/* Values of tokens [0, n) of @head in @view into rows[n][D]. */
static void decode_values(const struct history *hist,
			  const struct kvs_view *view, uint32_t head,
			  uint32_t n, struct decode_scratch *ds, float *rows)
{
	const uint8_t *codes = view->section[KVS_SEC_VAL_CODES];
	const void *origins = view->section[KVS_SEC_VAL_ORIGIN];
	const void *steps = view->section[KVS_SEC_VAL_STEP];
	uint32_t D = hist->head_dim, G = hist->group;
	uint32_t t, d;

	for (t = 0; t < n; t++) {
		size_t token = (size_t)head * hist->span + t;
		float *out = rows + (size_t)t * D;

		unpack_row(codes + token * hist->row_bytes, D, hist->bits,
			   ds->codes);
		for (d = 0; d < D; d += G) {
			size_t m = token * (D / G) + d / G;
			float origin = kvs_dtype_load(hist->meta, origins, m);
			float step = kvs_dtype_load(hist->meta, steps, m);
			uint32_t i;

			for (i = d; i < d + G; i++)
				out[i] =
					fmaf(step, (float)ds->codes[i], origin);
		}
	}
}

/* q.k in double; four partial sums so the loop is not one long chain
 * (head_dim is a multiple of the group, hence of 4 unless G < 4). */
static double dot(const float *q, const float *k, uint32_t n)
{
	double sum[4] = { 0.0, 0.0, 0.0, 0.0 };
	uint32_t i;

	for (i = 0; i + 4 <= n; i += 4) {
		sum[0] += (double)q[i] * k[i];
		sum[1] += (double)q[i + 1] * k[i + 1];
		sum[2] += (double)q[i + 2] * k[i + 2];
		sum[3] += (double)q[i + 3] * k[i + 3];
	}
	for (; i < n; i++)
		sum[0] += (double)q[i] * k[i];
	return (sum[0] + sum[1]) + (sum[2] + sum[3]);
}

static void axpy(double *acc, double w, const float *v, uint32_t n)
{
	uint32_t i;

	for (i = 0; i < n; i++)
		acc[i] += w * v[i];
}

/* Scratch for one KV head and its query heads. */
struct work {
	double *logits; /* [ratio][tokens] */
	double *acc; /* [ratio][D] */
	double *total; /* [ratio] softmax denominators */
	float *rows; /* [S][D] decoded history of one block */
	struct decode_scratch ds;
};

static void head_logits(const struct kvs_attn *a, const struct history *hist,
			uint32_t h, uint32_t ratio, uint32_t tokens,
			struct work *w)
{
	uint32_t D = a->head_dim, b, t, i;

	for (b = 0; (uint64_t)b * hist->span < a->k_quant_len; b++) {
		uint32_t first = b * hist->span;
		uint32_t n = a->k_quant_len - first < hist->span
				     ? a->k_quant_len - first
				     : hist->span;

		decode_keys(hist, a->blocks[b], h, n, &w->ds, w->rows);
		for (i = 0; i < ratio; i++) {
			const float *q = a->q + ((size_t)h * ratio + i) * D;

			for (t = 0; t < n; t++)
				w->logits[(size_t)i * tokens + first + t] =
					a->scale *
					dot(q, w->rows + (size_t)t * D, D);
		}
	}
	for (i = 0; i < ratio; i++) {
		const float *q = a->q + ((size_t)h * ratio + i) * D;

		for (t = 0; t < a->k_resid_len; t++) {
			const float *k =
				a->k_resid +
				((size_t)h * a->k_resid_stride + t) * D;

			w->logits[(size_t)i * tokens + a->k_quant_len + t] =
				a->scale * dot(q, k, D);
		}
	}
}

/* One softmax over all @tokens logits of each query head, in place. */
static void head_softmax(uint32_t ratio, uint32_t tokens, struct work *w)
{
	uint32_t i, t;

	for (i = 0; i < ratio; i++) {
		double *l = w->logits + (size_t)i * tokens;
		double peak = l[0], sum = 0.0;

		for (t = 1; t < tokens; t++)
			if (l[t] > peak)
				peak = l[t];
		for (t = 0; t < tokens; t++) {
			l[t] = exp(l[t] - peak);
			sum += l[t];
		}
		w->total[i] = sum;
	}
}

static void head_output(const struct kvs_attn *a, const struct history *hist,
			uint32_t h, uint32_t ratio, uint32_t tokens,
			struct work *w)
{
	uint32_t D = a->head_dim, b, t, i, d;

	memset(w->acc, 0, sizeof(*w->acc) * ratio * D);
	for (b = 0; (uint64_t)b * hist->span < a->v_quant_len; b++) {
		uint32_t first = b * hist->span;
		uint32_t n = a->v_quant_len - first < hist->span
				     ? a->v_quant_len - first
				     : hist->span;

		decode_values(hist, a->blocks[b], h, n, &w->ds, w->rows);
		for (i = 0; i < ratio; i++)
			for (t = 0; t < n; t++)
				axpy(w->acc + (size_t)i * D,
				     w->logits[(size_t)i * tokens + first + t],
				     w->rows + (size_t)t * D, D);
	}
	for (i = 0; i < ratio; i++) {
		for (t = 0; t < a->v_resid_len; t++)
			axpy(w->acc + (size_t)i * D,
			     w->logits[(size_t)i * tokens + a->v_quant_len + t],
			     a->v_resid +
				     ((size_t)h * a->v_resid_stride + t) * D,
			     D);
		for (d = 0; d < D; d++)
			a->out[((size_t)h * ratio + i) * D + d] =
				(float)(w->acc[(size_t)i * D + d] /
					w->total[i]);
	}
}

static int cpu_attend(const struct kvs_attn *a)
{
	struct history hist = { .span = 0 };
	struct work w;
	uint32_t ratio, tokens, h;
	size_t span;
	int err;

	err = check_attn(a, &hist);
	if (err)
		return err;
	ratio = a->q_heads / a->kv_heads;
	tokens = a->k_quant_len + a->k_resid_len;
	span = hist.span ? hist.span : 1;

	err = -ENOMEM;
	w.logits = malloc(sizeof(*w.logits) * ratio * (size_t)tokens);
	if (!w.logits)
		goto fail_logits;
	w.acc = malloc(sizeof(*w.acc) * ratio * (size_t)a->head_dim);
	if (!w.acc)
		goto fail_acc;
	w.total = malloc(sizeof(*w.total) * ratio);
	if (!w.total)
		goto fail_total;
	w.rows = malloc(sizeof(*w.rows) * span * a->head_dim);
	if (!w.rows)
		goto fail_rows;
	w.ds.origin = malloc(sizeof(float) * 3 * (size_t)a->head_dim);
	if (!w.ds.origin)
		goto fail_origin;
	w.ds.step = w.ds.origin + a->head_dim;
	w.ds.codes = (uint8_t *)(w.ds.step + a->head_dim);

	for (h = 0; h < a->kv_heads; h++) {
		head_logits(a, &hist, h, ratio, tokens, &w);
		head_softmax(ratio, tokens, &w);
		head_output(a, &hist, h, ratio, tokens, &w);
	}
	err = 0;

	free(w.ds.origin);
fail_origin:
	free(w.rows);
fail_rows:
	free(w.total);
fail_total:
	free(w.acc);
fail_acc:
	free(w.logits);
fail_logits:
	if (err)
		kvs_log(KVS_LOG_ERR, "attend: out of memory for %u tokens",
			tokens);
	return err;
}

static int cpu_seal(const struct kvs_shape *shape,
		    const struct kvs_ident *ident, enum kvs_dtype in_dtype,
		    const void *keys, const void *values, uint8_t *image)
{
	int err;

	err = kvs_block_quantize(shape, in_dtype, keys, values, image);
	if (err)
		return err;
	return kvs_block_finish(shape, ident, image);
}

static int cpu_dequantize(const struct kvs_view *view, float *keys,
			  float *values)
{
	return kvs_block_dequantize(view, keys, values);
}

static const struct kvs_backend_ops cpu_backend = {
	.name = "cpu",
	.seal = cpu_seal,
	.dequantize = cpu_dequantize,
	.attend = cpu_attend,
};

const struct kvs_backend_ops *kvs_backend_cpu(void)
{
	return &cpu_backend;
}
