/*
 * kernels - the CUDA kernels behind a C API: seal (quantize + pack K/V into
 * the canonical block layout), dequantize, fused decode attention over paged
 * 2-bit history plus full-precision residuals, and the residual operations
 * of a decode step (append, seal the Key residual, pop the oldest Value).
 *
 * Every pointer named "device" is CUDA device memory; everything else is
 * host memory.  Launchers return 0 or a negative kvs error (-KVS_EPARAM,
 * -KVS_ENONFINITE, -KVS_ERANGE, -KVS_ECUDA, -KVS_ENODEV), never exit, and
 * enqueue on @stream (a cudaStream_t; NULL is the default stream).  Numbers
 * and layouts are the ones of kvformat.h and DESIGN.md §1-§3; docs/KERNELS.md
 * explains how the kernels read them.
 *
 * Built only where nvcc exists (KVS_HAVE_CUDA in kvs_config.h), as the
 * static kvs_kernels dependency of the project's programs; the build also
 * makes libkvstash_cuda.so for the benchmarks (through ctypes), which is
 * not installed.
 */
#ifndef KVSTASH_KERNELS_H
#define KVSTASH_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvstash/kvformat.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Error flags the seal kernel raises in its device status word. */
#define KVS_CUDA_FLAG_NONFINITE 0x1u
#define KVS_CUDA_FLAG_RANGE 0x2u

/* 0 if a CUDA device is usable, else -KVS_ENODEV (and logs why at debug). */
int kvs_cuda_available(void);

/*
 * kvs_cuda_host_register - pin (or with @unregister, unpin) @len bytes of
 * host memory at @base for asynchronous copies (cudaHostRegister).  The
 * registration of the store's DRAM arena: a program that links both the
 * store and the kernels passes kvs_cuda_register_arena as
 * kvs_store_opts.register_arena so the arena is pinned.  Returns 0, -KVS_ENODEV
 * without a device, or -KVS_ECUDA.
 */
int kvs_cuda_host_register(void *base, size_t len, bool unregister);

/* kvs_cuda_host_register in the form of kvs_store_opts.register_arena. */
static inline int kvs_cuda_register_arena(void *ctx, void *base, size_t len,
					  bool unregister)
{
	(void)ctx;
	return kvs_cuda_host_register(base, len, unregister);
}

/*
 * Seal: full-precision K/V of @blocks spans of S tokens -> block images.
 * Input element (block n, head h, token t, channel d) is read at
 *   src + t * token_stride + h * head_stride + d      (in elements)
 * (for values h * v_head_stride when that is nonzero)
 * where src is keys/values + n * block_stride, or, when @src is given,
 * the device pointers src[2n] (keys) and src[2n + 1] (values).
 * Output: the six sections of image n = images + dst(n) * image_stride,
 * dst(n) = dst ? dst[n] : n, at kvs_block_layout() offsets; the header and
 * padding are left alone (the host writes them with kvs_block_finish()).
 */
struct kvs_cuda_seal {
	struct kvs_shape shape;
	enum kvs_dtype in_dtype; /* KVS_DTYPE_F16 or KVS_DTYPE_BF16 */
	const void *keys, *values; /* device */
	int64_t block_stride, token_stride, head_stride; /* elements */
	const void *const *src; /* device [blocks][2] or NULL */
	uint32_t blocks;
	uint8_t *images; /* device */
	uint64_t image_stride; /* bytes, multiple of 256 */
	const int32_t *dst; /* device [blocks] or NULL */
	uint32_t *status; /* device flag word, or NULL */
	void *stream;
	int64_t v_head_stride; /* elements; 0: head_stride */
};

/*
 * kvs_cuda_seal_blocks - quantize and pack.  With status == NULL it waits
 * for the kernel and returns -KVS_ENONFINITE / -KVS_ERANGE when an input
 * was not finite or a step did not fit the metadata type (the images are
 * then unspecified and must not be finished).  With a status word it only
 * ORs KVS_CUDA_FLAG_* into it; check it with kvs_cuda_status_check().
 */
int kvs_cuda_seal_blocks(const struct kvs_cuda_seal *args);

/* Waits for @stream and turns a device status word into 0 or an error
 * (then clears it). */
int kvs_cuda_status_check(uint32_t *status, void *stream);

/*
 * kvs_cuda_dequantize - reconstruct @count pages (pool + pages[i] *
 * page_stride, pages a device int32 array) to [count][kv_heads][span][D] K
 * and V of @out_dtype (f32, f16 or bf16), each element fmaf(step, code,
 * origin) rounded to @out_dtype.
 */
int kvs_cuda_dequantize(const struct kvs_shape *shape, const uint8_t *pool,
			uint64_t page_stride, const int32_t *pages,
			uint32_t count, enum kvs_dtype out_dtype, void *keys,
			void *values, void *stream);

/*
 * Per-sequence lengths of a decode batch (device array, one per sequence).
 * Tokens [0, k_quant_len) take Keys from the history pages,
 * [k_quant_len, k_quant_len + k_resid_len) from k_resid rows 0.. ; Values
 * [0, v_quant_len) from the pages, the rest from v_resid rows
 * v_resid_start.. .  k_quant_len + k_resid_len == v_quant_len + v_resid_len;
 * k_quant_len is a multiple of the group size.
 */
struct kvs_cuda_seq {
	uint32_t k_quant_len, v_quant_len;
	uint32_t k_resid_len, v_resid_len;
	uint32_t v_resid_start;
	uint32_t reserved;
};

/*
 * Fused decode attention for a batch: one global softmax per (sequence,
 * query head) over all Key logits, probabilities split at the Value
 * boundary.  History page p of sequence b is pool + page_table[b *
 * max_pages + p] * page_stride, an uncompressed block image of @shape
 * covering tokens [p*S, (p+1)*S).
 */
struct kvs_cuda_attn {
	struct kvs_shape shape;
	uint32_t batch, q_heads; /* q_heads multiple of kv_heads */
	enum kvs_dtype dtype; /* q and residuals: f32, f16, bf16 */
	enum kvs_dtype out_dtype; /* f32, f16 or bf16 */
	float scale; /* usually 1/sqrt(head_dim) */
	uint32_t max_tokens; /* >= every sequence's token count */
	const void *q; /* device [batch][q_heads][D] */
	const uint8_t *pool; /* device */
	uint64_t page_stride; /* bytes, multiple of 256 */
	const int32_t *page_table; /* device [batch][max_pages] */
	uint32_t max_pages;
	const struct kvs_cuda_seq *seqs; /* device [batch] */
	const void *k_resid; /* device [batch][kv][k_stride][D] */
	const void *v_resid; /* device [batch][kv][v_stride][D] */
	uint32_t k_resid_stride, v_resid_stride; /* rows per (seq, head) */
	void *out; /* device [batch][q_heads][D] */
	void *workspace; /* device, kvs_cuda_attn_workspace() */
	uint64_t workspace_size;
	uint32_t flags; /* 0 or KVS_CUDA_ATTN_GENERIC */
	void *stream;
	/* optional: a bound on every sequence's k_resid_len and v_resid_len
	 * (R + 1 for a kivi decode step), which sizes the residual-tail work
	 * more tightly than the strides; 0: the strides.  A sequence past it
	 * is still computed whole, more slowly. */
	uint32_t max_resid_rows;
};

/* Never take the tensor-core path: every token on the generic kernel (for
 * comparison; slower).  The other bits of the flags word are reserved for
 * the tests and the benchmark (they force a plan) and must be 0. */
#define KVS_CUDA_ATTN_GENERIC 0x1u

/* Workspace bytes kvs_cuda_attend() needs for these arguments. */
uint64_t kvs_cuda_attn_workspace(const struct kvs_cuda_attn *args);
/* Enqueues the attention; 0, -KVS_EPARAM or -KVS_ECUDA. */
int kvs_cuda_attend(const struct kvs_cuda_attn *args);

/*
 * Residual state of a decode batch on the device (DESIGN.md §2): per
 * sequence the Key residual (rows 0..k_resid_len-1 of k_resid) and the
 * Value FIFO (rows v_resid_start.. of v_resid, v_stride >= 2R + 2 so that
 * it is compacted once every R+1 pops), lengths in @seqs (device).
 */
struct kvs_cuda_resid {
	struct kvs_shape shape; /* span S == residual R */
	uint32_t batch;
	enum kvs_dtype dtype; /* f16 or bf16 */
	void *k_resid, *v_resid; /* device, as in kvs_cuda_attn */
	uint32_t k_resid_stride, v_resid_stride;
	struct kvs_cuda_seq *seqs; /* device [batch] */
	int32_t *page_table; /* device [batch][max_pages] */
	uint32_t max_pages;
	void *stream;
};

/* Appends one token's K and V ([batch][kv_heads][D] device, @dtype) to
 * every sequence (compacting a full Value FIFO first). */
int kvs_cuda_resid_append(const struct kvs_cuda_resid *st, const void *k,
			  const void *v);
/*
 * Seals the full Key residual of the @count sequences listed in @seq_ids
 * (device int32) into pool pages @pages (device int32, pool + page *
 * page_stride), records each page in the page table and empties the Key
 * residual.  The block's Values are the last R rows of the FIFO.  Errors as
 * kvs_cuda_seal_blocks (@status as there).
 */
int kvs_cuda_resid_seal(const struct kvs_cuda_resid *st, const int32_t *seq_ids,
			const int32_t *pages, uint32_t count, uint8_t *pool,
			uint64_t page_stride, uint32_t *status);
/* Pops the oldest Value of every sequence holding more than R. */
int kvs_cuda_resid_pop(const struct kvs_cuda_resid *st);

/* The CUDA backend of the streaming state (stream.h's struct
 * kvs_backend_ops: host pointers in and out, as kvs_backend_cpu()); NULL
 * when no device is usable. */
struct kvs_backend_ops;
const struct kvs_backend_ops *kvs_backend_cuda(void);

#ifdef __cplusplus
}
#endif

#endif
