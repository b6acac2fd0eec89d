/* SPDX-License-Identifier: MIT */
/*
 * The daemon's books for the demand policy, through its registry and
 * planner: captures that start in VRAM under a GRANT and the caps the
 * planner grants; uses of chunks in host memory (demands, the GPU's
 * mapping, refaults); probes and the cohorts they refresh; re-arm orders;
 * the uses seen by tier and the evictions the thrash guard avoided; ranges
 * released to the SSD tier and restored.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conf.h"
#include "log.h"
#include "order-sink.h"
#include "planner.h"
#include "registry.h"
#include "tap.h"
#include "util.h"

#define CHUNK KVT_CHUNK_BYTES

static struct kvt_grant grants[16];
static size_t n_grants;

/* Set: each GRANT is acknowledged at once, by a shim that took nothing
 * more from it than what it registered. */
static struct registry *auto_ack;

static void grant_sink(struct client *c, const struct kvt_grant *g, void *userdata) {
        (void)userdata;
        if (n_grants < 16)
                grants[n_grants++] = *g;
        if (auto_ack)
                registry_grant_acked(auto_ack, c,
                                     &(struct kvt_grant_ack){.device = g->device, .seq = g->seq,
                                                             .started_bytes = client_vram_started(c, g->device)});
}

static const struct planner_ops ops = {.client_ready = sink_ready, .send_order = sink_send, .send_grant = grant_sink};

struct rig {
        struct conf *conf;
        struct registry *r;
        struct planner *p;
        struct client *cl;
};

/* Budget 16 chunks, margin 4 chunks, one client; no rate limit. */
static void rig_up(struct rig *x) {
        struct kvt_hello h = {.proto_version = KVT_PROTO_VERSION, .device = 0, .device_total_bytes = 1ull << 30,
                              .name = "test"};

        if (conf_new(&x->conf) < 0 || conf_set(x->conf, "gpu", "vram_budget", "32M", "test") < 0 ||
            conf_set(x->conf, "gpu", "capture_margin", "8M", "test") < 0 ||
            conf_set(x->conf, "policy", "max_migration_rate", "0", "test") < 0 ||
            conf_set(x->conf, "policy", "rearm_rate", "0", "test") < 0 ||
            conf_set(x->conf, "policy", "probe_rate", "0", "test") < 0 ||
            registry_new(x->conf, &x->r) < 0 || planner_new(x->conf, &x->p) < 0 ||
            registry_client_new(x->r, 100, 0, &h, NULL, &x->cl) < 0)
                abort();
        n_sent = n_grants = 0;
        auto_ack = x->r;
}

static void rig_down(struct rig *x) {
        auto_ack = NULL;
        planner_free(x->p);
        registry_free(x->r);
        conf_free(x->conf);
}

/* Registers region id of client cl (its base id GiB up: give regions of
 * different clients different ids) and returns it. */
static struct region *add_for(struct rig *x, struct client *cl, uint32_t id, uint32_t chunks, uint32_t tier) {
        struct kvt_region_add a = {.region_id = id, .device = 0, .base = (uint64_t)id << 30,
                                   .size_bytes = (uint64_t)chunks * CHUNK, .api = KVT_API_CUDA_MALLOC, .tier = tier};
        struct region *reg = NULL;

        if (registry_region_add(x->r, cl, &a) < 0)
                abort();
        for (struct region *g = registry_regions(x->r); g; g = region_next(g))
                reg = g; /* the newest */
        return reg;
}

/* add_for() of the rig's client. */
static struct region *add(struct rig *x, uint32_t id, uint32_t chunks, uint32_t tier) {
        return add_for(x, x->cl, id, chunks, tier);
}

/* Whether an order sent since n_sent was last cleared names chunk of reg
 * (by its id: give regions of different clients different ids). */
static bool sent_to(const struct region *reg, uint32_t chunk) {
        for (size_t i = 0; i < n_sent; i++)
                if (sent[i].region_id == region_id(reg) && chunk >= sent[i].first_chunk &&
                    chunk - sent[i].first_chunk < sent[i].n_chunks)
                        return true;
        return false;
}

/* rig_up(), the client's grant at the whole budget, and region 1 of chunks
 * in VRAM; *g the GPU's books. */
static struct region *rig_up_region(struct rig *x, uint32_t chunks, const struct gpu_stats **g) {
        rig_up(x);
        *g = registry_gpu(x->r, 0);
        client_set_grant_cap(x->cl, 0, 16 * CHUNK);
        return add(x, 1, chunks, KVT_TIER_VRAM);
}

/* Captures start in VRAM as far as the client's GRANT reaches, never further. */
static void test_grants(void) {
        struct rig x;
        const struct gpu_stats *g;
        struct region *a, *b;

        rig_up(&x);
        g = registry_gpu(x.r, 0);
        TAP_EQ_U64(registry_grant_cap(x.r, x.cl, 0), 16 * CHUNK, "grant: the free budget, no margin without stale chunks");
        client_set_grant_cap(x.cl, 0, 16 * CHUNK);
        a = add(&x, 1, 6, KVT_TIER_VRAM);
        TAP_EQ_U64(region_tier_chunks(a, KVT_TIER_VRAM), 6, "grant: a capture within it is booked in VRAM");
        TAP_EQ_U64(g->charged_bytes, 6 * CHUNK, "grant: and charged");
        TAP_EQ_U64(client_vram_started(x.cl, 0), 6 * CHUNK, "grant: counted against the grant");
        b = add(&x, 2, 4, KVT_TIER_VRAM);
        TAP_EQ_U64(region_tier_chunks(b, KVT_TIER_VRAM), 4, "grant: another within it");
        a = add(&x, 3, 8, KVT_TIER_VRAM);
        TAP_EQ_U64(region_tier_chunks(a, KVT_TIER_VRAM), 6, "grant: a claim past the grant is booked in VRAM as far as it goes");
        TAP_EQ_U64(region_tier_chunks(a, KVT_TIER_NONE), 2, "grant: the rest unplaced");
        TAP_EQ_U64(g->charged_bytes, 16 * CHUNK, "grant: the charge stays within the grant");
        b = add(&x, 4, 3, KVT_TIER_HOST);
        TAP_EQ_U64(region_tier_chunks(b, KVT_TIER_HOST), 3, "grant: a capture in host memory is booked there");
        TAP_OK(!(region_chunks(b)[0].flags & CHUNK_MAPPED), "grant: unmapped");
        TAP_EQ_U64(registry_grant_cap(x.r, x.cl, 0), 16 * CHUNK, "grant: full budget, nothing stale: nothing more");
        registry_gpu_planned(x.r, 0, 20, &(struct policy_plan){.stale_chunks = 5});
        TAP_EQ_U64(registry_grant_cap(x.r, x.cl, 0), 20 * CHUNK,
                   "grant: with stale chunks in VRAM, up to the margin over the budget");
        rig_down(&x);
}

/* The planner grants each tick, and a region that started in VRAM over the
 * budget is evicted back to it, the stale chunks first. */
static void test_planner_grants(void) {
        struct rig x;
        struct region *a;

        rig_up(&x);
        TAP_EQ_INT(planner_tick(x.p, x.r, &ops, NULL) >= 0, 1, "planner: ticks");
        TAP_OK(n_grants == 1 && grants[0].device == 0 && grants[0].vram_cap_bytes == 16 * CHUNK,
               "planner: a GRANT of the free budget");
        TAP_EQ_INT(planner_tick(x.p, x.r, &ops, NULL) >= 0, 1, "planner: ticks again");
        TAP_EQ_U64(n_grants, 1, "planner: no GRANT while the cap stays");
        a = add(&x, 1, 16, KVT_TIER_VRAM);
        for (int i = 0; i < 30; i++)
                registry_advance_tick(x.r); /* past protect_min: nothing used it */
        TAP_EQ_INT(planner_tick(x.p, x.r, &ops, NULL) >= 0, 1, "planner: ticks with the budget full");
        TAP_OK(n_grants == 2 && grants[1].vram_cap_bytes == 16 * CHUNK + 4 * CHUNK,
               "planner: stale chunks make room for the margin");
        add(&x, 2, 2, KVT_TIER_VRAM);
        TAP_EQ_U64(registry_gpu(x.r, 0)->charged_bytes, 18 * CHUNK, "planner: a capture started over the budget");
        registry_advance_tick(x.r);
        n_sent = 0;
        TAP_EQ_INT(planner_tick(x.p, x.r, &ops, NULL) >= 0, 1, "planner: ticks over the budget");
        TAP_OK(n_sent >= 1 && sent[0].region_id == 1 && sent[0].tier == KVT_TIER_HOST_MAPPED && sent[0].n_chunks == 2,
               "planner: two stale chunks of the old region are evicted (mapped, the default), not the new one");
        (void)a;
        rig_down(&x);
}

/* rig_up_region() with 12 chunks in VRAM, all evicted and then used (12
 * demands waiting in host memory), the VRAM granted to the client again,
 * in force, and one tick planned.  Returns the region; *started the bytes
 * the client started in VRAM before. */
static struct region *rig_up_grant_race(struct rig *x, const struct gpu_stats **g, uint64_t *started) {
        struct region *a = rig_up_region(x, 12, g);
        struct kvt_order o;
        struct kvt_order_done done = {0};

        if (registry_order_new(x->r, a, 0, 12, KVT_TIER_HOST, -1, &o) < 0)
                abort();
        done.order_id = o.order_id;
        if (registry_order_done(x->r, x->cl, &done) < 0)
                abort();
        for (int i = 0; i < 30; i++)
                registry_advance_tick(x->r);
        for (uint32_t i = 0; i < 12; i++)
                registry_chunk_touch(x->r, a, i, 1);
        *started = client_vram_started(x->cl, 0);
        client_set_grant_cap(x->cl, 0, *started + 16 * CHUNK); /* the whole budget, free again */
        n_sent = n_grants = 0;
        auto_ack = NULL; /* the shim answers when the test says */
        if (planner_tick(x->p, x->r, &ops, NULL) < 0)
                abort();
        return a;
}

/* Room a GRANT offers stays the shim's until a GRANT_ACK says a lower cap
 * is in force: promotions take none of it past the margin the grant gave
 * (none here: nothing in VRAM is stale), so that a capture taking the
 * grant and a promotion never fill the same VRAM. */
static void test_grant_reserves(void) {
        struct rig x;
        const struct gpu_stats *g;
        uint64_t started;
        struct kvt_grant_ack ack = {.device = 0};
        struct region *b;

        rig_up_grant_race(&x, &g, &started);
        TAP_EQ_U64(g->grant_reserved_bytes, 16 * CHUNK, "grant race: the grant holds its room for captures");
        TAP_EQ_U64(g->charged_bytes, 0, "grant race: promotions take none of the room a capture may take");
        TAP_OK(n_grants == 1 && grants[0].seq == 1 && grants[0].vram_cap_bytes == started + 4 * CHUNK,
               "grant race: the next GRANT leaves out the room the promotions wait for");
        TAP_EQ_INT(planner_tick(x.p, x.r, &ops, NULL) >= 0, 1, "grant race: ticks without a GRANT_ACK");
        TAP_EQ_U64(g->charged_bytes, 0, "grant race: no promotions before the GRANT_ACK");
        TAP_EQ_U64(n_grants, 1, "grant race: and no second GRANT while the first is unanswered");
        ack.seq = 2;
        TAP_EQ_INT(registry_grant_acked(x.r, x.cl, &ack), -EINVAL, "grant race: an ack of a GRANT never sent is refused");
        ack.seq = 1;
        ack.started_bytes = started;
        TAP_EQ_INT(registry_grant_acked(x.r, x.cl, &ack), 1, "grant race: the GRANT_ACK gives the room back");
        TAP_EQ_INT(registry_grant_acked(x.r, x.cl, &ack), 0, "grant race: once");
        TAP_EQ_INT(planner_replan(x.p, x.r, &ops, NULL) >= 0, 1, "grant race: replans");
        TAP_EQ_U64(g->charged_bytes, 12 * CHUNK, "grant race: then the demands come in");
        rig_down(&x);

        /* The shim took the whole grant before the GRANT reached it. */
        rig_up_grant_race(&x, &g, &started);
        ack.seq = 1;
        ack.started_bytes = started + 16 * CHUNK;
        TAP_EQ_INT(registry_grant_acked(x.r, x.cl, &ack), 0, "grant race: a GRANT_ACK after a capture took it all");
        b = add(&x, 2, 16, KVT_TIER_VRAM);
        TAP_EQ_U64(region_tier_chunks(b, KVT_TIER_VRAM), 16,
                   "grant race: the capture under the old cap is booked in VRAM, where it is");
        TAP_EQ_U64(g->charged_bytes, 16 * CHUNK, "grant race: VRAM within the budget");
        TAP_EQ_U64(registry_grants_reserved(x.r, 0), 0, "grant race: registered, it holds nothing more");
        rig_down(&x);

        /* A shim that never acknowledges holds the room for 5 s at most. */
        rig_up_grant_race(&x, &g, &started);
        for (int i = 0; i < 490; i++) /* 10 ms ticks */
                registry_advance_tick(x.r);
        TAP_EQ_U64(registry_grants_reserved(x.r, 0), 16 * CHUNK, "grant race: held 4.9 s without a GRANT_ACK");
        for (int i = 0; i < 11; i++)
                registry_advance_tick(x.r);
        TAP_EQ_U64(registry_grants_reserved(x.r, 0), 4 * CHUNK,
                   "grant race: an unacknowledged GRANT is taken as in force after 5 s");
        rig_down(&x);
}

/* How many lines of what fn wrote to stderr hold text. */
static int stderr_lines_with(void (*fn)(struct rig *), struct rig *x, const char *text) {
        FILE *tmp = tmpfile();
        char line[512];
        int saved, n = 0;

        fflush(stderr);
        saved = dup(STDERR_FILENO);
        if (!tmp || saved < 0 || dup2(fileno(tmp), STDERR_FILENO) < 0)
                abort();
        fn(x);
        fflush(stderr);
        if (dup2(saved, STDERR_FILENO) < 0)
                abort();
        close(saved);
        rewind(tmp);
        while (fgets(line, sizeof(line), tmp))
                n += strstr(line, text) != NULL;
        fclose(tmp);
        return n;
}

/* Both GPUs' GRANTs, left unanswered past the timeout, judged; then a
 * second GRANT for each, the same. */
static void overdue_twice(struct rig *x) {
        for (int k = 0; k < 2; k++) {
                for (int d = 0; d < 2; d++)
                        registry_grant_sent(x->r, x->cl, d, (uint64_t)(8 + k) * CHUNK);
                for (int i = 0; i < 600; i++) /* past GRANT_ACK_TIMEOUT_MS at 10 ms a tick */
                        registry_advance_tick(x->r);
                for (int d = 0; d < 2; d++)
                        registry_grants_reserved(x->r, d);
        }
}

/* A GRANT left unanswered is logged once for each GPU it was for, not
 * once for the client. */
static void test_grant_overdue_per_gpu(void) {
        struct rig x;
        struct kvt_region_add ra = {.region_id = 2, .device = 1, .base = 2ull << 30, .size_bytes = 4 * CHUNK,
                                    .api = KVT_API_CUDA_MALLOC, .tier = KVT_TIER_HOST};

        rig_up(&x);
        auto_ack = NULL;
        registry_device_seen(x.r, &(struct kvt_device){.device = 1, .host_node = -1, .total_bytes = 1ull << 30});
        if (registry_region_add(x.r, x.cl, &ra) < 0)
                abort();
        kvt_log_setup("test", KVT_LOG_WARNING);
        TAP_EQ_INT(stderr_lines_with(overdue_twice, &x, "did not acknowledge its GRANT"), 2,
                   "overdue: one warning for each GPU, each once");
        kvt_log_setup("test", KVT_LOG_ERR);
        rig_down(&x);
}

/* A second client on GPU 0, "other". */
static struct client *second_client(struct rig *x) {
        struct kvt_hello h = {.proto_version = KVT_PROTO_VERSION, .device = 0, .device_total_bytes = 1ull << 30,
                              .name = "other"};
        struct client *c;

        if (registry_client_new(x->r, 101, 0, &h, NULL, &c) < 0)
                abort();
        return c;
}

/* Grants go only to clients of the GPU, and no share offers room that
 * another client's grant may still be taking. */
static void test_grant_shares(void) {
        struct rig x;
        struct client *other;

        rig_up(&x);
        registry_device_seen(x.r, &(struct kvt_device){.device = 1, .host_node = -1, .total_bytes = 1ull << 30});
        TAP_EQ_U64(registry_grant_cap(x.r, x.cl, 1), 0, "shares: nothing on a GPU the client does not use");
        TAP_EQ_U64(registry_grant_cap(x.r, x.cl, 0), 16 * CHUNK, "shares: the free budget on its own");
        client_set_grant_cap(x.cl, 0, 16 * CHUNK);
        registry_grant_sent(x.r, x.cl, 0, 4 * CHUNK); /* lowered, not answered yet */
        other = second_client(&x);
        TAP_EQ_U64(registry_grant_cap(x.r, other, 0), 0,
                   "shares: a newcomer gets nothing the first client's unanswered cap may still take");
        TAP_EQ_INT(registry_grant_acked(x.r, x.cl, &(struct kvt_grant_ack){.device = 0, .seq = 1}), 1,
                   "shares: the first client answers, having taken nothing");
        TAP_EQ_U64(registry_grant_cap(x.r, other, 0), 8 * CHUNK,
                   "shares: then the newcomer gets its share, which the first one's cap leaves free");
        rig_down(&x);
}

/* Order order_id of the rig's client is done; a tick later the engine
 * uses chunks 0..n-1 of reg. */
static void done_then_used(struct rig *x, struct region *reg, uint64_t order_id, uint32_t n) {
        struct kvt_order_done done = {.order_id = order_id};

        if (registry_order_done(x->r, x->cl, &done) < 0)
                abort();
        registry_advance_tick(x->r);
        for (uint32_t i = 0; i < n; i++)
                registry_chunk_touch(x->r, reg, i, 1);
}

/* Each client's thrash guard counts its own evictions and refaults: one
 * client whose evictions come back stretches its own protection, not its
 * neighbour's (one GPU, one budget). */
static void test_guard_per_client(void) {
        struct rig x;
        const struct gpu_stats *g;
        struct region *a, *c;
        struct client *other;
        struct kvt_order o;

        a = rig_up_region(&x, 8, &g);
        other = second_client(&x);
        client_set_grant_cap(other, 0, 8 * CHUNK);
        add_for(&x, other, 9, 8, KVT_TIER_VRAM);
        TAP_EQ_INT(planner_tick(x.p, x.r, &ops, NULL) >= 0, 1, "guard per client: ticks");
        TAP_EQ_U64(client_protect_ticks(x.cl, 0), 20, "guard per client: starts at protect_min (200 ms)");
        /* the first client's evictions all come back at once */
        if (registry_order_new(x.r, a, 0, 8, KVT_TIER_HOST, -1, &o) < 0)
                abort();
        done_then_used(&x, a, o.order_id, 8);
        for (int i = 0; i < 21; i++) { /* a guard's window: protect_min */
                if (planner_tick(x.p, x.r, &ops, NULL) < 0)
                        abort();
                registry_advance_tick(x.r);
        }
        TAP_EQ_U64(g->refaults, 8, "guard per client: its evictions came back");
        TAP_EQ_U64(client_protect_ticks(x.cl, 0), 40, "guard per client: its own protection doubled");
        TAP_EQ_U64(client_protect_ticks(other, 0), 20, "guard per client: the neighbour's stays at protect_min");

        /* The neighbour's chunk in host memory, used twice 30 ticks ago: no
         * longer fresh by its own protection, so neither promoted nor held
         * (by the first client's 40 ticks it would be a demand). */
        c = add_for(&x, other, 10, 4, KVT_TIER_HOST);
        registry_chunk_touch(x.r, c, 0, 1);
        for (int i = 0; i < 3; i++) /* two uses, not one use's fault records */
                registry_advance_tick(x.r);
        registry_chunk_touch(x.r, c, 0, 1);
        for (int i = 0; i < 30; i++)
                registry_advance_tick(x.r);
        n_sent = 0;
        TAP_EQ_INT(planner_tick(x.p, x.r, &ops, NULL) >= 0, 1, "guard per client: ticks, the budget full");
        TAP_EQ_U64(g->charged_bytes, 16 * CHUNK, "guard per client: the budget is full");
        TAP_OK(!sent_to(c, 0), "guard per client: the neighbour's old use is not promoted");
        TAP_EQ_U64(g->held_chunks, 0, "guard per client: nor held as a demand");
        rig_down(&x);
}

/* A use of a chunk in host memory: a demand, mapped, a refault when it was
 * evicted lately; a probe's use refreshes its cohort. */
static void test_demands(void) {
        struct rig x;
        const struct gpu_stats *g;
        const struct policy_chunk *c;
        struct region *a;
        struct kvt_order o;
        struct kvt_order_done done = {0};

        a = rig_up_region(&x, 8, &g);
        c = region_chunks(a);
        TAP_EQ_INT(registry_order_new(x.r, a, 0, 2, KVT_TIER_HOST, -1, &o), 0, "demand: evict chunks 0..1");
        done.order_id = o.order_id;
        TAP_EQ_INT(registry_order_done(x.r, x.cl, &done), 0, "demand: evicted");
        TAP_EQ_U64(g->evicted_chunks, 2, "demand: evictions counted");
        registry_advance_tick(x.r);
        registry_chunk_touch(x.r, a, 0, 1);
        TAP_EQ_U64(g->demand_faults, 1, "demand: a use in host memory is a demand");
        TAP_OK(c[0].flags & CHUNK_MAPPED, "demand: the GPU has mapped it");
        TAP_EQ_U64(g->refaults, 1, "demand: back within protect_min of its eviction: a refault");
        TAP_EQ_U64(region_last_active(a), registry_tick(x.r), "demand: the region is active");
        registry_chunk_touch(x.r, a, 4, 1);
        TAP_EQ_U64(g->demand_faults, 1, "demand: a use in VRAM is no demand");
        for (int i = 0; i < 30; i++)
                registry_advance_tick(x.r);
        registry_chunk_touch(x.r, a, 1, 1);
        TAP_EQ_U64(g->refaults, 1, "demand: back later: no refault");
        for (int i = 0; i < 30; i++)
                registry_advance_tick(x.r); /* unseen for protect_min, as the sampler re-arms */

        TAP_EQ_INT(registry_rearm_new(x.r, a, 0, 3, &o), -EINVAL, "rearm: refused for a chunk in VRAM");
        TAP_EQ_INT(registry_rearm_new(x.r, a, 0, 2, &o), 0, "rearm: chunks 0..1");
        TAP_OK(o.flags == KVT_ORDER_REARM && o.tier == KVT_TIER_HOST, "rearm: the order says so");
        done.order_id = o.order_id;
        TAP_EQ_INT(registry_order_done(x.r, x.cl, &done), 0, "rearm: done");
        TAP_OK(!(c[0].flags & CHUNK_MAPPED) && !(c[1].flags & CHUNK_MAPPED), "rearm: no longer mapped");
        TAP_OK(c[0].tier == KVT_TIER_HOST, "rearm: still in host memory");
        TAP_EQ_U64(g->rearmed_chunks, 2, "rearm: counted");
        TAP_OK((c[0].flags & POLICY_CHUNK_REARMED) && c[0].last_move == registry_tick(x.r),
               "rearm: timed from its end (when a use could first show), marked as a re-arm's");
        /* a use seen while a re-arm is in flight: its page faulted and is
         * mapped again, and the GPU will not fault on it a second time */
        registry_chunk_touch(x.r, a, 0, 1);
        TAP_EQ_U64(g->demand_faults, 3, "rearm: the use of a re-armed chunk is a demand");
        TAP_EQ_U64(g->refaults, 1, "rearm: a use just after a re-arm is no refault (no residency changed)");
        for (int i = 0; i < 30; i++)
                registry_advance_tick(x.r);
        TAP_EQ_INT(registry_rearm_new(x.r, a, 0, 1, &o), 0, "rearm: chunk 0 again");
        registry_advance_tick(x.r);
        registry_chunk_touch(x.r, a, 0, 1);
        TAP_EQ_U64(g->demand_faults, 3, "rearm: a use while it is in flight is not counted then");
        done.order_id = o.order_id;
        TAP_EQ_INT(registry_order_done(x.r, x.cl, &done), 0, "rearm: done after the use");
        TAP_OK(c[0].flags & CHUNK_MAPPED, "rearm: used during it, the chunk stays mapped (it may be re-armed again)");
        TAP_EQ_U64(g->demand_faults, 4, "rearm: and the use is counted as a demand at its end");

        /* probe chunks 4..7: one order, each chunk on its own, all stay in VRAM */
        TAP_EQ_INT(registry_probe_new(x.r, a, 0, 5, &o), -EINVAL, "probe: refused for a chunk in host memory");
        TAP_EQ_INT(registry_probe_new(x.r, a, 4, 4, &o), 0, "probe: chunks 4..7");
        TAP_OK(o.flags == KVT_ORDER_PROBE && o.tier == KVT_TIER_HOST && o.first_chunk == 4 && o.n_chunks == 4,
               "probe: the order says so (a page of each to the host)");
        TAP_OK(c[4].pending == KVT_TIER_VRAM, "probe: booked as staying in VRAM meanwhile");
        registry_probe_mark(x.r, a, 4, 4);
        TAP_EQ_U64(g->probes, 4, "probe: four probes");
        done.order_id = o.order_id;
        TAP_EQ_INT(registry_order_done(x.r, x.cl, &done), 0, "probe: done");
        TAP_OK(c[4].tier == KVT_TIER_VRAM && c[7].tier == KVT_TIER_VRAM && (c[5].flags & POLICY_CHUNK_PROBE),
               "probe: still in VRAM, probes out");
        TAP_EQ_U64(g->charged_bytes, 6 * CHUNK, "probe: still charged");
        TAP_EQ_U64(g->evicted_chunks, 2, "probe: not counted as an eviction for the guard");
        registry_advance_tick(x.r);
        registry_advance_tick(x.r);
        registry_chunk_touch(x.r, a, 4, 1);
        TAP_EQ_U64(g->probes_back, 1, "probe: back soon");
        TAP_OK(!(c[4].flags & POLICY_CHUNK_PROBE) && (c[5].flags & POLICY_CHUNK_PROBE), "probe: that chunk's answer only");
        TAP_EQ_U64(g->refaults, 1, "probe: not a refault");
        TAP_EQ_U64(g->demand_faults, 4, "probe: not a demand");
        for (int i = 0; i < 100; i++)
                registry_advance_tick(x.r);
        registry_chunk_touch(x.r, a, 6, 1);
        TAP_EQ_U64(g->probes_back, 1, "probe: back too late is not back");
        TAP_OK(!(c[6].flags & POLICY_CHUNK_PROBE), "probe: and no longer a probe");
        rig_down(&x);
}

/* A probe that went unused (policy_sample()'s expired[]): its chunk in VRAM
 * is cold until used; a probe whose order failed is no probe.  A mapped
 * eviction is booked as mapped host memory, and the uses CUPTI reports
 * while it maps are its own. */
static void test_probe_expired(void) {
        struct rig x;
        const struct gpu_stats *g;
        const struct policy_chunk *c;
        struct region *a;
        struct kvt_order o;
        struct kvt_order_done done = {0};

        a = rig_up_region(&x, 8, &g);
        c = region_chunks(a);
        TAP_EQ_INT(registry_probe_new(x.r, a, 0, 4, &o), 0, "expired: probe chunks 0..3");
        registry_probe_mark(x.r, a, 0, 4);
        done.order_id = o.order_id;
        TAP_EQ_INT(registry_order_done(x.r, x.cl, &done), 0, "expired: probed");
        registry_probe_expired(x.r, a, 1);
        TAP_EQ_U64(g->probes_expired, 1, "expired: counted");
        TAP_OK(!(c[1].flags & POLICY_PROBE_BITS), "expired: the chunk is no longer a probe");
        TAP_OK((c[1].flags & POLICY_CHUNK_COLD) && !(c[0].flags & POLICY_CHUNK_COLD) && !(c[2].flags & POLICY_CHUNK_COLD),
               "expired: that chunk is cold, the others are not");
        registry_probe_expired(x.r, a, 1);
        TAP_EQ_U64(g->probes_expired, 1, "expired: once");
        registry_probe_expired(x.r, a, 2);
        registry_chunk_touch(x.r, a, 2, 1);
        TAP_OK(!(c[2].flags & POLICY_CHUNK_COLD) && (c[1].flags & POLICY_CHUNK_COLD), "expired: a use clears cold");
        TAP_EQ_INT(registry_order_new(x.r, a, 1, 1, KVT_TIER_HOST, -1, &o), 0, "expired: evict chunk 1 (cold)");
        done.order_id = o.order_id;
        TAP_EQ_INT(registry_order_done(x.r, x.cl, &done), 0, "expired: evicted");
        TAP_EQ_INT(registry_order_new(x.r, a, 1, 1, KVT_TIER_VRAM, -1, &o), 0, "expired: chunk 1 back");
        done.order_id = o.order_id;
        TAP_EQ_INT(registry_order_done(x.r, x.cl, &done), 0, "expired: promoted");
        TAP_OK(!(c[1].flags & POLICY_CHUNK_COLD), "expired: promoted again, it is not cold");

        TAP_EQ_INT(registry_probe_new(x.r, a, 5, 1, &o), 0, "failed probe: chunk 5");
        registry_probe_mark(x.r, a, 5, 1);
        done = (struct kvt_order_done){.order_id = o.order_id, .status = -EIO};
        (void)registry_order_done(x.r, x.cl, &done);
        TAP_OK(c[5].tier == KVT_TIER_VRAM && !(c[5].flags & POLICY_PROBE_BITS),
               "failed probe: still in VRAM, and no probe (it may be probed again)");

        /* a mapped eviction: booked in host memory, mapped; its own remote maps are no use */
        TAP_EQ_INT(registry_order_new(x.r, a, 6, 2, KVT_TIER_HOST_MAPPED, -1, &o), 0, "mapped: evict chunks 6..7");
        registry_chunk_touch(x.r, a, 6, 1);
        TAP_EQ_U64(g->own_maps_ignored, 1, "mapped: a use seen while it maps is its own");
        done = (struct kvt_order_done){.order_id = o.order_id};
        TAP_EQ_INT(registry_order_done(x.r, x.cl, &done), 0, "mapped: evicted");
        TAP_OK(c[6].tier == KVT_TIER_HOST && (c[6].flags & CHUNK_MAPPED), "mapped: booked as host memory the GPU maps");
        registry_advance_tick(x.r);
        registry_chunk_touch(x.r, a, 7, 1);
        TAP_EQ_U64(g->own_maps_ignored, 2, "mapped: and just after");
        TAP_OK(c[7].last_use < registry_tick(x.r), "mapped: not taken for a use");
        for (int i = 0; i < 10; i++)
                registry_advance_tick(x.r);
        registry_chunk_touch(x.r, a, 7, 1);
        TAP_OK(c[7].last_use == registry_tick(x.r), "mapped: a use later counts");
        TAP_EQ_INT(registry_rearm_new(x.r, a, 6, 2, &o), 0, "mapped: re-armed like a chunk a fault mapped");
        rig_down(&x);
}

/* The quiet window after a mapped eviction outlasts a re-arm made at once,
 * and applies to mapped evictions only: an unmapped eviction's uses are
 * uses.  (Found in review: a re-arm cleared the mark the window keyed on.) */
static void test_quiet_window(void) {
        struct rig x;
        const struct gpu_stats *g;
        struct region *a;
        struct kvt_order o;
        struct kvt_order_done done = {0};
        uint64_t ignored;

        a = rig_up_region(&x, 8, &g);
        for (int i = 0; i < 30; i++)
                registry_advance_tick(x.r);
        TAP_EQ_INT(registry_order_new(x.r, a, 0, 1, KVT_TIER_HOST_MAPPED, -1, &o), 0, "quiet: mapped eviction");
        done.order_id = o.order_id;
        (void)registry_order_done(x.r, x.cl, &done);
        TAP_EQ_INT(registry_rearm_new(x.r, a, 0, 1, &o), 0, "quiet: re-armed at once");
        done.order_id = o.order_id;
        (void)registry_order_done(x.r, x.cl, &done);
        registry_advance_tick(x.r);
        registry_chunk_touch(x.r, a, 0, 1); /* the eviction's own remote map, a flush late */
        TAP_EQ_U64(g->own_maps_ignored, 1, "quiet: its own remote map within the window is ignored");
        TAP_EQ_U64(g->refaults, 0, "quiet: and is no refault");

        TAP_EQ_INT(registry_order_new(x.r, a, 2, 1, KVT_TIER_HOST, -1, &o), 0, "quiet: unmapped eviction");
        done.order_id = o.order_id;
        (void)registry_order_done(x.r, x.cl, &done);
        registry_advance_tick(x.r);
        registry_chunk_touch(x.r, a, 2, 1); /* the GPU faults on it: a use */
        registry_advance_tick(x.r);
        ignored = g->own_maps_ignored;
        registry_chunk_touch(x.r, a, 2, 1); /* used again: no mapped eviction involved */
        TAP_EQ_U64(g->own_maps_ignored, ignored, "quiet: a use of an unmapped eviction is not its own mapping");
        rig_down(&x);
}

/* A mapped eviction leaves its chunks' sample pages unmapped: a chunk not
 * touched while it moved is booked unmapped (armed), so its first use past
 * the quiet window is a demand, within protect_min a refault, with no
 * re-arm; one touched while it moved, or within the window, may have its
 * page mapped, and is booked mapped (to be re-armed). */
static void test_mapped_armed(void) {
        struct rig x;
        const struct gpu_stats *g;
        const struct policy_chunk *c;
        struct region *a;
        struct kvt_order o;
        struct kvt_order_done done = {0};

        a = rig_up_region(&x, 8, &g);
        c = region_chunks(a);
        for (int i = 0; i < 30; i++)
                registry_advance_tick(x.r);
        TAP_EQ_INT(registry_order_new(x.r, a, 0, 3, KVT_TIER_HOST_MAPPED, -1, &o), 0, "armed: mapped eviction of 0..2");
        registry_chunk_touch(x.r, a, 1, 1); /* an access while it moves maps the page */
        done.order_id = o.order_id;
        TAP_EQ_INT(registry_order_done(x.r, x.cl, &done), 0, "armed: evicted");
        TAP_OK(c[0].tier == KVT_TIER_HOST && !(c[0].flags & CHUNK_MAPPED) && (c[0].flags & POLICY_CHUNK_OWN_MAP),
               "armed: untouched, booked in host memory with its sample page unmapped");
        TAP_OK(c[1].flags & CHUNK_MAPPED, "armed: touched while it moved, booked mapped");
        registry_advance_tick(x.r);
        registry_chunk_touch(x.r, a, 2, 1);
        TAP_OK(c[2].flags & CHUNK_MAPPED, "armed: touched within the quiet window, booked mapped");
        TAP_EQ_U64(g->demand_faults, 0, "armed: no demand yet");
        for (int i = 0; i < 5; i++)
                registry_advance_tick(x.r);
        registry_chunk_touch(x.r, a, 0, 1);
        TAP_EQ_U64(g->demand_faults, 1, "armed: its first use past the window is a demand");
        TAP_EQ_U64(g->refaults, 1, "armed: and back within protect_min, a refault");
        TAP_OK(c[0].flags & CHUNK_MAPPED, "armed: now mapped");
        rig_down(&x);
}

/* A mapped eviction's chunk the GPU never was seen to use is re-armed once
 * to verify it (policy_chunk_unverified()): the re-arm keeps the
 * eviction's tick and its mark, so that a use found next is counted as one
 * the eviction hid (verified_used), and the chunk is verified only once. */
static void test_verify(void) {
        struct rig x;
        const struct gpu_stats *g;
        const struct policy_chunk *c;
        struct region *a;
        struct kvt_order o;
        struct kvt_order_done done = {0};
        uint32_t evicted_at;

        a = rig_up_region(&x, 8, &g);
        c = region_chunks(a);
        for (int i = 0; i < 30; i++)
                registry_advance_tick(x.r);
        TAP_EQ_INT(registry_order_new(x.r, a, 0, 3, KVT_TIER_HOST_MAPPED, -1, &o), 0, "verify: mapped eviction of 0..2");
        done.order_id = o.order_id;
        (void)registry_order_done(x.r, x.cl, &done);
        evicted_at = c[0].last_move;
        TAP_OK(policy_chunk_unverified(&c[0]) && policy_chunk_unverified(&c[1]), "verify: evicted, unverified");
        for (int i = 0; i < 20; i++) /* past the quiet window and protect_min */
                registry_advance_tick(x.r);
        TAP_EQ_INT(registry_rearm_new(x.r, a, 0, 2, &o), 0, "verify: chunks 0..1 re-armed");
        done.order_id = o.order_id;
        TAP_EQ_INT(registry_order_done(x.r, x.cl, &done), 0, "verify: done");
        TAP_EQ_U64(g->verified_chunks, 2, "verify: two chunks verified");
        TAP_OK(!policy_chunk_unverified(&c[0]) && (c[0].flags & POLICY_CHUNK_OWN_MAP) &&
                       (c[0].flags & POLICY_CHUNK_REARMED) && !(c[0].flags & CHUNK_MAPPED),
               "verify: verified, its mark kept, armed");
        TAP_EQ_U64(c[0].last_move, evicted_at, "verify: the eviction's tick kept");
        registry_advance_tick(x.r);
        registry_chunk_touch(x.r, a, 0, 1); /* the page the eviction left mapped, unmapped now, faults */
        TAP_EQ_U64(g->own_maps_ignored, 0, "verify: a use just after it is no mapping of the eviction's");
        TAP_EQ_U64(g->verified_used, 1, "verify: the use it found is counted");
        TAP_EQ_U64(g->demand_faults, 1, "verify: and is a demand");
        registry_chunk_touch(x.r, a, 2, 1); /* unverified, past the window: an ordinary first use */
        TAP_EQ_U64(g->verified_used, 1, "verify: a first use of an unverified chunk is not counted so");
        TAP_EQ_U64(g->demand_faults, 2, "verify: but is a demand");
        for (int i = 0; i < 20; i++)
                registry_advance_tick(x.r);
        TAP_EQ_INT(registry_rearm_new(x.r, a, 0, 1, &o), 0, "verify: chunk 0 re-armed again (mapped now)");
        done.order_id = o.order_id;
        (void)registry_order_done(x.r, x.cl, &done);
        TAP_EQ_U64(g->verified_chunks, 2, "verify: an ordinary re-arm verifies nothing");
        TAP_OK(!(c[0].flags & POLICY_CHUNK_OWN_MAP), "verify: and drops the mark");
        registry_advance_tick(x.r);
        registry_chunk_touch(x.r, a, 0, 1);
        TAP_EQ_U64(g->verified_used, 1, "verify: its use is no hidden one");

        /* used while the verifying re-arm is in flight: one use, counted once */
        TAP_OK(!policy_chunk_unverified(&c[2]), "verify: a chunk seen used is no longer unverified");
        TAP_EQ_INT(registry_order_new(x.r, a, 3, 1, KVT_TIER_HOST_MAPPED, -1, &o), 0, "verify: mapped eviction of 3");
        done.order_id = o.order_id;
        (void)registry_order_done(x.r, x.cl, &done);
        TAP_EQ_INT(registry_rearm_new(x.r, a, 3, 1, &o), 0, "verify: chunk 3 re-armed within the quiet window");
        done.order_id = o.order_id;
        (void)registry_order_done(x.r, x.cl, &done);
        TAP_OK(policy_chunk_unverified(&c[3]) && g->verified_chunks == 2,
               "verify: within the quiet window it is not booked: still unverified");
        for (int i = 0; i < 20; i++)
                registry_advance_tick(x.r);
        TAP_EQ_INT(registry_rearm_new(x.r, a, 3, 1, &o), 0, "verify: chunk 3 re-armed past the window");
        registry_chunk_touch(x.r, a, 3, 1); /* a use while it is in flight */
        done.order_id = o.order_id;
        (void)registry_order_done(x.r, x.cl, &done);
        TAP_OK(g->verified_chunks == 3 && g->verified_used == 2 && (c[3].flags & CHUNK_MAPPED),
               "verify: a use in flight is found, and the chunk booked mapped");
        registry_advance_tick(x.r);
        registry_chunk_touch(x.r, a, 3, 1); /* the same fault's record, or a later use */
        TAP_EQ_U64(g->verified_used, 2, "verify: and counted once");
        rig_down(&x);
}

/* The probe window is learnt from how long probes took to come back: the
 * 90th percentile of the last 32 returns, three times over, within
 * [protect_min / 8, protect_min]; late returns of expired probes count. */
static void test_probe_window(void) {
        struct policy_probe_timing t = {0};
        struct rig x;
        const struct gpu_stats *g;
        struct region *a;
        struct kvt_order o;
        struct kvt_order_done done = {0};

        TAP_EQ_INT(policy_probe_window(&t, 2, 20), 20, "window: nothing known, the longest");
        for (int i = 0; i < 7; i++)
                policy_probe_timing_note(&t, 2);
        TAP_EQ_INT(policy_probe_window(&t, 2, 20), 20, "window: seven returns are not enough");
        policy_probe_timing_note(&t, 2);
        TAP_EQ_INT(policy_probe_window(&t, 2, 20), 6, "window: eight returns in 2 ticks: 6");
        TAP_EQ_INT(policy_probe_window(&t, 8, 20), 8, "window: never below the shortest");
        t = (struct policy_probe_timing){0};
        for (int i = 0; i < 29; i++)
                policy_probe_timing_note(&t, 4);
        for (int i = 0; i < 3; i++)
                policy_probe_timing_note(&t, 100);
        TAP_EQ_INT(policy_probe_window(&t, 2, 20), 12, "window: three slow returns of 32 do not count");
        policy_probe_timing_note(&t, 100); /* the ring drops a quick one */
        TAP_EQ_INT(policy_probe_window(&t, 2, 20), 20, "window: four do, up to the longest");
        for (int i = 0; i < 32; i++)
                policy_probe_timing_note(&t, 3);
        TAP_EQ_INT(policy_probe_window(&t, 2, 20), 9, "window: only the last 32 returns count");

        /* The registry notes each return's delay; the planner's window follows. */
        a = rig_up_region(&x, 16, &g);
        TAP_EQ_INT(registry_probe_new(x.r, a, 0, 8, &o), 0, "window: probe chunks 0..7");
        registry_probe_mark(x.r, a, 0, 8);
        done.order_id = o.order_id;
        TAP_EQ_INT(registry_order_done(x.r, x.cl, &done), 0, "window: probed");
        registry_advance_tick(x.r);
        for (uint32_t i = 0; i < 8; i++)
                registry_chunk_touch(x.r, a, i, 1); /* each back a tick later */
        TAP_EQ_U64(g->probe_timing.n, 8, "window: eight returns noted");
        TAP_EQ_INT(planner_tick(x.p, x.r, &ops, NULL) >= 0, 1, "window: the planner ticks");
        TAP_EQ_INT(g->probe_window_ticks, 3, "window: returns a tick after their probes: a window of 3 ticks, not protect_min's 20");
        TAP_EQ_INT(registry_probe_new(x.r, a, 8, 2, &o), 0, "window: probe chunks 8, 9");
        registry_probe_mark(x.r, a, 8, 2);
        done.order_id = o.order_id;
        TAP_EQ_INT(registry_order_done(x.r, x.cl, &done), 0, "window: probed");
        registry_probe_expired(x.r, a, 8);
        registry_probe_expired(x.r, a, 9);
        for (int i = 0; i < 15; i++)
                registry_advance_tick(x.r);
        registry_chunk_touch(x.r, a, 8, 1);
        TAP_EQ_U64(g->probe_timing.n, 9, "window: a late return (15 ticks after its probe) is noted");
        for (int i = 0; i < 40; i++)
                registry_advance_tick(x.r);
        registry_chunk_touch(x.r, a, 9, 1);
        TAP_EQ_U64(g->probe_timing.n, 9, "window: a use 55 ticks on (past twice protect_min) is a new use, not noted");
        rig_down(&x);
}

static void evict(struct rig *x, struct region *reg, uint32_t first, uint32_t n) {
        struct kvt_order o;
        struct kvt_order_done done = {0};

        if (registry_order_new(x->r, reg, first, n, KVT_TIER_HOST, -1, &o) < 0)
                abort();
        done.order_id = o.order_id;
        if (registry_order_done(x->r, x->cl, &done) < 0)
                abort();
}

/* The uses seen, by the tier of their chunk (the VRAM hit rate); and the
 * demands the thrash guard held back while the budget was full: the
 * evictions it avoided.  A demand promoted, one the plan would not have
 * promoted anyway (a first touch), and one of a region freed before the
 * plan do not count. */
static void test_hits_and_avoided(void) {
        struct rig x;
        const struct gpu_stats *g;
        const struct policy_chunk *c;
        struct region *a, *b;

        a = rig_up_region(&x, 16, &g);
        c = region_chunks(a);
        registry_advance_tick(x.r);
        for (uint32_t i = 0; i < 4; i++)
                registry_chunk_touch(x.r, a, i, 3);
        TAP_EQ_U64(g->uses_seen[KVT_TIER_VRAM], 4, "hits: a use per chunk and tick, however many accesses");
        evict(&x, a, 0, 3);
        client_set_grant_cap(x.cl, 0, 19 * CHUNK);
        b = add(&x, 2, 3, KVT_TIER_VRAM); /* the budget full again */
        TAP_EQ_U64(g->charged_bytes, 16 * CHUNK, "avoided: the budget is full");
        registry_advance_tick(x.r);
        registry_chunk_touch(x.r, a, 0, 1);
        registry_chunk_touch(x.r, a, 5, 1);
        TAP_EQ_U64(g->uses_seen[KVT_TIER_HOST], 1, "hits: a use of a chunk in host memory is a miss");
        TAP_EQ_U64(g->uses_seen[KVT_TIER_VRAM], 5, "hits: one in VRAM a hit");
        TAP_EQ_U64(g->demand_faults, 1, "avoided: the evicted chunk's use is a demand");
        n_sent = 0;
        TAP_EQ_INT(planner_tick(x.p, x.r, &ops, NULL) >= 0, 1, "avoided: plan");
        TAP_OK(c[0].tier == KVT_TIER_HOST && c[0].pending == KVT_TIER_NONE && n_sent == 0,
               "avoided: the demand is held back (VRAM holds chunks in use), nothing evicted");
        TAP_EQ_U64(g->held_chunks, 3, "avoided: the plan held the three evicted chunks (used lately)");
        TAP_EQ_U64(g->evictions_avoided, 1, "avoided: one eviction avoided");
        TAP_EQ_INT(planner_tick(x.p, x.r, &ops, NULL) >= 0, 1, "avoided: plan again");
        TAP_EQ_U64(g->evictions_avoided, 1, "avoided: a demand counts once, however long it is held");

        for (int i = 0; i < 30; i++)
                registry_advance_tick(x.r); /* chunk 0 no longer fresh */
        evict(&x, b, 0, 1);                 /* room for one */
        registry_chunk_touch(x.r, a, 1, 1);
        n_sent = 0;
        TAP_EQ_INT(planner_tick(x.p, x.r, &ops, NULL) >= 0, 1, "promoted: plan with room");
        TAP_OK(c[1].pending == KVT_TIER_VRAM, "promoted: the demand goes to VRAM");
        TAP_EQ_U64(g->evictions_avoided, 1, "promoted: no eviction avoided");

        b = add(&x, 3, 2, KVT_TIER_HOST);
        registry_chunk_touch(x.r, b, 0, 1);
        TAP_EQ_U64(g->demand_faults, 3, "first touch: a demand");
        TAP_EQ_INT(planner_tick(x.p, x.r, &ops, NULL) >= 0, 1, "first touch: plan, the budget full");
        TAP_OK(region_chunks(b)[0].pending == KVT_TIER_NONE, "first touch: not promoted (seen once)");
        TAP_EQ_U64(g->evictions_avoided, 1, "first touch: no eviction avoided: none was due");

        registry_chunk_touch(x.r, a, 2, 1);
        TAP_EQ_U64(g->demand_faults, 4, "freed: a demand");
        TAP_EQ_INT(registry_region_del(x.r, x.cl, 1), 0, "freed: its region freed before the plan");
        TAP_EQ_INT(planner_tick(x.p, x.r, &ops, NULL) >= 0, 1, "freed: plan");
        TAP_EQ_U64(g->evictions_avoided, 1, "freed: not counted");
        rig_down(&x);
}

/* A COLD or DONE hint on chunks in VRAM makes them what a probe that
 * found them unused makes them: demand may displace them at once.  A use
 * after the hint makes them fresh again. */
static void test_cold_hint(void) {
        struct rig x;
        const struct gpu_stats *g;
        const struct policy_chunk *c;
        struct region *a;
        struct kvt_hint h = {.region_id = 1, .first_chunk = 10, .n_chunks = 2, .kind = KVT_HINT_COLD};
        bool evicted_hinted = false, evicted_other = false;

        a = rig_up_region(&x, 16, &g);
        c = region_chunks(a);
        evict(&x, a, 0, 1);
        client_set_grant_cap(x.cl, 0, 17 * CHUNK);
        add(&x, 2, 1, KVT_TIER_VRAM); /* the budget full again */
        registry_advance_tick(x.r);
        registry_chunk_touch(x.r, a, 0, 1); /* was in VRAM: a demand */
        n_sent = 0;
        TAP_EQ_INT(planner_tick(x.p, x.r, &ops, NULL) >= 0, 1, "cold hint: plan, the budget full");
        TAP_OK(c[0].pending == KVT_TIER_NONE && n_sent == 0, "cold hint: before it, the demand is held back");
        TAP_EQ_INT(registry_hint(x.r, x.cl, &h), 0, "cold hint: COLD on chunks 10..11 in VRAM");
        TAP_OK((c[10].flags & POLICY_CHUNK_COLD) && (c[11].flags & POLICY_CHUNK_COLD) &&
                   !(c[9].flags & POLICY_CHUNK_COLD),
               "cold hint: its chunks are cold, no others");
        registry_chunk_touch(x.r, a, 11, 1);
        TAP_OK(!(c[11].flags & POLICY_CHUNK_COLD), "cold hint: a use after it makes the chunk fresh again");
        registry_advance_tick(x.r);
        n_sent = 0;
        TAP_EQ_INT(planner_tick(x.p, x.r, &ops, NULL) >= 0, 1, "cold hint: plan");
        for (size_t i = 0; i < n_sent; i++)
                if (sent[i].tier != KVT_TIER_VRAM) {
                        evicted_hinted |= sent[i].region_id == 1 && sent[i].first_chunk <= 10 &&
                                          sent[i].first_chunk + sent[i].n_chunks > 10;
                        evicted_other |= !(sent[i].region_id == 1 && sent[i].first_chunk == 10 && sent[i].n_chunks == 1);
                }
        TAP_OK(evicted_hinted && !evicted_other, "cold hint: the hinted chunk still cold is evicted, nothing else");
        sink_complete(x.r, x.cl, SINK_ALL, 0);
        registry_advance_tick(x.r);
        TAP_EQ_INT(planner_tick(x.p, x.r, &ops, NULL) >= 0, 1, "cold hint: plan once it left");
        TAP_OK(c[0].pending == KVT_TIER_VRAM, "cold hint: the demand comes in in its place");
        h.kind = KVT_HINT_DONE;
        h.first_chunk = 5;
        h.n_chunks = 1;
        TAP_EQ_INT(registry_hint(x.r, x.cl, &h), 0, "cold hint: DONE on chunk 5");
        TAP_OK(c[5].flags & POLICY_CHUNK_COLD, "cold hint: DONE makes it cold too");
        h.kind = KVT_HINT_HOT;
        TAP_EQ_INT(registry_hint(x.r, x.cl, &h), 0, "cold hint: HOT on chunk 5");
        TAP_OK(!(c[5].flags & POLICY_CHUNK_COLD), "cold hint: HOT makes it fresh");
        rig_down(&x);
}

static void spill_hint(struct rig *x, uint32_t region, uint32_t first, uint32_t n, uint32_t kind) {
        struct kvt_hint h = {.region_id = region, .first_chunk = first, .n_chunks = n, .kind = kind};

        if (registry_hint(x->r, x->cl, &h) < 0)
                abort();
}

/* Chunks released to the SSD tier are booked nowhere and never moved; an
 * order in flight at the release ends unplaced; a restore books them in
 * VRAM as far as the grant reaches, else in host memory, unmapped. */
static void test_spilled(void) {
        struct rig x;
        const struct gpu_stats *g;
        const struct policy_chunk *c;
        struct region *a, *b;
        struct kvt_order o;
        struct kvt_order_done done = {0};

        a = rig_up_region(&x, 8, &g);
        b = add(&x, 2, 8, KVT_TIER_HOST);
        c = region_chunks(a);
        TAP_EQ_INT(registry_order_new(x.r, a, 6, 2, KVT_TIER_HOST, -1, &o), 0, "spill: an eviction in flight");
        spill_hint(&x, 1, 2, 6, KVT_HINT_SPILLED);
        TAP_OK(c[2].tier == KVT_TIER_NONE && c[5].tier == KVT_TIER_NONE && (c[2].flags & POLICY_CHUNK_SPILLED),
               "spill: released chunks are booked unplaced, spilled");
        TAP_EQ_U64(g->charged_bytes, 4 * CHUNK, "spill: their VRAM is charged no more (the two in flight still are)");
        TAP_OK(c[6].pending == KVT_TIER_HOST && c[6].tier == KVT_TIER_VRAM, "spill: the order in flight stands");
        done.order_id = o.order_id;
        done.status = -ENOENT; /* the shim refused it: the chunks were spilled */
        TAP_EQ_INT(registry_order_done(x.r, x.cl, &done), 0, "spill: the shim cancels the order");
        TAP_OK(c[6].tier == KVT_TIER_NONE && c[7].tier == KVT_TIER_NONE && c[7].pending == KVT_TIER_NONE,
               "spill: its chunks end unplaced");
        TAP_EQ_U64(g->charged_bytes, 2 * CHUNK, "spill: charged no more");
        TAP_EQ_U64(region_tier_chunks(a, KVT_TIER_NONE), 6, "spill: the tier counts agree");

        /* the planner moves none of them, however used */
        for (int i = 0; i < 3; i++) {
                registry_advance_tick(x.r);
                for (uint32_t k = 2; k < 8; k++)
                        registry_chunk_touch(x.r, a, k, 1);
        }
        n_sent = 0;
        TAP_EQ_INT(planner_tick(x.p, x.r, &ops, NULL) >= 0, 1, "spill: the planner ticks");
        {
                bool moved = false;

                for (size_t i = 0; i < n_sent; i++)
                        moved |= sent[i].region_id == 1 && sent[i].first_chunk + sent[i].n_chunks > 2;
                TAP_OK(!moved, "spill: no order for spilled chunks, however used");
        }
        sink_complete(x.r, x.cl, SINK_ALL, 0);

        /* restored: VRAM as far as the grant goes (16 chunks granted, 8 + 6
         * started), the rest unplaced; host memory when the shim had no grant */
        client_set_grant_cap(x.cl, 0, client_vram_started(x.cl, 0) + 2 * CHUNK);
        spill_hint(&x, 1, 2, 4, KVT_HINT_RESTORED_VRAM);
        TAP_OK(c[2].tier == KVT_TIER_VRAM && c[3].tier == KVT_TIER_VRAM && c[4].tier == KVT_TIER_NONE,
               "restore: in VRAM within the grant, unplaced past it");
        TAP_OK(!(c[2].flags & POLICY_CHUNK_SPILLED) && !(c[4].flags & POLICY_CHUNK_SPILLED), "restore: no longer spilled");
        TAP_EQ_U64(c[2].last_use, registry_tick(x.r), "restore: counts as a use");
        spill_hint(&x, 1, 6, 2, KVT_HINT_RESTORED_HOST);
        TAP_OK(c[6].tier == KVT_TIER_HOST && !(c[6].flags & CHUNK_MAPPED), "restore: host memory, unmapped");
        spill_hint(&x, 1, 2, 2, KVT_HINT_RESTORED_HOST);
        TAP_OK(c[2].tier == KVT_TIER_VRAM, "restore: a duplicate changes nothing");
        spill_hint(&x, 2, 0, 8, KVT_HINT_SPILLED);
        TAP_EQ_U64(region_tier_chunks(b, KVT_TIER_NONE), 8, "spill: host chunks are released too");
        rig_down(&x);
}

static bool lap_ready = true;

static bool lap_client_ready(struct client *c, void *userdata) {
        (void)c, (void)userdata;
        return lap_ready;
}

/* A rig with rearm_rate 400 (4 chunks a tick): region 1 fills the budget
 * in VRAM (nothing to promote into), region 2's 16 chunks in host memory
 * were each mapped at a fault and then unseen past protect_min: re-arm
 * candidates. */
static void rig_rearm_up(struct rig *x) {
        struct region *a;

        rig_up(x);
        if (conf_set(x->conf, "policy", "rearm_rate", "400", "test") < 0)
                abort();
        client_set_grant_cap(x->cl, 0, 16 * CHUNK);
        add(x, 1, 16, KVT_TIER_VRAM);
        a = add(x, 2, 16, KVT_TIER_HOST);
        registry_advance_tick(x->r);
        for (uint32_t i = 0; i < 16; i++)
                registry_chunk_touch(x->r, a, i, 1);
        for (int i = 0; i < 30; i++)
                registry_advance_tick(x->r);
}

/* The sampler's lap does not pass picks it could not issue: a tick whose
 * client could take no orders (its socket full) re-arms nothing, and the
 * next starts where that one would have. */
static void test_lap_resumes(void) {
        const struct planner_ops lap_ops = {.client_ready = lap_client_ready, .send_order = sink_send,
                                            .send_grant = grant_sink};
        struct rig x;

        rig_rearm_up(&x);
        lap_ready = false;
        n_sent = 0;
        TAP_EQ_INT(planner_tick(x.p, x.r, &lap_ops, NULL) >= 0, 1, "lap: a tick while the client takes nothing");
        TAP_EQ_U64(n_sent, 0, "lap: nothing re-armed");
        lap_ready = true;
        registry_advance_tick(x.r);
        TAP_EQ_INT(planner_tick(x.p, x.r, &lap_ops, NULL) >= 0, 1, "lap: the next tick");
        TAP_OK(n_sent >= 1 && (sent[0].flags & KVT_ORDER_REARM) && sent[0].region_id == 2 && sent[0].first_chunk == 0,
               "lap: it re-arms from where the refused tick would have (chunk %u)", n_sent ? sent[0].first_chunk : 99);
        rig_down(&x);
}

/* A probe's window starts when the shim made it: one that queued for
 * longer than the window is not cold once made, and one used within the
 * window after it was made came back in time. */
static void test_probe_from_done(void) {
        struct rig x;
        const struct policy_chunk *c;
        struct region *a;
        struct kvt_order o;
        struct kvt_order_done done = {0};
        struct policy_sample_params sp = {.stale_ticks = 20, .probe_ticks = 10, .probe_window = 20, .probe_max = 1};
        struct policy_region view;
        struct policy_input in = {.regions = &view, .n_regions = 1};
        struct policy_sample sm;
        struct policy_sample_cursor cursor = {0};

        rig_up(&x);
        client_set_grant_cap(x.cl, 0, 16 * CHUNK);
        a = add(&x, 1, 8, KVT_TIER_VRAM);
        c = region_chunks(a);
        registry_advance_tick(x.r); /* a probe's tick is never 0 */
        TAP_EQ_INT(registry_probe_new(x.r, a, 0, 2, &o), 0, "probe from done: probe chunks 0..1");
        registry_probe_mark(x.r, a, 0, 2);
        for (int i = 0; i < 30; i++) /* queued in the shim past the window */
                registry_advance_tick(x.r);
        done.order_id = o.order_id;
        TAP_EQ_INT(registry_order_done(x.r, x.cl, &done), 0, "probe from done: made, 30 ticks after its order");
        TAP_EQ_U64(c[0].last_move, registry_tick(x.r), "probe from done: its window starts now");
        view = (struct policy_region){.chunks = region_chunks(a), .n_chunks = 8};
        in.now = registry_tick(x.r) + 1;
        TAP_EQ_INT(policy_sample(&in, &sp, &cursor, &sm), 0, "probe from done: a sample just after");
        TAP_EQ_U64(sm.n_expired, 0, "probe from done: not expired");
        policy_plan_clear(&sm.plan);
        for (int i = 0; i < 5; i++)
                registry_advance_tick(x.r);
        registry_chunk_touch(x.r, a, 1, 1);
        TAP_EQ_U64(registry_gpu(x.r, 0)->probes_back, 1, "probe from done: used 5 ticks after it was made: back");
        /* used before its ORDER_DONE, long after its order: its page had left */
        TAP_EQ_INT(registry_probe_new(x.r, a, 4, 1, &o), 0, "probe from done: probe chunk 4");
        registry_probe_mark(x.r, a, 4, 1);
        for (int i = 0; i < 30; i++)
                registry_advance_tick(x.r);
        registry_chunk_touch(x.r, a, 4, 1);
        TAP_EQ_U64(registry_gpu(x.r, 0)->probes_back, 2, "probe from done: used while in flight, 30 ticks after its order: back");
        rig_down(&x);
}

/* Chunks of the re-arm orders in sent[]. */
static uint64_t rearms_sent(void) {
        uint64_t chunks = 0;

        for (size_t i = 0; i < n_sent; i++)
                chunks += (sent[i].flags & KVT_ORDER_REARM) ? sent[i].n_chunks : 0;
        return chunks;
}

/* Re-arms are a tick's: a re-plan within the tick (a demand's) samples
 * nothing, and a tick re-arms no more than its share while the last
 * tick's re-arms are still in flight. */
static void test_sample_bounds(void) {
        struct rig x;

        rig_rearm_up(&x);
        n_sent = 0;
        TAP_EQ_INT(planner_tick(x.p, x.r, &ops, NULL) >= 0, 1, "sample bounds: a tick");
        TAP_EQ_U64(rearms_sent(), 4, "sample bounds: the tick re-armed its 4 chunks");
        TAP_EQ_U64(registry_gpu(x.r, 0)->sampling_chunks, 4, "sample bounds: 4 chunks booked in flight");
        TAP_EQ_INT(planner_replan(x.p, x.r, &ops, NULL) >= 0, 1, "sample bounds: a re-plan within the tick");
        TAP_EQ_U64(rearms_sent(), 4, "sample bounds: the re-plan re-armed nothing");
        sink_complete(x.r, x.cl, SINK_ALL, 0);
        TAP_EQ_U64(registry_gpu(x.r, 0)->sampling_chunks, 0, "sample bounds: none in flight once done");
        TAP_EQ_INT(planner_replan(x.p, x.r, &ops, NULL) >= 0, 1, "sample bounds: a re-plan, same tick, none in flight");
        TAP_EQ_U64(rearms_sent(), 0, "sample bounds: the tick's share is spent: nothing re-armed");
        registry_advance_tick(x.r);
        TAP_EQ_INT(planner_tick(x.p, x.r, &ops, NULL) >= 0, 1, "sample bounds: the next tick");
        TAP_EQ_U64(rearms_sent(), 4, "sample bounds: it re-arms its 4");
        registry_advance_tick(x.r);
        TAP_EQ_INT(planner_tick(x.p, x.r, &ops, NULL) >= 0, 1, "sample bounds: a tick, the last tick's re-arms in flight");
        TAP_EQ_U64(rearms_sent(), 4, "sample bounds: nothing more re-armed while a tick's re-arms are in flight");
        sink_complete(x.r, x.cl, SINK_ALL, 0);
        registry_advance_tick(x.r);
        TAP_EQ_INT(planner_tick(x.p, x.r, &ops, NULL) >= 0, 1, "sample bounds: a tick after they were done");
        TAP_EQ_U64(rearms_sent(), 4, "sample bounds: it re-arms its 4 again");
        rig_down(&x);
}

/* Orders in sent[] with flag. */
static size_t sent_with(uint32_t flag) {
        size_t n = 0;

        for (size_t i = 0; i < n_sent; i++)
                n += (sent[i].flags & flag) != 0;
        return n;
}

/* The engine uses region h's four chunks (host memory) again. */
static void use(struct rig *x, struct region *h) {
        for (uint32_t i = 0; i < 4; i++)
                registry_chunk_touch(x->r, h, i, 1);
}

/* Probes, like re-arms, are a tick's share in all its plans, and no more
 * than that in flight.  Eight regions of two chunks fill the budget (eight
 * cohorts), unseen since; a region in host memory is in use (demands the
 * full budget holds back). */
static void test_probe_bounds(void) {
        struct rig x;
        struct region *h;

        rig_up(&x);
        if (conf_set(x.conf, "policy", "probe_rate", "200", "test") < 0) /* 2 a tick */
                abort();
        client_set_grant_cap(x.cl, 0, 16 * CHUNK);
        for (uint32_t k = 1; k <= 8; k++) {
                add(&x, k, 2, KVT_TIER_VRAM);
                registry_advance_tick(x.r);
        }
        h = add(&x, 9, 4, KVT_TIER_HOST);
        for (int i = 0; i < 30; i++)
                registry_advance_tick(x.r);
        for (int t = 0; t < 2; t++) { /* seen twice, ticks apart: demands */
                for (int i = 0; i < 3; i++)
                        registry_advance_tick(x.r);
                for (uint32_t i = 0; i < 4; i++)
                        registry_chunk_touch(x.r, h, i, 1);
        }
        n_sent = 0;
        TAP_EQ_INT(planner_tick(x.p, x.r, &ops, NULL) >= 0, 1, "probe bounds: a tick with demands held");
        TAP_EQ_U64(sent_with(KVT_ORDER_PROBE), 2, "probe bounds: the tick probed its 2 cohorts");
        TAP_EQ_U64(registry_gpu(x.r, 0)->probing_orders, 2, "probe bounds: 2 probes booked in flight");
        use(&x, h);
        TAP_EQ_INT(planner_replan(x.p, x.r, &ops, NULL) >= 0, 1, "probe bounds: a re-plan within the tick");
        TAP_EQ_U64(sent_with(KVT_ORDER_PROBE), 2, "probe bounds: the re-plan probed nothing more");
        sink_complete(x.r, x.cl, SINK_ALL, 0);
        TAP_EQ_U64(registry_gpu(x.r, 0)->probing_orders, 0, "probe bounds: none in flight once made");
        use(&x, h);
        TAP_EQ_INT(planner_replan(x.p, x.r, &ops, NULL) >= 0, 1, "probe bounds: a re-plan, same tick, none in flight");
        TAP_EQ_U64(sent_with(KVT_ORDER_PROBE), 0, "probe bounds: the tick's share is spent: nothing probed");
        registry_advance_tick(x.r);
        use(&x, h);
        TAP_EQ_INT(planner_tick(x.p, x.r, &ops, NULL) >= 0, 1, "probe bounds: the next tick");
        TAP_EQ_U64(sent_with(KVT_ORDER_PROBE), 2, "probe bounds: it probes 2");
        registry_advance_tick(x.r);
        use(&x, h);
        TAP_EQ_INT(planner_tick(x.p, x.r, &ops, NULL) >= 0, 1, "probe bounds: a tick, the last tick's probes in flight");
        TAP_EQ_U64(sent_with(KVT_ORDER_PROBE), 2, "probe bounds: nothing more probed while a tick's are in flight");
        rig_down(&x);
}

/* Whether a probe sent since n_sent was last cleared names region reg. */
static bool probed(const struct region *reg) {
        for (size_t i = 0; i < n_sent; i++)
                if (sent[i].region_id == region_id(reg) && (sent[i].flags & KVT_ORDER_PROBE))
                        return true;
        return false;
}

/* Each client's prober counts its own probes' answers: a client whose
 * probes all come back (its VRAM in use) is probed every second tick,
 * while its neighbour's VRAM, of which nothing came back, is still probed
 * every tick.  One prober for the GPU skipped the neighbour's probes too. */
static void test_prober_per_client(void) {
        struct rig x;
        struct region *a, *b, *h;
        struct client *other;
        struct kvt_order o;

        rig_up(&x);
        if (conf_set(x.conf, "policy", "probe_rate", "800", "test") < 0) /* 8 cohorts a tick */
                abort();
        client_set_grant_cap(x.cl, 0, 8 * CHUNK);
        a = add(&x, 1, 8, KVT_TIER_VRAM);
        other = second_client(&x);
        client_set_grant_cap(other, 0, 8 * CHUNK);
        b = add_for(&x, other, 9, 8, KVT_TIER_VRAM);
        TAP_EQ_INT(planner_tick(x.p, x.r, &ops, NULL) >= 0, 1, "prober per client: a tick starts both");
        TAP_EQ_U64(client_probe_every_ticks(x.cl, 0), 1, "prober per client: the first probes every tick");
        /* sixteen probes of the first client's chunks, each used again at once */
        for (int k = 0; k < 2; k++) {
                if (registry_probe_new(x.r, a, 0, 8, &o) < 0)
                        abort();
                registry_probe_mark(x.r, a, 0, 8);
                done_then_used(&x, a, o.order_id, 8);
        }
        TAP_EQ_U64(client_demand(x.cl, 0)->probes_back, 16, "prober per client: the first client's probes came back");
        TAP_EQ_U64(client_demand(other, 0)->probes_back, 0, "prober per client: none of the neighbour's");
        registry_advance_tick(x.r);
        TAP_EQ_INT(planner_tick(x.p, x.r, &ops, NULL) >= 0, 1, "prober per client: a tick takes the answers");
        TAP_EQ_U64(client_probe_every_ticks(x.cl, 0), 2, "prober per client: the first now probes every second tick");
        TAP_EQ_U64(client_probe_every_ticks(other, 0), 1, "prober per client: the neighbour's still every tick");
        TAP_EQ_U64(registry_gpu(x.r, 0)->probe_every_ticks, 1, "prober per client: the GPU shows the shortest");

        /* demands of the first client wait for room (the budget is full);
         * both clients' VRAM has gone unseen for longer than a probe waits */
        h = add(&x, 17, 4, KVT_TIER_HOST);
        for (int t = 0; t < 2; t++) {
                for (int i = 0; i < 3; i++)
                        registry_advance_tick(x.r);
                use(&x, h);
        }
        for (int i = 0; i < 30; i++)
                registry_advance_tick(x.r);
        if (registry_tick(x.r) % 2 == 0)
                registry_advance_tick(x.r);
        use(&x, h);
        n_sent = 0;
        TAP_EQ_INT(planner_tick(x.p, x.r, &ops, NULL) >= 0, 1, "prober per client: an odd tick, demands held");
        TAP_OK(probed(b), "prober per client: the neighbour's cold VRAM is probed");
        TAP_OK(!probed(a), "prober per client: the first client's, whose probes came back, sits the tick out");
        registry_advance_tick(x.r);
        use(&x, h);
        n_sent = 0;
        TAP_EQ_INT(planner_tick(x.p, x.r, &ops, NULL) >= 0, 1, "prober per client: the even tick after");
        TAP_OK(probed(a), "prober per client: then the first client's VRAM is probed");
        rig_down(&x);
}

/* Samples in flight are counted out however their orders end: made, or
 * forgotten with their region (a region freed while they were in flight),
 * or taken back from a client that never answered; a leak would stop the
 * GPU's sampler for good. */
static void test_sample_counts_end(void) {
        struct rig x;
        const struct gpu_stats *g;
        struct region *a, *b;
        struct kvt_order o;

        a = rig_up_region(&x, 4, &g);
        b = add(&x, 2, 4, KVT_TIER_HOST);
        registry_advance_tick(x.r);
        TAP_EQ_INT(registry_probe_new(x.r, a, 0, 2, &o), 0, "counts: a probe of region 1");
        TAP_EQ_INT(registry_rearm_new(x.r, b, 0, 3, &o), 0, "counts: a re-arm of region 2");
        TAP_OK(g->probing_orders == 1 && g->sampling_chunks == 3, "counts: both in flight");
        TAP_EQ_INT(registry_region_del(x.r, x.cl, 1), 0, "counts: region 1 freed, its probe in flight");
        TAP_EQ_U64(g->probing_orders, 0, "counts: its probe no longer in flight");
        TAP_EQ_INT(registry_region_del(x.r, x.cl, 2), 0, "counts: region 2 freed, its re-arm in flight");
        TAP_EQ_U64(g->sampling_chunks, 0, "counts: its re-arm no longer in flight");
        b = add(&x, 3, 4, KVT_TIER_HOST);
        TAP_EQ_INT(registry_rearm_new(x.r, b, 0, 2, &o), 0, "counts: a re-arm of region 3");
        TAP_EQ_U64(registry_client_expire_orders(x.r, x.cl, now_ns() + 3600ull * 1000000000, 1), 1,
                   "counts: taken back, unanswered");
        TAP_EQ_U64(g->sampling_chunks, 0, "counts: a re-arm taken back is no longer in flight");
        TAP_EQ_U64(g->inflight_orders, 0, "counts: nothing in flight");
        rig_down(&x);
}

/* While demands wait for room, re-arms take an eighth of their share and
 * the tick's probes go out ahead of them: region 1 fills the budget in
 * VRAM, unseen since (probe candidates), region 3's 40 chunks in host
 * memory were each seen once long ago (re-arm candidates), region 2's 4
 * are in use (demands, held back: no room). */
static void test_rearms_yield(void) {
        struct rig x;
        struct region *h, *old;

        rig_up(&x);
        if (conf_set(x.conf, "policy", "rearm_rate", "3200", "test") < 0 || /* 32 a tick */
            conf_set(x.conf, "policy", "probe_rate", "200", "test") < 0)     /* 2 a tick */
                abort();
        client_set_grant_cap(x.cl, 0, 16 * CHUNK);
        add(&x, 1, 16, KVT_TIER_VRAM);
        old = add(&x, 3, 40, KVT_TIER_HOST);
        h = add(&x, 2, 4, KVT_TIER_HOST);
        registry_advance_tick(x.r);
        for (uint32_t i = 0; i < 40; i++)
                registry_chunk_touch(x.r, old, i, 1);
        for (int i = 0; i < 30; i++)
                registry_advance_tick(x.r);
        n_sent = 0;
        TAP_EQ_INT(planner_tick(x.p, x.r, &ops, NULL) >= 0, 1, "yield: a tick, no demand");
        TAP_EQ_U64(rearms_sent(), 32, "yield: without demands a tick re-arms its whole share");
        TAP_EQ_U64(sent_with(KVT_ORDER_PROBE), 0, "yield: and probes nothing");
        sink_complete(x.r, x.cl, SINK_ALL, 0);
        for (int t = 0; t < 2; t++) { /* seen twice, ticks apart: demands */
                for (int i = 0; i < 3; i++)
                        registry_advance_tick(x.r);
                use(&x, h);
        }
        n_sent = 0;
        TAP_EQ_INT(planner_tick(x.p, x.r, &ops, NULL) >= 0, 1, "yield: a tick with demands held back");
        TAP_EQ_U64(sent_with(KVT_ORDER_PROBE), 2, "yield: the tick probes its 2 cohorts");
        TAP_EQ_U64(rearms_sent(), 4, "yield: and re-arms an eighth of its share");
        TAP_OK(n_sent >= 2 && (sent[0].flags & KVT_ORDER_PROBE) && (sent[1].flags & KVT_ORDER_PROBE),
               "yield: the probes go out first");
        TAP_EQ_U64(registry_gpu(x.r, 0)->sampling_chunks, 4, "yield: 4 chunks in flight, the bound an eighth too");
        rig_down(&x);
        TAP_EQ_U64(policy_rearm_share(256, 0, 8), 256, "yield: share kept with nothing held");
        TAP_EQ_U64(policy_rearm_share(256, 5, 0), 256, "yield: share kept with probes off");
        TAP_EQ_U64(policy_rearm_share(9, 5, 1), 2, "yield: an eighth, rounded up");
}

/* A probe unanswered past its window is cold in the plan at once, without
 * the sampler's lap (off here: no re-arm or probe rate) marking it so: the
 * demands that wait take its place, and its eviction counts it expired. */
static void test_probe_unanswered(void) {
        struct rig x;
        struct region *v, *h;
        struct kvt_order o;
        const struct gpu_stats *g;
        uint64_t evicted = 0;

        rig_up(&x);
        g = registry_gpu(x.r, 0);
        client_set_grant_cap(x.cl, 0, 16 * CHUNK);
        v = add(&x, 1, 16, KVT_TIER_VRAM);
        h = add(&x, 2, 4, KVT_TIER_HOST);
        registry_advance_tick(x.r);
        TAP_EQ_INT(registry_probe_new(x.r, v, 0, 4, &o), 0, "unanswered: probe chunks 0..3");
        registry_probe_mark(x.r, v, 0, 4);
        n_sent = 0;
        sink_send(x.cl, &o, NULL);
        sink_complete(x.r, x.cl, SINK_ALL, 0);
        for (int i = 0; i < 30; i++) /* past the window (protect_min, 20 ticks: none learnt) */
                registry_advance_tick(x.r);
        for (int t = 0; t < 2; t++) { /* seen twice, ticks apart: demands */
                for (int i = 0; i < 3; i++)
                        registry_advance_tick(x.r);
                use(&x, h);
        }
        TAP_EQ_U64(g->probes_expired, 0, "unanswered: not marked expired by a lap");
        n_sent = 0;
        TAP_EQ_INT(planner_tick(x.p, x.r, &ops, NULL) >= 0, 1, "unanswered: a tick with demands");
        for (size_t i = 0; i < n_sent; i++)
                evicted += sent[i].tier != KVT_TIER_VRAM && sent[i].region_id == 1 && sent[i].first_chunk < 4 &&
                                           !(sent[i].flags & (KVT_ORDER_PROBE | KVT_ORDER_REARM))
                                   ? sent[i].n_chunks
                                   : 0;
        TAP_EQ_U64(evicted, 4, "unanswered: the four probed chunks are evicted for the demands");
        sink_complete(x.r, x.cl, SINK_ALL, 0);
        TAP_EQ_U64(g->probes_expired, 4, "unanswered: counted expired at their eviction");
        use(&x, h);
        TAP_EQ_INT(planner_replan(x.p, x.r, &ops, NULL) >= 0, 1, "unanswered: a re-plan once they are out");
        sink_complete(x.r, x.cl, SINK_ALL, 0);
        TAP_EQ_U64(region_tier_chunks(h, KVT_TIER_VRAM), 4, "unanswered: the demands are in VRAM");
        rig_down(&x);
}

int main(void) {
        kvt_log_setup("test", KVT_LOG_ERR);
        test_hits_and_avoided();
        test_grants();
        test_planner_grants();
        test_grant_reserves();
        test_grant_shares();
        test_guard_per_client();
        test_grant_overdue_per_gpu();
        test_demands();
        test_probe_expired();
        test_quiet_window();
        test_mapped_armed();
        test_verify();
        test_probe_window();
        test_spilled();
        test_cold_hint();
        test_lap_resumes();
        test_sample_bounds();
        test_probe_from_done();
        test_probe_bounds();
        test_prober_per_client();
        test_sample_counts_end();
        test_rearms_yield();
        test_probe_unanswered();
        return tap_done();
}
