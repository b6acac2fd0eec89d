/* SPDX-License-Identifier: MIT */
#pragma once

/* Timing helpers the micro-benchmarks share (header-only: alloc-bench is
 * also built alone with nvcc for the GPU). */

#include <time.h>

/* Wall-clock seconds, monotonic. */
static inline double bench_now_s(void) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* qsort() order of doubles, for medians. */
static inline int bench_cmp_double(const void *a, const void *b) {
        double x = *(const double *)a, y = *(const double *)b;

        return (x > y) - (x < y);
}
