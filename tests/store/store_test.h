/*
 * store_test.h - helpers shared by the store tests: small sealed blocks
 * made with kvs_block_seal, scratch store directories on the real disk
 * (under the build directory, where O_DIRECT works), and a fault-injecting
 * I/O ops table wrapping the real one.
 */
#ifndef KVSTASH_TESTS_STORE_TEST_H
#define KVSTASH_TESTS_STORE_TEST_H

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kvstash/kvformat.h"
#include "kvstash/store.h"

static inline uint64_t test_rand(uint64_t *state)
{
	uint64_t x = *state += 0x9e3779b97f4a7c15ull;

	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/* A sealed block with @ident and @heads KV heads (head_dim 32,
 * S=R=G=32), values from @seed, malloc'd. */
static inline uint8_t *test_block_ident(const struct kvs_ident *ident,
					uint64_t seed, uint16_t heads,
					size_t *len)
{
	struct kvs_shape shape = {
		.kv_heads = heads,
		.head_dim = 32,
		.group = 32,
		.bits = 2,
		.meta_type = KVS_DTYPE_F16,
		.span = 32,
		.residual = 32,
	};
	size_t n = (size_t)heads * 32 * 32;
	float *kv = malloc(2 * n * sizeof(float));
	uint64_t st = seed * 104729 + 7;
	uint8_t *obj = NULL;

	if (!kv)
		return NULL;
	for (size_t i = 0; i < 2 * n; i++)
		kv[i] = (float)(test_rand(&st) % 2000) / 100.0f - 10.0f;
	if (kvs_block_seal(&shape, ident, KVS_DTYPE_F32, kv, kv + n, 0, &obj,
			   len) != 0)
		obj = NULL;
	free(kv);
	return obj;
}

/* The ident of test key @seed: a span id drawn from @seed * 7919 + @salt,
 * layer seed % 4, first position seed * 32. */
static inline void test_ident(uint64_t seed, uint64_t salt,
			      struct kvs_ident *ident)
{
	uint64_t st = seed * 7919 + salt;

	memset(ident, 0, sizeof(*ident));
	for (int i = 0; i < KVS_ID_SIZE; i += 8) {
		uint64_t r = test_rand(&st);

		memcpy(ident->block_id + i, &r, 8);
	}
	ident->layer = (uint32_t)(seed % 4);
	ident->first_pos = seed * 32;
}

/* The block of @ident with values from @value_seed, and its key. */
static inline uint8_t *test_block_keyed(const struct kvs_ident *ident,
					uint64_t value_seed, uint16_t heads,
					size_t *len, struct kvs_store_key *key)
{
	uint8_t *obj = test_block_ident(ident, value_seed, heads, len);

	if (obj && key)
		kvs_store_key_of(obj, *len, key);
	return obj;
}

/* A sealed block for @seed (its own span id, layer seed % 4). */
static inline uint8_t *test_block(uint64_t seed, uint16_t heads, size_t *len,
				  struct kvs_store_key *key)
{
	struct kvs_ident ident;

	test_ident(seed, 1, &ident);
	return test_block_keyed(&ident, seed, heads, len, key);
}

/* Version @version of the block of key @key_seed: every version shares
 * its ident (so its store key) and differs in its values; malloc'd. */
static inline uint8_t *test_block_version(uint64_t key_seed, uint64_t version,
					  uint16_t heads, size_t *len,
					  struct kvs_store_key *key)
{
	struct kvs_ident ident;

	test_ident(key_seed, 11, &ident);
	return test_block_keyed(&ident, key_seed * 1000003 + version, heads,
				len, key);
}

/* 0 when @key reads back as @obj (@len bytes), 1 when it reads back as
 * other bytes, else the get's error (-KVS_ENOTFOUND, -KVS_ECORRUPT: a
 * miss). */
static inline int test_get_cmp(struct kvs_store *s,
			       const struct kvs_store_key *key,
			       const uint8_t *obj, size_t len)
{
	struct kvs_store_ref *ref;
	int err = kvs_store_get(s, key, &ref);

	if (err)
		return err;
	err = kvs_store_ref_len(ref) != len ||
	      memcmp(kvs_store_ref_data(ref), obj, len) != 0;
	kvs_store_ref_release(ref);
	return err;
}

/* A file system refusing fallocate: a head segment is then a sparse file. */
static inline int test_no_fallocate(void *ctx, int fd, off_t len)
{
	return -EOPNOTSUPP;
}

/*
 * test_in_tmpfs - runs @fn(@base) in a child with its own mount namespace,
 * on a fresh tmpfs of @size ("2m") mounted at @base and gone with the
 * child.  Returns the child's exit status: 77 when the namespace or the
 * mount is not allowed here (not root, containers), 0 when @fn returned.
 */
static inline int test_in_tmpfs(const char *base, const char *size,
				void (*fn)(const char *base))
{
	char opts[64];
	int status;
	pid_t pid;

	snprintf(opts, sizeof(opts), "size=%s", size);
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		if (unshare(CLONE_NEWNS) ||
		    mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) ||
		    mount("tmpfs", base, "tmpfs", 0, opts)) {
			fprintf(stderr, "cannot mount a tmpfs: %s\n",
				strerror(errno));
			_exit(77);
		}
		fn(base);
		_exit(0);
	}
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
		return -1;
	return WEXITSTATUS(status);
}

/* An encoded block and its key. */
struct test_blk {
	uint8_t *obj;
	size_t len;
	struct kvs_store_key key;
};

/* b[i] = test_block(seed0 + i) with 1 + i % max_heads heads; 0, or -1
 * (b[] then freed). */
static inline int test_blocks_make(struct test_blk *b, size_t n, uint64_t seed0,
				   uint16_t max_heads)
{
	for (size_t i = 0; i < n; i++) {
		b[i].obj = test_block(seed0 + i, (uint16_t)(1 + i % max_heads),
				      &b[i].len, &b[i].key);
		if (!b[i].obj) {
			while (i--)
				free(b[i].obj);
			return -1;
		}
	}
	return 0;
}

static inline void test_blocks_free(struct test_blk *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(b[i].obj);
}

/* A fresh directory under $KVS_TEST_DIR (or .), removed by test_rmdir. */
static inline char *test_mkdir(void)
{
	const char *base = getenv("KVS_TEST_DIR");
	char *path = malloc(4096);

	snprintf(path, 4096, "%s/storetest-XXXXXX", base ? base : ".");
	if (!mkdtemp(path)) {
		free(path);
		return NULL;
	}
	return path;
}

static inline void test_rmdir(char *path)
{
	char cmd[4200];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", path);
	if (system(cmd) != 0)
		fprintf(stderr, "cannot remove %s\n", path);
	free(path);
}

static inline void test_opts(struct kvs_store_opts *o, uint64_t dram,
			     uint64_t nvme, uint64_t seg)
{
	kvs_store_opts_default(o);
	o->dram_capacity = dram;
	o->nvme_capacity = nvme;
	o->segment_size = seg;
}

/* ---- fault injection ------------------------------------------------- */

enum test_fault {
	FAULT_NONE = 0,
	FAULT_EIO, /* write fails, nothing written */
	FAULT_ENOSPC, /* write fails, nothing written */
	FAULT_SHORT, /* half the bytes written, short count returned */
	FAULT_TORN, /* half the bytes written, then EIO */
	FAULT_SYNC_EIO, /* fdatasync / fsync fail */
	FAULT_FULL, /* every write and file creation: ENOSPC */
	FAULT_NO_DIRECT, /* open with O_DIRECT: EINVAL (as old tmpfs) */
	FAULT_MKDIR, /* mkdir: EACCES */
	FAULT_LOCK, /* taking the directory's lock: ENOLCK */
	FAULT_LIST, /* listing a directory: EACCES (opendir) */
	FAULT_LIST_EIO, /* listing: EIO after the first name (readdir) */
};

struct test_faults {
	enum test_fault fault;
	int countdown; /* writes to let through before failing; -1 never */
	int injected;
};

static inline bool fault_fire(struct test_faults *f)
{
	if (f->fault == FAULT_NONE || f->countdown < 0)
		return false;
	if (f->countdown > 0) {
		f->countdown--;
		return false;
	}
	f->injected++;
	return true;
}

static inline int fault_open(void *ctx, const char *path, int flags,
			     mode_t mode)
{
	struct test_faults *f = ctx;

	if (f->fault == FAULT_NO_DIRECT && (flags & O_DIRECT)) {
		f->injected++;
		return -EINVAL;
	}
	if (f->fault == FAULT_FULL && (flags & O_CREAT) &&
	    strstr(path, "seg-")) {
		f->injected++;
		return -ENOSPC;
	}
	return kvs_store_io_default()->open(NULL, path, flags, mode);
}

static inline ssize_t fault_write(struct test_faults *f, int fd,
				  const void *buf, size_t len, off_t off)
{
	const struct kvs_store_io_ops *d = kvs_store_io_default();

	if (f->fault == FAULT_FULL) {
		f->injected++;
		return -ENOSPC;
	}
	if (f->fault == FAULT_SYNC_EIO || !fault_fire(f))
		return d->pwrite(NULL, fd, buf, len, off);
	switch (f->fault) {
	case FAULT_EIO:
		return -EIO;
	case FAULT_ENOSPC:
		return -ENOSPC;
	case FAULT_SHORT:
		return d->pwrite(NULL, fd, buf, len / 2 / 4096 * 4096, off);
	case FAULT_TORN:
		d->pwrite(NULL, fd, buf, len / 2 / 4096 * 4096, off);
		return -EIO;
	default:
		return d->pwrite(NULL, fd, buf, len, off);
	}
}

static inline ssize_t fault_pwrite(void *ctx, int fd, const void *buf,
				   size_t len, off_t off)
{
	/* segment headers and superblocks: only a full disk fails them */
	struct test_faults *f = ctx;

	if (f->fault == FAULT_FULL)
		return -ENOSPC;
	return kvs_store_io_default()->pwrite(NULL, fd, buf, len, off);
}

static inline int fault_sync(void *ctx, int fd)
{
	struct test_faults *f = ctx;

	if (f->fault == FAULT_SYNC_EIO && fault_fire(f))
		return -EIO;
	return kvs_store_io_default()->fdatasync(NULL, fd);
}

static inline int fault_fallocate(void *ctx, int fd, off_t len)
{
	struct test_faults *f = ctx;

	if (f->fault == FAULT_FULL)
		return -ENOSPC;
	return kvs_store_io_default()->fallocate(NULL, fd, len);
}

static inline int fault_mkdir(void *ctx, const char *path, mode_t mode)
{
	struct test_faults *f = ctx;

	if (f->fault == FAULT_MKDIR) {
		f->injected++;
		return -EACCES;
	}
	return kvs_store_io_default()->mkdir(NULL, path, mode);
}

static inline int fault_lock(void *ctx, int fd, bool exclusive)
{
	struct test_faults *f = ctx;

	if (f->fault == FAULT_LOCK) {
		f->injected++;
		return -ENOLCK;
	}
	return kvs_store_io_default()->lock(NULL, fd, exclusive);
}

static inline int fault_list(void *ctx, const char *dir,
			     int (*fn)(void *arg, const char *name), void *arg)
{
	struct test_faults *f = ctx;

	if (f->fault == FAULT_LIST) {
		f->injected++;
		return -EACCES;
	}
	if (f->fault == FAULT_LIST_EIO) {
		int err = fn(arg, "seg-0000000000000000.kvs");

		f->injected++;
		return err ? err : -EIO;
	}
	return kvs_store_io_default()->list(NULL, dir, fn, arg);
}

/* Writes that a fault hits complete at once with the fault's result, so
 * do syncs (as fdatasync); everything else goes to the real engine. */
static inline int fault_start(void *ctx, struct kvs_store_ring *ring,
			      struct kvs_store_io_req *req)
{
	struct test_faults *f = ctx;
	const struct kvs_store_io_ops *d = kvs_store_io_default();

	if (req->op == KVS_STORE_IO_SYNC) {
		req->res = fault_sync(ctx, req->fd);
		req->done = true;
		return 0;
	}
	if (req->op == KVS_STORE_IO_WRITE &&
	    (f->fault == FAULT_FULL ||
	     (f->fault != FAULT_SYNC_EIO && f->countdown == 0))) {
		req->res = (int32_t)fault_write(f, req->fd, req->buf, req->len,
						(off_t)req->off);
		req->done = true;
		return 0;
	}
	if (req->op == KVS_STORE_IO_WRITE && f->fault != FAULT_SYNC_EIO)
		fault_fire(f); /* counts the write down */
	return d->start(NULL, ring, req);
}

static inline void fault_ops(struct kvs_store_io_ops *ops,
			     struct test_faults *f)
{
	*ops = *kvs_store_io_default();
	ops->open = fault_open;
	ops->pwrite = fault_pwrite;
	ops->fdatasync = fault_sync;
	ops->fallocate = fault_fallocate;
	ops->mkdir = fault_mkdir;
	ops->lock = fault_lock;
	ops->list = fault_list;
	ops->start = fault_start;
	ops->ctx = f;
}

/* ---- a spy on the I/O ------------------------------------------------ */

enum { SPY_FDS = 1024, SPY_PATHS = 16 };

/* Counts what the store asks of the file system (the real calls run). */
struct test_spy {
	int syncs; /* fsync and fdatasync of files */
	uint64_t read_bytes; /* pread and READ requests */
	uint64_t reads; /* pread calls and READ requests */
	int dir_syncs; /* fsync of directories */
	char synced_dirs[SPY_PATHS][4096]; /* the last directories synced */
	char *fd_dir[SPY_FDS]; /* path of each directory fd */
};

static inline int spy_open(void *ctx, const char *path, int flags, mode_t mode)
{
	struct test_spy *spy = ctx;
	int fd = kvs_store_io_default()->open(NULL, path, flags, mode);

	if (fd >= 0 && fd < SPY_FDS) {
		free(spy->fd_dir[fd]);
		spy->fd_dir[fd] = (flags & O_DIRECTORY) ? strdup(path) : NULL;
	}
	return fd;
}

static inline int spy_close(void *ctx, int fd)
{
	struct test_spy *spy = ctx;

	if (fd >= 0 && fd < SPY_FDS) {
		free(spy->fd_dir[fd]);
		spy->fd_dir[fd] = NULL;
	}
	return kvs_store_io_default()->close(NULL, fd);
}

static inline int spy_fsync(void *ctx, int fd)
{
	struct test_spy *spy = ctx;

	if (fd >= 0 && fd < SPY_FDS && spy->fd_dir[fd]) {
		snprintf(spy->synced_dirs[spy->dir_syncs % SPY_PATHS], 4096,
			 "%s", spy->fd_dir[fd]);
		spy->dir_syncs++;
	} else {
		spy->syncs++;
	}
	return kvs_store_io_default()->fsync(NULL, fd);
}

static inline int spy_fdatasync(void *ctx, int fd)
{
	struct test_spy *spy = ctx;

	spy->syncs++;
	return kvs_store_io_default()->fdatasync(NULL, fd);
}

static inline ssize_t spy_pread(void *ctx, int fd, void *buf, size_t len,
				off_t off)
{
	struct test_spy *spy = ctx;
	ssize_t n = kvs_store_io_default()->pread(NULL, fd, buf, len, off);

	spy->reads++;
	if (n > 0)
		spy->read_bytes += (uint64_t)n;
	return n;
}

static inline int spy_start(void *ctx, struct kvs_store_ring *ring,
			    struct kvs_store_io_req *req)
{
	struct test_spy *spy = ctx;

	if (req->op == KVS_STORE_IO_READ) {
		spy->reads++;
		spy->read_bytes += req->len;
	}
	if (req->op == KVS_STORE_IO_SYNC)
		spy->syncs++;
	return kvs_store_io_default()->start(NULL, ring, req);
}

/* Whether @path was among the last directories fsynced. */
static inline bool spy_dir_synced(const struct test_spy *spy, const char *path)
{
	for (int i = 0; i < SPY_PATHS && i < spy->dir_syncs; i++)
		if (strcmp(spy->synced_dirs[i], path) == 0)
			return true;
	return false;
}

static inline void spy_ops(struct kvs_store_io_ops *ops, struct test_spy *spy)
{
	memset(spy, 0, sizeof(*spy));
	*ops = *kvs_store_io_default();
	ops->open = spy_open;
	ops->close = spy_close;
	ops->fsync = spy_fsync;
	ops->fdatasync = spy_fdatasync;
	ops->pread = spy_pread;
	ops->start = spy_start;
	ops->ctx = spy;
}

static inline void spy_free(struct test_spy *spy)
{
	for (int i = 0; i < SPY_FDS; i++)
		free(spy->fd_dir[i]);
}

/* fsck's verdicts, counted (a kvs_store_fsck callback with a struct
 * test_tally as its argument). */
struct test_tally {
	int good, corrupt, torn, missing, leftover;
};

static inline void test_tally_cb(void *arg, const struct kvs_fsck_record *r)
{
	struct test_tally *t = arg;

	t->good += r->status == KVS_FSCK_GOOD;
	t->corrupt += r->status == KVS_FSCK_CORRUPT;
	t->torn += r->status == KVS_FSCK_TORN;
	t->missing += r->status == KVS_FSCK_MISSING;
	t->leftover += r->status == KVS_FSCK_LEFTOVER;
}

/* ---- cmocka-side helpers (in files that include cmocka.h first) ---- */

#ifdef assert_true
/* 0 when @b reads back identical, else a miss (-KVS_ENOTFOUND, or
 * -KVS_ECORRUPT for a record that failed a check); wrong bytes or any
 * other error fail the test. */
static inline int test_check_get(struct kvs_store *s, const struct test_blk *b)
{
	int err = test_get_cmp(s, &b->key, b->obj, b->len);

	assert_true(err == 0 || err == -KVS_ENOTFOUND || err == -KVS_ECORRUPT);
	return err;
}
#endif

/* In a forked child: a failed check ends it with a message (cmocka's
 * asserts would go on running the other tests in the child). */
#define CHILD_CHECK(cond)                                                      \
	do {                                                                   \
		if (!(cond)) {                                                 \
			fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, \
				__LINE__, #cond);                              \
			_exit(1);                                              \
		}                                                              \
	} while (0)

#endif
