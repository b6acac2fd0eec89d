/* SPDX-License-Identifier: MIT */
/*
 * Runs (pipeline.h): a batch's adjacent orders coalesced, issued, tracked
 * to their end and reported.  Promotions go on the pipeline's own streams;
 * evictions to the evictors (evictors.h).
 *
 * Threads and locks.  Every function here runs on the owner's thread (the
 * mover) but wake(), which CUDA runs on a thread of its own after a
 * promotion's event: it only writes to the eventfd.  The pipeline's state
 * (runs in flight, counters, streams, what is known of each GPU) is the
 * owner's alone and takes no lock.  A host-bound run's struct eviction is
 * the evictors' from evictors_submit() until evictors_poll() returns its
 * end, under their lock.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "evictors.h"
#include "exit.h"
#include "log.h"
#include "numa-cpus.h"
#include "pipeline.h"
#include "protocol.h"
#include "regions.h"
#include "util.h"

/* Contiguous chunks of one region moving to one tier: one or more orders.
 * Its one lifecycle: made by submit_pass(), issued by run_issue() (pinned,
 * then started), in flight until run_poll() gives its end, and ended by
 * run_end(), which reports every order and frees it.  A run that cannot be
 * pinned or started goes from run_issue() straight to run_end(). */
struct run {
        struct run *next; /* in flight, oldest first */
        struct kvt_order *orders;
        size_t n_orders;
        uint32_t region_id;
        uint32_t tier;
        int host_node; /* host tiers: the node the daemon named, or -1 */
        uint64_t t0_ns;
        bool pinned; /* the region is acquired; device, ptr and len are its bytes */
        int device;
        void *ptr;
        size_t len;
        cudaStream_t stream;      /* promotions: the pipeline's stream it moves on */
        cudaEvent_t event;        /* promotions: recorded after the prefetch; NULL: waited for at start */
        struct eviction eviction; /* host tiers: what the evictors move */
};

/* What the pipeline knows of one GPU. */
struct pipeline_gpu {
        cudaStream_t streams[PIPELINE_STREAMS];
        unsigned next_stream;
        bool node_known;
        int node; /* the GPU's host NUMA node, its host tier; -1: plain host memory */
};

struct pipeline {
        struct pipeline_config cfg;
        const struct kvt_cudart *rt;
        struct evictors *evictors;
        pipeline_done_fn done;
        void *userdata;
        int wake_fd;
        struct run *head, **tail; /* in flight, oldest first */
        size_t n_in_flight;
        uint64_t n_orders, n_runs;
        size_t max_in_flight;
        bool cpus_bound; /* whether the threads were bound to a node's CPUs (or tried) */
        struct pipeline_gpu gpu[KVT_MAX_GPUS];
};

/* CUDA's host function after a promotion's event, on a CUDA thread (or, in
 * the fake, the caller's): only a write to the eventfd, no CUDA call, no
 * lock. */
static void wake(void *userdata) {
        uint64_t one = 1;
        ssize_t n = write((int)(intptr_t)userdata, &one, sizeof(one));

        (void)n; /* a full counter already wakes the owner */
}

/* Binds the owner's thread and the evictors to the CPUs of NUMA node node,
 * where the host pages of their moves are allocated.  Once per pipeline:
 * the first GPU with a known node decides (a process's GPUs share one on
 * most machines).  Fails soft, said at debug level. */
static void bind_cpus(struct pipeline *p, int node) {
        cpu_set_t cpus;
        int r;

        if (p->cpus_bound)
                return;
        p->cpus_bound = true;
        r = numa_cpus_of_node(p->cfg.sysfs_root, node, &cpus);
        if (r == 0)
                r = -pthread_setaffinity_np(pthread_self(), sizeof(cpus), &cpus);
        if (r == 0)
                r = evictors_bind(p->evictors, &cpus);
        if (r < 0)
                log_debug("The mover's threads stay unbound, not on NUMA node %d's CPUs: %s.", node,
                          strerror(-r));
        else
                log_debug("The mover's threads run on NUMA node %d's CPUs.", node);
}

/* GPU dev's host NUMA node, where its host tier lives: the one CUDA reports
 * (with cfg.host_numa), else -1 for plain host memory (the kernel's choice).
 * Orders that name a node go there instead.  The first node found binds
 * the mover's threads to its CPUs. */
static int gpu_node(struct pipeline *p, int dev) {
        struct pipeline_gpu *g = &p->gpu[dev];
        int id = -1;

        if (g->node_known)
                return g->node;
        if (!p->cfg.host_numa ||
            p->rt->cudaDeviceGetAttribute(&id, cudaDevAttrHostNumaId, dev) != cudaSuccess)
                id = -1;
        g->node = id >= 0 ? id : -1;
        g->node_known = true;
        if (g->node >= 0) {
                log_debug("Host tier of GPU %d: NUMA node %d.", dev, g->node);
                bind_cpus(p, g->node);
        } else
                log_debug("Host tier of GPU %d: host memory.", dev);
        return g->node;
}

/* The next of GPU dev's streams, created on first use (dev is current). */
static cudaStream_t stream_get(struct pipeline *p, int dev, cudaError_t *ret_err) {
        struct pipeline_gpu *g = &p->gpu[dev];
        cudaStream_t *s = &g->streams[g->next_stream++ % PIPELINE_STREAMS];

        if (!*s && (*ret_err = p->rt->cudaStreamCreateWithFlags(s, cudaStreamNonBlocking)) != cudaSuccess)
                *s = NULL;
        return *s;
}

/* An event recorded on s after the work queued so far, with a host function
 * after it that wakes the owner; NULL if CUDA gives none. */
static cudaEvent_t event_after(struct pipeline *p, cudaStream_t s) {
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

/* Starts promoting run r: its prefetch to the GPU on one of the pipeline's
 * streams, then an event to track it (without one, the stream is waited
 * for here: slower, still correct).  No advice: if the prefetch fails,
 * promote_finish() sends back what moved, and the daemon's books (chunk on
 * the host, uncharged) stay true.  The evictors hold back while the call
 * is made: on the H200 it returns only once the pages have moved, and
 * evictions beside it slowed it down. */
static cudaError_t promote_start(struct pipeline *p, struct run *r) {
        const struct cudaMemLocation gpu = {cudaMemLocationTypeDevice, r->device};
        cudaError_t e;

        if ((e = p->rt->cudaSetDevice(r->device)) != cudaSuccess ||
            !(r->stream = stream_get(p, r->device, &e)))
                return e;
        evictors_hold(p->evictors);
        e = p->rt->cudaMemPrefetchAsync(r->ptr, r->len, gpu, 0, r->stream);
        evictors_release(p->evictors);
        if (e != cudaSuccess)
                return e;
        r->event = event_after(p, r->stream);
        return r->event ? cudaSuccess : p->rt->cudaStreamSynchronize(r->stream);
}

/* The advice eviction e's chunks have (regions.h), which its evictor need
 * not repeat. */
static void advice_known(struct eviction *e) {
        e->known = regions_advised(e->ptr, e->len);
}

/* Books the advice a move (not a sample) left on eviction e's chunks once
 * it ended with err: the host their preferred location, mapped as its map
 * says; after a failure, unknown. */
static void advice_note(const struct eviction *e, cudaError_t err) {
        if (e->map != EVICT_MAP_REARM && e->map != EVICT_MAP_PROBE)
                regions_set_advised(e->ptr, e->len, err == cudaSuccess ? evictors_advice(e) : 0);
}

/* Submits e, a move, and waits for its end, which it books and returns. */
static cudaError_t move_sync(struct pipeline *p, struct eviction *e) {
        cudaError_t err;

        advice_known(e);
        err = evictors_move(p->evictors, e);
        advice_note(e, err);
        return err;
}

/* Ends a promotion whose prefetch ended with e.  The pages keep the advice
 * of their last eviction (preferred location the host, accessed-by as it
 * was): a prefetch moves them whatever their preferred location, and the
 * GPU's accesses find them in VRAM; advice here would take the driver's
 * lock once a promotion for nothing.  A failure is rolled back as far as
 * CUDA lets us: the evictors take back what moved, so that the books
 * (chunks on the host) stay true. */
static cudaError_t promote_finish(struct pipeline *p, const struct run *r, cudaError_t e) {
        if (e != cudaSuccess) {
                struct eviction back = {.ptr = r->ptr,
                                        .len = r->len,
                                        .device = r->device,
                                        .host_node = gpu_node(p, r->device),
                                        .map = EVICT_MAP_KEEP};

                (void)move_sync(p, &back);
        }
        return e;
}

/* Starts run r: a promotion on the pipeline's streams, or an eviction
 * handed to the evictors (to the node the daemon named, else the GPU's); a
 * re-arm (KVT_ORDER_REARM) or a probe (KVT_ORDER_PROBE) goes to them too,
 * their threads and contexts making its advice, so that it never holds the
 * engine's context or the promotions back. */
static cudaError_t run_start(struct pipeline *p, struct run *r) {
        int home = gpu_node(p, r->device);
        bool rearm = r->orders[0].flags & KVT_ORDER_REARM, probe = r->orders[0].flags & KVT_ORDER_PROBE;

        if (r->tier == KVT_TIER_VRAM)
                return promote_start(p, r);
        r->eviction = (struct eviction){
                .ptr = r->ptr,
                .len = r->len,
                .device = r->device,
                .host_node = r->host_node >= 0 ? r->host_node : home,
                .map = rearm   ? EVICT_MAP_REARM
                       : probe ? EVICT_MAP_PROBE
                       : r->tier == KVT_TIER_HOST_MAPPED ? EVICT_MAP_SET
                                                         : EVICT_MAP_UNSET,
        };
        advice_known(&r->eviction);
        evictors_submit(p->evictors, &r->eviction);
        return cudaSuccess;
}

/* cudaErrorNotReady while started run r moves, else how its move ended. */
static cudaError_t run_poll(struct pipeline *p, struct run *r) {
        if (r->tier != KVT_TIER_VRAM)
                return evictors_poll(p->evictors, &r->eviction);
        return r->event ? p->rt->cudaEventQuery(r->event) : cudaSuccess;
}

/* Checks run r against its region, pins the region and finds r's bytes.
 * Returns 0, -EINVAL (no such tier), -ENOENT (the region was freed since
 * the daemon planned, or chunks of the run were spilled to the SSD tier:
 * their memory is not kvtier's to move, a cancellation as well) or -ERANGE
 * (chunks outside it). */
static int run_pin(struct run *r) {
        struct shim_region reg;
        uint64_t first = r->orders[0].first_chunk, n = 0;

        for (size_t i = 0; i < r->n_orders; i++)
                n += r->orders[i].n_chunks;
        if (r->tier != KVT_TIER_VRAM && r->tier != KVT_TIER_HOST_MAPPED && r->tier != KVT_TIER_HOST)
                return -EINVAL;
        if (n > UINT32_MAX || regions_acquire(r->region_id, (uint32_t)first, (uint32_t)n, &reg) < 0)
                return -ENOENT;
        if (n == 0 || first + n > reg.span_bytes >> KVT_CHUNK_SHIFT || reg.device < 0 ||
            reg.device >= KVT_MAX_GPUS) {
                regions_release(r->region_id);
                return -ERANGE;
        }
        r->pinned = true;
        r->device = reg.device;
        r->ptr = (void *)(reg.base + ((uintptr_t)first << KVT_CHUNK_SHIFT));
        r->len = (size_t)n << KVT_CHUNK_SHIFT;
        return 0;
}

/* A run cut short by the process's exit is a cancellation, as if the
 * region had been freed first: its memory is going away with the process.
 * The runtime says so (unloading) for a call made after its teardown; a
 * call the teardown overtook fails with whatever the driver says (on the
 * H200, cudaErrorUnknown), so any error once the exit began counts so.
 * Any other error is a failure. */
static int run_status(cudaError_t e) {
        if (e == cudaSuccess)
                return 0;
        return e == cudaErrorCudartUnloading || exit_begun() ? -ENOENT : -EIO;
}

/* Reports each order of run r: its elapsed time is the run's, shared out
 * among a sample's orders (re-arms, probes: the daemon adds them up as the
 * sampler's cost), whole for a move's (how long its chunks waited). */
static void report(struct pipeline *p, const struct run *r, int status, cudaError_t e) {
        uint64_t end = now_ns(), elapsed_ns = end - r->t0_ns;

        if (r->orders[0].flags & (KVT_ORDER_REARM | KVT_ORDER_PROBE))
                elapsed_ns /= r->n_orders;

        if (r->pinned && r->tier != KVT_TIER_VRAM && r->eviction.started_ns) {
                const struct eviction *ev = &r->eviction;
                uint64_t adv = ev->advised_ns ? ev->advised_ns : ev->started_ns;

                log_debug("Run of %zu MiB to %s (map %d): %.3f ms queued, %.3f ms advised, %.3f ms moved.",
                          r->len >> 20, kvt_tier_name(r->tier), (int)ev->map,
                          (double)(ev->started_ns - ev->queued_ns) / 1e6,
                          (double)(adv - ev->started_ns) / 1e6, (double)(end - adv) / 1e6);
        } else if (r->pinned && r->tier == KVT_TIER_VRAM)
                log_debug("Run of %zu MiB to vram: %.3f ms.", r->len >> 20, (double)elapsed_ns / 1e6);
        if (status < 0)
                log_debug("Run of %zu orders (region %u, chunks %u+%zu to %s) failed: %s (CUDA error %d).",
                          r->n_orders, r->region_id, r->orders[0].first_chunk, r->len >> KVT_CHUNK_SHIFT,
                          kvt_tier_name(r->tier), strerror(-status), (int)e);
        for (size_t i = 0; i < r->n_orders; i++) {
                struct kvt_order_done done = {
                        .order_id = r->orders[i].order_id,
                        .status = status,
                        .cuda_err = e,
                        .elapsed_ns = elapsed_ns,
                };
                p->done(&done, p->userdata);
        }
}

/* Ends run r, the one way out: a pinned run's move ended with e (a
 * promotion is finished, the region unpinned), an unpinned one never
 * started (status).  Reports every order and frees r.  Without cuda (the
 * process exits, exit.h) it makes no CUDA call: the promotion is left
 * unfinished and its event to the runtime's teardown. */
static void run_end(struct pipeline *p, struct run *r, int status, cudaError_t e, bool cuda) {
        if (r->pinned) {
                if (r->tier == KVT_TIER_VRAM && cuda)
                        e = promote_finish(p, r, e);
                else if (cuda)
                        advice_note(&r->eviction, e);
                regions_release(r->region_id);
                status = run_status(e);
        }
        report(p, r, status, e);
        if (r->event && cuda)
                (void)p->rt->cudaEventDestroy(r->event);
        free(r->orders);
        free(r);
}

static void in_flight_add(struct pipeline *p, struct run *r) {
        r->next = NULL;
        *p->tail = r;
        p->tail = &r->next;
        if (++p->n_in_flight > p->max_in_flight)
                p->max_in_flight = p->n_in_flight;
}

/* Pins run r's region and starts it, in flight from then on; once the
 * process exits, cancels it (exit.h). */
static void run_issue(struct pipeline *p, struct run *r) {
        int status;
        cudaError_t e;

        if (!exit_gate_enter()) {
                run_end(p, r, -ENOENT, cudaSuccess, false);
                return;
        }
        status = run_pin(r);
        e = status == 0 ? run_start(p, r) : cudaSuccess;
        if (status == 0 && e == cudaSuccess)
                in_flight_add(p, r);
        else
                run_end(p, r, status, e, true);
        exit_gate_leave();
}

/* A run of orders[0..n), copied; NULL without memory. */
static struct run *run_new(const struct kvt_order *orders, size_t n) {
        struct run *r = calloc(1, sizeof(*r));

        if (!r)
                return NULL;
        r->orders = malloc(n * sizeof(*orders));
        if (!r->orders) {
                free(r);
                return NULL;
        }
        memcpy(r->orders, orders, n * sizeof(*orders));
        r->n_orders = n;
        r->region_id = orders[0].region_id;
        r->tier = orders[0].tier;
        r->host_node = orders[0].tier == KVT_TIER_VRAM ? -1 : orders[0].host_node;
        r->t0_ns = now_ns();
        return r;
}

static bool continues(const struct kvt_order *prev, const struct kvt_order *o) {
        return o->region_id == prev->region_id && o->tier == prev->tier && o->host_node == prev->host_node &&
               o->flags == prev->flags && o->first_chunk == (uint64_t)prev->first_chunk + prev->n_chunks;
}

/* Issues the runs of orders[0..n) that go to VRAM (up) or elsewhere (!up). */
static void submit_pass(struct pipeline *p, const struct kvt_order *orders, size_t n, bool up) {
        for (size_t i = 0, j; i < n; i = j) {
                struct run *r;

                for (j = i + 1; j < n && continues(&orders[j - 1], &orders[j]); j++)
                        ;
                if ((orders[i].tier == KVT_TIER_VRAM) != up)
                        continue;
                r = run_new(&orders[i], j - i);
                if (!r) {
                        /* each order failed, without a run to carry it */
                        for (size_t k = i; k < j; k++) {
                                struct kvt_order_done done = {.order_id = orders[k].order_id,
                                                              .status = -ENOMEM};

                                p->done(&done, p->userdata);
                        }
                        continue;
                }
                p->n_orders += j - i;
                p->n_runs++;
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

/* Once the process exits (exit.h) no CUDA call is made: a promotion in
 * flight ends cut short, and an eviction once the evictors let go of it
 * (they cancel what they had not begun). */
size_t pipeline_reap(struct pipeline *p) {
        uint64_t v;
        ssize_t n = read(p->wake_fd, &v, sizeof(v));
        bool cuda = exit_gate_enter();

        (void)n; /* EAGAIN: nothing woke us; a timeout polls anyway */
        for (struct run **i = &p->head; *i;) {
                struct run *r = *i;
                cudaError_t e = cuda || r->tier != KVT_TIER_VRAM ? run_poll(p, r) : cudaErrorCudartUnloading;

                if (e == cudaErrorNotReady) {
                        i = &r->next;
                        continue;
                }
                *i = r->next;
                if (!*i)
                        p->tail = i;
                p->n_in_flight--;
                run_end(p, r, 0, e, cuda);
        }
        if (cuda)
                exit_gate_leave();
        return p->n_in_flight;
}

/* Waits for the evictors, then synchronizes every stream, even with no run
 * in flight: a run's event can complete before the host function queued
 * after it has run, and that function writes to wake_fd. */
void pipeline_drain(struct pipeline *p) {
        evictors_drain(p->evictors);
        if (!exit_gate_enter()) {
                (void)pipeline_reap(p); /* the process exits: ends every run with no CUDA call */
                return;
        }
        for (int d = 0; d < KVT_MAX_GPUS; d++)
                for (unsigned k = 0; k < PIPELINE_STREAMS; k++)
                        if (p->gpu[d].streams[k] && p->rt->cudaSetDevice(d) == cudaSuccess)
                                (void)p->rt->cudaStreamSynchronize(p->gpu[d].streams[k]);
        /* after the synchronize every event is complete, or its stream is
         * broken: end what is left either way, so no region stays pinned */
        if (pipeline_reap(p) > 0)
                while (p->head) {
                        struct run *r = p->head;

                        p->head = r->next;
                        p->n_in_flight--;
                        run_end(p, r, 0, cudaErrorUnknown, true);
                }
        p->tail = &p->head;
        exit_gate_leave();
}

size_t pipeline_in_flight(const struct pipeline *p) {
        return p->n_in_flight;
}

void pipeline_counts(const struct pipeline *p, uint64_t *ret_orders, uint64_t *ret_runs,
                     size_t *ret_max_in_flight) {
        *ret_orders = p->n_orders;
        *ret_runs = p->n_runs;
        *ret_max_in_flight = p->max_in_flight;
}

int pipeline_fd(const struct pipeline *p) {
        return p->wake_fd;
}

cudaError_t pipeline_move_host_sync(struct pipeline *p, void *ptr, size_t len, int dev) {
        struct eviction e = {.ptr = ptr, .len = len, .device = dev, .map = EVICT_MAP_UNSET};

        if (dev < 0 || dev >= KVT_MAX_GPUS)
                return cudaErrorInvalidDevice;
        e.host_node = gpu_node(p, dev);
        return move_sync(p, &e);
}

int pipeline_new(const struct pipeline_config *cfg, const struct kvt_cudart *rt, pipeline_done_fn done,
                 void *userdata, struct pipeline **ret) {
        struct pipeline *p = calloc(1, sizeof(*p));
        int r;

        if (!p)
                return -ENOMEM;
        p->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (p->wake_fd < 0) {
                r = -errno;
                free(p);
                return r;
        }
        r = evictors_new(rt, PIPELINE_EVICTORS, p->wake_fd, &p->evictors);
        if (r < 0) {
                close(p->wake_fd);
                free(p);
                return r;
        }
        exit_hook();
        p->cfg = *cfg;
        p->rt = rt;
        p->done = done;
        p->userdata = userdata;
        p->tail = &p->head;
        *ret = p;
        return 0;
}

void pipeline_free(struct pipeline *p) {
        if (!p)
                return;
        pipeline_drain(p);
        evictors_free(p->evictors);
        for (int d = 0; d < KVT_MAX_GPUS; d++)
                for (unsigned k = 0; k < PIPELINE_STREAMS; k++)
                        if (p->gpu[d].streams[k])
                                (void)p->rt->cudaStreamDestroy(p->gpu[d].streams[k]);
        /* once the process exits, a promotion cut short may still run its
         * host function, which writes to wake_fd: left open then */
        if (!exit_begun())
                close(p->wake_fd);
        free(p);
}
