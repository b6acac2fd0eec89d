/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "identity.h"
#include "log.h"

/* Linux 6.5's SO_PEERPIDFD, where the headers predate it (generic value). */
#if !defined(SO_PEERPIDFD) && (defined(__x86_64__) || defined(__aarch64__) || defined(__i386__))
#define SO_PEERPIDFD 77
#endif

static bool has_suffix(const char *s, size_t n, const char *suffix) {
        size_t k = strlen(suffix);

        return n > k && memcmp(s + n - k, suffix, k) == 0;
}

/* The unit of one cgroup path (see identity_cgroup_unit()). */
static int path_unit(const char *path, size_t len, char *buf, size_t size) {
        const char *p = path, *end = path + len;

        while (p < end) {
                const char *slash;
                size_t n;

                while (p < end && *p == '/')
                        p++;
                slash = memchr(p, '/', (size_t)(end - p));
                n = (size_t)((slash ? slash : end) - p);
                if (n == 0)
                        break;
                if (has_suffix(p, n, ".slice")) {
                        p += n;
                        continue;
                }
                if (!has_suffix(p, n, ".service") && !has_suffix(p, n, ".scope"))
                        return -ENXIO;
                if (n >= size)
                        return -ENAMETOOLONG;
                memcpy(buf, p, n);
                buf[n] = '\0';
                return 0;
        }
        return -ENXIO;
}

int identity_cgroup_unit(const char *text, char *buf, size_t size) {
        const char *v1 = NULL, *v1_end = NULL;

        for (const char *line = text; line && *line;) {
                const char *nl = strchr(line, '\n'), *end = nl ? nl : line + strlen(line);

                if (strncmp(line, "0::", 3) == 0)
                        return path_unit(line + 3, (size_t)(end - line - 3), buf, size);
                {
                        const char *c = memchr(line, ':', (size_t)(end - line));

                        if (c && (size_t)(end - c) > 14 && strncmp(c, ":name=systemd:", 14) == 0) {
                                v1 = c + 14;
                                v1_end = end;
                        }
                }
                line = nl ? nl + 1 : NULL;
        }
        return v1 ? path_unit(v1, (size_t)(v1_end - v1), buf, size) : -ENXIO;
}

/* Whether the process behind pidfd is still alive (a pidfd polls readable once it exits). */
static bool pidfd_alive(int pidfd) {
        struct pollfd p = {.fd = pidfd, .events = POLLIN};

        return poll(&p, 1, 0) == 0;
}

/* The unit of the peer: read from proc_root/PID/cgroup, kept only when
 * the pidfd says the pid is still the connecting process (or, without a
 * pidfd, on trust in the pid). */
static void read_unit(int fd, const char *proc_root, struct identity *id) {
        char path[256], text[8192];
        int pidfd = -1, cfd;
        ssize_t n;

#ifdef SO_PEERPIDFD
        {
                socklen_t len = sizeof(pidfd);

                if (getsockopt(fd, SOL_SOCKET, SO_PEERPIDFD, &pidfd, &len) < 0)
                        pidfd = -1;
        }
#endif
        snprintf(path, sizeof(path), "%s/%d/cgroup", proc_root, (int)id->pid);
        cfd = open(path, O_RDONLY | O_CLOEXEC);
        n = cfd >= 0 ? read(cfd, text, sizeof(text) - 1) : -1;
        if (cfd >= 0)
                close(cfd);
        if (n > 0) {
                text[n] = '\0';
                if (identity_cgroup_unit(text, id->unit, sizeof(id->unit)) < 0)
                        id->unit[0] = '\0';
        }
        if (pidfd >= 0) {
                if (!pidfd_alive(pidfd))
                        id->unit[0] = '\0'; /* gone: the pid may be another's by now */
                close(pidfd);
        }
}

int identity_from_socket(int fd, bool want_unit, const char *proc_root, struct identity *ret) {
        struct ucred cred;
        gid_t groups[IDENTITY_MAX_GROUPS];
        socklen_t len = sizeof(cred);

        *ret = (struct identity){0};
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
                return -errno;
        *ret = (struct identity){.pid = cred.pid, .uid = cred.uid, .gid = cred.gid};
        len = sizeof(groups);
        /* ERANGE: more than 64 groups; the first 64 are not returned then, so none count. */
        if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) == 0)
                for (size_t i = 0; i < len / sizeof(gid_t); i++)
                        ret->groups[ret->n_groups++] = groups[i];
        if (want_unit && cred.pid > 0)
                read_unit(fd, proc_root, ret);
        return 0;
}

bool identity_in_group(const struct identity *id, uint32_t gid) {
        if (id->gid == gid)
                return true;
        for (size_t i = 0; i < id->n_groups; i++)
                if (id->groups[i] == gid)
                        return true;
        return false;
}

struct conf_peer identity_conf_peer(const struct identity *id) {
        return (struct conf_peer){.uid = id->uid,
                                  .gid = id->gid,
                                  .groups = id->groups,
                                  .n_groups = id->n_groups,
                                  .unit = id->unit[0] ? id->unit : NULL};
}

int identity_stat_start_time(const char *text, uint64_t *ret) {
        const char *p = strrchr(text, ')');
        char *end;

        if (!p)
                return -EINVAL;
        /* after ")": state (field 3), then fields 4 .. 21 before starttime */
        for (int field = 2; field < 22; field++) {
                p = strchr(p + 1, ' ');
                if (!p)
                        return -EINVAL;
        }
        errno = 0;
        *ret = strtoull(p + 1, &end, 10);
        return errno || end == p + 1 || (*end != ' ' && *end != '\n' && *end) ? -EINVAL : 0;
}

int identity_pid_start_time(const char *proc_root, pid_t pid, uint64_t *ret) {
        char path[256], text[1024];
        ssize_t n;
        int fd;

        snprintf(path, sizeof(path), "%s/%d/stat", proc_root, (int)pid);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return errno == ENOENT ? -ESRCH : -errno;
        n = read(fd, text, sizeof(text) - 1);
        close(fd);
        if (n < 0)
                return errno == ESRCH ? -ESRCH : -errno; /* it ended between open and read */
        text[n] = '\0';
        return identity_stat_start_time(text, ret);
}
