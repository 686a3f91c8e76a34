/*
 * fuzz_encode.c - libFuzzer target for the encoder: the quantizer, the
 * block sealer and the LZ4 re-encoder, checked against the numeric
 * contract on arbitrary float bit patterns.
 *
 * Input: byte 0 picks bits, metadata type, input type and LZ4; byte 1
 * picks G, heads and span; the rest fills K then V (zero padded) as raw
 * little-endian elements of the input type, so NaN, infinities,
 * subnormals and extreme ranges all occur.  Properties, each an abort():
 *   - sealing fails when an input is not finite (with -KVS_ENONFINITE,
 *     or -KVS_ERANGE when a group the sealer reaches first is out of
 *     range), else with -KVS_ERANGE exactly when kvs_quant_group refuses
 *     one of the block's groups, else succeeds;
 *   - a sealed block opens, and every element reconstructs bit-identical
 *     to kvs_quant_group + kvs_dequant on its group, finite, and within
 *     the contract's error bound of the input.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_target.h"
#include "kvstash/kvformat.h"
#include "testutil.h"

#define D_MAX 32
#define ELEMS_MAX (2 * 64 * D_MAX)

struct fuzz_case {
	struct kvs_shape shape;
	enum kvs_dtype in;
	unsigned flags;
	size_t n;
	uint8_t raw[2][ELEMS_MAX * 4]; /* K, V in the input type */
	float x[2][ELEMS_MAX]; /* the same, widened */
};

static void parse(struct fuzz_case *c, const uint8_t *data, size_t size)
{
	static const enum kvs_dtype types[3] = { KVS_DTYPE_F32, KVS_DTYPE_F16,
						 KVS_DTYPE_BF16 };
	size_t f, need, have;

	kvs_shape_default(&c->shape, 1 + (data[1] >> 3 & 1), D_MAX);
	c->shape.bits = data[0] & 1 ? 4 : 2;
	c->shape.meta_type = (uint8_t)types[(data[0] >> 1) % 3];
	c->in = types[(data[0] >> 3) % 3];
	c->flags = data[0] & 0x80 ? KVS_ENCODE_LZ4 : 0;
	c->shape.group = (uint16_t)(2u << (data[1] % 5));
	c->shape.residual = c->shape.group;
	c->shape.span = c->shape.group * (1u + (data[1] >> 4 & 1));
	c->n = (size_t)c->shape.kv_heads * c->shape.span * c->shape.head_dim;
	f = kvs_dtype_size(c->in);
	need = 2 * c->n * f;
	have = size - 2 < need ? size - 2 : need;
	memset(c->raw, 0, sizeof(c->raw));
	for (size_t i = 0; i < have; i++)
		c->raw[i / (c->n * f)][i % (c->n * f)] = data[2 + i];
	for (int kv = 0; kv < 2; kv++)
		for (size_t i = 0; i < c->n; i++)
			c->x[kv][i] = kvs_dtype_load(c->in, c->raw[kv], i);
}

/*
 * Quantizes group @g of K (kv 0: G tokens of one channel) or V (kv 1: G
 * channels of one token) with kvs_quant_group; @first and @stride locate
 * it in the widened input.
 */
static int group_params(const struct fuzz_case *c, int kv, size_t first,
			size_t stride, uint8_t *codes, float *o, float *s)
{
	return kvs_quant_group(c->x[kv] + first, c->shape.group, stride,
			       c->shape.bits,
			       (enum kvs_dtype)c->shape.meta_type, codes, o, s);
}

/* Walks every group; with @view, checks its elements. Returns the first
 * refusal of kvs_quant_group (0 if none). */
static int walk_groups(const struct fuzz_case *c, const struct kvs_view *view)
{
	const struct kvs_shape *sh = &c->shape;
	uint32_t D = sh->head_dim, S = sh->span, G = sh->group;
	enum kvs_dtype meta = (enum kvs_dtype)sh->meta_type;

	for (int kv = 0; kv < 2; kv++) {
		for (size_t first = 0; first < c->n;) {
			size_t h = first / ((size_t)S * D);
			size_t t = first / D % S, d = first % D;
			size_t stride = kv == 0 ? D : 1;
			uint8_t codes[32];
			float o, s, lo = INFINITY, hi = -INFINITY;
			int rc = group_params(c, kv, first, stride, codes, &o,
					      &s);

			if (rc < 0)
				return rc;
			for (uint32_t i = 0; view != NULL && i < G; i++) {
				float x = c->x[kv][first + i * stride];

				lo = fminf(lo, x);
				hi = fmaxf(hi, x);
			}
			for (uint32_t i = 0; view != NULL && i < G; i++) {
				float want = kvs_dequant(o, s, codes[i]);
				float got = kv == 0 ? kvs_block_key(view, h,
								    t + i, d)
						    : kvs_block_value(view, h,
								      t, d + i);
				float x = c->x[kv][first + i * stride];

				if (memcmp(&got, &want, sizeof(got)) != 0 ||
				    !isfinite(got) ||
				    fabs((double)got - x) >
					    test_group_bound(lo, hi, sh->bits,
							     meta))
					abort();
			}
			/* next group: Keys step along channels, then down G
			 * tokens; Values along channel groups, then tokens */
			if (kv == 0)
				first +=
					d + 1 < D ? 1 : (size_t)(G - 1) * D + 1;
			else
				first += G;
		}
	}
	return 0;
}

int kvs_fuzz_target_run(const uint8_t *data, size_t size)
{
	static struct fuzz_case c;
	struct kvs_ident id = { 0 };
	struct kvs_view view;
	int nonfinite = 0, expect, rc;
	uint8_t *obj = NULL;
	size_t len;

	if (size < 2)
		return -KVS_EPARAM;
	parse(&c, data, size);
	for (int kv = 0; kv < 2; kv++)
		for (size_t i = 0; i < c.n; i++)
			nonfinite |= !isfinite(c.x[kv][i]);
	expect = nonfinite ? -KVS_ENONFINITE : walk_groups(&c, NULL);
	rc = kvs_block_seal(&c.shape, &id, c.in, c.raw[0], c.raw[1], c.flags,
			    &obj, &len);
	if (rc != expect && !(nonfinite && rc == -KVS_ERANGE))
		abort();
	if (rc < 0)
		return rc;
	if (kvs_object_open(obj, len, 0, &view) != 0)
		abort();
	walk_groups(&c, &view);
	kvs_view_release(&view);
	free(obj);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	kvs_fuzz_target_run(data, size);
	return 0;
}
