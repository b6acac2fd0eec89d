/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * Minimal TAP producer for automake's tap-driver.sh.  Typed assertions
 * print both sides on failure.  A test skips with a "1..0 # SKIP why" plan
 * and exit 0 (the TAP driver does not read 77); exit 99 is a hard error.
 */

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int tap_n, tap_failed;

#define TAP_OK(cond, ...)                                                                          \
        do {                                                                                       \
                int ok_ = !!(cond);                                                                \
                tap_n++;                                                                           \
                if (!ok_)                                                                          \
                        tap_failed++;                                                              \
                printf("%s %d - ", ok_ ? "ok" : "not ok", tap_n);                                  \
                printf(__VA_ARGS__);                                                               \
                printf("\n");                                                                      \
                if (!ok_)                                                                          \
                        printf("#   at %s:%d: %s\n", __FILE__, __LINE__, #cond);                  \
        } while (0)

#define TAP_EQ_INT(a, b, ...)                                                                      \
        do {                                                                                       \
                long long a_ = (long long)(a), b_ = (long long)(b);                                \
                TAP_OK(a_ == b_, __VA_ARGS__);                                                     \
                if (a_ != b_)                                                                      \
                        printf("#   got %lld, expected %lld\n", a_, b_);                          \
        } while (0)

#define TAP_EQ_U64(a, b, ...)                                                                      \
        do {                                                                                       \
                uint64_t a_ = (uint64_t)(a), b_ = (uint64_t)(b);                                   \
                TAP_OK(a_ == b_, __VA_ARGS__);                                                     \
                if (a_ != b_)                                                                      \
                        printf("#   got %" PRIu64 ", expected %" PRIu64 "\n", a_, b_);            \
        } while (0)

#define TAP_EQ_STR(a, b, ...)                                                                      \
        do {                                                                                       \
                const char *a_ = (a), *b_ = (b);                                                   \
                int eq_ = a_ && b_ && strcmp(a_, b_) == 0;                                         \
                TAP_OK(eq_, __VA_ARGS__);                                                          \
                if (!eq_)                                                                          \
                        printf("#   got \"%s\", expected \"%s\"\n", a_ ? a_ : "(null)",            \
                               b_ ? b_ : "(null)");                                                \
        } while (0)

#define TAP_DIAG(...)                                                                              \
        do {                                                                                       \
                printf("# ");                                                                      \
                printf(__VA_ARGS__);                                                               \
                printf("\n");                                                                      \
        } while (0)

static inline int tap_done(void) {
        printf("1..%d\n", tap_n);
        return tap_failed ? 1 : 0;
}
