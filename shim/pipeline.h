/* SPDX-License-Identifier: MIT */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "real.h"

/*
 * The mover's engine: carries out the daemon's orders as runs (adjacent
 * orders of one batch coalesced), several in flight at once, and reports
 * each order when its run completes.  It never touches the engine's
 * streams.  A run pins its region (regions_acquire) from issue to
 * completion, so the region cannot be freed under an in-flight move.
 *
 * Promotions go on the pipeline's own non-blocking streams, each run
 * tracked by an event.  Evictions go to the evictor threads
 * (evictors.h), each in a CUDA context of its own, so that neither the
 * engine's calls nor the promotions ordered after them wait for an
 * eviction's copy; a failed promotion, and pipeline_move_host_sync(), go
 * back to the host the same way.
 *
 * Threads: one thread, the owner (the mover), makes every call below, and
 * the orders are reported on it.  The fd from pipeline_fd() becomes
 * readable when a run may have completed (a promotion's host function or
 * an evictor writes to it); the owner then calls pipeline_reap().  The
 * pipeline's own state is the owner's and takes no lock; what it shares
 * with the evictors is under theirs (evictors.h).
 */

/* The mover's shape, fixed (tests/bench/RESULTS.md has the figures):
 *
 * PIPELINE_STREAMS: the pipeline's streams per GPU, which promotions take
 * in turn.  Their number did not limit a move; two, so that a promotion
 * need not queue behind the one before it on its stream.
 *
 * PIPELINE_EVICTORS: the evictor threads, each with a CUDA context of its
 * own per GPU (VRAM outside the budget).  Two evicted faster than one;
 * more cost another context's VRAM each for little or no gain. */
#define PIPELINE_STREAMS  2u
#define PIPELINE_EVICTORS 2u

struct kvt_order;
struct kvt_order_done;
struct pipeline;

struct pipeline_config {
        bool host_numa;         /* host tier on the GPU's NUMA node where CUDA allows (orders
                                 * that name a node go there regardless), the mover's threads
                                 * on that node's CPUs */
        const char *sysfs_root; /* where sysfs is: "/sys" */
};

typedef void (*pipeline_done_fn)(const struct kvt_order_done *done, void *userdata);

/* Starts a pipeline and its evictor threads, reporting each order through
 * done on the owner's thread.  Returns 0 or -errno (ENOMEM, or why a thread
 * or the eventfd could not be had). */
int pipeline_new(const struct pipeline_config *cfg, const struct kvt_cudart *rt, pipeline_done_fn done,
                 void *userdata, struct pipeline **ret);
/* Waits for the runs in flight, reports them, and frees p.  NULL is fine. */
void pipeline_free(struct pipeline *p);

/* An eventfd, readable when a run may have completed. */
int pipeline_fd(const struct pipeline *p);

/* Issues orders[0..n) (a batch that arrived together): adjacent orders of
 * one region, tier and contiguous chunks form one run.  Orders that cannot
 * be issued are reported at once. */
void pipeline_submit(struct pipeline *p, const struct kvt_order *orders, size_t n);

/* Completes the runs that finished and reports their orders.  Returns the
 * number of runs still in flight. */
size_t pipeline_reap(struct pipeline *p);

/* Waits for every run in flight and reports them. */
void pipeline_drain(struct pipeline *p);

/* Runs issued and not yet reported. */
size_t pipeline_in_flight(const struct pipeline *p);

/* Orders and runs issued so far (runs < orders where orders coalesced), and
 * the most runs that were in flight at once. */
void pipeline_counts(const struct pipeline *p, uint64_t *ret_orders, uint64_t *ret_runs,
                     size_t *ret_max_in_flight);

/* Moves [ptr, ptr+len) of device dev's managed memory to host memory,
 * unmapped (tier host), through the evictors, and waits: returns how it
 * ended (used to return a region to host memory before registering it). */
cudaError_t pipeline_move_host_sync(struct pipeline *p, void *ptr, size_t len, int dev);
