/*
 * trace_load.c - reading serving traces (trace.h): the file is read whole,
 * cut into lines, each line parsed (JSON through jansson, CSV by the
 * fixed form of docs/REPLAY.md) into one request, whose hash ids are
 * interned as nodes of the prefix tree (an open-addressing table keyed by
 * (parent node, hash id)).  Span ids are computed afterwards, once per
 * node, in node order (parents first).
 */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli_util.h"
#include "kvstash/error.h"
#include "trace.h"

#define REPORT_MAX 10 /* skipped lines reported one by one */
#define WHY_LEN 200

static const char csv_header[] = "timestamp,input_length,output_length,"
				 "hash_ids";

int trace_format_parse(const char *s, enum trace_format *out)
{
	if (strcmp(s, "auto") == 0)
		*out = TRACE_FORMAT_AUTO;
	else if (strcmp(s, "jsonl") == 0)
		*out = TRACE_FORMAT_JSONL;
	else if (strcmp(s, "csv") == 0)
		*out = TRACE_FORMAT_CSV;
	else
		return -1;
	return 0;
}

/* ---- growable arrays and the node table ------------------------------ */

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
	size_t n = *cap ? *cap : 64;
	void *q;

	if (need <= *cap)
		return 0;
	while (n < need)
		n *= 2;
	q = realloc(*p, n * elem);
	if (q == NULL)
		return -ENOMEM;
	*p = q;
	*cap = n;
	return 0;
}

struct loader {
	const struct trace_read_opts *opts;
	const char *path;
	struct trace *t;
	size_t req_cap, chain_cap, node_cap;
	uint32_t *slots; /* node index + 1, 0 = empty */
	size_t n_slots; /* power of two */
	uint64_t *ids; /* hash ids of the line being parsed */
	size_t ids_cap, n_ids;
	char why[WHY_LEN];
};

static uint64_t mix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static uint64_t node_hash(uint32_t parent, uint64_t hash_id)
{
	return mix64(hash_id ^ mix64((uint64_t)parent + 1));
}

static int table_grow(struct loader *l)
{
	size_t n = l->n_slots ? l->n_slots * 2 : 1024;
	uint32_t *slots = calloc(n, sizeof(*slots));

	if (slots == NULL)
		return -ENOMEM;
	for (size_t i = 0; i < l->t->n_nodes; i++) {
		const struct trace_node *nd = &l->t->nodes[i];
		size_t at = node_hash(nd->parent, nd->hash_id) & (n - 1);

		while (slots[at] != 0)
			at = (at + 1) & (n - 1);
		slots[at] = (uint32_t)i + 1;
	}
	free(l->slots);
	l->slots = slots;
	l->n_slots = n;
	return 0;
}

/* The node (@parent, @hash_id), created if new. */
static int intern(struct loader *l, uint32_t parent, uint64_t hash_id,
		  uint32_t *out)
{
	struct trace *t = l->t;
	size_t at;
	int rc;

	if (t->n_nodes >= UINT32_MAX - 1)
		return -ERANGE;
	if ((t->n_nodes + 1) * 2 > l->n_slots) {
		rc = table_grow(l);
		if (rc)
			return rc;
	}
	at = node_hash(parent, hash_id) & (l->n_slots - 1);
	while (l->slots[at] != 0) {
		const struct trace_node *nd = &t->nodes[l->slots[at] - 1];

		if (nd->parent == parent && nd->hash_id == hash_id) {
			*out = l->slots[at] - 1;
			return 0;
		}
		at = (at + 1) & (l->n_slots - 1);
	}
	rc = grow((void **)&t->nodes, &l->node_cap, t->n_nodes + 1,
		  sizeof(*t->nodes));
	if (rc)
		return rc;
	t->nodes[t->n_nodes].hash_id = hash_id;
	t->nodes[t->n_nodes].parent = parent;
	t->nodes[t->n_nodes].depth =
		parent == TRACE_NO_NODE ? 0 : t->nodes[parent].depth + 1;
	l->slots[at] = (uint32_t)t->n_nodes + 1;
	*out = (uint32_t)t->n_nodes++;
	return 0;
}

static int push_id(struct loader *l, uint64_t id)
{
	int rc = grow((void **)&l->ids, &l->ids_cap, l->n_ids + 1,
		      sizeof(*l->ids));

	if (rc == 0)
		l->ids[l->n_ids++] = id;
	return rc;
}

/* Appends the parsed request (its hash ids in l->ids). */
static int add_request(struct loader *l, const struct trace_request *r)
{
	struct trace *t = l->t;
	uint32_t parent = TRACE_NO_NODE, node;
	uint64_t want;
	int rc;

	if (l->n_ids > UINT32_MAX)
		return -ERANGE;
	rc = grow((void **)&t->requests, &l->req_cap, t->n_requests + 1,
		  sizeof(*t->requests));
	if (rc == 0)
		rc = grow((void **)&t->chain, &l->chain_cap,
			  t->n_chain + l->n_ids, sizeof(*t->chain));
	if (rc)
		return rc;
	for (size_t i = 0; i < l->n_ids; i++) {
		rc = intern(l, parent, l->ids[i], &node);
		if (rc)
			return rc;
		t->chain[t->n_chain + i] = node;
		parent = node;
	}
	t->requests[t->n_requests] = *r;
	t->requests[t->n_requests].first = t->n_chain;
	t->requests[t->n_requests].n_blocks = (uint32_t)l->n_ids;
	t->n_requests++;
	t->n_chain += l->n_ids;
	if (l->n_ids > t->max_blocks)
		t->max_blocks = (uint32_t)l->n_ids;
	want = (r->input_length + l->opts->block_tokens - 1) /
	       l->opts->block_tokens;
	if (want != l->n_ids)
		t->length_mismatches++;
	return 0;
}

static int why(struct loader *l, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static int why(struct loader *l, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(l->why, sizeof(l->why), fmt, ap);
	va_end(ap);
	return -KVS_EPARAM;
}

/* ---- JSON lines ------------------------------------------------------ */

static int json_u64(struct loader *l, json_t *obj, const char *key,
		    bool required, uint64_t *out)
{
	json_t *v = json_object_get(obj, key);

	if (v == NULL) {
		*out = 0;
		return required ? why(l, "%s: missing", key) : 0;
	}
	if (!json_is_integer(v) || json_integer_value(v) < 0)
		return why(l, "%s: not a non-negative integer", key);
	*out = (uint64_t)json_integer_value(v);
	return 0;
}

static int parse_jsonl(struct loader *l, const char *line, size_t len,
		       struct trace_request *r)
{
	json_error_t jerr;
	json_t *obj = json_loadb(line, len, JSON_REJECT_DUPLICATES, &jerr);
	json_t *ids, *ts;
	size_t i;
	int rc = 0;

	if (obj == NULL)
		return why(l, "not JSON: %s", jerr.text);
	if (!json_is_object(obj)) {
		rc = why(l, "not a JSON object");
		goto out;
	}
	ts = json_object_get(obj, "timestamp");
	if (ts != NULL && !json_is_number(ts)) {
		rc = why(l, "timestamp: not a number");
		goto out;
	}
	r->timestamp_ms = ts != NULL ? json_number_value(ts) : 0.0;
	rc = json_u64(l, obj, "input_length", true, &r->input_length);
	if (rc == 0)
		rc = json_u64(l, obj, "output_length", false,
			      &r->output_length);
	if (rc)
		goto out;
	ids = json_object_get(obj, "hash_ids");
	if (ids == NULL || !json_is_array(ids)) {
		rc = why(l, "hash_ids: %s",
			 ids == NULL ? "missing" : "not an array");
		goto out;
	}
	l->n_ids = 0;
	for (i = 0; i < json_array_size(ids); i++) {
		json_t *v = json_array_get(ids, i);

		if (!json_is_integer(v) || json_integer_value(v) < 0) {
			rc = why(l, "hash_ids[%zu]: not a non-negative integer",
				 i);
			goto out;
		}
		rc = push_id(l, (uint64_t)json_integer_value(v));
		if (rc)
			goto out;
	}
out:
	json_decref(obj);
	return rc;
}

/* ---- CSV ------------------------------------------------------------- */

/* The text between @b and @e without surrounding blanks, NUL-ended in
 * @out (of @n bytes); -1 if it does not fit. */
static int field(const char *b, const char *e, char *out, size_t n)
{
	while (b < e && (*b == ' ' || *b == '\t'))
		b++;
	while (e > b && (e[-1] == ' ' || e[-1] == '\t'))
		e--;
	if ((size_t)(e - b) >= n)
		return -1;
	memcpy(out, b, (size_t)(e - b));
	out[e - b] = '\0';
	return 0;
}

static int csv_u64(struct loader *l, const char *name, const char *s,
		   uint64_t *out)
{
	char *end;

	if (s[0] < '0' || s[0] > '9')
		return why(l, "%s: not a non-negative integer", name);
	errno = 0;
	*out = strtoull(s, &end, 10);
	if (errno || *end != '\0')
		return why(l, "%s: not a non-negative integer", name);
	return 0;
}

static int parse_csv_ids(struct loader *l, const char *b, const char *e)
{
	const char *p;

	while (b < e && (*b == ' ' || *b == '\t' || *b == '"' || *b == '['))
		b++;
	while (e > b &&
	       (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '"' || e[-1] == ']'))
		e--;
	l->n_ids = 0;
	for (p = b; p < e;) {
		uint64_t v = 0;
		const char *start;

		if (*p == ' ' || *p == ',' || *p == ';' || *p == '\t') {
			p++;
			continue;
		}
		start = p;
		while (p < e && *p >= '0' && *p <= '9') {
			if (v > (UINT64_MAX - 9) / 10)
				return why(l, "hash_ids: id too large");
			v = v * 10 + (uint64_t)(*p++ - '0');
		}
		if (p == start || (p < e && *p != ' ' && *p != ',' &&
				   *p != ';' && *p != '\t'))
			return why(l, "hash_ids: expected decimal ids "
				      "separated by spaces, ',' or ';'");
		if (push_id(l, v))
			return -ENOMEM;
	}
	return 0;
}

static int parse_csv(struct loader *l, const char *line, size_t len,
		     struct trace_request *r)
{
	const char *end = line + len, *c[3], *p = line;
	char text[64], *tail;
	int rc;

	for (int i = 0; i < 3; i++) {
		c[i] = memchr(p, ',', (size_t)(end - p));
		if (c[i] == NULL)
			return why(l, "expected 4 fields (%s)", csv_header);
		p = c[i] + 1;
	}
	if (field(line, c[0], text, sizeof(text)) != 0 || text[0] == '\0')
		return why(l, "timestamp: not a number");
	errno = 0;
	r->timestamp_ms = strtod(text, &tail);
	if (errno || *tail != '\0' || !isfinite(r->timestamp_ms))
		return why(l, "timestamp: not a number");
	if (field(c[0] + 1, c[1], text, sizeof(text)) != 0)
		return why(l, "input_length: not a non-negative integer");
	rc = csv_u64(l, "input_length", text, &r->input_length);
	if (rc)
		return rc;
	if (field(c[1] + 1, c[2], text, sizeof(text)) != 0)
		return why(l, "output_length: not a non-negative integer");
	rc = csv_u64(l, "output_length", text, &r->output_length);
	if (rc)
		return rc;
	return parse_csv_ids(l, c[2] + 1, end);
}

static bool is_csv_header(const char *line, size_t len)
{
	char text[128];
	size_t n = 0;

	for (size_t i = 0; i < len && n + 1 < sizeof(text); i++)
		if (line[i] != ' ' && line[i] != '\t')
			text[n++] = line[i];
	text[n] = '\0';
	return strcasecmp(text, csv_header) == 0;
}

/* ---- the file -------------------------------------------------------- */

static bool blank(const char *line, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (line[i] != ' ' && line[i] != '\t')
			return false;
	return true;
}

static enum trace_format pick_format(const char *path, enum trace_format f)
{
	size_t n = strlen(path);

	if (f != TRACE_FORMAT_AUTO)
		return f;
	if (n >= 4 && strcasecmp(path + n - 4, ".csv") == 0)
		return TRACE_FORMAT_CSV;
	return TRACE_FORMAT_JSONL;
}

static int parse_lines(struct loader *l, const char *text, size_t len)
{
	enum trace_format f = pick_format(l->path, l->opts->format);
	const char *cmd = l->opts->cmd;
	bool header_seen = false;
	uint32_t lineno = 0;
	size_t at = 0;
	int rc;

	while (at < len) {
		const char *line = text + at;
		const char *nl = memchr(line, '\n', len - at);
		size_t n = nl ? (size_t)(nl - line) : len - at;
		struct trace_request r = { 0 };

		at += n + (nl ? 1 : 0);
		if (lineno == UINT32_MAX) {
			kvs_cli_error(cmd, "%s: more than %u lines", l->path,
				      UINT32_MAX);
			return -KVS_EPARAM;
		}
		lineno++;
		if (n > 0 && line[n - 1] == '\r')
			n--;
		if (blank(line, n))
			continue;
		if (f == TRACE_FORMAT_CSV && !header_seen) {
			if (!is_csv_header(line, n)) {
				kvs_cli_error(cmd,
					      "%s:%u: expected the header "
					      "'%s'",
					      l->path, lineno, csv_header);
				return -KVS_EPARAM;
			}
			header_seen = true;
			continue;
		}
		r.line = lineno;
		rc = f == TRACE_FORMAT_CSV ? parse_csv(l, line, n, &r)
					   : parse_jsonl(l, line, n, &r);
		if (rc == -ENOMEM)
			return rc;
		if (rc == 0) {
			rc = add_request(l, &r);
			if (rc == -ERANGE)
				rc = why(l, "too many blocks");
		}
		if (rc == -ENOMEM)
			return rc;
		if (rc == 0)
			continue;
		if (!l->opts->skip_malformed) {
			kvs_cli_error(cmd, "%s:%u: %s", l->path, lineno,
				      l->why);
			return rc;
		}
		if (l->t->skipped_lines++ < REPORT_MAX)
			kvs_cli_error(cmd, "%s:%u: %s (line skipped)", l->path,
				      lineno, l->why);
	}
	if (l->t->skipped_lines > REPORT_MAX)
		kvs_cli_error(cmd,
			      "%s: %" PRIu64 " more malformed lines skipped",
			      l->path, l->t->skipped_lines - REPORT_MAX);
	return 0;
}

int trace_read(const char *path, const struct trace_read_opts *opts,
	       struct trace *out)
{
	struct trace t = { 0 };
	struct loader l = { .opts = opts, .path = path, .t = &t };
	uint8_t *text;
	size_t len;
	int rc;

	rc = kvs_cli_read_file(opts->cmd, path, &text, &len);
	if (rc)
		return rc;
	rc = parse_lines(&l, (const char *)text, len);
	if (rc == -ENOMEM)
		kvs_cli_error(opts->cmd, "%s: out of memory", path);
	if (rc == 0 && t.n_requests == 0) {
		kvs_cli_error(opts->cmd, "%s: no requests", path);
		rc = -KVS_EPARAM;
	}
	free(text);
	free(l.slots);
	free(l.ids);
	if (rc) {
		trace_free(&t);
		return rc;
	}
	*out = t;
	return 0;
}

/* ---- span ids -------------------------------------------------------- */

/* Token @i of the block named @hash_id (a stand-in for its text: equal
 * names give equal tokens, as equal names mean equal text). */
static uint32_t synth_token(uint64_t hash_id, uint32_t i)
{
	return (uint32_t)(mix64(mix64(hash_id) + i) >> 32);
}

int trace_name_spans(struct trace *t, const char *ns,
		     const uint8_t model_fp[KVS_ID_SIZE], uint32_t block_tokens,
		     uint32_t span_tokens)
{
	uint32_t per = block_tokens / span_tokens;
	uint8_t(*ids)[KVS_ID_SIZE];
	uint32_t *tokens;
	int rc = 0;

	if (span_tokens == 0 || block_tokens % span_tokens != 0)
		return -KVS_EPARAM;
	ids = malloc(t->n_nodes * per * sizeof(*ids));
	tokens = malloc(block_tokens * sizeof(*tokens));
	if (ids == NULL || tokens == NULL) {
		rc = -ENOMEM;
		goto out;
	}
	for (size_t n = 0; n < t->n_nodes && rc == 0; n++) {
		const struct trace_node *nd = &t->nodes[n];
		const uint8_t *parent =
			nd->parent == TRACE_NO_NODE
				? NULL
				: ids[(size_t)nd->parent * per + per - 1];

		for (uint32_t i = 0; i < block_tokens; i++)
			tokens[i] = synth_token(nd->hash_id, i);
		for (uint32_t s = 0; s < per && rc == 0; s++) {
			rc = kvs_span_id(ns, model_fp, parent,
					 tokens + (size_t)s * span_tokens,
					 span_tokens, ids[n * per + s]);
			parent = ids[n * per + s];
		}
	}
out:
	free(tokens);
	if (rc) {
		free(ids);
		return rc;
	}
	free(t->span_ids);
	t->span_ids = ids;
	t->spans_per_block = per;
	t->span_tokens = span_tokens;
	return 0;
}

void trace_free(struct trace *t)
{
	free(t->requests);
	free(t->chain);
	free(t->nodes);
	free(t->span_ids);
	memset(t, 0, sizeof(*t));
}
