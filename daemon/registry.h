/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The daemon's books: clients (one per shim connection), their regions and
 * per-chunk state, per-GPU budgets and in-flight orders.
 *
 * Budget accounting is kvtier's own (cudaMemGetInfo does not show UVM
 * eviction): a chunk is charged against its GPU's budget while its tier is
 * VRAM or an order to VRAM is pending for it.  An eviction keeps the chunk
 * charged until its ORDER_DONE.  No charge ever takes charged_bytes over
 * budget_bytes plus the overlap allowance: [policy] overlap, at most the
 * bytes of the evictions in flight (asserted).  Only lowering the budget
 * live (a percentage budget also when most users' device totals change),
 * or an eviction that failed under overlap, can leave it over, until the
 * planner's evictions are done.  peak_charged_bytes records the
 * maximum.
 *
 * Host memory is booked per NUMA node: a chunk not in VRAM is charged to
 * the node of its host copy (chunk.node; chunks kvtier never moved count on
 * their GPU's home node, as the shim reported it), and an eviction to its
 * target node from the moment it is ordered until it failed.  An eviction
 * order never takes a node with a host budget over it (-ENOSPC); regions
 * registered in host memory may, until the planner's promotions drain it.
 */

#include <assert.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "conf.h"
#include "move-latency.h"
#include "policy.h"
#include "protocol.h"

/* Caps on what one peer can make the daemon hold. */
#define REGISTRY_MAX_CLIENTS            1024
#define REGISTRY_MAX_REGIONS_PER_CLIENT 65536
/* Order ids remembered per client after their region went away, so that a
 * late ORDER_DONE is told apart from a bogus one. */
#define REGISTRY_MAX_FORGOTTEN_ORDERS 65536

struct registry;
struct client;
struct region;

#define CHUNK_PINNED POLICY_CHUNK_PINNED
#define CHUNK_HOT    POLICY_CHUNK_HOT
#define CHUNK_MAPPED POLICY_CHUNK_MAPPED

static_assert((int)KVT_TIER_NONE == (int)POLICY_TIER_NONE && (int)KVT_TIER_VRAM == (int)POLICY_TIER_VRAM &&
                      (int)KVT_TIER_HOST_MAPPED == (int)POLICY_TIER_HOST_MAPPED &&
                      (int)KVT_TIER_HOST == (int)POLICY_TIER_HOST,
              "the policy's tiers are the protocol's");

/* Per-chunk state is the policy's view itself (policy.h): 16 bytes, so 1 M
 * chunks (2 TiB) cost 16 MiB and a tick's snapshot copies nothing. */
static_assert(sizeof(struct policy_chunk) <= 32, "daemon state per chunk must stay <= 32 bytes");

struct gpu_stats {
        int device;
        int host_node; /* home host NUMA node (the shim's cudaDevAttrHostNumaId); -1 = unknown */
        bool budget_resolved; /* false while a percentage waits for a device total */
        uint64_t budget_bytes;
        uint64_t charged_bytes;
        uint64_t peak_charged_bytes;
        uint64_t evicting_chunks; /* charged chunks with an eviction in flight */
        uint64_t tier_chunks[_KVT_TIER_MAX]; /* by confirmed tier */
        uint64_t inflight_orders;
        uint64_t sampling_chunks; /* chunks of the re-arms in flight: the next tick's sample waits for them */
        uint64_t probing_orders;  /* probes (cohorts) in flight, likewise */
        /* What the GPU gave away, counted since the start: */
        uint64_t demand_faults;  /* uses seen of chunks in host memory (faults, launch pointers) */
        uint64_t refaults;       /* of those, chunks evicted within [policy] protect_min before */
        uint64_t evicted_chunks; /* evictions completed, probes not counted */
        uint64_t rearmed_chunks; /* re-arms completed */
        uint64_t own_maps_ignored; /* uses seen during or just after a mapped eviction: its own mapping */
        /* re-arms of chunks a mapped eviction left unverified
         * (policy_chunk_unverified()), and of those the chunks seen used
         * next, before any other move: uses the eviction had hidden, or
         * come since */
        uint64_t verified_chunks, verified_used;
        /* Chunk uses seen (registry_chunk_touch(): one per chunk and tick it
         * was seen used in, its own mappings not counted), by the chunk's
         * confirmed tier then: [KVT_TIER_VRAM] over the sum is the VRAM hit
         * rate of what the daemon sees. */
        uint64_t uses_seen[_KVT_TIER_MAX];
        /* demand: demands (first uses seen in host memory) that the plan after
         * them held back while the VRAM budget was full and no rate limit cut
         * the plan: each a promotion, and the eviction of a chunk in use it
         * would have taken, that the thrash guard avoided. */
        uint64_t evictions_avoided;
        uint64_t rearm_ns;       /* their time in the shim, queue included */
        uint64_t probe_ns;       /* probes' time in the shim, queue included: with rearm_ns, the sampler's cost */
        uint64_t probes;         /* probes ordered, those that came back (their cohort in use) */
        uint64_t probes_back;
        uint64_t probes_expired; /* and those that did not: their cohort found cold */
        struct policy_probe_timing probe_timing; /* how long probes took to come back */
        uint32_t probe_window_ticks;             /* the window it gave, as the last sample used it */
        uint32_t probe_every_ticks;              /* the clients' shortest prober interval (client_demand) */
        uint64_t moved_bytes[_MOVE_DIRECTION_MAX]; /* by completed moves: chunks whose tier they changed */
        struct move_latency moves[_MOVE_DIRECTION_MAX]; /* completed moves' time in the shim */
        /* As the last plan left them (planner.c): */
        uint32_t protect_ticks;  /* the thrash guard's protection */
        uint64_t held_chunks;    /* demands held back: read in place */
        uint32_t held_priority;  /* the highest client priority of those (probes go no higher) */
        uint64_t stale_chunks;   /* chunks in VRAM a new capture may displace (policy_plan) */
        uint64_t cold_chunks;    /* of them, those a demand may displace: found unused */
        /* sibling regions (policy/siblings.h): groups, those that tell nothing,
         * their regions; demands and stale chunks on siblings' word alone */
        uint32_t sibling_groups, sibling_groups_mute, sibling_regions;
        uint64_t sibling_demand_chunks, sibling_stale_chunks;
        uint64_t grantable_bytes; /* VRAM new captures may start in, all clients together */
        uint64_t grant_reserved_bytes; /* of the grants, what captures may hold unregistered */
        uint64_t grant_over_bytes;     /* of grantable_bytes, the part over the budget (the margin granted) */
        uint64_t roomless_chunks;  /* promotions the last plan wanted that found no room */
};

struct node_stats {
        int node;
        bool limited;          /* a [numa.N] host_budget applies */
        uint64_t budget_bytes; /* when limited */
        uint64_t charged_bytes; /* host copies on the node, and evictions under way to it */
        uint64_t host_chunks;   /* chunks whose host copy is on the node now */
        uint64_t peak_charged_bytes; /* most charged right after one of kvtier's own evictions was ordered */
};

struct migration_stats {
        uint64_t orders_sent;
        uint64_t orders_done;   /* completed with status 0 */
        uint64_t orders_failed; /* completed with status < 0 */
        uint64_t orders_cancelled; /* region freed in the shim before the order ran */
        uint64_t bytes_to_vram;
        uint64_t bytes_to_host;
};

/* Returns 0 and an empty registry taking budgets from conf (which must
 * outlive it), or -ENOMEM. */
int registry_new(const struct conf *conf, struct registry **ret);

/* Frees r and everything in it.  Accepts NULL; returns NULL. */
struct registry *registry_free(struct registry *r);

struct topology;
/* Gives the registry the host's NUMA nodes (which must outlive it): they
 * appear in the books, and percentage host budgets resolve from their
 * MemTotal.  Returns 0, or -EINVAL (logged) when a [numa.N] percentage
 * names a node whose MemTotal is unknown. */
int registry_set_topology(struct registry *r, const struct topology *t);

/* Re-reads a node's host budget from the config (after a live change).
 * Returns 0, or -EINVAL (logged, the old budget kept) for a percentage of
 * a node whose MemTotal is unknown. */
int registry_node_budget_reload(struct registry *r, int node);

/* The probe window the planner's sample used this tick, and the prober's
 * interval (status). */
void registry_gpu_sampled(struct registry *r, int device, uint32_t probe_window_ticks, uint32_t probe_every_ticks);

/* Sets what the last plan of a GPU found (held and stale chunks, what
 * siblings told, the protection in force), for grants and status. */
void registry_gpu_planned(struct registry *r, int device, uint32_t protect_ticks, const struct policy_plan *plan);

/* After a plan of GPU device was issued: judges the demands seen since the
 * last (registry_chunk_touch()) and forgets them.  With judge (the demand
 * policy planned, no rate limit cut the plan), each chunk still in host
 * memory with no promotion ordered, fresh by its client's protection
 * (its guard's; protect_ticks before the client has one;
 * policy_demand_fresh_outside()), not pinned, while the budget has no
 * room for one more chunk, counts in gpu_stats.evictions_avoided. */
void registry_gpu_judge_demands(struct registry *r, int device, uint32_t protect_ticks, bool judge);

/* Re-reads a GPU's budget from the config (after a live change) and marks
 * the GPU present.  Chunks charged over a lowered budget stay charged until
 * the planner has evicted them. */
void registry_budget_reload(struct registry *r, int device);

/* The current tick (starts at 1; last_use 0 is colder than anything). */
uint32_t registry_tick(const struct registry *r);
void registry_advance_tick(struct registry *r);

/* Registers a client; userdata is the caller's (the peer).  Returns 0,
 * -EUSERS when REGISTRY_MAX_CLIENTS are connected, or -ENOMEM. */
int registry_client_new(struct registry *r, pid_t pid, uid_t uid, const struct kvt_hello *hello,
                        void *userdata, struct client **ret);

/* Drops a client with all its regions (uncharged) and orders (forgotten).
 * Accepts NULL. */
void registry_client_free(struct registry *r, struct client *c);

/* Notes a GPU a client uses (DEVICE message): the GPU appears in the
 * books, a percentage budget resolves from its total (a budget resolved
 * earlier stays as it is), and a known home node is recorded. */
void registry_device_seen(struct registry *r, const struct kvt_device *d);
/* As registry_device_seen() for a DEVICE of client c.  Device totals (of
 * the DEVICE, and of a HELLO) count per user: a figure past any GPU's
 * (16 TiB) is taken as unknown, a user's first figure stands for it, and a
 * percentage budget follows the figure the most users agree on (within
 * 2%; of figures as well agreed, the smallest), so that one liar moves no
 * one's budget. */
void registry_client_device_seen(struct registry *r, const struct client *c, const struct kvt_device *d);

/* Registers a region, its chunks hottest (last_use = now).  A region the
 * shim started in VRAM is booked there as far as the client's GRANT covers
 * it (and counts against it), the rest as unplaced; one started in host
 * memory is booked there, unmapped.  The quotas of [daemon] are checked
 * before anything is allocated: a region past them is refused, and its id
 * remembered, so that the shim's REGION_DEL and HINTs of it (it does not
 * know) are no errors.  Returns 0, -EEXIST (duplicate region_id),
 * -EADDRINUSE (overlaps another region of the client), refusals -E2BIG
 * (max_regions_per_client), -ENOSPC (max_chunks) or -EDQUOT
 * (max_registered_per_client, max_registered_per_uid), or -ENOMEM. */
int registry_region_add(struct registry *r, struct client *c, const struct kvt_region_add *add);

/* Deletes a region: uncharges it, forgets its orders.  Returns 0 (also for
 * a region refused by a quota) or -ENOENT. */
int registry_region_del(struct registry *r, struct client *c, uint32_t region_id);

/* [daemon] max_registered_per_uid, resolved (0 there: four times the VRAM
 * budgets known plus the host budget), and what uid holds registered now. */
uint64_t registry_uid_quota(const struct registry *r);
uint64_t registry_uid_registered(const struct registry *r, uid_t uid);

/* Applies a HINT: HOT, WILL_NEED and PINNED count one access now; HOT also
 * sets CHUNK_HOT (kept above unhinted chunks until COLD or DONE), PINNED
 * sets CHUNK_PINNED (never evicted); COLD sets last_use and heat to 0 and
 * clears CHUNK_HOT; DONE does too and clears CHUNK_PINNED.  Returns 0, -ENOENT (no
 * such region) or -ERANGE (chunks outside it). */
int registry_hint(struct registry *r, struct client *c, const struct kvt_hint *hint);

/* Records n accesses of a chunk observed during the current tick (from the
 * heat sampler): decays its heat to now and adds n (half-life from the
 * config), and marks the region active.  The first use of a chunk in host
 * memory since it got there is a demand: the GPU faulted and has mapped it
 * now (CHUNK_MAPPED); a probe that comes back refreshes its cohort; a chunk
 * back within [policy] protect_min of its eviction is a refault.  A chunk
 * index outside the region is ignored. */
void registry_chunk_touch(struct registry *r, struct region *reg, uint32_t chunk, uint32_t n);

/* Kernels launched on reg since the last call (its heat table's count),
 * counted in this tick; the first call of a later tick moves its launch
 * average on by the tick before.  Called at each read of its counters:
 * every tick, and again at a demand's re-plan within one. */
void registry_region_launched(struct registry *r, struct region *reg, uint64_t n);

/* Marks the chunks of [first, first + n) in VRAM as probes, each of its
 * own, once their probe was ordered (registry_probe_new()): a chunk used
 * within [policy] protect_min of it is in use. */
void registry_probe_mark(struct registry *r, struct region *reg, uint32_t first, uint32_t n);

/* A probe of chunk (policy_sample()'s expired[]) went unused: the chunk,
 * if still in VRAM, is marked cold, which demand may displace. */
void registry_probe_expired(struct registry *r, struct region *reg, uint32_t chunk);

/* As registry_order_new() for a probe (KVT_ORDER_PROBE) of chunks
 * [first, first + n), all in VRAM, where they stay in the books (the order
 * says tier HOST: one page of each goes there).  Returns 0, -EBUSY,
 * -EINVAL (a chunk not in VRAM), -ERANGE or -ENOMEM. */
int registry_probe_new(struct registry *r, struct region *reg, uint32_t first, uint32_t n, struct kvt_order *ret);

/* As registry_order_new() for a re-arm (KVT_ORDER_REARM) of chunks
 * [first, first + n), all in host memory (tier HOST).  Returns 0, -EBUSY,
 * -EINVAL (a chunk not in host memory), -ERANGE or -ENOMEM. */
int registry_rearm_new(struct registry *r, struct region *reg, uint32_t first, uint32_t n, struct kvt_order *ret);

/* The GRANT cap for client c on device, as the books stand: the bytes it
 * started in VRAM there so far plus its share (clients using the GPU
 * alike) of what new captures may take: the free budget but the room the
 * last plan's promotions wanted (gpu_stats.roomless_chunks), and up to
 * [gpu] capture_margin over it as far as the last plan saw chunks in VRAM
 * a capture may displace (gpu_stats.stale_chunks); never room another
 * client's grant still holds (grants.h), and nothing for a client that
 * does not use the GPU.  Also records the GPU's grantable_bytes and
 * grant_over_bytes. */
uint64_t registry_grant_cap(struct registry *r, const struct client *c, int device);

/* registry_grant_cap() of every client for device, in one pass over the
 * clients (the terms shared by all computed once): fn(c, cap, userdata)
 * for each, which may send a GRANT and book it (registry_grant_sent());
 * the room that holds counts for the clients after it. */
typedef void (*registry_grant_fn)(struct client *c, uint64_t cap, void *userdata);
void registry_grant_pass(struct registry *r, int device, registry_grant_fn fn, void *userdata);

/* demand's state of one client on one GPU: its thrash guard, fed that
 * client's own evictions and refaults there, and its prober, fed the
 * probes of its own chunks that came back or expired (the registry counts
 * them; the planner ticks both).  So one client's evictions coming back
 * stretch no other client's protection, and one client whose VRAM is all
 * in use (its probes come back) slows no other client's probes. */
struct client_demand {
        struct policy_guard guard;
        struct policy_prober prober;
        bool started;
        bool probe_now; /* the prober's say for this tick */
        /* counted by the registry, ever */
        uint64_t evicted, refaults, probes_back, probes_expired;
        /* as the guard and the prober last took them */
        uint64_t evicted_seen, refaults_seen, back_seen, expired_seen;
};
/* The client's state on device (NULL for a bad device), its protection
 * there in ticks and its prober's interval (0 before it started). */
struct client_demand *client_demand(struct client *c, int device);
uint32_t client_protect_ticks(const struct client *c, int device);
uint32_t client_probe_every_ticks(const struct client *c, int device);

/* The cap of the client's last GRANT for device (0 before any), the bytes
 * it started in VRAM there since it connected, and setting a cap in force
 * at once (the WELCOME's). */
uint64_t client_grant_cap(const struct client *c, int device);
uint64_t client_vram_started(const struct client *c, int device);
void client_set_grant_cap(struct client *c, int device, uint64_t cap_bytes);
/* Whether the client's last GRANT for device is unanswered (no other is
 * sent before its GRANT_ACK). */
bool client_grant_waiting(const struct client *c, int device);
/* The client's grant book on device (status), NULL for a bad device. */
const struct grant_book *client_grant_book(const struct client *c, int device);

/* A GRANT of cap_bytes about to be sent to c: its room is the client's
 * until acknowledged.  Returns the GRANT's seq (0 for a bad device). */
uint32_t registry_grant_sent(struct registry *r, struct client *c, int device, uint64_t cap_bytes);
/* A GRANT_ACK of c: the cap of the GRANT it names is in force, and the
 * shim had taken started_bytes from its grants by then.  Returns 1 when
 * that lowered what the client holds, 0 when it did not (or says it
 * again), -EINVAL for a GRANT not sent or not the last. */
int registry_grant_acked(struct registry *r, struct client *c, const struct kvt_grant_ack *a);
/* VRAM on device that the clients' grants hold for captures not yet
 * claimed: what each may have started, past what it claimed (grants.h).
 * Promotions stay out of it past the margin granted (planner.c).  A
 * client that leaves its GRANT unanswered for 5 s (logged once per
 * client) is taken to have started no more than its cap.  Also records
 * the GPU's grant_reserved_bytes. */
uint64_t registry_grants_reserved(struct registry *r, int device);
/* The percentage of the last PACE sent to the client (planner.c), 100
 * before any. */
unsigned client_pace(const struct client *c);
void client_set_pace(struct client *c, unsigned percent);
/* The client's samples in flight, on all its GPUs: chunks of its re-arms,
 * and its probes (orders). */
uint64_t client_sampling_chunks(const struct client *c);
uint64_t client_probing_orders(const struct client *c);
/* Of the client's re-arms and probes, those ever sent (chunks, orders). */
uint64_t client_rearmed_chunks(const struct client *c);
uint64_t client_probes(const struct client *c);

/* Creates an order for chunks [first, first + n) of a region: marks them
 * pending, charges promotions to the GPU and evictions to host_node (-1:
 * the shim's choice, booked nowhere; ignored for VRAM).  Chunks already in
 * host memory stay on their node.  Fills *ret for sending.  Returns 0,
 * -EBUSY (a chunk is pending already), -ENOSPC (a promotion would exceed
 * the VRAM budget, or an eviction the node's host budget), -ERANGE or
 * -ENOMEM. */
int registry_order_new(struct registry *r, struct region *reg, uint32_t first, uint32_t n, uint32_t tier,
                       int host_node, struct kvt_order *ret);

/* Applies an ORDER_DONE.  Returns 1 if the order had failed, 0 if it is
 * done or was forgotten (its region went away), -ENOENT for an id this
 * client never had. */
int registry_order_done(struct registry *r, struct client *c, const struct kvt_order_done *done);

/* Takes back the orders of client c made timeout_ns or more before now
 * (CLOCK_MONOTONIC) and still unanswered: their chunks are booked as
 * unplaced and charged nowhere, their ids remembered so that a late
 * ORDER_DONE is ignored.  Returns how many; client_order_timeouts() sums
 * them since the client connected. */
unsigned registry_client_expire_orders(struct registry *r, struct client *c, uint64_t now, uint64_t timeout_ns);
unsigned client_order_timeouts(const struct client *c);

/* Iteration in registration order; NULL at the end. */
struct client *registry_clients(const struct registry *r);
struct client *client_next(const struct client *c);
struct region *registry_regions(const struct registry *r); /* all regions, oldest first */
struct region *region_next(const struct region *reg);

/* A GPU's books, NULL until a client or region used it or [gpu.N] named it. */
const struct gpu_stats *registry_gpu(const struct registry *r, int device);
const struct migration_stats *registry_migrations(const struct registry *r);
/* A host node's books, NULL unless the topology, a [numa.N] budget, a
 * GPU's home or a booked chunk named it. */
const struct node_stats *registry_node(const struct registry *r, int node);

uint32_t client_id(const struct client *c);
pid_t client_pid(const struct client *c);
uid_t client_uid(const struct client *c);
const char *client_name(const struct client *c);
/* The [client.NAME] section (conf_client_match()) the server found for the
 * client's kernel identity, or -1 (the default). */
int client_section(const struct client *c);
void client_set_section(struct client *c, int section);
int client_device(const struct client *c);
void *client_userdata(const struct client *c);
/* Regions of a client ordered by region_id: index 0 .. client_n_regions()-1. */
size_t client_n_regions(const struct client *c);
const struct region *client_region(const struct client *c, size_t i);

struct client *region_client(const struct region *reg);
uint32_t region_id(const struct region *reg);
int region_device(const struct region *reg);
uint64_t region_base(const struct region *reg);
uint64_t region_size(const struct region *reg);
uint32_t region_api(const struct region *reg);
/* enum kvt_capture_rule that made the shim take it. */
uint32_t region_rule(const struct region *reg);
/* Tracked for visibility only (VMM): never planned, never moved. */
bool region_untiered(const struct region *reg);
uint32_t region_n_chunks(const struct region *reg);
const struct policy_chunk *region_chunks(const struct region *reg);
/* Tick of the last use seen in the region (a kernel launched on it, a fault in it); 0 = never. */
uint32_t region_last_active(const struct region *reg);
/* Kernels launched on it a tick, averaged (struct policy_launch_avg); 0 = none seen lately. */
uint32_t region_launch_rate(const struct region *reg);
uint64_t region_tier_chunks(const struct region *reg, uint32_t tier);
