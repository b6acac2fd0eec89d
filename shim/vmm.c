/* SPDX-License-Identifier: MIT */
/*
 * The CUDA VMM API (cuMemCreate + cuMemMap: PyTorch's expandable segments)
 * maps physical allocations that cannot become managed memory, so kvtier
 * cannot tier them.  It tracks the mapped ranges and registers them with
 * the daemon as untiered, so that kvtierctl shows where the memory went,
 * and warns once with what the user can do.
 *
 * Tracked ranges are kept apart from the captured regions (regions.c): the
 * mover must never try to move them.  They are registered when mapped, on
 * the connection of that moment, and by the mover with each new daemon.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>

#include "client.h"
#include "hooks.h"
#include "log.h"
#include "protocol.h"
#include "real.h"
#include "state.h"
#include "util.h"
#include "vmm.h"

/* Beyond this many live mappings, new ones are no longer tracked. */
#define VMM_MAX_TRACKED 16384

struct vmm_range {
        uintptr_t ptr;
        size_t size;
        uint32_t id;
        int device; /* current when mapped */
        bool registered;
};

#define REAL(name) ({ const struct kvt_cuda *_d = real_cuda(); _d ? _d->name : NULL; })

static void warn_once(void) {
        struct shim_vmm *v = &kvt_shim()->vmm;

        if (atomic_flag_test_and_set(&v->warned))
                return;
        log_warning("Memory mapped through the CUDA VMM API (cuMemCreate/cuMemMap) cannot be tiered by kvtier; "
                    "it is shown as untiered. For PyTorch, set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:False "
                    "so that its allocator uses cudaMalloc.");
}

static int current_device(void) {
        const struct kvt_cudart *rt = real_cudart();
        int dev = 0;

        if (!rt || PASS(rt->cudaGetDevice(&dev)) != cudaSuccess || dev < 0 || dev >= KVT_MAX_GPUS)
                return 0;
        return dev;
}

static struct kvt_region_add region_add_of(const struct vmm_range *r) {
        uintptr_t base = r->ptr & ~(uintptr_t)(KVT_CHUNK_BYTES - 1);

        return (struct kvt_region_add){
                .region_id = r->id,
                .device = r->device,
                .base = base,
                .size_bytes = MIN(ALIGN_UP(r->ptr + r->size, KVT_CHUNK_BYTES) - base, KVT_MAX_REGION_BYTES),
                .api = KVT_API_CU_MEM_MAP,
                .tier = KVT_TIER_NONE,
                .rule = KVT_RULE_VMM,
                .flags = KVT_REGION_UNTIERED,
        };
}

/* Called by client_register() with the client's lock held, once the ADD
 * of range id is sent. */
static void mark_registered(uint32_t id) {
        struct shim_vmm *v = &kvt_shim()->vmm;

        pthread_mutex_lock(&v->lock);
        for (size_t i = 0; i < v->n_ranges; i++)
                if (v->ranges[i].id == id)
                        v->ranges[i].registered = true;
        pthread_mutex_unlock(&v->lock);
}

/* Returns whether the range is registered now. */
static bool announce(const struct vmm_range *r) {
        struct kvt_region_add add = region_add_of(r);

        return client_ensure() >= 0 && client_register(-1, &add, mark_registered) >= 0;
}

static void track(uintptr_t ptr, size_t size) {
        struct shim_vmm *v = &kvt_shim()->vmm;
        struct vmm_range r = { .ptr = ptr, .size = size, .device = current_device() };

        pthread_mutex_lock(&v->lock);
        if (v->n_ranges == v->cap_ranges) {
                size_t cap = v->cap_ranges ? v->cap_ranges * 2 : 16;
                struct vmm_range *a = cap <= VMM_MAX_TRACKED ? realloc(v->ranges, cap * sizeof(*a)) : NULL;
                if (!a) {
                        pthread_mutex_unlock(&v->lock);
                        return;
                }
                v->ranges = a;
                v->cap_ranges = cap;
        }
        atomic_store(&v->ever_tracked, true);
        r.id = v->next_id++;
        if (v->next_id == 0)
                v->next_id = VMM_ID_BASE;
        v->ranges[v->n_ranges++] = r;
        pthread_mutex_unlock(&v->lock);
        /* Sent outside the lock: the send may wait up to the timeout.
         * Unsent (no daemon), it waits for the mover, which may have ended
         * with nothing left to register. */
        if (!announce(&r))
                client_kick_mover();
}

/* Forgets every tracked range starting in [ptr, ptr + size). */
static void untrack(uintptr_t ptr, size_t size) {
        struct shim_vmm *v = &kvt_shim()->vmm;

        for (;;) {
                struct kvt_region_del del = { 0 };
                bool found = false, registered = false;

                pthread_mutex_lock(&v->lock);
                for (size_t i = 0; i < v->n_ranges; i++)
                        if (v->ranges[i].ptr >= ptr && v->ranges[i].ptr - ptr < size) {
                                del.region_id = v->ranges[i].id;
                                registered = v->ranges[i].registered;
                                v->ranges[i] = v->ranges[--v->n_ranges];
                                found = true;
                                break;
                        }
                pthread_mutex_unlock(&v->lock);
                if (!found)
                        return;
                if (registered)
                        client_send(KVT_MSG_REGION_DEL, &del, sizeof(del));
        }
}

size_t vmm_count(void) {
        struct shim_vmm *v = &kvt_shim()->vmm;
        size_t n;

        pthread_mutex_lock(&v->lock);
        n = v->n_ranges;
        pthread_mutex_unlock(&v->lock);
        return n;
}

void vmm_forget_registration(void) {
        struct shim_vmm *v = &kvt_shim()->vmm;

        pthread_mutex_lock(&v->lock);
        for (size_t i = 0; i < v->n_ranges; i++)
                v->ranges[i].registered = false;
        pthread_mutex_unlock(&v->lock);
}

/* Runs on the mover thread.  The announce lock keeps cuMemMap/cuMemUnmap
 * (which track and untrack under it) out while it works, so that no range
 * is announced after its unmap; the table's lock is never held across a
 * send (a failed send drops the connection, which takes it). */
int vmm_register(int fd) {
        struct shim_vmm *v = &kvt_shim()->vmm;
        int n = 0, r = 0;

        shim_announce_lock();
        for (size_t i = 0;; i++) {
                struct kvt_region_add add;
                bool found = false;

                pthread_mutex_lock(&v->lock);
                for (; i < v->n_ranges; i++)
                        if (!v->ranges[i].registered) {
                                add = region_add_of(&v->ranges[i]);
                                found = true;
                                break;
                        }
                pthread_mutex_unlock(&v->lock);
                if (!found)
                        break;
                r = client_register(fd, &add, mark_registered);
                if (r < 0)
                        break;
                n++;
        }
        shim_announce_unlock();
        return r < 0 ? r : n;
}

/* Whether a new mapping is tracked.  Connects first, so that the daemon's
 * [capture] apis hold from the first mapping on. */
static bool tracking_map(void) {
        if (kvt_shim()->cfg.disabled || hook_busy() ||
            !(classify_rules_apis(&kvt_shim()->rules) & KVT_API_FAMILY_VMM))
                return false;
        hook_enter();
        (void)client_ensure();
        hook_leave();
        return classify_rules_apis(&kvt_shim()->rules) & KVT_API_FAMILY_VMM;
}

/* Whether an unmap looks for tracked ranges: also when a later daemon's
 * [capture] apis left vmm out, for the ranges tracked before. */
static bool tracking_unmap(void) {
        struct shim_vmm *v = &kvt_shim()->vmm;

        return !kvt_shim()->cfg.disabled && !hook_busy() &&
               ((classify_rules_apis(&kvt_shim()->rules) & KVT_API_FAMILY_VMM) ||
                atomic_load(&v->ever_tracked));
}

CUresult kvt_hook_cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                              unsigned long long flags) {
        CUresult (*real)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long) =
                REAL(cuMemCreate);

        return real ? PASS(real(handle, size, prop, flags)) : CUDA_ERROR_NOT_INITIALIZED;
}
KVT_HOOK_EXPORT(cuMemCreate)

CUresult kvt_hook_cuMemRelease(CUmemGenericAllocationHandle handle) {
        CUresult (*real)(CUmemGenericAllocationHandle) = REAL(cuMemRelease);

        return real ? PASS(real(handle)) : CUDA_ERROR_NOT_INITIALIZED;
}
KVT_HOOK_EXPORT(cuMemRelease)

CUresult kvt_hook_cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                           unsigned long long flags) {
        CUresult (*real)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long) =
                REAL(cuMemMap);
        bool track_it = tracking_map();
        CUresult e;

        if (!real)
                return CUDA_ERROR_NOT_INITIALIZED;
        if (!track_it)
                return PASS(real(ptr, size, offset, handle, flags));
        shim_announce_lock();
        e = PASS(real(ptr, size, offset, handle, flags));
        if (e == CUDA_SUCCESS && size > 0) {
                warn_once();
                hook_enter();
                track((uintptr_t)ptr, size);
                hook_leave();
        }
        shim_announce_unlock();
        return e;
}
KVT_HOOK_EXPORT(cuMemMap)

CUresult kvt_hook_cuMemUnmap(CUdeviceptr ptr, size_t size) {
        CUresult (*real)(CUdeviceptr, size_t) = REAL(cuMemUnmap);
        bool track_it = tracking_unmap();
        CUresult e;

        if (!real)
                return CUDA_ERROR_NOT_INITIALIZED;
        if (!track_it)
                return PASS(real(ptr, size));
        shim_announce_lock();
        e = PASS(real(ptr, size));
        if (e == CUDA_SUCCESS)
                untrack((uintptr_t)ptr, size);
        shim_announce_unlock();
        return e;
}
KVT_HOOK_EXPORT(cuMemUnmap)
