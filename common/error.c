/*
 * error.c - names for kvstash return codes: the project's own range
 * (enum kvs_error) and, below it, negative errno values.
 */
#include <string.h>

#include "kvstash/error.h"

static const char *const kvs_error_names[] = {
	[KVS_EPARAM - KVS_ERROR_BASE] = "invalid parameter",
	[KVS_ENONFINITE - KVS_ERROR_BASE] = "non-finite input value",
	[KVS_ERANGE - KVS_ERROR_BASE] =
		"origin or step not representable in the metadata type",
	[KVS_ETRUNC - KVS_ERROR_BASE] = "truncated object",
	[KVS_EMAGIC - KVS_ERROR_BASE] = "bad magic (not a kvstash object)",
	[KVS_EVERSION - KVS_ERROR_BASE] = "unsupported format version",
	[KVS_EHDRSUM - KVS_ERROR_BASE] = "header checksum mismatch",
	[KVS_EBOUNDS - KVS_ERROR_BASE] =
		"section offset or length out of bounds or overlapping",
	[KVS_ESECTSUM - KVS_ERROR_BASE] = "section checksum mismatch",
	[KVS_ELZ4 - KVS_ERROR_BASE] =
		"LZ4 section does not decode to its logical length",
	[KVS_EMETA - KVS_ERROR_BASE] = "non-finite or non-positive metadata",
	[KVS_EKIND - KVS_ERROR_BASE] = "wrong object kind",
	[KVS_EBOUNDARY - KVS_ERROR_BASE] =
		"Key and Value parts do not cover the same tokens",
	[KVS_ECORRUPT - KVS_ERROR_BASE] = "corrupt object structure",
	[KVS_ENOTFOUND - KVS_ERROR_BASE] = "not found",
	[KVS_EPROTO - KVS_ERROR_BASE] = "protocol error",
	[KVS_EAUTH - KVS_ERROR_BASE] = "peer not authenticated",
	[KVS_ECUDA - KVS_ERROR_BASE] = "CUDA error",
	[KVS_ENODEV - KVS_ERROR_BASE] = "no device or backend unavailable",
	[KVS_EOPCODE - KVS_ERROR_BASE] = "request opcode not supported",
	[KVS_ETOOBIG - KVS_ERROR_BASE] =
		"request or object over the size limit",
	[KVS_EBATCH - KVS_ERROR_BASE] = "batch over the item limit",
	[KVS_EBUSY - KVS_ERROR_BASE] =
		"too many requests in flight on the connection",
	[KVS_ECONNLIMIT - KVS_ERROR_BASE] = "server connection limit reached",
	[KVS_ETIMEDOUT - KVS_ERROR_BASE] = "timed out",
	[KVS_ECONN - KVS_ERROR_BASE] = "connection lost or refused",
};

_Static_assert(sizeof(kvs_error_names) / sizeof(kvs_error_names[0]) ==
		       KVS_ERROR_END - KVS_ERROR_BASE,
	       "every kvstash error needs a name");

const char *kvs_strerror(int err)
{
	if (err < 0)
		err = -err;
	if (err == 0)
		return "success";
	if (err >= KVS_ERROR_BASE && err < KVS_ERROR_END)
		return kvs_error_names[err - KVS_ERROR_BASE];
	if (err < KVS_ERROR_BASE)
		return strerror(err);
	return "unknown kvstash error";
}
