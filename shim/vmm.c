/* SPDX-License-Identifier: MIT */
/*
 * The CUDA VMM API (cuMemCreate + cuMemMap: PyTorch's expandable segments)
 * maps physical allocations that cannot become managed memory, so kvtier
 * cannot tier them.  It tracks the mapped ranges and registers them with
 * the daemon as untiered, so that kvtierctl shows where the memory went,
 * and warns once with what the user can do.
 *
 * Tracked mappings are regions of the one table (regions.c), marked
 * untiered: the table's lookups, the mover and the SSD tier never see them.
 * They are registered when mapped, on the connection of that moment, and by
 * the mover with each new daemon, as the captured regions are.
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
#include "regions.h"
#include "state.h"
#include "util.h"

/* Beyond this many live mappings, new ones are no longer tracked. */
#define VMM_MAX_TRACKED 16384

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

/* Adds the mapping to the region table, untiered, and registers it on the
 * connection of the moment.  Under the announce lock. */
static void track(uintptr_t ptr, size_t size) {
        struct shim_vmm *v = &kvt_shim()->vmm;
        struct shim_region r = {.base = ptr, .size_bytes = size, .span_bytes = size, .device = current_device(),
                                .untiered = true};
        struct kvt_region_add add;

        if (atomic_load(&v->tracked) >= VMM_MAX_TRACKED || regions_add(&r) < 0)
                return;
        atomic_fetch_add(&v->tracked, 1);
        regions_add_msg(&r, &add);
        /* Unsent (no daemon), it waits for the mover, which may have ended
         * with nothing left to register. */
        if (client_ensure() < 0 || client_register(-1, 0, &add, regions_mark_registered) < 0)
                client_kick_mover();
}

/* Forgets every tracked mapping starting in [ptr, ptr + size).  Under the
 * announce lock. */
static void untrack(uintptr_t ptr, size_t size) {
        struct shim_region r;

        while (regions_take_untiered(ptr, size, &r) == 0) {
                struct kvt_region_del del = {.region_id = r.id};

                atomic_fetch_sub(&kvt_shim()->vmm.tracked, 1);
                if (r.registered)
                        client_send(KVT_MSG_REGION_DEL, &del, sizeof(del));
        }
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

/* Whether an unmap looks for tracked mappings: also when a later daemon's
 * [capture] apis left vmm out, while mappings tracked before remain. */
static bool tracking_unmap(void) {
        struct shim_vmm *v = &kvt_shim()->vmm;

        return !kvt_shim()->cfg.disabled && !hook_busy() &&
               ((classify_rules_apis(&kvt_shim()->rules) & KVT_API_FAMILY_VMM) ||
                atomic_load(&v->tracked) > 0);
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
