/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * What a policy expects to be used next, internal to policy/: the window at
 * a region's append point and the continuation of sequential or strided
 * access streams.  Both are fed chunk by chunk during the planner's one pass
 * over a region (predict_add()) and then name ranges to boost.
 */

#include <stdbool.h>
#include <stdint.h>

#include "policy.h"

/* Per-chunk flags of the planner. */
enum {
        PLAN_EVICT = 0x01,
        PLAN_PROMOTE = 0x02,
        PLAN_ACTION = 0x03,
        PLAN_WINDOW = 0x04,        /* in the window of an active region */
        PLAN_PREFETCH = 0x08,      /* predicted by a stream */
        PLAN_EXCLUDED = 0x10,      /* over its client's quota: never wanted */
        PLAN_FROZEN = 0x20,        /* moved within hysteresis_ticks: left alone */
        PLAN_CAND_EVICT = 0x40,    /* in VRAM, not wanted, free to move */
        PLAN_CAND_PROMOTE = 0x80,  /* wanted, elsewhere, free to move */
        PLAN_IN_VRAM = 0x100,      /* tier VRAM */
        PLAN_PENDING = 0x200,      /* an order is in flight */
        PLAN_PINNED = 0x400,
        PLAN_CHARGED = 0x800,      /* in VRAM or arriving there */
};

/* One touch tick of a region: the lowest and highest chunk touched in it. */
struct touch_tick {
        uint32_t tick;
        uint32_t lo, hi, count;
};

/* What one pass over a region learns. */
struct predict_state {
        struct touch_tick t[3]; /* the three most recent distinct touch ticks, newest first */
        int64_t frontier;       /* highest chunk ever touched; -1 = none */
        uint32_t frontier_use;  /* its last_use */
};

/* A range of chunks [first, last] of a region, inclusive. */
struct predict_range {
        int64_t first, last;
};

void predict_init(struct predict_state *st);

static inline void predict_tick_add(struct touch_tick *t, uint32_t i) {
        if (t->count == 0 || i < t->lo)
                t->lo = i;
        if (t->count == 0 || i > t->hi)
                t->hi = i;
        t->count++;
}

/* Keeps the three most recent distinct touch ticks, newest first. */
static inline void predict_ticks_add(struct touch_tick *t, uint32_t i, uint32_t lu) {
        if (lu == t[0].tick)
                predict_tick_add(&t[0], i);
        else if (lu == t[1].tick)
                predict_tick_add(&t[1], i);
        else if (lu == t[2].tick)
                predict_tick_add(&t[2], i);
        else if (lu > t[0].tick) {
                t[2] = t[1], t[1] = t[0];
                t[0] = (struct touch_tick){.tick = lu};
                predict_tick_add(&t[0], i);
        } else if (lu > t[1].tick) {
                t[2] = t[1];
                t[1] = (struct touch_tick){.tick = lu};
                predict_tick_add(&t[1], i);
        } else {
                t[2] = (struct touch_tick){.tick = lu};
                predict_tick_add(&t[2], i);
        }
}

/* Feeds chunk i (ascending) with its last_use; streams: also track touch
 * ticks (only prefetch needs them).  Inline: it runs once per chunk. */
static inline void predict_add(struct predict_state *st, uint32_t i, uint32_t lu, bool streams) {
        if (lu == 0)
                return;
        st->frontier = i;
        st->frontier_use = lu;
        if (streams && lu >= st->t[2].tick)
                predict_ticks_add(st->t, i, lu);
}

/* predict_add() without the frontier, for every chunk (ascending) when
 * streams are tracked: predict_frontier() then finds the frontier in one
 * step from the end instead of two stores per chunk. */
static inline void predict_stream_add(struct predict_state *st, uint32_t i, uint32_t lu) {
        if (lu != 0 && lu >= st->t[2].tick)
                predict_ticks_add(st->t, i, lu);
}

/* Sets the frontier from the region's chunks c[0..n): its highest chunk
 * ever used. */
void predict_frontier(struct predict_state *st, const struct policy_chunk *c, uint32_t n);

/* The window_chunks below the frontier, if the region is active (its
 * frontier touched within active_ticks of now).  Returns false if none. */
bool predict_window(const struct predict_state *st, uint32_t now, uint32_t window_chunks,
                    uint32_t active_ticks, struct predict_range *ret);

/* Detects a sequential or strided stream in the last three touch ticks and
 * fills up to depth ranges ahead of it (clipped to n_chunks).  Returns the
 * number of ranges. */
uint32_t predict_stream(const struct predict_state *st, uint32_t now, uint32_t depth, uint32_t n_chunks,
                        struct predict_range *ret);
