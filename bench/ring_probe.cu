/*
 * ring_probe.cu - the fast tile fed by two copy rings, without the rest of
 * a call (a diagnostic; not a comparison with a baseline).  Every CTA has
 * the 4-CTA build's shape (128 threads, four an SM) and streams its own
 * pages of a pool larger than the L2, each page 128 tokens of one KV head
 * in the fast format (12 KB: four tiles), computing every tile with
 * attn_tile.cuh's fast_tile():
 *
 *   ring:  the kernel's own loop (kernels/attn_fast.cuh): each warp its
 *          tiles, every fourth, through its two-stage cp.async ring
 *          (issue_tile: six 16-byte copies a lane a tile), each tile
 *          waited for and computed;
 *   comp:  the compute alone: each warp's first two tiles copied, then
 *          computed over and over (what the ring's copies add is ring -
 *          comp);
 *   bulk:  the compute as comp, beside a ring of the CTA's four tiles an
 *          iteration as six bulk copies (cp.async.bulk, Key and Value
 *          codes 4 KB each, four 1 KB metadata rows) issued by one thread
 *          into two 12 KB slots over the warps' stage areas, behind full
 *          and empty mbarriers: the copies' issue taken off the warps
 *          (what the bulk ring adds is bulk - comp).
 *
 * The bulk copies land in the stage areas the compute reads, so comp's and
 * bulk's results are wrong on purpose; their times are real.  Prints, per
 * variant, the median time of RUNS launches and the tiles an SM computes
 * a microsecond.
 *
 * Built by bench/meson.build (build-dir/bench/ring_probe), or by hand from
 * the project root:
 *
 *     nvcc -O2 -std=c++17 -gencode arch=compute_90a,code=sm_90a \
 *          --expt-relaxed-constexpr -Ikernels -Iinclude -I. \
 *          -o /tmp/ring_probe bench/ring_probe.cu
 *     /tmp/ring_probe [tiles a CTA, a multiple of 4]
 */
#include "tile_probe.cuh"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "cuda_check.h"

#define SPAN 128                /* tokens a page: four tiles */
#define PAGE_BYTES 12288        /* a page's six sections */
#define RUNS 20
#define QROW_BYTES (WARPS * 32 * 64)    /* the warps' Key B query pairs */

enum variant { RING, COMP, BULK };

/* The sections of a page of one KV head, as a block image places them
 * (kvformat's order, KV heads = 1, S = SPAN) */
static void page_layout(struct dev_layout *lay)
{
	lay->off[KVS_SEC_KEY_CODES] = 0;
	lay->off[KVS_SEC_KEY_ORIGIN] = 4096;
	lay->off[KVS_SEC_KEY_STEP] = 5120;
	lay->off[KVS_SEC_VAL_CODES] = 6144;
	lay->off[KVS_SEC_VAL_ORIGIN] = 10240;
	lay->off[KVS_SEC_VAL_STEP] = 11264;
}

static __device__ __forceinline__ void mbar_init(uint64_t *b, int count)
{
	asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n"
		     :: "r"(smem_u32(b)), "r"(count));
}

static __device__ __forceinline__ void mbar_arrive(uint64_t *b)
{
	asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n"
		     :: "r"(smem_u32(b)) : "memory");
}

static __device__ __forceinline__ void mbar_expect(uint64_t *b, uint32_t tx)
{
	asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n"
		     :: "r"(smem_u32(b)), "r"(tx) : "memory");
}

static __device__ __forceinline__ void mbar_wait(uint64_t *b, uint32_t par)
{
	asm volatile("{\n"
		     ".reg .pred P;\n"
		     "WAIT_%=:\n"
		     "mbarrier.try_wait.parity.shared::cta.b64 P, [%0], %1;\n"
		     "@!P bra WAIT_%=;\n"
		     "}\n" :: "r"(smem_u32(b)), "r"(par) : "memory");
}

static __device__ __forceinline__ void bulk_copy(void *dst, const void *src,
						 uint32_t n, uint64_t *b)
{
	asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::"
		     "complete_tx::bytes [%0], [%1], %2, [%3];\n"
		     :: "r"(smem_u32(dst)), "l"(src), "r"(n), "r"(smem_u32(b))
		     : "memory");
}

/* Page @pg's four tiles into bulk slot @sl: the Key codes and metadata
 * over warps 2 sl's stages, the Value's over warp 2 sl + 1's. */
static __device__ void bulk_issue(const attn_params &p, uint8_t *smem,
				  const uint8_t *pg, int sl, uint64_t *full)
{
	uint8_t *da = smem + 2 * sl * WARP_SMEM, *db = da + WARP_SMEM;

	mbar_expect(full, PAGE_BYTES);
	bulk_copy(da, pg + p.lay.off[KVS_SEC_KEY_CODES], 4096, full);
	bulk_copy(db, pg + p.lay.off[KVS_SEC_VAL_CODES], 4096, full);
	bulk_copy(da + 4096, pg + p.lay.off[KVS_SEC_KEY_ORIGIN], 1024, full);
	bulk_copy(da + 5120, pg + p.lay.off[KVS_SEC_KEY_STEP], 1024, full);
	bulk_copy(db + 4096, pg + p.lay.off[KVS_SEC_VAL_ORIGIN], 1024, full);
	bulk_copy(db + 5120, pg + p.lay.off[KVS_SEC_VAL_STEP], 1024, full);
}

/* CTA c streams pages c * tiles / 4 ..; the query @q (fp32, 4 heads) */
template <int V>
__global__ void __launch_bounds__(WARPS * 32, 4)
k_ring(const attn_params p, int tiles, const float *q, float *sink)
{
	extern __shared__ __align__(128) uint8_t smem[];
	__shared__ uint64_t bars[4];    /* full[2], empty[2] (bulk) */
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	const int tid = threadIdx.x;
	const int npages = tiles / WARPS, mine = npages;
	uint8_t *wsm = smem + warp * WARP_SMEM;
	uint8_t *scratch = wsm + STAGES * TILE_BYTES;
	float *p_s = reinterpret_cast<float *>(scratch + SCRATCH_BYTES);
	uint4 *qrow = reinterpret_cast<uint4 *>(smem + WARPS * WARP_SMEM) +
		      (warp * 32 + lane) * 4;
	int32_t *pages = reinterpret_cast<int32_t *>(smem + WARPS * WARP_SMEM +
						     QROW_BYTES);
	const int page0 = blockIdx.x * npages;

	for (int i = tid; i < npages; i += WARPS * 32)
		pages[i] = page0 + i;
	if (V == BULK && tid == 0) {
		mbar_init(&bars[0], 1);
		mbar_init(&bars[1], 1);
		mbar_init(&bars[2], WARPS);
		mbar_init(&bars[3], WARPS);
		asm volatile("fence.mbarrier_init.release.cluster;\n" :::
			     "memory");
	}
	key_query kq;
	fast_state st;

	probe_start(q, qrow, lane, kq, st);
	__syncthreads();
	const uint8_t *pool = p.pool;
	if (V == BULK && tid == 0)
		bulk_issue(p, smem, pool + (size_t)page0 * p.page_stride, 0,
			   &bars[0]);
	/* the kernel's ring: warp w's tiles w, w + 4, ... */
	tile_cursor cur;
	uint8_t *stage[STAGES];

	for (int s = 0; s < STAGES; s++)
		stage[s] = wsm + s * TILE_BYTES;
	cursor_init(cur, p, 0, warp, 0, lane);
	for (int s = 0; s < STAGES - 1; s++) {
		if (s < mine) {
			issue_tile(p, cur, pages, stage[s]);
			cursor_next(cur, p);
		}
		cp_commit();
	}
	for (int k = 0; k < mine; k++) {
		if (k + STAGES - 1 < mine && (V == RING || k == 0)) {
			issue_tile(p, cur, pages, stage[STAGES - 1]);
			cursor_next(cur, p);
		}
		cp_commit();
		if (V == RING || k < STAGES)
			cp_wait<STAGES - 1>();
		if (V == BULK) {
			/* the next page into the other slot once its last
			 * tiles are computed; then this one's wait */
			if (tid == 0 && k + 1 < npages) {
				if (k > 0)
					mbar_wait(&bars[2 + ((k - 1) & 1)],
						  ((k - 1) >> 1) & 1);
				bulk_issue(p, smem, pool + (size_t)(page0 + k +
					   1) * p.page_stride, (k + 1) & 1,
					   &bars[(k + 1) & 1]);
			}
			mbar_wait(&bars[k & 1], (k >> 1) & 1);
		}
		__syncwarp();
		fast_tile<true, true>(stage[0], kq, scratch, p_s, st, lane);
		if (V == BULK) {
			__syncwarp();
			if (lane == 0)
				mbar_arrive(&bars[2 + (k & 1)]);
		}
		uint8_t *done = stage[0];

		for (int s = 0; s < STAGES - 1; s++)
			stage[s] = stage[s + 1];
		stage[STAGES - 1] = done;
	}
	cp_wait<0>();
	sink[blockIdx.x * blockDim.x + threadIdx.x] = probe_sum(st);
}

/* An fp16 value's bits. */
static uint16_t h16(float x)
{
	const __half h = __float2half_rn(x);

	return *reinterpret_cast<const uint16_t *>(&h);
}

int main(int argc, char **argv)
{
	const int tiles = argc > 1 ? atoi(argv[1]) : 256;
	int dev = 0, sms = 0;

	if (tiles < WARPS || tiles % WARPS) {
		fprintf(stderr, "usage: ring_probe [tiles a CTA, a multiple "
			"of 4]\n");
		return 2;
	}
	CK(cudaGetDevice(&dev));
	CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
	const int ctas = 4 * sms, npages = ctas * tiles / WARPS;
	const size_t pool_bytes = (size_t)npages * PAGE_BYTES;
	std::vector<uint8_t> page(PAGE_BYTES);
	std::vector<float> q(HPC * FAST_D);
	uint32_t r = 12345;
	auto next = [&]() {
		r = r * 1664525u + 1013904223u;
		return r >> 8;
	};

	/* random codes, origins near 0 and steps in (0.05, 0.3): finite
	 * values of the fast format's ranges */
	for (int i = 0; i < 4096; i++) {
		page[i] = (uint8_t)next();
		page[6144 + i] = (uint8_t)next();
	}
	for (int i = 0; i < 512; i++) {
		const uint16_t ko = h16((next() % 2000) / 1000.0f - 1.0f);
		const uint16_t ks = h16(0.05f + (next() % 250) / 1000.0f);
		const uint16_t vo = h16((next() % 2000) / 1000.0f - 1.0f);
		const uint16_t vs = h16(0.05f + (next() % 250) / 1000.0f);

		memcpy(&page[4096 + 2 * i], &ko, 2);
		memcpy(&page[5120 + 2 * i], &ks, 2);
		memcpy(&page[10240 + 2 * i], &vo, 2);
		memcpy(&page[11264 + 2 * i], &vs, 2);
	}
	for (auto &x : q)
		x = ((next() % 2000) / 1000.0f - 1.0f) * 0.125f;
	uint8_t *d_pool;
	float *d_q, *d_sink;

	CK(cudaMalloc(&d_pool, pool_bytes));
	for (int i = 0; i < npages; i++)
		CK(cudaMemcpy(d_pool + (size_t)i * PAGE_BYTES, page.data(),
			      PAGE_BYTES, cudaMemcpyHostToDevice));
	CK(cudaMalloc(&d_q, q.size() * 4));
	CK(cudaMalloc(&d_sink, (size_t)ctas * 128 * 4));
	CK(cudaMemcpy(d_q, q.data(), q.size() * 4, cudaMemcpyHostToDevice));

	attn_params p = {};

	page_layout(&p.lay);
	p.S = SPAN;
	p.pool = d_pool;
	p.page_stride = PAGE_BYTES;
	const size_t smem = WARPS * WARP_SMEM + QROW_BYTES +
			    sizeof(int32_t) * tiles / WARPS;
	void (*kern[3])(const attn_params, int, const float *, float *) = {
		k_ring<RING>, k_ring<COMP>, k_ring<BULK>
	};
	const char *name[3] = { "ring", "comp", "bulk" };
	float ms[3];

	for (int v = 0; v < 3; v++) {
		int occ = 0;

		CK(cudaFuncSetAttribute(kern[v],
			cudaFuncAttributeMaxDynamicSharedMemorySize,
			(int)smem));
		CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, kern[v],
			WARPS * 32, smem));
		printf("%s: %d CTAs an SM\n", name[v], occ);
	}
	cudaEvent_t e0, e1;

	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	printf("SMs %d, CTAs %d, %d tiles a CTA, pool %.0f MB\n", sms, ctas,
	       tiles, pool_bytes / 1e6);
	for (int pass = 0; pass < 2; pass++) {
		for (int v = 0; v < 3; v++) {
			std::vector<float> t;

			kern[v]<<<ctas, WARPS * 32, smem>>>(p, tiles, d_q,
							    d_sink);
			CK(cudaGetLastError());
			CK(cudaDeviceSynchronize());
			for (int i = 0; i < RUNS; i++) {
				float x = 0.0f;

				CK(cudaEventRecord(e0));
				kern[v]<<<ctas, WARPS * 32, smem>>>(p, tiles,
								    d_q,
								    d_sink);
				CK(cudaEventRecord(e1));
				CK(cudaEventSynchronize(e1));
				CK(cudaEventElapsedTime(&x, e0, e1));
				t.push_back(x);
			}
			std::sort(t.begin(), t.end());
			ms[v] = t[RUNS / 2];
		}
		for (int v = 0; v < 3; v++)
			printf("pass %d: %s %8.1f us, %.2f tiles/us an SM, "
			       "%+.1f%% against comp\n", pass, name[v],
			       ms[v] * 1e3, (double)ctas * tiles /
			       (ms[v] * 1e3) / sms,
			       100.0 * (ms[v] / ms[COMP] - 1.0));
	}
	return 0;
}
