/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * kvtier-sim's models: a trace replayed through a policy (policy/, the code
 * the daemon runs) under a tick clock and a bandwidth model, and Belady's
 * MIN over the same trace and budget.  Definitions in tests/traces/FORMAT.md.
 */

#include <stdbool.h>
#include <stdint.h>

#include "policy.h"
#include "trace.h"

struct sim_config {
        uint64_t budget_bytes;
        uint64_t tick_ns;
        double promote_gbps; /* host -> VRAM prefetch, GB/s (1e9 bytes) */
        double evict_gbps;   /* VRAM -> host */
        double link_gbps;    /* caps both directions (each direction of the duplex link) */
        double mapped_gbps;  /* GPU reading a host-mapped chunk */
        uint64_t rate_bytes_per_s; /* the daemon's max_migration_rate; 0 = none */
};

struct sim_result {
        uint64_t accesses, hits;
        uint64_t bytes_to_vram, bytes_to_host;
        uint64_t stall_ns;           /* modelled: every miss reads its chunk over the link */
        uint64_t peak_charged_bytes; /* VRAM charged (resident or arriving) at its highest */
        uint64_t plans, moves;
        bool consistent; /* bytes moved agree with the residency at the end */
};

/* Replays t through the policy.  Returns 0, -EINVAL (bad parameters) or -ENOMEM. */
int sim_run_policy(const struct trace *t, const struct sim_config *cfg, const struct policy_params *pp,
                   struct sim_result *ret);

/* Belady's MIN with bypass: demand fetch, no bandwidth, the same budget.
 * Fills accesses, hits, stall_ns, bytes_to_vram (demand fetches).  Returns 0 or -ENOMEM. */
int sim_run_opt(const struct trace *t, const struct sim_config *cfg, struct sim_result *ret);
