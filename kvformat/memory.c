/*
 * memory - the seed's memory formula (§7) beside the format's actual bytes.
 *
 * Formula, per layer, per KV head, per request, persisted state
 * r_K = T mod R, r_V = min(T, R):
 *   quantized = D (2T - r_K - r_V) (b/8 + 2e/G)
 *   residual  = D (r_K + r_V) f
 * both multiplied by layers * kv_heads * batch.
 *
 * Format bytes, per layer and request: floor(T / R) uncompressed blocks of
 * S = R tokens holding all kv_heads (kvs_block_layout().total_size each:
 * 512-byte header, six 256-aligned sections) plus one residual tail
 * (kvs_tail_layout() with r_K Key rows and r_V Value rows of f-byte
 * elements: f = 2 is f16, f = 4 is f32); multiplied by layers * batch.
 * They exceed the formula by the headers and the section padding, and by
 * the Value codes and metadata of the r_V tokens still in the FIFO: a
 * block holds the Values of all its tokens (it is a pure function of
 * them), so those r_V Values are both in a block and in the tail.
 * Metadata of e bytes maps to fp16 (e = 2) or fp32 (e = 4); bf16 has the
 * same size as fp16.
 */
#include "kvstash/log.h"
#include "kvstash/kvformat.h"

static int dtype_of_size(unsigned bytes, enum kvs_dtype *out)
{
	if (bytes == 2) {
		*out = KVS_DTYPE_F16;
		return 0;
	}
	if (bytes == 4) {
		*out = KVS_DTYPE_F32;
		return 0;
	}
	return -KVS_EPARAM;
}

/* Actual bytes of one layer of one request (see the file comment). */
static int format_bytes(uint64_t tokens, const struct kvs_shape *shape,
			enum kvs_dtype tail_dtype, uint64_t *out)
{
	struct kvs_layout block, tail;
	uint32_t R = shape->residual;
	uint32_t r_k = (uint32_t)(tokens % R);
	uint32_t r_v = tokens < R ? (uint32_t)tokens : R;
	uint64_t blocks_bytes, total;
	int err;

	err = kvs_block_layout(shape, &block);
	if (err)
		return err;
	err = kvs_tail_layout(shape, tail_dtype, r_k, r_v, &tail);
	if (err)
		return err;
	if (__builtin_mul_overflow(tokens / R, (uint64_t)block.total_size,
				   &blocks_bytes) ||
	    __builtin_add_overflow(blocks_bytes, (uint64_t)tail.total_size,
				   &total)) {
		kvs_log(KVS_LOG_ERR, "memory: %llu tokens overflow 64 bits",
			(unsigned long long)tokens);
		return -KVS_EPARAM;
	}
	*out = total;
	return 0;
}

int kvs_memory_account(uint64_t tokens, uint32_t head_dim, uint32_t group,
		       uint32_t residual, unsigned bits, unsigned meta_bytes,
		       unsigned float_bytes, uint32_t layers, uint32_t kv_heads,
		       uint32_t batch, struct kvs_memory *out)
{
	enum kvs_dtype meta, tail_dtype;
	struct kvs_shape shape;
	double r_k, r_v, copies;
	uint64_t per_layer, objects, bytes;
	int err;

	if (!out || layers == 0 || kv_heads == 0 || batch == 0 ||
	    head_dim == 0 || head_dim > UINT16_MAX || group == 0 ||
	    group > UINT16_MAX || kv_heads > UINT16_MAX || residual == 0 ||
	    (bits != 2 && bits != 4) || dtype_of_size(meta_bytes, &meta) != 0 ||
	    dtype_of_size(float_bytes, &tail_dtype) != 0) {
		kvs_log(KVS_LOG_ERR, "memory: need positive sizes (head_dim, "
				     "group, kv_heads <= 65535), bits 2|4, "
				     "meta and float bytes 2|4");
		return -KVS_EPARAM;
	}
	shape.kv_heads = (uint16_t)kv_heads;
	shape.head_dim = (uint16_t)head_dim;
	shape.group = (uint16_t)group;
	shape.bits = (uint8_t)bits;
	shape.meta_type = (uint8_t)meta;
	shape.span = residual;
	shape.residual = residual;
	err = kvs_shape_check(&shape);
	if (err)
		return err;
	err = format_bytes(tokens, &shape, tail_dtype, &per_layer);
	if (err)
		return err;
	if (__builtin_mul_overflow((uint64_t)layers, (uint64_t)batch,
				   &objects) ||
	    __builtin_mul_overflow(per_layer, objects, &bytes)) {
		kvs_log(KVS_LOG_ERR, "memory: format bytes overflow 64 bits");
		return -KVS_EPARAM;
	}

	r_k = (double)(tokens % residual);
	r_v = (double)(tokens < residual ? tokens : residual);
	copies = (double)layers * kv_heads * batch;
	out->quantized_bytes = copies * head_dim * (2.0 * tokens - r_k - r_v) *
			       (bits / 8.0 + 2.0 * meta_bytes / group);
	out->residual_bytes = copies * head_dim * (r_k + r_v) * float_bytes;
	out->total_bytes = out->quantized_bytes + out->residual_bytes;
	out->format_bytes = bytes;
	return 0;
}
