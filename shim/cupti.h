/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * CUPTI unified-memory counters as a heat source (cupti.c).  Everything
 * fails soft: without libcupti the shim samples launches and hints only.
 */

#include <stdbool.h>
#include <stdint.h>

#include "state.h"

/* Loads libcupti, configures the counters and starts the sampler thread,
 * once.  Callers hold the shim's announce lock (shim_announce_lock()).
 * Returns 0 or -errno (logged; the shim carries on without). */
int cupti_start(void);
/* Whether cupti_start() has run to its end: captures after that need not
 * take the announce lock for it. */
bool cupti_started(void);

void cupti_get_stats(struct cupti_stats *ret);

/* In the child of fork(): it has no sampler, and its copy of CUPTI has no
 * worker (its locks may have been copied held): its exit neither waits for
 * a sampler nor calls CUPTI, and the statistics are the parent's to write.
 * Nothing to do where the sampler never started. */
void cupti_atfork_child(void);

/* Writes the statistics as one JSON line to path (KVTIER_DEBUG=heat-stats=PATH),
 * after a last flush of what CUPTI holds. */
void cupti_dump_stats(const char *path);
