/*
 * fuzz_proto.c - libFuzzer target for the request decoder of the wire
 * protocol (transport/proto.h, docs/PROTOCOL.md).
 *
 * Input: a 2-byte little-endian frame length, the frame (header and
 * body, as a UCX active message header carries it), then the payload.
 * The frame is decoded and checked as a server checks a request; an
 * accepted request is then read the way the server's handlers read it
 * (every key, every put length, the hello's tenant, the lookup's layers
 * and span ids), so a length the checks let through that a handler would
 * overrun shows up under the sanitizers.  Oracles beyond "no crash": the
 * decoded header re-encodes to the same 32 bytes, and the put lengths add
 * up to the payload.
 */
#include <stdlib.h>
#include <string.h>

#include "common/bytes.h"
#include "fuzz_target.h"
#include "kvstash/error.h"
#include "transport/proto.h"

static const struct kvs_proto_limits limits = {
	.max_batch = 256,
	.max_object = 1u << 20,
	.max_payload = 16u << 20,
};

/* Reads what a handler of @f reads; returns a sum so nothing is elided. */
static uint64_t consume(const struct kvs_proto_frame *f, const uint8_t *pay,
			size_t pay_len)
{
	uint64_t sink = 0;
	struct kvs_proto_key k;

	switch (f->opcode) {
	case KVS_OP_HELLO:
		sink += kvs_get16(f->body);
		for (unsigned i = 0; i < kvs_get16(f->body); i++)
			sink += f->body[4 + i];
		break;
	case KVS_OP_AUTH:
	case KVS_OP_TAIL_TAKE:
		for (uint32_t i = 0; i < f->body_len; i++)
			sink += f->body[i];
		break;
	case KVS_OP_LOOKUP: {
		uint32_t n_layers = kvs_get32(f->body);

		for (uint32_t i = 0; i < n_layers; i++)
			sink += kvs_get32(pay + (size_t)i * 4);
		for (uint32_t i = 0; i < f->count; i++)
			sink += pay[(size_t)n_layers * 4 +
				    (size_t)i * KVS_ID_SIZE + KVS_ID_SIZE - 1];
		break;
	}
	case KVS_OP_EXISTS:
	case KVS_OP_GET:
	case KVS_OP_DELETE:
		for (uint32_t i = 0; i < f->count; i++) {
			if (kvs_proto_key_decode(
				    pay + (size_t)i * KVS_PROTO_KEY_SIZE, &k))
				abort(); /* the check let bad reserved bytes by
					  */
			sink += k.layer + k.span_id[31];
		}
		break;
	case KVS_OP_PUT: {
		uint64_t off = 0;

		for (uint32_t i = 0; i < f->count; i++) {
			uint32_t len = kvs_proto_item_value(
				f->body + (size_t)i * KVS_PROTO_ITEM_SIZE);

			sink += pay[off] + pay[off + len - 1];
			off += len;
		}
		if (off != pay_len || off != kvs_proto_put_total(f))
			abort();
		break;
	}
	case KVS_OP_TAIL_PUT:
		sink += pay[0] + pay[pay_len - 1];
		break;
	default:
		break;
	}
	return sink;
}

int kvs_fuzz_target_run(const uint8_t *data, size_t size)
{
	struct kvs_proto_frame f;
	uint8_t again[KVS_PROTO_HEADER_SIZE];
	volatile uint64_t sink;
	size_t frame_len;
	uint8_t *frame, *payload;
	int err;

	if (size < 2)
		return -KVS_ETRUNC;
	frame_len = kvs_get16(data);
	if (frame_len > size - 2)
		return -KVS_ETRUNC;
	/* exact-size copies, so any overrun reads past an allocation */
	frame = malloc(frame_len ? frame_len : 1);
	payload = malloc(size - 2 - frame_len ? size - 2 - frame_len : 1);
	if (!frame || !payload)
		abort();
	memcpy(frame, data + 2, frame_len);
	memcpy(payload, data + 2 + frame_len, size - 2 - frame_len);
	err = kvs_proto_frame_decode(frame, frame_len, &f);
	if (!err) {
		kvs_proto_header_encode(&f, again);
		if (memcmp(again, frame, KVS_PROTO_HEADER_SIZE) != 0)
			abort();
		err = kvs_proto_request_check(&f, size - 2 - frame_len,
					      &limits);
	}
	if (!err)
		err = kvs_proto_payload_check(&f, payload,
					      size - 2 - frame_len);
	if (!err)
		sink = consume(&f, payload, size - 2 - frame_len);
	(void)sink;
	free(frame);
	free(payload);
	return err;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	kvs_fuzz_target_run(data, size);
	return 0;
}
