/*
 * launch.cu - what the launchers of every kernel family share: granting a
 * kernel more than the default 48 KB of dynamic shared memory, and how
 * many of its CTAs fit on the device.  Both are driver calls whose answer
 * does not change, so each thread asks once per kernel (and size) and
 * keeps the answer: a decode step launches the same kernels every time.
 */
#include "common.cuh"

#define CACHE_SLOTS 32

struct fn_answer {
	const void *fn;
	size_t smem;
	int value;
};

/* The entry for (@fn, @smem), or a free one (fn NULL), or NULL when full. */
static struct fn_answer *find(struct fn_answer *tab, const void *fn,
			      size_t smem)
{
	for (int i = 0; i < CACHE_SLOTS; i++)
		if (!tab[i].fn || (tab[i].fn == fn && tab[i].smem == smem))
			return &tab[i];
	return NULL;
}

/* Attribute @what of the current device, or 0 on failure (logged). */
static int device_attr(enum cudaDeviceAttr what)
{
	int dev = 0, n = 0;

	if (KVS_CUDA_CHECK(cudaGetDevice(&dev)) ||
	    KVS_CUDA_CHECK(cudaDeviceGetAttribute(&n, what, dev)) || n <= 0)
		return 0;
	return n;
}

int kvs_cuda_sm_count(void)
{
	static thread_local int count;

	if (!count)
		count = device_attr(cudaDevAttrMultiProcessorCount);
	return count;
}

int kvs_cuda_grant_smem(const void *fn, size_t smem)
{
	static thread_local struct fn_answer tab[CACHE_SLOTS];
	struct fn_answer *e;
	int rc;

	if (smem <= 48 * 1024)
		return 0;
	e = find(tab, fn, 0);
	if (e && e->fn && e->value >= (int)smem)
		return 0;
	rc = KVS_CUDA_CHECK(cudaFuncSetAttribute(fn,
			cudaFuncAttributeMaxDynamicSharedMemorySize,
			(int)smem));
	if (!rc && e) {
		e->fn = fn;
		e->value = (int)smem;
	}
	return rc;
}

int kvs_cuda_resident_ctas(const void *fn, int threads, size_t smem)
{
	static thread_local struct fn_answer tab[CACHE_SLOTS];
	struct fn_answer *e = find(tab, fn, smem);
	int per_sm = 0, sms;

	if (e && e->fn)
		return e->value;
	/* the query counts only what the function may use: above 48 KB that
	 * must be granted first */
	sms = kvs_cuda_sm_count();
	if (!sms || kvs_cuda_grant_smem(fn, smem) ||
	    KVS_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
				&per_sm, fn, threads, smem)) || per_sm <= 0)
		return 0;
	if (e) {
		e->fn = fn;
		e->smem = smem;
		e->value = per_sm * sms;
	}
	return per_sm * sms;
}

size_t kvs_cuda_smem_optin(void)
{
	static thread_local size_t optin;

	if (!optin)
		optin = (size_t)device_attr(
			cudaDevAttrMaxSharedMemoryPerBlockOptin);
	return optin;
}

int kvs_cuda_cluster_config(const void *fn, int size, int threads,
			    size_t smem, cudaLaunchConfig_t *cfg,
			    cudaLaunchAttribute *attr)
{
	int rc = kvs_cuda_grant_smem(fn, smem);

	if (!rc && size > 8)
		rc = KVS_CUDA_CHECK(cudaFuncSetAttribute(fn,
			cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
	if (rc)
		return rc;
	*cfg = (cudaLaunchConfig_t){};
	attr->id = cudaLaunchAttributeClusterDimension;
	attr->val.clusterDim.x = (unsigned)size;
	attr->val.clusterDim.y = 1;
	attr->val.clusterDim.z = 1;
	cfg->gridDim = dim3((unsigned)size);
	cfg->blockDim = dim3((unsigned)threads);
	cfg->dynamicSmemBytes = smem;
	cfg->attrs = attr;
	cfg->numAttrs = 1;
	return 0;
}

int kvs_cuda_resident_clusters(const void *fn, int threads, size_t smem,
			       int size)
{
	static thread_local struct fn_answer tab[CACHE_SLOTS];
	/* the cache's key: the size in the top bits of the bytes */
	const size_t key = smem | (size_t)size << 48;
	struct fn_answer *e = find(tab, fn, key);
	cudaLaunchConfig_t cfg;
	cudaLaunchAttribute attr[1];
	int n = 0;

	if (e && e->fn)
		return e->value;
	if (kvs_cuda_cluster_config(fn, size, threads, smem, &cfg, attr))
		return 0;
	/* a size the device cannot place is an answer (none), not an error */
	if (cudaOccupancyMaxActiveClusters(&n, fn, &cfg) != cudaSuccess) {
		(void)cudaGetLastError();
		n = 0;
	}
	if (e) {
		e->fn = fn;
		e->smem = key;
		e->value = n;
	}
	return n;
}
