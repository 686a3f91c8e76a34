/*
 * tenant.h - who a connection is: a tenant's name, its key and the
 * namespace its block ids are bound to.  The server holds every tenant
 * (server.h), a client the one it proves (client.h's key file), and the
 * key file reader (transport/keyfile.h) fills both.
 */
#ifndef KVSTASH_TENANT_H
#define KVSTASH_TENANT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KVS_TENANT_MAX 64 /* bytes of a tenant or namespace name */
#define KVS_KEY_MAX 64 /* bytes of an authentication key */

/* A tenant: who may connect, with which key, and the namespace the
 * server binds its block ids to (never chosen by the client). */
struct kvs_server_tenant {
	char name[KVS_TENANT_MAX + 1];
	char ns[KVS_TENANT_MAX + 1];
	uint8_t key[KVS_KEY_MAX];
	size_t key_len; /* 16 .. KVS_KEY_MAX */
};

#ifdef __cplusplus
}
#endif

#endif
