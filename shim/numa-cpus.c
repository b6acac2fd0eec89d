/* SPDX-License-Identifier: MIT */
/* CPUs of a NUMA node, read from sysfs under a root the caller names (tests
 * point it at a fixture). */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "numa-cpus.h"

int numa_cpus_parse(const char *list, cpu_set_t *ret) {
        const char *s = list;

        CPU_ZERO(ret);
        while (*s && *s != '\n') {
                char *end;
                unsigned long lo = strtoul(s, &end, 10), hi = lo;

                if (end == s)
                        return -EINVAL;
                if (*end == '-') {
                        s = end + 1;
                        hi = strtoul(s, &end, 10);
                        if (end == s || hi < lo)
                                return -EINVAL;
                }
                if (hi >= CPU_SETSIZE)
                        return -EINVAL;
                for (unsigned long c = lo; c <= hi; c++)
                        CPU_SET(c, ret);
                s = end;
                if (*s == ',')
                        s++;
                else if (*s && *s != '\n')
                        return -EINVAL;
        }
        return CPU_COUNT(ret) > 0 ? 0 : -ENOENT;
}

int numa_cpus_of_node(const char *sysfs_root, int node, cpu_set_t *ret) {
        char path[4096], list[4096];
        FILE *f;
        int r;

        if (node < 0)
                return -ENOENT;
        if (snprintf(path, sizeof(path), "%s/devices/system/node/node%d/cpulist", sysfs_root, node) >=
            (int)sizeof(path))
                return -ENAMETOOLONG;
        f = fopen(path, "re");
        if (!f)
                return -errno;
        r = fgets(list, sizeof(list), f) ? numa_cpus_parse(list, ret) : -EIO;
        fclose(f);
        return r;
}
