/*
 * rng.h - the project's deterministic generator (xorshift64*), for tests,
 * fuzz corpora, the demo and the benchmarks: the same seed gives the same
 * numbers on every machine, so a failure reported with its seed replays.
 * Not for anything that must be unpredictable.  Header-only.
 */
#ifndef KVS_COMMON_RNG_H
#define KVS_COMMON_RNG_H

#include <stdint.h>

struct kvs_rng {
	uint64_t state; /* any value but 0 */
};

static inline uint64_t kvs_rng_next(struct kvs_rng *rng)
{
	uint64_t x = rng->state;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	rng->state = x;
	return x * 0x2545F4914F6CDD1DULL;
}

/* Uniform integer in [0, n), n > 0. */
static inline uint32_t kvs_rng_below(struct kvs_rng *rng, uint32_t n)
{
	return (uint32_t)(kvs_rng_next(rng) % n);
}

/* Uniform in [lo, hi). */
static inline float kvs_rng_uniform(struct kvs_rng *rng, float lo, float hi)
{
	double u = (double)(kvs_rng_next(rng) >> 11) / 9007199254740992.0;

	return (float)(lo + (hi - lo) * u);
}

/* Roughly normal (mean 0, variance 1): the sum of four uniforms, centred
 * and scaled. */
static inline float kvs_rng_normal(struct kvs_rng *rng)
{
	double sum = 0.0;

	for (int i = 0; i < 4; i++)
		sum += (double)(kvs_rng_next(rng) >> 11) * 0x1p-53;
	return (float)((sum - 2.0) * 1.7320508075688772);
}

#endif
