/*
 * etcd_internal.h - a small etcd v3 client over the JSON gateway
 * (grpc-gateway: POST /v3/<service>/<method> with a JSON body, keys and
 * values base64), through libcurl and jansson.
 *
 * A client holds a list of endpoints and the one that answered last; a
 * call that cannot reach an endpoint (connection refused, timeout, reset,
 * etcd "unavailable") tries the next, all within one deadline of
 * timeout_ms.  Calls are thread safe: each borrows an idle curl handle
 * (keeping its connection) or makes one.
 *
 * Errors: -ETIMEDOUT (the deadline passed), -ECONNREFUSED (no endpoint
 * listens), -ECONNRESET (a connection broke), -ENOENT (etcd: not found, a
 * lease that expired), -EINVAL (etcd refused the request), -ERANGE (the
 * revision was compacted), -KVS_EPROTO (an answer that is not etcd's),
 * -ENOMEM.
 */
#ifndef KVS_CLUSTER_ETCD_INTERNAL_H
#define KVS_CLUSTER_ETCD_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#define KVS_ETCD_ENDPOINTS_MAX 16
#define KVS_ETCD_URL_MAX 256 /* bytes of one endpoint URL */

struct kvs_etcd;

/* The header of every etcd answer. */
struct kvs_etcd_header {
	uint64_t cluster_id;
	int64_t revision;
};

/* One key-value pair; key and value are NUL-terminated copies (the value
 * may hold NULs too; value_len counts its bytes). */
struct kvs_etcd_kv {
	char *key;
	uint8_t *value;
	size_t value_len;
	int64_t create_revision;
	int64_t mod_revision;
	int64_t version;
	int64_t lease;
};

struct kvs_etcd_range {
	struct kvs_etcd_header header;
	size_t count; /* keys in the range, all in kvs unless count_only */
	struct kvs_etcd_kv *kvs; /* NULL for count_only */
};

/*
 * kvs_etcd_open - a client for @endpoints ("http://h:p[,http://h:p...]",
 * http:// or https://, up to KVS_ETCD_ENDPOINTS_MAX).  -EINVAL for a
 * malformed list.  The caller owns @out until kvs_etcd_close().
 */
int kvs_etcd_open(const char *endpoints, unsigned timeout_ms,
		  struct kvs_etcd **out);
/* NULL is a no-op.  No call may be in flight. */
void kvs_etcd_close(struct kvs_etcd *etcd);
unsigned kvs_etcd_timeout_ms(const struct kvs_etcd *etcd);

/* Grants a lease of @ttl_s seconds; its id to @lease_out. */
int kvs_etcd_lease_grant(struct kvs_etcd *etcd, unsigned ttl_s,
			 int64_t *lease_out);
/* Renews @lease; its TTL to @ttl_out (may be NULL).  -ENOENT when the
 * lease is gone. */
int kvs_etcd_lease_keepalive(struct kvs_etcd *etcd, int64_t lease,
			     int64_t *ttl_out);
/* Revokes @lease, deleting its keys.  -ENOENT when it is gone already. */
int kvs_etcd_lease_revoke(struct kvs_etcd *etcd, int64_t lease);

/* Puts @key = @value (under @lease when non-zero). */
int kvs_etcd_put(struct kvs_etcd *etcd, const char *key, const void *value,
		 size_t value_len, int64_t lease);

/*
 * kvs_etcd_put_if_absent - one transaction: put @key when it does not
 * exist, else read it.  Returns 0 when put, -EEXIST when present (its
 * pair to @existing when non-NULL; free with kvs_etcd_kv_free()).
 */
int kvs_etcd_put_if_absent(struct kvs_etcd *etcd, const char *key,
			   const void *value, size_t value_len, int64_t lease,
			   struct kvs_etcd_kv *existing);

/*
 * kvs_etcd_get - @key alone, or every key starting with it when @prefix.
 * With @count_only, only the header and the count are filled.  The caller
 * frees @out with kvs_etcd_range_free().
 */
int kvs_etcd_get(struct kvs_etcd *etcd, const char *key, bool prefix,
		 bool count_only, struct kvs_etcd_range **out);
void kvs_etcd_range_free(struct kvs_etcd_range *range);
void kvs_etcd_kv_free(struct kvs_etcd_kv *kv);

/* Deletes @key (every key under it when @prefix); how many to
 * @deleted_out (may be NULL). */
int kvs_etcd_delete(struct kvs_etcd *etcd, const char *key, bool prefix,
		    int64_t *deleted_out);

/* ---- shared with the watch (etcd.c) ---- */

/* An answer being received: a curl write callback appends to it. */
struct kvs_etcd_answer {
	char *bytes; /* NUL-terminated; the caller frees */
	size_t len;
	size_t max; /* bytes refused beyond this */
	bool too_long;
};
size_t kvs_etcd_answer_append(char *data, size_t size, size_t count, void *arg);

/* The end of the range of keys starting with @key (etcd's range_end), as
 * a malloc'ed string of @len bytes (may contain no NUL before its end). */
int kvs_etcd_prefix_end(const char *key, char **out, size_t *len_out);
/* base64 of @len bytes, malloc'ed and NUL-terminated. */
char *kvs_etcd_b64_encode(const void *data, size_t len);
/* Decodes base64 @text; the bytes (plus a NUL) to @out, their number to
 * @len_out.  -KVS_EPROTO for text that is not base64. */
int kvs_etcd_b64_decode(const char *text, uint8_t **out, size_t *len_out);
/* The header of an answer (missing fields are 0, as the gateway omits
 * zeros). */
int kvs_etcd_parse_header(json_t *obj, struct kvs_etcd_header *out);
/* A "kv" object into @out (filled only on success). */
int kvs_etcd_parse_kv(json_t *obj, struct kvs_etcd_kv *out);
/* A gateway int64 (a JSON string of digits, or a number; absent: 0). */
int kvs_etcd_json_int64(json_t *obj, const char *field, int64_t *out);

/* The endpoint to try first, the URL of endpoint @index, and moving on
 * from one that failed. */
unsigned kvs_etcd_endpoint_current(struct kvs_etcd *etcd);
const char *kvs_etcd_endpoint_url(const struct kvs_etcd *etcd, unsigned index);
void kvs_etcd_endpoint_failed(struct kvs_etcd *etcd, unsigned index);

/* ---- watch (etcd_watch.c) ---- */

enum kvs_etcd_event_type {
	KVS_ETCD_EVENT_PUT = 0,
	KVS_ETCD_EVENT_DELETE = 1,
};

struct kvs_etcd_event {
	enum kvs_etcd_event_type type;
	struct kvs_etcd_kv kv; /* for a delete: key and mod_revision */
};

/*
 * What a watch tells its owner, always from the watch's thread.
 * @events: one answer's events, in revision order.
 * @state: the stream is up (true) or broken (false); called on changes.
 * @resync: etcd no longer has the history the watch needs (compacted, or
 *   an etcd that lost its data); the owner reads the keys again and
 *   returns the revision to watch from (the read's revision + 1), or a
 *   negative error to be asked again after a back-off.
 */
struct kvs_etcd_watch_ops {
	void (*events)(void *arg, const struct kvs_etcd_event *events,
		       size_t count);
	void (*state)(void *arg, bool connected);
	int64_t (*resync)(void *arg);
};

struct kvs_etcd_watch;

/*
 * kvs_etcd_watch_start - watch every key under @prefix from
 * @start_revision, from a new thread.  A broken stream is opened again
 * (on the next endpoint, after a back-off) from the revision after the
 * last event delivered; while a stream is up, a count-only read every
 * @probe_ms proves etcd still answers (a stream to a hung etcd sends
 * nothing).  @etcd and @arg must outlive the watch.  Owned by the caller
 * until kvs_etcd_watch_stop().
 */
int kvs_etcd_watch_start(struct kvs_etcd *etcd, const char *prefix,
			 int64_t start_revision, unsigned probe_ms,
			 const struct kvs_etcd_watch_ops *ops, void *arg,
			 struct kvs_etcd_watch **out);
/* Stops the thread (no callback runs after it returns) and frees the
 * watch.  NULL is a no-op. */
void kvs_etcd_watch_stop(struct kvs_etcd_watch *watch);

#endif
