/*
 * scalar.c - element types: fp16 and bf16 conversion with round to nearest
 * even, and little-endian element loads and stores for the three input and
 * metadata types.  Integer bit manipulation only, so the results do not
 * depend on the compiler's floating-point flags (the GPU's __float2half_rn
 * and __float2bfloat16_rn give the same bits).
 */
#include <math.h>
#include <string.h>

#include "kvstash/kvformat.h"
#include "quant_internal.h"

static inline uint32_t f32_bits(float x)
{
	uint32_t b;

	memcpy(&b, &x, sizeof(b));
	return b;
}

static inline uint16_t get_le16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static inline float bits_f32(uint32_t b)
{
	float x;

	memcpy(&x, &b, sizeof(x));
	return x;
}

uint16_t kvs_f32_to_f16(float x)
{
	uint32_t b = f32_bits(x);
	uint32_t sign = (b >> 16) & 0x8000u;
	uint32_t mag = b & 0x7fffffffu;

	if (mag > 0x7f800000u) /* NaN: keep it quiet and non-zero */
		return (uint16_t)(sign | 0x7e00u | ((mag >> 13) & 0x3ffu));
	if (mag >= 0x477ff000u) /* >= 65520 rounds to infinity */
		return (uint16_t)(sign | 0x7c00u);
	if (mag >= 0x38800000u) {
		/* Normal half: rebias the exponent by (15 - 127) and round
		 * the 13 dropped bits to nearest, ties to the even result. */
		uint32_t odd = (mag >> 13) & 1u;

		mag += 0xc8000fffu + odd;
		return (uint16_t)(sign | (mag >> 13));
	}
	/* Subnormal half (or zero): adding 0.5f aligns the value so that the
	 * FPU's own round-to-nearest-even drops exactly the right bits. */
	{
		float shifted = bits_f32(mag) + 0.5f;

		return (uint16_t)(sign | (f32_bits(shifted) - 0x3f000000u));
	}
}

static inline float f16_to_f32(uint16_t h)
{
	/* Shifting the magnitude into a float's fields reads it with the
	 * exponent biased 112 too low; scaling by 2^112 fixes that exactly,
	 * subnormal halves included.  Infinity and NaN keep their pattern. */
	uint32_t mag = (uint32_t)(h & 0x7fffu) << 13;
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
	float v = bits_f32(mag) * 0x1p112f;
	uint32_t b = (h & 0x7c00u) == 0x7c00u ? mag | 0x7f800000u : f32_bits(v);

	return bits_f32(b | sign);
}

float kvs_f16_to_f32(uint16_t h)
{
	return f16_to_f32(h);
}

uint16_t kvs_f32_to_bf16(float x)
{
	uint32_t b = f32_bits(x);

	if ((b & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((b >> 16) | 0x40u);
	b += 0x7fffu + ((b >> 16) & 1u);
	return (uint16_t)(b >> 16);
}

float kvs_bf16_to_f32(uint16_t h)
{
	return bits_f32((uint32_t)h << 16);
}

size_t kvs_dtype_size(enum kvs_dtype t)
{
	switch (t) {
	case KVS_DTYPE_F32:
		return 4;
	case KVS_DTYPE_F16:
	case KVS_DTYPE_BF16:
		return 2;
	}
	return 0;
}

const char *kvs_dtype_name(enum kvs_dtype t)
{
	switch (t) {
	case KVS_DTYPE_F32:
		return "f32";
	case KVS_DTYPE_F16:
		return "f16";
	case KVS_DTYPE_BF16:
		return "bf16";
	}
	return NULL;
}

int kvs_dtype_parse(const char *s, enum kvs_dtype *out)
{
	static const struct {
		const char *name;
		enum kvs_dtype type;
	} names[] = {
		{ "f32", KVS_DTYPE_F32 },     { "fp32", KVS_DTYPE_F32 },
		{ "float32", KVS_DTYPE_F32 }, { "f16", KVS_DTYPE_F16 },
		{ "fp16", KVS_DTYPE_F16 },    { "float16", KVS_DTYPE_F16 },
		{ "bf16", KVS_DTYPE_BF16 },   { "bfloat16", KVS_DTYPE_BF16 },
	};

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		if (strcmp(s, names[i].name) == 0) {
			*out = names[i].type;
			return 0;
		}
	}
	return -KVS_EPARAM;
}

float kvs_round_to(enum kvs_dtype t, float x)
{
	switch (t) {
	case KVS_DTYPE_F16:
		return kvs_f16_to_f32(kvs_f32_to_f16(x));
	case KVS_DTYPE_BF16:
		return kvs_bf16_to_f32(kvs_f32_to_bf16(x));
	default:
		return x;
	}
}

float kvs_dtype_load(enum kvs_dtype t, const void *base, size_t i)
{
	const uint8_t *p = base;

	switch (t) {
	case KVS_DTYPE_F16:
		p += 2 * i;
		return kvs_f16_to_f32((uint16_t)(p[0] | p[1] << 8));
	case KVS_DTYPE_BF16:
		p += 2 * i;
		return kvs_bf16_to_f32((uint16_t)(p[0] | p[1] << 8));
	default:
		p += 4 * i;
		return bits_f32((uint32_t)p[0] | (uint32_t)p[1] << 8 |
				(uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
	}
}

void kvs_dtype_store(enum kvs_dtype t, void *base, size_t i, float x)
{
	uint8_t *p = base;
	uint32_t b;

	switch (t) {
	case KVS_DTYPE_F16:
	case KVS_DTYPE_BF16:
		b = t == KVS_DTYPE_F16 ? kvs_f32_to_f16(x) : kvs_f32_to_bf16(x);
		p += 2 * i;
		p[0] = (uint8_t)b;
		p[1] = (uint8_t)(b >> 8);
		return;
	default:
		b = f32_bits(x);
		p += 4 * i;
		p[0] = (uint8_t)b;
		p[1] = (uint8_t)(b >> 8);
		p[2] = (uint8_t)(b >> 16);
		p[3] = (uint8_t)(b >> 24);
	}
}

void kvs_widen(enum kvs_dtype t, const void *base, size_t first, size_t n,
	       float *out)
{
	const uint8_t *p = base;

	switch (t) {
	case KVS_DTYPE_F32:
		memcpy(out, p + 4 * first, 4 * n);
		return;
	case KVS_DTYPE_BF16:
		for (size_t i = 0; i < n; i++)
			out[i] = bits_f32(
				(uint32_t)get_le16(p + 2 * (first + i)) << 16);
		return;
	case KVS_DTYPE_F16:
		for (size_t i = 0; i < n; i++)
			out[i] = f16_to_f32(get_le16(p + 2 * (first + i)));
		return;
	}
}
