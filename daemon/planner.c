/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "lru.h"
#include "planner.h"
#include "util.h"

struct planner {
        const struct conf *conf;
        struct lru_chunk_view *views;
        size_t cap_views;
        struct region **regions; /* view region index -> region */
        size_t cap_regions;
        uint64_t credit_bytes[KVT_MAX_GPUS]; /* rate limit token bucket per GPU */
};

int planner_new(const struct conf *conf, struct planner **ret) {
        struct planner *p = calloc(1, sizeof(*p));

        if (!p)
                return -ENOMEM;
        p->conf = conf;
        *ret = p;
        return 0;
}

struct planner *planner_free(struct planner *p) {
        if (!p)
                return NULL;
        free(p->views);
        free(p->regions);
        free(p);
        return NULL;
}

static int grow(void **arr, size_t *cap, size_t want, size_t elem) {
        void *a;
        size_t n = *cap ? *cap : 64;

        if (want <= *cap)
                return 0;
        while (n < want)
                n *= 2;
        a = realloc(*arr, n * elem);
        if (!a)
                return -ENOMEM;
        *arr = a;
        *cap = n;
        return 0;
}

/* Fills p->views with every chunk of the GPU's regions, oldest region first. */
static int planner_snapshot(struct planner *p, struct registry *r, int device, size_t *ret_n) {
        size_t n = 0, n_regions = 0;
        int ret;

        for (struct region *reg = registry_regions(r); reg; reg = region_next(reg)) {
                const struct chunk *ch = region_chunks(reg);
                uint32_t nc = region_n_chunks(reg);

                if (region_device(reg) != device || region_untiered(reg))
                        continue;
                ret = grow((void **)&p->regions, &p->cap_regions, n_regions + 1, sizeof(*p->regions));
                if (ret < 0)
                        return ret;
                ret = grow((void **)&p->views, &p->cap_views, n + nc, sizeof(*p->views));
                if (ret < 0)
                        return ret;
                for (uint32_t i = 0; i < nc; i++)
                        p->views[n + i] = (struct lru_chunk_view){
                                .region = (uint32_t)n_regions,
                                .chunk = i,
                                .last_use = ch[i].last_use,
                                .tier = ch[i].tier,
                                .pending = ch[i].pending != KVT_TIER_NONE,
                                .pinned = !!(ch[i].flags & CHUNK_PINNED),
                        };
                p->regions[n_regions++] = reg;
                n += nc;
        }
        *ret_n = n;
        return 0;
}

/* Tops up the GPU's rate credit by one tick; returns the chunks it allows. */
static uint64_t planner_rate_chunks(struct planner *p, int device) {
        uint64_t rate = conf_max_migration_rate(p->conf);
        uint64_t per_tick, cap;

        if (rate == 0)
                return UINT64_MAX;
        per_tick = rate / 1000 * conf_tick_ms(p->conf);
        cap = MAX(per_tick, KVT_CHUNK_BYTES);
        p->credit_bytes[device] = MIN(p->credit_bytes[device] + per_tick, cap);
        return p->credit_bytes[device] / KVT_CHUNK_BYTES;
}

static int planner_issue(struct planner *p, struct registry *r, const struct lru_move *m,
                         const struct planner_ops *ops, void *userdata) {
        struct region *reg = p->regions[m->region];
        struct client *c = region_client(reg);
        struct kvt_order o;
        int ret;

        if (!ops->client_ready(c, userdata))
                return 0; /* backlogged: the next tick plans again */
        ret = registry_order_new(r, reg, m->first_chunk, m->n_chunks, m->tier, &o);
        if (ret < 0) {
                log_debug("Skipping move of region %u chunks %u+%u to %s: %s", region_id(reg),
                          m->first_chunk, m->n_chunks, kvt_tier_name(m->tier), strerror(-ret));
                return ret == -ENOMEM ? ret : 0;
        }
        ops->send_order(c, &o, userdata);
        return 1;
}

static int planner_gpu(struct planner *p, struct registry *r, const struct gpu_stats *g,
                       const struct planner_ops *ops, void *userdata) {
        struct lru_input in = {.run_cap = LRU_RUN_CAP_DEFAULT};
        struct lru_plan plan;
        size_t n;
        int ret, issued = 0;

        ret = planner_snapshot(p, r, g->device, &n);
        if (ret < 0)
                return ret;
        in.chunks = p->views;
        in.n_chunks = n;
        in.budget_chunks = g->budget_bytes / KVT_CHUNK_BYTES;
        in.charged_chunks = g->charged_bytes / KVT_CHUNK_BYTES;
        in.max_move_chunks = planner_rate_chunks(p, g->device);
        ret = lru_plan(&in, &plan);
        if (ret < 0)
                return ret;
        for (size_t i = 0; i < plan.n_moves; i++) {
                ret = planner_issue(p, r, &plan.moves[i], ops, userdata);
                if (ret < 0)
                        break;
                if (ret > 0) {
                        issued++;
                        if (conf_max_migration_rate(p->conf) > 0)
                                p->credit_bytes[g->device] -= plan.moves[i].n_chunks * KVT_CHUNK_BYTES;
                }
        }
        lru_plan_clear(&plan);
        return ret < 0 ? ret : issued;
}

int planner_tick(struct planner *p, struct registry *r, const struct planner_ops *ops, void *userdata) {
        int total = 0;

        for (int d = 0; d < KVT_MAX_GPUS; d++) {
                const struct gpu_stats *g = registry_gpu(r, d);
                int ret;

                if (!g)
                        continue;
                ret = planner_gpu(p, r, g, ops, userdata);
                if (ret < 0)
                        return ret;
                total += ret;
        }
        return total;
}
