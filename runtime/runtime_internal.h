/*
 * runtime_internal - the sequence runtime's private structures and the
 * engine interface its two devices implement.
 *
 * The generic part (rt.c, seq.c, batch.c, attach.c, publish.c,
 * handoff.c) keeps a host mirror of every sequence's lengths and page
 * tables and decides what each step does; an engine (engine_cpu.c,
 * engine_cuda.c) owns the memory the data lives in and runs the compute:
 * the page pool, per batch the residual slots (per layer
 * k_resid [cap][kv_heads][k_stride][D], v_resid [cap][kv_heads][v_stride][D]
 * with the Value FIFO starting at a moving row, the lengths of each slot
 * and its page table), the residual append / seal / pop, the fused
 * attention, and copies between the pool and host images.  The CUDA
 * engine's slots are exactly what kernels.h's kvs_cuda_resid and
 * kvs_cuda_attn describe; the CPU engine mirrors them in host memory with
 * fp32 residual rows, so both run the same plan.
 */
#ifndef KVSTASH_RUNTIME_INTERNAL_H
#define KVSTASH_RUNTIME_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "kvstash/runtime.h"

/* Lengths of a slot as the device keeps them (the layout of kernels.h's
 * struct kvs_cuda_seq, asserted in engine_cuda.c). */
struct rt_dev_len {
	uint32_t k_quant, v_quant;
	uint32_t k_resid, v_resid;
	uint32_t v_start;
	uint32_t reserved;
};

/* Host mirror of one layer of one sequence: tokens, and how many of them
 * have their Keys / Values in the pages. */
struct rt_len {
	uint32_t tokens, k_quant, v_quant;
};

/* The residual slots of a batch, in the engine's memory. */
struct rt_slots {
	uint32_t cap;
	uint32_t k_stride, v_stride; /* rows per (slot, head) */
	void **k_resid, **v_resid; /* [layers] */
	struct rt_dev_len **lens; /* [layers] -> [cap] */
	int32_t **table; /* [layers] -> [cap][max_pages] */
	void *scratch; /* the engine's per-batch scratch */
};

struct kvs_rt;

/* What a device does.  Ops on a range of slots [first, first + count) of
 * @s run for those sequences alone.  Errors are 0 or negative. */
struct rt_engine_ops {
	const char *name;
	enum kvs_rt_device device;
	int (*init)(struct kvs_rt *rt); /* pool, streams, scratch */
	void (*fini)(struct kvs_rt *rt);
	/* The per-layer memory of @s (cap, strides and the zeroed arrays of
	 * pointers are set); on failure slots_fini runs on what was set. */
	int (*slots_init)(struct kvs_rt *rt, struct rt_slots *s);
	void (*slots_fini)(struct kvs_rt *rt, struct rt_slots *s);
	/* Slot @from's state (all layers) to slot @to. */
	int (*slot_copy)(struct kvs_rt *rt, struct rt_slots *s, uint32_t from,
			 uint32_t to);
	/* Lengths of slot @i in @layer, and page table entries [0, n). */
	int (*slot_set)(struct kvs_rt *rt, struct rt_slots *s, uint32_t i,
			uint32_t layer, const struct rt_dev_len *len,
			const int32_t *pages, uint32_t n);
	/* 0 if q (may be NULL), k and v of @count tokens are fit to use. */
	int (*check)(struct kvs_rt *rt, uint32_t count, const void *q,
		     const void *k, const void *v);
	int (*append)(struct kvs_rt *rt, struct rt_slots *s, uint32_t first,
		      uint32_t count, uint32_t layer, const void *k,
		      const void *v);
	int (*attend)(struct kvs_rt *rt, struct rt_slots *s, uint32_t first,
		      uint32_t count, uint32_t layer, const void *q, void *out,
		      uint32_t max_tokens);
	/* Seals the full Key residual of slots first + which[j] into
	 * pages[j], j < n. */
	int (*seal)(struct kvs_rt *rt, struct rt_slots *s, uint32_t first,
		    uint32_t layer, const int32_t *which, const int32_t *pages,
		    uint32_t n);
	int (*pop)(struct kvs_rt *rt, struct rt_slots *s, uint32_t first,
		   uint32_t count, uint32_t layer);
	/*
	 * Prefill of an empty slot residual straight from [kv][n][D] inputs:
	 * seal tokens [0, blocks * R) into pages[0..blocks), Key rows
	 * [blocks * R, n) to the Key residual, Value rows [n - r_v, n) to
	 * the FIFO, page table entries from @first_page, lengths @len.
	 */
	int (*prefill)(struct kvs_rt *rt, struct rt_slots *s, uint32_t i,
		       uint32_t layer, const void *k, const void *v, uint32_t n,
		       const int32_t *pages, uint32_t blocks,
		       uint32_t first_page, const struct rt_dev_len *len);
	/* Token @t of [kv][n][D] inputs into the engine's row buffers; the
	 * returned pointers stay valid until the next call. */
	int (*token)(struct kvs_rt *rt, const void *k, const void *v,
		     uint32_t n, uint32_t t, const void **k_row,
		     const void **v_row);
	/* Residual rows of slot @i, @layer as fp32 host [kv][r][D]. */
	int (*resid_read)(struct kvs_rt *rt, struct rt_slots *s, uint32_t i,
			  uint32_t layer, float *k, uint32_t r_k, float *v,
			  uint32_t r_v);
	/* Writes rows (fp32 host, values of kv_dtype) as the Key residual and
	 * the FIFO from row 0; lengths are slot_set's. */
	int (*resid_write)(struct kvs_rt *rt, struct rt_slots *s, uint32_t i,
			   uint32_t layer, const float *k, uint32_t r_k,
			   const float *v, uint32_t r_v);
	/* Sections of an opened block into pool page @page (fetch thread,
	 * copy stream). */
	int (*page_write)(struct kvs_rt *rt, int32_t page,
			  const struct kvs_view *view, const uint8_t *obj,
			  size_t len);
	/* Page @page into a host image at the canonical offsets (publish
	 * thread; after the mark of the step that sealed it). */
	int (*page_read)(struct kvs_rt *rt, int32_t page, uint8_t *image);
	/* Dequantized pages into [n][kv][S][D] of @dtype, engine memory. */
	int (*history)(struct kvs_rt *rt, const int32_t *pages, uint32_t n,
		       enum kvs_dtype dtype, void *k, void *v);
	/* Marks: a point in the step stream (@copy: the fetch thread's copy
	 * stream); wait (host), join (the step stream waits), free. */
	int (*mark)(struct kvs_rt *rt, bool copy, void **out);
	int (*mark_wait)(struct kvs_rt *rt, void *mark);
	int (*mark_join)(struct kvs_rt *rt, void *mark);
	void (*mark_free)(struct kvs_rt *rt, void *mark);
	/* Waits for the step stream; reports a failed device seal. */
	int (*sync)(struct kvs_rt *rt);
	/* Host staging memory for the store threads (pinned with CUDA). */
	void *(*host_alloc)(struct kvs_rt *rt, size_t n);
	void (*host_free)(struct kvs_rt *rt, void *p);
	/* Called first on each of the runtime's threads. */
	void (*thread_init)(struct kvs_rt *rt);
};

extern const struct rt_engine_ops rt_engine_cpu;
/* NULL when not built with CUDA. */
const struct rt_engine_ops *rt_engine_cuda(void);

/* ---- page pool --------------------------------------------------------- */

struct rt_pool {
	pthread_mutex_t lock;
	uint32_t pages, free_count;
	int32_t *free_list;
	uint32_t *refs;
	uint8_t *base; /* engine memory */
};

/* Takes @n pages (one reference each) into @out, or -ENOSPC. */
int rt_pool_take(struct kvs_rt *rt, uint32_t n, int32_t *out);
/* The same into a malloc'd *@out (NULL when @n is 0; free() it). */
int rt_pool_take_array(struct kvs_rt *rt, uint32_t n, int32_t **out);
void rt_pool_ref(struct kvs_rt *rt, int32_t page);
void rt_pool_put(struct kvs_rt *rt, int32_t page);

/* ---- threads ------------------------------------------------------------ */

struct rt_job {
	struct rt_job *next;
	void (*run)(struct kvs_rt *rt, struct rt_job *job);
};

struct rt_worker {
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t wake, idle;
	struct rt_job *head, *tail;
	bool busy, stop, started;
	const char *name;
	struct kvs_rt *rt;
};

/* The job runs (and frees itself) on the worker's thread. */
void rt_worker_queue(struct kvs_rt *rt, struct rt_worker *w,
		     struct rt_job *job);
/* Waits until the worker's queue is empty and it is idle. */
void rt_worker_drain(struct rt_worker *w);

/* ---- the runtime --------------------------------------------------------- */

struct rt_key_set; /* published (span id, layer) keys */

struct kvs_rt {
	struct kvs_rt_config cfg; /* strings point at the copies below */
	char *model_id, *name_space;
	uint8_t model_fp[KVS_ID_SIZE];
	const struct rt_engine_ops *eng;
	void *eng_state;
	struct kvs_layout layout; /* of one block */
	uint64_t page_stride; /* bytes, multiple of 256 */
	uint32_t max_pages; /* per sequence and layer */
	struct rt_pool pool;
	struct kvs_blockstore *store;
	struct rt_worker publisher, fetcher;
	/* the fetch thread's two staging sets (attach.c), host memory of
	 * the engine (pinned with CUDA) of staging_cap bytes each */
	uint8_t *staging[2];
	size_t staging_cap;
	pthread_mutex_t lock; /* stats, published keys, publish_error */
	struct kvs_rt_stats stats;
	struct rt_key_set *published;
	int publish_error;
	struct kvs_batch *batches; /* live ones, destroyed with the runtime */
};

void rt_count(struct kvs_rt *rt, uint64_t *counter, uint64_t n);

/* ---- batch and sequence ---------------------------------------------------
 */

struct kvs_batch {
	struct kvs_rt *rt;
	struct kvs_batch *prev, *next; /* the runtime's list */
	uint32_t cap, n;
	struct kvs_seq **seqs;
	struct rt_slots slots;
	int32_t *which, *pages; /* [cap] seal lists of a step */
};

enum rt_page_origin {
	RT_PAGE_SEALED = 0, /* sealed here, not yet published */
	RT_PAGE_STORE = 1, /* attached from the store, or published */
};

struct rt_layer {
	struct rt_len len;
	int32_t *pages; /* [max_pages] */
	uint8_t *origin; /* [max_pages] enum rt_page_origin */
	bool attach_used; /* the engine used the attached prefix */
};

struct rt_attach;

struct kvs_seq {
	struct kvs_batch *batch;
	uint32_t index;
	struct rt_layer *layer; /* [layers] */
	uint32_t *ids;
	size_t n_ids, ids_cap;
	uint8_t (*span_ids)[KVS_ID_SIZE]; /* [max_pages] */
	uint32_t n_span_ids; /* spans whose id is computed */
	struct rt_attach *attach; /* pending, or NULL */
};

/* Span ids of every whole span of the known ids (computed on demand);
 * returns how many there are. */
uint32_t rt_seq_span_ids(struct kvs_seq *seq);
/* The header ident of span @index of @layer (zero span id when its token
 * ids are not known). */
void rt_seq_ident(struct kvs_seq *seq, uint32_t layer, uint32_t index,
		  struct kvs_ident *ident);
/* Span ids of @ids[0 .. spans*S) into @out. */
int rt_span_ids(const struct kvs_rt *rt, const uint32_t *ids, uint32_t spans,
		uint8_t (*out)[KVS_ID_SIZE]);
/* Sets layer @layer of @seq to @len with the given residual lengths on the
 * device and its page table entries [0, n_pages). */
int rt_seq_layer_set(struct kvs_seq *seq, uint32_t layer,
		     const struct rt_len *len, uint32_t n_pages);
/* 0 when @layer of @seq may be used: a layer of the model, its part of a
 * pending attach in (-KVS_ENOTFOUND when it came up short). */
int rt_seq_layer_ready(struct kvs_seq *seq, uint32_t layer);
/* Returns every page of every layer to the pool; lengths to zero. */
void rt_seq_clear(struct kvs_seq *seq);

/* attach.c: waits for and frees a pending attach (destroy, reset). */
void rt_attach_cancel(struct kvs_seq *seq);
/* attach.c: fetch @spans spans of every layer for @seq (ids known) into
 * freshly taken pages; the fetch thread fills them. */
int rt_attach_start(struct kvs_seq *seq, uint32_t spans);

/* publish.c */
struct rt_key_set *rt_key_set_create(void);
void rt_key_set_destroy(struct rt_key_set *set);

#endif
