/*
 * demo.h - what the parts of `kvstash demo` share: the synthetic model
 * whose K/V the demo stores (demo_model.c), the node processes' options
 * and roles (demo_node.c, the hidden `kvstash demo-node`), and the line
 * protocol they report to the parent on their stdout (cmd_demo.c).
 *
 * The synthetic model: per layer and KV head, every Key channel has its
 * own scale and bias, and a few channels are outliers (large bias and
 * scale), as real Keys have; Values vary around a mean per channel;
 * queries are noise.  A
 * token's K/V are a function of (seed, layer, position, token id) and a
 * decode step's query of (seed, layer, position, request): two requests
 * with the same token ids at the same positions have the same K/V, so
 * their blocks are the same blocks, as with a real model.  Token ids are
 * a stream per request; request 2 shares the first `shared` ids of
 * request 1.
 *
 * The line protocol (one line each, space separated):
 *   progress LABEL DONE TOTAL     a long phase advanced
 *   fact KEY VALUE                a number for the summary
 */
#ifndef KVSTASH_TOOLS_DEMO_H
#define KVSTASH_TOOLS_DEMO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct demo_model {
	uint32_t layers, q_heads, kv_heads, head_dim, residual;
	uint64_t seed;
	float *channels; /* [layers][kv_heads][head_dim]: Key scale and
			    bias, Value mean */
};

/* The default model: 4 layers, 8 query heads on 2 KV heads (GQA), head
 * dim 128, R = S = 128, the demo's seed. */
void demo_model_default(struct demo_model *m);

/* Computes the per-channel scales and biases: 0 or -ENOMEM.  fini frees
 * them. */
int demo_model_init(struct demo_model *m);
void demo_model_fini(struct demo_model *m);

/* Token id of @request at @pos; request 2 has request 1's ids before
 * @shared. */
uint32_t demo_token_id(const struct demo_model *m, uint32_t request,
		       uint32_t shared, uint32_t pos);

/* The K/V of one token of @layer: @k, @v [kv_heads][D] fp32, already
 * rounded to fp16 (the model's K/V dtype), written at h * @stride + d. */
void demo_token_kv(const struct demo_model *m, uint32_t layer, uint32_t pos,
		   uint32_t id, float *k, float *v, size_t stride);

/* The query of a decode step: [q_heads][D] fp32 rounded to fp16. */
void demo_token_q(const struct demo_model *m, uint32_t layer, uint32_t pos,
		  uint32_t request, float *q);

/*
 * Attention of @q [q_heads][D] over @n tokens of full-precision K/V
 * (@k, @v [kv_heads][cap][D], rows [0, n)), GQA, scale 1/sqrt(D), in
 * double: the fp16 reference.  @out [q_heads][D].  0 or -ENOMEM.
 */
int demo_attention(const struct demo_model *m, const float *q, const float *k,
		   const float *v, uint32_t n, uint32_t cap, float *out);

/* Running error of outputs against the reference. */
struct demo_error {
	double err2, ref2, max_abs;
	uint64_t values;
};
void demo_error_add(struct demo_error *e, const float *ref, const float *got,
		    size_t n);

/* ---- processes (demo_proc.c) ------------------------------------------ */

#define DEMO_FACTS 48

/* A process the demo started: the daemon or a node. */
struct demo_proc {
	char name[32]; /* "kvstashd", "prefill", "decode" */
	pid_t pid; /* 0: not started */
	int out; /* read end of its stdout (nodes), or -1 */
	bool reaped;
	int status; /* waitpid status once reaped */
	char log[4096]; /* its stderr */
	struct {
		char key[32];
		double value;
	} facts[DEMO_FACTS];
	unsigned n_facts;
	char line[512]; /* a line not yet complete */
	size_t line_len;
};

/* Set by SIGINT, SIGTERM and SIGHUP once demo_signals() is called. */
extern volatile int demo_interrupted;
void demo_signals(void);

/*
 * demo_spawn - fork and exec @argv[0] as @p: in a process group of its
 * own (a Ctrl-C reaches the demo, which stops it), ended by SIGTERM if the
 * demo dies first, stdin from /dev/null, stderr to @p->log, stdout to a
 * pipe (@p->out) when @pipe_out, else to the log too.  0 or -errno.
 */
int demo_spawn(struct demo_proc *p, char *const argv[], bool pipe_out);
/* Reaps @p if it ended; true while it runs. */
bool demo_running(struct demo_proc *p);
/* SIGTERM, then SIGKILL after @grace_ms; reaps.  NULL-safe, idempotent. */
void demo_stop(struct demo_proc *p, int grace_ms);
/* Its exit status as a word ("exit 1", "signal 9"). */
const char *demo_status(const struct demo_proc *p, char *buf, size_t size);
/* The last line of its log that is not a rule, or "" (into @buf). */
const char *demo_last_log_line(const struct demo_proc *p, char *buf,
			       size_t size);
/* Removes @dir and everything under it. */
int demo_rmtree(const char *dir);

/* `kvstash demo --block`, the one-block walk-through (demo_block.c). */
int demo_block_walkthrough(void);

#endif
