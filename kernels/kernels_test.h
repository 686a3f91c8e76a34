/*
 * kernels_test.h - flags of struct kvs_cuda_attn that force one plan or
 * one build of the fused decode attention, for the GPU tests (tests/gpu/)
 * and the benchmark's side-by-side comparisons (bench/attn_bench.py
 * --flags / --alt-flags, which pass them as numbers: the values do not
 * change).  Not part of the public API: without them the plan chooses by
 * itself (kernels/attn_plan.cu), and they go where the plans go.  They
 * share the flags word with the public KVS_CUDA_ATTN_GENERIC.
 */
#ifndef KVS_KERNELS_TEST_H
#define KVS_KERNELS_TEST_H

#include "kvstash/kernels.h"

/* The fast path comes in a 4-CTA/SM build (128 registers) and a 3-CTA/SM
 * one (168 registers); the plan takes the 3-CTA build where the history
 * is a few tiles a warp (small batch, not too long) and the 4-CTA one
 * elsewhere.  OCC3 and OCC4 force one (OCC4 where both are given). */
#define KVS_CUDA_ATTN_OCC3 0x2u
#define KVS_CUDA_ATTN_OCC4 0x8u
/* The fast path's biased code operands even where the tensor cores take
 * subnormal ones. */
#define KVS_CUDA_ATTN_NO_SUBNORMAL 0x4u
/* Every generic (residual-tail) CTA also takes a share of the history
 * tiles, even where the split plan would give it none. */
#define KVS_CUDA_ATTN_HYBRID 0x10u
/* With 16-bit residuals the plan puts the residual tail, as 8-token pieces
 * on the tensor cores, on the fast CTAs' warps where generic CTAs would be
 * few beside the fast ones (large batch); PIECES takes the pieces wherever
 * they apply, NO_PIECES never. */
#define KVS_CUDA_ATTN_PIECES 0x20u
#define KVS_CUDA_ATTN_NO_PIECES 0x40u
/* The cluster plan (fast format, 16-bit residuals, at most as many units
 * -- sequence x KV head x group of 4 query heads -- as the device has
 * SMs): a unit is one thread-block cluster whose CTAs fold their partials
 * in distributed shared memory, with no second kernel.  Taken where no
 * flag above forces a plan and the units fill the device; CLUSTER takes
 * it wherever it can run (over OCC3/OCC4, HYBRID, PIECES), NO_CLUSTER
 * never. */
#define KVS_CUDA_ATTN_CLUSTER 0x80u
#define KVS_CUDA_ATTN_NO_CLUSTER 0x100u

#endif
