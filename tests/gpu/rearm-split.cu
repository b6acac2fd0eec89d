// SPDX-License-Identifier: MIT
// What re-arming samples does to managed memory as it is repeated: the open
// driver splits a managed range (and the 2 MiB blocks in it) at the edges
// of every range an advice names, and never merges ranges again
// (kernel-open/nvidia-uvm/uvm_policy.c, split_span_as_needed()).
//   rearm-split [MIB] [ROUNDS] [VARIANT,...]
// Variants, each on a fresh allocation of MIB (default 1024):
//   none    no sample
//   random  a 4 KiB page of each chunk, a different one each round (the
//           shim's re-arm before this benchmark)
//   fixed   the same 4 KiB page of each chunk every round, the chunk's first
//   chunk   the whole 2 MiB chunk
// A round: every chunk evicted to mapped host memory (preferred location
// host, accessed by the GPU, prefetched there), sampled (read duplication
// set then unset), read by a kernel (in place; sampled pages fault), then
// promoted (preferred location the GPU, prefetched there) and read in VRAM.
// Printed per round: the sample's driver time per chunk, the eviction's and
// the promotion's GB/s, the reads' GB/s.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <cuda_runtime.h>

#include "bench-util.h"
#include "cuda-check.h"

static const size_t CHUNK = 2u << 20, PAGE = 4096;

// Reads the buffer once; returns ms, and the sum into *got.
static double read_all(const unsigned long long *p, size_t bytes, unsigned long long *out, unsigned long long *got) {
        return timed_launch(0, out, got, [&] { sum<<<1056, 512>>>(p, bytes / sizeof(*p), out); });
}

static double place(char *p, size_t bytes, bool gpu, int dev, cudaStream_t s) {
        cudaMemLocation host = {cudaMemLocationTypeHost, 0}, vram = {cudaMemLocationTypeDevice, dev};
        double t = now_ms();

        CK(cudaMemAdvise(p, bytes, cudaMemAdviseSetPreferredLocation, gpu ? vram : host));
        if (!gpu)
                CK(cudaMemAdvise(p, bytes, cudaMemAdviseSetAccessedBy, vram));
        CK(cudaMemPrefetchAsync(p, bytes, gpu ? vram : host, 0, s));
        CK(cudaStreamSynchronize(s));
        return now_ms() - t;
}

static void variant(const std::string &v, size_t bytes, int rounds, int dev) {
        cudaMemLocation vram = {cudaMemLocationTypeDevice, dev};
        cudaStream_t s;
        char *p;
        unsigned long long *out, want = 0, got;
        size_t chunks = bytes / CHUNK;

        CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        CK(cudaMallocManaged(&p, bytes));
        CK(cudaMalloc(&out, sizeof(*out)));
        for (size_t i = 0; i < bytes / 8; i++)
                want += ((unsigned long long *)p)[i] = i * 0x9e3779b97f4a7c15ull;
        place(p, bytes, true, dev, s);
        printf("%-7s round  sample_us/chunk  evict_GBps  read_host_GBps  promote_GBps  read_vram_GBps  sum\n",
               v.c_str());
        for (int r = 1; r <= rounds; r++) {
                double ev = place(p, bytes, false, dev, s), t, sm, rh, pr, rv;

                t = now_ms();
                for (size_t c = 0; c < chunks && v != "none"; c++) {
                        char *chunk = p + c * CHUNK;
                        size_t off = v == "random" ? ((c + r) * 0x9e3779b97f4a7c15ull >> 40) % (CHUNK / PAGE) * PAGE : 0;
                        size_t len = v == "chunk" ? CHUNK : PAGE;

                        CK(cudaMemAdvise(chunk + off, len, cudaMemAdviseSetReadMostly, vram));
                        CK(cudaMemAdvise(chunk + off, len, cudaMemAdviseUnsetReadMostly, vram));
                }
                sm = (now_ms() - t) * 1e3 / chunks;
                rh = read_all((unsigned long long *)p, bytes, out, &got);
                if (got != want)
                        printf("  WRONG SUM after the host read\n");
                pr = place(p, bytes, true, dev, s);
                read_all((unsigned long long *)p, bytes, out, &got); /* the first read may still map */
                rv = read_all((unsigned long long *)p, bytes, out, &got);
                if (r == 1 || r == 2 || r == 4 || r == 8 || r == 16 || r == 32 || r == rounds)
                        printf("%-7s %5d  %15.1f  %10.2f  %14.2f  %12.2f  %14.1f  %s\n", v.c_str(), r,
                               v == "none" ? 0.0 : sm, bytes / ev / 1e6, bytes / rh / 1e6, bytes / pr / 1e6,
                               bytes / rv / 1e6, got == want ? "ok" : "WRONG");
        }
        CK(cudaFree(out));
        CK(cudaFree(p));
        CK(cudaStreamDestroy(s));
}

int main(int argc, char **argv) {
        size_t mib = argc > 1 ? strtoul(argv[1], NULL, 10) : 1024;
        int rounds = argc > 2 ? atoi(argv[2]) : 16;
        std::string list = argc > 3 ? argv[3] : "none,random,fixed,chunk";
        int dev = 0;

        CK(cudaSetDevice(dev));
        for (size_t pos = 0; pos < list.size();) {
                size_t comma = list.find(',', pos);
                std::string v = list.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);

                pos = comma == std::string::npos ? list.size() : comma + 1;
                if (v != "none" && v != "random" && v != "fixed" && v != "chunk") {
                        fprintf(stderr, "rearm-split: unknown variant %s\n", v.c_str());
                        return 2;
                }
                variant(v, mib << 20, rounds, dev);
        }
        return 0;
}
