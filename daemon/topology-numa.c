/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <numa.h>

#include "topology.h"

/* numa_available() fails where the kernel has no NUMA (or get_mempolicy()
 * is not allowed): the caller then falls back.  numa_nodes_ptr holds the
 * nodes the kernel exposes, with memory or not, as sysfs lists them. */
static int numa_ops_nodes(const void *userdata, uint64_t *ret_present) {
        uint64_t present = 0;
        int max;

        if (numa_available() < 0)
                return -EOPNOTSUPP;
        max = numa_max_node();
        for (int n = 0; n <= max && n < KVT_MAX_NODES; n++)
                if (numa_bitmask_isbitset(numa_nodes_ptr, (unsigned)n))
                        present |= 1ull << n;
        *ret_present = present;
        return 0;
}

/* numa_node_size64() is the node's MemTotal in bytes, -1 where unknown. */
static uint64_t numa_ops_mem_total(const void *userdata, int node) {
        long long bytes = numa_node_size64(node, NULL);

        return bytes > 0 ? (uint64_t)bytes : 0;
}

/* numa_distance() is 0 where the distance is unknown. */
static void numa_ops_distances(const void *userdata, int node, uint64_t present,
                               uint8_t ret[KVT_MAX_NODES]) {
        for (int to = 0; to < KVT_MAX_NODES; to++) {
                int d;

                if (!(present & (1ull << to)))
                        continue;
                d = numa_distance(node, to);
                if (d > 0)
                        ret[to] = (uint8_t)(d > 255 ? 255 : d);
        }
}

const struct topology_ops topology_numa_ops = {
        .nodes = numa_ops_nodes,
        .mem_total_bytes = numa_ops_mem_total,
        .distances = numa_ops_distances,
};
