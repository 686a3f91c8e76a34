/*
 * proto.h - the kvstash wire protocol (docs/PROTOCOL.md, byte by byte).
 *
 * Every request and every reply is one UCX active message.  Its UCX
 * header is a frame: the fixed 32-byte frame header, then a descriptor
 * body of body_len bytes (what the receiver must know before it places
 * the payload: item lengths and statuses).  The active message's data is
 * the payload: keys, span ids and objects.  Requests travel on
 * KVS_PROTO_AM_REQUEST, replies on KVS_PROTO_AM_REPLY.
 *
 * Encoding and decoding go through the functions below (little-endian,
 * common/bytes.h), never through a cast of a buffer to a struct.  The
 * decoders validate magic, then version, then lengths, then the opcode's
 * own rules, each with its own error, and never read past what they are
 * given (the fuzz target fuzz/fuzz_proto.c holds them to that).
 */
#ifndef KVS_TRANSPORT_PROTO_H
#define KVS_TRANSPORT_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvs_config.h"
#include "kvstash/kvformat.h"

#define KVS_PROTO_MAGIC 0x5053564bu /* "KVSP" as little-endian bytes */
#define KVS_PROTO_VERSION 1
_Static_assert(KVS_PROTO_VERSION == KVS_WIRE_VERSION,
	       "the wire version of version.h is the protocol's");
#define KVS_PROTO_AM_REQUEST 17u
#define KVS_PROTO_AM_REPLY 18u

#define KVS_PROTO_HEADER_SIZE 32u
#define KVS_PROTO_MAX_FRAME 4096u /* header + body */
#define KVS_PROTO_MAX_BODY (KVS_PROTO_MAX_FRAME - KVS_PROTO_HEADER_SIZE)
#define KVS_PROTO_KEY_SIZE 40u /* span id, layer, reserved */
#define KVS_PROTO_ITEM_SIZE 8u /* a put length, or a reply status */
#define KVS_PROTO_NONCE_SIZE 32u
#define KVS_PROTO_MAC_SIZE 32u
#define KVS_PROTO_TENANT_MAX 64u
#define KVS_PROTO_REQID_SIZE 32u
#define KVS_PROTO_HELLO_REPLY_SIZE 48u
#define KVS_PROTO_TAIL_PUT_SIZE 40u
#define KVS_PROTO_STAT_MAX 64u
/* The hard ceiling of any batch: the reply descriptors must fit the
 * frame (servers set a lower limit). */
#define KVS_PROTO_BATCH_CEILING (KVS_PROTO_MAX_BODY / KVS_PROTO_ITEM_SIZE)
#define KVS_PROTO_LAYERS_MAX 4096u
#define KVS_PROTO_CHAIN_MAX 65536u /* spans of one lookup */

/* Frame header field offsets (docs/PROTOCOL.md, "Frame header"). */
enum kvs_proto_offset {
	KVS_PROTO_OFF_MAGIC = 0,
	KVS_PROTO_OFF_VERSION = 4,
	KVS_PROTO_OFF_OPCODE = 6,
	KVS_PROTO_OFF_REQ_ID = 8,
	KVS_PROTO_OFF_STATUS = 16,
	KVS_PROTO_OFF_COUNT = 20,
	KVS_PROTO_OFF_BODY_LEN = 24,
	KVS_PROTO_OFF_FLAGS = 28,
};

_Static_assert(KVS_PROTO_OFF_FLAGS + 4 == KVS_PROTO_HEADER_SIZE,
	       "the frame header is 32 bytes");
_Static_assert(KVS_PROTO_OFF_REQ_ID % 8 == 0, "request id is aligned");
_Static_assert(KVS_ID_SIZE + 4 + 4 == KVS_PROTO_KEY_SIZE,
	       "a wire key is a span id, a layer and 4 reserved bytes");
_Static_assert(KVS_PROTO_NONCE_SIZE + 4 * 4 == KVS_PROTO_HELLO_REPLY_SIZE,
	       "hello reply: nonce and four limits");
_Static_assert(KVS_PROTO_REQID_SIZE + 4 + 4 == KVS_PROTO_TAIL_PUT_SIZE,
	       "tail put: request id, ttl, length");
_Static_assert(KVS_PROTO_STAT_MAX * 8 <= KVS_PROTO_MAX_BODY,
	       "stat counters fit one frame");

enum kvs_proto_opcode {
	KVS_OP_HELLO = 1,
	KVS_OP_AUTH = 2,
	KVS_OP_LOOKUP = 3,
	KVS_OP_EXISTS = 4,
	KVS_OP_GET = 5,
	KVS_OP_PUT = 6,
	KVS_OP_DELETE = 7,
	KVS_OP_STAT = 8,
	KVS_OP_TAIL_PUT = 9,
	KVS_OP_TAIL_TAKE = 10,
	KVS_OP_COUNT, /* one past the last request opcode */
	KVS_OP_REPLY = 0x8000, /* or'ed into the opcode of a reply */
	KVS_OP_ERROR = 0xffff, /* reply to a frame that could not be read */
};

/* A decoded frame header; @body points into the decoded buffer. */
struct kvs_proto_frame {
	uint16_t version;
	uint16_t opcode;
	uint64_t req_id;
	int32_t status;
	uint32_t count;
	uint32_t body_len;
	uint32_t flags;
	const uint8_t *body;
};

/* What a server accepts; a request past one is refused with its code. */
struct kvs_proto_limits {
	uint32_t max_batch; /* items a request: -KVS_EBATCH */
	uint32_t max_object; /* bytes an object: -KVS_ETOOBIG */
	uint64_t max_payload; /* bytes a request's payload: -KVS_ETOOBIG */
};

/* A key on the wire. */
struct kvs_proto_key {
	uint8_t span_id[KVS_ID_SIZE];
	uint32_t layer;
};

/* Name of an opcode (requests and replies), "unknown" otherwise. */
const char *kvs_proto_opcode_name(unsigned opcode);

/* Writes the 32-byte header of @f (its body is not copied). */
void kvs_proto_header_encode(const struct kvs_proto_frame *f, uint8_t *out);

/*
 * kvs_proto_frame_decode - check and decode a frame of @len bytes:
 * -KVS_ETRUNC under 32 bytes, -KVS_EPROTO for a bad magic,
 * -KVS_EVERSION for another version, -KVS_EPROTO when body_len does not
 * match @len or exceeds KVS_PROTO_MAX_BODY.  @out written on success
 * (its body points into @buf).
 */
int kvs_proto_frame_decode(const uint8_t *buf, size_t len,
			   struct kvs_proto_frame *out);

/*
 * kvs_proto_request_check - the opcode's own rules for a decoded request
 * frame with @payload_len bytes of payload: -KVS_EOPCODE for an unknown
 * opcode, -KVS_EBATCH past lim->max_batch items, -KVS_ETOOBIG past
 * max_payload or max_object, -KVS_EPROTO for any other inconsistency
 * (body or payload size, reserved bytes not zero, a bad durability).
 * A request that passes can be served without further length checks.
 */
int kvs_proto_request_check(const struct kvs_proto_frame *f,
			    uint64_t payload_len,
			    const struct kvs_proto_limits *lim);

/*
 * kvs_proto_payload_check - what can be checked only once the payload of
 * a request that passed kvs_proto_request_check has landed (the reserved
 * bytes of its keys): 0 or -KVS_EPROTO.
 */
int kvs_proto_payload_check(const struct kvs_proto_frame *f,
			    const uint8_t *payload, uint64_t payload_len);

/*
 * kvs_proto_reply_check - the same for a reply to a request of @opcode
 * and @count items: 0 or -KVS_EPROTO.  An error reply (status < 0, or
 * opcode KVS_OP_ERROR) passes with any body.
 */
int kvs_proto_reply_check(const struct kvs_proto_frame *f, unsigned opcode,
			  uint32_t count, uint64_t payload_len);

/* Wire keys: 40 bytes each. */
void kvs_proto_key_encode(const struct kvs_proto_key *k, uint8_t *out);
/* 0, or -KVS_EPROTO when the reserved bytes are not zero. */
int kvs_proto_key_decode(const uint8_t *in, struct kvs_proto_key *out);

/* 8-byte items: (u32 or i32, u32 reserved). */
static inline void kvs_proto_item_encode(uint8_t *out, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		out[i] = (uint8_t)(v >> (8 * i));
	out[4] = out[5] = out[6] = out[7] = 0;
}

uint32_t kvs_proto_item_value(const uint8_t *in);

/* Sum of the put lengths in a PUT body (checked already). */
uint64_t kvs_proto_put_total(const struct kvs_proto_frame *f);

/*
 * The authentication proof: HMAC-SHA-256 under the tenant's key over
 * "kvstash-auth-v1", the server's nonce and the tenant name (DESIGN: no
 * key crosses the wire).  0 or -KVS_EPARAM (libcrypto failed).
 */
int kvs_proto_auth_mac(const uint8_t *key, size_t key_len,
		       const uint8_t nonce[KVS_PROTO_NONCE_SIZE],
		       const char *tenant, uint8_t mac[KVS_PROTO_MAC_SIZE]);

/* Counters of the STAT reply, in wire order (docs/PROTOCOL.md). */
enum kvs_proto_stat {
	KVS_STAT_DRAM_BLOCKS,
	KVS_STAT_DRAM_BYTES,
	KVS_STAT_DRAM_CAPACITY,
	KVS_STAT_NVME_BLOCKS,
	KVS_STAT_NVME_BYTES,
	KVS_STAT_NVME_CAPACITY,
	KVS_STAT_HITS,
	KVS_STAT_MISSES,
	KVS_STAT_EVICTIONS,
	KVS_STAT_SPILLS,
	KVS_STAT_CORRUPT_DROPPED,
	KVS_STAT_TORN_DROPPED,
	KVS_STAT_SEGMENTS,
	KVS_STAT_NVME_FILE_BYTES,
	KVS_STAT_FLAGS, /* bit 0 O_DIRECT, 1 hugepages, 2 registered */
	KVS_STAT_TAILS,
	KVS_STAT_TAIL_BYTES,
	KVS_STAT_TAILS_EXPIRED,
	KVS_STAT_CONNECTIONS,
	KVS_STAT_UPTIME_S,
	KVS_STAT_BASE_N, /* what every server sends */
	KVS_STAT_DRAM_HITS = KVS_STAT_BASE_N,
	KVS_STAT_NVME_HITS,
	KVS_STAT_PROMOTIONS,
	KVS_STAT_CARRIED,
	KVS_STAT_LOST_SEGMENTS,
	KVS_STAT_COMPACTIONS,
	KVS_STAT_N,
};

_Static_assert(KVS_STAT_N <= KVS_PROTO_STAT_MAX, "stat counters fit");

#endif
