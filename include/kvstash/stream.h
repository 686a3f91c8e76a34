/*
 * stream - the decode node's residual state (DESIGN.md §2) and the compute
 * backend interface.
 *
 * A stream is one layer of one request: sealed history (blocks of S tokens,
 * the format's bytes), the Key residual (sealed when it holds R tokens) and
 * the Value FIFO (at most R persisted, R+1 during a `kivi` step).  Attention
 * over it is one global softmax over all Key logits, split at the Value
 * boundary, which is not the Key boundary.
 *
 * The backend interface carries the compute ops so the whole pipeline runs
 * on the CPU reference and, behind the same calls, on CUDA.  The stream
 * and the CPU backend live in runtime/, the CUDA backend in kernels/.
 */
#ifndef KVSTASH_STREAM_H
#define KVSTASH_STREAM_H

#include <stddef.h>
#include <stdint.h>

#include "kvstash/kvformat.h"

#ifdef __cplusplus
extern "C" {
#endif

enum kvs_order {
	KVS_ORDER_KIVI = 0, /* fixed Flash decode path (default) */
	KVS_ORDER_PAPER = 1, /* Algorithm 1 */
};

/* "kivi" / "paper" <-> enum; parse returns 0 or -KVS_EPARAM. */
int kvs_order_parse(const char *s, enum kvs_order *out);
const char *kvs_order_name(enum kvs_order order);

/* ---- length trace (seed §5) ------------------------------------------ */

struct kvs_trace_row {
	uint32_t tokens;
	uint32_t k_compute_quant, k_compute_full;
	uint32_t k_persist_quant, k_persist_full;
	uint32_t v_compute_quant, v_compute_full;
	uint32_t v_persist_quant, v_persist_full;
};

/*
 * kvs_trace - run the residual state machine on lengths alone for @steps
 * single-token decode steps from an empty cache.
 * @rows: caller array of @steps rows, filled.
 * Returns 0 or -KVS_EPARAM (R, G not positive or R % G != 0).
 */
int kvs_trace(uint32_t residual, uint32_t group, enum kvs_order order,
	      uint32_t steps, struct kvs_trace_row *rows);

/* The persisted lengths of a stream: tokens seen, Keys and Values in the
 * history (the rest in the residuals). */
struct kvs_lengths {
	uint32_t tokens;
	uint32_t k_quant;
	uint32_t v_quant;
};

/*
 * kvs_lengths_advance - the residual rule, one single-token decode step:
 * fills @row with the lengths the current computation uses (per @order)
 * and those persisted after it, and moves @len to the persisted state
 * (the Keys of R tokens seal together, the oldest Value leaves the FIFO
 * once it holds more than R).  @residual > 0 and len->tokens < UINT32_MAX
 * are the caller's to ensure.
 */
void kvs_lengths_advance(struct kvs_lengths *len, uint32_t residual,
			 enum kvs_order order, struct kvs_trace_row *row);

/* The persisted lengths after @tokens tokens from an empty stream (as
 * many kvs_lengths_advance steps), residual @residual > 0. */
void kvs_lengths_after(uint32_t tokens, uint32_t residual,
		       struct kvs_lengths *out);

/* ---- the mixed-cache attention arguments ------------------------------ */

/*
 * One decode-attention problem for one sequence, one layer.
 * Tokens [0, k_quant_len) take Keys from the history blocks and
 * [k_quant_len, k_quant_len + k_resid_len) from k_resid; likewise Values
 * with v_quant_len / v_resid_len.  Both must cover the same tokens
 * (k_quant_len + k_resid_len == v_quant_len + v_resid_len), otherwise
 * -KVS_EBOUNDARY.  Any part may be empty; k_quant_len must be a multiple of
 * the group size.  The history is blocks[i] covering tokens
 * [i*S, (i+1)*S).
 */
struct kvs_attn {
	uint32_t q_heads; /* multiple of kv_heads (GQA) */
	uint32_t kv_heads, head_dim;
	float scale; /* usually 1/sqrt(head_dim) */
	const float *q; /* [q_heads][head_dim] */
	const struct kvs_view *const *blocks;
	uint32_t block_count;
	uint32_t k_quant_len, v_quant_len;
	const float *k_resid; /* [kv_heads][k_resid_stride][head_dim] */
	const float *v_resid; /* [kv_heads][v_resid_stride][head_dim] */
	uint32_t k_resid_len, v_resid_len;
	uint32_t k_resid_stride, v_resid_stride; /* rows allocated per head */
	float *out; /* [q_heads][head_dim], written */
};

struct kvs_backend_ops {
	const char *name;
	/* Seal S tokens of [kv_heads][span][head_dim] K/V into a block image
	 * (see kvs_block_quantize + kvs_block_finish). */
	int (*seal)(const struct kvs_shape *shape,
		    const struct kvs_ident *ident, enum kvs_dtype in_dtype,
		    const void *keys, const void *values, uint8_t *image);
	/* Dequantize an opened block to fp32 [kv_heads][span][head_dim]. */
	int (*dequantize)(const struct kvs_view *view, float *keys,
			  float *values);
	/* Decode attention over the mixed cache. */
	int (*attend)(const struct kvs_attn *args);
};

/* The CPU reference backend (always present, static, never freed).  Its
 * attention accumulates logits, softmax and output in double. */
const struct kvs_backend_ops *kvs_backend_cpu(void);

/* ---- the stream ------------------------------------------------------ */

struct kvs_stream;

struct kvs_stream_config {
	struct kvs_shape shape; /* span S, residual R, group, bits... */
	enum kvs_order order;
	uint32_t q_heads; /* multiple of shape.kv_heads */
	const struct kvs_backend_ops *backend; /* NULL: CPU reference; the
						  stream hands every op host
						  memory */
	struct kvs_ident ident; /* model_fp, layer; ids derived per
				   block from token ids when given */
};

/* Creates an empty stream; *out owned by the caller (kvs_stream_destroy). */
int kvs_stream_create(const struct kvs_stream_config *cfg,
		      struct kvs_stream **out);
/* Frees the stream and everything it holds; NULL is a no-op. */
void kvs_stream_destroy(struct kvs_stream *st);

/*
 * kvs_stream_prefill - attention on the full-precision K/V (causal, one
 * output row per token), then build history and residuals: keys, the first
 * T - T mod R quantized; values, all but the last min(T, R).
 * @q: [T][q_heads][D], @k, @v: [T][kv_heads][D] fp32.  @out may be NULL,
 * else [T][q_heads][D].  The stream must be empty.
 */
int kvs_stream_prefill(struct kvs_stream *st, const float *q, const float *k,
		       const float *v, uint32_t tokens, float *out);

/*
 * kvs_stream_step - one decode step in the configured order.
 * @q: [q_heads][D], @k, @v: [kv_heads][D] fp32, @out: [q_heads][D].
 * @row (optional) receives this step's lengths as in kvs_trace.
 */
int kvs_stream_step(struct kvs_stream *st, const float *q, const float *k,
		    const float *v, float *out, struct kvs_trace_row *row);

/* Tokens seen so far, and persisted residual lengths. */
uint32_t kvs_stream_tokens(const struct kvs_stream *st);
uint32_t kvs_stream_r_k(const struct kvs_stream *st);
uint32_t kvs_stream_r_v(const struct kvs_stream *st);

/* Sealed blocks held (each an encoded, uncompressed object). */
uint32_t kvs_stream_block_count(const struct kvs_stream *st);
const struct kvs_view *kvs_stream_block(const struct kvs_stream *st,
					uint32_t i);

/*
 * kvs_stream_block_data - the encoded bytes of finished block @i (what
 * kvs_block_seal gives for the same tokens and ident).  Owned by the
 * stream, valid until kvs_stream_destroy; NULL when @i is out of range.
 * @len (optional) receives the byte count.
 */
const uint8_t *kvs_stream_block_data(const struct kvs_stream *st, uint32_t i,
				     size_t *len);

/*
 * Namespace of the span ids a stream gives its blocks: with no token ids
 * available, block i's id is kvs_span_id(KVS_STREAM_POSITION_NS, model_fp,
 * parent, positions i*S .. i*S+S-1) where parent is block i-1's id, and for
 * block 0 the config's ident.parent_id (NULL when all-zero).  Position ids
 * say nothing about content: a caller that publishes stream blocks must
 * make them unique (a per-request ident.parent_id) or re-id them.
 */
#define KVS_STREAM_POSITION_NS "kvstash.stream.positions"

/*
 * kvs_stream_resume - fill an empty stream from a handoff: @count blocks
 * (encoded objects, raw or LZ4, of this stream's shape, layer and model,
 * each the child of the one before, covering tokens [0, count * S)) and
 * the residual tail that follows them, as kvs_stream_tail makes it (Keys
 * from count * S, Values from first_pos; tokens = first_pos + r_V).  The
 * stream keeps copies; kvs_stream_block_data gives the bytes as passed.
 * Returns 0, the validation error of the first object that fails
 * kvs_object_open, -KVS_EKIND for an object of the wrong kind, or
 * -KVS_EPARAM when the objects do not fit the stream or each other; on
 * error the stream stays empty.
 */
int kvs_stream_resume(struct kvs_stream *st, const uint8_t *const *blocks,
		      const size_t *block_lens, uint32_t count,
		      const uint8_t *tail, size_t tail_len);

/*
 * kvs_stream_tail - encode the residual tail (the prefill->decode handoff
 * object): Key rows of the tokens not in a finished block and Value rows
 * from the older of that point and the Value FIFO's start; with S == R
 * exactly r_K = T mod R and r_V = min(T, R).  With S > R and sealed Keys
 * in the unfinished block they do not fit a tail: -KVS_EPARAM.
 * *out is malloc'd and owned by the caller.
 */
int kvs_stream_tail(const struct kvs_stream *st, enum kvs_dtype dtype,
		    uint8_t **out, size_t *out_len);

#ifdef __cplusplus
}
#endif

#endif
