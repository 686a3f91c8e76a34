/*
 * test_memory - the seed's memory formula (410 KiB for T=4096, D=128,
 * G=32, R=128, b=2, e=f=2) and the format's actual bytes beside it, with
 * the difference accounted for byte by byte.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "kvstash/kvformat.h"

/* Bytes of an uncompressed block of one KV head: D=128, G=32, S=128,
 * b=2, fp16 metadata: 512-byte header, six sections that are already
 * multiples of 256 bytes. */
#define CODES (128 * 128 * 2 / 8) /* [token][D*b/8] = 4096 */
#define KEY_META (128 / 32 * 128 * 2) /* [token/G][D] fp16 = 1024 */
#define VAL_META (128 * 128 / 32 * 2) /* [token][D/G] fp16 = 1024 */
#define BLOCK_BYTES (512 + 2 * CODES + 2 * KEY_META + 2 * VAL_META)

static void test_seed_example(void **state)
{
	struct kvs_memory m;
	uint64_t tail, excess;

	(void)state;
	assert_int_equal(
		kvs_memory_account(4096, 128, 32, 128, 2, 2, 2, 1, 1, 1, &m),
		0);
	/* 128 * (2*4096 - 0 - 128) * (2/8 + 4/32) = 387072 = 378 KiB */
	assert_true(m.quantized_bytes == 387072.0);
	assert_true(m.quantized_bytes == 378.0 * 1024);
	assert_true(m.residual_bytes == 32.0 * 1024);
	assert_true(m.total_bytes == 410.0 * 1024);
	/* Against 2 MiB in fp16: about 5x. */
	assert_true(2.0 * 4096 * 128 * 2 / m.total_bytes > 4.99);

	/* The format: 32 blocks of 128 tokens and one tail of r_K = 0 Key
	 * and r_V = 128 fp16 Value rows. */
	assert_int_equal(BLOCK_BYTES, 12800);
	tail = 512 + 128 * 128 * 2;
	assert_int_equal(m.format_bytes, 32 * BLOCK_BYTES + tail);
	assert_true((double)m.format_bytes > m.total_bytes);
	/* The excess: 33 headers, plus the codes and metadata of the 128
	 * FIFO Values, which the blocks hold too (a block is a pure function
	 * of its tokens); no padding at this shape. */
	excess = 33 * 512 + 128 * (128 * 2 / 8 + 2 * (128 / 32) * 2);
	assert_true((double)m.format_bytes - m.total_bytes == (double)excess);
}

static void test_scaling_and_short(void **state)
{
	struct kvs_memory one, many, m;
	struct kvs_layout block;
	struct kvs_shape shape;

	(void)state;
	assert_int_equal(
		kvs_memory_account(4096, 128, 32, 128, 2, 2, 2, 1, 1, 1, &one),
		0);
	assert_int_equal(
		kvs_memory_account(4096, 128, 32, 128, 2, 2, 2, 2, 4, 3, &many),
		0);
	assert_true(many.quantized_bytes == 24 * one.quantized_bytes);
	assert_true(many.residual_bytes == 24 * one.residual_bytes);
	assert_true(many.total_bytes == 24 * one.total_bytes);
	/* Blocks hold all 4 heads under one header: per layer and request,
	 * 32 such blocks and one tail. */
	kvs_shape_default(&shape, 4, 128);
	assert_int_equal(kvs_block_layout(&shape, &block), 0);
	assert_int_equal(many.format_bytes,
			 6 * (32 * (uint64_t)block.total_size + 512 +
			      4 * 128 * 128 * 2));

	/* Fewer tokens than R: r_K = r_V = T, nothing quantized. */
	assert_int_equal(
		kvs_memory_account(5, 128, 32, 128, 2, 2, 2, 1, 1, 1, &m), 0);
	assert_true(m.quantized_bytes == 0.0);
	assert_true(m.residual_bytes == 128.0 * 10 * 2);
	assert_int_equal(m.format_bytes, 512 + 128 * 10 * 2);

	/* 4 bits, fp32 metadata and residual, T = 300: r_K = 44, r_V = 128. */
	assert_int_equal(
		kvs_memory_account(300, 64, 32, 128, 4, 4, 4, 1, 1, 1, &m), 0);
	assert_true(m.quantized_bytes ==
		    64.0 * (600 - 44 - 128) * (0.5 + 8.0 / 32));
	assert_true(m.residual_bytes == 64.0 * (44 + 128) * 4);
	assert_true((double)m.format_bytes > m.total_bytes);
}

static void test_bad_arguments(void **state)
{
	/* tokens, D, G, R, bits, e, f, layers: one thing wrong in each. */
	static const uint32_t bad[][8] = {
		{ 64, 128, 32, 128, 3, 2, 2, 1 }, /* bits */
		{ 64, 128, 32, 128, 2, 3, 2, 1 }, /* meta bytes */
		{ 64, 128, 32, 128, 2, 2, 8, 1 }, /* float bytes */
		{ 64, 128, 32, 100, 2, 2, 2, 1 }, /* R % G */
		{ 64, 128, 24, 120, 2, 2, 2, 1 }, /* G not a power of 2 */
		{ 64, 128, 32, 128, 2, 2, 2, 0 }, /* layers */
		{ 64, 0, 32, 128, 2, 2, 2, 1 }, /* head dim */
	};
	struct kvs_memory m = { .total_bytes = -1.0 };
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(
			kvs_memory_account(bad[i][0], bad[i][1], bad[i][2],
					   bad[i][3], bad[i][4], bad[i][5],
					   bad[i][6], bad[i][7], 1, 1, &m),
			-KVS_EPARAM);
	assert_int_equal(
		kvs_memory_account(64, 128, 32, 128, 2, 2, 2, 1, 1, 1, NULL),
		-KVS_EPARAM);
	assert_true(m.total_bytes == -1.0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_seed_example),
		cmocka_unit_test(test_scaling_and_short),
		cmocka_unit_test(test_bad_arguments),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
