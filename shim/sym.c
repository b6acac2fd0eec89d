/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <dlfcn.h>

#include "sym.h"

sym_dlsym_fn sym_dlsym_ptr;

/*
 * The first lookup comes before anything else is set up: from the sanitizer
 * runtimes while they initialize (before this library's constructor, and
 * before their own interceptors work), through the interposed dlsym.  So
 * this path is not instrumented, takes no lock and calls nothing but
 * dlvsym: two threads racing here store the same pointer.
 */
#define SYM_EARLY __attribute__((no_sanitize("address", "undefined", "thread")))

SYM_EARLY sym_dlsym_fn sym_real_dlsym(void) {
        sym_dlsym_fn f = __atomic_load_n(&sym_dlsym_ptr, __ATOMIC_ACQUIRE);

        if (f)
                return f;
        f = (sym_dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
        if (!f)
                f = (sym_dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
        __atomic_store_n(&sym_dlsym_ptr, f, __ATOMIC_RELEASE);
        return f;
}

SYM_EARLY void *sym_lookup(void *handle, const char *name) {
        sym_dlsym_fn f = sym_real_dlsym();

        return f ? f(handle, name) : NULL;
}

size_t sym_fill(void *handle, const char *const *names, void **slots, size_t n) {
        size_t found = 0;

        for (size_t i = 0; i < n; i++)
                if ((slots[i] = sym_lookup(handle, names[i])))
                        found++;
        return found;
}
