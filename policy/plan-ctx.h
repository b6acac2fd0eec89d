/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * A plan's working state (policy/plan.c makes the decisions): the per-chunk
 * side arrays, and the parts its per-chunk passes are split into, run on
 * the threads the caller lends (policy_input.workers; policy/plan-ctx.c).
 * Internal to policy/.
 */

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "policy.h"
#include "siblings.h"

/* Histogram buckets: 65536 for unpinned ranks, one above them for pinned chunks. */
#define HIST_N      65537u
#define HIST_PINNED 65536u
#define DECAY_AGES          4096u            /* ages in the decay table, ticks */

struct plan_ctx;

/* One part of a per-chunk pass, one per thread.  The chunks come in
 * blocks that the parts take in turns as they get to them (a part whose
 * thread waits for a core leaves its share to the others); a part writes
 * only its own fields, the slices of the side arrays of the blocks it took
 * and their struct plan_block.  Partial results are merged by the calling
 * thread once the workers' run() returned: sums, minima and maxima over the
 * parts, lists in block order, so that plans depend neither on the number
 * of threads nor on who took which block. */
struct plan_part {
        struct plan_ctx *x;
        unsigned t;          /* its index */
        uint32_t rmin, rmax; /* plan_rank: of the regions it ranked */
        uint64_t fresh_prio[POLICY_PRIORITY_MAX + 1]; /* plan_rank: demand's fresh chunks outside
                                                       * VRAM it ranked, by client priority */
        uint64_t stale_vram; /* plan_rank: demand's stale, evictable chunks in VRAM */
        uint64_t cold_vram;  /* plan_rank: of those, the ones not fresh (what a demand displaces) */
        uint64_t sibling_demand, sibling_stale; /* plan_rank: of those, on their siblings' word */
        uint32_t *hist;      /* 2 x HIST_N counters (part 0: x->hist) */
};

/* What a pass found in one block of chunks [b * block, (b + 1) * block). */
struct plan_block {
        size_t m;          /* plan_top_k: chunks collected at bucket + the block's first */
        size_t n_ev, n_pr; /* plan_select: candidates from the block's first chunk up
                            * (ascending) and from its last down (descending) */
};

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
        uint32_t *hist;      /* 2 x HIST_N counters: all chunks, scratch */
        uint32_t rmin, rmax; /* range of the ranks of unpinned chunks */
        uint64_t fresh_prio[POLICY_PRIORITY_MAX + 1]; /* demand: fresh chunks outside VRAM (uses
                                                       * seen, not yet served), by client priority */
        uint64_t stale_vram; /* demand: stale, evictable chunks in VRAM */
        uint64_t cold_vram;  /* demand: of those, the ones not fresh */
        uint64_t sibling_demand, sibling_stale; /* of fresh_prio's and stale_vram, on siblings' word */
        unsigned shift;      /* bucket of an unpinned rank: (rank - rmin) >> shift, < 65536 */
        uint32_t decay[DECAY_AGES]; /* heat decay by age: shift << 24 | 16.16 factor (0: gone) */
        unsigned n_threads;         /* parts of each pass, >= 1 (plan_threads()) */
        uint32_t *hist_more;        /* 2 x HIST_N counters for each part but the first */
        struct plan_part part[POLICY_THREADS_MAX];
        void (*pass)(struct plan_part *); /* what plan_par() runs on each part */
        size_t block, n_blocks;     /* flat passes: chunks per block (n with one thread), blocks */
        struct plan_block *blk;     /* n_blocks */
        size_t *rblock, n_rblocks;  /* plan_rank: block b is regions [rblock[b], rblock[b + 1]) */
        atomic_size_t next;         /* the next block to take */
        uint32_t base, mask;        /* plan_top_k: the bucket collected */
        uint64_t want_min;          /* plan_select */
        struct plan_siblings sib;   /* demand: what siblings say of each offset (siblings.h) */
        unsigned density_top[POLICY_PRIORITY_MAX + 1]; /* demand: the densest region's density_class() */
        bool density_shared[POLICY_PRIORITY_MAX + 1];  /* demand: regions of two clients or more */
};

/* The priority of region reg's client, 0 .. POLICY_PRIORITY_MAX (0
 * without clients): what ranks its chunks in a plan and orders the
 * sampler's laps. */
static inline uint32_t region_priority(const struct policy_input *in, const struct policy_region *reg) {
        uint32_t prio = in->clients && reg->client < in->n_clients ? in->clients[reg->client].priority : 0;

        return prio > POLICY_PRIORITY_MAX ? POLICY_PRIORITY_MAX : prio;
}

/* Threads for a pass over n chunks: threads (policy_params.threads'
 * meaning) of in->workers', 1 without workers. */
unsigned plan_threads(unsigned threads, const struct policy_input *in, size_t n);

/* Allocates x's arrays and parts for x->n chunks and x->n_threads parts.
 * Returns 0 or -ENOMEM (nothing left allocated). */
int plan_ctx_init(struct plan_ctx *x);
void plan_ctx_free(struct plan_ctx *x);

/* Runs fn on every part of x, on x->in->workers; all have returned when it
 * does. */
void plan_par(struct plan_ctx *x, void (*fn)(struct plan_part *));

/* Takes the next block of a pass of n blocks into *b; false when none is left. */
bool plan_take(struct plan_ctx *x, size_t n, size_t *b);

/* Chunks [*lo, *hi) of flat block b. */
void plan_block_range(const struct plan_ctx *x, size_t b, size_t *lo, size_t *hi);
