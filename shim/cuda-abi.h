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

typedef int cudaError_t;
typedef struct CUstream_st *cudaStream_t;

enum {
        cudaSuccess = 0,
        cudaErrorInvalidValue = 1,
        cudaErrorMemoryAllocation = 2,
        cudaErrorInitializationError = 3,
        cudaErrorInvalidDevicePointer = 17,
        cudaErrorInvalidDevice = 101,
        cudaErrorInvalidResourceHandle = 400,
        cudaErrorNotReady = 600,
        cudaErrorNotSupported = 801,
        cudaErrorUnknown = 999,
};

#define cudaMemAttachGlobal   0x01
#define cudaStreamNonBlocking 0x01
#define cudaCpuDeviceId       (-1)

enum cudaMemoryAdvise {
        cudaMemAdviseSetReadMostly = 1,
        cudaMemAdviseUnsetReadMostly = 2,
        cudaMemAdviseSetPreferredLocation = 3,
        cudaMemAdviseUnsetPreferredLocation = 4,
        cudaMemAdviseSetAccessedBy = 5,
        cudaMemAdviseUnsetAccessedBy = 6,
};

enum cudaMemLocationType {
        cudaMemLocationTypeInvalid = 0,
        cudaMemLocationTypeDevice = 1,
        cudaMemLocationTypeHost = 2,
        cudaMemLocationTypeHostNuma = 3,
        cudaMemLocationTypeHostNumaCurrent = 4,
};

struct cudaMemLocation {
        enum cudaMemLocationType type;
        int id;
};

enum cudaMemcpyKind {
        cudaMemcpyHostToHost = 0,
        cudaMemcpyHostToDevice = 1,
        cudaMemcpyDeviceToHost = 2,
        cudaMemcpyDeviceToDevice = 3,
        cudaMemcpyDefault = 4,
};

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
        X(const char *, cudaGetErrorString, (cudaError_t error))
