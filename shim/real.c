/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "real.h"
#include "sym.h"
#include "util.h"

#define KVT_REAL_NAME(ret, name, args) #name,
static const char *const cudart_names[] = { KVT_CUDART_FUNCS(KVT_REAL_NAME) };
static const char *const cuda_names[] = { KVT_CUDA_HOOKS(KVT_REAL_NAME) };
static const char *const cuda_call_names[] = { KVT_CUDA_CALLS(KVT_REAL_NAME) };
#undef KVT_REAL_NAME

/* The first entries of struct kvt_cudart are the hooks: optional, except
 * the three every CUDA runtime has. */
#define KVT_ONE(ret, name, args) +1
enum { N_CUDART_HOOKS = 0 KVT_CUDART_HOOKS(KVT_ONE) };
#undef KVT_ONE

/* Libraries to look into when RTLD_NEXT finds nothing: an engine that loads
 * CUDA with dlopen(RTLD_LOCAL) (PyTorch's extensions) keeps it out of the
 * global scope that RTLD_NEXT searches. */
static const char *const cudart_sonames[] = { "libcudart.so.13", "libcudart.so.12", "libcudart.so" };

static struct kvt_cudart cudart;
_Static_assert(sizeof(struct kvt_cudart) == ELEMENTSOF(cudart_names) * sizeof(void *),
               "one pointer per entry point");
static struct kvt_cuda cuda;
_Static_assert(sizeof(struct kvt_cuda) == ELEMENTSOF(cuda_names) * sizeof(void *),
               "one pointer per entry point");
static struct kvt_cuda_calls cuda_calls;
_Static_assert(sizeof(struct kvt_cuda_calls) == ELEMENTSOF(cuda_call_names) * sizeof(void *),
               "one pointer per entry point");
static _Atomic(const struct kvt_cudart *) cudart_ready;
static _Atomic(const struct kvt_cuda_calls *) cuda_calls_ready;
static _Atomic(const struct kvt_cuda *) cuda_ready;
static pthread_mutex_t real_lock = PTHREAD_MUTEX_INITIALIZER;

static bool cudart_required(size_t i) {
        const char *n = cudart_names[i];

        return i >= N_CUDART_HOOKS || strcmp(n, "cudaMalloc") == 0 || strcmp(n, "cudaFree") == 0 ||
               strcmp(n, "cudaMemGetInfo") == 0;
}

static int fill_cudart(void *handle) {
        void **slots = (void **)&cudart;

        for (size_t i = 0; i < ELEMENTSOF(cudart_names); i++) {
                slots[i] = sym_lookup(handle, cudart_names[i]);
                if (!slots[i] && cudart_required(i))
                        return -ENOENT;
        }
        return 0;
}

static bool load_failed; /* under real_lock: loading was tried and found nothing */

static int resolve_cudart(bool load) {
        if (fill_cudart(RTLD_NEXT) == 0)
                return 0;
        for (size_t i = 0; i < ELEMENTSOF(cudart_sonames); i++) {
                void *h = dlopen(cudart_sonames[i], RTLD_LAZY | RTLD_NOLOAD);
                int r;

                if (!h)
                        continue;
                r = fill_cudart(h);
                dlclose(h); /* drops only the reference NOLOAD took */
                if (r == 0)
                        return 0;
        }
        if (!load || load_failed)
                return -ENOENT;
        /* KVTIER_CUDART names one; then the usual sonames, then the toolkit's
         * (a static-cudart program's directories need not hold any).  Kept
         * open for the life of the process: the table points into it. */
        {
                const char *paths[] = { getenv("KVTIER_CUDART"), "libcudart.so.13", "libcudart.so.12",
                                        "/usr/local/cuda/lib64/libcudart.so.13" };

                for (size_t i = 0; i < ELEMENTSOF(paths); i++) {
                        void *h = paths[i] ? dlopen(paths[i], RTLD_LAZY | RTLD_LOCAL) : NULL;

                        if (!h)
                                continue;
                        if (fill_cudart(h) == 0) {
                                log_info("Loaded %s for memory captured through the driver API.", paths[i]);
                                return 0;
                        }
                        dlclose(h);
                }
        }
        load_failed = true;
        log_warning("No libcudart.so.13 or .12 to manage memory captured through the driver API (set KVTIER_CUDART), "
                    "leaving it plain.");
        return -ENOENT;
}

static const struct kvt_cudart *get_cudart(bool load) {
        const struct kvt_cudart *t = atomic_load_explicit(&cudart_ready, memory_order_acquire);

        if (t)
                return t;
        pthread_mutex_lock(&real_lock);
        t = atomic_load_explicit(&cudart_ready, memory_order_relaxed);
        if (!t && resolve_cudart(load) == 0) {
                t = &cudart;
                atomic_store_explicit(&cudart_ready, t, memory_order_release);
        }
        pthread_mutex_unlock(&real_lock);
        if (!t)
                log_debug("CUDA runtime not resolvable yet.");
        return t;
}

const struct kvt_cudart *real_cudart(void) {
        return get_cudart(false);
}

const struct kvt_cudart *real_cudart_load(void) {
        return get_cudart(true);
}

static int fill_cuda(void *handle) {
        void **slots = (void **)&cuda;
        size_t found = 0;

        for (size_t i = 0; i < ELEMENTSOF(cuda_names); i++)
                if ((slots[i] = sym_lookup(handle, cuda_names[i])))
                        found++;
        return found > 0 ? 0 : -ENOENT;
}

const struct kvt_cuda *real_cuda(void) {
        const struct kvt_cuda *t = atomic_load_explicit(&cuda_ready, memory_order_acquire);

        if (t)
                return t;
        pthread_mutex_lock(&real_lock);
        t = atomic_load_explicit(&cuda_ready, memory_order_relaxed);
        if (!t) {
                int r = fill_cuda(RTLD_NEXT);
                if (r < 0) {
                        void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
                        if (h) {
                                r = fill_cuda(h);
                                dlclose(h); /* drops only the reference NOLOAD took */
                        }
                }
                if (r == 0) {
                        t = &cuda;
                        atomic_store_explicit(&cuda_ready, t, memory_order_release);
                }
        }
        pthread_mutex_unlock(&real_lock);
        return t;
}

/* All or nothing: a driver older than CUDA 12.5 lacks cuCtxCreate_v4. */
static int fill_cuda_calls(void *handle) {
        void **slots = (void **)&cuda_calls;

        for (size_t i = 0; i < ELEMENTSOF(cuda_call_names); i++)
                if (!(slots[i] = sym_lookup(handle, cuda_call_names[i])))
                        return -ENOENT;
        return 0;
}

const struct kvt_cuda_calls *real_cuda_calls(void) {
        const struct kvt_cuda_calls *t = atomic_load_explicit(&cuda_calls_ready, memory_order_acquire);
        void *h;

        if (t)
                return t;
        pthread_mutex_lock(&real_lock);
        t = atomic_load_explicit(&cuda_calls_ready, memory_order_relaxed);
        if (!t && (h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD))) {
                if (fill_cuda_calls(h) == 0) {
                        t = &cuda_calls;
                        atomic_store_explicit(&cuda_calls_ready, t, memory_order_release);
                }
                dlclose(h); /* drops only the reference NOLOAD took: the runtime holds it loaded */
        }
        pthread_mutex_unlock(&real_lock);
        return t;
}
