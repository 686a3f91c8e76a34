/*
 * cluster - membership of kvstash nodes in etcd, and placement of blocks
 * over the members by weighted rendezvous hashing.
 *
 * Three objects, each usable alone:
 *   - a node registration (kvs_cluster_node_*): a store node holds a lease
 *     on /kvstash/<cluster>/nodes/<id>, whose value is a JSON object with
 *     its address, capacity, start time and protocol version; a background
 *     thread keeps the lease alive and registers again after etcd lost it;
 *   - a member view (kvs_cluster_view_*): a client reads the members once,
 *     then watches the prefix; snapshots of it are immutable and
 *     reference-counted (kvs_cluster_members_*), each with a generation
 *     number that grows with every change;
 *   - placement (kvs_cluster_place, kvs_cluster_backoff_*): the members a
 *     block key goes to, in rank order, skipping those this client marked
 *     down for a back-off period.
 *
 * etcd is reached through its v3 JSON gateway; every call to it has a
 * timeout (kvs_cluster_config.timeout_ms), so an unreachable etcd gives an
 * error or a stale view, never a hang.  docs/CLUSTER.md describes the keys,
 * the values and what each failure does.
 */
#ifndef KVSTASH_CLUSTER_H
#define KVSTASH_CLUSTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KVS_CLUSTER_NAME_MAX 64 /* cluster name and node id, bytes */
#define KVS_CLUSTER_ADDRESS_MAX 255 /* "host:port", bytes */
#define KVS_CLUSTER_SPAN_ID_SIZE 32 /* a block's span id (KVS_ID_SIZE) */
#define KVS_CLUSTER_TIMEOUT_MS 2000 /* default etcd call timeout */
#define KVS_CLUSTER_TTL_S 10 /* default lease TTL */
#define KVS_CLUSTER_PLACE_MAX 64 /* members one placement ranks */

/* Where the cluster lives.  Strings are copied by the calls that take
 * them. */
struct kvs_cluster_config {
	/* "http://h1:p1,http://h2:p2": etcd client URLs, tried in turn */
	const char *endpoints;
	/* cluster name: 1..KVS_CLUSTER_NAME_MAX of [A-Za-z0-9._-] */
	const char *cluster;
	/* bound of every etcd call, connection included; 0: the default */
	unsigned timeout_ms;
};

/* Whether etcd answers this object.  UNREACHABLE: the last calls failed;
 * a view keeps its last members, a node keeps trying. */
enum kvs_cluster_state {
	KVS_CLUSTER_CONNECTED = 0,
	KVS_CLUSTER_UNREACHABLE = 1,
};

/* One store node as registered. */
struct kvs_cluster_member {
	char id[KVS_CLUSTER_NAME_MAX + 1]; /* [A-Za-z0-9._-] */
	char address[KVS_CLUSTER_ADDRESS_MAX + 1]; /* where clients connect */
	uint64_t capacity; /* bytes; the placement weight (0: no blocks) */
	uint32_t protocol; /* wire protocol version it speaks */
	int64_t start_time; /* unix seconds when the node started */
	int64_t lease; /* etcd lease holding the key (0 in static lists) */
};

/* ---- node registration ---- */

struct kvs_cluster_node;

/* What a node registers.  Strings are copied. */
struct kvs_cluster_node_info {
	const char *id; /* 1..KVS_CLUSTER_NAME_MAX of [A-Za-z0-9._-] */
	const char *address; /* 1..KVS_CLUSTER_ADDRESS_MAX bytes */
	uint64_t capacity;
	uint32_t protocol;
	unsigned ttl_s; /* lease TTL, 1..3600; 0: KVS_CLUSTER_TTL_S */
};

/*
 * kvs_cluster_node_register - grant a lease, put this node's key under it
 * and keep it alive from a background thread until deregistered.
 * Returns 0 once the key is in etcd, -EINVAL for a bad config or info
 * (capacity at most 2^63-1),
 * -EEXIST when a live node with another address holds the same id, or the
 * etcd error (-ETIMEDOUT, -ECONNREFUSED, ...) when etcd does not answer.
 * When etcd loses the lease later (expiry during an outage, a restart
 * from empty data), the thread registers again by itself.  @out is owned
 * by the caller until kvs_cluster_node_deregister().
 */
int kvs_cluster_node_register(const struct kvs_cluster_config *config,
			      const struct kvs_cluster_node_info *info,
			      struct kvs_cluster_node **out);

struct kvs_cluster_node_stats {
	enum kvs_cluster_state state;
	int64_t lease; /* the lease now held */
	uint64_t registrations; /* 1 + times it registered again */
	uint64_t keepalive_failures; /* keepalives that got no answer */
};

/* A consistent copy of the node's counters. */
void kvs_cluster_node_stats(struct kvs_cluster_node *node,
			    struct kvs_cluster_node_stats *out);

/*
 * kvs_cluster_node_deregister - stop the keepalive thread, revoke the
 * lease (the key leaves etcd at once) and free @node.  Returns 0, or the
 * revoke's error (the key then leaves when the lease expires); @node is
 * freed either way.  Waits for the thread's call in flight, then the
 * revoke, each bounded by timeout_ms.  NULL is a no-op returning 0.
 */
int kvs_cluster_node_deregister(struct kvs_cluster_node *node);

/* ---- member snapshots ---- */

/* An immutable, reference-counted list of members sorted by id. */
struct kvs_cluster_members;

/*
 * kvs_cluster_members_create - a snapshot from a static list (a fixed
 * server list, or tests).  Ids must be valid and distinct (-EINVAL
 * otherwise).  The caller holds the one reference.
 */
int kvs_cluster_members_create(const struct kvs_cluster_member *list,
			       size_t count, uint64_t generation,
			       struct kvs_cluster_members **out);
/* Takes another reference; returns @members. */
struct kvs_cluster_members *
kvs_cluster_members_ref(struct kvs_cluster_members *members);
/* Drops a reference; NULL is a no-op. */
void kvs_cluster_members_release(struct kvs_cluster_members *members);
size_t kvs_cluster_members_count(const struct kvs_cluster_members *members);
/* The @i-th member by id order; valid while the reference is held. */
const struct kvs_cluster_member *
kvs_cluster_members_get(const struct kvs_cluster_members *members, size_t i);
/* The index of member @id, or -1. */
long kvs_cluster_members_find(const struct kvs_cluster_members *members,
			      const char *id);
uint64_t
kvs_cluster_members_generation(const struct kvs_cluster_members *members);

/* ---- member view ---- */

struct kvs_cluster_view;

/*
 * kvs_cluster_view_open - read the members of @config->cluster, then
 * watch them from a background thread.  Returns 0, -EINVAL for a bad
 * config, or the etcd error when the first read fails (no view is made
 * without one).  Members whose value does not parse are left out (and
 * logged).  @out is owned by the caller until kvs_cluster_view_close().
 */
int kvs_cluster_view_open(const struct kvs_cluster_config *config,
			  struct kvs_cluster_view **out);

/* The current members: a new reference the caller releases.  Thread
 * safe; never NULL. */
struct kvs_cluster_members *
kvs_cluster_view_members(struct kvs_cluster_view *view);

/*
 * kvs_cluster_view_wait - wait until the view's generation exceeds
 * @generation.  Returns 0, or -ETIMEDOUT after @timeout_ms.
 */
int kvs_cluster_view_wait(struct kvs_cluster_view *view, uint64_t generation,
			  unsigned timeout_ms);

struct kvs_cluster_view_stats {
	enum kvs_cluster_state state;
	uint64_t generation;
	size_t members;
	uint64_t reconnects; /* watch streams opened after the first */
	uint64_t resyncs; /* full reads after etcd lost the history */
	uint64_t bad_values; /* member values that did not parse */
	int64_t unreachable_ms; /* how long UNREACHABLE has held; 0 */
};

/* A consistent copy of the view's counters. */
void kvs_cluster_view_stats(struct kvs_cluster_view *view,
			    struct kvs_cluster_view_stats *out);

/* Stops the watch and frees the view; snapshots taken from it stay valid
 * until released.  NULL is a no-op. */
void kvs_cluster_view_close(struct kvs_cluster_view *view);

/* ---- placement ---- */

/* Per-client "down until" marks, by member id.  Thread safe. */
struct kvs_cluster_backoff;

int kvs_cluster_backoff_create(struct kvs_cluster_backoff **out);
/* NULL is a no-op. */
void kvs_cluster_backoff_destroy(struct kvs_cluster_backoff *backoff);
/* Marks @id down for @ms milliseconds from now (a later mark replaces an
 * earlier one).  0 or -ENOMEM. */
int kvs_cluster_backoff_mark_down(struct kvs_cluster_backoff *backoff,
				  const char *id, unsigned ms);
/* Clears the mark of @id (a request to it succeeded). */
void kvs_cluster_backoff_clear(struct kvs_cluster_backoff *backoff,
			       const char *id);
bool kvs_cluster_backoff_is_down(struct kvs_cluster_backoff *backoff,
				 const char *id);

/*
 * kvs_cluster_place - the members that block (@span_id, @layer) goes to,
 * best first: weighted rendezvous hashing, each member scoring
 * -capacity / ln(u), u in (0, 1) a hash of (member id, block key).
 * Members with capacity 0, and those @backoff (may be NULL) marks down,
 * are skipped.  Writes up to @n (at most KVS_CLUSTER_PLACE_MAX) indexes
 * into @members to @rank, best first, and returns how many it wrote (0
 * when no member qualifies).  The
 * same members and key give the same order on every machine.
 */
size_t kvs_cluster_place(const struct kvs_cluster_members *members,
			 struct kvs_cluster_backoff *backoff,
			 const uint8_t span_id[KVS_CLUSTER_SPAN_ID_SIZE],
			 uint32_t layer, size_t n, uint32_t *rank);

#ifdef __cplusplus
}
#endif

#endif
