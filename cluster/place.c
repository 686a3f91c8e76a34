/*
 * place.c - weighted rendezvous (highest random weight) placement of
 * block keys over a member snapshot, and the per-client back-off marks.
 *
 * Member i scores key k as w_i / -ln(u_i(k)), with w_i its capacity and
 * u_i(k) in (0, 1) from XXH3-64 of the key (span id, then the layer as 4
 * little-endian bytes) seeded with the hash of the member's id.  -ln(u)/w
 * is exponential with rate w, so the member with the highest score (the
 * smallest of those exponentials) is member i with probability w_i / sum
 * w: shares follow capacity.  A member that joins takes from each other
 * member only the keys it now wins, so about w_new / sum w of all keys
 * move, all to it; one that leaves moves only its own keys.
 *
 * Scores are computed in double precision: two machines order two members
 * differently only if their scores agree to the last bit, and ties go to
 * the smaller id.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "cluster_internal.h"
#include "common/bytes.h"

#define BLOCK_KEY_SIZE (KVS_CLUSTER_SPAN_ID_SIZE + 4)

struct mark {
	char id[KVS_CLUSTER_NAME_MAX + 1];
	int64_t until_ms;
};

struct kvs_cluster_backoff {
	pthread_mutex_t lock;
	struct mark *mark;
	size_t count, cap;
};

/* ---- back-off ---- */

int kvs_cluster_backoff_create(struct kvs_cluster_backoff **out)
{
	struct kvs_cluster_backoff *b = calloc(1, sizeof(*b));
	int err;

	if (b == NULL)
		return -ENOMEM;
	err = pthread_mutex_init(&b->lock, NULL);
	if (err) {
		free(b);
		return -err;
	}
	*out = b;
	return 0;
}

void kvs_cluster_backoff_destroy(struct kvs_cluster_backoff *backoff)
{
	if (backoff == NULL)
		return;
	pthread_mutex_destroy(&backoff->lock);
	free(backoff->mark);
	free(backoff);
}

static struct mark *find_locked(struct kvs_cluster_backoff *b, const char *id)
{
	for (size_t i = 0; i < b->count; i++)
		if (strcmp(b->mark[i].id, id) == 0)
			return &b->mark[i];
	return NULL;
}

/* Drops the marks that have run out (the table stays as small as the
 * number of members down now). */
static void purge_locked(struct kvs_cluster_backoff *b, int64_t now)
{
	size_t kept = 0;

	for (size_t i = 0; i < b->count; i++)
		if (b->mark[i].until_ms > now)
			b->mark[kept++] = b->mark[i];
	b->count = kept;
}

int kvs_cluster_backoff_mark_down(struct kvs_cluster_backoff *backoff,
				  const char *id, unsigned ms)
{
	int64_t now = kvs_cluster_now_ms();
	struct mark *m;
	int err = 0;

	if (!kvs_cluster_name_valid(id))
		return -EINVAL;
	pthread_mutex_lock(&backoff->lock);
	purge_locked(backoff, now);
	m = find_locked(backoff, id);
	if (m == NULL && backoff->count == backoff->cap) {
		size_t cap = backoff->cap ? 2 * backoff->cap : 8;
		struct mark *grown =
			realloc(backoff->mark, cap * sizeof(*grown));

		if (grown == NULL) {
			err = -ENOMEM;
			goto unlock;
		}
		backoff->mark = grown;
		backoff->cap = cap;
	}
	if (m == NULL) {
		m = &backoff->mark[backoff->count++];
		strcpy(m->id, id);
	}
	m->until_ms = now + ms;
unlock:
	pthread_mutex_unlock(&backoff->lock);
	return err;
}

void kvs_cluster_backoff_clear(struct kvs_cluster_backoff *backoff,
			       const char *id)
{
	struct mark *m;

	pthread_mutex_lock(&backoff->lock);
	m = find_locked(backoff, id);
	if (m != NULL)
		*m = backoff->mark[--backoff->count];
	pthread_mutex_unlock(&backoff->lock);
}

static bool down_locked(struct kvs_cluster_backoff *b, const char *id,
			int64_t now)
{
	struct mark *m = find_locked(b, id);

	return m != NULL && m->until_ms > now;
}

bool kvs_cluster_backoff_is_down(struct kvs_cluster_backoff *backoff,
				 const char *id)
{
	bool down;

	pthread_mutex_lock(&backoff->lock);
	down = down_locked(backoff, id, kvs_cluster_now_ms());
	pthread_mutex_unlock(&backoff->lock);
	return down;
}

/* ---- placement ---- */

static double score(const struct kvs_cluster_members *members, size_t i,
		    const uint8_t key[BLOCK_KEY_SIZE])
{
	uint64_t h = XXH3_64bits_withSeed(key, BLOCK_KEY_SIZE,
					  kvs_cluster_members_seed(members, i));
	/* The top 53 bits, centred in their interval: u in (0, 1). */
	double u = ((double)(h >> 11) + 0.5) * 0x1p-53;

	return (double)kvs_cluster_members_get(members, i)->capacity / -log(u);
}

/* Whether (s, i) ranks before (t, j): higher score, then smaller id
 * (smaller index, as snapshots are sorted by id). */
static bool before(double s, size_t i, double t, size_t j)
{
	return s > t || (s == t && i < j);
}

size_t kvs_cluster_place(const struct kvs_cluster_members *members,
			 struct kvs_cluster_backoff *backoff,
			 const uint8_t span_id[KVS_CLUSTER_SPAN_ID_SIZE],
			 uint32_t layer, size_t n, uint32_t *rank)
{
	double best[KVS_CLUSTER_PLACE_MAX];
	uint8_t key[BLOCK_KEY_SIZE];
	size_t count = kvs_cluster_members_count(members), found = 0;
	int64_t now = kvs_cluster_now_ms();
	bool any_down;

	if (n > KVS_CLUSTER_PLACE_MAX)
		n = KVS_CLUSTER_PLACE_MAX;
	if (n == 0)
		return 0;
	memcpy(key, span_id, KVS_CLUSTER_SPAN_ID_SIZE);
	kvs_put32(key + KVS_CLUSTER_SPAN_ID_SIZE, layer);
	if (backoff != NULL)
		pthread_mutex_lock(&backoff->lock);
	any_down = backoff != NULL && backoff->count > 0;
	/* Insertion into the best @n so far: n is small (replicas plus a
	 * few fallbacks), the members few. */
	for (size_t i = 0; i < count; i++) {
		const struct kvs_cluster_member *m =
			kvs_cluster_members_get(members, i);
		double s;
		size_t at;

		if (m->capacity == 0 ||
		    (any_down && down_locked(backoff, m->id, now)))
			continue;
		s = score(members, i, key);
		at = found;
		while (at > 0 && before(s, i, best[at - 1], rank[at - 1]))
			at--;
		if (at == n)
			continue;
		if (found < n)
			found++;
		memmove(&best[at + 1], &best[at],
			(found - 1 - at) * sizeof(best[0]));
		memmove(&rank[at + 1], &rank[at],
			(found - 1 - at) * sizeof(rank[0]));
		best[at] = s;
		rank[at] = (uint32_t)i;
	}
	if (backoff != NULL)
		pthread_mutex_unlock(&backoff->lock);
	return found;
}
