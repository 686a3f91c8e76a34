/*
 * bench_trace.h - what `kvstash bench trace` (bench_trace.c: options,
 * replays) and its output (trace_report.c: text, JSON, the plot) share.
 */
#ifndef KVSTASH_BENCH_TRACE_H
#define KVSTASH_BENCH_TRACE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "replay.h"

#define SWEEP_MAX 64

struct kvs_cli_json;

struct args {
	const char *trace_path, *dir, *model, *meta, *sweep, *sweep_tier;
	const char *plot, *format, *on_error, *ns;
	const char *eviction; /* --eviction: prefix, s3fifo or lru */
	const char *server, *key_file; /* --server: the kvstashd target */
	uint64_t dram, nvme, segment, progress;
	uint32_t block_tokens, layers, kv_heads, head_dim, bits, group;
	uint32_t residual, span, scale, timeout_ms;
	bool fp16, json, shared_memory;
	enum kvs_store_eviction policy; /* --eviction, parsed */
	uint64_t caps[SWEEP_MAX]; /* --sweep, parsed */
	size_t n_caps;
};

/* One replay's results: the store's (or the daemon's), the LRU's and the
 * offline optimum's. */
struct outcome {
	struct replay_plan plan;
	struct replay_tally store, lru, opt;
	uint64_t dram, nvme; /* capacities at scale 1 */
	struct replay_tiers tiers; /* as given to the store, or the daemon's */
	const char *server; /* the daemon's address; NULL in-process */
};

/* "2-bit", "fp16": the label of a format in the output. */
const char *format_label(const struct replay_model *m, enum replay_format f,
			 char *out, size_t n);

/* trace_report.c */
void json_outcome(struct kvs_cli_json *j, const struct replay_model *m,
		  enum replay_format f, const struct outcome *o);
void print_single(const struct args *a, const struct replay_model *m,
		  const struct trace *t, enum replay_format f,
		  const struct outcome *o);
void json_header(struct kvs_cli_json *j, const struct args *a,
		 const struct replay_model *m, const struct trace *t,
		 double ids_seconds);
void print_sweep(const struct args *a, const struct replay_model *m,
		 const struct trace *t, const struct outcome *res, size_t n,
		 double secs);
void json_sweep(FILE *f, const struct args *a, const struct replay_model *m,
		const struct trace *t, const struct outcome *res, size_t n,
		double ids_secs, double secs);
int draw_plot(const struct args *a, const struct replay_model *m,
	      const struct trace *t, const struct outcome *res, size_t n,
	      double ids_secs, double secs);

#endif
