// SPDX-License-Identifier: MIT
// What the GPU benchmarks share: a wall clock in milliseconds, and a
// kernel summing 64-bit words (the check that a buffer's contents
// survived whatever moved it).
#pragma once
#include <chrono>
#include <cuda_runtime.h>

#include "cuda-check.h"

static inline double now_ms(void) {
        return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Adds the n words at p into *out (a grid-stride loop, one atomic a thread).
__global__ void sum(const unsigned long long *p, size_t n, unsigned long long *out) {
        unsigned long long s = 0;
        for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
                s += p[i];
        atomicAdd(out, s);
}

// Times what launch() queues on s with events, out zeroed before it;
// returns ms, and *out's value after it into *got.
template <typename Launch>
static float timed_launch(cudaStream_t s, unsigned long long *out, unsigned long long *got, Launch launch) {
        cudaEvent_t a, b;
        float ms;

        CK(cudaMemsetAsync(out, 0, sizeof(*out), s));
        CK(cudaEventCreate(&a));
        CK(cudaEventCreate(&b));
        CK(cudaEventRecord(a, s));
        launch();
        CK(cudaEventRecord(b, s));
        CK(cudaEventSynchronize(b));
        CK(cudaEventElapsedTime(&ms, a, b));
        CK(cudaMemcpy(got, out, sizeof(*got), cudaMemcpyDeviceToHost));
        CK(cudaEventDestroy(a));
        CK(cudaEventDestroy(b));
        return ms;
}
