/*
 * io.c - the default I/O ops table: plain system calls (errors as -errno)
 * and an io_uring engine: start() queues and submits one read, write or
 * sync (fixed, on a registered buffer, where the request names one),
 * complete() reaps completions; and io_run(), which runs a set of requests
 * with at most `depth` in flight on top of them.  Without liburing,
 * start() runs the request at once.  A batching ring (the asynchronous
 * batches') has start() only queue the request and submit() hand all of
 * them to the kernel together; completions there are signalled on an
 * eventfd registered with the ring.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "kvs_config.h"
#include "kvstash/log.h"
#include "store_internal.h"

#if KVS_HAVE_IO_URING
#include <liburing.h>
#endif

struct kvs_store_ring {
#if KVS_HAVE_IO_URING
	struct io_uring uring;
#endif
	bool live; /* uring set up */
	bool registered;
	bool batching; /* start() queues, submit() submits */
};

static int sys_open(void *ctx, const char *path, int flags, mode_t mode)
{
	int fd = open(path, flags | O_CLOEXEC, mode);

	return fd < 0 ? -errno : fd;
}

static int sys_close(void *ctx, int fd)
{
	return close(fd) ? -errno : 0;
}

static ssize_t sys_pread(void *ctx, int fd, void *buf, size_t len, off_t off)
{
	ssize_t n;

	do
		n = pread(fd, buf, len, off);
	while (n < 0 && errno == EINTR);
	return n < 0 ? -errno : n;
}

static ssize_t sys_pwrite(void *ctx, int fd, const void *buf, size_t len,
			  off_t off)
{
	ssize_t n;

	do
		n = pwrite(fd, buf, len, off);
	while (n < 0 && errno == EINTR);
	return n < 0 ? -errno : n;
}

static int sys_fsync(void *ctx, int fd)
{
	return fsync(fd) ? -errno : 0;
}

static int sys_fdatasync(void *ctx, int fd)
{
	return fdatasync(fd) ? -errno : 0;
}

static int sys_ftruncate(void *ctx, int fd, off_t len)
{
	return ftruncate(fd, len) ? -errno : 0;
}

static int sys_fallocate(void *ctx, int fd, off_t len)
{
	return fallocate(fd, 0, 0, len) ? -errno : 0;
}

static int sys_size(void *ctx, int fd, uint64_t *out)
{
	struct stat st;

	if (fstat(fd, &st))
		return -errno;
	*out = (uint64_t)st.st_size;
	return 0;
}

static int sys_rename(void *ctx, const char *from, const char *to)
{
	return rename(from, to) ? -errno : 0;
}

static int sys_unlink(void *ctx, const char *path)
{
	return unlink(path) ? -errno : 0;
}

static int sys_mkdir(void *ctx, const char *path, mode_t mode)
{
	return mkdir(path, mode) ? -errno : 0;
}

static int sys_lock(void *ctx, int fd, bool exclusive)
{
	while (flock(fd, (exclusive ? LOCK_EX : LOCK_SH) | LOCK_NB) != 0)
		if (errno != EINTR)
			return errno == EAGAIN ? -EWOULDBLOCK : -errno;
	return 0;
}

static int sys_stat(void *ctx, const char *path, int fd, struct stat *out)
{
	int err = path ? stat(path, out) : fstat(fd, out);

	return err ? -errno : 0;
}

static int sys_space(void *ctx, const char *dir, uint64_t *avail)
{
	struct statvfs vfs;

	if (statvfs(dir, &vfs))
		return -errno;
	*avail = (uint64_t)vfs.f_bavail * vfs.f_frsize;
	return 0;
}

static int sys_seek_data(void *ctx, int fd, uint64_t off, uint64_t *out)
{
	off_t at = lseek(fd, (off_t)off, SEEK_DATA);

	if (at < 0)
		return -errno; /* ENXIO: a hole to the end */
	*out = (uint64_t)at;
	return 0;
}

static int sys_list(void *ctx, const char *dir,
		    int (*fn)(void *arg, const char *name), void *arg)
{
	struct dirent *de;
	DIR *d = opendir(dir);
	int err = 0;

	if (!d)
		return -errno;
	for (;;) {
		errno = 0;
		de = readdir(d);
		if (!de) {
			err = errno ? -errno : 0;
			break;
		}
		err = fn(arg, de->d_name);
		if (err)
			break;
	}
	closedir(d);
	return err;
}

static void run_sync(struct kvs_store_io_req *r)
{
	if (r->op == KVS_STORE_IO_READ)
		r->res = (int32_t)sys_pread(NULL, r->fd, r->buf, r->len,
					    (off_t)r->off);
	else if (r->op == KVS_STORE_IO_WRITE)
		r->res = (int32_t)sys_pwrite(NULL, r->fd, r->buf, r->len,
					     (off_t)r->off);
	else
		r->res = sys_fdatasync(NULL, r->fd);
	r->done = true;
}

static int sys_start(void *ctx, struct kvs_store_ring *ring,
		     struct kvs_store_io_req *r)
{
#if KVS_HAVE_IO_URING
	struct io_uring_sqe *sqe;
	bool fixed;
	int ret;

	if (!ring || !ring->live) {
		run_sync(r);
		return 0;
	}
	sqe = io_uring_get_sqe(&ring->uring);
	if (!sqe)
		return -EAGAIN;
	fixed = ring->registered && r->buf_index >= 0;
	if (r->op == KVS_STORE_IO_SYNC)
		io_uring_prep_fsync(sqe, r->fd, IORING_FSYNC_DATASYNC);
	else if (r->op == KVS_STORE_IO_READ && fixed)
		io_uring_prep_read_fixed(sqe, r->fd, r->buf, r->len, r->off,
					 r->buf_index);
	else if (r->op == KVS_STORE_IO_READ)
		io_uring_prep_read(sqe, r->fd, r->buf, r->len, r->off);
	else if (fixed)
		io_uring_prep_write_fixed(sqe, r->fd, r->buf, r->len, r->off,
					  r->buf_index);
	else
		io_uring_prep_write(sqe, r->fd, r->buf, r->len, r->off);
	io_uring_sqe_set_data(sqe, r);
	r->done = false;
	if (ring->batching)
		return 0; /* submitted with the others by sys_submit */
	do
		ret = io_uring_submit(&ring->uring);
	while (ret == -EINTR);
	if (ret >= 0)
		return 0;
	/* Not submitted, yet still queued in the ring: the next submit
	 * would run it against a request and a buffer the caller frees on
	 * this error.  It becomes a no-op with no request behind it (its
	 * completion is skipped). */
	io_uring_prep_nop(sqe);
	io_uring_sqe_set_data(sqe, NULL);
	return ret;
#else
	run_sync(r);
	return 0;
#endif
}

static int sys_complete(void *ctx, struct kvs_store_ring *ring, unsigned min)
{
#if KVS_HAVE_IO_URING
	struct io_uring_cqe *cqe;
	unsigned seen = 0, head;
	int ret;

	if (!ring || !ring->live)
		return 0;
	for (;;) {
		unsigned n = 0;

		unsigned reaped = 0;

		io_uring_for_each_cqe(&ring->uring, head, cqe)
		{
			struct kvs_store_io_req *r = io_uring_cqe_get_data(cqe);

			reaped++;
			if (!r)
				continue; /* a no-op left by a failed submit */
			r->res = cqe->res;
			r->done = true;
			n++;
		}
		io_uring_cq_advance(&ring->uring, reaped);
		seen += n;
		if (seen >= min)
			return (int)seen;
		ret = io_uring_wait_cqe(&ring->uring, &cqe);
		if (ret < 0 && ret != -EINTR && ret != -EAGAIN)
			return ret;
	}
#else
	return 0;
#endif
}

static int sys_submit(void *ctx, struct kvs_store_ring *ring)
{
#if KVS_HAVE_IO_URING
	struct io_uring_sq *sq;
	unsigned head, tail;
	int ret;

	if (!ring || !ring->live || !io_uring_sq_ready(&ring->uring))
		return 0;
	do
		ret = io_uring_submit(&ring->uring);
	while (ret == -EINTR);
	if (ret >= 0)
		return 0; /* what the kernel left goes with the next one */
	/* Not submitted, yet still queued in the ring: the next submit would
	 * run them against requests and buffers their callers free on this
	 * error.  They become no-ops with no request behind them (their
	 * completions are skipped), and their requests are done. */
	sq = &ring->uring.sq;
	head = io_uring_smp_load_acquire(sq->khead);
	tail = sq->sqe_tail;
	for (; head != tail; head++) {
		struct io_uring_sqe *sqe = &sq->sqes[head & sq->ring_mask];
		struct kvs_store_io_req *r =
			(struct kvs_store_io_req *)(uintptr_t)sqe->user_data;

		io_uring_prep_nop(sqe);
		io_uring_sqe_set_data(sqe, NULL);
		if (r) {
			r->res = ret;
			r->done = true;
		}
	}
	return ret;
#else
	return 0;
#endif
}

static const struct kvs_store_io_ops default_ops = {
	.open = sys_open,
	.close = sys_close,
	.pread = sys_pread,
	.pwrite = sys_pwrite,
	.fsync = sys_fsync,
	.fdatasync = sys_fdatasync,
	.ftruncate = sys_ftruncate,
	.fallocate = sys_fallocate,
	.size = sys_size,
	.rename = sys_rename,
	.unlink = sys_unlink,
	.mkdir = sys_mkdir,
	.lock = sys_lock,
	.list = sys_list,
	.stat = sys_stat,
	.space = sys_space,
	.seek_data = sys_seek_data,
	.start = sys_start,
	.complete = sys_complete,
	.submit = sys_submit,
	.ctx = NULL,
};

const struct kvs_store_io_ops *kvs_store_io_default(void)
{
	return &default_ops;
}

#define FILL(m) (out->m = out->m ? out->m : default_ops.m)

void io_ops_fill(struct kvs_store_io_ops *out,
		 const struct kvs_store_io_ops *in)
{
	*out = in ? *in : default_ops;
	FILL(open);
	FILL(close);
	FILL(pread);
	FILL(pwrite);
	FILL(fsync);
	FILL(fdatasync);
	FILL(ftruncate);
	FILL(fallocate);
	FILL(size);
	FILL(rename);
	FILL(unlink);
	FILL(mkdir);
	FILL(lock);
	FILL(list);
	FILL(stat);
	FILL(space);
	FILL(seek_data);
	FILL(start);
	FILL(complete);
	FILL(submit);
}

#undef FILL

int ring_create(unsigned depth, struct kvs_store_ring **out)
{
#if KVS_HAVE_IO_URING
	struct kvs_store_ring *ring = calloc(1, sizeof(*ring));
	int err;

	if (!ring)
		return -ENOMEM;
	err = io_uring_queue_init(depth, &ring->uring, 0);
	if (err) {
		free(ring);
		return err;
	}
	ring->live = true;
	*out = ring;
	return 0;
#else
	return -ENOSYS;
#endif
}

int ring_create_batching(unsigned depth, int event_fd,
			 struct kvs_store_ring **out)
{
	struct kvs_store_ring *ring;
	int err = ring_create(depth, &ring);

	if (err)
		return err;
#if KVS_HAVE_IO_URING
	err = io_uring_register_eventfd(&ring->uring, event_fd);
	if (err) {
		ring_destroy(ring);
		return err;
	}
#endif
	ring->batching = true;
	*out = ring;
	return 0;
}

void ring_destroy(struct kvs_store_ring *ring)
{
	if (!ring)
		return;
#if KVS_HAVE_IO_URING
	io_uring_queue_exit(&ring->uring);
#endif
	free(ring);
}

int ring_register(struct kvs_store_ring *ring, const struct iovec *iov,
		  unsigned n)
{
#if KVS_HAVE_IO_URING
	int err = io_uring_register_buffers(&ring->uring, iov, n);

	if (err == 0)
		ring->registered = true;
	return err;
#else
	return -ENOSYS;
#endif
}

int io_run(struct kvs_store *s, struct kvs_store_io_req *reqs, unsigned n,
	   unsigned depth)
{
	unsigned next = 0, first_open = 0;
	int err;

	if (depth == 0)
		depth = 1;
	for (unsigned i = 0; i < n; i++)
		reqs[i].done = false;
	for (;;) {
		while (next < n && s->inflight < depth) {
			io_start(s, &reqs[next]);
			next++;
		}
		while (first_open < n && reqs[first_open].done)
			first_open++;
		if (first_open == n)
			return 0;
		err = io_wait(s, 1);
		if (err)
			return err;
	}
}

void io_start(struct kvs_store *s, struct kvs_store_io_req *req)
{
	int err = s->io->start(s->io->ctx, s->ring, req);

	if (err) {
		req->res = err;
		req->done = true;
	} else if (!req->done) {
		s->inflight++;
	}
}

int io_wait(struct kvs_store *s, unsigned min)
{
	int n = s->io->complete(s->io->ctx, s->ring, min);

	if (n < 0) {
		kvs_log(KVS_LOG_ERR, "store: waiting for I/O: %s",
			strerror(-n));
		return n;
	}
	s->inflight -= (unsigned)n < s->inflight ? (unsigned)n : s->inflight;
	return 0;
}
