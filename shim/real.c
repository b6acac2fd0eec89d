/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>

#include "log.h"
#include "real.h"
#include "sym.h"
#include "util.h"

#define KVT_REAL_NAME(ret, name, args) #name,
static const char *const cudart_names[] = { KVT_CUDART_FUNCS(KVT_REAL_NAME) };
static const char *const cuda_names[] = { KVT_CUDA_FUNCS(KVT_REAL_NAME) };
#undef KVT_REAL_NAME

/* No name in two lists: each is one enumerator here. */
#define KVT_REAL_ONCE(ret, name, args) kvt_listed_##name,
enum { KVT_CUDART_FUNCS(KVT_REAL_ONCE) KVT_CUDART_TEST_FUNCS(KVT_REAL_ONCE) KVT_CUDA_FUNCS(KVT_REAL_ONCE) };
#undef KVT_REAL_ONCE

#define KVT_REAL_ONE(ret, name, args) +1
static struct kvt_cudart cudart;
_Static_assert(sizeof(cudart) == ELEMENTSOF(cudart_names) * sizeof(void *), "one pointer per name");
static struct kvt_cuda cuda;
_Static_assert(sizeof(cuda) == ELEMENTSOF(cuda_names) * sizeof(void *), "one pointer per name");
_Static_assert(offsetof(struct kvt_cuda, calls) ==
                       (0 KVT_CUDA_HOOKS(KVT_REAL_ONE) KVT_CUDA_LAUNCH_CALLS(KVT_REAL_ONE)) * sizeof(void *),
               "the evictors' calls last, as in KVT_CUDA_FUNCS");
#undef KVT_REAL_ONE

/* A table's slot of entry point name. */
#define SLOT(table, name) (offsetof(__typeof__(table), name) / sizeof(void *))

/* A runtime is taken with every entry point of KVT_CUDART_CALLS and the
 * hooks every CUDA runtime has; the others are optional. */
static const bool cudart_required[ELEMENTSOF(cudart_names)] = {
#define KVT_REAL_REQUIRED(ret, name, args) [SLOT(cudart, name)] = true,
        KVT_CUDART_CALLS(KVT_REAL_REQUIRED)
#undef KVT_REAL_REQUIRED
        [SLOT(cudart, cudaMalloc)] = true,
        [SLOT(cudart, cudaFree)] = true,
        [SLOT(cudart, cudaMemGetInfo)] = true,
};

/* One CUDA library: the names of its table's slots, and where to find it. */
struct real_lib {
        const char *const *names;
        const bool *required;        /* per slot, or NULL: a library with any of them is taken */
        void **slots;                /* the table */
        size_t n;
        const char *const *sonames;  /* where a library RTLD_NEXT cannot see may be; NULL-terminated */
        _Atomic(const void *) ready; /* the table, once filled */
};

/* Sonames to look into when RTLD_NEXT finds nothing: an engine that loads
 * CUDA with dlopen(RTLD_LOCAL) (PyTorch's extensions; the runtime itself
 * loads libcuda so) keeps it out of the global scope RTLD_NEXT searches. */
static const char *const cudart_sonames[] = { "libcudart.so.13", "libcudart.so.12", "libcudart.so", NULL };
static const char *const cuda_sonames[] = { "libcuda.so.1", "libcuda.so", NULL };

static struct real_lib runtime = {
        .names = cudart_names,
        .required = cudart_required,
        .slots = (void **)&cudart,
        .n = ELEMENTSOF(cudart_names),
        .sonames = cudart_sonames,
};
static struct real_lib driver = {
        .names = cuda_names,
        .slots = (void **)&cuda,
        .n = ELEMENTSOF(cuda_names),
        .sonames = cuda_sonames,
};
static pthread_mutex_t real_lock = PTHREAD_MUTEX_INITIALIZER;

/* Fills l's table from handle: 0 when it has every required entry point
 * (and one at least), else -ENOENT. */
static int lib_fill(struct real_lib *l, void *handle) {
        if (sym_fill(handle, l->names, l->slots, l->n) == 0)
                return -ENOENT;
        for (size_t i = 0; l->required && i < l->n; i++)
                if (l->required[i] && !l->slots[i])
                        return -ENOENT;
        return 0;
}

/* Keeps every library l's table points into loaded for the life of the
 * process (RTLD_NODELETE): an engine that loaded CUDA with dlopen() may
 * dlclose() it, and the table, the mover and the hooks would then call
 * into unmapped code.  The references taken here are never dropped. */
static void lib_pin(const struct real_lib *l) {
        const void *last = NULL;

        for (size_t i = 0; i < l->n; i++) {
                Dl_info di;

                if (!l->slots[i] || !dladdr(l->slots[i], &di) || !di.dli_fname || di.dli_fbase == last)
                        continue;
                last = di.dli_fbase;
                (void)dlopen(di.dli_fname, RTLD_LAZY | RTLD_NOLOAD | RTLD_NODELETE);
        }
}

/* Fills l's table from the next definitions, else from a loaded library of
 * its sonames, and pins what it found. */
static int lib_find_loaded(struct real_lib *l) {
        if (lib_fill(l, RTLD_NEXT) == 0) {
                lib_pin(l);
                return 0;
        }
        for (const char *const *s = l->sonames; *s; s++) {
                void *h = dlopen(*s, RTLD_LAZY | RTLD_NOLOAD);
                int r;

                if (!h)
                        continue;
                r = lib_fill(l, h);
                if (r == 0) {
                        lib_pin(l);
                        return 0; /* h stays open: it is the table's */
                }
                dlclose(h); /* drops only the reference NOLOAD took */
        }
        return -ENOENT;
}

static bool cudart_load_failed; /* under real_lock: loading was tried and found nothing */

/* Loads a runtime into l's table: path (KVTIER_CUDART) if not NULL; then
 * the usual sonames, then the toolkit's (a static-cudart program's
 * directories need not hold any).  Kept open for the life of the process:
 * the table points into it. */
static int cudart_load(struct real_lib *l, const char *path) {
        const char *paths[] = {path, "libcudart.so.13", "libcudart.so.12",
                               "/usr/local/cuda/lib64/libcudart.so.13"};

        if (cudart_load_failed)
                return -ENOENT;
        for (size_t i = 0; i < ELEMENTSOF(paths); i++) {
                void *h = paths[i] ? dlopen(paths[i], RTLD_LAZY | RTLD_LOCAL) : NULL;

                if (!h)
                        continue;
                if (lib_fill(l, h) == 0) {
                        log_info("Loaded %s for memory captured through the driver API.", paths[i]);
                        return 0;
                }
                dlclose(h);
        }
        cudart_load_failed = true;
        log_warning("No libcudart.so.13 or .12 to manage memory captured through the driver API (set KVTIER_CUDART), "
                    "leaving it plain.");
        return -ENOENT;
}

/* Returns l's table, resolving it on first use (loading the runtime when
 * load is set and none is loaded, path first); NULL while it cannot be
 * resolved. */
static const void *lib_get(struct real_lib *l, bool load, const char *path) {
        const void *t = atomic_load_explicit(&l->ready, memory_order_acquire);

        if (t)
                return t;
        pthread_mutex_lock(&real_lock);
        t = atomic_load_explicit(&l->ready, memory_order_relaxed);
        if (!t && (lib_find_loaded(l) == 0 || (load && cudart_load(l, path) == 0))) {
                t = l->slots;
                atomic_store_explicit(&l->ready, t, memory_order_release);
        }
        pthread_mutex_unlock(&real_lock);
        return t;
}

static const struct kvt_cudart *get_cudart(bool load, const char *path) {
        const struct kvt_cudart *t = lib_get(&runtime, load, path);

        if (!t)
                log_debug("CUDA runtime not resolvable yet.");
        return t;
}

const struct kvt_cudart *real_cudart(void) {
        return get_cudart(false, NULL);
}

const struct kvt_cudart *real_cudart_load(const char *path) {
        return get_cudart(true, path);
}

const struct kvt_cuda *real_cuda(void) {
        return lib_get(&driver, false, NULL);
}

const struct kvt_cuda_calls *real_cuda_calls(void) {
        const struct kvt_cuda *d = real_cuda();

#define KVT_REAL_HAS(ret, name, args) &&d->calls.name
        return d KVT_CUDA_CALLS(KVT_REAL_HAS) ? &d->calls : NULL;
#undef KVT_REAL_HAS
}
