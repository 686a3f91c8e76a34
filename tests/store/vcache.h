/*
 * vcache.h - a disk with a volatile write cache, under a file system that
 * keeps no more than POSIX promises, as a store I/O ops table: power loss
 * for the store tests (store.powercut).  One process, one directory.
 *
 * Every call is done for real on the directory (so the running store reads
 * back what it wrote, as from the page cache); the model remembers what
 * is not durable yet:
 *  - data: each pwrite and each WRITE request (run at once in @start, so
 *    @complete has nothing to wait for) is a pending write of its file,
 *    kept with its bytes;
 *  - size: ftruncate, fallocate and O_TRUNC are pending size changes;
 *  - fsync or fdatasync of a file makes its pending writes and size
 *    changes durable (fdatasync too: a size the data needs is part of it);
 *  - names: creating a file, rename and unlink are pending operations of
 *    the directory, durable only at the next fsync of the directory.
 *    Neither fsync of the file nor time makes a name durable.  An
 *    unlinked file's durable content is kept: a lost unlink revives it.
 *    mkdir is not modelled: the directory exists, durably, at the start.
 * Whatever is in the directory at vcache_start() is durable.  The power
 * goes before a chosen modelled operation (which never happens), or at
 * vcache_cut(): each file is rebuilt from its durable content by
 * replaying its pending operations in order, each write independently
 * applied whole, dropped, or torn (each 512-byte sector new or old), each
 * size change applied or not; the directory from its durable names plus a
 * random subset of its pending operations, in order.  Then the process
 * _exits: run the store under the model in a forked child.
 *
 * Processes die too (kill -9, at a chosen operation of theirs, which never
 * happens): the page cache survives them, so the files stay as written and
 * the model keeps what is not durable yet.  Its state lives in a shared
 * mapping (vcache_init), so that the next writer process, forked after the
 * death, goes on under the same model (vcache_resume) and a later power
 * cut also drops what dead processes wrote and nobody synced.
 */
#ifndef KVSTASH_TESTS_STORE_VCACHE_H
#define KVSTASH_TESTS_STORE_VCACHE_H

#include <dirent.h>
#include <stdarg.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "store_internal.h"
#include "store_test.h"

enum {
	VC_MAX_FILES = 64,
	VC_MAX_NAMES = 32,
	VC_MAX_DIR_OPS = 256,
	VC_MAX_FDS = 1024,
	VC_NAME_LEN = 48,
};

#define VC_SECTOR 512u

/* What the test hears from the model (members may be NULL but @die). */
struct vcache_hooks {
	/* the model cannot go on (a bug of the test): must not return */
	void (*die)(const char *msg);
	/* the power goes, after @ops modelled operations */
	void (*cut)(uint64_t ops);
	/* the writer process is killed, after @ops modelled operations */
	void (*died)(uint64_t ops);
	/* a segment file was unlinked */
	void (*unlinked)(uint64_t seg);
	/* at the cut: bytes of segment @seg that were not durable (pending
	 * writes; a header not yet durable) */
	void (*pending)(uint64_t seg, uint64_t off, uint64_t len);
};

static inline void vcache_cut(void) __attribute__((noreturn));

struct vc_pending {
	uint64_t off; /* write offset, or the new size */
	uint32_t len; /* bytes written; 0 for a size change */
	uint8_t *data;
};

struct vc_inode {
	uint8_t *bytes; /* durable content */
	uint64_t len, cap;
	struct vc_pending *ops;
	size_t nops, ops_cap;
};

struct vc_name {
	char s[VC_NAME_LEN];
	int ino;
};

struct vc_names {
	struct vc_name v[VC_MAX_NAMES];
	size_t n;
};

enum vc_dir_op_kind { VC_CREATE, VC_RENAME, VC_UNLINK };

struct vc_dir_op {
	enum vc_dir_op_kind kind;
	char from[VC_NAME_LEN], to[VC_NAME_LEN];
	int ino;
};

#define VC_FD_DIR (-2)
#define VC_ARENA_BYTES (512ull << 20) /* reserved, touched as used */

struct vc_state {
	char dir[4096];
	size_t dir_len;
	struct vc_inode ino[VC_MAX_FILES];
	int nino;
	struct vc_names durable, now;
	struct vc_dir_op dops[VC_MAX_DIR_OPS];
	size_t ndops;
	int fd_ino[VC_MAX_FDS]; /* -1 not ours, VC_FD_DIR the directory */
	uint64_t ops, cut_at; /* the power goes before op cut_at */
	uint64_t events, cut_event, cut_after; /* or cut_after ops past the
						* cut_event-th segment creation
						* or unlink */
	uint64_t rng;
	uint64_t max_ops;
	uint64_t die_at; /* this process dies before op die_at (0: no) */
	bool early; /* the power goes soon after vcache_arm */
	const struct vcache_hooks *hooks;
	uint64_t arena_used; /* bump allocator of the mapping's rest */
	uint8_t arena[];
};

/* The model, shared by the writer processes of one power cycle. */
static struct vc_state *vcp;
#define vc (*vcp)

static inline void vc_fail(const char *fmt, ...)
	__attribute__((noreturn, format(printf, 1, 2)));

static inline void vc_fail(const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	vc.hooks->die(msg);
	_exit(1);
}

/* Memory of the shared mapping: never freed, all of it given back at
 * vcache_start. */
static inline void *vc_alloc(uint64_t n)
{
	uint64_t at = (vc.arena_used + 15) & ~15ull;

	if (at + n > VC_ARENA_BYTES - sizeof(struct vc_state))
		vc_fail("model: out of memory");
	vc.arena_used = at + n;
	return vc.arena + at;
}

/* Writes into an image of the model's memory (@shared) or of the
 * process's (a file rebuilt at the cut). */
static inline void vc_image_write_in(bool shared, uint8_t **buf, uint64_t *len,
				     uint64_t *cap, uint64_t off,
				     const uint8_t *data, uint64_t n)
{
	if (!n)
		return;
	if (off + n > *cap) {
		uint64_t c = (off + n) * 2;
		uint8_t *b = shared ? vc_alloc(c) : realloc(*buf, c);

		if (!b)
			vc_fail("out of memory");
		if (shared && *len)
			memcpy(b, *buf, *len);
		*buf = b;
		*cap = c;
	}
	if (off > *len)
		memset(*buf + *len, 0, off - *len);
	memcpy(*buf + off, data, n);
	if (off + n > *len)
		*len = off + n;
}

static inline void vc_image_resize_in(bool shared, uint8_t **buf, uint64_t *len,
				      uint64_t *cap, uint64_t size)
{
	static const uint8_t zero[VC_SECTOR];

	while (*len < size) {
		uint64_t n = size - *len < VC_SECTOR ? size - *len : VC_SECTOR;

		vc_image_write_in(shared, buf, len, cap, *len, zero, n);
	}
	*len = size;
}

#define vc_image_write(...) vc_image_write_in(true, __VA_ARGS__)
#define vc_image_resize(...) vc_image_resize_in(true, __VA_ARGS__)

static inline void vc_pending_add(int ino, uint64_t off, const void *data,
				  uint32_t len)
{
	struct vc_inode *f = &vc.ino[ino];
	struct vc_pending *op;

	if (f->nops == f->ops_cap) {
		size_t c = f->ops_cap ? f->ops_cap * 2 : 64;
		struct vc_pending *v = vc_alloc(c * sizeof(*v));

		if (f->nops)
			memcpy(v, f->ops, f->nops * sizeof(*v));
		f->ops = v;
		f->ops_cap = c;
	}
	op = &f->ops[f->nops++];
	op->off = off;
	op->len = len;
	op->data = NULL;
	if (len) {
		op->data = vc_alloc(len);
		memcpy(op->data, data, len);
	}
}

/* fsync / fdatasync: everything pending on the file is durable. */
static inline void vc_inode_commit(int ino)
{
	struct vc_inode *f = &vc.ino[ino];

	for (size_t i = 0; i < f->nops; i++) {
		struct vc_pending *op = &f->ops[i];

		if (op->len)
			vc_image_write(&f->bytes, &f->len, &f->cap, op->off,
				       op->data, op->len);
		else
			vc_image_resize(&f->bytes, &f->len, &f->cap, op->off);
	}
	f->nops = 0;
}

/* Whether inode @ino is still named, pending, or open. */
static inline bool vc_inode_used(int ino)
{
	for (size_t i = 0; i < vc.now.n; i++)
		if (vc.now.v[i].ino == ino)
			return true;
	for (size_t i = 0; i < vc.durable.n; i++)
		if (vc.durable.v[i].ino == ino)
			return true;
	for (size_t i = 0; i < vc.ndops; i++)
		if (vc.dops[i].ino == ino)
			return true;
	for (int fd = 0; fd < VC_MAX_FDS; fd++)
		if (vc.fd_ino[fd] == ino)
			return true;
	return false;
}

static inline int vc_inode_new(void)
{
	int ino = -1;

	if (vc.nino < VC_MAX_FILES)
		ino = vc.nino++;
	/* writers come and go: an inode no name, operation or file
	 * descriptor refers to any more is free */
	for (int i = 0; ino < 0 && i < VC_MAX_FILES; i++)
		if (!vc_inode_used(i))
			ino = i;
	if (ino < 0)
		vc_fail("model: more than %d files", VC_MAX_FILES);
	memset(&vc.ino[ino], 0, sizeof(vc.ino[0]));
	return ino;
}

static inline int vc_names_find(const struct vc_names *ns, const char *s)
{
	for (size_t i = 0; i < ns->n; i++)
		if (!strcmp(ns->v[i].s, s))
			return (int)i;
	return -1;
}

static inline void vc_names_set(struct vc_names *ns, const char *s, int ino)
{
	int i = vc_names_find(ns, s);

	if (i < 0) {
		size_t len = strlen(s);

		if (ns->n == VC_MAX_NAMES || len >= VC_NAME_LEN)
			vc_fail("model: name %s: too many or too long", s);
		i = (int)ns->n++;
		memcpy(ns->v[i].s, s, len + 1);
	}
	ns->v[i].ino = ino;
}

static inline void vc_names_del(struct vc_names *ns, const char *s)
{
	int i = vc_names_find(ns, s);

	if (i >= 0)
		ns->v[i] = ns->v[--ns->n];
}

static inline void vc_dir_op_add(enum vc_dir_op_kind kind, const char *from,
				 const char *to, int ino)
{
	struct vc_dir_op *d;

	if (vc.ndops == VC_MAX_DIR_OPS)
		vc_fail("model: more than %d directory ops", VC_MAX_DIR_OPS);
	d = &vc.dops[vc.ndops++];
	d->kind = kind;
	snprintf(d->from, VC_NAME_LEN, "%s", from);
	snprintf(d->to, VC_NAME_LEN, "%s", to ? to : "");
	d->ino = ino;
}

/* The name of @path in the store directory, or NULL (the directory
 * itself sets *@is_dir). */
static const char *vc_name_in_dir(const char *path, bool *is_dir)
{
	*is_dir = !strcmp(path, vc.dir);
	if (strncmp(path, vc.dir, vc.dir_len) || path[vc.dir_len] != '/' ||
	    strchr(path + vc.dir_len + 1, '/') ||
	    strlen(path + vc.dir_len + 1) >= VC_NAME_LEN)
		return NULL;
	return path + vc.dir_len + 1;
}

static inline int vc_fd_inode(int fd)
{
	if (fd < 0 || fd >= VC_MAX_FDS || vc.fd_ino[fd] == -1)
		vc_fail("model: fd %d is not a store file", fd);
	return vc.fd_ino[fd];
}

/* Counts one modelled operation; the power goes before the cut's one.
 * @seg_event: it creates or unlinks a segment. */
static inline void vcache_die(void) __attribute__((noreturn));

static inline void vc_tick(bool seg_event)
{
	if (seg_event && ++vc.events == vc.cut_event)
		vc.cut_at = vc.ops + 1 + vc.cut_after;
	if (++vc.ops == vc.cut_at)
		vcache_cut();
	if (vc.ops == vc.die_at)
		vcache_die();
}

static inline bool vc_is_segment(const char *name)
{
	uint64_t id;

	return name && seg_name_parse(name, &id) == 0;
}

static inline uint64_t vc_real_size(int fd)
{
	uint64_t size = 0;

	kvs_store_io_default()->size(NULL, fd, &size);
	return size;
}

static inline int vc_open(void *ctx, const char *path, int flags, mode_t mode)
{
	bool is_dir;
	const char *name = vc_name_in_dir(path, &is_dir);
	int known = name ? vc_names_find(&vc.now, name) : -1;
	int fd, ino;

	if (!name && !is_dir)
		vc_fail("model: open outside the store: %s", path);
	if (name && (flags & O_CREAT) && known < 0)
		vc_tick(vc_is_segment(name));
	fd = kvs_store_io_default()->open(NULL, path, flags, mode);
	if (fd < 0)
		return fd;
	if (fd >= VC_MAX_FDS)
		vc_fail("model: fd %d too high", fd);
	if (is_dir) {
		vc.fd_ino[fd] = VC_FD_DIR;
		return fd;
	}
	if (known < 0) {
		ino = vc_inode_new();
		vc_names_set(&vc.now, name, ino);
		vc_dir_op_add(VC_CREATE, name, NULL, ino);
	} else {
		ino = vc.now.v[known].ino;
		if (flags & O_TRUNC)
			vc_pending_add(ino, 0, NULL, 0);
	}
	vc.fd_ino[fd] = ino;
	return fd;
}

static inline int vc_close(void *ctx, int fd)
{
	if (fd >= 0 && fd < VC_MAX_FDS)
		vc.fd_ino[fd] = -1;
	return kvs_store_io_default()->close(NULL, fd);
}

static inline ssize_t vc_pwrite(void *ctx, int fd, const void *buf, size_t len,
				off_t off)
{
	int ino = vc_fd_inode(fd);
	ssize_t n;

	if (ino == VC_FD_DIR)
		vc_fail("model: write to the directory");
	vc_tick(false);
	n = kvs_store_io_default()->pwrite(NULL, fd, buf, len, off);
	if (n > 0)
		vc_pending_add(ino, (uint64_t)off, buf, (uint32_t)n);
	return n;
}

static inline int vc_fsync(void *ctx, int fd)
{
	int ino = vc_fd_inode(fd);

	vc_tick(false);
	if (ino == VC_FD_DIR) {
		vc.durable = vc.now;
		vc.ndops = 0;
	} else {
		vc_inode_commit(ino);
	}
	/* what survives is the model's business, not the real disk's */
	return 0;
}

/* A size change that was done (@err 0) is pending on its file. */
static inline int vc_size_changed(int fd, int err)
{
	if (!err)
		vc_pending_add(vc_fd_inode(fd), vc_real_size(fd), NULL, 0);
	return err;
}

static inline int vc_ftruncate(void *ctx, int fd, off_t len)
{
	vc_fd_inode(fd);
	vc_tick(false);
	return vc_size_changed(
		fd, kvs_store_io_default()->ftruncate(NULL, fd, len));
}

static inline int vc_fallocate(void *ctx, int fd, off_t len)
{
	vc_fd_inode(fd);
	vc_tick(false);
	return vc_size_changed(
		fd, kvs_store_io_default()->fallocate(NULL, fd, len));
}

static inline int vc_rename(void *ctx, const char *from, const char *to)
{
	bool d1, d2;
	const char *a = vc_name_in_dir(from, &d1), *b = vc_name_in_dir(to, &d2);
	int i, err;

	if (!a || !b || (i = vc_names_find(&vc.now, a)) < 0)
		vc_fail("model: rename %s %s", from, to);
	vc_tick(false);
	err = kvs_store_io_default()->rename(NULL, from, to);
	if (err)
		return err;
	vc_names_set(&vc.now, b, vc.now.v[i].ino);
	vc_names_del(&vc.now, a);
	vc_dir_op_add(VC_RENAME, a, b, -1);
	return 0;
}

static inline int vc_unlink(void *ctx, const char *path)
{
	bool is_dir;
	const char *name = vc_name_in_dir(path, &is_dir);
	uint64_t id;
	int err;

	if (!name)
		vc_fail("model: unlink %s", path);
	vc_tick(vc_is_segment(name));
	err = kvs_store_io_default()->unlink(NULL, path);
	if (err)
		return err;
	vc_names_del(&vc.now, name);
	vc_dir_op_add(VC_UNLINK, name, NULL, -1);
	if (seg_name_parse(name, &id) == 0 && vc.hooks->unlinked)
		vc.hooks->unlinked(id);
	return 0;
}

/* Requests run at once: a read for real, a write or sync through the
 * model. */
static inline int vc_start(void *ctx, struct kvs_store_ring *ring,
			   struct kvs_store_io_req *req)
{
	if (req->op == KVS_STORE_IO_READ)
		req->res = (int32_t)kvs_store_io_default()->pread(
			NULL, req->fd, req->buf, req->len, (off_t)req->off);
	else if (req->op == KVS_STORE_IO_SYNC)
		req->res = vc_fsync(ctx, req->fd);
	else
		req->res = (int32_t)vc_pwrite(ctx, req->fd, req->buf, req->len,
					      (off_t)req->off);
	req->done = true;
	return 0;
}

static inline int vc_complete(void *ctx, struct kvs_store_ring *ring,
			      unsigned min)
{
	return 0; /* every request finished in vc_start */
}

/* The model's ops table (the other members: the default's). */
static const struct kvs_store_io_ops vcache_ops = {
	.open = vc_open,
	.close = vc_close,
	.pwrite = vc_pwrite,
	.fsync = vc_fsync,
	.fdatasync = vc_fsync,
	.ftruncate = vc_ftruncate,
	.fallocate = vc_fallocate,
	.rename = vc_rename,
	.unlink = vc_unlink,
	.start = vc_start,
	.complete = vc_complete,
};

static inline uint8_t *vc_slurp(const char *path, uint64_t *len)
{
	struct stat st;
	uint8_t *buf;
	int fd = open(path, O_RDONLY);

	if (fd < 0 || fstat(fd, &st))
		vc_fail("model: read %s: %s", path, strerror(errno));
	buf = vc_alloc(st.st_size ? (uint64_t)st.st_size : 1);
	if (pread(fd, buf, (size_t)st.st_size, 0) != st.st_size)
		vc_fail("model: read %s", path);
	close(fd);
	*len = (uint64_t)st.st_size;
	return buf;
}

/* vcache_init - maps the model's state, shared with the processes forked
 * after it; once per test program. */
static inline void vcache_init(void)
{
	vcp = mmap(NULL, VC_ARENA_BYTES, PROT_READ | PROT_WRITE,
		   MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (vcp == MAP_FAILED) {
		fprintf(stderr, "model: cannot map its state\n");
		abort();
	}
}

/* Where this process's power cut or death falls, from vc.rng; a process
 * after a killed one (@resumed) is cut early half the time. */
static inline void vc_choose(bool may_die, bool resumed)
{
	vc.cut_at = vc.cut_event = vc.cut_after = vc.die_at = 0;
	vc.early = false;
	if (may_die) {
		/* killed, not a power cut: at a random operation (half the
		 * time past the stream's end: it closes the store first) */
		vc.die_at = vc.ops + 1 + test_rand(&vc.rng) % (2 * vc.max_ops);
		return;
	}
	if (resumed && test_rand(&vc.rng) % 2) {
		vc.early = true;
		return;
	}
	switch (test_rand(&vc.rng) % 4) {
	case 0:
		/* early: before this process wrote much of its own (armed by
		 * vcache_arm once the store is open) */
		vc.early = true;
		break;
	case 1:
	case 2:
		vc.cut_at = vc.ops + 1 + test_rand(&vc.rng) % vc.max_ops;
		break;
	default:
		vc.cut_event = vc.events + 1 + test_rand(&vc.rng) % 8;
		vc.cut_after = test_rand(&vc.rng) % 12;
	}
}

/*
 * vcache_start - model @dir, whose content is durable now; @hooks (kept)
 * hear from it.  With @may_die this process is killed at a random
 * operation within its first @max_ops; otherwise the power goes before a
 * random modelled operation within the first @max_ops or, one time in
 * three, within a few operations of a segment creation or unlink (a
 * roll, a reclaim and its carries), where most can go wrong.  @seed makes
 * the choices.
 */
static inline void vcache_start(const char *dir, uint64_t seed,
				uint64_t max_ops, bool may_die,
				const struct vcache_hooks *hooks)
{
	struct dirent *de;
	DIR *d = opendir(dir);
	char path[4200];

	memset(vcp, 0, sizeof(*vcp));
	snprintf(vc.dir, sizeof(vc.dir), "%s", dir);
	vc.dir_len = strlen(vc.dir);
	memset(vc.fd_ino, 0xff, sizeof(vc.fd_ino));
	vc.rng = seed;
	vc.max_ops = max_ops;
	vc.hooks = hooks;
	vc_choose(may_die, false);
	if (!d)
		vc_fail("model: opendir %s", dir);
	while ((de = readdir(d))) {
		int ino;

		if (de->d_name[0] == '.')
			continue;
		ino = vc_inode_new();
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		vc.ino[ino].bytes = vc_slurp(path, &vc.ino[ino].len);
		vc.ino[ino].cap = vc.ino[ino].len;
		vc_names_set(&vc.now, de->d_name, ino);
	}
	closedir(d);
	vc.durable = vc.now;
}

/*
 * vcache_resume - a new writer process, forked after the previous one
 * died, goes on under the same model: what it left not durable still is.
 * Its death (@may_die) or the power cut is chosen as vcache_start does,
 * except that half its power cuts are early (vcache_arm): what a killed
 * process left not durable is most at risk before the next one writes.
 */
static inline void vcache_resume(uint64_t max_ops, bool may_die)
{
	memset(vc.fd_ino, 0xff, sizeof(vc.fd_ino)); /* its files closed */
	vc.max_ops = max_ops;
	vc_choose(may_die, true);
}

/* The writer is ready (its store open): an early power cut is placed
 * within its next few operations. */
static inline void vcache_arm(void)
{
	if (vc.early)
		vc.cut_at = vc.ops + 1 + test_rand(&vc.rng) % 6;
}

/* The process is killed: what it wrote stays as written (in the page
 * cache), what was pending stays pending; the hooks hear first. */
static inline void vcache_die(void)
{
	if (vc.hooks->died)
		vc.hooks->died(vc.ops);
	_exit(0);
}

/* ---- the power cut -------------------------------------------------- */

/* Bytes of file @name not durable at the cut, to the hooks if a segment. */
static inline void vc_region_add(const char *name, uint64_t off, uint64_t len)
{
	uint64_t id;

	if (len && seg_name_parse(name, &id) == 0 && vc.hooks->pending)
		vc.hooks->pending(id, off, len);
}

/* The file behind @ino as the power cut leaves it, written to @path. */
static inline void vc_write_after_cut(const char *path, const char *name,
				      int ino)
{
	struct vc_inode *f = &vc.ino[ino];
	uint64_t len = 0, cap = 0;
	uint8_t *img = NULL;
	int fd;

	vc_image_write_in(false, &img, &len, &cap, 0, f->bytes, f->len);
	/* a segment whose header is not durable yet */
	if (f->len < SEG_HEADER_SIZE)
		vc_region_add(name, 0, SEG_HEADER_SIZE);
	for (size_t i = 0; i < f->nops; i++) {
		const struct vc_pending *op = &f->ops[i];
		unsigned fate = (unsigned)(test_rand(&vc.rng) % 3);

		vc_region_add(name, op->off, op->len);
		if (!op->len) {
			if (fate)
				vc_image_resize_in(false, &img, &len, &cap,
						   op->off);
			continue;
		}
		if (fate == 0) { /* fully applied */
			vc_image_write_in(false, &img, &len, &cap, op->off,
					  op->data, op->len);
			continue;
		}
		if (fate == 1) /* dropped */
			continue;
		/* torn: each sector new or old */
		for (uint64_t p = op->off; p < op->off + op->len;) {
			uint64_t next = (p / VC_SECTOR + 1) * VC_SECTOR;

			if (next > op->off + op->len)
				next = op->off + op->len;
			if (test_rand(&vc.rng) & 1)
				vc_image_write_in(false, &img, &len, &cap, p,
						  op->data + (p - op->off),
						  next - p);
			p = next;
		}
	}
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0 || (len && pwrite(fd, img, len, 0) != (ssize_t)len))
		vc_fail("model: rewrite %s", path);
	close(fd);
	free(img);
}

/* The power goes now: the hooks' cut, then each file of the directory
 * as the cut leaves it, then _exit(0). */
static inline void vcache_cut(void)
{
	struct vc_names after = vc.durable;
	struct dirent *de;
	char path[4400];
	DIR *d;

	if (vc.hooks->cut)
		vc.hooks->cut(vc.ops);
	for (size_t i = 0; i < vc.ndops; i++) {
		const struct vc_dir_op *op = &vc.dops[i];
		int at;

		if (test_rand(&vc.rng) & 1)
			continue; /* this one never reached the disk */
		if (op->kind == VC_CREATE) {
			vc_names_set(&after, op->from, op->ino);
		} else if (op->kind == VC_UNLINK) {
			vc_names_del(&after, op->from);
		} else if ((at = vc_names_find(&after, op->from)) >= 0) {
			vc_names_set(&after, op->to, after.v[at].ino);
			vc_names_del(&after, op->from);
		}
	}
	d = opendir(vc.dir);
	if (!d)
		vc_fail("model: opendir %s", vc.dir);
	while ((de = readdir(d)))
		if (de->d_name[0] != '.')
			unlinkat(dirfd(d), de->d_name, 0);
	closedir(d);
	for (size_t i = 0; i < after.n; i++) {
		snprintf(path, sizeof(path), "%s/%s", vc.dir, after.v[i].s);
		vc_write_after_cut(path, after.v[i].s, after.v[i].ino);
	}
	_exit(0);
}

#endif
