/*
 * cli_util.c - option parsing, file I/O, messages and JSON output shared by
 * the `kvstash` subcommands (contracts in cli_util.h).
 */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli_util.h"
#include "kvstash/error.h"

void kvs_cli_error(const char *cmd, const char *fmt, ...)
{
	char line[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	fprintf(stderr, "kvstash %s: %s\n", cmd, line);
}

int kvs_cli_parse_u64(const char *cmd, const char *opt, const char *s,
		      uint64_t min, uint64_t max, uint64_t *out)
{
	unsigned long long v;
	char *end;

	/* strtoull accepts a sign and leading blanks; an integer option
	 * does not. */
	if (s[0] < '0' || s[0] > '9') {
		kvs_cli_error(cmd,
			      "--%s: expected an unsigned integer, "
			      "got '%s'",
			      opt, s);
		return -KVS_EPARAM;
	}
	errno = 0;
	v = strtoull(s, &end, 0);
	if (errno != 0 || *end != '\0') {
		kvs_cli_error(cmd,
			      "--%s: expected an unsigned integer, "
			      "got '%s'",
			      opt, s);
		return -KVS_EPARAM;
	}
	if (v < min || v > max) {
		kvs_cli_error(cmd,
			      "--%s: %llu is out of range [%" PRIu64
			      ", %" PRIu64 "]",
			      opt, v, min, max);
		return -KVS_EPARAM;
	}
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
	if (unit == NULL)
		return -1;
	suffix++;
	if (*suffix != '\0' && strcasecmp(suffix, "B") != 0 &&
	    strcasecmp(suffix, "iB") != 0)
		return -1;
	*shift = 10u * (unsigned)(unit - units + 1);
	return 0;
}

int kvs_cli_parse_size(const char *cmd, const char *opt, const char *s,
		       uint64_t *out)
{
	unsigned long long v;
	unsigned shift;
	char *end;

	if (s[0] < '0' || s[0] > '9')
		goto malformed;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno != 0 || suffix_shift(end, &shift) != 0)
		goto malformed;
	if (shift != 0 && v > (UINT64_MAX >> shift)) {
		kvs_cli_error(cmd, "--%s: '%s' does not fit in 64 bits", opt,
			      s);
		return -KVS_EPARAM;
	}
	*out = (uint64_t)v << shift;
	return 0;

malformed:
	kvs_cli_error(cmd,
		      "--%s: expected a size such as 4096, 64K, 1M or 2G, "
		      "got '%s'",
		      opt, s);
	return -KVS_EPARAM;
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
		rc = kvs_cli_parse_size(cmd, o->name, s, &v);
		if (rc == 0 && (v < o->min || (max != 0 && v > max))) {
			kvs_cli_error(cmd,
				      "--%s: %s is out of range [%" PRIu64
				      ", %" PRIu64 "] bytes",
				      o->name, s, o->min, max);
			rc = -KVS_EPARAM;
		}
		if (rc == 0)
			*(uint64_t *)o->value = v;
		return rc;
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

int kvs_cli_usage(const char *usage, int parse_rc)
{
	if (parse_rc == KVS_CLI_HELP) {
		fputs(usage, stdout);
		return KVS_EXIT_OK;
	}
	fputs(usage, stderr);
	return KVS_EXIT_USAGE;
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

/* open(2) for writing; the descriptor or -errno after printing why. */
static int open_for_write(const char *cmd, const char *path, int flags)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | flags, 0644);

	if (fd < 0) {
		fd = -errno;
		kvs_cli_error(cmd, "%s: %s", path, strerror(-fd));
	}
	return fd;
}

static int write_in_place(const char *cmd, const char *path, const void *buf,
			  size_t len)
{
	int fd, rc;

	fd = open_for_write(cmd, path, O_TRUNC);
	if (fd < 0)
		return fd;
	rc = write_all(fd, buf, len);
	if (rc != 0)
		kvs_cli_error(cmd, "%s: write: %s", path, strerror(-rc));
	close(fd);
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
	fd = open_for_write(cmd, tmp, O_EXCL);
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
