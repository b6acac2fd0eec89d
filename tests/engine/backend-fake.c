/* SPDX-License-Identifier: MIT */

/*
 * The test engine's kernels on the fake CUDA (tests/fakes/fakecuda.h): they
 * run on the calling thread's current device and go through the fake's
 * residency model, so hits, remote reads and faults are counted there.
 */

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "cuda-abi.h"
#include "fakecuda.h"

int backend_fill(void *ptr, size_t len, uint64_t seed) {
        return fakecuda_kernel_fill(ptr, len, seed) == 0 ? 0 : -EIO;
}

int backend_check(const void *ptr, size_t len, uint64_t seed, uint64_t *ret_bad_words) {
        return fakecuda_kernel_check(ptr, len, seed, ret_bad_words) == 0 ? 0 : -EIO;
}

KVT_CUDART_LAUNCH_FUNCS(KVT_CUDA_PROTOTYPE)
KVT_CUDA_DRIVER_LAUNCH_FUNCS(KVT_CUDA_PROTOTYPE)
CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *symbolStatus);
typedef CUresult (*cuLaunchKernel_fn)(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                      unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                                      unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                                      void **kernelParams, void **extra);

cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void **args, size_t sharedMem,
                               cudaStream_t stream);

/* A read as a kernel launch (one per 2 MiB tile, as a tiled kernel grid
 * would pass tile pointers): through cudaLaunchKernel, or cuLaunchKernel
 * with FAKE_ENGINE_LAUNCH=driver, __cudaLaunchKernel (CUDA 13's nvcc
 * stubs) with =stub, a direct call with =direct, or cuLaunchKernel as
 * cuGetProcAddress_v2 hands it out (cuBLAS, Triton, static cudart) with
 * =procaddr. */
static int launch_read(const void *ptr, size_t len) {
        static int mode = -1; /* 0 runtime, 1 driver, 2 direct, 3 stub, 4 procaddr */
        static cuLaunchKernel_fn procaddr_launch;
        dim3 one = {1, 1, 1};
        void *args[2] = {&ptr, &len};

        if (mode < 0) {
                const char *v = getenv("FAKE_ENGINE_LAUNCH");
                mode = !v ? 0 : strcmp(v, "driver") == 0 ? 1 : strcmp(v, "direct") == 0 ? 2 : strcmp(v, "stub") == 0 ? 3
                               : strcmp(v, "procaddr") == 0 ? 4 : 0;
                if (mode == 4 && cuGetProcAddress_v2("cuLaunchKernel", (void **)&procaddr_launch, 13000, 0, NULL) != 0)
                        return -EIO;
        }
        if (mode == 4)
                return procaddr_launch((CUfunction)(uintptr_t)fakecuda_read_kernel, 1, 1, 1, 1, 1, 1, 0, NULL, args,
                                       NULL);
        if (mode == 3)
                return __cudaLaunchKernel((cudaKernel_t)(uintptr_t)fakecuda_read_kernel, one, one, args, 0, NULL);
        if (mode == 2)
                return fakecuda_kernel_read(ptr, len);
        if (mode == 1)
                return cuLaunchKernel((CUfunction)(uintptr_t)fakecuda_read_kernel, 1, 1, 1, 1, 1, 1, 0, NULL, args,
                                      NULL);
        return cudaLaunchKernel((const void *)fakecuda_read_kernel, one, one, args, 0, NULL);
}

int backend_read(const void *ptr, size_t len) {
        const char *p = ptr;

        while (len) {
                size_t n = FAKECUDA_PAGE_BYTES - (uintptr_t)p % FAKECUDA_PAGE_BYTES;

                n = n < len ? n : len;
                if (launch_read(p, n) != 0)
                        return -EIO;
                p += n;
                len -= n;
        }
        return 0;
}

int backend_probe(const void *ptr, size_t len, double *ret_launch_us, double *ret_total_us) {
        struct timespec t0, t1;
        int r;

        clock_gettime(CLOCK_MONOTONIC, &t0);
        r = backend_read(ptr, len); /* the fake's kernels run in the call */
        clock_gettime(CLOCK_MONOTONIC, &t1);
        *ret_launch_us = *ret_total_us =
                (double)(t1.tv_sec - t0.tv_sec) * 1e6 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e3;
        return r;
}

int backend_vram_resident(const void *ptr, size_t len, int dev, uint64_t *ret_bytes) {
        return fakecuda_resident_bytes(ptr, len, dev, ret_bytes) == 0 ? 0 : -EIO;
}

int backend_vram_peak(int dev, uint64_t *ret_bytes) {
        struct fakecuda_stats s;

        if (fakecuda_get_stats(dev, &s) != 0)
                return -EIO;
        *ret_bytes = s.managed_resident_peak_bytes;
        return 0;
}
