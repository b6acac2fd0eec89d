// SPDX-License-Identifier: MIT
// static_probe: a CUDA C program built with nvcc's default static cudart,
// which reaches the driver only through cuGetProcAddress.  Allocates
// --mib MiB with cudaMalloc and as much again with cudaMallocAsync, fills
// both on the GPU, sums them, runs KVT_PROBE_STATUS (a shell command, e.g.
// "kvtierctl status --json > file") while they are held, frees the async
// one stream-ordered right after a kernel that reads it, and prints one
// JSON line.  Run with and without the shim and compare checksums.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>

__global__ void fill(float *p, size_t n, float salt) {
        for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
                p[i] = (float)((i * 2654435761u) % 977u) + salt;
}

__global__ void sum(const float *p, size_t n, double *out) {
        double s = 0;
        for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
                s += p[i];
        atomicAdd(out, s);
}

#define CK(x)                                                                                      \
        do {                                                                                       \
                cudaError_t e_ = (x);                                                              \
                if (e_ != cudaSuccess) {                                                           \
                        fprintf(stderr, "static_probe: %s: %s\n", #x, cudaGetErrorString(e_));     \
                        return 3;                                                                  \
                }                                                                                  \
        } while (0)

int main(int argc, char **argv) {
        size_t mib = argc > 2 && strcmp(argv[1], "--mib") == 0 ? strtoull(argv[2], NULL, 10) : 512;
        size_t n = mib << 18;
        float *a = NULL, *b = NULL;
        double *d = NULL, h[2] = { 0, 0 };
        size_t free_b = 0, total_b = 0;
        cudaStream_t s;
        const char *status = getenv("KVT_PROBE_STATUS");

        CK(cudaStreamCreate(&s));
        CK(cudaMalloc(&a, n * sizeof(float)));
        CK(cudaMallocAsync(&b, n * sizeof(float), s));
        CK(cudaMalloc(&d, 2 * sizeof(double)));
        CK(cudaMemsetAsync(d, 0, 2 * sizeof(double), s));
        fill<<<1024, 256, 0, s>>>(a, n, 0.25f);
        fill<<<1024, 256, 0, s>>>(b, n, 0.5f);
        sum<<<1024, 256, 0, s>>>(a, n, d);
        sum<<<1024, 256, 0, s>>>(b, n, d + 1);
        CK(cudaStreamSynchronize(s));
        CK(cudaMemGetInfo(&free_b, &total_b));
        if (status && system(status) != 0)
                fprintf(stderr, "static_probe: status command failed\n");
        // Stream-ordered free right behind a kernel still reading b.
        sum<<<1024, 256, 0, s>>>(b, n, d + 1);
        CK(cudaFreeAsync(b, s));
        CK(cudaStreamSynchronize(s));
        CK(cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost));
        CK(cudaFree(a));
        CK(cudaFree(d));
        printf("{\"framework\": \"static-cudart\", \"pid\": %d, \"checksum\": [%.1f, %.1f], \"free\": %zu, "
               "\"total\": %zu}\n",
               (int)getpid(), h[0], h[1], free_b, total_b);
        return 0;
}
