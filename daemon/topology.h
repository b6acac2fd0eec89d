/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The host's NUMA nodes as sysfs describes them: which exist, how much
 * memory each has (for "N%" host budgets) and how far apart they are (for
 * where evictions spill).  Read once, at start-up, under a root the caller
 * names ("/sys"; tests point KVTIER_SYSFS_ROOT at a fixture).  A plain
 * struct, so that the registry and the planner can read it without linking
 * the reader.
 */

#include <stdint.h>

#include "protocol.h"

struct topology {
        uint64_t present;                               /* bit N: node N exists */
        uint64_t mem_total_bytes[KVT_MAX_NODES];        /* MemTotal of each node; 0 = unknown */
        uint8_t distance[KVT_MAX_NODES][KVT_MAX_NODES]; /* ACPI SLIT units (10 = local); 0 = unknown */
};

/* Reads ROOT/devices/system/node/node<N>/{meminfo,distance} for N in
 * 0..KVT_MAX_NODES-1 into *ret.  A missing node directory is no node; an
 * unreadable file leaves that figure unknown.  Returns 0 (an empty
 * topology where sysfs has no nodes), or -ENAMETOOLONG for a root too long. */
int topology_load(const char *root, struct topology *ret);
