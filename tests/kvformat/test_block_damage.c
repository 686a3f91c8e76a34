/*
 * test_block_damage.c - what the block format's validation refuses:
 * every single-byte corruption and every truncation of a sealed block
 * and a tail, each check's own error in the documented order, LZ4
 * streams whose lengths lie, metadata whose reconstruction overflows,
 * and a name for every error code.
 */
#include <math.h>

#include "block_util.h"
#include "kvstash/error.h"
#include "objedit.h"

/* Dequantizes an accepted block view into buffers of its own shape. */
static void dequantize_accepted(const struct kvs_view *view)
{
	const struct kvs_shape *sh = &view->hdr.shape;
	size_t n = (size_t)sh->kv_heads * sh->span * sh->head_dim;
	float *k, *v;

	if (view->hdr.kind != KVS_KIND_BLOCK)
		return;
	k = malloc(n * sizeof(float));
	v = malloc(n * sizeof(float));
	assert_non_null(k);
	assert_non_null(v);
	assert_int_equal(kvs_block_dequantize(view, k, v), 0);
	free(k);
	free(v);
}

/*
 * Every byte of @obj flipped with several masks: open refuses each one.
 * With checksums off the parser must still never read out of bounds
 * (sanitizer builds catch it) and, when it accepts, dequantize safely.
 */
static void flip_every_byte(const uint8_t *obj, size_t len)
{
	static const uint8_t masks[] = { 0x01, 0x80, 0xFF, 0x10 };
	uint8_t *copy = malloc(len);
	struct kvs_view view;

	assert_non_null(copy);
	assert_int_equal(kvs_object_verify(obj, len, 0), 0);
	for (size_t i = 0; i < len; i++) {
		for (size_t m = 0; m < sizeof(masks); m++) {
			int rc;

			memcpy(copy, obj, len);
			copy[i] ^= masks[m];
			rc = kvs_object_open(copy, len, 0, &view);
			if (rc == 0)
				print_error("byte %zu ^ 0x%02x accepted\n", i,
					    masks[m]);
			assert_true(rc < 0);
			assert_int_equal(kvs_object_verify(copy, len, 0), rc);
			rc = kvs_object_open(copy, len, KVS_VERIFY_NO_CHECKSUMS,
					     &view);
			if (rc == 0) {
				dequantize_accepted(&view);
				kvs_view_release(&view);
			}
		}
	}
	free(copy);
}

static void test_every_byte_corruption(void **state)
{
	struct kvs_shape sh;
	struct kvs_ident id;
	struct sealed s;
	uint8_t *lz, *tail;
	size_t lz_len, tail_len;
	uint16_t resid[128];

	(void)state;
	tiny_shape(&sh);
	seal_block(&s, &sh, KVS_DTYPE_F16, 0, 99);
	flip_every_byte(s.obj, s.len);
	sealed_free(&s);

	/* 4 bits, two groups per token, fp32 metadata. */
	sh.bits = 4;
	sh.group = 16;
	sh.meta_type = KVS_DTYPE_F32;
	seal_block(&s, &sh, KVS_DTYPE_BF16, 0, 98);
	flip_every_byte(s.obj, s.len);
	sealed_free(&s);
	tiny_shape(&sh);

	/* A compressible block: LZ4 sections and their decoder in play. */
	sh.meta_type = KVS_DTYPE_BF16;
	seal_block(&s, &sh, KVS_DTYPE_F32, 0, 3);
	memset(s.raw_keys, 0, 32 * 32 * sizeof(float));
	test_ident_fill(&id);
	assert_int_equal(kvs_block_seal(&sh, &id, KVS_DTYPE_F32, s.raw_keys,
					s.raw_values, KVS_ENCODE_LZ4, &lz,
					&lz_len),
			 0);
	flip_every_byte(lz, lz_len);
	free(lz);
	sealed_free(&s);

	for (int i = 0; i < 128; i++)
		kvs_dtype_store(KVS_DTYPE_F16, resid, i, (float)(i % 5) - 2.0f);
	assert_int_equal(kvs_tail_encode(&sh, &id, KVS_DTYPE_F16, 1, 3, resid,
					 resid, KVS_ENCODE_LZ4, &tail,
					 &tail_len),
			 0);
	flip_every_byte(tail, tail_len);
	free(tail);
}

/* Every proper prefix of @obj is refused as truncated, with and without
 * the checksums. */
static void truncate_every_length(const uint8_t *obj, size_t len)
{
	for (size_t cut_len = 0; cut_len < len; cut_len++) {
		/* A fresh allocation of exactly @cut_len bytes: ASan sees
		 * any read past the end. */
		uint8_t *cut = malloc(cut_len ? cut_len : 1);

		assert_non_null(cut);
		memcpy(cut, obj, cut_len);
		assert_int_equal(kvs_object_verify(cut, cut_len, 0),
				 -KVS_ETRUNC);
		assert_int_equal(kvs_object_verify(cut, cut_len,
						   KVS_VERIFY_NO_CHECKSUMS),
				 -KVS_ETRUNC);
		free(cut);
	}
}

static void test_every_truncation(void **state)
{
	struct kvs_shape sh;
	struct kvs_ident id;
	struct kvs_header h;
	struct sealed s;
	uint16_t resid[4 * 32];
	uint8_t *obj;
	size_t len;

	(void)state;
	tiny_shape(&sh);
	seal_block(&s, &sh, KVS_DTYPE_F16, 0, 4);
	truncate_every_length(s.obj, s.len);

	/* An LZ4 block: zero Keys compress. */
	memset(s.raw_keys, 0, 32 * 32 * 2);
	test_ident_fill(&id);
	assert_int_equal(kvs_block_seal(&sh, &id, KVS_DTYPE_F16, s.raw_keys,
					s.raw_values, KVS_ENCODE_LZ4, &obj,
					&len),
			 0);
	assert_int_equal(kvs_header_decode(obj, len, 0, &h), 0);
	assert_int_equal(h.section[KVS_SEC_KEY_CODES].codec, KVS_CODEC_LZ4);
	truncate_every_length(obj, len);
	free(obj);
	sealed_free(&s);

	/* A tail. */
	for (int i = 0; i < 4 * 32; i++)
		kvs_dtype_store(KVS_DTYPE_F16, resid, i, (float)i);
	assert_int_equal(kvs_tail_encode(&sh, &id, KVS_DTYPE_F16, 3, 4, resid,
					 resid, 0, &obj, &len),
			 0);
	truncate_every_length(obj, len);
	free(obj);
}

/* Each check has its own error, in the documented order. */
static void test_error_order(void **state)
{
	struct kvs_shape sh;
	struct sealed s;
	uint8_t *c;
	uint32_t off;
	struct kvs_header h;

	(void)state;
	tiny_shape(&sh);
	seal_block(&s, &sh, KVS_DTYPE_F16, 0, 8);
	c = malloc(s.len);
	assert_non_null(c);

	/* magic */
	memcpy(c, s.obj, s.len);
	c[FMT_MAGIC] ^= 0x20;
	assert_int_equal(kvs_object_verify(c, s.len, 0), -KVS_EMAGIC);
	assert_int_equal(kvs_header_decode(c, s.len, 0, &h), -KVS_EMAGIC);

	/* version: a newer (and an older) one, with a valid checksum */
	for (unsigned ver = 0; ver < 4; ver++) {
		if (ver == KVS_FORMAT_VERSION)
			continue;
		memcpy(c, s.obj, s.len);
		put_le(c + FMT_VERSION, ver, 2);
		fix_header_sum(c);
		assert_int_equal(kvs_object_verify(c, s.len, 0), -KVS_EVERSION);
	}
	/* version is checked before the header checksum */
	memcpy(c, s.obj, s.len);
	put_le(c + FMT_VERSION, KVS_FORMAT_VERSION + 1, 2);
	assert_int_equal(kvs_object_verify(c, s.len, 0), -KVS_EVERSION);

	/* header checksum: the stored sum, and a header byte it covers */
	memcpy(c, s.obj, s.len);
	c[FMT_HDR_CHECKSUM + 3] ^= 0x04;
	assert_int_equal(kvs_object_verify(c, s.len, 0), -KVS_EHDRSUM);
	memcpy(c, s.obj, s.len);
	c[300] ^= 0x04;
	assert_int_equal(kvs_object_verify(c, s.len, 0), -KVS_EHDRSUM);

	/* bounds: a section offset past the end, checksum fixed up */
	memcpy(c, s.obj, s.len);
	put_le(sec_entry(c, KVS_SEC_VAL_STEP) + FMT_SEC_OFFSET,
	       (uint32_t)s.len + 256, 4);
	fix_header_sum(c);
	assert_int_equal(kvs_object_verify(c, s.len, 0), -KVS_EBOUNDS);
	/* bounds: two sections overlapping */
	memcpy(c, s.obj, s.len);
	off = sec_offset(c, 0);
	put_le(sec_entry(c, 1) + FMT_SEC_OFFSET, off, 4);
	fix_header_sum(c);
	assert_int_equal(kvs_object_verify(c, s.len, 0), -KVS_EBOUNDS);
	/* bounds: a stored length larger than the object */
	memcpy(c, s.obj, s.len);
	put_le(sec_entry(c, 0) + FMT_SEC_STORED, 0xFFFFFF00u, 4);
	fix_header_sum(c);
	assert_int_equal(kvs_object_verify(c, s.len, 0), -KVS_EBOUNDS);
	/* bounds: bytes after the declared end */
	memcpy(c, s.obj, s.len);
	put_le(c + FMT_TOTAL_SIZE, s.len - 1, 8);
	fix_header_sum(c);
	assert_int_not_equal(kvs_object_verify(c, s.len, 0), 0);

	/* header fields a valid writer never produces, checksum fixed up:
	 * an unknown flag, a reserved byte, an unknown kind, a tail field in
	 * a block, a shape that breaks the rules (R not a multiple of G) */
	for (int edit = 0; edit < 5; edit++) {
		static const int at[] = { FMT_FLAGS, FMT_RESERVED + 9, FMT_KIND,
					  FMT_R_K, FMT_RESIDUAL };
		static const uint8_t val[] = { 0x80, 0x01, 0x07, 0x01, 0x21 };

		memcpy(c, s.obj, s.len);
		c[at[edit]] = val[edit];
		fix_header_sum(c);
		assert_int_equal(kvs_object_verify(c, s.len, 0), -KVS_ECORRUPT);
	}
	/* a non-zero padding byte between sections (only the padding check
	 * sees it: no checksum covers padding) */
	memcpy(c, s.obj, s.len);
	off = sec_offset(c, KVS_SEC_KEY_ORIGIN);
	c[off + 64] = 0x01; /* 64-byte section, padded to 256 */
	assert_int_equal(kvs_object_verify(c, s.len, 0), -KVS_ECORRUPT);

	/* section checksum: a payload byte */
	memcpy(c, s.obj, s.len);
	off = sec_offset(c, KVS_SEC_VAL_CODES);
	c[off + 5] ^= 0x40;
	assert_int_equal(kvs_object_verify(c, s.len, 0), -KVS_ESECTSUM);

	/* metadata: NaN origin, zero step, negative step, infinite step;
	 * section and header checksums fixed up so only this check fails */
	for (int kind = 0; kind < 4; kind++) {
		static const uint16_t bits[] = { 0x7E00, 0x0000, 0xBC00,
						 0x7C00 };
		int sec = kind == 0 ? KVS_SEC_KEY_ORIGIN : KVS_SEC_VAL_STEP;

		memcpy(c, s.obj, s.len);
		off = sec_offset(c, sec);
		put_le(c + off + 2 * 3, bits[kind], 2);
		fix_section_sum(c, sec);
		fix_header_sum(c);
		assert_int_equal(kvs_object_verify(c, s.len, 0), -KVS_EMETA);
		/* without fixing up the section sum, that check fires first */
		memcpy(c, s.obj, s.len);
		put_le(c + off + 2 * 3, bits[kind], 2);
		assert_int_equal(kvs_object_verify(c, s.len, 0), -KVS_ESECTSUM);
	}
	free(c);
	sealed_free(&s);
}

/*
 * Seals an all-zero block of @sh with LZ4 (every section compresses) and
 * returns it with its decoded header and the index of the last LZ4 section
 * whose logical length is at least @min_logical.
 */
static uint8_t *seal_zero_lz4(const struct kvs_shape *sh, uint32_t min_logical,
			      size_t *len, struct kvs_header *h, int *sec)
{
	size_t n = (size_t)sh->kv_heads * sh->span * sh->head_dim;
	float *flat = calloc(n, sizeof(float));
	struct kvs_ident id;
	uint8_t *lz;

	assert_non_null(flat);
	test_ident_fill(&id);
	assert_int_equal(kvs_block_seal(sh, &id, KVS_DTYPE_F32, flat, flat,
					KVS_ENCODE_LZ4, &lz, len),
			 0);
	free(flat);
	assert_int_equal(kvs_header_decode(lz, *len, 0, h), 0);
	*sec = -1;
	for (uint32_t i = 0; i < h->section_count; i++)
		if (h->section[i].codec == KVS_CODEC_LZ4 &&
		    h->section[i].logical_len >= min_logical)
			*sec = (int)i;
	assert_true(*sec >= 0);
	return lz;
}

/* An LZ4 section that does not expand to its logical length. */
static void test_lz4_length_error(void **state)
{
	struct kvs_shape sh;
	struct kvs_header h;
	uint8_t *lz;
	size_t lz_len;
	int sec;

	(void)state;
	tiny_shape(&sh);
	lz = seal_zero_lz4(&sh, 0, &lz_len, &h, &sec);
	/* Garbage in place of the LZ4 stream, all checksums valid. */
	memset(lz + h.section[sec].offset, 0xF0, h.section[sec].stored_len);
	fix_section_sum(lz, sec);
	fix_header_sum(lz);
	assert_int_equal(kvs_object_verify(lz, lz_len, 0), -KVS_ELZ4);
	free(lz);
}

/* Finite bf16 metadata whose top code reconstructs past FLT_MAX is refused
 * like non-finite metadata; the sealer never writes it. */
static void test_meta_reconstruction_overflow(void **state)
{
	struct kvs_shape sh;
	struct sealed s;
	uint32_t off;

	(void)state;
	tiny_shape(&sh);
	sh.meta_type = KVS_DTYPE_BF16;
	seal_block(&s, &sh, KVS_DTYPE_F32, 0, 11);
	off = sec_offset(s.obj, KVS_SEC_KEY_STEP);
	put_le(s.obj + off, 0x7F7F, 2); /* finite step near FLT_MAX */
	fix_section_sum(s.obj, KVS_SEC_KEY_STEP);
	fix_header_sum(s.obj);
	assert_int_equal(kvs_object_verify(s.obj, s.len, 0), -KVS_EMETA);
	sealed_free(&s);
}

/* An LZ4 section claiming more than LZ4's 255:1 expansion is refused at
 * the bounds check, before anything is allocated for it. */
static void test_lz4_ratio_bound(void **state)
{
	struct kvs_shape sh;
	struct kvs_header h;
	uint8_t *lz;
	size_t lz_len;
	int sec;

	(void)state;
	tiny_shape(&sh);
	sh.kv_heads = 4; /* sections of a few KiB */
	sh.head_dim = 64;
	lz = seal_zero_lz4(&sh, 255 + 256, &lz_len, &h, &sec);
	/* One stored byte cannot expand to the section's logical length. */
	put_le(sec_entry(lz, sec) + FMT_SEC_STORED, 1, 4);
	fix_header_sum(lz);
	assert_int_equal(kvs_header_decode(lz, lz_len, 0, &h), -KVS_EBOUNDS);
	free(lz);
}

/* Non-finite residual values are refused like non-finite metadata; a
 * failed open leaves the caller's view alone; the fuzzing flag skips
 * exactly the checksums. */
static void test_tail_meta_and_flags(void **state)
{
	struct kvs_shape sh;
	struct kvs_ident id;
	struct kvs_view v;
	uint16_t rows[3 * 32];
	uint8_t *obj;
	size_t len;
	uint32_t off;

	(void)state;
	tiny_shape(&sh);
	test_ident_fill(&id);
	for (int i = 0; i < 3 * 32; i++)
		kvs_dtype_store(KVS_DTYPE_BF16, rows, i, (float)i / 8.0f);
	assert_int_equal(kvs_tail_encode(&sh, &id, KVS_DTYPE_BF16, 2, 3, rows,
					 rows, 0, &obj, &len),
			 0);
	off = sec_offset(obj, KVS_SEC_VAL_RESID);
	put_le(obj + off + 2 * 40, 0x7FC0, 2); /* bf16 NaN */
	fix_section_sum(obj, KVS_SEC_VAL_RESID);
	fix_header_sum(obj);
	memset(&v, 0x5A, sizeof(v));
	assert_int_equal(kvs_object_open(obj, len, 0, &v), -KVS_EMETA);
	assert_int_equal(v.hdr.version, 0x5A5A);
	assert_true(v.owned == (uint8_t *)(uintptr_t)0x5A5A5A5A5A5A5A5AULL);
	put_le(obj + off + 2 * 40, 0x3F80, 2); /* 1.0 */
	assert_int_equal(kvs_object_verify(obj, len, 0), -KVS_ESECTSUM);
	assert_int_equal(kvs_object_verify(obj, len, KVS_VERIFY_NO_CHECKSUMS),
			 0);
	obj[FMT_HDR_CHECKSUM] ^= 1;
	assert_int_equal(kvs_object_verify(obj, len, 0), -KVS_EHDRSUM);
	assert_int_equal(kvs_object_verify(obj, len, KVS_VERIFY_NO_CHECKSUMS),
			 0);
	free(obj);
}

static void test_strerror_names_every_code(void **state)
{
	(void)state;
	for (int e = KVS_ERROR_BASE; e < KVS_ERROR_END; e++) {
		const char *name = kvs_strerror(-e);

		assert_non_null(name);
		assert_true(strlen(name) > 0);
		assert_null(strstr(name, "nknown"));
		assert_string_equal(kvs_strerror(e), name);
		for (int f = KVS_ERROR_BASE; f < e; f++)
			assert_string_not_equal(kvs_strerror(-f), name);
	}
	/* Validation errors each name their check. */
	for (int e = KVS_ETRUNC; e <= KVS_EMETA; e++)
		assert_string_not_equal(kvs_check_name(-e), "other");
	assert_non_null(kvs_strerror(-12)); /* ENOMEM, from errno */
	assert_non_null(kvs_strerror(-KVS_ERROR_END));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_every_byte_corruption),
		cmocka_unit_test(test_every_truncation),
		cmocka_unit_test(test_error_order),
		cmocka_unit_test(test_lz4_length_error),
		cmocka_unit_test(test_lz4_ratio_bound),
		cmocka_unit_test(test_meta_reconstruction_overflow),
		cmocka_unit_test(test_tail_meta_and_flags),
		cmocka_unit_test(test_strerror_names_every_code),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
