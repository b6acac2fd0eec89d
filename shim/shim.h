/* SPDX-License-Identifier: MIT */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/un.h>

#include "classify.h"

#define KVT_EXPORT __attribute__((visibility("default")))

/* The shim's knobs, read from the environment once, at load. */
struct shim_config {
        bool disabled;                 /* KVTIER_DISABLE=1: every hook passes through */
        char socket_path[sizeof(((struct sockaddr_un *)0)->sun_path)]; /* KVTIER_SOCKET */
        struct classify_rules rules;   /* KVTIER_MIN_SIZE, _CAPTURE_AFTER, _MAX_CAPTURED, _CAPTURE_APIS,
                                        * then the daemon's [capture] rules (min_size, capture_after,
                                        * max_captured, apis) for those not set */
        unsigned rules_from_env;       /* CLASSIFY_ENV_*: rules the environment set */
        uint64_t capacity_bytes;       /* KVTIER_CAPACITY: what cudaMemGetInfo reports; 0 = off */
        bool capacity_auto;            /* KVTIER_CAPACITY=auto: the daemon's budget plus host grant */
        bool standalone;               /* KVTIER_STANDALONE=1: a kvtierd of this process's own (standalone.c) */
        int timeout_ms;                /* KVTIER_TIMEOUT_MS: longest wait on the daemon */
        char *trace_path;              /* KVTIER_TRACE: record sampled accesses there */
        bool host_numa;                /* KVTIER_MOVER_HOST_NUMA: the host tier on the GPU's node */
};

extern struct shim_config shim_cfg;

#include "cuda-abi.h"

/* Prototypes of the runtime entry points the shim calls but does not
 * interpose: it calls them only through real_cudart(), and -z defs catches
 * a direct call.  The interposed ones are declared in hooks.h, under the
 * wrapper's name only, so that no direct call can compile. */
#define KVT_DECLARE_FUNC(ret, name, args) KVT_EXPORT ret name args;
KVT_CUDART_CALLS(KVT_DECLARE_FUNC)
#undef KVT_DECLARE_FUNC

struct kvt_cudart;
struct shim_region;

/* Captures an allocation of size bytes made through api (enum
 * kvt_alloc_api) if the rules take it: *ret_ptr gets managed memory
 * registered with the daemon.  Returns 0, or -errno when the caller should
 * make the real allocation (not taken, inside the shim, or capture failed). */
int shim_capture(uint32_t api, size_t size, void **ret_ptr);

/* If ptr is a captured region, frees it (once stream reaches this point
 * when async) into *ret_e and returns 0; else -ENOENT: the real free is the
 * caller's. */
int shim_free(void *ptr, bool async, cudaStream_t stream, cudaError_t *ret_e);

/* Frees region r, already taken from the table, and tells the daemon. */
cudaError_t shim_release(const struct kvt_cudart *rt, const struct shim_region *r);

/* The KVTIER_CAPACITY view of memory info: fills *free and *total and
 * returns true when it applies, false to report the real figures. */
bool shim_capacity_view(size_t real_free, size_t real_total, size_t *free, size_t *total);

/* Whether KVTIER_CAPACITY is set at all (bytes or auto). */
bool shim_capacity_on(void);

/* Held around "make memory + REGION_ADD" and "release memory + REGION_DEL",
 * so that the daemon never hears of an address reused before it heard it
 * was freed. */
void shim_announce_lock(void);
void shim_announce_unlock(void);
