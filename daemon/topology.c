/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "topology.h"

#define NODE_DIR "/devices/system/node/node"

/* "Node 0 MemTotal:  6907680 kB" in nodeN/meminfo: bytes, or 0. */
static uint64_t node_mem_total(const char *dir) {
        char path[4096 + 16], line[256];
        unsigned long long kib = 0;
        FILE *f;

        snprintf(path, sizeof(path), "%s/meminfo", dir);
        f = fopen(path, "re");
        if (!f)
                return 0;
        while (fgets(line, sizeof(line), f)) {
                const char *p = strstr(line, "MemTotal:");

                if (p && sscanf(p, "MemTotal: %llu kB", &kib) == 1)
                        break;
                kib = 0;
        }
        fclose(f);
        return (uint64_t)kib * 1024;
}

/* nodeN/distance lists the distances to every present node, in node order. */
static void node_distances(const char *dir, uint64_t present, uint8_t ret[KVT_MAX_NODES]) {
        char path[4096 + 16];
        unsigned d;
        FILE *f;

        snprintf(path, sizeof(path), "%s/distance", dir);
        f = fopen(path, "re");
        if (!f)
                return;
        for (int to = 0; to < KVT_MAX_NODES; to++) {
                if (!(present & (1ull << to)))
                        continue;
                if (fscanf(f, "%u", &d) != 1)
                        break;
                ret[to] = (uint8_t)(d > 255 ? 255 : d);
        }
        fclose(f);
}

/* A node directory's path under root, or -ENAMETOOLONG. */
static int node_dir(const char *root, int n, char *buf, size_t size) {
        int len = snprintf(buf, size, "%s" NODE_DIR "%d", root, n);

        return len < 0 || (size_t)len >= size ? -ENAMETOOLONG : 0;
}

static int sysfs_nodes(const void *userdata, uint64_t *ret_present) {
        char dir[4096];
        uint64_t present = 0;

        for (int n = 0; n < KVT_MAX_NODES; n++) {
                if (node_dir(userdata, n, dir, sizeof(dir)) < 0)
                        return -ENAMETOOLONG;
                if (access(dir, F_OK) == 0)
                        present |= 1ull << n;
        }
        *ret_present = present;
        return 0;
}

static uint64_t sysfs_mem_total(const void *userdata, int node) {
        char dir[4096];

        return node_dir(userdata, node, dir, sizeof(dir)) < 0 ? 0 : node_mem_total(dir);
}

static void sysfs_distances(const void *userdata, int node, uint64_t present, uint8_t ret[KVT_MAX_NODES]) {
        char dir[4096];

        if (node_dir(userdata, node, dir, sizeof(dir)) == 0)
                node_distances(dir, present, ret);
}

const struct topology_ops topology_sysfs_ops = {
        .nodes = sysfs_nodes,
        .mem_total_bytes = sysfs_mem_total,
        .distances = sysfs_distances,
};

int topology_read(const struct topology_ops *ops, const void *userdata, struct topology *ret) {
        int r;

        *ret = (struct topology){0};
        r = ops->nodes(userdata, &ret->present);
        if (r < 0) {
                ret->present = 0;
                return r;
        }
        for (int n = 0; n < KVT_MAX_NODES; n++) {
                if (!(ret->present & (1ull << n)))
                        continue;
                ret->mem_total_bytes[n] = ops->mem_total_bytes(userdata, n);
                ops->distances(userdata, n, ret->present, ret->distance[n]);
        }
        return 0;
}

int topology_load(const char *root, struct topology *ret) {
        return topology_read(&topology_sysfs_ops, root, ret);
}
