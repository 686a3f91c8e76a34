/*
 * clock.h - the monotonic clock in nanoseconds, for timeouts, expiry and
 * time accounting (a wall-clock jump must not move them).  Header-only
 * (static inline).
 */
#ifndef KVS_COMMON_CLOCK_H
#define KVS_COMMON_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t kvs_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#endif
