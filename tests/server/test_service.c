/*
 * test_service.c - kvstashd and libkvstash end to end, on loopback: real
 * daemons (KVSTASHD), real UCX.  Round trips, authentication,
 * namespaces, malformed frames, limits, the tail handoff, timeouts,
 * statistics and metrics.  The fault cases (kill -9, SIGTERM, killed
 * clients, 64 clients) are in test_service_faults.c.
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "common/bytes.h"
#include "service_util.h"

#define BATCH 32

struct blocks {
	uint8_t *obj[BATCH + 1];
	size_t len[BATCH + 1];
	struct kvs_store_key key[BATCH + 1];
};

static void blocks_make(struct blocks *b, uint64_t seed, size_t n)
{
	for (size_t i = 0; i < n; i++)
		b->obj[i] = make_block(seed + i, (uint32_t)(i % 3), 2, 128,
				       &b->len[i], &b->key[i]);
}

static void blocks_free(struct blocks *b)
{
	for (size_t i = 0; i <= BATCH; i++)
		free(b->obj[i]);
}

/* Gets keys[0..n) and checks each is byte-identical to what was put. */
static void get_check(struct kvs_client *c, const struct blocks *b, size_t n)
{
	void *bufs[BATCH + 1];
	size_t caps[BATCH + 1], lens[BATCH + 1];
	int res[BATCH + 1];

	for (size_t i = 0; i < n; i++) {
		caps[i] = b->len[i];
		bufs[i] = malloc(caps[i]);
	}
	assert_int_equal(kvs_client_get(c, b->key, n, bufs, caps, lens, res),
			 0);
	for (size_t i = 0; i < n; i++) {
		assert_int_equal(res[i], 0);
		assert_int_equal(lens[i], b->len[i]);
		assert_memory_equal(bufs[i], b->obj[i], b->len[i]);
		free(bufs[i]);
	}
}

static void test_round_trips(void **state)
{
	struct daemon d;
	struct blocks b = { 0 };
	struct kvs_client *c;
	struct kvs_client_limits lim;
	int res[BATCH + 1];
	bool present[BATCH + 1];
	const char *extra[] = { "--max-batch", "32", NULL };
	uint8_t(*chain)[KVS_ID_SIZE] = calloc(8, KVS_ID_SIZE);
	uint32_t layers[3] = { 0, 1, 2 };
	size_t prefix = 99, len, cap;
	void *buf;

	daemon_prepare(&d, "roundtrip");
	daemon_start(&d, extra);
	c = client_of(&d, "alice", 0);
	kvs_client_limits(c, &lim);
	assert_int_equal(lim.max_batch, BATCH);
	blocks_make(&b, 100, BATCH + 1);

	/* one block, then a batch at the limit, byte-identical back */
	assert_int_equal(kvs_client_put(c, (const uint8_t *const *)b.obj, b.len,
					1, KVS_DURABILITY_WRITTEN, res),
			 0);
	assert_int_equal(res[0], 0);
	get_check(c, &b, 1);
	assert_int_equal(kvs_client_put(c, (const uint8_t *const *)b.obj, b.len,
					BATCH, KVS_DURABILITY_DURABLE, res),
			 0);
	for (int i = 0; i < BATCH; i++)
		assert_int_equal(res[i], 0);
	get_check(c, &b, BATCH);
	/* past the limit: refused before anything is sent */
	assert_int_equal(kvs_client_put(c, (const uint8_t *const *)b.obj, b.len,
					BATCH + 1, KVS_DURABILITY_WRITTEN, res),
			 -KVS_EBATCH);

	/* exists, a miss, delete */
	assert_int_equal(kvs_client_exists(c, b.key, BATCH, present), 0);
	for (int i = 0; i < BATCH; i++)
		assert_true(present[i]);
	assert_int_equal(kvs_client_exists(c, &b.key[BATCH], 1, present), 0);
	assert_false(present[0]);
	cap = b.len[BATCH];
	buf = malloc(cap);
	assert_int_equal(
		kvs_client_get(c, &b.key[BATCH], 1, &buf, &cap, &len, res), 0);
	assert_int_equal(res[0], -KVS_ENOTFOUND);
	/* a buffer too small: -ENOSPC and the length needed */
	cap = 100;
	assert_int_equal(kvs_client_get(c, &b.key[0], 1, &buf, &cap, &len, res),
			 0);
	assert_int_equal(res[0], -ENOSPC);
	assert_int_equal(len, b.len[0]);
	assert_int_equal(kvs_client_delete(c, &b.key[1], 1, res), 0);
	assert_int_equal(res[0], 0);
	assert_int_equal(kvs_client_delete(c, &b.key[1], 1, res), 0);
	assert_int_equal(res[0], -KVS_ENOTFOUND);
	assert_int_equal(kvs_client_exists(c, &b.key[1], 1, present), 0);
	assert_false(present[0]);
	free(buf);

	/* lookup: a chain of spans of blocks 0, 3, 6, ... (layer 0 each,
	 * and layers 1 and 2 of the same span ids put now) */
	for (int i = 0; i < 8; i++) {
		uint8_t *o[3];
		size_t l[3];
		struct kvs_store_key k[3];
		int r3[3];

		for (uint32_t layer = 0; layer < 3; layer++) {
			o[layer] = make_block(5000 + (uint64_t)i, layer, 1, 128,
					      &l[layer], &k[layer]);
		}
		memcpy(chain[i], k[0].span_id, KVS_ID_SIZE);
		if (i < 5) /* spans 5.. absent */
			assert_int_equal(
				kvs_client_put(c, (const uint8_t *const *)o, l,
					       3, KVS_DURABILITY_WRITTEN, r3),
				0);
		for (int j = 0; j < 3; j++)
			free(o[j]);
	}
	assert_int_equal(kvs_client_lookup(c, (const uint8_t(*)[32])chain, 8,
					   layers, 3, &prefix),
			 0);
	assert_int_equal(prefix, 5);
	assert_int_equal(kvs_client_lookup(c, (const uint8_t(*)[32])chain + 5,
					   3, layers, 3, &prefix),
			 0);
	assert_int_equal(prefix, 0);

	kvs_client_close(c);
	assert_int_equal(daemon_stop(&d, SIGTERM, 10000), 0);
	blocks_free(&b);
	free(chain);
	daemon_cleanup(&d);
}

/* The shared-memory transports, allowed on both sides: the same bytes. */
static void test_shared_memory(void **state)
{
	struct daemon d;
	struct blocks b = { 0 };
	struct kvs_client_opts o;
	struct kvs_client *c, *dup;
	const char *extra[] = { "--shared-memory", NULL };
	int res[BATCH];

	daemon_prepare(&d, "shm");
	daemon_start(&d, extra);
	kvs_client_opts_default(&o);
	o.address = d.addr;
	o.key_file = key_path(&d, "alice");
	o.shared_memory = true;
	assert_int_equal(kvs_client_connect(&o, &c), 0);
	blocks_make(&b, 900, BATCH);
	assert_int_equal(kvs_client_put(c, (const uint8_t *const *)b.obj, b.len,
					BATCH, KVS_DURABILITY_WRITTEN, res),
			 0);
	get_check(c, &b, BATCH);
	/* another connection of the same client's: the same tenant, and
	 * on its own once the first is closed */
	assert_int_equal(kvs_client_dup(c, &dup), 0);
	kvs_client_close(c);
	get_check(dup, &b, BATCH);
	kvs_client_close(dup);
	/* a client without it still reaches the same daemon */
	c = client_of(&d, "carol", 0);
	get_check(c, &b, BATCH);
	kvs_client_close(c);
	assert_int_equal(daemon_stop(&d, SIGTERM, 10000), 0);
	blocks_free(&b);
	daemon_cleanup(&d);
}

/* Asynchronous forms: callbacks and handles, many in flight. */
static int cb_count;
static int cb_status;

static void count_cb(void *arg, int status)
{
	__atomic_fetch_add(&cb_count, 1, __ATOMIC_SEQ_CST);
	if (status)
		cb_status = status;
}

static void test_async(void **state)
{
	struct daemon d;
	struct blocks b = { 0 };
	struct kvs_client *c;
	struct kvs_client_req *h[BATCH];
	int res[BATCH][1];
	void *bufs[BATCH];
	size_t caps[BATCH], lens[BATCH];

	daemon_prepare(&d, "async");
	daemon_start(&d, NULL);
	c = client_of(&d, "alice", 0);
	blocks_make(&b, 300, BATCH);
	cb_count = 0;
	for (int i = 0; i < BATCH; i++)
		assert_int_equal(kvs_client_put_async(
					 c, (const uint8_t *const *)&b.obj[i],
					 &b.len[i], 1, KVS_DURABILITY_WRITTEN,
					 res[i], count_cb, NULL, NULL),
				 0);
	for (int i = 0;
	     i < 2000 && __atomic_load_n(&cb_count, __ATOMIC_SEQ_CST) < BATCH;
	     i++)
		usleep(5000);
	assert_int_equal(cb_count, BATCH);
	assert_int_equal(cb_status, 0);
	for (int i = 0; i < BATCH; i++) {
		assert_int_equal(res[i][0], 0);
		caps[i] = b.len[i];
		bufs[i] = malloc(caps[i]);
		assert_int_equal(kvs_client_get_async(
					 c, &b.key[i], 1, &bufs[i], &caps[i],
					 &lens[i], res[i], NULL, NULL, &h[i]),
				 0);
	}
	for (int i = BATCH - 1; i >= 0; i--) {
		assert_int_equal(kvs_client_wait(h[i]), 0);
		assert_int_equal(res[i][0], 0);
		assert_memory_equal(bufs[i], b.obj[i], b.len[i]);
		free(bufs[i]);
	}
	/* a call needs exactly one of callback and handle */
	assert_int_equal(kvs_client_get_async(c, &b.key[0], 1, bufs, caps, lens,
					      res[0], NULL, NULL, NULL),
			 -KVS_EPARAM);
	kvs_client_close(c);
	assert_int_equal(daemon_stop(&d, SIGTERM, 10000), 0);
	blocks_free(&b);
	daemon_cleanup(&d);
}

static void test_auth(void **state)
{
	struct daemon d;
	struct kvs_client *c = NULL;
	struct raw_client r1, r2;
	struct kvs_proto_frame f;
	uint8_t frame[KVS_PROTO_MAX_FRAME], mac[KVS_PROTO_MAC_SIZE];
	uint8_t payload[KVS_PROTO_KEY_SIZE] = { 0 };
	size_t len;
	char *m;

	daemon_prepare(&d, "auth");
	{
		const char *extra[] = { "--metrics", "127.0.0.1:0", NULL };

		daemon_start(&d, extra);
	}
	/* wrong key */
	assert_int_equal(client_try(&d, "mallory", &c), -KVS_EAUTH);
	/* no key: a request before any proof is refused, connection closed */
	raw_connect(&r1, &d);
	len = raw_frame(frame, KVS_OP_GET, 1, 0, 5);
	assert_int_equal(
		raw_exchange(&r1, frame, len, payload, sizeof(payload), 5000),
		0);
	assert_int_equal(kvs_proto_frame_decode(r1.reply, r1.reply_len, &f), 0);
	assert_int_equal(f.status, -KVS_EAUTH);
	assert_true(raw_wait_closed(&r1, 5000));
	raw_close(&r1);
	/* replayed challenge: a proof that worked on one connection does
	 * not work on another (a new nonce), nor twice on the same one */
	raw_connect(&r1, &d);
	assert_int_equal(raw_auth(&r1, &d, "alice", mac), 0);
	raw_connect(&r2, &d);
	len = raw_frame(frame, KVS_OP_HELLO, 0, 4 + 5, 1);
	kvs_put16(frame + KVS_PROTO_HEADER_SIZE, 5);
	kvs_put16(frame + KVS_PROTO_HEADER_SIZE + 2, 0);
	memcpy(frame + KVS_PROTO_HEADER_SIZE + 4, "alice", 5);
	assert_int_equal(raw_exchange(&r2, frame, len, NULL, 0, 5000), 0);
	len = raw_frame(frame, KVS_OP_AUTH, 0, KVS_PROTO_MAC_SIZE, 2);
	memcpy(frame + KVS_PROTO_HEADER_SIZE, mac, KVS_PROTO_MAC_SIZE);
	assert_int_equal(raw_exchange(&r2, frame, len, NULL, 0, 5000), 0);
	assert_int_equal(kvs_proto_frame_decode(r2.reply, r2.reply_len, &f), 0);
	assert_int_equal(f.status, -KVS_EAUTH);
	assert_true(raw_wait_closed(&r2, 5000));
	raw_close(&r2);
	/* the same proof again on its own connection: the nonce is spent */
	assert_int_equal(raw_exchange(&r1, frame, len, NULL, 0, 5000), 0);
	assert_int_equal(kvs_proto_frame_decode(r1.reply, r1.reply_len, &f), 0);
	assert_int_equal(f.status, -KVS_EAUTH);
	raw_close(&r1);
	/* the right key still works, and the failures were counted */
	c = client_of(&d, "alice", 0);
	kvs_client_close(c);
	m = metrics_fetch(&d);
	assert_non_null(m);
	assert_non_null(strstr(m, "kvstash_auth_failures_total 4\n"));
	/* as errors by opcode: the refused proofs (the wrong key, the
	 * replays) and the request made before any, never a proof that
	 * was accepted */
	assert_non_null(
		strstr(m, "kvstash_request_errors_total{op=\"auth\"} 3\n"));
	assert_non_null(
		strstr(m, "kvstash_request_errors_total{op=\"get\"} 1\n"));
	free(m);
	assert_int_equal(daemon_stop(&d, SIGTERM, 10000), 0);
	daemon_cleanup(&d);
}

static void test_namespaces(void **state)
{
	struct daemon d;
	struct kvs_client *alice, *bob, *carol;
	struct kvs_store_key key;
	uint8_t *obj;
	size_t len, got, cap;
	void *buf;
	int res;
	bool present;
	uint32_t layer = 0;
	size_t prefix;

	daemon_prepare(&d, "ns");
	daemon_start(&d, NULL);
	alice = client_of(&d, "alice", 0);
	bob = client_of(&d, "bob", 0);
	carol = client_of(&d, "carol", 0);
	obj = make_block(77, 0, 2, 128, &len, &key);
	cap = len;
	buf = malloc(cap);
	assert_int_equal(kvs_client_put(alice, (const uint8_t *const *)&obj,
					&len, 1, KVS_DURABILITY_WRITTEN, &res),
			 0);
	assert_int_equal(res, 0);
	/* bob's namespace: the same id is not there, by any request */
	assert_int_equal(kvs_client_get(bob, &key, 1, &buf, &cap, &got, &res),
			 0);
	assert_int_equal(res, -KVS_ENOTFOUND);
	assert_int_equal(kvs_client_exists(bob, &key, 1, &present), 0);
	assert_false(present);
	assert_int_equal(kvs_client_lookup(bob,
					   (const uint8_t(*)[32])key.span_id, 1,
					   &layer, 1, &prefix),
			 0);
	assert_int_equal(prefix, 0);
	assert_int_equal(kvs_client_delete(bob, &key, 1, &res), 0);
	assert_int_equal(res, -KVS_ENOTFOUND);
	/* carol is bound to alice's namespace: a hit, byte-identical */
	memset(buf, 0, cap);
	assert_int_equal(kvs_client_get(carol, &key, 1, &buf, &cap, &got, &res),
			 0);
	assert_int_equal(res, 0);
	assert_int_equal(got, len);
	assert_memory_equal(buf, obj, len);
	assert_int_equal(kvs_client_lookup(carol,
					   (const uint8_t(*)[32])key.span_id, 1,
					   &layer, 1, &prefix),
			 0);
	assert_int_equal(prefix, 1);
	/* bob's own copy of the same id stays apart from alice's */
	assert_int_equal(kvs_client_put(bob, (const uint8_t *const *)&obj, &len,
					1, KVS_DURABILITY_WRITTEN, &res),
			 0);
	assert_int_equal(kvs_client_delete(bob, &key, 1, &res), 0);
	assert_int_equal(res, 0);
	assert_int_equal(kvs_client_get(alice, &key, 1, &buf, &cap, &got, &res),
			 0);
	assert_int_equal(res, 0);
	assert_memory_equal(buf, obj, len);
	kvs_client_close(alice);
	kvs_client_close(bob);
	kvs_client_close(carol);
	free(obj);
	free(buf);
	assert_int_equal(daemon_stop(&d, SIGTERM, 10000), 0);
	daemon_cleanup(&d);
}

/* Sends one bad frame on an authenticated raw connection; expects the
 * error @status and, with @closes, the connection closed. */
static void bad_frame(const struct daemon *d, const uint8_t *frame, size_t len,
		      const void *payload, size_t payload_len, int status,
		      bool closes)
{
	struct raw_client r;
	struct kvs_proto_frame f;
	uint8_t stat[KVS_PROTO_HEADER_SIZE];

	raw_connect(&r, d);
	assert_int_equal(raw_auth(&r, d, "alice", NULL), 0);
	assert_int_equal(
		raw_exchange(&r, frame, len, payload, payload_len, 5000), 0);
	assert_int_equal(kvs_proto_frame_decode(r.reply, r.reply_len, &f), 0);
	assert_int_equal(f.status, status);
	if (closes) {
		assert_true(raw_wait_closed(&r, 5000));
	} else {
		/* the connection goes on: a stat is served */
		len = raw_frame(stat, KVS_OP_STAT, 0, 0, 9);
		assert_int_equal(raw_exchange(&r, stat, len, NULL, 0, 5000), 0);
		assert_int_equal(
			kvs_proto_frame_decode(r.reply, r.reply_len, &f), 0);
		assert_int_equal(f.status, 0);
		assert_int_equal(f.opcode, KVS_OP_STAT | KVS_OP_REPLY);
	}
	raw_close(&r);
}

static void test_malformed(void **state)
{
	struct daemon d;
	uint8_t frame[KVS_PROTO_MAX_FRAME], payload[4 * KVS_PROTO_KEY_SIZE];
	const char *extra[] = { "--max-batch", "4", "--max-object", "64K",
				NULL };
	struct kvs_client *c;
	struct kvs_client_stat st;
	size_t len;

	daemon_prepare(&d, "malformed");
	daemon_start(&d, extra);
	memset(payload, 0, sizeof(payload));
	/* truncated frame */
	raw_frame(frame, KVS_OP_STAT, 0, 0, 3);
	bad_frame(&d, frame, 20, NULL, 0, -KVS_ETRUNC, true);
	/* bad magic */
	len = raw_frame(frame, KVS_OP_STAT, 0, 0, 3);
	frame[0] ^= 0x55;
	bad_frame(&d, frame, len, NULL, 0, -KVS_EPROTO, true);
	/* unknown version */
	len = raw_frame(frame, KVS_OP_STAT, 0, 0, 3);
	kvs_put16(frame + KVS_PROTO_OFF_VERSION, 2);
	bad_frame(&d, frame, len, NULL, 0, -KVS_EVERSION, true);
	/* unknown opcode */
	len = raw_frame(frame, 99, 0, 0, 3);
	bad_frame(&d, frame, len, NULL, 0, -KVS_EOPCODE, true);
	/* a frame over the largest (KVS_PROTO_MAX_FRAME), its body length
	 * consistent: refused before any of it is read as a request */
	{
		uint8_t *huge = calloc(1, 2 * KVS_PROTO_MAX_FRAME);

		assert_non_null(huge);
		len = raw_frame(
			huge, KVS_OP_STAT, 0,
			KVS_PROTO_MAX_FRAME + 64 - KVS_PROTO_HEADER_SIZE, 3);
		bad_frame(&d, huge, len, NULL, 0, -KVS_EPROTO, true);
		free(huge);
	}
	/* body length that does not match the frame */
	len = raw_frame(frame, KVS_OP_STAT, 0, 0, 3);
	kvs_put32(frame + KVS_PROTO_OFF_BODY_LEN, 16);
	bad_frame(&d, frame, len, NULL, 0, -KVS_EPROTO, true);
	/* malformed payload: keys of the wrong total size */
	len = raw_frame(frame, KVS_OP_GET, 2, 0, 3);
	bad_frame(&d, frame, len, payload, KVS_PROTO_KEY_SIZE + 3, -KVS_EPROTO,
		  true);
	/* reserved bytes of a key not zero */
	len = raw_frame(frame, KVS_OP_EXISTS, 1, 0, 3);
	payload[KVS_ID_SIZE + 5] = 1;
	bad_frame(&d, frame, len, payload, KVS_PROTO_KEY_SIZE, -KVS_EPROTO,
		  true);
	payload[KVS_ID_SIZE + 5] = 0;
	/* limits: a clear code, the connection stays */
	len = raw_frame(frame, KVS_OP_EXISTS, 5, 0, 3);
	bad_frame(&d, frame, len, payload, 0, -KVS_EBATCH, false);
	len = raw_frame(frame, KVS_OP_PUT, 1, KVS_PROTO_ITEM_SIZE, 3);
	kvs_proto_item_encode(frame + KVS_PROTO_HEADER_SIZE, 1u << 20);
	{
		uint8_t *big = calloc(1, 1u << 20);

		bad_frame(&d, frame, len, big, 1u << 20, -KVS_ETOOBIG, false);
		free(big);
	}
	/* a put of bytes that are no block: refused per item */
	len = raw_frame(frame, KVS_OP_PUT, 1, KVS_PROTO_ITEM_SIZE, 3);
	kvs_proto_item_encode(frame + KVS_PROTO_HEADER_SIZE, 4096);
	{
		uint8_t *junk = calloc(1, 4096);
		struct raw_client r;
		struct kvs_proto_frame f;

		raw_connect(&r, &d);
		assert_int_equal(raw_auth(&r, &d, "alice", NULL), 0);
		assert_int_equal(raw_exchange(&r, frame, len, junk, 4096, 5000),
				 0);
		assert_int_equal(
			kvs_proto_frame_decode(r.reply, r.reply_len, &f), 0);
		assert_int_equal(f.status, 0);
		assert_int_equal((int32_t)kvs_get32(f.body), -KVS_EMAGIC);
		raw_close(&r);
		free(junk);
	}
	/* and the daemon serves the next client */
	c = client_of(&d, "bob", 0);
	assert_int_equal(kvs_client_stat(c, &st), 0);
	kvs_client_close(c);
	assert_int_equal(daemon_stop(&d, SIGTERM, 10000), 0);
	daemon_cleanup(&d);
}

static void test_limits(void **state)
{
	struct daemon d;
	const char *extra[] = { "--max-inflight", "2", "--max-connections", "2",
				NULL };
	struct kvs_client *a, *b, *c = NULL;
	struct raw_client r;
	uint8_t frame[KVS_PROTO_MAX_FRAME];
	size_t len;
	ucp_request_param_t param = {
		.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
		.flags = UCP_AM_SEND_FLAG_REPLY,
	};
	uint64_t deadline;

	daemon_prepare(&d, "limits");
	daemon_start(&d, extra);
	/* in flight: 64 stats pipelined on one connection with a limit of
	 * 2: some refused with -KVS_EBUSY, every one answered */
	raw_connect(&r, &d);
	assert_int_equal(raw_auth(&r, &d, "alice", NULL), 0);
	r.replies = r.ok = r.busy = 0;
	len = raw_frame(frame, KVS_OP_STAT, 0, 0, 50);
	for (int i = 0; i < 64; i++) {
		void *req = ucp_am_send_nbx(r.ep, KVS_PROTO_AM_REQUEST, frame,
					    len, NULL, 0, &param);

		assert_false(UCS_PTR_IS_ERR(req));
		kvs_ucx_request_wait(r.ucx.worker, req);
	}
	deadline = ms_now() + 5000;
	while (r.replies < 64 && ms_now() < deadline)
		kvs_ucx_wait(&r.ucx, -1, 5);
	assert_int_equal(r.replies, 64);
	assert_true(r.busy > 0);
	assert_int_equal(r.ok + r.busy, 64);
	/* connections: the third is refused with its own code */
	a = client_of(&d, "alice", 0);
	assert_int_equal(client_try(&d, "bob", &c), -KVS_ECONNLIMIT);
	raw_close(&r);
	kvs_client_close(a);
	/* once they are gone, a new one is served */
	deadline = ms_now() + 5000;
	while (client_try(&d, "bob", &b) != 0) {
		assert_true(ms_now() < deadline);
		usleep(20000);
	}
	kvs_client_close(b);
	assert_int_equal(daemon_stop(&d, SIGTERM, 10000), 0);
	daemon_cleanup(&d);
}

static void test_tails(void **state)
{
	struct daemon d;
	struct kvs_client *prefill, *decode, *other;
	struct kvs_client_stat st;
	uint8_t rid[KVS_CLIENT_REQUEST_ID], rid2[KVS_CLIENT_REQUEST_ID];
	uint8_t *tail, *block;
	struct kvs_store_key key;
	size_t len, blen, got;
	uint8_t buf[64 << 10];
	char *m;

	daemon_prepare(&d, "tails");
	{
		const char *extra[] = { "--metrics", "127.0.0.1:0", NULL };

		daemon_start(&d, extra);
	}
	prefill = client_of(&d, "alice", 0);
	decode = client_of(&d, "carol", 0); /* same namespace */
	other = client_of(&d, "bob", 0);
	tail = make_tail(1, &len);
	memset(rid, 0x17, sizeof(rid));
	memset(rid2, 0x18, sizeof(rid2));
	assert_int_equal(kvs_client_tail_put(prefill, rid, tail, len, 60000),
			 0);
	/* another namespace does not see it */
	assert_int_equal(
		kvs_client_tail_take(other, rid, buf, sizeof(buf), &got),
		-KVS_ENOTFOUND);
	/* too small a buffer: -ENOSPC with the length needed (the tail was
	 * taken all the same) */
	assert_int_equal(kvs_client_tail_take(decode, rid, buf, 100, &got),
			 -ENOSPC);
	assert_int_equal(got, len);
	assert_int_equal(kvs_client_tail_put(prefill, rid, tail, len, 60000),
			 0);
	assert_int_equal(
		kvs_client_tail_take(decode, rid, buf, sizeof(buf), &got), 0);
	assert_int_equal(got, len);
	assert_memory_equal(buf, tail, len);
	/* take deletes */
	assert_int_equal(
		kvs_client_tail_take(decode, rid, buf, sizeof(buf), &got),
		-KVS_ENOTFOUND);
	/* a block is no tail */
	block = make_block(3, 0, 1, 128, &blen, &key);
	assert_int_equal(kvs_client_tail_put(prefill, rid, block, blen, 1000),
			 -KVS_EKIND);
	/* expiry: gone after its time to live, and counted */
	assert_int_equal(kvs_client_tail_put(prefill, rid2, tail, len, 50), 0);
	usleep(400000);
	assert_int_equal(
		kvs_client_tail_take(decode, rid2, buf, sizeof(buf), &got),
		-KVS_ENOTFOUND);
	assert_int_equal(kvs_client_stat(decode, &st), 0);
	assert_int_equal(st.tails, 0);
	assert_int_equal(st.tails_expired, 1);
	m = metrics_fetch(&d);
	assert_non_null(m);
	assert_non_null(strstr(m, "kvstash_tails_expired_total 1\n"));
	/* the accepted tail puts are no errors; the block offered as a
	 * tail is */
	assert_non_null(
		strstr(m, "kvstash_request_errors_total{op=\"tail_put\"} 1\n"));
	free(m);
	kvs_client_close(prefill);
	kvs_client_close(decode);
	kvs_client_close(other);
	free(tail);
	free(block);
	assert_int_equal(daemon_stop(&d, SIGTERM, 10000), 0);
	daemon_cleanup(&d);
}

static void test_timeouts(void **state)
{
	struct daemon d;
	struct kvs_client *c, *late = NULL;
	struct kvs_store_key key;
	struct kvs_client_stat st;
	uint8_t *obj;
	size_t len, got, cap;
	void *buf;
	int res, err;
	uint64_t t0;

	daemon_prepare(&d, "timeouts");
	daemon_start(&d, NULL);
	obj = make_block(9, 0, 1, 128, &len, &key);
	cap = len;
	buf = malloc(cap);
	c = client_of(&d, "alice", 500);
	assert_int_equal(kvs_client_put(c, (const uint8_t *const *)&obj, &len,
					1, KVS_DURABILITY_WRITTEN, &res),
			 0);
	/* a stopped server: an error within the timeout, no hang */
	kill(d.pid, SIGSTOP);
	t0 = ms_now();
	err = kvs_client_get(c, &key, 1, &buf, &cap, &got, &res);
	assert_int_equal(err, -KVS_ETIMEDOUT);
	assert_true(ms_now() - t0 < 3000);
	/* the connection is given up: later calls wait for a new one
	 * within their timeout, and fail */
	assert_int_equal(kvs_client_stat(c, &st), -KVS_ECONN);
	kvs_client_close(c);
	t0 = ms_now();
	{
		struct kvs_client_opts o;

		kvs_client_opts_default(&o);
		o.address = d.addr;
		o.key_file = key_path(&d, "alice");
		o.connect_timeout_ms = 500;
		assert_int_not_equal(kvs_client_connect(&o, &late), 0);
	}
	assert_true(ms_now() - t0 < 3000);
	kill(d.pid, SIGCONT);
	/* the daemon goes on once continued (a call waits for a daemon
	 * that comes back within its timeout: a short one here) */
	c = client_of(&d, "alice", 2000);
	assert_int_equal(kvs_client_get(c, &key, 1, &buf, &cap, &got, &res), 0);
	assert_int_equal(res, 0);
	/* a dead server: an error in bounded time */
	assert_int_equal(daemon_stop(&d, SIGKILL, 5000), 128 + SIGKILL);
	t0 = ms_now();
	err = kvs_client_get(c, &key, 1, &buf, &cap, &got, &res);
	assert_true(err == -KVS_ECONN || err == -KVS_ETIMEDOUT);
	assert_true(ms_now() - t0 < 6000);
	kvs_client_close(c);
	/* nobody listening: connect fails in bounded time */
	t0 = ms_now();
	assert_int_not_equal(client_try(&d, "alice", &late), 0);
	assert_true(ms_now() - t0 < 6000);
	free(obj);
	free(buf);
	daemon_cleanup(&d);
}

static void test_stat_metrics(void **state)
{
	struct daemon d;
	struct kvs_client *a, *b;
	struct kvs_client_stat st;
	struct kvs_store_key key;
	uint8_t *obj;
	size_t len, got, cap;
	void *buf;
	int res;
	char *m;

	daemon_prepare(&d, "stat");
	{
		const char *extra[] = { "--metrics", "127.0.0.1:0", NULL };

		daemon_start(&d, extra);
	}
	obj = make_block(21, 0, 2, 128, &len, &key);
	cap = len;
	buf = malloc(cap);
	a = client_of(&d, "alice", 0);
	assert_int_equal(kvs_client_put(a, (const uint8_t *const *)&obj, &len,
					1, KVS_DURABILITY_WRITTEN, &res),
			 0);
	assert_int_equal(kvs_client_get(a, &key, 1, &buf, &cap, &got, &res), 0);
	kvs_client_close(a);
	/* another client sees the daemon's counters, not its own */
	b = client_of(&d, "bob", 0);
	assert_int_equal(kvs_client_get(b, &key, 1, &buf, &cap, &got, &res), 0);
	assert_int_equal(res, -KVS_ENOTFOUND);
	assert_int_equal(kvs_client_stat(b, &st), 0);
	assert_int_equal(st.store.hits, 1);
	assert_int_equal(st.store.misses, 1);
	assert_int_equal(st.store.dram.blocks, 1);
	assert_int_equal(st.store.dram.bytes, len);
	assert_true(st.connections >= 1);
	m = metrics_fetch(&d);
	assert_non_null(m);
	assert_non_null(strstr(m, "kvstash_requests_total{op=\"get\"} 2\n"));
	assert_non_null(strstr(m, "kvstash_requests_total{op=\"put\"} 1\n"));
	assert_non_null(strstr(m, "kvstash_hit_ratio 0.5\n"));
	assert_non_null(strstr(m, "kvstash_tier_blocks{tier=\"dram\"} 1\n"));
	assert_non_null(strstr(m, "kvstash_request_duration_seconds_count{"
				  "op=\"get\"} 2\n"));
	assert_non_null(strstr(m, "kvstash_connections 1\n"));
	free(m);
	kvs_client_close(b);
	free(obj);
	free(buf);
	assert_int_equal(daemon_stop(&d, SIGTERM, 10000), 0);
	daemon_cleanup(&d);
}

/* Puts large enough for rendezvous land in store slots received with the
 * arena's UCX memory handle (the daemon maps its arena): none goes
 * without it, and what was put reads back. */
static void test_arena_memh(void **state)
{
	enum { NB = 4 };
	struct daemon d;
	struct kvs_client *c;
	struct kvs_store_key keys[NB];
	uint8_t *objs[NB];
	size_t lens[NB], caps[NB], got[NB];
	void *bufs[NB];
	int res[NB];
	unsigned long long with = 0, without = 0;
	const char *p;
	char *m;

	daemon_prepare(&d, "memh");
	{
		const char *extra[] = { "--metrics", "127.0.0.1:0", NULL };

		daemon_start(&d, extra);
	}
	for (int i = 0; i < NB; i++) {
		objs[i] = make_block(40 + (uint64_t)i, (uint32_t)i, 8, 128,
				     &lens[i], &keys[i]);
		caps[i] = lens[i];
		bufs[i] = malloc(caps[i]);
		assert_non_null(bufs[i]);
	}
	c = client_of(&d, "alice", 0);
	/* one object (a contiguous receive), then a batch (an iov) */
	assert_int_equal(kvs_client_put(c, (const uint8_t *const *)objs, lens,
					1, KVS_DURABILITY_WRITTEN, res),
			 0);
	assert_int_equal(kvs_client_put(c, (const uint8_t *const *)objs + 1,
					lens + 1, NB - 1,
					KVS_DURABILITY_WRITTEN, res),
			 0);
	assert_int_equal(kvs_client_get(c, keys, NB, bufs, caps, got, res), 0);
	for (int i = 0; i < NB; i++) {
		assert_int_equal(res[i], 0);
		assert_int_equal(got[i], lens[i]);
		assert_memory_equal(bufs[i], objs[i], lens[i]);
	}
	m = metrics_fetch(&d);
	assert_non_null(m);
	p = strstr(m, "kvstash_rndv_receives_total{memh=\"arena\"} ");
	assert_non_null(p);
	with = strtoull(strchr(p, '}') + 2, NULL, 10);
	p = strstr(m, "kvstash_rndv_receives_total{memh=\"none\"} ");
	assert_non_null(p);
	without = strtoull(strchr(p, '}') + 2, NULL, 10);
	free(m);
	assert_int_equal(without, 0);
	assert_true(with >= 1);
	kvs_client_close(c);
	for (int i = 0; i < NB; i++) {
		free(objs[i]);
		free(bufs[i]);
	}
	assert_int_equal(daemon_stop(&d, SIGTERM, 10000), 0);
	daemon_cleanup(&d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_round_trips, daemons_reap),
		cmocka_unit_test_teardown(test_async, daemons_reap),
		cmocka_unit_test_teardown(test_shared_memory, daemons_reap),
		cmocka_unit_test_teardown(test_auth, daemons_reap),
		cmocka_unit_test_teardown(test_namespaces, daemons_reap),
		cmocka_unit_test_teardown(test_malformed, daemons_reap),
		cmocka_unit_test_teardown(test_limits, daemons_reap),
		cmocka_unit_test_teardown(test_tails, daemons_reap),
		cmocka_unit_test_teardown(test_timeouts, daemons_reap),
		cmocka_unit_test_teardown(test_stat_metrics, daemons_reap),
		cmocka_unit_test_teardown(test_arena_memh, daemons_reap),
	};

	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
