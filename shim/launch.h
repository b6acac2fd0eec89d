/* SPDX-License-Identifier: MIT */
#pragma once

/* The launch hooks' counters (launch.c), for KVTIER_HEAT_STATS. */

#include <stdint.h>

struct launch_stats {
        uint64_t launches;          /* launches seen with launch heat on */
        uint64_t scanned;           /* of those, with a known parameter layout */
        uint64_t no_layout;         /* of those, launched without looking (unknown or table full) */
        uint64_t functions;         /* functions whose layout was queried */
        uint64_t functions_unknown; /* of those, with no parameter info */
        uint64_t pointers;          /* argument words that counted a chunk access */
};

void launch_get_stats(struct launch_stats *ret);
