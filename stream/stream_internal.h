/*
 * stream_internal - the residual length state machine shared by kvs_trace
 * (lengths only) and the stream (real K/V), so both follow one rule.
 */
#ifndef KVSTASH_STREAM_INTERNAL_H
#define KVSTASH_STREAM_INTERNAL_H

#include <stdint.h>

#include "kvstash/stream.h"

/* Persisted lengths: tokens seen, Keys and Values in the history. */
struct kvs_lengths {
	uint32_t tokens;
	uint32_t k_quant;
	uint32_t v_quant;
};

/*
 * kvs_lengths_advance - one single-token decode step: fills @row with the
 * lengths the current computation uses (per @order) and those persisted
 * after it, and moves @len to the persisted state.  @residual > 0 and
 * len->tokens < UINT32_MAX are the caller's to ensure.
 */
void kvs_lengths_advance(struct kvs_lengths *len, uint32_t residual,
			 enum kvs_order order, struct kvs_trace_row *row);

/* 1 if two shapes are field by field the same. */
static inline int kvs_shape_same(const struct kvs_shape *a,
				 const struct kvs_shape *b)
{
	return a->kv_heads == b->kv_heads && a->head_dim == b->head_dim &&
	       a->group == b->group && a->bits == b->bits &&
	       a->meta_type == b->meta_type && a->span == b->span &&
	       a->residual == b->residual;
}

#endif
