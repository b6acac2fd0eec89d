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
        X(cudaErrorInvalidDeviceFunction, 98)                                                      \
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

struct dim3 {
        unsigned int x, y, z;
};
typedef struct dim3 dim3;
/* The launch configuration, as far as a paced launch reads it (its stream). */
typedef struct cudaLaunchConfig_st {
        dim3 gridDim;
        dim3 blockDim;
        size_t dynamicSmemBytes;
        cudaStream_t stream;
        void *attrs;
        unsigned int numAttrs;
} cudaLaunchConfig_t;
typedef struct CUkern_st *cudaKernel_t;               /* the runtime's CUkernel */
#endif

/*
 * Driver API types.  CUstream is the runtime's cudaStream_t (same struct),
 * CUkernel the runtime's cudaKernel_t; memory pools are one opaque type in
 * both APIs.
 */
#ifndef KVT_CUDA_ABI_CHECK
typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef unsigned long long CUmemGenericAllocationHandle;
typedef unsigned long long cuuint64_t;
typedef struct CUstream_st *CUstream;
typedef struct CUmemPoolHandle_st *CUmemoryPool;
typedef struct CUmemPoolHandle_st *cudaMemPool_t;
typedef struct CUmemAllocationProp_st CUmemAllocationProp; /* only passed through */
typedef struct CUfunc_st *CUfunction;
typedef struct CUkern_st *CUkernel;
/* The driver's launch configuration, as far as a paced launch reads it. */
typedef struct CUlaunchConfig_st {
        unsigned int gridDimX, gridDimY, gridDimZ;
        unsigned int blockDimX, blockDimY, blockDimZ;
        unsigned int sharedMemBytes;
        CUstream hStream;
        void *attrs;
        unsigned int numAttrs;
} CUlaunchConfig;
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef struct CUctxCreateParams_st CUctxCreateParams; /* only passed as NULL */
typedef enum CUdriverProcAddressQueryResult_enum {
        CU_GET_PROC_ADDRESS_SUCCESS = 0,
        CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND = 1,
        CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT = 2,
} CUdriverProcAddressQueryResult;
enum cudaDriverEntryPointQueryResult {
        cudaDriverEntryPointSuccess = 0,
        cudaDriverEntryPointSymbolNotFound = 1,
        cudaDriverEntryPointVersionNotSufficent = 2,
};
#endif

#define KVT_CU_CONSTS(X)                                                                           \
        X(CUDA_SUCCESS, 0)                                                                         \
        X(CUDA_ERROR_INVALID_VALUE, 1)                                                             \
        X(CUDA_ERROR_OUT_OF_MEMORY, 2)                                                             \
        X(CUDA_ERROR_NOT_INITIALIZED, 3)                                                           \
        X(CUDA_ERROR_NOT_FOUND, 500)                                                               \
        X(CUDA_ERROR_NOT_READY, 600)                                                               \
        X(CUDA_ERROR_NOT_SUPPORTED, 801)                                                           \
        X(CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, 2)                                       \
        X(CU_CTX_SCHED_BLOCKING_SYNC, 0x04)

/* Context limits the evictors lower in their own contexts. */
#define KVT_CU_LIMITS(X)                                                                           \
        X(CU_LIMIT_STACK_SIZE, 0x00)                                                               \
        X(CU_LIMIT_PRINTF_FIFO_SIZE, 0x01)                                                         \
        X(CU_LIMIT_MALLOC_HEAP_SIZE, 0x02)

/* What cuStreamIsCapturing says of a stream (a paced launch asks). */
#define KVT_CU_CAPTURE_STATUS(X)                                                                   \
        X(CU_STREAM_CAPTURE_STATUS_NONE, 0)                                                        \
        X(CU_STREAM_CAPTURE_STATUS_ACTIVE, 1)                                                      \
        X(CU_STREAM_CAPTURE_STATUS_INVALIDATED, 2)

#ifndef KVT_CUDA_ABI_CHECK
#define KVT_CUDA_ENUM(name, value) name = (value),
enum { KVT_CU_CONSTS(KVT_CUDA_ENUM) };
typedef enum CUlimit_enum { KVT_CU_LIMITS(KVT_CUDA_ENUM) } CUlimit;
typedef enum CUstreamCaptureStatus_enum { KVT_CU_CAPTURE_STATUS(KVT_CUDA_ENUM) } CUstreamCaptureStatus;
#undef KVT_CUDA_ENUM
/* The calling thread's default stream, as cuda.h defines it. */
#define CU_STREAM_PER_THREAD ((CUstream)0x2)
#endif

/*
 * The entry points the shim interposes, as X(return type, name, parameter
 * list): one list per library, which generates the prototypes, the tables of
 * real functions (shim/real.h), and the hook table that dlsym and
 * cuGetProcAddress consult (shim/hooks.c).  Adding a hook is one line here
 * plus its wrapper kvt_hook_<name>, exported with KVT_HOOK_EXPORT(name)
 * (shim/hooks.h).  No name is in two lists (shim/real.c checks).
 */
#define KVT_CUDART_HOOKS(X)                                                                        \
        X(cudaError_t, cudaMalloc, (void **devPtr, size_t size))                                   \
        X(cudaError_t, cudaFree, (void *devPtr))                                                   \
        X(cudaError_t, cudaMemGetInfo, (size_t * free, size_t *total))                             \
        X(cudaError_t, cudaMallocAsync, (void **devPtr, size_t size, cudaStream_t hStream))        \
        X(cudaError_t, cudaFreeAsync, (void *devPtr, cudaStream_t hStream))                        \
        X(cudaError_t, cudaMallocFromPoolAsync,                                                    \
          (void **ptr, size_t size, cudaMemPool_t memPool, cudaStream_t stream))                   \
        X(cudaError_t, cudaGetDriverEntryPoint,                                                    \
          (const char *symbol, void **funcPtr, unsigned long long flags,                           \
           enum cudaDriverEntryPointQueryResult *driverStatus))                                    \
        X(cudaError_t, cudaGetDriverEntryPointByVersion,                                           \
          (const char *symbol, void **funcPtr, unsigned int cudaVersion, unsigned long long flags, \
           enum cudaDriverEntryPointQueryResult *driverStatus))                                    \
        KVT_CUDART_LAUNCH_HOOKS(X)                                                                 \
        KVT_CUDART_STUB_HOOKS(X)

/* Kernel launches, hooked for access heat (shim/launch.c). */
#define KVT_CUDART_LAUNCH_HOOKS(X)                                                                 \
        X(cudaError_t, cudaLaunchKernel,                                                           \
          (const void *func, dim3 gridDim, dim3 blockDim, void **args, size_t sharedMem,           \
           cudaStream_t stream))                                                                   \
        X(cudaError_t, cudaLaunchKernelExC, (const cudaLaunchConfig_t *config, const void *func, void **args))

/* What CUDA 13's nvcc launch stubs (<<<...>>>) call instead of the public
 * launches (crt/host_runtime.h, crt/device_functions.h).  Declared for C++
 * only, so the ABI check skips them. */
#define KVT_CUDART_STUB_HOOKS(X)                                                                   \
        X(cudaError_t, __cudaLaunchKernel,                                                         \
          (cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void **args, size_t sharedMem,        \
           cudaStream_t stream))                                                                   \
        X(cudaError_t, __cudaLaunchKernel_ptsz,                                                    \
          (cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void **args, size_t sharedMem,        \
           cudaStream_t stream))

#define KVT_CUDA_HOOKS(X)                                                                          \
        X(CUresult, cuMemAlloc_v2, (CUdeviceptr * dptr, size_t bytesize))                          \
        X(CUresult, cuMemFree_v2, (CUdeviceptr dptr))                                              \
        X(CUresult, cuMemGetInfo_v2, (size_t * free, size_t *total))                               \
        X(CUresult, cuMemAllocAsync, (CUdeviceptr * dptr, size_t bytesize, CUstream hStream))      \
        X(CUresult, cuMemFreeAsync, (CUdeviceptr dptr, CUstream hStream))                          \
        X(CUresult, cuMemAllocFromPoolAsync,                                                       \
          (CUdeviceptr * dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream))              \
        X(CUresult, cuMemCreate,                                                                   \
          (CUmemGenericAllocationHandle * handle, size_t size, const CUmemAllocationProp *prop,    \
           unsigned long long flags))                                                              \
        X(CUresult, cuMemRelease, (CUmemGenericAllocationHandle handle))                           \
        X(CUresult, cuMemMap,                                                                      \
          (CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,       \
           unsigned long long flags))                                                              \
        X(CUresult, cuMemUnmap, (CUdeviceptr ptr, size_t size))                                    \
        X(CUresult, cuGetProcAddress_v2,                                                           \
          (const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,                      \
           CUdriverProcAddressQueryResult *symbolStatus))                                          \
        KVT_CUDA_LAUNCH_HOOKS(X)                                                                   \
        KVT_CUDA_LEGACY_HOOKS(X)

/* The driver's kernel launches: cuBLAS, Triton and a static cudart launch
 * through pointers fetched with cuGetProcAddress, never through the symbol. */
#define KVT_CUDA_LAUNCH_HOOKS(X)                                                                   \
        X(CUresult, cuLaunchKernel,                                                                \
          (CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,       \
           unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,                 \
           unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra))      \
        X(CUresult, cuLaunchKernelEx,                                                              \
          (const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra))

/* Hooked symbols that cuda.h no longer declares under their name (it maps
 * cuGetProcAddress to cuGetProcAddress_v2), so the ABI check skips them. */
#define KVT_CUDA_LEGACY_HOOKS(X)                                                                   \
        X(CUresult, cuGetProcAddress, (const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags))

/*
 * The entry points the shim calls without interposing them.  Runtime: CUDA
 * 13 signatures, advice and prefetch take a struct cudaMemLocation (the CUDA
 * 12 "_v2" forms).  A runtime without one of them is not used.
 */
#define KVT_CUDART_CALLS(X)                                                                        \
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
        X(cudaError_t, cudaEventCreateWithFlags, (cudaEvent_t * event, unsigned int flags))        \
        X(cudaError_t, cudaEventRecord, (cudaEvent_t event, cudaStream_t stream))                  \
        X(cudaError_t, cudaEventSynchronize, (cudaEvent_t event))                                  \
        X(cudaError_t, cudaEventDestroy, (cudaEvent_t event))                                      \
        X(cudaError_t, cudaGetDevice, (int *device))                                               \
        X(cudaError_t, cudaSetDevice, (int device))                                                \
        X(cudaError_t, cudaDeviceGetAttribute, (int *value, enum cudaDeviceAttr attr, int device)) \
        X(cudaError_t, cudaEventQuery, (cudaEvent_t event))                                        \
        X(cudaError_t, cudaLaunchHostFunc, (cudaStream_t stream, cudaHostFn_t fn, void *userData)) \
        X(const char *, cudaGetErrorString, (cudaError_t error))

/*
 * Driver: the mover's evictor threads work in CUDA contexts of their own
 * (shim/evictors.c), with all of these or none.  CUDA 13 names (cuCtxCreate
 * is cuCtxCreate_v4 since CUDA 12.5).
 */
#define KVT_CUDA_CALLS(X)                                                                          \
        X(CUresult, cuDeviceGet, (CUdevice * device, int ordinal))                                 \
        X(CUresult, cuCtxCreate_v4,                                                                \
          (CUcontext * pctx, CUctxCreateParams * ctxCreateParams, unsigned int flags, CUdevice dev)) \
        X(CUresult, cuCtxSetCurrent, (CUcontext ctx))                                              \
        X(CUresult, cuCtxSetLimit, (CUlimit limit, size_t value))                                  \
        X(CUresult, cuCtxDestroy_v2, (CUcontext ctx))

/* What the launch hooks ask about a kernel's parameters, and about its
 * stream when the launch is paced: optional, since cudaFuncGetParamInfo
 * (CUDA 12.4+) may be missing, and that must cost the heat (or the
 * pacing), not the shim. */
#define KVT_CUDART_LAUNCH_CALLS(X)                                                                 \
        X(cudaError_t, cudaFuncGetParamInfo,                                                       \
          (const void *func, size_t paramIndex, size_t *paramOffset, size_t *paramSize))

#define KVT_CUDA_LAUNCH_CALLS(X)                                                                   \
        X(CUresult, cuFuncGetParamInfo,                                                            \
          (CUfunction func, size_t paramIndex, size_t *paramOffset, size_t *paramSize))             \
        X(CUresult, cuKernelGetParamInfo,                                                          \
          (CUkernel kernel, size_t paramIndex, size_t *paramOffset, size_t *paramSize))             \
        X(CUresult, cuStreamQuery, (CUstream hStream))                                             \
        X(CUresult, cuStreamIsCapturing, (CUstream hStream, CUstreamCaptureStatus * captureStatus))

/* What the SSD tier's spill and restore call (shim/ssd.c): optional, a
 * runtime without one of them costs that step only (no pinning of the
 * staging buffer; no discard before CUDA 12.8: the range keeps its memory). */
#define KVT_CUDART_SSD_CALLS(X)                                                                    \
        X(cudaError_t, cudaMemcpyAsync,                                                            \
          (void *dst, const void *src, size_t count, enum cudaMemcpyKind kind, cudaStream_t stream))  \
        X(cudaError_t, cudaHostRegister, (void *ptr, size_t size, unsigned int flags))             \
        X(cudaError_t, cudaHostUnregister, (void *ptr))                                            \
        X(cudaError_t, cudaMemDiscardBatchAsync,                                                   \
          (void **dptrs, size_t *sizes, size_t count, unsigned long long flags, cudaStream_t stream))

/* What the evictors' probes call (shim/evictors.c): optional, a runtime
 * without it (before CUDA 12.8) sends a probe's pages one prefetch each. */
#define KVT_CUDART_SAMPLE_CALLS(X)                                                                 \
        X(cudaError_t, cudaMemPrefetchBatchAsync,                                                  \
          (void **dptrs, size_t *sizes, size_t count, struct cudaMemLocation *prefetchLocs,        \
           size_t *prefetchLocIdxs, size_t numPrefetchLocs, unsigned long long flags,              \
           cudaStream_t stream))

/* Every runtime entry point the shim resolves: one pointer each in struct
 * kvt_cudart, in this order. */
#define KVT_CUDART_FUNCS(X)                                                                        \
        KVT_CUDART_HOOKS(X) KVT_CUDART_CALLS(X) KVT_CUDART_LAUNCH_CALLS(X) KVT_CUDART_SSD_CALLS(X) \
        KVT_CUDART_SAMPLE_CALLS(X)

/* Every driver entry point the shim resolves: struct kvt_cuda, in this order. */
#define KVT_CUDA_FUNCS(X) KVT_CUDA_HOOKS(X) KVT_CUDA_LAUNCH_CALLS(X) KVT_CUDA_CALLS(X)

/* Every hooked symbol, runtime first. */
#define KVT_HOOKS(X) KVT_CUDART_HOOKS(X) KVT_CUDA_HOOKS(X)

/* The public launches and their parameter queries, as the fake CUDA and
 * the test programs declare them: parts of the lists above. */
#define KVT_CUDART_LAUNCH_FUNCS(X) KVT_CUDART_LAUNCH_HOOKS(X) KVT_CUDART_LAUNCH_CALLS(X)
#define KVT_CUDA_DRIVER_LAUNCH_FUNCS(X) KVT_CUDA_LAUNCH_HOOKS(X) KVT_CUDA_LAUNCH_CALLS(X)

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
