/*
 * make_corpus.c - writes the decoder fuzzer's seed corpus: a few small
 * valid blocks and tails (raw and LZ4, every metadata type, 2 and 4 bits)
 * and a few objects that each fail one check.  Every file is one flags
 * byte (see fuzz_decode.h) followed by the object; names start with ok-
 * or bad- for fuzz_replay's expectations.
 *
 * It also writes the encoder fuzzer's seeds (fuzz_encode.c's input: two
 * selector bytes, then raw K/V elements) into a second directory.
 *
 * Usage: make_corpus DIR ENCODE_DIR
 *   (regenerate fuzz/corpus and fuzz/corpus_encode after a format change)
 */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvstash/kvformat.h"
#include "objedit.h"

#define MAX_ELEMS (2 * 64 * 64)

struct corpus {
	const char *dir;
	int failed;
};

static void emit_raw(struct corpus *c, const char *name, const uint8_t *bytes,
		     size_t len)
{
	char path[4096];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", c->dir, name);
	f = fopen(path, "wb");
	if (f == NULL || fwrite(bytes, 1, len, f) != len) {
		fprintf(stderr, "%s: %s\n", path, strerror(errno));
		c->failed = 1;
	}
	if (f != NULL && fclose(f) != 0)
		c->failed = 1;
}

/* A decoder input: the flags byte, then the object. */
static void emit(struct corpus *c, const char *name, unsigned flags,
		 const uint8_t *obj, size_t len)
{
	uint8_t *input = malloc(len + 1);

	if (input == NULL) {
		c->failed = 1;
		return;
	}
	input[0] = (uint8_t)flags;
	memcpy(input + 1, obj, len);
	emit_raw(c, name, input, len + 1);
	free(input);
}

/* Deterministic K/V: a sine with an outlier channel and constant runs. */
static void fill(float *x, size_t n, size_t head_dim, float phase)
{
	for (size_t i = 0; i < n; i++) {
		size_t d = i % head_dim;

		x[i] = sinf((float)i * 0.37f + phase);
		if (d == 5)
			x[i] += 30.0f;
		if (d >= head_dim / 2 && (i / head_dim) % 4 == 0)
			x[i] = 1.5f;
	}
}

static void ident(struct kvs_ident *id)
{
	static const uint32_t tokens[4] = { 1, 2, 3, 4 };
	uint8_t fp[KVS_ID_SIZE] = { 0 };

	memset(id, 0, sizeof(*id));
	kvs_span_id("corpus", fp, NULL, tokens, 4, id->block_id);
	id->layer = 3;
	id->first_pos = 128;
}

static int seal(const struct kvs_shape *sh, unsigned flags, uint8_t **obj,
		size_t *len)
{
	static float keys[MAX_ELEMS], values[MAX_ELEMS];
	size_t n = (size_t)sh->kv_heads * sh->span * sh->head_dim;
	struct kvs_ident id;

	fill(keys, n, sh->head_dim, 0.0f);
	fill(values, n, sh->head_dim, 1.0f);
	ident(&id);
	return kvs_block_seal(sh, &id, KVS_DTYPE_F32, keys, values, flags, obj,
			      len);
}

static void blocks(struct corpus *c)
{
	static const struct {
		const char *name;
		uint16_t heads, dim, group;
		uint8_t bits, meta;
		uint32_t span;
		unsigned flags;
	} cases[] = {
		{ "ok-block-b2-f16", 1, 32, 32, 2, KVS_DTYPE_F16, 32, 0 },
		{ "ok-block-b4-bf16-lz4", 1, 32, 16, 4, KVS_DTYPE_BF16, 32,
		  KVS_ENCODE_LZ4 },
		{ "ok-block-b2-f32-h2", 2, 64, 32, 2, KVS_DTYPE_F32, 32, 0 },
		{ "ok-block-b2-f16-lz4", 1, 64, 32, 2, KVS_DTYPE_F16, 64,
		  KVS_ENCODE_LZ4 },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct kvs_shape sh;
		uint8_t *obj;
		size_t len;

		kvs_shape_default(&sh, cases[i].heads, cases[i].dim);
		sh.group = cases[i].group;
		sh.bits = cases[i].bits;
		sh.meta_type = cases[i].meta;
		sh.span = sh.residual = cases[i].span;
		if (seal(&sh, cases[i].flags, &obj, &len) != 0) {
			c->failed = 1;
			continue;
		}
		emit(c, cases[i].name, 0, obj, len);
		free(obj);
	}
}

static void tails(struct corpus *c)
{
	static float rows[MAX_ELEMS];
	static uint8_t typed[MAX_ELEMS * 4];
	static const struct {
		const char *name;
		enum kvs_dtype dtype;
		uint32_t r_k, r_v;
		unsigned flags;
	} cases[] = {
		{ "ok-tail-f16", KVS_DTYPE_F16, 3, 5, 0 },
		{ "ok-tail-bf16-lz4", KVS_DTYPE_BF16, 0, 32, KVS_ENCODE_LZ4 },
		{ "ok-tail-f32", KVS_DTYPE_F32, 1, 1, 0 },
		{ "ok-tail-empty", KVS_DTYPE_F16, 0, 0, 0 },
	};
	struct kvs_shape sh;
	struct kvs_ident id;

	kvs_shape_default(&sh, 1, 32);
	sh.span = sh.residual = 32;
	ident(&id);
	fill(rows, 32 * 32, 32, 2.0f);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		uint8_t *obj;
		size_t len;

		for (size_t j = 0; j < 32 * 32; j++)
			kvs_dtype_store(cases[i].dtype, typed, j, rows[j]);
		if (kvs_tail_encode(&sh, &id, cases[i].dtype, cases[i].r_k,
				    cases[i].r_v, typed, typed, cases[i].flags,
				    &obj, &len) != 0) {
			c->failed = 1;
			continue;
		}
		emit(c, cases[i].name, 0, obj, len);
		free(obj);
	}
}

/* Objects that each fail one check, from the small f16 block. */
static void corrupt(struct corpus *c)
{
	struct kvs_shape sh;
	uint8_t *obj;
	size_t len;
	uint32_t off;

	kvs_shape_default(&sh, 1, 32);
	sh.span = sh.residual = 32;
	if (seal(&sh, 0, &obj, &len) != 0) {
		c->failed = 1;
		return;
	}
	/* A payload edit that only the checksums catch: accepted when they
	 * are off (flags bit 0), refused when they are on. */
	off = sec_offset(obj, KVS_SEC_VAL_CODES);
	obj[off + 7] ^= 0x55;
	emit(c, "ok-nosum-edited-codes", 1, obj, len);
	emit(c, "bad-section-checksum", 0, obj, len);
	obj[off + 7] ^= 0x55;

	emit(c, "bad-truncated", 0, obj, len - 100);

	put_le(obj + FMT_VERSION, KVS_FORMAT_VERSION + 1, 2);
	fix_header_sum(obj);
	emit(c, "bad-version", 0, obj, len);
	put_le(obj + FMT_VERSION, KVS_FORMAT_VERSION, 2);

	off = sec_offset(obj, KVS_SEC_KEY_STEP);
	put_le(obj + off, get_le(obj + off, 2) | 0x8000u, 2); /* step < 0 */
	fix_section_sum(obj, KVS_SEC_KEY_STEP);
	fix_header_sum(obj);
	emit(c, "bad-negative-step", 0, obj, len);
	emit(c, "bad-negative-step-nosum", 1, obj, len);

	obj[FMT_MAGIC] = 'X';
	emit(c, "bad-magic", 1, obj, len);
	free(obj);
}

/*
 * Encoder seeds.  Selector byte 0: bit 0 4-bit codes, (b >> 1) % 3 the
 * metadata type and (b >> 3) % 3 the input type (0 f32, 1 f16, 2 bf16),
 * bit 7 LZ4; byte 1: G = 2 << (b % 5), bit 3 two heads, bit 4 S = 2G.
 * Elements past the seed's bytes are zero.
 */
static void encode_seeds(struct corpus *c)
{
	static const struct {
		const char *name;
		uint8_t sel[2];
		float special; /* stored at element 3 when not 0 */
	} cases[] = {
		{ "ok-f32-in-f16-meta-g32", { 0x02, 0x04 }, 0 },
		{ "ok-4bit-bf16-in-f16-meta-s64-lz4", { 0x8D, 0x13 }, 0 },
		{ "ok-2heads-g8-bf16", { 0x10, 0x0C }, 0 },
		{ "bad-nan", { 0x02, 0x04 }, NAN },
		{ "bad-fp16-step-overflow", { 0x02, 0x04 }, 1e6f },
		/* bf16 metadata, a group reaching FLT_MAX: the step rounds up
		 * and code 3 would reconstruct to infinity (found by the
		 * encoder fuzzer) */
		{ "bad-bf16-flt-max", { 0x04, 0x04 }, FLT_MAX },
	};
	static const enum kvs_dtype types[3] = { KVS_DTYPE_F32, KVS_DTYPE_F16,
						 KVS_DTYPE_BF16 };
	uint8_t seed[2 + 128 * 4];

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		enum kvs_dtype in = types[(cases[i].sel[0] >> 3) % 3];
		size_t f = kvs_dtype_size(in);
		float x[128];

		fill(x, 128, 32, (float)i);
		if (cases[i].special != 0.0f)
			x[3] = cases[i].special;
		memcpy(seed, cases[i].sel, 2);
		for (size_t j = 0; j < 128; j++)
			kvs_dtype_store(in, seed + 2, j, x[j]);
		emit_raw(c, cases[i].name, seed, 2 + 128 * f);
	}
}

int main(int argc, char **argv)
{
	struct corpus c = { 0 };

	if (argc != 3) {
		fprintf(stderr, "usage: make_corpus DIR ENCODE_DIR\n");
		return 2;
	}
	c.dir = argv[1];
	blocks(&c);
	tails(&c);
	corrupt(&c);
	c.dir = argv[2];
	encode_seeds(&c);
	return c.failed;
}
