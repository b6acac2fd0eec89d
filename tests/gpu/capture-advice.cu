// SPDX-License-Identifier: MIT
// What a mapped eviction's advice costs when it is made at the capture
// (nothing else running) instead of at the chunk's first eviction, for a
// capture that starts in VRAM:
//   capture-advice [MIB] [ROUNDS]
// Each round, on a fresh managed allocation of MIB (default 1024), both
// variants (ROUNDS, default 3):
//   now    the shim's capture: preferred location the GPU; the first touch
//          (a kernel writing every word) places the pages; the first
//          eviction advises them (preferred location host, accessed-by the
//          GPU for all of each chunk but its first 4 KiB, the sample page)
//          and prefetches them to the host
//   mapped at the capture: accessed-by the GPU as above, the preferred
//          location left the GPU (so the first touch still places the
//          pages in VRAM); the first eviction advises the preferred
//          location host (one call) and prefetches
//   early  at the capture: prefetched to the GPU (which populates the pages
//          there), then the same advice; the first touch; the first
//          eviction is the prefetch alone
// Printed per variant: ms of the capture's calls, the first touch, the
// eviction's advice and its move, and whether the words read back in place
// (a kernel summing them from host memory) are the ones written.
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#include "bench-util.h"
#include "cuda-check.h"

static const size_t CHUNK = 2u << 20, PAGE = 4096;

__global__ void fill(unsigned long long *p, size_t n) {
        for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
                p[i] = i * 0x9E3779B97F4A7C15ull;
}

// Accessed-by the GPU but for each chunk's first page, after the preferred
// location host where pref says so.
static void advise_mapped(char *p, size_t bytes, int dev, bool pref) {
        cudaMemLocation host = {cudaMemLocationTypeHost, 0}, gpu = {cudaMemLocationTypeDevice, dev};

        if (pref)
                CK(cudaMemAdvise(p, bytes, cudaMemAdviseSetPreferredLocation, host));
        for (size_t off = 0; off < bytes; off += CHUNK)
                CK(cudaMemAdvise(p + off + PAGE, CHUNK - PAGE, cudaMemAdviseSetAccessedBy, gpu));
}

int main(int argc, char **argv) {
        size_t mib = argc > 1 ? strtoull(argv[1], NULL, 10) : 1024, bytes = mib << 20, n = bytes / 8;
        int rounds = argc > 2 ? atoi(argv[2]) : 3, dev = 0;
        cudaMemLocation host = {cudaMemLocationTypeHost, 0}, gpu = {cudaMemLocationTypeDevice, dev};
        unsigned long long want = 0, got = 0, *out;
        cudaStream_t s;

        if (mib == 0 || mib % 2 || rounds < 1) {
                fprintf(stderr, "usage: capture-advice [MIB, even] [ROUNDS]\n");
                return 2;
        }
        for (size_t i = 0; i < n; i++)
                want += i * 0x9E3779B97F4A7C15ull;
        CK(cudaSetDevice(dev));
        CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        CK(cudaMalloc(&out, sizeof(*out)));
        printf("capture-advice: %zu MiB, %zu chunks\n", mib, bytes / CHUNK);
        for (int r = 0; r < rounds; r++)
                for (int v = 0; v < 3; v++) {
                        static const char *const name[] = {"now", "mapped", "early"};
                        void *raw;
                        char *p;
                        double t0, cap, touch, adv, move, read;

                        CK(cudaMallocManaged(&raw, bytes + CHUNK, cudaMemAttachGlobal));
                        p = (char *)(((uintptr_t)raw + CHUNK - 1) & ~(uintptr_t)(CHUNK - 1));
                        t0 = now_ms();
                        if (v == 2) {
                                CK(cudaMemPrefetchAsync(p, bytes, gpu, 0, s));
                                CK(cudaStreamSynchronize(s));
                                advise_mapped(p, bytes, dev, true);
                        } else {
                                CK(cudaMemAdvise(p, bytes, cudaMemAdviseSetPreferredLocation, gpu));
                                if (v == 1)
                                        advise_mapped(p, bytes, dev, false);
                        }
                        cap = now_ms() - t0;
                        t0 = now_ms();
                        fill<<<1056, 512, 0, s>>>((unsigned long long *)p, n);
                        CK(cudaStreamSynchronize(s));
                        touch = now_ms() - t0;
                        t0 = now_ms();
                        if (v == 0)
                                advise_mapped(p, bytes, dev, true);
                        else if (v == 1)
                                CK(cudaMemAdvise(p, bytes, cudaMemAdviseSetPreferredLocation, host));
                        adv = now_ms() - t0;
                        t0 = now_ms();
                        CK(cudaMemPrefetchAsync(p, bytes, host, 0, s));
                        CK(cudaStreamSynchronize(s));
                        move = now_ms() - t0;
                        read = timed_launch(s, out, &got, [&] {
                                sum<<<1056, 512, 0, s>>>((const unsigned long long *)p, n, out);
                        });
                        printf("round %d %-6s capture %8.3f ms  first touch %8.3f ms  eviction: advice %8.3f ms, "
                               "move %8.3f ms (%.1f GB/s)  read in place %8.3f ms, words %s\n",
                               r, name[v], cap, touch, adv, move, bytes / move / 1e6, read,
                               got == want ? "intact" : "WRONG");
                        CK(cudaFree(raw));
                        if (got != want)
                                return 1;
                }
        return 0;
}
