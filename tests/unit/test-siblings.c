/* SPDX-License-Identifier: MIT */
/* demand's sibling regions (policy/siblings.h): what the chunks at one
 * offset of same-sized regions of one client say of each other, in plans
 * and in the sampler. */
#include "config.h"

#include <stdlib.h>

#include "plan-moves.h"
#include "policy.h"
#include "protocol.h"
#include "siblings.h"
#include "tap.h"

#define V KVT_TIER_VRAM
#define H KVT_TIER_HOST
#define M KVT_TIER_HOST_MAPPED

#define REGIONS 6
#define CHUNKS  8

/* Region 0 in VRAM (the budget, full), regions 1-5 in host memory, mapped
 * by the GPU and unseen since a touch long ago: nothing known anywhere. */
struct rig {
        struct policy_chunk c[REGIONS][CHUNKS];
        struct policy_region reg[REGIONS];
        struct policy_input in;
        struct policy_params pp;
};

static void rig_init(struct rig *x) {
        *x = (struct rig){0};
        for (int r = 0; r < REGIONS; r++) {
                x->reg[r] = (struct policy_region){.chunks = x->c[r], .n_chunks = CHUNKS};
                for (int i = 0; i < CHUNKS; i++)
                        x->c[r][i] = r == 0 ? (struct policy_chunk){.tier = V, .last_move = 100}
                                            : (struct policy_chunk){.tier = H, .flags = POLICY_CHUNK_MAPPED,
                                                                    .last_use = 100, .heat = POLICY_HEAT_ONE};
        }
        x->in = (struct policy_input){.regions = x->reg,
                                      .n_regions = REGIONS,
                                      .now = 1000,
                                      .budget_chunks = CHUNKS,
                                      .charged_chunks = CHUNKS,
                                      .max_move_chunks = UINT64_MAX,
                                      .protect_ticks = 50,
                                      .probe_window = 10};
        policy_params_default(POLICY_DEMAND, &x->pp);
}

/* A chunk the GPU faulted on just now, back after an eviction: a demand. */
static void demand(struct rig *x, int r, int i) {
        x->c[r][i] = (struct policy_chunk){.tier = H, .flags = POLICY_CHUNK_MAPPED, .last_use = 999, .last_move = 900};
}

/* A chunk evicted at tick `at`, its sample page unmapped, unused since. */
static void armed(struct rig *x, int r, int i, uint32_t at) {
        x->c[r][i] = (struct policy_chunk){.tier = H, .last_use = 100, .last_move = at};
}

/* A chunk in VRAM nothing was seen of is displaced by a demand where its
 * siblings at its offset are armed and unused (and none in use), not
 * before their arm had time to show a use. */
static void test_stale(void) {
        struct rig x;
        struct policy_plan p;

        rig_init(&x);
        demand(&x, 5, 0);
        TAP_EQ_INT(policy_plan(&x.pp, &x.in, &p), 0, "stale: plans (nothing known)");
        TAP_EQ_U64(p.evict_chunks, 0, "stale: a chunk in VRAM nothing was seen of is not displaced");
        TAP_EQ_U64(p.held_chunks, 1, "stale: the demand is held back");
        TAP_OK(p.sibling_groups == 1 && p.sibling_regions == REGIONS && p.sibling_groups_mute == 0,
               "stale: the plan reports one group of all the regions, telling");
        TAP_OK(p.sibling_stale_chunks == 0 && p.sibling_demand_chunks == 0, "stale: and nothing told yet");
        policy_plan_clear(&p);

        armed(&x, 1, 3, 500);
        armed(&x, 2, 3, 500);
        TAP_EQ_INT(policy_plan(&x.pp, &x.in, &p), 0, "stale: plans (two siblings armed, unused)");
        TAP_OK(p.evict_chunks == 1 && moved(&p, 0, 3, M), "stale: its chunk in VRAM is evicted, only it");
        TAP_EQ_U64(p.sibling_stale_chunks, 1, "stale: the plan counts it stale on its siblings' word");
        TAP_EQ_U64(p.cold_chunks, 1, "stale: and cold: a demand may displace it");
        TAP_EQ_U64(p.sibling_demand_chunks, 0, "stale: and no demand on theirs");
        policy_plan_clear(&p);

        armed(&x, 2, 3, 995); /* armed within the probe window: no answer due yet */
        TAP_EQ_INT(policy_plan(&x.pp, &x.in, &p), 0, "stale: plans (one arm too recent)");
        TAP_EQ_U64(p.evict_chunks, 0, "stale: an arm that had no time to show a use is no evidence");
        policy_plan_clear(&p);

        armed(&x, 2, 3, 500);
        armed(&x, 3, 3, 500);
        demand(&x, 4, 3); /* one sibling in use there */
        TAP_EQ_INT(policy_plan(&x.pp, &x.in, &p), 0, "stale: plans (a sibling in use)");
        TAP_OK(!moved(&p, 0, 3, M), "stale: a sibling in use at the offset keeps its chunk in VRAM");
        policy_plan_clear(&p);

        armed(&x, 4, 3, 500);
        x.c[0][3].last_use = 990; /* its own probe came back */
        TAP_EQ_INT(policy_plan(&x.pp, &x.in, &p), 0, "stale: plans (its own use)");
        TAP_EQ_U64(p.evict_chunks, 0, "stale: a use of its own within the protection outweighs its siblings");
        TAP_EQ_U64(p.sibling_stale_chunks, 0, "stale: and the plan counts none stale on their word");
        policy_plan_clear(&p);
}

/* A chunk read in place (mapped, unseen) is a demand where two siblings at
 * its offset are. */
static void test_demand(void) {
        struct rig x;
        struct policy_plan p;

        rig_init(&x);
        /* room for the demands and no more: free room is otherwise filled
         * with whatever ranks next */
        x.in.budget_chunks = CHUNKS + 1;
        demand(&x, 4, 6);
        TAP_EQ_INT(policy_plan(&x.pp, &x.in, &p), 0, "demand: plans (one sibling)");
        TAP_OK(moved(&p, 4, 6, V) && p.promote_chunks == 1, "demand: one demand alone is promoted");
        policy_plan_clear(&p);

        demand(&x, 5, 6);
        x.in.budget_chunks = CHUNKS + 5;
        TAP_EQ_INT(policy_plan(&x.pp, &x.in, &p), 0, "demand: plans (two siblings)");
        TAP_OK(moved(&p, 1, 6, V) && moved(&p, 2, 6, V) && moved(&p, 3, 6, V) && p.promote_chunks == 5,
               "demand: with two, the mapped chunks at their offset come too");
        TAP_OK(!moved(&p, 1, 5, V), "demand: and nothing at another offset");
        TAP_EQ_U64(p.sibling_demand_chunks, 3, "demand: the plan counts the three on their siblings' word");
        policy_plan_clear(&p);

        armed(&x, 3, 6, 500); /* its own arm: its own fault would show its use */
        x.in.budget_chunks = CHUNKS + 4;
        TAP_EQ_INT(policy_plan(&x.pp, &x.in, &p), 0, "demand: plans (one armed)");
        TAP_OK(!moved(&p, 3, 6, V) && moved(&p, 1, 6, V), "demand: an armed chunk, unused, is not inferred");
        policy_plan_clear(&p);
}

/* Who is a sibling: same client, same size, four regions at least; and a
 * group in use at more than half its offsets tells nothing. */
static void test_groups(void) {
        struct rig x;
        struct policy_plan p;

        rig_init(&x);
        x.in.budget_chunks = CHUNKS + 1; /* room for the demands alone (test_demand) */
        demand(&x, 4, 6);
        demand(&x, 5, 6);
        x.in.n_regions = 5; /* regions 0-4: region 5 left out... */
        x.reg[1].client = x.reg[2].client = 1; /* ...and 1, 2 another client's: 0, 3, 4 are three */
        TAP_EQ_INT(policy_plan(&x.pp, &x.in, &p), 0, "groups: plans (three of a client)");
        TAP_OK(!moved(&p, 3, 6, V), "groups: fewer than four regions are no siblings");
        policy_plan_clear(&p);

        x.in.n_regions = REGIONS;
        x.reg[1].client = x.reg[2].client = 0;
        x.reg[2].n_chunks = CHUNKS - 1; /* another size */
        x.in.budget_chunks = CHUNKS + 4;
        TAP_EQ_INT(policy_plan(&x.pp, &x.in, &p), 0, "groups: plans (one of another size)");
        TAP_OK(moved(&p, 1, 6, V) && moved(&p, 3, 6, V) && !moved(&p, 2, 6, V),
               "groups: a region of another size is no sibling");
        TAP_OK(p.sibling_groups == 1 && p.sibling_regions == REGIONS - 1, "groups: the plan's group leaves it out");
        policy_plan_clear(&p);

        x.reg[2].n_chunks = CHUNKS;
        for (int i = 0; i < 5; i++) { /* in use at 5 of the 8 offsets */
                demand(&x, 4, i);
                demand(&x, 5, i);
        }
        x.in.budget_chunks = CHUNKS + 12;
        TAP_EQ_INT(policy_plan(&x.pp, &x.in, &p), 0, "groups: plans (in use at most offsets)");
        TAP_OK(!moved(&p, 1, 6, V) && !moved(&p, 1, 0, V) && moved(&p, 4, 0, V),
               "groups: a group in use at most of its offsets infers nothing, its demands stand");
        TAP_OK(p.sibling_groups == 1 && p.sibling_groups_mute == 1 && p.sibling_demand_chunks == 0,
               "groups: the plan reports the group as telling nothing");
        policy_plan_clear(&p);
}

/* The sampler spends nothing where siblings tell: no re-arm where two are
 * in use or armed, no probe either. */
static void test_sample(void) {
        struct rig x;
        struct policy_sample_params sp = {.stale_ticks = 20, .probe_ticks = 5, .probe_window = 10,
                                          .rearm_max = 100, .probe_max = 8};
        struct policy_sample sm;
        struct policy_sample_cursor cursor = {0};
        bool r1c2 = false, r1c5 = false, r1c3 = false, probed_told = false;

        rig_init(&x);
        demand(&x, 4, 2);
        demand(&x, 5, 2);
        armed(&x, 4, 5, 500);
        armed(&x, 5, 5, 500);
        TAP_EQ_INT(policy_sample(&x.in, &sp, &cursor, &sm), 0, "sample: runs");
        for (size_t k = 0; k < sm.plan.n_moves; k++) {
                const struct policy_move *m = &sm.plan.moves[k];

                if (m->region != 1)
                        continue;
                r1c2 |= 2 >= m->first_chunk && 2 < m->first_chunk + m->n_chunks;
                r1c5 |= 5 >= m->first_chunk && 5 < m->first_chunk + m->n_chunks;
                r1c3 |= 3 >= m->first_chunk && 3 < m->first_chunk + m->n_chunks;
        }
        TAP_OK(r1c3, "sample: a chunk whose offset nothing tells of is re-armed");
        TAP_OK(!r1c2, "sample: none where two siblings are in use");
        TAP_OK(!r1c5, "sample: none where two are armed");
        TAP_OK(sm.n_probes > 0, "sample: chunks in VRAM are probed");
        for (size_t k = 0; k < sm.n_probes; k++) {
                const struct policy_probe *pr = &sm.probes[k];

                probed_told |= pr->region == 0 && ((pr->first <= 2 && 2 < pr->first + pr->n) ||
                                                   (pr->first <= 5 && 5 < pr->first + pr->n));
        }
        TAP_OK(!probed_told, "sample: no probe covers a chunk whose siblings tell");

        /* On the counts of a plan of the same input, as the daemon samples:
         * the same samples, counted once. */
        {
                struct policy_plan p;
                struct policy_sample again;
                struct policy_sample_cursor cursor2 = {0};
                bool same;

                TAP_EQ_INT(policy_plan(&x.pp, &x.in, &p), 0, "sample: a plan of the same input");
                TAP_OK(p.siblings != NULL, "sample: the plan keeps its sibling counts");
                sp.siblings = p.siblings;
                TAP_EQ_INT(policy_sample(&x.in, &sp, &cursor2, &again), 0, "sample: runs on the plan's counts");
                same = again.plan.n_moves == sm.plan.n_moves && again.n_probes == sm.n_probes &&
                       cursor2.rearm == cursor.rearm && cursor2.probe == cursor.probe;
                for (size_t k = 0; same && k < sm.plan.n_moves; k++)
                        same = again.plan.moves[k].region == sm.plan.moves[k].region &&
                               again.plan.moves[k].first_chunk == sm.plan.moves[k].first_chunk &&
                               again.plan.moves[k].n_chunks == sm.plan.moves[k].n_chunks;
                for (size_t k = 0; same && k < sm.n_probes; k++)
                        same = again.probes[k].region == sm.probes[k].region &&
                               again.probes[k].first == sm.probes[k].first && again.probes[k].n == sm.probes[k].n;
                TAP_OK(same, "sample: the same re-arms and probes as on its own counts");
                policy_plan_clear(&again.plan);
                policy_plan_clear(&p); /* its counts too (the sanitizer runs see a leak) */
        }
        policy_plan_clear(&sm.plan);
}

/* A chunk a mapped eviction left unverified (policy_chunk_unverified()) is
 * re-armed once its eviction is stale_ticks old, whatever its siblings
 * say: they may have been evicted in use alike, and it may be read in
 * place unseen.  Verified, its siblings speak for it again. */
static void test_verify(void) {
        struct rig x;
        struct policy_sample_params sp = {.stale_ticks = 20, .probe_ticks = 5, .probe_window = 10,
                                          .rearm_max = 100};
        struct policy_sample sm;
        struct policy_sample_cursor cursor = {0};
        bool r1c2 = false, r1c5 = false, r2c2 = false, r3c5 = false;

        rig_init(&x);
        demand(&x, 4, 2);
        demand(&x, 5, 2);
        armed(&x, 4, 5, 500);
        armed(&x, 5, 5, 500);
        armed(&x, 1, 2, 500); /* unverified, where two siblings are in use */
        x.c[1][2].flags = POLICY_CHUNK_OWN_MAP;
        armed(&x, 1, 5, 500); /* unverified, where two are armed */
        x.c[1][5].flags = POLICY_CHUNK_OWN_MAP;
        armed(&x, 2, 2, 500); /* verified already, used since (mapped): an ordinary candidate */
        x.c[2][2].flags = POLICY_CHUNK_OWN_MAP | POLICY_CHUNK_REARMED | POLICY_CHUNK_MAPPED;
        armed(&x, 3, 5, 990); /* unverified, evicted within stale_ticks */
        x.c[3][5].flags = POLICY_CHUNK_OWN_MAP;
        TAP_EQ_INT(policy_sample(&x.in, &sp, &cursor, &sm), 0, "verify: runs");
        for (size_t k = 0; k < sm.plan.n_moves; k++) {
                const struct policy_move *m = &sm.plan.moves[k];
                bool c2 = 2 >= m->first_chunk && 2 < m->first_chunk + m->n_chunks,
                     c5 = 5 >= m->first_chunk && 5 < m->first_chunk + m->n_chunks;

                r1c2 |= m->region == 1 && c2;
                r1c5 |= m->region == 1 && c5;
                r2c2 |= m->region == 2 && c2;
                r3c5 |= m->region == 3 && c5;
        }
        TAP_OK(r1c2, "verify: re-armed where its siblings are in use");
        TAP_OK(r1c5, "verify: and where they are armed");
        TAP_OK(!r2c2, "verify: once: a verified chunk's siblings tell for it");
        TAP_OK(!r3c5, "verify: not before its eviction is stale_ticks old");
        policy_plan_clear(&sm.plan);
}

/* Lent "threads" that run the parts one after another on the caller's. */
static void run_serial(void *pool, void (*fn)(void *arg, unsigned part), void *arg, unsigned n_parts) {
        (void)pool;
        for (unsigned p = 0; p < n_parts; p++)
                fn(arg, p);
}

/* A group whose offsets span several blocks of the counting (threads, 4
 * members: 4096 offsets a block, policy/siblings.c) is counted at every
 * offset once, at the blocks' edges too. */
static void test_blocks(void) {
        static const struct policy_workers serial = {.n = 3, .run = run_serial};
        enum { LEN = 9000, MEMBERS = 4 };
        static const uint32_t at[] = {0, 4095, 4096, 8191, 8192, 8999};
        struct policy_chunk *c = calloc((size_t)MEMBERS * LEN, sizeof(*c));
        struct policy_region reg[MEMBERS];
        struct policy_input in = {
                .regions = reg, .n_regions = MEMBERS, .now = 1000, .probe_window = 10, .workers = &serial};
        struct plan_siblings s;
        uint32_t wrong = 0;

        if (!c)
                abort();
        for (int r = 0; r < MEMBERS; r++) {
                reg[r] = (struct policy_region){.chunks = c + (size_t)r * LEN, .n_chunks = LEN};
                for (uint32_t i = 0; i < LEN; i++)
                        c[(size_t)r * LEN + i] = (struct policy_chunk){.tier = V, .last_move = 100};
        }
        for (size_t k = 0; k < sizeof(at) / sizeof(at[0]); k++) {
                c[at[k]].last_use = c[LEN + at[k]].last_use = 999; /* in use in VRAM */
                c[2 * LEN + at[k]] = (struct policy_chunk){.tier = H, .last_use = 100, .last_move = 500}; /* armed */
        }
        TAP_EQ_INT(siblings_build(&s, &in, 50, 3), 0, "blocks: counted");
        TAP_EQ_U64(s.n_blocks, 3, "blocks: in three blocks");
        TAP_OK(s.n_groups == 1 && s.n_mute == 0 && s.of_region[0] && s.of_region[3] == s.of_region[0],
               "blocks: one group, telling");
        for (uint32_t i = 0; i < LEN && s.of_region[0]; i++) {
                bool marked = false;

                for (size_t k = 0; k < sizeof(at) / sizeof(at[0]); k++)
                        marked |= at[k] == i;
                wrong += s.of_region[0][i].used != (marked ? 2 : 0) || s.of_region[0][i].armed != (marked ? 1 : 0);
        }
        TAP_EQ_INT(wrong, 0, "blocks: every offset counted once, the blocks' edges too");
        siblings_free(&s);
        free(c);
}

int main(void) {
        test_stale();
        test_demand();
        test_groups();
        test_sample();
        test_verify();
        test_blocks();
        return tap_done();
}
