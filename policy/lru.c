/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "lru.h"
#include "protocol.h"

enum { ACT_NONE = 0, ACT_EVICT = 1, ACT_PROMOTE = 2 };

/* Ranking key: pinned above everything, then last_use, then position in the
 * (region, chunk)-sorted input.  Keys are distinct because positions are. */
static uint64_t chunk_key(const struct lru_input *in, size_t i) {
        const struct lru_chunk_view *c = &in->chunks[i];
        uint32_t rank = c->pinned ? UINT32_MAX : (c->last_use < UINT32_MAX ? c->last_use : UINT32_MAX - 1);

        return (uint64_t)rank << 32 | (uint64_t)i;
}

static void swap_u64(uint64_t *a, uint64_t *b) {
        uint64_t t = *a;
        *a = *b;
        *b = t;
}

static uint64_t median3(uint64_t a, uint64_t b, uint64_t c) {
        if (a > b)
                swap_u64(&a, &b);
        if (b > c)
                swap_u64(&b, &c);
        return a > b ? a : b;
}

/* Returns the element that would sit at position t (0-based, ascending) if
 * a[0..n) were sorted; permutes a.  Expected O(n) (Hoare partition around a
 * median of three, which also handles the common already-sorted input). */
static uint64_t select_nth(uint64_t *a, size_t n, size_t t) {
        ptrdiff_t lo = 0, hi = (ptrdiff_t)n - 1, k = (ptrdiff_t)t;

        while (lo < hi) {
                uint64_t pivot = median3(a[lo], a[lo + (hi - lo) / 2], a[hi]);
                ptrdiff_t i = lo, j = hi;

                while (i <= j) {
                        while (a[i] < pivot)
                                i++;
                        while (a[j] > pivot)
                                j--;
                        if (i <= j)
                                swap_u64(&a[i++], &a[j--]);
                }
                if (k <= j)
                        hi = j;
                else if (k >= i)
                        lo = i;
                else
                        return a[k];
        }
        return a[k];
}

static int input_check(const struct lru_input *in) {
        if (in->n_chunks >= UINT32_MAX)
                return -EINVAL;
        for (size_t i = 1; i < in->n_chunks; i++) {
                const struct lru_chunk_view *p = &in->chunks[i - 1], *c = &in->chunks[i];

                if (c->region < p->region || (c->region == p->region && c->chunk <= p->chunk))
                        return -EINVAL;
        }
        return 0;
}

struct selection {
        uint64_t want_min;    /* keys >= this are wanted in VRAM */
        uint64_t evict_max;   /* eviction candidates with key <= this are evicted */
        uint64_t promote_min; /* promotion candidates with key >= this are promoted */
        uint64_t n_evict, n_promote;
};

static bool is_evict_candidate(const struct lru_chunk_view *c, uint64_t key, uint64_t want_min) {
        return key < want_min && c->tier == KVT_TIER_VRAM && !c->pending && !c->pinned;
}

static bool is_promote_candidate(const struct lru_chunk_view *c, uint64_t key, uint64_t want_min) {
        return key >= want_min && c->tier != KVT_TIER_VRAM && !c->pending;
}

/* Picks thresholds: the wanted set, then the coldest evictions and the
 * hottest promotions that the rate limit and the free budget allow.  keys
 * is scratch of n_chunks entries. */
static void select_moves(const struct lru_input *in, uint64_t *keys, struct selection *s) {
        size_t n = in->n_chunks, n_ev = 0, n_pr = 0;
        uint64_t budget = in->budget_chunks < n ? in->budget_chunks : n;
        uint64_t room = in->budget_chunks > in->charged_chunks ? in->budget_chunks - in->charged_chunks : 0;
        uint64_t rate = in->max_move_chunks;

        for (size_t i = 0; i < n; i++)
                keys[i] = chunk_key(in, i);
        if (budget == 0)
                s->want_min = UINT64_MAX; /* no key reaches it: positions < UINT32_MAX */
        else
                s->want_min = budget == n ? 0 : select_nth(keys, n, n - budget);

        /* Eviction candidates fill keys from the front, promotion candidates from the back. */
        for (size_t i = 0; i < n; i++) {
                uint64_t key = chunk_key(in, i);

                if (is_evict_candidate(&in->chunks[i], key, s->want_min))
                        keys[n_ev++] = key;
                else if (is_promote_candidate(&in->chunks[i], key, s->want_min))
                        keys[n - ++n_pr] = key;
        }

        s->n_evict = n_ev < rate ? n_ev : rate;
        s->evict_max = s->n_evict == 0      ? 0
                       : s->n_evict == n_ev ? UINT64_MAX
                                            : select_nth(keys, n_ev, s->n_evict - 1);
        rate -= s->n_evict;
        s->n_promote = n_pr < rate ? n_pr : rate;
        if (s->n_promote > room)
                s->n_promote = room;
        s->promote_min = s->n_promote == 0      ? UINT64_MAX
                         : s->n_promote == n_pr ? 0
                                                : select_nth(keys + n - n_pr, n_pr, n_pr - s->n_promote);
}

static void mark_moves(const struct lru_input *in, const struct selection *s, uint8_t *act) {
        for (size_t i = 0; i < in->n_chunks; i++) {
                uint64_t key = chunk_key(in, i);

                if (s->n_evict && is_evict_candidate(&in->chunks[i], key, s->want_min) &&
                    key <= s->evict_max)
                        act[i] = ACT_EVICT;
                else if (s->n_promote && is_promote_candidate(&in->chunks[i], key, s->want_min) &&
                         key >= s->promote_min)
                        act[i] = ACT_PROMOTE;
        }
}

/* Appends maximal contiguous runs (split at run_cap) of chunks marked 'what'. */
static void emit_runs(const struct lru_input *in, const uint8_t *act, uint8_t what, uint32_t tier,
                      struct lru_plan *p) {
        uint32_t cap = in->run_cap ? in->run_cap : LRU_RUN_CAP_DEFAULT;
        struct lru_move *run = NULL;

        for (size_t i = 0; i < in->n_chunks; i++) {
                const struct lru_chunk_view *c = &in->chunks[i];

                if (act[i] != what) {
                        run = NULL;
                        continue;
                }
                if (run && run->region == c->region && run->first_chunk + run->n_chunks == c->chunk &&
                    run->n_chunks < cap) {
                        run->n_chunks++;
                        continue;
                }
                run = &p->moves[p->n_moves++];
                *run = (struct lru_move){
                        .region = c->region, .first_chunk = c->chunk, .n_chunks = 1, .tier = tier};
        }
}

int lru_plan(const struct lru_input *in, struct lru_plan *ret) {
        struct selection s = {0};
        uint64_t *keys;
        uint8_t *act;
        int r;

        *ret = (struct lru_plan){0};
        if (in->n_chunks == 0)
                return 0;
        r = input_check(in);
        if (r < 0)
                return r;

        keys = malloc(in->n_chunks * sizeof(*keys));
        act = calloc(in->n_chunks, 1);
        if (!keys || !act) {
                free(keys);
                free(act);
                return -ENOMEM;
        }
        select_moves(in, keys, &s);
        free(keys);
        mark_moves(in, &s, act);

        if (s.n_evict + s.n_promote > 0) {
                ret->moves = calloc(s.n_evict + s.n_promote, sizeof(*ret->moves));
                if (!ret->moves) {
                        free(act);
                        return -ENOMEM;
                }
        }
        emit_runs(in, act, ACT_EVICT, KVT_TIER_HOST_MAPPED, ret);
        emit_runs(in, act, ACT_PROMOTE, KVT_TIER_VRAM, ret);
        ret->evict_chunks = s.n_evict;
        ret->promote_chunks = s.n_promote;
        free(act);
        return 0;
}

void lru_plan_clear(struct lru_plan *p) {
        if (!p)
                return;
        free(p->moves);
        *p = (struct lru_plan){0};
}
