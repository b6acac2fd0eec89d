/* SPDX-License-Identifier: MIT */
/* The shim's capture rules (shim/classify.c): which rule takes an
 * allocation and per-API filtering (the API list parser is in
 * common/: test-protocol). */
#include "config.h"

#include <errno.h>

#include "classify.h"
#include "protocol.h"
#include "tap.h"

#define MIB (1ull << 20)

static void test_families(void) {
        TAP_EQ_INT(classify_api_family(KVT_API_CUDA_MALLOC), KVT_API_FAMILY_RUNTIME, "cudaMalloc is runtime");
        TAP_EQ_INT(classify_api_family(KVT_API_CU_MEM_ALLOC), KVT_API_FAMILY_DRIVER, "cuMemAlloc is driver");
        TAP_EQ_INT(classify_api_family(KVT_API_CUDA_MALLOC_ASYNC), KVT_API_FAMILY_ASYNC, "cudaMallocAsync is async");
        TAP_EQ_INT(classify_api_family(KVT_API_CU_MEM_ALLOC_FROM_POOL_ASYNC), KVT_API_FAMILY_ASYNC,
                   "cuMemAllocFromPoolAsync is async");
        TAP_EQ_INT(classify_api_family(KVT_API_CU_MEM_MAP), KVT_API_FAMILY_VMM, "cuMemMap is vmm");
        TAP_EQ_INT(classify_api_family(0), 0, "no API, no family");
        TAP_EQ_INT(classify_api_family(_KVT_API_MAX), 0, "out of range, no family");
}

/* The counters are the rules': each case releases what it took. */
static void test_take(void) {
        struct classify_rules r = { .min_size = 64 * MIB, .apis = KVT_API_FAMILY_ALL };

        TAP_EQ_INT(classify_take(&r, KVT_API_CUDA_MALLOC, 32 * MIB), KVT_RULE_NONE, "below min size: plain");
        TAP_EQ_INT(classify_take(&r, KVT_API_CUDA_MALLOC, 64 * MIB), KVT_RULE_MIN_SIZE, "at min size: min-size");
        TAP_EQ_U64(classify_captured_bytes(&r), 64 * MIB, "reserved");
        classify_release(&r, 64 * MIB);
        TAP_EQ_U64(classify_captured_bytes(&r), 0, "released");

        r.apis = KVT_API_FAMILY_RUNTIME;
        TAP_EQ_INT(classify_take(&r, KVT_API_CU_MEM_ALLOC, 64 * MIB), KVT_RULE_NONE, "driver excluded: plain");
        TAP_EQ_INT(classify_take(&r, KVT_API_CUDA_MALLOC, 64 * MIB), KVT_RULE_MIN_SIZE, "runtime included");
        classify_release(&r, 64 * MIB);

        r.apis = KVT_API_FAMILY_ALL;
        r.max_captured = 100 * MIB;
        TAP_EQ_INT(classify_take(&r, KVT_API_CU_MEM_ALLOC, 64 * MIB), KVT_RULE_MIN_SIZE, "first fits the cap");
        TAP_EQ_INT(classify_take(&r, KVT_API_CU_MEM_ALLOC, 64 * MIB), KVT_RULE_NONE, "second would pass the cap");
        classify_release(&r, 64 * MIB);
        TAP_EQ_U64(classify_captured_bytes(&r), 0, "a refused take reserves nothing");

        /* Everything asked so far counts towards capture_after. */
        r.max_captured = 0;
        r.capture_after = 1ull << 40;
        TAP_EQ_INT(classify_take(&r, KVT_API_CUDA_MALLOC, 64 * MIB), KVT_RULE_NONE, "before capture_after: plain");
        r.capture_after = 64 * MIB;
        TAP_EQ_INT(classify_take(&r, KVT_API_CUDA_MALLOC, 64 * MIB), KVT_RULE_CAPTURE_AFTER,
                   "past capture_after: capture-after");
        classify_release(&r, 64 * MIB);
}

/* The daemon's rules (WELCOME) replace each rule the environment did not set. */
static void test_apply(void) {
        struct classify_rules r = { .min_size = 64 * MIB, .apis = KVT_API_FAMILY_ALL };

        classify_rules_apply(&r, 0, 32 * MIB, 0, 0, KVT_API_FAMILY_RUNTIME);
        TAP_EQ_U64(r.min_size, 32 * MIB, "apply: the daemon's min_size taken");
        TAP_EQ_INT(classify_rules_apis(&r), KVT_API_FAMILY_RUNTIME, "apply: the daemon's apis taken");
        TAP_EQ_INT(classify_take(&r, KVT_API_CU_MEM_ALLOC, 64 * MIB), KVT_RULE_NONE,
                   "apply: driver excluded by the daemon: plain");
        TAP_EQ_INT(classify_take(&r, KVT_API_CUDA_MALLOC, 64 * MIB), KVT_RULE_MIN_SIZE,
                   "apply: runtime still captured");
        classify_release(&r, 64 * MIB);
        classify_rules_apply(&r, CLASSIFY_ENV_APIS, 32 * MIB, 0, 0, KVT_API_FAMILY_DRIVER);
        TAP_EQ_INT(classify_rules_apis(&r), KVT_API_FAMILY_RUNTIME, "apply: apis from the environment win");
        classify_rules_apply(&r, CLASSIFY_ENV_MIN_SIZE, 16 * MIB, 0, 0, 0);
        TAP_EQ_INT(classify_rules_apis(&r), 0, "apply: apis none from the daemon taken");
        TAP_EQ_U64(r.min_size, 32 * MIB, "apply: min_size from the environment wins");
        classify_rules_apply(&r, 0, 32 * MIB, 0, 0, ~0u);
        TAP_EQ_INT(classify_rules_apis(&r), KVT_API_FAMILY_ALL, "apply: unknown family bits dropped");
}

int main(void) {
        test_families();
        test_take();
        test_apply();
        return tap_done();
}
