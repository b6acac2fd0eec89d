/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"

#define MIN(a, b) ((a) < (b) ? (a) : (b))

/* A fault the daemon learns of at tick due (the shim's CUPTI flush). */
struct signal {
        uint32_t due, region, chunk;
};

/* What a flight carries out: a move, or a sample (one order of re-arms or
 * a probe cohort) the shim's evictors make when no move waits for them. */
enum flight_kind { FLIGHT_MOVE, FLIGHT_PROBE, FLIGHT_REARM };

/* A move in flight on one direction of the link, or a sample in the
 * evictors' queue; each lane's flights finish in order. */
struct flight {
        uint64_t done_ns;
        uint32_t region, first, n, tier;
        enum flight_kind kind;
};

/* The longest a sample waits behind moves: then the shim's evictors take
 * it first (evictors.c's SAMPLE_WAIT_MAX_NS). */
#define SAMPLE_WAIT_MAX_NS 500000000ull

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
        struct policy_chunk **chunks; /* per declared region, the daemon's view; NULL before R and after F */
        uint8_t **mapped;             /* per declared region and chunk: the GPU maps it (no fault on a touch) */
        uint8_t **advised;            /* per declared region and chunk: its advice made, at its capture in
                                       * VRAM or its first eviction (the shim keeps it: later evictions
                                       * advise nothing) */
        uint32_t *last_active;        /* per declared region: tick of its last access */
        uint32_t *launches;           /* per declared region: accesses (launches) in the tick under way */
        struct policy_launch_avg *launch_avg; /* per declared region: its launches a tick */
        uint64_t *born_ns;            /* per declared region: when it was captured (its R) */
        struct signal *signals;       /* faults on their way to the daemon, oldest first */
        size_t sig_head, n_sig, cap_sig;
        struct policy_guard guard;
        struct policy_prober prober;
        struct policy_probe_timing probe_timing; /* as the daemon's per GPU */
        uint64_t back_tick, expired_tick; /* probes resolved in the tick under way, for the prober */
        uint32_t protect_ticks;       /* the guard's choice for the tick under way */
        uint64_t evicted_tick, refaulted_tick; /* seen in the tick under way, for the guard */
        struct policy_sample_cursor sample_cursor;
        uint32_t rearming, probing;   /* samples ordered and not yet made: re-armed chunks, probe cohorts */
        struct policy_region *views;  /* scratch: live regions, oldest first */
        uint32_t *view_region;        /* view index -> declaration index */
        struct lane promote, evict;
        struct lane sample;           /* re-arms and probes, in the evictors' time the moves leave */
        uint64_t budget_chunks, charged;
        uint64_t evicting; /* charged chunks with an eviction in flight */
        uint64_t resident_freed; /* VRAM chunks dropped by F (their bytes came in, never went out) */
        uint64_t started_vram;   /* chunks of regions that started in VRAM */
        uint64_t stale;          /* the last plan's stale VRAM chunks: what captures may displace */
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

/* A probe that expired (as registry_probe_expired()): found by
 * policy_sample(), its chunk still in VRAM and cold; or evicted unanswered,
 * only counted. */
static void probe_expired(struct sim *s, uint32_t reg, uint32_t i) {
        struct policy_chunk *c = &s->chunks[reg][i];

        if (!(c->flags & POLICY_CHUNK_PROBE))
                return;
        c->flags &= (uint8_t)~POLICY_PROBE_BITS;
        if (c->tier == POLICY_TIER_VRAM && c->pending == POLICY_TIER_NONE)
                c->flags |= POLICY_CHUNK_COLD;
        /* its page stays out, unmapped (s->mapped 2): the next use faults, and
         * the daemon clears COLD (registry_chunk_touch) */
        s->res->probes_expired++;
        s->expired_tick++;
}

static void sample_land(struct sim *s, const struct flight *f);

static void flight_land(struct sim *s, const struct flight *f) {
        struct policy_chunk *c = s->chunks[f->region];

        if (f->kind != FLIGHT_MOVE) {
                sample_land(s, f);
                return;
        }
        if (!c)
                return; /* region freed while in flight: F uncharged it */
        for (uint32_t i = f->first; i < f->first + f->n; i++) {
                bool was = c[i].tier == POLICY_TIER_VRAM || c[i].pending == POLICY_TIER_VRAM;

                s->evicting -= c[i].tier == POLICY_TIER_VRAM && f->tier != POLICY_TIER_VRAM;
                s->evicted_tick += c[i].tier == POLICY_TIER_VRAM && f->tier != POLICY_TIER_VRAM;
                /* As the registry books it: moved pages are unmapped where the
                 * GPU's next touch is seen, a mapped eviction's sample page too
                 * (the rest is mapped), so a host chunk's next use faults, one
                 * small fault, with no re-arm.  (On the GPU a touch while the
                 * eviction moves maps that page; the model has none then, but
                 * books the eviction as the registry does, unverified, so
                 * that the sampler's one re-arm of it costs what it costs.) */
                c[i].tier = (uint8_t)(f->tier == POLICY_TIER_HOST_MAPPED ? POLICY_TIER_HOST : f->tier);
                c[i].pending = 0;
                c[i].last_move = tick_of(s, f->done_ns);
                c[i].flags &= (uint8_t)~(POLICY_CHUNK_MAPPED | POLICY_CHUNK_REARMED | POLICY_CHUNK_OWN_MAP);
                if (f->tier == POLICY_TIER_HOST_MAPPED)
                        c[i].flags |= POLICY_CHUNK_OWN_MAP;
                if (f->tier == POLICY_TIER_VRAM)
                        c[i].flags &= (uint8_t)~(POLICY_PROBE_BITS | POLICY_CHUNK_COLD);
                else /* evicted unanswered: expired (as the registry), no longer in VRAM */
                        probe_expired(s, f->region, i);
                s->mapped[f->region][i] = 0;
                if (f->tier == POLICY_TIER_VRAM)
                        s->res->bytes_to_vram += TRACE_CHUNK_BYTES;
                else {
                        s->res->bytes_to_host += TRACE_CHUNK_BYTES;
                        s->charged -= was;
                }
        }
}

static void lanes_land(struct sim *s, uint64_t until_ns) {
        struct lane *lanes[] = {&s->promote, &s->evict, &s->sample};

        for (size_t k = 0; k < sizeof(lanes) / sizeof(lanes[0]); k++) {
                struct lane *l = lanes[k];

                while (l->n && l->q[l->head].done_ns <= until_ns) {
                        flight_land(s, &l->q[l->head]);
                        l->head++, l->n--;
                }
        }
}

static int issue(struct sim *s, const struct policy_move *m, uint64_t at_ns) {
        uint32_t reg = s->view_region[m->region];
        struct lane *l = m->tier == POLICY_TIER_VRAM ? &s->promote : &s->evict;
        uint64_t start = at_ns > l->free_ns ? at_ns : l->free_ns;
        uint64_t bytes = (uint64_t)m->n_chunks * TRACE_CHUNK_BYTES;
        struct flight f = {.region = reg, .first = m->first_chunk, .n = m->n_chunks, .tier = m->tier};
        uint64_t advise = 0;

        for (uint32_t i = m->first_chunk; l == &s->evict && i < m->first_chunk + m->n_chunks; i++) {
                advise += !s->advised[reg][i];
                s->advised[reg][i] = 1;
        }
        s->res->advised += advise;
        f.done_ns = start + (uint64_t)((double)bytes / l->bytes_per_ns) + advise * s->cfg->evict_chunk_ns;
        l->free_ns = f.done_ns;
        for (uint32_t i = m->first_chunk; i < m->first_chunk + m->n_chunks; i++) {
                s->evicting += s->chunks[reg][i].tier == POLICY_TIER_VRAM && m->tier != POLICY_TIER_VRAM;
                s->chunks[reg][i].pending = (uint8_t)m->tier;
                s->charged += m->tier == POLICY_TIER_VRAM;
        }
        if (s->charged > s->res->peak_charged_bytes / TRACE_CHUNK_BYTES)
                s->res->peak_charged_bytes = s->charged * TRACE_CHUNK_BYTES;
        s->res->moves++;
        return lane_push(l, &f);
}

static uint64_t rate_chunks(struct sim *s) {
        uint64_t per_tick, cap;

        if (s->cfg->rate_bytes_per_s == 0)
                return UINT64_MAX;
        per_tick = (uint64_t)((double)s->cfg->rate_bytes_per_s * (double)s->cfg->tick_ns / 1e9);
        cap = per_tick > TRACE_CHUNK_BYTES ? per_tick : TRACE_CHUNK_BYTES;
        s->credit_bytes = s->credit_bytes + per_tick < cap ? s->credit_bytes + per_tick : cap;
        return s->credit_bytes / TRACE_CHUNK_BYTES;
}

static int signal_push(struct sim *s, uint32_t region, uint32_t chunk, uint32_t due) {
        if (s->sig_head + s->n_sig == s->cap_sig) {
                if (s->sig_head > 0) {
                        memmove(s->signals, s->signals + s->sig_head, s->n_sig * sizeof(*s->signals));
                        s->sig_head = 0;
                } else {
                        size_t cap = s->cap_sig ? s->cap_sig * 2 : 1024;
                        struct signal *q = realloc(s->signals, cap * sizeof(*q));

                        if (!q)
                                return -ENOMEM;
                        s->signals = q;
                        s->cap_sig = cap;
                }
        }
        s->signals[s->sig_head + s->n_sig++] = (struct signal){.due = due, .region = region, .chunk = chunk};
        return 0;
}

/* A fault on a probe's page (as the registry's probe_back()): within the
 * shortest protection of the probe, the chunk is in use.  Returns whether
 * the chunk was a probe. */
static bool probe_back(struct sim *s, uint32_t reg, uint32_t i) {
        struct policy_chunk *c = &s->chunks[reg][i];

        if (!(c->flags & POLICY_CHUNK_PROBE))
                return false;
        c->flags &= (uint8_t)~POLICY_PROBE_BITS;
        policy_probe_timing_note(&s->probe_timing, s->now - c->last_move);
        if (s->now - c->last_move > s->pp->protect_min_ticks)
                return true;
        s->res->probes_back++;
        s->back_tick++;
        return true;
}

/* What the daemon does with a fault it has learnt of: a use now, the chunk
 * mapped, and a refault if it was evicted lately (within the shortest
 * protection: back before a protection could have run out). */
static void signal_apply(struct sim *s, uint32_t reg, uint32_t i) {
        struct policy_chunk *c = &s->chunks[reg][i];

        /* a use within a mapped eviction's quiet window, taken for its own
         * mapping as the registry takes it: booked mapped, no use */
        if (policy_own_mapping(c, s->now, policy_evict_quiet_ticks(s->cfg->tick_ns / 1000))) {
                c->flags |= POLICY_CHUNK_MAPPED;
                s->res->own_maps++;
                return;
        }
        if (s->pp->kind == POLICY_DEMAND)
                policy_chunk_use(c, s->now, s->pp->heat_half_life_ticks);
        else
                policy_chunk_touch(c, s->now, 1, s->pp->heat_half_life_ticks);
        policy_probe_late(&s->probe_timing, c, s->now, s->pp->protect_min_ticks); /* as the registry */
        c->flags &= (uint8_t)~POLICY_CHUNK_COLD;
        if (c->tier == POLICY_TIER_VRAM) {
                (void)probe_back(s, reg, i);
                return;
        }
        if (c->tier != POLICY_TIER_HOST)
                return;
        c->flags |= POLICY_CHUNK_MAPPED;
        if (policy_refault(c, s->now, s->pp->protect_min_ticks)) {
                s->refaulted_tick++;
                s->res->refaults++;
        }
}

/* Applies the signals due by now. */
static void signals_deliver(struct sim *s) {
        while (s->n_sig && s->signals[s->sig_head].due <= s->now) {
                const struct signal *g = &s->signals[s->sig_head];

                if (s->chunks[g->region])
                        signal_apply(s, g->region, g->chunk);
                s->sig_head++, s->n_sig--;
        }
}

/* Orders a sample in the evictors' queue, each chunk per_chunk_ns of an
 * evictor's time.  The shim's evictors take moves first: a sample starts
 * after the samples before it and the evictions already ordered, or once it
 * has waited SAMPLE_WAIT_MAX_NS, and evictions ordered later do not wait
 * for it.  Returns 0 or -ENOMEM. */
static int sample_order(struct sim *s, uint32_t reg, uint32_t first, uint32_t n, enum flight_kind kind,
                        uint64_t per_chunk_ns, uint64_t at_ns) {
        struct lane *l = &s->sample;
        uint64_t start = at_ns > s->evict.free_ns ? at_ns : s->evict.free_ns;
        struct flight f = {.region = reg, .first = first, .n = n, .kind = kind};

        if (start > at_ns + SAMPLE_WAIT_MAX_NS)
                start = at_ns + SAMPLE_WAIT_MAX_NS;
        if (start < l->free_ns)
                start = l->free_ns;
        f.done_ns = start + n * per_chunk_ns;
        l->free_ns = f.done_ns;
        s->res->rearm_ns += n * per_chunk_ns;
        return lane_push(l, &f);
}

/* Whether the daemon can order probe cohort p: every chunk in VRAM and
 * movable, else registry_probe_new() refuses the whole order. */
static bool probe_orderable(const struct sim *s, uint32_t reg, const struct policy_probe *p) {
        for (uint32_t i = p->first; i < p->first + p->n; i++)
                if (s->chunks[reg][i].tier != POLICY_TIER_VRAM || s->chunks[reg][i].pending != POLICY_TIER_NONE)
                        return false;
        return true;
}

/* Orders a tick's sample, as the daemon's planner sends it: probes first,
 * then re-arms, each in the shim's queue until an evictor makes it
 * (sample_land()).  Meanwhile its chunks are booked pending (not movable)
 * and count against the tick's share in flight. */
static int sample_apply(struct sim *s, const struct policy_sample *sm, uint64_t at_ns) {
        int r = 0;

        for (size_t k = 0; k < sm->n_probes && r == 0; k++) {
                const struct policy_probe *p = &sm->probes[k];
                uint32_t reg = s->view_region[p->region];

                if (!probe_orderable(s, reg, p))
                        continue;
                for (uint32_t i = p->first; i < p->first + p->n; i++) {
                        struct policy_chunk *c = &s->chunks[reg][i];

                        /* registry_probe_mark(): not probed again within
                         * protect_min of its order */
                        c->flags = (uint8_t)((c->flags & ~POLICY_PROBE_BITS) | POLICY_CHUNK_PROBE);
                        c->last_move = s->now;
                        c->pending = POLICY_TIER_VRAM;
                }
                s->res->probes += p->n;
                s->probing++;
                r = sample_order(s, reg, p->first, p->n, FLIGHT_PROBE, s->cfg->probe_ns, at_ns);
        }
        for (size_t m = 0; m < sm->plan.n_moves && r == 0; m++) {
                const struct policy_move *mv = &sm->plan.moves[m];
                uint32_t reg = s->view_region[mv->region];

                for (uint32_t i = mv->first_chunk; i < mv->first_chunk + mv->n_chunks; i++)
                        s->chunks[reg][i].pending = POLICY_TIER_HOST;
                s->res->rearmed += mv->n_chunks;
                s->rearming += mv->n_chunks;
                r = sample_order(s, reg, mv->first_chunk, mv->n_chunks, FLIGHT_REARM, s->cfg->rearm_ns, at_ns);
        }
        for (size_t k = 0; k < sm->n_expired; k++)
                probe_expired(s, s->view_region[sm->expired[k].region], sm->expired[k].chunk);
        return r;
}

/* A sample made (as the registry's order_apply()): a re-arm unmaps a page
 * of each host chunk; a probe sends a page of each chunk of its cohort out
 * (s->mapped 2: its next access faults).  Both are timed from their making:
 * a probe that queued had no time yet to be used.  A region freed
 * meanwhile: nothing. */
static void sample_land(struct sim *s, const struct flight *f) {
        struct policy_chunk *c = s->chunks[f->region];
        uint32_t made = tick_of(s, f->done_ns);

        if (f->kind == FLIGHT_PROBE)
                s->probing--;
        else
                s->rearming -= f->n;
        if (!c)
                return;
        for (uint32_t i = f->first; i < f->first + f->n; i++) {
                c[i].pending = POLICY_TIER_NONE;
                if (f->kind == FLIGHT_PROBE) {
                        /* the shim sends the page out whatever the daemon booked
                         * meanwhile; the chunk, pending, is still in VRAM */
                        s->mapped[f->region][i] = 2;
                        if (c[i].flags & POLICY_CHUNK_PROBE)
                                c[i].last_move = made;
                        continue;
                }
                if (c[i].tier != POLICY_TIER_HOST)
                        continue;
                /* timed from its making, as the registry times it; one
                 * that verifies a mapped eviction from the eviction, as
                 * there */
                if (!policy_chunk_unverified(&c[i]))
                        c[i].last_move = made;
                c[i].flags = (uint8_t)((c[i].flags & ~POLICY_CHUNK_MAPPED & ~POLICY_CHUNK_OWN_MAP) |
                                       POLICY_CHUNK_REARMED);
                s->mapped[f->region][i] = 0;
        }
}

/* The live regions as the policy sees them, oldest first. */
static void views_fill(struct sim *s, struct policy_input *in) {
        for (size_t reg = 0; reg < s->t->n_regions; reg++)
                if (s->chunks[reg]) {
                        s->views[in->n_regions] = (struct policy_region){.chunks = s->chunks[reg],
                                                                         .n_chunks = s->t->region_chunks[reg],
                                                                         .last_active = s->last_active[reg],
                                                                         .launch_rate = policy_launch_avg_rate(&s->launch_avg[reg])};
                        s->view_region[in->n_regions++] = (uint32_t)reg;
                }
}

/* One planning tick at time at_ns (the end of tick s->now). */
static int tick(struct sim *s, uint64_t at_ns) {
        struct policy_input in = {.regions = s->views, .now = s->now, .budget_chunks = s->budget_chunks};
        struct policy_plan plan;
        struct policy_sample sample;
        bool probe_now;
        int r;

        lanes_land(s, at_ns);
        signals_deliver(s);
        s->protect_ticks = policy_guard_tick(&s->guard, s->pp->protect_min_ticks, s->pp->protect_max_ticks,
                                             s->evicted_tick, s->refaulted_tick);
        s->evicted_tick = s->refaulted_tick = 0;
        probe_now = policy_prober_tick(&s->prober, s->now, s->back_tick, s->expired_tick);
        s->back_tick = s->expired_tick = 0;
        if (s->protect_ticks > s->res->protect_max)
                s->res->protect_max = s->protect_ticks;
        for (size_t reg = 0; reg < s->t->n_regions; reg++) {
                policy_launch_avg_tick(&s->launch_avg[reg], s->launches[reg]);
                s->launches[reg] = 0;
        }
        views_fill(s, &in);
        in.charged_chunks = s->charged;
        in.evicting_chunks = s->evicting;
        in.max_move_chunks = rate_chunks(s);
        in.protect_ticks = s->protect_ticks;
        if (s->pp->kind == POLICY_DEMAND && s->cfg->observe == SIM_OBSERVE_SIGNALS)
                in.probe_window = policy_probe_window(&s->probe_timing, POLICY_PROBE_WINDOW_MIN(s->pp->protect_min_ticks),
                                                      s->pp->protect_min_ticks);
        r = policy_plan(s->pp, &in, &plan);
        if (r < 0)
                return r;
        if (getenv("SIM_DEBUG") && s->now % 20 == 0)
                fprintf(stderr, "tick %u interval %u probes %llu/%llu/%llu protect %u charged %llu held %llu evict %llu promote %llu faults %llu refaults %llu hits %llu/%llu\n", s->now, s->prober.interval, (unsigned long long)s->res->probes, (unsigned long long)s->res->probes_back, (unsigned long long)s->res->probes_expired,
                        s->protect_ticks, (unsigned long long)s->charged, (unsigned long long)plan.held_chunks,
                        (unsigned long long)plan.evict_chunks, (unsigned long long)plan.promote_chunks,
                        (unsigned long long)s->res->faults, (unsigned long long)s->res->refaults,
                        (unsigned long long)s->res->hits, (unsigned long long)s->res->accesses);
        s->res->plans++;
        s->stale = plan.stale_chunks;
        if (plan.held_chunks > s->res->held_max)
                s->res->held_max = plan.held_chunks;
        for (size_t m = 0; m < plan.n_moves && r == 0; m++)
                r = issue(s, &plan.moves[m], at_ns);
        if (s->cfg->rate_bytes_per_s) {
                uint64_t used = (plan.evict_chunks + plan.promote_chunks) * TRACE_CHUNK_BYTES;
                s->credit_bytes -= used < s->credit_bytes ? used : s->credit_bytes;
        }
        if (r == 0 && s->cfg->observe == SIM_OBSERVE_SIGNALS) {
                /* probes only while demands wait for room and the prober
                 * says so, and re-arms yield to them then, as the daemon's
                 * planner; on the plan's sibling counts, as its.  The
                 * tick's share for all, and no more in flight than that of
                 * the one client: the daemon's cap of a client's samples
                 * in its shim's queue, a room that fills before the share
                 * where samples are still in flight (and the lap then
                 * goes round whole, as the daemon's does). */
                uint32_t window = in.probe_window;
                struct policy_sample_params sp = {.stale_ticks = s->pp->protect_min_ticks,
                                                  .probe_ticks = window / 2 ? window / 2 : 1,
                                                  .probe_window = window,
                                                  .rearm_max = policy_rearm_share(s->pp->sample_chunks,
                                                                                  plan.held_chunks,
                                                                                  s->pp->probe_cohorts),
                                                  .probe_max = plan.held_chunks && probe_now ? s->pp->probe_cohorts : 0,
                                                  .siblings = plan.siblings};
                struct policy_client client = {.quota_chunks = UINT64_MAX,
                                               .sampling_chunks = s->rearming,
                                               .probing_cohorts = s->probing};
                struct policy_input sin = in;

                sp.client_rearm_max = sp.rearm_max;
                sp.client_probe_max = s->pp->probe_cohorts;
                sin.clients = &client;
                sin.n_clients = 1;
                r = policy_sample(&sin, &sp, &s->sample_cursor, &sample);
                if (r == 0)
                        r = sample_apply(s, &sample, at_ns);
                policy_plan_clear(&sample.plan);
        }
        policy_plan_clear(&plan);
        return r < 0 ? r : 0;
}

static void on_free(struct sim *s, uint32_t reg) {
        struct policy_chunk *c = s->chunks[reg];

        for (uint32_t i = 0; i < s->t->region_chunks[reg]; i++) {
                s->charged -= c[i].tier == POLICY_TIER_VRAM || c[i].pending == POLICY_TIER_VRAM;
                s->evicting -= c[i].tier == POLICY_TIER_VRAM && c[i].pending && c[i].pending != POLICY_TIER_VRAM;
                s->resident_freed += c[i].tier == POLICY_TIER_VRAM;
        }
        free(c);
        free(s->mapped[reg]);
        free(s->advised[reg]);
        s->chunks[reg] = NULL;
        s->mapped[reg] = NULL;
        s->advised[reg] = NULL;
}

/* A GPU access to chunk i of region reg, of bytes: a hit in VRAM; else read
 * in place, after a fault where the GPU has no mapping of the chunk: the
 * only access the daemon sees (SIM_OBSERVE_SIGNALS), cfg->signal_delay_ns
 * later. */
static int access_chunk(struct sim *s, uint32_t reg, uint32_t i, uint32_t bytes, uint64_t at_ns, bool measured) {
        struct policy_chunk *c = &s->chunks[reg][i];
        uint64_t read_ns = (uint64_t)((double)bytes / s->cfg->mapped_gbps);
        uint64_t stall = 0;
        int r = 0;

        s->res->accesses += measured;
        s->res->zerocopy_ns += measured ? read_ns : 0;
        if (s->cfg->observe == SIM_OBSERVE_ALL) {
                policy_chunk_touch(c, s->now, 1, s->pp->heat_half_life_ticks);
                c->flags &= (uint8_t)~POLICY_CHUNK_COLD;
        }
        if (c->tier == POLICY_TIER_VRAM) {
                s->res->hits += measured;
                if (s->mapped[reg][i] != 2 || s->cfg->observe == SIM_OBSERVE_ALL)
                        return 0;
                /* a probe's page: one small fault, seen */
                s->mapped[reg][i] = 0;
                s->res->faults++;
                return signal_push(s, reg, i, tick_of(s, at_ns + s->cfg->signal_delay_ns));
        }
        stall = read_ns;
        if (!s->mapped[reg][i] && s->cfg->observe != SIM_OBSERVE_ALL) {
                s->res->faults++;
                stall += s->cfg->fault_ns;
                s->mapped[reg][i] = 1;
                if (at_ns + s->cfg->signal_delay_ns < s->born_ns[reg] + s->cfg->bind_delay_ns)
                        s->res->faults_lost++; /* mapped, and the daemon's view still unmapped */
                else
                        r = signal_push(s, reg, i, tick_of(s, at_ns + s->cfg->signal_delay_ns));
        }
        s->res->stall_ns += measured ? stall : 0;
        s->res->delay_ns += s->cfg->closed_loop ? stall : 0;
        return r;
}

/* Whether a record the trace times at time_ns is in the measured window. */
static bool measured(const struct sim_config *cfg, uint64_t time_ns) {
        return time_ns >= cfg->measure_from_ns && (cfg->measure_to_ns == 0 || time_ns < cfg->measure_to_ns);
}

/* When a record the trace times at time_ns comes: later by the stalls so
 * far where the engine waits for them (closed_loop). */
static uint64_t event_ns(const struct sim *s, uint64_t time_ns) {
        return time_ns + s->res->delay_ns;
}

/* The access record ev, coming at at_ns (event_ns()). */
static int on_access(struct sim *s, const struct trace_event *ev, uint64_t at_ns) {
        bool in = measured(s->cfg, ev->time_ns);
        int r = 0;

        s->last_active[ev->region] = s->now; /* a kernel was launched on it */
        s->launches[ev->region] += !s->cfg->launches_off;
        for (uint32_t i = ev->first_chunk; i < ev->first_chunk + ev->n_chunks && r == 0; i++)
                r = access_chunk(s, ev->region, i, ev->bytes ? ev->bytes : TRACE_CHUNK_BYTES, at_ns, in);
        return r;
}

/* A new region: in VRAM while the charge stays within the budget, or within
 * budget + margin where the last plan saw as many stale chunks in VRAM to
 * make room (the daemon's grant), else in host memory, unmapped.
 * SIM_OBSERVE_ALL keeps the old start: host-mapped, for every policy to
 * promote.  It comes at at_ns (event_ns()). */
static int on_region(struct sim *s, const struct trace_event *ev, uint64_t at_ns) {
        struct policy_chunk *c = calloc(ev->n_chunks, sizeof(*c));
        uint8_t *mapped = calloc(ev->n_chunks, 1), *advised = calloc(ev->n_chunks, 1);
        uint64_t margin = s->cfg->margin_bytes / TRACE_CHUNK_BYTES;
        uint64_t limit = s->budget_chunks + (margin < s->stale ? margin : s->stale);
        bool vram = s->cfg->observe == SIM_OBSERVE_SIGNALS && s->charged + ev->n_chunks <= limit;

        if (!c || !mapped || !advised) {
                free(c);
                free(mapped);
                free(advised);
                return -ENOMEM;
        }
        if (vram) {
                /* advised at its capture, as its first eviction would leave it; the
                 * capture's own time (the engine's allocation) is not modelled */
                memset(advised, 1, ev->n_chunks);
                s->started_vram += ev->n_chunks;
                s->stale -= s->charged + ev->n_chunks > s->budget_chunks
                                    ? MIN(s->stale, s->charged + ev->n_chunks - s->budget_chunks)
                                    : 0;
        }
        for (uint32_t i = 0; i < ev->n_chunks; i++)
                c[i] = (struct policy_chunk){
                        .last_use = s->now,
                        .last_move = vram ? s->now : 0,
                        .tier = vram                                        ? POLICY_TIER_VRAM
                                : s->cfg->observe == SIM_OBSERVE_SIGNALS ? POLICY_TIER_HOST
                                                                          : POLICY_TIER_HOST_MAPPED};
        if (vram) {
                s->charged += ev->n_chunks;
                if (s->charged > s->res->peak_charged_bytes / TRACE_CHUNK_BYTES)
                        s->res->peak_charged_bytes = s->charged * TRACE_CHUNK_BYTES;
        }
        s->chunks[ev->region] = c;
        s->mapped[ev->region] = mapped;
        s->advised[ev->region] = advised;
        s->last_active[ev->region] = 0;
        s->launches[ev->region] = 0;
        s->launch_avg[ev->region] = (struct policy_launch_avg){0};
        s->born_ns[ev->region] = at_ns;
        return 0;
}

static int on_event(struct sim *s, const struct trace_event *ev) {
        uint64_t at = event_ns(s, ev->time_ns);
        int r;

        while (s->next_tick_ns <= at) {
                r = tick(s, s->next_tick_ns);
                if (r < 0)
                        return r;
                s->next_tick_ns += s->cfg->tick_ns;
                s->now++;
        }
        lanes_land(s, at);
        switch (ev->op) {
        case TRACE_REGION:
                return on_region(s, ev, at);
        case TRACE_ACCESS:
                return on_access(s, ev, at);
        case TRACE_FREE:
                on_free(s, ev->region);
                break;
        }
        return 0;
}

/* How far the charge may go over the budget: captures within the margin,
 * promotions within the overlap. */
static uint64_t over_budget_bytes(const struct sim *s) {
        uint64_t overlap = (uint64_t)s->pp->overlap_chunks * TRACE_CHUNK_BYTES;

        return s->cfg->margin_bytes > overlap ? s->cfg->margin_bytes : overlap;
}

/* Bytes in minus bytes out must be what is resident now plus what F dropped. */
static bool sim_consistent(struct sim *s) {
        uint64_t resident = 0;

        lanes_land(s, UINT64_MAX);
        for (size_t reg = 0; reg < s->t->n_regions; reg++)
                if (s->chunks[reg])
                        for (uint32_t i = 0; i < s->t->region_chunks[reg]; i++)
                                resident += s->chunks[reg][i].tier == POLICY_TIER_VRAM;
        if (getenv("SIM_DEBUG"))
                fprintf(stderr, "consistency: in %llu started %llu out %llu resident %llu freed %llu charged %llu evicting %llu peak %llu\n",
                        (unsigned long long)s->res->bytes_to_vram / TRACE_CHUNK_BYTES, (unsigned long long)s->started_vram,
                        (unsigned long long)s->res->bytes_to_host / TRACE_CHUNK_BYTES, (unsigned long long)resident,
                        (unsigned long long)s->resident_freed, (unsigned long long)s->charged,
                        (unsigned long long)s->evicting, (unsigned long long)s->res->peak_charged_bytes / TRACE_CHUNK_BYTES);
        return s->res->bytes_to_vram + s->started_vram * TRACE_CHUNK_BYTES - s->res->bytes_to_host ==
                       (resident + s->resident_freed) * TRACE_CHUNK_BYTES &&
               s->charged == resident && s->evicting == 0 && s->rearming == 0 && s->probing == 0 &&
               s->res->peak_charged_bytes <= s->cfg->budget_bytes + over_budget_bytes(s);
}

static void sim_free(struct sim *s) {
        if (s->chunks)
                for (size_t reg = 0; reg < s->t->n_regions; reg++)
                        free(s->chunks[reg]);
        if (s->mapped)
                for (size_t reg = 0; reg < s->t->n_regions; reg++)
                        free(s->mapped[reg]);
        if (s->advised)
                for (size_t reg = 0; reg < s->t->n_regions; reg++)
                        free(s->advised[reg]);
        free(s->chunks);
        free(s->mapped);
        free(s->advised);
        free(s->signals);
        free(s->last_active);
        free(s->launches);
        free(s->launch_avg);
        free(s->born_ns);
        free(s->views);
        free(s->view_region);
        free(s->promote.q);
        free(s->evict.q);
        free(s->sample.q);
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
        s.budget_chunks = cfg->budget_bytes / TRACE_CHUNK_BYTES;
        s.next_tick_ns = cfg->tick_ns;
        s.promote.bytes_per_ns = min2(cfg->promote_gbps, cfg->link_gbps);
        s.evict.bytes_per_ns = min2(cfg->evict_gbps, cfg->link_gbps);
        s.chunks = calloc(t->n_regions ? t->n_regions : 1, sizeof(*s.chunks));
        s.last_active = calloc(t->n_regions ? t->n_regions : 1, sizeof(*s.last_active));
        s.launches = calloc(t->n_regions ? t->n_regions : 1, sizeof(*s.launches));
        s.launch_avg = calloc(t->n_regions ? t->n_regions : 1, sizeof(*s.launch_avg));
        s.born_ns = calloc(t->n_regions ? t->n_regions : 1, sizeof(*s.born_ns));
        s.mapped = calloc(t->n_regions ? t->n_regions : 1, sizeof(*s.mapped));
        s.advised = calloc(t->n_regions ? t->n_regions : 1, sizeof(*s.advised));
        policy_guard_init(&s.guard, pp->protect_min_ticks);
        s.protect_ticks = s.guard.protect_ticks;
        policy_prober_init(&s.prober);
        s.views = calloc(t->n_regions ? t->n_regions : 1, sizeof(*s.views));
        s.view_region = calloc(t->n_regions ? t->n_regions : 1, sizeof(*s.view_region));
        if (!s.chunks || !s.mapped || !s.advised || !s.last_active || !s.launches || !s.launch_avg || !s.born_ns || !s.views || !s.view_region)
                r = -ENOMEM;
        if (t->n_events) {
                uint64_t first = t->events[0].time_ns, last = t->events[t->n_events - 1].time_ns;

                if (cfg->measure_from_ns > first)
                        first = cfg->measure_from_ns;
                if (cfg->measure_to_ns && cfg->measure_to_ns < last)
                        last = cfg->measure_to_ns;
                ret->span_ns = last > first ? last - first : 0;
        }
        for (size_t e = 0; e < t->n_events && r == 0; e++)
                r = on_event(&s, &t->events[e]);
        if (r == 0)
                ret->consistent = sim_consistent(&s);
        sim_free(&s);
        return r;
}
