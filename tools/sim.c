/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "protocol.h"
#include "sim.h"

/* A move in flight on one direction of the link; they finish in order. */
struct flight {
        uint64_t done_ns;
        uint32_t region, first, n, tier;
};

struct lane {
        struct flight *q;
        size_t head, n, cap;
        uint64_t free_ns;  /* when the lane is idle again */
        double bytes_per_ns; /* GB/s is bytes per ns */
};

struct sim {
        const struct trace *t;
        const struct sim_config *cfg;
        const struct policy_params *pp;
        struct sim_result *res;
        struct policy_chunk **chunks; /* per declared region; NULL before R and after F */
        struct policy_region *views;  /* scratch: live regions, oldest first */
        uint32_t *view_region;        /* view index -> declaration index */
        struct lane promote, evict;
        uint64_t budget_chunks, charged;
        uint64_t evicting; /* charged chunks with an eviction in flight */
        uint64_t resident_freed; /* VRAM chunks dropped by F (their bytes came in, never went out) */
        uint64_t credit_bytes;
        uint64_t next_tick_ns;
        uint32_t now; /* tick number, from 1 */
};

static uint32_t tick_of(const struct sim *s, uint64_t ns) {
        uint64_t t = ns / s->cfg->tick_ns + 1;

        return t < UINT32_MAX ? (uint32_t)t : UINT32_MAX - 1;
}

static int lane_push(struct lane *l, const struct flight *f) {
        if (l->head + l->n == l->cap) {
                if (l->head > 0) {
                        memmove(l->q, l->q + l->head, l->n * sizeof(*l->q));
                        l->head = 0;
                } else {
                        size_t cap = l->cap ? l->cap * 2 : 256;
                        struct flight *q = realloc(l->q, cap * sizeof(*q));

                        if (!q)
                                return -ENOMEM;
                        l->q = q;
                        l->cap = cap;
                }
        }
        l->q[l->head + l->n++] = *f;
        return 0;
}

static void flight_land(struct sim *s, const struct flight *f) {
        struct policy_chunk *c = s->chunks[f->region];

        if (!c)
                return; /* region freed while in flight: F uncharged it */
        for (uint32_t i = f->first; i < f->first + f->n; i++) {
                bool was = c[i].tier == KVT_TIER_VRAM || c[i].pending == KVT_TIER_VRAM;

                s->evicting -= c[i].tier == KVT_TIER_VRAM && f->tier != KVT_TIER_VRAM;
                c[i].tier = (uint8_t)f->tier;
                c[i].pending = 0;
                c[i].last_move = tick_of(s, f->done_ns);
                if (f->tier == KVT_TIER_VRAM)
                        s->res->bytes_to_vram += KVT_CHUNK_BYTES;
                else {
                        s->res->bytes_to_host += KVT_CHUNK_BYTES;
                        s->charged -= was;
                }
        }
}

static void lanes_land(struct sim *s, uint64_t until_ns) {
        struct lane *lanes[2] = {&s->promote, &s->evict};

        for (int k = 0; k < 2; k++) {
                struct lane *l = lanes[k];

                while (l->n && l->q[l->head].done_ns <= until_ns) {
                        flight_land(s, &l->q[l->head]);
                        l->head++, l->n--;
                }
        }
}

static int issue(struct sim *s, const struct policy_move *m, uint64_t at_ns) {
        uint32_t reg = s->view_region[m->region];
        struct lane *l = m->tier == KVT_TIER_VRAM ? &s->promote : &s->evict;
        uint64_t start = at_ns > l->free_ns ? at_ns : l->free_ns;
        uint64_t bytes = (uint64_t)m->n_chunks * KVT_CHUNK_BYTES;
        struct flight f = {.region = reg, .first = m->first_chunk, .n = m->n_chunks, .tier = m->tier};

        f.done_ns = start + (uint64_t)((double)bytes / l->bytes_per_ns);
        l->free_ns = f.done_ns;
        for (uint32_t i = m->first_chunk; i < m->first_chunk + m->n_chunks; i++) {
                s->evicting += s->chunks[reg][i].tier == KVT_TIER_VRAM && m->tier != KVT_TIER_VRAM;
                s->chunks[reg][i].pending = (uint8_t)m->tier;
                s->charged += m->tier == KVT_TIER_VRAM;
        }
        if (s->charged > s->res->peak_charged_bytes / KVT_CHUNK_BYTES)
                s->res->peak_charged_bytes = s->charged * KVT_CHUNK_BYTES;
        s->res->moves++;
        return lane_push(l, &f);
}

static uint64_t rate_chunks(struct sim *s) {
        uint64_t per_tick, cap;

        if (s->cfg->rate_bytes_per_s == 0)
                return UINT64_MAX;
        per_tick = (uint64_t)((double)s->cfg->rate_bytes_per_s * (double)s->cfg->tick_ns / 1e9);
        cap = per_tick > KVT_CHUNK_BYTES ? per_tick : KVT_CHUNK_BYTES;
        s->credit_bytes = s->credit_bytes + per_tick < cap ? s->credit_bytes + per_tick : cap;
        return s->credit_bytes / KVT_CHUNK_BYTES;
}

/* One planning tick at time at_ns (the end of tick s->now). */
static int tick(struct sim *s, uint64_t at_ns) {
        struct policy_input in = {.regions = s->views, .now = s->now, .budget_chunks = s->budget_chunks};
        struct policy_plan plan;
        int r;

        lanes_land(s, at_ns);
        for (size_t reg = 0; reg < s->t->n_regions; reg++)
                if (s->chunks[reg]) {
                        s->views[in.n_regions] = (struct policy_region){.chunks = s->chunks[reg],
                                                                        .n_chunks = s->t->region_chunks[reg]};
                        s->view_region[in.n_regions++] = (uint32_t)reg;
                }
        in.charged_chunks = s->charged;
        in.evicting_chunks = s->evicting;
        in.max_move_chunks = rate_chunks(s);
        r = policy_plan(s->pp, &in, &plan);
        if (r < 0)
                return r;
        s->res->plans++;
        for (size_t m = 0; m < plan.n_moves && r == 0; m++)
                r = issue(s, &plan.moves[m], at_ns);
        if (s->cfg->rate_bytes_per_s) {
                uint64_t used = (plan.evict_chunks + plan.promote_chunks) * KVT_CHUNK_BYTES;
                s->credit_bytes -= used < s->credit_bytes ? used : s->credit_bytes;
        }
        policy_plan_clear(&plan);
        return r;
}

static void on_free(struct sim *s, uint32_t reg) {
        struct policy_chunk *c = s->chunks[reg];

        for (uint32_t i = 0; i < s->t->region_chunks[reg]; i++) {
                s->charged -= c[i].tier == KVT_TIER_VRAM || c[i].pending == KVT_TIER_VRAM;
                s->evicting -= c[i].tier == KVT_TIER_VRAM && c[i].pending && c[i].pending != KVT_TIER_VRAM;
                s->resident_freed += c[i].tier == KVT_TIER_VRAM;
        }
        free(c);
        s->chunks[reg] = NULL;
}

static void on_access(struct sim *s, const struct trace_event *ev) {
        struct policy_chunk *c = s->chunks[ev->region];

        for (uint32_t i = ev->first_chunk; i < ev->first_chunk + ev->n_chunks; i++) {
                s->res->accesses++;
                if (c[i].tier == KVT_TIER_VRAM)
                        s->res->hits++;
                else
                        s->res->stall_ns += (uint64_t)((double)KVT_CHUNK_BYTES / s->cfg->mapped_gbps);
                policy_chunk_touch(&c[i], s->now, 1, s->pp->heat_half_life_ticks);
        }
}

static int on_event(struct sim *s, const struct trace_event *ev) {
        int r;

        while (s->next_tick_ns <= ev->time_ns) {
                r = tick(s, s->next_tick_ns);
                if (r < 0)
                        return r;
                s->next_tick_ns += s->cfg->tick_ns;
                s->now++;
        }
        lanes_land(s, ev->time_ns);
        switch (ev->op) {
        case TRACE_REGION: {
                struct policy_chunk *c = calloc(ev->n_chunks, sizeof(*c));

                if (!c)
                        return -ENOMEM;
                for (uint32_t i = 0; i < ev->n_chunks; i++)
                        c[i] = (struct policy_chunk){.last_use = s->now, .tier = KVT_TIER_HOST_MAPPED};
                s->chunks[ev->region] = c;
                break;
        }
        case TRACE_ACCESS:
                on_access(s, ev);
                break;
        case TRACE_FREE:
                on_free(s, ev->region);
                break;
        }
        return 0;
}

/* Bytes in minus bytes out must be what is resident now plus what F dropped. */
static bool sim_consistent(struct sim *s) {
        uint64_t resident = 0;

        lanes_land(s, UINT64_MAX);
        for (size_t reg = 0; reg < s->t->n_regions; reg++)
                if (s->chunks[reg])
                        for (uint32_t i = 0; i < s->t->region_chunks[reg]; i++)
                                resident += s->chunks[reg][i].tier == KVT_TIER_VRAM;
        return s->res->bytes_to_vram - s->res->bytes_to_host ==
                       (resident + s->resident_freed) * KVT_CHUNK_BYTES &&
               s->charged == resident && s->evicting == 0 &&
               s->res->peak_charged_bytes <= s->cfg->budget_bytes + (uint64_t)s->pp->overlap_chunks * KVT_CHUNK_BYTES;
}

static void sim_free(struct sim *s) {
        if (s->chunks)
                for (size_t reg = 0; reg < s->t->n_regions; reg++)
                        free(s->chunks[reg]);
        free(s->chunks);
        free(s->views);
        free(s->view_region);
        free(s->promote.q);
        free(s->evict.q);
}

static double min2(double a, double b) {
        return a < b ? a : b;
}

int sim_run_policy(const struct trace *t, const struct sim_config *cfg, const struct policy_params *pp,
                   struct sim_result *ret) {
        struct sim s = {.t = t, .cfg = cfg, .pp = pp, .res = ret, .now = 1};
        int r = 0;

        *ret = (struct sim_result){0};
        if (cfg->tick_ns == 0 || cfg->promote_gbps <= 0 || cfg->evict_gbps <= 0 || cfg->link_gbps <= 0 ||
            cfg->mapped_gbps <= 0)
                return -EINVAL;
        s.budget_chunks = cfg->budget_bytes / KVT_CHUNK_BYTES;
        s.next_tick_ns = cfg->tick_ns;
        s.promote.bytes_per_ns = min2(cfg->promote_gbps, cfg->link_gbps);
        s.evict.bytes_per_ns = min2(cfg->evict_gbps, cfg->link_gbps);
        s.chunks = calloc(t->n_regions ? t->n_regions : 1, sizeof(*s.chunks));
        s.views = calloc(t->n_regions ? t->n_regions : 1, sizeof(*s.views));
        s.view_region = calloc(t->n_regions ? t->n_regions : 1, sizeof(*s.view_region));
        if (!s.chunks || !s.views || !s.view_region)
                r = -ENOMEM;
        for (size_t e = 0; e < t->n_events && r == 0; e++)
                r = on_event(&s, &t->events[e]);
        if (r == 0)
                ret->consistent = sim_consistent(&s);
        sim_free(&s);
        return r;
}
