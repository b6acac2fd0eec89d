// SPDX-License-Identifier: MIT
// What a sample (re-arm or probe) of one 4 KiB page a chunk costs, alone and
// while another thread moves memory, and whether the GPU's next touch of the
// page faults after it.  A cudaMemAdvise takes the driver's lock on the
// process's managed memory for writing (uvm_va_space_down_write in the open
// driver's uvm_policy.c); a prefetch takes it for reading (uvm_migrate.c),
// so advice waits for every move in flight, and they wait for it.
//   sample-cost [MIB] [LOAD_MIB] [METHOD,...]
// Methods, each on a fresh allocation of MIB (default 512):
//   toggle     re-arm of a host chunk mapped by accessed-by over the whole
//              chunk: read duplication set then unset on its first page
//              (the shim's re-arm)
//   stoggle    the same toggle on a chunk mapped by accessed-by over all but
//              its first page (which a touch mapped)
//   roundtrip  re-arm of a host chunk mapped by accessed-by over all but its
//              first page: that page prefetched to the GPU, then back
//   batch      the same in two cudaMemPrefetchBatchAsync calls for all chunks
//   probe      a chunk in VRAM (preferred location the GPU): its first page
//              advised to the host, prefetched there, read duplication
//              toggled (the shim's probe)
//   oprobe     the same in parts of 8 chunks, ordered: the 8 pages advised,
//              then prefetched, one synchronize, then their toggles
//   pprobe     a chunk in VRAM whose first page keeps preferred location
//              host, not accessed-by: that page prefetched to the host
//   bprobe     the same in one batch call
//   xprobe     a chunk in VRAM, preferred location host, accessed-by over
//              all but its first page: that page advised to the host, read
//              duplication toggled, then prefetched to the host (no advice
//              waits for a copy); whichever state the page is in, in VRAM or
//              on the host mapped by a touch, it ends unmapped
//   cprobe     the same on a chunk as captured: preferred location the GPU,
//              no accessed-by
//   bxprobe    xprobe's advice for a part of 8 chunks, then one batch
//              prefetch of their pages to the host (one wait for the copy
//              engine a part, not one a chunk)
//   bcprobe    the same on a chunk as captured
// Loads: none, and "moves" (another thread prefetching LOAD_MIB, default
// 1024, to the GPU and back in 64 MiB calls on its own stream).
// Printed: the sample's wall time per chunk (the calls and a stream
// synchronize), the load's GB/s meanwhile, and the time of a kernel that
// touches each chunk's first word before the sample ("before": faults if
// the page is unmapped), after it ("after": faults if the sample
// unmapped it), and once more ("again": mapped by then); a second sample
// (its cost alone, us2) and a touch after it ("after2"); a read of the
// whole buffer (GB/s) and its sum.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>
#include <cuda_runtime.h>

#include "bench-util.h"
#include "cuda-check.h"

static const size_t CHUNK = 2u << 20, PAGE = 4096;

__global__ void touch(const unsigned long long *p, size_t chunks, unsigned long long *out) {
        size_t c = blockIdx.x * (size_t)blockDim.x + threadIdx.x;

        if (c < chunks)
                atomicAdd(out, p[c * (CHUNK / sizeof(*p))]);
}

// Runs a kernel of one thread a chunk (or a whole read) on s; returns ms.
static double timed(bool whole, const unsigned long long *p, size_t bytes, unsigned long long *out,
                    cudaStream_t s, unsigned long long *got) {
        size_t chunks = bytes / CHUNK;

        return timed_launch(s, out, got, [&] {
                if (whole)
                        sum<<<1056, 512, 0, s>>>(p, bytes / sizeof(*p), out);
                else
                        touch<<<(unsigned)((chunks + 255) / 256), 256, 0, s>>>(p, chunks, out);
        });
}

// The other thread's moves: LOAD to the GPU and back in 64 MiB calls until
// stop; bytes moved into *moved.
static void load(char *q, size_t bytes, int dev, std::atomic<bool> *stop, std::atomic<size_t> *moved) {
        cudaMemLocation host = {cudaMemLocationTypeHost, 0}, vram = {cudaMemLocationTypeDevice, dev};
        const size_t piece = 64u << 20;
        cudaStream_t s;

        CK(cudaSetDevice(dev));
        CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        for (bool up = true; !stop->load(); up = !up)
                for (size_t off = 0; off < bytes && !stop->load(); off += piece) {
                        CK(cudaMemPrefetchAsync(q + off, piece, up ? vram : host, 0, s));
                        CK(cudaStreamSynchronize(s));
                        *moved += piece;
                }
        CK(cudaStreamDestroy(s));
}

// Places p in host memory or in VRAM (vram_side), with preferred location
// the GPU (pref_gpu) or the host, accessed by the GPU over each chunk
// (access 'a'), over all but each chunk's first page ('s'), or not ('n').
static void place(char *p, size_t bytes, bool vram_side, bool pref_gpu, char access, int dev, cudaStream_t s) {
        cudaMemLocation host = {cudaMemLocationTypeHost, 0}, vram = {cudaMemLocationTypeDevice, dev};

        CK(cudaMemAdvise(p, bytes, cudaMemAdviseSetPreferredLocation, pref_gpu ? vram : host));
        if (access == 'a')
                CK(cudaMemAdvise(p, bytes, cudaMemAdviseSetAccessedBy, vram));
        else if (access == 's')
                for (size_t c = 0; c < bytes; c += CHUNK)
                        CK(cudaMemAdvise(p + c + PAGE, CHUNK - PAGE, cudaMemAdviseSetAccessedBy, vram));
        CK(cudaMemPrefetchAsync(p, bytes, vram_side ? vram : host, 0, s));
        CK(cudaStreamSynchronize(s));
}

// Samples every chunk's first page by method m on s; returns ms a chunk.
static double sample(const std::string &m, char *p, size_t bytes, int dev, cudaStream_t s) {
        cudaMemLocation host = {cudaMemLocationTypeHost, 0}, vram = {cudaMemLocationTypeDevice, dev};
        size_t chunks = bytes / CHUNK;
        std::vector<void *> ptrs(chunks);
        std::vector<size_t> sizes(chunks, PAGE);
        size_t zero = 0;
        double t = now_ms();

        for (size_t c = 0; c < chunks; c++)
                ptrs[c] = p + c * CHUNK;
        if (m == "batch") {
                CK(cudaMemPrefetchBatchAsync(ptrs.data(), sizes.data(), chunks, &vram, &zero, 1, 0, s));
                CK(cudaMemPrefetchBatchAsync(ptrs.data(), sizes.data(), chunks, &host, &zero, 1, 0, s));
        } else if (m == "bprobe") {
                CK(cudaMemPrefetchBatchAsync(ptrs.data(), sizes.data(), chunks, &host, &zero, 1, 0, s));
        } else if (m == "bxprobe" || m == "bcprobe") {
                for (size_t c0 = 0; c0 < chunks; c0 += 8) {
                        size_t n = chunks - c0 < 8 ? chunks - c0 : 8;

                        for (size_t c = c0; c < c0 + n; c++) {
                                CK(cudaMemAdvise(ptrs[c], PAGE, cudaMemAdviseSetPreferredLocation, host));
                                CK(cudaMemAdvise(ptrs[c], PAGE, cudaMemAdviseSetReadMostly, vram));
                                CK(cudaMemAdvise(ptrs[c], PAGE, cudaMemAdviseUnsetReadMostly, vram));
                        }
                        CK(cudaMemPrefetchBatchAsync(&ptrs[c0], &sizes[c0], n, &host, &zero, 1, 0, s));
                        CK(cudaStreamSynchronize(s));
                }
        } else if (m == "oprobe") {
                for (size_t c0 = 0; c0 < chunks; c0 += 8) {
                        size_t n = chunks - c0 < 8 ? chunks - c0 : 8;

                        for (size_t c = c0; c < c0 + n; c++)
                                CK(cudaMemAdvise(ptrs[c], PAGE, cudaMemAdviseSetPreferredLocation, host));
                        for (size_t c = c0; c < c0 + n; c++)
                                CK(cudaMemPrefetchAsync(ptrs[c], PAGE, host, 0, s));
                        CK(cudaStreamSynchronize(s));
                        for (size_t c = c0; c < c0 + n; c++) {
                                CK(cudaMemAdvise(ptrs[c], PAGE, cudaMemAdviseSetReadMostly, vram));
                                CK(cudaMemAdvise(ptrs[c], PAGE, cudaMemAdviseUnsetReadMostly, vram));
                        }
                }
        } else
                for (size_t c = 0; c < chunks; c++) {
                        char *pg = p + c * CHUNK;

                        if (m == "roundtrip")
                                CK(cudaMemPrefetchAsync(pg, PAGE, vram, 0, s));
                        if (m == "roundtrip" || m == "pprobe")
                                CK(cudaMemPrefetchAsync(pg, PAGE, host, 0, s));
                        if (m == "xprobe" || m == "cprobe") {
                                CK(cudaMemAdvise(pg, PAGE, cudaMemAdviseSetPreferredLocation, host));
                                CK(cudaMemAdvise(pg, PAGE, cudaMemAdviseSetReadMostly, vram));
                                CK(cudaMemAdvise(pg, PAGE, cudaMemAdviseUnsetReadMostly, vram));
                                CK(cudaMemPrefetchAsync(pg, PAGE, host, 0, s));
                        }
                        if (m == "probe") {
                                CK(cudaMemAdvise(pg, PAGE, cudaMemAdviseSetPreferredLocation, host));
                                CK(cudaMemPrefetchAsync(pg, PAGE, host, 0, s));
                        }
                        if (m == "toggle" || m == "stoggle" || m == "probe") {
                                CK(cudaMemAdvise(pg, PAGE, cudaMemAdviseSetReadMostly, vram));
                                CK(cudaMemAdvise(pg, PAGE, cudaMemAdviseUnsetReadMostly, vram));
                        }
                }
        CK(cudaStreamSynchronize(s));
        return (now_ms() - t) / chunks;
}

static void method(const std::string &m, bool loaded, size_t bytes, char *q, size_t qbytes, int dev) {
        bool vram_side = m.find("probe") != std::string::npos;
        bool pref_gpu = m == "probe" || m == "oprobe" || m == "cprobe" || m == "bcprobe";
        char access = m == "toggle" || m == "probe" || m == "oprobe" ? 'a' : m == "cprobe" || m == "bcprobe" ? 'n' : 's';
        unsigned long long *out, want = 0, got, touch_want = 0;
        std::atomic<bool> stop{false};
        std::atomic<size_t> moved{0};
        double before, after, again, ms, t, load_ms = 0, whole, ms2, after2;
        cudaStream_t s;
        char *p;

        CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        CK(cudaMallocManaged(&p, bytes));
        CK(cudaMalloc(&out, sizeof(*out)));
        for (size_t i = 0; i < bytes / 8; i++) {
                want += ((unsigned long long *)p)[i] = i * 0x9e3779b97f4a7c15ull;
                if (i % (CHUNK / 8) == 0)
                        touch_want += ((unsigned long long *)p)[i];
        }
        place(p, bytes, vram_side, pref_gpu, access, dev, s);
        before = timed(false, (unsigned long long *)p, bytes, out, s, &got);
        timed(false, (unsigned long long *)p, bytes, out, s, &got);
        std::thread th;
        if (loaded) {
                th = std::thread(load, q, qbytes, dev, &stop, &moved);
                std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
        size_t moved0 = moved.load();
        t = now_ms();
        ms = sample(m, p, bytes, dev, s);
        load_ms = now_ms() - t;
        size_t moved1 = moved.load();
        if (loaded) {
                stop = true;
                th.join();
        }
        after = timed(false, (unsigned long long *)p, bytes, out, s, &got);
        if (got != touch_want)
                printf("  WRONG touch sum\n");
        again = timed(false, (unsigned long long *)p, bytes, out, s, &got);
        ms2 = sample(m, p, bytes, dev, s);
        after2 = timed(false, (unsigned long long *)p, bytes, out, s, &got);
        timed(false, (unsigned long long *)p, bytes, out, s, &got);
        whole = timed(true, (unsigned long long *)p, bytes, out, s, &got);
        printf("%-9s %-5s %8.1f %9.2f %10.3f %10.3f %10.3f %8.1f %10.3f %10.2f %5s\n", m.c_str(),
               loaded ? "moves" : "none", ms * 1e3, loaded ? (moved1 - moved0) / load_ms / 1e6 : 0.0, before,
               after, again, ms2 * 1e3, after2, bytes / whole / 1e6, got == want ? "ok" : "WRONG");
        CK(cudaFree(out));
        CK(cudaFree(p));
        CK(cudaStreamDestroy(s));
}

int main(int argc, char **argv) {
        size_t mib = argc > 1 ? strtoul(argv[1], NULL, 10) : 512;
        size_t load_mib = argc > 2 ? strtoul(argv[2], NULL, 10) : 1024;
        std::string only = argc > 3 ? argv[3] : "";
        const char *methods[] = {"toggle", "stoggle", "roundtrip", "batch", "probe", "oprobe", "pprobe", "bprobe", "xprobe", "cprobe", "bxprobe", "bcprobe"};
        int dev = 0;
        char *q;

        CK(cudaSetDevice(dev));
        CK(cudaMallocManaged(&q, load_mib << 20));
        CK(cudaMemset(q, 1, load_mib << 20));
        CK(cudaDeviceSynchronize());
        printf("method    load  us/chunk load_GBps  before_ms   after_ms   again_ms  us2/chk  after2_ms  read_GBps   sum\n");
        for (int loaded = 0; loaded < 2; loaded++)
                for (const char *m : methods)
                        if (only.empty() || ("," + only + ",").find(std::string(",") + m + ",") != std::string::npos)
                                method(m, loaded, mib << 20, q, load_mib << 20, dev);
        CK(cudaFree(q));
        return 0;
}
