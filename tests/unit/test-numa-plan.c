/* SPDX-License-Identifier: MIT */
/*
 * Host budgets per NUMA node in the policy: evictions fill the nodes in
 * their order of preference, the warmest evicted chunks nearest; evictions
 * no node has room for are not planned; without host budgets the plan is
 * the one it always was.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>

#include "policy.h"
#include "protocol.h"
#include "tap.h"

#define N_CHUNKS 8
#define V        KVT_TIER_VRAM
#define M        KVT_TIER_HOST_MAPPED

/* Chunks 0..3 in VRAM, used long ago (chunk 0 coldest); chunks 4..7 in host
 * memory, used now: the policy wants 4..7 in VRAM and 0..3 out. */
static void snapshot(struct policy_chunk c[N_CHUNKS]) {
        for (uint32_t i = 0; i < N_CHUNKS; i++)
                c[i] = (struct policy_chunk){.last_use = i < 4 ? i + 1 : 10, .tier = i < 4 ? V : M};
}

static struct policy_input input(const struct policy_region *reg, uint64_t budget, uint64_t charged) {
        return (struct policy_input){.regions = reg,
                                     .n_regions = 1,
                                     .now = 10,
                                     .budget_chunks = budget,
                                     .charged_chunks = charged,
                                     .max_move_chunks = UINT64_MAX,
                                     .home_node = 0};
}

/* The node chunk i is evicted to, -2 if the plan does not evict it. */
static int evicted_to(const struct policy_plan *p, uint32_t i) {
        for (size_t k = 0; k < p->n_moves; k++) {
                const struct policy_move *m = &p->moves[k];

                if (m->tier != V && i >= m->first_chunk && i < m->first_chunk + m->n_chunks)
                        return m->host_node;
        }
        return -2;
}

static uint64_t promoted(const struct policy_plan *p) {
        uint64_t n = 0;

        for (size_t k = 0; k < p->n_moves; k++)
                if (p->moves[k].tier == V) {
                        n += p->moves[k].n_chunks;
                        TAP_EQ_INT(p->moves[k].host_node, -1, "a promotion names no host node");
                }
        return n;
}

static struct policy_params lru(void) {
        struct policy_params pp;

        policy_params_default(POLICY_LRU, &pp);
        return pp;
}

/* Without host budgets every eviction goes to the home node, as the input says. */
static void test_no_budgets(void) {
        struct policy_chunk c[N_CHUNKS];
        struct policy_region reg = {.chunks = c, .n_chunks = N_CHUNKS};
        struct policy_input in = input(&reg, 4, 4);
        struct policy_params pp = lru();
        struct policy_plan p;

        snapshot(c);
        in.home_node = 3;
        TAP_EQ_INT(policy_plan(&pp, &in, &p), 0, "no budgets: plans");
        TAP_EQ_U64(p.evict_chunks, 4, "no budgets: all four evicted");
        for (uint32_t i = 0; i < 4; i++)
                TAP_EQ_INT(evicted_to(&p, i), 3, "no budgets: chunk %u to the home node", i);
        policy_plan_clear(&p);
        in.home_node = -1;
        TAP_EQ_INT(policy_plan(&pp, &in, &p), 0, "unknown home: plans");
        TAP_EQ_INT(evicted_to(&p, 0), -1, "unknown home: the shim's choice");
        policy_plan_clear(&p);
}

/* The home node takes what fits in its budget; the rest is not planned. */
static void test_budget_held(void) {
        struct policy_chunk c[N_CHUNKS];
        struct policy_region reg = {.chunks = c, .n_chunks = N_CHUNKS};
        struct policy_input in = input(&reg, 4, 4);
        struct policy_node nodes[] = {{.id = 0, .room_chunks = 2}};
        struct policy_params pp = lru();
        struct policy_plan p;

        snapshot(c);
        in.nodes = nodes;
        in.n_nodes = 1;
        TAP_EQ_INT(policy_plan(&pp, &in, &p), 0, "budget: plans");
        TAP_EQ_U64(p.evict_chunks, 2, "budget: two evictions, the node's room");
        TAP_EQ_INT(evicted_to(&p, 0), 0, "budget: coldest chunk 0 to node 0");
        TAP_EQ_INT(evicted_to(&p, 1), 0, "budget: chunk 1 to node 0");
        TAP_EQ_INT(evicted_to(&p, 2), -2, "budget: chunk 2 stays");
        TAP_EQ_INT(evicted_to(&p, 3), -2, "budget: chunk 3 stays");
        TAP_EQ_U64(promoted(&p), 0, "budget: VRAM full, nothing promoted");
        policy_plan_clear(&p);
}

/* Home full: the warmest evicted chunks to the next node in order, the
 * coldest furthest. */
static void test_spill(void) {
        struct policy_chunk c[N_CHUNKS];
        struct policy_region reg = {.chunks = c, .n_chunks = N_CHUNKS};
        struct policy_input in = input(&reg, 4, 4);
        struct policy_node nodes[] = {
                {.id = 0, .room_chunks = 1}, {.id = 2, .room_chunks = 2}, {.id = 1, .room_chunks = UINT64_MAX}};
        struct policy_node full_home[] = {{.id = 0, .room_chunks = 0}, {.id = 1, .room_chunks = 3}};
        struct policy_params pp = lru();
        struct policy_plan p;

        snapshot(c);
        in.nodes = nodes;
        in.n_nodes = 3;
        TAP_EQ_INT(policy_plan(&pp, &in, &p), 0, "spill: plans");
        TAP_EQ_U64(p.evict_chunks, 4, "spill: all four evicted");
        TAP_EQ_INT(evicted_to(&p, 3), 0, "spill: the warmest to the home node");
        TAP_EQ_INT(evicted_to(&p, 2), 2, "spill: the next to the nearest other node");
        TAP_EQ_INT(evicted_to(&p, 1), 2, "spill: ... while it has room");
        TAP_EQ_INT(evicted_to(&p, 0), 1, "spill: the coldest furthest");
        TAP_EQ_U64(p.n_moves, 3, "spill: one run per node");
        policy_plan_clear(&p);

        in.nodes = full_home;
        in.n_nodes = 2;
        TAP_EQ_INT(policy_plan(&pp, &in, &p), 0, "full home: plans");
        TAP_EQ_U64(p.evict_chunks, 3, "full home: three evictions, the other node's room");
        TAP_EQ_INT(evicted_to(&p, 0), 1, "full home: chunk 0 to node 1");
        TAP_EQ_INT(evicted_to(&p, 2), 1, "full home: chunk 2 to node 1");
        TAP_EQ_INT(evicted_to(&p, 3), -2, "full home: the warmest stays");
        policy_plan_clear(&p);
}

/* No node has room: no eviction, and the promotions that needed its room
 * wait; promotions into free VRAM still go. */
static void test_all_full(void) {
        struct policy_chunk c[N_CHUNKS];
        struct policy_region reg = {.chunks = c, .n_chunks = N_CHUNKS};
        struct policy_input in = input(&reg, 4, 4);
        struct policy_node nodes[] = {{.id = 0, .room_chunks = 0}, {.id = 1, .room_chunks = 0}};
        struct policy_params pp = lru();
        struct policy_plan p;

        snapshot(c);
        in.nodes = nodes;
        in.n_nodes = 2;
        TAP_EQ_INT(policy_plan(&pp, &in, &p), 0, "all full: plans");
        TAP_EQ_U64(p.n_moves, 0, "all full: no move at all");
        policy_plan_clear(&p);
        /* The same with 2 chunks of VRAM free: those promote, nothing is evicted. */
        in = input(&reg, 6, 4);
        in.nodes = nodes;
        in.n_nodes = 2;
        TAP_EQ_INT(policy_plan(&pp, &in, &p), 0, "all full, VRAM room: plans");
        TAP_EQ_U64(p.evict_chunks, 0, "all full, VRAM room: no eviction");
        TAP_EQ_U64(promoted(&p), 2, "all full, VRAM room: the free VRAM is used");
        policy_plan_clear(&p);
        in.n_nodes = 0;
        TAP_EQ_INT(policy_plan(&pp, &in, &p), 0, "no node at all: plans");
        TAP_EQ_U64(p.evict_chunks, 0, "no node at all: no eviction");
        policy_plan_clear(&p);
        in.n_nodes = POLICY_MAX_NODES + 1;
        TAP_EQ_INT(policy_plan(&pp, &in, &p), -EINVAL, "more nodes than POLICY_MAX_NODES: -EINVAL");
}

static uint32_t rnd(uint32_t *s) {
        *s = *s * 1103515245u + 12345u;
        return *s >> 8;
}

/* Host budgets with room for everything change no move of any policy;
 * every eviction then names its node. */
static void test_unlimited_same_plan(void) {
        enum { N = 2048 };
        struct policy_chunk *c = calloc(N, sizeof(*c));
        struct policy_region regs[4];
        struct policy_node nodes[] = {{.id = 5, .room_chunks = N}, {.id = 1, .room_chunks = UINT64_MAX}};
        uint32_t seed = 7;
        int bad = 0;

        for (int round = 0; round < 40 && c; round++) {
                struct policy_params pp;
                struct policy_input in = {.regions = regs,
                                          .n_regions = 4,
                                          .now = 1000,
                                          .budget_chunks = rnd(&seed) % N,
                                          .max_move_chunks = round % 3 ? UINT64_MAX : rnd(&seed) % 300,
                                          .home_node = 5};
                struct policy_plan a, b;

                policy_params_default((enum policy_kind)(round % _POLICY_KIND_MAX), &pp);
                for (uint32_t i = 0; i < N; i++) {
                        c[i] = (struct policy_chunk){.last_use = rnd(&seed) % 1000, .heat = rnd(&seed) % 4096,
                                                     .tier = (uint8_t)(rnd(&seed) % 3 ? M : V)};
                        in.charged_chunks += c[i].tier == V;
                }
                if (in.charged_chunks > in.budget_chunks)
                        in.budget_chunks = in.charged_chunks;
                for (int r = 0; r < 4; r++)
                        regs[r] = (struct policy_region){.chunks = c + r * (N / 4), .n_chunks = N / 4};
                if (policy_plan(&pp, &in, &a) < 0)
                        bad++;
                in.nodes = nodes;
                in.n_nodes = round % 2 ? 2 : 1;
                if (policy_plan(&pp, &in, &b) < 0)
                        bad++;
                bad += a.n_moves != b.n_moves || a.evict_chunks != b.evict_chunks;
                for (size_t k = 0; k < a.n_moves && k < b.n_moves; k++) {
                        const struct policy_move *x = &a.moves[k], *y = &b.moves[k];

                        bad += x->region != y->region || x->first_chunk != y->first_chunk ||
                               x->n_chunks != y->n_chunks || x->tier != y->tier || x->host_node != y->host_node;
                        bad += x->tier != V && y->host_node != 5;
                }
                policy_plan_clear(&a);
                policy_plan_clear(&b);
        }
        TAP_OK(c && bad == 0, "room for everything: the same plans, evictions to the home node (%d differences)", bad);
        free(c);
}

int main(void) {
        test_no_budgets();
        test_budget_held();
        test_spill();
        test_all_full();
        test_unlimited_same_plan();
        return tap_done();
}
