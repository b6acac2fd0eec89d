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
 *   demand  (the default) what the engine can be seen to use, in the only
 *           signals a GPU gives on x86 (DESIGN.md): a chunk outside VRAM
 *           touched recently (a fault on an evicted chunk, a launch pointer
 *           into it, a hint) is fresh for protect_ticks (policy_input,
 *           adapted by policy_guard_tick()), one that never was in VRAM
 *           only once seen used twice (a first touch may be a fill's only
 *           one); a chunk in VRAM is fresh until a probe of its cohort
 *           finds it unused (POLICY_CHUNK_COLD, or a probe unanswered past
 *           policy_input's probe_window): a chunk in VRAM gives no
 *           sign of use, so "nothing seen lately" proves nothing there, and
 *           demand would otherwise push out what is in use as fast as
 *           re-arms find demands; fresh ranks above resident, resident
 *           above a region kernels were launched on within active_ticks,
 *           then the heat class (faults counted, decayed over
 *           heat_half_life_ticks: a chunk evicted and demanded again and
 *           again is popular), then recency.  So a fault is a demand that displaces only
 *           chunks nothing was seen to use for a protection period, and a
 *           chunk in VRAM is not displaced by one that is merely as fresh,
 *           unless its region is launched on far more densely (fresh
 *           chunks rank by their region's launches a chunk first, below).
 *           Sibling regions (same client, same size: a paged cache's
 *           layers, policy/siblings.h) speak for each other at one offset:
 *           a chunk read in place unseen is fresh where two siblings there
 *           are, and one in VRAM unseen for the protection is not where
 *           two are armed and unused and none is in use; the sampler
 *           spends nothing on offsets its siblings tell of.
 * Prefetch (any policy with prefetch_depth > 0): per region, the last three
 * touch ticks' highest chunks p2 < p1 < p0 (or >, for a descending stream)
 * at equal stride s predict p0 + s .. p0 + depth * s (each as wide as the
 * run touched last); those chunks are boosted.  A sequential stream (this
 * tick's run starts right after the previous tick's) is told from two ticks.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum policy_kind {
        POLICY_LRU,
        POLICY_HEAT,
        POLICY_WINDOW,
        POLICY_HYBRID,
        POLICY_DEMAND,
        _POLICY_KIND_MAX,
};

/* Where a chunk is.  The values are the wire protocol's enum kvt_tier
 * (common/protocol.h), which the daemon asserts equal; the policy does not
 * include the protocol. */
enum policy_tier {
        POLICY_TIER_NONE = 0,        /* never placed: UVM decides on first touch */
        POLICY_TIER_VRAM = 1,        /* preferred location the GPU */
        POLICY_TIER_HOST_MAPPED = 2, /* preferred location host, mapped by the GPU: read in place, no fault */
        POLICY_TIER_HOST = 3,        /* preferred location host, unmapped: the GPU's next touch faults */
};

#define POLICY_CHUNK_PINNED 0x01u
/* Hinted HOT: ranks above any heat, window or prefetch of its priority,
 * until a COLD or DONE hint; evictable, unlike PINNED, when the hot
 * chunks outgrow the budget. */
#define POLICY_CHUNK_HOT 0x02u
/* In host memory (tier HOST) and mapped by the GPU at a fault since it got
 * there: the GPU reads it in place and no further access is seen until it
 * is re-armed (policy_sample()) or moved. */
#define POLICY_CHUNK_MAPPED 0x04u
/* In VRAM, and a probe of its cohort found it unused (policy_sample()),
 * or the engine hinted it COLD or DONE: demand may displace it.  Any use
 * clears it. */
#define POLICY_CHUNK_COLD 0x08u
/* In VRAM and probed (policy_sample()) at last_move: one page of it is
 * on the host, unmapped; cleared when it is used or found expired. */
#define POLICY_CHUNK_PROBE 0x10u
#define POLICY_PROBE_BITS  POLICY_CHUNK_PROBE
/* In host memory by a mapped eviction (tier HOST_MAPPED) at last_move: the
 * uses seen just after it are the driver's own remote maps (the daemon's
 * quiet window).  Until it is re-armed (POLICY_CHUNK_REARMED) or seen used
 * (POLICY_CHUNK_MAPPED), its sample page's state is unverified:
 * policy_chunk_unverified().  Cleared by the chunk's next move. */
#define POLICY_CHUNK_OWN_MAP 0x20u
/* The chunk's memory was released to the SSD tier (kvtier_spill): it holds
 * nothing, counts against no budget and is never moved or sampled until the
 * shim says it was restored. */
#define POLICY_CHUNK_SPILLED 0x40u
/* In host memory, its sample page re-armed at last_move (no tier change:
 * the tick says from when its next use shows, as a probe's does).  Cleared
 * by its next move. */
#define POLICY_CHUNK_REARMED 0x80u

/* policy_chunk.node of a chunk whose host NUMA node is not known. */
#define POLICY_NODE_NONE 0xffu

/* One chunk: also the daemon's per-chunk state (16 bytes), so that the
 * snapshot is the registry itself. */
struct policy_chunk {
        uint32_t last_use;  /* tick of the last known use; 0 = never */
        uint32_t heat;      /* decayed accesses as of last_use, POLICY_HEAT_ONE per access */
        uint32_t last_move; /* tick of the last completed tier change, or of a probe or re-arm made
                             * since (POLICY_CHUNK_PROBE, POLICY_CHUNK_REARMED); 0 = never */
        uint8_t tier;       /* enum policy_tier, confirmed */
        uint8_t pending;    /* enum policy_tier target of an in-flight order; 0 = none */
        uint8_t flags;      /* POLICY_CHUNK_* */
        uint8_t node;       /* the daemon's books: host NUMA node of the chunk's host copy, or of the
                             * eviction under way (POLICY_NODE_NONE: not known); planning ignores it */
};

/* One region, in the caller's order: a higher index is a newer region. */
struct policy_region {
        const struct policy_chunk *chunks;
        uint32_t n_chunks;
        uint32_t client;      /* index into policy_input.clients; ignored without clients */
        uint32_t last_active; /* tick of the last kernel launched with a pointer into it; 0 = never */
        uint32_t launch_rate; /* kernels launched with a pointer into it a tick, averaged
                               * (struct policy_launch_avg); 0 = none seen lately, or not known */
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
        /* demand's sampler (policy_sample()): this client's samples in flight,
         * in its own shim's queue: chunks of re-arms and probes (cohorts) */
        uint32_t sampling_chunks;
        uint32_t probing_cohorts;
        /* demand: how long a use keeps this client's chunks fresh, from its
         * own thrash guard (policy_guard), so that one client's evictions
         * coming back stretch no one else's protection; 0: the input's
         * protect_ticks */
        uint32_t protect_ticks;
        /* demand: this client's prober sits this tick out (policy_prober):
         * none of its chunks is probed.  Its own, so that a client whose
         * probes come back (its VRAM in use) slows no other's probes. */
        bool probes_off;
};

#define POLICY_PRIORITY_MAX 7u

struct policy_params {
        enum policy_kind kind;
        uint32_t hysteresis_ticks;     /* heat, hybrid: no move within this many ticks of the last */
        uint32_t heat_half_life_ticks; /* >= 1 */
        uint32_t window_chunks;        /* window, hybrid: per region */
        uint32_t prefetch_depth;       /* strides predicted ahead; 0 = no prefetch */
        uint32_t run_cap;              /* longest run of one move, chunks; 0 = POLICY_RUN_CAP_DEFAULT */
        uint32_t evict_tier;           /* where evictions go: POLICY_TIER_HOST_MAPPED (0 means it too)
                                        * or POLICY_TIER_HOST, unmapped, where the GPU's next touch
                                        * faults and so is an access sample */
        uint32_t active_ticks;         /* demand: a region counts as in use this many ticks after its
                                        * last kernel launch (policy_region.last_active) */
        uint32_t protect_min_ticks;    /* demand: the guard's bounds on protect_ticks (policy_guard) */
        uint32_t protect_max_ticks;
        uint32_t sample_chunks;        /* demand: chunks re-armed per tick (policy_sample); 0 = none */
        uint32_t probe_cohorts;        /* demand: cohorts in VRAM probed per tick (policy_sample); 0 = none */
        uint32_t threads;              /* threads of one plan, of policy_input.workers': 1 = the
                                        * calling thread alone; N = at most N; 0 = auto: all of them
                                        * (the caller sizes its pool: the daemon at the CPUs it may run
                                        * on, at most POLICY_THREADS_AUTO_MAX), and one per
                                        * POLICY_THREADS_MIN_CHUNKS chunks; more than
                                        * POLICY_THREADS_MAX counts as that.  Plans do not depend on it. */
        uint32_t overlap_chunks;       /* promotions may take VRAM this far over the budget while
                                        * evictions that bring it back are under way (at most the
                                        * chunks those evict); 0 = promotions wait for evictions */
};

/* demand's defaults, in ticks of the daemon's default 10 ms.  A region is
 * active for 4 ticks after a launch (shorter than a transformer layer's
 * turn comes round again in a long prefill, so the KV of finished layers
 * ranks below the activations in use).  Protection starts at 20 ticks
 * (a demand must be seen and served before its chunk goes stale), and goes
 * up to a minute.  256 re-arms a tick offer 51 GB/s of mapped host chunks
 * to sweep: a fill maps every chunk it writes, and the decode's hot chunks
 * among them are found only as fast as they are re-armed.  The shim's
 * mover serves fewer than that (its driver time, ~0.1 ms a chunk
 * (DESIGN.md), is shared with the moves), so the rate is a ceiling that
 * lets the mover's free time go to re-arms; on the H200 the paged pool,
 * the interleaved one and long-context decode were each faster at 256 a
 * tick than at 64 (RESULTS.md); the candidates run out once swept. */
#define POLICY_ACTIVE_TICKS_DEFAULT      4u
#define POLICY_PROTECT_MIN_TICKS_DEFAULT 20u
#define POLICY_PROTECT_MAX_TICKS_DEFAULT 6000u
#define POLICY_SAMPLE_CHUNKS_DEFAULT     256u
#define POLICY_PROBE_COHORTS_DEFAULT     8u
/* demand counts faults over ~10 s: one per residency, so a count is how often a chunk came back. */
#define POLICY_DEMAND_HALF_LIFE_TICKS    1000u

#define POLICY_THREADS_MAX        16u
#define POLICY_THREADS_AUTO_MAX   4u
#define POLICY_THREADS_MIN_CHUNKS 65536u

/* Threads the caller lends a plan (policy_input.workers): policy/ starts
 * none.  run() calls fn(arg, part) once for each part in [0, n_parts), on
 * any of its threads (part 0 may run on the calling one), and returns once
 * all have returned: what the caller wrote before run() is visible to fn,
 * and what fn wrote is visible to the caller after it.  One run at a time. */
struct policy_workers {
        unsigned n; /* threads it runs on, the caller's included; >= 1 */
        void (*run)(void *pool, void (*fn)(void *arg, unsigned part), void *arg, unsigned n_parts);
        void *pool;
};

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
        uint32_t protect_ticks;   /* demand: how long a use keeps a chunk fresh (policy_guard), for a
                                   * region whose client has no protect_ticks of its own */
        /* demand: ticks a probe waits for its chunk's use (policy_probe_window());
         * a probe unanswered past it is cold in the plan at once, before the
         * sampler's lap marks it so; 0 = only the lap's marks count */
        uint32_t probe_window;
        /* Host NUMA nodes evictions may go to, in order of preference (the
         * GPU's home node first, then the others nearest first), at most
         * POLICY_MAX_NODES.  NULL: no host budgets, every eviction goes to
         * home_node. */
        const struct policy_node *nodes;
        size_t n_nodes;
        int32_t home_node; /* with nodes NULL: where evictions go; -1 = wherever the shim puts them */
        const struct policy_workers *workers; /* threads for policy_plan(); NULL: the calling thread alone */
};

/* demand: the protection of reg's chunks: its client's where it has one
 * (policy_client.protect_ticks), else protect_ticks. */
static inline uint32_t policy_region_protect(const struct policy_input *in, const struct policy_region *reg,
                                             uint32_t protect_ticks) {
        uint32_t p = in->clients && reg->client < in->n_clients ? in->clients[reg->client].protect_ticks : 0;

        return p ? p : protect_ticks;
}

/* One order to issue: chunks [first_chunk, first_chunk + n_chunks) of a region. */
struct policy_move {
        uint32_t region;
        uint32_t first_chunk;
        uint32_t n_chunks;
        uint32_t tier;     /* enum policy_tier: VRAM, HOST_MAPPED or HOST (evictions, re-arms) */
        int32_t host_node; /* evictions: the host NUMA node they go to (-1: the shim's choice); promotions -1 */
};

/* demand's sibling counts (policy/siblings.c), opaque here. */
struct plan_siblings;

struct policy_plan {
        struct policy_move *moves; /* evictions first, then promotions; owned, policy_plan_clear() */
        size_t n_moves;
        uint64_t evict_chunks;
        uint64_t promote_chunks;
        uint64_t prefetch_chunks; /* of promote_chunks, those wanted only as prefetch targets */
        uint64_t roomless_chunks; /* promotions wanted that the room (budget, overlap) left out */
        uint64_t held_chunks;     /* demand: fresh chunks in host memory that stay there (read in
                                   * place: the VRAM they would need holds fresher or resident ones) */
        uint32_t held_priority;   /* demand: the highest client priority of those (0 without):
                                   * VRAM of a higher priority can make room for none of them */
        uint64_t stale_chunks;    /* demand: chunks in VRAM, evictable, ranking below a new
                                   * allocation (not both fresh and in an active region): what
                                   * one may displace (the daemon's capture grant) */
        uint64_t cold_chunks;     /* demand: of stale_chunks, those not fresh (a probe, or their
                                   * siblings, found them unused): what a demand may displace;
                                   * the rest are fresh in a region no kernel was launched on lately */
        /* demand, sibling regions (policy/siblings.h): the groups found, of
         * them those in use at most offsets (they tell nothing), the regions
         * in all groups; of the fresh chunks outside VRAM and of stale_chunks,
         * those judged so on their siblings' word alone */
        uint32_t sibling_groups, sibling_groups_mute, sibling_regions;
        uint64_t sibling_demand_chunks, sibling_stale_chunks;
        /* demand: the sibling counts the plan built, for a sample of the same
         * input (policy_sample_params.siblings); owned, policy_plan_clear() */
        struct plan_siblings *siblings;
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

/* The demand policy's sampler (DESIGN.md: DAMON's bounded sampling): each
 * tick it re-arms a few host chunks the GPU reads in place and probes a few
 * cohorts in VRAM, so that "nothing seen since" comes to mean "not used
 * since" for both.  A sample takes one 4 KiB page of a chunk (the shim
 * chooses it), whose next GPU touch faults: ~10 us of the engine's time on
 * the H200, where a whole chunk's refault took ~2.6 ms.
 *   Re-arm: a chunk in host memory mapped by the GPU (POLICY_CHUNK_MAPPED)
 *   and not used within stale_ticks (one that just faulted would only fault
 *   again) has a page unmapped (a move to POLICY_TIER_HOST, its tier):
 *   the GPU's next touch of that page faults, a demand.  So has, once, a
 *   chunk a mapped eviction left unverified (policy_chunk_unverified())
 *   stale_ticks before, whatever its siblings say: they may have been
 *   evicted in use alike.
 *   Probe: a cohort in VRAM nothing was seen of for probe_ticks (chunks of
 *   a region that came into VRAM together, same last_move, at most
 *   POLICY_COHORT_CHUNKS) is probed in one order, each chunk on its own:
 *   one page of each goes to the host, the chunk stays in VRAM.  A chunk
 *   whose page faults is in use (POLICY_CHUNK_PROBE cleared by the use).
 *   Expiry: a probe not used within probe_window ticks found its chunk
 *   unused: it is reported (expired[]), for the caller to mark it
 *   POLICY_CHUNK_COLD.
 * Re-arms and probes each have a lap of their own, round-robin over the
 * flat chunk index from their cursor (struct policy_sample_cursor),
 * looking at POLICY_LAP_CHUNKS of a priority's chunks a call at most; the
 * re-arm lap reports expired probes (the probe lap, where no re-arms are
 * wanted).  A cursor goes on from where its lap stopped, and the probes'
 * past the last cohort probed even after a whole lap.  One lap for both
 * from one cursor that went round whole (fewer candidates than the tick's
 * share, as in a decode, where a client's room for re-arms fills before
 * the share) started every tick at the same chunk: its probes fell, tick
 * after tick, on the first cohorts after it, in use, while VRAM further on
 * that nothing used was never probed. */
#define POLICY_COHORT_CHUNKS 8u
#define POLICY_PROBES_MAX    64u
/* The most chunks of its priority one lap of policy_sample() looks at: a
 * lap over more goes on from there at the next call.  So a sample's time
 * is bounded whatever the memory's size, as DAMON bounds its own: 128 Ki
 * chunks (256 GiB) took half a millisecond, and a lap over 1 Mi
 * chunks (2 TiB) goes round in eight ticks where it finds few candidates. */
#define POLICY_LAP_CHUNKS    131072u

struct policy_sample_params {
        uint32_t stale_ticks;  /* re-arm: not used within this long */
        uint32_t probe_ticks;  /* probe: nothing seen for this long */
        uint32_t probe_window; /* a probe not used again within this long of its eviction expired */
        uint32_t rearm_max;    /* chunks re-armed, all clients together */
        uint32_t probe_max;    /* cohorts probed, at most POLICY_PROBES_MAX */
        /* Probes only in regions of this client priority or lower: of the
         * highest priority of the demands held back, or lower
         * (policy_plan.held_priority).  A chunk of a higher priority
         * outranks all of them however cold it is, so its probe would make
         * room for nobody and cost its client a fault if it is in use.
         * POLICY_PRIORITY_MAX: every region.  The zero default is priority
         * 0 alone, which is every region where no client has a priority. */
        uint32_t probe_priority_max;
        /* With policy_input.clients: the most samples of one client in
         * flight, its own (policy_client.sampling_chunks, .probing_cohorts)
         * and these together.  A shim makes its client's samples in a queue
         * of its own, so one that is slow (busy with its moves) or does not
         * answer at all holds back its own sampling, not another's.
         * 0 = no such limit. */
        uint32_t client_rearm_max;
        uint32_t client_probe_max;
        uint32_t threads; /* of policy_input.workers', as policy_params.threads: for the sibling
                           * counts the sample reads (the lap itself runs on the calling thread) */
        /* The counts of a plan of the same input (its policy_plan.siblings),
         * read instead of counted again; NULL: counted anew.  Counting was
         * a third of a sample of 1M chunks.  The plan's orders
         * since change only chunks the lap passes by (an order in flight),
         * and whatever their offsets' counts held before. */
        const struct plan_siblings *siblings;
};

/* A probe: chunks [first, first + n) of region `region`, each probed on
 * its own (chunk = first); an expiry names one chunk (n = 1). */
struct policy_probe {
        uint32_t region, chunk, first, n;
};

struct policy_sample {
        struct policy_plan plan; /* re-arms: moves to POLICY_TIER_HOST of host chunks; policy_plan_clear() */
        struct policy_probe probes[POLICY_PROBES_MAX]; /* each one order, a page of each chunk */
        size_t n_probes;
        struct policy_probe expired[POLICY_PROBES_MAX]; /* probed chunks that went unused */
        size_t n_expired;
        uint64_t n_rearmed;
};

/* How often demand probes a client's chunks: every interval ticks
 * (1 .. POLICY_PROBE_INTERVAL_MAX), one prober per client and GPU
 * (policy_client.probes_off).  Probes that come back cost a round trip and
 * teach nothing new (the cohort is in use), so where most do, as when all
 * the client's VRAM is hot, the interval doubles; where most find cold
 * cohorts, it halves. */
#define POLICY_PROBE_INTERVAL_MAX 64u
struct policy_prober {
        uint32_t interval;
        uint32_t back, expired; /* probes resolved since the interval last changed */
};

/* Starts a prober probing every tick. */
void policy_prober_init(struct policy_prober *pr);

/* One tick: back and expired are the probes resolved in it.  Returns
 * whether this tick probes. */
bool policy_prober_tick(struct policy_prober *pr, uint32_t now, uint64_t back, uint64_t expired);

/* The chunks a tick of demand may re-arm, of its share: all of them, or
 * an eighth while demands wait for room (held_chunks) and probes are on.
 * Re-arms find demands; more demands than room are nothing a plan can act
 * on, while each re-arm takes the evictor time that a probe, which makes
 * room, needs: both queue behind the same evictor threads in the shim. */
#define POLICY_REARM_HELD_DIV 8u
uint32_t policy_rearm_share(uint32_t share, uint64_t held_chunks, uint32_t probe_cohorts);

/* How long a probe waits for its chunk's use, learnt from the probes
 * that came back: POLICY_PROBE_WINDOW_FACTOR times the time the slowest of
 * the recent returns took (the 90th percentile of the last
 * POLICY_PROBE_RETURNS; a late one, used after its probe expired, counts
 * with its full delay), within [min_ticks, max_ticks]; max_ticks until
 * POLICY_PROBE_RETURNS_KNOWN have been seen.  A return's delay is the
 * whole loop: the shim's queue, the engine's next use (a step), CUPTI's
 * flush and the daemon's tick.  A workload whose chunks show their use in
 * 20 ms has its VRAM judged within ~100 ms, one whose decode step takes
 * 150 ms keeps the longest window. */
#define POLICY_PROBE_RETURNS       32u
#define POLICY_PROBE_RETURNS_KNOWN 8u
#define POLICY_PROBE_WINDOW_FACTOR 3u

struct policy_probe_timing {
        uint32_t delay[POLICY_PROBE_RETURNS]; /* ticks, a ring */
        uint32_t n, next;
};

/* The shortest window for a protect_min of p ticks: an eighth of it, 2 ticks
 * at the least; the longest is protect_min itself. */
#define POLICY_PROBE_WINDOW_MIN(p) ((p) / 8 > 2u ? (p) / 8 : 2u)

/* Notes one return's delay (ticks from the probe to its chunk's use). */
void policy_probe_timing_note(struct policy_probe_timing *t, uint32_t delay_ticks);

/* A use at now of chunk c, which an expired probe had found cold (in VRAM,
 * nothing pending, its last_move still the probe's tick): the window was
 * too short for it, and the delay is noted as a return's.  A use more than
 * twice protect_min_ticks after the probe is a new use, not noted. */
void policy_probe_late(struct policy_probe_timing *t, const struct policy_chunk *c, uint32_t now,
                       uint32_t protect_min_ticks);

/* The window for probes ordered now; probes wait half of it unseen. */
uint32_t policy_probe_window(const struct policy_probe_timing *t, uint32_t min_ticks, uint32_t max_ticks);

/* Where the sampler's laps go on from, as flat chunk indices (taken modulo
 * the chunks of the input: any value is valid); zeroed to start. */
struct policy_sample_cursor {
        uint64_t rearm, probe;
};

/* One tick of sampling into *ret (overwritten), its laps from *cursor
 * (advanced).  Returns 0 or -ENOMEM (*ret left empty). */
int policy_sample(const struct policy_input *in, const struct policy_sample_params *sp,
                  struct policy_sample_cursor *cursor, struct policy_sample *ret);

/* The demand policy's thrash guard: how long a use keeps a chunk fresh.
 * An evicted chunk that faults again within min_ticks of its eviction (a
 * refault: back before any protection could have run out) shows the
 * protection too short for the workload.  Judged once every min_ticks:
 * where more than one eviction in eight came back the protection doubles;
 * where evictions stayed out it shrinks by a quarter; without evictions it
 * stays.  Between min_ticks and max_ticks.  The effect: when the chunks in
 * use outgrow the budget, VRAM keeps what it holds and the rest is read in
 * place (the zero-copy floor) instead of thrashing at eviction speed. */
struct policy_guard {
        uint32_t protect_ticks;
        uint32_t window_left;  /* ticks until the window is judged */
        uint64_t evicted;      /* chunks evicted in the window */
        uint64_t refaulted;    /* refaults in the window */
};

/* Sets g to min_ticks of protection and no history. */
void policy_guard_init(struct policy_guard *g, uint32_t min_ticks);

/* One tick: evicted chunks whose eviction completed and refaulted chunks
 * seen in it.  Returns the protection for the next plan. */
uint32_t policy_guard_tick(struct policy_guard *g, uint32_t min_ticks, uint32_t max_ticks, uint64_t evicted,
                           uint64_t refaulted);

/* Heat: one access = POLICY_HEAT_ONE; halves every half_life ticks. */
#define POLICY_HEAT_ONE 256u

/* A region's kernel launches a tick, in POLICY_LAUNCH_ONE for one a tick:
 * the mean over the ticks since its first launch, then a moving average
 * over POLICY_LAUNCH_RATE_TICKS.  It falls to 0 a thousand ticks or more
 * after the last launch (870 at one a tick), and starts over with the
 * next.  policy_launch_avg_rate() is what the policy is given
 * (policy_region.launch_rate): nothing (not known) before
 * POLICY_LAUNCH_FIRST_TICKS ticks, so that a region's first launches are
 * not taken for its rate; a region whose kernels the shim cannot see (CUDA
 * graphs) is not known either, not idle. */
#define POLICY_LAUNCH_ONE         65536u
#define POLICY_LAUNCH_FIRST_TICKS 8u
#define POLICY_LAUNCH_RATE_TICKS  128u
#define POLICY_LAUNCH_MAX        65535u /* launches a tick counted at most */

struct policy_launch_avg {
        uint32_t rate;  /* launches a tick, POLICY_LAUNCH_ONE each */
        uint32_t ticks; /* ticks averaged over, at most POLICY_LAUNCH_RATE_TICKS; 0 = none seen */
};

/* One tick that saw launches kernels launched on the region. */
static inline void policy_launch_avg_tick(struct policy_launch_avg *a, uint64_t launches) {
        uint64_t now = (launches < POLICY_LAUNCH_MAX ? launches : POLICY_LAUNCH_MAX) * (uint64_t)POLICY_LAUNCH_ONE;
        uint32_t w;

        if (a->ticks == 0 && launches == 0)
                return; /* nothing to average yet */
        w = a->ticks < POLICY_LAUNCH_RATE_TICKS ? a->ticks + 1 : POLICY_LAUNCH_RATE_TICKS;
        /* the old mean's share rounded up, so that it reaches 0 */
        a->rate = (uint32_t)(a->rate - (a->rate + (uint64_t)w - 1) / w + now / w);
        a->ticks = a->rate ? w : 0;
}

/* The rate the policy ranks by: 0 (not known) while fewer than
 * POLICY_LAUNCH_FIRST_TICKS ticks are averaged. */
static inline uint32_t policy_launch_avg_rate(const struct policy_launch_avg *a) {
        return a->ticks >= POLICY_LAUNCH_FIRST_TICKS ? a->rate : 0;
}

/* Whether chunk c is a probe in VRAM, made (its last_move), that went
 * unused for more than window ticks since: cold.  The sampler's lap marks
 * it so (policy_sample()); policy_plan() takes it for cold at once. */
static inline bool policy_probe_unanswered(const struct policy_chunk *c, uint32_t now, uint32_t window) {
        return (c->flags & POLICY_CHUNK_PROBE) && c->tier == POLICY_TIER_VRAM && c->pending == POLICY_TIER_NONE &&
               c->last_move && now >= c->last_move && now - c->last_move > window;
}

/* Whether host chunk c came there by a mapped eviction and was neither
 * seen used nor re-armed since.  Its sample page should be unmapped, so that
 * its next use faults; but a touch while the eviction moved may have mapped
 * it with no remote map naming that page.  In a two-engine pair on the H200
 * 24 chunks of a buffer the engine wrote every step stayed booked so,
 * unseen, for 14 s, read in place (tests/bench/RESULTS.md, twenty-first
 * session).  So demand's sampler re-arms such a chunk once
 * (policy_sample()): if it is in use, that shows at once. */
static inline bool policy_chunk_unverified(const struct policy_chunk *c) {
        return c->tier == POLICY_TIER_HOST &&
               (c->flags & (POLICY_CHUNK_OWN_MAP | POLICY_CHUNK_REARMED | POLICY_CHUNK_MAPPED)) == POLICY_CHUNK_OWN_MAP;
}

/* How long after a mapped eviction (tier HOST_MAPPED) a use seen of its
 * chunk is taken for the eviction's own mapping: SetAccessedBy makes the
 * driver map each chunk, and CUPTI reports those remote maps as it reports
 * a fault's (same kind, same cause, on the H200), within a flush or two
 * (the shim's CUPTI_FLUSH_MS, 10 ms).  Milliseconds. */
#define POLICY_EVICT_QUIET_MS 50u

/* The quiet window in ticks of tick_us: POLICY_EVICT_QUIET_MS rounded up
 * (one tick at the least: a tick longer than the window is one). */
static inline uint32_t policy_evict_quiet_ticks(uint64_t tick_us) {
        return tick_us ? (uint32_t)((POLICY_EVICT_QUIET_MS * 1000ull + tick_us - 1) / tick_us) : 1;
}

/* Whether a use seen at now of chunk c is taken for a mapped eviction's
 * own mapping, not the engine's: the eviction is in flight, or it came to
 * host memory by one within quiet_ticks (policy_evict_quiet_ticks()) and
 * was not re-armed since.  Such a use is no use: the daemon books the
 * chunk mapped (to be re-armed before it is seen again) and counts neither
 * a demand nor a refault, and kvtier-sim does the same.  So an engine's
 * own use in that window goes unseen: the thrash guard does not count a
 * chunk that comes back so soon. */
static inline bool policy_own_mapping(const struct policy_chunk *c, uint32_t now, uint32_t quiet_ticks) {
        if (c->pending == POLICY_TIER_HOST_MAPPED)
                return true;
        return (c->flags & (POLICY_CHUNK_OWN_MAP | POLICY_CHUNK_REARMED)) == POLICY_CHUNK_OWN_MAP && c->last_move &&
               now - c->last_move <= quiet_ticks;
}

/* Whether a fault at now on host chunk c is a refault: back within
 * protect_min_ticks of the move that took it there (a re-arm is no move).
 * What the thrash guard counts (policy_guard_tick()), in the daemon and in
 * kvtier-sim alike. */
static inline bool policy_refault(const struct policy_chunk *c, uint32_t now, uint32_t protect_min_ticks) {
        return c->last_move && !(c->flags & POLICY_CHUNK_REARMED) && now - c->last_move <= protect_min_ticks;
}

/* demand: whether chunk c, not charged to VRAM, is fresh age ticks after
 * its last use: used within the protection and, for a chunk that never was
 * in VRAM nor re-armed (a use after a re-arm follows an earlier one), seen
 * used twice (policy_plan() ranks such chunks above those in VRAM that are
 * not fresh, and promotes them as far as the budget lets it; the daemon
 * counts the ones it held back by the same rule). */
static inline bool policy_demand_fresh_outside(const struct policy_chunk *c, uint32_t age, uint32_t protect_ticks) {
        return age < protect_ticks && (c->last_move != 0 || c->heat > POLICY_HEAT_ONE);
}

/* The chunk's heat at tick now (decayed from last_use). */
uint32_t policy_heat_at(const struct policy_chunk *c, uint32_t now, uint32_t half_life_ticks);

/* Records n accesses of a chunk at tick now: decays its heat to now, adds n,
 * sets last_use.  Saturates instead of wrapping. */
void policy_chunk_touch(struct policy_chunk *c, uint32_t now, uint32_t n, uint32_t half_life_ticks);

/* demand's touch: a use, however many fault records it came as, and a
 * touch within a tick of the last use (an access whose records straddled
 * two flushes) the same use, only refreshing last_use.  What "seen used
 * twice" (demand, above) counts. */
void policy_chunk_use(struct policy_chunk *c, uint32_t now, uint32_t half_life_ticks);

/* Heat class: 0 for less than one access-equivalent, else 1 + log2(heat in accesses), at most 15. */
unsigned policy_heat_class(uint32_t heat);
