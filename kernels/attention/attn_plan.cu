/*
 * attn_plan.cu - how a call of the fused decode attention is cut into
 * CTAs.  Every plan covers each unit (sequence, KV head, group of up to 4
 * query heads) exactly once, token by token:
 *   - split and merge: fast CTAs over whole history tiles and generic CTAs
 *     over the rest (the residual tail, or everything for other formats),
 *     side by side in one grid, then the merge kernel;
 *   - pieces: with 16-bit residual rows, fast CTAs only, the tail as
 *     8-token pieces on their warps (where generic CTAs would leave the
 *     SMs' work uneven: large batch);
 *   - cluster: one thread-block cluster a unit where the units fill the
 *     device at one CTA an SM (attn_cluster.cu), no merge kernel.
 * and picks the fast path's build (4 or 3 CTAs an SM).  The flags of
 * kernels/kernels_test.h force a plan or a build, for tests and for the
 * benchmark's comparisons.
 *
 * Invariants: the plan depends only on the call's shape, the flags and the
 * device (so a decode step's plan, and with it the bits of its result,
 * repeat); a unit's last generic split takes every token left; the
 * workspace holds n_slots partials a (sequence, query head) and nothing
 * else is read from it.  The cost model counts in fast tiles of one warp
 * (measured on an H200); the device's own numbers (SMs, resident CTAs,
 * shared memory) come from the driver, asked once per thread.
 */
#include "attn_common.cuh"
#include "../kernels_test.h"

/* Fast CTAs that fit on the device at once; where the occupancy query
 * fails, two an SM. */
static int resident_slots(int fast_ok, int occ3)
{
	const void *fn = attn_split_kernel(fast_ok, occ3, 1);
	const size_t smem = fast_smem(64, 32), gen = generic_smem(FAST_D,
								  fast_ok);
	int slots = kvs_cuda_resident_ctas(fn, WARPS * 32,
					   smem > gen ? smem : gen), sms;

	if (slots > 0)
		return slots;
	sms = kvs_cuda_sm_count();
	sms = sms > 0 ? sms : 1;
	kvs_log(KVS_LOG_WARN, "cuda attend: occupancy query failed, "
		"planning for 2 CTAs on each of %d SMs", sms);
	return 2 * sms;
}

/* A generic CTA's 32-token chunk costs about this many fast tiles of one
 * warp (~8 us against ~2 us on an H200), its first chunk at least: the
 * chunks after it are copied while the one before is computed (raw_copy,
 * the fast build with 16-bit rows) and cost GEN_NEXT_COST (4 rather than
 * 3 since the 3-CTA build, whose fast warps are faster, runs the small
 * batches: (1, 32K) 16.4 -> 15.5 us, one chunk a generic CTA instead of
 * two). */
#define GEN_CHUNK_COST 4
#define GEN_NEXT_COST 4

static double gen_chunk_cost(int next)
{
	return next ? GEN_NEXT_COST : GEN_CHUNK_COST;
}

/* a generic CTA's share of the tiles costs its tiles per warp + this
 * (the fast CTA's prologue and epilogue a second time, after its chunks;
 * 2 measured slower at (1, 32K) in the 3-CTA build) */
#define HYB_COST 4

struct split_plan {
	int n_fast, n_gen;      /* CTAs per unit */
	int fast_tps;           /* tiles per fast CTA */
	int hyb_tps;            /* tiles per generic CTA after its tokens */
};

/*
 * Fast and generic splits per unit: both kinds run side by side, so the
 * plan minimises waves x the longest CTA (in fast-tile units: a fast CTA's
 * tiles per warp + a fixed cost, a generic CTA's chunks) over all the
 * splits that fit.  In a single wave a generic CTA's slot would idle once
 * its chunks are done, so it also takes a share of the tiles, sized to end
 * with the fast CTAs (its second prologue counted as HYB_COST tiles); with
 * more waves the block scheduler fills a freed slot anyway, and holding it
 * measured slower.  @force: a share of at least one tile per warp in any
 * case, for tests.  @ahead: a generic CTA copies each chunk after its first
 * while it computes the one before (GEN_NEXT_COST).  The last answer is
 * kept per thread: decode steps
 * repeat shapes.
 */
static void plan_split(int units, int slots, int tiles, int chunks,
		       int force, int ahead, struct split_plan *out)
{
	static thread_local int key[6];
	static thread_local struct split_plan ans;
	const int cap = (tiles + WARPS - 1) / WARPS;
	double best = 1e30;

	if (key[0] == units && key[1] == slots && key[2] == tiles &&
	    key[3] == chunks && key[4] == force + 1 && key[5] == ahead) {
		*out = ans;
		return;
	}
	*out = (struct split_plan){ 1, 1, tiles, 0 };
	for (int g = 1; g <= chunks; g++) {
		const double t_g = gen_chunk_cost(0) + gen_chunk_cost(ahead) *
				   ((chunks + g - 1) / g - 1) + 1;

		for (int f = 1; f <= cap && f <= 4 * slots; f++) {
			const double waves = (units * (f + g) + slots - 1) /
					     slots;
			/* t_f = F / W + 2 = t_g + H / W + HYB_COST where
			 * f F + g H covers the tiles */
			int h0 = (int)((tiles - WARPS * f *
					(t_g + HYB_COST - 2)) / (f + g));

			h0 = h0 > 0 && waves < 2 ? h0 / WARPS * WARPS : 0;
			if (force && h0 < WARPS)
				h0 = WARPS;
			for (int hy = h0; hy <= h0 + (h0 ? WARPS : 0);
			     hy += WARPS) {
				const int rest = tiles - g * hy;

				if (rest < f)
					continue;
				const int F = (rest + f - 1) / f;
				const double t_f = (F + WARPS - 1) / WARPS + 2;
				const double t_h = t_g + (hy ? (hy + WARPS - 1) /
							  WARPS + HYB_COST : 0);
				const double cost = waves *
						    (t_f > t_h ? t_f : t_h);

				if (cost < best - 1e-9) {
					best = cost;
					*out = (struct split_plan){ f, g, F,
								    hy };
				}
			}
		}
	}
	key[0] = units;
	key[1] = slots;
	key[2] = tiles;
	key[3] = chunks;
	key[4] = force + 1;
	key[5] = ahead;
	ans = *out;
}

/*
 * The plan with the tail as pieces: every CTA a fast one with an equal
 * share of the @tiles, one wave where the units fit (at most a tile or a
 * piece a warp, @np pieces a unit).
 */
static void piece_plan(int units, int slots, int tiles, int np,
		       attn_params *p)
{
	const int most = (tiles + np + WARPS - 1) / WARPS;
	int n = units >= slots ? 1 : slots / units;

	n = n > most ? most : n;
	n = n < 1 ? 1 : n;
	p->fast_tps = (tiles + n - 1) / n;
	p->n_fast = tiles > 0 ? (tiles + p->fast_tps - 1) / p->fast_tps : n;
	p->n_gen = 0;
	p->hyb_tps = 0;
	p->gen_chunk = TILE;
	p->gen_tps = TILE;
	p->n_slots = p->n_fast;
}

/* History tiles per 4-CTA slot up to which the 3-CTA build is taken */
#define OCC3_TILES_PER_SLOT 64

/*
 * The fast path's build where the flags leave it open.  The 3-CTA/SM one
 * (168 registers) where the calls' history is short beside the device: a
 * tile or more a slot, at most OCC3_TILES_PER_SLOT (16 a warp).  Each warp
 * then has few tiles, and the faster warps of that build finish first:
 * in one process against the 4-CTA build on an H200, (1, 8K) and
 * (2, 32K) 5-6% faster, (1, 32K), (4, 32K) and (1, 128K) 2-4%.  The
 * 4-CTA one (16 warps an SM) where the warps' streams are long ((2, 128K)
 * 1% faster, (8, 32K) and (8, 128K) even) or the call is a few tiles
 * ((1, 512) 1%).  (16, 8K), at the bound, is even either way.
 */
static int want_occ3(uint32_t flags, int fast_ok, int units, int max_tiles)
{
	if (!fast_ok || (flags & KVS_CUDA_ATTN_OCC4))
		return 0;
	if (flags & KVS_CUDA_ATTN_OCC3)
		return 1;
	const int64_t tiles = (int64_t)units * max_tiles;
	const int64_t slots = resident_slots(fast_ok, 0);

	return tiles >= slots && tiles <= OCC3_TILES_PER_SLOT * slots;
}

/* Flags that force another plan than the cluster one. */
#define NOT_CLUSTER (KVS_CUDA_ATTN_OCC3 | KVS_CUDA_ATTN_OCC4 |		\
		     KVS_CUDA_ATTN_HYBRID | KVS_CUDA_ATTN_PIECES |	\
		     KVS_CUDA_ATTN_NO_PIECES | KVS_CUDA_ATTN_NO_CLUSTER)

void attn_plan(const struct kvs_cuda_attn *a, attn_params *p)
{
	const int units = p->B * p->Hkv * p->nsub;
	const int max_tiles = p->fast_ok ? (int)(a->max_tokens / TILE) : 0;

	p->occ3 = want_occ3(a->flags, p->fast_ok, units, max_tiles);
	const int slots = resident_slots(p->fast_ok, p->occ3);
	uint32_t rows = a->k_resid_stride > a->v_resid_stride ?
			a->k_resid_stride : a->v_resid_stride;
	/* the tail past the last whole history tile is at most the longer
	 * residual + 31 tokens */
	if (a->max_resid_rows && a->max_resid_rows < rows)
		rows = a->max_resid_rows;
	uint32_t gen_total = p->fast_ok ? rows + TILE - 1 : a->max_tokens;
	if (gen_total > a->max_tokens)
		gen_total = a->max_tokens;
	int chunks = (int)((gen_total + TILE - 1) / TILE), n_gen;

	if (chunks < 1)
		chunks = 1;
	/* the cluster plan: 16-bit residuals (the tail as pieces), and where
	 * no flag forces another, a grid that leaves at most a 32nd of the
	 * SMs idle (it has no second wave and one CTA an SM) */
	p->cluster = 0;
	if (p->fast_ok && a->dtype != KVS_DTYPE_F32 && max_tiles > 0 &&
	    !(a->flags & KVS_CUDA_ATTN_NO_CLUSTER) &&
	    ((a->flags & KVS_CUDA_ATTN_CLUSTER) || !(a->flags & NOT_CLUSTER))) {
		const int sms = kvs_cuda_sm_count();
		const int least = (a->flags & KVS_CUDA_ATTN_CLUSTER) ? 0 :
				  sms - sms / 32;

		if (sms > 0 && attn_cluster_plan(units, max_tiles,
				(int)((gen_total + PIECE - 1) / PIECE),
				p->S, least, p))
			return;
	}
	struct split_plan sp = { 0, 0, 1, 0 };

	if (max_tiles > 0)
		plan_split(units, slots, max_tiles, chunks,
			   (a->flags & KVS_CUDA_ATTN_HYBRID) != 0,
			   a->dtype != KVS_DTYPE_F32 && p->S % TILE == 0,
			   &sp);
	/* with 16-bit residuals the tail goes to the fast warps as pieces
	 * where the generic CTAs would share the tiles in one wave and be a
	 * tenth of the grid or more, or would need a second wave: there the
	 * SMs that hold no generic CTA end the call.  Where
	 * generic CTAs run beside the fast ones in a wave with room (small
	 * batch), or are few ((2, 128K): 16 of 528), they stay: measured
	 * faster there. */
	p->pieces = p->fast_ok && a->dtype != KVS_DTYPE_F32 &&
		    !(a->flags & KVS_CUDA_ATTN_NO_PIECES) &&
		    max_tiles > 0 && !(a->flags & KVS_CUDA_ATTN_HYBRID) &&
		    ((a->flags & KVS_CUDA_ATTN_PIECES) ||
		     (sp.hyb_tps > 0 &&
		      10 * sp.n_gen >= sp.n_fast + sp.n_gen) ||
		     (int64_t)units * (sp.n_fast + sp.n_gen) > slots);
	if (p->pieces) {
		piece_plan(units, slots, max_tiles,
			   (int)((gen_total + PIECE - 1) / PIECE), p);
		return;
	}
	n_gen = max_tiles > 0 ? sp.n_gen : (2 * slots + units - 1) / units;
	n_gen = n_gen < 1 ? 1 : (n_gen > chunks ? chunks : n_gen);
	p->gen_chunk = TILE;
	p->gen_tps = TILE * ((chunks + n_gen - 1) / n_gen);
	p->n_gen = (int)((chunks * TILE + p->gen_tps - 1) / p->gen_tps);
	/* the generic CTAs' share first (their count may have shrunk), the
	 * fast CTAs cover the rest */
	p->hyb_tps = sp.hyb_tps;
	p->fast_tps = sp.fast_tps;
	p->n_fast = 0;
	if (max_tiles > 0) {
		const int rest = max_tiles - p->n_gen * p->hyb_tps;

		p->n_fast = rest > 0 ? (rest + p->fast_tps - 1) / p->fast_tps
				     : 0;
	}
	/* where every generic split is one chunk, and twice the generic CTAs
	 * fit in the same wave, half chunks: such a CTA's time is its memory
	 * round trips and one chunk's staging and compute, and at small batch
	 * the call waits for it ((1, 512): 7.2 us, the fast warps done at
	 * 4.2) */
	if (p->gen_tps == TILE && !p->hyb_tps &&
	    units * (p->n_fast + 2 * p->n_gen) <= slots) {
		p->gen_chunk = TILE / 2;
		p->gen_tps = TILE / 2;
		p->n_gen *= 2;
	}
	p->n_slots = p->n_fast + p->n_gen * (p->hyb_tps ? 2 : 1);
}
