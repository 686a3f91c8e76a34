/*
 * test_e2e.c - the decode runtime end to end through a real kvstashd on
 * loopback, on the CPU device, with every role in a process of its own:
 * this program runs the tests (cmocka) and, started again by them with a
 * role as its first argument (fork and exec of itself), the prefill, decode,
 * attach, recompute and delete processes.  Each role connects with its
 * tenant's key and talks to the daemon through kvs_blockstore_remote (the
 * attach's gets spread over three connections); it
 * writes its decode outputs (float32) and a line of counts to files that
 * the test compares.
 *
 *  - handoff: decoding after export / import through the daemon equals,
 *    bit for bit, the prefill process decoding on by itself; a tail is
 *    taken once;
 *  - prefix: a process attaching the cached prefix decodes bit for bit as
 *    one that recomputes the prompt;
 *  - namespaces: another tenant's namespace finds nothing, a tenant bound
 *    to the same namespace finds it all;
 *  - delete: a block deleted by another process between the attach's
 *    lookup and its fetch shortens the prefix to what arrived, and the
 *    outputs still equal the recompute's.
 *
 * The daemon comes from KVSTASHD; scratch files live under KVS_TEST_DIR.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rt_test.h"
#include "service_util.h"

#define SEED 41
#define ID_SEED 43
#define STEPS 40
#define POOL 128
#define TTL_MS 60000

static const char *self_exe;

/* ---- the roles (child processes) -------------------------------------- */

struct role_args {
	const char *addr, *key_file, *out;
	enum kvs_dtype dtype;
	enum kvs_order order;
	uint32_t prompt, req;
	int sync_out, sync_in; /* delete-hook pipe ends, -1: none */
};

static void request_id(uint32_t n, uint8_t id[KVS_ID_SIZE])
{
	memset(id, 0, KVS_ID_SIZE);
	memcpy(id, &n, sizeof(n));
	id[31] = 0xe2;
}

/* The daemon as a block store whose gets go over @lanes connections. */
static struct kvs_blockstore *remote_store(const struct role_args *a,
					   unsigned lanes)
{
	struct kvs_client_opts o;
	struct kvs_client *c = NULL;
	struct kvs_blockstore *bs = NULL;

	kvs_client_opts_default(&o);
	o.address = a->addr;
	o.key_file = a->key_file;
	assert_int_equal(kvs_client_connect(&o, &c), 0);
	assert_int_equal(kvs_blockstore_remote_lanes(c, lanes, &bs), 0);
	return bs;
}

static void write_outputs(const char *path, const float *out, size_t n,
			  const char *counts)
{
	char p[1024];
	FILE *f = fopen(path, "wb");

	assert_non_null(f);
	assert_int_equal(fwrite(out, sizeof(float), n, f), n);
	assert_int_equal(fclose(f), 0);
	snprintf(p, sizeof(p), "%s.counts", path);
	f = fopen(p, "w");
	assert_non_null(f);
	fputs(counts, f);
	assert_int_equal(fclose(f), 0);
}

#define OUT_FLOATS ((size_t)STEPS * T_LAYERS * T_OUT)

/* A runtime of the test model over @bs (NULL: none), one sequence. */
static struct kvs_seq *one_seq(const struct role_args *a,
			       struct kvs_blockstore *bs, struct kvs_rt **rt)
{
	struct kvs_batch *b;
	struct kvs_seq *seq;

	*rt = t_runtime(a->dtype, a->order, "", POOL, bs);
	assert_int_equal(kvs_batch_create(*rt, 1, &b), 0);
	assert_int_equal(kvs_seq_create(b, &seq), 0);
	return seq;
}

/* Decodes STEPS after the prompt and writes them with @counts. */
static void decode_out(const struct role_args *a, struct kvs_seq *seq,
		       const char *counts)
{
	float *out = malloc(sizeof(float) * OUT_FLOATS);

	assert_non_null(out);
	t_decode(seq, SEED + a->req, ID_SEED + a->req, a->dtype, a->prompt,
		 STEPS, out);
	write_outputs(a->out, out, OUT_FLOATS, counts);
	free(out);
}

/* prefill: computes the prompt, publishes, exports the tails, then goes
 * on decoding by itself (the outputs without a handoff). */
static int role_prefill(const struct role_args *a)
{
	struct kvs_blockstore *bs = remote_store(a, 1);
	uint32_t *ids = t_ids(ID_SEED + a->req, a->prompt);
	uint8_t rid[KVS_ID_SIZE];
	struct kvs_rt_stats st;
	struct kvs_rt *rt;
	struct kvs_seq *seq = one_seq(a, bs, &rt);
	char counts[128];

	request_id(a->req, rid);
	assert_int_equal(kvs_seq_append_ids(seq, ids, a->prompt), 0);
	assert_int_equal(t_prefill(seq, SEED + a->req, a->dtype, 0, a->prompt),
			 0);
	assert_int_equal(kvs_seq_export_tail(seq, rid, TTL_MS), 0);
	kvs_rt_stats(rt, &st);
	snprintf(counts, sizeof(counts), "published %llu\n",
		 (unsigned long long)st.published);
	decode_out(a, seq, counts);
	kvs_rt_destroy(rt);
	kvs_blockstore_release(bs);
	free(ids);
	return 0;
}

/* decode: imports the request (blocks and tails) and decodes; exit 3
 * when the import finds nothing. */
static int role_decode(const struct role_args *a)
{
	struct kvs_blockstore *bs = remote_store(a, 1);
	uint32_t *ids = t_ids(ID_SEED + a->req, a->prompt);
	uint8_t rid[KVS_ID_SIZE];
	struct kvs_rt *rt;
	struct kvs_seq *seq = one_seq(a, bs, &rt);
	char counts[128];
	int err;

	request_id(a->req, rid);
	err = kvs_seq_import_tail(seq, ids, a->prompt, rid);
	if (err == -KVS_ENOTFOUND)
		return 3;
	assert_int_equal(err, 0);
	assert_int_equal(kvs_seq_tokens(seq, 0), a->prompt);
	snprintf(counts, sizeof(counts), "blocks %u\n",
		 kvs_seq_block_count(seq, 0));
	decode_out(a, seq, counts);
	kvs_rt_destroy(rt);
	kvs_blockstore_release(bs);
	free(ids);
	return 0;
}

/* A block store over the remote one whose first get first tells the
 * parent (a byte on sync_out) and waits for its answer (a byte on
 * sync_in): the parent deletes a block meanwhile, from another process. */
struct hooked {
	struct kvs_blockstore *inner;
	int sync_out, sync_in;
	bool fired;
};

static int hk_lookup(void *ctx, const uint8_t (*ids)[KVS_ID_SIZE], size_t n,
		     const uint32_t *layers, size_t n_layers, size_t *prefix)
{
	struct hooked *h = ctx;

	return kvs_blockstore_lookup(h->inner, ids, n, layers, n_layers,
				     prefix);
}

static int hk_get(void *ctx, const struct kvs_store_key *keys, size_t n,
		  void *const *bufs, const size_t *caps, size_t *lens,
		  int *results)
{
	struct hooked *h = ctx;
	char byte = 'g';

	if (!h->fired) {
		h->fired = true;
		assert_int_equal(write(h->sync_out, &byte, 1), 1);
		assert_int_equal(read(h->sync_in, &byte, 1), 1);
	}
	return kvs_blockstore_get(h->inner, keys, n, bufs, caps, lens, results);
}

static int hk_put(void *ctx, const uint8_t *const *objs, const size_t *lens,
		  size_t n, int *results)
{
	struct hooked *h = ctx;

	return kvs_blockstore_put(h->inner, objs, lens, n, results);
}

static int hk_tail_put(void *ctx, const uint8_t key[KVS_ID_SIZE],
		       const uint8_t *tail, size_t len, uint32_t ttl_ms)
{
	struct hooked *h = ctx;

	return kvs_blockstore_tail_put(h->inner, key, tail, len, ttl_ms);
}

static int hk_tail_take(void *ctx, const uint8_t key[KVS_ID_SIZE], void *buf,
			size_t cap, size_t *len)
{
	struct hooked *h = ctx;

	return kvs_blockstore_tail_take(h->inner, key, buf, cap, len);
}

static const struct kvs_blockstore_ops hooked_ops = {
	.name = "hooked",
	.lookup = hk_lookup,
	.get = hk_get,
	.put = hk_put,
	.tail_put = hk_tail_put,
	.tail_take = hk_tail_take,
};

/* attach: the cached prefix of the prompt, then the rest computed, then
 * decoding; with the pipe ends, through the hooked store. */
static int role_attach(const struct role_args *a)
{
	struct kvs_blockstore *remote = remote_store(a, 3), *bs = remote;
	struct hooked h = { .inner = remote,
			    .sync_out = a->sync_out,
			    .sync_in = a->sync_in };
	uint32_t *ids = t_ids(ID_SEED + a->req, a->prompt);
	uint32_t looked = 0, attached = 0, kept = 0;
	struct kvs_rt_stats st;
	struct kvs_rt *rt;
	struct kvs_seq *seq;
	char counts[256];

	if (a->sync_out >= 0)
		assert_int_equal(kvs_blockstore_create(&hooked_ops, &h, &bs),
				 0);
	seq = one_seq(a, bs, &rt);
	assert_int_equal(kvs_rt_lookup_prefix(rt, ids, a->prompt, &looked), 0);
	assert_int_equal(kvs_seq_attach_prefix(seq, ids, a->prompt, UINT32_MAX,
					       &attached),
			 0);
	assert_int_equal(kvs_seq_attach_finish(seq, &kept), 0);
	assert_int_equal(
		t_prefill(seq, SEED + a->req, a->dtype, kept, a->prompt - kept),
		0);
	kvs_rt_stats(rt, &st);
	snprintf(counts, sizeof(counts),
		 "looked %u attached %u kept %u missed %llu\n", looked,
		 attached, kept, (unsigned long long)st.fetch_missed);
	decode_out(a, seq, counts);
	kvs_rt_destroy(rt);
	if (bs != remote)
		kvs_blockstore_release(bs);
	kvs_blockstore_release(remote);
	free(ids);
	return 0;
}

/* recompute: the prompt computed without any store. */
static int role_recompute(const struct role_args *a)
{
	uint32_t *ids = t_ids(ID_SEED + a->req, a->prompt);
	struct kvs_rt *rt;
	struct kvs_seq *seq = one_seq(a, NULL, &rt);

	assert_int_equal(kvs_seq_append_ids(seq, ids, a->prompt), 0);
	assert_int_equal(t_prefill(seq, SEED + a->req, a->dtype, 0, a->prompt),
			 0);
	decode_out(a, seq, "recomputed\n");
	kvs_rt_destroy(rt);
	free(ids);
	return 0;
}

/* delete: block (@span, layer 1) of request a->req's prompt of @prompt
 * tokens, through the daemon. */
static int role_delete(const struct role_args *a, uint32_t span,
		       uint32_t prompt)
{
	struct kvs_blockstore *bs = remote_store(a, 1);
	uint32_t *ids = t_ids(ID_SEED + a->req, prompt);
	uint8_t(*span_ids)[KVS_ID_SIZE] = malloc(KVS_ID_SIZE * (span + 1));
	struct kvs_store_key key;
	struct kvs_rt *rt = t_runtime(a->dtype, a->order, "", 8, NULL);
	int res = -1;

	for (uint32_t i = 0; i <= span; i++)
		assert_int_equal(kvs_span_id("", kvs_rt_model_fp(rt),
					     i ? span_ids[i - 1] : NULL,
					     ids + i * T_R, T_R, span_ids[i]),
				 0);
	memcpy(key.span_id, span_ids[span], KVS_ID_SIZE);
	key.layer = 1;
	assert_int_equal(kvs_blockstore_remove(bs, &key, 1, &res), 0);
	assert_int_equal(res, 0);
	kvs_rt_destroy(rt);
	kvs_blockstore_release(bs);
	free(span_ids);
	free(ids);
	return 0;
}

/* argv: ROLE ADDR KEYFILE OUT DTYPE ORDER PROMPT REQ [SYNC_OUT SYNC_IN]
 * (delete: ... PROMPT REQ SPAN). */
static int run_role(int argc, char **argv)
{
	struct role_args a = { .sync_out = -1, .sync_in = -1 };

	if (argc < 9)
		return 2;
	a.addr = argv[2];
	a.key_file = argv[3];
	a.out = argv[4];
	a.dtype = (enum kvs_dtype)atoi(argv[5]);
	a.order = (enum kvs_order)atoi(argv[6]);
	a.prompt = (uint32_t)atoi(argv[7]);
	a.req = (uint32_t)atoi(argv[8]);
	if (argc >= 11) {
		a.sync_out = atoi(argv[9]);
		a.sync_in = atoi(argv[10]);
	}
	if (strcmp(argv[1], "prefill") == 0)
		return role_prefill(&a);
	if (strcmp(argv[1], "decode") == 0)
		return role_decode(&a);
	if (strcmp(argv[1], "attach") == 0)
		return role_attach(&a);
	if (strcmp(argv[1], "recompute") == 0)
		return role_recompute(&a);
	if (strcmp(argv[1], "delete") == 0 && argc >= 10)
		return role_delete(&a, (uint32_t)atoi(argv[9]), a.prompt);
	return 2;
}

/* ---- the tests (parent) ------------------------------------------------- */

static struct daemon the_daemon;

static int setup(void **state)
{
	(void)state;
	daemon_prepare(&the_daemon, "e2e");
	daemon_start(&the_daemon, NULL);
	return 0;
}

static int teardown(void **state)
{
	assert_int_equal(daemon_stop(&the_daemon, SIGTERM, 10000), 0);
	daemon_cleanup(&the_daemon);
	return daemons_reap(state);
}

struct job {
	const char *role, *tenant;
	enum kvs_dtype dtype;
	enum kvs_order order;
	uint32_t prompt, req;
	const char *extra[2]; /* SYNC_OUT SYNC_IN or SPAN */
};

/* The path of output @name in the daemon's scratch directory. */
static const char *out_path(const char *name)
{
	static __thread char path[4][700];
	static __thread unsigned next;
	char *p = path[next++ % 4];

	snprintf(p, 700, "%s/%s", the_daemon.dir, name);
	return p;
}

static pid_t start(const struct job *j, const char *out)
{
	char dtype[8], order[8], prompt[16], req[16];
	const char *argv[16];
	int argc = 0;
	pid_t pid;

	snprintf(dtype, sizeof(dtype), "%d", (int)j->dtype);
	snprintf(order, sizeof(order), "%d", (int)j->order);
	snprintf(prompt, sizeof(prompt), "%u", j->prompt);
	snprintf(req, sizeof(req), "%u", j->req);
	argv[argc++] = self_exe;
	argv[argc++] = j->role;
	argv[argc++] = the_daemon.addr;
	argv[argc++] = key_path(&the_daemon, j->tenant);
	argv[argc++] = out;
	argv[argc++] = dtype;
	argv[argc++] = order;
	argv[argc++] = prompt;
	argv[argc++] = req;
	for (int i = 0; i < 2 && j->extra[i]; i++)
		argv[argc++] = j->extra[i];
	argv[argc] = NULL;
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		execv(self_exe, (char *const *)argv);
		_exit(127);
	}
	return pid;
}

/* Waits at most 60 s for @pid; its exit status (killed: -1). */
static int finish(pid_t pid)
{
	uint64_t deadline = ms_now() + 60000;
	int status;

	while (waitpid(pid, &status, WNOHANG) != pid) {
		if (ms_now() > deadline) {
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
			return -1;
		}
		usleep(2000);
	}
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static int run(const struct job *j, const char *out)
{
	return finish(start(j, out));
}

static float *read_outputs(const char *path)
{
	float *out = malloc(sizeof(float) * OUT_FLOATS);
	FILE *f = fopen(path, "rb");

	assert_non_null(out);
	assert_non_null(f);
	assert_int_equal(fread(out, sizeof(float), OUT_FLOATS, f), OUT_FLOATS);
	fclose(f);
	return out;
}

static void read_counts(const char *path, const char *fmt, int n, ...)
{
	char p[800], line[256];
	va_list ap;
	FILE *f;

	snprintf(p, sizeof(p), "%s.counts", path);
	f = fopen(p, "r");
	assert_non_null(f);
	assert_non_null(fgets(line, sizeof(line), f));
	fclose(f);
	va_start(ap, n);
	assert_int_equal(vsscanf(line, fmt, ap), n);
	va_end(ap);
}

static void assert_same_outputs(const char *a, const char *b)
{
	float *x = read_outputs(a), *y = read_outputs(b);
	bool nonzero = false;

	for (size_t i = 0; i < OUT_FLOATS; i++)
		nonzero = nonzero || x[i] != 0.0f;
	assert_true(nonzero);
	if (memcmp(x, y, sizeof(float) * OUT_FLOATS) != 0)
		fail_msg("decode outputs of %s and %s differ", a, b);
	free(x);
	free(y);
}

static void check_handoff(enum kvs_dtype dtype, enum kvs_order order,
			  uint32_t prompt, uint32_t req)
{
	struct job pre = {
		"prefill", "alice", dtype, order, prompt, req, { 0 }
	};
	struct job dec = {
		"decode", "alice", dtype, order, prompt, req, { 0 }
	};
	char ref[64], got[64];
	unsigned published = 0, blocks = 0;

	snprintf(ref, sizeof(ref), "handoff-%u.ref", req);
	snprintf(got, sizeof(got), "handoff-%u.out", req);
	assert_int_equal(run(&pre, out_path(ref)), 0);
	assert_int_equal(run(&dec, out_path(got)), 0);
	assert_same_outputs(out_path(ref), out_path(got));
	read_counts(out_path(ref), "published %u", 1, &published);
	read_counts(out_path(got), "blocks %u", 1, &blocks);
	assert_int_equal(published, (prompt / T_R) * T_LAYERS);
	assert_int_equal(blocks, prompt / T_R);
	/* the tails were taken: a second import finds nothing */
	assert_int_equal(run(&dec, out_path("handoff-again.out")), 3);
}

static void test_handoff_bit_exact(void **state)
{
	(void)state;
	check_handoff(KVS_DTYPE_F16, KVS_ORDER_KIVI, 150, 1);
	check_handoff(KVS_DTYPE_BF16, KVS_ORDER_PAPER, 96, 2);
	check_handoff(KVS_DTYPE_F16, KVS_ORDER_KIVI, 20, 3);
}

/* Publishes request @req's prompt as @tenant (the prefill role). */
static void publish(const char *tenant, uint32_t prompt, uint32_t req)
{
	struct job pre = { "prefill", tenant, KVS_DTYPE_F16, KVS_ORDER_KIVI,
			   prompt,    req,    { 0 } };

	assert_int_equal(run(&pre, out_path("publish.out")), 0);
}

/* Attaches request @req as @tenant; checks the outputs against a
 * recompute; returns the tokens the lookup found and kept. */
static void attach_check(const char *tenant, uint32_t prompt, uint32_t req,
			 uint32_t *looked, uint32_t *kept)
{
	struct job att = { "attach", tenant, KVS_DTYPE_F16, KVS_ORDER_KIVI,
			   prompt,   req,    { 0 } };
	struct job rec = { "recompute", tenant, KVS_DTYPE_F16, KVS_ORDER_KIVI,
			   prompt,	req,	{ 0 } };
	unsigned attached = 0, missed = 0;

	assert_int_equal(run(&att, out_path("attach.out")), 0);
	assert_int_equal(run(&rec, out_path("recompute.out")), 0);
	assert_same_outputs(out_path("attach.out"), out_path("recompute.out"));
	read_counts(out_path("attach.out"),
		    "looked %u attached %u kept %u missed %u", 4, looked,
		    &attached, kept, &missed);
	assert_int_equal(attached, *kept);
	assert_int_equal(missed, 0);
}

static void test_prefix_equals_recompute(void **state)
{
	uint32_t looked = 0, kept = 0;

	(void)state;
	publish("alice", 200, 10);
	attach_check("alice", 200, 10, &looked, &kept);
	/* six spans cached; five leave the last R tokens to compute */
	assert_int_equal(looked, 192);
	assert_int_equal(kept, 160);
}

static void test_namespaces(void **state)
{
	uint32_t looked = 7, kept = 7;

	(void)state;
	publish("alice", 200, 20);
	/* bob's namespace is "b": nothing of alice's */
	attach_check("bob", 200, 20, &looked, &kept);
	assert_int_equal(looked, 0);
	assert_int_equal(kept, 0);
	/* carol is bound to alice's namespace "a" */
	attach_check("carol", 200, 20, &looked, &kept);
	assert_int_equal(looked, 192);
	assert_int_equal(kept, 160);
	/* and what bob publishes stays his */
	publish("bob", 200, 21);
	attach_check("alice", 200, 21, &looked, &kept);
	assert_int_equal(looked, 0);
	attach_check("bob", 200, 21, &looked, &kept);
	assert_int_equal(kept, 160);
}

static void test_deleted_block_recomputes(void **state)
{
	int to_parent[2], to_child[2];
	char sync_out[16], sync_in[16];
	struct job att = {
		"attach", "alice", KVS_DTYPE_F16,	 KVS_ORDER_KIVI,
		200,	  30,	   { sync_out, sync_in }
	};
	struct job del = { "delete", "carol", KVS_DTYPE_F16, KVS_ORDER_KIVI,
			   200,	     30,      { "2", NULL } };
	struct job rec = { "recompute", "alice", KVS_DTYPE_F16, KVS_ORDER_KIVI,
			   200,		30,	 { 0 } };
	unsigned looked = 0, attached = 0, kept = 0, missed = 0;
	char byte;
	pid_t pid;

	(void)state;
	publish("alice", 200, 30);
	assert_int_equal(pipe(to_parent), 0);
	assert_int_equal(pipe(to_child), 0);
	snprintf(sync_out, sizeof(sync_out), "%d", to_parent[1]);
	snprintf(sync_in, sizeof(sync_in), "%d", to_child[0]);
	pid = start(&att, out_path("deleted.out"));
	close(to_parent[1]);
	close(to_child[0]);
	/* the attach looked up five spans and is about to fetch them:
	 * another process (carol, alice's namespace) deletes span 2 of
	 * layer 1 through the daemon */
	assert_int_equal(read(to_parent[0], &byte, 1), 1);
	assert_int_equal(run(&del, out_path("delete.out")), 0);
	assert_int_equal(write(to_child[1], &byte, 1), 1);
	assert_int_equal(finish(pid), 0);
	close(to_parent[0]);
	close(to_child[1]);
	assert_int_equal(run(&rec, out_path("recompute.out")), 0);
	assert_same_outputs(out_path("deleted.out"), out_path("recompute.out"));
	read_counts(out_path("deleted.out"),
		    "looked %u attached %u kept %u missed %u", 4, &looked,
		    &attached, &kept, &missed);
	assert_int_equal(looked, 192);
	assert_int_equal(attached, 160);
	assert_int_equal(kept, 64); /* spans 0 and 1 arrived everywhere */
	assert_int_equal(missed, 1);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_handoff_bit_exact),
		cmocka_unit_test(test_prefix_equals_recompute),
		cmocka_unit_test(test_namespaces),
		cmocka_unit_test(test_deleted_block_recomputes),
	};
	static char exe[4096];
	ssize_t n;

	if (argc > 1)
		return run_role(argc, argv);
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n <= 0) {
		fprintf(stderr, "cannot find this program: %s\n",
			strerror(errno));
		return 1;
	}
	exe[n] = '\0';
	self_exe = exe;
	return cmocka_run_group_tests(tests, setup, teardown);
}
