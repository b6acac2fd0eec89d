/* SPDX-License-Identifier: MIT */
/*
 * local-driver: reaches the driver the way the CUDA runtime does, for the
 * shim's tests: libcuda.so.1 dlopen'd RTLD_LOCAL (so RTLD_NEXT cannot see
 * it), cuGetProcAddress_v2 looked up in that handle, cuLaunchKernel fetched
 * through it, and a kernel launched over a captured allocation.  Under the
 * shim the launch goes through its cuLaunchKernel wrapper, which must find
 * the real function and not itself.
 *
 * local-driver dlclose: closes the handle once the launch is fetched, as
 * an engine that loaded CUDA itself may, then launches again: the shim
 * keeps the libraries its tables point into loaded (without it the
 * launch called into unmapped code).
 *
 * Exit status: 0 launched; 1 a CUDA call failed; 2 the driver was not found;
 * 3 the driver was unloaded after dlclose.
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "cuda-abi.h"
#include "fakecuda.h"

KVT_CUDART_FUNCS(KVT_CUDA_PROTOTYPE)

typedef CUresult (*getproc_fn)(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                               CUdriverProcAddressQueryResult *symbolStatus);
typedef CUresult (*launch_fn)(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                              unsigned int by, unsigned int bz, unsigned int shmem, CUstream s, void **params,
                              void **extra);

int main(int argc, char **argv) {
        int close_it = argc > 1 && strcmp(argv[1], "dlclose") == 0;
        void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
        getproc_fn getproc = h ? (getproc_fn)dlsym(h, "cuGetProcAddress_v2") : NULL;
        launch_fn launch = NULL;
        size_t len = 64u << 20;
        void *p = NULL;
        void *args[2] = { &p, &len };

        if (!getproc) {
                fprintf(stderr, "local-driver: no libcuda.so.1: %s\n", dlerror());
                return 2;
        }
        if (getproc("cuLaunchKernel", (void **)&launch, 13000, 0, NULL) != 0 || !launch ||
            cudaMalloc(&p, len) != cudaSuccess) {
                fprintf(stderr, "local-driver: setup failed\n");
                return 1;
        }
        if (close_it) {
                void *again;

                dlclose(h);
                again = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
                printf("local-driver: after dlclose libcuda.so.1 is %s\n", again ? "loaded" : "unloaded");
                if (!again)
                        return 3;
                dlclose(again);
        }
        for (int i = 0; i < 4; i++)
                if (launch((CUfunction)(uintptr_t)fakecuda_read_kernel, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL) != 0) {
                        fprintf(stderr, "local-driver: cuLaunchKernel failed\n");
                        return 1;
                }
        if (cudaFree(p) != cudaSuccess)
                return 1;
        printf("local-driver: 4 launches through cuGetProcAddress of a RTLD_LOCAL libcuda\n");
        return 0;
}
