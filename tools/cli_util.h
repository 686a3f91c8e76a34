/*
 * cli_util.h - helpers shared by the `kvstash` subcommands: a table-driven
 * long-option parser (integers, capacities with K/M/G/T suffixes, strings,
 * flags), whole-file read and atomic write, error messages, and a small
 * JSON printer.
 *
 * Messages go to stderr as "kvstash <cmd>: <what>"; parse failures map to
 * exit status 2 (usage), everything else that fails to 1 (see cmd.h).
 */
#ifndef KVSTASH_TOOLS_CLI_UTIL_H
#define KVSTASH_TOOLS_CLI_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Exit statuses of every subcommand (cmd.h). */
#define KVS_EXIT_OK 0
#define KVS_EXIT_FAIL 1
#define KVS_EXIT_USAGE 2

/* kvs_cli_parse() result when -h or --help was given. */
#define KVS_CLI_HELP 1

enum kvs_cli_type {
	KVS_CLI_FLAG, /* bool *, no value */
	KVS_CLI_STR, /* const char ** (points into argv) */
	KVS_CLI_U32, /* uint32_t * */
	KVS_CLI_U64, /* uint64_t * */
	KVS_CLI_SIZE, /* uint64_t * bytes: 4096, 64K, 1M, 2G, 1T, 16KiB */
	KVS_CLI_DOUBLE, /* double *, finite */
};

struct kvs_cli_opt {
	const char *name; /* long name without the leading "--" */
	enum kvs_cli_type type;
	void *value; /* where the parsed value goes */
	uint64_t min, max; /* inclusive range for integers and sizes;
			      max == 0 means the type's own range */
	bool required;
	bool seen; /* set by kvs_cli_parse() */
};

/* Table entries: name, destination, range (integers), required. */
#define KVS_OPT_U32(name, ptr, min, max, req)                                  \
	{                                                                      \
		(name), KVS_CLI_U32, (ptr), (min), (max), (req), false         \
	}
#define KVS_OPT_U64(name, ptr, min, max, req)                                  \
	{                                                                      \
		(name), KVS_CLI_U64, (ptr), (min), (max), (req), false         \
	}
#define KVS_OPT_SIZE(name, ptr, min, max, req)                                 \
	{                                                                      \
		(name), KVS_CLI_SIZE, (ptr), (min), (max), (req), false        \
	}
#define KVS_OPT_STR(name, ptr, req)                                            \
	{                                                                      \
		(name), KVS_CLI_STR, (ptr), 0, 0, (req), false                 \
	}
#define KVS_OPT_DOUBLE(name, ptr, req)                                         \
	{                                                                      \
		(name), KVS_CLI_DOUBLE, (ptr), 0, 0, (req), false              \
	}
#define KVS_OPT_FLAG(name, ptr)                                                \
	{                                                                      \
		(name), KVS_CLI_FLAG, (ptr), 0, 0, false, false                \
	}

/* Prints "kvstash @cmd: <message>\n" to stderr. */
void kvs_cli_error(const char *cmd, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/*
 * kvs_cli_parse - parse argv[1 .. argc) against @opts ("--name value" or
 * "--name=value"; "--" ends the options).  Other words are positional and
 * stored, in order, in @pos (at most @max_pos of them; pointers into argv).
 * Returns 0, KVS_CLI_HELP for -h/--help, or -KVS_EPARAM after printing why
 * (unknown option, missing or malformed value, out of range, required
 * option absent, too many positional words).
 */
int kvs_cli_parse(const char *cmd, int argc, char **argv,
		  struct kvs_cli_opt *opts, size_t n_opts, const char **pos,
		  size_t max_pos, size_t *n_pos);

/*
 * kvs_cli_usage - turn a kvs_cli_parse() failure into an exit status:
 * prints @usage to stdout for KVS_CLI_HELP (returns 0), to stderr otherwise
 * (returns KVS_EXIT_USAGE).
 */
int kvs_cli_usage(const char *usage, int parse_rc);

/* Parses an unsigned integer in [min, max] (decimal or 0x hex); 0 or
 * -KVS_EPARAM after printing "@cmd: --@opt: ...". */
int kvs_cli_parse_u64(const char *cmd, const char *opt, const char *s,
		      uint64_t min, uint64_t max, uint64_t *out);

/* Parses a capacity: an integer with an optional binary suffix K, M, G or T
 * (case-insensitive, optionally followed by "B" or "iB"); 0 or -KVS_EPARAM
 * after printing why. */
int kvs_cli_parse_size(const char *cmd, const char *opt, const char *s,
		       uint64_t *out);

/*
 * kvs_cli_read_file - read the whole of @path.
 * @out: malloc'd buffer owned by the caller (free()), at least one byte even
 * for an empty file.  Returns 0 or -errno after printing "@cmd: @path: why".
 */
int kvs_cli_read_file(const char *cmd, const char *path, uint8_t **out,
		      size_t *out_len);

/*
 * kvs_cli_write_file - write @len bytes to @path.  A regular file is
 * published atomically (temporary file, fsync, rename); anything else
 * (/dev/null, a pipe) is written in place.  Returns 0 or -errno after
 * printing why.
 */
int kvs_cli_write_file(const char *cmd, const char *path, const void *buf,
		       size_t len);

/* Formats @bytes as "378.0 KiB" / "2.00 MiB" into @out (>= 32 bytes). */
const char *kvs_cli_human_bytes(double bytes, char *out, size_t out_size);

/* ---- JSON ------------------------------------------------------------ */

#define KVS_CLI_JSON_DEPTH 16

/* A streaming JSON writer, two-space indented.  Every value call takes the
 * member @key inside objects and NULL inside arrays or at the top. */
struct kvs_cli_json {
	FILE *f;
	unsigned depth;
	bool has_items[KVS_CLI_JSON_DEPTH];
};

void kvs_cli_json_init(struct kvs_cli_json *j, FILE *f);
void kvs_cli_json_object_begin(struct kvs_cli_json *j, const char *key);
void kvs_cli_json_object_end(struct kvs_cli_json *j);
void kvs_cli_json_array_begin(struct kvs_cli_json *j, const char *key);
void kvs_cli_json_array_end(struct kvs_cli_json *j);
/* @s NULL prints null; the string is escaped. */
void kvs_cli_json_str(struct kvs_cli_json *j, const char *key, const char *s);
void kvs_cli_json_u64(struct kvs_cli_json *j, const char *key, uint64_t v);
/* Shortest form that reads back to @v; non-finite prints null. */
void kvs_cli_json_double(struct kvs_cli_json *j, const char *key, double v);
void kvs_cli_json_bool(struct kvs_cli_json *j, const char *key, bool v);
/* Ends the document with a newline. */
void kvs_cli_json_finish(struct kvs_cli_json *j);

#endif
