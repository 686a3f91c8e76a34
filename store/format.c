/*
 * format.c - the store's on-disk encodings, little-endian, each with its
 * own checksum (xxh3-64).  Pure functions of bytes (no I/O): the fuzz
 * target fuzz/fuzz_store.c runs every decoder here.
 *
 * Decoders check magic, then the checksum, then the version, then bounds:
 * a version is believed only once the checksum vouches for it, so a
 * flipped bit reads as damage (that structure's alone), never as "written
 * by a newer kvstash" (which refuses the whole store).
 *
 * superblock (file KVSTASH: two copies, at 0 and at 4096; 64 bytes each)
 *   0 magic "KVSSTORE"  8 u32 store format version  12 u32 flags
 *   16..55 zero  56 u64 xxh3 of bytes 0..55
 * segment header (first 4096 bytes of seg-<id>.kvs)
 *   0 magic "KVSSEG01"  8 u32 layout version  12 u32 flags  16 u64 id
 *   24 u64 xxh3 of bytes 0..23, rest zero
 * record header (128 bytes, at a 4096-aligned offset, object follows)
 *   0 u32 magic "KVSR"  4 u16 layout version  6 u16 flags  8 u64 sequence
 *   16 u32 object length  20 u32 layer  24 u64 xxh3 of the object
 *   32 span id [32]  64..119 zero  120 u64 xxh3 of bytes 0..119
 *   flags: 0 (an object follows) or 1 (a tombstone, store format 3: the
 *   key was deleted; length 0, object checksum 0, the record is this
 *   header and zero padding to 4096)
 * segment footer (one 4096-byte page at the log end of a sealed segment)
 *   0 magic "KVSFOOT1"  8 u32 layout version  12 u32 flags  16 u64 id
 *   24 u64 log end (this page's offset)  32 u32 records  36 u32 zero
 *   40..55 zero  56 u64 xxh3 of bytes 0..55, rest zero
 * manifest (file MANIFEST)
 *   0 magic "KVSMANIF"  8 u32 version  12 u32 flags (1: head closed clean)
 *   16 u64 generation  24 u64 next segment id  32 u64 head id (or ~0)
 *   40 u64 head log end  48 u32 head records  52 u32 runs  56 u32 bare
 *   runs  60 u32 zero  64 runs x { u64 first, u64 end } (the segments),
 *   bare runs x { u64 first, u64 end } (those without a footer, rightly),
 *   then u64 xxh3 of everything before it
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

#include "common/bytes.h"
#include "disk.h"

#define SB_MAGIC 0x45524f5453535653ull /* "KVSSTORE" */
#define SEG_MAGIC 0x313047455353564bull /* "KVSSEG01" */
#define FOOT_MAGIC 0x31544f4f4653564bull /* "KVSFOOT1" */
#define MANI_MAGIC 0x46494e414d53564bull /* "KVSMANIF" */
#define REC_MAGIC 0x5253564bu /* "KVSR" */

_Static_assert(REC_HEADER_SIZE == 128, "record header is 128 bytes");
_Static_assert(SEG_HEADER_SIZE % KVS_STORE_ALIGN == 0, "aligned segment");
_Static_assert(SB_SIZE == 64 && SB_COPY_OFF >= SB_SIZE, "superblock copies");
_Static_assert(MANIFEST_HEADER == 64 && MANIFEST_RUN == 16, "manifest");

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

/* ---- record header --------------------------------------------------- */

int kvs_store_key_of(const uint8_t *obj, size_t len, struct kvs_store_key *out)
{
	struct kvs_header h;
	int err = kvs_header_decode(obj, len, 0, &h);

	if (err)
		return err;
	memcpy(out->span_id, h.ident.block_id, KVS_ID_SIZE);
	out->layer = h.ident.layer;
	return 0;
}

void rec_header_encode(const struct rec_header *h, uint8_t *buf)
{
	memset(buf, 0, REC_HEADER_SIZE);
	kvs_put32(buf, REC_MAGIC);
	kvs_put16(buf + 4, SEG_LAYOUT_VERSION);
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
	if (kvs_get64(buf + 120) != XXH3_64bits(buf, 120))
		return -KVS_EHDRSUM;
	h.version = kvs_get16(buf + 4);
	if (h.version != SEG_LAYOUT_VERSION)
		return -KVS_EVERSION;
	h.flags = kvs_get16(buf + 6);
	h.seq = kvs_get64(buf + 8);
	h.length = kvs_get32(buf + 16);
	h.key.layer = kvs_get32(buf + 20);
	h.payload_sum = kvs_get64(buf + 24);
	memcpy(h.key.span_id, buf + 32, KVS_ID_SIZE);
	if (h.flags & ~REC_FLAG_TOMBSTONE)
		return -KVS_EBOUNDS;
	if (h.flags & REC_FLAG_TOMBSTONE
		    ? h.length != 0 || h.payload_sum != 0
		    : h.length < KVS_HEADER_SIZE || h.length > STORE_MAX_OBJECT)
		return -KVS_EBOUNDS;
	/* sequence numbers start at 1 and cannot reach 2^63 honestly (a
	 * billion puts a second for 292 years): beyond is damage or a
	 * forgery, which would otherwise wrap the store's next number */
	if (h.seq == 0 || h.seq > REC_SEQ_MAX)
		return -KVS_EBOUNDS;
	*out = h;
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
		return "record bounds";
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
	if (h.flags & REC_FLAG_TOMBSTONE)
		goto good; /* the header is the whole record */
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
good:
	if (out)
		*out = h;
	return 0;
bad:
	if (check_out)
		*check_out = check;
	return err;
}

/* ---- segment header and footer --------------------------------------- */

void seg_header_encode(uint64_t id, uint8_t *buf)
{
	memset(buf, 0, SEG_HEADER_SIZE);
	kvs_put64(buf, SEG_MAGIC);
	kvs_put32(buf + 8, SEG_LAYOUT_VERSION);
	kvs_put64(buf + 16, id);
	kvs_put64(buf + 24, XXH3_64bits(buf, 24));
}

int seg_header_decode(const uint8_t *buf, uint64_t *id)
{
	if (kvs_get64(buf) != SEG_MAGIC)
		return -KVS_EMAGIC;
	if (kvs_get64(buf + 24) != XXH3_64bits(buf, 24))
		return -KVS_EHDRSUM;
	if (kvs_get32(buf + 8) != SEG_LAYOUT_VERSION)
		return -KVS_EVERSION;
	*id = kvs_get64(buf + 16);
	return 0;
}

void seg_footer_encode(const struct seg_footer *f, uint8_t *page)
{
	memset(page, 0, KVS_STORE_ALIGN);
	kvs_put64(page, FOOT_MAGIC);
	kvs_put32(page + 8, SEG_LAYOUT_VERSION);
	kvs_put64(page + 16, f->id);
	kvs_put64(page + 24, f->end);
	kvs_put32(page + 32, f->records);
	kvs_put64(page + 56, XXH3_64bits(page, 56));
}

int seg_footer_decode(const uint8_t *page, struct seg_footer *out)
{
	struct seg_footer f;

	if (kvs_get64(page) != FOOT_MAGIC)
		return -KVS_EMAGIC;
	if (kvs_get64(page + 56) != XXH3_64bits(page, 56))
		return -KVS_EHDRSUM;
	if (kvs_get32(page + 8) != SEG_LAYOUT_VERSION)
		return -KVS_EVERSION;
	f.id = kvs_get64(page + 16);
	f.end = kvs_get64(page + 24);
	f.records = kvs_get32(page + 32);
	if (f.end < SEG_HEADER_SIZE || f.end % KVS_STORE_ALIGN ||
	    f.end > KVS_STORE_SEGMENT_MAX)
		return -KVS_EBOUNDS;
	*out = f;
	return 0;
}

/* ---- superblock ------------------------------------------------------ */

void sb_encode(uint8_t *buf)
{
	memset(buf, 0, SB_SIZE);
	kvs_put64(buf, SB_MAGIC);
	kvs_put32(buf + 8, KVS_STORE_FORMAT_VERSION);
	kvs_put64(buf + 56, XXH3_64bits(buf, 56));
}

int sb_decode(const uint8_t *buf, uint32_t *version)
{
	uint32_t v;

	if (kvs_get64(buf) != SB_MAGIC)
		return -KVS_EMAGIC;
	if (kvs_get64(buf + 56) != XXH3_64bits(buf, 56))
		return -KVS_EHDRSUM;
	v = kvs_get32(buf + 8);
	if (v == 0 || v > KVS_STORE_FORMAT_VERSION)
		return -KVS_EVERSION;
	*version = v;
	return 0;
}

/* ---- manifest -------------------------------------------------------- */

size_t manifest_encoded_size(uint32_t nruns, uint32_t nbare)
{
	return MANIFEST_HEADER + ((size_t)nruns + nbare) * MANIFEST_RUN + 8;
}

static void put_runs(uint8_t *p, const struct id_run *runs, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		kvs_put64(p + i * MANIFEST_RUN, runs[i].first);
		kvs_put64(p + i * MANIFEST_RUN + 8, runs[i].end);
	}
}

void manifest_encode(const struct manifest *m, uint8_t *buf)
{
	size_t len = manifest_encoded_size(m->nruns, m->nbare);

	memset(buf, 0, len);
	kvs_put64(buf, MANI_MAGIC);
	kvs_put32(buf + 8, MANIFEST_VERSION);
	kvs_put32(buf + 12, m->flags);
	kvs_put64(buf + 16, m->generation);
	kvs_put64(buf + 24, m->next_id);
	kvs_put64(buf + 32, m->head_id);
	kvs_put64(buf + 40, m->head_length);
	kvs_put32(buf + 48, m->head_records);
	kvs_put32(buf + 52, m->nruns);
	kvs_put32(buf + 56, m->nbare);
	put_runs(buf + MANIFEST_HEADER, m->runs, m->nruns);
	put_runs(buf + MANIFEST_HEADER + m->nruns * MANIFEST_RUN, m->bare,
		 m->nbare);
	kvs_put64(buf + len - 8, XXH3_64bits(buf, len - 8));
}

/* Runs sorted, disjoint, non-empty, below @next_id. */
static int get_runs(const uint8_t *p, uint32_t n, uint64_t next_id,
		    struct id_run *out)
{
	for (uint32_t i = 0; i < n; i++) {
		out[i].first = kvs_get64(p + i * MANIFEST_RUN);
		out[i].end = kvs_get64(p + i * MANIFEST_RUN + 8);
		if (out[i].first >= out[i].end || out[i].end > next_id ||
		    (i > 0 && out[i].first <= out[i - 1].end))
			return -KVS_EBOUNDS;
	}
	return 0;
}

int manifest_decode(const uint8_t *buf, size_t len, struct manifest *out)
{
	struct manifest m;
	int err;

	if (len < manifest_encoded_size(0, 0) || kvs_get64(buf) != MANI_MAGIC)
		return -KVS_EMAGIC;
	if (kvs_get64(buf + len - 8) != XXH3_64bits(buf, len - 8))
		return -KVS_EHDRSUM;
	if (kvs_get32(buf + 8) != MANIFEST_VERSION)
		return -KVS_EVERSION;
	memset(&m, 0, sizeof(m));
	m.flags = kvs_get32(buf + 12);
	m.generation = kvs_get64(buf + 16);
	m.next_id = kvs_get64(buf + 24);
	m.head_id = kvs_get64(buf + 32);
	m.head_length = kvs_get64(buf + 40);
	m.head_records = kvs_get32(buf + 48);
	m.nruns = kvs_get32(buf + 52);
	m.nbare = kvs_get32(buf + 56);
	if (m.nruns > MANIFEST_MAX_RUNS || m.nbare > MANIFEST_MAX_RUNS ||
	    len != manifest_encoded_size(m.nruns, m.nbare) ||
	    (m.head_id != MANIFEST_NO_HEAD && m.head_id >= m.next_id))
		return -KVS_EBOUNDS;
	m.runs = malloc(((size_t)m.nruns + m.nbare + 1) * sizeof(*m.runs));
	if (!m.runs)
		return -ENOMEM;
	m.bare = m.runs + m.nruns;
	err = get_runs(buf + MANIFEST_HEADER, m.nruns, m.next_id, m.runs);
	if (!err)
		err = get_runs(buf + MANIFEST_HEADER + m.nruns * MANIFEST_RUN,
			       m.nbare, m.next_id, m.bare);
	if (err) {
		free(m.runs);
		return err;
	}
	*out = m;
	return 0;
}

static bool runs_have(const struct id_run *runs, uint32_t n, uint64_t id)
{
	for (uint32_t i = 0; i < n; i++)
		if (id >= runs[i].first && id < runs[i].end)
			return true;
	return false;
}

bool manifest_has(const struct manifest *m, uint64_t id)
{
	return runs_have(m->runs, m->nruns, id);
}

bool manifest_wants_footer(const struct manifest *m, uint64_t id)
{
	return manifest_has(m, id) && !runs_have(m->bare, m->nbare, id);
}

void id_runs_add(struct id_run *runs, uint32_t *n, uint64_t id)
{
	if (*n && runs[*n - 1].end == id) {
		runs[*n - 1].end = id + 1;
		return;
	}
	runs[*n].first = id;
	runs[*n].end = id + 1;
	(*n)++;
}

bool store_magic(const uint8_t *p)
{
	uint64_t m = kvs_get64(p);

	return m == SB_MAGIC || m == SEG_MAGIC || m == MANI_MAGIC;
}

/* ---- names ----------------------------------------------------------- */

void seg_name(uint64_t id, char out[32])
{
	snprintf(out, 32, "seg-%016llx.kvs", (unsigned long long)id);
}

/* Exactly the names seg_name() writes: "seg-", 16 lower-case hex digits,
 * ".kvs" (and @suffix after it), so that no two names map to one id. */
static int parse_name(const char *name, const char *suffix, uint64_t *id)
{
	size_t slen = strlen(suffix);
	uint64_t v = 0;

	if (strlen(name) != 24 + slen || strncmp(name, "seg-", 4) != 0 ||
	    strncmp(name + 20, ".kvs", 4) != 0 ||
	    strcmp(name + 24, suffix) != 0)
		return -EINVAL;
	for (int i = 4; i < 20; i++) {
		char c = name[i];

		if (c >= '0' && c <= '9')
			v = v << 4 | (uint64_t)(c - '0');
		else if (c >= 'a' && c <= 'f')
			v = v << 4 | (uint64_t)(c - 'a' + 10);
		else
			return -EINVAL;
	}
	*id = v;
	return 0;
}

int seg_name_parse(const char *name, uint64_t *id)
{
	return parse_name(name, "", id);
}

int seg_tmp_name_parse(const char *name, uint64_t *id)
{
	return parse_name(name, ".tmp", id);
}
