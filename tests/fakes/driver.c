/* SPDX-License-Identifier: MIT */

/*
 * Fake libcuda.so.1: the few driver API entry points kvtier touches, on the
 * same residency model as the fake runtime (model.c, in libcudart).  The
 * current device is the runtime's per-thread current device (the primary
 * context, or one it created with cuCtxCreate).  As with the real runtime, which calls cuInit itself, any
 * runtime call also initializes the driver.  cuGetProcAddress(_v2) hands out these same functions, so a
 * shim that interposes it can be tested.
 */

#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cuda-abi.h"
#include "model.h"

/* Values from CUDA 13's cuda.h that shim/cuda-abi.h does not carry. */
enum {
        CUDA_ERROR_INVALID_DEVICE = 101,
        CUDA_ERROR_INVALID_CONTEXT = 201,
        CU_MEM_ATTACH_GLOBAL = 0x1,
        CU_MEM_ATTACH_HOST = 0x2,
        FAKE_DRIVER_VERSION = 13000,
        FAKE_VMM_GRANULARITY = 2 << 20,
};

typedef struct CUmemAccessDesc_st CUmemAccessDesc;

/* Exported entry points (CUDA 13 signatures; the hooked ones from cuda-abi.h). */
KVT_CUDA_HOOKS(KVT_CUDA_PROTOTYPE)
CUresult cuInit(unsigned int Flags);
CUresult cuDriverGetVersion(int *driverVersion);
CUresult cuDeviceGetCount(int *count);
CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags);
CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                             unsigned long long flags);
CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size);
CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count);
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                        unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                        unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra);
CUresult cuFuncGetParamInfo(CUfunction func, size_t paramIndex, size_t *paramOffset, size_t *paramSize);
typedef struct CUkern_st *CUkernel;
CUresult cuKernelGetParamInfo(CUkernel kernel, size_t paramIndex, size_t *paramOffset, size_t *paramSize);
CUresult cuStreamQuery(CUstream hStream);
CUresult cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus);

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

/* Contexts: a created context's handle is its model key. */
KVT_CUDA_CALLS(KVT_CUDA_PROTOTYPE)

CUresult cuDeviceGet(CUdevice *device, int ordinal) {
        if (!model_initialized())
                return CUDA_ERROR_NOT_INITIALIZED;
        if (!device)
                return CUDA_ERROR_INVALID_VALUE;
        if (ordinal < 0 || ordinal >= model_device_count())
                return CUDA_ERROR_INVALID_DEVICE;
        *device = ordinal;
        return CUDA_SUCCESS;
}

/* Creation parameters (execution affinity, CIG) are not modelled: NULL only. */
CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *ctxCreateParams, unsigned int flags, CUdevice dev) {
        int key, r;

        if (!model_initialized())
                return CUDA_ERROR_NOT_INITIALIZED;
        if (!pctx || ctxCreateParams || (flags & ~0x1fu))
                return CUDA_ERROR_INVALID_VALUE;
        r = model_ctx_create(dev, &key);
        if (r < 0)
                return from_errno(r);
        *pctx = (CUcontext)(uintptr_t)key;
        return CUDA_SUCCESS;
}

CUresult cuCtxSetCurrent(CUcontext ctx) {
        if (!model_initialized())
                return CUDA_ERROR_NOT_INITIALIZED;
        return model_ctx_set_current((int)(uintptr_t)ctx) == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

CUresult cuCtxSetLimit(CUlimit limit, size_t value) {
        if (!model_initialized())
                return CUDA_ERROR_NOT_INITIALIZED;
        return model_ctx_set_limit((int)limit, value) == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuCtxGetLimit(size_t *pvalue, CUlimit limit);

CUresult cuCtxGetLimit(size_t *pvalue, CUlimit limit) {
        if (!model_initialized())
                return CUDA_ERROR_NOT_INITIALIZED;
        if (!pvalue)
                return CUDA_ERROR_INVALID_VALUE;
        return model_ctx_get_limit((int)limit, pvalue) == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuCtxDestroy_v2(CUcontext ctx) {
        if (!model_initialized())
                return CUDA_ERROR_NOT_INITIALIZED;
        return ctx && model_ctx_destroy((int)(uintptr_t)ctx) == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
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

/* Stream-ordered forms: work runs at call time in the fake (the stream is
 * not validated here; the runtime's streams are the driver's). */
CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream) {
        (void)hStream;
        return cuMemAlloc_v2(dptr, bytesize);
}

CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream) {
        if (!pool)
                return CUDA_ERROR_INVALID_VALUE;
        return cuMemAllocAsync(dptr, bytesize, hStream);
}

CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) {
        (void)hStream;
        return cuMemFree_v2(dptr);
}

/*
 * VMM: a reservation is PROT_NONE address space, a physical allocation a
 * memfd, a mapping the memfd mapped over part of a reservation.  Enough for
 * a test engine; the residency model does not see this memory.
 */
struct fake_phys {
        int fd;
        size_t size;
};

CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                             unsigned long long flags) {
        void *p;

        if (!model_initialized())
                return CUDA_ERROR_NOT_INITIALIZED;
        if (!ptr || size == 0 || size % FAKE_VMM_GRANULARITY || flags || (alignment & (alignment - 1)))
                return CUDA_ERROR_INVALID_VALUE;
        (void)addr;
        /* Over-reserve to align to the granularity, then trim. */
        p = mmap(NULL, size + FAKE_VMM_GRANULARITY, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED)
                return CUDA_ERROR_OUT_OF_MEMORY;
        {
                uintptr_t a = ((uintptr_t)p + FAKE_VMM_GRANULARITY - 1) & ~(uintptr_t)(FAKE_VMM_GRANULARITY - 1);
                if (a > (uintptr_t)p)
                        munmap(p, a - (uintptr_t)p);
                munmap((void *)(a + size), (uintptr_t)p + FAKE_VMM_GRANULARITY - a);
                *ptr = (CUdeviceptr)a;
        }
        return CUDA_SUCCESS;
}

CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
        if (!ptr || size == 0 || size % FAKE_VMM_GRANULARITY)
                return CUDA_ERROR_INVALID_VALUE;
        return munmap((void *)(uintptr_t)ptr, size) == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                     unsigned long long flags) {
        struct fake_phys *ph;

        if (!model_initialized())
                return CUDA_ERROR_NOT_INITIALIZED;
        if (!handle || !prop || size == 0 || size % FAKE_VMM_GRANULARITY || flags)
                return CUDA_ERROR_INVALID_VALUE;
        ph = calloc(1, sizeof(*ph));
        if (!ph)
                return CUDA_ERROR_OUT_OF_MEMORY;
        ph->size = size;
        ph->fd = memfd_create("fakecuda-vmm", MFD_CLOEXEC);
        if (ph->fd < 0 || ftruncate(ph->fd, (off_t)size) < 0) {
                if (ph->fd >= 0)
                        close(ph->fd);
                free(ph);
                return CUDA_ERROR_OUT_OF_MEMORY;
        }
        *handle = (CUmemGenericAllocationHandle)(uintptr_t)ph;
        return CUDA_SUCCESS;
}

/* The real driver keeps a released allocation alive while it is mapped;
 * the mapping here holds its own reference to the memfd. */
CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
        struct fake_phys *ph = (struct fake_phys *)(uintptr_t)handle;

        if (!ph)
                return CUDA_ERROR_INVALID_VALUE;
        close(ph->fd);
        free(ph);
        return CUDA_SUCCESS;
}

CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                  unsigned long long flags) {
        struct fake_phys *ph = (struct fake_phys *)(uintptr_t)handle;

        if (!ph || !ptr || size == 0 || flags || ptr % FAKE_VMM_GRANULARITY || size % FAKE_VMM_GRANULARITY ||
            offset > ph->size || size > ph->size - offset)
                return CUDA_ERROR_INVALID_VALUE;
        if (mmap((void *)(uintptr_t)ptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, ph->fd,
                 (off_t)offset) == MAP_FAILED)
                return CUDA_ERROR_OUT_OF_MEMORY;
        return CUDA_SUCCESS;
}

CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
        if (!ptr || size == 0 || ptr % FAKE_VMM_GRANULARITY || size % FAKE_VMM_GRANULARITY)
                return CUDA_ERROR_INVALID_VALUE;
        /* Back to reserved, inaccessible address space. */
        if (mmap((void *)(uintptr_t)ptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE,
                 -1, 0) == MAP_FAILED)
                return CUDA_ERROR_INVALID_VALUE;
        return CUDA_SUCCESS;
}

CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count) {
        if (!ptr || size == 0 || !desc || count == 0)
                return CUDA_ERROR_INVALID_VALUE;
        return CUDA_SUCCESS;
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

/* The fake's kernels run to the end within their launch, so every stream
 * is drained once a launch returns. */
CUresult cuStreamQuery(CUstream hStream) {
        (void)hStream;
        return model_initialized() ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED;
}

/* The fake has no stream capture. */
CUresult cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus) {
        (void)hStream;
        if (!model_initialized())
                return CUDA_ERROR_NOT_INITIALIZED;
        if (!captureStatus)
                return CUDA_ERROR_INVALID_VALUE;
        *captureStatus = CU_STREAM_CAPTURE_STATUS_NONE;
        return CUDA_SUCCESS;
}

static const struct {
        const char *name;
        void *fn;
} procs[] = {
        {"cuStreamQuery", (void *)cuStreamQuery},
        {"cuStreamIsCapturing", (void *)cuStreamIsCapturing},
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
        {"cuMemAllocAsync", (void *)cuMemAllocAsync},
        {"cuMemFreeAsync", (void *)cuMemFreeAsync},
        {"cuMemAllocFromPoolAsync", (void *)cuMemAllocFromPoolAsync},
        {"cuMemAddressReserve", (void *)cuMemAddressReserve},
        {"cuMemAddressFree", (void *)cuMemAddressFree},
        {"cuMemCreate", (void *)cuMemCreate},
        {"cuMemRelease", (void *)cuMemRelease},
        {"cuMemMap", (void *)cuMemMap},
        {"cuMemUnmap", (void *)cuMemUnmap},
        {"cuMemSetAccess", (void *)cuMemSetAccess},
        {"cuGetProcAddress", (void *)cuGetProcAddress_v2},
};

/* Looks up a driver function by its base name ("cuMemAlloc"); the version
 * and flags are accepted and ignored (every entry is the newest form). */
CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *symbolStatus) {
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
