/*
 * test_eviction.c - the DRAM tier's eviction policies on a real store:
 * the prefix policy's chain rule (no block outlives its evicted parent
 * while a leaf could go instead), scan resistance, pinned blocks (held
 * by a get's reference) kept, the policy after a restart, the CLOCK
 * counter of T2 and the set dueling between ARC's and LRU's orders,
 * and the option's names.  Chains are sealed blocks whose headers carry their
 * parent's span id, as the runtime's do.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "store_internal.h"
#include "store_test.h"

#define CHAIN_MAX 64

struct chain {
	size_t n;
	uint8_t ids[CHAIN_MAX][KVS_ID_SIZE];
	uint8_t *obj[CHAIN_MAX];
	size_t len[CHAIN_MAX];
	struct kvs_store_key key[CHAIN_MAX];
};

/* Chain @seed of @n blocks, layer 0: block k's parent is block k-1. */
static void chain_make(struct chain *c, uint64_t seed, size_t n)
{
	struct kvs_ident ident;

	assert_true(n <= CHAIN_MAX);
	c->n = n;
	for (size_t k = 0; k < n; k++) {
		test_ident(seed * 1000 + k, 3, &ident);
		ident.layer = 0;
		ident.first_pos = k * 32;
		if (k > 0)
			memcpy(ident.parent_id, c->ids[k - 1], KVS_ID_SIZE);
		memcpy(c->ids[k], ident.block_id, KVS_ID_SIZE);
		c->obj[k] = test_block_keyed(&ident, seed + k, 1, &c->len[k],
					     &c->key[k]);
		assert_non_null(c->obj[k]);
	}
}

static void chain_free(struct chain *c)
{
	for (size_t k = 0; k < c->n; k++)
		free(c->obj[k]);
}

static int put1(struct kvs_store *s, const struct chain *c, size_t k)
{
	return kvs_store_put(s, c->obj[k], c->len[k], KVS_DURABILITY_MEMORY,
			     NULL);
}

static bool present(struct kvs_store *s, const struct chain *c, size_t k)
{
	static const uint32_t layer0;

	return kvs_store_lookup_prefix(s, &c->ids[k], 1, &layer0, 1) == 1;
}

/* Blocks of @c cached after one that is not: 0 when the cached ones are
 * a prefix of the chain. */
static size_t broken_links(struct kvs_store *s, const struct chain *c)
{
	size_t broken = 0;
	bool gap = false;

	for (size_t k = 0; k < c->n; k++) {
		bool in = present(s, c, k);

		if (!in)
			gap = true;
		else if (gap)
			broken++;
	}
	return broken;
}

/* Reads block @k of @c (the policy sees a hit); 0 or the miss. */
static int read1(struct kvs_store *s, const struct chain *c, size_t k)
{
	return test_get_cmp(s, &c->key[k], c->obj[k], c->len[k]);
}

static struct kvs_store *open_with(char *dir, enum kvs_store_eviction ev,
				   uint64_t dram, uint64_t nvme)
{
	struct kvs_store_opts o;
	struct kvs_store *s;

	test_opts(&o, dram, nvme, nvme ? KVS_STORE_SEGMENT_MIN : 0);
	o.write_through = false;
	o.eviction = ev;
	assert_int_equal(kvs_store_open(dir, &o, &s), 0);
	return s;
}

/* DRAM for 16 records of the test blocks (one 4 KiB page each). */
#define DRAM_16 (16u * 4096u)

/*
 * Four conversations of 12 blocks, their turns interleaved: each turn
 * reads the conversation's cached prefix and puts the rest of its next
 * 3 blocks, in 16 slots.  Under the prefix policy no conversation ever
 * keeps a block whose parent is gone; S3-FIFO, which evicts objects
 * regardless of their chain, does (the check can fail).
 */
static size_t run_conversations(enum kvs_store_eviction ev)
{
	struct chain c[4];
	char *dir = test_mkdir();
	struct kvs_store *s = open_with(dir, ev, DRAM_16, 0);
	size_t broken = 0;

	for (int i = 0; i < 4; i++)
		chain_make(&c[i], 10 + i, 12);
	for (size_t turn = 1; turn <= 4; turn++)
		for (int i = 0; i < 4; i++) {
			size_t end = 3 * turn, hit = 0;
			static const uint32_t layer0;

			hit = kvs_store_lookup_prefix(s, c[i].ids, end, &layer0,
						      1);
			for (size_t k = 0; k < hit; k++)
				assert_int_equal(read1(s, &c[i], k), 0);
			for (size_t k = hit; k < end; k++) {
				int err = put1(s, &c[i], k);

				assert_true(err == 0 || err == -ENOSPC);
			}
			for (int j = 0; j < 4; j++)
				broken += broken_links(s, &c[j]);
		}
	kvs_store_close(s);
	test_rmdir(dir);
	for (int i = 0; i < 4; i++)
		chain_free(&c[i]);
	return broken;
}

static void test_chain_rule(void **state)
{
	assert_int_equal(run_conversations(KVS_STORE_EVICT_PREFIX), 0);
	assert_true(run_conversations(KVS_STORE_EVICT_S3FIFO) > 0);
}

/* A parent is not evicted for its own child: with one slot left for a
 * chain of 17 blocks, the 17th put is refused rather than evict the
 * 16 before it (a leaf could not go instead, none is left but the
 * parent of the block being put). */
static void test_parent_kept_for_child(void **state)
{
	struct chain c;
	char *dir = test_mkdir();
	struct kvs_store *s =
		open_with(dir, KVS_STORE_EVICT_PREFIX, DRAM_16, 0);

	chain_make(&c, 40, 17);
	for (size_t k = 0; k < 16; k++)
		assert_int_equal(put1(s, &c, k), 0);
	assert_int_equal(put1(s, &c, 16), -ENOSPC);
	for (size_t k = 0; k < 16; k++)
		assert_true(present(s, &c, k));
	assert_false(present(s, &c, 16));
	kvs_store_close(s);
	test_rmdir(dir);
	chain_free(&c);
}

/*
 * A hot prefix of 4 blocks, read a few times, then a one-time context of
 * 40 blocks put once (a scan), after @base blocks of its chain put and
 * read (a prefix it hangs off): the hot prefix stays whole under the
 * prefix policy, in either order of its set dueling (@psel, for the
 * prefix policy).  Plain LRU flushes it (the check can fail).
 */
static bool hot_survives_scan(enum kvs_store_eviction ev, size_t base, int psel)
{
	struct chain hot, scan;
	char *dir = test_mkdir();
	struct kvs_store *s = open_with(dir, ev, DRAM_16, 0);
	bool whole = true;

	if (ev == KVS_STORE_EVICT_PREFIX)
		s->pol.psel = psel;
	chain_make(&hot, 50, 4);
	chain_make(&scan, 51, base + 40);
	for (size_t k = 0; k < 4; k++)
		assert_int_equal(put1(s, &hot, k), 0);
	for (int round = 0; round < 3; round++)
		for (size_t k = 0; k < 4; k++)
			assert_int_equal(read1(s, &hot, k), 0);
	for (size_t k = 0; k < base; k++) {
		assert_int_equal(put1(s, &scan, k), 0);
		assert_int_equal(read1(s, &scan, k), 0);
	}
	for (size_t k = base; k < base + 40; k++) {
		int err = put1(s, &scan, k);

		assert_true(err == 0 || err == -ENOSPC);
	}
	for (size_t k = 0; k < 4; k++)
		whole = whole && present(s, &hot, k) && read1(s, &hot, k) == 0;
	kvs_store_close(s);
	test_rmdir(dir);
	chain_free(&hot);
	chain_free(&scan);
	return whole;
}

static void test_scan_resistance(void **state)
{
	for (size_t base = 0; base <= 2; base += 2) {
		assert_true(
			hot_survives_scan(KVS_STORE_EVICT_PREFIX, base, 256));
		assert_true(
			hot_survives_scan(KVS_STORE_EVICT_PREFIX, base, -256));
	}
	assert_true(hot_survives_scan(KVS_STORE_EVICT_S3FIFO, 0, 0));
	assert_false(hot_survives_scan(KVS_STORE_EVICT_LRU, 0, 0));
}

/* Blocks held by a get's reference (pinned, or leased to a client) are
 * never evicted, whatever the policy, even when they are the oldest
 * leaves; a flood of new blocks is then placed around them. */
static void test_pinned_kept(void **state)
{
	const enum kvs_store_eviction evs[] = {
		KVS_STORE_EVICT_PREFIX,
		KVS_STORE_EVICT_S3FIFO,
		KVS_STORE_EVICT_LRU,
	};

	for (size_t e = 0; e < 3; e++) {
		struct chain held, flood;
		struct kvs_store_ref *refs[3];
		char *dir = test_mkdir();
		struct kvs_store *s = open_with(dir, evs[e], DRAM_16, 0);

		chain_make(&held, 60, 3);
		chain_make(&flood, 61, 60);
		for (size_t k = 0; k < 3; k++) {
			assert_int_equal(put1(s, &held, k), 0);
			assert_int_equal(
				kvs_store_get(s, &held.key[k], &refs[k]), 0);
		}
		for (size_t k = 0; k < 60; k++) {
			int err = put1(s, &flood, k);

			assert_true(err == 0 || err == -ENOSPC);
		}
		for (size_t k = 0; k < 3; k++) {
			assert_true(present(s, &held, k));
			assert_memory_equal(kvs_store_ref_data(refs[k]),
					    held.obj[k], held.len[k]);
			kvs_store_ref_release(refs[k]);
		}
		/* the flood's newest blocks took the other slots */
		assert_true(present(s, &flood, 0) || present(s, &flood, 59));
		kvs_store_close(s);
		test_rmdir(dir);
		chain_free(&held);
		chain_free(&flood);
	}
}

/*
 * Restart: the DRAM tier starts empty (store/README.md, "Eviction"), the
 * chains are on NVMe; reading a chain promotes it with its parent links,
 * so a flood afterwards still evicts it leaves first: reading it again in
 * order, the blocks found in DRAM are a prefix of it.
 */
static void test_restart(void **state)
{
	struct chain a, flood;
	struct kvs_store_stats st0, st1;
	char *dir = test_mkdir();
	struct kvs_store *s = open_with(dir, KVS_STORE_EVICT_PREFIX, DRAM_16,
					4 * KVS_STORE_SEGMENT_MIN);
	bool gap = false;

	chain_make(&a, 70, 12);
	chain_make(&flood, 71, 30);
	for (size_t k = 0; k < 12; k++)
		assert_int_equal(put1(s, &a, k), 0);
	kvs_store_close(s);
	s = open_with(dir, KVS_STORE_EVICT_PREFIX, DRAM_16,
		      4 * KVS_STORE_SEGMENT_MIN);
	kvs_store_stats_get(s, &st0);
	assert_int_equal(st0.dram.blocks, 0);
	for (size_t k = 0; k < 12; k++)
		assert_int_equal(read1(s, &a, k), 0);
	kvs_store_stats_get(s, &st1);
	assert_int_equal(st1.nvme_hits - st0.nvme_hits, 12);
	assert_int_equal(st1.promotions - st0.promotions, 12);
	for (size_t k = 0; k < 10; k++)
		assert_int_equal(put1(s, &flood, k), 0);
	for (size_t k = 0; k < 12; k++) {
		kvs_store_stats_get(s, &st0);
		assert_int_equal(read1(s, &a, k), 0);
		kvs_store_stats_get(s, &st1);
		if (st1.dram_hits == st0.dram_hits)
			gap = true;
		else
			assert_false(gap); /* a DRAM copy past a gap */
	}
	assert_true(gap); /* the flood did evict some of it */
	kvs_store_close(s);
	test_rmdir(dir);
	chain_free(&a);
	chain_free(&flood);
}

/* The entry of block @k of @c (it must be indexed). */
static struct entry *entry_of(struct kvs_store *s, const struct chain *c,
			      size_t k)
{
	struct entry *e = index_find(&s->index, &c->key[k]);

	assert_non_null(e);
	return e;
}

/* The set-dueling group of a key (policy.c: the index hash's bits 40..),
 * 0 ARC's leaders, 1 LRU's, the rest followers. */
static unsigned group_of(const struct entry *e)
{
	return (unsigned)(e->hash >> 40) % 32;
}

/*
 * T2 is frequency-aware: 16 one-block chains fill the tier and are read
 * (T2); the first, read three times more before the others, is T2's
 * oldest leaf.  New blocks, each put and read, then evict the oldest
 * leaves of T2: the block read most is passed over (its counter spent
 * one read at a time) while the next oldest, read once, goes.  Under
 * LRU's order (all keys followers, psel > 0) it goes first.
 */
static bool frequent_survives(bool lru)
{
	struct chain c[24];
	char *dir = test_mkdir();
	struct kvs_store *s =
		open_with(dir, KVS_STORE_EVICT_PREFIX, DRAM_16, 0);
	size_t first = 0, n = 0;
	bool kept;

	/* followers only: the leaders' orders are fixed */
	for (uint64_t seed = 100; n < 24; seed++) {
		chain_make(&c[n], seed, 1);
		assert_int_equal(put1(s, &c[n], 0), 0);
		if (group_of(entry_of(s, &c[n], 0)) < 2) {
			assert_int_equal(kvs_store_delete(s, &c[n].key[0]), 0);
			chain_free(&c[n]);
			continue;
		}
		n++;
		if (n == 16)
			break;
	}
	s->pol.psel = lru ? 256 : -256;
	for (int r = 0; r < 4; r++)
		assert_int_equal(read1(s, &c[first], 0), 0);
	for (size_t i = 1; i < 16; i++)
		assert_int_equal(read1(s, &c[i], 0), 0);
	for (uint64_t seed = 200; n < 24; seed++) {
		chain_make(&c[n], seed, 1);
		assert_int_equal(put1(s, &c[n], 0), 0);
		assert_int_equal(read1(s, &c[n], 0), 0);
		n++;
	}
	kept = present(s, &c[first], 0);
	/* the oldest of those read once went either way */
	assert_false(present(s, &c[1], 0));
	kvs_store_close(s);
	test_rmdir(dir);
	for (size_t i = 0; i < n; i++)
		chain_free(&c[i]);
	return kept;
}

static void test_clock(void **state)
{
	assert_true(frequent_survives(false));
	assert_false(frequent_survives(true));
}

/*
 * Set dueling: a ghost hit of one of ARC's leaders counts for LRU's
 * order (psel up), one of LRU's leaders for ARC's (down), a follower's
 * for neither; and the followers' extended blocks go where psel says
 * (T2 in LRU's order, T1 in ARC's).  One-block chains put and read
 * (T2), evicted by as many more (B2 ghosts), then put again.
 */
static void test_duel(void **state)
{
	struct chain c[32], pair;
	char *dir = test_mkdir();
	struct kvs_store *s =
		open_with(dir, KVS_STORE_EVICT_PREFIX, DRAM_16, 0);
	int arc = 0, lru = 0, psel0;
	size_t n = 0;
	struct entry *e;

	assert_int_equal(s->pol.psel, 64);
	for (uint64_t seed = 300; n < 32; seed++, n++) {
		chain_make(&c[n], seed, 1);
		assert_int_equal(put1(s, &c[n], 0), 0);
		assert_int_equal(read1(s, &c[n], 0), 0);
	}
	psel0 = s->pol.psel;
	for (size_t i = 0; i < 16; i++) {
		e = entry_of(s, &c[i], 0);
		assert_int_equal(e->dq, DQ_B2);
		arc += group_of(e) == 0;
		lru += group_of(e) == 1;
		assert_int_equal(put1(s, &c[i], 0), 0);
	}
	assert_int_equal(s->pol.psel, psel0 + arc - lru);
	/* a follower's parent, once extended, goes by psel */
	for (int side = 0; side < 2; side++) {
		s->pol.psel = side ? -256 : 256;
		for (uint64_t seed = 400 + 10 * side;; seed++) {
			chain_make(&pair, seed, 2);
			assert_int_equal(put1(s, &pair, 0), 0);
			if (group_of(entry_of(s, &pair, 0)) >= 2)
				break;
			chain_free(&pair);
		}
		assert_int_equal(entry_of(s, &pair, 0)->dq, DQ_U);
		assert_int_equal(put1(s, &pair, 1), 0);
		assert_int_equal(entry_of(s, &pair, 0)->dq,
				 side ? DQ_T1 : DQ_T2);
		chain_free(&pair);
	}
	kvs_store_close(s);
	test_rmdir(dir);
	for (size_t i = 0; i < 32; i++)
		chain_free(&c[i]);
}

static void test_names(void **state)
{
	enum kvs_store_eviction ev;
	struct kvs_store_opts o;
	struct kvs_store *s;
	char *dir = test_mkdir();

	kvs_store_opts_default(&o);
	assert_int_equal(o.eviction, KVS_STORE_EVICT_PREFIX);
	assert_int_equal(kvs_store_eviction_parse("prefix", &ev), 0);
	assert_int_equal(ev, KVS_STORE_EVICT_PREFIX);
	assert_int_equal(kvs_store_eviction_parse("s3fifo", &ev), 0);
	assert_int_equal(ev, KVS_STORE_EVICT_S3FIFO);
	assert_int_equal(kvs_store_eviction_parse("lru", &ev), 0);
	assert_int_equal(ev, KVS_STORE_EVICT_LRU);
	assert_int_equal(kvs_store_eviction_parse("arc", &ev), -KVS_EPARAM);
	assert_string_equal(kvs_store_eviction_name(KVS_STORE_EVICT_LRU),
			    "lru");
	assert_string_equal(kvs_store_eviction_name((enum kvs_store_eviction)9),
			    "?");
	test_opts(&o, DRAM_16, 0, 0);
	o.eviction = (enum kvs_store_eviction)9;
	assert_int_equal(kvs_store_open(dir, &o, &s), -KVS_EPARAM);
	test_rmdir(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_chain_rule),
		cmocka_unit_test(test_parent_kept_for_child),
		cmocka_unit_test(test_scan_resistance),
		cmocka_unit_test(test_pinned_kept),
		cmocka_unit_test(test_restart),
		cmocka_unit_test(test_clock),
		cmocka_unit_test(test_duel),
		cmocka_unit_test(test_names),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
