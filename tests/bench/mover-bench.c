/* SPDX-License-Identifier: MIT */
/*
 * mover-bench: the shim's own mover code (shim/pipeline.c, shim/evictors.c,
 * shim/regions.c, linked in) moving a managed region up and down, by
 * orders as the daemon sends them, next to pinned cudaMemcpy of the same
 * bytes in the same run.
 *
 *   mover-bench [--size BYTES] [--runs LIST] [--evict-to host|host-mapped]
 *               [--check-only] [--explore | --scattered | --overtake | --contend | --interfere | --samples-first |
 *                --samples-wait | --exit-midway | --exit-midway-up | --soak BYTES | --round-trips N]
 *
 * First a correctness check, always: the GPU writes a pattern, the region
 * is evicted, the GPU writes every other chunk again while the region is in
 * VRAM, it is evicted again; then the host reads every chunk and the GPU
 * reads them back after a promotion.  Any lost write fails the run (exit 1).
 *
 * Evictions go to the tier --evict-to names: host memory the GPU keeps
 * mapped by default, as the daemon's default [policy] evict_to =
 * host-mapped orders (the mover sets accessed-by, which costs its own
 * time), or unmapped host memory (host).
 *
 * Then, for each run length in LIST (default 2M,8M,64M,256M,1G): promotion
 * of the whole region in orders of that length, each order its own batch
 * (no coalescing), eviction of chunks the GPU only read ("clean"), and
 * eviction after the GPU wrote all of them ("dirty"); a last row sends
 * 2 MiB orders in batches of 64, as the mover reads them off its socket,
 * to show coalescing.  Pinned memcpy H2D and D2H in calls of the same length
 * are the reference.  KVTIER_DEBUG=host-numa=0 comes from the environment, as
 * in the shim; the mover's shape (streams, evictor threads) is fixed
 * (shim/pipeline.h).  Builds against the fake
 * CUDA here (CI runs --check-only) and real CUDA with nvcc.
 *
 * --explore instead times raw sequences of advice and prefetch (not the
 * mover's code) in 64 MiB calls, each from a prepared state, to find the
 * fastest path for the mover to take: see EXPLORE below.
 *
 * --scattered instead times raw calls (not the mover's code) moving every
 * other 2 MiB chunk of the region, none contiguous, as a plan over a
 * churned pool leaves them: to the host and back to the GPU, one
 * cudaMemPrefetchAsync a chunk, then one cudaMemPrefetchBatchAsync of up
 * to SCATTER_BATCH chunks a call (where the runtime has it), the mapped
 * eviction's advice made once before, untimed.  Beside kernels reading host
 * memory in place, 2 MiB calls ran far slower than 256 MiB ones
 * (tests/bench/evict-load-h200.sh): whether a batch of scattered chunks
 * keeps a long call's speed is what a mover coalescing them would need.
 *
 * --overtake instead evicts all of the region but its last 64 MiB in
 * 16 MiB orders, each its own batch, then orders the last 64 MiB up, and
 * prints when the promotion and the last eviction completed: a promotion
 * ordered after evictions should not wait for them (the pipeline's evictor
 * threads make the evictions' calls).  Exit 1 if it waited.
 *
 * --samples-first instead puts the region in VRAM, orders all of it but its
 * last 16 MiB re-armed (one batch of one-chunk orders, as the daemon's
 * sampler sends them), then the last 16 MiB evicted, and prints when the
 * eviction and the last re-arm completed: the evictors take a move before
 * any sample's next part, so an eviction ordered after samples should not
 * wait for them all.  Exit 1 if it waited.  Meant for
 * FAKECUDA_ADVISE_DELAY_US, where a re-arm costs what it costs on the H200.
 *
 * --samples-wait instead orders 40 one-chunk evictions (every other chunk,
 * so that they do not coalesce: 40 moves queued), then one re-arm, and
 * prints when the re-arm and the last eviction completed: a sample waits
 * behind moves for half a second at most, so with moves longer than that
 * queued it should not wait for them all.  Exit 1 if it waited for 70% of
 * their time or more.  Meant for FAKECUDA_PREFETCH_DELAY_US, so that the
 * evictions take 1.5 s or more.
 *
 * --exit-midway instead puts the region in VRAM, orders it evicted and
 * calls exit() while the eviction's prefetch is in flight: the shim's exit
 * handler waits for the calls under way (the fake's teardown says if it
 * overtakes one), and the pipeline must report the order, done or
 * cancelled (the memory goes with the process), not failed.  An exit
 * handler made before the runtime's waits for the report and ends the
 * process: 0 if the order was reported and nothing failed, 1 otherwise.
 * Meant for FAKECUDA_PREFETCH_DELAY_US, so that the eviction takes long
 * enough.  --exit-midway-up does the same with the region in host memory
 * and a promotion of it: its copy issued, the exit comes before the
 * pipeline has seen its event, so it is ended with no CUDA call
 * (cancelled).
 *
 * --contend instead times a promotion of the region's second half alone,
 * then again in one batch with the eviction of its first half (16 MiB
 * orders, listed first, as the daemon plans them), and counts the
 * eviction runs that began while the promotions' prefetch calls ran: the
 * pipeline issues a batch's promotions first, so none should (on the H200
 * those calls return only once the pages have moved).
 *
 * --interfere instead measures what moving does to an engine that only
 * computes: a probe step (a 64 MiB read of plain VRAM on a stream of its
 * own, then a wait for that stream) runs back to back while nothing moves,
 * while the region's first half is evicted in 16 MiB and then 2 MiB orders
 * (each its own batch, as the daemon's ticks send them), and while its
 * second half is promoted; per phase the probe's median, 99th percentile
 * and longest step, its longest launch call, and the time the probe lost
 * against its idle median, and the phase's CLOCK_MONOTONIC span (to line
 * up a probe in another process, tests/bench/probe_engine.py).  On real
 * CUDA, KVT_PROBE_CTX=own runs the probe in a CUDA context of its own.
 */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../engine/backend.h"
#include "log.h"
#include "pinned-ref.h"
#include "pipeline.h"
#include "protocol.h"
#include "real.h"
#include "regions.h"
#include "env.h"
#include "util.h"

#define CHUNK       KVT_CHUNK_BYTES
#define BATCH       64
#define SEED_FIRST  0x1111
#define SEED_SECOND 0x2222

struct bench {
        struct pipeline *pipe;
        const struct kvt_cudart *rt;
        struct shim_region reg;
        uint64_t next_order;
        uint64_t done, failed, cancelled;
        uint64_t watch_order;           /* --overtake, --contend: orders from this id on are watched */
        uint64_t watch_done_ns, last_done_ns;
        uint32_t evict_tier;            /* --evict-to: where the check and the benchmark evict */
};

/* Start times of the prefetches to the host the pipeline makes, and when
 * its last prefetch to a GPU returned (it gets a copy of CUDA's table with
 * this wrapper in). */
#define MAX_EVICT_STARTS 4096
static cudaError_t (*real_prefetch)(const void *, size_t, struct cudaMemLocation, unsigned int,
                                    cudaStream_t);
static pthread_mutex_t starts_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t evict_starts[MAX_EVICT_STARTS];
static size_t n_evict_starts;
static uint64_t promote_returned_ns;

static cudaError_t prefetch_recorded(const void *p, size_t len, struct cudaMemLocation loc,
                                     unsigned int flags, cudaStream_t s) {
        cudaError_t e;

        if (loc.type != cudaMemLocationTypeDevice) {
                pthread_mutex_lock(&starts_lock);
                if (n_evict_starts < MAX_EVICT_STARTS)
                        evict_starts[n_evict_starts++] = now_ns();
                pthread_mutex_unlock(&starts_lock);
        }
        e = real_prefetch(p, len, loc, flags, s);
        if (loc.type == cudaMemLocationTypeDevice) {
                pthread_mutex_lock(&starts_lock);
                promote_returned_ns = now_ns();
                pthread_mutex_unlock(&starts_lock);
        }
        return e;
}

/* The pipeline's advice calls and the time they took (--round-trips). */
static cudaError_t (*real_advise)(const void *, size_t, enum cudaMemoryAdvise, struct cudaMemLocation);
static _Atomic uint64_t advise_calls, advise_ns;

static cudaError_t advise_recorded(const void *p, size_t len, enum cudaMemoryAdvise advice,
                                   struct cudaMemLocation loc) {
        uint64_t t0 = now_ns();
        cudaError_t e = real_advise(p, len, advice, loc);

        advise_ns += now_ns() - t0;
        advise_calls++;
        return e;
}

static void on_done(const struct kvt_order_done *d, void *userdata) {
        struct bench *b = userdata;

        b->done++;
        if (b->watch_order && d->order_id >= b->watch_order)
                b->watch_done_ns = now_ns();
        else
                b->last_done_ns = now_ns();
        if (d->status == -ENOENT) /* the region, or the process, went first */
                b->cancelled++;
        else if (d->status != 0) {
                b->failed++;
                fprintf(stderr, "order %llu failed: %s (CUDA error %d)\n", (unsigned long long)d->order_id,
                        strerror(-d->status), d->cuda_err);
        }
}

/* Reaps the pipeline's reports until expected orders are done or
 * deadline_ns (now_ns()) passed. */
static void wait_until(struct bench *b, uint64_t expected, uint64_t deadline_ns) {
        while (b->done < expected && now_ns() < deadline_ns) {
                struct pollfd p = { .fd = pipeline_fd(b->pipe), .events = POLLIN };

                (void)poll(&p, 1, 100);
                pipeline_reap(b->pipe);
        }
}

static void wait_all(struct bench *b, uint64_t expected) {
        wait_until(b, expected, UINT64_MAX);
}

/* Moves the whole region to tier in orders of run_chunks, each order its
 * own batch, or batch orders per batch (coalesced by the pipeline).
 * Returns seconds, or a negative number if an order failed. */
static double move_all(struct bench *b, uint32_t tier, uint32_t run_chunks, unsigned batch) {
        uint32_t n_chunks = (uint32_t)(b->reg.span_bytes / CHUNK);
        struct kvt_order orders[BATCH];
        uint64_t t0 = now_ns(), expected = b->done, failed = b->failed;
        unsigned n = 0;

        for (uint32_t c = 0; c < n_chunks; c += run_chunks) {
                orders[n++] = (struct kvt_order){
                        .order_id = ++b->next_order,
                        .region_id = b->reg.id,
                        .first_chunk = c,
                        .n_chunks = c + run_chunks <= n_chunks ? run_chunks : n_chunks - c,
                        .tier = tier,
                        .host_node = -1, /* the GPU's home node, as the pipeline finds it */
                };
                expected++;
                if (n == batch || c + run_chunks >= n_chunks) {
                        pipeline_submit(b->pipe, orders, n);
                        n = 0;
                }
        }
        wait_all(b, expected);
        return b->failed == failed ? (double)(now_ns() - t0) / 1e9 : -1;
}

/* Counts the words of the region that differ, chunk by chunk, from
 * SEED_SECOND on odd chunks and SEED_FIRST on even ones, read on the host
 * (plain loads: the CPU's view of managed memory). */
static uint64_t host_check(const struct bench *b) {
        uint64_t bad = 0;

        for (size_t off = 0; off < b->reg.span_bytes; off += CHUNK) {
                const uint64_t *w = (const uint64_t *)(b->reg.base + off);
                uint64_t seed = (off / CHUNK) % 2 ? SEED_SECOND : SEED_FIRST;

                for (size_t i = 0; i < CHUNK / 8; i++)
                        bad += w[i] != backend_pattern(seed, i * 8);
        }
        return bad;
}

static uint64_t gpu_check(const struct bench *b) {
        uint64_t bad = 0;

        for (size_t off = 0; off < b->reg.span_bytes; off += CHUNK) {
                uint64_t seed = (off / CHUNK) % 2 ? SEED_SECOND : SEED_FIRST, n = 0;

                if (backend_check((void *)(b->reg.base + off), CHUNK, seed, &n) < 0)
                        return UINT64_MAX;
                bad += n;
        }
        return bad;
}

static int fill_chunks(const struct bench *b, bool odd_only, uint64_t seed) {
        for (size_t off = 0; off < b->reg.span_bytes; off += CHUNK)
                if (!odd_only || (off / CHUNK) % 2)
                        if (backend_fill((void *)(b->reg.base + off), CHUNK, seed) < 0)
                                return -EIO;
        return 0;
}

/* A written chunk must never lose the write, whatever the eviction path. */
static int check(struct bench *b) {
        uint64_t host_bad, gpu_bad;

        if (fill_chunks(b, false, SEED_FIRST) < 0 || move_all(b, b->evict_tier, 1, 1) < 0)
                return -EIO;
        /* in VRAM: the GPU reads all, then writes odd chunks */
        if (move_all(b, KVT_TIER_VRAM, 1, BATCH) < 0 || backend_read((void *)b->reg.base, b->reg.span_bytes) < 0 ||
            fill_chunks(b, true, SEED_SECOND) < 0 || move_all(b, b->evict_tier, 1, BATCH) < 0)
                return -EIO;
        host_bad = host_check(b);
        if (move_all(b, KVT_TIER_VRAM, 1, BATCH) < 0)
                return -EIO;
        gpu_bad = gpu_check(b);
        if (move_all(b, b->evict_tier, 1, BATCH) < 0)
                return -EIO;
        {
                uint64_t orders, runs;
                size_t max_in_flight;

                pipeline_counts(b->pipe, &orders, &runs, &max_in_flight);
                printf("check: %zu MiB, words lost or wrong: host %llu, gpu %llu; %llu orders in %llu runs, "
                       "at most %zu in flight\n",
                       b->reg.span_bytes >> 20, (unsigned long long)host_bad, (unsigned long long)gpu_bad,
                       (unsigned long long)orders, (unsigned long long)runs, max_in_flight);
        }
        return host_bad == 0 && gpu_bad == 0 ? 0 : -EBADMSG;
}

static double gbps(size_t bytes, double s) {
        return s > 0 ? (double)bytes / s / 1e9 : 0;
}

static void row(const char *what, size_t bytes, double mover_s, double ref_s) {
        if (ref_s > 0)
                printf("%-34s %8.1f GB/s   pinned %6.1f GB/s   ratio %.2f\n", what, gbps(bytes, mover_s),
                       gbps(bytes, ref_s), mover_s > 0 ? ref_s / mover_s : 0);
        else
                printf("%-34s %8.1f GB/s   (no pinned reference)\n", what, gbps(bytes, mover_s));
}

static int bench_run_length(struct bench *b, uint64_t run_bytes) {
        uint32_t rc = (uint32_t)(run_bytes / CHUNK);
        size_t bytes = b->reg.span_bytes;
        double up, clean, dirty, ref_up = 0, ref_down = 0;
        char what[64];

        if (rc == 0)
                return -EINVAL;
        up = move_all(b, KVT_TIER_VRAM, rc, 1);
        if (backend_read((void *)b->reg.base, bytes) < 0)
                return -EIO;
        clean = move_all(b, b->evict_tier, rc, 1);
        if (move_all(b, KVT_TIER_VRAM, rc, 1) < 0 || fill_chunks(b, false, SEED_FIRST) < 0)
                return -EIO;
        dirty = move_all(b, b->evict_tier, rc, 1);
        if (up < 0 || clean < 0 || dirty < 0)
                return -EIO;
        (void)pinned_ref(bytes, run_bytes, 1, &ref_up);
        (void)pinned_ref(bytes, run_bytes, 0, &ref_down);
        snprintf(what, sizeof(what), "promote   run %6llu MiB", (unsigned long long)(run_bytes >> 20));
        row(what, bytes, up, ref_up);
        snprintf(what, sizeof(what), "evict clean run %6llu MiB", (unsigned long long)(run_bytes >> 20));
        row(what, bytes, clean, ref_down);
        snprintf(what, sizeof(what), "evict dirty run %6llu MiB", (unsigned long long)(run_bytes >> 20));
        row(what, bytes, dirty, ref_down);
        fflush(stdout);
        return 0;
}

/* 2 MiB orders, BATCH per batch: what the mover sees when the daemon sends
 * a long move as many small orders at once. */
static int bench_coalesced(struct bench *b) {
        size_t bytes = b->reg.span_bytes;
        double up, clean, ref_up = 0, ref_down = 0;

        up = move_all(b, KVT_TIER_VRAM, 1, BATCH);
        if (backend_read((void *)b->reg.base, bytes) < 0)
                return -EIO;
        clean = move_all(b, b->evict_tier, 1, BATCH);
        if (up < 0 || clean < 0)
                return -EIO;
        (void)pinned_ref(bytes, (size_t)BATCH * CHUNK, 1, &ref_up);
        (void)pinned_ref(bytes, (size_t)BATCH * CHUNK, 0, &ref_down);
        row("promote   2 MiB x64 batches", bytes, up, ref_up);
        row("evict clean 2 MiB x64 batches", bytes, clean, ref_down);
        return 0;
}

/* Orders chunks [first, first + n) to tier in orders of run chunks, ids
 * from the bench's counter, into o; returns how many. */
static size_t orders_for(struct bench *b, struct kvt_order *o, uint32_t first, uint32_t n, uint32_t run,
                         uint32_t tier) {
        size_t k = 0;

        for (uint32_t c = first; c < first + n; c += run)
                o[k++] = (struct kvt_order){.region_id = b->reg.id,
                                            .first_chunk = c,
                                            .n_chunks = c + run <= first + n ? run : first + n - c,
                                            .tier = tier,
                                            .host_node = -1,
                                            .order_id = ++b->next_order};
        return k;
}

/* Submits orders of run chunks over [first, first + n) to tier, each order
 * its own batch; returns the completions to wait for. */
static uint64_t submit_each(struct bench *b, uint32_t first, uint32_t n, uint32_t run, uint32_t tier) {
        uint64_t expected = b->done;

        for (uint32_t c = first; c < first + n; c += run) {
                struct kvt_order o;

                orders_for(b, &o, c, run < first + n - c ? run : first + n - c, run, tier);
                pipeline_submit(b->pipe, &o, 1);
                expected++;
        }
        return expected;
}

/* See --overtake in the header. */
static int overtake(struct bench *b) {
        const uint32_t n_chunks = (uint32_t)(b->reg.span_bytes / CHUNK), up = 32, run = 8;
        uint64_t t0, expected;

        if (n_chunks < up + run)
                return -EINVAL;
        /* all in VRAM but the last up chunks, on the host */
        if (move_all(b, KVT_TIER_VRAM, n_chunks, 1) < 0)
                return -EIO;
        wait_all(b, submit_each(b, n_chunks - up, up, up, KVT_TIER_HOST));
        t0 = now_ns();
        expected = b->done + (n_chunks - up + run - 1) / run + 1; /* the evictions, then the promotion */
        (void)submit_each(b, 0, n_chunks - up, run, KVT_TIER_HOST);
        b->watch_order = b->next_order + 1;
        (void)submit_each(b, n_chunks - up, up, up, KVT_TIER_VRAM);
        wait_all(b, expected);
        printf("overtake: %u MiB evicted in %u MiB orders, then %u MiB promoted: promotion done after %.1f ms, "
               "last eviction after %.1f ms\n",
               (n_chunks - up) * 2, run * 2, up * 2, (double)(b->watch_done_ns - t0) / 1e6,
               (double)(b->last_done_ns - t0) / 1e6);
        return b->failed == 0 && b->watch_done_ns < b->last_done_ns ? 0 : -EAGAIN;
}

/* See --samples-first in the header. */
static int samples_first(struct bench *b) {
        const uint32_t n_chunks = (uint32_t)(b->reg.span_bytes / CHUNK), down = 8;
        struct kvt_order o[BATCH];
        uint64_t t0, expected;
        size_t n;

        if (n_chunks < down + 2 * 8 || n_chunks - down > BATCH)
                return -EINVAL;
        if (move_all(b, KVT_TIER_VRAM, n_chunks, 1) < 0)
                return -EIO;
        n = orders_for(b, o, 0, n_chunks - down, 1, KVT_TIER_HOST);
        for (size_t i = 0; i < n; i++)
                o[i].flags = KVT_ORDER_REARM;
        t0 = now_ns();
        expected = b->done + n + 1;
        pipeline_submit(b->pipe, o, n);
        b->watch_order = b->next_order + 1;
        (void)submit_each(b, n_chunks - down, down, down, KVT_TIER_HOST);
        wait_all(b, expected);
        printf("samples-first: %zu chunks re-armed, then %u MiB evicted: eviction done after %.1f ms, "
               "last re-arm after %.1f ms\n",
               n, down * 2, (double)(b->watch_done_ns - t0) / 1e6, (double)(b->last_done_ns - t0) / 1e6);
        return b->failed == 0 && b->watch_done_ns < b->last_done_ns ? 0 : -EAGAIN;
}

/* See --samples-wait in the header. */
static int samples_wait(struct bench *b) {
        const uint32_t n_chunks = (uint32_t)(b->reg.span_bytes / CHUNK), runs = 40;
        struct kvt_order o[BATCH];
        uint64_t t0, expected;

        if (n_chunks < 2 * runs + 2)
                return -EINVAL;
        if (fill_chunks(b, false, SEED_FIRST) < 0) /* written on the GPU: pages there to move */
                return -EIO;
        for (uint32_t k = 0; k < runs; k++)
                orders_for(b, &o[k], 2 + 2 * k, 1, 1, KVT_TIER_VRAM);
        expected = b->done + runs;
        pipeline_submit(b->pipe, o, runs);
        wait_all(b, expected);
        for (uint32_t k = 0; k < runs; k++)
                orders_for(b, &o[k], 2 + 2 * k, 1, 1, KVT_TIER_HOST);
        t0 = now_ns();
        expected = b->done + runs + 1;
        pipeline_submit(b->pipe, o, runs);
        b->watch_order = b->next_order + 1;
        orders_for(b, &o[0], 0, 1, 1, KVT_TIER_HOST);
        o[0].flags = KVT_ORDER_REARM;
        pipeline_submit(b->pipe, o, 1);
        wait_all(b, expected);
        printf("samples-wait: %u one-chunk evictions, then a re-arm: re-arm done after %.1f ms, "
               "last eviction after %.1f ms\n",
               runs, (double)(b->watch_done_ns - t0) / 1e6, (double)(b->last_done_ns - t0) / 1e6);
        return b->failed == 0 && (b->watch_done_ns - t0) * 10 < (b->last_done_ns - t0) * 7 ? 0 : -EAGAIN;
}

/* --exit-midway: the bench whose order exit_linger() waits for, and the
 * orders it waits to see reported. */
static struct bench *exit_bench;
static uint64_t exit_expected;
static bool exit_up; /* --exit-midway-up: a promotion, not an eviction */

/* The last exit handler to run (made before the runtime's): reaps the
 * report of the move the exit overtook, and ends the process. */
static void exit_linger(void) {
        struct bench *b = exit_bench;

        if (!b)
                return;
        wait_until(b, exit_expected, now_ns() + 5000000000ull);
        printf("exit-midway: %llu of %llu orders reported after the exit began: %llu cancelled, %llu failed\n",
               (unsigned long long)b->done, (unsigned long long)exit_expected, (unsigned long long)b->cancelled,
               (unsigned long long)b->failed);
        fflush(stdout);
        _exit(b->done == exit_expected && b->failed == 0 ? 0 : 1);
}

/* See --exit-midway in the header. */
static int exit_midway(struct bench *b) {
        const uint32_t n_chunks = (uint32_t)(b->reg.span_bytes / CHUNK);

        if (fill_chunks(b, false, SEED_FIRST) < 0) /* written on the GPU: pages there to move */
                return -EIO;
        /* once down and up first: what the first eviction sets up (the host
         * tier's NUMA node) is done before the exit */
        if (move_all(b, b->evict_tier, n_chunks, 1) < 0 || move_all(b, KVT_TIER_VRAM, n_chunks, 1) < 0)
                return -EIO;
        if (exit_up && move_all(b, b->evict_tier, n_chunks, 1) < 0)
                return -EIO;
        exit_bench = b;
        exit_expected = b->done + 1;
        if (exit_up)
                exit(submit_each(b, 0, n_chunks, n_chunks, KVT_TIER_VRAM) == exit_expected ? 0 : 1);
        (void)submit_each(b, 0, n_chunks, n_chunks, b->evict_tier);
        usleep(100000); /* the evictor is in its prefetch */
        exit(0);
}

/* See --contend in the header. */
static int contend(struct bench *b) {
        const uint32_t n_chunks = (uint32_t)(b->reg.span_bytes / CHUNK), half = n_chunks / 2;
        const uint32_t ev_run = 8, pr_run = 32;
        struct kvt_order *o = calloc(n_chunks, sizeof(*o));
        size_t n_ev, n_pr, under = 0;
        uint64_t t0, alone_ns, submit_ns, expected;
        int r = -EIO;

        if (!o || half < pr_run) {
                free(o);
                return o ? -EINVAL : -ENOMEM;
        }
        /* the second half promoted alone, then back to the host */
        if (move_all(b, KVT_TIER_HOST, n_chunks, 1) < 0)
                goto out;
        n_pr = orders_for(b, o, half, n_chunks - half, pr_run, KVT_TIER_VRAM);
        t0 = now_ns();
        expected = b->done + n_pr;
        pipeline_submit(b->pipe, o, n_pr);
        submit_ns = now_ns() - t0;
        wait_all(b, expected);
        alone_ns = now_ns() - t0;
        n_pr = orders_for(b, o, half, n_chunks - half, pr_run, KVT_TIER_HOST);
        expected = b->done + n_pr;
        pipeline_submit(b->pipe, o, n_pr);
        wait_all(b, expected);
        /* the first half in VRAM; then its eviction and the promotion in one batch */
        n_ev = orders_for(b, o, 0, half, half, KVT_TIER_VRAM);
        expected = b->done + n_ev;
        pipeline_submit(b->pipe, o, n_ev);
        wait_all(b, expected);
        if (b->failed)
                goto out;
        /* every other run of ev_run chunks, so that they do not coalesce */
        n_ev = 0;
        for (uint32_t c = 0; c + ev_run <= half; c += 2 * ev_run)
                n_ev += orders_for(b, o + n_ev, c, ev_run, ev_run, KVT_TIER_HOST);
        b->watch_order = b->next_order + 1;
        n_pr = orders_for(b, o + n_ev, half, n_chunks - half, pr_run, KVT_TIER_VRAM);
        pthread_mutex_lock(&starts_lock);
        n_evict_starts = 0;
        pthread_mutex_unlock(&starts_lock);
        t0 = now_ns();
        expected = b->done + n_ev + n_pr;
        pipeline_submit(b->pipe, o, n_ev + n_pr);
        wait_all(b, expected);
        if (b->failed)
                goto out;
        pthread_mutex_lock(&starts_lock);
        for (size_t i = 0; i < n_evict_starts; i++)
                under += evict_starts[i] < promote_returned_ns;
        pthread_mutex_unlock(&starts_lock);
        printf("contend: %u MiB promoted alone in %.1f ms (%.1f GB/s; its calls returned after %.1f ms); "
               "in one batch with %zu MiB of evictions: promotions done after %.1f ms (%.1f GB/s), "
               "evictions after %.1f ms; %zu of %zu eviction runs started while the promotions' calls ran\n",
               (n_chunks - half) * 2, (double)alone_ns / 1e6,
               gbps((size_t)(n_chunks - half) * CHUNK, (double)alone_ns / 1e9), (double)submit_ns / 1e6,
               n_ev * ev_run * 2, (double)(b->watch_done_ns - t0) / 1e6,
               gbps((size_t)(n_chunks - half) * CHUNK, (double)(b->watch_done_ns - t0) / 1e9),
               (double)(b->last_done_ns - t0) / 1e6, under, n_evict_starts);
        r = 0;
out:
        b->watch_order = 0;
        free(o);
        return r;
}

/* The probe of --interfere: an engine's thread stepping on its own while
 * the bench's thread moves memory. */
struct prober {
        pthread_t thread;
        const void *buf;
        size_t len;
        atomic_bool stop;
        double *total_us;
        size_t n, cap;
        double launch_max_us;
        uint64_t t_start, t_stop; /* CLOCK_MONOTONIC: lines up with probes in other processes */
        int err;
};

static void *prober_main(void *arg) {
        struct prober *pr = arg;

        do { /* at least one step, however short the phase */
                double launch, total;

                if (backend_probe(pr->buf, pr->len, &launch, &total) < 0) {
                        pr->err = -EIO;
                        break;
                }
                if (pr->n == pr->cap) {
                        size_t cap = pr->cap ? 2 * pr->cap : 4096;
                        double *t = realloc(pr->total_us, cap * sizeof(*t));

                        if (!t) {
                                pr->err = -ENOMEM;
                                break;
                        }
                        pr->total_us = t;
                        pr->cap = cap;
                }
                pr->total_us[pr->n++] = total;
                pr->launch_max_us = launch > pr->launch_max_us ? launch : pr->launch_max_us;
        } while (!atomic_load(&pr->stop));
        return NULL;
}

static int prober_start(struct prober *pr) {
        pr->n = 0;
        pr->launch_max_us = 0;
        pr->err = 0;
        pr->t_start = now_ns();
        atomic_store(&pr->stop, false);
        return -pthread_create(&pr->thread, NULL, prober_main, pr);
}

static int cmp_double(const void *a, const void *b) {
        double x = *(const double *)a, y = *(const double *)b;

        return (x > y) - (x < y);
}

/* Stops the probe and prints its phase; *idle_us is the idle median
 * (set by the first phase). */
static int prober_stop(struct prober *pr, const char *what, uint64_t move_ns, double *idle_us) {
        double lost = 0;

        pr->t_stop = now_ns();
        atomic_store(&pr->stop, true);
        pthread_join(pr->thread, NULL);
        if (pr->err < 0 || pr->n == 0)
                return pr->err < 0 ? pr->err : -EIO;
        qsort(pr->total_us, pr->n, sizeof(*pr->total_us), cmp_double);
        if (*idle_us <= 0)
                *idle_us = pr->total_us[pr->n / 2];
        for (size_t i = 0; i < pr->n; i++)
                lost += pr->total_us[i] > *idle_us ? pr->total_us[i] - *idle_us : 0;
        printf("interfere: %-30s %6zu steps, median %7.1f us, p99 %8.1f, max %8.1f, "
               "longest launch %8.1f us; lost %7.1f ms",
               what, pr->n, pr->total_us[pr->n / 2], pr->total_us[pr->n * 99 / 100], pr->total_us[pr->n - 1],
               pr->launch_max_us, lost / 1e3);
        if (move_ns)
                printf(" in %.1f ms of moving", (double)move_ns / 1e6);
        printf("; monotonic %.6f-%.6f s\n", (double)pr->t_start / 1e9, (double)pr->t_stop / 1e9);
        fflush(stdout);
        return 0;
}

/* Eviction by the CPU's touch: a read of one word per 4 KiB page faults
 * each page to the host (preferred location host, set first). */
struct toucher {
        pthread_t thread;
        const volatile uint64_t *p;
        size_t len;
        uint64_t sum;
};

static void *toucher_main(void *arg) {
        struct toucher *t = arg;

        for (size_t off = 0; off < t->len; off += 4096)
                t->sum += t->p[off / 8];
        return NULL;
}

static int evict_by_touch(struct bench *b, char *p, size_t len, unsigned threads) {
        const struct cudaMemLocation gpu = { cudaMemLocationTypeDevice, 0 },
                                     host = { cudaMemLocationTypeHost, 0 };
        struct toucher t[8];
        size_t part = len / threads / CHUNK * CHUNK;
        unsigned started;

        if (threads == 0 || threads > ELEMENTSOF(t) || part == 0 ||
            b->rt->cudaMemAdvise(p, len, cudaMemAdviseSetPreferredLocation, host) != cudaSuccess ||
            b->rt->cudaMemAdvise(p, len, cudaMemAdviseSetAccessedBy, gpu) != cudaSuccess)
                return -EIO;
        for (started = 0; started < threads; started++) {
                t[started] = (struct toucher){ .p = (const volatile uint64_t *)(p + started * part),
                                               .len = started + 1 == threads ? len - started * part : part };
                if (pthread_create(&t[started].thread, NULL, toucher_main, &t[started]) != 0)
                        break;
        }
        for (unsigned i = 0; i < started; i++)
                pthread_join(t[i].thread, NULL);
        return started == threads ? 0 : -EAGAIN;
}

/* See --interfere in the header. */
static int interfere(struct bench *b) {
        const uint32_t n_chunks = (uint32_t)(b->reg.span_bytes / CHUNK), half = n_chunks / 2;
        static const struct {
                const char *what;
                uint32_t run, tier;
                unsigned touch_threads; /* evict by the CPU's touch instead of the pipeline */
        } phases[] = {
                { "evicting, 16 MiB orders", 8, KVT_TIER_HOST, 0 },
                { "evicting, 2 MiB orders", 1, KVT_TIER_HOST, 0 },
                { "evicting by CPU touch, 1 thread", 0, KVT_TIER_HOST, 1 },
                { "evicting by CPU touch, 4 threads", 0, KVT_TIER_HOST, 4 },
                { "promoting, 16 MiB orders", 8, KVT_TIER_VRAM, 0 },
        };
        struct prober pr = { .len = (size_t)64 << 20 };
        double idle = 0;
        void *buf = NULL;
        int r = -EIO;

        if (half == 0)
                return -EINVAL;
        if (b->rt->cudaMalloc(&buf, pr.len) != cudaSuccess)
                return -ENOMEM;
        pr.buf = buf;
        if (backend_fill(buf, pr.len, SEED_FIRST) < 0 || move_all(b, KVT_TIER_HOST, n_chunks, 1) < 0)
                goto out;
        if ((r = prober_start(&pr)) < 0)
                goto out;
        (void)usleep(200000);
        if ((r = prober_stop(&pr, "idle", 0, &idle)) < 0)
                goto out;
        for (size_t i = 0; i < ELEMENTSOF(phases); i++) {
                /* evictions start from the first half in VRAM; the promotion
                 * takes the second half, on the host */
                uint32_t first = phases[i].tier == KVT_TIER_VRAM ? half : 0;
                uint64_t expected, t0, moved;

                if (phases[i].tier != KVT_TIER_VRAM) {
                        expected = submit_each(b, 0, half, half, KVT_TIER_VRAM);
                        wait_all(b, expected);
                }
                if (b->failed) {
                        r = -EIO;
                        goto out;
                }
                if ((r = prober_start(&pr)) < 0)
                        goto out;
                t0 = now_ns();
                if (phases[i].touch_threads) {
                        r = evict_by_touch(b, (char *)b->reg.base, (size_t)half * CHUNK,
                                           phases[i].touch_threads);
                        moved = now_ns() - t0;
                } else {
                        expected = submit_each(b, first, half, phases[i].run, phases[i].tier);
                        wait_all(b, expected);
                        moved = b->last_done_ns - t0;
                        r = b->failed ? -EIO : 0;
                }
                if (r == 0)
                        r = prober_stop(&pr, phases[i].what, moved, &idle);
                else
                        (void)prober_stop(&pr, phases[i].what, moved, &idle);
                if (r < 0)
                        goto out;
                if (phases[i].touch_threads) {
                        uint64_t resident = 0;

                        size_t probe = (size_t)MIN(32u, half) * CHUNK;

                        if (backend_vram_resident((void *)b->reg.base, probe, 0, &resident) == 0)
                                printf("interfere: after the touch, %llu of the first %zu MiB read as "
                                       "VRAM-resident\n",
                                       (unsigned long long)(resident >> 20), probe >> 20);
                        /* the evicted half back to the state the pipeline leaves */
                        wait_all(b, submit_each(b, 0, half, half, KVT_TIER_HOST));
                }
        }
        r = 0;
out:
        free(pr.total_us);
        (void)b->rt->cudaFree(buf);
        return r;
}

/*
 * Explore: a sequence is a string of two-letter steps, applied to each
 * 64 MiB piece in turn (actions) or to the whole region (setups), then the
 * device is synchronized:
 *   pH pN pG  SetPreferredLocation host / host NUMA node / GPU
 *   sR uR     Set / UnsetReadMostly
 *   aB        SetAccessedBy the GPU
 *   fH fN fG  prefetch to host / host NUMA node / GPU (on one stream)
 */
#define EXPLORE_PIECE ((size_t)64 << 20)

static const struct {
        const char *name, *setup, *action;
} EXPLORE[] = {
        { "evict gpu: fH only", "uApHuRfGpG", "fH" },
        { "evict gpu: pH aB fN (the mover's default)", "uApHuRfGpG", "pHaBfN" },
        { "evict gpu: pH uA fN (evict_to = host)", "uApHuRfGpG", "pHuAfN" },
        { "evict gpu: pH uA fH", "uApHuRfGpG", "pHuAfH" },
        { "evict gpu: fN pH aB (advice after)", "uApHuRfGpG", "fNpHaB" },
        { "evict gpu: fH pH aB (advice after)", "uApHuRfGpG", "fHpHaB" },
        { "evict dup: pH uR", "pHsRfGpG", "pHuR" },
        { "evict dup: pH uR aB", "pHsRfGpG", "pHuRaB" },
        { "evict dup: pH aB uR (mover <= 9b1b984)", "pHsRfGpG", "pHaBuR" },
        { "evict dup: pH uR aB fH", "pHsRfGpG", "pHuRaBfH" },
        { "evict dup: pN uR aB fN", "pNsRfGpG", "pNuRaBfN" },
        { "evict dup, written: pH uR aB fH", "pHsRfGpGwG", "pHuRaBfH" },
        { "evict gpu: pH aB fH", "pHuRfGpG", "pHaBfH" },
        { "evict gpu: pN aB fN", "pNuRfGpG", "pNaBfN" },
        { "promote host: fG pG", "pHuRfH", "fGpG" },
        { "promote numa host: fG pG", "pNuRfN", "fGpG" },
        { "promote host: sR fG pG", "pHuRfH", "sRfGpG" },
        { "promote numa host: sR fG pG", "pNuRfN", "sRfGpG" },
};

static cudaError_t explore_steps(struct bench *b, const char *steps, char *p, size_t len, cudaStream_t s,
                                 int numa) {
        const struct cudaMemLocation gpu = { cudaMemLocationTypeDevice, 0 }, host = { cudaMemLocationTypeHost, 0 },
                                     node = { cudaMemLocationTypeHostNuma, numa };
        const struct kvt_cudart *rt = b->rt;
        cudaError_t e = cudaSuccess;

        for (const char *c = steps; *c && c[1] && e == cudaSuccess; c += 2) {
                if (!strncmp(c, "pH", 2))
                        e = rt->cudaMemAdvise(p, len, cudaMemAdviseSetPreferredLocation, host);
                else if (!strncmp(c, "pN", 2))
                        e = rt->cudaMemAdvise(p, len, cudaMemAdviseSetPreferredLocation, node);
                else if (!strncmp(c, "pG", 2))
                        e = rt->cudaMemAdvise(p, len, cudaMemAdviseSetPreferredLocation, gpu);
                else if (!strncmp(c, "sR", 2))
                        e = rt->cudaMemAdvise(p, len, cudaMemAdviseSetReadMostly, gpu);
                else if (!strncmp(c, "uR", 2))
                        e = rt->cudaMemAdvise(p, len, cudaMemAdviseUnsetReadMostly, gpu);
                else if (!strncmp(c, "aB", 2))
                        e = rt->cudaMemAdvise(p, len, cudaMemAdviseSetAccessedBy, gpu);
                else if (!strncmp(c, "uA", 2))
                        e = rt->cudaMemAdvise(p, len, cudaMemAdviseUnsetAccessedBy, gpu);
                else if (!strncmp(c, "fH", 2))
                        e = rt->cudaMemPrefetchAsync(p, len, host, 0, s);
                else if (!strncmp(c, "fN", 2))
                        e = rt->cudaMemPrefetchAsync(p, len, node, 0, s);
                else if (!strncmp(c, "fG", 2))
                        e = rt->cudaMemPrefetchAsync(p, len, gpu, 0, s);
                else if (!strncmp(c, "wG", 2)) {
                        e = rt->cudaStreamSynchronize(s);
                        if (e == cudaSuccess && backend_fill(p, len, SEED_FIRST) < 0)
                                e = cudaErrorUnknown;
                } else
                        e = cudaErrorInvalidValue;
        }
        return e;
}

static int explore(struct bench *b) {
        cudaStream_t s;
        int numa = 0;

        (void)b->rt->cudaDeviceGetAttribute(&numa, cudaDevAttrHostNumaId, 0);
        if (numa < 0)
                numa = 0;
        if (b->rt->cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess)
                return -EIO;
        printf("explore: %zu MiB in %zu MiB calls, host NUMA node %d\n", b->reg.span_bytes >> 20,
               EXPLORE_PIECE >> 20, numa);
        for (size_t i = 0; i < ELEMENTSOF(EXPLORE); i++) {
                char *base = (char *)b->reg.base;
                cudaError_t e;
                uint64_t t0;

                e = explore_steps(b, EXPLORE[i].setup, base, b->reg.span_bytes, s, numa);
                if (e == cudaSuccess)
                        e = b->rt->cudaStreamSynchronize(s);
                t0 = now_ns();
                for (size_t off = 0; e == cudaSuccess && off < b->reg.span_bytes; off += EXPLORE_PIECE)
                        e = explore_steps(b, EXPLORE[i].action, base + off, EXPLORE_PIECE, s, numa);
                if (e == cudaSuccess)
                        e = b->rt->cudaStreamSynchronize(s);
                if (e != cudaSuccess)
                        printf("%-42s failed: CUDA error %d\n", EXPLORE[i].name, (int)e);
                else
                        printf("%-42s %8.1f GB/s\n", EXPLORE[i].name,
                               gbps(b->reg.span_bytes, (double)(now_ns() - t0) / 1e9));
                fflush(stdout);
        }
        (void)b->rt->cudaStreamDestroy(s);
        return 0;
}

/* See --scattered in the header. */
#define SCATTER_BATCH 64

/* Moves every other chunk of the region to loc, batch chunks a call (1:
 * cudaMemPrefetchAsync each), on s; prints the GB/s of the chunks moved,
 * as "scattered DIRECTION, ..." with direction "evict" or "promote". */
static cudaError_t scattered_move(struct bench *b, struct cudaMemLocation loc, size_t batch, cudaStream_t s,
                                  const char *direction) {
        void *ptrs[SCATTER_BATCH];
        size_t sizes[SCATTER_BATCH], n = 0, first = 0, moved = 0;
        char *base = (char *)b->reg.base;
        cudaError_t e = cudaSuccess;
        uint64_t t0 = now_ns();
        char what[64];

        if (batch == 1)
                snprintf(what, sizeof(what), "scattered %s, one chunk a call", direction);
        else
                snprintf(what, sizeof(what), "scattered %s, %zu chunks a batch", direction, batch);

        for (size_t off = 0; e == cudaSuccess && off < b->reg.span_bytes; off += 2 * CHUNK) {
                ptrs[n] = base + off;
                sizes[n++] = CHUNK;
                moved += CHUNK;
                if (n == batch || off + 2 * CHUNK >= b->reg.span_bytes) {
                        e = batch == 1 ? b->rt->cudaMemPrefetchAsync(ptrs[0], sizes[0], loc, 0, s)
                                       : b->rt->cudaMemPrefetchBatchAsync(ptrs, sizes, n, &loc, &first, 1, 0, s);
                        n = 0;
                }
        }
        if (e == cudaSuccess)
                e = b->rt->cudaStreamSynchronize(s);
        if (e != cudaSuccess)
                printf("%-42s failed: CUDA error %d\n", what, (int)e);
        else
                printf("%-42s %8.1f GB/s\n", what, gbps(moved, (double)(now_ns() - t0) / 1e9));
        fflush(stdout);
        return e;
}

static int scattered(struct bench *b) {
        const struct cudaMemLocation gpu = { cudaMemLocationTypeDevice, 0 }, host = { cudaMemLocationTypeHost, 0 };
        const struct kvt_cudart *rt = b->rt;
        char *base = (char *)b->reg.base;
        size_t len = b->reg.span_bytes;
        cudaStream_t s;
        cudaError_t e;

        if (rt->cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess)
                return -EIO;
        printf("scattered: every other 2 MiB chunk of %zu MiB, batches of %u\n", len >> 20, (unsigned)SCATTER_BATCH);
        /* in VRAM, advised as a mapped eviction leaves it, so that no call
         * timed below advises */
        e = rt->cudaMemAdvise(base, len, cudaMemAdviseSetPreferredLocation, host);
        if (e == cudaSuccess)
                e = rt->cudaMemAdvise(base, len, cudaMemAdviseSetAccessedBy, gpu);
        for (int round = 0; e == cudaSuccess && round < 2; round++) {
                size_t batch = round == 0 ? 1 : SCATTER_BATCH;

                if (batch > 1 && !rt->cudaMemPrefetchBatchAsync) {
                        printf("scattered: the runtime has no cudaMemPrefetchBatchAsync\n");
                        break;
                }
                e = rt->cudaMemPrefetchAsync(base, len, gpu, 0, s);
                if (e == cudaSuccess)
                        e = rt->cudaStreamSynchronize(s);
                if (e == cudaSuccess)
                        e = scattered_move(b, host, batch, s, "evict");
                if (e == cudaSuccess)
                        e = scattered_move(b, gpu, batch, s, "promote");
        }
        (void)rt->cudaStreamDestroy(s);
        return e == cudaSuccess ? 0 : -EIO;
}

/* --soak: random orders (promotions, evictions mapped and unmapped,
 * re-arms, probes; runs of 1-32 chunks, distinct within a batch) until
 * `bytes` have been ordered moved, the GPU writing a new pattern over a few
 * random chunks between batches; every chunk the GPU wrote is checked
 * against its last pattern after each batch's orders are done, and every
 * word of the region at the end.  Exit 1 on any lost or wrong word. */
#define SOAK_WRITES_PER_BATCH 4u

static uint64_t soak_rand(uint64_t *x) {
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        return *x;
}

static uint64_t soak_check_chunk(const struct bench *b, uint32_t c, uint64_t seed) {
        uint64_t n = 0;

        if (backend_check((void *)(b->reg.base + (uint64_t)c * CHUNK), CHUNK, seed, &n) < 0)
                return UINT64_MAX;
        return n;
}

/* One batch of random orders over distinct chunks; returns the bytes
 * ordered moved (re-arms and probes move nothing whole). */
static uint64_t soak_batch(struct bench *b, uint64_t *rng, uint64_t *expected) {
        static const uint32_t tiers[] = {KVT_TIER_VRAM, KVT_TIER_HOST, KVT_TIER_HOST_MAPPED, KVT_TIER_VRAM};
        const uint32_t n_chunks = (uint32_t)(b->reg.span_bytes / CHUNK);
        struct kvt_order o[BATCH];
        uint64_t moved = 0;
        unsigned n = 0;

        for (uint32_t c = (uint32_t)(soak_rand(rng) % 8); c < n_chunks && n < BATCH;) {
                uint64_t x = soak_rand(rng);
                uint32_t len = 1 + (uint32_t)(x % 32), kind = (uint32_t)(x >> 8) % 6;

                len = c + len <= n_chunks ? len : n_chunks - c;
                o[n] = (struct kvt_order){.order_id = ++b->next_order,
                                          .region_id = b->reg.id,
                                          .first_chunk = c,
                                          .n_chunks = len,
                                          .tier = kind < 4 ? tiers[kind] : KVT_TIER_HOST,
                                          .host_node = -1,
                                          .flags = kind == 4 ? KVT_ORDER_REARM : kind == 5 ? KVT_ORDER_PROBE : 0};
                moved += kind < 4 ? (uint64_t)len * CHUNK : 0;
                n++;
                c += len + (uint32_t)(soak_rand(rng) % 16);
        }
        pipeline_submit(b->pipe, o, n);
        *expected += n;
        return moved;
}

static int soak(struct bench *b, uint64_t bytes) {
        const uint32_t n_chunks = (uint32_t)(b->reg.span_bytes / CHUNK);
        uint64_t *seed = calloc(n_chunks, sizeof(*seed)), rng = 0x9e3779b97f4a7c15ull, ordered = 0, expected = b->done,
                 bad = 0, batches = 0, t0 = now_ns();
        uint32_t written[SOAK_WRITES_PER_BATCH];

        if (!seed)
                return -ENOMEM;
        for (uint32_t c = 0; c < n_chunks; c++) {
                seed[c] = 0x5000 + c;
                if (backend_fill((void *)(b->reg.base + (uint64_t)c * CHUNK), CHUNK, seed[c]) < 0)
                        return free(seed), -EIO;
        }
        while (ordered < bytes && bad == 0) {
                ordered += soak_batch(b, &rng, &expected);
                /* the GPU writes while the orders move (the engine does not wait for the mover) */
                for (unsigned k = 0; k < SOAK_WRITES_PER_BATCH; k++) {
                        uint32_t c = (uint32_t)(soak_rand(&rng) % n_chunks);

                        written[k] = c;
                        seed[c] = soak_rand(&rng);
                        if (backend_fill((void *)(b->reg.base + (uint64_t)c * CHUNK), CHUNK, seed[c]) < 0)
                                return free(seed), -EIO;
                }
                wait_all(b, expected);
                for (unsigned k = 0; k < SOAK_WRITES_PER_BATCH; k++)
                        bad += soak_check_chunk(b, written[k], seed[written[k]]);
                batches++;
        }
        for (uint32_t c = 0; c < n_chunks && bad == 0; c++)
                bad += soak_check_chunk(b, c, seed[c]);
        printf("soak: %llu GiB ordered moved in %llu batches (%llu orders, %llu failed) over %zu MiB, %.1f s; "
               "words lost or wrong: %llu\n",
               (unsigned long long)(ordered >> 30), (unsigned long long)batches, (unsigned long long)b->done,
               (unsigned long long)b->failed, b->reg.span_bytes >> 20, (double)(now_ns() - t0) / 1e9,
               (unsigned long long)bad);
        free(seed);
        return bad == 0 && b->failed == 0 ? 0 : -EBADMSG;
}

/* Probes every chunk of the region (in VRAM), one order a chunk in one
 * batch, as the daemon's sampler sends them.  Returns 0 or -EIO. */
static int probe_all(struct bench *b) {
        uint32_t n_chunks = (uint32_t)(b->reg.span_bytes / CHUNK);
        uint64_t expected = b->done, failed = b->failed;

        for (uint32_t c = 0; c < n_chunks; c += BATCH) {
                struct kvt_order o[BATCH];
                size_t k = orders_for(b, o, c, MIN(BATCH, n_chunks - c), 1, KVT_TIER_HOST);

                for (size_t i = 0; i < k; i++)
                        o[i].flags = KVT_ORDER_PROBE;
                pipeline_submit(b->pipe, o, k);
                expected += k;
        }
        wait_all(b, expected);
        return b->failed == failed ? 0 : -EIO;
}

/* --round-trips N: N times the GPU writes the region (even chunks
 * SEED_FIRST, odd SEED_SECOND), the mover evicts it and promotes it back
 * in 16 MiB orders; each trip's rates and the advice calls each way.  The
 * pipeline keeps the advice of a chunk's first eviction, so trips after the
 * first should make none.  Then the region is checked on the host and on
 * the GPU, as check() does, every chunk probed (one 4 KiB page each sent
 * to the host, the rest staying in VRAM) and read again.  Exit 1 if a word
 * was lost. */
static int round_trips(struct bench *b, unsigned n) {
        const uint32_t run = 8;
        uint64_t host_bad, gpu_bad;

        for (unsigned i = 0; i < n; i++) {
                uint64_t calls0, ns0, calls1, ns1;
                double down, up;

                if (fill_chunks(b, false, SEED_FIRST) < 0 || fill_chunks(b, true, SEED_SECOND) < 0)
                        return -EIO;
                calls0 = advise_calls, ns0 = advise_ns;
                down = move_all(b, b->evict_tier, run, BATCH);
                calls1 = advise_calls, ns1 = advise_ns;
                up = down < 0 ? -1 : move_all(b, KVT_TIER_VRAM, run, BATCH);
                if (up < 0)
                        return -EIO;
                printf("round trip %u: down %.1f GB/s, %llu advice calls in %.3f ms; up %.1f GB/s, %llu advice "
                       "calls in %.3f ms\n",
                       i, gbps(b->reg.span_bytes, down), (unsigned long long)(calls1 - calls0),
                       (double)(ns1 - ns0) / 1e6, gbps(b->reg.span_bytes, up),
                       (unsigned long long)(advise_calls - calls1), (double)(advise_ns - ns1) / 1e6);
        }
        if (move_all(b, b->evict_tier, run, BATCH) < 0)
                return -EIO;
        host_bad = host_check(b);
        if (move_all(b, KVT_TIER_VRAM, run, BATCH) < 0)
                return -EIO;
        gpu_bad = gpu_check(b);
        if (probe_all(b) < 0)
                return -EIO;
        gpu_bad += gpu_check(b);
        printf("round trips: words lost or wrong: host %llu, gpu %llu\n", (unsigned long long)host_bad,
               (unsigned long long)gpu_bad);
        return host_bad == 0 && gpu_bad == 0 ? 0 : -EBADMSG;
}

static int setup(struct bench *b, uint64_t size) {
        static struct kvt_cudart recorded;
        struct pipeline_config cfg;
        void *p;
        cudaError_t e;
        int r;

        const char *lv = getenv("KVTIER_LOG");
        int level = lv ? kvt_log_level_parse(lv) : KVT_LOG_INFO;
        struct shim_config env;

        env_defaults(&env);
        env_parse(&env); /* the shim's table: KVTIER_DEBUG=host-numa */
        kvt_log_setup("mover-bench", level < 0 ? KVT_LOG_INFO : level);
        if (!real_cudart())
                return -ENOSYS;
        recorded = *real_cudart();
        real_prefetch = recorded.cudaMemPrefetchAsync;
        recorded.cudaMemPrefetchAsync = prefetch_recorded;
        real_advise = recorded.cudaMemAdvise;
        recorded.cudaMemAdvise = advise_recorded;
        b->rt = &recorded;
        e = b->rt->cudaMallocManaged(&p, size + CHUNK, cudaMemAttachGlobal);
        if (e != cudaSuccess) {
                fprintf(stderr, "cudaMallocManaged(%llu): %s\n", (unsigned long long)size,
                        b->rt->cudaGetErrorString(e));
                return -ENOMEM;
        }
        b->reg = (struct shim_region){
                .device = 0,
                .base = ((uintptr_t)p + CHUNK - 1) & ~(uintptr_t)(CHUNK - 1),
                .size_bytes = size,
                .span_bytes = size,
                .alloc_ptr = p,
        };
        r = regions_add(&b->reg);
        if (r < 0)
                return r;
        cfg = (struct pipeline_config){.host_numa = env.host_numa, .sysfs_root = "/sys"};
        printf("mover: %u streams per GPU, host_numa %d, %u evictor threads\n", PIPELINE_STREAMS,
               cfg.host_numa, PIPELINE_EVICTORS);
        return pipeline_new(&cfg, b->rt, on_done, b, &b->pipe);
}

int main(int argc, char **argv) {
        static const struct option opts[] = {
                { "size", required_argument, NULL, 's' },
                { "runs", required_argument, NULL, 'r' },
                { "check-only", no_argument, NULL, 'c' },
                { "explore", no_argument, NULL, 'e' },
                { "scattered", no_argument, NULL, 'P' },
                { "overtake", no_argument, NULL, 'o' },
                { "contend", no_argument, NULL, 'C' },
                { "interfere", no_argument, NULL, 'I' },
                { "samples-first", no_argument, NULL, 'F' },
                { "samples-wait", no_argument, NULL, 'W' },
                { "exit-midway", no_argument, NULL, 'X' },
                { "exit-midway-up", no_argument, NULL, 'U' },
                { "evict-to", required_argument, NULL, 't' },
                { "soak", required_argument, NULL, 'S' },
                { "round-trips", required_argument, NULL, 'R' },
                {},
        };
        const char *runs = "2M,8M,64M,256M,1G";
        uint64_t size = (uint64_t)1 << 30;
        size_t free0 = 0, free1 = 0, total = 0;
        bool check_only = false, do_explore = false, do_scattered = false, do_overtake = false, do_contend = false,
             do_interfere = false, do_samples = false, do_samples_wait = false, do_exit = false;
        uint64_t soak_bytes = 0;
        unsigned trips = 0;
        struct bench b = { .evict_tier = KVT_TIER_HOST_MAPPED };
        struct shim_region taken;
        int c, r;

        while ((c = getopt_long(argc, argv, "", opts, NULL)) >= 0)
                switch (c) {
                case 's':
                        if (parse_bytes(optarg, &size) < 0 || size == 0 || size % CHUNK) {
                                fprintf(stderr, "--size: a multiple of 2 MiB, not %s\n", optarg);
                                return 2;
                        }
                        break;
                case 'r':
                        runs = optarg;
                        break;
                case 'c':
                        check_only = true;
                        break;
                case 'e':
                        do_explore = true;
                        break;
                case 'P':
                        do_scattered = true;
                        break;
                case 'o':
                        do_overtake = true;
                        break;
                case 'C':
                        do_contend = true;
                        break;
                case 'I':
                        do_interfere = true;
                        break;
                case 'F':
                        do_samples = true;
                        break;
                case 'W':
                        do_samples_wait = true;
                        break;
                case 'U':
                        exit_up = true;
                        /* fall through */
                case 'X':
                        do_exit = true;
                        /* before the runtime's teardown is registered: runs after it */
                        atexit(exit_linger);
                        break;
                case 'R': {
                        char *end;
                        unsigned long v = strtoul(optarg, &end, 10);

                        trips = *optarg && !*end && v >= 1 && v <= 1000 ? (unsigned)v : 0;
                        if (!trips) {
                                fprintf(stderr, "--round-trips: 1..1000, not %s\n", optarg);
                                return 2;
                        }
                        break;
                }
                case 'S':
                        if (parse_bytes(optarg, &soak_bytes) < 0 || soak_bytes == 0) {
                                fprintf(stderr, "--soak: bytes to order moved, not %s\n", optarg);
                                return 2;
                        }
                        break;
                case 't': /* the tier names of the protocol */
                        if (strcmp(optarg, kvt_tier_name(KVT_TIER_HOST)) == 0)
                                b.evict_tier = KVT_TIER_HOST;
                        else if (strcmp(optarg, kvt_tier_name(KVT_TIER_HOST_MAPPED)) == 0)
                                b.evict_tier = KVT_TIER_HOST_MAPPED;
                        else {
                                fprintf(stderr, "--evict-to: host or host-mapped, not %s\n", optarg);
                                return 2;
                        }
                        break;
                default:
                        return 2;
                }
        r = setup(&b, size);
        printf("mover-bench: evictions to %s\n", kvt_tier_name(b.evict_tier));
        if (r < 0) {
                fprintf(stderr, "setup: %s\n", strerror(-r));
                return 1;
        }
        (void)b.rt->cudaMemGetInfo(&free0, &total);
        r = soak_bytes     ? soak(&b, soak_bytes)
            : trips        ? round_trips(&b, trips)
            : do_explore   ? explore(&b)
            : do_scattered ? scattered(&b)
            : do_overtake  ? overtake(&b)
            : do_contend   ? contend(&b)
            : do_interfere ? interfere(&b)
            : do_samples   ? samples_first(&b)
            : do_samples_wait ? samples_wait(&b)
            : do_exit      ? exit_midway(&b)
                           : check(&b);
        /* what the pipeline's own CUDA state took (evictors' contexts,
         * streams), apart from the region, which setup() allocated */
        if (b.rt->cudaMemGetInfo(&free1, &total) == cudaSuccess)
                printf("mover-bench: device memory free %zu MiB before moving, %zu MiB after\n", free0 >> 20,
                       free1 >> 20);
        if (r == 0 && !check_only && !soak_bytes && !trips && !do_explore && !do_scattered && !do_overtake &&
            !do_contend && !do_interfere &&
            !do_samples && !do_samples_wait && !do_exit) {
                char *list = strdup(runs), *save = NULL;

                for (char *t = strtok_r(list, ",", &save); t && r == 0; t = strtok_r(NULL, ",", &save)) {
                        uint64_t rb;

                        if (parse_bytes(t, &rb) < 0 || rb < CHUNK || rb > size) {
                                fprintf(stderr, "--runs: %s is not within 2M..--size\n", t);
                                r = -EINVAL;
                        } else
                                r = bench_run_length(&b, rb);
                }
                free(list);
                if (r == 0)
                        r = bench_coalesced(&b);
        }
        pipeline_free(b.pipe);
        if (regions_take((void *)b.reg.base, &taken) == 0)
                (void)b.rt->cudaFree(taken.alloc_ptr);
        if (r < 0)
                fprintf(stderr, "mover-bench: %s\n", strerror(-r));
        return r < 0 ? 1 : 0;
}
