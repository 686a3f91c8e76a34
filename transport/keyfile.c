/*
 * keyfile.c - reading authentication key files (transport/keyfile.h).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "kvstash/error.h"
#include "kvstash/log.h"
#include "transport/keyfile.h"

static int parse_key(const char *hex, struct kvs_server_tenant *t)
{
	size_t n = strlen(hex), got = 0;

	if (n % 2 || n / 2 < 16 || n / 2 > KVS_KEY_MAX ||
	    strspn(hex, "0123456789abcdefABCDEF") != n ||
	    OPENSSL_hexstr2buf_ex(t->key, sizeof(t->key), &got, hex, '\0') !=
		    1 ||
	    got != n / 2)
		return -KVS_EPARAM;
	t->key_len = got;
	return 0;
}

static int parse_line(char *line, struct kvs_server_tenant *t)
{
	char *words[2] = { NULL, NULL }, *save = NULL;
	int n = 0;

	for (char *w = strtok_r(line, " \t", &save); w;
	     w = strtok_r(NULL, " \t", &save)) {
		if (n == 2)
			return -KVS_EPARAM;
		words[n++] = w;
	}
	if (n == 0)
		return -KVS_EPARAM;
	memset(t, 0, sizeof(*t));
	if (n == 1) {
		strcpy(t->name, "default");
	} else {
		if (strlen(words[0]) > KVS_TENANT_MAX)
			return -KVS_EPARAM;
		strcpy(t->name, words[0]);
	}
	strcpy(t->ns, t->name);
	return parse_key(words[n - 1], t);
}

int kvs_keyfile_read_tenants(const char *path,
			     struct kvs_server_tenant *tenants, size_t max,
			     size_t *n)
{
	FILE *f = fopen(path, "r");
	char line[512];
	size_t count = 0;
	int lineno = 0, err = 0;

	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		lineno++;
		line[strcspn(line, "#\r\n")] = '\0';
		if (strspn(line, " \t") == strlen(line))
			continue;
		if (count == max || parse_line(line, &tenants[count])) {
			kvs_log(KVS_LOG_ERR,
				"%s:%d: expected 'TENANT HEXKEY' or 'HEXKEY' "
				"(16 to 64 bytes in hex)",
				path, lineno);
			err = -KVS_EPARAM;
			break;
		}
		for (size_t i = 0; i < count; i++)
			if (strcmp(tenants[i].name, tenants[count].name) == 0)
				err = -KVS_EPARAM;
		if (err)
			break;
		count++;
	}
	fclose(f);
	if (!err && count == 0)
		err = -KVS_EPARAM;
	if (!err)
		*n = count;
	return err;
}

int kvs_keyfile_read_client(const char *path, struct kvs_server_tenant *out)
{
	struct kvs_server_tenant t;
	FILE *f = fopen(path, "r");
	char line[512];
	int err = -KVS_EPARAM;

	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		line[strcspn(line, "#\r\n")] = '\0';
		if (strspn(line, " \t") == strlen(line))
			continue;
		err = parse_line(line, &t);
		break;
	}
	fclose(f);
	if (!err)
		*out = t;
	return err;
}

int kvs_keyfile_bind_namespaces(const char *spec,
				struct kvs_server_tenant *tenants, size_t n)
{
	char *copy = strdup(spec), *save = NULL;
	int err = 0;

	if (!copy)
		return -ENOMEM;
	for (char *b = strtok_r(copy, ",", &save); b && !err;
	     b = strtok_r(NULL, ",", &save)) {
		char *eq = strchr(b, '=');
		size_t i;

		if (!eq || eq == b || strlen(eq + 1) == 0 ||
		    strlen(eq + 1) > KVS_TENANT_MAX) {
			err = -KVS_EPARAM;
			break;
		}
		*eq = '\0';
		for (i = 0; i < n; i++)
			if (strcmp(tenants[i].name, b) == 0)
				break;
		if (i == n)
			err = -KVS_EPARAM;
		else
			strcpy(tenants[i].ns, eq + 1);
	}
	free(copy);
	return err;
}
