// SPDX-License-Identifier: MIT
// CK(call): a CUDA runtime call that must succeed; on an error, where and
// what, and exit status 3 (the GPU programs' "CUDA failed").
#pragma once
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#define CK(x)                                                                                              \
        do {                                                                                               \
                cudaError_t e_ = (x);                                                                      \
                if (e_ != cudaSuccess) {                                                                   \
                        fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
                        exit(3);                                                                           \
                }                                                                                          \
        } while (0)
