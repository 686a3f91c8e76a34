/*
 * test_dram.c - the DRAM arena's slab allocator (store/dram.c, private
 * API): size classes cover every record size with under 12.5% waste, slots
 * are aligned and disjoint, usage never exceeds the arena, and churn across
 * size classes leaves no unusable space: once everything is freed, the
 * whole arena can be handed out again in any other class.  Also the
 * one-pass copy + record checksum of a put (store/format.c).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "store_internal.h"

static uint64_t next_rand(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

static void test_classes(void **state)
{
	struct dram d;

	assert_int_equal(dram_init(&d, 64 << 20), 0);
	assert_int_equal(d.slab_size, 4 << 20);
	for (uint64_t rec = 4096; rec <= d.slab_size; rec += 4096) {
		int cls = dram_class(&d, rec);

		assert_true(cls >= 0);
		assert_true(d.class_size[cls] >= rec);
		assert_true(d.class_size[cls] % KVS_STORE_ALIGN == 0);
		/* waste under 1/8, or one page for the small classes */
		assert_true(d.class_size[cls] - rec <= rec / 8 ||
			    d.class_size[cls] - rec < KVS_STORE_ALIGN);
	}
	assert_int_equal(dram_class(&d, (uint64_t)d.slab_size + 1), -1);
	dram_fini(&d);
	/* small arenas get small slabs; below one slab there is no arena */
	assert_int_equal(dram_init(&d, 1 << 20), 0);
	assert_int_equal(d.slab_size, 64 << 10);
	dram_fini(&d);
	assert_int_equal(dram_init(&d, 32 << 10), -EINVAL);
}

struct held {
	uint8_t *slot;
	int cls;
};

static void test_churn(void **state)
{
	enum { MAX_HELD = 4096 };
	struct held *h = calloc(MAX_HELD, sizeof(*h));
	uint64_t x = 12345;
	size_t n = 0;
	struct dram d;

	assert_int_equal(dram_init(&d, 16 << 20), 0);
	for (int op = 0; op < 200000; op++) {
		bool alloc = n == 0 || (n < MAX_HELD && next_rand(&x) % 2);

		if (alloc) {
			uint64_t rec = 4096 * (1 + next_rand(&x) % 64);
			int cls = dram_class(&d, rec);
			uint8_t *slot = dram_alloc(&d, cls);

			if (!slot)
				continue; /* full: the caller would evict */
			assert_true((uintptr_t)slot % KVS_STORE_ALIGN == 0);
			assert_true(slot >= d.base &&
				    slot + d.class_size[cls] <=
					    d.base + d.map_len);
			/* the slot is ours: write all of it */
			memset(slot, (int)(op & 0xff), d.class_size[cls]);
			h[n].slot = slot;
			h[n++].cls = cls;
		} else {
			size_t i = next_rand(&x) % n;

			dram_free(&d, h[i].slot, h[i].cls);
			h[i] = h[--n];
		}
		assert_true(d.used_bytes <= d.map_len);
	}
	while (n) {
		n--;
		dram_free(&d, h[n].slot, h[n].cls);
	}
	assert_int_equal(d.used_bytes, 0);
	assert_int_equal(d.nfree_slabs, d.nslabs);
	/* every slab serves a new class again: the arena fills completely */
	int cls = dram_class(&d, KVS_STORE_ALIGN);
	uint64_t got = 0;

	while (dram_alloc(&d, cls))
		got += d.class_size[cls];
	assert_int_equal(got, d.map_len);
	dram_fini(&d);
	free(h);
}

/* The one-pass copy of a put gives the bytes and the record checksum of
 * a plain copy and hash, at every length around its chunk size. */
static void test_copy_checksum(void **state)
{
	static const size_t lens[] = {
		0, 1, 4095, 16383, 16384, 16385, 32768, 98816, 100007,
	};
	size_t max = 100007;
	uint8_t *src = malloc(max), *dst = malloc(max + 1);
	uint64_t x = 12345;

	assert_non_null(src);
	assert_non_null(dst);
	for (size_t i = 0; i < max; i++)
		src[i] = (uint8_t)next_rand(&x);
	for (size_t k = 0; k < sizeof(lens) / sizeof(lens[0]); k++) {
		size_t n = lens[k];

		memset(dst, 0xa5, max + 1);
		assert_true(payload_copy_checksum(dst, src, n) ==
			    payload_checksum(src, n));
		assert_memory_equal(dst, src, n);
		assert_int_equal(dst[n], 0xa5);
	}
	free(src);
	free(dst);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_classes),
		cmocka_unit_test(test_churn),
		cmocka_unit_test(test_copy_checksum),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
