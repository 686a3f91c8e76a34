/*
 * bench_trace.c - `kvstash bench trace TRACE`: replays a serving trace
 * (Mooncake JSON lines or CSV, trace.h) through the real store engine,
 * or with `--server` through a kvstashd, with an LRU simulation of the
 * same capacities beside it, and reports prefix hits, tiers, evictions
 * and bytes; `--sweep` repeats that over a list of capacities for the
 * quantized blocks and for fp16 side by side (in-process only: a daemon
 * has one capacity), and `--plot` draws the curve (bench/trace_plot.py,
 * matplotlib).
 *
 * Organisation: options -> the model and plans -> the trace and its span
 * ids -> one replay per (capacity, format) -> text or JSON.  The mapping
 * of blocks to objects and the counters are described in docs/REPLAY.md.
 */
#include <errno.h>
#include <inttypes.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli_util.h"
#include "bench_cmd.h"
#include "kvs_config.h"
#include "kvstash/error.h"
#include "replay.h"

#define CMD "bench trace"
#define SWEEP_MAX 64

extern char **environ;

static const char trace_usage[] =
	"usage: kvstash bench trace TRACE [--dir DIR] [--dram-capacity BYTES]\n"
	"           [--nvme-capacity BYTES] [--segment-size BYTES]\n"
	"           [--block-tokens T]\n"
	"           [--model NAME | --layers L --kv-heads H --head-dim D]\n"
	"           [--bits B] [--group G] [--residual R] [--span S]\n"
	"           [--meta f16|bf16|f32] [--fp16] [--scale K]\n"
	"           [--sweep CAPS [--sweep-tier dram|nvme] [--plot PNG]]\n"
	"           [--format auto|jsonl|csv] [--on-error fatal|skip]\n"
	"           [--namespace NS] [--progress N] [--json]\n"
	"       kvstash bench trace TRACE --server HOST:PORT --auth-key-file "
	"FILE\n"
	"           [--timeout-ms N] [--shared-memory] [the options above but\n"
	"           --dir, the capacities, --segment-size, --sweep and "
	"--fp16]\n"
	"\n"
	"Replays TRACE (Mooncake JSON lines: timestamp, input_length,\n"
	"output_length, hash_ids; or CSV, see docs/REPLAY.md) through a new\n"
	"store made under DIR (default $TMPDIR or /tmp) and removed after, "
	"and\n"
	"through an LRU simulation of the same capacities.  Each request "
	"looks\n"
	"up its longest cached prefix, reads its blocks, then stores the "
	"blocks\n"
	"after it.  A trace block of T tokens (default 512) is T/S spans x L\n"
	"layers of the format's objects (2-bit sealed blocks, or with --fp16\n"
	"the same spans as fp16 K/V).  Models: llama-3-8b (default),\n"
	"llama-3-70b, mistral-7b, qwen2.5-7b.  Format defaults: 2-bit, G=32,\n"
	"R=128, S=R, f16 metadata.\n"
	"\n"
	"--scale K divides every block's bytes and both capacities by K, "
	"keeping\n"
	"fewer layers, then fewer spans per block, then fewer heads per "
	"object,\n"
	"so a large configuration replays in bounded memory and disk; the\n"
	"NVMe tier keeps its number of --segment-size segments (default the\n"
	"store's, 32M).\n"
	"--sweep CAPS (comma-separated sizes) replays every capacity for the\n"
	"quantized format and fp16 side by side, setting the tier "
	"--sweep-tier\n"
	"(default dram) and keeping the other as given; --plot draws the "
	"curve\n"
	"when matplotlib is installed.  Sizes take K, M, G, T suffixes "
	"(binary).\n"
	"--server replays through that kvstashd instead (its store, its\n"
	"capacities: with --scale K give it capacities divided by K); "
	"counters\n"
	"are the differences of its STAT over the replay, so start it empty "
	"for\n"
	"counts comparable to an in-process replay.\n"
	"A malformed line is fatal unless --on-error skip.  Progress goes to\n"
	"stderr every N requests (default 10000, 0 = none).  Exit status: 0 "
	"ok,\n"
	"1 failure (unreadable or malformed trace, store or daemon error), "
	"2 usage.\n";

struct model_preset {
	const char *name;
	uint32_t layers, kv_heads, head_dim;
};

static const struct model_preset presets[] = {
	{ "llama-3-8b", 32, 8, 128 },
	{ "llama-3-70b", 80, 8, 128 },
	{ "mistral-7b", 32, 8, 128 },
	{ "qwen2.5-7b", 28, 4, 128 },
};

struct args {
	const char *trace_path, *dir, *model, *meta, *sweep, *sweep_tier;
	const char *plot, *format, *on_error, *ns;
	const char *server, *key_file; /* --server: the kvstashd target */
	uint64_t dram, nvme, segment, progress;
	uint32_t block_tokens, layers, kv_heads, head_dim, bits, group;
	uint32_t residual, span, scale, timeout_ms;
	bool fp16, json, shared_memory;
	uint64_t caps[SWEEP_MAX]; /* --sweep, parsed */
	size_t n_caps;
};

/* One replay's results: the store's (or the daemon's) and the LRU's. */
struct outcome {
	struct replay_plan plan;
	struct replay_tally store, lru;
	uint64_t dram, nvme; /* capacities at scale 1 */
	struct replay_tiers tiers; /* as given to the store, or the daemon's */
	const char *server; /* the daemon's address; NULL in-process */
};

static const char *format_label(const struct replay_model *m,
				enum replay_format f, char *out, size_t n)
{
	if (f == REPLAY_FP16)
		snprintf(out, n, "fp16");
	else
		snprintf(out, n, "%u-bit", m->shape.bits);
	return out;
}

/* ---- options --------------------------------------------------------- */

static int parse_sweep(const char *list, uint64_t *caps, size_t *n)
{
	char *copy = strdup(list), *save = NULL, *tok;
	int rc = 0;

	if (copy == NULL)
		return -ENOMEM;
	*n = 0;
	for (tok = strtok_r(copy, ",", &save); tok && rc == 0;
	     tok = strtok_r(NULL, ",", &save)) {
		if (*n == SWEEP_MAX) {
			kvs_cli_error(CMD, "--sweep: at most %d capacities",
				      SWEEP_MAX);
			rc = -KVS_EPARAM;
			break;
		}
		rc = kvs_cli_parse_size(CMD, "sweep", tok, &caps[(*n)++]);
	}
	if (rc == 0 && *n == 0) {
		kvs_cli_error(CMD, "--sweep: no capacities");
		rc = -KVS_EPARAM;
	}
	free(copy);
	return rc;
}

static bool opt_seen(const struct kvs_cli_opt *opts, size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(opts[i].name, name) == 0)
			return opts[i].seen;
	return false;
}

/*
 * With --server the store is the daemon's: what would configure the
 * store made here is refused rather than ignored (a capacity given here
 * would not be the one replayed), and so is a sweep (one daemon has one
 * capacity) and --fp16 (the daemon's puts take sealed blocks only).  The
 * client's options need --server.
 */
static int check_server_args(const struct args *a,
			     const struct kvs_cli_opt *opts, size_t n)
{
	static const char *const store_only[] = {
		"dir",
		"dram-capacity",
		"nvme-capacity",
		"segment-size",
	};
	static const char *const client_only[] = {
		"auth-key-file",
		"timeout-ms",
		"shared-memory",
	};

	if (!a->server) {
		for (size_t i = 0; i < 3; i++)
			if (opt_seen(opts, n, client_only[i]))
				return kvs_cli_usage_error(
					CMD, "--%s goes with --server",
					client_only[i]);
		return 0;
	}
	if (!KVS_HAVE_UCX)
		return kvs_cli_usage_error(CMD, "--server: this kvstash is "
						"built without the network "
						"service");
	if (!a->key_file)
		return kvs_cli_usage_error(CMD, "--server needs "
						"--auth-key-file FILE");
	if (a->sweep || opt_seen(opts, n, "sweep-tier") || a->plot)
		return kvs_cli_usage_error(
			CMD, "--sweep with --server: a daemon has one "
			     "capacity (sweep in-process, or replay once per "
			     "daemon)");
	if (a->fp16)
		return kvs_cli_usage_error(
			CMD, "--fp16 with --server: kvstashd stores sealed "
			     "blocks only (the fp16 objects are residual "
			     "tails, which it takes as request handoffs)");
	for (size_t i = 0; i < 4; i++)
		if (opt_seen(opts, n, store_only[i]))
			return kvs_cli_usage_error(
				CMD,
				"--%s with --server: the daemon's store and "
				"capacities are replayed (set them on "
				"kvstashd)",
				store_only[i]);
	return 0;
}

static int parse_args(int argc, char **argv, struct args *a)
{
	struct kvs_store_opts defaults;
	const char *pos[2];
	size_t n_pos = 0;
	int rc;

	kvs_store_opts_default(&defaults);
	memset(a, 0, sizeof(*a));
	a->dram = defaults.dram_capacity;
	a->nvme = defaults.nvme_capacity;
	a->segment = defaults.segment_size;
	a->block_tokens = 512;
	a->bits = 2;
	a->group = 32;
	a->residual = 128;
	a->scale = 1;
	a->meta = "f16";
	a->sweep_tier = "dram";
	a->format = "auto";
	a->on_error = "fatal";
	a->ns = "";
	a->progress = 10000;
	struct kvs_cli_opt opts[] = {
		KVS_OPT_STR("dir", &a->dir, false),
		KVS_OPT_SIZE("dram-capacity", &a->dram, 0, 0, false),
		KVS_OPT_SIZE("nvme-capacity", &a->nvme, 0, 0, false),
		KVS_OPT_SIZE("segment-size", &a->segment, 256u << 10,
			     1ull << 40, false),
		KVS_OPT_U32("block-tokens", &a->block_tokens, 1, 1u << 20,
			    false),
		KVS_OPT_STR("model", &a->model, false),
		KVS_OPT_U32("layers", &a->layers, 1, 1024, false),
		KVS_OPT_U32("kv-heads", &a->kv_heads, 1, 1024, false),
		KVS_OPT_U32("head-dim", &a->head_dim, 1, 4096, false),
		KVS_OPT_U32("bits", &a->bits, 2, 4, false),
		KVS_OPT_U32("group", &a->group, 2, 4096, false),
		KVS_OPT_U32("residual", &a->residual, 1, 1u << 20, false),
		KVS_OPT_U32("span", &a->span, 1, 1u << 20, false),
		KVS_OPT_STR("meta", &a->meta, false),
		KVS_OPT_FLAG("fp16", &a->fp16),
		KVS_OPT_U32("scale", &a->scale, 1, 1u << 20, false),
		KVS_OPT_STR("sweep", &a->sweep, false),
		KVS_OPT_STR("sweep-tier", &a->sweep_tier, false),
		KVS_OPT_STR("plot", &a->plot, false),
		KVS_OPT_STR("format", &a->format, false),
		KVS_OPT_STR("on-error", &a->on_error, false),
		KVS_OPT_STR("namespace", &a->ns, false),
		KVS_OPT_U64("progress", &a->progress, 0, 0, false),
		KVS_OPT_FLAG("json", &a->json),
		KVS_OPT_STR("server", &a->server, false),
		KVS_OPT_STR("auth-key-file", &a->key_file, false),
		KVS_OPT_U32("timeout-ms", &a->timeout_ms, 1, 3600000, false),
		KVS_OPT_FLAG("shared-memory", &a->shared_memory),
	};
	size_t n_opts = sizeof(opts) / sizeof(opts[0]);

	rc = kvs_cli_parse(CMD, argc, argv, opts, n_opts, pos, 2, &n_pos);
	if (rc)
		return rc == KVS_CLI_HELP ? KVS_CLI_HELP
					  : kvs_cli_usage(CMD, trace_usage, rc);
	rc = check_server_args(a, opts, n_opts);
	if (rc)
		return rc;
	if (n_pos != 1)
		return kvs_cli_usage_error(CMD,
					   n_pos ? "one trace file, please"
						 : "a trace file is required");
	a->trace_path = pos[0];
	if (a->span == 0)
		a->span = a->residual;
	if (a->model && (a->layers || a->kv_heads || a->head_dim))
		return kvs_cli_usage_error(
			CMD, "--model or --layers/--kv-heads/--head-dim, "
			     "not both");
	if (!a->model && (a->layers || a->kv_heads || a->head_dim) &&
	    !(a->layers && a->kv_heads && a->head_dim))
		return kvs_cli_usage_error(
			CMD, "--layers, --kv-heads and --head-dim go "
			     "together");
	if (a->fp16 && a->sweep)
		return kvs_cli_usage_error(
			CMD, "--fp16 and --sweep: a sweep replays both "
			     "formats");
	if (a->plot && !a->sweep)
		return kvs_cli_usage_error(CMD, "--plot draws a --sweep");
	if (a->sweep && parse_sweep(a->sweep, a->caps, &a->n_caps) != 0)
		return kvs_cli_usage(CMD, trace_usage, -KVS_EPARAM);
	if (strcmp(a->sweep_tier, "dram") != 0 &&
	    strcmp(a->sweep_tier, "nvme") != 0)
		return kvs_cli_usage_error(
			CMD,
			"--sweep-tier: expected dram or nvme, got "
			"'%s'",
			a->sweep_tier);
	if (strcmp(a->on_error, "fatal") != 0 &&
	    strcmp(a->on_error, "skip") != 0)
		return kvs_cli_usage_error(
			CMD, "--on-error: expected fatal or skip, got '%s'",
			a->on_error);
	return 0;
}

static int make_model(const struct args *a, struct replay_model *m)
{
	enum kvs_dtype meta;

	memset(m, 0, sizeof(*m));
	if (a->layers) {
		m->name = "custom";
		m->layers = a->layers;
		kvs_shape_default(&m->shape, (uint16_t)a->kv_heads,
				  (uint16_t)a->head_dim);
	} else {
		const char *name = a->model ? a->model : presets[0].name;
		size_t i;

		for (i = 0; i < sizeof(presets) / sizeof(presets[0]); i++)
			if (strcmp(presets[i].name, name) == 0)
				break;
		if (i == sizeof(presets) / sizeof(presets[0]))
			return kvs_cli_usage_error(
				CMD, "--model: unknown model '%s'", name);
		m->name = presets[i].name;
		m->layers = presets[i].layers;
		kvs_shape_default(&m->shape, (uint16_t)presets[i].kv_heads,
				  (uint16_t)presets[i].head_dim);
	}
	if (kvs_dtype_parse(a->meta, &meta) != 0)
		return kvs_cli_usage_error(
			CMD,
			"--meta: expected f16, bf16 or f32, got "
			"'%s'",
			a->meta);
	m->shape.bits = (uint8_t)a->bits;
	m->shape.group = (uint16_t)a->group;
	m->shape.residual = a->residual;
	m->shape.span = a->span;
	m->shape.meta_type = (uint8_t)meta;
	m->block_tokens = a->block_tokens;
	if (a->bits != 2 && a->bits != 4)
		return kvs_cli_usage_error(CMD, "--bits: expected 2 or 4");
	if (kvs_shape_check(&m->shape) != 0)
		return kvs_cli_usage_error(
			CMD,
			"invalid format: D=%u must be a multiple of "
			"G=%u, G a power of two, R a multiple of G "
			"and S of R (R=%u, S=%u)",
			m->shape.head_dim, m->shape.group, m->shape.residual,
			m->shape.span);
	if (m->block_tokens % m->shape.span != 0)
		return kvs_cli_usage_error(
			CMD,
			"--block-tokens %u is not a multiple of the "
			"span S=%u",
			m->block_tokens, m->shape.span);
	return 0;
}

/* ---- one replay ------------------------------------------------------ */

/* The in-process store for capacities @dram and @nvme at scale 1. */
static int open_store(const struct args *a, uint64_t dram, uint64_t nvme,
		      bool *noted, struct outcome *out,
		      struct replay_target *tg)
{
	struct replay_store_config sc;

	out->dram = dram;
	out->nvme = nvme;
	replay_plan_tiers(&out->plan, dram, nvme, a->segment, &out->tiers);
	if (!out->tiers.exact && !*noted) {
		fprintf(stderr,
			"kvstash " CMD ": note: at scale %u the store's tiers "
			"are small (DRAM %" PRIu64 " B, NVMe %" PRIu64
			" B): its fixed minimums (segment size, remembered "
			"keys) may make hit counts differ from scale 1\n",
			a->scale, out->tiers.dram, out->tiers.nvme);
		*noted = true;
	}
	sc.parent_dir = a->dir;
	sc.dram_capacity = out->tiers.dram;
	sc.nvme_capacity = out->tiers.nvme;
	sc.segment_size = out->tiers.segment_size;
	return replay_target_store(CMD, &sc, tg);
}

/* The daemon at --server; its capacities are the replay's. */
static int open_server(const struct args *a, struct outcome *out,
		       struct replay_target *tg)
{
	struct replay_server_config sc = { 0 };
	struct replay_counters c;
	int rc;

	sc.address = a->server;
	sc.key_file = a->key_file;
	sc.timeout_ms = a->timeout_ms;
	sc.shared_memory = a->shared_memory;
	sc.object_bytes = out->plan.object_bytes;
	sc.objects_per_block = out->plan.objects_per_block;
	rc = replay_target_server(CMD, &sc, tg);
	if (rc)
		return rc;
	rc = tg->ops->counters(tg->ctx, &c);
	if (rc) {
		kvs_cli_fail(CMD, rc, a->server);
		tg->ops->close(tg->ctx);
		return rc;
	}
	out->server = a->server;
	out->tiers.dram = c.dram_capacity;
	out->tiers.nvme = c.nvme_capacity;
	out->tiers.exact = true;
	out->dram = replay_plan_unscale(&out->plan, c.dram_capacity);
	out->nvme = replay_plan_unscale(&out->plan, c.nvme_capacity);
	if (c.dram_objects + c.nvme_objects > 0)
		fprintf(stderr,
			"kvstash " CMD ": note: %s holds objects already "
			"(%" PRIu64 " in DRAM, %" PRIu64 " on NVMe): they take "
			"room and may be hit (start kvstashd empty for counts "
			"comparable to an in-process replay)\n",
			a->server, c.dram_objects, c.nvme_objects);
	return 0;
}

static int replay_one(const struct args *a, const struct replay_model *m,
		      const struct trace *t,
		      const uint8_t model_fp[KVS_ID_SIZE], enum replay_format f,
		      uint64_t dram, uint64_t nvme, bool *noted,
		      struct outcome *out)
{
	struct replay_progress pg;
	struct replay_objects objs;
	struct replay_target tg;
	char label[128], fmt[16], b1[32], b2[32];
	int rc;

	memset(out, 0, sizeof(*out));
	rc = replay_plan_make(m, f, a->scale, &out->plan);
	if (rc) {
		kvs_cli_error(CMD, "no %s objects for this shape and scale",
			      format_label(m, f, fmt, sizeof(fmt)));
		return rc;
	}
	if (a->server)
		rc = open_server(a, out, &tg);
	else
		rc = open_store(a, dram, nvme, noted, out, &tg);
	if (rc)
		return rc;
	rc = replay_objects_init(&objs, m, &out->plan, model_fp,
				 tg.batch_blocks);
	if (rc) {
		kvs_cli_fail(CMD, rc, "template object");
		goto out_close;
	}
	rc = replay_lru(t, &out->plan, out->dram, out->nvme, &out->lru);
	if (rc) {
		kvs_cli_fail(CMD, rc, "LRU");
		goto out_objs;
	}
	snprintf(label, sizeof(label), "%s, DRAM %s, NVMe %s",
		 format_label(m, f, fmt, sizeof(fmt)),
		 kvs_cli_human_bytes((double)out->dram, b1, sizeof(b1)),
		 kvs_cli_human_bytes((double)out->nvme, b2, sizeof(b2)));
	pg.cmd = CMD;
	pg.label = label;
	pg.every = a->progress;
	rc = replay_run(t, &objs, &tg, &pg, &out->store);
	if (rc == 0 && out->store.objects_put == 0 &&
	    out->store.put_refused > 0) {
		kvs_cli_error(CMD, "%s refused every object: %s",
			      a->server ? a->server : "the store",
			      kvs_strerror(out->store.first_refusal));
		rc = -KVS_EPARAM;
	}
out_objs:
	replay_objects_fini(&objs);
out_close:
	tg.ops->close(tg.ctx);
	return rc;
}

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
static void json_outcome(struct kvs_cli_json *j, const struct replay_model *m,
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
}

static void json_header(struct kvs_cli_json *j, const struct args *a,
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

/* A row of the store's (or daemon's) column and the LRU's; @known false
 * prints "-" for a counter the target does not report. */
static void row_u64(const char *name, bool known, uint64_t s, uint64_t l)
{
	char bs[32];

	snprintf(bs, sizeof(bs), "%" PRIu64, s);
	printf("%-28s %16s %16" PRIu64 "\n", name, known ? bs : "-", l);
}

static void row_bytes(const char *name, bool known, uint64_t s, uint64_t l)
{
	char bs[32], bl[32];

	printf("%-28s %16s %16s\n", name,
	       known ? kvs_cli_human_bytes((double)s, bs, sizeof(bs)) : "-",
	       kvs_cli_human_bytes((double)l, bl, sizeof(bl)));
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

static void print_single(const struct args *a, const struct replay_model *m,
			 const struct trace *t, enum replay_format f,
			 const struct outcome *o)
{
	const struct replay_tally *s = &o->store, *l = &o->lru;
	bool blocks = s->tier_blocks, tiers = s->target.tier_hits;

	print_trace_summary(a, m, t);
	print_plan(m, f, &o->plan);
	print_capacity(a, o);
	printf("%-28s %16s %16s\n", "", o->server ? "kvstashd" : "store",
	       "LRU");
	row_u64("requests", true, s->requests, l->requests);
	row_u64("lookup blocks", true, s->lookup_blocks, l->lookup_blocks);
	row_u64("hit blocks", true, s->hit_blocks, l->hit_blocks);
	row_u64("  from DRAM", blocks, s->dram_hit_blocks, l->dram_hit_blocks);
	row_u64("  from NVMe", blocks, s->nvme_hit_blocks, l->nvme_hit_blocks);
	row_u64("miss blocks", true, s->lookup_blocks - s->hit_blocks,
		l->lookup_blocks - l->hit_blocks);
	row_u64("prompt tokens", true, s->prompt_tokens, l->prompt_tokens);
	row_u64("hit tokens (prefill saved)", true, s->hit_tokens,
		l->hit_tokens);
	printf("%-28s %15.2f%% %15.2f%%\n", "prefix-hit ratio",
	       100.0 * ratio(s->hit_tokens, s->prompt_tokens),
	       100.0 * ratio(l->hit_tokens, l->prompt_tokens));
	row_u64("evictions (objects)", true, s->target.evictions,
		l->target.evictions);
	row_u64("spills to NVMe (objects)", true, s->target.spills,
		l->demoted_blocks * o->plan.objects_per_block);
	row_bytes("bytes written", true, s->bytes_written, l->bytes_written);
	row_bytes("  to NVMe", true, s->nvme_bytes_written,
		  l->nvme_bytes_written);
	row_bytes("bytes read", true, s->bytes_read, l->bytes_read);
	row_bytes("  from DRAM", tiers, s->dram_bytes_read, l->dram_bytes_read);
	row_bytes("  from NVMe", tiers, s->nvme_bytes_read, l->nvme_bytes_read);
	if (s->put_refused || s->read_misses)
		printf("%-28s %16" PRIu64 "\n%-28s %16" PRIu64 "\n",
		       "objects refused by put", s->put_refused,
		       "reads missed after lookup", s->read_misses);
	printf("%-28s %14.3f s\n", "wall time", s->wall_seconds);
	printf("%-28s %16.0f\n", "requests/s",
	       (double)s->requests /
		       (s->wall_seconds > 0 ? s->wall_seconds : 1e-9));
}

static void print_sweep(const struct args *a, const struct replay_model *m,
			const struct trace *t, const struct outcome *res,
			size_t n, double secs)
{
	char fmt[16], b1[32], b2[32];
	bool dram = strcmp(a->sweep_tier, "dram") == 0;

	print_trace_summary(a, m, t);
	print_plan(m, REPLAY_QUANT, &res[0].plan);
	print_plan(m, REPLAY_FP16, &res[1].plan);
	printf("sweep     %s capacity (NVMe %s), scale %u; prefix-hit ratio "
	       "= hit tokens / prompt tokens\n\n",
	       dram ? "DRAM" : "NVMe",
	       dram ? kvs_cli_human_bytes((double)a->nvme, b1, sizeof(b1))
		    : "swept",
	       a->scale);
	if (!dram)
		printf("          (DRAM %s)\n\n",
		       kvs_cli_human_bytes((double)a->dram, b2, sizeof(b2)));
	format_label(m, REPLAY_QUANT, fmt, sizeof(fmt));
	printf("%-12s %8s %8s %8s %8s %9s %9s\n", "capacity", fmt, "LRU",
	       "fp16", "LRU", "req/s", "req/s");
	printf("%-12s %8s %8s %8s %8s %9s %9s\n", "", "store", fmt, "store",
	       "fp16", fmt, "fp16");
	for (size_t i = 0; i < n; i++) {
		const struct outcome *q = &res[2 * i], *h = &res[2 * i + 1];

		printf("%-12s %7.2f%% %7.2f%% %7.2f%% %7.2f%% %9.0f %9.0f\n",
		       kvs_cli_human_bytes((double)(dram ? q->dram : q->nvme),
					   b1, sizeof(b1)),
		       100 * ratio(q->store.hit_tokens, q->store.prompt_tokens),
		       100 * ratio(q->lru.hit_tokens, q->lru.prompt_tokens),
		       100 * ratio(h->store.hit_tokens, h->store.prompt_tokens),
		       100 * ratio(h->lru.hit_tokens, h->lru.prompt_tokens),
		       (double)q->store.requests / q->store.wall_seconds,
		       (double)h->store.requests / h->store.wall_seconds);
	}
	printf("\nsweep time %.1f s (%zu replays)\n", secs, 2 * n);
}

static void json_sweep(FILE *f, const struct args *a,
		       const struct replay_model *m, const struct trace *t,
		       const struct outcome *res, size_t n, double ids_secs,
		       double secs)
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

static int draw_plot(const struct args *a, const struct replay_model *m,
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

/* ---- main ------------------------------------------------------------ */

static int load_trace(const struct args *a, const struct replay_model *m,
		      struct trace *t, uint8_t model_fp[KVS_ID_SIZE],
		      double *ids_secs)
{
	struct kvs_model_desc desc = { 0 };
	struct trace_read_opts ro = { 0 };
	struct timespec t0, t1;
	int rc;

	ro.cmd = CMD;
	ro.block_tokens = m->block_tokens;
	ro.skip_malformed = strcmp(a->on_error, "skip") == 0;
	if (trace_format_parse(a->format, &ro.format) != 0)
		return kvs_cli_usage_error(
			CMD,
			"--format: expected auto, jsonl or csv, "
			"got '%s'",
			a->format);
	rc = trace_read(a->trace_path, &ro, t);
	if (rc)
		return KVS_EXIT_FAIL;
	desc.model_id = m->name;
	desc.layers = m->layers;
	desc.kv_dtype = KVS_DTYPE_F16;
	desc.shape = m->shape;
	desc.layout = KVS_LAYOUT_TOKEN_MAJOR;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	rc = kvs_model_fingerprint(&desc, model_fp);
	if (rc == 0)
		rc = trace_name_spans(t, a->ns, model_fp, m->block_tokens,
				      m->shape.span);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	*ids_secs = (double)(t1.tv_sec - t0.tv_sec) +
		    (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	if (rc) {
		kvs_cli_fail(CMD, rc, "span ids");
		trace_free(t);
		return KVS_EXIT_FAIL;
	}
	return 0;
}

static int run_sweep(const struct args *a, const struct replay_model *m,
		     const struct trace *t, const uint8_t model_fp[KVS_ID_SIZE],
		     double ids_secs)
{
	const uint64_t *caps = a->caps;
	size_t n = a->n_caps;
	struct outcome *res;
	struct timespec t0, t1;
	bool dram = strcmp(a->sweep_tier, "dram") == 0, noted = false;
	int rc;

	res = calloc(2 * n, sizeof(*res));
	if (res == NULL) {
		kvs_cli_error(CMD, "out of memory");
		return KVS_EXIT_FAIL;
	}
	clock_gettime(CLOCK_MONOTONIC, &t0);
	rc = 0;
	for (size_t i = 0; i < n && rc == 0; i++)
		for (int f = REPLAY_QUANT; f <= REPLAY_FP16 && rc == 0; f++)
			rc = replay_one(a, m, t, model_fp,
					(enum replay_format)f,
					dram ? caps[i] : a->dram,
					dram ? a->nvme : caps[i], &noted,
					&res[2 * i + (size_t)f]);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	if (rc == 0) {
		double secs = (double)(t1.tv_sec - t0.tv_sec) +
			      (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;

		if (a->json)
			json_sweep(stdout, a, m, t, res, n, ids_secs, secs);
		else
			print_sweep(a, m, t, res, n, secs);
		if (a->plot)
			rc = draw_plot(a, m, t, res, n, ids_secs, secs);
	}
	free(res);
	if (rc)
		return KVS_EXIT_FAIL;
	return KVS_EXIT_OK;
}

int kvs_bench_trace(int argc, char **argv)
{
	uint8_t model_fp[KVS_ID_SIZE];
	struct replay_model m;
	struct replay_plan plan;
	struct trace t;
	struct outcome o;
	struct args a;
	enum replay_format f;
	double ids_secs = 0;
	bool noted = false;
	int rc;

	rc = parse_args(argc, argv, &a);
	if (rc == KVS_CLI_HELP)
		return kvs_cli_usage(CMD, trace_usage, KVS_CLI_HELP);
	if (rc)
		return rc;
	if (a.dir == NULL) {
		a.dir = getenv("TMPDIR");
		if (a.dir == NULL || *a.dir == '\0')
			a.dir = "/tmp";
	}
	rc = make_model(&a, &m);
	if (rc)
		return rc;
	if (replay_plan_make(&m, REPLAY_QUANT, a.scale, &plan) != 0)
		return kvs_cli_usage_error(
			CMD,
			"--scale %u is not a product of a divisor "
			"of the layers (%u), of the spans per block "
			"(%u) and of the KV heads (%u)",
			a.scale, m.layers, m.block_tokens / m.shape.span,
			m.shape.kv_heads);
	rc = load_trace(&a, &m, &t, model_fp, &ids_secs);
	if (rc)
		return rc;
	if (a.sweep) {
		rc = run_sweep(&a, &m, &t, model_fp, ids_secs);
		trace_free(&t);
		return rc;
	}
	f = a.fp16 ? REPLAY_FP16 : REPLAY_QUANT;
	rc = replay_one(&a, &m, &t, model_fp, f, a.dram, a.nvme, &noted, &o);
	if (rc == 0 && a.json) {
		struct kvs_cli_json j;

		kvs_cli_json_init(&j, stdout);
		kvs_cli_json_object_begin(&j, NULL);
		json_header(&j, &a, &m, &t, ids_secs);
		json_outcome(&j, &m, f, &o);
		kvs_cli_json_object_end(&j);
		kvs_cli_json_finish(&j);
	} else if (rc == 0) {
		print_single(&a, &m, &t, f, &o);
	}
	trace_free(&t);
	if (rc)
		return KVS_EXIT_FAIL;
	return KVS_EXIT_OK;
}
