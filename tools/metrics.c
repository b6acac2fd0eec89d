/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <inttypes.h>
#include <string.h>

#include "metrics.h"

static int64_t num(struct json_object *o, const char *key) {
        struct json_object *v;

        return json_object_object_get_ex(o, key, &v) ? json_object_get_int64(v) : 0;
}

static struct json_object *array(struct json_object *o, const char *key) {
        struct json_object *v;

        return json_object_object_get_ex(o, key, &v) && json_object_is_type(v, json_type_array) ? v : NULL;
}

/* A label value with \, " and newlines escaped, as the format requires. */
static void label_value(FILE *f, const char *s) {
        fputc('"', f);
        for (; s && *s; s++)
                switch (*s) {
                case '\\': fputs("\\\\", f); break;
                case '"': fputs("\\\"", f); break;
                case '\n': fputs("\\n", f); break;
                default: fputc(*s, f); break;
                }
        fputc('"', f);
}

static void header(FILE *f, const char *name, const char *type, const char *help) {
        fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

#define KVTIER_UP_HELP "1 when kvtierd answered, 0 when it did not."

void metrics_print_down(FILE *f) {
        header(f, "kvtier_up", "gauge", KVTIER_UP_HELP);
        fprintf(f, "kvtier_up 0\n");
}

/* The tiers as status reports them: JSON key and tier label. */
static const struct {
        const char *key, *tier;
} tiers[] = {
        { "vram_bytes", "vram" },
        { "host_mapped_bytes", "host_mapped" },
        { "host_bytes", "host" },
        { "none_bytes", "none" },
};

/* One gauge per GPU for a key of the GPU objects. */
static void gpu_gauge(FILE *f, struct json_object *gpus, const char *name, const char *key, const char *help) {
        header(f, name, "gauge", help);
        for (size_t i = 0; gpus && i < json_object_array_length(gpus); i++) {
                struct json_object *g = json_object_array_get_idx(gpus, i);
                fprintf(f, "%s{gpu=\"%" PRId64 "\"} %" PRId64 "\n", name, num(g, "device"), num(g, key));
        }
}

static struct json_object *object(struct json_object *o, const char *key) {
        struct json_object *v;

        return json_object_object_get_ex(o, key, &v) && json_object_is_type(v, json_type_object) ? v : NULL;
}

/* One counter or gauge per GPU for a key of the GPU's "demand" object
 * (scale: a factor for the value, 1e-3 for milliseconds as seconds). */
static void demand_metric(FILE *f, struct json_object *gpus, const char *name, const char *type,
                          const char *key, double scale, const char *help) {
        header(f, name, type, help);
        for (size_t i = 0; gpus && i < json_object_array_length(gpus); i++) {
                struct json_object *g = json_object_array_get_idx(gpus, i), *d = object(g, "demand");

                if (scale == 1)
                        fprintf(f, "%s{gpu=\"%" PRId64 "\"} %" PRId64 "\n", name, num(g, "device"),
                                num(d, key));
                else
                        fprintf(f, "%s{gpu=\"%" PRId64 "\"} %.3f\n", name, num(g, "device"),
                                (double)num(d, key) * scale);
        }
}

static uint64_t u64_at(struct json_object *a, size_t i) {
        return (uint64_t)json_object_get_int64(json_object_array_get_idx(a, i));
}

/* The directions of the status's "moves" objects: key and label. */
static const char *const directions[] = {"to_vram", "to_host"};

/* kvtier_move_duration_seconds: a histogram per GPU and direction from the
 * status's per-bucket counts (cumulated here, as the format wants). */
static void print_move_histograms(FILE *f, struct json_object *gpus) {
        header(f, "kvtier_move_duration_seconds", "histogram",
               "Time a completed move order took in the shim, from the start of its run to its completion "
               "(one observation per order; promotions to_vram, evictions to_host).");
        for (size_t i = 0; gpus && i < json_object_array_length(gpus); i++) {
                struct json_object *g = json_object_array_get_idx(gpus, i), *moves = object(g, "moves");

                for (size_t d = 0; d < sizeof(directions) / sizeof(directions[0]); d++) {
                        struct json_object *h = object(moves, directions[d]);
                        struct json_object *le = array(h, "le_ns"), *counts = array(h, "counts");
                        size_t n = le ? json_object_array_length(le) : 0;
                        uint64_t cum = 0;
                        char labels[64];

                        if (!counts || json_object_array_length(counts) != n + 1)
                                continue; /* not a histogram this tool knows */
                        snprintf(labels, sizeof(labels), "gpu=\"%" PRId64 "\",direction=\"%s\"",
                                 num(g, "device"), directions[d]);
                        for (size_t b = 0; b <= n; b++) {
                                char le_text[32] = "+Inf";

                                cum += u64_at(counts, b);
                                if (b < n)
                                        snprintf(le_text, sizeof(le_text), "%g",
                                                 (double)u64_at(le, b) / 1e9);
                                fprintf(f, "kvtier_move_duration_seconds_bucket{%s,le=\"%s\"} %" PRIu64 "\n",
                                        labels, le_text, cum);
                        }
                        fprintf(f, "kvtier_move_duration_seconds_sum{%s} %.9f\n", labels,
                                (double)num(h, "sum_ns") / 1e9);
                        fprintf(f, "kvtier_move_duration_seconds_count{%s} %" PRIu64 "\n", labels, cum);
                }
        }
        header(f, "kvtier_gpu_moved_bytes_total", "counter",
               "Bytes that completed moves took to VRAM (to_vram) or out of it (to_host): rate() is the "
               "link "
               "throughput kvtier uses.");
        for (size_t i = 0; gpus && i < json_object_array_length(gpus); i++) {
                struct json_object *g = json_object_array_get_idx(gpus, i), *moves = object(g, "moves");

                for (size_t d = 0; d < sizeof(directions) / sizeof(directions[0]); d++)
                        fprintf(f,
                                "kvtier_gpu_moved_bytes_total{gpu=\"%" PRId64 "\",direction=\"%s\"} %" PRId64
                                "\n",
                                num(g, "device"), directions[d], num(object(moves, directions[d]), "bytes"));
        }
}

/* The chunk uses kvtierd saw, by the tier their chunk was in, and the
 * share in VRAM. */
static void print_uses(FILE *f, struct json_object *gpus) {
        header(f, "kvtier_gpu_chunk_uses_total", "counter",
               "Chunk uses kvtierd saw (one per 2 MiB chunk and tick it was seen used in: kernel launches "
               "pointing into it, GPU faults and remote maps the shim reports, probes that came back), by the "
               "tier the chunk was in; reads of host memory the GPU has mapped are not seen until a re-arm. "
               "The VRAM hit rate over a window: rate of tier=\"vram\" over the rate of all.");
        for (size_t i = 0; gpus && i < json_object_array_length(gpus); i++) {
                struct json_object *g = json_object_array_get_idx(gpus, i), *u = object(g, "chunk_uses");

                for (size_t t = 0; t < sizeof(tiers) / sizeof(tiers[0]); t++)
                        fprintf(f, "kvtier_gpu_chunk_uses_total{gpu=\"%" PRId64 "\",tier=\"%s\"} %" PRId64 "\n",
                                num(g, "device"), tiers[t].tier, num(u, tiers[t].tier));
        }
        header(f, "kvtier_gpu_vram_hit_ratio", "gauge",
               "Of the chunk uses kvtierd saw since it started, the share whose chunk was in VRAM (GPUs with "
               "uses seen).");
        for (size_t i = 0; gpus && i < json_object_array_length(gpus); i++) {
                struct json_object *g = json_object_array_get_idx(gpus, i), *v = NULL;

                if (json_object_object_get_ex(g, "vram_hit_rate", &v) && v)
                        fprintf(f, "kvtier_gpu_vram_hit_ratio{gpu=\"%" PRId64 "\"} %.6f\n", num(g, "device"),
                                json_object_get_double(v));
        }
}

/* What the GPU gave away about its use of evicted chunks, and what the
 * demand policy did with it. */
static void print_demand(FILE *f, struct json_object *gpus) {
        demand_metric(f, gpus, "kvtier_gpu_evicted_chunk_faults_total", "counter", "demand_faults", 1,
                      "First uses seen of chunks booked in host memory, unmapped, since they got there or were "
                      "re-armed: GPU faults and remote maps the shim reports, kernel launches pointing into them "
                      "(a mapped chunk's reads are not seen until a re-arm).");
        demand_metric(f, gpus, "kvtier_gpu_refaults_total", "counter", "refaults", 1,
                      "Of those, uses of chunks evicted within [policy] protect_min before: evictions that "
                      "came back.");
        demand_metric(f, gpus, "kvtier_gpu_evictions_avoided_total", "counter", "evictions_avoided", 1,
                      "Demands (first uses seen of chunks in host memory) that the demand policy's thrash guard "
                      "held back while the VRAM budget was full (not the rate limit): each a promotion, and "
                      "the eviction of a chunk in use it would have taken, avoided; the chunk is read in place.");
        demand_metric(f, gpus, "kvtier_gpu_evicted_chunks_total", "counter", "evicted_chunks", 1,
                      "2 MiB chunks that completed evictions took out of VRAM.");
        demand_metric(f, gpus, "kvtier_gpu_held_bytes", "gauge", "held_bytes", 1,
                      "Bytes in host memory the GPU uses that the demand policy holds back from VRAM (read "
                      "in place), "
                      "as the last plan left them.");
        demand_metric(f, gpus, "kvtier_gpu_stale_bytes", "gauge", "stale_bytes", 1,
                      "Bytes in VRAM a new allocation may displace: found unused, or in a region no kernel "
                      "was launched on lately, as the last plan left them.");
        demand_metric(f, gpus, "kvtier_gpu_cold_bytes", "gauge", "cold_bytes", 1,
                      "Of the stale bytes, those found unused (by a probe or their siblings): what a demand "
                      "of the same or a higher priority may displace, as the last plan left them.");
        demand_metric(f, gpus, "kvtier_gpu_sibling_demand_bytes", "gauge", "sibling_demand_bytes", 1,
                      "Of the bytes in host memory the GPU uses, those taken for in use on their sibling "
                      "regions' word alone (the same offset in use in other layers), as the last plan left them.");
        demand_metric(f, gpus, "kvtier_gpu_sibling_stale_bytes", "gauge", "sibling_stale_bytes", 1,
                      "Of the stale bytes in VRAM, those taken for unused on their sibling regions' word alone "
                      "(no probe of their own), as the last plan left them.");
        demand_metric(f, gpus, "kvtier_gpu_protect_seconds", "gauge", "protect_ms", 1e-3,
                      "The thrash guard's protection: how long a use keeps a chunk where it is.");
        demand_metric(f, gpus, "kvtier_gpu_probes_total", "counter", "probes", 1,
                      "Chunks in VRAM probed (one 4 KiB page sent out to see whether it is used).");
        demand_metric(f, gpus, "kvtier_gpu_rearmed_chunks_total", "counter", "rearmed_chunks", 1,
                      "Host chunks re-armed (one 4 KiB page unmapped so that the next use shows).");
}

static void print_gpus(FILE *f, struct json_object *gpus) {
        gpu_gauge(f, gpus, "kvtier_gpu_budget_bytes", "budget_bytes", "VRAM budget of the GPU for captured chunks.");
        gpu_gauge(f, gpus, "kvtier_gpu_charged_bytes", "charged_bytes",
                  "VRAM charged against the budget: chunks in VRAM or on their way there.");
        gpu_gauge(f, gpus, "kvtier_gpu_peak_charged_bytes", "peak_charged_bytes",
                  "Most VRAM ever charged against the budget.");
        gpu_gauge(f, gpus, "kvtier_gpu_inflight_orders", "inflight_orders", "Migration orders not yet completed.");
        header(f, "kvtier_gpu_tier_bytes", "gauge", "Captured bytes of the GPU's regions by tier.");
        for (size_t i = 0; gpus && i < json_object_array_length(gpus); i++) {
                struct json_object *g = json_object_array_get_idx(gpus, i);
                for (size_t t = 0; t < sizeof(tiers) / sizeof(tiers[0]); t++)
                        fprintf(f, "kvtier_gpu_tier_bytes{gpu=\"%" PRId64 "\",tier=\"%s\"} %" PRId64 "\n",
                                num(g, "device"), tiers[t].tier, num(g, tiers[t].key));
        }
        print_move_histograms(f, gpus);
        print_uses(f, gpus);
        print_demand(f, gpus);
}

/* One gauge per host NUMA node for a key of the node objects; nodes whose
 * value is null (no budget) are left out. */
static void node_gauge(FILE *f, struct json_object *nodes, const char *name, const char *key, const char *help) {
        header(f, name, "gauge", help);
        for (size_t i = 0; nodes && i < json_object_array_length(nodes); i++) {
                struct json_object *n = json_object_array_get_idx(nodes, i), *v = NULL;

                if (!json_object_object_get_ex(n, key, &v) || !v)
                        continue;
                fprintf(f, "%s{node=\"%" PRId64 "\"} %" PRId64 "\n", name, num(n, "node"), num(n, key));
        }
}

static void print_nodes(FILE *f, struct json_object *nodes) {
        node_gauge(f, nodes, "kvtier_node_budget_bytes", "budget_bytes",
                   "Host budget of the NUMA node for evicted chunks (nodes without one are left out).");
        node_gauge(f, nodes, "kvtier_node_charged_bytes", "charged_bytes",
                   "Host memory of the node charged to its budget: chunks there or on their way there.");
        node_gauge(f, nodes, "kvtier_node_peak_charged_bytes", "peak_charged_bytes",
                   "Most charged to the node right after one of kvtier's evictions was ordered.");
        node_gauge(f, nodes, "kvtier_node_host_bytes", "host_bytes", "Captured bytes whose host copy is on the node.");
        node_gauge(f, nodes, "kvtier_node_chunks", "chunks", "Captured 2 MiB chunks whose host copy is on the node.");
}

/* A client's labels: client="ID",pid="PID",name="NAME" (escaped). */
static void client_labels(FILE *f, struct json_object *c) {
        struct json_object *v;
        const char *name = json_object_object_get_ex(c, "name", &v) ? json_object_get_string(v) : "";

        fprintf(f, "client=\"%" PRId64 "\",pid=\"%" PRId64 "\",name=", num(c, "client_id"), num(c, "pid"));
        label_value(f, name);
}

static void print_clients(FILE *f, struct json_object *clients) {
        size_t n = clients ? json_object_array_length(clients) : 0;

        header(f, "kvtier_clients", "gauge", "Processes connected through the shim.");
        fprintf(f, "kvtier_clients %zu\n", n);
        header(f, "kvtier_client_tier_bytes", "gauge", "Captured bytes of a client by tier.");
        for (size_t i = 0; i < n; i++) {
                struct json_object *c = json_object_array_get_idx(clients, i);

                for (size_t t = 0; t < sizeof(tiers) / sizeof(tiers[0]); t++) {
                        fprintf(f, "kvtier_client_tier_bytes{");
                        client_labels(f, c);
                        fprintf(f, ",tier=\"%s\"} %" PRId64 "\n", tiers[t].tier, num(c, tiers[t].key));
                }
        }
        header(f, "kvtier_client_lost_uses_total", "counter",
               "Uses a client's shim lost before kvtier saw them (CUPTI records dropped for want of buffer room).");
        for (size_t i = 0; i < n; i++) {
                struct json_object *c = json_object_array_get_idx(clients, i), *heat = NULL;

                json_object_object_get_ex(c, "heat", &heat);
                fprintf(f, "kvtier_client_lost_uses_total{");
                client_labels(f, c);
                fprintf(f, "} %" PRId64 "\n", heat ? num(heat, "lost_uses") : 0);
        }
}

static void print_migrations(FILE *f, struct json_object *mig) {
        static const char *const results[] = { "sent", "done", "failed", "cancelled" };
        char key[32];

        header(f, "kvtier_orders_total", "counter",
               "Migration orders by result (sent; then done, failed, or cancelled as the region was freed).");
        for (size_t i = 0; i < sizeof(results) / sizeof(results[0]); i++) {
                snprintf(key, sizeof(key), "orders_%s", results[i]);
                fprintf(f, "kvtier_orders_total{result=\"%s\"} %" PRId64 "\n", results[i], num(mig, key));
        }
        header(f, "kvtier_migrated_bytes_total", "counter", "Bytes moved by completed orders, by direction.");
        fprintf(f, "kvtier_migrated_bytes_total{direction=\"to_vram\"} %" PRId64 "\n", num(mig, "bytes_to_vram"));
        fprintf(f, "kvtier_migrated_bytes_total{direction=\"to_host\"} %" PRId64 "\n", num(mig, "bytes_to_host"));
}

/* What the connection limits did ([daemon] keys). */
static void print_connections(FILE *f, struct json_object *c) {
        static const struct {
                const char *key, *reason;
        } closed[] = {
                {"hello_timeouts", "hello_timeout"},
                {"dropped_queue", "send_queue_max"},
                {"dropped_stalled", "send_timeout"},
                {"dropped_orders", "max_order_timeouts"},
        };

        header(f, "kvtier_connections", "gauge",
               "Connections open to kvtierd, shims and kvtierctl together.");
        fprintf(f, "kvtier_connections %" PRId64 "\n", num(c, "open"));
        header(f, "kvtier_connections_refused_total", "counter",
               "Connections refused at accept: over max_connections, the reserve or the per-uid limit.");
        fprintf(f, "kvtier_connections_refused_total %" PRId64 "\n", num(c, "refused"));
        header(f, "kvtier_connections_closed_total", "counter",
               "Connections kvtierd closed, by the limit that closed them.");
        for (size_t i = 0; i < sizeof(closed) / sizeof(closed[0]); i++)
                fprintf(f, "kvtier_connections_closed_total{reason=\"%s\"} %" PRId64 "\n", closed[i].reason,
                        num(c, closed[i].key));
        header(f, "kvtier_regions_refused_total", "counter",
               "Captured regions refused registration by a [daemon] quota.");
        fprintf(f, "kvtier_regions_refused_total %" PRId64 "\n", num(c, "regions_refused"));
        header(f, "kvtier_order_timeouts_total", "counter",
               "Orders taken back for want of an answer within [daemon] order_timeout_ms.");
        fprintf(f, "kvtier_order_timeouts_total %" PRId64 "\n", num(c, "order_timeouts"));
}

/* The SSD tier: per client bytes spilled, counters of all clients. */
static void print_ssd(FILE *f, struct json_object *ssd) {
        static const struct {
                const char *name, *key, *help;
        } counters[] = {
                {"kvtier_ssd_spills_total", "spills", "Spills written whole to the SSD tier."},
                {"kvtier_ssd_restores_total", "restores", "Spills read back whole, every block verified."},
                {"kvtier_ssd_checksum_failures_total", "checksum_failures", "Blocks read back that failed their checksum."},
                {"kvtier_ssd_retries_total", "retries", "Transient SSD I/O errors retried."},
                {"kvtier_ssd_written_bytes_total", "written_bytes", "Bytes spilled."},
                {"kvtier_ssd_read_bytes_total", "read_bytes", "Bytes restored."},
        };
        struct json_object *totals = NULL, *clients = array(ssd, "clients");
        size_t n = clients ? json_object_array_length(clients) : 0;

        header(f, "kvtier_ssd_client_bytes", "gauge", "Bytes a client holds spilled in the SSD tier.");
        for (size_t i = 0; i < n; i++) {
                struct json_object *c = json_object_array_get_idx(clients, i);

                fprintf(f, "kvtier_ssd_client_bytes{pid=\"%" PRId64 "\",uid=\"%" PRId64 "\"} %" PRId64 "\n",
                        num(c, "pid"), num(c, "uid"), num(c, "bytes"));
        }
        if (!json_object_object_get_ex(ssd, "totals", &totals))
                return;
        for (size_t i = 0; i < sizeof(counters) / sizeof(counters[0]); i++) {
                header(f, counters[i].name, "counter", counters[i].help);
                fprintf(f, "%s %" PRId64 "\n", counters[i].name, num(totals, counters[i].key));
        }
}

void metrics_print(FILE *f, struct json_object *st) {
        struct json_object *mig = NULL;

        header(f, "kvtier_up", "gauge", KVTIER_UP_HELP);
        fprintf(f, "kvtier_up 1\n");
        header(f, "kvtier_uptime_seconds", "gauge", "Seconds since kvtierd started.");
        fprintf(f, "kvtier_uptime_seconds %.3f\n", (double)num(st, "uptime_ms") / 1000.0);
        print_gpus(f, array(st, "gpus"));
        print_nodes(f, array(st, "nodes"));
        print_clients(f, array(st, "clients"));
        if (json_object_object_get_ex(st, "migrations", &mig))
                print_migrations(f, mig);
        if (object(st, "connections"))
                print_connections(f, object(st, "connections"));
        if (object(st, "ssd"))
                print_ssd(f, object(st, "ssd"));
}
