/* SPDX-License-Identifier: MIT */
/*
 * kvtier-sim: replays a kvtier trace (tests/traces/FORMAT.md) through the
 * daemon's policies under a tick clock and a bandwidth model, and prints each
 * policy's hit rate, bytes moved each way and modelled stall time next to
 * Belady's MIN over the same budget.
 *
 * Exit status: 0 success; 1 the trace could not be read or is invalid, or a
 * simulation failed; 2 usage error.
 */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol.h"
#include "sim.h"
#include "util.h"

struct options {
        struct sim_config cfg;
        struct policy_params overrides;
        unsigned set; /* OPT_SET_* bits: which overrides were given */
        const char *policies;
        const char *path;
};

enum {
        OPT_SET_HYST = 1,
        OPT_SET_HALF = 2,
        OPT_SET_WINDOW = 4,
        OPT_SET_PREFETCH = 8,
        OPT_SET_OVERLAP = 16,
        OPT_SET_SAMPLE = 32,
        OPT_SET_PROTECT_MIN = 64,
        OPT_SET_PROTECT_MAX = 128,
        OPT_SET_ACTIVE = 256,
        OPT_SET_MARGIN = 512,
        OPT_SET_PROBES = 1024,
};

static void usage(FILE *f) {
        fprintf(f,
                "Usage: kvtier-sim [OPTIONS] TRACE\n\n"
                "Replays TRACE (\"kvtier-trace 1\", '-' for stdin) through kvtier's policies and\n"
                "Belady's MIN with the same VRAM budget; prints one line per policy.\n\n"
                "  -b, --budget=BYTES        VRAM budget (default 1G)\n"
                "  -p, --policy=LIST         comma-separated: lru,heat,window,hybrid,demand or all (default all)\n"
                "  -t, --tick-us=N           planning tick in microseconds (default 10000, kvtierd's tick_ms)\n"
                "      --promote-gbps=F      host->VRAM prefetch bandwidth, GB/s (default 48)\n"
                "      --evict-gbps=F        VRAM->host bandwidth, GB/s (default 12)\n"
                "      --evict-chunk-us=N    a chunk's first eviction's advice, before its pages move (the\n"
                "                            shim keeps it; default 500, mapped evictions beside moves on\n"
                "                            the H200)\n"
                "      --link-gbps=F         PCIe link, each direction, GB/s (default 55)\n"
                "      --mapped-gbps=F       GPU reads of host-mapped memory, GB/s (default 51)\n"
                "      --rate=BYTES          migration rate limit per second, 0 = none (default 40G)\n"
                "      --hysteresis-ticks=N  override the policy default\n"
                "      --half-life-ticks=N   override the policy default\n"
                "      --window=BYTES        override the policy default\n"
                "      --prefetch-depth=N    override the policy default (0 = off)\n"
                "      --overlap=BYTES       VRAM over the budget promotions may take while evictions\n"
                "                            are in flight (kvtierd's [policy] overlap; default 0)\n"
                "      --margin=BYTES        captures start in VRAM while the charge stays within the\n"
                "                            budget plus this (kvtierd's [gpu] capture_margin; default\n"
                "                            a quarter of the budget)\n"
                "      --observe=WHAT        signals: the policy sees what the daemon sees on a GPU (a fault\n"
                "                            on an unmapped host chunk; default); all: every access\n"
                "      --fault-us=N          a GPU fault on an unmapped host chunk (default 60)\n"
                "      --rearm-us=N          the shim's time to re-arm one chunk, in its evictors' time\n"
                "                            that moves leave (default 140, beside moves on the H200)\n"
                "      --probe-us=N          the shim's time to probe one chunk, in the same queue (default\n"
                "                            1300, beside moves on the H200)\n"
                "      --signal-delay-us=N   from a fault to the daemon's knowing of it (default 10000,\n"
                "                            the shim's CUPTI flush period)\n"
                "      --bind-delay-us=N     faults the daemon would know of sooner than this after their\n"
                "                            region's capture are lost, the chunk mapped unseen (a daemon\n"
                "                            that bound a region's heat counters late; default 0)\n"
                "      --launches=on|off     whether the policy sees each access record as a kernel launch\n"
                "                            on its region (default on; off: as kernels the shim cannot\n"
                "                            see, CUDA graphs)\n"
                "      --closed-loop         the engine waits for its stalls: each record comes as much\n"
                "                            later as the stalls before it (the trace's times are\n"
                "                            all-VRAM's), so a slow run gives the daemon more ticks\n"
                "      --measure-ms=FROM[:TO]\n"
                "                            count only the accesses the trace times from FROM ms (to\n"
                "                            TO ms): a benchmark's measured turns (default all)\n"
                "      --sample=N            chunks re-armed per tick (demand's sample_chunks)\n"
                "      --probes=N            cohorts probed per tick (demand's probe_cohorts)\n"
                "      --protect-min=N       demand's shortest protection, ticks\n"
                "      --protect-max=N       demand's longest protection, ticks\n"
                "      --active-ticks=N      demand: ticks a region counts in use after an access\n"
                "  -h, --help                this text\n"
                "      --version             show the version\n\n"
                "Exit status: 0 success, 1 bad trace or failure, 2 usage error.\n");
}

/* FROM[:TO] in ms, into [from, to) in ns; TO after FROM. */
static int parse_window(const char *s, uint64_t *ret_from, uint64_t *ret_to) {
        unsigned long long from, to = 0;
        char *end;

        if (s[strspn(s, "0123456789:")] != '\0') /* no sign, no space */
                return -EINVAL;
        errno = 0;
        from = strtoull(s, &end, 10);
        if (errno || end == s || (*end && *end != ':'))
                return -EINVAL;
        if (*end == ':') {
                const char *t = end + 1;

                to = strtoull(t, &end, 10);
                if (errno || end == t || *end || to <= from)
                        return -EINVAL;
        }
        if (from > UINT64_MAX / 1000000 || to > UINT64_MAX / 1000000)
                return -EINVAL;
        *ret_from = from * 1000000;
        *ret_to = to * 1000000;
        return 0;
}

static int parse_double(const char *s, double *ret) {
        char *end;
        double d;

        errno = 0;
        d = strtod(s, &end);
        if (errno || *end || end == s || !(d > 0))
                return -EINVAL;
        *ret = d;
        return 0;
}

static int parse_u32(const char *s, uint32_t *ret) {
        char *end;
        unsigned long long v;

        if (*s < '0' || *s > '9')
                return -EINVAL;
        errno = 0;
        v = strtoull(s, &end, 10);
        if (errno || *end || v > UINT32_MAX)
                return -EINVAL;
        *ret = (uint32_t)v;
        return 0;
}

/* A byte count ("64M") in whole chunks, at most UINT32_MAX of them. */
static int parse_chunks(const char *s, uint32_t *ret) {
        uint64_t b;

        if (parse_bytes(s, &b) < 0 || b / KVT_CHUNK_BYTES > UINT32_MAX)
                return -EINVAL;
        *ret = (uint32_t)(b / KVT_CHUNK_BYTES);
        return 0;
}

static int parse_option(struct options *o, int c, const char *arg) {
        uint32_t u;

        switch (c) {
        case 'b':
                return parse_bytes(arg, &o->cfg.budget_bytes);
        case 'p':
                o->policies = arg;
                return 0;
        case 't':
                if (parse_u32(arg, &u) < 0 || u == 0)
                        return -EINVAL;
                o->cfg.tick_ns = (uint64_t)u * 1000;
                return 0;
        case 'P':
                return parse_double(arg, &o->cfg.promote_gbps);
        case 'E':
                return parse_double(arg, &o->cfg.evict_gbps);
        case 'L':
                return parse_double(arg, &o->cfg.link_gbps);
        case 'M':
                return parse_double(arg, &o->cfg.mapped_gbps);
        case 'R':
                return parse_bytes(arg, &o->cfg.rate_bytes_per_s);
        case 'H':
                o->set |= OPT_SET_HYST;
                return parse_u32(arg, &o->overrides.hysteresis_ticks);
        case 'D':
                o->set |= OPT_SET_HALF;
                if (parse_u32(arg, &o->overrides.heat_half_life_ticks) < 0 || !o->overrides.heat_half_life_ticks)
                        return -EINVAL;
                return 0;
        case 'W':
                o->set |= OPT_SET_WINDOW;
                return parse_chunks(arg, &o->overrides.window_chunks);
        case 'F':
                o->set |= OPT_SET_PREFETCH;
                return parse_u32(arg, &o->overrides.prefetch_depth);
        case 'O':
                o->set |= OPT_SET_OVERLAP;
                return parse_chunks(arg, &o->overrides.overlap_chunks);
        case 'G':
                o->set |= OPT_SET_MARGIN;
                return parse_bytes(arg, &o->cfg.margin_bytes);
        case 'V':
                if (strcmp(arg, "signals") == 0)
                        o->cfg.observe = SIM_OBSERVE_SIGNALS;
                else if (strcmp(arg, "all") == 0)
                        o->cfg.observe = SIM_OBSERVE_ALL;
                else
                        return -EINVAL;
                return 0;
        case 'N':
                if (strcmp(arg, "on") == 0 || strcmp(arg, "off") == 0)
                        o->cfg.launches_off = strcmp(arg, "off") == 0;
                else
                        return -EINVAL;
                return 0;
        case 'U':
                if (parse_u32(arg, &u) < 0)
                        return -EINVAL;
                o->cfg.fault_ns = (uint64_t)u * 1000;
                return 0;
        case 'Y':
                if (parse_u32(arg, &u) < 0)
                        return -EINVAL;
                o->cfg.signal_delay_ns = (uint64_t)u * 1000;
                return 0;
        case 'J':
                if (parse_u32(arg, &u) < 0)
                        return -EINVAL;
                o->cfg.bind_delay_ns = (uint64_t)u * 1000;
                return 0;
        case 'A':
        case 'B':
        case 'C':
                if (parse_u32(arg, &u) < 0)
                        return -EINVAL;
                *(c == 'A' ? &o->cfg.rearm_ns : c == 'B' ? &o->cfg.probe_ns : &o->cfg.evict_chunk_ns) =
                        (uint64_t)u * 1000;
                return 0;
        case 'K':
                o->cfg.closed_loop = true;
                return 0;
        case 'T':
                return parse_window(arg, &o->cfg.measure_from_ns, &o->cfg.measure_to_ns);
        case 'S':
                o->set |= OPT_SET_SAMPLE;
                return parse_u32(arg, &o->overrides.sample_chunks);
        case 'Q':
                o->set |= OPT_SET_PROBES;
                return parse_u32(arg, &o->overrides.probe_cohorts);
        case 'm':
                o->set |= OPT_SET_PROTECT_MIN;
                return parse_u32(arg, &o->overrides.protect_min_ticks);
        case 'x':
                o->set |= OPT_SET_PROTECT_MAX;
                return parse_u32(arg, &o->overrides.protect_max_ticks);
        case 'a':
                o->set |= OPT_SET_ACTIVE;
                return parse_u32(arg, &o->overrides.active_ticks);
        }
        return -EINVAL;
}

static int parse_args(int argc, char **argv, struct options *o) {
        static const struct option opts[] = {
                {"budget", required_argument, NULL, 'b'},
                {"policy", required_argument, NULL, 'p'},
                {"tick-us", required_argument, NULL, 't'},
                {"promote-gbps", required_argument, NULL, 'P'},
                {"evict-gbps", required_argument, NULL, 'E'},
                {"link-gbps", required_argument, NULL, 'L'},
                {"mapped-gbps", required_argument, NULL, 'M'},
                {"rate", required_argument, NULL, 'R'},
                {"hysteresis-ticks", required_argument, NULL, 'H'},
                {"half-life-ticks", required_argument, NULL, 'D'},
                {"window", required_argument, NULL, 'W'},
                {"prefetch-depth", required_argument, NULL, 'F'},
                {"overlap", required_argument, NULL, 'O'},
                {"margin", required_argument, NULL, 'G'},
                {"observe", required_argument, NULL, 'V'},
                {"launches", required_argument, NULL, 'N'},
                {"fault-us", required_argument, NULL, 'U'},
                {"signal-delay-us", required_argument, NULL, 'Y'},
                {"bind-delay-us", required_argument, NULL, 'J'},
                {"rearm-us", required_argument, NULL, 'A'},
                {"probe-us", required_argument, NULL, 'B'},
                {"evict-chunk-us", required_argument, NULL, 'C'},
                {"closed-loop", no_argument, NULL, 'K'},
                {"measure-ms", required_argument, NULL, 'T'},
                {"sample", required_argument, NULL, 'S'},
                {"probes", required_argument, NULL, 'Q'},
                {"protect-min", required_argument, NULL, 'm'},
                {"protect-max", required_argument, NULL, 'x'},
                {"active-ticks", required_argument, NULL, 'a'},
                {"help", no_argument, NULL, 'h'},
                {"version", no_argument, NULL, 'v'},
                {0},
        };
        int c;

        /* Defaults: DESIGN.md's H200 measurements. */
        o->cfg = (struct sim_config){.budget_bytes = 1ull << 30,
                                     .tick_ns = 10000000,
                                     .promote_gbps = 48,
                                     .evict_gbps = 12,
                                     .link_gbps = 55,
                                     .mapped_gbps = 51,
                                     .fault_ns = 60000,
                                     .signal_delay_ns = 10000000,
                                     .rearm_ns = 140000,
                                     .probe_ns = 1300000,
                                     .evict_chunk_ns = 500000,
                                     .rate_bytes_per_s = 40ull << 30,
                                     .observe = SIM_OBSERVE_SIGNALS};
        o->policies = "all";
        while ((c = getopt_long(argc, argv, "b:p:t:h", opts, NULL)) >= 0) {
                if (c == 'h') {
                        usage(stdout);
                        exit(0);
                }
                if (c == 'v') {
                        printf("kvtier-sim %s\n", PACKAGE_VERSION);
                        exit(0);
                }
                if (c == '?' || parse_option(o, c, optarg) < 0) {
                        if (c != '?')
                                fprintf(stderr, "kvtier-sim: invalid value '%s' for an option\n", optarg);
                        return -EINVAL;
                }
        }
        if (optind != argc - 1) {
                fprintf(stderr, "kvtier-sim: expected exactly one TRACE (try --help)\n");
                return -EINVAL;
        }
        o->path = argv[optind];
        if (!(o->set & OPT_SET_MARGIN))
                o->cfg.margin_bytes = o->cfg.budget_bytes / 4 / KVT_CHUNK_BYTES * KVT_CHUNK_BYTES;
        return 0;
}

/* span / (span + extra): the speed against all-VRAM if the trace ran at all-VRAM speed. */
static double speed(const struct sim_result *r, uint64_t extra_ns) {
        return r->span_ns + extra_ns ? (double)r->span_ns / (double)(r->span_ns + extra_ns) : 1.0;
}

static void print_result(const char *name, const struct sim_result *r, const struct sim_config *cfg) {
        printf("policy=%s hit_rate=%.4f hits=%" PRIu64 " accesses=%" PRIu64 " to_vram_bytes=%" PRIu64
               " to_host_bytes=%" PRIu64 " stall_ms=%.3f peak_charged_bytes=%" PRIu64 " budget_bytes=%" PRIu64
               " moves=%" PRIu64 " advised=%" PRIu64 " faults=%" PRIu64 " faults_lost=%" PRIu64 " own_maps=%" PRIu64 " refaults=%" PRIu64 " rearmed=%" PRIu64
               " rearm_ms=%.3f"
               " probes=%" PRIu64 " probes_back=%" PRIu64 " probes_expired=%" PRIu64
                " held_max=%" PRIu64 " protect_max=%u span_ms=%.3f delay_ms=%.3f zerocopy_ms=%.3f speed=%.4f"
               " margin_bytes=%" PRIu64
               " zerocopy_speed=%.4f consistent=%s\n",
               name, r->accesses ? (double)r->hits / (double)r->accesses : 0.0, r->hits, r->accesses,
               r->bytes_to_vram, r->bytes_to_host, (double)r->stall_ns / 1e6, r->peak_charged_bytes,
               cfg->budget_bytes, r->moves, r->advised, r->faults, r->faults_lost, r->own_maps, r->refaults, r->rearmed, (double)r->rearm_ns / 1e6, r->probes, r->probes_back,
               r->probes_expired,
               r->held_max, r->protect_max, (double)r->span_ns / 1e6, (double)r->delay_ns / 1e6,
               (double)r->zerocopy_ns / 1e6,
               speed(r, r->stall_ns), cfg->margin_bytes, speed(r, r->zerocopy_ns), r->consistent ? "yes" : "no");
}

static int run_policy(const struct options *o, const struct trace *t, const char *name) {
        struct policy_params pp;
        struct sim_result res;
        int k = policy_kind_from_name(name), r;

        if (k < 0) {
                fprintf(stderr, "kvtier-sim: unknown policy '%s' (lru, heat, window, hybrid, demand)\n", name);
                return -EINVAL;
        }
        policy_params_default((enum policy_kind)k, &pp);
        if (o->set & OPT_SET_HYST)
                pp.hysteresis_ticks = o->overrides.hysteresis_ticks;
        if (o->set & OPT_SET_HALF)
                pp.heat_half_life_ticks = o->overrides.heat_half_life_ticks;
        if (o->set & OPT_SET_WINDOW)
                pp.window_chunks = o->overrides.window_chunks;
        if (o->set & OPT_SET_PREFETCH)
                pp.prefetch_depth = o->overrides.prefetch_depth;
        if (o->set & OPT_SET_OVERLAP)
                pp.overlap_chunks = o->overrides.overlap_chunks;
        if (o->set & OPT_SET_SAMPLE)
                pp.sample_chunks = o->overrides.sample_chunks;
        if (o->set & OPT_SET_PROBES)
                pp.probe_cohorts = o->overrides.probe_cohorts;
        if (o->set & OPT_SET_PROTECT_MIN)
                pp.protect_min_ticks = o->overrides.protect_min_ticks;
        if (o->set & OPT_SET_PROTECT_MAX)
                pp.protect_max_ticks = o->overrides.protect_max_ticks;
        if (o->set & OPT_SET_ACTIVE)
                pp.active_ticks = o->overrides.active_ticks;
        r = sim_run_policy(t, &o->cfg, &pp, &res);
        if (r < 0) {
                fprintf(stderr, "kvtier-sim: %s: simulation failed: %s\n", name, strerror(-r));
                return r;
        }
        print_result(name, &res, &o->cfg);
        return 0;
}

static int run_all(const struct options *o, const struct trace *t) {
        char list[256], *save = NULL;
        struct sim_result opt;
        int r;

        if (strlen(o->policies) >= sizeof(list)) {
                fprintf(stderr, "kvtier-sim: policy list too long\n");
                return -EINVAL;
        }
        strcpy(list, strcmp(o->policies, "all") == 0 ? "lru,heat,window,hybrid,demand" : o->policies);
        for (char *name = strtok_r(list, ",", &save); name; name = strtok_r(NULL, ",", &save)) {
                r = run_policy(o, t, name);
                if (r < 0)
                        return r;
        }
        r = sim_run_opt(t, &o->cfg, &opt);
        if (r < 0) {
                fprintf(stderr, "kvtier-sim: MIN failed: %s\n", strerror(-r));
                return r;
        }
        print_result("opt", &opt, &o->cfg);
        return 0;
}

int main(int argc, char **argv) {
        struct options o = {0};
        struct trace t;
        char err[512];
        FILE *f;
        int r;

        if (parse_args(argc, argv, &o) < 0)
                return 2;
        f = strcmp(o.path, "-") == 0 ? stdin : fopen(o.path, "re");
        if (!f) {
                fprintf(stderr, "kvtier-sim: cannot open %s: %s\n", o.path, strerror(errno));
                return 1;
        }
        r = trace_load(f, o.path, &t, err, sizeof(err));
        if (f != stdin)
                fclose(f);
        if (r < 0) {
                fprintf(stderr, "kvtier-sim: %s\n", err);
                return 1;
        }
        printf("trace=%s regions=%zu chunks=%" PRIu64 " accesses=%" PRIu64 " budget_bytes=%" PRIu64
               " tick_us=%" PRIu64 "\n",
               o.path, t.n_regions, t.total_chunks, t.n_chunk_accesses, o.cfg.budget_bytes,
               o.cfg.tick_ns / 1000);
        r = run_all(&o, &t);
        trace_free(&t);
        return r < 0 ? 1 : 0;
}
