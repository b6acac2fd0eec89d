/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <stdatomic.h>

#include "classify.h"

static _Atomic uint64_t allocated_bytes; /* everything asked of the hooked allocators */
static _Atomic uint64_t captured_bytes;

bool classify_take(const struct classify_rules *rules, size_t size) {
        uint64_t before = atomic_fetch_add(&allocated_bytes, size);
        uint64_t cur;

        if (size < rules->min_size || before < rules->capture_after)
                return false;
        cur = atomic_load(&captured_bytes);
        do {
                if (rules->max_captured && (cur + size > rules->max_captured || cur + size < cur))
                        return false;
        } while (!atomic_compare_exchange_weak(&captured_bytes, &cur, cur + size));
        return true;
}

void classify_release(size_t size) {
        atomic_fetch_sub(&captured_bytes, size);
}

uint64_t classify_captured_bytes(void) {
        return atomic_load(&captured_bytes);
}
