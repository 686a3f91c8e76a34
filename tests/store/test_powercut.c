/*
 * test_powercut.c - power loss, simulated at the I/O-ops layer, to check
 * the promise of store.h: an acknowledged-durable block survives it.
 *
 * The model: a disk with a volatile write cache under a file system that
 * keeps no more than POSIX promises.  A forked writer runs the store on a
 * real directory through an ops table that does every call for real (so
 * the running store reads back what it wrote, as from the page cache) and
 * also remembers what is not durable yet:
 *  - data: each pwrite and each WRITE request (run at once in @start) is
 *    a pending write of its file, kept with its bytes;
 *  - size: ftruncate, fallocate and O_TRUNC are pending size changes;
 *  - fsync or fdatasync of a file makes its pending writes and size
 *    changes durable (fdatasync too: a size the data needs is part of it);
 *  - names: creating a file, rename and unlink are pending operations of
 *    the directory, durable only at the next fsync of the directory (the
 *    weakest POSIX promise, which the store's contract relies on: it
 *    fsyncs the directory after creating a segment or the superblock).
 *    Neither fsync of the file nor time makes a name durable.  An
 *    unlinked file's durable content is kept: a lost unlink revives it.
 *    The store directory itself is made by the test and taken as durable.
 * At a random modelled operation (which then never happens) the power is
 * cut: each file is rebuilt from its durable content by replaying its
 * pending operations in order, each write independently applied whole,
 * dropped, or torn (each 512-byte sector new or old), each size change
 * applied or not; the directory from its durable names plus a random
 * subset of its pending operations, in order.  The writer then _exits.
 *
 * The writer mixes durable puts (single and batched), WRITTEN / MEMORY
 * puts, re-puts of the same bytes, a second version of some keys, gets
 * and syncs on a store of 3 segments of 256 KiB, so segment creation,
 * rollover and reclaim (with carry-forward) happen under the cut.  Then
 * the real recovery (default ops) must serve every block whose durable
 * put was acknowledged and whose record still held it when the power
 * went (not evicted, not carried: carrying is best effort), byte for
 * byte; no get may return anything but a version put for its key; every
 * record fsck finds damaged must overlap a write pending at the cut;
 * --repair leaves a store that reopens clean and takes new puts.  Each
 * round runs two phases (a fresh store, then the recovered one) and
 * prints its seed; KVS_POWERCUT_SEED=<seed> replays that round alone.
 */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include <cmocka.h>

#include "kvstash/log.h"
#include "store_internal.h"
#include "store_test.h"

enum {
	NKEYS = 192,
	NVER = 2,
	ROUNDS = 200,
	PHASES = 2,
	MAX_CALLS = 300,
	MAX_FILES = 64,
	MAX_NAMES = 32,
	MAX_DIR_OPS = 256,
	MAX_FDS = 1024,
	MAX_REGIONS = 8192,
	MAX_UNLINKED = 64,
	NAME_LEN = 48,
};

#define SECTOR 512u
#define SEG_SIZE (256ull << 10)
#define TIME_BUDGET_S 6.0

/* ---- what the writer and the checker share (MAP_SHARED) ------------- */

struct region {
	uint64_t seg, off, len;
};

struct shared {
	int failed; /* the writer found something wrong */
	char why[512];
	uint8_t want[NKEYS]; /* 1 + version that must survive, or 0 */
	uint8_t ever[NKEYS]; /* bit v: version v was put */
	uint64_t calls, ops; /* done before the cut */
	uint32_t nregions;
	struct region regions[MAX_REGIONS]; /* writes pending at the cut */
};

static struct shared *sh;
static struct test_blk pool[NKEYS][NVER];

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Both versions of key @k share its ident, so its store key. */
static int pool_make(void **state)
{
	for (int k = 0; k < NKEYS; k++) {
		struct kvs_ident ident;
		uint64_t st = (uint64_t)k * 7919 + 11;

		memset(&ident, 0, sizeof(ident));
		for (int i = 0; i < KVS_ID_SIZE; i += 8) {
			uint64_t r = test_rand(&st);

			memcpy(ident.block_id + i, &r, 8);
		}
		ident.layer = (uint32_t)(k % 4);
		ident.first_pos = (uint64_t)k * 32;
		for (int v = 0; v < NVER; v++) {
			struct test_blk *b = &pool[k][v];

			b->obj = test_block_ident(
				&ident, (uint64_t)k * NVER + v,
				(uint16_t)(1 + k % 8), &b->len);
			if (!b->obj ||
			    kvs_store_key_of(b->obj, b->len, &b->key))
				return -1;
		}
	}
	return 0;
}

static int pool_free(void **state)
{
	for (int k = 0; k < NKEYS; k++)
		test_blocks_free(pool[k], NVER);
	return 0;
}

/* Key @k's version v if @obj is one of its versions, else -1. */
static int version_of(int k, const uint8_t *obj, size_t len)
{
	for (int v = 0; v < NVER; v++)
		if (pool[k][v].len == len && !memcmp(pool[k][v].obj, obj, len))
			return v;
	return -1;
}

static int key_index(const struct kvs_store_key *key)
{
	for (int k = 0; k < NKEYS; k++)
		if (!memcmp(&pool[k][0].key, key, sizeof(*key)))
			return k;
	return -1;
}

static void round_opts(struct kvs_store_opts *o, uint64_t seed)
{
	/* half the rounds without DRAM (gets read NVMe, so records get
	 * carried), half with a small arena, some not write-through (MEMORY
	 * puts, spilled on eviction) */
	bool dram = seed & 1;

	test_opts(o, dram ? 256 << 10 : 0, 3 * SEG_SIZE, SEG_SIZE);
	o->write_through = !dram || (seed & 2);
	/* the model, not the disk, decides what survives: stay in the page
	 * cache (O_DIRECT reads of what the cut rewrote cost the most) */
	o->buffered_io = true;
}

/* ---- the writer's side: failing it ---------------------------------- */

static __attribute__((noreturn, format(printf, 1, 2))) void
writer_fail(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(sh->why, sizeof(sh->why), fmt, ap);
	va_end(ap);
	sh->failed = 1;
	_exit(1);
}

/* ---- the volatile-cache model --------------------------------------- */

struct pending_op {
	uint64_t off; /* write offset, or the new size */
	uint32_t len; /* bytes written; 0 for a size change */
	uint8_t *data;
};

struct inode {
	uint8_t *bytes; /* durable content */
	uint64_t len, cap;
	struct pending_op *ops;
	size_t nops, ops_cap;
};

struct name {
	char s[NAME_LEN];
	int ino;
};

struct names {
	struct name v[MAX_NAMES];
	size_t n;
};

enum dir_op_kind { DIR_CREATE, DIR_RENAME, DIR_UNLINK };

struct dir_op {
	enum dir_op_kind kind;
	char from[NAME_LEN], to[NAME_LEN];
	int ino;
};

#define FD_DIR (-2)

static struct {
	char dir[4096];
	size_t dir_len;
	struct inode ino[MAX_FILES];
	int nino;
	struct names durable, now;
	struct dir_op dops[MAX_DIR_OPS];
	size_t ndops;
	int fd_ino[MAX_FDS]; /* -1 not ours, FD_DIR the directory */
	uint64_t ops, cut_at; /* the power goes before op cut_at */
	uint64_t events, cut_event, cut_after; /* or cut_after ops past the
						* cut_event-th segment creation
						* or unlink */
	uint64_t rng;
} m;

/* The writer's view of the store, for the expectations at the cut. */
static struct {
	struct kvs_store *store;
	uint64_t acked_seq[NKEYS], acked_seg[NKEYS];
	int last_ver[NKEYS]; /* version last put or found, -1 none */
	uint8_t in_call[NKEYS]; /* 1 + version put by the call under way */
	uint64_t unlinked[MAX_UNLINKED]; /* segments, by the call under way */
	size_t nunlinked;
} w;

static __attribute__((noreturn)) void power_cut(void);

static void image_write(uint8_t **buf, uint64_t *len, uint64_t *cap,
			uint64_t off, const uint8_t *data, uint64_t n)
{
	if (!n)
		return;
	if (off + n > *cap) {
		uint64_t c = (off + n) * 2;
		uint8_t *b = realloc(*buf, c);

		if (!b)
			writer_fail("out of memory");
		*buf = b;
		*cap = c;
	}
	if (off > *len)
		memset(*buf + *len, 0, off - *len);
	memcpy(*buf + off, data, n);
	if (off + n > *len)
		*len = off + n;
}

static void image_resize(uint8_t **buf, uint64_t *len, uint64_t *cap,
			 uint64_t size)
{
	static const uint8_t zero[SECTOR];

	while (*len < size) {
		uint64_t n = size - *len < SECTOR ? size - *len : SECTOR;

		image_write(buf, len, cap, *len, zero, n);
	}
	*len = size;
}

static void pending_add(int ino, uint64_t off, const void *data, uint32_t len)
{
	struct inode *f = &m.ino[ino];
	struct pending_op *op;

	if (f->nops == f->ops_cap) {
		size_t c = f->ops_cap ? f->ops_cap * 2 : 64;
		struct pending_op *v = realloc(f->ops, c * sizeof(*v));

		if (!v)
			writer_fail("out of memory");
		f->ops = v;
		f->ops_cap = c;
	}
	op = &f->ops[f->nops++];
	op->off = off;
	op->len = len;
	op->data = NULL;
	if (len) {
		op->data = malloc(len);
		if (!op->data)
			writer_fail("out of memory");
		memcpy(op->data, data, len);
	}
}

/* fsync / fdatasync: everything pending on the file is durable. */
static void inode_commit(int ino)
{
	struct inode *f = &m.ino[ino];

	for (size_t i = 0; i < f->nops; i++) {
		struct pending_op *op = &f->ops[i];

		if (op->len)
			image_write(&f->bytes, &f->len, &f->cap, op->off,
				    op->data, op->len);
		else
			image_resize(&f->bytes, &f->len, &f->cap, op->off);
		free(op->data);
	}
	f->nops = 0;
}

static int inode_new(void)
{
	if (m.nino == MAX_FILES)
		writer_fail("model: more than %d files", MAX_FILES);
	memset(&m.ino[m.nino], 0, sizeof(m.ino[0]));
	return m.nino++;
}

static int names_find(const struct names *ns, const char *s)
{
	for (size_t i = 0; i < ns->n; i++)
		if (!strcmp(ns->v[i].s, s))
			return (int)i;
	return -1;
}

static void names_set(struct names *ns, const char *s, int ino)
{
	int i = names_find(ns, s);

	if (i < 0) {
		if (ns->n == MAX_NAMES)
			writer_fail("model: more than %d names", MAX_NAMES);
		i = (int)ns->n++;
		snprintf(ns->v[i].s, NAME_LEN, "%s", s);
	}
	ns->v[i].ino = ino;
}

static void names_del(struct names *ns, const char *s)
{
	int i = names_find(ns, s);

	if (i >= 0)
		ns->v[i] = ns->v[--ns->n];
}

static void dir_op_add(enum dir_op_kind kind, const char *from, const char *to,
		       int ino)
{
	struct dir_op *d;

	if (m.ndops == MAX_DIR_OPS)
		writer_fail("model: more than %d directory ops", MAX_DIR_OPS);
	d = &m.dops[m.ndops++];
	d->kind = kind;
	snprintf(d->from, NAME_LEN, "%s", from);
	snprintf(d->to, NAME_LEN, "%s", to ? to : "");
	d->ino = ino;
}

/* The name of @path in the store directory, or NULL (the directory
 * itself sets *@is_dir). */
static const char *name_in_dir(const char *path, bool *is_dir)
{
	*is_dir = !strcmp(path, m.dir);
	if (strncmp(path, m.dir, m.dir_len) || path[m.dir_len] != '/' ||
	    strchr(path + m.dir_len + 1, '/') ||
	    strlen(path + m.dir_len + 1) >= NAME_LEN)
		return NULL;
	return path + m.dir_len + 1;
}

static int fd_inode(int fd)
{
	if (fd < 0 || fd >= MAX_FDS || m.fd_ino[fd] == -1)
		writer_fail("model: fd %d is not a store file", fd);
	return m.fd_ino[fd];
}

/* Counts one modelled operation; the power goes before the cut's one.
 * @seg_event: it creates or unlinks a segment. */
static void tick(bool seg_event)
{
	if (seg_event && ++m.events == m.cut_event)
		m.cut_at = m.ops + 1 + m.cut_after;
	if (++m.ops == m.cut_at)
		power_cut();
}

static bool is_segment(const char *name)
{
	uint64_t id;

	return name && seg_name_parse(name, &id) == 0;
}

static uint64_t real_size(int fd)
{
	uint64_t size = 0;

	kvs_store_io_default()->size(NULL, fd, &size);
	return size;
}

static int m_open(void *ctx, const char *path, int flags, mode_t mode)
{
	bool is_dir;
	const char *name = name_in_dir(path, &is_dir);
	int known = name ? names_find(&m.now, name) : -1;
	int fd, ino;

	if (!name && !is_dir)
		writer_fail("model: open outside the store: %s", path);
	if (name && (flags & O_CREAT) && known < 0)
		tick(is_segment(name));
	fd = kvs_store_io_default()->open(NULL, path, flags, mode);
	if (fd < 0)
		return fd;
	if (fd >= MAX_FDS)
		writer_fail("model: fd %d too high", fd);
	if (is_dir) {
		m.fd_ino[fd] = FD_DIR;
		return fd;
	}
	if (known < 0) {
		ino = inode_new();
		names_set(&m.now, name, ino);
		dir_op_add(DIR_CREATE, name, NULL, ino);
	} else {
		ino = m.now.v[known].ino;
		if (flags & O_TRUNC)
			pending_add(ino, 0, NULL, 0);
	}
	m.fd_ino[fd] = ino;
	return fd;
}

static int m_close(void *ctx, int fd)
{
	if (fd >= 0 && fd < MAX_FDS)
		m.fd_ino[fd] = -1;
	return kvs_store_io_default()->close(NULL, fd);
}

static ssize_t m_pwrite(void *ctx, int fd, const void *buf, size_t len,
			off_t off)
{
	int ino = fd_inode(fd);
	ssize_t n;

	if (ino == FD_DIR)
		writer_fail("model: write to the directory");
	tick(false);
	n = kvs_store_io_default()->pwrite(NULL, fd, buf, len, off);
	if (n > 0)
		pending_add(ino, (uint64_t)off, buf, (uint32_t)n);
	return n;
}

static int m_fsync(void *ctx, int fd)
{
	int ino = fd_inode(fd);

	tick(false);
	if (ino == FD_DIR) {
		m.durable = m.now;
		m.ndops = 0;
	} else {
		inode_commit(ino);
	}
	/* what survives is the model's business, not the real disk's */
	return 0;
}

/* A size change that was done (@err 0) is pending on its file. */
static int size_changed(int fd, int err)
{
	if (!err)
		pending_add(fd_inode(fd), real_size(fd), NULL, 0);
	return err;
}

static int m_ftruncate(void *ctx, int fd, off_t len)
{
	fd_inode(fd);
	tick(false);
	return size_changed(fd,
			    kvs_store_io_default()->ftruncate(NULL, fd, len));
}

static int m_fallocate(void *ctx, int fd, off_t len)
{
	fd_inode(fd);
	tick(false);
	return size_changed(fd,
			    kvs_store_io_default()->fallocate(NULL, fd, len));
}

static int m_rename(void *ctx, const char *from, const char *to)
{
	bool d1, d2;
	const char *a = name_in_dir(from, &d1), *b = name_in_dir(to, &d2);
	int i, err;

	if (!a || !b || (i = names_find(&m.now, a)) < 0)
		writer_fail("model: rename %s %s", from, to);
	tick(false);
	err = kvs_store_io_default()->rename(NULL, from, to);
	if (err)
		return err;
	names_set(&m.now, b, m.now.v[i].ino);
	names_del(&m.now, a);
	dir_op_add(DIR_RENAME, a, b, -1);
	return 0;
}

static int m_unlink(void *ctx, const char *path)
{
	bool is_dir;
	const char *name = name_in_dir(path, &is_dir);
	uint64_t id;
	int err;

	if (!name)
		writer_fail("model: unlink %s", path);
	tick(is_segment(name));
	err = kvs_store_io_default()->unlink(NULL, path);
	if (err)
		return err;
	names_del(&m.now, name);
	dir_op_add(DIR_UNLINK, name, NULL, -1);
	if (seg_name_parse(name, &id) == 0 && w.nunlinked < MAX_UNLINKED)
		w.unlinked[w.nunlinked++] = id;
	return 0;
}

/* Requests run at once: a read for real, a write through the model. */
static int m_start(void *ctx, struct kvs_store_ring *ring,
		   struct kvs_store_io_req *req)
{
	if (req->op == KVS_STORE_IO_READ)
		req->res = (int32_t)kvs_store_io_default()->pread(
			NULL, req->fd, req->buf, req->len, (off_t)req->off);
	else
		req->res = (int32_t)m_pwrite(ctx, req->fd, req->buf, req->len,
					     (off_t)req->off);
	req->done = true;
	return 0;
}

static int m_complete(void *ctx, struct kvs_store_ring *ring, unsigned min)
{
	return 0; /* every request finished in m_start */
}

static const struct kvs_store_io_ops model_ops = {
	.open = m_open,
	.close = m_close,
	.pwrite = m_pwrite,
	.fsync = m_fsync,
	.fdatasync = m_fsync,
	.ftruncate = m_ftruncate,
	.fallocate = m_fallocate,
	.rename = m_rename,
	.unlink = m_unlink,
	.start = m_start,
	.complete = m_complete,
};

static uint8_t *slurp(const char *path, uint64_t *len)
{
	struct stat st;
	uint8_t *buf;
	int fd = open(path, O_RDONLY);

	if (fd < 0 || fstat(fd, &st))
		writer_fail("model: read %s: %s", path, strerror(errno));
	buf = malloc(st.st_size ? (size_t)st.st_size : 1);
	if (!buf || pread(fd, buf, (size_t)st.st_size, 0) != st.st_size)
		writer_fail("model: read %s", path);
	close(fd);
	*len = (uint64_t)st.st_size;
	return buf;
}

/* Everything already in @dir is durable (the checker left it synced).
 * The cut comes at a random op (about 1.5 per call: mostly inside the
 * stream, now and then after its end) or, one time in three, within a
 * few ops of a segment creation or unlink (a roll, a reclaim and its
 * carries), where most can go wrong. */
static void model_init(const char *dir, uint64_t seed)
{
	struct dirent *de;
	DIR *d = opendir(dir);
	char path[4200];

	memset(&m, 0, sizeof(m));
	snprintf(m.dir, sizeof(m.dir), "%s", dir);
	m.dir_len = strlen(m.dir);
	memset(m.fd_ino, 0xff, sizeof(m.fd_ino));
	m.rng = seed;
	if (test_rand(&m.rng) % 3) {
		m.cut_at = 1 + test_rand(&m.rng) % (MAX_CALLS * 3 / 2);
	} else {
		m.cut_event = 1 + test_rand(&m.rng) % 8;
		m.cut_after = test_rand(&m.rng) % 12;
	}
	if (!d)
		writer_fail("model: opendir %s", dir);
	while ((de = readdir(d))) {
		int ino;

		if (de->d_name[0] == '.')
			continue;
		ino = inode_new();
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		m.ino[ino].bytes = slurp(path, &m.ino[ino].len);
		m.ino[ino].cap = m.ino[ino].len;
		names_set(&m.now, de->d_name, ino);
	}
	closedir(d);
	m.durable = m.now;
}

/* ---- the power cut -------------------------------------------------- */

static void region_add(const char *name, uint64_t off, uint64_t len)
{
	uint64_t id;

	if (!len || seg_name_parse(name, &id) || sh->nregions == MAX_REGIONS)
		return;
	sh->regions[sh->nregions++] =
		(struct region){ .seg = id, .off = off, .len = len };
}

/* The file behind @ino as the power cut leaves it, written to @path. */
static void write_after_cut(const char *path, const char *name, int ino)
{
	struct inode *f = &m.ino[ino];
	uint64_t len = 0, cap = 0;
	uint8_t *img = NULL;
	int fd;

	image_write(&img, &len, &cap, 0, f->bytes, f->len);
	/* a file created without its header durable yet: missing or
	 * short, that header is explained */
	if (f->len < SEG_HEADER_SIZE)
		region_add(name, 0, SEG_HEADER_SIZE);
	for (size_t i = 0; i < f->nops; i++) {
		const struct pending_op *op = &f->ops[i];
		unsigned fate = (unsigned)(test_rand(&m.rng) % 3);

		region_add(name, op->off, op->len);
		if (!op->len) {
			if (fate)
				image_resize(&img, &len, &cap, op->off);
			continue;
		}
		if (fate == 0) { /* fully applied */
			image_write(&img, &len, &cap, op->off, op->data,
				    op->len);
			continue;
		}
		if (fate == 1) /* dropped */
			continue;
		/* torn: each sector new or old */
		for (uint64_t p = op->off; p < op->off + op->len;) {
			uint64_t next = (p / SECTOR + 1) * SECTOR;

			if (next > op->off + op->len)
				next = op->off + op->len;
			if (test_rand(&m.rng) & 1)
				image_write(&img, &len, &cap, p,
					    op->data + (p - op->off), next - p);
			p = next;
		}
	}
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0 || (len && pwrite(fd, img, len, 0) != (ssize_t)len))
		writer_fail("model: rewrite %s", path);
	close(fd);
	free(img);
}

static bool was_unlinked(uint64_t seg)
{
	for (size_t i = 0; i < w.nunlinked; i++)
		if (w.unlinked[i] == seg)
			return true;
	return false;
}

static void power_cut(void)
{
	struct names after = m.durable;
	struct dirent *de;
	char path[4200];
	DIR *d;

	/* what must survive: the acknowledged records still held at the
	 * last return to the writer, less those the call under way may
	 * legitimately have dropped (reclaimed, or replaced by another
	 * version of the key) */
	for (int k = 0; k < NKEYS; k++) {
		if (!sh->want[k])
			continue;
		if (was_unlinked(w.acked_seg[k]) ||
		    (w.in_call[k] && w.in_call[k] != sh->want[k]))
			sh->want[k] = 0;
	}
	sh->ops = m.ops;
	for (size_t i = 0; i < m.ndops; i++) {
		const struct dir_op *op = &m.dops[i];
		int at;

		if (test_rand(&m.rng) & 1)
			continue; /* this one never reached the disk */
		if (op->kind == DIR_CREATE) {
			names_set(&after, op->from, op->ino);
		} else if (op->kind == DIR_UNLINK) {
			names_del(&after, op->from);
		} else if ((at = names_find(&after, op->from)) >= 0) {
			names_set(&after, op->to, after.v[at].ino);
			names_del(&after, op->from);
		}
	}
	d = opendir(m.dir);
	if (!d)
		writer_fail("model: opendir %s", m.dir);
	while ((de = readdir(d)))
		if (de->d_name[0] != '.')
			unlinkat(dirfd(d), de->d_name, 0);
	closedir(d);
	for (size_t i = 0; i < after.n; i++) {
		snprintf(path, sizeof(path), "%s/%s", m.dir, after.v[i].s);
		write_after_cut(path, after.v[i].s, after.v[i].ino);
	}
	_exit(0);
}

/* ---- the writer ----------------------------------------------------- */

static struct entry *entry_of(int k)
{
	return index_find(&w.store->index, &pool[k][0].key);
}

/* After a call returned: forget what it moved or dropped, then take its
 * acknowledgements (@acked[k]: 1 + version made durable; with @put, each
 * must have its record on NVMe). */
static void settle(const uint8_t *acked, bool put)
{
	for (int k = 0; k < NKEYS; k++) {
		struct entry *e = entry_of(k);

		if (sh->want[k] && (!e || !e->seg || e->seq != w.acked_seq[k]))
			sh->want[k] = 0;
		if (put && acked[k] && (!e || !e->seg))
			writer_fail("key %d acknowledged durable, no record",
				    k);
		if (acked[k] && e && e->seg) {
			sh->want[k] = acked[k];
			w.acked_seq[k] = e->seq;
			w.acked_seg[k] = e->seg->id;
		}
	}
	memset(w.in_call, 0, sizeof(w.in_call));
	w.nunlinked = 0;
}

static void put_call(uint64_t *rng, enum kvs_durability dur, unsigned n)
{
	const uint8_t *objs[4];
	size_t lens[4];
	int ks[4], vs[4], res[4];
	uint8_t acked[NKEYS] = { 0 };

	for (unsigned i = 0; i < n; i++) {
		ks[i] = (int)(test_rand(rng) % NKEYS);
		/* a quarter of the keys have a second version */
		vs[i] = ks[i] % 4 == 0 && test_rand(rng) % 4 == 0;
		objs[i] = pool[ks[i]][vs[i]].obj;
		lens[i] = pool[ks[i]][vs[i]].len;
		w.in_call[ks[i]] = (uint8_t)(1 + vs[i]);
		sh->ever[ks[i]] |= (uint8_t)(1u << vs[i]);
	}
	kvs_store_put_batch(w.store, objs, lens, n, dur, res);
	for (unsigned i = 0; i < n; i++) {
		if (res[i])
			writer_fail("put of key %d failed: %s", ks[i],
				    kvs_strerror(res[i]));
		w.last_ver[ks[i]] = vs[i];
		acked[ks[i]] = dur == KVS_DURABILITY_DURABLE
				       ? (uint8_t)(1 + vs[i])
				       : 0;
	}
	settle(acked, true);
}

static void get_call(uint64_t *rng)
{
	uint8_t acked[NKEYS] = { 0 };
	int k = (int)(test_rand(rng) % NKEYS);
	struct kvs_store_ref *ref;
	int err = kvs_store_get(w.store, &pool[k][0].key, &ref);

	if (err && err != -KVS_ENOTFOUND)
		writer_fail("get of key %d: %s", k, kvs_strerror(err));
	if (!err) {
		int v = version_of(k, kvs_store_ref_data(ref),
				   kvs_store_ref_len(ref));

		kvs_store_ref_release(ref);
		if (v < 0 || v != w.last_ver[k])
			writer_fail("get of key %d: version %d, last put %d", k,
				    v, w.last_ver[k]);
	}
	settle(acked, false);
}

static void sync_call(void)
{
	uint8_t acked[NKEYS] = { 0 };
	int err = kvs_store_sync(w.store);

	if (err)
		writer_fail("sync: %s", kvs_strerror(err));
	/* whatever was written is durable now */
	for (int k = 0; k < NKEYS; k++)
		if (w.last_ver[k] >= 0)
			acked[k] = (uint8_t)(1 + w.last_ver[k]);
	settle(acked, false);
}

static __attribute__((noreturn)) void writer(const char *dir, uint64_t seed)
{
	struct kvs_store_io_ops ops = model_ops;
	struct kvs_store_opts o;
	uint64_t rng = seed * 31 + 5;
	bool dram;
	int err;

	model_init(dir, seed ^ 0x5eed);
	memset(&w, 0, sizeof(w));
	for (int k = 0; k < NKEYS; k++)
		w.last_ver[k] = sh->want[k] ? sh->want[k] - 1 : -1;
	round_opts(&o, seed);
	dram = o.dram_capacity > 0;
	o.io = &ops;
	err = kvs_store_open(dir, &o, &w.store);
	if (err)
		writer_fail("open: %s", kvs_strerror(err));
	/* what the checker found is held, durably, at the start */
	for (int k = 0; k < NKEYS; k++) {
		struct entry *e = entry_of(k);

		if (!sh->want[k])
			continue;
		if (!e || !e->seg)
			writer_fail("key %d lost by the reopen", k);
		w.acked_seq[k] = e->seq;
		w.acked_seg[k] = e->seg->id;
	}
	for (sh->calls = 0; sh->calls < MAX_CALLS; sh->calls++) {
		unsigned r = (unsigned)(test_rand(&rng) % 100);
		enum kvs_durability lazy = dram && !o.write_through
						   ? KVS_DURABILITY_MEMORY
						   : KVS_DURABILITY_WRITTEN;

		if (r < 40)
			put_call(&rng, KVS_DURABILITY_DURABLE, 1);
		else if (r < 60)
			put_call(&rng, lazy, 1);
		else if (r < 75)
			put_call(&rng, r & 1 ? KVS_DURABILITY_DURABLE : lazy,
				 2 + (unsigned)(test_rand(&rng) % 3));
		else if (r < 94)
			get_call(&rng);
		else
			sync_call();
	}
	power_cut(); /* the stream ended first: the power goes now */
}

/* ---- the checker ---------------------------------------------------- */

struct fsck_check {
	unsigned unexplained, unknown, bad;
};

static bool explained(const struct kvs_fsck_record *r)
{
	/* a verdict of no bytes (an empty file) is at its offset */
	uint64_t end = r->offset + (r->length ? r->length : 1);

	for (uint32_t i = 0; i < sh->nregions; i++) {
		const struct region *g = &sh->regions[i];

		if (g->seg == r->segment && g->off < end &&
		    r->offset < g->off + g->len)
			return true;
	}
	return false;
}

/* Damage only where a write was pending; good records only of keys put. */
static void fsck_cb(void *arg, const struct kvs_fsck_record *r)
{
	struct fsck_check *c = arg;
	int k = r->key_valid ? key_index(&r->key) : -1;

	if (r->status != KVS_FSCK_GOOD) {
		c->bad++;
		if (!explained(r)) {
			c->unexplained++;
			print_message("  unexplained: segment %llu at %llu "
				      "(%llu bytes): %s\n",
				      (unsigned long long)r->segment,
				      (unsigned long long)r->offset,
				      (unsigned long long)r->length,
				      r->check ? r->check : "?");
		}
	} else if (k < 0 || !sh->ever[k]) {
		c->unknown++;
	}
}

/* Gets every key: a hit is a version put for it, a wanted key is there
 * in the wanted version.  @found[k] gets 1 + version, or 0. */
static void check_gets(struct kvs_store *s, uint8_t *found)
{
	for (int k = 0; k < NKEYS; k++) {
		struct kvs_store_ref *ref;
		int v = -1, err = kvs_store_get(s, &pool[k][0].key, &ref);

		if (err) {
			assert_int_equal(err, -KVS_ENOTFOUND);
		} else {
			v = version_of(k, kvs_store_ref_data(ref),
				       kvs_store_ref_len(ref));
			kvs_store_ref_release(ref);
			assert_true(v >= 0);
			assert_true(sh->ever[k] & (1u << v));
		}
		if (sh->want[k] && v + 1 != sh->want[k])
			print_message("  key %d: wanted version %d, got %d\n",
				      k, sh->want[k] - 1, v);
		assert_true(!sh->want[k] || v + 1 == sh->want[k]);
		found[k] = (uint8_t)(v + 1);
	}
}

static bool has_superblock(const char *dir)
{
	char path[4200];

	snprintf(path, sizeof(path), "%s/KVSTASH", dir);
	return access(path, F_OK) == 0;
}

/* After a cut: fsck, recovery, repair, a clean reopen; leaves in
 * sh->want what the next phase starts with. */
static void check_after_cut(const char *dir, uint64_t seed)
{
	struct kvs_store_opts o;
	struct kvs_store_stats st;
	struct kvs_fsck_report rep;
	struct fsck_check fc = { 0 };
	struct kvs_store *s;
	uint8_t found[NKEYS];
	uint64_t rng = seed * 13 + 3;
	int k, v;

	round_opts(&o, seed);
	if (has_superblock(dir)) {
		assert_int_equal(
			kvs_store_fsck(dir, 0, NULL, fsck_cb, &fc, &rep), 0);
		assert_int_equal(fc.unexplained, 0);
		assert_int_equal(fc.unknown, 0);
	}
	/* real recovery, with the default ops */
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	check_gets(s, found);
	kvs_store_close(s);
	assert_int_equal(
		kvs_store_fsck(dir, KVS_FSCK_REPAIR, NULL, NULL, NULL, &rep),
		0);
	assert_int_equal(kvs_store_fsck(dir, 0, NULL, NULL, NULL, &rep), 0);
	assert_int_equal(rep.corrupt + rep.torn + rep.bad_segments, 0);
	/* repaired: opens clean, still serves them, takes new puts */
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	kvs_store_stats_get(s, &st);
	assert_int_equal(st.corrupt_dropped + st.torn_dropped, 0);
	check_gets(s, found);
	k = (int)(test_rand(&rng) % NKEYS);
	v = k % 4 == 0 && (rng & 1);
	sh->ever[k] |= (uint8_t)(1u << v);
	assert_int_equal(kvs_store_put(s, pool[k][v].obj, pool[k][v].len,
				       KVS_DURABILITY_DURABLE, NULL),
			 0);
	kvs_store_close(s);
	/* the put may have evicted others: the next phase starts from what
	 * a fresh open finds (gets alone write nothing) */
	memset(sh->want, 0, NKEYS);
	sh->want[k] = (uint8_t)(1 + v);
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	check_gets(s, found);
	kvs_store_close(s);
	memcpy(sh->want, found, NKEYS);
}

static void run_round(uint64_t seed, uint64_t *calls, uint64_t *kept)
{
	char *dir = test_mkdir();

	assert_non_null(dir);
	memset(sh, 0, sizeof(*sh));
	for (int phase = 0; phase < PHASES; phase++) {
		uint64_t phase_seed = seed * PHASES + (uint64_t)phase;
		int status;
		pid_t pid;

		sh->failed = 0;
		sh->nregions = 0;
		pid = fork();
		assert_true(pid >= 0);
		if (pid == 0)
			writer(dir, phase_seed);
		assert_int_equal(waitpid(pid, &status, 0), pid);
		if (sh->failed)
			print_message("  writer: %s\n", sh->why);
		assert_false(sh->failed);
		assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
		for (int k = 0; k < NKEYS; k++)
			*kept += sh->want[k] != 0;
		*calls += sh->calls;
		check_after_cut(dir, phase_seed);
	}
	test_rmdir(dir);
}

static void test_powercut(void **state)
{
	const char *replay = getenv("KVS_POWERCUT_SEED");
	uint64_t base = replay ? strtoull(replay, NULL, 0)
			       : (uint64_t)time(NULL) * 1000;
	uint64_t calls = 0, kept = 0;
	double t0 = now_s();
	int rounds = 0;

	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE,
		  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	assert_true(sh != MAP_FAILED);
	for (int r = 0; r < (replay ? 1 : ROUNDS); r++) {
		if (now_s() - t0 > TIME_BUDGET_S)
			break;
		print_message("round %d seed %llu\n", r,
			      (unsigned long long)(base + (uint64_t)r));
		run_round(base + (uint64_t)r, &calls, &kept);
		rounds++;
	}
	print_message("%d rounds of %d power cuts, %.1f s: %llu calls, %llu "
		      "durable blocks checked\n",
		      rounds, PHASES, now_s() - t0, (unsigned long long)calls,
		      (unsigned long long)kept);
	assert_true(rounds >= (replay ? 1 : 10));
	assert_true(kept > 0);
	munmap(sh, sizeof(*sh));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_powercut),
	};

	kvs_log_set_level(KVS_LOG_ERR);
	return cmocka_run_group_tests(tests, pool_make, pool_free);
}
