/* SPDX-License-Identifier: MIT */
/*
 * KVTIER_STANDALONE=1: one engine, no service.  The daemon's registry and
 * planner (daemon/registry.c, daemon/planner.c, policy/lru.c) run on a
 * thread of the engine ("kvtier-policy"), and the shim's client talks to it
 * over a socketpair with the same protocol it speaks to kvtierd; the mover
 * and everything else are unchanged.  The VRAM budget is
 * KVTIER_VRAM_BUDGET (bytes), else 80% of the device.  kvtierctl cannot
 * see such a process.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "conf.h"
#include "heat-reader.h"
#include "log.h"
#include "planner.h"
#include "policy.h"
#include "protocol.h"
#include "registry.h"
#include "shim.h"
#include "standalone.h"
#include "util.h"

#define STANDALONE_TICK_MS 50
#define STANDALONE_MIGRATION_RATE (40ull << 30)
#define STANDALONE_MAX_PEERS 8 /* one per reconnect; older ones are gone by then */

/* The few settings registry and planner read (conf.h's getters): no
 * kvtierd.conf here. */
struct conf {
        struct budget_spec budget;
        struct policy_params policy; /* KVTIER_POLICY, default hybrid */
};

void conf_gpu_budget(const struct conf *c, int device, struct budget_spec *ret, bool *ret_configured) {
        (void)device;
        *ret = c->budget;
        if (ret_configured)
                *ret_configured = false;
}

unsigned conf_tick_ms(const struct conf *c) {
        (void)c;
        return STANDALONE_TICK_MS;
}

uint64_t conf_max_migration_rate(const struct conf *c) {
        (void)c;
        return STANDALONE_MIGRATION_RATE;
}

void conf_policy_params(const struct conf *c, struct policy_params *ret) {
        *ret = c->policy;
}

unsigned conf_heat_half_life_ticks(const struct conf *c) {
        return c->policy.heat_half_life_ticks;
}

uint64_t conf_overlap_bytes(const struct conf *c) {
        return (uint64_t)c->policy.overlap_chunks * KVT_CHUNK_BYTES;
}

/* No host budgets: evictions go to the GPU's home node. */
bool conf_node_budget(const struct conf *c, int node, struct budget_spec *ret) {
        (void)c, (void)node;
        *ret = (struct budget_spec){0};
        return false;
}

uint64_t conf_nodes_limited(const struct conf *c) {
        (void)c;
        return 0;
}

uint64_t conf_capture_margin(const struct conf *c, uint64_t budget_bytes) {
        (void)c;
        return budget_bytes / 4 / KVT_CHUNK_BYTES * KVT_CHUNK_BYTES;
}

unsigned conf_protect_min_ticks(const struct conf *c) {
        return c->policy.protect_min_ticks;
}

/* One process: no [client.NAME] sections. */
size_t conf_n_clients(const struct conf *c) {
        (void)c;
        return 0;
}

bool conf_client(const struct conf *c, const char *name, unsigned *ret_priority, uint64_t *ret_quota_bytes) {
        (void)c, (void)name, (void)ret_priority, (void)ret_quota_bytes;
        return false;
}

struct peer {
        int fd;
        struct client *client;
        struct heat_table *heat; /* the shim's counters, as kvtierd reads them */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int wake[2] = { -1, -1 };
static int adopt_fd = -1; /* handed over by standalone_connect(), under lock */
static bool running;
static struct conf conf;

static void peer_drop(struct registry *reg, struct peer *p) {
        if (p->client)
                registry_client_free(reg, p->client);
        heat_table_free(p->heat);
        close(p->fd);
        *p = (struct peer){ .fd = -1 };
}

static bool ops_ready(struct client *c, void *userdata) {
        (void)c;
        (void)userdata;
        return true;
}

static void ops_send(struct client *c, const struct kvt_order *o, void *userdata) {
        struct peer *p = client_userdata(c);

        (void)userdata;
        /* A full socket loses the order; the mover reports nothing for it
         * and the chunks stay pending, as with a stuck client of kvtierd. */
        kvt_msg_send(p->fd, KVT_MSG_ORDER, 0, o, sizeof(*o));
}

/* Maps the heat table that came with HEAT_TABLE (fd is then the table's).
 * One that cannot be used leaves the process tiered without heat. */
static void take_heat_table(struct peer *p, const struct kvt_heat_table *t, int *fd) {
        const char *why = NULL;
        int r;

        if (p->heat || *fd < 0)
                return;
        r = heat_table_new(*fd, t, &p->heat, &why);
        if (r < 0)
                log_warning("Standalone policy: heat table unusable (%s), tiering without heat.",
                            why ? why : strerror(-r));
        else
                *fd = -1;
}

/* Handles one message; returns < 0 to drop the peer. */
static int dispatch(struct registry *reg, struct peer *p, const struct kvt_msg *m, int *fd) {
        if (!p->client) {
                /* no [capture] section here: the shim's own rules stay */
                struct kvt_welcome w = { .tick_ms = STANDALONE_TICK_MS,
                                         .capture_min_size = shim_cfg.rules.min_size,
                                         .capture_after = shim_cfg.rules.capture_after,
                                         .max_captured = shim_cfg.rules.max_captured,
                                         .capture_apis = classify_rules_apis(&shim_cfg.rules) };
                const struct gpu_stats *g;
                int r;

                if (m->hdr.type != KVT_MSG_HELLO)
                        return -EPROTO;
                r = registry_client_new(reg, getpid(), getuid(), &m->u.hello, p, &p->client);
                if (r < 0)
                        return r;
                g = registry_gpu(reg, m->u.hello.device);
                w.client_id = client_id(p->client);
                w.vram_budget_bytes = g ? g->budget_bytes : 0;
                return kvt_msg_send(p->fd, KVT_MSG_WELCOME, m->hdr.seq, &w, sizeof(w));
        }
        switch (m->hdr.type) {
        case KVT_MSG_REGION_ADD:
                return registry_region_add(reg, p->client, &m->u.region_add);
        case KVT_MSG_REGION_DEL:
                registry_region_del(reg, p->client, m->u.region_del.region_id);
                return 0;
        case KVT_MSG_ORDER_DONE:
                return registry_order_done(reg, p->client, &m->u.order_done) == -ENOENT ? -EPROTO : 0;
        case KVT_MSG_HINT:
                registry_hint(reg, p->client, &m->u.hint);
                return 0;
        case KVT_MSG_DEVICE:
                registry_device_seen(reg, &m->u.device);
                return 0;
        case KVT_MSG_HEAT_TABLE:
                take_heat_table(p, &m->u.heat_table, fd);
                return 0;
        default:
                return -EPROTO;
        }
}

static void serve(struct registry *reg, struct peer *p, struct kvt_msg *m) {
        for (;;) {
                int fd = -1, r = kvt_msg_recv_fd(p->fd, m, &fd);

                if (r == -EAGAIN)
                        return;
                if (r == 0)
                        r = dispatch(reg, p, m, &fd);
                if (fd >= 0)
                        close(fd);
                if (r < 0) {
                        log_debug("Standalone policy: dropping a connection: %s", strerror(-r));
                        peer_drop(reg, p);
                        return;
                }
        }
}

static void adopt(struct registry *reg, struct peer peers[]) {
        char buf[64];
        int fd;

        while (read(wake[0], buf, sizeof(buf)) > 0)
                ;
        pthread_mutex_lock(&lock);
        fd = adopt_fd;
        adopt_fd = -1;
        pthread_mutex_unlock(&lock);
        if (fd < 0)
                return;
        /* One shim, one current connection: an older one is stale. */
        for (size_t i = 0; i < STANDALONE_MAX_PEERS; i++)
                if (peers[i].fd >= 0)
                        peer_drop(reg, &peers[i]);
        peers[0] = (struct peer){ .fd = fd };
}

static void *policy_main(void *arg) {
        static const struct planner_ops ops = { .client_ready = ops_ready, .send_order = ops_send };
        struct peer peers[STANDALONE_MAX_PEERS];
        struct registry *reg = NULL;
        struct planner *pl = NULL;
        struct kvt_msg *m = malloc(sizeof(*m));
        uint64_t next_tick = now_ns();

        (void)arg;
        for (size_t i = 0; i < STANDALONE_MAX_PEERS; i++)
                peers[i] = (struct peer){ .fd = -1 };
        if (!m || registry_new(&conf, &reg) < 0 || planner_new(&conf, &pl) < 0) {
                log_error("Standalone policy: out of memory, not tiering.");
                free(m);
                return NULL;
        }
        for (;;) {
                struct pollfd fds[1 + STANDALONE_MAX_PEERS] = { { .fd = wake[0], .events = POLLIN } };
                uint64_t now = now_ns();
                int timeout = now >= next_tick ? 0 : (int)((next_tick - now) / 1000000) + 1;

                for (size_t i = 0; i < STANDALONE_MAX_PEERS; i++)
                        fds[1 + i] = (struct pollfd){ .fd = peers[i].fd, .events = POLLIN };
                if (poll(fds, 1 + STANDALONE_MAX_PEERS, timeout) < 0 && errno != EINTR)
                        break;
                if (fds[0].revents & POLLIN)
                        adopt(reg, peers);
                for (size_t i = 0; i < STANDALONE_MAX_PEERS; i++)
                        if (peers[i].fd >= 0 && fds[1 + i].fd == peers[i].fd && fds[1 + i].revents)
                                serve(reg, &peers[i], m);
                if (now_ns() >= next_tick) {
                        /* as kvtierd's tick: heat, plan, next tick */
                        for (size_t i = 0; i < STANDALONE_MAX_PEERS; i++)
                                if (peers[i].heat && peers[i].client)
                                        (void)heat_table_collect_client(peers[i].heat, reg, peers[i].client);
                        planner_tick(pl, reg, &ops, NULL);
                        registry_advance_tick(reg);
                        next_tick = now_ns() + STANDALONE_TICK_MS * 1000000ull;
                }
        }
        log_error("Standalone policy stopped: %s", strerror(errno));
        return NULL;
}

static int start_locked(void) {
        pthread_attr_t attr;
        pthread_t t;
        const char *v;
        uint64_t bytes;
        int r;

        conf.budget = (struct budget_spec){ .percent = 80 };
        policy_params_default(POLICY_HYBRID, &conf.policy);
        if ((v = getenv("KVTIER_POLICY"))) {
                int k = policy_kind_from_name(v);
                if (k < 0)
                        log_warning("Invalid KVTIER_POLICY=%s (lru, heat, window, hybrid), using hybrid.", v);
                else
                        policy_params_default((enum policy_kind)k, &conf.policy);
        }
        v = getenv("KVTIER_VRAM_BUDGET");
        if (v) {
                if (parse_bytes(v, &bytes) < 0 || bytes == 0)
                        log_warning("Invalid KVTIER_VRAM_BUDGET=%s (bytes: 8G, 512M ...), using 80%% of the GPU.", v);
                else
                        conf.budget = (struct budget_spec){ .bytes = bytes };
        }
        if (pipe2(wake, O_NONBLOCK | O_CLOEXEC) < 0)
                return -errno;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        r = kvt_thread_create(&t, &attr, policy_main, NULL); /* the engine's signals are the engine's */
        pthread_attr_destroy(&attr);
        if (r < 0) {
                close(wake[0]);
                close(wake[1]);
                wake[0] = wake[1] = -1;
                return r;
        }
        pthread_setname_np(t, "kvtier-policy");
        running = true;
        return 0;
}

/* The child of fork() has no policy thread: it starts its own if it allocates. */
static void atfork_child(void) {
        pthread_mutex_init(&lock, NULL);
        running = false;
        adopt_fd = -1;
        wake[0] = wake[1] = -1; /* the parent's pipe is the parent's; its fds leak here */
}

static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void setup_atfork(void) {
        pthread_atfork(NULL, NULL, atfork_child);
}

int standalone_connect(void) {
        int sv[2], r = 0;

        pthread_once(&atfork_once, setup_atfork);
        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) < 0)
                return -errno;
        pthread_mutex_lock(&lock);
        if (!running)
                r = start_locked();
        if (r == 0) {
                if (adopt_fd >= 0)
                        close(adopt_fd);
                adopt_fd = sv[1];
                if (write(wake[1], "", 1) < 0 && errno != EAGAIN)
                        r = -errno;
        }
        pthread_mutex_unlock(&lock);
        if (r < 0) {
                close(sv[0]);
                close(sv[1]);
                return r;
        }
        return sv[0];
}
