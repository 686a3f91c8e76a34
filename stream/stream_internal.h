/*
 * stream_internal - what the stream's files share beyond stream.h (whose
 * kvs_lengths_advance is the one residual rule of kvs_trace, the stream
 * and the decode runtime).
 */
#ifndef KVSTASH_STREAM_INTERNAL_H
#define KVSTASH_STREAM_INTERNAL_H

#include <stdint.h>

#include "kvstash/stream.h"

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
