/*
 * fuzz_decode.c - libFuzzer target for the kvformat decoder.
 *
 * Each input is validated with kvs_header_decode and kvs_object_open; an
 * accepted object is read the way its users read it (dequantized when it
 * is a block, every residual element loaded when it is a tail), so any
 * bounds mistake in the parser shows up under the sanitizers.  Oracles
 * beyond "no crash": verify and open agree, the header decode agrees with
 * open, and an object accepted with checksums on re-encodes with LZ4 into
 * an object that opens to the same logical bytes.
 */
#include <stdlib.h>
#include <string.h>

#include "fuzz_target.h"
#include "kvstash/kvformat.h"

/* Dequantize at most this many elements (the shape allows 2^30). */
#define FUZZ_MAX_ELEMENTS (1u << 22)

static void read_block(const struct kvs_view *view)
{
	const struct kvs_shape *sh = &view->hdr.shape;
	size_t n = (size_t)sh->kv_heads * sh->span * sh->head_dim;
	float *keys, *values;

	if (n > FUZZ_MAX_ELEMENTS)
		return;
	keys = malloc(n * sizeof(float));
	values = malloc(n * sizeof(float));
	if (keys == NULL || values == NULL)
		abort();
	if (kvs_block_dequantize(view, keys, values) != 0)
		abort();
	/* The accessors agree with the bulk path on the last element. */
	if (kvs_block_key(view, sh->kv_heads - 1, sh->span - 1,
			  sh->head_dim - 1) != keys[n - 1] &&
	    keys[n - 1] == keys[n - 1])
		abort();
	free(keys);
	free(values);
}

static void read_tail(const struct kvs_view *view)
{
	enum kvs_dtype t = (enum kvs_dtype)view->hdr.tail_dtype;
	size_t f = kvs_dtype_size(t);
	volatile float sink = 0.0f;

	if (f == 0)
		abort();
	for (int s = 0; s < KVS_TAIL_SECTIONS; s++)
		for (size_t i = 0; i < view->hdr.section[s].logical_len / f;
		     i++)
			sink += kvs_dtype_load(t, view->section[s], i);
	(void)sink;
}

/* LZ4 re-encoding of an accepted object must open to the same bytes. */
static void check_recompress(const uint8_t *obj, size_t len,
			     const struct kvs_view *view)
{
	struct kvs_view again;
	uint8_t *packed;
	size_t packed_len;

	if (kvs_object_compress(obj, len, &packed, &packed_len) != 0)
		return;
	if (kvs_object_open(packed, packed_len, 0, &again) != 0)
		abort();
	if (again.hdr.section_count != view->hdr.section_count)
		abort();
	for (uint32_t i = 0; i < view->hdr.section_count; i++)
		if (again.hdr.section[i].logical_len !=
			    view->hdr.section[i].logical_len ||
		    memcmp(again.section[i], view->section[i],
			   view->hdr.section[i].logical_len) != 0)
			abort();
	kvs_view_release(&again);
	free(packed);
}

static int headers_agree(const struct kvs_header *a, const struct kvs_header *b)
{
	if (a->kind != b->kind || a->total_size != b->total_size ||
	    a->section_count != b->section_count || a->tokens != b->tokens ||
	    a->shape.span != b->shape.span ||
	    a->shape.kv_heads != b->shape.kv_heads ||
	    a->shape.head_dim != b->shape.head_dim)
		return 0;
	for (uint32_t i = 0; i < a->section_count; i++)
		if (a->section[i].offset != b->section[i].offset ||
		    a->section[i].stored_len != b->section[i].stored_len ||
		    a->section[i].logical_len != b->section[i].logical_len ||
		    a->section[i].checksum != b->section[i].checksum)
			return 0;
	return 1;
}

int kvs_fuzz_target_run(const uint8_t *data, size_t size)
{
	struct kvs_header hdr;
	struct kvs_view view;
	unsigned flags;
	uint8_t *obj;
	size_t len;
	int hrc, rc;

	if (size < 1)
		return -1;
	flags = data[0] & 1u ? KVS_VERIFY_NO_CHECKSUMS : 0;
	len = size - 1;
	/* A private copy of exactly @len bytes, aligned like a real buffer. */
	obj = malloc(len ? len : 1);
	if (obj == NULL)
		abort();
	memcpy(obj, data + 1, len);
	hrc = kvs_header_decode(obj, len, flags, &hdr);
	rc = kvs_object_open(obj, len, flags, &view);
	if (kvs_object_verify(obj, len, flags) != rc)
		abort();
	/* Open runs the header checks first: same verdict up to there. */
	if (hrc != 0 && rc != hrc)
		abort();
	if (rc == 0) {
		if (!headers_agree(&hdr, &view.hdr))
			abort();
		if (view.hdr.kind == KVS_KIND_BLOCK)
			read_block(&view);
		else
			read_tail(&view);
		if (flags == 0)
			check_recompress(obj, len, &view);
		kvs_view_release(&view);
	}
	free(obj);
	return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	kvs_fuzz_target_run(data, size);
	return 0;
}
