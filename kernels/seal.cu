/*
 * seal.cu - quantize and pack full-precision K/V into block images.
 *
 * Two kernels: seal_fast_kernel (seal_fast.cuh) for G = 32, D = 64/128,
 * fp16/bf16 rows 16-byte aligned (one warp per 32-token Key or Value
 * tile), and seal_kernel (seal_generic.cuh) for every other shape:
 * one CTA per (Key group g of G tokens, head h, block n).  It stages the
 * G x D tile of K and of V in shared memory as fp32 (exact widening), then
 *   1. Key metadata, one thread per channel (min/max along time),
 *   2. Value metadata, one thread per (token, channel group),
 *   3. packs codes 32 bits at a time (channels low bits first) and writes
 *      the code rows, which are contiguous for the G tokens of a group.
 * Quantization follows DESIGN.md §1 to the bit: fp32 min/max, metadata
 * rounded to nearest even, IEEE subtraction and division (__fsub_rn,
 * __fdiv_rn; never fast-math), rint, clamp.  Non-finite input or metadata
 * that overflows its type raises a flag the launcher turns into an error.
 * This file is the host side: the device layout of a block
 * (kvs_cuda_layout), the status check, and kvs_cuda_seal_blocks, which
 * validates its arguments and picks and launches the kernel.
 */
#include "seal_generic.cuh"
#include "seal_fast.cuh"

int kvs_cuda_layout(const struct kvs_shape *shape, struct dev_layout *out,
		    uint32_t *total)
{
	struct kvs_layout lay;
	int rc = kvs_block_layout(shape, &lay);

	if (rc)
		return rc;
	for (int i = 0; i < KVS_BLOCK_SECTIONS; i++)
		out->off[i] = lay.offset[i];
	if (total)
		*total = lay.total_size;
	return 0;
}

/* What the kernels support beyond kvs_shape_check(). */
static int seal_shape_ok(const struct kvs_shape *s)
{
	if (kvs_shape_check(s))
		return 0;
	if ((s->head_dim * s->bits) % 32 || s->head_dim > 256 ||
	    s->group > 256)
		return 0;
	return 1;
}

int kvs_cuda_status_check(uint32_t *status, void *stream)
{
	uint32_t flags = 0;
	int rc = KVS_CUDA_CHECK(cudaMemcpyAsync(&flags, status, sizeof(flags),
				cudaMemcpyDeviceToHost, (cudaStream_t)stream));

	if (!rc)
		rc = KVS_CUDA_CHECK(cudaStreamSynchronize(
					    (cudaStream_t)stream));
	if (rc)
		return rc;
	if (!flags)
		return 0;
	rc = KVS_CUDA_CHECK(cudaMemsetAsync(status, 0, sizeof(*status),
					    (cudaStream_t)stream));
	if (rc)
		return rc;
	if (flags & KVS_CUDA_FLAG_NONFINITE) {
		kvs_log(KVS_LOG_ERR, "cuda seal: non-finite input");
		return -KVS_ENONFINITE;
	}
	kvs_log(KVS_LOG_ERR, "cuda seal: origin or step overflows metadata");
	return -KVS_ERANGE;
}

int kvs_cuda_seal_blocks(const struct kvs_cuda_seal *a)
{
	const struct kvs_shape *s = &a->shape;
	cudaStream_t stream = (cudaStream_t)a->stream;
	seal_params p;
	uint32_t *status = a->status;
	seal_fast_fn fast;
	uint64_t items;
	int rc;

	if (!seal_shape_ok(s) || (a->in_dtype != KVS_DTYPE_F16 &&
	    a->in_dtype != KVS_DTYPE_BF16 && a->in_dtype != KVS_DTYPE_F32) ||
	    !a->images || (!a->src && (!a->keys || !a->values)) ||
	    a->image_stride % 256) {
		kvs_log(KVS_LOG_ERR, "cuda seal: unsupported arguments");
		return -KVS_EPARAM;
	}
	if (!a->blocks)
		return 0;
	rc = kvs_cuda_layout(s, &p.lay, NULL);
	if (rc)
		return rc;
	p.heads = s->kv_heads;
	p.D = s->head_dim;
	p.G = s->group;
	p.bits = s->bits;
	p.S = s->span;
	p.meta = s->meta_type;
	p.in_dtype = a->in_dtype;
	p.keys = a->keys;
	p.values = a->values;
	p.block_stride = a->block_stride;
	p.token_stride = a->token_stride;
	p.head_stride = a->head_stride;
	p.v_head_stride = a->v_head_stride ? a->v_head_stride :
			  a->head_stride;
	p.src = a->src;
	p.images = a->images;
	p.image_stride = a->image_stride;
	p.dst = a->dst;
	if (!status) {
		rc = KVS_CUDA_CHECK(cudaMallocAsync((void **)&status,
					sizeof(*status), stream));
		if (rc)
			return rc;
		rc = KVS_CUDA_CHECK(cudaMemsetAsync(status, 0, sizeof(*status),
						    stream));
		if (rc)
			goto free_status;
	}
	p.status = status;

	p.blocks = a->blocks;
	items = (uint64_t)a->blocks * p.heads * (p.S / 32) * 2;
	fast = seal_fast_pick(a, items);
	if (fast) {
		rc = seal_fast_launch(fast, p, (uint32_t)items, stream);
	} else {
		size_t smem = (size_t)(2 * p.G * (p.D + 1) + 3 * p.D +
				       3 * p.G * (p.D / p.G)) * sizeof(float);
		dim3 grid(p.S / p.G, p.heads, a->blocks);

		rc = kvs_cuda_grant_smem((const void *)seal_kernel, smem);
		if (!rc) {
			seal_kernel<<<grid, 256, smem, stream>>>(p);
			rc = KVS_CUDA_CHECK(cudaGetLastError());
		}
	}
	if (!rc && !a->status)
		rc = kvs_cuda_status_check(status, stream);
free_status:
	if (!a->status)
		cudaFreeAsync(status, stream);
	return rc;
}
