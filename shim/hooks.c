/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <string.h>

#include "hooks.h"
#include "real.h"
#include "state.h"
#include "util.h"

static const struct {
        const char *name;
        void *wrapper;
} hooks[] = {
#define KVT_HOOK_ENTRY(ret, name, args) [KVT_HOOK_##name] = { #name, (void *)kvt_hook_##name },
        KVT_HOOKS(KVT_HOOK_ENTRY)
#undef KVT_HOOK_ENTRY
};
_Static_assert(ELEMENTSOF(hooks) == _KVT_HOOK_MAX, "one entry per hook");

/* initial-exec: a plain %fs-relative access on every hooked call, not a
 * __tls_get_addr call (the shim is preloaded, so static TLS has room). */
static __thread unsigned busy __attribute__((tls_model("initial-exec")));

bool hook_busy(void) {
        return busy > 0;
}

void hook_enter(void) {
        busy++;
}

void hook_leave(void) {
        busy--;
}

/* Called on every dlsym, also while sanitizer runtimes initialize: not
 * instrumented, and no strcmp (an interceptor that may not work yet). */
__attribute__((no_sanitize("address", "undefined", "thread"))) static bool same_name(const char *a,
                                                                                     const char *b) {
        while (*a && *a == *b)
                a++, b++;
        return *a == *b;
}

__attribute__((no_sanitize("address", "undefined", "thread"))) void *hook_find(const char *name) {
        if (!name || kvt_shim()->cfg.disabled)
                return NULL;
        for (size_t i = 0; i < ELEMENTSOF(hooks); i++)
                if (same_name(hooks[i].name, name))
                        return hooks[i].wrapper;
        return NULL;
}

/* The driver's hooks follow the runtime's in KVT_HOOKS. */
#define KVT_HOOK_ONE(ret, name, args) +1
enum { FIRST_DRIVER_HOOK = 0 KVT_CUDART_HOOKS(KVT_HOOK_ONE) };
#undef KVT_HOOK_ONE

/* The real driver function hook h wraps, or NULL. */
static void *driver_real(enum kvt_hook h) {
        const struct kvt_cuda *d = real_cuda();

        if (!d)
                return NULL;
        switch (h) {
#define KVT_HOOK_REAL(ret, name, args)                                                             \
        case KVT_HOOK_##name:                                                                      \
                return (void *)d->name;
        KVT_CUDA_HOOKS(KVT_HOOK_REAL)
#undef KVT_HOOK_REAL
        default:
                return NULL;
        }
}

/* Whether hook i answers to base name symbol: "cuMemAlloc" for cuMemAlloc_v2. */
static bool base_name_is(size_t i, const char *symbol) {
        const char *n = hooks[i].name;
        size_t len = strlen(n);

        if (len > 3 && strcmp(n + len - 3, "_v2") == 0)
                len -= 3;
        return strncmp(n, symbol, len) == 0 && symbol[len] == '\0';
}

void *hook_driver_proc(const char *symbol, int cudaVersion, unsigned long long flags, void *real) {
        if (!symbol || !real || kvt_shim()->cfg.disabled)
                return real;
        for (size_t i = FIRST_DRIVER_HOOK; i < ELEMENTSOF(hooks); i++) {
                void *mine = driver_real((enum kvt_hook)i);

                /* Exactly the function the wrapper calls: safe to wrap. */
                if (mine && mine == real)
                        return hooks[i].wrapper;
                /* A driver that hands out internal addresses: match by name,
                 * for the current (_v2, CUDA 12+) legacy-stream forms only. */
                if (base_name_is(i, symbol) && i != KVT_HOOK_cuGetProcAddress && cudaVersion >= 12000 &&
                    !(flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) && mine)
                        return hooks[i].wrapper;
        }
        return real;
}
