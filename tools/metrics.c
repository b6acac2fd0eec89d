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

static void print_clients(FILE *f, struct json_object *clients) {
        size_t n = clients ? json_object_array_length(clients) : 0;

        header(f, "kvtier_clients", "gauge", "Processes connected through the shim.");
        fprintf(f, "kvtier_clients %zu\n", n);
        header(f, "kvtier_client_tier_bytes", "gauge", "Captured bytes of a client by tier.");
        for (size_t i = 0; i < n; i++) {
                struct json_object *c = json_object_array_get_idx(clients, i), *v;
                const char *name = json_object_object_get_ex(c, "name", &v) ? json_object_get_string(v) : "";

                for (size_t t = 0; t < sizeof(tiers) / sizeof(tiers[0]); t++) {
                        fprintf(f, "kvtier_client_tier_bytes{client=\"%" PRId64 "\",pid=\"%" PRId64 "\",name=",
                                num(c, "client_id"), num(c, "pid"));
                        label_value(f, name);
                        fprintf(f, ",tier=\"%s\"} %" PRId64 "\n", tiers[t].tier, num(c, tiers[t].key));
                }
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
        if (json_object_object_get_ex(st, "ssd", &mig) && mig)
                print_ssd(f, mig);
}
