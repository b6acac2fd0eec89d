/* SPDX-License-Identifier: MIT */
/*
 * policy_plan() against the reference planner (plan-ref.c, the planner
 * before it was made faster): random snapshots for every policy, with
 * pinned and HOT chunks, pending orders, frozen chunks, clients with quotas
 * and priorities, windows and streams; the plans must be identical, move for
 * move.  Each snapshot is planned with 1 thread and with 2 or 3 (by the
 * seed), large ones also with the threads of their parameters (auto), the
 * threads lent by pools of the daemon's (daemon/workers.c) of 2, 3 and the
 * auto size: plans must not depend on them.
 * Usage: test-plan-equiv [CASES [SEED]].
 */
#include "config.h"

#include <stdbool.h>
#include <stdlib.h>

#include "plan-ref.h"
#include "policy.h"
#include "protocol.h"
#include "tap.h"
#include "workers.h"

#define CASES_DEFAULT 4000u /* per policy */
#define MAX_REGIONS   40u
#define MAX_CLIENTS   5u

static uint64_t rng;

/* The pools: of 2 and 3 threads, and of the size kvtierd starts for
 * [policy] threads = 0. */
static struct workers *pool2, *pool3, *pool_auto;

static uint64_t next_rand(void) {
        /* splitmix64 */
        uint64_t z = (rng += 0x9e3779b97f4a7c15ull);

        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
}

/* Uniform in [0, n); 0 for n == 0. */
static uint64_t below(uint64_t n) {
        return n ? next_rand() % n : 0;
}

/* True with probability percent / 100. */
static bool chance(unsigned percent) {
        return below(100) < percent;
}

struct snapshot {
        struct policy_params pp;
        struct policy_input in;
        struct policy_region regions[MAX_REGIONS];
        struct policy_client clients[MAX_CLIENTS];
        struct policy_chunk *chunks;
        size_t n_chunks;
};

/* A tick some way before now, never below 1 (0 means never used). */
static uint32_t tick_before(uint32_t now, uint64_t back) {
        return back < now ? now - (uint32_t)back : 1;
}

/* Overwrites last_use with three ticks of a sequential or strided run,
 * ascending or descending, ending at now or the tick before. */
static void fill_stream(struct policy_chunk *c, uint32_t n, uint32_t now) {
        uint32_t stride = 1 + (uint32_t)below(8), width = 1 + (uint32_t)below(stride);
        uint32_t lag = (uint32_t)below(2), first = (uint32_t)below(n);
        bool down = chance(30), sequential = !down && chance(40);

        if (sequential)
                stride = width;
        for (uint32_t t = 0; t < 3; t++) {
                int64_t at =
                        down ? (int64_t)first - (int64_t)t * stride : (int64_t)first + (int64_t)t * stride;

                for (uint32_t w = 0; w < width; w++)
                        if (at + w >= 0 && at + w < n && now >= 3)
                                c[at + w].last_use = now - lag - (2 - t);
        }
}

static void fill_chunks(struct snapshot *s, uint32_t now) {
        static const uint64_t spans[] = {3, 30, 1000, 5000, 100000, 5000000};
        uint64_t span = spans[below(sizeof(spans) / sizeof(spans[0]))];
        unsigned pinned = chance(10) ? 90 : chance(50) ? 5 : 0, hot = chance(50) ? 10 : 0;
        unsigned pending = chance(50) ? 10 : 0, moved = chance(50) ? 20 : 0, never = chance(30) ? 20 : 2;
        uint64_t quiet = chance(40) ? 5 : 0; /* ticks before now left to the streams */

        for (size_t i = 0; i < s->n_chunks; i++) {
                struct policy_chunk *c = &s->chunks[i];

                c->last_use = chance(never) ? 0
                              : chance(2)   ? now + 1
                                            : tick_before(now, quiet + below(span));
                c->heat = chance(2) ? (uint32_t)next_rand() : (uint32_t)below(64 * POLICY_HEAT_ONE);
                c->last_move = chance(moved) ? tick_before(now, below(5)) : 0;
                c->tier = (uint8_t)below(_KVT_TIER_MAX);
                c->pending = chance(pending) ? (chance(50) ? KVT_TIER_VRAM : KVT_TIER_HOST_MAPPED) : 0;
                c->flags = (uint8_t)(chance(pinned) * POLICY_CHUNK_PINNED | chance(hot) * POLICY_CHUNK_HOT |
                                     chance(30) * POLICY_CHUNK_COLD);
        }
}

static void fill_params(struct snapshot *s, enum policy_kind k) {
        static const uint32_t evict_tiers[] = {0, KVT_TIER_HOST_MAPPED, KVT_TIER_HOST};

        policy_params_default(k, &s->pp);
        if (chance(30))
                return;
        s->pp.hysteresis_ticks = (uint32_t)below(4);
        s->pp.heat_half_life_ticks = chance(1) ? 0 : 1 + (uint32_t)below(40);
        s->pp.window_chunks = chance(20) ? 0 : (uint32_t)below(300);
        s->pp.prefetch_depth = chance(30) ? 0 : (uint32_t)below(70);
        s->pp.run_cap = (uint32_t)below(6);
        s->pp.evict_tier = evict_tiers[below(3)];
        s->pp.active_ticks = (uint32_t)below(10);
}

/* A random snapshot; large: tens of thousands of chunks (rank buckets with
 * many chunks), else up to a few thousand. */
/* Regions of these sizes only, so that demand's sibling groups form
 * (check_siblings_case()); 0 sizes: any. */
static const uint32_t *sibling_sizes;
static size_t n_sibling_sizes;

static int snapshot_new(struct snapshot *s, enum policy_kind k, bool large) {
        static const uint32_t nows[] = {0, 1, 2, 7, 100, 1000, 5000, 3000000, UINT32_MAX - 2};
        size_t n_regions = large || n_sibling_sizes ? 4 + below(MAX_REGIONS - 4) : below(12);
        uint32_t now = nows[below(sizeof(nows) / sizeof(nows[0]))], sizes[MAX_REGIONS];
        size_t at = 0;
        bool quotas = false;

        *s = (struct snapshot){0};
        for (size_t r = 0; r < n_regions; r++) {
                sizes[r] = n_sibling_sizes ? sibling_sizes[below(n_sibling_sizes)]
                                           : (uint32_t)(large ? below(4000) : chance(20) ? 0 : below(chance(20) ? 600 : 64));
                s->n_chunks += sizes[r];
        }
        s->chunks = calloc(s->n_chunks + 1, sizeof(*s->chunks));
        if (!s->chunks)
                return -1;
        fill_chunks(s, now);
        if (chance(50))
                s->in.n_clients = 1 + below(MAX_CLIENTS);
        for (size_t c = 0; c < s->in.n_clients; c++)
                s->clients[c] = (struct policy_client){.quota_chunks = chance(40)   ? UINT64_MAX
                                                                       : chance(10) ? 0
                                                                                    : below(s->n_chunks + 5),
                                                       .priority = (uint8_t)below(POLICY_PRIORITY_MAX + 3),
                                                       .protect_ticks = chance(50) ? 0 : (uint32_t)below(2000)};
        for (size_t c = 0; c < s->in.n_clients; c++)
                quotas |= s->clients[c].quota_chunks != UINT64_MAX;
        for (size_t r = 0; r < n_regions; r++) {
                /* A client index out of range reads past the reference's quota
                 * arrays: only without quotas. */
                s->regions[r] = (struct policy_region){.chunks = s->chunks + at,
                                                       .n_chunks = sizes[r],
                                                       .client = (uint32_t)below(s->in.n_clients + !quotas),
                                                       .last_active = chance(30) ? 0 : tick_before(now, below(8)),
                                                       .launch_rate = chance(30) ? 0
                                                                      : (uint32_t)below(1u << (1 + below(31)))};
                for (unsigned streams = (unsigned)below(3); sizes[r] && streams-- > 0;)
                        fill_stream(s->chunks + at, sizes[r], now);
                at += sizes[r];
        }
        fill_params(s, k);
        s->in.regions = s->regions;
        s->in.n_regions = n_regions;
        s->in.clients = s->in.n_clients ? s->clients : NULL;
        s->in.now = now;
        s->in.budget_chunks = chance(10) ? 0 : chance(10) ? s->n_chunks : below(s->n_chunks + 5);
        s->in.charged_chunks = below(s->n_chunks + 5);
        s->in.max_move_chunks = chance(40) ? UINT64_MAX : below(s->n_chunks + 3);
        s->in.protect_ticks = chance(20) ? 0 : (uint32_t)below(chance(50) ? 8 : 200000);
        return 0;
}

/* Whether two plans are the same; if not, says where they differ first. */
static bool plans_equal(const struct policy_plan *a, const struct policy_plan *b) {
        size_t n = a->n_moves < b->n_moves ? a->n_moves : b->n_moves;

        for (size_t i = 0; i < n; i++) {
                const struct policy_move *x = &a->moves[i], *y = &b->moves[i];

                if (x->region != y->region || x->first_chunk != y->first_chunk ||
                    x->n_chunks != y->n_chunks || x->tier != y->tier) {
                        TAP_DIAG("move %zu: region %u chunks %u+%u to %u, expected region %u chunks %u+%u "
                                 "to %u",
                                 i, x->region, x->first_chunk, x->n_chunks, x->tier, y->region,
                                 y->first_chunk, y->n_chunks, y->tier);
                        return false;
                }
        }
        if (a->n_moves != b->n_moves || a->evict_chunks != b->evict_chunks ||
            a->promote_chunks != b->promote_chunks || a->prefetch_chunks != b->prefetch_chunks) {
                TAP_DIAG("%zu moves, %" PRIu64 "/%" PRIu64 "/%" PRIu64
                         " evicted/promoted/prefetched; expected "
                         "%zu moves, %" PRIu64 "/%" PRIu64 "/%" PRIu64,
                         a->n_moves, a->evict_chunks, a->promote_chunks, a->prefetch_chunks, b->n_moves,
                         b->evict_chunks, b->promote_chunks, b->prefetch_chunks);
                return false;
        }
        return true;
}

/* What the cases exercised, so that a quiet generator shows. */
struct coverage {
        unsigned moved, prefetched, evicted, quotas;
};

/* Runs one snapshot through both planners, policy_plan() with 1 thread
 * (threads = 1, though a pool is lent), with 2 or 3 (threads = 2 or 3 of a
 * pool of 2 or 3: the fewer of the two) and, if large, with the snapshot's
 * threads (auto: all of the auto pool's, one per 64K chunks).  Returns
 * whether they agree. */
static bool check_case(enum policy_kind k, bool large, uint64_t seed, struct coverage *cov) {
        const uint32_t threads[] = {1, 2 + (uint32_t)(seed / 7 % 2), UINT32_MAX /* the snapshot's */};
        const struct policy_workers *pools[] = {workers_policy(pool3),
                                                workers_policy(seed / 3 % 2 ? pool3 : pool2),
                                                workers_policy(pool_auto)};
        struct policy_plan got = {0}, want = {0};
        struct snapshot s;
        int rg = 0, rw;
        bool same = true;

        rng = seed;
        if (snapshot_new(&s, k, large) < 0)
                return false;
        rw = plan_ref(&s.pp, &s.in, &want);
        for (size_t t = 0; t < (large ? 3u : 2u) && same; t++) {
                struct policy_params pp = s.pp;

                if (threads[t] != UINT32_MAX)
                        pp.threads = threads[t];
                s.in.workers = pools[t];
                rg = policy_plan(&pp, &s.in, &got);
                same = rg == rw && plans_equal(&got, &want);
                if (!same)
                        TAP_DIAG("%s: seed %" PRIu64 " with threads = %" PRIu32 " of a pool of %u differs",
                                 policy_kind_name(k), seed, pp.threads, pools[t]->n);
                policy_plan_clear(&got);
        }
        cov->moved += want.n_moves > 0;
        cov->prefetched += want.prefetch_chunks > 0;
        cov->evicted += want.evict_chunks > 0;
        for (size_t c = 0; c < s.in.n_clients; c++)
                if (s.clients[c].quota_chunks != UINT64_MAX) {
                        cov->quotas++;
                        break;
                }
        if (!same)
                TAP_DIAG("%s: seed %" PRIu64 " (%zu chunks in %zu regions): returned %d, expected %d",
                         policy_kind_name(k), seed, s.n_chunks, s.in.n_regions, rg, rw);
        policy_plan_clear(&got);
        policy_plan_clear(&want);
        free(s.chunks);
        return same;
}

/* demand with sibling groups, which the reference planner predates:
 * regions of a few sizes (groups of one client and size form, some of
 * more offsets than one block of the threads' counting, policy/siblings.c),
 * host chunks mapped or armed; the plans with 1, 2 or 3, and auto threads
 * must be the same.  *told counts plans that judged chunks on their
 * siblings' word. */
static bool check_siblings_case(uint64_t seed, unsigned *told) {
        static const uint32_t sizes[] = {8, 9, 300, 700, 1100};
        const uint32_t threads[] = {2 + (uint32_t)(seed / 7 % 2), 0};
        const struct policy_workers *pools[] = {workers_policy(seed / 3 % 2 ? pool3 : pool2),
                                                workers_policy(pool_auto)};
        struct policy_plan one = {0}, got = {0};
        struct snapshot s;
        bool same = true;
        int r1, rg;

        rng = seed;
        sibling_sizes = sizes;
        n_sibling_sizes = sizeof(sizes) / sizeof(sizes[0]);
        r1 = snapshot_new(&s, POLICY_DEMAND, true);
        sibling_sizes = NULL;
        n_sibling_sizes = 0;
        if (r1 < 0)
                return false;
        for (size_t i = 0; i < s.n_chunks; i++)
                if (s.chunks[i].tier == KVT_TIER_HOST && chance(40))
                        s.chunks[i].flags |= POLICY_CHUNK_MAPPED;
        s.in.probe_window = (uint32_t)below(300);
        s.pp.threads = 1;
        r1 = policy_plan(&s.pp, &s.in, &one);
        *told += r1 == 0 && one.sibling_demand_chunks + one.sibling_stale_chunks > 0;
        for (size_t t = 0; t < 2 && same; t++) {
                s.pp.threads = threads[t];
                s.in.workers = pools[t];
                rg = policy_plan(&s.pp, &s.in, &got);
                same = rg == r1 && plans_equal(&got, &one) && got.sibling_groups == one.sibling_groups &&
                       got.sibling_groups_mute == one.sibling_groups_mute &&
                       got.sibling_demand_chunks == one.sibling_demand_chunks &&
                       got.sibling_stale_chunks == one.sibling_stale_chunks &&
                       got.stale_chunks == one.stale_chunks && got.cold_chunks == one.cold_chunks;
                if (!same)
                        TAP_DIAG("demand, siblings: seed %" PRIu64 " with threads = %" PRIu32 " of a pool of %u "
                                 "differs from one thread's",
                                 seed, threads[t], pools[t]->n);
                policy_plan_clear(&got);
        }
        policy_plan_clear(&one);
        free(s.chunks);
        return same;
}

int main(int argc, char **argv) {
        unsigned cases = argc > 1 ? (unsigned)strtoul(argv[1], NULL, 10) : CASES_DEFAULT;
        uint64_t seed0 = argc > 2 ? strtoull(argv[2], NULL, 0) : 0x6b7674696572ull;

        if (workers_new(2, &pool2) < 0 || workers_new(3, &pool3) < 0 ||
            workers_new(workers_threads_for(0), &pool_auto) < 0)
                return 99;
        TAP_DIAG("pools of %u, %u and %u threads (auto)", workers_n(pool2), workers_n(pool3), workers_n(pool_auto));

        for (int k = 0; k < _POLICY_KIND_MAX; k++) {
                unsigned failed = 0, n_large = 0, i;
                struct coverage cov = {0};

                for (i = 0; i < cases && failed < 3; i++) { /* three diagnoses are plenty */
                        uint64_t seed = seed0 + (uint64_t)k * cases + i;
                        bool large = seed % 50 == 0;

                        n_large += large;
                        failed += !check_case((enum policy_kind)k, large, seed, &cov);
                }
                TAP_DIAG("%s: %u plans with moves, %u with evictions, %u with prefetches, %u with quotas",
                         policy_kind_name((enum policy_kind)k), cov.moved, cov.evicted, cov.prefetched,
                         cov.quotas);
                TAP_OK(failed == 0, "%s: %u random snapshots (%u large) plan as the reference does",
                       policy_kind_name((enum policy_kind)k), i, n_large);
        }
        {
                unsigned failed = 0, told = 0, i;

                for (i = 0; i < cases / 10 && failed < 3; i++)
                        failed += !check_siblings_case(seed0 + 0x5151 + i, &told);
                TAP_DIAG("demand, siblings: %u plans judged chunks on their siblings' word", told);
                TAP_OK(failed == 0 && told > 0, "demand, siblings: %u random snapshots plan alike on 1, 2-3 and auto threads",
                       i);
        }
        workers_free(pool2);
        workers_free(pool3);
        workers_free(pool_auto);
        return tap_done();
}
