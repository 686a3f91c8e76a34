/*
 * proto.c - encoding and validation of the wire protocol's frames
 * (transport/proto.h, docs/PROTOCOL.md) and the authentication proof.
 *
 * The decoders take untrusted bytes: every length is checked against what
 * was received before anything is read, in the order magic, version,
 * lengths, opcode rules.  The server serves a request only after
 * kvs_proto_request_check() passed it, so the request handlers need no
 * length checks of their own.
 */
#include <string.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "common/bytes.h"
#include "kvstash/error.h"
#include "proto.h"

static const char *const opcode_names[KVS_OP_COUNT] = {
	[KVS_OP_HELLO] = "hello",	[KVS_OP_AUTH] = "auth",
	[KVS_OP_LOOKUP] = "lookup",	[KVS_OP_EXISTS] = "exists",
	[KVS_OP_GET] = "get",		[KVS_OP_PUT] = "put",
	[KVS_OP_DELETE] = "delete",	[KVS_OP_STAT] = "stat",
	[KVS_OP_TAIL_PUT] = "tail_put", [KVS_OP_TAIL_TAKE] = "tail_take",
};

const char *kvs_proto_opcode_name(unsigned opcode)
{
	if (opcode == KVS_OP_ERROR)
		return "error";
	opcode &= ~(unsigned)KVS_OP_REPLY;
	if (opcode == 0 || opcode >= KVS_OP_COUNT)
		return "unknown";
	return opcode_names[opcode];
}

void kvs_proto_header_encode(const struct kvs_proto_frame *f, uint8_t *out)
{
	kvs_put32(out + KVS_PROTO_OFF_MAGIC, KVS_PROTO_MAGIC);
	kvs_put16(out + KVS_PROTO_OFF_VERSION, f->version);
	kvs_put16(out + KVS_PROTO_OFF_OPCODE, f->opcode);
	kvs_put64(out + KVS_PROTO_OFF_REQ_ID, f->req_id);
	kvs_put32(out + KVS_PROTO_OFF_STATUS, (uint32_t)f->status);
	kvs_put32(out + KVS_PROTO_OFF_COUNT, f->count);
	kvs_put32(out + KVS_PROTO_OFF_BODY_LEN, f->body_len);
	kvs_put32(out + KVS_PROTO_OFF_FLAGS, f->flags);
}

int kvs_proto_frame_decode(const uint8_t *buf, size_t len,
			   struct kvs_proto_frame *out)
{
	struct kvs_proto_frame f;

	if (len < KVS_PROTO_HEADER_SIZE)
		return -KVS_ETRUNC;
	if (kvs_get32(buf + KVS_PROTO_OFF_MAGIC) != KVS_PROTO_MAGIC)
		return -KVS_EPROTO;
	f.version = kvs_get16(buf + KVS_PROTO_OFF_VERSION);
	if (f.version != KVS_PROTO_VERSION)
		return -KVS_EVERSION;
	f.opcode = kvs_get16(buf + KVS_PROTO_OFF_OPCODE);
	f.req_id = kvs_get64(buf + KVS_PROTO_OFF_REQ_ID);
	f.status = (int32_t)kvs_get32(buf + KVS_PROTO_OFF_STATUS);
	f.count = kvs_get32(buf + KVS_PROTO_OFF_COUNT);
	f.body_len = kvs_get32(buf + KVS_PROTO_OFF_BODY_LEN);
	f.flags = kvs_get32(buf + KVS_PROTO_OFF_FLAGS);
	if (f.body_len > KVS_PROTO_MAX_BODY ||
	    f.body_len != len - KVS_PROTO_HEADER_SIZE)
		return -KVS_EPROTO;
	f.body = buf + KVS_PROTO_HEADER_SIZE;
	*out = f;
	return 0;
}

void kvs_proto_key_encode(const struct kvs_proto_key *k, uint8_t *out)
{
	memcpy(out, k->span_id, KVS_ID_SIZE);
	kvs_put32(out + KVS_ID_SIZE, k->layer);
	kvs_put32(out + KVS_ID_SIZE + 4, 0);
}

int kvs_proto_key_decode(const uint8_t *in, struct kvs_proto_key *out)
{
	if (kvs_get32(in + KVS_ID_SIZE + 4) != 0)
		return -KVS_EPROTO;
	memcpy(out->span_id, in, KVS_ID_SIZE);
	out->layer = kvs_get32(in + KVS_ID_SIZE);
	return 0;
}

uint32_t kvs_proto_item_value(const uint8_t *in)
{
	return kvs_get32(in);
}

uint64_t kvs_proto_put_total(const struct kvs_proto_frame *f)
{
	uint64_t total = 0;

	for (uint32_t i = 0; i < f->count; i++)
		total += kvs_get32(f->body + (size_t)i * KVS_PROTO_ITEM_SIZE);
	return total;
}

/* Keys in a payload: reserved bytes zero. */
static int keys_check(const struct kvs_proto_frame *f, uint64_t payload_len)
{
	if (f->body_len != 0 ||
	    payload_len != (uint64_t)f->count * KVS_PROTO_KEY_SIZE)
		return -KVS_EPROTO;
	return 0;
}

static int batch_check(const struct kvs_proto_frame *f,
		       const struct kvs_proto_limits *lim)
{
	if (f->count == 0)
		return -KVS_EPROTO;
	if (f->count > lim->max_batch || f->count > KVS_PROTO_BATCH_CEILING)
		return -KVS_EBATCH;
	return 0;
}

static int put_check(const struct kvs_proto_frame *f, uint64_t payload_len,
		     const struct kvs_proto_limits *lim)
{
	uint64_t total = 0;
	int err = batch_check(f, lim);

	if (err)
		return err;
	if (f->flags > 2) /* enum kvs_durability */
		return -KVS_EPROTO;
	if (f->body_len != (uint64_t)f->count * KVS_PROTO_ITEM_SIZE)
		return -KVS_EPROTO;
	for (uint32_t i = 0; i < f->count; i++) {
		const uint8_t *item = f->body + (size_t)i * KVS_PROTO_ITEM_SIZE;
		uint32_t len = kvs_get32(item);

		if (kvs_get32(item + 4) != 0 || len < KVS_HEADER_SIZE)
			return -KVS_EPROTO;
		if (len > lim->max_object)
			return -KVS_ETOOBIG;
		total += len;
	}
	return total == payload_len ? 0 : -KVS_EPROTO;
}

static int lookup_check(const struct kvs_proto_frame *f, uint64_t payload_len)
{
	uint32_t n_layers;

	if (f->count == 0 || f->body_len != 8)
		return -KVS_EPROTO;
	if (f->count > KVS_PROTO_CHAIN_MAX)
		return -KVS_EBATCH;
	n_layers = kvs_get32(f->body);
	if (kvs_get32(f->body + 4) != 0 || n_layers == 0 ||
	    n_layers > KVS_PROTO_LAYERS_MAX)
		return -KVS_EPROTO;
	if (payload_len !=
	    (uint64_t)n_layers * 4 + (uint64_t)f->count * KVS_ID_SIZE)
		return -KVS_EPROTO;
	return 0;
}

static int tail_put_check(const struct kvs_proto_frame *f, uint64_t payload_len,
			  const struct kvs_proto_limits *lim)
{
	uint32_t len;

	if (f->count != 1 || f->body_len != KVS_PROTO_TAIL_PUT_SIZE)
		return -KVS_EPROTO;
	len = kvs_get32(f->body + KVS_PROTO_REQID_SIZE + 4);
	if (len < KVS_HEADER_SIZE || len != payload_len)
		return -KVS_EPROTO;
	return len > lim->max_object ? -KVS_ETOOBIG : 0;
}

int kvs_proto_request_check(const struct kvs_proto_frame *f,
			    uint64_t payload_len,
			    const struct kvs_proto_limits *lim)
{
	int err;

	if (f->opcode == 0 || f->opcode >= KVS_OP_COUNT)
		return -KVS_EOPCODE;
	if (f->status != 0)
		return -KVS_EPROTO;
	if (payload_len > lim->max_payload)
		return -KVS_ETOOBIG;
	switch (f->opcode) {
	case KVS_OP_HELLO: {
		uint16_t tlen;

		if (f->body_len < 4 || payload_len != 0)
			return -KVS_EPROTO;
		tlen = kvs_get16(f->body);
		if (kvs_get16(f->body + 2) != 0 || tlen == 0 ||
		    tlen > KVS_PROTO_TENANT_MAX || f->body_len != 4u + tlen ||
		    memchr(f->body + 4, '\0', tlen))
			return -KVS_EPROTO;
		return 0;
	}
	case KVS_OP_AUTH:
		return f->body_len == KVS_PROTO_MAC_SIZE && payload_len == 0
			       ? 0
			       : -KVS_EPROTO;
	case KVS_OP_LOOKUP:
		return lookup_check(f, payload_len);
	case KVS_OP_DELETE:
		if (f->flags > 2) /* enum kvs_durability */
			return -KVS_EPROTO;
		/* fall through */
	case KVS_OP_EXISTS:
	case KVS_OP_GET:
		err = batch_check(f, lim);
		return err ? err : keys_check(f, payload_len);
	case KVS_OP_PUT:
		return put_check(f, payload_len, lim);
	case KVS_OP_STAT:
		return f->body_len == 0 && payload_len == 0 ? 0 : -KVS_EPROTO;
	case KVS_OP_TAIL_PUT:
		return tail_put_check(f, payload_len, lim);
	case KVS_OP_TAIL_TAKE:
		return f->body_len == KVS_PROTO_REQID_SIZE && payload_len == 0
			       ? 0
			       : -KVS_EPROTO;
	}
	return -KVS_EOPCODE;
}

int kvs_proto_payload_check(const struct kvs_proto_frame *f,
			    const uint8_t *payload, uint64_t payload_len)
{
	struct kvs_proto_key k;

	if (f->opcode != KVS_OP_EXISTS && f->opcode != KVS_OP_GET &&
	    f->opcode != KVS_OP_DELETE)
		return 0;
	for (uint64_t off = 0; off + KVS_PROTO_KEY_SIZE <= payload_len;
	     off += KVS_PROTO_KEY_SIZE)
		if (kvs_proto_key_decode(payload + off, &k))
			return -KVS_EPROTO;
	return 0;
}

int kvs_proto_reply_check(const struct kvs_proto_frame *f, unsigned opcode,
			  uint32_t count, uint64_t payload_len)
{
	uint64_t total = 0;

	if (f->opcode == KVS_OP_ERROR || f->status < 0)
		return 0;
	if (f->opcode != (opcode | KVS_OP_REPLY))
		return -KVS_EPROTO;
	switch (opcode) {
	case KVS_OP_HELLO:
		return f->body_len == KVS_PROTO_HELLO_REPLY_SIZE ? 0
								 : -KVS_EPROTO;
	case KVS_OP_LOOKUP:
		return f->body_len == 8 && kvs_get32(f->body) <= count
			       ? 0
			       : -KVS_EPROTO;
	case KVS_OP_EXISTS:
		return f->count == count && f->body_len == count ? 0
								 : -KVS_EPROTO;
	case KVS_OP_GET:
		if (f->count != count ||
		    f->body_len != (uint64_t)count * KVS_PROTO_ITEM_SIZE)
			return -KVS_EPROTO;
		for (uint32_t i = 0; i < count; i++) {
			const uint8_t *it =
				f->body + (size_t)i * KVS_PROTO_ITEM_SIZE;

			if ((int32_t)kvs_get32(it) == 0)
				total += kvs_get32(it + 4);
			else if (kvs_get32(it + 4) != 0)
				return -KVS_EPROTO;
		}
		return total == payload_len ? 0 : -KVS_EPROTO;
	case KVS_OP_PUT:
	case KVS_OP_DELETE:
		return f->count == count && f->body_len ==
						    (uint64_t)count *
							    KVS_PROTO_ITEM_SIZE
			       ? 0
			       : -KVS_EPROTO;
	case KVS_OP_STAT:
		return f->count <= KVS_PROTO_STAT_MAX &&
				       f->body_len == (uint64_t)f->count * 8
			       ? 0
			       : -KVS_EPROTO;
	case KVS_OP_TAIL_TAKE:
		return f->body_len == 8 && kvs_get32(f->body) == payload_len
			       ? 0
			       : -KVS_EPROTO;
	default:
		return 0;
	}
}

int kvs_proto_auth_mac(const uint8_t *key, size_t key_len,
		       const uint8_t nonce[KVS_PROTO_NONCE_SIZE],
		       const char *tenant, uint8_t mac[KVS_PROTO_MAC_SIZE])
{
	static const char label[] = "kvstash-auth-v1";
	uint8_t msg[sizeof(label) + KVS_PROTO_NONCE_SIZE +
		    KVS_PROTO_TENANT_MAX];
	size_t tlen = strlen(tenant), n = 0;
	unsigned out_len = 0;

	if (tlen > KVS_PROTO_TENANT_MAX)
		return -KVS_EPARAM;
	memcpy(msg, label, sizeof(label)); /* with its NUL: a separator */
	n += sizeof(label);
	memcpy(msg + n, nonce, KVS_PROTO_NONCE_SIZE);
	n += KVS_PROTO_NONCE_SIZE;
	memcpy(msg + n, tenant, tlen);
	n += tlen;
	if (!HMAC(EVP_sha256(), key, (int)key_len, msg, n, mac, &out_len) ||
	    out_len != KVS_PROTO_MAC_SIZE)
		return -KVS_EPARAM;
	return 0;
}
