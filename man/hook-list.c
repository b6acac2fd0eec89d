/* SPDX-License-Identifier: MIT */
/*
 * Prints the entry points the shim interposes, one a line, from the X-macro
 * lists of shim/cuda-abi.h: the build renders them into libkvtier(7).
 */
#include "config.h"

#include <stdio.h>

#include "cuda-abi.h"

#define PRINT_NAME(ret, name, params) puts(#name);

int main(void) {
        KVT_CUDART_HOOKS(PRINT_NAME)
        KVT_CUDA_HOOKS(PRINT_NAME)
        return ferror(stdout) ? 1 : 0;
}
