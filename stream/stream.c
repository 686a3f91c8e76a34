/*
 * stream - one layer of one request on the decode side (DESIGN.md §2): the
 * sealed history, the Key residual and the Value FIFO, driven one token at
 * a time in either compute order, with the compute ops of a backend.
 *
 * Organisation:
 *   - lengths: kvs_lengths_advance() (trace.c) decides, for both orders,
 *     which tokens the current step computes with and what is persisted,
 *     so a stream and kvs_trace() can never disagree;
 *   - a window of fp32 K/V rows, [kv_heads][win_cap][D], holds every token
 *     not yet in a finished block or still in the Value FIFO; the Key
 *     residual and the Value FIFO are slices of it;
 *   - history: finished blocks of S tokens (encoded, uncompressed objects,
 *     opened as views).  When S > R the Key seals of R tokens fill an
 *     "open" block first: its image is re-quantized from the window at each
 *     seal with the not-yet-sealed tokens zero-padded.  Key groups (G
 *     tokens, G | R) and Value groups (one token) never straddle that
 *     point, so the open image's codes for its sealed tokens are exactly
 *     the finished block's; attention reads them from it.  With S == R a
 *     seal finishes a block at once.
 * Values leaving the FIFO need no work: their per-token codes are already
 * in the block (or open image) that the Key seal produced, because Values
 * of a token are never quantized before its Key (v_quant <= k_quant).
 *
 * Block ids: no token ids reach the stream, so block i's id is
 * kvs_span_id(KVS_STREAM_POSITION_NS, cfg model_fp, parent, positions
 * i*S .. i*S+S-1 as uint32), the parent being block i-1's id or, for block
 * 0, the config's parent_id (none when all-zero); layer and model_fp come
 * from the config, first_pos = i*S.  The config's block_id and first_pos
 * are not used.  The tail is identified the same way over the positions of
 * its Values.
 *
 * Handoff: kvs_stream_tail() writes the rows not in finished blocks;
 * kvs_stream_resume() rebuilds an empty stream from those blocks and that
 * tail, after which both streams decode bit for bit alike.
 *
 * A failed step or tail leaves the stream as it was; a failed prefill or
 * resume leaves it empty (it had to be empty).
 */
#include <assert.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kvstash/log.h"
#include "kvstash/stream.h"
#include "stream_internal.h"

/* One encoded block (or open-block image) and its view into it. */
struct sealed {
	uint8_t *obj;
	size_t len;
	struct kvs_view view;
};

struct kvs_stream {
	struct kvs_shape shape;
	enum kvs_order order;
	uint32_t q_heads;
	const struct kvs_backend_ops *backend;
	struct kvs_ident ident;
	uint32_t block_size; /* bytes of one uncompressed block */
	struct kvs_lengths len; /* persisted lengths */
	struct sealed **blocks; /* finished blocks */
	const struct kvs_view **views; /* block_cap + 1, for attention */
	uint32_t block_count, block_cap;
	struct sealed *open; /* image of the open block, or NULL */
	float *win_k, *win_v; /* [kv_heads][win_cap][D] */
	uint32_t win_start, win_cap; /* first token held in the window */
	float *seal_k, *seal_v; /* [kv_heads][S][D] gather buffers */
	uint32_t *positions; /* [S] for block ids */
	float *attn_out; /* [q_heads][D] */
};

/* Frees @s, its view and its bytes; a view never opened is all-zero. */
static void sealed_free(struct sealed *s)
{
	if (!s)
		return;
	kvs_view_release(&s->view);
	free(s->obj);
	free(s);
}

/* A zeroed holder for @len bytes, or NULL (logged). */
static struct sealed *sealed_alloc(size_t len)
{
	struct sealed *s = calloc(1, sizeof(*s));

	if (s) {
		s->len = len;
		s->obj = malloc(len ? len : 1);
		if (s->obj)
			return s;
		free(s);
	}
	kvs_log(KVS_LOG_ERR, "stream: out of memory for a %zu-byte object",
		len);
	return NULL;
}

static size_t row_floats(const struct kvs_stream *st)
{
	return (size_t)st->shape.kv_heads * st->shape.head_dim;
}

static float *win_row(const struct kvs_stream *st, float *base, uint32_t head,
		      uint32_t token)
{
	return base + ((size_t)head * st->win_cap + (token - st->win_start)) *
			      st->shape.head_dim;
}

static int check_config(const struct kvs_stream_config *cfg)
{
	const struct kvs_backend_ops *ops;
	int err;

	if (!cfg) {
		kvs_log(KVS_LOG_ERR, "stream: no config");
		return -KVS_EPARAM;
	}
	err = kvs_shape_check(&cfg->shape);
	if (err)
		return err;
	if (cfg->order != KVS_ORDER_KIVI && cfg->order != KVS_ORDER_PAPER) {
		kvs_log(KVS_LOG_ERR, "stream: unknown order %d",
			(int)cfg->order);
		return -KVS_EPARAM;
	}
	if (cfg->q_heads == 0 || cfg->q_heads % cfg->shape.kv_heads != 0) {
		kvs_log(KVS_LOG_ERR,
			"stream: q_heads %u is not a positive multiple of "
			"kv_heads %u",
			cfg->q_heads, cfg->shape.kv_heads);
		return -KVS_EPARAM;
	}
	if ((uint64_t)cfg->shape.span + 2ull * cfg->shape.residual >
	    UINT32_MAX / 2) {
		kvs_log(KVS_LOG_ERR, "stream: span %u too large",
			cfg->shape.span);
		return -KVS_EPARAM;
	}
	ops = cfg->backend ? cfg->backend : kvs_backend_cpu();
	if (!ops->seal || !ops->attend) {
		kvs_log(KVS_LOG_ERR, "stream: backend '%s' lacks seal/attend",
			ops->name ? ops->name : "?");
		return -KVS_EPARAM;
	}
	return 0;
}

int kvs_stream_create(const struct kvs_stream_config *cfg,
		      struct kvs_stream **out)
{
	struct kvs_layout layout;
	struct kvs_stream *st;
	size_t win_floats, block_floats;
	int err;

	if (!out) {
		kvs_log(KVS_LOG_ERR, "stream: no output pointer");
		return -KVS_EPARAM;
	}
	err = check_config(cfg);
	if (err)
		return err;
	err = kvs_block_layout(&cfg->shape, &layout);
	if (err)
		return err;

	err = -ENOMEM;
	st = calloc(1, sizeof(*st));
	if (!st)
		goto fail_stream;
	st->shape = cfg->shape;
	st->order = cfg->order;
	st->q_heads = cfg->q_heads;
	st->backend = cfg->backend ? cfg->backend : kvs_backend_cpu();
	st->ident = cfg->ident;
	st->block_size = layout.total_size;
	/* After compact() at most S tokens remain, so R more fit before
	 * the next one. */
	st->win_cap = cfg->shape.span + cfg->shape.residual;
	win_floats = (size_t)st->win_cap * row_floats(st);
	block_floats = (size_t)cfg->shape.span * row_floats(st);

	st->win_k = malloc(sizeof(float) * 2 * win_floats);
	if (!st->win_k)
		goto fail_window;
	st->win_v = st->win_k + win_floats;
	st->seal_k = malloc(sizeof(float) * 2 * block_floats);
	if (!st->seal_k)
		goto fail_seal;
	st->seal_v = st->seal_k + block_floats;
	st->positions = malloc(sizeof(*st->positions) * cfg->shape.span);
	if (!st->positions)
		goto fail_positions;
	st->attn_out = malloc(sizeof(float) * (size_t)cfg->q_heads *
			      cfg->shape.head_dim);
	if (!st->attn_out)
		goto fail_attn_out;
	st->views = malloc(sizeof(*st->views));
	if (!st->views)
		goto fail_views;
	*out = st;
	return 0;

fail_views:
	free(st->attn_out);
fail_attn_out:
	free(st->positions);
fail_positions:
	free(st->seal_k);
fail_seal:
	free(st->win_k);
fail_window:
	free(st);
fail_stream:
	kvs_log(KVS_LOG_ERR, "stream: out of memory");
	return err;
}

/* Drops all history and residuals: the stream is empty again. */
static void stream_clear(struct kvs_stream *st)
{
	uint32_t i;

	for (i = 0; i < st->block_count; i++)
		sealed_free(st->blocks[i]);
	st->block_count = 0;
	sealed_free(st->open);
	st->open = NULL;
	memset(&st->len, 0, sizeof(st->len));
	st->win_start = 0;
}

void kvs_stream_destroy(struct kvs_stream *st)
{
	if (!st)
		return;
	stream_clear(st);
	free(st->blocks);
	free(st->views);
	free(st->attn_out);
	free(st->positions);
	free(st->seal_k);
	free(st->win_k);
	free(st);
}

/*
 * Moves the window to start at the first token still needed: the open
 * block's first token or the oldest Value of the FIFO.  Persisted state
 * keeps k_quant - blocks*S <= S - R and tokens - k_quant < R, and
 * tokens - v_quant <= R, so at most S tokens remain: R below win_cap.
 */
static void compact(struct kvs_stream *st)
{
	uint32_t first = st->block_count * st->shape.span;
	uint32_t keep, h;

	if (st->len.v_quant < first)
		first = st->len.v_quant;
	keep = st->len.tokens - first;
	assert(first > st->win_start && keep < st->win_cap);
	for (h = 0; h < st->shape.kv_heads; h++) {
		memmove(win_row(st, st->win_k, h, st->win_start),
			win_row(st, st->win_k, h, first),
			sizeof(float) * keep * st->shape.head_dim);
		memmove(win_row(st, st->win_v, h, st->win_start),
			win_row(st, st->win_v, h, first),
			sizeof(float) * keep * st->shape.head_dim);
	}
	st->win_start = first;
}

/* Writes token len.tokens' K/V rows ([kv_heads][D]) into the window; the
 * token is not counted until the caller commits the new lengths. */
static void append_token(struct kvs_stream *st, const float *k, const float *v)
{
	uint32_t token = st->len.tokens, D = st->shape.head_dim, h;

	if (token - st->win_start == st->win_cap)
		compact(st);
	for (h = 0; h < st->shape.kv_heads; h++) {
		memcpy(win_row(st, st->win_k, h, token), k + (size_t)h * D,
		       sizeof(float) * D);
		memcpy(win_row(st, st->win_v, h, token), v + (size_t)h * D,
		       sizeof(float) * D);
	}
}

static int grow_blocks(struct kvs_stream *st)
{
	struct sealed **blocks;
	const struct kvs_view **views;
	uint32_t cap;

	if (st->block_count < st->block_cap)
		return 0;
	if (st->block_cap > UINT32_MAX / 2 - 1) {
		kvs_log(KVS_LOG_ERR, "stream: too many blocks");
		return -KVS_EPARAM;
	}
	cap = st->block_cap ? 2 * st->block_cap : 8;
	blocks = realloc(st->blocks, sizeof(*blocks) * cap);
	if (!blocks)
		goto fail;
	st->blocks = blocks;
	views = realloc(st->views, sizeof(*views) * (cap + 1));
	if (!views)
		goto fail;
	st->views = views;
	st->block_cap = cap;
	return 0;
fail:
	kvs_log(KVS_LOG_ERR, "stream: out of memory for %u blocks", cap);
	return -ENOMEM;
}

/* Parent id of block @index (also of the tail when @index == blocks):
 * the previous block's id, or the config's parent_id; NULL for none. */
static const uint8_t *parent_of(const struct kvs_stream *st, uint32_t index)
{
	static const uint8_t none[KVS_ID_SIZE];

	if (index > 0)
		return st->blocks[index - 1]->view.hdr.ident.block_id;
	if (memcmp(st->ident.parent_id, none, KVS_ID_SIZE) != 0)
		return st->ident.parent_id;
	return NULL;
}

/* Identity of block @index (see the file comment). */
static int block_ident(struct kvs_stream *st, uint32_t index,
		       struct kvs_ident *ident)
{
	const uint8_t *parent = parent_of(st, index);
	uint32_t S = st->shape.span, i;

	memset(ident, 0, sizeof(*ident));
	memcpy(ident->model_fp, st->ident.model_fp, KVS_ID_SIZE);
	ident->layer = st->ident.layer;
	ident->first_pos = (uint64_t)index * S;
	if (parent)
		memcpy(ident->parent_id, parent, KVS_ID_SIZE);
	for (i = 0; i < S; i++)
		st->positions[i] = index * S + i;
	return kvs_span_id(KVS_STREAM_POSITION_NS, ident->model_fp, parent,
			   st->positions, S, ident->block_id);
}

/*
 * Seals the Keys up to @k_quant into the open block: builds the image of
 * block block_count from the window (zero-padded when not yet full) into
 * *out.  Changes nothing the caller can see; commit_seal() installs it.
 */
static int prepare_seal(struct kvs_stream *st, uint32_t k_quant,
			struct sealed **out)
{
	uint32_t S = st->shape.span, D = st->shape.head_dim, h;
	uint32_t first = st->block_count * S;
	uint32_t n = k_quant - first;
	struct kvs_ident ident;
	struct sealed *s;
	int err;

	err = grow_blocks(st);
	if (err)
		return err;
	for (h = 0; h < st->shape.kv_heads; h++) {
		float *kd = st->seal_k + (size_t)h * S * D;
		float *vd = st->seal_v + (size_t)h * S * D;

		memcpy(kd, win_row(st, st->win_k, h, first),
		       sizeof(float) * n * D);
		memcpy(vd, win_row(st, st->win_v, h, first),
		       sizeof(float) * n * D);
		memset(kd + (size_t)n * D, 0, sizeof(float) * (S - n) * D);
		memset(vd + (size_t)n * D, 0, sizeof(float) * (S - n) * D);
	}
	err = block_ident(st, st->block_count, &ident);
	if (err)
		return err;

	s = sealed_alloc(st->block_size);
	if (!s)
		return -ENOMEM;
	err = st->backend->seal(&st->shape, &ident, KVS_DTYPE_F32, st->seal_k,
				st->seal_v, s->obj);
	if (!err)
		err = kvs_object_open(s->obj, s->len, 0, &s->view);
	if (err) {
		sealed_free(s);
		return err;
	}
	*out = s;
	return 0;
}

static void commit_seal(struct kvs_stream *st, uint32_t k_quant,
			struct sealed *s)
{
	sealed_free(st->open);
	st->open = NULL;
	if (k_quant - st->block_count * st->shape.span == st->shape.span)
		st->blocks[st->block_count++] = s;
	else
		st->open = s;
}

/*
 * Attention of @q over tokens [0, @tokens): Keys [0, k_quant) and Values
 * [0, v_quant) from the history (finished blocks, then @pending or the
 * open image), the rest from the window.
 */
static int stream_attend(struct kvs_stream *st, uint32_t tokens,
			 uint32_t k_quant, uint32_t v_quant,
			 const struct sealed *pending, const float *q,
			 float *out)
{
	const struct sealed *extra = pending ? pending : st->open;
	struct kvs_attn a;
	uint32_t i;

	for (i = 0; i < st->block_count; i++)
		st->views[i] = &st->blocks[i]->view;
	if (extra)
		st->views[i++] = &extra->view;
	memset(&a, 0, sizeof(a));
	a.q_heads = st->q_heads;
	a.kv_heads = st->shape.kv_heads;
	a.head_dim = st->shape.head_dim;
	a.scale = 1.0f / sqrtf((float)st->shape.head_dim);
	a.q = q;
	a.blocks = st->views;
	a.block_count = i;
	a.k_quant_len = k_quant;
	a.v_quant_len = v_quant;
	a.k_resid = win_row(st, st->win_k, 0, k_quant);
	a.v_resid = win_row(st, st->win_v, 0, v_quant);
	a.k_resid_len = tokens - k_quant;
	a.v_resid_len = tokens - v_quant;
	a.k_resid_stride = st->win_cap;
	a.v_resid_stride = st->win_cap;
	a.out = out;
	return st->backend->attend(&a);
}

static int finite_rows(const char *what, const float *x, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++) {
		if (!isfinite(x[i])) {
			kvs_log(KVS_LOG_ERR, "stream: non-finite %s at %zu",
				what, i);
			return -KVS_ENONFINITE;
		}
	}
	return 0;
}

int kvs_stream_step(struct kvs_stream *st, const float *q, const float *k,
		    const float *v, float *out, struct kvs_trace_row *row)
{
	size_t q_floats;
	struct kvs_lengths next;
	struct kvs_trace_row r;
	struct sealed *pending = NULL;
	int err;

	if (!st || !q || !k || !v || !out) {
		kvs_log(KVS_LOG_ERR, "stream step: missing argument");
		return -KVS_EPARAM;
	}
	if (st->len.tokens == UINT32_MAX) {
		kvs_log(KVS_LOG_ERR, "stream step: token count exhausted");
		return -KVS_EPARAM;
	}
	q_floats = (size_t)st->q_heads * st->shape.head_dim;
	err = finite_rows("query", q, q_floats);
	if (!err)
		err = finite_rows("key", k, row_floats(st));
	if (!err)
		err = finite_rows("value", v, row_floats(st));
	if (err)
		return err;

	next = st->len;
	kvs_lengths_advance(&next, st->shape.residual, st->order, &r);
	append_token(st, k, v);
	if (st->order == KVS_ORDER_KIVI) {
		err = stream_attend(st, r.tokens, r.k_compute_quant,
				    r.v_compute_quant, NULL, q, st->attn_out);
		if (err)
			return err;
	}
	if (next.k_quant != st->len.k_quant) {
		err = prepare_seal(st, next.k_quant, &pending);
		if (err)
			return err;
	}
	if (st->order == KVS_ORDER_PAPER) {
		err = stream_attend(st, r.tokens, r.k_compute_quant,
				    r.v_compute_quant, pending, q,
				    st->attn_out);
		if (err) {
			sealed_free(pending);
			return err;
		}
	}
	if (pending)
		commit_seal(st, next.k_quant, pending);
	st->len = next;
	memcpy(out, st->attn_out, sizeof(float) * q_floats);
	if (row)
		*row = r;
	return 0;
}

/* Causal full-precision attention of every prompt token, into @out. */
static int prefill_attend(struct kvs_stream *st, const float *q, const float *k,
			  const float *v, uint32_t tokens, float *out)
{
	uint32_t H = st->shape.kv_heads, D = st->shape.head_dim, h, t;
	size_t q_floats = (size_t)st->q_heads * D;
	size_t per_head = (size_t)tokens * D;
	struct kvs_attn a;
	float *keys;
	int err = 0;

	keys = malloc(sizeof(float) * 2 * H * per_head);
	if (!keys) {
		kvs_log(KVS_LOG_ERR, "stream prefill: out of memory");
		return -ENOMEM;
	}
	/* [token][head][D] -> [head][token][D], the residual layout. */
	for (t = 0; t < tokens; t++) {
		for (h = 0; h < H; h++) {
			size_t src = ((size_t)t * H + h) * D;
			size_t dst = h * per_head + (size_t)t * D;

			memcpy(keys + dst, k + src, sizeof(float) * D);
			memcpy(keys + H * per_head + dst, v + src,
			       sizeof(float) * D);
		}
	}
	memset(&a, 0, sizeof(a));
	a.q_heads = st->q_heads;
	a.kv_heads = H;
	a.head_dim = D;
	a.scale = 1.0f / sqrtf((float)D);
	a.k_resid = keys;
	a.v_resid = keys + H * per_head;
	a.k_resid_stride = tokens;
	a.v_resid_stride = tokens;
	for (t = 0; t < tokens && !err; t++) {
		a.q = q + t * q_floats;
		a.out = out + t * q_floats;
		a.k_resid_len = t + 1;
		a.v_resid_len = t + 1;
		err = st->backend->attend(&a);
	}
	free(keys);
	return err;
}

int kvs_stream_prefill(struct kvs_stream *st, const float *q, const float *k,
		       const float *v, uint32_t tokens, float *out)
{
	size_t q_floats, kv_floats;
	struct kvs_trace_row row;
	struct kvs_lengths next;
	struct sealed *pending;
	float *result = NULL;
	uint32_t t;
	int err;

	if (!st || !k || !v || tokens == 0 || tokens == UINT32_MAX ||
	    (out && !q)) {
		kvs_log(KVS_LOG_ERR, "stream prefill: need k, v, tokens > 0, "
				     "and q when out is given");
		return -KVS_EPARAM;
	}
	if (st->len.tokens != 0) {
		kvs_log(KVS_LOG_ERR, "stream prefill: stream holds %u tokens",
			st->len.tokens);
		return -KVS_EPARAM;
	}
	q_floats = (size_t)tokens * st->q_heads * st->shape.head_dim;
	kv_floats = (size_t)tokens * row_floats(st);
	err = out ? finite_rows("query", q, q_floats) : 0;
	if (!err)
		err = finite_rows("key", k, kv_floats);
	if (!err)
		err = finite_rows("value", v, kv_floats);
	if (err)
		return err;

	if (out) {
		result = malloc(sizeof(float) * q_floats);
		if (!result) {
			kvs_log(KVS_LOG_ERR, "stream prefill: out of memory");
			return -ENOMEM;
		}
		err = prefill_attend(st, q, k, v, tokens, result);
		if (err)
			goto fail_attend;
	}
	for (t = 0; t < tokens; t++) {
		next = st->len;
		kvs_lengths_advance(&next, st->shape.residual, st->order, &row);
		append_token(st, k + t * row_floats(st),
			     v + t * row_floats(st));
		if (next.k_quant != st->len.k_quant) {
			err = prepare_seal(st, next.k_quant, &pending);
			if (err)
				goto fail_build;
			commit_seal(st, next.k_quant, pending);
		}
		st->len = next;
	}
	if (out)
		memcpy(out, result, sizeof(float) * q_floats);
	free(result);
	return 0;

fail_build:
	stream_clear(st);
fail_attend:
	free(result);
	return err;
}

uint32_t kvs_stream_tokens(const struct kvs_stream *st)
{
	return st ? st->len.tokens : 0;
}

uint32_t kvs_stream_r_k(const struct kvs_stream *st)
{
	return st ? st->len.tokens - st->len.k_quant : 0;
}

uint32_t kvs_stream_r_v(const struct kvs_stream *st)
{
	return st ? st->len.tokens - st->len.v_quant : 0;
}

uint32_t kvs_stream_block_count(const struct kvs_stream *st)
{
	return st ? st->block_count : 0;
}

const struct kvs_view *kvs_stream_block(const struct kvs_stream *st, uint32_t i)
{
	if (!st || i >= st->block_count)
		return NULL;
	return &st->blocks[i]->view;
}

const uint8_t *kvs_stream_block_data(const struct kvs_stream *st, uint32_t i,
				     size_t *len)
{
	if (!st || i >= st->block_count)
		return NULL;
	if (len)
		*len = st->blocks[i]->len;
	return st->blocks[i]->obj;
}

/* 0 if @view is an object of @kind for this stream's shape, layer and
 * model; else -KVS_EKIND or -KVS_EPARAM (logged). */
static int check_handoff(const struct kvs_stream *st,
			 const struct kvs_view *view, enum kvs_kind kind,
			 const char *what, uint32_t index)
{
	const struct kvs_ident *id = &view->hdr.ident;

	if (view->hdr.kind != kind) {
		kvs_log(KVS_LOG_ERR, "stream resume: %s %u is of kind %u", what,
			index, view->hdr.kind);
		return -KVS_EKIND;
	}
	if (!kvs_shape_same(&view->hdr.shape, &st->shape) ||
	    id->layer != st->ident.layer ||
	    memcmp(id->model_fp, st->ident.model_fp, KVS_ID_SIZE) != 0) {
		kvs_log(KVS_LOG_ERR,
			"stream resume: %s %u is of another shape, layer or "
			"model",
			what, index);
		return -KVS_EPARAM;
	}
	return 0;
}

/* Copies, opens and checks handoff block st->block_count. */
static int resume_block(struct kvs_stream *st, const uint8_t *bytes, size_t len)
{
	uint32_t index = st->block_count;
	const struct kvs_ident *id;
	const uint8_t *parent;
	struct sealed *s;
	int err;

	err = grow_blocks(st);
	if (err)
		return err;
	s = sealed_alloc(len);
	if (!s)
		return -ENOMEM;
	memcpy(s->obj, bytes, len);
	err = kvs_object_open(s->obj, len, 0, &s->view);
	if (!err)
		err = check_handoff(st, &s->view, KVS_KIND_BLOCK, "block",
				    index);
	if (err)
		goto fail_check;
	id = &s->view.hdr.ident;
	parent = parent_of(st, index);
	if (id->first_pos != (uint64_t)index * st->shape.span ||
	    (index > 0 && memcmp(id->parent_id, parent, KVS_ID_SIZE) != 0)) {
		kvs_log(KVS_LOG_ERR,
			"stream resume: block %u is not at position %llu after "
			"block %u",
			index, (unsigned long long)index * st->shape.span,
			index ? index - 1 : 0);
		err = -KVS_EPARAM;
		goto fail_check;
	}
	st->blocks[st->block_count++] = s;
	return 0;

fail_check:
	sealed_free(s);
	return err;
}

/* Checks the tail against the blocks and loads its rows into the window. */
static int resume_tail(struct kvs_stream *st, const struct kvs_view *tail)
{
	enum kvs_dtype dtype = (enum kvs_dtype)tail->hdr.tail_dtype;
	uint32_t R = st->shape.residual, D = st->shape.head_dim;
	uint32_t r_k = tail->hdr.r_k, r_v = tail->hdr.r_v, h, t, d;
	uint64_t tokens = tail->hdr.ident.first_pos + r_v;
	uint64_t k_quant = (uint64_t)st->block_count * st->shape.span;
	const void *keys = tail->section[KVS_SEC_KEY_RESID];
	const void *values = tail->section[KVS_SEC_VAL_RESID];
	int err;

	err = check_handoff(st, tail, KVS_KIND_TAIL, "tail", 0);
	if (err)
		return err;
	if (tokens >= UINT32_MAX || tokens - k_quant != r_k ||
	    r_v != (tokens < R ? tokens : R)) {
		kvs_log(KVS_LOG_ERR,
			"stream resume: tail (first_pos %llu, r_K %u, r_V %u) "
			"does not follow %u blocks of %u",
			(unsigned long long)tail->hdr.ident.first_pos, r_k, r_v,
			st->block_count, st->shape.span);
		return -KVS_EPARAM;
	}
	st->len.tokens = (uint32_t)tokens;
	st->len.k_quant = (uint32_t)k_quant;
	st->len.v_quant = st->len.tokens - r_v;
	st->win_start = st->len.v_quant;
	for (h = 0; h < st->shape.kv_heads; h++) {
		for (t = st->len.v_quant; t < st->len.tokens; t++) {
			float *krow = win_row(st, st->win_k, h, t);
			float *vrow = win_row(st, st->win_v, h, t);
			size_t v_at =
				((size_t)h * r_v + t - st->len.v_quant) * D;
			size_t k_at =
				((size_t)h * r_k + t - st->len.k_quant) * D;

			/* Keys below k_quant are in the blocks. */
			for (d = 0; d < D; d++) {
				vrow[d] =
					kvs_dtype_load(dtype, values, v_at + d);
				krow[d] = t < st->len.k_quant
						  ? 0.0f
						  : kvs_dtype_load(dtype, keys,
								   k_at + d);
			}
		}
	}
	return 0;
}

int kvs_stream_resume(struct kvs_stream *st, const uint8_t *const *blocks,
		      const size_t *block_lens, uint32_t count,
		      const uint8_t *tail, size_t tail_len)
{
	struct kvs_view view;
	uint32_t i;
	int err;

	if (!st || !tail || (count && (!blocks || !block_lens))) {
		kvs_log(KVS_LOG_ERR, "stream resume: missing argument");
		return -KVS_EPARAM;
	}
	for (i = 0; i < count; i++) {
		if (!blocks[i]) {
			kvs_log(KVS_LOG_ERR, "stream resume: block %u missing",
				i);
			return -KVS_EPARAM;
		}
	}
	if (st->len.tokens != 0) {
		kvs_log(KVS_LOG_ERR, "stream resume: stream holds %u tokens",
			st->len.tokens);
		return -KVS_EPARAM;
	}
	err = kvs_object_open(tail, tail_len, 0, &view);
	if (err)
		return err;
	for (i = 0; i < count && !err; i++)
		err = resume_block(st, blocks[i], block_lens[i]);
	if (!err)
		err = resume_tail(st, &view);
	kvs_view_release(&view);
	if (err)
		stream_clear(st);
	return err;
}

/* Copies window rows [first, first + n) of every head into @dst,
 * [head][n][D] of @dtype. */
static void gather_rows(const struct kvs_stream *st, float *base,
			uint32_t first, uint32_t n, enum kvs_dtype dtype,
			void *dst)
{
	uint32_t D = st->shape.head_dim, h, t, d;
	size_t o = 0;

	for (h = 0; h < st->shape.kv_heads; h++)
		for (t = 0; t < n; t++) {
			const float *row = win_row(st, base, h, first + t);

			for (d = 0; d < D; d++)
				kvs_dtype_store(dtype, dst, o++, row[d]);
		}
}

int kvs_stream_tail(const struct kvs_stream *st, enum kvs_dtype dtype,
		    uint8_t **out, size_t *out_len)
{
	uint32_t T, key_first, val_first, r_k, r_v, i;
	struct kvs_ident ident;
	const uint8_t *parent;
	uint32_t *positions;
	uint8_t *keys;
	size_t esize, key_bytes, val_bytes;
	int err;

	esize = kvs_dtype_size(dtype);
	if (!st || !out || !out_len || esize == 0) {
		kvs_log(KVS_LOG_ERR, "stream tail: bad argument or dtype %d",
			(int)dtype);
		return -KVS_EPARAM;
	}
	T = st->len.tokens;
	key_first = st->block_count * st->shape.span;
	val_first = st->len.v_quant < key_first ? st->len.v_quant : key_first;
	r_k = T - key_first;
	r_v = T - val_first;
	if (r_k >= st->shape.residual || r_v > st->shape.residual) {
		/* Only when S > R and the open block holds sealed Keys: a
		 * tail carries at most R - 1 Key and R Value rows. */
		kvs_log(KVS_LOG_ERR,
			"stream tail: %u Key rows outside finished blocks "
			"exceed R - 1 = %u (S > R, open block)",
			r_k, st->shape.residual - 1);
		return -KVS_EPARAM;
	}

	memset(&ident, 0, sizeof(ident));
	memcpy(ident.model_fp, st->ident.model_fp, KVS_ID_SIZE);
	ident.layer = st->ident.layer;
	ident.first_pos = val_first;
	parent = parent_of(st, st->block_count);
	if (parent)
		memcpy(ident.parent_id, parent, KVS_ID_SIZE);

	err = -ENOMEM;
	key_bytes = esize * r_k * row_floats(st);
	val_bytes = esize * r_v * row_floats(st);
	positions = malloc(sizeof(*positions) * (r_v ? r_v : 1));
	if (!positions)
		goto fail_positions;
	keys = malloc(key_bytes + val_bytes + 1);
	if (!keys)
		goto fail_keys;
	for (i = 0; i < r_v; i++)
		positions[i] = val_first + i;
	err = kvs_span_id(KVS_STREAM_POSITION_NS, ident.model_fp, parent,
			  positions, r_v, ident.block_id);
	if (err)
		goto fail_id;
	gather_rows(st, st->win_k, key_first, r_k, dtype, keys);
	gather_rows(st, st->win_v, val_first, r_v, dtype, keys + key_bytes);
	err = kvs_tail_encode(&st->shape, &ident, dtype, r_k, r_v, keys,
			      keys + key_bytes, 0, out, out_len);
fail_id:
	free(keys);
fail_keys:
	free(positions);
fail_positions:
	if (err == -ENOMEM)
		kvs_log(KVS_LOG_ERR, "stream tail: out of memory");
	return err;
}
