/*
 * cmd_memory.c - `kvstash memory`: the seed's memory formula
 * (kvs_memory_account) beside the format's actual bytes and the fp16
 * baseline, as text or as a JSON object.
 */
#include <inttypes.h>

#include "cli_util.h"
#include "cmd.h"
#include "kvstash/kvformat.h"

static const char memory_usage[] =
	"usage: kvstash memory --tokens T --head-dim D --group G --residual R\n"
	"                      --bits B --meta-bytes E --float-bytes F\n"
	"                      [--layers L] [--kv-heads H] [--batch N]\n"
	"                      [--json]\n"
	"\n"
	"M = D[(2T - r_K - r_V)(b/8 + 2e/G) + (r_K + r_V)f] per layer,\n"
	"KV head and request, with r_K = T mod R and r_V = min(T, R), times\n"
	"L*H*N (each 1 by default).  Beside it: the format's actual bytes\n"
	"(sealed blocks of S = R tokens plus one residual tail per layer and\n"
	"request, headers and padding included) and the fp16 baseline\n"
	"2*L*N*H*T*D*2.\n";

struct memory_args {
	uint64_t tokens;
	uint32_t head_dim, group, residual, bits, meta_bytes, float_bytes;
	uint32_t layers, kv_heads, batch;
	bool json;
};

static void memory_text(const struct memory_args *a, const struct kvs_memory *m,
			double fp16)
{
	uint64_t r_k = a->tokens % a->residual;
	uint64_t r_v = a->tokens < a->residual ? a->tokens : a->residual;
	char h[4][32];

	printf("T=%" PRIu64 " D=%" PRIu32 " G=%" PRIu32 " R=%" PRIu32
	       " b=%" PRIu32 " e=%" PRIu32 " f=%" PRIu32 "; %" PRIu32
	       " layer(s) x %" PRIu32 " KV head(s) x %" PRIu32
	       " request(s); r_K=%" PRIu64 " r_V=%" PRIu64 "\n",
	       a->tokens, a->head_dim, a->group, a->residual, a->bits,
	       a->meta_bytes, a->float_bytes, a->layers, a->kv_heads, a->batch,
	       r_k, r_v);
	printf("  quantized  %14.0f B  %12s\n", m->quantized_bytes,
	       kvs_cli_human_bytes(m->quantized_bytes, h[0], sizeof(h[0])));
	printf("  residual   %14.0f B  %12s\n", m->residual_bytes,
	       kvs_cli_human_bytes(m->residual_bytes, h[1], sizeof(h[1])));
	printf("  total      %14.0f B  %12s  (formula; %.2fx smaller than "
	       "fp16)\n",
	       m->total_bytes,
	       kvs_cli_human_bytes(m->total_bytes, h[2], sizeof(h[2])),
	       m->total_bytes > 0 ? fp16 / m->total_bytes : 0.0);
	printf("  format     %14" PRIu64 " B  %12s  (actual encoded bytes; "
	       "%.2fx smaller than fp16)\n",
	       m->format_bytes,
	       kvs_cli_human_bytes((double)m->format_bytes, h[3], sizeof(h[3])),
	       m->format_bytes > 0 ? fp16 / (double)m->format_bytes : 0.0);
	printf("  fp16       %14.0f B  %12s  (unquantized baseline)\n", fp16,
	       kvs_cli_human_bytes(fp16, h[0], sizeof(h[0])));
}

static void memory_json(const struct kvs_memory *m, double fp16)
{
	struct kvs_cli_json j;

	kvs_cli_json_init(&j, stdout);
	kvs_cli_json_object_begin(&j, NULL);
	kvs_cli_json_double(&j, "quantized_bytes", m->quantized_bytes);
	kvs_cli_json_double(&j, "residual_bytes", m->residual_bytes);
	kvs_cli_json_double(&j, "total_bytes", m->total_bytes);
	kvs_cli_json_u64(&j, "format_bytes", m->format_bytes);
	kvs_cli_json_double(&j, "fp16_bytes", fp16);
	kvs_cli_json_object_end(&j);
	kvs_cli_json_finish(&j);
}

int kvs_cmd_memory(int argc, char **argv)
{
	struct memory_args a = { .layers = 1, .kv_heads = 1, .batch = 1 };
	struct kvs_cli_opt opts[] = {
		KVS_OPT_U64("tokens", &a.tokens, 0, UINT32_MAX, true),
		KVS_OPT_U32("head-dim", &a.head_dim, 1, UINT16_MAX, true),
		KVS_OPT_U32("group", &a.group, 1, UINT16_MAX, true),
		KVS_OPT_U32("residual", &a.residual, 1, UINT32_MAX, true),
		KVS_OPT_U32("bits", &a.bits, 1, 8, true),
		KVS_OPT_U32("meta-bytes", &a.meta_bytes, 1, 8, true),
		KVS_OPT_U32("float-bytes", &a.float_bytes, 1, 8, true),
		KVS_OPT_U32("layers", &a.layers, 1, UINT32_MAX, false),
		KVS_OPT_U32("kv-heads", &a.kv_heads, 1, UINT16_MAX, false),
		KVS_OPT_U32("batch", &a.batch, 1, UINT32_MAX, false),
		KVS_OPT_FLAG("json", &a.json),
	};
	struct kvs_memory m;
	double fp16;
	int rc;

	rc = kvs_cli_parse("memory", argc, argv, opts,
			   sizeof(opts) / sizeof(opts[0]), NULL, 0, NULL);
	if (rc != 0)
		return kvs_cli_usage("memory", memory_usage, rc);
	rc = kvs_memory_account(a.tokens, a.head_dim, a.group, a.residual,
				a.bits, a.meta_bytes, a.float_bytes, a.layers,
				a.kv_heads, a.batch, &m);
	if (rc != 0) {
		kvs_cli_error("memory",
			      "%s: R a multiple of G, G dividing D, "
			      "bits 2 or 4",
			      kvs_strerror(rc));
		return kvs_cli_usage("memory", memory_usage, rc);
	}
	fp16 = 2.0 * a.layers * a.kv_heads * a.batch * (double)a.tokens *
	       a.head_dim * 2.0;
	if (a.json)
		memory_json(&m, fp16);
	else
		memory_text(&a, &m, fp16);
	return KVS_EXIT_OK;
}
