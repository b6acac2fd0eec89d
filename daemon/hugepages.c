/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hugepages.h"
#include "log.h"
#include "protocol.h"

static int read_pages(const char *path, unsigned long *ret) {
        FILE *f = fopen(path, "re");
        int r;

        if (!f)
                return -errno;
        r = fscanf(f, "%lu", ret) == 1 ? 0 : -EINVAL;
        fclose(f);
        return r;
}

static int write_pages(const char *path, unsigned long n) {
        FILE *f = fopen(path, "we");
        int r = 0;

        if (!f)
                return -errno;
        if (fprintf(f, "%lu\n", n) < 0)
                r = -EIO;
        if (fclose(f) != 0 && r == 0)
                r = -errno;
        return r;
}

int hugepages_reserve(const char *root, uint64_t present, unsigned n) {
        char path[512];
        int ok = 0;
        bool warned = false;

        if (n == 0)
                return 0;
        if (!present)
                present = 1;
        for (int node = 0; node < KVT_MAX_NODES; node++) {
                unsigned long cur, got;
                int r;

                if (!(present & (1ull << node)))
                        continue;
                snprintf(path, sizeof(path),
                         "%s/devices/system/node/node%d/hugepages/hugepages-2048kB/nr_hugepages", root,
                         node);
                r = read_pages(path, &cur);
                if (r == 0 && cur >= n) {
                        ok++;
                        continue;
                }
                if (r == 0)
                        r = write_pages(path, n);
                if (r == 0)
                        r = read_pages(path, &got);
                if (r < 0) {
                        if (!warned)
                                log_warning("Failed to reserve %u 2 MiB hugepages on node %d ([host] "
                                            "hugepages): %s; "
                                            "SSD staging takes what is free, ignoring.",
                                            n, node, strerror(-r));
                        warned = true;
                        continue;
                }
                if (got >= n)
                        ok++;
                log_info("Node %d: %lu 2 MiB hugepages in the pool (%u asked by [host] hugepages, %lu "
                         "before).",
                         node, got, n, cur);
        }
        return ok;
}
