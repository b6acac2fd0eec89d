/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The fake CUDA's residency model, shared by runtime.c (libcudart) and
 * driver.c (libcuda).  One global lock; every function takes it.  Functions
 * return 0 or a negative errno: -ENOMEM (device memory exhausted), -EINVAL
 * (bad argument or range), -ENODEV (bad device id), -EFAULT (a kernel
 * touched memory that is not device memory).
 *
 * Locations are ints: a device id >= 0, MODEL_LOC_HOST or MODEL_LOC_NONE.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fakecuda.h"

#define MODEL_PAGE_BYTES  FAKECUDA_PAGE_BYTES
#define MODEL_MAX_DEVICES 16
#define MODEL_MAX_NUMA    64 /* host NUMA nodes the gauges follow */
#define MODEL_LOC_HOST    FAKECUDA_LOC_HOST
#define MODEL_LOC_NONE    FAKECUDA_LOC_NONE
/* Only as the location of SetPreferredLocation: a host NUMA node.  Measured
 * on the H200 (driver 580): the GPU's accesses to pages preferred there
 * fault and migrate them to VRAM, SetAccessedBy or not; only a plain host
 * preferred location lets the GPU map them (tests/bench/RESULTS.md). */
#define MODEL_LOC_HOST_NUMA (-3)

enum model_fail_kind {
        MODEL_FAIL_MALLOC,
        MODEL_FAIL_MALLOC_MANAGED,
        MODEL_FAIL_PREFETCH,
        MODEL_FAIL_ADVISE,
        MODEL_FAIL_CTX_CREATE,
        _MODEL_FAIL_MAX,
};

enum model_access {
        MODEL_ACCESS_FILL,
        MODEL_ACCESS_CHECK,
        MODEL_ACCESS_READ,
};

/* Reads the environment on first use; later calls are no-ops. */
void model_init(void);

/* Initializes the model; false in the child of a fork() made after that,
 * where CUDA calls must fail as they do for real. */
bool model_enter(void);
/* Called by every runtime entry point: registers the runtime's exit-time
 * teardown on the first. */
void model_runtime_started(void);
/* A call spending the driver's time (an advice, a prefetch's copy) begins
 * and ends: the teardown says so if it runs while one is under way on
 * another thread, which the real runtime may crash on. */
void model_call_begin(void);
void model_call_end(void);

/* Whether model_init() ran: any runtime call or cuInit initializes CUDA. */
bool model_initialized(void);

/* Devices configured (after model_init()). */
int model_device_count(void);

/* Host NUMA nodes accepted as locations. */
int model_numa_nodes(void);

/* The host NUMA node closest to device dev (FAKECUDA_HOST_NUMA_ID, default
 * the last node; may name one that is not accepted, or -1). */
int model_host_numa_id(int dev);

/* Counts a successful advice or prefetch that named a host NUMA node. */
void model_count_numa_location(int caller);

/* Microseconds to sleep per page moved by a prefetch. */
unsigned model_prefetch_delay_us(void);

/* Microseconds a cudaMemAdvise call takes (FAKECUDA_ADVISE_DELAY_US). */
unsigned model_advise_delay_us(void);

/* Microseconds after which an event recorded on a stream completes, and a
 * host function launched there runs (FAKECUDA_EVENT_DELAY_US; 0: at once). */
unsigned model_event_delay_us(void);

/* Microseconds cudaFree takes before it releases memory (FAKECUDA_FREE_DELAY_US). */
unsigned model_free_delay_us(void);

/* The calling thread's current device, and setting it (no validation):
 * that makes the device's primary context current. */
int model_current_device(void);
void model_set_current_device(int dev);

/* Contexts.  A key names one: -(1 + dev) the primary context of device dev,
 * 1 .. MODEL_MAX_CTX one made by model_ctx_create.  The calling thread's
 * current context is its current device's primary unless it set a created
 * one (model_ctx_set_current; 0 goes back to the primary). */
#define MODEL_MAX_CTX 64
int model_ctx_current(void);
bool model_ctx_alive(int key);
/* Creates a context on dev and makes it current; *ret_key is its key. */
int model_ctx_create(int dev, int *ret_key);
int model_ctx_set_current(int key);
int model_ctx_destroy(int key);
/* The calling thread's current context's limits (CUlimit 0..2: stack,
 * printf FIFO, malloc heap; CUDA's defaults 1 KiB, 1 MiB, 8 MiB). */
#define MODEL_CTX_LIMITS 3
int model_ctx_set_limit(int limit, size_t value);
int model_ctx_get_limit(int limit, size_t *ret);

/* A context's call lock.  On the H200 a prefetch holds back every other
 * CUDA call of its own context (a kernel launch waited for its whole copy)
 * and none of another context's (tests/bench/RESULTS.md, session 13): a
 * prefetch holds its context's lock for its link time, a kernel waits for
 * it. */
void model_ctx_lock(int key);
void model_ctx_unlock(int key);
/* A prefetch from dev to the host starts (+1) or ends (-1) its link time:
 * counts the most at once (stats host_prefetch_overlap_max). */
void model_host_prefetch_busy(int dev, int delta);

/* Counts one call of kind; returns true if FAKECUDA_FAIL says it fails. */
bool model_fail_now(enum model_fail_kind kind);

/* Device memory on dev (host memory behind it); size 0 gives NULL. */
int model_malloc(int dev, size_t size, void **ret);

/* Managed memory charged to dev's managed_alloc_bytes; pages start untouched. */
int model_malloc_managed(int dev, size_t size, void **ret);

/* Frees device or managed memory by its exact base pointer. */
int model_free(void *ptr);

/* Device dev's free (total - cudaMalloc'd) and total bytes. */
int model_mem_info(int dev, size_t *ret_free, size_t *ret_total);

/* Applies advice (cudaMemoryAdvise value) with location loc to a managed
 * range; caller is the calling thread's device, for the call counter. */
int model_advise(int caller, const void *ptr, size_t count, int advice, int loc);

/* Moves a managed range to loc; to the host, onto NUMA node numa where it
 * is >= 0 (the gauges of FAKECUDA_STATS follow it).  *ret_pages_moved
 * counts pages copied. */
int model_prefetch(int caller, const void *ptr, size_t count, int loc, int numa, size_t *ret_pages_moved);

/* Host-side copy and set: each side resolves to host memory, device memory,
 * or a managed page's current copy; nothing migrates. */
int model_copy(void *dst, const void *src, size_t count);
int model_set(void *dst, int value, size_t count);

/* A kernel on device dev accessing [ptr, ptr+len) (see fakecuda.h). */
int model_kernel(int dev, void *ptr, size_t len, enum model_access access, uint64_t seed,
                 uint64_t *ret_bad_words);

/* Hands the CUPTI hook one record as given (fakecuda_um_record()). */
void model_um_record(int kind, uintptr_t addr, uint64_t value, int dev);

int model_get_stats(int dev, struct fakecuda_stats *ret);
int model_reset_stats(int dev);
int model_resident_bytes(const void *ptr, size_t len, int dev, uint64_t *ret_bytes);
int model_page_info(const void *ptr, struct fakecuda_page_info *ret);

/* For the fake driver (runtime.c): the fake kernels' parameters and launch.
 * Return 0 / a cudaError_t value. */
int fakecuda_param_info(const void *func, size_t i, size_t *ret_offset, size_t *ret_size);
int fakecuda_launch(const void *func, void **args);
