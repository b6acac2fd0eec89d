/* SPDX-License-Identifier: MIT */
/*
 * KVTIER_STANDALONE=1: one engine, no service.  The first connection starts
 * a kvtierd of this process's own as a child, and client.c connects to it as
 * to any daemon.  The shim binds the daemon's socket in a private directory
 * and hands it over listening (kvtierd --listen-fd), so the first HELLO waits
 * in the backlog instead of racing the daemon's start-up.  The daemon also
 * gets the read end of a pipe whose write end only this process holds
 * (--lifeline-fd): it exits when the engine does, however the engine ends.
 * It reads the system kvtierd.conf as the service would (built-in defaults
 * without one), with KVTIER_STANDALONE=BYTES as its [gpu] vram_budget and the
 * shim's log level as its own; it logs to the engine's stderr.
 */
#include "config.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "log.h"
#include "state.h"
#include "standalone.h"
#include "util.h"

/* Where the child finds what it was handed. */
#define DAEMON_LISTEN_FD   3
#define DAEMON_LIFELINE_FD 4

/* The first WELCOME of a daemon just started waits for its start-up
 * (config, topology, event loop): milliseconds, far more under sanitizers
 * on a loaded host.  A daemon that fails to start closes the socket and
 * ends the wait at once. */
#define DAEMON_START_TIMEOUT_MS 5000

/* Finds kvtierd: beside the build tree's libkvtier.so (build/.libs/ ->
 * build/kvtierd), else the installed one.  Returns 0 or -ENOENT; own->binary
 * names the last candidate either way. */
static int find_daemon(void) {
        struct shim_standalone *own = &kvt_shim()->standalone;
        Dl_info info;
        const char *slash;

        if (dladdr((void *)find_daemon, &info) && info.dli_fname && (slash = strrchr(info.dli_fname, '/')) &&
            slash - info.dli_fname >= 6 && strncmp(slash - 6, "/.libs", 6) == 0) {
                snprintf(own->binary, sizeof(own->binary), "%.*s/../kvtierd", (int)(slash - info.dli_fname),
                         info.dli_fname);
                if (access(own->binary, X_OK) == 0)
                        return 0;
        }
        snprintf(own->binary, sizeof(own->binary), "%s/kvtierd", KVT_SBINDIR);
        return access(own->binary, X_OK) == 0 ? 0 : -ENOENT;
}

/* Moves fd above the child's fixed numbers, so that dup2 onto them cannot
 * clobber it.  Returns the fd or -errno (fd closed). */
static int fd_above_fixed(int fd) {
        int n, r;

        if (fd > DAEMON_LIFELINE_FD)
                return fd;
        n = fcntl(fd, F_DUPFD_CLOEXEC, DAEMON_LIFELINE_FD + 1);
        r = n < 0 ? -errno : n;
        close(fd);
        return r;
}

/* A listening socket bound in a new directory of mode 0700.  Returns the fd
 * or -errno. */
static int listen_private(void) {
        struct shim_standalone *own = &kvt_shim()->standalone;
        struct sockaddr_un addr = {.sun_family = AF_UNIX};
        const char *base = getenv("XDG_RUNTIME_DIR");
        int fd, r;

        if (!base || base[0] != '/' || strlen(base) + sizeof("/kvtier.XXXXXX") > sizeof(own->dir))
                base = "/tmp";
        snprintf(own->dir, sizeof(own->dir), "%s/kvtier.XXXXXX", base);
        if (!mkdtemp(own->dir))
                return -errno;
        snprintf(own->socket_path, sizeof(own->socket_path), "%s/kvtierd.sock", own->dir);
        memcpy(addr.sun_path, own->socket_path, sizeof(addr.sun_path));
        fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        if (fd < 0)
                r = -errno;
        else if (bind(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0 || listen(fd, SOMAXCONN) < 0) {
                r = -errno;
                close(fd);
        } else if ((r = fd_above_fixed(fd)) >= 0)
                return r;
        unlink(own->socket_path);
        rmdir(own->dir);
        own->socket_path[0] = '\0';
        return r;
}

/* The engine's environment less what would make the daemon load the shim
 * or speak to the engine's service manager.  Returns a malloc'd array of
 * the engine's strings, or NULL. */
static char **daemon_environ(void) {
        static const char *const dropped[] = {
                "LD_PRELOAD=", "NOTIFY_SOCKET=", "WATCHDOG_PID=", "WATCHDOG_USEC="};
        size_t n = 0, k = 0;
        char **env;

        while (environ[n])
                n++;
        env = malloc((n + 1) * sizeof(*env));
        if (!env)
                return NULL;
        for (size_t i = 0; i < n; i++) {
                bool drop = false;

                for (size_t j = 0; j < ELEMENTSOF(dropped); j++)
                        drop = drop || strncmp(environ[i], dropped[j], strlen(dropped[j])) == 0;
                if (!drop)
                        env[k++] = environ[i];
        }
        env[k] = NULL;
        return env;
}

/* Runs argv (own->binary) with fds 3 and 4 handed over, stdin and stdout on
 * /dev/null, nothing else open, default signals, in a process group of its
 * own (a Ctrl-C the engine survives must not end it).  posix_spawn: no code
 * of ours runs between fork and exec.  Returns 0 or -errno. */
static int spawn_daemon(char *const argv[], int listen_fd, int lifeline_rd) {
        struct shim_standalone *own = &kvt_shim()->standalone;
        posix_spawn_file_actions_t fa;
        posix_spawnattr_t attr;
        sigset_t none, all;
        char **env = daemon_environ();
        int r;

        if (!env)
                return -ENOMEM;
        sigemptyset(&none);
        sigfillset(&all);
        posix_spawn_file_actions_init(&fa);
        posix_spawnattr_init(&attr);
        if (!(r = posix_spawn_file_actions_adddup2(&fa, listen_fd, DAEMON_LISTEN_FD)) &&
            !(r = posix_spawn_file_actions_adddup2(&fa, lifeline_rd, DAEMON_LIFELINE_FD)) &&
            !(r = posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0)) &&
            !(r = posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0)) &&
            !(r = posix_spawn_file_actions_addclosefrom_np(&fa, DAEMON_LIFELINE_FD + 1)) &&
            !(r = posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK |
                                                          POSIX_SPAWN_SETSIGDEF)) &&
            !(r = posix_spawnattr_setpgroup(&attr, 0)) && !(r = posix_spawnattr_setsigmask(&attr, &none)) &&
            !(r = posix_spawnattr_setsigdefault(&attr, &all)))
                r = posix_spawn(&own->pid, own->binary, &fa, &attr, argv, env);
        posix_spawnattr_destroy(&attr);
        posix_spawn_file_actions_destroy(&fa);
        free(env);
        return -r;
}

/* Starts this process's kvtierd.  Returns 0 or -errno. */
static int start_daemon(void) {
        struct shim_standalone *own = &kvt_shim()->standalone;
        static const char *const levels[] = {"err", "warning", "notice", "info", "debug"};
        char listen_arg[32], lifeline_arg[32], level_arg[32], budget[64];
        char *argv[] = {own->binary, listen_arg, lifeline_arg, level_arg, budget, NULL};
        int pipefd[2], lfd, r;

        r = find_daemon();
        if (r < 0)
                return r;
        snprintf(listen_arg, sizeof(listen_arg), "--listen-fd=%d", DAEMON_LISTEN_FD);
        snprintf(lifeline_arg, sizeof(lifeline_arg), "--lifeline-fd=%d", DAEMON_LIFELINE_FD);
        snprintf(level_arg, sizeof(level_arg), "--log-level=%s",
                 levels[kvt_log_get_max_level() - KVT_LOG_ERR]);
        snprintf(budget, sizeof(budget), "--set=gpu.vram_budget=%llu",
                 (unsigned long long)kvt_shim()->cfg.vram_budget_bytes);
        if (!kvt_shim()->cfg.vram_budget_bytes)
                argv[4] = NULL; /* the daemon's own */
        if (pipe2(pipefd, O_CLOEXEC) < 0)
                return -errno;
        lfd = listen_private();
        pipefd[0] = fd_above_fixed(pipefd[0]);
        r = lfd < 0 ? lfd : pipefd[0] < 0 ? pipefd[0] : spawn_daemon(argv, lfd, pipefd[0]);
        if (lfd >= 0)
                close(lfd); /* the daemon's alone: once it is gone, connecting fails at once */
        if (pipefd[0] >= 0)
                close(pipefd[0]);
        if (r < 0) {
                close(pipefd[1]);
                if (lfd >= 0) {
                        unlink(own->socket_path);
                        rmdir(own->dir);
                        own->socket_path[0] = '\0'; /* messages name the binary */
                }
                return r;
        }
        own->lifeline_fd = pipefd[1];
        log_info("Started kvtierd (pid %d) on %s.", (int)own->pid, own->socket_path);
        return 0;
}

int standalone_daemon(const char **ret_socket_path, int *ret_timeout_ms) {
        struct shim_standalone *own = &kvt_shim()->standalone;

        if (own->err == 0 && own->pid == 0) {
                own->err = start_daemon();
                if (own->err == 0)
                        *ret_timeout_ms = DAEMON_START_TIMEOUT_MS;
        } else if (own->err == 0 && own->pid > 0 && waitpid(own->pid, NULL, WNOHANG) != 0) {
                /* gone (reaped here, or by the engine): clean up after it */
                unlink(own->socket_path);
                rmdir(own->dir);
                own->err = -ECONNREFUSED;
        }
        if (own->err < 0)
                return own->err;
        *ret_socket_path = own->socket_path;
        return 0;
}

const char *standalone_where(void) {
        struct shim_standalone *own = &kvt_shim()->standalone;

        return own->socket_path[0] ? own->socket_path : own->binary;
}

void standalone_atfork_child(void) {
        struct shim_standalone *own = &kvt_shim()->standalone;

        /* The parent's daemon lives as long as the parent: the child may
         * connect to it as a client of its own, but neither holds it up nor
         * reaps it. */
        if (own->lifeline_fd >= 0)
                close(own->lifeline_fd);
        own->lifeline_fd = -1;
        if (own->pid > 0)
                own->pid = -1;
}
