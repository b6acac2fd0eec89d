/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The kvtier wire protocol, spoken over one AF_UNIX SOCK_SEQPACKET socket by
 * the shim (libkvtier.so), the daemon (kvtierd) and the control tool
 * (kvtierctl).  One datagram is one message: a fixed header followed by the
 * payload struct of its type.
 *
 * Bump KVT_PROTO_VERSION whenever any struct, type number or meaning in this
 * file changes.  The receiver checks magic, version, the exact payload length
 * of every fixed-size type, value ranges and NUL termination of strings, and
 * drops a peer that sends anything else (kvt_msg_check()).
 *
 * Message types live in numbered ranges:
 *   0x01xx  shim -> daemon      0x02xx  daemon -> shim
 *   0x03xx  control -> daemon   0x04xx  daemon -> control
 */

#include <stddef.h>
#include <stdint.h>

#define KVT_PROTO_MAGIC   0x4b565431u /* "KVT1" */
#define KVT_PROTO_VERSION 10u

/* Largest datagram, header included (DESIGN.md: max 64 KiB). */
#define KVT_MSG_MAX_BYTES (64u * 1024u)

/* UVM's big page; the unit of placement everywhere in kvtier. */
#define KVT_CHUNK_SHIFT 21u
#define KVT_CHUNK_BYTES (1ull << KVT_CHUNK_SHIFT)
/* A chunk's sample page, its first 4 KiB: re-arms and probes (orders with
 * KVT_ORDER_REARM, KVT_ORDER_PROBE) unmap it alone, and a use of the chunk
 * is seen when the GPU's touch of it faults. */
#define KVT_SAMPLE_PAGE_BYTES 4096ull

/* Bounds that make every count in a message checkable. */
#define KVT_MAX_GPUS         64
#define KVT_MAX_NODES        64 /* host NUMA nodes 0..63 */
#define KVT_MAX_REGION_BYTES (1ull << 44) /* 16 TiB: 8 M chunks */
#define KVT_NAME_MAX         64

enum kvt_msg_type {
        /* shim -> daemon */
        KVT_MSG_HELLO = 0x0101,      /* struct kvt_hello */
        KVT_MSG_REGION_ADD = 0x0102, /* struct kvt_region_add */
        KVT_MSG_REGION_DEL = 0x0103, /* struct kvt_region_del */
        KVT_MSG_ORDER_DONE = 0x0104, /* struct kvt_order_done */
        KVT_MSG_HINT = 0x0105,       /* struct kvt_hint */
        KVT_MSG_DEVICE = 0x0107,     /* struct kvt_device */
        KVT_MSG_HEAT_TABLE = 0x0106, /* struct kvt_heat_table, with the memfd (SCM_RIGHTS) */
        KVT_MSG_DEMAND = 0x0108,     /* no payload: faults were counted into the heat table; plan now */
        KVT_MSG_GRANT_ACK = 0x0109,  /* struct kvt_grant_ack: a GRANT applied */
        /* The SSD tier, on a connection of its own (first message SSD_HELLO);
         * each request gets one SSD_REPLY, in order (shim/ssd.c, daemon/ssd.c). */
        KVT_MSG_SSD_HELLO = 0x0110, /* struct kvt_ssd_hello, with the staging memfd (SCM_RIGHTS) */
        KVT_MSG_SSD_OPEN = 0x0111,  /* struct kvt_ssd_open: a new spill of size_bytes */
        KVT_MSG_SSD_WRITE = 0x0112, /* struct kvt_ssd_io: staging -> the spill's blocks */
        KVT_MSG_SSD_READ = 0x0113,  /* struct kvt_ssd_io: the spill's blocks, verified -> staging */
        KVT_MSG_SSD_DROP = 0x0114,  /* struct kvt_ssd_drop: forget a spill, free its blocks */

        /* daemon -> shim */
        KVT_MSG_WELCOME = 0x0201, /* struct kvt_welcome */
        KVT_MSG_ORDER = 0x0202,   /* struct kvt_order */
        KVT_MSG_GRANT = 0x0203,   /* struct kvt_grant */
        KVT_MSG_PACE = 0x0204,    /* struct kvt_pace */
        KVT_MSG_SSD_REPLY = 0x0210,   /* struct kvt_ssd_reply: the answer to each SSD_* request */
        KVT_MSG_SSD_WELCOME = 0x0211, /* struct kvt_ssd_welcome: the answer to SSD_HELLO */

        /* control -> daemon */
        KVT_MSG_CTL_STATUS = 0x0301, /* no payload; reply: CTL_DATA (the status document), CTL_END */
        KVT_MSG_CTL_SET = 0x0302,    /* text "key=value", NUL-terminated (needs an admin); reply: when
                                      * refused, CTL_DATA {"error": REASON}, then CTL_END */
        KVT_MSG_CTL_CONFIG = 0x0303, /* no payload; reply: CTL_DATA {"config": [ENTRY...]}, CTL_END:
                                      * the configuration in effect, one entry per key (as status, open
                                      * to every peer that may connect) */

        /* daemon -> control */
        KVT_MSG_CTL_DATA = 0x0401,  /* text: a piece of a JSON document */
        KVT_MSG_CTL_END = 0x0402,   /* struct kvt_ctl_end */
};

struct kvt_msg_hdr {
        uint32_t magic;
        uint16_t version;
        uint16_t type;   /* enum kvt_msg_type */
        uint32_t length; /* payload bytes after this header */
        uint32_t seq;    /* sender's counter; replies echo the request's */
};

/* Tiers a chunk can be in (DESIGN.md "Units of state"); the policy's enum
 * policy_tier has the same values. */
enum kvt_tier {
        KVT_TIER_NONE = 0,        /* never placed: UVM decides on first touch */
        KVT_TIER_VRAM = 1,        /* preferred location the GPU, prefetched there */
        KVT_TIER_HOST_MAPPED = 2, /* preferred location host, accessed-by the GPU */
        KVT_TIER_HOST = 3,        /* preferred location host, no mapping: a GPU touch faults (and maps it) */
        _KVT_TIER_MAX,
};

/* Which interposed entry point captured a region. */
enum kvt_alloc_api {
        KVT_API_CUDA_MALLOC = 1,
        KVT_API_CU_MEM_ALLOC = 2,                 /* cuMemAlloc_v2 */
        KVT_API_CUDA_MALLOC_ASYNC = 3,
        KVT_API_CUDA_MALLOC_FROM_POOL_ASYNC = 4,
        KVT_API_CU_MEM_ALLOC_ASYNC = 5,
        KVT_API_CU_MEM_ALLOC_FROM_POOL_ASYNC = 6,
        KVT_API_CU_MEM_MAP = 7,                   /* VMM: tracked, never tiered */
        _KVT_API_MAX,
};

/* Families of allocation APIs, as a mask: which ones shims capture
 * (kvtierd.conf [capture] apis, sent in the WELCOME). */
enum {
        KVT_API_FAMILY_RUNTIME = 1u << 0, /* cudaMalloc */
        KVT_API_FAMILY_DRIVER = 1u << 1,  /* cuMemAlloc_v2 */
        KVT_API_FAMILY_ASYNC = 1u << 2,   /* cudaMalloc(FromPool)Async, cuMemAlloc(FromPool)Async */
        KVT_API_FAMILY_VMM = 1u << 3,     /* cuMemMap: tracked, never tiered */
        KVT_API_FAMILY_ALL = (1u << 4) - 1,
};

/* Which classification rule made the shim take a region. */
enum kvt_capture_rule {
        KVT_RULE_NONE = 0,          /* not said (an older shim) */
        KVT_RULE_MIN_SIZE = 1,      /* at least KVTIER_MIN_SIZE */
        KVT_RULE_CAPTURE_AFTER = 2, /* at least min_size, after [capture] capture_after bytes */
        KVT_RULE_VMM = 3,           /* a VMM mapping: tracked for visibility only */
        _KVT_RULE_MAX,
};

/* struct kvt_region_add flags. */
enum {
        KVT_REGION_UNTIERED = 1u << 0, /* kvtier cannot move it (VMM): shown, never planned */
        _KVT_REGION_FLAGS_ALL = KVT_REGION_UNTIERED,
};

/* First message of a shim connection. */
struct kvt_hello {
        uint32_t proto_version;
        int32_t device;                /* CUDA ordinal the process uses */
        uint64_t device_total_bytes;   /* from cudaMemGetInfo, for "N%" budgets */
        char name[KVT_NAME_MAX];       /* comm of the process, NUL-terminated */
};

/* A GPU the process uses, sent once per connection before the first
 * REGION_ADD on it (the HELLO's device included), so that a percentage
 * budget of that GPU can be resolved and its host tier booked on its node. */
struct kvt_device {
        int32_t device;
        int32_t host_node;    /* the GPU's home host NUMA node (cudaDevAttrHostNumaId), -1 = unknown */
        uint64_t total_bytes; /* from cudaMemGetInfo on that device; 0 = unknown */
};
_Static_assert(sizeof(struct kvt_device) == 16, "DEVICE is 16 bytes on the wire, without padding");

struct kvt_welcome {
        uint32_t client_id;
        uint32_t tick_ms;
        uint64_t vram_budget_bytes; /* the budget of the HELLO's device */
        uint64_t host_grant_bytes;  /* host memory kvtier may tier into ([host] host_budget) */
        /* The daemon's [capture] rules: the shim applies each one its
         * environment does not set (KVTIER_MIN_SIZE ... win). */
        uint64_t capture_min_size; /* >= 1 */
        uint64_t capture_after;
        uint64_t max_captured; /* 0 = no limit */
        uint32_t capture_apis; /* KVT_API_FAMILY_* captured ([capture] apis) */
        uint32_t reserved;
        uint64_t vram_grant_bytes; /* the first GRANT for the HELLO's device (struct kvt_grant) */
};
_Static_assert(sizeof(struct kvt_welcome) == 64, "WELCOME is 64 bytes on the wire, without padding");

/* Where new captures on a device may start: in VRAM while the bytes the
 * client started there since it connected stay within vram_cap_bytes, in
 * host memory (unmapped) beyond.  A cap, not an amount, so that captures
 * the daemon has not heard of yet are never granted twice; each GRANT
 * replaces the last for its device.  The daemon grants the free budget and,
 * where VRAM holds chunks nothing used lately, up to [gpu] capture_margin
 * over it: the planner evicts those behind the capture.
 *
 * Room a GRANT offers stays the shim's until a GRANT_ACK says a lower cap
 * is in force: the daemon promotes nothing into it before, since a capture
 * may be taking it at that very moment (its REGION_ADD comes later, after
 * the capture's prefetch).  The shim answers every GRANT with a GRANT_ACK
 * of the same seq, sent once the new cap is in force, with the bytes its
 * captures had taken from the grants of this connection by then, those
 * not registered yet included.  The WELCOME's vram_grant_bytes is seq 0,
 * in force from the start: it needs no GRANT_ACK. */
struct kvt_grant {
        int32_t device;
        uint32_t seq; /* 1, 2, ... per connection and device */
        uint64_t vram_cap_bytes;
};
_Static_assert(sizeof(struct kvt_grant) == 16, "GRANT is 16 bytes on the wire, without padding");

struct kvt_grant_ack {
        int32_t device;
        uint32_t seq;           /* the GRANT's */
        uint64_t started_bytes; /* taken from this connection's grants for device, in all */
};
_Static_assert(sizeof(struct kvt_grant_ack) == 16, "GRANT_ACK is 16 bytes on the wire, without padding");

/* How much of the GPU's time the process's kernels may take: while a client
 * of higher [client.*] priority is busy on a GPU the process uses, the
 * daemon sends [gpu] yield_percent; 100 when none is.  The shim paces its
 * kernel launches to it (shim/launch.c).  Each PACE replaces the last; a
 * new connection starts at 100. */
struct kvt_pace {
        uint32_t percent; /* 1 .. 100 */
        uint32_t reserved;
};
_Static_assert(sizeof(struct kvt_pace) == 8, "PACE is 8 bytes on the wire, without padding");

/* A captured allocation.  region_id is chosen by the shim, unique within its
 * connection; the daemon keys regions by (connection, region_id). */
struct kvt_region_add {
        uint32_t region_id;
        int32_t device;
        uint64_t base;       /* 2 MiB aligned */
        uint64_t size_bytes; /* multiple of 2 MiB, at most KVT_MAX_REGION_BYTES */
        uint32_t api;        /* enum kvt_alloc_api */
        uint32_t tier;       /* enum kvt_tier it starts in: VRAM (under the GRANT), HOST; NONE if untiered */
        uint32_t rule;       /* enum kvt_capture_rule */
        uint32_t flags;      /* KVT_REGION_* */
};

struct kvt_region_del {
        uint32_t region_id;
        uint32_t reserved;
};

/* struct kvt_order flags. */
enum {
        /* Re-arm: the chunks are in host memory (tier HOST) and the GPU has
         * mapped them; drop that mapping of one 4 KiB page of each, so that
         * the GPU's next touch of it faults (an access sample).  No data
         * moves. */
        KVT_ORDER_REARM = 1u << 0,
        /* Probe: the chunks are in VRAM and stay there; one 4 KiB page of
         * each goes to the host, unmapped, so that the GPU's next touch of
         * it faults (an access sample).  Sent with tier HOST; the books keep
         * the chunks in VRAM. */
        KVT_ORDER_PROBE = 1u << 1,
        _KVT_ORDER_FLAGS_ALL = KVT_ORDER_REARM | KVT_ORDER_PROBE,
};

/* Move chunks [first_chunk, first_chunk + n_chunks) of a region to a tier. */
struct kvt_order {
        uint64_t order_id;
        uint32_t region_id;
        uint32_t first_chunk;
        uint32_t n_chunks;
        uint32_t tier;      /* enum kvt_tier: VRAM, HOST_MAPPED or HOST */
        int32_t host_node;  /* host tiers: the NUMA node the chunks go to; -1 = the GPU's home
                             * node as the shim finds it (also for VRAM) */
        uint32_t flags;     /* KVT_ORDER_*: at most one, only with tier HOST */
};
_Static_assert(sizeof(struct kvt_order) == 32, "ORDER is 32 bytes on the wire, without padding");

struct kvt_order_done {
        uint64_t order_id;
        int32_t status;   /* 0, -ENOENT if the region was freed before the order
                           * ran (a cancellation, not a failure), or -errno */
        int32_t cuda_err; /* the CUDA error code behind a failure, else 0 */
        uint64_t elapsed_ns;
};

enum kvt_hint_kind {
        KVT_HINT_HOT = 1,  /* the range is being used now */
        KVT_HINT_COLD = 2, /* the range will not be used soon */
        KVT_HINT_PINNED = 3,    /* keep it in VRAM: never evicted until DONE */
        KVT_HINT_WILL_NEED = 4, /* about to be used: promote it as if hot */
        KVT_HINT_DONE = 5,      /* finished with it: cold and unpinned */
        /* The shim's own, never kvtier_hint()'s: the SSD tier (kvtier_spill)
         * released the range's whole chunks (its contents are on disk: the
         * books charge it nowhere and nothing moves it), or a restore put
         * them back, in VRAM under the client's grant or in host memory
         * unmapped (as a capture starts). */
        KVT_HINT_SPILLED = 6,
        KVT_HINT_RESTORED_VRAM = 7,
        KVT_HINT_RESTORED_HOST = 8,
        _KVT_HINT_MAX,
};

/* Engine-supplied access hint for chunks of a region. */
struct kvt_hint {
        uint32_t region_id;
        uint32_t first_chunk;
        uint32_t n_chunks;
        uint32_t kind; /* enum kvt_hint_kind */
};

/* Announces the shim's heat table (common/heat-table.h), once per
 * connection; the memfd travels as SCM_RIGHTS with this message.  The
 * daemon requires F_SEAL_SHRINK on it and maps it read-only. */
struct kvt_heat_table {
        uint32_t version; /* KVT_HEAT_VERSION */
        uint32_t n_slots; /* directory slots, KVT_HEAT_MIN_SLOTS .. KVT_HEAT_MAX_SLOTS */
        uint64_t size_bytes; /* file size at sending */
};

struct kvt_ctl_end {
        int32_t status; /* 0 or -errno */
        uint32_t reserved;
};

/* The SSD tier.  The shim's staging buffer is a memfd sealed against
 * shrinking and growing; the daemon maps it and moves bytes between it and
 * its own files, which clients never see.  Offsets and lengths in the
 * staging buffer and in a spill are multiples of KVT_SSD_ALIGN, except that
 * an I/O may end at the spill's end. */
#define KVT_SSD_ALIGN         4096u
#define KVT_SSD_MAX_STAGING   (1ull << 32) /* 4 GiB */
#define KVT_SSD_MAX_SPILL     KVT_MAX_REGION_BYTES

/* A session's token: 128 random bits the daemon gives it in SSD_WELCOME. */
#define KVT_SSD_TOKEN_BYTES 16
/* Handles are 1 .. KVT_SSD_MAX_HANDLE: far from wrapping when counted up. */
#define KVT_SSD_MAX_HANDLE (1ull << 62)

struct kvt_ssd_hello {
        uint32_t proto_version;
        uint32_t reserved;
        uint64_t staging_bytes; /* the memfd's size, a multiple of KVT_SSD_ALIGN, at most KVT_SSD_MAX_STAGING */
        /* The token an earlier daemon gave this process, to take its spills
         * back after a restart (the daemon also checks the peer's uid and
         * pid); all zero: a new session. */
        uint8_t token[KVT_SSD_TOKEN_BYTES];
        /* The least handle the session may give (1 .. KVT_SSD_MAX_HANDLE):
         * one above every handle the client holds, so that one process never
         * gets a handle twice. */
        uint64_t next_handle;
};
_Static_assert(sizeof(struct kvt_ssd_hello) == 40, "SSD_HELLO is 40 bytes on the wire, without padding");

struct kvt_ssd_welcome {
        int32_t status;       /* 0, or -ENOSYS (no SSD tier: [ssd] dir unusable) */
        uint32_t reattached;  /* 1: the token's spills are this session's again; 0: a new session */
        uint64_t block_bytes; /* the session's block: every I/O but a spill's last is a multiple of it */
        uint8_t token[KVT_SSD_TOKEN_BYTES]; /* the session's, for the next SSD_HELLO */
        uint64_t spills;      /* spills re-attached */
};
_Static_assert(sizeof(struct kvt_ssd_welcome) == 40, "SSD_WELCOME is 40 bytes on the wire, without padding");

struct kvt_ssd_open {
        uint64_t size_bytes; /* 1 .. KVT_SSD_MAX_SPILL */
};

/* Bytes [offset, offset + len) of a spill, at staging_offset in the staging
 * buffer. */
struct kvt_ssd_io {
        uint64_t handle;
        uint64_t offset;
        uint64_t staging_offset;
        uint64_t len; /* 1 .. staging size */
};
_Static_assert(sizeof(struct kvt_ssd_io) == 32, "SSD_WRITE/READ are 32 bytes on the wire, without padding");

struct kvt_ssd_drop {
        uint64_t handle;
};

/* status: 0, or -errno: -ENOSPC (the disk), -EDQUOT ([ssd] quotas), -EBADMSG
 * (a block failed its checksum or did not decompress), -ENODATA (a short
 * read), -EIO (an I/O error that retries did not cure), -ENOENT (no such
 * spill: in a re-attached session, one whose index record did not survive),
 * -EINVAL (a range outside the spill or the staging buffer), -ENOSYS (no SSD
 * tier: [ssd] dir unusable). */
struct kvt_ssd_reply {
        int32_t status;
        uint32_t retries;    /* transient errors retried for this request */
        uint64_t handle;     /* OPEN: the new spill's, else the request's */
        uint64_t bytes;      /* moved (READ/WRITE), stored on disk (OPEN: 0) */
        uint64_t elapsed_ns; /* in the daemon */
};
_Static_assert(sizeof(struct kvt_ssd_reply) == 32, "SSD_REPLY is 32 bytes on the wire, without padding");

/* A message as read off the socket, header checked. */
struct kvt_msg {
        struct kvt_msg_hdr hdr;
        union {
                struct kvt_hello hello;
                struct kvt_welcome welcome;
                struct kvt_grant grant;
                struct kvt_grant_ack grant_ack;
                struct kvt_pace pace;
                struct kvt_region_add region_add;
                struct kvt_region_del region_del;
                struct kvt_order order;
                struct kvt_order_done order_done;
                struct kvt_hint hint;
                struct kvt_device device;
                struct kvt_heat_table heat_table;
                struct kvt_ctl_end ctl_end;
                struct kvt_ssd_hello ssd_hello;
                struct kvt_ssd_open ssd_open;
                struct kvt_ssd_io ssd_io;
                struct kvt_ssd_drop ssd_drop;
                struct kvt_ssd_reply ssd_reply;
                struct kvt_ssd_welcome ssd_welcome;
                char text[KVT_MSG_MAX_BYTES - sizeof(struct kvt_msg_hdr)];
        } u;
};

/* Longest "key=value" of a CTL_SET, NUL included. */
#define KVT_CTL_SET_MAX 256

/* Largest payload of a text message. */
#define KVT_TEXT_MAX (KVT_MSG_MAX_BYTES - sizeof(struct kvt_msg_hdr))

/* Returns the payload length a message type must have, SIZE_MAX for types
 * whose payload is variable (text), or 0 with *ret_known = 0 for unknown types. */
size_t kvt_msg_payload_size(uint16_t type, int *ret_known);

/* Name of a message type for logs ("HELLO"), "?" if unknown. */
const char *kvt_msg_type_name(uint16_t type);

/* Name of an allocation API ("cudaMalloc", "cuMemMap"), "?" if unknown. */
const char *kvt_api_name(uint32_t api);

/* Parses a list of API families ("runtime,driver,async,vmm", or "all", or
 * "none") into a KVT_API_FAMILY_* mask in *ret.  Returns 0, or -EINVAL and
 * *ret untouched. */
int kvt_api_families_parse(const char *s, uint32_t *ret);

/* Writes the mask families as kvt_api_families_parse() reads it ("all",
 * "none", "runtime,async") into buf of len bytes, truncating. */
void kvt_api_families_format(uint32_t families, char *buf, size_t len);

/* Name of a capture rule ("min-size", "capture-after", "vmm"), "?" if unknown. */
const char *kvt_rule_name(uint32_t rule);

/* Name of a tier ("vram", "host-mapped", "host", "none"). */
const char *kvt_tier_name(uint32_t tier);

/* Checks a received datagram of n bytes: header, version, exact length,
 * ranges and string termination of the payload.  Returns 0 or -EBADMSG
 * (-EPROTO for a version mismatch). */
int kvt_msg_check(const struct kvt_msg *m, size_t n);

/* Sends one message (header built here, seq given) on a SEQPACKET socket.
 * Non-blocking sockets return -EAGAIN when full.  Returns 0 or -errno. */
int kvt_msg_send(int fd, uint16_t type, uint32_t seq, const void *payload, size_t len);

/* Receives and checks one message into *m.  Returns 0, -EAGAIN on a
 * non-blocking socket with nothing queued, -ECONNRESET on orderly close,
 * -EBADMSG/-EPROTO for a malformed message, or another -errno. */
int kvt_msg_recv(int fd, struct kvt_msg *m);

/* As kvt_msg_send(), passing pass_fd along with SCM_RIGHTS. */
int kvt_msg_send_fd(int fd, uint16_t type, uint32_t seq, const void *payload, size_t len, int pass_fd);

/* As kvt_msg_recv(), and *ret_fd gets the first file descriptor that came
 * with the message (close-on-exec), or -1.  Any further descriptors are
 * closed here.  The caller owns *ret_fd even when the message is bad. */
int kvt_msg_recv_fd(int fd, struct kvt_msg *m, int *ret_fd);

/* Receives one message, waiting at most timeout_ms.  Returns as
 * kvt_msg_recv(), or -ETIMEDOUT. */
int kvt_msg_recv_timeout(int fd, struct kvt_msg *m, int timeout_ms);
