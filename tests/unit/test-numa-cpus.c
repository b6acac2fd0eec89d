/* SPDX-License-Identifier: MIT */
/* The CPUs of a NUMA node (shim/numa-cpus.c), which the mover binds its
 * threads to: sysfs CPU lists parsed, and read from a fixture root. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "numa-cpus.h"
#include "tap.h"

static void test_parse(void) {
        cpu_set_t s;

        TAP_EQ_INT(numa_cpus_parse("0-3,8,10-11\n", &s), 0, "ranges and single CPUs");
        TAP_EQ_INT(CPU_COUNT(&s), 7, "seven CPUs");
        TAP_OK(CPU_ISSET(3, &s) && CPU_ISSET(8, &s) && CPU_ISSET(11, &s) && !CPU_ISSET(9, &s),
               "the listed ones, no others");
        TAP_EQ_INT(numa_cpus_parse("5", &s), 0, "one CPU, no newline");
        TAP_OK(CPU_COUNT(&s) == 1 && CPU_ISSET(5, &s), "CPU 5");
        TAP_EQ_INT(numa_cpus_parse("\n", &s), -ENOENT, "empty list: a node with memory only");
        TAP_EQ_INT(numa_cpus_parse("3-1", &s), -EINVAL, "backwards range");
        TAP_EQ_INT(numa_cpus_parse("0-", &s), -EINVAL, "open range");
        TAP_EQ_INT(numa_cpus_parse("0;1", &s), -EINVAL, "not a separator");
        TAP_EQ_INT(numa_cpus_parse("x", &s), -EINVAL, "not a number");
        TAP_EQ_INT(numa_cpus_parse("0-100000", &s), -EINVAL, "beyond CPU_SETSIZE");
}

/* Writes list as node's cpulist under root. */
static int write_node(const char *root, int node, const char *list) {
        char path[512];
        FILE *f;

        snprintf(path, sizeof(path), "%s/devices", root);
        (void)mkdir(path, 0755);
        snprintf(path, sizeof(path), "%s/devices/system", root);
        (void)mkdir(path, 0755);
        snprintf(path, sizeof(path), "%s/devices/system/node", root);
        (void)mkdir(path, 0755);
        snprintf(path, sizeof(path), "%s/devices/system/node/node%d", root, node);
        (void)mkdir(path, 0755);
        snprintf(path, sizeof(path), "%s/devices/system/node/node%d/cpulist", root, node);
        f = fopen(path, "we");
        if (!f)
                return -errno;
        fputs(list, f);
        return fclose(f) == 0 ? 0 : -errno;
}

static void remove_fixture(const char *root) {
        static const char *const paths[] = {
                "/devices/system/node/node0/cpulist",
                "/devices/system/node/node1/cpulist",
                "/devices/system/node/node0",
                "/devices/system/node/node1",
                "/devices/system/node",
                "/devices/system",
                "/devices",
                "",
        };
        char path[512];

        for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
                snprintf(path, sizeof(path), "%s%s", root, paths[i]);
                if (unlink(path) < 0)
                        (void)rmdir(path);
        }
}

static void test_sysfs(void) {
        char root[] = "/tmp/kvt-numa-cpus.XXXXXX";
        cpu_set_t s;

        if (!mkdtemp(root) || write_node(root, 0, "0-1\n") < 0 || write_node(root, 1, "\n") < 0) {
                TAP_OK(0, "fixture made");
                return;
        }
        TAP_EQ_INT(numa_cpus_of_node(root, 0, &s), 0, "node 0 read");
        TAP_OK(CPU_COUNT(&s) == 2 && CPU_ISSET(0, &s) && CPU_ISSET(1, &s), "node 0: CPUs 0 and 1");
        TAP_EQ_INT(numa_cpus_of_node(root, 1, &s), -ENOENT, "node 1 has no CPUs");
        TAP_EQ_INT(numa_cpus_of_node(root, 2, &s), -ENOENT, "no node 2");
        TAP_EQ_INT(numa_cpus_of_node(root, -1, &s), -ENOENT, "no node at all");
        remove_fixture(root);
}

int main(void) {
        test_parse();
        test_sysfs();
        return tap_done();
}
