/*
 * async.c - asynchronous batched get, put and commit, for an event loop
 * (the daemon's).  A batch that needs no device I/O -- a get of objects
 * all in DRAM (or missing), a put or commit at memory durability without
 * write-through -- is served inline and the submit says so; any other is
 * queued to the store's I/O thread, which runs the batched call (its
 * NVMe reads and writes go through the io_uring engine together, up to
 * queue_depth in flight) while the loop goes on with other work.
 * Finished batches wait on a completion list; the store's event fd
 * becomes readable, and kvs_store_poll() runs their callbacks on the
 * loop's thread.  The thread starts with the first queued batch and is
 * joined at close, after the batches queued before have finished.
 */
#include <errno.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "kvstash/log.h"
#include "store_internal.h"

enum job_kind {
	JOB_GET,
	JOB_PUT,
	JOB_COMMIT,
};

struct job {
	struct job *next;
	enum job_kind kind;
	const struct kvs_store_key *keys;
	struct kvs_store_ref **refs;
	const uint8_t *const *objs;
	const size_t *lens;
	struct kvs_store_reservation *const *rs;
	size_t n;
	enum kvs_durability durability;
	int *results;
	int status;
	kvs_store_done_fn done;
	void *arg;
};

struct store_async {
	pthread_t thread;
	bool started, stopping;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct job *queue, **queue_tail;
	struct job *completed, **completed_tail;
	int event_fd;
};

static void *io_main(void *arg)
{
	struct kvs_store *s = arg;
	struct store_async *a = s->async;
	uint64_t one = 1;

	for (;;) {
		struct job *j;

		pthread_mutex_lock(&a->lock);
		while (!a->queue && !a->stopping)
			pthread_cond_wait(&a->cond, &a->lock);
		j = a->queue;
		if (j) {
			a->queue = j->next;
			if (!a->queue)
				a->queue_tail = &a->queue;
		}
		pthread_mutex_unlock(&a->lock);
		if (!j)
			break; /* stopping, and nothing left */
		switch (j->kind) {
		case JOB_GET:
			j->status = kvs_store_get_batch(s, j->keys, j->n,
							j->refs, j->results);
			break;
		case JOB_PUT:
			j->status =
				kvs_store_put_batch(s, j->objs, j->lens, j->n,
						    j->durability, j->results);
			break;
		case JOB_COMMIT:
			j->status = kvs_store_commit_batch(
				s, j->rs, j->n, j->durability, j->results);
			break;
		}
		pthread_mutex_lock(&a->lock);
		j->next = NULL;
		*a->completed_tail = j;
		a->completed_tail = &j->next;
		pthread_mutex_unlock(&a->lock);
		if (write(a->event_fd, &one, sizeof(one)) < 0)
			kvs_log(KVS_LOG_ERR, "store: completion event lost");
	}
	return NULL;
}

/* The async state, made at the first use; NULL without memory. */
static struct store_async *async_of(struct kvs_store *s)
{
	struct store_async *a;

	pthread_mutex_lock(&s->lock);
	a = s->async;
	if (!a && (a = calloc(1, sizeof(*a)))) {
		a->event_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		if (a->event_fd < 0) {
			free(a);
			a = NULL;
		} else {
			pthread_mutex_init(&a->lock, NULL);
			pthread_cond_init(&a->cond, NULL);
			a->queue_tail = &a->queue;
			a->completed_tail = &a->completed;
			s->async = a;
		}
	}
	pthread_mutex_unlock(&s->lock);
	return a;
}

/* Queues a copy of @proto; 0 or -errno (nothing queued). */
static int queue_job(struct kvs_store *s, const struct job *proto)
{
	struct store_async *a = async_of(s);
	struct job *j = malloc(sizeof(*j));
	int err = 0;

	if (!a || !j) {
		free(j);
		return -ENOMEM;
	}
	*j = *proto;
	pthread_mutex_lock(&a->lock);
	if (!a->started) {
		err = -pthread_create(&a->thread, NULL, io_main, s);
		a->started = err == 0;
	}
	if (!err) {
		j->next = NULL;
		*a->queue_tail = j;
		a->queue_tail = &j->next;
		pthread_cond_signal(&a->cond);
	}
	pthread_mutex_unlock(&a->lock);
	if (err)
		free(j);
	return err;
}

int kvs_store_event_fd(struct kvs_store *store)
{
	struct store_async *a = async_of(store);

	return a ? a->event_fd : -1;
}

unsigned kvs_store_poll(struct kvs_store *store)
{
	struct store_async *a = store->async;
	struct job *j;
	uint64_t v;
	unsigned n = 0;

	if (!a)
		return 0;
	if (read(a->event_fd, &v, sizeof(v)) < 0)
		v = 0; /* nothing signalled: the list may still hold some */
	pthread_mutex_lock(&a->lock);
	j = a->completed;
	a->completed = NULL;
	a->completed_tail = &a->completed;
	pthread_mutex_unlock(&a->lock);
	while (j) {
		struct job *next = j->next;

		j->done(j->arg, j->status);
		free(j);
		j = next;
		n++;
	}
	return n;
}

/* Whether a batch at @d needs the device (not only DRAM). */
static bool writes_through(struct kvs_store *s, enum kvs_durability d)
{
	return d > KVS_DURABILITY_MEMORY || s->opts.write_through ||
	       !s->dram_on;
}

int kvs_store_get_batch_async(struct kvs_store *store,
			      const struct kvs_store_key *keys, size_t n,
			      struct kvs_store_ref **refs, int *results,
			      kvs_store_done_fn done, void *arg)
{
	struct kvs_store *s = store;
	bool io = false;

	pthread_mutex_lock(&s->lock);
	for (size_t i = 0; i < n && !io; i++) {
		struct entry *e = index_find(&s->index, &keys[i]);

		io = e && !e->slot && e->seg;
	}
	pthread_mutex_unlock(&s->lock);
	if (!io) {
		int err = kvs_store_get_batch(s, keys, n, refs, results);

		return err ? err : 1;
	}
	return queue_job(s, &(struct job){ .kind = JOB_GET,
					   .keys = keys,
					   .refs = refs,
					   .n = n,
					   .results = results,
					   .done = done,
					   .arg = arg });
}

int kvs_store_put_batch_async(struct kvs_store *store,
			      const uint8_t *const *objs, const size_t *lens,
			      size_t n, enum kvs_durability durability,
			      int *results, kvs_store_done_fn done, void *arg)
{
	if (!writes_through(store, durability)) {
		int err;

		/* a failure of the whole batch leaves the results unset */
		for (size_t i = 0; i < n; i++)
			results[i] = 1;
		err = kvs_store_put_batch(store, objs, lens, n, durability,
					  results);
		return n && results[0] == 1 ? err : 1;
	}
	return queue_job(store, &(struct job){ .kind = JOB_PUT,
					       .objs = objs,
					       .lens = lens,
					       .n = n,
					       .durability = durability,
					       .results = results,
					       .done = done,
					       .arg = arg });
}

int kvs_store_commit_batch_async(struct kvs_store *store,
				 struct kvs_store_reservation *const *rs,
				 size_t n, enum kvs_durability durability,
				 int *results, kvs_store_done_fn done,
				 void *arg)
{
	if (!writes_through(store, durability)) {
		kvs_store_commit_batch(store, rs, n, durability, results);
		return 1;
	}
	return queue_job(store, &(struct job){ .kind = JOB_COMMIT,
					       .rs = rs,
					       .n = n,
					       .durability = durability,
					       .results = results,
					       .done = done,
					       .arg = arg });
}

void async_fini(struct kvs_store *s)
{
	struct store_async *a = s->async;

	if (!a)
		return;
	pthread_mutex_lock(&a->lock);
	a->stopping = true;
	pthread_cond_signal(&a->cond);
	pthread_mutex_unlock(&a->lock);
	if (a->started)
		pthread_join(a->thread, NULL);
	/* completions nobody polled: their callbacks still run, once */
	kvs_store_poll(s);
	close(a->event_fd);
	pthread_cond_destroy(&a->cond);
	pthread_mutex_destroy(&a->lock);
	free(a);
	s->async = NULL;
}
