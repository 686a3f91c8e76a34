/*
 * residual.cu - the residual operations of a decode step, on the device
 * (DESIGN.md §2), so that a step never leaves the GPU:
 *   append  one token's K and V to every sequence of the batch;
 *   seal    the full Key residual of listed sequences into pool pages
 *           (the seal kernel, reading the residual rows in place), record
 *           the pages in the page table and empty the Key residual;
 *   pop     the oldest Value once the FIFO holds more than R.
 * Each operation is one or two small kernels; lengths live in the device
 * array of struct kvs_cuda_seq and are updated by a separate kernel after
 * the data kernels so that no CTA reads a length another has changed.
 */
#include "common.cuh"

struct resid_params {
	int B, H, D, R, dt;
	size_t esz;
	uint8_t *k, *v;
	uint32_t k_stride, v_stride;
	struct kvs_cuda_seq *seqs;
};

static int resid_check(const struct kvs_cuda_resid *st, resid_params *p)
{
	const struct kvs_shape *s = &st->shape;

	if (kvs_shape_check(s) || s->span != s->residual || !st->batch ||
	    (st->dtype != KVS_DTYPE_F16 && st->dtype != KVS_DTYPE_BF16) ||
	    !st->k_resid || !st->v_resid || !st->seqs ||
	    st->k_resid_stride < s->residual ||
	    st->v_resid_stride < 2 * s->residual + 2) {
		kvs_log(KVS_LOG_ERR, "cuda residual: bad state description");
		return -KVS_EPARAM;
	}
	p->B = st->batch;
	p->H = s->kv_heads;
	p->D = s->head_dim;
	p->R = s->residual;
	p->dt = st->dtype;
	p->esz = 2;
	p->k = (uint8_t *)st->k_resid;
	p->v = (uint8_t *)st->v_resid;
	p->k_stride = st->k_resid_stride;
	p->v_stride = st->v_resid_stride;
	p->seqs = st->seqs;
	return 0;
}

/* One CTA per (sequence, head): compact a full FIFO, write the new rows. */
static __global__ void resid_append_kernel(const resid_params p,
					   const uint16_t *kn,
					   const uint16_t *vn)
{
	const int b = blockIdx.x, h = blockIdx.y, D = p.D;
	const kvs_cuda_seq sq = p.seqs[b];
	uint16_t *kr = (uint16_t *)p.k + ((size_t)b * p.H + h) * p.k_stride * D;
	uint16_t *vr = (uint16_t *)p.v + ((size_t)b * p.H + h) * p.v_stride * D;
	uint32_t start = sq.v_resid_start;

	if (start + sq.v_resid_len >= p.v_stride) {
		/* start >= stride - len > len: source and target are apart */
		for (uint32_t i = threadIdx.x; i < sq.v_resid_len * D;
		     i += blockDim.x)
			vr[i] = vr[(size_t)start * D + i];
		start = 0;
		__syncthreads();
	}
	for (int d = threadIdx.x; d < D; d += blockDim.x) {
		kr[(size_t)sq.k_resid_len * D + d] = kn[((size_t)b * p.H + h) *
							D + d];
		vr[(size_t)(start + sq.v_resid_len) * D + d] =
			vn[((size_t)b * p.H + h) * D + d];
	}
}

static __global__ void resid_append_commit(const resid_params p)
{
	int b = blockIdx.x * blockDim.x + threadIdx.x;

	if (b >= p.B)
		return;
	kvs_cuda_seq sq = p.seqs[b];
	if (sq.v_resid_start + sq.v_resid_len >= p.v_stride)
		sq.v_resid_start = 0;
	sq.k_resid_len++;
	sq.v_resid_len++;
	p.seqs[b] = sq;
}

int kvs_cuda_resid_append(const struct kvs_cuda_resid *st, const void *k,
			  const void *v)
{
	cudaStream_t stream = (cudaStream_t)st->stream;
	resid_params p;
	int rc = resid_check(st, &p);

	if (rc)
		return rc;
	if (!k || !v) {
		kvs_log(KVS_LOG_ERR, "cuda residual append: no input");
		return -KVS_EPARAM;
	}
	resid_append_kernel<<<dim3(p.B, p.H), 128, 0, stream>>>(
		p, (const uint16_t *)k, (const uint16_t *)v);
	rc = KVS_CUDA_CHECK(cudaGetLastError());
	if (rc)
		return rc;
	resid_append_commit<<<(p.B + 127) / 128, 128, 0, stream>>>(p);
	return KVS_CUDA_CHECK(cudaGetLastError());
}

/* Seal sources: K rows 0..R-1, V rows (start + len - R).. of each listed
 * sequence. */
static __global__ void resid_seal_sources(const resid_params p,
					  const int32_t *ids, uint32_t count,
					  const void **src)
{
	uint32_t n = blockIdx.x * blockDim.x + threadIdx.x;

	if (n >= count)
		return;
	int b = ids[n];
	kvs_cuda_seq sq = p.seqs[b];
	size_t vrow = sq.v_resid_start + sq.v_resid_len - p.R;

	src[2 * n] = p.k + (size_t)b * p.H * p.k_stride * p.D * p.esz;
	src[2 * n + 1] = p.v + ((size_t)b * p.H * p.v_stride + vrow) * p.D *
				 p.esz;
}

static __global__ void resid_seal_commit(const resid_params p,
					 const int32_t *ids,
					 const int32_t *pages, uint32_t count,
					 int32_t *page_table,
					 uint32_t max_pages)
{
	uint32_t n = blockIdx.x * blockDim.x + threadIdx.x;

	if (n >= count)
		return;
	int b = ids[n];
	kvs_cuda_seq sq = p.seqs[b];
	page_table[(size_t)b * max_pages + sq.k_quant_len / p.R] = pages[n];
	sq.k_quant_len += p.R;
	sq.k_resid_len = 0;
	p.seqs[b] = sq;
}

int kvs_cuda_resid_seal(const struct kvs_cuda_resid *st,
			const int32_t *seq_ids, const int32_t *pages,
			uint32_t count, uint8_t *pool, uint64_t page_stride,
			uint32_t *status)
{
	cudaStream_t stream = (cudaStream_t)st->stream;
	struct kvs_cuda_seal seal;
	resid_params p;
	const void **src = NULL;
	int rc = resid_check(st, &p);

	if (rc)
		return rc;
	if (!seq_ids || !pages || !pool || !st->page_table) {
		kvs_log(KVS_LOG_ERR, "cuda residual seal: missing buffers");
		return -KVS_EPARAM;
	}
	if (!count)
		return 0;
	rc = KVS_CUDA_CHECK(cudaMallocAsync((void **)&src,
				2 * count * sizeof(*src), stream));
	if (rc)
		return rc;
	resid_seal_sources<<<(count + 127) / 128, 128, 0, stream>>>(
		p, seq_ids, count, src);
	rc = KVS_CUDA_CHECK(cudaGetLastError());
	if (rc)
		goto free_src;

	seal.shape = st->shape;
	seal.in_dtype = st->dtype;
	seal.keys = NULL;
	seal.values = NULL;
	seal.block_stride = 0;
	seal.token_stride = p.D;
	seal.head_stride = (int64_t)p.k_stride * p.D;
	seal.v_head_stride = (int64_t)p.v_stride * p.D;
	seal.src = (const void *const *)src;
	seal.blocks = count;
	seal.images = pool;
	seal.image_stride = page_stride;
	seal.dst = pages;
	seal.status = status;
	seal.stream = st->stream;
	rc = kvs_cuda_seal_blocks(&seal);
	if (rc)
		goto free_src;
	resid_seal_commit<<<(count + 127) / 128, 128, 0, stream>>>(
		p, seq_ids, pages, count, st->page_table, st->max_pages);
	rc = KVS_CUDA_CHECK(cudaGetLastError());
free_src:
	cudaFreeAsync(src, stream);
	return rc;
}

static __global__ void resid_pop_kernel(const resid_params p)
{
	int b = blockIdx.x * blockDim.x + threadIdx.x;

	if (b >= p.B)
		return;
	kvs_cuda_seq sq = p.seqs[b];
	if (sq.v_resid_len > (uint32_t)p.R) {
		sq.v_resid_start++;
		sq.v_resid_len--;
		sq.v_quant_len++;
		p.seqs[b] = sq;
	}
}

int kvs_cuda_resid_pop(const struct kvs_cuda_resid *st)
{
	resid_params p;
	int rc = resid_check(st, &p);

	if (rc)
		return rc;
	resid_pop_kernel<<<(p.B + 127) / 128, 128, 0,
			   (cudaStream_t)st->stream>>>(p);
	return KVS_CUDA_CHECK(cudaGetLastError());
}
