/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include "listen.h"
#include "log.h"

/* Whether a daemon answers on path: 1 yes, 0 no (a stale socket), -ENOENT
 * when it went away, -errno otherwise. */
static int socket_live(const struct sockaddr_un *sa) {
        int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0), r;

        if (fd < 0)
                return -errno;
        r = connect(fd, (const struct sockaddr *)sa, sizeof(*sa)) == 0 ? 1 : -errno;
        close(fd);
        return r == -ECONNREFUSED ? 0 : r;
}

/* The directory part of path into dir ("/" for a file at the root, "." for none). */
static void path_dir(const char *path, char *dir, size_t size) {
        char *slash;

        snprintf(dir, size, "%s", path);
        slash = strrchr(dir, '/');
        if (!slash)
                snprintf(dir, size, ".");
        else if (slash == dir)
                dir[1] = '\0';
        else
                *slash = '\0';
}

static int mkdir_parent(const char *path) {
        char dir[sizeof(((struct sockaddr_un *)0)->sun_path)];

        path_dir(path, dir, sizeof(dir));
        for (char *q = dir + 1; *q; q++)
                if (*q == '/') {
                        *q = '\0';
                        if (mkdir(dir, 0755) < 0 && errno != EEXIST)
                                return -errno;
                        *q = '/';
                }
        return mkdir(dir, 0755) < 0 && errno != EEXIST ? -errno : 0;
}

/* Refuses a socket directory that someone else could swap the socket in:
 * owned by another user than root or this daemon's, or writable by group
 * or others (sticky or not: a name squatted there would still be served
 * to clients as kvtierd's).  Returns 0 or -EPERM / -errno (logged). */
static int check_dir(const char *path) {
        char dir[sizeof(((struct sockaddr_un *)0)->sun_path)];
        struct stat st;

        path_dir(path, dir, sizeof(dir));
        if (stat(dir, &st) < 0)
                return log_error_errno(errno, "Failed to check the directory %s: %s", dir, strerror(errno));
        if (!S_ISDIR(st.st_mode))
                return log_error_errno(ENOTDIR, "Failed to use %s: %s is not a directory.", path, dir);
        if (st.st_uid != 0 && st.st_uid != geteuid())
                return log_error_errno(EPERM,
                                       "Refusing socket directory %s: owned by uid %u, not root or uid %u.",
                                       dir, (unsigned)st.st_uid, (unsigned)geteuid());
        if (st.st_mode & (S_IWGRP | S_IWOTH))
                return log_error_errno(EPERM,
                                       "Refusing socket directory %s: mode %04o lets others replace the "
                                       "socket (make it 0755 or stricter).",
                                       dir, (unsigned)(st.st_mode & 07777));
        return 0;
}

/* bind() with the file made 0660 (owner and group: clients) as it is
 * created.  Returns 0 or -errno. */
static int bind_0660(int fd, const struct sockaddr_un *sa) {
        mode_t old = umask(0117);
        int r = bind(fd, (const struct sockaddr *)sa, sizeof(*sa)) < 0 ? -errno : 0;

        umask(old);
        return r;
}

/* What is at the path bind() found in use: removed only when it is a
 * socket nobody answers on.  Returns 0 to bind again, or -errno (logged). */
static int clear_stale(const struct sockaddr_un *sa) {
        const char *path = sa->sun_path;
        struct stat st;
        int r;

        if (lstat(path, &st) < 0)
                return errno == ENOENT
                               ? 0
                               : log_error_errno(errno, "Failed to check %s: %s", path, strerror(errno));
        if (!S_ISSOCK(st.st_mode))
                return log_error_errno(EADDRINUSE,
                                       "Refusing to use %s: it exists and is not a socket; not removing it.",
                                       path);
        r = socket_live(sa);
        if (r > 0)
                return log_error_errno(EADDRINUSE, "Another kvtierd is listening on %s; refusing to start.",
                                       path);
        if (r == -ENOENT)
                return 0;
        if (r < 0)
                return log_error_errno(r, "Failed to probe existing socket %s: %s; not removing it.", path,
                                       strerror(-r));
        log_info("Removing stale socket %s.", path);
        if (unlink(path) < 0 && errno != ENOENT)
                return log_error_errno(errno, "Failed to remove stale socket %s: %s", path, strerror(errno));
        return 0;
}

static int listen_bind(struct listen_socket *ls, const char *path) {
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        int r;

        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
        r = mkdir_parent(path);
        if (r < 0)
                return log_error_errno(r, "Failed to create the directory of %s: %s", path, strerror(-r));
        r = check_dir(path);
        if (r < 0)
                return r;
        ls->fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (ls->fd < 0)
                return log_error_errno(errno, "Failed to create socket: %s", strerror(errno));
        r = bind_0660(ls->fd, &sa);
        if (r == -EADDRINUSE) {
                r = clear_stale(&sa);
                if (r < 0)
                        return r;
                r = bind_0660(ls->fd, &sa);
        }
        if (r < 0)
                return log_error_errno(r, "Failed to bind %s: %s", path, strerror(-r));
        snprintf(ls->path, sizeof(ls->path), "%s", path);
        if (listen(ls->fd, SOMAXCONN) < 0)
                return log_error_errno(errno, "Failed to listen on %s: %s", path, strerror(errno));
        return 0;
}

/* Serves fd, a listening socket someone else made (what says who).
 * Returns 0 or -errno (logged). */
static int listen_adopt(struct listen_socket *ls, int fd, const char *what) {
        struct sockaddr_un sa;
        socklen_t len = sizeof(sa);

        if (sd_is_socket_unix(fd, SOCK_SEQPACKET, 1, NULL, 0) <= 0)
                return log_error_errno(EINVAL, "Failed to use %s: not a listening SEQPACKET socket.", what);
        if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) < 0 || fcntl(fd, F_SETFD, FD_CLOEXEC) < 0)
                return log_error_errno(errno, "Failed to set up %s: %s", what, strerror(errno));
        ls->fd = fd;
        if (getsockname(fd, (struct sockaddr *)&sa, &len) == 0 &&
            len > offsetof(struct sockaddr_un, sun_path))
                snprintf(ls->path, sizeof(ls->path), "%s", sa.sun_path);
        return 0;
}

/* Takes the socket systemd passed, if any: 1 taken, 0 none, -errno. */
static int listen_activated(struct listen_socket *ls) {
        int n = sd_listen_fds(1), r;

        if (n <= 0)
                return n;
        if (n > 1)
                return log_error_errno(EINVAL,
                                       "Failed to use socket activation: %d sockets passed, expected 1.", n);
        r = listen_adopt(ls, SD_LISTEN_FDS_START, "socket activation");
        if (r < 0)
                return r;
        ls->activated = true;
        return 1;
}

int listen_open(struct listen_socket *ls, int listen_fd, const char *path) {
        int r;

        *ls = (struct listen_socket){.fd = -1};
        if (listen_fd >= 0) {
                r = listen_adopt(ls, listen_fd, "--listen-fd");
                ls->handed = r == 0;
                return r;
        }
        r = listen_activated(ls);
        if (r != 0)
                return r < 0 ? r : 0;
        return listen_bind(ls, path);
}

/* The socket file of --listen-fd, and its directory once empty. */
static void unlink_handed(const char *path) {
        char dir[sizeof(((struct sockaddr_un *)0)->sun_path)];
        char *slash;

        snprintf(dir, sizeof(dir), "%s", path);
        slash = strrchr(dir, '/');
        if (!dir[0] || unlink(dir) < 0 || !slash || slash == dir)
                return;
        *slash = '\0';
        (void)rmdir(dir); /* fails, as it should, where anything else lives */
}

void listen_unlink_fd(int fd) {
        struct sockaddr_un sa;
        socklen_t len = sizeof(sa);

        if (getsockname(fd, (struct sockaddr *)&sa, &len) == 0 &&
            len > offsetof(struct sockaddr_un, sun_path) && sa.sun_path[0] == '/')
                unlink_handed(sa.sun_path);
}

void listen_close(struct listen_socket *ls) {
        if (ls->fd < 0 || ls->activated)
                return;
        close(ls->fd);
        ls->fd = -1;
        if (ls->handed)
                unlink_handed(ls->path);
        else if (ls->path[0])
                unlink(ls->path);
}
