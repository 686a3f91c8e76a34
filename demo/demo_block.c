/*
 * demo_block.c - `kvstash demo --block`: the one-block walk-through,
 * without a daemon.  Generates one layer of
 * K/V (seeded, with outlier Key channels as real models have), seals it
 * into a 2-bit block, verifies it, shows a corrupted copy refused, unpacks
 * it and reports the reconstruction error and the bytes saved, then the
 * seed's residual trace and memory examples in one line each.  The output
 * is the same on every run.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli_util.h"
#include "common/rng.h"
#include "demo_cmd.h"
#include "demo.h"
#include "kvstash/kvformat.h"
#include "kvstash/stream.h"

#define DEMO_HEADS 8
#define DEMO_DIM 128
#define DEMO_TOKENS 128
#define DEMO_GROUP 32
#define DEMO_SEED 0x6b7673746173ull /* "kvstas" */
#define DEMO_OUTLIER_A 5 /* channel */
#define DEMO_OUTLIER_A_BIAS 18.0f
#define DEMO_OUTLIER_B 77
#define DEMO_OUTLIER_B_BIAS -14.0f
#define DEMO_COUNT ((size_t)DEMO_HEADS * DEMO_TOKENS * DEMO_DIM)

/* Keys: per-channel scale and bias, two channels with large magnitude (the
 * outliers that make per-token Key quantization lose precision).  Values:
 * plain noise. */
static void demo_generate(float *keys, float *values)
{
	struct kvs_rng rng = { DEMO_SEED };
	float scale[DEMO_DIM], bias[DEMO_DIM];

	for (int d = 0; d < DEMO_DIM; d++) {
		scale[d] = 0.5f + 0.5f * fabsf(kvs_rng_normal(&rng));
		bias[d] = 0.3f * kvs_rng_normal(&rng);
	}
	scale[DEMO_OUTLIER_A] = 4.0f;
	bias[DEMO_OUTLIER_A] = DEMO_OUTLIER_A_BIAS;
	scale[DEMO_OUTLIER_B] = 3.0f;
	bias[DEMO_OUTLIER_B] = DEMO_OUTLIER_B_BIAS;
	for (size_t i = 0; i < DEMO_COUNT; i++) {
		size_t d = i % DEMO_DIM;

		keys[i] = bias[d] + scale[d] * kvs_rng_normal(&rng);
		values[i] = kvs_rng_normal(&rng);
	}
}

struct walk_error {
	double max_abs, mean_abs, relative;
};

static struct walk_error demo_compare(const float *ref, const float *got,
				      size_t n)
{
	struct walk_error e = { 0 };
	double sum_abs = 0.0, sum_err2 = 0.0, sum_ref2 = 0.0;

	for (size_t i = 0; i < n; i++) {
		double diff = fabs((double)ref[i] - (double)got[i]);

		if (diff > e.max_abs)
			e.max_abs = diff;
		sum_abs += diff;
		sum_err2 += diff * diff;
		sum_ref2 += (double)ref[i] * ref[i];
	}
	e.mean_abs = sum_abs / (double)n;
	e.relative = sqrt(sum_err2 / sum_ref2);
	return e;
}

/* The Keys quantized the other way (per token, groups along channels),
 * to show why KIVI groups Keys along time. */
static int per_token_keys(const float *keys, float *out)
{
	uint8_t codes[DEMO_GROUP];
	float origin, step;
	int rc;

	for (size_t g = 0; g < DEMO_COUNT; g += DEMO_GROUP) {
		rc = kvs_quant_group(keys + g, DEMO_GROUP, 1, 2, KVS_DTYPE_F16,
				     codes, &origin, &step);
		if (rc != 0)
			return rc;
		for (size_t i = 0; i < DEMO_GROUP; i++)
			out[g + i] = kvs_dequant(origin, step, codes[i]);
	}
	return 0;
}

static void demo_ids(struct kvs_ident *ident, const struct kvs_shape *shape)
{
	struct kvs_model_desc desc = {
		.model_id = "demo-model",
		.layers = 1,
		.kv_dtype = KVS_DTYPE_F32,
		.shape = *shape,
		.layout = KVS_LAYOUT_TOKEN_MAJOR,
	};
	uint32_t tokens[DEMO_TOKENS];

	for (uint32_t t = 0; t < DEMO_TOKENS; t++)
		tokens[t] = 1000 + 7 * t;
	memset(ident, 0, sizeof(*ident));
	if (kvs_model_fingerprint(&desc, ident->model_fp) != 0 ||
	    kvs_span_id("demo", ident->model_fp, NULL, tokens, DEMO_TOKENS,
			ident->block_id) != 0)
		kvs_cli_error("demo", "could not compute the block id");
}

/* Flips one byte of the Value codes in a copy and reports the check that
 * refuses it. */
static int demo_corrupt(const uint8_t *obj, size_t len)
{
	struct kvs_header hdr;
	uint8_t *copy;
	int rc;

	rc = kvs_header_decode(obj, len, 0, &hdr);
	if (rc != 0)
		return rc;
	copy = malloc(len);
	if (copy == NULL)
		return -ENOMEM;
	memcpy(copy, obj, len);
	copy[hdr.section[KVS_SEC_VAL_CODES].offset + 100] ^= 0x04;
	rc = kvs_object_verify(copy, len, 0);
	printf("3. corrupt  one bit flipped in val_codes: %s (%s check)\n",
	       rc != 0 ? "refused" : "NOT DETECTED",
	       rc != 0 ? kvs_check_name(rc) : "no");
	free(copy);
	return rc != 0 ? 0 : -KVS_ECORRUPT;
}

static void demo_report_error(const char *what, struct walk_error e)
{
	printf("            %-27s max abs %.4f, mean abs %.4f, relative "
	       "(L2) %.4f\n",
	       what, e.max_abs, e.mean_abs, e.relative);
}

static void demo_oneliners(void)
{
	struct kvs_trace_row rows[9];
	struct kvs_memory m;

	if (kvs_trace(4, 2, KVS_ORDER_KIVI, 9, rows) == 0)
		printf("6. trace    R=4 G=2, step 9 (kivi order): Keys %u "
		       "quantized + %u full, Values %u quantized + %u full; "
		       "one softmax, split at the Value boundary\n",
		       rows[8].k_compute_quant, rows[8].k_compute_full,
		       rows[8].v_compute_quant, rows[8].v_compute_full);
	if (kvs_memory_account(4096, 128, 32, 128, 2, 2, 2, 1, 1, 1, &m) == 0)
		printf("7. memory   T=4096 D=128 G=32 R=128 b=2 e=f=2, per "
		       "layer and KV head: %.0f KiB quantized + %.0f KiB "
		       "residual = %.0f KiB, against 2048 KiB in fp16 "
		       "(%.2fx)\n",
		       m.quantized_bytes / 1024, m.residual_bytes / 1024,
		       m.total_bytes / 1024, 2097152.0 / m.total_bytes);
	printf("more:       kvstash block --help, kvstash trace --help, "
	       "kvstash memory --help\n");
}

/* Seal, verify, corrupt, unpack and compare: steps 1 to 5. */
static int demo_block(const float *keys, const float *values, float *out_k,
		      float *out_v)
{
	const size_t f16 = 2 * DEMO_COUNT * 2, f32 = 2 * DEMO_COUNT * 4;
	struct kvs_shape shape;
	struct kvs_ident ident;
	struct kvs_view view;
	uint8_t *obj;
	size_t len;
	char hex[65];
	int rc;

	kvs_shape_default(&shape, DEMO_HEADS, DEMO_DIM);
	shape.span = DEMO_TOKENS;
	shape.residual = DEMO_TOKENS;
	demo_ids(&ident, &shape);
	rc = kvs_block_seal(&shape, &ident, KVS_DTYPE_F32, keys, values, 0,
			    &obj, &len);
	if (rc != 0) {
		kvs_cli_error("demo", "seal: %s", kvs_strerror(rc));
		return rc;
	}
	kvs_id_to_hex(ident.block_id, hex);
	printf("1. pack     block %.16s... layer 0: %zu bytes\n", hex, len);
	rc = kvs_object_verify(obj, len, 0);
	if (rc != 0) {
		kvs_cli_error("demo", "verify: %s", kvs_strerror(rc));
		goto free_obj;
	}
	printf("2. verify   ok: magic, version, header checksum, bounds, "
	       "section checksums, finite metadata\n");
	rc = demo_corrupt(obj, len);
	if (rc != 0) {
		kvs_cli_error("demo", "corruption check: %s", kvs_strerror(rc));
		goto free_obj;
	}
	rc = kvs_object_open(obj, len, 0, &view);
	if (rc == 0) {
		rc = kvs_block_dequantize(&view, out_k, out_v);
		kvs_view_release(&view);
	}
	if (rc != 0) {
		kvs_cli_error("demo", "unpack: %s", kvs_strerror(rc));
		goto free_obj;
	}
	printf("4. unpack   fp32 K/V back from the 2-bit block\n");
	demo_report_error("Keys (per channel):",
			  demo_compare(keys, out_k, DEMO_COUNT));
	demo_report_error("Values (per token):",
			  demo_compare(values, out_v, DEMO_COUNT));
	rc = per_token_keys(keys, out_k);
	if (rc != 0) {
		kvs_cli_error("demo", "per-token keys: %s", kvs_strerror(rc));
		goto free_obj;
	}
	demo_report_error("Keys if per token instead:",
			  demo_compare(keys, out_k, DEMO_COUNT));
	printf("5. bytes    %zu against %zu in fp16 (%.2fx smaller, %zu "
	       "saved) and %zu in fp32 (%.2fx)\n",
	       len, f16, (double)f16 / (double)len, f16 - len, f32,
	       (double)f32 / (double)len);
free_obj:
	free(obj);
	return rc;
}

#if !KVS_DEMO_FULL
/* Without the client library: `kvstash demo [--block]` is the
 * walk-through, and says what the full demo needs. */
int kvs_cmd_demo(int argc, char **argv)
{
	bool block = false;
	struct kvs_cli_opt opts[] = { KVS_OPT_FLAG("block", &block) };
	int rc = kvs_cli_parse("demo", argc, argv, opts, 1, NULL, 0, NULL);

	if (rc)
		return kvs_cli_usage("demo", "usage: kvstash demo --block\n",
				     rc);
	if (!block) {
		kvs_cli_error("demo", "built without UCX: the demo needs "
				      "kvstashd (kvstash demo --block works "
				      "without)");
		return KVS_EXIT_FAIL;
	}
	return demo_block_walkthrough();
}
#endif

int demo_block_walkthrough(void)
{
	float *buf;
	int rc;

	buf = malloc(4 * DEMO_COUNT * sizeof(float));
	if (buf == NULL) {
		kvs_cli_error("demo", "out of memory");
		return KVS_EXIT_FAIL;
	}
	demo_generate(buf, buf + DEMO_COUNT);
	printf("kvstash demo: one layer, %d KV heads x %d tokens x D=%d, "
	       "2-bit codes, G=%d, fp16 origin and step\n",
	       DEMO_HEADS, DEMO_TOKENS, DEMO_DIM, DEMO_GROUP);
	printf("            K/V generated from a fixed seed; Key channels %d "
	       "and %d are outliers (around %+.0f and %+.0f)\n",
	       DEMO_OUTLIER_A, DEMO_OUTLIER_B, (double)DEMO_OUTLIER_A_BIAS,
	       (double)DEMO_OUTLIER_B_BIAS);
	rc = demo_block(buf, buf + DEMO_COUNT, buf + 2 * DEMO_COUNT,
			buf + 3 * DEMO_COUNT);
	if (rc == 0)
		demo_oneliners();
	free(buf);
	return rc == 0 ? KVS_EXIT_OK : KVS_EXIT_FAIL;
}
