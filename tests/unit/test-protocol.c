/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "protocol.h"
#include "tap.h"

static struct kvt_msg m;

/* Sends raw bytes on a and receives them as a message on b. */
static int roundtrip_raw(int a, int b, const void *p, size_t n) {
        if (send(a, p, n, 0) != (ssize_t)n)
                return -EIO;
        return kvt_msg_recv(b, &m);
}

static struct kvt_region_add good_region(void) {
        return (struct kvt_region_add){ .region_id = 1, .device = 0, .base = 64ull << 30,
                                        .size_bytes = 64 << 20, .api = KVT_API_CUDA_MALLOC,
                                        .tier = KVT_TIER_HOST_MAPPED };
}

/* Builds header + payload into buf; returns the datagram length. */
static size_t build(void *buf, uint16_t type, const void *payload, size_t len) {
        struct kvt_msg_hdr h = { KVT_PROTO_MAGIC, KVT_PROTO_VERSION, type, (uint32_t)len, 9 };

        memcpy(buf, &h, sizeof(h));
        memcpy((char *)buf + sizeof(h), payload, len);
        return sizeof(h) + len;
}

static void test_roundtrip(int a, int b) {
        struct kvt_region_add r = good_region();
        struct kvt_order o = { .order_id = 77, .region_id = 3, .first_chunk = 5, .n_chunks = 2,
                               .tier = KVT_TIER_VRAM };

        TAP_EQ_INT(kvt_msg_send(a, KVT_MSG_REGION_ADD, 41, &r, sizeof(r)), 0, "send REGION_ADD");
        TAP_EQ_INT(kvt_msg_recv(b, &m), 0, "receive REGION_ADD");
        TAP_EQ_INT(m.hdr.type, KVT_MSG_REGION_ADD, "type survives");
        TAP_EQ_INT(m.hdr.seq, 41, "sequence survives");
        TAP_EQ_U64(m.u.region_add.size_bytes, 64 << 20, "payload survives");
        TAP_EQ_INT(kvt_msg_send(a, KVT_MSG_ORDER, 1, &o, sizeof(o)), 0, "send ORDER");
        TAP_EQ_INT(kvt_msg_recv(b, &m), 0, "receive ORDER");
        TAP_EQ_U64(m.u.order.order_id, 77, "order id survives");
        TAP_EQ_INT(kvt_msg_send(a, KVT_MSG_CTL_STATUS, 2, NULL, 0), 0, "send an empty payload");
        TAP_EQ_INT(kvt_msg_recv(b, &m), 0, "receive an empty payload");
        TAP_EQ_INT(m.hdr.length, 0, "empty payload has length 0");
        TAP_EQ_INT(kvt_msg_recv(b, &m), -EAGAIN, "nothing queued: -EAGAIN");
        TAP_EQ_INT(kvt_msg_recv_timeout(b, &m, 30), -ETIMEDOUT, "timeout expires");
        TAP_EQ_INT(kvt_msg_send(a, KVT_MSG_CTL_DATA, 1, &m, KVT_TEXT_MAX + 1), -EMSGSIZE,
                   "oversized payload refused on send");
}

static void test_rejects(int a, int b) {
        static char buf[KVT_MSG_MAX_BYTES + 64];
        struct kvt_region_add r = good_region();
        struct kvt_hello h = { .proto_version = KVT_PROTO_VERSION };
        struct kvt_order o = { .order_id = 1, .region_id = 1, .n_chunks = 1, .tier = KVT_TIER_VRAM };
        size_t n;

        TAP_EQ_INT(roundtrip_raw(a, b, "abc", 3), -EBADMSG, "runt datagram");
        n = build(buf, KVT_MSG_REGION_ADD, &r, sizeof(r));
        ((struct kvt_msg_hdr *)buf)->magic ^= 1;
        TAP_EQ_INT(roundtrip_raw(a, b, buf, n), -EBADMSG, "bad magic");
        n = build(buf, KVT_MSG_REGION_ADD, &r, sizeof(r));
        ((struct kvt_msg_hdr *)buf)->version++;
        TAP_EQ_INT(roundtrip_raw(a, b, buf, n), -EPROTO, "other version");
        n = build(buf, KVT_MSG_REGION_ADD, &r, sizeof(r));
        TAP_EQ_INT(roundtrip_raw(a, b, buf, n - 1), -EBADMSG, "length field disagrees with datagram");
        n = build(buf, KVT_MSG_REGION_ADD, &r, sizeof(r) - 8);
        TAP_EQ_INT(roundtrip_raw(a, b, buf, n), -EBADMSG, "short fixed-size payload");
        n = build(buf, 0x0777, &r, sizeof(r));
        TAP_EQ_INT(roundtrip_raw(a, b, buf, n), -EBADMSG, "unknown type");
        n = build(buf, KVT_MSG_HELLO, &h, sizeof(h));
        TAP_EQ_INT(roundtrip_raw(a, b, buf, n), 0, "HELLO with an empty name is fine");
        memset(h.name, 'x', sizeof(h.name));
        n = build(buf, KVT_MSG_HELLO, &h, sizeof(h));
        TAP_EQ_INT(roundtrip_raw(a, b, buf, n), -EBADMSG, "unterminated name");
        h.name[0] = 0;
        h.device = KVT_MAX_GPUS;
        n = build(buf, KVT_MSG_HELLO, &h, sizeof(h));
        TAP_EQ_INT(roundtrip_raw(a, b, buf, n), -EBADMSG, "device out of range");
        r.base += 4096;
        n = build(buf, KVT_MSG_REGION_ADD, &r, sizeof(r));
        TAP_EQ_INT(roundtrip_raw(a, b, buf, n), -EBADMSG, "misaligned base");
        r = good_region();
        r.size_bytes = 0;
        n = build(buf, KVT_MSG_REGION_ADD, &r, sizeof(r));
        TAP_EQ_INT(roundtrip_raw(a, b, buf, n), -EBADMSG, "empty region");
        r = good_region();
        r.base = UINT64_MAX - (KVT_CHUNK_BYTES - 1);
        n = build(buf, KVT_MSG_REGION_ADD, &r, sizeof(r));
        TAP_EQ_INT(roundtrip_raw(a, b, buf, n), -EBADMSG, "region wrapping the address space");
        r = good_region();
        r.tier = _KVT_TIER_MAX;
        n = build(buf, KVT_MSG_REGION_ADD, &r, sizeof(r));
        TAP_EQ_INT(roundtrip_raw(a, b, buf, n), -EBADMSG, "unknown tier");
        {
                struct kvt_welcome w = { .client_id = 1, .tick_ms = 10, .capture_min_size = 64 << 20,
                                         .capture_apis = KVT_API_FAMILY_RUNTIME | KVT_API_FAMILY_VMM };
                n = build(buf, KVT_MSG_WELCOME, &w, sizeof(w));
                TAP_EQ_INT(roundtrip_raw(a, b, buf, n), 0, "WELCOME with capture rules accepted");
                TAP_EQ_INT(m.u.welcome.capture_apis, KVT_API_FAMILY_RUNTIME | KVT_API_FAMILY_VMM,
                           "WELCOME carries the capture APIs");
                n = build(buf, KVT_MSG_WELCOME, &w, sizeof(w) - 8);
                TAP_EQ_INT(roundtrip_raw(a, b, buf, n), -EBADMSG,
                           "WELCOME of the old length (no capture APIs)");
                w.capture_apis = KVT_API_FAMILY_ALL + 1;
                n = build(buf, KVT_MSG_WELCOME, &w, sizeof(w));
                TAP_EQ_INT(roundtrip_raw(a, b, buf, n), -EBADMSG, "WELCOME with an unknown API family");
                w.capture_apis = 0;
                n = build(buf, KVT_MSG_WELCOME, &w, sizeof(w));
                TAP_EQ_INT(roundtrip_raw(a, b, buf, n), 0, "WELCOME capturing no API accepted");
                w.capture_min_size = 0;
                n = build(buf, KVT_MSG_WELCOME, &w, sizeof(w));
                TAP_EQ_INT(roundtrip_raw(a, b, buf, n), -EBADMSG, "WELCOME with a zero capture min_size");
        }
        {
                struct kvt_pace pc = { .percent = 100 };
                n = build(buf, KVT_MSG_PACE, &pc, sizeof(pc));
                TAP_EQ_INT(roundtrip_raw(a, b, buf, n), 0, "PACE of 100 percent accepted");
                pc.percent = 1;
                n = build(buf, KVT_MSG_PACE, &pc, sizeof(pc));
                TAP_EQ_INT(roundtrip_raw(a, b, buf, n), 0, "PACE of 1 percent accepted");
                pc.percent = 0;
                n = build(buf, KVT_MSG_PACE, &pc, sizeof(pc));
                TAP_EQ_INT(roundtrip_raw(a, b, buf, n), -EBADMSG, "PACE of 0 percent refused");
                pc.percent = 101;
                n = build(buf, KVT_MSG_PACE, &pc, sizeof(pc));
                TAP_EQ_INT(roundtrip_raw(a, b, buf, n), -EBADMSG, "PACE over 100 percent refused");
        }
        {
                struct kvt_grant gr = { .device = 0, .seq = 1, .vram_cap_bytes = 1ull << 30 };
                struct kvt_grant_ack ga = { .device = 0, .seq = 1, .started_bytes = 1ull << 30 };

                n = build(buf, KVT_MSG_GRANT, &gr, sizeof(gr));
                TAP_EQ_INT(roundtrip_raw(a, b, buf, n), 0, "GRANT accepted");
                gr.seq = 0;
                n = build(buf, KVT_MSG_GRANT, &gr, sizeof(gr));
                TAP_EQ_INT(roundtrip_raw(a, b, buf, n), -EBADMSG, "GRANT of seq 0 (the WELCOME's) refused");
                n = build(buf, KVT_MSG_GRANT_ACK, &ga, sizeof(ga));
                TAP_EQ_INT(roundtrip_raw(a, b, buf, n), 0, "GRANT_ACK accepted");
                ga.device = -1;
                n = build(buf, KVT_MSG_GRANT_ACK, &ga, sizeof(ga));
                TAP_EQ_INT(roundtrip_raw(a, b, buf, n), -EBADMSG, "GRANT_ACK for no device refused");
                ga.device = 0;
                ga.seq = 0;
                n = build(buf, KVT_MSG_GRANT_ACK, &ga, sizeof(ga));
                TAP_EQ_INT(roundtrip_raw(a, b, buf, n), -EBADMSG, "GRANT_ACK of seq 0 refused");
        }
        {
                struct kvt_device d = { .device = 1, .total_bytes = 1ull << 30 };
                n = build(buf, KVT_MSG_DEVICE, &d, sizeof(d));
                TAP_EQ_INT(roundtrip_raw(a, b, buf, n), 0, "DEVICE accepted");
                d.device = KVT_MAX_GPUS;
                n = build(buf, KVT_MSG_DEVICE, &d, sizeof(d));
                TAP_EQ_INT(roundtrip_raw(a, b, buf, n), -EBADMSG, "DEVICE out of range");
                d.device = -1;
                n = build(buf, KVT_MSG_DEVICE, &d, sizeof(d));
                TAP_EQ_INT(roundtrip_raw(a, b, buf, n), -EBADMSG, "DEVICE negative");
                d = (struct kvt_device){ .device = 0, .host_node = -1 };
                n = build(buf, KVT_MSG_DEVICE, &d, sizeof(d));
                TAP_EQ_INT(roundtrip_raw(a, b, buf, n), 0, "DEVICE with an unknown home node accepted");
                d.host_node = KVT_MAX_NODES;
                n = build(buf, KVT_MSG_DEVICE, &d, sizeof(d));
                TAP_EQ_INT(roundtrip_raw(a, b, buf, n), -EBADMSG, "DEVICE with a home node out of range");
                d.host_node = -2;
                n = build(buf, KVT_MSG_DEVICE, &d, sizeof(d));
                TAP_EQ_INT(roundtrip_raw(a, b, buf, n), -EBADMSG, "DEVICE with a home node below -1");
        }
        {
                struct kvt_order ho = { .order_id = 1, .region_id = 1, .n_chunks = 1, .tier = KVT_TIER_HOST_MAPPED,
                                       .host_node = KVT_MAX_NODES - 1 };
                n = build(buf, KVT_MSG_ORDER, &ho, sizeof(ho));
                TAP_EQ_INT(roundtrip_raw(a, b, buf, n), 0, "ORDER to the last host node accepted");
                ho.host_node = KVT_MAX_NODES;
                n = build(buf, KVT_MSG_ORDER, &ho, sizeof(ho));
                TAP_EQ_INT(roundtrip_raw(a, b, buf, n), -EBADMSG, "ORDER to a host node out of range");
                ho.host_node = -2;
                n = build(buf, KVT_MSG_ORDER, &ho, sizeof(ho));
                TAP_EQ_INT(roundtrip_raw(a, b, buf, n), -EBADMSG, "ORDER to a host node below -1");
        }
        r = good_region();
        r.rule = _KVT_RULE_MAX;
        n = build(buf, KVT_MSG_REGION_ADD, &r, sizeof(r));
        TAP_EQ_INT(roundtrip_raw(a, b, buf, n), -EBADMSG, "unknown capture rule");
        r = good_region();
        r.flags = 0x80;
        n = build(buf, KVT_MSG_REGION_ADD, &r, sizeof(r));
        TAP_EQ_INT(roundtrip_raw(a, b, buf, n), -EBADMSG, "unknown region flag");
        r = good_region();
        r.flags = KVT_REGION_UNTIERED;
        n = build(buf, KVT_MSG_REGION_ADD, &r, sizeof(r));
        TAP_EQ_INT(roundtrip_raw(a, b, buf, n), -EBADMSG, "untiered region claiming a tier");
        r.tier = KVT_TIER_NONE;
        r.api = KVT_API_CU_MEM_MAP;
        r.rule = KVT_RULE_VMM;
        n = build(buf, KVT_MSG_REGION_ADD, &r, sizeof(r));
        TAP_EQ_INT(roundtrip_raw(a, b, buf, n), 0, "untiered VMM region in no tier is fine");
        r = good_region();
        r.api = _KVT_API_MAX;
        n = build(buf, KVT_MSG_REGION_ADD, &r, sizeof(r));
        TAP_EQ_INT(roundtrip_raw(a, b, buf, n), -EBADMSG, "unknown API");
        o.n_chunks = 0;
        n = build(buf, KVT_MSG_ORDER, &o, sizeof(o));
        TAP_EQ_INT(roundtrip_raw(a, b, buf, n), -EBADMSG, "order of no chunks");
        o.n_chunks = 1;
        o.tier = KVT_TIER_NONE;
        n = build(buf, KVT_MSG_ORDER, &o, sizeof(o));
        TAP_EQ_INT(roundtrip_raw(a, b, buf, n), -EBADMSG, "order to no tier");
        {
                static char big[KVT_TEXT_MAX + 32];
                n = build(buf, KVT_MSG_CTL_DATA, big, sizeof(big));
        }
        TAP_EQ_INT(roundtrip_raw(a, b, buf, n), -EBADMSG, "datagram over 64 KiB");
        TAP_EQ_INT(kvt_msg_send(a, KVT_MSG_CTL_STATUS, 3, NULL, 0), 0, "good message after bad ones");
        TAP_EQ_INT(kvt_msg_recv(b, &m), 0, "still received");
}

/* CTL_SET: one NUL-terminated "key=value", nothing after the NUL, bounded. */
static void test_ctl_set(int a, int b) {
        static char buf[KVT_MSG_MAX_BYTES];
        static char long_text[KVT_CTL_SET_MAX + 1];
        size_t n;

        n = build(buf, KVT_MSG_CTL_SET, "policy=lru", 11);
        TAP_EQ_INT(roundtrip_raw(a, b, buf, n), 0, "CTL_SET with a terminated text");
        TAP_EQ_STR(m.u.text, "policy=lru", "CTL_SET text survives");
        n = build(buf, KVT_MSG_CTL_SET, "policy=lru", 10);
        TAP_EQ_INT(roundtrip_raw(a, b, buf, n), -EBADMSG, "CTL_SET without its NUL");
        n = build(buf, KVT_MSG_CTL_SET, "policy\0lru", 11);
        TAP_EQ_INT(roundtrip_raw(a, b, buf, n), -EBADMSG, "CTL_SET with a NUL inside");
        n = build(buf, KVT_MSG_CTL_SET, "", 1);
        TAP_EQ_INT(roundtrip_raw(a, b, buf, n), -EBADMSG, "CTL_SET with an empty text");
        memset(long_text, 'x', sizeof(long_text) - 1);
        n = build(buf, KVT_MSG_CTL_SET, long_text, sizeof(long_text));
        TAP_EQ_INT(roundtrip_raw(a, b, buf, n), -EBADMSG, "CTL_SET longer than KVT_CTL_SET_MAX");
        TAP_EQ_STR(kvt_msg_type_name(KVT_MSG_CTL_SET), "CTL_SET", "CTL_SET has a name");
        n = build(buf, KVT_MSG_CTL_CONFIG, "", 0);
        TAP_EQ_INT(roundtrip_raw(a, b, buf, n), 0, "CTL_CONFIG without a payload");
        n = build(buf, KVT_MSG_CTL_CONFIG, "x", 1);
        TAP_EQ_INT(roundtrip_raw(a, b, buf, n), -EBADMSG, "CTL_CONFIG with a payload");
        TAP_EQ_STR(kvt_msg_type_name(KVT_MSG_CTL_CONFIG), "CTL_CONFIG", "CTL_CONFIG has a name");
}

/* API family lists ([capture] apis), both ways. */
static void test_api_families(void) {
        uint32_t f = 0xdead;
        char buf[64];

        TAP_EQ_INT(kvt_api_families_parse("runtime", &f), 0, "runtime parses");
        TAP_EQ_INT(f, KVT_API_FAMILY_RUNTIME, "runtime alone");
        TAP_EQ_INT(kvt_api_families_parse("driver,async,vmm", &f), 0, "a list parses");
        TAP_EQ_INT(f, KVT_API_FAMILY_DRIVER | KVT_API_FAMILY_ASYNC | KVT_API_FAMILY_VMM,
                   "a list ORs its families");
        TAP_EQ_INT(kvt_api_families_parse("all", &f), 0, "all parses");
        TAP_EQ_INT(f, KVT_API_FAMILY_ALL, "all is every family");
        TAP_EQ_INT(kvt_api_families_parse("none", &f), 0, "none parses");
        TAP_EQ_INT(f, 0, "none is no family");
        f = 7;
        TAP_EQ_INT(kvt_api_families_parse("runtime,bogus", &f), -EINVAL, "an unknown word is refused");
        TAP_EQ_INT(f, 7, "and leaves the value alone");
        TAP_EQ_INT(kvt_api_families_parse("", &f), -EINVAL, "empty is refused");
        TAP_EQ_INT(kvt_api_families_parse("runtime,", &f), -EINVAL, "a trailing comma is refused");
        TAP_EQ_INT(kvt_api_families_parse("runtimes", &f), -EINVAL, "no prefix matching");
        kvt_api_families_format(KVT_API_FAMILY_ALL, buf, sizeof(buf));
        TAP_EQ_STR(buf, "all", "every family formats as all");
        kvt_api_families_format(0, buf, sizeof(buf));
        TAP_EQ_STR(buf, "none", "no family formats as none");
        kvt_api_families_format(KVT_API_FAMILY_DRIVER | KVT_API_FAMILY_VMM, buf, sizeof(buf));
        TAP_EQ_STR(buf, "driver,vmm", "a mask formats as a list");
        TAP_OK(kvt_api_families_parse(buf, &f) == 0 && f == (KVT_API_FAMILY_DRIVER | KVT_API_FAMILY_VMM),
               "and parses back");
        kvt_api_families_format(KVT_API_FAMILY_RUNTIME | KVT_API_FAMILY_ASYNC, buf, 9);
        TAP_EQ_STR(buf, "runtime,", "a short buffer truncates");
}

int main(void) {
        int sv[2];

        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK, 0, sv) < 0)
                return 99;
        test_roundtrip(sv[0], sv[1]);
        test_rejects(sv[0], sv[1]);
        test_ctl_set(sv[0], sv[1]);
        test_api_families();
        TAP_EQ_STR(kvt_msg_type_name(KVT_MSG_ORDER_DONE), "ORDER_DONE", "type names");
        TAP_EQ_STR(kvt_api_name(KVT_API_CU_MEM_ALLOC_ASYNC), "cuMemAllocAsync", "API names");
        TAP_EQ_STR(kvt_api_name(_KVT_API_MAX), "?", "unknown API name");
        TAP_EQ_STR(kvt_rule_name(KVT_RULE_CAPTURE_AFTER), "capture-after", "rule names");
        TAP_EQ_INT((int)(sizeof(struct kvt_region_add) % 8), 0, "REGION_ADD keeps 8-byte alignment");
        TAP_EQ_INT((int)(sizeof(struct kvt_welcome) % 8), 0, "WELCOME keeps 8-byte alignment");
        TAP_EQ_STR(kvt_tier_name(KVT_TIER_HOST_MAPPED), "host-mapped", "tier names");
        close(sv[1]);
        TAP_EQ_INT(kvt_msg_send(sv[0], KVT_MSG_CTL_STATUS, 1, NULL, 0), -EPIPE, "send to a closed peer");
        close(sv[0]);
        return tap_done();
}
