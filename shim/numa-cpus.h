/* SPDX-License-Identifier: MIT */
#pragma once

#include <sched.h>

/* Parses a sysfs CPU list ("0-3,8,10-11\n") into *ret.  Returns 0,
 * -ENOENT for an empty list (a node with memory only) or -EINVAL (not a
 * CPU list, or a CPU beyond CPU_SETSIZE). */
int numa_cpus_parse(const char *list, cpu_set_t *ret);

/* The CPUs of NUMA node node, from
 * <sysfs_root>/devices/system/node/node<node>/cpulist, into *ret.  Returns
 * 0 or -errno (ENOENT: no such node, or no CPUs on it). */
int numa_cpus_of_node(const char *sysfs_root, int node, cpu_set_t *ret);
