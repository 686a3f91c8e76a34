/*
 * attn_probe.cu - the host side of the trace probe (attn_probe.cuh,
 * -DKVS_ATTN_TRACE): a device buffer of ATTN_TRACE_CALLS x
 * ATTN_TRACE_CALL timestamps, allocated on first use, each call of
 * kvs_cuda_attend() given the next slot in turn, and the reader that
 * bench/attn_trace.py calls through ctypes.  Part of the probe library
 * only; without KVS_ATTN_TRACE it is empty.
 */
#include "attn_probe.cuh"

#ifdef KVS_ATTN_TRACE
#include <stdio.h>

static unsigned long long *trace_buf;
static int trace_next;

static const size_t trace_bytes = sizeof(unsigned long long) *
				  ATTN_TRACE_CALLS * ATTN_TRACE_CALL;

/* The buffer, allocated and cleared on first use (before any graph
 * capture: the benchmark reads the trace once before it times) */
static unsigned long long *trace_buffer(void)
{
	if (!trace_buf &&
	    (cudaMalloc((void **)&trace_buf, trace_bytes) != cudaSuccess ||
	     cudaMemset(trace_buf, 0, trace_bytes) != cudaSuccess)) {
		fprintf(stderr, "attn probe: no trace buffer\n");
		trace_buf = NULL;
	}
	return trace_buf;
}

void attn_probe_call(unsigned long long **trace, int *slot)
{
	*trace = trace_buffer();
	*slot = trace_next++ % ATTN_TRACE_CALLS;
}

/* Copies the trace to @dst (at least the buffer's bytes) and clears it;
 * 0, or -1 when @bytes is short or a copy fails. */
extern "C" int kvs_cuda_attn_trace_read(void *dst, size_t bytes)
{
	unsigned long long *t = trace_buffer();

	if (bytes < trace_bytes || !t ||
	    cudaMemcpy(dst, t, trace_bytes, cudaMemcpyDeviceToHost) !=
		    cudaSuccess ||
	    cudaMemset(t, 0, trace_bytes) != cudaSuccess)
		return -1;
	return 0;
}
#endif
