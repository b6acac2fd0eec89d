/* SPDX-License-Identifier: MIT */
/*
 * abuse: speaks malformed and hostile protocol to a live kvtierd and checks
 * that the daemon drops the bad peer and keeps serving everyone else.
 * Usage: abuse SOCKET.  TAP output.
 */
#include "config.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "protocol.h"
#include "tap.h"

static const char *sock_path;

static int conn(void) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

        strncpy(sa.sun_path, sock_path, sizeof(sa.sun_path) - 1);
        if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
                perror("connect");
                exit(99);
        }
        return fd;
}

static void send_raw(int fd, const void *p, size_t n) {
        if (send(fd, p, n, MSG_NOSIGNAL) < 0 && errno != EPIPE && errno != ECONNRESET)
                perror("send");
}

static void send_msg(int fd, uint16_t type, const void *payload, size_t len) {
        struct {
                struct kvt_msg_hdr h;
                char p[512];
        } m = { .h = { KVT_PROTO_MAGIC, KVT_PROTO_VERSION, type, (uint32_t)len, 1 } };

        memcpy(m.p, payload, len);
        send_raw(fd, &m, sizeof(m.h) + len);
}

/* True if the daemon closes fd within 3 s (replies before the close are skipped). */
static int dropped(int fd) {
        static char buf[KVT_MSG_MAX_BYTES];

        for (;;) {
                struct pollfd p = { .fd = fd, .events = POLLIN };
                ssize_t n;

                if (poll(&p, 1, 3000) <= 0)
                        return 0;
                n = recv(fd, buf, sizeof(buf), 0);
                if (n == 0 || (n < 0 && errno == ECONNRESET))
                        return 1;
                if (n < 0)
                        return 0;
        }
}

static void hello(int fd) {
        struct kvt_hello h = { .proto_version = KVT_PROTO_VERSION, .device = 0 };

        strcpy(h.name, "abuse");
        send_msg(fd, KVT_MSG_HELLO, &h, sizeof(h));
}

static struct kvt_region_add region(uint64_t base, uint64_t size) {
        return (struct kvt_region_add){ .region_id = 7, .base = base, .size_bytes = size,
                                        .api = KVT_API_CUDA_MALLOC, .tier = KVT_TIER_HOST_MAPPED };
}

/* The daemon answers a status request; returns the number of clients or -1. */
static int status_clients(void) {
        struct kvt_msg *m = malloc(sizeof(*m));
        int fd = conn(), r, clients = -1;
        char *text = calloc(1, 1 << 20);
        size_t len = 0;

        kvt_msg_send(fd, KVT_MSG_CTL_STATUS, 1, NULL, 0);
        while ((r = kvt_msg_recv_timeout(fd, m, 3000)) == 0 && m->hdr.type == KVT_MSG_CTL_DATA &&
               len + m->hdr.length < (1 << 20)) {
                memcpy(text + len, m->u.text, m->hdr.length);
                len += m->hdr.length;
        }
        if (r == 0 && m->hdr.type == KVT_MSG_CTL_END && m->u.ctl_end.status == 0) {
                const char *c = strstr(text, "\"clients\"");
                /* Count client objects by their unique key. */
                clients = 0;
                for (const char *p = c; p && (p = strstr(p, "\"client_id\"")); p++)
                        clients++;
        }
        close(fd);
        free(text);
        free(m);
        return clients;
}

int main(int argc, char **argv) {
        int fd;

        if (argc != 2)
                return 99;
        sock_path = argv[1];

        fd = conn();
        send_raw(fd, "xyz", 3);
        TAP_OK(dropped(fd), "runt datagram shorter than a header drops the peer");
        close(fd);

        fd = conn();
        {
                struct kvt_msg_hdr h = { 0xdeadbeef, KVT_PROTO_VERSION, KVT_MSG_CTL_STATUS, 0, 1 };
                send_raw(fd, &h, sizeof(h));
        }
        TAP_OK(dropped(fd), "bad magic drops the peer");
        close(fd);

        fd = conn();
        {
                struct kvt_msg_hdr h = { KVT_PROTO_MAGIC, KVT_PROTO_VERSION + 1, KVT_MSG_CTL_STATUS, 0, 1 };
                send_raw(fd, &h, sizeof(h));
        }
        TAP_OK(dropped(fd), "unknown protocol version drops the peer");
        close(fd);

        fd = conn();
        {
                struct kvt_msg_hdr h = { KVT_PROTO_MAGIC, KVT_PROTO_VERSION, KVT_MSG_CTL_STATUS, 100, 1 };
                send_raw(fd, &h, sizeof(h));
        }
        TAP_OK(dropped(fd), "length field that disagrees with the datagram drops the peer");
        close(fd);

        fd = conn();
        send_msg(fd, 0x0199, "", 0);
        TAP_OK(dropped(fd), "unknown message type drops the peer");
        close(fd);

        fd = conn();
        {
                struct kvt_hello h = { .proto_version = KVT_PROTO_VERSION };
                send_msg(fd, KVT_MSG_HELLO, &h, sizeof(h) - 4);
        }
        TAP_OK(dropped(fd), "HELLO of the wrong size drops the peer");
        close(fd);

        fd = conn();
        {
                struct kvt_hello h = { .proto_version = KVT_PROTO_VERSION };
                memset(h.name, 'A', sizeof(h.name));
                send_msg(fd, KVT_MSG_HELLO, &h, sizeof(h));
        }
        TAP_OK(dropped(fd), "HELLO with an unterminated name drops the peer");
        close(fd);

        fd = conn();
        hello(fd);
        hello(fd);
        TAP_OK(dropped(fd), "a second HELLO drops the peer");
        close(fd);

        fd = conn();
        hello(fd);
        {
                struct kvt_region_add r = region(0x7f0000000000ull + 4096, 64 << 20);
                send_msg(fd, KVT_MSG_REGION_ADD, &r, sizeof(r));
        }
        TAP_OK(dropped(fd), "REGION_ADD with a misaligned base drops the peer");
        close(fd);

        fd = conn();
        hello(fd);
        {
                struct kvt_region_add r = region(0x7f0000000000ull, 64 << 20);
                send_msg(fd, KVT_MSG_REGION_ADD, &r, sizeof(r));
                r.region_id = 8;
                r.base += 32 << 20;
                send_msg(fd, KVT_MSG_REGION_ADD, &r, sizeof(r));
        }
        TAP_OK(dropped(fd), "REGION_ADD overlapping an earlier region drops the peer");
        close(fd);

        fd = conn();
        hello(fd);
        {
                struct kvt_order_done d = { .order_id = 123456789 };
                send_msg(fd, KVT_MSG_ORDER_DONE, &d, sizeof(d));
        }
        TAP_OK(dropped(fd), "ORDER_DONE for an order never sent drops the peer");
        close(fd);

        fd = conn();
        {
                struct kvt_region_add r = region(0x7f0000000000ull, 64 << 20);
                send_msg(fd, KVT_MSG_REGION_ADD, &r, sizeof(r));
        }
        TAP_OK(dropped(fd), "REGION_ADD before HELLO drops the peer");
        close(fd);

        fd = conn();
        {
                struct kvt_welcome w = { .client_id = 1, .tick_ms = 1 };
                send_msg(fd, KVT_MSG_WELCOME, &w, sizeof(w));
        }
        TAP_OK(dropped(fd), "a daemon-to-shim message type from a peer drops it");
        close(fd);

        fd = conn();
        {
                char *big = calloc(1, KVT_MSG_MAX_BYTES + 4096);
                struct kvt_msg_hdr h = { KVT_PROTO_MAGIC, KVT_PROTO_VERSION, KVT_MSG_CTL_STATUS,
                                         KVT_MSG_MAX_BYTES + 4096 - sizeof(h), 1 };
                memcpy(big, &h, sizeof(h));
                send_raw(fd, big, KVT_MSG_MAX_BYTES + 4096);
                free(big);
        }
        TAP_OK(dropped(fd), "a datagram over 64 KiB drops the peer");
        close(fd);

        TAP_EQ_INT(status_clients(), 0, "daemon still serves status, with no client left behind");

        fd = conn();
        hello(fd);
        {
                struct kvt_region_add r = region(0x7f0000000000ull, 64 << 20);
                send_msg(fd, KVT_MSG_REGION_ADD, &r, sizeof(r));
        }
        usleep(100 * 1000);
        TAP_EQ_INT(status_clients(), 1, "a well-behaved client shows in status");
        close(fd);
        usleep(100 * 1000);
        TAP_EQ_INT(status_clients(), 0, "its disconnect removes it");
        return tap_done();
}
