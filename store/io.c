/*
 * io.c - the default I/O ops table: plain system calls (errors as -errno)
 * and an io_uring engine that runs a batch of reads/writes with a sliding
 * window of at most `depth` in flight, using registered buffers where the
 * request names one.  Without liburing, batches run one call at a time.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kvs_config.h"
#include "store_internal.h"

#if KVS_HAVE_IO_URING
#include <liburing.h>
#endif

struct kvs_store_ring {
#if KVS_HAVE_IO_URING
	struct io_uring uring;
#endif
	unsigned depth;
	bool registered;
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

static int sys_rename(void *ctx, const char *from, const char *to)
{
	return rename(from, to) ? -errno : 0;
}

static int sys_unlink(void *ctx, const char *path)
{
	return unlink(path) ? -errno : 0;
}

static void submit_sync(struct kvs_store_io_req *reqs, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		struct kvs_store_io_req *r = &reqs[i];

		if (r->op == KVS_STORE_IO_READ)
			r->res = (int32_t)sys_pread(NULL, r->fd, r->buf,
						    r->len, (off_t)r->off);
		else
			r->res = (int32_t)sys_pwrite(NULL, r->fd, r->buf,
						     r->len, (off_t)r->off);
	}
}

#if KVS_HAVE_IO_URING
static void prep(struct io_uring_sqe *sqe, struct kvs_store_io_req *r,
		 bool fixed)
{
	if (r->op == KVS_STORE_IO_READ) {
		if (fixed && r->buf_index >= 0)
			io_uring_prep_read_fixed(sqe, r->fd, r->buf, r->len,
						 r->off, r->buf_index);
		else
			io_uring_prep_read(sqe, r->fd, r->buf, r->len,
					   r->off);
	} else {
		if (fixed && r->buf_index >= 0)
			io_uring_prep_write_fixed(sqe, r->fd, r->buf, r->len,
						  r->off, r->buf_index);
		else
			io_uring_prep_write(sqe, r->fd, r->buf, r->len,
					    r->off);
	}
}

static int submit_uring(struct kvs_store_ring *ring,
			struct kvs_store_io_req *reqs, unsigned n,
			unsigned depth)
{
	unsigned next = 0, inflight = 0, done = 0;
	struct io_uring_cqe *cqe;
	int err = 0;

	if (depth == 0 || depth > ring->depth)
		depth = ring->depth;
	while (done < n) {
		while (err == 0 && inflight < depth && next < n) {
			struct io_uring_sqe *sqe =
				io_uring_get_sqe(&ring->uring);

			if (!sqe)
				break;
			prep(sqe, &reqs[next], ring->registered);
			io_uring_sqe_set_data64(sqe, next);
			next++;
			inflight++;
		}
		if (inflight == 0) {
			/* could not submit at all: fail the rest */
			for (; next < n; next++, done++)
				reqs[next].res = err;
			break;
		}
		int ret = io_uring_submit_and_wait(&ring->uring, 1);

		if (ret < 0 && ret != -EINTR && ret != -EAGAIN &&
		    ret != -EBUSY)
			err = ret;
		unsigned head, seen = 0;

		io_uring_for_each_cqe(&ring->uring, head, cqe) {
			reqs[cqe->user_data].res = cqe->res;
			seen++;
		}
		io_uring_cq_advance(&ring->uring, seen);
		inflight -= seen;
		done += seen;
	}
	return 0;
}
#endif

static int sys_submit(void *ctx, struct kvs_store_ring *ring,
		      struct kvs_store_io_req *reqs, unsigned n,
		      unsigned depth)
{
#if KVS_HAVE_IO_URING
	if (ring)
		return submit_uring(ring, reqs, n, depth);
#endif
	submit_sync(reqs, n);
	return 0;
}

static const struct kvs_store_io_ops default_ops = {
	.open = sys_open,
	.close = sys_close,
	.pread = sys_pread,
	.pwrite = sys_pwrite,
	.fsync = sys_fsync,
	.fdatasync = sys_fdatasync,
	.ftruncate = sys_ftruncate,
	.rename = sys_rename,
	.unlink = sys_unlink,
	.submit = sys_submit,
	.ctx = NULL,
};

const struct kvs_store_io_ops *kvs_store_io_default(void)
{
	return &default_ops;
}

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
	ring->depth = depth;
	*out = ring;
	return 0;
#else
	return -ENOSYS;
#endif
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
