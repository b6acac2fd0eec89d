/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The host's NUMA nodes: which exist, how much memory each has (for "N%"
 * host budgets) and how far apart they are (for where evictions spill).
 * Read once, at start-up, through an ops struct: libnuma for kvtierd
 * (topology_numa_ops), or a sysfs tree under a root the caller names
 * (topology_sysfs_ops: tests point KVTIER_SYSFS_ROOT at a fixture).  A
 * plain struct, so that the registry and the planner can read it without
 * linking a reader.
 */

#include <stdint.h>

#include "protocol.h"

struct topology {
        uint64_t present;                               /* bit N: node N exists */
        uint64_t mem_total_bytes[KVT_MAX_NODES];        /* MemTotal of each node; 0 = unknown */
        uint8_t distance[KVT_MAX_NODES][KVT_MAX_NODES]; /* ACPI SLIT units (10 = local); 0 = unknown */
};

/* Where a topology is read from; userdata is the source's own. */
struct topology_ops {
        /* The nodes that exist (bit N: node N, N < KVT_MAX_NODES) into
         * *ret_present.  Returns 0, -EOPNOTSUPP where the source says this
         * host has no NUMA, or another -errno. */
        int (*nodes)(const void *userdata, uint64_t *ret_present);
        /* MemTotal of a present node in bytes; 0 = unknown. */
        uint64_t (*mem_total_bytes)(const void *userdata, int node);
        /* Distances from a present node to each node in present into ret
         * (ACPI SLIT units, at most 255); what is unknown is left alone. */
        void (*distances)(const void *userdata, int node, uint64_t present, uint8_t ret[KVT_MAX_NODES]);
};

/* sysfs under a root (userdata: the root, a string such as "/sys"):
 * ROOT/devices/system/node/node<N>/{meminfo,distance}.  A missing node
 * directory is no node; an unreadable file leaves that figure unknown. */
extern const struct topology_ops topology_sysfs_ops;

/* libnuma (numa_available, numa_nodes_ptr, numa_node_size64,
 * numa_distance); userdata unused.  In daemon/topology-numa.c, which
 * links libnuma. */
extern const struct topology_ops topology_numa_ops;

/* Reads the topology through ops into *ret.  Returns 0, or what
 * ops->nodes() failed with (*ret then empty). */
int topology_read(const struct topology_ops *ops, const void *userdata, struct topology *ret);

/* topology_read() of sysfs under root.  Returns 0 (an empty topology where
 * sysfs has no nodes), or -ENAMETOOLONG for a root too long. */
int topology_load(const char *root, struct topology *ret);
