/*
 * engine_cuda.c - the runtime's CUDA device: the page pool and the
 * residual slots in GPU memory, exactly as kernels.h's struct
 * kvs_cuda_resid and struct kvs_cuda_attn describe them, so a decode step
 * is the kernels' append, fused attention, seal and pop enqueued on the
 * runtime's stream with nothing going through the host but the short list
 * of which sequences seal into which pages.
 *
 * Three streams: the step stream (the config's, or the default), on which
 * everything a sequence's state depends on is ordered; the fetch stream,
 * on which the fetch thread copies attached blocks into their pages (a
 * layer's last copy is marked by an event that the step stream waits for
 * before the layer is used); the publish stream, on which the publish
 * thread copies sealed pages out after waiting for the step that sealed
 * them.  Seals report non-finite input or a step out of its metadata
 * type's range through one device status word, read at kvs_rt_sync().
 *
 * Without CUDA in the build, rt_engine_cuda() is NULL.
 */
#include "kvs_config.h"
#include "runtime_internal.h"

#if KVS_HAVE_CUDA

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "kvstash/kernels.h"
#include "kvstash/log.h"

_Static_assert(sizeof(struct rt_dev_len) == sizeof(struct kvs_cuda_seq),
	       "device lengths are kvs_cuda_seq");
_Static_assert(offsetof(struct rt_dev_len, k_quant) ==
			       offsetof(struct kvs_cuda_seq, k_quant_len) &&
		       offsetof(struct rt_dev_len, v_quant) ==
			       offsetof(struct kvs_cuda_seq, v_quant_len) &&
		       offsetof(struct rt_dev_len, k_resid) ==
			       offsetof(struct kvs_cuda_seq, k_resid_len) &&
		       offsetof(struct rt_dev_len, v_resid) ==
			       offsetof(struct kvs_cuda_seq, v_resid_len) &&
		       offsetof(struct rt_dev_len, v_start) ==
			       offsetof(struct kvs_cuda_seq, v_resid_start),
	       "device lengths are kvs_cuda_seq, field by field");

/* Logs a failed CUDA call and evaluates to -KVS_ECUDA, or 0. */
static int cuda_err(cudaError_t e, const char *what, int line)
{
	if (e == cudaSuccess)
		return 0;
	kvs_log(KVS_LOG_ERR, "cuda engine: %s failed (line %d): %s", what, line,
		cudaGetErrorString(e));
	return -KVS_ECUDA;
}
#define CK(call) cuda_err((call), #call, __LINE__)

struct cuda_state {
	int device;
	cudaStream_t step, fetch, publish;
	uint32_t *status; /* device flag word of the seals */
	uint8_t *row_k, *row_v; /* device [kv][D] of kv_dtype */
	int32_t *list; /* device [max_pages] page lists */
	/* the attach's copies into the pool, gathered while each block
	 * follows the one before in both the staging and the pool (the
	 * fetch thread's alone): one copy a run rather than one a block */
	uint8_t *run_dst;
	const uint8_t *run_src;
	size_t run_len;
};

struct cuda_scratch {
	int32_t *which, *pages; /* device [cap] */
	void *workspace;
	uint64_t workspace_size;
};

static struct cuda_state *state(struct kvs_rt *rt)
{
	return rt->eng_state;
}

static size_t esize(const struct kvs_rt *rt)
{
	return kvs_dtype_size(rt->cfg.kv_dtype);
}

static size_t row_bytes(const struct kvs_rt *rt)
{
	return (size_t)rt->cfg.shape.kv_heads * rt->cfg.shape.head_dim *
	       esize(rt);
}

static void cuda_fini(struct kvs_rt *rt)
{
	struct cuda_state *cs = state(rt);

	if (!cs)
		return;
	cudaStreamSynchronize(cs->step);
	cudaFree(rt->pool.base);
	cudaFree(cs->status);
	cudaFree(cs->row_k);
	cudaFree(cs->list);
	if (cs->fetch)
		cudaStreamDestroy(cs->fetch);
	if (cs->publish)
		cudaStreamDestroy(cs->publish);
	free(cs);
	rt->pool.base = NULL;
	rt->eng_state = NULL;
}

static int cuda_init(struct kvs_rt *rt)
{
	struct cuda_state *cs = calloc(1, sizeof(*cs));
	size_t pool = (size_t)rt->pool.pages * rt->page_stride;
	int err;

	if (!cs) {
		kvs_log(KVS_LOG_ERR, "cuda engine: out of memory");
		return -ENOMEM;
	}
	rt->eng_state = cs;
	cs->step = (cudaStream_t)rt->cfg.stream;
	err = CK(cudaGetDevice(&cs->device));
	if (!err)
		err = CK(cudaStreamCreateWithFlags(&cs->fetch,
						   cudaStreamNonBlocking));
	if (!err)
		err = CK(cudaStreamCreateWithFlags(&cs->publish,
						   cudaStreamNonBlocking));
	if (!err)
		err = CK(cudaMalloc((void **)&rt->pool.base, pool));
	if (!err)
		err = CK(cudaMemset(rt->pool.base, 0, pool));
	if (!err)
		err = CK(cudaMalloc((void **)&cs->status, sizeof(uint32_t)));
	if (!err)
		err = CK(cudaMemset(cs->status, 0, sizeof(uint32_t)));
	if (!err)
		err = CK(cudaMalloc((void **)&cs->row_k, 2 * row_bytes(rt)));
	if (!err)
		err = CK(cudaMalloc((void **)&cs->list,
				    sizeof(int32_t) * rt->max_pages));
	if (err) {
		cuda_fini(rt);
		return err;
	}
	cs->row_v = cs->row_k + row_bytes(rt);
	return 0;
}

static void cuda_slots_fini(struct kvs_rt *rt, struct rt_slots *s)
{
	struct cuda_scratch *sc = s->scratch;
	uint32_t l;

	cudaStreamSynchronize(state(rt)->step);
	for (l = 0; s->k_resid && l < rt->cfg.layers; l++) {
		cudaFree(s->k_resid[l]);
		cudaFree(s->v_resid[l]);
		cudaFree(s->lens[l]);
		cudaFree(s->table[l]);
	}
	if (sc) {
		cudaFree(sc->which);
		cudaFree(sc->pages);
		cudaFree(sc->workspace);
		free(sc);
	}
	s->scratch = NULL;
}

static int cuda_slots_init(struct kvs_rt *rt, struct rt_slots *s)
{
	uint32_t L = rt->cfg.layers, l;
	struct cuda_scratch *sc;
	size_t lens = sizeof(struct rt_dev_len) * s->cap;
	size_t table = sizeof(int32_t) * s->cap * rt->max_pages;
	int err = 0;

	s->scratch = sc = calloc(1, sizeof(*sc));
	if (!sc) {
		kvs_log(KVS_LOG_ERR, "cuda engine: out of memory");
		return -ENOMEM;
	}
	for (l = 0; l < L && !err; l++) {
		err = CK(cudaMalloc(&s->k_resid[l], (size_t)s->cap *
							    s->k_stride *
							    row_bytes(rt)));
		if (!err)
			err = CK(cudaMalloc(&s->v_resid[l],
					    (size_t)s->cap * s->v_stride *
						    row_bytes(rt)));
		if (!err)
			err = CK(cudaMalloc((void **)&s->lens[l], lens));
		if (!err)
			err = CK(cudaMemset(s->lens[l], 0, lens));
		if (!err)
			err = CK(cudaMalloc((void **)&s->table[l], table));
		if (!err)
			err = CK(cudaMemset(s->table[l], 0, table));
	}
	if (!err)
		err = CK(cudaMalloc((void **)&sc->which,
				    sizeof(int32_t) * s->cap));
	if (!err)
		err = CK(cudaMalloc((void **)&sc->pages,
				    sizeof(int32_t) * s->cap));
	return err;
}

/* The kernels' view of slots [first, ...) of @layer. */
static void resid_view(struct kvs_rt *rt, struct rt_slots *s, uint32_t first,
		       uint32_t count, uint32_t layer,
		       struct kvs_cuda_resid *st)
{
	memset(st, 0, sizeof(*st));
	st->shape = rt->cfg.shape;
	st->batch = count;
	st->dtype = rt->cfg.kv_dtype;
	st->k_resid = (uint8_t *)s->k_resid[layer] +
		      (size_t)first * s->k_stride * row_bytes(rt);
	st->v_resid = (uint8_t *)s->v_resid[layer] +
		      (size_t)first * s->v_stride * row_bytes(rt);
	st->k_resid_stride = s->k_stride;
	st->v_resid_stride = s->v_stride;
	st->seqs = (struct kvs_cuda_seq *)(s->lens[layer] + first);
	st->page_table = s->table[layer] + (size_t)first * rt->max_pages;
	st->max_pages = rt->max_pages;
	st->stream = state(rt)->step;
}

static int cuda_slot_copy(struct kvs_rt *rt, struct rt_slots *s, uint32_t from,
			  uint32_t to)
{
	cudaStream_t st = state(rt)->step;
	size_t kn = (size_t)s->k_stride * row_bytes(rt);
	size_t vn = (size_t)s->v_stride * row_bytes(rt);
	size_t tn = sizeof(int32_t) * rt->max_pages;
	uint32_t l;
	int err = 0;

	for (l = 0; l < rt->cfg.layers && !err; l++) {
		uint8_t *k = s->k_resid[l], *v = s->v_resid[l];
		uint8_t *t = (uint8_t *)s->table[l];

		err = CK(cudaMemcpyAsync(k + to * kn, k + from * kn, kn,
					 cudaMemcpyDeviceToDevice, st));
		if (!err)
			err = CK(cudaMemcpyAsync(v + to * vn, v + from * vn, vn,
						 cudaMemcpyDeviceToDevice, st));
		if (!err)
			err = CK(cudaMemcpyAsync(&s->lens[l][to],
						 &s->lens[l][from],
						 sizeof(struct rt_dev_len),
						 cudaMemcpyDeviceToDevice, st));
		if (!err)
			err = CK(cudaMemcpyAsync(t + to * tn, t + from * tn, tn,
						 cudaMemcpyDeviceToDevice, st));
	}
	return err;
}

/* Pageable host sources are staged before cudaMemcpyAsync returns, so
 * the small control copies below may come from the stack. */
static int cuda_slot_set(struct kvs_rt *rt, struct rt_slots *s, uint32_t i,
			 uint32_t layer, const struct rt_dev_len *len,
			 const int32_t *pages, uint32_t n)
{
	cudaStream_t st = state(rt)->step;
	int err;

	err = CK(cudaMemcpyAsync(&s->lens[layer][i], len, sizeof(*len),
				 cudaMemcpyHostToDevice, st));
	if (!err && n)
		err = CK(cudaMemcpyAsync(
			s->table[layer] + (size_t)i * rt->max_pages, pages,
			sizeof(int32_t) * n, cudaMemcpyHostToDevice, st));
	return err;
}

static int cuda_check(struct kvs_rt *rt, uint32_t count, const void *q,
		      const void *k, const void *v)
{
	/* device inputs are not read by the host; a non-finite one that
	 * reaches a seal is reported by kvs_rt_sync() */
	(void)rt;
	(void)count;
	(void)q;
	(void)k;
	(void)v;
	return 0;
}

static int cuda_append(struct kvs_rt *rt, struct rt_slots *s, uint32_t first,
		       uint32_t count, uint32_t layer, const void *k,
		       const void *v)
{
	struct kvs_cuda_resid st;

	resid_view(rt, s, first, count, layer, &st);
	return kvs_cuda_resid_append(&st, k, v);
}

static int cuda_attend(struct kvs_rt *rt, struct rt_slots *s, uint32_t first,
		       uint32_t count, uint32_t layer, const void *q, void *out,
		       uint32_t max_tokens)
{
	struct cuda_scratch *sc = s->scratch;
	struct kvs_cuda_resid st;
	struct kvs_cuda_attn a;
	uint64_t need;
	int err;

	resid_view(rt, s, first, count, layer, &st);
	memset(&a, 0, sizeof(a));
	a.shape = rt->cfg.shape;
	a.batch = count;
	a.q_heads = rt->cfg.q_heads;
	a.dtype = rt->cfg.kv_dtype;
	a.out_dtype = rt->cfg.out_dtype;
	a.scale = rt->cfg.scale;
	a.max_tokens = max_tokens;
	a.q = q;
	a.pool = rt->pool.base;
	a.page_stride = rt->page_stride;
	a.page_table = st.page_table;
	a.max_pages = rt->max_pages;
	a.seqs = st.seqs;
	a.k_resid = st.k_resid;
	a.v_resid = st.v_resid;
	a.k_resid_stride = s->k_stride;
	a.v_resid_stride = s->v_stride;
	a.out = out;
	a.stream = st.stream;
	a.max_resid_rows = rt->cfg.shape.residual +
			   (rt->cfg.order == KVS_ORDER_KIVI ? 1 : 0);
	need = kvs_cuda_attn_workspace(&a);
	if (need > sc->workspace_size) {
		/* grows rarely: the first steps of the longest sequences */
		err = CK(cudaStreamSynchronize(st.stream));
		if (!err) {
			cudaFree(sc->workspace);
			sc->workspace = NULL;
			sc->workspace_size = 0;
			err = CK(cudaMalloc(&sc->workspace, need * 2));
		}
		if (err)
			return err;
		sc->workspace_size = need * 2;
	}
	a.workspace = sc->workspace;
	a.workspace_size = sc->workspace_size;
	return kvs_cuda_attend(&a);
}

static int cuda_seal(struct kvs_rt *rt, struct rt_slots *s, uint32_t first,
		     uint32_t layer, const int32_t *which, const int32_t *pages,
		     uint32_t n)
{
	struct cuda_state *cs = state(rt);
	struct cuda_scratch *sc = s->scratch;
	struct kvs_cuda_resid st;
	int err;

	resid_view(rt, s, first, s->cap - first, layer, &st);
	err = CK(cudaMemcpyAsync(sc->which, which, sizeof(int32_t) * n,
				 cudaMemcpyHostToDevice, cs->step));
	if (!err)
		err = CK(cudaMemcpyAsync(sc->pages, pages, sizeof(int32_t) * n,
					 cudaMemcpyHostToDevice, cs->step));
	if (!err)
		err = kvs_cuda_resid_seal(&st, sc->which, sc->pages, n,
					  rt->pool.base, rt->page_stride,
					  cs->status);
	return err;
}

static int cuda_pop(struct kvs_rt *rt, struct rt_slots *s, uint32_t first,
		    uint32_t count, uint32_t layer)
{
	struct kvs_cuda_resid st;

	resid_view(rt, s, first, count, layer, &st);
	return kvs_cuda_resid_pop(&st);
}

/* Rows [from, from + n) of every head of a [kv][total][D] device input to
 * [kv][dst_stride][D] rows at @dst. */
static int copy_rows(struct kvs_rt *rt, void *dst, uint32_t dst_stride,
		     const void *src, uint32_t total, uint32_t from, uint32_t n,
		     enum cudaMemcpyKind kind, cudaStream_t st)
{
	size_t row = (size_t)rt->cfg.shape.head_dim * esize(rt);

	if (n == 0)
		return 0;
	return CK(cudaMemcpy2DAsync(
		dst, dst_stride * row, (const uint8_t *)src + from * row,
		total * row, n * row, rt->cfg.shape.kv_heads, kind, st));
}

static int cuda_prefill(struct kvs_rt *rt, struct rt_slots *s, uint32_t i,
			uint32_t layer, const void *k, const void *v,
			uint32_t n, const int32_t *pages, uint32_t blocks,
			uint32_t first_page, const struct rt_dev_len *len)
{
	struct cuda_state *cs = state(rt);
	uint32_t R = rt->cfg.shape.residual, D = rt->cfg.shape.head_dim;
	struct kvs_cuda_seal seal;
	uint8_t *k_rows = (uint8_t *)s->k_resid[layer] +
			  (size_t)i * s->k_stride * row_bytes(rt);
	uint8_t *v_rows = (uint8_t *)s->v_resid[layer] +
			  (size_t)i * s->v_stride * row_bytes(rt);
	int err = 0;

	if (blocks) {
		err = CK(cudaMemcpyAsync(cs->list, pages,
					 sizeof(int32_t) * blocks,
					 cudaMemcpyHostToDevice, cs->step));
		memset(&seal, 0, sizeof(seal));
		seal.shape = rt->cfg.shape;
		seal.in_dtype = rt->cfg.kv_dtype;
		seal.keys = k;
		seal.values = v;
		seal.block_stride = (int64_t)R * D;
		seal.token_stride = D;
		seal.head_stride = (int64_t)n * D;
		seal.blocks = blocks;
		seal.images = rt->pool.base;
		seal.image_stride = rt->page_stride;
		seal.dst = cs->list;
		seal.status = cs->status;
		seal.stream = cs->step;
		if (!err)
			err = kvs_cuda_seal_blocks(&seal);
		if (!err)
			err = CK(cudaMemcpyAsync(
				s->table[layer] + (size_t)i * rt->max_pages +
					first_page,
				pages, sizeof(int32_t) * blocks,
				cudaMemcpyHostToDevice, cs->step));
	}
	if (!err)
		err = copy_rows(rt, k_rows, s->k_stride, k, n, blocks * R,
				len->k_resid, cudaMemcpyDeviceToDevice,
				cs->step);
	if (!err)
		err = copy_rows(rt, v_rows, s->v_stride, v, n, n - len->v_resid,
				len->v_resid, cudaMemcpyDeviceToDevice,
				cs->step);
	if (!err)
		err = CK(cudaMemcpyAsync(&s->lens[layer][i], len, sizeof(*len),
					 cudaMemcpyHostToDevice, cs->step));
	return err;
}

static int cuda_token(struct kvs_rt *rt, const void *k, const void *v,
		      uint32_t n, uint32_t t, const void **k_row,
		      const void **v_row)
{
	struct cuda_state *cs = state(rt);
	int err;

	err = copy_rows(rt, cs->row_k, 1, k, n, t, 1, cudaMemcpyDeviceToDevice,
			cs->step);
	if (!err)
		err = copy_rows(rt, cs->row_v, 1, v, n, t, 1,
				cudaMemcpyDeviceToDevice, cs->step);
	*k_row = cs->row_k;
	*v_row = cs->row_v;
	return err;
}

/* Host rows of kv_dtype <-> fp32. */
static void widen(const struct kvs_rt *rt, const void *src, float *dst,
		  size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		dst[i] = kvs_dtype_load(rt->cfg.kv_dtype, src, i);
}

static int cuda_resid_read(struct kvs_rt *rt, struct rt_slots *s, uint32_t i,
			   uint32_t layer, float *k, uint32_t r_k, float *v,
			   uint32_t r_v)
{
	struct cuda_state *cs = state(rt);
	size_t per_row = (size_t)rt->cfg.shape.head_dim * esize(rt);
	size_t heads = rt->cfg.shape.kv_heads;
	struct rt_dev_len len;
	uint8_t *host;
	int err;

	host = malloc(per_row * heads * (r_k + r_v + 1));
	if (!host)
		return -ENOMEM;
	err = CK(cudaMemcpyAsync(&len, &s->lens[layer][i], sizeof(len),
				 cudaMemcpyDeviceToHost, cs->step));
	if (!err)
		err = CK(cudaStreamSynchronize(cs->step));
	if (!err && (len.k_resid != r_k || len.v_resid != r_v)) {
		kvs_log(KVS_LOG_ERR,
			"cuda engine: residual lengths %u/%u on "
			"the device, %u/%u expected",
			len.k_resid, len.v_resid, r_k, r_v);
		err = -KVS_EPARAM;
	}
	if (!err && r_k)
		err = CK(cudaMemcpy2D(host, r_k * per_row,
				      (uint8_t *)s->k_resid[layer] +
					      (size_t)i * s->k_stride *
						      row_bytes(rt),
				      s->k_stride * per_row, r_k * per_row,
				      heads, cudaMemcpyDeviceToHost));
	if (!err && r_v)
		err = CK(cudaMemcpy2D(
			host + heads * r_k * per_row, r_v * per_row,
			(uint8_t *)s->v_resid[layer] +
				(size_t)i * s->v_stride * row_bytes(rt) +
				len.v_start * per_row,
			s->v_stride * per_row, r_v * per_row, heads,
			cudaMemcpyDeviceToHost));
	if (!err) {
		size_t per = per_row / esize(rt);

		widen(rt, host, k, heads * r_k * per);
		widen(rt, host + heads * r_k * per_row, v, heads * r_v * per);
	}
	free(host);
	return err;
}

static int cuda_resid_write(struct kvs_rt *rt, struct rt_slots *s, uint32_t i,
			    uint32_t layer, const float *k, uint32_t r_k,
			    const float *v, uint32_t r_v)
{
	struct cuda_state *cs = state(rt);
	size_t per_row = (size_t)rt->cfg.shape.head_dim * esize(rt);
	size_t heads = rt->cfg.shape.kv_heads, per = rt->cfg.shape.head_dim;
	size_t e, nk = heads * r_k * per, nv = heads * r_v * per;
	uint8_t *host = malloc(esize(rt) * (nk + nv + 1));
	int err = 0;

	if (!host)
		return -ENOMEM;
	for (e = 0; e < nk; e++)
		kvs_dtype_store(rt->cfg.kv_dtype, host, e, k[e]);
	for (e = 0; e < nv; e++)
		kvs_dtype_store(rt->cfg.kv_dtype, host, nk + e, v[e]);
	if (r_k)
		err = CK(cudaMemcpy2DAsync((uint8_t *)s->k_resid[layer] +
						   (size_t)i * s->k_stride *
							   row_bytes(rt),
					   s->k_stride * per_row, host,
					   r_k * per_row, r_k * per_row, heads,
					   cudaMemcpyHostToDevice, cs->step));
	if (!err && r_v)
		err = CK(cudaMemcpy2DAsync(
			(uint8_t *)s->v_resid[layer] +
				(size_t)i * s->v_stride * row_bytes(rt),
			s->v_stride * per_row, host + nk * esize(rt),
			r_v * per_row, r_v * per_row, heads,
			cudaMemcpyHostToDevice, cs->step));
	/* pageable sources are staged when the calls return */
	free(host);
	return err;
}

/* Queues the gathered run of copies on the fetch stream. */
static int flush_run(struct cuda_state *cs)
{
	int err = 0;

	if (cs->run_len)
		err = CK(cudaMemcpyAsync(cs->run_dst, cs->run_src, cs->run_len,
					 cudaMemcpyHostToDevice, cs->fetch));
	cs->run_len = 0;
	return err;
}

static int cuda_page_write(struct kvs_rt *rt, int32_t page,
			   const struct kvs_view *view, const uint8_t *obj,
			   size_t len)
{
	struct cuda_state *cs = state(rt);
	uint8_t *dst = rt->pool.base + (size_t)page * rt->page_stride;
	bool canonical = len == rt->layout.total_size;
	int s, err;

	for (s = 0; s < KVS_BLOCK_SECTIONS && canonical; s++)
		canonical = view->hdr.section[s].codec == KVS_CODEC_RAW &&
			    view->hdr.section[s].offset == rt->layout.offset[s];
	/* an uncompressed canonical object is the page, header and all:
	 * one copy from the (pinned) staging buffer, joined to the run
	 * before it where it continues it */
	if (canonical) {
		if (cs->run_len && dst == cs->run_dst + cs->run_len &&
		    obj == cs->run_src + cs->run_len) {
			cs->run_len += len;
			return 0;
		}
		err = flush_run(cs);
		cs->run_dst = dst;
		cs->run_src = obj;
		cs->run_len = len;
		return err;
	}
	err = flush_run(cs);
	for (s = 0; s < KVS_BLOCK_SECTIONS && !err; s++)
		err = CK(cudaMemcpyAsync(dst + rt->layout.offset[s],
					 view->section[s], rt->layout.length[s],
					 cudaMemcpyHostToDevice, cs->fetch));
	return err;
}

static int cuda_page_read(struct kvs_rt *rt, int32_t page, uint8_t *image)
{
	struct cuda_state *cs = state(rt);
	const uint8_t *src = rt->pool.base + (size_t)page * rt->page_stride;
	int s, err = 0;

	for (s = 0; s < KVS_BLOCK_SECTIONS && !err; s++)
		err = CK(cudaMemcpyAsync(image + rt->layout.offset[s],
					 src + rt->layout.offset[s],
					 rt->layout.length[s],
					 cudaMemcpyDeviceToHost, cs->publish));
	if (!err)
		err = CK(cudaStreamSynchronize(cs->publish));
	return err;
}

static int cuda_history(struct kvs_rt *rt, const int32_t *pages, uint32_t n,
			enum kvs_dtype dtype, void *k, void *v)
{
	struct cuda_state *cs = state(rt);
	int err;

	err = CK(cudaMemcpyAsync(cs->list, pages, sizeof(int32_t) * n,
				 cudaMemcpyHostToDevice, cs->step));
	if (!err)
		err = kvs_cuda_dequantize(&rt->cfg.shape, rt->pool.base,
					  rt->page_stride, cs->list, n, dtype,
					  k, v, cs->step);
	return err;
}

static int cuda_mark(struct kvs_rt *rt, bool copy, void **out)
{
	struct cuda_state *cs = state(rt);
	cudaEvent_t ev;
	int err;

	/* a mark of the copies covers every copy queued before it */
	err = copy ? flush_run(cs) : 0;
	if (err)
		return err;
	err = CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
	if (err)
		return err;
	err = CK(cudaEventRecord(ev, copy ? cs->fetch : cs->step));
	if (err) {
		cudaEventDestroy(ev);
		return err;
	}
	*out = ev;
	return 0;
}

static int cuda_mark_wait(struct kvs_rt *rt, void *mark)
{
	(void)rt;
	return mark ? CK(cudaEventSynchronize((cudaEvent_t)mark)) : 0;
}

static int cuda_mark_join(struct kvs_rt *rt, void *mark)
{
	return mark ? CK(cudaStreamWaitEvent(state(rt)->step, (cudaEvent_t)mark,
					     0))
		    : 0;
}

static void cuda_mark_free(struct kvs_rt *rt, void *mark)
{
	(void)rt;
	if (mark)
		cudaEventDestroy((cudaEvent_t)mark);
}

static int cuda_sync(struct kvs_rt *rt)
{
	struct cuda_state *cs = state(rt);

	return kvs_cuda_status_check(cs->status, cs->step);
}

static void *cuda_host_alloc(struct kvs_rt *rt, size_t n)
{
	void *p = NULL;

	(void)rt;
	if (CK(cudaHostAlloc(&p, n ? n : 1, cudaHostAllocDefault)))
		return NULL;
	return p;
}

static void cuda_host_free(struct kvs_rt *rt, void *p)
{
	(void)rt;
	if (p)
		cudaFreeHost(p);
}

static void cuda_thread_init(struct kvs_rt *rt)
{
	(void)CK(cudaSetDevice(state(rt)->device));
}

static const struct rt_engine_ops cuda_engine = {
	.name = "cuda",
	.device = KVS_RT_CUDA,
	.init = cuda_init,
	.fini = cuda_fini,
	.slots_init = cuda_slots_init,
	.slots_fini = cuda_slots_fini,
	.slot_copy = cuda_slot_copy,
	.slot_set = cuda_slot_set,
	.check = cuda_check,
	.append = cuda_append,
	.attend = cuda_attend,
	.seal = cuda_seal,
	.pop = cuda_pop,
	.prefill = cuda_prefill,
	.token = cuda_token,
	.resid_read = cuda_resid_read,
	.resid_write = cuda_resid_write,
	.page_write = cuda_page_write,
	.page_read = cuda_page_read,
	.history = cuda_history,
	.mark = cuda_mark,
	.mark_wait = cuda_mark_wait,
	.mark_join = cuda_mark_join,
	.mark_free = cuda_mark_free,
	.sync = cuda_sync,
	.host_alloc = cuda_host_alloc,
	.host_free = cuda_host_free,
	.thread_init = cuda_thread_init,
};

const struct rt_engine_ops *rt_engine_cuda(void)
{
	return kvs_cuda_available() == 0 ? &cuda_engine : NULL;
}

#else

const struct rt_engine_ops *rt_engine_cuda(void)
{
	return NULL;
}

#endif
