/* SPDX-License-Identifier: MIT */
/*
 * kv-engine: plays an inference engine's KV cache for kvtier's tests.
 *
 * Allocates a pool of --regions allocations of --region-size bytes with
 * plain cudaMalloc (the shim, when preloaded, captures them), writes a
 * known pattern into each, then runs --steps decode steps that read a
 * window of --window bytes sliding over the pool, and finally checks that
 * every byte still holds its pattern.  The same source runs against the
 * fake CUDA (backend-fake.c) and real CUDA (tests/gpu/backend-cuda.cu).
 *
 * With --devices N, region i lives on device i % N (one process driving
 * several GPUs, as tensor-parallel engines do), and --max-vram holds per device;
 * --device D makes the whole pool live on device D.
 * --alloc-ms M pauses M ms after each region's allocation (an engine that
 * grows its pool while running).
 * --unmap drops the GPU's mapping of host pages (cudaMemAdvise
 * UnsetAccessedBy), so reads of pages not in VRAM fault: the unified-memory
 * events the CUPTI heat source samples.
 * --hint hints each window read WILL_NEED (kvtier_hint): a use the heat table
 * counts.  --hot-region N hints region N HOT once after allocation: a
 * standing order.
 * --until FILE goes on stepping after --steps until FILE exists (an engine
 * that must outlive another, however the machine's load stretches either).
 *
 * Exit status: 0 pattern intact (and VRAM within --max-vram when given);
 * 1 data mismatch or VRAM over --max-vram; 2 usage; 3 a CUDA call failed
 * (in the --fork child too).
 */
#include <dlfcn.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "cuda-abi.h"

KVT_CUDART_FUNCS(KVT_CUDA_PROTOTYPE)

#define EXIT_MISMATCH 1
#define EXIT_USAGE 2
#define EXIT_CUDA 3

struct opts {
        unsigned regions;
        uint64_t region_bytes, window_bytes, max_vram_bytes;
        unsigned steps, step_ms, probe_every, devices, alloc_ms;
        int device; /* --device: the device to use, -1 = the process's current one */
        uint64_t seed;
        int hint;
        int fork_child;
        int meminfo;
        int unmap;
        int hot_region; /* --hot-region: hinted HOT once, whole, after allocation; -1 = none */
        const char *until; /* --until: after --steps, step on until this file exists */
};

typedef int (*hint_fn)(const void *, size_t, int);

static int parse_size(const char *s, uint64_t *ret) {
        char *end;
        unsigned long long v = strtoull(s, &end, 10);

        switch (*end) {
        case 'K': v <<= 10; end++; break;
        case 'M': v <<= 20; end++; break;
        case 'G': v <<= 30; end++; break;
        default: break;
        }
        if (*end || v == 0)
                return -EINVAL;
        *ret = v;
        return 0;
}

static void sleep_ms(unsigned ms) {
        struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L };
        nanosleep(&ts, NULL);
}

static int parse_opts(int argc, char **argv, struct opts *o) {
        static const struct option lo[] = {
                { "regions", required_argument, NULL, 'n' },    { "region-size", required_argument, NULL, 'r' },
                { "window", required_argument, NULL, 'w' },     { "steps", required_argument, NULL, 's' },
                { "step-ms", required_argument, NULL, 't' },    { "seed", required_argument, NULL, 'S' },
                { "max-vram", required_argument, NULL, 'm' },   { "hint", no_argument, NULL, 'H' },
                { "probe-every", required_argument, NULL, 'p' },
                { "fork", no_argument, NULL, 'F' },
                { "meminfo", no_argument, NULL, 'I' },
                { "devices", required_argument, NULL, 'D' },
                { "device", required_argument, NULL, 'd' },
                { "unmap", no_argument, NULL, 'U' },
                { "alloc-ms", required_argument, NULL, 'A' },
                { "hot-region", required_argument, NULL, 'O' },
                { "until", required_argument, NULL, 'u' },
                {},
        };
        int c;

        *o = (struct opts){ .regions = 4, .region_bytes = 64 << 20, .window_bytes = 32 << 20,
                            .steps = 32, .step_ms = 20, .seed = 42, .devices = 1, .device = -1,
                            .hot_region = -1 };
        while ((c = getopt_long(argc, argv, "", lo, NULL)) >= 0) {
                int r = 0;
                switch (c) {
                case 'n': o->regions = (unsigned)strtoul(optarg, NULL, 10); break;
                case 'r': r = parse_size(optarg, &o->region_bytes); break;
                case 'w': r = parse_size(optarg, &o->window_bytes); break;
                case 's': o->steps = (unsigned)strtoul(optarg, NULL, 10); break;
                case 't': o->step_ms = (unsigned)strtoul(optarg, NULL, 10); break;
                case 'S': o->seed = strtoull(optarg, NULL, 0); break;
                case 'm': r = parse_size(optarg, &o->max_vram_bytes); break;
                case 'H': o->hint = 1; break;
                case 'F': o->fork_child = 1; break;
                case 'I': o->meminfo = 1; break;
                case 'U': o->unmap = 1; break;
                case 'A': o->alloc_ms = (unsigned)strtoul(optarg, NULL, 10); break;
                case 'O': o->hot_region = (int)strtol(optarg, NULL, 10); break;
                case 'u': o->until = optarg; break;
                case 'p': o->probe_every = (unsigned)strtoul(optarg, NULL, 10); break;
                case 'D': o->devices = (unsigned)strtoul(optarg, NULL, 10); break;
                case 'd': o->device = (int)strtol(optarg, NULL, 10); break;
                default: return -EINVAL;
                }
                if (r < 0)
                        return r;
        }
        if (o->regions == 0 || o->regions > 1024 || o->devices == 0 || o->devices > 64 ||
            o->device < -1 || o->device >= 64 || (o->device >= 0 && o->devices > 1) || o->region_bytes % 8 || o->window_bytes % 8 ||
            o->window_bytes > o->region_bytes * o->regions || o->hot_region < -1 ||
            o->hot_region >= (int)o->regions)
                return -EINVAL;
        return 0;
}

/* Makes region i's device current (the kernels run on the current device).
 * One device: the process's own, left alone. */
static int use_region_device(const struct opts *o, unsigned i) {
        if (o->devices == 1)
                return 0;
        return cudaSetDevice((int)(i % o->devices)) == cudaSuccess ? 0 : -EIO;
}

/* Reads the window [start, start+len) of the pool, which may span regions. */
static int read_window(char **pool, const struct opts *o, uint64_t start, uint64_t len, hint_fn hint) {
        uint64_t pool_bytes = o->region_bytes * o->regions;

        while (len) {
                uint64_t at = start % pool_bytes, reg = at / o->region_bytes, off = at % o->region_bytes;
                uint64_t n = o->region_bytes - off < len ? o->region_bytes - off : len;

                if (use_region_device(o, (unsigned)reg) < 0)
                        return -EIO;
                if (hint)
                        hint(pool[reg] + off, n, 4 /* KVTIER_HINT_WILL_NEED: a use, not a standing order */);
                if (backend_read(pool[reg] + off, n) < 0)
                        return -EIO;
                start += n;
                len -= n;
        }
        return 0;
}

/* A child forked after CUDA is initialized cannot use it (CUDA is not
 * fork-safe): its large cudaMalloc must fail with an initialization error,
 * under the shim as without it, and the shim in the child must not speak
 * for the parent's regions.  The child lingers so a registration would be
 * seen, then ends with exit(), running the exit handlers it inherited, as
 * a helper process of a real engine would.  Returns the child's pid or
 * -errno. */
static pid_t fork_child(const struct opts *o) {
        pid_t pid;

        fflush(NULL); /* the child's exit() must not print the parent's output again */
        pid = fork();
        if (pid == 0) {
                void *p = NULL;
                cudaError_t e = cudaMalloc(&p, o->region_bytes);

                sleep_ms(600);
                exit(e == cudaErrorInitializationError ? 0 : EXIT_CUDA);
        }
        return pid < 0 ? -errno : pid;
}

/* Bytes of the pool resident in VRAM now, as the backend can tell. */
static int probe_pool(char **pool, const struct opts *o, int dev, uint64_t *ret_bytes) {
        uint64_t total = 0;

        for (unsigned i = dev % o->devices; i < o->regions; i += o->devices) {
                uint64_t b;
                int r = backend_vram_resident(pool[i], o->region_bytes, dev, &b);
                if (r < 0)
                        return r;
                total += b;
        }
        *ret_bytes = total;
        return 0;
}

int main(int argc, char **argv) {
        struct opts o;
        char **pool;
        hint_fn hint = NULL;
        uint64_t bad = 0, peak = 0, probed_max = 0, stride;
        int probed = 0, child_status = 0;
        pid_t child = 0;
        struct timespec t0, t1;
        int dev = 0, ret = 0;
        unsigned s;

        if (parse_opts(argc, argv, &o) < 0) {
                fprintf(stderr, "usage: kv-engine [--regions N] [--region-size BYTES] [--window BYTES] "
                                "[--steps N] [--step-ms MS] [--seed S] [--max-vram BYTES] [--hint] [--probe-every N] [--fork] [--meminfo] [--devices N | --device D] [--unmap] [--alloc-ms MS] [--hot-region N] [--until FILE]\n");
                return EXIT_USAGE;
        }
        if (o.hint)
                hint = (hint_fn)dlsym(RTLD_DEFAULT, "kvtier_hint"); /* NULL without the shim */
        if (o.device >= 0 && cudaSetDevice(o.device) != cudaSuccess) {
                fprintf(stderr, "kv-engine: cudaSetDevice(%d) failed\n", o.device);
                return EXIT_CUDA;
        }
        cudaGetDevice(&dev);
        if (o.meminfo) {
                size_t free_bytes = 0, total_bytes = 0;
                if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess)
                        return EXIT_CUDA;
                printf("kv-engine: cudaMemGetInfo free %zu total %zu\n", free_bytes, total_bytes);
        }
        pool = calloc(o.regions, sizeof(*pool));
        if (!pool)
                return EXIT_CUDA;
        for (unsigned i = 0; i < o.regions; i++) {
                cudaError_t e = use_region_device(&o, i) < 0 ? cudaErrorInvalidDevice
                                                             : cudaMalloc((void **)&pool[i], o.region_bytes);
                if (e != cudaSuccess) {
                        fprintf(stderr, "kv-engine: cudaMalloc(%" PRIu64 ") failed: %d\n", o.region_bytes, e);
                        return EXIT_CUDA;
                }
                if (backend_fill(pool[i], o.region_bytes, o.seed + i) < 0)
                        return EXIT_CUDA;
                /* --unmap: the GPU's reads fault pages in instead of reading
                 * host memory over the link (only for captured, managed memory). */
                if (o.unmap) {
                        struct cudaMemLocation gpu = { cudaMemLocationTypeDevice, dev };
                        (void)cudaMemAdvise(pool[i], o.region_bytes, cudaMemAdviseUnsetAccessedBy, gpu);
                }
                if (o.alloc_ms)
                        sleep_ms(o.alloc_ms);
        }
        /* --hot-region: as an engine that knows what it will use says so once,
         * and then leaves kvtier to keep it (kvtier.h: HOT stands until COLD). */
        if (o.hot_region >= 0) {
                hint_fn h = (hint_fn)dlsym(RTLD_DEFAULT, "kvtier_hint");
                int r = h ? h(pool[o.hot_region], o.region_bytes, 1 /* KVTIER_HINT_HOT */) : -ENOSYS;

                if (r < 0)
                        fprintf(stderr, "kv-engine: kvtier_hint(HOT) of region %d: %s\n", o.hot_region, strerror(-r));
        }
        if (o.fork_child && (child = fork_child(&o)) < 0) {
                fprintf(stderr, "kv-engine: fork failed: %s\n", strerror(-child));
                return EXIT_CUDA;
        }
        /* The window walks the pool in eighths of itself per step. */
        stride = o.window_bytes / 8 ? o.window_bytes / 8 / 8 * 8 : 8;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (s = 0; s < o.steps || (o.until && access(o.until, F_OK) != 0); s++) {
                if (read_window(pool, &o, (uint64_t)s * stride, o.window_bytes, hint) < 0) {
                        fprintf(stderr, "kv-engine: read failed at step %u\n", s);
                        return EXIT_CUDA;
                }
                sleep_ms(o.step_ms);
                if (o.probe_every && s % o.probe_every == o.probe_every - 1)
                        for (unsigned d = 0; d < o.devices; d++) {
                                uint64_t b;
                                if (probe_pool(pool, &o, o.devices == 1 ? dev : (int)d, &b) == 0) {
                                        probed = 1;
                                        probed_max = b > probed_max ? b : probed_max;
                                }
                        }
        }
        clock_gettime(CLOCK_MONOTONIC, &t1);
        printf("kv-engine: decode steps took %.1f ms\n",
               (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6);
        fflush(stdout); /* observers see the decode end before the final check */
        for (unsigned i = 0; i < o.regions; i++) {
                uint64_t b = 0;
                if (use_region_device(&o, i) < 0)
                        return EXIT_CUDA;
                if (backend_check(pool[i], o.region_bytes, o.seed + i, &b) < 0)
                        return EXIT_CUDA;
                if (b)
                        fprintf(stderr, "kv-engine: region %u: %" PRIu64 " words differ from the pattern\n", i, b);
                bad += b;
        }
        printf("kv-engine: pool %" PRIu64 " bytes in %u regions, %u steps, mismatched words %" PRIu64 "\n",
               o.region_bytes * o.regions, o.regions, s, bad);
        if (bad)
                ret = EXIT_MISMATCH;
        for (unsigned d = 0; d < o.devices; d++) {
                int pd = o.devices == 1 ? dev : (int)d;
                if (backend_vram_peak(pd, &peak) < 0)
                        break;
                printf("kv-engine: peak managed VRAM %" PRIu64 " bytes%s", peak, o.devices == 1 ? "\n" : "");
                if (o.devices > 1)
                        printf(" on device %d\n", pd);
                if (o.max_vram_bytes && peak > o.max_vram_bytes) {
                        fprintf(stderr, "kv-engine: peak managed VRAM %" PRIu64 " on device %d > limit %" PRIu64 "\n",
                                peak, pd, o.max_vram_bytes);
                        ret = EXIT_MISMATCH;
                }
        }
        if (child > 0) {
                if (waitpid(child, &child_status, 0) != child || !WIFEXITED(child_status) ||
                    WEXITSTATUS(child_status) != 0) {
                        fprintf(stderr, "kv-engine: forked child failed (status %d)\n", child_status);
                        ret = EXIT_CUDA;
                } else
                        printf("kv-engine: forked child exited 0\n");
        }
        if (probed) {
                printf("kv-engine: most VRAM seen by probes %" PRIu64 " bytes\n", probed_max);
                if (o.max_vram_bytes && probed_max > o.max_vram_bytes) {
                        fprintf(stderr, "kv-engine: probed VRAM %" PRIu64 " > limit %" PRIu64 "\n", probed_max,
                                o.max_vram_bytes);
                        ret = EXIT_MISMATCH;
                }
        }
        for (unsigned i = 0; i < o.regions; i++)
                if (use_region_device(&o, i) < 0 || cudaFree(pool[i]) != cudaSuccess)
                        ret = ret ? ret : EXIT_CUDA;
        free(pool);
        return ret;
}
