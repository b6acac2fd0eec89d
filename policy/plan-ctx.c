/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <stdlib.h>

#include "plan-ctx.h"

/* Takes the next block of a pass of n blocks into *b; false when none is left.
 * Relaxed: what the blocks write is ordered by the workers' run() returning. */
bool plan_take(struct plan_ctx *x, size_t n, size_t *b) {
        *b = atomic_fetch_add_explicit(&x->next, 1, memory_order_relaxed);
        return *b < n;
}

/* Chunks [*lo, *hi) of flat block b. */
void plan_block_range(const struct plan_ctx *x, size_t b, size_t *lo, size_t *hi) {
        *lo = b * x->block;
        *hi = x->n - *lo < x->block ? x->n : *lo + x->block;
}

/* The workers' callback: part t of the pass under way. */
static void plan_part_run(void *arg, unsigned t) {
        struct plan_ctx *x = arg;

        x->pass(&x->part[t]);
}

/* Runs fn on every part: with one part on the calling thread, else on the
 * caller's workers, which return once every part has (their run() orders
 * the parts' writes before what the caller reads next, and what the caller
 * wrote here before the parts). */
void plan_par(struct plan_ctx *x, void (*fn)(struct plan_part *)) {
        const struct policy_workers *w = x->in->workers;

        x->pass = fn;
        atomic_store_explicit(&x->next, 0, memory_order_relaxed);
        if (x->n_threads == 1)
                fn(&x->part[0]);
        else
                w->run(w->pool, plan_part_run, x, x->n_threads);
}

/* Threads for a pass over n chunks asked threads (see
 * policy_params.threads): at most the workers', and POLICY_THREADS_MAX;
 * auto also one per POLICY_THREADS_MIN_CHUNKS chunks. */
unsigned plan_threads(unsigned threads, const struct policy_input *in, size_t n) {
        unsigned lent = in->workers && in->workers->run && in->workers->n > 1 ? in->workers->n : 1;
        unsigned t = threads;

        if (t == 0) {
                t = lent;
                if (t > n / POLICY_THREADS_MIN_CHUNKS)
                        t = (unsigned)(n / POLICY_THREADS_MIN_CHUNKS);
        }
        t = t < lent ? t : lent;
        return t < 1 ? 1 : t > POLICY_THREADS_MAX ? POLICY_THREADS_MAX : t;
}

void plan_ctx_free(struct plan_ctx *x) {
        free(x->start);
        free(x->rank); /* and the other per-chunk arrays */
        free(x->region_of);
        free(x->held);
        free(x->quota_cut);
        free(x->hist);
        free(x->hist_more);
        free(x->blk);
        free(x->rblock);
        siblings_free(&x->sib);
}

/* Blocks: one for one part; else some 16 per part, at most
 * PLAN_BLOCK_MAX chunks each (the finer, the better a thread that waits for
 * a core is made up for).  The rank pass's blocks are runs of whole
 * regions of at least a flat block's chunks.  Returns 0 or -ENOMEM. */
#define PLAN_BLOCK_MAX 16384u
static int plan_parts_init(struct plan_ctx *x) {
        size_t n_regions = x->in->n_regions, acc = 0;

        for (unsigned t = 0; t < x->n_threads; t++)
                x->part[t] = (struct plan_part){
                        .x = x, .t = t, .hist = t == 0 ? x->hist : x->hist_more + (size_t)(t - 1) * 2 * HIST_N};
        if (x->n_threads == 1)
                x->block = x->n;
        else {
                x->block = x->n / (16 * x->n_threads);
                x->block = x->block < 1 ? 1 : x->block > PLAN_BLOCK_MAX ? PLAN_BLOCK_MAX : x->block;
        }
        x->n_blocks = (x->n + x->block - 1) / x->block;
        x->blk = malloc(x->n_blocks * sizeof(*x->blk));
        x->rblock = malloc((n_regions + 1) * sizeof(*x->rblock));
        if (!x->blk || !x->rblock)
                return -ENOMEM;
        x->rblock[0] = 0;
        x->n_rblocks = 0;
        for (size_t r = 0; r < n_regions; r++) {
                acc += x->in->regions[r].n_chunks;
                if (acc >= x->block || r + 1 == n_regions) {
                        x->rblock[++x->n_rblocks] = r + 1;
                        acc = 0;
                }
        }
        return 0;
}

/* The per-chunk arrays are one block: glibc serves a block this large by
 * mmap, and freeing it raises the mmap and trim thresholds above its size,
 * so from the second tick on it comes from the heap and its pages stay.
 * Four blocks of 2-4 MiB would be trimmed and faulted in again every tick
 * (1M chunks: some 2000 page faults, 3-8 ms of system time per tick). */
int plan_ctx_init(struct plan_ctx *x) {
        size_t n = x->n;

        x->start = malloc((x->in->n_regions + 1) * sizeof(*x->start));
        x->rank = malloc(n * (sizeof(*x->rank) + sizeof(*x->bucket) + sizeof(*x->cand) + sizeof(*x->flags)));
        x->hist = calloc(2 * HIST_N, sizeof(*x->hist));
        if (x->n_threads > 1)
                x->hist_more = malloc((size_t)(x->n_threads - 1) * 2 * HIST_N * sizeof(*x->hist_more));
        if (!x->start || !x->rank || !x->hist || (x->n_threads > 1 && !x->hist_more)) {
                plan_ctx_free(x);
                return -ENOMEM;
        }
        x->bucket = x->rank + n;
        x->cand = x->bucket + n;
        x->flags = (uint16_t *)(x->cand + n); /* last: the uint32_t arrays stay aligned */
        x->start[0] = 0;
        for (size_t r = 0; r < x->in->n_regions; r++)
                x->start[r + 1] = x->start[r] + x->in->regions[r].n_chunks;
        if (plan_parts_init(x) < 0) {
                plan_ctx_free(x);
                return -ENOMEM;
        }
        return 0;
}
