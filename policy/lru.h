/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * LRU placement policy for one GPU: a snapshot of chunks in, an ordered,
 * coalesced, rate-limited migration plan out.  Pure: no I/O, no clocks, no
 * logging; time is the caller's tick counter in last_use.
 *
 * The chunks wanted in VRAM are the budget's worth with the highest
 * last_use (pinned chunks rank above everything); ties go to the higher
 * position in the input, i.e. the higher region index, then the higher
 * chunk index (the newest allocation and the end of a region are the KV
 * append point).  VRAM chunks not wanted are evicted to host-mapped (coldest
 * first); wanted chunks elsewhere are promoted (hottest first) while the
 * charged chunks plus promotions stay within the budget.  Evictions free
 * budget only once they are done, so never in the same plan.  Chunks with a
 * pending order are left alone; pinned chunks are never evicted.
 */

#include <stddef.h>
#include <stdint.h>

/* One chunk as the policy sees it.  The input array must be sorted by
 * (region, chunk), strictly increasing. */
struct lru_chunk_view {
        uint32_t region;   /* the caller's region index; higher = newer */
        uint32_t chunk;    /* chunk index within the region */
        uint32_t last_use; /* tick of the last known use */
        uint8_t tier;      /* enum kvt_tier, confirmed */
        uint8_t pending;   /* an order for this chunk is in flight */
        uint8_t pinned;    /* never evicted, always wanted first */
        uint8_t reserved;
};

struct lru_input {
        const struct lru_chunk_view *chunks;
        size_t n_chunks;
        uint64_t budget_chunks;   /* VRAM budget of the GPU, in chunks */
        uint64_t charged_chunks;  /* chunks in VRAM or with a pending order to VRAM */
        uint64_t max_move_chunks; /* rate limit for this plan, both directions; UINT64_MAX = none */
        uint32_t run_cap;         /* longest run of one move, in chunks; 0 = LRU_RUN_CAP_DEFAULT */
};

/* 512 chunks = 1 GiB: long enough for full-speed prefetch (DESIGN.md: 256 MiB+
 * ranges reach 48-50 GB/s), short enough to keep one order's latency bounded. */
#define LRU_RUN_CAP_DEFAULT 512u

/* One order to issue: chunks [first_chunk, first_chunk + n_chunks) of a region. */
struct lru_move {
        uint32_t region;
        uint32_t first_chunk;
        uint32_t n_chunks;
        uint32_t tier; /* enum kvt_tier: KVT_TIER_VRAM or KVT_TIER_HOST_MAPPED */
};

struct lru_plan {
        struct lru_move *moves; /* evictions first, then promotions; owned, lru_plan_clear() */
        size_t n_moves;
        uint64_t evict_chunks;
        uint64_t promote_chunks;
};

/* Plans moves for one GPU into *ret (previous contents are not freed).
 * Returns 0, -EINVAL for unsorted input, or -ENOMEM. */
int lru_plan(const struct lru_input *in, struct lru_plan *ret);

/* Frees the moves of a plan and zeroes it.  Accepts NULL. */
void lru_plan_clear(struct lru_plan *p);
