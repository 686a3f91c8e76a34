/*
 * service_util.h - what the daemon tests share: real kvstashd processes
 * started from the build directory on 127.0.0.1 with a free port the
 * daemon picks itself (port 0, told back through --ready-file), key files,
 * test blocks, and a raw UCX client that sends frames byte by byte (for
 * the malformed, unauthenticated and replayed cases).
 */
#ifndef KVS_TEST_SERVICE_UTIL_H
#define KVS_TEST_SERVICE_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "kvstash/client.h"
#include "transport/proto.h"
#include "transport/ucx.h"

struct daemon {
	pid_t pid;
	int port, metrics_port;
	char dir[512]; /* scratch directory: store, keys, log */
	char store[600];
	char addr[64];
	char keys[600]; /* the daemon's key file */
	char log[600];
	/* set after daemon_prepare to run it elsewhere: in network
	 * namespace @netns, listening on @host (default 127.0.0.1) */
	const char *netns;
	const char *host;
	/* set to listen on a given port rather than one the daemon picks */
	int fixed_port;
};

/* A fresh scratch directory under KVS_TEST_DIR (or /tmp) holding a key
 * file of tenants alice (namespace "a"), bob ("b"), carol (bound to
 * "a") and one client key file per tenant (key_path()). */
void daemon_prepare(struct daemon *d, const char *name);
/* The client key file of @tenant ("alice", "bob", "carol", "mallory":
 * a wrong key for alice). */
const char *key_path(const struct daemon *d, const char *tenant);

/* Starts kvstashd (KVSTASHD in the environment) on d->store with @extra
 * arguments (NULL-terminated); waits for its ready file.  Asserts. */
void daemon_start(struct daemon *d, const char *const *extra);
/* Sends @sig and waits at most @timeout_ms; returns the exit status
 * (WEXITSTATUS, or 128 + signal), -1 if it did not end (then killed). */
int daemon_stop(struct daemon *d, int sig, int timeout_ms);
/* Removes the scratch directory. */
void daemon_cleanup(struct daemon *d);
/* cmocka teardown: kills the daemons and removes the directories a
 * failed test left behind. */
int daemons_reap(void **state);

/* A connected client of @tenant; asserts success. */
struct kvs_client *client_of(const struct daemon *d, const char *tenant,
			     uint32_t timeout_ms);
/* client_try with a connect timeout of its own (0: the default). */
int client_try_within(const struct daemon *d, const char *tenant,
		      uint32_t connect_timeout_ms, struct kvs_client **out);
/* kvs_client_connect's result for @tenant. */
int client_try(const struct daemon *d, const char *tenant,
	       struct kvs_client **out);

/* A sealed block with random K/V of @span tokens, @kv_heads heads of
 * head dim 128, id from @seed and layer @layer (malloc'd). */
uint8_t *make_block(uint64_t seed, uint32_t layer, uint32_t kv_heads,
		    uint32_t span, size_t *len, struct kvs_store_key *key);
/* A residual tail (malloc'd). */
uint8_t *make_tail(uint64_t seed, size_t *len);

/* ---- raw frames ------------------------------------------------------ */

struct raw_client {
	struct kvs_ucx ucx;
	ucp_ep_h ep;
	bool failed; /* the server closed or the peer failed */
	bool got;
	unsigned replies, ok, busy; /* every reply's status, counted */
	uint8_t reply[KVS_PROTO_MAX_FRAME];
	size_t reply_len;
	size_t payload_len;
};

void raw_connect(struct raw_client *r, const struct daemon *d);
/* Sends @frame (@frame_len bytes as the AM header) and @payload; waits
 * for a reply (0 and its frame in r->reply) or a failure (-KVS_ECONN) or
 * @timeout_ms (-KVS_ETIMEDOUT). */
int raw_exchange(struct raw_client *r, const void *frame, size_t frame_len,
		 const void *payload, size_t payload_len, int timeout_ms);
/* Waits up to @timeout_ms for the server to close the connection. */
bool raw_wait_closed(struct raw_client *r, int timeout_ms);
void raw_close(struct raw_client *r);
/* A frame header of @op with @count items and @body_len of body. */
size_t raw_frame(uint8_t *frame, uint16_t op, uint32_t count, uint32_t body_len,
		 uint64_t req_id);
/* Hello then the right proof for @tenant's key file; 0 or the refusal.
 * @mac_out (may be NULL) gets the proof sent. */
int raw_auth(struct raw_client *r, const struct daemon *d, const char *tenant,
	     uint8_t mac_out[KVS_PROTO_MAC_SIZE]);

/* GET /metrics; the body, malloc'd, or NULL. */
char *metrics_fetch(const struct daemon *d);

uint64_t ms_now(void);

#endif
