/* SPDX-License-Identifier: MIT */
#pragma once

/* The launch hooks' counters (launch.c), for KVTIER_DEBUG=heat-stats. */

#include "state.h"

void launch_get_stats(struct launch_stats *ret);
