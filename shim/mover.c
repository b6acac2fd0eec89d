/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client.h"
#include "log.h"
#include "mover.h"
#include "protocol.h"
#include "real.h"
#include "regions.h"
#include "util.h"

/* One non-blocking stream per device, created by the mover on first use so
 * the engine's own streams (and the legacy NULL stream) are never waited on. */
struct mover {
        int fd;
        cudaStream_t streams[KVT_MAX_GPUS];
        struct kvt_msg msg;
};

static cudaStream_t mover_stream(struct mover *mv, const struct kvt_cudart *rt, int dev, cudaError_t *ret_err) {
        cudaError_t e;

        if (mv->streams[dev])
                return mv->streams[dev];
        e = rt->cudaStreamCreateWithFlags(&mv->streams[dev], cudaStreamNonBlocking);
        if (e != cudaSuccess) {
                mv->streams[dev] = NULL;
                *ret_err = e;
                return NULL;
        }
        return mv->streams[dev];
}

/* Promotes [ptr, len) to VRAM.  The prefetch comes before the advice: if it
 * fails, nothing changed, and the daemon's books (chunk still host-mapped,
 * uncharged) stay true.  A failure after the pages moved is rolled back, as
 * far as CUDA lets us, for the same reason: with preferred location GPU a
 * later touch would fault every page in, over budget. */
static cudaError_t promote(const struct kvt_cudart *rt, cudaStream_t s, void *ptr, size_t len, int dev) {
        const struct cudaMemLocation gpu = { cudaMemLocationTypeDevice, dev };
        const struct cudaMemLocation host = { cudaMemLocationTypeHost, 0 };
        cudaError_t e;

        e = rt->cudaMemPrefetchAsync(ptr, len, gpu, 0, s);
        if (e == cudaSuccess)
                e = rt->cudaStreamSynchronize(s);
        if (e != cudaSuccess)
                return e;
        e = rt->cudaMemAdvise(ptr, len, cudaMemAdviseSetPreferredLocation, gpu);
        if (e != cudaSuccess) {
                rt->cudaMemAdvise(ptr, len, cudaMemAdviseSetPreferredLocation, host);
                if (rt->cudaMemPrefetchAsync(ptr, len, host, 0, s) == cudaSuccess)
                        rt->cudaStreamSynchronize(s);
        }
        return e;
}

/* Demotes [ptr, len) to the host, mapped for the GPU or not.  Advice comes
 * first: once the preferred location is the host, GPU accesses during and
 * after the move map the pages instead of faulting them back.  A failed
 * prefetch leaves pages in VRAM, which the daemon keeps charged. */
static cudaError_t demote(const struct kvt_cudart *rt, cudaStream_t s, void *ptr, size_t len, int dev,
                          bool mapped) {
        const struct cudaMemLocation gpu = { cudaMemLocationTypeDevice, dev };
        const struct cudaMemLocation host = { cudaMemLocationTypeHost, 0 };
        cudaError_t e;

        e = rt->cudaMemAdvise(ptr, len, cudaMemAdviseSetPreferredLocation, host);
        if (e == cudaSuccess)
                e = rt->cudaMemAdvise(ptr, len, mapped ? cudaMemAdviseSetAccessedBy : cudaMemAdviseUnsetAccessedBy,
                                      gpu);
        if (e == cudaSuccess)
                e = rt->cudaMemPrefetchAsync(ptr, len, host, 0, s);
        if (e == cudaSuccess)
                e = rt->cudaStreamSynchronize(s);
        return e;
}

static cudaError_t move_range(const struct kvt_cudart *rt, cudaStream_t s, void *ptr, size_t len, int dev,
                              uint32_t tier) {
        switch (tier) {
        case KVT_TIER_VRAM:
                return promote(rt, s, ptr, len, dev);
        case KVT_TIER_HOST_MAPPED:
        case KVT_TIER_HOST:
                return demote(rt, s, ptr, len, dev, tier == KVT_TIER_HOST_MAPPED);
        default:
                return cudaErrorInvalidValue;
        }
}

static void order_run(struct mover *mv, const struct kvt_order *o) {
        const struct kvt_cudart *rt = real_cudart();
        struct kvt_order_done done = { .order_id = o->order_id };
        struct shim_region reg;
        uint64_t t0 = now_ns();
        cudaError_t e = cudaSuccess;

        if (!rt)
                done.status = -ENOSYS;
        else if (regions_acquire(o->region_id, &reg) < 0)
                done.status = -ENOENT; /* freed since the daemon planned */
        else {
                uint64_t n_chunks = reg.span_bytes >> KVT_CHUNK_SHIFT;
                cudaStream_t s = NULL;

                if ((uint64_t)o->first_chunk + o->n_chunks > n_chunks)
                        done.status = -ERANGE;
                else if ((e = rt->cudaSetDevice(reg.device)) != cudaSuccess ||
                         !(s = mover_stream(mv, rt, reg.device, &e)))
                        done.status = -EIO;
                else {
                        void *p = (void *)(reg.base + ((uintptr_t)o->first_chunk << KVT_CHUNK_SHIFT));
                        e = move_range(rt, s, p, (size_t)o->n_chunks << KVT_CHUNK_SHIFT, reg.device, o->tier);
                        if (e != cudaSuccess)
                                done.status = -EIO;
                }
                regions_release(o->region_id);
        }
        if (done.status < 0)
                log_debug("Order %llu (region %u, chunks %u+%u to %s) failed: %s (CUDA error %d).",
                          (unsigned long long)o->order_id, o->region_id, o->first_chunk, o->n_chunks,
                          kvt_tier_name(o->tier), strerror(-done.status), (int)e);
        done.cuda_err = e;
        done.elapsed_ns = now_ns() - t0;
        client_send_on(mv->fd, KVT_MSG_ORDER_DONE, &done, sizeof(done));
}

/* Registers the regions the daemon of this connection does not know.  Its
 * books start every chunk host-mapped, so each region is first returned
 * there: chunks left in VRAM from before a daemon restart would otherwise
 * sit outside the budget.  A region that cannot be moved stays untiered. */
static void register_regions(struct mover *mv) {
        const struct kvt_cudart *rt = real_cudart();
        struct shim_region reg;
        uint32_t after = 0;
        unsigned n = 0;

        while (rt && regions_acquire_unregistered(after, &reg) == 0) {
                struct kvt_region_add add;
                cudaError_t e = cudaErrorInvalidDevice;
                cudaStream_t s = NULL;
                int r;

                after = reg.id;
                if (rt->cudaSetDevice(reg.device) == cudaSuccess && (s = mover_stream(mv, rt, reg.device, &e)))
                        e = demote(rt, s, (void *)reg.base, reg.span_bytes, reg.device, true);
                if (e != cudaSuccess) {
                        log_warning("Failed to return region %u to host memory: %s; it stays untiered, ignoring.",
                                    reg.id, rt->cudaGetErrorString(e));
                        regions_release(reg.id);
                        continue;
                }
                regions_add_msg(&reg, &add);
                r = client_send_on(mv->fd, KVT_MSG_REGION_ADD, &add, sizeof(add));
                if (r == 0)
                        regions_set_registered(reg.id, true);
                regions_release(reg.id);
                if (r < 0)
                        return;
                n++;
        }
        if (n)
                log_notice("Registered %u captured regions with kvtierd.", n);
}

/* Carries out orders from mv->fd until it fails; returns why. */
static int serve(struct mover *mv) {
        for (;;) {
                struct pollfd p = { .fd = mv->fd, .events = POLLIN };
                int r = poll(&p, 1, -1);

                if (r < 0 && errno == EINTR)
                        continue;
                if (r < 0)
                        return -errno;
                r = kvt_msg_recv(mv->fd, &mv->msg);
                if (r == -EAGAIN)
                        continue;
                if (r < 0)
                        return r;
                if (mv->msg.hdr.type != KVT_MSG_ORDER) {
                        log_warning("Unexpected %s message from kvtierd, disconnecting.",
                                    kvt_msg_type_name(mv->msg.hdr.type));
                        return -EPROTO;
                }
                order_run(mv, &mv->msg.u.order);
        }
}

static void *mover_main(void *arg) {
        struct mover *mv = arg;
        const struct kvt_cudart *rt;

        while ((mv->fd = client_next_connection()) >= 0) {
                register_regions(mv);
                client_lost(mv->fd, serve(mv));
                close(mv->fd);
        }
        rt = real_cudart();
        for (int d = 0; rt && d < KVT_MAX_GPUS; d++)
                if (mv->streams[d])
                        rt->cudaStreamDestroy(mv->streams[d]);
        free(mv);
        return NULL;
}

int mover_start(void) {
        struct mover *mv = calloc(1, sizeof(*mv));
        pthread_attr_t attr;
        pthread_t t;
        sigset_t all, old;
        int r;

        if (!mv)
                return -ENOMEM;
        mv->fd = -1;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        /* The engine's signals are the engine's: the mover takes none. */
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        r = -pthread_create(&t, &attr, mover_main, mv);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        pthread_attr_destroy(&attr);
        if (r < 0) {
                free(mv);
                return r;
        }
        pthread_setname_np(t, "kvtier-mover");
        return 0;
}
