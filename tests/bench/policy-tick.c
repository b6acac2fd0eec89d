/* SPDX-License-Identifier: MIT */
/*
 * One policy tick over 1M chunks (2 TiB of 2 MiB chunks), for each policy:
 * prints chunks per second and milliseconds per tick (median of N ticks),
 * single-threaded (threads = 1) and threaded (threads = THREADS, 0 = auto:
 * what the daemon uses by default; of a pool of the daemon's, sized as
 * kvtierd sizes it for that setting), the two alternating tick by tick (which
 * goes first alternates too) so that the ratio is measured under the same
 * load.  Goal (issue 4): under 10 ms per tick on the CI machine.  Not a test:
 * run by hand, e.g. tests/bench/policy-tick [CHUNKS] [TICKS] [THREADS] [POLICY]
 * (POLICY: that one only, e.g. demand, for a profile of it).  demand adds
 * rows of its sample: on its own sibling counts (1 thread, THREADS), and on
 * the plan's ("plan"), as the daemon samples after its plan: a tick is the
 * plan and that; and a sample in which the one client's prober is off
 * ("noroom").
 * Times are wall-clock (threads: CPU time would add theirs up); "memcpy" is
 * a reference measured in the same run: one copy of the 16 MiB chunk array,
 * what a pass over it costs at best.
 *
 * Two snapshots: "steady" (the budget holds the hottest chunks already; the
 * plan moves little, as in a daemon tick) and "churn" (random tiers: a
 * quarter of the chunks want to move, rate-limited to 40 GB/s x 50 ms).
 */
#include "config.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "policy.h"
#include "protocol.h"
#include "workers.h"

#define REGION_CHUNKS 4096u /* 8 GiB regions */

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t next_rand(void) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        return rng;
}

/* Wall-clock time: with threads, what a tick takes is what the daemon
 * waits for.  On a shared machine it includes waiting for a core: compare
 * only figures from the same run. */
static double now_ms(void) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b) {
        double x = *(const double *)a, y = *(const double *)b;
        return x < y ? -1 : x > y;
}

/* Fills chunks: last_use and heat random over 1000 ticks; steady: VRAM for
 * the most recent quarter, churn: a random quarter. */
static void fill(struct policy_chunk *c, size_t n, int steady) {
        for (size_t i = 0; i < n; i++) {
                uint64_t x = next_rand();
                uint32_t lu = 1 + (uint32_t)(x % 1000);

                c[i] = (struct policy_chunk){
                        .last_use = lu,
                        .heat = (uint32_t)(x >> 20) % (64 * POLICY_HEAT_ONE),
                        .last_move = (uint32_t)(x >> 40) % 1000,
                        .tier = (steady ? lu > 750 : (x >> 50) % 4 == 0) ? KVT_TIER_VRAM : KVT_TIER_HOST_MAPPED,
                };
        }
}

static bool plans_same(const struct policy_plan *a, const struct policy_plan *b) {
        return a->n_moves == b->n_moves && a->evict_chunks == b->evict_chunks &&
               a->promote_chunks == b->promote_chunks && a->prefetch_chunks == b->prefetch_chunks &&
               (a->n_moves == 0 || memcmp(a->moves, b->moves, a->n_moves * sizeof(*a->moves)) == 0);
}

static void print_row(const char *what, enum policy_kind k, const char *how, double *ms, int ticks, size_t n_total,
                      const struct policy_plan *p) {
        double med;

        qsort(ms, (size_t)ticks, sizeof(*ms), cmp_double);
        med = ms[ticks / 2];
        printf("%-7s %-6s %-5s %10.2f %10.2f %14.0f %8zu %10llu\n", what, policy_kind_name(k), how, med, ms[0],
               (double)n_total / (med / 1e3), p->n_moves,
               (unsigned long long)(p->evict_chunks + p->promote_chunks));
}

/* demand's tick also samples (policy_sample(): re-arms and probes, as the
 * daemon's planner asks for them at the defaults, rearm_rate 25600 and
 * probe_rate 800 a second at 10 ms ticks): the median of ticks of it as a
 * row of its own, ms the scratch for their times: with 1 thread and with
 * threads (its sibling counts; the lap runs on one), or, where plan is
 * given, on the counts of that plan of the same input, as the daemon's
 * planner samples after its plan ("plan": the tick is that plan's time
 * and this). */
static int sample_row(const char *what, const struct policy_input *in, size_t n_total, int ticks, double *ms,
                      uint32_t threads, const struct policy_plan *plan) {
        struct policy_sample_params sp = {.stale_ticks = 20, .probe_ticks = 10, .probe_window = 20,
                                          .rearm_max = 256, .probe_max = 8, .threads = threads,
                                          .siblings = plan ? plan->siblings : NULL};
        char how[16];
        struct policy_sample_cursor cursor = {0};

        for (int t = 0; t < ticks; t++) {
                struct policy_sample sm;
                double a = now_ms();

                if (policy_sample(in, &sp, &cursor, &sm) < 0)
                        return -1;
                ms[t] = now_ms() - a;
                policy_plan_clear(&sm.plan);
        }
        qsort(ms, (size_t)ticks, sizeof(*ms), cmp_double);
        snprintf(how, sizeof(how), plan ? "plan" : threads == 1 ? "1" : threads ? "%u" : "auto", threads);
        printf("%-7s %-6s %-5s %10.2f %10.2f %14.0f\n", what, "sample", how, ms[ticks / 2], ms[0],
               (double)n_total / (ms[ticks / 2] / 1e3));
        return 0;
}

/* The sample of a tick in which the one client's prober sits the tick out
 * (as between its probes at a long interval), on the counts of the plan
 * as "plan" is: the lap should pass its chunks in VRAM in runs, not look
 * at them one by one ("noroom").  The snapshots have no chunk to re-arm
 * (fill(): mapped host chunks, none left by an eviction), so the re-arm
 * room plays no part here. */
static int sample_noroom_row(const char *what, const struct policy_input *in, size_t n_total, int ticks, double *ms,
                             const struct policy_plan *plan) {
        struct policy_client cl = {.quota_chunks = UINT64_MAX, .probes_off = true};
        struct policy_input one = *in;
        struct policy_sample_params sp = {.stale_ticks = 20, .probe_ticks = 10, .probe_window = 20,
                                          .rearm_max = 256, .probe_max = 8, .probe_priority_max = POLICY_PRIORITY_MAX,
                                          .threads = 1, .siblings = plan->siblings};
        struct policy_sample_cursor cursor = {0};

        one.clients = &cl;
        one.n_clients = 1;
        for (int t = 0; t < ticks; t++) {
                struct policy_sample sm;
                double a = now_ms();

                if (policy_sample(&one, &sp, &cursor, &sm) < 0)
                        return -1;
                ms[t] = now_ms() - a;
                policy_plan_clear(&sm.plan);
        }
        qsort(ms, (size_t)ticks, sizeof(*ms), cmp_double);
        printf("%-7s %-6s %-5s %10.2f %10.2f %14.0f\n", what, "sample", "noroom", ms[ticks / 2], ms[0],
               (double)n_total / (ms[ticks / 2] / 1e3));
        return 0;
}

/* Ticks of threads = 1 and threads = threads alternating; the plans of the
 * two must be the same. */
static int bench(const char *what, enum policy_kind k, const struct policy_input *in, size_t n_total, int ticks,
                 uint32_t threads) {
        struct policy_params pp[2];
        double *ms[2] = {calloc((size_t)ticks, sizeof(double)), calloc((size_t)ticks, sizeof(double))};
        struct policy_plan p[2] = {{0}, {0}};
        char how[16];
        int ret = -1;

        if (!ms[0] || !ms[1])
                goto out;
        policy_params_default(k, &pp[0]);
        pp[1] = pp[0];
        pp[0].threads = 1;
        pp[1].threads = threads;
        for (int t = 0; t < ticks; t++)
                for (int v = 0; v < 2; v++) {
                        int w = (t + v) % 2; /* who goes first alternates */
                        double a;

                        policy_plan_clear(&p[w]);
                        a = now_ms();
                        if (policy_plan(&pp[w], in, &p[w]) < 0)
                                goto out;
                        ms[w][t] = now_ms() - a;
                }
        if (!plans_same(&p[0], &p[1])) {
                fprintf(stderr, "%s %s: the threaded plan differs\n", what, policy_kind_name(k));
                goto out;
        }
        print_row(what, k, "1", ms[0], ticks, n_total, &p[0]);
        snprintf(how, sizeof(how), threads ? "%u" : "auto", threads);
        print_row(what, k, how, ms[1], ticks, n_total, &p[1]);
        printf("%-7s %-6s %-5s %10.2f %10.2f\n", what, policy_kind_name(k), "ratio", ms[0][ticks / 2] / ms[1][ticks / 2],
               ms[0][0] / ms[1][0]);
        if (k == POLICY_DEMAND && (sample_row(what, in, n_total, ticks, ms[0], 1, NULL) < 0 ||
                                   sample_row(what, in, n_total, ticks, ms[0], threads, NULL) < 0 ||
                                   sample_row(what, in, n_total, ticks, ms[0], threads, &p[1]) < 0 ||
                                   sample_noroom_row(what, in, n_total, ticks, ms[0], &p[1]) < 0))
                goto out;
        ret = 0;
out:
        policy_plan_clear(&p[0]);
        policy_plan_clear(&p[1]);
        free(ms[0]);
        free(ms[1]);
        return ret;
}

int main(int argc, char **argv) {
        size_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : (size_t)1 << 20;
        int ticks = argc > 2 ? atoi(argv[2]) : 11;
        uint32_t threads = argc > 3 ? (uint32_t)strtoul(argv[3], NULL, 10) : 0;
        int only = argc > 4 ? policy_kind_from_name(argv[4]) : -1;
        size_t n_regions = (n + REGION_CHUNKS - 1) / REGION_CHUNKS;
        struct policy_chunk *c = calloc(n, sizeof(*c));
        struct policy_region *regs = calloc(n_regions, sizeof(*regs));
        struct policy_input in = {.regions = regs, .n_regions = n_regions, .now = 1000};
        struct workers *pool = NULL;

        if (argc > 4 && only < 0) {
                fprintf(stderr, "policy-tick: no policy '%s'\n", argv[4]);
                return 2;
        }
        if (!c || !regs || n == 0 || ticks < 1 || workers_new(workers_threads_for(threads), &pool) < 0)
                return 1;
        in.workers = workers_policy(pool);
        for (size_t r = 0; r < n_regions; r++)
                regs[r] = (struct policy_region){
                        .chunks = c + r * REGION_CHUNKS,
                        .n_chunks = (uint32_t)(r + 1 < n_regions ? REGION_CHUNKS : n - r * REGION_CHUNKS)};
        in.budget_chunks = n / 4;
        printf("# %zu chunks in %zu regions, budget %llu chunks, median of %d ticks, wall-clock; "
               "threads 1 and %u (0 = auto) of a pool of %u alternating; ratio = 1 thread / threaded "
               "(median, best)\n",
               n, n_regions, (unsigned long long)in.budget_chunks, ticks, threads, workers_n(pool));
        printf("%-7s %-6s %-5s %10s %10s %14s %8s %10s\n", "state", "policy", "thr", "ms/tick", "best ms",
               "chunks/s", "moves", "chunks");
        {
                struct policy_chunk *copy = malloc(n * sizeof(*copy));
                double best = 1e9;

                if (!copy)
                        return 1;
                for (int t = 0; t < ticks; t++) {
                        double a = now_ms();

                        memcpy(copy, c, n * sizeof(*c));
                        c[t % n].heat += copy[(t * 7919) % n].heat; /* keep the copy live */
                        if (now_ms() - a < best)
                                best = now_ms() - a;
                }
                printf("%-7s %-6s %-5s %10.2f %10.2f\n", "memcpy", "-", "1", best, best);
                free(copy);
        }
        for (int steady = 1; steady >= 0; steady--) {
                uint64_t vram = 0;

                fill(c, n, steady);
                for (size_t i = 0; i < n; i++)
                        vram += c[i].tier == KVT_TIER_VRAM;
                in.charged_chunks = vram < in.budget_chunks ? vram : in.budget_chunks;
                /* 40 GB/s x 50 ms, the daemon's defaults */
                in.max_move_chunks = (40ull << 30) / 20 / KVT_CHUNK_BYTES;
                for (int k = 0; k < _POLICY_KIND_MAX; k++)
                        if ((only < 0 || k == only) && bench(steady ? "steady" : "churn", (enum policy_kind)k, &in, n, ticks, threads) < 0)
                                return 1;
        }
        workers_free(pool);
        free(c);
        free(regs);
        return 0;
}
