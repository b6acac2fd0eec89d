/* SPDX-License-Identifier: MIT */

/*
 * Fake libcudart.so.13: the CUDA 13 runtime entry points kvtier and its
 * tests use, on the residency model in model.c.  Work is done synchronously
 * at call time; streams only exist to be validated.  Entry points never
 * call each other through exported symbols, so a shim interposing one of
 * them sees exactly the application's calls.
 */

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cuda-abi.h"
#include "fakecuda.h"
#include "model.h"

/* Values from CUDA 13's driver_types.h that shim/cuda-abi.h does not carry. */
#define FAKE_ERROR_ILLEGAL_ADDRESS 700
#define FAKE_MEM_ATTACH_HOST       0x02
#define FAKE_STREAM_LEGACY         ((cudaStream_t)0x1)
#define FAKE_STREAM_PER_THREAD     ((cudaStream_t)0x2)
#define FAKE_DEV_ATTR_MANAGED      83
#define FAKE_DEV_ATTR_PAGEABLE     88
#define FAKE_DEV_ATTR_CONCURRENT   89
#define FAKE_CUDA_VERSION          13000

/* Exported entry points (CUDA 13 signatures), from the lists in cuda-abi.h. */
KVT_CUDART_FUNCS(KVT_CUDA_PROTOTYPE)
KVT_CUDART_TEST_FUNCS(KVT_CUDA_PROTOTYPE)
KVT_CUDART_LAUNCH_FUNCS(KVT_CUDA_PROTOTYPE)
cudaError_t cudaDeviceGetAttribute(int *value, int attr, int device);

struct CUstream_st {
        struct CUstream_st *next;
        int device;
        unsigned flags;
};

static pthread_mutex_t streams_lock = PTHREAD_MUTEX_INITIALIZER;
static struct CUstream_st *streams;
static _Thread_local cudaError_t last_error;

#define ERRORS(X)                                                                                           \
        X(cudaSuccess, "no error")                                                                          \
        X(cudaErrorInvalidValue, "invalid argument")                                                        \
        X(cudaErrorMemoryAllocation, "out of memory")                                                       \
        X(cudaErrorInitializationError, "initialization error")                                             \
        X(cudaErrorInvalidDevicePointer, "invalid device pointer")                                          \
        X(cudaErrorInvalidDevice, "invalid device ordinal")                                                 \
        X(cudaErrorInvalidResourceHandle, "invalid resource handle")                                        \
        X(cudaErrorNotReady, "device not ready")                                                            \
        X(cudaErrorIllegalAddress, "an illegal memory access was encountered")                              \
        X(cudaErrorNotSupported, "operation not supported")                                                 \
        X(cudaErrorUnknown, "unknown error")

enum { cudaErrorIllegalAddress = FAKE_ERROR_ILLEGAL_ADDRESS };

static const struct {
        cudaError_t code;
        const char *name;
        const char *text;
} error_table[] = {
#define ERROR_ENTRY(code, text) {code, #code, text},
        ERRORS(ERROR_ENTRY)
#undef ERROR_ENTRY
};

/* Records a failure as the thread's last error; returns it. */
static cudaError_t fail(cudaError_t e) {
        if (e != cudaSuccess)
                last_error = e;
        return e;
}

static cudaError_t fail_errno(int r) {
        switch (r) {
        case 0:
                return cudaSuccess;
        case -ENOMEM:
                return fail(cudaErrorMemoryAllocation);
        case -ENODEV:
                return fail(cudaErrorInvalidDevice);
        case -EFAULT:
                return fail(cudaErrorIllegalAddress);
        default:
                return fail(cudaErrorInvalidValue);
        }
}

static bool device_valid(int dev) {
        return dev >= 0 && dev < model_device_count();
}

static bool stream_valid(cudaStream_t s) {
        bool found = false;

        if (!s || s == FAKE_STREAM_LEGACY || s == FAKE_STREAM_PER_THREAD)
                return true;
        pthread_mutex_lock(&streams_lock);
        for (struct CUstream_st *i = streams; i && !found; i = i->next)
                found = i == s;
        pthread_mutex_unlock(&streams_lock);
        return found;
}

/* Maps a CUDA 13 location to a model location (device id or host). */
static int location_to_model(struct cudaMemLocation loc, int *ret) {
        switch (loc.type) {
        case cudaMemLocationTypeDevice:
                if (!device_valid(loc.id))
                        return -ENODEV;
                *ret = loc.id;
                return 0;
        case cudaMemLocationTypeHostNuma:
                if (loc.id < 0 || loc.id >= model_numa_nodes())
                        return -EINVAL;
                *ret = MODEL_LOC_HOST;
                return 0;
        case cudaMemLocationTypeHost:
        case cudaMemLocationTypeHostNumaCurrent:
                *ret = MODEL_LOC_HOST;
                return 0;
        default:
                return -EINVAL;
        }
}

cudaError_t cudaMalloc(void **devPtr, size_t size) {
        if (!model_enter())
                return fail(cudaErrorInitializationError);
        if (!devPtr)
                return fail(cudaErrorInvalidValue);
        if (model_fail_now(MODEL_FAIL_MALLOC))
                return fail(cudaErrorMemoryAllocation);
        return fail_errno(model_malloc(model_current_device(), size, devPtr));
}

cudaError_t cudaFree(void *devPtr) {
        unsigned delay_us;

        if (!model_enter())
                return fail(cudaErrorInitializationError);
        if (!devPtr)
                return cudaSuccess;
        delay_us = model_free_delay_us();
        if (delay_us)
                usleep(delay_us);
        return fail_errno(model_free(devPtr));
}

cudaError_t cudaMallocManaged(void **devPtr, size_t size, unsigned int flags) {
        if (!model_enter())
                return fail(cudaErrorInitializationError);
        if (!devPtr || size == 0 || (flags != cudaMemAttachGlobal && flags != FAKE_MEM_ATTACH_HOST))
                return fail(cudaErrorInvalidValue);
        if (model_fail_now(MODEL_FAIL_MALLOC_MANAGED))
                return fail(cudaErrorMemoryAllocation);
        return fail_errno(model_malloc_managed(model_current_device(), size, devPtr));
}

cudaError_t cudaMemAdvise(const void *devPtr, size_t count, enum cudaMemoryAdvise advice,
                          struct cudaMemLocation location) {
        int loc = MODEL_LOC_NONE, r;

        if (!model_enter())
                return fail(cudaErrorInitializationError);
        if (model_fail_now(MODEL_FAIL_ADVISE))
                return fail(cudaErrorInvalidValue);
        /* read-mostly and unset-preferred ignore the location */
        if (advice != cudaMemAdviseSetReadMostly && advice != cudaMemAdviseUnsetReadMostly &&
            advice != cudaMemAdviseUnsetPreferredLocation) {
                r = location_to_model(location, &loc);
                if (r < 0)
                        return fail_errno(r);
        }
        return fail_errno(model_advise(model_current_device(), devPtr, count, (int)advice, loc));
}

cudaError_t cudaMemPrefetchAsync(const void *devPtr, size_t count, struct cudaMemLocation location,
                                 unsigned int flags, cudaStream_t stream) {
        size_t moved = 0;
        unsigned delay_us;
        int loc, r;

        if (!model_enter())
                return fail(cudaErrorInitializationError);
        if (model_fail_now(MODEL_FAIL_PREFETCH))
                return fail(cudaErrorInvalidValue);
        if (flags != 0 || count == 0)
                return fail(cudaErrorInvalidValue);
        if (!stream_valid(stream))
                return fail(cudaErrorInvalidResourceHandle);
        r = location_to_model(location, &loc);
        if (r < 0)
                return fail_errno(r);
        r = model_prefetch(model_current_device(), devPtr, count, loc, &moved);
        /* the link's time, spent outside the model's lock */
        delay_us = model_prefetch_delay_us();
        if (delay_us > 0 && moved > 0) {
                uint64_t ns = (uint64_t)delay_us * 1000 * moved;
                struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000),
                                      .tv_nsec = (long)(ns % 1000000000)};
                while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                        ;
        }
        return fail_errno(r);
}

static cudaError_t stream_create(cudaStream_t *pStream, unsigned int flags) {
        struct CUstream_st *s;

        if (!model_enter())
                return fail(cudaErrorInitializationError);
        if (!pStream || (flags & ~(unsigned)cudaStreamNonBlocking) != 0)
                return fail(cudaErrorInvalidValue);
        s = calloc(1, sizeof(*s));
        if (!s)
                return fail(cudaErrorMemoryAllocation);
        s->device = model_current_device();
        s->flags = flags;
        pthread_mutex_lock(&streams_lock);
        s->next = streams;
        streams = s;
        pthread_mutex_unlock(&streams_lock);
        *pStream = s;
        return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *pStream) {
        return stream_create(pStream, 0);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags) {
        return stream_create(pStream, flags);
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
        struct CUstream_st *found = NULL;

        if (!model_enter())
                return fail(cudaErrorInitializationError);
        pthread_mutex_lock(&streams_lock);
        for (struct CUstream_st **i = &streams; *i; i = &(*i)->next)
                if (*i == stream) {
                        found = *i;
                        *i = found->next;
                        break;
                }
        pthread_mutex_unlock(&streams_lock);
        if (!found)
                return fail(cudaErrorInvalidResourceHandle);
        free(found);
        return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
        if (!model_enter())
                return fail(cudaErrorInitializationError);
        return stream_valid(stream) ? cudaSuccess : fail(cudaErrorInvalidResourceHandle);
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
        if (!model_enter())
                return fail(cudaErrorInitializationError);
        return stream_valid(stream) ? cudaSuccess : fail(cudaErrorInvalidResourceHandle);
}

cudaError_t cudaDeviceSynchronize(void) {
        if (!model_enter())
                return fail(cudaErrorInitializationError);
        return cudaSuccess;
}

cudaError_t cudaGetDevice(int *device) {
        if (!model_enter())
                return fail(cudaErrorInitializationError);
        if (!device)
                return fail(cudaErrorInvalidValue);
        *device = model_current_device();
        return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
        if (!model_enter())
                return fail(cudaErrorInitializationError);
        if (!device_valid(device))
                return fail(cudaErrorInvalidDevice);
        model_set_current_device(device);
        return cudaSuccess;
}

cudaError_t cudaGetDeviceCount(int *count) {
        if (!model_enter())
                return fail(cudaErrorInitializationError);
        if (!count)
                return fail(cudaErrorInvalidValue);
        *count = model_device_count();
        return cudaSuccess;
}

/* As measured on the H200 (DESIGN.md): managed memory and concurrent
 * managed access, no pageable memory access (no HMM).  Others read 0. */
cudaError_t cudaDeviceGetAttribute(int *value, int attr, int device) {
        if (!model_enter())
                return fail(cudaErrorInitializationError);
        if (!value)
                return fail(cudaErrorInvalidValue);
        if (!device_valid(device))
                return fail(cudaErrorInvalidDevice);
        *value = attr == FAKE_DEV_ATTR_MANAGED || attr == FAKE_DEV_ATTR_CONCURRENT;
        return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t *free, size_t *total) {
        size_t f, t;

        if (!model_enter())
                return fail(cudaErrorInitializationError);
        if (!free || !total)
                return fail(cudaErrorInvalidValue);
        (void)model_mem_info(model_current_device(), &f, &t);
        *free = f;
        *total = t;
        return cudaSuccess;
}

static cudaError_t memcpy_any(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind) {
        if (!model_enter())
                return fail(cudaErrorInitializationError);
        if ((int)kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault)
                return fail(cudaErrorInvalidValue);
        if (count == 0)
                return cudaSuccess;
        if (!dst || !src)
                return fail(cudaErrorInvalidValue);
        return fail_errno(model_copy(dst, src, count));
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind) {
        return memcpy_any(dst, src, count, kind);
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                            cudaStream_t stream) {
        if (!stream_valid(stream))
                return fail(cudaErrorInvalidResourceHandle);
        return memcpy_any(dst, src, count, kind);
}

static cudaError_t memset_any(void *devPtr, int value, size_t count) {
        if (!model_enter())
                return fail(cudaErrorInitializationError);
        if (count == 0)
                return cudaSuccess;
        return fail_errno(model_set(devPtr, value, count));
}

cudaError_t cudaMemset(void *devPtr, int value, size_t count) {
        return memset_any(devPtr, value, count);
}

cudaError_t cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t stream) {
        if (!stream_valid(stream))
                return fail(cudaErrorInvalidResourceHandle);
        return memset_any(devPtr, value, count);
}

const char *cudaGetErrorString(cudaError_t error) {
        for (size_t i = 0; i < sizeof(error_table) / sizeof(error_table[0]); i++)
                if (error_table[i].code == error)
                        return error_table[i].text;
        return "unrecognized error code";
}

const char *cudaGetErrorName(cudaError_t error) {
        for (size_t i = 0; i < sizeof(error_table) / sizeof(error_table[0]); i++)
                if (error_table[i].code == error)
                        return error_table[i].name;
        return "unrecognized error code";
}

cudaError_t cudaGetLastError(void) {
        cudaError_t e = last_error;

        last_error = cudaSuccess;
        return e;
}

cudaError_t cudaPeekAtLastError(void) {
        return last_error;
}

cudaError_t cudaDriverGetVersion(int *driverVersion) {
        if (!driverVersion)
                return fail(cudaErrorInvalidValue);
        *driverVersion = FAKE_CUDA_VERSION;
        return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int *runtimeVersion) {
        if (!runtimeVersion)
                return fail(cudaErrorInvalidValue);
        *runtimeVersion = FAKE_CUDA_VERSION;
        return cudaSuccess;
}

/* ---------------------------------------------------------------- fakecuda.h */

static int kernel(void *ptr, size_t len, enum model_access access, uint64_t seed, uint64_t *ret_bad) {
        model_init();
        return fail_errno(model_kernel(model_current_device(), ptr, len, access, seed, ret_bad));
}

int fakecuda_kernel_fill(void *ptr, size_t len, uint64_t seed) {
        return kernel(ptr, len, MODEL_ACCESS_FILL, seed, NULL);
}

int fakecuda_kernel_check(const void *ptr, size_t len, uint64_t seed, uint64_t *ret_bad_words) {
        if (!ret_bad_words)
                return fail(cudaErrorInvalidValue);
        return kernel((void *)(uintptr_t)ptr, len, MODEL_ACCESS_CHECK, seed, ret_bad_words);
}

int fakecuda_kernel_read(const void *ptr, size_t len) {
        return kernel((void *)(uintptr_t)ptr, len, MODEL_ACCESS_READ, 0, NULL);
}

void fakecuda_read_kernel(const void *ptr, size_t len) {
        fakecuda_kernel_read(ptr, len);
}

/* The parameters of the known kernels: (const void *ptr, size_t len). */
int fakecuda_param_info(const void *func, size_t i, size_t *ret_offset, size_t *ret_size) {
        if (func != (const void *)fakecuda_read_kernel || i >= 2 || !ret_offset || !ret_size)
                return -EINVAL;
        *ret_offset = i * 8;
        *ret_size = 8;
        return 0;
}

int fakecuda_launch(const void *func, void **args) {
        const void *ptr;
        size_t len;

        if (func != (const void *)fakecuda_read_kernel)
                return fail(cudaErrorInvalidDeviceFunction);
        if (!args || !args[0] || !args[1])
                return fail(cudaErrorInvalidValue);
        memcpy(&ptr, args[0], sizeof(ptr));
        memcpy(&len, args[1], sizeof(len));
        return fakecuda_kernel_read(ptr, len);
}

cudaError_t cudaLaunchKernel(const void *func, dim3 gridDim, dim3 blockDim, void **args, size_t sharedMem,
                             cudaStream_t stream) {
        if (!model_enter())
                return fail(cudaErrorInitializationError);
        if (!gridDim.x || !gridDim.y || !gridDim.z || !blockDim.x || !blockDim.y || !blockDim.z)
                return fail(cudaErrorInvalidValue);
        return fakecuda_launch(func, args);
}

/* CUDA 13's nvcc stubs launch through this internal entry point with a
 * kernel handle (here the kernel's address, as for cudaLaunchKernel).  As in
 * the real runtime, it does not go through the exported cudaLaunchKernel
 * (on the H200 a hook on that one saw none of these launches). */
cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void **args, size_t sharedMem,
                               cudaStream_t stream);
cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void **args, size_t sharedMem,
                               cudaStream_t stream) {
        if (!model_enter())
                return fail(cudaErrorInitializationError);
        if (!gridDim.x || !gridDim.y || !gridDim.z || !blockDim.x || !blockDim.y || !blockDim.z)
                return fail(cudaErrorInvalidValue);
        return fakecuda_launch((const void *)kernel, args);
}

cudaError_t cudaFuncGetParamInfo(const void *func, size_t paramIndex, size_t *paramOffset, size_t *paramSize) {
        return fakecuda_param_info(func, paramIndex, paramOffset, paramSize) == 0 ? cudaSuccess
                                                                                  : fail(cudaErrorInvalidValue);
}

int fakecuda_get_stats(int dev, struct fakecuda_stats *ret) {
        model_init();
        if (!device_valid(dev))
                return fail(cudaErrorInvalidDevice);
        if (!ret)
                return fail(cudaErrorInvalidValue);
        return fail_errno(model_get_stats(dev, ret));
}

int fakecuda_reset_stats(int dev) {
        model_init();
        if (!device_valid(dev))
                return fail(cudaErrorInvalidDevice);
        return fail_errno(model_reset_stats(dev));
}

int fakecuda_resident_bytes(const void *ptr, size_t len, int dev, uint64_t *ret_bytes) {
        model_init();
        if (!device_valid(dev))
                return fail(cudaErrorInvalidDevice);
        if (!ret_bytes)
                return fail(cudaErrorInvalidValue);
        return fail_errno(model_resident_bytes(ptr, len, dev, ret_bytes));
}

int fakecuda_page_info(const void *ptr, struct fakecuda_page_info *ret) {
        model_init();
        if (!ret)
                return fail(cudaErrorInvalidValue);
        return fail_errno(model_page_info(ptr, ret));
}
