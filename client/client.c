/*
 * client.c - libkvstash's public API (include/kvstash/client.h): the
 * progress thread, the submission queue, handles and the synchronous
 * forms, and the connect sequence (hello, challenge, proof).
 *
 * A call builds its request (frame and payload) in the caller's thread,
 * queues it and wakes the progress thread, which sends it and drives UCX
 * until the reply lands.  The blocks of a get are verified by whoever
 * consumes the completion: the waiting thread (so the checks of several
 * threads run in parallel) or, for a callback, the progress thread.
 */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "client_internal.h"

#include "common/bytes.h"
#include "kvstash/error.h"
#include "kvstash/log.h"
#include "transport/keyfile.h"

void kvs_client_opts_default(struct kvs_client_opts *opts)
{
	memset(opts, 0, sizeof(*opts));
	opts->connect_timeout_ms = 5000;
	opts->timeout_ms = 10000;
}

/* ---- verification and completion ------------------------------------- */

/*
 * The client's own checks of a received object.  A block arrives as the
 * server stores it, under its namespaced id: its header is checked as
 * received (checksum included), the id the client asked for is written
 * back with the header checksum recomputed (docs/PROTOCOL.md, section 5),
 * and then the whole object is verified.
 */
static int object_check(uint8_t *obj, size_t len,
			const struct kvs_store_key *key, unsigned kind)
{
	struct kvs_header h;

	if (kvs_header_decode(obj, len, 0, &h) || h.kind != kind)
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

static void drive_until_done(struct kvs_client *cl, struct kvs_client_req *req);

int kvs_client_wait(struct kvs_client_req *req)
{
	struct kvs_client *cl = req->cl;
	int status;

	drive_until_done(cl, req);
	req_verify(req);
	status = req->status;
	req_free(req);
	return status;
}

/* ---- the progress thread --------------------------------------------- */

/* The on_done of requests finished during the last UCX progress. */
static bool run_deferred(struct kvs_client *cl)
{
	bool ran = false;

	while (cl->deferred) {
		struct kvs_client_req *req = cl->deferred;

		cl->deferred = req->next;
		if (!cl->deferred)
			cl->deferred_tail = &cl->deferred;
		req->next = NULL;
		req->on_done(req);
		ran = true;
	}
	return ran;
}

static void drain_queue(struct kvs_client *cl)
{
	struct kvs_client_req *q, *next;

	pthread_mutex_lock(&cl->lock);
	q = cl->queue;
	cl->queue = NULL;
	cl->queue_tail = &cl->queue;
	pthread_mutex_unlock(&cl->lock);
	if (cl->route) {
		for (; q; q = next) {
			next = q->next;
			q->next = NULL;
			route_start(cl->route, q);
		}
		return;
	}
	/* those over the server's in-flight limit wait their turn, in order */
	if (q) {
		struct kvs_client_req **t = &cl->waiting;

		while (*t)
			t = &(*t)->next;
		*t = q;
	}
	while ((q = cl->waiting) &&
	       (cl->conn.broken ||
		cl->conn.inflight < cl->conn.limits.max_inflight)) {
		next = q->next;
		cl->waiting = next;
		q->next = NULL;
		conn_send(&cl->conn, q);
	}
}

/* One turn of progress; client->progress held.  True if anything moved. */
static bool progress_turn(struct kvs_client *cl)
{
	unsigned n = 0, k;
	uint64_t now;

	drain_queue(cl);
	while ((k = ucp_worker_progress(cl->ucx.worker)))
		n += k;
	now = kvs_now_ns();
	if (cl->route) {
		bool check = now - cl->last_check > 1000000ull;

		if (check)
			cl->last_check = now;
		n += run_deferred(cl);
		n += route_progress(cl->route, now, check);
		n += run_deferred(cl);
		return n > 0;
	}
	conn_progress_close(&cl->conn);
	if (now - cl->last_check > 1000000ull) {
		conn_check_deadlines(&cl->conn, now);
		cl->last_check = now;
	}
	return n > 0;
}

/* Whether requests are in flight (busy-poll) and whether everything is
 * over once the client stops; client->progress held. */
static bool busy_now(struct kvs_client *cl)
{
	if (cl->route)
		return route_busy(cl->route) || cl->deferred;
	return cl->conn.inflight || cl->conn.closing;
}

static bool stop_turn(struct kvs_client *cl, uint64_t close_since)
{
	/* a close the peer never answers: the worker's destruction cleans
	 * it up */
	bool late = kvs_now_ns() - close_since >
		    (uint64_t)cl->opts.connect_timeout_ms * 1000000ull;

	if (cl->route)
		return route_shutdown(cl->route, late);
	if (!cl->conn.broken)
		conn_close(&cl->conn);
	if (cl->waiting == NULL && conn_idle(&cl->conn))
		return true;
	return late && conn_inflight_only_close(&cl->conn);
}

static void *progress_main(void *arg)
{
	struct kvs_client *cl = arg;
	uint64_t close_since = 0, v;

	for (;;) {
		struct pollfd fds[2] = {
			{ .fd = cl->ucx.efd, .events = POLLIN },
			{ .fd = cl->wake_fd, .events = POLLIN },
		};
		bool stop, busy, armed = false, done = false;

		pthread_mutex_lock(&cl->lock);
		stop = cl->stopping;
		pthread_mutex_unlock(&cl->lock);
		pthread_mutex_lock(&cl->progress);
		progress_turn(cl);
		if (stop && !close_since)
			close_since = kvs_now_ns();
		if (stop)
			done = stop_turn(cl, close_since);
		busy = busy_now(cl);
		if (!busy && !done)
			armed = ucp_worker_arm(cl->ucx.worker) == UCS_OK;
		pthread_mutex_unlock(&cl->progress);
		if (done)
			break;
		if (busy) {
			/* requests in flight: busy-poll, yielding the core --
			 * unless callers wait for them and drive UCX themselves
			 * (deadlines still checked here, every millisecond) */
			if (__atomic_load_n(&cl->waiters, __ATOMIC_RELAXED))
				poll(&fds[1], 1, 1);
			else
				sched_yield();
		} else if (armed) {
			poll(fds, 2, 100);
		}
		if (read(cl->wake_fd, &v, sizeof(v)) < 0)
			v = 0;
	}
	return NULL;
}

/* Drives UCX (or lets another thread do it) until @req is done.  The
 * waiting thread drives for as long as that moves things (and 100 us
 * past), then sleeps and leaves UCX to the progress thread: many waiting
 * threads spinning at once would starve everything else of cores. */
static void drive_until_done(struct kvs_client *cl, struct kvs_client_req *req)
{
	uint64_t idle_since = kvs_now_ns();
	bool driving = true;

	__atomic_fetch_add(&cl->waiters, 1, __ATOMIC_RELAXED);
	pthread_mutex_lock(&cl->lock);
	while (!req->done) {
		struct timespec until;

		pthread_mutex_unlock(&cl->lock);
		if (driving && pthread_mutex_trylock(&cl->progress) == 0) {
			bool moved = progress_turn(cl);

			pthread_mutex_unlock(&cl->progress);
			if (moved)
				idle_since = kvs_now_ns();
			else if (kvs_now_ns() - idle_since > 100000ull) {
				/* the progress thread takes over */
				driving = false;
				__atomic_fetch_sub(&cl->waiters, 1,
						   __ATOMIC_RELAXED);
				(void)!write(cl->wake_fd, &(uint64_t){ 1 },
					     sizeof(uint64_t));
			} else {
				sched_yield();
			}
			pthread_mutex_lock(&cl->lock);
			continue;
		}
		if (driving) {
			/* the progress thread holds the worker for one turn;
			 * it then sees a waiter and leaves UCX to us (sleeping
			 * here instead would leave both asleep for a tick) */
			sched_yield();
			pthread_mutex_lock(&cl->lock);
			continue;
		}
		/* another thread drives: it wakes us when ours completes */
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_nsec += 1000000;
		if (until.tv_nsec >= 1000000000) {
			until.tv_sec++;
			until.tv_nsec -= 1000000000;
		}
		pthread_mutex_lock(&cl->lock);
		if (!req->done)
			pthread_cond_timedwait(&cl->cond, &cl->lock, &until);
	}
	pthread_mutex_unlock(&cl->lock);
	if (driving)
		__atomic_fetch_sub(&cl->waiters, 1, __ATOMIC_RELAXED);
}

static void encode_header(struct kvs_client_req *req)
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
	encode_header(req);
}

/* Queues @req (frame and payload built) and wakes the thread. */
int client_submit(struct kvs_client *c, struct kvs_client_req *req,
		  uint32_t timeout_ms, kvs_client_cb cb, void *arg,
		  struct kvs_client_req **req_out)
{
	uint64_t one = 1;

	req->cl = c;
	req->cb = cb;
	req->arg = arg;
	req->deadline_ns = kvs_now_ns() + (uint64_t)timeout_ms * 1000000ull;
	pthread_mutex_lock(&c->lock);
	if (c->stopping) {
		pthread_mutex_unlock(&c->lock);
		req_free(req);
		return -KVS_ECONN;
	}
	req->id = ++c->next_id;
	encode_header(req);
	req->next = NULL;
	*c->queue_tail = req;
	c->queue_tail = &req->next;
	if (!req->op) /* a cluster call counts its parts */
		c->counters.requests++;
	if (req_out)
		*req_out = req;
	pthread_mutex_unlock(&c->lock);
	if (write(c->wake_fd, &one, sizeof(one)) < 0)
		return 0; /* the thread wakes within 100 ms anyway */
	return 0;
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

static int check_call(struct kvs_client *c, size_t n, kvs_client_cb cb,
		      struct kvs_client_req **req_out)
{
	if (!c || (cb == NULL) == (req_out == NULL))
		return -KVS_EPARAM;
	if (n == 0)
		return -KVS_EPARAM;
	if (n > c->conn.limits.max_batch)
		return -KVS_EBATCH;
	return 0;
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

/* ---- requests -------------------------------------------------------- */

int kvs_client_lookup_async(struct kvs_client *c,
			    const uint8_t (*span_ids)[KVS_ID_SIZE],
			    size_t n_spans, const uint32_t *layers,
			    size_t n_layers, size_t *prefix, kvs_client_cb cb,
			    void *arg, struct kvs_client_req **req_out)
{
	struct kvs_client_req *req;

	if (!c || (cb == NULL) == (req_out == NULL) || n_spans == 0 ||
	    n_spans > KVS_PROTO_CHAIN_MAX || n_layers == 0 ||
	    n_layers > KVS_PROTO_LAYERS_MAX)
		return -KVS_EPARAM;
	if (c->route) {
		struct route_call rc = { .kind = ROUTE_LOOKUP,
					 .spans = span_ids,
					 .n_spans = n_spans,
					 .layers = layers,
					 .n_layers = n_layers,
					 .prefix = prefix };

		return route_submit(c, &rc, cb, arg, req_out);
	}
	req = req_new(KVS_OP_LOOKUP, (uint32_t)n_spans, 8, 0);
	if (!req)
		return -ENOMEM;
	kvs_put32(req->frame + KVS_PROTO_HEADER_SIZE, (uint32_t)n_layers);
	req->payload_len = n_layers * 4 + n_spans * KVS_ID_SIZE;
	req->payload = malloc(req->payload_len);
	if (!req->payload) {
		req_free(req);
		return -ENOMEM;
	}
	for (size_t i = 0; i < n_layers; i++)
		kvs_put32(req->payload + i * 4, layers[i]);
	memcpy(req->payload + n_layers * 4, span_ids, n_spans * KVS_ID_SIZE);
	req->prefix = prefix;
	return client_submit(c, req, c->opts.timeout_ms, cb, arg, req_out);
}

/* EXISTS, GET and DELETE: keys in the payload. */
static int keyed(struct kvs_client *c, uint16_t op,
		 const struct kvs_store_key *keys, size_t n,
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

int kvs_client_exists_async(struct kvs_client *c,
			    const struct kvs_store_key *keys, size_t n,
			    bool *present, kvs_client_cb cb, void *arg,
			    struct kvs_client_req **req_out)
{
	struct kvs_client_req *req;
	int err = check_call(c, n, cb, req_out);

	if (!err && c->route) {
		struct route_call rc = { .kind = ROUTE_EXISTS,
					 .keys = keys,
					 .n = n,
					 .present = present };

		return route_submit(c, &rc, cb, arg, req_out);
	}
	if (!err)
		err = keyed(c, KVS_OP_EXISTS, keys, n, &req);
	if (err)
		return err;
	req->present = present;
	return client_submit(c, req, c->opts.timeout_ms, cb, arg, req_out);
}

int kvs_client_get_async(struct kvs_client *c, const struct kvs_store_key *keys,
			 size_t n, void *const *bufs, const size_t *caps,
			 size_t *lens, int *results, kvs_client_cb cb,
			 void *arg, struct kvs_client_req **req_out)
{
	struct kvs_client_req *req;
	int err = check_call(c, n, cb, req_out);

	if (!err && c->route) {
		struct route_call rc = { .kind = ROUTE_GET,
					 .keys = keys,
					 .n = n,
					 .bufs = bufs,
					 .caps = caps,
					 .lens = lens,
					 .results = results };

		return route_submit(c, &rc, cb, arg, req_out);
	}
	if (!err)
		err = keyed(c, KVS_OP_GET, keys, n, &req);
	if (err)
		return err;
	req->bufs = bufs;
	req->caps = caps;
	req->lens = lens;
	req->results = results;
	return client_submit(c, req, c->opts.timeout_ms, cb, arg, req_out);
}

int kvs_client_delete_async(struct kvs_client *c,
			    const struct kvs_store_key *keys, size_t n,
			    int *results, kvs_client_cb cb, void *arg,
			    struct kvs_client_req **req_out)
{
	struct kvs_client_req *req;
	int err = check_call(c, n, cb, req_out);

	if (!err && c->route) {
		struct route_call rc = { .kind = ROUTE_DELETE,
					 .keys = keys,
					 .n = n,
					 .results = results };

		return route_submit(c, &rc, cb, arg, req_out);
	}
	if (!err)
		err = keyed(c, KVS_OP_DELETE, keys, n, &req);
	if (err)
		return err;
	req->results = results;
	return client_submit(c, req, c->opts.timeout_ms, cb, arg, req_out);
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

/* A put of @replicas copies (0: a cluster client's own count). */
static int put_copies(struct kvs_client *c, const uint8_t *const *objs,
		      const size_t *lens, size_t n,
		      enum kvs_durability durability, unsigned replicas,
		      int *results, kvs_client_cb cb, void *arg,
		      struct kvs_client_req **req_out)
{
	struct kvs_client_req *req;
	uint64_t total = 0;
	int err = check_call(c, n, cb, req_out);

	if (err)
		return err;
	if (replicas > KVS_CLIENT_REPLICAS_MAX)
		return -KVS_EPARAM;
	for (size_t i = 0; i < n; i++) {
		if (lens[i] < KVS_HEADER_SIZE || lens[i] > UINT32_MAX)
			return -KVS_EPARAM;
		if (lens[i] > c->conn.limits.max_object)
			return -KVS_ETOOBIG;
		total += lens[i];
	}
	if (c->route) {
		struct route_call rc = { .kind = ROUTE_PUT,
					 .objs = objs,
					 .obj_lens = lens,
					 .n = n,
					 .durability = durability,
					 .replicas = replicas,
					 .results = results };

		return route_submit(c, &rc, cb, arg, req_out);
	}
	if (total > c->conn.limits.max_payload)
		return -KVS_ETOOBIG;
	err = req_put_new(objs, lens, n, durability, &req);
	if (err)
		return err;
	req->results = results;
	return client_submit(c, req, c->opts.timeout_ms, cb, arg, req_out);
}

int kvs_client_put_replicas_async(struct kvs_client *c,
				  const uint8_t *const *objs,
				  const size_t *lens, size_t n,
				  enum kvs_durability durability,
				  unsigned replicas, int *results,
				  kvs_client_cb cb, void *arg,
				  struct kvs_client_req **req_out)
{
	if (replicas == 0)
		return -KVS_EPARAM;
	return put_copies(c, objs, lens, n, durability, replicas, results, cb,
			  arg, req_out);
}

int kvs_client_put_async(struct kvs_client *c, const uint8_t *const *objs,
			 const size_t *lens, size_t n,
			 enum kvs_durability durability, int *results,
			 kvs_client_cb cb, void *arg,
			 struct kvs_client_req **req_out)
{
	return put_copies(c, objs, lens, n, durability, 0, results, cb, arg,
			  req_out);
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

int kvs_client_tail_put_async(struct kvs_client *c,
			      const uint8_t request_id[KVS_CLIENT_REQUEST_ID],
			      const uint8_t *tail, size_t len, uint32_t ttl_ms,
			      kvs_client_cb cb, void *arg,
			      struct kvs_client_req **req_out)
{
	struct kvs_client_req *req;
	int err = check_call(c, 1, cb, req_out);

	if (err)
		return err;
	if (len < KVS_HEADER_SIZE || len > c->conn.limits.max_object ||
	    ttl_ms == 0)
		return len > c->conn.limits.max_object ? -KVS_ETOOBIG
						       : -KVS_EPARAM;
	if (c->route) {
		struct route_call rc = { .kind = ROUTE_TAIL_PUT,
					 .n = 1,
					 .request_id = request_id,
					 .tail = tail,
					 .tail_len = len,
					 .ttl_ms = ttl_ms };

		return route_submit(c, &rc, cb, arg, req_out);
	}
	err = req_tail_put_new(request_id, tail, len, ttl_ms, &req);
	if (err)
		return err;
	return client_submit(c, req, c->opts.timeout_ms, cb, arg, req_out);
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

int kvs_client_tail_take_async(struct kvs_client *c,
			       const uint8_t request_id[KVS_CLIENT_REQUEST_ID],
			       void *buf, size_t cap, size_t *len,
			       kvs_client_cb cb, void *arg,
			       struct kvs_client_req **req_out)
{
	struct kvs_client_req *req;
	int err = check_call(c, 1, cb, req_out);

	if (err)
		return err;
	if (c->route) {
		struct route_call rc = { .kind = ROUTE_TAIL_TAKE,
					 .n = 1,
					 .request_id = request_id,
					 .tail_buf = buf,
					 .tail_cap = cap,
					 .tail_out = len };

		return route_submit(c, &rc, cb, arg, req_out);
	}
	req = req_tail_take_new(request_id);
	if (!req)
		return -ENOMEM;
	req->tail_buf = buf;
	req->tail_cap = cap;
	req->tail_len = len;
	return client_submit(c, req, c->opts.timeout_ms, cb, arg, req_out);
}

/* ---- synchronous forms ----------------------------------------------- */

#define SYNC(call)                                                             \
	do {                                                                   \
		struct kvs_client_req *req_;                                   \
		int err_ = (call);                                             \
		return err_ ? err_ : kvs_client_wait(req_);                    \
	} while (0)

int kvs_client_lookup(struct kvs_client *c,
		      const uint8_t (*span_ids)[KVS_ID_SIZE], size_t n_spans,
		      const uint32_t *layers, size_t n_layers, size_t *prefix)
{
	SYNC(kvs_client_lookup_async(c, span_ids, n_spans, layers, n_layers,
				     prefix, NULL, NULL, &req_));
}

int kvs_client_exists(struct kvs_client *c, const struct kvs_store_key *keys,
		      size_t n, bool *present)
{
	SYNC(kvs_client_exists_async(c, keys, n, present, NULL, NULL, &req_));
}

int kvs_client_get(struct kvs_client *c, const struct kvs_store_key *keys,
		   size_t n, void *const *bufs, const size_t *caps,
		   size_t *lens, int *results)
{
	SYNC(kvs_client_get_async(c, keys, n, bufs, caps, lens, results, NULL,
				  NULL, &req_));
}

int kvs_client_put(struct kvs_client *c, const uint8_t *const *objs,
		   const size_t *lens, size_t n, enum kvs_durability durability,
		   int *results)
{
	SYNC(kvs_client_put_async(c, objs, lens, n, durability, results, NULL,
				  NULL, &req_));
}

int kvs_client_put_replicas(struct kvs_client *c, const uint8_t *const *objs,
			    const size_t *lens, size_t n,
			    enum kvs_durability durability, unsigned replicas,
			    int *results)
{
	SYNC(kvs_client_put_replicas_async(c, objs, lens, n, durability,
					   replicas, results, NULL, NULL,
					   &req_));
}

int kvs_client_delete(struct kvs_client *c, const struct kvs_store_key *keys,
		      size_t n, int *results)
{
	SYNC(kvs_client_delete_async(c, keys, n, results, NULL, NULL, &req_));
}

int kvs_client_tail_put(struct kvs_client *c,
			const uint8_t request_id[KVS_CLIENT_REQUEST_ID],
			const uint8_t *tail, size_t len, uint32_t ttl_ms)
{
	SYNC(kvs_client_tail_put_async(c, request_id, tail, len, ttl_ms, NULL,
				       NULL, &req_));
}

int kvs_client_tail_take(struct kvs_client *c,
			 const uint8_t request_id[KVS_CLIENT_REQUEST_ID],
			 void *buf, size_t cap, size_t *len)
{
	SYNC(kvs_client_tail_take_async(c, request_id, buf, cap, len, NULL,
					NULL, &req_));
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

/* A one-server client's STAT. */
static int stat_one(struct kvs_client *c, struct kvs_client_stat *out)
{
	struct kvs_client_req *req;
	uint64_t v[KVS_PROTO_STAT_MAX] = { 0 };
	int err;

	req = req_new(KVS_OP_STAT, 0, 0, 0);
	if (!req)
		return -ENOMEM;
	err = client_submit(c, req, c->opts.timeout_ms, NULL, NULL, &req);
	if (err)
		return err;
	drive_until_done(c, req);
	err = req->status;
	/* the counters after the base are read where the server sends them
	 * (zero otherwise) */
	if (!err && req->stat_n < KVS_STAT_BASE_N)
		err = -KVS_EPROTO;
	if (!err)
		memcpy(v, req->stat, sizeof(v));
	req_free(req);
	if (!err)
		client_stat_decode(v, out);
	return err;
}

/* Adds one node's counters to a cluster's totals. */
static void stat_add(struct kvs_client_stat *sum,
		     const struct kvs_client_stat *s)
{
	struct kvs_store_stats *t = &sum->store;
	const struct kvs_store_stats *n = &s->store;

	t->dram.blocks += n->dram.blocks;
	t->dram.bytes += n->dram.bytes;
	t->dram.capacity += n->dram.capacity;
	t->nvme.blocks += n->nvme.blocks;
	t->nvme.bytes += n->nvme.bytes;
	t->nvme.capacity += n->nvme.capacity;
	t->hits += n->hits;
	t->misses += n->misses;
	t->dram_hits += n->dram_hits;
	t->nvme_hits += n->nvme_hits;
	t->promotions += n->promotions;
	t->carried += n->carried;
	t->lost_segments += n->lost_segments;
	t->compactions += n->compactions;
	t->evictions += n->evictions;
	t->spills += n->spills;
	t->corrupt_dropped += n->corrupt_dropped;
	t->torn_dropped += n->torn_dropped;
	t->segments += n->segments;
	t->nvme_file_bytes += n->nvme_file_bytes;
	t->direct_io |= n->direct_io;
	t->hugepages |= n->hugepages;
	t->registered |= n->registered;
	sum->tails += s->tails;
	sum->tail_bytes += s->tail_bytes;
	sum->tails_expired += s->tails_expired;
	sum->connections += s->connections;
	if (s->uptime_s > sum->uptime_s)
		sum->uptime_s = s->uptime_s;
}

int kvs_client_stat(struct kvs_client *c, struct kvs_client_stat *out)
{
	struct kvs_client_node *nodes;
	size_t n;
	int err, last = -KVS_ECONN;
	bool any = false;

	if (!c)
		return -KVS_EPARAM;
	if (!c->route)
		return stat_one(c, out);
	err = kvs_client_nodes(c, true, &nodes, &n);
	if (err)
		return err;
	memset(out, 0, sizeof(*out));
	for (size_t i = 0; i < n; i++) {
		if (nodes[i].status) {
			last = nodes[i].status;
			continue;
		}
		stat_add(out, &nodes[i].stat);
		any = true;
	}
	free(nodes);
	return any ? 0 : last;
}

int kvs_client_nodes(struct kvs_client *c, bool ask,
		     struct kvs_client_node **out, size_t *n)
{
	struct kvs_client_node *nodes;
	struct kvs_client_req *req;
	size_t count;
	int err;

	if (!c || !out || !n)
		return -KVS_EPARAM;
	if (!c->route) {
		nodes = calloc(1, sizeof(*nodes));
		if (!nodes)
			return -ENOMEM;
		snprintf(nodes->id, sizeof(nodes->id), "%s", c->address);
		snprintf(nodes->address, sizeof(nodes->address), "%s",
			 c->address);
		nodes->status = ask ? stat_one(c, &nodes->stat) : 0;
		nodes->capacity = nodes->stat.store.dram.capacity +
				  nodes->stat.store.nvme.capacity;
		*out = nodes;
		*n = 1;
		return 0;
	}
	err = route_members(c->route, &nodes, &count);
	if (err)
		return err;
	for (size_t i = 0; !ask && i < count; i++)
		nodes[i].status = 0;
	if (ask && count) {
		struct route_call rc = { .kind = ROUTE_STAT,
					 .nodes = nodes,
					 .n_nodes = count,
					 .n = count };

		err = route_submit(c, &rc, NULL, NULL, &req);
		if (!err)
			err = kvs_client_wait(req);
	}
	if (err) {
		free(nodes);
		return err;
	}
	*out = nodes;
	*n = count;
	return 0;
}

/* ---- connect / close ------------------------------------------------- */

/* Sends hello and the proof; 0 or the refusal. */
static int authenticate(struct kvs_client *c)
{
	struct kvs_server_tenant *t = &c->conn.tenant;
	size_t tlen = strlen(t->name);
	struct kvs_client_req *req = req_new(KVS_OP_HELLO, 0, 4 + tlen, 0);
	uint8_t nonce[KVS_PROTO_NONCE_SIZE], *b;
	int err;

	if (!req)
		return -ENOMEM;
	kvs_put16(req->frame + KVS_PROTO_HEADER_SIZE, (uint16_t)tlen);
	memcpy(req->frame + KVS_PROTO_HEADER_SIZE + 4, t->name, tlen);
	err = client_submit(c, req, c->opts.connect_timeout_ms, NULL, NULL,
			    &req);
	if (err)
		return err;
	drive_until_done(c, req);
	err = req->status;
	b = req->hello;
	memcpy(nonce, b, sizeof(nonce));
	c->conn.limits.max_batch = kvs_get32(b + 32);
	c->conn.limits.max_object = kvs_get32(b + 36);
	c->conn.limits.max_payload = kvs_get32(b + 40);
	c->conn.limits.max_inflight = kvs_get32(b + 44);
	req_free(req);
	if (err)
		return err;
	if (!c->conn.limits.max_inflight || !c->conn.limits.max_batch)
		return -KVS_EPROTO;
	req = req_new(KVS_OP_AUTH, 0, KVS_PROTO_MAC_SIZE, 0);
	if (!req)
		return -ENOMEM;
	err = kvs_proto_auth_mac(t->key, t->key_len, nonce, t->name,
				 req->frame + KVS_PROTO_HEADER_SIZE);
	if (err) {
		req_free(req);
		return err;
	}
	err = client_submit(c, req, c->opts.connect_timeout_ms, NULL, NULL,
			    &req);
	return err ? err : kvs_client_wait(req);
}

int client_create(const struct kvs_client_opts *opts,
		  const struct kvs_server_tenant *tenant, bool cluster,
		  struct kvs_client **out)
{
	struct kvs_client *c;
	ucp_am_handler_param_t am = {
		.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID |
			      UCP_AM_HANDLER_PARAM_FIELD_CB |
			      UCP_AM_HANDLER_PARAM_FIELD_ARG,
		.id = KVS_PROTO_AM_REPLY,
		.cb = cluster ? route_on_reply : conn_on_reply,
	};
	int err;

	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->opts = *opts;
	if (!c->opts.timeout_ms)
		c->opts.timeout_ms = 10000;
	if (!c->opts.connect_timeout_ms)
		c->opts.connect_timeout_ms = 5000;
	c->wake_fd = -1;
	c->queue_tail = &c->queue;
	c->deferred_tail = &c->deferred;
	/* until the hello says otherwise: the hello and the proof */
	c->conn.limits.max_inflight = 2;
	c->conn.limits.max_batch = 1;
	c->conn.address = "";
	pthread_mutex_init(&c->lock, NULL);
	pthread_mutex_init(&c->progress, NULL);
	pthread_cond_init(&c->cond, NULL);
	c->address = strdup(opts->address ? opts->address : "");
	if (!c->address) {
		err = -ENOMEM;
		goto fail;
	}
	c->conn.address = c->address;
	if (tenant)
		c->conn.tenant = *tenant;
	err = tenant ? 0
		     : kvs_keyfile_read_client(opts->key_file, &c->conn.tenant);
	if (err) {
		kvs_log(KVS_LOG_ERR, "kvstash client: %s: %s", opts->key_file,
			kvs_strerror(err));
		goto fail;
	}
	c->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (c->wake_fd < 0) {
		err = -errno;
		goto fail;
	}
	err = kvs_ucx_init(&c->ucx, c->opts.shared_memory, true);
	if (err)
		goto fail;
	am.arg = cluster ? (void *)c : (void *)&c->conn;
	if (ucp_worker_set_am_recv_handler(c->ucx.worker, &am) != UCS_OK) {
		err = -EIO;
		goto fail;
	}
	*out = c;
	return 0;
fail:
	kvs_client_close(c);
	return err;
}

int client_start(struct kvs_client *c)
{
	int err = pthread_create(&c->thread, NULL, progress_main, c);

	if (err)
		return -err;
	c->thread_started = true;
	return 0;
}

static int connect_once(const struct kvs_client_opts *opts,
			const struct kvs_server_tenant *tenant,
			struct kvs_client **out)
{
	struct kvs_client *c;
	int err;

	err = client_create(opts, tenant, false, &c);
	if (err)
		return err;
	err = conn_open(c, &c->conn, opts->address);
	if (!err)
		err = client_start(c);
	if (!err)
		err = authenticate(c);
	if (err) {
		kvs_client_close(c);
		return err;
	}
	*out = c;
	return 0;
}

/* A connection (@tenant: its key, else opts->key_file's) within the
 * connect timeout: one the transport lost while it was being made (a
 * burst of clients at once) is tried again while the timeout allows;
 * refusals and timeouts are final. */
static int connect_retry(const struct kvs_client_opts *opts,
			 const struct kvs_server_tenant *tenant,
			 struct kvs_client **out)
{
	uint32_t budget =
		opts->connect_timeout_ms ? opts->connect_timeout_ms : 5000;
	uint64_t end = kvs_now_ns() + (uint64_t)budget * 1000000ull;
	int err;

	for (;;) {
		err = connect_once(opts, tenant, out);
		if ((err != -KVS_ECONN && err != -ECANCELED) ||
		    kvs_now_ns() + 100000000ull > end)
			return err == -ECANCELED ? -KVS_ECONN : err;
		usleep(50000);
	}
}

int kvs_client_connect(const struct kvs_client_opts *opts,
		       struct kvs_client **out)
{
	if (!opts || !opts->address || !opts->key_file || !out)
		return -KVS_EPARAM;
	return connect_retry(opts, NULL, out);
}

int kvs_client_dup(struct kvs_client *c, struct kvs_client **out)
{
	struct kvs_client_opts opts;

	if (!c || !out || c->route)
		return -KVS_EPARAM;
	opts = c->opts;
	opts.address = c->address;
	opts.key_file = NULL; /* the key is the tenant's, read once */
	return connect_retry(&opts, &c->conn.tenant, out);
}

void kvs_client_limits(const struct kvs_client *client,
		       struct kvs_client_limits *out)
{
	*out = client->conn.limits;
}

void kvs_client_counters(const struct kvs_client *client,
			 struct kvs_client_counters *out)
{
	out->requests = client->counters.requests;
	out->timeouts = client->counters.timeouts;
	out->corrupt_dropped = __atomic_load_n(
		&client->counters.corrupt_dropped, __ATOMIC_RELAXED);
	out->fallbacks =
		__atomic_load_n(&client->counters.fallbacks, __ATOMIC_RELAXED);
	out->marked_down = __atomic_load_n(&client->counters.marked_down,
					   __ATOMIC_RELAXED);
	out->under_replicated = __atomic_load_n(
		&client->counters.under_replicated, __ATOMIC_RELAXED);
	out->repairs =
		__atomic_load_n(&client->counters.repairs, __ATOMIC_RELAXED);
}

void kvs_client_close(struct kvs_client *c)
{
	uint64_t one = 1;

	if (!c)
		return;
	if (c->thread_started) {
		pthread_mutex_lock(&c->lock);
		c->stopping = true;
		pthread_mutex_unlock(&c->lock);
		(void)!write(c->wake_fd, &one, sizeof(one));
		pthread_join(c->thread, NULL);
	}
	/* the thread is gone: this thread may touch UCX now */
	if (c->route) {
		for (int i = 0; !route_shutdown(c->route, i > 0) && i < 1000000;
		     i++) {
			ucp_worker_progress(c->ucx.worker);
			run_deferred(c);
		}
		route_destroy(c->route);
		c->route = NULL;
	} else if (c->conn.ep || c->conn.closing) {
		conn_fail(&c->conn, -KVS_ECONN);
		for (int i = 0; c->conn.closing && i < 1000000; i++) {
			ucp_worker_progress(c->ucx.worker);
			conn_progress_close(&c->conn);
		}
	}
	kvs_ucx_fini(&c->ucx);
	if (c->wake_fd >= 0)
		close(c->wake_fd);
	pthread_cond_destroy(&c->cond);
	pthread_mutex_destroy(&c->progress);
	pthread_mutex_destroy(&c->lock);
	free(c->address);
	free(c);
}
