/* SPDX-License-Identifier: MIT */
/*
 * hostile: one attack of issue 18 on a live kvtierd per run, for the
 * integration tests (they judge what it prints and what the daemon did) and
 * tests/bench/hostile-bench.sh.
 *
 * Usage: hostile [--as UID[:GID]] [--hold MS] SOCKET MODE [ARGS]
 *   hello NAME      HELLO named NAME; prints the WELCOME, holds, exits 1 if dropped
 *   set TEXT        CTL_SET TEXT; prints the reply's status
 *   conns N         N connections that never say anything; holds; prints how many
 *                   connected and how many the daemon closed
 *   noread N        N control peers that ask for status until their socket is full and
 *                   never read; holds;
 *                   prints how many the daemon closed
 *   flood N TEXT    N CTL_SET TEXT, one after the other (reconnecting when dropped)
 *   rtt N [TEXT]    N control round trips (status, or CTL_SET TEXT); prints p50 and
 *                   p99 in microseconds
 * --as drops to that user (and group, default the same number) with no
 * supplementary groups; it needs root (exit 77 without).  Exit 99: a hard error.
 */
#include "config.h"

#include <errno.h>
#include <grp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "protocol.h"
#include "util.h"

static const char *sock_path;
static unsigned hold_ms;

/* A connection, non-blocking connect (a full backlog is -EAGAIN, not a hang).  Returns the fd or -errno. */
static int conn(void) {
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0), r;

        if (fd < 0)
                return -errno;
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock_path);
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
                r = -errno;
                close(fd);
                return r;
        }
        return fd;
}

static void hold(void) {
        struct timespec ts = {.tv_sec = hold_ms / 1000, .tv_nsec = (long)(hold_ms % 1000) * 1000000L};

        nanosleep(&ts, NULL);
}

/* Whether the daemon closed fd (POLLHUP), without reading what it sent. */
static bool closed_by_daemon(int fd) {
        struct pollfd p = {.fd = fd, .events = 0};

        return poll(&p, 1, 0) > 0 && (p.revents & (POLLHUP | POLLERR));
}

static int mode_hello(const char *name) {
        struct kvt_hello h = {.proto_version = KVT_PROTO_VERSION, .device = 0};
        struct kvt_msg *m = malloc(sizeof(*m));
        int fd = conn(), r;

        if (fd < 0 || !m) {
                printf("connect failed: %s\n", strerror(-fd));
                return 1;
        }
        snprintf(h.name, sizeof(h.name), "%s", name);
        r = kvt_msg_send(fd, KVT_MSG_HELLO, 1, &h, sizeof(h));
        if (r == 0)
                r = kvt_msg_recv_timeout(fd, m, 3000);
        if (r < 0 || m->hdr.type != KVT_MSG_WELCOME) {
                printf("dropped\n");
                return 1;
        }
        printf("welcome client_id=%u vram_grant=%llu\n", m->u.welcome.client_id,
               (unsigned long long)m->u.welcome.vram_grant_bytes);
        fflush(stdout);
        hold();
        free(m);
        return 0;
}

/* One control request: the CTL_END status, or -errno when none came. */
static int ctl(int fd, uint16_t type, const char *text, struct kvt_msg *m) {
        int r = kvt_msg_send(fd, type, 1, text, text ? strlen(text) + 1 : 0);

        while (r == 0 && (r = kvt_msg_recv_timeout(fd, m, 5000)) == 0)
                if (m->hdr.type == KVT_MSG_CTL_END)
                        return m->u.ctl_end.status;
        return r < 0 ? r : -EPROTO;
}

static int mode_set(const char *text) {
        struct kvt_msg *m = malloc(sizeof(*m));
        int fd = conn(), r;

        if (fd < 0 || !m) {
                printf("connect failed: %s\n", strerror(-fd));
                return 1;
        }
        r = ctl(fd, KVT_MSG_CTL_SET, text, m);
        printf("status %d\n", r);
        free(m);
        return r == -ETIMEDOUT || r == -ECONNRESET ? 1 : 0;
}

/* Opens up to n connections into fds; returns how many connected. */
static int open_many(int n, int *fds, int *ret_failed) {
        int ok = 0;

        *ret_failed = 0;
        for (int i = 0; i < n; i++) {
                fds[i] = conn();
                if (fds[i] >= 0)
                        ok++;
                else
                        (*ret_failed)++;
        }
        return ok;
}

static int mode_conns(int n) {
        int *fds = calloc((size_t)n, sizeof(int)), failed, opened, closed = 0;

        if (!fds)
                return 99;
        opened = open_many(n, fds, &failed);
        printf("opened %d failed %d\n", opened, failed);
        fflush(stdout);
        hold();
        for (int i = 0; i < n; i++)
                closed += fds[i] >= 0 && closed_by_daemon(fds[i]);
        printf("closed %d of %d\n", closed, opened);
        return 0;
}

static int mode_noread(int n) {
        int *fds = calloc((size_t)n, sizeof(int)), failed, opened, closed = 0, small = 4096;

        if (!fds)
                return 99;
        opened = open_many(n, fds, &failed);
        for (int i = 0; i < n; i++)
                if (fds[i] >= 0) {
                        (void)setsockopt(fds[i], SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
                        /* requests until the socket takes no more: their replies are
                         * more than the daemon's send buffer holds */
                        for (int k = 0; k < 1024; k++)
                                if (kvt_msg_send(fds[i], KVT_MSG_CTL_STATUS, 1, NULL, 0) < 0)
                                        break;
                }
        printf("asked %d failed %d\n", opened, failed);
        fflush(stdout);
        hold();
        for (int i = 0; i < n; i++)
                closed += fds[i] >= 0 && closed_by_daemon(fds[i]);
        printf("closed %d of %d\n", closed, opened);
        return 0;
}

static int mode_flood(int n, const char *text) {
        struct kvt_msg *m = malloc(sizeof(*m));
        int fd = -1, sent = 0;

        if (!m)
                return 99;
        for (int i = 0; i < n; i++) {
                if (fd < 0 && (fd = conn()) < 0)
                        break;
                if (ctl(fd, KVT_MSG_CTL_SET, text, m) == -ECONNRESET) {
                        close(fd);
                        fd = -1;
                }
                sent++;
        }
        printf("sent %d\n", sent);
        free(m);
        return 0;
}

static int cmp_u64(const void *a, const void *b) {
        uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

        return x < y ? -1 : x > y;
}

/* Control round trips on one connection (a fresh one where one fails):
 * CTL_STATUS, or CTL_SET text. */
static int mode_rtt(int n, const char *text) {
        struct kvt_msg *m = malloc(sizeof(*m));
        uint64_t *us = calloc((size_t)n, sizeof(*us));
        int fd = -1, failed = 0;

        if (!m || !us)
                return 99;
        for (int i = 0; i < n; i++) {
                uint64_t t0 = now_ns();

                if (fd < 0)
                        fd = conn();
                if (fd < 0 || ctl(fd, text ? KVT_MSG_CTL_SET : KVT_MSG_CTL_STATUS, text, m) != 0) {
                        failed++;
                        if (fd >= 0)
                                close(fd);
                        fd = -1;
                }
                us[i] = (now_ns() - t0) / 1000;
        }
        qsort(us, (size_t)n, sizeof(*us), cmp_u64);
        printf("rtt n=%d failed=%d p50_us=%llu p99_us=%llu max_us=%llu\n", n, failed,
               (unsigned long long)us[n / 2], (unsigned long long)us[(size_t)n * 99 / 100],
               (unsigned long long)us[n - 1]);
        return failed ? 1 : 0;
}

/* --as UID[:GID]: the attacker is an ordinary user. */
static int drop_to(const char *spec) {
        char *end;
        unsigned long uid = strtoul(spec, &end, 10), gid = uid;

        if (*end == ':')
                gid = strtoul(end + 1, &end, 10);
        if (*end)
                return 99;
        if (geteuid() != 0) {
                fprintf(stderr, "hostile: --as needs root\n");
                return 77;
        }
        if (setgroups(0, NULL) < 0 || setgid((gid_t)gid) < 0 || setuid((uid_t)uid) < 0) {
                perror("hostile: dropping privileges");
                return 99;
        }
        return 0;
}

int main(int argc, char **argv) {
        struct rlimit rl;
        const char *mode;
        int i = 1, r;

        while (i + 1 < argc && argv[i][0] == '-') {
                if (strcmp(argv[i], "--as") == 0 && (r = drop_to(argv[i + 1])) != 0)
                        return r;
                if (strcmp(argv[i], "--hold") == 0)
                        hold_ms = (unsigned)strtoul(argv[i + 1], NULL, 10);
                i += 2;
        }
        if (argc - i < 2)
                return 99;
        sock_path = argv[i];
        mode = argv[i + 1];
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
                rl.rlim_cur = rl.rlim_max;
                (void)setrlimit(RLIMIT_NOFILE, &rl);
        }
        setvbuf(stdout, NULL, _IOLBF, 0);
        if (strcmp(mode, "hello") == 0 && argc - i == 3)
                return mode_hello(argv[i + 2]);
        if (strcmp(mode, "set") == 0 && argc - i == 3)
                return mode_set(argv[i + 2]);
        if (strcmp(mode, "conns") == 0 && argc - i == 3)
                return mode_conns(atoi(argv[i + 2]));
        if (strcmp(mode, "noread") == 0 && argc - i == 3)
                return mode_noread(atoi(argv[i + 2]));
        if (strcmp(mode, "flood") == 0 && argc - i == 4)
                return mode_flood(atoi(argv[i + 2]), argv[i + 3]);
        if (strcmp(mode, "rtt") == 0 && (argc - i == 3 || argc - i == 4) && atoi(argv[i + 2]) > 0)
                return mode_rtt(atoi(argv[i + 2]), argc - i == 4 ? argv[i + 3] : NULL);
        fprintf(stderr, "hostile: bad usage\n");
        return 99;
}
