/*
 * metrics.c - the server's counters and the Prometheus text endpoint
 * (GET /metrics, libmicrohttpd on its own thread).  The loop updates the
 * counters with relaxed atomics; the HTTP thread reads them and asks the
 * store for its tier figures (kvs_store_stats_get is thread safe).
 * Metric names start with kvstash_; docs/PROTOCOL.md lists them.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <microhttpd.h>

#include "kvstash/error.h"
#include "kvstash/log.h"
#include "server_internal.h"

/* Upper bounds of the latency buckets, in microseconds. */
static const uint64_t lat_le_us[SRV_LAT_BUCKETS] = {
	10,   25,    50,    100,   250,	   500,	   1000,   2500,
	5000, 10000, 25000, 50000, 100000, 250000, 500000, 1000000,
};

void metrics_latency(struct srv_metrics *m, unsigned op, uint64_t ns)
{
	unsigned b = 0;

	while (b < SRV_LAT_BUCKETS && ns > lat_le_us[b] * 1000)
		b++;
	M_ADD(m->lat_bucket[op][b], 1);
	M_ADD(m->lat_sum_ns[op], ns);
}

struct text {
	char *buf;
	size_t len, cap;
	bool failed;
};

static void emit(struct text *t, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void emit(struct text *t, const char *fmt, ...)
{
	va_list ap;
	int n;

	for (;;) {
		if (t->failed)
			return;
		va_start(ap, fmt);
		n = vsnprintf(t->buf + t->len, t->cap - t->len, fmt, ap);
		va_end(ap);
		if (n >= 0 && (size_t)n < t->cap - t->len) {
			t->len += (size_t)n;
			return;
		}
		char *grown = realloc(t->buf, t->cap * 2);

		if (!grown) {
			t->failed = true;
			return;
		}
		t->buf = grown;
		t->cap *= 2;
	}
}

static void family(struct text *t, const char *name, const char *type,
		   const char *help)
{
	emit(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void per_op(struct text *t, const char *name, const char *help,
		   const uint64_t *v)
{
	family(t, name, "counter", help);
	for (unsigned op = 1; op < KVS_OP_COUNT; op++)
		emit(t, "%s{op=\"%s\"} %llu\n", name, kvs_proto_opcode_name(op),
		     (unsigned long long)M_GET(v[op]));
}

static void render(struct kvs_server *srv, struct text *t)
{
	struct srv_metrics *m = &srv->m;
	struct kvs_store_stats st;
	uint64_t hits = M_GET(m->get_hits), misses = M_GET(m->get_misses);
	static const char *const limits[4] = { "size", "batch", "inflight",
					       "connections" };

	kvs_store_stats_get(srv->opts.store, &st);
	per_op(t, "kvstash_requests_total", "Requests received, by opcode.",
	       m->requests);
	per_op(t, "kvstash_request_errors_total",
	       "Requests answered with an error, by opcode.", m->errors);
	per_op(t, "kvstash_received_bytes_total",
	       "Request bytes received (frame and payload), by opcode.",
	       m->bytes_in);
	per_op(t, "kvstash_sent_bytes_total",
	       "Object bytes sent in replies, by opcode.", m->bytes_out);
	family(t, "kvstash_request_duration_seconds", "histogram",
	       "Time from a request's arrival to its reply, by opcode.");
	for (unsigned op = 1; op < KVS_OP_COUNT; op++) {
		const char *name = kvs_proto_opcode_name(op);
		uint64_t cum = 0;

		for (unsigned b = 0; b <= SRV_LAT_BUCKETS; b++) {
			cum += M_GET(m->lat_bucket[op][b]);
			if (b < SRV_LAT_BUCKETS)
				emit(t,
				     "kvstash_request_duration_seconds_bucket{"
				     "op=\"%s\",le=\"%g\"} %llu\n",
				     name, (double)lat_le_us[b] / 1e6,
				     (unsigned long long)cum);
			else
				emit(t,
				     "kvstash_request_duration_seconds_bucket{"
				     "op=\"%s\",le=\"+Inf\"} %llu\n",
				     name, (unsigned long long)cum);
		}
		emit(t,
		     "kvstash_request_duration_seconds_sum{op=\"%s\"} %.9f\n"
		     "kvstash_request_duration_seconds_count{op=\"%s\"} "
		     "%llu\n",
		     name, (double)M_GET(m->lat_sum_ns[op]) / 1e9, name,
		     (unsigned long long)cum);
	}
	family(t, "kvstash_get_hits_total", "counter", "Blocks found by gets.");
	emit(t, "kvstash_get_hits_total %llu\n", (unsigned long long)hits);
	family(t, "kvstash_get_misses_total", "counter",
	       "Blocks asked for by gets and not found.");
	emit(t, "kvstash_get_misses_total %llu\n", (unsigned long long)misses);
	family(t, "kvstash_rndv_receives_total", "counter",
	       "Payloads received by rendezvous, by whether they went "
	       "with the store arena's UCX memory handle.");
	emit(t, "kvstash_rndv_receives_total{memh=\"arena\"} %llu\n",
	     (unsigned long long)M_GET(m->rndv_memh));
	emit(t, "kvstash_rndv_receives_total{memh=\"none\"} %llu\n",
	     (unsigned long long)M_GET(m->rndv_plain));
	family(t, "kvstash_hit_ratio", "gauge",
	       "Hits over blocks asked for by gets since start.");
	emit(t, "kvstash_hit_ratio %g\n",
	     hits + misses ? (double)hits / (double)(hits + misses) : 0.0);
	family(t, "kvstash_tier_blocks", "gauge", "Objects held, by tier.");
	emit(t, "kvstash_tier_blocks{tier=\"dram\"} %llu\n",
	     (unsigned long long)st.dram.blocks);
	emit(t, "kvstash_tier_blocks{tier=\"nvme\"} %llu\n",
	     (unsigned long long)st.nvme.blocks);
	family(t, "kvstash_tier_bytes", "gauge", "Object bytes held, by tier.");
	emit(t, "kvstash_tier_bytes{tier=\"dram\"} %llu\n",
	     (unsigned long long)st.dram.bytes);
	emit(t, "kvstash_tier_bytes{tier=\"nvme\"} %llu\n",
	     (unsigned long long)st.nvme.bytes);
	family(t, "kvstash_tier_capacity_bytes", "gauge", "Capacity, by tier.");
	emit(t, "kvstash_tier_capacity_bytes{tier=\"dram\"} %llu\n",
	     (unsigned long long)st.dram.capacity);
	emit(t, "kvstash_tier_capacity_bytes{tier=\"nvme\"} %llu\n",
	     (unsigned long long)st.nvme.capacity);
	family(t, "kvstash_evictions_total", "counter",
	       "Objects dropped from the store.");
	emit(t, "kvstash_evictions_total %llu\n",
	     (unsigned long long)st.evictions);
	family(t, "kvstash_spills_total", "counter",
	       "DRAM to NVMe writes on eviction.");
	emit(t, "kvstash_spills_total %llu\n", (unsigned long long)st.spills);
	family(t, "kvstash_corrupt_dropped_total", "counter",
	       "Objects that failed a check and were dropped.");
	emit(t, "kvstash_corrupt_dropped_total %llu\n",
	     (unsigned long long)st.corrupt_dropped);
	family(t, "kvstash_auth_failures_total", "counter",
	       "Refused authentications and unauthenticated requests.");
	emit(t, "kvstash_auth_failures_total %llu\n",
	     (unsigned long long)M_GET(m->auth_failures));
	family(t, "kvstash_refused_total", "counter",
	       "Requests refused by a limit, by limit.");
	for (unsigned i = 0; i < 4; i++)
		emit(t, "kvstash_refused_total{limit=\"%s\"} %llu\n", limits[i],
		     (unsigned long long)M_GET(m->refused[i]));
	family(t, "kvstash_protocol_errors_total", "counter",
	       "Malformed frames (each closed its connection).");
	emit(t, "kvstash_protocol_errors_total %llu\n",
	     (unsigned long long)M_GET(m->protocol_errors));
	family(t, "kvstash_connections", "gauge", "Open connections.");
	emit(t, "kvstash_connections %llu\n",
	     (unsigned long long)M_GET(m->connections));
	family(t, "kvstash_connections_total", "counter",
	       "Connections accepted since start.");
	emit(t, "kvstash_connections_total %llu\n",
	     (unsigned long long)M_GET(m->connections_total));
	family(t, "kvstash_tails", "gauge", "Residual tails held.");
	emit(t, "kvstash_tails %llu\n", (unsigned long long)M_GET(m->tails));
	family(t, "kvstash_tail_bytes", "gauge", "Bytes of residual tails.");
	emit(t, "kvstash_tail_bytes %llu\n",
	     (unsigned long long)M_GET(m->tail_bytes));
	family(t, "kvstash_tails_expired_total", "counter",
	       "Residual tails dropped at the end of their time to live.");
	emit(t, "kvstash_tails_expired_total %llu\n",
	     (unsigned long long)M_GET(m->tails_expired));
}

static enum MHD_Result on_http(void *cls, struct MHD_Connection *conn,
			       const char *url, const char *method,
			       const char *version, const char *upload_data,
			       size_t *upload_data_size, void **con_cls)
{
	struct kvs_server *srv = cls;
	struct text t = { .cap = 16384 };
	struct MHD_Response *resp;
	enum MHD_Result ret;
	unsigned code = MHD_HTTP_OK;

	if (strcmp(method, "GET") != 0)
		return MHD_NO;
	t.buf = malloc(t.cap);
	if (!t.buf)
		return MHD_NO;
	if (strcmp(url, "/metrics") == 0) {
		render(srv, &t);
	} else {
		code = MHD_HTTP_NOT_FOUND;
		emit(&t, "not found: try /metrics\n");
	}
	if (t.failed) {
		free(t.buf);
		return MHD_NO;
	}
	resp = MHD_create_response_from_buffer(t.len, t.buf,
					       MHD_RESPMEM_MUST_FREE);
	if (!resp) {
		free(t.buf);
		return MHD_NO;
	}
	MHD_add_response_header(resp, "Content-Type",
				"text/plain; version=0.0.4");
	ret = MHD_queue_response(conn, code, resp);
	MHD_destroy_response(resp);
	return ret;
}

int metrics_start(struct kvs_server *srv, const char *addr)
{
	struct sockaddr_storage ss;
	socklen_t slen;
	const union MHD_DaemonInfo *info;
	struct MHD_Daemon *d;

	if (kvs_ucx_parse_addr(addr, &ss, &slen)) {
		kvs_log(KVS_LOG_ERR, "kvstashd: bad metrics address '%s'",
			addr);
		return -KVS_EPARAM;
	}
	d = MHD_start_daemon(
		MHD_USE_INTERNAL_POLLING_THREAD |
			(ss.ss_family == AF_INET6 ? MHD_USE_IPv6 : 0),
		0, NULL, NULL, on_http, srv, MHD_OPTION_SOCK_ADDR,
		(struct sockaddr *)&ss,
		/* a restart at once gets the port back (see kvs_ucx_init) */
		MHD_OPTION_LISTENING_ADDRESS_REUSE, (unsigned int)1,
		MHD_OPTION_END);
	if (!d) {
		kvs_log(KVS_LOG_ERR, "kvstashd: metrics on %s: cannot listen",
			addr);
		return -EADDRINUSE;
	}
	info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
	srv->metrics_port = info ? info->port : 0;
	srv->http = d;
	return 0;
}

void metrics_stop(struct kvs_server *srv)
{
	if (srv->http)
		MHD_stop_daemon(srv->http);
	srv->http = NULL;
}
