/*
 * format.c - the store's on-disk encodings, little-endian, each with its own
 * checksum (xxh3-64) and validated magic -> version -> checksum -> bounds.
 *
 * superblock (file KVSTASH, 64 bytes)
 *   0 magic "KVSSTORE"  8 u32 version  12 u32 flags  16..55 zero
 *   56 u64 xxh3 of bytes 0..55
 * segment header (first 4096 bytes of seg-<id>.kvs)
 *   0 magic "KVSSEG01"  8 u32 version  12 u32 flags  16 u64 segment id
 *   24 u64 xxh3 of bytes 0..23, rest zero
 * record header (128 bytes, at a 4096-aligned offset, object follows)
 *   0 u32 magic "KVSR"  4 u16 version  6 u16 flags  8 u64 sequence
 *   16 u32 object length  20 u32 layer  24 u64 xxh3 of the object
 *   32 span id [32]  64..119 zero  120 u64 xxh3 of bytes 0..119
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

#include "common/bytes.h"
#include "kvstash/log.h"
#include "store_internal.h"

#define SB_MAGIC 0x45524f5453535653ull /* "KVSSTORE" */
#define SEG_MAGIC 0x313047455353564bull /* "KVSSEG01" */
#define REC_MAGIC 0x5253564bu /* "KVSR" */
#define SB_SIZE 64

_Static_assert(REC_HEADER_SIZE == 128, "record header is 128 bytes");
_Static_assert(SEG_HEADER_SIZE % KVS_STORE_ALIGN == 0, "aligned segment");

uint64_t payload_checksum(const uint8_t *obj, size_t len)
{
	return XXH3_64bits(obj, len);
}

/* Chunks small enough to stay in L1 between being copied and hashed. */
#define COPY_CHUNK (16u << 10)

uint64_t payload_copy_checksum(uint8_t *dst, const uint8_t *src, size_t len)
{
	XXH3_state_t st;

	XXH3_64bits_reset(&st);
	for (size_t off = 0; off < len; off += COPY_CHUNK) {
		size_t n = len - off < COPY_CHUNK ? len - off : COPY_CHUNK;

		memcpy(dst + off, src + off, n);
		XXH3_64bits_update(&st, dst + off, n);
	}
	return XXH3_64bits_digest(&st);
}

void rec_header_encode(const struct rec_header *h, uint8_t *buf)
{
	memset(buf, 0, REC_HEADER_SIZE);
	kvs_put32(buf, REC_MAGIC);
	kvs_put16(buf + 4, KVS_STORE_FORMAT_VERSION);
	kvs_put16(buf + 6, h->flags);
	kvs_put64(buf + 8, h->seq);
	kvs_put32(buf + 16, h->length);
	kvs_put32(buf + 20, h->key.layer);
	kvs_put64(buf + 24, h->payload_sum);
	memcpy(buf + 32, h->key.span_id, KVS_ID_SIZE);
	kvs_put64(buf + 120, XXH3_64bits(buf, 120));
}

int rec_header_decode(const uint8_t *buf, struct rec_header *out)
{
	struct rec_header h;

	if (kvs_get32(buf) != REC_MAGIC)
		return -KVS_EMAGIC;
	h.version = kvs_get16(buf + 4);
	if (h.version != KVS_STORE_FORMAT_VERSION)
		return -KVS_EVERSION;
	if (kvs_get64(buf + 120) != XXH3_64bits(buf, 120))
		return -KVS_EHDRSUM;
	h.flags = kvs_get16(buf + 6);
	h.seq = kvs_get64(buf + 8);
	h.length = kvs_get32(buf + 16);
	h.key.layer = kvs_get32(buf + 20);
	h.payload_sum = kvs_get64(buf + 24);
	memcpy(h.key.span_id, buf + 32, KVS_ID_SIZE);
	if (h.length < KVS_HEADER_SIZE || h.length > STORE_MAX_OBJECT)
		return -KVS_EBOUNDS;
	*out = h;
	return 0;
}

void seg_header_encode(uint64_t id, uint8_t *buf)
{
	memset(buf, 0, SEG_HEADER_SIZE);
	kvs_put64(buf, SEG_MAGIC);
	kvs_put32(buf + 8, KVS_STORE_FORMAT_VERSION);
	kvs_put64(buf + 16, id);
	kvs_put64(buf + 24, XXH3_64bits(buf, 24));
}

int seg_header_decode(const uint8_t *buf, uint64_t *id)
{
	if (kvs_get64(buf) != SEG_MAGIC)
		return -KVS_EMAGIC;
	if (kvs_get32(buf + 8) != KVS_STORE_FORMAT_VERSION)
		return -KVS_EVERSION;
	if (kvs_get64(buf + 24) != XXH3_64bits(buf, 24))
		return -KVS_EHDRSUM;
	*id = kvs_get64(buf + 16);
	return 0;
}

const char *rec_check_name(int err)
{
	switch (err) {
	case -KVS_EMAGIC:
		return "record magic";
	case -KVS_EVERSION:
		return "record version";
	case -KVS_EHDRSUM:
		return "record header checksum";
	case -KVS_EBOUNDS:
		return "record length";
	default:
		return "record";
	}
}

int record_verify(const uint8_t *rec, size_t avail,
		  const struct kvs_store_key *expect, unsigned verify_flags,
		  struct rec_header *out, const char **check_out)
{
	struct rec_header h;
	struct kvs_store_key okey;
	const uint8_t *obj = rec + REC_HEADER_SIZE;
	const char *check;
	int err;

	err = rec_header_decode(rec, &h);
	if (err) {
		check = rec_check_name(err);
		goto bad;
	}
	if (REC_HEADER_SIZE + (uint64_t)h.length > avail) {
		err = -KVS_ETRUNC;
		check = "record length";
		goto bad;
	}
	if (expect && memcmp(expect, &h.key, sizeof(h.key)) != 0) {
		err = -KVS_ECORRUPT;
		check = "record key";
		goto bad;
	}
	if (payload_checksum(obj, h.length) != h.payload_sum) {
		err = -KVS_ESECTSUM;
		check = "record checksum";
		goto bad;
	}
	err = kvs_object_verify(obj, h.length, verify_flags);
	if (err) {
		check = kvs_check_name(err);
		goto bad;
	}
	err = kvs_store_key_of(obj, h.length, &okey);
	if (err || memcmp(&okey, &h.key, sizeof(okey)) != 0) {
		err = -KVS_ECORRUPT;
		check = "object key";
		goto bad;
	}
	if (out)
		*out = h;
	return 0;
bad:
	if (check_out)
		*check_out = check;
	return err;
}

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

static int superblock_create(const struct kvs_store_io_ops *io, const char *dir,
			     const char *path)
{
	uint8_t sb[SB_SIZE] = { 0 };
	char tmp[4200];
	ssize_t n;
	int fd, err;

	kvs_put64(sb, SB_MAGIC);
	kvs_put32(sb + 8, KVS_STORE_FORMAT_VERSION);
	kvs_put64(sb + 56, XXH3_64bits(sb, 56));
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
	if (err)
		goto unlink_tmp;
	err = io->rename(io->ctx, tmp, path);
	if (err)
		goto unlink_tmp;
	return dir_fsync(io, dir);
unlink_tmp:
	io->unlink(io->ctx, tmp);
fail:
	kvs_log(KVS_LOG_ERR, "store: cannot create %s: %s", path,
		kvs_strerror(err));
	return err;
}

int superblock_check(const struct kvs_store_io_ops *io, const char *dir,
		     bool create)
{
	uint8_t sb[SB_SIZE];
	char path[4096];
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, SUPERBLOCK_NAME);
	fd = io->open(io->ctx, path, O_RDONLY, 0);
	if (fd == -ENOENT && create)
		return superblock_create(io, dir, path);
	if (fd < 0) {
		kvs_log(KVS_LOG_ERR, "store: %s: %s", path,
			fd == -ENOENT ? "no store here" : strerror(-fd));
		return fd;
	}
	n = io->pread(io->ctx, fd, sb, sizeof(sb), 0);
	io->close(io->ctx, fd);
	if (n != sizeof(sb) || kvs_get64(sb) != SB_MAGIC) {
		kvs_log(KVS_LOG_ERR, "store: %s is not a kvstash store", dir);
		return -KVS_EMAGIC;
	}
	if (kvs_get32(sb + 8) > KVS_STORE_FORMAT_VERSION) {
		kvs_log(KVS_LOG_ERR,
			"store: %s was written by a newer kvstash (store "
			"format %u, this one reads up to %u); refusing to open "
			"it",
			dir, kvs_get32(sb + 8), KVS_STORE_FORMAT_VERSION);
		return -KVS_EVERSION;
	}
	if (kvs_get32(sb + 8) != KVS_STORE_FORMAT_VERSION ||
	    kvs_get64(sb + 56) != XXH3_64bits(sb, 56)) {
		kvs_log(KVS_LOG_ERR, "store: %s: superblock corrupt", dir);
		return -KVS_EHDRSUM;
	}
	return 0;
}

void seg_name(uint64_t id, char out[32])
{
	snprintf(out, 32, "seg-%016llx.kvs", (unsigned long long)id);
}

int seg_name_parse(const char *name, uint64_t *id)
{
	unsigned long long v;
	char tail[8];

	if (strlen(name) != 24 || strncmp(name, "seg-", 4) != 0)
		return -EINVAL;
	if (sscanf(name + 4, "%16llx%7s", &v, tail) != 2 ||
	    strcmp(tail, ".kvs") != 0)
		return -EINVAL;
	*id = v;
	return 0;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

struct id_list {
	uint64_t *v;
	size_t n, cap;
};

static int collect_id(void *arg, const char *name)
{
	struct id_list *l = arg;
	uint64_t id, *grown;

	if (seg_name_parse(name, &id))
		return 0;
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 64;

		grown = realloc(l->v, cap * sizeof(*grown));
		if (!grown)
			return -ENOMEM;
		l->v = grown;
		l->cap = cap;
	}
	l->v[l->n++] = id;
	return 0;
}

int seg_list(const struct kvs_store_io_ops *io, const char *dir, uint64_t **ids,
	     size_t *n)
{
	struct id_list l = { 0 };
	int err = io->list(io->ctx, dir, collect_id, &l);

	if (err) {
		kvs_log(KVS_LOG_ERR, "store: listing segments in %s: %s", dir,
			kvs_strerror(err));
		free(l.v);
		return err;
	}
	if (l.n)
		qsort(l.v, l.n, sizeof(*l.v), cmp_u64);
	*ids = l.v;
	*n = l.n;
	return 0;
}

int store_lock(const struct kvs_store_io_ops *io, const char *dir, bool create,
	       int *fd_out)
{
	char path[4096];
	int fd, err;

	if (create) {
		err = io->mkdir(io->ctx, dir, 0755);
		if (err && err != -EEXIST) {
			kvs_log(KVS_LOG_ERR, "store: mkdir %s: %s", dir,
				kvs_strerror(err));
			return err;
		}
	}
	snprintf(path, sizeof(path), "%s/%s", dir, LOCK_NAME);
	fd = io->open(io->ctx, path, O_RDWR | O_CREAT, 0644);
	if (fd < 0) {
		if (fd == -ENOENT)
			kvs_log(KVS_LOG_ERR, "store: no store at %s", dir);
		else
			kvs_log(KVS_LOG_ERR, "store: %s: %s", path,
				kvs_strerror(fd));
		return fd;
	}
	err = io->lock(io->ctx, fd);
	if (err) {
		kvs_log(KVS_LOG_ERR, "store: lock %s: %s", path,
			kvs_strerror(err));
		io->close(io->ctx, fd);
		return err;
	}
	*fd_out = fd;
	return 0;
}
