/*
 * bench_format.c - `kvstash bench format`: on one pinned core, the
 * throughput of sealing a block (quantize + finish into a page), unpacking
 * it (open + dequantize to fp32) and verifying it (what a server does on
 * every block), in GB/s of the fp16 K+V the block stands for, beside memcpy
 * of those same bytes.  Each figure is the median of repeated samples.
 */
#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli_util.h"
#include "bench_cmd.h"
#include "kvstash/kvformat.h"

#define BENCH_MIN_SAMPLES 5
#define BENCH_MAX_SAMPLES 201
#define BENCH_SAMPLE_NS 5000000.0 /* aim for 5 ms per sample */
#define VERIFY_TARGET_GBS 5.0

static const char bench_usage[] =
	"usage: kvstash bench format [--heads H] [--head-dim D] [--tokens N]\n"
	"                            [--seconds S] [--lz4] [--only OP]\n"
	"\n"
	"One core, medians of repeated samples, GB/s of the fp16 K+V bytes\n"
	"the block represents (2*H*N*D*2).  Defaults: H=8 D=128 N=128 (one\n"
	"block of S=R=128 tokens, 2-bit, G=32, fp16 metadata), S=2 seconds\n"
	"in all.\n"
	"--lz4 unpacks and verifies an LZ4-compressed block.  --only runs one\n"
	"of memcpy, pack, unpack, verify (for profiling with perf).\n";

struct bench_ctx {
	struct kvs_shape shape;
	struct kvs_ident ident;
	uint16_t *keys, *values; /* fp16 input */
	uint8_t *image; /* page for the seal benchmark */
	uint8_t *obj; /* the encoded block (maybe LZ4) */
	size_t obj_len;
	float *out_k, *out_v;
	uint8_t *copy_dst;
	size_t fp16_bytes; /* K + V */
};

struct bench_op {
	const char *name;
	int (*run)(struct bench_ctx *c);
	double median_ns;
};

static double now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int op_memcpy(struct bench_ctx *c)
{
	memcpy(c->copy_dst, c->keys, c->fp16_bytes / 2);
	memcpy(c->copy_dst + c->fp16_bytes / 2, c->values, c->fp16_bytes / 2);
	/* Keep the copy: the compiler must assume the bytes are read. */
	__asm__ volatile("" : : "r"(c->copy_dst) : "memory");
	return 0;
}

static int op_pack(struct bench_ctx *c)
{
	int rc = kvs_block_quantize(&c->shape, KVS_DTYPE_F16, c->keys,
				    c->values, c->image);

	if (rc == 0)
		rc = kvs_block_finish(&c->shape, &c->ident, c->image);
	return rc;
}

static int op_unpack(struct bench_ctx *c)
{
	struct kvs_view view;
	int rc;

	rc = kvs_object_open(c->obj, c->obj_len, 0, &view);
	if (rc != 0)
		return rc;
	rc = kvs_block_dequantize(&view, c->out_k, c->out_v);
	kvs_view_release(&view);
	return rc;
}

static int op_verify(struct bench_ctx *c)
{
	return kvs_object_verify(c->obj, c->obj_len, 0);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* Median time of one call of @op over samples of calibrated batches,
 * spending about @budget_ns in all. */
static int measure(struct bench_ctx *c, struct bench_op *op, double budget_ns)
{
	double samples[BENCH_MAX_SAMPLES], start, elapsed;
	unsigned long batch = 1;
	size_t n = 0;
	int rc;

	rc = op->run(c); /* warm caches and check it works */
	for (;;) {
		start = now_ns();
		for (unsigned long i = 0; rc == 0 && i < batch; i++)
			rc = op->run(c);
		elapsed = now_ns() - start;
		if (rc != 0 || elapsed >= BENCH_SAMPLE_NS / 4 ||
		    batch >= (1ul << 30))
			break;
		batch *= 2;
	}
	if (elapsed < BENCH_SAMPLE_NS && elapsed > 0)
		batch = (unsigned long)((double)batch * BENCH_SAMPLE_NS /
					elapsed) +
			1;
	start = now_ns();
	while (rc == 0 && n < BENCH_MAX_SAMPLES &&
	       (n < BENCH_MIN_SAMPLES || now_ns() - start < budget_ns)) {
		double t0 = now_ns();

		for (unsigned long i = 0; rc == 0 && i < batch; i++)
			rc = op->run(c);
		samples[n++] = (now_ns() - t0) / (double)batch;
	}
	if (rc != 0) {
		kvs_cli_error("bench format", "%s failed: %s", op->name,
			      kvs_strerror(rc));
		return rc;
	}
	qsort(samples, n, sizeof(samples[0]), cmp_double);
	op->median_ns = n % 2 ? samples[n / 2]
			      : (samples[n / 2 - 1] + samples[n / 2]) / 2;
	return 0;
}

/* Pins the thread to the CPU it runs on; returns that CPU or -1. */
static int pin_to_current_cpu(void)
{
	int cpu = sched_getcpu();
	cpu_set_t set;

	if (cpu < 0)
		return -1;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set) != 0)
		return -1;
	return cpu;
}

static void cpu_model(char *out, size_t size)
{
	char line[256];
	FILE *f = fopen("/proc/cpuinfo", "r");

	snprintf(out, size, "unknown CPU");
	if (f == NULL)
		return;
	while (fgets(line, sizeof(line), f) != NULL) {
		char *colon = strchr(line, ':');

		if (strncmp(line, "model name", 10) == 0 && colon != NULL) {
			colon += strspn(colon + 1, " \t") + 1;
			colon[strcspn(colon, "\n")] = '\0';
			snprintf(out, size, "%s", colon);
			break;
		}
	}
	fclose(f);
}

/* Input with some structure: a per-channel offset plus noise, in fp16. */
static void fill_input(struct bench_ctx *c, size_t count)
{
	uint64_t x = 0x243f6a8885a308d3ull;

	for (size_t i = 0; i < count; i++) {
		float noise;

		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		noise = (float)(x >> 40) * 0x1p-24f - 0.5f;
		c->keys[i] = kvs_f32_to_f16((float)(i % 7) + 2.0f * noise);
		c->values[i] = kvs_f32_to_f16(noise);
	}
}

/* The benchmark's block shape; kvs_block_layout() says if it is valid. */
static void bench_shape(uint32_t heads, uint32_t dim, uint32_t tokens,
			struct kvs_shape *shape)
{
	kvs_shape_default(shape, (uint16_t)heads, (uint16_t)dim);
	shape->span = tokens;
	if (shape->residual > tokens || tokens % shape->residual != 0)
		shape->residual = tokens;
}

static void bench_release(struct bench_ctx *c)
{
	free(c->keys);
	free(c->values);
	free(c->image);
	free(c->obj);
	free(c->out_k);
	free(c->out_v);
	free(c->copy_dst);
}

static int bench_setup(struct bench_ctx *c, uint32_t heads, uint32_t dim,
		       uint32_t tokens, bool lz4)
{
	struct kvs_layout layout;
	size_t count = (size_t)heads * tokens * dim;
	int rc;

	memset(c, 0, sizeof(*c));
	bench_shape(heads, dim, tokens, &c->shape);
	if (kvs_block_layout(&c->shape, &layout) != 0)
		return -KVS_EPARAM; /* checked with the arguments */
	c->fp16_bytes = 2 * count * sizeof(uint16_t);
	c->keys = malloc(count * sizeof(uint16_t));
	c->values = malloc(count * sizeof(uint16_t));
	c->image = malloc(layout.total_size);
	c->out_k = malloc(count * sizeof(float));
	c->out_v = malloc(count * sizeof(float));
	c->copy_dst = malloc(c->fp16_bytes);
	if (c->keys == NULL || c->values == NULL || c->image == NULL ||
	    c->out_k == NULL || c->out_v == NULL || c->copy_dst == NULL) {
		kvs_cli_error("bench format", "out of memory");
		bench_release(c);
		return -ENOMEM;
	}
	fill_input(c, count);
	c->ident.layer = 0;
	memset(c->ident.block_id, 0xb1, KVS_ID_SIZE);
	rc = kvs_block_seal(&c->shape, &c->ident, KVS_DTYPE_F16, c->keys,
			    c->values, lz4 ? KVS_ENCODE_LZ4 : 0, &c->obj,
			    &c->obj_len);
	if (rc != 0) {
		kvs_cli_error("bench format", "seal: %s", kvs_strerror(rc));
		bench_release(c);
	}
	return rc;
}

static void bench_report(const struct bench_ctx *c, const struct bench_op *ops,
			 size_t n_ops, int cpu)
{
	double base = (double)c->fp16_bytes / ops[0].median_ns;
	char model[128];

	cpu_model(model, sizeof(model));
	printf("kvstash bench format: %u KV heads x %" PRIu32 " tokens x D=%u, "
	       "%u-bit G=%u, fp16 metadata; fp16 K+V %zu B, block %zu B\n",
	       c->shape.kv_heads, c->shape.span, c->shape.head_dim,
	       c->shape.bits, c->shape.group, c->fp16_bytes, c->obj_len);
	printf("one core (cpu %d, %s), medians\n", cpu, model);
	printf("%-8s %12s %12s %10s\n", "op", "median", "GB/s fp16", "/memcpy");
	for (size_t i = 0; i < n_ops; i++) {
		double gbs = (double)c->fp16_bytes / ops[i].median_ns;

		printf("%-8s %9.2f us %12.2f %9.3fx\n", ops[i].name,
		       ops[i].median_ns / 1e3, gbs, gbs / base);
	}
}

int kvs_bench_format(int argc, char **argv)
{
	uint32_t heads = 8, dim = 128, tokens = 128;
	double seconds = 2.0;
	const char *only = NULL;
	bool lz4 = false;
	struct kvs_cli_opt opts[] = {
		KVS_OPT_U32("heads", &heads, 1, UINT16_MAX, false),
		KVS_OPT_U32("head-dim", &dim, 1, UINT16_MAX, false),
		KVS_OPT_U32("tokens", &tokens, 1, 1u << 20, false),
		KVS_OPT_DOUBLE("seconds", &seconds, false),
		KVS_OPT_FLAG("lz4", &lz4),
		KVS_OPT_STR("only", &only, false),
	};
	struct bench_op ops[] = {
		{ "memcpy", op_memcpy, 0 },
		{ "pack", op_pack, 0 },
		{ "unpack", op_unpack, 0 },
		{ "verify", op_verify, 0 },
	};
	const size_t n_ops = sizeof(ops) / sizeof(ops[0]);
	struct bench_ctx c;
	double verify_gbs;
	int rc, cpu;

	rc = kvs_cli_parse("bench format", argc, argv, opts,
			   sizeof(opts) / sizeof(opts[0]), NULL, 0, NULL);
	if (rc == 0 && (seconds <= 0 || seconds > 3600)) {
		kvs_cli_error("bench format",
			      "--seconds: %g is out of range: must be more "
			      "than 0 and at most 3600",
			      seconds);
		rc = -KVS_EPARAM;
	}
	if (rc == 0 && only != NULL) {
		rc = -KVS_EPARAM;
		for (size_t i = 0; i < n_ops; i++)
			if (strcmp(only, ops[i].name) == 0)
				rc = 0;
		if (rc != 0)
			kvs_cli_error("bench format",
				      "--only: expected "
				      "memcpy, pack, unpack or verify, got "
				      "'%s'",
				      only);
	}
	if (rc == 0) {
		struct kvs_layout layout;

		bench_shape(heads, dim, tokens, &c.shape);
		if (kvs_block_layout(&c.shape, &layout) != 0) {
			kvs_cli_error("bench format",
				      "invalid shape: --head-dim and --tokens "
				      "must be multiples of 32");
			rc = -KVS_EPARAM;
		}
	}
	if (rc != 0)
		return kvs_cli_usage("bench format", bench_usage, rc);
	cpu = pin_to_current_cpu();
	if (cpu < 0)
		kvs_cli_error("bench format",
			      "could not pin to one CPU: %s; "
			      "figures may be noisy",
			      strerror(errno));
	if (bench_setup(&c, heads, dim, tokens, lz4) != 0)
		return KVS_EXIT_FAIL;
	for (size_t i = 0; i < n_ops && rc == 0; i++)
		if (only == NULL || strcmp(only, ops[i].name) == 0)
			rc = measure(&c, &ops[i],
				     only != NULL
					     ? seconds * 1e9
					     : seconds * 1e9 / (double)n_ops);
	for (size_t i = 0; rc == 0 && only != NULL && i < n_ops; i++)
		if (strcmp(only, ops[i].name) == 0)
			printf("%s: median %.2f us, %.2f GB/s of fp16 K+V\n",
			       only, ops[i].median_ns / 1e3,
			       (double)c.fp16_bytes / ops[i].median_ns);
	if (rc == 0 && only == NULL) {
		bench_report(&c, ops, n_ops, cpu);
		verify_gbs = (double)c.fp16_bytes / ops[n_ops - 1].median_ns;
		printf("verify target >= %.1f GB/s: %s\n", VERIFY_TARGET_GBS,
		       verify_gbs >= VERIFY_TARGET_GBS ? "met" : "NOT MET");
	}
	bench_release(&c);
	return rc == 0 ? KVS_EXIT_OK : KVS_EXIT_FAIL;
}
