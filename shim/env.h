/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The shim's environment: one table of KVTIER_* variables (env.c), read
 * once, in the constructor, into a struct shim_config.  The same table is
 * printed by KVTIER_DEBUG=print-env (kvtier-run --print-env) and is the source
 * of README.md's table.  A bad value is reported and leaves the default: a
 * typo must not take the engine down.
 */

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/un.h>

/* Sources of heat (KVTIER_HEAT); the default is all three. */
#define HEAT_SRC_CUPTI   0x1u
#define HEAT_SRC_LAUNCH  0x2u
#define HEAT_SRC_HINT    0x4u
#define HEAT_SRC_DEFAULT (HEAT_SRC_CUPTI | HEAT_SRC_LAUNCH | HEAT_SRC_HINT)

/* Longest an allocation waits on the daemon, in milliseconds. */
#define DEFAULT_TIMEOUT_MS 200

/* The shim's configuration, fixed once the constructor has read it. */
struct shim_config {
        bool disabled; /* KVTIER_DISABLE: every hook passes through */
        char socket_path[sizeof(((struct sockaddr_un *)0)->sun_path)]; /* KVTIER_SOCKET */
        uint64_t min_size_bytes;    /* KVTIER_MIN_SIZE; 0: the daemon's [capture] min_size */
        uint64_t capacity_bytes;    /* KVTIER_CAPACITY: what cudaMemGetInfo reports; 0 = off */
        bool capacity_auto;         /* KVTIER_CAPACITY=auto: the daemon's budget plus host grant */
        bool standalone;            /* KVTIER_STANDALONE: a kvtierd of this process's own */
        uint64_t vram_budget_bytes; /* KVTIER_STANDALONE=BYTES: that daemon's budget; 0: its config's */
        int timeout_ms;             /* KVTIER_TIMEOUT_MS: longest wait on the daemon */
        char *cudart_path;          /* KVTIER_CUDART: a runtime to load, or NULL */
        unsigned heat_sources;      /* KVTIER_HEAT: HEAT_SRC_* (heat.h) */
        /* diagnostics, for tests and benchmarks: the items of KVTIER_DEBUG */
        bool host_numa;        /* host-numa: the host tier on the GPU's node */
        char *heat_stats_path; /* heat-stats=PATH: sampler statistics at exit */
        char *trace_path;      /* trace=PATH: record sampled accesses there */
        bool print_env;        /* print-env: print the table at load */
};

/* The defaults, as the table states them: the configuration before the
 * constructor has read the environment. */
#define SHIM_CONFIG_DEFAULTS                                                                                \
        {                                                                                                   \
                .socket_path = KVT_RUNSTATEDIR "/kvtier/kvtierd.sock", .timeout_ms = DEFAULT_TIMEOUT_MS,    \
                .heat_sources = HEAT_SRC_DEFAULT, .host_numa = true,                                        \
        }
void env_defaults(struct shim_config *ret);

/* Reads every variable of the table into *cfg (which holds the defaults);
 * a bad value is logged and leaves the default.  KVTIER_LOG sets the log
 * level at once. */
void env_parse(struct shim_config *cfg);

/* Prints the table, one variable a line: name, values, default, help. */
void env_print(FILE *f);
