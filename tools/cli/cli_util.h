/*
 * cli_util.h - the conventions every `kvstash` subcommand follows, and the
 * helpers that implement them: a table-driven long-option parser (decimal
 * integers, capacities with K/M/G/T suffixes, strings, flags), messages,
 * whole-file read and atomic write, checked standard output, and a small
 * JSON printer.
 *
 * Conventions (README.md, "Exit status"):
 *  - Exit status: KVS_EXIT_OK 0, KVS_EXIT_FAIL 1 (failure), KVS_EXIT_USAGE 2
 *    (usage error), KVS_EXIT_NOTFOUND 3 (the key asked for is not there: a
 *    miss).  Each means that one thing only.
 *  - An error is exactly one line on stderr, "kvstash <cmd>: <cause>"
 *    (kvs_cli_error, kvs_cli_fail).  A usage error adds one line,
 *    "try 'kvstash <cmd> --help'" (kvs_cli_usage, kvs_cli_usage_error);
 *    the full usage goes to stdout for --help only, with status 0.
 *  - Numbers are decimal: leading zeros are allowed and mean nothing
 *    ("010" is ten); no sign, blanks, hex or octal.  Byte sizes take
 *    K/M/G/T suffixes (binary).
 *  - Results go to stdout; a failed write there is a failure.  main()
 *    brackets every command with kvs_cli_begin()/kvs_cli_end(), which
 *    checks stdout at exit; a command whose output is an acknowledgement
 *    calls kvs_cli_flush_stdout() as it goes.  Library log lines are
 *    routed through the same one-line format while a command runs.
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
#define KVS_EXIT_NOTFOUND 3

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
			      max == 0 means no limit (the type's range) */
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

/*
 * kvs_cli_begin - start command @name (e.g. "store put"; copied): library
 * log lines go to stderr as "kvstash @name: warning: ..." (warnings,
 * info, debug) or are held until the command reports the failure
 * (errors: see kvs_cli_fail).  Called once, by main().
 */
void kvs_cli_begin(const char *name);

/*
 * kvs_cli_end - finish the command that returned @rc: reports a library
 * error that no message of the command used, then flushes and closes
 * stdout.  Returns @rc, or KVS_EXIT_FAIL where @rc was 0 and stdout could
 * not be written (after one line saying why).
 */
int kvs_cli_end(int rc);

/*
 * kvs_cli_flush_stdout - flush stdout now (output that acknowledges work,
 * such as the ids `store put` prints).  0, or -errno after one line
 * "kvstash @cmd: standard output: <why>"; that failure is reported once,
 * kvs_cli_end() does not report it again.
 */
int kvs_cli_flush_stdout(const char *cmd);

/* Prints the one line "kvstash @cmd: <message>" to stderr (@cmd NULL:
 * "kvstash: <message>").  A pending library error (kvs_cli_fail) is
 * dropped: this line reports the failure. */
void kvs_cli_error(const char *cmd, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/*
 * kvs_cli_fail - report the failure @err (negative errno or -KVS_E*) of a
 * library call about @what (a path, an id; may be NULL), in one line:
 * the first error the library logged since the last report, if any, else
 * kvs_strerror(@err); prefixed by "@what: " unless that line already
 * names @what.  Returns KVS_EXIT_FAIL.
 */
int kvs_cli_fail(const char *cmd, int err, const char *what);

/*
 * kvs_cli_usage_error - a usage error found after parsing: prints
 * "kvstash @cmd: <message>" and "try 'kvstash @cmd --help'"; returns
 * KVS_EXIT_USAGE.
 */
int kvs_cli_usage_error(const char *cmd, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/*
 * kvs_cli_parse - parse argv[1 .. argc) against @opts ("--name value" or
 * "--name=value"; "--" ends the options).  Other words are positional and
 * stored, in order, in @pos (at most @max_pos of them; pointers into argv).
 * Returns 0, KVS_CLI_HELP for -h/--help, or -KVS_EPARAM after printing the
 * one line why (unknown option, missing or malformed value, out of range,
 * required option absent, too many positional words).
 */
int kvs_cli_parse(const char *cmd, int argc, char **argv,
		  struct kvs_cli_opt *opts, size_t n_opts, const char **pos,
		  size_t max_pos, size_t *n_pos);

/*
 * kvs_cli_usage - turn a kvs_cli_parse() result (or -KVS_EPARAM after a
 * check of the command's own, already reported with kvs_cli_error) into
 * an exit status: KVS_CLI_HELP prints @usage to stdout and returns
 * KVS_EXIT_OK; a failure prints the hint "try 'kvstash @cmd --help'" and
 * returns KVS_EXIT_USAGE.
 */
int kvs_cli_usage(const char *cmd, const char *usage, int parse_rc);

/*
 * kvs_cli_take_repeated - an option that may be given several times,
 * each a value or a comma-separated list: takes every --@name VALUE and
 * --@name=VALUE out of argv[1 .. argc) and joins the values with commas
 * into *@joined (malloc'd; NULL when none).  The other words, argv[0]
 * first and in order, go to @rest (argc entries), their count to
 * *@n_rest, for kvs_cli_parse.  0, or -KVS_EPARAM after printing why.
 */
int kvs_cli_take_repeated(const char *cmd, const char *name, int argc,
			  char **argv, char **rest, int *n_rest, char **joined);

/* Parses a decimal unsigned integer in [min, max]; 0 or -KVS_EPARAM
 * after printing "kvstash @cmd: --@opt: ...".  @out untouched on error. */
int kvs_cli_parse_u64(const char *cmd, const char *opt, const char *s,
		      uint64_t min, uint64_t max, uint64_t *out);

/* Parses a capacity: a decimal integer with an optional binary suffix K,
 * M, G or T (case-insensitive, optionally followed by "B" or "iB"); 0 or
 * -KVS_EPARAM after printing why. */
int kvs_cli_parse_size(const char *cmd, const char *opt, const char *s,
		       uint64_t *out);

/*
 * kvs_cli_same_file - whether paths @a and @b name one file: the same
 * device and inode where both exist, else the same directory entry (same
 * directory by device and inode, same last component).  Output paths are
 * checked with it before anything is written.
 */
bool kvs_cli_same_file(const char *a, const char *b);

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
