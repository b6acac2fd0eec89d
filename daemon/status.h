/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The status document sent for CTL_STATUS.  kvtierctl and the integration
 * tests parse it: change the schema only together with them.
 */

#include <stdint.h>

#include "heat-reader.h"
#include "registry.h"

struct status_info {
        const char *socket;
        const struct conf *conf; /* live: the policy and its parameters come from here */
        unsigned tick_ms;
        uint64_t start_ns; /* CLOCK_MONOTONIC at start-up */
        /* A client's heat table counters, NULL when it passed none. */
        const struct heat_table_stats *(*client_heat)(const struct client *c);
};

/* Returns 0 and a NUL-terminated JSON document in *ret (free()), or -ENOMEM. */
int status_json(const struct registry *r, const struct status_info *info, char **ret);
