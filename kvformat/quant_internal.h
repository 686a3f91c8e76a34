/*
 * quant_internal.h - the per-group arithmetic of the numeric contract
 * (DESIGN.md §1), shared by the group quantizer, the block sealer and the
 * decoders so that there is exactly one definition of each step.
 */
#ifndef KVS_QUANT_INTERNAL_H
#define KVS_QUANT_INTERNAL_H

#include <math.h>
#include <stdint.h>

#include "kvstash/kvformat.h"

/*
 * Origin and step of a group with fp32 extremes lo <= hi (both finite).
 * Returns 0, or 1 for a constant group (hi == lo, or a step that rounds to
 * zero), which gets step 1 and all codes 0, or -KVS_ERANGE when the origin
 * or the step overflows the metadata type, or when the top code would
 * reconstruct to infinity (a step rounded up near FLT_MAX, bf16 metadata).
 */
static inline int quant_params(float lo, float hi, unsigned bits,
			       enum kvs_dtype meta, float *origin, float *step)
{
	float levels = (float)((1u << bits) - 1u);
	float o, s;

	/* Which zero a min or max over {-0, +0} returns depends on the order
	 * of the reduction; adding +0 makes both +0, so the CPU and the GPU
	 * (whatever their reduction trees) store the same origin bits. */
	lo += 0.0f;
	hi += 0.0f;
	o = kvs_round_to(meta, lo);
	s = kvs_round_to(meta, (hi - lo) / levels);

	if (!isfinite(o) || !isfinite(s))
		return -KVS_ERANGE;
	*origin = o;
	if (hi == lo || s == 0.0f) {
		*step = 1.0f;
		return 1;
	}
	if (!isfinite(fmaf(s, levels, o)))
		return -KVS_ERANGE;
	*step = s;
	return 0;
}

/*
 * code = clamp(rint((x - origin) / step), 0, 2^b - 1), fp32, RNE.
 * Clamping to [-1, levels + 1] first changes no result and keeps |q| far
 * below 2^22, where adding and subtracting 1.5 * 2^23 rounds to the
 * nearest integer, ties to even, exactly as rintf does in the default
 * rounding mode; unlike a rintf call the loop then vectorizes.
 */
static inline uint8_t quant_code(float x, float origin, float step,
				 float levels)
{
	const float magic = 12582912.0f; /* 1.5 * 2^23 */
	float q = (x - origin) / step;

	q = q < -1.0f ? -1.0f : q;
	q = q > levels + 1.0f ? levels + 1.0f : q;
	q = (q + magic) - magic;
	q = q < 0.0f ? 0.0f : q;
	q = q > levels ? levels : q;
	return (uint8_t)q;
}

/*
 * Minimum and maximum of @n finite values, in eight independent lanes so
 * the loop vectorizes (the extremes of finite values do not depend on the
 * order; quant_params makes the zero's sign canonical).
 */
static inline void group_extremes(const float *x, uint32_t n, float *lo,
				  float *hi)
{
	float l8[8], h8[8], l, h;
	uint32_t i = 0;

	l = h = x[0];
	if (n >= 8) {
		for (int k = 0; k < 8; k++)
			l8[k] = h8[k] = x[k];
		for (i = 8; i + 8 <= n; i += 8) {
			for (int k = 0; k < 8; k++) {
				l8[k] = x[i + k] < l8[k] ? x[i + k] : l8[k];
				h8[k] = x[i + k] > h8[k] ? x[i + k] : h8[k];
			}
		}
		for (int k = 0; k < 8; k++) {
			l = l8[k] < l ? l8[k] : l;
			h = h8[k] > h ? h8[k] : h;
		}
	}
	for (; i < n; i++) {
		l = x[i] < l ? x[i] : l;
		h = x[i] > h ? x[i] : h;
	}
	*lo = l;
	*hi = h;
}

/* Unpacks @n codes of @bits each into one byte per code. */
void kvs_unpack_codes(const uint8_t *packed, size_t n, unsigned bits,
		      uint8_t *codes);

/* Widens @n elements of @t starting at element @first into @out. */
void kvs_widen(enum kvs_dtype t, const void *base, size_t first, size_t n,
	       float *out);

/* Puts @code at index @i of a packed array whose bytes start zeroed. */
static inline void pack_put(uint8_t *packed, size_t i, unsigned bits,
			    unsigned code)
{
	unsigned per_byte = 8u / bits;

	packed[i / per_byte] |= (uint8_t)(code << (bits * (i % per_byte)));
}

#endif
