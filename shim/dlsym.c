/* SPDX-License-Identifier: MIT */
/*
 * dlsym interposition.  Engines that reach CUDA through dlopen+dlsym (XLA,
 * PyTorch's driver API calls, the CUDA runtime itself fetching
 * cuGetProcAddress from libcuda) bypass symbol interposition, so the shim
 * answers dlsym for its hooked names with its wrappers.
 *
 * A C wrapper for dlsym would break dlsym(RTLD_NEXT, ...) for every caller:
 * glibc resolves RTLD_NEXT relative to the return address, which would then
 * point into the shim.  So dlsym is a tail-call trampoline: it asks
 * kvt_dlsym_hooked() whether to answer, and if not restores the arguments
 * and jumps to the real dlsym, leaving the caller's return address in
 * place.  x86-64 only; elsewhere dlsym is not interposed and engines that
 * dlsym their CUDA entry points are not captured.
 */
#include "config.h"

#include <dlfcn.h>

#include "hooks.h"
#include "real.h"

typedef void *(*dlsym_fn)(void *, const char *);

/* Read by the trampoline (hidden: addressed %rip-relative, no GOT). */
dlsym_fn kvt_real_dlsym_ptr;

/*
 * dlsym is called before anything else is set up: by the sanitizer
 * runtimes while they initialize (before this library's constructor, and
 * before their own interceptors work), and by the dynamic linker's users
 * at any time.  So this path is not instrumented, takes no lock and calls
 * nothing but dlvsym: two threads racing here store the same pointer.
 */
#define DLSYM_PATH __attribute__((no_sanitize("address", "undefined")))

/* dlvsym is not interposed: it finds libc's (or libdl's) dlsym itself,
 * so no lookup the shim makes can come back into the shim. */
DLSYM_PATH static dlsym_fn get_real_dlsym(void) {
        dlsym_fn f = __atomic_load_n(&kvt_real_dlsym_ptr, __ATOMIC_ACQUIRE);

        if (f)
                return f;
        f = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
        if (!f)
                f = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
        __atomic_store_n(&kvt_real_dlsym_ptr, f, __ATOMIC_RELEASE);
        return f;
}

DLSYM_PATH void *real_dlsym(void *handle, const char *name) {
        dlsym_fn f = get_real_dlsym();

        return f ? f(handle, name) : NULL;
}

#if defined(__x86_64__)
/* Called by the trampoline: the shim's wrapper for name when handle really
 * has that symbol, else NULL (the trampoline then jumps to the real dlsym).
 * RTLD_NEXT is never answered: an interposer loaded after the shim that
 * looks up the next cudaMalloc must not be handed the shim's, which would
 * call it back. */
void *kvt_dlsym_hooked(void *handle, const char *name);
DLSYM_PATH void *kvt_dlsym_hooked(void *handle, const char *name) {
        void *mine, *real;

        if (!get_real_dlsym() || handle == RTLD_NEXT || !(mine = hook_find(name)))
                return NULL;
        real = real_dlsym(handle, name);
        if (!real || real == mine)
                return NULL;
        return mine;
}

__asm__(".text\n"
        ".globl dlsym\n"
        ".type dlsym, @function\n"
        "dlsym:\n"
        "        .cfi_startproc\n"
        "        pushq %rdi\n"
        "        .cfi_adjust_cfa_offset 8\n"
        "        pushq %rsi\n"
        "        .cfi_adjust_cfa_offset 8\n"
        "        subq $8, %rsp\n" /* 16-byte alignment at the call */
        "        .cfi_adjust_cfa_offset 8\n"
        "        call kvt_dlsym_hooked\n"
        "        addq $8, %rsp\n"
        "        .cfi_adjust_cfa_offset -8\n"
        "        popq %rsi\n"
        "        .cfi_adjust_cfa_offset -8\n"
        "        popq %rdi\n"
        "        .cfi_adjust_cfa_offset -8\n"
        "        testq %rax, %rax\n"
        "        jz 1f\n"
        "        ret\n"
        "1:      movq kvt_real_dlsym_ptr(%rip), %rax\n"
        "        testq %rax, %rax\n"
        "        jz 2f\n"
        "        jmp *%rax\n"
        "2:      ret\n" /* no real dlsym: NULL, as for a missing symbol */
        "        .cfi_endproc\n"
        ".size dlsym, .-dlsym\n");
#endif
