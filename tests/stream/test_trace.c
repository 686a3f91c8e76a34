/*
 * test_trace - the residual state machine on lengths (seed §5): the R=4,
 * G=2 table of the fixed Flash decode order row by row, the seed's
 * persisted lengths, Algorithm 1's order, and the seed's invariants for
 * random R and G.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "kvstash/stream.h"
#include "test_stream_util.h"

static void test_seed_table_kivi(void **state)
{
	/* tokens, k compute full, k persist full, v compute full,
	 * v persist full: the seed's table. */
	static const uint32_t table[][5] = {
		{ 3, 3, 3, 3, 3 }, { 4, 4, 0, 4, 4 }, { 5, 1, 1, 5, 4 },
		{ 8, 4, 0, 5, 4 }, { 9, 1, 1, 5, 4 },
	};
	static const uint32_t k_persist[9] = { 1, 2, 3, 0, 1, 2, 3, 0, 1 };
	static const uint32_t v_persist[9] = { 1, 2, 3, 4, 4, 4, 4, 4, 4 };
	struct kvs_trace_row rows[9];
	size_t i;

	(void)state;
	assert_int_equal(kvs_trace(4, 2, KVS_ORDER_KIVI, 9, rows), 0);
	for (i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
		const struct kvs_trace_row *r = &rows[table[i][0] - 1];

		assert_int_equal(r->tokens, table[i][0]);
		assert_int_equal(r->k_compute_full, table[i][1]);
		assert_int_equal(r->k_persist_full, table[i][2]);
		assert_int_equal(r->v_compute_full, table[i][3]);
		assert_int_equal(r->v_persist_full, table[i][4]);
	}
	for (i = 0; i < 9; i++) {
		assert_int_equal(rows[i].k_persist_full, k_persist[i]);
		assert_int_equal(rows[i].v_persist_full, v_persist[i]);
	}
	/* Step 9: Keys 8 quantized + 1 full, Values 4 + 5. */
	assert_int_equal(rows[8].k_compute_quant, 8);
	assert_int_equal(rows[8].k_compute_full, 1);
	assert_int_equal(rows[8].v_compute_quant, 4);
	assert_int_equal(rows[8].v_compute_full, 5);
}

/* Invariants of the seed's trace() for both orders, any R and G. */
static void check_invariants(uint32_t R, uint32_t G, enum kvs_order order,
			     const struct kvs_trace_row *rows, uint32_t steps)
{
	uint32_t i;

	for (i = 0; i < steps; i++) {
		const struct kvs_trace_row *r = &rows[i];
		uint32_t T = i + 1;

		assert_int_equal(r->tokens, T);
		assert_int_equal(r->k_compute_quant + r->k_compute_full, T);
		assert_int_equal(r->v_compute_quant + r->v_compute_full, T);
		assert_int_equal(r->k_persist_quant + r->k_persist_full, T);
		assert_int_equal(r->v_persist_quant + r->v_persist_full, T);
		assert_int_equal(r->k_persist_quant % R, 0);
		assert_int_equal(r->k_compute_quant % G, 0);
		assert_true(r->k_persist_full < R);
		assert_int_equal(r->v_persist_full, T < R ? T : R);
		assert_true(r->v_compute_full <= R + 1);
		assert_true(r->k_compute_full <= R);
		if (order == KVS_ORDER_PAPER) {
			assert_int_equal(r->k_compute_quant,
					 r->k_persist_quant);
			assert_int_equal(r->v_compute_quant,
					 r->v_persist_quant);
		} else {
			/* kivi computes before the seal and the pop: with
			 * the state persisted by the previous step. */
			uint32_t kq = i ? rows[i - 1].k_persist_quant : 0;
			uint32_t vq = i ? rows[i - 1].v_persist_quant : 0;

			assert_int_equal(r->k_compute_quant, kq);
			assert_int_equal(r->v_compute_quant, vq);
			assert_true(r->k_compute_full >= 1);
		}
		/* Values are never quantized before their Keys. */
		assert_true(r->v_persist_quant <= r->k_persist_quant);
	}
}

static void test_paper_order(void **state)
{
	struct kvs_trace_row paper[9], kivi[9];
	uint32_t i;

	(void)state;
	assert_int_equal(kvs_trace(4, 2, KVS_ORDER_PAPER, 9, paper), 0);
	assert_int_equal(kvs_trace(4, 2, KVS_ORDER_KIVI, 9, kivi), 0);
	check_invariants(4, 2, KVS_ORDER_PAPER, paper, 9);
	for (i = 0; i < 9; i++) {
		/* Same persisted state; computing after the update. */
		assert_int_equal(paper[i].k_persist_full,
				 kivi[i].k_persist_full);
		assert_int_equal(paper[i].v_persist_full,
				 kivi[i].v_persist_full);
	}
	/* Token 4 seals the Keys before the logits: none in full precision. */
	assert_int_equal(paper[3].k_compute_full, 0);
	assert_int_equal(paper[3].k_compute_quant, 4);
	assert_int_equal(paper[4].v_compute_full, 4);
}

static void test_random_invariants(void **state)
{
	static const uint32_t groups[] = { 1, 2, 4, 8, 32 };
	struct kvs_trace_row *rows;
	struct kvs_rng seed = { 0x7ace5eedull };
	int iter, o;

	(void)state;
	rows = malloc(sizeof(*rows) * 2000);
	assert_non_null(rows);
	for (iter = 0; iter < 40; iter++) {
		uint32_t G = groups[kvs_rng_below(&seed, 5)];
		uint32_t R = G * (1 + kvs_rng_below(&seed, 8));
		uint32_t steps =
			1 + kvs_rng_below(&seed, 5 * R < 2000 ? 5 * R : 2000);

		for (o = 0; o < 2; o++) {
			enum kvs_order order =
				o ? KVS_ORDER_PAPER : KVS_ORDER_KIVI;

			assert_int_equal(kvs_trace(R, G, order, steps, rows),
					 0);
			check_invariants(R, G, order, rows, steps);
		}
	}
	free(rows);
}

/* The closed form of kvs_lengths_after is the residual rule applied token
 * by token, for residuals that divide spans and those that do not. */
static void test_lengths_after_is_the_steps(void **state)
{
	static const uint32_t residuals[] = { 1, 3, 32, 128 };

	(void)state;
	for (size_t r = 0; r < sizeof(residuals) / sizeof(residuals[0]); r++) {
		struct kvs_lengths step = { 0, 0, 0 }, closed;
		struct kvs_trace_row row;

		for (uint32_t t = 0; t <= 700; t++) {
			kvs_lengths_after(t, residuals[r], &closed);
			assert_int_equal(closed.tokens, step.tokens);
			assert_int_equal(closed.k_quant, step.k_quant);
			assert_int_equal(closed.v_quant, step.v_quant);
			kvs_lengths_advance(&step, residuals[r], KVS_ORDER_KIVI,
					    &row);
		}
	}
}

static void test_bad_arguments(void **state)
{
	struct kvs_trace_row row;
	enum kvs_order order = KVS_ORDER_PAPER;

	(void)state;
	assert_int_equal(kvs_trace(0, 2, KVS_ORDER_KIVI, 1, &row), -KVS_EPARAM);
	assert_int_equal(kvs_trace(4, 0, KVS_ORDER_KIVI, 1, &row), -KVS_EPARAM);
	assert_int_equal(kvs_trace(6, 4, KVS_ORDER_KIVI, 1, &row), -KVS_EPARAM);
	assert_int_equal(kvs_trace(4, 2, (enum kvs_order)7, 1, &row),
			 -KVS_EPARAM);
	assert_int_equal(kvs_trace(4, 2, KVS_ORDER_KIVI, 1, NULL), -KVS_EPARAM);
	assert_int_equal(kvs_trace(4, 2, KVS_ORDER_KIVI, 0, NULL), 0);

	assert_int_equal(kvs_order_parse("kivi", &order), 0);
	assert_int_equal(order, KVS_ORDER_KIVI);
	assert_int_equal(kvs_order_parse("paper", &order), 0);
	assert_int_equal(order, KVS_ORDER_PAPER);
	assert_int_equal(kvs_order_parse("flash", &order), -KVS_EPARAM);
	assert_int_equal(order, KVS_ORDER_PAPER);
	assert_string_equal(kvs_order_name(KVS_ORDER_KIVI), "kivi");
	assert_string_equal(kvs_order_name(KVS_ORDER_PAPER), "paper");
	assert_null(kvs_order_name((enum kvs_order)7));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_seed_table_kivi),
		cmocka_unit_test(test_paper_order),
		cmocka_unit_test(test_random_invariants),
		cmocka_unit_test(test_bad_arguments),
		cmocka_unit_test(test_lengths_after_is_the_steps),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
