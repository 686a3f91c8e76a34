/*
 * version.c - the release and the wire version of this build (version.h).
 */
#include "kvs_config.h"
#include "kvstash/version.h"

const char *kvs_version(void)
{
	return KVS_VERSION;
}

uint32_t kvs_wire_version(void)
{
	return KVS_WIRE_VERSION;
}
