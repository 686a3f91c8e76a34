/*
 * client.c - the client's machinery under its calls (calls.c): the
 * progress thread, the submission queue, waiting on handles, and the
 * connect sequence (hello, challenge, proof); a client's shape, one
 * daemon or a cluster, is its ops (client_internal.h).
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

/* ---- the progress thread --------------------------------------------- */

bool client_run_deferred(struct kvs_client *cl)
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
	struct kvs_client_req *q;

	pthread_mutex_lock(&cl->lock);
	q = cl->queue;
	cl->queue = NULL;
	cl->queue_tail = &cl->queue;
	pthread_mutex_unlock(&cl->lock);
	cl->ops->start(cl, q);
}

/* One turn of progress; client->progress held.  True if anything moved. */
static bool progress_turn(struct kvs_client *cl)
{
	unsigned n = 0, k;
	uint64_t now;
	bool check;

	drain_queue(cl);
	while ((k = ucp_worker_progress(cl->ucx.worker)))
		n += k;
	now = kvs_now_ns();
	check = now - cl->last_check > 1000000ull;
	if (check)
		cl->last_check = now;
	n += cl->ops->progress(cl, now, check);
	return n > 0;
}

/* Whether everything is over once the client stops; client->progress
 * held. */
static bool stop_turn(struct kvs_client *cl, uint64_t close_since)
{
	/* a close the peer never answers: the worker's destruction cleans
	 * it up */
	bool late = kvs_now_ns() - close_since >
		    (uint64_t)cl->opts.connect_timeout_ms * 1000000ull;

	return cl->ops->stop(cl, late);
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
		busy = cl->ops->busy(cl);
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
void client_drive(struct kvs_client *cl, struct kvs_client_req *req)
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

int kvs_client_wait(struct kvs_client_req *req)
{
	struct kvs_client *cl = req->cl;
	int status;

	client_drive(cl, req);
	req_verify(req);
	status = req->status;
	req_free(req);
	return status;
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
	req_encode_header(req);
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
	client_drive(c, req);
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
	c->ops = cluster ? &client_cluster_ops : &client_direct_ops;
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
	pthread_mutex_lock(&c->progress);
	client_mark_connected(c);
	pthread_mutex_unlock(&c->progress);
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

	if (!c || !out || c->ops != &client_direct_ops)
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
	out->reconnects =
		__atomic_load_n(&client->reconnects, __ATOMIC_RELAXED);
	out->retries = __atomic_load_n(&client->retries, __ATOMIC_RELAXED);
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
	c->ops->destroy(c);
	kvs_ucx_fini(&c->ucx);
	if (c->wake_fd >= 0)
		close(c->wake_fd);
	pthread_cond_destroy(&c->cond);
	pthread_mutex_destroy(&c->progress);
	pthread_mutex_destroy(&c->lock);
	free(c->address);
	free(c);
}
