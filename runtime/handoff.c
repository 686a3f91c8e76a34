/*
 * handoff.c - the prefill -> decode handoff: a layer's residual tail as
 * the format's tail object (the Keys after the last sealed span, the last
 * min(T, R) Values, in kv_dtype), and the export / import of a whole
 * sequence through the block store: the sealed spans as published blocks,
 * the tails under per-layer keys derived from a request id.
 *
 * With S == R the tail of a layer holding T tokens has r_K = T mod R Key
 * rows (from the last span boundary) and r_V = min(T, R) Value rows (from
 * T - r_V, which may lie in a sealed span: those Values are still full
 * precision in the FIFO).  Its ident: this layer, first_pos = T - r_V, the
 * parent the last sealed span's id, its own id the span id of the tokens
 * it carries Values of (all-zero when their ids are not known).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kvstash/log.h"
#include "runtime_internal.h"

int kvs_seq_tail_encode(const struct kvs_seq *cseq, uint32_t layer,
			uint8_t **out, size_t *out_len)
{
	/* the ids cache fills on demand: not a visible change */
	struct kvs_seq *seq = (struct kvs_seq *)cseq;
	struct kvs_rt *rt;
	const struct rt_len *len;
	struct kvs_ident ident;
	uint32_t r_k, r_v, S, known, rows;
	size_t row, esize, i;
	float *kf = NULL;
	uint8_t *kt = NULL;
	int err;

	if (!out || !out_len)
		return -KVS_EPARAM;
	err = rt_seq_layer_ready(seq, layer);
	if (err)
		return err;
	rt = seq->batch->rt;
	err = rt->eng->sync(rt);
	if (err)
		return err;
	S = rt->cfg.shape.span;
	len = &seq->layer[layer].len;
	r_k = len->tokens - len->k_quant;
	r_v = len->tokens - len->v_quant;
	row = (size_t)rt->cfg.shape.kv_heads * rt->cfg.shape.head_dim;
	esize = kvs_dtype_size(rt->cfg.kv_dtype);
	rows = r_k + r_v;
	kf = malloc(sizeof(float) * row * (rows ? rows : 1));
	kt = malloc(esize * row * (rows ? rows : 1));
	if (!kf || !kt) {
		err = -ENOMEM;
		kvs_log(KVS_LOG_ERR, "tail: out of memory");
		goto out;
	}
	err = rt->eng->resid_read(rt, &seq->batch->slots, seq->index, layer, kf,
				  r_k, kf + row * r_k, r_v);
	if (err)
		goto out;
	for (i = 0; i < row * rows; i++)
		kvs_dtype_store(rt->cfg.kv_dtype, kt, i, kf[i]);

	known = rt_seq_span_ids(seq);
	memset(&ident, 0, sizeof(ident));
	memcpy(ident.model_fp, rt->model_fp, KVS_ID_SIZE);
	ident.layer = layer;
	ident.first_pos = len->v_quant;
	if (len->k_quant / S > 0 && len->k_quant / S <= known)
		memcpy(ident.parent_id, seq->span_ids[len->k_quant / S - 1],
		       KVS_ID_SIZE);
	if (seq->n_ids >= len->tokens && r_v) {
		err = kvs_span_id(rt->name_space, rt->model_fp,
				  len->k_quant / S ? ident.parent_id : NULL,
				  seq->ids + len->v_quant, r_v, ident.block_id);
		if (err)
			goto out;
	}
	err = kvs_tail_encode(&rt->cfg.shape, &ident, rt->cfg.kv_dtype, r_k,
			      r_v, kt, kt + esize * row * r_k, 0, out, out_len);
out:
	free(kf);
	free(kt);
	return err;
}

/* 0 if @view is a tail this layer can load. */
static int check_tail(const struct kvs_rt *rt, const struct kvs_view *view,
		      uint32_t layer, const struct rt_len *len)
{
	const struct kvs_header *h = &view->hdr;
	const struct kvs_shape *s = &h->shape, *want = &rt->cfg.shape;
	uint64_t T = h->ident.first_pos + h->r_v;
	uint32_t R = want->residual;

	if (h->kind != KVS_KIND_TAIL) {
		kvs_log(KVS_LOG_ERR, "tail: object of kind %u", h->kind);
		return -KVS_EKIND;
	}
	if (s->kv_heads != want->kv_heads || s->head_dim != want->head_dim ||
	    s->group != want->group || s->bits != want->bits ||
	    s->meta_type != want->meta_type || s->span != want->span ||
	    s->residual != want->residual || h->ident.layer != layer ||
	    h->tail_dtype != rt->cfg.kv_dtype ||
	    memcmp(h->ident.model_fp, rt->model_fp, KVS_ID_SIZE) != 0) {
		kvs_log(KVS_LOG_ERR, "tail: of another shape, model, layer or "
				     "dtype");
		return -KVS_EPARAM;
	}
	if (T > rt->cfg.max_tokens || h->r_k >= R || T < h->r_k ||
	    h->r_v != (T < R ? T : R) || T - h->r_k != len->tokens ||
	    len->k_quant != len->tokens || len->v_quant != len->tokens) {
		kvs_log(KVS_LOG_ERR,
			"tail: %llu tokens (r_K %u, r_V %u) do not follow the "
			"layer's %u sealed tokens",
			(unsigned long long)T, h->r_k, h->r_v, len->tokens);
		return -KVS_EPARAM;
	}
	return 0;
}

int kvs_seq_tail_load(struct kvs_seq *seq, uint32_t layer, const uint8_t *obj,
		      size_t obj_len)
{
	struct kvs_rt *rt;
	struct kvs_view view;
	struct rt_len len;
	enum kvs_dtype dt;
	size_t row, i;
	float *kf;
	int err;

	if (!obj)
		return -KVS_EPARAM;
	err = rt_seq_layer_ready(seq, layer);
	if (err)
		return err;
	rt = seq->batch->rt;
	err = kvs_object_open(obj, obj_len, 0, &view);
	if (err)
		return err;
	err = check_tail(rt, &view, layer, &seq->layer[layer].len);
	if (err)
		goto out;
	row = (size_t)rt->cfg.shape.kv_heads * rt->cfg.shape.head_dim;
	dt = (enum kvs_dtype)view.hdr.tail_dtype;
	kf = malloc(sizeof(float) * row * (view.hdr.r_k + view.hdr.r_v + 1));
	if (!kf) {
		err = -ENOMEM;
		kvs_log(KVS_LOG_ERR, "tail: out of memory");
		goto out;
	}
	for (i = 0; i < row * view.hdr.r_k; i++)
		kf[i] = kvs_dtype_load(dt, view.section[KVS_SEC_KEY_RESID], i);
	for (i = 0; i < row * view.hdr.r_v; i++)
		kf[row * view.hdr.r_k + i] =
			kvs_dtype_load(dt, view.section[KVS_SEC_VAL_RESID], i);
	err = rt->eng->resid_write(rt, &seq->batch->slots, seq->index, layer,
				   kf, view.hdr.r_k, kf + row * view.hdr.r_k,
				   view.hdr.r_v);
	free(kf);
	if (err)
		goto out;
	len.tokens = (uint32_t)(view.hdr.ident.first_pos + view.hdr.r_v);
	len.k_quant = len.tokens - view.hdr.r_k;
	len.v_quant = len.tokens - view.hdr.r_v;
	err = rt_seq_layer_set(seq, layer, &len,
			       len.k_quant / rt->cfg.shape.span);
	if (!err)
		seq->layer[layer].len = len;
out:
	kvs_view_release(&view);
	return err;
}

int kvs_seq_export_tail(struct kvs_seq *seq,
			const uint8_t request_id[KVS_ID_SIZE], uint32_t ttl_ms)
{
	struct kvs_rt *rt;
	uint8_t key[KVS_ID_SIZE], *tail;
	size_t len;
	uint32_t l;
	int err;

	if (!seq || !request_id)
		return -KVS_EPARAM;
	rt = seq->batch->rt;
	if (!rt->store) {
		kvs_log(KVS_LOG_ERR, "export: the runtime has no block store");
		return -KVS_EPARAM;
	}
	err = kvs_seq_publish(seq);
	if (!err)
		err = kvs_rt_flush(rt);
	if (err) {
		kvs_log(KVS_LOG_ERR, "export: publishing the blocks failed: %s",
			kvs_strerror(err));
		return err;
	}
	for (l = 0; l < rt->cfg.layers; l++) {
		err = kvs_seq_tail_encode(seq, l, &tail, &len);
		if (!err)
			err = kvs_rt_tail_key(rt, request_id, l, key);
		if (!err) {
			err = kvs_blockstore_tail_put(rt->store, key, tail, len,
						      ttl_ms);
			free(tail);
		}
		if (err) {
			kvs_log(KVS_LOG_ERR, "export: tail of layer %u: %s", l,
				kvs_strerror(err));
			return err;
		}
	}
	return 0;
}

/* Takes layer @layer's tail into *@out (malloc'd). */
static int take_tail(struct kvs_rt *rt, const uint8_t request_id[KVS_ID_SIZE],
		     uint32_t layer, uint8_t **out, size_t *out_len)
{
	const struct kvs_shape *shape = &rt->cfg.shape;
	struct kvs_layout most;
	size_t cap = 4096, len = 0;
	uint8_t key[KVS_ID_SIZE], *buf = NULL, *grown;
	int err = kvs_rt_tail_key(rt, request_id, layer, key);

	/* room for the largest tail of this shape at once: a remote store
	 * takes a tail even when the buffer turns out short */
	if (!err &&
	    kvs_tail_layout(shape, rt->cfg.kv_dtype, shape->residual - 1,
			    shape->residual, &most) == 0)
		cap = most.total_size;

	while (!err) {
		grown = realloc(buf, cap);
		if (!grown) {
			err = -ENOMEM;
			break;
		}
		buf = grown;
		err = kvs_blockstore_tail_take(rt->store, key, buf, cap, &len);
		if (err == -ENOSPC && len > cap) {
			/* nothing was taken: ask again with room for it */
			cap = len;
			err = 0;
			continue;
		}
		break;
	}
	if (err) {
		free(buf);
		return err;
	}
	*out = buf;
	*out_len = len;
	return 0;
}

int kvs_seq_import_tail(struct kvs_seq *seq, const uint32_t *ids, size_t n,
			const uint8_t request_id[KVS_ID_SIZE])
{
	struct kvs_rt *rt;
	struct kvs_header h;
	uint8_t **tails;
	size_t *lens;
	uint32_t L, l, spans = 0;
	int err;

	if (!seq || (!ids && n) || !request_id)
		return -KVS_EPARAM;
	rt = seq->batch->rt;
	L = rt->cfg.layers;
	if (!rt->store || seq->attach || seq->n_ids ||
	    seq->layer[0].len.tokens) {
		kvs_log(KVS_LOG_ERR, "import: need a block store and an empty "
				     "sequence");
		return -KVS_EPARAM;
	}
	tails = calloc(L, sizeof(*tails));
	lens = calloc(L, sizeof(*lens));
	if (!tails || !lens) {
		err = -ENOMEM;
		goto out;
	}
	for (l = 0; l < L; l++) {
		err = take_tail(rt, request_id, l, &tails[l], &lens[l]);
		if (err) {
			kvs_log(KVS_LOG_ERR, "import: tail of layer %u: %s", l,
				kvs_strerror(err));
			goto out;
		}
	}
	err = kvs_header_decode(tails[0], lens[0], 0, &h);
	if (err)
		goto out;
	if (h.kind != KVS_KIND_TAIL || h.ident.first_pos + h.r_v < h.r_k ||
	    h.ident.first_pos + h.r_v - h.r_k > n) {
		kvs_log(KVS_LOG_ERR,
			"import: the tail follows more tokens "
			"than the %zu ids given",
			n);
		err = -KVS_EPARAM;
		goto out;
	}
	spans = (uint32_t)((h.ident.first_pos + h.r_v - h.r_k) /
			   rt->cfg.shape.span);
	err = kvs_seq_append_ids(seq, ids, n);
	if (!err && spans)
		err = rt_attach_start(seq, spans);
	for (l = 0; l < L && !err; l++) {
		err = kvs_seq_attach_wait(seq, l);
		if (!err)
			err = kvs_seq_tail_load(seq, l, tails[l], lens[l]);
	}
	if (err)
		kvs_seq_reset(seq);
out:
	for (l = 0; tails && l < L; l++)
		free(tails[l]);
	free(tails);
	free(lens);
	return err;
}
