/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <stdatomic.h>

#include "classify.h"
#include "protocol.h"

uint32_t classify_api_family(uint32_t api) {
        switch (api) {
        case KVT_API_CUDA_MALLOC:
                return KVT_API_FAMILY_RUNTIME;
        case KVT_API_CU_MEM_ALLOC:
                return KVT_API_FAMILY_DRIVER;
        case KVT_API_CUDA_MALLOC_ASYNC:
        case KVT_API_CUDA_MALLOC_FROM_POOL_ASYNC:
        case KVT_API_CU_MEM_ALLOC_ASYNC:
        case KVT_API_CU_MEM_ALLOC_FROM_POOL_ASYNC:
                return KVT_API_FAMILY_ASYNC;
        case KVT_API_CU_MEM_MAP:
                return KVT_API_FAMILY_VMM;
        default:
                return 0;
        }
}

void classify_rules_apply(struct classify_rules *rules, unsigned env_set, uint64_t min_size, uint64_t capture_after,
                          uint64_t max_captured, uint32_t apis) {
        if (!(env_set & CLASSIFY_ENV_MIN_SIZE) && min_size > 0)
                __atomic_store_n(&rules->min_size, min_size, __ATOMIC_RELAXED);
        if (!(env_set & CLASSIFY_ENV_CAPTURE_AFTER))
                __atomic_store_n(&rules->capture_after, capture_after, __ATOMIC_RELAXED);
        if (!(env_set & CLASSIFY_ENV_MAX_CAPTURED))
                __atomic_store_n(&rules->max_captured, max_captured, __ATOMIC_RELAXED);
        if (!(env_set & CLASSIFY_ENV_APIS))
                __atomic_store_n(&rules->apis, apis & KVT_API_FAMILY_ALL, __ATOMIC_RELAXED);
}

uint32_t classify_rules_apis(const struct classify_rules *rules) {
        return __atomic_load_n(&rules->apis, __ATOMIC_RELAXED);
}

uint32_t classify_take(struct classify_rules *rules, uint32_t api, size_t size) {
        uint64_t before = atomic_fetch_add(&rules->allocated_bytes, size);
        uint64_t min_size = __atomic_load_n(&rules->min_size, __ATOMIC_RELAXED);
        uint64_t after = __atomic_load_n(&rules->capture_after, __ATOMIC_RELAXED);
        uint64_t max = __atomic_load_n(&rules->max_captured, __ATOMIC_RELAXED);
        uint64_t cur;

        if (!(classify_api_family(api) & classify_rules_apis(rules)) || size < min_size || before < after)
                return KVT_RULE_NONE;
        cur = atomic_load(&rules->captured_bytes);
        do {
                if (max && (cur + size > max || cur + size < cur))
                        return KVT_RULE_NONE;
        } while (!atomic_compare_exchange_weak(&rules->captured_bytes, &cur, cur + size));
        return after ? KVT_RULE_CAPTURE_AFTER : KVT_RULE_MIN_SIZE;
}

void classify_release(struct classify_rules *rules, size_t size) {
        atomic_fetch_sub(&rules->captured_bytes, size);
}

uint64_t classify_captured_bytes(struct classify_rules *rules) {
        return atomic_load(&rules->captured_bytes);
}
