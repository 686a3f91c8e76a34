/*
 * attach.c - attaching a cached prefix: the longest run of the prompt's
 * spans the block store holds for every layer is fetched into pages of
 * the pool, layer by layer on the fetch thread, so that the engine works
 * on layer l while layer l + 1 is in flight.
 *
 * The caller's thread takes the pages and records them in the sequence's
 * page tables at once.  Two threads fetch: a getter takes each layer's
 * blocks from the block store into host staging (two sets, alternating,
 * kept from one attach to the next), and the fetch thread checks the
 * layer before it (kvs_object_open: every format check, the checksums
 * only where the store did not verify them already; then that it is the
 * block asked for: kind, shape, model, layer, span id, parent, position)
 * and copies it into its pages, so a layer's gets overlap the checks and
 * copies of the one before; a staging set is filled again only once the
 * copies out of it are over.  A layer is "done" with the count of
 * leading spans that arrived intact.  The lengths of a layer change only
 * when the caller installs it (kvs_seq_attach_wait / _finish, or the
 * first prefill or step of the layer), after its copies are ordered
 * before the step stream.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "kvstash/log.h"
#include "runtime_internal.h"

struct rt_attach {
	struct rt_job job;
	uint32_t spans, layers;
	uint8_t (*span_ids)[KVS_ID_SIZE]; /* [spans] */
	int32_t *pages; /* [layers][spans] */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	uint32_t done; /* layers the fetch thread finished */
	bool finished, cancel;
	uint32_t *ok; /* [layers] leading spans intact */
	void **marks; /* [layers] end of the layer's copies */
	uint32_t installed; /* layers installed */
};

static void attach_free(struct kvs_rt *rt, struct rt_attach *a)
{
	uint32_t l;

	for (l = 0; l < a->layers; l++)
		if (a->marks[l])
			rt->eng->mark_free(rt, a->marks[l]);
	pthread_cond_destroy(&a->cond);
	pthread_mutex_destroy(&a->lock);
	free(a->marks);
	free(a->ok);
	free(a->pages);
	free(a->span_ids);
	free(a);
}

/* 0 if @view is block @index of @layer of this prefix. */
static int check_block(const struct kvs_rt *rt, const struct rt_attach *a,
		       const struct kvs_view *view, uint32_t layer,
		       uint32_t index)
{
	static const uint8_t none[KVS_ID_SIZE];
	const struct kvs_ident *id = &view->hdr.ident;
	const struct kvs_shape *s = &view->hdr.shape, *want = &rt->cfg.shape;
	const uint8_t *parent = index ? a->span_ids[index - 1] : none;

	if (view->hdr.kind != KVS_KIND_BLOCK || s->kv_heads != want->kv_heads ||
	    s->head_dim != want->head_dim || s->group != want->group ||
	    s->bits != want->bits || s->meta_type != want->meta_type ||
	    s->span != want->span || s->residual != want->residual ||
	    id->layer != layer ||
	    id->first_pos != (uint64_t)index * want->span ||
	    memcmp(id->block_id, a->span_ids[index], KVS_ID_SIZE) != 0 ||
	    memcmp(id->parent_id, parent, KVS_ID_SIZE) != 0 ||
	    memcmp(id->model_fp, rt->model_fp, KVS_ID_SIZE) != 0) {
		kvs_log(KVS_LOG_WARN,
			"attach: block %u of layer %u is not the block asked "
			"for (kind, shape, model, layer, id or position)",
			index, layer);
		return -KVS_ECORRUPT;
	}
	return 0;
}

/* One staging set: a layer's blocks and the arguments of their get. */
struct fetch_set {
	uint8_t *staging;
	struct kvs_store_key *keys;
	void **bufs;
	size_t *caps, *lens;
	int *results;
	int err; /* of the get as a whole */
};

/* The two threads of an attach's fetch: the getter takes layer l + 1's
 * blocks into one staging set while the fetch thread checks layer l's in
 * the other and copies them into their pages. */
struct fetch {
	struct kvs_rt *rt;
	struct rt_attach *a;
	struct fetch_set set[2];
	pthread_mutex_t lock;
	pthread_cond_t cond;
	uint32_t got; /* layers whose gets are over */
	uint32_t marked; /* layers whose copies are queued (marks[l] set) */
	bool stop;
};

/* The getter's part: layer @layer's blocks into @fs. */
static void fetch_get(struct fetch *f, struct fetch_set *fs, uint32_t layer)
{
	struct rt_attach *a = f->a;
	size_t cap = f->rt->layout.total_size;

	for (uint32_t i = 0; i < a->spans; i++) {
		memcpy(fs->keys[i].span_id, a->span_ids[i], KVS_ID_SIZE);
		fs->keys[i].layer = layer;
		fs->bufs[i] = fs->staging + i * cap;
		fs->caps[i] = cap;
		fs->lens[i] = 0;
		fs->results[i] = -KVS_ENOTFOUND;
	}
	fs->err = kvs_blockstore_get(f->rt->store, fs->keys, a->spans, fs->bufs,
				     fs->caps, fs->lens, fs->results);
}

/* The fetch thread's part: checks layer @layer's blocks in @fs and
 * copies them into their pages; returns the leading spans that are in
 * their pages now. */
static uint32_t fetch_install(struct kvs_rt *rt, struct rt_attach *a,
			      struct fetch_set *fs, uint32_t layer)
{
	unsigned verify = kvs_blockstore_ops(rt->store)->verified
				  ? KVS_VERIFY_NO_CHECKSUMS
				  : 0;
	uint32_t i, ok = 0, missed = 0, corrupt = 0;
	struct kvs_view view;
	int err;

	if (fs->err) {
		kvs_log(KVS_LOG_WARN, "attach: get of layer %u failed: %s",
			layer, kvs_strerror(fs->err));
		rt_count(rt, &rt->stats.fetch_missed, a->spans);
		return 0;
	}
	for (i = 0; i < a->spans; i++) {
		if (fs->results[i]) {
			/* a later span is of no use without this one */
			missed = 1;
			kvs_log(KVS_LOG_WARN,
				"attach: block %u of layer %u lost since the "
				"lookup: %s",
				i, layer, kvs_strerror(fs->results[i]));
			break;
		}
		err = kvs_object_open(fs->bufs[i], fs->lens[i], verify, &view);
		if (err) {
			corrupt = 1;
			kvs_log(KVS_LOG_WARN,
				"attach: block %u of layer %u failed the %s "
				"check, dropped",
				i, layer, kvs_check_name(err));
			break;
		}
		err = check_block(rt, a, &view, layer, i);
		if (!err)
			err = rt->eng->page_write(
				rt, a->pages[(size_t)layer * a->spans + i],
				&view, fs->bufs[i], fs->lens[i]);
		kvs_view_release(&view);
		if (err) {
			corrupt = err == -KVS_ECORRUPT;
			break;
		}
		ok++;
	}
	if (missed)
		rt_count(rt, &rt->stats.fetch_missed, 1);
	if (corrupt)
		rt_count(rt, &rt->stats.fetch_corrupt, 1);
	rt_count(rt, &rt->stats.attached, ok);
	return ok;
}

/* The fetch thread's two staging sets, of at least @bytes each: kept by
 * the runtime from one attach to the next (page-locked memory is slow
 * to get), grown when a longer prefix needs more. */
static int rt_fetch_staging(struct kvs_rt *rt, size_t bytes, uint8_t *out[2])
{
	if (rt->staging_cap < bytes) {
		for (int i = 0; i < 2; i++) {
			rt->eng->host_free(rt, rt->staging[i]);
			rt->staging[i] = NULL;
		}
		rt->staging_cap = 0;
		for (int i = 0; i < 2; i++) {
			rt->staging[i] = rt->eng->host_alloc(rt, bytes);
			if (!rt->staging[i])
				return -ENOMEM;
		}
		rt->staging_cap = bytes;
	}
	out[0] = rt->staging[0];
	out[1] = rt->staging[1];
	return 0;
}

/* The getter thread: layer l's gets start once the copies out of its
 * staging set (layer l - 2's) are over. */
static void *getter_run(void *arg)
{
	struct fetch *f = arg;
	struct rt_attach *a = f->a;

	for (uint32_t l = 0; l < a->layers; l++) {
		bool stop;

		pthread_mutex_lock(&f->lock);
		while (!f->stop && l >= 2 && f->marked < l - 1)
			pthread_cond_wait(&f->cond, &f->lock);
		stop = f->stop;
		pthread_mutex_unlock(&f->lock);
		if (!stop && l >= 2 && a->marks[l - 2] &&
		    f->rt->eng->mark_wait(f->rt, a->marks[l - 2]))
			stop = true;
		if (!stop) {
			uint64_t t0 = kvs_now_ns();

			fetch_get(f, &f->set[l % 2], l);
			rt_count(f->rt, &f->rt->stats.fetch_get_us,
				 (kvs_now_ns() - t0) / 1000);
		}
		/* a stop, the fetch thread's or a failed wait here, stops both:
		 * the sets hold nothing more to install */
		pthread_mutex_lock(&f->lock);
		if (stop)
			f->stop = true;
		else
			f->got = l + 1;
		pthread_cond_broadcast(&f->cond);
		pthread_mutex_unlock(&f->lock);
		if (stop)
			break;
	}
	return NULL;
}

static int fetch_init(struct fetch *f, struct kvs_rt *rt, struct rt_attach *a)
{
	size_t n = a->spans, cap = rt->layout.total_size;
	uint8_t *staging[2] = { NULL, NULL };
	int err = rt_fetch_staging(rt, cap * n, staging);

	f->rt = rt;
	f->a = a;
	pthread_mutex_init(&f->lock, NULL);
	pthread_cond_init(&f->cond, NULL);
	for (int i = 0; i < 2; i++) {
		struct fetch_set *fs = &f->set[i];

		fs->staging = staging[i];
		fs->keys = malloc(sizeof(*fs->keys) * n);
		fs->bufs = malloc(sizeof(*fs->bufs) * n);
		fs->caps = malloc(sizeof(*fs->caps) * n);
		fs->lens = malloc(sizeof(*fs->lens) * n);
		fs->results = malloc(sizeof(*fs->results) * n);
		if (!fs->keys || !fs->bufs || !fs->caps || !fs->lens ||
		    !fs->results)
			err = -ENOMEM;
	}
	return err;
}

static void fetch_fini(struct fetch *f)
{
	for (int i = 0; i < 2; i++) {
		struct fetch_set *fs = &f->set[i];

		free(fs->keys);
		free(fs->bufs);
		free(fs->caps);
		free(fs->lens);
		free(fs->results);
	}
	pthread_cond_destroy(&f->cond);
	pthread_mutex_destroy(&f->lock);
}

static void fetch_run(struct kvs_rt *rt, struct rt_job *job)
{
	struct rt_attach *a = (struct rt_attach *)job;
	struct fetch f = { 0 };
	pthread_t getter;
	bool cancel, started = false;
	uint32_t l, ok;

	cancel = fetch_init(&f, rt, a) != 0;
	if (cancel)
		kvs_log(KVS_LOG_ERR, "attach: out of memory for %u spans",
			a->spans);
	else if (pthread_create(&getter, NULL, getter_run, &f) != 0)
		cancel = true;
	else
		started = true;
	for (l = 0; l < a->layers; l++) {
		pthread_mutex_lock(&a->lock);
		cancel = cancel || a->cancel;
		pthread_mutex_unlock(&a->lock);
		ok = 0;
		pthread_mutex_lock(&f.lock);
		if (cancel)
			f.stop = true;
		while (started && !f.stop && f.got <= l)
			pthread_cond_wait(&f.cond, &f.lock);
		cancel = cancel || f.stop;
		pthread_mutex_unlock(&f.lock);
		if (!cancel) {
			uint64_t t0 = kvs_now_ns();

			ok = fetch_install(rt, a, &f.set[l % 2], l);
			rt_count(rt, &rt->stats.fetch_copy_us,
				 (kvs_now_ns() - t0) / 1000);
		}
		if (rt->eng->mark(rt, true, &a->marks[l]))
			ok = 0;
		pthread_mutex_lock(&f.lock);
		f.marked = l + 1;
		pthread_cond_broadcast(&f.cond);
		pthread_mutex_unlock(&f.lock);
		pthread_mutex_lock(&a->lock);
		a->ok[l] = ok;
		a->done = l + 1;
		pthread_cond_broadcast(&a->cond);
		pthread_mutex_unlock(&a->lock);
	}
	if (started) {
		pthread_mutex_lock(&f.lock);
		f.stop = true;
		pthread_cond_broadcast(&f.cond);
		pthread_mutex_unlock(&f.lock);
		pthread_join(getter, NULL);
	}
	/* the staging memory is used again only once its copies are over */
	for (l = a->layers > 2 ? a->layers - 2 : 0; l < a->layers; l++)
		if (a->marks[l])
			rt->eng->mark_wait(rt, a->marks[l]);
	fetch_fini(&f);
	pthread_mutex_lock(&a->lock);
	a->finished = true;
	pthread_cond_broadcast(&a->cond);
	pthread_mutex_unlock(&a->lock);
}

static int cmp_page(const void *x, const void *y)
{
	int32_t a = *(const int32_t *)x, b = *(const int32_t *)y;

	return (a > b) - (a < b);
}

int rt_attach_start(struct kvs_seq *seq, uint32_t spans)
{
	struct kvs_rt *rt = seq->batch->rt;
	uint32_t L = rt->cfg.layers, l, i;
	struct rt_attach *a;
	int err = -ENOMEM;

	a = calloc(1, sizeof(*a));
	if (!a)
		goto fail;
	a->spans = spans;
	a->layers = L;
	a->span_ids = malloc(sizeof(*a->span_ids) * spans);
	a->pages = malloc(sizeof(*a->pages) * spans * L);
	a->ok = calloc(L, sizeof(*a->ok));
	a->marks = calloc(L, sizeof(*a->marks));
	pthread_mutex_init(&a->lock, NULL);
	pthread_cond_init(&a->cond, NULL);
	if (!a->span_ids || !a->pages || !a->ok || !a->marks)
		goto fail_attach;
	if (rt_seq_span_ids(seq) < spans) {
		err = -KVS_EPARAM;
		goto fail_attach;
	}
	memcpy(a->span_ids, seq->span_ids, sizeof(*a->span_ids) * spans);
	err = rt_pool_take(rt, spans * L, a->pages);
	if (err)
		goto fail_attach;
	/* in ascending order, a layer's blocks land in pages that follow
	 * each other where the pool allows it, and the engine copies such a
	 * run at once (the free list hands out pages in the order they were
	 * given back) */
	qsort(a->pages, (size_t)spans * L, sizeof(*a->pages), cmp_page);
	for (l = 0; l < L; l++) {
		struct rt_layer *ly = &seq->layer[l];

		for (i = 0; i < spans; i++) {
			ly->pages[i] = a->pages[(size_t)l * spans + i];
			ly->origin[i] = RT_PAGE_STORE;
		}
	}
	a->job.run = fetch_run;
	seq->attach = a;
	rt_worker_queue(rt, &rt->fetcher, &a->job);
	return 0;

fail_attach:
	attach_free(rt, a);
fail:
	if (err == -ENOMEM)
		kvs_log(KVS_LOG_ERR, "attach: out of memory");
	return err;
}

static void wait_finished(struct rt_attach *a)
{
	pthread_mutex_lock(&a->lock);
	while (!a->finished)
		pthread_cond_wait(&a->cond, &a->lock);
	pthread_mutex_unlock(&a->lock);
}

void rt_attach_cancel(struct kvs_seq *seq)
{
	struct rt_attach *a = seq->attach;

	if (!a)
		return;
	pthread_mutex_lock(&a->lock);
	a->cancel = true;
	pthread_mutex_unlock(&a->lock);
	wait_finished(a);
	/* the pages are in the sequence's tables: its clear returns them */
	attach_free(seq->batch->rt, a);
	seq->attach = NULL;
}

/* Makes @spans attached spans the content of @layer. */
static int install(struct kvs_seq *seq, struct rt_attach *a, uint32_t layer,
		   uint32_t spans)
{
	struct kvs_rt *rt = seq->batch->rt;
	struct rt_len len;
	int err;

	err = rt->eng->mark_join(rt, a->marks[layer]);
	if (err)
		return err;
	len.tokens = len.k_quant = len.v_quant = spans * rt->cfg.shape.span;
	err = rt_seq_layer_set(seq, layer, &len, spans);
	if (err)
		return err;
	seq->layer[layer].len = len;
	seq->layer[layer].attach_used = true;
	a->installed++;
	return 0;
}

static void finish_if_installed(struct kvs_seq *seq)
{
	struct rt_attach *a = seq->attach;

	if (a->installed < a->layers)
		return;
	wait_finished(a);
	attach_free(seq->batch->rt, a);
	seq->attach = NULL;
}

int kvs_seq_attach_wait(struct kvs_seq *seq, uint32_t layer)
{
	struct rt_attach *a;
	uint32_t ok;
	int err;

	if (!seq || layer >= seq->batch->rt->cfg.layers)
		return -KVS_EPARAM;
	a = seq->attach;
	if (!a || seq->layer[layer].attach_used)
		return 0;
	pthread_mutex_lock(&a->lock);
	while (a->done <= layer)
		pthread_cond_wait(&a->cond, &a->lock);
	ok = a->ok[layer];
	pthread_mutex_unlock(&a->lock);
	if (ok < a->spans) {
		kvs_log(KVS_LOG_ERR,
			"attach: layer %u holds %u of %u cached spans; reset "
			"the sequence and prefill the prompt",
			layer, ok, a->spans);
		return -KVS_ENOTFOUND;
	}
	err = install(seq, a, layer, a->spans);
	if (err)
		return err;
	finish_if_installed(seq);
	return 0;
}

int kvs_seq_attach_finish(struct kvs_seq *seq, uint32_t *attached)
{
	struct kvs_rt *rt;
	struct rt_attach *a;
	uint32_t keep, l, i;
	bool used = false;
	int err;

	if (!seq || !attached)
		return -KVS_EPARAM;
	rt = seq->batch->rt;
	a = seq->attach;
	if (!a) {
		*attached = seq->layer[0].len.k_quant;
		return 0;
	}
	wait_finished(a);
	keep = a->spans;
	for (l = 0; l < a->layers; l++) {
		if (a->ok[l] < keep)
			keep = a->ok[l];
		used = used || seq->layer[l].attach_used;
	}
	if (keep < a->spans && used) {
		kvs_log(KVS_LOG_ERR,
			"attach: a layer in use holds %u spans but only %u "
			"arrived everywhere; reset and prefill",
			a->spans, keep);
		return -KVS_ENOTFOUND;
	}
	for (l = 0; l < a->layers; l++) {
		struct rt_layer *ly = &seq->layer[l];

		if (ly->attach_used)
			continue;
		for (i = keep; i < a->spans; i++) {
			rt_pool_put(rt, ly->pages[i]);
			ly->pages[i] = -1;
		}
		err = install(seq, a, l, keep);
		if (err)
			return err;
	}
	finish_if_installed(seq);
	*attached = keep * rt->cfg.shape.span;
	return 0;
}

int kvs_seq_attach_prefix(struct kvs_seq *seq, const uint32_t *ids, size_t n,
			  uint32_t limit, uint32_t *attached)
{
	struct kvs_rt *rt;
	uint32_t R, S, usable, spans, *layers, l;
	size_t prefix = 0;
	int err;

	if (!seq || (!ids && n) || !attached)
		return -KVS_EPARAM;
	rt = seq->batch->rt;
	for (l = 0; l < rt->cfg.layers; l++) {
		if (seq->layer[l].len.tokens) {
			kvs_log(KVS_LOG_ERR,
				"attach: the sequence is not empty");
			return -KVS_EPARAM;
		}
	}
	if (seq->attach || seq->n_ids) {
		kvs_log(KVS_LOG_ERR, "attach: the sequence already has ids or "
				     "an attach");
		return -KVS_EPARAM;
	}
	err = kvs_seq_append_ids(seq, ids, n);
	if (err)
		return err;
	*attached = 0;
	R = rt->cfg.shape.residual;
	S = rt->cfg.shape.span;
	/* the Values of the last min(n, R) tokens stay full precision: the
	 * prefill must compute them */
	usable = (uint32_t)n - ((uint32_t)n < R ? (uint32_t)n : R);
	if (usable > limit)
		usable = limit;
	spans = usable / S;
	if (!rt->store || spans == 0)
		return 0;
	if (rt_seq_span_ids(seq) < spans)
		return -EIO;
	layers = malloc(sizeof(*layers) * rt->cfg.layers);
	if (!layers)
		return -ENOMEM;
	for (l = 0; l < rt->cfg.layers; l++)
		layers[l] = l;
	err = kvs_blockstore_lookup(
		rt->store, (const uint8_t(*)[KVS_ID_SIZE])seq->span_ids, spans,
		layers, rt->cfg.layers, &prefix);
	free(layers);
	if (err) {
		kvs_log(KVS_LOG_WARN,
			"attach: lookup failed (%s); prefilling "
			"the whole prompt",
			kvs_strerror(err));
		return 0;
	}
	if (prefix == 0)
		return 0;
	err = rt_attach_start(seq, (uint32_t)prefix);
	if (err) {
		seq->n_ids = 0;
		seq->n_span_ids = 0;
		return err;
	}
	*attached = (uint32_t)prefix * S;
	return 0;
}
