/*
 * manifest.c - the store's manifest (file MANIFEST): the set of segments
 * that exist, as runs of ids; the next id to use; the head, and, when it
 * was closed cleanly, its log end and record count.  Published like the
 * superblock (write -> fsync -> rename -> fsync of the directory).
 *
 * It is what makes losses visible: a segment the manifest lists with no
 * file is missing (reported at every open until fsck --repair); a sealed
 * segment without its footer was cut short.  The order of writes keeps it
 * honest across a crash: a segment is removed from the manifest, durably,
 * before its file is deleted, and a new segment is durable (file and
 * directory entry) before the manifest lists it -- a file newer than the
 * manifest's next id is a segment created just before a crash, one that
 * is listed nowhere and older is a reclaim that did not finish.
 *
 * Its size is that of the runs: one when segments are reclaimed oldest
 * first, one more for each hole compaction leaves.  It is rewritten when
 * segments are created or deleted (every segment_size bytes at most) and
 * at a clean close.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvstash/log.h"
#include "store_internal.h"

#define MANIFEST_MAX_BYTES (64u << 20)

int manifest_load(const struct kvs_store_io_ops *io, const char *dir,
		  struct manifest *out)
{
	char path[4200];
	struct stat st;
	uint8_t *buf;
	ssize_t n;
	int fd, err;

	snprintf(path, sizeof(path), "%s/%s", dir, MANIFEST_NAME);
	fd = io->open(io->ctx, path, O_RDONLY, 0);
	if (fd < 0) {
		if (fd != -ENOENT)
			kvs_log(KVS_LOG_ERR, "store: %s: %s", path,
				strerror(-fd));
		return fd;
	}
	err = io->stat(io->ctx, NULL, fd, &st);
	if (!err && (st.st_size <= 0 || st.st_size > MANIFEST_MAX_BYTES))
		err = -KVS_EBOUNDS;
	buf = err ? NULL : malloc((size_t)st.st_size);
	if (!err && !buf)
		err = -ENOMEM;
	if (!err) {
		n = io->pread(io->ctx, fd, buf, (size_t)st.st_size, 0);
		err = n < 0 ? (int)n : n != st.st_size ? -KVS_ETRUNC : 0;
	}
	if (!err)
		err = manifest_decode(buf, (size_t)st.st_size, out);
	io->close(io->ctx, fd);
	free(buf);
	if (err)
		kvs_log(KVS_LOG_ERR, "store: %s: %s", path, kvs_strerror(err));
	return err;
}

int manifest_store(const struct kvs_store_io_ops *io, const char *dir,
		   const struct manifest *m)
{
	size_t len = manifest_encoded_size(m->nruns, m->nbare);
	char path[4200], tmp[4300];
	uint8_t *buf = malloc(len);
	ssize_t n;
	int fd, err;

	snprintf(path, sizeof(path), "%s/%s", dir, MANIFEST_NAME);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	if (!buf) {
		err = -ENOMEM;
		goto fail;
	}
	manifest_encode(m, buf);
	fd = io->open(io->ctx, tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0) {
		err = fd;
		goto fail;
	}
	n = io->pwrite(io->ctx, fd, buf, len, 0);
	err = n < 0 ? (int)n : (size_t)n != len ? -EIO : 0;
	if (!err)
		err = io->fsync(io->ctx, fd);
	io->close(io->ctx, fd);
	if (!err)
		err = io->rename(io->ctx, tmp, path);
	if (!err)
		err = dir_fsync(io, dir);
	if (err)
		goto unlink_tmp;
	free(buf);
	return 0;
unlink_tmp:
	io->unlink(io->ctx, tmp);
fail:
	free(buf);
	kvs_log(KVS_LOG_ERR, "store: cannot write %s: %s", path,
		kvs_strerror(err));
	return err;
}

int store_manifest_write(struct kvs_store *s, bool clean)
{
	struct segment *head = head_seg(s);
	struct manifest m = {
		.generation = s->manifest_gen + 1,
		.next_id = s->next_seg_id,
		.head_id = head ? head->id : MANIFEST_NO_HEAD,
	};
	size_t k = 0, room = s->nsegs + s->nmissing + 1;
	struct list *l;
	int err;

	m.runs = malloc(2 * room * sizeof(*m.runs));
	if (!m.runs)
		return -ENOMEM;
	m.bare = m.runs + room;
	/* segments oldest (lowest id) first, merged with the missing ids */
	for (l = s->segments.prev; l != &s->segments; l = l->prev) {
		struct segment *seg = list_entry(l, struct segment, link);

		while (k < s->nmissing && s->missing[k] < seg->id)
			id_runs_add(m.runs, &m.nruns, s->missing[k++]);
		/* a footer a killed process wrote may not be durable: the
		 * manifest vouches for it only once it is */
		if (seg->footer && seg->footer_unsure && !seg->sync_failed &&
		    seg_sync(s, seg) == 0)
			seg->footer_unsure = false;
		id_runs_add(m.runs, &m.nruns, seg->id);
		if (!seg->footer || seg->footer_unsure)
			id_runs_add(m.bare, &m.nbare, seg->id);
	}
	while (k < s->nmissing)
		id_runs_add(m.runs, &m.nruns, s->missing[k++]);
	if (clean && head) {
		m.flags |= MANIFEST_CLEAN;
		m.head_length = head->size;
		m.head_records = head->nrec;
	}
	err = manifest_store(s->io, s->dir, &m);
	if (!err) {
		s->manifest_gen = m.generation;
		s->clean_on_disk = clean && head;
	}
	free(m.runs);
	return err;
}
