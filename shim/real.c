/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

#include "log.h"
#include "real.h"
#include "util.h"

static const char *const cudart_names[] = {
#define KVT_REAL_NAME(ret, name, args) #name,
        KVT_CUDART_FUNCS(KVT_REAL_NAME)
#undef KVT_REAL_NAME
};

/* Libraries to look into when RTLD_NEXT finds nothing: an engine that loads
 * CUDA with dlopen(RTLD_LOCAL) (PyTorch's extensions) keeps it out of the
 * global scope that RTLD_NEXT searches. */
static const char *const cudart_sonames[] = { "libcudart.so.13", "libcudart.so.12", "libcudart.so" };

static struct kvt_cudart cudart;
_Static_assert(sizeof(struct kvt_cudart) == ELEMENTSOF(cudart_names) * sizeof(void *),
               "one pointer per entry point");
static _Atomic(const struct kvt_cudart *) cudart_ready;
static pthread_mutex_t cudart_lock = PTHREAD_MUTEX_INITIALIZER;

static int fill_table(void *handle) {
        void **slots = (void **)&cudart;

        for (size_t i = 0; i < ELEMENTSOF(cudart_names); i++) {
                slots[i] = dlsym(handle, cudart_names[i]);
                if (!slots[i])
                        return -ENOENT;
        }
        return 0;
}

static int resolve(void) {
        if (fill_table(RTLD_NEXT) == 0)
                return 0;
        for (size_t i = 0; i < ELEMENTSOF(cudart_sonames); i++) {
                void *h = dlopen(cudart_sonames[i], RTLD_LAZY | RTLD_NOLOAD);
                int r;

                if (!h)
                        continue;
                r = fill_table(h);
                dlclose(h); /* drops only the reference NOLOAD took */
                if (r == 0)
                        return 0;
        }
        return -ENOENT;
}

const struct kvt_cudart *real_cudart(void) {
        const struct kvt_cudart *t = atomic_load_explicit(&cudart_ready, memory_order_acquire);

        if (t)
                return t;
        pthread_mutex_lock(&cudart_lock);
        t = atomic_load_explicit(&cudart_ready, memory_order_relaxed);
        if (!t && resolve() == 0) {
                t = &cudart;
                atomic_store_explicit(&cudart_ready, t, memory_order_release);
        }
        pthread_mutex_unlock(&cudart_lock);
        if (!t)
                log_debug("CUDA runtime not resolvable yet.");
        return t;
}
