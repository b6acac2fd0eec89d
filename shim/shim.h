/* SPDX-License-Identifier: MIT */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "state.h"

#define KVT_EXPORT __attribute__((visibility("default")))

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

/* The memory info to report: the KVTIER_CAPACITY view of the real figures
 * where it applies, else the real figures, into *free and *total. */
void shim_capacity_view(size_t real_free, size_t real_total, size_t *free, size_t *total);

/* Whether KVTIER_CAPACITY is set at all (bytes or auto). */
bool shim_capacity_on(void);
