/*
 * cli_util.c - the running command (messages, library log lines, checked
 * stdout), option parsing, file I/O and JSON output shared by the
 * `kvstash` subcommands (contracts and conventions in cli_util.h).
 */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli_util.h"
#include "kvstash/error.h"
#include "kvstash/log.h"

/* ---- the running command, its messages and stdout --------------------- */

#define CLI_NAME_MAX 64
#define CLI_LINE_MAX 1024

static struct {
	char name[CLI_NAME_MAX]; /* "store put"; empty before kvs_cli_begin */
	pthread_mutex_t lock; /* guards the pending library error */
	char lib_error[CLI_LINE_MAX]; /* first error logged, not yet used */
	bool reported; /* an error line was printed */
	bool stdout_reported; /* a stdout write error was printed */
} cli = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* Writes "kvstash[ @cmd]: @prefix@text\n" in one call; control
 * characters (a newline in a file name) become '?' so that a message is
 * always one line. */
static void put_line(const char *cmd, const char *prefix, const char *text)
{
	char line[CLI_LINE_MAX + 128];
	size_t n;

	snprintf(line, sizeof(line), "kvstash%s%s: %s%s",
		 cmd != NULL ? " " : "", cmd != NULL ? cmd : "", prefix, text);
	for (n = 0; line[n] != '\0'; n++)
		if ((unsigned char)line[n] < 0x20 || line[n] == 0x7f)
			line[n] = '?';
	line[n] = '\n';
	fwrite(line, 1, n + 1, stderr);
}

/* The library's line without its module tag ("store: mkdir x: ..." ->
 * "mkdir x: ..."): the command's name stands in for it. */
static const char *strip_module_tag(const char *line)
{
	size_t n = strspn(line, "abcdefghijklmnopqrstuvwxyz_");

	return n > 0 && line[n] == ':' && line[n + 1] == ' ' ? line + n + 2
							     : line;
}

static void log_sink(enum kvs_log_level level, const char *line, void *arg)
{
	static const char *const tags[] = { "",
					    "warning: ", "info: ", "debug: " };

	(void)arg;
	line = strip_module_tag(line);
	if (level != KVS_LOG_ERR) {
		put_line(cli.name[0] != '\0' ? cli.name : NULL, tags[level],
			 line);
		return;
	}
	/* Keep the first: the function that first detects an error logs
	 * it, and what follows is its consequences. */
	pthread_mutex_lock(&cli.lock);
	if (cli.lib_error[0] == '\0')
		snprintf(cli.lib_error, sizeof(cli.lib_error), "%s", line);
	pthread_mutex_unlock(&cli.lock);
}

/* Moves the pending library error into @out (empty if none). */
static void take_lib_error(char *out, size_t size)
{
	pthread_mutex_lock(&cli.lock);
	snprintf(out, size, "%s", cli.lib_error);
	cli.lib_error[0] = '\0';
	pthread_mutex_unlock(&cli.lock);
}

void kvs_cli_begin(const char *name)
{
	snprintf(cli.name, sizeof(cli.name), "%s", name);
	kvs_log_set_sink(log_sink, NULL);
}

static int report_stdout(const char *cmd, int err)
{
	if (!cli.stdout_reported)
		put_line(cmd, "standard output: ", strerror(err));
	cli.stdout_reported = true;
	cli.reported = true;
	return -err;
}

int kvs_cli_flush_stdout(const char *cmd)
{
	errno = 0;
	if (fflush(stdout) != 0 || ferror(stdout))
		return report_stdout(cmd, errno != 0 ? errno : EIO);
	return 0;
}

int kvs_cli_end(int rc)
{
	const char *cmd = cli.name[0] != '\0' ? cli.name : NULL;
	char pending[CLI_LINE_MAX];
	int err = 0;

	take_lib_error(pending, sizeof(pending));
	if (pending[0] != '\0' && rc == KVS_EXIT_OK)
		put_line(cmd, "warning: ", pending);
	else if (pending[0] != '\0' && !cli.reported)
		put_line(cmd, "", pending);
	errno = 0;
	if (fflush(stdout) != 0 || ferror(stdout))
		err = errno != 0 ? errno : EIO;
	if (fclose(stdout) != 0 && err == 0)
		err = errno != 0 ? errno : EIO;
	if (err != 0 && !cli.stdout_reported)
		report_stdout(cmd, err);
	if (cli.stdout_reported && rc == KVS_EXIT_OK)
		rc = KVS_EXIT_FAIL;
	kvs_log_set_sink(NULL, NULL);
	return rc;
}

static void report_error(const char *cmd, const char *fmt, va_list ap)
	__attribute__((format(printf, 2, 0)));

static void report_error(const char *cmd, const char *fmt, va_list ap)
{
	char line[CLI_LINE_MAX];

	vsnprintf(line, sizeof(line), fmt, ap);
	put_line(cmd, "", line);
	take_lib_error(line, sizeof(line)); /* this line reports it */
	cli.reported = true;
}

void kvs_cli_error(const char *cmd, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	report_error(cmd, fmt, ap);
	va_end(ap);
}

int kvs_cli_fail(const char *cmd, int err, const char *what)
{
	char cause[CLI_LINE_MAX];

	take_lib_error(cause, sizeof(cause));
	if (cause[0] == '\0')
		snprintf(cause, sizeof(cause), "%s", kvs_strerror(err));
	if (what != NULL && strstr(cause, what) == NULL)
		kvs_cli_error(cmd, "%s: %s", what, cause);
	else
		kvs_cli_error(cmd, "%s", cause);
	return KVS_EXIT_FAIL;
}

static void print_hint(const char *cmd)
{
	char line[CLI_NAME_MAX + 32];

	snprintf(line, sizeof(line), "try 'kvstash %s%s--help'\n",
		 cmd != NULL ? cmd : "", cmd != NULL ? " " : "");
	fputs(line, stderr);
}

int kvs_cli_usage_error(const char *cmd, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	report_error(cmd, fmt, ap);
	va_end(ap);
	print_hint(cmd);
	return KVS_EXIT_USAGE;
}

/* ---- numbers ---------------------------------------------------------- */

/* Reads the decimal digits at the start of @s (at least one; leading
 * zeros are plain zeros).  0, -ERANGE past 2^64 - 1, or -EINVAL. */
static int parse_decimal(const char *s, uint64_t *out, const char **end)
{
	uint64_t v = 0;
	int rc = 0;

	if (*s < '0' || *s > '9')
		return -EINVAL;
	for (; *s >= '0' && *s <= '9'; s++) {
		unsigned digit = (unsigned)(*s - '0');

		if (v > (UINT64_MAX - digit) / 10)
			rc = -ERANGE;
		else
			v = v * 10 + digit;
	}
	*out = v;
	*end = s;
	return rc;
}

/* @v as a size: "64K", "1G" where exact, else bytes. */
static void size_text(uint64_t v, char *out, size_t size)
{
	static const char units[] = "TGMK";

	for (unsigned i = 0; i < 4; i++) {
		unsigned shift = 10u * (4 - i);

		if (v != 0 && v % (1ull << shift) == 0) {
			snprintf(out, size, "%" PRIu64 "%c", v >> shift,
				 units[i]);
			return;
		}
	}
	snprintf(out, size, "%" PRIu64, v);
}

static void number_text(uint64_t v, bool size, char *out, size_t n)
{
	if (size)
		size_text(v, out, n);
	else
		snprintf(out, n, "%" PRIu64, v);
}

/* "kvstash @cmd: --@opt: @s is out of range: must be ...", a bound that
 * does not limit left out (no upper bound where there is none but 64
 * bits, no lower bound of 0). */
static int out_of_range(const char *cmd, const char *opt, const char *s,
			uint64_t min, uint64_t max, bool size)
{
	char lo[32], hi[32];

	number_text(min, size, lo, sizeof(lo));
	number_text(max, size, hi, sizeof(hi));
	if (max == UINT64_MAX && min > 0)
		kvs_cli_error(cmd,
			      "--%s: %s is out of range: must be at least %s",
			      opt, s, lo);
	else if (min == 0)
		kvs_cli_error(cmd,
			      "--%s: %s is out of range: must be at most %s",
			      opt, s, hi);
	else
		kvs_cli_error(cmd,
			      "--%s: %s is out of range: must be between %s "
			      "and %s",
			      opt, s, lo, hi);
	return -KVS_EPARAM;
}

int kvs_cli_parse_u64(const char *cmd, const char *opt, const char *s,
		      uint64_t min, uint64_t max, uint64_t *out)
{
	const char *end;
	uint64_t v;
	int rc;

	rc = parse_decimal(s, &v, &end);
	if (rc == -EINVAL || (rc == 0 && *end != '\0')) {
		kvs_cli_error(cmd, "--%s: expected a decimal integer, got '%s'",
			      opt, s);
		return -KVS_EPARAM;
	}
	if (rc != 0 || v < min || v > max)
		return out_of_range(cmd, opt, s, min, max, false);
	*out = v;
	return 0;
}

static int suffix_shift(const char *suffix, unsigned *shift)
{
	static const char units[] = "KMGT";
	const char *unit;

	if (*suffix == '\0' || strcasecmp(suffix, "B") == 0) {
		*shift = 0;
		return 0;
	}
	unit = strchr(units, suffix[0] & ~0x20);
	if (unit == NULL || *unit == '\0')
		return -1;
	suffix++;
	if (*suffix != '\0' && strcasecmp(suffix, "B") != 0 &&
	    strcasecmp(suffix, "iB") != 0)
		return -1;
	*shift = 10u * (unsigned)(unit - units + 1);
	return 0;
}

/* A size: 0, -ERANGE past 2^64 - 1, or -EINVAL. */
static int size_value(const char *s, uint64_t *out)
{
	const char *end;
	unsigned shift;
	uint64_t v;
	int rc;

	rc = parse_decimal(s, &v, &end);
	if (rc == -EINVAL || suffix_shift(end, &shift) != 0)
		return -EINVAL;
	if (rc != 0 || v > (UINT64_MAX >> shift))
		return -ERANGE;
	*out = v << shift;
	return 0;
}

int kvs_cli_parse_size(const char *cmd, const char *opt, const char *s,
		       uint64_t *out)
{
	uint64_t v;
	int rc = size_value(s, &v);

	if (rc == -ERANGE)
		return out_of_range(cmd, opt, s, 0, UINT64_MAX, true);
	if (rc != 0) {
		kvs_cli_error(cmd,
			      "--%s: expected a size such as 4096, 64K, 1M "
			      "or 2G, got '%s'",
			      opt, s);
		return -KVS_EPARAM;
	}
	*out = v;
	return 0;
}

static int parse_double(const char *cmd, const char *opt, const char *s,
			double *out)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno != 0 || end == s || *end != '\0' || !isfinite(v)) {
		kvs_cli_error(cmd, "--%s: expected a finite number, got '%s'",
			      opt, s);
		return -KVS_EPARAM;
	}
	*out = v;
	return 0;
}

static int set_value(const char *cmd, struct kvs_cli_opt *o, const char *s)
{
	uint64_t max = o->max, v;
	int rc;

	switch (o->type) {
	case KVS_CLI_STR:
		*(const char **)o->value = s;
		return 0;
	case KVS_CLI_U32:
		if (max == 0 || max > UINT32_MAX)
			max = UINT32_MAX;
		rc = kvs_cli_parse_u64(cmd, o->name, s, o->min, max, &v);
		if (rc == 0)
			*(uint32_t *)o->value = (uint32_t)v;
		return rc;
	case KVS_CLI_U64:
		rc = kvs_cli_parse_u64(cmd, o->name, s, o->min,
				       max == 0 ? UINT64_MAX : max, &v);
		if (rc == 0)
			*(uint64_t *)o->value = v;
		return rc;
	case KVS_CLI_SIZE:
		if (max == 0)
			max = UINT64_MAX;
		rc = size_value(s, &v);
		if (rc == 0 && (v < o->min || v > max))
			rc = -ERANGE;
		if (rc == -ERANGE)
			return out_of_range(cmd, o->name, s, o->min, max, true);
		if (rc != 0)
			return kvs_cli_parse_size(cmd, o->name, s, &v);
		*(uint64_t *)o->value = v;
		return 0;
	case KVS_CLI_DOUBLE:
		return parse_double(cmd, o->name, s, (double *)o->value);
	case KVS_CLI_FLAG:
		break;
	}
	return -KVS_EPARAM;
}

static struct kvs_cli_opt *find_opt(struct kvs_cli_opt *opts, size_t n_opts,
				    const char *name, size_t name_len)
{
	for (size_t i = 0; i < n_opts; i++)
		if (strlen(opts[i].name) == name_len &&
		    strncmp(opts[i].name, name, name_len) == 0)
			return &opts[i];
	return NULL;
}

/* Handles argv[*i], an option word "--name[=value]"; may consume the next
 * word as the value. */
static int parse_option(const char *cmd, int argc, char **argv, int *i,
			struct kvs_cli_opt *opts, size_t n_opts)
{
	const char *name = argv[*i] + 2;
	const char *eq = strchr(name, '=');
	size_t name_len = eq != NULL ? (size_t)(eq - name) : strlen(name);
	struct kvs_cli_opt *o = find_opt(opts, n_opts, name, name_len);
	const char *value;

	if (o == NULL) {
		kvs_cli_error(cmd, "unknown option '%s'", argv[*i]);
		return -KVS_EPARAM;
	}
	if (o->seen) {
		kvs_cli_error(cmd, "--%s given twice", o->name);
		return -KVS_EPARAM;
	}
	o->seen = true;
	if (o->type == KVS_CLI_FLAG) {
		if (eq != NULL) {
			kvs_cli_error(cmd, "--%s takes no value", o->name);
			return -KVS_EPARAM;
		}
		*(bool *)o->value = true;
		return 0;
	}
	if (eq != NULL) {
		value = eq + 1;
	} else if (*i + 1 < argc) {
		value = argv[++*i];
	} else {
		kvs_cli_error(cmd, "--%s needs a value", o->name);
		return -KVS_EPARAM;
	}
	return set_value(cmd, o, value);
}

int kvs_cli_parse(const char *cmd, int argc, char **argv,
		  struct kvs_cli_opt *opts, size_t n_opts, const char **pos,
		  size_t max_pos, size_t *n_pos)
{
	bool options_done = false;
	size_t count = 0;
	int rc;

	for (int i = 1; i < argc; i++) {
		const char *arg = argv[i];

		if (!options_done &&
		    (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0))
			return KVS_CLI_HELP;
		if (!options_done && strcmp(arg, "--") == 0) {
			options_done = true;
			continue;
		}
		if (!options_done && arg[0] == '-' && arg[1] == '-') {
			rc = parse_option(cmd, argc, argv, &i, opts, n_opts);
			if (rc != 0)
				return rc;
			continue;
		}
		if (!options_done && arg[0] == '-' && arg[1] != '\0') {
			kvs_cli_error(cmd, "unknown option '%s'", arg);
			return -KVS_EPARAM;
		}
		if (count == max_pos) {
			kvs_cli_error(cmd, "unexpected argument '%s'", arg);
			return -KVS_EPARAM;
		}
		pos[count++] = arg;
	}
	for (size_t k = 0; k < n_opts; k++) {
		if (opts[k].required && !opts[k].seen) {
			kvs_cli_error(cmd, "--%s is required", opts[k].name);
			return -KVS_EPARAM;
		}
	}
	if (n_pos != NULL)
		*n_pos = count;
	return 0;
}

int kvs_cli_usage(const char *cmd, const char *usage, int parse_rc)
{
	if (parse_rc == KVS_CLI_HELP) {
		fputs(usage, stdout);
		return KVS_EXIT_OK;
	}
	print_hint(cmd);
	return KVS_EXIT_USAGE;
}

bool kvs_cli_same_file(const char *a, const char *b)
{
	struct stat sa, sb;
	char *da, *db, *ba, *bb;
	bool same = false;
	int ra, rb;

	if (strcmp(a, b) == 0)
		return true;
	ra = stat(a, &sa);
	rb = stat(b, &sb);
	if (ra == 0 || rb == 0)
		return ra == 0 && rb == 0 && sa.st_dev == sb.st_dev &&
		       sa.st_ino == sb.st_ino;
	/* Neither exists yet: one entry of one directory? */
	da = strdup(a);
	db = strdup(b);
	ba = strdup(a);
	bb = strdup(b);
	if (da != NULL && db != NULL && ba != NULL && bb != NULL &&
	    strcmp(basename(ba), basename(bb)) == 0 &&
	    stat(dirname(da), &sa) == 0 && stat(dirname(db), &sb) == 0)
		same = sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
	free(da);
	free(db);
	free(ba);
	free(bb);
	return same;
}

/* Reads until EOF into a growing buffer (files whose size fstat cannot
 * tell, and files that change size while read). */
static int read_all(int fd, size_t hint, uint8_t **out, size_t *out_len)
{
	size_t cap = hint + 1, len = 0;
	uint8_t *buf = malloc(cap);
	uint8_t *grown;
	ssize_t n;

	if (buf == NULL)
		return -ENOMEM;
	for (;;) {
		if (len == cap) {
			grown = realloc(buf, cap * 2);
			if (grown == NULL)
				goto fail_buf;
			buf = grown;
			cap *= 2;
		}
		n = read(fd, buf + len, cap - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			goto fail_buf;
		if (n == 0)
			break;
		len += (size_t)n;
	}
	*out = buf;
	*out_len = len;
	return 0;

fail_buf:
	n = errno != 0 ? -errno : -ENOMEM;
	free(buf);
	return (int)n;
}

int kvs_cli_read_file(const char *cmd, const char *path, uint8_t **out,
		      size_t *out_len)
{
	struct stat st;
	size_t hint = 0;
	int fd, rc;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		rc = -errno;
		kvs_cli_error(cmd, "%s: %s", path, strerror(-rc));
		return rc;
	}
	if (fstat(fd, &st) != 0) {
		rc = -errno;
		kvs_cli_error(cmd, "%s: %s", path, strerror(-rc));
		close(fd);
		return rc;
	}
	if (S_ISDIR(st.st_mode)) {
		kvs_cli_error(cmd, "%s: is a directory", path);
		close(fd);
		return -EISDIR;
	}
	if (S_ISREG(st.st_mode) && st.st_size > 0)
		hint = (size_t)st.st_size;
	errno = 0;
	rc = read_all(fd, hint, out, out_len);
	if (rc != 0)
		kvs_cli_error(cmd, "%s: read: %s", path, strerror(-rc));
	close(fd);
	return rc;
}

static int write_all(int fd, const uint8_t *buf, size_t len)
{
	while (len > 0) {
		ssize_t n = write(fd, buf, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

/* open(2) of @path for writing; the descriptor or -errno after printing
 * why, about @shown (the name the user gave). */
static int open_for_write(const char *cmd, const char *path, const char *shown,
			  int flags)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | flags, 0644);

	if (fd < 0) {
		fd = -errno;
		kvs_cli_error(cmd, "%s: %s", shown, strerror(-fd));
	}
	return fd;
}

static int write_in_place(const char *cmd, const char *path, const void *buf,
			  size_t len)
{
	int fd, rc;

	fd = open_for_write(cmd, path, path, O_TRUNC);
	if (fd < 0)
		return fd;
	rc = write_all(fd, buf, len);
	if (close(fd) != 0 && rc == 0)
		rc = -errno;
	if (rc != 0)
		kvs_cli_error(cmd, "%s: write: %s", path, strerror(-rc));
	return rc;
}

int kvs_cli_write_file(const char *cmd, const char *path, const void *buf,
		       size_t len)
{
	struct stat st;
	char *tmp;
	int fd, rc;

	if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
		return write_in_place(cmd, path, buf, len);
	if (asprintf(&tmp, "%s.tmp.%ld", path, (long)getpid()) < 0) {
		kvs_cli_error(cmd, "%s: out of memory", path);
		return -ENOMEM;
	}
	fd = open_for_write(cmd, tmp, path, O_EXCL);
	if (fd < 0) {
		rc = fd;
		goto free_tmp;
	}
	rc = write_all(fd, buf, len);
	if (rc == 0 && fsync(fd) != 0)
		rc = -errno;
	if (close(fd) != 0 && rc == 0)
		rc = -errno;
	if (rc == 0 && rename(tmp, path) != 0)
		rc = -errno;
	if (rc != 0) {
		kvs_cli_error(cmd, "%s: write: %s", path, strerror(-rc));
		unlink(tmp);
	}
free_tmp:
	free(tmp);
	return rc;
}

const char *kvs_cli_human_bytes(double bytes, char *out, size_t out_size)
{
	static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	unsigned u = 0;

	while (bytes >= 1024.0 && u + 1 < sizeof(units) / sizeof(units[0])) {
		bytes /= 1024.0;
		u++;
	}
	if (u == 0)
		snprintf(out, out_size, "%.0f B", bytes);
	else
		snprintf(out, out_size, "%.*f %s", bytes < 100.0 ? 2 : 1, bytes,
			 units[u]);
	return out;
}

/* ---- JSON ------------------------------------------------------------ */

void kvs_cli_json_init(struct kvs_cli_json *j, FILE *f)
{
	memset(j, 0, sizeof(*j));
	j->f = f;
}

static void json_string(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s != '\0'; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c == '\n')
			fputs("\\n", f);
		else if (c < 0x20)
			fprintf(f, "\\u%04x", c);
		else
			fputc(c, f);
	}
	fputc('"', f);
}

/* Separator, newline and indent before a new member, then its key. */
static void json_member(struct kvs_cli_json *j, const char *key)
{
	if (j->depth > 0) {
		if (j->has_items[j->depth - 1])
			fputc(',', j->f);
		j->has_items[j->depth - 1] = true;
		fprintf(j->f, "\n%*s", (int)(2 * j->depth), "");
	}
	if (key != NULL) {
		json_string(j->f, key);
		fputs(": ", j->f);
	}
}

static void json_open(struct kvs_cli_json *j, const char *key, char bracket)
{
	/* Nesting depth is fixed by the caller's code, not by input. */
	assert(j->depth < KVS_CLI_JSON_DEPTH);
	json_member(j, key);
	fputc(bracket, j->f);
	j->has_items[j->depth] = false;
	j->depth++;
}

static void json_close(struct kvs_cli_json *j, char bracket)
{
	j->depth--;
	if (j->has_items[j->depth])
		fprintf(j->f, "\n%*s", (int)(2 * j->depth), "");
	fputc(bracket, j->f);
}

void kvs_cli_json_object_begin(struct kvs_cli_json *j, const char *key)
{
	json_open(j, key, '{');
}

void kvs_cli_json_object_end(struct kvs_cli_json *j)
{
	json_close(j, '}');
}

void kvs_cli_json_array_begin(struct kvs_cli_json *j, const char *key)
{
	json_open(j, key, '[');
}

void kvs_cli_json_array_end(struct kvs_cli_json *j)
{
	json_close(j, ']');
}

void kvs_cli_json_str(struct kvs_cli_json *j, const char *key, const char *s)
{
	json_member(j, key);
	if (s == NULL)
		fputs("null", j->f);
	else
		json_string(j->f, s);
}

void kvs_cli_json_u64(struct kvs_cli_json *j, const char *key, uint64_t v)
{
	json_member(j, key);
	fprintf(j->f, "%" PRIu64, v);
}

void kvs_cli_json_double(struct kvs_cli_json *j, const char *key, double v)
{
	char text[32];

	json_member(j, key);
	if (!isfinite(v)) {
		fputs("null", j->f);
		return;
	}
	snprintf(text, sizeof(text), "%.15g", v);
	if (strtod(text, NULL) != v)
		snprintf(text, sizeof(text), "%.17g", v);
	fputs(text, j->f);
}

void kvs_cli_json_bool(struct kvs_cli_json *j, const char *key, bool v)
{
	json_member(j, key);
	fputs(v ? "true" : "false", j->f);
}

void kvs_cli_json_finish(struct kvs_cli_json *j)
{
	fputc('\n', j->f);
}

int kvs_cli_take_repeated(const char *cmd, const char *name, int argc,
			  char **argv, char **rest, int *n_rest, char **joined)
{
	size_t len = 0, nlen = strlen(name);
	char *list = NULL;

	*n_rest = 0;
	for (int i = 0; i < argc; i++) {
		const char *v = NULL;
		char *grown;

		if (strcmp(argv[i], "--") == 0) {
			while (i < argc)
				rest[(*n_rest)++] = argv[i++];
			break;
		}
		if (i > 0 && strncmp(argv[i], "--", 2) == 0 &&
		    strncmp(argv[i] + 2, name, nlen) == 0 &&
		    argv[i][2 + nlen] == '\0') {
			if (i + 1 == argc) {
				free(list);
				kvs_cli_error(cmd, "--%s: missing value", name);
				return -KVS_EPARAM;
			}
			v = argv[++i];
		} else if (i > 0 && strncmp(argv[i], "--", 2) == 0 &&
			   strncmp(argv[i] + 2, name, nlen) == 0 &&
			   argv[i][2 + nlen] == '=') {
			v = argv[i] + 3 + nlen;
		} else {
			rest[(*n_rest)++] = argv[i];
			continue;
		}
		grown = realloc(list, len + strlen(v) + 2);
		if (!grown) {
			free(list);
			return -ENOMEM;
		}
		list = grown;
		len += (size_t)sprintf(list + len, "%s%s", len ? "," : "", v);
	}
	*joined = list;
	return 0;
}
