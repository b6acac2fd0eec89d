/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * [host] hugepages: 2 MiB hugepages kept free on the host's NUMA nodes for
 * shims' SSD staging buffers (MFD_HUGETLB memfds), through
 * ROOT/devices/system/node/nodeN/hugepages/hugepages-2048kB/nr_hugepages
 * (ROOT: /sys, or KVTIER_SYSFS_ROOT in tests).  A node's pool is raised to
 * at least n, never lowered; where kvtierd may not write there (an
 * unprivileged daemon, a read-only /sys), one warning and nothing else.
 */

#include <stdint.h>

/* Raises the pools of the nodes in present (bit N: node N; 0: node 0 only).
 * Returns how many nodes now have at least n pages. */
int hugepages_reserve(const char *root, uint64_t present, unsigned n);
