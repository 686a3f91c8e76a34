/*
 * testutil.h - small helpers shared by the kvformat format tests: typed
 * array fills and the error bound a quantized group must meet (the
 * generator is common/rng.h).  Header-only (static functions) so each
 * test program stays a single translation unit.
 */
#ifndef KVS_TESTS_KVFORMAT_TESTUTIL_H
#define KVS_TESTS_KVFORMAT_TESTUTIL_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "common/rng.h"
#include "kvstash/kvformat.h"

/* Unit roundoff of a metadata type: half an ulp, relative. */
static inline double test_unit_roundoff(enum kvs_dtype t)
{
	switch (t) {
	case KVS_DTYPE_F16:
		return ldexp(1.0, -11);
	case KVS_DTYPE_BF16:
		return ldexp(1.0, -8);
	default:
		return ldexp(1.0, -24);
	}
}

/* Smallest positive (subnormal) value of a metadata type. */
static inline double test_meta_tiny(enum kvs_dtype t)
{
	switch (t) {
	case KVS_DTYPE_F16:
		return ldexp(1.0, -24);
	case KVS_DTYPE_BF16:
		return ldexp(1.0, -133);
	default:
		return ldexp(1.0, -149);
	}
}

/*
 * Largest reconstruction error the contract allows for a group with fp32
 * extremes @lo, @hi: half a step, plus what rounding the origin and the
 * step into @meta can add (the origin may move by u|lo|, and the top code
 * by (2^b - 1) u step; near zero, by the type's smallest subnormal, which
 * also bounds a step that rounds to zero), plus fp32 arithmetic slack.
 */
static inline double test_group_bound(float lo, float hi, unsigned bits,
				      enum kvs_dtype meta)
{
	double levels = (double)((1u << bits) - 1u);
	double step = ((double)hi - lo) / levels;
	double u = test_unit_roundoff(meta);
	double mag = fabs((double)lo) + fabs((double)hi);

	return step * (0.5 + u) + u * fabs((double)lo) + levels * u * step +
	       4.0 * ldexp(mag, -24) + (levels + 1.0) * test_meta_tiny(meta) +
	       ldexp(1.0, -149);
}

#endif
