/*
 * abi_layout.c - prints the size of every public struct that the Python
 * package mirrors with ctypes (python/kvstash/_lib.py), and the
 * offset of each of its fields, one "Name size" or "Name.field offset"
 * line each; python/tests/test_abi.py compares them with the ctypes
 * classes, so a field added to a header and not to _lib.py fails a test
 * instead of shifting every field after it.
 */
#include <stddef.h>
#include <stdio.h>

#include <kvstash/client.h>
#include <kvstash/kernels.h>
#include <kvstash/kvformat.h>
#include <kvstash/runtime.h>
#include <kvstash/store.h>

#define SIZE(py, c) printf("%s %zu\n", #py, sizeof(struct c))
#define FIELD(py, c, f) printf("%s.%s %zu\n", #py, #f, offsetof(struct c, f))

int main(void)
{
	SIZE(Shape, kvs_shape);
	FIELD(Shape, kvs_shape, kv_heads);
	FIELD(Shape, kvs_shape, head_dim);
	FIELD(Shape, kvs_shape, group);
	FIELD(Shape, kvs_shape, bits);
	FIELD(Shape, kvs_shape, meta_type);
	FIELD(Shape, kvs_shape, span);
	FIELD(Shape, kvs_shape, residual);
	SIZE(Ident, kvs_ident);
	FIELD(Ident, kvs_ident, block_id);
	FIELD(Ident, kvs_ident, parent_id);
	FIELD(Ident, kvs_ident, model_fp);
	FIELD(Ident, kvs_ident, layer);
	FIELD(Ident, kvs_ident, first_pos);
	SIZE(Section, kvs_section);
	FIELD(Section, kvs_section, offset);
	FIELD(Section, kvs_section, stored_len);
	FIELD(Section, kvs_section, logical_len);
	FIELD(Section, kvs_section, codec);
	FIELD(Section, kvs_section, checksum);
	SIZE(Header, kvs_header);
	FIELD(Header, kvs_header, version);
	FIELD(Header, kvs_header, kind);
	FIELD(Header, kvs_header, flags);
	FIELD(Header, kvs_header, layout);
	FIELD(Header, kvs_header, tail_dtype);
	FIELD(Header, kvs_header, shape);
	FIELD(Header, kvs_header, tokens);
	FIELD(Header, kvs_header, r_k);
	FIELD(Header, kvs_header, r_v);
	FIELD(Header, kvs_header, total_size);
	FIELD(Header, kvs_header, ident);
	FIELD(Header, kvs_header, section_count);
	FIELD(Header, kvs_header, section);
	SIZE(ClusterOpts, kvs_client_cluster_opts);
	FIELD(ClusterOpts, kvs_client_cluster_opts, etcd);
	FIELD(ClusterOpts, kvs_client_cluster_opts, cluster);
	FIELD(ClusterOpts, kvs_client_cluster_opts, servers);
	FIELD(ClusterOpts, kvs_client_cluster_opts, key_file);
	FIELD(ClusterOpts, kvs_client_cluster_opts, timeout_ms);
	FIELD(ClusterOpts, kvs_client_cluster_opts, node_timeout_ms);
	FIELD(ClusterOpts, kvs_client_cluster_opts, backoff_ms);
	FIELD(ClusterOpts, kvs_client_cluster_opts, etcd_timeout_ms);
	FIELD(ClusterOpts, kvs_client_cluster_opts, replicas);
	FIELD(ClusterOpts, kvs_client_cluster_opts, repair_replicas);
	FIELD(ClusterOpts, kvs_client_cluster_opts, shared_memory);
	SIZE(ModelDesc, kvs_model_desc);
	FIELD(ModelDesc, kvs_model_desc, model_id);
	FIELD(ModelDesc, kvs_model_desc, layers);
	FIELD(ModelDesc, kvs_model_desc, kv_dtype);
	FIELD(ModelDesc, kvs_model_desc, shape);
	FIELD(ModelDesc, kvs_model_desc, layout);
	SIZE(View, kvs_view);
	FIELD(View, kvs_view, hdr);
	FIELD(View, kvs_view, section);
	FIELD(View, kvs_view, owned);
	SIZE(RtConfig, kvs_rt_config);
	FIELD(RtConfig, kvs_rt_config, model_id);
	FIELD(RtConfig, kvs_rt_config, layers);
	FIELD(RtConfig, kvs_rt_config, q_heads);
	FIELD(RtConfig, kvs_rt_config, shape);
	FIELD(RtConfig, kvs_rt_config, kv_dtype);
	FIELD(RtConfig, kvs_rt_config, out_dtype);
	FIELD(RtConfig, kvs_rt_config, order);
	FIELD(RtConfig, kvs_rt_config, device);
	FIELD(RtConfig, kvs_rt_config, scale);
	FIELD(RtConfig, kvs_rt_config, max_tokens);
	FIELD(RtConfig, kvs_rt_config, pool_pages);
	FIELD(RtConfig, kvs_rt_config, name_space);
	FIELD(RtConfig, kvs_rt_config, store);
	FIELD(RtConfig, kvs_rt_config, stream);
	SIZE(RtStats, kvs_rt_stats);
	FIELD(RtStats, kvs_rt_stats, pages_total);
	FIELD(RtStats, kvs_rt_stats, pages_free);
	FIELD(RtStats, kvs_rt_stats, published);
	FIELD(RtStats, kvs_rt_stats, publish_skipped);
	FIELD(RtStats, kvs_rt_stats, publish_failed);
	FIELD(RtStats, kvs_rt_stats, attached);
	FIELD(RtStats, kvs_rt_stats, fetch_missed);
	FIELD(RtStats, kvs_rt_stats, fetch_corrupt);
	FIELD(RtStats, kvs_rt_stats, sealed);
	FIELD(RtStats, kvs_rt_stats, fetch_get_us);
	FIELD(RtStats, kvs_rt_stats, fetch_copy_us);
	SIZE(CudaSeq, kvs_cuda_seq);
	FIELD(CudaSeq, kvs_cuda_seq, k_quant_len);
	FIELD(CudaSeq, kvs_cuda_seq, v_quant_len);
	FIELD(CudaSeq, kvs_cuda_seq, k_resid_len);
	FIELD(CudaSeq, kvs_cuda_seq, v_resid_len);
	FIELD(CudaSeq, kvs_cuda_seq, v_resid_start);
	FIELD(CudaSeq, kvs_cuda_seq, reserved);
	SIZE(CudaSeal, kvs_cuda_seal);
	FIELD(CudaSeal, kvs_cuda_seal, shape);
	FIELD(CudaSeal, kvs_cuda_seal, in_dtype);
	FIELD(CudaSeal, kvs_cuda_seal, keys);
	FIELD(CudaSeal, kvs_cuda_seal, values);
	FIELD(CudaSeal, kvs_cuda_seal, block_stride);
	FIELD(CudaSeal, kvs_cuda_seal, token_stride);
	FIELD(CudaSeal, kvs_cuda_seal, head_stride);
	FIELD(CudaSeal, kvs_cuda_seal, src);
	FIELD(CudaSeal, kvs_cuda_seal, blocks);
	FIELD(CudaSeal, kvs_cuda_seal, images);
	FIELD(CudaSeal, kvs_cuda_seal, image_stride);
	FIELD(CudaSeal, kvs_cuda_seal, dst);
	FIELD(CudaSeal, kvs_cuda_seal, status);
	FIELD(CudaSeal, kvs_cuda_seal, stream);
	FIELD(CudaSeal, kvs_cuda_seal, v_head_stride);
	SIZE(CudaAttn, kvs_cuda_attn);
	FIELD(CudaAttn, kvs_cuda_attn, shape);
	FIELD(CudaAttn, kvs_cuda_attn, batch);
	FIELD(CudaAttn, kvs_cuda_attn, q_heads);
	FIELD(CudaAttn, kvs_cuda_attn, dtype);
	FIELD(CudaAttn, kvs_cuda_attn, out_dtype);
	FIELD(CudaAttn, kvs_cuda_attn, scale);
	FIELD(CudaAttn, kvs_cuda_attn, max_tokens);
	FIELD(CudaAttn, kvs_cuda_attn, q);
	FIELD(CudaAttn, kvs_cuda_attn, pool);
	FIELD(CudaAttn, kvs_cuda_attn, page_stride);
	FIELD(CudaAttn, kvs_cuda_attn, page_table);
	FIELD(CudaAttn, kvs_cuda_attn, max_pages);
	FIELD(CudaAttn, kvs_cuda_attn, seqs);
	FIELD(CudaAttn, kvs_cuda_attn, k_resid);
	FIELD(CudaAttn, kvs_cuda_attn, v_resid);
	FIELD(CudaAttn, kvs_cuda_attn, k_resid_stride);
	FIELD(CudaAttn, kvs_cuda_attn, v_resid_stride);
	FIELD(CudaAttn, kvs_cuda_attn, out);
	FIELD(CudaAttn, kvs_cuda_attn, workspace);
	FIELD(CudaAttn, kvs_cuda_attn, workspace_size);
	FIELD(CudaAttn, kvs_cuda_attn, flags);
	FIELD(CudaAttn, kvs_cuda_attn, stream);
	FIELD(CudaAttn, kvs_cuda_attn, max_resid_rows);
	SIZE(StoreKey, kvs_store_key);
	FIELD(StoreKey, kvs_store_key, span_id);
	FIELD(StoreKey, kvs_store_key, layer);
	SIZE(ClientOpts, kvs_client_opts);
	FIELD(ClientOpts, kvs_client_opts, address);
	FIELD(ClientOpts, kvs_client_opts, key_file);
	FIELD(ClientOpts, kvs_client_opts, connect_timeout_ms);
	FIELD(ClientOpts, kvs_client_opts, timeout_ms);
	FIELD(ClientOpts, kvs_client_opts, shared_memory);
	SIZE(ClientLimits, kvs_client_limits);
	FIELD(ClientLimits, kvs_client_limits, max_batch);
	FIELD(ClientLimits, kvs_client_limits, max_object);
	FIELD(ClientLimits, kvs_client_limits, max_payload);
	FIELD(ClientLimits, kvs_client_limits, max_inflight);
	SIZE(TierStats, kvs_store_tier_stats);
	FIELD(TierStats, kvs_store_tier_stats, blocks);
	FIELD(TierStats, kvs_store_tier_stats, bytes);
	FIELD(TierStats, kvs_store_tier_stats, capacity);
	SIZE(StoreStats, kvs_store_stats);
	FIELD(StoreStats, kvs_store_stats, dram);
	FIELD(StoreStats, kvs_store_stats, nvme);
	FIELD(StoreStats, kvs_store_stats, hits);
	FIELD(StoreStats, kvs_store_stats, misses);
	FIELD(StoreStats, kvs_store_stats, dram_hits);
	FIELD(StoreStats, kvs_store_stats, nvme_hits);
	FIELD(StoreStats, kvs_store_stats, evictions);
	FIELD(StoreStats, kvs_store_stats, spills);
	FIELD(StoreStats, kvs_store_stats, promotions);
	FIELD(StoreStats, kvs_store_stats, carried);
	FIELD(StoreStats, kvs_store_stats, corrupt_dropped);
	FIELD(StoreStats, kvs_store_stats, torn_dropped);
	FIELD(StoreStats, kvs_store_stats, lost_segments);
	FIELD(StoreStats, kvs_store_stats, compactions);
	FIELD(StoreStats, kvs_store_stats, tombstones);
	FIELD(StoreStats, kvs_store_stats, segments);
	FIELD(StoreStats, kvs_store_stats, nvme_file_bytes);
	FIELD(StoreStats, kvs_store_stats, direct_io);
	FIELD(StoreStats, kvs_store_stats, hugepages);
	FIELD(StoreStats, kvs_store_stats, registered);
	FIELD(StoreStats, kvs_store_stats, host_pinned);
	SIZE(ClientStat, kvs_client_stat);
	FIELD(ClientStat, kvs_client_stat, store);
	FIELD(ClientStat, kvs_client_stat, tails);
	FIELD(ClientStat, kvs_client_stat, tail_bytes);
	FIELD(ClientStat, kvs_client_stat, tails_expired);
	FIELD(ClientStat, kvs_client_stat, connections);
	FIELD(ClientStat, kvs_client_stat, uptime_s);
	SIZE(BlockStoreCounters, kvs_blockstore_counters);
	FIELD(BlockStoreCounters, kvs_blockstore_counters, lookups);
	FIELD(BlockStoreCounters, kvs_blockstore_counters, gets);
	FIELD(BlockStoreCounters, kvs_blockstore_counters, got);
	FIELD(BlockStoreCounters, kvs_blockstore_counters, got_bytes);
	FIELD(BlockStoreCounters, kvs_blockstore_counters, get_missed);
	FIELD(BlockStoreCounters, kvs_blockstore_counters, puts);
	FIELD(BlockStoreCounters, kvs_blockstore_counters, put);
	FIELD(BlockStoreCounters, kvs_blockstore_counters, put_bytes);
	FIELD(BlockStoreCounters, kvs_blockstore_counters, tail_puts);
	FIELD(BlockStoreCounters, kvs_blockstore_counters, tail_put_bytes);
	FIELD(BlockStoreCounters, kvs_blockstore_counters, tail_takes);
	FIELD(BlockStoreCounters, kvs_blockstore_counters, tail_take_bytes);
	FIELD(BlockStoreCounters, kvs_blockstore_counters, removed);
	return ferror(stdout) ? 1 : 0;
}
