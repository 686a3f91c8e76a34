/*
 * bytes.h - little-endian field access and alignment, for every on-disk
 * and on-wire encoding of the project (the block format, the store's
 * superblock, segment and record headers, the wire protocol).
 *
 * Encodings go through these functions, never through a cast of a buffer
 * to a struct: the byte order and the absence of padding are then the
 * code's, not the compiler's.  Header-only (static inline).
 */
#ifndef KVS_COMMON_BYTES_H
#define KVS_COMMON_BYTES_H

#include <stdint.h>

static inline void kvs_put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static inline void kvs_put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static inline void kvs_put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint16_t kvs_get16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static inline uint32_t kvs_get32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

static inline uint64_t kvs_get64(const uint8_t *p)
{
	return (uint64_t)kvs_get32(p) | (uint64_t)kvs_get32(p + 4) << 32;
}

/* @v rounded up to a multiple of @a (a > 0); the caller keeps the result
 * in range (callers check their sizes before aligning). */
static inline uint64_t kvs_align_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) / a * a;
}

#endif
