/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The few CUDA runtime ABI definitions kvtier uses, so that the shim builds
 * without the CUDA toolkit and resolves everything at run time.  Values are
 * those of CUDA 13's driver_types.h; shim/cuda-abi-check.c proves they match
 * whenever the real headers are present at build time.  The fake CUDA in
 * tests/fakes implements this same ABI.
 */

#include <stddef.h>

/* Constants, as X(name, value): the enums below and the ABI check are both
 * generated from these lists. */
#define KVT_CUDA_CONSTS(X)                                                                         \
        X(cudaSuccess, 0)                                                                          \
        X(cudaErrorInvalidValue, 1)                                                                \
        X(cudaErrorMemoryAllocation, 2)                                                            \
        X(cudaErrorInitializationError, 3)                                                         \
        X(cudaErrorCudartUnloading, 4)                                                             \
        X(cudaErrorInvalidDevicePointer, 17)                                                       \
        X(cudaErrorInvalidDevice, 101)                                                             \
        X(cudaErrorInvalidResourceHandle, 400)                                                     \
        X(cudaErrorNotReady, 600)                                                                  \
        X(cudaErrorNotSupported, 801)                                                              \
        X(cudaErrorUnknown, 999)                                                                   \
        X(cudaMemAttachGlobal, 0x01)                                                               \
        X(cudaStreamNonBlocking, 0x01)                                                             \
        X(cudaEventDisableTiming, 0x02)                                                            \
        X(cudaCpuDeviceId, -1)

#define KVT_CUDA_ADVISE(X)                                                                         \
        X(cudaMemAdviseSetReadMostly, 1)                                                           \
        X(cudaMemAdviseUnsetReadMostly, 2)                                                         \
        X(cudaMemAdviseSetPreferredLocation, 3)                                                    \
        X(cudaMemAdviseUnsetPreferredLocation, 4)                                                  \
        X(cudaMemAdviseSetAccessedBy, 5)                                                           \
        X(cudaMemAdviseUnsetAccessedBy, 6)

#define KVT_CUDA_LOCATION_TYPES(X)                                                                 \
        X(cudaMemLocationTypeInvalid, 0)                                                           \
        X(cudaMemLocationTypeDevice, 1)                                                            \
        X(cudaMemLocationTypeHost, 2)                                                              \
        X(cudaMemLocationTypeHostNuma, 3)                                                          \
        X(cudaMemLocationTypeHostNumaCurrent, 4)

/* Device attributes the shim reads (and the fake answers). */
#define KVT_CUDA_DEVICE_ATTRS(X)                                                                   \
        X(cudaDevAttrManagedMemory, 83)                                                            \
        X(cudaDevAttrPageableMemoryAccess, 88)                                                     \
        X(cudaDevAttrConcurrentManagedAccess, 89)                                                  \
        X(cudaDevAttrHostNumaId, 134)

#define KVT_CUDA_MEMCPY_KINDS(X)                                                                   \
        X(cudaMemcpyHostToHost, 0)                                                                 \
        X(cudaMemcpyHostToDevice, 1)                                                               \
        X(cudaMemcpyDeviceToHost, 2)                                                               \
        X(cudaMemcpyDeviceToDevice, 3)                                                             \
        X(cudaMemcpyDefault, 4)

#ifndef KVT_CUDA_ABI_CHECK
typedef int cudaError_t;
typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;
typedef void (*cudaHostFn_t)(void *userData);

#define KVT_CUDA_ENUM(name, value) name = (value),
enum { KVT_CUDA_CONSTS(KVT_CUDA_ENUM) };
enum cudaMemoryAdvise { KVT_CUDA_ADVISE(KVT_CUDA_ENUM) };
enum cudaMemLocationType { KVT_CUDA_LOCATION_TYPES(KVT_CUDA_ENUM) };
enum cudaMemcpyKind { KVT_CUDA_MEMCPY_KINDS(KVT_CUDA_ENUM) };
enum cudaDeviceAttr { KVT_CUDA_DEVICE_ATTRS(KVT_CUDA_ENUM) };
#undef KVT_CUDA_ENUM

struct cudaMemLocation {
        enum cudaMemLocationType type;
        int id;
};
#endif

/*
 * The runtime entry points the shim calls or interposes, as
 * X(return type, name, parameter list).  CUDA 13 signatures: advice and
 * prefetch take a struct cudaMemLocation (the CUDA 12 "_v2" forms).
 */
#define KVT_CUDART_FUNCS(X)                                                                        \
        X(cudaError_t, cudaMalloc, (void **devPtr, size_t size))                                   \
        X(cudaError_t, cudaFree, (void *devPtr))                                                   \
        X(cudaError_t, cudaMallocManaged, (void **devPtr, size_t size, unsigned int flags))        \
        X(cudaError_t, cudaMemAdvise,                                                              \
          (const void *devPtr, size_t count, enum cudaMemoryAdvise advice,                         \
           struct cudaMemLocation location))                                                       \
        X(cudaError_t, cudaMemPrefetchAsync,                                                       \
          (const void *devPtr, size_t count, struct cudaMemLocation location, unsigned int flags,  \
           cudaStream_t stream))                                                                   \
        X(cudaError_t, cudaStreamCreateWithFlags, (cudaStream_t * pStream, unsigned int flags))    \
        X(cudaError_t, cudaStreamDestroy, (cudaStream_t stream))                                   \
        X(cudaError_t, cudaStreamSynchronize, (cudaStream_t stream))                               \
        X(cudaError_t, cudaGetDevice, (int *device))                                               \
        X(cudaError_t, cudaSetDevice, (int device))                                                \
        X(cudaError_t, cudaMemGetInfo, (size_t * free, size_t *total))                             \
        X(cudaError_t, cudaDeviceGetAttribute, (int *value, enum cudaDeviceAttr attr, int device)) \
        X(cudaError_t, cudaEventCreateWithFlags, (cudaEvent_t * event, unsigned int flags))        \
        X(cudaError_t, cudaEventRecord, (cudaEvent_t event, cudaStream_t stream))                  \
        X(cudaError_t, cudaEventQuery, (cudaEvent_t event))                                        \
        X(cudaError_t, cudaEventDestroy, (cudaEvent_t event))                                      \
        X(cudaError_t, cudaLaunchHostFunc, (cudaStream_t stream, cudaHostFn_t fn, void *userData)) \
        X(const char *, cudaGetErrorString, (cudaError_t error))

/*
 * More runtime entry points, used by the fake CUDA and the test programs
 * (never by the shim); listed here so that the ABI check covers them too.
 */
#define KVT_CUDART_TEST_FUNCS(X)                                                                   \
        X(cudaError_t, cudaStreamCreate, (cudaStream_t * pStream))                                 \
        X(cudaError_t, cudaStreamQuery, (cudaStream_t stream))                                     \
        X(cudaError_t, cudaDeviceSynchronize, (void))                                              \
        X(cudaError_t, cudaGetDeviceCount, (int *count))                                           \
        X(cudaError_t, cudaMemcpy, (void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)) \
        X(cudaError_t, cudaMemcpyAsync,                                                            \
          (void *dst, const void *src, size_t count, enum cudaMemcpyKind kind, cudaStream_t stream))  \
        X(cudaError_t, cudaMemset, (void *devPtr, int value, size_t count))                        \
        X(cudaError_t, cudaMemsetAsync, (void *devPtr, int value, size_t count, cudaStream_t stream)) \
        X(const char *, cudaGetErrorName, (cudaError_t error))                                     \
        X(cudaError_t, cudaGetLastError, (void))                                                   \
        X(cudaError_t, cudaPeekAtLastError, (void))                                                \
        X(cudaError_t, cudaDriverGetVersion, (int *driverVersion))                                 \
        X(cudaError_t, cudaRuntimeGetVersion, (int *runtimeVersion))

/* Declares a list's prototypes as an application gets them from CUDA's
 * headers: KVT_CUDART_FUNCS(KVT_CUDA_PROTOTYPE). */
#define KVT_CUDA_PROTOTYPE(ret, name, args) ret name args;
