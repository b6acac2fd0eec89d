/* SPDX-License-Identifier: MIT */
/* Sibling regions' counts (siblings.h). */
#include "config.h"

#include <errno.h>
#include <stdatomic.h>
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

/* Adds chunks [lo, hi) of reg to its group's counts at those offsets.  A
 * chunk counts as armed once its arm (the re-arm, or the move that brought
 * it to the host: its last_move) is older than window, time for a use to
 * have shown. */
static void count_range(struct sibling_count *k, const struct policy_region *reg, uint32_t lo, uint32_t hi,
                        uint32_t now, uint32_t protect_ticks, uint32_t window) {
        for (uint32_t i = lo; i < hi; i++) {
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

/* The counting, split into blocks of offsets of one group, each counted
 * over all the group's members by whoever takes it: blocks touch disjoint
 * counts, and a saturating count is the same in any order, so the counts
 * depend neither on the threads nor on who took which block. */
struct count_job {
        struct plan_siblings *s;
        const struct policy_input *in;
        uint32_t protect_ticks, window;
        atomic_size_t next;
};

/* Offsets a block covers in a group of n_members and n_chunks offsets:
 * for threads, some SIBLINGS_BLOCK_CHUNKS chunks in all, at least 256
 * offsets (4 KiB of each member's chunks: shorter runs cost the prefetcher
 * more than the threads gain); alone, all of them (each member's chunks in
 * one run, as fast as it reads). */
#define SIBLINGS_BLOCK_CHUNKS 16384u
static uint32_t block_offsets(uint32_t n_members, uint32_t n_chunks, unsigned threads) {
        uint32_t b = SIBLINGS_BLOCK_CHUNKS / (n_members ? n_members : 1);

        return threads <= 1 ? n_chunks : b < 256 ? 256 : b;
}

static void count_blocks(void *arg, unsigned part) {
        struct count_job *j = arg;
        const struct plan_siblings *s = j->s;
        size_t b, g = 0;

        (void)part;
        while ((b = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed)) < s->n_blocks) {
                const struct sibling_group *gr;
                uint32_t lo, hi;

                while (s->groups[g + 1].first_block <= b) /* blocks are taken in order: g only grows */
                        g++;
                gr = &s->groups[g];
                lo = (uint32_t)(b - gr->first_block) * gr->offsets_per_block;
                hi = gr->n_chunks - lo < gr->offsets_per_block ? gr->n_chunks : lo + gr->offsets_per_block;
                for (uint32_t m = gr->first_member; m < gr->first_member + gr->n_members; m++) {
                        const struct policy_region *reg = &j->in->regions[s->order[m].region];

                        count_range(s->counts + gr->at, reg, lo, hi, j->in->now,
                                    policy_region_protect(j->in, reg, j->protect_ticks), j->window);
                }
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

/* The groups: runs of at least SIBLINGS_MIN_MEMBERS regions of one client
 * and size in s->order, each given its counts (zeroed) and its blocks, with
 * a last entry that ends the blocks.  Returns 0 or -ENOMEM. */
static int group_up(struct plan_siblings *s, size_t n, unsigned threads) {
        size_t total = 0, at = 0, blocks = 0;

        for (int pass = 0; pass < 2; pass++) {
                uint32_t g = 0;

                for (size_t j = 0, e; j < n; j = e) {
                        const struct sibling_member *first = &s->order[j];

                        for (e = j + 1; e < n && s->order[e].client == first->client &&
                                        s->order[e].n_chunks == first->n_chunks;
                             e++)
                                ;
                        if (e - j < SIBLINGS_MIN_MEMBERS)
                                continue;
                        if (pass == 1) {
                                struct sibling_group *gr = &s->groups[g];
                                uint32_t members = (uint32_t)(e - j);

                                *gr = (struct sibling_group){
                                        .first_member = (uint32_t)j,
                                        .n_members = members,
                                        .n_chunks = first->n_chunks,
                                        .offsets_per_block = block_offsets(members, first->n_chunks, threads),
                                        .at = at,
                                        .first_block = blocks};
                                at += first->n_chunks;
                                blocks += (first->n_chunks + gr->offsets_per_block - 1) / gr->offsets_per_block;
                        } else
                                total += first->n_chunks;
                        g++;
                }
                if (pass == 0) {
                        if (total == 0)
                                return 0;
                        s->n_groups = g;
                        s->counts = calloc(total, sizeof(*s->counts));
                        s->groups = malloc((g + 1) * sizeof(*s->groups));
                        if (!s->counts || !s->groups)
                                return -ENOMEM;
                }
        }
        s->groups[s->n_groups] = (struct sibling_group){.first_block = blocks};
        s->n_blocks = blocks;
        return 0;
}

int siblings_build(struct plan_siblings *s, const struct policy_input *in, uint32_t protect_ticks,
                   unsigned threads) {
        struct count_job job = {.s = s, .in = in, .protect_ticks = protect_ticks,
                                .window = in->probe_window ? in->probe_window : protect_ticks};
        size_t n = 0;

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
        threads = in->workers && in->workers->run ? threads : 1;
        if (group_up(s, n, threads) < 0)
                goto nomem;
        if (s->n_groups == 0)
                return 0;
        atomic_init(&job.next, 0);
        if (threads > 1 && s->n_blocks > 1)
                in->workers->run(in->workers->pool, count_blocks, &job,
                                 threads < s->n_blocks ? threads : (unsigned)s->n_blocks);
        else
                count_blocks(&job, 0);
        for (uint32_t g = 0; g < s->n_groups; g++) {
                const struct sibling_group *gr = &s->groups[g];

                s->n_members += gr->n_members;
                if (group_tells(s->counts + gr->at, gr->n_chunks))
                        for (uint32_t m = gr->first_member; m < gr->first_member + gr->n_members; m++)
                                s->of_region[s->order[m].region] = s->counts + gr->at;
                else
                        s->n_mute++;
        }
        return 0;
nomem:
        siblings_free(s);
        return -ENOMEM;
}

void siblings_free(struct plan_siblings *s) {
        free(s->of_region);
        free(s->groups);
        free(s->counts);
        free(s->order);
        *s = (struct plan_siblings){0};
}
