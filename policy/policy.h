/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * Placement policies for one GPU: a snapshot of chunks, budgets and the time
 * in; an ordered, coalesced, rate-limited migration plan out.  Pure: no I/O,
 * no clocks, no logging; time is the caller's tick counter.  The daemon's
 * planner and kvtier-sim call the same code.
 *
 * Every policy ranks chunks; the budget's worth with the highest rank is
 * wanted in VRAM.  VRAM chunks not wanted are evicted to host-mapped (lowest
 * rank first), wanted chunks elsewhere are promoted (highest first) while
 * the charged chunks plus promotions stay within the budget.  Evictions free
 * budget only once they are done, so never within the same plan, unless
 * overlap_chunks lets promotions run ahead of them: VRAM may then go over
 * the budget by the chunks being evicted (in flight or planned now), at
 * most overlap_chunks, until those evictions land.  Pinned
 * chunks rank above everything and are never evicted; chunks with a pending
 * order are left alone; a client's chunks beyond its quota are never wanted.
 * Host budgets (policy_input.nodes): evictions fill the nodes in their
 * order, the warmest evicted chunks on the first node with room, the
 * coldest furthest; evictions no node has room for are not planned, and
 * the promotions that wait for their budget wait longer.
 * Ties go to the higher region index, then the higher chunk index (the
 * newest allocation and the end of a region are the KV append point).
 *
 * A rank is, from the top: pinned; client priority (0..7); prefetch targets
 * (needed within a few ticks); the window; a heat class (0 cold .. 15);
 * recency.  What each policy puts in:
 *   lru     recency only.
 *   heat    heat class (decayed access counts) then recency; a resident
 *           chunk counts one class hotter, so a newcomer must be clearly
 *           hotter to displace it (hysteresis), and no chunk moves again
 *           within hysteresis_ticks of its last move.
 *   window  the newest window_chunks of each region (below the highest chunk
 *           ever touched: the KV append point) are boosted; then recency.
 *   hybrid  heat with the window boost for regions touched within one heat
 *           half-life, plus prefetch.
 * Prefetch (any policy with prefetch_depth > 0): per region, the last three
 * touch ticks' highest chunks p2 < p1 < p0 (or >, for a descending stream)
 * at equal stride s predict p0 + s .. p0 + depth * s (each as wide as the
 * run touched last); those chunks are boosted.  A sequential stream (this
 * tick's run starts right after the previous tick's) is told from two ticks.
 */

#include <stddef.h>
#include <stdint.h>

enum policy_kind {
        POLICY_LRU,
        POLICY_HEAT,
        POLICY_WINDOW,
        POLICY_HYBRID,
        _POLICY_KIND_MAX,
};

#define POLICY_CHUNK_PINNED 0x01u
/* Hinted HOT: ranks above any heat, window or prefetch of its priority,
 * until a COLD or DONE hint; evictable, unlike PINNED, when the hot
 * chunks outgrow the budget. */
#define POLICY_CHUNK_HOT 0x02u

/* policy_chunk.node of a chunk whose host NUMA node is not known. */
#define POLICY_NODE_NONE 0xffu

/* One chunk: also the daemon's per-chunk state (16 bytes), so that the
 * snapshot is the registry itself. */
struct policy_chunk {
        uint32_t last_use;  /* tick of the last known use; 0 = never */
        uint32_t heat;      /* decayed accesses as of last_use, POLICY_HEAT_ONE per access */
        uint32_t last_move; /* tick of the last completed tier change; 0 = never */
        uint8_t tier;       /* enum kvt_tier, confirmed */
        uint8_t pending;    /* enum kvt_tier target of an in-flight order; 0 = none */
        uint8_t flags;      /* POLICY_CHUNK_* */
        uint8_t node;       /* the daemon's books: host NUMA node of the chunk's host copy, or of the
                             * eviction under way (POLICY_NODE_NONE: not known); planning ignores it */
};

/* One region, in the caller's order: a higher index is a newer region. */
struct policy_region {
        const struct policy_chunk *chunks;
        uint32_t n_chunks;
        uint32_t client; /* index into policy_input.clients; ignored without clients */
};

/* A host NUMA node evictions may go to (policy_input.nodes). */
struct policy_node {
        int32_t id;           /* 0 .. POLICY_MAX_NODES - 1 */
        uint64_t room_chunks; /* chunks it takes before its host budget is full; UINT64_MAX = no budget */
};

#define POLICY_MAX_NODES 64u

struct policy_client {
        uint64_t quota_chunks; /* most chunks wanted in VRAM; UINT64_MAX = no quota */
        uint8_t priority;      /* 0 (default) .. 7: ranks above any lower priority's chunks */
};

#define POLICY_PRIORITY_MAX 7u

struct policy_params {
        enum policy_kind kind;
        uint32_t hysteresis_ticks;     /* heat, hybrid: no move within this many ticks of the last */
        uint32_t heat_half_life_ticks; /* >= 1 */
        uint32_t window_chunks;        /* window, hybrid: per region */
        uint32_t prefetch_depth;       /* strides predicted ahead; 0 = no prefetch */
        uint32_t run_cap;              /* longest run of one move, chunks; 0 = POLICY_RUN_CAP_DEFAULT */
        uint32_t evict_tier;           /* where evictions go: KVT_TIER_HOST_MAPPED (0 means it too)
                                        * or KVT_TIER_HOST, unmapped, where the GPU's next touch
                                        * faults and so is an access sample */
        uint32_t threads;              /* worker threads of one plan: 1 = the calling thread alone;
                                        * 0 = auto: the CPUs this process may run on, at most
                                        * POLICY_THREADS_AUTO_MAX, and one per POLICY_THREADS_MIN_CHUNKS
                                        * chunks; more than POLICY_THREADS_MAX counts as that.  Plans
                                        * do not depend on it. */
        uint32_t overlap_chunks;       /* promotions may take VRAM this far over the budget while
                                        * evictions that bring it back are under way (at most the
                                        * chunks those evict); 0 = promotions wait for evictions */
};

#define POLICY_THREADS_MAX        16u
#define POLICY_THREADS_AUTO_MAX   4u
#define POLICY_THREADS_MIN_CHUNKS 65536u

/* 512 chunks = 1 GiB: long enough for full-speed prefetch (DESIGN.md: 256 MiB+
 * ranges reach 48-50 GB/s), short enough to keep one order's latency bounded. */
#define POLICY_RUN_CAP_DEFAULT 512u

struct policy_input {
        const struct policy_region *regions;
        size_t n_regions;
        const struct policy_client *clients; /* NULL: one class, no quotas */
        size_t n_clients;
        uint32_t now;             /* current tick; chunks touched in it have last_use == now */
        uint64_t budget_chunks;   /* VRAM budget of the GPU, in chunks */
        uint64_t charged_chunks;  /* chunks in VRAM or with a pending order to VRAM */
        uint64_t evicting_chunks; /* of those, chunks in VRAM with an eviction in flight */
        uint64_t max_move_chunks; /* rate limit for this plan, both directions; UINT64_MAX = none */
        /* Host NUMA nodes evictions may go to, in order of preference (the
         * GPU's home node first, then the others nearest first), at most
         * POLICY_MAX_NODES.  NULL: no host budgets, every eviction goes to
         * home_node. */
        const struct policy_node *nodes;
        size_t n_nodes;
        int32_t home_node; /* with nodes NULL: where evictions go; -1 = wherever the shim puts them */
};

/* One order to issue: chunks [first_chunk, first_chunk + n_chunks) of a region. */
struct policy_move {
        uint32_t region;
        uint32_t first_chunk;
        uint32_t n_chunks;
        uint32_t tier;     /* enum kvt_tier: KVT_TIER_VRAM or KVT_TIER_HOST_MAPPED */
        int32_t host_node; /* evictions: the host NUMA node they go to (-1: the shim's choice); promotions -1 */
};

struct policy_plan {
        struct policy_move *moves; /* evictions first, then promotions; owned, policy_plan_clear() */
        size_t n_moves;
        uint64_t evict_chunks;
        uint64_t promote_chunks;
        uint64_t prefetch_chunks; /* of promote_chunks, those wanted only as prefetch targets */
};

/* Plans moves for one GPU into *ret (previous contents are not freed).
 * Returns 0, -EINVAL for bad parameters or more than 2^32-1 chunks, or -ENOMEM. */
int policy_plan(const struct policy_params *pp, const struct policy_input *in, struct policy_plan *ret);

/* Frees the moves of a plan and zeroes it.  Accepts NULL. */
void policy_plan_clear(struct policy_plan *p);

/* "lru", "heat", "window", "hybrid"; NULL for an unknown kind. */
const char *policy_kind_name(enum policy_kind k);

/* The kind named s, or -EINVAL. */
int policy_kind_from_name(const char *s);

/* Defaults for a kind (hybrid: window 256 chunks, prefetch 4, ...). */
void policy_params_default(enum policy_kind k, struct policy_params *ret);

/* Heat: one access = POLICY_HEAT_ONE; halves every half_life ticks. */
#define POLICY_HEAT_ONE 256u

/* The chunk's heat at tick now (decayed from last_use). */
uint32_t policy_heat_at(const struct policy_chunk *c, uint32_t now, uint32_t half_life_ticks);

/* Records n accesses of a chunk at tick now: decays its heat to now, adds n,
 * sets last_use.  Saturates instead of wrapping. */
void policy_chunk_touch(struct policy_chunk *c, uint32_t now, uint32_t n, uint32_t half_life_ticks);

/* Heat class: 0 for less than one access-equivalent, else 1 + log2(heat in accesses), at most 15. */
unsigned policy_heat_class(uint32_t heat);
