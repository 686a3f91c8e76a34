/*
 * version.h - what a libkvstash is: the release it was built from and the
 * wire protocol version its client speaks (docs/PROTOCOL.md), so that a
 * binding or an engine can refuse a library it does not match.
 */
#ifndef KVSTASH_VERSION_H
#define KVSTASH_VERSION_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The release, "MAJOR.MINOR.PATCH" (meson.build's project version). */
const char *kvs_version(void);

/* The wire protocol version of the client and the server. */
uint32_t kvs_wire_version(void);

#ifdef __cplusplus
}
#endif

#endif
