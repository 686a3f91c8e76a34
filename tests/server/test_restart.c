/*
 * test_restart.c - kvstashd started again at once on the ports it had,
 * and clients riding through the restart.
 *
 * Before it stops, the daemon is made to close connections itself: a
 * refused key, a malformed frame, a /metrics fetch, and (SIGTERM) an idle
 * client it drains.  Those leave TIME_WAIT entries on its ports (checked
 * in /proc/net/tcp, so that the restart below meets them); it is then
 * killed with -9 or stopped with SIGTERM and started again on the same
 * ports straight away, which must succeed, while a second daemon on a
 * port in use is still refused.  Clients connected before the restart go
 * on without connecting again: calls in flight at the crash are sent again
 * where that is safe (get, lookup, put) and fail with -KVS_ECONN where it
 * is not (delete), calls made while the daemon is down wait for it within
 * their timeout, and past it fail in bounded time.  A SIGTERM under a
 * steady load of gets and durable puts: the drain ends once the calls
 * begun are answered, and the same clients go on with the next daemon,
 * never reading wrong bytes.
 */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "kvstash/client.h"
#include "kvstash/error.h"
#include "kvstash/runtime.h"
#include "service_util.h"

#define N_BLOCKS 8

struct set {
	uint8_t *obj[N_BLOCKS];
	size_t len[N_BLOCKS];
	struct kvs_store_key key[N_BLOCKS];
};

static void set_make(struct set *s, uint64_t seed)
{
	for (int i = 0; i < N_BLOCKS; i++)
		s->obj[i] = make_block(seed + (uint64_t)i, 0, 2, 128,
				       &s->len[i], &s->key[i]);
}

static void set_free(struct set *s)
{
	for (int i = 0; i < N_BLOCKS; i++)
		free(s->obj[i]);
}

static void put_all(struct kvs_client *c, const struct set *s)
{
	int res[N_BLOCKS];

	assert_int_equal(kvs_client_put(c, (const uint8_t *const *)s->obj,
					s->len, N_BLOCKS,
					KVS_DURABILITY_DURABLE, res),
			 0);
	for (int i = 0; i < N_BLOCKS; i++)
		assert_int_equal(res[i], 0);
}

/* Every block of @s reads back byte for byte. */
static void check_all(struct kvs_client *c, const struct set *s)
{
	for (int i = 0; i < N_BLOCKS; i++) {
		size_t cap = s->len[i], got = 0;
		void *buf = malloc(cap);
		int res = -1;

		assert_non_null(buf);
		assert_int_equal(kvs_client_get(c, &s->key[i], 1, &buf, &cap,
						&got, &res),
				 0);
		assert_int_equal(res, 0);
		assert_int_equal(got, s->len[i]);
		assert_memory_equal(buf, s->obj[i], s->len[i]);
		free(buf);
	}
}

/* Sockets in TIME_WAIT whose local port is @port (IPv4 and IPv6). */
static int time_wait_on(int port)
{
	static const char *const tables[] = { "/proc/net/tcp",
					      "/proc/net/tcp6" };
	int n = 0;

	for (int t = 0; t < 2; t++) {
		FILE *f = fopen(tables[t], "r");
		char line[512];

		if (!f)
			continue;
		while (fgets(line, sizeof(line), f)) {
			char local[128];
			unsigned st;
			const char *colon;

			if (sscanf(line, " %*d: %127s %*s %x", local, &st) != 2)
				continue;
			colon = strrchr(local, ':');
			if (colon && st == 0x06 &&
			    strtol(colon + 1, NULL, 16) == port)
				n++;
		}
		fclose(f);
	}
	return n;
}

/* Connections the daemon closes itself: a refused key, a malformed
 * frame, a /metrics fetch (HTTP/1.0: the server closes). */
static void daemon_closes(const struct daemon *d)
{
	struct kvs_client *c = NULL;
	struct raw_client r;
	uint8_t frame[KVS_PROTO_HEADER_SIZE];
	size_t len;
	char *m;

	assert_int_equal(client_try(d, "mallory", &c), -KVS_EAUTH);
	assert_null(c);
	raw_connect(&r, d);
	len = raw_frame(frame, KVS_OP_STAT, 0, 0, 3);
	frame[0] ^= 0x55; /* bad magic: answered, then closed */
	(void)raw_exchange(&r, frame, len, NULL, 0, 5000);
	assert_true(raw_wait_closed(&r, 5000));
	raw_close(&r);
	m = metrics_fetch(d);
	assert_non_null(m);
	free(m);
}

/* A second kvstashd on @d's port, while @d runs: it must exit, refused. */
static void second_daemon_refused(const struct daemon *d)
{
	char listen[64], dir[700], log[700];
	uint64_t deadline = ms_now() + 15000;
	int status;
	pid_t pid;

	snprintf(listen, sizeof(listen), "127.0.0.1:%d", d->port);
	snprintf(dir, sizeof(dir), "%s/second", d->dir);
	snprintf(log, sizeof(log), "%s/second.log", d->dir);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		execl(getenv("KVSTASHD"), "kvstashd", "--listen", listen,
		      "--dir", dir, "--auth-key-file", d->keys, "--log-file",
		      log, (char *)NULL);
		_exit(127);
	}
	while (waitpid(pid, &status, WNOHANG) != pid) {
		if (ms_now() > deadline) {
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
			fail_msg("a second kvstashd on port %d kept running",
				 d->port);
		}
		usleep(10000);
	}
	assert_true(WIFEXITED(status));
	assert_int_not_equal(WEXITSTATUS(status), 0);
}

/* Stops @d with @sig and starts it again at once on the same ports. */
static void restart_same_ports(struct daemon *d, int sig)
{
	char metrics[64];
	const char *extra[] = { "--metrics", metrics, NULL };
	int port = d->port, metrics_port = d->metrics_port;
	uint64_t t0;

	assert_int_equal(daemon_stop(d, sig, 10000),
			 sig == SIGKILL ? 128 + SIGKILL : 0);
	snprintf(metrics, sizeof(metrics), "127.0.0.1:%d", metrics_port);
	d->fixed_port = port;
	t0 = ms_now();
	daemon_start(d, extra); /* fails the test if it cannot listen */
	print_message("restarted on port %d in %llu ms\n", port,
		      (unsigned long long)(ms_now() - t0));
	assert_int_equal(d->port, port);
	assert_int_equal(d->metrics_port, metrics_port);
}

static void restart_case(int sig, const char *name)
{
	const char *extra[] = { "--metrics", "127.0.0.1:0", NULL };
	struct daemon d;
	struct set s;
	struct kvs_client *alice, *idle;
	struct kvs_client_stat st;
	struct kvs_client_counters k;
	char *m;

	daemon_prepare(&d, name);
	daemon_start(&d, extra);
	set_make(&s, 7000);
	alice = client_of(&d, "alice", 0);
	put_all(alice, &s);
	idle = client_of(&d, "bob", 0);
	daemon_closes(&d);
	assert_true(time_wait_on(d.port) > 0);
	assert_true(time_wait_on(d.metrics_port) > 0);

	restart_same_ports(&d, sig);
	second_daemon_refused(&d);
	m = metrics_fetch(&d);
	assert_non_null(m);
	free(m);
	/* both clients ride through: no new connect */
	check_all(alice, &s);
	assert_int_equal(kvs_client_stat(idle, &st), 0);
	kvs_client_counters(alice, &k);
	assert_true(k.reconnects >= 1);
	kvs_client_close(idle);
	kvs_client_close(alice);

	/* and again, right after the refused and malformed ones */
	daemon_closes(&d);
	assert_true(time_wait_on(d.port) > 0);
	restart_same_ports(&d, sig);
	alice = client_of(&d, "alice", 0);
	check_all(alice, &s);
	kvs_client_close(alice);
	assert_int_equal(daemon_stop(&d, SIGTERM, 10000), 0);
	set_free(&s);
	daemon_cleanup(&d);
}

static void test_restart_kill9_same_port(void **state)
{
	(void)state;
	restart_case(SIGKILL, "restart-kill9");
}

static void test_restart_sigterm_same_port(void **state)
{
	(void)state;
	restart_case(SIGTERM, "restart-term");
}

/*
 * Requests in flight when the daemon dies: the daemon is stopped
 * (SIGSTOP) so that they stay in flight, then killed and started again.
 * The get, the lookup and the put are sent again and succeed; the delete
 * fails with -KVS_ECONN (it may have been carried out); a get made while
 * the daemon is down waits for it.
 */
static void test_in_flight_across_restart(void **state)
{
	struct daemon d;
	struct set s;
	struct kvs_client *c;
	struct kvs_client_req *get_h, *lookup_h, *put_h, *del_h, *down_h;
	struct kvs_client_counters k;
	size_t cap[2] = { 0 }, got[2] = { 0 }, prefix = 99;
	void *buf[2];
	int get_res = -1, put_res = -1, del_res = 0, down_res = -1;
	uint32_t layer = 0;

	(void)state;
	daemon_prepare(&d, "inflight");
	daemon_start(&d, NULL);
	set_make(&s, 8000);
	c = client_of(&d, "alice", 0);
	put_all(c, &s);
	for (int i = 0; i < 2; i++) {
		cap[i] = s.len[i];
		buf[i] = malloc(cap[i]);
		assert_non_null(buf[i]);
	}
	kill(d.pid, SIGSTOP);
	assert_int_equal(kvs_client_get_async(c, &s.key[0], 1, &buf[0], &cap[0],
					      &got[0], &get_res, NULL, NULL,
					      &get_h),
			 0);
	assert_int_equal(
		kvs_client_lookup_async(
			c, (const uint8_t(*)[KVS_ID_SIZE])s.key[0].span_id, 1,
			&layer, 1, &prefix, NULL, NULL, &lookup_h),
		0);
	assert_int_equal(
		kvs_client_put_async(
			c, (const uint8_t *const *)&s.obj[N_BLOCKS - 1],
			&s.len[N_BLOCKS - 1], 1, KVS_DURABILITY_DURABLE,
			&put_res, NULL, NULL, &put_h),
		0);
	assert_int_equal(kvs_client_delete_async(c, &s.key[N_BLOCKS - 2], 1,
						 &del_res, NULL, NULL, &del_h),
			 0);
	usleep(200000); /* sent, not answered */
	assert_int_equal(daemon_stop(&d, SIGKILL, 5000), 128 + SIGKILL);
	usleep(200000); /* the client sees the connection go */
	assert_int_equal(kvs_client_get_async(c, &s.key[1], 1, &buf[1], &cap[1],
					      &got[1], &down_res, NULL, NULL,
					      &down_h),
			 0);
	d.fixed_port = d.port;
	daemon_start(&d, NULL);

	assert_int_equal(kvs_client_wait(get_h), 0);
	assert_int_equal(get_res, 0);
	assert_memory_equal(buf[0], s.obj[0], s.len[0]);
	assert_int_equal(kvs_client_wait(lookup_h), 0);
	assert_int_equal(prefix, 1);
	assert_int_equal(kvs_client_wait(put_h), 0);
	assert_int_equal(put_res, 0);
	assert_int_equal(kvs_client_wait(del_h), -KVS_ECONN);
	assert_int_equal(kvs_client_wait(down_h), 0);
	assert_int_equal(down_res, 0);
	assert_memory_equal(buf[1], s.obj[1], s.len[1]);
	kvs_client_counters(c, &k);
	assert_true(k.reconnects >= 1);
	assert_true(k.retries >= 3);
	check_all(c, &s); /* the delete never ran: the daemon was stopped */
	kvs_client_close(c);
	for (int i = 0; i < 2; i++)
		free(buf[i]);
	assert_int_equal(daemon_stop(&d, SIGTERM, 10000), 0);
	set_free(&s);
	daemon_cleanup(&d);
}

/* ---- a stop under load ----------------------------------------------- */

#define LOADERS 4

struct loader {
	const struct daemon *d;
	const struct set *s;
	volatile int *stop;
	uint64_t seed;
	unsigned ok, wrong, failed;
};

/* Gets of the set and durable puts of new blocks, one after the other,
 * until told to stop: a get either succeeds with the right bytes or
 * fails (the daemon is away). */
static void *load(void *arg)
{
	struct loader *l = arg;
	struct kvs_client *c = client_of(l->d, "alice", 2000);
	size_t cap = 0;
	void *buf;

	for (int i = 0; i < N_BLOCKS; i++)
		if (l->s->len[i] > cap)
			cap = l->s->len[i];
	buf = malloc(cap);
	for (unsigned n = 0; buf && !*l->stop; n++) {
		int i = (int)(n % N_BLOCKS), res = -1;
		size_t got = 0, c_cap = cap;

		if (n & 1) { /* a durable put of a new block: the disk's time */
			size_t len;
			struct kvs_store_key key;
			uint8_t *obj =
				make_block(l->seed + n, 0, 2, 128, &len, &key);

			if (kvs_client_put(c, (const uint8_t *const *)&obj,
					   &len, 1, KVS_DURABILITY_DURABLE,
					   &res) ||
			    res)
				l->failed++;
			free(obj);
			continue;
		}
		if (kvs_client_get(c, &l->s->key[i], 1, &buf, &c_cap, &got,
				   &res) ||
		    res)
			l->failed++;
		else if (got != l->s->len[i] || memcmp(buf, l->s->obj[i], got))
			l->wrong++;
		else
			l->ok++;
	}
	free(buf);
	kvs_client_close(c);
	return NULL;
}

/* The drain's time as the daemon's log states it at its stop ("drained
 * in N ms"), the last one; -1 if none. */
static long drain_ms(const char *log)
{
	FILE *f = fopen(log, "r");
	char line[512];
	long ms = -1;
	const char *p;

	assert_non_null(f);
	while (fgets(line, sizeof(line), f))
		if ((p = strstr(line, "drained in ")))
			ms = strtol(p + strlen("drained in "), NULL, 10);
	fclose(f);
	return ms;
}

static void test_stop_under_load(void **state)
{
	struct daemon d;
	struct set s;
	const char *info[] = { "--log-level", "info", NULL };
	struct loader l[LOADERS];
	pthread_t t[LOADERS];
	volatile int stop = 0;
	unsigned before = 0, after = 0;
	uint64_t t0, took;
	long drained;
	struct kvs_client *c;

	(void)state;
	daemon_prepare(&d, "stop-load");
	daemon_start(&d, info);
	set_make(&s, 9000);
	c = client_of(&d, "alice", 0);
	put_all(c, &s);
	kvs_client_close(c);
	for (int i = 0; i < LOADERS; i++) {
		l[i] = (struct loader){ .d = &d,
					.s = &s,
					.stop = &stop,
					.seed = 100000 * (uint64_t)(i + 1) };
		assert_int_equal(pthread_create(&t[i], NULL, load, &l[i]), 0);
	}
	usleep(500000);
	for (int i = 0; i < LOADERS; i++)
		before += l[i].ok;
	assert_true(before > 0);
	/* the drain waits only for the calls begun before the signal;
	 * the store's close after it is the disk's */
	t0 = ms_now();
	assert_int_equal(daemon_stop(&d, SIGTERM, 10000), 0);
	took = ms_now() - t0;
	drained = drain_ms(d.log);
	print_message("stopped under load in %llu ms, drained in %ld ms\n",
		      (unsigned long long)took, drained);
	assert_true(drained >= 0 && drained < 2500);
	d.fixed_port = d.port;
	daemon_start(&d, info);
	usleep(500000);
	stop = 1;
	for (int i = 0; i < LOADERS; i++) {
		assert_int_equal(pthread_join(t[i], NULL), 0);
		after += l[i].ok;
		assert_int_equal(l[i].wrong, 0);
	}
	assert_true(after > before); /* the same clients went on */
	assert_int_equal(daemon_stop(&d, SIGTERM, 10000), 0);
	set_free(&s);
	daemon_cleanup(&d);
}

/* A daemon down for longer than a call's timeout: the call fails with
 * -KVS_ECONN in bounded time; once the daemon is back, the same client
 * works again. */
static void test_down_past_timeout(void **state)
{
	struct daemon d;
	struct set s;
	struct kvs_client *c;
	size_t cap, got;
	void *buf;
	int res = -1, del_res;
	uint64_t t0, took;

	(void)state;
	daemon_prepare(&d, "down");
	daemon_start(&d, NULL);
	set_make(&s, 9000);
	c = client_of(&d, "alice", 1500);
	put_all(c, &s);
	assert_int_equal(daemon_stop(&d, SIGKILL, 5000), 128 + SIGKILL);
	cap = s.len[0];
	buf = malloc(cap);
	assert_non_null(buf);
	t0 = ms_now();
	assert_int_equal(
		kvs_client_get(c, &s.key[0], 1, &buf, &cap, &got, &res),
		-KVS_ECONN);
	took = ms_now() - t0;
	print_message("a get with the daemon down failed after %llu ms\n",
		      (unsigned long long)took);
	assert_true(took >= 1000 && took < 6000);
	assert_int_equal(kvs_client_delete(c, &s.key[0], 1, &del_res),
			 -KVS_ECONN);
	d.fixed_port = d.port;
	daemon_start(&d, NULL);
	check_all(c, &s);
	kvs_client_close(c);
	free(buf);
	assert_int_equal(daemon_stop(&d, SIGTERM, 10000), 0);
	set_free(&s);
	daemon_cleanup(&d);
}

/* The decode runtime's block store over a daemon that goes down: its
 * lookups and gets are misses at once (the runtime recomputes) and its
 * puts fail with -KVS_ECONN, none waits for the call's timeout; once the
 * daemon is back the blocks are found again, on the same connection
 * object, made again in the background. */
static void test_blockstore_misses_while_down(void **state)
{
	struct daemon d;
	struct set s;
	struct kvs_blockstore *bs;
	struct kvs_client *c;
	size_t cap = 0, got = 0, prefix = 99;
	void *buf;
	int res = 0, put_res = 0;
	uint32_t layer = 0;
	const uint8_t(*span)[KVS_ID_SIZE];
	uint64_t t0, deadline;

	(void)state;
	daemon_prepare(&d, "bsdown");
	daemon_start(&d, NULL);
	set_make(&s, 9500);
	span = (const uint8_t(*)[KVS_ID_SIZE])s.key[0].span_id;
	c = client_of(&d, "alice", 10000);
	put_all(c, &s); /* durable: the block store's puts are not */
	assert_int_equal(kvs_blockstore_remote(c, &bs), 0);
	assert_int_equal(daemon_stop(&d, SIGKILL, 5000), 128 + SIGKILL);
	usleep(200000); /* the client sees the connection go */
	cap = s.len[0];
	buf = malloc(cap);
	assert_non_null(buf);
	t0 = ms_now();
	assert_int_equal(kvs_blockstore_lookup(bs, span, 1, &layer, 1, &prefix),
			 0);
	assert_int_equal(prefix, 0);
	assert_int_equal(
		kvs_blockstore_get(bs, &s.key[0], 1, &buf, &cap, &got, &res),
		0);
	assert_int_equal(res, -KVS_ENOTFOUND);
	assert_int_equal(kvs_blockstore_put(bs,
					    (const uint8_t *const *)&s.obj[1],
					    &s.len[1], 1, &put_res),
			 -KVS_ECONN);
	assert_true(ms_now() - t0 < 2000);
	d.fixed_port = d.port;
	daemon_start(&d, NULL);
	deadline = ms_now() + 10000;
	do {
		usleep(20000);
		assert_int_equal(
			kvs_blockstore_lookup(bs, span, 1, &layer, 1, &prefix),
			0);
	} while (prefix == 0 && ms_now() < deadline);
	assert_int_equal(prefix, 1);
	assert_int_equal(
		kvs_blockstore_get(bs, &s.key[0], 1, &buf, &cap, &got, &res),
		0);
	assert_int_equal(res, 0);
	assert_memory_equal(buf, s.obj[0], s.len[0]);
	kvs_blockstore_release(bs);
	free(buf);
	assert_int_equal(daemon_stop(&d, SIGTERM, 10000), 0);
	set_free(&s);
	daemon_cleanup(&d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_restart_kill9_same_port,
					  daemons_reap),
		cmocka_unit_test_teardown(test_restart_sigterm_same_port,
					  daemons_reap),
		cmocka_unit_test_teardown(test_in_flight_across_restart,
					  daemons_reap),
		cmocka_unit_test_teardown(test_down_past_timeout, daemons_reap),
		cmocka_unit_test_teardown(test_stop_under_load, daemons_reap),
		cmocka_unit_test_teardown(test_blockstore_misses_while_down,
					  daemons_reap),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
