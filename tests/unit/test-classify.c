/* SPDX-License-Identifier: MIT */
/* The shim's capture rules (shim/classify.c): which rule takes an
 * allocation, per-API filtering, and the KVTIER_CAPTURE_APIS parser. */
#include "config.h"

#include <errno.h>

#include "classify.h"
#include "protocol.h"
#include "tap.h"

#define MIB (1ull << 20)

static void test_parse(void) {
        unsigned apis = 0xdead;

        TAP_EQ_INT(classify_parse_apis("runtime", &apis), 0, "runtime parses");
        TAP_EQ_INT(apis, CLASSIFY_API_RUNTIME, "runtime alone");
        TAP_EQ_INT(classify_parse_apis("driver,async,vmm", &apis), 0, "a list parses");
        TAP_EQ_INT(apis, CLASSIFY_API_DRIVER | CLASSIFY_API_ASYNC | CLASSIFY_API_VMM, "a list ORs its families");
        TAP_EQ_INT(classify_parse_apis("all", &apis), 0, "all parses");
        TAP_EQ_INT(apis, CLASSIFY_API_ALL, "all is every family");
        TAP_EQ_INT(classify_parse_apis("none", &apis), 0, "none parses");
        TAP_EQ_INT(apis, 0, "none is no family");
        apis = 7;
        TAP_EQ_INT(classify_parse_apis("runtime,bogus", &apis), -EINVAL, "an unknown word is refused");
        TAP_EQ_INT(apis, 7, "and leaves the value alone");
        TAP_EQ_INT(classify_parse_apis("", &apis), -EINVAL, "empty is refused");
        TAP_EQ_INT(classify_parse_apis("runtime,", &apis), -EINVAL, "a trailing comma is refused");
        TAP_EQ_INT(classify_parse_apis("runtimes", &apis), -EINVAL, "no prefix matching");
}

static void test_families(void) {
        TAP_EQ_INT(classify_api_family(KVT_API_CUDA_MALLOC), CLASSIFY_API_RUNTIME, "cudaMalloc is runtime");
        TAP_EQ_INT(classify_api_family(KVT_API_CU_MEM_ALLOC), CLASSIFY_API_DRIVER, "cuMemAlloc is driver");
        TAP_EQ_INT(classify_api_family(KVT_API_CUDA_MALLOC_ASYNC), CLASSIFY_API_ASYNC, "cudaMallocAsync is async");
        TAP_EQ_INT(classify_api_family(KVT_API_CU_MEM_ALLOC_FROM_POOL_ASYNC), CLASSIFY_API_ASYNC,
                   "cuMemAllocFromPoolAsync is async");
        TAP_EQ_INT(classify_api_family(KVT_API_CU_MEM_MAP), CLASSIFY_API_VMM, "cuMemMap is vmm");
        TAP_EQ_INT(classify_api_family(0), 0, "no API, no family");
        TAP_EQ_INT(classify_api_family(_KVT_API_MAX), 0, "out of range, no family");
}

/* The counters are process-wide: each case releases what it took. */
static void test_take(void) {
        struct classify_rules r = { .min_size = 64 * MIB, .apis = CLASSIFY_API_ALL };

        TAP_EQ_INT(classify_take(&r, KVT_API_CUDA_MALLOC, 32 * MIB), KVT_RULE_NONE, "below min size: plain");
        TAP_EQ_INT(classify_take(&r, KVT_API_CUDA_MALLOC, 64 * MIB), KVT_RULE_MIN_SIZE, "at min size: min-size");
        TAP_EQ_U64(classify_captured_bytes(), 64 * MIB, "reserved");
        classify_release(64 * MIB);
        TAP_EQ_U64(classify_captured_bytes(), 0, "released");

        r.apis = CLASSIFY_API_RUNTIME;
        TAP_EQ_INT(classify_take(&r, KVT_API_CU_MEM_ALLOC, 64 * MIB), KVT_RULE_NONE, "driver excluded: plain");
        TAP_EQ_INT(classify_take(&r, KVT_API_CUDA_MALLOC, 64 * MIB), KVT_RULE_MIN_SIZE, "runtime included");
        classify_release(64 * MIB);

        r.apis = CLASSIFY_API_ALL;
        r.max_captured = 100 * MIB;
        TAP_EQ_INT(classify_take(&r, KVT_API_CU_MEM_ALLOC, 64 * MIB), KVT_RULE_MIN_SIZE, "first fits the cap");
        TAP_EQ_INT(classify_take(&r, KVT_API_CU_MEM_ALLOC, 64 * MIB), KVT_RULE_NONE, "second would pass the cap");
        classify_release(64 * MIB);
        TAP_EQ_U64(classify_captured_bytes(), 0, "a refused take reserves nothing");

        /* Everything asked so far counts towards capture_after. */
        r.max_captured = 0;
        r.capture_after = 1ull << 40;
        TAP_EQ_INT(classify_take(&r, KVT_API_CUDA_MALLOC, 64 * MIB), KVT_RULE_NONE, "before capture_after: plain");
        r.capture_after = 64 * MIB;
        TAP_EQ_INT(classify_take(&r, KVT_API_CUDA_MALLOC, 64 * MIB), KVT_RULE_CAPTURE_AFTER,
                   "past capture_after: capture-after");
        classify_release(64 * MIB);
}

int main(void) {
        test_parse();
        test_families();
        test_take();
        return tap_done();
}
