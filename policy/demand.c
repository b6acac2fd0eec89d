/* SPDX-License-Identifier: MIT */
/*
 * The demand policy's two pieces outside the planner (policy.h): the thrash
 * guard, which adapts how long a use protects a chunk, and the re-arm
 * sampler, which picks the mapped host chunks whose next use should be seen.
 */
#include "config.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "policy.h"
#include "plan-ctx.h"
#include "siblings.h"

void policy_prober_init(struct policy_prober *pr) {
        *pr = (struct policy_prober){.interval = 1};
}

/* Probes resolved before the interval is judged, and the shares of them
 * back that double it (more) or halve it (less), in quarters. */
#define PROBER_JUDGE   16u
#define PROBER_BACK_HI 3u
#define PROBER_BACK_LO 1u

bool policy_prober_tick(struct policy_prober *pr, uint32_t now, uint64_t back, uint64_t expired) {
        pr->back += (uint32_t)(back < UINT32_MAX - pr->back ? back : 0);
        pr->expired += (uint32_t)(expired < UINT32_MAX - pr->expired ? expired : 0);
        if (pr->back + pr->expired >= PROBER_JUDGE) {
                uint32_t n = pr->back + pr->expired;

                if (pr->back * 4 >= n * PROBER_BACK_HI && pr->interval < POLICY_PROBE_INTERVAL_MAX)
                        pr->interval *= 2;
                else if (pr->back * 4 <= n * PROBER_BACK_LO && pr->interval > 1)
                        pr->interval /= 2;
                pr->back = pr->expired = 0;
        }
        return pr->interval <= 1 || now % pr->interval == 0;
}

uint32_t policy_rearm_share(uint32_t share, uint64_t held_chunks, uint32_t probe_cohorts) {
        if (held_chunks == 0 || probe_cohorts == 0)
                return share;
        return share / POLICY_REARM_HELD_DIV + (share % POLICY_REARM_HELD_DIV != 0);
}

void policy_probe_timing_note(struct policy_probe_timing *t, uint32_t delay_ticks) {
        t->delay[t->next] = delay_ticks;
        t->next = (t->next + 1) % POLICY_PROBE_RETURNS;
        if (t->n < POLICY_PROBE_RETURNS)
                t->n++;
}

void policy_probe_late(struct policy_probe_timing *t, const struct policy_chunk *c, uint32_t now,
                       uint32_t protect_min_ticks) {
        if ((c->flags & POLICY_CHUNK_COLD) && c->tier == POLICY_TIER_VRAM && c->pending == POLICY_TIER_NONE &&
            c->last_move && now - c->last_move <= 2 * protect_min_ticks)
                policy_probe_timing_note(t, now - c->last_move);
}

static int cmp_u32(const void *a, const void *b) {
        uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

        return (x > y) - (x < y);
}

uint32_t policy_probe_window(const struct policy_probe_timing *t, uint32_t min_ticks, uint32_t max_ticks) {
        uint32_t d[POLICY_PROBE_RETURNS];
        uint64_t w;

        min_ticks = min_ticks ? min_ticks : 1;
        max_ticks = max_ticks > min_ticks ? max_ticks : min_ticks;
        if (t->n < POLICY_PROBE_RETURNS_KNOWN)
                return max_ticks;
        memcpy(d, t->delay, t->n * sizeof(*d));
        qsort(d, t->n, sizeof(*d), cmp_u32);
        w = (uint64_t)d[(t->n * 9 + 9) / 10 - 1] * POLICY_PROBE_WINDOW_FACTOR;
        return w < min_ticks ? min_ticks : w > max_ticks ? max_ticks : (uint32_t)w;
}

void policy_guard_init(struct policy_guard *g, uint32_t min_ticks) {
        min_ticks = min_ticks ? min_ticks : 1;
        *g = (struct policy_guard){.protect_ticks = min_ticks, .window_left = min_ticks};
}

uint32_t policy_guard_tick(struct policy_guard *g, uint32_t min_ticks, uint32_t max_ticks, uint64_t evicted,
                           uint64_t refaulted) {
        uint64_t p = g->protect_ticks;

        min_ticks = min_ticks ? min_ticks : 1;
        max_ticks = max_ticks > min_ticks ? max_ticks : min_ticks;
        g->evicted += evicted;
        g->refaulted += refaulted;
        if (g->window_left > 1) {
                g->window_left--;
                return g->protect_ticks;
        }
        /* A window of min_ticks is over.  More than one eviction in eight came
         * back (two at the least): protect twice as long.  Evictions that
         * stayed out (one in 32 back at most): a quarter less.  No evictions:
         * nothing learnt, nothing changes. */
        if (g->refaulted * 8 > g->evicted + 8)
                p *= 2;
        else if (g->evicted && g->refaulted * 32 <= g->evicted)
                p -= p / 4;
        p = p < min_ticks ? min_ticks : p > max_ticks ? max_ticks : p;
        g->protect_ticks = (uint32_t)p;
        g->evicted = g->refaulted = 0;
        g->window_left = min_ticks;
        return g->protect_ticks;
}

/* Whether chunk c is host memory a re-arm may unmap: mapped by the GPU, or
 * left unverified by a mapped eviction. */
static inline bool rearmable(const struct policy_chunk *c) {
        return c->tier == POLICY_TIER_HOST && ((c->flags & POLICY_CHUNK_MAPPED) || policy_chunk_unverified(c));
}

/* Whether chunk c may be re-armed now: rearmable, and neither used nor
 * moved lately. */
static bool rearm_candidate(const struct policy_chunk *c, uint32_t now, uint32_t stale_ticks) {
        return rearmable(c) && c->pending == POLICY_TIER_NONE &&
               !(c->flags & POLICY_CHUNK_PINNED) && now >= c->last_use && now - c->last_use >= stale_ticks &&
               now >= c->last_move && now - c->last_move >= stale_ticks; /* not one that just moved */
}

/* Whether chunk c is in VRAM and free to be evicted. */
static bool vram_movable(const struct policy_chunk *c) {
        return c->tier == POLICY_TIER_VRAM && c->pending == POLICY_TIER_NONE &&
               !(c->flags & (POLICY_CHUNK_PINNED | POLICY_CHUNK_HOT));
}

/* Whether the siblings at an offset (siblings.h) already tell its use:
 * enough of them in use, or armed to show it.  Sampling its chunk there
 * would teach nothing they do not: its driver time goes to offsets where
 * nothing is known. */
static bool siblings_tell(const struct sibling_count *k) {
        return k && (k->used >= SIBLINGS_EVIDENCE || k->armed >= SIBLINGS_EVIDENCE);
}

/* Whether chunk c may be probed now: in VRAM, movable, no probe out,
 * nothing seen of it (its last use, or its arrival there or last probe)
 * for probe_ticks, and its siblings (sib: their counts at its offset, or
 * NULL) not telling. */
static bool probe_candidate(const struct policy_chunk *c, const struct sibling_count *sib, uint32_t now,
                            uint32_t probe_ticks) {
        uint32_t seen = c->last_move > c->last_use ? c->last_move : c->last_use;

        return vram_movable(c) && !(c->flags & (POLICY_CHUNK_COLD | POLICY_CHUNK_PROBE)) && now >= seen &&
               now - seen >= probe_ticks && !siblings_tell(sib);
}

/* The cohort that starts at chunk i of reg: the chunks from i on that came
 * into VRAM with it (same last_move), at most POLICY_COHORT_CHUNKS, up to
 * one whose siblings tell (sib: the region's counts, or NULL): one order
 * probes them, each on its own. */
static uint32_t cohort_len(const struct policy_region *reg, const struct sibling_count *sib, uint32_t i) {
        uint32_t n = 1;

        while (n < POLICY_COHORT_CHUNKS && i + n < reg->n_chunks && vram_movable(&reg->chunks[i + n]) &&
               !(reg->chunks[i + n].flags & (POLICY_CHUNK_COLD | POLICY_CHUNK_PROBE)) &&
               reg->chunks[i + n].last_move == reg->chunks[i].last_move && !(sib && siblings_tell(&sib[i + n])))
                n++;
        return n;
}

/* Appends chunks [i, i + n) of region r to the plan's moves as a re-arm (a
 * move to the host tier), extending the last one where contiguous. */
static int sample_append(struct policy_plan *p, size_t *cap, uint32_t r, uint32_t i, uint32_t n) {
        struct policy_move *last = p->n_moves ? &p->moves[p->n_moves - 1] : NULL;

        if (last && last->tier == POLICY_TIER_HOST && last->region == r && last->first_chunk + last->n_chunks == i &&
            last->n_chunks + n <= POLICY_RUN_CAP_DEFAULT) {
                last->n_chunks += n;
                return 0;
        }
        if (p->n_moves == *cap) {
                size_t m = *cap ? *cap * 2 : 16;
                struct policy_move *a = realloc(p->moves, m * sizeof(*a));

                if (!a)
                        return -ENOMEM;
                p->moves = a;
                *cap = m;
        }
        p->moves[p->n_moves++] =
                (struct policy_move){.region = r, .first_chunk = i, .n_chunks = n, .tier = POLICY_TIER_HOST, .host_node = -1};
        return 0;
}

/* What each client may still be given this tick (policy_sample_params'
 * client_*_max less its samples in flight; no probes while its prober sits
 * the tick out); NULL arrays: no such limit. */
struct client_room {
        uint32_t *rearm, *probe;
};

/* What a limit of max (0: none) leaves beside in_flight. */
static uint32_t room_left(uint32_t max, uint32_t in_flight) {
        return max == 0 ? UINT32_MAX : in_flight >= max ? 0 : max - in_flight;
}

/* Sets up room for in's clients.  Returns 0 or -ENOMEM. */
static int client_room_init(struct client_room *room, const struct policy_input *in,
                            const struct policy_sample_params *sp) {
        bool off = false;

        *room = (struct client_room){0};
        for (size_t k = 0; in->clients && k < in->n_clients; k++)
                off |= in->clients[k].probes_off;
        if (!in->clients || in->n_clients == 0 || (sp->client_rearm_max == 0 && sp->client_probe_max == 0 && !off))
                return 0;
        room->rearm = calloc(2 * in->n_clients, sizeof(*room->rearm));
        if (!room->rearm)
                return -ENOMEM;
        room->probe = room->rearm + in->n_clients;
        for (size_t k = 0; k < in->n_clients; k++) {
                room->rearm[k] = room_left(sp->client_rearm_max, in->clients[k].sampling_chunks);
                room->probe[k] = in->clients[k].probes_off ? 0
                                                           : room_left(sp->client_probe_max,
                                                                       in->clients[k].probing_cohorts);
        }
        return 0;
}

/* The room of region reg's client: a pointer to its count, or NULL (none kept). */
static uint32_t *client_room_of(uint32_t *counts, const struct policy_input *in, const struct policy_region *reg) {
        return counts && reg->client < in->n_clients ? &counts[reg->client] : NULL;
}

/* Whether a room (client_room_of()) lets one more sample go. */
static bool room_open(const uint32_t *room) {
        return !room || *room > 0;
}

/* Whether some client of in has room in counts (room.rearm or .probe;
 * NULL: no limits). */
static bool room_any(const uint32_t *counts, const struct policy_input *in) {
        for (size_t k = 0; counts && k < in->n_clients; k++)
                if (counts[k] > 0)
                        return true;
        return !counts;
}

/* What a lap looks for: re-arms, probes, expired probes. */
struct lap_want {
        bool rearm, probe, expired;
};

/* What a lap of w still wants: each kind while its share is not taken. */
static struct lap_want lap_left(const struct policy_sample *ret, const struct policy_sample_params *sp,
                                struct lap_want w) {
        return (struct lap_want){
                .rearm = w.rearm && ret->n_rearmed < sp->rearm_max,
                .probe = w.probe && ret->n_probes < sp->probe_max && ret->n_probes < POLICY_PROBES_MAX,
                .expired = w.expired};
}

/* Whether a lap of w still looks: its share of re-arms or probes not taken. */
static bool lap_wanting(const struct policy_sample *ret, const struct policy_sample_params *sp,
                        struct lap_want w) {
        struct lap_want l = lap_left(ret, sp, w);

        return l.rearm || l.probe;
}

/* Whether chunk c may yield what w wants now: an expired probe (one is
 * out), a re-arm (host memory mapped, or left by a mapped eviction), a
 * probe (in VRAM).  A quick test that most chunks of a lap fail, before
 * sample_one()'s. */
static inline bool lap_maybe(const struct policy_chunk *c, struct lap_want w) {
        return (w.expired && (c->flags & POLICY_CHUNK_PROBE)) ||
               (w.rearm && rearmable(c)) ||
               (w.probe && c->tier == POLICY_TIER_VRAM);
}

/* What chunk i of region r yields of what w wants now (the lap's wants
 * where the tick's share, the client's room and the priority leave room):
 * 0 (nothing taken; an expired probe is noted, not taken), or the chunks
 * it took. */
static int sample_one(const struct policy_input *in, const struct policy_sample_params *sp,
                      const struct plan_siblings *sibs, const struct client_room *room, struct lap_want w,
                      uint32_t r, uint32_t i, struct policy_sample *ret, size_t *cap) {
        const struct policy_region *reg = &in->regions[r];
        const struct policy_chunk *c = &reg->chunks[i];
        const struct sibling_count *sib = sibs->of_region ? sibs->of_region[r] : NULL;
        uint32_t *rearm_room = client_room_of(room->rearm, in, reg), *probe_room = client_room_of(room->probe, in, reg);

        if (w.expired && ret->n_expired < POLICY_PROBES_MAX && policy_probe_unanswered(c, in->now, sp->probe_window)) {
                ret->expired[ret->n_expired++] = (struct policy_probe){.region = r, .chunk = i, .first = i, .n = 1};
                return 0;
        }
        if (w.rearm && rearm_candidate(c, in->now, sp->stale_ticks) &&
            (policy_chunk_unverified(c) || !(sib && siblings_tell(&sib[i])))) {
                ret->n_rearmed++;
                if (rearm_room)
                        (*rearm_room)--;
                return sample_append(&ret->plan, cap, r, i, 1) < 0 ? -ENOMEM : 1;
        }
        if (w.probe && probe_candidate(c, sib ? &sib[i] : NULL, in->now, sp->probe_ticks)) {
                uint32_t n = cohort_len(reg, sib, i);

                ret->probes[ret->n_probes++] = (struct policy_probe){.region = r, .chunk = i, .first = i, .n = n};
                if (probe_room)
                        (*probe_room)--;
                return (int)n;
        }
        return 0;
}

/* One lap at most from flat chunk *at over the regions of priority prio
 * (those of others passed at once; a probe lap's prio at most
 * sp->probe_priority_max), for what w wants, until its share is
 * taken or POLICY_LAP_CHUNKS of prio's chunks are looked at; *at where it
 * stopped: where it started, after a whole lap, except that a probe lap
 * goes on past the last cohort it took.  A cohort that answers its probe
 * is a candidate again within probe_ticks, sooner than the prober's next
 * tick, so probes from a cursor that stays put fall on the same cohorts
 * tick after tick; a re-armed chunk waits stale_ticks since its use, and
 * the re-arms of a lap that stays put move on by themselves.  Returns 0 or
 * -ENOMEM. */
static int sample_lap(const struct policy_input *in, const struct policy_sample_params *sp,
                      const struct plan_siblings *sibs, const struct client_room *room, struct lap_want w,
                      size_t total, uint32_t prio, size_t *at, struct policy_sample *ret, size_t *cap) {
        size_t start = 0, r = 0, looked = 0, seen = 0, after = SIZE_MAX;
        bool rooms = room->rearm != NULL;

        while (start + in->regions[r].n_chunks <= *at)
                start += in->regions[r++].n_chunks;
        while (seen < total && looked < POLICY_LAP_CHUNKS && lap_wanting(ret, sp, w)) {
                const struct policy_region *reg = &in->regions[r];
                struct lap_want now = lap_left(ret, sp, w);
                bool mine = region_priority(in, reg) == prio;
                size_t step = 0;
                int k = 0;

                if (rooms) {
                        /* a client with no room left (its prober sitting the
                         * tick out, or its samples in flight) has its chunks
                         * passed in runs, not looked at one by one */
                        now.rearm = now.rearm && room_open(client_room_of(room->rearm, in, reg));
                        now.probe = now.probe && room_open(client_room_of(room->probe, in, reg));
                }
                if (!mine) /* another pass's region */
                        step = reg->n_chunks - (*at - start);
                step = step < total - seen ? step : total - seen;
                /* the run of chunks from here that cannot yield, passed at once */
                while (*at - start + step < reg->n_chunks && seen + step < total &&
                       looked + step < POLICY_LAP_CHUNKS &&
                       !lap_maybe(&reg->chunks[*at - start + step], now))
                        step++;
                if (step == 0) {
                        k = sample_one(in, sp, sibs, room, now, (uint32_t)r, (uint32_t)(*at - start), ret, cap);
                        if (k < 0)
                                return k;
                        step = k > 0 ? (size_t)k : 1;
                }
                /* a cohort is probed once: the lap goes on after it */
                seen += step;
                looked += mine ? step : 0;
                *at += step;
                if (*at == total)
                        *at = start = r = 0;
                while (*at == start + in->regions[r].n_chunks) /* on, past regions of no chunks */
                        start += in->regions[r++].n_chunks;
                if (k > 0)
                        after = *at;
        }
        if (w.probe && seen >= total && after != SIZE_MAX)
                *at = after;
        return 0;
}

int policy_sample(const struct policy_input *in, const struct policy_sample_params *sp,
                  struct policy_sample_cursor *cursor, struct policy_sample *ret) {
        /* The re-arms' lap, which notes the expired probes, then the
         * probes' lap (noting them where no re-arms are wanted). */
        const struct lap_want wants[2] = {{.rearm = true, .expired = true},
                                          {.probe = true, .expired = sp->rearm_max == 0}};
        uint64_t *cursors[2] = {&cursor->rearm, &cursor->probe};
        size_t total = 0, cap = 0;
        bool present[POLICY_PRIORITY_MAX + 1] = {false};
        struct plan_siblings own = {0};
        const struct plan_siblings *sibs = sp->siblings ? sp->siblings : &own;
        struct client_room room;
        int err = 0;

        *ret = (struct policy_sample){0};
        for (size_t k = 0; k < in->n_regions; k++) {
                total += in->regions[k].n_chunks;
                present[region_priority(in, &in->regions[k])] = true;
        }
        if (total == 0 || (sp->rearm_max == 0 && sp->probe_max == 0))
                return 0;
        if ((err = client_room_init(&room, in, sp)) < 0)
                return err;
        if (!sp->siblings &&
            (err = siblings_build(&own, in, in->protect_ticks, plan_threads(sp->threads, in, total))) < 0) {
                free(room.rearm);
                return err;
        }
        /* Each lap at most once from its cursor for each priority its
         * regions have, the highest first: the plan serves demands by
         * priority, and the samples that find them go first to those it
         * would serve (a client outranked, its demands held back while
         * another holds VRAM, would otherwise take the tick's share from
         * one that is not).  The cursor goes on from where the last
         * priority's lap left it. */
        for (int l = 0; l < 2 && err == 0; l++) {
                size_t at = (size_t)(*cursors[l] % total);

                if (wants[l].probe && !room_any(room.probe, in))
                        continue; /* no client may probe: a lap would find nothing */

                for (int p = POLICY_PRIORITY_MAX; p >= 0 && err == 0 && lap_wanting(ret, sp, wants[l]); p--) {
                        if (!present[p] || (wants[l].probe && (uint32_t)p > sp->probe_priority_max))
                                continue;
                        at = (size_t)(*cursors[l] % total);
                        err = sample_lap(in, sp, sibs, &room, wants[l], total, (uint32_t)p, &at, ret, &cap);
                }
                *cursors[l] = at;
        }
        if (err < 0) {
                policy_plan_clear(&ret->plan);
                *ret = (struct policy_sample){0};
        }
        siblings_free(&own);
        free(room.rearm);
        return err;
}
