/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <grp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "control.h"
#include "heat-reader.h"
#include "identity.h"
#include "listen.h"
#include "log.h"
#include "server.h"
#include "util.h"

enum peer_role { PEER_NEW, PEER_SHIM, PEER_CTL };

struct outmsg {
        struct outmsg *next;
        uint16_t type;
        uint32_t seq;
        size_t len;
        char data[];
};

struct peer {
        struct server *server;
        struct peer *prev, *next;
        int fd;
        sd_event_source *io, *defer;
        struct identity id; /* from the kernel, at accept */
        bool admin;         /* root, kvtierd's own user or the admin group: may change settings */
        enum peer_role role;
        struct client *client;
        struct outmsg *out_head, *out_tail;
        bool broken;          /* a send failed: dropped from a defer event */
        bool warned_failures; /* failed orders are logged once per client */
        bool warned_fd;       /* an unexpected fd is logged once per peer */
        struct heat_table *heat; /* the shim's counters, once HEAT_TABLE came */
        int msg_fd;           /* fd that came with the message being dispatched, or -1 */
};

struct server {
        sd_event *event;
        struct conf *conf; /* changed live by CTL_SET */
        struct registry *registry;
        const struct status_info *info;
        struct listen_socket listen;
        const char *proc_root; /* where /proc is read (KVTIER_PROC_ROOT in tests) */
        uint32_t admin_gid;    /* [daemon] admin_group, or (uint32_t)-1 */
        sd_event_source *accept_source;
        struct peer *peers;
        size_t n_peers;
        void (*on_demand)(void *userdata); /* a shim said faults arrived */
        void *demand_userdata;
        struct kvt_msg msg; /* receive buffer: 64 KiB, not on the stack */
};

static void peer_free(struct peer *p) {
        struct server *s;

        if (!p)
                return;
        s = p->server;
        registry_client_free(s->registry, p->client);
        heat_table_free(p->heat);
        sd_event_source_disable_unref(p->io);
        sd_event_source_disable_unref(p->defer);
        close(p->fd);
        while (p->out_head) {
                struct outmsg *m = p->out_head;
                p->out_head = m->next;
                free(m);
        }
        if (p->prev)
                p->prev->next = p->next;
        else
                s->peers = p->next;
        if (p->next)
                p->next->prev = p->prev;
        s->n_peers--;
        free(p);
}

static void peer_update_events(struct peer *p) {
        uint32_t ev = 0;

        /* A control peer gets its reply out before its next request is read. */
        if (!(p->role == PEER_CTL && p->out_head))
                ev |= EPOLLIN;
        if (p->out_head)
                ev |= EPOLLOUT;
        sd_event_source_set_io_events(p->io, ev);
}

static int peer_flush(struct peer *p) {
        while (p->out_head) {
                struct outmsg *m = p->out_head;
                int r = kvt_msg_send(p->fd, m->type, m->seq, m->data, m->len);

                if (r == -EAGAIN)
                        return 0;
                if (r < 0)
                        return r;
                p->out_head = m->next;
                if (!p->out_head)
                        p->out_tail = NULL;
                free(m);
        }
        return 0;
}

/* Sends a message now or queues it behind earlier ones.  Returns 0 or -errno. */
static int peer_send(struct peer *p, uint16_t type, uint32_t seq, const void *data, size_t len) {
        struct outmsg *m;
        int r;

        if (!p->out_head) {
                r = kvt_msg_send(p->fd, type, seq, data, len);
                if (r != -EAGAIN)
                        return r;
        }
        m = malloc(sizeof(*m) + len);
        if (!m)
                return -ENOMEM;
        *m = (struct outmsg){.type = type, .seq = seq, .len = len};
        memcpy(m->data, data, len);
        if (p->out_tail)
                p->out_tail->next = m;
        else
                p->out_head = m;
        p->out_tail = m;
        peer_update_events(p);
        return 0;
}

/* Logs why a peer is dropped; returns -EPROTO so that callers can return it. */
static int peer_reject(struct peer *p, const char *why, const char *what) {
        log_warning("Disconnecting peer pid %d (uid %u): %s%s%s.", (int)p->id.pid, (unsigned)p->id.uid, why,
                    what ? ": " : "", what ? what : "");
        return -EPROTO;
}

static int peer_on_hello(struct peer *p, const struct kvt_msg *m) {
        struct kvt_hello hello = m->u.hello, *h = &hello;
        struct server *s = p->server;
        struct conf_peer who = identity_conf_peer(&p->id);
        struct kvt_welcome w;
        int r;

        if (h->proto_version != KVT_PROTO_VERSION)
                return peer_reject(p, "protocol version mismatch in HELLO", NULL);
        /* The name is a label, shown and logged: its controls escaped once, here
         * (a backslash stays, so that a name reads as the process's own). */
        kvt_escape_controls(m->u.hello.name, h->name, sizeof(h->name));
        r = registry_client_new(s->registry, p->id.pid, p->id.uid, h, p, &p->client);
        if (r == -EUSERS)
                return peer_reject(p, "too many clients", NULL);
        if (r < 0)
                return log_error_errno(r, "Failed to register client pid %d: %s", (int)p->id.pid, strerror(-r));
        p->role = PEER_SHIM;
        client_set_section(p->client, conf_client_match(s->conf, &who));
        w = (struct kvt_welcome){.client_id = client_id(p->client), .tick_ms = conf_tick_ms(s->conf)};
        {
                const struct gpu_stats *g = registry_gpu(s->registry, h->device);
                w.vram_budget_bytes = g ? g->budget_bytes : 0;
                w.host_grant_bytes = conf_host_budget(s->conf);
        }
        conf_capture(s->conf, &w.capture_min_size, &w.capture_after, &w.max_captured);
        w.capture_apis = conf_capture_apis(s->conf);
        /* The first captures of a process are often its largest (weights, a KV
         * pool): they may start in VRAM before the next tick's GRANT. */
        w.vram_grant_bytes = registry_grant_cap(s->registry, p->client, h->device);
        client_set_grant_cap(p->client, h->device, w.vram_grant_bytes);
        log_info("Client %u connected: pid %d, uid %u, \"%s\", GPU %d%s%s.", w.client_id, (int)p->id.pid,
                 (unsigned)p->id.uid, h->name, h->device, client_section(p->client) >= 0 ? ", [client." : "",
                 client_section(p->client) >= 0 ? conf_client_label(s->conf, client_section(p->client)) : "");
        return peer_send(p, KVT_MSG_WELCOME, m->hdr.seq, &w, sizeof(w));
}

static int peer_on_status(struct peer *p, const struct kvt_msg *m) {
        struct kvt_ctl_end end = {.status = 0};
        char *json;
        size_t len, off;
        int r;

        p->role = PEER_CTL;
        r = status_json(p->server->registry, p->server->info, &json);
        if (r < 0) {
                end.status = r;
                return peer_send(p, KVT_MSG_CTL_END, m->hdr.seq, &end, sizeof(end));
        }
        len = strlen(json);
        for (off = 0, r = 0; off < len && r >= 0; off += KVT_TEXT_MAX)
                r = peer_send(p, KVT_MSG_CTL_DATA, m->hdr.seq, json + off, MIN(len - off, KVT_TEXT_MAX));
        free(json);
        if (r < 0)
                return r;
        return peer_send(p, KVT_MSG_CTL_END, m->hdr.seq, &end, sizeof(end));
}

/* CTL_SET: root, kvtierd's own user or the admin group (changes affect
 * every client); the reply's status says how it went. */
static int peer_on_set(struct peer *p, const struct kvt_msg *m) {
        struct kvt_ctl_end end = {.status = 0};
        char text[4 * KVT_CTL_SET_MAX];

        p->role = PEER_CTL;
        kvt_escape(m->u.text, text, sizeof(text));
        if (!p->admin) {
                log_warning("Refusing \"%s\" from pid %d: uid %u is neither root nor in group %s.", text,
                            (int)p->id.pid, (unsigned)p->id.uid,
                            conf_admin_group(p->server->conf)[0] ? conf_admin_group(p->server->conf) : "(none)");
                end.status = -EPERM;
        } else if (kvt_escape_needed(m->u.text)) {
                log_warning("kvtierctl set: control characters in \"%s\", ignoring.", text);
                end.status = -EINVAL;
        } else
                end.status = control_set(p->server->conf, p->server->registry, m->u.text);
        if (end.status == -ENOENT)
                log_warning("kvtierctl set: unknown key in \"%s\", ignoring.", text);
        return peer_send(p, KVT_MSG_CTL_END, m->hdr.seq, &end, sizeof(end));
}

static int peer_on_region_add(struct peer *p, const struct kvt_region_add *a) {
        int r = registry_region_add(p->server->registry, p->client, a);

        switch (r) {
        case 0:
                log_debug("Client %u: region %u at 0x%llx, %llu bytes, GPU %d.", client_id(p->client),
                          a->region_id, (unsigned long long)a->base, (unsigned long long)a->size_bytes,
                          a->device);
                return 0;
        case -EEXIST:
                return peer_reject(p, "REGION_ADD with a duplicate region_id", NULL);
        case -EADDRINUSE:
                return peer_reject(p, "REGION_ADD overlapping an existing region", NULL);
        case -E2BIG:
                return peer_reject(p, "too many regions", NULL);
        default:
                return log_error_errno(r, "Failed to add region %u of client %u: %s", a->region_id,
                                       client_id(p->client), strerror(-r));
        }
}

static int peer_on_order_done(struct peer *p, const struct kvt_order_done *d) {
        int r = registry_order_done(p->server->registry, p->client, d);

        if (r == -ENOENT)
                return peer_reject(p, "ORDER_DONE for an unknown order", NULL);
        if (r > 0 && !p->warned_failures) {
                log_warning("Client %u (pid %d) failed order %llu: %s (CUDA error %d); further failures are "
                            "counted, not logged, ignoring.",
                            client_id(p->client), (int)p->id.pid, (unsigned long long)d->order_id,
                            strerror(-d->status), d->cuda_err);
                p->warned_failures = true;
        }
        return 0;
}

/* Maps the shim's heat table; the fd that came along is the table's now. */
static int peer_on_heat_table(struct peer *p, const struct kvt_heat_table *t) {
        const char *why;
        int fd = p->msg_fd, r;

        if (p->heat)
                return peer_reject(p, "a second HEAT_TABLE", NULL);
        if (fd < 0)
                return peer_reject(p, "HEAT_TABLE without a file descriptor", NULL);
        r = heat_table_new(fd, t, &p->heat, &why);
        if (r == -ENOMEM)
                return log_error_errno(r, "Failed to map the heat table of client %u: %s", client_id(p->client),
                                       strerror(-r));
        if (r < 0)
                return peer_reject(p, "unusable heat table", why ? why : strerror(-r));
        p->msg_fd = -1;
        log_debug("Client %u: heat table of %u slots, %llu bytes.", client_id(p->client), t->n_slots,
                  (unsigned long long)t->size_bytes);
        return 0;
}

static int peer_dispatch_shim(struct peer *p, const struct kvt_msg *m) {
        int r;

        switch (m->hdr.type) {
        case KVT_MSG_HEAT_TABLE:
                return peer_on_heat_table(p, &m->u.heat_table);
        case KVT_MSG_REGION_ADD:
                return peer_on_region_add(p, &m->u.region_add);
        case KVT_MSG_REGION_DEL:
                r = registry_region_del(p->server->registry, p->client, m->u.region_del.region_id);
                if (r < 0)
                        log_warning("Client %u: REGION_DEL for unknown region %u, ignoring.",
                                    client_id(p->client), m->u.region_del.region_id);
                return 0;
        case KVT_MSG_ORDER_DONE:
                return peer_on_order_done(p, &m->u.order_done);
        case KVT_MSG_DEVICE:
                registry_device_seen(p->server->registry, &m->u.device);
                return 0;
        case KVT_MSG_DEMAND:
                if (p->heat && p->server->on_demand)
                        p->server->on_demand(p->server->demand_userdata);
                return 0;
        case KVT_MSG_HINT:
                r = registry_hint(p->server->registry, p->client, &m->u.hint);
                if (r < 0)
                        log_warning("Client %u: HINT for region %u chunks %u+%u: %s, ignoring.",
                                    client_id(p->client), m->u.hint.region_id, m->u.hint.first_chunk,
                                    m->u.hint.n_chunks,
                                    r == -ENOENT ? "no such region" : "outside the region");
                return 0;
        default:
                return peer_reject(p, "unexpected message for a shim", kvt_msg_type_name(m->hdr.type));
        }
}

static int peer_dispatch(struct peer *p, const struct kvt_msg *m) {
        switch (p->role) {
        case PEER_NEW:
                if (m->hdr.type == KVT_MSG_HELLO)
                        return peer_on_hello(p, m);
                if (m->hdr.type == KVT_MSG_CTL_STATUS)
                        return peer_on_status(p, m);
                if (m->hdr.type == KVT_MSG_CTL_SET)
                        return peer_on_set(p, m);
                return peer_reject(p, "unexpected first message", kvt_msg_type_name(m->hdr.type));
        case PEER_SHIM:
                return peer_dispatch_shim(p, m);
        case PEER_CTL:
                if (m->hdr.type == KVT_MSG_CTL_STATUS)
                        return peer_on_status(p, m);
                if (m->hdr.type == KVT_MSG_CTL_SET)
                        return peer_on_set(p, m);
                return peer_reject(p, "unexpected message for a control connection",
                                   kvt_msg_type_name(m->hdr.type));
        }
        return -EPROTO;
}

static void peer_close_msg_fd(struct peer *p) {
        if (p->msg_fd >= 0)
                close(p->msg_fd);
        p->msg_fd = -1;
}

/* A descriptor may only come with HEAT_TABLE; any other is closed unread. */
static int peer_check_fd(struct peer *p, const struct kvt_msg *m) {
        if (m->hdr.type == KVT_MSG_HEAT_TABLE)
                return 0;
        peer_close_msg_fd(p);
        if (!p->warned_fd)
                log_warning("Peer pid %d sent a file descriptor with %s; closed it, ignoring.", (int)p->id.pid,
                            kvt_msg_type_name(m->hdr.type));
        p->warned_fd = true;
        return 0;
}

/* Reads what is queued (at most a batch, for fairness).  Returns 0, or < 0 to drop the peer. */
static int peer_read(struct peer *p) {
        struct kvt_msg *m = &p->server->msg;

        for (int i = 0; i < 64; i++) {
                int r = kvt_msg_recv_fd(p->fd, m, &p->msg_fd);

                if (r == 0 && p->msg_fd >= 0)
                        r = peer_check_fd(p, m);

                if (r < 0)
                        peer_close_msg_fd(p);
                if (r == -EAGAIN)
                        return 0;
                if (r == -ECONNRESET) {
                        log_debug("Peer pid %d closed the connection.", (int)p->id.pid);
                        return r;
                }
                if (r == -EBADMSG || r == -EPROTO)
                        return peer_reject(
                                p, r == -EPROTO ? "protocol version mismatch" : "malformed message", NULL);
                if (r < 0)
                        return log_warning_errno(r, "Failed to receive from peer pid %d: %s", (int)p->id.pid,
                                                 strerror(-r));
                r = peer_dispatch(p, m);
                peer_close_msg_fd(p);
                if (r < 0)
                        return r;
                if (p->role == PEER_CTL && p->out_head)
                        return 0;
        }
        return 0;
}

static int peer_io(sd_event_source *es, int fd, uint32_t revents, void *userdata) {
        struct peer *p = userdata;
        int r = 0;

        if (revents & EPOLLOUT)
                r = peer_flush(p);
        if (r >= 0 && (revents & (EPOLLIN | EPOLLHUP | EPOLLERR)))
                r = peer_read(p);
        if (r < 0 || p->broken) {
                if (p->client)
                        log_info("Client %u (pid %d) disconnected.", client_id(p->client), (int)p->id.pid);
                peer_free(p);
                return 0;
        }
        peer_update_events(p);
        return 0;
}

static int peer_defer_drop(sd_event_source *es, void *userdata) {
        struct peer *p = userdata;

        log_warning("Failed to send to client %u (pid %d); disconnecting it.",
                    p->client ? client_id(p->client) : 0, (int)p->id.pid);
        peer_free(p);
        return 0;
}

/* Marks a peer whose socket failed; it is dropped once the current dispatch is over. */
static void peer_mark_broken(struct peer *p, int err) {
        if (p->broken)
                return;
        log_debug("Send to peer pid %d failed: %s", (int)p->id.pid, strerror(-err));
        p->broken = true;
        if (sd_event_add_defer(p->server->event, &p->defer, peer_defer_drop, p) < 0)
                sd_event_source_set_io_events(p->io, EPOLLIN | EPOLLOUT); /* peer_io drops it then */
}

bool server_client_ready(struct client *c, void *userdata) {
        struct peer *p = client_userdata(c);

        return !p->broken && !p->out_head;
}

void server_send_order(struct client *c, const struct kvt_order *o, void *userdata) {
        struct peer *p = client_userdata(c);
        int r;

        if (p->broken)
                return;
        r = peer_send(p, KVT_MSG_ORDER, 0, o, sizeof(*o));
        if (r < 0)
                peer_mark_broken(p, r);
}

void server_send_grant(struct client *c, const struct kvt_grant *g, void *userdata) {
        struct peer *p = client_userdata(c);
        int r;

        (void)userdata;
        if (p->broken)
                return;
        r = peer_send(p, KVT_MSG_GRANT, 0, g, sizeof(*g));
        if (r < 0)
                peer_mark_broken(p, r);
}

void server_set_demand_handler(struct server *s, void (*fn)(void *userdata), void *userdata) {
        s->on_demand = fn;
        s->demand_userdata = userdata;
}

/* Whether a peer may change settings: root, kvtierd's own user, or a member of [daemon] admin_group. */
static bool peer_is_admin(const struct server *s, const struct identity *id) {
        return id->uid == 0 || id->uid == (uint32_t)geteuid() ||
               (s->admin_gid != (uint32_t)-1 && identity_in_group(id, s->admin_gid));
}

static int peer_new(struct server *s, int fd) {
        struct identity id;
        struct peer *p;
        int r;

        r = identity_from_socket(fd, conf_clients_need_unit(s->conf), s->proc_root, &id);
        if (r < 0) {
                close(fd);
                return log_warning_errno(r, "Failed to get peer credentials: %s, ignoring.", strerror(-r));
        }
        if (s->n_peers >= SERVER_MAX_PEERS) {
                close(fd);
                log_warning("Refusing connection from pid %d: %zu peers connected, ignoring.", (int)id.pid,
                            s->n_peers);
                return 0;
        }
        p = calloc(1, sizeof(*p));
        if (!p) {
                close(fd);
                return -ENOMEM;
        }
        *p = (struct peer){.server = s, .fd = fd, .id = id, .admin = peer_is_admin(s, &id), .next = s->peers,
                           .msg_fd = -1};
        r = sd_event_add_io(s->event, &p->io, fd, EPOLLIN, peer_io, p);
        if (r < 0) {
                close(fd);
                free(p);
                return log_warning_errno(r, "Failed to watch peer pid %d: %s, ignoring.", (int)id.pid,
                                         strerror(-r));
        }
        if (s->peers)
                s->peers->prev = p;
        s->peers = p;
        s->n_peers++;
        log_debug("Peer connected: pid %d, uid %u%s.", (int)p->id.pid, (unsigned)p->id.uid,
                  p->admin ? " (admin)" : "");
        return 0;
}

static int server_accept(sd_event_source *es, int fd, uint32_t revents, void *userdata) {
        struct server *s = userdata;

        for (;;) {
                int cfd = accept4(fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

                if (cfd < 0) {
                        if (errno == EAGAIN || errno == EINTR)
                                return 0;
                        if (errno == ECONNABORTED)
                                continue;
                        log_warning_errno(errno, "Failed to accept a connection: %s, ignoring.",
                                          strerror(errno));
                        return 0;
                }
                if (peer_new(s, cfd) == -ENOMEM)
                        return log_error_errno(ENOMEM, "Failed to accept a connection: %s",
                                               strerror(ENOMEM));
        }
}

/* [daemon] admin_group's gid, or (uint32_t)-1 when it is empty or no such group exists. */
static uint32_t admin_gid(const struct conf *conf) {
        const char *name = conf_admin_group(conf);
        struct group *gr;

        if (!name[0])
                return (uint32_t)-1;
        gr = getgrnam(name);
        if (!gr) {
                log_info("No group %s: settings may be changed by root and kvtierd's own user only.", name);
                return (uint32_t)-1;
        }
        return gr->gr_gid;
}

int server_new(sd_event *e, struct conf *conf, struct registry *r, const struct status_info *info,
               int listen_fd, struct server **ret) {
        struct server *s = calloc(1, sizeof(*s));
        int k;

        if (!s)
                return log_error_errno(ENOMEM, "Failed to allocate server: %s", strerror(ENOMEM));
        *s = (struct server){.event = e, .conf = conf, .registry = r, .info = info, .listen.fd = -1};
        s->proc_root = "/proc";
        s->admin_gid = admin_gid(conf);
        k = listen_open(&s->listen, listen_fd, conf_socket(conf));
        if (k < 0) {
                server_free(s);
                return k;
        }
        k = sd_event_add_io(e, &s->accept_source, s->listen.fd, EPOLLIN, server_accept, s);
        if (k < 0) {
                server_free(s);
                return log_error_errno(k, "Failed to watch the listening socket: %s", strerror(-k));
        }
        *ret = s;
        return 0;
}

struct server *server_free(struct server *s) {
        if (!s)
                return NULL;
        while (s->peers)
                peer_free(s->peers);
        sd_event_source_disable_unref(s->accept_source);
        listen_close(&s->listen);
        free(s);
        return NULL;
}

const struct heat_table_stats *server_client_heat(const struct client *c) {
        const struct peer *p = client_userdata(c);

        return p && p->heat ? heat_table_stats(p->heat) : NULL;
}

int server_collect_heat(struct server *s) {
        int r = 0;

        for (struct peer *p = s->peers; p; p = p->next)
                if (p->heat)
                        heat_table_tick_begin(p->heat);
        for (struct region *reg = registry_regions(s->registry); reg && r >= 0; reg = region_next(reg)) {
                struct peer *p = client_userdata(region_client(reg));

                if (p->heat)
                        r = heat_table_collect(p->heat, s->registry, reg);
        }
        for (struct peer *p = s->peers; p; p = p->next)
                if (p->heat && r >= 0)
                        r = heat_table_tick_end(p->heat);
        return r;
}

void server_set_proc_root(struct server *s, const char *root) {
        s->proc_root = root;
}

const char *server_socket_path(const struct server *s) {
        return s->listen.path;
}
