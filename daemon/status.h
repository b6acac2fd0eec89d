/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The status document sent for CTL_STATUS.  kvtierctl and the integration
 * tests parse it: change the schema only together with them.
 */

#include <stdint.h>

#include "registry.h"

struct status_info {
        const char *socket;
        const struct conf *conf; /* live: the policy and its parameters come from here */
        unsigned tick_ms;
        uint64_t start_ns; /* CLOCK_MONOTONIC at start-up */
};

/* Returns 0 and a NUL-terminated JSON document in *ret (free()), or -ENOMEM. */
int status_json(const struct registry *r, const struct status_info *info, char **ret);
