/* SPDX-License-Identifier: MIT */

/*
 * Fake libcudart.so.13: the CUDA 13 runtime entry points kvtier and its
 * tests use, on the residency model in model.c.  Work is done synchronously
 * at call time; streams only exist to be validated.  Entry points never
 * call each other through exported symbols, so a shim interposing one of
 * them sees exactly the application's calls.
 */

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cuda-abi.h"
#include "fakecuda.h"
#include "model.h"

/* Values from CUDA 13's driver_types.h that shim/cuda-abi.h does not carry. */
#define FAKE_ERROR_ILLEGAL_ADDRESS 700
#define FAKE_MEM_ATTACH_HOST       0x02
#define FAKE_STREAM_LEGACY         ((cudaStream_t)0x1)
#define FAKE_STREAM_PER_THREAD     ((cudaStream_t)0x2)
#define FAKE_CUDA_VERSION          13000

/* Exported entry points (CUDA 13 signatures), from the lists in cuda-abi.h. */
KVT_CUDART_FUNCS(KVT_CUDA_PROTOTYPE)
KVT_CUDART_TEST_FUNCS(KVT_CUDA_PROTOTYPE)
KVT_CUDART_LAUNCH_FUNCS(KVT_CUDA_PROTOTYPE)

/* A held stream (fakecuda_stream_hold) has work that has not finished:
 * held_gen counts holds, done_gen the last hold released. */
struct CUstream_st {
        struct CUstream_st *next;
        int device;
        int ctx; /* the model's key of the context current at its creation */
        unsigned flags;
        uint64_t serial; /* unique for the process: events outlive streams */
        uint64_t held_gen, done_gen;
        uint64_t done_ns;         /* FAKECUDA_EVENT_DELAY_US: when its work completes */
        unsigned pending_hostfns; /* host functions not yet run */
};

/* An event completes once its stream has finished the hold it was recorded
 * behind and, with FAKECUDA_EVENT_DELAY_US, once its deferred time passed. */
struct CUevent_st {
        int ctx;                /* the context current at its creation */
        uint64_t stream_serial; /* 0: the null stream */
        uint64_t wait_gen;      /* 0: complete when recorded */
        uint64_t ready_ns;      /* 0: no delay */
        unsigned flags;
};

static pthread_mutex_t streams_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t streams_done = PTHREAD_COND_INITIALIZER;
static pthread_cond_t hostfn_done = PTHREAD_COND_INITIALIZER;
static uint64_t next_stream_serial = 1;
static struct CUstream_st *streams;
static _Thread_local cudaError_t last_error;

#define ERRORS(X)                                                                                           \
        X(cudaSuccess, "no error")                                                                          \
        X(cudaErrorInvalidValue, "invalid argument")                                                        \
        X(cudaErrorMemoryAllocation, "out of memory")                                                       \
        X(cudaErrorInitializationError, "initialization error")                                             \
        X(cudaErrorCudartUnloading, "driver shutting down")                                                 \
        X(cudaErrorInvalidDevicePointer, "invalid device pointer")                                          \
        X(cudaErrorInvalidDevice, "invalid device ordinal")                                                 \
        X(cudaErrorInvalidResourceHandle, "invalid resource handle")                                        \
        X(cudaErrorNotReady, "device not ready")                                                            \
        X(cudaErrorIllegalAddress, "an illegal memory access was encountered")                              \
        X(cudaErrorSymbolNotFound, "named symbol not found")                                                \
        X(cudaErrorNotSupported, "operation not supported")                                                 \
        X(cudaErrorUnknown, "unknown error")

enum { cudaErrorIllegalAddress = FAKE_ERROR_ILLEGAL_ADDRESS, cudaErrorSymbolNotFound = 500 };

static const struct {
        cudaError_t code;
        const char *name;
        const char *text;
} error_table[] = {
#define ERROR_ENTRY(code, text) {code, #code, text},
        ERRORS(ERROR_ENTRY)
#undef ERROR_ENTRY
};

/* Records a failure as the thread's last error; returns it. */
static cudaError_t fail(cudaError_t e) {
        if (e != cudaSuccess)
                last_error = e;
        return e;
}

/* Every runtime entry point: false when the call cannot proceed. */
static bool runtime_enter(void) {
        model_runtime_started();
        return model_enter() && !fakecuda_torn_down();
}

/* Why a call cannot enter: the runtime unloading (its exit-time teardown
 * ran: every later call says so, as the real one does), or the model
 * unusable (a fork child). */
static cudaError_t entry_error(void) {
        return fakecuda_torn_down() ? cudaErrorCudartUnloading : cudaErrorInitializationError;
}

static cudaError_t fail_errno(int r) {
        switch (r) {
        case 0:
                return cudaSuccess;
        case -ENOMEM:
                return fail(cudaErrorMemoryAllocation);
        case -ENODEV:
                return fail(cudaErrorInvalidDevice);
        case -EFAULT:
                return fail(cudaErrorIllegalAddress);
        default:
                return fail(cudaErrorInvalidValue);
        }
}

static bool device_valid(int dev) {
        return dev >= 0 && dev < model_device_count();
}

static bool stream_valid(cudaStream_t s) {
        bool found = false;

        if (!s || s == FAKE_STREAM_LEGACY || s == FAKE_STREAM_PER_THREAD)
                return true;
        pthread_mutex_lock(&streams_lock);
        for (struct CUstream_st *i = streams; i && !found; i = i->next)
                found = i == s;
        pthread_mutex_unlock(&streams_lock);
        return found;
}

static uint64_t mono_ns(void) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void sleep_until(uint64_t t) {
        uint64_t now = mono_ns();

        if (t > now) {
                struct timespec ts = { .tv_sec = (time_t)((t - now) / 1000000000u),
                                       .tv_nsec = (long)((t - now) % 1000000000u) };
                while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                        ;
        }
}

/* The created stream behind s, or NULL for the NULL, legacy and per-thread
 * streams (which never defer).  Caller holds streams_lock. */
static struct CUstream_st *stream_find_locked(cudaStream_t s) {
        for (struct CUstream_st *i = streams; i; i = i->next)
                if (i == s)
                        return i;
        return NULL;
}

/* Whether work may be queued on s from this thread: s exists and its
 * context is alive; a stream of a created context only while that context
 * is current.  (The real CUDA takes a stream of another device's primary
 * context for copies, so the fake does for all work; where a created
 * context's stream is used under another context it is stricter than the
 * real one may be, which rejects it at least where an event is recorded.)
 * *ret_ctx (may be NULL): the context whose work s carries, its own for a
 * created stream, the calling thread's for the NULL, legacy and per-thread
 * streams. */
static bool stream_usable(cudaStream_t s, int *ret_ctx) {
        int cur = model_ctx_current(), ctx = cur;

        if (s && s != FAKE_STREAM_LEGACY && s != FAKE_STREAM_PER_THREAD) {
                struct CUstream_st *st;

                pthread_mutex_lock(&streams_lock);
                st = stream_find_locked(s);
                if (st)
                        ctx = st->ctx;
                pthread_mutex_unlock(&streams_lock);
                if (!st)
                        return false;
        }
        if (ret_ctx)
                *ret_ctx = ctx;
        return model_ctx_alive(ctx) && (ctx == cur || (ctx < 0 && cur < 0));
}

/* With FAKECUDA_EVENT_DELAY_US: pushes s's completion one delay past now
 * (or past its queued work) and returns when that is; 0 otherwise. */
static uint64_t stream_defer(cudaStream_t s) {
        unsigned delay = model_event_delay_us();
        struct CUstream_st *st;
        uint64_t t = 0, now;

        if (!delay)
                return 0;
        now = mono_ns();
        pthread_mutex_lock(&streams_lock);
        st = stream_find_locked(s);
        if (st) {
                st->done_ns = (st->done_ns > now ? st->done_ns : now) + (uint64_t)delay * 1000u;
                t = st->done_ns;
        }
        pthread_mutex_unlock(&streams_lock);
        return t;
}

/* Maps a CUDA 13 location to a model location (device id or host). */
static int location_to_model(struct cudaMemLocation loc, int *ret) {
        switch (loc.type) {
        case cudaMemLocationTypeDevice:
                if (!device_valid(loc.id))
                        return -ENODEV;
                *ret = loc.id;
                return 0;
        case cudaMemLocationTypeHostNuma:
                if (loc.id < 0 || loc.id >= model_numa_nodes())
                        return -EINVAL;
                *ret = MODEL_LOC_HOST;
                return 0;
        case cudaMemLocationTypeHost:
        case cudaMemLocationTypeHostNumaCurrent:
                *ret = MODEL_LOC_HOST;
                return 0;
        default:
                return -EINVAL;
        }
}

/*
 * FAKECUDA_RUNTIME_VIA_DRIVER=1: cudaMalloc and cudaFree call the driver's
 * cuMemAlloc/cuMemFree, found as the real runtime finds them (dlsym of
 * cuGetProcAddress_v2 in libcuda.so.1, then cuGetProcAddress): a shim that
 * hooks both APIs then sees the runtime's own driver calls too.
 */
static CUresult (*via_alloc)(CUdeviceptr *, size_t);
static CUresult (*via_free)(CUdeviceptr);
static pthread_once_t via_once = PTHREAD_ONCE_INIT;

static void via_driver_setup(void) {
        CUresult (*gpa)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
        const char *v = getenv("FAKECUDA_RUNTIME_VIA_DRIVER");
        void *h;

        if (!v || strcmp(v, "1") != 0 || !(h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL)))
                return;
        *(void **)&gpa = dlsym(h, "cuGetProcAddress_v2");
        if (!gpa || gpa("cuMemAlloc", (void **)&via_alloc, FAKE_CUDA_VERSION, 0, NULL) != 0 ||
            gpa("cuMemFree", (void **)&via_free, FAKE_CUDA_VERSION, 0, NULL) != 0)
                via_alloc = NULL, via_free = NULL;
}

static bool via_driver(void) {
        pthread_once(&via_once, via_driver_setup);
        return via_alloc && via_free;
}

cudaError_t cudaMalloc(void **devPtr, size_t size) {
        if (!runtime_enter())
                return fail(entry_error());
        if (!devPtr)
                return fail(cudaErrorInvalidValue);
        if (via_driver()) {
                CUdeviceptr d = 0;
                CUresult r = via_alloc(&d, size);
                if (r != 0)
                        return fail(r == 2 ? cudaErrorMemoryAllocation : cudaErrorInvalidValue);
                *devPtr = (void *)(uintptr_t)d;
                return cudaSuccess;
        }
        if (model_fail_now(MODEL_FAIL_MALLOC))
                return fail(cudaErrorMemoryAllocation);
        return fail_errno(model_malloc(model_current_device(), size, devPtr));
}

cudaError_t cudaFree(void *devPtr) {
        unsigned delay_us;

        if (!runtime_enter())
                return fail(entry_error());
        if (!devPtr)
                return cudaSuccess;
        delay_us = model_free_delay_us();
        if (delay_us)
                usleep(delay_us);
        if (via_driver())
                return via_free((CUdeviceptr)(uintptr_t)devPtr) == 0 ? cudaSuccess : fail(cudaErrorInvalidValue);
        return fail_errno(model_free(devPtr));
}

cudaError_t cudaMallocAsync(void **devPtr, size_t size, cudaStream_t hStream) {
        if (!runtime_enter())
                return fail(entry_error());
        if (!stream_usable(hStream, NULL))
                return fail(cudaErrorInvalidResourceHandle);
        return cudaMalloc(devPtr, size);
}

cudaError_t cudaMallocFromPoolAsync(void **ptr, size_t size, cudaMemPool_t memPool, cudaStream_t stream) {
        if (!memPool)
                return fail(cudaErrorInvalidValue);
        return cudaMallocAsync(ptr, size, stream);
}

/* Work runs at call time, so the free is done when the stream gets here. */
cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t hStream) {
        if (!runtime_enter())
                return fail(entry_error());
        if (!stream_usable(hStream, NULL))
                return fail(cudaErrorInvalidResourceHandle);
        return fail_errno(model_free(devPtr));
}

/* As the real runtime does: the driver's cuGetProcAddress, found with dlsym. */
cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **funcPtr, unsigned int cudaVersion,
                                             unsigned long long flags,
                                             enum cudaDriverEntryPointQueryResult *driverStatus) {
        CUresult (*gpa)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
        CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        void *h;

        if (!runtime_enter())
                return fail(entry_error());
        if (!symbol || !funcPtr)
                return fail(cudaErrorInvalidValue);
        h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
        if (!h)
                return fail(cudaErrorInitializationError);
        *(void **)&gpa = dlsym(h, "cuGetProcAddress_v2");
        if (!gpa || gpa(symbol, funcPtr, (int)cudaVersion, flags, &st) != 0)
                *funcPtr = NULL;
        if (driverStatus)
                *driverStatus = (enum cudaDriverEntryPointQueryResult)st;
        return *funcPtr ? cudaSuccess : fail(cudaErrorSymbolNotFound);
}

cudaError_t cudaGetDriverEntryPoint(const char *symbol, void **funcPtr, unsigned long long flags,
                                    enum cudaDriverEntryPointQueryResult *driverStatus) {
        return cudaGetDriverEntryPointByVersion(symbol, funcPtr, FAKE_CUDA_VERSION, flags, driverStatus);
}

cudaError_t cudaMallocManaged(void **devPtr, size_t size, unsigned int flags) {
        if (!runtime_enter())
                return fail(entry_error());
        if (!devPtr || size == 0 || (flags != cudaMemAttachGlobal && flags != FAKE_MEM_ATTACH_HOST))
                return fail(cudaErrorInvalidValue);
        if (model_fail_now(MODEL_FAIL_MALLOC_MANAGED))
                return fail(cudaErrorMemoryAllocation);
        return fail_errno(model_malloc_managed(model_current_device(), size, devPtr));
}

cudaError_t cudaMemAdvise(const void *devPtr, size_t count, enum cudaMemoryAdvise advice,
                          struct cudaMemLocation location) {
        int loc = MODEL_LOC_NONE, r;

        if (!runtime_enter())
                return fail(entry_error());
        if (model_fail_now(MODEL_FAIL_ADVISE))
                return fail(cudaErrorInvalidValue);
        /* read-mostly and unset-preferred ignore the location */
        if (advice != cudaMemAdviseSetReadMostly && advice != cudaMemAdviseUnsetReadMostly &&
            advice != cudaMemAdviseUnsetPreferredLocation) {
                r = location_to_model(location, &loc);
                if (r < 0)
                        return fail_errno(r);
        }
        if (advice == cudaMemAdviseSetPreferredLocation && location.type == cudaMemLocationTypeHostNuma)
                loc = MODEL_LOC_HOST_NUMA;
        r = model_advise(model_current_device(), devPtr, count, (int)advice, loc);
        if (r == 0 && location.type == cudaMemLocationTypeHostNuma)
                model_count_numa_location(model_current_device());
        /* the driver's time for the call, outside the model's lock */
        if (model_advise_delay_us() > 0) {
                model_call_begin();
                usleep(model_advise_delay_us());
                model_call_end();
                if (r == 0 && fakecuda_torn_down())
                        return fail(cudaErrorUnknown); /* overtaken by the teardown (as below) */
        }
        return fail_errno(r);
}

cudaError_t cudaMemPrefetchAsync(const void *devPtr, size_t count, struct cudaMemLocation location,
                                 unsigned int flags, cudaStream_t stream) {
        size_t moved = 0;
        unsigned delay_us;
        int loc, r;

        if (!runtime_enter())
                return fail(entry_error());
        if (model_fail_now(MODEL_FAIL_PREFETCH))
                return fail(cudaErrorInvalidValue);
        if (flags != 0 || count == 0)
                return fail(cudaErrorInvalidValue);
        if (!stream_usable(stream, NULL))
                return fail(cudaErrorInvalidResourceHandle);
        r = location_to_model(location, &loc);
        if (r < 0)
                return fail_errno(r);
        r = model_prefetch(model_current_device(), devPtr, count, loc,
                           location.type == cudaMemLocationTypeHostNuma ? location.id : -1, &moved);
        if (r == 0 && location.type == cudaMemLocationTypeHostNuma)
                model_count_numa_location(model_current_device());
        /* the link's time, spent outside the model's lock, holding back
         * the kernels of this context (model.h) */
        delay_us = model_prefetch_delay_us();
        if (delay_us > 0 && moved > 0) {
                uint64_t ns = (uint64_t)delay_us * 1000 * moved;
                struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000),
                                      .tv_nsec = (long)(ns % 1000000000)};
                int ctx = model_ctx_current();

                model_ctx_lock(ctx);
                if (loc == MODEL_LOC_HOST)
                        model_host_prefetch_busy(model_current_device(), 1);
                model_call_begin();
                while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                        ;
                model_call_end();
                if (loc == MODEL_LOC_HOST)
                        model_host_prefetch_busy(model_current_device(), -1);
                model_ctx_unlock(ctx);
                /* The runtime's exit-time teardown overtook the call: on the
                 * H200 a move in flight then fails with cudaErrorUnknown (999),
                 * not the unloading error of a call made after it. */
                if (r == 0 && fakecuda_torn_down())
                        return fail(cudaErrorUnknown);
        }
        return fail_errno(r);
}

static cudaError_t stream_create(cudaStream_t *pStream, unsigned int flags) {
        struct CUstream_st *s;

        if (!runtime_enter())
                return fail(entry_error());
        if (!pStream || (flags & ~(unsigned)cudaStreamNonBlocking) != 0)
                return fail(cudaErrorInvalidValue);
        s = calloc(1, sizeof(*s));
        if (!s)
                return fail(cudaErrorMemoryAllocation);
        s->device = model_current_device();
        s->ctx = model_ctx_current();
        s->flags = flags;
        pthread_mutex_lock(&streams_lock);
        s->serial = next_stream_serial++;
        s->next = streams;
        streams = s;
        pthread_mutex_unlock(&streams_lock);
        *pStream = s;
        return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *pStream) {
        return stream_create(pStream, 0);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags) {
        return stream_create(pStream, flags);
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
        struct CUstream_st *found = NULL;

        if (!runtime_enter())
                return fail(entry_error());
        pthread_mutex_lock(&streams_lock);
        for (struct CUstream_st **i = &streams; *i; i = &(*i)->next)
                if (*i == stream) {
                        found = *i;
                        *i = found->next;
                        break;
                }
        pthread_cond_broadcast(&streams_done); /* its events complete */
        pthread_mutex_unlock(&streams_lock);
        if (!found)
                return fail(cudaErrorInvalidResourceHandle);
        free(found);
        return cudaSuccess;
}

static bool is_user_stream(cudaStream_t s) {
        return s && s != FAKE_STREAM_LEGACY && s != FAKE_STREAM_PER_THREAD;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
        struct CUstream_st *st;
        uint64_t until = 0;

        if (!runtime_enter())
                return fail(entry_error());
        if (!stream_valid(stream))
                return fail(cudaErrorInvalidResourceHandle);
        if (is_user_stream(stream)) {
                pthread_mutex_lock(&streams_lock);
                while (stream->done_gen < stream->held_gen)
                        pthread_cond_wait(&streams_done, &streams_lock);
                pthread_mutex_unlock(&streams_lock);
        }
        pthread_mutex_lock(&streams_lock);
        st = stream_find_locked(stream);
        if (st)
                until = st->done_ns;
        pthread_mutex_unlock(&streams_lock);
        sleep_until(until);
        /* and the host functions launched there have run */
        pthread_mutex_lock(&streams_lock);
        while ((st = stream_find_locked(stream)) && st->pending_hostfns > 0)
                pthread_cond_wait(&hostfn_done, &streams_lock);
        pthread_mutex_unlock(&streams_lock);
        return cudaSuccess;
}

int fakecuda_stream_hold(cudaStream_t stream, int hold) {
        if (!runtime_enter())
                return fail(entry_error());
        if (!is_user_stream(stream) || !stream_valid(stream))
                return fail(cudaErrorInvalidResourceHandle);
        pthread_mutex_lock(&streams_lock);
        if (hold && stream->done_gen == stream->held_gen)
                stream->held_gen++;
        else if (!hold)
                stream->done_gen = stream->held_gen;
        pthread_cond_broadcast(&streams_done);
        pthread_mutex_unlock(&streams_lock);
        return cudaSuccess;
}

static unsigned long events_live;

unsigned long fakecuda_events_live(void) {
        return __atomic_load_n(&events_live, __ATOMIC_RELAXED);
}

static void event_release(cudaEvent_t e) {
        free(e);
        __atomic_fetch_sub(&events_live, 1, __ATOMIC_RELAXED);
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags) {
        cudaEvent_t e;

        if (!runtime_enter())
                return fail(entry_error());
        if (!event)
                return fail(cudaErrorInvalidValue);
        e = calloc(1, sizeof(*e));
        if (!e)
                return fail(cudaErrorMemoryAllocation);
        e->flags = flags;
        e->ctx = model_ctx_current();
        __atomic_fetch_add(&events_live, 1, __ATOMIC_RELAXED);
        *event = e;
        return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
        int ctx;

        if (!runtime_enter())
                return fail(entry_error());
        if (!event)
                return fail(cudaErrorInvalidResourceHandle);
        /* "event and stream must be on the same context" */
        if (!stream_usable(stream, &ctx) || event->ctx != ctx)
                return fail(cudaErrorInvalidResourceHandle);
        event->ready_ns = stream_defer(stream);
        pthread_mutex_lock(&streams_lock);
        event->stream_serial = is_user_stream(stream) ? stream->serial : 0;
        event->wait_gen = event->stream_serial && stream->done_gen < stream->held_gen ? stream->held_gen : 0;
        pthread_mutex_unlock(&streams_lock);
        return cudaSuccess;
}

/* Called with streams_lock held.  A destroyed stream's work is done. */
static bool event_hold_done(cudaEvent_t e) {
        if (e->wait_gen == 0)
                return true;
        for (struct CUstream_st *i = streams; i; i = i->next)
                if (i->serial == e->stream_serial)
                        return i->done_gen >= e->wait_gen;
        return true;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
        bool done;

        if (!runtime_enter())
                return fail(entry_error());
        if (!event)
                return fail(cudaErrorInvalidResourceHandle);
        pthread_mutex_lock(&streams_lock);
        done = event_hold_done(event) && mono_ns() >= event->ready_ns;
        pthread_mutex_unlock(&streams_lock);
        return done ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
        if (!runtime_enter())
                return fail(entry_error());
        if (!event)
                return fail(cudaErrorInvalidResourceHandle);
        pthread_mutex_lock(&streams_lock);
        while (!event_hold_done(event))
                pthread_cond_wait(&streams_done, &streams_lock);
        pthread_mutex_unlock(&streams_lock);
        sleep_until(event->ready_ns);
        return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
        if (!runtime_enter()) {
                /* The real runtime's exit-time teardown releases every
                 * event with its context: one destroyed after it is gone
                 * already (a pipeline finishing its runs at exit). */
                if (event && fakecuda_torn_down())
                        event_release(event);
                return fail(entry_error());
        }
        if (!event)
                return fail(cudaErrorInvalidResourceHandle);
        event_release(event);
        return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
        if (!runtime_enter())
                return fail(entry_error());
        return stream_valid(stream) ? cudaSuccess : fail(cudaErrorInvalidResourceHandle);
}

cudaError_t cudaDeviceSynchronize(void) {
        if (!runtime_enter())
                return fail(entry_error());
        return cudaSuccess;
}

cudaError_t cudaGetDevice(int *device) {
        if (!runtime_enter())
                return fail(entry_error());
        if (!device)
                return fail(cudaErrorInvalidValue);
        *device = model_current_device();
        return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
        if (!runtime_enter())
                return fail(entry_error());
        if (!device_valid(device))
                return fail(cudaErrorInvalidDevice);
        model_set_current_device(device);
        return cudaSuccess;
}

cudaError_t cudaGetDeviceCount(int *count) {
        if (!runtime_enter())
                return fail(entry_error());
        if (!count)
                return fail(cudaErrorInvalidValue);
        *count = model_device_count();
        return cudaSuccess;
}

/* As measured on the H200 (DESIGN.md): managed memory and concurrent
 * managed access, no pageable memory access (no HMM).  The closest host
 * node is FAKECUDA_HOST_NUMA_ID (default the last node, so a test can tell
 * it from node 0).  Others read 0. */
cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device) {
        if (!runtime_enter())
                return fail(entry_error());
        if (!value)
                return fail(cudaErrorInvalidValue);
        if (!device_valid(device))
                return fail(cudaErrorInvalidDevice);
        if (attr == cudaDevAttrHostNumaId)
                *value = model_host_numa_id(device);
        else
                *value = attr == cudaDevAttrManagedMemory || attr == cudaDevAttrConcurrentManagedAccess;
        return cudaSuccess;
}

struct hostfn {
        cudaStream_t stream;
        cudaHostFn_t fn;
        void *userdata;
        uint64_t at_ns;
};

static void *hostfn_thread(void *arg) {
        struct hostfn *h = arg;
        struct CUstream_st *st;

        sleep_until(h->at_ns);
        h->fn(h->userdata);
        pthread_mutex_lock(&streams_lock);
        st = stream_find_locked(h->stream);
        if (st)
                st->pending_hostfns--;
        pthread_cond_broadcast(&hostfn_done);
        pthread_mutex_unlock(&streams_lock);
        free(h);
        return NULL;
}

/* The work before fn is done already: fn runs now, on the caller's thread;
 * with FAKECUDA_EVENT_DELAY_US it runs later, on a thread of its own, as the
 * real runtime's does.  Callers must not rely on either. */
cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void *userData) {
        struct CUstream_st *st;
        struct hostfn *h;
        pthread_attr_t attr;
        pthread_t t;
        uint64_t at;
        int r;

        if (!runtime_enter())
                return fail(entry_error());
        if (!fn)
                return fail(cudaErrorInvalidValue);
        if (!stream_usable(stream, NULL))
                return fail(cudaErrorInvalidResourceHandle);
        at = stream_defer(stream);
        if (!at) {
                fn(userData);
                return cudaSuccess;
        }
        h = malloc(sizeof(*h));
        if (!h)
                return fail(cudaErrorMemoryAllocation);
        *h = (struct hostfn){ .stream = stream, .fn = fn, .userdata = userData, .at_ns = at };
        pthread_mutex_lock(&streams_lock);
        st = stream_find_locked(stream);
        if (st)
                st->pending_hostfns++;
        pthread_mutex_unlock(&streams_lock);
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        r = pthread_create(&t, &attr, hostfn_thread, h);
        pthread_attr_destroy(&attr);
        if (r != 0) {
                pthread_mutex_lock(&streams_lock);
                if ((st = stream_find_locked(stream)))
                        st->pending_hostfns--;
                pthread_mutex_unlock(&streams_lock);
                free(h);
                return fail(cudaErrorMemoryAllocation);
        }
        return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t *free, size_t *total) {
        size_t f, t;

        if (!runtime_enter())
                return fail(entry_error());
        if (!free || !total)
                return fail(cudaErrorInvalidValue);
        (void)model_mem_info(model_current_device(), &f, &t);
        *free = f;
        *total = t;
        return cudaSuccess;
}

static cudaError_t memcpy_any(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind) {
        if (!runtime_enter())
                return fail(entry_error());
        if ((int)kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault)
                return fail(cudaErrorInvalidValue);
        if (count == 0)
                return cudaSuccess;
        if (!dst || !src)
                return fail(cudaErrorInvalidValue);
        return fail_errno(model_copy(dst, src, count));
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind) {
        return memcpy_any(dst, src, count, kind);
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                            cudaStream_t stream) {
        if (!stream_usable(stream, NULL))
                return fail(cudaErrorInvalidResourceHandle);
        return memcpy_any(dst, src, count, kind);
}

static cudaError_t memset_any(void *devPtr, int value, size_t count) {
        if (!runtime_enter())
                return fail(entry_error());
        if (count == 0)
                return cudaSuccess;
        return fail_errno(model_set(devPtr, value, count));
}

cudaError_t cudaMemset(void *devPtr, int value, size_t count) {
        return memset_any(devPtr, value, count);
}

cudaError_t cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t stream) {
        if (!stream_usable(stream, NULL))
                return fail(cudaErrorInvalidResourceHandle);
        return memset_any(devPtr, value, count);
}

const char *cudaGetErrorString(cudaError_t error) {
        for (size_t i = 0; i < sizeof(error_table) / sizeof(error_table[0]); i++)
                if (error_table[i].code == error)
                        return error_table[i].text;
        return "unrecognized error code";
}

const char *cudaGetErrorName(cudaError_t error) {
        for (size_t i = 0; i < sizeof(error_table) / sizeof(error_table[0]); i++)
                if (error_table[i].code == error)
                        return error_table[i].name;
        return "unrecognized error code";
}

cudaError_t cudaGetLastError(void) {
        cudaError_t e = last_error;

        last_error = cudaSuccess;
        return e;
}

cudaError_t cudaPeekAtLastError(void) {
        return last_error;
}

cudaError_t cudaDriverGetVersion(int *driverVersion) {
        if (!driverVersion)
                return fail(cudaErrorInvalidValue);
        *driverVersion = FAKE_CUDA_VERSION;
        return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int *runtimeVersion) {
        if (!runtimeVersion)
                return fail(cudaErrorInvalidValue);
        *runtimeVersion = FAKE_CUDA_VERSION;
        return cudaSuccess;
}

/* ---------------------------------------------------------------- fakecuda.h */

/* A kernel waits, at launch, for a prefetch of its context (model.h). */
static int kernel(void *ptr, size_t len, enum model_access access, uint64_t seed, uint64_t *ret_bad) {
        int ctx;

        model_init();
        ctx = model_ctx_current();
        model_ctx_lock(ctx);
        model_ctx_unlock(ctx);
        return fail_errno(model_kernel(model_current_device(), ptr, len, access, seed, ret_bad));
}

int fakecuda_kernel_fill(void *ptr, size_t len, uint64_t seed) {
        return kernel(ptr, len, MODEL_ACCESS_FILL, seed, NULL);
}

int fakecuda_kernel_check(const void *ptr, size_t len, uint64_t seed, uint64_t *ret_bad_words) {
        if (!ret_bad_words)
                return fail(cudaErrorInvalidValue);
        return kernel((void *)(uintptr_t)ptr, len, MODEL_ACCESS_CHECK, seed, ret_bad_words);
}

void fakecuda_um_record(int kind, uintptr_t addr, uint64_t value, int dev) {
        model_init();
        model_um_record(kind, addr, value, dev);
}

int fakecuda_kernel_read(const void *ptr, size_t len) {
        return kernel((void *)(uintptr_t)ptr, len, MODEL_ACCESS_READ, 0, NULL);
}

void fakecuda_read_kernel(const void *ptr, size_t len) {
        fakecuda_kernel_read(ptr, len);
}

/* The parameters of the known kernels: (const void *ptr, size_t len). */
int fakecuda_param_info(const void *func, size_t i, size_t *ret_offset, size_t *ret_size) {
        if (func != (const void *)fakecuda_read_kernel || i >= 2 || !ret_offset || !ret_size)
                return -EINVAL;
        *ret_offset = i * 8;
        *ret_size = 8;
        return 0;
}

int fakecuda_launch(const void *func, void **args) {
        const void *ptr;
        size_t len;

        if (func != (const void *)fakecuda_read_kernel)
                return fail(cudaErrorInvalidDeviceFunction);
        if (!args || !args[0] || !args[1])
                return fail(cudaErrorInvalidValue);
        memcpy(&ptr, args[0], sizeof(ptr));
        memcpy(&len, args[1], sizeof(len));
        return fakecuda_kernel_read(ptr, len);
}

cudaError_t cudaLaunchKernel(const void *func, dim3 gridDim, dim3 blockDim, void **args, size_t sharedMem,
                             cudaStream_t stream) {
        if (!runtime_enter())
                return fail(entry_error());
        if (!gridDim.x || !gridDim.y || !gridDim.z || !blockDim.x || !blockDim.y || !blockDim.z)
                return fail(cudaErrorInvalidValue);
        return fakecuda_launch(func, args);
}

/* CUDA 13's nvcc stubs launch through this internal entry point with a
 * kernel handle (here the kernel's address, as for cudaLaunchKernel).  As in
 * the real runtime, it does not go through the exported cudaLaunchKernel
 * (on the H200 a hook on that one saw none of these launches). */
cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void **args, size_t sharedMem,
                               cudaStream_t stream);
cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void **args, size_t sharedMem,
                               cudaStream_t stream) {
        if (!runtime_enter())
                return fail(entry_error());
        if (!gridDim.x || !gridDim.y || !gridDim.z || !blockDim.x || !blockDim.y || !blockDim.z)
                return fail(cudaErrorInvalidValue);
        return fakecuda_launch((const void *)kernel, args);
}

cudaError_t cudaFuncGetParamInfo(const void *func, size_t paramIndex, size_t *paramOffset, size_t *paramSize) {
        return fakecuda_param_info(func, paramIndex, paramOffset, paramSize) == 0 ? cudaSuccess
                                                                                  : fail(cudaErrorInvalidValue);
}

int fakecuda_get_stats(int dev, struct fakecuda_stats *ret) {
        model_init();
        if (!device_valid(dev))
                return fail(cudaErrorInvalidDevice);
        if (!ret)
                return fail(cudaErrorInvalidValue);
        return fail_errno(model_get_stats(dev, ret));
}

int fakecuda_reset_stats(int dev) {
        model_init();
        if (!device_valid(dev))
                return fail(cudaErrorInvalidDevice);
        return fail_errno(model_reset_stats(dev));
}

int fakecuda_resident_bytes(const void *ptr, size_t len, int dev, uint64_t *ret_bytes) {
        model_init();
        if (!device_valid(dev))
                return fail(cudaErrorInvalidDevice);
        if (!ret_bytes)
                return fail(cudaErrorInvalidValue);
        return fail_errno(model_resident_bytes(ptr, len, dev, ret_bytes));
}

int fakecuda_page_info(const void *ptr, struct fakecuda_page_info *ret) {
        model_init();
        if (!ret)
                return fail(cudaErrorInvalidValue);
        return fail_errno(model_page_info(ptr, ret));
}

/* Pinning host memory: the fake's host memory is all alike; counted, so
 * that tests can see the shim pinned its staging buffer. */
static _Atomic long host_registered;

cudaError_t cudaHostRegister(void *ptr, size_t size, unsigned int flags) {
        if (!runtime_enter())
                return fail(entry_error());
        if (!ptr || size == 0)
                return fail(cudaErrorInvalidValue);
        host_registered++;
        return cudaSuccess;
}

cudaError_t cudaHostUnregister(void *ptr) {
        if (!runtime_enter())
                return fail(entry_error());
        if (!ptr || host_registered <= 0)
                return fail(cudaErrorInvalidValue);
        host_registered--;
        return cudaSuccess;
}

long fakecuda_host_registered(void) {
        return host_registered;
}

/* Prefetches in one call: operation i goes to prefetchLocs[k] for the last
 * k whose prefetchLocIdxs[k] <= i (the first index must be 0, and they
 * rise), in stream order as a whole.  CUDA rejects the legacy stream
 * (DESIGN.md), and so does the fake.  Each range moves as
 * cudaMemPrefetchAsync moves it, the link's delay included. */
cudaError_t cudaMemPrefetchBatchAsync(void **dptrs, size_t *sizes, size_t count, struct cudaMemLocation *prefetchLocs,
                                      size_t *prefetchLocIdxs, size_t numPrefetchLocs, unsigned long long flags,
                                      cudaStream_t stream) {
        size_t k = 0;

        if (!runtime_enter())
                return fail(entry_error());
        if (!dptrs || !sizes || count == 0 || !prefetchLocs || !prefetchLocIdxs || numPrefetchLocs == 0 ||
            numPrefetchLocs > count || prefetchLocIdxs[0] != 0 || flags != 0 || stream == NULL)
                return fail(cudaErrorInvalidValue);
        for (size_t j = 1; j < numPrefetchLocs; j++)
                if (prefetchLocIdxs[j] <= prefetchLocIdxs[j - 1] || prefetchLocIdxs[j] >= count)
                        return fail(cudaErrorInvalidValue);
        for (size_t i = 0; i < count; i++) {
                cudaError_t e;

                while (k + 1 < numPrefetchLocs && prefetchLocIdxs[k + 1] <= i)
                        k++;
                e = cudaMemPrefetchAsync(dptrs[i], sizes[i], prefetchLocs[k], 0, stream);
                if (e != cudaSuccess)
                        return e;
        }
        return cudaSuccess;
}

/* Discarding managed memory: its pages leave VRAM (the model's residency:
 * host, as UVM keeps no copy) and their contents become indeterminate,
 * here 0xdb in every byte, so that a test sees what was not written back.
 * CUDA rejects the legacy stream (DESIGN.md), and so does the fake. */
cudaError_t cudaMemDiscardBatchAsync(void **dptrs, size_t *sizes, size_t count, unsigned long long flags,
                                     cudaStream_t stream) {
        struct cudaMemLocation host = {.type = cudaMemLocationTypeHost};

        if (!runtime_enter())
                return fail(entry_error());
        if (!dptrs || !sizes || count == 0 || flags != 0 || stream == NULL)
                return fail(cudaErrorInvalidValue);
        if (!stream_usable(stream, NULL))
                return fail(cudaErrorInvalidResourceHandle);
        for (size_t i = 0; i < count; i++) {
                size_t moved = 0;
                int loc, r = location_to_model(host, &loc);

                if (r == 0)
                        r = model_prefetch(model_current_device(), dptrs[i], sizes[i], loc, -1, &moved);
                if (r == 0)
                        r = model_set(dptrs[i], 0xdb, sizes[i]);
                if (r < 0)
                        return fail_errno(r);
        }
        return cudaSuccess;
}
