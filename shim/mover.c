/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client.h"
#include "launch.h"
#include "log.h"
#include "mover.h"
#include "pipeline.h"
#include "protocol.h"
#include "real.h"
#include "regions.h"
#include "state.h"
#include "util.h"

#define MAX_BATCH 64

/* The mover thread's state: the connection it serves and the pipeline that
 * carries out its orders (kept across connections, with its streams). */
struct mover {
        int fd;
        struct pipeline_config cfg;
        struct pipeline *pipe; /* created once the CUDA runtime resolves */
        struct kvt_msg msg;
        struct kvt_order batch[MAX_BATCH];
};

static void order_done(const struct kvt_order_done *done, void *userdata) {
        struct mover *mv = userdata;

        client_send_on(mv->fd, KVT_MSG_ORDER_DONE, done, sizeof(*done));
}

/* The pipeline, created on first use: the CUDA runtime may load after the
 * first connection.  NULL while it cannot be resolved. */
static struct pipeline *mover_pipe(struct mover *mv) {
        const struct kvt_cudart *rt;
        int r;

        if (mv->pipe)
                return mv->pipe;
        rt = real_cudart();
        if (!rt)
                return NULL;
        r = pipeline_new(&mv->cfg, rt, order_done, mv, &mv->pipe);
        if (r < 0) {
                log_warning_errno(r, "Failed to set up the mover's pipeline: %s", strerror(-r));
                mv->pipe = NULL;
        }
        return mv->pipe;
}

/* Answers orders that cannot be carried out at all (no CUDA runtime). */
static void refuse_all(struct mover *mv, const struct kvt_order *orders, size_t n, int status) {
        for (size_t i = 0; i < n; i++) {
                struct kvt_order_done done = { .order_id = orders[i].order_id, .status = status };
                order_done(&done, mv);
        }
}

static void submit(struct mover *mv, size_t n) {
        struct pipeline *p = mover_pipe(mv);

        if (p)
                pipeline_submit(p, mv->batch, n);
        else
                refuse_all(mv, mv->batch, n, -ENOSYS);
}

/* Tells the daemon of fd the standing hints (HOT, PINNED) the engine gave
 * region id before this daemon knew it: one HINT per run of chunks with
 * the same bit.  Returns 0 or -errno (the connection failed). */
static int tell_standing(int fd, uint32_t id) {
        static const struct {
                uint8_t bit;
                uint32_t kind;
        } kinds[] = {
                {REGION_STANDING_HOT, KVT_HINT_HOT},
                {REGION_STANDING_PINNED, KVT_HINT_PINNED},
                {REGION_STANDING_SPILLED, KVT_HINT_SPILLED},
        };
        uint8_t *bits;
        uint32_t n, sent = 0;
        int r = regions_standing_copy(id, &bits, &n);

        if (r == -ENOMEM)
                log_warning("Region %u: out of memory; its standing hints are not told to kvtierd again.",
                            id);
        if (r < 0 || !bits)
                return 0; /* the registration stands either way */
        for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]) && r >= 0; k++)
                for (uint32_t i = 0; i < n && r >= 0;) {
                        uint32_t j = i;
                        struct kvt_hint h;

                        if (!(bits[i] & kinds[k].bit)) {
                                i++;
                                continue;
                        }
                        while (j < n && (bits[j] & kinds[k].bit))
                                j++;
                        h = (struct kvt_hint){
                                .region_id = id, .first_chunk = i, .n_chunks = j - i, .kind = kinds[k].kind};
                        r = client_send_on(fd, KVT_MSG_HINT, &h, sizeof(h));
                        sent++;
                        i = j;
                }
        free(bits);
        if (sent && r >= 0)
                log_info("Region %u: %u standing hints told to kvtierd again.", id, sent);
        return r < 0 ? r : 0;
}

/* Registers the regions the daemon of this connection does not know.  Its
 * books start them in host memory (it granted no VRAM for them), so each
 * captured region is first returned there: chunks left in VRAM from before
 * a daemon restart would otherwise sit outside the budget.  A region that
 * cannot be moved stays untiered; a VMM mapping is registered as it is.
 * Under the announce lock: a capture or mapping in progress registers its
 * region itself, never both. */
static void register_regions(struct mover *mv) {
        const struct kvt_cudart *rt = real_cudart();
        struct shim_region reg;
        uint32_t after = 0;
        unsigned n = 0, n_vmm = 0;

        shim_announce_lock();
        while (regions_acquire_unregistered(after, &reg) == 0) {
                struct kvt_region_add add;
                cudaError_t e = cudaSuccess;
                int r;

                after = reg.id;
                if (!reg.untiered && !(rt && mover_pipe(mv))) { /* waits for a runtime to move it */
                        regions_release(reg.id);
                        continue;
                }
                if (!reg.untiered)
                        e = pipeline_move_host_sync(mv->pipe, (void *)reg.base, reg.span_bytes, reg.device);
                if (e != cudaSuccess) {
                        log_warning("Failed to return region %u to host memory: %s; it stays untiered, ignoring.",
                                    reg.id, rt->cudaGetErrorString(e));
                        regions_release(reg.id);
                        continue;
                }
                reg.start_vram = false;
                regions_add_msg(&reg, &add);
                r = client_register(mv->fd, 0, &add, regions_mark_registered);
                if (r >= 0 && !reg.untiered)
                        r = tell_standing(mv->fd, reg.id);
                regions_release(reg.id);
                if (r < 0)
                        break;
                reg.untiered ? n_vmm++ : n++;
        }
        shim_announce_unlock();
        if (n)
                log_notice("Registered %u captured regions with kvtierd.", n);
        if (n_vmm)
                log_notice("Registered %u untiered VMM mappings with kvtierd.", n_vmm);
}

/* Reads the orders queued on the socket, up to a batch: orders that arrive
 * together are issued together, so that adjacent ones coalesce.  Returns
 * the number read, or -errno when the connection fails. */
static int read_batch(struct mover *mv) {
        size_t n = 0;

        while (n < MAX_BATCH) {
                int r = kvt_msg_recv(mv->fd, &mv->msg);

                if (r == -EAGAIN)
                        break;
                if (r < 0)
                        return n > 0 ? (int)n : r; /* issue what came; the next read fails again */
                if (mv->msg.hdr.type == KVT_MSG_GRANT) {
                        client_grant_set(mv->fd, &mv->msg.u.grant);
                        continue;
                }
                if (mv->msg.hdr.type == KVT_MSG_PACE) {
                        launch_set_pace(mv->msg.u.pace.percent);
                        continue;
                }
                if (mv->msg.hdr.type != KVT_MSG_ORDER) {
                        log_warning("Unexpected %s message from kvtierd, disconnecting.",
                                    kvt_msg_type_name(mv->msg.hdr.type));
                        submit(mv, n);
                        return -EPROTO;
                }
                mv->batch[n++] = mv->msg.u.order;
        }
        submit(mv, n);
        return (int)n;
}

/* Carries out orders from mv->fd until it fails; returns why.  Runs in
 * flight wake the loop through the pipeline's fd; the timeout only covers a
 * wake-up that never comes (a broken stream runs no host function). */
static int serve(struct mover *mv) {
        for (;;) {
                size_t in_flight = mv->pipe ? pipeline_in_flight(mv->pipe) : 0;
                struct pollfd p[2] = {
                        { .fd = mv->fd, .events = POLLIN },
                        { .fd = mv->pipe ? pipeline_fd(mv->pipe) : -1, .events = POLLIN },
                };
                int r = poll(p, 2, in_flight ? 100 : -1);

                if (r < 0 && errno == EINTR)
                        continue;
                if (r < 0)
                        return -errno;
                if (in_flight || p[1].revents)
                        pipeline_reap(mv->pipe);
                if (p[0].revents) {
                        r = read_batch(mv);
                        if (r < 0)
                                return r;
                }
        }
}

static void *mover_main(void *arg) {
        struct mover *mv = arg;
        int r;

        while ((mv->fd = client_next_connection()) >= 0) {
                register_regions(mv);
                r = serve(mv);
                launch_set_pace(100); /* a daemon that is gone paces nobody */
                /* what is in flight still ends, and unpins its regions */
                if (mv->pipe)
                        pipeline_drain(mv->pipe);
                client_lost(mv->fd, r);
                close(mv->fd);
        }
        pipeline_free(mv->pipe);
        free(mv);
        return NULL;
}

int mover_start(void) {
        struct mover *mv = calloc(1, sizeof(*mv));
        pthread_attr_t attr;
        pthread_t t;
        int r;


        if (!mv)
                return -ENOMEM;
        mv->fd = -1;
        mv->cfg = (struct pipeline_config){.host_numa = kvt_shim()->cfg.host_numa, .sysfs_root = "/sys"};
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        /* The engine's signals are the engine's: the mover (and the
         * evictors it starts, which inherit its mask) take none. */
        r = kvt_thread_create(&t, &attr, mover_main, mv);
        pthread_attr_destroy(&attr);
        if (r < 0) {
                free(mv);
                return r;
        }
        pthread_setname_np(t, "kvtier-mover");
        return 0;
}
