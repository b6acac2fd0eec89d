/* SPDX-License-Identifier: MIT */
/*
 * Launch hooks: cudaLaunchKernel and cuLaunchKernel pass straight through,
 * and on the way every kernel argument word that points into a captured
 * region counts one access of the chunk it points at (heat.c).
 *
 * Arguments are read only within the sizes cudaFuncGetParamInfo /
 * cuFuncGetParamInfo report (cached per function in a fixed table filled
 * lock-free, so the launch path never allocates); a function whose layout is
 * unknown is launched without looking at its arguments.  The arguments are
 * looked at after the real launch returns (they are the caller's memory and
 * still valid): with lazy module loading, a kernel's parameters can be
 * queried only once it has been launched.  A pointer gives
 * where an access starts, not how far it goes: one chunk per pointer.
 *
 * CUDA 13's nvcc launch stubs (<<<...>>>) call neither of the public entry
 * points but __cudaLaunchKernel(cudaKernel_t, ...): hooked too, with
 * parameters from cuKernelGetParamInfo (a cudaKernel_t is a CUkernel).
 *
 * Pacing (struct kvt_pace): while the daemon says a client of higher
 * priority is busy on the GPU, each launch waits for its stream to drain
 * (its kernel and what was queued before it), then sleeps (100 - p) / p
 * times as long as that took, so that this process's kernels hold the GPU
 * about p percent of the time.  Two processes' kernels share a GPU by time
 * slices; without this a low-priority neighbour's kernels (slow ones above
 * all: reading host memory over the link) take every other slice.  Both the
 * wait and the sleep are bounded (PACE_WAIT_MAX_NS, PACE_SLEEP_MAX_NS), so a
 * stream that never drains (a kernel waiting for the host) costs the engine
 * time, never a hang; a stream being captured is not paced (nothing runs,
 * and a query would end the capture).  Graph launches are not paced.
 *
 * The launches are hooks of the lists in cuda-abi.h (KVT_CUDART_LAUNCH_HOOKS,
 * KVT_CUDART_STUB_HOOKS, KVT_CUDA_LAUNCH_HOOKS), so that dlsym and
 * cuGetProcAddress hand them out too; the real launches and parameter
 * queries (KVT_*_LAUNCH_CALLS) come from real.h's tables.
 */
#include "config.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "heat.h"
#include "hooks.h"
#include "launch.h"
#include "real.h"
#include "regions.h"
#include "state.h"
#include "util.h"

/* A paced launch waits at most this long for its stream, and sleeps at most
 * this long after it; its stream is polled this often. */
#define PACE_WAIT_MAX_NS  (50ull * 1000 * 1000)
#define PACE_SLEEP_MAX_NS (100ull * 1000 * 1000)
#define PACE_POLL_NS      (20ull * 1000)

/* Bytes looked at per parameter, at most LAYOUT_MAX_PARAMS of them
 * (state.h): structs that carry pointers, like PyTorch's TensorIterator
 * offsets, fit. */
#define PARAM_MAX_SCAN_BYTES 256u

enum { LAYOUT_EMPTY, LAYOUT_FILLING, LAYOUT_READY };

typedef int (*param_info_fn)(const void *func, size_t i, size_t *ret_offset, size_t *ret_size);

/* Statistics only: a relaxed load and store, not a locked add, on the
 * launch path (a lost increment under a race is fine, a bus lock per
 * launch is not). */
#define STAT_INC(field)                                                                                     \
        __atomic_store_n(&kvt_shim()->launch.stats.field,                                                   \
                         __atomic_load_n(&kvt_shim()->launch.stats.field, __ATOMIC_RELAXED) + 1,            \
                         __ATOMIC_RELAXED)

void launch_get_stats(struct launch_stats *ret) {
        struct shim_launch *ln = &kvt_shim()->launch;

        ret->launches = __atomic_load_n(&ln->stats.launches, __ATOMIC_RELAXED);
        ret->scanned = __atomic_load_n(&ln->stats.scanned, __ATOMIC_RELAXED);
        ret->no_layout = __atomic_load_n(&ln->stats.no_layout, __ATOMIC_RELAXED);
        ret->functions = __atomic_load_n(&ln->stats.functions, __ATOMIC_RELAXED);
        ret->functions_unknown = __atomic_load_n(&ln->stats.functions_unknown, __ATOMIC_RELAXED);
        ret->pointers = __atomic_load_n(&ln->stats.pointers, __ATOMIC_RELAXED);
        ret->paced = __atomic_load_n(&ln->stats.paced, __ATOMIC_RELAXED);
        ret->paced_wait_ns = __atomic_load_n(&ln->stats.paced_wait_ns, __ATOMIC_RELAXED);
        ret->paced_sleep_ns = __atomic_load_n(&ln->stats.paced_sleep_ns, __ATOMIC_RELAXED);
}

static int runtime_param_info(const void *func, size_t i, size_t *ret_offset, size_t *ret_size) {
        __auto_type f = REAL_CUDART(cudaFuncGetParamInfo);

        return f ? f(func, i, ret_offset, ret_size) : -1;
}

static int kernel_param_info(const void *kernel, size_t i, size_t *ret_offset, size_t *ret_size) {
        __auto_type f = REAL_CUDA(cuKernelGetParamInfo);

        return f ? f((CUkernel)(uintptr_t)kernel, i, ret_offset, ret_size) : -1;
}

static int driver_param_info(const void *func, size_t i, size_t *ret_offset, size_t *ret_size) {
        __auto_type f = REAL_CUDA(cuFuncGetParamInfo);

        return f ? f((CUfunction)(uintptr_t)func, i, ret_offset, ret_size) : -1;
}

/* Queries func's parameters into a slot this thread owns. */
static void layout_fill(struct launch_layout *l, param_info_fn info) {
        struct shim_launch *ln = &kvt_shim()->launch;
        size_t off, size;
        uint16_t n = 0;

        while (n < LAYOUT_MAX_PARAMS && info(l->func, n, &off, &size) == 0) {
                size_t scan = size < PARAM_MAX_SCAN_BYTES ? size : PARAM_MAX_SCAN_BYTES;

                l->size[n] = (uint16_t)(size >= sizeof(uint64_t) ? scan : 0);
                n++;
        }
        l->n_params = n;
        __atomic_fetch_add(&ln->stats.functions, 1, __ATOMIC_RELAXED);
        if (n == 0)
                __atomic_fetch_add(&ln->stats.functions_unknown, 1, __ATOMIC_RELAXED);
        __atomic_store_n(&l->state, LAYOUT_READY, __ATOMIC_RELEASE);
}

/* The cached layout of func, filling it on first sight; NULL while another
 * thread fills it or the table is full. */
static const struct launch_layout *layout_get(const void *func, param_info_fn info) {
        struct shim_launch *ln = &kvt_shim()->launch;
        uint32_t h = (uint32_t)(((uintptr_t)func >> 4) * 0x9e3779b1u) % LAYOUT_SLOTS;

        for (uint32_t probe = 0; probe < 16; probe++) {
                struct launch_layout *l = &ln->layouts[(h + probe) % LAYOUT_SLOTS];
                uint32_t state = __atomic_load_n(&l->state, __ATOMIC_ACQUIRE), empty = LAYOUT_EMPTY;

                if (state == LAYOUT_READY && l->func == func)
                        return l;
                if (state == LAYOUT_FILLING)
                        continue; /* may be ours, may be another: look on, never wait */
                if (state == LAYOUT_EMPTY &&
                    __atomic_compare_exchange_n(&l->state, &empty, LAYOUT_FILLING, false, __ATOMIC_ACQUIRE,
                                                __ATOMIC_RELAXED)) {
                        l->func = func;
                        layout_fill(l, info);
                        return l;
                }
        }
        return NULL;
}

/* Counts the chunks the pointer-sized words of the arguments point at. */
static void scan_args(const struct launch_layout *l, void **args) {
        for (uint16_t i = 0; i < l->n_params; i++) {
                const char *p = args[i];

                if (!p)
                        continue;
                for (uint16_t off = 0; off + sizeof(uint64_t) <= l->size[i]; off += sizeof(uint64_t)) {
                        uint64_t w;

                        memcpy(&w, p + off, sizeof(w));
                        if (regions_maybe_captured((uintptr_t)w) && heat_launch((uintptr_t)w))
                                STAT_INC(pointers);
                }
        }
}

static void launch_heat(const void *func, void **args, param_info_fn info) {
        const struct launch_layout *l;

        if (!(kvt_shim()->cfg.heat_sources & HEAT_SRC_LAUNCH) || !args || !func || kvt_shim()->cfg.disabled)
                return;
        STAT_INC(launches);
        l = layout_get(func, info);
        if (l && l->n_params) {
                STAT_INC(scanned);
                scan_args(l, args);
        } else
                STAT_INC(no_layout);
}

void launch_set_pace(uint32_t percent) {
        __atomic_store_n(&kvt_shim()->launch.pace_percent, percent >= 100 ? 0 : percent, __ATOMIC_RELAXED);
}

/* When a launch that may be paced starts: 0 when none is. */
static uint64_t pace_start(void) {
        return __atomic_load_n(&kvt_shim()->launch.pace_percent, __ATOMIC_RELAXED) ? now_ns() : 0;
}

static void sleep_for(uint64_t ns) {
        struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000u), .tv_nsec = (long)(ns % 1000000000u)};

        while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                ;
}

/* Paces a launch on stream that started at t0 (pace_start()). */
static void launch_pace(CUstream stream, uint64_t t0) {
        struct shim_launch *ln = &kvt_shim()->launch;
        uint32_t pct = __atomic_load_n(&ln->pace_percent, __ATOMIC_RELAXED);
        __auto_type query = REAL_CUDA(cuStreamQuery);
        __auto_type capturing = REAL_CUDA(cuStreamIsCapturing);
        CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_NONE;
        uint64_t waited, rest;

        if (t0 == 0 || pct == 0 || !query || !capturing || kvt_shim()->cfg.disabled)
                return;
        if (capturing(stream, &cs) != CUDA_SUCCESS || cs != CU_STREAM_CAPTURE_STATUS_NONE)
                return;
        while (query(stream) == CUDA_ERROR_NOT_READY && now_ns() - t0 < PACE_WAIT_MAX_NS)
                sleep_for(PACE_POLL_NS);
        waited = now_ns() - t0;
        rest = MIN(waited / pct * (100 - pct), PACE_SLEEP_MAX_NS);
        sleep_for(rest);
        __atomic_fetch_add(&ln->stats.paced, 1, __ATOMIC_RELAXED);
        __atomic_fetch_add(&ln->stats.paced_wait_ns, waited, __ATOMIC_RELAXED);
        __atomic_fetch_add(&ln->stats.paced_sleep_ns, rest, __ATOMIC_RELAXED);
}

cudaError_t kvt_hook_cudaLaunchKernel(const void *func, dim3 gridDim, dim3 blockDim, void **args,
                                      size_t sharedMem, cudaStream_t stream) {
        __auto_type real = REAL_CUDART(cudaLaunchKernel);
        uint64_t t0 = pace_start();
        cudaError_t e;

        if (!real)
                return cudaErrorInitializationError;
        e = PASS(real(func, gridDim, blockDim, args, sharedMem, stream));
        if (e == cudaSuccess) {
                launch_heat(func, args, runtime_param_info);
                launch_pace((CUstream)stream, t0);
        }
        return e;
}
KVT_HOOK_EXPORT(cudaLaunchKernel)

cudaError_t kvt_hook_cudaLaunchKernelExC(const cudaLaunchConfig_t *config, const void *func, void **args) {
        __auto_type real = REAL_CUDART(cudaLaunchKernelExC);
        uint64_t t0 = pace_start();
        cudaError_t e;

        if (!real)
                return cudaErrorInitializationError;
        e = PASS(real(config, func, args));
        if (e == cudaSuccess) {
                launch_heat(func, args, runtime_param_info);
                if (config)
                        launch_pace((CUstream)config->stream, t0);
        }
        return e;
}
KVT_HOOK_EXPORT(cudaLaunchKernelExC)

/* The nvcc stubs' launch, through real (NULL: the runtime lacks it);
 * stream 0 is default_stream. */
static cudaError_t stub_launch(__typeof__(kvt_hook___cudaLaunchKernel) *real, cudaKernel_t kernel,
                               dim3 gridDim, dim3 blockDim, void **args, size_t sharedMem,
                               cudaStream_t stream, CUstream default_stream) {
        uint64_t t0 = pace_start();
        cudaError_t e;

        if (!real)
                return cudaErrorInitializationError;
        e = PASS(real(kernel, gridDim, blockDim, args, sharedMem, stream));
        if (e == cudaSuccess) {
                launch_heat((const void *)kernel, args, kernel_param_info);
                launch_pace(stream ? (CUstream)stream : default_stream, t0);
        }
        return e;
}

cudaError_t kvt_hook___cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void **args,
                                        size_t sharedMem, cudaStream_t stream) {
        return stub_launch(REAL_CUDART(__cudaLaunchKernel), kernel, gridDim, blockDim, args, sharedMem,
                           stream, NULL);
}
KVT_HOOK_EXPORT(__cudaLaunchKernel)

/* Compiled with per-thread default streams: stream 0 is the thread's. */
cudaError_t kvt_hook___cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void **args,
                                             size_t sharedMem, cudaStream_t stream) {
        return stub_launch(REAL_CUDART(__cudaLaunchKernel_ptsz), kernel, gridDim, blockDim, args, sharedMem,
                           stream, CU_STREAM_PER_THREAD);
}
KVT_HOOK_EXPORT(__cudaLaunchKernel_ptsz)

CUresult kvt_hook_cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams,
                                   void **extra) {
        __auto_type real = REAL_CUDA(cuLaunchKernelEx);
        uint64_t t0;
        CUresult r;

        if (!real)
                return CUDA_ERROR_NOT_INITIALIZED;
        if (hook_busy()) /* the runtime's own launch beneath a hooked one: counted there */
                return real(config, f, kernelParams, extra);
        t0 = pace_start();
        r = real(config, f, kernelParams, extra);
        if (r == CUDA_SUCCESS) {
                launch_heat((const void *)f, kernelParams, driver_param_info);
                if (config)
                        launch_pace(config->hStream, t0);
        }
        return r;
}
KVT_HOOK_EXPORT(cuLaunchKernelEx)

CUresult kvt_hook_cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                 unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                                 unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                                 void **kernelParams, void **extra) {
        __auto_type real = REAL_CUDA(cuLaunchKernel);
        uint64_t t0;
        CUresult r;

        if (!real)
                return CUDA_ERROR_NOT_INITIALIZED;
        if (hook_busy()) /* the runtime's own launch beneath a hooked one: counted there */
                return real(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes,
                            hStream, kernelParams, extra);
        t0 = pace_start();
        r = real(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream,
                 kernelParams, extra);
        /* Arguments packed in extra (CU_LAUNCH_PARAM_BUFFER_POINTER) are
         * not looked at: their layout is the caller's. */
        if (r == CUDA_SUCCESS) {
                launch_heat((const void *)f, kernelParams, driver_param_info);
                launch_pace(hStream, t0);
        }
        return r;
}
KVT_HOOK_EXPORT(cuLaunchKernel)
