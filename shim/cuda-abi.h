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
        X(cudaErrorInvalidDevicePointer, 17)                                                       \
        X(cudaErrorInvalidDeviceFunction, 98)                                                      \
        X(cudaErrorInvalidDevice, 101)                                                             \
        X(cudaErrorInvalidResourceHandle, 400)                                                     \
        X(cudaErrorNotReady, 600)                                                                  \
        X(cudaErrorNotSupported, 801)                                                              \
        X(cudaErrorUnknown, 999)                                                                   \
        X(cudaMemAttachGlobal, 0x01)                                                               \
        X(cudaStreamNonBlocking, 0x01)                                                             \
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

#define KVT_CUDA_MEMCPY_KINDS(X)                                                                   \
        X(cudaMemcpyHostToHost, 0)                                                                 \
        X(cudaMemcpyHostToDevice, 1)                                                               \
        X(cudaMemcpyDeviceToHost, 2)                                                               \
        X(cudaMemcpyDeviceToDevice, 3)                                                             \
        X(cudaMemcpyDefault, 4)

#ifndef KVT_CUDA_ABI_CHECK
typedef int cudaError_t;
typedef struct CUstream_st *cudaStream_t;

#define KVT_CUDA_ENUM(name, value) name = (value),
enum { KVT_CUDA_CONSTS(KVT_CUDA_ENUM) };
enum cudaMemoryAdvise { KVT_CUDA_ADVISE(KVT_CUDA_ENUM) };
enum cudaMemLocationType { KVT_CUDA_LOCATION_TYPES(KVT_CUDA_ENUM) };
enum cudaMemcpyKind { KVT_CUDA_MEMCPY_KINDS(KVT_CUDA_ENUM) };
#undef KVT_CUDA_ENUM

struct cudaMemLocation {
        enum cudaMemLocationType type;
        int id;
};

struct dim3 {
        unsigned int x, y, z;
};
typedef struct dim3 dim3;

/* Driver API types of the launch hooks (cuda.h). */
typedef int CUresult;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef struct cudaLaunchConfig_st cudaLaunchConfig_t; /* only passed through */
typedef struct CUkern_st *cudaKernel_t;               /* the runtime's CUkernel */
typedef struct CUkern_st *CUkernel;
typedef struct CUlaunchConfig_st CUlaunchConfig;      /* only passed through */
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

/*
 * Kernel launches, hooked for access heat (shim/launch.c).  Resolved apart
 * from KVT_CUDART_FUNCS: cudaFuncGetParamInfo (CUDA 12.4+) may be missing,
 * and that must cost the heat, not the shim.
 */
#define KVT_CUDART_LAUNCH_FUNCS(X)                                                                 \
        X(cudaError_t, cudaLaunchKernel,                                                           \
          (const void *func, dim3 gridDim, dim3 blockDim, void **args, size_t sharedMem,           \
           cudaStream_t stream))                                                                   \
        X(cudaError_t, cudaLaunchKernelExC, (const cudaLaunchConfig_t *config, const void *func, void **args)) \
        X(cudaError_t, cudaFuncGetParamInfo,                                                       \
          (const void *func, size_t paramIndex, size_t *paramOffset, size_t *paramSize))

#define KVT_CUDA_DRIVER_LAUNCH_FUNCS(X)                                                            \
        X(CUresult, cuLaunchKernel,                                                                \
          (CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,       \
           unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,                 \
           unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra))      \
        X(CUresult, cuLaunchKernelEx,                                                              \
          (const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra))          \
        X(CUresult, cuFuncGetParamInfo,                                                            \
          (CUfunction func, size_t paramIndex, size_t *paramOffset, size_t *paramSize))             \
        X(CUresult, cuKernelGetParamInfo,                                                          \
          (CUkernel kernel, size_t paramIndex, size_t *paramOffset, size_t *paramSize))

/* Declares a list's prototypes as an application gets them from CUDA's
 * headers: KVT_CUDART_FUNCS(KVT_CUDA_PROTOTYPE). */
#define KVT_CUDA_PROTOTYPE(ret, name, args) ret name args;
