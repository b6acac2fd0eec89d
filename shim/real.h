/* SPDX-License-Identifier: MIT */
#pragma once

#include "cuda-abi.h"

/* The real CUDA runtime entry points, one pointer per KVT_CUDART_FUNCS entry. */
struct kvt_cudart {
#define KVT_REAL_FIELD(ret, name, args) ret(*name) args;
        KVT_CUDART_FUNCS(KVT_REAL_FIELD)
};

/* The real driver entry points the shim interposes (KVT_CUDA_HOOKS). */
struct kvt_cuda {
        KVT_CUDA_HOOKS(KVT_REAL_FIELD)
};

/* The driver entry points the shim calls (KVT_CUDA_CALLS). */
struct kvt_cuda_calls {
        KVT_CUDA_CALLS(KVT_REAL_FIELD)
#undef KVT_REAL_FIELD
};

/* Returns the real runtime, resolving it on first use (the next definition
 * after this library, or the already-loaded libcudart when it sits in a
 * local dlopen scope).  Returns NULL while no libcudart is loaded, or when
 * an entry point the shim calls is missing; hooked entry points the library
 * lacks (cudaGetDriverEntryPointByVersion before 12.5) are NULL.  The table
 * is immutable once returned. */
const struct kvt_cudart *real_cudart(void);

/* As real_cudart(), but loads libcudart.so.13 (or .12) when none is loaded:
 * memory captured through the driver API is still managed and moved with the
 * runtime, which shares the primary context with the driver's caller. */
const struct kvt_cudart *real_cudart_load(void);

/* Returns the real driver entry points (NULL where libcuda lacks one), or
 * NULL while no libcuda.so.1 is loaded. */
const struct kvt_cuda *real_cuda(void);

/* Returns the driver entry points the shim calls, all of them, resolved
 * on first use from the loaded libcuda.so.1; NULL while none is loaded or
 * when it lacks one (a driver older than CUDA 12.5). */
const struct kvt_cuda_calls *real_cuda_calls(void);
