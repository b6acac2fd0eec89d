/* SPDX-License-Identifier: MIT */
/*
 * Driver API hooks, and the two ways to reach them without symbol
 * interposition: cuGetProcAddress (how the CUDA runtime, static or not,
 * finds every driver function) and cudaGetDriverEntryPoint.  Captured
 * memory is the same managed memory as for cudaMalloc; the driver's caller
 * shares the runtime's primary context.  A hook whose real function is not
 * resolved returns CUDA_ERROR_NOT_INITIALIZED, as a driver not loaded would.
 */
#include "config.h"

#include <errno.h>

#include "hooks.h"
#include "protocol.h"
#include "real.h"
#include "shim.h"

static CUresult from_cuda_error(cudaError_t e) {
        return e == cudaSuccess ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

static CUresult alloc(uint32_t api, CUdeviceptr *dptr, size_t bytesize) {
        void *p = NULL;
        int r = dptr ? shim_capture(api, bytesize, &p) : -EINVAL;

        if (r == -ENOSPC)
                return CUDA_ERROR_OUT_OF_MEMORY; /* past the ceiling, as a full card */
        if (r < 0)
                return CUDA_ERROR_NOT_FOUND; /* not captured: the caller allocates */
        *dptr = (CUdeviceptr)(uintptr_t)p;
        return CUDA_SUCCESS;
}

CUresult kvt_hook_cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize) {
        __auto_type real = REAL_CUDA(cuMemAlloc_v2);

        if (!real)
                return CUDA_ERROR_NOT_INITIALIZED;
        CUresult r = alloc(KVT_API_CU_MEM_ALLOC, dptr, bytesize);

        if (r != CUDA_ERROR_NOT_FOUND)
                return r;
        return PASS(real(dptr, bytesize));
}
KVT_HOOK_EXPORT(cuMemAlloc_v2)

CUresult kvt_hook_cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream) {
        __auto_type real = REAL_CUDA(cuMemAllocAsync);

        if (!real)
                return CUDA_ERROR_NOT_INITIALIZED;
        CUresult r = alloc(KVT_API_CU_MEM_ALLOC_ASYNC, dptr, bytesize);

        if (r != CUDA_ERROR_NOT_FOUND)
                return r;
        return PASS(real(dptr, bytesize, hStream));
}
KVT_HOOK_EXPORT(cuMemAllocAsync)

CUresult kvt_hook_cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                          CUstream hStream) {
        __auto_type real = REAL_CUDA(cuMemAllocFromPoolAsync);

        if (!real)
                return CUDA_ERROR_NOT_INITIALIZED;
        CUresult r = alloc(KVT_API_CU_MEM_ALLOC_FROM_POOL_ASYNC, dptr, bytesize);

        if (r != CUDA_ERROR_NOT_FOUND)
                return r;
        return PASS(real(dptr, bytesize, pool, hStream));
}
KVT_HOOK_EXPORT(cuMemAllocFromPoolAsync)

CUresult kvt_hook_cuMemFree_v2(CUdeviceptr dptr) {
        __auto_type real = REAL_CUDA(cuMemFree_v2);
        cudaError_t e;

        if (!real)
                return CUDA_ERROR_NOT_INITIALIZED;
        if (shim_free((void *)(uintptr_t)dptr, false, NULL, &e) == 0)
                return from_cuda_error(e);
        return PASS(real(dptr));
}
KVT_HOOK_EXPORT(cuMemFree_v2)

CUresult kvt_hook_cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) {
        __auto_type real = REAL_CUDA(cuMemFreeAsync);
        cudaError_t e;

        if (!real)
                return CUDA_ERROR_NOT_INITIALIZED;
        if (shim_free((void *)(uintptr_t)dptr, true, hStream, &e) == 0)
                return from_cuda_error(e);
        return PASS(real(dptr, hStream));
}
KVT_HOOK_EXPORT(cuMemFreeAsync)

CUresult kvt_hook_cuMemGetInfo_v2(size_t *free, size_t *total) {
        __auto_type real = REAL_CUDA(cuMemGetInfo_v2);
        size_t real_free = 0, real_total = 0;
        CUresult e;

        if (!real)
                return CUDA_ERROR_NOT_INITIALIZED;
        if (!free || !total || !shim_capacity_on())
                return PASS(real(free, total));
        e = PASS(real(&real_free, &real_total));
        if (e != CUDA_SUCCESS)
                return e;
        shim_capacity_view(real_free, real_total, free, total);
        return CUDA_SUCCESS;
}
KVT_HOOK_EXPORT(cuMemGetInfo_v2)

CUresult kvt_hook_cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                      CUdriverProcAddressQueryResult *symbolStatus) {
        __auto_type real = REAL_CUDA(cuGetProcAddress_v2);
        CUresult e;

        if (!real)
                return CUDA_ERROR_NOT_INITIALIZED;
        e = PASS(real(symbol, pfn, cudaVersion, flags, symbolStatus));
        if (e == CUDA_SUCCESS && pfn)
                *pfn = hook_driver_proc(symbol, cudaVersion, flags, *pfn);
        return e;
}
KVT_HOOK_EXPORT(cuGetProcAddress_v2)

/* The pre-CUDA-12 form, still exported by libcuda. */
CUresult kvt_hook_cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags) {
        __auto_type real = REAL_CUDA(cuGetProcAddress);
        CUresult e;

        if (!real)
                return CUDA_ERROR_NOT_INITIALIZED;
        e = PASS(real(symbol, pfn, cudaVersion, flags));
        if (e == CUDA_SUCCESS && pfn)
                *pfn = hook_driver_proc(symbol, cudaVersion, flags, *pfn);
        return e;
}
KVT_HOOK_EXPORT(cuGetProcAddress)

/* cudaGetDriverEntryPoint asks for the version the runtime was built for:
 * a CUDA 12+ runtime, whose forms the hooks are. */
#define RUNTIME_DRIVER_VERSION 12000

cudaError_t kvt_hook_cudaGetDriverEntryPoint(const char *symbol, void **funcPtr, unsigned long long flags,
                                             enum cudaDriverEntryPointQueryResult *driverStatus) {
        const struct kvt_cudart *rt = real_cudart();
        cudaError_t e;

        if (!rt || !rt->cudaGetDriverEntryPoint)
                return cudaErrorInitializationError;
        e = PASS(rt->cudaGetDriverEntryPoint(symbol, funcPtr, flags, driverStatus));
        if (e == cudaSuccess && funcPtr)
                *funcPtr = hook_driver_proc(symbol, RUNTIME_DRIVER_VERSION, flags, *funcPtr);
        return e;
}
KVT_HOOK_EXPORT(cudaGetDriverEntryPoint)

cudaError_t kvt_hook_cudaGetDriverEntryPointByVersion(const char *symbol, void **funcPtr, unsigned int cudaVersion,
                                                      unsigned long long flags,
                                                      enum cudaDriverEntryPointQueryResult *driverStatus) {
        const struct kvt_cudart *rt = real_cudart();
        cudaError_t e;

        if (!rt || !rt->cudaGetDriverEntryPointByVersion)
                return cudaErrorInitializationError;
        e = PASS(rt->cudaGetDriverEntryPointByVersion(symbol, funcPtr, cudaVersion, flags, driverStatus));
        if (e == cudaSuccess && funcPtr)
                *funcPtr = hook_driver_proc(symbol, (int)cudaVersion, flags, *funcPtr);
        return e;
}
KVT_HOOK_EXPORT(cudaGetDriverEntryPointByVersion)
