/*
 * test_host_pin.c - the store's DRAM arena pinned through the CUDA hook:
 * with opts.register_arena = kvs_cuda_register_arena, the arena is
 * registered with CUDA (stats say so, and CUDA sees a block's bytes as
 * registered host memory), a block copied to the device from it comes back
 * byte-identical, and close unregisters cleanly.  Skips (77) without a GPU.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>
#include <cuda_runtime_api.h>

#include "gpu_util.h"
#include "kvstash/store.h"

static void test_arena_pinned(void **state)
{
	char dir[] = "/tmp/kvs-pin-XXXXXX";
	struct kvs_store_opts opts;
	struct kvs_store_stats st;
	struct kvs_store *store;
	struct kvs_store_ref *ref;
	struct kvs_store_key key;
	struct cudaPointerAttributes attr;
	struct kvs_shape sh;
	struct kvs_ident id = { 0 };
	float *kv;
	uint8_t *obj, *back, *dev;
	size_t len, n;

	(void)state;
	assert_non_null(mkdtemp(dir));
	kvs_shape_default(&sh, 8, 128);
	n = (size_t)sh.kv_heads * sh.span * sh.head_dim;
	kv = malloc(n * sizeof(float));
	assert_non_null(kv);
	for (size_t i = 0; i < n; i++)
		kv[i] = (float)((i * 2654435761u) % 1000) / 500.0f - 1.0f;
	id.block_id[0] = 7;
	assert_int_equal(
		kvs_block_seal(&sh, &id, KVS_DTYPE_F32, kv, kv, 0, &obj, &len),
		0);

	kvs_store_opts_default(&opts);
	opts.register_arena = kvs_cuda_register_arena;
	opts.dram_capacity = 16u << 20;
	opts.nvme_capacity = 64u << 20;
	assert_int_equal(kvs_store_open(dir, &opts, &store), 0);
	kvs_store_stats_get(store, &st);
	assert_true(st.host_pinned);
	assert_int_equal(
		kvs_store_put(store, obj, len, KVS_DURABILITY_MEMORY, &key), 0);
	assert_int_equal(kvs_store_get(store, &key, &ref), 0);
	assert_int_equal(
		cudaPointerGetAttributes(&attr, kvs_store_ref_data(ref)),
		cudaSuccess);
	assert_int_equal(attr.type, cudaMemoryTypeHost);

	back = malloc(len);
	assert_non_null(back);
	assert_int_equal(cudaMalloc((void **)&dev, len), cudaSuccess);
	assert_int_equal(cudaMemcpyAsync(dev, kvs_store_ref_data(ref), len,
					 cudaMemcpyHostToDevice, 0),
			 cudaSuccess);
	assert_int_equal(cudaMemcpy(back, dev, len, cudaMemcpyDeviceToHost),
			 cudaSuccess);
	assert_memory_equal(back, obj, len);
	kvs_store_ref_release(ref);
	kvs_store_close(store);

	cudaFree(dev);
	free(back);
	free(obj);
	free(kv);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_arena_pinned),
	};

	gpu_require();
	return cmocka_run_group_tests(tests, NULL, NULL);
}
