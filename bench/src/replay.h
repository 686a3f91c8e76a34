/*
 * replay.h - replaying a trace (trace.h) against a cache, for
 * `kvstash bench trace`:
 *   - the plan: how one trace block becomes store objects at a scale;
 *   - the objects: one encoded template per replay, re-identified per
 *     object (kvs_object_set_ident), so every object is a valid kvformat
 *     object of the real size under the span id the runtime would use;
 *   - the target: what the requests go to.  A small ops table with two
 *     tables behind it: the store engine opened in-process (replay.c),
 *     and a kvstashd reached through the client library
 *     (replay_server.c, built with the network service);
 *   - the replay itself, an LRU simulation of the same capacities and
 *     the offline optimum (Belady over the chain, replay_opt.c).
 * docs/REPLAY.md describes the mapping and the counters.
 */
#ifndef KVSTASH_TOOLS_REPLAY_H
#define KVSTASH_TOOLS_REPLAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvstash/kvformat.h"
#include "kvstash/store.h"
#include "trace.h"

/* The model and format a trace is replayed for. */
struct replay_model {
	const char *name; /* model id in the fingerprint */
	uint32_t layers;
	/* KV heads and head dim of the model; bits, G, R, metadata type and
	 * the span S of the stored blocks. */
	struct kvs_shape shape;
	uint32_t block_tokens; /* T of the trace, a multiple of S */
};

enum replay_format {
	REPLAY_QUANT = 0, /* sealed blocks at the shape's bits */
	REPLAY_FP16 = 1, /* the same spans as fp16 K/V (residual tails) */
};

/*
 * How one trace block is stored.  At scale 1: its T/S spans times L
 * layers, one object each.  A scale K = layer_div x span_div x head_div
 * keeps L/layer_div layers, one span in span_div (the last of each group,
 * whose id still chains over every token before it) and H/head_div heads
 * per object, so a block's bytes and the capacities are divided by K.
 */
struct replay_plan {
	enum replay_format format;
	uint32_t block_tokens;
	uint32_t scale, layer_div, span_div, head_div;
	uint32_t spans_per_block; /* T / S */
	uint32_t spans_kept;
	uint32_t layers_kept;
	uint32_t heads_kept;
	uint32_t objects_per_block; /* spans_kept x layers_kept */
	uint32_t object_bytes; /* one stored object */
	uint32_t full_object_bytes; /* the same object at scale 1 */
	uint64_t full_block_bytes; /* (T/S) x L x full_object_bytes */
};

/* Bytes of the store record holding an object of @len bytes. */
uint64_t replay_record_bytes(uint64_t len);

/*
 * replay_plan_make - the plan for @m, @format and @scale: layer_div is the
 * largest divisor of L that divides the scale, then span_div the largest
 * divisor of T/S that divides what is left, and head_div the rest, which
 * must divide H.  0, or -KVS_EPARAM for a shape or scale that does not
 * decompose (nothing printed).
 */
int replay_plan_make(const struct replay_model *m, enum replay_format format,
		     uint32_t scale, struct replay_plan *out);

/* The tiers given to the store for capacities at scale 1. */
struct replay_tiers {
	uint64_t dram, nvme, segment_size; /* for kvs_store_opts */
	uint64_t nvme_segments;
	/* false where the store's fixed sizes (its smallest segment, its
	 * policy's minimum of remembered keys) or a segment that cannot
	 * hold the same share of a block keep the tiers from holding the
	 * same blocks as at scale 1: hit counts may then differ a little. */
	bool exact;
};

/*
 * replay_plan_tiers - the store's tiers standing for @dram, and @nvme in
 * segments of @segment_size, at scale 1.  DRAM is divided by the factor a
 * block's store records shrank by (objects x record bytes: the scale
 * itself unless objects lost heads).  NVMe keeps the number of segments,
 * each a 4 KiB header and records standing for the same share of blocks
 * as at scale 1 (rounded down to whole records).
 */
void replay_plan_tiers(const struct replay_plan *p, uint64_t dram,
		       uint64_t nvme, uint64_t segment_size,
		       struct replay_tiers *out);

/*
 * replay_plan_unscale - the bytes at scale 1 that @bytes of a store's
 * tier stand for at @p's scale: the inverse of the DRAM division of
 * replay_plan_tiers (@bytes itself at scale 1).  For a daemon's
 * capacities, which the user scaled.
 */
uint64_t replay_plan_unscale(const struct replay_plan *p, uint64_t bytes);

/* The objects of up to max_blocks trace blocks, ready to put: block j
 * of a batch is objects [j x objects_per_block, (j+1) x objects_per_block)
 * of every array. */
struct replay_objects {
	struct replay_plan plan;
	uint32_t max_blocks;
	uint8_t model_fp[KVS_ID_SIZE];
	uint8_t *images; /* copies of the template */
	const uint8_t **objs;
	size_t *lens;
	int *results;
	struct kvs_store_key *keys;
	uint32_t *layers; /* 0 .. layers_kept - 1, for lookups */
};

/* Encodes the template (random finite K/V, deterministic) for @plan, in
 * buffers for @max_blocks blocks (at least 1).  0 or an error; release
 * with replay_objects_fini. */
int replay_objects_init(struct replay_objects *o, const struct replay_model *m,
			const struct replay_plan *plan,
			const uint8_t model_fp[KVS_ID_SIZE],
			uint32_t max_blocks);
void replay_objects_fini(struct replay_objects *o);

/* ---- targets --------------------------------------------------------- */

/*
 * A target's counters, in objects (the store's statistics).  The counts
 * are the target's lifetime counters (a daemon's since it started):
 * replay_run takes their differences over the replay.  The tier and
 * capacity fields are gauges, read as they are.
 */
struct replay_counters {
	uint64_t hits, misses, dram_hits, nvme_hits;
	uint64_t evictions, spills, promotions, carried, corrupt_dropped;
	uint64_t dram_objects, dram_bytes, nvme_objects, nvme_bytes;
	uint64_t dram_capacity, nvme_capacity;
	uint64_t segments;
	bool direct_io;
	/* dram_hits and nvme_hits are the target's (else only hits is) */
	bool tier_hits;
	/* promotions and carried are the target's (else unknown) */
	bool moves;
};

struct replay_target_ops {
	/* How many leading spans of @ids are present for every layer of
	 * @layers (the runtime's first question), into *@prefix.  Returns 0
	 * or a fatal -errno. */
	int (*lookup)(void *ctx, const uint8_t (*ids)[KVS_ID_SIZE], size_t n,
		      const uint32_t *layers, size_t n_layers, size_t *prefix);
	/* Reads @n objects so that the cache's policy sees the reads;
	 * results[i] is 0 or the miss.  Returns 0 or a fatal -errno. */
	int (*get)(void *ctx, const struct kvs_store_key *keys, size_t n,
		   int *results);
	/* Stores @n objects; results[i] is each one's 0 or refusal.  Returns
	 * 0 or a fatal -errno (a refusal is not fatal). */
	int (*put)(void *ctx, const uint8_t *const *objs, const size_t *lens,
		   size_t n, int *results);
	/* 0 or a fatal -errno. */
	int (*counters)(void *ctx, struct replay_counters *out);
	/* Closes; removes whatever the target created. */
	void (*close)(void *ctx);
};

struct replay_target {
	const struct replay_target_ops *ops;
	void *ctx;
	const char *name; /* for messages: "store", or the daemon's address */
	/* The counters move with this replay's requests only and cost
	 * nothing to read: read around each block's get, they tell the tier
	 * each hit block was read from (then batch_blocks is 1).  A daemon's
	 * are read only before and after the replay (a request each, and
	 * shared with its other clients). */
	bool tiers_per_block;
	/* Blocks of one request handed to one get or put (a target splits
	 * them further where it must): 1 in-process, so that each block is
	 * its own batch as in the runtime's block-at-a-time use; more for a
	 * daemon, where every call is a round trip. */
	uint32_t batch_blocks;
};

struct replay_store_config {
	const char *parent_dir; /* a fresh store is made under it */
	uint64_t dram_capacity, nvme_capacity, segment_size;
	enum kvs_store_eviction eviction;
};

/*
 * replay_target_store - a new, empty store in a fresh directory under
 * parent_dir (DRAM tier and NVMe tier of the given capacities, puts at
 * memory durability so objects reach NVMe by eviction, as in a cache);
 * close removes the directory.  0 or an error after printing why.
 */
int replay_target_store(const char *cmd, const struct replay_store_config *c,
			struct replay_target *out);

struct replay_server_config {
	const char *address; /* "HOST:PORT" of a kvstashd */
	const char *key_file; /* as kvs_client_opts.key_file */
	uint32_t timeout_ms; /* each request; 0: the client's default */
	bool shared_memory; /* as kvs_client_opts.shared_memory */
	size_t object_bytes; /* the replay's objects (gets read into
				buffers of this size) */
	uint32_t objects_per_block; /* for batch_blocks */
};

/*
 * replay_target_server - a kvstashd through the client library: lookups
 * of the chain, gets and puts (at memory durability) in batches within
 * the daemon's limits, counters from its STAT; batch_blocks as many
 * blocks as one request's payload may carry (at most 64 MiB).  The
 * daemon's store is whatever it holds: close only disconnects.  0 or an
 * error after printing why (unreachable, authentication refused, objects
 * over the daemon's --max-object).  Only in builds with the network
 * service.
 */
int replay_target_server(const char *cmd, const struct replay_server_config *c,
			 struct replay_target *out);

/* ---- replay ---------------------------------------------------------- */

/* What one replay counted.  Blocks are trace blocks; bytes are the
 * bytes that moved at the replay's scale. */
struct replay_tally {
	uint64_t requests, lookup_blocks, hit_blocks;
	uint64_t prompt_tokens, hit_tokens;
	uint64_t dram_hit_blocks, nvme_hit_blocks;
	uint64_t objects_put, put_refused, objects_read, read_misses;
	uint64_t bytes_written, bytes_read; /* by the requests */
	uint64_t dram_bytes_read, nvme_bytes_read, nvme_bytes_written;
	uint64_t evicted_blocks, demoted_blocks; /* LRU and optimum only */
	int first_refusal; /* 0 or the first refused put's error */
	/* dram_hit_blocks and nvme_hit_blocks are counted (the target's
	 * tiers_per_block) */
	bool tier_blocks;
	/* The target's counters: counts are their differences over the
	 * replay, gauges their values at its end (before close). */
	struct replay_counters target;
	uint64_t objects_before; /* objects the target held at the start */
	double wall_seconds;
};

/* Counts one request whose longest cached prefix was @hit_blocks. */
void replay_tally_request(struct replay_tally *t,
			  const struct trace_request *rq, uint64_t hit_blocks,
			  uint32_t block_tokens);

struct replay_progress {
	const char *cmd;
	const char *label;
	uint64_t every; /* requests between progress lines; 0 = none */
};

/*
 * replay_run - every request in order: look up its longest cached prefix
 * (the kept span ids of its blocks, every kept layer), read the objects
 * of the hit blocks, then put the objects of every block after the
 * prefix, batch_blocks blocks a get or put (@o holds as many).  A read
 * that misses ends the prefix at its block; with tiers_per_block each
 * hit block's tier is known.  Bytes read per tier come from the target's
 * counters (where it has them).  0 or a fatal error after printing why.
 */
int replay_run(const struct trace *t, struct replay_objects *o,
	       const struct replay_target *target,
	       const struct replay_progress *progress,
	       struct replay_tally *out);

/*
 * replay_lru - the same requests against two LRU lists (DRAM, then NVMe:
 * a block leaving DRAM is demoted to NVMe, a block read from NVMe moves
 * back), which together are one LRU of the summed capacity.  Capacities
 * count whole blocks of plan->full_block_bytes out of the capacities at
 * scale 1, so the result does not depend on the scale; bytes are counted
 * at the plan's scale, like the store's.
 */
int replay_lru(const struct trace *t, const struct replay_plan *plan,
	       uint64_t dram_capacity, uint64_t nvme_capacity,
	       struct replay_tally *out);

/* A simulation's tally from its block counts (replay_lru.c): objects
 * and bytes read and put, by tier; @demoted: NVMe writes are the
 * demoted blocks. */
void replay_tally_finish(struct replay_tally *tl,
			 const struct replay_plan *plan, bool demoted);

/*
 * replay_opt - the offline optimum of the same requests (replay_opt.c):
 * Belady's rule over whole blocks of the summed capacity, the block whose
 * next use is farthest (the deeper on a tie) leaving first, the block
 * being stored bypassing the cache when it ranks last; the victim never
 * has a cached child.  Hits from DRAM are those the optimum of the DRAM
 * capacity alone keeps (a subset), the rest from NVMe.  Capacities and
 * bytes as replay_lru's.  0 or -ENOMEM.
 */
int replay_opt(const struct trace *t, const struct replay_plan *plan,
	       uint64_t dram_capacity, uint64_t nvme_capacity,
	       struct replay_tally *out);

#endif
