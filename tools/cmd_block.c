/*
 * cmd_block.c - `kvstash block pack|unpack|inspect|verify`: seal raw K/V
 * files into a block, reconstruct them, show a block's header and section
 * table, and validate a block the way a server does.
 *
 * Raw arrays are little-endian [head][token][channel].  The block id is
 * kvs_span_id(namespace, model fingerprint, parent, token ids); the model
 * fingerprint is kvs_model_fingerprint() over (--model, --layers, --dtype,
 * the shape, the token-major layout), so blocks of every layer of one model
 * share a fingerprint and a span id, and differ by layer index only.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli_util.h"
#include "cmd.h"
#include "kvstash/kvformat.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
	       "raw fp32 output is written as host floats");

static const char block_usage[] =
	"usage: kvstash block pack --kv-heads H --head-dim D --tokens N\n"
	"                          --bits B --group G --meta fp16|bf16|fp32\n"
	"                          --dtype f32|f16|bf16 --keys K.bin\n"
	"                          --values V.bin --token-ids IDS.u32\n"
	"                          [--residual R] [--parent HEX]\n"
	"                          [--namespace STR] [--model STR]\n"
	"                          [--layers L] [--layer I] [--first-pos P]\n"
	"                          [--lz4] --out BLOCK\n"
	"       kvstash block unpack BLOCK --keys K.f32 --values V.f32\n"
	"       kvstash block inspect BLOCK [--json]\n"
	"       kvstash block verify BLOCK\n"
	"\n"
	"K.bin, V.bin: raw little-endian [head][token][channel] of --dtype.\n"
	"IDS.u32: N little-endian uint32 token ids.  The block spans the N\n"
	"tokens (S = N, R = N unless --residual).  Defaults: --namespace\n"
	"default, --model unnamed, --layers 1, --layer 0, --first-pos 0.\n"
	"unpack writes fp32 in the same order.  verify exits 0 when valid,\n"
	"else 1 with one line naming the failed check.\n";

static const char *const block_section_names[KVS_BLOCK_SECTIONS] = {
	"key_codes", "key_origin", "key_step",
	"val_codes", "val_origin", "val_step",
};

static const char *const tail_section_names[KVS_TAIL_SECTIONS] = {
	"key_resid",
	"val_resid",
};

struct pack_args {
	uint32_t kv_heads, head_dim, tokens, bits, group, residual;
	uint32_t layers, layer;
	uint64_t first_pos;
	const char *meta, *dtype, *keys, *values, *token_ids, *parent;
	const char *ns, *model, *out;
	bool lz4;
};

struct pack_inputs {
	uint8_t *keys, *values, *ids_raw;
	uint32_t *ids;
};

static void pack_inputs_release(struct pack_inputs *in)
{
	free(in->keys);
	free(in->values);
	free(in->ids_raw);
	free(in->ids);
}

static int parse_pack_args(int argc, char **argv, struct pack_args *a)
{
	struct kvs_cli_opt opts[] = {
		KVS_OPT_U32("kv-heads", &a->kv_heads, 1, UINT16_MAX, true),
		KVS_OPT_U32("head-dim", &a->head_dim, 1, UINT16_MAX, true),
		KVS_OPT_U32("tokens", &a->tokens, 1, UINT32_MAX, true),
		KVS_OPT_U32("bits", &a->bits, 1, 8, true),
		KVS_OPT_U32("group", &a->group, 1, UINT16_MAX, true),
		KVS_OPT_STR("meta", &a->meta, true),
		KVS_OPT_STR("dtype", &a->dtype, true),
		KVS_OPT_STR("keys", &a->keys, true),
		KVS_OPT_STR("values", &a->values, true),
		KVS_OPT_STR("token-ids", &a->token_ids, true),
		KVS_OPT_STR("out", &a->out, true),
		KVS_OPT_U32("residual", &a->residual, 1, UINT32_MAX, false),
		KVS_OPT_STR("parent", &a->parent, false),
		KVS_OPT_STR("namespace", &a->ns, false),
		KVS_OPT_STR("model", &a->model, false),
		KVS_OPT_U32("layers", &a->layers, 1, UINT32_MAX, false),
		KVS_OPT_U32("layer", &a->layer, 0, UINT32_MAX - 1, false),
		KVS_OPT_U64("first-pos", &a->first_pos, 0, 0, false),
		KVS_OPT_FLAG("lz4", &a->lz4),
	};
	int rc;

	memset(a, 0, sizeof(*a));
	a->ns = "default";
	a->model = "unnamed";
	a->layers = 1;
	rc = kvs_cli_parse("block pack", argc, argv, opts,
			   sizeof(opts) / sizeof(opts[0]), NULL, 0, NULL);
	if (rc != 0)
		return rc;
	if (a->residual == 0)
		a->residual = a->tokens;
	/* The block's tokens sit at first_pos .. first_pos + tokens - 1. */
	if (a->first_pos > UINT64_MAX - (a->tokens - 1)) {
		kvs_cli_error("block pack",
			      "--first-pos %" PRIu64 " with --tokens %" PRIu32
			      " puts positions past 2^64 - 1",
			      a->first_pos, a->tokens);
		return -KVS_EPARAM;
	}
	if (a->layer >= a->layers) {
		kvs_cli_error("block pack",
			      "--layer %" PRIu32 " needs "
			      "--layers greater than it (the model's layer "
			      "count, part of the fingerprint)",
			      a->layer);
		return -KVS_EPARAM;
	}
	return 0;
}

/* Shape, dtypes and the parent id from the arguments; prints why not. */
static int pack_shape(const struct pack_args *a, struct kvs_shape *shape,
		      enum kvs_dtype *in_dtype, struct kvs_ident *ident)
{
	enum kvs_dtype meta;

	if (kvs_dtype_parse(a->meta, &meta) != 0) {
		kvs_cli_error("block pack",
			      "--meta: expected fp16, bf16 or "
			      "fp32, got '%s'",
			      a->meta);
		return -KVS_EPARAM;
	}
	if (kvs_dtype_parse(a->dtype, in_dtype) != 0) {
		kvs_cli_error("block pack",
			      "--dtype: expected f32, f16 or "
			      "bf16, got '%s'",
			      a->dtype);
		return -KVS_EPARAM;
	}
	if (a->group > a->tokens || a->tokens % a->group != 0) {
		kvs_cli_error("block pack",
			      "--tokens %" PRIu32 " must be a "
			      "multiple of --group %" PRIu32,
			      a->tokens, a->group);
		return -KVS_EPARAM;
	}
	memset(shape, 0, sizeof(*shape));
	shape->kv_heads = (uint16_t)a->kv_heads;
	shape->head_dim = (uint16_t)a->head_dim;
	shape->group = (uint16_t)a->group;
	shape->bits = (uint8_t)a->bits;
	shape->meta_type = (uint8_t)meta;
	shape->span = a->tokens;
	shape->residual = a->residual;
	if (kvs_shape_check(shape) != 0) {
		kvs_cli_error("block pack",
			      "invalid shape: needs bits 2 or "
			      "4, group a power of two >= 2 dividing "
			      "--head-dim and --residual, --tokens a multiple "
			      "of --residual, and at most 2^30 codes (H*N*D)");
		return -KVS_EPARAM;
	}
	memset(ident, 0, sizeof(*ident));
	if (a->parent != NULL &&
	    kvs_id_from_hex(a->parent, ident->parent_id) != 0) {
		kvs_cli_error("block pack",
			      "--parent: expected 64 hex digits, "
			      "got '%s'",
			      a->parent);
		return -KVS_EPARAM;
	}
	ident->layer = a->layer;
	ident->first_pos = a->first_pos;
	return 0;
}

/* Index of the first non-finite element of @count, or -1. */
static long long find_nonfinite(enum kvs_dtype dtype, const uint8_t *base,
				size_t count)
{
	for (size_t i = 0; i < count; i++)
		if (!isfinite(kvs_dtype_load(dtype, base, i)))
			return (long long)i;
	return -1;
}

/* Reads one K or V file: exactly @expect bytes, all finite. */
static int read_kv(const struct pack_args *a, const char *what,
		   const char *path, enum kvs_dtype dtype, size_t expect,
		   uint8_t **out)
{
	uint8_t *buf;
	size_t len, d = a->head_dim, n = a->tokens;
	long long bad;
	int rc;

	rc = kvs_cli_read_file("block pack", path, &buf, &len);
	if (rc != 0)
		return rc;
	if (len != expect) {
		kvs_cli_error("block pack",
			      "%s %s: %zu bytes, expected %zu "
			      "(%" PRIu32 " heads x %" PRIu32
			      " tokens x %" PRIu32 " channels x %zu-byte %s)",
			      what, path, len, expect, a->kv_heads, a->tokens,
			      a->head_dim, kvs_dtype_size(dtype),
			      kvs_dtype_name(dtype));
		free(buf);
		return -KVS_EPARAM;
	}
	bad = find_nonfinite(dtype, buf, expect / kvs_dtype_size(dtype));
	if (bad >= 0) {
		size_t i = (size_t)bad;

		kvs_cli_error("block pack",
			      "%s %s: non-finite value (%g) at "
			      "head %zu token %zu channel %zu: only finite "
			      "values can be quantized",
			      what, path, (double)kvs_dtype_load(dtype, buf, i),
			      i / (n * d), i / d % n, i % d);
		free(buf);
		return -KVS_ENONFINITE;
	}
	*out = buf;
	return 0;
}

static int read_token_ids(const struct pack_args *a, struct pack_inputs *in)
{
	size_t len, n = a->tokens;
	int rc;

	rc = kvs_cli_read_file("block pack", a->token_ids, &in->ids_raw, &len);
	if (rc != 0)
		return rc;
	if (len != n * 4) {
		kvs_cli_error("block pack",
			      "token ids %s: %zu bytes, expected "
			      "%zu (%zu little-endian uint32)",
			      a->token_ids, len, n * 4, n);
		return -KVS_EPARAM;
	}
	in->ids = malloc(n * sizeof(uint32_t));
	if (in->ids == NULL) {
		kvs_cli_error("block pack", "out of memory");
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		const uint8_t *p = in->ids_raw + 4 * i;

		in->ids[i] = (uint32_t)p[0] | (uint32_t)p[1] << 8 |
			     (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
	}
	return 0;
}

static int pack_ids(const struct pack_args *a, const struct kvs_shape *shape,
		    enum kvs_dtype in_dtype, const uint32_t *token_ids,
		    struct kvs_ident *ident)
{
	struct kvs_model_desc desc = {
		.model_id = a->model,
		.layers = a->layers,
		.kv_dtype = in_dtype,
		.shape = *shape,
		.layout = KVS_LAYOUT_TOKEN_MAJOR,
	};
	const uint8_t *parent = a->parent != NULL ? ident->parent_id : NULL;
	int rc;

	rc = kvs_model_fingerprint(&desc, ident->model_fp);
	if (rc == 0)
		rc = kvs_span_id(a->ns, ident->model_fp, parent, token_ids,
				 a->tokens, ident->block_id);
	if (rc != 0)
		kvs_cli_error("block pack", "cannot compute the block id: %s",
			      kvs_strerror(rc));
	return rc;
}

static int block_pack(int argc, char **argv)
{
	struct pack_inputs in = { 0 };
	struct kvs_layout layout;
	struct kvs_shape shape;
	struct kvs_ident ident;
	struct pack_args a;
	enum kvs_dtype dtype;
	uint8_t *obj = NULL;
	size_t obj_len = 0, kv_bytes, f16_bytes;
	char id_hex[65];
	int rc;

	rc = parse_pack_args(argc, argv, &a);
	if (rc != 0)
		return kvs_cli_usage("block pack", block_usage, rc);
	if (pack_shape(&a, &shape, &dtype, &ident) != 0)
		return kvs_cli_usage("block pack", block_usage, -KVS_EPARAM);
	if (kvs_block_layout(&shape, &layout) != 0)
		return kvs_cli_usage_error("block pack", "invalid shape");
	/* kvs_shape_check bounds H*N*D to 2^30, so sizes cannot overflow. */
	kv_bytes = (size_t)a.kv_heads * a.tokens * a.head_dim *
		   kvs_dtype_size(dtype);
	f16_bytes = kv_bytes / kvs_dtype_size(dtype) * 2 * 2;
	rc = read_kv(&a, "keys", a.keys, dtype, kv_bytes, &in.keys);
	if (rc == 0)
		rc = read_kv(&a, "values", a.values, dtype, kv_bytes,
			     &in.values);
	if (rc == 0)
		rc = read_token_ids(&a, &in);
	if (rc == 0)
		rc = pack_ids(&a, &shape, dtype, in.ids, &ident);
	if (rc != 0)
		goto release_inputs;
	rc = kvs_block_seal(&shape, &ident, dtype, in.keys, in.values,
			    a.lz4 ? KVS_ENCODE_LZ4 : 0, &obj, &obj_len);
	if (rc == -KVS_ERANGE) {
		kvs_cli_error("block pack",
			      "a group's origin or step does not "
			      "fit in %s metadata; try --meta fp32",
			      a.meta);
		goto release_inputs;
	}
	if (rc != 0) {
		kvs_cli_error("block pack", "sealing failed: %s",
			      kvs_strerror(rc));
		goto release_inputs;
	}
	rc = kvs_cli_write_file("block pack", a.out, obj, obj_len);
	if (rc != 0)
		goto free_obj;
	kvs_id_to_hex(ident.block_id, id_hex);
	printf("%s: block %s layer %" PRIu32 ", %zu bytes (fp16 K+V %zu "
	       "bytes, %.2fx smaller)\n",
	       a.out, id_hex, a.layer, obj_len, f16_bytes,
	       (double)f16_bytes / (double)obj_len);
free_obj:
	free(obj);
release_inputs:
	pack_inputs_release(&in);
	return rc == 0 ? KVS_EXIT_OK : KVS_EXIT_FAIL;
}

/* Parses a subcommand that takes exactly one BLOCK word. */
static int parse_block_arg(const char *cmd, int argc, char **argv,
			   struct kvs_cli_opt *opts, size_t n_opts,
			   const char **path)
{
	size_t n_pos;
	int rc;

	rc = kvs_cli_parse(cmd, argc, argv, opts, n_opts, path, 1, &n_pos);
	if (rc == 0 && n_pos != 1) {
		kvs_cli_error(cmd, "which block? (BLOCK missing)");
		rc = -KVS_EPARAM;
	}
	return rc;
}

/* The one line that names the failed check of an invalid object. */
static void report_check(const char *cmd, const char *path, int err)
{
	kvs_cli_error(cmd, "%s: failed check '%s': %s", path,
		      kvs_check_name(err), kvs_strerror(err));
}

/* Reads @path and validates it fully; prints one line naming the failed
 * check.  @view released by the caller on success. */
static int open_block(const char *cmd, const char *path, uint8_t **buf,
		      struct kvs_view *view)
{
	size_t len;
	int rc;

	rc = kvs_cli_read_file(cmd, path, buf, &len);
	if (rc != 0)
		return rc;
	rc = kvs_object_open(*buf, len, 0, view);
	if (rc == 0 && view->hdr.kind != KVS_KIND_BLOCK) {
		kvs_view_release(view);
		rc = -KVS_EKIND;
	}
	if (rc != 0) {
		report_check(cmd, path, rc);
		free(*buf);
		*buf = NULL;
	}
	return rc;
}

/* Outputs that are one file would leave the Keys overwritten by the
 * Values; an output that is the block would destroy it. */
static int check_unpack_paths(const char *block, const char *keys,
			      const char *values)
{
	const char *clash = NULL;

	if (kvs_cli_same_file(keys, values))
		clash = "--keys and --values";
	else if (kvs_cli_same_file(block, keys))
		clash = "--keys and BLOCK";
	else if (kvs_cli_same_file(block, values))
		clash = "--values and BLOCK";
	if (clash == NULL)
		return 0;
	kvs_cli_error("block unpack", "%s name the same file", clash);
	return -KVS_EPARAM;
}

static int block_unpack(int argc, char **argv)
{
	const char *keys_path = NULL, *values_path = NULL, *path;
	struct kvs_cli_opt opts[] = {
		KVS_OPT_STR("keys", &keys_path, true),
		KVS_OPT_STR("values", &values_path, true),
	};
	struct kvs_view view;
	float *keys, *values;
	uint8_t *buf;
	size_t count;
	int rc;

	rc = parse_block_arg("block unpack", argc, argv, opts, 2, &path);
	if (rc == 0)
		rc = check_unpack_paths(path, keys_path, values_path);
	if (rc != 0)
		return kvs_cli_usage("block unpack", block_usage, rc);
	rc = open_block("block unpack", path, &buf, &view);
	if (rc != 0)
		return KVS_EXIT_FAIL;
	count = (size_t)view.hdr.shape.kv_heads * view.hdr.tokens *
		view.hdr.shape.head_dim;
	keys = malloc(count * sizeof(float));
	values = malloc(count * sizeof(float));
	if (keys == NULL || values == NULL) {
		kvs_cli_error("block unpack", "out of memory");
		rc = -ENOMEM;
		goto free_floats;
	}
	rc = kvs_block_dequantize(&view, keys, values);
	if (rc != 0) {
		kvs_cli_error("block unpack", "%s: dequantize failed: %s", path,
			      kvs_strerror(rc));
		goto free_floats;
	}
	rc = kvs_cli_write_file("block unpack", keys_path, keys,
				count * sizeof(float));
	if (rc == 0)
		rc = kvs_cli_write_file("block unpack", values_path, values,
					count * sizeof(float));
free_floats:
	free(keys);
	free(values);
	kvs_view_release(&view);
	free(buf);
	return rc == 0 ? KVS_EXIT_OK : KVS_EXIT_FAIL;
}

static const char *section_name(const struct kvs_header *h, uint32_t i)
{
	if (h->kind == KVS_KIND_BLOCK && i < KVS_BLOCK_SECTIONS)
		return block_section_names[i];
	if (h->kind == KVS_KIND_TAIL && i < KVS_TAIL_SECTIONS)
		return tail_section_names[i];
	return "unknown";
}

static const char *kind_name(uint8_t kind)
{
	return kind == KVS_KIND_BLOCK  ? "block"
	       : kind == KVS_KIND_TAIL ? "tail"
				       : "unknown";
}

/* Bytes the object's K and V would take in fp16. */
static uint64_t fp16_bytes(const struct kvs_header *h)
{
	uint64_t rows = h->kind == KVS_KIND_TAIL ? (uint64_t)h->r_k + h->r_v
						 : 2ull * h->tokens;

	return rows * h->shape.kv_heads * h->shape.head_dim * 2;
}

static void inspect_json(const struct kvs_header *h, int verify_rc)
{
	const char *meta = kvs_dtype_name((enum kvs_dtype)h->shape.meta_type);
	struct kvs_cli_json j;
	char hex[65];

	kvs_cli_json_init(&j, stdout);
	kvs_cli_json_object_begin(&j, NULL);
	kvs_cli_json_str(&j, "kind", kind_name(h->kind));
	kvs_cli_json_u64(&j, "version", h->version);
	kvs_cli_json_u64(&j, "flags", h->flags);
	kvs_cli_json_u64(&j, "layout", h->layout);
	kvs_cli_json_u64(&j, "kv_heads", h->shape.kv_heads);
	kvs_cli_json_u64(&j, "head_dim", h->shape.head_dim);
	kvs_cli_json_u64(&j, "bits", h->shape.bits);
	kvs_cli_json_u64(&j, "group", h->shape.group);
	kvs_cli_json_u64(&j, "span", h->shape.span);
	kvs_cli_json_u64(&j, "residual", h->shape.residual);
	kvs_cli_json_str(&j, "meta", meta);
	kvs_cli_json_u64(&j, "tokens", h->tokens);
	if (h->kind == KVS_KIND_TAIL) {
		kvs_cli_json_str(&j, "tail_dtype",
				 kvs_dtype_name((enum kvs_dtype)h->tail_dtype));
		kvs_cli_json_u64(&j, "r_k", h->r_k);
		kvs_cli_json_u64(&j, "r_v", h->r_v);
	}
	kvs_cli_json_u64(&j, "layer", h->ident.layer);
	kvs_cli_json_u64(&j, "first_pos", h->ident.first_pos);
	kvs_id_to_hex(h->ident.block_id, hex);
	kvs_cli_json_str(&j, "block_id", hex);
	kvs_id_to_hex(h->ident.parent_id, hex);
	kvs_cli_json_str(&j, "parent_id", hex);
	kvs_id_to_hex(h->ident.model_fp, hex);
	kvs_cli_json_str(&j, "model_fp", hex);
	kvs_cli_json_u64(&j, "total_size", h->total_size);
	kvs_cli_json_u64(&j, "fp16_bytes", fp16_bytes(h));
	kvs_cli_json_double(&j, "ratio_vs_fp16",
			    (double)fp16_bytes(h) / (double)h->total_size);
	kvs_cli_json_array_begin(&j, "sections");
	for (uint32_t i = 0; i < h->section_count; i++) {
		const struct kvs_section *s = &h->section[i];

		snprintf(hex, sizeof(hex), "%016" PRIx64, s->checksum);
		kvs_cli_json_object_begin(&j, NULL);
		kvs_cli_json_str(&j, "name", section_name(h, i));
		kvs_cli_json_u64(&j, "offset", s->offset);
		kvs_cli_json_u64(&j, "stored_len", s->stored_len);
		kvs_cli_json_u64(&j, "logical_len", s->logical_len);
		kvs_cli_json_str(&j, "codec",
				 s->codec == KVS_CODEC_LZ4 ? "lz4" : "raw");
		kvs_cli_json_str(&j, "checksum", hex);
		kvs_cli_json_object_end(&j);
	}
	kvs_cli_json_array_end(&j);
	kvs_cli_json_bool(&j, "valid", verify_rc == 0);
	kvs_cli_json_str(&j, "failed_check",
			 verify_rc == 0 ? NULL : kvs_check_name(verify_rc));
	kvs_cli_json_object_end(&j);
	kvs_cli_json_finish(&j);
}

static void inspect_text(const struct kvs_header *h, int verify_rc)
{
	const struct kvs_shape *s = &h->shape;
	char hex[65];

	printf("kind        %s (format version %u, layout %u, flags 0x%02x)\n",
	       kind_name(h->kind), h->version, h->layout, h->flags);
	printf("shape       %u kv heads x %" PRIu32 " tokens x D=%u, %u-bit, "
	       "G=%u, S=%" PRIu32 ", R=%" PRIu32 ", meta %s\n",
	       s->kv_heads, h->tokens, s->head_dim, s->bits, s->group, s->span,
	       s->residual, kvs_dtype_name((enum kvs_dtype)s->meta_type));
	if (h->kind == KVS_KIND_TAIL)
		printf("residual    r_K=%" PRIu32 " r_V=%" PRIu32 " in %s\n",
		       h->r_k, h->r_v,
		       kvs_dtype_name((enum kvs_dtype)h->tail_dtype));
	printf("position    layer %" PRIu32 ", first token %" PRIu64 "\n",
	       h->ident.layer, h->ident.first_pos);
	kvs_id_to_hex(h->ident.block_id, hex);
	printf("block id    %s\n", hex);
	kvs_id_to_hex(h->ident.parent_id, hex);
	printf("parent id   %s\n", hex);
	kvs_id_to_hex(h->ident.model_fp, hex);
	printf("model fp    %s\n", hex);
	printf("size        %" PRIu64 " bytes; fp16 K+V %" PRIu64 " bytes "
	       "(%.2fx smaller)\n",
	       h->total_size, fp16_bytes(h),
	       (double)fp16_bytes(h) / (double)h->total_size);
	printf("sections    %-10s %8s %8s %8s %-5s %s\n", "name", "offset",
	       "stored", "logical", "codec", "xxh3");
	for (uint32_t i = 0; i < h->section_count; i++) {
		const struct kvs_section *sec = &h->section[i];

		printf("            %-10s %8" PRIu32 " %8" PRIu32 " %8" PRIu32
		       " %-5s %016" PRIx64 "\n",
		       section_name(h, i), sec->offset, sec->stored_len,
		       sec->logical_len,
		       sec->codec == KVS_CODEC_LZ4 ? "lz4" : "raw",
		       sec->checksum);
	}
	if (verify_rc == 0)
		printf("verify      ok\n");
	else
		printf("verify      FAILED check '%s': %s\n",
		       kvs_check_name(verify_rc), kvs_strerror(verify_rc));
}

static int block_inspect(int argc, char **argv)
{
	bool json = false;
	struct kvs_cli_opt opts[] = {
		KVS_OPT_FLAG("json", &json),
	};
	struct kvs_header hdr;
	const char *path;
	size_t len;
	uint8_t *buf;
	int rc, verify_rc;

	rc = parse_block_arg("block inspect", argc, argv, opts, 1, &path);
	if (rc != 0)
		return kvs_cli_usage("block inspect", block_usage, rc);
	if (kvs_cli_read_file("block inspect", path, &buf, &len) != 0)
		return KVS_EXIT_FAIL;
	rc = kvs_header_decode(buf, len, 0, &hdr);
	if (rc != 0) {
		report_check("block inspect", path, rc);
		free(buf);
		return KVS_EXIT_FAIL;
	}
	verify_rc = kvs_object_verify(buf, len, 0);
	if (json)
		inspect_json(&hdr, verify_rc);
	else
		inspect_text(&hdr, verify_rc);
	free(buf);
	return verify_rc == 0 ? KVS_EXIT_OK : KVS_EXIT_FAIL;
}

static int block_verify(int argc, char **argv)
{
	const char *path;
	size_t len;
	uint8_t *buf;
	int rc;

	rc = parse_block_arg("block verify", argc, argv, NULL, 0, &path);
	if (rc != 0)
		return kvs_cli_usage("block verify", block_usage, rc);
	if (kvs_cli_read_file("block verify", path, &buf, &len) != 0)
		return KVS_EXIT_FAIL;
	rc = kvs_object_verify(buf, len, 0);
	free(buf);
	if (rc != 0) {
		report_check("block verify", path, rc);
		return KVS_EXIT_FAIL;
	}
	printf("%s: ok\n", path);
	return KVS_EXIT_OK;
}

int kvs_cmd_block(int argc, char **argv)
{
	static const struct {
		const char *name;
		int (*run)(int argc, char **argv);
	} subs[] = {
		{ "pack", block_pack },
		{ "unpack", block_unpack },
		{ "inspect", block_inspect },
		{ "verify", block_verify },
	};

	if (argc >= 2 &&
	    (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0))
		return kvs_cli_usage("block", block_usage, KVS_CLI_HELP);
	for (size_t i = 0; argc >= 2 && i < sizeof(subs) / sizeof(subs[0]); i++)
		if (strcmp(argv[1], subs[i].name) == 0)
			return subs[i].run(argc - 1, argv + 1);
	if (argc >= 2)
		return kvs_cli_usage_error("block", "unknown subcommand '%s'",
					   argv[1]);
	return kvs_cli_usage_error("block", "which subcommand? pack, unpack, "
					    "inspect or verify");
}
