/* SPDX-License-Identifier: MIT */
#include "config.h"

/*
 * The SSD tier's client side (include/kvtier.h: kvtier_spill, _restore,
 * _restore_wait, _drop, _query, _readahead).  A connection of its own to
 * kvtierd (SSD_HELLO, then one request and one SSD_REPLY at a time) and a
 * staging buffer shared with it: a memfd sealed against shrinking and
 * growing, from 2 MiB hugepages where the pool has them (else transparent
 * hugepages advised, else 4 KiB pages: one warning), bound to the GPU's NUMA
 * node, pinned with cudaHostRegister.  It is used as two halves, so that
 * the copy of one half overlaps the daemon's I/O on the other.  Restores run
 * on one worker thread, in the order asked; each is made stream-ordered by a
 * host function on the caller's stream that waits for it.
 *
 * A restarted kvtierd keeps this process's spills: before each request a
 * connection the daemon closed is replaced by a new one whose SSD_HELLO
 * carries the session's token, and the daemon, seeing the same uid and pid,
 * gives the spills back under the same handles (SSD_WELCOME reattached).
 * Only then do the handles of the old connection stay valid; otherwise
 * (the daemon refused, or had none kept) they are stale: KVTIER_ESTALE.
 */

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include "client.h"
#include "kvtier.h"
#include "log.h"
#include "protocol.h"
#include "real.h"
#include "regions.h"
#include "shim.h"
#include "ssd.h"
#include "state.h"
#include "util.h"

/* The staging buffer: 256 MiB, two halves of 128 MiB, each a multiple of
 * the daemon's block size (1 MiB by default).  The daemon serves one
 * request at a time and its disk queue drains at the end of each: with
 * small requests restores spent most of their time waiting for reads and
 * ran well below the disk's raw read (tests/bench/RESULTS.md); the drain
 * is paid once per request, so requests are made larger.  Pinned
 * host memory, once per process that spills. */
#define SSD_STAGING_BYTES (256ull << 20)
/* How long a request waits for its reply: a 128 MiB piece on a slow disk,
 * with the daemon's retries, is far below it; a daemon that takes longer is
 * taken for gone (its spills with it). */
#define SSD_IO_TIMEOUT_MS 120000

/* How long the daemon may take to answer SSD_HELLO (map the staging buffer,
 * set up io_uring, start a thread): no allocation waits on it, and 200 ms
 * (KVTIER_TIMEOUT_MS) was missed under ASan on a loaded 2-CPU machine. */
#define SSD_HELLO_TIMEOUT_MS 5000

#ifndef MFD_HUGE_2MB
#define MFD_HUGE_2MB (21 << 26)
#endif
#ifndef MPOL_PREFERRED
#define MPOL_PREFERRED 1
#endif

struct ssd_handle {
        struct ssd_handle *next;
        struct ssd_handle *next_job; /* in the restore queue */
        uint64_t id;                 /* the daemon's handle */
        unsigned gen;                /* the connection it lives on */
        uintptr_t base;
        size_t len;
        int device;    /* -1: host memory (no CUDA copy) */
        bool released; /* its whole chunks were discarded at spill */
        bool to_host;  /* restore: the whole chunks go to host memory (no VRAM grant for them) */
        uint64_t grant_gen; /* restore: the connection whose VRAM grant place_locked() took; 0: none */
        int state;     /* enum kvtier_spill_state */
        int last_error;
        unsigned gates; /* host functions on streams waiting for its restore */
};

static struct shim_ssd *ssd_get(void) {
        return &kvt_shim()->ssd;
}

/* In the child of fork(): the parent's connection, staging and spills are
 * not this process's, and its threads may have held the locks. */
void ssd_atfork_child(void) {
        struct shim_ssd *s = ssd_get();

        pthread_mutex_init(&s->io_lock, NULL);
        pthread_mutex_init(&s->lock, NULL);
        pthread_cond_init(&s->changed, NULL);
        if (s->fd >= 0)
                close(s->fd);
        if (s->staging_fd >= 0)
                close(s->staging_fd);
        if (s->staging)
                munmap(s->staging, SSD_STAGING_BYTES);
        s->fd = s->staging_fd = -1;
        s->staging = NULL;
        s->handles = s->queue_head = s->queue_tail = NULL; /* the parent's: leaked, not freed twice */
        s->pending_drops = NULL;
        s->n_pending = s->cap_pending = 0;
        memset(s->token, 0, sizeof(s->token)); /* the parent's spills are not the child's */
        s->worker_running = false;
        memset(s->streams, 0, sizeof(s->streams));
        s->gen++;
}

/* ------------------------------------------------------------ staging */

static int staging_node(void) {
        const struct kvt_cudart *rt = real_cudart();
        int dev = 0, node = -1;

        if (!rt || rt->cudaGetDevice(&dev) != cudaSuccess ||
            rt->cudaDeviceGetAttribute(&node, cudaDevAttrHostNumaId, dev) != cudaSuccess)
                return -1;
        return node;
}

/* Makes the staging memfd and maps it.  io_lock held. */
static int staging_create_locked(struct shim_ssd *s) {
        const struct kvt_cudart *rt = real_cudart();
        const char *pages = "2 MiB hugepages";
        void *map = MAP_FAILED;
        int fd, node, r;

        fd = memfd_create("kvtier-ssd-staging",
                          MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_HUGETLB | MFD_HUGE_2MB);
        if (fd >= 0 && ftruncate(fd, (off_t)SSD_STAGING_BYTES) == 0)
                /* hugetlb reserves the pages at mmap: none free, it fails here */
                map = mmap(NULL, SSD_STAGING_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (map == MAP_FAILED) {
                if (fd >= 0)
                        close(fd);
                fd = memfd_create("kvtier-ssd-staging", MFD_CLOEXEC | MFD_ALLOW_SEALING);
                if (fd < 0)
                        return -errno;
                if (ftruncate(fd, (off_t)SSD_STAGING_BYTES) < 0 ||
                    (map = mmap(NULL, SSD_STAGING_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) ==
                            MAP_FAILED) {
                        r = -errno;
                        close(fd);
                        return r;
                }
                pages = madvise(map, SSD_STAGING_BYTES, MADV_HUGEPAGE) == 0
                                ? "transparent hugepages (advised)"
                                : "4 KiB pages";
                if (!s->huge_warned)
                        log_warning("SSD staging buffer in %s: no 2 MiB hugepages free ([host] hugepages "
                                    "reserves them), ignoring.",
                                    pages);
                s->huge_warned = true;
        }
        if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
                r = -errno;
                munmap(map, SSD_STAGING_BYTES);
                close(fd);
                return r;
        }
        node = staging_node();
        if (node >= 0 && node < 64) {
                unsigned long mask = 1ul << node;

                /* before the first touch, so that the pages come from there */
                if (syscall(SYS_mbind, map, SSD_STAGING_BYTES, MPOL_PREFERRED, &mask, 64, 0) < 0)
                        log_debug("Failed to bind the SSD staging buffer to node %d: %s, ignoring.", node,
                                  strerror(errno));
        }
        memset(map, 0, SSD_STAGING_BYTES);
        s->pinned =
                rt && rt->cudaHostRegister && rt->cudaHostRegister(map, SSD_STAGING_BYTES, 0) == cudaSuccess;
        log_info("SSD staging buffer: %llu bytes in %s, node %d, %s.", (unsigned long long)SSD_STAGING_BYTES,
                 pages, node, s->pinned ? "pinned" : "not pinned");
        s->staging_fd = fd;
        s->staging = map;
        return 0;
}

/* ------------------------------------------------------------ the connection */

static void socket_path(struct sockaddr_un *sa) {
        struct kvt_shim *k = kvt_shim();

        _Static_assert(sizeof(sa->sun_path) == sizeof(k->cfg.socket_path), "socket paths alike");
        _Static_assert(sizeof(sa->sun_path) == sizeof(k->standalone.socket_path), "socket paths alike");
        if (k->cfg.standalone) {
                pthread_mutex_lock(&k->client.lock);
                memcpy(sa->sun_path, k->standalone.socket_path, sizeof(sa->sun_path));
                pthread_mutex_unlock(&k->client.lock);
                if (sa->sun_path[0])
                        return;
        }
        memcpy(sa->sun_path, k->cfg.socket_path, sizeof(sa->sun_path));
}

/* Waits for the message of type and seq; its payload goes to ret (len
 * bytes).  Returns 0, or -ETIMEDOUT / -ECONNRESET / -EBADMSG (the
 * connection is then closed by the caller). */
static int msg_wait(struct shim_ssd *s, uint16_t type, uint32_t seq, int timeout_ms, void *ret, size_t len) {
        struct kvt_msg *m = malloc(sizeof(*m));
        int r;

        if (!m)
                return -ENOMEM;
        r = kvt_msg_recv_timeout(s->fd, m, timeout_ms);
        if (r == 0 && (m->hdr.type != type || m->hdr.seq != seq || m->hdr.length != len))
                r = -EBADMSG;
        if (r == 0)
                memcpy(ret, &m->u, len);
        free(m);
        return r;
}

/* Waits for the reply to seq, *ret filled.  Returns as msg_wait(). */
static int reply_wait(struct shim_ssd *s, uint32_t seq, int timeout_ms, struct kvt_ssd_reply *ret) {
        return msg_wait(s, KVT_MSG_SSD_REPLY, seq, timeout_ms, ret, sizeof(*ret));
}

static void disconnect_locked(struct shim_ssd *s) {
        if (s->fd >= 0)
                close(s->fd);
        s->fd = -1;
}

/* Sends a request and waits for its reply.  Returns the reply's status, or
 * a transport error (the connection is closed: its spills are gone). */
static int request_locked(struct shim_ssd *s, uint16_t type, const void *payload, size_t len,
                          struct kvt_ssd_reply *ret) {
        uint32_t seq = ++s->seq;
        int r = kvt_msg_send(s->fd, type, seq, payload, len);

        if (r == 0) {
                r = reply_wait(s, seq, SSD_IO_TIMEOUT_MS, ret);
                if (r == 0)
                        return ret->status;
        }
        log_warning("Lost the SSD connection to kvtierd: %s; reconnecting at the next request.",
                    strerror(-r));
        disconnect_locked(s);
        return r == -ENOMEM ? r : -ECONNRESET;
}

/* Whether any handle of the session is held: then a new connection asks
 * for its spills back.  io_lock held. */
static bool holds_spills_locked(struct shim_ssd *s) {
        bool any = false;

        pthread_mutex_lock(&s->lock);
        for (struct ssd_handle *h = s->handles; h && !any; h = h->next)
                any = h->gen == s->gen;
        pthread_mutex_unlock(&s->lock);
        return any || s->n_pending > 0;
}

/* SSD_HELLO on the new connection s->fd, with the session's token where it
 * holds spills; *ret gets the SSD_WELCOME.  Returns 0 or -errno. */
static int hello_locked(struct shim_ssd *s, bool *ret_asked, struct kvt_ssd_welcome *ret) {
        struct kvt_ssd_hello h = {.proto_version = KVT_PROTO_VERSION,
                                  .staging_bytes = SSD_STAGING_BYTES,
                                  .next_handle = s->max_handle + 1};
        int r;

        *ret_asked = holds_spills_locked(s);
        if (*ret_asked)
                memcpy(h.token, s->token, sizeof(h.token));
        r = kvt_msg_send_fd(s->fd, KVT_MSG_SSD_HELLO, 0, &h, sizeof(h), s->staging_fd);
        if (r == 0)
                r = msg_wait(s, KVT_MSG_SSD_WELCOME, 0,
                             MAX(kvt_shim()->cfg.timeout_ms, SSD_HELLO_TIMEOUT_MS), ret, sizeof(*ret));
        if (r == 0)
                r = ret->status;
        if (r == 0 && ret->block_bytes > SSD_STAGING_BYTES)
                r = -EBADMSG;
        return r;
}

static int drop_locked(struct shim_ssd *s, uint64_t id, unsigned gen);

/* The session goes on (re-attached: its handles and drops not told yet
 * stand) or a new one starts (they are stale: forgotten). */
static void session_locked(struct shim_ssd *s, bool reattached, uint64_t spills) {
        uint64_t *pending = s->pending_drops;
        size_t n = s->n_pending;

        s->pending_drops = NULL;
        s->n_pending = s->cap_pending = 0;
        if (!reattached) {
                s->gen++;
                free(pending);
                return;
        }
        log_info("kvtierd restarted: it gave back this process's %llu SSD spills.",
                 (unsigned long long)spills);
        for (size_t i = 0; i < n; i++)
                (void)drop_locked(s, pending[i], s->gen);
        free(pending);
}

static int connect_locked(struct shim_ssd *s) {
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        struct kvt_ssd_welcome w;
        bool asked;
        int fd, r;

        if (s->fd >= 0)
                return 0;
        if (!s->staging && (r = staging_create_locked(s)) < 0)
                return log_warning_errno(r, "Failed to make the SSD staging buffer: %s", strerror(-r)), r;
        socket_path(&sa);
        fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -errno;
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
                close(fd);
                return -ENOTCONN;
        }
        s->fd = fd;
        s->seq = 0;
        r = hello_locked(s, &asked, &w);
        if (r < 0) {
                disconnect_locked(s);
                return r == -ENOSYS ? KVTIER_ENOTAVAIL : r == -ETIMEDOUT || r == -ECONNRESET ? -ENOTCONN : r;
        }
        memcpy(s->token, w.token, sizeof(s->token));
        s->block_bytes = w.block_bytes;
        s->piece_bytes = SSD_STAGING_BYTES / 2 / w.block_bytes * w.block_bytes;
        s->halves = 2;
        if (s->piece_bytes == 0) {
                s->piece_bytes = SSD_STAGING_BYTES / w.block_bytes * w.block_bytes;
                s->halves = 1;
        }
        if (asked && !w.reattached)
                log_warning("kvtierd restarted without this process's SSD spills: they are lost, and "
                            "restoring them fails with -ESTALE.");
        session_locked(s, asked && w.reattached, w.spills);
        return s->fd >= 0 ? 0 : -ENOTCONN; /* lost again while telling the drops */
}

/* Makes sure of a live connection before a request: one the daemon closed
 * (it stopped or restarted; it sends nothing unasked, so anything to read
 * is its end) is seen here, not by a request lost on it, and replaced.
 * io_lock held.  Returns 0 or as connect_locked(). */
static int ready_locked(struct shim_ssd *s) {
        struct pollfd p = {.fd = s->fd, .events = POLLIN};

        if (s->fd >= 0 && poll(&p, 1, 0) > 0)
                disconnect_locked(s);
        return connect_locked(s);
}

/* Tells the daemon that spill id of session gen is dropped; one it cannot
 * be told now (it is away) is told after it gives the session back.
 * io_lock held.  Returns 0 or -errno. */
static int drop_locked(struct shim_ssd *s, uint64_t id, unsigned gen) {
        struct kvt_ssd_drop d = {.handle = id};
        struct kvt_ssd_reply rep;
        int r = gen == s->gen ? ready_locked(s) : -ESTALE;

        if (r == 0 && gen == s->gen)
                r = request_locked(s, KVT_MSG_SSD_DROP, &d, sizeof(d), &rep);
        if ((r == -ENOTCONN || r == -ECONNRESET) && gen == s->gen) {
                if (s->n_pending == s->cap_pending) {
                        size_t cap = s->cap_pending ? s->cap_pending * 2 : 16;
                        uint64_t *a = realloc(s->pending_drops, cap * sizeof(*a));

                        if (!a)
                                return -ENOMEM; /* the daemon frees it when this process ends */
                        s->pending_drops = a;
                        s->cap_pending = cap;
                }
                s->pending_drops[s->n_pending++] = id;
        }
        return r;
}

/* ------------------------------------------------------------ copies */

/* The copy stream of device dev (non-blocking: never ordered with the
 * engine's legacy stream), made on first use.  io_lock held. */
static cudaStream_t stream_of(struct shim_ssd *s, int dev) {
        const struct kvt_cudart *rt = real_cudart();

        if (!s->streams[dev]) {
                int cur = -1;

                if (rt->cudaGetDevice(&cur) == cudaSuccess && cur != dev)
                        rt->cudaSetDevice(dev);
                if (rt->cudaStreamCreateWithFlags(&s->streams[dev], cudaStreamNonBlocking) != cudaSuccess)
                        s->streams[dev] = NULL;
        }
        return s->streams[dev];
}

/* Copies n bytes between the range (device dev; -1: host memory) and
 * staging, synchronously.  Returns 0 or -EIO. */
static int copy_locked(struct shim_ssd *s, int dev, void *dst, const void *src, size_t n) {
        const struct kvt_cudart *rt = real_cudart();
        cudaStream_t st;

        if (dev < 0) {
                memcpy(dst, src, n);
                return 0;
        }
        rt->cudaSetDevice(dev);
        st = stream_of(s, dev);
        if (!st || !rt->cudaMemcpyAsync ||
            rt->cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, st) != cudaSuccess ||
            rt->cudaStreamSynchronize(st) != cudaSuccess)
                return -EIO;
        return 0;
}

/* The whole 2 MiB chunks [*lo, *hi) of h's range; false when there are none. */
static bool chunk_span(const struct ssd_handle *h, uintptr_t *lo, uintptr_t *hi) {
        *lo = (h->base + KVT_CHUNK_BYTES - 1) & ~(uintptr_t)(KVT_CHUNK_BYTES - 1);
        *hi = (h->base + h->len) & ~(uintptr_t)(KVT_CHUNK_BYTES - 1);
        return *hi > *lo;
}

/* chunk_span(), in region r; false as well where the range is not memory
 * kvtier made managed. */
static bool whole_chunks(const struct ssd_handle *h, struct shim_region *r, uintptr_t *lo, uintptr_t *hi) {
        return h->device >= 0 && chunk_span(h, lo, hi) && regions_lookup((void *)h->base, r) == 0 &&
               h->base + h->len <= r->base + r->span_bytes;
}

/* Tells the daemon what became of chunks [lo, hi) of region r (a
 * KVT_HINT_SPILLED or _RESTORED_*).  A region it does not know yet is told
 * the spill when it is registered (its standing bits); its REGION_ADD books
 * it in host memory, where a restore may have put it. */
static void tell_daemon(const struct shim_region *r, uintptr_t lo, uintptr_t hi, uint32_t kind) {
        struct kvt_hint m = {.region_id = r->id,
                             .first_chunk = (uint32_t)((lo - r->base) >> KVT_CHUNK_SHIFT),
                             .n_chunks = (uint32_t)((hi - lo) >> KVT_CHUNK_SHIFT),
                             .kind = kind};

        if (r->registered)
                (void)client_send(KVT_MSG_HINT, &m, sizeof(m));
}

/* A restore that took VRAM from the grant and then did not place its
 * chunks there (it failed, and they were released again): the room goes
 * back to the grant it came from, which the daemon would go on holding
 * for it otherwise (what the shim took and never claimed). */
static void grant_back(struct ssd_handle *h) {
        uintptr_t lo, hi;

        if (h->grant_gen && chunk_span(h, &lo, &hi))
                client_grant_return(h->grant_gen, h->device, hi - lo);
        h->grant_gen = 0;
}

/* Discards the whole 2 MiB chunks of a captured range, so that its memory is
 * the driver's again: first marked spilled, which waits for the orders
 * running on its region and keeps the mover off them until the restore
 * (a discard concurrent with a prefetch is undefined), then the daemon is
 * told to book them nowhere.  Returns whether it did. */
static bool release_locked(struct shim_ssd *s, struct ssd_handle *h) {
        const struct kvt_cudart *rt = real_cudart();
        struct shim_region r;
        uintptr_t lo, hi;
        void *ptr;
        size_t len;
        cudaStream_t st;

        if (!rt || !rt->cudaMemDiscardBatchAsync || !whole_chunks(h, &r, &lo, &hi))
                return false; /* not memory kvtier made managed: it stays as it is */
        ptr = (void *)lo;
        len = hi - lo;
        if (regions_mark_spilled(ptr, len, true, &r) < 0)
                return false;
        rt->cudaSetDevice(h->device);
        st = stream_of(s, h->device);
        if (!st || rt->cudaMemDiscardBatchAsync(&ptr, &len, 1, 0, st) != cudaSuccess ||
            rt->cudaStreamSynchronize(st) != cudaSuccess) {
                (void)regions_mark_spilled(ptr, len, false, &r); /* its memory is as it was */
                return false;
        }
        tell_daemon(&r, lo, hi, KVT_HINT_SPILLED);
        return true;
}

/* Before a released range is refilled: its whole chunks go where a capture
 * would start, in VRAM while the client's grant has room, else in host
 * memory unmapped (the GPU's access dropped: a chunk advised at its capture
 * or a mapped eviction had it, and the daemon books these unmapped, so
 * that their next use is seen); they are advised so and prefetched there,
 * which populates the discarded pages without moving data.  Copying into pages
 * not populated instead made the driver fault them in 4 KiB at a time,
 * far below the link's speed (tests/bench/RESULTS.md).  Returns 0 or -EIO. */
static int place_locked(struct shim_ssd *s, struct ssd_handle *h) {
        const struct kvt_cudart *rt = real_cudart();
        const struct cudaMemLocation gpu = {cudaMemLocationTypeDevice, h->device};
        struct cudaMemLocation loc = {cudaMemLocationTypeHost, 0};
        struct shim_region r;
        uintptr_t lo, hi;
        cudaStream_t st;

        if (!rt || !whole_chunks(h, &r, &lo, &hi))
                return 0;
        grant_back(h); /* an earlier placing's, whose chunks were released again */
        h->grant_gen = client_grant_take(h->device, hi - lo);
        h->to_host = !h->grant_gen;
        if (!h->to_host)
                loc = gpu;
        rt->cudaSetDevice(h->device);
        st = stream_of(s, h->device);
        if (!st || rt->cudaMemAdvise((void *)lo, hi - lo, cudaMemAdviseSetPreferredLocation, loc) != cudaSuccess ||
            (h->to_host && rt->cudaMemAdvise((void *)lo, hi - lo, cudaMemAdviseUnsetAccessedBy, gpu) != cudaSuccess) ||
            rt->cudaMemPrefetchAsync((void *)lo, hi - lo, loc, 0, st) != cudaSuccess ||
            rt->cudaStreamSynchronize(st) != cudaSuccess)
                return -EIO;
        return 0;
}

/* After a restore of a released range: its chunks are the engine's again,
 * booked where place_locked() put them. */
static void restored_locked(struct ssd_handle *h) {
        struct shim_region r;
        uintptr_t lo, hi;

        h->grant_gen = 0; /* spent: the chunks are where place_locked() put them */
        if (!whole_chunks(h, &r, &lo, &hi) || regions_mark_spilled((void *)lo, hi - lo, false, &r) < 0)
                return;
        tell_daemon(&r, lo, hi, h->to_host ? KVT_HINT_RESTORED_HOST : KVT_HINT_RESTORED_VRAM);
}

static int range_device(const void *ptr) {
        const struct kvt_cudart *rt = real_cudart();
        struct shim_region r;
        int dev = 0;

        if (regions_lookup(ptr, &r) == 0)
                return r.device;
        if (!rt || rt->cudaGetDevice(&dev) != cudaSuccess)
                return -1;
        return dev;
}

/* ------------------------------------------------------------ spill */

/* Sends one I/O request (its reply is waited for apart).  Returns 0 or
 * -ECONNRESET (the connection is closed). */
static int send_io_locked(struct shim_ssd *s, uint16_t type, const struct kvt_ssd_io *io,
                          uint32_t *ret_seq) {
        *ret_seq = ++s->seq;
        if (kvt_msg_send(s->fd, type, *ret_seq, io, sizeof(*io)) == 0)
                return 0;
        disconnect_locked(s);
        return -ECONNRESET;
}

/* Waits for an I/O reply.  Returns its status, or -ECONNRESET. */
static int wait_io_locked(struct shim_ssd *s, uint32_t seq) {
        struct kvt_ssd_reply rep;

        if (reply_wait(s, seq, SSD_IO_TIMEOUT_MS, &rep) == 0)
                return rep.status;
        log_warning("Lost the SSD connection to kvtierd; reconnecting at the next request.");
        disconnect_locked(s);
        return -ECONNRESET;
}

static struct kvt_ssd_io piece_io(const struct shim_ssd *s, uint64_t id, uint64_t k, size_t len) {
        uint64_t off = k * s->piece_bytes;

        return (struct kvt_ssd_io){.handle = id,
                                   .offset = off,
                                   .staging_offset = (k % s->halves) * s->piece_bytes,
                                   .len = MIN(s->piece_bytes, len - off)};
}

/* Writes the range through staging as spill id: piece k is copied into one
 * half while the daemon writes piece k-1 from the other.  io_lock held. */
static int spill_locked(struct shim_ssd *s, uint64_t id, const char *ptr, size_t len, int dev) {
        uint64_t n_pieces = (len + s->piece_bytes - 1) / s->piece_bytes;
        uint32_t seq = 0;
        bool pending = false;
        int r = 0, q;

        for (uint64_t k = 0; k < n_pieces && r == 0; k++) {
                struct kvt_ssd_io io = piece_io(s, id, k, len);

                if (pending && s->halves == 1) { /* the one half must be written out first */
                        pending = false;
                        if ((r = wait_io_locked(s, seq)) < 0)
                                break;
                }
                r = copy_locked(s, dev, s->staging + io.staging_offset, ptr + io.offset, io.len);
                if (pending) {
                        pending = false;
                        q = wait_io_locked(s, seq);
                        r = r < 0 ? r : q;
                        if (q == -ECONNRESET)
                                return q;
                }
                if (r < 0)
                        break;
                if ((r = send_io_locked(s, KVT_MSG_SSD_WRITE, &io, &seq)) < 0)
                        return r;
                pending = true;
        }
        if (pending) {
                q = wait_io_locked(s, seq);
                r = r < 0 ? r : q;
        }
        return r;
}

KVT_EXPORT int kvtier_spill(const void *ptr, size_t len, uint64_t *ret_handle) {
        struct shim_ssd *s = ssd_get();
        struct kvt_ssd_open o = {.size_bytes = len};
        struct kvt_ssd_drop d;
        struct kvt_ssd_reply rep;
        struct ssd_handle *h;
        int r;

        if (!ptr || len == 0 || !ret_handle || len > KVT_SSD_MAX_SPILL)
                return -EINVAL;
        h = calloc(1, sizeof(*h));
        if (!h)
                return -ENOMEM;
        *h = (struct ssd_handle){
                .base = (uintptr_t)ptr, .len = len, .device = range_device(ptr), .state = KVTIER_SPILLED};
        pthread_mutex_lock(&s->io_lock);
        r = ready_locked(s);
        if (r == 0)
                r = request_locked(s, KVT_MSG_SSD_OPEN, &o, sizeof(o), &rep);
        if (r == 0) {
                h->id = rep.handle;
                h->gen = s->gen;
                s->max_handle = MAX(s->max_handle, h->id);
                r = spill_locked(s, h->id, ptr, len, h->device);
                if (r < 0 && s->fd >= 0) {
                        d.handle = h->id;
                        (void)request_locked(s, KVT_MSG_SSD_DROP, &d, sizeof(d), &rep);
                }
        }
        if (r == 0)
                h->released = release_locked(s, h);
        pthread_mutex_unlock(&s->io_lock);
        if (r < 0) {
                free(h);
                return r;
        }
        pthread_mutex_lock(&s->lock);
        h->next = s->handles;
        s->handles = h;
        pthread_mutex_unlock(&s->lock);
        *ret_handle = h->id;
        return 0;
}

/* ------------------------------------------------------------ restore */

/* Copies n bytes from staging back to offset off of h's range: the part in
 * whole chunks placed in host memory by the CPU (a copy engine's writes to
 * host-resident managed memory map it 4 KiB at a time, far slower than a
 * CPU copy), the rest by CUDA.  Returns 0 or -EIO. */
static int copy_back_locked(struct shim_ssd *s, const struct ssd_handle *h, uint64_t off, const char *src,
                            size_t n) {
        uintptr_t dst = h->base + off, end = dst + n, lo, hi, a, b;
        int ret = 0;

        /* to_host: place_locked() found the whole chunks in a region of kvtier's */
        if (!h->to_host || !chunk_span(h, &lo, &hi))
                return copy_locked(s, h->device, (void *)dst, src, n);
        a = MAX(dst, MIN(lo, end));
        b = MAX(a, MIN(hi, end));
        if (a > dst)
                ret = copy_locked(s, h->device, (void *)dst, src, a - dst);
        if (ret == 0 && b > a)
                memcpy((void *)a, src + (a - dst), b - a);
        if (ret == 0 && end > b)
                ret = copy_locked(s, h->device, (void *)b, src + (b - dst), end - b);
        return ret;
}

/* Reads the spill back into its range: the daemon reads piece k+1 into
 * one half while piece k is copied from the other.  Only pieces the daemon
 * verified are copied.  A daemon that cannot be reached now, or is lost on
 * the way, fails it with -ENOTCONN (the spill stays: a restarted daemon
 * gives it back); one that started a new session without it, or no longer
 * has it (its index record did not survive), with KVTIER_ESTALE.
 * io_lock held. */
static int restore_locked(struct shim_ssd *s, struct ssd_handle *h) {
        /* where its time goes, for the debug log: placing, waiting for the
         * daemon's reads, copying */
        uint64_t t0 = now_ns(), t_place, t_wait = 0, t_copy = 0, t;
        uint64_t n_pieces;
        struct kvt_ssd_io io;
        uint32_t seq;
        int r = ready_locked(s);

        if (r < 0)
                return r;
        if (h->gen != s->gen)
                return KVTIER_ESTALE;
        if (h->released && (r = place_locked(s, h)) < 0)
                return r;
        t_place = now_ns() - t0;
        n_pieces = (h->len + s->piece_bytes - 1) / s->piece_bytes;
        io = piece_io(s, h->id, 0, h->len);
        if (send_io_locked(s, KVT_MSG_SSD_READ, &io, &seq) < 0)
                return -ENOTCONN;
        for (uint64_t k = 0; k < n_pieces; k++) {
                struct kvt_ssd_io cur = piece_io(s, h->id, k, h->len), next;
                bool sent = false;

                t = now_ns();
                r = wait_io_locked(s, seq);
                t_wait += now_ns() - t;
                if (r < 0)
                        return r == -ECONNRESET ? -ENOTCONN : r == -ENOENT ? KVTIER_ESTALE : r;
                if (k + 1 < n_pieces && s->halves == 2) {
                        next = piece_io(s, h->id, k + 1, h->len);
                        if (send_io_locked(s, KVT_MSG_SSD_READ, &next, &seq) < 0)
                                return -ENOTCONN;
                        sent = true;
                }
                t = now_ns();
                r = copy_back_locked(s, h, cur.offset, s->staging + cur.staging_offset, cur.len);
                t_copy += now_ns() - t;
                if (r < 0) {
                        if (sent) /* its answer must be taken off the connection */
                                (void)wait_io_locked(s, seq);
                        return r;
                }
                if (k + 1 < n_pieces && !sent) {
                        next = piece_io(s, h->id, k + 1, h->len);
                        if (send_io_locked(s, KVT_MSG_SSD_READ, &next, &seq) < 0)
                                return -ENOTCONN;
                }
        }
        log_debug("Restored SSD spill %llu, %zu bytes, in %.1f ms: placing %.1f, waiting for reads %.1f, "
                  "copying %.1f.",
                  (unsigned long long)h->id, h->len, (double)(now_ns() - t0) / 1e6, (double)t_place / 1e6,
                  (double)t_wait / 1e6, (double)t_copy / 1e6);
        return 0;
}

static void *restore_worker(void *arg) {
        struct shim_ssd *s = arg;

        pthread_mutex_lock(&s->lock);
        for (;;) {
                struct ssd_handle *h = s->queue_head;
                uint64_t id;
                unsigned gen;
                int r;

                if (!h) {
                        pthread_cond_wait(&s->changed, &s->lock);
                        continue;
                }
                s->queue_head = h->next_job;
                if (!s->queue_head)
                        s->queue_tail = NULL;
                pthread_mutex_unlock(&s->lock);

                pthread_mutex_lock(&s->io_lock);
                r = restore_locked(s, h);
                if (r == 0 && h->released)
                        restored_locked(h);
                else if (r < 0 && h->released && r != KVTIER_ESTALE) {
                        /* part of it was written: as the spill left it, its
                         * grant back (spent if the chunks stay placed) */
                        if (release_locked(s, h))
                                grant_back(h);
                        h->grant_gen = 0;
                }
                id = h->id;
                gen = h->gen;

                /* The range has it back: waiters go on now, and the SSD copy
                 * goes after (the daemon frees its blocks meanwhile, which
                 * restore_wait() need not wait for).  h may be dropped and
                 * freed from here on. */
                pthread_mutex_lock(&s->lock);
                h->last_error = r;
                h->state = r == 0 ? KVTIER_RESTORED : KVTIER_SPILLED;
                if (r < 0)
                        log_warning("Failed to restore SSD spill %llu (%zu bytes): %s",
                                    (unsigned long long)h->id, h->len, strerror(-r));
                pthread_cond_broadcast(&s->changed);
                pthread_mutex_unlock(&s->lock);
                if (r == 0)
                        (void)drop_locked(s, id, gen);
                pthread_mutex_unlock(&s->io_lock);
                pthread_mutex_lock(&s->lock);
        }
        return NULL;
}

static struct ssd_handle *handle_find_locked(struct shim_ssd *s, uint64_t id) {
        for (struct ssd_handle *h = s->handles; h; h = h->next)
                if (h->id == id)
                        return h;
        return NULL;
}

/* Runs on the engine's stream: holds back what comes after until the
 * restore is over. */
static void restore_gate(void *arg) {
        struct ssd_handle *h = arg;
        struct shim_ssd *s = ssd_get();

        pthread_mutex_lock(&s->lock);
        while (h->state == KVTIER_RESTORING)
                pthread_cond_wait(&s->changed, &s->lock);
        h->gates--;
        pthread_cond_broadcast(&s->changed);
        pthread_mutex_unlock(&s->lock);
}

/* Queues a restore of h (s->lock held); one in flight or done already is
 * left as it is.  Returns 0 or -errno. */
static int restore_queue_locked(struct shim_ssd *s, struct ssd_handle *h) {
        if (h->state == KVTIER_RESTORING || h->state == KVTIER_RESTORED)
                return 0;
        if (!s->worker_running) {
                pthread_attr_t attr;
                pthread_t t;
                int r;

                pthread_attr_init(&attr);
                pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
                r = pthread_create(&t, &attr, restore_worker, s);
                pthread_attr_destroy(&attr);
                if (r > 0)
                        return -r;
                s->worker_running = true;
        }
        h->state = KVTIER_RESTORING;
        h->last_error = 0;
        h->next_job = NULL;
        if (s->queue_tail)
                s->queue_tail->next_job = h;
        else
                s->queue_head = h;
        s->queue_tail = h;
        pthread_cond_broadcast(&s->changed);
        return 0;
}

KVT_EXPORT int kvtier_restore(uint64_t handle, void *stream) {
        struct shim_ssd *s = ssd_get();
        const struct kvt_cudart *rt = real_cudart();
        struct ssd_handle *h;
        int r;

        pthread_mutex_lock(&s->lock);
        h = handle_find_locked(s, handle);
        r = h ? restore_queue_locked(s, h) : -ENOENT;
        if (r == 0 && h->device >= 0 && rt)
                h->gates++;
        pthread_mutex_unlock(&s->lock);
        if (r < 0 || h->device < 0 || !rt)
                return r;
        /* Outside the lock: the fake runs the function right here. */
        if (rt->cudaLaunchHostFunc((cudaStream_t)stream, restore_gate, h) != cudaSuccess) {
                pthread_mutex_lock(&s->lock);
                h->gates--;
                pthread_cond_broadcast(&s->changed);
                pthread_mutex_unlock(&s->lock);
                /* not ordered on the stream: the caller must wait for it */
                log_warning("Failed to order an SSD restore on stream %p; kvtier_restore_wait() it.",
                            stream);
                return -EINVAL;
        }
        return 0;
}

KVT_EXPORT int kvtier_restore_wait(uint64_t handle) {
        struct shim_ssd *s = ssd_get();
        struct ssd_handle *h;
        int r;

        pthread_mutex_lock(&s->lock);
        h = handle_find_locked(s, handle);
        while (h && h->state == KVTIER_RESTORING)
                pthread_cond_wait(&s->changed, &s->lock);
        r = !h ? -ENOENT : h->state == KVTIER_RESTORED ? 0 : h->last_error ? h->last_error : -EINVAL;
        pthread_mutex_unlock(&s->lock);
        return r;
}

KVT_EXPORT int kvtier_drop(uint64_t handle) {
        struct shim_ssd *s = ssd_get();
        struct ssd_handle *h, **p;

        pthread_mutex_lock(&s->lock);
        h = handle_find_locked(s, handle);
        while (h && (h->state == KVTIER_RESTORING || h->gates > 0))
                pthread_cond_wait(&s->changed, &s->lock);
        if (!h) {
                pthread_mutex_unlock(&s->lock);
                return -ENOENT;
        }
        for (p = &s->handles; *p != h; p = &(*p)->next)
                ;
        *p = h->next;
        pthread_mutex_unlock(&s->lock);
        if (h->state == KVTIER_SPILLED) {
                pthread_mutex_lock(&s->io_lock);
                (void)drop_locked(s, h->id, h->gen);
                /* The range is the engine's again, its contents gone: placed
                 * as a capture starts, and movable. */
                if (h->released && place_locked(s, h) == 0)
                        restored_locked(h);
                grant_back(h); /* where placing failed */
                pthread_mutex_unlock(&s->io_lock);
        }
        free(h);
        return 0;
}

KVT_EXPORT int kvtier_query(uint64_t handle, struct kvtier_spill_info *ret) {
        struct shim_ssd *s = ssd_get();
        struct ssd_handle *h;

        if (!ret)
                return -EINVAL;
        pthread_mutex_lock(&s->lock);
        h = handle_find_locked(s, handle);
        if (h)
                *ret = (struct kvtier_spill_info){.size_bytes = h->len,
                                                  .state = h->state,
                                                  .last_error = h->last_error,
                                                  .released = h->released};
        pthread_mutex_unlock(&s->lock);
        return h ? 0 : -ENOENT;
}

KVT_EXPORT int kvtier_readahead(uint64_t handle) {
        struct shim_ssd *s = ssd_get();
        struct ssd_handle *h;
        int r;

        /* The restore itself, queued now and not ordered on any stream: a
         * later kvtier_restore() of it finds it in flight or done. */
        pthread_mutex_lock(&s->lock);
        h = handle_find_locked(s, handle);
        r = h ? restore_queue_locked(s, h) : -ENOENT;
        pthread_mutex_unlock(&s->lock);
        return r;
}
