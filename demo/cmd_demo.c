/*
 * cmd_demo.c - `kvstash demo`: the whole system on one machine.  Starts a
 * kvstashd on 127.0.0.1 (a free port it picks, its own store directory
 * and key file in a temporary directory), then runs node processes
 * (`kvstash demo-node`, demo_node.c) on the synthetic model of demo.h:
 *
 *   request 1  a prefill process computes the prompt, publishes its
 *              blocks and hands its residual tails to a decode process,
 *              which decodes; the prefill process decodes the same steps
 *              on by itself, and the outputs must be identical;
 *   request 2  shares a prefix with request 1: a process attaches the
 *              cached blocks (hits) and computes only the rest; its
 *              outputs must equal those of recomputing the prompt;
 *   long       a context whose blocks exceed the daemon's DRAM tier is
 *              published (the daemon spills to its NVMe tier) and
 *              attached back by another process;
 *
 * and sums up: attention error against the fp16 reference, bytes moved
 * through the daemon against fp16 K/V, the daemon's spills and reads
 * back.  Long phases show a progress bar on a terminal (stderr).  Every
 * process it started is stopped at the end, also on a failure and on
 * Ctrl-C (demo_proc.c), and the temporary directory is removed.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli_util.h"
#include "demo_cmd.h"
#include "demo.h"
#include "kvs_config.h"
#include "kvstash/client.h"

#define CMD "demo"
#define N_OPTS 19
#define MAX_PROCS 8
#define GRACE_MS 5000

static const char usage_text[] =
	"usage: kvstash demo [--prompt N] [--steps N] [--long N] [--layers N]\n"
	"                    [--q-heads N] [--kv-heads N] [--head-dim N]\n"
	"                    [--dram-capacity BYTES] [--nvme-capacity BYTES]\n"
	"                    [--device auto|cpu|cuda] [--seed N]\n"
	"                    [--kvstashd PATH] [--keep] [--json]\n"
	"       kvstash demo --block\n"
	"\n"
	"Starts a kvstashd on 127.0.0.1 with a store in a temporary directory\n"
	"and runs prefill and decode processes on a synthetic model's K/V\n"
	"(4 layers, 8 query and 2 KV heads, D=128 by default): request 1 is\n"
	"prefilled, published and handed to a decoder by its residual tail;\n"
	"request 2 shares its prefix and attaches the cached blocks; a long\n"
	"context larger than the daemon's DRAM tier spills to its NVMe tier\n"
	"and is attached back.  Ends with a summary: outputs after the\n"
	"handoff and after the attach against decoding without them,\n"
	"attention error against fp16, bytes moved against fp16.  Every\n"
	"process it starts is stopped at the end (also on Ctrl-C).\n"
	"\n"
	"  --prompt N         request 1's prompt (1000); request 2 shares its\n"
	"                     whole spans and adds 200 tokens\n"
	"  --steps N          decode steps of requests 1 and 2 (32)\n"
	"  --long N           tokens of the long context (8192)\n"
	"  --dram-capacity    the daemon's DRAM tier (3M; below the long\n"
	"                     context's blocks, so that it spills)\n"
	"  --nvme-capacity    the daemon's NVMe tier (64M)\n"
	"  --device           CUDA where a GPU is usable (auto), or cpu, cuda\n"
	"  --kvstashd PATH    the daemon (default: next to this program)\n"
	"  --keep             keep the temporary directory (store, logs)\n"
	"  --json             the summary as JSON on stdout, nothing else\n"
	"  --block            the one-block walk-through instead (no daemon)\n";

struct demo_args {
	struct demo_model m;
	uint32_t prompt, steps, long_tokens, extra, long_steps;
	uint64_t dram, nvme;
	const char *device, *kvstashd;
	bool keep, json, block;
};

struct demo {
	struct demo_args a;
	char dir[2048], exe[PATH_MAX], daemon_exe[PATH_MAX];
	char keys[2100], store[2100], ready[2100];
	char addr[64];
	struct demo_proc procs[MAX_PROCS];
	unsigned n_procs;
	bool tty, bar, dir_made, cuda;
	uint32_t shared; /* tokens request 2 shares with request 1 */
};

/* ---- output ------------------------------------------------------------ */

/* A line of the narration (not with --json), flushed at once. */
static void say(const struct demo *d, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void say(const struct demo *d, const char *fmt, ...)
{
	va_list ap;

	if (d->a.json)
		return;
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	fflush(stdout);
}

static void bar_draw(struct demo *d, const char *title, const char *label,
		     unsigned done, unsigned total)
{
	char hashes[31];
	unsigned fill = total ? 30 * done / total : 30;

	if (!d->tty)
		return;
	memset(hashes, '#', fill);
	memset(hashes + fill, '.', 30 - fill);
	hashes[30] = '\0';
	fprintf(stderr, "\r  %-10s %-9s [%s] %u/%u ", title, label, hashes,
		done, total);
	d->bar = true;
}

static void bar_end(struct demo *d)
{
	if (d->bar)
		fputs("\r\033[K", stderr);
	d->bar = false;
}

static const char *human(double bytes, char *buf)
{
	return kvs_cli_human_bytes(bytes, buf, 32);
}

/* ---- processes ------------------------------------------------------------
 */

static struct demo_proc *new_proc(struct demo *d, const char *name)
{
	struct demo_proc *p = &d->procs[d->n_procs];

	memset(p, 0, sizeof(*p));
	p->out = -1;
	snprintf(p->name, sizeof(p->name), "%s", name);
	snprintf(p->log, sizeof(p->log), "%s/%s-%u.log", d->dir, name,
		 d->n_procs);
	d->n_procs++;
	return p;
}

/* Stops every process (nodes first, the daemon last); true when each was
 * reaped. */
static bool stop_all(struct demo *d)
{
	bool all = true;

	for (unsigned i = d->n_procs; i-- > 0;) {
		demo_stop(&d->procs[i], GRACE_MS);
		all = all && (d->procs[i].pid <= 0 || d->procs[i].reaped);
	}
	return all;
}

static double fact(const struct demo_proc *p, const char *key)
{
	for (unsigned i = 0; i < p->n_facts; i++)
		if (strcmp(p->facts[i].key, key) == 0)
			return p->facts[i].value;
	return 0.0;
}

/* One line of a node's protocol. */
static void node_line(struct demo *d, struct demo_proc *p, const char *title,
		      char *line)
{
	char label[32], key[32];
	unsigned done, total;
	double value;

	if (sscanf(line, "progress %31s %u %u", label, &done, &total) == 3) {
		bar_draw(d, title, label, done, total);
	} else if (sscanf(line, "fact %31s %lf", key, &value) == 2 &&
		   p->n_facts < DEMO_FACTS) {
		snprintf(p->facts[p->n_facts].key, sizeof(key), "%s", key);
		p->facts[p->n_facts++].value = value;
	}
}

static void node_read(struct demo *d, struct demo_proc *p, const char *title,
		      const char *buf, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (buf[i] != '\n') {
			if (p->line_len < sizeof(p->line) - 1)
				p->line[p->line_len++] = buf[i];
			continue;
		}
		p->line[p->line_len] = '\0';
		node_line(d, p, title, p->line);
		p->line_len = 0;
	}
}

static int interrupted(void)
{
	kvs_cli_error(CMD,
		      "interrupted (signal %d): every process it "
		      "started is stopped",
		      (int)demo_interrupted);
	return -EINTR;
}

/* The daemon is still there (else one line, -EPIPE). */
static int daemon_alive(struct demo *d)
{
	char status[32], line[512];

	if (demo_running(&d->procs[0]))
		return 0;
	/* what it said last explains an exit, not a kill */
	line[0] = '\0';
	if (WIFEXITED(d->procs[0].status))
		demo_last_log_line(&d->procs[0], line, sizeof(line));
	kvs_cli_error(CMD, "kvstashd ended (%s)%s%s",
		      demo_status(&d->procs[0], status, sizeof(status)),
		      line[0] ? ": " : "", line);
	return -EPIPE;
}

/* Follows a node until it ends; 0 when it exited 0. */
static int node_follow(struct demo *d, struct demo_proc *p, const char *title)
{
	char buf[4096], status[32], line[600];
	struct timespec pause = { 0, 2 * 1000 * 1000 };
	struct pollfd pfd = { .fd = p->out, .events = POLLIN };
	ssize_t n;
	int err;

	while (p->out >= 0) {
		if (demo_interrupted)
			return bar_end(d), interrupted();
		err = daemon_alive(d);
		if (err)
			return bar_end(d), err;
		if (poll(&pfd, 1, 100) <= 0)
			continue;
		n = read(p->out, buf, sizeof(buf));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			close(p->out);
			p->out = -1;
			break;
		}
		node_read(d, p, title, buf, (size_t)n);
	}
	while (demo_running(p)) {
		if (demo_interrupted)
			return bar_end(d), interrupted();
		nanosleep(&pause, NULL);
	}
	bar_end(d);
	if (WIFEXITED(p->status) && WEXITSTATUS(p->status) == 0)
		return 0;
	kvs_cli_error(CMD, "the %s process (pid %d) failed (%s): %s", p->name,
		      (int)p->pid, demo_status(p, status, sizeof(status)),
		      demo_last_log_line(p, line, sizeof(line)));
	return -EIO;
}

/* An argument vector being built: words copied into @store. */
struct words {
	char *argv[64];
	char store[64][1024];
	int n;
};

static void word(struct words *w, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void word(struct words *w, const char *fmt, ...)
{
	va_list ap;

	if (w->n >= 63)
		return;
	va_start(ap, fmt);
	vsnprintf(w->store[w->n], sizeof(w->store[0]), fmt, ap);
	va_end(ap);
	w->argv[w->n] = w->store[w->n];
	w->argv[++w->n] = NULL;
}

/* The start of a node's command line: role and model. */
static void node_words(const struct demo *d, struct words *w, const char *role,
		       uint32_t request, uint32_t prompt)
{
	const struct demo_model *m = &d->a.m;

	w->n = 0;
	word(w, "%s", d->exe);
	word(w, "demo-node");
	word(w, "%s", role);
	word(w, "--server=%s", d->addr);
	word(w, "--auth-key-file=%s", d->keys);
	word(w, "--layers=%u", m->layers);
	word(w, "--q-heads=%u", m->q_heads);
	word(w, "--kv-heads=%u", m->kv_heads);
	word(w, "--head-dim=%u", m->head_dim);
	word(w, "--residual=%u", m->residual);
	word(w, "--seed=%llu", (unsigned long long)m->seed);
	word(w, "--device=%s", d->a.device);
	word(w, "--request=%u", request);
	word(w, "--prompt=%u", prompt);
}

static int node_start(struct demo *d, struct demo_proc *p, struct words *w)
{
	int err = demo_spawn(p, w->argv, true);

	if (err)
		kvs_cli_error(CMD, "cannot start the %s process: %s", p->name,
			      strerror(-err));
	return err;
}

/* ---- setting up ------------------------------------------------------------
 */

static bool executable(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISREG(st.st_mode) &&
	       access(path, X_OK) == 0;
}

/* This program, and the daemon: --kvstashd, next to this program, in
 * ../server of it (the build tree), ../sbin of it (an install), or on the
 * PATH. */
static int find_programs(struct demo *d)
{
	char dir[PATH_MAX], *slash;
	const char *path = getenv("PATH");
	ssize_t n = readlink("/proc/self/exe", d->exe, sizeof(d->exe) - 1);

	if (n <= 0) {
		kvs_cli_error(CMD, "cannot find this program: %s",
			      strerror(errno));
		return -errno;
	}
	d->exe[n] = '\0';
	if (d->a.kvstashd) {
		snprintf(d->daemon_exe, sizeof(d->daemon_exe), "%s",
			 d->a.kvstashd);
		if (executable(d->daemon_exe))
			return 0;
		kvs_cli_error(CMD, "--kvstashd %s: not an executable file",
			      d->a.kvstashd);
		return -ENOENT;
	}
	snprintf(dir, sizeof(dir), "%s", d->exe);
	slash = strrchr(dir, '/');
	if (slash)
		*slash = '\0';
	snprintf(d->daemon_exe, sizeof(d->daemon_exe), "%.4000s/kvstashd", dir);
	if (executable(d->daemon_exe))
		return 0;
	snprintf(d->daemon_exe, sizeof(d->daemon_exe),
		 "%.4000s/../server/kvstashd", dir);
	if (executable(d->daemon_exe))
		return 0;
	snprintf(d->daemon_exe, sizeof(d->daemon_exe),
		 "%.4000s/../sbin/kvstashd", dir);
	if (executable(d->daemon_exe))
		return 0;
	while (path && *path) {
		size_t len = strcspn(path, ":");

		snprintf(d->daemon_exe, sizeof(d->daemon_exe), "%.*s/kvstashd",
			 (int)len, path);
		if (len && executable(d->daemon_exe))
			return 0;
		path += len + (path[len] == ':');
	}
	kvs_cli_error(CMD,
		      "kvstashd not found next to %s nor on the PATH "
		      "(--kvstashd PATH)",
		      d->exe);
	return -ENOENT;
}

/* The temporary directory and the key file of tenant "demo". */
static int make_dir(struct demo *d)
{
	const char *tmp = getenv("TMPDIR");
	uint8_t key[32];
	char hex[2 * sizeof(key) + 1];
	FILE *f;
	int fd;

	snprintf(d->dir, sizeof(d->dir), "%.1900s/kvstash-demo-XXXXXX",
		 tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(d->dir)) {
		kvs_cli_error(CMD, "%s: %s", d->dir, strerror(errno));
		return -errno;
	}
	d->dir_made = true;
	snprintf(d->keys, sizeof(d->keys), "%s/keys", d->dir);
	snprintf(d->store, sizeof(d->store), "%s/store", d->dir);
	snprintf(d->ready, sizeof(d->ready), "%s/ready", d->dir);
	if (getrandom(key, sizeof(key), 0) != (ssize_t)sizeof(key)) {
		kvs_cli_error(CMD, "no random key: %s", strerror(errno));
		return -EIO;
	}
	for (size_t i = 0; i < sizeof(key); i++)
		snprintf(hex + 2 * i, 3, "%02x", key[i]);
	fd = open(d->keys, O_WRONLY | O_CREAT | O_EXCL, 0600);
	f = fd >= 0 ? fdopen(fd, "w") : NULL;
	if (!f || fprintf(f, "demo %s\n", hex) < 0 || fclose(f) != 0) {
		kvs_cli_error(CMD, "%s: %s", d->keys, strerror(errno));
		if (!f && fd >= 0)
			close(fd);
		return -EIO;
	}
	return 0;
}

/* Starts kvstashd and waits for its ready file (port). */
static int start_daemon(struct demo *d)
{
	struct demo_proc *p = new_proc(d, "kvstashd");
	struct timespec pause = { 0, 10 * 1000 * 1000 };
	char line[512];
	struct words w = { .n = 0 };
	int port = 0, mport = 0, err;
	FILE *f;

	word(&w, "%s", d->daemon_exe);
	word(&w, "--listen=127.0.0.1:0");
	word(&w, "--dir=%s", d->store);
	word(&w, "--auth-key-file=%s", d->keys);
	word(&w, "--ready-file=%s", d->ready);
	word(&w, "--dram-capacity=%llu", (unsigned long long)d->a.dram);
	word(&w, "--nvme-capacity=%llu", (unsigned long long)d->a.nvme);
	word(&w, "--segment-size=1M");
	word(&w, "--log-level=warn");
	err = demo_spawn(p, w.argv, false);
	if (err) {
		kvs_cli_error(CMD, "cannot start %s: %s", d->daemon_exe,
			      strerror(-err));
		return err;
	}
	for (int waited = 0;; waited += 10) {
		if (demo_interrupted)
			return interrupted();
		f = fopen(d->ready, "r");
		if (f) {
			int got = fscanf(f, "%d %d", &port, &mport);

			fclose(f);
			if (got == 2 && port > 0)
				break;
		}
		if (!demo_running(p)) {
			char status[32];

			demo_last_log_line(p, line, sizeof(line));
			kvs_cli_error(CMD, "kvstashd did not start (%s)%s%s",
				      demo_status(p, status, sizeof(status)),
				      line[0] ? ": " : "", line);
			return -EIO;
		}
		if (waited > 15000) {
			kvs_cli_error(CMD, "kvstashd not ready after 15 s");
			return -ETIMEDOUT;
		}
		nanosleep(&pause, NULL);
	}
	snprintf(d->addr, sizeof(d->addr), "127.0.0.1:%d", port);
	return 0;
}

/* ---- the phases ------------------------------------------------------------
 */

static char *path_in(const struct demo *d, const char *name, char *buf,
		     size_t size)
{
	snprintf(buf, size, "%s/%s", d->dir, name);
	return buf;
}

/* Whether two output files hold the same bytes (and some). */
static int same_outputs(const char *a, const char *b, bool *same)
{
	uint8_t *x = NULL, *y = NULL;
	size_t nx = 0, ny = 0;
	int err;

	err = kvs_cli_read_file(CMD, a, &x, &nx);
	if (!err)
		err = kvs_cli_read_file(CMD, b, &y, &ny);
	if (!err)
		*same = nx == ny && nx > 0 && memcmp(x, y, nx) == 0;
	free(x);
	free(y);
	return err;
}

struct results {
	struct demo_proc *pre1, *dec1, *req2, *pre3, *dec3;
	bool handoff_same;
	struct kvs_client_stat stat;
	bool stat_ok;
	bool all_stopped, dir_removed;
};

static int request_one(struct demo *d, struct results *r)
{
	char out_pre[2100], out_dec[2100];
	const struct demo_args *a = &d->a;
	struct words w;
	int err;

	path_in(d, "request1-prefill.f32", out_pre, sizeof(out_pre));
	path_in(d, "request1-decode.f32", out_dec, sizeof(out_dec));
	r->pre1 = new_proc(d, "prefill");
	node_words(d, &w, "prefill", 1, a->prompt);
	word(&w, "--export");
	word(&w, "--steps=%u", a->steps);
	word(&w, "--out=%s", out_pre);
	err = node_start(d, r->pre1, &w);
	if (!err)
		err = node_follow(d, r->pre1, "request 1");
	if (err)
		return err;
	d->cuda = fact(r->pre1, "cuda") != 0;
	say(d,
	    "request 1  prefill process (pid %d): %u tokens prefilled in %.0f "
	    "ms, %.0f blocks published, tails handed over\n",
	    (int)r->pre1->pid, a->prompt, fact(r->pre1, "prefill_ms"),
	    fact(r->pre1, "published"));
	r->dec1 = new_proc(d, "decode");
	node_words(d, &w, "decode", 1, a->prompt);
	word(&w, "--import");
	word(&w, "--reference");
	word(&w, "--steps=%u", a->steps);
	word(&w, "--out=%s", out_dec);
	err = node_start(d, r->dec1, &w);
	if (!err)
		err = node_follow(d, r->dec1, "request 1");
	if (!err)
		err = same_outputs(out_pre, out_dec, &r->handoff_same);
	if (err)
		return err;
	say(d,
	    "           decode process (pid %d): took it over in %.1f ms (%.0f "
	    "spans and the tails of %u layers), decoded %u steps\n",
	    (int)r->dec1->pid, fact(r->dec1, "ready_ms"),
	    fact(r->dec1, "imported_blocks"), a->m.layers, a->steps);
	return 0;
}

static int request_two(struct demo *d, struct results *r)
{
	const struct demo_args *a = &d->a;
	uint32_t prompt = d->shared + a->extra;
	char out[2100];
	struct words w;
	int err;

	r->req2 = new_proc(d, "decode");
	node_words(d, &w, "decode", 2, prompt);
	word(&w, "--shared=%u", d->shared);
	word(&w, "--attach");
	word(&w, "--reference");
	word(&w, "--recompute");
	word(&w, "--steps=%u", a->steps);
	word(&w, "--out=%s", path_in(d, "request2.f32", out, sizeof(out)));
	err = node_start(d, r->req2, &w);
	if (!err)
		err = node_follow(d, r->req2, "request 2");
	if (err)
		return err;
	say(d,
	    "request 2  decode process (pid %d): %u tokens, %.0f attached "
	    "from kvstashd (%.0f block hits) in %.1f ms, %.0f prefilled, %u "
	    "steps\n",
	    (int)r->req2->pid, prompt, fact(r->req2, "attached_tokens"),
	    fact(r->req2, "blocks_got"), fact(r->req2, "ready_ms"),
	    fact(r->req2, "prefill_tokens"), a->steps);
	return 0;
}

static int long_context(struct demo *d, struct results *r)
{
	const struct demo_args *a = &d->a;
	uint32_t prompt = a->long_tokens + a->m.residual;
	char bytes[32];
	struct words w;
	int err;

	r->pre3 = new_proc(d, "prefill");
	node_words(d, &w, "prefill", 3, a->long_tokens);
	err = node_start(d, r->pre3, &w);
	if (!err)
		err = node_follow(d, r->pre3, "long");
	if (err)
		return err;
	say(d,
	    "long       prefill process (pid %d): %u tokens, %.0f blocks (%s) "
	    "published\n",
	    (int)r->pre3->pid, a->long_tokens, fact(r->pre3, "published"),
	    human(fact(r->pre3, "block_bytes"), bytes));
	r->dec3 = new_proc(d, "decode");
	node_words(d, &w, "decode", 3, prompt);
	word(&w, "--attach");
	word(&w, "--reference");
	word(&w, "--steps=%u", a->long_steps);
	err = node_start(d, r->dec3, &w);
	if (!err)
		err = node_follow(d, r->dec3, "long");
	if (err)
		return err;
	say(d,
	    "           decode process (pid %d): %.0f tokens attached back in "
	    "%.1f ms, %.0f prefilled, %u steps\n",
	    (int)r->dec3->pid, fact(r->dec3, "attached_tokens"),
	    fact(r->dec3, "ready_ms"), fact(r->dec3, "prefill_tokens"),
	    a->long_steps);
	return 0;
}

/* The daemon's counters, through a connection of the demo's own. */
static void daemon_stat(struct demo *d, struct results *r)
{
	struct kvs_client_opts o;
	struct kvs_client *c;

	kvs_client_opts_default(&o);
	o.address = d->addr;
	o.key_file = d->keys;
	if (kvs_client_connect(&o, &c) != 0)
		return;
	r->stat_ok = kvs_client_stat(c, &r->stat) == 0;
	kvs_client_close(c);
}

/* ---- the summary ------------------------------------------------------------
 */

struct totals {
	double moved, fp16, blocks, tails, err2, ref2, max_abs, values;
};

static void sum_up(const struct demo *d, struct totals *t)
{
	memset(t, 0, sizeof(*t));
	for (unsigned i = 1; i < d->n_procs; i++) {
		const struct demo_proc *p = &d->procs[i];
		double m = fact(p, "max_abs");

		t->blocks += fact(p, "block_bytes");
		t->tails += fact(p, "tail_bytes");
		t->fp16 += fact(p, "fp16_bytes");
		t->err2 += fact(p, "err2");
		t->ref2 += fact(p, "ref2");
		t->values += fact(p, "values");
		if (m > t->max_abs)
			t->max_abs = m;
	}
	t->moved = t->blocks + t->tails;
}

static void summary_text(const struct demo *d, const struct results *r,
			 const struct totals *t)
{
	const struct demo_args *a = &d->a;
	double attached = fact(r->req2, "attached_tokens");
	uint32_t prompt2 = d->shared + a->extra;
	char b1[32], b2[32], b3[32], b4[32];
	double long_bytes = fact(r->pre3, "block_bytes");

	printf("\nsummary\n");
	printf("  handoff    decoding after the handoff = the prefill process "
	       "decoding on: %s (%u steps x %u layers)\n",
	       r->handoff_same ? "identical" : "DIFFERENT", a->steps,
	       a->m.layers);
	printf("  prefix     request 2: %.0f block hits, %.0f of %u prefill "
	       "tokens skipped (%.0f%%); outputs = recomputing the prompt: "
	       "%s\n",
	       fact(r->req2, "blocks_got"), attached, prompt2,
	       100.0 * attached / prompt2,
	       fact(r->req2, "recompute_identical") != 0 ? "identical"
							 : "DIFFERENT");
	if (r->stat_ok && long_bytes > (double)a->dram)
		printf("  spill      %s of long-context blocks > %s of DRAM: "
		       "%llu blocks spilled to NVMe, %llu read back from "
		       "it, all %.0f attached\n",
		       human(long_bytes, b1), human((double)a->dram, b2),
		       (unsigned long long)r->stat.store.spills,
		       (unsigned long long)r->stat.store.nvme_hits,
		       fact(r->dec3, "blocks_got"));
	else
		printf("  spill      none: the long context's %s of blocks fit "
		       "in %s of DRAM (a larger --long or a smaller "
		       "--dram-capacity spills)\n",
		       human(long_bytes, b1), human((double)a->dram, b2));
	printf("  accuracy   attention against the fp16 reference (%.0f "
	       "values): relative L2 error %.4f, max abs %.4f\n",
	       t->values, t->ref2 > 0 ? sqrt(t->err2 / t->ref2) : 0.0,
	       t->max_abs);
	printf("  bytes      moved through kvstashd: %s (%s of blocks, %s of "
	       "tails) against %s as fp16 K/V: %.2fx less\n",
	       human(t->moved, b1), human(t->blocks, b2), human(t->tails, b3),
	       human(t->fp16, b4), t->moved > 0 ? t->fp16 / t->moved : 0.0);
	printf("  processes  kvstashd and %u node processes: %s; temporary "
	       "directory %s\n",
	       d->n_procs - 1, r->all_stopped ? "all stopped" : "NOT STOPPED",
	       r->dir_removed ? "removed"
	       : d->a.keep    ? "kept"
			      : "NOT REMOVED");
	if (d->a.keep)
		printf("             %s\n", d->dir);
}

static void summary_json(const struct demo *d, const struct results *r,
			 const struct totals *t)
{
	const struct demo_args *a = &d->a;
	struct kvs_cli_json j;
	char status[32];

	kvs_cli_json_init(&j, stdout);
	kvs_cli_json_object_begin(&j, NULL);
	kvs_cli_json_str(&j, "device", d->cuda ? "cuda" : "cpu");
	kvs_cli_json_object_begin(&j, "model");
	kvs_cli_json_u64(&j, "layers", a->m.layers);
	kvs_cli_json_u64(&j, "q_heads", a->m.q_heads);
	kvs_cli_json_u64(&j, "kv_heads", a->m.kv_heads);
	kvs_cli_json_u64(&j, "head_dim", a->m.head_dim);
	kvs_cli_json_u64(&j, "residual", a->m.residual);
	kvs_cli_json_object_end(&j);
	kvs_cli_json_object_begin(&j, "request1");
	kvs_cli_json_u64(&j, "prompt", a->prompt);
	kvs_cli_json_u64(&j, "steps", a->steps);
	kvs_cli_json_u64(&j, "published", (uint64_t)fact(r->pre1, "published"));
	kvs_cli_json_u64(&j, "imported_blocks",
			 (uint64_t)fact(r->dec1, "imported_blocks"));
	kvs_cli_json_double(&j, "ready_ms", fact(r->dec1, "ready_ms"));
	kvs_cli_json_bool(&j, "handoff_identical", r->handoff_same);
	kvs_cli_json_object_end(&j);
	kvs_cli_json_object_begin(&j, "request2");
	kvs_cli_json_u64(&j, "prompt", d->shared + a->extra);
	kvs_cli_json_u64(&j, "shared", d->shared);
	kvs_cli_json_u64(&j, "hits", (uint64_t)fact(r->req2, "blocks_got"));
	kvs_cli_json_u64(&j, "attached_tokens",
			 (uint64_t)fact(r->req2, "attached_tokens"));
	kvs_cli_json_u64(&j, "prefill_tokens",
			 (uint64_t)fact(r->req2, "prefill_tokens"));
	kvs_cli_json_bool(&j, "recompute_identical",
			  fact(r->req2, "recompute_identical") != 0);
	kvs_cli_json_object_end(&j);
	kvs_cli_json_object_begin(&j, "long");
	kvs_cli_json_u64(&j, "tokens", a->long_tokens);
	kvs_cli_json_u64(&j, "blocks", (uint64_t)fact(r->pre3, "published"));
	kvs_cli_json_u64(&j, "block_bytes",
			 (uint64_t)fact(r->pre3, "block_bytes"));
	kvs_cli_json_u64(&j, "dram_capacity", a->dram);
	kvs_cli_json_u64(&j, "attached_tokens",
			 (uint64_t)fact(r->dec3, "attached_tokens"));
	kvs_cli_json_u64(&j, "spills", r->stat.store.spills);
	kvs_cli_json_u64(&j, "nvme_hits", r->stat.store.nvme_hits);
	kvs_cli_json_u64(&j, "promotions", r->stat.store.promotions);
	kvs_cli_json_object_end(&j);
	kvs_cli_json_object_begin(&j, "accuracy");
	kvs_cli_json_u64(&j, "values", (uint64_t)t->values);
	kvs_cli_json_double(&j, "relative_l2",
			    t->ref2 > 0 ? sqrt(t->err2 / t->ref2) : 0.0);
	kvs_cli_json_double(&j, "max_abs", t->max_abs);
	kvs_cli_json_object_end(&j);
	kvs_cli_json_object_begin(&j, "bytes");
	kvs_cli_json_u64(&j, "moved", (uint64_t)t->moved);
	kvs_cli_json_u64(&j, "blocks", (uint64_t)t->blocks);
	kvs_cli_json_u64(&j, "tails", (uint64_t)t->tails);
	kvs_cli_json_u64(&j, "fp16", (uint64_t)t->fp16);
	kvs_cli_json_object_end(&j);
	kvs_cli_json_array_begin(&j, "processes");
	for (unsigned i = 0; i < d->n_procs; i++) {
		const struct demo_proc *p = &d->procs[i];

		kvs_cli_json_object_begin(&j, NULL);
		kvs_cli_json_str(&j, "name", p->name);
		kvs_cli_json_u64(&j, "pid", (uint64_t)p->pid);
		kvs_cli_json_str(&j, "status",
				 demo_status(p, status, sizeof(status)));
		kvs_cli_json_object_end(&j);
	}
	kvs_cli_json_array_end(&j);
	kvs_cli_json_bool(&j, "all_stopped", r->all_stopped);
	kvs_cli_json_bool(&j, "temp_removed", r->dir_removed);
	kvs_cli_json_object_end(&j);
	kvs_cli_json_finish(&j);
}

/* ---- the command ------------------------------------------------------------
 */

static int parse(int argc, char **argv, struct demo_args *a)
{
	uint64_t seed;
	struct kvs_cli_opt opts[N_OPTS] = {
		KVS_OPT_U32("prompt", &a->prompt, 1, 1u << 20, false),
		KVS_OPT_U32("steps", &a->steps, 1, 4096, false),
		KVS_OPT_U32("long", &a->long_tokens, 128, 1u << 22, false),
		KVS_OPT_U32("layers", &a->m.layers, 1, 128, false),
		KVS_OPT_U32("q-heads", &a->m.q_heads, 1, 128, false),
		KVS_OPT_U32("kv-heads", &a->m.kv_heads, 1, 32, false),
		KVS_OPT_U32("head-dim", &a->m.head_dim, 64, 256, false),
		KVS_OPT_SIZE("dram-capacity", &a->dram, 1u << 20, 0, false),
		KVS_OPT_SIZE("nvme-capacity", &a->nvme, 4u << 20, 0, false),
		KVS_OPT_STR("device", &a->device, false),
		KVS_OPT_U64("seed", &seed, 1, 0, false),
		KVS_OPT_STR("kvstashd", &a->kvstashd, false),
		KVS_OPT_FLAG("keep", &a->keep),
		KVS_OPT_FLAG("json", &a->json),
		KVS_OPT_FLAG("block", &a->block),
	};
	int rc;

	a->prompt = 1000;
	a->steps = 32;
	a->long_tokens = 8192;
	a->extra = 200;
	a->long_steps = 4;
	a->dram = 3u << 20;
	a->nvme = 64u << 20;
	a->device = "auto";
	demo_model_default(&a->m);
	seed = a->m.seed;
	rc = kvs_cli_parse(CMD, argc, argv, opts, N_OPTS, NULL, 0, NULL);
	if (rc)
		return rc;
	a->m.seed = seed;
	if (strcmp(a->device, "auto") != 0 && strcmp(a->device, "cpu") != 0 &&
	    strcmp(a->device, "cuda") != 0) {
		kvs_cli_error(CMD, "--device: '%s' is not auto, cpu or cuda",
			      a->device);
		return -KVS_EPARAM;
	}
	if (a->m.q_heads % a->m.kv_heads || a->m.head_dim % 32) {
		kvs_cli_error(CMD, "--q-heads must be a multiple of --kv-heads "
				   "and --head-dim of 32");
		return -KVS_EPARAM;
	}
	if (a->prompt < a->m.residual) {
		kvs_cli_error(CMD, "--prompt must be at least %u (one block)",
			      a->m.residual);
		return -KVS_EPARAM;
	}
	return 0;
}

static int run(struct demo *d, struct results *r)
{
	const struct demo_args *a = &d->a;
	char b1[32], b2[32];
	int err;

	err = find_programs(d);
	if (!err)
		err = make_dir(d);
	if (!err)
		err = start_daemon(d);
	if (err)
		return err;
	say(d,
	    "kvstash demo: %u layers, %u query heads on %u KV heads (GQA), "
	    "D=%u, 2-bit blocks of %u tokens (G=32); K/V with outlier Key "
	    "channels\n",
	    a->m.layers, a->m.q_heads, a->m.kv_heads, a->m.head_dim,
	    a->m.residual);
	say(d,
	    "kvstashd   pid %d on %s: DRAM %s, NVMe %s, store in a temporary "
	    "directory\n",
	    (int)d->procs[0].pid, d->addr, human((double)a->dram, b1),
	    human((double)a->nvme, b2));
	err = request_one(d, r);
	if (!err)
		err = request_two(d, r);
	if (!err)
		err = long_context(d, r);
	if (!err)
		daemon_stat(d, r);
	return err;
}

/* Stops what runs, removes the directory; the results' last facts. */
static void finish(struct demo *d, struct results *r)
{
	bar_end(d);
	r->all_stopped = stop_all(d);
	if (d->dir_made && !d->a.keep)
		r->dir_removed = demo_rmtree(d->dir) == 0;
}

int kvs_cmd_demo(int argc, char **argv)
{
	struct demo *d = calloc(1, sizeof(*d));
	struct results r = { 0 };
	const char *wrong = NULL;
	struct totals t;
	int rc, err;

	if (!d) {
		kvs_cli_error(CMD, "out of memory");
		return KVS_EXIT_FAIL;
	}
	rc = parse(argc, argv, &d->a);
	if (rc) {
		free(d);
		return kvs_cli_usage(CMD, usage_text, rc);
	}
	if (d->a.block) {
		free(d);
		return demo_block_walkthrough();
	}
	d->shared = d->a.prompt / d->a.m.residual * d->a.m.residual;
	d->tty = !d->a.json && isatty(2);
	demo_signals();
	err = run(d, &r);
	finish(d, &r);
	if (err) {
		/* the line saying why is out; nothing is left running */
		free(d);
		return KVS_EXIT_FAIL;
	}
	sum_up(d, &t);
	if (d->a.json)
		summary_json(d, &r, &t);
	else
		summary_text(d, &r, &t);
	if (!r.handoff_same)
		wrong = "decoding after the handoff differs from decoding "
			"without it";
	else if (fact(r.req2, "recompute_identical") == 0)
		wrong = "decoding after the attach differs from recomputing "
			"the prompt";
	else if (!r.all_stopped)
		wrong = "a process it started did not stop";
	if (wrong)
		kvs_cli_error(CMD, "%s", wrong);
	free(d);
	return wrong ? KVS_EXIT_FAIL : KVS_EXIT_OK;
}
