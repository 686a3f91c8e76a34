/*
 * rt.c - the runtime object: config checks, the model fingerprint and
 * span ids, the page pool, the two worker threads (publish and fetch)
 * and the counters.
 *
 * The pool is one array of pages of page_stride bytes in the engine's
 * memory, each an uncompressed block image of one layer; a free list and
 * a reference count per page (a sequence's page table holds one, a
 * publish in flight another) decide when a page is free again.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kvstash/log.h"
#include "runtime_internal.h"

void kvs_rt_config_default(struct kvs_rt_config *cfg, uint32_t layers,
			   uint32_t q_heads, uint16_t kv_heads,
			   uint16_t head_dim)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->layers = layers;
	cfg->q_heads = q_heads;
	kvs_shape_default(&cfg->shape, kv_heads, head_dim);
	cfg->kv_dtype = KVS_DTYPE_F16;
	cfg->order = KVS_ORDER_KIVI;
	cfg->device = KVS_RT_AUTO;
	cfg->max_tokens = 4096;
	cfg->pool_pages = 1024;
}

static int check_config(const struct kvs_rt_config *cfg)
{
	const struct kvs_shape *s = &cfg->shape;
	int err = kvs_shape_check(s);

	if (err)
		return err;
	if (s->span != s->residual) {
		kvs_log(KVS_LOG_ERR,
			"runtime: span %u must equal the residual length %u",
			s->span, s->residual);
		return -KVS_EPARAM;
	}
	if (cfg->layers == 0 || cfg->q_heads == 0 ||
	    cfg->q_heads % s->kv_heads != 0) {
		kvs_log(KVS_LOG_ERR,
			"runtime: need layers > 0 and q_heads a positive "
			"multiple of kv_heads %u (layers %u, q_heads %u)",
			s->kv_heads, cfg->layers, cfg->q_heads);
		return -KVS_EPARAM;
	}
	if (cfg->kv_dtype != KVS_DTYPE_F32 && cfg->kv_dtype != KVS_DTYPE_F16 &&
	    cfg->kv_dtype != KVS_DTYPE_BF16) {
		kvs_log(KVS_LOG_ERR, "runtime: kv_dtype must be f32, f16 or "
				     "bf16");
		return -KVS_EPARAM;
	}
	if (cfg->out_dtype != 0 && kvs_dtype_size(cfg->out_dtype) == 0) {
		kvs_log(KVS_LOG_ERR, "runtime: unknown out_dtype %d",
			(int)cfg->out_dtype);
		return -KVS_EPARAM;
	}
	if (cfg->order != KVS_ORDER_KIVI && cfg->order != KVS_ORDER_PAPER) {
		kvs_log(KVS_LOG_ERR, "runtime: unknown order %d",
			(int)cfg->order);
		return -KVS_EPARAM;
	}
	if (cfg->max_tokens == 0 || cfg->max_tokens > (1u << 30) ||
	    cfg->pool_pages == 0 || cfg->pool_pages > (1u << 30)) {
		kvs_log(KVS_LOG_ERR,
			"runtime: max_tokens %u and pool_pages %u "
			"must be in 1 .. 2^30",
			cfg->max_tokens, cfg->pool_pages);
		return -KVS_EPARAM;
	}
	if (cfg->scale < 0 || !isfinite(cfg->scale)) {
		kvs_log(KVS_LOG_ERR, "runtime: bad scale");
		return -KVS_EPARAM;
	}
	return 0;
}

static const struct rt_engine_ops *pick_engine(enum kvs_rt_device device,
					       enum kvs_dtype kv_dtype)
{
	const struct rt_engine_ops *cuda = rt_engine_cuda();

	switch (device) {
	case KVS_RT_CPU:
		return &rt_engine_cpu;
	case KVS_RT_CUDA:
		if (!cuda)
			kvs_log(KVS_LOG_ERR, "runtime: CUDA asked for, but not "
					     "built or no usable device");
		return cuda;
	default:
		/* the device kernels keep 16-bit residuals */
		return cuda && kv_dtype != KVS_DTYPE_F32 ? cuda
							 : &rt_engine_cpu;
	}
}

static int pool_init(struct kvs_rt *rt)
{
	struct rt_pool *p = &rt->pool;
	uint32_t i;

	p->pages = rt->cfg.pool_pages;
	p->free_list = malloc(sizeof(*p->free_list) * p->pages);
	p->refs = calloc(p->pages, sizeof(*p->refs));
	if (!p->free_list || !p->refs) {
		free(p->free_list);
		free(p->refs);
		kvs_log(KVS_LOG_ERR, "runtime: out of memory for the pool");
		return -ENOMEM;
	}
	/* lowest pages first out */
	for (i = 0; i < p->pages; i++)
		p->free_list[i] = (int32_t)(p->pages - 1 - i);
	p->free_count = p->pages;
	pthread_mutex_init(&p->lock, NULL);
	return 0;
}

static void pool_fini(struct kvs_rt *rt)
{
	pthread_mutex_destroy(&rt->pool.lock);
	free(rt->pool.free_list);
	free(rt->pool.refs);
}

int rt_pool_take(struct kvs_rt *rt, uint32_t n, int32_t *out)
{
	struct rt_pool *p = &rt->pool;
	uint32_t i;

	pthread_mutex_lock(&p->lock);
	if (p->free_count < n) {
		uint32_t left = p->free_count;

		pthread_mutex_unlock(&p->lock);
		kvs_log(KVS_LOG_ERR,
			"runtime: page pool exhausted (%u pages asked, %u of "
			"%u free)",
			n, left, p->pages);
		return -ENOSPC;
	}
	for (i = 0; i < n; i++) {
		out[i] = p->free_list[--p->free_count];
		p->refs[out[i]] = 1;
	}
	pthread_mutex_unlock(&p->lock);
	return 0;
}

int rt_pool_take_array(struct kvs_rt *rt, uint32_t n, int32_t **out)
{
	int32_t *pages;
	int err;

	*out = NULL;
	if (n == 0)
		return 0;
	pages = malloc(sizeof(*pages) * n);
	if (!pages) {
		kvs_log(KVS_LOG_ERR, "runtime: out of memory for %u pages", n);
		return -ENOMEM;
	}
	err = rt_pool_take(rt, n, pages);
	if (err) {
		free(pages);
		return err;
	}
	*out = pages;
	return 0;
}

void rt_pool_ref(struct kvs_rt *rt, int32_t page)
{
	pthread_mutex_lock(&rt->pool.lock);
	rt->pool.refs[page]++;
	pthread_mutex_unlock(&rt->pool.lock);
}

void rt_pool_put(struct kvs_rt *rt, int32_t page)
{
	struct rt_pool *p = &rt->pool;

	if (page < 0)
		return;
	pthread_mutex_lock(&p->lock);
	if (--p->refs[page] == 0)
		p->free_list[p->free_count++] = page;
	pthread_mutex_unlock(&p->lock);
}

/* ---- worker threads ------------------------------------------------------ */

static void *worker_main(void *arg)
{
	struct rt_worker *w = arg;
	struct kvs_rt *rt = w->rt;
	struct rt_job *job;

	rt->eng->thread_init(rt);
	pthread_mutex_lock(&w->lock);
	for (;;) {
		while (!w->head && !w->stop)
			pthread_cond_wait(&w->wake, &w->lock);
		if (!w->head)
			break;
		job = w->head;
		w->head = job->next;
		if (!w->head)
			w->tail = NULL;
		w->busy = true;
		pthread_mutex_unlock(&w->lock);
		job->run(rt, job);
		pthread_mutex_lock(&w->lock);
		w->busy = false;
		if (!w->head)
			pthread_cond_broadcast(&w->idle);
	}
	pthread_mutex_unlock(&w->lock);
	return NULL;
}

static int worker_start(struct kvs_rt *rt, struct rt_worker *w,
			const char *name)
{
	int err;

	w->name = name;
	w->rt = rt;
	pthread_mutex_init(&w->lock, NULL);
	pthread_cond_init(&w->wake, NULL);
	pthread_cond_init(&w->idle, NULL);
	err = pthread_create(&w->thread, NULL, worker_main, w);
	w->started = err == 0;
	if (err) {
		kvs_log(KVS_LOG_ERR, "runtime: cannot start the %s thread: %s",
			name, strerror(err));
		pthread_cond_destroy(&w->idle);
		pthread_cond_destroy(&w->wake);
		pthread_mutex_destroy(&w->lock);
		return -err;
	}
	return 0;
}

static void worker_stop(struct rt_worker *w)
{
	if (!w->started)
		return;
	pthread_mutex_lock(&w->lock);
	w->stop = true;
	pthread_cond_broadcast(&w->wake);
	pthread_mutex_unlock(&w->lock);
	pthread_join(w->thread, NULL);
	pthread_cond_destroy(&w->idle);
	pthread_cond_destroy(&w->wake);
	pthread_mutex_destroy(&w->lock);
	w->started = false;
}

void rt_worker_queue(struct kvs_rt *rt, struct rt_worker *w, struct rt_job *job)
{
	(void)rt;
	job->next = NULL;
	pthread_mutex_lock(&w->lock);
	if (w->tail)
		w->tail->next = job;
	else
		w->head = job;
	w->tail = job;
	pthread_cond_signal(&w->wake);
	pthread_mutex_unlock(&w->lock);
}

void rt_worker_drain(struct rt_worker *w)
{
	pthread_mutex_lock(&w->lock);
	while (w->head || w->busy)
		pthread_cond_wait(&w->idle, &w->lock);
	pthread_mutex_unlock(&w->lock);
}

/* ---- create / destroy ---------------------------------------------------- */

static int fingerprint(struct kvs_rt *rt)
{
	struct kvs_model_desc desc;

	memset(&desc, 0, sizeof(desc));
	desc.model_id = rt->model_id;
	desc.layers = rt->cfg.layers;
	desc.kv_dtype = rt->cfg.kv_dtype;
	desc.shape = rt->cfg.shape;
	desc.layout = KVS_LAYOUT_TOKEN_MAJOR;
	return kvs_model_fingerprint(&desc, rt->model_fp);
}

int kvs_rt_create(const struct kvs_rt_config *cfg, struct kvs_rt **out)
{
	struct kvs_rt *rt;
	int err;

	if (!cfg || !out) {
		kvs_log(KVS_LOG_ERR, "runtime: no config or output");
		return -KVS_EPARAM;
	}
	err = check_config(cfg);
	if (err)
		return err;
	err = -ENOMEM;
	rt = calloc(1, sizeof(*rt));
	if (!rt)
		goto fail_rt;
	rt->cfg = *cfg;
	rt->model_id = strdup(cfg->model_id ? cfg->model_id : "");
	rt->name_space = strdup(cfg->name_space ? cfg->name_space : "");
	if (!rt->model_id || !rt->name_space)
		goto fail_strings;
	rt->cfg.model_id = rt->model_id;
	rt->cfg.name_space = rt->name_space;
	if (!rt->cfg.out_dtype)
		rt->cfg.out_dtype = cfg->kv_dtype;
	if (rt->cfg.scale == 0.0f)
		rt->cfg.scale = 1.0f / sqrtf((float)cfg->shape.head_dim);
	rt->cfg.store = NULL;
	err = fingerprint(rt);
	if (err)
		goto fail_strings;
	err = kvs_block_layout(&cfg->shape, &rt->layout);
	if (err)
		goto fail_strings;
	rt->page_stride = ((uint64_t)rt->layout.total_size + 255) / 256 * 256;
	rt->max_pages =
		(cfg->max_tokens + cfg->shape.span - 1) / cfg->shape.span;
	rt->eng = pick_engine(cfg->device, cfg->kv_dtype);
	if (!rt->eng) {
		err = -KVS_ENODEV;
		goto fail_strings;
	}
	if (rt->eng->device == KVS_RT_CUDA && cfg->kv_dtype == KVS_DTYPE_F32) {
		kvs_log(KVS_LOG_ERR, "runtime: the CUDA device keeps f16 or "
				     "bf16 residuals, not f32");
		err = -KVS_EPARAM;
		goto fail_strings;
	}
	err = -ENOMEM;
	rt->published = rt_key_set_create();
	if (!rt->published)
		goto fail_keys;
	err = pool_init(rt);
	if (err)
		goto fail_pool;
	err = rt->eng->init(rt);
	if (err)
		goto fail_engine;
	pthread_mutex_init(&rt->lock, NULL);
	rt->stats.pages_total = rt->pool.pages;
	if (cfg->store)
		rt->store = kvs_blockstore_ref(cfg->store);
	err = worker_start(rt, &rt->publisher, "publish");
	if (err)
		goto fail_publisher;
	err = worker_start(rt, &rt->fetcher, "fetch");
	if (err)
		goto fail_fetcher;
	*out = rt;
	return 0;

fail_fetcher:
	worker_stop(&rt->publisher);
fail_publisher:
	kvs_blockstore_release(rt->store);
	pthread_mutex_destroy(&rt->lock);
	rt->eng->fini(rt);
fail_engine:
	pool_fini(rt);
fail_pool:
	rt_key_set_destroy(rt->published);
fail_keys:
fail_strings:
	free(rt->model_id);
	free(rt->name_space);
	free(rt);
fail_rt:
	if (err == -ENOMEM)
		kvs_log(KVS_LOG_ERR, "runtime: out of memory");
	return err;
}

void kvs_rt_destroy(struct kvs_rt *rt)
{
	if (!rt)
		return;
	while (rt->batches)
		kvs_batch_destroy(rt->batches);
	rt_worker_drain(&rt->fetcher);
	rt_worker_drain(&rt->publisher);
	worker_stop(&rt->fetcher);
	worker_stop(&rt->publisher);
	rt->eng->host_free(rt, rt->staging[0]);
	rt->eng->host_free(rt, rt->staging[1]);
	kvs_blockstore_release(rt->store);
	rt->eng->fini(rt);
	pool_fini(rt);
	pthread_mutex_destroy(&rt->lock);
	rt_key_set_destroy(rt->published);
	free(rt->model_id);
	free(rt->name_space);
	free(rt);
}

enum kvs_rt_device kvs_rt_device(const struct kvs_rt *rt)
{
	return rt->eng->device;
}

const uint8_t *kvs_rt_model_fp(const struct kvs_rt *rt)
{
	return rt->model_fp;
}

int kvs_rt_sync(struct kvs_rt *rt)
{
	return rt->eng->sync(rt);
}

int kvs_rt_flush(struct kvs_rt *rt)
{
	int err;

	rt_worker_drain(&rt->publisher);
	pthread_mutex_lock(&rt->lock);
	err = rt->publish_error;
	rt->publish_error = 0;
	pthread_mutex_unlock(&rt->lock);
	return err;
}

void rt_count(struct kvs_rt *rt, uint64_t *counter, uint64_t n)
{
	pthread_mutex_lock(&rt->lock);
	*counter += n;
	pthread_mutex_unlock(&rt->lock);
}

void kvs_rt_stats(struct kvs_rt *rt, struct kvs_rt_stats *out)
{
	pthread_mutex_lock(&rt->lock);
	*out = rt->stats;
	pthread_mutex_unlock(&rt->lock);
	pthread_mutex_lock(&rt->pool.lock);
	out->pages_free = rt->pool.free_count;
	pthread_mutex_unlock(&rt->pool.lock);
}

/* ---- ids ------------------------------------------------------------------
 */

int rt_span_ids(const struct kvs_rt *rt, const uint32_t *ids, uint32_t spans,
		uint8_t (*out)[KVS_ID_SIZE])
{
	uint32_t S = rt->cfg.shape.span, i;
	int err;

	for (i = 0; i < spans; i++) {
		err = kvs_span_id(rt->name_space, rt->model_fp,
				  i ? out[i - 1] : NULL, ids + (size_t)i * S, S,
				  out[i]);
		if (err)
			return err;
	}
	return 0;
}

int kvs_rt_tail_key(const struct kvs_rt *rt,
		    const uint8_t request_id[KVS_ID_SIZE], uint32_t layer,
		    uint8_t key[KVS_ID_SIZE])
{
	return kvs_span_id("kvstash.tail", rt->model_fp, request_id, &layer, 1,
			   key);
}

int kvs_rt_lookup_prefix(struct kvs_rt *rt, const uint32_t *ids, size_t n,
			 uint32_t *tokens)
{
	uint8_t(*span_ids)[KVS_ID_SIZE];
	uint32_t *layers, spans, l;
	size_t prefix = 0;
	int err;

	if (!rt || (!ids && n) || !tokens)
		return -KVS_EPARAM;
	spans = (uint32_t)((n < rt->cfg.max_tokens ? n : rt->cfg.max_tokens) /
			   rt->cfg.shape.span);
	if (!rt->store || spans == 0) {
		*tokens = 0;
		return 0;
	}
	span_ids = malloc(sizeof(*span_ids) * spans);
	layers = malloc(sizeof(*layers) * rt->cfg.layers);
	err = -ENOMEM;
	if (!span_ids || !layers)
		goto out;
	for (l = 0; l < rt->cfg.layers; l++)
		layers[l] = l;
	err = rt_span_ids(rt, ids, spans, span_ids);
	if (err)
		goto out;
	err = kvs_blockstore_lookup(rt->store,
				    (const uint8_t(*)[KVS_ID_SIZE])span_ids,
				    spans, layers, rt->cfg.layers, &prefix);
	if (!err)
		*tokens = (uint32_t)(prefix * rt->cfg.shape.span);
out:
	free(span_ids);
	free(layers);
	return err;
}
