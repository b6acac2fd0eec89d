/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "policy.h"
#include "predict.h"
#include "protocol.h"
#include "select.h"

/* Rank layout below the priority bits (29..31; pinned is all ones). */
#define RANK_PRIORITY_SHIFT 29
#define RANK_PREFETCH       (1u << 26) /* needed within a few ticks: above the window */
#define RANK_WINDOW         (1u << 25)
#define RANK_CLASS_SHIFT    21
#define RECENCY_MAX         ((1u << 21) - 1) /* ticks: 29 h at 50 ms; older is all alike */

struct plan_ctx {
        const struct policy_params *pp;
        const struct policy_input *in;
        size_t n;            /* chunks in all regions */
        size_t *start;       /* flat index of each region's chunk 0; n_regions + 1 entries */
        uint8_t *flags;      /* PLAN_* per chunk */
        uint64_t *keys;      /* rank << 32 | flat index, per chunk */
        uint64_t *scratch;   /* n entries for selections */
};

struct selection {
        uint64_t want_min;    /* keys >= this are wanted in VRAM */
        uint64_t evict_max;   /* eviction candidates with key <= this are evicted */
        uint64_t promote_min; /* promotion candidates with key >= this are promoted */
        uint64_t n_evict, n_promote;
};

static bool chunk_in_vram(const struct policy_chunk *c) {
        return c->tier == KVT_TIER_VRAM || c->pending == KVT_TIER_VRAM;
}

static uint32_t chunk_score(const struct plan_ctx *x, const struct policy_chunk *c, uint8_t f) {
        const struct policy_params *pp = x->pp;
        uint32_t now = x->in->now, age = now > c->last_use ? now - c->last_use : 0;
        uint32_t score = RECENCY_MAX - (age < RECENCY_MAX ? age : RECENCY_MAX);

        if (pp->kind == POLICY_HEAT || pp->kind == POLICY_HYBRID) {
                unsigned cls = policy_heat_class(policy_heat_at(c, now, pp->heat_half_life_ticks));

                /* A resident counts one class hotter: displacing it takes a clearly hotter chunk. */
                if (chunk_in_vram(c) && cls < 15)
                        cls++;
                score |= (uint32_t)cls << RANK_CLASS_SHIFT;
        }
        if (f & PLAN_PREFETCH)
                score |= RANK_PREFETCH;
        if (f & PLAN_WINDOW)
                score |= RANK_WINDOW;
        return score;
}

static uint32_t chunk_rank(const struct plan_ctx *x, const struct policy_region *reg, size_t i, uint8_t f) {
        const struct policy_chunk *c = &reg->chunks[i];
        uint32_t prio = 0;

        if (c->flags & POLICY_CHUNK_PINNED)
                return UINT32_MAX;
        if (x->in->clients && reg->client < x->in->n_clients)
                prio = x->in->clients[reg->client].priority;
        if (prio > POLICY_PRIORITY_MAX)
                prio = POLICY_PRIORITY_MAX;
        return prio << RANK_PRIORITY_SHIFT | chunk_score(x, c, f);
}

static bool chunk_frozen(const struct plan_ctx *x, const struct policy_chunk *c) {
        uint32_t h = x->pp->hysteresis_ticks;

        return h && c->last_move && x->in->now - c->last_move < h && !(c->flags & POLICY_CHUNK_PINNED);
}

/* Window and prefetch marks, then ranks and hysteresis. */
static void plan_rank(struct plan_ctx *x) {
        const struct policy_params *pp = x->pp;
        const struct policy_input *in = x->in;
        bool window = pp->kind == POLICY_WINDOW || pp->kind == POLICY_HYBRID;
        /* window: every region; hybrid: only regions in use within a half-life. */
        uint32_t active = pp->kind == POLICY_WINDOW ? UINT32_MAX : pp->heat_half_life_ticks;

        for (size_t r = 0; r < in->n_regions; r++) {
                const struct policy_region *reg = &in->regions[r];
                uint8_t *f = x->flags + x->start[r];

                if (window)
                        predict_window(reg, in->now, pp->window_chunks, active, f);
                predict_stream(reg, in->now, pp->prefetch_depth, f);
                for (size_t i = 0; i < reg->n_chunks; i++) {
                        size_t at = x->start[r] + i;

                        x->keys[at] = (uint64_t)chunk_rank(x, reg, i, f[i]) << 32 | at;
                        if (chunk_frozen(x, &reg->chunks[i]))
                                x->flags[at] |= PLAN_FROZEN;
                }
        }
}

/* Marks a client's chunks beyond its quota (lowest ranks first) excluded. */
static void plan_quota_client(struct plan_ctx *x, size_t client) {
        const struct policy_input *in = x->in;
        uint64_t quota = in->clients[client].quota_chunks, cut;
        size_t m = 0;

        for (size_t r = 0; r < in->n_regions; r++)
                if (in->regions[r].client == client)
                        for (size_t i = x->start[r]; i < x->start[r + 1]; i++)
                                x->scratch[m++] = x->keys[i];
        if (m <= quota)
                return;
        cut = quota == 0 ? UINT64_MAX : select_nth(x->scratch, m, m - quota);
        for (size_t r = 0; r < in->n_regions; r++)
                if (in->regions[r].client == client)
                        for (size_t i = x->start[r]; i < x->start[r + 1]; i++)
                                if (x->keys[i] < cut) {
                                        x->flags[i] |= PLAN_EXCLUDED;
                                        x->keys[i] = i; /* rank 0: below every in-quota chunk */
                                }
}

static void plan_quota(struct plan_ctx *x) {
        if (!x->in->clients)
                return;
        for (size_t c = 0; c < x->in->n_clients; c++)
                if (x->in->clients[c].quota_chunks != UINT64_MAX)
                        plan_quota_client(x, c);
}

static bool is_evict_candidate(const struct policy_chunk *c, uint8_t f, uint64_t key, uint64_t want_min) {
        return (key < want_min || (f & PLAN_EXCLUDED)) && c->tier == KVT_TIER_VRAM && !c->pending &&
               !(c->flags & POLICY_CHUNK_PINNED) && !(f & PLAN_FROZEN);
}

static bool is_promote_candidate(const struct policy_chunk *c, uint8_t f, uint64_t key, uint64_t want_min) {
        return key >= want_min && !(f & (PLAN_EXCLUDED | PLAN_FROZEN)) && c->tier != KVT_TIER_VRAM &&
               !c->pending;
}

/* Loops over every chunk c, region by region, with its flat index at. */
#define FOR_EACH_CHUNK(x, c, at)                                                                   \
        for (size_t r_ = 0, at = 0; r_ < (x)->in->n_regions; r_++)                                 \
                for (const struct policy_chunk *c = (x)->in->regions[r_].chunks,                   \
                                               *end_ = c + (x)->in->regions[r_].n_chunks;          \
                     c < end_; c++, at++)

/* Picks thresholds: the wanted set, then the lowest-ranked evictions and the
 * highest-ranked promotions that the rate limit and the free budget allow. */
static void plan_select(struct plan_ctx *x, struct selection *s) {
        const struct policy_input *in = x->in;
        size_t n = x->n, n_ev = 0, n_pr = 0;
        uint64_t budget = in->budget_chunks < n ? in->budget_chunks : n;
        uint64_t room = in->budget_chunks > in->charged_chunks ? in->budget_chunks - in->charged_chunks : 0;
        uint64_t rate = in->max_move_chunks;
        uint64_t *k = x->scratch;

        memcpy(k, x->keys, n * sizeof(*k));
        if (budget == 0)
                s->want_min = UINT64_MAX; /* no key reaches it: positions < UINT32_MAX */
        else
                s->want_min = budget == n ? 0 : select_nth(k, n, n - budget);

        /* Eviction candidates fill k from the front, promotion candidates from the back. */
        FOR_EACH_CHUNK(x, c, at) {
                if (is_evict_candidate(c, x->flags[at], x->keys[at], s->want_min))
                        k[n_ev++] = x->keys[at];
                else if (is_promote_candidate(c, x->flags[at], x->keys[at], s->want_min))
                        k[n - ++n_pr] = x->keys[at];
        }

        s->n_evict = n_ev < rate ? n_ev : rate;
        s->evict_max = s->n_evict == 0      ? 0
                       : s->n_evict == n_ev ? UINT64_MAX
                                            : select_nth(k, n_ev, s->n_evict - 1);
        rate -= s->n_evict;
        s->n_promote = n_pr < rate ? n_pr : rate;
        if (s->n_promote > room)
                s->n_promote = room;
        s->promote_min = s->n_promote == 0      ? UINT64_MAX
                         : s->n_promote == n_pr ? 0
                                                : select_nth(k + n - n_pr, n_pr, n_pr - s->n_promote);
}

static void plan_mark(struct plan_ctx *x, const struct selection *s, struct policy_plan *p) {
        FOR_EACH_CHUNK(x, c, at) {
                uint8_t *f = &x->flags[at];
                uint64_t key = x->keys[at];

                if (s->n_evict && key <= s->evict_max && is_evict_candidate(c, *f, key, s->want_min))
                        *f |= PLAN_EVICT;
                else if (s->n_promote && key >= s->promote_min &&
                         is_promote_candidate(c, *f, key, s->want_min)) {
                        *f |= PLAN_PROMOTE;
                        p->prefetch_chunks += (*f & (PLAN_PREFETCH | PLAN_WINDOW)) == PLAN_PREFETCH;
                }
        }
}

/* Appends maximal contiguous runs (split at run_cap) of chunks marked 'what'. */
static void plan_emit(const struct plan_ctx *x, uint8_t what, uint32_t tier, struct policy_plan *p) {
        uint32_t cap = x->pp->run_cap ? x->pp->run_cap : POLICY_RUN_CAP_DEFAULT;

        for (size_t r = 0; r < x->in->n_regions; r++) {
                struct policy_move *run = NULL;

                for (size_t i = 0; i < x->in->regions[r].n_chunks; i++) {
                        if ((x->flags[x->start[r] + i] & PLAN_ACTION) != what) {
                                run = NULL;
                                continue;
                        }
                        if (run && run->n_chunks < cap) {
                                run->n_chunks++;
                                continue;
                        }
                        run = &p->moves[p->n_moves++];
                        *run = (struct policy_move){
                                .region = (uint32_t)r, .first_chunk = (uint32_t)i, .n_chunks = 1, .tier = tier};
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
        free(x->keys);
        free(x->scratch);
}

static int ctx_init(struct plan_ctx *x) {
        x->start = malloc((x->in->n_regions + 1) * sizeof(*x->start));
        x->flags = calloc(x->n, 1);
        x->keys = malloc(x->n * sizeof(*x->keys));
        x->scratch = malloc(x->n * sizeof(*x->scratch));
        if (!x->start || !x->flags || !x->keys || !x->scratch) {
                ctx_free(x);
                return -ENOMEM;
        }
        x->start[0] = 0;
        for (size_t r = 0; r < x->in->n_regions; r++)
                x->start[r + 1] = x->start[r] + x->in->regions[r].n_chunks;
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
        r = ctx_init(&x);
        if (r < 0)
                return r;
        plan_rank(&x);
        plan_quota(&x);
        plan_select(&x, &s);
        plan_mark(&x, &s, ret);
        if (s.n_evict + s.n_promote > 0) {
                ret->moves = calloc(s.n_evict + s.n_promote, sizeof(*ret->moves));
                if (!ret->moves) {
                        ctx_free(&x);
                        return -ENOMEM;
                }
        }
        plan_emit(&x, PLAN_EVICT, KVT_TIER_HOST_MAPPED, ret);
        plan_emit(&x, PLAN_PROMOTE, KVT_TIER_VRAM, ret);
        ret->evict_chunks = s.n_evict;
        ret->promote_chunks = s.n_promote;
        ctx_free(&x);
        return 0;
}

void policy_plan_clear(struct policy_plan *p) {
        if (!p)
                return;
        free(p->moves);
        *p = (struct policy_plan){0};
}
