/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The fake CUDA's extra entry points, for test programs: "kernels" that run
 * on the calling thread's current device and touch memory the way GPU code
 * would (hits, remote reads over the link, page faults that migrate), and
 * the model's counters, which tests use as the oracle.
 *
 * All functions return a cudaError_t value (0 = cudaSuccess) and set the
 * runtime's per-thread last error on failure, as a kernel launch would.
 *
 * Environment, read once at the first CUDA call (so tests may setenv first):
 *   FAKECUDA_DEVICES=N            devices (1..16, default 1)
 *   FAKECUDA_MEM=BYTES            memory per device, K/M/G/T suffixes (default 16G)
 *   FAKECUDA_NUMA_NODES=N         host NUMA nodes accepted as locations (default 1)
 *   FAKECUDA_HOST_NUMA_ID=N[,N..] cudaDevAttrHostNumaId of every device, or one per
 *                                 device (the last repeats); default the last node;
 *                                 may be one not accepted, or -1
 *   FAKECUDA_MANAGED_MISALIGN=1   cudaMallocManaged returns 2 MiB boundary + 64 KiB
 *   FAKECUDA_FAIL=KIND:N[+],...   the Nth call of KIND fails (N+: from the Nth on);
 *                                 KIND: malloc, malloc_managed, prefetch, advise,
 *                                 ctx_create
 *   FAKECUDA_PREFETCH_DELAY_US=N  cudaMemPrefetchAsync sleeps N us per page moved
 *   FAKECUDA_ADVISE_DELAY_US=N    cudaMemAdvise takes N us a call (the driver's time;
 *                                 ~50 us for one page's read-mostly advice on the H200)
 *   FAKECUDA_EVENT_DELAY_US=N     work on a created stream completes N us after the
 *                                 last event recorded or host function launched there:
 *                                 events report not-ready until then, host functions
 *                                 run then on a thread of their own, and
 *                                 cudaStreamSynchronize waits for both (default 0:
 *                                 everything completes at once, host functions inline)
 *   FAKECUDA_FAULT_BATCH=1        a kernel's GPU page faults come as one GPU_PAGE_FAULT
 *                                 record (the first's address, value the count), as
 *                                 the H200 batches them, and its remote maps of
 *                                 adjacent memory as one REMOTE_MAP record (the
 *                                 first's address, value the bytes of all): CUPTI's
 *                                 record names a range (default 0: a record a page)
 *   FAKECUDA_SILENT_EVICT=1       a page that moves to the host while accessed-by all
 *                                 but its first 4 KiB (kvtier's mapped eviction) keeps
 *                                 that page mapped for the device too, with no record:
 *                                 as if a touch while it moved had mapped it unseen
 *                                 (what a two-engine pair on the H200 suggested,
 *                                 not established there; default 0)
 *   FAKECUDA_FREE_DELAY_US=N      cudaFree sleeps N us before it releases memory
 *                                 (the real one synchronizes the device first)
 *   FAKECUDA_STATS=PATH           at exit, append one JSON line per device, and one
 *                                 per host NUMA node: bytes a prefetch naming it put
 *                                 there, now and at the peak
 *   FAKECUDA_RUNTIME_VIA_DRIVER=1 cudaMalloc/cudaFree call cuMemAlloc/cuMemFree,
 *                                 found through cuGetProcAddress as the real
 *                                 runtime does
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Bytes per page of the residency model: UVM's big page. */
#define FAKECUDA_PAGE_BYTES ((size_t)2 << 20)

/* Locations reported by fakecuda_page_info(); devices are 0, 1, ... */
#define FAKECUDA_LOC_HOST (-1)
#define FAKECUDA_LOC_NONE (-2) /* never touched (location) or unset (preferred) */

struct fakecuda_stats {
        uint64_t h2d_bytes;                   /* migrated host -> this device */
        uint64_t d2h_bytes;                   /* migrated this device -> host */
        uint64_t remote_bytes;                /* read/written over the link, no migration */
        uint64_t faults;                      /* GPU page faults (per 2 MiB page) */
        uint64_t cpu_faults;                  /* CPU page faults on pages this device held (per 2 MiB page) */
        uint64_t evictions;                   /* pages pushed out for capacity */
        uint64_t managed_resident_bytes;      /* managed bytes in this device's memory now */
        uint64_t managed_resident_peak_bytes; /* most ever resident at once */
        uint64_t device_alloc_bytes;          /* cudaMalloc'd on this device now */
        uint64_t managed_alloc_bytes;         /* cudaMallocManaged while current, now */
        uint64_t managed_allocs;              /* successful cudaMallocManaged calls, ever */
        uint64_t prefetch_calls;              /* cudaMemPrefetchAsync by threads current here */
        uint64_t prefetch_calls_created_ctx;  /* of those, made in a context from cuCtxCreate */
        uint64_t prefetch_to_device_created_ctx; /* of those, to a device */
        uint64_t advise_calls;                /* cudaMemAdvise by threads current here */
        uint64_t block_splits;                /* of those, edges inside a 2 MiB page that split the driver's
                                               * block there for the first time (never merged again) */
        uint64_t numa_location_calls;         /* advice or prefetch naming a host NUMA node */
        uint64_t ctx_created;                 /* contexts made by cuCtxCreate on this device */
        uint64_t ctx_limits_lowered;          /* of those, ones whose stack, printf and heap limits went to 0 */
        uint64_t host_prefetch_overlap_max;   /* most prefetches to the host spending their link time at once */
};

struct fakecuda_page_info {
        int location;         /* FAKECUDA_LOC_NONE, FAKECUDA_LOC_HOST or a device */
        int duplicate_device; /* device holding a read-only copy (read-mostly), or -1 */
        int preferred;        /* FAKECUDA_LOC_NONE, FAKECUDA_LOC_HOST or a device */
        unsigned accessed_by; /* bit n: SetAccessedBy device n */
        int read_mostly;      /* 0 or 1 */
        uint64_t last_touch;  /* logical clock of the last GPU touch or prefetch */
};

/* Kernel: writes the backend_pattern() words of seed over [ptr, ptr+len);
 * ptr 8-byte aligned, len a multiple of 8, memory from cudaMalloc(Managed). */
int fakecuda_kernel_fill(void *ptr, size_t len, uint64_t seed);

/* Kernel: counts the words of [ptr, ptr+len) that differ from the pattern of
 * seed into *ret_bad_words. */
int fakecuda_kernel_check(const void *ptr, size_t len, uint64_t seed, uint64_t *ret_bad_words);

/* Kernel: reads [ptr, ptr+len) (a touch). */
int fakecuda_kernel_read(const void *ptr, size_t len);

/* A kernel for cudaLaunchKernel / cuLaunchKernel (its address is the
 * handle, as an nvcc host stub's is): reads [ptr, ptr+len), parameters
 * (const void *ptr, size_t len), both reported by cudaFuncGetParamInfo and
 * cuFuncGetParamInfo.  Calling it directly is fakecuda_kernel_read(). */
void fakecuda_read_kernel(const void *ptr, size_t len);

/* Unified-memory events as CUPTI reports them, for the fake libcupti:
 * kind is a CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_* value (1 HtoD,
 * 2 DtoH: value bytes; 4 GPU page fault: value 1), addr the page.  The hook
 * runs with the model's lock held: it must not call back into CUDA. */
typedef void (*fakecuda_um_hook)(int kind, uintptr_t addr, uint64_t value, int dev);
void fakecuda_set_um_hook(fakecuda_um_hook hook);

/* Reports one such record as given, whatever the memory it names: for
 * tests of how a CUPTI client reads records the model never makes. */
void fakecuda_um_record(int kind, uintptr_t addr, uint64_t value, int dev);

/* Whether the runtime's exit-time teardown has run (CUDA is gone). */
bool fakecuda_torn_down(void);

/* Events created and not yet released. */
unsigned long fakecuda_events_live(void);

/* Host ranges registered with cudaHostRegister and not unregistered yet. */
long fakecuda_host_registered(void);

/* Copies the counters of device dev into *ret. */
int fakecuda_get_stats(int dev, struct fakecuda_stats *ret);

/* Zeroes the traffic and call counters of device dev; the peak restarts at
 * the bytes resident now.  Gauges (resident, alloc) are kept. */
int fakecuda_reset_stats(int dev);

/* Bytes of [ptr, ptr+len) (within one managed allocation) whose pages are
 * resident, moved or read-duplicated, in device dev's memory now. */
int fakecuda_resident_bytes(const void *ptr, size_t len, int dev, uint64_t *ret_bytes);

/* Holds (hold != 0) or releases the work of a stream made with
 * cudaStreamCreate*: while held, events recorded on it do not complete and
 * cudaStreamSynchronize waits, as behind a long kernel.  Stream-ordered
 * frees can then be tested for order. */
struct CUstream_st;
int fakecuda_stream_hold(struct CUstream_st *stream, int hold);

/* Describes the model page holding managed address ptr. */
int fakecuda_page_info(const void *ptr, struct fakecuda_page_info *ret);
