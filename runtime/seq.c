/*
 * seq.c - sequences: creation in a batch slot, token ids and the span ids
 * they name, the host mirror of each layer (lengths, page table, where
 * each page came from), and reading sealed spans back (as encoded blocks
 * or dequantized).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kvstash/log.h"
#include "runtime_internal.h"

static void layers_free(struct kvs_seq *seq, uint32_t layers)
{
	uint32_t l;

	for (l = 0; l < layers; l++) {
		free(seq->layer[l].pages);
		free(seq->layer[l].origin);
	}
	free(seq->layer);
}

int kvs_seq_create(struct kvs_batch *b, struct kvs_seq **out)
{
	struct kvs_rt *rt;
	struct kvs_seq *seq;
	struct rt_dev_len zero;
	uint32_t l;
	int err;

	if (!b || !out)
		return -KVS_EPARAM;
	rt = b->rt;
	if (b->n == b->cap) {
		kvs_log(KVS_LOG_ERR, "sequence: batch full (%u)", b->cap);
		return -ENOSPC;
	}
	err = -ENOMEM;
	seq = calloc(1, sizeof(*seq));
	if (!seq)
		goto fail_seq;
	seq->layer = calloc(rt->cfg.layers, sizeof(*seq->layer));
	seq->span_ids = malloc(sizeof(*seq->span_ids) * rt->max_pages);
	if (!seq->layer || !seq->span_ids)
		goto fail_layers;
	for (l = 0; l < rt->cfg.layers; l++) {
		struct rt_layer *ly = &seq->layer[l];

		ly->pages = malloc(sizeof(*ly->pages) * rt->max_pages);
		ly->origin = calloc(rt->max_pages, 1);
		if (!ly->pages || !ly->origin)
			goto fail_layers;
		memset(ly->pages, 0xff, sizeof(*ly->pages) * rt->max_pages);
	}
	seq->batch = b;
	seq->index = b->n;
	memset(&zero, 0, sizeof(zero));
	for (l = 0; l < rt->cfg.layers; l++) {
		err = rt->eng->slot_set(rt, &b->slots, seq->index, l, &zero,
					NULL, 0);
		if (err)
			goto fail_slot;
	}
	b->seqs[b->n++] = seq;
	*out = seq;
	return 0;

fail_slot:
fail_layers:
	if (seq->layer)
		layers_free(seq, rt->cfg.layers);
	free(seq->span_ids);
	free(seq);
fail_seq:
	if (err == -ENOMEM)
		kvs_log(KVS_LOG_ERR, "sequence: out of memory");
	return err;
}

void rt_seq_clear(struct kvs_seq *seq)
{
	struct kvs_rt *rt = seq->batch->rt;
	uint32_t l, p;

	for (l = 0; l < rt->cfg.layers; l++) {
		struct rt_layer *ly = &seq->layer[l];

		for (p = 0; p < rt->max_pages; p++) {
			rt_pool_put(rt, ly->pages[p]);
			ly->pages[p] = -1;
		}
		memset(&ly->len, 0, sizeof(ly->len));
		ly->attach_used = false;
		/* an engine error here leaves lengths the mirror resets
		 * anyway: a later slot_set runs before any use */
		(void)rt_seq_layer_set(seq, l, &ly->len, 0);
	}
}

void kvs_seq_destroy(struct kvs_seq *seq)
{
	struct kvs_batch *b;
	struct kvs_rt *rt;
	uint32_t i;

	if (!seq)
		return;
	b = seq->batch;
	rt = b->rt;
	rt_attach_cancel(seq);
	rt_seq_clear(seq);
	/* the later sequences move down one slot each, keeping the order */
	for (i = seq->index + 1; i < b->n; i++) {
		if (rt->eng->slot_copy(rt, &b->slots, i, i - 1))
			kvs_log(KVS_LOG_ERR, "sequence: moving slot %u failed",
				i);
		b->seqs[i - 1] = b->seqs[i];
		b->seqs[i - 1]->index = i - 1;
	}
	b->n--;
	layers_free(seq, rt->cfg.layers);
	free(seq->span_ids);
	free(seq->ids);
	free(seq);
}

int kvs_seq_reset(struct kvs_seq *seq)
{
	if (!seq)
		return -KVS_EPARAM;
	rt_attach_cancel(seq);
	rt_seq_clear(seq);
	seq->n_ids = 0;
	seq->n_span_ids = 0;
	return 0;
}

uint32_t kvs_seq_index(const struct kvs_seq *seq)
{
	return seq->index;
}

uint32_t kvs_seq_tokens(const struct kvs_seq *seq, uint32_t layer)
{
	if (!seq || layer >= seq->batch->rt->cfg.layers)
		return 0;
	return seq->layer[layer].len.tokens;
}

uint32_t kvs_seq_id_count(const struct kvs_seq *seq)
{
	return seq ? (uint32_t)seq->n_ids : 0;
}

uint32_t kvs_seq_block_count(const struct kvs_seq *seq, uint32_t layer)
{
	if (!seq || layer >= seq->batch->rt->cfg.layers)
		return 0;
	return seq->layer[layer].len.k_quant / seq->batch->rt->cfg.shape.span;
}

int kvs_seq_append_ids(struct kvs_seq *seq, const uint32_t *ids, size_t n)
{
	size_t cap;
	uint32_t *grown;

	if (!seq || (!ids && n))
		return -KVS_EPARAM;
	if (seq->n_ids + n > seq->batch->rt->cfg.max_tokens) {
		kvs_log(KVS_LOG_ERR,
			"sequence: %zu token ids exceed "
			"max_tokens %u",
			seq->n_ids + n, seq->batch->rt->cfg.max_tokens);
		return -KVS_EPARAM;
	}
	if (seq->n_ids + n > seq->ids_cap) {
		cap = seq->ids_cap ? seq->ids_cap : 256;
		while (cap < seq->n_ids + n)
			cap *= 2;
		grown = realloc(seq->ids, sizeof(*grown) * cap);
		if (!grown) {
			kvs_log(KVS_LOG_ERR, "sequence: out of memory for ids");
			return -ENOMEM;
		}
		seq->ids = grown;
		seq->ids_cap = cap;
	}
	if (n)
		memcpy(seq->ids + seq->n_ids, ids, sizeof(*ids) * n);
	seq->n_ids += n;
	return 0;
}

uint32_t rt_seq_span_ids(struct kvs_seq *seq)
{
	struct kvs_rt *rt = seq->batch->rt;
	uint32_t S = rt->cfg.shape.span;
	uint32_t spans = (uint32_t)(seq->n_ids / S), i;

	for (i = seq->n_span_ids; i < spans; i++) {
		if (kvs_span_id(rt->name_space, rt->model_fp,
				i ? seq->span_ids[i - 1] : NULL,
				seq->ids + (size_t)i * S, S, seq->span_ids[i]))
			break;
	}
	seq->n_span_ids = i;
	return i;
}

void rt_seq_ident(struct kvs_seq *seq, uint32_t layer, uint32_t index,
		  struct kvs_ident *ident)
{
	struct kvs_rt *rt = seq->batch->rt;
	uint32_t known = rt_seq_span_ids(seq);

	memset(ident, 0, sizeof(*ident));
	memcpy(ident->model_fp, rt->model_fp, KVS_ID_SIZE);
	ident->layer = layer;
	ident->first_pos = (uint64_t)index * rt->cfg.shape.span;
	if (index < known)
		memcpy(ident->block_id, seq->span_ids[index], KVS_ID_SIZE);
	if (index > 0 && index - 1 < known)
		memcpy(ident->parent_id, seq->span_ids[index - 1], KVS_ID_SIZE);
}

int rt_seq_layer_ready(struct kvs_seq *seq, uint32_t layer)
{
	if (!seq || layer >= seq->batch->rt->cfg.layers) {
		kvs_log(KVS_LOG_ERR,
			"sequence: no sequence, or layer %u not "
			"of the model",
			layer);
		return -KVS_EPARAM;
	}
	return kvs_seq_attach_wait(seq, layer);
}

int rt_seq_layer_set(struct kvs_seq *seq, uint32_t layer,
		     const struct rt_len *len, uint32_t n_pages)
{
	struct kvs_rt *rt = seq->batch->rt;
	struct rt_dev_len dev;

	memset(&dev, 0, sizeof(dev));
	dev.k_quant = len->k_quant;
	dev.v_quant = len->v_quant;
	dev.k_resid = len->tokens - len->k_quant;
	dev.v_resid = len->tokens - len->v_quant;
	return rt->eng->slot_set(rt, &seq->batch->slots, seq->index, layer,
				 &dev, seq->layer[layer].pages, n_pages);
}

int kvs_seq_block(struct kvs_seq *seq, uint32_t layer, uint32_t index,
		  uint8_t **out, size_t *out_len)
{
	struct kvs_rt *rt;
	struct kvs_ident ident;
	uint8_t *image;
	int err;

	if (!out || !out_len)
		return -KVS_EPARAM;
	err = rt_seq_layer_ready(seq, layer);
	if (err)
		return err;
	rt = seq->batch->rt;
	if (index >= kvs_seq_block_count(seq, layer))
		return -KVS_EPARAM;
	err = rt->eng->sync(rt);
	if (err)
		return err;
	image = calloc(1, rt->layout.total_size);
	if (!image) {
		kvs_log(KVS_LOG_ERR, "sequence: out of memory for a block");
		return -ENOMEM;
	}
	err = rt->eng->page_read(rt, seq->layer[layer].pages[index], image);
	if (!err) {
		rt_seq_ident(seq, layer, index, &ident);
		err = kvs_block_finish(&rt->cfg.shape, &ident, image);
	}
	if (err) {
		free(image);
		return err;
	}
	*out = image;
	*out_len = rt->layout.total_size;
	return 0;
}

int kvs_seq_history(struct kvs_seq *seq, uint32_t layer, uint32_t first,
		    uint32_t count, enum kvs_dtype dtype, void *k, void *v)
{
	struct kvs_rt *rt;
	int err;

	if (!k || !v)
		return -KVS_EPARAM;
	/* an attached prefix counts once it is in */
	err = rt_seq_layer_ready(seq, layer);
	if (err)
		return err;
	rt = seq->batch->rt;
	if ((uint64_t)first + count > kvs_seq_block_count(seq, layer) ||
	    (dtype != KVS_DTYPE_F32 && dtype != KVS_DTYPE_F16 &&
	     dtype != KVS_DTYPE_BF16)) {
		kvs_log(KVS_LOG_ERR, "history: bad span range or dtype");
		return -KVS_EPARAM;
	}
	if (count == 0)
		return 0;
	return rt->eng->history(rt, seq->layer[layer].pages + first, count,
				dtype, k, v);
}
