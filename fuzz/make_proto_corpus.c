/*
 * make_proto_corpus.c - writes the seed corpus of fuzz_proto.c: one
 * accepted request of every opcode (ok-*) and one refused frame of each
 * kind the decoder tells apart (bad-*), in the target's input layout
 * (2-byte frame length, frame, payload).
 *
 * Usage: make_proto_corpus DIR
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/bytes.h"
#include "transport/proto.h"

struct seed {
	uint8_t frame[KVS_PROTO_MAX_FRAME];
	size_t frame_len;
	uint8_t payload[4096];
	size_t payload_len;
};

static void start(struct seed *s, uint16_t op, uint32_t count,
		  uint32_t body_len, uint32_t flags)
{
	struct kvs_proto_frame f = {
		.version = KVS_PROTO_VERSION,
		.opcode = op,
		.req_id = 7,
		.count = count,
		.body_len = body_len,
		.flags = flags,
	};

	memset(s, 0, sizeof(*s));
	kvs_proto_header_encode(&f, s->frame);
	s->frame_len = KVS_PROTO_HEADER_SIZE + body_len;
}

static void add_keys(struct seed *s, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		struct kvs_proto_key k = { .layer = i };

		memset(k.span_id, (int)(0x11 * (i + 1)), KVS_ID_SIZE);
		kvs_proto_key_encode(&k, s->payload + s->payload_len);
		s->payload_len += KVS_PROTO_KEY_SIZE;
	}
}

static int save(const char *dir, const char *name, const struct seed *s)
{
	char path[4096];
	uint8_t len[2];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "wb");
	if (!f)
		return -1;
	kvs_put16(len, (uint16_t)s->frame_len);
	fwrite(len, 1, 2, f);
	fwrite(s->frame, 1, s->frame_len, f);
	fwrite(s->payload, 1, s->payload_len, f);
	return fclose(f);
}

int main(int argc, char **argv)
{
	struct seed s;
	uint8_t *b = s.frame + KVS_PROTO_HEADER_SIZE;
	int err = 0;

	if (argc != 2) {
		fprintf(stderr, "usage: make_proto_corpus DIR\n");
		return 2;
	}
	start(&s, KVS_OP_HELLO, 0, 4 + 5, 0);
	kvs_put16(b, 5);
	memcpy(b + 4, "alice", 5);
	err |= save(argv[1], "ok-hello", &s);
	start(&s, KVS_OP_AUTH, 0, KVS_PROTO_MAC_SIZE, 0);
	memset(b, 0xab, KVS_PROTO_MAC_SIZE);
	err |= save(argv[1], "ok-auth", &s);
	start(&s, KVS_OP_LOOKUP, 3, 8, 0);
	kvs_put32(b, 2);
	kvs_put32(s.payload, 0);
	kvs_put32(s.payload + 4, 1);
	memset(s.payload + 8, 0x5a, 3 * KVS_ID_SIZE);
	s.payload_len = 8 + 3 * KVS_ID_SIZE;
	err |= save(argv[1], "ok-lookup", &s);
	start(&s, KVS_OP_EXISTS, 2, 0, 0);
	add_keys(&s, 2);
	err |= save(argv[1], "ok-exists", &s);
	start(&s, KVS_OP_GET, 3, 0, 0);
	add_keys(&s, 3);
	err |= save(argv[1], "ok-get", &s);
	start(&s, KVS_OP_DELETE, 1, 0, 0);
	add_keys(&s, 1);
	err |= save(argv[1], "ok-delete", &s);
	start(&s, KVS_OP_PUT, 2, 2 * KVS_PROTO_ITEM_SIZE, 2);
	kvs_proto_item_encode(b, 600);
	kvs_proto_item_encode(b + 8, 700);
	memset(s.payload, 0x33, 1300);
	s.payload_len = 1300;
	err |= save(argv[1], "ok-put", &s);
	start(&s, KVS_OP_STAT, 0, 0, 0);
	err |= save(argv[1], "ok-stat", &s);
	start(&s, KVS_OP_TAIL_PUT, 1, KVS_PROTO_TAIL_PUT_SIZE, 0);
	memset(b, 0x42, KVS_PROTO_REQID_SIZE);
	kvs_put32(b + KVS_PROTO_REQID_SIZE, 1000);
	kvs_put32(b + KVS_PROTO_REQID_SIZE + 4, 1024);
	memset(s.payload, 0x44, 1024);
	s.payload_len = 1024;
	err |= save(argv[1], "ok-tail-put", &s);
	start(&s, KVS_OP_TAIL_TAKE, 0, KVS_PROTO_REQID_SIZE, 0);
	memset(b, 0x42, KVS_PROTO_REQID_SIZE);
	err |= save(argv[1], "ok-tail-take", &s);

	/* refused: one of each check */
	start(&s, KVS_OP_STAT, 0, 0, 0);
	s.frame[0] ^= 0xff;
	err |= save(argv[1], "bad-magic", &s);
	start(&s, KVS_OP_STAT, 0, 0, 0);
	kvs_put16(s.frame + KVS_PROTO_OFF_VERSION, 9);
	err |= save(argv[1], "bad-version", &s);
	start(&s, KVS_OP_STAT, 0, 0, 0);
	s.frame_len = 20;
	err |= save(argv[1], "bad-truncated", &s);
	start(&s, 77, 0, 0, 0);
	err |= save(argv[1], "bad-opcode", &s);
	start(&s, KVS_OP_GET, 2, 0, 0);
	add_keys(&s, 3);
	err |= save(argv[1], "bad-get-payload-length", &s);
	start(&s, KVS_OP_GET, 1, 0, 0);
	add_keys(&s, 1);
	s.payload[KVS_ID_SIZE + 4] = 1;
	err |= save(argv[1], "bad-key-reserved", &s);
	start(&s, KVS_OP_EXISTS, 300, 0, 0);
	err |= save(argv[1], "bad-batch", &s);
	start(&s, KVS_OP_PUT, 1, KVS_PROTO_ITEM_SIZE, 0);
	kvs_proto_item_encode(b, 2u << 20);
	err |= save(argv[1], "bad-object-size", &s);
	start(&s, KVS_OP_PUT, 1, KVS_PROTO_ITEM_SIZE, 0);
	kvs_proto_item_encode(b, 600);
	memset(s.payload, 0x33, 599);
	s.payload_len = 599;
	err |= save(argv[1], "bad-put-short", &s);
	start(&s, KVS_OP_PUT, 1, KVS_PROTO_ITEM_SIZE, 3);
	kvs_proto_item_encode(b, 600);
	s.payload_len = 600;
	err |= save(argv[1], "bad-durability", &s);
	start(&s, KVS_OP_HELLO, 0, 4 + 5, 0);
	kvs_put16(b, 9);
	err |= save(argv[1], "bad-hello-tenant-length", &s);
	start(&s, KVS_OP_STAT, 0, 0, 0);
	kvs_put32(s.frame + KVS_PROTO_OFF_BODY_LEN, 8);
	err |= save(argv[1], "bad-body-length", &s);
	start(&s, KVS_OP_LOOKUP, 2, 8, 0);
	kvs_put32(b, 100000);
	err |= save(argv[1], "bad-lookup-layers", &s);
	return err ? 1 : 0;
}
