/*
 * request.c - a request of the client library from its frame to its
 * completion: building the frame and payload of each opcode, the
 * client's own checks of the objects a reply landed, and handing a
 * finished request to whoever waits for it.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "client_internal.h"
#include "common/bytes.h"
#include "kvstash/error.h"
#include "kvstash/log.h"

/* ---- verification and completion ------------------------------------- */

/*
 * The client's own checks of a received object.  A block arrives as the
 * server stores it, under its namespaced id: its header is checked as
 * received (checksum included), the id the client asked for is written
 * back with the header checksum recomputed (docs/PROTOCOL.md, section 5),
 * and then the whole object is verified.  A store key may name a sealed
 * block or a full-precision span (a tail object); a tail handoff names
 * only a tail.
 */
static int object_check(uint8_t *obj, size_t len,
			const struct kvs_store_key *key, unsigned kind)
{
	struct kvs_header h;

	if (kvs_header_decode(obj, len, 0, &h) ||
	    (h.kind != kind && (key == NULL || h.kind != KVS_KIND_TAIL)))
		return -KVS_ENOTFOUND;
	if (key) {
		if (h.ident.layer != key->layer)
			return -KVS_ENOTFOUND;
		kvs_header_set_block_id(obj, key->span_id);
	}
	return kvs_object_verify(obj, len, 0) ? -KVS_ENOTFOUND : 0;
}

void req_verify(struct kvs_client_req *req)
{
	uint64_t bad = 0;

	if (!req->verify || req->status)
		return;
	if (req->opcode == KVS_OP_TAIL_TAKE) {
		if (object_check(req->tail_buf, *req->tail_len, NULL,
				 KVS_KIND_TAIL)) {
			req->status = -KVS_ENOTFOUND;
			bad++;
		}
	} else {
		for (uint32_t i = 0; i < req->count; i++) {
			if (req->results[i])
				continue;
			req->results[i] =
				object_check(req->bufs[i], req->lens[i],
					     &req->keys[i], KVS_KIND_BLOCK);
			bad += req->results[i] != 0;
		}
	}
	if (bad) {
		__atomic_fetch_add(&req->cl->counters.corrupt_dropped, bad,
				   __ATOMIC_RELAXED);
		kvs_log(KVS_LOG_DEBUG,
			"kvstash client: %llu objects failed their checks: "
			"misses",
			(unsigned long long)bad);
	}
}

void req_free(struct kvs_client_req *req)
{
	if (!req)
		return;
	free(req->payload);
	free(req->iov);
	free(req->riov);
	free(req->scratch);
	free(req->part_mem);
	free(req);
}

void req_complete(struct kvs_client_req *req)
{
	struct kvs_client *cl = req->cl;

	if (client_retry(req))
		return; /* sent again on the next connection (reconnect.c) */
	if (req->on_done) {
		/* run once UCX's callbacks are over (progress_turn) */
		req->next = NULL;
		*cl->deferred_tail = req;
		cl->deferred_tail = &req->next;
		return;
	}
	if (req->cb) {
		req_verify(req);
		req->cb(req->arg, req->status);
		req_free(req);
		return;
	}
	pthread_mutex_lock(&cl->lock);
	req->done = true;
	pthread_cond_broadcast(&cl->cond);
	pthread_mutex_unlock(&cl->lock);
}

/* ---- building ---------------------------------------------------------- */

void req_encode_header(struct kvs_client_req *req)
{
	struct kvs_proto_frame f = {
		.version = KVS_PROTO_VERSION,
		.opcode = req->opcode,
		.req_id = req->id,
		.count = req->count,
		.body_len = (uint32_t)(req->frame_len - KVS_PROTO_HEADER_SIZE),
		.flags = kvs_get32(req->frame + KVS_PROTO_OFF_FLAGS),
	};

	kvs_proto_header_encode(&f, req->frame);
}

void req_seal(struct kvs_client *cl, struct kvs_client_req *req,
	      uint64_t deadline_ns)
{
	req->cl = cl;
	req->deadline_ns = deadline_ns;
	pthread_mutex_lock(&cl->lock);
	req->id = ++cl->next_id;
	cl->counters.requests++;
	pthread_mutex_unlock(&cl->lock);
	req_encode_header(req);
}

/* A new request of @opcode with @body_len bytes of body and @flags. */
struct kvs_client_req *req_new(uint16_t opcode, uint32_t count, size_t body_len,
			       uint32_t flags)
{
	struct kvs_client_req *req = calloc(1, sizeof(*req));

	if (!req)
		return NULL;
	req->opcode = opcode;
	req->count = count;
	req->frame_len = KVS_PROTO_HEADER_SIZE + body_len;
	kvs_put32(req->frame + KVS_PROTO_OFF_FLAGS, flags);
	return req;
}

int req_keys_payload(struct kvs_client_req *req,
		     const struct kvs_store_key *keys, size_t n)
{
	req->payload_len = n * KVS_PROTO_KEY_SIZE;
	req->payload = malloc(req->payload_len);
	if (!req->payload)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		struct kvs_proto_key k;

		memcpy(k.span_id, keys[i].span_id, KVS_ID_SIZE);
		k.layer = keys[i].layer;
		kvs_proto_key_encode(&k, req->payload + i * KVS_PROTO_KEY_SIZE);
	}
	return 0;
}

/* EXISTS, GET and DELETE: keys in the payload. */
int req_keyed_new(uint16_t op, const struct kvs_store_key *keys, size_t n,
		  struct kvs_client_req **out)
{
	struct kvs_client_req *req = req_new(op, (uint32_t)n, 0, 0);

	if (!req)
		return -ENOMEM;
	if (req_keys_payload(req, keys, n)) {
		req_free(req);
		return -ENOMEM;
	}
	req->keys = keys;
	*out = req;
	return 0;
}

int req_put_new(const uint8_t *const *objs, const size_t *lens, size_t n,
		enum kvs_durability durability, struct kvs_client_req **out)
{
	struct kvs_client_req *req;

	req = req_new(KVS_OP_PUT, (uint32_t)n, n * KVS_PROTO_ITEM_SIZE,
		      (uint32_t)durability);
	if (!req)
		return -ENOMEM;
	req->iov = calloc(n, sizeof(*req->iov));
	if (!req->iov) {
		req_free(req);
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		kvs_proto_item_encode(req->frame + KVS_PROTO_HEADER_SIZE +
					      i * KVS_PROTO_ITEM_SIZE,
				      (uint32_t)lens[i]);
		req->iov[i].buffer = (void *)objs[i];
		req->iov[i].length = lens[i];
	}
	req->iov_n = n;
	*out = req;
	return 0;
}

int req_tail_put_new(const uint8_t *request_id, const uint8_t *tail, size_t len,
		     uint32_t ttl_ms, struct kvs_client_req **out)
{
	struct kvs_client_req *req;
	uint8_t *b;

	req = req_new(KVS_OP_TAIL_PUT, 1, KVS_PROTO_TAIL_PUT_SIZE, 0);
	if (!req)
		return -ENOMEM;
	b = req->frame + KVS_PROTO_HEADER_SIZE;
	memcpy(b, request_id, KVS_PROTO_REQID_SIZE);
	kvs_put32(b + KVS_PROTO_REQID_SIZE, ttl_ms);
	kvs_put32(b + KVS_PROTO_REQID_SIZE + 4, (uint32_t)len);
	req->iov = calloc(1, sizeof(*req->iov));
	if (!req->iov) {
		req_free(req);
		return -ENOMEM;
	}
	req->iov[0].buffer = (void *)tail;
	req->iov[0].length = len;
	req->iov_n = 1;
	*out = req;
	return 0;
}

struct kvs_client_req *req_tail_take_new(const uint8_t *request_id)
{
	struct kvs_client_req *req =
		req_new(KVS_OP_TAIL_TAKE, 0, KVS_PROTO_REQID_SIZE, 0);

	if (req)
		memcpy(req->frame + KVS_PROTO_HEADER_SIZE, request_id,
		       KVS_PROTO_REQID_SIZE);
	return req;
}

void client_stat_decode(const uint64_t *v, struct kvs_client_stat *out)
{
	memset(out, 0, sizeof(*out));
	out->store.dram.blocks = v[KVS_STAT_DRAM_BLOCKS];
	out->store.dram.bytes = v[KVS_STAT_DRAM_BYTES];
	out->store.dram.capacity = v[KVS_STAT_DRAM_CAPACITY];
	out->store.nvme.blocks = v[KVS_STAT_NVME_BLOCKS];
	out->store.nvme.bytes = v[KVS_STAT_NVME_BYTES];
	out->store.nvme.capacity = v[KVS_STAT_NVME_CAPACITY];
	out->store.hits = v[KVS_STAT_HITS];
	out->store.misses = v[KVS_STAT_MISSES];
	out->store.evictions = v[KVS_STAT_EVICTIONS];
	out->store.spills = v[KVS_STAT_SPILLS];
	out->store.corrupt_dropped = v[KVS_STAT_CORRUPT_DROPPED];
	out->store.torn_dropped = v[KVS_STAT_TORN_DROPPED];
	out->store.segments = v[KVS_STAT_SEGMENTS];
	out->store.nvme_file_bytes = v[KVS_STAT_NVME_FILE_BYTES];
	out->store.direct_io = v[KVS_STAT_FLAGS] & 1;
	out->store.hugepages = v[KVS_STAT_FLAGS] >> 1 & 1;
	out->store.registered = v[KVS_STAT_FLAGS] >> 2 & 1;
	out->tails = v[KVS_STAT_TAILS];
	out->tail_bytes = v[KVS_STAT_TAIL_BYTES];
	out->tails_expired = v[KVS_STAT_TAILS_EXPIRED];
	out->connections = v[KVS_STAT_CONNECTIONS];
	out->uptime_s = v[KVS_STAT_UPTIME_S];
	out->store.dram_hits = v[KVS_STAT_DRAM_HITS];
	out->store.nvme_hits = v[KVS_STAT_NVME_HITS];
	out->store.promotions = v[KVS_STAT_PROMOTIONS];
	out->store.carried = v[KVS_STAT_CARRIED];
	out->store.lost_segments = v[KVS_STAT_LOST_SEGMENTS];
	out->store.compactions = v[KVS_STAT_COMPACTIONS];
}
