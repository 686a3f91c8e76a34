/*
 * trace_report.c - the output of `kvstash bench trace`: one replay or a
 * sweep as text or JSON (the fields docs/REPLAY.md lists), and the plot
 * of a sweep through bench/trace_plot.py.
 */
#include <errno.h>
#include <inttypes.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_trace.h"
#include "cli_util.h"
#include "kvstash/error.h"

#define CMD "bench trace"

/* ---- output ---------------------------------------------------------- */

static double ratio(uint64_t num, uint64_t den)
{
	return den ? (double)num / (double)den : 0.0;
}

static void json_tally(struct kvs_cli_json *j, const struct replay_tally *t,
		       bool store)
{
	/* In-process, each hit block's tier is known; through a daemon only
	 * the objects by tier, where its STAT reports them. */
	bool tier_blocks = !store || t->tier_blocks;
	bool tier_bytes = !store || t->target.tier_hits;

	kvs_cli_json_u64(j, "requests", t->requests);
	kvs_cli_json_u64(j, "lookup_blocks", t->lookup_blocks);
	kvs_cli_json_u64(j, "hit_blocks", t->hit_blocks);
	kvs_cli_json_u64(j, "miss_blocks", t->lookup_blocks - t->hit_blocks);
	if (tier_blocks) {
		kvs_cli_json_u64(j, "dram_hit_blocks", t->dram_hit_blocks);
		kvs_cli_json_u64(j, "nvme_hit_blocks", t->nvme_hit_blocks);
	}
	kvs_cli_json_u64(j, "prompt_tokens", t->prompt_tokens);
	kvs_cli_json_u64(j, "hit_tokens", t->hit_tokens);
	kvs_cli_json_u64(j, "prefill_tokens_saved", t->hit_tokens);
	kvs_cli_json_double(j, "prefix_hit_ratio",
			    ratio(t->hit_tokens, t->prompt_tokens));
	kvs_cli_json_double(j, "block_hit_ratio",
			    ratio(t->hit_blocks, t->lookup_blocks));
	kvs_cli_json_u64(j, "evictions", t->target.evictions);
	kvs_cli_json_u64(j, "objects_put", t->objects_put);
	kvs_cli_json_u64(j, "objects_read", t->objects_read);
	kvs_cli_json_u64(j, "bytes_written", t->bytes_written);
	kvs_cli_json_u64(j, "bytes_read", t->bytes_read);
	kvs_cli_json_u64(j, "dram_bytes_written", t->bytes_written);
	if (tier_bytes) {
		kvs_cli_json_u64(j, "dram_bytes_read", t->dram_bytes_read);
		kvs_cli_json_u64(j, "nvme_bytes_read", t->nvme_bytes_read);
	}
	kvs_cli_json_u64(j, "nvme_bytes_written", t->nvme_bytes_written);
	if (!store) {
		kvs_cli_json_u64(j, "evicted_blocks", t->evicted_blocks);
		kvs_cli_json_u64(j, "demoted_blocks", t->demoted_blocks);
		return;
	}
	kvs_cli_json_u64(j, "hit_objects", t->target.hits);
	if (tier_bytes) {
		kvs_cli_json_u64(j, "dram_hit_objects", t->target.dram_hits);
		kvs_cli_json_u64(j, "nvme_hit_objects", t->target.nvme_hits);
	}
	kvs_cli_json_u64(j, "spills", t->target.spills);
	if (t->target.moves) {
		kvs_cli_json_u64(j, "promotions", t->target.promotions);
		kvs_cli_json_u64(j, "carried", t->target.carried);
	}
	kvs_cli_json_u64(j, "put_refused", t->put_refused);
	kvs_cli_json_u64(j, "read_misses", t->read_misses);
	kvs_cli_json_u64(j, "corrupt_dropped", t->target.corrupt_dropped);
	kvs_cli_json_u64(j, "objects_before", t->objects_before);
	kvs_cli_json_u64(j, "dram_objects_end", t->target.dram_objects);
	kvs_cli_json_u64(j, "nvme_objects_end", t->target.nvme_objects);
	kvs_cli_json_bool(j, "direct_io", t->target.direct_io);
	kvs_cli_json_double(j, "wall_seconds", t->wall_seconds);
	kvs_cli_json_double(j, "requests_per_second",
			    (double)t->requests / (t->wall_seconds > 0
							   ? t->wall_seconds
							   : 1e-9));
}

static void json_plan(struct kvs_cli_json *j, const struct replay_plan *p)
{
	kvs_cli_json_object_begin(j, "objects");
	kvs_cli_json_u64(j, "per_block", p->objects_per_block);
	kvs_cli_json_u64(j, "layers_kept", p->layers_kept);
	kvs_cli_json_u64(j, "spans_kept", p->spans_kept);
	kvs_cli_json_u64(j, "spans_per_block", p->spans_per_block);
	kvs_cli_json_u64(j, "heads_kept", p->heads_kept);
	kvs_cli_json_u64(j, "object_bytes", p->object_bytes);
	kvs_cli_json_u64(j, "record_bytes",
			 replay_record_bytes(p->object_bytes));
	kvs_cli_json_u64(j, "full_object_bytes", p->full_object_bytes);
	kvs_cli_json_u64(j, "full_block_bytes", p->full_block_bytes);
	kvs_cli_json_object_end(j);
}

/* The members of one replay (inside an open object). */
void json_outcome(struct kvs_cli_json *j, const struct replay_model *m,
		  enum replay_format f, const struct outcome *o)
{
	char fmt[16];

	kvs_cli_json_str(j, "format", format_label(m, f, fmt, sizeof(fmt)));
	kvs_cli_json_str(j, "target", o->server ? "kvstashd" : "store");
	if (o->server)
		kvs_cli_json_str(j, "server", o->server);
	kvs_cli_json_u64(j, "dram_capacity", o->dram);
	kvs_cli_json_u64(j, "nvme_capacity", o->nvme);
	kvs_cli_json_u64(j, "store_dram_capacity", o->tiers.dram);
	kvs_cli_json_u64(j, "store_nvme_capacity", o->tiers.nvme);
	if (!o->server) {
		kvs_cli_json_u64(j, "store_segment_size",
				 o->tiers.segment_size);
		kvs_cli_json_u64(j, "store_nvme_segments",
				 o->tiers.nvme_segments);
	}
	json_plan(j, &o->plan);
	json_tally(j, &o->store, true);
	kvs_cli_json_object_begin(j, "lru");
	json_tally(j, &o->lru, false);
	kvs_cli_json_object_end(j);
	kvs_cli_json_object_begin(j, "optimum");
	json_tally(j, &o->opt, false);
	kvs_cli_json_object_end(j);
}

void json_header(struct kvs_cli_json *j, const struct args *a,
		 const struct replay_model *m, const struct trace *t,
		 double ids_seconds)
{
	kvs_cli_json_str(j, "trace", a->trace_path);
	kvs_cli_json_u64(j, "trace_requests", t->n_requests);
	kvs_cli_json_u64(j, "trace_blocks", t->n_chain);
	kvs_cli_json_u64(j, "distinct_blocks", t->n_nodes);
	kvs_cli_json_u64(j, "skipped_lines", t->skipped_lines);
	kvs_cli_json_u64(j, "length_mismatches", t->length_mismatches);
	kvs_cli_json_u64(j, "block_tokens", m->block_tokens);
	kvs_cli_json_double(j, "span_id_seconds", ids_seconds);
	kvs_cli_json_object_begin(j, "model");
	kvs_cli_json_str(j, "name", m->name);
	kvs_cli_json_u64(j, "layers", m->layers);
	kvs_cli_json_u64(j, "kv_heads", m->shape.kv_heads);
	kvs_cli_json_u64(j, "head_dim", m->shape.head_dim);
	kvs_cli_json_u64(j, "bits", m->shape.bits);
	kvs_cli_json_u64(j, "group", m->shape.group);
	kvs_cli_json_u64(j, "residual", m->shape.residual);
	kvs_cli_json_u64(j, "span", m->shape.span);
	kvs_cli_json_str(j, "meta",
			 kvs_dtype_name((enum kvs_dtype)m->shape.meta_type));
	kvs_cli_json_object_end(j);
	kvs_cli_json_u64(j, "scale", a->scale);
	if (!a->server)
		kvs_cli_json_str(j, "eviction", a->eviction);
}

static void print_trace_summary(const struct args *a,
				const struct replay_model *m,
				const struct trace *t)
{
	printf("trace     %s: %zu requests, %zu blocks of %u tokens, %zu "
	       "distinct\n",
	       a->trace_path, t->n_requests, t->n_chain, m->block_tokens,
	       t->n_nodes);
	if (t->skipped_lines || t->length_mismatches)
		printf("          %" PRIu64 " malformed lines skipped, %" PRIu64
		       " requests whose hash ids do not cover input_length "
		       "in blocks of %u\n",
		       t->skipped_lines, t->length_mismatches, m->block_tokens);
	printf("model     %s: %u layers, %u KV heads, D=%u; %u-bit, G=%u, "
	       "R=%u, S=%u, %s metadata\n",
	       m->name, m->layers, m->shape.kv_heads, m->shape.head_dim,
	       m->shape.bits, m->shape.group, m->shape.residual, m->shape.span,
	       kvs_dtype_name((enum kvs_dtype)m->shape.meta_type));
}

static void print_plan(const struct replay_model *m, enum replay_format f,
		       const struct replay_plan *p)
{
	char fmt[16], b1[32], b2[32];

	printf("objects   %s: %u per block (%u of %u layers x %u of %u spans, "
	       "%u of %u heads), %u B each (record %" PRIu64 " B); a block "
	       "is %s at scale 1, %s here\n",
	       format_label(m, f, fmt, sizeof(fmt)), p->objects_per_block,
	       p->layers_kept, m->layers, p->spans_kept, p->spans_per_block,
	       p->heads_kept, m->shape.kv_heads, p->object_bytes,
	       replay_record_bytes(p->object_bytes),
	       kvs_cli_human_bytes((double)p->full_block_bytes, b1, sizeof(b1)),
	       kvs_cli_human_bytes((double)p->objects_per_block *
					   p->object_bytes,
				   b2, sizeof(b2)));
}

/* A row of the store's (or daemon's) column, the LRU's and the
 * optimum's; @known false prints "-" for a counter the target does not
 * report. */
static void row_u64(const char *name, bool known, uint64_t s, uint64_t l,
		    uint64_t o)
{
	char bs[32];

	snprintf(bs, sizeof(bs), "%" PRIu64, s);
	printf("%-28s %16s %16" PRIu64 " %16" PRIu64 "\n", name,
	       known ? bs : "-", l, o);
}

static void row_bytes(const char *name, bool known, uint64_t s, uint64_t l,
		      uint64_t o)
{
	char bs[32], bl[32], bo[32];

	printf("%-28s %16s %16s %16s\n", name,
	       known ? kvs_cli_human_bytes((double)s, bs, sizeof(bs)) : "-",
	       kvs_cli_human_bytes((double)l, bl, sizeof(bl)),
	       kvs_cli_human_bytes((double)o, bo, sizeof(bo)));
}

static void print_capacity(const struct args *a, const struct outcome *o)
{
	char b1[32], b2[32], b3[32], b4[32];

	kvs_cli_human_bytes((double)o->dram, b1, sizeof(b1));
	kvs_cli_human_bytes((double)o->nvme, b2, sizeof(b2));
	kvs_cli_human_bytes((double)o->tiers.dram, b3, sizeof(b3));
	kvs_cli_human_bytes((double)o->tiers.nvme, b4, sizeof(b4));
	if (!o->server) {
		printf("capacity  DRAM %s, NVMe %s; scale %u: the store has "
		       "DRAM %s, NVMe %s\n\n",
		       b1, b2, a->scale, b3, b4);
		return;
	}
	printf("daemon    %s, holding %" PRIu64 " objects (DRAM and NVMe "
	       "copies) before the replay\n",
	       o->server, o->store.objects_before);
	printf("capacity  the daemon's: DRAM %s, NVMe %s; at scale %u they "
	       "stand for DRAM %s, NVMe %s\n\n",
	       b3, b4, a->scale, b1, b2);
}

void print_single(const struct args *a, const struct replay_model *m,
		  const struct trace *t, enum replay_format f,
		  const struct outcome *o)
{
	const struct replay_tally *s = &o->store, *l = &o->lru, *x = &o->opt;
	bool blocks = s->tier_blocks, tiers = s->target.tier_hits;

	print_trace_summary(a, m, t);
	print_plan(m, f, &o->plan);
	print_capacity(a, o);
	printf("%-28s %16s %16s %16s\n", "", o->server ? "kvstashd" : "store",
	       "LRU", "optimum");
	row_u64("requests", true, s->requests, l->requests, x->requests);
	row_u64("lookup blocks", true, s->lookup_blocks, l->lookup_blocks,
		x->lookup_blocks);
	row_u64("hit blocks", true, s->hit_blocks, l->hit_blocks,
		x->hit_blocks);
	row_u64("  from DRAM", blocks, s->dram_hit_blocks, l->dram_hit_blocks,
		x->dram_hit_blocks);
	row_u64("  from NVMe", blocks, s->nvme_hit_blocks, l->nvme_hit_blocks,
		x->nvme_hit_blocks);
	row_u64("miss blocks", true, s->lookup_blocks - s->hit_blocks,
		l->lookup_blocks - l->hit_blocks,
		x->lookup_blocks - x->hit_blocks);
	row_u64("prompt tokens", true, s->prompt_tokens, l->prompt_tokens,
		x->prompt_tokens);
	row_u64("hit tokens (prefill saved)", true, s->hit_tokens,
		l->hit_tokens, x->hit_tokens);
	printf("%-28s %15.2f%% %15.2f%% %15.2f%%\n", "prefix-hit ratio",
	       100.0 * ratio(s->hit_tokens, s->prompt_tokens),
	       100.0 * ratio(l->hit_tokens, l->prompt_tokens),
	       100.0 * ratio(x->hit_tokens, x->prompt_tokens));
	row_u64("evictions (objects)", true, s->target.evictions,
		l->target.evictions, x->target.evictions);
	row_u64("spills to NVMe (objects)", true, s->target.spills,
		l->demoted_blocks * o->plan.objects_per_block,
		x->demoted_blocks * o->plan.objects_per_block);
	row_bytes("bytes written", true, s->bytes_written, l->bytes_written,
		  x->bytes_written);
	row_bytes("  to NVMe", true, s->nvme_bytes_written,
		  l->nvme_bytes_written, x->nvme_bytes_written);
	row_bytes("bytes read", true, s->bytes_read, l->bytes_read,
		  x->bytes_read);
	row_bytes("  from DRAM", tiers, s->dram_bytes_read, l->dram_bytes_read,
		  x->dram_bytes_read);
	row_bytes("  from NVMe", tiers, s->nvme_bytes_read, l->nvme_bytes_read,
		  x->nvme_bytes_read);
	if (s->put_refused || s->read_misses)
		printf("%-28s %16" PRIu64 "\n%-28s %16" PRIu64 "\n",
		       "objects refused by put", s->put_refused,
		       "reads missed after lookup", s->read_misses);
	printf("%-28s %14.3f s\n", "wall time", s->wall_seconds);
	printf("%-28s %16.0f\n", "requests/s",
	       (double)s->requests /
		       (s->wall_seconds > 0 ? s->wall_seconds : 1e-9));
}

static double pct(const struct replay_tally *t)
{
	return 100 * ratio(t->hit_tokens, t->prompt_tokens);
}

/* With --sweep-tier nvme: each policy's hit blocks from DRAM and from
 * NVMe, so the table shows what the NVMe tier adds. */
static void print_tier_hits(const struct args *a, const struct replay_model *m,
			    const struct outcome *res, size_t n)
{
	char fmt[16], b1[32];

	format_label(m, REPLAY_QUANT, fmt, sizeof(fmt));
	printf("\nhit blocks by tier (DRAM / NVMe)\n");
	printf("%-12s %-6s %21s %21s %21s\n", "capacity", "format", "store",
	       "LRU", "optimum");
	for (size_t i = 0; i < 2 * n; i++) {
		const struct outcome *q = &res[i];
		char c[3][32];
		const struct replay_tally *tl[3] = { &q->store, &q->lru,
						     &q->opt };

		for (int k = 0; k < 3; k++)
			snprintf(c[k], sizeof(c[k]), "%" PRIu64 " / %" PRIu64,
				 tl[k]->dram_hit_blocks,
				 tl[k]->nvme_hit_blocks);
		printf("%-12s %-6s %21s %21s %21s\n",
		       i % 2 ? ""
			     : kvs_cli_human_bytes((double)q->nvme, b1,
						   sizeof(b1)),
		       i % 2 ? "fp16" : fmt, c[0], c[1], c[2]);
	}
	(void)a;
}

void print_sweep(const struct args *a, const struct replay_model *m,
		 const struct trace *t, const struct outcome *res, size_t n,
		 double secs)
{
	char fmt[16], b1[32], b2[32];
	bool dram = strcmp(a->sweep_tier, "dram") == 0;

	print_trace_summary(a, m, t);
	print_plan(m, REPLAY_QUANT, &res[0].plan);
	print_plan(m, REPLAY_FP16, &res[1].plan);
	printf("sweep     %s capacity (NVMe %s), scale %u, eviction %s; "
	       "prefix-hit ratio = hit tokens / prompt tokens\n",
	       dram ? "DRAM" : "NVMe",
	       dram ? kvs_cli_human_bytes((double)a->nvme, b1, sizeof(b1))
		    : "swept",
	       a->scale, a->eviction);
	if (!dram)
		printf("          (DRAM %s)\n",
		       kvs_cli_human_bytes((double)a->dram, b2, sizeof(b2)));
	printf("\n");
	format_label(m, REPLAY_QUANT, fmt, sizeof(fmt));
	printf("%-12s %8s %8s %8s %8s %8s %8s %9s %9s\n", "capacity", fmt, fmt,
	       fmt, "fp16", "fp16", "fp16", "req/s", "req/s");
	printf("%-12s %8s %8s %8s %8s %8s %8s %9s %9s\n", "", "store", "LRU",
	       "optimum", "store", "LRU", "optimum", fmt, "fp16");
	for (size_t i = 0; i < n; i++) {
		const struct outcome *q = &res[2 * i], *h = &res[2 * i + 1];

		printf("%-12s %7.2f%% %7.2f%% %7.2f%% %7.2f%% %7.2f%% %7.2f%% "
		       "%9.0f %9.0f\n",
		       kvs_cli_human_bytes((double)(dram ? q->dram : q->nvme),
					   b1, sizeof(b1)),
		       pct(&q->store), pct(&q->lru), pct(&q->opt),
		       pct(&h->store), pct(&h->lru), pct(&h->opt),
		       (double)q->store.requests / q->store.wall_seconds,
		       (double)h->store.requests / h->store.wall_seconds);
	}
	if (!dram)
		print_tier_hits(a, m, res, n);
	printf("\nsweep time %.1f s (%zu replays)\n", secs, 2 * n);
}

void json_sweep(FILE *f, const struct args *a, const struct replay_model *m,
		const struct trace *t, const struct outcome *res, size_t n,
		double ids_secs, double secs)
{
	struct kvs_cli_json j;

	kvs_cli_json_init(&j, f);
	kvs_cli_json_object_begin(&j, NULL);
	json_header(&j, a, m, t, ids_secs);
	kvs_cli_json_str(&j, "sweep_tier", a->sweep_tier);
	kvs_cli_json_double(&j, "sweep_seconds", secs);
	kvs_cli_json_array_begin(&j, "points");
	for (size_t i = 0; i < n; i++) {
		kvs_cli_json_object_begin(&j, NULL);
		kvs_cli_json_u64(&j, "dram_capacity", res[2 * i].dram);
		kvs_cli_json_u64(&j, "nvme_capacity", res[2 * i].nvme);
		kvs_cli_json_object_begin(&j, "quant");
		json_outcome(&j, m, REPLAY_QUANT, &res[2 * i]);
		kvs_cli_json_object_end(&j);
		kvs_cli_json_object_begin(&j, "fp16");
		json_outcome(&j, m, REPLAY_FP16, &res[2 * i + 1]);
		kvs_cli_json_object_end(&j);
		kvs_cli_json_object_end(&j);
	}
	kvs_cli_json_array_end(&j);
	kvs_cli_json_object_end(&j);
	kvs_cli_json_finish(&j);
}

/* ---- the plot -------------------------------------------------------- */

/* Where bench/trace_plot.py is: $KVSTASH_BENCH_DIR, else the source
 * tree this binary was built from. */
static const char *bench_dir(void)
{
	const char *env = getenv("KVSTASH_BENCH_DIR");

	return env && *env ? env : KVS_BENCH_DIR;
}

int draw_plot(const struct args *a, const struct replay_model *m,
	      const struct trace *t, const struct outcome *res, size_t n,
	      double ids_secs, double secs)
{
	char json_path[4096], script[4096];
	char *argv[5];
	pid_t pid;
	int fd, status, rc;
	FILE *f;

	snprintf(script, sizeof(script), "%s/trace_plot.py", bench_dir());
	snprintf(json_path, sizeof(json_path), "%s/kvstash-sweep-XXXXXX.json",
		 a->dir);
	fd = mkstemps(json_path, 5);
	if (fd < 0) {
		rc = -errno;
		kvs_cli_error(CMD, "%s: %s", json_path, strerror(-rc));
		return rc;
	}
	f = fdopen(fd, "w");
	if (f == NULL) {
		close(fd);
		unlink(json_path);
		return -ENOMEM;
	}
	json_sweep(f, a, m, t, res, n, ids_secs, secs);
	rc = ferror(f) ? -EIO : 0;
	if (fclose(f) != 0 && rc == 0)
		rc = -errno;
	if (rc) {
		kvs_cli_error(CMD, "%s: write: %s", json_path, strerror(-rc));
		unlink(json_path);
		return rc;
	}
	argv[0] = "python3";
	argv[1] = script;
	argv[2] = json_path;
	argv[3] = (char *)a->plot;
	argv[4] = NULL;
	fflush(stdout);
	rc = posix_spawnp(&pid, "python3", NULL, NULL, argv, environ);
	if (rc == 0 && waitpid(pid, &status, 0) < 0)
		rc = errno;
	unlink(json_path);
	if (rc) {
		kvs_cli_error(CMD, "--plot: cannot run python3: %s",
			      strerror(rc));
		return -rc;
	}
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
		return 0;
	if (WIFEXITED(status) && WEXITSTATUS(status) == 3) {
		/* trace_plot.py said why (matplotlib missing): the PNG is
		 * optional, the sweep stands. */
		return 0;
	}
	kvs_cli_error(CMD, "--plot: %s failed", script);
	return -EIO;
}
