/* SPDX-License-Identifier: MIT */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Which allocations the shim captures (all sizes in bytes; 0 = no limit). */
struct classify_rules {
        uint64_t min_size;      /* KVTIER_MIN_SIZE: smaller ones stay plain */
        uint64_t capture_after; /* KVTIER_CAPTURE_AFTER: the first N bytes allocated stay plain */
        uint64_t max_captured;  /* KVTIER_MAX_CAPTURED: at most this many bytes captured at once */
};

/* Decides whether an allocation of size bytes is captured, and if so
 * reserves it against max_captured: pair a true answer with
 * classify_release() when the capture fails or the region is freed.  Every
 * call counts towards capture_after.  Thread-safe. */
bool classify_take(const struct classify_rules *rules, size_t size);

/* Returns size bytes reserved by classify_take(). */
void classify_release(size_t size);

/* Bytes captured now (reserved and not released). */
uint64_t classify_captured_bytes(void);
