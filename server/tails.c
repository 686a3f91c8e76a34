/*
 * tails.c - the residual-tail table of the prefill -> decode handoff: a
 * prefill node puts a request's tail under a request id with a time to
 * live; the decode node takes it, which deletes it.  Tails are short
 * lived and per request, so they live in the daemon's memory, not in the
 * store: a daemon restart loses them (the decode node then recomputes).
 * Expired tails are dropped by the loop's housekeeping and counted.
 * A chained hash table with a byte budget; loop thread only.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kvstash/error.h"
#include "server_internal.h"

#define TAIL_BUCKETS 1024u

struct tail {
	struct tail *next;
	uint8_t key[KVS_ID_SIZE];
	uint8_t *obj;
	size_t len;
	uint64_t expires_ns;
};

struct tail_table {
	struct tail *bucket[TAIL_BUCKETS];
	uint64_t capacity, bytes, count;
};

uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int tails_create(uint64_t capacity, struct tail_table **out)
{
	struct tail_table *t = calloc(1, sizeof(*t));

	if (!t)
		return -ENOMEM;
	t->capacity = capacity;
	*out = t;
	return 0;
}

static void tail_free(struct tail_table *t, struct tail **p)
{
	struct tail *x = *p;

	*p = x->next;
	t->bytes -= x->len;
	t->count--;
	free(x->obj);
	free(x);
}

void tails_destroy(struct tail_table *t)
{
	if (!t)
		return;
	for (unsigned b = 0; b < TAIL_BUCKETS; b++)
		while (t->bucket[b])
			tail_free(t, &t->bucket[b]);
	free(t);
}

static struct tail **tail_slot(struct tail_table *t,
			       const uint8_t key[KVS_ID_SIZE])
{
	struct tail **p = &t->bucket[(key[0] | key[1] << 8) % TAIL_BUCKETS];

	for (; *p; p = &(*p)->next)
		if (memcmp((*p)->key, key, KVS_ID_SIZE) == 0)
			break;
	return p;
}

int tails_put(struct tail_table *t, const uint8_t key[KVS_ID_SIZE],
	      uint8_t *obj, size_t len, uint64_t expires_ns)
{
	struct tail **p = tail_slot(t, key), *x;

	if (*p) /* a new tail for the same request replaces the old */
		tail_free(t, p);
	if (t->bytes + len > t->capacity)
		return -ENOSPC;
	x = calloc(1, sizeof(*x));
	if (!x)
		return -ENOMEM;
	memcpy(x->key, key, KVS_ID_SIZE);
	x->obj = obj;
	x->len = len;
	x->expires_ns = expires_ns;
	x->next = *p;
	*p = x;
	t->bytes += len;
	t->count++;
	return 0;
}

int tails_take(struct tail_table *t, const uint8_t key[KVS_ID_SIZE],
	       uint64_t now, uint8_t **obj, size_t *len)
{
	struct tail **p = tail_slot(t, key), *x = *p;

	if (!x || x->expires_ns <= now)
		return -KVS_ENOTFOUND;
	*obj = x->obj;
	*len = x->len;
	x->obj = NULL;
	tail_free(t, p);
	return 0;
}

uint64_t tails_expire(struct tail_table *t, uint64_t now)
{
	uint64_t n = 0;

	for (unsigned b = 0; b < TAIL_BUCKETS && t->count; b++) {
		struct tail **p = &t->bucket[b];

		while (*p) {
			if ((*p)->expires_ns <= now) {
				tail_free(t, p);
				n++;
			} else {
				p = &(*p)->next;
			}
		}
	}
	return n;
}

void tails_usage(const struct tail_table *t, uint64_t *count, uint64_t *bytes)
{
	*count = t->count;
	*bytes = t->bytes;
}
