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
 * ids -> one replay per (capacity, format) -> text or JSON
 * (trace_report.c).  The mapping
 * of blocks to objects and the counters are described in docs/REPLAY.md.
 */
#include <errno.h>
#include <inttypes.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli_util.h"
#include "bench_cmd.h"
#include "kvs_config.h"
#include "kvstash/error.h"
#include "bench_trace.h"
#include "replay.h"

#define CMD "bench trace"

extern char **environ;

static const char trace_usage[] =
	"usage: kvstash bench trace TRACE [--dir DIR] [--dram-capacity BYTES]\n"
	"           [--nvme-capacity BYTES] [--segment-size BYTES]\n"
	"           [--block-tokens T]\n"
	"           [--model NAME | --layers L --kv-heads H --head-dim D]\n"
	"           [--bits B] [--group G] [--residual R] [--span S]\n"
	"           [--meta f16|bf16|f32] [--fp16] [--scale K]\n"
	"           [--sweep CAPS [--sweep-tier dram|nvme] [--plot PNG]]\n"
	"           [--eviction prefix|s3fifo|lru]\n"
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
	"Beside the store, an LRU simulation and the offline optimum (Belady\n"
	"over the prefix chain) of the same capacities are replayed.\n"
	"--eviction picks the store's DRAM policy (default prefix; s3fifo,\n"
	"lru: docs/REPLAY.md).\n"
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
		"dir",		"dram-capacity", "nvme-capacity",
		"segment-size", "eviction",
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
	for (size_t i = 0; i < sizeof(store_only) / sizeof(store_only[0]); i++)
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
	a->eviction = "prefix";
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
		KVS_OPT_STR("eviction", &a->eviction, false),
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
	if (kvs_store_eviction_parse(a->eviction, &a->policy) != 0)
		return kvs_cli_usage_error(
			CMD,
			"--eviction: expected prefix, s3fifo or lru, got "
			"'%s'",
			a->eviction);
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
	sc.eviction = a->policy;
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
	rc = replay_opt(t, &out->plan, out->dram, out->nvme, &out->opt);
	if (rc) {
		kvs_cli_fail(CMD, rc, "optimum");
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

const char *format_label(const struct replay_model *m, enum replay_format f,
			 char *out, size_t n)
{
	if (f == REPLAY_FP16)
		snprintf(out, n, "fp16");
	else
		snprintf(out, n, "%u-bit", m->shape.bits);
	return out;
}

/* ---- main ------------------------------------------------------------ */

/* --dir DIR is created when missing, as kvstashd's --dir is (one level,
 * mode 0755); anything else in the way is refused in one line naming
 * DIR. */
static int make_dir(const char *dir)
{
	struct stat st;

	if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
		kvs_cli_error(CMD, "--dir %s: %s", dir, strerror(errno));
		return -errno;
	}
	if (stat(dir, &st) != 0) {
		kvs_cli_error(CMD, "--dir %s: %s", dir, strerror(errno));
		return -errno;
	}
	if (!S_ISDIR(st.st_mode)) {
		kvs_cli_error(CMD, "--dir %s: %s", dir, strerror(ENOTDIR));
		return -ENOTDIR;
	}
	return 0;
}

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
	if (!a.server) {
		rc = make_dir(a.dir);
		if (rc)
			return KVS_EXIT_FAIL;
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
