/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "cupti.h"
#include "heat.h"
#include "log.h"
#include "protocol.h"
#include "real.h"
#include "regions.h"
#include "shim.h"
#include "util.h"

/* Allocations below this stay plain (KVTIER_MIN_SIZE overrides). */
#define DEFAULT_MIN_SIZE_BYTES (64ull << 20)
/* Longest an allocation waits on the daemon (KVTIER_TIMEOUT_MS overrides). */
#define DEFAULT_TIMEOUT_MS 200

struct shim_config shim_cfg = {
        .socket_path = KVT_RUNSTATEDIR "/kvtier/kvtierd.sock",
        .rules.min_size = DEFAULT_MIN_SIZE_BYTES,
        .timeout_ms = DEFAULT_TIMEOUT_MS,
};

static bool env_true(const char *v) {
        return v && (strcmp(v, "1") == 0 || strcmp(v, "yes") == 0 || strcmp(v, "true") == 0);
}

/* Reads a byte count from the environment into *ret; a bad value is
 * reported and leaves *ret as it was. */
static void env_bytes(const char *name, bool allow_zero, uint64_t *ret) {
        const char *v = getenv(name);
        uint64_t bytes;

        if (!v)
                return;
        if (parse_bytes(v, &bytes) < 0 || (bytes == 0 && !allow_zero))
                log_warning("Invalid %s=%s (bytes: 64M, 8G ...), ignoring.", name, v);
        else
                *ret = bytes;
}

/* Reads the environment once.  Bad values are reported and replaced by the
 * default: a typo must not take the engine down. */
__attribute__((constructor)) static void shim_load(void) {
        const char *v;
        int level;

        kvt_log_setup("kvtier", KVT_LOG_WARNING);
        if ((v = getenv("KVTIER_LOG"))) {
                level = kvt_log_level_parse(v);
                if (level < 0)
                        log_warning("Invalid KVTIER_LOG=%s, ignoring.", v);
                else
                        kvt_log_setup("kvtier", level);
        }
        shim_cfg.disabled = env_true(getenv("KVTIER_DISABLE"));
        if ((v = getenv("KVTIER_SOCKET"))) {
                if (*v != '/' || strlen(v) >= sizeof(shim_cfg.socket_path))
                        log_warning("Invalid KVTIER_SOCKET=%s (an absolute path of at most %zu bytes), ignoring.",
                                    v, sizeof(shim_cfg.socket_path) - 1);
                else
                        strcpy(shim_cfg.socket_path, v);
        }
        env_bytes("KVTIER_MIN_SIZE", false, &shim_cfg.rules.min_size);
        env_bytes("KVTIER_CAPTURE_AFTER", true, &shim_cfg.rules.capture_after);
        env_bytes("KVTIER_MAX_CAPTURED", true, &shim_cfg.rules.max_captured);
        env_bytes("KVTIER_CAPACITY", true, &shim_cfg.capacity_bytes);
        if ((v = getenv("KVTIER_TIMEOUT_MS"))) {
                char *end;
                long ms = strtol(v, &end, 10);
                if (*end || ms < 1 || ms > 60000)
                        log_warning("Invalid KVTIER_TIMEOUT_MS=%s (1..60000), ignoring.", v);
                else
                        shim_cfg.timeout_ms = (int)ms;
        }
        if ((v = getenv("KVTIER_HEAT")) && heat_sources_parse(v, &heat_sources) < 0)
                log_warning("Invalid KVTIER_HEAT=%s (off, or a list of cupti, launch, hint), ignoring.", v);
        cupti_load_env();
        if ((v = getenv("KVTIER_TRACE")) && *v)
                shim_cfg.trace_path = strdup(v);
        client_init();
        log_debug("Loaded: socket %s, min size %llu, timeout %d ms%s.", shim_cfg.socket_path,
                  (unsigned long long)shim_cfg.rules.min_size, shim_cfg.timeout_ms,
                  shim_cfg.disabled ? ", disabled" : "");
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

/* Backs an allocation with managed memory left host-mapped (preferred
 * location host, accessed by the GPU), so the first GPU touch cannot push
 * VRAM over budget; the daemon then promotes what fits.  Returns 0, or
 * -errno when the allocation should fall back to the real allocator. */
static int capture(const struct kvt_cudart *rt, void **ret_ptr, size_t size) {
        const struct cudaMemLocation host = { cudaMemLocationTypeHost, 0 };
        struct shim_region r = { .size_bytes = size, .api = KVT_API_CUDA_MALLOC };
        struct kvt_region_add add;
        struct cudaMemLocation gpu = { cudaMemLocationTypeDevice, 0 };
        cudaError_t e;

        r.span_bytes = ALIGN_UP(size, KVT_CHUNK_BYTES);
        if (r.span_bytes > KVT_MAX_REGION_BYTES || rt->cudaGetDevice(&r.device) != cudaSuccess ||
            r.device < 0 || r.device >= KVT_MAX_GPUS)
                return -EINVAL;
        gpu.id = r.device;
        e = managed_alloc_aligned(rt, r.span_bytes, &r.alloc_ptr, &r.base);
        if (e != cudaSuccess)
                return log_warning_errno(ENOMEM, "Failed to allocate %zu bytes of managed memory: %s, using plain cudaMalloc.",
                                         size, rt->cudaGetErrorString(e));
        e = rt->cudaMemAdvise((void *)r.base, r.span_bytes, cudaMemAdviseSetPreferredLocation, host);
        if (e == cudaSuccess)
                e = rt->cudaMemAdvise((void *)r.base, r.span_bytes, cudaMemAdviseSetAccessedBy, gpu);
        if (e != cudaSuccess) {
                rt->cudaFree(r.alloc_ptr);
                return log_warning_errno(EIO, "Failed to advise managed memory: %s, using plain cudaMalloc.",
                                         rt->cudaGetErrorString(e));
        }
        /* Marked registered before it is visible, so the mover's
         * re-registration pass cannot announce it a second time. */
        r.registered = true;
        if (regions_add(&r) < 0) {
                rt->cudaFree(r.alloc_ptr);
                return -ENOMEM;
        }
        heat_region_add(&r); /* without a slot the region is tiered without heat */
        regions_add_msg(&r, &add);
        /* A lost daemon leaves the region captured and host-mapped; the
         * mover registers it once a daemon is back. */
        if (client_send(KVT_MSG_REGION_ADD, &add, sizeof(add)) < 0)
                regions_set_registered(r.id, false);
        *ret_ptr = (void *)r.base;
        log_debug("Captured %zu bytes at %p on device %d as region %u.", size, *ret_ptr, r.device, r.id);
        return 0;
}

KVT_EXPORT cudaError_t cudaMalloc(void **devPtr, size_t size) {
        const struct kvt_cudart *rt = real_cudart();

        if (!rt)
                return cudaErrorInitializationError;
        if (shim_cfg.disabled || !devPtr || !classify_take(&shim_cfg.rules, size))
                return rt->cudaMalloc(devPtr, size);
        if (client_ensure() < 0 || capture(rt, devPtr, size) < 0) {
                classify_release(size);
                return rt->cudaMalloc(devPtr, size);
        }
        return cudaSuccess;
}

KVT_EXPORT cudaError_t cudaFree(void *devPtr) {
        const struct kvt_cudart *rt = real_cudart();
        struct shim_region r;
        cudaError_t e;

        if (!rt)
                return cudaErrorInitializationError;
        if (!devPtr || shim_cfg.disabled || regions_take(devPtr, &r) < 0)
                return rt->cudaFree(devPtr);
        heat_region_del(r.id);
        /* Free first, tell the daemon second: it hands the region's VRAM to
         * others as soon as it hears, and until cudaFree returns the pages
         * are still resident.  An order arriving in between finds no region. */
        e = rt->cudaFree(r.alloc_ptr);
        classify_release(r.size_bytes);
        if (r.registered) {
                struct kvt_region_del del = { .region_id = r.id };
                client_send(KVT_MSG_REGION_DEL, &del, sizeof(del));
        }
        return e;
}

/* With KVTIER_CAPACITY, engines that size their KV pool from free memory
 * (vLLM's gpu_memory_utilization) see that capacity instead of the card's:
 * free is the capacity less what the card has in use and what is captured
 * (conservative: captured chunks resident in VRAM count twice). */
KVT_EXPORT cudaError_t cudaMemGetInfo(size_t *free, size_t *total) {
        const struct kvt_cudart *rt = real_cudart();
        size_t real_free = 0, real_total = 0;
        uint64_t used, cap = shim_cfg.capacity_bytes;
        cudaError_t e;

        if (!rt)
                return cudaErrorInitializationError;
        if (shim_cfg.disabled || cap == 0 || !free || !total)
                return rt->cudaMemGetInfo(free, total);
        e = rt->cudaMemGetInfo(&real_free, &real_total);
        if (e != cudaSuccess)
                return e;
        used = (uint64_t)(real_total - real_free) + classify_captured_bytes();
        *total = (size_t)cap;
        *free = (size_t)(cap > used ? cap - used : 0);
        return cudaSuccess;
}
