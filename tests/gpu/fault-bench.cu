// SPDX-License-Identifier: MIT
// Fault-heavy reads of managed memory: each round sends a managed buffer
// to the host, then a kernel reads all of it, so every 2 MiB page faults
// and migrates (DESIGN.md: 7-9 GB/s without CUPTI, 5 with its UM counters).
// Prints the median GB/s of the rounds.  Run it under the shim with
// KVTIER_HEAT=cupti and a duty cycle, and without, to see what sampling
// costs.  It also makes one plain cudaMalloc of --trigger-mib (captured by
// the shim when a daemon is up), which is what starts the heat sampler.
//   fault-bench [GIB] [ROUNDS] [TRIGGER_MIB]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cuda_runtime.h>

__global__ static void k_read(const unsigned long long *p, size_t words, unsigned long long *sink) {
        unsigned long long x = 0;
        for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < words; i += (size_t)gridDim.x * blockDim.x)
                x ^= p[i];
        if (x == 0x5555aaaa5555aaaaull)
                *sink = x;
}

#define CK(x)                                                                                      \
        do {                                                                                       \
                cudaError_t e_ = (x);                                                              \
                if (e_ != cudaSuccess) {                                                           \
                        fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_));                   \
                        return 3;                                                                  \
                }                                                                                  \
        } while (0)

int main(int argc, char **argv) {
        size_t gib = argc > 1 ? strtoul(argv[1], NULL, 10) : 4;
        int rounds = argc > 2 ? atoi(argv[2]) : 5;
        size_t trigger_mib = argc > 3 ? strtoul(argv[3], NULL, 10) : 64;
        size_t bytes = gib << 30;
        unsigned long long *buf, *sink;
        void *trigger = NULL;
        cudaStream_t s;
        cudaEvent_t a, b;
        std::vector<double> gbs;
        cudaMemLocation host = {cudaMemLocationTypeHost, 0}, gpu = {cudaMemLocationTypeDevice, 0};

        CK(cudaMalloc(&trigger, trigger_mib << 20));
        CK(cudaMalloc(&sink, 8));
        CK(cudaMallocManaged(&buf, bytes));
        CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        CK(cudaEventCreate(&a));
        CK(cudaEventCreate(&b));
        CK(cudaMemsetAsync(buf, 1, bytes, s)); /* first touch on the GPU */
        CK(cudaStreamSynchronize(s));
        for (int r = 0; r < rounds; r++) {
                float ms;

                CK(cudaMemPrefetchAsync(buf, bytes, host, 0, s));
                CK(cudaStreamSynchronize(s));
                CK(cudaEventRecord(a, s));
                k_read<<<1024, 256, 0, s>>>(buf, bytes / 8, sink);
                CK(cudaEventRecord(b, s));
                CK(cudaEventSynchronize(b));
                CK(cudaEventElapsedTime(&ms, a, b));
                gbs.push_back(bytes / (ms * 1e-3) / 1e9);
        }
        (void)gpu;
        std::sort(gbs.begin(), gbs.end());
        printf("fault-bench: %zu GiB, %d rounds, median %.2f GB/s (min %.2f max %.2f)\n", gib, rounds,
               gbs[gbs.size() / 2], gbs.front(), gbs.back());
        cudaFree(buf);
        cudaFree(trigger);
        return 0;
}
