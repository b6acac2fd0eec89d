/* SPDX-License-Identifier: MIT */
#include "config.h"

#include "predict.h"

void predict_init(struct predict_state *st) {
        *st = (struct predict_state){.frontier = -1};
}

void predict_frontier(struct predict_state *st, const struct policy_chunk *c, uint32_t n) {
        for (uint32_t i = n; i-- > 0;)
                if (c[i].last_use != 0) {
                        st->frontier = i;
                        st->frontier_use = c[i].last_use;
                        return;
                }
}

bool predict_window(const struct predict_state *st, uint32_t now, uint32_t window_chunks,
                    uint32_t active_ticks, struct predict_range *ret) {
        int64_t f = st->frontier;

        if (f < 0 || window_chunks == 0)
                return false;
        if (now - st->frontier_use > active_ticks)
                return false;
        *ret = (struct predict_range){.first = f + 1 > (int64_t)window_chunks ? f + 1 - (int64_t)window_chunks : 0,
                                      .last = f};
        return true;
}

uint32_t predict_stream(const struct predict_state *st, uint32_t now, uint32_t depth, uint32_t n_chunks,
                        struct predict_range *ret) {
        const struct touch_tick *t = st->t;
        int64_t s, width, lead;
        uint32_t n = 0;

        if (depth == 0 || t[1].count == 0 || now - t[0].tick > 1)
                return 0; /* a stream is live if it advanced in this tick or the one before */
        if (t[0].lo == t[1].hi + 1 && t[1].tick + 1 == t[0].tick) {
                /* Sequential: this tick's run starts where the last tick's ended; two ticks tell. */
                s = (int64_t)t[0].hi - t[1].hi;
                lead = t[0].hi;
        } else if (t[2].count == 0)
                return 0;
        else if (t[0].hi > t[1].hi && t[1].hi > t[2].hi && t[0].hi - t[1].hi == t[1].hi - t[2].hi) {
                s = (int64_t)t[0].hi - t[1].hi;
                lead = t[0].hi;
        } else if (t[0].lo < t[1].lo && t[1].lo < t[2].lo && t[1].lo - t[0].lo == t[2].lo - t[1].lo) {
                s = -((int64_t)t[1].lo - t[0].lo);
                lead = t[0].lo;
        } else
                return 0;
        width = t[0].count < (s > 0 ? s : -s) ? t[0].count : (s > 0 ? s : -s);
        for (uint32_t k = 1; k <= depth; k++) {
                int64_t at = lead + (int64_t)k * s;
                struct predict_range rg = s > 0 ? (struct predict_range){at - width + 1, at}
                                                : (struct predict_range){at, at + width - 1};

                if (at < 0 || at >= (int64_t)n_chunks)
                        break;
                if (rg.first < 0)
                        rg.first = 0;
                if (rg.last >= (int64_t)n_chunks)
                        rg.last = (int64_t)n_chunks - 1;
                ret[n++] = rg;
        }
        return n;
}
