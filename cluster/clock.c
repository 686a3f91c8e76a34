/*
 * clock.c - the monotonic clock of the cluster module's threads: now in
 * milliseconds, deadlines for pthread_cond_timedwait, and condition
 * variables that wait on that clock (a wall-clock jump must not shorten or
 * stretch a lease renewal).
 */
#include <pthread.h>
#include <time.h>

#include "cluster_internal.h"

int64_t kvs_cluster_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void kvs_cluster_deadline(unsigned ms, struct timespec *out)
{
	clock_gettime(CLOCK_MONOTONIC, out);
	out->tv_sec += ms / 1000;
	out->tv_nsec += (long)(ms % 1000) * 1000000;
	if (out->tv_nsec >= 1000000000) {
		out->tv_sec++;
		out->tv_nsec -= 1000000000;
	}
}

int kvs_cluster_cond_init(pthread_cond_t *cond)
{
	pthread_condattr_t attr;
	int err = pthread_condattr_init(&attr);

	if (err)
		return -err;
	err = pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	if (!err)
		err = pthread_cond_init(cond, &attr);
	pthread_condattr_destroy(&attr);
	return -err;
}
