/*
 * etcd.c - the unary calls of the etcd v3 client (etcd_internal.h): the
 * endpoint list and its failover, one HTTP POST per call through libcurl
 * with a deadline, JSON through jansson, base64 through OpenSSL.
 *
 * Organisation: helpers (time, base64, JSON fields), the client object
 * and its idle curl handles, post() (one request, failover, deadline,
 * error mapping), then one function per etcd method.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <curl/curl.h>
#include <openssl/evp.h>

#include "cluster_internal.h"
#include "etcd_internal.h"
#include "kvstash/error.h"
#include "kvstash/log.h"

#define IDLE_HANDLES 4
#define ANSWER_MAX (64u << 20) /* bytes of one unary answer */

/* gRPC status codes that the gateway passes on. */
enum {
	GRPC_INVALID_ARGUMENT = 3,
	GRPC_DEADLINE_EXCEEDED = 4,
	GRPC_NOT_FOUND = 5,
	GRPC_OUT_OF_RANGE = 11,
	GRPC_UNAVAILABLE = 14,
};

struct kvs_etcd {
	char *endpoint[KVS_ETCD_ENDPOINTS_MAX];
	unsigned endpoints;
	atomic_uint current; /* the endpoint that answered last */
	unsigned timeout_ms;
	pthread_mutex_t lock; /* guards idle[] */
	CURL *idle[IDLE_HANDLES];
	unsigned idle_count;
};

/* ---- base64, JSON fields ---- */

char *kvs_etcd_b64_encode(const void *data, size_t len)
{
	char *text;

	if (len > INT_MAX / 2)
		return NULL;
	text = malloc(4 * ((len + 2) / 3) + 1);
	if (text == NULL)
		return NULL;
	EVP_EncodeBlock((unsigned char *)text, data, (int)len);
	return text;
}

int kvs_etcd_b64_decode(const char *text, uint8_t **out, size_t *len_out)
{
	size_t len = strlen(text), pad = 0;
	uint8_t *bytes;
	int n;

	if (len % 4 != 0 || len > INT_MAX / 2)
		return -KVS_EPROTO;
	bytes = malloc(len / 4 * 3 + 1);
	if (bytes == NULL)
		return -ENOMEM;
	n = len ? EVP_DecodeBlock(bytes, (const unsigned char *)text, (int)len)
		: 0;
	if (n < 0) {
		free(bytes);
		return -KVS_EPROTO;
	}
	/* EVP_DecodeBlock counts the padding as zero bytes. */
	while (pad < 2 && len > pad && text[len - 1 - pad] == '=')
		pad++;
	bytes[n - pad] = '\0';
	*out = bytes;
	*len_out = (size_t)n - pad;
	return 0;
}

int kvs_etcd_json_int64(json_t *obj, const char *field, int64_t *out)
{
	json_t *v = json_object_get(obj, field);
	const char *s;
	char *end;
	long long n;

	if (v == NULL || json_is_null(v)) {
		*out = 0;
		return 0;
	}
	if (json_is_integer(v)) {
		*out = json_integer_value(v);
		return 0;
	}
	if (!json_is_string(v))
		return -KVS_EPROTO;
	s = json_string_value(v);
	errno = 0;
	n = strtoll(s, &end, 10);
	if (errno != 0 || end == s || *end != '\0')
		return -KVS_EPROTO;
	*out = n;
	return 0;
}

int kvs_etcd_parse_header(json_t *obj, struct kvs_etcd_header *out)
{
	json_t *header = json_object_get(obj, "header");
	json_t *id;
	struct kvs_etcd_header h = { 0 };

	if (!json_is_object(header))
		return -KVS_EPROTO;
	id = json_object_get(header, "cluster_id");
	if (json_is_string(id)) {
		char *end;
		const char *s = json_string_value(id);

		errno = 0;
		h.cluster_id = strtoull(s, &end, 10);
		if (errno != 0 || end == s || *end != '\0')
			return -KVS_EPROTO;
	}
	if (kvs_etcd_json_int64(header, "revision", &h.revision))
		return -KVS_EPROTO;
	*out = h;
	return 0;
}

void kvs_etcd_kv_free(struct kvs_etcd_kv *kv)
{
	if (kv == NULL)
		return;
	free(kv->key);
	free(kv->value);
	memset(kv, 0, sizeof(*kv));
}

/* A base64 field into a NUL-terminated copy; absent is empty. */
static int b64_field(json_t *obj, const char *field, uint8_t **out,
		     size_t *len_out)
{
	json_t *v = json_object_get(obj, field);

	if (v == NULL)
		return kvs_etcd_b64_decode("", out, len_out);
	if (!json_is_string(v))
		return -KVS_EPROTO;
	return kvs_etcd_b64_decode(json_string_value(v), out, len_out);
}

int kvs_etcd_parse_kv(json_t *obj, struct kvs_etcd_kv *out)
{
	struct kvs_etcd_kv kv = { 0 };
	size_t key_len;
	int err;

	if (!json_is_object(obj))
		return -KVS_EPROTO;
	err = b64_field(obj, "key", (uint8_t **)&kv.key, &key_len);
	if (err)
		return err;
	err = b64_field(obj, "value", &kv.value, &kv.value_len);
	if (err)
		goto undo_key;
	if (kvs_etcd_json_int64(obj, "create_revision", &kv.create_revision) ||
	    kvs_etcd_json_int64(obj, "mod_revision", &kv.mod_revision) ||
	    kvs_etcd_json_int64(obj, "version", &kv.version) ||
	    kvs_etcd_json_int64(obj, "lease", &kv.lease)) {
		err = -KVS_EPROTO;
		goto undo_value;
	}
	*out = kv;
	return 0;

undo_value:
	free(kv.value);
undo_key:
	free(kv.key);
	return err;
}

int kvs_etcd_prefix_end(const char *key, char **out, size_t *len_out)
{
	size_t len = strlen(key);
	char *end = malloc(len + 1);

	if (end == NULL)
		return -ENOMEM;
	memcpy(end, key, len + 1);
	/* The first key past the prefix: the last byte that is not 0xff,
	 * plus one, with what follows it dropped. */
	while (len > 0 && (unsigned char)end[len - 1] == 0xff)
		len--;
	if (len == 0) {
		/* Every key: etcd reads "\0" as "to the end". */
		end[0] = '\0';
		*out = end;
		*len_out = 1;
		return 0;
	}
	end[len - 1] = (char)((unsigned char)end[len - 1] + 1);
	end[len] = '\0';
	*out = end;
	*len_out = len;
	return 0;
}

/* Sets request[field] = base64(bytes); 0 or -ENOMEM. */
static int set_b64(json_t *request, const char *field, const void *bytes,
		   size_t len)
{
	char *text = kvs_etcd_b64_encode(bytes, len);

	if (text == NULL)
		return -ENOMEM;
	if (json_object_set_new(request, field, json_string(text))) {
		free(text);
		return -ENOMEM;
	}
	free(text);
	return 0;
}

/* Sets request[field] = "<n>" (the gateway's form of an int64). */
static int set_int64(json_t *request, const char *field, int64_t n)
{
	char text[24];

	snprintf(text, sizeof(text), "%lld", (long long)n);
	return json_object_set_new(request, field, json_string(text)) ? -ENOMEM
								      : 0;
}

/* ---- the client ---- */

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_result;

static void curl_init(void)
{
	curl_init_result = curl_global_init(CURL_GLOBAL_DEFAULT);
}

static int add_endpoint(struct kvs_etcd *etcd, const char *text, size_t len)
{
	char *url;

	while (len > 0 && (text[len - 1] == '/' || text[len - 1] == ' '))
		len--;
	while (len > 0 && *text == ' ') {
		text++;
		len--;
	}
	if ((strncmp(text, "http://", 7) != 0 || len <= 7) &&
	    (strncmp(text, "https://", 8) != 0 || len <= 8)) {
		kvs_log(KVS_LOG_ERR,
			"etcd endpoint '%.*s': not http://HOST:PORT", (int)len,
			text);
		return -EINVAL;
	}
	if (len > KVS_ETCD_URL_MAX) {
		kvs_log(KVS_LOG_ERR, "etcd endpoint '%.*s...': too long", 32,
			text);
		return -EINVAL;
	}
	if (etcd->endpoints == KVS_ETCD_ENDPOINTS_MAX) {
		kvs_log(KVS_LOG_ERR, "etcd: more than %d endpoints",
			KVS_ETCD_ENDPOINTS_MAX);
		return -EINVAL;
	}
	url = strndup(text, len);
	if (url == NULL)
		return -ENOMEM;
	etcd->endpoint[etcd->endpoints++] = url;
	return 0;
}

int kvs_etcd_open(const char *endpoints, unsigned timeout_ms,
		  struct kvs_etcd **out)
{
	struct kvs_etcd *etcd;
	const char *p = endpoints;
	int err;

	if (endpoints == NULL || timeout_ms == 0)
		return -EINVAL;
	pthread_once(&curl_once, curl_init);
	if (curl_init_result != CURLE_OK) {
		kvs_log(KVS_LOG_ERR, "curl_global_init: %s",
			curl_easy_strerror(curl_init_result));
		return -ENOMEM;
	}
	etcd = calloc(1, sizeof(*etcd));
	if (etcd == NULL)
		return -ENOMEM;
	etcd->timeout_ms = timeout_ms;
	for (;;) {
		const char *comma = strchr(p, ',');
		size_t len = comma ? (size_t)(comma - p) : strlen(p);

		err = add_endpoint(etcd, p, len);
		if (err)
			goto undo_endpoints;
		if (comma == NULL)
			break;
		p = comma + 1;
	}
	err = pthread_mutex_init(&etcd->lock, NULL);
	if (err) {
		err = -err;
		goto undo_endpoints;
	}
	*out = etcd;
	return 0;

undo_endpoints:
	for (unsigned i = 0; i < etcd->endpoints; i++)
		free(etcd->endpoint[i]);
	free(etcd);
	return err;
}

void kvs_etcd_close(struct kvs_etcd *etcd)
{
	if (etcd == NULL)
		return;
	for (unsigned i = 0; i < etcd->idle_count; i++)
		curl_easy_cleanup(etcd->idle[i]);
	pthread_mutex_destroy(&etcd->lock);
	for (unsigned i = 0; i < etcd->endpoints; i++)
		free(etcd->endpoint[i]);
	free(etcd);
}

unsigned kvs_etcd_timeout_ms(const struct kvs_etcd *etcd)
{
	return etcd->timeout_ms;
}

unsigned kvs_etcd_endpoint_current(struct kvs_etcd *etcd)
{
	return atomic_load(&etcd->current) % etcd->endpoints;
}

const char *kvs_etcd_endpoint_url(const struct kvs_etcd *etcd, unsigned index)
{
	return etcd->endpoint[index % etcd->endpoints];
}

void kvs_etcd_endpoint_failed(struct kvs_etcd *etcd, unsigned index)
{
	unsigned expected = index;

	/* Only the first thread to see @index fail moves everyone on. */
	atomic_compare_exchange_strong(&etcd->current, &expected,
				       (index + 1) % etcd->endpoints);
}

static CURL *handle_take(struct kvs_etcd *etcd)
{
	CURL *curl = NULL;

	pthread_mutex_lock(&etcd->lock);
	if (etcd->idle_count > 0)
		curl = etcd->idle[--etcd->idle_count];
	pthread_mutex_unlock(&etcd->lock);
	return curl ? curl : curl_easy_init();
}

static void handle_give(struct kvs_etcd *etcd, CURL *curl)
{
	pthread_mutex_lock(&etcd->lock);
	if (etcd->idle_count < IDLE_HANDLES) {
		etcd->idle[etcd->idle_count++] = curl;
		curl = NULL;
	}
	pthread_mutex_unlock(&etcd->lock);
	if (curl)
		curl_easy_cleanup(curl);
}

/* ---- one request ---- */

size_t kvs_etcd_answer_append(char *data, size_t size, size_t count, void *arg)
{
	struct kvs_etcd_answer *a = arg;
	size_t n = size * count;
	char *grown;

	if (a->len + n + 1 > a->max) {
		a->too_long = true;
		return 0;
	}
	grown = realloc(a->bytes, a->len + n + 1);
	if (grown == NULL)
		return 0;
	memcpy(grown + a->len, data, n);
	a->len += n;
	grown[a->len] = '\0';
	a->bytes = grown;
	return n;
}

static int from_curl(CURLcode rc)
{
	switch (rc) {
	case CURLE_OPERATION_TIMEDOUT:
		return -ETIMEDOUT;
	case CURLE_COULDNT_CONNECT:
		return -ECONNREFUSED;
	case CURLE_COULDNT_RESOLVE_HOST:
		return -EHOSTUNREACH;
	case CURLE_OUT_OF_MEMORY:
		return -ENOMEM;
	default:
		return -ECONNRESET;
	}
}

/* The gRPC status of an error answer: {"code": N, "message": ...} for
 * unary calls, {"error": {"grpc_code": N, ...}} for streams. */
static int grpc_status(json_t *body, const char **message)
{
	json_t *error = json_object_get(body, "error");
	json_t *code = json_object_get(body, "code");
	json_t *text = json_object_get(body, "message");

	if (json_is_object(error)) {
		code = json_object_get(error, "grpc_code");
		text = json_object_get(error, "message");
	}
	*message = json_is_string(text) ? json_string_value(text) : "?";
	return json_is_integer(code) ? (int)json_integer_value(code) : -1;
}

static int from_grpc(int code)
{
	switch (code) {
	case GRPC_NOT_FOUND:
		return -ENOENT;
	case GRPC_INVALID_ARGUMENT:
		return -EINVAL;
	case GRPC_OUT_OF_RANGE:
		return -ERANGE;
	case GRPC_DEADLINE_EXCEEDED:
		return -ETIMEDOUT;
	case GRPC_UNAVAILABLE:
		return -ECONNRESET;
	default:
		return -KVS_EPROTO;
	}
}

/* Prepares @curl for one POST of @body to @url within @ms. */
static void post_setup(CURL *curl, const char *url, const char *body,
		       struct curl_slist *headers, struct kvs_etcd_answer *a,
		       long ms)
{
	curl_easy_reset(curl);
	curl_easy_setopt(curl, CURLOPT_URL, url);
	curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body);
	curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
	curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
	curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, kvs_etcd_answer_append);
	curl_easy_setopt(curl, CURLOPT_WRITEDATA, a);
	curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, ms);
	curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, ms);
}

/*
 * One attempt on one endpoint (on a new connection when @fresh).  Returns
 * 0 with the parsed answer, a negative error, and whether another
 * endpoint may do better.
 */
static int post_once(CURL *curl, const char *url, const char *body,
		     struct curl_slist *headers, long ms, bool fresh,
		     json_t **out, bool *try_next)
{
	struct kvs_etcd_answer a = { .max = ANSWER_MAX };
	json_error_t jerr;
	const char *message;
	json_t *answer;
	CURLcode rc;
	long status = 0;
	int code, err;

	post_setup(curl, url, body, headers, &a, ms);
	curl_easy_setopt(curl, CURLOPT_FRESH_CONNECT, fresh ? 1L : 0L);
	rc = curl_easy_perform(curl);
	*try_next = false;
	if (rc != CURLE_OK) {
		err = a.too_long ? -KVS_EPROTO : from_curl(rc);
		*try_next = err != -KVS_EPROTO && err != -ENOMEM;
		kvs_log(KVS_LOG_DEBUG, "etcd %s: %s", url,
			curl_easy_strerror(rc));
		free(a.bytes);
		return err;
	}
	curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
	answer = json_loadb(a.bytes ? a.bytes : "", a.len, 0, &jerr);
	free(a.bytes);
	if (!json_is_object(answer)) {
		kvs_log(KVS_LOG_DEBUG, "etcd %s: HTTP %ld, not JSON: %s", url,
			status, jerr.text);
		json_decref(answer);
		*try_next = status >= 500;
		return status >= 500 ? -ECONNRESET : -KVS_EPROTO;
	}
	code = grpc_status(answer, &message);
	if (status == 200 && code <= 0) {
		*out = answer;
		return 0;
	}
	err = from_grpc(code);
	kvs_log(KVS_LOG_DEBUG, "etcd %s: HTTP %ld, code %d: %s", url, status,
		code, message);
	json_decref(answer);
	*try_next = code == GRPC_UNAVAILABLE || code == GRPC_DEADLINE_EXCEEDED;
	return err;
}

/*
 * post - POST @request to @path on the endpoints, starting with the one
 * that answered last, within the client's deadline.  The answer (an
 * object; for stream methods the "result" inside) to @out.
 */
static int post(struct kvs_etcd *etcd, const char *path, json_t *request,
		json_t **out)
{
	int64_t deadline = kvs_cluster_now_ms() + etcd->timeout_ms;
	struct curl_slist *headers;
	char *body;
	CURL *curl;
	int err = -ETIMEDOUT;
	bool timed_out = false, final = false, fresh = false;

	body = json_dumps(request, JSON_COMPACT);
	if (body == NULL)
		return -ENOMEM;
	headers = curl_slist_append(NULL, "Content-Type: application/json");
	curl = handle_take(etcd);
	if (headers == NULL || curl == NULL) {
		err = -ENOMEM;
		goto undo;
	}
	for (unsigned tried = 0; tried < etcd->endpoints;) {
		int64_t left = deadline - kvs_cluster_now_ms();
		unsigned index = kvs_etcd_endpoint_current(etcd);
		char url[KVS_ETCD_URL_MAX + 64];
		bool try_next;

		if (left <= 0) {
			err = -ETIMEDOUT;
			break;
		}
		/* A hung endpoint must leave time for the others. */
		left /= (int64_t)(etcd->endpoints - tried);
		snprintf(url, sizeof(url), "%s%s", etcd->endpoint[index], path);
		err = post_once(curl, url, body, headers, left > 0 ? left : 1,
				fresh, out, &try_next);
		if (err == 0) {
			atomic_store(&etcd->current, index);
			break;
		}
		if (err == -ECONNRESET && !fresh) {
			/* Most likely a kept connection that etcd closed (it
			 * restarted): once more on a new one. */
			fresh = true;
			continue;
		}
		timed_out |= err == -ETIMEDOUT;
		if (!try_next) {
			final = true; /* etcd's own answer */
			break;
		}
		kvs_etcd_endpoint_failed(etcd, index);
		tried++;
	}
	if (err && !final && timed_out)
		err = -ETIMEDOUT;
	if (err == 0) {
		json_t *result = json_object_get(*out, "result");

		if (json_is_object(result)) {
			json_incref(result);
			json_decref(*out);
			*out = result;
		}
	}
undo:
	if (curl)
		handle_give(etcd, curl);
	curl_slist_free_all(headers);
	free(body);
	return err;
}

/* ---- methods ---- */

/*
 * A lease call: POST {@field: "@n"} to @path, then read the int64 field
 * @out_field of the answer (0 when absent) to @out_value, unless NULL.
 */
static int lease_call(struct kvs_etcd *etcd, const char *path,
		      const char *field, int64_t n, const char *out_field,
		      int64_t *out_value)
{
	json_t *request = json_object(), *answer;
	int err;

	if (request == NULL)
		return -ENOMEM;
	err = set_int64(request, field, n);
	if (!err)
		err = post(etcd, path, request, &answer);
	json_decref(request);
	if (err)
		return err;
	if (out_field && kvs_etcd_json_int64(answer, out_field, out_value))
		err = -KVS_EPROTO;
	json_decref(answer);
	return err;
}

int kvs_etcd_lease_grant(struct kvs_etcd *etcd, unsigned ttl_s,
			 int64_t *lease_out)
{
	int64_t id;
	int err = lease_call(etcd, "/v3/lease/grant", "TTL", ttl_s, "ID", &id);

	if (!err && id == 0)
		err = -KVS_EPROTO;
	if (!err)
		*lease_out = id;
	return err;
}

int kvs_etcd_lease_keepalive(struct kvs_etcd *etcd, int64_t lease,
			     int64_t *ttl_out)
{
	int64_t ttl;
	int err = lease_call(etcd, "/v3/lease/keepalive", "ID", lease, "TTL",
			     &ttl);

	/* An expired lease answers with no TTL (the gateway omits 0). */
	if (!err && ttl <= 0)
		err = -ENOENT;
	if (!err && ttl_out)
		*ttl_out = ttl;
	return err;
}

int kvs_etcd_lease_revoke(struct kvs_etcd *etcd, int64_t lease)
{
	return lease_call(etcd, "/v3/lease/revoke", "ID", lease, NULL, NULL);
}

/* The body of a put: {"key", "value", "lease"}. */
static json_t *put_request(const char *key, const void *value, size_t value_len,
			   int64_t lease)
{
	json_t *put = json_object();

	if (put == NULL)
		return NULL;
	if (set_b64(put, "key", key, strlen(key)) ||
	    set_b64(put, "value", value, value_len) ||
	    (lease != 0 && set_int64(put, "lease", lease))) {
		json_decref(put);
		return NULL;
	}
	return put;
}

int kvs_etcd_put(struct kvs_etcd *etcd, const char *key, const void *value,
		 size_t value_len, int64_t lease)
{
	json_t *request = put_request(key, value, value_len, lease), *answer;
	int err;

	if (request == NULL)
		return -ENOMEM;
	err = post(etcd, "/v3/kv/put", request, &answer);
	json_decref(request);
	if (!err)
		json_decref(answer);
	return err;
}

/* The body of a range of @key (or its prefix). */
static json_t *range_request(const char *key, bool prefix, bool count_only)
{
	json_t *range = json_object();
	char *end = NULL;
	size_t end_len;

	if (range == NULL)
		return NULL;
	if (set_b64(range, "key", key, strlen(key)))
		goto undo;
	if (prefix) {
		if (kvs_etcd_prefix_end(key, &end, &end_len))
			goto undo;
		if (set_b64(range, "range_end", end, end_len))
			goto undo;
		free(end);
		end = NULL;
	}
	if (count_only && json_object_set_new(range, "count_only", json_true()))
		goto undo;
	return range;

undo:
	free(end);
	json_decref(range);
	return NULL;
}

/*
 * The comparison and the two branches of put-if-absent: compare the key's
 * create_revision with 0 (no such key), put on success, range on failure.
 */
static json_t *absent_txn(const char *key, const void *value, size_t value_len,
			  int64_t lease)
{
	json_t *txn = json_object(), *compare = json_object();
	json_t *put = put_request(key, value, value_len, lease);
	json_t *range = range_request(key, false, false);

	if (txn == NULL || compare == NULL || put == NULL || range == NULL)
		goto undo;
	if (set_b64(compare, "key", key, strlen(key)) ||
	    json_object_set_new(compare, "target", json_string("CREATE")) ||
	    json_object_set_new(compare, "result", json_string("EQUAL")) ||
	    set_int64(compare, "create_revision", 0))
		goto undo;
	if (json_object_set_new(txn, "compare", json_pack("[O]", compare)) ||
	    json_object_set_new(txn, "success",
				json_pack("[{s:O}]", "request_put", put)) ||
	    json_object_set_new(txn, "failure",
				json_pack("[{s:O}]", "request_range", range)))
		goto undo;
	json_decref(compare);
	json_decref(put);
	json_decref(range);
	return txn;

undo:
	json_decref(range);
	json_decref(put);
	json_decref(compare);
	json_decref(txn);
	return NULL;
}

int kvs_etcd_put_if_absent(struct kvs_etcd *etcd, const char *key,
			   const void *value, size_t value_len, int64_t lease,
			   struct kvs_etcd_kv *existing)
{
	json_t *request = absent_txn(key, value, value_len, lease), *answer;
	json_t *kvs;
	int err;

	if (request == NULL)
		return -ENOMEM;
	err = post(etcd, "/v3/kv/txn", request, &answer);
	json_decref(request);
	if (err)
		return err;
	if (json_is_true(json_object_get(answer, "succeeded"))) {
		json_decref(answer);
		return 0;
	}
	/* responses[0].response_range.kvs[0]: who holds the key. */
	kvs = json_object_get(
		json_object_get(
			json_array_get(json_object_get(answer, "responses"), 0),
			"response_range"),
		"kvs");
	err = -EEXIST;
	if (existing && kvs_etcd_parse_kv(json_array_get(kvs, 0), existing))
		err = -KVS_EPROTO;
	json_decref(answer);
	return err;
}

void kvs_etcd_range_free(struct kvs_etcd_range *range)
{
	if (range == NULL)
		return;
	for (size_t i = 0; range->kvs != NULL && i < range->count; i++)
		kvs_etcd_kv_free(&range->kvs[i]);
	free(range->kvs);
	free(range);
}

/* The "kvs" of a range answer into @range (count_only: only "count"). */
static int parse_range(json_t *answer, bool count_only,
		       struct kvs_etcd_range *range)
{
	json_t *kvs = json_object_get(answer, "kvs");
	int64_t count;
	size_t n;

	if (kvs_etcd_parse_header(answer, &range->header) ||
	    kvs_etcd_json_int64(answer, "count", &count) || count < 0)
		return -KVS_EPROTO;
	if (count_only) {
		range->count = (size_t)count;
		return 0;
	}
	if (kvs != NULL && !json_is_array(kvs))
		return -KVS_EPROTO;
	n = json_array_size(kvs);
	range->kvs = calloc(n ? n : 1, sizeof(*range->kvs));
	if (range->kvs == NULL)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		int err = kvs_etcd_parse_kv(json_array_get(kvs, i),
					    &range->kvs[i]);

		if (err)
			return err;
		range->count++;
	}
	return 0;
}

int kvs_etcd_get(struct kvs_etcd *etcd, const char *key, bool prefix,
		 bool count_only, struct kvs_etcd_range **out)
{
	json_t *request = range_request(key, prefix, count_only), *answer;
	struct kvs_etcd_range *range;
	int err;

	if (request == NULL)
		return -ENOMEM;
	err = post(etcd, "/v3/kv/range", request, &answer);
	json_decref(request);
	if (err)
		return err;
	range = calloc(1, sizeof(*range));
	err = range ? parse_range(answer, count_only, range) : -ENOMEM;
	json_decref(answer);
	if (err) {
		kvs_etcd_range_free(range);
		return err;
	}
	*out = range;
	return 0;
}

int kvs_etcd_delete(struct kvs_etcd *etcd, const char *key, bool prefix,
		    int64_t *deleted_out)
{
	json_t *request = range_request(key, prefix, false), *answer;
	int64_t deleted;
	int err;

	if (request == NULL)
		return -ENOMEM;
	err = post(etcd, "/v3/kv/deleterange", request, &answer);
	json_decref(request);
	if (err)
		return err;
	if (kvs_etcd_json_int64(answer, "deleted", &deleted))
		err = -KVS_EPROTO;
	json_decref(answer);
	if (!err && deleted_out)
		*deleted_out = deleted;
	return err;
}
