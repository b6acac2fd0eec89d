/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * kvtier-sim's models: a trace replayed through a policy (policy/, the code
 * the daemon runs) under a tick clock, a bandwidth model and a model of what
 * the daemon can observe, and Belady's MIN over the same trace and budget.
 * Definitions in tests/traces/FORMAT.md.
 */

#include <stdbool.h>
#include <stdint.h>

#include "policy.h"
#include "trace.h"

/* What the policy is shown of the trace's accesses. */
enum sim_observe {
        SIM_OBSERVE_SIGNALS, /* what the GPU gives away on x86: a fault on an unmapped host chunk */
        SIM_OBSERVE_ALL,     /* every access (an oracle, for comparison) */
};

struct sim_config {
        uint64_t budget_bytes;
        uint64_t margin_bytes; /* captures start in VRAM while the charge stays within budget + this */
        uint64_t tick_ns;
        double promote_gbps; /* host -> VRAM prefetch, GB/s (1e9 bytes) */
        double evict_gbps;   /* VRAM -> host */
        uint64_t evict_chunk_ns; /* and an eviction's advice, per chunk, before its pages move: a
                                  * chunk's first eviction only (the shim keeps its advice) */
        double link_gbps;    /* caps both directions (each direction of the duplex link) */
        double mapped_gbps;  /* GPU reading a host chunk in place */
        uint64_t fault_ns;   /* a GPU fault on an unmapped host chunk, before it reads in place */
        uint64_t signal_delay_ns; /* from a fault to the daemon's knowing of it */
        uint64_t bind_delay_ns;   /* a region's faults known to the daemon sooner after its capture
                                   * are lost (the chunk is mapped unseen); 0: none */
        uint64_t rearm_ns;   /* the shim's time to re-arm one chunk (off the GPU's path), one at a time */
        uint64_t probe_ns;   /* the same to probe one chunk, in the same queue */
        uint64_t rate_bytes_per_s; /* the daemon's max_migration_rate; 0 = none */
        enum sim_observe observe;
        bool launches_off; /* the policy sees no launches (kernels the shim cannot see: CUDA graphs) */
        /* The engine waits for its stalls: each record comes as much later
         * as the stalls before it took (a trace's times are all-VRAM's), so
         * that the daemon has the ticks a slow run gives it.  false: the
         * trace's times as they are. */
        bool closed_loop;
        /* Only accesses the trace times within [measure_from_ns,
         * measure_to_ns) count in the result's accesses, hits, stall and
         * span (a benchmark's measured turns); 0, 0: all of them. */
        uint64_t measure_from_ns, measure_to_ns;
};

struct sim_result {
        uint64_t accesses, hits;
        uint64_t bytes_to_vram, bytes_to_host;
        uint64_t stall_ns;    /* modelled GPU time of host reads and faults */
        uint64_t zerocopy_ns; /* the same accesses all read in place from host memory */
        uint64_t span_ns;     /* the trace's first record to its last (within the measured window) */
        uint64_t delay_ns;    /* closed_loop: all the stalls the engine waited for (0 otherwise) */
        uint64_t faults, refaults, rearmed;
        uint64_t own_maps;    /* of faults: those in a mapped eviction's quiet window, taken for its own mapping */
        uint64_t advised;     /* chunks evicted with their advice made: each at its first eviction */
        uint64_t faults_lost; /* of faults: those bind_delay_ns lost */
        uint64_t probes, probes_back, probes_expired; /* cohorts probed, found in use, found cold */
        uint64_t rearm_ns;    /* the shim's time the samples took (re-arms and probes) */
        uint64_t held_max;    /* most demanded chunks held back in one plan */
        uint32_t protect_max; /* longest protection the guard chose, ticks */
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
