/* SPDX-License-Identifier: MIT */
/*
 * evil-daemon: a kvtierd impostor for the shim's fail-open tests.
 *   evil-daemon SOCKET MODE
 * MODE garbage-welcome  answers HELLO with random bytes
 *      garbage-later    answers HELLO properly, then random bytes after the
 *                       first REGION_ADD
 *      bad-orders       answers HELLO, then orders the impossible: unknown
 *                       regions, chunks past a region's end; prints each
 *                       ORDER_DONE status ("done ORDER_ID STATUS")
 *      hostile-status   answers CTL_STATUS with a client whose name and
 *                       version hold ESC, BEL, CR and a newline (for kvtierctl)
 * Serves connections one after another until SIGTERM.  Exit 99 on setup
 * failure.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "protocol.h"

static struct kvt_msg m;

static void garbage(int fd) {
        unsigned char buf[96];

        for (size_t i = 0; i < sizeof(buf); i++)
                buf[i] = (unsigned char)rand();
        send(fd, buf, sizeof(buf), MSG_NOSIGNAL);
}

static void order(int fd, uint64_t id, uint32_t region, uint32_t first, uint32_t n, uint32_t tier) {
        struct kvt_order o = { .order_id = id, .region_id = region, .first_chunk = first, .n_chunks = n,
                               .tier = tier, .host_node = -1 };

        kvt_msg_send(fd, KVT_MSG_ORDER, 0, &o, sizeof(o));
}

static void serve(int fd, const char *mode) {
        uint64_t next_order = 1;

        while (kvt_msg_recv(fd, &m) == 0) {
                switch (m.hdr.type) {
                case KVT_MSG_HELLO:
                        if (strcmp(mode, "garbage-welcome") == 0)
                                garbage(fd);
                        else {
                                struct kvt_welcome w = { .client_id = 1, .tick_ms = 50,
                                                         .capture_min_size = 64 << 20,
                                                         .capture_apis = KVT_API_FAMILY_ALL };
                                kvt_msg_send(fd, KVT_MSG_WELCOME, m.hdr.seq, &w, sizeof(w));
                        }
                        break;
                case KVT_MSG_REGION_ADD: {
                        uint32_t id = m.u.region_add.region_id;
                        uint32_t chunks = (uint32_t)(m.u.region_add.size_bytes >> KVT_CHUNK_SHIFT);

                        if (strcmp(mode, "garbage-later") == 0)
                                garbage(fd);
                        else if (strcmp(mode, "bad-orders") == 0) {
                                order(fd, next_order++, id + 1000, 0, 1, KVT_TIER_VRAM);
                                order(fd, next_order++, id, chunks - 1, 2, KVT_TIER_VRAM);
                                order(fd, next_order++, id, 0, 1, KVT_TIER_VRAM); /* a good one */
                        }
                        break;
                }
                case KVT_MSG_CTL_STATUS: {
                        static const char doc[] =
                                "{\"version\":\"1\\u001b]0;pwned\\u0007\",\"pid\":1,\"policy\":\"demand\","
                                "\"gpus\":[],\"nodes\":[],\"clients\":[{\"client_id\":1,\"pid\":2,"
                                "\"name\":\"a\\u001b[2J\\u0007\\rb\\nc\",\"device\":0,\"regions\":[]}]}";
                        struct kvt_ctl_end end = {.status = 0};

                        kvt_msg_send(fd, KVT_MSG_CTL_DATA, m.hdr.seq, doc, sizeof(doc) - 1);
                        kvt_msg_send(fd, KVT_MSG_CTL_END, m.hdr.seq, &end, sizeof(end));
                        break;
                }
                case KVT_MSG_ORDER_DONE:
                        printf("done %llu %d\n", (unsigned long long)m.u.order_done.order_id,
                               m.u.order_done.status);
                        fflush(stdout);
                        break;
                default:
                        break;
                }
        }
}

/* The socket appears at its path only once it listens: bound under another
 * name, then renamed, so that a client that sees the file can connect.
 * (Found in CI: the engine's connect came between bind() and listen() and
 * was refused, and the impostor never saw it.) */
int main(int argc, char **argv) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        int lfd;

        if (argc != 3 || strlen(argv[1]) + sizeof(".new") > sizeof(sa.sun_path))
                return 99;
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s.new", argv[1]);
        unlink(sa.sun_path);
        lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(lfd, 16) < 0 ||
            rename(sa.sun_path, argv[1]) < 0) {
                perror("evil-daemon");
                return 99;
        }
        srand(1);
        for (;;) {
                int fd = accept(lfd, NULL, NULL);
                if (fd < 0) {
                        if (errno == EINTR)
                                continue;
                        return 99;
                }
                serve(fd, argv[2]);
                close(fd);
        }
}
