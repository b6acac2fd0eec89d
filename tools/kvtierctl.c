/* SPDX-License-Identifier: MIT */
/*
 * kvtierctl: shows and steers kvtierd.
 *
 * Exit status: 0 success; 1 the daemon could not be reached or answered with
 * an error (not for metrics, which says kvtier_up 0 and exits 0), or metrics
 * --output could not replace its file; 2 usage error.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "metrics.h"
#include "protocol.h"
#include "util.h"

#define EXIT_USAGE 2
#define REPLY_TIMEOUT_MS 5000

static const char *arg_socket;
static bool arg_json;
static unsigned arg_interval_ms = 1000; /* top: refresh period */
static unsigned arg_iterations;         /* top: 0 = until interrupted */
static const char *arg_output;          /* metrics: the file to replace, or NULL for stdout */

static void help(void) {
        printf("Usage: kvtierctl [OPTIONS] COMMAND\n\n"
               "Commands:\n"
               "  status            budgets, clients, regions and tiers\n"
               "  top               status, refreshed every second until interrupted\n"
               "  metrics           Prometheus text format (node_exporter textfile collector);\n"
               "                    with kvtierd down, kvtier_up 0 alone, and exit status 0\n"
               "  config            the configuration kvtierd runs with (--json: with help, ranges)\n"
               "  set policy NAME   switch the placement policy live (demand, lru, heat, window, hybrid)\n"
               "  set policy.KEY VALUE\n"
               "                    any [policy] key: hysteresis_ticks, heat_half_life_ticks,\n"
               "                    window, prefetch, prefetch_depth, max_migration_rate\n"
               "  set vram_budget [GPU] BYTES\n"
               "                    VRAM budget (8G, 50%%) of one GPU or of all\n"
               "  set host_budget NODE BYTES\n"
               "                    host budget (64G, 50%% of its MemTotal, none) of a NUMA node\n"
               "                    (set needs root)\n\n"
               "Options:\n"
               "  -s, --socket PATH daemon socket (default $KVTIER_SOCKET or %s)\n"
               "  -j, --json        print JSON instead of a table\n"
               "  -d, --delay SECS  top: refresh period (0.1..3600, default 1)\n"
               "  -n, --iterations N top: stop after N refreshes\n"
               "  -o, --output FILE metrics: replace FILE atomically (a temporary file beside it,\n"
               "                    renamed over it) instead of printing, as kvtier-metrics.service does\n"
               "  -h, --help        show this help\n"
               "      --version     show the version\n\n"
               "Exit status: 0 success, 1 daemon unreachable or failed (metrics: only when --output\n"
               "failed; kvtierd down is kvtier_up 0 and status 0), 2 usage error.\n",
               KVT_RUNSTATEDIR "/kvtier/kvtierd.sock");
}

static int ctl_connect(const char *path) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        int fd;

        if (strlen(path) >= sizeof(sa.sun_path))
                return -ENAMETOOLONG;
        strcpy(sa.sun_path, path);
        fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -errno;
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
                int r = -errno;
                close(fd);
                return r;
        }
        return fd;
}

/* Sends a control request and collects the JSON text of its reply: the
 * reply's status, and in *ret (when not NULL) the document if it came and
 * parses, whatever the status (a refusal's reason comes as {"error": ...}).
 * A success without a document is -EBADMSG when one was asked for. */
static int ctl_request(int fd, uint16_t type, const void *payload, size_t len_payload,
                       struct json_object **ret) {
        struct kvt_msg *m = malloc(sizeof(*m));
        char *text = NULL;
        size_t len = 0;
        int r;

        if (ret)
                *ret = NULL;
        if (!m)
                return -ENOMEM;
        r = kvt_msg_send(fd, type, 1, payload, len_payload);
        while (r == 0) {
                r = kvt_msg_recv_timeout(fd, m, REPLY_TIMEOUT_MS);
                if (r < 0)
                        break;
                if (m->hdr.type == KVT_MSG_CTL_END) {
                        r = m->u.ctl_end.status;
                        break;
                }
                if (m->hdr.type != KVT_MSG_CTL_DATA) {
                        r = -EPROTO;
                        break;
                }
                char *t = realloc(text, len + m->hdr.length + 1);
                if (!t) {
                        r = -ENOMEM;
                        break;
                }
                text = t;
                memcpy(text + len, m->u.text, m->hdr.length);
                len += m->hdr.length;
                text[len] = '\0';
        }
        if (ret && text)
                *ret = json_tokener_parse(text);
        if (r == 0 && ret && !*ret)
                r = -EBADMSG;
        free(text);
        free(m);
        return r;
}

static int64_t jint(struct json_object *o, const char *key) {
        struct json_object *v;

        return json_object_object_get_ex(o, key, &v) ? json_object_get_int64(v) : 0;
}

/* A string of the status, its control characters escaped for the terminal
 * (kvt_escape_controls(): what the daemon passes on from a client, or an
 * impostor on the socket sends, can hold ESC, BEL or CR; a backslash stays,
 * as the daemon escaped names already).  Valid until 8 more calls. */
static const char *jstr(struct json_object *o, const char *key) {
        static char ring[8][256];
        static unsigned next;
        struct json_object *v;
        char *buf = ring[next++ % ELEMENTSOF(ring)];

        return kvt_escape_controls(json_object_object_get_ex(o, key, &v) ? json_object_get_string(v) : "",
                                   buf, 256);
}

static struct json_object *jarr(struct json_object *o, const char *key) {
        struct json_object *v;

        if (json_object_object_get_ex(o, key, &v) && json_object_is_type(v, json_type_array))
                return v;
        return NULL;
}

#define B(buf, o, key) format_bytes(buf, sizeof(buf), (uint64_t)jint(o, key))

static void print_gpus(struct json_object *st) {
        struct json_object *gpus = jarr(st, "gpus");
        char b[6][32];

        printf("%-4s %10s %10s %10s %10s %12s %10s %9s\n", "GPU", "BUDGET", "CHARGED", "PEAK", "VRAM",
               "HOST-MAPPED", "HOST", "INFLIGHT");
        for (size_t i = 0; gpus && i < json_object_array_length(gpus); i++) {
                struct json_object *g = json_object_array_get_idx(gpus, i);
                printf("%-4" PRId64 " %10s %10s %10s %10s %12s %10s %9" PRId64 "\n", jint(g, "device"),
                       B(b[0], g, "budget_bytes"), B(b[1], g, "charged_bytes"),
                       B(b[2], g, "peak_charged_bytes"), B(b[3], g, "vram_bytes"),
                       B(b[4], g, "host_mapped_bytes"), B(b[5], g, "host_bytes"), jint(g, "inflight_orders"));
        }
        for (size_t i = 0; gpus && i < json_object_array_length(gpus); i++) {
                struct json_object *g = json_object_array_get_idx(gpus, i), *u = NULL, *rate = NULL;

                if (!json_object_object_get_ex(g, "chunk_uses", &u) || !u ||
                    !json_object_object_get_ex(g, "vram_hit_rate", &rate) || !rate)
                        continue;
                printf("GPU %" PRId64 " VRAM hit rate: %.1f%% of %" PRId64 " chunk uses seen (%" PRId64
                       " in VRAM, %" PRId64 " host-mapped, %" PRId64 " host, %" PRId64 " never placed)\n",
                       jint(g, "device"), 100.0 * json_object_get_double(rate),
                       jint(u, "vram") + jint(u, "host_mapped") + jint(u, "host") + jint(u, "none"), jint(u, "vram"),
                       jint(u, "host_mapped"), jint(u, "host"), jint(u, "none"));
        }
        for (size_t i = 0; gpus && i < json_object_array_length(gpus); i++) {
                struct json_object *g = json_object_array_get_idx(gpus, i), *d = NULL;

                if (!json_object_object_get_ex(g, "demand", &d) || !d || !jint(d, "demand_faults"))
                        continue;
                printf("GPU %" PRId64 " demand: %s held back (read in place), %s stale in VRAM (%s found unused), protection %" PRId64
                       " ms; %" PRId64 " uses seen in host memory, %" PRId64 " refaults, %" PRId64
                       " evictions avoided, %" PRId64
                       " probes (%" PRId64 " back, %" PRId64 " cold, window %" PRId64 " ms), %" PRId64
                       " chunks re-armed; sampler %" PRId64 " ms in the shim, %" PRId64 " chunks and %" PRId64
                       " probes in flight\n",
                       jint(g, "device"), B(b[0], d, "held_bytes"), B(b[1], d, "stale_bytes"), B(b[4], d, "cold_bytes"),
                       jint(d, "protect_ms"),
                       jint(d, "demand_faults"), jint(d, "refaults"), jint(d, "evictions_avoided"), jint(d, "probes"),
                       jint(d, "probes_back"),
                       jint(d, "probes_expired"), jint(d, "probe_window_ms"), jint(d, "rearmed_chunks"), jint(d, "rearm_ms") + jint(d, "probe_ms"),
                       jint(d, "rearming_chunks"), jint(d, "probing"));
                if (jint(d, "sibling_groups"))
                        printf("GPU %" PRId64 " siblings: %" PRId64 " regions in %" PRId64 " group%s (%" PRId64
                               " telling nothing: in use at most offsets); on their siblings' word, %s read in place"
                               " taken for in use, %s in VRAM for unused\n",
                               jint(g, "device"), jint(d, "sibling_regions"), jint(d, "sibling_groups"),
                               jint(d, "sibling_groups") == 1 ? "" : "s", jint(d, "sibling_groups_mute"),
                               B(b[2], d, "sibling_demand_bytes"), B(b[3], d, "sibling_stale_bytes"));
        }
}

static bool jnull(struct json_object *o, const char *key) {
        struct json_object *v = NULL;

        return !json_object_object_get_ex(o, key, &v) || v == NULL;
}

/* Host NUMA nodes: their budget, what kvtier's chunks hold there. */
static void print_nodes(struct json_object *st) {
        struct json_object *nodes = jarr(st, "nodes");
        char b[4][32];

        if (!nodes || json_object_array_length(nodes) == 0)
                return;
        printf("\n%-4s %10s %10s %10s %10s %8s\n", "NODE", "BUDGET", "CHARGED", "PEAK", "HOST", "CHUNKS");
        for (size_t i = 0; i < json_object_array_length(nodes); i++) {
                struct json_object *n = json_object_array_get_idx(nodes, i);

                printf("%-4" PRId64 " %10s %10s %10s %10s %8" PRId64 "\n", jint(n, "node"),
                       jnull(n, "budget_bytes") ? "none" : B(b[0], n, "budget_bytes"), B(b[1], n, "charged_bytes"),
                       B(b[2], n, "peak_charged_bytes"), B(b[3], n, "host_bytes"), jint(n, "chunks"));
        }
}

/* The GPUs a client's regions live on ("0", "0,1"); its HELLO's device
 * while it has no regions. */
static const char *client_gpus(struct json_object *c, char *buf, size_t size) {
        struct json_object *regions = jarr(c, "regions");
        uint64_t seen = 0;
        size_t len = 0;

        for (size_t k = 0; regions && k < json_object_array_length(regions); k++) {
                int64_t d = jint(json_object_array_get_idx(regions, k), "device");
                if (d >= 0 && d < 64)
                        seen |= 1ull << d;
        }
        if (!seen)
                snprintf(buf, size, "%" PRId64, jint(c, "device"));
        for (int d = 0; d < 64 && seen; d++)
                if (seen & (1ull << d)) {
                        seen &= ~(1ull << d);
                        len += (size_t)snprintf(buf + len, len < size ? size - len : 0, "%s%d", len ? "," : "", d);
                }
        return buf;
}

static void print_clients(struct json_object *st) {
        struct json_object *clients = jarr(st, "clients");
        char b[4][32], gpus[32], pace[24];

        printf("\n%-8s %-8s %-16s %-4s %-7s %10s %10s %12s %10s %5s\n", "CLIENT", "PID", "NAME", "GPU", "REGIONS",
               "SIZE", "VRAM", "HOST-MAPPED", "HOST", "PACE");
        for (size_t i = 0; clients && i < json_object_array_length(clients); i++) {
                struct json_object *c = json_object_array_get_idx(clients, i);
                struct json_object *regions = jarr(c, "regions");
                uint64_t size = 0;
                size_t n = regions ? json_object_array_length(regions) : 0;

                for (size_t k = 0; k < n; k++)
                        size += (uint64_t)jint(json_object_array_get_idx(regions, k), "size_bytes");
                snprintf(pace, sizeof(pace), "%" PRId64 "%%", jint(c, "pace_percent"));
                printf("%-8" PRId64 " %-8" PRId64 " %-16s %-4s %-7zu %10s %10s %12s %10s %5s\n",
                       jint(c, "client_id"), jint(c, "pid"), jstr(c, "name"), client_gpus(c, gpus, sizeof(gpus)), n,
                       format_bytes(b[0], sizeof(b[0]), size), B(b[1], c, "vram_bytes"),
                       B(b[2], c, "host_mapped_bytes"), B(b[3], c, "host_bytes"), pace);
        }
}

static bool jbool(struct json_object *o, const char *key) {
        struct json_object *v = NULL;

        return json_object_object_get_ex(o, key, &v) && json_object_get_boolean(v);
}

#define MAP_CELLS 32

/* The region's chunk map ("V16 H240 -256", see daemon/status.c) drawn in
 * MAP_CELLS cells, each a slice of the region in address order: '#' all of
 * it in VRAM, '+' some, 'r' none but some read in place from host memory
 * (held back), 's' none but some spilled to the SSD tier, '.' none; "-"
 * when the map is missing or cut short. */
static void map_bar(struct json_object *r, char bar[MAP_CELLS + 1]) {
        uint64_t n = (uint64_t)jint(r, "size_bytes") / KVT_CHUNK_BYTES, at = 0;
        uint64_t vram[MAP_CELLS] = {0}, all[MAP_CELLS] = {0}, read[MAP_CELLS] = {0}, spilled[MAP_CELLS] = {0};
        const char *m = jstr(r, "chunk_map");

        strcpy(bar, "-");
        if (n == 0 || !m || !*m || jbool(r, "chunk_map_truncated"))
                return;
        while (*m) {
                char *end;
                char tier = *m++;
                unsigned long long len = strtoull(m, &end, 10);

                if (end == m || len == 0 || len > n - at)
                        return; /* not a map this tool knows */
                for (uint64_t i = at; i < at + len; i++) {
                        unsigned cell = (unsigned)(i * MAP_CELLS / n);

                        all[cell]++;
                        vram[cell] += tier == 'V' || tier == 'v';
                        read[cell] += tier == 'R' || tier == 'r';
                        spilled[cell] += tier == 'S' || tier == 's';
                }
                at += len;
                m = end;
                while (*m == ' ')
                        m++;
        }
        if (at != n)
                return;
        for (unsigned c = 0; c < MAP_CELLS; c++)
                bar[c] = !all[c]              ? ' '
                       : vram[c] == all[c]    ? '#'
                       : vram[c]              ? '+'
                       : read[c]              ? 'r'
                       : spilled[c]           ? 's'
                                              : '.';
        bar[MAP_CELLS] = '\0';
}

/* One line per region: which API it came through, which rule took it, and
 * where in it the chunks in VRAM are. */
static void print_regions(struct json_object *st) {
        struct json_object *clients = jarr(st, "clients");
        char b[4][32];
        bool header = false;

        for (size_t i = 0; clients && i < json_object_array_length(clients); i++) {
                struct json_object *c = json_object_array_get_idx(clients, i);
                struct json_object *regions = jarr(c, "regions");

                for (size_t k = 0; regions && k < json_object_array_length(regions); k++) {
                        struct json_object *r = json_object_array_get_idx(regions, k);

                        char bar[MAP_CELLS + 1];

                        if (!header)
                                printf("\n%-8s %-8s %-16s %10s %-24s %-14s %10s %12s %10s  %s\n", "CLIENT",
                                       "REGION", "BASE", "SIZE", "API", "RULE", "VRAM", "HOST-MAPPED",
                                       "HOST", "IN VRAM (#: all, +: some, r: read in place, .: none)");
                        header = true;
                        printf("%-8" PRId64 " %-8" PRId64 " %-16s %10s %-24s %-14s", jint(c, "client_id"),
                               jint(r, "region_id"), jstr(r, "base"), B(b[0], r, "size_bytes"),
                               jstr(r, "api"), jstr(r, "rule"));
                        if (jbool(r, "untiered"))
                                printf(" %10s\n", "untiered");
                        else {
                                map_bar(r, bar);
                                printf(" %10s %12s %10s  %s\n", B(b[1], r, "vram_bytes"),
                                       B(b[2], r, "host_mapped_bytes"), B(b[3], r, "host_bytes"), bar);
                        }
                }
        }
}

/* Spills a restarted kvtierd keeps for clients that have not reconnected yet. */
static void print_ssd_kept(struct json_object *kept) {
        char b[32];

        for (size_t i = 0; kept && i < json_object_array_length(kept); i++) {
                struct json_object *k = json_object_array_get_idx(kept, i);

                printf("kept over a restart for pid %" PRId64 " (uid %" PRId64 "): %" PRId64
                       " spills, %s, deleted in %.1f s unless it reconnects\n",
                       jint(k, "pid"), jint(k, "uid"), jint(k, "live_spills"), B(b, k, "bytes"),
                       (double)jint(k, "expires_in_ms") / 1000.0);
        }
}

/* The SSD tier (issue 20): one line per client with spilled bytes. */
static void print_ssd(struct json_object *st) {
        struct json_object *ssd = NULL, *clients, *t = NULL;
        char b[3][32];

        if (!json_object_object_get_ex(st, "ssd", &ssd) || !ssd)
                return;
        if (!jbool(ssd, "enabled")) {
                printf("\nSSD tier: off\n");
                return;
        }
        json_object_object_get_ex(ssd, "totals", &t);
        printf("\nSSD tier: %s, %s%s, compress %s, blocks of %s; %" PRId64 " spills, %" PRId64 " restores, %" PRId64
               " checksum failures, %" PRId64 " retries\n",
               jstr(ssd, "dir"), jnull(ssd, "io") ? "io not used yet" : jstr(ssd, "io"),
               jnull(ssd, "direct") ? "" : jbool(ssd, "direct") ? ", O_DIRECT" : ", buffered", jstr(ssd, "compress"),
               B(b[0], ssd, "block_bytes"), t ? jint(t, "spills") : 0, t ? jint(t, "restores") : 0,
               t ? jint(t, "checksum_failures") : 0, t ? jint(t, "retries") : 0);
        print_ssd_kept(jarr(ssd, "kept"));
        clients = jarr(ssd, "clients");
        if (!clients || json_object_array_length(clients) == 0)
                return;
        printf("%-8s %-8s %6s %7s %10s %10s %8s %8s %6s %7s %9s %9s\n", "PID", "UID", "FILES", "SPILLS", "BYTES",
               "ON-DISK", "SPILLED", "RESTORED", "CSUM", "RETRIES", "WR-GB/S", "RD-GB/S");
        for (size_t i = 0; i < json_object_array_length(clients); i++) {
                struct json_object *c = json_object_array_get_idx(clients, i), *v;
                double wr = json_object_object_get_ex(c, "write_gbps", &v) ? json_object_get_double(v) : 0;
                double rd = json_object_object_get_ex(c, "read_gbps", &v) ? json_object_get_double(v) : 0;

                printf("%-8" PRId64 " %-8" PRId64 " %6" PRId64 " %7" PRId64 " %10s %10s %8" PRId64 " %8" PRId64
                       " %6" PRId64 " %7" PRId64 " %9.2f %9.2f\n",
                       jint(c, "pid"), jint(c, "uid"), jint(c, "files"), jint(c, "live_spills"), B(b[1], c, "bytes"),
                       B(b[2], c, "stored_bytes"), jint(c, "spills"), jint(c, "restores"),
                       jint(c, "checksum_failures"), jint(c, "retries"), wr, rd);
        }
}

static void print_status(struct json_object *st) {
        struct json_object *mig = NULL;
        char b[2][32];

        printf("kvtierd %s, pid %" PRId64 ", policy %s, tick %" PRId64 " ms, up %.1f s\n\n", jstr(st, "version"),
               jint(st, "pid"), jstr(st, "policy"), jint(st, "tick_ms"), (double)jint(st, "uptime_ms") / 1000.0);
        print_gpus(st);
        print_nodes(st);
        print_clients(st);
        print_regions(st);
        print_ssd(st);
        json_object_object_get_ex(st, "migrations", &mig);
        if (mig)
                printf("\nMigrations: %" PRId64 " orders sent, %" PRId64 " done, %" PRId64 " failed, %" PRId64
                       " cancelled; %s to VRAM, %s to host\n",
                       jint(mig, "orders_sent"), jint(mig, "orders_done"), jint(mig, "orders_failed"),
                       jint(mig, "orders_cancelled"),
                       B(b[0], mig, "bytes_to_vram"), B(b[1], mig, "bytes_to_host"));
}

enum output { OUT_TABLE, OUT_JSON, OUT_METRICS };

static int show(int fd, enum output out) {
        struct json_object *st = NULL;
        int r = ctl_request(fd, KVT_MSG_CTL_STATUS, NULL, 0, &st);

        if (r < 0) {
                fprintf(stderr, "kvtierctl: status request failed: %s\n", strerror(-r));
                return 1;
        }
        if (out == OUT_JSON)
                printf("%s\n", json_object_to_json_string_ext(st, JSON_C_TO_STRING_PRETTY |
                                                                          JSON_C_TO_STRING_NOSLASHESCAPE));
        else if (out == OUT_METRICS)
                metrics_print(stdout, st);
        else
                print_status(st);
        json_object_put(st);
        return 0;
}

static int cmd_status(int fd) {
        return show(fd, arg_json ? OUT_JSON : OUT_TABLE);
}

/* Writes the metrics (of the status st, or kvtier_up 0 when NULL) to
 * arg_output atomically: into a temporary file beside it, flushed to disk,
 * mode 0644 (node_exporter runs as another user), then renamed over it, so
 * that a reader sees the old file or the new one whole, never a part.  The
 * temporary name does not end in .prom: the textfile collector skips it.
 * On failure the old file stays and the temporary one is removed.
 * Returns 0 or 1 (reported). */
static int write_metrics_file(struct json_object *st) {
        size_t len = strlen(arg_output) + 16;
        char *tmp = malloc(len);
        const char *step = "create";
        FILE *f = NULL;
        int fd, r = 0;

        if (!tmp) {
                fprintf(stderr, "kvtierctl: %s: %s\n", arg_output, strerror(ENOMEM));
                return 1;
        }
        snprintf(tmp, len, "%s.tmp.XXXXXX", arg_output);
        fd = mkostemp(tmp, O_CLOEXEC);
        if (fd < 0 || !(f = fdopen(fd, "w"))) {
                r = -errno;
                if (fd >= 0) {
                        close(fd);
                        unlink(tmp);
                }
        } else {
                if (st)
                        metrics_print(f, st);
                else
                        metrics_print_down(f);
                if (fflush(f) != 0 || ferror(f)) {
                        step = "write";
                        r = errno ? -errno : -EIO;
                } else if (fsync(fileno(f)) < 0) {
                        step = "sync";
                        r = -errno;
                } else if (fchmod(fileno(f), 0644) < 0) {
                        step = "chmod";
                        r = -errno;
                }
                if (fclose(f) != 0 && r == 0) {
                        step = "write";
                        r = errno ? -errno : -EIO;
                }
                if (r == 0 && rename(tmp, arg_output) < 0) {
                        step = "rename";
                        r = -errno;
                }
                if (r < 0)
                        unlink(tmp);
        }
        if (r < 0)
                fprintf(stderr, "kvtierctl: failed to %s %s (for %s): %s; %s left as it was\n", step, tmp,
                        arg_output, strerror(-r), arg_output);
        free(tmp);
        return r < 0 ? 1 : 0;
}

static int cmd_metrics(int fd) {
        struct json_object *st = NULL;
        int r;

        if (!arg_output)
                return show(fd, OUT_METRICS);
        r = ctl_request(fd, KVT_MSG_CTL_STATUS, NULL, 0, &st);
        if (r < 0) {
                /* a daemon that fails to answer is down for a scrape too */
                fprintf(stderr, "kvtierctl: status request failed: %s\n", strerror(-r));
                json_object_put(st);
                st = NULL;
        }
        r = write_metrics_file(st);
        json_object_put(st);
        return r;
}

/* Redraws the status until interrupted (or --iterations).  One connection
 * serves every refresh; a daemon that goes away ends it with status 1. */
static int cmd_top(int fd) {
        bool tty = isatty(STDOUT_FILENO);

        for (unsigned i = 0; arg_iterations == 0 || i < arg_iterations; i++) {
                struct timespec ts = { .tv_sec = arg_interval_ms / 1000,
                                       .tv_nsec = (long)(arg_interval_ms % 1000) * 1000000L };
                int r;

                if (i > 0)
                        nanosleep(&ts, NULL);
                if (tty)
                        fputs("\033[H\033[2J", stdout); /* home, clear */
                r = show(fd, arg_json ? OUT_JSON : OUT_TABLE);
                fflush(stdout);
                if (r != 0)
                        return r;
        }
        return 0;
}

/* Builds "key=value" from the words after "set"; returns 0 or -EINVAL (usage). */
static int set_text(int n, char **w, char *buf, size_t len) {
        int k;

        if (n == 2)
                k = snprintf(buf, len, "%s=%s", w[0], w[1]);
        else if (n == 3 && (strcmp(w[0], "vram_budget") == 0 || strcmp(w[0], "host_budget") == 0))
                k = snprintf(buf, len, "%s.%s=%s", w[0], w[1], w[2]);
        else
                return -EINVAL;
        if (k < 0 || (size_t)k >= len || strchr(w[0], '='))
                return -EINVAL;
        return 0;
}

/* The reason a refused request came with ({"error": REASON}), or NULL;
 * its control characters escaped for the terminal. */
static const char *reply_error(struct json_object *reply) {
        static char buf[2048]; /* a reason can quote a 1 KiB request; jstr()'s 256 bytes are for names */
        struct json_object *v;

        if (!reply || !json_object_object_get_ex(reply, "error", &v) ||
            !json_object_is_type(v, json_type_string))
                return NULL;
        return kvt_escape_controls(json_object_get_string(v), buf, sizeof(buf));
}

static int cmd_set(int fd, const char *text) {
        struct json_object *reply = NULL;
        int r = ctl_request(fd, KVT_MSG_CTL_SET, text, strlen(text) + 1, &reply);
        const char *why = reply_error(reply);

        if (r == 0 || r == -EBADMSG) { /* done: a success says nothing more */
                json_object_put(reply);
                return 0;
        }
        if (why)
                fprintf(stderr, "kvtierctl: set %s: %s\n", text, why);
        else if (r == -EPERM) /* a kvtierd from before the reasons */
                fprintf(stderr,
                        "kvtierctl: set %s: permission denied (changes need root or the admin group, "
                        "[daemon] admin_group)\n",
                        text);
        else if (r == -ENOENT)
                fprintf(stderr, "kvtierctl: set %s: unknown key (try --help)\n", text);
        else if (r == -EINVAL || r == -ERANGE)
                fprintf(stderr, "kvtierctl: set %s: invalid value\n", text);
        else
                fprintf(stderr, "kvtierctl: set %s failed: %s\n", text, strerror(-r));
        json_object_put(reply);
        return 1;
}

/* The configuration in effect: an INI file, each section once, a key that
 * differs from its default followed by that default as a comment. */
static void print_config(struct json_object *cfg) {
        struct json_object *entries = jarr(cfg, "config");
        char section[256] = "";

        for (size_t i = 0; entries && i < json_object_array_length(entries); i++) {
                struct json_object *e = json_object_array_get_idx(entries, i), *def = NULL;
                const char *sec = jstr(e, "section"), *key = jstr(e, "key"), *value = jstr(e, "value");
                char line[600];

                if (strcmp(sec, section) != 0) {
                        printf("%s[%s]\n", section[0] ? "\n" : "", sec);
                        snprintf(section, sizeof(section), "%s", sec);
                }
                snprintf(line, sizeof(line), "%s = %s", key, value);
                if (json_object_object_get_ex(e, "default", &def) && def &&
                    strcmp(jstr(e, "default"), value) != 0)
                        printf("%-48s # default %s\n", line, jstr(e, "default"));
                else
                        printf("%s\n", line);
        }
}

static int cmd_config(int fd) {
        struct json_object *cfg = NULL;
        int r = ctl_request(fd, KVT_MSG_CTL_CONFIG, NULL, 0, &cfg);

        if (r < 0) {
                fprintf(stderr, "kvtierctl: config request failed: %s\n",
                        r == -ECONNRESET ? "kvtierd closed the connection (a kvtierd of another version?)"
                                         : strerror(-r));
                json_object_put(cfg);
                return 1;
        }
        if (arg_json)
                printf("%s\n", json_object_to_json_string_ext(cfg, JSON_C_TO_STRING_PRETTY |
                                                                           JSON_C_TO_STRING_NOSLASHESCAPE));
        else
                print_config(cfg);
        json_object_put(cfg);
        return 0;
}

static const struct {
        const char *name;
        int (*run)(int fd);
} commands[] = {
        { "status", cmd_status },
        { "top", cmd_top },
        { "metrics", cmd_metrics },
        { "config", cmd_config },
};

int main(int argc, char **argv) {
        static const struct option opts[] = {
                { "socket", required_argument, NULL, 's' },
                { "json", no_argument, NULL, 'j' },
                { "delay", required_argument, NULL, 'd' },
                { "iterations", required_argument, NULL, 'n' },
                { "output", required_argument, NULL, 'o' },
                { "help", no_argument, NULL, 'h' },
                { "version", no_argument, NULL, 'V' },
                {},
        };
        int (*run)(int fd) = NULL;
        char set[KVT_CTL_SET_MAX] = "";
        const char *cmd;
        char *end;
        double secs;
        int c, fd, r;

        arg_socket = getenv("KVTIER_SOCKET");
        if (!arg_socket || !*arg_socket)
                arg_socket = KVT_RUNSTATEDIR "/kvtier/kvtierd.sock";
        while ((c = getopt_long(argc, argv, "s:jd:n:o:h", opts, NULL)) >= 0)
                switch (c) {
                case 's':
                        arg_socket = optarg;
                        break;
                case 'j':
                        arg_json = true;
                        break;
                case 'd':
                        secs = strtod(optarg, &end);
                        if (*end || !(secs >= 0.1 && secs <= 3600)) {
                                fprintf(stderr, "kvtierctl: invalid --delay '%s' (0.1..3600 seconds)\n", optarg);
                                return EXIT_USAGE;
                        }
                        arg_interval_ms = (unsigned)(secs * 1000);
                        break;
                case 'n':
                        arg_iterations = (unsigned)strtoul(optarg, &end, 10);
                        if (*end || arg_iterations == 0) {
                                fprintf(stderr, "kvtierctl: invalid --iterations '%s' (a positive count)\n", optarg);
                                return EXIT_USAGE;
                        }
                        break;
                case 'o':
                        if (!*optarg) {
                                fprintf(stderr, "kvtierctl: --output needs a file name\n");
                                return EXIT_USAGE;
                        }
                        arg_output = optarg;
                        break;
                case 'h':
                        help();
                        return 0;
                case 'V':
                        printf("kvtierctl %s\n", PACKAGE_VERSION);
                        return 0;
                default:
                        return EXIT_USAGE;
                }
        cmd = optind < argc ? argv[optind] : "status";
        for (size_t i = 0; i < ELEMENTSOF(commands); i++)
                if (strcmp(cmd, commands[i].name) == 0)
                        run = commands[i].run;
        if (strcmp(cmd, "set") == 0) {
                if (set_text(argc - optind - 1, argv + optind + 1, set, sizeof(set)) < 0) {
                        fprintf(stderr, "kvtierctl: usage: set KEY VALUE, set vram_budget [GPU] BYTES or "
                                        "set host_budget NODE BYTES\n");
                        return EXIT_USAGE;
                }
        } else if (!run) {
                fprintf(stderr, "kvtierctl: unknown command '%s' (try --help)\n", cmd);
                return EXIT_USAGE;
        } else if (arg_output && run != cmd_metrics) {
                fprintf(stderr, "kvtierctl: --output is for metrics only\n");
                return EXIT_USAGE;
        } else if (optind + 1 < argc) {
                /* getopt_long permutes, so options after the command are already parsed. */
                fprintf(stderr, "kvtierctl: unexpected argument '%s'\n", argv[optind + 1]);
                return EXIT_USAGE;
        }
        fd = ctl_connect(arg_socket);
        if (fd < 0) {
                fprintf(stderr, "kvtierctl: cannot connect to kvtierd at %s: %s\n", arg_socket, strerror(-fd));
                /* metrics: a scrape of a daemon that is down says so, and succeeds */
                if (!*set && run == cmd_metrics) {
                        if (arg_output)
                                return write_metrics_file(NULL);
                        metrics_print_down(stdout);
                        return 0;
                }
                return 1;
        }
        r = *set ? cmd_set(fd, set) : run(fd);
        close(fd);
        return r;
}
