/* SPDX-License-Identifier: MIT */

/*
 * Fake libcuda.so.1: the few driver API entry points kvtier touches, on the
 * same residency model as the fake runtime (model.c, in libcudart).  The
 * current device is the runtime's per-thread current device (the primary
 * context).  As with the real runtime, which calls cuInit itself, any
 * runtime call also initializes the driver.  cuGetProcAddress(_v2) hands out these same functions, so a
 * shim that interposes it can be tested.
 */

#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "model.h"

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef uint64_t cuuint64_t;

/* Values from CUDA 13's cuda.h. */
enum {
        CUDA_SUCCESS = 0,
        CUDA_ERROR_INVALID_VALUE = 1,
        CUDA_ERROR_OUT_OF_MEMORY = 2,
        CUDA_ERROR_NOT_INITIALIZED = 3,
        CUDA_ERROR_INVALID_DEVICE = 101,
        CUDA_ERROR_NOT_FOUND = 500,
        CU_MEM_ATTACH_GLOBAL = 0x1,
        CU_MEM_ATTACH_HOST = 0x2,
        CU_GET_PROC_ADDRESS_SUCCESS = 0,
        CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND = 1,
        FAKE_DRIVER_VERSION = 13000,
};

CUresult cuInit(unsigned int Flags);
CUresult cuDriverGetVersion(int *driverVersion);
CUresult cuDeviceGetCount(int *count);
CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize);
CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags);
CUresult cuMemFree_v2(CUdeviceptr dptr);
CUresult cuMemGetInfo_v2(size_t *free, size_t *total);
CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags);
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                        unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                        unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra);
CUresult cuFuncGetParamInfo(CUfunction func, size_t paramIndex, size_t *paramOffset, size_t *paramSize);
typedef struct CUkern_st *CUkernel;
CUresult cuKernelGetParamInfo(CUkernel kernel, size_t paramIndex, size_t *paramOffset, size_t *paramSize);
CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                             int *symbolStatus);

static CUresult from_errno(int r) {
        switch (r) {
        case 0:
                return CUDA_SUCCESS;
        case -ENOMEM:
                return CUDA_ERROR_OUT_OF_MEMORY;
        case -ENODEV:
                return CUDA_ERROR_INVALID_DEVICE;
        default:
                return CUDA_ERROR_INVALID_VALUE;
        }
}

CUresult cuInit(unsigned int Flags) {
        if (Flags != 0)
                return CUDA_ERROR_INVALID_VALUE;
        model_init();
        return CUDA_SUCCESS;
}

CUresult cuDriverGetVersion(int *driverVersion) {
        if (!driverVersion)
                return CUDA_ERROR_INVALID_VALUE;
        *driverVersion = FAKE_DRIVER_VERSION;
        return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int *count) {
        if (!model_initialized())
                return CUDA_ERROR_NOT_INITIALIZED;
        if (!count)
                return CUDA_ERROR_INVALID_VALUE;
        *count = model_device_count();
        return CUDA_SUCCESS;
}

CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize) {
        void *p = NULL;
        int r;

        if (!model_initialized())
                return CUDA_ERROR_NOT_INITIALIZED;
        if (!dptr || bytesize == 0)
                return CUDA_ERROR_INVALID_VALUE;
        if (model_fail_now(MODEL_FAIL_MALLOC))
                return CUDA_ERROR_OUT_OF_MEMORY;
        r = model_malloc(model_current_device(), bytesize, &p);
        if (r < 0)
                return from_errno(r);
        *dptr = (CUdeviceptr)(uintptr_t)p;
        return CUDA_SUCCESS;
}

CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags) {
        void *p = NULL;
        int r;

        if (!model_initialized())
                return CUDA_ERROR_NOT_INITIALIZED;
        if (!dptr || bytesize == 0 || (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST))
                return CUDA_ERROR_INVALID_VALUE;
        if (model_fail_now(MODEL_FAIL_MALLOC_MANAGED))
                return CUDA_ERROR_OUT_OF_MEMORY;
        r = model_malloc_managed(model_current_device(), bytesize, &p);
        if (r < 0)
                return from_errno(r);
        *dptr = (CUdeviceptr)(uintptr_t)p;
        return CUDA_SUCCESS;
}

CUresult cuMemFree_v2(CUdeviceptr dptr) {
        if (!model_initialized())
                return CUDA_ERROR_NOT_INITIALIZED;
        return from_errno(model_free((void *)(uintptr_t)dptr));
}

CUresult cuMemGetInfo_v2(size_t *free, size_t *total) {
        if (!model_initialized())
                return CUDA_ERROR_NOT_INITIALIZED;
        if (!free || !total)
                return CUDA_ERROR_INVALID_VALUE;
        return from_errno(model_mem_info(model_current_device(), free, total));
}

/* A CUfunction of the fake is the address of a fake kernel (fakecuda.h). */
CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                        unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                        unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra) {
        if (!model_initialized())
                return CUDA_ERROR_NOT_INITIALIZED;
        if (!gridDimX || !gridDimY || !gridDimZ || !blockDimX || !blockDimY || !blockDimZ || extra)
                return CUDA_ERROR_INVALID_VALUE;
        return fakecuda_launch((const void *)f, kernelParams) == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuFuncGetParamInfo(CUfunction func, size_t paramIndex, size_t *paramOffset, size_t *paramSize) {
        return fakecuda_param_info((const void *)func, paramIndex, paramOffset, paramSize) == 0
                       ? CUDA_SUCCESS
                       : CUDA_ERROR_INVALID_VALUE;
}

/* A CUkernel of the fake is, like a CUfunction, a fake kernel's address. */
CUresult cuKernelGetParamInfo(CUkernel kernel, size_t paramIndex, size_t *paramOffset, size_t *paramSize) {
        return cuFuncGetParamInfo((CUfunction)(void *)kernel, paramIndex, paramOffset, paramSize);
}

static const struct {
        const char *name;
        void *fn;
} procs[] = {
        {"cuKernelGetParamInfo", (void *)cuKernelGetParamInfo},
        {"cuLaunchKernel", (void *)cuLaunchKernel},
        {"cuFuncGetParamInfo", (void *)cuFuncGetParamInfo},
        {"cuInit", (void *)cuInit},
        {"cuDriverGetVersion", (void *)cuDriverGetVersion},
        {"cuDeviceGetCount", (void *)cuDeviceGetCount},
        {"cuMemAlloc", (void *)cuMemAlloc_v2},
        {"cuMemAllocManaged", (void *)cuMemAllocManaged},
        {"cuMemFree", (void *)cuMemFree_v2},
        {"cuMemGetInfo", (void *)cuMemGetInfo_v2},
        {"cuGetProcAddress", (void *)cuGetProcAddress_v2},
};

/* Looks up a driver function by its base name ("cuMemAlloc"); the version
 * and flags are accepted and ignored (every entry is the newest form). */
CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                             int *symbolStatus) {
        if (!symbol || !pfn)
                return CUDA_ERROR_INVALID_VALUE;
        for (size_t i = 0; i < sizeof(procs) / sizeof(procs[0]); i++)
                if (strcmp(procs[i].name, symbol) == 0) {
                        *pfn = procs[i].fn;
                        if (symbolStatus)
                                *symbolStatus = CU_GET_PROC_ADDRESS_SUCCESS;
                        return CUDA_SUCCESS;
                }
        *pfn = NULL;
        if (symbolStatus)
                *symbolStatus = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        return CUDA_ERROR_NOT_FOUND;
}

/* The pre-12.0 form, without the status output. */
CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags) {
        return cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, NULL);
}
