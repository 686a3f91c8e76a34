/*
 * cli_client.c - a client connection for a command, its failure printed
 * in the command's words.
 */
#include "cli_kvs.h"
#include "cli_util.h"
#include "kvstash/client.h"

int kvs_cli_client_connect(const char *cmd, const char *server,
			   const char *key_file, uint32_t timeout_ms,
			   bool shared_memory, struct kvs_client **out)
{
	struct kvs_client_opts o;
	int err;

	kvs_client_opts_default(&o);
	o.address = server;
	o.key_file = key_file;
	o.shared_memory = shared_memory;
	if (timeout_ms) {
		o.timeout_ms = timeout_ms;
		o.connect_timeout_ms = timeout_ms;
	}
	err = kvs_client_connect(&o, out);
	if (err == -KVS_EAUTH)
		kvs_cli_error(cmd, "%s: authentication refused", server);
	else if (err)
		kvs_cli_error(cmd, "%s: %s", server, kvs_strerror(err));
	return err;
}
