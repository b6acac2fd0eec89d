/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "client.h"
#include "deferred.h"
#include "evictors.h"
#include "exit.h"
#include "hooks.h"
#include "cupti.h"
#include "heat.h"
#include "launch.h"
#include "log.h"
#include "mover.h"
#include "protocol.h"
#include "real.h"
#include "regions.h"
#include "shim.h"
#include "ssd.h"
#include "standalone.h"
#include "state.h"
#include "trace.h"
#include "util.h"

/* The owner's calls for the client (state.h). */
static bool has_work(void) {
        uint64_t bytes;
        size_t n;

        regions_count(&n, &bytes);
        return n > 0;
}

static void forget_registration(void) {
        regions_forget_registration();
}

/* Fork handling, registered once, here.  The child of fork() has one
 * thread: a lock another thread held at the fork would stay held, and the
 * table it guarded could be half-updated.
 *   The table the child keeps (its regions and VMM mappings, all the
 * parent's from then on) is guarded by a leaf lock, never held across a
 * CUDA call, a send or another lock: the prepare handler takes it, the
 * parent's handler and the child's drop it (the forking thread holds it on
 * both sides).
 *   Everything else the child starts afresh (the connection and grants,
 * the heat table, the reaper's queue, CUPTI, the trace, the announce
 * order): its locks are initialised anew and its state reset, whatever a
 * thread of the parent was doing under them.  Those locks cannot be taken
 * before fork(): the client's and the announce lock are held across CUDA
 * calls (cudaMemGetInfo in a HELLO, a capture's cudaMallocManaged), and a
 * CUDA library's own prepare handler, run before this one, may hold what
 * such a call waits for (ThreadSanitizer found that cycle with the fake
 * CUDA's handler). */
static void atfork_prepare(void) {
        struct kvt_shim *s = kvt_shim();

        pthread_mutex_lock(&s->regions.lock);
}

static void atfork_parent(void) {
        struct kvt_shim *s = kvt_shim();

        pthread_mutex_unlock(&s->regions.lock);
}

/* The child has no shim thread (mover, evictors, reaper, samplers, trace
 * writer) and must not speak for the parent: each part forgets what was
 * the parent's, and the child connects on its own if it allocates. */
static void atfork_child(void) {
        atfork_parent();
        client_atfork_child();
        regions_atfork_child();
        standalone_atfork_child();
        heat_atfork_child();
        trace_atfork_child();
        pthread_mutex_init(&kvt_shim()->announce_lock, NULL);
        deferred_atfork_child();
        cupti_atfork_child();
        exit_atfork_child();
        ssd_atfork_child();
        launch_set_pace(100); /* the child's connection will be its own */
}

/* Reads the environment once (env.c) and sets up fork handling. */
__attribute__((constructor)) static void shim_load(void) {
        struct kvt_shim *shim = kvt_shim();

        kvt_log_setup("kvtier", KVT_LOG_WARNING);
        env_parse(&shim->cfg);
        if (shim->cfg.print_env)
                env_print(stdout);
        if (shim->cfg.min_size_bytes) {
                shim->rules.min_size = shim->cfg.min_size_bytes;
                shim->rules_from_env |= CLASSIFY_ENV_MIN_SIZE;
        }
        shim->owner = (struct shim_owner_ops){
                .start_mover = mover_start,
                .has_work = has_work,
                .forget_registration = forget_registration,
        };
        pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
        log_debug("Loaded: socket %s, min size %llu, timeout %d ms%s.", shim->cfg.socket_path,
                  (unsigned long long)shim->rules.min_size, shim->cfg.timeout_ms,
                  shim->cfg.disabled ? ", disabled" : "");
}

/* Allocates managed memory for size bytes at a 2 MiB boundary: the daemon
 * places whole chunks.  cudaMallocManaged does not promise that alignment, so
 * a misaligned result is retried one chunk larger and aligned inside. */
static cudaError_t managed_alloc_aligned(const struct kvt_cudart *rt, size_t span, void **ret_alloc,
                                         uintptr_t *ret_base) {
        void *p = NULL;
        cudaError_t e = rt->cudaMallocManaged(&p, span, cudaMemAttachGlobal);

        if (e != cudaSuccess)
                return e;
        if ((uintptr_t)p % KVT_CHUNK_BYTES) {
                rt->cudaFree(p);
                p = NULL;
                e = rt->cudaMallocManaged(&p, span + KVT_CHUNK_BYTES, cudaMemAttachGlobal);
                if (e != cudaSuccess)
                        return e;
        }
        *ret_alloc = p;
        *ret_base = ALIGN_UP((uintptr_t)p, KVT_CHUNK_BYTES);
        return cudaSuccess;
}

/* Where a capture starts: in VRAM while the daemon's grant has room (where
 * capture_prepare() then places it, as plain cudaMalloc would), else
 * in host memory, unmapped, so that the GPU's first touch faults (a demand
 * the daemon sees) and reads it in place until the daemon promotes it. */
static cudaError_t capture_advise(const struct kvt_cudart *rt, const struct shim_region *r) {
        struct cudaMemLocation loc = {cudaMemLocationTypeHost, 0};

        if (r->start_vram)
                loc = (struct cudaMemLocation){cudaMemLocationTypeDevice, r->device};
        return rt->cudaMemAdvise((void *)r->base, r->span_bytes, cudaMemAdviseSetPreferredLocation, loc);
}

/* Moves region r to loc on a stream of the shim's own (the engine's may be
 * capturing a graph), and waits.  A host NUMA node the driver refuses is
 * given up for plain host memory (evictors_prefetch()). */
static cudaError_t prefetch_sync(const struct kvt_cudart *rt, const struct shim_region *r,
                                 struct cudaMemLocation loc) {
        cudaStream_t s;
        cudaError_t e = rt->cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);

        if (e != cudaSuccess)
                return e;
        e = evictors_prefetch(rt, (void *)r->base, r->span_bytes, r->device, loc, s);
        if (e == cudaSuccess)
                e = rt->cudaStreamSynchronize(s);
        (void)rt->cudaStreamDestroy(s);
        return e;
}

/* A capture that starts in VRAM gets at once the advice its first eviction
 * would make: its pages populated in VRAM by a prefetch (where the GPU's
 * first touch would place them), then the preferred location the host and
 * the GPU accessed-by all of each chunk but its sample page.  Its
 * evictions are then prefetches alone: each advice call takes the driver's
 * lock on the whole address space, and made at a first eviction, under
 * pressure, it waits for every move under way.  Returns the
 * REGION_ADVISED_* bits the chunks have: a failure leaves the rest to the
 * first eviction, and the first touch to place what was not populated. */
static unsigned capture_prepare(const struct kvt_cudart *rt, const struct shim_region *r) {
        const struct cudaMemLocation host = {cudaMemLocationTypeHost, 0};
        void *base = (void *)r->base;

        if (prefetch_sync(rt, r, (struct cudaMemLocation){cudaMemLocationTypeDevice, r->device}) != cudaSuccess ||
            rt->cudaMemAdvise(base, r->span_bytes, cudaMemAdviseSetPreferredLocation, host) != cudaSuccess)
                return REGION_ADVISED_UNMAPPED;
        if (evictors_map_chunks(rt, base, r->span_bytes, r->device) != cudaSuccess)
                return REGION_ADVISED_HOST;
        return REGION_ADVISED_HOST | REGION_ADVISED_MAPPED;
}

/* The GPU's home NUMA node, where the mover's evictions put pages and the
 * daemon books them: -1 where it is not known, or where
 * KVTIER_DEBUG=host-numa=0 leaves the node to the kernel. */
static int home_node(const struct kvt_cudart *rt, int dev) {
        int node = -1;

        if (!kvt_shim()->cfg.host_numa || rt->cudaDeviceGetAttribute(&node, cudaDevAttrHostNumaId, dev) != cudaSuccess)
                node = -1;
        return node;
}

/* A start in VRAM whose grant came from a daemon that is gone, where the
 * current one grants none: its pages go to host memory on the GPU's node
 * (any host memory where the driver refuses the node), preferring it and
 * unmapped, where a daemon's books start a region.  Returns 0, or -EIO
 * with the pages where they were (the advice made is noted in r). */
static int capture_return_host(const struct kvt_cudart *rt, struct shim_region *r) {
        const struct cudaMemLocation host = {cudaMemLocationTypeHost, 0};
        const struct cudaMemLocation gpu = {cudaMemLocationTypeDevice, r->device};
        int node = home_node(rt, r->device);
        void *base = (void *)r->base;
        cudaError_t e = cudaSuccess;

        if (!(r->advised & REGION_ADVISED_HOST) &&
            (e = rt->cudaMemAdvise(base, r->span_bytes, cudaMemAdviseSetPreferredLocation, host)) == cudaSuccess)
                r->advised |= REGION_ADVISED_HOST;
        if (e == cudaSuccess)
                e = prefetch_sync(rt, r, evictors_host_location(r->device, node));
        if (e == cudaSuccess)
                e = rt->cudaMemAdvise(base, r->span_bytes, cudaMemAdviseUnsetAccessedBy, gpu);
        if (e != cudaSuccess)
                return log_warning_errno(EIO, "Failed to return captured memory to host memory after kvtierd restarted: %s; "
                                              "it is registered in VRAM, for kvtierd to evict what its grant does not cover.",
                                         rt->cudaGetErrorString(e));
        r->start_vram = false;
        r->advised = REGION_ADVISED_HOST | REGION_ADVISED_UNMAPPED;
        return 0;
}

/* Enters region r in the table and registers it (its ADD sent:
 * client_register()), under the announce lock, which the mover's
 * registration pass takes too: the region is announced once.  What came
 * before ran outside it, so that one thread's prefetch holds back no other
 * capture; but a daemon may have restarted meanwhile, and the mover's pass
 * for the new one may be over.  So a start in VRAM under the grant of a
 * connection that is gone (gen) takes the current one's grant, or returns
 * to host memory, outside the lock, until the connection it names is still
 * the current one under the lock.  One made after the lock is taken fails
 * the ADD (it names gen) and finds the region for its own pass.  Returns
 * 0, or -errno with r freed. */
static int capture_register(const struct kvt_cudart *rt, struct shim_region *r, uint64_t gen) {
        struct kvt_region_add add;

        r->registered = false;
        for (;;) {
                /* gen 0 with a start in VRAM: its return failed; the ADD goes
                 * on any connection, whose daemon books what its own grant
                 * does not cover unplaced and evicts it */
                if (r->start_vram && gen && !client_grant_current(gen) &&
                    !(gen = client_grant_take(r->device, r->span_bytes)))
                        (void)capture_return_host(rt, r);
                shim_announce_lock();
                if (!r->start_vram || !gen || client_grant_current(gen))
                        break;
                shim_announce_unlock(); /* another reconnection meanwhile */
        }
        if (regions_add(r) < 0) {
                shim_announce_unlock();
                if (r->start_vram)
                        client_grant_return(gen, r->device, r->span_bytes);
                rt->cudaFree(r->alloc_ptr);
                return -ENOMEM;
        }
        heat_region_add(r); /* without a slot the region is tiered without heat */
        regions_add_msg(r, &add);
        /* A lost daemon leaves the region captured, unregistered, where it
         * started; the mover registers it once a daemon is back (in host
         * memory, where a new daemon's books start): started here if it
         * ended, as it does with nothing in the table while it waits. */
        if (client_register(-1, r->start_vram ? gen : 0, &add, regions_mark_registered) < 0)
                client_kick_mover();
        shim_announce_unlock();
        return 0;
}

/* Tells the client, once per device, the device's memory and home node,
 * for the DEVICE message of every connection. */
static void note_device(const struct kvt_cudart *rt, int dev) {
        size_t free_bytes = 0, total_bytes = 0;

        if (client_device_noted(dev))
                return;
        if (rt->cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess)
                total_bytes = 0;
        /* the daemon books the host tier on this node */
        client_note_device(dev, total_bytes, home_node(rt, dev));
}

/* Backs an allocation with managed memory, placed as capture_advise() says,
 * and registers it.  Returns 0, or -errno when the allocation should fall
 * back to the real allocator. */
static int capture(const struct kvt_cudart *rt, void **ret_ptr, size_t size, uint32_t api, uint32_t rule) {
        struct shim_region r = { .size_bytes = size, .api = api, .rule = rule };
        uint64_t gen;
        cudaError_t e;
        int ret;

        r.span_bytes = ALIGN_UP(size, KVT_CHUNK_BYTES);
        if (r.span_bytes > KVT_MAX_REGION_BYTES || rt->cudaGetDevice(&r.device) != cudaSuccess ||
            r.device < 0 || r.device >= KVT_MAX_GPUS)
                return -EINVAL;
        note_device(rt, r.device);
        /* CUPTI starts with the first capture, before its cudaMallocManaged
         * (on the H200 no record arrived for managed memory allocated while
         * the setup ran elsewhere): under the announce lock, where the
         * captures of other threads wait until that setup is over. */
        if ((kvt_shim()->cfg.heat_sources & HEAT_SRC_CUPTI) && !cupti_started()) {
                shim_announce_lock();
                cupti_start(); /* once; fails soft, logged */
                shim_announce_unlock();
        }
        e = managed_alloc_aligned(rt, r.span_bytes, &r.alloc_ptr, &r.base);
        if (e != cudaSuccess)
                return log_warning_errno(ENOMEM, "Failed to allocate %zu bytes of managed memory: %s, using plain cudaMalloc.",
                                         size, rt->cudaGetErrorString(e));
        gen = client_grant_take(r.device, r.span_bytes);
        r.start_vram = gen != 0;
        e = capture_advise(rt, &r);
        if (e != cudaSuccess) {
                if (gen)
                        client_grant_return(gen, r.device, r.span_bytes);
                rt->cudaFree(r.alloc_ptr);
                return log_warning_errno(EIO, "Failed to advise managed memory: %s, using plain cudaMalloc.",
                                         rt->cudaGetErrorString(e));
        }
        /* host memory as capture_advise() leaves it: nobody accessed-by it */
        r.advised = r.start_vram ? capture_prepare(rt, &r) : REGION_ADVISED_HOST | REGION_ADVISED_UNMAPPED;
        ret = capture_register(rt, &r, gen);
        if (ret < 0)
                return ret;
        *ret_ptr = (void *)r.base;
        log_debug("Captured %zu bytes at %p on device %d as region %u, in %s.", size, *ret_ptr, r.device, r.id,
                  r.start_vram ? "VRAM" : "host memory");
        return 0;
}

/* What counts against the ceiling: the bytes captured (this allocation's
 * included), less those whose stream-ordered free is queued (an engine's
 * async pool frees and reallocates on one stream, as on a full card).
 * Captures on more than one GPU: no ceiling (the grant is one GPU's VRAM
 * budget; a per-GPU ceiling is not built). */
static uint64_t ceiling_bytes(void) {
        uint64_t captured = classify_captured_bytes(&kvt_shim()->rules), pending = deferred_pending_bytes();

        if (client_devices_noted() > 1)
                return 0;
        return captured > pending ? captured - pending : 0;
}

int shim_capture(uint32_t api, size_t size, void **ret_ptr) {
        const struct kvt_cudart *rt;
        uint32_t rule;
        int r;

        if (kvt_shim()->cfg.disabled || !ret_ptr || hook_busy())
                return -EPERM;
        /* Memory asked of the driver is still managed and moved through the
         * runtime, loaded here if the engine never loaded it (only for sizes
         * that can be captured). */
        rt = size < KVT_CHUNK_BYTES ||
                             !(classify_api_family(api) & classify_rules_apis(&kvt_shim()->rules)) ||
                             classify_api_family(api) == KVT_API_FAMILY_RUNTIME
                     ? real_cudart()
                     : real_cudart_load(kvt_shim()->cfg.cudart_path);
        /* Connected before classifying, so that the daemon's [capture] rules
         * hold from the first allocation that could be captured. */
        if (rt && size >= KVT_CHUNK_BYTES) {
                hook_enter();
                (void)client_ensure();
                hook_leave();
        }
        rule = classify_take(&kvt_shim()->rules, api, size);
        if (rule == KVT_RULE_NONE)
                return -EPERM;
        hook_enter();
        r = !rt ? -ENOSYS : client_ensure();
        /* Once a daemon has welcomed us, an outage is a restart: capture
         * anyway.  The region starts in host memory, uncharged, and the
         * mover registers it with the next daemon; plain cudaMalloc would
         * put it in VRAM outside every budget for good. */
        bool outage = r < 0 && rt && client_was_welcomed();
        if (outage)
                r = 0;
        /* A ceiling like a real GPU's: past what kvtier grants, the
         * allocation fails as plain CUDA's would on a full card (-ENOSPC:
         * the hooks say out of memory), so that the engine's own handling
         * runs, rather than overcommitting the host. */
        if (r >= 0 && client_ceiling_refuses(ceiling_bytes(), size))
                r = -ENOSPC;
        if (r >= 0)
                r = capture(rt, ret_ptr, size, api, rule);
        /* The mover may have ended with nothing left to tier: only it
         * registers this region with the next daemon. */
        if (r >= 0 && outage)
                client_kick_mover();
        hook_leave();
        if (r < 0)
                classify_release(&kvt_shim()->rules, size);
        return r;
}

/* Frees a region taken from the table, then tells the daemon: it hands the
 * region's VRAM to others as soon as it hears, and until cudaFree returns
 * the pages are still resident.  An order arriving in between finds no
 * region. */
cudaError_t shim_release(const struct kvt_cudart *rt, const struct shim_region *r) {
        cudaError_t e;

        heat_region_del(r->id);
        shim_announce_lock();
        hook_enter();
        e = rt->cudaFree(r->alloc_ptr);
        hook_leave();
        classify_release(&kvt_shim()->rules, r->size_bytes);
        if (r->registered) {
                struct kvt_region_del del = { .region_id = r->id };
                client_send(KVT_MSG_REGION_DEL, &del, sizeof(del));
        }
        shim_announce_unlock();
        return e;
}

int shim_free(void *ptr, bool async, cudaStream_t stream, cudaError_t *ret_e) {
        const struct kvt_cudart *rt;
        struct shim_region r;

        if (!ptr || kvt_shim()->cfg.disabled || hook_busy() || !(rt = real_cudart()) ||
            regions_take(ptr, &r) < 0)
                return -ENOENT;
        *ret_e = async ? deferred_free(rt, &r, stream, shim_release) : shim_release(rt, &r);
        return 0;
}

/* With KVTIER_CAPACITY, engines that size their KV pool from free memory
 * (vLLM's gpu_memory_utilization) see that capacity instead of the card's:
 * free is the capacity less what the card has in use and what is captured
 * (conservative: captured chunks resident in VRAM count twice). */
bool shim_capacity_on(void) {
        return kvt_shim()->cfg.capacity_bytes != 0 || kvt_shim()->cfg.capacity_auto;
}

void shim_capacity_view(size_t real_free, size_t real_total, size_t *free, size_t *total) {
        uint64_t used, cap = kvt_shim()->cfg.capacity_bytes;

        *free = real_free;
        *total = real_total;
        if (kvt_shim()->cfg.disabled || hook_busy())
                return;
        /* auto without a daemon: the real figures, as if the knob were off */
        if ((kvt_shim()->cfg.capacity_auto && client_capacity(&cap) < 0) || cap == 0)
                return;
        used = (uint64_t)(real_total - real_free) + classify_captured_bytes(&kvt_shim()->rules);
        *total = (size_t)cap;
        *free = (size_t)(cap > used ? cap - used : 0);
}

/* A runtime hook's answer from shim_capture()'s r: captured (cudaSuccess),
 * past the ceiling (out of memory, as a full card), or false: the real
 * allocator's turn. */
static bool capture_answer(int r, cudaError_t *ret_e) {
        if (r != 0 && r != -ENOSPC)
                return false;
        *ret_e = r == 0 ? cudaSuccess : cudaErrorMemoryAllocation;
        return true;
}

cudaError_t kvt_hook_cudaMalloc(void **devPtr, size_t size) {
        const struct kvt_cudart *rt = real_cudart();
        cudaError_t e;

        if (!rt)
                return cudaErrorInitializationError;
        if (capture_answer(shim_capture(KVT_API_CUDA_MALLOC, size, devPtr), &e))
                return e;
        return PASS(rt->cudaMalloc(devPtr, size));
}
KVT_HOOK_EXPORT(cudaMalloc)

cudaError_t kvt_hook_cudaFree(void *devPtr) {
        const struct kvt_cudart *rt = real_cudart();
        cudaError_t e;

        if (!rt)
                return cudaErrorInitializationError;
        if (shim_free(devPtr, false, NULL, &e) == 0)
                return e;
        return PASS(rt->cudaFree(devPtr));
}
KVT_HOOK_EXPORT(cudaFree)

cudaError_t kvt_hook_cudaMemGetInfo(size_t *free, size_t *total) {
        const struct kvt_cudart *rt = real_cudart();
        size_t real_free = 0, real_total = 0;
        cudaError_t e;

        if (!rt)
                return cudaErrorInitializationError;
        if (!free || !total || !shim_capacity_on())
                return PASS(rt->cudaMemGetInfo(free, total));
        e = PASS(rt->cudaMemGetInfo(&real_free, &real_total));
        if (e != cudaSuccess)
                return e;
        shim_capacity_view(real_free, real_total, free, total);
        return cudaSuccess;
}
KVT_HOOK_EXPORT(cudaMemGetInfo)

/* Stream-ordered allocation, captured: managed memory exists at once, which
 * is stronger than "usable once the stream reaches it". */
cudaError_t kvt_hook_cudaMallocAsync(void **devPtr, size_t size, cudaStream_t hStream) {
        const struct kvt_cudart *rt = real_cudart();
        cudaError_t e;

        if (!rt || !rt->cudaMallocAsync)
                return cudaErrorInitializationError;
        if (capture_answer(shim_capture(KVT_API_CUDA_MALLOC_ASYNC, size, devPtr), &e))
                return e;
        return PASS(rt->cudaMallocAsync(devPtr, size, hStream));
}
KVT_HOOK_EXPORT(cudaMallocAsync)

cudaError_t kvt_hook_cudaMallocFromPoolAsync(void **ptr, size_t size, cudaMemPool_t memPool, cudaStream_t stream) {
        const struct kvt_cudart *rt = real_cudart();
        cudaError_t e;

        if (!rt || !rt->cudaMallocFromPoolAsync)
                return cudaErrorInitializationError;
        if (capture_answer(shim_capture(KVT_API_CUDA_MALLOC_FROM_POOL_ASYNC, size, ptr), &e))
                return e;
        return PASS(rt->cudaMallocFromPoolAsync(ptr, size, memPool, stream));
}
KVT_HOOK_EXPORT(cudaMallocFromPoolAsync)

/* A captured region is freed once the stream reaches this point (deferred.c). */
cudaError_t kvt_hook_cudaFreeAsync(void *devPtr, cudaStream_t hStream) {
        const struct kvt_cudart *rt = real_cudart();
        cudaError_t e;

        if (!rt || !rt->cudaFreeAsync)
                return cudaErrorInitializationError;
        if (shim_free(devPtr, true, hStream, &e) == 0)
                return e;
        return PASS(rt->cudaFreeAsync(devPtr, hStream));
}
KVT_HOOK_EXPORT(cudaFreeAsync)
