/*
 * bench_attach.c - `kvstash bench attach --server HOST:PORT
 * --auth-key-file FILE`: the time from request to "ready to decode" of a
 * cached prefix held by a kvstashd, two ways, in one run:
 *
 *   2-bit  the decode runtime attaches the prefix's sealed blocks
 *          (kvs_seq_attach_prefix and _finish, then a device sync): one
 *          get of a layer's blocks at a time into pinned staging, the
 *          runtime's checks, copies into the page pool (GPU memory with
 *          CUDA), layer l + 1 in flight while layer l is copied;
 *   fp16   the same prefix as fp16 K/V through the same daemon and
 *          connection: the format's full-precision objects (residual
 *          tails of 128 tokens' Keys and Values each, taken through the
 *          tail handoff, verified by the client like blocks), a layer's
 *          objects at a time into pinned staging, copied into [layer][kv]
 *          [T][D] Key and Value buffers (GPU memory with CUDA), layer
 *          l + 1 in flight while layer l is copied.
 *
 * The prefix is synthetic (the times do not depend on the values): one
 * layer's K/V reused for every layer, prefilled and published through the
 * runtime, its fp16 objects put through the tail handoff (again before
 * each fp16 run: a take deletes them).  After a round that is not timed
 * (first touches of memory), prints the median of --runs runs of each,
 * the bytes moved and the ratio.  The daemon needs room for the
 * fp16 objects: --tail-capacity of at least twice the 2-bit size times
 * 2.7 (bench/attach_bench.py starts one so).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "bench_gen.h"
#include "cli_util.h"
#include "bench_cmd.h"
#include "common/rng.h"
#include "kvs_config.h"
#include "kvstash/client.h"
#include "kvstash/runtime.h"

#if KVS_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#define CMD "bench attach"
#define N_OPTS 15
#define MAX_RUNS 64
#define TTL_MS 600000

static const char attach_usage[] =
	"usage: kvstash bench attach --server HOST:PORT --auth-key-file FILE\n"
	"                            [--tokens N] [--layers N] [--kv-heads N]\n"
	"                            [--q-heads N] [--head-dim N] [--runs N]\n"
	"                            [--device auto|cpu|cuda] "
	"[--shared-memory]\n"
	"                            [--lanes N] [--json]\n"
	"\n"
	"The time to make a cached prefix of --tokens (default 32768) ready\n"
	"to decode from a kvstashd: the runtime attaching its 2-bit blocks\n"
	"into the page pool, beside the same prefix moved as fp16 K/V objects\n"
	"through the same daemon into device buffers.  Default shape: 32\n"
	"layers, 8 KV heads, 32 query heads, head dim 128 (Llama-3-8B).  The\n"
	"daemon needs --tail-capacity above 2 x layers x tokens x kv-heads x\n"
	"head-dim bytes x 1.01 for the fp16 objects.  --lanes (default 4):\n"
	"the connections each path spreads its gets over.\n";

struct attach_args {
	const char *server, *key_file, *device;
	uint32_t tokens, layers, kv_heads, q_heads, head_dim, runs, lanes;
	bool shared_memory, json;
};

struct bench {
	const struct attach_args *a;
	struct kvs_blockstore *bs;
	struct kvs_client *client; /* the block store's */
	/* the fp16 path's connections: client and lanes - 1 more */
	struct kvs_client *lane[KVS_BLOCKSTORE_LANES_MAX];
	struct kvs_rt *rt;
	bool cuda;
	uint32_t R, chunks; /* tokens a block, blocks a layer */
	size_t block_size; /* bytes of a 2-bit block */
	uint32_t *ids; /* [tokens + R] */
	uint16_t *keys, *values; /* one layer, [kv][T][D] fp16, host */
	void *dev_keys, *dev_values; /* the same in device memory (CUDA) */
	/* the fp16 objects */
	struct kvs_shape tail_shape;
	struct kvs_layout tail_layout;
	uint8_t *stage[2]; /* pinned with CUDA: chunks objects each */
	void *dst_k, *dst_v; /* [layers][kv][T][D] fp16, device memory */
	double publish_s;
};

/* ---- memory of the device ----------------------------------------------- */

static int dev_alloc(const struct bench *b, size_t bytes, void **out)
{
#if KVS_HAVE_CUDA
	if (b->cuda)
		return cudaMalloc(out, bytes) == cudaSuccess ? 0 : -KVS_ECUDA;
#endif
	*out = malloc(bytes);
	return *out ? 0 : -ENOMEM;
}

static void dev_free(const struct bench *b, void *p)
{
#if KVS_HAVE_CUDA
	if (b->cuda) {
		if (p)
			cudaFree(p);
		return;
	}
#endif
	free(p);
}

static int host_alloc(const struct bench *b, size_t bytes, uint8_t **out)
{
#if KVS_HAVE_CUDA
	if (b->cuda)
		return cudaHostAlloc((void **)out, bytes,
				     cudaHostAllocDefault) == cudaSuccess
			       ? 0
			       : -ENOMEM;
#endif
	*out = malloc(bytes);
	return *out ? 0 : -ENOMEM;
}

static void host_free(const struct bench *b, uint8_t *p)
{
#if KVS_HAVE_CUDA
	if (b->cuda) {
		if (p)
			cudaFreeHost(p);
		return;
	}
#endif
	free(p);
}

static int to_dev(const struct bench *b, void *dst, const void *src,
		  size_t bytes)
{
#if KVS_HAVE_CUDA
	if (b->cuda)
		return cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice) ==
				       cudaSuccess
			       ? 0
			       : -KVS_ECUDA;
#endif
	memcpy(dst, src, bytes);
	return 0;
}

/* ---- the prefix ------------------------------------------------------------
 */

static int setup(struct bench *b)
{
	const struct attach_args *a = b->a;
	size_t elems = (size_t)a->kv_heads * a->tokens * a->head_dim;
	struct kvs_rt_config cfg;
	struct kvs_rng rng = { 0x61747461636bull };
	int err;

	b->R = 128;
	b->chunks = a->tokens / b->R;
	{
		struct kvs_shape shape;
		struct kvs_layout lay;

		kvs_shape_default(&shape, (uint16_t)a->kv_heads,
				  (uint16_t)a->head_dim);
		kvs_block_layout(&shape, &lay);
		b->block_size = lay.total_size;
	}
	b->ids = malloc(sizeof(*b->ids) * (a->tokens + b->R));
	b->keys = malloc(2 * elems);
	b->values = malloc(2 * elems);
	if (!b->ids || !b->keys || !b->values)
		return -ENOMEM;
	for (uint32_t i = 0; i < a->tokens + b->R; i++)
		b->ids[i] = kvs_rng_below(&rng, 128000);
	for (size_t i = 0; i < elems; i++) {
		size_t d = i % a->head_dim;
		float bias = d % 37 == 5 ? 12.0f : 0.0f;

		kvs_dtype_store(KVS_DTYPE_F16, b->keys, i,
				bias + kvs_rng_uniform(&rng, -2.0f, 2.0f));
		kvs_dtype_store(KVS_DTYPE_F16, b->values, i,
				kvs_rng_uniform(&rng, -1.0f, 1.0f));
	}
	kvs_rt_config_default(&cfg, a->layers, a->q_heads,
			      (uint16_t)a->kv_heads, (uint16_t)a->head_dim);
	cfg.kv_dtype = KVS_DTYPE_F16;
	cfg.device = strcmp(a->device, "cpu") == 0    ? KVS_RT_CPU
		     : strcmp(a->device, "cuda") == 0 ? KVS_RT_CUDA
						      : KVS_RT_AUTO;
	cfg.max_tokens = a->tokens + 2 * b->R;
	cfg.pool_pages = a->layers * (cfg.max_tokens / b->R + 1);
	cfg.model_id = "kvstash-bench-attach";
	cfg.store = b->bs;
	err = kvs_rt_create(&cfg, &b->rt);
	if (err)
		return err;
	b->cuda = kvs_rt_device(b->rt) == KVS_RT_CUDA;
	b->dev_keys = b->keys;
	b->dev_values = b->values;
	if (b->cuda) {
		err = dev_alloc(b, 2 * elems, &b->dev_keys);
		if (!err)
			err = dev_alloc(b, 2 * elems, &b->dev_values);
		if (!err)
			err = to_dev(b, b->dev_keys, b->keys, 2 * elems);
		if (!err)
			err = to_dev(b, b->dev_values, b->values, 2 * elems);
	}
	return err;
}

/* Prefills every layer with the same K/V and publishes the blocks. */
static int publish(struct bench *b)
{
	const struct attach_args *a = b->a;
	struct kvs_batch *batch;
	struct kvs_seq *seq;
	struct kvs_rt_stats st;
	double t0 = kvs_bench_now();
	int err;

	err = kvs_batch_create(b->rt, 1, &batch);
	if (!err)
		err = kvs_seq_create(batch, &seq);
	if (!err)
		err = kvs_seq_append_ids(seq, b->ids, a->tokens);
	for (uint32_t l = 0; !err && l < a->layers; l++)
		err = kvs_seq_prefill(seq, l, b->dev_keys, b->dev_values,
				      a->tokens);
	if (!err)
		err = kvs_seq_publish(seq);
	if (!err)
		err = kvs_rt_flush(b->rt);
	b->publish_s = kvs_bench_now() - t0;
	kvs_rt_stats(b->rt, &st);
	if (!err && st.published + st.publish_skipped !=
			    (uint64_t)a->layers * b->chunks) {
		kvs_cli_error(CMD, "%llu of %llu blocks published",
			      (unsigned long long)st.published,
			      (unsigned long long)a->layers * b->chunks);
		err = -EIO;
	}
	kvs_batch_destroy(batch);
	return err;
}

/* The 2-bit attach, timed: request to ready to decode; @split: the
 * runtime's time in the gets and in the checks and copies (its stats). */
static int attach_once(struct bench *b, double *secs, double split[2])
{
	struct kvs_rt_stats s0, s1;
	const struct attach_args *a = b->a;
	uint32_t attached = 0, kept = 0;
	struct kvs_batch *batch;
	struct kvs_seq *seq;
	double t0;
	int err;

	err = kvs_batch_create(b->rt, 1, &batch);
	if (!err)
		err = kvs_seq_create(batch, &seq);
	if (err)
		return err;
	kvs_rt_stats(b->rt, &s0);
	t0 = kvs_bench_now();
	err = kvs_seq_attach_prefix(seq, b->ids, a->tokens + b->R, UINT32_MAX,
				    &attached);
	if (!err)
		err = kvs_seq_attach_finish(seq, &kept);
	if (!err)
		err = kvs_rt_sync(b->rt);
	*secs = kvs_bench_now() - t0;
	kvs_rt_stats(b->rt, &s1);
	split[0] = (double)(s1.fetch_get_us - s0.fetch_get_us) * 1e-6;
	split[1] = (double)(s1.fetch_copy_us - s0.fetch_copy_us) * 1e-6;
	if (!err && kept != a->tokens) {
		kvs_cli_error(CMD, "attached %u of %u tokens", kept, a->tokens);
		err = -EIO;
	}
	kvs_batch_destroy(batch);
	return err;
}

/* The 2-bit blocks alone, timed: the same gets as the attach's (a layer
 * at a time through the runtime's block store into pinned staging),
 * without the runtime's checks and copies: what the transport and the
 * daemon take of the attach's time. */
static int get_once(struct bench *b, double *secs)
{
	const struct attach_args *a = b->a;
	size_t n = b->chunks, cap = b->block_size;
	struct kvs_store_key *keys = calloc(n, sizeof(*keys));
	void **bufs = calloc(n, sizeof(*bufs));
	size_t *caps = calloc(n, sizeof(*caps)),
	       *lens = calloc(n, sizeof(*lens));
	int *results = calloc(n, sizeof(*results));
	uint8_t(*span)[KVS_ID_SIZE] = calloc(n, KVS_ID_SIZE);
	int err = keys && bufs && caps && lens && results && span ? 0 : -ENOMEM;
	double t0;

	for (size_t i = 0; !err && i < n; i++)
		err = kvs_span_id("", kvs_rt_model_fp(b->rt),
				  i ? span[i - 1] : NULL, b->ids + i * b->R,
				  b->R, span[i]);
	t0 = kvs_bench_now();
	for (uint32_t l = 0; !err && l < a->layers; l++) {
		for (size_t i = 0; i < n; i++) {
			memcpy(keys[i].span_id, span[i], KVS_ID_SIZE);
			keys[i].layer = l;
			bufs[i] = b->stage[l % 2] + i * cap;
			caps[i] = cap;
		}
		err = kvs_blockstore_get(b->bs, keys, n, bufs, caps, lens,
					 results);
		for (size_t i = 0; !err && i < n; i++)
			if (results[i] || lens[i] != cap)
				err = results[i] ? results[i] : -EIO;
	}
	*secs = kvs_bench_now() - t0;
	free(keys);
	free(bufs);
	free(caps);
	free(lens);
	free(results);
	free(span);
	return err;
}

/* ---- the fp16 objects
 * -------------------------------------------------------- */

static void fp16_id(uint32_t layer, uint32_t chunk, uint8_t id[KVS_ID_SIZE])
{
	memset(id, 0, KVS_ID_SIZE);
	snprintf((char *)id, KVS_ID_SIZE, "fp16 %u %u", layer, chunk);
}

static int fp16_setup(struct bench *b)
{
	const struct attach_args *a = b->a;
	size_t per_layer = (size_t)a->kv_heads * a->tokens * a->head_dim * 2;
	int err;

	/* R Keys and R Values a tail: a shape whose residual is 2R */
	kvs_shape_default(&b->tail_shape, (uint16_t)a->kv_heads,
			  (uint16_t)a->head_dim);
	b->tail_shape.span = 2 * b->R;
	b->tail_shape.residual = 2 * b->R;
	err = kvs_tail_layout(&b->tail_shape, KVS_DTYPE_F16, b->R, b->R,
			      &b->tail_layout);
	for (int i = 0; !err && i < 2; i++)
		err = host_alloc(b,
				 (size_t)b->chunks * b->tail_layout.total_size,
				 &b->stage[i]);
	if (!err)
		err = dev_alloc(b, per_layer * a->layers, &b->dst_k);
	if (!err)
		err = dev_alloc(b, per_layer * a->layers, &b->dst_v);
	return err;
}

/* Puts every layer's fp16 objects through the tail handoff. */
static int fp16_put(struct bench *b)
{
	const struct attach_args *a = b->a;
	size_t row = (size_t)b->R * a->head_dim;
	uint16_t *k = malloc(2 * row * a->kv_heads);
	uint16_t *v = malloc(2 * row * a->kv_heads);
	struct kvs_client_req **reqs = calloc(b->chunks, sizeof(*reqs));
	uint8_t **objs = calloc(b->chunks, sizeof(*objs));
	struct kvs_ident ident;
	int err = k && v && reqs && objs ? 0 : -ENOMEM;

	for (uint32_t l = 0; !err && l < a->layers; l++) {
		uint32_t queued = 0;

		for (uint32_t c = 0; !err && c < b->chunks; c++) {
			size_t len;
			uint8_t id[KVS_ID_SIZE];

			for (uint32_t h = 0; h < a->kv_heads; h++) {
				size_t from = ((size_t)h * a->tokens +
					       (size_t)c * b->R) *
					      a->head_dim;

				memcpy(k + h * row, b->keys + from, 2 * row);
				memcpy(v + h * row, b->values + from, 2 * row);
			}
			memset(&ident, 0, sizeof(ident));
			ident.layer = l;
			ident.first_pos = (uint64_t)c * b->R;
			err = kvs_tail_encode(&b->tail_shape, &ident,
					      KVS_DTYPE_F16, b->R, b->R, k, v,
					      0, &objs[c], &len);
			if (!err && len != b->tail_layout.total_size)
				err = -EIO;
			fp16_id(l, c, id);
			if (!err)
				err = kvs_client_tail_put_async(
					b->client, id, objs[c], len, TTL_MS,
					NULL, NULL, &reqs[queued]);
			if (!err)
				queued++;
		}
		for (uint32_t i = 0; i < queued; i++) {
			int r = kvs_client_wait(reqs[i]);

			err = err ? err : r;
		}
		for (uint32_t c = 0; c < b->chunks; c++) {
			free(objs[c]);
			objs[c] = NULL;
		}
	}
	free(k);
	free(v);
	free(reqs);
	free(objs);
	return err;
}

/* Copies the K and V sections of @layer's objects in @stage into the
 * [layers][kv][T][D] buffers (asynchronously with CUDA, on @stream). */
static int fp16_copy(struct bench *b, uint32_t layer, const uint8_t *stage,
		     void *stream)
{
	const struct attach_args *a = b->a;
	size_t piece = (size_t)b->R * a->head_dim * 2; /* a head's rows */
	size_t pitch = (size_t)a->tokens * a->head_dim * 2;
	size_t size = b->tail_layout.total_size;

	for (uint32_t c = 0; c < b->chunks; c++) {
		const uint8_t *obj = stage + (size_t)c * size;
		size_t at = ((size_t)layer * a->kv_heads * a->tokens +
			     (size_t)c * b->R) *
			    a->head_dim * 2;
		const uint8_t *ks = obj + b->tail_layout.offset[0];
		const uint8_t *vs = obj + b->tail_layout.offset[1];

#if KVS_HAVE_CUDA
		if (b->cuda) {
			if (cudaMemcpy2DAsync(
				    (uint8_t *)b->dst_k + at, pitch, ks, piece,
				    piece, a->kv_heads, cudaMemcpyHostToDevice,
				    (cudaStream_t)stream) != cudaSuccess ||
			    cudaMemcpy2DAsync(
				    (uint8_t *)b->dst_v + at, pitch, vs, piece,
				    piece, a->kv_heads, cudaMemcpyHostToDevice,
				    (cudaStream_t)stream) != cudaSuccess)
				return -KVS_ECUDA;
			continue;
		}
#endif
		(void)stream;
		for (uint32_t h = 0; h < a->kv_heads; h++) {
			memcpy((uint8_t *)b->dst_k + at + h * pitch,
			       ks + h * piece, piece);
			memcpy((uint8_t *)b->dst_v + at + h * pitch,
			       vs + h * piece, piece);
		}
	}
	return 0;
}

/* The fp16 path, timed: takes every object, layer by layer, into the
 * alternate staging set and copies it into the device buffers. */
static int fp16_once(struct bench *b, double *secs)
{
	const struct attach_args *a = b->a;
	size_t size = b->tail_layout.total_size;
	struct kvs_client_req **reqs = calloc(b->chunks, sizeof(*reqs));
	size_t *lens = calloc(b->chunks, sizeof(*lens));
	void *stream = NULL;
	double t0;
	int err = reqs && lens ? 0 : -ENOMEM;
#if KVS_HAVE_CUDA
	void *done[2] = { NULL, NULL };
#endif

#if KVS_HAVE_CUDA
	if (!err && b->cuda &&
	    (cudaStreamCreateWithFlags((cudaStream_t *)&stream,
				       cudaStreamNonBlocking) != cudaSuccess ||
	     cudaEventCreateWithFlags((cudaEvent_t *)&done[0],
				      cudaEventDisableTiming) != cudaSuccess ||
	     cudaEventCreateWithFlags((cudaEvent_t *)&done[1],
				      cudaEventDisableTiming) != cudaSuccess))
		err = -KVS_ECUDA;
#endif
	t0 = kvs_bench_now();
	for (uint32_t l = 0; !err && l < a->layers; l++) {
		uint8_t *stage = b->stage[l % 2];
		uint32_t queued = 0;

#if KVS_HAVE_CUDA
		/* the copies out of this staging set (layer l - 2) are over */
		if (b->cuda && l >= 2 &&
		    cudaEventSynchronize((cudaEvent_t)done[l % 2]) !=
			    cudaSuccess)
			err = -KVS_ECUDA;
#endif
		for (uint32_t c = 0; !err && c < b->chunks; c++) {
			uint8_t id[KVS_ID_SIZE];

			fp16_id(l, c, id);
			err = kvs_client_tail_take_async(
				b->lane[c % b->a->lanes], id,
				stage + (size_t)c * size, size, &lens[c], NULL,
				NULL, &reqs[queued]);
			if (!err)
				queued++;
		}
		for (uint32_t i = 0; i < queued; i++) {
			int r = kvs_client_wait(reqs[i]);

			err = err ? err : r;
		}
		for (uint32_t c = 0; !err && c < b->chunks; c++)
			if (lens[c] != size)
				err = -EIO;
		if (!err)
			err = fp16_copy(b, l, stage, stream);
#if KVS_HAVE_CUDA
		if (!err && b->cuda &&
		    cudaEventRecord((cudaEvent_t)done[l % 2],
				    (cudaStream_t)stream) != cudaSuccess)
			err = -KVS_ECUDA;
#endif
	}
#if KVS_HAVE_CUDA
	if (b->cuda && stream &&
	    cudaStreamSynchronize((cudaStream_t)stream) != cudaSuccess && !err)
		err = -KVS_ECUDA;
#endif
	*secs = kvs_bench_now() - t0;
#if KVS_HAVE_CUDA
	for (int i = 0; i < 2; i++)
		if (done[i])
			cudaEventDestroy((cudaEvent_t)done[i]);
	if (stream)
		cudaStreamDestroy((cudaStream_t)stream);
#endif
	free(reqs);
	free(lens);
	return err;
}

/* The fp16 buffers hold the prefix (one layer checked, the last). */
static int fp16_check(struct bench *b)
{
	const struct attach_args *a = b->a;
	size_t per_layer = (size_t)a->kv_heads * a->tokens * a->head_dim * 2;
	uint8_t *got = malloc(per_layer);
	int err = got ? 0 : -ENOMEM;

#if KVS_HAVE_CUDA
	if (!err && b->cuda &&
	    cudaMemcpy(got, (uint8_t *)b->dst_v + per_layer * (a->layers - 1),
		       per_layer, cudaMemcpyDeviceToHost) != cudaSuccess)
		err = -KVS_ECUDA;
#endif
	if (!err && !b->cuda)
		memcpy(got, (uint8_t *)b->dst_v + per_layer * (a->layers - 1),
		       per_layer);
	if (!err && memcmp(got, b->values, per_layer) != 0) {
		kvs_cli_error(CMD, "the fp16 Values arrived wrong");
		err = -EIO;
	}
	free(got);
	return err;
}

/* ---- the command
 * --------------------------------------------------------------- */

static int cmp_double(const void *x, const void *y)
{
	double a = *(const double *)x, b = *(const double *)y;

	return (a > b) - (a < b);
}

static double median(double *v, uint32_t n)
{
	qsort(v, n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void report(const struct bench *b, double *t2, double *tg, double *t16,
		   double split[2][MAX_RUNS])
{
	const struct attach_args *a = b->a;
	double blocks = (double)a->layers * b->chunks;
	double bytes2, bytes16, m2, mg, m16, mget, mcopy;
	struct kvs_cli_json j;

	bytes2 = blocks * b->block_size;
	bytes16 = blocks * b->tail_layout.total_size;
	if (!a->json) {
		printf("prefix: %u tokens, %u layers, %u KV heads, head dim "
		       "%u, %s, %u connection(s) a path\n",
		       a->tokens, a->layers, a->kv_heads, a->head_dim,
		       b->cuda ? "CUDA" : "CPU", a->lanes);
		for (uint32_t i = 0; i < a->runs; i++)
			printf("run %u: 2-bit %.1f ms (gets %.1f ms), fp16 "
			       "%.1f "
			       "ms\n",
			       i + 1, t2[i] * 1e3, tg[i] * 1e3, t16[i] * 1e3);
	}
	m2 = median(t2, a->runs);
	m16 = median(t16, a->runs);
	mg = median(tg, a->runs);
	mget = median(split[0], a->runs);
	mcopy = median(split[1], a->runs);
	if (a->json) {
		kvs_cli_json_init(&j, stdout);
		kvs_cli_json_object_begin(&j, NULL);
		kvs_cli_json_str(&j, "device", b->cuda ? "cuda" : "cpu");
		kvs_cli_json_u64(&j, "tokens", a->tokens);
		kvs_cli_json_u64(&j, "layers", a->layers);
		kvs_cli_json_u64(&j, "kv_heads", a->kv_heads);
		kvs_cli_json_u64(&j, "head_dim", a->head_dim);
		kvs_cli_json_u64(&j, "runs", a->runs);
		kvs_cli_json_u64(&j, "lanes", a->lanes);
		kvs_cli_json_double(&j, "publish_s", b->publish_s);
		kvs_cli_json_u64(&j, "bytes_2bit", (uint64_t)bytes2);
		kvs_cli_json_u64(&j, "bytes_fp16", (uint64_t)bytes16);
		kvs_cli_json_double(&j, "attach_2bit_s", m2);
		kvs_cli_json_double(&j, "gets_2bit_s", mg);
		kvs_cli_json_double(&j, "attach_get_s", mget);
		kvs_cli_json_double(&j, "attach_copy_s", mcopy);
		kvs_cli_json_double(&j, "attach_fp16_s", m16);
		kvs_cli_json_double(&j, "fp16_over_2bit", m16 / m2);
		kvs_cli_json_array_begin(&j, "attach_2bit_runs_s");
		for (uint32_t i = 0; i < a->runs; i++)
			kvs_cli_json_double(&j, NULL, t2[i]);
		kvs_cli_json_array_end(&j);
		kvs_cli_json_array_begin(&j, "gets_2bit_runs_s");
		for (uint32_t i = 0; i < a->runs; i++)
			kvs_cli_json_double(&j, NULL, tg[i]);
		kvs_cli_json_array_end(&j);
		kvs_cli_json_array_begin(&j, "attach_fp16_runs_s");
		for (uint32_t i = 0; i < a->runs; i++)
			kvs_cli_json_double(&j, NULL, t16[i]);
		kvs_cli_json_array_end(&j);
		kvs_cli_json_object_end(&j);
		kvs_cli_json_finish(&j);
		return;
	}
	printf("2-bit attach  %8.1f ms  %7.1f MiB  %6.2f GB/s (median)\n",
	       m2 * 1e3, bytes2 / (1 << 20), bytes2 / m2 / 1e9);
	printf("  in it: gets %.1f ms, checks and copies %.1f ms (runtime "
	       "stats, overlapped)\n",
	       mget * 1e3, mcopy * 1e3);
	printf("  its gets    %8.1f ms  %7.1f MiB  %6.2f GB/s (median)\n",
	       mg * 1e3, bytes2 / (1 << 20), bytes2 / mg / 1e9);
	printf("fp16 objects  %8.1f ms  %7.1f MiB  %6.2f GB/s (median)\n",
	       m16 * 1e3, bytes16 / (1 << 20), bytes16 / m16 / 1e9);
	printf("2-bit is %.2fx faster to ready (%.2fx fewer bytes)\n", m16 / m2,
	       bytes16 / bytes2);
}

static int run(struct bench *b)
{
	double t2[MAX_RUNS], tg[MAX_RUNS], t16[MAX_RUNS], warm;
	double split[2][MAX_RUNS];
	int err;

	err = setup(b);
	if (err)
		return kvs_cli_fail(CMD, err, "runtime"), err;
	err = publish(b);
	if (!err)
		err = fp16_setup(b);
	if (err)
		return kvs_cli_fail(CMD, err, "publish"), err;
	/* a round not timed: the first touches of the daemon's memory, of
	 * the staging and of the device */
	for (uint32_t i = 0; !err && i <= b->a->runs; i++) {
		double *slot2 = i ? &t2[i - 1] : &warm,
		       *slotg = i ? &tg[i - 1] : &warm,
		       *slot16 = i ? &t16[i - 1] : &warm;

		double sp[2];

		err = attach_once(b, slot2, sp);
		if (i) { /* the round not timed is not reported */
			split[0][i - 1] = sp[0];
			split[1][i - 1] = sp[1];
		}
		if (err) {
			kvs_cli_fail(CMD, err, "2-bit attach");
			break;
		}
		err = get_once(b, slotg);
		if (err) {
			kvs_cli_fail(CMD, err, "2-bit gets");
			break;
		}
		err = fp16_put(b);
		if (!err)
			err = fp16_once(b, slot16);
		if (err)
			kvs_cli_fail(CMD, err, "fp16 objects");
	}
	if (!err)
		err = fp16_check(b);
	if (!err)
		report(b, t2, tg, t16, split);
	return err;
}

static void cleanup(struct bench *b)
{
	kvs_rt_destroy(b->rt);
	if (b->cuda) {
		dev_free(b, b->dev_keys);
		dev_free(b, b->dev_values);
	}
	dev_free(b, b->dst_k);
	dev_free(b, b->dst_v);
	host_free(b, b->stage[0]);
	host_free(b, b->stage[1]);
	for (uint32_t i = 1; i < b->a->lanes; i++)
		kvs_client_close(b->lane[i]);
	kvs_blockstore_release(b->bs);
	free(b->ids);
	free(b->keys);
	free(b->values);
}

int kvs_bench_attach(int argc, char **argv)
{
	struct attach_args a = { .device = "auto",
				 .tokens = 32768,
				 .layers = 32,
				 .kv_heads = 8,
				 .q_heads = 32,
				 .head_dim = 128,
				 .runs = 3,
				 .lanes = 4 };
	struct kvs_cli_opt opts[N_OPTS] = {
		KVS_OPT_STR("server", &a.server, true),
		KVS_OPT_STR("auth-key-file", &a.key_file, true),
		KVS_OPT_STR("device", &a.device, false),
		KVS_OPT_U32("tokens", &a.tokens, 128, 1u << 20, false),
		KVS_OPT_U32("layers", &a.layers, 1, 256, false),
		KVS_OPT_U32("kv-heads", &a.kv_heads, 1, 64, false),
		KVS_OPT_U32("q-heads", &a.q_heads, 1, 256, false),
		KVS_OPT_U32("head-dim", &a.head_dim, 64, 256, false),
		KVS_OPT_U32("runs", &a.runs, 1, MAX_RUNS, false),
		KVS_OPT_U32("lanes", &a.lanes, 1, KVS_BLOCKSTORE_LANES_MAX,
			    false),
		KVS_OPT_FLAG("shared-memory", &a.shared_memory),
		KVS_OPT_FLAG("json", &a.json),
	};
	struct bench b = { .a = &a };
	struct kvs_client_opts o;
	struct kvs_client *c;
	int rc, err;

	rc = kvs_cli_parse(CMD, argc, argv, opts, N_OPTS, NULL, 0, NULL);
	if (!rc &&
	    (a.tokens % 128 || a.q_heads % a.kv_heads || a.head_dim % 32)) {
		kvs_cli_error(CMD, "--tokens must be a multiple of 128, "
				   "--q-heads of --kv-heads, --head-dim of 32");
		rc = -KVS_EPARAM;
	}
	if (!rc && strcmp(a.device, "auto") != 0 &&
	    strcmp(a.device, "cpu") != 0 && strcmp(a.device, "cuda") != 0) {
		kvs_cli_error(CMD, "--device: '%s' is not auto, cpu or cuda",
			      a.device);
		rc = -KVS_EPARAM;
	}
	if (rc)
		return kvs_cli_usage(CMD, attach_usage, rc);
	kvs_client_opts_default(&o);
	o.address = a.server;
	o.key_file = a.key_file;
	o.shared_memory = a.shared_memory;
	o.timeout_ms = 120000;
	err = kvs_client_connect(&o, &c);
	if (err) {
		kvs_cli_error(CMD, "%s: %s", a.server, kvs_strerror(err));
		return KVS_EXIT_FAIL;
	}
	err = kvs_blockstore_remote_lanes(c, a.lanes, &b.bs);
	if (err) {
		kvs_client_close(c);
		return kvs_cli_fail(CMD, err, "block store");
	}
	b.client = b.lane[0] = c;
	for (uint32_t i = 1; i < a.lanes && !err; i++)
		err = kvs_client_dup(c, &b.lane[i]);
	if (err) {
		cleanup(&b);
		return kvs_cli_fail(CMD, err, "connection for the fp16 path");
	}
	err = run(&b);
	cleanup(&b);
	return err ? KVS_EXIT_FAIL : KVS_EXIT_OK;
}
