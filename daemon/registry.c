/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "grants.h"
#include "log.h"
#include "registry.h"
#include "topology.h"
#include "util.h"

struct order {
        uint64_t id;
        struct region *region;
        uint32_t first, n;
        uint32_t tier;
        uint32_t flags;   /* KVT_ORDER_* */
        uint64_t sent_ns; /* when it was made (CLOCK_MONOTONIC), for [daemon] order_timeout_ms */
        uint32_t sent_tick;
};

#define CHUNK_PROBE      POLICY_CHUNK_PROBE
#define CHUNK_PROBE_BITS POLICY_PROBE_BITS
#define CHUNK_OWN_MAP    POLICY_CHUNK_OWN_MAP
#define CHUNK_COLD       POLICY_CHUNK_COLD
#define CHUNK_SPILLED    POLICY_CHUNK_SPILLED
#define CHUNK_REARMED    POLICY_CHUNK_REARMED

struct region {
        struct client *client;
        struct region *prev, *next; /* registry list, registration order */
        uint32_t id;
        int device;
        uint64_t base, size_bytes;
        uint32_t api;
        uint32_t rule;  /* enum kvt_capture_rule */
        uint32_t flags; /* KVT_REGION_* */
        uint32_t n_chunks;
        uint32_t last_active; /* tick of the last use seen in it */
        struct policy_launch_avg launches; /* the kernels launched on it its shim counted, a tick */
        uint32_t launch_tick;     /* the tick launch_pending counts in; 0 = none yet */
        uint64_t launch_pending;  /* launches counted in that tick so far */
        uint64_t tier_chunks[_KVT_TIER_MAX];
        struct policy_chunk chunks[];
};

struct client {
        struct client *prev, *next;
        uint32_t id;
        pid_t pid;
        uid_t uid;
        char name[KVT_NAME_MAX]; /* a label the client chose, escaped by the server */
        int section;             /* its [client.NAME] section by kernel identity, or -1 */
        int device;
        uint64_t device_total_bytes;
        void *userdata;
        struct region **by_id, **by_base; /* sorted arrays of n_regions */
        size_t n_regions, cap_regions;
        struct order *orders; /* in flight, ascending id */
        size_t n_orders, cap_orders;
        uint64_t *forgotten; /* ids of orders whose region went away */
        size_t n_forgotten, cap_forgotten;
        uint64_t max_order_id;
        struct grant_book grants[KVT_MAX_GPUS]; /* its VRAM grant on each GPU (grants.h) */
        uint64_t grant_overdue_logged; /* bit d: an unanswered GRANT for GPU d was logged */
        struct client_demand demand[KVT_MAX_GPUS]; /* demand's guard and prober, per GPU */
        unsigned pace_percent;               /* the last PACE (100 before any) */
        uint64_t sampling_chunks;            /* of its re-arms in flight, on every GPU */
        uint64_t probing_orders;             /* its probes in flight, likewise */
        uint64_t rearmed_chunks, probes;     /* of its re-arms and its probes, ever sent */
        uint64_t charged[KVT_MAX_GPUS];      /* chunks of its own charged to each GPU (for its quota) */
        uint64_t registered_bytes;           /* of its regions, for the quotas */
        unsigned order_timeouts;             /* orders it left unanswered past order_timeout_ms */
        uint32_t *refused; /* ids of regions refused by a quota: their DEL and HINTs are no error */
        size_t n_refused, cap_refused;
};
_Static_assert(KVT_MAX_GPUS <= 64, "a client's grant_overdue_logged has a bit per GPU");

/* Device totals a GPU's clients reported, the first of each user: a
 * percentage budget resolves from the figure most users agree on, so that
 * one user's liar moves no one's budget. */
#define TOTAL_REPORTS_MAX 16
/* Figures within this many percent of each other agree (drivers of one
 * GPU model report a little more or less as firmware reserves differ). */
#define TOTAL_AGREE_PCT 2
/* No GPU has more memory than a budget may be: [gpu] vram_budget's range. */
#define TOTAL_MAX_BYTES (16ull << 40)

struct total_reports {
        size_t n;
        uint32_t uid[TOTAL_REPORTS_MAX];
        uint64_t bytes[TOTAL_REPORTS_MAX];
};

struct registry {
        const struct conf *conf;
        uint32_t tick;
        uint32_t next_client_id;
        uint64_t next_order_id;
        size_t n_clients;
        struct client *clients, *clients_tail;
        struct region *regions, *regions_tail;
        uint64_t n_chunks; /* of all regions, for [daemon] max_chunks */
        struct gpu_stats gpus[KVT_MAX_GPUS];
        bool gpu_present[KVT_MAX_GPUS];
        uint64_t device_total_bytes[KVT_MAX_GPUS]; /* as most users' clients reported; for "N%" */
        struct total_reports totals[KVT_MAX_GPUS];
        struct ratelimit totals_log; /* warnings of totals refused or outvoted */
        struct node_stats nodes[KVT_MAX_NODES];
        bool node_present[KVT_MAX_NODES];
        const struct topology *topo; /* NULL: no MemTotal known, so no "N%" host budgets */
        struct migration_stats migrations;
        /* Demands seen since the last plan judged them
         * (registry_gpu_judge_demands()): at most one per chunk. */
        struct demand_seen {
                struct region *reg;
                uint32_t chunk;
        } *demands;
        size_t n_demands, cap_demands;
};

static bool chunk_charged(const struct policy_chunk *ch) {
        return ch->tier == KVT_TIER_VRAM || ch->pending == KVT_TIER_VRAM;
}

static bool chunk_evicting(const struct policy_chunk *ch) {
        return ch->tier == KVT_TIER_VRAM && ch->pending != KVT_TIER_NONE && ch->pending != KVT_TIER_VRAM;
}

static struct node_stats *node_use(struct registry *r, int node) {
        r->node_present[node] = true;
        r->nodes[node].node = node;
        return &r->nodes[node];
}

static bool tier_is_host(uint32_t tier) {
        return tier == KVT_TIER_HOST || tier == KVT_TIER_HOST_MAPPED;
}

/* The node a chunk's host memory is charged to, or -1: its host copy's node
 * while it is in host memory (a promotion under way included), or the
 * target of an eviction under way.  A chunk never placed (NONE: VMM memory,
 * VRAM beyond the budget, not yet touched) holds no host memory kvtier
 * knows of. */
static int chunk_node(const struct policy_chunk *ch) {
        bool host = tier_is_host(ch->tier) || tier_is_host(ch->pending);

        return host && ch->node < KVT_MAX_NODES ? ch->node : -1;
}

/* Adds (add) or takes out a chunk's share of its node's books: around every
 * change of its tier, pending or node. */
static void chunk_book(struct registry *r, const struct policy_chunk *ch, bool add) {
        int node = chunk_node(ch);
        uint64_t resident = tier_is_host(ch->tier);
        struct node_stats *ns;

        if (node < 0)
                return;
        ns = node_use(r, node);
        if (add) {
                ns->charged_bytes += KVT_CHUNK_BYTES;
                ns->host_chunks += resident;
                return;
        }
        assert(ns->charged_bytes >= KVT_CHUNK_BYTES && ns->host_chunks >= resident);
        ns->charged_bytes -= KVT_CHUNK_BYTES;
        ns->host_chunks -= resident;
}

/* Sets a node's host budget from the config.  A percentage needs the
 * node's MemTotal: without it, -EINVAL (logged unless quiet) and the budget
 * stays as it was. */
static int node_resolve(struct registry *r, int node, bool quiet) {
        struct node_stats *ns = &r->nodes[node];
        uint64_t total = r->topo ? r->topo->mem_total_bytes[node] : 0;
        struct budget_spec spec;
        char buf[32];

        if (!conf_node_budget(r->conf, node, &spec)) {
                ns->limited = false;
                ns->budget_bytes = 0;
                return 0;
        }
        if (spec.percent && total == 0)
                return quiet ? -EINVAL
                             : log_error_errno(EINVAL,
                                               "[numa.%d] host_budget = %u%%: the MemTotal of node %d is unknown "
                                               "(no such node?).",
                                               node, spec.percent, node);
        node_use(r, node);
        ns->limited = true;
        ns->budget_bytes = spec.percent ? (uint64_t)((unsigned __int128)total * spec.percent / 100) : spec.bytes;
        log_info("NUMA node %d: host budget %s.", node, format_bytes(buf, sizeof(buf), ns->budget_bytes));
        return 0;
}

int registry_set_topology(struct registry *r, const struct topology *t) {
        int ret = 0;

        r->topo = t;
        for (int n = 0; n < KVT_MAX_NODES; n++) {
                struct budget_spec spec;

                if (t->present & (1ull << n))
                        node_use(r, n);
                else if (t->present && conf_node_budget(r->conf, n, &spec))
                        log_warning("[numa.%d] host_budget: this host has no NUMA node %d; it takes no evictions.",
                                    n, n);
                if (node_resolve(r, n, false) < 0)
                        ret = -EINVAL;
        }
        return ret;
}

int registry_node_budget_reload(struct registry *r, int node) {
        const struct node_stats *ns;
        char buf[32];
        int ret;

        if (node < 0 || node >= KVT_MAX_NODES)
                return -EINVAL;
        ret = node_resolve(r, node, false);
        ns = &r->nodes[node];
        if (ret == 0 && ns->limited && ns->charged_bytes > ns->budget_bytes)
                log_info("NUMA node %d: %s over the new host budget; no eviction goes there until promotions "
                         "drain it.",
                         node, format_bytes(buf, sizeof(buf), ns->charged_bytes - ns->budget_bytes));
        return ret;
}

/* Bytes a GPU's charge may go over its budget now: promotions running
 * ahead of the evictions in flight, up to [policy] overlap. */
static uint64_t gpu_overlap_bytes(const struct registry *r, const struct gpu_stats *g) {
        return MIN(conf_overlap_bytes(r->conf, g->budget_bytes), g->evicting_chunks * KVT_CHUNK_BYTES);
}

/* Charges a promotion: never past the budget and the overlap. */
static void gpu_charge(const struct registry *r, struct gpu_stats *g, uint64_t n_chunks) {
        if (n_chunks == 0)
                return;
        g->charged_bytes += n_chunks * KVT_CHUNK_BYTES;
        g->peak_charged_bytes = MAX(g->peak_charged_bytes, g->charged_bytes);
        assert(g->charged_bytes <= g->budget_bytes + gpu_overlap_bytes(r, g));
}

/* Charges chunks a capture started in VRAM under a GRANT: the grants keep
 * them within the budget and [gpu] capture_margin (twice that where one
 * capture crossed a change of grant), which the planner then evicts back. */
static void gpu_charge_start(struct gpu_stats *g, uint64_t n_chunks) {
        g->charged_bytes += n_chunks * KVT_CHUNK_BYTES;
        g->peak_charged_bytes = MAX(g->peak_charged_bytes, g->charged_bytes);
}

static void gpu_uncharge(struct gpu_stats *g, uint64_t n_chunks) {
        assert(g->charged_bytes >= n_chunks * KVT_CHUNK_BYTES);
        g->charged_bytes -= n_chunks * KVT_CHUNK_BYTES;
}

/* Books chunk ch of reg at tier (no order in flight on it), with its
 * node's and the tier counts; charges and uncharges nothing: the caller
 * does, by chunk_charged() before and after. */
static void chunk_retier(struct registry *r, struct region *reg, struct policy_chunk *ch, uint32_t tier) {
        struct gpu_stats *g = &r->gpus[reg->device];

        chunk_book(r, ch, false);
        reg->tier_chunks[ch->tier]--;
        g->tier_chunks[ch->tier]--;
        ch->tier = (uint8_t)tier;
        ch->pending = KVT_TIER_NONE;
        ch->flags &= (uint8_t)~(CHUNK_MAPPED | CHUNK_OWN_MAP | CHUNK_PROBE_BITS | CHUNK_COLD | CHUNK_REARMED);
        if (tier_is_host(tier))
                ch->node = g->host_node >= 0 ? (uint8_t)g->host_node : POLICY_NODE_NONE;
        ch->last_move = r->tick;
        reg->tier_chunks[ch->tier]++;
        g->tier_chunks[ch->tier]++;
        chunk_book(r, ch, true);
}

/* Charges n chunks of reg started in VRAM (a capture, a restore) to its
 * GPU and client, or takes n chunks' charge back. */
static void region_charge_start(struct registry *r, struct region *reg, uint64_t n) {
        gpu_charge_start(&r->gpus[reg->device], n);
        reg->client->charged[reg->device] += n;
}

static void region_uncharge(struct registry *r, struct region *reg, uint64_t n) {
        gpu_uncharge(&r->gpus[reg->device], n);
        reg->client->charged[reg->device] -= n;
}

/* Resolves a percentage budget once a device total is known (agreed by
 * the clients' users: gpu_report_total()). */
static void gpu_resolve(struct registry *r, int device) {
        uint64_t device_total_bytes = r->device_total_bytes[device];
        struct gpu_stats *g = &r->gpus[device];
        struct budget_spec spec;

        if (g->budget_resolved)
                return;
        conf_gpu_budget(r->conf, device, &spec, NULL);
        if (spec.percent == 0) {
                g->budget_bytes = spec.bytes;
                g->budget_resolved = true;
        } else if (device_total_bytes > 0) {
                g->budget_bytes = (uint64_t)((unsigned __int128)device_total_bytes * spec.percent / 100);
                g->budget_resolved = true;
        }
        if (g->budget_resolved) {
                char buf[32];
                log_info("GPU %d: VRAM budget %s.", device, format_bytes(buf, sizeof(buf), g->budget_bytes));
        }
}

static struct gpu_stats *gpu_use(struct registry *r, int device) {
        r->gpu_present[device] = true;
        r->gpus[device].device = device;
        gpu_resolve(r, device);
        return &r->gpus[device];
}

static bool totals_agree(uint64_t a, uint64_t b) {
        uint64_t hi = MAX(a, b), lo = MIN(a, b);

        return hi - lo <= hi / 100 * TOTAL_AGREE_PCT;
}

/* Users of t whose figure agrees with bytes. */
static size_t totals_votes(const struct total_reports *t, uint64_t bytes) {
        size_t n = 0;

        for (size_t j = 0; j < t->n; j++)
                n += totals_agree(bytes, t->bytes[j]);
        return n;
}

/* The figure of t that agrees with the most users' figures; of figures as
 * well agreed, the smallest (a budget too small wastes VRAM, one too large
 * overcommits the GPU for everyone), or the current one where it agrees
 * with that, so that figures that agree do not move it. */
static uint64_t totals_majority(const struct total_reports *t, uint64_t current) {
        uint64_t best = 0;
        size_t best_n = 0;

        for (size_t i = 0; i < t->n; i++) {
                size_t n = totals_votes(t, t->bytes[i]);

                if (n > best_n || (n == best_n && t->bytes[i] < best)) {
                        best = t->bytes[i];
                        best_n = n;
                }
        }
        if (current && totals_agree(current, best) && totals_votes(t, current) == best_n)
                return current;
        return best;
}

#define totals_warn(r, ...)                                                                 \
        do {                                                                                \
                if (ratelimit_below(&(r)->totals_log, now_ns(), NULL))                      \
                        log_warning(__VA_ARGS__);                                           \
        } while (0)

/* Records the device total a client of uid reported for a GPU (HELLO,
 * DEVICE): a figure no GPU has is refused, a user's first figure stands
 * for it, and a percentage budget follows the figure most users agree on
 * (re-resolved, logged, when that changes).  0 is "unknown". */
static void gpu_report_total(struct registry *r, int device, uint32_t uid, uint64_t bytes) {
        struct total_reports *t = &r->totals[device];
        uint64_t was = r->device_total_bytes[device], now;
        char buf[32], buf2[32];
        struct budget_spec spec;

        if (bytes == 0)
                return;
        if (bytes < KVT_CHUNK_BYTES || bytes > TOTAL_MAX_BYTES) {
                totals_warn(r, "GPU %d: a client of uid %u reported a device total of %" PRIu64
                            " bytes, which no GPU has; taken as unknown.", device, (unsigned)uid, bytes);
                return;
        }
        for (size_t i = 0; i < t->n; i++)
                if (t->uid[i] == uid) {
                        if (!totals_agree(t->bytes[i], bytes))
                                totals_warn(r, "GPU %d: a client of uid %u reported a device total of %s, "
                                            "its user's first %s; keeping that.", device, (unsigned)uid,
                                            format_bytes(buf, sizeof(buf), bytes),
                                            format_bytes(buf2, sizeof(buf2), t->bytes[i]));
                        return;
                }
        if (t->n == TOTAL_REPORTS_MAX)
                return; /* as many users as that have had their say */
        t->uid[t->n] = uid;
        t->bytes[t->n++] = bytes;
        now = totals_majority(t, was);
        if (!totals_agree(bytes, now))
                totals_warn(r, "GPU %d: a client of uid %u reported a device total of %s; most users' clients "
                            "%s, which stands.", device, (unsigned)uid, format_bytes(buf, sizeof(buf), bytes),
                            format_bytes(buf2, sizeof(buf2), now));
        if (now == was)
                return;
        r->device_total_bytes[device] = now;
        conf_gpu_budget(r->conf, device, &spec, NULL);
        if (was && spec.percent) {
                log_notice("GPU %d: most users' clients report a device total of %s (was %s); budget follows.",
                           device, format_bytes(buf, sizeof(buf), now), format_bytes(buf2, sizeof(buf2), was));
                r->gpus[device].budget_resolved = false;
        }
}

void registry_device_seen(struct registry *r, const struct kvt_device *d) {
        registry_client_device_seen(r, NULL, d);
}

void registry_client_device_seen(struct registry *r, const struct client *c, const struct kvt_device *d) {
        struct gpu_stats *g;

        gpu_report_total(r, d->device, c ? (uint32_t)c->uid : (uint32_t)-1, d->total_bytes);
        g = gpu_use(r, d->device);

        /* A shim is not trusted: a node the host does not have would take
         * evictions past every budget.  The first answer stands; -1 (a shim
         * that cannot tell) never hides what another one told. */
        if (d->host_node < 0 || d->host_node >= KVT_MAX_NODES || g->host_node == d->host_node)
                return;
        if (r->topo && r->topo->present && !(r->topo->present & (1ull << d->host_node))) {
                log_warning("GPU %d: a client named NUMA node %d as its home, which this host does not have; "
                            "ignored.", d->device, d->host_node);
                return;
        }
        if (g->host_node >= 0) {
                log_warning("GPU %d: a client named NUMA node %d as its home, another %d; keeping %d.", d->device,
                            d->host_node, g->host_node, g->host_node);
                return;
        }
        g->host_node = d->host_node;
        node_use(r, d->host_node);
        log_info("GPU %d: home NUMA node %d.", d->device, d->host_node);
}

int registry_new(const struct conf *conf, struct registry **ret) {
        struct registry *r = calloc(1, sizeof(*r));

        if (!r)
                return -ENOMEM;
        r->conf = conf;
        r->tick = 1;
        r->next_client_id = 1;
        r->next_order_id = 1;
        r->totals_log = (struct ratelimit){.interval_ns = 10 * 1000000000ull, .burst = 10};
        for (int d = 0; d < KVT_MAX_GPUS; d++)
                r->gpus[d].host_node = -1;
        for (int n = 0; n < KVT_MAX_NODES; n++)
                (void)node_resolve(r, n, true); /* percentages wait for registry_set_topology() */
        for (int d = 0; d < KVT_MAX_GPUS; d++) {
                struct budget_spec spec;
                bool configured;

                conf_gpu_budget(conf, d, &spec, &configured);
                if (configured)
                        gpu_use(r, d);
        }
        *ret = r;
        return 0;
}

struct registry *registry_free(struct registry *r) {
        if (!r)
                return NULL;
        while (r->clients)
                registry_client_free(r, r->clients);
        free(r->demands);
        free(r);
        return NULL;
}

void registry_budget_reload(struct registry *r, int device) {
        struct gpu_stats *g;
        char buf[32];

        if (device < 0 || device >= KVT_MAX_GPUS)
                return;
        g = &r->gpus[device];
        g->budget_resolved = false;
        gpu_use(r, device);
        if (g->charged_bytes > g->budget_bytes)
                log_info("GPU %d: %s charged over the new budget, evicting.", device,
                         format_bytes(buf, sizeof(buf), g->charged_bytes - g->budget_bytes));
}

uint32_t registry_tick(const struct registry *r) {
        return r->tick;
}

void registry_advance_tick(struct registry *r) {
        if (r->tick < UINT32_MAX)
                r->tick++;
}

int registry_client_new(struct registry *r, pid_t pid, uid_t uid, const struct kvt_hello *hello,
                        void *userdata, struct client **ret) {
        struct client *c;

        if (r->n_clients >= REGISTRY_MAX_CLIENTS)
                return -EUSERS;
        c = calloc(1, sizeof(*c));
        if (!c)
                return -ENOMEM;
        c->id = r->next_client_id++;
        c->pid = pid;
        c->uid = uid;
        c->device = hello->device;
        c->device_total_bytes = hello->device_total_bytes;
        c->userdata = userdata;
        memcpy(c->name, hello->name, sizeof(c->name)); /* NUL-terminated: kvt_msg_check() */
        c->section = -1;
        c->pace_percent = 100;
        gpu_report_total(r, c->device, (uint32_t)uid, c->device_total_bytes);
        gpu_use(r, c->device);

        c->prev = r->clients_tail;
        if (r->clients_tail)
                r->clients_tail->next = c;
        else
                r->clients = c;
        r->clients_tail = c;
        r->n_clients++;
        *ret = c;
        return 0;
}

/* Index of the first region in arr[0..n) whose key is >= key. */
static size_t lower_bound(struct region *const *arr, size_t n, uint64_t key, bool by_base) {
        size_t lo = 0, hi = n;

        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                uint64_t k = by_base ? arr[mid]->base : arr[mid]->id;

                if (k < key)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return lo;
}

static struct region *client_find_region(const struct client *c, uint32_t region_id) {
        size_t i = lower_bound(c->by_id, c->n_regions, region_id, false);

        return i < c->n_regions && c->by_id[i]->id == region_id ? c->by_id[i] : NULL;
}

static void array_insert(struct region **arr, size_t n, size_t at, struct region *reg) {
        memmove(arr + at + 1, arr + at, (n - at) * sizeof(*arr));
        arr[at] = reg;
}

static void array_remove(struct region **arr, size_t n, struct region *reg, bool by_base) {
        size_t at = lower_bound(arr, n, by_base ? reg->base : reg->id, by_base);

        assert(at < n && arr[at] == reg);
        memmove(arr + at, arr + at + 1, (n - at - 1) * sizeof(*arr));
}

static int client_grow_regions(struct client *c) {
        size_t cap = c->cap_regions ? c->cap_regions * 2 : 16;
        struct region **a, **b;

        if (c->n_regions < c->cap_regions)
                return 0;
        a = realloc(c->by_id, cap * sizeof(*a));
        if (!a)
                return -ENOMEM;
        c->by_id = a;
        b = realloc(c->by_base, cap * sizeof(*b));
        if (!b)
                return -ENOMEM;
        c->by_base = b;
        c->cap_regions = cap;
        return 0;
}

/* Checks id and address range against the client's regions; returns the insert positions. */
static int client_region_slot(const struct client *c, const struct kvt_region_add *add, size_t *ret_id_at,
                              size_t *ret_base_at) {
        size_t id_at = lower_bound(c->by_id, c->n_regions, add->region_id, false);
        size_t base_at = lower_bound(c->by_base, c->n_regions, add->base, true);

        if (id_at < c->n_regions && c->by_id[id_at]->id == add->region_id)
                return -EEXIST;
        if (base_at < c->n_regions && c->by_base[base_at]->base < add->base + add->size_bytes)
                return -EADDRINUSE;
        if (base_at > 0 && c->by_base[base_at - 1]->base + c->by_base[base_at - 1]->size_bytes > add->base)
                return -EADDRINUSE;
        *ret_id_at = id_at;
        *ret_base_at = base_at;
        return 0;
}

/* Of n chunks a client started in VRAM on device (a capture, a restore),
 * those its grant covers (taken from it); the rest it claimed is booked as
 * unplaced: kvtier did not grant it and cannot vouch for it (UVM decides). */
static uint64_t grant_take(struct client *c, int device, uint64_t n_claimed, uint64_t n) {
        return grant_book_start(&c->grants[device], n_claimed * KVT_CHUNK_BYTES, n * KVT_CHUNK_BYTES) /
               KVT_CHUNK_BYTES;
}

/* Initial chunk state: as the shim started it (VRAM under its grant, host
 * memory, unmapped, or untiered). */
static void region_init_chunks(struct registry *r, struct region *reg, uint32_t tier) {
        struct gpu_stats *g = &r->gpus[reg->device];
        uint64_t n_vram =
                tier == KVT_TIER_VRAM ? grant_take(reg->client, reg->device, reg->n_chunks, reg->n_chunks) : 0;
        /* Memory kvtier never moved is where the kernel put it: counted on the GPU's home node. */
        uint8_t node = g->host_node >= 0 ? (uint8_t)g->host_node : POLICY_NODE_NONE;

        for (uint32_t i = 0; i < reg->n_chunks; i++) {
                bool vram = i < n_vram;

                reg->chunks[i] = (struct policy_chunk){
                        .last_use = r->tick,
                        /* a start in VRAM counts as its arrival there */
                        .last_move = vram ? r->tick : 0,
                        .tier = (uint8_t)(tier != KVT_TIER_VRAM ? tier : vram ? KVT_TIER_VRAM : KVT_TIER_NONE),
                        .node = node,
                };
                chunk_book(r, &reg->chunks[i], true);
        }
        if (tier == KVT_TIER_VRAM && n_vram < reg->n_chunks)
                log_debug("Region %u of client %u: %" PRIu64
                          " of %u chunks reported in VRAM exceed its grant, recorded as unplaced.",
                          reg->id, reg->client->id, (uint64_t)reg->n_chunks - n_vram, reg->n_chunks);
        reg->tier_chunks[KVT_TIER_VRAM] = n_vram;
        reg->tier_chunks[tier == KVT_TIER_VRAM ? KVT_TIER_NONE : tier] += reg->n_chunks - n_vram;
        for (unsigned t = 0; t < _KVT_TIER_MAX; t++)
                g->tier_chunks[t] += reg->tier_chunks[t];
        region_charge_start(r, reg, n_vram);
}

/* Remembers a refused region's id, so that the shim's REGION_DEL and HINTs
 * of it are not taken for errors; past max_regions ids, the older half is
 * forgotten (their DEL is then logged as unknown, nothing else). */
static void client_remember_refused(struct client *c, uint32_t region_id, size_t max) {
        if (c->n_refused == c->cap_refused) {
                size_t cap = c->cap_refused ? c->cap_refused * 2 : 16;
                uint32_t *a;

                if (c->cap_refused && cap > MAX(max, (size_t)16)) {
                        c->n_refused /= 2;
                        memmove(c->refused, c->refused + c->n_refused, c->n_refused * sizeof(*a));
                } else {
                        a = realloc(c->refused, cap * sizeof(*a));
                        if (!a)
                                return;
                        c->refused = a;
                        c->cap_refused = cap;
                }
        }
        c->refused[c->n_refused++] = region_id;
}

/* Forgets a refused region id; returns whether it was one. */
static bool client_forget_refused(struct client *c, uint32_t region_id, bool forget) {
        for (size_t i = 0; i < c->n_refused; i++)
                if (c->refused[i] == region_id) {
                        if (forget)
                                c->refused[i] = c->refused[--c->n_refused];
                        return true;
                }
        return false;
}

uint64_t registry_uid_quota(const struct registry *r) {
        struct conf_quotas q;
        uint64_t budgets = 0;

        conf_quotas(r->conf, &q);
        if (q.per_uid_bytes)
                return q.per_uid_bytes;
        for (int d = 0; d < KVT_MAX_GPUS; d++)
                if (r->gpu_present[d] && r->gpus[d].budget_resolved)
                        budgets += r->gpus[d].budget_bytes;
        return 4 * (budgets + conf_host_budget(r->conf));
}

uint64_t registry_uid_registered(const struct registry *r, uid_t uid) {
        uint64_t n = 0;

        for (const struct client *o = r->clients; o; o = o->next)
                if (o->uid == uid)
                        n += o->registered_bytes;
        return n;
}

/* Whether a region of size bytes fits the quotas of [daemon]: regions per
 * client, chunks of all, bytes per client and per uid.  Checked before
 * anything is allocated for it, so that a refused add costs nothing but
 * this.  Returns 0, -E2BIG (regions), -ENOSPC (chunks) or -EDQUOT (bytes). */
static int region_quota_check(const struct registry *r, const struct client *c, uint64_t size) {
        uint64_t uid_quota = registry_uid_quota(r), client_quota,
                 section_quota = conf_client_max_registered(r->conf, c->section);
        struct conf_quotas q;

        conf_quotas(r->conf, &q);
        client_quota = q.per_client_bytes ? q.per_client_bytes : uid_quota;
        if (c->n_regions >= MIN((size_t)q.max_regions, (size_t)REGISTRY_MAX_REGIONS_PER_CLIENT))
                return -E2BIG;
        if (r->n_chunks + size / KVT_CHUNK_BYTES > q.max_chunks)
                return -ENOSPC;
        /* a [client.NAME] max_registered bounds each of its processes, in place of both */
        if (section_quota)
                return c->registered_bytes + size > section_quota ? -EDQUOT : 0;
        if (c->registered_bytes + size > client_quota || registry_uid_registered(r, c->uid) + size > uid_quota)
                return -EDQUOT;
        return 0;
}

int registry_region_add(struct registry *r, struct client *c, const struct kvt_region_add *add) {
        uint32_t n_chunks = (uint32_t)(add->size_bytes / KVT_CHUNK_BYTES);
        size_t id_at, base_at;
        struct region *reg;
        int ret;

        if (client_forget_refused(c, add->region_id, false))
                return -EEXIST;
        ret = client_region_slot(c, add, &id_at, &base_at);
        if (ret < 0)
                return ret;
        ret = region_quota_check(r, c, add->size_bytes);
        if (ret < 0) {
                struct conf_quotas q;

                conf_quotas(r->conf, &q);
                /* A start in VRAM stays where CUDA put it, unbooked: its room
                 * stays held (taken, never claimed), out of promotions' way. */
                client_remember_refused(c, add->region_id, q.max_regions);
                return ret;
        }
        ret = client_grow_regions(c);
        if (ret < 0)
                return ret;
        reg = calloc(1, sizeof(*reg) + (size_t)n_chunks * sizeof(struct policy_chunk));
        if (!reg)
                return -ENOMEM;
        *reg = (struct region){.client = c,
                               .last_active = r->tick,
                               .id = add->region_id,
                               .device = add->device,
                               .base = add->base,
                               .size_bytes = add->size_bytes,
                               .api = add->api,
                               .rule = add->rule,
                               .flags = add->flags,
                               .n_chunks = n_chunks};
        gpu_use(r, reg->device);
        region_init_chunks(r, reg, add->tier);

        array_insert(c->by_id, c->n_regions, id_at, reg);
        array_insert(c->by_base, c->n_regions, base_at, reg);
        c->n_regions++;
        c->registered_bytes += reg->size_bytes;
        r->n_chunks += reg->n_chunks;
        reg->prev = r->regions_tail;
        if (r->regions_tail)
                r->regions_tail->next = reg;
        else
                r->regions = reg;
        r->regions_tail = reg;
        return 0;
}

static void client_remember_forgotten(struct client *c, uint64_t order_id) {
        if (c->n_forgotten == c->cap_forgotten) {
                size_t cap = c->cap_forgotten ? c->cap_forgotten * 2 : 16;
                uint64_t *a;

                if (cap > REGISTRY_MAX_FORGOTTEN_ORDERS) {
                        /* drop the older half: their late replies then count as bogus */
                        c->n_forgotten /= 2;
                        memmove(c->forgotten, c->forgotten + c->n_forgotten, c->n_forgotten * sizeof(*a));
                } else {
                        a = realloc(c->forgotten, cap * sizeof(*a));
                        if (!a)
                                return; /* a late reply for it will drop the peer; nothing breaks */
                        c->forgotten = a;
                        c->cap_forgotten = cap;
                }
        }
        c->forgotten[c->n_forgotten++] = order_id;
}

/* An order's end in the counts of orders in flight, the GPU's and its
 * client's, however it ended (done, taken back, forgotten with its region). */
static void order_gone(struct gpu_stats *g, const struct order *o) {
        struct client *c = o->region->client;

        g->inflight_orders--;
        if (o->flags & KVT_ORDER_REARM) {
                g->sampling_chunks -= o->n;
                c->sampling_chunks -= o->n;
        }
        if (o->flags & KVT_ORDER_PROBE) {
                g->probing_orders--;
                c->probing_orders--;
        }
}

/* Forgets the in-flight orders of a region; the chunks keep their state. */
static void region_forget_orders(struct registry *r, struct region *reg) {
        struct client *c = reg->client;
        size_t j = 0;

        for (size_t i = 0; i < c->n_orders; i++) {
                if (c->orders[i].region == reg) {
                        client_remember_forgotten(c, c->orders[i].id);
                        order_gone(&r->gpus[reg->device], &c->orders[i]);
                } else
                        c->orders[j++] = c->orders[i];
        }
        c->n_orders = j;
}

/* Unlinks and frees a region, uncharging its chunks. */
static void region_release(struct registry *r, struct region *reg) {
        struct gpu_stats *g = &r->gpus[reg->device];
        uint64_t charged = 0;
        size_t j = 0;

        region_forget_orders(r, reg);
        for (size_t i = 0; i < r->n_demands; i++)
                if (r->demands[i].reg != reg)
                        r->demands[j++] = r->demands[i];
        r->n_demands = j;
        for (uint32_t i = 0; i < reg->n_chunks; i++) {
                charged += chunk_charged(&reg->chunks[i]);
                g->evicting_chunks -= chunk_evicting(&reg->chunks[i]);
                chunk_book(r, &reg->chunks[i], false);
        }
        region_uncharge(r, reg, charged);
        reg->client->registered_bytes -= reg->size_bytes;
        r->n_chunks -= reg->n_chunks;
        for (unsigned t = 0; t < _KVT_TIER_MAX; t++)
                g->tier_chunks[t] -= reg->tier_chunks[t];
        if (reg->prev)
                reg->prev->next = reg->next;
        else
                r->regions = reg->next;
        if (reg->next)
                reg->next->prev = reg->prev;
        else
                r->regions_tail = reg->prev;
        free(reg);
}

int registry_region_del(struct registry *r, struct client *c, uint32_t region_id) {
        struct region *reg = client_find_region(c, region_id);

        if (!reg)
                return client_forget_refused(c, region_id, true) ? 0 : -ENOENT;
        array_remove(c->by_id, c->n_regions, reg, false);
        array_remove(c->by_base, c->n_regions, reg, true);
        c->n_regions--;
        region_release(r, reg);
        return 0;
}

void registry_client_free(struct registry *r, struct client *c) {
        if (!c)
                return;
        for (size_t i = 0; i < c->n_regions; i++)
                region_release(r, c->by_id[i]);
        if (c->prev)
                c->prev->next = c->next;
        else
                r->clients = c->next;
        if (c->next)
                c->next->prev = c->prev;
        else
                r->clients_tail = c->prev;
        r->n_clients--;
        free(c->by_id);
        free(c->by_base);
        free(c->orders);
        free(c->forgotten);
        free(c->refused);
        free(c);
}

/* Chunk ch's memory was released to the SSD tier: booked nowhere from now
 * on (at once, or when the order in flight on it ends: order_apply()). */
static void chunk_spilled(struct registry *r, struct region *reg, struct policy_chunk *ch) {
        ch->flags |= CHUNK_SPILLED;
        if (ch->pending != KVT_TIER_NONE)
                return;
        region_uncharge(r, reg, chunk_charged(ch));
        chunk_retier(r, reg, ch, KVT_TIER_NONE);
}

/* Whether chunk ch is one a restore gives back: released, no order on it
 * (one that is not, or a duplicate, leaves the books as they stand). */
static bool chunk_restorable(const struct policy_chunk *ch) {
        return (ch->flags & CHUNK_SPILLED) && ch->pending == KVT_TIER_NONE;
}

/* Spilled chunks [first, first + n) of reg were restored: to VRAM as far
 * as the client's grant covers them (the shim took them from the same
 * grant; past it they are booked unplaced, as a capture past its grant
 * is), else to host memory, unmapped.  Either way they are about to be
 * used: the restore counts as a use. */
static void chunks_restored(struct registry *r, struct region *reg, uint32_t first, uint32_t n, bool vram) {
        uint64_t want = 0, n_vram;

        for (uint32_t i = first; vram && i < first + n; i++)
                want += chunk_restorable(&reg->chunks[i]);
        n_vram = vram ? grant_take(reg->client, reg->device, n, want) : 0;
        region_charge_start(r, reg, n_vram);
        for (uint32_t i = first; i < first + n; i++) {
                struct policy_chunk *ch = &reg->chunks[i];

                if (!chunk_restorable(ch))
                        continue;
                ch->flags &= (uint8_t)~CHUNK_SPILLED;
                if (!vram)
                        chunk_retier(r, reg, ch, KVT_TIER_HOST);
                else if (n_vram > 0) {
                        chunk_retier(r, reg, ch, KVT_TIER_VRAM);
                        n_vram--;
                } else
                        chunk_retier(r, reg, ch, KVT_TIER_NONE);
                policy_chunk_use(ch, r->tick, conf_heat_half_life_ticks(r->conf));
        }
}

static void spill_state(struct registry *r, struct region *reg, const struct kvt_hint *hint) {
        if (hint->kind == KVT_HINT_SPILLED)
                for (uint32_t i = hint->first_chunk; i < hint->first_chunk + hint->n_chunks; i++)
                        chunk_spilled(r, reg, &reg->chunks[i]);
        else
                chunks_restored(r, reg, hint->first_chunk, hint->n_chunks, hint->kind == KVT_HINT_RESTORED_VRAM);
        reg->last_active = r->tick;
}

int registry_hint(struct registry *r, struct client *c, const struct kvt_hint *hint) {
        struct region *reg = client_find_region(c, hint->region_id);
        bool hot = hint->kind == KVT_HINT_HOT || hint->kind == KVT_HINT_WILL_NEED ||
                   hint->kind == KVT_HINT_PINNED;

        if (!reg)
                return client_forget_refused(c, hint->region_id, false) ? 0 : -ENOENT;
        if ((uint64_t)hint->first_chunk + hint->n_chunks > reg->n_chunks)
                return -ERANGE;
        if (hint->kind >= KVT_HINT_SPILLED) {
                spill_state(r, reg, hint);
                return 0;
        }
        for (uint32_t i = hint->first_chunk; i < hint->first_chunk + hint->n_chunks; i++) {
                struct policy_chunk *ch = &reg->chunks[i];

                /* COLD and DONE say what a probe unanswered says: the
                 * chunk in VRAM is unused, and demand may displace it (a
                 * chunk in VRAM is otherwise fresh: policy.h).  Any use
                 * after it, HOT or WILL_NEED too, makes it fresh again; a
                 * use soon after its arrival in VRAM counts in the probe
                 * window's estimate as a late answer would
                 * (policy_probe_late()): a hint proved wrong lengthens it. */
                if (hot) {
                        policy_chunk_touch(ch, r->tick, 1, conf_heat_half_life_ticks(r->conf));
                        ch->flags &= (uint8_t)~CHUNK_COLD;
                } else {
                        ch->last_use = ch->heat = 0;
                        if (ch->tier == KVT_TIER_VRAM && ch->pending == KVT_TIER_NONE)
                                ch->flags |= CHUNK_COLD;
                }
                if (hint->kind == KVT_HINT_PINNED)
                        ch->flags |= CHUNK_PINNED;
                else if (hint->kind == KVT_HINT_HOT)
                        ch->flags |= CHUNK_HOT;
                else if (hint->kind == KVT_HINT_COLD)
                        ch->flags &= (uint8_t)~CHUNK_HOT;
                else if (hint->kind == KVT_HINT_DONE)
                        ch->flags &= (uint8_t)~(CHUNK_PINNED | CHUNK_HOT);
        }
        return 0;
}

/* A use of probe chunk ch (flags CHUNK_PROBE, in VRAM): within
 * [policy] protect_min of the probe (its window, planner.c), it came back
 * in time.  Returns
 * whether it did. */
static bool probe_back(struct registry *r, struct region *reg, uint32_t chunk) {
        struct policy_chunk *ch = &reg->chunks[chunk];
        /* before the probe's ORDER_DONE: its page left and was used since,
         * within the probe's own time in the shim (its order's tick is no
         * measure of that) */
        uint32_t delay = ch->pending != KVT_TIER_NONE ? 0 : r->tick - ch->last_move;
        bool back = delay <= conf_protect_min_ticks(r->conf);

        ch->flags &= (uint8_t)~CHUNK_PROBE_BITS;
        if (back) {
                r->gpus[reg->device].probes_back++;
                reg->client->demand[reg->device].probes_back++;
        }
        policy_probe_timing_note(&r->gpus[reg->device].probe_timing, delay);
        return back;
}

/* A use seen of ch that is a mapped eviction's own mapping (policy.h). */
static bool touch_is_own_mapping(const struct registry *r, const struct policy_chunk *ch) {
        return policy_own_mapping(ch, r->tick, policy_evict_quiet_ticks(conf_tick_ms(r->conf) * 1000ull));
}

/* Notes a demand for registry_gpu_judge_demands().  A demand sets
 * CHUNK_MAPPED, which only a move or a re-arm clears, so that a chunk is
 * rarely in the list twice; past r->n_chunks entries (plans that did not
 * run) it stops growing. */
static void demand_note(struct registry *r, struct region *reg, uint32_t chunk) {
        if (r->n_demands >= r->n_chunks)
                return;
        if (r->n_demands == r->cap_demands) {
                size_t cap = r->cap_demands ? r->cap_demands * 2 : 64;
                struct demand_seen *a;

                a = realloc(r->demands, cap * sizeof(*a));
                if (!a)
                        return; /* a demand not judged: the counter misses it */
                r->demands = a;
                r->cap_demands = cap;
        }
        r->demands[r->n_demands++] = (struct demand_seen){.reg = reg, .chunk = chunk};
}

void registry_region_launched(struct registry *r, struct region *reg, uint64_t n) {
        if (reg->launch_tick != r->tick) {
                /* the tick before is over (a demand re-plans, and the heat is
                 * read again, within a tick): its launches go in */
                if (reg->launch_tick)
                        policy_launch_avg_tick(&reg->launches, reg->launch_pending);
                reg->launch_tick = r->tick;
                reg->launch_pending = 0;
        }
        reg->launch_pending += n;
}

void registry_chunk_touch(struct registry *r, struct region *reg, uint32_t chunk, uint32_t n) {
        struct gpu_stats *g = &r->gpus[reg->device];
        struct policy_chunk *ch;

        if (chunk >= reg->n_chunks || n == 0)
                return;
        ch = &reg->chunks[chunk];
        if (touch_is_own_mapping(r, ch)) {
                /* no use, but its sample page may be mapped now: re-armed
                 * before it is seen again (and kept so by order_apply()) */
                g->own_maps_ignored++;
                ch->flags |= CHUNK_MAPPED;
                return;
        }
        g->uses_seen[ch->tier < _KVT_TIER_MAX ? ch->tier : KVT_TIER_NONE]++;
        if (conf_policy_demand(r->conf))
                policy_chunk_use(ch, r->tick, conf_heat_half_life_ticks(r->conf));
        else
                policy_chunk_touch(ch, r->tick, n, conf_heat_half_life_ticks(r->conf));
        policy_probe_late(&g->probe_timing, ch, r->tick, conf_protect_min_ticks(r->conf));
        ch->flags &= (uint8_t)~CHUNK_COLD; /* used: whatever a probe said */
        reg->last_active = r->tick;
        /* A probe's page faulted: the chunk in VRAM is in use. */
        if ((ch->flags & CHUNK_PROBE) && ch->tier == KVT_TIER_VRAM) {
                (void)probe_back(r, reg, chunk);
                return;
        }
        /* The first use of a chunk in host memory, unmapped, since it got
         * there (or since a page of it was re-armed): the GPU faulted on it,
         * and maps it from now on.  Later uses (launches, hints of a chunk
         * read in place) are uses, not faults. */
        if (ch->tier != KVT_TIER_HOST || ch->pending != KVT_TIER_NONE || (ch->flags & CHUNK_MAPPED))
                return;
        /* the re-arm that verified a mapped eviction found it in use */
        if ((ch->flags & (CHUNK_OWN_MAP | CHUNK_REARMED)) == (CHUNK_OWN_MAP | CHUNK_REARMED))
                g->verified_used++;
        ch->flags |= CHUNK_MAPPED;
        g->demand_faults++;
        if (policy_refault(ch, r->tick, conf_protect_min_ticks(r->conf))) {
                g->refaults++;
                reg->client->demand[reg->device].refaults++;
        }
        demand_note(r, reg, chunk);
}

/* The protection of client c's chunks on device: its guard's, once it has
 * one, else protect_ticks. */
static uint32_t client_protect(const struct client *c, int device, uint32_t protect_ticks) {
        const struct client_demand *cd = &c->demand[device];

        return cd->started ? cd->guard.protect_ticks : protect_ticks;
}

void registry_gpu_judge_demands(struct registry *r, int device, uint32_t protect_ticks, bool judge) {
        struct gpu_stats *g;
        size_t j = 0;

        if (device < 0 || device >= KVT_MAX_GPUS)
                return;
        g = &r->gpus[device];
        for (size_t i = 0; i < r->n_demands; i++) {
                const struct demand_seen *d = &r->demands[i];
                const struct policy_chunk *ch;

                if (d->reg->device != device) {
                        r->demands[j++] = *d;
                        continue;
                }
                ch = &d->reg->chunks[d->chunk];
                if (judge && !region_untiered(d->reg) && ch->tier == KVT_TIER_HOST && ch->pending == KVT_TIER_NONE &&
                    !(ch->flags & CHUNK_PINNED) &&
                    policy_demand_fresh_outside(ch, r->tick > ch->last_use ? r->tick - ch->last_use : 0,
                                                client_protect(d->reg->client, device, protect_ticks)) &&
                    g->charged_bytes + KVT_CHUNK_BYTES > g->budget_bytes)
                        g->evictions_avoided++;
        }
        r->n_demands = j;
}

void registry_probe_mark(struct registry *r, struct region *reg, uint32_t first, uint32_t n) {
        for (uint32_t i = first; i < first + n && i < reg->n_chunks; i++) {
                struct policy_chunk *ch = &reg->chunks[i];

                if (ch->tier != KVT_TIER_VRAM)
                        continue;
                /* a probe of its own (cohort of one), timed from now: the probe
                 * counts as the chunk's last move, so that it is not probed again
                 * within [policy] protect_min */
                ch->flags = (uint8_t)((ch->flags & ~CHUNK_PROBE_BITS) | CHUNK_PROBE);
                ch->last_move = r->tick;
                r->gpus[reg->device].probes++;
        }
}

void registry_probe_expired(struct registry *r, struct region *reg, uint32_t chunk) {
        struct policy_chunk *ch;

        if (chunk >= reg->n_chunks || !(reg->chunks[chunk].flags & CHUNK_PROBE))
                return;
        ch = &reg->chunks[chunk];
        ch->flags &= (uint8_t)~CHUNK_PROBE_BITS;
        if (ch->tier == KVT_TIER_VRAM && ch->pending == KVT_TIER_NONE)
                ch->flags |= CHUNK_COLD;
        r->gpus[reg->device].probes_expired++;
        reg->client->demand[reg->device].probes_expired++;
}

static int client_push_order(struct client *c, const struct order *o) {
        if (c->n_orders == c->cap_orders) {
                size_t cap = c->cap_orders ? c->cap_orders * 2 : 16;
                struct order *a = realloc(c->orders, cap * sizeof(*a));

                if (!a)
                        return -ENOMEM;
                c->orders = a;
                c->cap_orders = cap;
        }
        c->orders[c->n_orders++] = *o;
        c->max_order_id = o->id;
        return 0;
}

/* Whether evicting n_chunks more to node would take it over its host budget. */
static bool node_over(const struct registry *r, int node, uint64_t n_chunks) {
        const struct node_stats *ns = node >= 0 ? &r->nodes[node] : NULL;

        return ns && n_chunks && ns->limited && ns->charged_bytes + n_chunks * KVT_CHUNK_BYTES > ns->budget_bytes;
}

/* Marks chunks [first, first + n) pending to tier; evictions are booked on node. */
static void chunks_mark_pending(struct registry *r, struct region *reg, uint32_t first, uint32_t n, uint32_t tier,
                                int node) {
        for (uint32_t i = first; i < first + n; i++) {
                struct policy_chunk *ch = &reg->chunks[i];

                chunk_book(r, ch, false);
                if (tier != KVT_TIER_VRAM && ch->tier == KVT_TIER_VRAM)
                        ch->node = node >= 0 ? (uint8_t)node : POLICY_NODE_NONE;
                ch->pending = (uint8_t)tier;
                chunk_book(r, ch, true);
                r->gpus[reg->device].evicting_chunks += chunk_evicting(ch);
        }
}

static int order_new(struct registry *r, struct region *reg, uint32_t first, uint32_t n, uint32_t tier,
                     int host_node, uint32_t flags, struct kvt_order *ret) {
        struct gpu_stats *g = &r->gpus[reg->device];
        struct order o = {.id = r->next_order_id,
                          .region = reg,
                          .first = first,
                          .n = n,
                          .tier = tier,
                          .flags = flags,
                          .sent_ns = now_ns(),
                          .sent_tick = r->tick};
        uint64_t add = 0, evict = 0;
        int ret_push;

        if (n == 0 || (uint64_t)first + n > reg->n_chunks || tier == KVT_TIER_NONE || tier >= _KVT_TIER_MAX ||
            host_node < -1 || host_node >= KVT_MAX_NODES)
                return -ERANGE;
        if (tier == KVT_TIER_VRAM)
                host_node = -1;
        for (uint32_t i = first; i < first + n; i++) {
                if (reg->chunks[i].pending != KVT_TIER_NONE)
                        return -EBUSY;
                add += tier == KVT_TIER_VRAM && !chunk_charged(&reg->chunks[i]);
                evict += tier != KVT_TIER_VRAM && reg->chunks[i].tier == KVT_TIER_VRAM;
        }
        if (add && g->charged_bytes + add * KVT_CHUNK_BYTES > g->budget_bytes + gpu_overlap_bytes(r, g))
                return -ENOSPC;
        if (node_over(r, host_node, evict))
                return -ENOSPC;
        ret_push = client_push_order(reg->client, &o);
        if (ret_push < 0)
                return ret_push;

        chunks_mark_pending(r, reg, first, n, tier, host_node);
        if (host_node >= 0 && evict) {
                struct node_stats *ns = &r->nodes[host_node];
                ns->peak_charged_bytes = MAX(ns->peak_charged_bytes, ns->charged_bytes);
        }
        gpu_charge(r, g, add);
        reg->client->charged[reg->device] += add;
        g->inflight_orders++;
        if (flags & KVT_ORDER_REARM) {
                g->sampling_chunks += n;
                reg->client->sampling_chunks += n;
                reg->client->rearmed_chunks += n;
        }
        if (flags & KVT_ORDER_PROBE) {
                g->probing_orders++;
                reg->client->probing_orders++;
                reg->client->probes++;
        }
        r->next_order_id++;
        r->migrations.orders_sent++;
        *ret = (struct kvt_order){.order_id = o.id,
                                  .region_id = reg->id,
                                  .first_chunk = first,
                                  .n_chunks = n,
                                  .tier = tier,
                                  .host_node = host_node,
                                  .flags = flags};
        return 0;
}

int registry_order_new(struct registry *r, struct region *reg, uint32_t first, uint32_t n, uint32_t tier,
                       int host_node, struct kvt_order *ret) {
        return order_new(r, reg, first, n, tier, host_node, 0, ret);
}

int registry_probe_new(struct registry *r, struct region *reg, uint32_t first, uint32_t n, struct kvt_order *ret) {
        int k;

        if (n == 0 || (uint64_t)first + n > reg->n_chunks)
                return -ERANGE;
        for (uint32_t i = first; i < first + n; i++)
                if (reg->chunks[i].tier != KVT_TIER_VRAM)
                        return -EINVAL;
        /* booked as staying in VRAM (pending VRAM: charged, not evicting,
         * not movable meanwhile); sent as one page each to the host */
        k = order_new(r, reg, first, n, KVT_TIER_VRAM, -1, KVT_ORDER_PROBE, ret);
        if (k == 0)
                ret->tier = KVT_TIER_HOST;
        return k;
}

int registry_rearm_new(struct registry *r, struct region *reg, uint32_t first, uint32_t n, struct kvt_order *ret) {
        if (n == 0 || (uint64_t)first + n > reg->n_chunks)
                return -ERANGE;
        for (uint32_t i = first; i < first + n; i++)
                if (reg->chunks[i].tier != KVT_TIER_HOST)
                        return -EINVAL;
        return order_new(r, reg, first, n, KVT_TIER_HOST, -1, KVT_ORDER_REARM, ret);
}

static uint32_t book_tier(uint32_t tier) {
        return tier == KVT_TIER_HOST_MAPPED ? KVT_TIER_HOST : tier;
}

static void order_apply(struct registry *r, const struct order *o, int status) {
        bool ok = status == 0, rearm = ok && (o->flags & KVT_ORDER_REARM);
        struct region *reg = o->region;
        struct gpu_stats *g = &r->gpus[reg->device];
        uint64_t uncharge = 0, moved = 0;

        for (uint32_t i = o->first; i < o->first + o->n; i++) {
                struct policy_chunk *ch = &reg->chunks[i];
                bool was = chunk_charged(ch);
                /* a re-arm within a mapped eviction's quiet window: not
                 * booked (see below) */
                bool quiet = rearm && touch_is_own_mapping(r, ch);
                /* a re-arm of a mapped eviction's chunk, never seen used
                 * since, past that window */
                bool verify = rearm && !quiet && policy_chunk_unverified(ch) && !(ch->flags & CHUNK_SPILLED);

                g->evicting_chunks -= chunk_evicting(ch);
                chunk_book(r, ch, false);
                /* Pages re-armed or moved are unmapped from the GPU where its
                 * next touch is seen: a mapped eviction maps all but the
                 * chunk's sample page, which is mapped only if a touch came
                 * while it moved (CHUNK_MAPPED, set then).  A probe's chunk
                 * stays as it was, one page of it on the host. */
                if (ok && !(o->flags & (KVT_ORDER_PROBE | KVT_ORDER_REARM))) {
                        bool touched = o->tier == KVT_TIER_HOST_MAPPED && (ch->flags & CHUNK_MAPPED);

                        ch->flags &= (uint8_t)~(CHUNK_MAPPED | CHUNK_OWN_MAP | CHUNK_REARMED);
                        if (o->tier == KVT_TIER_HOST_MAPPED)
                                ch->flags |= CHUNK_OWN_MAP | (touched ? CHUNK_MAPPED : 0);
                } else if (rearm && ch->last_use >= o->sent_tick) {
                        /* used since the re-arm was ordered (a re-arm's chunk was
                         * unseen for protect_min before): its page faulted and is
                         * mapped again, a demand that registry_chunk_touch() could
                         * not count while the re-arm was in flight */
                        ch->flags |= CHUNK_MAPPED; /* as registry_chunk_touch() would have */
                        g->demand_faults++;
                        g->verified_used += verify;
                        demand_note(r, reg, i);
                } else if (rearm)
                        ch->flags &= (uint8_t)~CHUNK_MAPPED;
                /* A re-arm is timed from when the shim made it, as a probe is:
                 * "armed and not used since" means something only after a
                 * use has had time to show (policy/siblings.h).  Within a
                 * mapped eviction's quiet window the eviction's tick stands
                 * (the window is keyed on it), and it is as recent.  A
                 * re-arm that verifies a mapped eviction keeps CHUNK_OWN_MAP
                 * (with CHUNK_REARMED: the next use seen is one the eviction
                 * may have hidden) and the eviction's tick: the chunk counted
                 * as armed from there, and a use it finds shows at once.  One
                 * made within the window (a protect_min shorter than it) is
                 * not booked, and is made again once the window is over. */
                if (rearm && !quiet && ch->tier == KVT_TIER_HOST) {
                        ch->flags = (uint8_t)((ch->flags & ~(verify ? 0 : CHUNK_OWN_MAP)) | CHUNK_REARMED);
                        if (!verify)
                                ch->last_move = r->tick;
                        g->verified_chunks += verify;
                }
                /* Promoted, or a probe that failed: no probe. */
                if ((ok && o->tier == KVT_TIER_VRAM && !(o->flags & KVT_ORDER_PROBE)) || !ok)
                        ch->flags &= (uint8_t)~(CHUNK_PROBE_BITS | (ok ? CHUNK_COLD : 0));
                if (ok && ch->tier == KVT_TIER_VRAM && o->tier != KVT_TIER_VRAM) {
                        g->evicted_chunks++;
                        reg->client->demand[reg->device].evicted++;
                        /* a probe evicted unanswered (the plan took it for
                         * cold once its window passed): it expired (still
                         * pending, so not marked cold) */
                        if (!(o->flags & KVT_ORDER_PROBE))
                                registry_probe_expired(r, reg, i);
                }
                /* A mapped eviction is booked as host memory, its sample
                 * page armed: its next use faults, with no re-arm. */
                if (ok && ch->tier != book_tier(o->tier)) {
                        reg->tier_chunks[ch->tier]--;
                        g->tier_chunks[ch->tier]--;
                        ch->tier = (uint8_t)book_tier(o->tier);
                        ch->last_move = r->tick; /* hysteresis counts from here */
                        reg->tier_chunks[ch->tier]++;
                        g->tier_chunks[ch->tier]++;
                        moved++;
                }
                /* A probe's window (and how long it takes to come back) starts
                 * when its page left, not when it was ordered: a probe that
                 * queued in the shim had no time yet to be used. */
                if (ok && (o->flags & KVT_ORDER_PROBE) && (ch->flags & CHUNK_PROBE))
                        ch->last_move = r->tick;
                ch->pending = KVT_TIER_NONE;
                chunk_book(r, ch, true);
                /* spilled while its order was in flight: released since */
                if (ch->flags & CHUNK_SPILLED)
                        chunk_retier(r, reg, ch, KVT_TIER_NONE);
                uncharge += was && !chunk_charged(ch);
        }
        region_uncharge(r, reg, uncharge);
        order_gone(g, o);
        if (status == -ENOENT)
                r->migrations.orders_cancelled++;
        else if (!ok)
                r->migrations.orders_failed++;
        else {
                r->migrations.orders_done++;
                if (o->flags & KVT_ORDER_REARM)
                        g->rearmed_chunks += o->n;
                else if (o->tier == KVT_TIER_VRAM) {
                        r->migrations.bytes_to_vram += moved * KVT_CHUNK_BYTES;
                        g->moved_bytes[MOVE_TO_VRAM] += moved * KVT_CHUNK_BYTES;
                } else {
                        r->migrations.bytes_to_host += moved * KVT_CHUNK_BYTES;
                        g->moved_bytes[MOVE_TO_HOST] += moved * KVT_CHUNK_BYTES;
                }
        }
}

/* Index of order id in c->orders (ascending), or SIZE_MAX. */
static size_t client_find_order(const struct client *c, uint64_t id) {
        size_t lo = 0, hi = c->n_orders;

        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;

                if (c->orders[mid].id < id)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return lo < c->n_orders && c->orders[lo].id == id ? lo : SIZE_MAX;
}

int registry_order_done(struct registry *r, struct client *c, const struct kvt_order_done *done) {
        size_t i = client_find_order(c, done->order_id);

        if (i == SIZE_MAX) {
                for (size_t j = 0; j < c->n_forgotten; j++)
                        if (c->forgotten[j] == done->order_id) {
                                c->forgotten[j] = c->forgotten[--c->n_forgotten];
                                return 0;
                        }
                return -ENOENT;
        }
        log_debug("Order %llu done: status %d, %.3f ms in the shim.", (unsigned long long)done->order_id,
                  done->status, (double)done->elapsed_ns / 1e6);
        if ((c->orders[i].flags & KVT_ORDER_REARM) && done->status == 0)
                r->gpus[c->orders[i].region->device].rearm_ns += done->elapsed_ns;
        if ((c->orders[i].flags & KVT_ORDER_PROBE) && done->status == 0)
                r->gpus[c->orders[i].region->device].probe_ns += done->elapsed_ns;
        if (!(c->orders[i].flags & (KVT_ORDER_PROBE | KVT_ORDER_REARM)) && done->status == 0) {
                struct gpu_stats *g = &r->gpus[c->orders[i].region->device];
                enum move_direction dir = c->orders[i].tier == KVT_TIER_VRAM ? MOVE_TO_VRAM : MOVE_TO_HOST;

                move_latency_observe(&g->moves[dir], done->elapsed_ns);
        }
        order_apply(r, &c->orders[i], done->status);
        memmove(c->orders + i, c->orders + i + 1, (c->n_orders - i - 1) * sizeof(*c->orders));
        c->n_orders--;
        /* -ENOENT: the shim freed the region and its REGION_DEL is on the way. */
        return done->status == 0 || done->status == -ENOENT ? 0 : 1;
}

/* Takes back an order its client left unanswered: the books cannot tell
 * where its chunks are now, so they are booked as unplaced (tier NONE),
 * charged to no GPU and no node, whatever the order or the client's own
 * REGION_ADD said of them.  That is the safe side for everyone else: what
 * the GPU budget held for them is free again; the chunks themselves are
 * still the client's, UVM's to place. */
static void order_take_back(struct registry *r, const struct order *o) {
        struct region *reg = o->region;
        struct gpu_stats *g = &r->gpus[reg->device];
        uint64_t uncharge = 0;

        for (uint32_t i = o->first; i < o->first + o->n; i++) {
                struct policy_chunk *ch = &reg->chunks[i];

                uncharge += chunk_charged(ch);
                g->evicting_chunks -= chunk_evicting(ch);
                /* books nothing: NONE holds no host memory kvtier knows of */
                chunk_retier(r, reg, ch, KVT_TIER_NONE);
        }
        region_uncharge(r, reg, uncharge);
        order_gone(g, o);
}

unsigned registry_client_expire_orders(struct registry *r, struct client *c, uint64_t now, uint64_t timeout_ns) {
        unsigned n = 0;
        size_t j = 0;

        for (size_t i = 0; i < c->n_orders; i++) {
                if (now - c->orders[i].sent_ns < timeout_ns) {
                        c->orders[j++] = c->orders[i];
                        continue;
                }
                order_take_back(r, &c->orders[i]);
                /* a late ORDER_DONE of it is no protocol error, and changes nothing */
                client_remember_forgotten(c, c->orders[i].id);
                n++;
        }
        c->n_orders = j;
        c->order_timeouts += n;
        return n;
}

unsigned client_order_timeouts(const struct client *c) {
        return c->order_timeouts;
}

struct client *registry_clients(const struct registry *r) {
        return r->clients;
}

struct client *client_next(const struct client *c) {
        return c->next;
}

struct region *registry_regions(const struct registry *r) {
        return r->regions;
}

struct region *region_next(const struct region *reg) {
        return reg->next;
}

const struct gpu_stats *registry_gpu(const struct registry *r, int device) {
        return device >= 0 && device < KVT_MAX_GPUS && r->gpu_present[device] ? &r->gpus[device] : NULL;
}

const struct node_stats *registry_node(const struct registry *r, int node) {
        return node >= 0 && node < KVT_MAX_NODES && r->node_present[node] ? &r->nodes[node] : NULL;
}

const struct migration_stats *registry_migrations(const struct registry *r) {
        return &r->migrations;
}

uint32_t client_id(const struct client *c) {
        return c->id;
}

pid_t client_pid(const struct client *c) {
        return c->pid;
}

uid_t client_uid(const struct client *c) {
        return c->uid;
}

const char *client_name(const struct client *c) {
        return c->name;
}

int client_section(const struct client *c) {
        return c->section;
}

void client_set_section(struct client *c, int section) {
        c->section = section;
}

int client_device(const struct client *c) {
        return c->device;
}

void *client_userdata(const struct client *c) {
        return c->userdata;
}

size_t client_n_regions(const struct client *c) {
        return c->n_regions;
}

const struct region *client_region(const struct client *c, size_t i) {
        return i < c->n_regions ? c->by_id[i] : NULL;
}

struct client *region_client(const struct region *reg) {
        return reg->client;
}

uint32_t region_id(const struct region *reg) {
        return reg->id;
}

int region_device(const struct region *reg) {
        return reg->device;
}

uint64_t region_base(const struct region *reg) {
        return reg->base;
}

uint64_t region_size(const struct region *reg) {
        return reg->size_bytes;
}

uint32_t region_api(const struct region *reg) {
        return reg->api;
}

uint32_t region_rule(const struct region *reg) {
        return reg->rule;
}

bool region_untiered(const struct region *reg) {
        return reg->flags & KVT_REGION_UNTIERED;
}

uint32_t region_n_chunks(const struct region *reg) {
        return reg->n_chunks;
}

const struct policy_chunk *region_chunks(const struct region *reg) {
        return reg->chunks;
}

uint32_t region_last_active(const struct region *reg) {
        return reg->last_active;
}

uint32_t region_launch_rate(const struct region *reg) {
        return policy_launch_avg_rate(&reg->launches);
}

/* Whether client c uses GPU device: connected for it, or with a region there. */
static bool client_uses_gpu(const struct client *c, int device) {
        bool uses = c->device == device;

        for (size_t i = 0; !uses && i < c->n_regions; i++)
                uses = c->by_id[i]->device == device;
        return uses;
}

/* What every client's share on a GPU is cut from, computed once for all
 * of them: the room new captures may take, the clients using the GPU, and
 * the room all clients' grants hold. */
struct grant_terms {
        uint64_t grantable, n_clients, held;
};

/* The terms of GPU device (present, its budget resolved); records its
 * grantable_bytes and grant_over_bytes. */
static void grant_terms(struct registry *r, int device, struct grant_terms *t) {
        struct gpu_stats *g = &r->gpus[device];
        uint64_t free_bytes = g->budget_bytes > g->charged_bytes ? g->budget_bytes - g->charged_bytes : 0;
        uint64_t over = MIN(conf_capture_margin(r->conf, g->budget_bytes), g->stale_chunks * KVT_CHUNK_BYTES);

        /* promotions first: the room they wait for goes to no capture */
        free_bytes -= MIN(free_bytes, g->roomless_chunks * KVT_CHUNK_BYTES);
        /* never past budget + margin, whatever is charged already */
        if (g->charged_bytes > g->budget_bytes)
                over = over > g->charged_bytes - g->budget_bytes ? over - (g->charged_bytes - g->budget_bytes) : 0;
        g->grant_over_bytes = over;
        g->grantable_bytes = (free_bytes + over) / KVT_CHUNK_BYTES * KVT_CHUNK_BYTES;
        *t = (struct grant_terms){.grantable = g->grantable_bytes};
        for (const struct client *c = r->clients; c; c = c->next) {
                t->n_clients += client_uses_gpu(c, device);
                t->held += grant_book_held(&c->grants[device]);
        }
        t->n_clients = MAX(t->n_clients, 1u);
}

/* registry_grant_cap() of client c (using GPU device) on the terms t. */
static uint64_t grant_cap_of(struct registry *r, const struct client *c, int device, const struct grant_terms *t) {
        uint64_t own = grant_book_held(&c->grants[device]), others = t->held > own ? t->held - own : 0;
        uint64_t share = t->grantable / t->n_clients, quota;
        unsigned prio;

        /* never room another client's grant may still be taking (a cap
         * raised is in force at once, one lowered only once answered) */
        share = MIN(share, t->grantable > others ? t->grantable - others : 0);
        /* never past the client's own [client.NAME] quota */
        if (conf_client(r->conf, c->section, &prio, &quota) && quota != UINT64_MAX) {
                uint64_t held = c->charged[device] * KVT_CHUNK_BYTES;

                share = MIN(share, quota > held ? quota - held : 0);
        }
        return client_vram_started(c, device) + share / KVT_CHUNK_BYTES * KVT_CHUNK_BYTES;
}

/* Whether GPU device has a budget to grant from. */
static bool gpu_grants(const struct registry *r, int device) {
        return device >= 0 && device < KVT_MAX_GPUS && r->gpu_present[device] && r->gpus[device].budget_resolved;
}

uint64_t registry_grant_cap(struct registry *r, const struct client *c, int device) {
        struct grant_terms t;

        if (!gpu_grants(r, device) || !client_uses_gpu(c, device))
                return client_vram_started(c, device);
        grant_terms(r, device, &t);
        return grant_cap_of(r, c, device, &t);
}

void registry_grant_pass(struct registry *r, int device, registry_grant_fn fn, void *userdata) {
        struct grant_terms t;
        bool grants = gpu_grants(r, device);

        if (grants)
                grant_terms(r, device, &t);
        for (struct client *c = r->clients; c; c = c->next) {
                bool uses = grants && client_uses_gpu(c, device);
                uint64_t before = grant_book_held(&c->grants[device]);

                fn(c, uses ? grant_cap_of(r, c, device, &t) : client_vram_started(c, device), userdata);
                /* what fn sent may hold more (or less) room: the next client's share sees it */
                if (grants)
                        t.held = t.held - before + grant_book_held(&c->grants[device]);
        }
}

void registry_gpu_sampled(struct registry *r, int device, uint32_t probe_window_ticks, uint32_t probe_every_ticks) {
        if (device >= 0 && device < KVT_MAX_GPUS) {
                r->gpus[device].probe_window_ticks = probe_window_ticks;
                r->gpus[device].probe_every_ticks = probe_every_ticks;
        }
}

void registry_gpu_planned(struct registry *r, int device, uint32_t protect_ticks, const struct policy_plan *plan) {
        struct gpu_stats *g;

        if (device < 0 || device >= KVT_MAX_GPUS)
                return;
        g = &r->gpus[device];
        g->protect_ticks = protect_ticks;
        g->held_chunks = plan->held_chunks;
        g->held_priority = plan->held_priority;
        g->stale_chunks = plan->stale_chunks;
        g->cold_chunks = plan->cold_chunks;
        g->roomless_chunks = plan->roomless_chunks;
        g->sibling_groups = plan->sibling_groups;
        g->sibling_groups_mute = plan->sibling_groups_mute;
        g->sibling_regions = plan->sibling_regions;
        g->sibling_demand_chunks = plan->sibling_demand_chunks;
        g->sibling_stale_chunks = plan->sibling_stale_chunks;
}

struct client_demand *client_demand(struct client *c, int device) {
        return device >= 0 && device < KVT_MAX_GPUS ? &c->demand[device] : NULL;
}

uint32_t client_protect_ticks(const struct client *c, int device) {
        return device >= 0 && device < KVT_MAX_GPUS ? client_protect(c, device, 0) : 0;
}

uint32_t client_probe_every_ticks(const struct client *c, int device) {
        return device >= 0 && device < KVT_MAX_GPUS && c->demand[device].started ? c->demand[device].prober.interval
                                                                                  : 0;
}

uint64_t client_grant_cap(const struct client *c, int device) {
        return device >= 0 && device < KVT_MAX_GPUS ? c->grants[device].cap : 0;
}

uint64_t client_vram_started(const struct client *c, int device) {
        return device >= 0 && device < KVT_MAX_GPUS ? c->grants[device].started : 0;
}

void client_set_grant_cap(struct client *c, int device, uint64_t cap_bytes) {
        if (device >= 0 && device < KVT_MAX_GPUS)
                grant_book_set(&c->grants[device], cap_bytes);
}

const struct grant_book *client_grant_book(const struct client *c, int device) {
        return device >= 0 && device < KVT_MAX_GPUS ? &c->grants[device] : NULL;
}

bool client_grant_waiting(const struct client *c, int device) {
        return device >= 0 && device < KVT_MAX_GPUS && grant_book_waiting(&c->grants[device]);
}

uint32_t registry_grant_sent(struct registry *r, struct client *c, int device, uint64_t cap_bytes) {
        if (device < 0 || device >= KVT_MAX_GPUS)
                return 0;
        return grant_book_sent(&c->grants[device], cap_bytes, r->tick);
}

int registry_grant_acked(struct registry *r, struct client *c, const struct kvt_grant_ack *a) {
        if (a->device < 0 || a->device >= KVT_MAX_GPUS)
                return -EINVAL;
        return grant_book_acked(&c->grants[a->device], a->seq, a->started_bytes, r->tick);
}

uint64_t registry_grants_reserved(struct registry *r, int device) {
        uint32_t tick_ms = conf_tick_ms(r->conf);
        uint32_t ack_ticks = (GRANT_ACK_TIMEOUT_MS + tick_ms - 1) / tick_ms;
        uint32_t hold_ticks = (GRANT_HOLD_TIMEOUT_MS + tick_ms - 1) / tick_ms;
        uint64_t n = 0;

        if (device < 0 || device >= KVT_MAX_GPUS)
                return 0;
        for (struct client *c = r->clients; c; c = c->next) {
                bool overdue;

                n += grant_book_reserved(&c->grants[device], r->tick, ack_ticks, hold_ticks, &overdue);
                if (overdue && !(c->grant_overdue_logged & 1ull << device)) {
                        log_warning("Client %u (pid %d) did not acknowledge its GRANT %u for GPU %d within %u ms; "
                                    "taking it at its word that it started no more than the cap.",
                                    c->id, (int)c->pid, c->grants[device].seq, device, GRANT_ACK_TIMEOUT_MS);
                        c->grant_overdue_logged |= 1ull << device;
                }
        }
        r->gpus[device].grant_reserved_bytes = n;
        return n;
}

uint64_t client_sampling_chunks(const struct client *c) {
        return c->sampling_chunks;
}

uint64_t client_probing_orders(const struct client *c) {
        return c->probing_orders;
}

uint64_t client_rearmed_chunks(const struct client *c) {
        return c->rearmed_chunks;
}

uint64_t client_probes(const struct client *c) {
        return c->probes;
}

unsigned client_pace(const struct client *c) {
        return c->pace_percent;
}

void client_set_pace(struct client *c, unsigned percent) {
        c->pace_percent = percent;
}

uint64_t region_tier_chunks(const struct region *reg, uint32_t tier) {
        return tier < _KVT_TIER_MAX ? reg->tier_chunks[tier] : 0;
}
