/* SPDX-License-Identifier: MIT */
#pragma once

#include <sched.h>
#include <stdbool.h>
#include <stddef.h>

#include "real.h"

/*
 * The evictors: the threads that move the mover's managed memory to the
 * host (shim/pipeline.c hands them every eviction).  A prefetch to the host
 * may block its caller until the pages have moved and holds back every
 * other CUDA call of its own context for its whole copy, so each evictor
 * makes its calls on its own thread, in a CUDA context of its own per GPU
 * (created at its first eviction there, its stack, printf and heap limits
 * lowered to 0), on a stream of its own there: no stream or event crosses
 * contexts.  An eviction is advised once, whole, by the first evictor to
 * reach it, then split into parts that the evictors move side by side (the
 * driver moved pages to the host faster from several contexts than from
 * one, and advice waited for other contexts' prefetches).  An evictor that
 * cannot have a context of its own on a GPU says so once and evicts there
 * in the engine's (primary) context, taking whole evictions.
 *
 * Moves before samples.  Evictions that move pages (and a failed
 * promotion going back) queue apart from samples (EVICT_MAP_REARM,
 * EVICT_MAP_PROBE), which are made in parts of a few chunks: an evictor
 * takes a sample's part when the first move is not ready for it (none
 * queued, or another evictor advising it), so a sample holds back the
 * room the engine waits for by one part at most; a sample that waited
 * half a second goes first all the same, so moves never hold it for good.
 *
 * Threads.  evictors_new() starts the evictor threads; every function below
 * is called by one thread, the owner (the mover).  Each evictor waits until
 * its part has moved before it takes the next.
 *
 * Locking.  One mutex in struct evictors guards the queues, the evictors.c
 * fields of each eviction from evictors_submit() until evictors_poll() has
 * returned its end, the owner's holds, the stopping flag, and per GPU the
 * host NUMA nodes the driver refused and whether the contexts were logged.
 * An evictor's contexts and streams are its own, unlocked.  No CUDA call
 * is made under the mutex.
 */

/* What an eviction does to the GPU's mapping of the pages. */
enum evict_map {
        EVICT_MAP_UNSET, /* removed: the GPU's next touch faults (tier host) */
        EVICT_MAP_SET,   /* set: the GPU reads the pages over the link (tier host-mapped) */
        EVICT_MAP_KEEP,  /* left as it is (a failed promotion going back) */
        EVICT_MAP_REARM, /* pages already in host memory: nothing moves; in each 2 MiB chunk one
                          * 4 KiB page (the chunk's first, every time) loses the mapping the GPU made
                          * (read duplication set then unset: the only advice that did so on the
                          * H200), so that the GPU's next touch of that page faults */
        EVICT_MAP_PROBE, /* chunks in VRAM: each sends one 4 KiB page to the host, unmapped, so
                          * that the GPU's next touch of it faults; the rest stays */
};

/* One eviction: [ptr, ptr + len) of GPU device's managed memory to host
 * NUMA node host_node (-1: plain host memory).  The caller fills the first
 * six fields and keeps the struct until its end has been returned. */
struct eviction {
        void *ptr;
        size_t len;
        int device;
        int host_node;
        enum evict_map map;
        unsigned known; /* REGION_ADVISED_* bits all of its chunks have (regions.h): advice not repeated */
        /* evictors.c's, under its mutex */
        struct eviction *next_queued;
        size_t part_bytes;     /* the evictors take parts of this many bytes (the last may be shorter) */
        size_t next_off;       /* where the next part starts; len once every part is taken */
        unsigned parts_moving; /* parts taken and not yet moved */
        bool advising, advised, done;
        cudaError_t err; /* the advice's or the first failed part's error */
        uint64_t queued_ns, started_ns, advised_ns; /* when it was queued, first taken, advised */
};

struct evictors;

/* Starts n evictor threads (their signals blocked) that write to wake_fd,
 * an eventfd, whenever a submitted eviction ends.  Returns 0 or -errno. */
int evictors_new(const struct kvt_cudart *rt, unsigned n, int wake_fd, struct evictors **ret);

/* Stops the evictors once the queue is empty, waits for them, frees set.
 * NULL is fine. */
void evictors_free(struct evictors *set);

/* Queues e; it is the evictors' until evictors_poll() returns its end. */
void evictors_submit(struct evictors *set, struct eviction *e);

/* cudaErrorNotReady while e moves, else how it ended (cudaSuccess or the
 * first error of its advice or parts). */
cudaError_t evictors_poll(struct evictors *set, struct eviction *e);

/* The REGION_ADVISED_* bits (regions.h) that move e leaves on its chunks
 * once done: the host their preferred location, mapped as its map says
 * (EVICT_MAP_KEEP: as they were, e->known).  Not for samples. */
unsigned evictors_advice(const struct eviction *e);

/* Advises GPU dev accessed-by all of each chunk of [ptr, ptr + len) (which
 * starts on a chunk) but its first page, the sample page: what a mapped
 * eviction leaves, REGION_ADVISED_MAPPED.  Returns the first error. */
cudaError_t evictors_map_chunks(const struct kvt_cudart *rt, void *ptr, size_t len, int dev);

/* Where pages of GPU dev bound for host NUMA node go: that node, unless
 * the driver refused it as a location for dev before; plain host memory
 * for node -1.  The evictors and a capture going back to the host share
 * what was refused (the state object's numa_refused). */
struct cudaMemLocation evictors_host_location(int dev, int node);

/* Enqueues a prefetch of [ptr, len) of GPU dev to loc on s; a host NUMA
 * node the driver refuses, as the enqueue's error says, is given up for
 * plain host memory for dev (said once) and the prefetch goes there. */
cudaError_t evictors_prefetch(const struct kvt_cudart *rt, void *ptr, size_t len, int dev,
                              struct cudaMemLocation loc, cudaStream_t s);

/* Submits e and waits for its end, which it returns. */
cudaError_t evictors_move(struct evictors *set, struct eviction *e);

/* Waits until every submitted eviction has ended. */
void evictors_drain(struct evictors *set);

/* The owner starts (hold) or ends (release) a promotion's calls: no advice
 * or part starts in between, since a promotion beside evictions was
 * measured far slower.  Holds nest. */
void evictors_hold(struct evictors *set);
void evictors_release(struct evictors *set);

/* Binds every evictor thread to the CPUs in cpus.  Returns 0 or the first
 * -errno (the others are bound all the same). */
int evictors_bind(struct evictors *set, const cpu_set_t *cpus);
