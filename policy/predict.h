/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * What a policy expects to be used next, internal to policy/: the window at
 * a region's append point and the continuation of sequential or strided
 * access streams.  Both mark chunks in the planner's per-chunk flag array.
 */

#include <stdint.h>

#include "policy.h"

/* Per-chunk flags of the planner. */
enum {
        PLAN_EVICT = 0x01,
        PLAN_PROMOTE = 0x02,
        PLAN_ACTION = 0x03,
        PLAN_WINDOW = 0x04,   /* in the window of an active region */
        PLAN_PREFETCH = 0x08, /* predicted by a stream */
        PLAN_EXCLUDED = 0x10, /* over its client's quota: never wanted */
        PLAN_FROZEN = 0x20,   /* moved within hysteresis_ticks: left alone */
};

/* Index of the highest chunk ever touched, or -1. */
int64_t predict_frontier(const struct policy_region *reg);

/* Marks PLAN_WINDOW on the window_chunks below the region's frontier when the
 * region is active (its frontier touched within active_ticks of now). */
void predict_window(const struct policy_region *reg, uint32_t now, uint32_t window_chunks,
                    uint32_t active_ticks, uint8_t *flags);

/* Detects a sequential or strided stream in the region's last three touch
 * ticks and marks PLAN_PREFETCH on depth strides ahead.  Returns the number
 * of chunks marked. */
uint32_t predict_stream(const struct policy_region *reg, uint32_t now, uint32_t depth, uint8_t *flags);
