/* SPDX-License-Identifier: MIT */
/*
 * kvtierd: decides per 2 MiB chunk which captured memory lives in VRAM.
 *
 * Exit codes:
 *   0  clean shutdown (SIGTERM, SIGINT), or --help / --version
 *   1  runtime failure (socket in use by a live daemon, event loop error, ...)
 *   2  usage or configuration error
 */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <systemd/sd-daemon.h>
#include <systemd/sd-event.h>

#include "conf.h"
#include "log.h"
#include "planner.h"
#include "registry.h"
#include "server.h"
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
        sd_event *event;
        sd_event_source *tick;
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
};

static void help(void) {
        printf("Usage: kvtierd [OPTIONS]\n\n"
               "Places captured GPU memory in VRAM or host memory, per 2 MiB chunk.\n\n"
               "  -c, --config=FILE      Configuration file (default %s;\n"
               "                         a missing default file means built-in defaults)\n"
               "  -s, --socket=PATH      Socket path, overrides [daemon] socket\n"
               "      --log-level=LEVEL  err, warning, notice, info or debug; overrides [daemon] log_level\n"
               "      --print-config     Print every key with its effective value and help, then exit\n"
               "  -h, --help             Show this help\n"
               "      --version          Show the version\n\n"
               "Host NUMA nodes are read from $KVTIER_SYSFS_ROOT/devices/system/node (default /sys).\n\n"
               "Exit status: 0 clean shutdown, 1 runtime failure, 2 usage or configuration error.\n",
               DEFAULT_CONFIG);
}

/* Returns 1 to run, 0 to exit successfully, -EINVAL for a usage error. */
static int parse_argv(int argc, char *argv[], struct options *o) {
        enum { ARG_LOG_LEVEL = 0x100, ARG_VERSION, ARG_PRINT_CONFIG };
        static const struct option longopts[] = {
                {"config", required_argument, NULL, 'c'},
                {"socket", required_argument, NULL, 's'},
                {"log-level", required_argument, NULL, ARG_LOG_LEVEL},
                {"help", no_argument, NULL, 'h'},
                {"version", no_argument, NULL, ARG_VERSION},
                {"print-config", no_argument, NULL, ARG_PRINT_CONFIG},
                {},
        };
        int c;

        *o = (struct options){.config = DEFAULT_CONFIG};
        while ((c = getopt_long(argc, argv, "c:s:h", longopts, NULL)) >= 0)
                switch (c) {
                case 'c':
                        o->config = optarg;
                        o->config_given = true;
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
        int r = conf_new(&d->conf);

        if (r < 0)
                return log_error_errno(r, "Failed to allocate config: %s", strerror(-r));
        r = conf_load(d->conf, o->config, o->config_given);
        if (r < 0)
                return r;
        if (o->socket && conf_set(d->conf, "daemon", "socket", o->socket, "--socket") < 0)
                return -EINVAL;
        if (o->log_level && conf_set(d->conf, "daemon", "log_level", o->log_level, "--log-level") < 0)
                return -EINVAL;
        kvt_log_setup("kvtierd", conf_log_level(d->conf));
        return 0;
}

/* Reads the host's NUMA nodes (KVTIER_SYSFS_ROOT, for tests, or /sys).
 * Returns 0 or -errno (logged). */
static int load_topology(struct daemon *d) {
        const char *root = getenv("KVTIER_SYSFS_ROOT");
        int r = topology_load(root && *root ? root : "/sys", &d->topology);

        if (r < 0)
                return log_error_errno(r, "Failed to read the NUMA topology under %s: %s", root, strerror(-r));
        return 0;
}

static const struct planner_ops planner_ops = {
        .client_ready = server_client_ready,
        .send_order = server_send_order,
        .send_grant = server_send_grant,
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

/* Sets up the event loop, signals, tick and socket.  Returns 0 or -errno (logged). */
static int daemon_setup(struct daemon *d) {
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
        r = server_new(d->event, d->conf, d->registry, &d->info, &d->server);
        if (r < 0)
                return r;
        d->info.socket = server_socket_path(d->server);
        server_set_demand_handler(d->server, on_demand, d);

        r = sd_event_add_time_relative(d->event, &d->tick, CLOCK_MONOTONIC,
                                       (uint64_t)conf_tick_ms(d->conf) * 1000, 1000, on_tick, d);
        if (r < 0)
                return log_error_errno(r, "Failed to add the tick timer: %s", strerror(-r));
        return 0;
}

static void daemon_done(struct daemon *d) {
        sd_event_source_disable_unref(d->tick);
        server_free(d->server); /* before the registry: peers release their clients */
        planner_free(d->planner);
        registry_free(d->registry);
        sd_event_unref(d->event);
        conf_free(d->conf);
}

int main(int argc, char *argv[]) {
        struct daemon d = {0};
        struct options o;
        int r, ret = EXIT_RUNTIME;

        kvt_log_setup("kvtierd", KVT_LOG_INFO);
        r = parse_argv(argc, argv, &o);
        if (r <= 0)
                return r == 0 ? EXIT_SUCCESS : EXIT_USAGE;
        if (load_config(&d, &o) < 0) {
                conf_free(d.conf);
                return EXIT_USAGE;
        }
        if (o.print_config) {
                conf_print(d.conf, stdout);
                conf_free(d.conf);
                return EXIT_SUCCESS;
        }
        if (load_topology(&d) < 0) {
                conf_free(d.conf);
                return EXIT_RUNTIME;
        }
        if (daemon_setup(&d) < 0) {
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
        daemon_done(&d);
        return ret;
}
