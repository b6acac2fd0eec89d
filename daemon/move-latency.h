/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * How long moves took, as a histogram per GPU and direction: each move
 * order a shim completed is one observation of the elapsed time it
 * reported (struct kvt_order_done: from the start of the order's run to its
 * completion, so the orders of one run share its time).  Samples (re-arms,
 * probes) are not moves and are not counted.
 */

#include <stdint.h>

enum move_direction {
        MOVE_TO_VRAM, /* promotions */
        MOVE_TO_HOST, /* evictions, mapped or not */
        _MOVE_DIRECTION_MAX,
};

/* Upper bounds of the buckets, then +Inf.  A 2 MiB chunk takes ~40 us over
 * PCIe at the pinned 51-55 GB/s measured on the H200 (tests/bench/
 * RESULTS.md), ~80-340 us at the 6-26 GB/s the mover reached there; a run
 * of many chunks or a queue behind other runs takes longer: 50 us .. 1 s. */
#define MOVE_LATENCY_BUCKETS 14

static inline uint64_t move_latency_bound_ns(unsigned bucket) {
        static const uint64_t bounds_ns[MOVE_LATENCY_BUCKETS] = {
                50000,    100000,   250000,   500000,    1000000,   2500000,   5000000,
                10000000, 25000000, 50000000, 100000000, 250000000, 500000000, 1000000000,
        };

        return bucket < MOVE_LATENCY_BUCKETS ? bounds_ns[bucket] : UINT64_MAX;
}

struct move_latency {
        uint64_t counts[MOVE_LATENCY_BUCKETS + 1]; /* per bucket, not cumulative; the last is +Inf */
        uint64_t sum_ns;
        uint64_t orders; /* observations: the counts added up */
};

/* Counts one move of elapsed_ns into h. */
static inline void move_latency_observe(struct move_latency *h, uint64_t elapsed_ns) {
        unsigned b = 0;

        while (b < MOVE_LATENCY_BUCKETS && elapsed_ns > move_latency_bound_ns(b))
                b++;
        h->counts[b]++;
        h->sum_ns += elapsed_ns;
        h->orders++;
}
