/*
 * io.h - the store's default I/O ops (system calls) and its io_uring
 * engine (io.c): rings, registered buffers, runs of requests.
 */
#ifndef KVSTASH_STORE_IO_H
#define KVSTASH_STORE_IO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "kvstash/store.h"

struct kvs_store;

/* ---- io_uring engine (io.c) ------------------------------------------ */

/* *@out = *@in (NULL: the default table) with each NULL member replaced
 * by the default's. */
void io_ops_fill(struct kvs_store_io_ops *out,
		 const struct kvs_store_io_ops *in);

int ring_create(unsigned depth, struct kvs_store_ring **out);
/* A ring whose start() only queues (submit() submits) and whose
 * completions make @event_fd readable; 0 or -errno. */
int ring_create_batching(unsigned depth, int event_fd,
			 struct kvs_store_ring **out);
void ring_destroy(struct kvs_store_ring *ring);
/* Registers @n iovecs; 0 or -errno (the store then runs unregistered). */
int ring_register(struct kvs_store_ring *ring, const struct iovec *iov,
		  unsigned n);
struct kvs_store;
/* Runs @n requests, at most @depth in flight (counting others already
 * started); 0 once all are done (each with its own res) or -errno. */
int io_run(struct kvs_store *s, struct kvs_store_io_req *reqs, unsigned n,
	   unsigned depth);
/* Starts @req; one that cannot start is done with the error. */
void io_start(struct kvs_store *s, struct kvs_store_io_req *req);
/* Waits for at least @min started requests to complete. */
int io_wait(struct kvs_store *s, unsigned min);

#endif
