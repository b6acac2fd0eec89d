/* SPDX-License-Identifier: MIT */
#include "config.h"

#include "predict.h"

int64_t predict_frontier(const struct policy_region *reg) {
        for (int64_t i = (int64_t)reg->n_chunks - 1; i >= 0; i--)
                if (reg->chunks[i].last_use != 0)
                        return i;
        return -1;
}

void predict_window(const struct policy_region *reg, uint32_t now, uint32_t window_chunks,
                    uint32_t active_ticks, uint8_t *flags) {
        int64_t f = predict_frontier(reg), first;

        if (f < 0 || window_chunks == 0)
                return;
        if (now - reg->chunks[f].last_use > active_ticks)
                return;
        first = f + 1 > (int64_t)window_chunks ? f + 1 - (int64_t)window_chunks : 0;
        for (int64_t i = first; i <= f; i++)
                flags[i] |= PLAN_WINDOW;
}

/* One touch tick of a region: the lowest and highest chunk touched in it. */
struct touch_tick {
        uint32_t tick;
        uint32_t lo, hi, count;
};

static void tick_add(struct touch_tick *t, uint32_t i) {
        if (t->count == 0 || i < t->lo)
                t->lo = i;
        if (t->count == 0 || i > t->hi)
                t->hi = i;
        t->count++;
}

/* Keeps the three most recent distinct touch ticks, newest first. */
static void ticks_collect(const struct policy_region *reg, struct touch_tick t[3]) {
        for (uint32_t i = 0; i < reg->n_chunks; i++) {
                uint32_t lu = reg->chunks[i].last_use;

                if (lu == 0 || lu < t[2].tick)
                        continue;
                if (lu == t[0].tick)
                        tick_add(&t[0], i);
                else if (lu == t[1].tick)
                        tick_add(&t[1], i);
                else if (lu == t[2].tick)
                        tick_add(&t[2], i);
                else if (lu > t[0].tick) {
                        t[2] = t[1], t[1] = t[0];
                        t[0] = (struct touch_tick){.tick = lu};
                        tick_add(&t[0], i);
                } else if (lu > t[1].tick) {
                        t[2] = t[1];
                        t[1] = (struct touch_tick){.tick = lu};
                        tick_add(&t[1], i);
                } else {
                        t[2] = (struct touch_tick){.tick = lu};
                        tick_add(&t[2], i);
                }
        }
}

static uint32_t mark_range(uint8_t *flags, int64_t first, int64_t last, uint32_t n_chunks) {
        uint32_t n = 0;

        if (first < 0)
                first = 0;
        if (last >= (int64_t)n_chunks)
                last = (int64_t)n_chunks - 1;
        for (int64_t i = first; i <= last; i++, n++)
                flags[i] |= PLAN_PREFETCH;
        return n;
}

uint32_t predict_stream(const struct policy_region *reg, uint32_t now, uint32_t depth, uint8_t *flags) {
        struct touch_tick t[3] = {{0}};
        int64_t s, width, lead;
        uint32_t n = 0;

        if (depth == 0)
                return 0;
        ticks_collect(reg, t);
        /* A stream is live if it advanced in this tick or the one before. */
        if (t[2].count == 0 || now - t[0].tick > 1)
                return 0;
        if (t[0].hi > t[1].hi && t[0].hi - t[1].hi == t[1].hi - t[2].hi && t[1].hi > t[2].hi) {
                s = (int64_t)t[0].hi - t[1].hi;
                lead = t[0].hi;
        } else if (t[0].lo < t[1].lo && t[1].lo - t[0].lo == t[2].lo - t[1].lo && t[2].lo > t[1].lo) {
                s = -((int64_t)t[1].lo - t[0].lo);
                lead = t[0].lo;
        } else
                return 0;
        width = t[0].count < (s > 0 ? s : -s) ? t[0].count : (s > 0 ? s : -s);
        for (uint32_t k = 1; k <= depth; k++) {
                int64_t at = lead + (int64_t)k * s;

                if (at < 0 || at >= (int64_t)reg->n_chunks)
                        break;
                n += s > 0 ? mark_range(flags, at - width + 1, at, reg->n_chunks)
                           : mark_range(flags, at, at + width - 1, reg->n_chunks);
        }
        return n;
}
