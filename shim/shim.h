/* SPDX-License-Identifier: MIT */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/un.h>

#include "classify.h"

#define KVT_EXPORT __attribute__((visibility("default")))

/* The shim's knobs, read from the environment once, at load. */
struct shim_config {
        bool disabled;                 /* KVTIER_DISABLE=1: every hook passes through */
        char socket_path[sizeof(((struct sockaddr_un *)0)->sun_path)]; /* KVTIER_SOCKET */
        struct classify_rules rules;   /* KVTIER_MIN_SIZE, _CAPTURE_AFTER, _MAX_CAPTURED */
        uint64_t capacity_bytes;       /* KVTIER_CAPACITY: what cudaMemGetInfo reports; 0 = off */
        int timeout_ms;                /* KVTIER_TIMEOUT_MS: longest wait on the daemon */
        char *trace_path;              /* KVTIER_TRACE: record sampled accesses there */
};

extern struct shim_config shim_cfg;

#include "cuda-abi.h"

/* Prototypes of the runtime entry points, from the one list in cuda-abi.h.
 * The shim defines those it interposes (cudaMalloc, cudaFree); it calls the
 * real ones only through real_cudart(), and -z defs catches a direct call. */
#define KVT_DECLARE_FUNC(ret, name, args) KVT_EXPORT ret name args;
KVT_CUDART_FUNCS(KVT_DECLARE_FUNC)
#undef KVT_DECLARE_FUNC
