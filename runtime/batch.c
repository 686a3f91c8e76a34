/*
 * batch.c - batches and the decode step.
 *
 * A batch owns the residual slots of its sequences (slot i is the i-th
 * sequence in step order); destroying a sequence moves the later ones down
 * one slot, so the order stays the creation order.  A step of a layer
 * runs over a range of slots: the whole batch (kvs_batch_step) or one
 * sequence (kvs_seq_step).  The host mirror of the lengths says before
 * anything runs which sequences seal in this step, so their pages are
 * taken from the pool first and a short pool changes nothing.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kvstash/log.h"
#include "runtime_internal.h"

static void slots_free(struct kvs_rt *rt, struct rt_slots *s)
{
	if (s->k_resid && s->v_resid && s->lens && s->table)
		rt->eng->slots_fini(rt, s);
	free(s->k_resid);
	free(s->v_resid);
	free(s->lens);
	free(s->table);
}

/* The slots of @cap sequences: strides and per-layer arrays here, their
 * memory from the device. */
static int slots_alloc(struct kvs_rt *rt, struct rt_slots *s, uint32_t cap)
{
	uint32_t L = rt->cfg.layers;
	int err;

	memset(s, 0, sizeof(*s));
	s->cap = cap;
	s->k_stride = rt->cfg.shape.residual;
	/* the FIFO is compacted once every R + 1 pops (kernels.h) */
	s->v_stride = 2 * rt->cfg.shape.residual + 2;
	s->k_resid = calloc(L, sizeof(*s->k_resid));
	s->v_resid = calloc(L, sizeof(*s->v_resid));
	s->lens = calloc(L, sizeof(*s->lens));
	s->table = calloc(L, sizeof(*s->table));
	if (!s->k_resid || !s->v_resid || !s->lens || !s->table) {
		slots_free(rt, s);
		kvs_log(KVS_LOG_ERR, "batch: out of memory");
		return -ENOMEM;
	}
	err = rt->eng->slots_init(rt, s);
	if (err)
		slots_free(rt, s);
	return err;
}

int kvs_batch_create(struct kvs_rt *rt, uint32_t capacity,
		     struct kvs_batch **out)
{
	struct kvs_batch *b;
	int err;

	if (!rt || !out || capacity == 0 || capacity > (1u << 20)) {
		kvs_log(KVS_LOG_ERR, "batch: need a runtime and a capacity in "
				     "1 .. 2^20");
		return -KVS_EPARAM;
	}
	err = -ENOMEM;
	b = calloc(1, sizeof(*b));
	if (!b)
		goto fail_batch;
	b->rt = rt;
	b->cap = capacity;
	b->seqs = calloc(capacity, sizeof(*b->seqs));
	b->which = malloc(sizeof(*b->which) * capacity);
	b->pages = malloc(sizeof(*b->pages) * capacity);
	if (!b->seqs || !b->which || !b->pages)
		goto fail_arrays;
	err = slots_alloc(rt, &b->slots, capacity);
	if (err)
		goto fail_arrays;
	b->next = rt->batches;
	if (rt->batches)
		rt->batches->prev = b;
	rt->batches = b;
	*out = b;
	return 0;

fail_arrays:
	free(b->seqs);
	free(b->which);
	free(b->pages);
	free(b);
fail_batch:
	if (err == -ENOMEM)
		kvs_log(KVS_LOG_ERR, "batch: out of memory");
	return err;
}

void kvs_batch_destroy(struct kvs_batch *b)
{
	if (!b)
		return;
	while (b->n)
		kvs_seq_destroy(b->seqs[b->n - 1]);
	slots_free(b->rt, &b->slots);
	if (b->prev)
		b->prev->next = b->next;
	else
		b->rt->batches = b->next;
	if (b->next)
		b->next->prev = b->prev;
	free(b->seqs);
	free(b->which);
	free(b->pages);
	free(b);
}

uint32_t kvs_batch_size(const struct kvs_batch *b)
{
	return b ? b->n : 0;
}

struct kvs_seq *kvs_batch_seq(const struct kvs_batch *b, uint32_t i)
{
	return b && i < b->n ? b->seqs[i] : NULL;
}

/* @len after one more token: the stream's residual rule. */
static struct rt_len after_step(const struct rt_len *len, uint32_t R)
{
	struct kvs_lengths l = { len->tokens, len->k_quant, len->v_quant };
	struct kvs_trace_row row;

	kvs_lengths_advance(&l, R, KVS_ORDER_KIVI, &row);
	return (struct rt_len){ l.tokens, l.k_quant, l.v_quant };
}

/*
 * One decode step of @layer for slots [first, first + count): the seals
 * it makes are planned from the host mirror, their pages taken, then the
 * engine runs the order's ops and the mirror follows.
 */
static int step_range(struct kvs_batch *b, uint32_t first, uint32_t count,
		      uint32_t layer, const void *q, const void *k,
		      const void *v, void *out)
{
	struct kvs_rt *rt = b->rt;
	const struct rt_engine_ops *eng = rt->eng;
	uint32_t R = rt->cfg.shape.residual, S = rt->cfg.shape.span;
	uint32_t seals = 0, max_tokens = 0, i;
	int err;

	if (layer >= rt->cfg.layers || !q || !k || !v || !out) {
		kvs_log(KVS_LOG_ERR, "step: layer %u of %u, or no q/k/v/out",
			layer, rt->cfg.layers);
		return -KVS_EPARAM;
	}
	for (i = 0; i < count; i++) {
		struct kvs_seq *seq = b->seqs[first + i];
		const struct rt_len *len = &seq->layer[layer].len;

		err = kvs_seq_attach_wait(seq, layer);
		if (err)
			return err;
		if (len->tokens >= rt->cfg.max_tokens) {
			kvs_log(KVS_LOG_ERR,
				"step: sequence %u holds max_tokens %u",
				first + i, rt->cfg.max_tokens);
			return -KVS_EPARAM;
		}
		if (after_step(len, R).k_quant != len->k_quant)
			b->which[seals++] = (int32_t)i;
		if (len->tokens + 1 > max_tokens)
			max_tokens = len->tokens + 1;
	}
	err = eng->check(rt, count, q, k, v);
	if (err)
		return err;
	err = rt_pool_take(rt, seals, b->pages);
	if (err)
		return err;

	err = eng->append(rt, &b->slots, first, count, layer, k, v);
	if (!err && rt->cfg.order == KVS_ORDER_KIVI)
		err = eng->attend(rt, &b->slots, first, count, layer, q, out,
				  max_tokens);
	if (!err && seals)
		err = eng->seal(rt, &b->slots, first, layer, b->which, b->pages,
				seals);
	if (!err)
		err = eng->pop(rt, &b->slots, first, count, layer);
	if (!err && rt->cfg.order == KVS_ORDER_PAPER)
		err = eng->attend(rt, &b->slots, first, count, layer, q, out,
				  max_tokens);
	if (err) {
		/* the device's state is lost with its error; the pages were
		 * not recorded anywhere */
		for (i = 0; i < seals; i++)
			rt_pool_put(rt, b->pages[i]);
		return err;
	}

	for (i = 0; i < seals; i++) {
		struct rt_layer *ly =
			&b->seqs[first + b->which[i]]->layer[layer];
		uint32_t span = ly->len.k_quant / S;

		ly->pages[span] = b->pages[i];
		ly->origin[span] = RT_PAGE_SEALED;
	}
	for (i = 0; i < count; i++) {
		struct rt_len *len = &b->seqs[first + i]->layer[layer].len;

		*len = after_step(len, R);
	}
	if (seals)
		rt_count(rt, &rt->stats.sealed, seals);
	return 0;
}

int kvs_batch_step(struct kvs_batch *b, uint32_t layer, const void *q,
		   const void *k, const void *v, void *out)
{
	if (!b || b->n == 0) {
		kvs_log(KVS_LOG_ERR, "batch step: empty batch");
		return -KVS_EPARAM;
	}
	return step_range(b, 0, b->n, layer, q, k, v, out);
}

int kvs_seq_step(struct kvs_seq *seq, uint32_t layer, const void *q,
		 const void *k, const void *v, void *out)
{
	if (!seq)
		return -KVS_EPARAM;
	return step_range(seq->batch, seq->index, 1, layer, q, k, v, out);
}

/* ---- prefill ----------------------------------------------------------------
 */

/* Blocks sealed straight from the inputs: the layer holds only whole
 * spans and the prompt part covers the Value FIFO. */
static int prefill_direct(struct kvs_seq *seq, uint32_t layer, const void *k,
			  const void *v, uint32_t n)
{
	struct kvs_batch *b = seq->batch;
	struct kvs_rt *rt = b->rt;
	struct rt_layer *ly = &seq->layer[layer];
	uint32_t R = rt->cfg.shape.residual, S = rt->cfg.shape.span;
	uint32_t T0 = ly->len.tokens, T = T0 + n, i;
	struct kvs_lengths after;
	uint32_t k_quant, r_v, blocks;
	struct rt_dev_len dev;
	int32_t *pages = NULL;
	int err;

	kvs_lengths_after(T, R, &after);
	k_quant = after.k_quant;
	r_v = T - after.v_quant;
	blocks = (k_quant - T0) / R;
	err = rt_pool_take_array(rt, blocks, &pages);
	if (err)
		return err;
	memset(&dev, 0, sizeof(dev));
	dev.k_quant = k_quant;
	dev.v_quant = T - r_v;
	dev.k_resid = T - k_quant;
	dev.v_resid = r_v;
	err = rt->eng->prefill(rt, &b->slots, seq->index, layer, k, v, n, pages,
			       blocks, T0 / S, &dev);
	if (err) {
		for (i = 0; i < blocks; i++)
			rt_pool_put(rt, pages[i]);
		free(pages);
		return err;
	}
	for (i = 0; i < blocks; i++) {
		ly->pages[T0 / S + i] = pages[i];
		ly->origin[T0 / S + i] = RT_PAGE_SEALED;
	}
	ly->len.tokens = T;
	ly->len.k_quant = k_quant;
	ly->len.v_quant = T - r_v;
	free(pages);
	if (blocks)
		rt_count(rt, &rt->stats.sealed, blocks);
	return 0;
}

/* Token by token through the decode ops without attention: for a layer
 * that already holds residuals. */
static int prefill_steps(struct kvs_seq *seq, uint32_t layer, const void *k,
			 const void *v, uint32_t n)
{
	struct kvs_batch *b = seq->batch;
	struct kvs_rt *rt = b->rt;
	const struct rt_engine_ops *eng = rt->eng;
	struct rt_layer *ly = &seq->layer[layer];
	uint32_t R = rt->cfg.shape.residual, S = rt->cfg.shape.span;
	uint32_t T = ly->len.tokens + n;
	uint32_t blocks = (T - T % R - ly->len.k_quant) / R, used = 0, t;
	const void *k_row, *v_row;
	int32_t *pages = NULL, zero = 0;
	int err = 0;

	err = rt_pool_take_array(rt, blocks, &pages);
	if (err)
		return err;
	for (t = 0; t < n && !err; t++) {
		err = eng->token(rt, k, v, n, t, &k_row, &v_row);
		if (!err)
			err = eng->append(rt, &b->slots, seq->index, 1, layer,
					  k_row, v_row);
		if (!err && ly->len.tokens + 1 - ly->len.k_quant == R) {
			uint32_t span = ly->len.k_quant / S;

			err = eng->seal(rt, &b->slots, seq->index, layer, &zero,
					&pages[used], 1);
			if (!err) {
				ly->pages[span] = pages[used++];
				ly->origin[span] = RT_PAGE_SEALED;
				ly->len.k_quant += R;
			}
		}
		if (!err)
			err = eng->pop(rt, &b->slots, seq->index, 1, layer);
		if (!err) {
			ly->len.tokens++;
			if (ly->len.tokens - ly->len.v_quant > R)
				ly->len.v_quant++;
		}
	}
	for (t = used; t < blocks; t++)
		rt_pool_put(rt, pages[t]);
	free(pages);
	if (used)
		rt_count(rt, &rt->stats.sealed, used);
	return err;
}

int kvs_seq_prefill(struct kvs_seq *seq, uint32_t layer, const void *k,
		    const void *v, uint32_t n)
{
	struct kvs_rt *rt;
	const struct rt_len *len;
	uint32_t T, R;
	int err;

	if (!k || !v || n == 0) {
		kvs_log(KVS_LOG_ERR, "prefill: need k, v and n > 0");
		return -KVS_EPARAM;
	}
	err = rt_seq_layer_ready(seq, layer);
	if (err)
		return err;
	rt = seq->batch->rt;
	R = rt->cfg.shape.residual;
	len = &seq->layer[layer].len;
	if ((uint64_t)len->tokens + n > rt->cfg.max_tokens) {
		kvs_log(KVS_LOG_ERR,
			"prefill: %u + %u tokens exceed max_tokens %u",
			len->tokens, n, rt->cfg.max_tokens);
		return -KVS_EPARAM;
	}
	err = rt->eng->check(rt, n, NULL, k, v);
	if (err)
		return err;
	T = len->tokens + n;
	if (len->k_quant == len->tokens && len->v_quant == len->tokens &&
	    n >= (T < R ? T : R))
		return prefill_direct(seq, layer, k, v, n);
	return prefill_steps(seq, layer, k, v, n);
}
