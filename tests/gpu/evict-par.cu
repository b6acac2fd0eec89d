// SPDX-License-Identifier: MIT
// What limits a managed-memory eviction (GPU to host) on a real GPU:
// does it scale with threads, with CUDA contexts, with processes, and what
// does the driver's host-side work alone cost (discard-and-prefetch to the
// host moves no data)?  A diagnostic for issue 5, not a test: it prints
// GB/s and checks that every evicted word arrived.
//
//   evict-par [--size N[G|M]] [--piece N[M]] [--host-numa]
//             [--modes LIST]     threads: p1,p2,p4 (N threads in the primary
//                                context, a stream each), c1,c2,c4 (N threads,
//                                a context and stream each), d1 (discard and
//                                prefetch to the host, one thread); a mode may
//                                end in advice for each piece, as the mover
//                                gives it: :pH (preferred location host
//                                before the prefetch), :pHaB (and accessed-by
//                                the GPU), :after (preferred location host
//                                after the prefetch)
//             [--procs N]        instead: N processes, size/N bytes each
//             [--cycles N]       instead: N round trips per kind in --modes
//                                (mover4, once4: see run_cycles)
//
// Each mode: the GPU writes the whole region (so it is in VRAM), then the
// threads evict their slices in piece-sized prefetches to the host, at once
// (span = last end - first start, CLOCK_MONOTONIC); the host checks one word
// per 4 KiB; the region goes back to the GPU.  Also printed: device memory
// a created context takes, before and after lowering its limits.
#include <cerrno>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <cuda.h>
#include <cuda_runtime.h>
#include <getopt.h>
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_THREADS 16

__host__ __device__ static inline uint64_t pattern(uint64_t seed, uint64_t off) {
        uint64_t x = seed ^ (off * 0x9e3779b97f4a7c15ull);
        x ^= x >> 31;
        x *= 0xbf58476d1ce4e5b9ull;
        x ^= x >> 29;
        return x;
}

__global__ static void k_read(const uint64_t *p, size_t words, unsigned long long *sink) {
        uint64_t x = 0;
        for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < words; i += (size_t)gridDim.x * blockDim.x)
                x ^= p[i];
        if (x == 0x5555aaaa5555aaaaull)
                atomicAdd(sink, 1);
}

__global__ static void k_fill(uint64_t *p, size_t words, uint64_t seed) {
        for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < words; i += (size_t)gridDim.x * blockDim.x)
                p[i] = pattern(seed, i * 8);
}

static bool host_numa;

static double now_s(void) {
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int check_rt(cudaError_t e, const char *what) {
        if (e == cudaSuccess)
                return 0;
        fprintf(stderr, "evict-par: %s: %s\n", what, cudaGetErrorString(e));
        return -EIO;
}

static int check_cu(CUresult r, const char *what) {
        const char *s = NULL;

        if (r == CUDA_SUCCESS)
                return 0;
        cuGetErrorString(r, &s);
        fprintf(stderr, "evict-par: %s: %s\n", what, s ? s : "?");
        return -EIO;
}

static struct cudaMemLocation host_loc(void) {
        struct cudaMemLocation l = {};

        l.type = host_numa ? cudaMemLocationTypeHostNuma : cudaMemLocationTypeHost;
        l.id = 0;
        return l;
}

static size_t free_mib(void) {
        size_t fr = 0, total = 0;

        cudaMemGetInfo(&fr, &total);
        return fr >> 20;
}

enum advice { ADVICE_NONE, ADVICE_PH, ADVICE_PH_AB, ADVICE_AFTER, ADVICE_UNSET_AB, ADVICE_MOVER };

struct slice {
        char *base;
        size_t len, piece;
        bool own_context, discard;
        enum advice advice;
        double advise_s; /* time in advice calls */
        pthread_barrier_t *ready;
        CUcontext ctx;
        double t0, t1;
        int err;
};

static int advise(struct slice *s, char *p, size_t n, bool before) {
        struct cudaMemLocation host = {}, gpu = {};
        double t = now_s();
        int err = 0;

        host.type = cudaMemLocationTypeHost;
        gpu.type = cudaMemLocationTypeDevice;
        if (before && (s->advice == ADVICE_PH || s->advice == ADVICE_PH_AB))
                err = check_rt(cudaMemAdvise(p, n, cudaMemAdviseSetPreferredLocation, host), "advise pH");
        if (!err && before && s->advice == ADVICE_PH_AB)
                err = check_rt(cudaMemAdvise(p, n, cudaMemAdviseSetAccessedBy, gpu), "advise aB");
        if (before && s->advice == ADVICE_MOVER)
                err = check_rt(cudaMemAdvise(p, n, cudaMemAdviseSetPreferredLocation, host), "advise pH");
        if (!err && before && (s->advice == ADVICE_UNSET_AB || s->advice == ADVICE_MOVER))
                err = check_rt(cudaMemAdvise(p, n, cudaMemAdviseUnsetAccessedBy, gpu), "advise unset aB");
        if (!before && s->advice == ADVICE_AFTER)
                err = check_rt(cudaMemAdvise(p, n, cudaMemAdviseSetPreferredLocation, host), "advise pH after");
        s->advise_s += now_s() - t;
        return err;
}

static int evict_slice(struct slice *s) {
        cudaStream_t st;
        int err = 0;

        if (check_rt(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), "stream"))
                return -EIO;
        pthread_barrier_wait(s->ready);
        s->t0 = now_s();
        for (size_t off = 0; off < s->len && !err; off += s->piece) {
                size_t n = s->len - off < s->piece ? s->len - off : s->piece;

                err = advise(s, s->base + off, n, true);
                if (err)
                        break;
                if (s->discard) {
                        CUdeviceptr ptr = (CUdeviceptr)(s->base + off);
                        CUmemLocation loc = {};
                        size_t idx = 0;

                        loc.type = host_numa ? CU_MEM_LOCATION_TYPE_HOST_NUMA : CU_MEM_LOCATION_TYPE_HOST;
                        err = check_cu(cuMemDiscardAndPrefetchBatchAsync(&ptr, &n, 1, &loc, &idx, 1, 0, st),
                                       "discard and prefetch");
                } else
                        err = check_rt(cudaMemPrefetchAsync(s->base + off, n, host_loc(), 0, st), "prefetch");
                if (!err && s->advice == ADVICE_AFTER)
                        err = check_rt(cudaStreamSynchronize(st), "sync") || advise(s, s->base + off, n, false);
        }
        if (!err)
                err = check_rt(cudaStreamSynchronize(st), "sync");
        s->t1 = now_s();
        cudaStreamDestroy(st);
        return err;
}

static void *slice_main(void *arg) {
        struct slice *s = (struct slice *)arg;

        if (s->own_context) {
                if (check_cu(cuCtxSetCurrent(s->ctx), "set context")) {
                        s->err = -EIO;
                        pthread_barrier_wait(s->ready);
                        return NULL;
                }
        } else if (check_rt(cudaSetDevice(0), "set device")) {
                s->err = -EIO;
                pthread_barrier_wait(s->ready);
                return NULL;
        }
        s->err = evict_slice(s);
        return NULL;
}

static int fill(char *base, size_t len, uint64_t seed) {
        k_fill<<<4096, 256>>>((uint64_t *)base, len / 8, seed);
        return check_rt(cudaDeviceSynchronize(), "fill");
}

// One word per 4 KiB, read by the CPU: each evicted page arrived intact.
static uint64_t host_check(const char *base, size_t len, uint64_t seed) {
        uint64_t bad = 0;

        for (size_t off = 0; off < len; off += 4096)
                bad += *(const uint64_t *)(base + off) != pattern(seed, off);
        return bad;
}

// Evicts [base, base + size) from n threads at once, each a slice like
// proto (base, len, ready and context filled in here); *ret_t0, *ret_t1:
// the first start and the last end; *ret_advise_s: time in advice calls.
static int evict_by_threads(char *base, size_t size, unsigned n, const struct slice *proto, const CUcontext *ctx,
                            double *ret_t0, double *ret_t1, double *ret_advise_s) {
        struct slice sl[MAX_THREADS];
        pthread_t th[MAX_THREADS];
        pthread_barrier_t ready;
        int err = 0;

        *ret_t0 = 1e300;
        *ret_t1 = *ret_advise_s = 0;
        pthread_barrier_init(&ready, NULL, n);
        for (unsigned i = 0; i < n; i++) {
                sl[i] = *proto;
                sl[i].base = base + size / n * i;
                sl[i].len = size / n;
                sl[i].ready = &ready;
                sl[i].ctx = ctx[i];
                pthread_create(&th[i], NULL, slice_main, &sl[i]);
        }
        for (unsigned i = 0; i < n; i++) {
                pthread_join(th[i], NULL);
                err |= sl[i].err;
                *ret_t0 = sl[i].t0 < *ret_t0 ? sl[i].t0 : *ret_t0;
                *ret_t1 = sl[i].t1 > *ret_t1 ? sl[i].t1 : *ret_t1;
                *ret_advise_s += sl[i].advise_s;
        }
        pthread_barrier_destroy(&ready);
        for (unsigned i = 0; i < n && n > 1; i++)
                printf("     thread %u: %.1f .. %.1f ms\n", i, (sl[i].t0 - *ret_t0) * 1e3, (sl[i].t1 - *ret_t0) * 1e3);
        return err;
}

// Back to VRAM, the advice undone as the mover's promotion does it.
static int back_to_gpu(char *base, size_t len) {
        struct cudaMemLocation gpu = {};

        gpu.type = cudaMemLocationTypeDevice;
        gpu.id = 0;
        return check_rt(cudaMemPrefetchAsync(base, len, gpu, 0, 0), "promote") ||
               check_rt(cudaDeviceSynchronize(), "promote") ||
               check_rt(cudaMemAdvise(base, len, cudaMemAdviseSetPreferredLocation, gpu), "advise pG") ||
               check_rt(cudaMemAdvise(base, len, cudaMemAdviseUnsetAccessedBy, gpu), "advise unset aB");
}

// Creates n contexts and tells what they cost: device memory as created,
// and after lowering the limits that size their reservations.
static int make_contexts(CUcontext *ctx, unsigned n) {
        CUcontext primary;
        CUdevice dev;
        size_t before = free_mib(), created, limited;

        if (check_cu(cuCtxGetCurrent(&primary), "current") || check_cu(cuDeviceGet(&dev, 0), "device"))
                return -EIO;
        for (unsigned i = 0; i < n; i++) {
                if (check_cu(cuCtxCreate(&ctx[i], NULL, CU_CTX_SCHED_BLOCKING_SYNC, dev), "context"))
                        return -EIO;
        }
        created = free_mib();
        for (unsigned i = 0; i < n; i++) {
                CUresult a, b, c;

                cuCtxSetCurrent(ctx[i]);
                a = cuCtxSetLimit(CU_LIMIT_STACK_SIZE, 0);
                b = cuCtxSetLimit(CU_LIMIT_PRINTF_FIFO_SIZE, 0);
                c = cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, 0);
                if (i == 0)
                        printf("  limits to 0: stack %d, printf fifo %d, malloc heap %d (CUDA results)\n", (int)a,
                               (int)b, (int)c);
        }
        limited = free_mib();
        cuCtxSetCurrent(primary);
        printf("  %u context(s): device memory free %zu -> %zu MiB as created (%zu MiB each), %zu MiB with limits "
               "lowered\n",
               n, before, created, n ? (before - created) / n : 0, limited);
        return 0;
}

// One mode over the whole region; returns 0 if every word checked arrived.
static int run_mode(char *base, size_t size, size_t piece, const char *mode, uint64_t seed) {
        unsigned n = (unsigned)atoi(mode + 1);
        bool own = mode[0] == 'c', discard = mode[0] == 'd';
        const char *adv = strchr(mode, ':');
        enum advice advice = !adv                         ? ADVICE_NONE
                             : strcmp(adv, ":pH") == 0    ? ADVICE_PH
                             : strcmp(adv, ":pHaB") == 0  ? ADVICE_PH_AB
                             : strcmp(adv, ":after") == 0 ? ADVICE_AFTER
                                                          : (enum advice)-1;
        double advise_s = 0;
        CUcontext ctx[MAX_THREADS] = {};
        struct slice proto;
        double t0, t1;
        uint64_t bad;
        int err = 0;

        if (n < 1 || n > MAX_THREADS || !strchr("pcd", mode[0]) || advice == (enum advice)-1) {
                fprintf(stderr, "evict-par: bad mode %s\n", mode);
                return -EINVAL;
        }
        if (fill(base, size, seed))
                return -EIO;
        if (own && make_contexts(ctx, n))
                return -EIO;
        proto = (struct slice){.piece = piece, .own_context = own, .discard = discard, .advice = advice};
        err = evict_by_threads(base, size, n, &proto, ctx, &t0, &t1, &advise_s);
        bad = discard ? 0 : host_check(base, size, seed);
        printf("%-9s %zu MiB in %zu MiB prefetches to the host: %.1f ms, %.1f GB/s%s, %" PRIu64
               " words wrong; %.1f ms in advice calls\n",
               mode, size >> 20, piece >> 20, (t1 - t0) * 1e3, (double)size / (t1 - t0) / 1e9,
               discard ? " (no data: discarded)" : "", bad, advise_s * 1e3);
        for (unsigned i = 0; i < n; i++)
                if (ctx[i])
                        cuCtxDestroy(ctx[i]);
        if (err || back_to_gpu(base, size))
                return -EIO;
        return bad ? -EIO : 0;
}

// Milliseconds a GPU read of [base, base + len) takes.
static float gpu_read_ms(const char *base, size_t len) {
        static unsigned long long *sink;
        cudaEvent_t a, b;
        float ms = -1;

        if ((!sink && cudaMalloc(&sink, sizeof(*sink)) != cudaSuccess) || cudaEventCreate(&a) != cudaSuccess ||
            cudaEventCreate(&b) != cudaSuccess)
                return -1;
        cudaEventRecord(a);
        k_read<<<4096, 256>>>((const uint64_t *)base, len / 8, sink);
        cudaEventRecord(b);
        if (cudaEventSynchronize(b) == cudaSuccess)
                cudaEventElapsedTime(&ms, a, b);
        cudaEventDestroy(a);
        cudaEventDestroy(b);
        return ms;
}

// Round trips of a region advised as the shim captures it (preferred
// location host, accessed-by the GPU): promotion in piece-sized prefetches
// from one thread, the GPU writes all, eviction by threads in contexts of
// their own.  "mover": advice as the mover gives it today (preferred
// location host and accessed-by unset before each eviction piece, preferred
// location the GPU after each promotion).  "once": the preferred location
// stays the host; accessed-by is unset in the first eviction only (a shim
// that knows a chunk's advice skips what is already so).  Then the GPU
// reads the evicted region twice: a second read as slow as the first says
// its pages stayed on the host (mapped, not migrated back).
static int run_cycles(char *base, size_t size, size_t piece, unsigned n, bool mover, unsigned cycles) {
        struct cudaMemLocation host = {}, gpu = {};
        CUcontext ctx[MAX_THREADS] = {};
        cudaStream_t st;
        int err = 0;

        host.type = cudaMemLocationTypeHost;
        gpu.type = cudaMemLocationTypeDevice;
        if (n < 1 || n > MAX_THREADS || check_rt(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), "stream") ||
            check_rt(cudaMemAdvise(base, size, cudaMemAdviseSetPreferredLocation, host), "pH") ||
            check_rt(cudaMemAdvise(base, size, cudaMemAdviseSetAccessedBy, gpu), "aB") || make_contexts(ctx, n))
                return -EIO;
        for (unsigned c = 0; c < cycles && !err; c++) {
                double t0 = now_s(), up, t1, t2, advise_s;
                struct slice proto;
                uint64_t bad;

                for (size_t off = 0; off < size && !err; off += piece)
                        err = check_rt(cudaMemPrefetchAsync(base + off, piece, gpu, 0, st), "promote");
                if (err || check_rt(cudaStreamSynchronize(st), "promote") ||
                    (mover && check_rt(cudaMemAdvise(base, size, cudaMemAdviseSetPreferredLocation, gpu), "pG")))
                        return -EIO;
                up = now_s() - t0;
                if (fill(base, size, 77 + c))
                        return -EIO;
                proto = (struct slice){
                        .piece = piece,
                        .own_context = true,
                        .advice = mover ? ADVICE_MOVER : c == 0 ? ADVICE_UNSET_AB : ADVICE_NONE,
                };
                err = evict_by_threads(base, size, n, &proto, ctx, &t1, &t2, &advise_s);
                bad = host_check(base, size, 77 + c);
                printf("%s x%u cycle %u: promotion %.1f GB/s, eviction %.1f GB/s (%.1f ms in advice calls), %" PRIu64
                       " words wrong\n",
                       mover ? "mover" : "once", n, c, (double)size / up / 1e9, (double)size / (t2 - t1) / 1e9,
                       advise_s * 1e3, bad);
                err |= bad ? -EIO : 0;
        }
        if (!err) {
                float first = gpu_read_ms(base, size), second = gpu_read_ms(base, size);

                printf("%s x%u: GPU reads of the evicted region %.1f then %.1f ms (%.1f GB/s the second)\n",
                       mover ? "mover" : "once", n, first, second, (double)size / second / 1e6);
        }
        for (unsigned i = 0; i < n; i++)
                cuCtxDestroy(ctx[i]);
        cudaStreamDestroy(st);
        return err;
}

static size_t parse_size(const char *s) {
        char *end;
        double v = strtod(s, &end);

        return (size_t)(v * (*end == 'G' ? 1 << 30 : *end == 'K' ? 1 << 10 : 1 << 20));
}

// The process mode: n children, each its own region of size/n, evicting
// when the parent says go; each prints its span, the parent the whole.
static int run_procs(unsigned n, size_t size, size_t piece) {
        int up[2], go[2];
        double t0 = 1e300, t1 = 0;
        int err = 0;

        if (pipe(up) || pipe(go))
                return -errno;
        for (unsigned i = 0; i < n; i++) {
                if (fork() == 0) {
                        size_t len = size / n;
                        double span[2] = {0, 0};
                        struct slice s = {};
                        pthread_barrier_t one;
                        char *base;
                        char c;
                        int e;

                        close(up[0]);
                        close(go[1]);
                        pthread_barrier_init(&one, NULL, 1);
                        e = check_rt(cudaMallocManaged(&base, len, cudaMemAttachGlobal), "alloc") ||
                            fill(base, len, 7 + i);
                        if (write(up[1], &c, 1) != 1 || read(go[0], &c, 1) != 1 || e)
                                _exit(1);
                        s = (struct slice){.base = base, .len = len, .piece = piece, .ready = &one};
                        e = evict_slice(&s);
                        span[0] = s.t0;
                        span[1] = s.t1;
                        if (!e && host_check(base, len, 7 + i))
                                e = -EIO;
                        if (write(up[1], span, sizeof(span)) != sizeof(span))
                                _exit(1);
                        _exit(e ? 1 : 0);
                }
        }
        close(up[1]);
        close(go[0]);
        for (unsigned i = 0; i < n; i++) {
                char c;
                if (read(up[0], &c, 1) != 1)
                        err = -EIO;
        }
        for (unsigned i = 0; i < n; i++)
                if (write(go[1], "g", 1) != 1)
                        err = -EIO;
        for (unsigned i = 0; i < n; i++) {
                double span[2];
                int st;

                if (read(up[0], span, sizeof(span)) != sizeof(span)) {
                        err = -EIO;
                        continue;
                }
                t0 = span[0] < t0 ? span[0] : t0;
                t1 = span[1] > t1 ? span[1] : t1;
                printf("     process %u: %.1f GB/s alone\n", i, (double)(size / n) / (span[1] - span[0]) / 1e9);
                (void)st;
        }
        for (unsigned i = 0; i < n; i++) {
                int st;
                if (wait(&st) < 0 || !WIFEXITED(st) || WEXITSTATUS(st))
                        err = -EIO;
        }
        printf("P%-3u %zu MiB in %zu MiB prefetches to the host: %.1f ms, %.1f GB/s%s\n", n, size >> 20, piece >> 20,
               (t1 - t0) * 1e3, (double)size / (t1 - t0) / 1e9, err ? " (a child failed)" : "");
        return err;
}

int main(int argc, char **argv) {
        static const struct option opts[] = {{"size", required_argument, NULL, 's'},
                                             {"piece", required_argument, NULL, 'p'},
                                             {"modes", required_argument, NULL, 'm'},
                                             {"procs", required_argument, NULL, 'P'},
                                             {"host-numa", no_argument, NULL, 'n'},
                                             {"cycles", required_argument, NULL, 'C'},
                                             {}};
        size_t size = 4ull << 30, piece = 64ull << 20;
        char modes[256] = "p1,p2,p4,c1,c2,c4,d1";
        unsigned procs = 0, cycles = 0;
        char *base, *tok, *save = NULL;
        int c, err = 0;

        while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
                switch (c) {
                case 's': size = parse_size(optarg); break;
                case 'p': piece = parse_size(optarg); break;
                case 'm': snprintf(modes, sizeof(modes), "%s", optarg); break;
                case 'P': procs = (unsigned)atoi(optarg); break;
                case 'n': host_numa = true; break;
                case 'C': cycles = (unsigned)atoi(optarg); break;
                default: return 2;
                }
        }
        if (!size || !piece || size % (64ull << 20) || procs > MAX_THREADS) {
                fprintf(stderr, "evict-par: size must be a multiple of 64 MiB, procs at most %d\n", MAX_THREADS);
                return 2;
        }
        if (procs)
                return run_procs(procs, size, piece) ? 1 : 0;
        if (check_cu(cuInit(0), "init") || check_rt(cudaSetDevice(0), "device") ||
            check_rt(cudaMallocManaged(&base, size, cudaMemAttachGlobal), "alloc"))
                return 1;
        printf("evict-par: %zu MiB managed, %zu MiB pieces, host location %s, free %zu MiB\n", size >> 20,
               piece >> 20, host_numa ? "NUMA node 0" : "host", free_mib());
        if (cycles) { // --modes names the cycles' kinds: mover4, once4 (evicting threads)
                for (tok = strtok_r(modes, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
                        if (run_cycles(base, size, piece, (unsigned)atoi(tok + strcspn(tok, "0123456789")),
                                       strncmp(tok, "mover", 5) == 0, cycles))
                                err = 1;
                cudaFree(base);
                return err;
        }
        for (tok = strtok_r(modes, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
                if (run_mode(base, size, piece, tok, 0x5eed + (uint64_t)(tok - modes)))
                        err = 1;
        cudaFree(base);
        return err;
}
