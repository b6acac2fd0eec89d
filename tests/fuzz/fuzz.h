/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * Fuzz targets: each defines LLVMFuzzerTestOneInput() and builds both as a
 * libFuzzer target (scripts/fuzz.sh, clang) and, for make check, with
 * tests/fuzz/driver.c, a small stand-alone driver.  A target reports a
 * broken invariant with fuzz_fail(), which aborts so that either driver
 * keeps the input.
 */

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Optional: prints TAP comments on how deep the inputs reached. */
void fuzz_report(void) __attribute__((weak));

#define fuzz_fail(...)                                                                             \
        do {                                                                                       \
                fprintf(stderr, "fuzz: invariant broken at %s:%d: ", __FILE__, __LINE__);          \
                fprintf(stderr, __VA_ARGS__);                                                      \
                fprintf(stderr, "\n");                                                             \
                abort();                                                                           \
        } while (0)
