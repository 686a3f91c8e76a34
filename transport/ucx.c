/*
 * ucx.c - the UCX glue behind transport/ucx.h.
 */
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "kvstash/error.h"
#include "kvstash/log.h"
#include "ucx.h"

int kvs_ucx_error(ucs_status_t status)
{
	switch (status) {
	case UCS_OK:
		return 0;
	case UCS_ERR_NO_MEMORY:
		return -ENOMEM;
	case UCS_ERR_TIMED_OUT:
		return -KVS_ETIMEDOUT;
	case UCS_ERR_CANCELED:
		return -ECANCELED;
	case UCS_ERR_UNREACHABLE:
	case UCS_ERR_CONNECTION_RESET:
	case UCS_ERR_ENDPOINT_TIMEOUT:
	case UCS_ERR_NOT_CONNECTED:
	case UCS_ERR_REJECTED:
	case UCS_ERR_IO_ERROR:
		return -KVS_ECONN;
	case UCS_ERR_BUSY:
		return -EADDRINUSE;
	default:
		return -EIO;
	}
}

int kvs_ucx_init(struct kvs_ucx *u, bool shared_memory, bool serialized)
{
	ucp_params_t params = {
		.field_mask = UCP_PARAM_FIELD_FEATURES,
		.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP,
	};
	ucp_worker_params_t wparams = {
		.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
		.thread_mode = UCS_THREAD_MODE_SINGLE,
	};
	ucp_config_t *config;
	ucs_status_t st;

	memset(u, 0, sizeof(*u));
	if (serialized)
		wparams.thread_mode = UCS_THREAD_MODE_SERIALIZED;
	u->efd = -1;
	st = ucp_config_read(NULL, NULL, &config);
	if (st != UCS_OK)
		goto fail;
	/* (ucx.h); a UCX without the option ignores the request */
	if (shared_memory && !getenv("UCX_MM_ERROR_HANDLING"))
		(void)ucp_config_modify(config, "MM_ERROR_HANDLING", "y");
	if (!getenv("UCX_RNDV_SCHEME"))
		(void)ucp_config_modify(config, "RNDV_SCHEME", "get_zcopy");
	st = ucp_init(&params, config, &u->context);
	ucp_config_release(config);
	if (st != UCS_OK)
		goto fail;
	st = ucp_worker_create(u->context, &wparams, &u->worker);
	if (st != UCS_OK)
		goto fail_context;
	st = ucp_worker_get_efd(u->worker, &u->efd);
	if (st != UCS_OK)
		goto fail_worker;
	return 0;
fail_worker:
	ucp_worker_destroy(u->worker);
	u->worker = NULL;
fail_context:
	ucp_cleanup(u->context);
	u->context = NULL;
fail:
	kvs_log(KVS_LOG_ERR, "ucx: init: %s", ucs_status_string(st));
	return kvs_ucx_error(st);
}

void kvs_ucx_listener_defaults(void)
{
	/* UCX 1.13 reads its connection managers' options from the
	 * environment only (ucp_config_modify does not reach them) */
	if (setenv("UCX_TCP_CM_REUSEADDR", "y", 0))
		kvs_log(KVS_LOG_WARN, "ucx: UCX_TCP_CM_REUSEADDR not set: %s",
			strerror(errno));
}

void kvs_ucx_fini(struct kvs_ucx *u)
{
	if (u->worker)
		ucp_worker_destroy(u->worker);
	if (u->context)
		ucp_cleanup(u->context);
	u->worker = NULL;
	u->context = NULL;
}

int kvs_ucx_wait_fds(struct kvs_ucx *u, const int *fds, int n, int timeout_ms)
{
	struct pollfd p[5] = { { .fd = u->efd, .events = POLLIN } };
	int mask = 0;

	for (int i = 0; i < n && i < 4; i++)
		p[i + 1] = (struct pollfd){ .fd = fds[i], .events = POLLIN };
	while (ucp_worker_progress(u->worker))
		;
	if (ucp_worker_arm(u->worker) == UCS_ERR_BUSY)
		return 0;
	if (poll(p, (nfds_t)(n < 4 ? n : 4) + 1, timeout_ms) <= 0)
		return 0;
	for (int i = 0; i < n && i < 4; i++)
		if (p[i + 1].revents & POLLIN)
			mask |= 1 << i;
	return mask;
}

int kvs_ucx_wait(struct kvs_ucx *u, int extra_fd, int timeout_ms)
{
	return kvs_ucx_wait_fds(u, &extra_fd, extra_fd >= 0 ? 1 : 0,
				timeout_ms) &
	       1;
}

ucs_status_t kvs_ucx_request_wait(ucp_worker_h worker, void *req)
{
	ucs_status_t st;

	if (req == NULL)
		return UCS_OK;
	if (UCS_PTR_IS_ERR(req))
		return UCS_PTR_STATUS(req);
	while ((st = ucp_request_check_status(req)) == UCS_INPROGRESS)
		ucp_worker_progress(worker);
	ucp_request_free(req);
	return st;
}

int kvs_ucx_parse_addr(const char *text, struct sockaddr_storage *out,
		       socklen_t *out_len)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *ai;
	char host[256];
	const char *colon, *port, *h = text;
	size_t hlen;

	if (text[0] == '[') {
		colon = strstr(text, "]:");
		if (!colon)
			return -KVS_EPARAM;
		h = text + 1;
		hlen = (size_t)(colon - h);
		port = colon + 2;
	} else {
		colon = strrchr(text, ':');
		if (!colon)
			return -KVS_EPARAM;
		hlen = (size_t)(colon - text);
		port = colon + 1;
	}
	if (hlen == 0 || hlen >= sizeof(host) || *port == '\0' ||
	    strspn(port, "0123456789") != strlen(port) || atoi(port) > 65535)
		return -KVS_EPARAM;
	memcpy(host, h, hlen);
	host[hlen] = '\0';
	if (getaddrinfo(host, port, &hints, &ai) != 0 || !ai)
		return -KVS_EPARAM;
	memcpy(out, ai->ai_addr, ai->ai_addrlen);
	*out_len = ai->ai_addrlen;
	freeaddrinfo(ai);
	return 0;
}
