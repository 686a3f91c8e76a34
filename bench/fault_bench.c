/*
 * fault_bench.c - kvstashd killed and restarted under load: what clients
 * see, and that nothing acknowledged is lost or served wrong.
 *
 *   fault_bench --kvstashd PATH --dir DIR [--threads N] [--restarts K]
 *               [--signal kill|term] [--nodes 1|3] [--up-ms MS]
 *               [--timeout-ms MS] [--prefill MIB]
 *
 * Starts --nodes daemons on 127.0.0.1 (stores in a fresh directory under
 * DIR, removed after a run that passed; with 3, a
 * cluster client over the fixed list, 2 replicas), N client threads with
 * a client each driving lookups, gets and durable puts of blocks of their
 * own without pause, and K times: waits --up-ms, stops one daemon (in
 * turn) with SIGKILL or SIGTERM and starts it again at once on the same
 * port.  Each restart records when the daemon was signalled, when it
 * exited, when it listened again (its ready file, written once its store
 * is recovered), when a request started after the signal first
 * succeeded (in a cluster: on the replicas) and when one first succeeded
 * after the old daemon was gone (relative to the new one listening;
 * negative in a cluster, where the others answer meanwhile).  Every request's
 * outcome is counted by kind and error; a call that takes longer than its
 * timeout and a second is a hang.  Gets compare the bytes with those put; at
 * the end every block acknowledged durable is read back and compared bit for
 * bit (lost, wrong).  New blocks are put until they fill half the
 * store's NVMe tier (a cache that is full evicts, which is no loss); the
 * puts after that are of blocks already acknowledged.  With
 * --prefill the first daemon's store is first filled with that many MiB
 * of durable blocks, so the restarts show the recovery of a store
 * of that size.  Exits 0 when nothing was lost, wrong or hung and every
 * restart was followed by a success; prints the figures as one JSON
 * object.  FAULT_KEEP=1 in the environment keeps the stores and the
 * daemons' logs (at level info: each stop's phases timed) of a run that
 * passed too.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/rng.h"
#include "kvstash/client.h"
#include "kvstash/error.h"
#include "kvstash/kvformat.h"

#define NODES_MAX 3
#define RESTARTS_MAX 64
#define IMAGES 4 /* distinct K/V per thread, finished per block id */
#define PUTS_MAX 200000
#define NVME_GIB 4 /* each daemon's NVMe tier */
#define STR_(x) #x
#define STR(x) STR_(x)

enum op { OP_LOOKUP, OP_GET, OP_PUT, OP_N };
enum why { WHY_CONN, WHY_TIMEDOUT, WHY_OTHER, WHY_N };
static const char *const op_names[OP_N] = { "lookup", "get", "put" };
static const char *const why_names[WHY_N] = { "connection", "timeout",
					      "other" };

struct node {
	pid_t pid;
	int port;
	char dir[520], ready[560], log[560];
};

struct restart {
	int node;
	uint64_t stop_ns, exit_ns, start_ns, ready_ns;
	uint64_t first_ok_ns; /* a request started after stop_ns (atomic) */
	/* a success completed once the old daemon was gone (atomic), so
	 * served by the new one or, in a cluster, by the others */
	uint64_t first_new_ns;
};

struct worker {
	int id;
	pthread_t thread;
	struct kvs_client *client;
	uint8_t *image[IMAGES];
	uint32_t *acked; /* sequence numbers of acknowledged puts */
	size_t n_acked;
	uint64_t ok[OP_N], failed[OP_N][WHY_N];
	uint64_t wrong, missing, hung, max_call_ns;
	int other_error; /* the last failure of cause "other" */
};

static struct {
	const char *kvstashd, *dir;
	char run[480]; /* this run's directory under dir */
	unsigned threads, restarts, nodes, up_ms, timeout_ms;
	int sig;
	uint64_t prefill;
	char keys[600], servers[256];
	struct kvs_shape shape;
	size_t block_size;
	struct node node[NODES_MAX];
	struct restart restart[RESTARTS_MAX];
	unsigned restart_idx; /* restarts begun (atomic) */
	bool stop; /* atomic */
	_Atomic uint64_t new_bytes; /* new blocks' bytes put or being put */
	uint64_t new_budget; /* at most that: no block evicted */
} B;

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static double ms_of(uint64_t ns)
{
	return (double)ns / 1e6;
}

/* ---- blocks ----------------------------------------------------------- */

/* The key of sequence number @seq of worker @w (worker -1: prefill). */
static void block_ident(int w, uint32_t seq, struct kvs_ident *id)
{
	struct kvs_rng rng = { .state = ((uint64_t)(w + 2) << 32) ^ seq };

	memset(id, 0, sizeof(*id));
	for (int i = 0; i < KVS_ID_SIZE; i += 8) {
		uint64_t x = kvs_rng_next(&rng);

		memcpy(id->block_id + i, &x, 8);
	}
	memset(id->model_fp, 0xfb, KVS_ID_SIZE);
}

static int image_make(uint64_t seed, uint8_t **out)
{
	size_t n = (size_t)B.shape.kv_heads * B.shape.span * B.shape.head_dim;
	float *kv = malloc(2 * n * sizeof(float));
	uint8_t *image = calloc(1, B.block_size);
	struct kvs_rng rng = { .state = seed * 7919 + 1 };
	int err = -ENOMEM;

	if (kv && image) {
		for (size_t i = 0; i < 2 * n; i++)
			kv[i] = kvs_rng_normal(&rng);
		err = kvs_block_quantize(&B.shape, KVS_DTYPE_F32, kv, kv + n,
					 image);
	}
	free(kv);
	if (err) {
		free(image);
		return err;
	}
	*out = image;
	return 0;
}

/* Block @seq of @w, as put: its image finished with its id, into @out. */
static void block_bytes(uint8_t *const *images, int w, uint32_t seq,
			uint8_t *out, struct kvs_store_key *key)
{
	struct kvs_ident id;

	block_ident(w, seq, &id);
	memcpy(out, images[seq % IMAGES], B.block_size);
	(void)kvs_block_finish(&B.shape, &id, out);
	memcpy(key->span_id, id.block_id, KVS_ID_SIZE);
	key->layer = 0;
}

/* ---- daemons ---------------------------------------------------------- */

static int node_start(struct node *n)
{
	char listen[64], buf[64];
	uint64_t deadline = now_ns() + 60000000000ull;
	FILE *f;

	snprintf(listen, sizeof(listen), "127.0.0.1:%d", n->port);
	unlink(n->ready);
	n->pid = fork();
	if (n->pid < 0)
		return -errno;
	if (n->pid == 0) {
		execl(B.kvstashd, "kvstashd", "--listen", listen, "--dir",
		      n->dir, "--auth-key-file", B.keys, "--dram-capacity",
		      "256M", "--nvme-capacity", STR(NVME_GIB) "G",
		      "--segment-size", "64M", "--ready-file", n->ready,
		      "--log-file", n->log, "--log-level", "info",
		      (char *)NULL);
		_exit(127);
	}
	while (!(f = fopen(n->ready, "r"))) {
		int status;

		if (waitpid(n->pid, &status, WNOHANG) == n->pid ||
		    now_ns() > deadline) {
			fprintf(stderr,
				"fault_bench: kvstashd did not start "
				"(see %s)\n",
				n->log);
			return -EIO;
		}
		usleep(500);
	}
	if (!fgets(buf, sizeof(buf), f) || sscanf(buf, "%d", &n->port) != 1) {
		/* written but not yet complete: read it again */
		fclose(f);
		usleep(1000);
		f = fopen(n->ready, "r");
		if (!f || !fgets(buf, sizeof(buf), f) ||
		    sscanf(buf, "%d", &n->port) != 1) {
			if (f)
				fclose(f);
			return -EIO;
		}
	}
	fclose(f);
	return 0;
}

/* Signals @n and waits (15 s at most, then SIGKILL). */
static void node_stop(struct node *n, int sig)
{
	uint64_t deadline = now_ns() + 15000000000ull;
	int status;

	if (n->pid <= 0)
		return;
	kill(n->pid, sig);
	while (waitpid(n->pid, &status, WNOHANG) != n->pid) {
		if (now_ns() > deadline) {
			kill(n->pid, SIGKILL);
			waitpid(n->pid, &status, 0);
			break;
		}
		usleep(200);
	}
	n->pid = -1;
}

static int connect_client(struct kvs_client **out)
{
	if (B.nodes == 1) {
		struct kvs_client_opts o;

		kvs_client_opts_default(&o);
		o.address = B.servers;
		o.key_file = B.keys;
		o.timeout_ms = B.timeout_ms;
		o.connect_timeout_ms = B.timeout_ms;
		return kvs_client_connect(&o, out);
	} else {
		struct kvs_client_cluster_opts o;

		kvs_client_cluster_opts_default(&o);
		o.servers = B.servers;
		o.key_file = B.keys;
		o.timeout_ms = B.timeout_ms;
		o.node_timeout_ms = 1000;
		o.backoff_ms = 500;
		o.replicas = 2;
		return kvs_client_connect_cluster(&o, out);
	}
}

/* ---- the load --------------------------------------------------------- */

static enum why why_of(int err)
{
	if (err == -KVS_ECONN)
		return WHY_CONN;
	if (err == -KVS_ETIMEDOUT)
		return WHY_TIMEDOUT;
	return WHY_OTHER;
}

/* The sequence number of one of @w's acknowledged blocks, at random. */
static uint32_t any_acked(const struct worker *w, struct kvs_rng *rng)
{
	return w->acked[kvs_rng_below(rng, (uint32_t)w->n_acked)];
}

/* One request of kind @op; 0 or its error. */
static int one_request(struct worker *w, enum op op, struct kvs_rng *rng,
		       uint8_t *obj, uint8_t *expect)
{
	struct kvs_store_key key;
	size_t len = B.block_size, got = 0, prefix = 0;
	uint32_t layer = 0, seq;
	int err, res = 0;

	if (op == OP_PUT) {
		/* new blocks while the store has room for every one (a cache
		 * full evicts, which is no loss); past that, puts again of
		 * blocks already acknowledged */
		bool fresh = !w->n_acked ||
			     atomic_fetch_add(&B.new_bytes, B.block_size) +
					     B.block_size <=
				     B.new_budget;

		seq = fresh ? (uint32_t)w->n_acked +
				      (uint32_t)w->failed[OP_PUT][0] +
				      (uint32_t)w->failed[OP_PUT][1] +
				      (uint32_t)w->failed[OP_PUT][2]
			    : any_acked(w, rng);
		block_bytes(w->image, w->id, seq, obj, &key);
		err = kvs_client_put(w->client, (const uint8_t *const *)&obj,
				     &len, 1, KVS_DURABILITY_DURABLE, &res);
		if (fresh && !err && !res && w->n_acked < PUTS_MAX)
			w->acked[w->n_acked++] = seq;
		return err ? err : res;
	}
	seq = any_acked(w, rng);
	block_bytes(w->image, w->id, seq, expect, &key);
	if (op == OP_LOOKUP) {
		err = kvs_client_lookup(
			w->client, (const uint8_t(*)[KVS_ID_SIZE])key.span_id,
			1, &layer, 1, &prefix);
		if (!err && prefix != 1)
			w->missing++;
		return err;
	}
	err = kvs_client_get(w->client, &key, 1, (void *const *)&obj, &len,
			     &got, &res);
	if (err)
		return err;
	if (res == -KVS_ENOTFOUND)
		w->missing++;
	else if (res)
		return res;
	else if (got != B.block_size || memcmp(obj, expect, got) != 0)
		w->wrong++;
	return 0;
}

/* *@first = @t unless it holds an earlier time (atomic). */
static void first_set(uint64_t *first, uint64_t t)
{
	uint64_t cur = __atomic_load_n(first, __ATOMIC_RELAXED);

	while ((cur == 0 || t < cur) &&
	       !__atomic_compare_exchange_n(first, &cur, t, false,
					    __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct kvs_rng rng = { .state = (uint64_t)w->id * 104729 + 3 };
	uint8_t *obj = malloc(B.block_size), *expect = malloc(B.block_size);

	while (obj && expect && !__atomic_load_n(&B.stop, __ATOMIC_RELAXED)) {
		unsigned r = __atomic_load_n(&B.restart_idx, __ATOMIC_ACQUIRE);
		enum op op = w->n_acked ? (enum op)kvs_rng_below(&rng, OP_N)
					: OP_PUT;
		uint64_t t0 = now_ns(), t1;
		int err = one_request(w, op, &rng, obj, expect);

		t1 = now_ns();
		if (t1 - t0 > w->max_call_ns)
			w->max_call_ns = t1 - t0;
		if (t1 - t0 > ((uint64_t)B.timeout_ms + 1000) * 1000000ull)
			w->hung++;
		if (err) {
			w->failed[op][why_of(err)]++;
			if (why_of(err) == WHY_OTHER)
				w->other_error = err;
			usleep(1000); /* a failing server is not spun on */
			continue;
		}
		w->ok[op]++;
		if (r > 0) {
			struct restart *rs = &B.restart[r - 1];
			uint64_t gone =
				__atomic_load_n(&rs->exit_ns, __ATOMIC_ACQUIRE);

			first_set(&rs->first_ok_ns, t1);
			if (gone && t1 > gone)
				first_set(&rs->first_new_ns, t1);
		}
	}
	free(obj);
	free(expect);
	return NULL;
}

/* ---- setup, the restarts, the check ------------------------------------ */

static int prefill(void)
{
	enum { BATCH = 16 };
	uint8_t *images[IMAGES] = { 0 }, *objs[BATCH];
	size_t lens[BATCH];
	struct kvs_client *c = NULL;
	struct kvs_store_key key;
	uint64_t n = B.prefill / B.block_size, t0 = now_ns();
	int err = 0, res[BATCH];

	for (int i = 0; i < BATCH; i++) {
		objs[i] = malloc(B.block_size);
		lens[i] = B.block_size;
		if (!objs[i])
			err = -ENOMEM;
	}
	for (int i = 0; i < IMAGES && !err; i++)
		err = image_make(1000000 + (uint64_t)i, &images[i]);
	if (!err)
		err = connect_client(&c);
	for (uint64_t s = 0; s < n && !err; s += BATCH) {
		unsigned m = n - s < BATCH ? (unsigned)(n - s) : BATCH;

		for (unsigned i = 0; i < m; i++)
			block_bytes(images, -1, (uint32_t)(s + i), objs[i],
				    &key);
		err = kvs_client_put(c, (const uint8_t *const *)objs, lens, m,
				     KVS_DURABILITY_DURABLE, res);
	}
	if (!err)
		fprintf(stderr,
			"fault_bench: prefilled %llu blocks (%.0f MiB) "
			"in %.1f s\n",
			(unsigned long long)n,
			(double)n * (double)B.block_size / 1048576.0,
			(double)(now_ns() - t0) / 1e9);
	kvs_client_close(c);
	for (int i = 0; i < BATCH; i++)
		free(objs[i]);
	for (int i = 0; i < IMAGES; i++)
		free(images[i]);
	return err;
}

static int restarts_run(void)
{
	for (unsigned r = 0; r < B.restarts; r++) {
		struct restart *rs = &B.restart[r];
		struct node *n;

		usleep(B.up_ms * 1000);
		rs->node = (int)(r % B.nodes);
		n = &B.node[rs->node];
		rs->stop_ns = now_ns();
		__atomic_store_n(&B.restart_idx, r + 1, __ATOMIC_RELEASE);
		node_stop(n, B.sig);
		rs->start_ns = now_ns();
		__atomic_store_n(&rs->exit_ns, rs->start_ns, __ATOMIC_RELEASE);
		if (node_start(n))
			return -EIO;
		rs->ready_ns = now_ns();
	}
	usleep(B.up_ms * 1000);
	return 0;
}

/* Reads back every acknowledged block: lost and wrong ones counted. */
static void check_all(struct worker *w, uint64_t *lost, uint64_t *wrong)
{
	struct kvs_client *c = NULL;
	uint8_t *obj = malloc(B.block_size), *expect = malloc(B.block_size);

	for (int tries = 0; tries < 50 && connect_client(&c); tries++)
		usleep(100000);
	for (unsigned t = 0; t < B.threads; t++)
		for (size_t i = 0; i < w[t].n_acked; i++) {
			struct kvs_store_key key;
			size_t len = B.block_size, got = 0;
			int res = -1, err = -KVS_ECONN;

			block_bytes(w[t].image, w[t].id, w[t].acked[i], expect,
				    &key);
			for (int k = 0; c && obj && k < 5 && err; k++)
				err = kvs_client_get(c, &key, 1,
						     (void *const *)&obj, &len,
						     &got, &res);
			if (err || res)
				(*lost)++;
			else if (got != B.block_size ||
				 memcmp(obj, expect, got) != 0)
				(*wrong)++;
		}
	kvs_client_close(c);
	free(obj);
	free(expect);
}

static void report(struct worker *w, uint64_t lost, uint64_t wrong, bool ok)
{
	uint64_t ok_n[OP_N] = { 0 }, failed[OP_N][WHY_N] = { { 0 } };
	uint64_t acked = 0, wrong_run = 0, missing = 0, hung = 0, max_ns = 0;
	int other = 0;
	FILE *o = stdout;

	for (unsigned t = 0; t < B.threads; t++) {
		for (int op = 0; op < OP_N; op++) {
			ok_n[op] += w[t].ok[op];
			for (int y = 0; y < WHY_N; y++)
				failed[op][y] += w[t].failed[op][y];
		}
		acked += w[t].n_acked;
		wrong_run += w[t].wrong;
		missing += w[t].missing;
		hung += w[t].hung;
		if (w[t].max_call_ns > max_ns)
			max_ns = w[t].max_call_ns;
		if (w[t].other_error)
			other = w[t].other_error;
	}
	fprintf(o,
		"{\"threads\": %u, \"nodes\": %u, \"signal\": \"%s\", "
		"\"timeout_ms\": %u, \"block_bytes\": %zu, "
		"\"prefill_bytes\": %llu,\n \"restarts\": [",
		B.threads, B.nodes, B.sig == SIGKILL ? "kill" : "term",
		B.timeout_ms, B.block_size, (unsigned long long)B.prefill);
	for (unsigned r = 0; r < B.restarts; r++) {
		struct restart *rs = &B.restart[r];

		fprintf(o,
			"%s\n  {\"node\": %d, \"exit_ms\": %.1f, "
			"\"listening_ms\": %.1f, \"first_ok_ms\": %.1f, "
			"\"after_listening_ms\": %.1f}",
			r ? "," : "", rs->node,
			ms_of(rs->exit_ns - rs->stop_ns),
			ms_of(rs->ready_ns - rs->start_ns),
			rs->first_ok_ns ? ms_of(rs->first_ok_ns - rs->stop_ns)
					: -1.0,
			rs->first_new_ns ? ((double)rs->first_new_ns -
					    (double)rs->ready_ns) /
						   1e6
					 : -1.0);
	}
	fprintf(o, "],\n \"requests\": {");
	for (int op = 0; op < OP_N; op++) {
		fprintf(o, "%s\"%s\": {\"ok\": %llu", op ? ", " : "",
			op_names[op], (unsigned long long)ok_n[op]);
		for (int y = 0; y < WHY_N; y++)
			fprintf(o, ", \"failed_%s\": %llu", why_names[y],
				(unsigned long long)failed[op][y]);
		fprintf(o, "}");
	}
	fprintf(o,
		"},\n \"acked_durable\": %llu, \"lost\": %llu, "
		"\"wrong\": %llu, \"wrong_during_run\": %llu, "
		"\"missing_during_run\": %llu, \"hung\": %llu, "
		"\"max_call_ms\": %.1f, \"other_error\": \"%s\", "
		"\"ok\": %s}\n",
		(unsigned long long)acked, (unsigned long long)lost,
		(unsigned long long)wrong, (unsigned long long)wrong_run,
		(unsigned long long)missing, (unsigned long long)hung,
		ms_of(max_ns), other ? kvs_strerror(other) : "",
		ok ? "true" : "false");
}

static int remove_one(const char *path, const struct stat *st, int flag,
		      struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

static int usage(void)
{
	fprintf(stderr,
		"usage: fault_bench --kvstashd PATH --dir DIR [--threads N] "
		"[--restarts K]\n"
		"                   [--signal kill|term] [--nodes 1|3] "
		"[--up-ms MS]\n"
		"                   [--timeout-ms MS] [--prefill MIB]\n");
	return 2;
}

static int parse(int argc, char **argv)
{
	B.threads = 8;
	B.restarts = 3;
	B.nodes = 1;
	B.up_ms = 2000;
	B.timeout_ms = 5000;
	B.sig = SIGKILL;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!v)
			return usage();
		i++;
		if (strcmp(a, "--kvstashd") == 0)
			B.kvstashd = v;
		else if (strcmp(a, "--dir") == 0)
			B.dir = v;
		else if (strcmp(a, "--threads") == 0)
			B.threads = (unsigned)atoi(v);
		else if (strcmp(a, "--restarts") == 0)
			B.restarts = (unsigned)atoi(v);
		else if (strcmp(a, "--nodes") == 0)
			B.nodes = (unsigned)atoi(v);
		else if (strcmp(a, "--up-ms") == 0)
			B.up_ms = (unsigned)atoi(v);
		else if (strcmp(a, "--timeout-ms") == 0)
			B.timeout_ms = (unsigned)atoi(v);
		else if (strcmp(a, "--prefill") == 0)
			B.prefill = strtoull(v, NULL, 10) << 20; /* MiB */
		else if (strcmp(a, "--signal") == 0 && strcmp(v, "kill") == 0)
			B.sig = SIGKILL;
		else if (strcmp(a, "--signal") == 0 && strcmp(v, "term") == 0)
			B.sig = SIGTERM;
		else
			return usage();
	}
	if (!B.kvstashd || !B.dir || B.threads == 0 || B.threads > 256 ||
	    (B.nodes != 1 && B.nodes != 3) || B.restarts > RESTARTS_MAX ||
	    B.timeout_ms == 0)
		return usage();
	return 0;
}

static int setup(void)
{
	struct kvs_layout layout;
	FILE *f;
	int err;

	kvs_shape_default(&B.shape, 4, 128);
	err = kvs_block_layout(&B.shape, &layout);
	if (err)
		return err;
	B.block_size = layout.total_size;
	if (mkdir(B.dir, 0700) && errno != EEXIST)
		return -errno;
	snprintf(B.run, sizeof(B.run), "%s/run-XXXXXX", B.dir);
	if (!mkdtemp(B.run))
		return -errno;
	snprintf(B.keys, sizeof(B.keys), "%s/keys", B.run);
	f = fopen(B.keys, "w");
	if (!f)
		return -errno;
	fprintf(f, "bench 000102030405060708090a0b0c0d0e0f\n");
	fclose(f);
	for (unsigned i = 0; i < B.nodes; i++) {
		struct node *n = &B.node[i];
		size_t len = strlen(B.servers);
		char base[sizeof(n->dir)];

		/* (through a copy: source and destination both in B) */
		snprintf(base, sizeof(base), "%s/node%u", B.run, i);
		memcpy(n->dir, base, sizeof(base));
		snprintf(n->ready, sizeof(n->ready), "%s.ready", base);
		snprintf(n->log, sizeof(n->log), "%s.log", base);
		err = node_start(n);
		if (err)
			return err;
		snprintf(B.servers + len, sizeof(B.servers) - len,
			 "%s127.0.0.1:%d", i ? "," : "", n->port);
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct worker *w;
	uint64_t lost = 0, wrong = 0;
	bool ok = true;
	int err;

	err = parse(argc, argv);
	if (err)
		return err;
	signal(SIGPIPE, SIG_IGN);
	err = setup();
	if (!err && B.prefill)
		err = prefill();
	/* half the tier, so that segment overhead and compaction never make
	 * the store evict an acknowledged block */
	B.new_budget = ((uint64_t)NVME_GIB << 29) > B.prefill
			       ? ((uint64_t)NVME_GIB << 29) - B.prefill
			       : 0;
	w = calloc(B.threads, sizeof(*w));
	if (!w)
		err = -ENOMEM;
	for (unsigned t = 0; t < B.threads && !err; t++) {
		w[t].id = (int)t;
		w[t].acked = malloc(PUTS_MAX * sizeof(*w[t].acked));
		err = w[t].acked ? 0 : -ENOMEM;
		for (int i = 0; i < IMAGES && !err; i++)
			err = image_make((uint64_t)t * IMAGES + (uint64_t)i,
					 &w[t].image[i]);
		if (!err)
			err = connect_client(&w[t].client);
	}
	for (unsigned t = 0; t < B.threads && !err; t++)
		err = -pthread_create(&w[t].thread, NULL, worker_main, &w[t]);
	if (!err)
		err = restarts_run();
	__atomic_store_n(&B.stop, true, __ATOMIC_RELAXED);
	for (unsigned t = 0; w && t < B.threads; t++)
		if (w[t].thread)
			pthread_join(w[t].thread, NULL);
	if (!err)
		check_all(w, &lost, &wrong);
	for (unsigned t = 0; w && t < B.threads; t++) {
		ok = ok && !w[t].wrong && !w[t].hung;
		kvs_client_close(w[t].client);
	}
	for (unsigned r = 0; r < B.restarts; r++)
		ok = ok && B.restart[r].first_new_ns;
	ok = ok && !err && !lost && !wrong;
	if (!err)
		report(w, lost, wrong, ok);
	else
		fprintf(stderr, "fault_bench: %s\n", kvs_strerror(err));
	for (unsigned i = 0; i < B.nodes; i++)
		node_stop(&B.node[i], SIGTERM);
	if (ok && B.run[0] && !getenv("FAULT_KEEP"))
		(void)nftw(B.run, remove_one, 16, FTW_DEPTH | FTW_PHYS);
	else if (B.run[0])
		fprintf(stderr, "fault_bench: stores and logs kept in %s\n",
			B.run);
	for (unsigned t = 0; w && t < B.threads; t++) {
		for (int i = 0; i < IMAGES; i++)
			free(w[t].image[i]);
		free(w[t].acked);
	}
	free(w);
	return ok ? 0 : 1;
}
