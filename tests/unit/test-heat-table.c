/* SPDX-License-Identifier: MIT */
/* The heat table layout (common/heat-table.h) and fd passing (common/protocol.c). */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "heat-table.h"
#include "protocol.h"
#include "tap.h"

#define SLOTS 16u

static uint64_t table[(1u << 16) / 8]; /* 64 KiB, 8-byte aligned */

static struct kvt_heat_slot *raw_slot(uint32_t i) {
        return (struct kvt_heat_slot *)((char *)table + sizeof(struct kvt_heat_header)) + i;
}

static void test_layout(void) {
        const uint64_t ctr = kvt_heat_counters_offset(SLOTS);
        struct kvt_heat_slot_view v;
        uint32_t g1, g2;

        TAP_EQ_U64(ctr, 64 + 16 * 32, "counters start after the header and 16 slots");
        TAP_EQ_U64(offsetof(struct kvt_heat_slot, launches), 24, "a slot's launch count is its last word");
        kvt_heat_header_init(table, SLOTS, sizeof(table));
        TAP_EQ_INT(((struct kvt_heat_header *)table)->magic, KVT_HEAT_MAGIC, "header carries the magic");
        TAP_EQ_INT(kvt_heat_slot_read(table, sizeof(table), SLOTS, 0, &v), -ENOENT,
                   "a never used slot is empty");

        kvt_heat_slot_publish(table, 3, 7, 4, ctr + 64);
        TAP_EQ_INT(kvt_heat_slot_read(table, sizeof(table), SLOTS, 3, &v), 0, "a published slot reads back");
        TAP_OK(v.region_id == 7 && v.n_chunks == 4 && v.offset == ctr + 64,
               "with its region, chunks and offset");
        TAP_OK(v.generation && !(v.generation & 1), "and an even, non-zero generation");
        g1 = v.generation;

        kvt_heat_counter_add(table, v.offset, 2, 5);
        kvt_heat_counter_add(table, v.offset, 2, 1);
        TAP_EQ_INT(kvt_heat_counter_load(table, v.offset, 2), 6, "counter adds accumulate");
        TAP_EQ_INT(kvt_heat_counter_load(table, v.offset, 1), 0, "neighbours untouched");
        kvt_heat_launch_add(table, 3, 2);
        kvt_heat_launch_add(table, 3, 1);
        TAP_EQ_U64(kvt_heat_launch_load(table, 3), 3, "a slot's launch adds accumulate");
        TAP_EQ_U64(kvt_heat_launch_load(table, 2), 0, "other slots' launches untouched");
        TAP_EQ_U64(raw_slot(3)->launches, 3, "in the slot's launches word (on the wire at byte 24)");

        kvt_heat_slot_clear(table, 3);
        TAP_EQ_INT(kvt_heat_slot_read(table, sizeof(table), SLOTS, 3, &v), -ENOENT,
                   "a cleared slot is empty");
        kvt_heat_slot_publish(table, 3, 7, 4, ctr + 64);
        kvt_heat_slot_read(table, sizeof(table), SLOTS, 3, &v);
        g2 = v.generation;
        TAP_OK(g2 != g1, "republishing the same region changes the generation (%u -> %u)", g1, g2);
        TAP_EQ_U64(kvt_heat_launch_load(table, 3), 0, "a slot published again counts launches from 0");
        TAP_EQ_INT(kvt_heat_slot_generation(table, 3), g2, "generation reads back");

        raw_slot(3)->generation |= 1;
        TAP_EQ_INT(kvt_heat_slot_read(table, sizeof(table), SLOTS, 3, &v), -EAGAIN,
                   "odd generation: being written");
        raw_slot(3)->generation = 0xffffffffu;
        kvt_heat_slot_publish(table, 3, 7, 4, ctr + 64);
        TAP_EQ_INT(kvt_heat_slot_generation(table, 3), 2, "generation wraps past 0 to 2");
}

/* Writes a slot as a hostile shim would and reads it back. */
static int hostile(uint32_t region_id, uint32_t n_chunks, uint64_t offset, uint64_t mapped) {
        struct kvt_heat_slot_view v;

        *raw_slot(5) = (struct kvt_heat_slot){
                .generation = 8, .region_id = region_id, .n_chunks = n_chunks, .offset = offset};
        return kvt_heat_slot_read(table, mapped, SLOTS, 5, &v);
}

static void test_bounds(void) {
        const uint64_t ctr = kvt_heat_counters_offset(SLOTS);
        struct kvt_heat_slot_view v;

        TAP_EQ_INT(hostile(9, 2, ctr, sizeof(table)), 0, "a sane slot passes");
        TAP_EQ_INT(hostile(9, 2, ctr + 2, sizeof(table)), -EBADMSG, "misaligned counters are refused");
        TAP_EQ_INT(hostile(9, 2, ctr - 4, sizeof(table)), -EBADMSG,
                   "counters inside the directory are refused");
        TAP_EQ_INT(hostile(9, 0, ctr, sizeof(table)), -EBADMSG, "a region of 0 chunks is refused");
        TAP_EQ_INT(hostile(9, 0xffffffffu, ctr, sizeof(table)), -EBADMSG,
                   "more chunks than a region can have");
        TAP_EQ_INT(hostile(9, 2, UINT64_MAX - 3, sizeof(table)), -EBADMSG,
                   "an offset that overflows is refused");
        TAP_EQ_INT(hostile(9, 2, KVT_HEAT_MAX_BYTES, sizeof(table)), -EBADMSG,
                   "counters past the largest table");
        TAP_EQ_INT(hostile(9, 2, sizeof(table) - 4, sizeof(table)), -ERANGE,
                   "counters past the mapping: map more, never read");
        TAP_EQ_INT(hostile(0, 1, ctr, sizeof(table)), -EBADMSG, "a free slot with contents is malformed");
        TAP_EQ_INT(kvt_heat_slot_read(table, sizeof(table), SLOTS, SLOTS, &v), -EBADMSG,
                   "slot index past the directory");
        TAP_EQ_INT(kvt_heat_slot_read(table, 100, SLOTS, 0, &v), -EBADMSG,
                   "a mapping smaller than the directory");
}

static int count_fds(void) {
        DIR *d = opendir("/proc/self/fd");
        int n = 0;

        if (!d)
                return -1;
        while (readdir(d))
                n++;
        closedir(d);
        return n;
}

static void test_fd_passing(void) {
        struct kvt_heat_table t = {.version = KVT_HEAT_VERSION, .n_slots = SLOTS, .size_bytes = 4096};
        struct kvt_msg *m = malloc(sizeof(*m));
        struct stat a, b;
        int sv[2], mfd, got = -1, before;

        socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv);
        mfd = memfd_create("test", MFD_CLOEXEC);
        fstat(mfd, &a);

        TAP_EQ_INT(kvt_msg_send_fd(sv[0], KVT_MSG_HEAT_TABLE, 1, &t, sizeof(t), mfd), 0,
                   "HEAT_TABLE sent with an fd");
        TAP_EQ_INT(kvt_msg_recv_fd(sv[1], m, &got), 0, "and received");
        TAP_OK(got >= 0 && fstat(got, &b) == 0 && a.st_ino == b.st_ino, "the fd names the same file");
        TAP_OK(got >= 0 && (fcntl(got, F_GETFD) & FD_CLOEXEC), "received close-on-exec");
        close(got);

        before = count_fds();
        kvt_msg_send_fd(sv[0], KVT_MSG_HEAT_TABLE, 2, &t, sizeof(t), mfd);
        TAP_EQ_INT(kvt_msg_recv(sv[1], m), 0, "plain recv takes the message");
        TAP_EQ_INT(count_fds(), before, "and closes the fd nobody asked for");

        t.n_slots = KVT_HEAT_MAX_SLOTS + 1;
        kvt_msg_send_fd(sv[0], KVT_MSG_HEAT_TABLE, 3, &t, sizeof(t), mfd);
        TAP_EQ_INT(kvt_msg_recv_fd(sv[1], m, &got), -EBADMSG, "too many slots is a bad message");
        TAP_OK(got >= 0, "the caller still gets the fd to close");
        close(got);
        t.n_slots = SLOTS;
        t.size_bytes = 64;
        kvt_msg_send_fd(sv[0], KVT_MSG_HEAT_TABLE, 4, &t, sizeof(t), mfd);
        TAP_EQ_INT(kvt_msg_recv_fd(sv[1], m, &got), -EBADMSG, "a size smaller than the directory is bad");
        close(got);
        t.size_bytes = 4096;
        t.version = 99;
        kvt_msg_send(sv[0], KVT_MSG_HEAT_TABLE, 5, &t, sizeof(t));
        TAP_EQ_INT(kvt_msg_recv_fd(sv[1], m, &got), -EBADMSG, "an unknown table version is bad");
        TAP_EQ_INT(got, -1, "no fd came, none is returned");

        /* Several fds on one message: the first is kept, the rest closed. */
        {
                int fds[3] = {mfd, dup(mfd), dup(mfd)};
                char control[CMSG_SPACE(sizeof(fds))] = {0};
                struct kvt_msg_hdr h = {KVT_PROTO_MAGIC, KVT_PROTO_VERSION, KVT_MSG_HEAT_TABLE, sizeof(t),
                                        6};
                struct iovec iov[2] = {{&h, sizeof(h)}, {&t, sizeof(t)}};
                struct msghdr mh = {.msg_iov = iov,
                                    .msg_iovlen = 2,
                                    .msg_control = control,
                                    .msg_controllen = sizeof(control)};
                struct cmsghdr *c = CMSG_FIRSTHDR(&mh);

                t.version = KVT_HEAT_VERSION;
                c->cmsg_level = SOL_SOCKET;
                c->cmsg_type = SCM_RIGHTS;
                c->cmsg_len = CMSG_LEN(sizeof(fds));
                memcpy(CMSG_DATA(c), fds, sizeof(fds));
                sendmsg(sv[0], &mh, 0);
                close(fds[1]);
                close(fds[2]);
                before = count_fds();
                TAP_EQ_INT(kvt_msg_recv_fd(sv[1], m, &got), 0, "a message with three fds is received");
                TAP_EQ_INT(count_fds(), before + 1, "one fd kept, two closed");
                close(got);
        }
        close(mfd);
        close(sv[0]);
        close(sv[1]);
        free(m);
}

int main(void) {
        test_layout();
        test_bounds();
        test_fd_passing();
        return tap_done();
}
