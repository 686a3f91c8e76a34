/*
 * demo_node.c - `kvstash demo-node prefill|decode`, the processes `kvstash
 * demo` starts (not listed in the help: the parent builds their command
 * lines).  Each connects to the demo's kvstashd with its key, runs the
 * decode runtime (include/kvstash/runtime.h) on the synthetic model of
 * demo.h through kvs_blockstore_remote, and reports to the parent on its
 * stdout in demo.h's line protocol; a failure is one line on stderr (the
 * parent keeps it in a log and quotes it).
 *
 *   prefill   computes a prompt (after attaching what the daemon holds of
 *             it, with --attach), publishes its blocks, with --export
 *             hands its residual tails over under the request's id, and
 *             with --steps decodes on by itself (the outputs a handoff
 *             must reproduce);
 *   decode    takes a request over (--import: its blocks and tails) or
 *             attaches its cached prefix and computes the rest
 *             (--attach), decodes --steps tokens, measures them against
 *             the fp16 reference (--reference), and with --recompute
 *             computes the prompt again without the daemon and compares.
 *
 * Outputs (--out) are the decode steps' attention outputs, fp32
 * [step][layer][q_heads][D].  Inputs live in the device's memory: host
 * memory on the CPU, cudaMalloc'd with CUDA.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli_util.h"
#include "demo_cmd.h"
#include "demo.h"
#include "kvs_config.h"
#include "kvstash/client.h"
#include "kvstash/runtime.h"

#if KVS_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#define NODE "demo-node"
#define N_OPTS 22

static const char node_usage[] =
	"usage: kvstash demo-node prefill|decode --server HOST:PORT "
	"--auth-key-file FILE\n"
	"           --request N --prompt N [--shared N] [--steps N] [--out "
	"FILE]\n"
	"           [--export] [--attach] [--import] [--recompute] "
	"[--reference]\n"
	"           [--layers N] [--q-heads N] [--kv-heads N] [--head-dim N]\n"
	"           [--residual N] [--seed N] [--device auto|cpu|cuda]\n"
	"\n"
	"One process of `kvstash demo` (which starts it).\n";

struct node_args {
	const char *role, *server, *key_file, *out, *device;
	struct demo_model m;
	uint32_t request, prompt, shared, steps;
	bool do_export, attach, import, recompute, reference;
};

struct node {
	const struct node_args *a;
	struct kvs_blockstore *bs;
	struct kvs_rt *rt;
	struct kvs_seq *seq;
	bool cuda;
	uint32_t *ids; /* [prompt + steps] */
	/* full-precision history for the reference: [layers][kv][cap][D] */
	float *ref_k, *ref_v;
	uint32_t cap;
	struct demo_error err;
};

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void fact(const char *key, double value)
{
	printf("fact %s %.17g\n", key, value);
	fflush(stdout);
}

static void progress(const char *label, uint32_t done, uint32_t total)
{
	printf("progress %s %u %u\n", label, done, total);
	fflush(stdout);
}

/* ---- device memory --------------------------------------------------- */

/* A buffer the runtime reads or writes: @host always, @dev with CUDA. */
struct dbuf {
	void *host, *dev;
	size_t bytes;
};

static int dbuf_alloc(const struct node *n, size_t bytes, struct dbuf *b)
{
	b->bytes = bytes;
	b->dev = NULL;
	b->host = malloc(bytes ? bytes : 1);
	if (!b->host)
		return -ENOMEM;
#if KVS_HAVE_CUDA
	if (n->cuda && cudaMalloc(&b->dev, bytes ? bytes : 1) != cudaSuccess) {
		free(b->host);
		b->host = NULL;
		return -KVS_ECUDA;
	}
#else
	(void)n;
#endif
	return 0;
}

static void dbuf_free(struct dbuf *b)
{
#if KVS_HAVE_CUDA
	if (b->dev)
		cudaFree(b->dev);
#endif
	free(b->host);
	b->host = b->dev = NULL;
}

/* What the runtime is given. */
static void *dbuf_ptr(const struct dbuf *b)
{
	return b->dev ? b->dev : b->host;
}

static int dbuf_up(const struct dbuf *b)
{
#if KVS_HAVE_CUDA
	if (b->dev && cudaMemcpy(b->dev, b->host, b->bytes,
				 cudaMemcpyHostToDevice) != cudaSuccess)
		return -KVS_ECUDA;
#else
	(void)b;
#endif
	return 0;
}

static int dbuf_down(const struct dbuf *b)
{
#if KVS_HAVE_CUDA
	if (b->dev && cudaMemcpy(b->host, b->dev, b->bytes,
				 cudaMemcpyDeviceToHost) != cudaSuccess)
		return -KVS_ECUDA;
#else
	(void)b;
#endif
	return 0;
}

/* @count floats as fp16 into @out. */
static void to_f16(const float *in, size_t count, void *out)
{
	for (size_t i = 0; i < count; i++)
		kvs_dtype_store(KVS_DTYPE_F16, out, i, in[i]);
}

/* ---- setting up ------------------------------------------------------- */

static void request_id(const struct node_args *a, uint8_t id[KVS_ID_SIZE])
{
	memset(id, 0, KVS_ID_SIZE);
	snprintf((char *)id, KVS_ID_SIZE, "kvstash-demo-%llu-%u",
		 (unsigned long long)a->m.seed, a->request);
}

static int connect_store(const struct node_args *a, struct kvs_blockstore **out)
{
	struct kvs_client_opts o;
	struct kvs_client *c;
	int err;

	kvs_client_opts_default(&o);
	o.address = a->server;
	o.key_file = a->key_file;
	err = kvs_client_connect(&o, &c);
	if (err) {
		kvs_cli_error(NODE, "%s: %s", a->server, kvs_strerror(err));
		return err;
	}
	err = kvs_blockstore_remote(c, out);
	if (err) {
		kvs_client_close(c);
		kvs_cli_fail(NODE, err, "block store");
	}
	return err;
}

/* A runtime of the model over @bs (NULL: none) and one sequence. */
static int make_runtime(const struct node_args *a, struct kvs_blockstore *bs,
			struct kvs_rt **rt, struct kvs_seq **seq)
{
	const struct demo_model *m = &a->m;
	struct kvs_rt_config cfg;
	struct kvs_batch *batch;
	uint32_t tokens = a->prompt + a->steps;
	int err;

	kvs_rt_config_default(&cfg, m->layers, m->q_heads,
			      (uint16_t)m->kv_heads, (uint16_t)m->head_dim);
	cfg.shape.span = m->residual;
	cfg.shape.residual = m->residual;
	cfg.kv_dtype = KVS_DTYPE_F16;
	cfg.out_dtype = KVS_DTYPE_F32;
	cfg.device = strcmp(a->device, "cpu") == 0    ? KVS_RT_CPU
		     : strcmp(a->device, "cuda") == 0 ? KVS_RT_CUDA
						      : KVS_RT_AUTO;
	cfg.max_tokens = (tokens / m->residual + 2) * m->residual;
	cfg.pool_pages = m->layers * (cfg.max_tokens / m->residual + 1);
	cfg.model_id = "kvstash-demo";
	cfg.store = bs;
	err = kvs_rt_create(&cfg, rt);
	if (err)
		return kvs_cli_fail(NODE, err, "runtime"), err;
	err = kvs_batch_create(*rt, 1, &batch);
	if (!err)
		err = kvs_seq_create(batch, seq);
	if (err) {
		kvs_rt_destroy(*rt);
		kvs_cli_fail(NODE, err, "sequence");
	}
	return err;
}

/* ---- prefill and decode ------------------------------------------------- */

/* Tokens [from, to) of the prompt into every layer. */
static int prefill(struct node *n, uint32_t from, uint32_t to,
		   const char *label)
{
	const struct demo_model *m = &n->a->m;
	size_t row = (size_t)m->kv_heads * m->head_dim, count = to - from;
	size_t elems = row * count;
	float *k = malloc(sizeof(float) * (elems ? elems : 1));
	float *v = malloc(sizeof(float) * (elems ? elems : 1));
	struct dbuf dk = { 0 }, dv = { 0 };
	int err = -ENOMEM;

	if (!k || !v || dbuf_alloc(n, 2 * elems, &dk) ||
	    dbuf_alloc(n, 2 * elems, &dv))
		goto out;
	err = 0;
	for (uint32_t l = 0; l < m->layers && count && !err; l++) {
		for (uint32_t t = from; t < to; t++)
			demo_token_kv(m, l, t, n->ids[t],
				      k + (size_t)(t - from) * m->head_dim,
				      v + (size_t)(t - from) * m->head_dim,
				      count * m->head_dim);
		to_f16(k, elems, dk.host);
		to_f16(v, elems, dv.host);
		err = dbuf_up(&dk);
		if (!err)
			err = dbuf_up(&dv);
		if (!err)
			err = kvs_seq_prefill(n->seq, l, dbuf_ptr(&dk),
					      dbuf_ptr(&dv), (uint32_t)count);
		progress(label, l + 1, m->layers);
	}
	if (!err)
		err = kvs_rt_sync(n->rt);
	if (err)
		kvs_cli_fail(NODE, err, "prefill");
out:
	if (err == -ENOMEM)
		kvs_cli_error(NODE, "out of memory for %zu tokens", count);
	dbuf_free(&dk);
	dbuf_free(&dv);
	free(k);
	free(v);
	return err;
}

/* The prompt's full-precision K/V into the reference history. */
static void reference_prompt(struct node *n)
{
	const struct demo_model *m = &n->a->m;

	for (uint32_t l = 0; l < m->layers; l++) {
		for (uint32_t t = 0; t < n->a->prompt; t++) {
			size_t at = ((size_t)l * m->kv_heads * n->cap + t) *
				    m->head_dim;

			demo_token_kv(m, l, t, n->ids[t], n->ref_k + at,
				      n->ref_v + at,
				      (size_t)n->cap * m->head_dim);
		}
	}
}

/* Decodes the steps after the prompt; outputs appended to @out (may be
 * NULL), errors against the reference when it is kept. */
static int decode(struct node *n, float *out, const char *label)
{
	const struct demo_model *m = &n->a->m;
	size_t row = (size_t)m->kv_heads * m->head_dim;
	size_t qrow = (size_t)m->q_heads * m->head_dim;
	float *q = malloc(sizeof(float) * qrow),
	      *k = malloc(sizeof(float) * row);
	float *v = malloc(sizeof(float) * row),
	      *ref = malloc(sizeof(float) * qrow);
	struct dbuf dq = { 0 }, dk = { 0 }, dv = { 0 }, dout = { 0 };
	int err = -ENOMEM;

	if (!q || !k || !v || !ref || dbuf_alloc(n, 2 * qrow, &dq) ||
	    dbuf_alloc(n, 2 * row, &dk) || dbuf_alloc(n, 2 * row, &dv) ||
	    dbuf_alloc(n, 4 * qrow, &dout))
		goto out;
	err = 0;
	for (uint32_t s = 0; s < n->a->steps && !err; s++) {
		uint32_t pos = n->a->prompt + s;

		for (uint32_t l = 0; l < m->layers && !err; l++) {
			demo_token_q(m, l, pos, n->a->request, q);
			demo_token_kv(m, l, pos, n->ids[pos], k, v,
				      m->head_dim);
			to_f16(q, qrow, dq.host);
			to_f16(k, row, dk.host);
			to_f16(v, row, dv.host);
			err = dbuf_up(&dq);
			if (!err)
				err = dbuf_up(&dk);
			if (!err)
				err = dbuf_up(&dv);
			if (!err)
				err = kvs_seq_step(n->seq, l, dbuf_ptr(&dq),
						   dbuf_ptr(&dk), dbuf_ptr(&dv),
						   dbuf_ptr(&dout));
			if (!err)
				err = kvs_rt_sync(n->rt);
			if (!err)
				err = dbuf_down(&dout);
			if (err)
				break;
			if (out)
				memcpy(out + ((size_t)s * m->layers + l) * qrow,
				       dout.host, sizeof(float) * qrow);
			if (!n->ref_k)
				continue;
			for (uint32_t h = 0; h < m->kv_heads; h++) {
				size_t at = (((size_t)l * m->kv_heads + h) *
						     n->cap +
					     pos) *
					    m->head_dim;

				memcpy(n->ref_k + at, k + h * m->head_dim,
				       sizeof(float) * m->head_dim);
				memcpy(n->ref_v + at, v + h * m->head_dim,
				       sizeof(float) * m->head_dim);
			}
			err = demo_attention(
				m, q,
				n->ref_k + (size_t)l * m->kv_heads * n->cap *
						   m->head_dim,
				n->ref_v + (size_t)l * m->kv_heads * n->cap *
						   m->head_dim,
				pos + 1, n->cap, ref);
			if (!err)
				demo_error_add(&n->err, ref, dout.host, qrow);
		}
		if (!err)
			err = kvs_seq_append_ids(n->seq, &n->ids[pos], 1);
		progress(label, s + 1, n->a->steps);
	}
	if (err)
		kvs_cli_fail(NODE, err, "decode");
out:
	if (err == -ENOMEM)
		kvs_cli_error(NODE, "out of memory");
	dbuf_free(&dq);
	dbuf_free(&dk);
	dbuf_free(&dv);
	dbuf_free(&dout);
	free(q);
	free(k);
	free(v);
	free(ref);
	return err;
}

static int write_outputs(const char *path, const float *out, size_t count)
{
	if (!path)
		return 0;
	return kvs_cli_write_file(NODE, path, out, sizeof(float) * count);
}

/* What went through the block store, for the summary. */
static void store_facts(const struct node *n)
{
	const struct demo_model *m = &n->a->m;
	struct kvs_blockstore_counters c;
	double fp16_block = 4.0 * m->kv_heads * m->head_dim * m->residual;

	kvs_blockstore_counters(n->bs, &c);
	fact("blocks_put", (double)c.put);
	fact("blocks_got", (double)c.got);
	fact("block_bytes", (double)(c.put_bytes + c.got_bytes));
	fact("tail_bytes", (double)(c.tail_put_bytes + c.tail_take_bytes));
	fact("fp16_bytes",
	     fp16_block * (double)(c.put + c.got) +
		     (double)(c.tail_put_bytes + c.tail_take_bytes));
	fact("get_missed", (double)c.get_missed);
}

static void error_facts(const struct node *n)
{
	if (!n->err.values)
		return;
	fact("err2", n->err.err2);
	fact("ref2", n->err.ref2);
	fact("max_abs", n->err.max_abs);
	fact("values", (double)n->err.values);
}

/* The same prompt computed without the daemon; decodes and compares. */
static int recompute(struct node *n, const float *want, size_t count)
{
	struct node r = *n;
	float *got = malloc(sizeof(float) * (count ? count : 1));
	double max_diff = 0.0;
	int err;

	if (!got)
		return -ENOMEM;
	r.ref_k = r.ref_v = NULL;
	memset(&r.err, 0, sizeof(r.err));
	err = make_runtime(n->a, NULL, &r.rt, &r.seq);
	if (!err)
		err = kvs_seq_append_ids(r.seq, r.ids, n->a->prompt);
	if (!err)
		err = prefill(&r, 0, n->a->prompt, "recompute");
	if (!err)
		err = decode(&r, got, "recompute-decode");
	if (!err) {
		for (size_t i = 0; i < count; i++) {
			double d = (double)got[i] - (double)want[i];

			if (d < 0)
				d = -d;
			if (d > max_diff)
				max_diff = d;
		}
		fact("recompute_identical",
		     memcmp(got, want, sizeof(float) * count) == 0);
		fact("recompute_max_diff", max_diff);
	}
	kvs_rt_destroy(r.rt);
	free(got);
	return err;
}

static int run_prefill(struct node *n)
{
	const struct node_args *a = n->a;
	size_t count =
		(size_t)a->steps * a->m.layers * a->m.q_heads * a->m.head_dim;
	uint32_t attached = 0, kept = 0;
	uint8_t rid[KVS_ID_SIZE];
	struct kvs_rt_stats st;
	float *out = NULL;
	double t0;
	int err;

	if (a->attach) {
		err = kvs_seq_attach_prefix(n->seq, n->ids, a->prompt,
					    UINT32_MAX, &attached);
		if (!err)
			err = kvs_seq_attach_finish(n->seq, &kept);
		if (err)
			return kvs_cli_fail(NODE, err, "attach"), err;
	} else {
		err = kvs_seq_append_ids(n->seq, n->ids, a->prompt);
		if (err)
			return err;
	}
	fact("attached_tokens", kept);
	t0 = now_ms();
	err = prefill(n, kept, a->prompt, "prefill");
	if (err)
		return err;
	fact("prefill_ms", now_ms() - t0);
	fact("prefill_tokens", a->prompt - kept);
	err = kvs_seq_publish(n->seq);
	if (!err)
		err = kvs_rt_flush(n->rt);
	if (!err && a->do_export) {
		request_id(a, rid);
		err = kvs_seq_export_tail(n->seq, rid, 600000);
	}
	if (err)
		return kvs_cli_fail(NODE, err, "publish"), err;
	kvs_rt_stats(n->rt, &st);
	fact("published", (double)st.published);
	fact("publish_skipped", (double)st.publish_skipped);
	fact("exported", a->do_export);
	if (a->steps) {
		out = malloc(sizeof(float) * count);
		if (!out)
			return -ENOMEM;
		err = decode(n, out, "decode");
		if (!err)
			err = write_outputs(a->out, out, count);
		free(out);
	}
	store_facts(n);
	error_facts(n);
	return err;
}

/* Attaches the request's cached prefix, layer by layer as the engine
 * would use them, then computes the rest of the prompt. */
static int attach(struct node *n)
{
	const struct node_args *a = n->a;
	uint32_t attached = 0, kept = 0;
	double t0 = now_ms();
	int err;

	err = kvs_seq_attach_prefix(n->seq, n->ids, a->prompt, UINT32_MAX,
				    &attached);
	for (uint32_t l = 0; !err && attached && l < a->m.layers; l++) {
		/* a layer short of blocks: the finish below says so */
		if (kvs_seq_attach_wait(n->seq, l) == -KVS_ENOTFOUND)
			break;
		progress("attach", l + 1, a->m.layers);
	}
	if (!err)
		err = kvs_seq_attach_finish(n->seq, &kept);
	if (err == -KVS_ENOTFOUND) {
		/* a block went missing after layers were installed: what the
		 * runtime asks of an engine then, a reset and the whole
		 * prompt computed */
		fact("attach_lost", 1);
		kept = 0;
		err = kvs_seq_reset(n->seq);
		if (!err)
			err = kvs_seq_append_ids(n->seq, n->ids, a->prompt);
	}
	if (err)
		return kvs_cli_fail(NODE, err, "attach"), err;
	fact("ready_ms", now_ms() - t0);
	fact("looked_up_tokens", attached);
	fact("attached_tokens", kept);
	fact("prefill_tokens", a->prompt - kept);
	return prefill(n, kept, a->prompt, "prefill");
}

static int run_decode(struct node *n)
{
	const struct node_args *a = n->a;
	size_t count =
		(size_t)a->steps * a->m.layers * a->m.q_heads * a->m.head_dim;
	uint8_t rid[KVS_ID_SIZE];
	float *out = malloc(sizeof(float) * (count ? count : 1));
	double t0 = now_ms();
	int err;

	if (!out)
		return -ENOMEM;
	if (a->import) {
		request_id(a, rid);
		err = kvs_seq_import_tail(n->seq, n->ids, a->prompt, rid);
		if (err)
			kvs_cli_fail(NODE, err, "import");
		else
			fact("ready_ms", now_ms() - t0);
		fact("imported_blocks", kvs_seq_block_count(n->seq, 0));
	} else {
		err = attach(n);
	}
	if (!err)
		err = decode(n, out, "decode");
	if (!err)
		err = write_outputs(a->out, out, count);
	if (!err && a->recompute)
		err = recompute(n, out, count);
	store_facts(n);
	error_facts(n);
	free(out);
	return err;
}

/* ---- the command ----------------------------------------------------------
 */

static int parse(int argc, char **argv, struct node_args *a)
{
	uint64_t seed;
	const char *pos[1];
	size_t n_pos = 0;
	struct kvs_cli_opt opts[N_OPTS] = {
		KVS_OPT_STR("server", &a->server, true),
		KVS_OPT_STR("auth-key-file", &a->key_file, true),
		KVS_OPT_STR("out", &a->out, false),
		KVS_OPT_STR("device", &a->device, false),
		KVS_OPT_U32("request", &a->request, 1, 1000, true),
		KVS_OPT_U32("prompt", &a->prompt, 1, 1u << 22, true),
		KVS_OPT_U32("shared", &a->shared, 0, 1u << 22, false),
		KVS_OPT_U32("steps", &a->steps, 0, 1u << 16, false),
		KVS_OPT_FLAG("export", &a->do_export),
		KVS_OPT_FLAG("attach", &a->attach),
		KVS_OPT_FLAG("import", &a->import),
		KVS_OPT_FLAG("recompute", &a->recompute),
		KVS_OPT_FLAG("reference", &a->reference),
		KVS_OPT_U32("layers", &a->m.layers, 1, 256, false),
		KVS_OPT_U32("q-heads", &a->m.q_heads, 1, 256, false),
		KVS_OPT_U32("kv-heads", &a->m.kv_heads, 1, 64, false),
		KVS_OPT_U32("head-dim", &a->m.head_dim, 32, 256, false),
		KVS_OPT_U32("residual", &a->m.residual, 32, 1024, false),
		KVS_OPT_U64("seed", &seed, 1, 0, false),
	};
	int rc;

	a->device = "auto";
	demo_model_default(&a->m);
	seed = a->m.seed;
	rc = kvs_cli_parse(NODE, argc, argv, opts, N_OPTS, pos, 1, &n_pos);
	if (rc)
		return rc;
	a->m.seed = seed;
	if (n_pos != 1 ||
	    (strcmp(pos[0], "prefill") != 0 && strcmp(pos[0], "decode") != 0)) {
		kvs_cli_error(NODE, "which role? prefill or decode");
		return -KVS_EPARAM;
	}
	a->role = pos[0];
	if (a->m.q_heads % a->m.kv_heads) {
		kvs_cli_error(NODE, "--q-heads must be a multiple of "
				    "--kv-heads");
		return -KVS_EPARAM;
	}
	return 0;
}

int kvs_cmd_demo_node(int argc, char **argv)
{
	struct node_args a = { 0 };
	struct node n = { .a = &a };
	size_t hist;
	int rc, err;

	rc = parse(argc, argv, &a);
	if (rc)
		return kvs_cli_usage(NODE, node_usage, rc);
	n.ids = malloc(sizeof(*n.ids) * (a.prompt + a.steps));
	if (!n.ids || demo_model_init(&a.m)) {
		kvs_cli_error(NODE, "out of memory");
		free(n.ids);
		return KVS_EXIT_FAIL;
	}
	for (uint32_t i = 0; i < a.prompt + a.steps; i++)
		n.ids[i] = demo_token_id(&a.m, a.request, a.shared, i);
	if (a.reference) {
		n.cap = a.prompt + a.steps;
		hist = (size_t)a.m.layers * a.m.kv_heads * n.cap * a.m.head_dim;
		n.ref_k = malloc(sizeof(float) * hist);
		n.ref_v = malloc(sizeof(float) * hist);
		if (!n.ref_k || !n.ref_v) {
			kvs_cli_error(NODE, "out of memory for the reference");
			rc = KVS_EXIT_FAIL;
			goto out;
		}
		reference_prompt(&n);
	}
	err = connect_store(&a, &n.bs);
	if (err) {
		rc = KVS_EXIT_FAIL;
		goto out;
	}
	err = make_runtime(&a, n.bs, &n.rt, &n.seq);
	if (!err) {
		n.cuda = kvs_rt_device(n.rt) == KVS_RT_CUDA;
		fact("cuda", n.cuda);
		err = strcmp(a.role, "prefill") == 0 ? run_prefill(&n)
						     : run_decode(&n);
		kvs_rt_destroy(n.rt);
	}
	kvs_blockstore_release(n.bs);
	rc = err ? KVS_EXIT_FAIL : KVS_EXIT_OK;
out:
	demo_model_fini(&a.m);
	free(n.ids);
	free(n.ref_k);
	free(n.ref_v);
	return rc;
}
