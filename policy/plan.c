/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "policy.h"
#include "heat-decay.h"
#include "plan-ctx.h"
#include "predict.h"
#include "siblings.h"

/* Rank layout below the priority bits (29..31; pinned is all ones). */
#define RANK_PRIORITY_SHIFT 29
#define RANK_HOT            (1u << 27) /* hinted HOT: above all the engine did not say */
#define RANK_PREFETCH       (1u << 26) /* needed within a few ticks: above the window */
#define RANK_WINDOW         (1u << 25)
#define RANK_CLASS_SHIFT    21
#define ELEMENTS(a) (sizeof(a) / sizeof((a)[0]))
#define RECENCY_MAX         ((1u << 21) - 1) /* ticks: 29 h at 50 ms; older is all alike */
/* demand: [density score 3][class 3][heat class 4][recency 15] */
#define DEMAND_SCORE_SHIFT  22
#define DEMAND_CLASS_SHIFT  19
#define DEMAND_HEAT_SHIFT   15
#define DEMAND_RECENCY_MAX  ((1u << DEMAND_HEAT_SHIFT) - 1) /* ticks: 5.4 min at 10 ms */
#define DEMAND_DENSITY_MAX  4u /* density classes below the densest region's: 4 (it) .. 0 */
#define DEMAND_DENSITY_UNKNOWN 2u /* no launches seen lately: in the middle (density_of()) */

struct selection {
        uint64_t want_min;    /* keys >= this are wanted in VRAM */
        uint64_t evict_max;   /* eviction candidates with key <= this are evicted */
        uint64_t promote_min; /* promotion candidates with key >= this are promoted */
        uint64_t n_evict, n_promote;
        uint64_t n_roomless; /* promotions the rate allowed and the room did not */
        /* With host budgets: evicted chunks with keys >= node_min[k] (and below
         * node_min[k - 1]) go to node k of the input; n_node_min of them. */
        uint64_t node_min[POLICY_MAX_NODES];
        size_t n_node_min;
};

/* What the rank pass needs, copied out of the context into locals that the
 * stores to the side arrays cannot alias, so that they stay in registers. */
struct rank_env {
        uint32_t now, hysteresis_ticks, half_life_ticks;
        bool heat;   /* heat classes count (heat, hybrid) */
        bool demand; /* demand classes instead */
        uint32_t protect_ticks, active_ticks, probe_window; /* demand */
        const uint32_t *decay;
};

/* Flags that come from the chunk itself, and hysteresis (branch-free: tiers
 * are as good as random from one chunk to the next). */
static uint16_t chunk_state(const struct rank_env *e, const struct policy_chunk *c) {
        bool vram = c->tier == POLICY_TIER_VRAM, pinned = c->flags & POLICY_CHUNK_PINNED;
        bool frozen = !pinned && c->last_move && !(c->flags & POLICY_CHUNK_REARMED) &&
                      e->now - c->last_move < e->hysteresis_ticks;
        /* a spilled chunk is held as an order in flight is: nothing moves it */
        bool held = c->pending != 0 || (c->flags & POLICY_CHUNK_SPILLED);

        return (uint16_t)(vram * (PLAN_IN_VRAM | PLAN_CHARGED) | held * PLAN_PENDING |
                          (c->pending == POLICY_TIER_VRAM) * PLAN_CHARGED | pinned * PLAN_PINNED |
                          frozen * PLAN_FROZEN);
}

/* Fills the decay table for the ages it holds: what heat_decay() computes,
 * as a shift and a factor, so that the per-chunk loop neither divides nor
 * branches. */
static void plan_decay_init(struct plan_ctx *x) {
        uint32_t half = x->pp->heat_half_life_ticks;

        for (uint32_t age = 0; age < ELEMENTS(x->decay); age++) {
                uint64_t k = (uint64_t)age * 8 / half;

                x->decay[age] = k >= 32 * 8 ? 0 : (uint32_t)(k / 8) << 24 | heat_decay_eighths[k % 8];
        }
}

/* heat_decay() by table for the ages it holds. */
static uint32_t plan_heat(const struct rank_env *e, uint32_t heat, uint32_t age) {
        uint32_t d;

        if (age >= DECAY_AGES)
                return heat_decay(heat, age, e->half_life_ticks);
        d = e->decay[age];
        return (uint32_t)(((uint64_t)(heat >> (d >> 24)) * (d & 0xffffff)) >> 16);
}

/* demand's class of a chunk (0..7) and the age its recency counts from (for
 * a chunk in VRAM its promotion or start there counts as a use): fresh
 * above resident above in an active region. */
static unsigned demand_class(const struct rank_env *e, const struct policy_chunk *c, uint16_t f, bool active,
                             const struct sibling_count *sib, uint32_t *ret_age, enum sibling_word *ret_word) {
        bool charged = f & PLAN_CHARGED;
        /* a probe's tick (its last_move) is no arrival: it says nothing of use */
        uint32_t seen = charged && c->last_move > c->last_use && !(c->flags & POLICY_CHUNK_PROBE) ? c->last_move
                                                                                                    : c->last_use;
        uint32_t age = e->now > seen ? e->now - seen : 0;
        /* In VRAM: fresh until a probe found it unused.  Outside: used within
         * the protection, and, for a chunk that never was in VRAM, seen used
         * twice: a first touch (a fill, a prefill's write) may be its only
         * one, and promoting each would push out what is in use for data
         * written once.  One that was in VRAM and came back is reused.  Seen
         * twice is heat above one touch's at the last use (heat is kept as
         * of last_use, and a single touch is POLICY_HEAT_ONE then; its heat
         * class would not do: two touches apart decay below class 2).
         * Siblings (siblings.h) speak for a chunk whose own use is unseen. */
        bool fresh = charged ? !(c->flags & POLICY_CHUNK_COLD) &&
                                       !(e->probe_window && policy_probe_unanswered(c, e->now, e->probe_window))
                             : policy_demand_fresh_outside(c, age, e->protect_ticks);

        *ret_word = SIBLINGS_SILENT;
        if (fresh && charged && (f & PLAN_IN_VRAM) && age >= e->protect_ticks && siblings_stale(sib))
                fresh = false, *ret_word = SIBLINGS_STALE;
        else if (!fresh && !charged && siblings_demand(sib, c))
                fresh = true, *ret_word = SIBLINGS_DEMAND;
        *ret_age = age;
        return fresh * 4u + charged * 2u + active;
}

/* A fresh chunk's density score (demand): its region's density
 * (density_of()), two more in VRAM. */
static unsigned fresh_score(uint32_t density, bool charged) {
        return 1u + density + (charged ? 2u : 0u);
}

/* The rank before window and prefetch boosts: UINT32_MAX for pinned chunks
 * and only for them (bit 28 is never set otherwise).  active: the chunk's
 * region had a kernel launched on it within active_ticks (demand). */
static uint32_t chunk_rank(const struct rank_env *e, const struct policy_chunk *c, uint16_t f, uint32_t prio,
                           bool active, uint32_t density, const struct sibling_count *sib,
                           enum sibling_word *ret_word) {
        uint32_t age = e->now > c->last_use ? e->now - c->last_use : 0;
        uint32_t rank = prio << RANK_PRIORITY_SHIFT;
        unsigned cls = 0, score;

        if (f & PLAN_PINNED)
                return UINT32_MAX;
        if (c->flags & POLICY_CHUNK_HOT)
                rank |= RANK_HOT;
        if (e->demand) {
                uint32_t heat = heat_class(plan_heat(e, c->heat, e->now > c->last_use ? e->now - c->last_use : 0));

                cls = demand_class(e, c, f, active, sib, &age, ret_word);
                /* Fresh chunks by their region's launch density first: a
                 * chunk outside VRAM displaces a fresh one inside only from
                 * a region three density classes up (8 times as dense, of
                 * the classes the densest region's four below tell apart;
                 * 4 times never), so that near equals never trade places.
                 * Not fresh: score 0, below all fresh. */
                score = cls & 4u ? fresh_score(density, f & PLAN_CHARGED) : 0u;
                return rank | score << DEMAND_SCORE_SHIFT | (uint32_t)cls << DEMAND_CLASS_SHIFT | heat << DEMAND_HEAT_SHIFT |
                       (DEMAND_RECENCY_MAX - (age < DEMAND_RECENCY_MAX ? age : DEMAND_RECENCY_MAX));
        }
        if (e->heat) {
                cls = heat_class(plan_heat(e, c->heat, age));
                /* A resident counts one class hotter: displacing it takes a clearly
                 * hotter chunk.  Branch-free: residency is as good as random. */
                cls += !!(f & PLAN_CHARGED);
                cls = cls < 15 ? cls : 15;
        }
        return rank | (uint32_t)cls << RANK_CLASS_SHIFT | (RECENCY_MAX - (age < RECENCY_MAX ? age : RECENCY_MAX));
}

/* Sets a boost on chunks [first, last] of the flat array (pinned stay on top). */
static void plan_boost(struct plan_ctx *x, size_t base, const struct predict_range *rg, uint16_t flag,
                       uint32_t bit, uint32_t *rmax) {
        for (size_t at = base + (size_t)rg->first; at <= base + (size_t)rg->last; at++) {
                if (x->flags[at] & PLAN_PINNED)
                        continue;
                x->flags[at] |= flag;
                x->rank[at] |= bit;
                if (x->rank[at] > *rmax)
                        *rmax = x->rank[at];
        }
}

/* The window and the streams of one region, learnt in the rank pass. */
static void plan_predict(struct plan_ctx *x, size_t r, const struct predict_state *st, uint32_t *rmax) {
        const struct policy_params *pp = x->pp;
        struct predict_range rg[64];
        uint32_t depth = pp->prefetch_depth < 64 ? pp->prefetch_depth : 64, n;
        /* window: every region; hybrid: only regions in use within a half-life. */
        uint32_t active = pp->kind == POLICY_WINDOW ? UINT32_MAX : pp->heat_half_life_ticks;

        if ((pp->kind == POLICY_WINDOW || pp->kind == POLICY_HYBRID) &&
            predict_window(st, x->in->now, pp->window_chunks, active, &rg[0]))
                plan_boost(x, x->start[r], &rg[0], PLAN_WINDOW, RANK_WINDOW, rmax);
        n = predict_stream(st, x->in->now, depth, x->in->regions[r].n_chunks, rg);
        for (uint32_t k = 0; k < n; k++)
                plan_boost(x, x->start[r], &rg[k], PLAN_PREFETCH, RANK_PREFETCH, rmax);
}

/* Region reg's launch density class: the bit length of its launch rate
 * per chunk (launches a tick per 2 MiB, in 2^-20 of POLICY_LAUNCH_ONE: any
 * rate of a region of up to 2^20 chunks is class 1 at least); 0 = not
 * known. */
static unsigned density_class(const struct policy_region *reg) {
        uint64_t d = reg->n_chunks ? ((uint64_t)reg->launch_rate << 20) / reg->n_chunks : 0;
        unsigned b = 0;

        while (d) {
                b++;
                d >>= 1;
        }
        return b;
}

/* The density, 0 .. DEMAND_DENSITY_MAX, of a region of priority prio and
 * density_class() b, against the densest region's class of its priority:
 * DEMAND_DENSITY_MAX for a region as dense, one less a halving.  Not known
 * (b 0, no launches seen lately: a new capture, kernels the shim cannot
 * see): DEMAND_DENSITY_UNKNOWN, where no demand displaces a chunk of it in
 * use (a demand's score is at most a resident's at this density), nor a
 * resident of it one of a region four times as dense.  Where clients of
 * one priority share the GPU, all alike: one client's counts of its own
 * launches must not take another's VRAM. */
static uint32_t density_of(const struct plan_ctx *x, uint32_t prio, unsigned b) {
        unsigned top = x->density_top[prio];

        if (x->density_shared[prio])
                return DEMAND_DENSITY_MAX;
        if (b == 0)
                return DEMAND_DENSITY_UNKNOWN;
        return b + DEMAND_DENSITY_MAX <= top ? 0 : b + DEMAND_DENSITY_MAX - top;
}

/* The densest region's class of each priority, and which priorities more
 * than one client has regions of (policy_input.clients' indices). */
static void plan_density_init(struct plan_ctx *x) {
        uint32_t client[POLICY_PRIORITY_MAX + 1];
        bool seen[POLICY_PRIORITY_MAX + 1] = {false};

        for (size_t k = 0; k < x->in->n_regions; k++) {
                const struct policy_region *reg = &x->in->regions[k];
                uint32_t prio = region_priority(x->in, reg), c = x->in->clients ? reg->client : 0;
                unsigned b = density_class(reg);

                x->density_shared[prio] |= seen[prio] && client[prio] != c;
                client[prio] = c;
                seen[prio] = true;
                x->density_top[prio] = b > x->density_top[prio] ? b : x->density_top[prio];
        }
}

/* One pass over the chunks of regions [r_lo, r_hi): state flags, rank,
 * what predicts the next use; then the boosts.  Regions are independent:
 * the rank range is the thread's own. */
static void plan_rank_regions(struct plan_ctx *x, size_t r_lo, size_t r_hi, struct plan_part *part) {
        const struct policy_params *pp = x->pp;
        const struct policy_input *in = x->in;
        const struct rank_env env = {
                .now = in->now,
                .hysteresis_ticks = pp->hysteresis_ticks,
                .half_life_ticks = pp->heat_half_life_ticks,
                .heat = pp->kind == POLICY_HEAT || pp->kind == POLICY_HYBRID,
                .demand = pp->kind == POLICY_DEMAND,
                .protect_ticks = in->protect_ticks,
                .probe_window = in->probe_window,
                .active_ticks = pp->active_ticks,
                .decay = x->decay,
        };
        uint64_t stale_vram = 0, cold_vram = 0, sibling_demand = 0, sibling_stale = 0;
        bool streams = pp->prefetch_depth > 0;
        bool predict = streams || pp->kind == POLICY_WINDOW || pp->kind == POLICY_HYBRID;
        uint32_t rmin = part->rmin, rmax = part->rmax;

        for (size_t r = r_lo; r < r_hi; r++) {
                const struct policy_region *reg = &in->regions[r];
                const struct policy_chunk *chunks = reg->chunks;
                uint32_t prio = region_priority(in, reg), n = reg->n_chunks;
                struct rank_env renv = env; /* with the region's client's protection */
                bool active = reg->last_active && in->now - reg->last_active < env.active_ticks;
                uint32_t density = env.demand ? density_of(x, prio, density_class(reg)) : 0;
                /* a new capture's of its priority: in VRAM, launches not known */
                unsigned capture_score = fresh_score(density_of(x, prio, 0), true);
                uint16_t *flags = x->flags + x->start[r];
                uint32_t *rank = x->rank + x->start[r];
                const struct sibling_count *sib = x->sib.of_region ? x->sib.of_region[r] : NULL;
                struct predict_state st;
                uint64_t fresh_host = 0;

                renv.protect_ticks = policy_region_protect(in, reg, env.protect_ticks);
                predict_init(&st);
                for (uint32_t i = 0; i < n; i++) {
                        const struct policy_chunk *c = &chunks[i];
                        uint16_t f = chunk_state(&renv, c);
                        enum sibling_word word = SIBLINGS_SILENT;
                        uint32_t rk = chunk_rank(&renv, c, f, prio, active, density, sib ? &sib[i] : NULL, &word);
                        unsigned cls = rk >> DEMAND_CLASS_SHIFT & 7u; /* demand_class() */
                        bool movable = !(f & (PLAN_PINNED | PLAN_PENDING));
                        bool demand = env.demand && (cls & 6u) == 4u && movable;
                        unsigned score = rk >> DEMAND_SCORE_SHIFT & 7u;
                        /* below a new capture of its priority: fresh, in VRAM,
                         * active, its launches not known yet (by score, then
                         * class) */
                        bool stale = env.demand && (cls & 2u) && (f & PLAN_IN_VRAM) && movable &&
                                     (score < capture_score || (score == capture_score && cls != 7u));

                        /* demand: a fresh chunk outside VRAM is a demand (class 4 or 5);
                         * one in VRAM ranks below a new capture (fresh and active, 7,
                         * its launches not known) unless its density or its class
                         * puts it above (stale), and below a demand unless it is
                         * fresh (cold: class 2 or 3; a demand of a region far
                         * denser may displace a fresh one too) */
                        fresh_host += demand;
                        stale_vram += stale;
                        cold_vram += stale && !(cls & 4u);
                        sibling_demand += demand && word == SIBLINGS_DEMAND;
                        sibling_stale += stale && word == SIBLINGS_STALE;
                        flags[i] = f;
                        rank[i] = rk;
                        /* Of unpinned chunks; a pinned rank, UINT32_MAX, leaves the minimum be. */
                        rmin = rk < rmin ? rk : rmin;
                        rmax = rk > rmax && rk != UINT32_MAX ? rk : rmax;
                        if (streams)
                                predict_stream_add(&st, i, c->last_use);
                }
                part->fresh_prio[prio] += fresh_host;
                if (predict) {
                        uint32_t boosted = rmax; /* boosts raise it; rmax itself stays in a register */

                        predict_frontier(&st, chunks, n);
                        plan_predict(x, r, &st, &boosted);
                        rmax = boosted;
                }
        }
        part->rmin = rmin;
        part->rmax = rmax;
        part->stale_vram += stale_vram;
        part->cold_vram += cold_vram;
        part->sibling_demand += sibling_demand;
        part->sibling_stale += sibling_stale;
}

static void plan_rank_part(struct plan_part *part) {
        struct plan_ctx *x = part->x;
        size_t b;

        part->rmin = UINT32_MAX;
        part->rmax = 0;
        part->stale_vram = part->cold_vram = part->sibling_demand = part->sibling_stale = 0;
        memset(part->fresh_prio, 0, sizeof(part->fresh_prio));
        while (plan_take(x, x->n_rblocks, &b))
                plan_rank_regions(x, x->rblock[b], x->rblock[b + 1], part);
}

/* The rank pass, over the threads; the rank range merged (min and max do
 * not depend on the order). */
static void plan_rank(struct plan_ctx *x) {
        uint32_t rmin = UINT32_MAX, rmax = 0;

        plan_par(x, plan_rank_part);
        x->stale_vram = x->cold_vram = x->sibling_demand = x->sibling_stale = 0;
        memset(x->fresh_prio, 0, sizeof(x->fresh_prio));
        for (unsigned t = 0; t < x->n_threads; t++) {
                for (uint32_t q = 0; q <= POLICY_PRIORITY_MAX; q++)
                        x->fresh_prio[q] += x->part[t].fresh_prio[q];
                rmin = x->part[t].rmin < rmin ? x->part[t].rmin : rmin;
                rmax = x->part[t].rmax > rmax ? x->part[t].rmax : rmax;
                x->stale_vram += x->part[t].stale_vram;
                x->cold_vram += x->part[t].cold_vram;
                x->sibling_demand += x->part[t].sibling_demand;
                x->sibling_stale += x->part[t].sibling_stale;
        }
        x->rmin = rmin;
        x->rmax = rmax;
}

static uint64_t key_of(const struct plan_ctx *x, size_t i) {
        return (uint64_t)x->rank[i] << 32 | i;
}

/* Whether chunk i counts for a threshold: those with flag bits mask set
 * (all for mask 0), of one client unless client is SIZE_MAX. */
struct subset {
        uint16_t mask;
        size_t client;
        uint32_t *hist_hi;    /* histogram of rank >> 16 over the subset, if built already */
        const uint32_t *list; /* the subset is these flat indices (ascending, stride step) */
        size_t n_list;
        ptrdiff_t step;       /* +1, or -1 to read a list stored backwards */
};

static size_t subset_size(const struct plan_ctx *x, const struct subset *q) {
        return q->list ? q->n_list : x->n;
}

/* The j-th member candidate of the subset (ascending flat index). */
static size_t subset_at(const struct plan_ctx *x, const struct subset *q, size_t j) {
        (void)x;
        return q->list ? q->list[(ptrdiff_t)j * q->step] : j;
}

static bool in_subset(const struct plan_ctx *x, const struct subset *q, size_t i) {
        if (q->client != SIZE_MAX && x->in->regions[x->region_of[i]].client != q->client)
                return false;
        return (x->flags[i] & q->mask) == q->mask;
}

/* Chooses the bucket mapping from the rank range: as fine as 65536 buckets allow. */
static void plan_map(struct plan_ctx *x) {
        uint32_t span = x->rmax >= x->rmin ? x->rmax - x->rmin : 0;

        if (x->rmin > x->rmax)
                x->rmin = x->rmax = 0; /* all pinned */
        x->shift = 0;
        while (span >> x->shift > 65535)
                x->shift++;
}

static uint32_t bucket_of(const struct plan_ctx *x, uint32_t rank) {
        return rank == UINT32_MAX ? HIST_PINNED : (rank - x->rmin) >> x->shift;
}

static uint32_t hist_find(const uint32_t *hist, uint32_t n, uint64_t k, uint64_t *acc);

/* For each block it takes: collects the flat indices of the block's
 * chunks with rank - base <= mask at bucket + the block's first, ascending,
 * and histograms their ranks - base into the thread's own mask + 1
 * counters (thread 0: the scratch half of x->hist).  Branch-free (whether
 * a chunk is in the bucket is as good as random): bucket[lo + m] is free,
 * m being at most the chunks seen so far. */
static void plan_collect_part(struct plan_part *part) {
        struct plan_ctx *x = part->x;
        const uint32_t *rank = x->rank;
        uint32_t base = x->base, mask = x->mask;
        uint32_t *fine = part->t == 0 ? x->hist + HIST_N : part->hist;
        size_t b, lo, hi;

        memset(fine, 0, (mask + 1) * sizeof(*fine));
        while (plan_take(x, x->n_blocks, &b)) {
                uint32_t *bucket;
                size_t m = 0;

                plan_block_range(x, b, &lo, &hi);
                bucket = x->bucket + lo;
                for (size_t i = lo; i < hi; i++) {
                        bucket[m] = (uint32_t)i;
                        m += rank[i] - base <= mask;
                }
                x->blk[b].m = m;
                for (size_t j = 0; j < m; j++)
                        fine[rank[bucket[j]] - base]++;
        }
}

/* plan_top_k() over all chunks where bucket [base, base + mask] holds the
 * k-th highest, acc chunks ranking above it: the threads collect and
 * histogram blocks; the histograms summed give the rank, and the tie on it
 * goes to the highest flat indices: the blocks' lists from the last
 * backward. */
static uint64_t plan_collect(struct plan_ctx *x, uint32_t base, uint32_t mask, uint64_t k, uint64_t acc) {
        uint32_t *fine = x->hist + HIST_N, want;

        x->base = base;
        x->mask = mask;
        plan_par(x, plan_collect_part);
        for (unsigned t = 1; t < x->n_threads; t++)
                for (uint32_t b = 0; b <= mask; b++)
                        fine[b] += x->part[t].hist[b];
        want = base + hist_find(fine, mask + 1, k, &acc);
        for (size_t b = x->n_blocks; b-- > 0;) {
                const uint32_t *bucket = x->bucket + b * x->block;

                for (size_t j = x->blk[b].m; j-- > 0;)
                        if (x->rank[bucket[j]] == want && ++acc == k)
                                return key_of(x, bucket[j]);
        }
        return 0; /* not reached for k <= the number of chunks */
}

/* Finds the bucket where the running count from the top reaches k; adds
 * the counts above it to *acc. */
static uint32_t hist_find(const uint32_t *hist, uint32_t n, uint64_t k, uint64_t *acc) {
        for (uint32_t b = n; b-- > 0;) {
                if (*acc + hist[b] >= k)
                        return b;
                *acc += hist[b];
        }
        return 0;
}

/* The key of the k-th highest chunk of a subset of at least k (k >= 1):
 * the chunks with keys >= it are exactly the top k.  A histogram over the
 * rank range finds the bucket; where a bucket holds several ranks, one pass
 * collects its chunks and histograms the rest of the rank; the tie on the
 * last rank goes to the highest flat indices. */
static uint64_t plan_top_k(struct plan_ctx *x, const struct subset *q, uint64_t k) {
        const uint32_t *rank = x->rank;
        uint32_t *hist = x->hist + HIST_N, *bucket = x->bucket, b, want_rank;
        uint64_t acc = 0;
        size_t m = 0, n = subset_size(x, q);

        if (!q->hist_hi) {
                memset(hist, 0, HIST_N * sizeof(*hist));
                for (size_t j = 0; j < n; j++) {
                        size_t i = subset_at(x, q, j);

                        if (q->list || in_subset(x, q, i))
                                hist[bucket_of(x, rank[i])]++;
                }
        }
        b = hist_find(q->hist_hi ? q->hist_hi : hist, HIST_N, k, &acc);
        if (b == HIST_PINNED || x->shift == 0)
                want_rank = b == HIST_PINNED ? UINT32_MAX : x->rmin + b;
        else {
                uint32_t mask = (1u << x->shift) - 1, base = x->rmin + (b << x->shift);

                /* rank - base < mask + 1: in bucket b (pinned ranks are far above
                 * any bucket).  Over all chunks branch-free (whether a chunk is in
                 * the bucket is as good as random), bucket[m] being free. */
                if (!q->list && q->mask == 0 && q->client == SIZE_MAX)
                        return plan_collect(x, base, mask, k, acc);
                for (size_t j = 0; j < n; j++) {
                                size_t i = subset_at(x, q, j);

                                if (rank[i] - base <= mask && (q->list || in_subset(x, q, i)))
                                        bucket[m++] = (uint32_t)i; /* ascending */
                        }
                memset(hist, 0, (mask + 1) * sizeof(*hist));
                for (size_t j = 0; j < m; j++)
                        hist[rank[bucket[j]] - base]++;
                want_rank = base + hist_find(hist, mask + 1, k, &acc);
                while (m-- > 0)
                        if (rank[bucket[m]] == want_rank && ++acc == k)
                                return key_of(x, bucket[m]);
                return 0; /* not reached for k <= the subset's size */
        }
        /* One rank per bucket: the tie is among the highest indices of that rank. */
        for (size_t j = n; j-- > 0;) {
                size_t i = subset_at(x, q, j);

                if (rank[i] == want_rank && (q->list || in_subset(x, q, i)) && ++acc == k)
                        return key_of(x, i);
        }
        return 0; /* not reached for k <= the subset's size */
}

/* The histogram of the ranks of chunks [lo, hi) into the part's own
 * counters.  Odd chunks count into the second half first: neighbours often
 * share a bucket (most chunks are cold), and one counter bumped back to
 * back waits for its own store. */
static void plan_hist_part(struct plan_part *part) {
        struct plan_ctx *x = part->x;
        const uint32_t *rank = x->rank;
        uint32_t *even = part->hist, *odd = part->hist + HIST_N, rmin = x->rmin;
        unsigned shift = x->shift;
        size_t blk, i, lo, hi;

        if (part->t > 0) /* thread 0 counts into x->hist, zeroed by calloc */
                memset(even, 0, HIST_N * sizeof(*even));
        memset(odd, 0, HIST_N * sizeof(*odd));
        while (plan_take(x, x->n_blocks, &blk)) {
                plan_block_range(x, blk, &lo, &hi);
                for (i = lo; i + 1 < hi; i += 2) {
                        even[rank[i] == UINT32_MAX ? HIST_PINNED : (rank[i] - rmin) >> shift]++;
                        odd[rank[i + 1] == UINT32_MAX ? HIST_PINNED : (rank[i + 1] - rmin) >> shift]++;
                }
                if (i < hi)
                        even[bucket_of(x, rank[i])]++;
        }
        for (uint32_t b = 0; b < HIST_N; b++)
                even[b] += odd[b];
}

/* The histogram of all ranks, after the quotas, into x->hist: the threads'
 * counts summed (sums do not depend on the order). */
static void plan_hist_all(struct plan_ctx *x) {
        plan_par(x, plan_hist_part);
        for (unsigned t = 1; t < x->n_threads; t++) {
                const uint32_t *h = x->part[t].hist;

                for (uint32_t b = 0; b < HIST_N; b++)
                        x->hist[b] += h[b];
        }
}

/* Marks a client's chunks beyond its quota (lowest ranks first) excluded. */
static void plan_quota_client(struct plan_ctx *x, size_t client) {
        const struct policy_input *in = x->in;
        uint64_t quota = in->clients[client].quota_chunks, cut;
        struct subset q = {.client = client};
        size_t m = 0;

        for (size_t r = 0; r < in->n_regions; r++)
                if (in->regions[r].client == client) {
                        m += in->regions[r].n_chunks;
                        for (size_t i = x->start[r]; i < x->start[r + 1]; i++)
                                x->held[client] += !!(x->flags[i] & PLAN_CHARGED);
                }
        if (m <= quota)
                return;
        cut = quota == 0 ? UINT64_MAX : plan_top_k(x, &q, quota);
        for (size_t r = 0; r < in->n_regions; r++)
                if (in->regions[r].client == client)
                        for (size_t i = x->start[r]; i < x->start[r + 1]; i++)
                                if (key_of(x, i) < cut) {
                                        x->flags[i] |= PLAN_EXCLUDED;
                                        x->rank[i] = 0; /* below every in-quota chunk */
                                }
}

/* Returns 0 or -ENOMEM. */
static int plan_quota(struct plan_ctx *x) {
        bool any = false;

        if (!x->in->clients)
                return 0;
        for (size_t c = 0; c < x->in->n_clients; c++)
                any |= x->in->clients[c].quota_chunks != UINT64_MAX;
        if (!any)
                return 0;
        x->region_of = malloc(x->n * sizeof(*x->region_of));
        x->held = calloc(x->in->n_clients, sizeof(*x->held));
        x->quota_cut = calloc(x->in->n_clients, sizeof(*x->quota_cut));
        if (!x->region_of || !x->held || !x->quota_cut)
                return -ENOMEM;
        for (size_t r = 0; r < x->in->n_regions; r++)
                for (size_t i = x->start[r]; i < x->start[r + 1]; i++)
                        x->region_of[i] = (uint32_t)r;
        for (size_t c = 0; c < x->in->n_clients; c++)
                if (x->in->clients[c].quota_chunks != UINT64_MAX)
                        plan_quota_client(x, c);
        /* Excluded chunks sit at rank 0 now: the mapping must reach down to them. */
        x->rmin = 0;
        plan_map(x);
        return 0;
}

static unsigned is_evict_candidate(uint16_t f, uint64_t key, uint64_t want_min) {
        return ((key < want_min) | !!(f & PLAN_EXCLUDED)) & !!(f & PLAN_IN_VRAM) &
               !(f & (PLAN_PENDING | PLAN_PINNED | PLAN_FROZEN));
}

static unsigned is_promote_candidate(uint16_t f, uint64_t key, uint64_t want_min) {
        return (key >= want_min) & !(f & (PLAN_EXCLUDED | PLAN_FROZEN | PLAN_IN_VRAM | PLAN_PENDING));
}

/* Chunks all the host nodes together can take, saturating. */
static uint64_t plan_nodes_room(const struct policy_input *in) {
        uint64_t room = 0;

        for (size_t k = 0; k < in->n_nodes; k++)
                room = in->nodes[k].room_chunks > UINT64_MAX - room ? UINT64_MAX : room + in->nodes[k].room_chunks;
        return room;
}

/* The eviction and promotion candidates among chunks [lo, hi): one thread
 * writes them straight into cand (evictions ascending from the front,
 * promotions descending from the back), several into their slices of
 * bucket, from where plan_candidates() moves them into place.
 * Branch-free: which chunks are candidates is as good as random.  The gap
 * between the two lists keeps a free slot for chunk at (fewer than
 * at - lo candidates so far), so both stores may always happen. */
static void plan_cand_part(struct plan_part *part) {
        struct plan_ctx *x = part->x;
        const uint16_t *flags = x->flags;
        const uint32_t *rank = x->rank;
        uint32_t *dst = x->n_blocks == 1 ? x->cand : x->bucket;
        uint64_t want_min = x->want_min;
        size_t b, lo, hi;

        while (plan_take(x, x->n_blocks, &b)) {
                uint32_t *ev, *pr;
                size_t n_ev = 0, n_pr = 0;

                plan_block_range(x, b, &lo, &hi);
                ev = dst + lo;
                pr = dst + hi - 1;
                for (size_t at = lo; at < hi; at++) {
                        uint16_t f = flags[at];
                        uint64_t key = (uint64_t)rank[at] << 32 | at;
                        unsigned e = is_evict_candidate(f, key, want_min);
                        unsigned p = (e ^ 1u) & is_promote_candidate(f, key, want_min);

                        ev[n_ev] = (uint32_t)at;
                        *(pr - n_pr) = (uint32_t)at;
                        n_ev += e;
                        n_pr += p;
                }
                x->blk[b].n_ev = n_ev;
                x->blk[b].n_pr = n_pr;
        }
}

/* Gathers the candidates into cand: x->n_ev evictions from the front
 * (ascending), x->n_pr promotions from the back (descending), the threads'
 * lists joined in thread order. */
static void plan_candidates(struct plan_ctx *x, uint64_t want_min) {
        size_t n_ev = 0, n_pr = 0, lo, hi;

        x->want_min = want_min;
        plan_par(x, plan_cand_part);
        for (size_t b = 0; b < x->n_blocks; b++) {
                const struct plan_block *blk = &x->blk[b];

                if (x->n_blocks > 1) {
                        plan_block_range(x, b, &lo, &hi);
                        memcpy(x->cand + n_ev, x->bucket + lo, blk->n_ev * sizeof(*x->cand));
                        memcpy(x->cand + x->n - n_pr - blk->n_pr, x->bucket + hi - blk->n_pr,
                               blk->n_pr * sizeof(*x->cand));
                }
                n_ev += blk->n_ev;
                n_pr += blk->n_pr;
        }
        x->n_ev = n_ev;
        x->n_pr = n_pr;
}

/* Picks thresholds: the wanted set, then the lowest-ranked evictions and the
 * highest-ranked promotions that the rate limit and the free budget allow. */
static void plan_select(struct plan_ctx *x, struct selection *s) {
        const struct policy_input *in = x->in;
        size_t n = x->n, n_ev, n_pr;
        uint64_t budget = in->budget_chunks < n ? in->budget_chunks : n;
        uint64_t room, ahead, rate = in->max_move_chunks;
        struct subset all = {.client = SIZE_MAX, .hist_hi = x->hist},
                      ev = {.client = SIZE_MAX, .list = x->cand, .step = 1},
                      pr = {.client = SIZE_MAX, .list = x->cand + n - 1, .step = -1};

        if (budget == 0)
                s->want_min = UINT64_MAX; /* no key reaches it: positions < UINT32_MAX */
        else
                s->want_min = budget == n ? 0 : plan_top_k(x, &all, budget);

        /* The thresholds below histogram the candidate lists themselves, and
         * only where the rate limit or the room cuts them. */
        plan_candidates(x, s->want_min);
        n_ev = ev.n_list = x->n_ev;
        n_pr = pr.n_list = x->n_pr;

        /* Evict the lowest n_evict: everything below the top (n_ev - n_evict). */
        s->n_evict = n_ev < rate ? n_ev : rate;
        if (in->nodes && s->n_evict > plan_nodes_room(in))
                s->n_evict = plan_nodes_room(in); /* no node may go over its host budget */
        s->evict_max = s->n_evict == 0      ? 0
                       : s->n_evict == n_ev ? UINT64_MAX
                                            : plan_top_k(x, &ev, n_ev - s->n_evict) - 1;
        rate -= s->n_evict;
        /* Room: the free budget, plus what overlap lets promotions borrow
         * from the evictions under way and those planned now. */
        ahead = in->evicting_chunks < UINT64_MAX - s->n_evict ? in->evicting_chunks + s->n_evict : UINT64_MAX;
        ahead = ahead < x->pp->overlap_chunks ? ahead : x->pp->overlap_chunks;
        room = in->budget_chunks < UINT64_MAX - ahead ? in->budget_chunks + ahead : UINT64_MAX;
        room = room > in->charged_chunks ? room - in->charged_chunks : 0;
        s->n_promote = n_pr < rate ? n_pr : rate;
        s->n_roomless = s->n_promote > room ? s->n_promote - room : 0;
        if (s->n_promote > room)
                s->n_promote = room;
        s->promote_min = s->n_promote == 0      ? UINT64_MAX
                         : s->n_promote == n_pr ? 0
                                                : plan_top_k(x, &pr, s->n_promote);
}

/* Splits the evictions over the host nodes in their order: the first node
 * with room takes the warmest evicted chunks (likeliest to be wanted back
 * soon, so nearest), the next the warmest of the rest, and so on.  The
 * evicted chunks are the lowest n_evict of the candidates, so the top c of
 * them are the top (n_ev - n_evict + c) candidates. */
static void plan_spill(struct plan_ctx *x, struct selection *s) {
        struct subset ev = {.client = SIZE_MAX, .list = x->cand, .n_list = x->n_ev, .step = 1};
        uint64_t taken = 0;

        s->n_node_min = 0;
        for (size_t k = 0; x->in->nodes && k < x->in->n_nodes && taken < s->n_evict; k++) {
                uint64_t room = x->in->nodes[k].room_chunks;

                taken = room < s->n_evict - taken ? taken + room : s->n_evict;
                s->node_min[k] = taken == s->n_evict ? 0
                                 : taken == 0        ? UINT64_MAX /* no room yet: no key reaches it */
                                                     : plan_top_k(x, &ev, x->n_ev - s->n_evict + taken);
                s->n_node_min = k + 1;
        }
}

/* Where an evicted chunk with key goes: its node by the thresholds of
 * plan_spill(), or the home node without host budgets. */
static int32_t plan_node_of(const struct plan_ctx *x, const struct selection *s, uint64_t key) {
        size_t k = 0;

        if (!x->in->nodes)
                return x->in->home_node;
        while (k + 1 < s->n_node_min && key < s->node_min[k])
                k++;
        return x->in->nodes[k].id;
}

/* Appends a move for flat index at, extending the last run when contiguous.
 * *r walks the regions forward (indices come ascending). */
static void plan_append(const struct plan_ctx *x, size_t at, uint32_t tier, int32_t node, size_t *r,
                        struct policy_plan *p) {
        uint32_t cap = x->pp->run_cap ? x->pp->run_cap : POLICY_RUN_CAP_DEFAULT;
        struct policy_move *last = p->n_moves ? &p->moves[p->n_moves - 1] : NULL;
        uint32_t i;

        while (at >= x->start[*r + 1])
                (*r)++;
        i = (uint32_t)(at - x->start[*r]);
        if (last && last->tier == tier && last->host_node == node && last->region == *r &&
            last->first_chunk + last->n_chunks == i && last->n_chunks < cap) {
                last->n_chunks++;
                return;
        }
        p->moves[p->n_moves++] =
                (struct policy_move){.region = (uint32_t)*r, .first_chunk = i, .n_chunks = 1, .tier = tier,
                                     .host_node = node};
}

/* Evictions (runs in ascending order), then promotions: coalesced into
 * maximal contiguous runs of at most run_cap chunks. */
/* A quota also bounds what a client holds while its evictions are under
 * way: per client, only the highest-ranked (quota - held) promotions go
 * now.  Returns 0 or -ENOMEM. */
static int plan_quota_room(struct plan_ctx *x, const struct selection *s) {
        const struct policy_input *in = x->in;
        uint32_t *list;

        if (!x->quota_cut || !s->n_promote)
                return 0;
        list = malloc(x->n_pr * sizeof(*list));
        if (!list)
                return -ENOMEM;
        for (size_t c = 0; c < in->n_clients; c++) {
                uint64_t quota = in->clients[c].quota_chunks;
                uint64_t room = quota > x->held[c] ? quota - x->held[c] : 0;
                struct subset q = {.client = SIZE_MAX, .list = list, .step = 1};

                if (quota == UINT64_MAX)
                        continue;
                for (size_t j = 0; j < x->n_pr; j++) {
                        size_t at = x->cand[x->n - 1 - j];

                        if (key_of(x, at) >= s->promote_min && in->regions[x->region_of[at]].client == c)
                                list[q.n_list++] = (uint32_t)at;
                }
                if (q.n_list > room)
                        x->quota_cut[c] = room == 0 ? UINT64_MAX : plan_top_k(x, &q, room);
        }
        free(list);
        return 0;
}

/* Whether promoting chunk at would take its client past its quota.  A
 * region whose client index is out of range has no client: no quota. */
static bool over_quota(const struct plan_ctx *x, size_t at) {
        uint32_t c;

        if (!x->quota_cut) /* no quotas: no region_of either */
                return false;
        c = x->in->regions[x->region_of[at]].client;
        return c < x->in->n_clients && key_of(x, at) < x->quota_cut[c];
}

static void plan_emit(struct plan_ctx *x, const struct selection *s, struct policy_plan *p) {
        uint64_t promoted_fresh[POLICY_PRIORITY_MAX + 1] = {0};
        size_t r = 0;

        for (size_t j = 0; s->n_evict && j < x->n_ev; j++) {
                uint64_t key = key_of(x, x->cand[j]);

                if (key <= s->evict_max)
                        plan_append(x, x->cand[j],
                                    x->pp->evict_tier == POLICY_TIER_HOST ? POLICY_TIER_HOST
                                                                       : POLICY_TIER_HOST_MAPPED,
                                    plan_node_of(x, s, key), &r, p);
        }
        r = 0;
        for (size_t j = 0; s->n_promote && j < x->n_pr; j++) {
                size_t at = x->cand[x->n - 1 - j];

                if (key_of(x, at) >= s->promote_min && !over_quota(x, at)) {
                        plan_append(x, at, POLICY_TIER_VRAM, -1, &r, p);
                        p->promote_chunks++;
                        promoted_fresh[x->rank[at] >> RANK_PRIORITY_SHIFT] +=
                                x->pp->kind == POLICY_DEMAND && (x->rank[at] >> DEMAND_CLASS_SHIFT & 6u) == 4u;
                        p->prefetch_chunks += (x->flags[at] & (PLAN_PREFETCH | PLAN_WINDOW)) == PLAN_PREFETCH;
                }
        }
        /* a promoted demand is one of its priority's fresh chunks */
        for (uint32_t q = 0; q <= POLICY_PRIORITY_MAX; q++)
                if (x->fresh_prio[q] > promoted_fresh[q]) {
                        p->held_chunks += x->fresh_prio[q] - promoted_fresh[q];
                        p->held_priority = q;
                }
        p->stale_chunks = x->stale_vram;
        p->cold_chunks = x->cold_vram;
        p->roomless_chunks = s->n_roomless;
        p->sibling_groups = x->sib.n_groups;
        p->sibling_groups_mute = x->sib.n_mute;
        p->sibling_regions = x->sib.n_members;
        p->sibling_demand_chunks = x->sibling_demand;
        p->sibling_stale_chunks = x->sibling_stale;
}

static int plan_check(const struct policy_params *pp, const struct policy_input *in, size_t *ret_n) {
        uint64_t n = 0;

        if ((unsigned)pp->kind >= _POLICY_KIND_MAX || pp->heat_half_life_ticks == 0)
                return -EINVAL;
        if ((in->n_regions && !in->regions) || in->n_nodes > (in->nodes ? POLICY_MAX_NODES : 0))
                return -EINVAL;
        for (size_t r = 0; r < in->n_regions; r++) {
                if (in->regions[r].n_chunks && !in->regions[r].chunks)
                        return -EINVAL;
                n += in->regions[r].n_chunks;
        }
        if (n >= UINT32_MAX)
                return -EINVAL;
        *ret_n = (size_t)n;
        return 0;
}

int policy_plan(const struct policy_params *pp, const struct policy_input *in, struct policy_plan *ret) {
        struct plan_ctx x = {.pp = pp, .in = in};
        struct selection s = {0};
        int r;

        *ret = (struct policy_plan){0};
        r = plan_check(pp, in, &x.n);
        if (r < 0 || x.n == 0)
                return r;
        x.n_threads = plan_threads(pp->threads, in, x.n);
        r = plan_ctx_init(&x);
        if (r < 0)
                return r;
        plan_decay_init(&x);
        if (pp->kind == POLICY_DEMAND)
                plan_density_init(&x);
        if (pp->kind == POLICY_DEMAND && (r = siblings_build(&x.sib, in, in->protect_ticks, x.n_threads)) < 0) {
                plan_ctx_free(&x);
                return r;
        }
        plan_rank(&x);
        plan_map(&x);
        r = plan_quota(&x);
        if (r < 0) {
                plan_ctx_free(&x);
                return r;
        }
        plan_hist_all(&x);
        plan_select(&x, &s);
        plan_spill(&x, &s);
        r = plan_quota_room(&x, &s);
        if (r < 0) {
                plan_ctx_free(&x);
                return r;
        }
        if (s.n_evict + s.n_promote > 0) {
                ret->moves = calloc(s.n_evict + s.n_promote, sizeof(*ret->moves));
                if (!ret->moves) {
                        plan_ctx_free(&x);
                        return -ENOMEM;
                }
        }
        plan_emit(&x, &s, ret);
        ret->evict_chunks = s.n_evict;
        /* the counts go with the plan, for the sample that follows it */
        if (pp->kind == POLICY_DEMAND && (ret->siblings = malloc(sizeof(*ret->siblings)))) {
                *ret->siblings = x.sib;
                x.sib = (struct plan_siblings){0};
        }
        plan_ctx_free(&x);
        return 0;
}

void policy_plan_clear(struct policy_plan *p) {
        if (!p)
                return;
        free(p->moves);
        if (p->siblings) {
                siblings_free(p->siblings);
                free(p->siblings);
        }
        *p = (struct policy_plan){0};
}
