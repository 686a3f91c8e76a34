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

int kvs_cuda_sm_count(void)
{
	static thread_local int count;
	int dev = 0, n = 0;

	if (count)
		return count;
	if (KVS_CUDA_CHECK(cudaGetDevice(&dev)) ||
	    KVS_CUDA_CHECK(cudaDeviceGetAttribute(&n,
				cudaDevAttrMultiProcessorCount, dev)) || n <= 0)
		return 0;
	count = n;
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
