/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * Who is on the other end of a socket, as the kernel says: SO_PEERCRED
 * (pid, uid, gid), SO_PEERGROUPS (supplementary groups) and the systemd unit
 * of the peer's cgroup (/proc/PID/cgroup, checked against SO_PEERPIDFD so
 * that a reused pid cannot lend its cgroup).  Never what the peer says.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "conf.h"

#define IDENTITY_MAX_GROUPS 64

struct identity {
        pid_t pid;
        uint32_t uid, gid;
        uint32_t groups[IDENTITY_MAX_GROUPS]; /* supplementary; the first 64 */
        size_t n_groups;
        char unit[CONF_UNIT_MAX]; /* "" when not read, not in a unit, or unproven */
};

/* Fills *ret for the peer of socket fd; with want_unit, reads its unit
 * under proc_root ("/proc").  Returns 0, or -errno when even SO_PEERCRED
 * fails (the rest is best effort: groups and unit may stay empty). */
int identity_from_socket(int fd, bool want_unit, const char *proc_root, struct identity *ret);

/* Whether gid is the peer's primary or one of its supplementary groups. */
bool identity_in_group(const struct identity *id, uint32_t gid);

/* The identity as [client.NAME] sections match it; points into id. */
struct conf_peer identity_conf_peer(const struct identity *id);

/* The systemd unit of a /proc/PID/cgroup text (the cgroup v2 line "0::PATH",
 * else v1's "N:name=systemd:PATH"): the first component of PATH that is not
 * a slice, if it is a service or scope ("/system.slice/vllm.service/x" gives
 * "vllm.service"; a user's own units sit below user@UID.service, which is
 * what they give).  Returns 0 and the name in buf, or -ENXIO (no unit),
 * -ENAMETOOLONG. */
int identity_cgroup_unit(const char *text, char *buf, size_t size);

/* The start time of a process from its /proc/PID/stat text: field 22, in
 * clock ticks after boot (the comm field may hold spaces and parentheses:
 * fields count from the last ')').  With the pid it names one process for
 * good: a pid reused later has another.  Returns 0 or -EINVAL. */
int identity_stat_start_time(const char *text, uint64_t *ret);

/* The start time of pid, read from proc_root/PID/stat.  Returns 0,
 * -ESRCH (no such process) or -EINVAL / -errno (unreadable). */
int identity_pid_start_time(const char *proc_root, pid_t pid, uint64_t *ret);
