/* SPDX-License-Identifier: MIT */
/*
 * Reference oracle for tests/unit/test-plan-equiv: policy/plan.c as of
 * 445b903, before the tick was made faster, with its own copy of that
 * version's heat_class().  Test code only: do not fix or speed up; the
 * planner must keep producing exactly these plans.
 */
#include "config.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "plan-ref.h"
#include "policy.h"
#include "heat-decay.h"
#define heat_class ref_heat_class /* the one of 445b903, below */
#include "predict.h"
#include "protocol.h"

/* Rank layout below the priority bits (29..31; pinned is all ones). */
#define RANK_PRIORITY_SHIFT 29
#define RANK_HOT            (1u << 27) /* hinted HOT: above all the engine did not say */
#define RANK_PREFETCH       (1u << 26) /* needed within a few ticks: above the window */
#define RANK_WINDOW         (1u << 25)
#define RANK_CLASS_SHIFT    21
/* Histogram buckets: 65536 for unpinned ranks, one above them for pinned chunks. */
#define HIST_N      65537u
#define HIST_PINNED 65536u
#define ELEMENTS(a) (sizeof(a) / sizeof((a)[0]))
#define RECENCY_MAX         ((1u << 21) - 1) /* ticks: 29 h at 50 ms; older is all alike */

struct plan_ctx {
        const struct policy_params *pp;
        const struct policy_input *in;
        size_t n;            /* chunks in all regions */
        size_t *start;       /* flat index of each region's chunk 0; n_regions + 1 entries */
        uint16_t *flags;     /* PLAN_* per chunk */
        uint32_t *rank;      /* per chunk; the ordering key is rank << 32 | flat index */
        uint32_t *region_of; /* per chunk: its region (for quotas); NULL without quotas */
        uint64_t *held;      /* per client: chunks charged to VRAM now (with quotas) */
        uint64_t *quota_cut; /* per client: promotions with keys below this wait (with quotas) */
        uint32_t *bucket;    /* scratch: flat indices of one histogram bucket */
        uint32_t *cand;      /* flat indices: eviction candidates from the front (ascending),
                              * promotion candidates from the back (descending) */
        size_t n_ev, n_pr;
        uint32_t *hist;      /* 4 x HIST_N counters: all, scratch, evict and promote candidates */
        uint32_t rmin, rmax; /* range of the ranks of unpinned chunks */
        unsigned shift;      /* bucket of an unpinned rank: (rank - rmin) >> shift, < 65536 */
        uint32_t decay[4096]; /* heat decay by age: shift << 24 | 16.16 factor (0: gone) */
};

struct selection {
        uint64_t want_min;    /* keys >= this are wanted in VRAM */
        uint64_t evict_max;   /* eviction candidates with key <= this are evicted */
        uint64_t promote_min; /* promotion candidates with key >= this are promoted */
        uint64_t n_evict, n_promote;
};

static inline unsigned ref_heat_class(uint32_t heat) {
        uint32_t acc = heat >> 8; /* POLICY_HEAT_ONE = 256 */
        unsigned cls = (32u - (unsigned)__builtin_clz(acc | 1)) * (acc != 0); /* 1: 1, 2-3: 2, 4-7: 3 */

        return cls > 15 ? 15 : cls;
}

/* Flags that come from the chunk itself, and hysteresis (branch-free: tiers
 * are as good as random from one chunk to the next). */
static uint16_t chunk_state(const struct plan_ctx *x, const struct policy_chunk *c) {
        uint32_t h = x->pp->hysteresis_ticks;
        bool vram = c->tier == KVT_TIER_VRAM, pinned = c->flags & POLICY_CHUNK_PINNED;
        bool frozen = !pinned && c->last_move && x->in->now - c->last_move < h;

        return (uint16_t)(vram * (PLAN_IN_VRAM | PLAN_CHARGED) | (c->pending != 0) * PLAN_PENDING |
                          (c->pending == KVT_TIER_VRAM) * PLAN_CHARGED | pinned * PLAN_PINNED |
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
static uint32_t plan_heat(const struct plan_ctx *x, uint32_t heat, uint32_t age) {
        uint32_t d;

        if (age >= ELEMENTS(x->decay))
                return heat_decay(heat, age, x->pp->heat_half_life_ticks);
        d = x->decay[age];
        return (uint32_t)(((uint64_t)(heat >> (d >> 24)) * (d & 0xffffff)) >> 16);
}

/* The rank before window and prefetch boosts.  demand (added after
 * 445b903, written plainly here): fresh, then resident, then in an active
 * region, then the heat class, then recency from the last use (or, in
 * VRAM, the last move). */
static uint32_t chunk_rank(const struct plan_ctx *x, const struct policy_chunk *c, uint16_t f, uint32_t prio,
                           bool active, uint32_t protect_ticks, uint32_t density) {
        const struct policy_params *pp = x->pp;
        uint32_t age = x->in->now > c->last_use ? x->in->now - c->last_use : 0;
        uint32_t rank = prio << RANK_PRIORITY_SHIFT | (RECENCY_MAX - (age < RECENCY_MAX ? age : RECENCY_MAX));

        if (f & PLAN_PINNED)
                return UINT32_MAX;
        if (c->flags & POLICY_CHUNK_HOT)
                rank |= RANK_HOT;
        if (pp->kind == POLICY_DEMAND) {
                bool charged = (f & PLAN_CHARGED) != 0;
                uint32_t seen = c->last_use;
                unsigned cls = 0;

                if (charged && c->last_move > seen)
                        seen = c->last_move;
                age = x->in->now > seen ? x->in->now - seen : 0;
                /* fresh: in VRAM, not found cold by a probe; outside, used within
                 * the protection, and a chunk that was in VRAM before or was
                 * used twice */
                if (charged ? !(c->flags & POLICY_CHUNK_COLD)
                            : age < protect_ticks &&
                                      (c->last_move != 0 ||
                                       c->heat > POLICY_HEAT_ONE))
                        cls += 4;
                if (charged)
                        cls += 2;
                if (active)
                        cls += 1;
                /* (thirty-second session) a fresh chunk's score by its region's
                 * launch density in bits 22..24, the class in 19..21, the heat
                 * class (of the heat at the last use) in 15..18, recency below */
                rank = prio << RANK_PRIORITY_SHIFT | (cls >= 4 ? 1 + density + (charged ? 2 : 0) : 0) << 22 |
                       (uint32_t)cls << 19 |
                       (uint32_t)heat_class(plan_heat(x, c->heat, x->in->now > c->last_use ? x->in->now - c->last_use : 0))
                               << 15 |
                       ((1u << 15) - 1 - (age < (1u << 15) - 1 ? age : (1u << 15) - 1));
                if (c->flags & POLICY_CHUNK_HOT)
                        rank |= RANK_HOT;
                return rank;
        }
        if (pp->kind == POLICY_HEAT || pp->kind == POLICY_HYBRID) {
                unsigned cls = heat_class(plan_heat(x, c->heat, age));

                /* A resident counts one class hotter: displacing it takes a clearly hotter chunk. */
                if ((f & PLAN_CHARGED) && cls < 15)
                        cls++;
                rank |= (uint32_t)cls << RANK_CLASS_SHIFT;
        }
        return rank;
}

static uint32_t region_priority(const struct plan_ctx *x, const struct policy_region *reg) {
        uint32_t prio = 0;

        if (x->in->clients && reg->client < x->in->n_clients)
                prio = x->in->clients[reg->client].priority;
        return prio > POLICY_PRIORITY_MAX ? POLICY_PRIORITY_MAX : prio;
}

/* The bit length of region r's launches a tick per chunk, in 2^-20 of
 * POLICY_LAUNCH_ONE. */
static unsigned launch_bits(const struct policy_region *reg) {
        uint64_t d = reg->n_chunks ? ((uint64_t)reg->launch_rate << 20) / reg->n_chunks : 0;
        unsigned b = 0;

        for (; d; d >>= 1)
                b++;
        return b;
}

/* demand's density of region r (thirty-second session), written plainly:
 * 4 for the densest of its priority, one less a halving, 0 at the least;
 * 2 with no launches known; 4 for all where regions of its priority are
 * of two clients or more (an index past the clients counts as one). */
static uint32_t ref_density(const struct plan_ctx *x, size_t r) {
        const struct policy_input *in = x->in;
        uint32_t prio = region_priority(x, &in->regions[r]);
        uint32_t me = in->clients ? in->regions[r].client : 0;
        unsigned top = 0, b = launch_bits(&in->regions[r]);

        for (size_t k = 0; k < in->n_regions; k++) {
                unsigned bk;

                if (region_priority(x, &in->regions[k]) != prio)
                        continue;
                if ((in->clients ? in->regions[k].client : 0) != me)
                        return 4;
                bk = launch_bits(&in->regions[k]);
                top = bk > top ? bk : top;
        }
        if (b == 0)
                return 2;
        return b + 4 <= top ? 0 : b + 4 - top;
}

/* Sets a boost on chunks [first, last] of the flat array (pinned stay on top). */
static void plan_boost(struct plan_ctx *x, size_t base, const struct predict_range *rg, uint16_t flag,
                       uint32_t bit) {
        for (size_t at = base + (size_t)rg->first; at <= base + (size_t)rg->last; at++) {
                if (x->flags[at] & PLAN_PINNED)
                        continue;
                x->flags[at] |= flag;
                x->rank[at] |= bit;
                if (x->rank[at] > x->rmax)
                        x->rmax = x->rank[at];
        }
}

/* The window and the streams of one region, learnt in the rank pass. */
static void plan_predict(struct plan_ctx *x, size_t r, const struct predict_state *st) {
        const struct policy_params *pp = x->pp;
        struct predict_range rg[64];
        uint32_t depth = pp->prefetch_depth < 64 ? pp->prefetch_depth : 64, n;
        /* window: every region; hybrid: only regions in use within a half-life. */
        uint32_t active = pp->kind == POLICY_WINDOW ? UINT32_MAX : pp->heat_half_life_ticks;

        if ((pp->kind == POLICY_WINDOW || pp->kind == POLICY_HYBRID) &&
            predict_window(st, x->in->now, pp->window_chunks, active, &rg[0]))
                plan_boost(x, x->start[r], &rg[0], PLAN_WINDOW, RANK_WINDOW);
        n = predict_stream(st, x->in->now, depth, x->in->regions[r].n_chunks, rg);
        for (uint32_t k = 0; k < n; k++)
                plan_boost(x, x->start[r], &rg[k], PLAN_PREFETCH, RANK_PREFETCH);
}

/* One pass over every chunk: state flags, rank, what predicts the next
 * use; then the boosts. */
static void plan_rank(struct plan_ctx *x) {
        const struct policy_input *in = x->in;
        bool streams = x->pp->prefetch_depth > 0;
        bool predict = streams || x->pp->kind == POLICY_WINDOW || x->pp->kind == POLICY_HYBRID;

        x->rmin = UINT32_MAX;
        x->rmax = 0;

        for (size_t r = 0; r < in->n_regions; r++) {
                const struct policy_region *reg = &in->regions[r];
                uint32_t prio = region_priority(x, reg);
                /* its client's own protection (added with per-client guards), else the input's */
                uint32_t protect = x->in->clients && reg->client < x->in->n_clients &&
                                                   x->in->clients[reg->client].protect_ticks
                                           ? x->in->clients[reg->client].protect_ticks
                                           : x->in->protect_ticks;
                bool active = reg->last_active != 0 && in->now - reg->last_active < x->pp->active_ticks;
                uint32_t density = x->pp->kind == POLICY_DEMAND ? ref_density(x, r) : 0;
                uint16_t *flags = x->flags + x->start[r];
                uint32_t *rank = x->rank + x->start[r];
                struct predict_state st;

                predict_init(&st);
                for (uint32_t i = 0; i < reg->n_chunks; i++) {
                        const struct policy_chunk *c = &reg->chunks[i];
                        uint16_t f = chunk_state(x, c);

                        flags[i] = f;
                        rank[i] = chunk_rank(x, c, f, prio, active, protect, density);
                        if (!(f & PLAN_PINNED)) {
                                x->rmin = rank[i] < x->rmin ? rank[i] : x->rmin;
                                x->rmax = rank[i] > x->rmax ? rank[i] : x->rmax;
                        }
                        if (predict)
                                predict_add(&st, i, c->last_use, streams);
                }
                if (predict)
                        plan_predict(x, r, &st);
        }
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
        uint32_t *hist = x->hist + HIST_N, b, want_rank;
        uint64_t acc = 0;
        size_t m = 0, n = subset_size(x, q);

        if (!q->hist_hi) {
                memset(hist, 0, HIST_N * sizeof(*hist));
                for (size_t j = 0; j < n; j++) {
                        size_t i = subset_at(x, q, j);

                        if (q->list || in_subset(x, q, i))
                                hist[bucket_of(x, x->rank[i])]++;
                }
        }
        b = hist_find(q->hist_hi ? q->hist_hi : hist, HIST_N, k, &acc);
        if (b == HIST_PINNED || x->shift == 0)
                want_rank = b == HIST_PINNED ? UINT32_MAX : x->rmin + b;
        else {
                uint32_t mask = (1u << x->shift) - 1, base = x->rmin + (b << x->shift);

                memset(hist, 0, (mask + 1) * sizeof(*hist));
                /* rank - base < mask + 1: in bucket b (pinned ranks are far above any bucket) */
                if (!q->list && q->mask == 0 && q->client == SIZE_MAX)
                        for (size_t i = 0; i < n; i++) {
                                uint32_t d = x->rank[i] - base;

                                if (d <= mask) {
                                        hist[d]++;
                                        x->bucket[m++] = (uint32_t)i; /* ascending */
                                }
                        }
                else
                        for (size_t j = 0; j < n; j++) {
                                size_t i = subset_at(x, q, j);
                                uint32_t d = x->rank[i] - base;

                                if (d <= mask && (q->list || in_subset(x, q, i))) {
                                        hist[d]++;
                                        x->bucket[m++] = (uint32_t)i; /* ascending */
                                }
                        }
                want_rank = x->rmin + (b << x->shift) + hist_find(hist, mask + 1, k, &acc);
                while (m-- > 0)
                        if (x->rank[x->bucket[m]] == want_rank && ++acc == k)
                                return key_of(x, x->bucket[m]);
                return 0; /* not reached for k <= the subset's size */
        }
        /* One rank per bucket: the tie is among the highest indices of that rank. */
        for (size_t j = n; j-- > 0;) {
                size_t i = subset_at(x, q, j);

                if (x->rank[i] == want_rank && (q->list || in_subset(x, q, i)) && ++acc == k)
                        return key_of(x, i);
        }
        return 0; /* not reached for k <= the subset's size */
}

/* The histogram of all ranks, after the quotas. */
static void plan_hist_all(struct plan_ctx *x) {
        for (size_t i = 0; i < x->n; i++)
                x->hist[bucket_of(x, x->rank[i])]++;
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

/* Picks thresholds: the wanted set, then the lowest-ranked evictions and the
 * highest-ranked promotions that the rate limit and the free budget allow. */
static void plan_select(struct plan_ctx *x, struct selection *s) {
        const struct policy_input *in = x->in;
        size_t n = x->n, n_ev = 0, n_pr = 0;
        uint64_t budget = in->budget_chunks < n ? in->budget_chunks : n;
        uint64_t room = in->budget_chunks > in->charged_chunks ? in->budget_chunks - in->charged_chunks : 0;
        uint64_t rate = in->max_move_chunks;
        struct subset all = {.client = SIZE_MAX, .hist_hi = x->hist},
                      ev = {.client = SIZE_MAX, .hist_hi = x->hist + 2 * HIST_N, .list = x->cand, .step = 1},
                      pr = {.client = SIZE_MAX, .hist_hi = x->hist + 3 * HIST_N, .list = x->cand + n - 1, .step = -1};

        if (budget == 0)
                s->want_min = UINT64_MAX; /* no key reaches it: positions < UINT32_MAX */
        else
                s->want_min = budget == n ? 0 : plan_top_k(x, &all, budget);

        /* Branch-free: which chunks are candidates is as good as random.  The
         * gap between the two lists keeps a free slot for chunk at (fewer
         * than at candidates so far), so both stores may always happen. */
        for (size_t at = 0; at < n; at++) {
                uint16_t f = x->flags[at];
                uint64_t key = key_of(x, at);
                uint32_t bk = bucket_of(x, x->rank[at]);
                unsigned e = is_evict_candidate(f, key, s->want_min);
                unsigned p = (e ^ 1u) & is_promote_candidate(f, key, s->want_min);

                ev.hist_hi[bk] += e;
                pr.hist_hi[bk] += p;
                x->cand[n_ev] = (uint32_t)at;
                x->cand[n - 1 - n_pr] = (uint32_t)at;
                n_ev += e;
                n_pr += p;
        }
        x->n_ev = ev.n_list = n_ev;
        x->n_pr = pr.n_list = n_pr;

        /* Evict the lowest n_evict: everything below the top (n_ev - n_evict). */
        s->n_evict = n_ev < rate ? n_ev : rate;
        s->evict_max = s->n_evict == 0      ? 0
                       : s->n_evict == n_ev ? UINT64_MAX
                                            : plan_top_k(x, &ev, n_ev - s->n_evict) - 1;
        rate -= s->n_evict;
        s->n_promote = n_pr < rate ? n_pr : rate;
        if (s->n_promote > room)
                s->n_promote = room;
        s->promote_min = s->n_promote == 0      ? UINT64_MAX
                         : s->n_promote == n_pr ? 0
                                                : plan_top_k(x, &pr, s->n_promote);
}

/* Appends a move for flat index at, extending the last run when contiguous.
 * *r walks the regions forward (indices come ascending). */
static void plan_append(const struct plan_ctx *x, size_t at, uint32_t tier, size_t *r, struct policy_plan *p) {
        uint32_t cap = x->pp->run_cap ? x->pp->run_cap : POLICY_RUN_CAP_DEFAULT;
        struct policy_move *last = p->n_moves ? &p->moves[p->n_moves - 1] : NULL;
        uint32_t i;

        while (at >= x->start[*r + 1])
                (*r)++;
        i = (uint32_t)(at - x->start[*r]);
        if (last && last->tier == tier && last->region == *r && last->first_chunk + last->n_chunks == i &&
            last->n_chunks < cap) {
                last->n_chunks++;
                return;
        }
        p->moves[p->n_moves++] =
                (struct policy_move){.region = (uint32_t)*r, .first_chunk = i, .n_chunks = 1, .tier = tier};
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

static void plan_emit(struct plan_ctx *x, const struct selection *s, struct policy_plan *p) {
        size_t r = 0;

        for (size_t j = 0; s->n_evict && j < x->n_ev; j++)
                if (key_of(x, x->cand[j]) <= s->evict_max)
                        plan_append(x, x->cand[j], x->pp->evict_tier == KVT_TIER_HOST ? KVT_TIER_HOST : KVT_TIER_HOST_MAPPED,
                                    &r, p);
        r = 0;
        for (size_t j = 0; s->n_promote && j < x->n_pr; j++) {
                size_t at = x->cand[x->n - 1 - j];

                if (key_of(x, at) >= s->promote_min &&
                    !(x->quota_cut && key_of(x, at) < x->quota_cut[x->in->regions[x->region_of[at]].client])) {
                        plan_append(x, at, KVT_TIER_VRAM, &r, p);
                        p->promote_chunks++;
                        p->prefetch_chunks += (x->flags[at] & (PLAN_PREFETCH | PLAN_WINDOW)) == PLAN_PREFETCH;
                }
        }
}

static int plan_check(const struct policy_params *pp, const struct policy_input *in, size_t *ret_n) {
        uint64_t n = 0;

        if ((unsigned)pp->kind >= _POLICY_KIND_MAX || pp->heat_half_life_ticks == 0)
                return -EINVAL;
        if (in->n_regions && !in->regions)
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

static void ctx_free(struct plan_ctx *x) {
        free(x->start);
        free(x->flags);
        free(x->rank);
        free(x->region_of);
        free(x->held);
        free(x->quota_cut);
        free(x->bucket);
        free(x->cand);
        free(x->hist);
}

static int ctx_init(struct plan_ctx *x) {
        x->start = malloc((x->in->n_regions + 1) * sizeof(*x->start));
        x->flags = malloc(x->n * sizeof(*x->flags));
        x->rank = malloc(x->n * sizeof(*x->rank));
        x->bucket = malloc(x->n * sizeof(*x->bucket));
        x->cand = malloc(x->n * sizeof(*x->cand));
        x->hist = calloc(4 * HIST_N, sizeof(*x->hist));
        if (!x->start || !x->flags || !x->rank || !x->bucket || !x->cand || !x->hist) {
                ctx_free(x);
                return -ENOMEM;
        }
        x->start[0] = 0;
        for (size_t r = 0; r < x->in->n_regions; r++)
                x->start[r + 1] = x->start[r] + x->in->regions[r].n_chunks;
        return 0;
}

int plan_ref(const struct policy_params *pp, const struct policy_input *in, struct policy_plan *ret) {
        struct plan_ctx x = {.pp = pp, .in = in};
        struct selection s = {0};
        int r;

        *ret = (struct policy_plan){0};
        r = plan_check(pp, in, &x.n);
        if (r < 0 || x.n == 0)
                return r;
        r = ctx_init(&x);
        if (r < 0)
                return r;
        plan_decay_init(&x);
        plan_rank(&x);
        plan_map(&x);
        r = plan_quota(&x);
        if (r < 0) {
                ctx_free(&x);
                return r;
        }
        plan_hist_all(&x);
        plan_select(&x, &s);
        r = plan_quota_room(&x, &s);
        if (r < 0) {
                ctx_free(&x);
                return r;
        }
        if (s.n_evict + s.n_promote > 0) {
                ret->moves = calloc(s.n_evict + s.n_promote, sizeof(*ret->moves));
                if (!ret->moves) {
                        ctx_free(&x);
                        return -ENOMEM;
                }
        }
        plan_emit(&x, &s, ret);
        ret->evict_chunks = s.n_evict;
        ctx_free(&x);
        return 0;
}
