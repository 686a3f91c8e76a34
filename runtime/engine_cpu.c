/*
 * engine_cpu.c - the runtime's CPU device: the page pool and the residual
 * slots in host memory, the residual ops written as the CUDA kernels of
 * kernels/residual.cu behave (the FIFO compacted to row 0 when it reaches
 * the end of its rows, the seal reading the Key residual and the last R
 * rows of the FIFO), the seal through kvs_block_quantize and the attention
 * through the CPU reference backend (kvs_backend_cpu), one sequence at a
 * time.
 *
 * Residual rows are fp32 here (each the exact value of kv_dtype it came
 * in as), so that attention needs no conversion; K/V in and out are of
 * kv_dtype.  The pages are block images whose sections are written by
 * the seal or a fetch; each page has a fixed view pointing at them.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kvstash/log.h"
#include "runtime_internal.h"

struct cpu_state {
	struct kvs_view *views; /* [pool pages] */
	const struct kvs_view **history; /* [max_pages] */
	float *q, *out; /* [q_heads][D] */
	float *seal_k, *seal_v; /* [kv][S][D] */
	uint8_t *row_k, *row_v; /* [kv][D] of kv_dtype */
};

static struct cpu_state *state(struct kvs_rt *rt)
{
	return rt->eng_state;
}

static size_t row_floats(const struct kvs_rt *rt)
{
	return (size_t)rt->cfg.shape.kv_heads * rt->cfg.shape.head_dim;
}

static void cpu_fini(struct kvs_rt *rt)
{
	struct cpu_state *cs = state(rt);

	if (!cs)
		return;
	free(cs->views);
	free(cs->history);
	free(cs->q);
	free(cs->seal_k);
	free(cs->row_k);
	free(cs);
	free(rt->pool.base);
	rt->eng_state = NULL;
}

static int cpu_init(struct kvs_rt *rt)
{
	const struct kvs_shape *sh = &rt->cfg.shape;
	size_t qf = (size_t)rt->cfg.q_heads * sh->head_dim;
	size_t block = (size_t)sh->span * row_floats(rt);
	size_t row = row_floats(rt) * kvs_dtype_size(rt->cfg.kv_dtype);
	struct cpu_state *cs;
	uint32_t p;
	int s;

	cs = calloc(1, sizeof(*cs));
	if (!cs)
		goto fail;
	rt->eng_state = cs;
	rt->pool.base = calloc(rt->pool.pages, rt->page_stride);
	cs->views = calloc(rt->pool.pages, sizeof(*cs->views));
	cs->history = malloc(sizeof(*cs->history) * rt->max_pages);
	cs->q = malloc(sizeof(float) * 2 * qf);
	cs->seal_k = malloc(sizeof(float) * 2 * block);
	cs->row_k = malloc(2 * row);
	if (!rt->pool.base || !cs->views || !cs->history || !cs->q ||
	    !cs->seal_k || !cs->row_k)
		goto fail;
	cs->out = cs->q + qf;
	cs->seal_v = cs->seal_k + block;
	cs->row_v = cs->row_k + row;
	for (p = 0; p < rt->pool.pages; p++) {
		struct kvs_view *v = &cs->views[p];
		uint8_t *page = rt->pool.base + (size_t)p * rt->page_stride;

		v->hdr.kind = KVS_KIND_BLOCK;
		v->hdr.layout = KVS_LAYOUT_TOKEN_MAJOR;
		v->hdr.shape = *sh;
		v->hdr.tokens = sh->span;
		for (s = 0; s < KVS_BLOCK_SECTIONS; s++)
			v->section[s] = page + rt->layout.offset[s];
	}
	return 0;
fail:
	cpu_fini(rt);
	kvs_log(KVS_LOG_ERR, "cpu engine: out of memory for %u pages",
		rt->pool.pages);
	return -ENOMEM;
}

static void cpu_slots_fini(struct kvs_rt *rt, struct rt_slots *s)
{
	uint32_t l;

	for (l = 0; l < rt->cfg.layers; l++) {
		free(s->k_resid[l]);
		free(s->v_resid[l]);
		free(s->lens[l]);
		free(s->table[l]);
	}
}

static int cpu_slots_init(struct kvs_rt *rt, struct rt_slots *s)
{
	size_t row = row_floats(rt);
	uint32_t l;

	for (l = 0; l < rt->cfg.layers; l++) {
		s->k_resid[l] = calloc((size_t)s->cap * s->k_stride * row,
				       sizeof(float));
		s->v_resid[l] = calloc((size_t)s->cap * s->v_stride * row,
				       sizeof(float));
		s->lens[l] = calloc(s->cap, sizeof(struct rt_dev_len));
		s->table[l] =
			calloc((size_t)s->cap * rt->max_pages, sizeof(int32_t));
		if (!s->k_resid[l] || !s->v_resid[l] || !s->lens[l] ||
		    !s->table[l]) {
			kvs_log(KVS_LOG_ERR,
				"cpu engine: out of memory for %u slots",
				s->cap);
			return -ENOMEM;
		}
	}
	return 0;
}

/* Row @row of head @h of slot @i: a Key (@v false) or Value row. */
static float *resid_row(struct kvs_rt *rt, struct rt_slots *s, uint32_t layer,
			uint32_t i, bool value, uint32_t h, uint32_t row)
{
	uint32_t stride = value ? s->v_stride : s->k_stride;
	float *base = value ? s->v_resid[layer] : s->k_resid[layer];

	return base + (((size_t)i * rt->cfg.shape.kv_heads + h) * stride +
		       row) * rt->cfg.shape.head_dim;
}

static int cpu_slot_copy(struct kvs_rt *rt, struct rt_slots *s, uint32_t from,
			 uint32_t to)
{
	size_t kn = (size_t)s->k_stride * row_floats(rt);
	size_t vn = (size_t)s->v_stride * row_floats(rt);
	uint32_t l;

	for (l = 0; l < rt->cfg.layers; l++) {
		float *k = s->k_resid[l], *v = s->v_resid[l];

		memcpy(k + to * kn, k + from * kn, sizeof(float) * kn);
		memcpy(v + to * vn, v + from * vn, sizeof(float) * vn);
		s->lens[l][to] = s->lens[l][from];
		memcpy(s->table[l] + (size_t)to * rt->max_pages,
		       s->table[l] + (size_t)from * rt->max_pages,
		       sizeof(int32_t) * rt->max_pages);
	}
	return 0;
}

static int cpu_slot_set(struct kvs_rt *rt, struct rt_slots *s, uint32_t i,
			uint32_t layer, const struct rt_dev_len *len,
			const int32_t *pages, uint32_t n)
{
	s->lens[layer][i] = *len;
	if (n)
		memcpy(s->table[layer] + (size_t)i * rt->max_pages, pages,
		       sizeof(int32_t) * n);
	return 0;
}

static int all_finite(enum kvs_dtype dt, const void *x, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (!isfinite(kvs_dtype_load(dt, x, i)))
			return 0;
	return 1;
}

static int cpu_check(struct kvs_rt *rt, uint32_t count, const void *q,
		     const void *k, const void *v)
{
	enum kvs_dtype dt = rt->cfg.kv_dtype;
	size_t kv = (size_t)count * row_floats(rt);

	if ((q && !all_finite(dt, q,
			      (size_t)count * rt->cfg.q_heads *
				      rt->cfg.shape.head_dim)) ||
	    (k && !all_finite(dt, k, kv)) || (v && !all_finite(dt, v, kv))) {
		kvs_log(KVS_LOG_ERR, "cpu engine: non-finite query, key or "
				     "value");
		return -KVS_ENONFINITE;
	}
	return 0;
}

static int cpu_append(struct kvs_rt *rt, struct rt_slots *s, uint32_t first,
		      uint32_t count, uint32_t layer, const void *k,
		      const void *v)
{
	enum kvs_dtype dt = rt->cfg.kv_dtype;
	uint32_t H = rt->cfg.shape.kv_heads, D = rt->cfg.shape.head_dim;
	uint32_t b, h, d;

	for (b = 0; b < count; b++) {
		struct rt_dev_len *len = &s->lens[layer][first + b];
		size_t in = (size_t)b * H * D;

		if (len->v_start + len->v_resid >= s->v_stride) {
			for (h = 0; h < H; h++)
				memmove(resid_row(rt, s, layer, first + b, true,
						  h, 0),
					resid_row(rt, s, layer, first + b, true,
						  h, len->v_start),
					sizeof(float) * len->v_resid * D);
			len->v_start = 0;
		}
		for (h = 0; h < H; h++) {
			float *kr = resid_row(rt, s, layer, first + b, false, h,
					      len->k_resid);
			float *vr = resid_row(rt, s, layer, first + b, true, h,
					      len->v_start + len->v_resid);

			for (d = 0; d < D; d++) {
				kr[d] = kvs_dtype_load(dt, k, in + h * D + d);
				vr[d] = kvs_dtype_load(dt, v, in + h * D + d);
			}
		}
		len->k_resid++;
		len->v_resid++;
	}
	return 0;
}

static int cpu_attend(struct kvs_rt *rt, struct rt_slots *s, uint32_t first,
		      uint32_t count, uint32_t layer, const void *q, void *out,
		      uint32_t max_tokens)
{
	struct cpu_state *cs = state(rt);
	uint32_t S = rt->cfg.shape.span, D = rt->cfg.shape.head_dim;
	size_t qf = (size_t)rt->cfg.q_heads * D, i;
	struct kvs_attn a;
	uint32_t b, p, pages;
	int err;

	(void)max_tokens;
	for (b = 0; b < count; b++) {
		const struct rt_dev_len *len = &s->lens[layer][first + b];
		const int32_t *table =
			s->table[layer] + (size_t)(first + b) * rt->max_pages;
		uint32_t hist = len->k_quant > len->v_quant ? len->k_quant
							    : len->v_quant;

		pages = (hist + S - 1) / S;
		for (p = 0; p < pages; p++)
			cs->history[p] = &cs->views[table[p]];
		for (i = 0; i < qf; i++)
			cs->q[i] =
				kvs_dtype_load(rt->cfg.kv_dtype, q, b * qf + i);
		memset(&a, 0, sizeof(a));
		a.q_heads = rt->cfg.q_heads;
		a.kv_heads = rt->cfg.shape.kv_heads;
		a.head_dim = D;
		a.scale = rt->cfg.scale;
		a.q = cs->q;
		a.blocks = cs->history;
		a.block_count = pages;
		a.k_quant_len = len->k_quant;
		a.v_quant_len = len->v_quant;
		a.k_resid = resid_row(rt, s, layer, first + b, false, 0, 0);
		a.v_resid = resid_row(rt, s, layer, first + b, true, 0,
				      len->v_start);
		a.k_resid_len = len->k_resid;
		a.v_resid_len = len->v_resid;
		a.k_resid_stride = s->k_stride;
		a.v_resid_stride = s->v_stride;
		a.out = cs->out;
		err = kvs_backend_cpu()->attend(&a);
		if (err)
			return err;
		for (i = 0; i < qf; i++)
			kvs_dtype_store(
				rt->cfg.out_dtype, out, b * qf + i,
				kvs_round_to(rt->cfg.out_dtype, cs->out[i]));
	}
	return 0;
}

/* Quantizes the gathered [kv][S][D] rows into page @page. */
static int seal_page(struct kvs_rt *rt, int32_t page)
{
	struct cpu_state *cs = state(rt);

	return kvs_block_quantize(
		&rt->cfg.shape, KVS_DTYPE_F32, cs->seal_k, cs->seal_v,
		rt->pool.base + (size_t)page * rt->page_stride);
}

static int cpu_seal(struct kvs_rt *rt, struct rt_slots *s, uint32_t first,
		    uint32_t layer, const int32_t *which, const int32_t *pages,
		    uint32_t n)
{
	struct cpu_state *cs = state(rt);
	uint32_t R = rt->cfg.shape.residual, H = rt->cfg.shape.kv_heads;
	uint32_t D = rt->cfg.shape.head_dim, j, h;
	int err;

	for (j = 0; j < n; j++) {
		uint32_t i = first + (uint32_t)which[j];
		struct rt_dev_len *len = &s->lens[layer][i];
		uint32_t vrow = len->v_start + len->v_resid - R;

		for (h = 0; h < H; h++) {
			memcpy(cs->seal_k + (size_t)h * R * D,
			       resid_row(rt, s, layer, i, false, h, 0),
			       sizeof(float) * R * D);
			memcpy(cs->seal_v + (size_t)h * R * D,
			       resid_row(rt, s, layer, i, true, h, vrow),
			       sizeof(float) * R * D);
		}
		err = seal_page(rt, pages[j]);
		if (err)
			return err;
		s->table[layer][(size_t)i * rt->max_pages + len->k_quant / R] =
			pages[j];
		len->k_quant += R;
		len->k_resid = 0;
	}
	return 0;
}

static int cpu_pop(struct kvs_rt *rt, struct rt_slots *s, uint32_t first,
		   uint32_t count, uint32_t layer)
{
	uint32_t R = rt->cfg.shape.residual, b;

	for (b = 0; b < count; b++) {
		struct rt_dev_len *len = &s->lens[layer][first + b];

		if (len->v_resid > R) {
			len->v_start++;
			len->v_resid--;
			len->v_quant++;
		}
	}
	return 0;
}

/* Rows [from, from + n) of every head of [kv][total][D] kv_dtype input,
 * widened into [kv][dst_stride][D] floats. */
static void load_rows(const struct kvs_rt *rt, const void *src, uint32_t total,
		      uint32_t from, uint32_t n, float *dst,
		      uint32_t dst_stride)
{
	uint32_t H = rt->cfg.shape.kv_heads, D = rt->cfg.shape.head_dim, h;
	size_t e;

	for (h = 0; h < H; h++)
		for (e = 0; e < (size_t)n * D; e++)
			dst[(size_t)h * dst_stride * D + e] = kvs_dtype_load(
				rt->cfg.kv_dtype, src,
				((size_t)h * total + from) * D + e);
}

static int cpu_prefill(struct kvs_rt *rt, struct rt_slots *s, uint32_t i,
		       uint32_t layer, const void *k, const void *v, uint32_t n,
		       const int32_t *pages, uint32_t blocks,
		       uint32_t first_page, const struct rt_dev_len *len)
{
	struct cpu_state *cs = state(rt);
	uint32_t R = rt->cfg.shape.residual, j;
	int32_t *table = s->table[layer] + (size_t)i * rt->max_pages;
	int err;

	for (j = 0; j < blocks; j++) {
		load_rows(rt, k, n, j * R, R, cs->seal_k, R);
		load_rows(rt, v, n, j * R, R, cs->seal_v, R);
		err = seal_page(rt, pages[j]);
		if (err)
			return err;
		table[first_page + j] = pages[j];
	}
	load_rows(rt, k, n, blocks * R, len->k_resid,
		  resid_row(rt, s, layer, i, false, 0, 0), s->k_stride);
	load_rows(rt, v, n, n - len->v_resid, len->v_resid,
		  resid_row(rt, s, layer, i, true, 0, 0), s->v_stride);
	s->lens[layer][i] = *len;
	return 0;
}

static int cpu_token(struct kvs_rt *rt, const void *k, const void *v,
		     uint32_t n, uint32_t t, const void **k_row,
		     const void **v_row)
{
	struct cpu_state *cs = state(rt);
	uint32_t H = rt->cfg.shape.kv_heads, D = rt->cfg.shape.head_dim, h;
	size_t esize = kvs_dtype_size(rt->cfg.kv_dtype), bytes = esize * D;

	for (h = 0; h < H; h++) {
		size_t at = ((size_t)h * n + t) * bytes;

		memcpy(cs->row_k + h * bytes, (const uint8_t *)k + at, bytes);
		memcpy(cs->row_v + h * bytes, (const uint8_t *)v + at, bytes);
	}
	*k_row = cs->row_k;
	*v_row = cs->row_v;
	return 0;
}

static int cpu_resid_read(struct kvs_rt *rt, struct rt_slots *s, uint32_t i,
			  uint32_t layer, float *k, uint32_t r_k, float *v,
			  uint32_t r_v)
{
	const struct rt_dev_len *len = &s->lens[layer][i];
	uint32_t H = rt->cfg.shape.kv_heads, D = rt->cfg.shape.head_dim, h;

	if (r_k != len->k_resid || r_v != len->v_resid)
		return -KVS_EPARAM;
	for (h = 0; h < H; h++) {
		memcpy(k + (size_t)h * r_k * D,
		       resid_row(rt, s, layer, i, false, h, 0),
		       sizeof(float) * r_k * D);
		memcpy(v + (size_t)h * r_v * D,
		       resid_row(rt, s, layer, i, true, h, len->v_start),
		       sizeof(float) * r_v * D);
	}
	return 0;
}

static int cpu_resid_write(struct kvs_rt *rt, struct rt_slots *s, uint32_t i,
			   uint32_t layer, const float *k, uint32_t r_k,
			   const float *v, uint32_t r_v)
{
	uint32_t H = rt->cfg.shape.kv_heads, D = rt->cfg.shape.head_dim, h;

	for (h = 0; h < H; h++) {
		memcpy(resid_row(rt, s, layer, i, false, h, 0),
		       k + (size_t)h * r_k * D, sizeof(float) * r_k * D);
		memcpy(resid_row(rt, s, layer, i, true, h, 0),
		       v + (size_t)h * r_v * D, sizeof(float) * r_v * D);
	}
	return 0;
}

static int cpu_page_write(struct kvs_rt *rt, int32_t page,
			  const struct kvs_view *view, const uint8_t *obj,
			  size_t len)
{
	uint8_t *dst = rt->pool.base + (size_t)page * rt->page_stride;
	int s;

	(void)obj;
	(void)len;
	for (s = 0; s < KVS_BLOCK_SECTIONS; s++)
		memcpy(dst + rt->layout.offset[s], view->section[s],
		       rt->layout.length[s]);
	return 0;
}

static int cpu_page_read(struct kvs_rt *rt, int32_t page, uint8_t *image)
{
	const uint8_t *src = rt->pool.base + (size_t)page * rt->page_stride;
	int s;

	for (s = 0; s < KVS_BLOCK_SECTIONS; s++)
		memcpy(image + rt->layout.offset[s], src + rt->layout.offset[s],
		       rt->layout.length[s]);
	return 0;
}

static int cpu_history(struct kvs_rt *rt, const int32_t *pages, uint32_t n,
		       enum kvs_dtype dtype, void *k, void *v)
{
	struct cpu_state *cs = state(rt);
	size_t block = (size_t)rt->cfg.shape.span * row_floats(rt), e;
	uint32_t j;
	int err;

	for (j = 0; j < n; j++) {
		err = kvs_block_dequantize(&cs->views[pages[j]], cs->seal_k,
					   cs->seal_v);
		if (err)
			return err;
		for (e = 0; e < block; e++) {
			kvs_dtype_store(dtype, k, j * block + e,
					kvs_round_to(dtype, cs->seal_k[e]));
			kvs_dtype_store(dtype, v, j * block + e,
					kvs_round_to(dtype, cs->seal_v[e]));
		}
	}
	return 0;
}

/* Everything runs in order on the caller's thread: marks are no-ops. */
static int cpu_mark(struct kvs_rt *rt, bool copy, void **out)
{
	(void)rt;
	(void)copy;
	*out = NULL;
	return 0;
}

static int cpu_mark_wait(struct kvs_rt *rt, void *mark)
{
	(void)rt;
	(void)mark;
	return 0;
}

static void cpu_mark_free(struct kvs_rt *rt, void *mark)
{
	(void)rt;
	(void)mark;
}

static int cpu_sync(struct kvs_rt *rt)
{
	(void)rt;
	return 0;
}

static void *cpu_host_alloc(struct kvs_rt *rt, size_t n)
{
	(void)rt;
	return malloc(n ? n : 1);
}

static void cpu_host_free(struct kvs_rt *rt, void *p)
{
	(void)rt;
	free(p);
}

static void cpu_thread_init(struct kvs_rt *rt)
{
	(void)rt;
}

const struct rt_engine_ops rt_engine_cpu = {
	.name = "cpu",
	.device = KVS_RT_CPU,
	.init = cpu_init,
	.fini = cpu_fini,
	.slots_init = cpu_slots_init,
	.slots_fini = cpu_slots_fini,
	.slot_copy = cpu_slot_copy,
	.slot_set = cpu_slot_set,
	.check = cpu_check,
	.append = cpu_append,
	.attend = cpu_attend,
	.seal = cpu_seal,
	.pop = cpu_pop,
	.prefill = cpu_prefill,
	.token = cpu_token,
	.resid_read = cpu_resid_read,
	.resid_write = cpu_resid_write,
	.page_write = cpu_page_write,
	.page_read = cpu_page_read,
	.history = cpu_history,
	.mark = cpu_mark,
	.mark_wait = cpu_mark_wait,
	.mark_join = cpu_mark_wait,
	.mark_free = cpu_mark_free,
	.sync = cpu_sync,
	.host_alloc = cpu_host_alloc,
	.host_free = cpu_host_free,
	.thread_init = cpu_thread_init,
};
