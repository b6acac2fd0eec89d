/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "log.h"
#include "planner.h"
#include "policy.h"
#include "topology.h"
#include "util.h"
#include "workers.h"

struct planner {
        const struct conf *conf;
        struct policy_region *views; /* the GPU's regions, oldest first */
        struct region **regions;     /* view index -> region */
        size_t cap_regions;
        uint64_t credit_bytes; /* global rate limit: token bucket over all GPUs */
        struct policy_client *clients; /* the GPU's clients with a [client.NAME] section or not */
        struct client **client_of;     /* policy client index -> registry client */
        size_t n_clients, cap_clients;
        const struct topology *topo;               /* NULL: no distances */
        struct workers *workers;                   /* the plans' threads */
        unsigned workers_for, workers_asked;       /* [policy] threads they were sized for; threads asked */
        struct policy_node nodes[KVT_MAX_NODES];   /* of the GPU being planned, in order of preference */
        struct gpu_demand {                        /* demand's state per GPU (per client: client_demand) */
                struct policy_sample_cursor sample_cursor;
                uint32_t tick_rearmed; /* chunks re-armed in this tick's plans */
                uint32_t tick_probed;  /* cohorts probed in this tick's plans */
        } demand[KVT_MAX_GPUS];
};

void planner_set_topology(struct planner *p, const struct topology *t) {
        p->topo = t;
}

/* Sizes the plans' pool for the [policy] threads setting, once at start
 * and again when the setting changed (kvtierctl set policy.threads): a pool
 * of another size replaces the old one, which is joined first.  Returns 0
 * or -ENOMEM (then without a pool: planner_workers_policy()). */
static int planner_workers(struct planner *p, unsigned threads) {
        unsigned want;
        int ret;

        if (p->workers && threads == p->workers_for)
                return 0;
        want = workers_threads_for(threads);
        if (p->workers && want == p->workers_asked) {
                p->workers_for = threads;
                return 0;
        }
        p->workers = workers_free(p->workers);
        ret = workers_new(want, &p->workers);
        if (ret < 0)
                return ret;
        p->workers_for = threads;
        p->workers_asked = want;
        if (workers_n(p->workers) < want)
                log_warning("Failed to start %u of %u planner threads, planning on %u.",
                            want - workers_n(p->workers), want, workers_n(p->workers));
        else
                log_debug("Planner threads: %u ([policy] threads = %u).", want, threads);
        return 0;
}

/* The pool as the policy takes it; NULL (the tick's thread) without one. */
static const struct policy_workers *planner_workers_policy(const struct planner *p) {
        return p->workers ? workers_policy(p->workers) : NULL;
}

int planner_new(const struct conf *conf, struct planner **ret) {
        struct planner *p = calloc(1, sizeof(*p));
        struct policy_params pp;

        if (!p)
                return -ENOMEM;
        p->conf = conf;
        conf_policy_params(conf, &pp);
        if (planner_workers(p, pp.threads) < 0) {
                free(p);
                return -ENOMEM;
        }
        *ret = p;
        return 0;
}

struct planner *planner_free(struct planner *p) {
        if (!p)
                return NULL;
        workers_free(p->workers);
        free(p->views);
        free(p->regions);
        free(p->clients);
        free(p->client_of);
        free(p);
        return NULL;
}

static int planner_grow(struct planner *p) {
        size_t cap = p->cap_regions ? p->cap_regions * 2 : 64;
        struct policy_region *v;
        struct region **a;

        v = realloc(p->views, cap * sizeof(*v));
        if (!v)
                return -ENOMEM;
        p->views = v;
        a = realloc(p->regions, cap * sizeof(*a));
        if (!a)
                return -ENOMEM;
        p->regions = a;
        p->cap_regions = cap;
        return 0;
}

/* The policy's index for a region's client, added with its [client.NAME]
 * priority and quota and its samples in flight on first sight.  Returns
 * the index or -ENOMEM. */
static ssize_t planner_client(struct planner *p, struct client *c) {
        unsigned prio = 0;
        uint64_t quota = UINT64_MAX;

        if (p->n_clients && p->client_of[p->n_clients - 1] == c)
                return (ssize_t)p->n_clients - 1; /* regions of a client mostly come together */
        for (size_t i = 0; i < p->n_clients; i++)
                if (p->client_of[i] == c)
                        return (ssize_t)i;
        if (p->n_clients == p->cap_clients) {
                size_t cap = p->cap_clients ? p->cap_clients * 2 : 16;
                struct policy_client *pc = realloc(p->clients, cap * sizeof(*pc));
                struct client **co;

                if (!pc)
                        return -ENOMEM;
                p->clients = pc;
                co = realloc(p->client_of, cap * sizeof(*co));
                if (!co)
                        return -ENOMEM;
                p->client_of = co;
                p->cap_clients = cap;
        }
        conf_client(p->conf, client_section(c), &prio, &quota);
        p->clients[p->n_clients] = (struct policy_client){
                .quota_chunks = quota == UINT64_MAX ? UINT64_MAX : quota / KVT_CHUNK_BYTES,
                .priority = (uint8_t)prio,
                .sampling_chunks = (uint32_t)MIN(client_sampling_chunks(c), (uint64_t)UINT32_MAX),
                .probing_cohorts = (uint32_t)MIN(client_probing_orders(c), (uint64_t)UINT32_MAX)};
        p->client_of[p->n_clients] = c;
        return (ssize_t)p->n_clients++;
}

/* Points p->views at the chunks of the GPU's regions, oldest region first:
 * the registry's per-chunk state is the policy's input, nothing is copied.
 * Also each region's client: its [client.NAME] priority and quota, and its
 * samples in flight (one client's regions alone are siblings, and one
 * client's slow shim holds back only its own samples). */
static int planner_snapshot(struct planner *p, struct registry *r, int device, size_t *ret_n) {
        size_t n_regions = 0;

        p->n_clients = 0;
        for (struct region *reg = registry_regions(r); reg; reg = region_next(reg)) {
                ssize_t ci;

                if (region_device(reg) != device || region_untiered(reg))
                        continue;
                ci = planner_client(p, region_client(reg));
                if (ci < 0)
                        return (int)ci;
                if (n_regions == p->cap_regions) {
                        int ret = planner_grow(p);

                        if (ret < 0)
                                return ret;
                }
                p->views[n_regions] = (struct policy_region){.chunks = region_chunks(reg),
                                                             .n_chunks = region_n_chunks(reg),
                                                             .client = (uint32_t)ci,
                                                             .last_active = region_last_active(reg),
                                                             .launch_rate = region_launch_rate(reg)};
                p->regions[n_regions++] = reg;
        }
        *ret_n = n_regions;
        return 0;
}

/* Tops up the global rate credit once per tick (all GPUs share it). */
static void planner_rate_refill(struct planner *p) {
        uint64_t rate = conf_max_migration_rate(p->conf);
        uint64_t per_tick, cap;

        if (rate == 0)
                return;
        per_tick = rate / 1000 * conf_tick_ms(p->conf);
        cap = MAX(per_tick, KVT_CHUNK_BYTES);
        p->credit_bytes = MIN(p->credit_bytes + per_tick, cap);
}

static uint64_t planner_rate_chunks(const struct planner *p) {
        return conf_max_migration_rate(p->conf) == 0 ? UINT64_MAX : p->credit_bytes / KVT_CHUNK_BYTES;
}

/* Chunks a node can take before its host budget is full. */
static uint64_t node_room(const struct node_stats *ns) {
        if (!ns->limited)
                return UINT64_MAX;
        return ns->budget_bytes > ns->charged_bytes ? (ns->budget_bytes - ns->charged_bytes) / KVT_CHUNK_BYTES : 0;
}

/* Sort key of node k for evictions from a GPU whose home node is home:
 * the home node first, then by distance from it (unknown: last), then by id. */
static unsigned node_order_key(const struct planner *p, int home, int k) {
        unsigned d = 256;

        if (k == home)
                return 0;
        if (home >= 0 && p->topo && p->topo->distance[home][k])
                d = p->topo->distance[home][k];
        return d << 8 | (unsigned)k;
}

/* Fills p->nodes with the nodes evictions from a GPU may go to, in order
 * of preference.  A node sysfs shows without memory takes none (unless it
 * is the home node).  Returns their number. */
static size_t planner_nodes(struct planner *p, const struct registry *r, int home) {
        size_t n = 0;

        for (int k = 0; k < KVT_MAX_NODES; k++) {
                const struct node_stats *ns = registry_node(r, k);
                size_t at = n;

                /* Nodes the host does not show (a config naming one) and nodes
                 * without memory take no evictions. */
                if (!ns || (p->topo && p->topo->present &&
                            (!(p->topo->present & (1ull << k)) ||
                             (k != home && p->topo->mem_total_bytes[k] == 0))))
                        continue;
                /* insertion sort: at most 64 nodes */
                while (at > 0 && node_order_key(p, home, p->nodes[at - 1].id) > node_order_key(p, home, k)) {
                        p->nodes[at] = p->nodes[at - 1];
                        at--;
                }
                p->nodes[at] = (struct policy_node){.id = k, .room_chunks = node_room(ns)};
                n++;
        }
        return n;
}

static int planner_issue(struct planner *p, struct registry *r, const struct policy_move *m,
                         const struct planner_ops *ops, void *userdata) {
        struct region *reg = p->regions[m->region];
        struct client *c = region_client(reg);
        struct kvt_order o;
        int ret;

        if (!ops->client_ready(c, userdata))
                return 0; /* backlogged: the next tick plans again */
        ret = registry_order_new(r, reg, m->first_chunk, m->n_chunks, m->tier, m->host_node, &o);
        if (ret < 0) {
                log_debug("Skipping move of region %u chunks %u+%u to %s: %s", region_id(reg),
                          m->first_chunk, m->n_chunks, kvt_tier_name(m->tier), strerror(-ret));
                return ret == -ENOMEM ? ret : 0;
        }
        log_debug("Order %llu: region %u chunks %u+%u to %s.", (unsigned long long)o.order_id, region_id(reg),
                  m->first_chunk, m->n_chunks, kvt_tier_name(m->tier));
        ops->send_order(c, &o, userdata);
        return 1;
}

/* Where one of the sampler's laps goes on from: policy_sample() moves its
 * cursor past what it picked, but a pick not issued (its client's socket
 * full while the shim's mover is busy, or its chunks taken by an order
 * meanwhile) was not sampled, and the next tick starts from the first such
 * pick instead of skipping it for a whole lap. */
struct lap {
        const struct policy_input *in;
        uint64_t from, total;
        uint64_t missed; /* the first pick not issued, as a distance along the lap; UINT64_MAX: none */
};

static void lap_start(struct lap *l, const struct policy_input *in, uint64_t cursor) {
        *l = (struct lap){.in = in, .missed = UINT64_MAX};
        for (size_t k = 0; k < in->n_regions; k++)
                l->total += in->regions[k].n_chunks;
        l->from = l->total ? cursor % l->total : 0;
}

static void lap_missed(struct lap *l, size_t region, uint32_t chunk) {
        uint64_t at = chunk, d;

        for (size_t k = 0; k < region && k < l->in->n_regions; k++)
                at += l->in->regions[k].n_chunks;
        d = (at + l->total - l->from) % l->total;
        l->missed = MIN(l->missed, d);
}

static void lap_end(const struct lap *l, uint64_t *cursor) {
        if (l->missed != UINT64_MAX)
                *cursor = (l->from + l->missed) % l->total;
}

/* A tick's share of samples on one GPU: re-armed chunks and probed
 * cohorts.  The tick issues no more than that in all, and each client has
 * no more than that in flight (its shim makes them in a queue of its own). */
struct sample_share {
        uint32_t rearm_chunks, probe_cohorts;
};

/* Whether some client's prober lets its chunks be probed this tick (none
 * listed: yes). */
static bool clients_probing(const struct policy_input *in) {
        for (size_t k = 0; k < in->n_clients; k++)
                if (!in->clients[k].probes_off)
                        return true;
        return in->n_clients == 0;
}

/* Issues a tick's sample of one GPU: re-arms and probes (policy_sample()),
 * after plan, the plan of the same input (the demands it held back, and
 * the sibling counts it made, which the sample reads).  Returns the orders
 * issued, or -ENOMEM. */
static int planner_sample(struct planner *p, struct registry *r, struct gpu_demand *d, const struct policy_input *in,
                          const struct policy_params *pp, const struct policy_plan *plan,
                          const struct sample_share *share, const struct planner_ops *ops, void *userdata) {
        /* Probes only while demands wait for room, and only in VRAM they
         * may take (of their priority or lower): without them there is
         * nothing to make room for, and a probe would only empty VRAM. */
        /* A probe's answer is a remote map reported within a flush or two
         * of the chunk's next use.  How long to wait for it is learnt from
         * the answers (policy_probe_window()): at most protect_min (200 ms
         * by default, which outlasts a decode step's reuse of its KV), at
         * least an eighth of it; a probe waits half its window unseen. */
        uint32_t window = in->probe_window;
        struct policy_sample_params sp = {.stale_ticks = pp->protect_min_ticks,
                                          .probe_ticks = MAX(window / 2, 1u),
                                          .probe_window = window,
                                          .rearm_max = pp->sample_chunks,
                                          .probe_max = plan->held_chunks && clients_probing(in) ? pp->probe_cohorts : 0,
                                          .probe_priority_max = plan->held_priority,
                                          .client_rearm_max = share->rearm_chunks,
                                          .client_probe_max = share->probe_cohorts,
                                          .threads = pp->threads,
                                          .siblings = plan->siblings};
        struct policy_sample sm;
        struct kvt_order o;
        struct lap rearms, probes;
        int ret, issued = 0;

        lap_start(&rearms, in, d->sample_cursor.rearm);
        lap_start(&probes, in, d->sample_cursor.probe);
        ret = policy_sample(in, &sp, &d->sample_cursor, &sm);
        if (ret < 0)
                return ret;
        /* probes first: the shim makes its samples in the order they come,
         * and only probes make room for the demands that wait */
        for (size_t i = 0; i < sm.n_probes; i++) {
                const struct policy_probe *pr = &sm.probes[i];
                struct region *reg = p->regions[pr->region];

                if (!ops->client_ready(region_client(reg), userdata) ||
                    registry_probe_new(r, reg, pr->first, pr->n, &o) < 0) {
                        lap_missed(&probes, pr->region, pr->first);
                        continue;
                }
                registry_probe_mark(r, reg, pr->first, pr->n);
                d->tick_probed++;
                log_debug("Order %llu: region %u chunks %u+%u probed.", (unsigned long long)o.order_id,
                          region_id(reg), pr->first, pr->n);
                ops->send_order(region_client(reg), &o, userdata);
                issued++;
        }
        for (size_t i = 0; i < sm.plan.n_moves; i++) {
                const struct policy_move *m = &sm.plan.moves[i];
                struct region *reg = p->regions[m->region];

                if (!ops->client_ready(region_client(reg), userdata) ||
                    registry_rearm_new(r, reg, m->first_chunk, m->n_chunks, &o) < 0) {
                        lap_missed(&rearms, m->region, m->first_chunk);
                        continue;
                }
                log_debug("Order %llu: region %u chunks %u+%u re-armed.", (unsigned long long)o.order_id,
                          region_id(reg), m->first_chunk, m->n_chunks);
                ops->send_order(region_client(reg), &o, userdata);
                d->tick_rearmed += m->n_chunks;
                issued++;
        }
        for (size_t i = 0; i < sm.n_expired; i++)
                registry_probe_expired(r, p->regions[sm.expired[i].region], sm.expired[i].chunk);
        policy_plan_clear(&sm.plan);
        lap_end(&rearms, &d->sample_cursor.rearm);
        lap_end(&probes, &d->sample_cursor.probe);
        return issued;
}

/* What the registry counted of a client since the last take: evictions,
 * refaults, probes come back and expired. */
struct client_counts {
        uint64_t evicted, refaults, back, expired;
};

static struct client_counts client_counts_take(struct client_demand *cd) {
        struct client_counts n = {.evicted = cd->evicted - cd->evicted_seen,
                                  .refaults = cd->refaults - cd->refaults_seen,
                                  .back = cd->probes_back - cd->back_seen,
                                  .expired = cd->probes_expired - cd->expired_seen};

        cd->evicted_seen = cd->evicted;
        cd->refaults_seen = cd->refaults;
        cd->back_seen = cd->probes_back;
        cd->expired_seen = cd->probes_expired;
        return n;
}

/* Each client's demand state on GPU device, into p->clients: its own
 * thrash guard's protection and its own prober's say, ticked (with a new
 * tick) by the evictions, refaults and probes' answers the registry
 * counted of it since the last; both start when the client is first
 * planned, the guard at protect_min and the prober probing every tick.
 * Returns the longest protection (protect_min without clients): the GPU's,
 * for status and its demands' books; *every the shortest prober interval. */
static uint32_t planner_clients_demand(struct planner *p, int device, const struct policy_params *pp,
                                       uint32_t now, bool new_tick, uint32_t *every) {
        uint32_t longest = MAX(pp->protect_min_ticks, 1u);

        *every = UINT32_MAX;
        for (size_t i = 0; i < p->n_clients; i++) {
                struct client_demand *cd = client_demand(p->client_of[i], device);

                if (!cd->started) {
                        (void)client_counts_take(cd); /* what came before the start counts for nothing */
                        policy_guard_init(&cd->guard, pp->protect_min_ticks);
                        policy_prober_init(&cd->prober);
                        cd->probe_now = policy_prober_tick(&cd->prober, now, 0, 0);
                        cd->started = true;
                } else if (new_tick) {
                        struct client_counts n = client_counts_take(cd);

                        policy_guard_tick(&cd->guard, pp->protect_min_ticks, pp->protect_max_ticks, n.evicted,
                                          n.refaults);
                        cd->probe_now = policy_prober_tick(&cd->prober, now, n.back, n.expired);
                }
                p->clients[i].protect_ticks = cd->guard.protect_ticks;
                p->clients[i].probes_off = !cd->probe_now;
                longest = MAX(longest, cd->guard.protect_ticks);
                *every = MIN(*every, cd->prober.interval);
        }
        if (*every == UINT32_MAX) /* as a client's prober starts */
                *every = 1;
        return longest;
}

/* VRAM that promotions must leave alone, in whole chunks: what the grants
 * hold for captures not yet claimed, past the margin over the budget that
 * the grants gave.  A capture and a promotion then never take the same
 * room: VRAM in use stays within the budget and that margin (the grants'
 * part of [gpu] capture_margin), and promotions never fill the free room
 * that captures were offered. */
static uint64_t planner_reserved(struct registry *r, const struct gpu_stats *g) {
        uint64_t held = registry_grants_reserved(r, g->device), over = g->grant_over_bytes;

        return held > over ? (held - over + KVT_CHUNK_BYTES - 1) / KVT_CHUNK_BYTES * KVT_CHUNK_BYTES : 0;
}

/* planner_grants()'s pass over the clients of a GPU. */
struct grant_pass {
        struct registry *r;
        int device;
        const struct planner_ops *ops;
        void *userdata;
};

/* One client's cap: a GRANT where it changed, and no other is unanswered
 * (each GRANT_ACK answers the last). */
static void grant_one(struct client *c, uint64_t cap, void *arg) {
        const struct grant_pass *gp = arg;
        struct kvt_grant gr = {.device = gp->device, .vram_cap_bytes = cap};

        if (cap == client_grant_cap(c, gp->device) || client_grant_waiting(c, gp->device) || !gp->ops->send_grant ||
            !gp->ops->client_ready(c, gp->userdata))
                return;
        gr.seq = registry_grant_sent(gp->r, c, gp->device, cap);
        gp->ops->send_grant(c, &gr, gp->userdata);
}

/* Sends each client using GPU device a GRANT where its cap changed. */
static void planner_grants(struct registry *r, int device, const struct planner_ops *ops, void *userdata) {
        struct grant_pass gp = {.r = r, .device = device, .ops = ops, .userdata = userdata};

        registry_grant_pass(r, device, grant_one, &gp);
}

static int planner_gpu(struct planner *p, struct registry *r, const struct gpu_stats *g,
                       const struct planner_ops *ops, void *userdata, bool new_tick) {
        struct gpu_demand *d = &p->demand[g->device];
        struct policy_params pp;
        struct policy_input in = {0};
        struct policy_plan plan;
        struct sample_share share;
        uint32_t probe_every = 1;
        size_t n = 0;
        int ret, issued = 0;

        if (new_tick) /* the tick's sample starts over, whatever the plans below do */
                d->tick_rearmed = d->tick_probed = 0;
        ret = planner_snapshot(p, r, g->device, &n);
        if (ret < 0)
                return ret;
        conf_policy_params(p->conf, &pp);
        pp.overlap_chunks = (uint32_t)MIN(conf_overlap_bytes(p->conf, g->budget_bytes) / KVT_CHUNK_BYTES,
                                          (uint64_t)UINT32_MAX);
        in.regions = p->views;
        in.n_regions = n;
        if (p->n_clients) {
                in.clients = p->clients;
                in.n_clients = p->n_clients;
        }
        in.now = registry_tick(r);
        in.budget_chunks = g->budget_bytes / KVT_CHUNK_BYTES;
        in.charged_chunks = (g->charged_bytes + planner_reserved(r, g)) / KVT_CHUNK_BYTES;
        in.evicting_chunks = g->evicting_chunks;
        in.max_move_chunks = planner_rate_chunks(p);
        in.home_node = g->host_node;
        in.workers = planner_workers_policy(p);
        in.protect_ticks = pp.protect_min_ticks;
        if (pp.kind == POLICY_DEMAND) {
                in.protect_ticks = planner_clients_demand(p, g->device, &pp, in.now, new_tick, &probe_every);
                in.probe_window = policy_probe_window(&g->probe_timing, POLICY_PROBE_WINDOW_MIN(pp.protect_min_ticks),
                                                      pp.protect_min_ticks);
        }
        if (conf_nodes_limited(p->conf)) {
                in.nodes = p->nodes;
                in.n_nodes = planner_nodes(p, r, g->host_node);
        }
        ret = policy_plan(&pp, &in, &plan);
        if (ret < 0)
                return ret;
        for (size_t i = 0; i < plan.n_moves; i++) {
                ret = planner_issue(p, r, &plan.moves[i], ops, userdata);
                if (ret < 0)
                        break;
                if (ret > 0) {
                        issued++;
                        if (conf_max_migration_rate(p->conf) > 0)
                                p->credit_bytes -= MIN(p->credit_bytes,
                                                       (uint64_t)plan.moves[i].n_chunks * KVT_CHUNK_BYTES);
                }
        }
        registry_gpu_planned(r, g->device, in.protect_ticks, &plan);
        /* The demands this plan held back, where the budget, not the rate
         * limit, kept them out. */
        registry_gpu_judge_demands(r, g->device, in.protect_ticks,
                                   ret >= 0 && pp.kind == POLICY_DEMAND &&
                                           (in.max_move_chunks == UINT64_MAX ||
                                            plan.evict_chunks + plan.promote_chunks < in.max_move_chunks));
        /* A tick's re-arms and probes, sampled in its plans (a demand re-plans
         * up to once a millisecond, and its probes cannot wait for the tick):
         * no more than the tick's share of each in all, and no more in flight
         * than that of each client.  Where a shim makes them slower than
         * rearm_rate and probe_rate ask, its rates fall to what it makes,
         * and a chunk's sample (unmovable while in flight) waits behind a
         * tick's share of others at most, and behind the shim's moves half a
         * second at most; a shim that is slow, or does not answer, holds
         * back its own samples, never another client's.  While demands wait
         * for room, re-arms yield to probes. */
        share.rearm_chunks = policy_rearm_share(pp.sample_chunks, plan.held_chunks, pp.probe_cohorts);
        share.probe_cohorts = pp.probe_cohorts;
        pp.sample_chunks = share.rearm_chunks - MIN(d->tick_rearmed, share.rearm_chunks);
        pp.probe_cohorts = share.probe_cohorts - MIN(d->tick_probed, share.probe_cohorts);
        if (ret >= 0 && pp.kind == POLICY_DEMAND) {
                registry_gpu_sampled(r, g->device, in.probe_window, probe_every);
                ret = planner_sample(p, r, d, &in, &pp, &plan, &share, ops, userdata);
                issued += ret > 0 ? ret : 0;
        }
        policy_plan_clear(&plan);
        if (ret >= 0)
                planner_grants(r, g->device, ops, userdata);
        return ret < 0 ? ret : issued;
}

/* A client counts as busy on a GPU for this long after the last use seen
 * in one of its regions there: longer than the pause between an engine's
 * steps, so that a paced neighbour is not let go between two of them. */
#define PACE_BUSY_MS 250u

/* The priority of the busiest class on each GPU: busy[d] is 1 + the highest
 * priority of a client seen using GPU d within PACE_BUSY_MS, 0 where none. */
static void pace_busy(const struct planner *p, struct registry *r, unsigned busy[KVT_MAX_GPUS]) {
        uint32_t now = registry_tick(r), window = MAX(PACE_BUSY_MS / MAX(conf_tick_ms(p->conf), 1u), 1u);

        memset(busy, 0, KVT_MAX_GPUS * sizeof(*busy));
        for (struct region *reg = registry_regions(r); reg; reg = region_next(reg)) {
                uint32_t last = region_last_active(reg);
                int d = region_device(reg);
                unsigned prio = 0;
                uint64_t quota;

                if (last == 0 || now - last > window || d < 0 || d >= KVT_MAX_GPUS)
                        continue;
                conf_client(p->conf, client_section(region_client(reg)), &prio, &quota);
                busy[d] = MAX(busy[d], prio + 1);
        }
}

/* Paces each client that uses a GPU (its HELLO's, or one of its regions')
 * where a client of higher priority is busy to [gpu] yield_percent, and lets the others run free
 * (100): a PACE to each whose pace changed.  Without [client.NAME]
 * sections every client has priority 0 and none is paced. */
static void planner_paces(struct planner *p, struct registry *r, const struct planner_ops *ops, void *userdata) {
        unsigned busy[KVT_MAX_GPUS];

        if (!ops->send_pace)
                return;
        if (conf_n_clients(p->conf) > 0)
                pace_busy(p, r, busy);
        for (struct client *c = registry_clients(r); c; c = client_next(c)) {
                struct kvt_pace pc = {.percent = 100};
                unsigned prio = 0;
                uint64_t quota;

                if (conf_n_clients(p->conf) > 0) {
                        int d = client_device(c);
                        bool yield;

                        conf_client(p->conf, client_section(c), &prio, &quota);
                        yield = d >= 0 && d < KVT_MAX_GPUS && busy[d] > prio + 1;
                        for (size_t i = 0; i < client_n_regions(c) && !yield; i++) {
                                d = region_device(client_region(c, i));
                                yield = d >= 0 && d < KVT_MAX_GPUS && busy[d] > prio + 1;
                        }
                        if (yield)
                                pc.percent = conf_yield_percent(p->conf);
                }
                if (pc.percent == client_pace(c) || !ops->client_ready(c, userdata))
                        continue;
                client_set_pace(c, pc.percent);
                ops->send_pace(c, &pc, userdata);
        }
}

/* Plans every GPU; a new tick also refills the rate credit, ticks the
 * guards and paces the clients. */
static int planner_all(struct planner *p, struct registry *r, const struct planner_ops *ops, void *userdata,
                       bool new_tick) {
        struct policy_params pp;
        int total = 0, ret;

        conf_policy_params(p->conf, &pp);
        ret = planner_workers(p, pp.threads);
        if (ret < 0)
                return ret;
        if (new_tick)
                planner_rate_refill(p);
        for (int d = 0; d < KVT_MAX_GPUS; d++) {
                const struct gpu_stats *g = registry_gpu(r, d);

                if (!g)
                        continue;
                ret = planner_gpu(p, r, g, ops, userdata, new_tick);
                if (ret < 0)
                        return ret;
                total += ret;
        }
        if (new_tick)
                planner_paces(p, r, ops, userdata);
        return total;
}

int planner_tick(struct planner *p, struct registry *r, const struct planner_ops *ops, void *userdata) {
        return planner_all(p, r, ops, userdata, true);
}

int planner_replan(struct planner *p, struct registry *r, const struct planner_ops *ops, void *userdata) {
        return planner_all(p, r, ops, userdata, false);
}
