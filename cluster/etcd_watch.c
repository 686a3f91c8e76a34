/*
 * etcd_watch.c - a prefix watch over the gateway's streaming /v3/watch:
 * one POST whose answer is an endless sequence of JSON objects, parsed as
 * they arrive.
 *
 * One thread per watch drives a curl multi handle holding the stream and,
 * while the stream is up, a periodic count-only read of the prefix on the
 * same endpoint (the probe): a killed etcd breaks the stream at once, a
 * hung or cut-off one only fails the probe.  A broken stream is opened
 * again on the next endpoint after a back-off (50 ms doubling to 1 s),
 * from the revision after the last event delivered, so no event is lost
 * or repeated.  When etcd no longer holds that history (compaction, or a
 * revision behind what was seen: an etcd restarted from empty data), the
 * owner's resync callback reads the keys again.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "cluster_internal.h"
#include "etcd_internal.h"
#include "kvstash/error.h"
#include "kvstash/log.h"

#define BACKOFF_MIN_MS 50
#define BACKOFF_MAX_MS 1000
#define STREAM_MAX (64u << 20) /* unparsed bytes of one watch answer */

enum stream_end {
	STREAM_OPEN = 0,
	STREAM_BROKEN, /* try again, next endpoint */
	STREAM_RESYNC, /* history gone: read again */
};

struct kvs_etcd_watch {
	struct kvs_etcd *etcd;
	char *prefix;
	char *key_b64, *end_b64;
	unsigned probe_ms;
	const struct kvs_etcd_watch_ops *ops;
	void *arg;
	pthread_t thread;
	atomic_bool stop;
	CURLM *multi;
	struct curl_slist *headers;

	/* the stream; everything below is the watch thread's alone */
	CURL *stream;
	char *stream_body;
	unsigned endpoint; /* index of the stream's endpoint */
	char *pending; /* bytes received, not yet parsed */
	size_t pending_len;
	bool created;
	int64_t created_by; /* deadline of the "created" answer */
	enum stream_end end;
	int64_t next_revision;
	uint64_t cluster_id; /* of the etcd that answered; 0 unknown */
	int connected; /* last state reported: -1 none, 0, 1 */
	unsigned backoff_ms;
	bool resync;

	/* the probe */
	CURL *probe;
	char *probe_body;
	struct kvs_etcd_answer probe_answer;
	int64_t probe_at;
};

static void report_state(struct kvs_etcd_watch *w, bool connected)
{
	if (w->connected == (int)connected)
		return;
	w->connected = connected;
	w->ops->state(w->arg, connected);
}

/* ---- parsing the stream ---- */

static void events_free(struct kvs_etcd_event *events, size_t n)
{
	for (size_t i = 0; i < n; i++)
		kvs_etcd_kv_free(&events[i].kv);
	free(events);
}

/* The "events" of one answer, delivered to the owner. */
static int deliver_events(struct kvs_etcd_watch *w, json_t *list)
{
	size_t n = json_array_size(list), parsed = 0;
	struct kvs_etcd_event *events;
	int err = 0;

	if (n == 0)
		return 0;
	events = calloc(n, sizeof(*events));
	if (events == NULL)
		return -ENOMEM;
	for (; parsed < n; parsed++) {
		json_t *ev = json_array_get(list, parsed);
		json_t *type = json_object_get(ev, "type");

		/* The gateway omits the enum's zero, PUT. */
		events[parsed].type =
			json_is_string(type) && strcmp(json_string_value(type),
						       "DELETE") == 0
				? KVS_ETCD_EVENT_DELETE
				: KVS_ETCD_EVENT_PUT;
		err = kvs_etcd_parse_kv(json_object_get(ev, "kv"),
					&events[parsed].kv);
		if (err)
			break;
	}
	if (!err) {
		int64_t last = events[n - 1].kv.mod_revision;

		w->ops->events(w->arg, events, n);
		if (last >= w->next_revision)
			w->next_revision = last + 1;
	}
	events_free(events, parsed);
	return err;
}

/*
 * A history the watch cannot resume from: another etcd cluster, or one
 * whose revision is behind the last event seen (it lost its data).
 */
static bool history_lost(struct kvs_etcd_watch *w,
			 const struct kvs_etcd_header *h)
{
	if (w->cluster_id != 0 && h->cluster_id != 0 &&
	    h->cluster_id != w->cluster_id)
		return true;
	return h->revision < w->next_revision - 1;
}

/* One answer of the stream; sets w->end when the stream must close. */
static void handle_answer(struct kvs_etcd_watch *w, json_t *answer)
{
	json_t *result = json_object_get(answer, "result");
	struct kvs_etcd_header h;
	int64_t compacted;

	if (!json_is_object(result) || kvs_etcd_parse_header(result, &h) != 0) {
		kvs_log(KVS_LOG_DEBUG, "etcd watch: error or malformed answer");
		w->end = STREAM_BROKEN;
		return;
	}
	if (kvs_etcd_json_int64(result, "compact_revision", &compacted) == 0 &&
	    compacted > 0) {
		kvs_log(KVS_LOG_INFO,
			"etcd watch: revision %lld compacted (now %lld)",
			(long long)w->next_revision, (long long)compacted);
		w->end = STREAM_RESYNC;
		return;
	}
	if (json_is_true(json_object_get(result, "canceled"))) {
		w->end = STREAM_BROKEN;
		return;
	}
	if (json_is_true(json_object_get(result, "created"))) {
		if (history_lost(w, &h)) {
			kvs_log(KVS_LOG_WARN,
				"etcd watch: etcd at revision %lld lost the "
				"history up to %lld; reading again",
				(long long)h.revision,
				(long long)(w->next_revision - 1));
			w->end = STREAM_RESYNC;
			return;
		}
		w->cluster_id = h.cluster_id;
		w->created = true;
		w->backoff_ms = 0;
		w->probe_at = kvs_cluster_now_ms() + w->probe_ms;
		report_state(w, true);
	}
	if (deliver_events(w, json_object_get(result, "events")))
		w->end = STREAM_BROKEN;
}

/* Parses every complete answer in w->pending. */
static void parse_pending(struct kvs_etcd_watch *w)
{
	size_t used = 0;

	while (w->end == STREAM_OPEN) {
		json_error_t jerr;
		json_t *answer;

		while (used < w->pending_len &&
		       strchr(" \t\r\n", w->pending[used]) != NULL)
			used++;
		if (used == w->pending_len)
			break;
		answer = json_loadb(w->pending + used, w->pending_len - used,
				    JSON_DISABLE_EOF_CHECK, &jerr);
		if (answer == NULL) {
			/* An error at the very end is an answer not yet
			 * complete; anywhere else the stream is not JSON. */
			if ((size_t)jerr.position < w->pending_len - used) {
				kvs_log(KVS_LOG_DEBUG, "etcd watch: %s",
					jerr.text);
				w->end = STREAM_BROKEN;
			}
			break;
		}
		used += (size_t)jerr.position;
		handle_answer(w, answer);
		json_decref(answer);
	}
	memmove(w->pending, w->pending + used, w->pending_len - used);
	w->pending_len -= used;
}

static size_t stream_write(char *data, size_t size, size_t count, void *arg)
{
	struct kvs_etcd_watch *w = arg;
	size_t n = size * count;
	char *grown;

	if (w->end != STREAM_OPEN)
		return 0;
	if (w->pending_len + n > STREAM_MAX) {
		kvs_log(KVS_LOG_DEBUG, "etcd watch: answer over %u bytes",
			STREAM_MAX);
		w->end = STREAM_BROKEN;
		return 0;
	}
	grown = realloc(w->pending, w->pending_len + n);
	if (grown == NULL) {
		w->end = STREAM_BROKEN;
		return 0;
	}
	memcpy(grown + w->pending_len, data, n);
	w->pending = grown;
	w->pending_len += n;
	parse_pending(w);
	/* Returning less than @n makes curl end the transfer. */
	return w->end == STREAM_OPEN ? n : 0;
}

/* ---- the stream and the probe ---- */

static char *watch_body(struct kvs_etcd_watch *w)
{
	json_t *request;
	char revision[24];
	char *body;

	snprintf(revision, sizeof(revision), "%lld",
		 (long long)w->next_revision);
	request = json_pack("{s:{s:s,s:s,s:s}}", "create_request", "key",
			    w->key_b64, "range_end", w->end_b64,
			    "start_revision", revision);
	if (request == NULL)
		return NULL;
	body = json_dumps(request, JSON_COMPACT);
	json_decref(request);
	return body;
}

static void probe_close(struct kvs_etcd_watch *w)
{
	if (w->probe == NULL)
		return;
	curl_multi_remove_handle(w->multi, w->probe);
	curl_easy_cleanup(w->probe);
	w->probe = NULL;
	free(w->probe_answer.bytes);
	memset(&w->probe_answer, 0, sizeof(w->probe_answer));
}

static void stream_close(struct kvs_etcd_watch *w)
{
	probe_close(w);
	if (w->stream == NULL)
		return;
	curl_multi_remove_handle(w->multi, w->stream);
	curl_easy_cleanup(w->stream);
	w->stream = NULL;
	free(w->stream_body);
	w->stream_body = NULL;
	free(w->pending);
	w->pending = NULL;
	w->pending_len = 0;
}

/* A POST of @body to @path on the stream's endpoint, as an easy handle
 * (not yet added to the multi handle). */
static CURL *post_handle(struct kvs_etcd_watch *w, const char *path,
			 const char *body, long timeout_ms)
{
	CURL *curl = curl_easy_init();
	char url[KVS_ETCD_URL_MAX + 64];

	if (curl == NULL)
		return NULL;
	snprintf(url, sizeof(url), "%s%s",
		 kvs_etcd_endpoint_url(w->etcd, w->endpoint), path);
	curl_easy_setopt(curl, CURLOPT_URL, url);
	curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body);
	curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
	curl_easy_setopt(curl, CURLOPT_HTTPHEADER, w->headers);
	curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS,
			 (long)kvs_etcd_timeout_ms(w->etcd));
	curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, timeout_ms);
	curl_easy_setopt(curl, CURLOPT_TCP_KEEPALIVE, 1L);
	return curl;
}

static int stream_open(struct kvs_etcd_watch *w)
{
	w->stream_body = watch_body(w);
	if (w->stream_body == NULL)
		return -ENOMEM;
	w->endpoint = kvs_etcd_endpoint_current(w->etcd);
	w->stream = post_handle(w, "/v3/watch", w->stream_body, 0);
	if (w->stream == NULL) {
		free(w->stream_body);
		w->stream_body = NULL;
		return -ENOMEM;
	}
	curl_easy_setopt(w->stream, CURLOPT_WRITEFUNCTION, stream_write);
	curl_easy_setopt(w->stream, CURLOPT_WRITEDATA, w);
	w->end = STREAM_OPEN;
	w->created = false;
	w->created_by = kvs_cluster_now_ms() + kvs_etcd_timeout_ms(w->etcd);
	if (curl_multi_add_handle(w->multi, w->stream) != CURLM_OK) {
		stream_close(w);
		return -ENOMEM;
	}
	return 0;
}

static void probe_open(struct kvs_etcd_watch *w)
{
	w->probe = post_handle(w, "/v3/kv/range", w->probe_body,
			       (long)kvs_etcd_timeout_ms(w->etcd));
	if (w->probe == NULL)
		return;
	/* a count-only answer is small */
	w->probe_answer.max = 65536;
	curl_easy_setopt(w->probe, CURLOPT_WRITEFUNCTION,
			 kvs_etcd_answer_append);
	curl_easy_setopt(w->probe, CURLOPT_WRITEDATA, &w->probe_answer);
	if (curl_multi_add_handle(w->multi, w->probe) != CURLM_OK) {
		curl_easy_cleanup(w->probe);
		w->probe = NULL;
	}
}

/* The probe finished: etcd answers on the stream's endpoint, or the
 * stream is presumed dead. */
static void probe_done(struct kvs_etcd_watch *w, CURLcode rc)
{
	long status = 0;
	json_t *answer = NULL;
	struct kvs_etcd_header h;

	if (rc == CURLE_OK) {
		curl_easy_getinfo(w->probe, CURLINFO_RESPONSE_CODE, &status);
		answer = json_loadb(
			w->probe_answer.bytes ? w->probe_answer.bytes : "",
			w->probe_answer.len, 0, NULL);
	}
	if (status != 200 || kvs_etcd_parse_header(answer, &h) != 0) {
		kvs_log(KVS_LOG_DEBUG, "etcd watch: probe failed: %s",
			rc != CURLE_OK ? curl_easy_strerror(rc) : "bad answer");
		w->end = STREAM_BROKEN;
	} else if (history_lost(w, &h)) {
		w->end = STREAM_RESYNC;
	}
	json_decref(answer);
	probe_close(w);
	w->probe_at = kvs_cluster_now_ms() + w->probe_ms;
}

/* Handles the transfers curl finished. */
static void collect(struct kvs_etcd_watch *w)
{
	CURLMsg *msg;
	int left;

	while ((msg = curl_multi_info_read(w->multi, &left)) != NULL) {
		if (msg->msg != CURLMSG_DONE)
			continue;
		if (msg->easy_handle == w->probe) {
			probe_done(w, msg->data.result);
		} else if (msg->easy_handle == w->stream &&
			   w->end == STREAM_OPEN) {
			kvs_log(KVS_LOG_DEBUG, "etcd watch: stream ended: %s",
				curl_easy_strerror(msg->data.result));
			w->end = STREAM_BROKEN;
		}
	}
}

/* ---- the thread ---- */

static unsigned next_backoff(unsigned ms)
{
	ms = ms ? ms * 2 : BACKOFF_MIN_MS;
	return ms > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : ms;
}

/* Sleeps @ms unless stopped (curl_multi_wakeup ends the poll). */
static void pause_ms(struct kvs_etcd_watch *w, unsigned ms)
{
	int64_t until = kvs_cluster_now_ms() + ms;

	while (!atomic_load(&w->stop)) {
		int64_t left = until - kvs_cluster_now_ms();

		if (left <= 0)
			break;
		curl_multi_poll(w->multi, NULL, 0, (int)left, NULL);
	}
}

/* After a stream ended: report, fail over, back off. */
static void stream_ended(struct kvs_etcd_watch *w)
{
	enum stream_end end = w->end;

	stream_close(w);
	if (end == STREAM_RESYNC) {
		w->resync = true;
		return;
	}
	report_state(w, false);
	kvs_etcd_endpoint_failed(w->etcd, w->endpoint);
	w->backoff_ms = next_backoff(w->backoff_ms);
	pause_ms(w, w->backoff_ms);
}

/* How long poll may wait: until the next deadline of the stream. */
static int poll_ms(struct kvs_etcd_watch *w)
{
	int64_t now = kvs_cluster_now_ms();
	int64_t until = w->created ? w->probe_at : w->created_by;
	int64_t left = until - now;

	if (w->probe != NULL)
		left = 1000; /* the probe's own timeout ends it */
	if (left < 1)
		left = 1;
	return left > 1000 ? 1000 : (int)left;
}

static void step(struct kvs_etcd_watch *w)
{
	int running;

	curl_multi_poll(w->multi, NULL, 0, poll_ms(w), NULL);
	curl_multi_perform(w->multi, &running);
	collect(w);
	if (w->end == STREAM_OPEN && !w->created &&
	    kvs_cluster_now_ms() >= w->created_by) {
		kvs_log(KVS_LOG_DEBUG, "etcd watch: no answer in %u ms",
			kvs_etcd_timeout_ms(w->etcd));
		w->end = STREAM_BROKEN;
	}
	if (w->end == STREAM_OPEN && w->created && w->probe == NULL &&
	    kvs_cluster_now_ms() >= w->probe_at)
		probe_open(w);
}

static void *watch_thread(void *arg)
{
	struct kvs_etcd_watch *w = arg;

	while (!atomic_load(&w->stop)) {
		if (w->resync) {
			int64_t revision = w->ops->resync(w->arg);

			if (revision < 0) {
				report_state(w, false);
				w->backoff_ms = next_backoff(w->backoff_ms);
				pause_ms(w, w->backoff_ms);
				continue;
			}
			w->resync = false;
			w->next_revision = revision;
			w->cluster_id = 0;
		}
		if (w->stream == NULL && stream_open(w) != 0) {
			pause_ms(w, BACKOFF_MAX_MS);
			continue;
		}
		step(w);
		if (w->end != STREAM_OPEN)
			stream_ended(w);
	}
	stream_close(w);
	return NULL;
}

/* ---- start, stop ---- */

static void watch_free(struct kvs_etcd_watch *w)
{
	if (w->multi)
		curl_multi_cleanup(w->multi);
	curl_slist_free_all(w->headers);
	free(w->probe_body);
	free(w->end_b64);
	free(w->key_b64);
	free(w->prefix);
	free(w);
}

/* The encoded key, range end and probe body of @w->prefix. */
static int watch_bodies(struct kvs_etcd_watch *w)
{
	json_t *probe;
	char *end;
	size_t end_len;
	int err;

	w->key_b64 = kvs_etcd_b64_encode(w->prefix, strlen(w->prefix));
	if (w->key_b64 == NULL)
		return -ENOMEM;
	err = kvs_etcd_prefix_end(w->prefix, &end, &end_len);
	if (err)
		return err;
	w->end_b64 = kvs_etcd_b64_encode(end, end_len);
	free(end);
	if (w->end_b64 == NULL)
		return -ENOMEM;
	probe = json_pack("{s:s,s:s,s:b}", "key", w->key_b64, "range_end",
			  w->end_b64, "count_only", 1);
	if (probe == NULL)
		return -ENOMEM;
	w->probe_body = json_dumps(probe, JSON_COMPACT);
	json_decref(probe);
	return w->probe_body ? 0 : -ENOMEM;
}

int kvs_etcd_watch_start(struct kvs_etcd *etcd, const char *prefix,
			 int64_t start_revision, unsigned probe_ms,
			 const struct kvs_etcd_watch_ops *ops, void *arg,
			 struct kvs_etcd_watch **out)
{
	struct kvs_etcd_watch *w = calloc(1, sizeof(*w));
	int err = -ENOMEM;

	if (w == NULL)
		return -ENOMEM;
	w->etcd = etcd;
	w->ops = ops;
	w->arg = arg;
	w->probe_ms = probe_ms ? probe_ms : 1000;
	w->next_revision = start_revision;
	w->connected = -1;
	atomic_init(&w->stop, false);
	w->prefix = strdup(prefix);
	if (w->prefix == NULL)
		goto undo;
	err = watch_bodies(w);
	if (err)
		goto undo;
	err = -ENOMEM;
	w->headers = curl_slist_append(NULL, "Content-Type: application/json");
	w->multi = curl_multi_init();
	if (w->headers == NULL || w->multi == NULL)
		goto undo;
	err = -pthread_create(&w->thread, NULL, watch_thread, w);
	if (err)
		goto undo;
	*out = w;
	return 0;

undo:
	watch_free(w);
	return err;
}

void kvs_etcd_watch_stop(struct kvs_etcd_watch *watch)
{
	if (watch == NULL)
		return;
	atomic_store(&watch->stop, true);
	curl_multi_wakeup(watch->multi);
	pthread_join(watch->thread, NULL);
	watch_free(watch);
}
