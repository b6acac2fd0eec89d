/* SPDX-License-Identifier: MIT */
#pragma once

#include "cuda-abi.h"

/*
 * The real CUDA libraries, one table each, generated from the lists in
 * cuda-abi.h and resolved by one resolver (real.c): the next definitions
 * after the shim, else those of an already loaded library that RTLD_NEXT
 * cannot see.  Every lookup goes through the real dlsym (sym.h), never
 * through the shim's own.  A table is immutable once returned.
 */

#define KVT_REAL_FIELD(ret, name, args) ret(*name) args;

/* The runtime: one pointer per KVT_CUDART_FUNCS entry. */
struct kvt_cudart {
        KVT_CUDART_FUNCS(KVT_REAL_FIELD)
};

/* The driver entry points the evictors call (KVT_CUDA_CALLS). */
struct kvt_cuda_calls {
        KVT_CUDA_CALLS(KVT_REAL_FIELD)
};

/* The driver: one pointer per KVT_CUDA_FUNCS entry, the evictors' calls
 * (the last of them) grouped. */
struct kvt_cuda {
        KVT_CUDA_HOOKS(KVT_REAL_FIELD)
        KVT_CUDA_LAUNCH_CALLS(KVT_REAL_FIELD)
        struct kvt_cuda_calls calls;
};

#undef KVT_REAL_FIELD

/* The real runtime's or driver's entry point name, or NULL while that
 * library is not resolved or lacks it. */
#define REAL_CUDART(name)                                                                                   \
        ({                                                                                                  \
                const struct kvt_cudart *_rt = real_cudart();                                               \
                _rt ? _rt->name : NULL;                                                                     \
        })
#define REAL_CUDA(name)                                                                                     \
        ({                                                                                                  \
                const struct kvt_cuda *_d = real_cuda();                                                    \
                _d ? _d->name : NULL;                                                                       \
        })

/* Returns the real runtime, resolving it on first use.  Returns NULL while
 * no libcudart is loaded, or when an entry point of KVT_CUDART_CALLS is
 * missing; others the library lacks (cudaGetDriverEntryPointByVersion before
 * 12.5, cudaFuncGetParamInfo before 12.4) are NULL. */
const struct kvt_cudart *real_cudart(void);

/* As real_cudart(), but loads path (NULL: none), else libcudart.so.13 (or
 * .12), when no runtime is loaded:
 * memory captured through the driver API is still managed and moved with the
 * runtime, which shares the primary context with the driver's caller. */
const struct kvt_cudart *real_cudart_load(const char *path);

/* Returns the real driver entry points (NULL where libcuda lacks one), or
 * NULL while no libcuda is loaded. */
const struct kvt_cuda *real_cuda(void);

/* Returns the driver entry points the shim calls, from real_cuda()'s table,
 * when libcuda has all of them; NULL while none is loaded or when it lacks
 * one (a driver older than CUDA 12.5). */
const struct kvt_cuda_calls *real_cuda_calls(void);
