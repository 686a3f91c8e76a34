/*
 * fuzz_target.h - what every kvformat fuzz target provides, so that one
 * replay driver (fuzz_replay.c) runs any of them over files with any
 * compiler, and libFuzzer runs them under clang.
 *
 * fuzz_decode.c: one flags byte (bit 0: KVS_VERIFY_NO_CHECKSUMS), then an
 * encoded object.  fuzz_encode.c: two selector bytes, then raw K/V.
 */
#ifndef KVS_FUZZ_TARGET_H
#define KVS_FUZZ_TARGET_H

#include <stddef.h>
#include <stdint.h>

/* Runs the target over one input and returns its verdict: 0 when the
 * input was accepted (opened, or sealed), a negative error when refused.
 * Aborts when a property of the code under test is broken. */
int kvs_fuzz_target_run(const uint8_t *data, size_t size);

/* libFuzzer's entry point: always 0. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif
