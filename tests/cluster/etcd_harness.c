/*
 * etcd_harness.c - starts and stops the real etcd of the cluster tests
 * (etcd_harness.h): fork + exec with the child bound to our lifetime
 * (PR_SET_PDEATHSIG), readiness by polling /health through libcurl,
 * removal of the data directory with nftw.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>

#include "etcd_harness.h"

#define READY_MS 20000 /* etcd's start on a loaded machine */

const char *test_etcd_binary(void)
{
	static char found[PATH_MAX];
	const char *env = getenv("KVS_ETCD");
	const char *path = getenv("PATH");

	if (env != NULL && access(env, X_OK) == 0)
		return env;
	if (access("/usr/bin/etcd", X_OK) == 0)
		return "/usr/bin/etcd";
	while (path != NULL && *path != '\0') {
		const char *colon = strchr(path, ':');
		int len = colon ? (int)(colon - path) : (int)strlen(path);

		snprintf(found, sizeof(found), "%.*s/etcd", len, path);
		if (access(found, X_OK) == 0)
			return found;
		path = colon ? colon + 1 : NULL;
	}
	return NULL;
}

int test_free_port(void)
{
	struct sockaddr_in addr = { .sin_family = AF_INET };
	socklen_t len = sizeof(addr);
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	int port = -1;

	if (fd < 0)
		return -1;
	addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(fd, (struct sockaddr *)&addr, sizeof(addr)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&addr, &len) == 0)
		port = ntohs(addr.sin_port);
	close(fd);
	return port;
}

static long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

static size_t discard(char *data, size_t size, size_t count, void *arg)
{
	(void)data;
	(void)arg;
	return size * count;
}

/* Whether GET /health answers 200. */
static bool healthy(const char *endpoint)
{
	CURL *curl = curl_easy_init();
	char url[96];
	long status = 0;

	if (curl == NULL)
		return false;
	snprintf(url, sizeof(url), "%s/health", endpoint);
	curl_easy_setopt(curl, CURLOPT_URL, url);
	curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, 500L);
	curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, discard);
	if (curl_easy_perform(curl) == CURLE_OK)
		curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
	curl_easy_cleanup(curl);
	return status == 200;
}

static pid_t spawn(const struct test_etcd *etcd, const char *binary)
{
	char data[PATH_MAX + 8], log[PATH_MAX + 16];
	char client[64], peer[64], cluster[96], listen[1024];
	pid_t parent = getpid();
	pid_t pid;

	snprintf(data, sizeof(data), "%s/data", etcd->dir);
	snprintf(log, sizeof(log), "%s/etcd.log", etcd->dir);
	snprintf(client, sizeof(client), "http://127.0.0.1:%d",
		 etcd->client_port);
	snprintf(peer, sizeof(peer), "http://127.0.0.1:%d", etcd->peer_port);
	snprintf(cluster, sizeof(cluster), "kvs-test=%s", peer);
	snprintf(listen, sizeof(listen), "%s", client);
	for (const char *h = etcd->hosts; *h;) {
		size_t len = strcspn(h, ",");
		size_t at = strlen(listen);

		snprintf(listen + at, sizeof(listen) - at, ",http://%.*s:%d",
			 (int)len, h, etcd->client_port);
		h += len + (h[len] == ',');
	}
	pid = fork();
	if (pid != 0)
		return pid;
	/* The child: dies with the test, logs to the directory. */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(127);
	int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
	if (fd >= 0) {
		dup2(fd, 1);
		dup2(fd, 2);
		close(fd);
	}
	execl(binary, binary, "--name", "kvs-test", "--data-dir", data,
	      "--listen-client-urls", listen, "--advertise-client-urls", client,
	      "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
	      "--initial-cluster", cluster, "--initial-cluster-state", "new",
	      "--logger", "zap", "--log-outputs", "stderr", "--log-level",
	      "warn", (char *)NULL);
	_exit(127);
}

/* Runs etcd on the ports and directory of @etcd until healthy. */
static int run(struct test_etcd *etcd)
{
	const char *binary = test_etcd_binary();
	long until = now_ms() + READY_MS;

	if (binary == NULL) {
		fprintf(stderr, "etcd harness: no etcd binary\n");
		return -1;
	}
	snprintf(etcd->endpoint, sizeof(etcd->endpoint), "http://127.0.0.1:%d",
		 etcd->client_port);
	etcd->pid = spawn(etcd, binary);
	if (etcd->pid < 0) {
		etcd->pid = 0;
		perror("etcd harness: fork");
		return -1;
	}
	while (now_ms() < until) {
		int status;

		if (waitpid(etcd->pid, &status, WNOHANG) == etcd->pid) {
			fprintf(stderr, "etcd harness: etcd exited (see %s)\n",
				etcd->dir);
			etcd->pid = 0;
			return -1;
		}
		if (healthy(etcd->endpoint))
			return 0;
		usleep(50 * 1000);
	}
	fprintf(stderr, "etcd harness: etcd not healthy in %d ms\n", READY_MS);
	test_etcd_kill(etcd);
	return -1;
}

/* A directory for the data: tmpfs where there is one (etcd fsyncs every
 * write), else $TMPDIR or /tmp. */
static int make_dir(struct test_etcd *etcd)
{
	const char *base = getenv("TMPDIR");
	struct stat st;

	if (stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) &&
	    access("/dev/shm", W_OK) == 0)
		base = "/dev/shm";
	else if (base == NULL)
		base = "/tmp";
	snprintf(etcd->dir, sizeof(etcd->dir), "%s/kvs-etcd-XXXXXX", base);
	if (mkdtemp(etcd->dir) == NULL) {
		perror("etcd harness: mkdtemp");
		return -1;
	}
	return 0;
}

static int remove_entry(const char *path, const struct stat *st, int type,
			struct FTW *ftw)
{
	(void)st;
	(void)type;
	(void)ftw;
	remove(path);
	return 0;
}

static void remove_tree(const char *path)
{
	nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

int test_etcd_start(struct test_etcd *etcd)
{
	return test_etcd_start_on(etcd, "");
}

int test_etcd_start_on(struct test_etcd *etcd, const char *hosts)
{
	memset(etcd, 0, sizeof(*etcd));
	snprintf(etcd->hosts, sizeof(etcd->hosts), "%s", hosts);
	curl_global_init(CURL_GLOBAL_DEFAULT);
	if (make_dir(etcd))
		return -1;
	/* A port taken between the probe and etcd's bind: new ports. */
	for (int attempt = 0; attempt < 3; attempt++) {
		etcd->client_port = test_free_port();
		etcd->peer_port = test_free_port();
		if (etcd->client_port < 0 || etcd->peer_port < 0 ||
		    etcd->client_port == etcd->peer_port)
			continue;
		if (run(etcd) == 0)
			return 0;
	}
	remove_tree(etcd->dir);
	return -1;
}

void test_etcd_kill(struct test_etcd *etcd)
{
	if (etcd->pid <= 0)
		return;
	kill(etcd->pid, SIGKILL);
	waitpid(etcd->pid, NULL, 0);
	etcd->pid = 0;
	etcd->paused = false;
}

void test_etcd_pause(struct test_etcd *etcd)
{
	if (etcd->pid > 0 && kill(etcd->pid, SIGSTOP) == 0)
		etcd->paused = true;
}

void test_etcd_resume(struct test_etcd *etcd)
{
	if (etcd->pid > 0 && kill(etcd->pid, SIGCONT) == 0)
		etcd->paused = false;
}

int test_etcd_restart(struct test_etcd *etcd, bool wipe)
{
	char data[PATH_MAX + 8];

	test_etcd_kill(etcd);
	if (wipe) {
		snprintf(data, sizeof(data), "%s/data", etcd->dir);
		remove_tree(data);
	}
	return run(etcd);
}

int test_etcd_compact(struct test_etcd *etcd, long long revision)
{
	struct curl_slist *headers =
		curl_slist_append(NULL, "Content-Type: application/json");
	CURL *curl = curl_easy_init();
	char url[96], body[96];
	long status = 0;

	snprintf(url, sizeof(url), "%s/v3/kv/compaction", etcd->endpoint);
	snprintf(body, sizeof(body),
		 "{\"revision\":\"%lld\",\"physical\":true}", revision);
	if (curl != NULL && headers != NULL) {
		curl_easy_setopt(curl, CURLOPT_URL, url);
		curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
		curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body);
		curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
		curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, 5000L);
		curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, discard);
		if (curl_easy_perform(curl) == CURLE_OK)
			curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE,
					  &status);
	}
	curl_easy_cleanup(curl);
	curl_slist_free_all(headers);
	return status == 200 ? 0 : -1;
}

void test_etcd_destroy(struct test_etcd *etcd)
{
	test_etcd_kill(etcd);
	if (etcd->dir[0] != '\0')
		remove_tree(etcd->dir);
	etcd->dir[0] = '\0';
}
