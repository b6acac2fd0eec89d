/* SPDX-License-Identifier: MIT */
/*
 * [policy] overlap: promotions that run ahead of the evictions making room
 * for them.  Through the daemon's registry and planner (LRU, no rate
 * limit): without overlap a newly wanted chunk waits a tick for the
 * evictions; with it, it is promoted in the same tick, VRAM going over the
 * budget by at most the overlap and at most the chunks being evicted, and
 * the books (evicting_chunks, charged_bytes) come back when they land,
 * fail or their region goes away.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "conf.h"
#include "log.h"
#include "order-sink.h"
#include "planner.h"
#include "registry.h"
#include "tap.h"

#define CHUNK KVT_CHUNK_BYTES

struct rig {
        struct conf *conf;
        struct registry *r;
        struct planner *p;
        struct client *cl;
        struct region *reg;
        const struct gpu_stats *g;
};

/* Budget 4 chunks, one region of 8 chunks in host memory, overlap as given. */
static void rig_up(struct rig *x, const char *overlap) {
        struct kvt_hello h = {.proto_version = KVT_PROTO_VERSION,
                              .device = 0,
                              .device_total_bytes = 1ull << 30,
                              .name = "test"};
        struct kvt_region_add a = {.region_id = 1,
                                   .device = 0,
                                   .base = 1ull << 30,
                                   .size_bytes = 8 * CHUNK,
                                   .api = KVT_API_CUDA_MALLOC,
                                   .tier = KVT_TIER_HOST_MAPPED};

        if (conf_new(&x->conf) < 0 || conf_set(x->conf, "gpu", "vram_budget", "8M", "test") < 0 ||
            conf_set(x->conf, "policy", "name", "lru", "test") < 0 ||
            conf_set(x->conf, "policy", "max_migration_rate", "0", "test") < 0 ||
            conf_set(x->conf, "policy", "overlap", overlap, "test") < 0 ||
            registry_new(x->conf, &x->r) < 0 || planner_new(x->conf, &x->p) < 0 ||
            registry_client_new(x->r, 100, 0, &h, NULL, &x->cl) < 0 ||
            registry_region_add(x->r, x->cl, &a) < 0)
                abort();
        x->reg = registry_regions(x->r);
        x->g = registry_gpu(x->r, 0);
        n_sent = 0;
}

static void rig_down(struct rig *x) {
        planner_free(x->p);
        registry_free(x->r);
        conf_free(x->conf);
}

/* Chunks [first, first + n) used in a new tick. */
static void use(struct rig *x, uint32_t first, uint32_t n) {
        registry_advance_tick(x->r);
        for (uint32_t i = first; i < first + n; i++)
                registry_chunk_touch(x->r, x->reg, i, 4);
}

/* Chunks ordered to VRAM (up) or away from it (!up) by the orders not yet completed. */
static uint32_t ordered(bool up) {
        uint32_t n = 0;

        for (size_t i = 0; i < n_sent; i++)
                n += (sent[i].tier == KVT_TIER_VRAM) == up ? sent[i].n_chunks : 0;
        return n;
}

/* Fills the budget with chunks 0..3, then makes 4..7 the wanted ones. */
static void fill_then_switch(struct rig *x) {
        use(x, 0, 4);
        planner_tick(x->p, x->r, &sink_ops, NULL);
        sink_complete(x->r, x->cl, SINK_ALL, 0);
        use(x, 4, 4);
        planner_tick(x->p, x->r, &sink_ops, NULL);
}

static void test_without_overlap(void) {
        struct rig x;

        rig_up(&x, "0");
        fill_then_switch(&x);
        TAP_EQ_U64(ordered(false), 4, "no overlap: chunks 0..3 evicted");
        TAP_EQ_U64(ordered(true), 0, "no overlap: nothing promoted while the budget is full");
        TAP_EQ_U64(x.g->evicting_chunks, 4, "no overlap: 4 chunks evicting");
        sink_complete(x.r, x.cl, SINK_ALL, 0);
        TAP_EQ_U64(x.g->evicting_chunks, 0, "no overlap: none once they land");
        registry_advance_tick(x.r);
        planner_tick(x.p, x.r, &sink_ops, NULL);
        TAP_EQ_U64(ordered(true), 4, "no overlap: a tick later 4..7 are promoted");
        TAP_EQ_U64(x.g->peak_charged_bytes, 4 * CHUNK, "no overlap: the budget was never exceeded");
        rig_down(&x);
}

static void test_with_overlap(void) {
        struct rig x;
        struct kvt_order o;

        rig_up(&x, "4M"); /* 2 chunks */
        fill_then_switch(&x);
        TAP_EQ_U64(ordered(false), 4, "overlap 2: chunks 0..3 evicted");
        TAP_EQ_U64(ordered(true), 2, "overlap 2: two of 4..7 promoted in the same tick");
        TAP_EQ_U64(x.g->charged_bytes, 6 * CHUNK, "overlap 2: charged 6 chunks, budget 4");
        TAP_EQ_U64(x.g->peak_charged_bytes, 6 * CHUNK, "overlap 2: the peak shows it");
        TAP_EQ_INT(registry_order_new(x.r, x.reg, 4, 1, KVT_TIER_VRAM, -1, &o), -ENOSPC,
                   "overlap 2: a third promotion is refused by the books");

        /* The evictions land: the charge is back within the budget, and the
         * rest is promoted. */
        sink_complete(x.r, x.cl, SINK_EVICTIONS, 0);
        TAP_EQ_U64(x.g->evicting_chunks, 0, "overlap 2: no eviction in flight");
        TAP_EQ_U64(x.g->charged_bytes, 2 * CHUNK, "overlap 2: charged 2 once the evictions land");
        registry_advance_tick(x.r);
        planner_tick(x.p, x.r, &sink_ops, NULL);
        TAP_EQ_U64(ordered(true), 4, "overlap 2: the other two follow");
        sink_complete(x.r, x.cl, SINK_ALL, 0);
        TAP_EQ_U64(x.g->charged_bytes, 4 * CHUNK, "overlap 2: 4..7 in VRAM, the budget's worth");
        rig_down(&x);

        rig_up(&x, "25%"); /* of the 8M budget: 1 chunk, in the plan and in the books */
        fill_then_switch(&x);
        TAP_EQ_U64(ordered(true), 1, "overlap 25%%: one of 4..7 promoted in the same tick");
        TAP_EQ_U64(x.g->charged_bytes, 5 * CHUNK, "overlap 25%%: charged 5 chunks, budget 4");
        TAP_EQ_INT(registry_order_new(x.r, x.reg, 4, 1, KVT_TIER_VRAM, -1, &o), -ENOSPC,
                   "overlap 25%%: a second promotion is refused by the books");
        rig_down(&x);

        rig_up(&x, "64M"); /* more than anything evicts */
        fill_then_switch(&x);
        TAP_EQ_U64(ordered(true), 4, "overlap 32: all of 4..7 promoted at once");
        TAP_EQ_U64(x.g->peak_charged_bytes, 8 * CHUNK, "overlap 32: over by the 4 chunks evicting, no more");
        rig_down(&x);
}

/* Overlap borrows only from evictions in flight: none, nothing over the budget. */
static void test_no_eviction_no_overlap(void) {
        struct rig x;
        struct kvt_order o;

        rig_up(&x, "64M");
        TAP_EQ_INT(registry_order_new(x.r, x.reg, 0, 4, KVT_TIER_VRAM, -1, &o), 0, "books: 4 promoted");
        TAP_EQ_INT(registry_order_new(x.r, x.reg, 4, 1, KVT_TIER_VRAM, -1, &o), -ENOSPC,
                   "books: a fifth refused: no eviction in flight to borrow from");
        rig_down(&x);
}

/* A failed eviction leaves the chunks in VRAM: the excess stays charged and
 * nothing more is promoted until evictions bring it down. */
static void test_failed_eviction(void) {
        struct rig x;
        struct kvt_order o;

        rig_up(&x, "4M");
        fill_then_switch(&x);
        sink_complete(x.r, x.cl, SINK_PROMOTIONS, 0);
        sink_complete(x.r, x.cl, SINK_EVICTIONS, -EIO);
        TAP_EQ_U64(x.g->evicting_chunks, 0, "failed: no eviction in flight");
        TAP_EQ_U64(x.g->charged_bytes, 6 * CHUNK, "failed: 6 chunks still charged");
        TAP_EQ_INT(registry_order_new(x.r, x.reg, 4, 1, KVT_TIER_VRAM, -1, &o), -ENOSPC,
                   "failed: no promotion while over the budget");
        use(&x, 4, 4);
        planner_tick(x.p, x.r, &sink_ops, NULL);
        TAP_EQ_U64(ordered(false), 4, "failed: the planner evicts again");
        TAP_EQ_U64(ordered(true), 0, "failed: and promotes nothing while charged over budget + overlap");
        rig_down(&x);
}

/* A region freed with evictions in flight takes them out of the books. */
static void test_release(void) {
        struct rig x;

        rig_up(&x, "4M");
        fill_then_switch(&x);
        TAP_EQ_U64(x.g->evicting_chunks, 4, "release: 4 evicting");
        TAP_EQ_INT(registry_region_del(x.r, x.cl, 1), 0, "release: region freed");
        TAP_EQ_U64(x.g->evicting_chunks, 0, "release: none evicting");
        TAP_EQ_U64(x.g->charged_bytes, 0, "release: nothing charged");
        rig_down(&x);
}

int main(void) {
        kvt_log_setup("test-overlap", KVT_LOG_ERR);
        test_without_overlap();
        test_with_overlap();
        test_no_eviction_no_overlap();
        test_failed_eviction();
        test_release();
        return tap_done();
}
