/* SPDX-License-Identifier: MIT */
/*
 * alloc-bench: the shim's cost on allocations it does not capture.
 *   alloc-bench [PAIRS] [BYTES]
 * Times PAIRS cudaMalloc/cudaFree pairs of BYTES (default 200000 pairs of
 * 1 MiB, below KVTIER_MIN_SIZE) and prints the median of 5 rounds in ns per
 * pair.  Run it with and without LD_PRELOAD=libkvtier.so and compare
 * (tests/bench/alloc-overhead.sh does both and prints the ratio).  Builds
 * against the fake CUDA here and against real CUDA with nvcc.
 */
#include <stdio.h>
#include <stdlib.h>

#include "bench-time.h"
#include "cuda-abi.h"

KVT_CUDART_FUNCS(KVT_CUDA_PROTOTYPE)

#define ROUNDS 5

int main(int argc, char **argv) {
        long pairs = argc > 1 ? atol(argv[1]) : 200000;
        size_t bytes = argc > 2 ? (size_t)atol(argv[2]) : (size_t)1 << 20;
        double ns[ROUNDS];
        void *p;

        if (pairs <= 0 || bytes == 0)
                return 2;
        if (cudaMalloc(&p, bytes) != cudaSuccess || cudaFree(p) != cudaSuccess) /* warm up */
                return 3;
        for (int r = 0; r < ROUNDS; r++) {
                double t0 = bench_now_s();
                for (long i = 0; i < pairs; i++) {
                        if (cudaMalloc(&p, bytes) != cudaSuccess || cudaFree(p) != cudaSuccess)
                                return 3;
                }
                ns[r] = (bench_now_s() - t0) * 1e9 / (double)pairs;
        }
        qsort(ns, ROUNDS, sizeof(ns[0]), bench_cmp_double);
        printf("%.1f\n", ns[ROUNDS / 2]);
        return 0;
}
