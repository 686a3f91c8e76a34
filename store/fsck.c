/*
 * fsck.c - offline check of a store directory.  Each segment is read
 * whole and walked like recovery does, but every record is verified in
 * full (record header, payload checksum, kvs_object_verify, object key).
 * Verdicts: good; corrupt (a complete record failed a check, or a run of
 * unreadable pages that a valid record follows); torn (the log of the
 * segment ends inside it: a run of bad pages reaching the end of the file,
 * a record running past it, or a last record failing its payload check;
 * or a run of zero pages, a record never written).  Zeros to the end of
 * the file are the unused rest of a preallocated head, not a record.
 * Good records older than another record of their key are "superseded".
 * A damaged segment header is reported (check "segment header") and its
 * records still walked.  --repair rewrites each segment that has a bad
 * record or header with a fresh header and its good records only (new
 * file, fsync, rename over, fsync of the directory); a segment left with
 * nothing is deleted.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvstash/log.h"
#include "store_internal.h"

struct verdicts {
	struct kvs_fsck_record *v;
	size_t n, cap;
};

static int add(struct verdicts *vs, const struct kvs_fsck_record *r)
{
	if (vs->n == vs->cap) {
		size_t cap = vs->cap ? vs->cap * 2 : 256;
		struct kvs_fsck_record *v = realloc(vs->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		vs->v = v;
		vs->cap = cap;
	}
	vs->v[vs->n++] = *r;
	return 0;
}

/* Walks one segment image; appends its verdicts from index @first on. */
static int walk(uint64_t id, const uint8_t *buf, uint64_t size,
		struct verdicts *vs)
{
	struct kvs_fsck_record r;
	struct rec_header h;
	const char *check = NULL;
	uint64_t off = SEG_HEADER_SIZE, bad_start = 0;
	size_t first = vs->n;
	bool in_bad = false, bad_zero = true;
	int err;

	while (off + KVS_STORE_ALIGN <= size) {
		err = rec_header_decode(buf + off, &h);
		if (err) {
			if (!in_bad) {
				in_bad = true;
				bad_zero = true;
				bad_start = off;
				check = rec_check_name(err);
			}
			for (size_t i = 0; bad_zero && i < KVS_STORE_ALIGN; i++)
				bad_zero = buf[off + i] == 0;
			off += KVS_STORE_ALIGN;
			continue;
		}
		memset(&r, 0, sizeof(r));
		r.segment = id;
		if (in_bad) {
			r.offset = bad_start;
			r.length = off - bad_start;
			r.status = bad_zero ? KVS_FSCK_TORN : KVS_FSCK_CORRUPT;
			r.check = bad_zero ? "never written" : check;
			if (add(vs, &r))
				return -ENOMEM;
			in_bad = false;
		}
		r.status = KVS_FSCK_GOOD;
		r.check = NULL;
		r.offset = off;
		r.length = record_size(h.length);
		r.seq = h.seq;
		r.key = h.key;
		r.key_valid = true;
		if (off + record_size(h.length) > size) {
			r.length = size - off;
			r.status = KVS_FSCK_TORN;
			r.check = "record length";
			return add(vs, &r);
		}
		if (record_verify(buf + off, size - off, NULL, 0, NULL,
				  &r.check)) {
			r.status = KVS_FSCK_CORRUPT;
		}
		if (add(vs, &r))
			return -ENOMEM;
		off += record_size(h.length);
	}
	if (in_bad && !bad_zero) {
		memset(&r, 0, sizeof(r));
		r.segment = id;
		r.offset = bad_start;
		r.length = size - bad_start;
		r.status = KVS_FSCK_TORN;
		r.check = check;
		return add(vs, &r);
	}
	/* the segment's last record failing its payload: cut by a crash */
	if (vs->n > first && vs->v[vs->n - 1].status == KVS_FSCK_CORRUPT &&
	    vs->v[vs->n - 1].key_valid &&
	    strcmp(vs->v[vs->n - 1].check, "record checksum") == 0)
		vs->v[vs->n - 1].status = KVS_FSCK_TORN;
	return 0;
}

static int rewrite(const struct kvs_store_io_ops *io, const char *dir,
		   const char *path, uint64_t id, const uint8_t *buf,
		   const struct kvs_fsck_record *v, size_t n)
{
	uint8_t header[SEG_HEADER_SIZE];
	char tmp[4300];
	uint64_t off = SEG_HEADER_SIZE;
	size_t good = 0;
	ssize_t w;
	int fd, err = 0;

	for (size_t i = 0; i < n; i++)
		good += v[i].status == KVS_FSCK_GOOD;
	if (good == 0) {
		err = io->unlink(io->ctx, path);
		return err ? err : dir_fsync(io, dir);
	}
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	fd = io->open(io->ctx, tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0)
		return fd;
	seg_header_encode(id, header);
	w = io->pwrite(io->ctx, fd, header, SEG_HEADER_SIZE, 0);
	if (w != SEG_HEADER_SIZE)
		err = w < 0 ? (int)w : -EIO;
	for (size_t i = 0; !err && i < n; i++) {
		if (v[i].status != KVS_FSCK_GOOD)
			continue;
		w = io->pwrite(io->ctx, fd, buf + v[i].offset, v[i].length,
			       (off_t)off);
		if (w != (ssize_t)v[i].length)
			err = w < 0 ? (int)w : -EIO;
		off += v[i].length;
	}
	if (!err)
		err = io->fsync(io->ctx, fd);
	io->close(io->ctx, fd);
	if (!err)
		err = io->rename(io->ctx, tmp, path);
	if (err) {
		io->unlink(io->ctx, tmp);
		return err;
	}
	return dir_fsync(io, dir);
}

/* Reads segment @id whole (malloc'd into *@buf). */
static int load(const struct kvs_store_io_ops *io, const char *path,
		uint8_t **buf, uint64_t *size)
{
	ssize_t n;
	int err, fd = io->open(io->ctx, path, O_RDONLY, 0);

	if (fd < 0)
		return fd;
	err = io->size(io->ctx, fd, size);
	if (err) {
		io->close(io->ctx, fd);
		return err;
	}
	*buf = malloc(*size ? *size : 1);
	if (!*buf) {
		io->close(io->ctx, fd);
		return -ENOMEM;
	}
	n = io->pread(io->ctx, fd, *buf, *size, 0);
	io->close(io->ctx, fd);
	if (n < 0 || (uint64_t)n != *size) {
		free(*buf);
		return n < 0 ? (int)n : -EIO;
	}
	return 0;
}

static int check_segment(const struct kvs_store_io_ops *io, const char *dir,
			 uint64_t id, unsigned flags, struct verdicts *vs,
			 struct kvs_fsck_report *rep)
{
	char path[4200];
	uint8_t *buf = NULL;
	uint64_t size = 0, hdr_id;
	size_t first = vs->n;
	bool bad = false;
	int err;

	snprintf(path, sizeof(path), "%s/", dir);
	seg_name(id, path + strlen(path));
	err = load(io, path, &buf, &size);
	if (err) {
		kvs_log(KVS_LOG_ERR, "fsck: %s: %s", path, kvs_strerror(err));
		return err;
	}
	err = size < SEG_HEADER_SIZE ? -KVS_ETRUNC
				     : seg_header_decode(buf, &hdr_id);
	if (!err && hdr_id != id)
		err = -KVS_ECORRUPT;
	if (err == -KVS_EVERSION) {
		kvs_log(KVS_LOG_ERR, "fsck: %s written by a newer kvstash",
			path);
		goto out;
	}
	if (err) {
		/* the records describe themselves: still walk them */
		struct kvs_fsck_record r = {
			.segment = id,
			.length =
				size < SEG_HEADER_SIZE ? size : SEG_HEADER_SIZE,
			.status = size < SEG_HEADER_SIZE ? KVS_FSCK_TORN
							 : KVS_FSCK_CORRUPT,
			.check = "segment header",
		};

		rep->bad_segments++;
		err = add(vs, &r);
	}
	if (!err)
		err = walk(id, buf, size, vs);
	for (size_t i = first; i < vs->n; i++)
		bad |= vs->v[i].status != KVS_FSCK_GOOD;
	if (!err && bad && (flags & KVS_FSCK_REPAIR)) {
		err = rewrite(io, dir, path, id, buf, vs->v + first,
			      vs->n - first);
		if (!err)
			rep->repaired_segments++;
		else
			kvs_log(KVS_LOG_ERR, "fsck: repair %s: %s", path,
				kvs_strerror(err));
	}
out:
	free(buf);
	return err;
}

/* Marks good records that a newer record of their key supersedes. */
static int mark_superseded(struct verdicts *vs)
{
	struct index ix;
	int err = index_init(&ix);

	if (err)
		return err;
	for (int pass = 0; pass < 2 && !err; pass++) {
		for (size_t i = 0; i < vs->n; i++) {
			struct kvs_fsck_record *r = &vs->v[i];
			struct entry *e;

			if (r->status != KVS_FSCK_GOOD)
				continue;
			e = index_find(&ix, &r->key);
			if (pass == 1) {
				r->superseded = e->seq > r->seq;
				continue;
			}
			if (!e && (err = index_insert(&ix, &r->key, &e)))
				break;
			if (r->seq > e->seq)
				e->seq = r->seq;
		}
	}
	for (size_t b = 0; b < ix.nbuckets; b++)
		for (struct entry *e = ix.bucket[b], *n; e; e = n) {
			n = e->hnext;
			free(e);
		}
	index_fini(&ix);
	return err;
}

int kvs_store_fsck(const char *dir, unsigned flags,
		   const struct kvs_store_io_ops *io,
		   void (*cb)(void *arg, const struct kvs_fsck_record *rec),
		   void *arg, struct kvs_fsck_report *report)
{
	struct kvs_fsck_report rep = { 0 };
	struct kvs_store_io_ops ops;
	struct verdicts vs = { 0 };
	uint64_t *ids = NULL;
	size_t n = 0;
	int lock_fd, err;

	io_ops_fill(&ops, io);
	io = &ops;
	err = superblock_check(io, dir, false);
	if (err)
		return err;
	err = store_lock(io, dir, false, &lock_fd);
	if (err)
		return err;
	err = seg_list(io, dir, &ids, &n);
	for (size_t i = 0; !err && i < n; i++) {
		err = check_segment(io, dir, ids[i], flags, &vs, &rep);
		rep.segments++;
	}
	if (!err)
		err = mark_superseded(&vs);
	if (err)
		goto free_all;
	for (size_t i = 0; i < vs.n; i++) {
		const struct kvs_fsck_record *r = &vs.v[i];

		rep.records++;
		rep.good += r->status == KVS_FSCK_GOOD;
		rep.corrupt += r->status == KVS_FSCK_CORRUPT;
		rep.torn += r->status == KVS_FSCK_TORN;
		rep.superseded += r->superseded;
		if (cb)
			cb(arg, r);
	}
	*report = rep;
free_all:
	free(vs.v);
	free(ids);
	io->close(io->ctx, lock_fd);
	return err;
}
