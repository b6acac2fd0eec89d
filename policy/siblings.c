/* SPDX-License-Identifier: MIT */
/* Sibling regions' counts (siblings.h). */
#include "config.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>

#include "siblings.h"

static int cmp_member(const void *a, const void *b) {
        const struct sibling_member *x = a, *y = b;

        if (x->client != y->client)
                return x->client < y->client ? -1 : 1;
        if (x->n_chunks != y->n_chunks)
                return x->n_chunks < y->n_chunks ? -1 : 1;
        return (x->region > y->region) - (x->region < y->region);
}

static uint8_t sat_inc(uint8_t v) {
        return (uint8_t)(v + (v < UINT8_MAX));
}

/* Adds the chunks of reg to its group's counts.  A chunk counts as armed
 * once its arm (the re-arm, or the move that brought it to the host: its
 * last_move) is older than window, time for a use to have shown. */
static void count_region(struct sibling_count *k, const struct policy_region *reg, uint32_t now,
                         uint32_t protect_ticks, uint32_t window) {
        for (uint32_t i = 0; i < reg->n_chunks; i++) {
                const struct policy_chunk *c = &reg->chunks[i];
                uint32_t age = c->last_use && now > c->last_use ? now - c->last_use : 0;
                bool used, armed;

                if (c->pending != POLICY_TIER_NONE || (c->flags & (POLICY_CHUNK_SPILLED | POLICY_CHUNK_PINNED)))
                        continue;
                if (c->tier == POLICY_TIER_VRAM)
                        used = c->last_use && age < protect_ticks && !(c->flags & POLICY_CHUNK_COLD);
                else
                        used = c->last_use && policy_demand_fresh_outside(c, age, protect_ticks);
                armed = !used && c->tier == POLICY_TIER_HOST && !(c->flags & POLICY_CHUNK_MAPPED) &&
                        now >= c->last_move && now - c->last_move > window;
                if (used)
                        k[i].used = sat_inc(k[i].used);
                if (armed)
                        k[i].armed = sat_inc(k[i].armed);
        }
}

/* Whether a group's offsets tell one chunk from another: in use at no
 * more than half of them.  Where most offsets are in use (a layout that
 * puts blocks of every sequence in every chunk, or a working set wider
 * than the group), each chunk is as likely in use as the next, and
 * inferring from siblings only moves chunks for chunks like them. */
static bool group_tells(const struct sibling_count *k, uint32_t n_chunks) {
        uint32_t used = 0;

        for (uint32_t i = 0; i < n_chunks; i++)
                used += k[i].used >= SIBLINGS_EVIDENCE;
        return used * 2 <= n_chunks;
}

int siblings_build(struct plan_siblings *s, const struct policy_input *in, uint32_t protect_ticks) {
        uint32_t window = in->probe_window ? in->probe_window : protect_ticks;
        size_t n = 0, total = 0;

        *s = (struct plan_siblings){0};
        if (in->n_regions < SIBLINGS_MIN_MEMBERS)
                return 0;
        s->of_region = calloc(in->n_regions, sizeof(*s->of_region));
        s->order = malloc(in->n_regions * sizeof(*s->order));
        if (!s->of_region || !s->order)
                goto nomem;
        for (size_t r = 0; r < in->n_regions; r++)
                if (in->regions[r].n_chunks >= SIBLINGS_MIN_CHUNKS)
                        s->order[n++] = (struct sibling_member){.client = in->regions[r].client,
                                                                .n_chunks = in->regions[r].n_chunks,
                                                                .region = (uint32_t)r};
        qsort(s->order, n, sizeof(*s->order), cmp_member);
        /* Two passes over the runs of one client and size: sizes, then counts. */
        for (int pass = 0; pass < 2; pass++) {
                size_t at = 0;

                for (size_t j = 0, e; j < n; j = e) {
                        const struct sibling_member *first = &s->order[j];

                        for (e = j + 1; e < n && s->order[e].client == first->client &&
                                        s->order[e].n_chunks == first->n_chunks;
                             e++)
                                ;
                        if (e - j < SIBLINGS_MIN_MEMBERS)
                                continue;
                        if (pass == 0) {
                                total += first->n_chunks;
                                continue;
                        }
                        for (size_t m = j; m < e; m++)
                                count_region(s->counts + at, &in->regions[s->order[m].region], in->now,
                                             protect_ticks, window);
                        s->n_groups++;
                        s->n_members += (uint32_t)(e - j);
                        if (group_tells(s->counts + at, first->n_chunks))
                                for (size_t m = j; m < e; m++)
                                        s->of_region[s->order[m].region] = s->counts + at;
                        else
                                s->n_mute++;
                        at += first->n_chunks;
                }
                if (pass == 0 && total == 0)
                        break;
                if (pass == 0 && !(s->counts = calloc(total, sizeof(*s->counts))))
                        goto nomem;
        }
        return 0;
nomem:
        siblings_free(s);
        return -ENOMEM;
}

void siblings_free(struct plan_siblings *s) {
        free(s->of_region);
        free(s->counts);
        free(s->order);
        *s = (struct plan_siblings){0};
}
