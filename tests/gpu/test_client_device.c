/*
 * test_client_device.c - kvs_client_get_to_device against a real
 * kvstashd on loopback: blocks put from host memory come back into GPU
 * memory (pinned staging, cudaMemcpyAsync on a stream) byte-identical, a
 * miss is reported as such and leaves its device buffer untouched.  Skips
 * (77) without a GPU.  The daemon comes from KVSTASHD.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <cuda_runtime_api.h>

#include "gpu_util.h"
#include "service_util.h"

#define N 8

static void test_get_to_device(void **state)
{
	struct daemon d;
	struct kvs_client *c;
	struct kvs_store_key keys[N + 1];
	uint8_t *obj[N + 1], *dev[N + 1], *back;
	void *dbufs[N + 1];
	size_t len[N + 1], caps[N + 1], lens[N + 1];
	int res[N + 1];
	cudaStream_t stream;

	(void)state;
	daemon_prepare(&d, "gpu");
	daemon_start(&d, NULL);
	c = client_of(&d, "alice", 0);
	for (int i = 0; i <= N; i++) {
		obj[i] = make_block(700 + (uint64_t)i, (uint32_t)i, 8, 128,
				    &len[i], &keys[i]);
		assert_int_equal(cudaMalloc((void **)&dev[i], len[i]),
				 cudaSuccess);
		assert_int_equal(cudaMemset(dev[i], 0xab, len[i]), cudaSuccess);
		dbufs[i] = dev[i];
		caps[i] = len[i];
	}
	assert_int_equal(kvs_client_put(c, (const uint8_t *const *)obj, len, N,
					KVS_DURABILITY_MEMORY, res),
			 0);
	assert_int_equal(cudaStreamCreate(&stream), cudaSuccess);
	assert_int_equal(kvs_client_get_to_device(c, keys, N + 1, dbufs, caps,
						  lens, res, stream),
			 0);
	back = malloc(len[0] * 2);
	for (int i = 0; i <= N; i++) {
		assert_int_equal(cudaMemcpy(back, dev[i], len[i],
					    cudaMemcpyDeviceToHost),
				 cudaSuccess);
		if (i < N) {
			assert_int_equal(res[i], 0);
			assert_int_equal(lens[i], len[i]);
			assert_memory_equal(back, obj[i], len[i]);
		} else {
			/* never put: a miss, its buffer untouched */
			assert_int_equal(res[i], -KVS_ENOTFOUND);
			for (size_t k = 0; k < len[i]; k++)
				assert_int_equal(back[k], 0xab);
		}
	}
	cudaStreamDestroy(stream);
	for (int i = 0; i <= N; i++) {
		cudaFree(dev[i]);
		free(obj[i]);
	}
	free(back);
	kvs_client_close(c);
	assert_int_equal(daemon_stop(&d, SIGTERM, 10000), 0);
	daemon_cleanup(&d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_get_to_device, daemons_reap),
	};

	gpu_require();
	return cmocka_run_group_tests(tests, NULL, NULL);
}
