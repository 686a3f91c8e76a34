/*
 * fuzz_decode.h - the decoder fuzz target, shared by the libFuzzer build
 * and by fuzz_replay (which runs it over the seed corpus with any compiler).
 *
 * Input: one flags byte, then an encoded object.  Bit 0 of the flags byte
 * turns the xxh3 checks off (KVS_VERIFY_NO_CHECKSUMS) so that mutations
 * reach the field, bounds and payload checks behind them.
 */
#ifndef KVS_FUZZ_DECODE_H
#define KVS_FUZZ_DECODE_H

#include <stddef.h>
#include <stdint.h>

/* Runs the decoder over one input; returns kvs_object_open's result.
 * Aborts when an invariant of the decoder is broken. */
int kvs_fuzz_decode_one(const uint8_t *data, size_t size);

/* libFuzzer's entry point: always 0. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif
