/* SPDX-License-Identifier: MIT */
/*
 * launch-bench: the cost of the launch hooks (shim/launch.c) per kernel
 * launch, against the fake CUDA.
 *   launch-bench [LAUNCHES]
 * Allocates 64 MiB with cudaMalloc (captured when the shim runs with a
 * daemon), then times LAUNCHES launches of the fake's read kernel, each
 * reading 8 bytes at a different chunk, through cudaLaunchKernel; prints the
 * median of 5 rounds in ns per launch.  tests/bench/launch-overhead.sh runs
 * it without the shim, with the shim and KVTIER_HEAT=off, and with
 * KVTIER_HEAT=launch, and prints the differences.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench-time.h"
#include "cuda-abi.h"
#include "fakecuda.h"

KVT_CUDART_FUNCS(KVT_CUDA_PROTOTYPE)
KVT_CUDART_LAUNCH_FUNCS(KVT_CUDA_PROTOTYPE)

#define ROUNDS 5

int main(int argc, char **argv) {
        long n = argc > 1 ? atol(argv[1]) : 200000;
        double t[ROUNDS];
        dim3 one = {1, 1, 1};
        char *base = NULL;

        if (n <= 0 || cudaMalloc((void **)&base, 64 << 20) != cudaSuccess)
                return 2;
        for (int r = 0; r < ROUNDS; r++) {
                double t0 = bench_now_s();

                for (long i = 0; i < n; i++) {
                        const void *p = base + (size_t)(i % 32) * (2u << 20);
                        size_t len = 8;
                        void *args[2] = {&p, &len};

                        if (cudaLaunchKernel((const void *)fakecuda_read_kernel, one, one, args, 0, NULL) !=
                            cudaSuccess)
                                return 3;
                }
                t[r] = (bench_now_s() - t0) / (double)n * 1e9;
        }
        qsort(t, ROUNDS, sizeof(t[0]), bench_cmp_double);
        printf("%.1f\n", t[ROUNDS / 2]);
        cudaFree(base);
        return 0;
}
