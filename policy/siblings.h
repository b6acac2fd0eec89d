/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * Sibling regions, internal to policy/: what demand learns of a chunk from
 * the chunks at the same offset of the regions allocated like it.
 *
 * A paged KV cache keeps one tensor per layer (or per layer and K/V), all of
 * one size, and one block table for all of them: block b of a sequence sits
 * at the same offset of every layer's tensor, and a decode step reads it in
 * each.  A static cache (one tensor per layer, positions at the same offset)
 * is the same.  Seen through faults, that is one demand per layer, each
 * found only once its chunk is re-armed; seen in VRAM, nothing.  So regions
 * of one client and one size, at least SIBLINGS_MIN_MEMBERS of them, are
 * taken for siblings, and at each offset the plan counts the siblings whose
 * chunk is seen in use (a demand outside VRAM, a use within the protection
 * in VRAM) and those whose chunk is armed and unused (in host memory, its
 * next touch faults, none seen since it was armed, longer ago than a probe
 * waits for an answer: policy_input.probe_window).  Then (policy.h, demand):
 *   - a chunk the GPU reads in place (mapped, so its uses are unseen) is a
 *     demand where SIBLINGS_EVIDENCE siblings or more are in use at its
 *     offset;
 *   - a chunk in VRAM with no use of its own seen for the protection is
 *     stale, as a probe that went unanswered would make it, where no
 *     sibling at its offset is in use and SIBLINGS_EVIDENCE or more are
 *     armed and unused.
 * A group in use at more than half its offsets tells nothing (every chunk
 * is as likely in use as the next): there its chunks are judged alone.
 * A chunk's own evidence always wins: a chunk seen in use is fresh, one armed is
 * found by its own fault.  A wrong inference costs one round trip: an
 * evicted chunk's next use faults at once, and the thrash guard lengthens
 * the protection that both rules wait for.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "policy.h"

#define SIBLINGS_MIN_MEMBERS 4u
#define SIBLINGS_MIN_CHUNKS  8u /* 16 MiB: smaller regions are not a cache's layers */
#define SIBLINGS_EVIDENCE    2u

/* The counts at one offset of a group: siblings in use, armed and unused. */
struct sibling_count {
        uint8_t used, armed; /* saturating */
};

/* A region as the groups are sorted: by client, then size. */
struct sibling_member {
        uint32_t client, n_chunks, region;
};

/* A group: members [first_member, first_member + n_members) of
 * plan_siblings.order, their counts at counts + at, counted in blocks
 * [first_block, next group's first_block) of offsets_per_block offsets. */
struct sibling_group {
        uint32_t first_member, n_members, n_chunks, offsets_per_block;
        size_t at, first_block;
};

struct plan_siblings {
        /* Per region: its group's counts, indexed by chunk; NULL for a region
         * with no siblings, or whose group tells nothing.  Regions of one
         * group share one array. */
        const struct sibling_count **of_region;
        struct sibling_count *counts; /* all groups' arrays */
        struct sibling_member *order; /* scratch: regions sorted by client and size */
        uint32_t n_groups, n_mute;    /* groups; of them those that tell nothing */
        uint32_t n_members;           /* regions in all groups */
        struct sibling_group *groups; /* n_groups, then one that ends the blocks */
        size_t n_blocks;
};

/* What a chunk's siblings decided of it, where its own evidence did not. */
enum sibling_word {
        SIBLINGS_SILENT,
        SIBLINGS_DEMAND, /* fresh outside VRAM: siblings_demand() */
        SIBLINGS_STALE,  /* stale in VRAM: siblings_stale() */
};

/* Counts every group's offsets for tick now and a protection of
 * protect_ticks, on up to threads of in->workers (1: the calling thread
 * alone; the counts do not depend on it).  Returns 0 or -ENOMEM (s left
 * empty). */
int siblings_build(struct plan_siblings *s, const struct policy_input *in, uint32_t protect_ticks,
                   unsigned threads);

void siblings_free(struct plan_siblings *s);

/* Whether chunk c, outside VRAM, is fresh on its siblings' evidence: it is
 * read in place unseen and enough siblings at its offset are in use. */
static inline bool siblings_demand(const struct sibling_count *k, const struct policy_chunk *c) {
        return k && (c->flags & POLICY_CHUNK_MAPPED) && c->tier == POLICY_TIER_HOST && k->used >= SIBLINGS_EVIDENCE;
}

/* Whether chunk c, in VRAM with nothing of its own seen for the protection,
 * is stale on its siblings' evidence. */
static inline bool siblings_stale(const struct sibling_count *k) {
        return k && k->used == 0 && k->armed >= SIBLINGS_EVIDENCE;
}
