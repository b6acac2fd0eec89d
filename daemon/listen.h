/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The listening socket: adopted from --listen-fd or systemd's socket
 * activation, or made at a path.  A path is only used in a directory that
 * nobody but its owner (root or kvtierd's user) may write to; the file is
 * created 0660 by bind() itself (no chmod by path that a swapped symlink
 * could redirect), and what is in the way is removed only when it is a
 * socket that nobody answers on.
 */

#include <stdbool.h>
#include <sys/un.h>

struct listen_socket {
        int fd;         /* -1 until opened */
        bool activated; /* systemd owns the socket file */
        bool handed;    /* --listen-fd: file and directory were made for this daemon alone */
        char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
};

/* Listens on listen_fd (a listening SEQPACKET socket, kvtierd --listen-fd)
 * if it is >= 0, else on the socket passed by systemd (LISTEN_FDS), else on
 * path.  Returns 0, -EADDRINUSE when another daemon answers on path or
 * something not a socket is there, -EPERM for a directory others may
 * write to, or -errno (all logged). */
int listen_open(struct listen_socket *ls, int listen_fd, const char *path);

/* Closes the socket and removes its file unless systemd owns it (a
 * listen_fd's directory goes too, if that leaves it empty).  Safe to call
 * on one never opened. */
void listen_close(struct listen_socket *ls);

/* For a daemon that exits before it serves listen_fd: removes the socket's
 * file as listen_close() would. */
void listen_unlink_fd(int fd);
