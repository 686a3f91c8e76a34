/*
 * bench_store.c - `kvstash bench store --dir DIR`: throughput of the store
 * engine with 96 KiB blocks (one layer of 128 tokens, 8 KV heads, head
 * dim 128, 2-bit codes, fp16 metadata) moved in 3 MiB batches (32 layers):
 *   DRAM put and get GB/s beside memcpy of as many bytes, in batches,
 *   out of a buffer as large as the data put (so as cold as the arena);
 *   NVMe write and read GB/s at queue depths 1, 8 and 32 (write-through
 *   puts, then gets after reopening so every read comes from the device);
 *   recovery: time to open a store of N records (default 100k);
 *   with --async: gets from NVMe (after a reopen) through the
 *   asynchronous batches an event loop uses (kvs_store_get_batch_async,
 *   waiting on kvs_store_event_fd, kvs_store_poll), 1 and 4 batches in
 *   flight, beside the same gets through kvs_store_get_batch in the same
 *   run (the ratio), and the store calls on the loop's thread (what an
 *   event loop is blocked by: the 99th percentile and the longest call,
 *   and their share of the run); the same for WRITTEN puts.
 * Only the store calls are timed; making the blocks is not.  Blocks differ
 * by id (kvs_block_finish over one quantized image).  bench/store_vs_fio.sh
 * runs fio beside it and prints the ratios.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_gen.h"
#include "cli_kvs.h"
#include "cli_util.h"
#include "bench_cmd.h"
#include "kvstash/store.h"

#define BATCH 32

static const char bench_usage[] =
	"usage: kvstash bench store --dir DIR [--dram-bytes BYTES]\n"
	"                           [--nvme-bytes BYTES] [--json]\n"
	"                           [--recovery-records N] [--async]\n"
	"\n"
	"DIR must be on the device to measure; the benchmark writes about\n"
	"3 x --nvme-bytes (default 1G) plus N x 100 KiB (default N = 100000)\n"
	"there and removes it afterwards.  --async measures the asynchronous\n"
	"batches of an event loop against the synchronous ones (another\n"
	"2 x --nvme-bytes).\n";

/* Block number @idx of a run tagged @run: its own span id, layer idx%32. */
static void gen_block(const struct kvs_bench_gen *g, uint64_t run, uint64_t idx,
		      uint8_t *out, struct kvs_store_key *key)
{
	struct kvs_ident ident;

	memset(&ident, 0, sizeof(ident));
	memcpy(ident.block_id, &run, sizeof(run));
	memcpy(ident.block_id + 8, &idx, sizeof(idx));
	ident.block_id[31] = 0x5a;
	ident.layer = (uint32_t)(idx % BATCH);
	ident.first_pos = idx / BATCH * 128;
	kvs_bench_gen_finish(g, &ident, out);
	memcpy(key->span_id, ident.block_id, KVS_ID_SIZE);
	key->layer = ident.layer;
}

struct batch {
	uint8_t *buf;
	const uint8_t *objs[BATCH];
	size_t lens[BATCH];
	struct kvs_store_key keys[BATCH];
	struct kvs_store_ref *refs[BATCH];
	int res[BATCH];
};

static void batch_fill(struct batch *b, const struct kvs_bench_gen *g,
		       uint64_t run, uint64_t first)
{
	for (int i = 0; i < BATCH; i++) {
		gen_block(g, run, first + (uint64_t)i, b->buf + i * g->size,
			  &b->keys[i]);
		b->objs[i] = b->buf + i * g->size;
		b->lens[i] = g->size;
	}
}

static int open_at(const char *dir, const char *sub, uint64_t dram,
		   uint64_t nvme, unsigned qd, struct kvs_store **s)
{
	struct kvs_store_opts o;
	char path[4096];
	int err;

	snprintf(path, sizeof(path), "%s/%s", dir, sub);
	kvs_store_opts_default(&o);
	kvs_cli_store_pinning(&o);
	o.dram_capacity = dram;
	o.nvme_capacity = nvme;
	o.segment_size = 64ull << 20;
	o.queue_depth = qd;
	o.write_through = nvme > 0;
	err = kvs_store_open(path, &o, s);
	if (err)
		kvs_cli_fail("bench store", err, path);
	return err;
}

/* Puts @nb batches of run @run; seconds spent in the store. */
static int put_batches(struct kvs_store *s, const struct kvs_bench_gen *g,
		       struct batch *b, uint64_t run, uint64_t nb,
		       enum kvs_durability dur, double *secs)
{
	double t = 0;

	for (uint64_t k = 0; k < nb; k++) {
		batch_fill(b, g, run, k * BATCH);
		double t0 = kvs_bench_now();
		int err = kvs_store_put_batch(s, b->objs, b->lens, BATCH, dur,
					      b->res);

		t += kvs_bench_now() - t0;
		if (err) {
			kvs_cli_fail("bench store", err, "put");
			return err;
		}
	}
	*secs = t;
	return 0;
}

/* Gets @nb batches of run @run, copying out when @copy_to; seconds. */
static int get_batches(struct kvs_store *s, const struct kvs_bench_gen *g,
		       struct batch *b, uint64_t run, uint64_t nb,
		       uint8_t *copy_to, double *secs)
{
	struct kvs_store_ref *refs[BATCH];
	double t = 0;

	for (uint64_t k = 0; k < nb; k++) {
		for (int i = 0; i < BATCH; i++) {
			b->keys[i].layer = (uint32_t)i;
			uint64_t idx = k * BATCH + (uint64_t)i;

			memset(b->keys[i].span_id, 0, KVS_ID_SIZE);
			memcpy(b->keys[i].span_id, &run, sizeof(run));
			memcpy(b->keys[i].span_id + 8, &idx, sizeof(idx));
			b->keys[i].span_id[31] = 0x5a;
		}
		double t0 = kvs_bench_now();
		int err = kvs_store_get_batch(s, b->keys, BATCH, refs, b->res);

		for (int i = 0; !err && i < BATCH; i++) {
			if (b->res[i]) {
				err = b->res[i];
				break;
			}
			if (copy_to)
				memcpy(copy_to + i * g->size,
				       kvs_store_ref_data(refs[i]), g->size);
		}
		for (int i = 0; i < BATCH; i++)
			kvs_store_ref_release(refs[i]);
		t += kvs_bench_now() - t0;
		if (err) {
			kvs_cli_fail("bench store", err, "get");
			return err;
		}
	}
	*secs = t;
	return 0;
}

struct results {
	double put, get, get_copy, memcpy_rate;
	double nvme_write[3], nvme_read[3];
	uint64_t rec_records;
	double rec_secs;
	bool async;
	/* [0]: 1 batch in flight, [1]: 4 */
	double async_get[2], async_put[2], sync_get, sync_put;
	/* store calls on the loop's thread (get, put): the 99th percentile
	 * and the longest of one call, and their share of the run */
	double call_p99_us[2], call_max_us[2], call_share[2];
};

static const unsigned qds[3] = { 1, 8, 32 };

static int bench_dram(const char *dir, const struct kvs_bench_gen *g,
		      struct batch *b, uint64_t bytes, struct results *r)
{
	uint64_t nb = bytes / ((uint64_t)BATCH * g->size);
	uint8_t *out = malloc(BATCH * g->size);
	struct kvs_store *s;
	double tput = 0, tget = 0, tcopy = 0, tmem = 0;
	int err;

	if (!out)
		return -ENOMEM;
	if (nb == 0)
		nb = 1;
	err = open_at(dir, "dram", bytes + bytes / 4 + (64ull << 20), 0, 32,
		      &s);
	if (err)
		goto free_out;
	err = put_batches(s, g, b, 1, nb, KVS_DURABILITY_MEMORY, &tput);
	if (!err)
		err = get_batches(s, g, b, 1, nb, NULL, &tget);
	if (!err)
		err = get_batches(s, g, b, 1, nb, out, &tcopy);
	/* the baseline copies as many bytes out of memory as cold */
	uint8_t *src = err ? NULL : malloc(nb * BATCH * g->size);

	if (!err && !src)
		err = -ENOMEM;
	for (uint64_t k = 0; !err && k < nb; k++)
		memset(src + k * BATCH * g->size, (int)k, BATCH * g->size);
	for (uint64_t k = 0; !err && k < nb; k++) {
		double t0 = kvs_bench_now();

		memcpy(out, src + k * BATCH * g->size, BATCH * g->size);
		tmem += kvs_bench_now() - t0;
		src[k] ^= out[k % 4096];
	}
	free(src);
	kvs_store_close(s);
	r->put = (double)(nb * BATCH * g->size) / tput / 1e9;
	r->get = (double)(nb * BATCH * g->size) / tget / 1e9;
	r->get_copy = (double)(nb * BATCH * g->size) / tcopy / 1e9;
	r->memcpy_rate = (double)(nb * BATCH * g->size) / tmem / 1e9;
free_out:
	free(out);
	return err;
}

static int bench_nvme(const char *dir, const struct kvs_bench_gen *g,
		      struct batch *b, uint64_t bytes, struct results *r)
{
	uint64_t nb = bytes / ((uint64_t)BATCH * g->size);
	double t;
	int err = 0;

	if (nb == 0)
		nb = 1;
	for (int q = 0; q < 3 && !err; q++) {
		char sub[16];
		struct kvs_store *s;

		snprintf(sub, sizeof(sub), "qd%u", qds[q]);
		err = open_at(dir, sub, 64ull << 20, 64ull << 30, qds[q], &s);
		if (err)
			break;
		err = put_batches(s, g, b, 2, nb, KVS_DURABILITY_WRITTEN, &t);
		kvs_store_close(s);
		if (err)
			break;
		r->nvme_write[q] = (double)(nb * BATCH * g->size) / t / 1e9;
		err = open_at(dir, sub, 64ull << 20, 64ull << 30, qds[q], &s);
		if (err)
			break;
		err = get_batches(s, g, b, 2, nb, NULL, &t);
		kvs_store_close(s);
		r->nvme_read[q] = (double)(nb * BATCH * g->size) / t / 1e9;
	}
	return err;
}

static int bench_recovery(const char *dir, const struct kvs_bench_gen *g,
			  struct batch *b, uint64_t records, struct results *r)
{
	struct kvs_store_stats st;
	struct kvs_store *s;
	double t;
	int err;

	err = open_at(dir, "recovery", 64ull << 20, 1ull << 40, 32, &s);
	if (err)
		return err;
	err = put_batches(s, g, b, 3, (records + BATCH - 1) / BATCH,
			  KVS_DURABILITY_WRITTEN, &t);
	kvs_store_close(s);
	if (err)
		return err;
	t = kvs_bench_now();
	err = open_at(dir, "recovery", 64ull << 20, 1ull << 40, 32, &s);
	if (err)
		return err;
	r->rec_secs = kvs_bench_now() - t;
	kvs_store_stats_get(s, &st);
	r->rec_records = st.nvme.blocks;
	kvs_store_close(s);
	return 0;
}

/* ---- asynchronous batches on an event loop --------------------------- */

#define ASYNC_INFLIGHT 4

struct async_slot {
	struct batch b;
	bool busy; /* submitted, callback not yet run */
	bool done; /* callback ran, results not yet looked at */
	int status;
};

static void async_done(void *arg, int status)
{
	struct async_slot *sl = arg;

	sl->busy = false;
	sl->done = true;
	sl->status = status;
}

/* A batch finished (inline or by its callback): its refs released, its
 * results checked. */
static int async_reap(struct async_slot *sl, bool get)
{
	int err = sl->status;

	for (int i = 0; i < BATCH; i++) {
		if (!err && sl->b.res[i])
			err = sl->b.res[i];
		if (get)
			kvs_store_ref_release(sl->b.refs[i]);
	}
	return err;
}

/* Sets the keys of batch @k of run @run in @b (as get_batches does). */
static void batch_keys(struct batch *b, uint64_t run, uint64_t k)
{
	for (int i = 0; i < BATCH; i++) {
		uint64_t idx = k * BATCH + (uint64_t)i;

		memset(b->keys[i].span_id, 0, KVS_ID_SIZE);
		memcpy(b->keys[i].span_id, &run, sizeof(run));
		memcpy(b->keys[i].span_id + 8, &idx, sizeof(idx));
		b->keys[i].span_id[31] = 0x5a;
		b->keys[i].layer = (uint32_t)i;
	}
}

/* Durations of the store calls of one loop (seconds). */
struct call_times {
	double *v;
	size_t n, cap;
	double sum;
};

static void call_note(struct call_times *ct, double c)
{
	ct->sum += c;
	if (ct->n < ct->cap)
		ct->v[ct->n++] = c;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/*
 * An event loop moving @nb batches of run @run (gets, or WRITTEN puts
 * with @get false), @depth at a time: submit while a slot is free, then
 * wait on the store's event fd and poll.  Seconds in all into *@secs, the
 * durations of the store calls into @ct.  Blocks are made before the
 * clock starts.
 */
static int async_loop(struct kvs_store *s, const struct kvs_bench_gen *g,
		      struct async_slot *slots, unsigned depth, uint64_t run,
		      uint64_t nb, bool get, double *secs,
		      struct call_times *ct)
{
	struct pollfd pfd = { .fd = kvs_store_event_fd(s), .events = POLLIN };
	uint64_t next = 0, finished = 0;
	double t0;
	int err = 0;

	if (pfd.fd < 0)
		return -ENOMEM;
	t0 = kvs_bench_now();
	while (finished < nb && !err) {
		for (unsigned d = 0; d < depth && next < nb && !err; d++) {
			struct async_slot *sl = &slots[d];
			double c0, c;
			int rc;

			if (sl->busy)
				continue;
			if (get) {
				batch_keys(&sl->b, run, next);
			} else {
				double m0 = kvs_bench_now();

				batch_fill(&sl->b, g, run, next * BATCH);
				t0 += kvs_bench_now() - m0;
			}
			sl->busy = true;
			sl->done = false;
			sl->status = 0;
			c0 = kvs_bench_now();
			rc = get ? kvs_store_get_batch_async(
					   s, sl->b.keys, BATCH, sl->b.refs,
					   sl->b.res, async_done, sl)
				 : kvs_store_put_batch_async(
					   s, sl->b.objs, sl->b.lens, BATCH,
					   KVS_DURABILITY_WRITTEN, sl->b.res,
					   async_done, sl);
			c = kvs_bench_now() - c0;
			call_note(ct, c);
			next++;
			if (rc < 0) {
				err = rc;
			} else if (rc == 1) {
				sl->busy = false;
				err = async_reap(sl, get);
				finished++;
			}
		}
		if (err)
			break;
		/* one turn: what was submitted goes out, completions come */
		for (;;) {
			bool waiting = false;

			double c0 = kvs_bench_now(), c;
			unsigned n = kvs_store_poll(s);

			c = kvs_bench_now() - c0;
			call_note(ct, c);
			for (unsigned d = 0; n && d < depth; d++) {
				struct async_slot *sl = &slots[d];
				int e2;

				if (!sl->done)
					continue;
				sl->done = false;
				e2 = async_reap(sl, get);
				err = err ? err : e2;
				finished++;
			}
			for (unsigned d = 0; d < depth; d++)
				waiting |= slots[d].busy;
			if (n || finished >= nb || !waiting)
				break;
			poll(&pfd, 1, 100);
		}
	}
	*secs = kvs_bench_now() - t0;
	if (err)
		kvs_cli_fail("bench store", err,
			     get ? "async get" : "async put");
	return err;
}

static int bench_async(const char *dir, const struct kvs_bench_gen *g,
		       struct batch *b, uint64_t bytes, struct results *r)
{
	static const unsigned depths[2] = { 1, ASYNC_INFLIGHT };
	uint64_t nb = bytes / ((uint64_t)BATCH * g->size), total;
	struct async_slot *slots = calloc(ASYNC_INFLIGHT, sizeof(*slots));
	struct call_times ct[2] = { { 0 } };
	struct kvs_store *s;
	double t = 0, busy[2] = { 0 };
	int err = slots ? 0 : -ENOMEM;

	if (nb == 0)
		nb = 1;
	total = nb * BATCH * g->size;
	for (int k = 0; k < 2 && !err; k++) {
		ct[k].cap = 1u << 20;
		ct[k].v = malloc(ct[k].cap * sizeof(*ct[k].v));
		if (!ct[k].v)
			err = -ENOMEM;
	}
	for (int d = 0; !err && d < ASYNC_INFLIGHT; d++) {
		slots[d].b.buf = malloc(BATCH * g->size);
		if (!slots[d].b.buf)
			err = -ENOMEM;
	}
	/* synchronous baseline: puts, then gets after a reopen */
	if (!err)
		err = open_at(dir, "async", 64ull << 20, 64ull << 30, 32, &s);
	if (!err) {
		err = put_batches(s, g, b, 4, nb, KVS_DURABILITY_WRITTEN, &t);
		kvs_store_close(s);
		r->sync_put = (double)total / t / 1e9;
	}
	if (!err)
		err = open_at(dir, "async", 64ull << 20, 64ull << 30, 32, &s);
	if (!err) {
		err = get_batches(s, g, b, 4, nb, NULL, &t);
		kvs_store_close(s);
		r->sync_get = (double)total / t / 1e9;
	}
	for (int d = 0; d < 2 && !err; d++) {
		uint64_t run = 5 + (uint64_t)d;

		err = open_at(dir, "async", 64ull << 20, 64ull << 30, 32, &s);
		if (err)
			break;
		err = async_loop(s, g, slots, depths[d], run, nb, false, &t,
				 &ct[1]);
		kvs_store_close(s);
		if (err)
			break;
		r->async_put[d] = (double)total / t / 1e9;
		busy[1] += t;
		err = open_at(dir, "async", 64ull << 20, 64ull << 30, 32, &s);
		if (err)
			break;
		err = async_loop(s, g, slots, depths[d], run, nb, true, &t,
				 &ct[0]);
		kvs_store_close(s);
		r->async_get[d] = (double)total / t / 1e9;
		busy[0] += t;
	}
	for (int k = 0; k < 2 && !err; k++) {
		qsort(ct[k].v, ct[k].n, sizeof(*ct[k].v), cmp_double);
		if (ct[k].n) {
			r->call_p99_us[k] = ct[k].v[ct[k].n * 99 / 100] * 1e6;
			r->call_max_us[k] = ct[k].v[ct[k].n - 1] * 1e6;
		}
		r->call_share[k] = busy[k] > 0 ? ct[k].sum / busy[k] : 0;
	}
	free(ct[0].v);
	free(ct[1].v);
	for (int d = 0; slots && d < ASYNC_INFLIGHT; d++)
		free(slots[d].b.buf);
	free(slots);
	r->async = !err;
	return err;
}

static void print_results(const struct kvs_bench_gen *g,
			  const struct results *r, bool json)
{
	uint64_t rec = (g->size + KVS_STORE_RECORD_HEADER + 4095) / 4096 * 4096;
	struct kvs_cli_json j;

	if (!json) {
		printf("block %zu bytes (record %" PRIu64 "), batches of %d\n",
		       g->size, rec, BATCH);
		printf("DRAM  put %.2f GB/s  get %.2f GB/s (zero-copy ref)  "
		       "get+copy %.2f GB/s  memcpy %.2f GB/s\n",
		       r->put, r->get, r->get_copy, r->memcpy_rate);
		for (int q = 0; q < 3; q++)
			printf("NVMe  QD %-2u write %.2f GB/s  read %.2f GB/s "
			       "(object bytes)\n",
			       qds[q], r->nvme_write[q], r->nvme_read[q]);
		printf("recovery  %" PRIu64 " records in %.3f s\n",
		       r->rec_records, r->rec_secs);
		if (!r->async)
			return;
		printf("async NVMe get %.2f GB/s (1 batch in flight), %.2f "
		       "GB/s "
		       "(%d)  sync %.2f GB/s  ratio %.2f\n",
		       r->async_get[0], r->async_get[1], ASYNC_INFLIGHT,
		       r->sync_get, r->async_get[1] / r->sync_get);
		printf("async NVMe put %.2f GB/s (1 batch in flight), %.2f "
		       "GB/s "
		       "(%d)  sync %.2f GB/s  ratio %.2f\n",
		       r->async_put[0], r->async_put[1], ASYNC_INFLIGHT,
		       r->sync_put, r->async_put[1] / r->sync_put);
		printf("store calls on the loop: get p99 %.0f us, longest "
		       "%.0f us, %.0f%% of the time; put p99 %.0f us, longest "
		       "%.0f us, %.0f%% of the time\n",
		       r->call_p99_us[0], r->call_max_us[0],
		       100 * r->call_share[0], r->call_p99_us[1],
		       r->call_max_us[1], 100 * r->call_share[1]);
		return;
	}
	kvs_cli_json_init(&j, stdout);
	kvs_cli_json_object_begin(&j, NULL);
	kvs_cli_json_u64(&j, "block_bytes", g->size);
	kvs_cli_json_u64(&j, "record_bytes", rec);
	kvs_cli_json_u64(&j, "batch_blocks", BATCH);
	kvs_cli_json_object_begin(&j, "dram");
	kvs_cli_json_double(&j, "put_gbps", r->put);
	kvs_cli_json_double(&j, "get_gbps", r->get);
	kvs_cli_json_double(&j, "get_copy_gbps", r->get_copy);
	kvs_cli_json_double(&j, "memcpy_gbps", r->memcpy_rate);
	kvs_cli_json_object_end(&j);
	kvs_cli_json_array_begin(&j, "nvme");
	for (int q = 0; q < 3; q++) {
		kvs_cli_json_object_begin(&j, NULL);
		kvs_cli_json_u64(&j, "qd", qds[q]);
		kvs_cli_json_double(&j, "write_gbps", r->nvme_write[q]);
		kvs_cli_json_double(&j, "read_gbps", r->nvme_read[q]);
		kvs_cli_json_object_end(&j);
	}
	kvs_cli_json_array_end(&j);
	kvs_cli_json_object_begin(&j, "recovery");
	kvs_cli_json_u64(&j, "records", r->rec_records);
	kvs_cli_json_double(&j, "seconds", r->rec_secs);
	kvs_cli_json_object_end(&j);
	if (r->async) {
		kvs_cli_json_object_begin(&j, "async");
		kvs_cli_json_u64(&j, "inflight_batches", ASYNC_INFLIGHT);
		kvs_cli_json_double(&j, "get_gbps_1", r->async_get[0]);
		kvs_cli_json_double(&j, "get_gbps", r->async_get[1]);
		kvs_cli_json_double(&j, "sync_get_gbps", r->sync_get);
		kvs_cli_json_double(&j, "put_gbps_1", r->async_put[0]);
		kvs_cli_json_double(&j, "put_gbps", r->async_put[1]);
		kvs_cli_json_double(&j, "sync_put_gbps", r->sync_put);
		kvs_cli_json_double(&j, "get_call_p99_us", r->call_p99_us[0]);
		kvs_cli_json_double(&j, "get_call_max_us", r->call_max_us[0]);
		kvs_cli_json_double(&j, "get_call_share", r->call_share[0]);
		kvs_cli_json_double(&j, "put_call_p99_us", r->call_p99_us[1]);
		kvs_cli_json_double(&j, "put_call_max_us", r->call_max_us[1]);
		kvs_cli_json_double(&j, "put_call_share", r->call_share[1]);
		kvs_cli_json_object_end(&j);
	}
	kvs_cli_json_object_end(&j);
	kvs_cli_json_finish(&j);
}

int kvs_bench_store(int argc, char **argv)
{
	const char *dir = NULL;
	uint64_t dram_bytes = 256ull << 20, nvme_bytes = 1ull << 30;
	uint64_t records = 100000;
	bool json = false, async = false;
	struct kvs_cli_opt opts[] = {
		KVS_OPT_STR("dir", &dir, true),
		KVS_OPT_SIZE("dram-bytes", &dram_bytes, 1u << 20, 16ull << 30,
			     false),
		KVS_OPT_SIZE("nvme-bytes", &nvme_bytes, 1u << 20, 1ull << 40,
			     false),
		KVS_OPT_U64("recovery-records", &records, 1, 10000000, false),
		KVS_OPT_FLAG("json", &json),
		KVS_OPT_FLAG("async", &async),
	};
	struct results r = { 0 };
	struct batch b = { 0 };
	struct kvs_bench_gen g;
	char cmd[4200];
	int rc;

	rc = kvs_cli_parse("bench store", argc, argv, opts,
			   sizeof(opts) / sizeof(opts[0]), NULL, 0, NULL);
	if (rc)
		return kvs_cli_usage("bench store", bench_usage, rc);
	if (kvs_bench_gen_init(&g)) {
		kvs_cli_error("bench store", "cannot make the test block");
		return KVS_EXIT_FAIL;
	}
	b.buf = malloc(BATCH * g.size);
	rc = b.buf ? 0 : -ENOMEM;
	if (!rc)
		rc = bench_dram(dir, &g, &b, dram_bytes, &r);
	if (!rc)
		rc = bench_nvme(dir, &g, &b, nvme_bytes, &r);
	if (!rc)
		rc = bench_recovery(dir, &g, &b, records, &r);
	if (!rc && async)
		rc = bench_async(dir, &g, &b, nvme_bytes, &r);
	snprintf(cmd, sizeof(cmd),
		 "rm -rf '%s/dram' '%s/qd1' '%s/qd8' "
		 "'%s/qd32' '%s/recovery' '%s/async'",
		 dir, dir, dir, dir, dir, dir);
	if (system(cmd) != 0)
		kvs_cli_error("bench store", "could not clean %s", dir);
	if (!rc)
		print_results(&g, &r, json);
	free(b.buf);
	free(g.image);
	return rc ? KVS_EXIT_FAIL : KVS_EXIT_OK;
}
