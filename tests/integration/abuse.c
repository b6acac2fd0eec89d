/* SPDX-License-Identifier: MIT */
/*
 * abuse: speaks malformed and hostile protocol to a live kvtierd and checks
 * that the daemon drops the bad peer and keeps serving everyone else.
 * Usage: abuse SOCKET.  TAP output.
 *
 * With a mode, one attack of issue 18 for a shell test to judge, the
 * connection held until the file HOLD exists (at most 60 s):
 *   abuse SOCKET huge-adds HOLD     40 REGION_ADDs of 16 TiB each (row 3)
 *   abuse SOCKET vram-squat HOLD    1 GiB registered as already in VRAM; orders
 *                                   are read, never answered (row 4)
 *   abuse SOCKET liar-total HOLD    a HELLO and a DEVICE with a device total of
 *                                   2^64-1 (row 5)
 * Each prints "attack sent" once it has said its piece.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "heat-table.h"
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

/* The daemon answers a status request; returns the number of clients or -1.
 * With key, returns instead the first number stored under key (-1: none). */
static long long status_query(const char *key) {
        struct kvt_msg *m = malloc(sizeof(*m));
        long long clients = -1;
        int fd = conn(), r;
        char *text = calloc(1, 1 << 20);
        size_t len = 0;

        kvt_msg_send(fd, KVT_MSG_CTL_STATUS, 1, NULL, 0);
        while ((r = kvt_msg_recv_timeout(fd, m, 3000)) == 0 && m->hdr.type == KVT_MSG_CTL_DATA &&
               len + m->hdr.length < (1 << 20)) {
                memcpy(text + len, m->u.text, m->hdr.length);
                len += m->hdr.length;
        }
        if (r == 0 && m->hdr.type == KVT_MSG_CTL_END && m->u.ctl_end.status == 0 && key) {
                const char *k = strstr(text, key), *colon = k ? strchr(k, ':') : NULL;
                clients = colon ? strtoll(colon + 1, NULL, 10) : -1;
        } else if (r == 0 && m->hdr.type == KVT_MSG_CTL_END && m->u.ctl_end.status == 0) {
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

static int status_clients(void) {
        return (int)status_query(NULL);
}

/* A memfd of size bytes with a table header of n_slots, sealed as asked. */
static int heat_memfd(uint64_t size, uint32_t n_slots, int seals, void **ret_map) {
        int fd = memfd_create("abuse-heat", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        void *map;

        if (fd < 0 || ftruncate(fd, (off_t)size) < 0) {
                perror("memfd");
                exit(99);
        }
        map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (map == MAP_FAILED) {
                perror("mmap");
                exit(99);
        }
        kvt_heat_header_init(map, n_slots, size);
        if (seals && fcntl(fd, F_ADD_SEALS, seals) < 0) {
                perror("F_ADD_SEALS");
                exit(99);
        }
        if (ret_map)
                *ret_map = map;
        else
                munmap(map, size);
        return fd;
}

static void send_heat(int fd, int mfd, uint32_t n_slots, uint64_t size) {
        struct kvt_heat_table t = {.version = KVT_HEAT_VERSION, .n_slots = n_slots, .size_bytes = size};

        if (kvt_msg_send_fd(fd, KVT_MSG_HEAT_TABLE, 2, &t, sizeof(t), mfd) < 0)
                perror("send heat");
}

/* True if the daemon answers a status request within 3 s. */
static int alive(void) {
        return status_clients() >= 0;
}

static void test_heat_table(const char *self) {
        const uint64_t size = 1 << 20;
        void *map;
        int fd, mfd, p[2];

        fd = conn();
        hello(fd);
        send_msg(fd, KVT_MSG_HEAT_TABLE,
                 &(struct kvt_heat_table){.version = KVT_HEAT_VERSION, .n_slots = 16, .size_bytes = size},
                 sizeof(struct kvt_heat_table));
        TAP_OK(dropped(fd), "HEAT_TABLE without a file descriptor drops the peer");
        close(fd);

        fd = conn();
        hello(fd);
        mfd = heat_memfd(size, 16, 0, NULL);
        send_heat(fd, mfd, 16, size);
        TAP_OK(dropped(fd), "a heat memfd not sealed against shrinking drops the peer");
        close(fd);
        close(mfd);

        fd = conn();
        hello(fd);
        mfd = open(self, O_RDONLY | O_CLOEXEC);
        send_heat(fd, mfd, 16, 4096);
        TAP_OK(dropped(fd), "a regular file as the heat table drops the peer");
        close(fd);
        close(mfd);

        fd = conn();
        hello(fd);
        mfd = heat_memfd(size, 16, F_SEAL_SHRINK, NULL);
        send_heat(fd, mfd, 16, size * 2);
        TAP_OK(dropped(fd), "a heat table smaller than announced drops the peer");
        close(fd);
        close(mfd);

        fd = conn();
        hello(fd);
        mfd = heat_memfd(size, 16, F_SEAL_SHRINK, NULL);
        send_heat(fd, mfd, 32, size);
        TAP_OK(dropped(fd), "a header that disagrees with HEAT_TABLE drops the peer");
        close(fd);
        close(mfd);

        fd = conn();
        hello(fd);
        mfd = heat_memfd(size, 16, F_SEAL_SHRINK, NULL);
        send_heat(fd, mfd, 16, size);
        send_heat(fd, mfd, 16, size);
        TAP_OK(dropped(fd), "a second HEAT_TABLE drops the peer");
        close(fd);
        close(mfd);

        fd = conn();
        send_heat(fd, heat_memfd(size, 16, F_SEAL_SHRINK, NULL), 16, size);
        TAP_OK(dropped(fd), "HEAT_TABLE before HELLO drops the peer");
        close(fd);

        /* A sane table whose contents turn hostile: garbage in the
         * directory, slots for a real region that point past the file or
         * lie about its size, all rewritten while the daemon reads. */
        fd = conn();
        hello(fd);
        {
                /* 1 TiB: 2 MiB of counters, so a read past a 1 MiB table
                 * would run far outside the daemon's mapping. */
                struct kvt_region_add r = region(0x7f0000000000ull, 1ull << 40);
                send_msg(fd, KVT_MSG_REGION_ADD, &r, sizeof(r));
        }
        mfd = heat_memfd(size, 16, F_SEAL_SHRINK, &map);
        send_heat(fd, mfd, 16, size);
        TAP_OK(ftruncate(mfd, 4096) < 0 && errno == EPERM, "the sealed table cannot be shrunk under the daemon");
        {
                struct kvt_heat_slot *slots = (void *)((char *)map + sizeof(struct kvt_heat_header));
                const uint32_t n = 1u << 19; /* chunks of the region */
                const struct kvt_heat_slot lies[] = {
                        {.generation = 2, .region_id = 7, .n_chunks = n, .offset = 1ull << 40},
                        {.generation = 2, .region_id = 7, .n_chunks = 0xffffffu, .offset = 4096},
                        {.generation = 2, .region_id = 7, .n_chunks = n, .offset = size - 4},
                        {.generation = 2, .region_id = 7, .n_chunks = n, .offset = 3},
                        {.generation = 2, .region_id = 7, .n_chunks = 16, .offset = 4096},
                        {.generation = 2, .region_id = 7, .n_chunks = n, .offset = 64},
                };
                struct timespec t0, t;
                unsigned seed = 1;

                memcpy(slots, lies, sizeof(lies));
                usleep(100 * 1000);
                clock_gettime(CLOCK_MONOTONIC, &t0);
                do {
                        for (size_t i = 0; i < 16 * sizeof(*slots) / 4; i++)
                                ((uint32_t *)slots)[i] = (uint32_t)rand_r(&seed);
                        for (size_t i = 0; i < 1024; i++)
                                ((uint32_t *)map)[1024 + i] = (uint32_t)rand_r(&seed);
                        clock_gettime(CLOCK_MONOTONIC, &t);
                } while (t.tv_sec - t0.tv_sec < 1);
                /* Grown far past what the daemon maps, then pointed there. */
                ftruncate(mfd, 1ll << 30);
                slots[0] = (struct kvt_heat_slot){.generation = 4, .region_id = 7, .n_chunks = n,
                                                  .offset = KVT_HEAT_MAX_BYTES - 64};
                usleep(100 * 1000);
        }
        TAP_OK(alive(), "the daemon survives a hostile heat table");
        TAP_EQ_INT(status_query("\"regions_bound\""), 0, "no lying slot was bound to the region");
        TAP_OK(status_query("\"bad_slots\"") > 0, "the lies were counted as bad slots");
        TAP_EQ_INT(status_clients(), 1, "and keeps its client: bad contents are ignored, not fatal");
        close(fd);
        close(mfd);
        munmap(map, size);

        /* A descriptor with any other message is closed, the peer kept. */
        fd = conn();
        hello(fd);
        if (pipe(p) < 0)
                exit(99);
        {
                struct kvt_region_add r = region(0x7f0000000000ull, 64 << 20);
                struct pollfd pf = {.fd = p[0], .events = POLLIN};
                char c;

                kvt_msg_send_fd(fd, KVT_MSG_REGION_ADD, 3, &r, sizeof(r), p[1]);
                close(p[1]);
                TAP_OK(poll(&pf, 1, 3000) == 1 && read(p[0], &c, 1) == 0,
                       "an fd sent with REGION_ADD is closed by the daemon (pipe sees EOF)");
                TAP_EQ_INT(status_clients(), 1, "and the peer is kept");
        }
        close(p[0]);
        close(fd);
        usleep(100 * 1000);
}

/* Reads and drops what the daemon sends, answering nothing, until hold exists. */
static void hold_until(int fd, const char *hold) {
        static char buf[KVT_MSG_MAX_BYTES];

        printf("attack sent\n");
        fflush(stdout);
        for (int i = 0; i < 60 * 20 && access(hold, F_OK) < 0; i++) {
                struct pollfd p = { .fd = fd, .events = POLLIN };

                if (poll(&p, 1, 50) > 0 && recv(fd, buf, sizeof(buf), 0) == 0) {
                        printf("dropped by the daemon\n");
                        fflush(stdout);
                        break;
                }
        }
        close(fd);
}

static int attack(const char *mode, const char *hold) {
        struct kvt_hello h = { .proto_version = KVT_PROTO_VERSION, .device = 0 };
        int fd = conn();

        strcpy(h.name, mode);
        if (strcmp(mode, "liar-total") == 0) {
                struct kvt_device d = { .device = 0, .host_node = -1, .total_bytes = UINT64_MAX };

                h.device_total_bytes = UINT64_MAX;
                send_msg(fd, KVT_MSG_HELLO, &h, sizeof(h));
                send_msg(fd, KVT_MSG_DEVICE, &d, sizeof(d));
        } else if (strcmp(mode, "huge-adds") == 0) {
                send_msg(fd, KVT_MSG_HELLO, &h, sizeof(h));
                for (uint32_t i = 1; i <= 40; i++) {
                        struct kvt_region_add r = region((uint64_t)i << 44, KVT_MAX_REGION_BYTES);

                        r.region_id = i;
                        send_msg(fd, KVT_MSG_REGION_ADD, &r, sizeof(r));
                }
        } else if (strcmp(mode, "vram-squat") == 0) {
                struct kvt_region_add r = region(0x7f0000000000ull, 1ull << 30);

                r.tier = KVT_TIER_VRAM;
                send_msg(fd, KVT_MSG_HELLO, &h, sizeof(h));
                send_msg(fd, KVT_MSG_REGION_ADD, &r, sizeof(r));
        } else
                return 99;
        hold_until(fd, hold);
        return 0;
}

int main(int argc, char **argv) {
        int fd;

        if (argc == 4) {
                sock_path = argv[1];
                return attack(argv[2], argv[3]);
        }
        if (argc != 2)
                return 99;
        sock_path = argv[1];
        test_heat_table(argv[0]);

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
        hello(fd);
        {
                struct kvt_grant_ack a = { .device = 0, .seq = 1000, .started_bytes = 1ull << 40 };
                send_msg(fd, KVT_MSG_GRANT_ACK, &a, sizeof(a));
        }
        TAP_OK(dropped(fd), "GRANT_ACK for a GRANT never sent drops the peer");
        close(fd);

        fd = conn();
        hello(fd);
        {
                struct kvt_grant_ack a = { .device = 0, .seq = 0 };
                send_msg(fd, KVT_MSG_GRANT_ACK, &a, sizeof(a));
        }
        TAP_OK(dropped(fd), "GRANT_ACK of seq 0 (the WELCOME's needs none) drops the peer");
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
                struct kvt_welcome w = { .client_id = 1, .tick_ms = 1, .capture_min_size = 64 << 20,
                                         .capture_apis = KVT_API_FAMILY_ALL };
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
