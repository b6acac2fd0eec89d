/* SPDX-License-Identifier: MIT */
#pragma once

#include <stdbool.h>

#include "cuda-abi.h"

/* One value per hooked symbol, from the list in cuda-abi.h. */
enum kvt_hook {
#define KVT_HOOK_ENUM(ret, name, args) KVT_HOOK_##name,
        KVT_HOOKS(KVT_HOOK_ENUM)
#undef KVT_HOOK_ENUM
        _KVT_HOOK_MAX,
};

/* The wrappers, defined in the shim as kvt_hook_<name> and exported under
 * the CUDA name by KVT_HOOK_EXPORT(name).  Inside the shim a CUDA name of
 * this list is never called directly: the real one is in real.h. */
#define KVT_HOOK_PROTOTYPE(ret, name, args) ret kvt_hook_##name args;
KVT_HOOKS(KVT_HOOK_PROTOTYPE)
#undef KVT_HOOK_PROTOTYPE

/* Exports wrapper kvt_hook_<name> as <name>.  An alias, not a second
 * function: the hook table hands out the same address the linker binds. */
#define KVT_HOOK_EXPORT(name)                                                                      \
        extern __typeof__(kvt_hook_##name) name __attribute__((alias("kvt_hook_" #name), visibility("default")));

/* The wrapper for an exact exported name, or NULL if it is not hooked. */
void *hook_find(const char *name);

/* For cuGetProcAddress and cudaGetDriverEntryPoint: the caller asked the
 * driver for symbol (a base name such as "cuMemAlloc") at cudaVersion with
 * flags and got real.  Returns the wrapper to hand out instead, or real when
 * that function is not hooked or is a variant the wrapper would not call
 * (the per-thread-stream or pre-_v2 forms). */
void *hook_driver_proc(const char *symbol, int cudaVersion, unsigned long long flags, void *real);

/* Whether the calling thread is inside a hook: CUDA calls the shim makes,
 * and the runtime's own calls into the driver beneath a hooked runtime call,
 * pass straight through and are never captured twice. */
bool hook_busy(void);
void hook_enter(void);
void hook_leave(void);

/* Evaluates a call to a real CUDA function inside the hook guard. */
#define PASS(call)                                                                                 \
        ({                                                                                         \
                hook_enter();                                                                      \
                __typeof__(call) _pass_r = (call);                                                 \
                hook_leave();                                                                      \
                _pass_r;                                                                           \
        })
