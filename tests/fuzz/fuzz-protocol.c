/* SPDX-License-Identifier: MIT */
/*
 * Fuzzes kvt_msg_check(), the gate every datagram passes.  The first bytes
 * of an input pick a message type and whether the header is sane, the rest
 * is the payload, so that most inputs reach the payload checks.  An accepted
 * message must hold what the receivers rely on: a known type, the exact
 * length, and in-range fields; and it must survive a trip through a
 * SEQPACKET socket unchanged.
 */
#include "config.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fuzz.h"
#include "protocol.h"

static const uint16_t types[] = {
        KVT_MSG_HELLO, KVT_MSG_REGION_ADD, KVT_MSG_REGION_DEL, KVT_MSG_ORDER_DONE, KVT_MSG_HINT,
        KVT_MSG_DEVICE, KVT_MSG_WELCOME,   KVT_MSG_ORDER,      KVT_MSG_CTL_STATUS, KVT_MSG_CTL_DATA,
        KVT_MSG_CTL_END, KVT_MSG_CTL_CONFIG, KVT_MSG_SSD_HELLO, KVT_MSG_SSD_OPEN, KVT_MSG_SSD_WRITE,
        KVT_MSG_SSD_READ, KVT_MSG_SSD_DROP, KVT_MSG_SSD_REPLY, KVT_MSG_SSD_WELCOME,
};

static void check_accepted(const struct kvt_msg *m) {
        int known;
        size_t want = kvt_msg_payload_size(m->hdr.type, &known);

        if (!known || (want != SIZE_MAX && want != m->hdr.length))
                fuzz_fail("accepted type 0x%x with length %u", m->hdr.type, m->hdr.length);
        switch (m->hdr.type) {
        case KVT_MSG_REGION_ADD: {
                const struct kvt_region_add *r = &m->u.region_add;
                if (r->size_bytes == 0 || r->size_bytes > KVT_MAX_REGION_BYTES || r->base + r->size_bytes < r->base ||
                    r->device < 0 || r->device >= KVT_MAX_GPUS)
                        fuzz_fail("accepted a bad REGION_ADD");
                break;
        }
        case KVT_MSG_HELLO:
                if (!memchr(m->u.hello.name, 0, sizeof(m->u.hello.name)))
                        fuzz_fail("accepted an unterminated HELLO name");
                break;
        case KVT_MSG_WELCOME:
                if (m->u.welcome.capture_min_size == 0 ||
                    (m->u.welcome.capture_apis & ~(uint32_t)KVT_API_FAMILY_ALL))
                        fuzz_fail("accepted a bad WELCOME");
                break;
        case KVT_MSG_ORDER:
                if (m->u.order.n_chunks == 0 || m->u.order.tier == KVT_TIER_NONE || m->u.order.tier >= _KVT_TIER_MAX)
                        fuzz_fail("accepted a bad ORDER");
                break;
        case KVT_MSG_SSD_HELLO:
                if (m->u.ssd_hello.staging_bytes == 0 || m->u.ssd_hello.staging_bytes % KVT_SSD_ALIGN ||
                    m->u.ssd_hello.staging_bytes > KVT_SSD_MAX_STAGING || m->u.ssd_hello.next_handle == 0 ||
                    m->u.ssd_hello.next_handle > KVT_SSD_MAX_HANDLE)
                        fuzz_fail("accepted a bad SSD_HELLO");
                break;
        case KVT_MSG_SSD_WELCOME:
                if (m->u.ssd_welcome.status > 0 || m->u.ssd_welcome.reattached > 1 ||
                    m->u.ssd_welcome.block_bytes % KVT_SSD_ALIGN || m->u.ssd_welcome.block_bytes > KVT_SSD_MAX_STAGING ||
                    (m->u.ssd_welcome.status == 0 && m->u.ssd_welcome.block_bytes == 0))
                        fuzz_fail("accepted a bad SSD_WELCOME");
                break;
        case KVT_MSG_SSD_WRITE:
        case KVT_MSG_SSD_READ:
                if (m->u.ssd_io.len == 0 || m->u.ssd_io.len > KVT_SSD_MAX_STAGING || m->u.ssd_io.offset % KVT_SSD_ALIGN ||
                    m->u.ssd_io.staging_offset % KVT_SSD_ALIGN || m->u.ssd_io.staging_offset > KVT_SSD_MAX_STAGING)
                        fuzz_fail("accepted a bad SSD I/O");
                break;
        default:
                break;
        }
        (void)kvt_msg_type_name(m->hdr.type);
}

static void roundtrip(const struct kvt_msg *m) {
        static struct kvt_msg back;
        int sv[2];

        if (socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv) < 0)
                return;
        if (kvt_msg_send(sv[0], m->hdr.type, m->hdr.seq, &m->u, m->hdr.length) != 0 ||
            kvt_msg_recv(sv[1], &back) != 0 || memcmp(&back, m, sizeof(m->hdr) + m->hdr.length) != 0)
                fuzz_fail("accepted message of type 0x%x did not survive the socket", m->hdr.type);
        close(sv[0]);
        close(sv[1]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        static struct kvt_msg m;
        size_t n;

        if (size < 2)
                return 0;
        memset(&m, 0, sizeof(m));
        if (data[0] & 0x80) { /* raw: the input is the datagram */
                n = size - 1 < sizeof(m) ? size - 1 : sizeof(m);
                memcpy(&m, data + 1, n);
        } else { /* framed: a sane header around the payload, mostly */
                size_t len = size - 2 < KVT_TEXT_MAX ? size - 2 : KVT_TEXT_MAX;
                m.hdr = (struct kvt_msg_hdr){ KVT_PROTO_MAGIC, KVT_PROTO_VERSION,
                                              types[data[1] % (sizeof(types) / sizeof(types[0]))],
                                              (uint32_t)len, data[0] };
                if (data[0] & 0x40)
                        m.hdr.length ^= 1u << (data[1] % 20);
                memcpy(&m.u, data + 2, len);
                n = sizeof(m.hdr) + len;
        }
        if (kvt_msg_check(&m, n) == 0) {
                check_accepted(&m);
                roundtrip(&m);
        }
        return 0;
}
