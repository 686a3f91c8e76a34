/*
 * runtime - the decode node's sequence runtime: what an inference engine
 * calls to keep a request's attention history as 2-bit blocks, decode
 * from them with the fused attention, share prefixes through a block
 * store and hand a request over from a prefill node to a decode node.
 *
 * Objects:
 *   struct kvs_rt          one model's runtime: its shape and quantisation
 *                          parameters (hence its model fingerprint), the
 *                          compute device (CPU reference or CUDA), one page
 *                          pool that every sequence's sealed blocks live in
 *                          (host memory on the CPU, GPU memory with CUDA),
 *                          the block store it publishes to and attaches
 *                          from, and the threads that do so asynchronously;
 *   struct kvs_batch       the residual state of up to `capacity` sequences
 *                          side by side, so that one decode step runs one
 *                          fused attention call for all of them, whatever
 *                          their lengths;
 *   struct kvs_seq         one request in a batch: per layer a page table
 *                          into the pool, the Key residual (sealed when it
 *                          holds R tokens) and the Value FIFO (DESIGN.md
 *                          §2), and the request's token ids;
 *   struct kvs_blockstore  the small interface the runtime talks to a block
 *                          store through (lookup / get / put / tail put /
 *                          tail take): an in-process one over a store
 *                          directory (store.h) here, a remote kvstashd
 *                          through the client library where it is built.
 *
 * Memory: q, k, v and out of prefill and decode steps are host memory with
 * the CPU device and CUDA device memory with the CUDA one, of the config's
 * kv_dtype (out: out_dtype).  A decode step with CUDA enqueues its kernels
 * on the runtime's stream and returns; nothing goes through the host.
 *
 * Block ids (DESIGN.md §3): span i of a sequence is kvs_span_id(namespace,
 * model fingerprint, span i-1's id or none, token ids of tokens
 * [i*S, (i+1)*S)), stored per layer.  The fingerprint binds the model id,
 * layers, KV heads, head dim, kv_dtype, bits, G, S, R and the metadata
 * type.  Only spans whose token ids are all known are published.
 *
 * Faults: page pool exhaustion is -ENOSPC with nothing changed; a block
 * lost or corrupt between lookup and fetch is a miss, which
 * kvs_seq_attach_finish() turns into a shorter prefix (recompute of the
 * rest) and the per-layer kvs_seq_attach_wait() into -KVS_ENOTFOUND (the
 * caller resets and recomputes); never a wrong block.
 *
 * Threads: a runtime, its batches and sequences are used by one thread at a
 * time (the engine's); the runtime's own publish and fetch threads only
 * touch what they were handed.
 */
#ifndef KVSTASH_RUNTIME_H
#define KVSTASH_RUNTIME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvstash/kvformat.h"
#include "kvstash/store.h"
#include "kvstash/stream.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- block store interface -------------------------------------------- */

/*
 * What the runtime needs of a block store; the shapes of client.h so that
 * the remote store is an adapter.  Each op returns 0 or a negative error
 * for the whole call; per-item outcomes go to @results.
 *   lookup    longest prefix of @span_ids present for every layer listed;
 *   get       objects into the caller's buffers: results[i] 0 and lens[i],
 *             -KVS_ENOTFOUND, or -ENOSPC (lens[i] then the size needed);
 *   put       encoded objects (copied before it returns);
 *   tail_put  a residual tail under a 32-byte key for @ttl_ms;
 *   tail_take the tail of a key, deleting it: -KVS_ENOTFOUND when none,
 *             -ENOSPC (*len needed) when @cap is short;
 *   remove    (may be NULL: the store deletes nothing) deletes objects:
 *             results[i] 0 or -KVS_ENOTFOUND;
 *   verified  get verifies what it hands out (see below);
 *   destroy   releases @ctx (may be NULL).
 * Every op may be called from any thread.  The runtime calls them through
 * the kvs_blockstore_* functions below, which count what goes through.
 */
struct kvs_blockstore_ops {
	const char *name;
	int (*lookup)(void *ctx, const uint8_t (*span_ids)[KVS_ID_SIZE],
		      size_t n_spans, const uint32_t *layers, size_t n_layers,
		      size_t *prefix);
	int (*get)(void *ctx, const struct kvs_store_key *keys, size_t n,
		   void *const *bufs, const size_t *caps, size_t *lens,
		   int *results);
	int (*put)(void *ctx, const uint8_t *const *objs, const size_t *lens,
		   size_t n, int *results);
	int (*tail_put)(void *ctx, const uint8_t key[KVS_ID_SIZE],
			const uint8_t *tail, size_t len, uint32_t ttl_ms);
	int (*tail_take)(void *ctx, const uint8_t key[KVS_ID_SIZE], void *buf,
			 size_t cap, size_t *len);
	void (*destroy)(void *ctx);
	int (*remove)(void *ctx, const struct kvs_store_key *keys, size_t n,
		      int *results);
	/* every object get hands out passed kvs_object_verify already:
	 * the runtime's own checks then skip the checksums (never the
	 * others: bounds, kind, shape, ids) */
	bool verified;
};

/* What went through a block store since it was created: calls, objects
 * and bytes (objects that came back or were accepted only). */
struct kvs_blockstore_counters {
	uint64_t lookups;
	uint64_t gets, got, got_bytes, get_missed; /* calls, objects, ... */
	uint64_t puts, put, put_bytes; /* calls, objects accepted, bytes */
	uint64_t tail_puts, tail_put_bytes;
	uint64_t tail_takes, tail_take_bytes; /* tails taken */
	uint64_t removed; /* objects deleted */
};

struct kvs_blockstore;

/*
 * kvs_blockstore_create - a block store over @ops and @ctx; the block store
 * owns @ctx (ops->destroy at the end).  Reference-counted: *@out holds one
 * reference, a runtime using it another.
 */
int kvs_blockstore_create(const struct kvs_blockstore_ops *ops, void *ctx,
			  struct kvs_blockstore **out);
/* Takes one more reference and returns @bs. */
struct kvs_blockstore *kvs_blockstore_ref(struct kvs_blockstore *bs);
/* Drops a reference; the last one destroys.  NULL is a no-op. */
void kvs_blockstore_release(struct kvs_blockstore *bs);
const struct kvs_blockstore_ops *
kvs_blockstore_ops(const struct kvs_blockstore *bs);
void *kvs_blockstore_ctx(const struct kvs_blockstore *bs);

/*
 * kvs_blockstore_local - the in-process block store: blocks in the store
 * directory @dir (opened with @opts, NULL: kvs_store_opts_default()), tails
 * in this process's memory with their time to live.  For one process that
 * keeps a local cache; the store is closed when the last reference goes.
 */
int kvs_blockstore_local(const char *dir, const struct kvs_store_opts *opts,
			 struct kvs_blockstore **out);
/* kvs_blockstore_local with the store's default options but for these
 * capacities (0: the default's), write-through off; for bindings that do
 * not build a struct kvs_store_opts. */
int kvs_blockstore_local_open(const char *dir, uint64_t dram_capacity,
			      uint64_t nvme_capacity, uint64_t segment_size,
			      struct kvs_blockstore **out);
/* The store under a local block store (NULL for another kind). */
struct kvs_store *kvs_blockstore_local_store(const struct kvs_blockstore *bs);

/*
 * The ops of @bs, called with its ctx and counted (kvs_blockstore_counters);
 * arguments, results and ownership as struct kvs_blockstore_ops says.
 */
int kvs_blockstore_lookup(struct kvs_blockstore *bs,
			  const uint8_t (*span_ids)[KVS_ID_SIZE],
			  size_t n_spans, const uint32_t *layers,
			  size_t n_layers, size_t *prefix);
int kvs_blockstore_get(struct kvs_blockstore *bs,
		       const struct kvs_store_key *keys, size_t n,
		       void *const *bufs, const size_t *caps, size_t *lens,
		       int *results);
int kvs_blockstore_put(struct kvs_blockstore *bs, const uint8_t *const *objs,
		       const size_t *lens, size_t n, int *results);
int kvs_blockstore_tail_put(struct kvs_blockstore *bs,
			    const uint8_t key[KVS_ID_SIZE], const uint8_t *tail,
			    size_t len, uint32_t ttl_ms);
int kvs_blockstore_tail_take(struct kvs_blockstore *bs,
			     const uint8_t key[KVS_ID_SIZE], void *buf,
			     size_t cap, size_t *len);
/* -EOPNOTSUPP (nothing done) for a store without a remove op. */
int kvs_blockstore_remove(struct kvs_blockstore *bs,
			  const struct kvs_store_key *keys, size_t n,
			  int *results);
void kvs_blockstore_counters(const struct kvs_blockstore *bs,
			     struct kvs_blockstore_counters *out);

/* ---- runtime ----------------------------------------------------------- */

enum kvs_rt_device {
	KVS_RT_AUTO = 0, /* CUDA when built and a device is usable, else CPU */
	KVS_RT_CPU = 1,
	KVS_RT_CUDA = 2,
};

struct kvs_rt_config {
	const char *model_id; /* part of the fingerprint */
	uint32_t layers;
	uint32_t q_heads; /* multiple of shape.kv_heads (GQA) */
	/* kv_heads, head_dim, group, bits, meta_type, span, residual;
	 * span must equal residual */
	struct kvs_shape shape;
	enum kvs_dtype kv_dtype; /* q, k, v: f16 or bf16; f32 on the CPU */
	enum kvs_dtype out_dtype; /* 0: kv_dtype */
	enum kvs_order order;
	enum kvs_rt_device device;
	float scale; /* 0: 1/sqrt(head_dim) */
	uint32_t max_tokens; /* per sequence; sizes the page tables */
	uint32_t pool_pages; /* pages of one layer's block each */
	const char *name_space; /* the tenant's cache salt; NULL: "" */
	struct kvs_blockstore *store; /* NULL: no publish or attach; the
					 runtime takes a reference */
	void *stream; /* CUDA: the cudaStream_t of steps; NULL: default */
};

struct kvs_rt;

/* Defaults for @cfg: shape from kvs_shape_default, f16 K/V, kivi order,
 * AUTO device, 4096 max tokens, 1024 pages. */
void kvs_rt_config_default(struct kvs_rt_config *cfg, uint32_t layers,
			   uint32_t q_heads, uint16_t kv_heads,
			   uint16_t head_dim);

/*
 * kvs_rt_create - validate @cfg, allocate the page pool, start the publish
 * and fetch threads.  Returns 0 and *@out (kvs_rt_destroy), -KVS_EPARAM
 * for a bad config, -KVS_ENODEV when CUDA was asked for and is not
 * usable, -ENOMEM.  @cfg's strings are copied.
 */
int kvs_rt_create(const struct kvs_rt_config *cfg, struct kvs_rt **out);

/* Destroys the batches still alive (and their sequences), waits for
 * pending publishes, stops the threads, frees the pool.  NULL is a no-op. */
void kvs_rt_destroy(struct kvs_rt *rt);

/* The device actually in use (CPU or CUDA). */
enum kvs_rt_device kvs_rt_device(const struct kvs_rt *rt);
/* The model fingerprint (KVS_ID_SIZE bytes, owned by @rt). */
const uint8_t *kvs_rt_model_fp(const struct kvs_rt *rt);

/*
 * kvs_rt_sync - waits for every step enqueued so far and reports a seal
 * that failed on the device (non-finite K/V: -KVS_ENONFINITE, a step out
 * of its metadata type's range: -KVS_ERANGE) since the last sync.
 */
int kvs_rt_sync(struct kvs_rt *rt);

/* Waits until every publish queued so far is in the store; returns the
 * first error of those publishes (counted in stats either way). */
int kvs_rt_flush(struct kvs_rt *rt);

/*
 * kvs_rt_lookup_prefix - how many leading tokens of @ids are cached for
 * every layer (whole spans, presence only: a fetch may still miss).
 */
int kvs_rt_lookup_prefix(struct kvs_rt *rt, const uint32_t *ids, size_t n,
			 uint32_t *tokens);

struct kvs_rt_stats {
	uint32_t pages_total, pages_free;
	uint64_t published; /* blocks put into the store */
	uint64_t publish_skipped; /* already there or already queued */
	uint64_t publish_failed;
	uint64_t attached; /* blocks fetched into the pool */
	uint64_t fetch_missed; /* lost between lookup and fetch */
	uint64_t fetch_corrupt; /* failed a check, dropped */
	uint64_t sealed; /* blocks sealed by decode and prefill */
	/* where attaches spend their time (microseconds, summed): the
	 * block store's gets, and the checks and copies into the pool (with
	 * CUDA: enqueueing them), which run beside the next layer's gets */
	uint64_t fetch_get_us, fetch_copy_us;
};
void kvs_rt_stats(struct kvs_rt *rt, struct kvs_rt_stats *out);

/* ---- batch -------------------------------------------------------------- */

struct kvs_batch;
struct kvs_seq;

/* An empty batch for up to @capacity sequences; *@out owned by the caller
 * (kvs_batch_destroy). */
int kvs_batch_create(struct kvs_rt *rt, uint32_t capacity,
		     struct kvs_batch **out);
/* Destroys the batch and every sequence still in it.  NULL is a no-op. */
void kvs_batch_destroy(struct kvs_batch *batch);
/* Sequences in the batch; kvs_batch_seq(batch, i) is the i-th in step
 * order (creation order, kept when one is destroyed). */
uint32_t kvs_batch_size(const struct kvs_batch *batch);
struct kvs_seq *kvs_batch_seq(const struct kvs_batch *batch, uint32_t i);

/*
 * kvs_batch_step - one decode step of @layer for every sequence of the
 * batch, in the runtime's compute order: append the token's K/V, one fused
 * attention over each sequence's history pages and residuals, seal the Key
 * residual where it reaches R (into a page from the pool), pop the oldest
 * Value beyond R.  @q: [n][q_heads][D], @k, @v: [n][kv_heads][D] of
 * kv_dtype, @out: [n][q_heads][D] of out_dtype, n = kvs_batch_size().
 * Returns 0, -ENOSPC when the pool cannot take this step's seals (nothing
 * done), -KVS_ENOTFOUND when a sequence's pending attach failed for this
 * layer, -KVS_EPARAM (a sequence past max_tokens), or the device's error.
 */
int kvs_batch_step(struct kvs_batch *batch, uint32_t layer, const void *q,
		   const void *k, const void *v, void *out);

/* ---- sequence ----------------------------------------------------------- */

/* A new empty sequence at the end of @batch: -ENOSPC when full.  Owned by
 * the caller (kvs_seq_destroy) or by the batch when it is destroyed. */
int kvs_seq_create(struct kvs_batch *batch, struct kvs_seq **out);
/* Returns its pages to the pool (after pending publishes of them took
 * their copy) and leaves its batch.  NULL is a no-op. */
void kvs_seq_destroy(struct kvs_seq *seq);
/* Position of @seq in its batch's step order. */
uint32_t kvs_seq_index(const struct kvs_seq *seq);
/* Tokens @layer holds. */
uint32_t kvs_seq_tokens(const struct kvs_seq *seq, uint32_t layer);
/* Token ids known so far. */
uint32_t kvs_seq_id_count(const struct kvs_seq *seq);
/* Drops every token, page and id: the sequence is empty again. */
int kvs_seq_reset(struct kvs_seq *seq);

/* Appends @n token ids (the prompt's, then each decoded token's), which
 * name the spans when they are published. */
int kvs_seq_append_ids(struct kvs_seq *seq, const uint32_t *ids, size_t n);

/*
 * kvs_seq_prefill - @n tokens of full-precision K/V of @layer, @k, @v:
 * [kv_heads][n][D] of kv_dtype (the engine computed their attention).
 * Keys: all but the last T mod R of the T tokens held are sealed; Values:
 * all but the last min(T, R).  On an empty layer, or one holding only an
 * attached prefix, when n >= min(T, R), the blocks are sealed straight
 * from @k and @v; otherwise token by token.  -ENOSPC (nothing changed)
 * when the pool is short, -KVS_ENOTFOUND when this layer's attach failed.
 */
int kvs_seq_prefill(struct kvs_seq *seq, uint32_t layer, const void *k,
		    const void *v, uint32_t n);

/*
 * kvs_seq_step - kvs_batch_step for this sequence alone (@q [q_heads][D],
 * @k, @v [kv_heads][D], @out [q_heads][D]).
 */
int kvs_seq_step(struct kvs_seq *seq, uint32_t layer, const void *q,
		 const void *k, const void *v, void *out);

/*
 * kvs_seq_publish - queue every sealed span of every layer whose token ids
 * are known and which is not already published, attached or queued, for
 * the runtime's publish thread: it copies the page (after the step that
 * sealed it), writes the block header (ident: span id, parent, layer,
 * first position, model fingerprint) and puts it.  Spans the store already
 * holds for every layer are skipped.  Returns once queued; kvs_rt_flush()
 * waits.  0 when the runtime has no store.
 */
int kvs_seq_publish(struct kvs_seq *seq);

/*
 * kvs_seq_attach_prefix - for an empty sequence about to prefill the
 * prompt @ids[0..n): records the ids, finds the longest cached prefix that
 * still leaves the prompt's Value FIFO to compute (at most n - min(n, R)
 * tokens, whole spans, at most @limit tokens), takes its pages from the
 * pool and starts fetching them, layer 0 first, so that a layer is in
 * flight while the engine works on the one before.  *@attached: the
 * tokens attached (0: none cached; prefill all).  The engine then prefills
 * ids [*attached, n) only.  -ENOSPC when the pool cannot hold the prefix
 * (nothing changed).
 */
int kvs_seq_attach_prefix(struct kvs_seq *seq, const uint32_t *ids, size_t n,
			  uint32_t limit, uint32_t *attached);

/*
 * kvs_seq_attach_wait - waits for @layer's part of the pending attach (a
 * prefill or step of the layer does so by itself).  0 (also when nothing
 * is pending), or -KVS_ENOTFOUND when a block of the layer was lost or
 * failed a check: the engine computed nothing from a shorter prefix yet,
 * so it resets the sequence and prefills the whole prompt.
 */
int kvs_seq_attach_wait(struct kvs_seq *seq, uint32_t layer);

/*
 * kvs_seq_attach_finish - waits for every layer of the pending attach; where
 * a block was lost or corrupt and no layer has been used yet, shortens the
 * prefix to what every layer holds (returning the rest of the pages) so
 * that the engine recomputes that part.  *@attached: the tokens attached.
 * -KVS_ENOTFOUND when a layer already in use came up short.
 */
int kvs_seq_attach_finish(struct kvs_seq *seq, uint32_t *attached);

/*
 * Residual tail of @layer (the format's second object kind): Keys of the
 * tokens after the last sealed span, the last min(T, R) Values, in
 * kv_dtype.  *@out is malloc'd, owned by the caller.
 */
int kvs_seq_tail_encode(const struct kvs_seq *seq, uint32_t layer,
			uint8_t **out, size_t *out_len);

/*
 * kvs_seq_tail_load - load a tail object into @layer, which must hold
 * exactly the sealed spans the tail follows (attached or sealed) and
 * nothing else.  Checks shape, model, layer, dtype and lengths.
 */
int kvs_seq_tail_load(struct kvs_seq *seq, uint32_t layer, const uint8_t *obj,
		      size_t len);

/* The block-store key of @layer's tail for @request_id (SHA-256 of the
 * request id, the model fingerprint and the layer). */
int kvs_rt_tail_key(const struct kvs_rt *rt,
		    const uint8_t request_id[KVS_ID_SIZE], uint32_t layer,
		    uint8_t key[KVS_ID_SIZE]);

/*
 * kvs_seq_export_tail - the prefill node's handoff: waits for this
 * sequence's publishes (so the decode node finds its blocks), then puts
 * every layer's tail under @request_id for @ttl_ms.
 */
int kvs_seq_export_tail(struct kvs_seq *seq,
			const uint8_t request_id[KVS_ID_SIZE], uint32_t ttl_ms);

/*
 * kvs_seq_import_tail - the decode node's side: for an empty sequence and
 * the request's token ids @ids[0..n), fetches the sealed spans the tails
 * follow and takes (deletes) every layer's tail.  Afterwards the sequence
 * decodes bit for bit as the exporting one would.  -KVS_ENOTFOUND when a
 * tail or a block is missing or fails a check: the sequence is left
 * empty, and the caller recomputes the prompt.
 */
int kvs_seq_import_tail(struct kvs_seq *seq, const uint32_t *ids, size_t n,
			const uint8_t request_id[KVS_ID_SIZE]);

/*
 * kvs_seq_block - a copy of the sealed block of @layer covering span @index
 * as an encoded object (header written as kvs_seq_publish writes it;
 * spans without known token ids get an all-zero span id).  *@out malloc'd,
 * owned by the caller.  For inspection and tests.
 */
int kvs_seq_block(struct kvs_seq *seq, uint32_t layer, uint32_t index,
		  uint8_t **out, size_t *out_len);
/*
 * kvs_seq_history - the sealed spans [@first, @first + @count) of @layer
 * dequantized (fmaf(step, code, origin), rounded to @dtype) into @k and
 * @v: [count][kv_heads][S][D] of @dtype (f32, f16, bf16), in the
 * device's memory.  What an engine's prompt attention reads for an
 * attached prefix.
 */
int kvs_seq_history(struct kvs_seq *seq, uint32_t layer, uint32_t first,
		    uint32_t count, enum kvs_dtype dtype, void *k, void *v);
/* Sealed spans of @layer. */
uint32_t kvs_seq_block_count(const struct kvs_seq *seq, uint32_t layer);

/* ---- the block store over a kvstashd (client.h) ---------------------- */

struct kvs_client;

/*
 * kvs_blockstore_remote - the block store of the decode runtime
 * over @client's server (client.h): lookup, get, put and delete in
 * requests of the server's limits (a large call is several requests in
 * flight at once), puts acknowledged at memory durability, residual
 * tails through the tail handoff (the block store's tail keys are the
 * request ids).  On success the block store owns @client and closes it
 * when its last reference goes (kvs_blockstore_release); on failure the
 * caller keeps it.  Returns 0 and *@out, -KVS_EPARAM or -ENOMEM.
 */
int kvs_blockstore_remote(struct kvs_client *client,
			  struct kvs_blockstore **out);

#define KVS_BLOCKSTORE_LANES_MAX 16

/*
 * kvs_blockstore_remote_lanes - the same, with the gets spread over
 * @lanes connections (1..KVS_BLOCKSTORE_LANES_MAX): @client's and
 * @lanes - 1 more made by kvs_client_dup, which the block store owns.
 * One connection's progress thread receives and one waiter checks what
 * it receives; a large get (an attach's layer) on several goes at the
 * rate of several.  Everything but gets goes through @client.  Returns
 * as kvs_blockstore_remote, or kvs_client_dup's errors (then the caller
 * keeps @client).
 */
int kvs_blockstore_remote_lanes(struct kvs_client *client, unsigned lanes,
				struct kvs_blockstore **out);

/* The client of a block store made by kvs_blockstore_remote (NULL for
 * another kind): for the calls the block store interface has not (stat,
 * exists); owned by @bs, valid while it is. */
struct kvs_client *
kvs_blockstore_remote_client(const struct kvs_blockstore *bs);

#ifdef __cplusplus
}
#endif

#endif
