/*
 * cmd_trace.c - `kvstash trace`: the residual state machine on lengths
 * alone (kvs_trace), one row per decode step from an empty cache, as a
 * table or as a JSON array.
 */
#include <inttypes.h>
#include <stdlib.h>

#include "cli_util.h"
#include "cmd.h"
#include "kvstash/stream.h"

/* Rows are held in memory; 16 M steps is 576 MiB of rows. */
#define TRACE_MAX_STEPS (1u << 24)

static const char trace_usage[] =
	"usage: kvstash trace --residual R --group G --steps N\n"
	"                     [--order kivi|paper] [--json]\n"
	"\n"
	"Per decode step from an empty cache: the tokens so far, the Key and\n"
	"Value lengths (quantized history, full-precision residual) used by\n"
	"that step's computation, and those persisted after it.  R must be a\n"
	"multiple of G.  The default order is kivi.\n";

static void trace_json(const struct kvs_trace_row *rows, uint32_t steps)
{
	struct kvs_cli_json j;

	kvs_cli_json_init(&j, stdout);
	kvs_cli_json_array_begin(&j, NULL);
	for (uint32_t i = 0; i < steps; i++) {
		const struct kvs_trace_row *r = &rows[i];

		kvs_cli_json_object_begin(&j, NULL);
		kvs_cli_json_u64(&j, "tokens", r->tokens);
		kvs_cli_json_u64(&j, "k_compute_quant", r->k_compute_quant);
		kvs_cli_json_u64(&j, "k_compute_full", r->k_compute_full);
		kvs_cli_json_u64(&j, "k_persist_quant", r->k_persist_quant);
		kvs_cli_json_u64(&j, "k_persist_full", r->k_persist_full);
		kvs_cli_json_u64(&j, "v_compute_quant", r->v_compute_quant);
		kvs_cli_json_u64(&j, "v_compute_full", r->v_compute_full);
		kvs_cli_json_u64(&j, "v_persist_quant", r->v_persist_quant);
		kvs_cli_json_u64(&j, "v_persist_full", r->v_persist_full);
		kvs_cli_json_object_end(&j);
	}
	kvs_cli_json_array_end(&j);
	kvs_cli_json_finish(&j);
}

static void trace_text(const struct kvs_trace_row *rows, uint32_t steps,
		       uint32_t residual, uint32_t group, enum kvs_order order)
{
	printf("order %s, R=%" PRIu32 ", G=%" PRIu32 "; lengths as "
	       "quantized+full\n",
	       kvs_order_name(order), residual, group);
	printf("%8s  %15s  %15s  %15s  %15s\n", "tokens", "K compute",
	       "K persisted", "V compute", "V persisted");
	for (uint32_t i = 0; i < steps; i++) {
		const struct kvs_trace_row *r = &rows[i];
		char cell[4][24];

		snprintf(cell[0], sizeof(cell[0]), "%" PRIu32 "+%" PRIu32,
			 r->k_compute_quant, r->k_compute_full);
		snprintf(cell[1], sizeof(cell[1]), "%" PRIu32 "+%" PRIu32,
			 r->k_persist_quant, r->k_persist_full);
		snprintf(cell[2], sizeof(cell[2]), "%" PRIu32 "+%" PRIu32,
			 r->v_compute_quant, r->v_compute_full);
		snprintf(cell[3], sizeof(cell[3]), "%" PRIu32 "+%" PRIu32,
			 r->v_persist_quant, r->v_persist_full);
		printf("%8" PRIu32 "  %15s  %15s  %15s  %15s\n", r->tokens,
		       cell[0], cell[1], cell[2], cell[3]);
	}
}

int kvs_cmd_trace(int argc, char **argv)
{
	uint32_t residual = 0, group = 0, steps = 0;
	const char *order_name = "kivi";
	bool json = false;
	struct kvs_cli_opt opts[] = {
		KVS_OPT_U32("residual", &residual, 1, UINT32_MAX, true),
		KVS_OPT_U32("group", &group, 1, UINT32_MAX, true),
		KVS_OPT_U32("steps", &steps, 0, TRACE_MAX_STEPS, true),
		KVS_OPT_STR("order", &order_name, false),
		KVS_OPT_FLAG("json", &json),
	};
	struct kvs_trace_row *rows;
	enum kvs_order order;
	int rc;

	rc = kvs_cli_parse("trace", argc, argv, opts,
			   sizeof(opts) / sizeof(opts[0]), NULL, 0, NULL);
	if (rc == 0 && kvs_order_parse(order_name, &order) != 0) {
		kvs_cli_error("trace",
			      "--order: expected kivi or paper, got "
			      "'%s'",
			      order_name);
		rc = -KVS_EPARAM;
	}
	if (rc == 0 && residual % group != 0) {
		kvs_cli_error("trace",
			      "--residual %" PRIu32 " must be a "
			      "multiple of --group %" PRIu32,
			      residual, group);
		rc = -KVS_EPARAM;
	}
	if (rc != 0)
		return kvs_cli_usage("trace", trace_usage, rc);
	rows = calloc(steps > 0 ? steps : 1, sizeof(*rows));
	if (rows == NULL) {
		kvs_cli_error("trace", "out of memory for %" PRIu32 " rows",
			      steps);
		return KVS_EXIT_FAIL;
	}
	rc = kvs_trace(residual, group, order, steps, rows);
	if (rc != 0) {
		kvs_cli_error("trace", "%s", kvs_strerror(rc));
		free(rows);
		return KVS_EXIT_FAIL;
	}
	if (json)
		trace_json(rows, steps);
	else
		trace_text(rows, steps, residual, group, order);
	free(rows);
	return KVS_EXIT_OK;
}
