/* SPDX-License-Identifier: MIT */
/*
 * api-engine: allocates device memory through one CUDA allocation API, the
 * way some real engine does, so the tests can check that the shim captures
 * each path, and that the engine's data and exit status are unharmed.
 *
 *   api-engine --mode MODE [--regions N] [--size BYTES] [--hold FILE]
 *              [--threads N --iterations N]
 *
 * MODE:
 *   runtime       cudaMalloc / cudaFree (linked symbols)
 *   driver        cuMemAlloc_v2 / cuMemFree_v2 (linked symbols)
 *   dlsym         the driver API through dlopen("libcuda.so.1") + dlsym (XLA)
 *   procaddr      the driver API through dlsym(cuGetProcAddress_v2) and
 *                 cuGetProcAddress only (as a static cudart does)
 *   entrypoint    the driver API through cudaGetDriverEntryPointByVersion
 *   async         cudaMallocAsync / cudaFreeAsync
 *   pool          cudaMallocFromPoolAsync / cudaFreeAsync
 *   driver-async  cuMemAllocAsync / cuMemFreeAsync
 *   vmm           cuMemAddressReserve + cuMemCreate + cuMemMap (PyTorch's
 *                 expandable segments)
 *
 * Async modes first free one region while its stream is held (fake CUDA:
 * fakecuda_stream_hold) and print how many bytes were still allocated then,
 * and whether they were freed once the stream was released.
 * --hold FILE: after allocating, print "holding" and wait (at most 30 s)
 * until FILE exists, so a test can look at kvtierctl meanwhile.
 * --fork: fork() before any CUDA call; parent and child each run the
 * engine, and the parent exits with the child's failure if it failed.
 * --fork-storm N (with --threads): while the threads allocate and free,
 * the main thread forks N children, one at a time; each calls into the
 * shim (cudaMemGetInfo, cudaFree of a region the parent captured, a large
 * cudaMalloc, which fails in a child of an initialized CUDA) and exits.  A
 * child that does not exit within 5 s (a lock held at the fork) or dies of
 * a signal fails the run.
 *
 * --overtake (mode runtime): two threads allocate --size each, the second
 * once the first one's pages are moving to the GPU (the fake's counters),
 * fill and check it; prints which allocation returned first.  With a
 * budget that grants the first alone a start in VRAM and a slow prefetch
 * (FAKECUDA_PREFETCH_DELAY_US), the second starts in host memory and has
 * nothing to wait for but another thread's capture.  With --hold FILE the
 * second waits for FILE as well (the test restarts the daemon meanwhile).
 *
 * Exit status: 0 data intact; 1 data mismatch; 2 usage; 3 a CUDA call failed.
 */
#include <dlfcn.h>
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cuda-abi.h"
#include "fakecuda.h"
#include "util.h"

KVT_CUDART_FUNCS(KVT_CUDA_PROTOTYPE)
KVT_CUDART_TEST_FUNCS(KVT_CUDA_PROTOTYPE)
KVT_CUDA_HOOKS(KVT_CUDA_PROTOTYPE)
CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                             unsigned long long flags);
CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size);

#define EXIT_MISMATCH 1
#define EXIT_USAGE 2
#define EXIT_CUDA 3
#define ALIGN_UP_SIZE(x, a) (((x) + (a) - 1) / (a) * (a))

typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t);
typedef CUresult (*free_fn)(CUdeviceptr);
typedef CUresult (*getproc_fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);

static const char *arg_mode = "runtime";
static unsigned arg_regions = 2, arg_threads, arg_iterations = 10;
static size_t arg_size = 64u << 20;
static const char *arg_hold;
static bool arg_fork, arg_overtake;
static unsigned arg_fork_storm;
static atomic_bool storm_over;

/* Driver entry points as the mode reaches them. */
static alloc_fn drv_alloc;
static free_fn drv_free;

#define CHECK_CUDA(expr)                                                                           \
        do {                                                                                       \
                int _e = (int)(expr);                                                              \
                if (_e != 0) {                                                                     \
                        fprintf(stderr, "api-engine: %s failed: %d\n", #expr, _e);                 \
                        exit(EXIT_CUDA);                                                           \
                }                                                                                  \
        } while (0)

static void resolve_driver(void) {
        void *h;

        if (strcmp(arg_mode, "driver") == 0) {
                drv_alloc = cuMemAlloc_v2;
                drv_free = cuMemFree_v2;
                return;
        }
        h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
        if (!h) {
                fprintf(stderr, "api-engine: %s\n", dlerror());
                exit(EXIT_CUDA);
        }
        if (strcmp(arg_mode, "dlsym") == 0) {
                *(void **)&drv_alloc = dlsym(h, "cuMemAlloc_v2");
                *(void **)&drv_free = dlsym(h, "cuMemFree_v2");
        } else if (strcmp(arg_mode, "procaddr") == 0) {
                getproc_fn gpa;
                CUdriverProcAddressQueryResult st;

                *(void **)&gpa = dlsym(h, "cuGetProcAddress_v2");
                if (!gpa)
                        exit(EXIT_CUDA);
                CHECK_CUDA(gpa("cuMemAlloc", (void **)&drv_alloc, 13000, 0, &st));
                CHECK_CUDA(gpa("cuMemFree", (void **)&drv_free, 13000, 0, &st));
        } else {
                enum cudaDriverEntryPointQueryResult st;

                CHECK_CUDA(cudaGetDriverEntryPointByVersion("cuMemAlloc", (void **)&drv_alloc, 13000, 0, &st));
                CHECK_CUDA(cudaGetDriverEntryPointByVersion("cuMemFree", (void **)&drv_free, 13000, 0, &st));
        }
        if (!drv_alloc || !drv_free) {
                fprintf(stderr, "api-engine: driver entry points not found\n");
                exit(EXIT_CUDA);
        }
}

static bool mode_is(const char *m) {
        return strcmp(arg_mode, m) == 0;
}

static bool mode_async(void) {
        return mode_is("async") || mode_is("pool") || mode_is("driver-async");
}

static bool mode_driver(void) {
        return mode_is("driver") || mode_is("dlsym") || mode_is("procaddr") || mode_is("entrypoint");
}

static void *alloc(size_t size, cudaStream_t s) {
        void *p = NULL;
        CUdeviceptr d = 0;

        if (mode_is("runtime"))
                CHECK_CUDA(cudaMalloc(&p, size));
        else if (mode_is("async"))
                CHECK_CUDA(cudaMallocAsync(&p, size, s));
        else if (mode_is("pool"))
                CHECK_CUDA(cudaMallocFromPoolAsync(&p, size, (cudaMemPool_t)0x1, s));
        else if (mode_is("driver-async"))
                CHECK_CUDA(cuMemAllocAsync(&d, size, s));
        else
                CHECK_CUDA(drv_alloc(&d, size));
        return p ? p : (void *)(uintptr_t)d;
}

static void dealloc(void *p, cudaStream_t s) {
        if (mode_is("runtime"))
                CHECK_CUDA(cudaFree(p));
        else if (mode_is("async") || mode_is("pool"))
                CHECK_CUDA(cudaFreeAsync(p, s));
        else if (mode_is("driver-async"))
                CHECK_CUDA(cuMemFreeAsync((CUdeviceptr)(uintptr_t)p, s));
        else
                CHECK_CUDA(drv_free((CUdeviceptr)(uintptr_t)p));
}

static uint64_t allocated_now(void) {
        struct fakecuda_stats st;

        CHECK_CUDA(fakecuda_get_stats(0, &st));
        return st.managed_alloc_bytes + st.device_alloc_bytes;
}

static void sleep_ms(unsigned ms) {
        struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
        nanosleep(&ts, NULL);
}

/* Frees p on held stream s: nothing may be freed before the stream gets there. */
static void held_free(void *p, cudaStream_t s) {
        uint64_t before = allocated_now(), held, after = 0;
        unsigned waited;

        CHECK_CUDA(fakecuda_stream_hold(s, 1));
        dealloc(p, s);
        held = before - allocated_now();
        CHECK_CUDA(fakecuda_stream_hold(s, 0));
        CHECK_CUDA(cudaStreamSynchronize(s));
        /* The shim frees from its own thread once the stream got there. */
        for (waited = 0; waited < 10000; waited += 10) {
                after = before - allocated_now();
                if (after >= arg_size)
                        break;
                sleep_ms(10);
        }
        printf("api-engine: freed while stream held %llu, freed after release %s\n", (unsigned long long)held,
               after >= arg_size ? "yes" : "no");
}

static void wait_hold_file(void) {
        printf("api-engine: holding\n");
        fflush(stdout);
        for (unsigned i = 0; i < 3000 && access(arg_hold, F_OK) < 0; i++)
                sleep_ms(10);
}

static int run_vmm(void) {
        const size_t gran = 2u << 20;
        size_t span = ALIGN_UP_SIZE(arg_size, gran);
        CUdeviceptr va;
        CUmemGenericAllocationHandle h[16];
        int bad = 0;
        char prop[64] = { 0 }; /* opaque to this engine */

        if (arg_regions > 16)
                return EXIT_USAGE;
        CHECK_CUDA(cudaSetDevice(0)); /* initializes CUDA */
        CHECK_CUDA(cuMemAddressReserve(&va, span * arg_regions, 0, 0, 0));
        for (unsigned i = 0; i < arg_regions; i++) {
                CHECK_CUDA(cuMemCreate(&h[i], span, (const CUmemAllocationProp *)prop, 0));
                CHECK_CUDA(cuMemMap(va + i * span, span, 0, h[i], 0));
                memset((void *)(uintptr_t)(va + i * span), 0x40 + (int)i, arg_size);
        }
        if (arg_hold)
                wait_hold_file();
        for (unsigned i = 0; i < arg_regions; i++) {
                const unsigned char *p = (const unsigned char *)(uintptr_t)(va + i * span);
                for (size_t k = 0; k < arg_size; k += 4096)
                        bad += p[k] != 0x40 + i;
                CHECK_CUDA(cuMemUnmap(va + i * span, span));
                CHECK_CUDA(cuMemRelease(h[i]));
        }
        CHECK_CUDA(cuMemAddressFree(va, span * arg_regions));
        printf("api-engine: mode vmm, regions %u, mismatched words %d\n", arg_regions, bad);
        return bad ? EXIT_MISMATCH : 0;
}

/* One pass: allocate, fill, check, free every region.  Returns bad words. */
static uint64_t pass(unsigned seed, cudaStream_t s, bool hold_first) {
        void *p[64];
        uint64_t bad = 0;

        for (unsigned i = 0; i < arg_regions; i++) {
                p[i] = alloc(arg_size, s);
                CHECK_CUDA(fakecuda_kernel_fill(p[i], arg_size & ~(size_t)7, seed + i));
        }
        if (arg_hold)
                wait_hold_file();
        for (unsigned i = 0; i < arg_regions; i++) {
                uint64_t b = 0;
                CHECK_CUDA(fakecuda_kernel_check(p[i], arg_size & ~(size_t)7, seed + i, &b));
                bad += b;
        }
        for (unsigned i = 0; i < arg_regions; i++) {
                if (i == 0 && hold_first)
                        held_free(p[i], s);
                else
                        dealloc(p[i], s);
        }
        return bad;
}

static int run(uint64_t *ret_bad);

/* One child of the storm: what it does, then how it ended (0: exited 0
 * within 5 s). */
static int storm_child(void *parents) {
        pid_t pid = fork();
        int st = 0;

        if (pid < 0)
                return -1;
        if (pid == 0) {
                size_t fr, tot;
                void *p = NULL;

                (void)cudaMemGetInfo(&fr, &tot);
                (void)cudaFree(parents);
                (void)cudaMalloc(&p, arg_size);
                _exit(0);
        }
        for (int i = 0; i < 500; i++) {
                if (waitpid(pid, &st, WNOHANG) == pid)
                        return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
                sleep_ms(10);
        }
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
        fprintf(stderr, "api-engine: a forked child hung\n");
        return -1;
}

static void *storm_thread(void *arg) {
        (void)arg;
        while (!atomic_load(&storm_over)) {
                void *p = alloc(arg_size, NULL);
                dealloc(p, NULL);
        }
        return NULL;
}

static int run_fork_storm(void) {
        pthread_t t[64];
        unsigned failed = 0;
        void *parents;

        if (!arg_threads || arg_threads > 64)
                return EXIT_USAGE;
        CHECK_CUDA(cudaSetDevice(0));
        parents = alloc(arg_size, NULL);
        for (unsigned i = 0; i < arg_threads; i++)
                if (pthread_create(&t[i], NULL, storm_thread, NULL) != 0)
                        return EXIT_CUDA;
        for (unsigned i = 0; i < arg_fork_storm; i++)
                failed += storm_child(parents) < 0;
        atomic_store(&storm_over, true);
        for (unsigned i = 0; i < arg_threads; i++)
                pthread_join(t[i], NULL);
        dealloc(parents, NULL);
        printf("api-engine: fork storm, %u children, %u failed\n", arg_fork_storm, failed);
        return failed ? EXIT_MISMATCH : 0;
}

/* --overtake: the threads' allocations in the order they returned. */
static atomic_uint overtake_returned;
static unsigned overtake_rank[2];

static void *overtake_thread(void *arg) {
        unsigned id = (unsigned)(uintptr_t)arg;
        uint64_t bad = 0;
        void *p;

        CHECK_CUDA(cudaSetDevice(0));
        /* the second waits until the first one's capture is moving its
         * pages (the fake moves them, then spends the link's time) */
        for (unsigned i = 0; id == 1 && i < 3000; i++) {
                struct fakecuda_stats st;

                CHECK_CUDA(fakecuda_get_stats(0, &st));
                if (st.managed_resident_bytes > 0)
                        break;
                sleep_ms(10);
        }
        if (id == 1 && arg_hold) /* and, with --hold, until the test says */
                wait_hold_file();
        p = alloc(arg_size, NULL);
        overtake_rank[id] = atomic_fetch_add(&overtake_returned, 1);
        CHECK_CUDA(fakecuda_kernel_fill(p, arg_size & ~(size_t)7, 40 + id));
        CHECK_CUDA(fakecuda_kernel_check(p, arg_size & ~(size_t)7, 40 + id, &bad));
        dealloc(p, NULL);
        return (void *)(uintptr_t)bad;
}

static int run_overtake(void) {
        pthread_t t[2];
        uint64_t bad = 0;

        if (!mode_is("runtime"))
                return EXIT_USAGE;
        CHECK_CUDA(cudaSetDevice(0));
        for (unsigned i = 0; i < 2; i++)
                if (pthread_create(&t[i], NULL, overtake_thread, (void *)(uintptr_t)i) != 0)
                        return EXIT_CUDA;
        for (unsigned i = 0; i < 2; i++) {
                void *r;
                pthread_join(t[i], &r);
                bad += (uint64_t)(uintptr_t)r;
        }
        printf("api-engine: overtake, %s allocation returned first, mismatched words %llu\n",
               overtake_rank[1] == 0 ? "second" : "first", (unsigned long long)bad);
        return bad ? EXIT_MISMATCH : 0;
}

static void *thread_main(void *arg) {
        unsigned id = (unsigned)(uintptr_t)arg;
        cudaStream_t s = NULL;
        uint64_t bad = 0;

        CHECK_CUDA(cudaStreamCreate(&s));
        for (unsigned it = 0; it < arg_iterations; it++)
                bad += pass(id * 1000 + it, s, false);
        if (mode_async())
                CHECK_CUDA(cudaStreamSynchronize(s));
        CHECK_CUDA(cudaStreamDestroy(s));
        return (void *)(uintptr_t)bad;
}

int main(int argc, char **argv) {
        static const struct option opts[] = {
                { "mode", required_argument, NULL, 'm' },    { "regions", required_argument, NULL, 'r' },
                { "size", required_argument, NULL, 's' },    { "hold", required_argument, NULL, 'H' },
                { "threads", required_argument, NULL, 't' }, { "iterations", required_argument, NULL, 'i' },
                { "fork", no_argument, NULL, 'f' },          { "fork-storm", required_argument, NULL, 'S' },
                { "overtake", no_argument, NULL, 'O' },      {},
        };
        uint64_t bad = 0;
        int c;

        while ((c = getopt_long(argc, argv, "", opts, NULL)) >= 0)
                switch (c) {
                case 'm': arg_mode = optarg; break;
                case 'r': arg_regions = (unsigned)atoi(optarg); break;
                case 's': {
                        uint64_t bytes;
                        if (parse_bytes(optarg, &bytes) < 0 || bytes == 0 || bytes > SIZE_MAX)
                                return EXIT_USAGE;
                        arg_size = (size_t)bytes;
                        break;
                }
                case 'H': arg_hold = optarg; break;
                case 't': arg_threads = (unsigned)atoi(optarg); break;
                case 'i': arg_iterations = (unsigned)atoi(optarg); break;
                case 'f': arg_fork = true; break;
                case 'S': arg_fork_storm = (unsigned)atoi(optarg); break;
                case 'O': arg_overtake = true; break;
                default: return EXIT_USAGE;
                }
        if (arg_regions == 0 || arg_regions > 64)
                return EXIT_USAGE;
        if (arg_fork_storm)
                return run_fork_storm();
        if (arg_overtake)
                return run_overtake();
        if (arg_fork) {
                pid_t child = fork();
                int st;

                if (child < 0)
                        return EXIT_CUDA;
                if (child > 0) {
                        int r = run(&bad);
                        if (waitpid(child, &st, 0) < 0 || !WIFEXITED(st))
                                return EXIT_CUDA;
                        printf("api-engine: child exited %d\n", WEXITSTATUS(st));
                        return r ? r : WEXITSTATUS(st);
                }
        }
        return run(&bad);
}

static int run(uint64_t *ret_bad) {
        cudaStream_t s = NULL;
        uint64_t bad = 0;

        if (mode_is("vmm"))
                return run_vmm();
        if (!mode_driver() && !mode_async() && !mode_is("runtime"))
                return EXIT_USAGE;
        CHECK_CUDA(cudaSetDevice(0)); /* initializes CUDA, as an engine's first call would */
        if (mode_driver())
                resolve_driver();
        if (arg_threads) {
                pthread_t t[64];

                if (arg_threads > 64 || arg_hold)
                        return EXIT_USAGE;
                for (unsigned i = 0; i < arg_threads; i++)
                        if (pthread_create(&t[i], NULL, thread_main, (void *)(uintptr_t)i) != 0)
                                return EXIT_CUDA;
                for (unsigned i = 0; i < arg_threads; i++) {
                        void *r;
                        pthread_join(t[i], &r);
                        bad += (uint64_t)(uintptr_t)r;
                }
        } else {
                CHECK_CUDA(cudaStreamCreate(&s));
                bad = pass(7, s, mode_async());
                CHECK_CUDA(cudaStreamDestroy(s));
        }
        printf("api-engine: mode %s, regions %u, mismatched words %llu\n", arg_mode, arg_regions,
               (unsigned long long)bad);
        *ret_bad = bad;
        return bad ? EXIT_MISMATCH : 0;
}
