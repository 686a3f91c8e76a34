/*
 * etcd_harness.h - a real etcd (Debian's etcd-server) for the cluster
 * tests: one member on free loopback ports with a fresh data directory,
 * started, killed, paused, restarted (on the same ports, with its data or
 * from empty data) and removed by the test.
 *
 * The etcd binary is $KVS_ETCD, else /usr/bin/etcd, else etcd on PATH.
 * The child gets SIGKILL when the test process dies, so a crashed test
 * leaves no etcd behind; its log is <dir>/etcd.log.
 */
#ifndef KVS_TEST_ETCD_HARNESS_H
#define KVS_TEST_ETCD_HARNESS_H

#include <limits.h>
#include <stdbool.h>
#include <sys/types.h>

struct test_etcd {
	pid_t pid; /* 0 while not running */
	bool paused;
	int client_port, peer_port;
	char hosts[256]; /* more addresses it serves clients on, "A,B" */
	char dir[PATH_MAX]; /* holds data/ and etcd.log */
	char endpoint[64]; /* "http://127.0.0.1:<client_port>" */
};

/* The etcd binary, or NULL when the machine has none. */
const char *test_etcd_binary(void);

/* A loopback TCP port nobody listens on now, or -1. */
int test_free_port(void);

/* Starts a new etcd (new directory, new ports) and waits until it
 * answers /health.  0 or -1 (with a message on stderr). */
int test_etcd_start(struct test_etcd *etcd);

/* The same, serving clients on the addresses @hosts ("A,B": interfaces
 * of this host) too, on the same port. */
int test_etcd_start_on(struct test_etcd *etcd, const char *hosts);

/* SIGKILL, and waits for it; the data stays. */
void test_etcd_kill(struct test_etcd *etcd);

/* SIGSTOP / SIGCONT: an etcd that holds its connections but answers
 * nothing. */
void test_etcd_pause(struct test_etcd *etcd);
void test_etcd_resume(struct test_etcd *etcd);

/* Starts the killed etcd again on the same ports, from its data or, with
 * @wipe, from empty data (a new cluster).  0 or -1. */
int test_etcd_restart(struct test_etcd *etcd, bool wipe);

/* Compacts etcd's history up to @revision (POST /v3/kv/compaction,
 * physical).  0 or -1. */
int test_etcd_compact(struct test_etcd *etcd, long long revision);

/* Kills it and removes its directory.  Safe on a stopped one. */
void test_etcd_destroy(struct test_etcd *etcd);

#endif
