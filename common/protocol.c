/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include <unistd.h>

#include "heat-table.h"
#include "protocol.h"
#include "util.h"

static const struct {
        uint16_t type;
        const char *name;
        size_t payload;
} msg_types[] = {
        { KVT_MSG_HELLO, "HELLO", sizeof(struct kvt_hello) },
        { KVT_MSG_REGION_ADD, "REGION_ADD", sizeof(struct kvt_region_add) },
        { KVT_MSG_REGION_DEL, "REGION_DEL", sizeof(struct kvt_region_del) },
        { KVT_MSG_ORDER_DONE, "ORDER_DONE", sizeof(struct kvt_order_done) },
        { KVT_MSG_HINT, "HINT", sizeof(struct kvt_hint) },
        { KVT_MSG_DEVICE, "DEVICE", sizeof(struct kvt_device) },
        { KVT_MSG_HEAT_TABLE, "HEAT_TABLE", sizeof(struct kvt_heat_table) },
        { KVT_MSG_DEMAND, "DEMAND", 0 },
        { KVT_MSG_GRANT_ACK, "GRANT_ACK", sizeof(struct kvt_grant_ack) },
        { KVT_MSG_WELCOME, "WELCOME", sizeof(struct kvt_welcome) },
        { KVT_MSG_ORDER, "ORDER", sizeof(struct kvt_order) },
        { KVT_MSG_GRANT, "GRANT", sizeof(struct kvt_grant) },
        { KVT_MSG_PACE, "PACE", sizeof(struct kvt_pace) },
        { KVT_MSG_CTL_STATUS, "CTL_STATUS", 0 },
        { KVT_MSG_CTL_SET, "CTL_SET", SIZE_MAX },
        { KVT_MSG_CTL_CONFIG, "CTL_CONFIG", 0 },
        { KVT_MSG_CTL_DATA, "CTL_DATA", SIZE_MAX },
        { KVT_MSG_CTL_END, "CTL_END", sizeof(struct kvt_ctl_end) },
        { KVT_MSG_SSD_HELLO, "SSD_HELLO", sizeof(struct kvt_ssd_hello) },
        { KVT_MSG_SSD_OPEN, "SSD_OPEN", sizeof(struct kvt_ssd_open) },
        { KVT_MSG_SSD_WRITE, "SSD_WRITE", sizeof(struct kvt_ssd_io) },
        { KVT_MSG_SSD_READ, "SSD_READ", sizeof(struct kvt_ssd_io) },
        { KVT_MSG_SSD_DROP, "SSD_DROP", sizeof(struct kvt_ssd_drop) },
        { KVT_MSG_SSD_REPLY, "SSD_REPLY", sizeof(struct kvt_ssd_reply) },
        { KVT_MSG_SSD_WELCOME, "SSD_WELCOME", sizeof(struct kvt_ssd_welcome) },
};

size_t kvt_msg_payload_size(uint16_t type, int *ret_known) {
        for (size_t i = 0; i < sizeof(msg_types) / sizeof(msg_types[0]); i++)
                if (msg_types[i].type == type) {
                        *ret_known = 1;
                        return msg_types[i].payload;
                }
        *ret_known = 0;
        return 0;
}

const char *kvt_msg_type_name(uint16_t type) {
        for (size_t i = 0; i < sizeof(msg_types) / sizeof(msg_types[0]); i++)
                if (msg_types[i].type == type)
                        return msg_types[i].name;
        return "?";
}

const char *kvt_api_name(uint32_t api) {
        static const char *const names[_KVT_API_MAX] = {
                [KVT_API_CUDA_MALLOC] = "cudaMalloc",
                [KVT_API_CU_MEM_ALLOC] = "cuMemAlloc",
                [KVT_API_CUDA_MALLOC_ASYNC] = "cudaMallocAsync",
                [KVT_API_CUDA_MALLOC_FROM_POOL_ASYNC] = "cudaMallocFromPoolAsync",
                [KVT_API_CU_MEM_ALLOC_ASYNC] = "cuMemAllocAsync",
                [KVT_API_CU_MEM_ALLOC_FROM_POOL_ASYNC] = "cuMemAllocFromPoolAsync",
                [KVT_API_CU_MEM_MAP] = "cuMemMap",
        };

        return api < _KVT_API_MAX && names[api] ? names[api] : "?";
}

static const struct {
        const char *name;
        uint32_t families;
} api_family_names[] = {
        { "runtime", KVT_API_FAMILY_RUNTIME }, { "driver", KVT_API_FAMILY_DRIVER },
        { "async", KVT_API_FAMILY_ASYNC },     { "vmm", KVT_API_FAMILY_VMM },
        { "all", KVT_API_FAMILY_ALL },         { "none", 0 },
};

int kvt_api_families_parse(const char *s, uint32_t *ret) {
        uint32_t families = 0;

        for (const char *p = s;;) {
                size_t len = strcspn(p, ",");
                size_t i;

                for (i = 0; i < ELEMENTSOF(api_family_names); i++)
                        if (strlen(api_family_names[i].name) == len &&
                            strncmp(p, api_family_names[i].name, len) == 0)
                                break;
                if (i == ELEMENTSOF(api_family_names))
                        return -EINVAL;
                families |= api_family_names[i].families;
                if (!p[len])
                        break;
                p += len + 1;
        }
        *ret = families;
        return 0;
}

void kvt_api_families_format(uint32_t families, char *buf, size_t len) {
        size_t off = 0;

        if (len == 0)
                return;
        families &= KVT_API_FAMILY_ALL;
        buf[0] = '\0';
        if (families == KVT_API_FAMILY_ALL || families == 0) {
                snprintf(buf, len, "%s", families ? "all" : "none");
                return;
        }
        for (size_t i = 0; i < ELEMENTSOF(api_family_names) && off < len; i++) {
                const char *name = api_family_names[i].name;
                uint32_t f = api_family_names[i].families;

                if (f == KVT_API_FAMILY_ALL || !(families & f))
                        continue;
                off += (size_t)snprintf(buf + off, len - off, "%s%s", off ? "," : "", name);
        }
}

const char *kvt_rule_name(uint32_t rule) {
        static const char *const names[_KVT_RULE_MAX] = {
                [KVT_RULE_NONE] = "-",
                [KVT_RULE_MIN_SIZE] = "min-size",
                [KVT_RULE_CAPTURE_AFTER] = "capture-after",
                [KVT_RULE_VMM] = "vmm",
        };

        return rule < _KVT_RULE_MAX ? names[rule] : "?";
}

const char *kvt_tier_name(uint32_t tier) {
        switch (tier) {
        case KVT_TIER_NONE:
                return "none";
        case KVT_TIER_VRAM:
                return "vram";
        case KVT_TIER_HOST_MAPPED:
                return "host-mapped";
        case KVT_TIER_HOST:
                return "host";
        default:
                return "?";
        }
}

static int str_terminated(const char *s, size_t max) {
        return memchr(s, '\0', max) != NULL;
}

static int payload_check(const struct kvt_msg *m) {
        switch (m->hdr.type) {
        case KVT_MSG_HELLO:
                if (m->u.hello.device < 0 || m->u.hello.device >= KVT_MAX_GPUS)
                        return -EBADMSG;
                return str_terminated(m->u.hello.name, sizeof(m->u.hello.name)) ? 0 : -EBADMSG;
        case KVT_MSG_REGION_ADD: {
                const struct kvt_region_add *r = &m->u.region_add;
                if (r->device < 0 || r->device >= KVT_MAX_GPUS)
                        return -EBADMSG;
                if (r->size_bytes == 0 || r->size_bytes > KVT_MAX_REGION_BYTES ||
                    r->size_bytes % KVT_CHUNK_BYTES || r->base % KVT_CHUNK_BYTES ||
                    r->base + r->size_bytes < r->base)
                        return -EBADMSG;
                if (r->api == 0 || r->api >= _KVT_API_MAX || r->tier >= _KVT_TIER_MAX ||
                    r->rule >= _KVT_RULE_MAX || (r->flags & ~(uint32_t)_KVT_REGION_FLAGS_ALL))
                        return -EBADMSG;
                /* an untiered region is in no tier kvtier placed */
                if ((r->flags & KVT_REGION_UNTIERED) && r->tier != KVT_TIER_NONE)
                        return -EBADMSG;
                return 0;
        }
        case KVT_MSG_ORDER:
                if (m->u.order.n_chunks == 0 || m->u.order.tier == KVT_TIER_NONE ||
                    m->u.order.tier >= _KVT_TIER_MAX ||
                    (uint64_t)m->u.order.first_chunk + m->u.order.n_chunks >
                            (KVT_MAX_REGION_BYTES >> KVT_CHUNK_SHIFT) ||
                    m->u.order.host_node < -1 || m->u.order.host_node >= KVT_MAX_NODES ||
                    (m->u.order.flags & ~(uint32_t)_KVT_ORDER_FLAGS_ALL) ||
                    (m->u.order.flags && m->u.order.tier != KVT_TIER_HOST) ||
                    m->u.order.flags == (KVT_ORDER_REARM | KVT_ORDER_PROBE))
                        return -EBADMSG;
                return 0;
        case KVT_MSG_SSD_HELLO:
                if (m->u.ssd_hello.staging_bytes == 0 || m->u.ssd_hello.staging_bytes % KVT_SSD_ALIGN ||
                    m->u.ssd_hello.staging_bytes > KVT_SSD_MAX_STAGING || m->u.ssd_hello.next_handle == 0 ||
                    m->u.ssd_hello.next_handle > KVT_SSD_MAX_HANDLE)
                        return -EBADMSG;
                return 0;
        case KVT_MSG_SSD_WELCOME: {
                const struct kvt_ssd_welcome *w = &m->u.ssd_welcome;
                if (w->status > 0 || w->reattached > 1 || w->block_bytes % KVT_SSD_ALIGN ||
                    w->block_bytes > KVT_SSD_MAX_STAGING || (w->status == 0 && w->block_bytes == 0))
                        return -EBADMSG;
                return 0;
        }
        case KVT_MSG_SSD_OPEN:
                return m->u.ssd_open.size_bytes == 0 || m->u.ssd_open.size_bytes > KVT_SSD_MAX_SPILL ? -EBADMSG
                                                                                                    : 0;
        case KVT_MSG_SSD_WRITE:
        case KVT_MSG_SSD_READ: {
                const struct kvt_ssd_io *io = &m->u.ssd_io;
                if (io->len == 0 || io->len > KVT_SSD_MAX_STAGING || io->offset % KVT_SSD_ALIGN ||
                    io->staging_offset % KVT_SSD_ALIGN || io->offset > KVT_SSD_MAX_SPILL ||
                    io->staging_offset > KVT_SSD_MAX_STAGING)
                        return -EBADMSG;
                return 0;
        }
        case KVT_MSG_SSD_REPLY:
                return m->u.ssd_reply.status <= 0 ? 0 : -EBADMSG;
        case KVT_MSG_GRANT:
                return m->u.grant.device < 0 || m->u.grant.device >= KVT_MAX_GPUS || m->u.grant.seq == 0 ? -EBADMSG : 0;
        case KVT_MSG_GRANT_ACK:
                return m->u.grant_ack.device < 0 || m->u.grant_ack.device >= KVT_MAX_GPUS || m->u.grant_ack.seq == 0
                               ? -EBADMSG
                               : 0;
        case KVT_MSG_PACE:
                return m->u.pace.percent < 1 || m->u.pace.percent > 100 ? -EBADMSG : 0;
        case KVT_MSG_HINT:
                if (m->u.hint.n_chunks == 0 || m->u.hint.kind == 0 || m->u.hint.kind >= _KVT_HINT_MAX ||
                    (uint64_t)m->u.hint.first_chunk + m->u.hint.n_chunks >
                            (KVT_MAX_REGION_BYTES >> KVT_CHUNK_SHIFT))
                        return -EBADMSG;
                return 0;
        case KVT_MSG_ORDER_DONE:
                return m->u.order_done.status <= 0 ? 0 : -EBADMSG;
        case KVT_MSG_WELCOME:
                if (m->u.welcome.capture_min_size == 0 ||
                    (m->u.welcome.capture_apis & ~(uint32_t)KVT_API_FAMILY_ALL))
                        return -EBADMSG;
                return 0;
        case KVT_MSG_DEVICE:
                if (m->u.device.device < 0 || m->u.device.device >= KVT_MAX_GPUS ||
                    m->u.device.host_node < -1 || m->u.device.host_node >= KVT_MAX_NODES)
                        return -EBADMSG;
                return 0;
        case KVT_MSG_CTL_SET:
                /* One NUL, at the end: "key=value" and nothing after it. */
                if (m->hdr.length < 2 || m->hdr.length > KVT_CTL_SET_MAX ||
                    m->u.text[m->hdr.length - 1] != '\0' || strlen(m->u.text) != m->hdr.length - 1)
                        return -EBADMSG;
                return 0;
        case KVT_MSG_HEAT_TABLE: {
                const struct kvt_heat_table *t = &m->u.heat_table;
                if (t->version != KVT_HEAT_VERSION || t->n_slots < KVT_HEAT_MIN_SLOTS ||
                    t->n_slots > KVT_HEAT_MAX_SLOTS || t->size_bytes < kvt_heat_counters_offset(t->n_slots) ||
                    t->size_bytes > KVT_HEAT_MAX_BYTES)
                        return -EBADMSG;
                return 0;
        }
        default:
                return 0;
        }
}

int kvt_msg_check(const struct kvt_msg *m, size_t n) {
        int known;
        size_t want;

        if (n < sizeof(struct kvt_msg_hdr) || n > KVT_MSG_MAX_BYTES)
                return -EBADMSG;
        if (m->hdr.magic != KVT_PROTO_MAGIC)
                return -EBADMSG;
        if (m->hdr.version != KVT_PROTO_VERSION)
                return -EPROTO;
        if (m->hdr.length != n - sizeof(struct kvt_msg_hdr))
                return -EBADMSG;
        want = kvt_msg_payload_size(m->hdr.type, &known);
        if (!known)
                return -EBADMSG;
        if (want != SIZE_MAX && m->hdr.length != want)
                return -EBADMSG;
        return payload_check(m);
}

static int msg_send(int fd, uint16_t type, uint32_t seq, const void *payload, size_t len, int pass_fd) {
        struct kvt_msg_hdr hdr = {
                .magic = KVT_PROTO_MAGIC,
                .version = KVT_PROTO_VERSION,
                .type = type,
                .length = (uint32_t)len,
                .seq = seq,
        };
        struct iovec iov[2] = {
                { .iov_base = &hdr, .iov_len = sizeof(hdr) },
                { .iov_base = (void *)payload, .iov_len = len },
        };
        struct msghdr mh = { .msg_iov = iov, .msg_iovlen = len ? 2 : 1 };
        union {
                struct cmsghdr align;
                char buf[CMSG_SPACE(sizeof(int))];
        } control;
        ssize_t n;

        if (len > KVT_TEXT_MAX)
                return -EMSGSIZE;
        if (pass_fd >= 0) {
                struct cmsghdr *c;

                memset(&control, 0, sizeof(control));
                mh.msg_control = control.buf;
                mh.msg_controllen = sizeof(control.buf);
                c = CMSG_FIRSTHDR(&mh);
                c->cmsg_level = SOL_SOCKET;
                c->cmsg_type = SCM_RIGHTS;
                c->cmsg_len = CMSG_LEN(sizeof(int));
                memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
        }
        do
                n = sendmsg(fd, &mh, MSG_NOSIGNAL);
        while (n < 0 && errno == EINTR);
        if (n < 0)
                return errno == EWOULDBLOCK ? -EAGAIN : -errno;
        return (size_t)n == sizeof(hdr) + len ? 0 : -EIO;
}

int kvt_msg_send(int fd, uint16_t type, uint32_t seq, const void *payload, size_t len) {
        return msg_send(fd, type, seq, payload, len, -1);
}

int kvt_msg_send_fd(int fd, uint16_t type, uint32_t seq, const void *payload, size_t len, int pass_fd) {
        return pass_fd < 0 ? -EBADF : msg_send(fd, type, seq, payload, len, pass_fd);
}

/* Up to this many descriptors are taken off one message (all but the first
 * closed); the kernel discards what does not fit (MSG_CTRUNC). */
#define RECV_MAX_FDS 8

/* Keeps the first SCM_RIGHTS descriptor in *ret_fd (or closes it when
 * ret_fd is NULL) and closes every other one. */
static void take_fds(struct msghdr *mh, int *ret_fd) {
        for (struct cmsghdr *c = CMSG_FIRSTHDR(mh); c; c = CMSG_NXTHDR(mh, c)) {
                size_t n;

                if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS || c->cmsg_len < CMSG_LEN(0))
                        continue;
                n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                for (size_t i = 0; i < n; i++) {
                        int f;

                        memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
                        if (ret_fd && *ret_fd < 0)
                                *ret_fd = f;
                        else
                                close(f);
                }
        }
}

int kvt_msg_recv_fd(int fd, struct kvt_msg *m, int *ret_fd) {
        union {
                struct cmsghdr align;
                char buf[CMSG_SPACE(RECV_MAX_FDS * sizeof(int))];
        } control;
        struct iovec iov = { .iov_base = m, .iov_len = sizeof(*m) };
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
        ssize_t n;

        if (ret_fd)
                *ret_fd = -1;
        do {
                mh.msg_control = control.buf;
                mh.msg_controllen = sizeof(control.buf);
                n = recvmsg(fd, &mh, MSG_TRUNC | MSG_CMSG_CLOEXEC);
        } while (n < 0 && errno == EINTR);
        if (n >= 0)
                take_fds(&mh, ret_fd);
        if (n < 0)
                return errno == EWOULDBLOCK ? -EAGAIN : -errno;
        if (n == 0)
                return -ECONNRESET;
        /* MSG_TRUNC reports the real datagram length: longer than the buffer is malformed. */
        if ((size_t)n > sizeof(*m))
                return -EBADMSG;
        return kvt_msg_check(m, (size_t)n);
}

int kvt_msg_recv(int fd, struct kvt_msg *m) {
        /* A descriptor nobody asked for is closed, never leaked. */
        return kvt_msg_recv_fd(fd, m, NULL);
}

static int64_t now_ms(void) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int kvt_msg_recv_timeout(int fd, struct kvt_msg *m, int timeout_ms) {
        int64_t deadline = now_ms() + timeout_ms;

        for (;;) {
                struct pollfd p = { .fd = fd, .events = POLLIN };
                int64_t left = deadline - now_ms();
                int r;

                if (left < 0)
                        left = 0;
                r = poll(&p, 1, (int)left);
                if (r < 0 && errno != EINTR)
                        return -errno;
                if (r > 0) {
                        r = kvt_msg_recv(fd, m);
                        if (r != -EAGAIN)
                                return r;
                }
                if (now_ms() >= deadline)
                        return -ETIMEDOUT;
        }
}
