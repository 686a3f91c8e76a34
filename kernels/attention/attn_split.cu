/*
 * attn_split.cu - attn_kernel, the kernel of the split-and-merge plans:
 * a 1-D grid over units (sequence, KV head, group of up to 4 query heads)
 * x splits, generic CTAs (attn_generic.cuh) first, then fast CTAs
 * (attn_fast.cuh).  Each CTA leaves one partial a query head in the
 * workspace (a generic CTA that also takes a share of the tiles, two),
 * and attn_merge_kernel, placed as soon as every CTA here has started,
 * folds them; where a unit is one CTA (the pieces plan at large batch)
 * that CTA writes the output and no merge runs.
 *
 * Four builds: generic only (other formats, KVS_CUDA_ATTN_GENERIC), and
 * the fast path capped at 128 registers for 4 CTAs an SM or at 168 for 3,
 * each with subnormal or biased code operands.  Invariant: a build's
 * launch bounds and the plan's occupancy query name the same kernel
 * (attn_split_kernel), so the plan counts the slots the launch gets.
 */
#include "attn_fast.cuh"
#include "attn_generic.cuh"

/*
 * 1-D grid: units (sequence, KV head, query-head group) x splits, the short
 * generic CTAs first so that the long fast ones are not left for the tail.
 */
template <bool FAST, int MIN_CTAS, bool SUB>
__global__ void __launch_bounds__(WARPS * 32, MIN_CTAS)
attn_kernel(const attn_params p)
{
	extern __shared__ __align__(16) uint8_t smem[];
	const int gen = p.n_gen * p.B * p.Hkv * p.nsub;
	int idx = blockIdx.x, n = idx < gen ? p.n_gen : p.n_fast;

	if (idx >= gen)
		idx -= gen;
	const int split = idx % n;
	int b, h, sub;

	unit_at(p, idx / n, b, h, sub);

	/* the merge may be placed now; it waits for this grid's results */
	asm volatile("griddepcontrol.launch_dependents;\n");
	ATTN_PROBE_EVENT(p, 0);
	int tb = split * p.fast_tps, tps = p.fast_tps, slot = split;

	if (!FAST || (int)blockIdx.x < gen) {
		/* the 4-CTA build keeps two raw items in flight, not four,
		 * to stay within 128 registers; in the fast build the format
		 * is the fast path's, and its constants make the generic
		 * code for it smaller (shifts for divisions, no selects on
		 * the metadata type) */
		attn_params g = p;

		if (FAST) {
			g.D = FAST_D;
			g.G = TILE;
			g.bits = 2;
			g.meta = KVS_DTYPE_F16;
		}
		generic_cta<MIN_CTAS >= 4 ? 2 : 4, FAST>(g, split, h, sub, b,
			    reinterpret_cast<float *>(smem));
		ATTN_PROBE_EVENT(p, 1);
		if (!FAST || !p.hyb_tps)
			return;
		/* then its share of the tiles, so that its slot does not
		 * idle while the fast CTAs finish */
		__syncthreads();
		tb = p.n_fast * p.fast_tps + split * p.hyb_tps;
		tps = p.hyb_tps;
		slot = p.n_fast + p.n_gen + split;
	}
	fast_cta<SUB, (MIN_CTAS >= 4), false>(p, tb, tps, slot, h, sub, b,
					       smem, 0, nullptr);
}

typedef void (*attn_fn)(const attn_params);

/* The build for (@fast_ok, @occ3, @sub): attn_split_kernel()'s answer. */
static attn_fn pick_kernel(int fast_ok, int occ3, int sub)
{
	static const attn_fn fast[2][2] = {
		{ attn_kernel<true, 4, false>, attn_kernel<true, 4, true> },
		{ attn_kernel<true, 3, false>, attn_kernel<true, 3, true> },
	};

	return !fast_ok ? attn_kernel<false, 3, false>
			: fast[occ3 != 0][sub != 0];
}

const void *attn_split_kernel(int fast_ok, int occ3, int sub)
{
	return (const void *)pick_kernel(fast_ok, occ3, sub);
}

int attn_split_launch(const attn_params &p, int sub, cudaStream_t stream)
{
	const attn_fn fn = pick_kernel(p.fast_ok, p.occ3, sub);
	const size_t fast = fast_smem(max(p.fast_tps, p.hyb_tps), p.S);
	size_t smem = generic_smem(p.D, p.fast_ok);
	const dim3 grid((p.n_fast + p.n_gen) * p.B * p.Hkv * p.nsub);
	int rc;

	if (p.fast_ok && fast > smem)
		smem = fast;
	kvs_log(KVS_LOG_DEBUG, "cuda attend: units %d, fast %d x %d tiles, "
		"generic %d x (%d tokens + %d tiles), grid %u, %d-CTA build, "
		"subnormal operands %d", p.B * p.Hkv * p.nsub, p.n_fast,
		p.fast_tps, p.n_gen, p.gen_tps, p.hyb_tps, grid.x,
		p.occ3 ? 3 : 4, sub);
	rc = kvs_cuda_grant_smem((const void *)fn, smem);
	if (rc)
		return rc;
	fn<<<grid, WARPS * 32, smem, stream>>>(p);
	return KVS_CUDA_CHECK(cudaGetLastError());
}
