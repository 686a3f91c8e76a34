/*
 * test_ident.c - block ids and model fingerprints: a span id is a pure
 * function of (namespace, model fingerprint, parent id, token ids) and
 * changes when any of them changes; the fingerprint changes with every
 * field that changes a block's bytes; ids round-trip through hex.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "kvstash/kvformat.h"

#define NTOK 16

struct span_case {
	const char *ns;
	uint8_t model_fp[KVS_ID_SIZE];
	uint8_t parent[KVS_ID_SIZE];
	int has_parent;
	uint32_t tokens[NTOK];
	size_t n;
};

static void span_case_init(struct span_case *c)
{
	memset(c, 0, sizeof(*c));
	c->ns = "tenant-a";
	for (int i = 0; i < KVS_ID_SIZE; i++) {
		c->model_fp[i] = (uint8_t)(0x10 + i);
		c->parent[i] = (uint8_t)(0xA0 ^ i);
	}
	c->has_parent = 1;
	for (int i = 0; i < NTOK; i++)
		c->tokens[i] = 1000u + 7u * (uint32_t)i;
	c->n = NTOK;
}

static void span_case_id(const struct span_case *c, uint8_t out[KVS_ID_SIZE])
{
	assert_int_equal(kvs_span_id(c->ns, c->model_fp,
				     c->has_parent ? c->parent : NULL,
				     c->tokens, c->n, out),
			 0);
}

static void assert_ids_differ(const uint8_t *a, const uint8_t *b)
{
	assert_memory_not_equal(a, b, KVS_ID_SIZE);
}

static void test_span_id_deterministic(void **state)
{
	struct span_case c;
	uint8_t a[KVS_ID_SIZE], b[KVS_ID_SIZE], zero[KVS_ID_SIZE] = { 0 };

	(void)state;
	span_case_init(&c);
	span_case_id(&c, a);
	span_case_id(&c, b);
	assert_memory_equal(a, b, KVS_ID_SIZE);
	assert_memory_not_equal(a, zero, KVS_ID_SIZE);
}

static void test_span_id_namespace(void **state)
{
	static const char *const names[] = { "tenant-b", "", "tenant-a ",
					     "tenant-" };
	struct span_case c;
	uint8_t base[KVS_ID_SIZE], other[KVS_ID_SIZE];

	(void)state;
	span_case_init(&c);
	span_case_id(&c, base);
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		c.ns = names[i];
		span_case_id(&c, other);
		assert_ids_differ(base, other);
	}
}

static void test_span_id_parent(void **state)
{
	struct span_case c;
	uint8_t base[KVS_ID_SIZE], other[KVS_ID_SIZE];

	(void)state;
	span_case_init(&c);
	span_case_id(&c, base);
	for (int i = 0; i < KVS_ID_SIZE; i++) {
		c.parent[i] ^= 0x01;
		span_case_id(&c, other);
		assert_ids_differ(base, other);
		c.parent[i] ^= 0x01;
	}
	c.has_parent = 0;
	span_case_id(&c, other);
	assert_ids_differ(base, other);
}

static void test_span_id_model(void **state)
{
	struct span_case c;
	uint8_t base[KVS_ID_SIZE], other[KVS_ID_SIZE];

	(void)state;
	span_case_init(&c);
	span_case_id(&c, base);
	for (int i = 0; i < KVS_ID_SIZE; i++) {
		c.model_fp[i] ^= 0x80;
		span_case_id(&c, other);
		assert_ids_differ(base, other);
		c.model_fp[i] ^= 0x80;
	}
}

static void test_span_id_tokens(void **state)
{
	struct span_case c;
	uint8_t base[KVS_ID_SIZE], other[KVS_ID_SIZE];

	(void)state;
	span_case_init(&c);
	span_case_id(&c, base);
	for (int i = 0; i < NTOK; i++) {
		c.tokens[i] += 1;
		span_case_id(&c, other);
		assert_ids_differ(base, other);
		c.tokens[i] -= 1;
	}
	/* A prefix of the same tokens is another span. */
	c.n = NTOK - 1;
	span_case_id(&c, other);
	assert_ids_differ(base, other);
	/* Swapping two tokens changes the id (order matters). */
	c.n = NTOK;
	c.tokens[0] = 1007u;
	c.tokens[1] = 1000u;
	span_case_id(&c, other);
	assert_ids_differ(base, other);
}

/* Length prefixes keep field boundaries: moving bytes from the namespace
 * into the token ids must not give the same digest. */
static void test_span_id_boundaries(void **state)
{
	struct span_case c;
	uint8_t a[KVS_ID_SIZE], b[KVS_ID_SIZE];

	(void)state;
	span_case_init(&c);
	c.ns = "abcd";
	c.n = 1;
	span_case_id(&c, a);
	c.ns = "";
	c.n = 2;
	memcpy(&c.tokens[1], &c.tokens[0], sizeof(c.tokens[0]));
	memcpy(&c.tokens[0], "abcd", 4);
	span_case_id(&c, b);
	assert_ids_differ(a, b);
}

static void model_desc_init(struct kvs_model_desc *d)
{
	memset(d, 0, sizeof(*d));
	d->model_id = "llama-3-8b";
	d->layers = 32;
	d->kv_dtype = KVS_DTYPE_F16;
	kvs_shape_default(&d->shape, 8, 128);
	d->layout = KVS_LAYOUT_TOKEN_MAJOR;
}

static void test_fingerprint_fields(void **state)
{
	struct kvs_model_desc d;
	uint8_t base[KVS_ID_SIZE], again[KVS_ID_SIZE], other[KVS_ID_SIZE];

	(void)state;
	model_desc_init(&d);
	assert_int_equal(kvs_model_fingerprint(&d, base), 0);
	assert_int_equal(kvs_model_fingerprint(&d, again), 0);
	assert_memory_equal(base, again, KVS_ID_SIZE);

#define CHANGED(field, value)                                                  \
	do {                                                                   \
		model_desc_init(&d);                                           \
		d.field = (value);                                             \
		assert_int_equal(kvs_model_fingerprint(&d, other), 0);         \
		assert_ids_differ(base, other);                                \
	} while (0)
	CHANGED(model_id, "llama-3-8b-instruct");
	CHANGED(model_id, "llama-3-8");
	CHANGED(layers, 33);
	CHANGED(kv_dtype, KVS_DTYPE_BF16);
	CHANGED(shape.kv_heads, 4);
	CHANGED(shape.head_dim, 64);
	CHANGED(shape.group, 64);
	CHANGED(shape.bits, 4);
	CHANGED(shape.meta_type, KVS_DTYPE_BF16);
	CHANGED(shape.span, 256);
	CHANGED(shape.residual, 64);
	CHANGED(layout, 2);
#undef CHANGED
}

static void test_hex_round_trip(void **state)
{
	uint8_t id[KVS_ID_SIZE], back[KVS_ID_SIZE];
	char hex[65];

	(void)state;
	for (int i = 0; i < KVS_ID_SIZE; i++)
		id[i] = (uint8_t)(i * 37 + 5);
	kvs_id_to_hex(id, hex);
	assert_int_equal(strlen(hex), 64);
	assert_string_equal(hex, "052a4f74"
				 "99bee308"
				 "2d52779c"
				 "c1e60b30"
				 "557a9fc4"
				 "e90e3358"
				 "7da2c7ec"
				 "11365b80");
	assert_int_equal(kvs_id_from_hex(hex, back), 0);
	assert_memory_equal(id, back, KVS_ID_SIZE);
}

static void test_hex_refused(void **state)
{
	uint8_t out[KVS_ID_SIZE], keep[KVS_ID_SIZE];
	char hex[80];

	(void)state;
	memset(hex, 'a', 64);
	hex[64] = '\0';
	memset(out, 0x5A, sizeof(out));
	memcpy(keep, out, sizeof(out));
	hex[63] = '\0'; /* 63 digits */
	assert_int_equal(kvs_id_from_hex(hex, out), -KVS_EPARAM);
	hex[63] = 'a';
	hex[64] = 'a'; /* 65 digits */
	hex[65] = '\0';
	assert_int_equal(kvs_id_from_hex(hex, out), -KVS_EPARAM);
	hex[64] = '\0';
	hex[10] = 'g';
	assert_int_equal(kvs_id_from_hex(hex, out), -KVS_EPARAM);
	hex[10] = ' ';
	assert_int_equal(kvs_id_from_hex(hex, out), -KVS_EPARAM);
	assert_int_equal(kvs_id_from_hex("", out), -KVS_EPARAM);
	/* Outputs are written only on success. */
	assert_memory_equal(out, keep, KVS_ID_SIZE);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_span_id_deterministic),
		cmocka_unit_test(test_span_id_namespace),
		cmocka_unit_test(test_span_id_parent),
		cmocka_unit_test(test_span_id_model),
		cmocka_unit_test(test_span_id_tokens),
		cmocka_unit_test(test_span_id_boundaries),
		cmocka_unit_test(test_fingerprint_fields),
		cmocka_unit_test(test_hex_round_trip),
		cmocka_unit_test(test_hex_refused),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
