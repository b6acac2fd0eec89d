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

int topology_load(const char *root, struct topology *ret) {
        char dir[4096];

        *ret = (struct topology){0};
        if (strlen(root) + sizeof(NODE_DIR) + 8 > sizeof(dir) - 16)
                return -ENAMETOOLONG;
        for (int n = 0; n < KVT_MAX_NODES; n++) {
                snprintf(dir, sizeof(dir), "%s" NODE_DIR "%d", root, n);
                if (access(dir, F_OK) == 0)
                        ret->present |= 1ull << n;
        }
        for (int n = 0; n < KVT_MAX_NODES; n++) {
                if (!(ret->present & (1ull << n)))
                        continue;
                snprintf(dir, sizeof(dir), "%s" NODE_DIR "%d", root, n);
                ret->mem_total_bytes[n] = node_mem_total(dir);
                node_distances(dir, ret->present, ret->distance[n]);
        }
        return 0;
}
