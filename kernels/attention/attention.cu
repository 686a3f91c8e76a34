/*
 * attention.cu - fused decode attention over paged 2-bit history plus
 * full-precision residuals, for a batch of sequences of different lengths
 * (kvs_cuda_attend, include/kvstash/kernels.h): the arguments checked, the
 * plan asked for (attn_plan.cu), the kernels launched.
 *
 * A call computes, per (sequence, query head), one global softmax over
 * all its Key logits, with the probabilities split at the Value boundary:
 * each token takes its Key from the pages below k_quant_len and from the
 * Key residual above it, its Value from the pages below v_quant_len and
 * from the Value FIFO above.  The work is cut into units (sequence, KV
 * head, group of up to 4 query heads) x splits; each split leaves an
 * unnormalised partial (acc[D], reference max m, sum l, log2 domain) and
 * a log-sum-exp folds them: the merge kernel (attn_merge.cu), a unit's
 * only CTA (the pieces plan at large batch), or the cluster's CTAs (the
 * cluster plan, attn_cluster.cu).  Fast CTAs (D = 128, b = 2, G = 32,
 * fp16 metadata) stream whole history tiles through a cp.async ring and
 * compute them on the tensor cores (attn_fast.cuh, attn_tile.cuh), with
 * the residual tail as 8-token pieces where the plan says so
 * (attn_pieces.cuh); generic CTAs take everything else on the CUDA cores
 * (attn_generic.cuh).  attn_common.cuh lists the files and their shared
 * layouts.
 *
 * Invariants: arguments are checked before anything is enqueued, and a
 * rejected call changes nothing; the output is within 1e-3 (relative) of
 * the CPU reference on the same quantized cache, and the same call gives
 * the same bits every time, whatever the workspace held before.
 */
#include "attn_common.cuh"
#include "../kernels_test.h"

/*
 * Whether the tensor cores take fp16 subnormal operands exactly (the SUB
 * code operands, and Key B products under 2^-14): one warp; A = 3 * 2^-24,
 * B = 1; A = 1, B = 2^-24 and 3 * 2^-24; A = B = 2^-24.
 */
static __global__ void subnormal_probe(int *ok)
{
	float c[4] = { 0, 0, 0, 0 }, d[4] = { 0, 0, 0, 0 };
	float e[4] = { 0, 0, 0, 0 };
	const int lane = threadIdx.x;

	mma16816(c, 0x00030003u, 0x00030003u, 0x00030003u, 0x00030003u,
		 0x3C003C00u, 0x3C003C00u);
	mma16816(d, 0x3C003C00u, 0x3C003C00u, 0x3C003C00u, 0x3C003C00u,
		 0x00010001u, 0x00030003u);
	mma16816(e, 0x00010001u, 0x00010001u, 0x00010001u, 0x00010001u,
		 0x00010001u, 0x00010001u);
	bool good = true;

	for (int i = 0; i < 4; i++)
		good = good && c[i] == 48.0f * 0x1p-24f &&
		       d[i] == 32.0f * 0x1p-24f && e[i] == 0x1p-44f;
	if (!__all_sync(0xffffffffu, good) && lane == 0)
		*ok = 0;
}

/*
 * Whether this device's tensor cores take subnormal operands exactly,
 * asked once by subnormal_probe.  Not asked while the stream is being
 * captured into a graph (the probe synchronises): the exact-bias operands
 * are used until it has been asked.
 */
static int subnormal_ok(cudaStream_t stream, uint32_t flags)
{
	static int known = -1;
	cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
	int *d = NULL, h = 0;

	if (flags & KVS_CUDA_ATTN_NO_SUBNORMAL)
		return 0;
	if (known >= 0)
		return known;
	if (cudaStreamIsCapturing(stream, &cs) != cudaSuccess ||
	    cs != cudaStreamCaptureStatusNone)
		return 0;
	known = 0;
	if (KVS_CUDA_CHECK(cudaMalloc((void **)&d, sizeof(int))))
		return 0;
	h = 1;
	if (!KVS_CUDA_CHECK(cudaMemcpy(d, &h, sizeof(int),
				       cudaMemcpyHostToDevice))) {
		subnormal_probe<<<1, 32>>>(d);
		if (!KVS_CUDA_CHECK(cudaMemcpy(&h, d, sizeof(int),
					       cudaMemcpyDeviceToHost)))
			known = h;
	}
	cudaFree(d);
	if (!known)
		kvs_log(KVS_LOG_INFO, "cuda attend: tensor cores flush "
			"subnormal operands; using biased operands");
	return known;
}

static int dtype_ok(int t)
{
	return t == KVS_DTYPE_F32 || t == KVS_DTYPE_F16 || t == KVS_DTYPE_BF16;
}

/* Checks @a and fills @p's shape, types and plan (not its buffers); 0 or
 * -KVS_EPARAM. */
static int attn_setup(const struct kvs_cuda_attn *a, attn_params *p)
{
	const struct kvs_shape *s = &a->shape;
	int rc = kvs_cuda_layout(s, &p->lay, NULL);

	if (rc)
		return rc;
	if (!a->batch || !s->kv_heads || a->q_heads % s->kv_heads ||
	    s->head_dim > 256 || !dtype_ok(a->dtype) ||
	    !dtype_ok(a->out_dtype) || a->page_stride % 16 ||
	    s->head_dim % 8) {
		kvs_log(KVS_LOG_ERR, "cuda attend: unsupported arguments");
		return -KVS_EPARAM;
	}
	p->B = a->batch;
	p->Hq = a->q_heads;
	p->Hkv = s->kv_heads;
	p->D = s->head_dim;
	p->G = s->group;
	p->bits = s->bits;
	p->S = s->span;
	p->meta = s->meta_type;
	p->gq = a->q_heads / s->kv_heads;
	p->nsub = (p->gq + HPC - 1) / HPC;
	p->qdt = a->dtype;
	p->rdt = a->dtype;
	p->odt = a->out_dtype;
	p->scale_log2 = a->scale * 1.4426950408889634f;
	p->fast_ok = s->head_dim == FAST_D && s->bits == 2 &&
		     s->group == TILE && s->meta_type == KVS_DTYPE_F16 &&
		     !(a->flags & KVS_CUDA_ATTN_GENERIC);
	attn_plan(a, p);
	return 0;
}

uint64_t kvs_cuda_attn_workspace(const struct kvs_cuda_attn *a)
{
	attn_params p;

	if (attn_setup(a, &p))
		return 0;
	return (uint64_t)p.B * p.Hq * p.n_slots * ws_pitch(p.D) *
	       sizeof(float);
}

int kvs_cuda_attend(const struct kvs_cuda_attn *a)
{
	cudaStream_t stream = (cudaStream_t)a->stream;
	attn_params p;
	int rc = attn_setup(a, &p);

	if (rc)
		return rc;
	if (!a->q || !a->seqs || !a->out || !a->workspace ||
	    a->workspace_size < kvs_cuda_attn_workspace(a) ||
	    (a->max_tokens && (!a->page_table || !a->pool)) ||
	    ((uintptr_t)a->q | (uintptr_t)a->k_resid | (uintptr_t)a->v_resid |
	     (uintptr_t)a->pool | (uintptr_t)a->workspace) % 16) {
		kvs_log(KVS_LOG_ERR, "cuda attend: missing buffers");
		return -KVS_EPARAM;
	}
	p.q = a->q;
	p.pool = a->pool;
	p.page_stride = a->page_stride;
	p.page_table = a->page_table;
	p.max_pages = a->max_pages;
	p.seqs = a->seqs;
	p.k_resid = a->k_resid;
	p.v_resid = a->v_resid;
	p.k_stride = a->k_resid_stride;
	p.v_stride = a->v_resid_stride;
	p.out = a->out;
	p.ws = (float *)a->workspace;
	ATTN_PROBE_CALL(p);

	const int sub = p.fast_ok ? subnormal_ok(stream, a->flags) : 0;

	if (p.cluster)
		return attn_cluster_launch(p, sub, stream);
	rc = attn_split_launch(p, sub, stream);
	if (rc || unit_writes_out(p))
		return rc;
	return attn_merge_launch(p, stream);
}
