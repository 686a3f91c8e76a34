/*
 * backend_cuda.cu - struct kvs_backend_ops on the GPU, behind the same host
 * interface as kvs_backend_cpu(): host buffers in, host buffers out.  Each
 * call uploads what it needs (block sections are copied to their canonical
 * offsets, so compressed-then-opened views work too), runs the kernels and
 * downloads the result.  For correctness and tooling; the decode runtime
 * keeps its pages and residuals on the device and calls kernels.h directly.
 */
#include "common.cuh"
#include "kvstash/stream.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int kvs_cuda_available(void)
{
	int n = 0;
	cudaError_t e = cudaGetDeviceCount(&n);

	if (e != cudaSuccess || n <= 0) {
		kvs_log(KVS_LOG_DEBUG, "cuda: no usable device (%s)",
			e != cudaSuccess ? cudaGetErrorString(e) : "count 0");
		return -KVS_ENODEV;
	}
	return 0;
}

int kvs_cuda_host_register(void *base, size_t len, bool unregister)
{
	int rc = kvs_cuda_available();

	if (rc < 0)
		return rc;
	if (unregister)
		return KVS_CUDA_CHECK(cudaHostUnregister(base));
	return KVS_CUDA_CHECK(
		cudaHostRegister(base, len, cudaHostRegisterDefault));
}

static int cuda_seal(const struct kvs_shape *shape,
		     const struct kvs_ident *ident, enum kvs_dtype in_dtype,
		     const void *keys, const void *values, uint8_t *image)
{
	struct kvs_cuda_seal a;
	uint32_t total;
	struct dev_layout lay;
	size_t n, esz = kvs_dtype_size(in_dtype);
	uint8_t *d_in = NULL, *d_img = NULL;
	int rc = kvs_cuda_layout(shape, &lay, &total);

	if (rc)
		return rc;
	n = (size_t)shape->kv_heads * shape->span * shape->head_dim * esz;
	rc = KVS_CUDA_CHECK(cudaMalloc((void **)&d_in, 2 * n));
	if (rc)
		return rc;
	rc = KVS_CUDA_CHECK(cudaMalloc((void **)&d_img, total));
	if (rc)
		goto free_in;
	rc = KVS_CUDA_CHECK(cudaMemcpy(d_in, keys, n, cudaMemcpyHostToDevice));
	if (!rc)
		rc = KVS_CUDA_CHECK(cudaMemcpy(d_in + n, values, n,
					       cudaMemcpyHostToDevice));
	if (!rc)
		rc = KVS_CUDA_CHECK(cudaMemset(d_img, 0, total));
	if (rc)
		goto free_img;
	memset(&a, 0, sizeof(a));
	a.shape = *shape;
	a.in_dtype = in_dtype;
	a.keys = d_in;
	a.values = d_in + n;
	a.token_stride = shape->head_dim;
	a.head_stride = (int64_t)shape->span * shape->head_dim;
	a.blocks = 1;
	a.images = d_img;
	a.image_stride = (total + 255) / 256 * 256;
	rc = kvs_cuda_seal_blocks(&a);
	if (!rc)
		rc = KVS_CUDA_CHECK(cudaMemcpy(image, d_img, total,
					       cudaMemcpyDeviceToHost));
	if (!rc)
		rc = kvs_block_finish(shape, ident, image);
free_img:
	cudaFree(d_img);
free_in:
	cudaFree(d_in);
	return rc;
}

/* Uploads @count opened blocks' sections into a device pool of pages of
 * @stride bytes at their canonical offsets. */
static int upload_pages(const struct kvs_view *const *views, uint32_t count,
			const struct kvs_shape *shape, uint8_t **pool,
			uint64_t *stride)
{
	struct kvs_layout lay;
	uint8_t *d = NULL;
	uint64_t st;
	int rc = kvs_block_layout(shape, &lay);

	if (rc)
		return rc;
	st = ((uint64_t)lay.total_size + 255) / 256 * 256;
	rc = KVS_CUDA_CHECK(cudaMalloc((void **)&d, st * (count ? count : 1)));
	if (rc)
		return rc;
	for (uint32_t i = 0; i < count && !rc; i++) {
		const struct kvs_view *v = views[i];

		if (memcmp(&v->hdr.shape, shape, sizeof(*shape))) {
			kvs_log(KVS_LOG_ERR,
				"cuda backend: blocks differ in shape");
			rc = -KVS_EPARAM;
			break;
		}
		for (int s = 0; s < KVS_BLOCK_SECTIONS && !rc; s++)
			rc = KVS_CUDA_CHECK(cudaMemcpy(
				d + i * st + lay.offset[s], v->section[s],
				lay.length[s], cudaMemcpyHostToDevice));
	}
	if (rc) {
		cudaFree(d);
		return rc;
	}
	*pool = d;
	*stride = st;
	return 0;
}

static int cuda_dequantize(const struct kvs_view *view, float *keys,
			   float *values)
{
	const struct kvs_shape *s = &view->hdr.shape;
	size_t n = (size_t)s->kv_heads * s->span * s->head_dim * sizeof(float);
	uint8_t *pool = NULL;
	float *out = NULL;
	int32_t *page = NULL, zero = 0;
	uint64_t stride;
	int rc = upload_pages(&view, 1, s, &pool, &stride);

	if (rc)
		return rc;
	rc = KVS_CUDA_CHECK(cudaMalloc((void **)&out, 2 * n));
	if (rc)
		goto free_pool;
	rc = KVS_CUDA_CHECK(cudaMalloc((void **)&page, sizeof(*page)));
	if (rc)
		goto free_out;
	rc = KVS_CUDA_CHECK(cudaMemcpy(page, &zero, sizeof(zero),
				       cudaMemcpyHostToDevice));
	if (!rc)
		rc = kvs_cuda_dequantize(s, pool, stride, page, 1,
					 KVS_DTYPE_F32, out,
					 (uint8_t *)out + n, NULL);
	if (!rc)
		rc = KVS_CUDA_CHECK(cudaMemcpy(keys, out, n,
					       cudaMemcpyDeviceToHost));
	if (!rc)
		rc = KVS_CUDA_CHECK(cudaMemcpy(values, (uint8_t *)out + n, n,
					       cudaMemcpyDeviceToHost));
	cudaFree(page);
free_out:
	cudaFree(out);
free_pool:
	cudaFree(pool);
	return rc;
}

/* Device copies of an attention problem's host inputs. */
struct attn_upload {
	uint8_t *pool;
	uint64_t stride;
	float *q, *k, *v, *out;
	int32_t *table;
	struct kvs_cuda_seq *seq;
	void *ws;
};

static int upload(void **dst, const void *src, size_t n)
{
	int rc = KVS_CUDA_CHECK(cudaMalloc(dst, n ? n : 16));

	if (!rc && n && src)
		rc = KVS_CUDA_CHECK(cudaMemcpy(*dst, src, n,
					       cudaMemcpyHostToDevice));
	return rc;
}

static void attn_upload_free(struct attn_upload *u)
{
	cudaFree(u->pool);
	cudaFree(u->q);
	cudaFree(u->k);
	cudaFree(u->v);
	cudaFree(u->out);
	cudaFree(u->table);
	cudaFree(u->seq);
	cudaFree(u->ws);
}

static int cuda_attend(const struct kvs_attn *a)
{
	struct kvs_cuda_attn c;
	struct kvs_cuda_seq seq;
	struct attn_upload u;
	uint32_t T = a->k_quant_len + a->k_resid_len;
	size_t D = a->head_dim;
	int32_t *table = NULL;
	int rc;

	if (T != a->v_quant_len + a->v_resid_len) {
		kvs_log(KVS_LOG_ERR, "cuda attend: Key and Value boundaries "
			"cover different tokens");
		return -KVS_EBOUNDARY;
	}
	if (!a->kv_heads || a->q_heads % a->kv_heads || !a->q || !a->out) {
		kvs_log(KVS_LOG_ERR, "cuda attend: bad arguments");
		return -KVS_EPARAM;
	}
	memset(&c, 0, sizeof(c));
	if (a->block_count)
		c.shape = a->blocks[0]->hdr.shape;
	else
		kvs_shape_default(&c.shape, a->kv_heads, a->head_dim);
	if (c.shape.kv_heads != a->kv_heads || c.shape.head_dim != D ||
	    a->k_quant_len % c.shape.group ||
	    (uint64_t)a->block_count * c.shape.span <
	    (a->k_quant_len > a->v_quant_len ? a->k_quant_len :
	     a->v_quant_len)) {
		kvs_log(KVS_LOG_ERR, "cuda attend: history does not match");
		return -KVS_EPARAM;
	}
	memset(&u, 0, sizeof(u));
	rc = upload_pages(a->blocks, a->block_count, &c.shape, &u.pool,
			  &u.stride);
	if (rc)
		return rc;
	table = (int32_t *)malloc(sizeof(*table) * (a->block_count + 1));
	if (!table) {
		rc = -ENOMEM;
		goto free_dev;
	}
	for (uint32_t i = 0; i < a->block_count; i++)
		table[i] = (int32_t)i;
	seq.k_quant_len = a->k_quant_len;
	seq.v_quant_len = a->v_quant_len;
	seq.k_resid_len = a->k_resid_len;
	seq.v_resid_len = a->v_resid_len;
	seq.v_resid_start = 0;
	seq.reserved = 0;
	rc = upload((void **)&u.table, table, sizeof(*table) * a->block_count);
	if (!rc)
		rc = upload((void **)&u.seq, &seq, sizeof(seq));
	if (!rc)
		rc = upload((void **)&u.q, a->q,
			    sizeof(float) * a->q_heads * D);
	if (!rc)
		rc = upload((void **)&u.k, a->k_resid, sizeof(float) *
			    a->kv_heads * a->k_resid_stride * D);
	if (!rc)
		rc = upload((void **)&u.v, a->v_resid, sizeof(float) *
			    a->kv_heads * a->v_resid_stride * D);
	if (!rc)
		rc = upload((void **)&u.out, NULL,
			    sizeof(float) * a->q_heads * D);
	if (rc)
		goto free_table;
	c.batch = 1;
	c.q_heads = a->q_heads;
	c.dtype = KVS_DTYPE_F32;
	c.out_dtype = KVS_DTYPE_F32;
	c.scale = a->scale;
	c.max_tokens = T;
	c.q = u.q;
	c.pool = u.pool;
	c.page_stride = u.stride;
	c.page_table = u.table;
	c.max_pages = a->block_count;
	c.seqs = u.seq;
	c.k_resid = u.k;
	c.v_resid = u.v;
	c.k_resid_stride = a->k_resid_stride;
	c.v_resid_stride = a->v_resid_stride;
	c.max_resid_rows = a->k_resid_len > a->v_resid_len ?
			   a->k_resid_len : a->v_resid_len;
	c.out = u.out;
	c.workspace_size = kvs_cuda_attn_workspace(&c);
	rc = upload(&u.ws, NULL, c.workspace_size);
	if (!rc) {
		c.workspace = u.ws;
		rc = kvs_cuda_attend(&c);
	}
	if (!rc)
		rc = KVS_CUDA_CHECK(cudaMemcpy(a->out, u.out, sizeof(float) *
					       a->q_heads * D,
					       cudaMemcpyDeviceToHost));
free_table:
	free(table);
free_dev:
	attn_upload_free(&u);
	return rc;
}

static const struct kvs_backend_ops cuda_ops = {
	"cuda",
	cuda_seal,
	cuda_dequantize,
	cuda_attend,
};

const struct kvs_backend_ops *kvs_backend_cuda(void)
{
	return kvs_cuda_available() ? NULL : &cuda_ops;
}
