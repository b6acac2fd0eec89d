/* SPDX-License-Identifier: MIT */

/*
 * The fake CUDA is the oracle of every integration test, so it is tested
 * first: accounting, data faithfulness across migrations, advice, faults,
 * eviction, error injection.  The process runs with 2 devices of 64 MiB;
 * settings that must differ (misaligned managed memory, failures, stats
 * file) run in forked children, before this process's first CUDA call.
 */

#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../engine/backend.h"
#include "cuda-abi.h"
#include "fakecuda.h"
#include "tap.h"

/* Declared as an application gets them from cuda_runtime_api.h. */
KVT_CUDART_FUNCS(KVT_CUDA_PROTOTYPE)
KVT_CUDART_TEST_FUNCS(KVT_CUDA_PROTOTYPE)

#define MiB       ((size_t)1 << 20)
#define PAGE      FAKECUDA_PAGE_BYTES
#define DEV_BYTES (64 * MiB)

static const struct cudaMemLocation DEV0 = {cudaMemLocationTypeDevice, 0};
static const struct cudaMemLocation DEV1 = {cudaMemLocationTypeDevice, 1};
static const struct cudaMemLocation HOST = {cudaMemLocationTypeHost, 0};

static struct fakecuda_stats stats(int dev) {
        struct fakecuda_stats s = {0};

        if (fakecuda_get_stats(dev, &s) != cudaSuccess)
                TAP_DIAG("fakecuda_get_stats(%d) failed", dev);
        return s;
}

static uint64_t resident(const void *p, size_t len, int dev) {
        uint64_t b = UINT64_MAX;

        (void)fakecuda_resident_bytes(p, len, dev, &b);
        return b;
}

/* Fills host-visible memory with the pattern, as CPU code would. */
static void host_fill(void *p, size_t len, uint64_t seed) {
        for (size_t o = 0; o < len; o += 8) {
                uint64_t w = backend_pattern(seed, o);
                memcpy((char *)p + o, &w, 8);
        }
}

/* Words of [base+off, base+off+len) that differ from the pattern of base. */
static uint64_t host_bad_words(const void *p, size_t off, size_t len, uint64_t seed) {
        uint64_t bad = 0;

        for (size_t o = off; o < off + len; o += 8) {
                uint64_t w;
                memcpy(&w, (const char *)p + o, 8);
                bad += w != backend_pattern(seed, o);
        }
        return bad;
}

/* Bad words of a managed range as read back through cudaMemcpy. */
static uint64_t memcpy_bad_words(const void *managed, size_t len, uint64_t seed) {
        void *buf = malloc(len);
        uint64_t bad = UINT64_MAX;

        if (buf && cudaMemcpy(buf, managed, len, cudaMemcpyDefault) == cudaSuccess)
                bad = host_bad_words(buf, 0, len, seed);
        free(buf);
        return bad;
}

/* ---------------------------------------------------------------- children */

static int child_failures;
#define CHILD_CHECK(cond)                                                                                   \
        do {                                                                                                \
                if (!(cond)) {                                                                              \
                        child_failures++;                                                                   \
                        printf("#   child check failed at %s:%d: %s\n", __FILE__, __LINE__, #cond);         \
                }                                                                                           \
        } while (0)

/* Runs fn in a child with env set (NAME=VALUE, NULL-terminated); returns
 * its exit status (its failed checks), or -1. */
static int run_child(const char *const *env, void (*fn)(void)) {
        int status;
        pid_t pid;

        fflush(stdout);
        pid = fork();
        if (pid < 0)
                return -1;
        if (pid == 0) {
                for (; *env; env++)
                        putenv((char *)*env);
                fn();
                fflush(stdout);
                exit(child_failures);
        }
        if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
                return -1;
        return WEXITSTATUS(status);
}

/* An event destroyed after the runtime's exit-time teardown (a pipeline
 * finishing its runs at exit): the call says the runtime is unloading, and
 * the event is gone with the teardown, as in CUDA, not left allocated. */
static cudaEvent_t late_event;

static void destroy_after_teardown(void) {
        unsigned long live = fakecuda_events_live();

        if (cudaEventDestroy(late_event) != cudaErrorCudartUnloading)
                _exit(3);
        if (fakecuda_events_live() != live - 1)
                _exit(4);
}

static void child_event_after_teardown(void) {
        atexit(destroy_after_teardown); /* before the runtime's own: runs after it */
        CHILD_CHECK(cudaEventCreateWithFlags(&late_event, cudaEventDisableTiming) == cudaSuccess);
}

static void child_misalign(void) {
        void *p = NULL;
        uint64_t bad = 1;
        struct fakecuda_stats s;

        CHILD_CHECK(cudaMallocManaged(&p, 4 * MiB, cudaMemAttachGlobal) == cudaSuccess);
        CHILD_CHECK((uintptr_t)p % PAGE == 64 * 1024);
        host_fill(p, 4 * MiB, 7);
        CHILD_CHECK(cudaMemPrefetchAsync(p, 4 * MiB, DEV0, 0, NULL) == cudaSuccess);
        s = stats(0);
        /* 64 KiB + 4 MiB spans three 2 MiB pages */
        CHILD_CHECK(s.h2d_bytes == 3 * PAGE);
        CHILD_CHECK(resident(p, 4 * MiB, 0) == 4 * MiB);
        CHILD_CHECK(fakecuda_kernel_check(p, 4 * MiB, 7, &bad) == cudaSuccess && bad == 0);
        CHILD_CHECK(memcpy_bad_words(p, 4 * MiB, 7) == 0);
        CHILD_CHECK(cudaFree(p) == cudaSuccess);
}

static void child_fail(void) {
        void *a = NULL, *b = NULL, *c = NULL, *mm = NULL;

        CHILD_CHECK(cudaMalloc(&a, MiB) == cudaSuccess);
        CHILD_CHECK(cudaMalloc(&b, MiB) == cudaErrorMemoryAllocation);
        CHILD_CHECK(cudaGetLastError() == cudaErrorMemoryAllocation);
        CHILD_CHECK(cudaMalloc(&c, MiB) == cudaSuccess);
        CHILD_CHECK(cudaMallocManaged(&mm, 4 * MiB, cudaMemAttachGlobal) == cudaErrorMemoryAllocation);
        CHILD_CHECK(cudaMallocManaged(&mm, 4 * MiB, cudaMemAttachGlobal) == cudaSuccess);
        CHILD_CHECK(cudaMemAdvise(mm, PAGE, cudaMemAdviseSetAccessedBy, DEV0) == cudaErrorInvalidValue);
        CHILD_CHECK(cudaMemAdvise(mm, PAGE, cudaMemAdviseSetAccessedBy, DEV0) == cudaSuccess);
        CHILD_CHECK(cudaMemPrefetchAsync(mm, PAGE, DEV0, 0, NULL) == cudaSuccess);
        CHILD_CHECK(cudaMemPrefetchAsync(mm, PAGE, DEV0, 0, NULL) == cudaErrorInvalidValue);
        CHILD_CHECK(cudaMemPrefetchAsync(mm, PAGE, HOST, 0, NULL) == cudaErrorInvalidValue);
        CHILD_CHECK(resident(mm, 4 * MiB, 0) == PAGE);
        cudaFree(a);
        cudaFree(c);
        cudaFree(mm);
}

static void child_stats(void) {
        struct timespec t0, t1;
        void *p = NULL;
        int64_t us;

        CHILD_CHECK(cudaMallocManaged(&p, 8 * MiB, cudaMemAttachGlobal) == cudaSuccess);
        clock_gettime(CLOCK_MONOTONIC, &t0);
        CHILD_CHECK(cudaMemPrefetchAsync(p, 8 * MiB, DEV0, 0, NULL) == cudaSuccess);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        us = (t1.tv_sec - t0.tv_sec) * 1000000 + (t1.tv_nsec - t0.tv_nsec) / 1000;
        CHILD_CHECK(us >= 4 * 20000); /* FAKECUDA_PREFETCH_DELAY_US=20000, 4 pages */
        CHILD_CHECK(cudaMemPrefetchAsync(p, 2 * MiB, HOST, 0, NULL) == cudaSuccess);
        CHILD_CHECK(((volatile char *)p)[2 * MiB] == 0); /* a CPU fault brings the second page back */
}

/* ---------------------------------------------------------------- crashing children */

static volatile sig_atomic_t managed_read_ok;

/* Initializes CUDA, reads a device-resident managed page from the CPU
 * (the fault handler serves it) and notes whether the data was right. */
static void read_device_resident(void) {
        char *p = NULL;

        if (cudaMallocManaged((void **)&p, PAGE, cudaMemAttachGlobal) != cudaSuccess)
                return;
        host_fill(p, PAGE, 12);
        if (cudaMemPrefetchAsync(p, PAGE, DEV0, 0, NULL) != cudaSuccess)
                return;
        managed_read_ok = host_bad_words(p, 0, PAGE, 12) == 0;
}

/* A genuine segmentation fault: a store to a page mapped without access. */
static void genuine_fault(void) {
        volatile char *bad = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

        if ((void *)bad != MAP_FAILED)
                *bad = 1;
}

static void user_segv_handler(int sig) {
        (void)sig;
        _exit(managed_read_ok ? 42 : 43);
}

/* Runs fn in a child with stderr to a file; *ret_status is its wait status,
 * err what it wrote to stderr (truncated to err_len - 1).  Returns whether
 * the managed read was right (a byte on a pipe before fn crashes). */
static bool run_crasher(void (*fn)(void), int *ret_status, char *err, size_t err_len) {
        char path[] = "/tmp/test-fakecuda-err-XXXXXX";
        int fds[2], errfd = mkstemp(path);
        char ok = 0;
        ssize_t n;
        pid_t pid;

        *ret_status = -1;
        err[0] = '\0';
        if (errfd < 0 || pipe(fds) < 0)
                return false;
        fflush(stdout);
        pid = fork();
        if (pid == 0) {
                dup2(errfd, STDERR_FILENO);
                close(fds[0]);
                read_device_resident();
                if (write(fds[1], managed_read_ok ? "y" : "n", 1) != 1)
                        _exit(98);
                fn();
                _exit(99);
        }
        close(fds[1]);
        if (pid > 0) {
                if (read(fds[0], &ok, 1) != 1)
                        ok = 0;
                waitpid(pid, ret_status, 0);
        }
        close(fds[0]);
        n = pread(errfd, err, err_len - 1, 0);
        err[n > 0 ? n : 0] = '\0';
        close(errfd);
        unlink(path);
        return ok == 'y';
}

static void test_crashes(void) {
        char err[4096];
        bool ok;
        int st;

        ok = run_crasher(genuine_fault, &st, err, sizeof(err));
        TAP_OK(ok, "a CPU read of a device-resident page is served with the right data");
#ifdef __SANITIZE_ADDRESS__
        TAP_OK(st != -1 && !(WIFEXITED(st) && WEXITSTATUS(st) == 99) &&
                       strstr(err, "AddressSanitizer: SEGV"),
               "a fault outside managed memory still reaches AddressSanitizer (status %#x)", st);
#else
        TAP_OK(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV,
               "a fault outside managed memory kills with SIGSEGV (status %#x)", st);
#endif
        if (err[0]) {
                err[strcspn(err, "\n")] = '\0';
                TAP_DIAG("child stderr: %.200s", err);
        }

        /* the user's handler goes in first, in the child, before CUDA's initialization */
        {
                struct sigaction sa = {.sa_handler = user_segv_handler}, old;

                sigemptyset(&sa.sa_mask);
                sigaction(SIGSEGV, &sa, &old);
                ok = run_crasher(genuine_fault, &st, err, sizeof(err));
                sigaction(SIGSEGV, &old, NULL);
        }
        TAP_OK(ok, "with a handler installed before: the managed read is still served");
        TAP_OK(WIFEXITED(st) && WEXITSTATUS(st) == 42,
               "and a fault outside managed memory reaches that handler (status %#x)", st);
}

/* dlopens the built fake libcuda.so.1; its path goes to path[len]. */
static void *open_fake_driver(char *path, size_t len) {
        const char *top = getenv("top_builddir");

        snprintf(path, len, "%s/tests/fakes/.libs/libcuda.so.1", top ? top : ".");
        return dlopen(path, RTLD_NOW);
}

/* The fake driver's context calls, from the built libcuda.so.1. */
struct ctx_calls {
        CUresult (*device_get)(CUdevice *, int);
        CUresult (*create)(CUcontext *, CUctxCreateParams *, unsigned, CUdevice);
        CUresult (*set_current)(CUcontext);
        CUresult (*destroy)(CUcontext);
        CUresult (*set_limit)(CUlimit, size_t);
        CUresult (*get_limit)(size_t *, CUlimit);
};

static bool load_ctx_calls(struct ctx_calls *ret) {
        char path[4096];
        void *h = open_fake_driver(path, sizeof(path));

        if (!h)
                return false;
        *(void **)&ret->device_get = dlsym(h, "cuDeviceGet");
        *(void **)&ret->create = dlsym(h, "cuCtxCreate_v4");
        *(void **)&ret->set_current = dlsym(h, "cuCtxSetCurrent");
        *(void **)&ret->destroy = dlsym(h, "cuCtxDestroy_v2");
        *(void **)&ret->set_limit = dlsym(h, "cuCtxSetLimit");
        *(void **)&ret->get_limit = dlsym(h, "cuCtxGetLimit");
        return ret->device_get && ret->create && ret->set_current && ret->destroy && ret->set_limit &&
               ret->get_limit;
}

/* A prefetch to device 0 in a thread of its own; done once it returned. */
struct prefetcher {
        pthread_t thread;
        void *p;
        atomic_bool done;
};

static void *prefetcher_main(void *arg) {
        struct prefetcher *f = arg;

        (void)cudaMemPrefetchAsync(f->p, PAGE, DEV0, 0, NULL);
        atomic_store(&f->done, true);
        return NULL;
}

static double ms_since(const struct timespec *t0) {
        struct timespec t;

        clock_gettime(CLOCK_MONOTONIC, &t);
        return (double)(t.tv_sec - t0->tv_sec) * 1e3 + (double)(t.tv_nsec - t0->tv_nsec) / 1e6;
}

/* Runs a kernel on dbuf in this thread's current context while another
 * thread, in device 0's primary context, prefetches the host page managed
 * to device 0 (FAKECUDA_PREFETCH_DELAY_US=1000000: one second of link
 * time).  The kernel starts 50 ms after the prefetch was counted (its move
 * done, its link time about to begin).  Returns how long the kernel took,
 * in ms; *ret_prefetch_done: whether the prefetch had returned by then. */
static double kernel_beside_prefetch(void *managed, const void *dbuf, bool *ret_prefetch_done) {
        struct prefetcher f = { .p = managed };
        uint64_t calls = stats(0).prefetch_calls;
        struct timespec t0;
        double ms;

        host_fill(managed, PAGE, 5);
        if (pthread_create(&f.thread, NULL, prefetcher_main, &f) != 0)
                return -1;
        while (stats(0).prefetch_calls == calls)
                usleep(1000);
        usleep(50000);
        clock_gettime(CLOCK_MONOTONIC, &t0);
        CHILD_CHECK(fakecuda_kernel_read(dbuf, PAGE) == cudaSuccess);
        ms = ms_since(&t0);
        *ret_prefetch_done = atomic_load(&f.done);
        pthread_join(f.thread, NULL);
        return ms;
}

/* A prefetch holds its context's calls for its link time: a kernel in the
 * same context waits for it (most of a second), a kernel in a context of
 * its own does not (it returns while the prefetch still runs). */
static void child_ctx_holdback(void) {
        struct ctx_calls cu;
        CUcontext ctx = NULL;
        CUdevice dev;
        void *m1 = NULL, *m2 = NULL, *d = NULL;
        bool done = true;

        CHILD_CHECK(load_ctx_calls(&cu));
        CHILD_CHECK(cudaMallocManaged(&m1, PAGE, cudaMemAttachGlobal) == cudaSuccess);
        CHILD_CHECK(cudaMallocManaged(&m2, PAGE, cudaMemAttachGlobal) == cudaSuccess);
        CHILD_CHECK(cudaMalloc(&d, PAGE) == cudaSuccess);
        CHILD_CHECK(kernel_beside_prefetch(m1, d, &done) >= 500.0);
        CHILD_CHECK(cu.device_get(&dev, 0) == CUDA_SUCCESS && cu.create(&ctx, NULL, 0, dev) == CUDA_SUCCESS);
        CHILD_CHECK(kernel_beside_prefetch(m2, d, &done) >= 0 && !done);
        CHILD_CHECK(cu.destroy(ctx) == CUDA_SUCCESS);
}

/* Contexts from cuCtxCreate: current on their device, streams and events
 * bound to the context they were made in, limits of their own, gone once
 * destroyed. */
static void test_contexts(void) {
        struct ctx_calls cu;
        CUcontext ctx = NULL, ctx2 = NULL;
        cudaStream_t s = NULL, s1 = NULL;
        cudaEvent_t own = NULL, prim = NULL, ev0 = NULL;
        uint64_t created, lowered;
        CUdevice dev = -1;
        size_t lim = 0;
        void *mp = NULL;
        int cur = -1;
        uint64_t in_ctx;

        TAP_OK(load_ctx_calls(&cu), "contexts: the fake driver exports the context calls");
        if (!cu.create)
                return;
        TAP_EQ_INT(cu.device_get(&dev, 5), 101, "contexts: cuDeviceGet of a device that does not exist");
        TAP_EQ_INT(cu.device_get(&dev, 1), CUDA_SUCCESS, "contexts: cuDeviceGet(1)");
        TAP_EQ_INT(cu.create(&ctx, NULL, CU_CTX_SCHED_BLOCKING_SYNC, dev), CUDA_SUCCESS, "contexts: cuCtxCreate");
        TAP_OK(cudaGetDevice(&cur) == cudaSuccess && cur == 1, "contexts: the new context is current, on its device");
        cudaMallocManaged(&mp, PAGE, cudaMemAttachGlobal);
        cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
        cudaEventCreateWithFlags(&own, cudaEventDisableTiming);
        in_ctx = stats(1).prefetch_calls_created_ctx;
        TAP_EQ_INT(cudaMemPrefetchAsync(mp, PAGE, DEV1, 0, s), cudaSuccess, "contexts: a prefetch on its stream");
        TAP_EQ_U64(stats(1).prefetch_calls_created_ctx, in_ctx + 1, "contexts: counted as made in a created context");
        TAP_EQ_INT(cudaEventRecord(own, s), cudaSuccess, "contexts: an event of the context recorded on its stream");

        cudaSetDevice(1); /* the device's primary context */
        TAP_EQ_INT(cudaMemPrefetchAsync(mp, PAGE, HOST, 0, s), cudaErrorInvalidResourceHandle,
                   "contexts: its stream is refused in the primary context");
        TAP_EQ_U64(stats(1).prefetch_calls_created_ctx, in_ctx + 1, "contexts: the primary's prefetches not counted");
        TAP_EQ_INT(cudaStreamSynchronize(s), cudaSuccess, "contexts: its stream can be waited for from elsewhere");
        cudaEventCreateWithFlags(&prim, cudaEventDisableTiming);
        TAP_EQ_INT(cu.set_current(ctx), CUDA_SUCCESS, "contexts: cuCtxSetCurrent");
        TAP_EQ_INT(cudaEventRecord(prim, s), cudaErrorInvalidResourceHandle,
                   "contexts: an event of another context is refused on its stream");
        TAP_OK(cu.get_limit(&lim, CU_LIMIT_STACK_SIZE) == CUDA_SUCCESS && lim == 1024,
               "contexts: a new context's stack limit is CUDA's default, 1 KiB");
        created = stats(1).ctx_created;
        lowered = stats(1).ctx_limits_lowered;
        TAP_EQ_INT(cu.set_limit(CU_LIMIT_STACK_SIZE, 0), CUDA_SUCCESS, "contexts: cuCtxSetLimit(stack, 0)");
        TAP_EQ_INT(cu.set_limit(CU_LIMIT_PRINTF_FIFO_SIZE, 0), CUDA_SUCCESS, "contexts: cuCtxSetLimit(printf, 0)");
        TAP_EQ_U64(stats(1).ctx_limits_lowered, lowered, "contexts: not lowered while the heap keeps its limit");
        TAP_EQ_INT(cu.set_limit(CU_LIMIT_MALLOC_HEAP_SIZE, 0), CUDA_SUCCESS, "contexts: cuCtxSetLimit(heap, 0)");
        TAP_EQ_U64(stats(1).ctx_limits_lowered, lowered + 1, "contexts: counted lowered once all three are 0");
        TAP_OK(cu.get_limit(&lim, CU_LIMIT_STACK_SIZE) == CUDA_SUCCESS && lim == 0, "contexts: cuCtxGetLimit reads it back");
        TAP_EQ_INT(cu.set_limit((CUlimit)7, 0), CUDA_ERROR_INVALID_VALUE, "contexts: a limit the fake lacks is refused");
        TAP_OK(created >= 1, "contexts: creation counted on its device");
        cudaSetDevice(1);
        TAP_OK(cu.get_limit(&lim, CU_LIMIT_STACK_SIZE) == CUDA_SUCCESS && lim == 1024,
               "contexts: the primary context keeps its own limits");
        cu.set_current(ctx);
        TAP_EQ_INT(cu.destroy(ctx), CUDA_SUCCESS, "contexts: cuCtxDestroy");
        TAP_EQ_INT(cu.set_current(ctx), 201, "contexts: a destroyed context cannot be made current");
        TAP_EQ_INT(cudaMemPrefetchAsync(mp, PAGE, HOST, 0, s), cudaErrorInvalidResourceHandle,
                   "contexts: nor can its streams be used");
        TAP_EQ_INT(cu.create(&ctx2, NULL, 0, dev), CUDA_SUCCESS, "contexts: another cuCtxCreate");
        TAP_OK(ctx2 != ctx, "contexts: a new handle, not the destroyed one's");
        TAP_EQ_INT(cudaMemPrefetchAsync(mp, PAGE, HOST, 0, s), cudaErrorInvalidResourceHandle,
                   "contexts: the destroyed context's streams stay dead");
        TAP_EQ_INT(cu.destroy(ctx2), CUDA_SUCCESS, "contexts: cuCtxDestroy again");
        /* primaries: a stream of device 1 takes work while device 0 is current */
        cudaSetDevice(1);
        cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking);
        cudaSetDevice(0);
        cudaEventCreateWithFlags(&ev0, cudaEventDisableTiming);
        TAP_EQ_INT(cudaMemPrefetchAsync(mp, PAGE, DEV1, 0, s1), cudaSuccess,
                   "contexts: another device's primary stream is usable");
        TAP_EQ_INT(cudaEventRecord(ev0, s1), cudaErrorInvalidResourceHandle,
                   "contexts: but an event is recorded only on its own device's streams");
        cudaEventDestroy(ev0);
        cudaStreamDestroy(s1);
        cudaSetDevice(1);
        TAP_EQ_INT(cudaMemPrefetchAsync(mp, PAGE, HOST, 0, NULL), cudaSuccess,
                   "contexts: the thread is back in its device's primary context");
        cudaEventDestroy(own);
        cudaEventDestroy(prim);
        cudaFree(mp);
        cudaSetDevice(0);
}

static void test_children(void) {
        static const char *const env_misalign[] = {"FAKECUDA_MANAGED_MISALIGN=1", NULL};
        static const char *const env_holdback[] = {"FAKECUDA_PREFETCH_DELAY_US=1000000", NULL};
        static const char *const env_none[] = {NULL};
        static const char *const env_fail[] = {
                "FAKECUDA_FAIL=malloc:2,malloc_managed:1,advise:1,prefetch:2+", NULL};
        static char stats_env[64], path[48];
        const char *env_stats[] = {"FAKECUDA_DEVICES=2", "FAKECUDA_PREFETCH_DELAY_US=20000", stats_env,
                                   NULL};
        char line[2][1024] = {"", ""};
        FILE *f;
        int fd;

        TAP_EQ_INT(run_child(env_misalign, child_misalign), 0,
                   "FAKECUDA_MANAGED_MISALIGN: 64 KiB past 2 MiB, pages counted, data intact");
        TAP_EQ_INT(run_child(env_fail, child_fail), 0, "FAKECUDA_FAIL: Nth and N+ calls fail, others pass");
        TAP_EQ_INT(run_child(env_holdback, child_ctx_holdback), 0,
                   "contexts: a prefetch holds back the kernels of its context, not another's");
        TAP_EQ_INT(run_child(env_none, child_event_after_teardown), 0,
                   "an event destroyed after the runtime's teardown: unloading, and released");

        snprintf(path, sizeof(path), "/tmp/test-fakecuda-XXXXXX");
        fd = mkstemp(path);
        TAP_OK(fd >= 0, "stats file created");
        if (fd < 0)
                return;
        close(fd);
        snprintf(stats_env, sizeof(stats_env), "FAKECUDA_STATS=%s", path);
        TAP_EQ_INT(run_child(env_stats, child_stats), 0, "prefetch delay applied per page");
        f = fopen(path, "re");
        if (f) {
                for (int i = 0; i < 2; i++)
                        if (fgets(line[i], sizeof(line[i]), f))
                                line[i][strcspn(line[i], "\n")] = '\0';
                fclose(f);
        }
        unlink(path);
        TAP_OK(strstr(line[0], "\"device\":0,\"h2d_bytes\":8388608,\"d2h_bytes\":4194304,"),
               "FAKECUDA_STATS line for device 0: %s", line[0]);
        TAP_OK(strstr(line[0], "\"faults\":0,\"cpu_faults\":1,"), "FAKECUDA_STATS carries cpu_faults");
        TAP_OK(strstr(line[0], "\"managed_resident_bytes\":4194304,\"managed_resident_peak_bytes\":8388608"),
               "FAKECUDA_STATS carries resident and peak");
        TAP_OK(strstr(line[1], "\"device\":1,\"h2d_bytes\":0"), "FAKECUDA_STATS line for device 1: %s",
               line[1]);
        test_crashes();
}

/* ---------------------------------------------------------------- this process */

static void test_basics(void) {
        int n = -1, v = -1;
        size_t fr = 0, tot = 0;
        cudaStream_t s = NULL;

        TAP_EQ_INT(cudaGetDeviceCount(&n), cudaSuccess, "cudaGetDeviceCount");
        TAP_EQ_INT(n, 2, "FAKECUDA_DEVICES=2 read lazily after setenv");
        TAP_EQ_INT(cudaGetDevice(&v), cudaSuccess, "cudaGetDevice");
        TAP_EQ_INT(v, 0, "device 0 is current");
        TAP_EQ_INT(cudaSetDevice(2), cudaErrorInvalidDevice, "cudaSetDevice(2) rejected");
        TAP_EQ_INT(cudaPeekAtLastError(), cudaErrorInvalidDevice, "peek sees the last error");
        TAP_EQ_INT(cudaGetLastError(), cudaErrorInvalidDevice, "get returns the last error");
        TAP_EQ_INT(cudaGetLastError(), cudaSuccess, "and resets it");
        TAP_EQ_INT(cudaDriverGetVersion(&v), cudaSuccess, "cudaDriverGetVersion");
        TAP_EQ_INT(v, 13000, "driver version 13.0");
        TAP_EQ_INT(cudaRuntimeGetVersion(&v), cudaSuccess, "cudaRuntimeGetVersion");
        TAP_EQ_INT(cudaMemGetInfo(&fr, &tot), cudaSuccess, "cudaMemGetInfo");
        TAP_EQ_U64(tot, DEV_BYTES, "total is FAKECUDA_MEM=64M");
        TAP_EQ_U64(fr, DEV_BYTES, "all free");
        TAP_EQ_STR(cudaGetErrorName(cudaErrorMemoryAllocation), "cudaErrorMemoryAllocation", "error name");
        TAP_EQ_STR(cudaGetErrorString(cudaErrorInvalidValue), "invalid argument", "error string");
        TAP_EQ_STR(cudaGetErrorString(12345), "unrecognized error code", "unknown error string");

        TAP_EQ_INT(cudaStreamCreateWithFlags(&s, 4), cudaErrorInvalidValue, "stream flags validated");
        TAP_EQ_INT(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess, "stream created");
        TAP_EQ_INT(cudaStreamSynchronize(s), cudaSuccess, "stream synchronizes");
        TAP_EQ_INT(cudaStreamDestroy(s), cudaSuccess, "stream destroyed");
        TAP_EQ_INT(cudaStreamDestroy(s), cudaErrorInvalidResourceHandle, "double destroy rejected");
        TAP_EQ_INT(cudaStreamSynchronize(s), cudaErrorInvalidResourceHandle, "dead stream rejected");
        (void)cudaGetLastError();
}

static void test_malloc(void) {
        void *a = NULL, *b = NULL, *c = (void *)1, *big = NULL;
        size_t fr = 0, tot = 0;
        int x;

        TAP_EQ_INT(cudaMalloc(&a, 3 * MiB), cudaSuccess, "cudaMalloc 3 MiB");
        TAP_EQ_U64((uintptr_t)a % PAGE, 0, "large cudaMalloc is 2 MiB aligned");
        TAP_EQ_INT(cudaMalloc(&b, 100), cudaSuccess, "cudaMalloc 100 B");
        TAP_EQ_U64((uintptr_t)b % 256, 0, "small cudaMalloc is 256 B aligned");
        TAP_EQ_INT(cudaMalloc(&c, 0), cudaSuccess, "cudaMalloc 0 succeeds");
        TAP_OK(c == NULL, "with NULL");
        cudaMemGetInfo(&fr, &tot);
        TAP_EQ_U64(fr, DEV_BYTES - 3 * MiB - 100, "free drops by what was allocated");
        TAP_EQ_U64(stats(0).device_alloc_bytes, 3 * MiB + 100, "device_alloc_bytes");
        TAP_EQ_INT(cudaMalloc(&big, DEV_BYTES - 3 * MiB), cudaErrorMemoryAllocation, "over free: OOM");
        TAP_EQ_INT(cudaGetLastError(), cudaErrorMemoryAllocation, "OOM is the last error");
        TAP_EQ_INT(cudaSetDevice(1), cudaSuccess, "switch to device 1");
        TAP_EQ_INT(cudaMalloc(&big, DEV_BYTES - 3 * MiB), cudaSuccess, "device 1 has its own memory");
        TAP_EQ_U64(stats(1).device_alloc_bytes, DEV_BYTES - 3 * MiB, "charged to device 1");
        TAP_EQ_INT(cudaFree(big), cudaSuccess, "free on device 1");
        cudaSetDevice(0);
        TAP_EQ_INT(cudaFree(NULL), cudaSuccess, "cudaFree(NULL)");
        TAP_EQ_INT(cudaFree(&x), cudaErrorInvalidValue, "cudaFree of a stack address");
        TAP_EQ_INT(cudaFree((char *)a + 8), cudaErrorInvalidValue, "cudaFree inside an allocation");
        TAP_EQ_INT(cudaFree(a), cudaSuccess, "cudaFree");
        TAP_EQ_INT(cudaFree(a), cudaErrorInvalidValue, "double cudaFree");
        TAP_EQ_INT(cudaFree(b), cudaSuccess, "cudaFree small");
        cudaMemGetInfo(&fr, &tot);
        TAP_EQ_U64(fr, DEV_BYTES, "all free again");
        TAP_EQ_U64(stats(0).device_alloc_bytes + stats(1).device_alloc_bytes, 0, "no device bytes left");
        (void)cudaGetLastError();
}

static void test_prefetch_roundtrip(void) {
        const size_t len = 8 * MiB;
        struct fakecuda_stats s0;
        char *p = NULL;
        uint64_t bad = 1;
        size_t fr = 0, tot = 0;

        TAP_EQ_INT(cudaMallocManaged((void **)&p, 0, cudaMemAttachGlobal), cudaErrorInvalidValue,
                   "managed size 0 rejected");
        TAP_EQ_INT(cudaMallocManaged((void **)&p, len, 4), cudaErrorInvalidValue, "managed flags validated");
        fakecuda_reset_stats(0);
        TAP_EQ_INT(cudaMallocManaged((void **)&p, len, cudaMemAttachGlobal), cudaSuccess, "managed 8 MiB");
        TAP_EQ_U64(stats(0).managed_allocs, 1, "managed_allocs counts the successful call only");
        TAP_EQ_U64((uintptr_t)p % PAGE, 0, "managed is 2 MiB aligned by default");
        TAP_EQ_U64(stats(0).managed_alloc_bytes, len, "managed_alloc_bytes");
        fakecuda_reset_stats(0);

        host_fill(p, len, 1);
        TAP_EQ_U64(resident(p, len, 0), 0, "nothing resident before prefetch");
        TAP_EQ_INT(cudaMemPrefetchAsync(p, len, DEV0, 0, NULL), cudaSuccess, "prefetch to device 0");
        s0 = stats(0);
        TAP_EQ_U64(s0.h2d_bytes, len, "h2d_bytes exact");
        TAP_EQ_U64(s0.d2h_bytes, 0, "no d2h");
        TAP_EQ_U64(s0.prefetch_calls, 1, "prefetch_calls");
        TAP_EQ_U64(s0.managed_resident_bytes, len, "resident bytes");
        TAP_EQ_U64(resident(p, len, 0), len, "fakecuda_resident_bytes sees all of it");
        TAP_EQ_U64(resident(p + MiB, 2 * MiB, 0), 2 * MiB, "and a sub-range");
        TAP_EQ_INT(fakecuda_kernel_check(p, len, 1, &bad), cudaSuccess, "kernel check");
        TAP_EQ_U64(bad, 0, "data intact on the device");
        TAP_EQ_U64(memcpy_bad_words(p, len, 1), 0, "cudaMemcpy reads the device copy");
        cudaMemGetInfo(&fr, &tot);
        TAP_EQ_U64(fr, DEV_BYTES, "cudaMemGetInfo ignores managed residency");

        TAP_EQ_INT(cudaMemPrefetchAsync(p, len, DEV0, 0, NULL), cudaSuccess, "prefetch again");
        TAP_EQ_U64(stats(0).h2d_bytes, len, "already resident: nothing copied");
        TAP_EQ_INT(cudaMemPrefetchAsync(p, len, HOST, 0, NULL), cudaSuccess, "prefetch to host");
        s0 = stats(0);
        TAP_EQ_U64(s0.d2h_bytes, len, "d2h_bytes exact");
        TAP_EQ_U64(s0.managed_resident_bytes, 0, "nothing resident");
        TAP_EQ_U64(host_bad_words(p, 0, len, 1), 0, "host backing holds the data again");
        TAP_EQ_U64(s0.managed_resident_peak_bytes, len, "peak remembers 8 MiB");
        TAP_EQ_U64(s0.faults, 0, "prefetch is not a fault");
        TAP_EQ_INT(cudaFree(p), cudaSuccess, "free managed");
        TAP_EQ_U64(stats(0).managed_alloc_bytes, 0, "managed_alloc_bytes back to 0");
}

static void test_advice_and_faults(void) {
        const size_t len = 4 * MiB;
        struct fakecuda_stats s0;
        struct fakecuda_page_info pi;
        char *p = NULL, *buf;
        uint64_t bad = 1;

        cudaMallocManaged((void **)&p, len, cudaMemAttachGlobal);
        host_fill(p, len, 2);
        fakecuda_reset_stats(0);

        TAP_EQ_INT(cudaMemAdvise(p, len, cudaMemAdviseSetPreferredLocation, HOST), cudaSuccess,
                   "advise preferred host");
        TAP_EQ_INT(cudaMemAdvise(p, len, cudaMemAdviseSetAccessedBy, DEV0), cudaSuccess,
                   "advise accessed by device 0");
        TAP_EQ_INT(fakecuda_page_info(p + PAGE, &pi), cudaSuccess, "page info");
        TAP_EQ_INT(pi.preferred, FAKECUDA_LOC_HOST, "preferred recorded");
        TAP_EQ_INT(pi.accessed_by, 1, "accessed_by recorded");
        TAP_EQ_INT(pi.location, FAKECUDA_LOC_NONE, "advice moves nothing");
        TAP_EQ_INT(fakecuda_kernel_read(p, len), cudaSuccess, "kernel reads mapped host memory");
        TAP_EQ_INT(fakecuda_kernel_check(p, len, 2, &bad), cudaSuccess, "kernel checks it");
        TAP_EQ_U64(bad, 0, "remote reads see the data");
        s0 = stats(0);
        TAP_EQ_U64(s0.remote_bytes, 2 * len, "remote_bytes grew by both kernels' bytes");
        TAP_EQ_U64(s0.faults, 0, "no faults");
        TAP_EQ_U64(s0.h2d_bytes, 0, "no migration");
        TAP_EQ_U64(resident(p, len, 0), 0, "still not resident");
        TAP_EQ_U64(s0.advise_calls, 2, "advise_calls");

        TAP_EQ_INT(cudaMemAdvise(p, len, cudaMemAdviseSetPreferredLocation, DEV0), cudaSuccess,
                   "advise preferred device 0");
        TAP_EQ_INT(fakecuda_kernel_read(p, PAGE), cudaSuccess, "kernel reads one page");
        TAP_EQ_U64(stats(0).faults, 1, "preferred here: accessed_by does not stop the fault");
        TAP_EQ_U64(resident(p, len, 0), PAGE, "the touched page migrated");

        TAP_EQ_INT(cudaMemAdvise(p, len, cudaMemAdviseUnsetPreferredLocation, HOST), cudaSuccess, "unset");
        TAP_EQ_INT(cudaMemAdvise(p, len, cudaMemAdviseUnsetAccessedBy, DEV0), cudaSuccess, "unset mapping");
        TAP_EQ_INT(fakecuda_kernel_read(p, len), cudaSuccess, "kernel reads without advice");
        s0 = stats(0);
        TAP_EQ_U64(s0.faults, 2, "the other page faulted");
        TAP_EQ_U64(s0.h2d_bytes, len, "both pages migrated in");
        TAP_EQ_U64(s0.remote_bytes, 2 * len, "no remote bytes this time");
        TAP_EQ_U64(resident(p, len, 0), len, "resident after faults");

        /* host writes through cudaMemcpy land in the device copy */
        buf = malloc(len);
        if (buf)
                host_fill(buf, len, 3);
        TAP_EQ_INT(cudaMemcpy(p, buf, len, cudaMemcpyHostToDevice), cudaSuccess, "memcpy into device copy");
        free(buf);
        TAP_EQ_U64(resident(p, len, 0), len, "memcpy moved nothing");
        TAP_EQ_INT(fakecuda_kernel_check(p, len, 3, &bad), cudaSuccess, "kernel check");
        TAP_EQ_U64(bad, 0, "kernel sees the memcpy'd data");
        TAP_EQ_INT(cudaMemset(p, 0, 16), cudaSuccess, "cudaMemset managed");
        TAP_EQ_INT(fakecuda_kernel_check(p, len, 3, &bad), cudaSuccess, "kernel check");
        TAP_EQ_U64(bad, 2, "memset cleared two words");

        /* a kernel on device 1 pulls pages over from device 0 */
        fakecuda_reset_stats(1);
        cudaSetDevice(1);
        TAP_EQ_INT(fakecuda_kernel_fill(p, len, 4), cudaSuccess, "kernel fill on device 1");
        cudaSetDevice(0);
        TAP_EQ_U64(stats(0).d2h_bytes, len, "device 0 gave its pages up");
        TAP_EQ_U64(stats(1).h2d_bytes, len, "device 1 took them");
        TAP_EQ_U64(resident(p, len, 1), len, "resident on device 1");
        TAP_EQ_U64(resident(p, len, 0), 0, "not on device 0");
        TAP_EQ_U64(memcpy_bad_words(p, len, 4), 0, "data written on device 1 reads back");
        TAP_EQ_INT(cudaMemPrefetchAsync(p, len, HOST, 0, NULL), cudaSuccess, "back to host");
        TAP_EQ_U64(host_bad_words(p, 0, len, 4), 0, "host has device 1's writes");
        cudaFree(p);
}

/* The GPU's mapping of host memory preferred on the host, as measured on the
 * H200 (DESIGN.md, driver 580): made by the first touch (one fault), kept by
 * UnsetAccessedBy and by a prefetch to the host, dropped by read
 * duplication set then unset (a re-arm) and by a move of the page. */
static void test_host_mapping(void) {
        const size_t len = 2 * PAGE;
        struct fakecuda_stats s0;
        char *p = NULL;
        uint64_t faults;

        cudaMallocManaged((void **)&p, len, cudaMemAttachGlobal);
        host_fill(p, len, 3);
        cudaMemAdvise(p, len, cudaMemAdviseSetPreferredLocation, HOST);
        fakecuda_reset_stats(0);
        TAP_EQ_INT(fakecuda_kernel_read(p, len), cudaSuccess, "mapping: first touch");
        TAP_EQ_U64(stats(0).faults, 2, "mapping: faults once a page");
        TAP_EQ_U64(resident(p, len, 0), 0, "mapping: and maps, nothing migrates");
        TAP_EQ_INT(fakecuda_kernel_read(p, len), cudaSuccess, "mapping: second touch");
        TAP_EQ_U64(stats(0).faults, 2, "mapping: read in place, no fault");
        cudaMemAdvise(p, len, cudaMemAdviseUnsetAccessedBy, DEV0);
        cudaMemPrefetchAsync(p, len, HOST, 0, NULL);
        cudaDeviceSynchronize();
        TAP_EQ_INT(fakecuda_kernel_read(p, len), cudaSuccess, "mapping: touch after UnsetAccessedBy, prefetch to host");
        TAP_EQ_U64(stats(0).faults, 2, "mapping: they leave it in place");
        cudaMemAdvise(p, PAGE, cudaMemAdviseSetReadMostly, DEV0);
        cudaMemAdvise(p, PAGE, cudaMemAdviseUnsetReadMostly, DEV0);
        TAP_EQ_INT(fakecuda_kernel_read(p, len), cudaSuccess, "mapping: touch after a re-arm of page 0");
        TAP_EQ_U64(stats(0).faults, 3, "mapping: the re-armed page faults again, the other does not");
        faults = stats(0).faults;
        cudaMemPrefetchAsync(p, len, DEV0, 0, NULL);
        cudaMemPrefetchAsync(p, len, HOST, 0, NULL);
        cudaDeviceSynchronize();
        TAP_EQ_INT(fakecuda_kernel_read(p, len), cudaSuccess, "mapping: touch after a round trip through VRAM");
        s0 = stats(0);
        TAP_EQ_U64(s0.faults, faults + 2, "mapping: moved pages fault again");
        TAP_EQ_INT(fakecuda_kernel_check(p, len, 3, &faults), cudaSuccess, "mapping: check");
        TAP_EQ_U64(faults, 0, "mapping: data intact");
        cudaFree(p);
}

/* A 4 KiB sample of a page in VRAM (kvtier's probe): the advice and the
 * prefetch over less than a page send that bit out, unmapped; the page
 * stays resident, and the device's next touch faults once and maps it, a
 * remote map the CUPTI hook hears of (on the H200: ~10 us, not the whole
 * page's refault).  A promotion brings the bit back. */
static unsigned um_remote_maps, um_maps_at_start;
/* Counts remote maps, and those that name a page's first 4 KiB. */
static void um_count(int kind, uintptr_t addr, uint64_t value, int dev) {
        (void)value, (void)dev;
        um_remote_maps += kind == 7; /* CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_REMOTE_MAP */
        um_maps_at_start += kind == 7 && addr % PAGE < 4096;
}

/* len bytes of managed memory, preferred on and prefetched to device 0,
 * filled there with seed's pattern; NULL if any of it failed. */
static char *managed_in_vram(size_t len, uint64_t seed) {
        char *p = NULL;

        if (cudaMallocManaged((void **)&p, len, cudaMemAttachGlobal) != cudaSuccess)
                return NULL;
        if (cudaMemAdvise(p, len, cudaMemAdviseSetPreferredLocation, DEV0) != cudaSuccess ||
            cudaMemPrefetchAsync(p, len, DEV0, 0, NULL) != cudaSuccess ||
            fakecuda_kernel_fill(p, len, seed) != cudaSuccess) {
                cudaFree(p);
                return NULL;
        }
        return p;
}

static void test_sub_page_sample(void) {
        const size_t len = 2 * PAGE;
        char *p = managed_in_vram(len, 9);
        uint64_t bad = 1;

        TAP_OK(p != NULL, "sample: filled in VRAM");
        if (!p)
                return;
        fakecuda_set_um_hook(um_count);
        fakecuda_reset_stats(0);
        TAP_EQ_INT(cudaMemAdvise(p + 4096, 4096, cudaMemAdviseSetPreferredLocation, HOST), cudaSuccess,
                   "sample: a 4 KiB page preferred on the host");
        TAP_EQ_INT(cudaMemPrefetchAsync(p + 4096, 4096, HOST, 0, NULL), cudaSuccess, "sample: and sent there");
        cudaDeviceSynchronize();
        TAP_EQ_U64(resident(p, len, 0), len, "sample: the pages stay resident");
        TAP_EQ_U64(stats(0).d2h_bytes, 4096, "sample: 4 KiB moved");
        TAP_EQ_INT(fakecuda_kernel_read(p, len), cudaSuccess, "sample: touched");
        TAP_EQ_U64(stats(0).faults, 1, "sample: one fault, for the sampled page");
        TAP_EQ_U64(um_remote_maps, 1, "sample: one remote map, heard by CUPTI");
        TAP_EQ_INT(fakecuda_kernel_read(p, len), cudaSuccess, "sample: touched again");
        TAP_EQ_U64(stats(0).faults, 1, "sample: mapped now, no second fault");
        cudaMemPrefetchAsync(p + 4096, 4096, HOST, 0, NULL);
        cudaMemAdvise(p + 4096, 4096, cudaMemAdviseSetPreferredLocation, HOST);
        cudaMemPrefetchAsync(p + 4096, 4096, HOST, 0, NULL);
        cudaDeviceSynchronize();
        TAP_EQ_INT(fakecuda_kernel_read(p, len), cudaSuccess, "sample: probed again, touched");
        TAP_EQ_U64(stats(0).faults, 2, "sample: faults again");
        cudaMemAdvise(p + 4096, 4096, cudaMemAdviseSetPreferredLocation, HOST);
        cudaMemPrefetchAsync(p + 4096, 4096, HOST, 0, NULL);
        cudaMemPrefetchAsync(p, len, DEV0, 0, NULL);
        cudaDeviceSynchronize();
        TAP_EQ_INT(fakecuda_kernel_read(p, len), cudaSuccess, "sample: promoted, touched");
        TAP_EQ_U64(stats(0).faults, 2, "sample: a promotion brings the page back, no fault");
        TAP_EQ_INT(fakecuda_kernel_check(p, len, 9, &bad), cudaSuccess, "sample: check");
        TAP_EQ_U64(bad, 0, "sample: data intact");
        fakecuda_set_um_hook(NULL);
        cudaFree(p);
}

/* A mapped eviction (preferred host, accessed-by, prefetch to the host),
 * then a 4 KiB re-arm (read-mostly set, unset) as shim/evictors.c makes
 * it: on the H200 the next read faults the page again (256 remote maps for
 * 256 re-armed chunks, tests/bench/RESULTS.md).  (Found in review: the
 * model kept such a page mapped.) */
static void test_rearm_mapped(void) {
        const size_t len = 2 * PAGE;
        char *p = managed_in_vram(len, 9);

        TAP_OK(p != NULL, "re-arm of a mapped eviction: filled in VRAM");
        if (!p)
                return;
        cudaMemAdvise(p, len, cudaMemAdviseSetPreferredLocation, HOST);
        cudaMemAdvise(p, len, cudaMemAdviseSetAccessedBy, DEV0);
        cudaMemPrefetchAsync(p, len, HOST, 0, NULL);
        cudaDeviceSynchronize();
        fakecuda_kernel_read(p, len);
        fakecuda_set_um_hook(um_count);
        um_remote_maps = 0;
        fakecuda_reset_stats(0);
        cudaMemAdvise(p + 4096, 4096, cudaMemAdviseSetReadMostly, DEV0);
        cudaMemAdvise(p + 4096, 4096, cudaMemAdviseUnsetReadMostly, DEV0);
        fakecuda_kernel_read(p, len);
        TAP_EQ_U64(stats(0).faults, 1, "re-arm of a mapped eviction: the page faults");
        TAP_EQ_U64(um_remote_maps, 1, "re-arm of a mapped eviction: and is remote-mapped again");
        fakecuda_kernel_read(p, len);
        TAP_EQ_U64(stats(0).faults, 1, "re-arm of a mapped eviction: once");
        fakecuda_set_um_hook(NULL);
        cudaFree(p);
}

/* A mapped eviction as shim/evictors.c makes it: each page accessed-by
 * but for its first 4 KiB (the sample page).  The driver maps the rest as
 * the pages go out, its remote maps naming no sample page, and the
 * device's first touch of each page faults once and maps it (on the H200
 * a touch after such an eviction faulted: tests/gpu/sample-cost.cu). */
static void test_mapped_sample_free(void) {
        const size_t len = 2 * PAGE;
        char *p = managed_in_vram(len, 5);
        uint64_t bad = 1;

        TAP_OK(p != NULL, "sample free: filled in VRAM");
        if (!p)
                return;
        fakecuda_set_um_hook(um_count);
        um_remote_maps = um_maps_at_start = 0;
        cudaMemAdvise(p, len, cudaMemAdviseSetPreferredLocation, HOST);
        for (size_t off = 0; off < len; off += PAGE)
                cudaMemAdvise(p + off + 4096, PAGE - 4096, cudaMemAdviseSetAccessedBy, DEV0);
        cudaMemPrefetchAsync(p, len, HOST, 0, NULL);
        cudaDeviceSynchronize();
        TAP_EQ_U64(um_remote_maps, 2, "sample free: the driver maps each page as it goes out");
        TAP_EQ_U64(um_maps_at_start, 0, "sample free: none at a sample page");
        fakecuda_reset_stats(0);
        TAP_EQ_INT(fakecuda_kernel_check(p, len, 5, &bad), cudaSuccess, "sample free: touched");
        TAP_EQ_U64(bad, 0, "sample free: data intact");
        TAP_EQ_U64(stats(0).faults, 2, "sample free: the first touch of each page faults");
        TAP_EQ_U64(um_maps_at_start, 2, "sample free: and maps it at its sample page");
        TAP_EQ_U64(resident(p, len, 0), 0, "sample free: nothing migrates");
        fakecuda_kernel_read(p, len);
        TAP_EQ_U64(stats(0).faults, 2, "sample free: once");
        cudaMemAdvise(p, len, cudaMemAdviseSetAccessedBy, DEV0);
        cudaMemPrefetchAsync(p, len, DEV0, 0, NULL);
        cudaMemPrefetchAsync(p, len, HOST, 0, NULL);
        cudaDeviceSynchronize();
        fakecuda_reset_stats(0);
        fakecuda_kernel_read(p, len);
        TAP_EQ_U64(stats(0).faults, 0, "sample free: accessed-by over all of it, the driver maps all");
        fakecuda_set_um_hook(NULL);
        cudaFree(p);
}

/* Batched prefetches (the probes' pages): each range to the location its
 * index names, on a stream; the legacy stream and malformed indices are
 * refused, as CUDA refuses them. */
static void test_prefetch_batch(void) {
        const size_t len = 3 * PAGE;
        struct cudaMemLocation locs[2] = {DEV0, HOST};
        size_t idx[2] = {0, 2}, bad_idx[2] = {0, 0}, sizes[3] = {PAGE, PAGE, PAGE};
        void *ptrs[3];
        cudaStream_t s = NULL;
        char *p = NULL;

        cudaMallocManaged((void **)&p, len, cudaMemAttachGlobal);
        cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
        for (int i = 0; i < 3; i++)
                ptrs[i] = p + (size_t)i * PAGE;
        cudaMemPrefetchAsync(p, len, DEV0, 0, NULL);
        cudaDeviceSynchronize();
        TAP_EQ_INT(cudaMemPrefetchBatchAsync(ptrs, sizes, 3, locs, idx, 2, 0, NULL), cudaErrorInvalidValue,
                   "batch: the legacy stream is refused");
        TAP_EQ_INT(cudaMemPrefetchBatchAsync(ptrs, sizes, 3, locs, bad_idx, 2, 0, s), cudaErrorInvalidValue,
                   "batch: indices must rise");
        TAP_EQ_U64(resident(p, len, 0), len, "batch: a refused batch moves nothing");
        TAP_EQ_INT(cudaMemPrefetchBatchAsync(ptrs, sizes, 3, locs, idx, 2, 0, s), cudaSuccess, "batch: sent");
        cudaStreamSynchronize(s);
        TAP_EQ_U64(resident(p, 2 * PAGE, 0), 2 * PAGE, "batch: ranges 0..1 to the device");
        TAP_EQ_U64(resident(p + 2 * PAGE, PAGE, 0), 0, "batch: range 2 to the host");
        cudaStreamDestroy(s);
        cudaFree(p);
}

static void test_read_mostly(void) {
        const size_t len = 4 * MiB;
        struct fakecuda_page_info pi = {0};
        struct fakecuda_stats s0;
        char *p = NULL;
        uint64_t bad = 1;

        cudaMallocManaged((void **)&p, len, cudaMemAttachGlobal);
        host_fill(p, len, 5);
        fakecuda_reset_stats(0);
        TAP_EQ_INT(cudaMemAdvise(p, len, cudaMemAdviseSetReadMostly, HOST), cudaSuccess, "set read mostly");
        TAP_EQ_INT(cudaMemPrefetchAsync(p, len, DEV0, 0, NULL), cudaSuccess, "read-duplicating prefetch");
        TAP_EQ_U64(stats(0).h2d_bytes, len, "duplicate copied in");
        TAP_EQ_U64(resident(p, len, 0), len, "duplicate counts as resident");
        TAP_EQ_U64(host_bad_words(p, 0, len, 5), 0, "host copy stays valid");
        fakecuda_page_info(p, &pi);
        TAP_EQ_INT(pi.duplicate_device, 0, "page duplicated on device 0");
        TAP_EQ_INT(fakecuda_kernel_check(p, len, 5, &bad), cudaSuccess, "kernel reads the duplicate");
        TAP_EQ_U64(bad + stats(0).faults, 0, "without faults");
        cudaMemAdvise(p, len, cudaMemAdviseSetPreferredLocation, HOST);
        TAP_EQ_INT(cudaMemAdvise(p, len, cudaMemAdviseUnsetReadMostly, HOST), cudaSuccess,
                   "unset read mostly");
        s0 = stats(0);
        TAP_EQ_U64(s0.managed_resident_bytes, 0, "duplicates collapsed to the preferred host");
        TAP_EQ_U64(s0.d2h_bytes, 0, "without copying");
        TAP_EQ_U64(host_bad_words(p, 0, len, 5), 0, "host data intact");
        cudaFree(p);
}

/* The CPU's accesses to managed memory fault as under UVM (x86): the
 * access completes with the right data, and the page moves as it would. */
static void test_cpu_faults(void) {
        const size_t len = 4 * MiB;
        struct fakecuda_page_info pi = {0};
        struct fakecuda_stats s0;
        char *p = NULL;
        uint64_t w, bad = 1;

        cudaMallocManaged((void **)&p, len, cudaMemAttachGlobal);
        host_fill(p, len, 10);
        cudaMemPrefetchAsync(p, len, DEV0, 0, NULL);
        fakecuda_reset_stats(0);
        TAP_EQ_U64(host_bad_words(p, 0, PAGE, 10), 0, "cpu read of a device-resident page: the data");
        fakecuda_page_info(p, &pi);
        TAP_EQ_INT(pi.location, FAKECUDA_LOC_HOST, "the page migrated to the host");
        TAP_EQ_U64(resident(p, PAGE, 0), 0, "and left device 0");
        TAP_EQ_U64(resident(p + PAGE, PAGE, 0), PAGE, "the other page stayed");
        s0 = stats(0);
        TAP_EQ_U64(s0.cpu_faults, 1, "one cpu fault");
        TAP_EQ_U64(s0.d2h_bytes, PAGE, "one page copied back");
        TAP_EQ_U64(s0.faults, 0, "cpu faults are not GPU faults");
        w = 77;
        memcpy(p + PAGE + 8, &w, 8);
        fakecuda_page_info(p + PAGE, &pi);
        TAP_EQ_INT(pi.location, FAKECUDA_LOC_HOST, "cpu write of a device-resident page migrates it");
        TAP_EQ_U64(host_bad_words(p, PAGE + 16, PAGE - 16, 10) + host_bad_words(p, PAGE, 8, 10), 0,
                   "the rest of the page came along");
        TAP_EQ_U64(stats(0).cpu_faults, 2, "two cpu faults");
        TAP_EQ_INT(fakecuda_kernel_check(p, 2 * PAGE, 10, &bad), cudaSuccess, "kernel checks both pages");
        TAP_EQ_U64(bad, 1, "and sees the cpu's write");
        TAP_EQ_U64(memcpy_bad_words(p, PAGE, 10), 0, "cudaMemcpy reads the migrated page");
        cudaFree(p);

        /* read-mostly, resident on the device: a cpu read leaves a duplicate there */
        cudaMallocManaged((void **)&p, len, cudaMemAttachGlobal);
        host_fill(p, len, 11);
        cudaMemPrefetchAsync(p, len, DEV0, 0, NULL);
        cudaMemAdvise(p, len, cudaMemAdviseSetReadMostly, DEV0);
        fakecuda_reset_stats(0);
        TAP_EQ_U64(host_bad_words(p, 0, PAGE, 11), 0, "cpu read of a read-mostly device page: the data");
        fakecuda_page_info(p, &pi);
        TAP_EQ_INT(pi.location, FAKECUDA_LOC_HOST, "the host has a copy");
        TAP_EQ_INT(pi.duplicate_device, 0, "device 0 keeps its copy as a duplicate");
        TAP_EQ_U64(resident(p, PAGE, 0), PAGE, "still resident on device 0");
        TAP_EQ_U64(stats(0).cpu_faults, 1, "one cpu fault");
        TAP_EQ_U64(host_bad_words(p, 0, PAGE, 11), 0, "a cpu read of a duplicated page");
        fakecuda_page_info(p, &pi);
        TAP_EQ_INT(pi.duplicate_device, 0, "leaves the duplicate");
        TAP_EQ_U64(stats(0).cpu_faults, 1, "without a fault");
        TAP_EQ_INT(fakecuda_kernel_check(p, PAGE, 11, &bad), cudaSuccess, "kernel reads the duplicate");
        TAP_EQ_U64(bad + stats(0).faults, 0, "right, without GPU faults");

        /* a write to a device-resident read-mostly page migrates it, no duplicate */
        w = 79;
        memcpy(p + PAGE, &w, 8);
        fakecuda_page_info(p + PAGE, &pi);
        TAP_OK(pi.location == FAKECUDA_LOC_HOST && pi.duplicate_device == -1,
               "cpu write to a read-mostly device page migrates it (loc %d, dup %d)", pi.location,
               pi.duplicate_device);
        TAP_EQ_U64(host_bad_words(p, PAGE + 8, PAGE - 8, 11), 0, "with its data");
        TAP_EQ_U64(resident(p + PAGE, PAGE, 0), 0, "and leaves nothing on device 0");
        cudaFree(p);

        /* a cpu write to a page duplicated by a prefetch drops the duplicate */
        cudaMallocManaged((void **)&p, PAGE, cudaMemAttachGlobal);
        host_fill(p, PAGE, 12);
        cudaMemAdvise(p, PAGE, cudaMemAdviseSetReadMostly, DEV0);
        cudaMemPrefetchAsync(p, PAGE, DEV0, 0, NULL);
        fakecuda_reset_stats(0);
        w = 78;
        memcpy(p + 8, &w, 8);
        fakecuda_page_info(p, &pi);
        TAP_EQ_INT(pi.duplicate_device, -1, "cpu write to a duplicated page drops the duplicate");
        TAP_EQ_INT(pi.location, FAKECUDA_LOC_HOST, "the host holds the only copy");
        TAP_EQ_U64(resident(p, PAGE, 0), 0, "device 0 holds nothing of it");
        s0 = stats(0);
        TAP_EQ_U64(s0.cpu_faults, 1, "the write faulted once");
        TAP_EQ_U64(s0.d2h_bytes, 0, "copying nothing");
        TAP_EQ_INT(fakecuda_kernel_check(p, PAGE, 12, &bad), cudaSuccess, "kernel checks the page");
        TAP_EQ_U64(bad, 1, "and sees the cpu's write, not the old duplicate");
        memcpy(&w, p + 8, 8);
        TAP_EQ_U64(w, 78, "the cpu reads its write back");
        cudaFree(p);
}

static void test_eviction(void) {
        const size_t len = 80 * MiB; /* 40 pages on a 32-page device */
        struct fakecuda_stats s0;
        char *p = NULL, *d = NULL;
        uint64_t bad = 1;

        TAP_EQ_INT(cudaMallocManaged((void **)&p, len, cudaMemAttachGlobal), cudaSuccess,
                   "managed 80 MiB oversubscribes 64 MiB");
        host_fill(p, len, 6);
        fakecuda_reset_stats(0);
        TAP_EQ_INT(cudaMemPrefetchAsync(p, DEV_BYTES, DEV0, 0, NULL), cudaSuccess, "fill the device");
        TAP_EQ_U64(stats(0).evictions, 0, "exactly full, no eviction");
        /* touch pages 0..7 so that 8..15 are the least recently used */
        TAP_EQ_INT(fakecuda_kernel_read(p, 8 * PAGE), cudaSuccess, "touch the first 8 pages");
        TAP_EQ_INT(cudaMemPrefetchAsync(p + DEV_BYTES, len - DEV_BYTES, DEV0, 0, NULL), cudaSuccess,
                   "prefetch 8 more pages");
        s0 = stats(0);
        TAP_EQ_U64(s0.evictions, 8, "8 pages evicted");
        TAP_EQ_U64(s0.d2h_bytes, 8 * PAGE, "evictions copied out");
        TAP_EQ_U64(s0.h2d_bytes, len, "every page copied in once");
        TAP_EQ_U64(s0.managed_resident_bytes, DEV_BYTES, "device full");
        TAP_EQ_U64(s0.managed_resident_peak_bytes, DEV_BYTES, "peak never exceeded the device");
        TAP_EQ_U64(resident(p, 8 * PAGE, 0), 8 * PAGE, "recently touched pages stayed");
        TAP_EQ_U64(resident(p + 8 * PAGE, 8 * PAGE, 0), 0, "least recently used pages left");
        TAP_EQ_U64(host_bad_words(p, 8 * PAGE, 8 * PAGE, 6), 0, "evicted data back on the host");

        /* cudaMalloc takes precedence: UVM evicts managed pages for it */
        TAP_EQ_INT(cudaMalloc((void **)&d, 8 * MiB), cudaSuccess, "cudaMalloc on a full device");
        s0 = stats(0);
        TAP_EQ_U64(s0.managed_resident_bytes, DEV_BYTES - 8 * MiB, "managed pages made room");
        TAP_EQ_U64(s0.evictions, 12, "4 more evictions");

        TAP_EQ_INT(fakecuda_kernel_check(p, len, 6, &bad), cudaSuccess, "kernel checks all 80 MiB");
        TAP_EQ_U64(bad, 0, "data survived eviction and refaulting");
        s0 = stats(0);
        TAP_OK(s0.faults > 0, "oversubscribed check faulted (%" PRIu64 ")", s0.faults);
        TAP_EQ_U64(s0.managed_resident_peak_bytes, DEV_BYTES, "peak still the device size");
        TAP_EQ_U64(memcpy_bad_words(p, len, 6), 0, "cudaMemcpy reads all of it back");

        TAP_EQ_INT(fakecuda_reset_stats(0), cudaSuccess, "reset stats");
        s0 = stats(0);
        TAP_EQ_U64(s0.managed_resident_peak_bytes, s0.managed_resident_bytes, "peak restarts at resident");
        TAP_EQ_U64(s0.h2d_bytes + s0.d2h_bytes + s0.faults + s0.evictions, 0, "counters zeroed");
        TAP_EQ_INT(cudaFree(d), cudaSuccess, "free device memory");
        TAP_EQ_INT(cudaFree(p), cudaSuccess, "free while resident");
        s0 = stats(0);
        TAP_EQ_U64(s0.managed_resident_bytes, 0, "free released residency");
        TAP_EQ_U64(s0.d2h_bytes, 0, "free copies nothing back");
}

static void test_invalid(void) {
        struct cudaMemLocation bad_dev = {cudaMemLocationTypeDevice, 5};
        struct cudaMemLocation bad_numa = {cudaMemLocationTypeHostNuma, 1};
        struct cudaMemLocation numa0 = {cudaMemLocationTypeHostNuma, 0};
        struct cudaMemLocation invalid = {cudaMemLocationTypeInvalid, 0};
        char *p = NULL, *d = NULL, stack[64];
        cudaStream_t s = NULL;

        cudaMallocManaged((void **)&p, 4 * MiB, cudaMemAttachGlobal);
        cudaMalloc((void **)&d, 4 * MiB);
        TAP_EQ_INT(cudaMemAdvise(d, PAGE, cudaMemAdviseSetAccessedBy, DEV0), cudaErrorInvalidValue,
                   "advise on cudaMalloc memory");
        TAP_EQ_INT(cudaMemAdvise(p + 3 * MiB, 2 * MiB, cudaMemAdviseSetAccessedBy, DEV0),
                   cudaErrorInvalidValue, "advise past the end");
        TAP_EQ_INT(cudaMemAdvise(p, 0, cudaMemAdviseSetAccessedBy, DEV0), cudaErrorInvalidValue,
                   "advise 0 bytes");
        TAP_EQ_INT(cudaMemAdvise(p, PAGE, (enum cudaMemoryAdvise)9, DEV0), cudaErrorInvalidValue,
                   "bad advice");
        TAP_EQ_INT(cudaMemAdvise(p, PAGE, cudaMemAdviseSetPreferredLocation, invalid), cudaErrorInvalidValue,
                   "invalid location type");
        TAP_EQ_INT(cudaMemAdvise(p, PAGE, cudaMemAdviseSetPreferredLocation, bad_numa),
                   cudaErrorInvalidValue, "NUMA node 1 of 1");
        TAP_EQ_INT(cudaMemAdvise(p, PAGE, cudaMemAdviseSetPreferredLocation, numa0), cudaSuccess,
                   "NUMA node 0");
        TAP_EQ_INT(cudaMemAdvise(p, PAGE, cudaMemAdviseSetPreferredLocation, bad_dev),
                   cudaErrorInvalidDevice, "device 5 of 2");
        TAP_EQ_INT(cudaMemPrefetchAsync(stack, 64, DEV0, 0, NULL), cudaErrorInvalidValue,
                   "prefetch stack memory");
        TAP_EQ_INT(cudaMemPrefetchAsync(d, PAGE, DEV0, 0, NULL), cudaErrorInvalidValue,
                   "prefetch device memory");
        TAP_EQ_INT(cudaMemPrefetchAsync(p, 0, DEV0, 0, NULL), cudaErrorInvalidValue, "prefetch 0 bytes");
        TAP_EQ_INT(cudaMemPrefetchAsync(p, 4 * MiB + 1, DEV0, 0, NULL), cudaErrorInvalidValue,
                   "prefetch past end");
        TAP_EQ_INT(cudaMemPrefetchAsync(p, PAGE, DEV0, 1, NULL), cudaErrorInvalidValue, "prefetch flags");
        TAP_EQ_INT(cudaMemPrefetchAsync(p, PAGE, bad_dev, 0, NULL), cudaErrorInvalidDevice,
                   "prefetch device 5");
        cudaStreamCreate(&s);
        TAP_EQ_INT(cudaMemPrefetchAsync(p, PAGE, DEV1, 0, s), cudaSuccess, "prefetch on a stream");
        TAP_EQ_INT(cudaStreamSynchronize(s), cudaSuccess, "and synchronize");
        cudaStreamDestroy(s);
        TAP_EQ_INT(cudaMemPrefetchAsync(p, PAGE, DEV0, 0, s), cudaErrorInvalidResourceHandle,
                   "prefetch on a destroyed stream");
        TAP_EQ_U64(resident(p, 4 * MiB, 0) + resident(p, 4 * MiB, 1), PAGE, "failed calls moved nothing");
        TAP_EQ_INT(fakecuda_kernel_read(stack, 64), 700, "kernel on host memory: illegal address");
        TAP_EQ_INT(fakecuda_kernel_read(p, 12), cudaErrorInvalidValue, "kernel length not in words");
        TAP_EQ_INT(fakecuda_kernel_read(p + 4, 8), cudaErrorInvalidValue, "kernel pointer not aligned");
        TAP_EQ_INT(cudaMemset(stack, 0, 8), cudaErrorInvalidValue, "cudaMemset on host memory");
        TAP_EQ_INT(cudaMemcpy(stack, p + 4 * MiB - 8, 64, cudaMemcpyDefault), cudaErrorInvalidValue,
                   "cudaMemcpy past a managed end");
        TAP_EQ_INT(cudaMemcpy(stack, d, 64, (enum cudaMemcpyKind)7), cudaErrorInvalidValue,
                   "bad memcpy kind");
        TAP_EQ_INT(fakecuda_resident_bytes(p, 8 * MiB, 0, &(uint64_t){0}), cudaErrorInvalidValue,
                   "resident_bytes past the end");
        TAP_EQ_INT(fakecuda_kernel_fill(d, 4 * MiB, 8), cudaSuccess, "kernel on cudaMalloc memory");
        TAP_EQ_U64(host_bad_words(d, 0, 4 * MiB, 8), 0, "device memory is host memory");
        cudaFree(p);
        cudaFree(d);
        (void)cudaGetLastError();
}

struct mover_arg {
        char *p;
        size_t len;
        int rounds;
};

static void *mover(void *arg) {
        struct mover_arg *a = arg;

        for (int i = 0; i < a->rounds; i++) {
                size_t off = (size_t)(i % 4) * PAGE;
                (void)cudaMemPrefetchAsync(a->p + off, 2 * PAGE, i % 2 ? HOST : DEV0, 0, NULL);
        }
        return NULL;
}

static void test_concurrency(void) {
        struct mover_arg a = {.len = 12 * MiB, .rounds = 200};
        uint64_t bad = 0, total_bad = 0;
        pthread_t t;

        cudaMallocManaged((void **)&a.p, a.len, cudaMemAttachGlobal);
        host_fill(a.p, a.len, 9);
        TAP_EQ_INT(pthread_create(&t, NULL, mover, &a), 0, "mover thread started");
        for (int i = 0; i < 100; i++) {
                if (fakecuda_kernel_check(a.p, a.len, 9, &bad) != cudaSuccess)
                        bad = UINT64_MAX / 200;
                total_bad += bad;
        }
        pthread_join(t, NULL);
        TAP_EQ_U64(total_bad, 0, "kernels racing a prefetching thread always see the data");
        TAP_EQ_U64(memcpy_bad_words(a.p, a.len, 9), 0, "and so does cudaMemcpy");

        /* the CPU's reads fault pages back while the mover sends them away */
        total_bad = 0;
        fakecuda_reset_stats(0);
        TAP_EQ_INT(pthread_create(&t, NULL, mover, &a), 0, "mover thread started again");
        for (int i = 0; i < 20; i++)
                total_bad += host_bad_words(a.p, 0, a.len, 9);
        pthread_join(t, NULL);
        TAP_EQ_U64(total_bad, 0, "cpu reads racing a prefetching thread always see the data");
        TAP_OK(stats(0).cpu_faults > 0, "and faulted (%" PRIu64 ")", stats(0).cpu_faults);

        /* and no CPU write is lost to a migration copying the page away */
        total_bad = 0;
        TAP_EQ_INT(pthread_create(&t, NULL, mover, &a), 0, "mover thread started a third time");
        for (uint64_t seed = 14; seed < 54; seed++) {
                host_fill(a.p, a.len, seed);
                total_bad += host_bad_words(a.p, 0, a.len, seed);
        }
        pthread_join(t, NULL);
        TAP_EQ_U64(total_bad, 0, "cpu writes racing a prefetching thread all land");
        cudaFree(a.p);
}

static void test_driver(void) {
        typedef int (*init_fn)(unsigned);
        typedef int (*alloc_fn)(unsigned long long *, size_t);
        typedef int (*free_fn)(unsigned long long);
        typedef int (*proc_fn)(const char *, void **, int, uint64_t, int *);
        char path[4096];
        unsigned long long dp = 0;
        void *h = open_fake_driver(path, sizeof(path)), *fn = NULL;
        alloc_fn alloc;
        proc_fn proc;
        int status = -1;

        TAP_OK(h, "dlopen %s: %s", path, h ? "ok" : dlerror());
        if (!h)
                return;
        proc = (proc_fn)dlsym(h, "cuGetProcAddress_v2");
        TAP_OK(proc, "cuGetProcAddress_v2 exported");
        if (!proc)
                return;
        TAP_EQ_INT(proc("cuMemAlloc", &fn, 13000, 0, &status), 0, "cuGetProcAddress(cuMemAlloc)");
        TAP_OK(fn == dlsym(h, "cuMemAlloc_v2"), "resolves to cuMemAlloc_v2");
        TAP_EQ_INT(proc("cuNoSuchThing", &fn, 13000, 0, &status), 500, "unknown symbol not found");
        TAP_EQ_INT(status, 1, "with symbol status not found");
        TAP_EQ_INT(((init_fn)dlsym(h, "cuInit"))(0), 0, "cuInit");
        alloc = (alloc_fn)dlsym(h, "cuMemAlloc_v2");
        TAP_EQ_INT(alloc(&dp, 4 * MiB), 0, "cuMemAlloc_v2");
        TAP_EQ_U64(stats(0).device_alloc_bytes, 4 * MiB, "counted in the shared model");
        TAP_EQ_INT(alloc(&dp, DEV_BYTES), 2, "cuMemAlloc_v2 out of memory");
        TAP_EQ_INT(((free_fn)dlsym(h, "cuMemFree_v2"))(dp), 0, "cuMemFree_v2");
        TAP_EQ_U64(stats(0).device_alloc_bytes, 0, "freed in the model");
        dlclose(h);
}

/* CUDA is not fork-safe: in the child of a fork() after initialization,
 * calls fail with cudaErrorInitializationError (and never hang on a lock
 * another thread held). */
static void test_fork(void) {
        void *p = NULL;
        char *mp = NULL;
        int status = 0;
        pid_t pid;

        TAP_EQ_INT(cudaMalloc(&p, MiB), cudaSuccess, "fork: the parent initializes CUDA");
        pid = fork();
        if (pid == 0)
                _exit(cudaMalloc(&p, MiB) == cudaErrorInitializationError &&
                              cudaMemGetInfo(&(size_t){ 0 }, &(size_t){ 0 }) == cudaErrorInitializationError
                      ? 0
                      : 1);
        TAP_OK(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0,
               "fork: the child's CUDA calls fail with an initialization error");
        TAP_EQ_INT(cudaFree(p), cudaSuccess, "fork: the parent's CUDA still works");

        /* the child's memory is a copy of the parent's: its CPU reads fault the data in */
        cudaMallocManaged((void **)&mp, PAGE, cudaMemAttachGlobal);
        host_fill(mp, PAGE, 13);
        cudaMemPrefetchAsync(mp, PAGE, DEV0, 0, NULL);
        pid = fork();
        if (pid == 0)
                _exit(host_bad_words(mp, 0, PAGE, 13) == 0 ? 0 : 1);
        TAP_OK(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0,
               "fork: the child's CPU reads a device-resident page (status %#x)", status);
        TAP_EQ_U64(resident(mp, PAGE, 0), PAGE, "fork: still on device 0 in the parent");
        cudaFree(mp);
}

int main(void) {
        test_children();

        setenv("FAKECUDA_DEVICES", "2", 1);
        setenv("FAKECUDA_MEM", "64M", 1);
        test_basics();
        test_malloc();
        test_prefetch_roundtrip();
        test_advice_and_faults();
        test_host_mapping();
        test_read_mostly();
        test_sub_page_sample();
        test_rearm_mapped();
        test_mapped_sample_free();
        test_prefetch_batch();
        test_cpu_faults();
        test_eviction();
        test_invalid();
        test_concurrency();
        test_driver();
        test_contexts();
        test_fork();
        return tap_done();
}
