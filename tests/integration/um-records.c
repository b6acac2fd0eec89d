/* SPDX-License-Identifier: MIT */
/*
 * um-records: hands the shim's CUPTI client records the fake CUDA never
 * makes on its own (fakecuda_um_record()), over one captured allocation of
 * 64 MiB (32 chunks), for tests/integration/heat.sh:
 *   - a remote map from 2 MiB below the allocation to 4 MiB into it: the
 *     sample pages of chunks 0 and 1;
 *   - a remote map from 1 MiB into it of 2^62 bytes, far past any memory:
 *     the sample pages of chunks 1 to 31, and no further (a walk of every
 *     chunk it names would not end);
 *   - a remote map of 4 KiB at 8 KiB into it: no sample page.
 * Then exits with the allocation still captured: the shim's last flush, at
 * exit, hands the records over, and KVTIER_DEBUG=heat-stats says what was
 * counted (heat_touches 33, remote_map_attributed 2).
 *
 * Exit status: 0 done; 1 a CUDA call failed.
 */
#include <stdint.h>
#include <stdio.h>

#include "cuda-abi.h"
#include "cupti-abi.h"
#include "fakecuda.h"

KVT_CUDART_FUNCS(KVT_CUDA_PROTOTYPE)

#define REMOTE_MAP CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_REMOTE_MAP
#define MIB        (1ull << 20)

int main(void) {
        void *p = NULL;
        uintptr_t base;

        if (cudaMalloc(&p, 64 * MIB) != cudaSuccess) {
                fprintf(stderr, "um-records: cudaMalloc failed\n");
                return 1;
        }
        base = (uintptr_t)p;
        fakecuda_um_record(REMOTE_MAP, base - 2 * MIB, 6 * MIB, 0);
        fakecuda_um_record(REMOTE_MAP, base + MIB, 1ull << 62, 0);
        fakecuda_um_record(REMOTE_MAP, base + 8192, 4096, 0);
        printf("um-records: captured at %p\n", p);
        return 0;
}
