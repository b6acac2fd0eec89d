/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "log.h"
#include "pipeline.h"
#include "protocol.h"
#include "regions.h"
#include "util.h"


enum { DIR_UP, DIR_DOWN, _DIR_MAX };

/* Contiguous chunks of one region moving to one tier: one or more orders. */
struct run {
        struct run *next;
        struct kvt_order *orders;
        size_t n_orders;
        uint32_t region_id;
        int device;
        uint32_t tier;
        int host_node; /* host tiers: the node the daemon named, or -1 */
        void *ptr;
        size_t len;
        cudaStream_t stream;
        cudaEvent_t event; /* recorded after the run's last call; NULL: completed at issue, or an
                            * eviction, which the evictors wait for themselves */
        uint64_t t0;
        /* Evictions handed to the evictor threads, under the lock: queued
         * until every part has moved (once advised, evictors take parts of
         * slice bytes, the next at next_off; parts_busy are being moved);
         * start_err is the advice's or the first part's error. */
        bool queued;
        cudaError_t start_err;
        bool advising, advised; /* the advice for the whole run, made before any part moves */
        size_t slice, next_off;
        unsigned parts_busy;
        struct run *next_queued;
};

struct device_state {
        cudaStream_t streams[_DIR_MAX][PIPELINE_STREAMS];
        unsigned next[_DIR_MAX];
        struct cudaMemLocation host; /* where this GPU's host tier lives */
        bool host_known;
        uint64_t numa_refused; /* NUMA nodes the driver refused as a location: plain host for them */
        bool evict_ctx_logged; /* whether the evictors' contexts were had (or no driver calls): said once */
};

/* An evictor thread, and its own context and stream there per GPU (NULL
 * until it first evicts there, or if it could not have one). */
struct evictor {
        struct pipeline *p;
        pthread_t thread;
        CUcontext ctx[KVT_MAX_GPUS];
        bool ctx_tried[KVT_MAX_GPUS];
        cudaStream_t streams[KVT_MAX_GPUS];
};

struct pipeline {
        struct pipeline_config cfg;
        /* Evictor threads.  On the H200 (driver 580) a prefetch to the host
         * returns only once its pages have moved (~2 ms per 16 MiB), so
         * issued from the owner's thread, evictions held back every
         * promotion ordered after them.  The lock guards the queue, the
         * queued runs' state and the host locations (dev[].host*,
         * numa_refused, evict_ctx_logged), which evictors read and update. */
        pthread_mutex_t lock;
        pthread_cond_t cond;
        struct run *evq_head, **evq_tail;
        unsigned evq_busy; /* advice and parts evictors are making */
        /* Promotions whose calls are being made (on the H200 they return
         * once the pages have moved).  Evictions wait while there are any:
         * a promotion beside them was measured far slower.  Counted only
         * during the calls, not until the owner reaps the run, so that
         * batches of promotions cannot starve evictions. */
        unsigned promoting;
        bool stopping;
        struct evictor evictors[PIPELINE_EVICTORS];
        const struct kvt_cudart *rt;
        const struct kvt_cuda_calls *cu; /* the driver's context calls, resolved at the first eviction
                                          * (under the lock); NULL until then or if none */
        pipeline_done_fn done;
        void *userdata;
        int wake_fd;
        struct run *head, **tail; /* in flight, oldest first */
        size_t n_in_flight;
        uint64_t n_orders, n_runs;
        size_t max_in_flight;
        struct device_state dev[KVT_MAX_GPUS];
};

static bool env_bool(const char *name, bool def) {
        const char *v = getenv(name);

        if (!v || !*v)
                return def;
        return strcmp(v, "0") != 0 && strcasecmp(v, "no") != 0 && strcasecmp(v, "false") != 0;
}

bool pipeline_host_numa_from_env(void) {
        return env_bool("KVTIER_MOVER_HOST_NUMA", true);
}

void pipeline_config_from_env(struct pipeline_config *ret) {
        *ret = (struct pipeline_config){ .host_numa = pipeline_host_numa_from_env() };
}

/* Runs on a CUDA thread (or, in the fake, the caller's) once the work queued
 * before it is done: only a write to the eventfd, no CUDA call, no lock. */
static void wake(void *userdata) {
        uint64_t one = 1;
        ssize_t n = write((int)(intptr_t)userdata, &one, sizeof(one));

        (void)n; /* a full counter already wakes the mover */
}

static cudaStream_t stream_get(struct pipeline *p, int dev, int dir, cudaError_t *ret_err) {
        struct device_state *d = &p->dev[dev];
        unsigned k = d->next[dir]++ % PIPELINE_STREAMS;
        cudaError_t e;

        if (d->streams[dir][k])
                return d->streams[dir][k];
        e = p->rt->cudaStreamCreateWithFlags(&d->streams[dir][k], cudaStreamNonBlocking);
        if (e != cudaSuccess) {
                d->streams[dir][k] = NULL;
                *ret_err = e;
                return NULL;
        }
        return d->streams[dir][k];
}

/* The host tier of GPU dev: the host NUMA node closest to it where CUDA
 * reports one, else plain host memory (the kernel's choice). */
static struct cudaMemLocation host_location(struct pipeline *p, int dev) {
        struct device_state *d = &p->dev[dev];
        int id = -1;

        if (d->host_known)
                return d->host;
        d->host = (struct cudaMemLocation){ cudaMemLocationTypeHost, 0 };
        if (p->cfg.host_numa && p->rt->cudaDeviceGetAttribute(&id, cudaDevAttrHostNumaId, dev) == cudaSuccess &&
            id >= 0 && !(id < 64 && (d->numa_refused & (1ull << id))))
                d->host = (struct cudaMemLocation){ cudaMemLocationTypeHostNuma, id };
        d->host_known = true;
        log_debug("Host tier of GPU %d: %s %d.", dev,
                  d->host.type == cudaMemLocationTypeHostNuma ? "NUMA node" : "host", d->host.id);
        return d->host;
}

/* Where a host-tier run of GPU dev goes: the node the daemon named (its
 * host budgets chose it), else the GPU's own host tier. */
static struct cudaMemLocation host_target(struct pipeline *p, int dev, int node) {
        if (node >= 0 && node < 64 && !(p->dev[dev].numa_refused & (1ull << node)))
                return (struct cudaMemLocation){ cudaMemLocationTypeHostNuma, node };
        return host_location(p, dev);
}

/* A NUMA node the driver refuses as a location (no NUMA support, old
 * driver, a node it does not know) is given up for plain host memory, that
 * node only, for this GPU from now on; the GPU's own host tier too if it was
 * that node. */
static bool host_fallback(struct pipeline *p, int dev, struct cudaMemLocation loc, cudaError_t e) {
        struct device_state *d = &p->dev[dev];

        if (e == cudaSuccess || loc.type != cudaMemLocationTypeHostNuma)
                return false;
        log_info("GPU %d: host NUMA node %d refused as a location (CUDA error %d); plain host memory instead.", dev,
                 loc.id, (int)e);
        if (loc.id >= 0 && loc.id < 64)
                d->numa_refused |= 1ull << loc.id;
        if (d->host_known && d->host.type == cudaMemLocationTypeHostNuma && d->host.id == loc.id) {
                d->host = (struct cudaMemLocation){ cudaMemLocationTypeHost, 0 };
                d->host_known = true;
        }
        return true;
}

/* The preferred location of host-tier pages is plain host memory, never the
 * NUMA node their prefetch put them on (they stay there: a preferred
 * location moves nothing by itself).  Measured on the H200, driver 580
 * (tests/bench/RESULTS.md): with a host NUMA node as the preferred
 * location, the GPU's accesses migrate the pages back into VRAM, accessed-by
 * or not; the test engine under a 2 GiB budget then held 6.5-7.9 GiB. */
static cudaError_t advise_host_preferred(struct pipeline *p, void *ptr, size_t len) {
        const struct cudaMemLocation host = { cudaMemLocationTypeHost, 0 };

        return p->rt->cudaMemAdvise(ptr, len, cudaMemAdviseSetPreferredLocation, host);
}

/* Called from the owner and from evictors: the host locations are shared. */
static cudaError_t prefetch_host(struct pipeline *p, void *ptr, size_t len, int dev, int node, cudaStream_t s) {
        struct cudaMemLocation loc;
        cudaError_t e;
        bool again;

        pthread_mutex_lock(&p->lock);
        loc = host_target(p, dev, node);
        pthread_mutex_unlock(&p->lock);
        e = p->rt->cudaMemPrefetchAsync(ptr, len, loc, 0, s);
        pthread_mutex_lock(&p->lock);
        again = host_fallback(p, dev, loc, e);
        loc = host_location(p, dev);
        pthread_mutex_unlock(&p->lock);
        if (again)
                e = p->rt->cudaMemPrefetchAsync(ptr, len, loc, 0, s);
        return e;
}

/* Whether evictions wait for a promotion's calls (see promoting).  Under
 * the lock. */
static bool evict_held(const struct pipeline *p) {
        return p->promoting > 0;
}

/* The mover starts or ends a promotion's calls; evictions held back for
 * them go on once they have returned. */
static void promoting_add(struct pipeline *p, int delta) {
        pthread_mutex_lock(&p->lock);
        p->promoting += delta;
        if (p->promoting == 0)
                pthread_cond_broadcast(&p->cond);
        pthread_mutex_unlock(&p->lock);
}

/* Starts promoting [ptr, len) to VRAM.  The prefetch comes before the
 * preferred-location advice (promote_finish): if it fails, the daemon's
 * books (chunk host-mapped, uncharged) stay true. */
static cudaError_t promote_issue(struct pipeline *p, void *ptr, size_t len, int dev, cudaStream_t s) {
        const struct cudaMemLocation gpu = { cudaMemLocationTypeDevice, dev };

        return p->rt->cudaMemPrefetchAsync(ptr, len, gpu, 0, s);
}

/* Completes a promotion whose prefetch ended with e.  A failure is rolled
 * back as far as CUDA lets us: with preferred location GPU a later touch
 * would fault every page in, over budget. */
static cudaError_t promote_finish(struct pipeline *p, const struct run *r, cudaError_t e) {
        const struct cudaMemLocation gpu = { cudaMemLocationTypeDevice, r->device };

        if (e == cudaSuccess)
                e = p->rt->cudaMemAdvise(r->ptr, r->len, cudaMemAdviseSetPreferredLocation, gpu);
        if (e == cudaSuccess)
                return e;
        (void)advise_host_preferred(p, r->ptr, r->len);
        if (prefetch_host(p, r->ptr, r->len, r->device, -1, r->stream) == cudaSuccess)
                (void)p->rt->cudaStreamSynchronize(r->stream);
        return e;
}

/* Advises [ptr, len) for demotion to the host, mapped for the GPU or not;
 * prefetch_host() then moves it.  Advice comes first: once the preferred
 * location is the host, GPU accesses during and after the move map the
 * pages instead of faulting them back.  A failed advice leaves the pages
 * in VRAM, which the daemon keeps charged; a run whose part failed may
 * have the others' pages on the host, charged all the same (the safe side
 * of the books). */
static cudaError_t demote_advise(struct pipeline *p, void *ptr, size_t len, int dev, bool mapped) {
        const struct cudaMemLocation gpu = { cudaMemLocationTypeDevice, dev };
        cudaError_t e;

        e = advise_host_preferred(p, ptr, len);
        if (e == cudaSuccess)
                e = p->rt->cudaMemAdvise(ptr, len, mapped ? cudaMemAdviseSetAccessedBy : cudaMemAdviseUnsetAccessedBy,
                                         gpu);
        return e;
}

static cudaError_t demote_issue(struct pipeline *p, void *ptr, size_t len, int dev, int node, bool mapped,
                                cudaStream_t s) {
        cudaError_t e = demote_advise(p, ptr, len, dev, mapped);

        return e == cudaSuccess ? prefetch_host(p, ptr, len, dev, node, s) : e;
}

static cudaError_t run_start(struct pipeline *p, struct run *r) {
        switch (r->tier) {
        case KVT_TIER_VRAM:
                return promote_issue(p, r->ptr, r->len, r->device, r->stream);
        case KVT_TIER_HOST_MAPPED:
        case KVT_TIER_HOST:
                return demote_issue(p, r->ptr, r->len, r->device, r->host_node, r->tier == KVT_TIER_HOST_MAPPED,
                                    r->stream);
        default:
                return cudaErrorInvalidValue;
        }
}

static void report(struct pipeline *p, const struct run *r, int status, cudaError_t e) {
        uint64_t elapsed = now_ns() - r->t0;

        if (status < 0)
                log_debug("Run of %zu orders (region %u, chunks %u+%zu to %s) failed: %s (CUDA error %d).",
                          r->n_orders, r->region_id, r->orders[0].first_chunk, r->len >> KVT_CHUNK_SHIFT,
                          kvt_tier_name(r->tier), strerror(-status), (int)e);
        for (size_t i = 0; i < r->n_orders; i++) {
                struct kvt_order_done done = {
                        .order_id = r->orders[i].order_id,
                        .status = status,
                        .cuda_err = e,
                        .elapsed_ns = elapsed,
                };
                p->done(&done, p->userdata);
        }
}

static void run_free(struct pipeline *p, struct run *r) {
        if (r->event)
                (void)p->rt->cudaEventDestroy(r->event);
        free(r->orders);
        free(r);
}

/* A run cut short by the process's exit (the runtime unloading under it)
 * is a cancellation, as if the region had been freed first: its memory is
 * going away with the process.  Any other error is a failure. */
static int run_status(cudaError_t e) {
        if (e == cudaSuccess)
                return 0;
        return e == cudaErrorCudartUnloading ? -ENOENT : -EIO;
}

/* Completes a started run whose work ended with e: finishes a promotion,
 * unpins the region, reports. */
static void run_finish(struct pipeline *p, struct run *r, cudaError_t e) {
        if (r->tier == KVT_TIER_VRAM) {
                cudaError_t d = p->rt->cudaSetDevice(r->device);
                e = promote_finish(p, r, d == cudaSuccess ? e : d);
        }
        regions_release(r->region_id);
        report(p, r, run_status(e), e);
        run_free(p, r);
}

/* An event recorded on s after the work queued so far, with a host function
 * after it that wakes the owner; NULL if CUDA gives none (then the caller
 * waits for the stream itself: slower, still correct). */
static cudaEvent_t run_track(struct pipeline *p, cudaStream_t s) {
        cudaEvent_t ev;

        if (p->rt->cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) != cudaSuccess)
                return NULL;
        if (p->rt->cudaEventRecord(ev, s) != cudaSuccess ||
            p->rt->cudaLaunchHostFunc(s, wake, (void *)(intptr_t)p->wake_fd) != cudaSuccess) {
                (void)p->rt->cudaEventDestroy(ev);
                return NULL;
        }
        return ev;
}

static void in_flight_add(struct pipeline *p, struct run *r) {
        r->next = NULL;
        *p->tail = r;
        p->tail = &r->next;
        if (++p->n_in_flight > p->max_in_flight)
                p->max_in_flight = p->n_in_flight;
}

/* Evictions in the evictors' own contexts are split into parts, one per
 * evictor, of at least this many bytes.  Measured on the H200 (driver 580,
 * tests/bench/RESULTS.md, session 14, evict-par): 4 GiB went to the host
 * at 11.2 GB/s from one context, 15.1 from two, 17.6 from four, 19.8 from
 * eight; threads in one context gained little (11.3 from two, 12.7 from
 * four).  Parts of 2 MiB were slower than of 64 MiB (14.8 against 17.6
 * GB/s from four contexts). */
#define EVICT_SLICE_MIN (16u << 20)

/* Hands an eviction to the evictors; it is in flight from now on, and
 * pipeline_reap() finishes it once every part has moved. */
static void evict_enqueue(struct pipeline *p, struct run *r) {
        r->queued = true;
        r->next_queued = NULL;
        r->next_off = 0;
        r->slice = MAX((r->len / PIPELINE_EVICTORS + KVT_CHUNK_BYTES - 1) & ~(size_t)(KVT_CHUNK_BYTES - 1),
                       (size_t)EVICT_SLICE_MIN);
        in_flight_add(p, r);
        pthread_mutex_lock(&p->lock);
        *p->evq_tail = r;
        p->evq_tail = &r->next_queued;
        pthread_cond_broadcast(&p->cond); /* evictors share the condition with other waits */
        pthread_mutex_unlock(&p->lock);
}

/* Says whether an evictor has a context of its own on GPU dev: the first
 * success and a driver without the calls once per GPU, every refusal (at
 * most one per evictor and GPU). */
static void evict_context_log(struct pipeline *p, int dev, CUresult r) {
        bool first;

        if (p->cu && r != CUDA_SUCCESS) {
                log_info("GPU %d: no CUDA context of its own for an evictor (CUDA error %d); its evictions share "
                         "the engine's.", dev, (int)r);
                return;
        }
        pthread_mutex_lock(&p->lock);
        first = !p->dev[dev].evict_ctx_logged;
        p->dev[dev].evict_ctx_logged = true;
        pthread_mutex_unlock(&p->lock);
        if (!first)
                return;
        if (!p->cu)
                log_info("GPU %d: the CUDA driver has no cuCtxCreate_v4 (older than CUDA 12.5); evictions share "
                         "the engine's context.", dev);
        else
                log_info("GPU %d: evictions run in CUDA contexts of their own, one per evictor thread.", dev);
}

/* A context of its own is made for evictions only: no kernel runs there, so
 * the reservations that size kernels' stacks, printf buffer and heap go
 * down to nothing.  Measured on the H200 (session 14, evict-par): a
 * context took 524 MiB of device memory as created, 264 MiB once lowered.
 * The driver keeps a context working if it refuses: logged only. */
static void evict_context_lower(const struct kvt_cuda_calls *cu, int dev) {
        static const CUlimit limits[] = { CU_LIMIT_STACK_SIZE, CU_LIMIT_PRINTF_FIFO_SIZE, CU_LIMIT_MALLOC_HEAP_SIZE };

        for (size_t i = 0; i < ELEMENTSOF(limits); i++) {
                CUresult r = cu->cuCtxSetLimit(limits[i], 0);

                if (r != CUDA_SUCCESS)
                        log_debug("GPU %d: the evictors' context keeps limit %d (CUDA error %d).", dev,
                                  (int)limits[i], (int)r);
        }
}

/* The evictor's own context on GPU dev, created at its first eviction there
 * (with blocking waits: an evictor sleeps in cudaStreamSynchronize), current
 * on the calling thread once created; NULL where there is none: no driver
 * entry points, or CUDA refused one (then the engine's context). */
static CUcontext evict_context(struct evictor *ev, int dev) {
        struct pipeline *p = ev->p;
        CUresult r = CUDA_ERROR_NOT_SUPPORTED;
        CUdevice cudev;

        if (ev->ctx_tried[dev])
                return ev->ctx[dev];
        ev->ctx_tried[dev] = true;
        pthread_mutex_lock(&p->lock);
        if (!p->cu) /* by now the runtime has loaded libcuda */
                p->cu = real_cuda_calls();
        pthread_mutex_unlock(&p->lock);
        if (p->cu && (r = p->cu->cuDeviceGet(&cudev, dev)) == CUDA_SUCCESS &&
            (r = p->cu->cuCtxCreate_v4(&ev->ctx[dev], NULL, CU_CTX_SCHED_BLOCKING_SYNC, cudev)) == CUDA_SUCCESS)
                evict_context_lower(p->cu, dev);
        else
                ev->ctx[dev] = NULL;
        evict_context_log(p, dev, r);
        return ev->ctx[dev];
}

/* Makes GPU dev current for an eviction: the evictor's own context and its
 * stream there (*ret_own), or, without one, the engine's (primary) context,
 * with *ret_own NULL. */
static cudaError_t evictor_enter(struct evictor *ev, int dev, cudaStream_t *ret_own) {
        struct pipeline *p = ev->p;
        CUcontext ctx = evict_context(ev, dev);

        *ret_own = NULL;
        if (!ctx || p->cu->cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
                return p->rt->cudaSetDevice(dev);
        if (!ev->streams[dev] &&
            p->rt->cudaStreamCreateWithFlags(&ev->streams[dev], cudaStreamNonBlocking) != cudaSuccess) {
                ev->streams[dev] = NULL;
                return p->rt->cudaSetDevice(dev);
        }
        *ret_own = ev->streams[dev];
        return cudaSuccess;
}

/* Advises a queued eviction, the whole run at once, on an evictor's
 * thread.  Advice changes the driver's policy for the range, and on the
 * H200 (driver 580, session 14, evict-par) each advice call waited for the
 * prefetches under way in other contexts: advised part by part, four
 * contexts evicted at 10.3-10.9 GB/s, slower than one (14.7); unadvised
 * parts moved at 14.8-17.5. */
static cudaError_t evictor_advise(struct evictor *ev, struct run *r) {
        cudaStream_t own;
        cudaError_t e = evictor_enter(ev, r->device, &own);

        return e == cudaSuccess ? demote_advise(ev->p, r->ptr, r->len, r->device, r->tier == KVT_TIER_HOST_MAPPED) : e;
}

/* Moves part [off, off + len) of an advised eviction on an evictor's
 * thread and waits until it has moved: in the evictor's own context on its
 * stream there, otherwise on the run's stream (a prefetch to the host
 * returns only once its pages have moved anyway, on the H200).  Returns
 * the calls' or the stream's error. */
static cudaError_t evictor_part(struct evictor *ev, struct run *r, size_t off, size_t len) {
        struct pipeline *p = ev->p;
        cudaStream_t own, s;
        cudaError_t e;

        e = evictor_enter(ev, r->device, &own);
        if (e != cudaSuccess)
                return e;
        s = own ? own : r->stream;
        e = prefetch_host(p, (char *)r->ptr + off, len, r->device, r->host_node, s);
        if (e != cudaSuccess)
                return e;
        return p->rt->cudaStreamSynchronize(s);
}

/* An evictor leaving: its streams and contexts go. */
static void evictor_exit(struct evictor *ev) {
        struct pipeline *p = ev->p;

        for (int d = 0; d < KVT_MAX_GPUS; d++) {
                if (!ev->ctx[d])
                        continue;
                if (ev->streams[d] && p->cu->cuCtxSetCurrent(ev->ctx[d]) == CUDA_SUCCESS)
                        (void)p->rt->cudaStreamDestroy(ev->streams[d]);
                (void)p->cu->cuCtxDestroy_v2(ev->ctx[d]);
                ev->streams[d] = NULL;
                ev->ctx[d] = NULL;
        }
}

/* The bytes of queued run r an evictor takes next: a part, or all that is
 * left if it has tried for a context of its own on the run's GPU and has
 * none (its calls then go to the run's stream in the engine's context,
 * where a second evictor would only wait for the first).  Under the lock. */
static size_t evictor_share(const struct evictor *ev, const struct run *r) {
        size_t left = r->len - r->next_off;

        if (ev->ctx_tried[r->device] && !ev->ctx[r->device])
                return left;
        return MIN(r->slice, left);
}

/* Takes the queue's first run off it once every part is handed out.
 * Under the lock. */
static void evict_dequeue_head(struct pipeline *p) {
        struct run *r = p->evq_head;

        p->evq_head = r->next_queued;
        if (!p->evq_head)
                p->evq_tail = &p->evq_head;
}

/* Ends an evictor's share of run r (advice or part) with e: the run is
 * done once every part is handed out and none is moving, and then left to
 * the owner, woken to finish and report it.  Under the lock, which it
 * drops to wake the owner. */
static void evict_share_done(struct pipeline *p, struct run *r, cudaError_t e) {
        if (r->start_err == cudaSuccess)
                r->start_err = e;
        p->evq_busy--;
        pthread_cond_broadcast(&p->cond); /* other evictors, and pipeline_drain(), may wait for this */
        if (r->next_off < r->len || r->parts_busy > 0)
                return;
        r->queued = false;
        pthread_mutex_unlock(&p->lock);
        wake((void *)(intptr_t)p->wake_fd);
        pthread_mutex_lock(&p->lock);
}

/* An evictor: advises queued evictions and moves their parts (the calls
 * may block for the whole copy).  The first evictor to reach a run
 * advises all of it while the others wait; then each takes a part.  Under
 * the lock, which it drops while it makes CUDA calls. */
static void evictor_main_locked(struct evictor *self) {
        struct pipeline *p = self->p;

        for (;;) {
                size_t off, len;
                struct run *r;
                cudaError_t e;

                while ((!p->evq_head || p->evq_head->advising || evict_held(p)) && !p->stopping)
                        pthread_cond_wait(&p->cond, &p->lock);
                if (!p->evq_head || p->evq_head->advising) /* stopping: the queue is drained by now */
                        return;
                r = p->evq_head;
                p->evq_busy++;
                if (!r->advised) {
                        r->advising = true;
                        pthread_mutex_unlock(&p->lock);
                        e = evictor_advise(self, r);
                        pthread_mutex_lock(&p->lock);
                        r->advising = false;
                        r->advised = true;
                        if (e != cudaSuccess) { /* nothing of it moves */
                                r->next_off = r->len;
                                evict_dequeue_head(p);
                        }
                        evict_share_done(p, r, e);
                        continue;
                }
                off = r->next_off;
                len = evictor_share(self, r);
                r->next_off += len;
                r->parts_busy++;
                if (r->next_off == r->len)
                        evict_dequeue_head(p);
                pthread_mutex_unlock(&p->lock);

                e = evictor_part(self, r, off, len);

                pthread_mutex_lock(&p->lock);
                r->parts_busy--;
                evict_share_done(p, r, e);
        }
}

static void *evictor_main(void *arg) {
        struct evictor *self = arg;

        pthread_mutex_lock(&self->p->lock);
        evictor_main_locked(self);
        pthread_mutex_unlock(&self->p->lock);
        evictor_exit(self);
        return NULL;
}

/* Pins the run's region and starts it, or hands an eviction to the
 * evictors; a run that completes at once (an error, or no event to track
 * it) is finished here. */
static void run_issue(struct pipeline *p, struct run *r) {
        struct shim_region reg;
        uint64_t first = r->orders[0].first_chunk, n = 0;
        cudaError_t e = cudaSuccess;

        for (size_t i = 0; i < r->n_orders; i++)
                n += r->orders[i].n_chunks;
        if (r->tier != KVT_TIER_VRAM && r->tier != KVT_TIER_HOST_MAPPED && r->tier != KVT_TIER_HOST) {
                report(p, r, -EINVAL, cudaErrorInvalidValue);
                run_free(p, r);
                return;
        }
        if (regions_acquire(r->region_id, &reg) < 0) {
                report(p, r, -ENOENT, cudaSuccess); /* freed since the daemon planned */
                run_free(p, r);
                return;
        }
        if (n == 0 || first + n > reg.span_bytes >> KVT_CHUNK_SHIFT || reg.device < 0 || reg.device >= KVT_MAX_GPUS) {
                regions_release(r->region_id);
                report(p, r, -ERANGE, cudaSuccess);
                run_free(p, r);
                return;
        }
        r->device = reg.device;
        r->ptr = (void *)(reg.base + ((uintptr_t)first << KVT_CHUNK_SHIFT));
        r->len = (size_t)n << KVT_CHUNK_SHIFT;
        if ((e = p->rt->cudaSetDevice(reg.device)) != cudaSuccess ||
            !(r->stream = stream_get(p, reg.device, r->tier == KVT_TIER_VRAM ? DIR_UP : DIR_DOWN, &e))) {
                regions_release(r->region_id);
                report(p, r, run_status(e), e);
                run_free(p, r);
                return;
        }
        if (r->tier != KVT_TIER_VRAM) {
                evict_enqueue(p, r);
                return;
        }
        if (r->tier == KVT_TIER_VRAM)
                promoting_add(p, 1); /* its calls block until the pages have moved */
        e = run_start(p, r);
        if (r->tier == KVT_TIER_VRAM)
                promoting_add(p, -1);
        if (e != cudaSuccess) {
                run_finish(p, r, e);
                return;
        }
        /* Completion is tracked by the event; the host function only wakes
         * the mover. */
        r->event = run_track(p, r->stream);
        if (!r->event) {
                run_finish(p, r, p->rt->cudaStreamSynchronize(r->stream));
                return;
        }
        in_flight_add(p, r);
}

static bool continues(const struct kvt_order *prev, const struct kvt_order *o) {
        return o->region_id == prev->region_id && o->tier == prev->tier && o->host_node == prev->host_node &&
               o->first_chunk == (uint64_t)prev->first_chunk + prev->n_chunks;
}

/* Issues the runs of orders[0..n) that go to VRAM (up) or elsewhere (!up). */
static void submit_pass(struct pipeline *p, const struct kvt_order *orders, size_t n, bool up) {
        for (size_t i = 0, j; i < n; i = j) {
                struct run *r;

                for (j = i + 1; j < n && continues(&orders[j - 1], &orders[j]); j++)
                        ;
                if ((orders[i].tier == KVT_TIER_VRAM) != up)
                        continue;
                r = calloc(1, sizeof(*r));
                if (r)
                        r->orders = malloc((j - i) * sizeof(*orders));
                if (!r || !r->orders) {
                        /* report each order failed, without a run to carry it */
                        for (size_t k = i; k < j; k++) {
                                struct kvt_order_done done = {
                                        .order_id = orders[k].order_id,
                                        .status = -ENOMEM,
                                };
                                p->done(&done, p->userdata);
                        }
                        free(r);
                        continue;
                }
                memcpy(r->orders, &orders[i], (j - i) * sizeof(*orders));
                p->n_orders += j - i;
                p->n_runs++;
                r->n_orders = j - i;
                r->region_id = orders[i].region_id;
                r->tier = orders[i].tier;
                r->host_node = orders[i].tier == KVT_TIER_VRAM ? -1 : orders[i].host_node;
                r->t0 = now_ns();
                run_issue(p, r);
        }
}

/* Promotions of the batch first, then the rest: the engine waits for
 * promotions, while evictions only make room, and a prefetch to the GPU
 * blocks its caller (the mover) for the whole copy, so evictions issued
 * first would run under it and slow it.  The orders of a batch name
 * distinct chunks, so their order does not matter to the books. */
void pipeline_submit(struct pipeline *p, const struct kvt_order *orders, size_t n) {
        submit_pass(p, orders, n, true);
        submit_pass(p, orders, n, false);
}

size_t pipeline_reap(struct pipeline *p) {
        uint64_t v;
        ssize_t n = read(p->wake_fd, &v, sizeof(v));

        (void)n; /* EAGAIN: nothing woke us; a timeout polls anyway */
        for (struct run **i = &p->head; *i;) {
                struct run *r = *i;
                cudaEvent_t ev;
                cudaError_t e;
                bool queued;

                pthread_mutex_lock(&p->lock);
                queued = r->queued;
                ev = r->event;
                e = r->start_err; /* an eviction an evictor could not start, or waited for */
                pthread_mutex_unlock(&p->lock);
                if (!queued && ev)
                        e = p->rt->cudaEventQuery(ev);
                if (queued || e == cudaErrorNotReady) {
                        i = &r->next;
                        continue;
                }
                *i = r->next;
                if (!*i)
                        p->tail = i;
                p->n_in_flight--;
                run_finish(p, r, e);
        }
        return p->n_in_flight;
}

/* Synchronizes every stream, even with no run in flight: a run's event can
 * complete before the host function queued after it has run, and that
 * function writes to wake_fd. */
void pipeline_drain(struct pipeline *p) {
        pthread_mutex_lock(&p->lock);
        while (p->evq_head || p->evq_busy)
                pthread_cond_wait(&p->cond, &p->lock);
        pthread_mutex_unlock(&p->lock);
        for (int d = 0; d < KVT_MAX_GPUS; d++)
                for (int dir = 0; dir < _DIR_MAX; dir++)
                        for (unsigned k = 0; k < PIPELINE_STREAMS; k++)
                                if (p->dev[d].streams[dir][k] && p->rt->cudaSetDevice(d) == cudaSuccess)
                                        (void)p->rt->cudaStreamSynchronize(p->dev[d].streams[dir][k]);
        /* after the synchronize every event is complete, or its stream is
         * broken: finish what is left either way, so no region stays pinned */
        if (pipeline_reap(p) > 0)
                while (p->head) {
                        struct run *r = p->head;

                        p->head = r->next;
                        p->n_in_flight--;
                        run_finish(p, r, cudaErrorUnknown);
                }
        p->tail = &p->head;
}

size_t pipeline_in_flight(const struct pipeline *p) {
        return p->n_in_flight;
}

void pipeline_counts(const struct pipeline *p, uint64_t *ret_orders, uint64_t *ret_runs, size_t *ret_max_in_flight) {
        *ret_orders = p->n_orders;
        *ret_runs = p->n_runs;
        *ret_max_in_flight = p->max_in_flight;
}

int pipeline_fd(const struct pipeline *p) {
        return p->wake_fd;
}

cudaError_t pipeline_move_sync(struct pipeline *p, void *ptr, size_t len, int dev, uint32_t tier) {
        struct run r = { .device = dev, .tier = tier, .host_node = -1, .ptr = ptr, .len = len };
        cudaError_t e;

        if (dev < 0 || dev >= KVT_MAX_GPUS)
                return cudaErrorInvalidDevice;
        if ((e = p->rt->cudaSetDevice(dev)) != cudaSuccess ||
            !(r.stream = stream_get(p, dev, tier == KVT_TIER_VRAM ? DIR_UP : DIR_DOWN, &e)))
                return e;
        e = run_start(p, &r);
        if (e == cudaSuccess)
                e = p->rt->cudaStreamSynchronize(r.stream);
        if (tier == KVT_TIER_VRAM)
                e = promote_finish(p, &r, e);
        return e;
}

/* Stops and joins the first n evictors (the queue is empty by now). */
static void evictors_stop(struct pipeline *p, unsigned n) {
        pthread_mutex_lock(&p->lock);
        p->stopping = true;
        pthread_cond_broadcast(&p->cond);
        pthread_mutex_unlock(&p->lock);
        for (unsigned k = 0; k < n; k++)
                pthread_join(p->evictors[k].thread, NULL);
}

int pipeline_new(const struct pipeline_config *cfg, const struct kvt_cudart *rt, pipeline_done_fn done,
                 void *userdata, struct pipeline **ret) {
        struct pipeline *p = calloc(1, sizeof(*p));

        if (!p)
                return -ENOMEM;
        p->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (p->wake_fd < 0) {
                int r = -errno;
                free(p);
                return r;
        }
        p->cfg = *cfg;
        p->rt = rt;
        p->done = done;
        p->userdata = userdata;
        p->tail = &p->head;
        p->evq_tail = &p->evq_head;
        pthread_mutex_init(&p->lock, NULL);
        pthread_cond_init(&p->cond, NULL);
        /* Evictors inherit the caller's signal mask: the mover's takes none. */
        for (unsigned k = 0; k < PIPELINE_EVICTORS; k++) {
                struct evictor *ev = &p->evictors[k];
                int r;

                ev->p = p;
                r = pthread_create(&ev->thread, NULL, evictor_main, ev);
                if (r != 0) {
                        evictors_stop(p, k);
                        pthread_mutex_destroy(&p->lock);
                        pthread_cond_destroy(&p->cond);
                        close(p->wake_fd);
                        free(p);
                        return -r;
                }
                pthread_setname_np(ev->thread, "kvtier-evict");
        }
        *ret = p;
        return 0;
}

void pipeline_free(struct pipeline *p) {
        if (!p)
                return;
        pipeline_drain(p);
        evictors_stop(p, PIPELINE_EVICTORS);
        pthread_mutex_destroy(&p->lock);
        pthread_cond_destroy(&p->cond);
        for (int d = 0; d < KVT_MAX_GPUS; d++)
                for (int dir = 0; dir < _DIR_MAX; dir++)
                        for (unsigned k = 0; k < PIPELINE_STREAMS; k++)
                                if (p->dev[d].streams[dir][k])
                                        (void)p->rt->cudaStreamDestroy(p->dev[d].streams[dir][k]);
        close(p->wake_fd);
        free(p);
}
