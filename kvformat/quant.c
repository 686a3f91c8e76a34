/*
 * quant.c - the group quantizer of the numeric contract and 2/4-bit code
 * packing (low bits first, the seed's pack2 order).
 */
#include <string.h>

#include "kvstash/kvformat.h"
#include "kvstash/log.h"
#include "quant_internal.h"

int kvs_quant_group(const float *x, size_t n, size_t stride, unsigned bits,
		    enum kvs_dtype meta, uint8_t *codes, float *origin,
		    float *step)
{
	float lo, hi, o, s, levels;
	int rc;

	if (n == 0 || stride == 0 || (bits != 2 && bits != 4) ||
	    kvs_dtype_size(meta) == 0)
		return -KVS_EPARAM;
	lo = hi = x[0];
	for (size_t i = 0; i < n; i++) {
		float v = x[i * stride];

		if (!isfinite(v))
			return -KVS_ENONFINITE;
		lo = v < lo ? v : lo;
		hi = v > hi ? v : hi;
	}
	rc = quant_params(lo, hi, bits, meta, &o, &s);
	if (rc < 0)
		return rc;
	levels = (float)((1u << bits) - 1u);
	for (size_t i = 0; i < n; i++)
		codes[i] = rc ? 0 : quant_code(x[i * stride], o, s, levels);
	*origin = o;
	*step = s;
	return 0;
}

float kvs_dequant(float origin, float step, unsigned code)
{
	return fmaf(step, (float)code, origin);
}

void kvs_pack_codes(const uint8_t *codes, size_t n, unsigned bits,
		    uint8_t *packed)
{
	size_t per_byte = 8u / bits, whole = n / per_byte;

	/* Whole bytes first, in a loop the compiler vectorizes. */
	if (bits == 2) {
		for (size_t i = 0; i < whole; i++)
			packed[i] =
				(uint8_t)(codes[4 * i] | codes[4 * i + 1] << 2 |
					  codes[4 * i + 2] << 4 |
					  codes[4 * i + 3] << 6);
	} else {
		for (size_t i = 0; i < whole; i++)
			packed[i] =
				(uint8_t)(codes[2 * i] | codes[2 * i + 1] << 4);
	}
	if (whole * per_byte == n)
		return;
	packed[whole] = 0;
	for (size_t i = whole * per_byte; i < n; i++)
		pack_put(packed, i, bits, codes[i]);
}

void kvs_unpack_codes(const uint8_t *packed, size_t n, unsigned bits,
		      uint8_t *codes)
{
	if (bits == 2) {
		for (size_t i = 0; i < n; i++)
			codes[i] = (packed[i / 4] >> (2 * (i % 4))) & 3u;
	} else {
		for (size_t i = 0; i < n; i++)
			codes[i] = (packed[i / 2] >> (4 * (i % 2))) & 15u;
	}
}

unsigned kvs_packed_code(const uint8_t *packed, size_t i, unsigned bits)
{
	unsigned per_byte = 8u / bits;

	return (packed[i / per_byte] >> (bits * (i % per_byte))) &
	       ((1u << bits) - 1u);
}
