/*
 * replay.c - the plan of a replay, its objects (one encoded template,
 * re-identified per object), the in-process store target, and the replay
 * loop (contracts in replay.h; the kvstashd target is replay_server.c).
 */
#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli_util.h"
#include "common/bytes.h"
#include "common/rng.h"
#include "kvstash/error.h"
#include "replay.h"

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

uint64_t replay_record_bytes(uint64_t len)
{
	return kvs_align_up(len + KVS_STORE_RECORD_HEADER, KVS_STORE_ALIGN);
}

/* ---- the plan -------------------------------------------------------- */

static uint32_t gcd32(uint32_t a, uint32_t b)
{
	while (b != 0) {
		uint32_t r = a % b;

		a = b;
		b = r;
	}
	return a;
}

/* The shape of one stored object with @heads KV heads, and its size. */
static int object_shape(const struct replay_model *m, enum replay_format f,
			uint32_t heads, struct kvs_shape *shape,
			uint32_t *bytes)
{
	struct kvs_layout lay;
	uint32_t s = m->shape.span;
	int rc;

	*shape = m->shape;
	shape->kv_heads = (uint16_t)heads;
	if (f == REPLAY_QUANT) {
		rc = kvs_block_layout(shape, &lay);
	} else {
		/* A residual tail holds fewer than R Key rows: R = S + G
		 * lets it hold the span's S rows of K and of V. */
		shape->residual = s + shape->group;
		shape->span = shape->residual;
		rc = kvs_tail_layout(shape, KVS_DTYPE_F16, s, s, &lay);
	}
	if (rc == 0)
		*bytes = lay.total_size;
	return rc;
}

int replay_plan_make(const struct replay_model *m, enum replay_format format,
		     uint32_t scale, struct replay_plan *out)
{
	struct replay_plan p = { 0 };
	struct kvs_shape shape;
	uint32_t rest;
	int rc;

	if (scale == 0 || m->layers == 0 || m->shape.span == 0 ||
	    m->block_tokens == 0 || m->block_tokens % m->shape.span != 0 ||
	    kvs_shape_check(&m->shape) != 0)
		return -KVS_EPARAM;
	p.format = format;
	p.block_tokens = m->block_tokens;
	p.scale = scale;
	p.spans_per_block = m->block_tokens / m->shape.span;
	p.layer_div = gcd32(m->layers, scale);
	rest = scale / p.layer_div;
	p.span_div = gcd32(p.spans_per_block, rest);
	p.head_div = rest / p.span_div;
	if (m->shape.kv_heads % p.head_div != 0)
		return -KVS_EPARAM;
	p.layers_kept = m->layers / p.layer_div;
	p.spans_kept = p.spans_per_block / p.span_div;
	p.heads_kept = m->shape.kv_heads / p.head_div;
	p.objects_per_block = p.spans_kept * p.layers_kept;
	rc = object_shape(m, format, m->shape.kv_heads, &shape,
			  &p.full_object_bytes);
	if (rc == 0)
		rc = object_shape(m, format, p.heads_kept, &shape,
				  &p.object_bytes);
	if (rc)
		return rc;
	p.full_block_bytes =
		(uint64_t)p.spans_per_block * m->layers * p.full_object_bytes;
	*out = p;
	return 0;
}

/* How many objects the store's policy keeps remembering whatever the
 * capacity (its ghost lists). */
#define STORE_GHOST_MIN 256

/* The store record bytes of one block at the plan's scale (@block) and
 * at scale 1 (@full). */
static void block_records(const struct replay_plan *p, uint64_t *block,
			  uint64_t *full)
{
	*block = (uint64_t)p->objects_per_block *
		 replay_record_bytes(p->object_bytes);
	*full = (uint64_t)p->spans_per_block * p->layers_kept * p->layer_div *
		replay_record_bytes(p->full_object_bytes);
}

uint64_t replay_plan_unscale(const struct replay_plan *p, uint64_t bytes)
{
	uint64_t block, full;

	block_records(p, &block, &full);
	return (uint64_t)((unsigned __int128)bytes * full / block);
}

void replay_plan_tiers(const struct replay_plan *p, uint64_t dram,
		       uint64_t nvme, uint64_t segment_size,
		       struct replay_tiers *out)
{
	uint64_t rec = replay_record_bytes(p->object_bytes);
	uint64_t block, full, body, nseg, recs;

	block_records(p, &block, &full);

	memset(out, 0, sizeof(*out));
	out->exact = true;
	out->dram = (uint64_t)((unsigned __int128)dram * block / full);
	/* Ghost keys are at least STORE_GHOST_MIN objects: a tier of few
	 * objects remembers relatively more blocks than at scale 1. */
	if (p->scale > 1 && dram && out->dram / rec < 4 * STORE_GHOST_MIN)
		out->exact = false;
	if (nvme == 0)
		return;
	/* The store refuses a tier of fewer than two segments; like the
	 * store left to choose, take segments of half the capacity. */
	if (nvme / segment_size < 2 && nvme / 2 >= KVS_STORE_SEGMENT_MIN)
		segment_size = nvme / 2 / KVS_STORE_ALIGN * KVS_STORE_ALIGN;
	body = segment_size - KVS_STORE_SEGMENT_OVERHEAD;
	nseg = nvme / segment_size;
	if (p->scale == 1) {
		out->nvme = nvme;
		out->segment_size = segment_size;
		out->nvme_segments = nseg;
		return;
	}
	if (nseg < 2 || segment_size <= KVS_STORE_SEGMENT_OVERHEAD) {
		/* Under two segments: the store decides (or refuses). */
		out->nvme = (uint64_t)((unsigned __int128)nvme * block / full);
		out->exact = false;
		return;
	}
	/* A segment's records stand for body / full blocks at scale 1. */
	recs = (uint64_t)((unsigned __int128)body * block / full / rec);
	if ((unsigned __int128)recs * rec * full !=
	    (unsigned __int128)body * block)
		out->exact = false;
	out->segment_size = KVS_STORE_SEGMENT_OVERHEAD + recs * rec;
	if (recs == 0 || out->segment_size < KVS_STORE_SEGMENT_MIN) {
		/* Segments cannot shrink that far (under one record, or
		 * under the store's smallest): keep the capacity, in fewer
		 * segments of the smallest size. */
		recs = (KVS_STORE_SEGMENT_MIN - KVS_STORE_SEGMENT_OVERHEAD +
			rec - 1) /
		       rec;
		out->segment_size = KVS_STORE_SEGMENT_OVERHEAD + recs * rec;
		nseg = (uint64_t)((unsigned __int128)nvme * block / full) /
		       out->segment_size;
		if (nseg < 2)
			nseg = 2;
		out->exact = false;
	}
	if (p->scale > 1 && nseg * recs < 4 * STORE_GHOST_MIN)
		out->exact = false;
	out->nvme_segments = nseg;
	out->nvme = nseg * out->segment_size;
}

/* ---- the objects ----------------------------------------------------- */

/* One encoded object for @plan, malloc'd into *@out. */
static int make_template(const struct replay_model *m,
			 const struct replay_plan *plan, uint8_t **out,
			 size_t *out_len)
{
	struct kvs_rng rng = { 0x5eed5eedull };
	struct kvs_ident ident = { 0 };
	struct kvs_shape shape;
	uint32_t bytes;
	size_t n;
	int rc;

	rc = object_shape(m, plan->format, plan->heads_kept, &shape, &bytes);
	if (rc)
		return rc;
	n = (size_t)plan->heads_kept * m->shape.span * shape.head_dim;
	if (plan->format == REPLAY_FP16) {
		uint16_t *kv = malloc(2 * n * sizeof(*kv));

		if (kv == NULL)
			return -ENOMEM;
		for (size_t i = 0; i < 2 * n; i++)
			kv[i] = kvs_f32_to_f16(kvs_rng_normal(&rng));
		rc = kvs_tail_encode(&shape, &ident, KVS_DTYPE_F16,
				     m->shape.span, m->shape.span, kv, kv + n,
				     0, out, out_len);
		free(kv);
		return rc;
	}
	float *kv = malloc(2 * n * sizeof(*kv));
	uint8_t *image = calloc(1, bytes);

	if (kv == NULL || image == NULL) {
		rc = -ENOMEM;
		goto out_free;
	}
	for (size_t i = 0; i < 2 * n; i++)
		kv[i] = kvs_rng_normal(&rng);
	rc = kvs_block_quantize(&shape, KVS_DTYPE_F32, kv, kv + n, image);
	if (rc == 0)
		rc = kvs_block_finish(&shape, &ident, image);
	if (rc == 0) {
		*out = image;
		*out_len = bytes;
		image = NULL;
	}
out_free:
	free(image);
	free(kv);
	return rc;
}

int replay_objects_init(struct replay_objects *o, const struct replay_model *m,
			const struct replay_plan *plan,
			const uint8_t model_fp[KVS_ID_SIZE],
			uint32_t max_blocks)
{
	size_t n = (size_t)plan->objects_per_block * max_blocks;
	uint8_t *tmpl = NULL;
	size_t len = 0;
	int rc;

	memset(o, 0, sizeof(*o));
	if (max_blocks == 0)
		return -KVS_EPARAM;
	o->plan = *plan;
	o->max_blocks = max_blocks;
	memcpy(o->model_fp, model_fp, KVS_ID_SIZE);
	rc = make_template(m, plan, &tmpl, &len);
	if (rc)
		return rc;
	if (len != plan->object_bytes) {
		free(tmpl);
		return -KVS_EPARAM;
	}
	o->images = malloc(n * len);
	o->objs = calloc(n, sizeof(*o->objs));
	o->lens = calloc(n, sizeof(*o->lens));
	o->results = calloc(n, sizeof(*o->results));
	o->keys = calloc(n, sizeof(*o->keys));
	o->layers = calloc(plan->layers_kept, sizeof(*o->layers));
	if (!o->images || !o->objs || !o->lens || !o->results || !o->keys ||
	    !o->layers) {
		free(tmpl);
		replay_objects_fini(o);
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		memcpy(o->images + i * len, tmpl, len);
		o->objs[i] = o->images + i * len;
		o->lens[i] = len;
	}
	for (uint32_t l = 0; l < plan->layers_kept; l++)
		o->layers[l] = l;
	free(tmpl);
	return 0;
}

void replay_objects_fini(struct replay_objects *o)
{
	free(o->images);
	free(o->objs);
	free(o->lens);
	free(o->results);
	free(o->keys);
	free(o->layers);
	memset(o, 0, sizeof(*o));
}

/* Span @s (of spans_per_block) of @node's block: the kept spans are the
 * last of each group of span_div. */
static uint32_t kept_span(const struct replay_plan *p, uint32_t k)
{
	return (k + 1) * p->span_div - 1;
}

/* The keys of @node's objects into o->keys, as block @slot of a batch;
 * with @stamp, the objects themselves are given those identities. */
static int block_objects(struct replay_objects *o, const struct trace *t,
			 uint32_t node, uint32_t slot, bool stamp)
{
	const struct replay_plan *p = &o->plan;
	const struct trace_node *nd = &t->nodes[node];
	static const uint8_t root[KVS_ID_SIZE];
	uint32_t per = t->spans_per_block;
	size_t at = (size_t)slot * p->objects_per_block;
	struct kvs_ident ident;
	int rc;

	memcpy(ident.model_fp, o->model_fp, KVS_ID_SIZE);
	for (uint32_t k = 0; k < p->spans_kept; k++) {
		uint32_t s = kept_span(p, k);
		const uint8_t *id = t->span_ids[(size_t)node * per + s];
		/* the parent is the span stored before it: the previous
		 * kept span (the one before it at scale 1), so that the
		 * store sees the chain of what it holds */
		const uint8_t *parent =
			k > 0 ? t->span_ids[(size_t)node * per +
					    kept_span(p, k - 1)]
			: nd->parent != TRACE_NO_NODE
				? t->span_ids[(size_t)nd->parent * per + per -
					      1]
				: root;

		memcpy(ident.block_id, id, KVS_ID_SIZE);
		memcpy(ident.parent_id, parent, KVS_ID_SIZE);
		ident.first_pos = (uint64_t)nd->depth * p->block_tokens +
				  (uint64_t)s * t->span_tokens;
		for (uint32_t l = 0; l < p->layers_kept; l++, at++) {
			memcpy(o->keys[at].span_id, id, KVS_ID_SIZE);
			o->keys[at].layer = l;
			if (!stamp)
				continue;
			ident.layer = l;
			rc = kvs_object_set_ident(
				o->images + (size_t)at * p->object_bytes,
				p->object_bytes, &ident);
			if (rc)
				return rc;
		}
	}
	return 0;
}

/* ---- the store target ------------------------------------------------ */

struct store_target {
	struct kvs_store *store;
	char *dir;
	struct kvs_store_ref **refs;
	size_t refs_cap;
};

static int store_lookup(void *ctx, const uint8_t (*ids)[KVS_ID_SIZE], size_t n,
			const uint32_t *layers, size_t n_layers, size_t *prefix)
{
	struct store_target *st = ctx;

	*prefix = kvs_store_lookup_prefix(st->store, ids, n, layers, n_layers);
	return 0;
}

static int store_get(void *ctx, const struct kvs_store_key *keys, size_t n,
		     int *results)
{
	struct store_target *st = ctx;
	int rc;

	if (n > st->refs_cap) {
		struct kvs_store_ref **refs =
			realloc(st->refs, n * sizeof(*refs));

		if (refs == NULL)
			return -ENOMEM;
		st->refs = refs;
		st->refs_cap = n;
	}
	rc = kvs_store_get_batch(st->store, keys, n, st->refs, results);
	if (rc)
		return rc;
	for (size_t i = 0; i < n; i++)
		kvs_store_ref_release(st->refs[i]);
	return 0;
}

static int store_put(void *ctx, const uint8_t *const *objs, const size_t *lens,
		     size_t n, int *results)
{
	struct store_target *st = ctx;

	/* Per-object refusals are in @results; the batch's own return is
	 * the first of them. */
	(void)kvs_store_put_batch(st->store, objs, lens, n,
				  KVS_DURABILITY_MEMORY, results);
	return 0;
}

static int store_counters(void *ctx, struct replay_counters *out)
{
	struct store_target *st = ctx;
	struct kvs_store_stats s;

	kvs_store_stats_get(st->store, &s);
	memset(out, 0, sizeof(*out));
	out->hits = s.hits;
	out->misses = s.misses;
	out->dram_hits = s.dram_hits;
	out->nvme_hits = s.nvme_hits;
	out->evictions = s.evictions;
	out->spills = s.spills;
	out->promotions = s.promotions;
	out->carried = s.carried;
	out->corrupt_dropped = s.corrupt_dropped;
	out->dram_objects = s.dram.blocks;
	out->dram_bytes = s.dram.bytes;
	out->nvme_objects = s.nvme.blocks;
	out->nvme_bytes = s.nvme.bytes;
	out->dram_capacity = s.dram.capacity;
	out->nvme_capacity = s.nvme.capacity;
	out->segments = s.segments;
	out->direct_io = s.direct_io;
	out->tier_hits = true;
	out->moves = true;
	return 0;
}

/* Removes the store directory @dir that this process created (its
 * files are the store's own: superblock, lock, segments). */
static void remove_store_dir(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char path[4096];

	if (d == NULL)
		return;
	while ((e = readdir(d)) != NULL) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		unlink(path);
	}
	closedir(d);
	rmdir(dir);
}

static void store_close(void *ctx)
{
	struct store_target *st = ctx;

	kvs_store_close(st->store);
	remove_store_dir(st->dir);
	free(st->dir);
	free(st->refs);
	free(st);
}

static const struct replay_target_ops store_ops = {
	.lookup = store_lookup,
	.get = store_get,
	.put = store_put,
	.counters = store_counters,
	.close = store_close,
};

int replay_target_store(const char *cmd, const struct replay_store_config *c,
			struct replay_target *out)
{
	struct store_target *st = calloc(1, sizeof(*st));
	struct kvs_store_opts opts;
	int rc;

	if (st == NULL)
		return -ENOMEM;
	if (asprintf(&st->dir, "%s/kvstash-replay-XXXXXX", c->parent_dir) < 0) {
		free(st);
		return -ENOMEM;
	}
	if (mkdtemp(st->dir) == NULL) {
		rc = -errno;
		kvs_cli_error(cmd, "%s: %s", st->dir, strerror(-rc));
		goto fail_dir;
	}
	kvs_store_opts_default(&opts);
	opts.dram_capacity = c->dram_capacity;
	opts.nvme_capacity = c->nvme_capacity;
	opts.segment_size = c->segment_size;
	opts.eviction = c->eviction;
	opts.write_through = false;
	opts.create = true;
	rc = kvs_store_open(st->dir, &opts, &st->store);
	if (rc) {
		kvs_cli_fail(cmd, rc, st->dir);
		remove_store_dir(st->dir);
		goto fail_dir;
	}
	out->ops = &store_ops;
	out->ctx = st;
	out->name = "store";
	out->tiers_per_block = true;
	out->batch_blocks = 1;
	return 0;

fail_dir:
	free(st->dir);
	free(st);
	return rc;
}

/* ---- the replay ------------------------------------------------------ */

static void progress_line(const struct replay_progress *pg, size_t done,
			  size_t total, const struct replay_tally *t,
			  double secs)
{
	double ratio = t->prompt_tokens ? 100.0 * (double)t->hit_tokens /
						  (double)t->prompt_tokens
					: 0.0;

	fprintf(stderr,
		"kvstash %s: %s: %zu/%zu requests, prefix hits %.1f%%, "
		"%.0f requests/s\n",
		pg->cmd, pg->label, done, total, ratio,
		secs > 0 ? (double)done / secs : 0.0);
}

/*
 * Reads the objects of the @k blocks @nodes in one get; *@whole is how
 * many of them, from the first, were read without a miss.  Blocks after
 * the first that missed were read all the same (the target saw them).
 */
static int read_blocks(struct replay_objects *o, const struct trace *t,
		       const struct replay_target *tg, const uint32_t *nodes,
		       uint32_t k, struct replay_tally *out, uint32_t *whole)
{
	const struct replay_plan *p = &o->plan;
	uint32_t per = p->objects_per_block;
	struct replay_counters before, after;
	int rc = 0;

	for (uint32_t j = 0; j < k && rc == 0; j++)
		rc = block_objects(o, t, nodes[j], j, false);
	if (rc == 0 && tg->tiers_per_block)
		rc = tg->ops->counters(tg->ctx, &before);
	if (rc == 0)
		rc = tg->ops->get(tg->ctx, o->keys, (size_t)k * per,
				  o->results);
	if (rc == 0 && tg->tiers_per_block)
		rc = tg->ops->counters(tg->ctx, &after);
	if (rc)
		return rc;
	*whole = k;
	for (uint32_t j = 0; j < k; j++) {
		uint64_t misses = 0;

		for (uint32_t i = 0; i < per; i++)
			misses += o->results[(size_t)j * per + i] != 0;
		out->objects_read += per - misses;
		out->read_misses += misses;
		out->bytes_read += (per - misses) * p->object_bytes;
		if (misses && *whole == k)
			*whole = j;
	}
	/* with tiers_per_block, one block a get */
	if (*whole == 1 && tg->tiers_per_block) {
		if (after.nvme_hits != before.nvme_hits)
			out->nvme_hit_blocks++;
		else
			out->dram_hit_blocks++;
	}
	return 0;
}

/* Puts the objects of the @k blocks @nodes in one put. */
static int write_blocks(struct replay_objects *o, const struct trace *t,
			const struct replay_target *tg, const uint32_t *nodes,
			uint32_t k, struct replay_tally *out)
{
	const struct replay_plan *p = &o->plan;
	size_t n = (size_t)k * p->objects_per_block;
	int rc = 0;

	for (uint32_t j = 0; j < k && rc == 0; j++)
		rc = block_objects(o, t, nodes[j], j, true);
	if (rc == 0)
		rc = tg->ops->put(tg->ctx, o->objs, o->lens, n, o->results);
	if (rc)
		return rc;
	for (size_t i = 0; i < n; i++) {
		if (o->results[i] == 0) {
			out->objects_put++;
			out->bytes_written += p->object_bytes;
			continue;
		}
		if (out->put_refused++ == 0)
			out->first_refusal = o->results[i];
	}
	return 0;
}

void replay_tally_request(struct replay_tally *t,
			  const struct trace_request *rq, uint64_t hit_blocks,
			  uint32_t block_tokens)
{
	uint64_t hit_tokens = hit_blocks * block_tokens;

	t->requests++;
	t->lookup_blocks += rq->n_blocks;
	t->hit_blocks += hit_blocks;
	t->prompt_tokens += rq->input_length;
	/* A partial last block counts only its own tokens. */
	t->hit_tokens +=
		hit_tokens < rq->input_length ? hit_tokens : rq->input_length;
}

/* The counts of @end less those of @start, with @end's gauges. */
static void counters_since(const struct replay_counters *start,
			   const struct replay_counters *end,
			   struct replay_counters *out)
{
	*out = *end;
	out->hits = end->hits - start->hits;
	out->misses = end->misses - start->misses;
	out->dram_hits = end->dram_hits - start->dram_hits;
	out->nvme_hits = end->nvme_hits - start->nvme_hits;
	out->evictions = end->evictions - start->evictions;
	out->spills = end->spills - start->spills;
	out->promotions = end->promotions - start->promotions;
	out->carried = end->carried - start->carried;
	out->corrupt_dropped = end->corrupt_dropped - start->corrupt_dropped;
	out->tier_hits = start->tier_hits && end->tier_hits;
	out->moves = start->moves && end->moves;
}

int replay_run(const struct trace *t, struct replay_objects *o,
	       const struct replay_target *tg, const struct replay_progress *pg,
	       struct replay_tally *out)
{
	const struct replay_plan *p = &o->plan;
	const char *cmd = pg ? pg->cmd : "bench trace";
	struct replay_tally tl = { 0 };
	struct replay_counters start, end;
	uint32_t batch = tg->batch_blocks < o->max_blocks ? tg->batch_blocks
							  : o->max_blocks;
	uint8_t(*ids)[KVS_ID_SIZE];
	double t0;
	int rc;

	assert(batch > 0 && (!tg->tiers_per_block || batch == 1));

	ids = malloc(((size_t)t->max_blocks * p->spans_kept + 1) *
		     sizeof(*ids));
	if (ids == NULL) {
		kvs_cli_error(cmd, "out of memory");
		return -ENOMEM;
	}
	rc = tg->ops->counters(tg->ctx, &start);
	t0 = now_s();
	for (size_t r = 0; r < t->n_requests && rc == 0; r++) {
		const struct trace_request *rq = &t->requests[r];
		const uint32_t *chain = t->chain + rq->first;
		size_t n = 0, hit = 0;

		for (uint32_t b = 0; b < rq->n_blocks; b++)
			for (uint32_t k = 0; k < p->spans_kept; k++)
				memcpy(ids[n++],
				       t->span_ids[(size_t)chain[b] *
							   t->spans_per_block +
						   kept_span(p, k)],
				       KVS_ID_SIZE);
		rc = tg->ops->lookup(tg->ctx,
				     (const uint8_t(*)[KVS_ID_SIZE])ids, n,
				     o->layers, p->layers_kept, &hit);
		hit /= p->spans_kept;
		for (size_t b = 0; b < hit && rc == 0;) {
			uint32_t k = (uint32_t)(hit - b < batch ? hit - b
								: batch),
				 whole = 0;

			rc = read_blocks(o, t, tg, chain + b, k, &tl, &whole);
			if (rc == 0 && whole < k)
				hit = b + whole; /* the prefix ends at a miss */
			else
				b += k;
		}
		for (size_t b = hit; b < rq->n_blocks && rc == 0; b += batch) {
			uint32_t k = (uint32_t)(rq->n_blocks - b < batch
							? rq->n_blocks - b
							: batch);

			rc = write_blocks(o, t, tg, chain + b, k, &tl);
		}
		replay_tally_request(&tl, rq, hit, p->block_tokens);
		if (pg && pg->every && tl.requests % pg->every == 0)
			progress_line(pg, tl.requests, t->n_requests, &tl,
				      now_s() - t0);
	}
	free(ids);
	tl.wall_seconds = now_s() - t0;
	if (rc == 0)
		rc = tg->ops->counters(tg->ctx, &end);
	if (rc) {
		kvs_cli_fail(cmd, rc, tg->name);
		return rc;
	}
	counters_since(&start, &end, &tl.target);
	tl.tier_blocks = tg->tiers_per_block;
	tl.objects_before = start.dram_objects + start.nvme_objects;
	tl.nvme_bytes_written = tl.target.spills * p->object_bytes;
	if (tl.target.tier_hits) {
		tl.dram_bytes_read = tl.target.dram_hits * p->object_bytes;
		tl.nvme_bytes_read = tl.target.nvme_hits * p->object_bytes;
	}
	*out = tl;
	return 0;
}
