// SPDX-License-Identifier: MIT
#include <cerrno>
#include <cuda_runtime.h>
#include <time.h>

extern "C" {
#include "pinned-ref.h"
}

#define BUF_BYTES ((size_t)1 << 30)

static double now_s(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

// One pinned and one device buffer of 1 GiB, reused: the total is copied
// through them piece by piece, wrapping around, as a mover would stream.
extern "C" int pinned_ref(size_t total, size_t piece, int up, double *ret_seconds) {
        static void *host, *dev;
        static cudaStream_t s;
        double t0;

        if (!host && (cudaMallocHost(&host, BUF_BYTES) != cudaSuccess || cudaMalloc(&dev, BUF_BYTES) != cudaSuccess ||
                      cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess))
                return -ENOMEM;
        if (piece > BUF_BYTES)
                piece = BUF_BYTES;
        // warm up the path once
        cudaMemcpyAsync(dev, host, piece, cudaMemcpyHostToDevice, s);
        cudaStreamSynchronize(s);
        t0 = now_s();
        for (size_t off = 0; off < total; off += piece) {
                size_t at = off % BUF_BYTES;
                size_t n = piece < BUF_BYTES - at ? piece : BUF_BYTES - at;
                cudaError_t e = up ? cudaMemcpyAsync((char *)dev + at, (char *)host + at, n, cudaMemcpyHostToDevice, s)
                                   : cudaMemcpyAsync((char *)host + at, (char *)dev + at, n, cudaMemcpyDeviceToHost, s);
                if (e != cudaSuccess)
                        return -EIO;
        }
        if (cudaStreamSynchronize(s) != cudaSuccess)
                return -EIO;
        *ret_seconds = now_s() - t0;
        return 0;
}
