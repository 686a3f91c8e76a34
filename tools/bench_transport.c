/*
 * bench_transport.c - `kvstash bench transport --server HOST:PORT
 * --auth-key-file FILE`: the service through libkvstash, with 1 and 8
 * client threads (one connection each):
 *   get and put GB/s of single 96 KiB blocks (one layer of 128 tokens,
 *   8 KV heads, head dim 128, 2-bit, fp16 metadata) and of 3 MiB batches
 *   (32 such blocks a request), every get verified by the client as in
 *   use; puts at memory durability (the network and the DRAM tier, not
 *   the disk);
 *   lookup latency p50/p99 of a 256-block chain.
 * Each phase runs for --seconds.  bench/transport_vs_perftest.sh runs
 * ucx_perftest over the same transport and sizes in the same run and
 * prints the ratios.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_gen.h"
#include "cli_util.h"
#include "cmd.h"
#include "kvstash/client.h"

#define BATCH 32
#define CHAIN 256
#define SET 256 /* blocks of the working set (24 MiB) */

static const char bench_usage[] =
	"usage: kvstash bench transport --server HOST:PORT --auth-key-file "
	"FILE\n"
	"                               [--seconds S] [--threads N] [--json]\n"
	"                               [--window N] [--shared-memory]\n"
	"                               [--only get|get-batch|put|put-batch|"
	"lookup]\n"
	"\n"
	"Puts a 24 MiB working set of 96 KiB blocks (memory durability), "
	"then\n"
	"measures get and put throughput (single blocks and 3 MiB batches) "
	"and\n"
	"the latency of a 256-block chain lookup with 1 and N threads "
	"(default 8).\n"
	"Each thread keeps --window requests in flight (default 8; lookups: "
	"one).\n";

struct bench {
	const char *server, *key_file;
	bool shared_memory;
	double seconds;
	unsigned window;
	struct kvs_shape shape;
	size_t size;
	uint8_t *objs; /* SET blocks, size bytes apart */
	const uint8_t *ptrs[SET];
	size_t lens[SET];
	struct kvs_store_key keys[SET];
	uint8_t chain[CHAIN][KVS_ID_SIZE];
};

static int make_set(struct bench *b)
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

static int connect_client(const struct bench *b, struct kvs_client **out)
{
	struct kvs_client_opts o;

	kvs_client_opts_default(&o);
	o.address = b->server;
	o.key_file = b->key_file;
	o.shared_memory = b->shared_memory;
	return kvs_client_connect(&o, out);
}

enum phase {
	GET_ONE,
	GET_BATCH,
	PUT_ONE,
	PUT_BATCH,
	LOOKUP,
};

static const char *const phase_names[] = { "get 96 KiB", "get 3 MiB batch",
					   "put 96 KiB", "put 3 MiB batch",
					   "lookup 256" };
static const char *const phase_flags[] = { "get", "get-batch", "put",
					   "put-batch", "lookup" };

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

struct result {
	double gbps, p50_us, p99_us;
	uint64_t ops, errors;
};

static int run_phase(const struct bench *b, struct kvs_client **clients,
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

int kvs_bench_transport(int argc, char **argv)
{
	struct bench b = { .seconds = 2.0, .window = 8 };
	uint32_t threads_max = 8;
	const char *only = NULL;
	bool json = false;
	struct kvs_cli_opt opts[] = {
		KVS_OPT_STR("server", &b.server, true),
		KVS_OPT_STR("auth-key-file", &b.key_file, true),
		KVS_OPT_DOUBLE("seconds", &b.seconds, false),
		KVS_OPT_U32("threads", &threads_max, 1, 64, false),
		KVS_OPT_STR("only", &only, false),
		KVS_OPT_U32("window", &b.window, 1, 64, false),
		KVS_OPT_FLAG("json", &json),
		KVS_OPT_FLAG("shared-memory", &b.shared_memory),
	};
	struct kvs_client *clients[64] = { NULL };
	struct kvs_cli_json j;
	int rc, err, res[BATCH];
	int counts[2] = { 1, 0 };

	rc = kvs_cli_parse("bench transport", argc, argv, opts,
			   sizeof(opts) / sizeof(opts[0]), NULL, 0, NULL);
	if (rc)
		return kvs_cli_usage("bench transport", bench_usage, rc);
	counts[1] = (int)threads_max;
	err = make_set(&b);
	for (uint32_t i = 0; !err && i < threads_max; i++)
		err = connect_client(&b, &clients[i]);
	/* the working set, in batches */
	for (size_t i = 0; !err && i < SET; i += BATCH)
		err = kvs_client_put(clients[0], &b.ptrs[i], &b.lens[i], BATCH,
				     KVS_DURABILITY_MEMORY, res);
	if (err) {
		kvs_cli_error("bench transport", "%s: %s", b.server,
			      kvs_strerror(err));
		rc = KVS_EXIT_FAIL;
		goto out;
	}
	if (json) {
		kvs_cli_json_init(&j, stdout);
		kvs_cli_json_object_begin(&j, NULL);
		kvs_cli_json_u64(&j, "block_bytes", b.size);
		kvs_cli_json_array_begin(&j, "results");
	} else {
		printf("block: %zu bytes; batch: %d blocks (%.2f MiB)\n",
		       b.size, BATCH, (double)b.size * BATCH / (1 << 20));
	}
	for (int ti = 0; ti < 2; ti++) {
		for (int p = GET_ONE; p <= LOOKUP; p++) {
			struct result r = { 0 };

			if (only && strcmp(only, phase_flags[p]) != 0)
				continue;

			if (run_phase(&b, clients, counts[ti], (enum phase)p,
				      &r))
				r.errors = 1;
			if (json) {
				kvs_cli_json_object_begin(&j, NULL);
				kvs_cli_json_str(&j, "phase", phase_names[p]);
				kvs_cli_json_u64(&j, "threads",
						 (uint64_t)counts[ti]);
				kvs_cli_json_double(&j, "gbps", r.gbps);
				kvs_cli_json_double(&j, "ops_per_s",
						    (double)r.ops / b.seconds);
				if (p == LOOKUP) {
					kvs_cli_json_double(&j, "p50_us",
							    r.p50_us);
					kvs_cli_json_double(&j, "p99_us",
							    r.p99_us);
				}
				kvs_cli_json_u64(&j, "errors", r.errors);
				kvs_cli_json_object_end(&j);
			} else if (p == LOOKUP) {
				printf("%-16s %2d threads: p50 %7.1f us, p99 "
				       "%7.1f us (%" PRIu64 " lookups, %" PRIu64
				       " errors)\n",
				       phase_names[p], counts[ti], r.p50_us,
				       r.p99_us, r.ops, r.errors);
			} else {
				printf("%-16s %2d threads: %7.2f GB/s (%" PRIu64
				       " requests, %" PRIu64 " errors)\n",
				       phase_names[p], counts[ti], r.gbps,
				       r.ops, r.errors);
			}
			if (r.errors)
				rc = KVS_EXIT_FAIL;
		}
	}
	if (json) {
		kvs_cli_json_array_end(&j);
		kvs_cli_json_object_end(&j);
		kvs_cli_json_finish(&j);
	}
out:
	for (uint32_t i = 0; i < threads_max; i++)
		kvs_client_close(clients[i]);
	free(b.objs);
	return rc;
}
