/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdarg.h>
#include <stdio.h>
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
#include "ssd.h"
#include "uid-table.h"
#include "util.h"

/* How long accepts pause when descriptors ran out (EMFILE, ENFILE): long
 * enough not to spin on a backlog that cannot be taken, short enough that
 * a control connection waits no longer than a person notices. */
#define ACCEPT_PAUSE_MS 100
/* The longest the sweep of deadlines sleeps; it runs four times per the
 * shortest deadline when that is shorter. */
#define SWEEP_MAX_MS 1000
/* Connections taken off the backlog with the spare descriptor per pause. */
#define ACCEPT_SHED_MAX 64

enum peer_role { PEER_NEW, PEER_SHIM, PEER_CTL, PEER_SSD };

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
        size_t out_bytes;         /* payload bytes queued in out_head.. */
        uint64_t out_progress_ns; /* when output last became pending or moved (CLOCK_MONOTONIC) */
        char *reply;              /* a status reply sent as the socket drains, or NULL */
        size_t reply_len, reply_off;
        uint32_t reply_seq;
        uint64_t opened_ns;          /* accepted at */
        struct uid_entry *uid_entry; /* what its uid holds: connections, log rate limit */
        uint64_t devices_seen;       /* bit N: DEVICE came for GPU N */
        bool broken;                 /* a send failed: dropped from a defer event */
        int broken_err;              /* how */
        bool warned_failures;        /* failed orders are logged once per client */
        bool warned_quota;           /* refused regions are logged at warning once per client */
        bool warned_fd;              /* an unexpected fd is logged once per peer */
        struct heat_table *heat;     /* the shim's counters, once HEAT_TABLE came */
        int msg_fd;                  /* fd that came with the message being dispatched, or -1 */
        struct ssd_session *ssd;     /* PEER_SSD: the session its thread serves (ssd.h) */
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
        sd_event_source *accept_resume; /* re-enables accepts after a pause */
        sd_event_source *sweep;         /* HELLO and send deadlines */
        struct conf_limits limits;
        struct uid_table *uids;
        int spare_fd;                /* /dev/null held for accepting when descriptors ran out, or -1 */
        struct ratelimit accept_log; /* accept failures and refusals not of one uid */
        struct connection_stats stats;
        struct peer *peers;
        size_t n_peers;
        void (*on_demand)(void *userdata); /* a shim said faults arrived, or gave room back */
        void *demand_userdata;
        struct ssd_store *ssd; /* the SSD tier, or NULL */
        struct kvt_msg msg; /* receive buffer: 64 KiB, not on the stack */
};

/* Logs a line a peer caused, within its uid's rate limit, with the peer,
 * its uid, its client and the region (-1: none) as journal fields. */
static void peer_log_full(struct peer *p, int level, int64_t region, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));
static void peer_log_full(struct peer *p, int level, int64_t region, const char *fmt, ...) {
        char msg[1024], pid[32], uid[32], client[32], reg[32];
        const char *fields[5] = {pid, uid};
        unsigned suppressed;
        va_list ap;
        size_t n = 2;

        if (level > kvt_log_get_max_level())
                return;
        if (!ratelimit_below(&p->uid_entry->log, now_ns(), &suppressed))
                return;
        if (suppressed)
                log_warning("Suppressed %u lines caused by uid %u ([daemon] log_rate_limit_burst).",
                            suppressed, (unsigned)p->id.uid);
        snprintf(pid, sizeof(pid), "KVTIER_PEER_PID=%d", (int)p->id.pid);
        snprintf(uid, sizeof(uid), "KVTIER_PEER_UID=%u", (unsigned)p->id.uid);
        if (p->client) {
                snprintf(client, sizeof(client), "KVTIER_CLIENT=%u", client_id(p->client));
                fields[n++] = client;
        }
        if (region >= 0) {
                snprintf(reg, sizeof(reg), "KVTIER_REGION=%lld", (long long)region);
                fields[n++] = reg;
        }
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        kvt_log_fields(level, 0, fields, "%s", msg);
}

#define peer_log(p, level, ...) peer_log_full((p), (level), -1, __VA_ARGS__)

static void peer_free(struct peer *p) {
        struct server *s;

        if (!p)
                return;
        s = p->server;
        p->uid_entry->n_conns--;
        free(p->reply);
        registry_client_free(s->registry, p->client);
        heat_table_free(p->heat);
        ssd_session_free(p->ssd);
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
        s->stats.open = s->n_peers;
        free(p);
}

static bool peer_output_pending(const struct peer *p) {
        return p->out_head || p->reply;
}

static void peer_update_events(struct peer *p) {
        uint32_t ev = 0;

        /* A control peer gets its reply out before its next request is read. */
        if (!(p->role == PEER_CTL && peer_output_pending(p)))
                ev |= EPOLLIN;
        if (peer_output_pending(p))
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
                p->out_progress_ns = now_ns();
                p->out_head = m->next;
                if (!p->out_head)
                        p->out_tail = NULL;
                p->out_bytes -= m->len;
                free(m);
        }
        return 0;
}

static int peer_send(struct peer *p, uint16_t type, uint32_t seq, const void *data, size_t len);

/* Sends what the socket takes of a pending status reply, then its end.
 * Returns 0 or -errno. */
static int peer_pump_reply(struct peer *p) {
        struct kvt_ctl_end end = {.status = 0};

        while (p->reply && !p->out_head) {
                size_t n = MIN(p->reply_len - p->reply_off, KVT_TEXT_MAX);
                int r;

                if (n == 0) {
                        free(p->reply);
                        p->reply = NULL;
                        return peer_send(p, KVT_MSG_CTL_END, p->reply_seq, &end, sizeof(end));
                }
                r = kvt_msg_send(p->fd, KVT_MSG_CTL_DATA, p->reply_seq, p->reply + p->reply_off, n);
                if (r == -EAGAIN)
                        return 0;
                if (r < 0)
                        return r;
                p->out_progress_ns = now_ns();
                p->reply_off += n;
        }
        return 0;
}

/* Sends a message now or queues it behind earlier ones; a queue past
 * [daemon] send_queue_max is the peer's end.  Returns 0, -ENOBUFS (the peer
 * is over its queue: drop it) or -errno. */
static int peer_send(struct peer *p, uint16_t type, uint32_t seq, const void *data, size_t len) {
        struct outmsg *m;
        int r;

        if (!p->out_head) {
                r = kvt_msg_send(p->fd, type, seq, data, len);
                if (r != -EAGAIN)
                        return r;
        }
        if (p->out_bytes + len > p->server->limits.send_queue_max_bytes) {
                p->server->stats.dropped_queue++;
                peer_log(p, KVT_LOG_WARNING,
                         "Disconnecting peer pid %d (uid %u): it reads nothing, %zu bytes wait "
                         "([daemon] send_queue_max).",
                         (int)p->id.pid, (unsigned)p->id.uid, p->out_bytes + len);
                return -ENOBUFS;
        }
        if (!peer_output_pending(p))
                p->out_progress_ns = now_ns();
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
        p->out_bytes += len;
        peer_update_events(p);
        return 0;
}

/* Logs why a peer is dropped; returns -EPROTO so that callers can return it. */
static int peer_reject(struct peer *p, const char *why, const char *what) {
        peer_log(p, KVT_LOG_WARNING, "Disconnecting peer pid %d (uid %u): %s%s%s.", (int)p->id.pid,
                 (unsigned)p->id.uid, why, what ? ": " : "", what ? what : "");
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
                return log_error_errno(r, "Failed to register client pid %d: %s", (int)p->id.pid,
                                       strerror(-r));
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
        peer_log(p, KVT_LOG_INFO, "Client %u connected: pid %d, uid %u, \"%s\", GPU %d%s%s%s.", w.client_id,
                 (int)p->id.pid, (unsigned)p->id.uid, h->name, h->device,
                 client_section(p->client) >= 0 ? ", [client." : "",
                 client_section(p->client) >= 0 ? conf_client_label(s->conf, client_section(p->client)) : "",
                 client_section(p->client) >= 0 ? "]" : "");
        return peer_send(p, KVT_MSG_WELCOME, m->hdr.seq, &w, sizeof(w));
}

/* A control request's document (status, config): it goes out as the socket
 * takes it (peer_pump_reply()), not into the send queue, so that a big
 * registry's status is not a queue overrun.  r < 0: the document could not
 * be made; its status goes back alone. */
static int peer_reply_document(struct peer *p, const struct kvt_msg *m, int r, char *json) {
        struct kvt_ctl_end end = {.status = 0};

        p->role = PEER_CTL;
        if (r < 0) {
                end.status = r;
                return peer_send(p, KVT_MSG_CTL_END, m->hdr.seq, &end, sizeof(end));
        }
        free(p->reply); /* none: a control peer is not read while its reply is pending */
        p->reply = json;
        p->reply_len = strlen(json);
        p->reply_off = 0;
        p->reply_seq = m->hdr.seq;
        p->out_progress_ns = now_ns();
        r = peer_pump_reply(p);
        peer_update_events(p);
        return r;
}

/* CTL_STATUS: open to every peer that may connect. */
static int peer_on_status(struct peer *p, const struct kvt_msg *m) {
        char *json = NULL;
        int r = status_json(p->server->registry, p->server->info, &json);

        return peer_reply_document(p, m, r, json);
}

/* CTL_CONFIG: the configuration in effect, read-only as the status is. */
static int peer_on_config(struct peer *p, const struct kvt_msg *m) {
        char *json = NULL;
        int r = config_json(p->server->conf, &json);

        return peer_reply_document(p, m, r, json);
}

/* CTL_SET: root, kvtierd's own user or the admin group (changes affect
 * every client); the reply's status says how it went, and a refusal's
 * reason goes before it as {"error": REASON}. */
static int peer_on_set(struct peer *p, const struct kvt_msg *m) {
        struct kvt_ctl_end end = {.status = 0};
        char text[4 * KVT_CTL_SET_MAX], reason[sizeof(text) + 512];
        const char *group = conf_admin_group(p->server->conf);

        p->role = PEER_CTL;
        kvt_escape(m->u.text, text, sizeof(text));
        if (!p->admin) {
                snprintf(reason, sizeof(reason),
                         "permission denied: uid %u is not root, not kvtierd's user and not in group %s "
                         "([daemon] admin_group)",
                         (unsigned)p->id.uid, group[0] ? group : "(none)");
                end.status = -EPERM;
        } else if (kvt_escape_needed(m->u.text)) {
                snprintf(reason, sizeof(reason), "control characters in \"%s\"", text);
                end.status = -EINVAL;
        } else
                end.status =
                        control_set(p->server->conf, p->server->registry, m->u.text, reason, sizeof(reason));
        if (end.status < 0) {
                char *doc;
                int r;

                peer_log(p, KVT_LOG_WARNING, "kvtierctl set \"%s\" from pid %d (uid %u) refused: %s.", text,
                         (int)p->id.pid, (unsigned)p->id.uid, reason);
                r = error_json(reason, &doc);
                if (r < 0)
                        return r;
                r = peer_send(p, KVT_MSG_CTL_DATA, m->hdr.seq, doc, strlen(doc));
                free(doc);
                if (r < 0)
                        return r;
        }
        return peer_send(p, KVT_MSG_CTL_END, m->hdr.seq, &end, sizeof(end));
}

/* A REGION_ADD past a quota: the region is not registered, so kvtier never
 * moves it, and the shim's allocation stays as CUDA made it (the protocol
 * has no reply to a REGION_ADD: the shim fails open by construction).
 * Logged at warning once per client, then at debug. */
static void peer_on_region_refused(struct peer *p, const struct kvt_region_add *a, int err) {
        struct registry *reg = p->server->registry;
        char size[32], quota[32], held[32], section[KVT_NAME_MAX + 32];
        int sec = client_section(p->client);
        const char *why;

        snprintf(section, sizeof(section), "[client.%s] max_registered",
                 sec >= 0 ? conf_client_label(p->server->conf, sec) : "");
        why = err == -E2BIG    ? "[daemon] max_regions_per_client"
              : err == -ENOSPC ? "[daemon] max_chunks"
              : sec >= 0 && conf_client_max_registered(p->server->conf, sec)
                      ? section
                      : "[daemon] max_registered_per_client or max_registered_per_uid";
        p->server->stats.regions_refused++;
        peer_log_full(p, p->warned_quota ? KVT_LOG_DEBUG : KVT_LOG_WARNING, a->region_id,
                      "Client %u (pid %d, uid %u): refusing region %u of %s: past %s (uid holds %s "
                      "of %s registered); it stays where CUDA put it, untiered.",
                      client_id(p->client), (int)p->id.pid, (unsigned)p->id.uid, a->region_id,
                      format_bytes(size, sizeof(size), a->size_bytes), why,
                      format_bytes(held, sizeof(held), registry_uid_registered(reg, p->id.uid)),
                      format_bytes(quota, sizeof(quota), registry_uid_quota(reg)));
        p->warned_quota = true;
}

static int peer_on_region_add(struct peer *p, const struct kvt_region_add *a) {
        int r = registry_region_add(p->server->registry, p->client, a);

        switch (r) {
        case 0:
                peer_log_full(p, KVT_LOG_DEBUG, a->region_id,
                              "Client %u: region %u at 0x%llx, %llu bytes, GPU %d.", client_id(p->client),
                              a->region_id, (unsigned long long)a->base, (unsigned long long)a->size_bytes,
                              a->device);
                return 0;
        case -EEXIST:
                return peer_reject(p, "REGION_ADD with a duplicate region_id", NULL);
        case -EADDRINUSE:
                return peer_reject(p, "REGION_ADD overlapping an existing region", NULL);
        case -E2BIG:
        case -ENOSPC:
        case -EDQUOT:
                peer_on_region_refused(p, a, r);
                return 0;
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
                peer_log(p, KVT_LOG_WARNING,
                         "Client %u (pid %d) failed order %llu: %s (CUDA error %d); further failures are "
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
                return log_error_errno(r, "Failed to map the heat table of client %u: %s",
                                       client_id(p->client), strerror(-r));
        if (r < 0)
                return peer_reject(p, "unusable heat table", why ? why : strerror(-r));
        p->msg_fd = -1;
        peer_log(p, KVT_LOG_DEBUG, "Client %u: heat table of %u slots, %llu bytes.", client_id(p->client),
                 t->n_slots, (unsigned long long)t->size_bytes);
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
                        peer_log_full(p, KVT_LOG_WARNING, m->u.region_del.region_id,
                                      "Client %u: REGION_DEL for unknown region %u, ignoring.",
                                      client_id(p->client), m->u.region_del.region_id);
                return 0;
        case KVT_MSG_ORDER_DONE:
                return peer_on_order_done(p, &m->u.order_done);
        case KVT_MSG_DEVICE:
                /* Once per GPU and connection, as the protocol says: a peer
                 * repeating it gets no more of the registry's attention (or log). */
                if (m->u.device.device >= 0 && m->u.device.device < KVT_MAX_GPUS &&
                    !(p->devices_seen & (1ull << m->u.device.device))) {
                        p->devices_seen |= 1ull << m->u.device.device;
                        registry_client_device_seen(p->server->registry, p->client, &m->u.device);
                }
                return 0;
        case KVT_MSG_DEMAND:
                if (p->heat && p->server->on_demand)
                        p->server->on_demand(p->server->demand_userdata);
                return 0;
        case KVT_MSG_GRANT_ACK:
                r = registry_grant_acked(p->server->registry, p->client, &m->u.grant_ack);
                if (r < 0)
                        return peer_reject(p, "GRANT_ACK for a GRANT never sent", NULL);
                /* room the grant held may go to the promotions waiting for it */
                if (r > 0 && p->server->on_demand)
                        p->server->on_demand(p->server->demand_userdata);
                return 0;
        case KVT_MSG_HINT:
                r = registry_hint(p->server->registry, p->client, &m->u.hint);
                if (r < 0)
                        peer_log_full(p, KVT_LOG_WARNING, m->u.hint.region_id,
                                      "Client %u: HINT for region %u chunks %u+%u: %s, ignoring.",
                                      client_id(p->client), m->u.hint.region_id, m->u.hint.first_chunk,
                                      m->u.hint.n_chunks,
                                      r == -ENOENT ? "no such region" : "outside the region");
                return 0;
        default:
                return peer_reject(p, "unexpected message for a shim", kvt_msg_type_name(m->hdr.type));
        }
}

/* The SSD session ended (the client left): the peer goes. */
static int peer_ssd_done(sd_event_source *es, int fd, uint32_t revents, void *userdata) {
        struct peer *p = userdata;

        peer_log(p, KVT_LOG_DEBUG, "SSD client pid %d disconnected.", (int)p->id.pid);
        peer_free(p);
        return 0;
}

/* SSD_HELLO: the connection goes to a session thread of the SSD store (its
 * replies are its own); the event loop only waits for its end. */
static int peer_on_ssd_hello(struct peer *p, const struct kvt_msg *m) {
        int fd = p->msg_fd, r;

        if (!p->server->ssd)
                return peer_reject(p, "SSD_HELLO, but this daemon has no SSD store", NULL);
        if (fd < 0)
                return peer_reject(p, "SSD_HELLO without a staging buffer", NULL);
        if (m->u.ssd_hello.proto_version != KVT_PROTO_VERSION)
                return peer_reject(p, "protocol version mismatch in SSD_HELLO", NULL);
        p->msg_fd = -1;
        r = ssd_session_new(p->server->ssd, p->id.pid, p->id.uid, p->fd, fd, &m->u.ssd_hello, &p->ssd);
        if (r == -ENOMEM)
                return log_error_errno(r, "Failed to start an SSD session for pid %d: %s", (int)p->id.pid,
                                       strerror(-r));
        if (r < 0)
                return peer_reject(p, "unusable SSD staging buffer", strerror(-r));
        p->role = PEER_SSD;
        sd_event_source_disable_unref(p->io);
        p->io = NULL;
        r = sd_event_add_io(p->server->event, &p->io, ssd_session_done_fd(p->ssd), EPOLLIN, peer_ssd_done, p);
        if (r < 0)
                return log_error_errno(r, "Failed to watch the SSD session of pid %d: %s", (int)p->id.pid,
                                       strerror(-r));
        peer_log(p, KVT_LOG_DEBUG, "SSD client pid %d (uid %u) connected.", (int)p->id.pid, (unsigned)p->id.uid);
        return 0;
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
                if (m->hdr.type == KVT_MSG_CTL_CONFIG)
                        return peer_on_config(p, m);
                if (m->hdr.type == KVT_MSG_SSD_HELLO)
                        return peer_on_ssd_hello(p, m);
                return peer_reject(p, "unexpected first message", kvt_msg_type_name(m->hdr.type));
        case PEER_SHIM:
                return peer_dispatch_shim(p, m);
        case PEER_CTL:
                if (m->hdr.type == KVT_MSG_CTL_STATUS)
                        return peer_on_status(p, m);
                if (m->hdr.type == KVT_MSG_CTL_SET)
                        return peer_on_set(p, m);
                if (m->hdr.type == KVT_MSG_CTL_CONFIG)
                        return peer_on_config(p, m);
                return peer_reject(p, "unexpected message for a control connection",
                                   kvt_msg_type_name(m->hdr.type));
        case PEER_SSD:
                return -EPROTO; /* its messages are the session thread's */
        }
        return -EPROTO;
}

static void peer_close_msg_fd(struct peer *p) {
        if (p->msg_fd >= 0)
                close(p->msg_fd);
        p->msg_fd = -1;
}

/* A descriptor may only come with HEAT_TABLE or SSD_HELLO; any other is closed unread. */
static int peer_check_fd(struct peer *p, const struct kvt_msg *m) {
        if (m->hdr.type == KVT_MSG_HEAT_TABLE || m->hdr.type == KVT_MSG_SSD_HELLO)
                return 0;
        peer_close_msg_fd(p);
        if (!p->warned_fd)
                peer_log(p, KVT_LOG_WARNING,
                         "Peer pid %d sent a file descriptor with %s; closed it, ignoring.", (int)p->id.pid,
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
                        peer_log(p, KVT_LOG_DEBUG, "Peer pid %d closed the connection.", (int)p->id.pid);
                        return r;
                }
                if (r == -EBADMSG || r == -EPROTO)
                        return peer_reject(
                                p, r == -EPROTO ? "protocol version mismatch" : "malformed message", NULL);
                if (r < 0) {
                        peer_log(p, KVT_LOG_WARNING, "Failed to receive from peer pid %d: %s",
                                 (int)p->id.pid, strerror(-r));
                        return r;
                }
                r = peer_dispatch(p, m);
                peer_close_msg_fd(p);
                if (r < 0)
                        return r;
                if (p->role == PEER_SSD)
                        return 0; /* the socket is the SSD session's now */
                if (p->role == PEER_CTL && peer_output_pending(p))
                        return 0;
        }
        return 0;
}

static int peer_io(sd_event_source *es, int fd, uint32_t revents, void *userdata) {
        struct peer *p = userdata;
        int r = 0;

        if (revents & EPOLLOUT)
                r = peer_flush(p);
        if (r >= 0 && (revents & EPOLLOUT))
                r = peer_pump_reply(p);
        if (r >= 0 && (revents & (EPOLLIN | EPOLLHUP | EPOLLERR)))
                r = peer_read(p);
        if (p->role == PEER_SSD && r >= 0 && !p->broken)
                return 0; /* its source is the session's done_fd now */
        if (r < 0 || p->broken) {
                if (p->client)
                        peer_log(p, KVT_LOG_INFO, "Client %u (pid %d) disconnected.", client_id(p->client),
                                 (int)p->id.pid);
                peer_free(p);
                return 0;
        }
        peer_update_events(p);
        return 0;
}

static int peer_defer_drop(sd_event_source *es, void *userdata) {
        struct peer *p = userdata;

        if (p->broken_err != -ENOBUFS) /* that one said so already */
                peer_log(p, KVT_LOG_WARNING, "Failed to send to client %u (pid %d): %s; disconnecting it.",
                         p->client ? client_id(p->client) : 0, (int)p->id.pid, strerror(-p->broken_err));
        peer_free(p);
        return 0;
}

/* Marks a peer whose socket failed; it is dropped once the current dispatch is over. */
static void peer_mark_broken(struct peer *p, int err) {
        if (p->broken)
                return;
        p->broken = true;
        p->broken_err = err;
        if (sd_event_add_defer(p->server->event, &p->defer, peer_defer_drop, p) < 0)
                sd_event_source_set_io_events(p->io, EPOLLIN | EPOLLOUT); /* peer_io drops it then */
}

bool server_client_ready(struct client *c, void *userdata) {
        struct peer *p = client_userdata(c);

        return !p->broken && !peer_output_pending(p);
}

/* Sends a fixed-size daemon -> shim message; a failure breaks the peer. */
static void send_to_client(struct client *c, uint16_t type, const void *payload, size_t len) {
        struct peer *p = client_userdata(c);
        int r;

        if (p->broken)
                return;
        r = peer_send(p, type, 0, payload, len);
        if (r < 0)
                peer_mark_broken(p, r);
}

void server_send_order(struct client *c, const struct kvt_order *o, void *userdata) {
        (void)userdata;
        send_to_client(c, KVT_MSG_ORDER, o, sizeof(*o));
}

void server_send_grant(struct client *c, const struct kvt_grant *g, void *userdata) {
        (void)userdata;
        send_to_client(c, KVT_MSG_GRANT, g, sizeof(*g));
}

void server_send_pace(struct client *c, const struct kvt_pace *pc, void *userdata) {
        (void)userdata;
        if (pc->percent < 100)
                log_info("Pacing client %u (pid %d) to %u%% of the GPU's time: a client of higher priority is busy.",
                         client_id(c), (int)client_pid(c), pc->percent);
        else
                log_info("Client %u (pid %d) is no longer paced.", client_id(c), (int)client_pid(c));
        send_to_client(c, KVT_MSG_PACE, pc, sizeof(*pc));
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

/* Logs, within the accept rate limit, a refusal or failure at accept. */
#define server_log_accept(s, level, ...)                                                                    \
        do {                                                                                                \
                unsigned sup_;                                                                              \
                if (ratelimit_below(&(s)->accept_log, now_ns(), &sup_)) {                                   \
                        if (sup_)                                                                           \
                                log_warning("Suppressed %u lines on accepted connections.", sup_);          \
                        kvt_log_full((level), 0, __VA_ARGS__);                                              \
                }                                                                                           \
        } while (0)

/* Why a connection of id (with e, its uid's entry) may not be served now,
 * or NULL: the connection limits of [daemon]. */
static const char *peer_refusal(struct server *s, const struct identity *id, const struct uid_entry *e,
                                bool admin) {
        const struct conf_limits *l = &s->limits;

        if (s->n_peers >= l->max_connections)
                return "max_connections";
        if (admin)
                return NULL;
        if (s->n_peers >= l->max_connections - l->reserved)
                return "reserved_connections (the rest are for root and admin_group)";
        if (e->n_conns >= l->max_per_uid)
                return "max_connections_per_uid";
        return NULL;
}

/* Serves the connection fd, or closes it when a limit says no; with
 * admin_only (no descriptor to spare), closes it unless the peer is an
 * admin.  Returns 0 or -ENOMEM. */
static int peer_new(struct server *s, int fd, bool admin_only) {
        struct identity id;
        struct uid_entry *e;
        const char *why;
        struct peer *p;
        bool admin;
        int r;

        r = identity_from_socket(fd, conf_clients_need_unit(s->conf), s->proc_root, &id);
        if (r < 0) {
                close(fd);
                server_log_accept(s, KVT_LOG_WARNING, "Failed to get peer credentials: %s, ignoring.",
                                  strerror(-r));
                return 0;
        }
        e = uid_table_get(s->uids, id.uid, now_ns());
        if (!e) {
                close(fd);
                return -ENOMEM;
        }
        admin = peer_is_admin(s, &id);
        why = admin_only && !admin ? "none: descriptors ran out, the last was kept for root and admin_group"
                                   : peer_refusal(s, &id, e, admin);
        if (why) {
                close(fd);
                s->stats.refused++;
                if (ratelimit_below(&e->log, now_ns(), NULL))
                        log_warning("Refusing a connection from pid %d (uid %u, %u open; %zu in all): "
                                    "[daemon] %s.",
                                    (int)id.pid, (unsigned)id.uid, e->n_conns, s->n_peers, why);
                return 0;
        }
        p = calloc(1, sizeof(*p));
        if (!p) {
                close(fd);
                return -ENOMEM;
        }
        *p = (struct peer){.server = s,
                           .fd = fd,
                           .id = id,
                           .admin = admin,
                           .next = s->peers,
                           .msg_fd = -1,
                           .uid_entry = e,
                           .opened_ns = now_ns()};
        r = sd_event_add_io(s->event, &p->io, fd, EPOLLIN, peer_io, p);
        if (r < 0) {
                close(fd);
                free(p);
                server_log_accept(s, KVT_LOG_WARNING, "Failed to watch peer pid %d: %s, ignoring.",
                                  (int)id.pid, strerror(-r));
                return 0;
        }
        e->n_conns++;
        if (s->peers)
                s->peers->prev = p;
        s->peers = p;
        s->n_peers++;
        s->stats.open = s->n_peers;
        peer_log(p, KVT_LOG_DEBUG, "Peer connected: pid %d, uid %u%s.", (int)p->id.pid, (unsigned)p->id.uid,
                 p->admin ? " (admin)" : "");
        return 0;
}

static int server_accept_resume(sd_event_source *es, uint64_t usec, void *userdata) {
        struct server *s = userdata;

        return sd_event_source_set_enabled(s->accept_source, SD_EVENT_ON);
}

/* The spare descriptor: taken back where one is free again. */
static void server_spare_reopen(struct server *s) {
        if (s->spare_fd < 0)
                s->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
}

/* Out of descriptors: the spare one takes connections off the backlog, at
 * most ACCEPT_SHED_MAX: an admin's is served (so that kvtierctl reaches a
 * daemon out of descriptors), any other closed at once rather than left to
 * wait behind a flood.  Returns 0, or -EMFILE when the spare is gone. */
static int server_accept_spare(struct server *s, int fd) {
        for (int i = 0; i < ACCEPT_SHED_MAX; i++) {
                int cfd;

                if (s->spare_fd < 0)
                        return -EMFILE;
                close(s->spare_fd);
                s->spare_fd = -1;
                cfd = accept4(fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
                if (cfd >= 0 && peer_new(s, cfd, true) == -ENOMEM)
                        return -ENOMEM;
                server_spare_reopen(s);
                if (cfd < 0)
                        return errno == EAGAIN ? 0 : -errno;
        }
        return -EMFILE;
}

/* Out of descriptors (or memory) for a new connection: stops watching the
 * listening socket for ACCEPT_PAUSE_MS instead of spinning on its backlog;
 * the HELLO deadline meanwhile closes the connections that hold them idle. */
static void server_accept_pause(struct server *s, int err) {
        int r;

        s->stats.accept_pauses++;
        server_log_accept(
                s, KVT_LOG_WARNING,
                "Failed to accept a connection: %s; pausing accepts for %d ms (%zu connections open; "
                "raise LimitNOFILE= or lower [daemon] max_connections).",
                strerror(-err), ACCEPT_PAUSE_MS, s->n_peers);
        r = sd_event_source_set_enabled(s->accept_source, SD_EVENT_OFF);
        if (r >= 0)
                r = sd_event_source_set_time_relative(s->accept_resume, ACCEPT_PAUSE_MS * 1000ull);
        if (r >= 0)
                r = sd_event_source_set_enabled(s->accept_resume, SD_EVENT_ONESHOT);
        if (r < 0)
                (void)sd_event_source_set_enabled(s->accept_source, SD_EVENT_ON); /* better than none */
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
                        if (errno == EMFILE || errno == ENFILE) {
                                int err = -errno, r = server_accept_spare(s, fd);

                                if (r == -ENOMEM)
                                        return log_error_errno(r, "Failed to accept a connection: %s",
                                                               strerror(-r));
                                if (r < 0)
                                        server_accept_pause(s, err);
                                return 0;
                        }
                        if (errno == ENOBUFS || errno == ENOMEM) {
                                server_accept_pause(s, -errno);
                                return 0;
                        }
                        server_log_accept(s, KVT_LOG_WARNING, "Failed to accept a connection: %s, ignoring.",
                                          strerror(errno));
                        return 0;
                }
                if (peer_new(s, cfd, false) == -ENOMEM)
                        return log_error_errno(ENOMEM, "Failed to accept a connection: %s",
                                               strerror(ENOMEM));
        }
}

/* Takes back a client's orders unanswered for [daemon] order_timeout_ms;
 * at max_order_timeouts of them, the client's end.  Returns whether the
 * peer is gone. */
static bool peer_sweep_orders(struct peer *p, uint64_t now) {
        struct server *s = p->server;
        struct conf_quotas q;
        unsigned n;

        conf_quotas(s->conf, &q);
        n = registry_client_expire_orders(s->registry, p->client, now, q.order_timeout_ms * 1000000ull);
        if (n == 0)
                return false;
        s->stats.order_timeouts += n;
        if (client_order_timeouts(p->client) < q.max_order_timeouts) {
                peer_log(p, KVT_LOG_WARNING,
                         "Client %u (pid %d, uid %u) left %u orders unanswered for %u ms ([daemon] "
                         "order_timeout_ms): their chunks are booked as unplaced, charged nowhere.",
                         client_id(p->client), (int)p->id.pid, (unsigned)p->id.uid, n, q.order_timeout_ms);
                return false;
        }
        s->stats.dropped_orders++;
        peer_log(p, KVT_LOG_WARNING,
                 "Disconnecting client %u (pid %d, uid %u): %u orders unanswered for %u ms ([daemon] "
                 "max_order_timeouts = %u).",
                 client_id(p->client), (int)p->id.pid, (unsigned)p->id.uid, client_order_timeouts(p->client),
                 q.order_timeout_ms, q.max_order_timeouts);
        peer_free(p);
        return true;
}

/* Closes a peer past a deadline: HELLO (or a first control request) not
 * said, or output waiting that it takes none of. */
static void peer_sweep(struct peer *p, uint64_t now) {
        const struct conf_limits *l = &p->server->limits;

        if (p->client && peer_sweep_orders(p, now))
                return;
        if (p->role == PEER_NEW && now - p->opened_ns >= l->hello_timeout_ms * 1000000ull) {
                p->server->stats.hello_timeouts++;
                peer_log(p, KVT_LOG_WARNING,
                         "Disconnecting peer pid %d (uid %u): it said nothing within %u ms "
                         "([daemon] hello_timeout_ms).",
                         (int)p->id.pid, (unsigned)p->id.uid, l->hello_timeout_ms);
                peer_free(p);
        } else if (peer_output_pending(p) && now - p->out_progress_ns >= l->send_timeout_ms * 1000000ull) {
                p->server->stats.dropped_stalled++;
                peer_log(p, KVT_LOG_WARNING,
                         "Disconnecting peer pid %d (uid %u)%s: it read nothing for %u ms "
                         "([daemon] send_timeout_ms).",
                         (int)p->id.pid, (unsigned)p->id.uid, p->client ? ", a client" : "",
                         l->send_timeout_ms);
                peer_free(p);
        }
}

static void report_suppressed(uint32_t uid, unsigned n, void *userdata) {
        log_warning("Suppressed %u lines caused by uid %u ([daemon] log_rate_limit_burst).", n,
                    (unsigned)uid);
}

/* The period of the deadline sweep: a quarter of the shortest deadline, at most SWEEP_MAX_MS. */
static uint64_t sweep_usec(const struct server *s) {
        const struct conf_limits *l = &s->limits;
        struct conf_quotas q;
        unsigned ms;

        conf_quotas(s->conf, &q);
        ms = MIN(MIN(MIN(l->hello_timeout_ms, l->send_timeout_ms), q.order_timeout_ms) / 4, SWEEP_MAX_MS);

        return MAX(ms, 10u) * 1000ull;
}

static int server_sweep(sd_event_source *es, uint64_t usec, void *userdata) {
        struct server *s = userdata;
        uint64_t now = now_ns();
        int r;

        for (struct peer *p = s->peers, *next; p; p = next) {
                next = p->next;
                peer_sweep(p, now);
        }
        uid_table_report(s->uids, now, report_suppressed, s);
        server_spare_reopen(s);
        r = sd_event_source_set_time_relative(es, sweep_usec(s));
        if (r >= 0)
                r = sd_event_source_set_enabled(es, SD_EVENT_ONESHOT);
        if (r < 0)
                return log_error_errno(r, "Failed to re-arm the connection sweep: %s", strerror(-r));
        return 0;
}

/* The timers and books of the connection limits.  Returns 0 or -errno (logged). */
static int server_limits_new(struct server *s) {
        int r;

        conf_limits(s->conf, &s->limits);
        server_spare_reopen(s);
        s->accept_log = (struct ratelimit){.interval_ns = 10 * 1000000000ull, .burst = 10};
        r = uid_table_new(s->limits.log_interval_ms * 1000000ull, s->limits.log_burst, &s->uids);
        if (r < 0)
                return log_error_errno(r, "Failed to allocate server: %s", strerror(-r));
        r = sd_event_add_time_relative(s->event, &s->sweep, CLOCK_MONOTONIC, sweep_usec(s), 0,
                                       server_sweep, s);
        if (r >= 0)
                r = sd_event_add_time_relative(s->event, &s->accept_resume, CLOCK_MONOTONIC,
                                               ACCEPT_PAUSE_MS * 1000ull, 0, server_accept_resume, s);
        if (r >= 0)
                r = sd_event_source_set_enabled(s->accept_resume, SD_EVENT_OFF);
        if (r < 0)
                return log_error_errno(r, "Failed to set up the connection timers: %s", strerror(-r));
        return 0;
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
        *s = (struct server){
                .event = e, .conf = conf, .registry = r, .info = info, .listen.fd = -1, .spare_fd = -1};
        s->proc_root = "/proc";
        s->admin_gid = admin_gid(conf);
        k = server_limits_new(s);
        if (k >= 0)
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
        sd_event_source_disable_unref(s->accept_resume);
        sd_event_source_disable_unref(s->sweep);
        uid_table_free(s->uids);
        if (s->spare_fd >= 0)
                close(s->spare_fd);
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

const struct connection_stats *server_connection_stats(const struct server *s) {
        return &s->stats;
}

void server_set_ssd_store(struct server *s, struct ssd_store *store) {
        s->ssd = store;
}

void server_set_proc_root(struct server *s, const char *root) {
        s->proc_root = root;
}

const char *server_proc_root(const struct server *s) {
        return s->proc_root;
}

const char *server_socket_path(const struct server *s) {
        return s->listen.path;
}
