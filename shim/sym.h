/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * Symbol lookup beneath the shim's own dlsym (shim/dlsym.c): the dynamic
 * linker's dlsym, found through dlvsym, which the shim does not interpose,
 * so no lookup the shim makes comes back into the shim (HAMi-core PR #215:
 * a shim that found dlsym through itself recursed).  A leaf: the
 * interposer and the resolvers (real.c, cupti.c) all stand on it.
 */

#include <stddef.h>

typedef void *(*sym_dlsym_fn)(void *handle, const char *name);

/* The real dlsym once sym_real_dlsym() found it, else NULL.  Read by the
 * dlsym trampoline (hidden: addressed %rip-relative, no GOT). */
extern sym_dlsym_fn sym_dlsym_ptr __attribute__((visibility("hidden")));

/* Returns the dynamic linker's dlsym, looked up on first use; NULL when
 * libc has neither known version of it.  Lock-free and not instrumented:
 * callable from dlsym while sanitizer runtimes initialize. */
sym_dlsym_fn sym_real_dlsym(void);

/* dlsym(handle, name) through the real dlsym: the address, or NULL (also
 * when there is no real dlsym). */
void *sym_lookup(void *handle, const char *name);

/* Looks up names[0..n) in handle into slots[0..n), NULL where one is
 * missing.  Returns how many were found. */
size_t sym_fill(void *handle, const char *const *names, void **slots, size_t n);
