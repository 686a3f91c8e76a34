/*
 * device.c - kvs_client_get_to_device: blocks into GPU memory through
 * pinned host staging.  Debian's UCX has no CUDA transport, so the blocks
 * land in page-locked host memory (cudaHostAlloc) by rendezvous, are
 * checked there like any get, and go to the device with cudaMemcpyAsync
 * on the caller's stream.  Without CUDA the call reports -KVS_ENODEV.
 */
#include <errno.h>
#include <stdlib.h>

#include "client_internal.h"
#include "kvs_config.h"
#include "kvstash/error.h"
#include "kvstash/log.h"

#if KVS_HAVE_CUDA
#include <cuda_runtime_api.h>

int kvs_client_get_to_device(struct kvs_client *c,
			     const struct kvs_store_key *keys, size_t n,
			     void *const *dev_bufs, const size_t *caps,
			     size_t *lens, int *results, void *stream)
{
	cudaStream_t s = (cudaStream_t)stream;
	void **host = calloc(n ? n : 1, sizeof(*host));
	uint8_t *staging = NULL;
	size_t total = 0, off = 0;
	int count = 0, err;

	if (!host)
		return -ENOMEM;
	if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
		free(host);
		return -KVS_ENODEV;
	}
	for (size_t i = 0; i < n; i++)
		total += caps[i];
	if (cudaHostAlloc((void **)&staging, total ? total : 1,
			  cudaHostAllocDefault) != cudaSuccess) {
		free(host);
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++, off += caps[i - 1])
		host[i] = staging + off;
	err = kvs_client_get(c, keys, n, host, caps, lens, results);
	for (size_t i = 0; !err && i < n; i++) {
		if (results[i])
			continue;
		if (cudaMemcpyAsync(dev_bufs[i], host[i], lens[i],
				    cudaMemcpyHostToDevice, s) != cudaSuccess) {
			kvs_log(KVS_LOG_ERR, "kvstash client: cudaMemcpyAsync "
					     "failed");
			err = -KVS_ECUDA;
		}
	}
	if (cudaStreamSynchronize(s) != cudaSuccess && !err)
		err = -KVS_ECUDA;
	cudaFreeHost(staging);
	free(host);
	return err;
}

#else

int kvs_client_get_to_device(struct kvs_client *c,
			     const struct kvs_store_key *keys, size_t n,
			     void *const *dev_bufs, const size_t *caps,
			     size_t *lens, int *results, void *stream)
{
	return -KVS_ENODEV;
}

#endif
