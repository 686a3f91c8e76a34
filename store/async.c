/*
 * async.c - the asynchronous engine: batched gets, puts, commits and
 * deletes for an event loop (the daemon's), progressed from the loop.
 *
 * A batch is prepared under the store's lock -- index and DRAM state,
 * pins, slots, reservations in the head segment, record headers stamped
 * -- and its reads, writes and syncs become requests on a ring of its own
 * (a batching ring: start() only queues them).  Nothing waits on the
 * device under the lock: kvs_store_poll(), once per turn of the loop,
 * hands everything queued since the last turn to the kernel in one
 * io_uring_submit (outside the store's lock), then collects the
 * completions the ring signalled on its eventfd (io_uring_register_eventfd:
 * kvs_store_event_fd()), finishes them under the lock (records checked,
 * promoted, attached; more requests queued: the next writes, the syncs of
 * a DURABLE batch) and runs the callbacks of the batches that finished,
 * without the lock.
 *
 * Pins keep entries and slots alive while their I/O is in flight;
 * segments with reads or syncs in flight (segment->async_io) or writes
 * (->pending) are neither reclaimed nor compacted.  A roll (a put that no
 * longer fits the head) waits for the writes in flight to the newest
 * segment: an asynchronous batch waits for the head to drain
 * (async_wait_head) and goes on at a later turn; a synchronous caller
 * completes them itself (async_drain_seg), under the lock, as it does its
 * own I/O.  The roll itself (seal, a new segment, the manifest, compaction
 * and carries), a spill of an evicted DRAM-only object and the read-back
 * of a record recovery did not check run synchronously where they are
 * needed.
 *
 * Locks: the store's lock for every structure; the ring's lock (a leaf,
 * taken inside the store's or alone) for the ring itself: start, submit,
 * complete.  Completions are collected only under both.
 */
#include <errno.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "kvstash/log.h"
#include "store_internal.h"

struct store_async {
	struct kvs_store_ring *ring; /* NULL: no io_uring, run synchronously */
	int event_fd;
	pthread_mutex_t ring_lock;
	unsigned depth; /* requests in flight at most */
	struct aio *wait_head, **wait_tail; /* not yet started */
	struct aio *inflight; /* started, not yet seen done */
	unsigned ninflight;
	struct abatch *runnable, **runnable_tail;
	struct abatch *head_waiters;
	struct abatch *finished, **finished_tail;
	unsigned nbatches; /* begun, not yet finished */
	bool in_poll; /* kvs_store_poll holds the lock: no wakeup needed */
};

bool async_has_ring(const struct store_async *a)
{
	return a && a->ring;
}

struct store_async *async_get(struct kvs_store *s, int *err)
{
	struct store_async *a = s->async;
	unsigned depth = s->opts.queue_depth;

	*err = 0;
	if (a)
		return a;
	a = calloc(1, sizeof(*a));
	if (!a) {
		*err = -ENOMEM;
		return NULL;
	}
	a->event_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (a->event_fd < 0) {
		*err = -errno;
		free(a);
		return NULL;
	}
	pthread_mutex_init(&a->ring_lock, NULL);
	a->depth = depth;
	a->wait_tail = &a->wait_head;
	a->runnable_tail = &a->runnable;
	a->finished_tail = &a->finished;
	if (ring_create_batching(depth > RING_MIN ? depth : RING_MIN,
				 a->event_fd, &a->ring)) {
		kvs_log(KVS_LOG_INFO, "store: no io_uring for the asynchronous "
				      "batches: they run synchronously");
		a->ring = NULL;
	} else if (s->registered && arena_register(s, a->ring)) {
		kvs_log(KVS_LOG_INFO, "store: DRAM arena not registered with "
				      "the asynchronous ring");
	}
	/* kvs_store_poll reads it without the lock */
	__atomic_store_n(&s->async, a, __ATOMIC_RELEASE);
	return a;
}

int kvs_store_event_fd(struct kvs_store *store)
{
	struct store_async *a;
	int err;

	pthread_mutex_lock(&store->lock);
	a = async_get(store, &err);
	pthread_mutex_unlock(&store->lock);
	return a ? a->event_fd : -1;
}

/* Wakes the loop: a batch finished outside kvs_store_poll. */
static void wake(struct store_async *a)
{
	uint64_t one = 1;

	if (!a->in_poll && write(a->event_fd, &one, sizeof(one)) < 0)
		kvs_log(KVS_LOG_ERR, "store: completion event lost");
}

void async_begin(struct kvs_store *s, struct abatch *b)
{
	b->runnable = false;
	b->next = NULL;
	s->async->nbatches++;
}

void async_queue(struct kvs_store *s, struct aio *io)
{
	struct store_async *a = s->async;

	io->req.done = false;
	io->next = NULL;
	*a->wait_tail = io;
	a->wait_tail = &io->next;
}

void async_runnable(struct kvs_store *s, struct abatch *b)
{
	struct store_async *a = s->async;

	if (b->runnable)
		return;
	b->runnable = true;
	b->next = NULL;
	*a->runnable_tail = b;
	a->runnable_tail = &b->next;
}

void async_wait_head(struct kvs_store *s, struct abatch *b)
{
	struct store_async *a = s->async;

	b->next = a->head_waiters;
	a->head_waiters = b;
}

void async_head_drained(struct kvs_store *s)
{
	struct store_async *a = s->async;
	struct abatch *b;

	while ((b = a->head_waiters)) {
		a->head_waiters = b->next;
		async_runnable(s, b);
	}
}

void async_finish(struct kvs_store *s, struct abatch *b, int status)
{
	struct store_async *a = s->async;

	b->status = status;
	b->next = NULL;
	*a->finished_tail = b;
	a->finished_tail = &b->next;
	a->nbatches--;
	wake(a);
}

/* Hands the queued requests to the kernel, in one system call; without
 * the store's lock (or with it). */
static void submit(struct kvs_store *s, struct store_async *a)
{
	int err;

	pthread_mutex_lock(&a->ring_lock);
	err = s->io->submit(s->io->ctx, a->ring);
	pthread_mutex_unlock(&a->ring_lock);
	if (err)
		kvs_log(KVS_LOG_ERR, "store: io_uring submit: %s",
			kvs_strerror(err));
}

/*
 * One round under the lock: starts what waits (queue depth permitting),
 * collects what finished -- waiting for at least one with @wait (the
 * queue submitted first) -- and runs the completion handlers, until a
 * round finds nothing finished.
 */
static void progress(struct kvs_store *s, bool wait)
{
	struct store_async *a = s->async;

	for (;;) {
		struct aio *done = NULL, **done_tail = &done, *io, **pp;
		int n;

		pthread_mutex_lock(&a->ring_lock);
		while (a->wait_head && a->ninflight < a->depth) {
			int err;

			io = a->wait_head;
			a->wait_head = io->next;
			if (!a->wait_head)
				a->wait_tail = &a->wait_head;
			err = s->io->start(s->io->ctx, a->ring, &io->req);
			if (err) {
				io->req.res = err;
				io->req.done = true;
			}
			io->next = a->inflight;
			a->inflight = io;
			a->ninflight++;
		}
		/* a request done in start() (refused, or run at once by a
		 * table without a ring) raises no completion to wait for */
		for (io = a->inflight; wait && io; io = io->next)
			wait = !io->req.done;
		/* a refused submit completes its requests itself (with
		 * the error): nothing then to wait for */
		if (wait && a->ninflight &&
		    s->io->submit(s->io->ctx, a->ring) == 0) {
			n = s->io->complete(s->io->ctx, a->ring, 1);
		} else {
			n = s->io->complete(s->io->ctx, a->ring, 0);
		}
		if (n < 0)
			kvs_log(KVS_LOG_ERR, "store: waiting for I/O: %s",
				kvs_strerror(n));
		for (pp = &a->inflight; (io = *pp);) {
			if (!io->req.done) {
				pp = &io->next;
				continue;
			}
			*pp = io->next;
			a->ninflight--;
			io->next = NULL;
			*done_tail = io;
			done_tail = &io->next;
		}
		pthread_mutex_unlock(&a->ring_lock);
		if (!done)
			return;
		while ((io = done)) {
			done = io->next;
			io->complete(s, io);
		}
		wait = false;
	}
}

void async_turn(struct kvs_store *s)
{
	struct store_async *a = s->async;

	do {
		struct abatch *b;

		progress(s, false);
		while ((b = a->runnable)) {
			a->runnable = b->next;
			if (!a->runnable)
				a->runnable_tail = &a->runnable;
			b->runnable = false;
			b->step(s, b);
		}
	} while (a->runnable || (a->wait_head && a->ninflight < a->depth));
}

void async_drain_seg(struct kvs_store *s, struct segment *seg)
{
	struct store_async *a = s->async;

	while (a && seg->apending) {
		if (!a->ninflight && !a->wait_head) {
			kvs_log(KVS_LOG_ERR,
				"store: segment %llu waits for writes that "
				"are not in flight",
				(unsigned long long)seg->id);
			return;
		}
		progress(s, true);
	}
}

/* Takes the finished batches (lock held). */
static struct abatch *take_finished(struct store_async *a)
{
	struct abatch *b = a->finished;

	a->finished = NULL;
	a->finished_tail = &a->finished;
	return b;
}

/* Runs the callbacks of @b and the batches after it; their count. */
static unsigned run_callbacks(struct abatch *b)
{
	unsigned n = 0;

	while (b) {
		struct abatch *next = b->next;

		b->done(b->arg, b->status);
		b->release(b);
		b = next;
		n++;
	}
	return n;
}

unsigned kvs_store_poll(struct kvs_store *store)
{
	struct kvs_store *s = store;
	struct store_async *a = __atomic_load_n(&s->async, __ATOMIC_ACQUIRE);
	struct abatch *fin;
	uint64_t v;

	if (!a)
		return 0;
	if (read(a->event_fd, &v, sizeof(v)) < 0)
		v = 0; /* nothing signalled: completions may still wait */
	/* this turn's requests go to the kernel together */
	if (a->ring)
		submit(s, a);
	pthread_mutex_lock(&s->lock);
	a->in_poll = true;
	if (a->ring)
		async_turn(s);
	fin = take_finished(a);
	a->in_poll = false;
	pthread_mutex_unlock(&s->lock);
	/* and what finishing them queued (the next writes, syncs) */
	if (a->ring)
		submit(s, a);
	return run_callbacks(fin);
}

void async_fini(struct kvs_store *s)
{
	struct store_async *a = s->async;
	struct abatch *fin;

	if (!a)
		return;
	pthread_mutex_lock(&s->lock);
	a->in_poll = true;
	while (a->ring && a->nbatches) {
		async_turn(s);
		if (!a->nbatches)
			break;
		if (!a->ninflight && !a->wait_head) {
			kvs_log(KVS_LOG_ERR,
				"store: %u asynchronous batches "
				"cannot finish",
				a->nbatches);
			break;
		}
		progress(s, true);
	}
	fin = take_finished(a);
	a->in_poll = false;
	pthread_mutex_unlock(&s->lock);
	/* batches nobody polled: their callbacks still run, once */
	run_callbacks(fin);
	ring_destroy(a->ring);
	close(a->event_fd);
	pthread_mutex_destroy(&a->ring_lock);
	free(a);
	s->async = NULL;
}
