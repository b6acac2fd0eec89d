/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * CUPTI unified-memory counters as a heat source (cupti.c).  Everything
 * fails soft: without libcupti the shim samples launches and hints only.
 */

#include <stdbool.h>
#include <stdint.h>

#include "cupti-abi.h"

struct cupti_stats {
        uint64_t records[KVT_CUPTI_UM_KINDS];    /* UM records received, by counter kind */
        uint64_t attributed[KVT_CUPTI_UM_KINDS]; /* of those, inside a captured region */
        uint64_t other_records;                  /* other activity kinds, unknown counter kinds */
        uint64_t buffers;                        /* buffers CUPTI completed */
        uint64_t enabled_ns;                     /* time the counters were on */
        bool loaded;                             /* libcupti found and counters configured */
};

/* Loads libcupti, configures the counters and starts the sampler thread,
 * once.  Returns 0 or -errno (logged; the shim carries on without). */
int cupti_start(void);

void cupti_get_stats(struct cupti_stats *ret);

/* Writes the statistics as one JSON line to path (KVTIER_HEAT_STATS),
 * after a last flush of what CUPTI holds. */
void cupti_dump_stats(const char *path);
