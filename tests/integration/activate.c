/* SPDX-License-Identifier: MIT */
/*
 * activate: plays systemd for kvtierd's tests.  Creates the listening
 * SEQPACKET socket of kvtierd.socket and a notification socket, starts the
 * command with LISTEN_FDS/LISTEN_PID/NOTIFY_SOCKET set as systemd would
 * (WATCHDOG_USEC passes through from the environment; the notification
 * socket is world-writable like systemd's, for a daemon run as another
 * user), and prints every sd_notify datagram it receives, one line per
 * assignment, until the command exits.  Exit status: the command's, or 99
 * for a setup failure.
 *
 *   activate SOCKET NOTIFY_SOCKET COMMAND [ARGS...]
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

static int bound_socket(int type, const char *path) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        int fd = socket(AF_UNIX, type, 0);

        if (fd < 0 || strlen(path) >= sizeof(sa.sun_path))
                return -1;
        strcpy(sa.sun_path, path);
        unlink(path);
        if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
                return -1;
        return fd;
}

/* Prints what arrived on the notification socket; returns datagrams read. */
static int drain(int fd) {
        char buf[4096];
        ssize_t n;
        int count = 0;

        while ((n = recv(fd, buf, sizeof(buf) - 1, MSG_DONTWAIT)) >= 0) {
                buf[n] = '\0';
                for (char *save = NULL, *l = strtok_r(buf, "\n", &save); l; l = strtok_r(NULL, "\n", &save))
                        printf("%s\n", l);
                count++;
        }
        fflush(stdout);
        return count;
}

int main(int argc, char **argv) {
        int lfd, nfd, status;
        pid_t pid;

        if (argc < 4) {
                fprintf(stderr, "usage: activate SOCKET NOTIFY_SOCKET COMMAND [ARGS...]\n");
                return 99;
        }
        lfd = bound_socket(SOCK_SEQPACKET, argv[1]);
        nfd = bound_socket(SOCK_DGRAM, argv[2]);
        if (lfd < 0 || nfd < 0 || chmod(argv[1], 0660) < 0 || chmod(argv[2], 0777) < 0 ||
            listen(lfd, 16) < 0) {
                fprintf(stderr, "activate: setting up sockets failed: %s\n", strerror(errno));
                return 99;
        }
        pid = fork();
        if (pid < 0)
                return 99;
        if (pid == 0) {
                char s[32];

                if (dup2(lfd, 3) < 0)
                        _exit(99);
                snprintf(s, sizeof(s), "%d", (int)getpid());
                setenv("LISTEN_PID", s, 1);
                setenv("LISTEN_FDS", "1", 1);
                setenv("NOTIFY_SOCKET", argv[2], 1);
                execvp(argv[3], argv + 3);
                _exit(99);
        }
        close(lfd);
        printf("PID=%d\n", (int)pid);
        fflush(stdout);
        for (;;) {
                struct pollfd p = { .fd = nfd, .events = POLLIN };
                pid_t w;

                poll(&p, 1, 50);
                drain(nfd);
                w = waitpid(pid, &status, WNOHANG);
                if (w == pid)
                        break;
        }
        drain(nfd);
        unlink(argv[1]);
        unlink(argv[2]);
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
