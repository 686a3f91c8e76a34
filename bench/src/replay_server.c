/*
 * replay_server.c - the kvstashd target of `kvstash bench trace --server`:
 * the replay's lookups, gets and puts sent to a daemon through libkvstash
 * (include/kvstash/client.h), one synchronous request at a time so that
 * the daemon's store sees them in the replay's order, as the in-process
 * store does.  A get or put larger than the daemon's limits (items a
 * batch, bytes a payload) is split; a chain longer than a lookup's
 * payload is looked up in pieces, each piece only while the ones before
 * it were present in full.  Counters are the daemon's STAT.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli_kvs.h"
#include "cli_util.h"
#include "bench_cmd.h"
#include "kvstash/client.h"
#include "kvstash/error.h"
#include "replay.h"

/* Spans of one lookup request at most (the protocol allows more; this
 * keeps a request's payload small whatever the daemon's limit). */
#define LOOKUP_CHUNK 8192u
/* Bytes of objects the replay hands over in one get or put at most. */
#define BATCH_BYTES (64ull << 20)

struct server_target {
	struct kvs_client *client;
	struct kvs_client_limits lim;
	size_t object_bytes;
	size_t get_batch; /* objects of one get: items and payload limits */
	uint8_t *get_mem; /* get_batch buffers of object_bytes */
	void **bufs;
	size_t *caps, *lens;
};

static int server_lookup(void *ctx, const uint8_t (*ids)[KVS_ID_SIZE], size_t n,
			 const uint32_t *layers, size_t n_layers,
			 size_t *prefix)
{
	struct server_target *sv = ctx;
	size_t room =
		sv->lim.max_payload > 4 * n_layers
			? (sv->lim.max_payload - 4 * n_layers) / KVS_ID_SIZE
			: 0;
	size_t chunk = room < LOOKUP_CHUNK ? room : LOOKUP_CHUNK;
	size_t done = 0;

	if (chunk == 0)
		return -KVS_ETOOBIG;
	while (done < n) {
		size_t k = n - done < chunk ? n - done : chunk, found = 0;
		int rc = kvs_client_lookup(sv->client, ids + done, k, layers,
					   n_layers, &found);

		if (rc)
			return rc;
		done += found;
		if (found < k)
			break;
	}
	*prefix = done;
	return 0;
}

static int server_get(void *ctx, const struct kvs_store_key *keys, size_t n,
		      int *results)
{
	struct server_target *sv = ctx;

	for (size_t at = 0; at < n;) {
		size_t k = n - at < sv->get_batch ? n - at : sv->get_batch;
		int rc = kvs_client_get(sv->client, keys + at, k, sv->bufs,
					sv->caps, sv->lens, results + at);

		if (rc)
			return rc;
		at += k;
	}
	return 0;
}

static int server_put(void *ctx, const uint8_t *const *objs, const size_t *lens,
		      size_t n, int *results)
{
	struct server_target *sv = ctx;

	for (size_t at = 0; at < n;) {
		uint64_t bytes = lens[at];
		size_t k = 1;
		int rc;

		while (at + k < n && k < sv->lim.max_batch &&
		       bytes + lens[at + k] <= sv->lim.max_payload)
			bytes += lens[at + k++];
		rc = kvs_client_put(sv->client, objs + at, lens + at, k,
				    KVS_DURABILITY_MEMORY, results + at);
		if (rc)
			return rc;
		at += k;
	}
	return 0;
}

static int server_counters(void *ctx, struct replay_counters *out)
{
	struct server_target *sv = ctx;
	struct kvs_client_counters cc;
	struct kvs_client_stat s;
	const struct kvs_store_stats *st = &s.store;
	int rc = kvs_client_stat(sv->client, &s);

	if (rc)
		return rc;
	kvs_client_counters(sv->client, &cc);
	memset(out, 0, sizeof(*out));
	out->hits = st->hits;
	out->misses = st->misses;
	out->dram_hits = st->dram_hits;
	out->nvme_hits = st->nvme_hits;
	/* The STAT reply may not carry hits by tier (docs/PROTOCOL.md,
	 * section 7): they are the daemon's only where they add up. */
	out->tier_hits = st->dram_hits + st->nvme_hits == st->hits;
	/* a server that counts hits by tier sends its moves too */
	out->moves = out->tier_hits;
	out->promotions = st->promotions;
	out->carried = st->carried;
	out->evictions = st->evictions;
	out->spills = st->spills;
	/* blocks the daemon dropped, and those this client refused */
	out->corrupt_dropped = st->corrupt_dropped + cc.corrupt_dropped;
	out->dram_objects = st->dram.blocks;
	out->dram_bytes = st->dram.bytes;
	out->nvme_objects = st->nvme.blocks;
	out->nvme_bytes = st->nvme.bytes;
	out->dram_capacity = st->dram.capacity;
	out->nvme_capacity = st->nvme.capacity;
	out->segments = st->segments;
	out->direct_io = st->direct_io;
	return 0;
}

static void server_free(struct server_target *sv)
{
	free(sv->get_mem);
	free(sv->bufs);
	free(sv->caps);
	free(sv->lens);
	free(sv);
}

static void server_close(void *ctx)
{
	struct server_target *sv = ctx;

	kvs_client_close(sv->client);
	server_free(sv);
}

static const struct replay_target_ops server_ops = {
	.lookup = server_lookup,
	.get = server_get,
	.put = server_put,
	.counters = server_counters,
	.close = server_close,
};

/* The get buffers, once the daemon's limits are known. */
static int alloc_gets(struct server_target *sv)
{
	size_t n = sv->lim.max_payload / sv->object_bytes;

	sv->get_batch = n < sv->lim.max_batch ? n : sv->lim.max_batch;
	sv->get_mem = malloc(sv->get_batch * sv->object_bytes);
	sv->bufs = calloc(sv->get_batch, sizeof(*sv->bufs));
	sv->caps = calloc(sv->get_batch, sizeof(*sv->caps));
	sv->lens = calloc(sv->get_batch, sizeof(*sv->lens));
	if (!sv->get_mem || !sv->bufs || !sv->caps || !sv->lens)
		return -ENOMEM;
	for (size_t i = 0; i < sv->get_batch; i++) {
		sv->bufs[i] = sv->get_mem + i * sv->object_bytes;
		sv->caps[i] = sv->object_bytes;
	}
	return 0;
}

/* Blocks of a request that one payload of the daemon carries (one at
 * least): a request's gets and puts in as few round trips as may be. */
static uint32_t batch_blocks(const struct server_target *sv,
			     uint32_t objects_per_block)
{
	uint64_t budget = sv->lim.max_payload < BATCH_BYTES
				  ? sv->lim.max_payload
				  : BATCH_BYTES;
	uint64_t n = budget / ((uint64_t)objects_per_block * sv->object_bytes);

	return n == 0 ? 1 : n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
}

int replay_target_server(const char *cmd, const struct replay_server_config *c,
			 struct replay_target *out)
{
	struct server_target *sv = calloc(1, sizeof(*sv));
	int rc;

	if (sv == NULL) {
		kvs_cli_error(cmd, "out of memory");
		return -ENOMEM;
	}
	sv->object_bytes = c->object_bytes;
	rc = kvs_cli_client_connect(cmd, c->address, c->key_file, c->timeout_ms,
				    c->shared_memory, &sv->client);
	if (rc) {
		server_free(sv);
		return rc;
	}
	kvs_client_limits(sv->client, &sv->lim);
	if (sv->object_bytes > sv->lim.max_object ||
	    sv->object_bytes > sv->lim.max_payload) {
		kvs_cli_error(
			cmd,
			"%s: the replay's objects are %zu bytes, over the "
			"daemon's --max-object or --max-payload (%u, %u): "
			"a larger --scale makes them smaller",
			c->address, sv->object_bytes, sv->lim.max_object,
			sv->lim.max_payload);
		rc = -KVS_ETOOBIG;
		goto fail;
	}
	rc = alloc_gets(sv);
	if (rc) {
		kvs_cli_error(cmd, "out of memory");
		goto fail;
	}
	out->ops = &server_ops;
	out->ctx = sv;
	out->name = c->address;
	out->tiers_per_block = false;
	out->batch_blocks = batch_blocks(sv, c->objects_per_block);
	return 0;

fail:
	server_close(sv);
	return rc;
}
