/* SPDX-License-Identifier: MIT */
#pragma once

/* The launch hooks' counters (launch.c), for KVTIER_DEBUG=heat-stats. */

#include <stdint.h>

#include "state.h"

void launch_get_stats(struct launch_stats *ret);

/* The daemon's PACE (struct kvt_pace): from now on each kernel launch is
 * paced to percent (1 .. 100) of the GPU's time; 100 ends the pacing, as
 * does a lost connection and a fork (the child's connection is new). */
void launch_set_pace(uint32_t percent);
