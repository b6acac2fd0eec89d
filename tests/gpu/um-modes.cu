// SPDX-License-Identifier: MIT
// What the GPU does, and what CUPTI reports, when a kernel reads managed
// memory placed in each of the ways kvtier could place it: preferred
// location host (mapped by a kernel's or a copy engine's first touch, or
// evicted there), no preferred location, a host NUMA node, and a re-arm.
// For each mode: three read rounds of the buffer (or of one word per
// --stride, a sparse gather), each with its time and the CUPTI
// unified-memory records that arrived for it (faults, distinct 2 MiB chunks
// faulted, HtoD bytes by migration cause, remote maps).
//   um-modes [MIB] [MODE,...]        modes: see the table below
// CUPTI is loaded with dlopen (shim/cupti-abi.h's types), as the shim does.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <set>
#include <string>
#include <vector>
#include <cuda_runtime.h>

#include "bench-util.h"
#include "cuda-check.h"

#include "cupti-abi.h"

static struct {
#define F(ret, name, args) ret(*name) args;
        KVT_CUPTI_FUNCS(F)
#undef F
} cu;

struct round_stats {
        unsigned long long faults, fault_recs, remote, thrash, htod[8], dtoh, rcause[8];
        std::set<unsigned long long> chunks;
};
static round_stats cur;

static void req(uint8_t **b, size_t *s, size_t *m) {
        *b = (uint8_t *)aligned_alloc(8, 4 << 20);
        *s = 4 << 20;
        *m = 0;
}

static void done(CUcontext, uint32_t, uint8_t *b, size_t, size_t valid) {
        CUpti_Activity *r = NULL;
        while (cu.cuptiActivityGetNextRecord(b, valid, &r) == CUPTI_SUCCESS) {
                if (r->kind != CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER)
                        continue;
                auto *u = (CUpti_ActivityUnifiedMemoryCounter3 *)r;
                switch (u->counterKind) {
                case CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_GPU_PAGE_FAULT:
                        cur.faults += u->value;
                        cur.fault_recs++;
                        cur.chunks.insert(u->address >> 21);
                        break;
                case CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_HTOD:
                        cur.htod[u->flags < 8 ? u->flags : 7] += u->value;
                        break;
                case CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_DTOH:
                        cur.dtoh += u->value;
                        break;
                case CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_REMOTE_MAP:
                        cur.remote += 1;
                        cur.rcause[u->flags < 8 ? u->flags : 7]++;
                        break;
                case CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_THRASHING:
                        cur.thrash += 1;
                        break;
                }
        }
        free(b);
}

static bool cupti_on(void) {
        const char *paths[] = {getenv("CUPTI_LIB"), "libcupti.so.13", "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so.13",
                               "/usr/local/cuda/lib64/libcupti.so.13"};
        void *h = NULL;
        for (const char *p : paths)
                if (p && (h = dlopen(p, RTLD_NOW)))
                        break;
        if (!h) {
                fprintf(stderr, "no libcupti: %s\n", dlerror());
                return false;
        }
#define F(ret, name, args) cu.name = (ret(*) args)dlsym(h, #name);
        KVT_CUPTI_FUNCS(F)
#undef F
        CUpti_ActivityUnifiedMemoryCounterConfig cfg[5];
        int kinds[] = {CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_HTOD,
                       CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_DTOH,
                       CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_GPU_PAGE_FAULT,
                       CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_THRASHING,
                       CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_REMOTE_MAP};
        for (int i = 0; i < 5; i++)
                cfg[i] = {CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_SCOPE_PROCESS_SINGLE_DEVICE, kinds[i], 0, 1};
        if (cu.cuptiActivityRegisterCallbacks(req, done) || cu.cuptiActivityConfigureUnifiedMemoryCounter(cfg, 5) ||
            cu.cuptiActivityEnable(CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER)) {
                // remote map may be unsupported: retry without it
                if (cu.cuptiActivityConfigureUnifiedMemoryCounter(cfg, 4) ||
                    cu.cuptiActivityEnable(CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER)) {
                        fprintf(stderr, "CUPTI UM counters refused\n");
                        return false;
                }
                fprintf(stderr, "CUPTI: no remote-map counter\n");
        }
        return true;
}

__global__ static void k_read(const unsigned long long *p, size_t words, size_t stride, unsigned long long *sink) {
        unsigned long long x = 0;
        for (size_t i = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) * stride; i < words;
             i += (size_t)gridDim.x * blockDim.x * stride)
                x ^= p[i];
        if (x == 0x5555aaaa5555aaaaull)
                *sink = x;
}

__global__ static void k_write(unsigned long long *p, size_t words, unsigned long long salt) {
        for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < words; i += (size_t)gridDim.x * blockDim.x)
                p[i] = i ^ salt;
}

static bool cupti_ok;

static void flush_reset(void) {
        CK(cudaDeviceSynchronize());
        if (cupti_ok)
                cu.cuptiActivityFlushAll(1);
        cur = round_stats();
}

static void report(const char *mode, const char *what, double ms, size_t bytes) {
        CK(cudaDeviceSynchronize());
        if (cupti_ok)
                cu.cuptiActivityFlushAll(1);
        printf("%-12s %-8s %9.3f ms %8.1f GB/s  faults %6llu in %5llu recs, %4zu chunks; htod MiB user %llu coh %llu pref %llu other %llu; dtoh %llu; remote %llu (causes %llu/%llu/%llu/%llu/%llu/%llu) thrash %llu\n",
               mode, what, ms, bytes / ms / 1e6, cur.faults, cur.fault_recs, cur.chunks.size(), cur.htod[1] >> 20,
               cur.htod[2] >> 20, cur.htod[3] >> 20, (cur.htod[0] + cur.htod[4] + cur.htod[5] + cur.htod[6] + cur.htod[7]) >> 20,
               cur.dtoh >> 20, cur.remote, cur.rcause[0], cur.rcause[1], cur.rcause[2], cur.rcause[3], cur.rcause[4], cur.rcause[5], cur.thrash);
        fflush(stdout);
        cur = round_stats();
}

int main(int argc, char **argv) {
        size_t mib = argc > 1 ? strtoul(argv[1], NULL, 10) : 1024;
        std::string modes = argc > 2 ? argv[2]
                                     : "host-kern,host-ce,host-rearm,evict-host,evict-none,evict-numa,none-ce,none-kern,none-h2d,"
                                       "evict-none-sparse,evict-host-sparse";
        size_t bytes = mib << 20, words = bytes / 8;
        unsigned long long *sink, *src;
        void *pinned;
        cudaStream_t s;
        const cudaMemLocation host = {cudaMemLocationTypeHost, 0}, gpu = {cudaMemLocationTypeDevice, 0},
                              numa = {cudaMemLocationTypeHostNuma, 0};

        CK(cudaFree(0));
        cupti_ok = cupti_on();
        CK(cudaMalloc(&sink, 8));
        CK(cudaMalloc(&src, bytes));
        CK(cudaMallocHost(&pinned, bytes));
        CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        k_write<<<1024, 256, 0, s>>>(src, words, 7);
        memset(pinned, 1, bytes);
        CK(cudaDeviceSynchronize());

        size_t pos = 0;
        while (pos < modes.size()) {
                size_t comma = modes.find(',', pos);
                std::string m = modes.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
                pos = comma == std::string::npos ? modes.size() : comma + 1;
                bool sparse = m.size() > 7 && m.compare(m.size() - 7, 7, "-sparse") == 0;
                std::string base = sparse ? m.substr(0, m.size() - 7) : m;
                unsigned long long *buf;
                double t;

                CK(cudaMallocManaged(&buf, bytes));
                flush_reset();
                if (base == "probe-vram" || base == "probe-host" || base == "probe-hostce") {
                        // One 4 KiB page per 2 MiB chunk probed: in VRAM by evicting the
                        // page, in host memory (evicted, then mapped by advice) by
                        // re-arming it; then a kernel reads the first half of the buffer.
                        const size_t page = 4096, chunk = 2u << 20, n = bytes / chunk;
                        if (base == "probe-hostce") {
                                CK(cudaMemAdvise(buf, bytes, cudaMemAdviseSetPreferredLocation, host));
                                CK(cudaMemcpyAsync(buf, src, bytes, cudaMemcpyDeviceToDevice, s));
                        } else {
                                CK(cudaMemAdvise(buf, bytes, cudaMemAdviseSetPreferredLocation, gpu));
                                k_write<<<1024, 256, 0, s>>>(buf, words, 3);
                        }
                        CK(cudaStreamSynchronize(s));
                        if (base == "probe-host") {
                                CK(cudaMemAdvise(buf, bytes, cudaMemAdviseSetPreferredLocation, host));
                                CK(cudaMemPrefetchAsync(buf, bytes, host, 0, s));
                                CK(cudaStreamSynchronize(s));
                                CK(cudaMemAdvise(buf, bytes, cudaMemAdviseSetAccessedBy, gpu));
                        }
                        k_read<<<1024, 256, 0, s>>>(buf, words, 1, sink);
                        report(m.c_str(), "setup", 0.001, bytes);
                        for (int rep = 0; rep < 2; rep++) {
                                t = now_ms();
                                for (size_t c = 0; c < n; c++) {
                                        char *pg = (char *)buf + c * chunk + (c * 37 % 512) * page;
                                        if (base == "probe-vram") {
                                                CK(cudaMemAdvise(pg, page, cudaMemAdviseSetPreferredLocation, host));
                                                CK(cudaMemPrefetchAsync(pg, page, host, 0, s));
                                        } else {
                                                CK(cudaMemAdvise(pg, page, cudaMemAdviseSetReadMostly, gpu));
                                                CK(cudaMemAdvise(pg, page, cudaMemAdviseUnsetReadMostly, gpu));
                                        }
                                }
                                CK(cudaStreamSynchronize(s));
                                report(m.c_str(), "probe", now_ms() - t, bytes);
                                for (int r = 0; r < 2; r++) {
                                        t = now_ms();
                                        k_read<<<1024, 256, 0, s>>>(buf, words / 2, 1, sink);
                                        CK(cudaStreamSynchronize(s));
                                        report(m.c_str(), "readhalf", now_ms() - t, bytes / 2);
                                }
                                t = now_ms();
                                k_read<<<1024, 256, 0, s>>>(buf, words, 1, sink);
                                CK(cudaStreamSynchronize(s));
                                report(m.c_str(), "readall", now_ms() - t, bytes);
                                if (base == "probe-vram") { // promote the probed pages back
                                        t = now_ms();
                                        for (size_t c = 0; c < n; c++) {
                                                char *pg = (char *)buf + c * chunk + (c * 37 % 512) * page;
                                                CK(cudaMemPrefetchAsync(pg, page, gpu, 0, s));
                                                CK(cudaMemAdvise(pg, page, cudaMemAdviseSetPreferredLocation, gpu));
                                        }
                                        CK(cudaStreamSynchronize(s));
                                        report(m.c_str(), "unprobe", now_ms() - t, bytes);
                                        t = now_ms();
                                        k_read<<<1024, 256, 0, s>>>(buf, words, 1, sink);
                                        CK(cudaStreamSynchronize(s));
                                        report(m.c_str(), "readall", now_ms() - t, bytes);
                                }
                        }
                        CK(cudaFree(buf));
                        continue;
                }
                t = now_ms();
                if (base == "host-kern" || base == "host-ce" || base == "host-rearm" || base == "pop-host" ||
                    base == "fresh-ab" || base == "pop-host-ab") {
                        // fresh-ab: a capture past the grant mapped by advice before its
                        // first touch; pop-host-ab: populated on the host, then mapped
                        // by advice, then written by a kernel.
                        CK(cudaMemAdvise(buf, bytes, cudaMemAdviseSetPreferredLocation, host));
                        if (base == "pop-host" || base == "pop-host-ab") { // populate on the host first
                                CK(cudaMemPrefetchAsync(buf, bytes, host, 0, s));
                                CK(cudaStreamSynchronize(s));
                                report(m.c_str(), "populate", now_ms() - t, bytes);
                                t = now_ms();
                        }
                        if (base == "fresh-ab" || base == "pop-host-ab") {
                                CK(cudaMemAdvise(buf, bytes, cudaMemAdviseSetAccessedBy, gpu));
                                report(m.c_str(), "map", now_ms() - t, bytes);
                                t = now_ms();
                        }
                        if (base == "host-kern" || base == "fresh-ab" || base == "pop-host-ab")
                                k_write<<<1024, 256, 0, s>>>(buf, words, 3);
                        else
                                CK(cudaMemcpyAsync(buf, src, bytes, cudaMemcpyDeviceToDevice, s));
                } else if (base.rfind("evict-", 0) == 0) {
                        CK(cudaMemAdvise(buf, bytes, cudaMemAdviseSetPreferredLocation, gpu));
                        k_write<<<1024, 256, 0, s>>>(buf, words, 3);
                } else if (base == "none-ce") {
                        CK(cudaMemcpyAsync(buf, src, bytes, cudaMemcpyDeviceToDevice, s));
                } else if (base == "none-kern") {
                        k_write<<<1024, 256, 0, s>>>(buf, words, 3);
                } else if (base == "none-h2d") {
                        CK(cudaMemcpyAsync(buf, pinned, bytes, cudaMemcpyHostToDevice, s));
                } else {
                        fprintf(stderr, "unknown mode %s\n", m.c_str());
                        return 2;
                }
                CK(cudaStreamSynchronize(s));
                report(m.c_str(), "fill", now_ms() - t, bytes);

                t = now_ms();
                if (base == "host-rearm") {
                        k_read<<<1024, 256, 0, s>>>(buf, words, 1, sink); // map it by a read first
                        CK(cudaStreamSynchronize(s));
                        report(m.c_str(), "premap", now_ms() - t, bytes);
                        t = now_ms();
                        CK(cudaMemAdvise(buf, bytes, cudaMemAdviseSetReadMostly, gpu));
                        CK(cudaMemAdvise(buf, bytes, cudaMemAdviseUnsetReadMostly, gpu));
                        report(m.c_str(), "rearm", now_ms() - t, bytes);
                } else if (base.rfind("evict-", 0) == 0) {
                        bool to_host = base == "evict-host" || base == "evict-host-rearm" || base == "evict-host-ab" ||
                                       base == "evict-mapped";
                        if (to_host)
                                CK(cudaMemAdvise(buf, bytes, cudaMemAdviseSetPreferredLocation, host));
                        if (base == "evict-mapped")
                                CK(cudaMemAdvise(buf, bytes, cudaMemAdviseSetAccessedBy, gpu));
                        else if (base == "evict-none" || base == "evict-none-rearm")
                                CK(cudaMemAdvise(buf, bytes, cudaMemAdviseUnsetPreferredLocation, gpu));
                        else
                                CK(cudaMemAdvise(buf, bytes, cudaMemAdviseSetPreferredLocation, numa));
                        CK(cudaMemPrefetchAsync(buf, bytes, base == "evict-numa" ? numa : host, 0, s));
                        CK(cudaStreamSynchronize(s));
                        report(m.c_str(), "evict", now_ms() - t, bytes);
                        t = now_ms();
                        if (base == "evict-host-rearm") {
                                CK(cudaMemAdvise(buf, bytes, cudaMemAdviseSetReadMostly, gpu));
                                CK(cudaMemAdvise(buf, bytes, cudaMemAdviseUnsetReadMostly, gpu));
                                report(m.c_str(), "rearm", now_ms() - t, bytes);
                        } else if (base == "evict-host-ab") {
                                CK(cudaMemAdvise(buf, bytes, cudaMemAdviseSetAccessedBy, gpu));
                                report(m.c_str(), "map", now_ms() - t, bytes);
                        }
                }
                for (int r = 0; r < 3; r++) {
                        size_t stride = sparse && r == 0 ? 64 * 1024 / 8 : 1;
                        t = now_ms();
                        k_read<<<1024, 256, 0, s>>>(buf, words, stride, sink);
                        CK(cudaStreamSynchronize(s));
                        report(m.c_str(), stride > 1 ? "sparse" : "read", now_ms() - t, stride > 1 ? bytes / stride * 8 : bytes);
                }
                if (base.size() > 6 && base.compare(base.size() - 6, 6, "-rearm") == 0) {
                        t = now_ms();
                        CK(cudaMemAdvise(buf, bytes, cudaMemAdviseSetReadMostly, gpu));
                        CK(cudaMemAdvise(buf, bytes, cudaMemAdviseUnsetReadMostly, gpu));
                        report(m.c_str(), "rearm2", now_ms() - t, bytes);
                        for (int r = 0; r < 2; r++) {
                                t = now_ms();
                                k_read<<<1024, 256, 0, s>>>(buf, words, 1, sink);
                                CK(cudaStreamSynchronize(s));
                                report(m.c_str(), "read3", now_ms() - t, bytes);
                        }
                }
                // after the rounds: a second eviction and reads (does it still behave the same?)
                if (base.rfind("evict-", 0) == 0) {
                        t = now_ms();
                        CK(cudaMemPrefetchAsync(buf, bytes, base == "evict-numa" ? numa : host, 0, s));
                        CK(cudaStreamSynchronize(s));
                        report(m.c_str(), "evict2", now_ms() - t, bytes);
                        for (int r = 0; r < 2; r++) {
                                t = now_ms();
                                k_read<<<1024, 256, 0, s>>>(buf, words, 1, sink);
                                CK(cudaStreamSynchronize(s));
                                report(m.c_str(), "read2", now_ms() - t, bytes);
                        }
                }
                CK(cudaFree(buf));
        }
        return 0;
}
