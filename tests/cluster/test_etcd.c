/*
 * test_etcd.c - the etcd client against a real etcd started by the test:
 * puts, ranges, deletes and binary values; leases; put-if-absent; the
 * prefix watch (events in order, nothing outside the prefix, a replay
 * from an old revision, a read again after compaction); failover
 * between endpoints; deadlines against a paused etcd; the watch resuming
 * after a restart without losing or repeating events, and reading again
 * after a restart from empty data.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "cluster_internal.h"
#include "etcd_harness.h"
#include "etcd_internal.h"
#include "kvstash/error.h"

#define TIMEOUT_MS 1000
#define SLACK_MS 1500 /* scheduling on a loaded 2-core machine */

static struct test_etcd server;

static int group_setup(void **state)
{
	if (test_etcd_binary() == NULL) {
		printf("etcd not installed (etcd-server): test skipped\n");
		exit(77);
	}
	return test_etcd_start(&server);
}

static int group_teardown(void **state)
{
	test_etcd_destroy(&server);
	return 0;
}

static struct kvs_etcd *client(const char *endpoints, unsigned timeout_ms)
{
	struct kvs_etcd *etcd;

	assert_int_equal(kvs_etcd_open(endpoints, timeout_ms, &etcd), 0);
	return etcd;
}

static int64_t revision_of(struct kvs_etcd *etcd)
{
	struct kvs_etcd_range *range;
	int64_t revision;

	assert_int_equal(kvs_etcd_get(etcd, "/", true, true, &range), 0);
	revision = range->header.revision;
	kvs_etcd_range_free(range);
	return revision;
}

static void test_kv(void **state)
{
	struct kvs_etcd *etcd = client(server.endpoint, TIMEOUT_MS);
	struct kvs_etcd_range *range;
	uint8_t binary[300];
	int64_t deleted;

	for (int i = 0; i < 300; i++)
		binary[i] = (uint8_t)(i * 7);
	assert_int_equal(kvs_etcd_put(etcd, "/t/kv/a", "one", 3, 0), 0);
	assert_int_equal(kvs_etcd_put(etcd, "/t/kv/b", binary, 300, 0), 0);
	assert_int_equal(kvs_etcd_put(etcd, "/t/kvx", "out", 3, 0), 0);

	assert_int_equal(kvs_etcd_get(etcd, "/t/kv/a", false, false, &range),
			 0);
	assert_int_equal(range->count, 1);
	assert_string_equal(range->kvs[0].key, "/t/kv/a");
	assert_int_equal(range->kvs[0].value_len, 3);
	assert_memory_equal(range->kvs[0].value, "one", 3);
	assert_true(range->kvs[0].mod_revision > 0);
	assert_true(range->header.revision >= range->kvs[0].mod_revision);
	kvs_etcd_range_free(range);

	assert_int_equal(kvs_etcd_get(etcd, "/t/kv/", true, false, &range), 0);
	assert_int_equal(range->count, 2); /* not /t/kvx */
	assert_string_equal(range->kvs[1].key, "/t/kv/b");
	assert_int_equal(range->kvs[1].value_len, 300);
	assert_memory_equal(range->kvs[1].value, binary, 300);
	kvs_etcd_range_free(range);

	assert_int_equal(kvs_etcd_get(etcd, "/t/kv/", true, true, &range), 0);
	assert_int_equal(range->count, 2);
	assert_null(range->kvs);
	kvs_etcd_range_free(range);

	assert_int_equal(kvs_etcd_get(etcd, "/t/none", false, false, &range),
			 0);
	assert_int_equal(range->count, 0);
	kvs_etcd_range_free(range);

	assert_int_equal(kvs_etcd_delete(etcd, "/t/kv/", true, &deleted), 0);
	assert_int_equal(deleted, 2);
	assert_int_equal(kvs_etcd_delete(etcd, "/t/kvx", false, &deleted), 0);
	assert_int_equal(deleted, 1);
	assert_int_equal(kvs_etcd_delete(etcd, "/t/kvx", false, &deleted), 0);
	assert_int_equal(deleted, 0);
	kvs_etcd_close(etcd);
}

static void test_lease(void **state)
{
	struct kvs_etcd *etcd = client(server.endpoint, TIMEOUT_MS);
	struct kvs_etcd_range *range;
	int64_t lease, ttl;

	assert_int_equal(kvs_etcd_lease_grant(etcd, 30, &lease), 0);
	assert_int_equal(kvs_etcd_put(etcd, "/t/lease/k", "v", 1, lease), 0);
	assert_int_equal(kvs_etcd_lease_keepalive(etcd, lease, &ttl), 0);
	assert_true(ttl > 0 && ttl <= 30);
	assert_int_equal(kvs_etcd_get(etcd, "/t/lease/k", false, false, &range),
			 0);
	assert_int_equal(range->count, 1);
	assert_true(range->kvs[0].lease == lease);
	kvs_etcd_range_free(range);

	/* revoking deletes the key at once */
	assert_int_equal(kvs_etcd_lease_revoke(etcd, lease), 0);
	assert_int_equal(kvs_etcd_get(etcd, "/t/lease/k", false, true, &range),
			 0);
	assert_int_equal(range->count, 0);
	kvs_etcd_range_free(range);
	assert_int_equal(kvs_etcd_lease_keepalive(etcd, lease, &ttl), -ENOENT);
	assert_int_equal(kvs_etcd_lease_revoke(etcd, lease), -ENOENT);
	/* a put under a lease that is gone is refused */
	assert_int_equal(kvs_etcd_put(etcd, "/t/lease/k", "v", 1, lease),
			 -ENOENT);
	kvs_etcd_close(etcd);
}

static void test_put_if_absent(void **state)
{
	struct kvs_etcd *etcd = client(server.endpoint, TIMEOUT_MS);
	struct kvs_etcd_kv existing;

	kvs_etcd_delete(etcd, "/t/txn", false, NULL);
	assert_int_equal(
		kvs_etcd_put_if_absent(etcd, "/t/txn", "first", 5, 0, NULL), 0);
	assert_int_equal(kvs_etcd_put_if_absent(etcd, "/t/txn", "second", 6, 0,
						&existing),
			 -EEXIST);
	assert_string_equal(existing.key, "/t/txn");
	assert_int_equal(existing.value_len, 5);
	assert_memory_equal(existing.value, "first", 5);
	kvs_etcd_kv_free(&existing);
	assert_int_equal(kvs_etcd_delete(etcd, "/t/txn", false, NULL), 0);
	assert_int_equal(
		kvs_etcd_put_if_absent(etcd, "/t/txn", "third", 5, 0, NULL), 0);
	kvs_etcd_close(etcd);
}

/* ---- watch ---- */

#define SEEN_MAX 256

struct seen {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct kvs_etcd *etcd; /* for resync reads */
	const char *prefix;
	size_t n;
	char key[SEEN_MAX][32];
	int type[SEEN_MAX];
	int64_t revision[SEEN_MAX];
	int connected; /* -1 never told */
	int ups, downs, resyncs;
};

static void seen_init(struct seen *s, struct kvs_etcd *etcd, const char *prefix)
{
	memset(s, 0, sizeof(*s));
	pthread_mutex_init(&s->lock, NULL);
	pthread_cond_init(&s->cond, NULL);
	s->etcd = etcd;
	s->prefix = prefix;
	s->connected = -1;
}

static void on_events(void *arg, const struct kvs_etcd_event *ev, size_t n)
{
	struct seen *s = arg;

	pthread_mutex_lock(&s->lock);
	for (size_t i = 0; i < n && s->n < SEEN_MAX; i++, s->n++) {
		snprintf(s->key[s->n], sizeof(s->key[0]), "%s", ev[i].kv.key);
		s->type[s->n] = ev[i].type;
		s->revision[s->n] = ev[i].kv.mod_revision;
	}
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
}

static void on_state(void *arg, bool connected)
{
	struct seen *s = arg;

	pthread_mutex_lock(&s->lock);
	s->connected = connected;
	s->ups += connected;
	s->downs += !connected;
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
}

static int64_t on_resync(void *arg)
{
	struct seen *s = arg;
	struct kvs_etcd_range *range;
	int64_t next;
	int err = kvs_etcd_get(s->etcd, s->prefix, true, true, &range);

	if (err)
		return err;
	next = range->header.revision + 1;
	kvs_etcd_range_free(range);
	pthread_mutex_lock(&s->lock);
	s->resyncs++;
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
	return next;
}

static const struct kvs_etcd_watch_ops seen_ops = {
	.events = on_events,
	.state = on_state,
	.resync = on_resync,
};

/* A watch of @prefix through @etcd from @from (0: from now), reporting to
 * @s. */
static struct kvs_etcd_watch *watch_into(struct seen *s, struct kvs_etcd *etcd,
					 const char *prefix, int64_t from,
					 unsigned probe_ms)
{
	struct kvs_etcd_watch *watch;

	seen_init(s, etcd, prefix);
	if (from == 0)
		from = revision_of(etcd) + 1;
	assert_int_equal(kvs_etcd_watch_start(etcd, prefix, from, probe_ms,
					      &seen_ops, s, &watch),
			 0);
	return watch;
}

/* Waits until @cond_expr holds (evaluated with s->lock held); returns how
 * long it took in ms, or -1 after @ms. */
#define SEEN_WAIT(s, cond_expr, ms)                                            \
	({                                                                     \
		int64_t t0_ = kvs_cluster_now_ms(), took_ = -1;                \
		pthread_mutex_lock(&(s)->lock);                                \
		while (!(cond_expr) && kvs_cluster_now_ms() - t0_ < (ms)) {    \
			pthread_mutex_unlock(&(s)->lock);                      \
			usleep(10 * 1000);                                     \
			pthread_mutex_lock(&(s)->lock);                        \
		}                                                              \
		if (cond_expr)                                                 \
			took_ = kvs_cluster_now_ms() - t0_;                    \
		pthread_mutex_unlock(&(s)->lock);                              \
		took_;                                                         \
	})

/* Events for @key so far; the caller holds s->lock or the watch has
 * stopped. */
static size_t count_key(struct seen *s, const char *key)
{
	size_t n = 0;

	for (size_t i = 0; i < s->n; i++)
		n += strcmp(s->key[i], key) == 0;
	return n;
}

static void test_watch_events(void **state)
{
	struct kvs_etcd *etcd = client(server.endpoint, TIMEOUT_MS);
	struct kvs_etcd_watch *watch;
	struct seen s;

	watch = watch_into(&s, etcd, "/t/w/", 0, 500);
	assert_true(SEEN_WAIT(&s, s.connected == 1, 5000) >= 0);
	assert_int_equal(kvs_etcd_put(etcd, "/t/w/a", "1", 1, 0), 0);
	assert_int_equal(kvs_etcd_put(etcd, "/t/wx", "no", 2, 0), 0);
	assert_int_equal(kvs_etcd_put(etcd, "/t/w/b", "2", 1, 0), 0);
	assert_int_equal(kvs_etcd_delete(etcd, "/t/w/a", false, NULL), 0);
	assert_true(SEEN_WAIT(&s, s.n >= 3, 5000) >= 0);
	usleep(200 * 1000); /* nothing more may come */
	kvs_etcd_watch_stop(watch);
	assert_int_equal(s.n, 3);
	assert_string_equal(s.key[0], "/t/w/a");
	assert_int_equal(s.type[0], KVS_ETCD_EVENT_PUT);
	assert_string_equal(s.key[1], "/t/w/b");
	assert_int_equal(s.type[1], KVS_ETCD_EVENT_PUT);
	assert_string_equal(s.key[2], "/t/w/a");
	assert_int_equal(s.type[2], KVS_ETCD_EVENT_DELETE);
	assert_true(s.revision[0] < s.revision[1]);
	assert_true(s.revision[1] < s.revision[2]);
	assert_int_equal(s.downs, 0);
	kvs_etcd_close(etcd);
}

/* A watch from an old revision replays what happened since. */
static void test_watch_from_revision(void **state)
{
	struct kvs_etcd *etcd = client(server.endpoint, TIMEOUT_MS);
	struct kvs_etcd_watch *watch;
	int64_t from = revision_of(etcd) + 1;
	struct seen s;

	for (int i = 0; i < 20; i++) {
		char key[32];

		snprintf(key, sizeof(key), "/t/r/%02d", i);
		assert_int_equal(kvs_etcd_put(etcd, key, "x", 1, 0), 0);
	}
	watch = watch_into(&s, etcd, "/t/r/", from, 500);
	assert_true(SEEN_WAIT(&s, s.n >= 20, 5000) >= 0);
	kvs_etcd_watch_stop(watch);
	for (int i = 0; i < 20; i++) {
		char key[32];

		snprintf(key, sizeof(key), "/t/r/%02d", i);
		assert_string_equal(s.key[i], key);
	}
	kvs_etcd_close(etcd);
}

/* The first endpoint refuses: calls and the watch go on to the next. */
static void test_failover(void **state)
{
	char endpoints[256];
	struct kvs_etcd *etcd, *plain;
	struct kvs_etcd_range *range;
	struct kvs_etcd_watch *watch;
	int dead = test_free_port();
	struct seen s;
	int64_t t0;

	/* the first endpoint refuses: the call goes on to the second */
	snprintf(endpoints, sizeof(endpoints), "http://127.0.0.1:%d,%s", dead,
		 server.endpoint);
	etcd = client(endpoints, TIMEOUT_MS);
	assert_int_equal(kvs_etcd_put(etcd, "/t/f", "1", 1, 0), 0);
	assert_int_equal(kvs_etcd_endpoint_current(etcd), 1);
	assert_int_equal(kvs_etcd_get(etcd, "/t/f", false, false, &range), 0);
	assert_int_equal(range->count, 1);
	kvs_etcd_range_free(range);
	kvs_etcd_close(etcd);

	/* a watch too: its first stream is refused, the next one holds */
	plain = client(server.endpoint, TIMEOUT_MS);
	etcd = client(endpoints, TIMEOUT_MS);
	watch = watch_into(&s, etcd, "/t/f/", revision_of(plain) + 1, 500);
	assert_true(SEEN_WAIT(&s, s.connected == 1, 5000) >= 0);
	assert_int_equal(kvs_etcd_put(plain, "/t/f/w", "1", 1, 0), 0);
	assert_true(SEEN_WAIT(&s, s.n == 1, 5000) >= 0);
	assert_string_equal(s.key[0], "/t/f/w");
	kvs_etcd_watch_stop(watch);
	kvs_etcd_close(etcd);
	kvs_etcd_close(plain);

	/* nobody listens: refused at once, not after the deadline */
	snprintf(endpoints, sizeof(endpoints),
		 "http://127.0.0.1:%d,http://127.0.0.1:%d", dead,
		 test_free_port());
	etcd = client(endpoints, 5000);
	t0 = kvs_cluster_now_ms();
	assert_int_equal(kvs_etcd_get(etcd, "/t/f", false, false, &range),
			 -ECONNREFUSED);
	assert_true(kvs_cluster_now_ms() - t0 < 1000);
	kvs_etcd_close(etcd);
}

/* A stopped etcd accepts connections and answers nothing: every call
 * ends at its deadline, and the watch notices through its probe. */
static void test_paused_etcd(void **state)
{
	struct kvs_etcd *etcd = client(server.endpoint, 700);
	struct kvs_etcd *second = client(server.endpoint, TIMEOUT_MS);
	struct kvs_etcd_range *range;
	struct kvs_etcd_watch *watch;
	int64_t t0, took, lease, paused_at;
	struct seen s;

	watch = watch_into(&s, second, "/t/p/", 0, 300);
	assert_true(SEEN_WAIT(&s, s.connected == 1, 5000) >= 0);
	test_etcd_pause(&server);
	paused_at = kvs_cluster_now_ms();

	t0 = kvs_cluster_now_ms();
	assert_int_equal(kvs_etcd_get(etcd, "/t/p/", true, false, &range),
			 -ETIMEDOUT);
	took = kvs_cluster_now_ms() - t0;
	printf("range against a stopped etcd: -ETIMEDOUT after %lld ms "
	       "(deadline 700)\n",
	       (long long)took);
	assert_true(took >= 650 && took <= 700 + SLACK_MS);
	t0 = kvs_cluster_now_ms();
	assert_int_equal(kvs_etcd_lease_grant(etcd, 5, &lease), -ETIMEDOUT);
	assert_true(kvs_cluster_now_ms() - t0 <= 700 + SLACK_MS);

	/* probe every 300 ms, its deadline 1000 ms */
	assert_true(SEEN_WAIT(&s, s.connected == 0,
			      300 + TIMEOUT_MS + SLACK_MS) >= 0);
	took = kvs_cluster_now_ms() - paused_at;
	printf("watch of a stopped etcd: disconnected %lld ms after the stop "
	       "(probe every 300 ms, deadline %d ms)\n",
	       (long long)took, TIMEOUT_MS);
	assert_true(took <= 300 + TIMEOUT_MS + SLACK_MS + 1400);

	test_etcd_resume(&server);
	assert_true(SEEN_WAIT(&s, s.connected == 1, 5000) >= 0);
	assert_int_equal(kvs_etcd_put(etcd, "/t/p/after", "1", 1, 0), 0);
	assert_true(SEEN_WAIT(&s, s.n >= 1, 5000) >= 0);
	assert_string_equal(s.key[0], "/t/p/after");
	kvs_etcd_watch_stop(watch);
	kvs_etcd_close(second);
	kvs_etcd_close(etcd);
}

/* Killed and restarted with its data: the watch resumes after the last
 * event it delivered, so nothing is lost or repeated. */
static void test_watch_survives_restart(void **state)
{
	struct kvs_etcd *etcd = client(server.endpoint, TIMEOUT_MS);
	struct kvs_etcd *watcher = client(server.endpoint, TIMEOUT_MS);
	struct kvs_etcd_range *range;
	struct kvs_etcd_watch *watch;
	int64_t t0;
	struct seen s;

	watch = watch_into(&s, watcher, "/t/s/", 0, 500);
	assert_int_equal(kvs_etcd_put(etcd, "/t/s/before", "1", 1, 0), 0);
	assert_true(SEEN_WAIT(&s, s.n == 1, 5000) >= 0);

	test_etcd_kill(&server);
	assert_true(SEEN_WAIT(&s, s.connected == 0, 2000) >= 0);
	t0 = kvs_cluster_now_ms();
	assert_int_equal(kvs_etcd_get(etcd, "/t/s/", true, false, &range),
			 -ECONNREFUSED);
	assert_true(kvs_cluster_now_ms() - t0 < TIMEOUT_MS);

	assert_int_equal(test_etcd_restart(&server, false), 0);
	assert_int_equal(kvs_etcd_put(etcd, "/t/s/after", "2", 1, 0), 0);
	assert_true(SEEN_WAIT(&s, s.n >= 2, 5000) >= 0);
	assert_true(SEEN_WAIT(&s, s.connected == 1, 5000) >= 0);
	usleep(300 * 1000);
	kvs_etcd_watch_stop(watch);
	assert_int_equal(count_key(&s, "/t/s/before"), 1);
	assert_int_equal(count_key(&s, "/t/s/after"), 1);
	assert_int_equal(s.resyncs, 0);
	assert_true(s.ups >= 2);
	kvs_etcd_close(watcher);
	kvs_etcd_close(etcd);
}

/* Restarted from empty data, etcd's revisions start again below what the
 * watch saw: the watch asks its owner to read again, then goes on. */
static void test_watch_resyncs_after_data_loss(void **state)
{
	struct kvs_etcd *etcd = client(server.endpoint, TIMEOUT_MS);
	struct kvs_etcd *watcher = client(server.endpoint, TIMEOUT_MS);
	struct kvs_etcd_watch *watch;
	struct seen s;

	watch = watch_into(&s, watcher, "/t/d/", 0, 500);
	for (int i = 0; i < 10; i++)
		assert_int_equal(kvs_etcd_put(etcd, "/t/d/k", "1", 1, 0), 0);
	assert_true(SEEN_WAIT(&s, s.n == 10, 5000) >= 0);

	assert_int_equal(test_etcd_restart(&server, true), 0);
	assert_true(SEEN_WAIT(&s, s.resyncs >= 1, 10000) >= 0);
	assert_true(SEEN_WAIT(&s, s.connected == 1, 5000) >= 0);
	assert_int_equal(kvs_etcd_put(etcd, "/t/d/new", "1", 1, 0), 0);
	assert_true(SEEN_WAIT(&s, count_key(&s, "/t/d/new") == 1, 5000) >= 0);
	kvs_etcd_watch_stop(watch);
	kvs_etcd_close(watcher);
	kvs_etcd_close(etcd);
}

/* A watch from a revision etcd compacted away: the owner reads again. */
static void test_watch_compacted(void **state)
{
	struct kvs_etcd *etcd = client(server.endpoint, TIMEOUT_MS);
	struct kvs_etcd_watch *watch;
	int64_t from = revision_of(etcd) + 1;
	struct seen s;

	for (int i = 0; i < 5; i++)
		assert_int_equal(kvs_etcd_put(etcd, "/t/c/k", "x", 1, 0), 0);
	assert_int_equal(test_etcd_compact(&server, revision_of(etcd)), 0);
	watch = watch_into(&s, etcd, "/t/c/", from, 500);
	assert_true(SEEN_WAIT(&s, s.resyncs == 1, 5000) >= 0);
	assert_int_equal(kvs_etcd_put(etcd, "/t/c/after", "y", 1, 0), 0);
	assert_true(SEEN_WAIT(&s, s.n >= 1, 5000) >= 0);
	kvs_etcd_watch_stop(watch);
	/* nothing from the compacted history, the new put once */
	assert_int_equal(s.n, 1);
	assert_string_equal(s.key[0], "/t/c/after");
	assert_int_equal(s.resyncs, 1);
	kvs_etcd_close(etcd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_kv),
		cmocka_unit_test(test_lease),
		cmocka_unit_test(test_put_if_absent),
		cmocka_unit_test(test_watch_events),
		cmocka_unit_test(test_watch_from_revision),
		cmocka_unit_test(test_watch_compacted),
		cmocka_unit_test(test_failover),
		cmocka_unit_test(test_paused_etcd),
		cmocka_unit_test(test_watch_survives_restart),
		cmocka_unit_test(test_watch_resyncs_after_data_loss),
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
