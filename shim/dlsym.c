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
#include "sym.h"

#if defined(__x86_64__)
/* Called by the trampoline: the shim's wrapper for name when handle really
 * has that symbol, else NULL (the trampoline then jumps to the real dlsym).
 * RTLD_NEXT is never answered: an interposer loaded after the shim that
 * looks up the next cudaMalloc must not be handed the shim's, which would
 * call it back.  Not instrumented: sanitizer runtimes call dlsym while
 * they initialize (sym.h). */
void *kvt_dlsym_hooked(void *handle, const char *name);
__attribute__((no_sanitize("address", "undefined", "thread"))) void *kvt_dlsym_hooked(void *handle,
                                                                                      const char *name) {
        void *mine, *real;

        if (!sym_real_dlsym() || handle == RTLD_NEXT || !(mine = hook_find(name)))
                return NULL;
        real = sym_lookup(handle, name);
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
        "1:      movq sym_dlsym_ptr(%rip), %rax\n"
        "        testq %rax, %rax\n"
        "        jz 2f\n"
        "        jmp *%rax\n"
        "2:      ret\n" /* no real dlsym: NULL, as for a missing symbol */
        "        .cfi_endproc\n"
        ".size dlsym, .-dlsym\n");
#endif
