/*
 * ident.c - block identity: the model fingerprint and span ids, SHA-256
 * over canonical little-endian encodings (OpenSSL libcrypto).  A fast
 * non-cryptographic hash is not used for ids: crafted collisions would
 * poison a shared cache.  Every variable-length field is length-prefixed
 * and each digest starts with a domain tag, so no two different inputs
 * share an encoding.
 */
#include <errno.h>
#include <openssl/evp.h>
#include <string.h>

#include "format_internal.h"
#include "kvstash/kvformat.h"
#include "kvstash/log.h"

static int digest_update(EVP_MD_CTX *ctx, const void *p, size_t n)
{
	return EVP_DigestUpdate(ctx, p, n) == 1 ? 0 : -EIO;
}

static int digest_u32(EVP_MD_CTX *ctx, uint32_t v)
{
	uint8_t b[4];

	kvs_put32(b, v);
	return digest_update(ctx, b, sizeof(b));
}

static int digest_bytes(EVP_MD_CTX *ctx, const void *p, uint32_t n)
{
	int rc = digest_u32(ctx, n);

	return rc ? rc : digest_update(ctx, p, n);
}

static EVP_MD_CTX *digest_begin(const char *tag)
{
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();

	if (ctx == NULL)
		return NULL;
	if (EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1 ||
	    digest_update(ctx, tag, strlen(tag) + 1) != 0) {
		EVP_MD_CTX_free(ctx);
		return NULL;
	}
	return ctx;
}

static int digest_end(EVP_MD_CTX *ctx, int rc, uint8_t out[KVS_ID_SIZE])
{
	uint8_t md[EVP_MAX_MD_SIZE];
	unsigned int n = 0;

	if (rc == 0 &&
	    (EVP_DigestFinal_ex(ctx, md, &n) != 1 || n != KVS_ID_SIZE))
		rc = -EIO;
	EVP_MD_CTX_free(ctx);
	if (rc < 0) {
		kvs_log(KVS_LOG_ERR, "SHA-256 failed");
		return rc;
	}
	memcpy(out, md, KVS_ID_SIZE);
	return 0;
}

int kvs_model_fingerprint(const struct kvs_model_desc *desc,
			  uint8_t out[KVS_ID_SIZE])
{
	const char *model = desc->model_id ? desc->model_id : "";
	const struct kvs_shape *s = &desc->shape;
	uint8_t fields[24];
	EVP_MD_CTX *ctx;
	int rc;

	if (kvs_shape_check(s) < 0 || kvs_dtype_size(desc->kv_dtype) == 0)
		return -KVS_EPARAM;
	ctx = digest_begin("kvstash model v1");
	if (ctx == NULL)
		return digest_end(NULL, -ENOMEM, out);
	kvs_put32(fields + 0, desc->layers);
	kvs_put16(fields + 4, s->kv_heads);
	kvs_put16(fields + 6, s->head_dim);
	kvs_put16(fields + 8, s->group);
	fields[10] = s->bits;
	fields[11] = s->meta_type;
	kvs_put32(fields + 12, s->span);
	kvs_put32(fields + 16, s->residual);
	fields[20] = (uint8_t)desc->kv_dtype;
	fields[21] = desc->layout ? desc->layout : KVS_LAYOUT_TOKEN_MAJOR;
	fields[22] = fields[23] = 0;
	rc = digest_bytes(ctx, model, (uint32_t)strlen(model));
	if (rc == 0)
		rc = digest_update(ctx, fields, sizeof(fields));
	return digest_end(ctx, rc, out);
}

int kvs_span_id(const char *ns, const uint8_t model_fp[KVS_ID_SIZE],
		const uint8_t *parent, const uint32_t *tokens, size_t n,
		uint8_t out[KVS_ID_SIZE])
{
	static const uint8_t root[KVS_ID_SIZE];
	EVP_MD_CTX *ctx;
	int rc;

	if (ns == NULL)
		ns = "";
	if (n > UINT32_MAX || (n && tokens == NULL))
		return -KVS_EPARAM;
	ctx = digest_begin("kvstash span v1");
	if (ctx == NULL)
		return digest_end(NULL, -ENOMEM, out);
	rc = digest_bytes(ctx, ns, (uint32_t)strlen(ns));
	if (rc == 0)
		rc = digest_update(ctx, model_fp, KVS_ID_SIZE);
	if (rc == 0)
		rc = digest_update(ctx, parent ? parent : root, KVS_ID_SIZE);
	if (rc == 0)
		rc = digest_u32(ctx, (uint32_t)n);
	for (size_t i = 0; rc == 0 && i < n; i++)
		rc = digest_u32(ctx, tokens[i]);
	return digest_end(ctx, rc, out);
}

void kvs_id_to_hex(const uint8_t id[KVS_ID_SIZE], char out[65])
{
	static const char digits[] = "0123456789abcdef";

	for (int i = 0; i < KVS_ID_SIZE; i++) {
		out[2 * i] = digits[id[i] >> 4];
		out[2 * i + 1] = digits[id[i] & 15];
	}
	out[64] = '\0';
}

static int hex_digit(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

int kvs_id_from_hex(const char *hex, uint8_t out[KVS_ID_SIZE])
{
	uint8_t id[KVS_ID_SIZE];

	if (strlen(hex) != 2 * KVS_ID_SIZE)
		return -KVS_EPARAM;
	for (int i = 0; i < KVS_ID_SIZE; i++) {
		int hi = hex_digit(hex[2 * i]), lo = hex_digit(hex[2 * i + 1]);

		if (hi < 0 || lo < 0)
			return -KVS_EPARAM;
		id[i] = (uint8_t)(hi << 4 | lo);
	}
	memcpy(out, id, KVS_ID_SIZE);
	return 0;
}
