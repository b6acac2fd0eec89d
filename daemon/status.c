/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "grants.h"
#include "status.h"
#include "util.h"

static json_object *json_u64(uint64_t v) {
        return json_object_new_uint64(v);
}

/* Adds vram_bytes, host_mapped_bytes, host_bytes, none_bytes from chunk counts. */
static void add_tiers(json_object *o, const uint64_t chunks[_KVT_TIER_MAX]) {
        json_object_object_add(o, "vram_bytes", json_u64(chunks[KVT_TIER_VRAM] * KVT_CHUNK_BYTES));
        json_object_object_add(o, "host_mapped_bytes",
                               json_u64(chunks[KVT_TIER_HOST_MAPPED] * KVT_CHUNK_BYTES));
        json_object_object_add(o, "host_bytes", json_u64(chunks[KVT_TIER_HOST] * KVT_CHUNK_BYTES));
        json_object_object_add(o, "none_bytes", json_u64(chunks[KVT_TIER_NONE] * KVT_CHUNK_BYTES));
}

/* The demand policy's view of a GPU: what it protects, holds back, samples. */
static json_object *demand_json(const struct gpu_stats *g, unsigned tick_ms) {
        json_object *o = json_object_new_object();

        json_object_object_add(o, "protect_ms", json_u64((uint64_t)g->protect_ticks * tick_ms));
        json_object_object_add(o, "probe_window_ms", json_u64((uint64_t)g->probe_window_ticks * tick_ms));
        /* the most often any client's prober lets probes go out: one tick
         * in this many (fewer while most of its probes come back) */
        json_object_object_add(o, "probe_every_ms", json_u64((uint64_t)g->probe_every_ticks * tick_ms));
        json_object_object_add(o, "held_bytes", json_u64(g->held_chunks * KVT_CHUNK_BYTES));
        json_object_object_add(o, "held_priority", json_u64(g->held_priority));
        json_object_object_add(o, "stale_bytes", json_u64(g->stale_chunks * KVT_CHUNK_BYTES));
        /* of stale_bytes, what a demand may displace (found unused); the rest a capture only */
        json_object_object_add(o, "cold_bytes", json_u64(g->cold_chunks * KVT_CHUNK_BYTES));
        json_object_object_add(o, "grantable_bytes", json_u64(g->grantable_bytes));
        json_object_object_add(o, "grant_reserved_bytes", json_u64(g->grant_reserved_bytes));
        /* of grantable_bytes, what lies over the budget: the margin stale chunks let the grants
         * give (promotions wait only for grant room past it) */
        json_object_object_add(o, "grant_over_bytes", json_u64(g->grant_over_bytes));
        json_object_object_add(o, "demand_faults", json_u64(g->demand_faults));
        json_object_object_add(o, "refaults", json_u64(g->refaults));
        json_object_object_add(o, "evictions_avoided", json_u64(g->evictions_avoided));
        json_object_object_add(o, "evicted_chunks", json_u64(g->evicted_chunks));
        json_object_object_add(o, "rearmed_chunks", json_u64(g->rearmed_chunks));
        json_object_object_add(o, "rearming_chunks", json_u64(g->sampling_chunks));
        json_object_object_add(o, "probing", json_u64(g->probing_orders));
        json_object_object_add(o, "own_maps_ignored", json_u64(g->own_maps_ignored));
        json_object_object_add(o, "verified_chunks", json_u64(g->verified_chunks));
        json_object_object_add(o, "verified_used", json_u64(g->verified_used));
        json_object_object_add(o, "rearm_ms", json_u64(g->rearm_ns / 1000000));
        json_object_object_add(o, "probe_ms", json_u64(g->probe_ns / 1000000));
        json_object_object_add(o, "probes", json_u64(g->probes));
        json_object_object_add(o, "probes_back", json_u64(g->probes_back));
        json_object_object_add(o, "probes_expired", json_u64(g->probes_expired));
        json_object_object_add(o, "sibling_groups", json_u64(g->sibling_groups));
        json_object_object_add(o, "sibling_groups_mute", json_u64(g->sibling_groups_mute));
        json_object_object_add(o, "sibling_regions", json_u64(g->sibling_regions));
        json_object_object_add(o, "sibling_demand_bytes", json_u64(g->sibling_demand_chunks * KVT_CHUNK_BYTES));
        json_object_object_add(o, "sibling_stale_bytes", json_u64(g->sibling_stale_chunks * KVT_CHUNK_BYTES));
        return o;
}

/* A move histogram: "le_ns" the buckets' upper bounds, "counts" per
 * bucket (not cumulative) with one more for +Inf, "orders", "sum_ns", and
 * "bytes" that the moves carried. */
static json_object *moves_json(const struct move_latency *h, uint64_t bytes) {
        json_object *o = json_object_new_object(), *le = json_object_new_array(),
                    *counts = json_object_new_array();

        for (unsigned b = 0; b < MOVE_LATENCY_BUCKETS; b++)
                json_object_array_add(le, json_u64(move_latency_bound_ns(b)));
        for (unsigned b = 0; b <= MOVE_LATENCY_BUCKETS; b++)
                json_object_array_add(counts, json_u64(h->counts[b]));
        json_object_object_add(o, "le_ns", le);
        json_object_object_add(o, "counts", counts);
        json_object_object_add(o, "orders", json_u64(h->orders));
        json_object_object_add(o, "sum_ns", json_u64(h->sum_ns));
        json_object_object_add(o, "bytes", json_u64(bytes));
        return o;
}

/* The chunk uses seen (gpu_stats.uses_seen) by the tier their chunk was in:
 * "vram", "host_mapped", "host", "none". */
static json_object *uses_json(const struct gpu_stats *g) {
        json_object *o = json_object_new_object();

        json_object_object_add(o, "vram", json_u64(g->uses_seen[KVT_TIER_VRAM]));
        json_object_object_add(o, "host_mapped", json_u64(g->uses_seen[KVT_TIER_HOST_MAPPED]));
        json_object_object_add(o, "host", json_u64(g->uses_seen[KVT_TIER_HOST]));
        json_object_object_add(o, "none", json_u64(g->uses_seen[KVT_TIER_NONE]));
        return o;
}

/* Of those, the share in VRAM since the start; null before any. */
static json_object *hit_rate_json(const struct gpu_stats *g) {
        uint64_t all = 0;

        for (unsigned t = 0; t < _KVT_TIER_MAX; t++)
                all += g->uses_seen[t];
        return all ? json_object_new_double((double)g->uses_seen[KVT_TIER_VRAM] / (double)all) : NULL;
}

static json_object *gpu_json(const struct gpu_stats *g, const struct conf *conf, unsigned tick_ms) {
        json_object *o = json_object_new_object(), *moves;

        json_object_object_add(o, "device", json_object_new_int(g->device));
        json_object_object_add(o, "host_node", json_object_new_int(g->host_node));
        json_object_object_add(o, "budget_bytes", json_u64(g->budget_bytes));
        json_object_object_add(o, "overlap_bytes", json_u64(conf_overlap_bytes(conf, g->budget_bytes)));
        json_object_object_add(o, "charged_bytes", json_u64(g->charged_bytes));
        json_object_object_add(o, "peak_charged_bytes", json_u64(g->peak_charged_bytes));
        json_object_object_add(o, "evicting_bytes", json_u64(g->evicting_chunks * KVT_CHUNK_BYTES));
        add_tiers(o, g->tier_chunks);
        json_object_object_add(o, "inflight_orders", json_u64(g->inflight_orders));
        json_object_object_add(o, "chunk_uses", uses_json(g));
        json_object_object_add(o, "vram_hit_rate", hit_rate_json(g));
        json_object_object_add(o, "demand", demand_json(g, tick_ms));
        moves = json_object_new_object();
        json_object_object_add(moves, "to_vram",
                               moves_json(&g->moves[MOVE_TO_VRAM], g->moved_bytes[MOVE_TO_VRAM]));
        json_object_object_add(moves, "to_host",
                               moves_json(&g->moves[MOVE_TO_HOST], g->moved_bytes[MOVE_TO_HOST]));
        json_object_object_add(o, "moves", moves);
        return o;
}

/* Runs of a chunk map before it is cut short: a region whose tiers change
 * more often than this is summed up by its byte counts anyway. */
#define CHUNK_MAP_MAX_RUNS 1024

/* The region's chunks by tier, run-length coded in chunk order: "V16 M240
 * -256" is 16 chunks in VRAM, 240 host-mapped, then 256 never placed (V, M,
 * H for VRAM, host-mapped, host; R for host memory the GPU mapped at a use
 * and reads in place: held back from VRAM; S for chunks released to the SSD
 * tier, holding nothing; '-' none), so that a reader can
 * see where in a region the daemon keeps what.  A chunk with an order in
 * flight is in lower case ('_' for '-').  NULL when out of memory;
 * *truncated when cut short. */
static char map_letter(const struct policy_chunk *c, const char *letter) {
        if (c->flags & POLICY_CHUNK_SPILLED)
                return 'S';
        if (c->tier == KVT_TIER_HOST && (c->flags & POLICY_CHUNK_MAPPED))
                return 'R';
        return c->tier < _KVT_TIER_MAX ? letter[c->tier] : '?';
}

static char *chunk_map(const struct region *reg, bool *truncated) {
        static const char letter[_KVT_TIER_MAX] = {'-', 'V', 'M', 'H'};
        const struct policy_chunk *c = region_chunks(reg);
        uint32_t n = region_n_chunks(reg), runs = 0;
        size_t cap = 64, len = 0;
        char *s = malloc(cap);

        *truncated = false;
        for (uint32_t i = 0; s && i < n;) {
                uint32_t j = i;
                char l = map_letter(&c[i], letter);

                if (c[i].pending)
                        l = l == '-' ? '_' : (char)(l | 0x20);
                while (j < n && map_letter(&c[j], letter) == map_letter(&c[i], letter) && !c[j].pending == !c[i].pending)
                        j++;
                if (runs++ == CHUNK_MAP_MAX_RUNS) {
                        *truncated = true;
                        break;
                }
                if (cap - len < 16) {
                        char *t = realloc(s, cap * 2);

                        if (!t) {
                                free(s);
                                return NULL;
                        }
                        s = t;
                        cap *= 2;
                }
                len += (size_t)snprintf(s + len, cap - len, "%s%c%u", len ? " " : "", l, j - i);
                i = j;
        }
        if (s)
                s[len] = '\0';
        return s;
}

/* budget_bytes is null for a node without a host budget. */
static json_object *node_json(const struct node_stats *ns) {
        json_object *o = json_object_new_object();

        json_object_object_add(o, "node", json_object_new_int(ns->node));
        json_object_object_add(o, "budget_bytes", ns->limited ? json_u64(ns->budget_bytes) : NULL);
        json_object_object_add(o, "charged_bytes", json_u64(ns->charged_bytes));
        json_object_object_add(o, "host_bytes", json_u64(ns->host_chunks * KVT_CHUNK_BYTES));
        json_object_object_add(o, "chunks", json_u64(ns->host_chunks));
        json_object_object_add(o, "peak_charged_bytes", json_u64(ns->peak_charged_bytes));
        return o;
}

static json_object *region_json(const struct region *reg, uint64_t sum[_KVT_TIER_MAX]) {
        json_object *o = json_object_new_object();
        uint64_t chunks[_KVT_TIER_MAX];
        bool truncated;
        char base[32], *map;

        for (unsigned t = 0; t < _KVT_TIER_MAX; t++) {
                chunks[t] = region_tier_chunks(reg, t);
                sum[t] += chunks[t];
        }
        snprintf(base, sizeof(base), "0x%llx", (unsigned long long)region_base(reg));
        json_object_object_add(o, "region_id", json_u64(region_id(reg)));
        json_object_object_add(o, "base", json_object_new_string(base));
        json_object_object_add(o, "size_bytes", json_u64(region_size(reg)));
        json_object_object_add(o, "device", json_object_new_int(region_device(reg)));
        json_object_object_add(o, "api", json_object_new_string(kvt_api_name(region_api(reg))));
        json_object_object_add(o, "rule", json_object_new_string(kvt_rule_name(region_rule(reg))));
        json_object_object_add(o, "untiered", json_object_new_boolean(region_untiered(reg)));
        /* kernels launched on it a tick, averaged as the demand policy ranks by */
        json_object_object_add(o, "launches_per_tick",
                               json_object_new_double((double)region_launch_rate(reg) / POLICY_LAUNCH_ONE));
        add_tiers(o, chunks);
        map = chunk_map(reg, &truncated);
        if (map) {
                json_object_object_add(o, "chunk_map", json_object_new_string(map));
                if (truncated)
                        json_object_object_add(o, "chunk_map_truncated", json_object_new_boolean(true));
                free(map);
        }
        return o;
}

static json_object *heat_json(const struct heat_table_stats *h) {
        json_object *o = json_object_new_object();

        json_object_object_add(o, "regions_bound", json_u64(h->regions_bound));
        json_object_object_add(o, "accesses", json_u64(h->accesses));
        json_object_object_add(o, "bad_slots", json_u64(h->bad_slots));
        json_object_object_add(o, "remaps", json_u64(h->remaps));
        json_object_object_add(o, "lost_uses", json_u64(h->lost_uses));
        return o;
}

/* A client's VRAM grant on its GPU (daemon/grants.h): the cap, what it
 * started and claimed there, and the last GRANT sent and answered. */
static json_object *grant_json(const struct grant_book *b) {
        json_object *o;

        if (!b)
                return NULL;
        o = json_object_new_object();
        json_object_object_add(o, "cap_bytes", json_u64(b->cap));
        json_object_object_add(o, "hold_bytes", json_u64(b->hold));
        json_object_object_add(o, "started_bytes", json_u64(b->started));
        json_object_object_add(o, "claimed_bytes", json_u64(b->claimed));
        json_object_object_add(o, "seq", json_u64(b->seq));
        json_object_object_add(o, "acked", json_u64(b->acked));
        return o;
}

static json_object *client_json(const struct client *c, const struct status_info *info) {
        const struct heat_table_stats *h = info->client_heat ? info->client_heat(c) : NULL;
        json_object *o = json_object_new_object(), *regions = json_object_new_array();
        uint64_t sum[_KVT_TIER_MAX] = {0};
        const char *label;

        for (size_t i = 0; i < client_n_regions(c); i++)
                json_object_array_add(regions, region_json(client_region(c, i), sum));
        json_object_object_add(o, "client_id", json_u64(client_id(c)));
        json_object_object_add(o, "pid", json_object_new_int64(client_pid(c)));
        json_object_object_add(o, "uid", json_u64(client_uid(c)));
        json_object_object_add(o, "name", json_object_new_string(client_name(c)));
        label = conf_client_label(info->conf, client_section(c));
        json_object_object_add(o, "section", label ? json_object_new_string(label) : NULL);
        json_object_object_add(o, "device", json_object_new_int(client_device(c)));
        json_object_object_add(o, "pace_percent", json_u64(client_pace(c)));
        json_object_object_add(o, "grant", grant_json(client_grant_book(c, client_device(c))));
        /* demand: its own thrash guard's protection on its GPU (0 before it is planned) */
        json_object_object_add(o, "protect_ms", json_u64((uint64_t)client_protect_ticks(c, client_device(c)) *
                                                         conf_tick_ms(info->conf)));
        /* and how often its own prober lets its chunks be probed (0 before it is planned) */
        json_object_object_add(o, "probe_every_ms", json_u64((uint64_t)client_probe_every_ticks(c, client_device(c)) *
                                                             conf_tick_ms(info->conf)));
        /* its share of the sampler: sent, and in flight in its shim */
        json_object_object_add(o, "rearmed_chunks", json_u64(client_rearmed_chunks(c)));
        json_object_object_add(o, "rearming_chunks", json_u64(client_sampling_chunks(c)));
        json_object_object_add(o, "probes", json_u64(client_probes(c)));
        json_object_object_add(o, "probing", json_u64(client_probing_orders(c)));
        add_tiers(o, sum);
        if (h)
                json_object_object_add(o, "heat", heat_json(h));
        json_object_object_add(o, "regions", regions);
        return o;
}

/* The active policy's parameters, as the planner uses them this tick. */
static json_object *policy_params_json(const struct conf *conf) {
        json_object *o = json_object_new_object();
        struct policy_params pp;

        conf_policy_params(conf, &pp);
        json_object_object_add(o, "hysteresis_ticks", json_u64(pp.hysteresis_ticks));
        json_object_object_add(o, "heat_half_life_ticks", json_u64(pp.heat_half_life_ticks));
        json_object_object_add(o, "window_bytes", json_u64((uint64_t)pp.window_chunks * KVT_CHUNK_BYTES));
        json_object_object_add(o, "prefetch_depth", json_u64(pp.prefetch_depth));
        json_object_object_add(o, "max_migration_rate", json_u64(conf_max_migration_rate(conf)));
        json_object_object_add(o, "evict_to", json_object_new_string(kvt_tier_name(pp.evict_tier)));
        json_object_object_add(o, "threads", json_u64(pp.threads));
        return o;
}

static json_object *migrations_json(const struct migration_stats *m) {
        json_object *o = json_object_new_object();

        json_object_object_add(o, "orders_sent", json_u64(m->orders_sent));
        json_object_object_add(o, "orders_done", json_u64(m->orders_done));
        json_object_object_add(o, "orders_failed", json_u64(m->orders_failed));
        json_object_object_add(o, "orders_cancelled", json_u64(m->orders_cancelled));
        json_object_object_add(o, "bytes_to_vram", json_u64(m->bytes_to_vram));
        json_object_object_add(o, "bytes_to_host", json_u64(m->bytes_to_host));
        return o;
}

static json_object *connections_json(const struct connection_stats *c) {
        json_object *o = json_object_new_object();

        json_object_object_add(o, "open", json_u64(c->open));
        json_object_object_add(o, "refused", json_u64(c->refused));
        json_object_object_add(o, "hello_timeouts", json_u64(c->hello_timeouts));
        json_object_object_add(o, "dropped_queue", json_u64(c->dropped_queue));
        json_object_object_add(o, "dropped_stalled", json_u64(c->dropped_stalled));
        json_object_object_add(o, "accept_pauses", json_u64(c->accept_pauses));
        json_object_object_add(o, "regions_refused", json_u64(c->regions_refused));
        json_object_object_add(o, "order_timeouts", json_u64(c->order_timeouts));
        json_object_object_add(o, "dropped_orders", json_u64(c->dropped_orders));
        return o;
}

int status_json(const struct registry *r, const struct status_info *info, char **ret) {
        json_object *root = json_object_new_object(), *gpus = json_object_new_array(),
                    *clients = json_object_new_array(), *nodes = json_object_new_array();
        char *s;

        if (!root || !gpus || !clients || !nodes) {
                json_object_put(root);
                json_object_put(gpus);
                json_object_put(clients);
                json_object_put(nodes);
                return -ENOMEM;
        }
        json_object_object_add(root, "version", json_object_new_string(PACKAGE_VERSION));
        json_object_object_add(root, "pid", json_object_new_int64(getpid()));
        json_object_object_add(root, "uptime_ms", json_u64((now_ns() - info->start_ns) / 1000000));
        json_object_object_add(root, "tick_ms", json_u64(info->tick_ms));
        json_object_object_add(root, "policy", json_object_new_string(conf_policy_name(info->conf)));
        json_object_object_add(root, "policy_params", policy_params_json(info->conf));
        json_object_object_add(root, "socket", json_object_new_string(info->socket));
        for (int d = 0; d < KVT_MAX_GPUS; d++)
                if (registry_gpu(r, d))
                        json_object_array_add(gpus, gpu_json(registry_gpu(r, d), info->conf, info->tick_ms));
        json_object_object_add(root, "gpus", gpus);
        for (int n = 0; n < KVT_MAX_NODES; n++)
                if (registry_node(r, n))
                        json_object_array_add(nodes, node_json(registry_node(r, n)));
        json_object_object_add(root, "nodes", nodes);
        for (const struct client *c = registry_clients(r); c; c = client_next(c))
                json_object_array_add(clients, client_json(c, info));
        json_object_object_add(root, "clients", clients);
        json_object_object_add(root, "migrations", migrations_json(registry_migrations(r)));
        if (info->connections)
                json_object_object_add(root, "connections", connections_json(info->connections));
        if (info->ssd_json && info->ssd)
                json_object_object_add(root, "ssd", info->ssd_json(info->ssd));

        s = strdup(json_object_to_json_string_ext(root, JSON_C_TO_STRING_PLAIN));
        json_object_put(root);
        if (!s)
                return -ENOMEM;
        *ret = s;
        return 0;
}

/* A document's text, its tree freed: 0 and *ret (free()), or -ENOMEM. */
static int json_finish(json_object *root, char **ret) {
        char *s = root ? strdup(json_object_to_json_string_ext(root, JSON_C_TO_STRING_PLAIN)) : NULL;

        json_object_put(root);
        if (!s)
                return -ENOMEM;
        *ret = s;
        return 0;
}

static json_object *json_str_or_null(const char *s) {
        return s && *s ? json_object_new_string(s) : NULL;
}

static void config_entry_json(const struct conf_entry *e, void *userdata) {
        json_object *entries = userdata, *o;

        if (!e->value) /* a template ([gpu.N]): no value in effect */
                return;
        o = json_object_new_object();
        json_object_object_add(o, "section", json_object_new_string(e->section));
        json_object_object_add(o, "key", json_object_new_string(e->key));
        json_object_object_add(o, "value", json_object_new_string(e->value));
        json_object_object_add(o, "default", json_str_or_null(e->def));
        json_object_object_add(o, "range", json_str_or_null(e->range));
        json_object_object_add(o, "help", json_object_new_string(e->help));
        json_object_array_add(entries, o);
}

int config_json(const struct conf *c, char **ret) {
        json_object *root = json_object_new_object(), *entries = json_object_new_array();

        if (!root || !entries) {
                json_object_put(root);
                json_object_put(entries);
                return -ENOMEM;
        }
        conf_foreach(c, config_entry_json, entries);
        json_object_object_add(root, "config", entries);
        return json_finish(root, ret);
}

int error_json(const char *reason, char **ret) {
        json_object *root = json_object_new_object();

        if (root)
                json_object_object_add(root, "error", json_object_new_string(reason));
        return json_finish(root, ret);
}
