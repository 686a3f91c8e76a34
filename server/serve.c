/*
 * serve.c - one handler per opcode, run by the loop once a request's
 * payload is in place; each ends by sending its reply.
 *
 * Namespaces.  The server stores a client's block under
 * SHA-256(prefix(namespace) || span id) (ns_span_id), the namespace being
 * the one its configuration binds to the authenticated tenant.  The
 * stored object must carry its store key in its own header (the store
 * checks key_of(object) on every read and at recovery), so a put rewrites
 * the header's block id to the namespaced id -- after checking the
 * header as the client sent it -- and recomputes the header checksum; a
 * get rewrites it back to the id the client asked for in a copy of the
 * 512-byte header, sent ahead of the rest of the object, which goes from
 * the store's DRAM slot untouched.  The bytes returned are then exactly
 * the bytes put, and a tenant can reach only ids of its own namespace.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/rand.h>

#include "common/bytes.h"
#include "kvstash/error.h"
#include "kvstash/log.h"
#include "server_internal.h"

void ns_span_id(struct srv_tenant *t, const uint8_t *span_id,
		uint8_t out[KVS_ID_SIZE])
{
	unsigned len = 0;

	/* a copy of the tenant's absorbed prefix: one compression per id */
	if (!EVP_MD_CTX_copy_ex(t->ns_scratch, t->ns_prefix) ||
	    !EVP_DigestUpdate(t->ns_scratch, span_id, KVS_ID_SIZE) ||
	    !EVP_DigestFinal_ex(t->ns_scratch, out, &len))
		abort(); /* libcrypto cannot fail on a valid context */
}

static void frame_reply(struct srv_reply *r, const struct srv_req *req,
			int32_t status, uint32_t count, uint32_t body_len)
{
	struct kvs_proto_frame f = {
		.version = KVS_PROTO_VERSION,
		.opcode = (uint16_t)(req->f.opcode | KVS_OP_REPLY),
		.req_id = req->f.req_id,
		.status = status,
		.count = count,
		.body_len = body_len,
	};

	kvs_proto_header_encode(&f, r->frame);
	r->frame_len = KVS_PROTO_HEADER_SIZE + body_len;
}

/* Sends @r, or an out-of-memory error when it could not be made. */
static void finish(struct kvs_server *srv, struct srv_req *req,
		   struct srv_reply *r, bool ok)
{
	if (ok && r) {
		reply_send(srv, r);
	} else {
		reply_discard(r);
		reply_error(srv, req, -ENOMEM, false);
	}
	req_done(req);
}

static struct srv_tenant *tenant_find(struct kvs_server *srv, const char *name)
{
	for (size_t i = 0; i < srv->n_tenants; i++)
		if (strcmp(srv->tenants[i].cfg.name, name) == 0)
			return &srv->tenants[i];
	return NULL;
}

static void serve_hello(struct kvs_server *srv, struct srv_req *req)
{
	struct srv_conn *c = req->conn;
	struct srv_reply *r = reply_new(req);
	uint16_t tlen = kvs_get16(req->f.body);
	uint8_t *b;

	if (!r) {
		finish(srv, req, NULL, false);
		return;
	}
	memcpy(c->tenant_name, req->f.body + 4, tlen);
	c->tenant_name[tlen] = '\0';
	/* a fresh challenge for every hello: a proof made for an earlier
	 * one (on this connection or another) never matches */
	c->nonce_valid = RAND_bytes(c->nonce, sizeof(c->nonce)) == 1;
	frame_reply(r, req, c->nonce_valid ? 0 : -EIO, 0,
		    KVS_PROTO_HELLO_REPLY_SIZE);
	b = r->frame + KVS_PROTO_HEADER_SIZE;
	memcpy(b, c->nonce, KVS_PROTO_NONCE_SIZE);
	kvs_put32(b + 32, srv->limits.max_batch);
	kvs_put32(b + 36, srv->limits.max_object);
	kvs_put32(b + 40, srv->limits.max_payload > UINT32_MAX
				  ? UINT32_MAX
				  : (uint32_t)srv->limits.max_payload);
	kvs_put32(b + 44, srv->limits_inflight);
	finish(srv, req, r, true);
}

static void serve_auth(struct kvs_server *srv, struct srv_req *req)
{
	struct srv_conn *c = req->conn;
	struct srv_tenant *t = tenant_find(srv, c->tenant_name);
	uint8_t mac[KVS_PROTO_MAC_SIZE];
	bool ok = false;

	/* the challenge is spent by this answer, right or wrong */
	if (c->nonce_valid && t &&
	    kvs_proto_auth_mac(t->cfg.key, t->cfg.key_len, c->nonce,
			       t->cfg.name, mac) == 0)
		ok = CRYPTO_memcmp(mac, req->f.body, sizeof(mac)) == 0;
	c->nonce_valid = false;
	if (!ok) {
		M_ADD(srv->m.auth_failures, 1);
		kvs_log(KVS_LOG_WARN,
			"kvstashd: connection %llu: authentication of tenant "
			"'%s' refused",
			(unsigned long long)c->id, c->tenant_name);
		reply_error(srv, req, -KVS_EAUTH, true);
		req_done(req);
		return;
	}
	c->authed = true;
	c->tenant = t;
	kvs_log(KVS_LOG_INFO,
		"kvstashd: connection %llu: tenant '%s' authenticated",
		(unsigned long long)c->id, t->cfg.name);
	reply_error(srv, req, 0, false);
	req_done(req);
}

static void serve_lookup(struct kvs_server *srv, struct srv_req *req)
{
	uint32_t n_layers = kvs_get32(req->f.body), n = req->f.count;
	uint32_t *layers = malloc(n_layers * sizeof(*layers));
	uint8_t(*ids)[KVS_ID_SIZE] = malloc((size_t)n * KVS_ID_SIZE);
	const uint8_t *spans = req->payload + (size_t)n_layers * 4;
	struct srv_reply *r = reply_new(req);
	size_t prefix;

	if (!layers || !ids || !r) {
		free(layers);
		free(ids);
		finish(srv, req, r, false);
		return;
	}
	for (uint32_t i = 0; i < n_layers; i++)
		layers[i] = kvs_get32(req->payload + (size_t)i * 4);
	for (uint32_t i = 0; i < n; i++)
		ns_span_id(req->conn->tenant, spans + (size_t)i * KVS_ID_SIZE,
			   ids[i]);
	prefix = kvs_store_lookup_prefix(srv->opts.store,
					 (const uint8_t(*)[KVS_ID_SIZE])ids, n,
					 layers, n_layers);
	frame_reply(r, req, 0, n, 8);
	kvs_proto_item_encode(r->frame + KVS_PROTO_HEADER_SIZE,
			      (uint32_t)prefix);
	free(layers);
	free(ids);
	finish(srv, req, r, true);
}

/* The namespaced store key of wire key @i of the payload. */
static void req_key(const struct srv_req *req, uint32_t i,
		    struct kvs_proto_key *wire, struct kvs_store_key *key)
{
	/* reserved bytes were checked with the request */
	kvs_proto_key_decode(req->payload + (size_t)i * KVS_PROTO_KEY_SIZE,
			     wire);
	ns_span_id(req->conn->tenant, wire->span_id, key->span_id);
	key->layer = wire->layer;
}

static void serve_exists(struct kvs_server *srv, struct srv_req *req)
{
	struct srv_reply *r = reply_new(req);
	uint8_t *body;

	if (!r) {
		finish(srv, req, NULL, false);
		return;
	}
	frame_reply(r, req, 0, req->f.count, req->f.count);
	body = r->frame + KVS_PROTO_HEADER_SIZE;
	for (uint32_t i = 0; i < req->f.count; i++) {
		struct kvs_proto_key wire;
		struct kvs_store_key key;
		const uint8_t(*id)[KVS_ID_SIZE];

		req_key(req, i, &wire, &key);
		id = (const uint8_t(*)[KVS_ID_SIZE])key.span_id;
		body[i] = kvs_store_lookup_prefix(srv->opts.store, id, 1,
						  &key.layer, 1) == 1;
	}
	finish(srv, req, r, true);
}

/* A get or put whose store batch may finish later (kvs_store_*_async). */
struct batch_ctx {
	struct kvs_server *srv;
	struct srv_req *req;
	struct srv_reply *r;
	uint32_t n;
	struct kvs_store_key *keys;
	struct kvs_proto_key *wire;
	int *results; /* per request item */
	/* puts */
	const uint8_t **objs;
	size_t *lens, *idx, m;
	int *res2; /* per item handed to the store */
	struct kvs_store_reservation **rs;
};

static void ctx_free(struct batch_ctx *x)
{
	free(x->keys);
	free(x->wire);
	free(x->results);
	free(x->objs);
	free(x->lens);
	free(x->idx);
	free(x->res2);
	free(x->rs);
	free(x);
}

static void get_done(void *arg, int status)
{
	struct batch_ctx *x = arg;
	struct kvs_server *srv = x->srv;
	struct srv_req *req = x->req;
	struct srv_reply *r = x->r;
	uint32_t n = x->n, hits = 0;
	uint8_t *body;

	r->n_refs = n;
	if (status) {
		reply_discard(r); /* and the refs taken */
		reply_error(srv, req, status, false);
		req_done(req);
		ctx_free(x);
		return;
	}
	frame_reply(r, req, 0, n, n * KVS_PROTO_ITEM_SIZE);
	body = r->frame + KVS_PROTO_HEADER_SIZE;
	for (uint32_t i = 0; i < n; i++) {
		uint8_t *item = body + (size_t)i * KVS_PROTO_ITEM_SIZE;
		const uint8_t *obj;
		size_t len;

		if (x->results[i]) {
			/* a record that failed the store's check was dropped:
			 * for the client it is a miss like any other */
			int res = x->results[i] == -KVS_ECORRUPT
					  ? -KVS_ENOTFOUND
					  : x->results[i];

			kvs_put32(item, (uint32_t)res);
			kvs_put32(item + 4, 0);
			continue;
		}
		/* as stored, straight from the slot: the client writes its
		 * own id back (docs/PROTOCOL.md, section 5) */
		obj = kvs_store_ref_data(r->refs[i]);
		len = kvs_store_ref_len(r->refs[i]);
		r->iov[r->iov_n].buffer = (void *)obj;
		r->iov[r->iov_n++].length = len;
		r->bytes += len;
		kvs_put32(item, 0);
		kvs_put32(item + 4, (uint32_t)len);
		hits++;
	}
	M_ADD(srv->m.get_hits, hits);
	M_ADD(srv->m.get_misses, n - hits);
	finish(srv, req, r, true);
	ctx_free(x);
}

static void serve_get(struct kvs_server *srv, struct srv_req *req)
{
	uint32_t n = req->f.count;
	struct batch_ctx *x = calloc(1, sizeof(*x));
	struct srv_reply *r = reply_new(req);
	int rc;

	if (!x || !r)
		goto oom;
	*x = (struct batch_ctx){ .srv = srv, .req = req, .r = r, .n = n };
	x->keys = malloc(n * sizeof(*x->keys));
	x->wire = malloc(n * sizeof(*x->wire));
	x->results = malloc(n * sizeof(*x->results));
	r->refs = calloc(n, sizeof(*r->refs));
	r->iov = calloc(n, sizeof(*r->iov));
	if (!x->keys || !x->wire || !x->results || !r->refs || !r->iov)
		goto oom;
	for (uint32_t i = 0; i < n; i++)
		req_key(req, i, &x->wire[i], &x->keys[i]);
	/* objects in DRAM are served at once; NVMe reads are queued to the
	 * store's ring, the reply follows from the loop's kvs_store_poll */
	rc = kvs_store_get_batch_async(srv->opts.store, x->keys, n, r->refs,
				       x->results, get_done, x);
	if (rc != 0)
		get_done(x, rc < 0 ? rc : 0);
	return;
oom:
	if (x)
		ctx_free(x);
	finish(srv, req, r, false);
}

/* Replies with one status item per request item (x->results), ends the
 * request and frees @x. */
static void reply_items(struct batch_ctx *x)
{
	frame_reply(x->r, x->req, 0, x->n, x->n * KVS_PROTO_ITEM_SIZE);
	for (uint32_t i = 0; i < x->n; i++)
		kvs_proto_item_encode(x->r->frame + KVS_PROTO_HEADER_SIZE +
					      i * KVS_PROTO_ITEM_SIZE,
				      (uint32_t)x->results[i]);
	finish(x->srv, x->req, x->r, true);
	ctx_free(x);
}

static void delete_done(void *arg, int status)
{
	/* every item has its status, a refusal of the whole batch too */
	reply_items(arg);
}

static void serve_delete(struct kvs_server *srv, struct srv_req *req)
{
	uint32_t n = req->f.count;
	struct batch_ctx *x = calloc(1, sizeof(*x));
	struct srv_reply *r = reply_new(req);
	enum kvs_durability dur = req->f.flags;
	int rc;

	if (!x || !r)
		goto oom;
	*x = (struct batch_ctx){ .srv = srv, .req = req, .r = r, .n = n };
	x->keys = malloc(n * sizeof(*x->keys));
	x->wire = malloc(n * sizeof(*x->wire));
	x->results = malloc(n * sizeof(*x->results));
	if (!x->keys || !x->wire || !x->results)
		goto oom;
	for (uint32_t i = 0; i < n; i++)
		req_key(req, i, &x->wire[i], &x->keys[i]);
	if (dur < srv->opts.min_durability)
		dur = srv->opts.min_durability;
	/* a tombstone to write: the reply follows from kvs_store_poll */
	rc = kvs_store_delete_batch_async(srv->opts.store, x->keys, n, dur,
					  x->results, delete_done, x);
	if (rc != 0)
		delete_done(x, rc < 0 ? rc : 0);
	return;
oom:
	if (x)
		ctx_free(x);
	finish(srv, req, r, false);
}

/* Checks one put object as the client sent it and moves it into the
 * tenant's namespace; 0 or the error.  The block store holds sealed
 * blocks and full-precision spans (tail objects: docs/PROTOCOL.md). */
static int put_rekey(struct srv_tenant *t, uint8_t *obj, size_t len)
{
	struct kvs_header h;
	uint8_t id[KVS_ID_SIZE];
	int err = kvs_header_decode(obj, len, 0, &h);

	if (err)
		return err;
	if (h.kind != KVS_KIND_BLOCK && h.kind != KVS_KIND_TAIL)
		return -KVS_EKIND;
	ns_span_id(t, h.ident.block_id, id);
	kvs_header_set_block_id(obj, id);
	return 0;
}

static void put_done(void *arg, int status)
{
	struct batch_ctx *x = arg;

	for (size_t k = 0; k < x->m; k++)
		x->results[x->idx[k]] = x->res2[k] == 1 ? status : x->res2[k];
	reply_items(x);
}

static void serve_put(struct kvs_server *srv, struct srv_req *req)
{
	uint32_t n = req->f.count;
	struct batch_ctx *x = calloc(1, sizeof(*x));
	struct srv_reply *r = reply_new(req);
	enum kvs_durability dur = req->f.flags;
	uint64_t off = 0;
	int rc;

	if (!x || !r)
		goto oom;
	*x = (struct batch_ctx){ .srv = srv, .req = req, .r = r, .n = n };
	x->objs = malloc(n * sizeof(*x->objs));
	x->lens = malloc(n * sizeof(*x->lens));
	x->idx = malloc(n * sizeof(*x->idx));
	x->results = calloc(n, sizeof(*x->results));
	x->res2 = malloc(n * sizeof(*x->res2));
	x->rs = malloc(n * sizeof(*x->rs));
	if (!x->objs || !x->lens || !x->idx || !x->results || !x->res2 ||
	    !x->rs)
		goto oom;
	if (dur < srv->opts.min_durability)
		dur = srv->opts.min_durability;
	for (uint32_t i = 0; i < n; i++) {
		uint32_t len = kvs_get32(req->f.body +
					 (size_t)i * KVS_PROTO_ITEM_SIZE);
		uint8_t *obj = req->resv ? req->dsts[i] : req->payload + off;

		off += len;
		x->results[i] = put_rekey(req->conn->tenant, obj, len);
		if (x->results[i])
			continue;
		if (req->resv) {
			/* the reservation goes to the commit */
			x->rs[x->m] = req->resv[i];
			req->resv[i] = NULL;
		}
		x->objs[x->m] = obj;
		x->lens[x->m] = len;
		x->res2[x->m] = 1;
		x->idx[x->m++] = i;
	}
	if (!x->m) {
		put_done(x, 0);
		return;
	}
	/* memory durability is stored at once; writes are queued to the
	 * store's ring, the reply follows from the loop's kvs_store_poll */
	if (req->resv)
		rc = kvs_store_commit_batch_async(srv->opts.store, x->rs, x->m,
						  dur, x->res2, put_done, x);
	else
		rc = kvs_store_put_batch_async(srv->opts.store, x->objs,
					       x->lens, x->m, dur, x->res2,
					       put_done, x);
	if (rc != 0)
		put_done(x, rc < 0 ? rc : 0);
	return;
oom:
	if (x)
		ctx_free(x);
	finish(srv, req, r, false);
}

static void serve_stat(struct kvs_server *srv, struct srv_req *req)
{
	struct srv_reply *r = reply_new(req);
	struct kvs_store_stats st;
	uint64_t v[KVS_STAT_N];

	if (!r) {
		finish(srv, req, NULL, false);
		return;
	}
	kvs_store_stats_get(srv->opts.store, &st);
	v[KVS_STAT_DRAM_BLOCKS] = st.dram.blocks;
	v[KVS_STAT_DRAM_BYTES] = st.dram.bytes;
	v[KVS_STAT_DRAM_CAPACITY] = st.dram.capacity;
	v[KVS_STAT_NVME_BLOCKS] = st.nvme.blocks;
	v[KVS_STAT_NVME_BYTES] = st.nvme.bytes;
	v[KVS_STAT_NVME_CAPACITY] = st.nvme.capacity;
	v[KVS_STAT_HITS] = st.hits;
	v[KVS_STAT_MISSES] = st.misses;
	v[KVS_STAT_EVICTIONS] = st.evictions;
	v[KVS_STAT_SPILLS] = st.spills;
	v[KVS_STAT_CORRUPT_DROPPED] = st.corrupt_dropped;
	v[KVS_STAT_TORN_DROPPED] = st.torn_dropped;
	v[KVS_STAT_SEGMENTS] = st.segments;
	v[KVS_STAT_NVME_FILE_BYTES] = st.nvme_file_bytes;
	v[KVS_STAT_FLAGS] = (uint64_t)st.direct_io |
			    (uint64_t)st.hugepages << 1 |
			    (uint64_t)st.registered << 2;
	tails_usage(srv->tails, &v[KVS_STAT_TAILS], &v[KVS_STAT_TAIL_BYTES]);
	v[KVS_STAT_TAILS_EXPIRED] = M_GET(srv->m.tails_expired);
	v[KVS_STAT_CONNECTIONS] = srv->n_conns;
	v[KVS_STAT_UPTIME_S] = elapsed_ns(&srv->started) / 1000000000ull;
	v[KVS_STAT_DRAM_HITS] = st.dram_hits;
	v[KVS_STAT_NVME_HITS] = st.nvme_hits;
	v[KVS_STAT_PROMOTIONS] = st.promotions;
	v[KVS_STAT_CARRIED] = st.carried;
	v[KVS_STAT_LOST_SEGMENTS] = st.lost_segments;
	v[KVS_STAT_COMPACTIONS] = st.compactions;
	frame_reply(r, req, 0, KVS_STAT_N, KVS_STAT_N * 8);
	for (unsigned i = 0; i < KVS_STAT_N; i++)
		kvs_put64(r->frame + KVS_PROTO_HEADER_SIZE + i * 8, v[i]);
	finish(srv, req, r, true);
}

/* The tail table key: the namespaced request id. */
static void tail_key(const struct srv_req *req, uint8_t key[KVS_ID_SIZE])
{
	ns_span_id(req->conn->tenant, req->f.body, key);
}

static void serve_tail_put(struct kvs_server *srv, struct srv_req *req)
{
	uint32_t ttl = kvs_get32(req->f.body + KVS_PROTO_REQID_SIZE);
	uint8_t key[KVS_ID_SIZE], *copy;
	int err;

	if (ttl == 0 ||
	    ttl > (srv->opts.tail_max_ttl_ms ? srv->opts.tail_max_ttl_ms
					     : 600000u))
		err = -KVS_EPARAM;
	else
		err = kvs_object_verify(req->payload, req->payload_len, 0);
	if (!err) {
		struct kvs_header h;

		kvs_header_decode(req->payload, req->payload_len, 0, &h);
		err = h.kind == KVS_KIND_TAIL ? 0 : -KVS_EKIND;
	}
	copy = err ? NULL : malloc(req->payload_len);
	if (!err && !copy)
		err = -ENOMEM;
	if (!err) {
		memcpy(copy, req->payload, req->payload_len);
		tail_key(req, key);
		err = tails_put(srv->tails, key, copy, req->payload_len,
				now_ns() + (uint64_t)ttl * 1000000ull);
		if (err)
			free(copy);
	}
	reply_error(srv, req, err, false);
	req_done(req);
}

static void serve_tail_take(struct kvs_server *srv, struct srv_req *req)
{
	struct srv_reply *r = reply_new(req);
	uint8_t key[KVS_ID_SIZE], *obj;
	size_t len;
	int err;

	if (!r) {
		finish(srv, req, NULL, false);
		return;
	}
	tail_key(req, key);
	err = tails_take(srv->tails, key, now_ns(), &obj, &len);
	if (err) {
		frame_reply(r, req, err, 0, 0);
		finish(srv, req, r, true);
		return;
	}
	M_ADD(srv->m.tails_taken, 1);
	r->owned = obj;
	r->iov = calloc(1, sizeof(*r->iov));
	if (!r->iov) {
		finish(srv, req, r, false);
		return;
	}
	r->iov[0].buffer = obj;
	r->iov[0].length = len;
	r->iov_n = 1;
	r->bytes = len;
	frame_reply(r, req, 0, 1, 8);
	kvs_proto_item_encode(r->frame + KVS_PROTO_HEADER_SIZE, (uint32_t)len);
	finish(srv, req, r, true);
}

/* The handler of each request opcode (kvs_proto_request_check lets no
 * other through). */
static void (*const handlers[])(struct kvs_server *, struct srv_req *) = {
	[KVS_OP_HELLO] = serve_hello,
	[KVS_OP_AUTH] = serve_auth,
	[KVS_OP_LOOKUP] = serve_lookup,
	[KVS_OP_EXISTS] = serve_exists,
	[KVS_OP_GET] = serve_get,
	[KVS_OP_PUT] = serve_put,
	[KVS_OP_DELETE] = serve_delete,
	[KVS_OP_STAT] = serve_stat,
	[KVS_OP_TAIL_PUT] = serve_tail_put,
	[KVS_OP_TAIL_TAKE] = serve_tail_take,
};

void serve(struct kvs_server *srv, struct srv_req *req)
{
	uint16_t op = req->f.opcode;

	if (op < sizeof(handlers) / sizeof(handlers[0]) && handlers[op]) {
		handlers[op](srv, req);
		return;
	}
	reply_error(srv, req, -KVS_EOPCODE, true);
	req_done(req);
}
