/*
 * service_util.c - daemons, key files, blocks and raw frames for the
 * daemon tests (service_util.h).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <setjmp.h>
#include <stdarg.h>
#include <cmocka.h>

#include "common/bytes.h"
#include "common/rng.h"
#include "service_util.h"
#include "transport/keyfile.h"

static const char *const tenant_lines[] = {
	"alice 000102030405060708090a0b0c0d0e0f",
	"bob 101112131415161718191a1b1c1d1e1f",
	"carol 202122232425262728292a2b2c2d2e2f",
};

/* Daemons and directories still live: a failed assertion leaves the
 * test through a long jump, so the teardown reaps them from here. */
#define LIVE_MAX 16
static struct {
	pid_t pid;
	char dir[512];
} live[LIVE_MAX];

static void live_set(const struct daemon *d)
{
	int free_slot = -1;

	for (int i = 0; i < LIVE_MAX; i++) {
		if (strcmp(live[i].dir, d->dir) == 0) {
			live[i].pid = d->pid;
			return;
		}
		if (free_slot < 0 && live[i].dir[0] == '\0')
			free_slot = i;
	}
	if (free_slot >= 0) {
		live[free_slot].pid = d->pid;
		strcpy(live[free_slot].dir, d->dir);
	}
}

static void rm_dir(const char *dir)
{
	char cmd[700];

	if (getenv("KVS_TEST_KEEP"))
		return;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", dir);
}

int daemons_reap(void **state)
{
	for (int i = 0; i < LIVE_MAX; i++) {
		if (live[i].pid > 0) {
			kill(live[i].pid, SIGKILL);
			waitpid(live[i].pid, NULL, 0);
		}
		if (live[i].dir[0])
			rm_dir(live[i].dir);
		live[i].pid = 0;
		live[i].dir[0] = '\0';
	}
	return 0;
}

uint64_t ms_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void write_text(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	fputs(text, f);
	assert_int_equal(fclose(f), 0);
}

void daemon_prepare(struct daemon *d, const char *name)
{
	const char *base = getenv("KVS_TEST_DIR");
	char path[700];

	memset(d, 0, sizeof(*d));
	d->pid = -1;
	snprintf(d->dir, sizeof(d->dir), "%s/svc-%s-%d-XXXXXX",
		 base ? base : "/tmp", name, (int)getpid());
	assert_non_null(mkdtemp(d->dir));
	snprintf(d->store, sizeof(d->store), "%s/store", d->dir);
	snprintf(d->keys, sizeof(d->keys), "%s/keys", d->dir);
	snprintf(d->log, sizeof(d->log), "%s/kvstashd.log", d->dir);
	snprintf(path, sizeof(path), "%s\n%s\n%s\n", tenant_lines[0],
		 tenant_lines[1], tenant_lines[2]);
	write_text(d->keys, path);
	for (int i = 0; i < 3; i++) {
		char kp[700];

		snprintf(kp, sizeof(kp), "%s/key-%.*s", d->dir,
			 (int)strcspn(tenant_lines[i], " "), tenant_lines[i]);
		snprintf(path, sizeof(path), "%s\n", tenant_lines[i]);
		write_text(kp, path);
	}
	snprintf(path, sizeof(path), "%s/key-mallory", d->dir);
	write_text(path, "alice 0f0e0d0c0b0a09080706050403020100\n");
	live_set(d);
}

const char *key_path(const struct daemon *d, const char *tenant)
{
	static __thread char path[700];

	snprintf(path, sizeof(path), "%s/key-%s", d->dir, tenant);
	return path;
}

void daemon_start(struct daemon *d, const char *const *extra)
{
	const char *exe = getenv("KVSTASHD");
	const char *host = d->host ? d->host : "127.0.0.1";
	char ready[700], listen[300];
	const char *argv[64];
	int argc = 0;
	uint64_t deadline;
	FILE *f;

	assert_non_null(exe);
	snprintf(ready, sizeof(ready), "%s/ready", d->dir);
	snprintf(listen, sizeof(listen), "%s:%d", host, d->fixed_port);
	unlink(ready);
	if (d->netns) {
		argv[argc++] = "ip";
		argv[argc++] = "netns";
		argv[argc++] = "exec";
		argv[argc++] = d->netns;
	}
	argv[argc++] = exe;
	argv[argc++] = "--listen";
	argv[argc++] = listen;
	argv[argc++] = "--dir";
	argv[argc++] = d->store;
	argv[argc++] = "--auth-key-file";
	argv[argc++] = d->keys;
	argv[argc++] = "--namespace";
	argv[argc++] = "alice=a,bob=b,carol=a";
	argv[argc++] = "--dram-capacity";
	argv[argc++] = "64M";
	argv[argc++] = "--nvme-capacity";
	argv[argc++] = "256M";
	argv[argc++] = "--segment-size";
	argv[argc++] = "8M";
	argv[argc++] = "--ready-file";
	argv[argc++] = ready;
	argv[argc++] = "--log-file";
	argv[argc++] = d->log;
	for (int i = 0; extra && extra[i] && argc < 62; i++)
		argv[argc++] = extra[i];
	argv[argc] = NULL;
	d->pid = fork();
	assert_true(d->pid >= 0);
	if (d->pid == 0) {
		/* dies with the test, even one killed at its timeout */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (d->netns)
			execvp(argv[0], (char *const *)argv);
		else
			execv(exe, (char *const *)argv);
		_exit(127);
	}
	live_set(d);
	deadline = ms_now() + 15000;
	while (!(f = fopen(ready, "r"))) {
		int status;

		if (waitpid(d->pid, &status, WNOHANG) == d->pid) {
			d->pid = -1;
			fail_msg("kvstashd exited at start (see %s)", d->log);
		}
		if (ms_now() > deadline)
			fail_msg("kvstashd not ready after 15 s");
		usleep(10000);
	}
	assert_int_equal(fscanf(f, "%d %d", &d->port, &d->metrics_port), 2);
	fclose(f);
	snprintf(d->addr, sizeof(d->addr), "%s:%d", host, d->port);
}

int daemon_stop(struct daemon *d, int sig, int timeout_ms)
{
	uint64_t deadline = ms_now() + (uint64_t)timeout_ms;
	int status;

	if (d->pid <= 0)
		return -1;
	kill(d->pid, sig);
	for (;;) {
		pid_t p = waitpid(d->pid, &status, WNOHANG);

		if (p == d->pid)
			break;
		if (ms_now() > deadline) {
			kill(d->pid, SIGKILL);
			waitpid(d->pid, &status, 0);
			d->pid = -1;
			return -1;
		}
		usleep(5000);
	}
	d->pid = -1;
	live_set(d);
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	return 128 + WTERMSIG(status);
}

void daemon_cleanup(struct daemon *d)
{
	if (d->pid > 0)
		daemon_stop(d, SIGKILL, 5000);
	rm_dir(d->dir);
	for (int i = 0; i < LIVE_MAX; i++)
		if (strcmp(live[i].dir, d->dir) == 0)
			live[i].dir[0] = '\0';
}

int client_try_within(const struct daemon *d, const char *tenant,
		      uint32_t connect_timeout_ms, struct kvs_client **out)
{
	struct kvs_client_opts o;

	kvs_client_opts_default(&o);
	o.address = d->addr;
	o.key_file = key_path(d, tenant);
	if (connect_timeout_ms)
		o.connect_timeout_ms = connect_timeout_ms;
	o.timeout_ms = 10000;
	return kvs_client_connect(&o, out);
}

int client_try(const struct daemon *d, const char *tenant,
	       struct kvs_client **out)
{
	return client_try_within(d, tenant, 0, out);
}

struct kvs_client *client_of(const struct daemon *d, const char *tenant,
			     uint32_t timeout_ms)
{
	struct kvs_client_opts o;
	struct kvs_client *c = NULL;
	int err;

	kvs_client_opts_default(&o);
	o.address = d->addr;
	o.key_file = key_path(d, tenant);
	o.connect_timeout_ms = 30000;
	if (timeout_ms)
		o.timeout_ms = timeout_ms;
	err = kvs_client_connect(&o, &c);
	if (err)
		fail_msg("connect as %s: %s", tenant, kvs_strerror(err));
	return c;
}

static void fill_id(uint64_t seed, uint8_t id[KVS_ID_SIZE])
{
	struct kvs_rng rng = { .state = seed * 0x9e3779b97f4a7c15ull + 1 };

	for (int i = 0; i < KVS_ID_SIZE; i += 8)
		kvs_put64(id + i, kvs_rng_next(&rng));
}

uint8_t *make_block(uint64_t seed, uint32_t layer, uint32_t kv_heads,
		    uint32_t span, size_t *len, struct kvs_store_key *key)
{
	struct kvs_shape shape;
	struct kvs_ident ident = { .layer = layer };
	struct kvs_rng rng = { .state = seed * 31 + layer + 7 };
	size_t n = (size_t)kv_heads * span * 128;
	float *k = malloc(n * sizeof(float)), *v = malloc(n * sizeof(float));
	uint8_t *obj = NULL;

	assert_non_null(k);
	assert_non_null(v);
	for (size_t i = 0; i < n; i++) {
		k[i] = kvs_rng_normal(&rng);
		v[i] = kvs_rng_normal(&rng);
	}
	kvs_shape_default(&shape, (uint16_t)kv_heads, 128);
	shape.span = span;
	fill_id(seed, ident.block_id);
	memset(ident.model_fp, 0x5a, KVS_ID_SIZE);
	assert_int_equal(kvs_block_seal(&shape, &ident, KVS_DTYPE_F32, k, v, 0,
					&obj, len),
			 0);
	memcpy(key->span_id, ident.block_id, KVS_ID_SIZE);
	key->layer = layer;
	free(k);
	free(v);
	return obj;
}

uint8_t *make_tail(uint64_t seed, size_t *len)
{
	struct kvs_shape shape;
	struct kvs_ident ident = { .layer = 0 };
	float k[2 * 5 * 128], v[2 * 7 * 128];
	struct kvs_rng rng = { .state = seed + 11 };
	uint8_t *obj = NULL;

	for (size_t i = 0; i < sizeof(k) / sizeof(k[0]); i++)
		k[i] = kvs_rng_normal(&rng);
	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
		v[i] = kvs_rng_normal(&rng);
	kvs_shape_default(&shape, 2, 128);
	fill_id(seed, ident.block_id);
	assert_int_equal(kvs_tail_encode(&shape, &ident, KVS_DTYPE_F32, 5, 7, k,
					 v, 0, &obj, len),
			 0);
	return obj;
}

/* ---- raw frames ------------------------------------------------------ */

static void raw_on_error(void *arg, ucp_ep_h ep, ucs_status_t status)
{
	struct raw_client *r = arg;

	r->failed = true;
}

static ucs_status_t raw_on_reply(void *arg, const void *header,
				 size_t header_len, void *data, size_t len,
				 const ucp_am_recv_param_t *param)
{
	struct raw_client *r = arg;
	struct kvs_proto_frame f;

	if (kvs_proto_frame_decode(header, header_len, &f) == 0) {
		r->replies++;
		r->ok += f.status == 0;
		r->busy += f.status == -KVS_EBUSY;
	}
	if (header_len > sizeof(r->reply))
		header_len = sizeof(r->reply);
	memcpy(r->reply, header, header_len);
	r->reply_len = header_len;
	r->payload_len = len;
	r->got = true;
	return UCS_OK; /* payloads are dropped */
}

void raw_connect(struct raw_client *r, const struct daemon *d)
{
	struct sockaddr_storage ss;
	socklen_t slen;
	ucp_am_handler_param_t am = {
		.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID |
			      UCP_AM_HANDLER_PARAM_FIELD_CB |
			      UCP_AM_HANDLER_PARAM_FIELD_ARG,
		.id = KVS_PROTO_AM_REPLY,
		.cb = raw_on_reply,
		.arg = r,
	};
	ucp_ep_params_t ep = {
		.field_mask = UCP_EP_PARAM_FIELD_FLAGS |
			      UCP_EP_PARAM_FIELD_SOCK_ADDR |
			      UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
			      UCP_EP_PARAM_FIELD_ERR_HANDLER,
		.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER,
		.err_mode = UCP_ERR_HANDLING_MODE_PEER,
		.err_handler = { .cb = raw_on_error, .arg = r },
	};

	memset(r, 0, sizeof(*r));
	assert_int_equal(kvs_ucx_init(&r->ucx, false, false), 0);
	assert_int_equal(ucp_worker_set_am_recv_handler(r->ucx.worker, &am),
			 UCS_OK);
	assert_int_equal(kvs_ucx_parse_addr(d->addr, &ss, &slen), 0);
	ep.sockaddr.addr = (const struct sockaddr *)&ss;
	ep.sockaddr.addrlen = slen;
	assert_int_equal(ucp_ep_create(r->ucx.worker, &ep, &r->ep), UCS_OK);
}

size_t raw_frame(uint8_t *frame, uint16_t op, uint32_t count, uint32_t body_len,
		 uint64_t req_id)
{
	struct kvs_proto_frame f = {
		.version = KVS_PROTO_VERSION,
		.opcode = op,
		.req_id = req_id,
		.count = count,
		.body_len = body_len,
	};

	kvs_proto_header_encode(&f, frame);
	return KVS_PROTO_HEADER_SIZE + body_len;
}

int raw_exchange(struct raw_client *r, const void *frame, size_t frame_len,
		 const void *payload, size_t payload_len, int timeout_ms)
{
	ucp_request_param_t param = {
		.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
		.flags = UCP_AM_SEND_FLAG_REPLY,
	};
	uint64_t deadline = ms_now() + (uint64_t)timeout_ms;
	void *req;

	r->got = false;
	if (r->failed)
		return -KVS_ECONN;
	req = ucp_am_send_nbx(r->ep, KVS_PROTO_AM_REQUEST, frame, frame_len,
			      payload, payload_len, &param);
	while (UCS_PTR_IS_PTR(req) &&
	       ucp_request_check_status(req) == UCS_INPROGRESS &&
	       ms_now() < deadline && !r->failed)
		kvs_ucx_wait(&r->ucx, -1, 1);
	if (UCS_PTR_IS_PTR(req)) {
		if (ucp_request_check_status(req) == UCS_INPROGRESS)
			ucp_request_cancel(r->ucx.worker, req);
		ucp_request_free(req);
	}
	while (!r->got && !r->failed && ms_now() < deadline)
		kvs_ucx_wait(&r->ucx, -1, 5);
	if (r->got)
		return 0;
	return r->failed ? -KVS_ECONN : -KVS_ETIMEDOUT;
}

bool raw_wait_closed(struct raw_client *r, int timeout_ms)
{
	uint64_t deadline = ms_now() + (uint64_t)timeout_ms;

	while (!r->failed && ms_now() < deadline)
		kvs_ucx_wait(&r->ucx, -1, 5);
	return r->failed;
}

void raw_close(struct raw_client *r)
{
	ucp_request_param_t param = {
		.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
		.flags = UCP_EP_CLOSE_FLAG_FORCE,
	};

	if (r->ep)
		kvs_ucx_request_wait(r->ucx.worker,
				     ucp_ep_close_nbx(r->ep, &param));
	kvs_ucx_fini(&r->ucx);
}

int raw_auth(struct raw_client *r, const struct daemon *d, const char *tenant,
	     uint8_t mac_out[KVS_PROTO_MAC_SIZE])
{
	struct kvs_server_tenant t;
	struct kvs_proto_frame f;
	uint8_t frame[KVS_PROTO_MAX_FRAME], nonce[KVS_PROTO_NONCE_SIZE];
	size_t len, tlen;
	int err;

	assert_int_equal(kvs_keyfile_read_client(key_path(d, tenant), &t), 0);
	tlen = strlen(t.name);
	len = raw_frame(frame, KVS_OP_HELLO, 0, (uint32_t)(4 + tlen), 1);
	kvs_put16(frame + KVS_PROTO_HEADER_SIZE, (uint16_t)tlen);
	kvs_put16(frame + KVS_PROTO_HEADER_SIZE + 2, 0);
	memcpy(frame + KVS_PROTO_HEADER_SIZE + 4, t.name, tlen);
	err = raw_exchange(r, frame, len, NULL, 0, 5000);
	if (err)
		return err;
	assert_int_equal(kvs_proto_frame_decode(r->reply, r->reply_len, &f), 0);
	if (f.status)
		return f.status;
	memcpy(nonce, f.body, sizeof(nonce));
	len = raw_frame(frame, KVS_OP_AUTH, 0, KVS_PROTO_MAC_SIZE, 2);
	assert_int_equal(kvs_proto_auth_mac(t.key, t.key_len, nonce, t.name,
					    frame + KVS_PROTO_HEADER_SIZE),
			 0);
	if (mac_out)
		memcpy(mac_out, frame + KVS_PROTO_HEADER_SIZE,
		       KVS_PROTO_MAC_SIZE);
	err = raw_exchange(r, frame, len, NULL, 0, 5000);
	if (err)
		return err;
	assert_int_equal(kvs_proto_frame_decode(r->reply, r->reply_len, &f), 0);
	return f.status;
}

char *metrics_fetch(const struct daemon *d)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	char req[] = "GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n";
	size_t cap = 1 << 20, len = 0;
	char *buf = malloc(cap), *body;
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	ssize_t n;

	assert_non_null(buf);
	sa.sin_port = htons((uint16_t)d->metrics_port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) ||
	    write(fd, req, sizeof(req) - 1) != (ssize_t)(sizeof(req) - 1)) {
		if (fd >= 0)
			close(fd);
		free(buf);
		return NULL;
	}
	while (len + 1 < cap && (n = read(fd, buf + len, cap - 1 - len)) > 0)
		len += (size_t)n;
	close(fd);
	buf[len] = '\0';
	body = strstr(buf, "\r\n\r\n");
	if (!body || !strstr(buf, " 200 ")) {
		free(buf);
		return NULL;
	}
	memmove(buf, body + 4, strlen(body + 4) + 1);
	return buf;
}
