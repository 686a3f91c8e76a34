/*
 * dir.c - the store directory: its lock, its superblock, what it holds.
 *
 * The lock is a flock() of the directory itself: exclusive for a writer,
 * shared by read-only opens.  Nothing can delete or replace it while the
 * store is open (a LOCK file could be, letting a second writer in), and
 * taking it creates nothing, so read-only opens work on read-only media.
 * The wait is bounded and logged with the holder's pid (from /proc/locks).
 * A format-1 store's LOCK file, where one exists, is taken as well, so
 * that an older binary and this one never write at once.
 *
 * The superblock (KVSTASH) holds two copies 4096 bytes apart: a damaged
 * copy is noticed and rewritten from the other; with both gone,
 * kvs_store_fsck --repair rebuilds it where a manifest or segments show
 * that a store is there.  Files merely named like segments show nothing:
 * one must hold a valid segment header or a record.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "kvstash/log.h"
#include "disk.h"

#define LOCK_POLL_MS 20

int dir_fsync(const struct kvs_store_io_ops *io, const char *dir)
{
	int fd, err;

	fd = io->open(io->ctx, dir, O_RDONLY | O_DIRECTORY, 0);
	if (fd < 0) {
		kvs_log(KVS_LOG_ERR, "store: open %s: %s", dir, strerror(-fd));
		return fd;
	}
	err = io->fsync(io->ctx, fd);
	if (err)
		kvs_log(KVS_LOG_ERR, "store: fsync %s: %s", dir,
			strerror(-err));
	io->close(io->ctx, fd);
	return err;
}

/* The directory holding @path ("." for a bare name). */
static void parent_of(const char *path, char *out, size_t n)
{
	size_t len;
	char *slash;

	snprintf(out, n, "%s", path);
	len = strlen(out);
	while (len > 1 && out[len - 1] == '/')
		out[--len] = '\0';
	slash = strrchr(out, '/');
	if (!slash)
		snprintf(out, n, ".");
	else if (slash == out)
		out[1] = '\0';
	else
		*slash = '\0';
}

/* The pid holding a flock on the file (@st) other than us, or 0. */
static long lock_holder(const struct stat *st)
{
	char line[256], want[64];
	FILE *f = fopen("/proc/locks", "r");
	long pid = 0;

	if (!f)
		return 0;
	snprintf(want, sizeof(want), " %02x:%02x:%llu ", major(st->st_dev),
		 minor(st->st_dev), (unsigned long long)st->st_ino);
	while (!pid && fgets(line, sizeof(line), f)) {
		long p;

		if (!strstr(line, "FLOCK") || !strstr(line, want))
			continue;
		/* "N: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF" */
		if (sscanf(strstr(line, "FLOCK") + 5, "%*s %*s %ld", &p) == 1 &&
		    p != (long)getpid())
			pid = p;
	}
	fclose(f);
	return pid;
}

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Takes the flock of @fd (@what names it), waiting up to @timeout_ms. */
static int lock_wait(const struct kvs_store_io_ops *io, int fd,
		     const char *what, bool exclusive, int timeout_ms)
{
	double start = now_ms();
	bool told = false;
	struct stat st;
	long holder = 0;
	int err;

	for (;;) {
		err = io->lock(io->ctx, fd, exclusive);
		if (err != -EWOULDBLOCK)
			break;
		if (!holder && io->stat(io->ctx, NULL, fd, &st) == 0)
			holder = lock_holder(&st);
		if (timeout_ms >= 0 && now_ms() - start >= timeout_ms) {
			if (holder)
				kvs_log(KVS_LOG_ERR,
					"store: %s is locked by pid %ld (gave "
					"up after %.1f s; see --lock-timeout)",
					what, holder, timeout_ms / 1e3);
			else
				kvs_log(KVS_LOG_ERR,
					"store: %s is locked by another "
					"process "
					"(gave up after %.1f s)",
					what, timeout_ms / 1e3);
			return -EBUSY;
		}
		if (!told) {
			told = true;
			if (holder)
				kvs_log(KVS_LOG_WARN,
					"store: waiting for the lock of %s "
					"held by pid %ld",
					what, holder);
			else
				kvs_log(KVS_LOG_WARN,
					"store: waiting for the lock of %s "
					"held by another process",
					what);
		}
		usleep(LOCK_POLL_MS * 1000);
	}
	if (err)
		kvs_log(KVS_LOG_ERR, "store: lock %s: %s", what,
			kvs_strerror(err));
	return err;
}

/* Whether @fd is still the directory named @dir (not replaced meanwhile). */
static bool same_dir(const struct kvs_store_io_ops *io, const char *dir, int fd)
{
	struct stat a, b;

	return io->stat(io->ctx, dir, -1, &a) == 0 &&
	       io->stat(io->ctx, NULL, fd, &b) == 0 && a.st_dev == b.st_dev &&
	       a.st_ino == b.st_ino;
}

static int make_dir(const struct kvs_store_io_ops *io, const char *dir)
{
	char parent[4096];
	int err = io->mkdir(io->ctx, dir, 0755);

	if (err == -EEXIST)
		return 0;
	if (err) {
		kvs_log(KVS_LOG_ERR, "store: mkdir %s: %s", dir,
			kvs_strerror(err));
		return err;
	}
	/* the new directory's entry is durable only once its parent is */
	parent_of(dir, parent, sizeof(parent));
	return dir_fsync(io, parent);
}

int store_lock(const struct kvs_store_io_ops *io, const char *dir,
	       bool exclusive, bool create, int timeout_ms,
	       struct store_lock *out)
{
	struct store_lock l = { .fd = -1, .legacy_fd = -1 };
	char path[4200];
	int err, tries = 0;

	if (create && (err = make_dir(io, dir)))
		return err;
	do {
		if (l.fd >= 0)
			io->close(io->ctx, l.fd);
		l.fd = io->open(io->ctx, dir, O_RDONLY | O_DIRECTORY, 0);
		if (l.fd < 0) {
			err = l.fd;
			if (err == -ENOENT)
				kvs_log(KVS_LOG_ERR, "store: no store at %s",
					dir);
			else
				kvs_log(KVS_LOG_ERR, "store: open %s: %s", dir,
					kvs_strerror(err));
			return err;
		}
		err = lock_wait(io, l.fd, dir, exclusive, timeout_ms);
		if (err)
			goto close_dir;
	} while (!same_dir(io, dir, l.fd) && ++tries < 8);
	if (tries == 8) {
		kvs_log(KVS_LOG_ERR, "store: %s keeps being replaced", dir);
		err = -EBUSY;
		goto close_dir;
	}
	/* a format-1 store's writers take LOCK: so does this one there */
	snprintf(path, sizeof(path), "%s/%s", dir, LEGACY_LOCK_NAME);
	l.legacy_fd = io->open(io->ctx, path, O_RDONLY, 0);
	if (l.legacy_fd >= 0) {
		err = lock_wait(io, l.legacy_fd, path, exclusive, timeout_ms);
		if (err)
			goto close_legacy;
	}
	*out = l;
	return 0;
close_legacy:
	io->close(io->ctx, l.legacy_fd);
close_dir:
	io->close(io->ctx, l.fd);
	return err;
}

void store_unlock(const struct kvs_store_io_ops *io, struct store_lock *l)
{
	if (l->legacy_fd >= 0)
		io->close(io->ctx, l->legacy_fd);
	if (l->fd >= 0)
		io->close(io->ctx, l->fd);
	l->fd = l->legacy_fd = -1;
}

/* ---- listing --------------------------------------------------------- */

int id_vec_push(struct id_vec *vec, uint64_t id)
{
	if (vec->n == vec->cap) {
		size_t cap = vec->cap ? vec->cap * 2 : 16;
		uint64_t *v = realloc(vec->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		vec->v = v;
		vec->cap = cap;
	}
	vec->v[vec->n++] = id;
	return 0;
}

static int classify(void *arg, const char *name)
{
	struct dir_listing *l = arg;
	uint64_t id;

	if (!strcmp(name, ".") || !strcmp(name, ".."))
		return 0;
	if (seg_name_parse(name, &id) == 0)
		return id_vec_push(&l->segs, id);
	if (seg_tmp_name_parse(name, &id) == 0)
		return id_vec_push(&l->tmps, id);
	if (!strcmp(name, SUPERBLOCK_NAME))
		l->superblock = true;
	else if (!strcmp(name, MANIFEST_NAME))
		l->manifest = true;
	else if (!strcmp(name, SUPERBLOCK_NAME ".tmp"))
		l->superblock_tmp = true;
	else if (!strcmp(name, MANIFEST_NAME ".tmp"))
		l->manifest_tmp = true;
	/* a format-1 LOCK, and a file system's lost+found, are no one's
	 * data: a directory holding only them is still empty */
	else if (strcmp(name, LEGACY_LOCK_NAME) && strcmp(name, "lost+found"))
		l->others++;
	return 0;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

int dir_list(const struct kvs_store_io_ops *io, const char *dir,
	     struct dir_listing *out)
{
	struct dir_listing l = { 0 };
	int err = io->list(io->ctx, dir, classify, &l);

	if (err) {
		kvs_log(KVS_LOG_ERR, "store: listing %s: %s", dir,
			kvs_strerror(err));
		dir_listing_free(&l);
		return err;
	}
	if (l.segs.n)
		qsort(l.segs.v, l.segs.n, sizeof(*l.segs.v), cmp_u64);
	*out = l;
	return 0;
}

void dir_listing_free(struct dir_listing *l)
{
	free(l->segs.v);
	free(l->tmps.v);
	memset(l, 0, sizeof(*l));
}

/* ---- superblock ------------------------------------------------------ */

int superblock_read(const struct kvs_store_io_ops *io, const char *dir,
		    struct sb_state *out)
{
	uint8_t buf[SB_FILE_SIZE];
	struct sb_state st = { 0 };
	uint32_t v[2] = { 0, 0 };
	int err[2], fd;
	char path[4200];
	ssize_t n;

	snprintf(path, sizeof(path), "%s/%s", dir, SUPERBLOCK_NAME);
	fd = io->open(io->ctx, path, O_RDONLY, 0);
	if (fd == -ENOENT) {
		out->missing = true;
		out->copies_bad = 2;
		out->version = 0;
		return -ENOENT;
	}
	if (fd < 0) {
		kvs_log(KVS_LOG_ERR, "store: %s: %s", path, strerror(-fd));
		return fd;
	}
	memset(buf, 0, sizeof(buf));
	n = io->pread(io->ctx, fd, buf, sizeof(buf), 0);
	io->close(io->ctx, fd);
	if (n < 0) {
		kvs_log(KVS_LOG_ERR, "store: read %s: %s", path,
			strerror((int)-n));
		return (int)n;
	}
	err[0] = n >= SB_SIZE ? sb_decode(buf, &v[0]) : -KVS_ETRUNC;
	err[1] = n >= (ssize_t)SB_FILE_SIZE
			 ? sb_decode(buf + SB_COPY_OFF, &v[1])
			 : -KVS_ETRUNC;
	if (err[0] == -KVS_EVERSION || err[1] == -KVS_EVERSION) {
		kvs_log(KVS_LOG_ERR,
			"store: %s was written by a newer kvstash (this one "
			"reads store formats 1 to %u); refusing to open it",
			dir, KVS_STORE_FORMAT_VERSION);
		return -KVS_EVERSION;
	}
	/* format 1 wrote one copy: its absence is no damage */
	if (!err[0] && v[0] == 1 && n < (ssize_t)SB_FILE_SIZE)
		err[1] = 0, v[1] = 1;
	st.copies_bad = (err[0] != 0) + (err[1] != 0);
	if (st.copies_bad == 2) {
		kvs_log(KVS_LOG_ERR,
			"store: %s: superblock damaged (both copies); "
			"'kvstash store fsck --repair' rebuilds it",
			dir);
		*out = st;
		return -KVS_EHDRSUM;
	}
	st.version = err[0] ? v[1] : err[1] ? v[0] : v[0] > v[1] ? v[0] : v[1];
	if (st.copies_bad)
		kvs_log(KVS_LOG_WARN,
			"store: %s: one superblock copy damaged, the other "
			"used",
			dir);
	*out = st;
	return 0;
}

int superblock_write(const struct kvs_store_io_ops *io, const char *dir)
{
	uint8_t sb[SB_FILE_SIZE];
	char path[4200], tmp[4300];
	ssize_t n;
	int fd, err;

	memset(sb, 0, sizeof(sb));
	sb_encode(sb);
	sb_encode(sb + SB_COPY_OFF);
	snprintf(path, sizeof(path), "%s/%s", dir, SUPERBLOCK_NAME);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	fd = io->open(io->ctx, tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0) {
		err = fd;
		goto fail;
	}
	n = io->pwrite(io->ctx, fd, sb, sizeof(sb), 0);
	err = n < 0 ? (int)n : n != sizeof(sb) ? -EIO : 0;
	if (!err)
		err = io->fsync(io->ctx, fd);
	io->close(io->ctx, fd);
	if (!err)
		err = io->rename(io->ctx, tmp, path);
	if (err)
		goto unlink_tmp;
	return dir_fsync(io, dir);
unlink_tmp:
	io->unlink(io->ctx, tmp);
fail:
	kvs_log(KVS_LOG_ERR, "store: cannot write %s: %s", path,
		kvs_strerror(err));
	return err;
}

/* ---- leftovers ------------------------------------------------------- */

void file_no_readahead(int fd)
{
	posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
}

int file_is_zero(const struct kvs_store_io_ops *io, int fd, uint64_t from,
		 uint64_t size, bool *zero)
{
	const size_t chunk = 64u << 10;
	uint64_t off = from / KVS_STORE_ALIGN * KVS_STORE_ALIGN;
	uint8_t *buf;
	int err = 0;

	*zero = true;
	/* aligned: the file may be open with O_DIRECT */
	if (posix_memalign((void **)&buf, KVS_STORE_ALIGN, chunk))
		return -ENOMEM;
	while (off < size) {
		uint64_t data;
		ssize_t n;

		err = io->seek_data(io->ctx, fd, off, &data);
		if (err == -ENXIO) {
			err = 0;
			break; /* a hole to the end */
		}
		if (!err && data > off)
			off = data / KVS_STORE_ALIGN * KVS_STORE_ALIGN;
		err = 0;
		if (off >= size)
			break;
		n = io->pread(io->ctx, fd, buf,
			      size - off < chunk ? size - off : chunk,
			      (off_t)off);
		if (n < 0) {
			err = (int)n;
			break;
		}
		if (n == 0)
			break;
		for (ssize_t i = 0; i < n; i++)
			if (buf[i]) {
				*zero = false;
				goto out;
			}
		off += (uint64_t)n;
	}
out:
	free(buf);
	return err;
}

bool seg_starts_log(const struct kvs_store_io_ops *io, int fd, uint64_t size,
		    uint8_t *page)
{
	struct rec_header h;

	return size >= SEG_HEADER_SIZE + KVS_STORE_ALIGN &&
	       io->pread(io->ctx, fd, page, KVS_STORE_ALIGN, SEG_HEADER_SIZE) ==
		       KVS_STORE_ALIGN &&
	       rec_header_decode(page, &h) == 0;
}

/* Whether segment file @id of @dir is kvstash's by what it holds: a
 * header whose checksum holds (of any layout version), or a record
 * right after it.  A file that cannot be read is not shown to be. */
static bool seg_file_ours(const struct kvs_store_io_ops *io, const char *dir,
			  uint64_t id)
{
	uint8_t page[SEG_HEADER_SIZE];
	char path[4200], name[32];
	struct stat st;
	uint64_t hdr_id;
	bool ours = false;
	int fd, err;

	seg_name(id, name);
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fd = io->open(io->ctx, path, O_RDONLY, 0);
	if (fd < 0)
		return false;
	file_no_readahead(fd);
	if (io->stat(io->ctx, NULL, fd, &st) == 0) {
		if (io->pread(io->ctx, fd, page, SEG_HEADER_SIZE, 0) ==
		    SEG_HEADER_SIZE) {
			err = seg_header_decode(page, &hdr_id);
			ours = err == 0 || err == -KVS_EVERSION;
		}
		if (!ours)
			ours = seg_starts_log(io, fd, (uint64_t)st.st_size,
					      page);
	}
	io->close(io->ctx, fd);
	return ours;
}

bool dir_shows_segments(const struct kvs_store_io_ops *io, const char *dir,
			const struct dir_listing *ls)
{
	for (size_t i = 0; i < ls->segs.n; i++)
		if (seg_file_ours(io, dir, ls->segs.v[i]))
			return true;
	return false;
}

bool leftover_is_ours(const struct kvs_store_io_ops *io, const char *path)
{
	uint8_t head[8];
	struct stat st;
	bool ours = false, zero;
	ssize_t n;
	int fd = io->open(io->ctx, path, O_RDONLY, 0);

	if (fd < 0)
		return false;
	if (io->stat(io->ctx, NULL, fd, &st) == 0) {
		n = io->pread(io->ctx, fd, head, sizeof(head), 0);
		if (n == sizeof(head))
			ours = store_magic(head);
		if (!ours &&
		    file_is_zero(io, fd, 0, (uint64_t)st.st_size, &zero) == 0)
			ours = zero;
	}
	io->close(io->ctx, fd);
	return ours;
}
