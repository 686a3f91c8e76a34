/*
 * route_internal.h - what nodes.c and route.c share: a cluster client's
 * members (struct kvs_node, one per member id, with its connection) and
 * its calls in flight (struct route_op).  Everything here belongs to the
 * progress thread, except what the comments say otherwise.
 */
#ifndef KVS_CLIENT_ROUTE_INTERNAL_H
#define KVS_CLIENT_ROUTE_INTERNAL_H

#include "client_internal.h"
#include "kvstash/cluster.h"

/* Candidates of one item: the current members' first replicas + 2 (room
 * for nodes that fail), then the previous members' first replicas. */
#define ROUTE_CAND_MAX (2 * KVS_CLIENT_REPLICAS_MAX + 2)
/* Members a read asks past `replicas` before it calls a miss: one, which
 * finds a block put while a member ranked above was down or away. */
#define ROUTE_READ_EXTRA 1
#define ROUTE_LOOKUP_MAX 65536u /* keys (spans x layers) of one lookup */
#define ROUTE_VIEW_CHECK_NS 5000000ull /* how often the view is read */

struct kvs_node {
	char id[KVS_CLUSTER_NAME_MAX + 1];
	char address[KVS_CLUSTER_ADDRESS_MAX + 1];
	int64_t lease; /* of the registration last seen */
	struct kvs_conn *conn; /* NULL until used; replaced once broken */
	struct kvs_client_limits limits; /* from its last hello */
	bool limits_known;
	int last_error; /* why it was last marked down */
	bool member; /* in the current members */
	unsigned users; /* calls holding it */
	struct kvs_node *next;
};

struct route {
	struct kvs_client *cl;
	struct kvs_client_cluster_opts opts; /* strings not kept */
	struct kvs_cluster_view *view; /* NULL: a fixed list */
	struct kvs_cluster_members *fixed; /* the fixed list (any thread) */
	struct kvs_cluster_members *members, *previous;
	struct kvs_node **by_index; /* members[i]'s node */
	long *prev_to_cur; /* previous[i]'s index in members, or -1 */
	struct kvs_node *nodes; /* every node known */
	struct kvs_conn *closing; /* detached connections being closed */
	struct kvs_cluster_backoff *backoff; /* (thread safe) */
	struct route_op *parked; /* calls waiting for handshakes */
	size_t ops; /* calls started and not finished */
	bool shutting;
	bool unreachable; /* etcd was unreachable at the last look */
	uint64_t last_view_ns;
};

/* One item of a call: a block key (a node, for STAT) and how far its
 * search went.  Positions index cand[]. */
struct route_item {
	uint16_t cand[ROUTE_CAND_MAX]; /* indexes into op->nodes */
	uint8_t n_cand, n_cur; /* the first n_cur from the current members */
	uint8_t pos; /* next candidate to consider */
	uint8_t answered_cur, answered_prev; /* nodes that answered 'no' */
	uint8_t stored; /* put: copies acknowledged */
	uint8_t attempts;
	uint32_t missed; /* positions that answered 'miss' (read repair) */
	uint32_t skipped; /* positions passed over while marked down */
	bool done, present;
	bool answered; /* a node answered about it */
	int result;
	int refused; /* a node's refusal of it (put), or 0 */
	int fail; /* the last node failure, or 0 */
};

struct route_op {
	struct route *rt;
	struct kvs_client_req *req; /* the caller's handle */
	struct client_call call;
	unsigned replicas;
	struct kvs_cluster_members *members;
	struct kvs_node **nodes; /* members' nodes, held */
	size_t n_nodes;
	bool *need, *down; /* per node: a candidate of some item; skipped */
	struct route_item *items;
	size_t n_items;
	struct kvs_store_key *keys; /* a lookup's (span, layer) keys */
	struct kvs_store_key tail_key; /* a tail's request id */
	unsigned outstanding; /* parts in flight */
	unsigned rounds;
	bool any_answer;
	int fail; /* the last node failure */
	struct route_op *next_parked;
};

/* nodes.c */
/* The members' latest snapshot into rt (progress thread). */
void route_refresh(struct route *rt, bool force);
/* Queues @part to @node, connecting it first if need be; a node that
 * cannot be reached completes @part with the error. */
void node_send(struct route *rt, struct kvs_node *node,
	       struct kvs_client_req *part);
/* A connection for @node, made (handshake started) if need be; NULL when
 * it could not be made (the node is then marked down). */
struct kvs_conn *node_conn(struct route *rt, struct kvs_node *node);
/* Whether @node's connection is in its handshake. */
bool node_connecting(const struct kvs_node *node);
uint32_t route_node_timeout_ms(const struct route *rt);

/* route.c */
/* Parked calls whose handshakes are over go on. */
void route_unpark(struct route *rt, uint64_t now);
/* Ends every call not yet started or parked (the client stops). */
void route_fail_parked(struct route *rt);

/* route.c: starts the call's next round, or ends it. */
void route_op_advance(struct route_op *op);
/* route_answer.c: the on_done of a call's part (progress thread). */
void route_part_done(struct kvs_client_req *part);
/* route_answer.c: puts a block a get found back where it was missed. */
void route_repair(struct route_op *op);

#endif
