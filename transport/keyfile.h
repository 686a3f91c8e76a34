/*
 * keyfile.h - authentication key files, read by the daemon (every
 * tenant) and by clients (their own tenant).
 *
 * One tenant a line: "TENANT HEXKEY", or a bare "HEXKEY" for the tenant
 * "default"; '#' starts a comment.  A key is 16 to 64 bytes (32 to 128
 * hex digits).  The tenant's namespace is its name unless bound
 * otherwise (kvs_keyfile_bind_namespaces).
 */
#ifndef KVS_TRANSPORT_KEYFILE_H
#define KVS_TRANSPORT_KEYFILE_H

#include <stddef.h>

#include "kvstash/tenant.h"

/* Every tenant of @path into tenants[0 .. *n) (at most @max).  0,
 * -ENOENT/-EACCES..., or -KVS_EPARAM for a malformed line or no tenant. */
int kvs_keyfile_read_tenants(const char *path,
			     struct kvs_server_tenant *tenants, size_t max,
			     size_t *n);

/* The first tenant of @path: what a client proves.  Same errors. */
int kvs_keyfile_read_client(const char *path, struct kvs_server_tenant *out);

/* Applies "TENANT=NS[,TENANT=NS...]"; 0 or -KVS_EPARAM (malformed, or an
 * unknown tenant). */
int kvs_keyfile_bind_namespaces(const char *spec,
				struct kvs_server_tenant *tenants, size_t n);

#endif
