/*
 * bench_net.c - the service benchmarks' working set and phases
 * (bench_net.h).
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "bench_gen.h"
#include "bench_net.h"

int bench_make_set(struct bench *b)
{
	struct kvs_bench_gen g;
	int err = kvs_bench_gen_init(&g);

	if (err)
		return err;
	b->shape = g.shape;
	b->size = g.size;
	b->objs = malloc((size_t)SET * b->size);
	if (!b->objs) {
		free(g.image);
		return -ENOMEM;
	}
	for (size_t i = 0; !err && i < SET; i++) {
		struct kvs_ident ident;
		uint8_t *obj = b->objs + i * b->size;

		/* 256 spans of layer 0: the lookup's chain */
		memset(&ident, 0, sizeof(ident));
		memcpy(ident.block_id, &i, sizeof(i));
		ident.block_id[31] = 0xbe;
		err = kvs_bench_gen_finish(&g, &ident, obj);
		memcpy(b->keys[i].span_id, ident.block_id, KVS_ID_SIZE);
		b->keys[i].layer = 0;
		b->ptrs[i] = obj;
		b->lens[i] = b->size;
		if (i < CHAIN)
			memcpy(b->chain[i], ident.block_id, KVS_ID_SIZE);
	}
	free(g.image);
	return err;
}

const char *const phase_names[] = { "get 96 KiB", "get 3 MiB batch",
				    "put 96 KiB", "put 3 MiB batch",
				    "lookup 256" };
const char *const phase_flags[] = { "get", "get-batch", "put", "put-batch",
				    "lookup" };

struct worker {
	const struct bench *b;
	struct kvs_client *c;
	enum phase phase;
	int id;
	pthread_barrier_t *start;
	double seconds;
	unsigned window;
	uint64_t bytes, ops, errors;
	double *lat; /* lookup latencies, seconds */
	size_t n_lat, cap_lat;
};

/* One request in flight and what it lands in. */
struct slot {
	struct kvs_client_req *req;
	void *bufs[BATCH];
	size_t caps[BATCH], lens[BATCH], prefix;
	int res[BATCH], n;
	double t0;
};

static int submit(struct worker *w, uint64_t i, struct slot *sl)
{
	const struct bench *b = w->b;
	size_t first = (size_t)((i * 7 + (uint64_t)w->id * 31) % (SET - BATCH));
	static const uint32_t layer0 = 0;

	sl->n = w->phase == GET_BATCH || w->phase == PUT_BATCH ? BATCH : 1;
	sl->t0 = kvs_bench_now();
	switch (w->phase) {
	case GET_ONE:
	case GET_BATCH:
		for (int k = 0; k < sl->n; k++)
			sl->caps[k] = b->size;
		return kvs_client_get_async(
			w->c, &b->keys[first], (size_t)sl->n, sl->bufs,
			sl->caps, sl->lens, sl->res, NULL, NULL, &sl->req);
	case PUT_ONE:
	case PUT_BATCH:
		return kvs_client_put_async(
			w->c, &b->ptrs[first], &b->lens[first], (size_t)sl->n,
			KVS_DURABILITY_MEMORY, sl->res, NULL, NULL, &sl->req);
	case LOOKUP:
	default:
		return kvs_client_lookup_async(
			w->c, (const uint8_t(*)[KVS_ID_SIZE])b->chain, CHAIN,
			&layer0, 1, &sl->prefix, NULL, NULL, &sl->req);
	}
}

static int finish(struct worker *w, struct slot *sl)
{
	int err = kvs_client_wait(sl->req);

	sl->req = NULL;
	if (w->phase == LOOKUP)
		return err ? err : sl->prefix == CHAIN ? 0 : -KVS_ENOTFOUND;
	for (int k = 0; !err && k < sl->n; k++)
		if (sl->res[k])
			err = sl->res[k];
	if (!err)
		w->bytes += (uint64_t)sl->n * w->b->size;
	return err;
}

static void record_latency(struct worker *w, double s)
{
	if (w->n_lat == w->cap_lat) {
		size_t cap = w->cap_lat ? 2 * w->cap_lat : 4096;
		double *l = realloc(w->lat, cap * sizeof(*l));

		if (!l)
			return;
		w->lat = l;
		w->cap_lat = cap;
	}
	w->lat[w->n_lat++] = s;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	/* lookups are timed one at a time; transfers keep a window */
	unsigned window = w->phase == LOOKUP ? 1 : w->window;
	struct slot *slots = calloc(window, sizeof(*slots));
	uint8_t *buf = malloc((size_t)window * BATCH * w->b->size);
	uint64_t i = 0;
	double end;

	pthread_barrier_wait(w->start);
	end = kvs_bench_now() + w->seconds;
	for (unsigned k = 0; slots && buf && k < window; k++) {
		for (int j = 0; j < BATCH; j++)
			slots[k].bufs[j] =
				buf +
				((size_t)k * BATCH + (size_t)j) * w->b->size;
		if (submit(w, i++, &slots[k]))
			w->errors++;
	}
	for (unsigned k = 0; slots && buf; k = (k + 1) % window) {
		struct slot *sl = &slots[k];

		if (!sl->req)
			break;
		if (finish(w, sl)) {
			w->errors++;
		} else {
			w->ops++;
			if (w->phase == LOOKUP)
				record_latency(w, kvs_bench_now() - sl->t0);
		}
		if (kvs_bench_now() < end && submit(w, i++, sl))
			w->errors++;
	}
	for (unsigned k = 0; slots && k < window; k++)
		if (slots[k].req)
			finish(w, &slots[k]);
	free(slots);
	free(buf);
	return NULL;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

int bench_run_phase(const struct bench *b, struct kvs_client **clients,
		    int threads, enum phase phase, struct result *r)
{
	struct worker *w = calloc((size_t)threads, sizeof(*w));
	pthread_t *t = calloc((size_t)threads, sizeof(*t));
	pthread_barrier_t start;
	double *all = NULL;
	size_t n_all = 0;
	double t0, elapsed;

	if (!w || !t) {
		free(w);
		free(t);
		return -ENOMEM;
	}
	pthread_barrier_init(&start, NULL, (unsigned)threads + 1);
	for (int i = 0; i < threads; i++) {
		w[i] = (struct worker){ .b = b,
					.c = clients[i],
					.phase = phase,
					.id = i,
					.start = &start,
					.seconds = b->seconds,
					.window = b->window };
		pthread_create(&t[i], NULL, worker_main, &w[i]);
	}
	pthread_barrier_wait(&start);
	t0 = kvs_bench_now();
	memset(r, 0, sizeof(*r));
	for (int i = 0; i < threads; i++) {
		pthread_join(t[i], NULL);
		r->ops += w[i].ops;
		r->errors += w[i].errors;
		r->gbps += (double)w[i].bytes;
		n_all += w[i].n_lat;
	}
	elapsed = kvs_bench_now() - t0;
	r->gbps /= elapsed * 1e9;
	if (n_all && (all = malloc(n_all * sizeof(*all)))) {
		size_t k = 0;

		for (int i = 0; i < threads; i++) {
			memcpy(all + k, w[i].lat, w[i].n_lat * sizeof(*all));
			k += w[i].n_lat;
		}
		qsort(all, n_all, sizeof(*all), cmp_double);
		r->p50_us = all[n_all / 2] * 1e6;
		r->p99_us = all[n_all * 99 / 100] * 1e6;
	}
	for (int i = 0; i < threads; i++)
		free(w[i].lat);
	free(all);
	free(w);
	free(t);
	pthread_barrier_destroy(&start);
	return 0;
}
