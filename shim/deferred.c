/* SPDX-License-Identifier: MIT */
/*
 * Stream-ordered frees of captured memory.  cudaFreeAsync(p, s) promises
 * that p stays valid for the work queued on s before the call; managed
 * memory has no stream-ordered free, so the shim records an event on s and
 * a thread ("kvtier-reaper") calls cudaFree once the event has completed:
 * never before the stream reached the free.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>

#include "deferred.h"
#include "exit.h"
#include "hooks.h"
#include "log.h"
#include "real.h"
#include "regions.h"
#include "state.h"

struct deferred_entry {
        struct deferred_entry *next;
        struct shim_region region;
        cudaEvent_t event;
        deferred_release_fn release;
};

void deferred_atfork_child(void) {
        struct shim_deferred *d = &kvt_shim()->deferred;

        pthread_mutex_init(&d->lock, NULL);
        pthread_cond_init(&d->wake, NULL);
        d->head = d->tail = NULL;
        d->reaper_running = false;
        atomic_store(&d->pending_bytes, 0);
}

static void *reaper_main(void *arg) {
        struct shim_deferred *d = &kvt_shim()->deferred;
        const struct kvt_cudart *rt = arg;

        hook_enter(); /* every CUDA call here is the shim's own */
        for (;;) {
                struct deferred_entry *p;
                cudaError_t e;

                pthread_mutex_lock(&d->lock);
                while (!d->head)
                        pthread_cond_wait(&d->wake, &d->lock);
                p = d->head;
                d->head = p->next;
                if (!d->head)
                        d->tail = NULL;
                pthread_mutex_unlock(&d->lock);

                if (!exit_gate_enter()) {
                        free(p); /* the process exits: the memory goes with it (exit.h) */
                        continue;
                }
                e = rt->cudaEventSynchronize(p->event);
                if (e != cudaSuccess)
                        /* A failed stream: its work will not run, freeing cannot race it. */
                        log_debug("Waiting for the free of region %u failed: %s; freeing it.", p->region.id,
                                  rt->cudaGetErrorString(e));
                rt->cudaEventDestroy(p->event);
                p->release(rt, &p->region);
                exit_gate_leave();
                atomic_fetch_sub(&d->pending_bytes, p->region.size_bytes);
                free(p);
        }
        return NULL;
}

/* Starts the reaper thread if it is not running.  Called with lock held. */
static int reaper_start(const struct kvt_cudart *rt) {
        struct shim_deferred *d = &kvt_shim()->deferred;
        pthread_attr_t attr;
        pthread_t t;
        sigset_t all, old;
        int r;

        if (d->reaper_running)
                return 0;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        sigfillset(&all); /* the engine's signals are the engine's */
        pthread_sigmask(SIG_SETMASK, &all, &old);
        r = -pthread_create(&t, &attr, reaper_main, (void *)rt);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        pthread_attr_destroy(&attr);
        if (r < 0)
                return r;
        pthread_setname_np(t, "kvtier-reaper");
        d->reaper_running = true;
        exit_hook(); /* the runtime is up: the reaper's calls wait for no teardown */
        return 0;
}

static int enqueue(const struct kvt_cudart *rt, const struct shim_region *r, cudaStream_t stream,
                   deferred_release_fn release) {
        struct shim_deferred *d = &kvt_shim()->deferred;
        struct deferred_entry *p = calloc(1, sizeof(*p));
        int ret;

        if (!p)
                return -ENOMEM;
        p->region = *r;
        p->release = release;
        if (rt->cudaEventCreateWithFlags(&p->event, cudaEventDisableTiming) != cudaSuccess) {
                free(p);
                return -EIO;
        }
        if (rt->cudaEventRecord(p->event, stream) != cudaSuccess) {
                rt->cudaEventDestroy(p->event);
                free(p);
                return -EIO;
        }
        pthread_mutex_lock(&d->lock);
        ret = reaper_start(rt);
        if (ret == 0) {
                if (d->tail)
                        d->tail->next = p;
                else
                        d->head = p;
                d->tail = p;
                atomic_fetch_add(&d->pending_bytes, r->size_bytes);
                pthread_cond_signal(&d->wake);
        }
        pthread_mutex_unlock(&d->lock);
        if (ret < 0) {
                rt->cudaEventDestroy(p->event);
                free(p);
        }
        return ret;
}

uint64_t deferred_pending_bytes(void) {
        return atomic_load(&kvt_shim()->deferred.pending_bytes);
}

cudaError_t deferred_free(const struct kvt_cudart *rt, const struct shim_region *r, cudaStream_t stream,
                          deferred_release_fn release) {
        cudaError_t e;

        hook_enter();
        if (enqueue(rt, r, stream, release) == 0) {
                hook_leave();
                return cudaSuccess;
        }
        /* No event: the same guarantee, paid for by the caller's thread. */
        log_debug("Could not defer the free of region %u; waiting for its stream.", r->id);
        e = rt->cudaStreamSynchronize(stream);
        hook_leave();
        if (e != cudaSuccess)
                log_debug("Stream of region %u failed: %s; freeing it.", r->id, rt->cudaGetErrorString(e));
        return release(rt, r);
}
