/*
 * trace.h - serving traces for `kvstash bench trace`: the Mooncake
 * JSON-lines form and the CSV form of docs/REPLAY.md read into requests
 * whose prompts are chains of blocks, each distinct prefix interned once
 * as a node of a tree, and every node's spans named with the project's
 * span ids (kvs_span_id over synthesized token ids).
 *
 * A trace names a request's prompt as hash ids, one per block of
 * block_tokens tokens; the i-th id stands for the prompt's first
 * (i+1) x block_tokens tokens.  A node is (parent node, hash id), so two
 * requests share a node exactly when they share that whole prefix.
 */
#ifndef KVSTASH_TOOLS_TRACE_H
#define KVSTASH_TOOLS_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvstash/kvformat.h"

#define TRACE_NO_NODE UINT32_MAX

struct trace_request {
	double timestamp_ms; /* 0 when the line has none */
	uint64_t input_length; /* prompt tokens */
	uint64_t output_length; /* 0 when the line has none */
	size_t first; /* index of its first block in trace.chain */
	uint32_t n_blocks;
	uint32_t line; /* 1-based line in the file */
};

struct trace_node {
	uint64_t hash_id;
	uint32_t parent; /* TRACE_NO_NODE for a first block */
	uint32_t depth; /* 0 for a first block */
};

struct trace {
	struct trace_request *requests;
	size_t n_requests;
	uint32_t *chain; /* node of every block of every request, in order */
	size_t n_chain;
	struct trace_node *nodes; /* a parent comes before its children */
	size_t n_nodes;
	uint32_t max_blocks; /* blocks of the longest request */
	uint64_t skipped_lines; /* malformed lines skipped */
	uint64_t length_mismatches; /* requests whose hash ids do not number
				       ceil(input_length / block_tokens) */
	/* After trace_name_spans: spans_per_block ids per node, in span
	 * order; a node's first span's parent is its parent node's last. */
	uint32_t spans_per_block;
	uint32_t span_tokens;
	uint8_t (*span_ids)[KVS_ID_SIZE];
};

enum trace_format {
	TRACE_FORMAT_AUTO = 0, /* ".csv" -> CSV, else JSON lines */
	TRACE_FORMAT_JSONL,
	TRACE_FORMAT_CSV,
};

struct trace_read_opts {
	const char *cmd; /* for messages: "kvstash <cmd>: ..." */
	enum trace_format format;
	uint32_t block_tokens;
	bool skip_malformed; /* else the first malformed line is fatal */
};

/* Parses "jsonl", "csv" or "auto"; 0 or -1. */
int trace_format_parse(const char *s, enum trace_format *out);

/*
 * trace_read - read the trace at @path.  A malformed line is reported as
 * "PATH:LINE: cause" and is fatal, or with skip_malformed skipped and
 * counted (the first ten reported).  Returns 0 and *@out (release with
 * trace_free), or a negative error after printing why (-KVS_EPARAM for a
 * malformed or empty trace, -errno for I/O).
 */
int trace_read(const char *path, const struct trace_read_opts *opts,
	       struct trace *out);

/*
 * trace_name_spans - name every node's block_tokens / span_tokens spans:
 * token i of the block named h is a deterministic function of (h, i), and
 * each span's id is kvs_span_id(@ns, @model_fp, previous span's id, its
 * span_tokens tokens), the previous span being the one before it in the
 * same prefix.  span_tokens must divide block_tokens.  0 or an error.
 */
int trace_name_spans(struct trace *t, const char *ns,
		     const uint8_t model_fp[KVS_ID_SIZE], uint32_t block_tokens,
		     uint32_t span_tokens);

/* Frees everything trace_read allocated; safe on a zeroed trace. */
void trace_free(struct trace *t);

#endif
