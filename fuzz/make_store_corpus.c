/*
 * make_store_corpus.c - writes the seed corpus of fuzz_store.c: each of the
 * store's on-disk structures valid (ok-*) and damaged in the ways that
 * matter (bad-*: a flipped bit, a newer version with a valid checksum, a
 * sequence number at the top, overlapping manifest runs, a tombstone
 * with a length or an unknown flag), and segment images for the walk
 * (sealed, an unsealed head with its unused zeros, a torn tail, a corrupt
 * record in the middle, tombstones among the records).  Every file is one
 * selector byte (fuzz_store.c) followed by the bytes to parse; names start with
 * ok- or bad- for fuzz_replay's expectations.
 *
 * Usage: make_store_corpus DIR   (regenerate fuzz/corpus_store after a
 * change of the store's format)
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "store_internal.h"
#include "store_test.h"

enum { SEL_SB, SEL_SEG, SEL_REC, SEL_FOOT, SEL_MANI, SEL_WALK };

static const char *out_dir;
static int failed;

static void emit(const char *name, int sel, const uint8_t *p, size_t n)
{
	char path[4096];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", out_dir, name);
	f = fopen(path, "wb");
	if (!f || fputc(sel, f) == EOF || (n && fwrite(p, 1, n, f) != n)) {
		fprintf(stderr, "%s: %s\n", path, strerror(errno));
		failed = 1;
	}
	if (f && fclose(f))
		failed = 1;
}

/* Sets the u32 at @at of @buf to @v and the xxh3 of [0, @sum_at) at
 * @sum_at: a well-formed structure with that field. */
static void resum32(uint8_t *buf, size_t at, uint32_t v, size_t sum_at)
{
	kvs_put32(buf + at, v);
	kvs_put64(buf + sum_at, XXH3_64bits(buf, sum_at));
}

static void superblocks(void)
{
	uint8_t sb[SB_SIZE];

	sb_encode(sb);
	emit("ok-superblock", SEL_SB, sb, sizeof(sb));
	resum32(sb, 8, 1, 56);
	emit("ok-superblock-format1", SEL_SB, sb, sizeof(sb));
	resum32(sb, 8, 2, 56);
	emit("ok-superblock-format2", SEL_SB, sb, sizeof(sb));
	resum32(sb, 8, KVS_STORE_FORMAT_VERSION + 1, 56);
	emit("bad-superblock-newer", SEL_SB, sb, sizeof(sb));
	sb_encode(sb);
	sb[9] ^= 0x04; /* the version field, checksum not fixed */
	emit("bad-superblock-flipped-version", SEL_SB, sb, sizeof(sb));
}

static void segment_headers(void)
{
	uint8_t page[SEG_HEADER_SIZE];

	seg_header_encode(7, page);
	emit("ok-seg-header", SEL_SEG, page, 64);
	page[8] ^= 0x02;
	emit("bad-seg-header-flipped-version", SEL_SEG, page, 64);
	seg_header_encode(7, page);
	resum32(page, 8, SEG_LAYOUT_VERSION + 1, 24);
	emit("bad-seg-header-newer", SEL_SEG, page, 64);
}

static void record_headers(const struct test_blk *b)
{
	struct rec_header h = {
		.seq = 42,
		.length = (uint32_t)b->len,
		.payload_sum = payload_checksum(b->obj, b->len),
		.key = b->key,
	};
	uint8_t hdr[REC_HEADER_SIZE];

	rec_header_encode(&h, hdr);
	emit("ok-rec-header", SEL_REC, hdr, sizeof(hdr));
	hdr[40] ^= 0x80;
	emit("bad-rec-header-flipped", SEL_REC, hdr, sizeof(hdr));
	h.seq = UINT64_MAX;
	rec_header_encode(&h, hdr);
	emit("bad-rec-header-seq-at-top", SEL_REC, hdr, sizeof(hdr));
	h.seq = 42;
	h.length = STORE_MAX_OBJECT + 1;
	rec_header_encode(&h, hdr);
	emit("bad-rec-header-too-long", SEL_REC, hdr, sizeof(hdr));
	/* tombstones: no object; a length, a checksum or another flag
	 * makes one damage */
	h.flags = REC_FLAG_TOMBSTONE;
	h.length = 0;
	h.payload_sum = 0;
	rec_header_encode(&h, hdr);
	emit("ok-rec-header-tombstone", SEL_REC, hdr, sizeof(hdr));
	h.length = (uint32_t)b->len;
	rec_header_encode(&h, hdr);
	emit("bad-rec-header-tombstone-length", SEL_REC, hdr, sizeof(hdr));
	h.length = 0;
	h.payload_sum = 7;
	rec_header_encode(&h, hdr);
	emit("bad-rec-header-tombstone-sum", SEL_REC, hdr, sizeof(hdr));
	h.payload_sum = 0;
	h.flags = REC_FLAG_TOMBSTONE | 0x2;
	rec_header_encode(&h, hdr);
	emit("bad-rec-header-flags", SEL_REC, hdr, sizeof(hdr));
}

static void footers(void)
{
	struct seg_footer f = { .id = 3, .end = 3 * 4096, .records = 2 };
	uint8_t page[KVS_STORE_ALIGN];

	seg_footer_encode(&f, page);
	emit("ok-footer", SEL_FOOT, page, 64);
	f.end = 3 * 4096 + 5;
	seg_footer_encode(&f, page);
	emit("bad-footer-unaligned", SEL_FOOT, page, 64);
}

static void manifests(void)
{
	struct id_run runs[3] = { { 3, 9 }, { 12, 14 }, { 13, 14 } };
	struct manifest m = {
		.flags = MANIFEST_CLEAN,
		.generation = 5,
		.next_id = 14,
		.head_id = 13,
		.head_length = 8192,
		.head_records = 1,
		.nruns = 2,
		.runs = runs,
		.nbare = 1,
		.bare = runs + 2,
	};
	uint8_t buf[256];
	size_t len = manifest_encoded_size(2, 1);

	manifest_encode(&m, buf);
	emit("ok-manifest", SEL_MANI, buf, len);
	buf[70] ^= 0x01;
	emit("bad-manifest-flipped", SEL_MANI, buf, len);
	runs[1].first = 8; /* overlaps the first run */
	manifest_encode(&m, buf);
	emit("bad-manifest-overlap", SEL_MANI, buf, len);
	m.nruns = m.nbare = 0;
	manifest_encode(&m, buf);
	emit("ok-manifest-no-segments", SEL_MANI, buf,
	     manifest_encoded_size(0, 0));
}

/* A segment image: header, the records of @b (each followed by a
 * tombstone of its key where bit i of @tombs is set), then the footer or
 * zeros. */
static size_t segment(const struct test_blk *b, int n, bool sealed,
		      size_t zeros, unsigned tombs, uint8_t *img)
{
	size_t off = SEG_HEADER_SIZE;
	struct seg_footer f = { .id = 0, .records = (uint32_t)n };
	uint64_t seq = 1;

	seg_header_encode(0, img);
	for (int i = 0; i < n; i++) {
		struct rec_header h = {
			.seq = seq++,
			.length = (uint32_t)b[i].len,
			.payload_sum = payload_checksum(b[i].obj, b[i].len),
			.key = b[i].key,
		};
		size_t rec = record_size(b[i].len);

		memset(img + off, 0, rec);
		rec_header_encode(&h, img + off);
		memcpy(img + off + REC_HEADER_SIZE, b[i].obj, b[i].len);
		off += rec;
		if (!(tombs & (1u << i)))
			continue;
		h = (struct rec_header){ .flags = REC_FLAG_TOMBSTONE,
					 .seq = seq++,
					 .key = b[i].key };
		memset(img + off, 0, KVS_STORE_ALIGN);
		rec_header_encode(&h, img + off);
		off += KVS_STORE_ALIGN;
		f.records++;
	}
	if (sealed) {
		f.end = off;
		seg_footer_encode(&f, img + off);
		off += KVS_STORE_ALIGN;
	}
	memset(img + off, 0, zeros);
	return off + zeros;
}

static void walks(const struct test_blk *b)
{
	uint8_t *img = calloc(1, 1 << 20);
	size_t len;

	if (!img) {
		failed = 1;
		return;
	}
	len = segment(b, 3, true, 0, 0, img);
	emit("ok-walk-sealed", SEL_WALK, img, len);
	len = segment(b, 3, false, 4 * KVS_STORE_ALIGN, 0, img);
	emit("ok-walk-head", SEL_WALK, img, len);
	/* deletions logged after the first and the last record */
	len = segment(b, 3, true, 0, 0x5, img);
	emit("ok-walk-tombstones", SEL_WALK, img, len);
	/* a crash cut the last record short: its last page never written */
	len = segment(b, 3, false, 0, 0, img);
	memset(img + len - KVS_STORE_ALIGN, 0, KVS_STORE_ALIGN);
	emit("bad-walk-torn-tail", SEL_WALK, img, len);
	/* a flipped byte in the first record's object */
	len = segment(b, 3, true, 0, 0, img);
	img[SEG_HEADER_SIZE + REC_HEADER_SIZE + 100] ^= 0x20;
	emit("bad-walk-corrupt-middle", SEL_WALK, img, len);
	/* a flipped bit in a tombstone (after the first record) */
	len = segment(b, 3, true, 0, 0x1, img);
	img[SEG_HEADER_SIZE + record_size(b[0].len) + 40] ^= 0x01;
	emit("bad-walk-tombstone-flipped", SEL_WALK, img, len);
	/* a record's header page zeroed, later ones whole */
	len = segment(b, 3, true, 0, 0, img);
	memset(img + SEG_HEADER_SIZE, 0, KVS_STORE_ALIGN);
	emit("bad-walk-never-written", SEL_WALK, img, len);
	free(img);
}

int main(int argc, char **argv)
{
	struct test_blk b[3];

	if (argc != 2) {
		fprintf(stderr, "usage: make_store_corpus DIR\n");
		return 2;
	}
	out_dir = argv[1];
	/* two small blocks, and a last one of several pages (so that a torn
	 * write can cut it short) */
	if (test_blocks_make(b, 2, 31, 2)) {
		fprintf(stderr, "cannot make blocks\n");
		return 1;
	}
	b[2].obj = test_block(33, 16, &b[2].len, &b[2].key);
	if (!b[2].obj || record_size(b[2].len) < 3 * KVS_STORE_ALIGN) {
		fprintf(stderr, "cannot make blocks\n");
		return 1;
	}
	superblocks();
	segment_headers();
	record_headers(&b[0]);
	footers();
	manifests();
	walks(b);
	test_blocks_free(b, 3);
	return failed;
}
