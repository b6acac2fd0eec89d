/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <assert.h>
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "heat-decay.h"
#include "policy.h"

static_assert(POLICY_HEAT_ONE == 256, "heat_class() divides by shifting");

uint32_t policy_heat_at(const struct policy_chunk *c, uint32_t now, uint32_t half_life_ticks) {
        if (half_life_ticks == 0)
                return c->last_use < now ? 0 : c->heat;
        return heat_decay(c->heat, now > c->last_use ? now - c->last_use : 0, half_life_ticks);
}

void policy_chunk_touch(struct policy_chunk *c, uint32_t now, uint32_t n, uint32_t half_life_ticks) {
        uint64_t h = policy_heat_at(c, now, half_life_ticks) + (uint64_t)n * POLICY_HEAT_ONE;

        c->heat = h > UINT32_MAX ? UINT32_MAX : (uint32_t)h;
        if (now > c->last_use)
                c->last_use = now;
}

void policy_chunk_use(struct policy_chunk *c, uint32_t now, uint32_t half_life_ticks) {
        /* heat is kept as of last_use: at least one touch's there means a use then */
        if (c->heat >= POLICY_HEAT_ONE && now >= c->last_use && now - c->last_use <= 1) {
                c->last_use = now;
                return;
        }
        policy_chunk_touch(c, now, 1, half_life_ticks);
}

unsigned policy_heat_class(uint32_t heat) {
        return heat_class(heat);
}

static const char *const kind_names[_POLICY_KIND_MAX] = {
        [POLICY_LRU] = "lru",
        [POLICY_HEAT] = "heat",
        [POLICY_WINDOW] = "window",
        [POLICY_HYBRID] = "hybrid",
        [POLICY_DEMAND] = "demand",
};

const char *policy_kind_name(enum policy_kind k) {
        return (unsigned)k < _POLICY_KIND_MAX ? kind_names[k] : NULL;
}

int policy_kind_from_name(const char *s) {
        for (int k = 0; k < _POLICY_KIND_MAX; k++)
                if (strcmp(s, kind_names[k]) == 0)
                        return k;
        return -EINVAL;
}

void policy_params_default(enum policy_kind k, struct policy_params *ret) {
        bool demand = k == POLICY_DEMAND;

        *ret = (struct policy_params){
                .kind = k,
                .hysteresis_ticks = k == POLICY_HEAT || k == POLICY_HYBRID || demand ? 2 : 0,
                .heat_half_life_ticks = demand ? POLICY_DEMAND_HALF_LIFE_TICKS : 10,
                .window_chunks = k == POLICY_WINDOW || k == POLICY_HYBRID ? 256 : 0,
                .prefetch_depth = k == POLICY_HYBRID ? 4 : 0,
                .run_cap = POLICY_RUN_CAP_DEFAULT,
                .evict_tier = demand ? POLICY_TIER_HOST_MAPPED : 0,
                .threads = 0, /* auto */
                .active_ticks = demand ? POLICY_ACTIVE_TICKS_DEFAULT : 0,
                .protect_min_ticks = POLICY_PROTECT_MIN_TICKS_DEFAULT,
                .protect_max_ticks = POLICY_PROTECT_MAX_TICKS_DEFAULT,
                .sample_chunks = demand ? POLICY_SAMPLE_CHUNKS_DEFAULT : 0,
                .probe_cohorts = demand ? POLICY_PROBE_COHORTS_DEFAULT : 0,
        };
}
