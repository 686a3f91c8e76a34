/*
 * fuzz_store.c - libFuzzer target for the store's on-disk parsing: the
 * superblock, the segment header and footer, the record header, the
 * manifest (store/format.c), and the walk of a whole segment image that
 * recovery and fsck share (store/walk.c, through an ops table that reads
 * the input).
 *
 * Input: one selector byte, then the bytes to parse (what the selector
 * names; a segment image for the walk).  Oracles beyond "no crash" (and no
 * out-of-bounds read under the sanitizers): an accepted structure encodes
 * back to one that decodes to the same fields; an accepted record header
 * is a record with an object or a tombstone without one, nothing else;
 * the manifest's lookups agree with its runs; the walk's verdicts come in
 * order, never overlap, stay in the image, its good records verify (a
 * good tombstone is one page), and it ends where its summary says.
 * Returns 0 when the input was accepted (decoded; walked with no damage),
 * else the refusal.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_target.h"
#include "store_internal.h"

enum {
	SEL_SUPERBLOCK,
	SEL_SEG_HEADER,
	SEL_REC_HEADER,
	SEL_FOOTER,
	SEL_MANIFEST,
	SEL_WALK,
	SEL_COUNT,
};

/* Bounded walks: the image is the input, at most this big. */
#define WALK_MAX (4u << 20)

static int superblock(const uint8_t *p, size_t n)
{
	uint8_t enc[SB_SIZE];
	uint32_t v, v2;
	int err;

	if (n < SB_SIZE)
		return -KVS_ETRUNC;
	err = sb_decode(p, &v);
	if (err)
		return err;
	if (v == 0 || v > KVS_STORE_FORMAT_VERSION)
		abort();
	sb_encode(enc);
	if (sb_decode(enc, &v2) || v2 != KVS_STORE_FORMAT_VERSION)
		abort();
	return 0;
}

static int seg_header(const uint8_t *p, size_t n)
{
	uint8_t *page = calloc(1, SEG_HEADER_SIZE);
	uint64_t id, id2;
	int err;

	if (!page)
		abort();
	if (n < 32) {
		free(page);
		return -KVS_ETRUNC;
	}
	memcpy(page, p, n < SEG_HEADER_SIZE ? n : SEG_HEADER_SIZE);
	err = seg_header_decode(page, &id);
	if (!err) {
		seg_header_encode(id, page);
		if (seg_header_decode(page, &id2) || id2 != id)
			abort();
	}
	free(page);
	return err;
}

static int rec_header(const uint8_t *p, size_t n)
{
	uint8_t enc[REC_HEADER_SIZE];
	struct rec_header h, h2;
	int err;

	if (n < REC_HEADER_SIZE)
		return -KVS_ETRUNC;
	err = rec_header_decode(p, &h);
	if (err)
		return err;
	if (h.seq == 0 || h.seq > REC_SEQ_MAX || h.length > STORE_MAX_OBJECT)
		abort();
	/* a tombstone carries no object; a record always one */
	if ((h.flags & ~REC_FLAG_TOMBSTONE) ||
	    (h.flags & REC_FLAG_TOMBSTONE ? h.length != 0 || h.payload_sum != 0
					  : h.length < KVS_HEADER_SIZE))
		abort();
	rec_header_encode(&h, enc);
	if (rec_header_decode(enc, &h2) ||
	    memcmp(&h.key, &h2.key, sizeof(h.key)) || h.seq != h2.seq ||
	    h.length != h2.length || h.payload_sum != h2.payload_sum ||
	    h.flags != h2.flags)
		abort();
	return 0;
}

static int footer(const uint8_t *p, size_t n)
{
	uint8_t *page = calloc(1, KVS_STORE_ALIGN);
	struct seg_footer f, f2;
	int err;

	if (!page)
		abort();
	if (n < 64) {
		free(page);
		return -KVS_ETRUNC;
	}
	memcpy(page, p, n < KVS_STORE_ALIGN ? n : KVS_STORE_ALIGN);
	err = seg_footer_decode(page, &f);
	if (!err) {
		seg_footer_encode(&f, page);
		if (seg_footer_decode(page, &f2) || f.id != f2.id ||
		    f.end != f2.end || f.records != f2.records)
			abort();
	}
	free(page);
	return err;
}

static int manifest(const uint8_t *p, size_t n)
{
	struct manifest m, m2;
	uint8_t *enc;
	int err = manifest_decode(p, n, &m);

	if (err)
		return err;
	/* the lookups agree with the runs, at their edges */
	for (uint32_t i = 0; i < m.nruns; i++) {
		if (!manifest_has(&m, m.runs[i].first) ||
		    !manifest_has(&m, m.runs[i].end - 1) ||
		    (i + 1 < m.nruns && manifest_has(&m, m.runs[i].end)))
			abort();
	}
	for (uint32_t i = 0; i < m.nbare; i++)
		if (manifest_wants_footer(&m, m.bare[i].first))
			abort();
	enc = malloc(manifest_encoded_size(m.nruns, m.nbare));
	if (!enc)
		abort();
	manifest_encode(&m, enc);
	if (manifest_decode(enc, manifest_encoded_size(m.nruns, m.nbare),
			    &m2) ||
	    m2.nruns != m.nruns || m2.nbare != m.nbare ||
	    m2.next_id != m.next_id || m2.head_id != m.head_id ||
	    m2.flags != m.flags || m2.generation != m.generation ||
	    memcmp(m2.runs, m.runs, (m.nruns + m.nbare) * sizeof(*m.runs)))
		abort();
	free(m2.runs);
	free(enc);
	free(m.runs);
	return 0;
}

/* ---- the walk, over an image in memory ------------------------------- */

struct image {
	const uint8_t *p;
	size_t n;
};

static ssize_t mem_pread(void *ctx, int fd, void *buf, size_t len, off_t off)
{
	const struct image *im = ctx;

	if (off < 0)
		abort();
	if ((size_t)off >= im->n)
		return 0;
	if (len > im->n - (size_t)off)
		len = im->n - (size_t)off;
	memcpy(buf, im->p + off, len);
	return (ssize_t)len;
}

static int mem_seek_data(void *ctx, int fd, uint64_t off, uint64_t *out)
{
	const struct image *im = ctx;

	if (off >= im->n)
		return -ENXIO;
	*out = off; /* no holes: every byte is data */
	return 0;
}

struct walk_check {
	const struct image *im;
	uint64_t next; /* no item may start before it */
	int items;
};

static int walk_cb(void *arg, const struct walk_item *it)
{
	struct walk_check *c = arg;

	if (it->off < c->next || it->off + it->len > c->im->n ||
	    it->off % KVS_STORE_ALIGN)
		abort();
	if (it->kind == WALK_RECORD && it->status == KVS_FSCK_GOOD &&
	    (!it->rec || record_verify(it->rec, it->len, NULL, 0, NULL, NULL)))
		abort();
	/* a good tombstone is one page: its header and zeros */
	if (it->kind == WALK_RECORD && it->status == KVS_FSCK_GOOD &&
	    (it->h.flags & REC_FLAG_TOMBSTONE) && it->len != KVS_STORE_ALIGN)
		abort();
	c->next = it->off + (it->len ? it->len : 1);
	c->items++;
	return 0;
}

static int walk(const uint8_t *p, size_t n)
{
	struct image im = { .p = p,
			    .n = n / KVS_STORE_ALIGN * KVS_STORE_ALIGN };
	struct kvs_store_io_ops ops;
	struct walk_check c = { .im = &im, .next = SEG_HEADER_SIZE };
	struct walk_end end;
	int err;

	if (n > WALK_MAX)
		return -KVS_EBOUNDS;
	memset(&ops, 0, sizeof(ops));
	ops.pread = mem_pread;
	ops.seek_data = mem_seek_data;
	ops.ctx = &im;
	err = seg_walk(&ops, -1, 0, im.n, 0, walk_cb, &c, &end);
	if (err)
		abort(); /* reads from memory do not fail */
	if (end.log_end > im.n ||
	    (end.footer && end.log_end + KVS_STORE_ALIGN > im.n))
		abort();
	return end.damaged ? -KVS_ECORRUPT : 0;
}

int kvs_fuzz_target_run(const uint8_t *data, size_t size)
{
	if (size < 1)
		return -KVS_ETRUNC;
	switch (data[0] % SEL_COUNT) {
	case SEL_SUPERBLOCK:
		return superblock(data + 1, size - 1);
	case SEL_SEG_HEADER:
		return seg_header(data + 1, size - 1);
	case SEL_REC_HEADER:
		return rec_header(data + 1, size - 1);
	case SEL_FOOTER:
		return footer(data + 1, size - 1);
	case SEL_MANIFEST:
		return manifest(data + 1, size - 1);
	default:
		return walk(data + 1, size - 1);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	kvs_fuzz_target_run(data, size);
	return 0;
}
