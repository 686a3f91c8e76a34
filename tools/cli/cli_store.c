/*
 * cli_store.c - what the commands that open a store share: the pinning
 * of the DRAM arena where a GPU is, and the store's counters as JSON.
 */
#include "cli_kvs.h"
#include "cli_util.h"
#include "kvs_config.h"
#include "kvstash/store.h"
#if KVS_HAVE_CUDA
#include "kvstash/kernels.h"
#endif

void kvs_cli_store_pinning(struct kvs_store_opts *o)
{
#if KVS_HAVE_CUDA
	/* with a GPU, the DRAM arena is pinned for asynchronous copies */
	if (kvs_cuda_available() == 0)
		o->register_arena = kvs_cuda_register_arena;
#else
	(void)o;
#endif
}

static void tier_json(struct kvs_cli_json *j, const char *name,
		      const struct kvs_store_tier_stats *t)
{
	kvs_cli_json_object_begin(j, name);
	kvs_cli_json_u64(j, "blocks", t->blocks);
	kvs_cli_json_u64(j, "bytes", t->bytes);
	kvs_cli_json_u64(j, "capacity", t->capacity);
	kvs_cli_json_object_end(j);
}

void kvs_cli_store_stats_json(struct kvs_cli_json *j,
			      const struct kvs_store_stats *st,
			      const char *scope)
{
	tier_json(j, "dram", &st->dram);
	tier_json(j, "nvme", &st->nvme);
	kvs_cli_json_str(j, "counters_scope", scope);
	kvs_cli_json_u64(j, "hits", st->hits);
	kvs_cli_json_u64(j, "misses", st->misses);
	kvs_cli_json_u64(j, "evictions", st->evictions);
	kvs_cli_json_u64(j, "spills", st->spills);
	kvs_cli_json_u64(j, "corrupt_dropped", st->corrupt_dropped);
	kvs_cli_json_u64(j, "torn_dropped", st->torn_dropped);
	kvs_cli_json_u64(j, "lost_segments", st->lost_segments);
	kvs_cli_json_u64(j, "compactions", st->compactions);
	kvs_cli_json_u64(j, "segments", st->segments);
	kvs_cli_json_u64(j, "nvme_file_bytes", st->nvme_file_bytes);
	kvs_cli_json_bool(j, "direct_io", st->direct_io);
	kvs_cli_json_bool(j, "hugepages", st->hugepages);
	kvs_cli_json_bool(j, "registered_buffers", st->registered);
	kvs_cli_json_bool(j, "cuda_pinned", st->host_pinned);
}
