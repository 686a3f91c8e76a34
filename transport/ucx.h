/*
 * ucx.h - the UCX (ucp) glue shared by the server (server/server.c)
 * and the client library (client/): one context and one worker per
 * process side, event-driven progress, status translation, addresses.
 *
 * Both sides follow UCX's own client/server pattern: active messages
 * with a small fixed header (the frame), rendezvous for bulk, peer error
 * handling on every endpoint, progress from ucp_worker_get_efd() +
 * ucp_worker_arm() with a bounded poll timeout.
 */
#ifndef KVS_TRANSPORT_UCX_H
#define KVS_TRANSPORT_UCX_H

#include <stdbool.h>
#include <sys/socket.h>

#include <ucp/api/ucp.h>

struct kvs_ucx {
	ucp_context_h context;
	ucp_worker_h worker;
	int efd; /* the worker's event fd */
};

/*
 * Creates the context (active messages, wakeup) and a worker of one
 * thread, or with @serialized of threads that take turns (the caller
 * serializes them).  With @shared_memory, the shared-memory transports are
 * allowed on endpoints with peer error handling (UCX_MM_ERROR_HANDLING;
 * UCX 1.13 leaves them out otherwise, and two processes of one host then talk
 * over TCP loopback).  Off by default: a peer killed while it writes into the
 * receiver's shared-memory FIFO leaves a slot that is never completed, and
 * the receiver's shared-memory receive stalls for every peer after it
 * (seen with UCX 1.13).  The environment variable still decides when set.
 *
 * Rendezvous by the receiver's get (UCX_RNDV_SCHEME=get_zcopy), on both
 * sides and either way: endpoints between processes of one host then keep
 * to shared memory (am(sysv)) where the default adds TCP lanes and sends
 * most of a large reply over TCP loopback.  Both sides must agree: with
 * UCX 1.13 the wireup of two sides that chose different schemes fails,
 * and a daemon reached by a client of another scheme can abort on one of
 * UCX's assertions, so a user who sets the environment variable sets it
 * for the daemon and its clients alike.  0 or a negative error (logged).
 */
int kvs_ucx_init(struct kvs_ucx *u, bool shared_memory, bool serialized);

/*
 * kvs_ucx_listener_defaults - what a process that listens wants of UCX
 * beside kvs_ucx_init's: listeners bind with SO_REUSEADDR
 * (UCX_TCP_CM_REUSEADDR=y unless the environment says otherwise), so that
 * a daemon restarted at once, after a crash or an upgrade, gets its port
 * back although the connections it closed itself still sit in TIME_WAIT on
 * it (about a minute).  Linux still refuses a second listener on a port
 * that one holds.  It sets the environment: call it at the start of
 * main(), before any thread or UCX context exists.
 */
void kvs_ucx_listener_defaults(void);
/* NULL members are skipped; safe on a zeroed struct. */
void kvs_ucx_fini(struct kvs_ucx *u);

/*
 * kvs_ucx_wait - progress the worker until idle, arm it, and wait on its
 * event fd and @extra_fd (-1: none) for at most @timeout_ms.  Returns
 * 1 when @extra_fd is readable, else 0.
 */
int kvs_ucx_wait(struct kvs_ucx *u, int extra_fd, int timeout_ms);

/* The same with several fds (@n at most 4): a bit mask of those that
 * are readable (bit i for fds[i]). */
int kvs_ucx_wait_fds(struct kvs_ucx *u, const int *fds, int n, int timeout_ms);

/* A ucs_status_t as a kvstash error (once, at the module boundary). */
int kvs_ucx_error(ucs_status_t status);

/* Parses "HOST:PORT" (HOST a name or an IPv4/IPv6 address, "[v6]:PORT"
 * too); 0 or -KVS_EPARAM. */
int kvs_ucx_parse_addr(const char *text, struct sockaddr_storage *out,
		       socklen_t *out_len);

/* Waits for @req (a ucp request or a status pointer) by progressing the
 * worker; returns its status and frees it. */
ucs_status_t kvs_ucx_request_wait(ucp_worker_h worker, void *req);

#endif
