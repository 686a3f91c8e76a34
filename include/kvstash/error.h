/*
 * kvstash error codes.
 *
 * Every fallible kvstash function returns 0 or a negative number: either a
 * negative errno (-ENOMEM, -EIO, -ENOSPC, ...) or one of the project's own
 * codes below, negated.  The project's codes live in a reserved range above
 * any errno value so the two never collide.  kvs_strerror() names both.
 */
#ifndef KVSTASH_ERROR_H
#define KVSTASH_ERROR_H

#ifdef __cplusplus
extern "C" {
#endif

enum kvs_error {
	KVS_ERROR_BASE = 4096,
	KVS_EPARAM = KVS_ERROR_BASE, /* invalid shape or argument combination */
	KVS_ENONFINITE, /* NaN or infinity in input values */
	KVS_ERANGE, /* origin or step not representable in the metadata type */
	KVS_ETRUNC, /* buffer shorter than the header or the declared size */
	KVS_EMAGIC, /* bad magic: not a kvstash object */
	KVS_EVERSION, /* format version newer (or older) than supported */
	KVS_EHDRSUM, /* header checksum mismatch */
	KVS_EBOUNDS, /* offset/length out of bounds, overlapping or malformed */
	KVS_ESECTSUM, /* section checksum mismatch */
	KVS_ELZ4, /* LZ4 section failed to decode to its logical length */
	KVS_EMETA, /* non-finite or non-positive metadata (origin/step) */
	KVS_EKIND, /* object kind is not the one asked for */
	KVS_EBOUNDARY, /* Key/Value boundaries do not cover the same tokens */
	KVS_ECORRUPT, /* other structural corruption (padding, record header) */
	KVS_ENOTFOUND, /* miss: no such block */
	KVS_EPROTO, /* malformed or unknown request on the wire */
	KVS_EAUTH, /* peer not authenticated */
	KVS_ECUDA, /* CUDA runtime or launch failure */
	KVS_ENODEV, /* no device / backend not available */
	KVS_EOPCODE, /* unknown request opcode */
	KVS_ETOOBIG, /* request or object over the server's size limit */
	KVS_EBATCH, /* more items in one request than the server allows */
	KVS_EBUSY, /* too many requests in flight on this connection */
	KVS_ECONNLIMIT, /* the server has as many connections as it allows */
	KVS_ETIMEDOUT, /* no answer within the call's timeout */
	KVS_ECONN, /* connection lost or refused */
	KVS_ERROR_END
};

/*
 * kvs_strerror - human-readable name for a kvstash return code.
 * @err: a return value (negative) or its absolute value.
 * Returns a static string; never NULL.
 */
const char *kvs_strerror(int err);

#ifdef __cplusplus
}
#endif

#endif
