/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "client.h"
#include "hooks.h"
#include "heat.h"
#include "log.h"
#include "protocol.h"
#include "real.h"
#include "state.h"
#include "standalone.h"
#include "util.h"

/* After a failed connect, allocations do not try again for this long, so a
 * missing daemon costs one failed connect(2) a second, not one per call. */
#define RECONNECT_BACKOFF_NS (1000ull * 1000 * 1000)

static int wait_writable(int fd, int timeout_ms) {
        struct pollfd p = { .fd = fd, .events = POLLOUT };
        int r;

        do
                r = poll(&p, 1, timeout_ms);
        while (r < 0 && errno == EINTR);
        if (r < 0)
                return -errno;
        if (r == 0)
                return -ETIMEDOUT;
        return (p.revents & (POLLERR | POLLHUP)) ? -ECONNRESET : 0;
}

static int send_locked(int fd, uint16_t type, const void *payload, size_t len);

/* The daemon, as messages name it. */
static const char *where_locked(void) {
        return kvt_shim()->cfg.standalone ? standalone_where() : kvt_shim()->cfg.socket_path;
}

/* A REGION_ADD is preceded, once per connection and device (the HELLO's
 * too, for its home node), by a DEVICE message with that device's total
 * and home node.  A device not noted yet (a VMM mapping comes first) is
 * announced again once it is. */
static int announce_device_locked(int fd, int dev) {
        struct shim_client *c = &kvt_shim()->client;
        struct kvt_device d = { .device = dev, .host_node = -1 };
        int r;

        if (dev < 0 || dev >= KVT_MAX_GPUS || (c->devices_announced & (1ull << dev)))
                return 0;
        if (c->devices_known & (1ull << dev)) {
                d.total_bytes = c->device_total[dev];
                d.host_node = c->device_node[dev];
        }
        r = send_locked(fd, KVT_MSG_DEVICE, &d, sizeof(d));
        if (r == 0 && (c->devices_known & (1ull << dev)))
                c->devices_announced |= 1ull << dev;
        return r;
}

/* Sends with the lock held; the caller drops the connection on failure. */
static int send_locked(int fd, uint16_t type, const void *payload, size_t len) {
        struct shim_client *c = &kvt_shim()->client;
        int r;

        if (type == KVT_MSG_REGION_ADD) {
                r = announce_device_locked(fd, ((const struct kvt_region_add *)payload)->device);
                if (r < 0)
                        return r;
        }
        r = kvt_msg_send(fd, type, ++c->conn_seq, payload, len);

        if (r == -EAGAIN) {
                r = wait_writable(fd, kvt_shim()->cfg.timeout_ms);
                if (r == 0)
                        r = kvt_msg_send(fd, type, c->conn_seq, payload, len);
        }
        return r;
}

static void drop_locked(int err) {
        struct shim_client *c = &kvt_shim()->client;

        if (c->conn_fd < 0)
                return;
        log_warning("Lost kvtierd at %s: %s; captured memory stays where it is, and new allocations go to host memory until it is back.",
                    where_locked(), strerror(err < 0 ? -err : err));
        /* shutdown() wakes the mover, which finds its fd stale and closes it
         * itself, so that no one reuses the number under it. */
        shutdown(c->conn_fd, SHUT_RDWR);
        c->conn_fd = -1;
        c->next_attempt_ns = now_ns() + RECONNECT_BACKOFF_NS;
        c->outage_logged = true;
        kvt_shim()->owner.forget_registration();
}

/* The HELLO of this process: learnt from CUDA once, on an allocating thread. */
static const struct kvt_hello *hello_locked(void) {
        struct shim_client *c = &kvt_shim()->client;
        const struct kvt_cudart *rt = real_cudart();
        size_t free_bytes = 0, total_bytes = 0;
        int dev = 0;

        if (c->hello_known)
                return &c->hello;
        if (rt) {
                /* the shim's own calls: never answered by its hooks (the
                 * capacity view would come back here) */
                PASS(rt->cudaGetDevice(&dev));
                if (PASS(rt->cudaMemGetInfo(&free_bytes, &total_bytes)) != cudaSuccess)
                        total_bytes = 0;
        }
        c->hello = (struct kvt_hello){
                .proto_version = KVT_PROTO_VERSION,
                .device = dev,
                .device_total_bytes = total_bytes,
        };
        if (prctl(PR_GET_NAME, c->hello.name) < 0)
                strcpy(c->hello.name, "?");
        c->hello_known = true;
        return &c->hello;
}

bool client_was_welcomed(void) {
        struct shim_client *c = &kvt_shim()->client;

        return atomic_load(&c->welcomed);
}

bool client_ceiling_refuses(uint64_t captured_bytes, size_t size) {
        struct shim_client *c = &kvt_shim()->client;
        uint64_t ceiling = atomic_load(&c->granted_bytes), n;

        if (ceiling == 0 || captured_bytes <= ceiling)
                return false;
        n = atomic_fetch_add(&c->refused_allocs, 1);
        if (n % 1024 == 0)
                log_warning("Allocation of %zu bytes refused: %llu bytes captured would pass this process's "
                            "ceiling of %llu (the VRAM budget and the host memory kvtierd grants); "
                            "%llu refused so far.",
                            size, (unsigned long long)captured_bytes, (unsigned long long)ceiling,
                            (unsigned long long)n + 1);
        return true;
}

int client_capacity(uint64_t *ret_bytes) {
        struct shim_client *c = &kvt_shim()->client;
        uint64_t b;

        if (client_ensure() < 0)
                return -ENOTCONN;
        b = atomic_load(&c->granted_bytes);
        if (b == 0)
                return -ENODATA;
        *ret_bytes = b;
        return 0;
}

static int handshake(int fd, int timeout_ms, uint64_t *ret_grant) {
        struct shim_client *c = &kvt_shim()->client;
        struct kvt_msg *m;
        int r;

        r = send_locked(fd, KVT_MSG_HELLO, hello_locked(), sizeof(struct kvt_hello));
        if (r < 0)
                return r;
        m = malloc(sizeof(*m));
        if (!m)
                return -ENOMEM;
        r = kvt_msg_recv_timeout(fd, m, timeout_ms);
        if (r == 0 && m->hdr.type != KVT_MSG_WELCOME)
                r = -EPROTO;
        if (r == 0) {
                log_debug("Registered with kvtierd as client %u, %llu bytes of VRAM granted.",
                          m->u.welcome.client_id, (unsigned long long)m->u.welcome.vram_grant_bytes);
                *ret_grant = m->u.welcome.vram_grant_bytes;
                atomic_store(&c->granted_bytes,
                             m->u.welcome.vram_budget_bytes + m->u.welcome.host_grant_bytes);
                atomic_store(&c->welcomed, true);
                classify_rules_apply(&kvt_shim()->rules, kvt_shim()->rules_from_env,
                                     m->u.welcome.capture_min_size, m->u.welcome.capture_after,
                                     m->u.welcome.max_captured, m->u.welcome.capture_apis);
        }
        free(m);
        return r;
}

/* Passes the heat table to a fresh connection, once.  A failure costs the
 * daemon its heat for this connection, nothing else. */
static void heat_announce_locked(int fd) {
        struct shim_client *c = &kvt_shim()->client;
        struct kvt_heat_table t;
        int hfd = heat_table_fd(&t), r;

        if (hfd < 0)
                return;
        r = kvt_msg_send_fd(fd, KVT_MSG_HEAT_TABLE, ++c->conn_seq, &t, sizeof(t), hfd);
        if (r < 0)
                log_warning_errno(r, "Failed to pass the heat table to kvtierd: %s, ignoring.", strerror(-r));
}

static int connect_locked(void) {
        struct shim_client *c = &kvt_shim()->client;
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        const char *path = kvt_shim()->cfg.socket_path;
        int timeout_ms = kvt_shim()->cfg.timeout_ms, fd, r;
        uint64_t grant = 0;

        /* a kvtierd of this process's own (standalone.c) */
        if (kvt_shim()->cfg.standalone && (r = standalone_daemon(&path, &timeout_ms)) < 0)
                return r;
        fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -errno;
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
        /* AF_UNIX connect completes at once or fails (EAGAIN: backlog full). */
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
                r = -errno;
                close(fd);
                return r;
        }
        r = handshake(fd, timeout_ms, &grant);
        if (r < 0) {
                close(fd);
                return r;
        }
        heat_announce_locked(fd);
        c->conn_fd = fd;
        c->conn_gen++;
        c->devices_announced = 0;
        memset(c->grant_cap, 0, sizeof(c->grant_cap));
        memset(c->grant_used, 0, sizeof(c->grant_used));
        c->grant_cap[c->hello.device] = grant;
        return 0;
}

/* Hands a fresh connection to the mover, starting it if none runs. */
static int mover_wake_locked(void) {
        struct shim_client *c = &kvt_shim()->client;
        int r;

        if (c->mover_running) {
                pthread_cond_broadcast(&c->conn_changed);
                return 0;
        }
        r = kvt_shim()->owner.start_mover();
        if (r < 0) {
                close(c->conn_fd);
                c->conn_fd = -1;
                return r;
        }
        c->mover_running = true;
        return 0;
}

static void note_attempt_locked(int r) {
        struct shim_client *c = &kvt_shim()->client;

        if (r < 0) {
                c->next_attempt_ns = now_ns() + RECONNECT_BACKOFF_NS;
                if (!c->outage_logged)
                        log_warning_errno(r, "Cannot reach kvtierd at %s: %s; allocations stay plain cudaMalloc until it is reachable.",
                                          where_locked(), strerror(-r));
                c->outage_logged = true;
        } else {
                if (c->outage_logged)
                        log_notice("Connected to kvtierd at %s.", where_locked());
                c->outage_logged = false;
        }
}

void client_kick_mover(void) {
        struct shim_client *c = &kvt_shim()->client;

        pthread_mutex_lock(&c->lock);
        /* Never welcomed: no daemon serves this host, nothing to wait for. */
        if (!c->mover_running && atomic_load(&c->welcomed) && kvt_shim()->owner.start_mover() == 0)
                c->mover_running = true;
        pthread_mutex_unlock(&c->lock);
}

int client_ensure(void) {
        struct shim_client *c = &kvt_shim()->client;
        int r = 0;

        pthread_mutex_lock(&c->lock);
        if (c->conn_fd >= 0)
                goto out;
        if (now_ns() < c->next_attempt_ns) {
                r = -ENOTCONN;
                goto out;
        }
        r = connect_locked();
        if (r == 0)
                r = mover_wake_locked();
        note_attempt_locked(r);
out:
        pthread_mutex_unlock(&c->lock);
        return r;
}

/* Sends on fd, or on whatever connection is current when fd is -1, if that
 * connection is of generation gen (0: any); after a successful send, calls
 * mark(id) with the lock still held, so that no lost connection can come
 * between the send and what the caller records of it. */
static int send_checked(int fd, uint64_t gen, uint16_t type, const void *payload, size_t len,
                        void (*mark)(uint32_t), uint32_t id) {
        struct shim_client *c = &kvt_shim()->client;
        int r;

        pthread_mutex_lock(&c->lock);
        if (c->conn_fd < 0 || (fd >= 0 && c->conn_fd != fd) || (gen && c->conn_gen != gen))
                r = -ENOTCONN;
        else {
                r = send_locked(c->conn_fd, type, payload, len);
                if (r < 0)
                        drop_locked(r);
                else if (mark)
                        mark(id);
        }
        pthread_mutex_unlock(&c->lock);
        return r;
}

int client_send(uint16_t type, const void *payload, size_t len) {
        return send_checked(-1, 0, type, payload, len, NULL, 0);
}

int client_send_on(int fd, uint16_t type, const void *payload, size_t len) {
        return send_checked(fd, 0, type, payload, len, NULL, 0);
}

int client_register(int fd, uint64_t gen, const struct kvt_region_add *add, void (*mark)(uint32_t region_id)) {
        return send_checked(fd, gen, KVT_MSG_REGION_ADD, add, sizeof(*add), mark, add->region_id);
}

int client_next_connection(void) {
        struct shim_client *c = &kvt_shim()->client;
        int fd = -1;

        pthread_mutex_lock(&c->lock);
        for (;;) {
                struct timespec until;
                uint64_t wake_ns, now;

                if (c->conn_fd >= 0) {
                        fd = c->conn_fd;
                        break;
                }
                if (!kvt_shim()->owner.has_work()) {
                        c->mover_running = false; /* the next capture starts a new one */
                        break;
                }
                now = now_ns();
                if (now >= c->next_attempt_ns) {
                        note_attempt_locked(connect_locked());
                        continue;
                }
                /* Sleep until the back-off ends or an allocation connected. */
                wake_ns = c->next_attempt_ns - now;
                realtime_after_ns(&until, wake_ns);
                pthread_cond_timedwait(&c->conn_changed, &c->lock, &until);
        }
        pthread_mutex_unlock(&c->lock);
        return fd;
}

uint64_t client_grant_take(int dev, uint64_t bytes) {
        struct shim_client *c = &kvt_shim()->client;
        uint64_t gen = 0;

        if (dev < 0 || dev >= KVT_MAX_GPUS)
                return 0;
        pthread_mutex_lock(&c->lock);
        if (c->conn_fd >= 0 && c->grant_used[dev] + bytes <= c->grant_cap[dev]) {
                c->grant_used[dev] += bytes;
                gen = c->conn_gen;
        }
        pthread_mutex_unlock(&c->lock);
        return gen;
}

void client_grant_return(uint64_t gen, int dev, uint64_t bytes) {
        struct shim_client *c = &kvt_shim()->client;

        if (dev < 0 || dev >= KVT_MAX_GPUS)
                return;
        pthread_mutex_lock(&c->lock);
        if (c->conn_fd >= 0 && c->conn_gen == gen)
                c->grant_used[dev] -= bytes < c->grant_used[dev] ? bytes : c->grant_used[dev];
        pthread_mutex_unlock(&c->lock);
}

bool client_grant_current(uint64_t gen) {
        struct shim_client *c = &kvt_shim()->client;
        bool current;

        pthread_mutex_lock(&c->lock);
        current = c->conn_fd >= 0 && c->conn_gen == gen;
        pthread_mutex_unlock(&c->lock);
        return current;
}

void client_grant_set(int fd, const struct kvt_grant *g) {
        struct shim_client *c = &kvt_shim()->client;
        struct kvt_grant_ack a = {.device = g->device, .seq = g->seq};
        int r;

        pthread_mutex_lock(&c->lock);
        if (fd == c->conn_fd && g->device >= 0 && g->device < KVT_MAX_GPUS) {
                /* in force for every take after this; those before are in
                 * started_bytes, registered or not */
                c->grant_cap[g->device] = g->vram_cap_bytes;
                a.started_bytes = c->grant_used[g->device];
                r = send_locked(fd, KVT_MSG_GRANT_ACK, &a, sizeof(a));
                if (r < 0)
                        drop_locked(r);
        }
        pthread_mutex_unlock(&c->lock);
}

void client_demand(void) {
        struct shim_client *c = &kvt_shim()->client;

        pthread_mutex_lock(&c->lock);
        /* Never waits: a DEMAND that does not fit the socket is not needed
         * (the daemon's next tick reads the same heat). */
        if (c->conn_fd >= 0)
                (void)kvt_msg_send(c->conn_fd, KVT_MSG_DEMAND, ++c->conn_seq, NULL, 0);
        pthread_mutex_unlock(&c->lock);
}

void client_lost(int fd, int err) {
        struct shim_client *c = &kvt_shim()->client;

        pthread_mutex_lock(&c->lock);
        if (c->conn_fd == fd)
                drop_locked(err);
        pthread_mutex_unlock(&c->lock);
}

void client_atfork_child(void) {
        struct shim_client *c = &kvt_shim()->client;

        pthread_mutex_init(&c->lock, NULL);
        pthread_cond_init(&c->conn_changed, NULL);
        c->mover_running = false;
        if (c->conn_fd >= 0)
                close(c->conn_fd); /* the parent's connection lives on: close() is not shutdown() */
        c->conn_fd = -1;
        c->next_attempt_ns = 0;
        c->outage_logged = false;
        memset(c->grant_cap, 0, sizeof(c->grant_cap));
        memset(c->grant_used, 0, sizeof(c->grant_used));
        atomic_store(&c->welcomed, false); /* the child is welcomed on its own */
}

void client_note_device(int dev, uint64_t total_bytes, int host_node) {
        struct shim_client *c = &kvt_shim()->client;

        if (dev < 0 || dev >= KVT_MAX_GPUS)
                return;
        pthread_mutex_lock(&c->lock);
        if (!(c->devices_known & (1ull << dev))) {
                c->device_total[dev] = total_bytes;
                c->device_node[dev] = host_node >= 0 && host_node < KVT_MAX_NODES ? host_node : -1;
                c->devices_known |= 1ull << dev;
        }
        pthread_mutex_unlock(&c->lock);
}

unsigned client_devices_noted(void) {
        struct shim_client *c = &kvt_shim()->client;
        unsigned n;

        pthread_mutex_lock(&c->lock);
        n = (unsigned)__builtin_popcountll(c->devices_known);
        pthread_mutex_unlock(&c->lock);
        return n;
}

bool client_device_noted(int dev) {
        struct shim_client *c = &kvt_shim()->client;
        bool r;

        if (dev < 0 || dev >= KVT_MAX_GPUS)
                return true;
        pthread_mutex_lock(&c->lock);
        r = c->devices_known & (1ull << dev);
        pthread_mutex_unlock(&c->lock);
        return r;
}
