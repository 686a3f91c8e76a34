/*
 * attn_probe.cuh - the probe hooks of kernels/attn_common.cuh, for the
 * probe libraries of bench/meson.build, which compile the attention's
 * sources again with this header included first (nvcc -include).  The
 * library's own build never sees it.  What the hooks do is chosen by
 * macros given at configure time (meson setup -Dcuda_args=...):
 *
 *   -DKVS_ATTN_PARTS=mask  the fast tile taken apart, to measure what each
 *       part costs (bench/attn_parts.sh).  Results are wrong on purpose,
 *       times real.  Bits: 1 compute only (each warp's first two tiles
 *       copied, then computed over and over); 2 no Key MMAs (nor their code
 *       loads and ANDs); 4 no Value update; 8 no Key B operand (nor the
 *       origin dot); 16 no Value origin sums; 32 copy only (no tile
 *       compute); 64 the code operands by IMAD with an opaque 1 (the FMA
 *       pipe) instead of the ALU's LOP3; 128 the tiles copied as always
 *       but waited for only until every stage has held a tile (the
 *       stream's issue and shared-memory writes beside the compute,
 *       without its latency); 256 every 16-byte copy with a source size of
 *       0 (zeros written, nothing read); 512 every tile read from the first
 *       page of the CTA's list (the stream from L2).  (The bulk-copy ring
 *       is bench/ring_probe.cu.)
 *   -DKVS_ATTN_TRACE  the timeline of the last ATTN_TRACE_CALLS calls
 *       (bench/attn_trace.py): %globaltimer at fixed points of every warp
 *       of the attention kernel and every CTA of the merge kernel, read
 *       back by kvs_cuda_attn_trace_read() (bench/attn_probe.cu).
 *       Attention: [cta][warp][8] = kernel entry, generic part done, fast
 *       part entry, prologue loaded (a generic CTA: first chunk in), first
 *       tile ready, tile loop done, fast part done, the warp's tile count
 *       (its SM's number << 32); merge: [cta][6] = entry, wait released,
 *       done, the (m, l) pairs in (the global maximum known), warp 0's own
 *       splits folded, the stores begun.  A cluster-plan CTA's quads count
 *       as CTAs of 4 warps, and its fold stands where the merge's points
 *       are (entry, released, first loads in, done).
 *   -DKVS_ATTN_STAGES=n  a copy ring n stages deep.
 */
#ifndef KVS_BENCH_ATTN_PROBE_CUH
#define KVS_BENCH_ATTN_PROBE_CUH

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

#ifdef KVS_ATTN_STAGES
#define ATTN_PROBE_STAGES KVS_ATTN_STAGES
#endif

#if defined(KVS_ATTN_PARTS) && KVS_ATTN_PARTS
#if KVS_ATTN_PARTS & ~1023
#error "KVS_ATTN_PARTS: bits 1 to 512 (the bulk-copy ring: ring_probe.cu)"
#endif
#define ATTN_PROBE_OMIT(bit) ((KVS_ATTN_PARTS & (bit)) != 0)
#if KVS_ATTN_PARTS & 64
static __constant__ uint32_t attn_probe_one[8] = { 1, 1, 1, 1, 1, 1, 1, 1 };
#define ATTN_PROBE_CODE_PAIR(x, pos)					\
	if (SUB)							\
		return (x) * attn_probe_one[pos];
#endif
#if KVS_ATTN_PARTS & 256
#define ATTN_PROBE_CP16_SRC ", 0"
#endif
#endif

#ifdef KVS_ATTN_TRACE
#define ATTN_TRACE_CALLS 10
#define ATTN_TRACE_CTAS 2048
#define ATTN_TRACE_WARPS 4      /* a CTA's (or a cluster-plan quad's) */
#define ATTN_TRACE_ATT (ATTN_TRACE_CTAS * ATTN_TRACE_WARPS * 8)
#define ATTN_TRACE_CALL (ATTN_TRACE_ATT + ATTN_TRACE_CTAS * 6)

/* bench/attn_probe.cu: the trace buffer and this call's slot in it */
void attn_probe_call(unsigned long long **trace, int *slot);
extern "C" int kvs_cuda_attn_trace_read(void *dst, size_t bytes);

static __device__ __forceinline__ unsigned long long attn_probe_now(void)
{
	unsigned long long t;

	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

static __device__ __forceinline__ unsigned attn_probe_sm(void)
{
	unsigned x;

	asm volatile("mov.u32 %0, %%smid;" : "=r"(x));
	return x;
}

/* @v at point @ev of this warp (attention) or, @merge, of this CTA (lane
 * 0 of warp 0) in slot @slot of @trace */
static __device__ __forceinline__ void attn_probe_put(unsigned long long *trace,
						      int slot, bool merge,
						      int ev,
						      unsigned long long v)
{
	const int warp = threadIdx.x >> 5;
	/* a cluster-plan CTA's quads count as CTAs of 4 warps */
	const unsigned fw = blockIdx.x * (blockDim.x >> 5) + warp;

	if (!trace || (threadIdx.x & 31) ||
	    (merge ? blockIdx.x : fw / ATTN_TRACE_WARPS) >= ATTN_TRACE_CTAS ||
	    (merge && warp))
		return;
	trace[(size_t)slot * ATTN_TRACE_CALL +
	      (merge ? ATTN_TRACE_ATT + blockIdx.x * 6 : fw * 8) + ev] = v;
}

#define ATTN_PROBE_PARAMS						\
	unsigned long long *trace;					\
	int trace_slot;
#define ATTN_PROBE_CALL(p) attn_probe_call(&(p).trace, &(p).trace_slot)
#define ATTN_PROBE_EVENT(p, ev)						\
	attn_probe_put((p).trace, (p).trace_slot, false, ev, attn_probe_now())
#define ATTN_PROBE_COUNT(p, ev, n)					\
	attn_probe_put((p).trace, (p).trace_slot, false, ev,		\
		       (unsigned long long)(n) |			\
		       (unsigned long long)attn_probe_sm() << 32)
#define ATTN_PROBE_MERGE(p, ev)						\
	attn_probe_put((p).trace, (p).trace_slot, true, ev, attn_probe_now())
#endif

#endif
