/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <stdlib.h>

#include "plan-moves.h"
#include "policy.h"
#include "protocol.h"
#include "tap.h"

#define V KVT_TIER_VRAM
#define M KVT_TIER_HOST_MAPPED

static struct policy_params params(enum policy_kind k) {
        struct policy_params pp;

        policy_params_default(k, &pp);
        return pp;
}

static struct policy_input input1(const struct policy_region *reg, uint32_t now, uint64_t budget,
                                  uint64_t charged) {
        return (struct policy_input){.regions = reg,
                                     .n_regions = 1,
                                     .now = now,
                                     .budget_chunks = budget,
                                     .charged_chunks = charged,
                                     .max_move_chunks = UINT64_MAX};
}

static void test_names(void) {
        TAP_EQ_INT(policy_kind_from_name("hybrid"), POLICY_HYBRID, "names: hybrid");
        TAP_EQ_INT(policy_kind_from_name("lru"), POLICY_LRU, "names: lru");
        TAP_EQ_INT(policy_kind_from_name("LRU"), -EINVAL, "names: case matters");
        TAP_EQ_STR(policy_kind_name(POLICY_WINDOW), "window", "names: window");
        TAP_OK(policy_kind_name(_POLICY_KIND_MAX) == NULL, "names: out of range is NULL");
}

static void test_heat_decay(void) {
        struct policy_chunk c = {0};

        policy_chunk_touch(&c, 10, 4, 8);
        TAP_EQ_U64(c.heat, 4 * POLICY_HEAT_ONE, "heat: 4 accesses");
        TAP_EQ_U64(c.last_use, 10, "heat: last_use set");
        TAP_EQ_U64(policy_heat_at(&c, 18, 8), 2 * POLICY_HEAT_ONE, "heat: halves after one half-life");
        TAP_EQ_U64(policy_heat_at(&c, 26, 8), POLICY_HEAT_ONE, "heat: quarter after two");
        TAP_OK(policy_heat_at(&c, 14, 8) < 4 * POLICY_HEAT_ONE && policy_heat_at(&c, 14, 8) > 2 * POLICY_HEAT_ONE,
               "heat: decays between half-lives too");
        TAP_EQ_U64(policy_heat_at(&c, 10 + 8 * 40, 8), 0, "heat: gone after 40 half-lives");
        policy_chunk_touch(&c, 18, 1, 8);
        TAP_EQ_U64(c.heat, 3 * POLICY_HEAT_ONE, "heat: touch decays first, then adds");
        c.heat = UINT32_MAX - 1;
        policy_chunk_touch(&c, 18, 1000, 8);
        TAP_EQ_U64(c.heat, UINT32_MAX, "heat: saturates");
        TAP_EQ_INT(policy_heat_class(0), 0, "class: cold");
        TAP_EQ_INT(policy_heat_class(POLICY_HEAT_ONE), 1, "class: one access");
        TAP_EQ_INT(policy_heat_class(3 * POLICY_HEAT_ONE), 2, "class: three accesses");
        TAP_EQ_INT(policy_heat_class(UINT32_MAX), 15, "class: capped at 15");
}

/* heat keeps the frequently used chunk over the recently used one; lru does the opposite. */
static void test_heat_vs_lru(void) {
        struct policy_chunk c[2] = {0};
        struct policy_region reg = {.chunks = c, .n_chunks = 2};
        struct policy_input in = input1(&reg, 20, 1, 0);
        struct policy_params heat = params(POLICY_HEAT), lru = params(POLICY_LRU);
        struct policy_plan p;

        c[0].tier = c[1].tier = M;
        policy_chunk_touch(&c[0], 18, 16, heat.heat_half_life_ticks); /* hot */
        policy_chunk_touch(&c[1], 20, 1, heat.heat_half_life_ticks);  /* recent */
        TAP_EQ_INT(policy_plan(&heat, &in, &p), 0, "heat vs lru: heat plans");
        TAP_OK(moved(&p, 0, 0, V) && !moved(&p, 0, 1, V), "heat: promotes the hot chunk");
        policy_plan_clear(&p);
        TAP_EQ_INT(policy_plan(&lru, &in, &p), 0, "heat vs lru: lru plans");
        TAP_OK(moved(&p, 0, 1, V) && !moved(&p, 0, 0, V), "lru: promotes the recent chunk");
        policy_plan_clear(&p);
}

/* A chunk hinted HOT long ago outranks a hotter, more recent chunk the
 * engine did not hint, under every policy; PINNED still outranks it. */
static void test_hinted_hot(void) {
        for (enum policy_kind k = 0; k < _POLICY_KIND_MAX; k++) {
                struct policy_chunk c[3] = {0};
                struct policy_region reg = {.chunks = c, .n_chunks = 3};
                struct policy_input in = input1(&reg, 500, 1, 0);
                struct policy_params pp = params(k);
                struct policy_plan p;

                c[0].tier = c[1].tier = c[2].tier = M;
                policy_chunk_touch(&c[0], 1, 1, pp.heat_half_life_ticks); /* hinted at tick 1, not seen since */
                c[0].flags = POLICY_CHUNK_HOT;
                policy_chunk_touch(&c[1], 500, 64, pp.heat_half_life_ticks); /* hot and recent */
                TAP_EQ_INT(policy_plan(&pp, &in, &p), 0, "hinted HOT, %s: plans", policy_kind_name(k));
                TAP_OK(moved(&p, 0, 0, V) && !moved(&p, 0, 1, V), "hinted HOT, %s: the hinted chunk gets the budget",
                       policy_kind_name(k));
                policy_plan_clear(&p);
                c[2].flags = POLICY_CHUNK_PINNED;
                TAP_EQ_INT(policy_plan(&pp, &in, &p), 0, "hinted HOT and PINNED, %s: plans", policy_kind_name(k));
                TAP_OK(moved(&p, 0, 2, V) && !moved(&p, 0, 0, V), "hinted HOT, %s: PINNED still comes first",
                       policy_kind_name(k));
                policy_plan_clear(&p);
        }
}

/* Two chunks of equal heat alternate being touched, budget one: once their
 * heat has built up (moves counted after tick 20), heat keeps the resident;
 * plain lru swaps every tick. */
static unsigned bounces(enum policy_kind k, uint32_t hysteresis) {
        struct policy_chunk c[2] = {{.tier = V}, {.tier = M}};
        struct policy_region reg = {.chunks = c, .n_chunks = 2};
        struct policy_params pp = params(k);
        unsigned n = 0;

        pp.hysteresis_ticks = hysteresis;
        for (uint32_t now = 1; now <= 40; now++) {
                struct policy_input in = input1(&reg, now, 1, c[0].tier == V || c[1].tier == V);
                struct policy_plan p;

                policy_chunk_touch(&c[now % 2], now, 1, pp.heat_half_life_ticks);
                if (policy_plan(&pp, &in, &p) < 0)
                        return UINT32_MAX;
                /* Moves complete at once (evictions first, promotions next tick when room). */
                for (size_t m = 0; m < p.n_moves; m++)
                        for (uint32_t i = 0; i < p.moves[m].n_chunks; i++) {
                                struct policy_chunk *ch = &c[p.moves[m].first_chunk + i];

                                ch->tier = (uint8_t)p.moves[m].tier;
                                ch->last_move = now;
                                n += now > 20; /* after warming up */
                        }
                policy_plan_clear(&p);
        }
        return n;
}

static void test_hysteresis(void) {
        unsigned lru = bounces(POLICY_LRU, 0), heat = bounces(POLICY_HEAT, 4), heat0 = bounces(POLICY_HEAT, 0);

        TAP_DIAG("moves in ticks 21..40: lru %u, heat %u, heat without hysteresis ticks %u", lru,
                 heat, heat0);
        TAP_OK(lru >= 10, "hysteresis: lru bounces (%u moves)", lru);
        TAP_EQ_INT(heat, 0, "hysteresis: heat with hysteresis_ticks keeps the resident");
        /* The class bonus alone still flips where the resident decays across a class boundary. */
        TAP_OK(heat0 < lru / 4, "hysteresis: the class bonus alone damps the bounce (%u < %u / 4)", heat0, lru);
}

/* hysteresis_ticks: a chunk moved within the window is left alone even when unwanted. */
static void test_frozen(void) {
        struct policy_chunk c[2] = {{.tier = V, .last_move = 9}, {.tier = M, .last_use = 10, .heat = 64 * POLICY_HEAT_ONE}};
        struct policy_region reg = {.chunks = c, .n_chunks = 2};
        struct policy_params pp = params(POLICY_HEAT);
        struct policy_input in = input1(&reg, 10, 1, 1);
        struct policy_plan p;

        pp.hysteresis_ticks = 4;
        TAP_EQ_INT(policy_plan(&pp, &in, &p), 0, "frozen: plans");
        TAP_EQ_U64(p.n_moves, 0, "frozen: chunk moved 1 tick ago stays");
        policy_plan_clear(&p);
        in.now = 13;
        c[1].last_use = 13;
        TAP_EQ_INT(policy_plan(&pp, &in, &p), 0, "frozen: plans later");
        TAP_OK(moved(&p, 0, 0, M), "frozen: evicted once the hysteresis passed");
        policy_plan_clear(&p);
}

/* window: the newest chunks of each region stay, however cold. */
static void test_window(void) {
        struct policy_chunk c[16] = {0};
        struct policy_region reg = {.chunks = c, .n_chunks = 16};
        struct policy_params pp = params(POLICY_WINDOW);
        struct policy_input in = input1(&reg, 100, 4, 0);
        struct policy_plan p;

        pp.window_chunks = 4;
        for (int i = 0; i < 16; i++)
                c[i] = (struct policy_chunk){.tier = M, .last_use = i <= 9 ? 100 - (uint32_t)(i % 3) : 0};
        c[9].last_use = 50; /* the append point, touched long ago */
        for (int i = 6; i < 9; i++)
                c[i].last_use = 40;
        TAP_EQ_INT(policy_plan(&pp, &in, &p), 0, "window: plans");
        TAP_OK(moved(&p, 0, 6, V) && moved(&p, 0, 7, V) && moved(&p, 0, 8, V) && moved(&p, 0, 9, V),
               "window: chunks 6..9 below the frontier promoted though colder");
        TAP_EQ_U64(p.promote_chunks, 4, "window: exactly the window");
        policy_plan_clear(&p);
}

/* A region scanned forward 2 chunks a tick: hybrid promotes ahead of it. */
static void test_prefetch(void) {
        struct policy_chunk c[64] = {0};
        struct policy_region reg = {.chunks = c, .n_chunks = 64};
        struct policy_params pp = params(POLICY_HYBRID);
        struct policy_input in = input1(&reg, 12, 64, 0);
        struct policy_plan p;

        pp.window_chunks = 0;
        pp.prefetch_depth = 3;
        for (int i = 0; i < 64; i++)
                c[i].tier = M;
        for (uint32_t t = 10; t <= 12; t++)
                for (uint32_t k = 0; k < 2; k++)
                        policy_chunk_touch(&c[(t - 10) * 2 + k], t, 1, 20);
        in.budget_chunks = 12;
        TAP_EQ_INT(policy_plan(&pp, &in, &p), 0, "prefetch: plans");
        TAP_EQ_U64(p.prefetch_chunks, 6, "prefetch: 3 strides of 2 chunks ahead");
        TAP_OK(moved(&p, 0, 6, V) && moved(&p, 0, 11, V) && !moved(&p, 0, 12, V), "prefetch: chunks 6..11");
        policy_plan_clear(&p);

        /* Sequential is told from two ticks: runs 0-1 then 2-3. */
        for (int i = 0; i < 64; i++)
                c[i] = (struct policy_chunk){.tier = M};
        policy_chunk_touch(&c[0], 11, 1, 20);
        policy_chunk_touch(&c[1], 11, 1, 20);
        policy_chunk_touch(&c[2], 12, 1, 20);
        policy_chunk_touch(&c[3], 12, 1, 20);
        in.now = 12;
        TAP_EQ_INT(policy_plan(&pp, &in, &p), 0, "sequential in two ticks: plans");
        TAP_EQ_U64(p.prefetch_chunks, 6, "sequential in two ticks: 3 strides of 2 ahead");
        TAP_OK(moved(&p, 0, 4, V) && moved(&p, 0, 9, V) && !moved(&p, 0, 10, V), "sequential in two ticks: 4..9");
        policy_plan_clear(&p);

        /* Two ticks that do not join (0-1, then 5-6) are no stream yet. */
        for (int i = 0; i < 64; i++)
                c[i] = (struct policy_chunk){.tier = M};
        policy_chunk_touch(&c[0], 11, 1, 20);
        policy_chunk_touch(&c[1], 11, 1, 20);
        policy_chunk_touch(&c[5], 12, 1, 20);
        policy_chunk_touch(&c[6], 12, 1, 20);
        TAP_EQ_INT(policy_plan(&pp, &in, &p), 0, "gap in two ticks: plans");
        TAP_EQ_U64(p.prefetch_chunks, 0, "gap in two ticks: no prefetch");
        policy_plan_clear(&p);

        /* Strided: every 4th chunk, one per tick, descending. */
        for (int i = 0; i < 64; i++)
                c[i] = (struct policy_chunk){.tier = M};
        policy_chunk_touch(&c[40], 20, 1, 20);
        policy_chunk_touch(&c[36], 21, 1, 20);
        policy_chunk_touch(&c[32], 22, 1, 20);
        in.now = 22;
        in.budget_chunks = 8;
        TAP_EQ_INT(policy_plan(&pp, &in, &p), 0, "stride: plans");
        TAP_EQ_U64(p.prefetch_chunks, 3, "stride: 3 chunks ahead");
        TAP_OK(moved(&p, 0, 28, V) && moved(&p, 0, 24, V) && moved(&p, 0, 20, V) && !moved(&p, 0, 29, V),
               "stride: 28, 24, 20");
        policy_plan_clear(&p);

        /* No stream: the same chunks every tick. */
        pp.prefetch_depth = 3;
        for (int i = 0; i < 64; i++)
                c[i] = (struct policy_chunk){.tier = M};
        for (uint32_t t = 1; t <= 5; t++)
                for (int i = 0; i < 4; i++)
                        policy_chunk_touch(&c[i], t, 1, 20);
        in.now = 5;
        TAP_EQ_INT(policy_plan(&pp, &in, &p), 0, "no stream: plans");
        TAP_EQ_U64(p.prefetch_chunks, 0, "no stream: nothing prefetched");
        policy_plan_clear(&p);
}

/* Quota caps a client; priority ranks a client's chunks above another's. */
static void test_clients(void) {
        struct policy_chunk a[8] = {0}, b[8] = {0};
        struct policy_region regs[2] = {{.chunks = a, .n_chunks = 8, .client = 0},
                                        {.chunks = b, .n_chunks = 8, .client = 1}};
        struct policy_client cl[2] = {{.quota_chunks = UINT64_MAX}, {.quota_chunks = UINT64_MAX}};
        struct policy_params pp = params(POLICY_LRU);
        struct policy_input in = {.regions = regs,
                                  .n_regions = 2,
                                  .clients = cl,
                                  .n_clients = 2,
                                  .now = 10,
                                  .budget_chunks = 8,
                                  .max_move_chunks = UINT64_MAX};
        struct policy_plan p;
        uint64_t na = 0, nb = 0;

        for (int i = 0; i < 8; i++) {
                a[i] = (struct policy_chunk){.tier = M, .last_use = 5};
                b[i] = (struct policy_chunk){.tier = M, .last_use = 9};
        }
        cl[0].priority = 1;
        TAP_EQ_INT(policy_plan(&pp, &in, &p), 0, "priority: plans");
        for (uint32_t i = 0; i < 8; i++)
                na += moved(&p, 0, i, V), nb += moved(&p, 1, i, V);
        TAP_OK(na == 8 && nb == 0, "priority: the priority client's colder chunks win (%llu, %llu)",
               (unsigned long long)na, (unsigned long long)nb);
        policy_plan_clear(&p);

        cl[0].quota_chunks = 3;
        na = nb = 0;
        TAP_EQ_INT(policy_plan(&pp, &in, &p), 0, "quota: plans");
        for (uint32_t i = 0; i < 8; i++)
                na += moved(&p, 0, i, V), nb += moved(&p, 1, i, V);
        TAP_OK(na == 3 && nb == 5, "quota: 3 for the capped client, the rest to the other (%llu, %llu)",
               (unsigned long long)na, (unsigned long long)nb);
        policy_plan_clear(&p);

        /* A region whose client index is out of range has no client: no
         * quota (it was read past the quotas' end; the sanitizer build
         * catches that). */
        regs[1].client = 7;
        na = nb = 0;
        TAP_EQ_INT(policy_plan(&pp, &in, &p), 0, "quota, a region of no client: plans");
        for (uint32_t i = 0; i < 8; i++)
                na += moved(&p, 0, i, V), nb += moved(&p, 1, i, V);
        TAP_OK(na == 3 && nb == 5, "quota, a region of no client: it takes the rest (%llu, %llu)",
               (unsigned long long)na, (unsigned long long)nb);
        policy_plan_clear(&p);
        regs[1].client = 1;

        /* Over quota while resident: evicted, even with budget to spare. */
        for (int i = 0; i < 8; i++)
                a[i].tier = V, b[i].tier = M, b[i].last_use = 0;
        in.budget_chunks = 16;
        in.charged_chunks = 8;
        cl[0].priority = 0;
        TAP_EQ_INT(policy_plan(&pp, &in, &p), 0, "quota evict: plans");
        TAP_EQ_U64(p.evict_chunks, 5, "quota evict: 5 chunks over quota evicted");
        policy_plan_clear(&p);

        /* The quota holds while evictions are under way: 3 cold chunks held,
         * 3 hotter ones wanted instead; they wait until the cold ones are out. */
        for (int i = 0; i < 8; i++)
                a[i] = (struct policy_chunk){.tier = i < 3 ? V : M, .last_use = i < 3 ? 1 : 9};
        in.charged_chunks = 3;
        TAP_EQ_INT(policy_plan(&pp, &in, &p), 0, "quota room: plans");
        TAP_EQ_U64(p.evict_chunks, 3, "quota room: the cold held chunks are evicted");
        na = 0;
        for (uint32_t i = 0; i < 8; i++)
                na += moved(&p, 0, i, V);
        TAP_EQ_U64(na, 0, "quota room: no promotion while the quota is held");
        nb = 0;
        for (uint32_t i = 0; i < 8; i++)
                nb += moved(&p, 1, i, V);
        TAP_EQ_U64(p.promote_chunks, nb, "quota room: promote_chunks counts what is promoted (the other client's)");
        policy_plan_clear(&p);
        for (int i = 0; i < 3; i++)
                a[i].tier = M; /* the evictions are done */
        in.charged_chunks = 0;
        TAP_EQ_INT(policy_plan(&pp, &in, &p), 0, "quota room: plans after the evictions");
        na = 0;
        for (uint32_t i = 0; i < 8; i++)
                na += moved(&p, 0, i, V);
        TAP_EQ_U64(na, 3, "quota room: now the 3 hottest come in");
        policy_plan_clear(&p);
}

static void test_bad_params(void) {
        struct policy_chunk c[1] = {0};
        struct policy_region reg = {.chunks = c, .n_chunks = 1};
        struct policy_input in = input1(&reg, 1, 1, 0);
        struct policy_params pp = params(POLICY_HEAT);
        struct policy_plan p;

        pp.heat_half_life_ticks = 0;
        TAP_EQ_INT(policy_plan(&pp, &in, &p), -EINVAL, "bad: half-life 0");
        pp = params(POLICY_HEAT);
        pp.kind = _POLICY_KIND_MAX;
        TAP_EQ_INT(policy_plan(&pp, &in, &p), -EINVAL, "bad: unknown kind");
        reg.chunks = NULL;
        pp = params(POLICY_HEAT);
        TAP_EQ_INT(policy_plan(&pp, &in, &p), -EINVAL, "bad: chunks missing");
}

/* Random snapshots through every policy: never over budget, pinned never
 * evicted, pending never ordered, rate respected, runs well-formed. */
static void test_invariants(void) {
        enum { NR = 5, NC = 200 };
        static struct policy_chunk c[NR][NC];
        struct policy_region regs[NR];
        uint64_t x = 0x9e3779b97f4a7c15ull;
        unsigned bad = 0, plans = 0;

        for (int round = 0; round < 200; round++)
                for (int k = 0; k < _POLICY_KIND_MAX; k++) {
                        struct policy_params pp = params((enum policy_kind)k);
                        struct policy_input in = {.regions = regs, .n_regions = NR, .now = 1000};
                        uint64_t charged = 0, promoted = 0, moved_n = 0;
                        struct policy_plan p;

                        for (int r = 0; r < NR; r++) {
                                regs[r] = (struct policy_region){.chunks = c[r], .n_chunks = NC};
                                for (int i = 0; i < NC; i++) {
                                        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                                        c[r][i] = (struct policy_chunk){
                                                .last_use = (uint32_t)(x % 1000),
                                                .heat = (uint32_t)(x >> 20) % (64 * POLICY_HEAT_ONE),
                                                .last_move = (uint32_t)(x >> 40) % 1000,
                                                .tier = (x >> 50) % 3 == 0 ? V : M,
                                                .pending = (x >> 52) % 17 == 0 ? M : 0,
                                                .flags = (x >> 56) % 23 == 0 ? POLICY_CHUNK_PINNED : 0};
                                        charged += c[r][i].tier == V;
                                }
                        }
                        in.budget_chunks = charged + (x % 100) - 50;
                        in.charged_chunks = charged;
                        in.max_move_chunks = round % 3 ? x % 300 : UINT64_MAX;
                        pp.run_cap = 1 + (uint32_t)(x % 64);
                        if (policy_plan(&pp, &in, &p) < 0) {
                                bad++;
                                continue;
                        }
                        plans++;
                        for (size_t m = 0; m < p.n_moves; m++) {
                                const struct policy_move *mv = &p.moves[m];

                                bad += mv->n_chunks == 0 || mv->n_chunks > pp.run_cap ||
                                       mv->first_chunk + mv->n_chunks > NC;
                                for (uint32_t i = mv->first_chunk; i < mv->first_chunk + mv->n_chunks; i++) {
                                        const struct policy_chunk *ch = &c[mv->region][i];

                                        bad += ch->pending != 0;
                                        bad += mv->tier == M && (ch->flags & POLICY_CHUNK_PINNED);
                                        bad += mv->tier == M && ch->tier != V;
                                        bad += mv->tier == V && ch->tier == V;
                                        promoted += mv->tier == V;
                                        moved_n++;
                                }
                        }
                        bad += moved_n != p.evict_chunks + p.promote_chunks;
                        bad += moved_n > in.max_move_chunks;
                        bad += charged + promoted > (in.budget_chunks > charged ? in.budget_chunks : charged);
                        policy_plan_clear(&p);
                }
        TAP_EQ_INT(bad, 0, "invariants: %u random plans: budget, pinned, pending, rate, runs", plans);
}

#define H KVT_TIER_HOST

/* demand: a fault (a fresh use) on a host chunk displaces a resident chunk
 * a probe found cold, not one merely unseen (a chunk in VRAM gives no sign
 * of use), and an equally stale host chunk displaces nothing. */
static void test_demand_fault(void) {
        struct policy_params pp = params(POLICY_DEMAND);
        struct policy_chunk c[2] = {0};
        struct policy_region reg = {.chunks = c, .n_chunks = 2};
        struct policy_input in = input1(&reg, 1000, 1, 1);
        struct policy_plan p;

        in.protect_ticks = 50;
        c[0] = (struct policy_chunk){.tier = V, .last_use = 100, .last_move = 100,
                                     .flags = POLICY_CHUNK_COLD}; /* found cold in VRAM */
        c[1] = (struct policy_chunk){.tier = H, .last_use = 999};  /* touched once */
        policy_chunk_touch(&c[1], 999, 1, pp.heat_half_life_ticks);
        TAP_EQ_INT(policy_plan(&pp, &in, &p), 0, "demand: plans (first touch)");
        TAP_EQ_U64(p.n_moves, 0, "demand: a first touch of a chunk never in VRAM displaces nothing (a fill)");
        policy_plan_clear(&p);
        policy_chunk_touch(&c[1], 999, 1, pp.heat_half_life_ticks); /* used again: reused */
        TAP_EQ_INT(policy_plan(&pp, &in, &p), 0, "demand: plans");
        TAP_OK(moved(&p, 0, 0, M), "demand: the cold resident chunk is evicted (mapped, the default)");
        TAP_EQ_U64(p.held_chunks, 1, "demand: the demand waits for the eviction (held this tick)");
        policy_plan_clear(&p);

        c[0].flags = 0; /* never probed: nothing seen of it proves nothing */
        TAP_EQ_INT(policy_plan(&pp, &in, &p), 0, "demand: plans (not known cold)");
        TAP_EQ_U64(p.n_moves, 0, "demand: a resident chunk not found cold is not displaced by a fault");
        TAP_EQ_U64(p.held_chunks, 1, "demand: the faulted chunk is held back, read in place");
        TAP_EQ_U64(p.stale_chunks, 1, "demand: in a region no kernel used lately, it is stale: a capture may displace it");
        TAP_EQ_U64(p.cold_chunks, 0, "demand: but not cold: no demand may displace it");
        policy_plan_clear(&p);

        c[0].flags = POLICY_CHUNK_COLD;
        c[1].last_use = 500; /* the fault is older than the protection */
        c[1].heat = 0;
        TAP_EQ_INT(policy_plan(&pp, &in, &p), 0, "demand: plans (both stale)");
        TAP_EQ_U64(p.n_moves, 0, "demand: a stale host chunk does not displace a cold resident one");
        TAP_EQ_U64(p.held_chunks, 0, "demand: and nothing is held");
        TAP_EQ_U64(p.stale_chunks, 1, "demand: the cold resident chunk is stale");
        TAP_EQ_U64(p.cold_chunks, 1, "demand: and cold (found unused)");
        policy_plan_clear(&p);

        in.budget_chunks = 2; /* room: the fault is served at once */
        c[1] = (struct policy_chunk){.tier = H, .last_use = 999, .last_move = 900}; /* back after an eviction */
        TAP_EQ_INT(policy_plan(&pp, &in, &p), 0, "demand: plans (room)");
        TAP_OK(moved(&p, 0, 1, V) && p.n_moves == 1, "demand: with room a fault is promoted, nothing evicted");
        TAP_EQ_U64(p.held_chunks, 0, "demand: nothing held with room");
        policy_plan_clear(&p);
}

/* demand: each client's chunks are fresh for its own protection (its own
 * thrash guard): a client whose evictions keep coming back stretches only
 * its own. */
static void test_demand_protect_per_client(void) {
        struct policy_params pp = params(POLICY_DEMAND);
        struct policy_chunk a[1], b[1];
        /* region i is client 1 - i's: a lookup by the region's index would differ */
        struct policy_region regs[2] = {{.chunks = a, .n_chunks = 1, .client = 1},
                                        {.chunks = b, .n_chunks = 1, .client = 0}};
        struct policy_client cl[2] = {{.quota_chunks = UINT64_MAX, .protect_ticks = 20},
                                      {.quota_chunks = UINT64_MAX, .protect_ticks = 80}};
        struct policy_input in = input1(regs, 1000, 0, 0);
        struct policy_plan p;

        in.n_regions = 2;
        in.clients = cl;
        in.n_clients = 2;
        in.protect_ticks = 20;
        /* both back in host memory after an eviction, used 50 ticks ago */
        a[0] = (struct policy_chunk){.tier = H, .last_use = 950, .last_move = 900};
        b[0] = a[0];
        TAP_EQ_INT(policy_plan(&pp, &in, &p), 0, "protect per client: plans");
        TAP_EQ_U64(p.held_chunks, 1, "protect per client: only the chunk of the client protected 80 ticks is a demand");
        policy_plan_clear(&p);
        in.budget_chunks = 1; /* room for one: the demand */
        TAP_EQ_INT(policy_plan(&pp, &in, &p), 0, "protect per client: plans with room for one");
        TAP_OK(p.n_moves == 1 && moved(&p, 0, 0, V), "protect per client: the demand is that client's chunk");
        policy_plan_clear(&p);
        in.budget_chunks = 0;
        cl[1].protect_ticks = 0;
        TAP_EQ_INT(policy_plan(&pp, &in, &p), 0, "protect per client: plans (no protection of its own)");
        TAP_EQ_U64(p.held_chunks, 0, "protect per client: without one, a client's chunks take the input's");
        policy_plan_clear(&p);
}

/* demand: a use is a use however many fault records it came as, and two
 * uses ticks apart make a chunk never in VRAM a demand, the first's heat
 * decayed or not (the default half-life is 1000 ticks: two touches 200
 * ticks apart, as a re-arm lap over a large pool takes, are heat class 1). */
static void test_demand_uses(void) {
        struct policy_params pp = params(POLICY_DEMAND);
        struct policy_chunk c[2] = {{.tier = V, .flags = POLICY_CHUNK_COLD}, {.tier = H}};
        struct policy_region reg = {.chunks = c, .n_chunks = 2};
        struct policy_input in = input1(&reg, 1000, 1, 1);
        struct policy_plan p;

        in.protect_ticks = 50;
        policy_chunk_use(&c[1], 800, pp.heat_half_life_ticks);
        policy_chunk_use(&c[1], 800, pp.heat_half_life_ticks);
        policy_chunk_use(&c[1], 801, pp.heat_half_life_ticks);
        TAP_OK(c[1].heat == POLICY_HEAT_ONE && c[1].last_use == 801, "uses: touches within a tick of the last are one use");
        policy_chunk_use(&c[1], 990, pp.heat_half_life_ticks);
        c[1].heat = POLICY_HEAT_ONE; /* as if the first use were the only one */
        TAP_EQ_INT(policy_plan(&pp, &in, &p), 0, "uses: plans (one use)");
        TAP_EQ_U64(p.n_moves, 0, "uses: one use of a chunk never in VRAM is no demand");
        policy_plan_clear(&p);
        c[1] = (struct policy_chunk){.tier = H};
        policy_chunk_use(&c[1], 790, pp.heat_half_life_ticks);
        policy_chunk_use(&c[1], 990, pp.heat_half_life_ticks);
        TAP_OK(policy_heat_class(policy_heat_at(&c[1], 990, pp.heat_half_life_ticks)) < 2,
               "uses: two uses 200 ticks apart are below heat class 2");
        TAP_EQ_INT(policy_plan(&pp, &in, &p), 0, "uses: plans (two uses)");
        TAP_OK(moved(&p, 0, 0, M) && p.held_chunks == 1,
               "uses: used twice, it is a demand: the cold chunk makes room for it");
        policy_plan_clear(&p);
}

/* demand: over budget (a capture started in VRAM), the chunks of a region no
 * kernel used lately go before those of one in use, whatever their age. */
static void test_demand_active(void) {
        struct policy_params pp = params(POLICY_DEMAND);
        struct policy_chunk a[2] = {0}, b[2] = {0};
        struct policy_region reg[2] = {{.chunks = a, .n_chunks = 2, .last_active = 1000},
                                       {.chunks = b, .n_chunks = 2, .last_active = 900}};
        struct policy_input in = {.regions = reg, .n_regions = 2, .now = 1000, .budget_chunks = 2,
                                  .charged_chunks = 4, .max_move_chunks = UINT64_MAX, .protect_ticks = 20};
        struct policy_plan p;

        for (int i = 0; i < 2; i++) {
                a[i] = (struct policy_chunk){.tier = V, .last_use = 10, .last_move = 10}; /* old, in use */
                b[i] = (struct policy_chunk){.tier = V, .last_use = 800, .last_move = 800}; /* newer, idle */
        }
        TAP_EQ_INT(policy_plan(&pp, &in, &p), 0, "demand active: plans");
        TAP_OK(moved(&p, 1, 0, M) && moved(&p, 1, 1, M) && p.evict_chunks == 2,
               "demand active: the idle region's chunks are evicted, not the older ones in use");
        policy_plan_clear(&p);
        reg[1].last_active = 999;
        TAP_EQ_INT(policy_plan(&pp, &in, &p), 0, "demand active: plans (both active)");
        TAP_OK(moved(&p, 0, 0, M) && moved(&p, 0, 1, M) && p.evict_chunks == 2,
               "demand active: both in use: the least recently used go");
        policy_plan_clear(&p);
}

/* demand: fresh chunks rank by their region's launch density (launches a
 * tick per chunk) before residence: a demand from a region 8x as dense
 * displaces chunks in use of a sparse one (a decode's scratch copies, used
 * by every layer, over a static cache each layer reads once); nearer
 * densities never trade places (the pools of a paged cache). */
static void test_demand_density(void) {
        struct policy_params pp = params(POLICY_DEMAND);
        struct policy_chunk a[2], b[4];
        struct policy_region reg[2] = {{.chunks = a, .n_chunks = 2, .last_active = 999},
                                       {.chunks = b, .n_chunks = 4, .last_active = 999}};
        struct policy_input in = {.regions = reg, .n_regions = 2, .now = 1000, .budget_chunks = 2,
                                  .charged_chunks = 2, .max_move_chunks = UINT64_MAX, .protect_ticks = 50};
        struct policy_plan p;

        for (int i = 0; i < 2; i++) /* in VRAM, in use, never found cold */
                a[i] = (struct policy_chunk){.tier = V, .last_use = 990, .last_move = 100};
        for (int i = 0; i < 4; i++) /* back in host memory after an eviction, faulted on */
                b[i] = (struct policy_chunk){.tier = H, .last_use = 995, .last_move = 900};
        TAP_EQ_INT(policy_plan(&pp, &in, &p), 0, "density: plans (no launches known)");
        TAP_OK(p.n_moves == 0 && p.held_chunks == 4, "density: unknown, demands wait for chunks found cold");
        policy_plan_clear(&p);

        reg[0].launch_rate = POLICY_LAUNCH_ONE / 16;
        reg[1].launch_rate = 8 * POLICY_LAUNCH_ONE / 16; /* twice the chunks, 8 times the launches */
        TAP_EQ_INT(policy_plan(&pp, &in, &p), 0, "density: plans (4 times as dense)");
        TAP_OK(p.n_moves == 0 && p.held_chunks == 4, "density: 4 times as dense displaces nothing in use");
        policy_plan_clear(&p);

        reg[1].launch_rate = 32 * POLICY_LAUNCH_ONE / 16; /* 16 times the launches a chunk */
        TAP_EQ_INT(policy_plan(&pp, &in, &p), 0, "density: plans (16 times as dense)");
        TAP_OK(p.evict_chunks == 2 && moved(&p, 0, 0, M) && moved(&p, 0, 1, M),
               "density: 16 times as dense, the sparse region's chunks in use make room");
        TAP_EQ_U64(p.held_chunks, 4, "density: the dense demands wait for those evictions");
        policy_plan_clear(&p);

        /* the same 16 times as dense, but the two regions are two clients'
         * of one priority: neither's counts may take the other's VRAM */
        struct policy_client cl[2] = {{.quota_chunks = UINT64_MAX}, {.quota_chunks = UINT64_MAX}};
        in.clients = cl;
        in.n_clients = 2;
        reg[1].client = 1;
        TAP_EQ_INT(policy_plan(&pp, &in, &p), 0, "density: plans (two clients)");
        TAP_OK(p.n_moves == 0 && p.held_chunks == 4, "density: another client's denser demands displace nothing in use");
        policy_plan_clear(&p);
        reg[1].client = 0;
        in.clients = NULL;
        in.n_clients = 0;

        for (int i = 0; i < 4; i++) /* the dense region's chunks, one touch each: no demand yet */
                b[i] = (struct policy_chunk){.tier = H, .last_use = 995, .heat = POLICY_HEAT_ONE};
        TAP_EQ_INT(policy_plan(&pp, &in, &p), 0, "density: plans (first touches)");
        TAP_EQ_U64(p.n_moves, 0, "density: a first touch is no demand, however dense its region");
        policy_plan_clear(&p);

        /* Over budget after a capture that started in VRAM, no launch on it
         * yet (not known): the chunks in use of a region half as dense as
         * the densest stay, the capture's go. */
        for (int i = 0; i < 4; i++)
                b[i] = (struct policy_chunk){.tier = V, .last_use = 999, .last_move = 990, .heat = POLICY_HEAT_ONE};
        reg[0].launch_rate = 4 * POLICY_LAUNCH_ONE; /* the densest: 2 a chunk */
        reg[0].last_active = 100;                   /* no kernel on it lately */
        reg[1].launch_rate = 0;
        reg[1].last_active = 999;                   /* registered: active */
        struct policy_chunk s[2];
        struct policy_region three[3] = {reg[0], reg[1], {.chunks = s, .n_chunks = 2, .last_active = 999,
                                                          .launch_rate = 2 * POLICY_LAUNCH_ONE}}; /* half as dense */
        for (int i = 0; i < 2; i++)
                s[i] = (struct policy_chunk){.tier = V, .last_use = 999, .last_move = 100};
        in.regions = three;
        in.n_regions = 3;
        in.budget_chunks = 4;
        in.charged_chunks = 8;
        TAP_EQ_INT(policy_plan(&pp, &in, &p), 0, "density: plans (a new capture over budget)");
        TAP_OK(p.evict_chunks == 4 && moved(&p, 1, 0, M) && moved(&p, 1, 3, M) && !moved(&p, 2, 0, M),
               "density: a capture with no launches yet goes before chunks in use of a known region");
        TAP_EQ_U64(p.stale_chunks, 0,
                   "density: and no chunk of a denser region is stale (counted as room a capture may take)");
        policy_plan_clear(&p);

        /* A region whose launches are not known, its chunks in VRAM in use,
         * against the demands of one known and dense: they stay. */
        struct policy_chunk u[2], d[2];
        struct policy_region two[2] = {{.chunks = u, .n_chunks = 2, .last_active = 999},
                                       {.chunks = d, .n_chunks = 2, .last_active = 999,
                                        .launch_rate = 64 * POLICY_LAUNCH_ONE}};
        for (int i = 0; i < 2; i++) {
                u[i] = (struct policy_chunk){.tier = V, .last_use = 995, .last_move = 100};
                d[i] = (struct policy_chunk){.tier = H, .last_use = 995, .last_move = 900};
        }
        in.regions = two;
        in.n_regions = 2;
        in.budget_chunks = 2;
        in.charged_chunks = 2;
        TAP_EQ_INT(policy_plan(&pp, &in, &p), 0, "density: plans (not known against dense)");
        TAP_OK(p.n_moves == 0 && p.held_chunks == 2,
               "density: no demand displaces chunks in use of a region whose launches are not known");
        policy_plan_clear(&p);
}

/* The launch average: the mean of the ticks since the first launch, given
 * to the policy only from POLICY_LAUNCH_FIRST_TICKS on; back to 0, and not
 * known, once launches stop. */
static void test_launch_avg(void) {
        struct policy_launch_avg a = {0};
        unsigned k;

        policy_launch_avg_tick(&a, 0);
        TAP_OK(a.ticks == 0 && a.rate == 0, "launch average: no launch, nothing to average");
        for (k = 0; k < 300; k++) {
                policy_launch_avg_tick(&a, 2);
                if (k + 2 == POLICY_LAUNCH_FIRST_TICKS)
                        TAP_EQ_U64(policy_launch_avg_rate(&a), 0, "launch average: not known before the first ticks");
                if (k + 1 == POLICY_LAUNCH_FIRST_TICKS) /* less a unit a tick, of rounding */
                        TAP_OK(policy_launch_avg_rate(&a) > 2 * POLICY_LAUNCH_ONE - POLICY_LAUNCH_FIRST_TICKS &&
                                       policy_launch_avg_rate(&a) <= 2 * POLICY_LAUNCH_ONE,
                               "launch average: then the mean, 2 a tick (%u)", policy_launch_avg_rate(&a));
        }
        TAP_OK(a.rate > 2 * POLICY_LAUNCH_ONE - POLICY_LAUNCH_RATE_TICKS && a.rate <= 2 * POLICY_LAUNCH_ONE,
               "launch average: steady at 2 a tick (%u)", a.rate);
        for (k = 0; k < 5000 && a.rate; k++)
                policy_launch_avg_tick(&a, 0);
        TAP_OK(a.rate == 0 && a.ticks == 0 && k > 500, "launch average: back to 0 after %u ticks without", k);
        policy_launch_avg_tick(&a, UINT64_MAX);
        TAP_EQ_U64(a.rate, POLICY_LAUNCH_MAX * (uint64_t)POLICY_LAUNCH_ONE, "launch average: launches counted to a cap");
}

/* policy_sample, re-arms: mapped host chunks not used within stale_ticks,
 * round robin, at most the budget, coalesced into runs. */
static void test_sample(void) {
        struct policy_chunk c[8] = {0};
        struct policy_region reg[2] = {{.chunks = c, .n_chunks = 5}, {.chunks = c + 5, .n_chunks = 3}};
        struct policy_input in = {.regions = reg, .n_regions = 2, .now = 100};
        struct policy_sample_params sp = {.stale_ticks = 10, .probe_ticks = 1000, .rearm_max = 3};
        struct policy_sample sm;
        struct policy_sample_cursor cursor = {0};

        for (int i = 0; i < 8; i++)
                c[i] = (struct policy_chunk){.tier = H, .flags = POLICY_CHUNK_MAPPED, .last_use = 50};
        c[1].flags = 0;                  /* unmapped: a touch faults anyway */
        c[2].last_use = 95;              /* used lately: no need */
        c[3].pending = KVT_TIER_VRAM;    /* an order is under way */
        c[6].tier = V;                   /* in VRAM (not stale enough to probe) */
        TAP_EQ_INT(policy_sample(&in, &sp, &cursor, &sm), 0, "sample: runs");
        TAP_EQ_U64(sm.n_rearmed, 3, "sample: takes the budget");
        TAP_OK(sm.plan.n_moves == 3 && sm.plan.moves[0].region == 0 && sm.plan.moves[0].first_chunk == 0 &&
                       sm.plan.moves[0].n_chunks == 1 && sm.plan.moves[1].region == 0 &&
                       sm.plan.moves[1].first_chunk == 4 && sm.plan.moves[2].region == 1 &&
                       sm.plan.moves[2].first_chunk == 0,
               "sample: region 0 chunks 0 and 4, region 1 chunk 0");
        TAP_EQ_U64(sm.n_probes, 0, "sample: no probe wanted");
        policy_plan_clear(&sm.plan);
        cursor = (struct policy_sample_cursor){0};
        sp.rearm_max = 8;
        TAP_EQ_INT(policy_sample(&in, &sp, &cursor, &sm), 0, "sample: runs (all)");
        TAP_OK(sm.n_rearmed == 4 && sm.plan.n_moves == 4 && sm.plan.moves[3].region == 1 &&
                       sm.plan.moves[3].first_chunk == 2 && sm.plan.moves[3].tier == H,
               "sample: one lap: and region 1 chunk 2, to the host tier");
        policy_plan_clear(&sm.plan);
        cursor.rearm = 5; /* region 1 chunk 0 */
        sp.rearm_max = 2;
        TAP_EQ_INT(policy_sample(&in, &sp, &cursor, &sm), 0, "sample: runs (cursor)");
        TAP_OK(sm.plan.n_moves == 2 && sm.plan.moves[0].region == 1 && sm.plan.moves[0].first_chunk == 0 &&
                       sm.plan.moves[1].region == 1 && sm.plan.moves[1].first_chunk == 2,
               "sample: from the cursor: region 1 chunks 0 and 2");
        TAP_EQ_U64(cursor.rearm, 0, "sample: the cursor wraps past the end");
        policy_plan_clear(&sm.plan);
        c[1].flags = POLICY_CHUNK_MAPPED;
        c[2].last_use = 50;
        c[3].pending = 0;
        sp.rearm_max = 5;
        TAP_EQ_INT(policy_sample(&in, &sp, &cursor, &sm), 0, "sample: runs (run)");
        TAP_OK(sm.plan.n_moves == 1 && sm.plan.moves[0].region == 0 && sm.plan.moves[0].first_chunk == 0 &&
                       sm.plan.moves[0].n_chunks == 5,
               "sample: a run of candidates coalesced into one move");
        policy_plan_clear(&sm.plan);
        for (int i = 0; i < 8; i++)
                c[i].flags = 0;
        TAP_EQ_INT(policy_sample(&in, &sp, &cursor, &sm), 0, "sample: runs (none)");
        TAP_OK(sm.n_rearmed == 0 && sm.plan.n_moves == 0, "sample: none left");
        policy_plan_clear(&sm.plan);
}

/* policy_sample, probes: one chunk of each cohort in VRAM nothing was seen
 * of for probe_ticks, the cohort being the chunks after it that came into
 * VRAM with it. */
static void test_probe(void) {
        struct policy_chunk c[24] = {0};
        struct policy_region reg = {.chunks = c, .n_chunks = 24};
        struct policy_input in = {.regions = &reg, .n_regions = 1, .now = 1000};
        struct policy_sample_params sp = {.stale_ticks = 10, .probe_ticks = 100, .probe_max = 8};
        struct policy_sample sm;
        struct policy_sample_cursor cursor = {0};

        for (int i = 0; i < 24; i++)
                c[i] = (struct policy_chunk){.tier = V, .last_use = 10, .last_move = i < 4 ? 500 : i < 8 ? 600 : 700};
        c[4].last_use = 950;                   /* used lately: not a probe; its cohort starts after it */
        c[9].flags = POLICY_CHUNK_PINNED;      /* never evicted: it ends a cohort */
        TAP_EQ_INT(policy_sample(&in, &sp, &cursor, &sm), 0, "probe: runs");
        TAP_EQ_U64(sm.n_probes, 5, "probe: five cohorts");
        TAP_OK(sm.probes[0].chunk == 0 && sm.probes[0].first == 0 && sm.probes[0].n == 4,
               "probe: chunks 0..3 came in together: one probe, chunk 0");
        TAP_OK(sm.probes[1].chunk == 5 && sm.probes[1].n == 3, "probe: chunks 5..7 (4 was used lately)");
        TAP_OK(sm.probes[2].chunk == 8 && sm.probes[2].n == 1, "probe: chunk 8 (9 is pinned)");
        TAP_OK(sm.probes[3].chunk == 10 && sm.probes[3].n == POLICY_COHORT_CHUNKS && sm.probes[3].first == 10,
               "probe: chunks 10..17, a cohort at most POLICY_COHORT_CHUNKS");
        TAP_OK(sm.probes[4].chunk == 18 && sm.probes[4].n == 6, "probe: chunks 18..23");
        TAP_EQ_U64(sm.plan.n_moves, 0, "probe: probes are not re-arms");
        policy_plan_clear(&sm.plan);
        sp.probe_max = 2;
        cursor = (struct policy_sample_cursor){0};
        TAP_EQ_INT(policy_sample(&in, &sp, &cursor, &sm), 0, "probe: runs (budget)");
        TAP_OK(sm.n_probes == 2 && cursor.probe == 8, "probe: two, and the cursor after the second cohort");
        policy_plan_clear(&sm.plan);
        for (int i = 0; i < 24; i++)
                c[i].last_move = 500;
        c[4].last_use = 10;
        c[9].flags = 0;
        sp.probe_max = 8;
        cursor = (struct policy_sample_cursor){0};
        TAP_EQ_INT(policy_sample(&in, &sp, &cursor, &sm), 0, "probe: runs (cap)");
        TAP_OK(sm.n_probes == 3 && sm.probes[0].n == POLICY_COHORT_CHUNKS && sm.probes[1].chunk == POLICY_COHORT_CHUNKS &&
                       sm.probes[2].chunk == 2 * POLICY_COHORT_CHUNKS,
               "probe: a cohort is at most POLICY_COHORT_CHUNKS");
        policy_plan_clear(&sm.plan);

        for (int i = 0; i < 24; i++)
                c[i].last_move = i < 4 ? 500 : i < 8 ? 600 : 700;
        in.now = 650;
        cursor = (struct policy_sample_cursor){0};
        TAP_EQ_INT(policy_sample(&in, &sp, &cursor, &sm), 0, "probe: runs (fresh)");
        TAP_OK(sm.n_probes == 1 && sm.probes[0].chunk == 0, "probe: cohorts that came in within probe_ticks wait");
        policy_plan_clear(&sm.plan);
        /* Chunks 0..3 probed (in VRAM, probes out), chunk 6 found cold:
         * the probes wait for their answers, the cold chunk is not probed
         * and ends a cohort. */
        for (int i = 0; i < 4; i++) {
                c[i].last_move = 990;
                c[i].flags = POLICY_CHUNK_PROBE;
        }
        c[6].flags = POLICY_CHUNK_COLD;
        for (int i = 4; i < 24; i++)
                c[i].last_move = 500;
        in.now = 1000;
        sp.probe_window = 20;
        cursor = (struct policy_sample_cursor){0};
        TAP_EQ_INT(policy_sample(&in, &sp, &cursor, &sm), 0, "probe: runs (out)");
        TAP_OK(sm.n_probes >= 2 && sm.probes[0].chunk == 4 && sm.probes[0].n == 2 && sm.probes[1].chunk == 7,
               "probe: chunks 0..3 wait for their probes, chunk 6 (cold) is skipped");
        TAP_EQ_U64(sm.n_expired, 0, "probe: the probes out have not expired");
        policy_plan_clear(&sm.plan);
        in.now = 1011; /* the probes unused for more than probe_window */
        c[2].flags = 0; /* chunk 2 was used meanwhile: no probe */
        cursor = (struct policy_sample_cursor){0};
        sp.probe_max = 0;
        sp.rearm_max = 1;
        TAP_EQ_INT(policy_sample(&in, &sp, &cursor, &sm), 0, "probe: runs (expired)");
        TAP_OK(sm.n_expired == 3 && sm.expired[0].chunk == 0 && sm.expired[1].chunk == 1 && sm.expired[2].chunk == 3 &&
                       sm.expired[0].n == 1,
               "probe: each probe unused past its window expired on its own");
        policy_plan_clear(&sm.plan);
}

/* policy_sample, the probes' own lap: where the tick's shares are not
 * filled (a client's room for samples in flight fills first, as for the
 * one engine of a decode), a lap goes round whole.  The re-arm lap's
 * cursor stays put then; the probes' goes on past the last cohort probed,
 * so that the next tick probes the next cohorts, not the same first ones
 * after a cursor that stays put. */
static void test_probe_sweep(void) {
        struct policy_chunk c[28] = {0};
        struct policy_region reg = {.chunks = c, .n_chunks = 28};
        struct policy_client cl = {.quota_chunks = UINT64_MAX};
        struct policy_input in = {.regions = &reg, .n_regions = 1, .now = 1000, .clients = &cl, .n_clients = 1};
        struct policy_sample_params sp = {.stale_ticks = 10, .probe_ticks = 100, .rearm_max = 64, .probe_max = 8,
                                          .client_rearm_max = 64, .client_probe_max = 1};
        struct policy_sample_cursor cursor = {0};
        struct policy_sample sm;
        uint32_t probed[4];

        for (int i = 0; i < 24; i++) /* three cohorts of 8 in VRAM, nothing seen of them */
                c[i] = (struct policy_chunk){.tier = V, .last_use = 10, .last_move = 500 + 100 * (i / 8)};
        for (int i = 24; i < 28; i++) /* four chunks read in place: re-arms */
                c[i] = (struct policy_chunk){.tier = H, .flags = POLICY_CHUNK_MAPPED, .last_use = 50};
        for (int t = 0; t < 4; t++) { /* the probes are not marked: each tick sees the same input */
                TAP_EQ_INT(policy_sample(&in, &sp, &cursor, &sm), 0, "probe sweep: tick %d runs", t);
                TAP_OK(sm.n_probes == 1 && sm.n_rearmed == 4, "probe sweep: tick %d: one probe, the four re-arms", t);
                probed[t] = sm.n_probes ? sm.probes[0].first : UINT32_MAX;
                TAP_EQ_U64(cursor.rearm, 0, "probe sweep: tick %d: the re-arm lap went round whole, its cursor put", t);
                policy_plan_clear(&sm.plan);
        }
        TAP_OK(probed[0] == 0 && probed[1] == 8 && probed[2] == 16 && probed[3] == 0,
               "probe sweep: the probes go round the cohorts, 0, 8, 16, 0 (%u, %u, %u, %u)", probed[0], probed[1],
               probed[2], probed[3]);
}

/* policy_sample with clients: each client's samples in flight count
 * against its own limit only, so a client whose shim has a tick's share
 * out (slow, or not answering) is passed over and the others are not. */
static void test_sample_clients(void) {
        struct policy_chunk c[8] = {0}, v[16] = {0};
        struct policy_region reg[3] = {{.chunks = c, .n_chunks = 4, .client = 0},
                                       {.chunks = c + 4, .n_chunks = 4, .client = 1},
                                       {.chunks = v, .n_chunks = 16, .client = 1}};
        struct policy_client cl[2] = {{.quota_chunks = UINT64_MAX, .sampling_chunks = 4, .probing_cohorts = 2},
                                      {.quota_chunks = UINT64_MAX}};
        struct policy_input in = {.regions = reg, .n_regions = 3, .now = 1000, .clients = cl, .n_clients = 2};
        struct policy_sample_params sp = {.stale_ticks = 10, .probe_ticks = 100, .rearm_max = 8, .probe_max = 4,
                                          .client_rearm_max = 4, .client_probe_max = 2};
        struct policy_sample sm;
        struct policy_sample_cursor cursor = {0};

        for (int i = 0; i < 8; i++)
                c[i] = (struct policy_chunk){.tier = H, .flags = POLICY_CHUNK_MAPPED, .last_use = 50};
        for (int i = 0; i < 16; i++)
                v[i] = (struct policy_chunk){.tier = V, .last_use = 10, .last_move = i < 8 ? 500 : 600};
        TAP_EQ_INT(policy_sample(&in, &sp, &cursor, &sm), 0, "sample clients: runs");
        TAP_OK(sm.n_rearmed == 4 && sm.plan.n_moves == 1 && sm.plan.moves[0].region == 1 &&
                       sm.plan.moves[0].n_chunks == 4,
               "sample clients: client 0 has its share of re-arms out: only client 1's chunks are re-armed");
        TAP_EQ_U64(sm.n_probes, 2, "sample clients: client 1's cohorts probed");
        policy_plan_clear(&sm.plan);
        cl[0].sampling_chunks = 2;
        cl[1].sampling_chunks = 3;
        cursor = (struct policy_sample_cursor){0};
        TAP_EQ_INT(policy_sample(&in, &sp, &cursor, &sm), 0, "sample clients: runs (room)");
        TAP_OK(sm.n_rearmed == 3 && sm.plan.n_moves == 2 && sm.plan.moves[0].region == 0 &&
                       sm.plan.moves[0].n_chunks == 2 && sm.plan.moves[1].region == 1 && sm.plan.moves[1].n_chunks == 1,
               "sample clients: each client up to its own room (2 and 1)");
        policy_plan_clear(&sm.plan);
        cl[1].probing_cohorts = 2;
        cursor = (struct policy_sample_cursor){0};
        TAP_EQ_INT(policy_sample(&in, &sp, &cursor, &sm), 0, "sample clients: runs (probes out)");
        TAP_EQ_U64(sm.n_probes, 0, "sample clients: a client with its probes out gets no more");
        policy_plan_clear(&sm.plan);
        sp.client_rearm_max = sp.client_probe_max = 0;
        cursor = (struct policy_sample_cursor){0};
        TAP_EQ_INT(policy_sample(&in, &sp, &cursor, &sm), 0, "sample clients: runs (no limits)");
        TAP_OK(sm.n_rearmed == 8 && sm.n_probes == 2,
               "sample clients: without per-client limits, what is in flight does not count");
        policy_plan_clear(&sm.plan);
}

/* A lap looks at POLICY_LAP_CHUNKS chunks of its priority at most a call,
 * and goes on from there at the next: a sample's time is bounded
 * whatever the memory's size.  Regions of another priority passed over do
 * not count. */
static void test_sample_bound(void) {
        const uint32_t n = POLICY_LAP_CHUNKS + POLICY_LAP_CHUNKS / 2;
        struct policy_chunk *c = calloc(n + 8, sizeof(*c));
        struct policy_region reg[2] = {{.chunks = c, .n_chunks = 8, .client = 0},
                                       {.chunks = c + 8, .n_chunks = n, .client = 1}};
        struct policy_client cl[2] = {{.quota_chunks = UINT64_MAX, .priority = 7},
                                      {.quota_chunks = UINT64_MAX, .priority = 0}};
        struct policy_input in = {.regions = reg, .n_regions = 2, .clients = cl, .n_clients = 2, .now = 1000};
        struct policy_sample_params sp = {.stale_ticks = 10, .probe_ticks = 1000, .rearm_max = 4};
        struct policy_sample sm;
        struct policy_sample_cursor cursor = {0};

        if (!c) {
                TAP_OK(0, "sample bound: memory");
                return;
        }
        for (uint32_t i = 0; i < n + 8; i++) /* armed host chunks: nothing to re-arm */
                c[i] = (struct policy_chunk){.tier = H, .last_use = 50, .last_move = 40};
        c[8 + n - 1].flags = POLICY_CHUNK_MAPPED; /* the one candidate, at the end */
        TAP_EQ_INT(policy_sample(&in, &sp, &cursor, &sm), 0, "sample bound: runs");
        TAP_EQ_U64(sm.n_rearmed, 0, "sample bound: the candidate lies past what one call looks at");
        TAP_OK(cursor.rearm >= 8 + POLICY_LAP_CHUNKS && cursor.rearm < 8 + n - 1, "sample bound: the lap stopped short of it");
        policy_plan_clear(&sm.plan);
        TAP_EQ_INT(policy_sample(&in, &sp, &cursor, &sm), 0, "sample bound: runs again");
        TAP_OK(sm.n_rearmed == 1 && sm.plan.n_moves == 1 && sm.plan.moves[0].region == 1 &&
                       sm.plan.moves[0].first_chunk == n - 1,
               "sample bound: the next call goes on from there and finds it");
        policy_plan_clear(&sm.plan);
        free(c);
}

/* policy_sample with priorities: the plan serves a higher priority's
 * demands first, and the samples that find demands go to it first: a
 * lower priority's candidates, however many and wherever the cursor is,
 * get what the higher's leave.  The cursor goes on from where the last
 * lap stopped. */
static void test_sample_priority(void) {
        struct policy_chunk lo[16] = {0}, hi[16] = {0};
        struct policy_region reg[2] = {{.chunks = lo, .n_chunks = 16, .client = 0},
                                       {.chunks = hi, .n_chunks = 16, .client = 1}};
        struct policy_client cl[2] = {{.quota_chunks = UINT64_MAX, .priority = 0},
                                      {.quota_chunks = UINT64_MAX, .priority = 7}};
        struct policy_input in = {.regions = reg, .n_regions = 2, .now = 1000, .clients = cl, .n_clients = 2};
        struct policy_sample_params sp = {.stale_ticks = 10, .probe_ticks = 100, .rearm_max = 4};
        struct policy_sample sm;
        struct policy_sample_cursor cursor = {0};

        for (int i = 0; i < 16; i++) {
                lo[i] = (struct policy_chunk){.tier = H, .flags = POLICY_CHUNK_MAPPED, .last_use = 50};
                hi[i] = i % 4 ? (struct policy_chunk){.tier = V, .last_use = 10, .last_move = 500} : lo[i];
        }
        TAP_EQ_INT(policy_sample(&in, &sp, &cursor, &sm), 0, "sample priority: runs");
        TAP_OK(sm.n_rearmed == 4 && sm.plan.n_moves == 4 && sm.plan.moves[0].region == 1 &&
                       sm.plan.moves[3].region == 1 && sm.plan.moves[3].first_chunk == 12,
               "sample priority: the higher priority's four candidates are re-armed, none of the 16 before them");
        TAP_EQ_U64(cursor.rearm, 29, "sample priority: the cursor is where the tick's share filled (after chunk 12 of 16 + 16)");
        policy_plan_clear(&sm.plan);
        sp.rearm_max = 6;
        TAP_EQ_INT(policy_sample(&in, &sp, &cursor, &sm), 0, "sample priority: runs (room left)");
        TAP_OK(sm.n_rearmed == 6 && sm.plan.n_moves == 5 && sm.plan.moves[4].region == 0 &&
                       sm.plan.moves[4].first_chunk == 0 && sm.plan.moves[4].n_chunks == 2,
               "sample priority: what the higher leaves goes to the lower, from the cursor");
        TAP_EQ_U64(cursor.rearm, 2, "sample priority: the cursor goes on from where the lower's lap stopped");
        policy_plan_clear(&sm.plan);
        cl[0].priority = 7;
        cursor = (struct policy_sample_cursor){0};
        sp.rearm_max = 4;
        TAP_EQ_INT(policy_sample(&in, &sp, &cursor, &sm), 0, "sample priority: runs (equal)");
        TAP_OK(sm.n_rearmed == 4 && sm.plan.n_moves == 1 && sm.plan.moves[0].region == 0,
               "sample priority: equal priorities: one lap from the cursor, as without clients");
        policy_plan_clear(&sm.plan);
}

/* demand: the plan tells the highest priority of the demands it held
 * back, and probes go only to VRAM of that priority or lower: a chunk of a
 * higher priority outranks those demands however cold it is, so probing it
 * makes room for nobody and costs its client a fault if it is in use. */
static void test_probe_priority(void) {
        struct policy_chunk lo[2] = {0}, hi[3] = {0};
        struct policy_region reg[2] = {{.chunks = lo, .n_chunks = 2, .client = 0},
                                       {.chunks = hi, .n_chunks = 2, .client = 1}};
        struct policy_client cl[2] = {{.quota_chunks = UINT64_MAX, .priority = 0},
                                      {.quota_chunks = UINT64_MAX, .priority = 7}};
        struct policy_params pp = params(POLICY_DEMAND);
        struct policy_input in = {.regions = reg, .n_regions = 2, .clients = cl, .n_clients = 2, .now = 1000,
                                  .budget_chunks = 3, .charged_chunks = 3, .max_move_chunks = UINT64_MAX,
                                  .protect_ticks = 50};
        struct policy_sample_params sp = {.stale_ticks = 10, .probe_ticks = 100, .probe_max = 4};
        struct policy_sample sm;
        struct policy_plan p;
        struct policy_sample_cursor cursor = {0};

        /* hi and lo hold the budget with chunks nothing was seen of lately;
         * lo uses a chunk in host memory again and again */
        hi[0] = hi[1] = lo[1] = (struct policy_chunk){.tier = V, .last_use = 10, .last_move = 500};
        lo[0] = (struct policy_chunk){.tier = KVT_TIER_HOST, .last_use = 999};
        policy_chunk_touch(&lo[0], 998, 1, pp.heat_half_life_ticks);
        policy_chunk_touch(&lo[0], 999, 1, pp.heat_half_life_ticks);
        TAP_EQ_INT(policy_plan(&pp, &in, &p), 0, "probe priority: plans");
        TAP_OK(p.n_moves == 0 && p.held_chunks == 1 && p.held_priority == 0,
               "probe priority: lo's demand is held back, at priority 0 (%zu moves, %llu held, priority %u)",
               p.n_moves, (unsigned long long)p.held_chunks, p.held_priority);
        sp.probe_priority_max = p.held_priority;
        policy_plan_clear(&p);
        TAP_EQ_INT(policy_sample(&in, &sp, &cursor, &sm), 0, "probe priority: samples");
        TAP_OK(sm.n_probes == 1 && sm.probes[0].region == 0 && sm.probes[0].first == 1,
               "probe priority: lo's own stale chunk is probed for it, none of hi's (%zu probes)", sm.n_probes);
        policy_plan_clear(&sm.plan);

        /* hi wants a chunk too: its demand is held back as well, and hi's
         * own VRAM is where room for it can come from */
        reg[1].n_chunks = 3;
        hi[2] = lo[0];
        lo[1] = (struct policy_chunk){.tier = KVT_TIER_HOST, .last_use = 10};
        in.charged_chunks = 2;
        in.budget_chunks = 2;
        TAP_EQ_INT(policy_plan(&pp, &in, &p), 0, "probe priority: plans (hi's demand)");
        TAP_OK(p.held_chunks == 2 && p.held_priority == 7,
               "probe priority: both demands held back, the highest at priority 7 (%llu held, priority %u)",
               (unsigned long long)p.held_chunks, p.held_priority);
        sp.probe_priority_max = p.held_priority;
        policy_plan_clear(&p);
        cursor = (struct policy_sample_cursor){0};
        TAP_EQ_INT(policy_sample(&in, &sp, &cursor, &sm), 0, "probe priority: samples (hi's demand)");
        TAP_OK(sm.n_probes == 1 && sm.probes[0].region == 1 && sm.probes[0].first == 0 && sm.probes[0].n == 2,
               "probe priority: hi's two resident chunks are probed, as one cohort");
        policy_plan_clear(&sm.plan);

        /* room for one: hi's demand is served, lo's still waits, and the
         * priority held back is lo's again */
        in.budget_chunks = 3;
        TAP_EQ_INT(policy_plan(&pp, &in, &p), 0, "probe priority: plans (room for one)");
        TAP_OK(p.promote_chunks == 1 && moved(&p, 1, 2, V) && p.held_chunks == 1 && p.held_priority == 0,
               "probe priority: hi's demand promoted, lo's held back at priority 0 (%llu held, priority %u)",
               (unsigned long long)p.held_chunks, p.held_priority);
        policy_plan_clear(&p);
}

/* The prober: every tick at first; probes that mostly come back (the
 * cohorts in use) stretch the interval, probes that mostly find cold
 * cohorts shrink it, within 1 .. POLICY_PROBE_INTERVAL_MAX. */
static void test_prober(void) {
        struct policy_prober pr;
        unsigned probing = 0;

        policy_prober_init(&pr);
        TAP_OK(policy_prober_tick(&pr, 1, 0, 0) && policy_prober_tick(&pr, 2, 0, 0), "prober: probes every tick at first");
        policy_prober_tick(&pr, 3, 15, 0);
        TAP_EQ_U64(pr.interval, 1, "prober: not judged before 16 probes resolved");
        policy_prober_tick(&pr, 4, 1, 0);
        TAP_EQ_U64(pr.interval, 2, "prober: 16 of 16 back: every second tick");
        for (uint32_t t = 5; t < 13; t++)
                probing += policy_prober_tick(&pr, t, 0, 0);
        TAP_EQ_U64(probing, 4, "prober: four ticks of eight probe");
        for (int k = 0; k < 20; k++)
                policy_prober_tick(&pr, 20, 16, 0);
        TAP_EQ_U64(pr.interval, POLICY_PROBE_INTERVAL_MAX, "prober: the interval stops at its maximum");
        policy_prober_tick(&pr, 21, 8, 8);
        TAP_EQ_U64(pr.interval, POLICY_PROBE_INTERVAL_MAX, "prober: half back: unchanged");
        policy_prober_tick(&pr, 22, 2, 14);
        TAP_EQ_U64(pr.interval, POLICY_PROBE_INTERVAL_MAX / 2, "prober: most cold: halved");
        for (int k = 0; k < 20; k++)
                policy_prober_tick(&pr, 23, 0, 16);
        TAP_OK(pr.interval == 1 && policy_prober_tick(&pr, 25, 0, 0), "prober: back to every tick, not below");
}

/* Feeds the guard one window of n ticks, the evictions and refaults in its
 * last tick; returns the protection after it. */
static uint32_t guard_window(struct policy_guard *g, uint32_t n, uint64_t evicted, uint64_t refaulted) {
        uint32_t p = 0;

        for (uint32_t i = 0; i < n; i++)
                p = policy_guard_tick(g, n, 1000, i + 1 == n ? evicted : 0, i + 1 == n ? refaulted : 0);
        return p;
}

/* The guard: judged once a window; a noticeable share of refaults doubles
 * the protection, evictions that stayed out shrink it, no evictions leave
 * it, within bounds. */
static void test_guard(void) {
        struct policy_guard g;
        uint32_t p;

        policy_guard_init(&g, 20);
        TAP_EQ_INT(g.protect_ticks, 20, "guard: starts at the minimum");
        for (int i = 0; i < 19; i++)
                TAP_OK(policy_guard_tick(&g, 20, 1000, 64, 64) == 20, "guard: not judged before the window is over");
        TAP_EQ_INT(policy_guard_tick(&g, 20, 1000, 0, 0), 40, "guard: judged at its end, over all of it");
        policy_guard_init(&g, 20);
        TAP_EQ_INT(guard_window(&g, 20, 64, 32), 40, "guard: half the evictions refaulted: doubles");
        TAP_EQ_INT(guard_window(&g, 20, 64, 16), 80, "guard: a quarter: doubles");
        TAP_EQ_INT(guard_window(&g, 20, 80, 4), 80, "guard: a few: stays");
        TAP_EQ_INT(guard_window(&g, 20, 0, 0), 80, "guard: no evictions: nothing learnt, stays");
        TAP_EQ_INT(guard_window(&g, 20, 0, 1), 80, "guard: one refault alone is not a pattern");
        TAP_EQ_INT(guard_window(&g, 20, 0, 2), 160, "guard: two without evictions are");
        TAP_EQ_INT(guard_window(&g, 20, 64, 0), 120, "guard: evictions that stayed out: a quarter less");
        for (int i = 0; i < 20; i++)
                p = guard_window(&g, 20, 64, 64);
        TAP_EQ_INT(p, 1000, "guard: never above the maximum");
        for (int i = 0; i < 100; i++)
                p = guard_window(&g, 20, 64, 0);
        TAP_EQ_INT(p, 20, "guard: never below the minimum");
}

int main(void) {
        test_names();
        test_heat_decay();
        test_heat_vs_lru();
        test_hinted_hot();
        test_hysteresis();
        test_frozen();
        test_window();
        test_prefetch();
        test_clients();
        test_bad_params();
        test_invariants();
        test_demand_fault();
        test_demand_protect_per_client();
        test_demand_active();
        test_demand_density();
        test_launch_avg();
        test_sample();
        test_probe();
        test_probe_sweep();
        test_sample_clients();
        test_sample_priority();
        test_probe_priority();
        test_sample_bound();
        test_prober();
        test_demand_uses();
        test_guard();
        return tap_done();
}
