/*
 * test_cli_util.c - unit tests of the command-line helpers (tools/cli_util):
 * decimal integers and capacities, the option table parser, the exact
 * messages (ranges, usage hints, library errors as one line), same-file
 * detection, file read/write and the JSON writer's exact output.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "cli_util.h"
#include "kvstash/error.h"
#include "kvstash/log.h"

static void test_sizes(void **state)
{
	static const struct {
		const char *text;
		uint64_t bytes;
	} good[] = {
		{ "0", 0 },	      { "4096", 4096 },	  { "64K", 65536 },
		{ "64k", 65536 },     { "1M", 1 << 20 },  { "2G", 2ull << 30 },
		{ "1T", 1ull << 40 }, { "16KiB", 16384 }, { "3kb", 3072 },
		{ "7B", 7 },	      { "010", 10 },	  { "010K", 10240 },
		{ "0", 0 },	      { "00", 0 },
	};
	static const char *const bad[] = {
		"",
		"K",
		"-1",
		"+1",
		" 1",
		"1.5G",
		"1X",
		"1KX",
		"1KiBs",
		"20000000T",
		"99999999999999999999",
		"0x10",
		"1 K",
		"1Q",
	};
	uint64_t v;

	(void)state;
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		v = 12345;
		assert_int_equal(
			kvs_cli_parse_size("t", "size", good[i].text, &v), 0);
		assert_int_equal(v, good[i].bytes);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		v = 12345;
		assert_int_equal(kvs_cli_parse_size("t", "size", bad[i], &v),
				 -KVS_EPARAM);
		assert_int_equal(v, 12345); /* untouched on error */
	}
}

static void test_integers(void **state)
{
	/* Decimal only; leading zeros are zeros (010 is ten, 08 eight). */
	static const struct {
		const char *text;
		uint64_t value;
	} good[] = {
		{ "42", 42 },	{ "010", 10 },
		{ "08", 8 },	{ "000", 0 },
		{ "100", 100 }, { "18446744073709551615", UINT64_MAX },
	};
	/* No hex, no octal, no sign, no blanks; ranges apply. */
	static const char *const bad[] = {
		"101", "-1", "12x", "",	   "0x10",
		"+1",  " 1", "1 ",  "1e3", "18446744073709551616",
	};
	uint64_t v;

	(void)state;
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		v = 12345;
		assert_int_equal(kvs_cli_parse_u64(
					 "t", "n", good[i].text, 0,
					 good[i].value > 100 ? UINT64_MAX : 100,
					 &v),
				 0);
		assert_true(v == good[i].value);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		v = 7;
		assert_int_equal(kvs_cli_parse_u64("t", "n", bad[i], 0,
						   i == 0 ? 100 : UINT64_MAX,
						   &v),
				 -KVS_EPARAM);
		assert_int_equal(v, 7); /* untouched on error */
	}
	assert_int_equal(kvs_cli_parse_u64("t", "n", "0", 1, 100, &v),
			 -KVS_EPARAM);
}

/* ---- what goes to stderr --------------------------------------------- */

static int saved_stderr = -1;
static FILE *captured;

static void capture_begin(void)
{
	fflush(stderr);
	captured = tmpfile();
	assert_non_null(captured);
	saved_stderr = dup(STDERR_FILENO);
	assert_true(saved_stderr >= 0);
	assert_int_equal(dup2(fileno(captured), STDERR_FILENO), STDERR_FILENO);
}

/* Stops capturing; returns what was written (static, NUL-terminated). */
static const char *capture_end(void)
{
	static char text[4096];
	size_t n;

	fflush(stderr);
	assert_int_equal(dup2(saved_stderr, STDERR_FILENO), STDERR_FILENO);
	close(saved_stderr);
	rewind(captured);
	n = fread(text, 1, sizeof(text) - 1, captured);
	text[n] = '\0';
	fclose(captured);
	return text;
}

struct ranged {
	uint32_t heads;
	uint64_t cap, segment, count;
};

/* Parses one "--name value" against options whose ranges differ; returns
 * the message printed. */
static const char *range_message(const char *name, const char *value)
{
	struct ranged r = { 0 };
	struct kvs_cli_opt opts[] = {
		KVS_OPT_U32("heads", &r.heads, 1, 64, false),
		KVS_OPT_SIZE("capacity", &r.cap, 4096, 0, false),
		KVS_OPT_SIZE("segment", &r.segment, 256 << 10, 1 << 30, false),
		KVS_OPT_U64("count", &r.count, 0, 0, false),
	};
	char *argv[] = { "t", (char *)name, (char *)value };

	capture_begin();
	assert_int_equal(kvs_cli_parse("t", 3, argv, opts, 4, NULL, 0, NULL),
			 -KVS_EPARAM);
	return capture_end();
}

static void test_range_messages(void **state)
{
	static const struct {
		const char *name, *value, *message;
	} cases[] = {
		/* No limit is never printed as an upper bound of 0. */
		{ "--capacity", "1K",
		  "--capacity: 1K is out of range: must be at least 4K" },
		{ "--segment", "100K",
		  "--segment: 100K is out of range: must be between 256K and "
		  "1G" },
		{ "--heads", "065",
		  "--heads: 065 is out of range: must be between 1 and 64" },
		{ "--heads", "0",
		  "--heads: 0 is out of range: must be between 1 and 64" },
		{ "--count", "18446744073709551616",
		  "--count: 18446744073709551616 is out of range: must be at "
		  "most 18446744073709551615" },
		{ "--capacity", "99999999999T",
		  "--capacity: 99999999999T is out of range: must be at least "
		  "4K" },
		{ "--heads", "0x8",
		  "--heads: expected a decimal integer, got '0x8'" },
	};
	char expect[256];

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		snprintf(expect, sizeof(expect), "kvstash t: %s\n",
			 cases[i].message);
		assert_string_equal(
			range_message(cases[i].name, cases[i].value), expect);
	}
}

static void test_messages(void **state)
{
	const char *text;

	(void)state;
	/* A usage error: its line and the hint, nothing else. */
	capture_begin();
	assert_int_equal(
		kvs_cli_usage_error("store get", "which id? (%s)", "one ID"),
		KVS_EXIT_USAGE);
	assert_string_equal(capture_end(),
			    "kvstash store get: which id? (one ID)\n"
			    "try 'kvstash store get --help'\n");
	capture_begin();
	assert_int_equal(kvs_cli_usage("trace", "usage: ...\n", -KVS_EPARAM),
			 KVS_EXIT_USAGE);
	assert_string_equal(capture_end(), "try 'kvstash trace --help'\n");
	capture_begin();
	kvs_cli_error(NULL, "unknown command '%s'", "a\nb");
	assert_string_equal(capture_end(), "kvstash: unknown command 'a?b'\n");

	/* Library lines: warnings at once, in the command's name; the first
	 * error becomes the cause of the command's one line. */
	kvs_cli_begin("store put");
	capture_begin();
	kvs_log(KVS_LOG_WARN, "store: %s refuses O_DIRECT", "/d");
	kvs_log(KVS_LOG_ERR, "store: mkdir %s: %s", "/d/s", "Not a directory");
	kvs_log(KVS_LOG_ERR, "store: a consequence");
	assert_int_equal(kvs_cli_fail("store put", -ENOTDIR, "/d/s"),
			 KVS_EXIT_FAIL);
	text = capture_end();
	assert_string_equal(text,
			    "kvstash store put: warning: /d refuses O_DIRECT\n"
			    "kvstash store put: mkdir /d/s: Not a directory\n");
	/* Nothing logged: the code names the cause. */
	capture_begin();
	kvs_cli_fail("store put", -ENOSPC, "b.blk");
	assert_string_equal(capture_end(), "kvstash store put: b.blk: No "
					   "space left on device\n");
	/* A line of the command's own replaces what the library logged. */
	capture_begin();
	kvs_log(KVS_LOG_ERR, "store: no store at /x");
	kvs_cli_error("store stat", "/x: no store there");
	kvs_cli_fail("store stat", -EIO, NULL);
	assert_string_equal(capture_end(),
			    "kvstash store stat: /x: no store there\n"
			    "kvstash store stat: Input/output error\n");
	kvs_log_set_sink(NULL, NULL);
}

static void test_same_file(void **state)
{
	char dir[] = "/tmp/kvs-cli-same-XXXXXX";
	char f[64], g[64], l[64], other[64], a[80], b[80];

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(f, sizeof(f), "%s/f", dir);
	snprintf(g, sizeof(g), "%s/g", dir);
	snprintf(l, sizeof(l), "%s/l", dir);
	snprintf(other, sizeof(other), "%s/other", dir);
	assert_int_equal(kvs_cli_write_file("t", f, "x", 1), 0);
	assert_int_equal(kvs_cli_write_file("t", other, "x", 1), 0);
	assert_int_equal(link(f, g), 0);
	assert_int_equal(symlink(f, l), 0);
	assert_true(kvs_cli_same_file(f, f));
	assert_true(kvs_cli_same_file(f, g)); /* hard link */
	assert_true(kvs_cli_same_file(l, f)); /* symbolic link */
	snprintf(a, sizeof(a), "%s/./f", dir);
	assert_true(kvs_cli_same_file(a, g));
	assert_false(kvs_cli_same_file(f, other));
	/* Not made yet: the same entry of the same directory, or not. */
	snprintf(a, sizeof(a), "%s/new", dir);
	snprintf(b, sizeof(b), "%s/./new", dir);
	assert_true(kvs_cli_same_file(a, b));
	snprintf(b, sizeof(b), "%s/new2", dir);
	assert_false(kvs_cli_same_file(a, b));
	assert_false(kvs_cli_same_file(a, f));
	unlink(f);
	unlink(g);
	unlink(l);
	unlink(other);
	assert_int_equal(rmdir(dir), 0);
}

struct parsed {
	uint32_t heads;
	uint64_t cap;
	const char *name;
	double seconds;
	bool json;
};

static int parse(struct parsed *p, const char **pos, size_t *n_pos, int argc,
		 char **argv)
{
	struct kvs_cli_opt opts[] = {
		KVS_OPT_U32("heads", &p->heads, 1, 64, true),
		KVS_OPT_SIZE("capacity", &p->cap, 4096, 0, false),
		KVS_OPT_STR("name", &p->name, false),
		KVS_OPT_DOUBLE("seconds", &p->seconds, false),
		KVS_OPT_FLAG("json", &p->json),
	};

	memset(p, 0, sizeof(*p));
	return kvs_cli_parse("t", argc, argv, opts, 5, pos, 2, n_pos);
}

#define ARGV(...) ((char *[]){ "t", __VA_ARGS__ })
#define ARGC(...) ((int)(sizeof(ARGV(__VA_ARGS__)) / sizeof(char *)))
#define PARSE(...) parse(&p, pos, &n_pos, ARGC(__VA_ARGS__), ARGV(__VA_ARGS__))

static void test_options(void **state)
{
	const char *pos[2];
	struct parsed p;
	size_t n_pos;

	(void)state;
	assert_int_equal(PARSE("--heads", "8", "--capacity=1G", "a.blk",
			       "--json", "--name", "x", "--seconds", "0.5"),
			 0);
	assert_int_equal(p.heads, 8);
	assert_int_equal(p.cap, 1ull << 30);
	assert_string_equal(p.name, "x");
	assert_true(p.seconds == 0.5);
	assert_true(p.json);
	assert_int_equal(n_pos, 1);
	assert_string_equal(pos[0], "a.blk");

	/* "--" ends the options: what follows is positional. */
	assert_int_equal(PARSE("--heads=1", "--", "--json"), 0);
	assert_int_equal(n_pos, 1);
	assert_string_equal(pos[0], "--json");
	assert_false(p.json);

	assert_int_equal(PARSE("--heads", "8", "-h"), KVS_CLI_HELP);
	assert_int_equal(PARSE("--help"), KVS_CLI_HELP);
	assert_int_equal(PARSE("--json"), -KVS_EPARAM); /* required */
	assert_int_equal(PARSE("--heads", "65"), -KVS_EPARAM); /* range */
	assert_int_equal(PARSE("--heads"), -KVS_EPARAM); /* value */
	assert_int_equal(PARSE("--heads", "1", "--heads", "2"), -KVS_EPARAM);
	assert_int_equal(PARSE("--heads", "1", "--bogus"), -KVS_EPARAM);
	assert_int_equal(PARSE("--heads", "1", "-x"), -KVS_EPARAM);
	assert_int_equal(PARSE("--heads", "1", "--json=1"), -KVS_EPARAM);
	assert_int_equal(PARSE("--heads", "1", "--capacity", "1K"),
			 -KVS_EPARAM); /* min */
	assert_int_equal(PARSE("--heads", "1", "--seconds", "nan"),
			 -KVS_EPARAM);
	assert_int_equal(PARSE("--heads", "1", "a", "b", "c"), -KVS_EPARAM);
	/* A prefix of an option name is not that option. */
	assert_int_equal(PARSE("--head", "1"), -KVS_EPARAM);
}

/* An option given several times, each a value or a list. */
static void test_repeated(void **state)
{
	char *argv[] = { "t",	 "--server",	 "a:1,b:2",
			 "stat", "--server=c:3", "--json",
			 "--",	 "--server",	 "d:4" };
	char *none[] = { "t", "stat", "--servers", "x" };
	char *rest[9], *joined = NULL;
	int n_rest;

	(void)state;
	assert_int_equal(kvs_cli_take_repeated("t", "server", 9, argv, rest,
					       &n_rest, &joined),
			 0);
	assert_string_equal(joined, "a:1,b:2,c:3");
	/* the rest in order; after "--" nothing is taken */
	assert_int_equal(n_rest, 6);
	assert_string_equal(rest[0], "t");
	assert_string_equal(rest[1], "stat");
	assert_string_equal(rest[2], "--json");
	assert_string_equal(rest[3], "--");
	assert_string_equal(rest[4], "--server");
	assert_string_equal(rest[5], "d:4");
	free(joined);
	/* a longer name is another option; none given: NULL */
	joined = (char *)"unchanged";
	assert_int_equal(kvs_cli_take_repeated("t", "server", 4, none, rest,
					       &n_rest, &joined),
			 0);
	assert_null(joined);
	assert_int_equal(n_rest, 4);
	/* a value missing at the end: a usage error */
	assert_int_equal(kvs_cli_take_repeated("t", "server", 2,
					       (char *[]){ "t", "--server" },
					       rest, &n_rest, &joined),
			 -KVS_EPARAM);
}

static void test_files(void **state)
{
	char dir[] = "/tmp/kvs-cli-util-XXXXXX";
	char path[64];
	uint8_t data[3000], *back;
	size_t len;

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/f.bin", dir);
	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (uint8_t)(i * 7);
	assert_int_equal(kvs_cli_write_file("t", path, data, sizeof(data)), 0);
	assert_int_equal(kvs_cli_read_file("t", path, &back, &len), 0);
	assert_int_equal(len, sizeof(data));
	assert_memory_equal(back, data, len);
	free(back);
	/* Overwrite with an empty file: readable, length 0, non-NULL. */
	assert_int_equal(kvs_cli_write_file("t", path, data, 0), 0);
	assert_int_equal(kvs_cli_read_file("t", path, &back, &len), 0);
	assert_int_equal(len, 0);
	assert_non_null(back);
	free(back);
	assert_int_equal(kvs_cli_write_file("t", "/dev/null", data, 10), 0);
	assert_int_equal(kvs_cli_read_file("t", dir, &back, &len), -EISDIR);
	unlink(path);
	assert_true(kvs_cli_read_file("t", path, &back, &len) < 0);
	snprintf(path, sizeof(path), "%s/no/such/dir", dir);
	assert_true(kvs_cli_write_file("t", path, data, 1) < 0);
	assert_int_equal(rmdir(dir), 0); /* no temporary file left behind */
}

static void test_json(void **state)
{
	struct kvs_cli_json j;
	char *text = NULL;
	size_t size = 0;
	FILE *f = open_memstream(&text, &size);

	(void)state;
	assert_non_null(f);
	kvs_cli_json_init(&j, f);
	kvs_cli_json_object_begin(&j, NULL);
	kvs_cli_json_str(&j, "s", "a\"b\\c\n\x01");
	kvs_cli_json_u64(&j, "n", UINT64_MAX);
	kvs_cli_json_double(&j, "d", 387072.0);
	kvs_cli_json_double(&j, "f", 0.1);
	kvs_cli_json_double(&j, "nan", 0.0 / 0.0);
	kvs_cli_json_array_begin(&j, "a");
	kvs_cli_json_bool(&j, NULL, true);
	kvs_cli_json_str(&j, NULL, NULL);
	kvs_cli_json_object_begin(&j, NULL);
	kvs_cli_json_object_end(&j);
	kvs_cli_json_array_end(&j);
	kvs_cli_json_array_begin(&j, "empty");
	kvs_cli_json_array_end(&j);
	kvs_cli_json_object_end(&j);
	kvs_cli_json_finish(&j);
	fclose(f);
	assert_string_equal(text, "{\n"
				  "  \"s\": \"a\\\"b\\\\c\\n\\u0001\",\n"
				  "  \"n\": 18446744073709551615,\n"
				  "  \"d\": 387072,\n"
				  "  \"f\": 0.1,\n"
				  "  \"nan\": null,\n"
				  "  \"a\": [\n"
				  "    true,\n"
				  "    null,\n"
				  "    {}\n"
				  "  ],\n"
				  "  \"empty\": []\n"
				  "}\n");
	free(text);
}

static void test_human_bytes(void **state)
{
	char out[32];

	(void)state;
	assert_string_equal(kvs_cli_human_bytes(512, out, sizeof(out)),
			    "512 B");
	assert_string_equal(kvs_cli_human_bytes(419840, out, sizeof(out)),
			    "410.0 KiB");
	assert_string_equal(kvs_cli_human_bytes(32768, out, sizeof(out)),
			    "32.00 KiB");
	assert_string_equal(kvs_cli_human_bytes(2097152, out, sizeof(out)),
			    "2.00 MiB");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sizes),
		cmocka_unit_test(test_integers),
		cmocka_unit_test(test_range_messages),
		cmocka_unit_test(test_messages),
		cmocka_unit_test(test_same_file),
		cmocka_unit_test(test_options),
		cmocka_unit_test(test_repeated),
		cmocka_unit_test(test_files),
		cmocka_unit_test(test_json),
		cmocka_unit_test(test_human_bytes),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
