/*
 * trace - the decode-side residual state machine on lengths alone
 * (DESIGN.md §2, seed §5), and the names of the two compute orders.
 *
 * Key: new keys append to the residual; when it holds R they all move to
 * the history.  Value: FIFO; past R the oldest moves to the history.  The
 * orders differ only in which lengths the current step computes with:
 * `kivi` forms the logits before the Key seal and the output before the
 * Value pop (so up to R Keys and R + 1 Values in full precision), `paper`
 * computes over the already updated cache.
 */
#include <string.h>

#include "kvstash/log.h"
#include "kvstash/stream.h"
#include "stream_internal.h"

int kvs_order_parse(const char *s, enum kvs_order *out)
{
	if (s && strcmp(s, "kivi") == 0) {
		*out = KVS_ORDER_KIVI;
		return 0;
	}
	if (s && strcmp(s, "paper") == 0) {
		*out = KVS_ORDER_PAPER;
		return 0;
	}
	kvs_log(KVS_LOG_ERR, "order: '%s' is neither 'kivi' nor 'paper'",
		s ? s : "(null)");
	return -KVS_EPARAM;
}

const char *kvs_order_name(enum kvs_order order)
{
	switch (order) {
	case KVS_ORDER_KIVI:
		return "kivi";
	case KVS_ORDER_PAPER:
		return "paper";
	}
	return NULL;
}

void kvs_lengths_advance(struct kvs_lengths *len, uint32_t residual,
			 enum kvs_order order, struct kvs_trace_row *row)
{
	uint32_t tokens = len->tokens + 1;
	uint32_t k_quant = len->k_quant;
	uint32_t v_quant = len->v_quant;

	if (tokens - k_quant == residual)
		k_quant += residual;
	if (tokens - v_quant > residual)
		v_quant++;

	row->tokens = tokens;
	if (order == KVS_ORDER_KIVI) {
		row->k_compute_quant = len->k_quant;
		row->v_compute_quant = len->v_quant;
	} else {
		row->k_compute_quant = k_quant;
		row->v_compute_quant = v_quant;
	}
	row->k_compute_full = tokens - row->k_compute_quant;
	row->v_compute_full = tokens - row->v_compute_quant;
	row->k_persist_quant = k_quant;
	row->k_persist_full = tokens - k_quant;
	row->v_persist_quant = v_quant;
	row->v_persist_full = tokens - v_quant;

	len->tokens = tokens;
	len->k_quant = k_quant;
	len->v_quant = v_quant;
}

int kvs_trace(uint32_t residual, uint32_t group, enum kvs_order order,
	      uint32_t steps, struct kvs_trace_row *rows)
{
	struct kvs_lengths len = { 0, 0, 0 };
	uint32_t i;

	if (residual == 0 || group == 0 || residual % group != 0) {
		kvs_log(KVS_LOG_ERR,
			"trace: need R > 0, G > 0 and R %% G == 0 (R=%u G=%u)",
			residual, group);
		return -KVS_EPARAM;
	}
	if (order != KVS_ORDER_KIVI && order != KVS_ORDER_PAPER) {
		kvs_log(KVS_LOG_ERR, "trace: unknown order %d", (int)order);
		return -KVS_EPARAM;
	}
	if (steps > 0 && !rows) {
		kvs_log(KVS_LOG_ERR, "trace: no row array for %u steps", steps);
		return -KVS_EPARAM;
	}
	for (i = 0; i < steps; i++)
		kvs_lengths_advance(&len, residual, order, &rows[i]);
	return 0;
}

void kvs_lengths_after(uint32_t tokens, uint32_t residual,
		       struct kvs_lengths *out)
{
	out->tokens = tokens;
	out->k_quant = tokens - tokens % residual;
	out->v_quant = tokens > residual ? tokens - residual : 0;
}
