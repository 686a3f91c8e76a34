/*
 * tile_probe.cuh - what the probes that run attn_tile.cuh's fast_tile()
 * outside the kernel share (wgmma_probe.cu, ring_probe.cu): a warp's
 * query and running state set up as fast_cta() sets them, and the state
 * folded into one value the compiler cannot drop.
 */
#ifndef KVS_BENCH_TILE_PROBE_CUH
#define KVS_BENCH_TILE_PROBE_CUH

#include "attn_tile.cuh"

/* Lane (h, w)'s channels 16w .. 16w+15 of head h of @q (fp32, 4 heads),
 * as fast_cta() holds them, and an empty state; the 4-CTA build's query
 * pairs in shared memory at @qrow. */
static __device__ __forceinline__ void probe_start(const float *q,
						   uint4 *qrow, int lane,
						   key_query &kq,
						   fast_state &st)
{
	const int h = lane >> 3, w = lane & 7;
	float mx = 0.0f;

	for (int i = 0; i < 16; i++) {
		kq.q[i] = q[h * FAST_D + 16 * w + i];
		mx = fmaxf(mx, fabsf(kq.q[i]));
	}
	kq_split<true, true>(kq, mx, [&]() { return qrow; }, lane & 3);
	for (int nt = 0; nt < 8; nt++)
		for (int e = 0; e < 4; e++)
			st.acc[nt][e] = 0.0f;
	for (int g = 0; g < 4; g++)
		st.so[g] = 0.0f;
	st.m = -INFINITY;
	st.l = 0.0f;
}

/* The whole state of this thread as one float. */
static __device__ __forceinline__ float probe_sum(const fast_state &st)
{
	float x = st.l + st.m;

	for (int nt = 0; nt < 8; nt++)
		for (int e = 0; e < 4; e++)
			x += st.acc[nt][e];
	for (int g = 0; g < 4; g++)
		x += st.so[g];
	return x;
}

#endif
