/* SPDX-License-Identifier: MIT */
#pragma once

#include "cuda-abi.h"

/* The real CUDA runtime entry points, one pointer per KVT_CUDART_FUNCS entry. */
struct kvt_cudart {
#define KVT_REAL_FIELD(ret, name, args) ret(*name) args;
        KVT_CUDART_FUNCS(KVT_REAL_FIELD)
#undef KVT_REAL_FIELD
};

/* Returns the real runtime, resolving it on first use (the next definition
 * after this library, or the already-loaded libcudart when it sits in a
 * local dlopen scope).  Returns NULL while no libcudart is loaded, or when
 * an entry point is missing.  The table is immutable once returned. */
const struct kvt_cudart *real_cudart(void);
