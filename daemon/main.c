/* SPDX-License-Identifier: MIT */
/*
 * kvtierd: decides per 2 MiB chunk which captured memory lives in VRAM.
 *
 * Exit codes:
 *   0  clean shutdown (SIGTERM, SIGINT, end of file on --lifeline-fd), or
 *      --help / --version / --print-config, or --check-config found nothing wrong
 *   1  runtime failure (socket in use by a live daemon, event loop error, ...)
 *   2  usage or configuration error (a bad -o, --listen-fd or --lifeline-fd included;
 *      with --check-config, any problem it printed)
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <systemd/sd-daemon.h>
#include <systemd/sd-event.h>
#define SD_JOURNAL_SUPPRESS_LOCATION /* the sink's own file and line say nothing */
#include <systemd/sd-journal.h>
#include <sys/uio.h>
#include <unistd.h>

#include "conf.h"
#include "hugepages.h"
#include "listen.h"
#include "log.h"
#include "planner.h"
#include "registry.h"
#include "server.h"
#include "ssd.h"
#include "status.h"
#include "topology.h"
#include "util.h"

#define EXIT_RUNTIME 1
#define EXIT_USAGE   2

#define DEFAULT_CONFIG KVT_SYSCONFDIR "/kvtier/kvtierd.conf"

struct daemon {
        struct conf *conf;
        struct registry *registry;
        struct planner *planner;
        struct server *server;
        struct ssd_store *ssd;
        sd_event *event;
        sd_event_source *tick;
        sd_event_source *lifeline;
        sd_event_source *ssd_grace; /* the end of the kept SSD spills' [ssd] reattach_grace */
        struct status_info info;
        struct topology topology;
        uint64_t last_plan_ns; /* CLOCK_MONOTONIC */
        bool config_error; /* daemon_setup() failed on the configuration: exit 2 */
};

struct options {
        const char *config;
        bool config_given;
        const char *socket;
        const char *log_level;
        bool print_config;
        bool check_config;
        const char **set; /* -o SECTION.KEY=VALUE, in order; room for argc */
        size_t n_set;
        int listen_fd;   /* --listen-fd, or -1 */
        int lifeline_fd; /* --lifeline-fd, or -1 */
};

static void help(void) {
        printf("Usage: kvtierd [OPTIONS]\n\n"
               "Places captured GPU memory in VRAM or host memory, per 2 MiB chunk.\n\n"
               "  -c, --config=FILE      Configuration file (default %s;\n"
               "                         a missing default file means built-in defaults)\n"
               "  -o, --set=SECTION.KEY=VALUE\n"
               "                         Set one key as the file would (gpu.vram_budget=8G,\n"
               "                         gpu.1.vram_budget=50%%, policy.name=lru); after the file,\n"
               "                         in order; may be given several times\n"
               "  -s, --socket=PATH      Socket path, overrides [daemon] socket\n"
               "      --log-level=LEVEL  err, warning, notice, info or debug; overrides [daemon] log_level\n"
               "      --listen-fd=N      Serve the listening AF_UNIX SOCK_SEQPACKET socket inherited\n"
               "                         as fd N instead of [daemon] socket; at exit its file is\n"
               "                         removed, and its directory if that leaves it empty\n"
               "      --lifeline-fd=N    Exit 0 at end of file on fd N (the read end of a pipe):\n"
               "                         when every holder of its write end is gone\n"
               "      --print-config     Print every key with its effective value and help, then exit\n"
               "      --check-config     Check the configuration file and -o options strictly and exit:\n"
               "                         each problem as FILE:LINE: ..., unknown sections and keys\n"
               "                         included (the daemon itself warns of those and goes on);\n"
               "                         exit 0 when there is none, 2 otherwise\n"
               "  -h, --help             Show this help\n"
               "      --version          Show the version\n\n"
               "Host NUMA nodes are read through libnuma, or from $KVTIER_SYSFS_ROOT/devices/system/node\n"
               "where that is set; peers' cgroups (for [client.NAME] unit =) from\n"
               "$KVTIER_PROC_ROOT/PID/cgroup, default /proc.\n"
               "KVTIER_STANDALONE=1 makes the shim start kvtierd with --listen-fd and --lifeline-fd.\n\n"
               "Exit status: 0 clean shutdown (SIGTERM, SIGINT, end of the lifeline), 1 runtime failure,\n"
               "2 usage or configuration error (a bad option value included; --check-config: a problem).\n",
               DEFAULT_CONFIG);
}

/* Parses an inherited descriptor's number for option name.  Returns 0 or
 * -EINVAL (logged). */
static int parse_fd(const char *name, const char *v, int *ret_fd) {
        char *end;
        long n;

        errno = 0;
        n = strtol(v, &end, 10);
        if (errno || end == v || *end || n < 0 || n > INT_MAX || fcntl((int)n, F_GETFD) < 0) {
                log_error("Invalid --%s=%s: not an open file descriptor.", name, v);
                return -EINVAL;
        }
        *ret_fd = (int)n;
        return 0;
}

/* Returns 1 to run, 0 to exit successfully, -EINVAL for a usage error, or
 * -ENOMEM.  o->set is allocated: free it in any case. */
static int parse_argv(int argc, char *argv[], struct options *o) {
        enum {
                ARG_LOG_LEVEL = 0x100,
                ARG_VERSION,
                ARG_PRINT_CONFIG,
                ARG_CHECK_CONFIG,
                ARG_LISTEN_FD,
                ARG_LIFELINE_FD
        };
        static const struct option longopts[] = {
                {"config", required_argument, NULL, 'c'},
                {"set", required_argument, NULL, 'o'},
                {"socket", required_argument, NULL, 's'},
                {"log-level", required_argument, NULL, ARG_LOG_LEVEL},
                {"listen-fd", required_argument, NULL, ARG_LISTEN_FD},
                {"lifeline-fd", required_argument, NULL, ARG_LIFELINE_FD},
                {"help", no_argument, NULL, 'h'},
                {"version", no_argument, NULL, ARG_VERSION},
                {"print-config", no_argument, NULL, ARG_PRINT_CONFIG},
                {"check-config", no_argument, NULL, ARG_CHECK_CONFIG},
                {},
        };
        int c;

        *o = (struct options){.config = DEFAULT_CONFIG, .listen_fd = -1, .lifeline_fd = -1};
        o->set = calloc((size_t)argc, sizeof(*o->set));
        if (!o->set)
                return log_error_errno(ENOMEM, "Failed to parse the command line: %s", strerror(ENOMEM));
        while ((c = getopt_long(argc, argv, "c:o:s:h", longopts, NULL)) >= 0)
                switch (c) {
                case 'c':
                        o->config = optarg;
                        o->config_given = true;
                        break;
                case 'o':
                        o->set[o->n_set++] = optarg;
                        break;
                case ARG_LISTEN_FD:
                        if (parse_fd("listen-fd", optarg, &o->listen_fd) < 0)
                                return -EINVAL;
                        if (sd_is_socket_unix(o->listen_fd, SOCK_SEQPACKET, 1, NULL, 0) <= 0) {
                                log_error("Invalid --listen-fd=%s: not a listening SEQPACKET socket.", optarg);
                                return -EINVAL;
                        }
                        break;
                case ARG_LIFELINE_FD:
                        if (parse_fd("lifeline-fd", optarg, &o->lifeline_fd) < 0)
                                return -EINVAL;
                        break;
                case 's':
                        o->socket = optarg;
                        break;
                case ARG_LOG_LEVEL:
                        o->log_level = optarg;
                        break;
                case 'h':
                        help();
                        return 0;
                case ARG_VERSION:
                        printf("kvtierd %s\n", PACKAGE_VERSION);
                        return 0;
                case ARG_PRINT_CONFIG:
                        o->print_config = true;
                        break;
                case ARG_CHECK_CONFIG:
                        o->check_config = true;
                        break;
                default:
                        return -EINVAL;
                }
        if (optind < argc) {
                log_error("Unexpected argument: %s", argv[optind]);
                return -EINVAL;
        }
        return 1;
}

/* Returns 0 or -errno (logged); every failure here is a configuration error. */
static int load_config(struct daemon *d, const struct options *o) {
        int r = conf_new(&d->conf), ret;

        if (r < 0)
                return log_error_errno(r, "Failed to allocate config: %s", strerror(-r));
        conf_set_strict(d->conf, o->check_config);
        ret = conf_load(d->conf, o->config, o->config_given);
        /* A check goes on past bad values, to name every problem once. */
        if (ret < 0 && (ret != -EINVAL || !o->check_config))
                return ret;
        for (size_t i = 0; i < o->n_set && (ret == 0 || o->check_config); i++)
                if (conf_set_option(d->conf, o->set[i]) < 0)
                        ret = -EINVAL;
        if (o->socket && conf_set(d->conf, "daemon", "socket", o->socket, "--socket") < 0)
                ret = -EINVAL;
        if (o->log_level && conf_set(d->conf, "daemon", "log_level", o->log_level, "--log-level") < 0)
                ret = -EINVAL;
        if (ret < 0)
                return ret;
        if (!o->check_config)
                kvt_log_setup("kvtierd", conf_log_level(d->conf));
        if (conf_check(d->conf) > 0 && o->check_config)
                return -EINVAL;
        return 0;
}

/* kvtierd --check-config: every problem of the file and the options, as
 * FILE:LINE: ... on stderr (no "kvtierd: " before it, as compilers print
 * them), then a verdict.  Returns the exit status. */
static int check_config(struct daemon *d, const struct options *o) {
        bool exists = access(o->config, F_OK) == 0;
        int r;

        kvt_log_setup("", KVT_LOG_WARNING);
        r = load_config(d, o);
        if (r < 0) {
                fprintf(stderr, "%s: not valid.\n", o->config);
                return EXIT_USAGE;
        }
        if (!exists)
                printf("%s: no such file; built-in defaults%s are valid.\n", o->config,
                       o->n_set ? " and -o" : "");
        else
                printf("%s: valid.\n", o->config);
        return EXIT_SUCCESS;
}

/* Descriptors beside the connections: the listening socket, epoll, timers,
 * signals, /proc reads, planner threads' needs. */
#define FD_SLACK 64

/* Raises the soft RLIMIT_NOFILE to the hard limit (kvtierd polls with
 * epoll, never select()), and warns where even that cannot hold
 * max_connections: each shim connection also holds its heat table. */
static void raise_fd_limit(const struct conf *c) {
        struct conf_limits l;
        struct rlimit rl;
        uint64_t want;

        conf_limits(c, &l);
        want = 2ull * l.max_connections + FD_SLACK;
        if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
                return;
        if (rl.rlim_cur < rl.rlim_max) {
                rl.rlim_cur = rl.rlim_max;
                (void)setrlimit(RLIMIT_NOFILE, &rl);
                (void)getrlimit(RLIMIT_NOFILE, &rl);
        }
        if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want)
                log_warning("RLIMIT_NOFILE is %llu, below the %llu descriptors that [daemon] "
                            "max_connections = %u may need: accepts will pause when they run out "
                            "(raise LimitNOFILE=).",
                            (unsigned long long)rl.rlim_cur, (unsigned long long)want, l.max_connections);
}

/* Reads the host's NUMA nodes: from the sysfs tree KVTIER_SYSFS_ROOT names
 * (tests' fixtures), else through libnuma; where libnuma says NUMA is not
 * available (no NUMA in the kernel, or get_mempolicy() refused), from /sys
 * as before libnuma was asked (no node directories there: no nodes known).
 * Returns 0 or -errno (logged). */
static int load_topology(struct daemon *d) {
        const char *root = getenv("KVTIER_SYSFS_ROOT"), *from = "libnuma";
        int r = -EOPNOTSUPP;

        if (!root || !*root) {
                r = topology_read(&topology_numa_ops, NULL, &d->topology);
                root = "/sys";
        }
        if (r == -EOPNOTSUPP) {
                from = root;
                r = topology_load(root, &d->topology);
        }
        if (r < 0)
                return log_error_errno(r, "Failed to read the NUMA topology from %s: %s", from, strerror(-r));
        log_debug("NUMA nodes from %s: %#llx.", from, (unsigned long long)d->topology.present);
        return 0;
}

static const struct planner_ops planner_ops = {
        .client_ready = server_client_ready,
        .send_order = server_send_order,
        .send_grant = server_send_grant,
        .send_pace = server_send_pace,
};

/* Reads the heat, then plans: a whole tick, or again within one. */
static void daemon_plan(struct daemon *d, bool new_tick) {
        int r;

        r = server_collect_heat(d->server);
        if (r < 0)
                log_warning_errno(r, "Failed to read access heat this tick: %s, ignoring.", strerror(-r));
        r = new_tick ? planner_tick(d->planner, d->registry, &planner_ops, NULL)
                     : planner_replan(d->planner, d->registry, &planner_ops, NULL);
        if (r < 0)
                log_warning_errno(r, "Failed to plan this tick: %s, ignoring.", strerror(-r));
        d->last_plan_ns = now_ns();
}

/* A shim's DEMAND: faults arrived; served now rather than at the next tick,
 * at most once a millisecond. */
#define DEMAND_MIN_NS 1000000ull
static void on_demand(void *userdata) {
        struct daemon *d = userdata;

        if (now_ns() - d->last_plan_ns >= DEMAND_MIN_NS)
                daemon_plan(d, false);
}

static int on_tick(sd_event_source *s, uint64_t usec, void *userdata) {
        struct daemon *d = userdata;
        int r;

        daemon_plan(d, true);
        registry_advance_tick(d->registry);
        r = sd_event_source_set_time_relative(s, (uint64_t)conf_tick_ms(d->conf) * 1000);
        if (r >= 0)
                r = sd_event_source_set_enabled(s, SD_EVENT_ONESHOT);
        if (r < 0)
                return log_error_errno(r, "Failed to re-arm the tick timer: %s", strerror(-r));
        return 0;
}

/* End of file on --lifeline-fd: whoever started this daemon for itself is
 * gone, and so is every client it could have. */
static int on_lifeline(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        struct daemon *d = userdata;
        char buf[256];
        ssize_t n;

        while ((n = read(fd, buf, sizeof(buf))) > 0)
                ; /* nothing is written there; what is, is not a message */
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
                return 0;
        log_info("The lifeline (fd %d) closed: the process that started kvtierd is gone.", fd);
        return sd_event_exit(d->event, 0);
}

/* Watches --lifeline-fd, if given.  Returns 0 or -errno (logged). */
static int watch_lifeline(struct daemon *d, int fd) {
        int r;

        if (fd < 0)
                return 0;
        if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) < 0 || fcntl(fd, F_SETFD, FD_CLOEXEC) < 0)
                return log_error_errno(errno, "Failed to set up --lifeline-fd=%d: %s", fd, strerror(errno));
        r = sd_event_add_io(d->event, &d->lifeline, fd, EPOLLIN, on_lifeline, d);
        if (r < 0)
                return log_error_errno(r, "Failed to watch --lifeline-fd=%d: %s", fd, strerror(-r));
        return 0;
}

/* The grace of SSD spills kept for their clients ended: those not taken
 * back go. */
static int on_ssd_grace(sd_event_source *es, uint64_t usec, void *userdata) {
        struct daemon *d = userdata;
        uint64_t next = ssd_store_expire(d->ssd, now_ns());

        if (next) {
                (void)sd_event_source_set_time(es, next / 1000);
                (void)sd_event_source_set_enabled(es, SD_EVENT_ONESHOT);
        }
        return 0;
}

/* Opens the SSD store (its sweep reads /proc where the server does) and
 * arms the timer of the spills it kept at start, if any.  Returns 0 or
 * -errno (logged). */
static int ssd_setup(struct daemon *d) {
        uint64_t next;
        int r = ssd_store_new(d->conf, server_proc_root(d->server), &d->ssd);

        if (r < 0)
                return log_error_errno(r, "Failed to allocate the SSD store: %s", strerror(-r));
        server_set_ssd_store(d->server, d->ssd);
        d->info.ssd_json = ssd_store_json;
        d->info.ssd = d->ssd;
        next = ssd_store_expire(d->ssd, now_ns());
        if (!next)
                return 0;
        r = sd_event_add_time(d->event, &d->ssd_grace, CLOCK_MONOTONIC, next / 1000, 100000, on_ssd_grace,
                              d);
        if (r < 0)
                return log_error_errno(r, "Failed to add the SSD grace timer: %s", strerror(-r));
        return 0;
}

/* Sets up the event loop, signals, tick and socket.  Returns 0 or -errno (logged). */
static int daemon_setup(struct daemon *d, const struct options *o) {
        sigset_t mask;
        int r;

        sigemptyset(&mask);
        sigaddset(&mask, SIGTERM);
        sigaddset(&mask, SIGINT);
        sigprocmask(SIG_BLOCK, &mask, NULL);

        r = sd_event_default(&d->event);
        if (r < 0)
                return log_error_errno(r, "Failed to create event loop: %s", strerror(-r));
        if ((r = sd_event_add_signal(d->event, NULL, SIGTERM, NULL, NULL)) < 0 ||
            (r = sd_event_add_signal(d->event, NULL, SIGINT, NULL, NULL)) < 0)
                return log_error_errno(r, "Failed to watch signals: %s", strerror(-r));
        (void)sd_event_set_watchdog(d->event, true);

        r = registry_new(d->conf, &d->registry);
        if (r >= 0)
                r = planner_new(d->conf, &d->planner);
        if (r < 0)
                return log_error_errno(r, "Failed to allocate daemon state: %s", strerror(-r));
        planner_set_topology(d->planner, &d->topology);
        /* A host budget that cannot resolve is a configuration error, found
         * before the socket takes clients. */
        r = registry_set_topology(d->registry, &d->topology);
        if (r < 0) {
                d->config_error = true;
                return r;
        }
        d->info = (struct status_info){
                .conf = d->conf,
                .tick_ms = conf_tick_ms(d->conf),
                .start_ns = now_ns(),
                .client_heat = server_client_heat};
        r = server_new(d->event, d->conf, d->registry, &d->info, o->listen_fd, &d->server);
        if (r < 0)
                return r;
        d->info.socket = server_socket_path(d->server);
        d->info.connections = server_connection_stats(d->server);
        if (getenv("KVTIER_PROC_ROOT") && *getenv("KVTIER_PROC_ROOT"))
                server_set_proc_root(d->server, getenv("KVTIER_PROC_ROOT"));
        r = ssd_setup(d);
        if (r < 0)
                return r;
        server_set_demand_handler(d->server, on_demand, d);
        r = watch_lifeline(d, o->lifeline_fd);
        if (r < 0)
                return r;

        r = sd_event_add_time_relative(d->event, &d->tick, CLOCK_MONOTONIC,
                                       (uint64_t)conf_tick_ms(d->conf) * 1000, 1000, on_tick, d);
        if (r < 0)
                return log_error_errno(r, "Failed to add the tick timer: %s", strerror(-r));
        return 0;
}

static void daemon_done(struct daemon *d) {
        sd_event_source_disable_unref(d->lifeline);
        sd_event_source_disable_unref(d->tick);
        sd_event_source_disable_unref(d->ssd_grace);
        ssd_store_stop(d->ssd); /* the peers' SSD files stay for the next kvtierd */
        server_free(d->server); /* before the registry: peers release their clients */
        ssd_store_free(d->ssd); /* after the server: its peers end their SSD sessions */
        planner_free(d->planner);
        registry_free(d->registry);
        sd_event_unref(d->event);
        conf_free(d->conf);
}

/* The journal's native protocol: the message with its fields (peer, uid,
 * client, region) as fields of the entry, so that `journalctl
 * KVTIER_PEER_UID=1001` finds them.  At most 8 fields. */
static int journal_sink(int level, const char *message, const char *const *fields) {
        char msg[2100], prio[16];
        struct iovec iov[11];
        size_t n = 0;

        snprintf(msg, sizeof(msg), "MESSAGE=%s", message);
        snprintf(prio, sizeof(prio), "PRIORITY=%d", level);
        iov[n++] = (struct iovec){.iov_base = msg, .iov_len = strlen(msg)};
        iov[n++] = (struct iovec){.iov_base = prio, .iov_len = strlen(prio)};
        iov[n++] = (struct iovec){.iov_base = (char *)"SYSLOG_IDENTIFIER=kvtierd", .iov_len = 25};
        for (size_t i = 0; fields && fields[i] && n < ELEMENTSOF(iov); i++)
                iov[n++] = (struct iovec){.iov_base = (char *)fields[i], .iov_len = strlen(fields[i])};
        return sd_journal_sendv(iov, (int)n);
}

int main(int argc, char *argv[]) {
        struct daemon d = {0};
        struct options o;
        int r, ret = EXIT_RUNTIME;

        kvt_log_setup("kvtierd", KVT_LOG_INFO);
        kvt_log_set_journal_sink(journal_sink);
        /* stderr may be a pipe that loses its reader first (an engine's, for
         * KVTIER_STANDALONE): a log line is then lost, not the daemon, as
         * under systemd's IgnoreSIGPIPE.  Sockets send with MSG_NOSIGNAL. */
        signal(SIGPIPE, SIG_IGN);
        r = parse_argv(argc, argv, &o);
        if (r <= 0) {
                ret = r == 0 ? EXIT_SUCCESS : r == -ENOMEM ? EXIT_RUNTIME : EXIT_USAGE;
                goto finish;
        }
        if (o.check_config) {
                ret = check_config(&d, &o);
                goto finish;
        }
        if (load_config(&d, &o) < 0) {
                ret = EXIT_USAGE;
                goto finish;
        }
        if (o.print_config) {
                conf_print(d.conf, stdout);
                ret = EXIT_SUCCESS;
                goto finish;
        }
        raise_fd_limit(d.conf);
        if (load_topology(&d) < 0)
                goto finish;
        {
                struct conf_ssd ssd;
                const char *root = getenv("KVTIER_SYSFS_ROOT");

                conf_ssd(d.conf, &ssd);
                (void)hugepages_reserve(root && *root ? root : "/sys", d.topology.present, ssd.hugepages);
        }
        if (daemon_setup(&d, &o) < 0) {
                if (d.config_error)
                        ret = EXIT_USAGE;
                goto finish;
        }

        log_info("Listening on %s: policy %s, tick %u ms.", d.info.socket, conf_policy_name(d.conf), d.info.tick_ms);
        sd_notifyf(false, "READY=1\nSTATUS=Listening on %s, policy %s, tick %u ms", d.info.socket,
                   conf_policy_name(d.conf), d.info.tick_ms);
        r = sd_event_loop(d.event);
        sd_notify(false, "STOPPING=1\nSTATUS=Shutting down");
        if (r < 0)
                log_error_errno(r, "Failed to run the event loop: %s", strerror(-r));
        else {
                log_info("Shutting down.");
                ret = EXIT_SUCCESS;
        }
finish:
        if (!d.server && o.listen_fd >= 0)
                listen_unlink_fd(o.listen_fd);
        daemon_done(&d);
        free(o.set);
        return ret;
}
