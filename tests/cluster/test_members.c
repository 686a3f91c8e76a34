/*
 * test_members.c - what the cluster module checks without etcd: names,
 * a member's JSON value (round trip, every refusal), member snapshots
 * (order, lookup, refusals, references), and the etcd client's own
 * helpers: base64, the end of a prefix range, the endpoint list.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cluster_internal.h"
#include "etcd_internal.h"
#include "kvstash/error.h"

static void test_names(void **state)
{
	char longest[KVS_CLUSTER_NAME_MAX + 2];

	assert_true(kvs_cluster_name_valid("a"));
	assert_true(kvs_cluster_name_valid("Node_1.rack-2"));
	assert_false(kvs_cluster_name_valid(""));
	assert_false(kvs_cluster_name_valid(NULL));
	assert_false(kvs_cluster_name_valid("a/b"));
	assert_false(kvs_cluster_name_valid("a b"));
	assert_false(kvs_cluster_name_valid("caf\xc3\xa9"));
	memset(longest, 'x', sizeof(longest));
	longest[KVS_CLUSTER_NAME_MAX] = '\0';
	assert_true(kvs_cluster_name_valid(longest));
	longest[KVS_CLUSTER_NAME_MAX] = 'x';
	longest[KVS_CLUSTER_NAME_MAX + 1] = '\0';
	assert_false(kvs_cluster_name_valid(longest));
}

static void test_config_and_prefix(void **state)
{
	struct kvs_cluster_config c = { .endpoints = "http://127.0.0.1:1",
					.cluster = "prod" };
	char prefix[KVS_CLUSTER_KEY_MAX];

	assert_int_equal(kvs_cluster_config_check(&c), 0);
	assert_int_equal(kvs_cluster_timeout_ms(&c), KVS_CLUSTER_TIMEOUT_MS);
	c.timeout_ms = 300;
	assert_int_equal(kvs_cluster_timeout_ms(&c), 300);
	kvs_cluster_nodes_prefix("prod", prefix);
	assert_string_equal(prefix, "/kvstash/prod/nodes/");
	c.cluster = "a/b";
	assert_int_equal(kvs_cluster_config_check(&c), -EINVAL);
	c.cluster = "prod";
	c.endpoints = "";
	assert_int_equal(kvs_cluster_config_check(&c), -EINVAL);
	assert_int_equal(kvs_cluster_config_check(NULL), -EINVAL);
}

static struct kvs_cluster_member sample(void)
{
	struct kvs_cluster_member m;

	memset(&m, 0, sizeof(m));
	strcpy(m.id, "n1");
	strcpy(m.address, "10.1.2.3:7400");
	m.capacity = 3ull << 40;
	m.protocol = 7;
	m.start_time = 1700000000;
	return m;
}

static int decode(const char *id, const char *json,
		  struct kvs_cluster_member *out)
{
	const char *why = NULL;
	int err = kvs_cluster_member_decode(id, (const uint8_t *)json,
					    strlen(json), out, &why);

	if (err)
		assert_non_null(why);
	return err;
}

static void test_value_roundtrip(void **state)
{
	struct kvs_cluster_member m = sample(), back;
	char *json = kvs_cluster_member_encode(&m);

	assert_non_null(json);
	assert_non_null(strstr(json, "\"version\""));
	memset(&back, 0xee, sizeof(back));
	assert_int_equal(decode("n1", json, &back), 0);
	assert_string_equal(back.id, "n1");
	assert_string_equal(back.address, "10.1.2.3:7400");
	assert_true(back.capacity == m.capacity);
	assert_int_equal(back.protocol, 7);
	assert_int_equal(back.start_time, 1700000000);
	assert_int_equal(back.lease, 0);
	/* under another key's id it is not that member */
	assert_int_equal(decode("n2", json, &back), -EINVAL);
	free(json);

	/* newer nodes may add fields */
	assert_int_equal(decode("n1",
				"{\"id\":\"n1\",\"address\":\"[::1]:9\","
				"\"capacity\":0,\"protocol\":1,\"start_time\":"
				"5,\"zone\":\"b\",\"extra\":[1,2]}",
				&back),
			 0);
	assert_string_equal(back.address, "[::1]:9");
	assert_true(back.capacity == 0);

	m.capacity = 1ull << 63; /* over JSON's signed integers */
	assert_null(kvs_cluster_member_encode(&m));
}

static void test_value_refusals(void **state)
{
	static const char *const bad[] = {
		"",
		"not json",
		"[1,2]",
		"{\"address\":\"a:1\",\"capacity\":1,\"protocol\":1,"
		"\"start_time\":1}",
		"{\"id\":\"n1\",\"capacity\":1,\"protocol\":1,\"start_time\":"
		"1}",
		"{\"id\":\"n1\",\"address\":\"\",\"capacity\":1,\"protocol\":1,"
		"\"start_time\":1}",
		"{\"id\":\"n1\",\"address\":\"a b:1\",\"capacity\":1,"
		"\"protocol\":1,\"start_time\":1}",
		"{\"id\":\"n1\",\"address\":\"a:1\",\"capacity\":-1,"
		"\"protocol\":1,\"start_time\":1}",
		"{\"id\":\"n1\",\"address\":\"a:1\",\"capacity\":\"1\","
		"\"protocol\":1,\"start_time\":1}",
		"{\"id\":\"n1\",\"address\":\"a:1\",\"capacity\":1,"
		"\"protocol\":4294967296,\"start_time\":1}",
		"{\"id\":\"n1\",\"address\":\"a:1\",\"capacity\":1,"
		"\"protocol\":1}",
		"{\"id\":\"n1\",\"address\":\"a:1\",\"capacity\":1.5,"
		"\"protocol\":1,\"start_time\":1}",
		"{\"id\":\"n1\",\"address\":\"a:1\",\"capacity\":1,"
		"\"protocol\":1,\"start_time\":1",
	};
	struct kvs_cluster_member m = sample(), before = m;
	char *big;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(decode("n1", bad[i], &m), -EINVAL);
		/* written only on success */
		assert_memory_equal(&m, &before, sizeof(m));
	}
	/* an id that is not a node id */
	assert_int_equal(decode("n/1",
				"{\"id\":\"n/1\",\"address\":\"a:1\","
				"\"capacity\":1,\"protocol\":1,"
				"\"start_time\":1}",
				&m),
			 -EINVAL);
	/* a value over the size limit is not parsed at all */
	big = malloc(KVS_CLUSTER_VALUE_MAX + 200);
	assert_non_null(big);
	snprintf(big, KVS_CLUSTER_VALUE_MAX + 200,
		 "{\"id\":\"n1\",\"address\":\"a:1\",\"capacity\":1,"
		 "\"protocol\":1,\"start_time\":1,\"pad\":\"%*s\"}",
		 KVS_CLUSTER_VALUE_MAX, "");
	assert_int_equal(decode("n1", big, &m), -EINVAL);
	free(big);
}

static void test_snapshots(void **state)
{
	struct kvs_cluster_member list[3] = { sample(), sample(), sample() };
	struct kvs_cluster_members *m, *again;

	strcpy(list[0].id, "zeta");
	strcpy(list[1].id, "alpha");
	strcpy(list[2].id, "mid");
	list[2].lease = 42;
	assert_int_equal(kvs_cluster_members_create(list, 3, 9, &m), 0);
	assert_int_equal(kvs_cluster_members_count(m), 3);
	assert_int_equal(kvs_cluster_members_generation(m), 9);
	assert_string_equal(kvs_cluster_members_get(m, 0)->id, "alpha");
	assert_string_equal(kvs_cluster_members_get(m, 1)->id, "mid");
	assert_string_equal(kvs_cluster_members_get(m, 2)->id, "zeta");
	assert_null(kvs_cluster_members_get(m, 3));
	assert_int_equal(kvs_cluster_members_get(m, 1)->lease, 42);
	assert_int_equal(kvs_cluster_members_find(m, "mid"), 1);
	assert_int_equal(kvs_cluster_members_find(m, "zeta"), 2);
	assert_int_equal(kvs_cluster_members_find(m, "nope"), -1);

	assert_int_equal(kvs_cluster_members_create(list, 3, 10, &again), 0);
	assert_true(kvs_cluster_members_same(m, again));
	kvs_cluster_members_release(again);
	list[0].capacity++;
	assert_int_equal(kvs_cluster_members_create(list, 3, 10, &again), 0);
	assert_false(kvs_cluster_members_same(m, again));
	kvs_cluster_members_release(again);

	/* a second reference keeps it alive */
	assert_ptr_equal(kvs_cluster_members_ref(m), m);
	kvs_cluster_members_release(m);
	assert_string_equal(kvs_cluster_members_get(m, 0)->id, "alpha");
	kvs_cluster_members_release(m);
	kvs_cluster_members_release(NULL);

	strcpy(list[0].id, "mid"); /* duplicate */
	assert_int_equal(kvs_cluster_members_create(list, 3, 1, &m), -EINVAL);
	strcpy(list[0].id, "a b");
	assert_int_equal(kvs_cluster_members_create(list, 3, 1, &m), -EINVAL);
	assert_int_equal(kvs_cluster_members_create(NULL, 2, 1, &m), -EINVAL);
}

static void test_base64(void **state)
{
	uint8_t bytes[256], *back;
	size_t len;

	for (int i = 0; i < 256; i++)
		bytes[i] = (uint8_t)i;
	for (size_t n = 0; n <= 256; n += n < 8 ? 1 : 31) {
		char *text = kvs_etcd_b64_encode(bytes, n);

		assert_non_null(text);
		assert_int_equal(strlen(text), (n + 2) / 3 * 4);
		assert_int_equal(kvs_etcd_b64_decode(text, &back, &len), 0);
		assert_int_equal(len, n);
		assert_memory_equal(back, bytes, n);
		assert_int_equal(back[n], 0);
		free(back);
		free(text);
	}
	/* the gateway's own example of "foo" */
	assert_int_equal(kvs_etcd_b64_decode("Zm9v", &back, &len), 0);
	assert_int_equal(len, 3);
	assert_string_equal((char *)back, "foo");
	free(back);
	assert_int_equal(kvs_etcd_b64_decode("Zm9", &back, &len), -KVS_EPROTO);
	assert_int_equal(kvs_etcd_b64_decode("Zm*v", &back, &len), -KVS_EPROTO);
}

static void test_prefix_end(void **state)
{
	char *end;
	size_t len;

	assert_int_equal(kvs_etcd_prefix_end("/kvstash/c/nodes/", &end, &len),
			 0);
	assert_int_equal(len, 17);
	assert_memory_equal(end, "/kvstash/c/nodes0", 17);
	free(end);
	assert_int_equal(kvs_etcd_prefix_end("a\xff\xff", &end, &len), 0);
	assert_int_equal(len, 1);
	assert_int_equal(end[0], 'b');
	free(end);
	/* no byte can grow: everything from the key on */
	assert_int_equal(kvs_etcd_prefix_end("\xff", &end, &len), 0);
	assert_int_equal(len, 1);
	assert_int_equal(end[0], '\0');
	free(end);
}

static void test_endpoints(void **state)
{
	struct kvs_etcd *etcd;
	char many[2048] = "";

	assert_int_equal(kvs_etcd_open("http://a:1, http://b:2/,https://c:3",
				       100, &etcd),
			 0);
	assert_int_equal(kvs_etcd_endpoint_current(etcd), 0);
	assert_string_equal(kvs_etcd_endpoint_url(etcd, 1), "http://b:2");
	assert_string_equal(kvs_etcd_endpoint_url(etcd, 2), "https://c:3");
	kvs_etcd_endpoint_failed(etcd, 0);
	assert_int_equal(kvs_etcd_endpoint_current(etcd), 1);
	/* a second report of the same failure does not skip a healthy one */
	kvs_etcd_endpoint_failed(etcd, 0);
	assert_int_equal(kvs_etcd_endpoint_current(etcd), 1);
	kvs_etcd_endpoint_failed(etcd, 1);
	kvs_etcd_endpoint_failed(etcd, 2);
	assert_int_equal(kvs_etcd_endpoint_current(etcd), 0);
	kvs_etcd_close(etcd);
	kvs_etcd_close(NULL);

	assert_int_equal(kvs_etcd_open("a:1", 100, &etcd), -EINVAL);
	assert_int_equal(kvs_etcd_open("http://a:1,", 100, &etcd), -EINVAL);
	assert_int_equal(kvs_etcd_open("http://", 100, &etcd), -EINVAL);
	assert_int_equal(kvs_etcd_open("http://a:1", 0, &etcd), -EINVAL);
	for (int i = 0; i <= KVS_ETCD_ENDPOINTS_MAX; i++)
		strcat(many, i ? ",http://h:1" : "http://h:1");
	assert_int_equal(kvs_etcd_open(many, 100, &etcd), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_names),
		cmocka_unit_test(test_config_and_prefix),
		cmocka_unit_test(test_value_roundtrip),
		cmocka_unit_test(test_value_refusals),
		cmocka_unit_test(test_snapshots),
		cmocka_unit_test(test_base64),
		cmocka_unit_test(test_prefix_end),
		cmocka_unit_test(test_endpoints),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
