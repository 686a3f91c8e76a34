/*
 * compress.c - LZ4 re-encoding of an object, section by section.  A
 * section keeps LZ4 only where the compressed form is strictly smaller;
 * 2-bit codes are close to random and usually stay raw, while metadata of
 * constant groups and residual tails often shrink.
 */
#include <errno.h>
#include <lz4.h>
#include <stdlib.h>
#include <string.h>

#include "format_internal.h"
#include "kvstash/kvformat.h"
#include "kvstash/log.h"

int kvs_object_compress(const uint8_t *obj, size_t len, uint8_t **out,
			size_t *out_len)
{
	struct kvs_header hdr;
	uint8_t *packed[KVS_SECTION_MAX] = { 0 };
	uint8_t *image = NULL;
	uint32_t at = KVS_HEADER_SIZE;
	int rc = kvs_header_decode(obj, len, 0, &hdr);

	if (rc < 0)
		return rc;
	for (uint32_t i = 0; i < hdr.section_count; i++) {
		struct kvs_section *s = &hdr.section[i];
		int bound, got;

		if (s->codec != KVS_CODEC_RAW) /* already compressed: keep */
			continue;
		bound = LZ4_compressBound((int)s->logical_len);
		packed[i] = malloc((size_t)bound);
		if (packed[i] == NULL) {
			rc = -ENOMEM;
			goto out_free;
		}
		got = LZ4_compress_default((const char *)obj + s->offset,
					   (char *)packed[i],
					   (int)s->logical_len, bound);
		if (got <= 0 || (uint32_t)got >= s->logical_len) {
			free(packed[i]);
			packed[i] = NULL;
			continue;
		}
		s->codec = KVS_CODEC_LZ4;
		s->stored_len = (uint32_t)got;
		hdr.flags |= KVS_FLAG_LZ4;
	}
	for (uint32_t i = 0; i < hdr.section_count; i++) {
		at = kvs_align_up(at, KVS_SECTION_ALIGN);
		at += hdr.section[i].stored_len;
	}
	image = calloc(1, at);
	if (image == NULL) {
		rc = -ENOMEM;
		goto out_free;
	}
	hdr.total_size = at;
	at = KVS_HEADER_SIZE;
	for (uint32_t i = 0; i < hdr.section_count; i++) {
		struct kvs_section *s = &hdr.section[i];
		const uint8_t *src = packed[i] ? packed[i] : obj + s->offset;

		at = kvs_align_up(at, KVS_SECTION_ALIGN);
		memcpy(image + at, src, s->stored_len);
		s->offset = at;
		s->checksum = kvs_xxh3(image + at, s->stored_len);
		at += s->stored_len;
	}
	kvs_header_write(&hdr, image);
	*out = image;
	*out_len = at;
out_free:
	for (uint32_t i = 0; i < KVS_SECTION_MAX; i++)
		free(packed[i]);
	return rc;
}
