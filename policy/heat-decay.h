/* SPDX-License-Identifier: MIT */
#pragma once

/* Heat decay, inlined into the planner's per-chunk loop; internal to policy/. */

#include <stdint.h>

/* 2^(-i/8) in 16.16 fixed point: the decay between whole half-lives, in eighths. */
static const uint32_t heat_decay_eighths[8] = {65536, 60097, 55109, 50535, 46341, 42495, 38968, 35734};

/* heat decayed over age ticks; half_life_ticks >= 1. */
static inline uint32_t heat_decay(uint32_t heat, uint32_t age, uint32_t half_life_ticks) {
        uint64_t k;

        if (age == 0 || heat == 0)
                return heat;
        k = age < (1u << 28) ? (uint32_t)(age * 8u) / half_life_ticks : (uint64_t)age * 8 / half_life_ticks;
        if (k >= 32 * 8)
                return 0;
        heat >>= k / 8;
        return (uint32_t)(((uint64_t)heat * heat_decay_eighths[k % 8]) >> 16);
}

/* See policy_heat_class(). */
static inline unsigned heat_class(uint32_t heat) {
        /* The bit length of heat / 256 (POLICY_HEAT_ONE): 1: 1, 2-3: 2, 4-7: 3; the
         * low bit or'ed in below bit 8 makes 0 come out 0 without a test.  That
         * is the exponent of heat >> 7 | 1 as a double (exact for any uint32_t):
         * a conversion is cheaper than the BSR that __builtin_clz() becomes at
         * -O2 without -mlzcnt (throughput one per 4 cycles on AMD Zen). */
        union {
                double d;
                uint64_t u;
        } x = {.d = (double)(heat >> 7 | 1)};
        unsigned cls = (unsigned)(x.u >> 52) - 1023u;

        return cls > 15 ? 15 : cls;
}
