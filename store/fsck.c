/*
 * fsck.c - offline check of a store directory.  Each segment is walked
 * record by record (walk.c: bounded reads, holes skipped) with every
 * record verified in full (record header, payload checksum,
 * kvs_object_verify with section checksums, object key); verdicts good,
 * corrupt, torn are named exactly as recovery names them.  Good records
 * older than another record of their key are "superseded".
 *
 * Against the manifest: a listed segment with no file, a sealed one
 * without its footer (cut short), one holding fewer records than its
 * footer counts, a cleanly closed head that shrank -- "missing".  A
 * segment reclaimed but not deleted, a creation cut short, a temporary
 * file of a killed repair -- "leftover".  Files named like segments that
 * are not the store's are counted (foreign) and never touched.
 *
 * --repair (exclusive lock; without it the lock is shared and nothing is
 * written, so read-only media work): each segment that has a bad record,
 * a bad header, or is cut short is rewritten with a fresh header, its
 * good records and a footer (new file, fsync, rename over, fsync of the
 * directory); a segment left with nothing is deleted; leftovers are
 * deleted; the manifest is rewritten (missing segments acknowledged);
 * a damaged superblock is rebuilt where a manifest or a segment shows a
 * store is there; a store of an older format is upgraded.
 *
 * Tombstones (store format 3) are records: checked, superseded by a newer
 * record of their key or superseding older ones, and kept by a repair.
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

static int add_simple(struct verdicts *vs, uint64_t seg, uint64_t off,
		      uint64_t len, enum kvs_fsck_status status,
		      const char *check)
{
	struct kvs_fsck_record r = {
		.segment = seg,
		.offset = off,
		.length = len,
		.status = status,
		.check = check,
	};

	return add(vs, &r);
}

struct fsck {
	const struct kvs_store_io_ops *io;
	const char *dir;
	bool repair;
	struct kvs_fsck_report rep;
	struct verdicts vs;
	struct manifest man;
	bool have_man;
	uint32_t format;
	struct id_vec kept; /* segments there after the check (repair) */
	struct id_vec kept_bare; /* those of them without a footer */
	uint64_t max_id_seen;
	bool any_id;
	bool changed; /* the repair changed something */
	uint64_t done, total; /* bytes walked, for progress */
	const struct kvs_store_opts *opts;
};

/* ---- one segment ----------------------------------------------------- */

struct seg_check {
	struct fsck *f;
	uint64_t id;
	uint32_t records;
	bool bad, footer;
	struct seg_footer foot;
	uint64_t log_end;
};

static int verdict_cb(void *arg, const struct walk_item *it)
{
	struct seg_check *c = arg;
	struct kvs_fsck_record r = {
		.segment = c->id,
		.offset = it->off,
		.length = it->len,
		.status = it->status,
		.check = it->check,
	};

	if (it->kind == WALK_FOOTER) {
		c->footer = true;
		c->foot = it->footer;
		return 0;
	}
	if (it->has_header) {
		c->records++;
		r.seq = it->h.seq;
		r.key = it->h.key;
		r.key_valid = true;
		r.tombstone = it->h.flags & REC_FLAG_TOMBSTONE;
	}
	c->bad |= it->status != KVS_FSCK_GOOD;
	return add(&c->f->vs, &r);
}

struct copier {
	const struct kvs_store_io_ops *io;
	int fd;
	uint64_t off;
	uint32_t records;
	int err;
};

static int copy_cb(void *arg, const struct walk_item *it)
{
	struct copier *cp = arg;
	ssize_t w;

	if (it->kind != WALK_RECORD || it->status != KVS_FSCK_GOOD)
		return 0;
	w = cp->io->pwrite(cp->io->ctx, cp->fd, it->rec, it->len,
			   (off_t)cp->off);
	if (w != (ssize_t)it->len)
		return w < 0 ? (int)w : -EIO;
	cp->off += it->len;
	cp->records++;
	return 0;
}

/* Rewrites segment @id (@fd, @size bytes) with its good records only,
 * sealed; deleted when none is left.  0 or -errno. */
static int rewrite(struct fsck *f, uint64_t id, int fd, uint64_t size,
		   const char *path, bool *deleted)
{
	uint8_t page[KVS_STORE_ALIGN];
	struct copier cp = { .io = f->io, .off = SEG_HEADER_SIZE };
	struct seg_footer foot = { .id = id };
	char tmp[4300];
	ssize_t w;
	int err;

	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	cp.fd = f->io->open(f->io->ctx, tmp, O_WRONLY | O_CREAT | O_TRUNC,
			    0644);
	if (cp.fd < 0)
		return cp.fd;
	seg_header_encode(id, page);
	w = f->io->pwrite(f->io->ctx, cp.fd, page, SEG_HEADER_SIZE, 0);
	err = w != SEG_HEADER_SIZE ? (w < 0 ? (int)w : -EIO) : 0;
	if (!err)
		err = seg_walk(f->io, fd, id, size, 0, copy_cb, &cp, NULL);
	*deleted = !err && cp.records == 0;
	if (!err && !*deleted) {
		foot.end = cp.off;
		foot.records = cp.records;
		seg_footer_encode(&foot, page);
		w = f->io->pwrite(f->io->ctx, cp.fd, page, KVS_STORE_ALIGN,
				  (off_t)cp.off);
		err = w != KVS_STORE_ALIGN ? (w < 0 ? (int)w : -EIO) : 0;
	}
	if (!err && !*deleted)
		err = f->io->fsync(f->io->ctx, cp.fd);
	f->io->close(f->io->ctx, cp.fd);
	if (!err && *deleted)
		err = f->io->unlink(f->io->ctx, path);
	else if (!err)
		err = f->io->rename(f->io->ctx, tmp, path);
	if (*deleted || err)
		f->io->unlink(f->io->ctx, tmp);
	if (!err)
		err = dir_fsync(f->io, f->dir);
	return err;
}

/* The footer and manifest expectations of a walked segment. */
static int check_expected(struct fsck *f, struct seg_check *c)
{
	const struct manifest *m = &f->man;
	bool sealed_expected = f->have_man && manifest_wants_footer(m, c->id);

	if (!c->footer && sealed_expected)
		return add_simple(&f->vs, c->id, c->log_end, 0,
				  KVS_FSCK_MISSING, "cut short (no footer)");
	if (c->footer && c->records < c->foot.records && !c->bad)
		return add_simple(&f->vs, c->id, c->log_end, 0,
				  KVS_FSCK_MISSING,
				  "fewer records than its footer counts");
	if (manifest_clean_head(m, f->have_man, c->id) && !c->bad &&
	    (c->log_end < m->head_length || c->records < m->head_records))
		return add_simple(&f->vs, c->id, c->log_end, 0,
				  KVS_FSCK_MISSING,
				  "shorter than when closed cleanly");
	return 0;
}

static void progress(struct fsck *f, uint64_t bytes)
{
	f->done += bytes;
	if (f->opts && f->opts->progress)
		f->opts->progress(f->opts->progress_arg, f->done, f->total);
}

/* Within a long segment's walk: how far, over all segments. */
static void walk_progress(void *arg, uint64_t off)
{
	struct fsck *f = arg;

	if (f->opts && f->opts->progress)
		f->opts->progress(f->opts->progress_arg, f->done + off,
				  f->total);
}

/* Where the manifest says segment @id, the head, was closed cleanly: the
 * log up to there was synced, so nothing in it is torn (0: not so). */
static uint64_t clean_end(const struct fsck *f, uint64_t id)
{
	return manifest_clean_head(&f->man, f->have_man, id)
		       ? f->man.head_length
		       : 0;
}

static int check_segment(struct fsck *f, uint64_t id)
{
	struct seg_check c = { .f = f, .id = id };
	struct walk_opts wo = {
		.clean_end = clean_end(f, id),
		.progress = walk_progress,
		.progress_arg = f,
	};
	struct walk_end end;
	uint8_t page[SEG_HEADER_SIZE];
	char path[4200], name[32];
	bool listed = f->have_man && manifest_has(&f->man, id), deleted, zero;
	uint64_t size, hdr_id;
	struct stat st;
	size_t first = f->vs.n;
	ssize_t n;
	int fd, err;

	seg_name(id, name);
	snprintf(path, sizeof(path), "%s/%s", f->dir, name);
	fd = f->io->open(f->io->ctx, path, O_RDONLY, 0);
	if (fd < 0) {
		kvs_log(KVS_LOG_ERR, "fsck: %s: %s", path, kvs_strerror(fd));
		return fd;
	}
	file_no_readahead(fd);
	err = f->io->stat(f->io->ctx, NULL, fd, &st);
	if (err)
		goto out;
	size = (uint64_t)st.st_size / KVS_STORE_ALIGN * KVS_STORE_ALIGN;
	n = f->io->pread(f->io->ctx, fd, page, SEG_HEADER_SIZE, 0);
	err = n != SEG_HEADER_SIZE ? -KVS_ETRUNC
				   : seg_header_decode(page, &hdr_id);
	if (!err && hdr_id != id)
		err = -KVS_ECORRUPT;
	if (err == -KVS_EVERSION) {
		kvs_log(KVS_LOG_ERR, "fsck: %s written by a newer kvstash",
			path);
		goto out;
	}
	if (!err && f->have_man && !listed && id < f->man.next_id) {
		/* left out of the manifest, not deleted: a reclaim a crash
		 * interrupted */
		err = add_simple(&f->vs, id, 0, size, KVS_FSCK_LEFTOVER,
				 "reclaimed, not deleted");
		f->rep.leftovers++;
		if (!err && f->repair) {
			err = f->io->unlink(f->io->ctx, path);
			f->changed = true;
		}
		goto out;
	}
	if (err && !listed && !seg_starts_log(f->io, fd, size, page)) {
		err = file_is_zero(f->io, fd, 0, size, &zero);
		if (!err && f->have_man && id == f->man.next_id && zero) {
			err = add_simple(&f->vs, id, 0, size, KVS_FSCK_LEFTOVER,
					 "creation cut short");
			f->rep.leftovers++;
			if (!err && f->repair) {
				err = f->io->unlink(f->io->ctx, path);
				f->changed = true;
			}
			goto out;
		}
		kvs_log(KVS_LOG_WARN,
			"fsck: %s is not a segment of this store: left alone",
			path);
		f->rep.foreign++;
		goto out;
	}
	f->rep.segments++;
	if (err) {
		f->rep.bad_segments++;
		c.bad = true;
		err = add_simple(&f->vs, id, 0,
				 size < SEG_HEADER_SIZE ? size
							: SEG_HEADER_SIZE,
				 size < SEG_HEADER_SIZE ? KVS_FSCK_TORN
							: KVS_FSCK_CORRUPT,
				 "segment header");
		if (err)
			goto out;
	}
	err = seg_walk_opts(f->io, fd, id, size, &wo, verdict_cb, &c, &end);
	if (err)
		goto out;
	c.log_end = end.log_end;
	err = check_expected(f, &c);
	if (err)
		goto out;
	progress(f, size);
	for (size_t i = first; i < f->vs.n; i++)
		c.bad |= f->vs.v[i].status != KVS_FSCK_GOOD;
	deleted = false;
	if (c.bad && f->repair) {
		err = rewrite(f, id, fd, size, path, &deleted);
		if (err) {
			kvs_log(KVS_LOG_ERR, "fsck: repair %s: %s", path,
				kvs_strerror(err));
			goto out;
		}
		f->rep.repaired_segments++;
		f->changed = true;
	}
	if (!deleted)
		err = id_vec_push(&f->kept, id);
	if (!err && !deleted && !c.footer && !(c.bad && f->repair))
		err = id_vec_push(&f->kept_bare, id);
out:
	f->io->close(f->io->ctx, fd);
	return err;
}

/* ---- the directory ---------------------------------------------------- */

/* Listed segments with no file. */
static int check_missing(struct fsck *f, const struct dir_listing *ls)
{
	size_t k = 0;
	int err = 0;

	for (uint32_t r = 0; f->have_man && r < f->man.nruns && !err; r++)
		for (uint64_t id = f->man.runs[r].first;
		     id < f->man.runs[r].end && !err; id++) {
			while (k < ls->segs.n && ls->segs.v[k] < id)
				k++;
			if (k < ls->segs.n && ls->segs.v[k] == id)
				continue;
			err = add_simple(&f->vs, id, 0, 0, KVS_FSCK_MISSING,
					 "segment missing");
			f->changed |= f->repair;
		}
	return err;
}

static int check_tmps(struct fsck *f, const struct dir_listing *ls)
{
	char path[4200], name[32];
	int err = 0;

	for (size_t i = 0; i < ls->tmps.n && !err; i++) {
		seg_name(ls->tmps.v[i], name);
		snprintf(path, sizeof(path), "%s/%s.tmp", f->dir, name);
		if (!leftover_is_ours(f->io, path)) {
			f->rep.foreign++;
			continue;
		}
		f->rep.leftovers++;
		err = add_simple(&f->vs, ls->tmps.v[i], 0, 0, KVS_FSCK_LEFTOVER,
				 "temporary file of a repair");
		if (!err && f->repair) {
			err = f->io->unlink(f->io->ctx, path);
			f->changed = true;
		}
	}
	return err;
}

/* The superblock: read, or (repairing, where a store shows) rebuilt. */
static int check_superblock(struct fsck *f, const struct dir_listing *ls)
{
	struct sb_state sb;
	int err = superblock_read(f->io, f->dir, &sb);

	if (err == -KVS_EVERSION || (err && err != -ENOENT &&
				     err != -KVS_EHDRSUM && err != -KVS_EMAGIC))
		return err;
	f->format = err ? KVS_STORE_FORMAT_VERSION : sb.version;
	f->rep.superblock_damaged = err || sb.copies_bad;
	if (!f->rep.superblock_damaged)
		return 0;
	/* files only named like segments are not a store to rebuild */
	if (err && !ls->manifest && !dir_shows_segments(f->io, f->dir, ls)) {
		kvs_log(KVS_LOG_ERR, "fsck: no store at %s", f->dir);
		return -ENOENT;
	}
	if (!f->repair) {
		if (err)
			kvs_log(KVS_LOG_ERR,
				"fsck: %s: superblock %s; run with --repair to "
				"rebuild it",
				f->dir, sb.missing ? "missing" : "damaged");
		return err;
	}
	err = superblock_write(f->io, f->dir);
	f->changed = true;
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

/* Publishes the manifest of what is there now (repair, upgrade). */
static int write_manifest(struct fsck *f)
{
	struct manifest m = {
		.generation = f->have_man ? f->man.generation + 1 : 1,
		.head_id = MANIFEST_NO_HEAD,
	};
	uint64_t next = f->any_id ? f->max_id_seen + 1 : 0;
	int err;

	if (f->have_man && f->man.next_id > next)
		next = f->man.next_id;
	m.next_id = next;
	m.runs = malloc((f->kept.n + f->kept_bare.n + 1) * sizeof(*m.runs));
	if (!m.runs)
		return -ENOMEM;
	m.bare = m.runs + f->kept.n;
	for (size_t i = 0; i < f->kept.n; i++)
		id_runs_add(m.runs, &m.nruns, f->kept.v[i]);
	for (size_t i = 0; i < f->kept_bare.n; i++)
		id_runs_add(m.bare, &m.nbare, f->kept_bare.v[i]);
	/* the head stays the head if it was left as it was */
	if (f->have_man && f->man.head_id != MANIFEST_NO_HEAD &&
	    manifest_has(&m, f->man.head_id) && !f->rep.repaired_segments)
		m.head_id = f->man.head_id;
	err = manifest_store(f->io, f->dir, &m);
	free(m.runs);
	return err;
}

static void load_manifest(struct fsck *f)
{
	int err;

	if (f->format < 2)
		return;
	err = manifest_load(f->io, f->dir, &f->man);
	f->have_man = err == 0;
	f->rep.manifest_damaged = err != 0;
}

int kvs_store_fsck(const char *dir, unsigned flags,
		   const struct kvs_store_opts *opts,
		   void (*cb)(void *arg, const struct kvs_fsck_record *rec),
		   void *arg, struct kvs_fsck_report *report)
{
	struct kvs_store_io_ops ops;
	struct store_lock lock;
	struct dir_listing ls = { 0 };
	struct fsck f = {
		.io = &ops,
		.dir = dir,
		.repair = flags & KVS_FSCK_REPAIR,
		.opts = opts,
	};
	int err;

	io_ops_fill(&ops, opts ? opts->io : NULL);
	err = store_lock(f.io, dir, f.repair, false,
			 opts ? opts->lock_timeout_ms : 30000, &lock);
	if (err)
		return err;
	/* a manifest renamed into place by a killed process may not be
	 * durable yet: a repair deciding on its word makes it so first */
	if (f.repair)
		err = dir_fsync(f.io, dir);
	if (!err)
		err = dir_list(f.io, dir, &ls);
	if (!err)
		err = check_superblock(&f, &ls);
	if (err)
		goto out;
	load_manifest(&f);
	for (size_t i = 0; i < ls.segs.n; i++) {
		uint64_t id = ls.segs.v[i];
		char path[4200], name[32];
		struct stat st;

		if (!f.any_id || id > f.max_id_seen)
			f.max_id_seen = id;
		f.any_id = true;
		seg_name(id, name);
		snprintf(path, sizeof(path), "%s/%s", dir, name);
		if (f.io->stat(f.io->ctx, path, -1, &st) == 0)
			f.total += (uint64_t)st.st_size;
	}
	for (size_t i = 0; !err && i < ls.segs.n; i++)
		err = check_segment(&f, ls.segs.v[i]);
	if (!err)
		err = check_missing(&f, &ls);
	if (!err)
		err = check_tmps(&f, &ls);
	if (!err && f.repair && (f.changed || !f.have_man || f.format < 2))
		err = write_manifest(&f);
	if (!err && f.repair && f.format < KVS_STORE_FORMAT_VERSION)
		err = superblock_write(f.io, dir);
	if (!err)
		err = mark_superseded(&f.vs);
	if (err)
		goto out;
	f.rep.format_version = f.format;
	f.rep.repaired = f.changed;
	for (size_t i = 0; i < f.vs.n; i++) {
		const struct kvs_fsck_record *r = &f.vs.v[i];

		f.rep.records += r->status != KVS_FSCK_MISSING &&
				 r->status != KVS_FSCK_LEFTOVER;
		f.rep.good += r->status == KVS_FSCK_GOOD;
		f.rep.corrupt += r->status == KVS_FSCK_CORRUPT;
		f.rep.torn += r->status == KVS_FSCK_TORN;
		f.rep.missing += r->status == KVS_FSCK_MISSING;
		f.rep.superseded += r->superseded;
		f.rep.tombstones += r->status == KVS_FSCK_GOOD && r->tombstone;
		if (cb)
			cb(arg, r);
	}
	if (report)
		*report = f.rep;
out:
	free(f.vs.v);
	free(f.kept.v);
	free(f.kept_bare.v);
	free(f.man.runs);
	dir_listing_free(&ls);
	store_unlock(f.io, &lock);
	return err;
}
