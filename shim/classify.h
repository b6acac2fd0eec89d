/* SPDX-License-Identifier: MIT */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "protocol.h"

/* Allocations below this stay plain until the daemon's [capture] min_size
 * (or KVTIER_MIN_SIZE) says otherwise. */
#define CLASSIFY_DEFAULT_MIN_SIZE_BYTES (64ull << 20)

/* Which allocations the shim captures (all sizes in bytes; 0 = no limit),
 * and the counts the rules are held against. */
struct classify_rules {
        uint64_t min_size;      /* [capture] min_size or KVTIER_MIN_SIZE: smaller ones stay plain */
        uint64_t capture_after; /* [capture] capture_after: the first N bytes allocated stay plain */
        uint64_t max_captured;  /* [capture] max_captured: at most this many bytes captured at once */
        uint32_t apis;          /* [capture] apis: KVT_API_FAMILY_* families captured */
        _Atomic uint64_t allocated_bytes; /* everything asked of the hooked allocators */
        _Atomic uint64_t captured_bytes;  /* reserved by classify_take() and not released */
};

/* Which rules the environment set (they win over the daemon's). */
enum {
        CLASSIFY_ENV_MIN_SIZE = 1u << 0,
        CLASSIFY_ENV_CAPTURE_AFTER = 1u << 1,
        CLASSIFY_ENV_MAX_CAPTURED = 1u << 2,
        CLASSIFY_ENV_APIS = 1u << 3,
};

/* Takes the daemon's rules (its WELCOME) for each rule not in env_set.
 * Safe while other threads classify.  min_size 0 is ignored. */
void classify_rules_apply(struct classify_rules *rules, unsigned env_set, uint64_t min_size, uint64_t capture_after,
                          uint64_t max_captured, uint32_t apis);

/* The KVT_API_FAMILY_* mask rules capture now.  Safe against
 * classify_rules_apply(). */
uint32_t classify_rules_apis(const struct classify_rules *rules);

/* The KVT_API_FAMILY_* family of an enum kvt_alloc_api value (0 if none). */
uint32_t classify_api_family(uint32_t api);

/* Decides whether an allocation of size bytes through api (enum
 * kvt_alloc_api) is captured.  Returns the enum kvt_capture_rule that takes
 * it, having reserved it against max_captured: pair with classify_release()
 * when the capture fails or the region is freed.  Returns KVT_RULE_NONE (0)
 * for an allocation left plain.  Every call counts towards capture_after.
 * Thread-safe. */
uint32_t classify_take(struct classify_rules *rules, uint32_t api, size_t size);

/* Returns size bytes reserved by classify_take(). */
void classify_release(struct classify_rules *rules, size_t size);

/* Bytes captured now (reserved and not released). */
uint64_t classify_captured_bytes(struct classify_rules *rules);
