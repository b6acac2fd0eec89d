/* SPDX-License-Identifier: MIT */
/*
 * The evictor threads (evictors.h): their queue, their CUDA contexts, the
 * split of an eviction into parts, and where the host tier's pages go.
 *
 * Which thread runs what: evictors_*() run on the owner's thread;
 * evictor_*() and the host_*(), advise_*() and context_*() helpers on an
 * evictor's.  Functions marked "under the lock" are called with
 * struct evictors' mutex held; every other one takes it itself, around no
 * CUDA call.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "evictors.h"
#include "exit.h"
#include "log.h"
#include "protocol.h"
#include "regions.h"
#include "state.h"
#include "util.h"

/* An eviction is split into parts, one per evictor, of at least this many
 * bytes: small parts moved slower than long ones (tests/bench/RESULTS.md). */
#define EVICT_PART_MIN_BYTES ((size_t)16 << 20)

/* A sample (a re-arm or a probe) is made in parts of this many chunks, each
 * taken when no move waits: a move that arrives behind a sample waits for
 * one part, not for the whole sample (a re-arm's advice is driver time per
 * chunk, and more of it beside faults and moves). */
#define SAMPLE_PART_CHUNKS 8u

/* How long a sample waits behind moves at most: then its next part goes
 * first.  Its region stays pinned until it is made (an engine's cudaFree
 * of it waits), and its chunks are booked in flight, unmovable; moves
 * that keep coming must not hold it for good.  Longer than samples waited
 * on average on the H200 (tests/bench/RESULTS.md). */
#define SAMPLE_WAIT_MAX_NS (500ull * 1000 * 1000)

/* An evictor thread.  set and thread are fixed by evictors_new(); the rest
 * only its own thread touches, unlocked. */
struct evictor {
        struct evictors *set;
        pthread_t thread;
        const struct kvt_cuda_calls *cu;    /* the driver's context calls; NULL until its first eviction,
                                             * or if the driver has none */
        bool ctx_tried[KVT_MAX_GPUS];       /* whether it has tried for a context of its own there */
        CUcontext ctx[KVT_MAX_GPUS];        /* its own context there; NULL: none, the primary one */
        cudaStream_t streams[KVT_MAX_GPUS]; /* its stream there, in ctx[] or the primary context */
};

/* What the evictors know of one GPU, under the lock. */
struct evict_gpu {
        bool ctx_logged;       /* whether the evictors' contexts there (or no driver calls) were said */
};

/* Evictions queued, oldest first, until every part is taken. */
struct queue {
        struct eviction *head, **tail;
};

/* The queues, in the order the evictors serve them: every move (an
 * eviction, a failed promotion going back) before any sample, since the
 * engine waits for the room a move makes, and a sample only informs. */
enum { QUEUE_MOVES, QUEUE_SAMPLES, _QUEUE_MAX };

/* rt, wake_fd and n are fixed by evictors_new(); the fields between lock
 * and gpu[] are under the lock. */
struct evictors {
        const struct kvt_cudart *rt;
        int wake_fd;
        pthread_mutex_t lock;
        pthread_cond_t cond; /* broadcast whenever any of the below changes */
        struct queue queues[_QUEUE_MAX];
        unsigned busy;    /* advice and parts being made */
        unsigned held;    /* the owner's promotions being issued */
        bool stopping;
        struct evict_gpu gpu[KVT_MAX_GPUS];
        unsigned n;
        struct evictor evictors[];
};

/* What an evictor does next: advise a whole move, or move a part of it,
 * or sample a part of a sample. */
struct share {
        struct eviction *e;
        bool advise;
        size_t off, len;
};

static void wake_owner(const struct evictors *set) {
        uint64_t one = 1;
        ssize_t n = write(set->wake_fd, &one, sizeof(one));

        (void)n; /* a full counter already wakes the owner */
}

struct cudaMemLocation evictors_host_location(int dev, int node) {
        bool refused = node < 0 || node >= 64 || dev < 0 || dev >= KVT_MAX_GPUS ||
                       (atomic_load(&kvt_shim()->numa_refused[dev]) & 1ull << node);

        if (refused)
                return (struct cudaMemLocation){cudaMemLocationTypeHost, 0};
        return (struct cudaMemLocation){cudaMemLocationTypeHostNuma, node};
}

/* Whether loc, for GPU dev, was a host NUMA node the driver refused as a
 * location with e (no NUMA support, an old driver, a node it does not
 * know): given up for plain host memory for dev from now on, said once.
 * Once the process is exiting an error says nothing of the node: the
 * runtime's teardown overtook the call. */
static bool host_refused(int dev, struct cudaMemLocation loc, cudaError_t e) {
        if (e == cudaSuccess || loc.type != cudaMemLocationTypeHostNuma || exit_begun() || dev < 0 ||
            dev >= KVT_MAX_GPUS || loc.id < 0 || loc.id >= 64)
                return false;
        if (!(atomic_fetch_or(&kvt_shim()->numa_refused[dev], 1ull << loc.id) & 1ull << loc.id))
                log_info("GPU %d: host NUMA node %d refused as a location (CUDA error %d); "
                         "plain host memory instead.",
                         dev, loc.id, (int)e);
        return true;
}

cudaError_t evictors_prefetch(const struct kvt_cudart *rt, void *ptr, size_t len, int dev,
                              struct cudaMemLocation loc, cudaStream_t s) {
        cudaError_t e = rt->cudaMemPrefetchAsync(ptr, len, loc, 0, s);

        if (host_refused(dev, loc, e))
                e = rt->cudaMemPrefetchAsync(ptr, len, evictors_host_location(dev, loc.id), 0, s);
        return e;
}

/* A sample (a re-arm or a probe) takes a chunk's first 4 KiB page: on the
 * H200 a GPU touch of one unmapped page costs a fault and a 4 KiB remote
 * map, ~10 us, where the whole chunk's refault took ~2.6 ms
 * (tests/gpu/um-modes.cu), and the remote map's CUPTI record names the
 * page.  Always the same page: the driver splits its 2 MiB block at the
 * edges of every range an advice names and never merges it again, and
 * moves of a block split in many pieces are slower for good (on the
 * H200, after 16 re-arms of each chunk, a different page each time, 1 GiB
 * was promoted at 3.0-3.4 GB/s, against 11-19 with the same page each time:
 * tests/gpu/rearm-split.cu).  At the chunk's start the block splits once,
 * in two.
 *
 * The sample page is never accessed-by the GPU (advise_host()): a mapped
 * eviction maps the rest of the chunk and leaves that page unmapped, so
 * the chunk's next use after it faults with no re-arm at all.  And the
 * driver has no mapping of its own to take down when the page is sampled,
 * which made a re-arm alone several times cheaper on the H200
 * (tests/gpu/sample-cost.cu, tests/bench/RESULTS.md). */
#define SAMPLE_PAGE_BYTES ((size_t)KVT_SAMPLE_PAGE_BYTES)

/* Sends a probe's n pages to the host on s: in one batch where the runtime
 * has it, since each prefetch waits for the copy engine, behind whatever
 * the other moves have queued there: one wait a batch, not one a page. */
static cudaError_t sample_out(const struct kvt_cudart *rt, void **pages, size_t *sizes, size_t n, cudaStream_t s) {
        struct cudaMemLocation host = {cudaMemLocationTypeHost, 0};
        size_t first = 0;
        cudaError_t e = cudaSuccess;

        if (n == 0)
                return cudaSuccess;
        if (rt->cudaMemPrefetchBatchAsync)
                return rt->cudaMemPrefetchBatchAsync(pages, sizes, n, &host, &first, 1, 0, s);
        for (size_t i = 0; i < n && e == cudaSuccess; i++)
                e = rt->cudaMemPrefetchAsync(pages[i], sizes[i], host, 0, s);
        return e;
}

/* Samples each chunk of [ptr, len) of GPU dev (EVICT_MAP_REARM or
 * EVICT_MAP_PROBE), at most SAMPLE_PART_CHUNKS: one page each, on s; known:
 * the chunks' REGION_ADVISED_* bits.  A
 * re-arm toggles read duplication on the page, which takes the GPU's
 * mapping of a host page down.  A probe first makes the host the page's
 * preferred location unless the chunk's is (its next touch maps it there,
 * and CUPTI names it),
 * toggles it (a page a touch mapped on the host since the last probe is
 * unmapped; one in VRAM stays), then sends it to the host, which unmaps it
 * from VRAM: each advice comes before the copy, never waiting for it.  A
 * failure leaves the pages as they were, or one page on the host, which
 * the books do not count (it is 1/512 of the chunk and returns with the
 * chunk's next promotion). */
static cudaError_t advise_sample(struct evictors *set, char *ptr, size_t len, int dev, enum evict_map map,
                                 unsigned known, cudaStream_t s) {
        const struct cudaMemLocation host = {cudaMemLocationTypeHost, 0};
        const struct cudaMemLocation gpu = {cudaMemLocationTypeDevice, dev};
        const struct kvt_cudart *rt = set->rt;
        void *pages[SAMPLE_PART_CHUNKS];
        size_t sizes[SAMPLE_PART_CHUNKS], n = 0;
        cudaError_t e = cudaSuccess;

        for (size_t off = 0; off + KVT_CHUNK_BYTES <= len && n < SAMPLE_PART_CHUNKS && e == cudaSuccess;
             off += KVT_CHUNK_BYTES) {
                char *pg = ptr + off;

                if (map == EVICT_MAP_PROBE && !(known & REGION_ADVISED_HOST))
                        e = rt->cudaMemAdvise(pg, SAMPLE_PAGE_BYTES, cudaMemAdviseSetPreferredLocation, host);
                if (e == cudaSuccess)
                        e = rt->cudaMemAdvise(pg, SAMPLE_PAGE_BYTES, cudaMemAdviseSetReadMostly, gpu);
                if (e == cudaSuccess)
                        e = rt->cudaMemAdvise(pg, SAMPLE_PAGE_BYTES, cudaMemAdviseUnsetReadMostly, gpu);
                if (e == cudaSuccess && map == EVICT_MAP_PROBE) {
                        pages[n] = pg;
                        sizes[n++] = SAMPLE_PAGE_BYTES;
                }
        }
        if (e != cudaSuccess || map != EVICT_MAP_PROBE)
                return e;
        e = sample_out(rt, pages, sizes, n, s);
        return e == cudaSuccess ? rt->cudaStreamSynchronize(s) : e;
}

/* Advises eviction e's pages (whole chunks) for the host before they
 * move, but for what they already have (e->known): once the preferred
 * location is the host, GPU accesses during and after the move map the
 * pages instead of faulting them back.  The preferred location is plain
 * host memory, never the NUMA node the prefetch puts the pages on: with a
 * NUMA node as the preferred location, the H200's accesses migrated the
 * pages back into VRAM, accessed-by or not.  A mapped eviction
 * (EVICT_MAP_SET) has each chunk accessed by the GPU but for its sample
 * page (SAMPLE_PAGE_BYTES): one piece of advice a chunk, at the edge the
 * samples split anyway.  Promotions leave the advice as it is, so a
 * chunk's advice is made once (at its first eviction, or at its capture
 * where that starts in VRAM: shim.c) and not again: every
 * piece of advice takes the driver's lock on the whole address space,
 * waiting for every move and fault under way.  A failed advice leaves the
 * pages in VRAM, which the daemon keeps charged; an eviction whose part
 * failed may have the others' pages on the host, charged all the same (the
 * safe side of the books). */
static cudaError_t advise_host(struct evictors *set, const struct eviction *ev) {
        const struct cudaMemLocation host = {cudaMemLocationTypeHost, 0};
        const struct cudaMemLocation gpu = {cudaMemLocationTypeDevice, ev->device};
        const struct kvt_cudart *rt = set->rt;
        char *ptr = ev->ptr;
        cudaError_t e = cudaSuccess;

        if (!(ev->known & REGION_ADVISED_HOST))
                e = rt->cudaMemAdvise(ptr, ev->len, cudaMemAdviseSetPreferredLocation, host);
        if (e != cudaSuccess || ev->map == EVICT_MAP_KEEP)
                return e;
        if (ev->map == EVICT_MAP_UNSET)
                return ev->known & REGION_ADVISED_UNMAPPED ? cudaSuccess
                                                           : rt->cudaMemAdvise(ptr, ev->len, cudaMemAdviseUnsetAccessedBy, gpu);
        return ev->known & REGION_ADVISED_MAPPED ? cudaSuccess : evictors_map_chunks(rt, ptr, ev->len, ev->device);
}

cudaError_t evictors_map_chunks(const struct kvt_cudart *rt, void *ptr, size_t len, int dev) {
        const struct cudaMemLocation gpu = {cudaMemLocationTypeDevice, dev};
        cudaError_t e = cudaSuccess;

        for (size_t off = 0; off < len && e == cudaSuccess; off += KVT_CHUNK_BYTES) {
                size_t n = len - off < KVT_CHUNK_BYTES ? len - off : KVT_CHUNK_BYTES;

                if (n > SAMPLE_PAGE_BYTES)
                        e = rt->cudaMemAdvise((char *)ptr + off + SAMPLE_PAGE_BYTES, n - SAMPLE_PAGE_BYTES,
                                              cudaMemAdviseSetAccessedBy, gpu);
        }
        return e;
}

unsigned evictors_advice(const struct eviction *e) {
        unsigned mapping = REGION_ADVISED_MAPPED | REGION_ADVISED_UNMAPPED;

        return REGION_ADVISED_HOST | (e->map == EVICT_MAP_SET     ? REGION_ADVISED_MAPPED
                                      : e->map == EVICT_MAP_UNSET ? REGION_ADVISED_UNMAPPED
                                                                  : e->known & mapping);
}

/* Whether eviction e (a move) needs advice beyond what it has. */
static bool needs_advice(const struct eviction *e) {
        unsigned want = evictors_advice(e);

        return (e->known & want) != want;
}

/* Says whether an evictor has a context of its own on GPU dev: the first
 * success and a driver without the calls once per GPU, every refusal (at
 * most one per evictor and GPU). */
static void context_log(struct evictors *set, const struct evictor *self, int dev, CUresult r) {
        bool first;

        if (self->cu && r != CUDA_SUCCESS) {
                log_info("GPU %d: no CUDA context of its own for an evictor (CUDA error %d); "
                         "it evicts whole runs in the engine's.",
                         dev, (int)r);
                return;
        }
        pthread_mutex_lock(&set->lock);
        first = !set->gpu[dev].ctx_logged;
        set->gpu[dev].ctx_logged = true;
        pthread_mutex_unlock(&set->lock);
        if (!first)
                return;
        if (!self->cu)
                log_info("GPU %d: the CUDA driver has no cuCtxCreate_v4 (older than CUDA 12.5); "
                         "evictions share the engine's context.",
                         dev);
        else
                log_info("GPU %d: evictions run in CUDA contexts of their own, one per evictor thread.",
                         dev);
}

/* A context of its own is made for evictions only: no kernel runs there, so
 * the reservations that size kernels' stacks, printf buffer and heap go
 * down to nothing (much of a created context's VRAM).  The
 * driver keeps a context working if it refuses: logged only. */
static void context_lower(const struct kvt_cuda_calls *cu, int dev) {
        static const CUlimit limits[] = {CU_LIMIT_STACK_SIZE, CU_LIMIT_PRINTF_FIFO_SIZE,
                                         CU_LIMIT_MALLOC_HEAP_SIZE};

        for (size_t i = 0; i < ELEMENTSOF(limits); i++) {
                CUresult r = cu->cuCtxSetLimit(limits[i], 0);

                if (r != CUDA_SUCCESS)
                        log_debug("GPU %d: the evictors' context keeps limit %d (CUDA error %d).", dev,
                                  (int)limits[i], (int)r);
        }
}

/* Tries once for a context of the evictor's own on GPU dev, with blocking
 * waits (an evictor sleeps in cudaStreamSynchronize); current on the
 * calling thread once created.  None where the driver lacks the calls or
 * CUDA refuses one: then the evictor works in the primary context there. */
static void context_open(struct evictor *self, int dev) {
        CUresult r = CUDA_ERROR_NOT_SUPPORTED;
        CUdevice cudev;

        self->ctx_tried[dev] = true;
        if (!self->cu)
                self->cu = real_cuda_calls(); /* by now the runtime has loaded libcuda */
        if (self->cu && (r = self->cu->cuDeviceGet(&cudev, dev)) == CUDA_SUCCESS)
                r = self->cu->cuCtxCreate_v4(&self->ctx[dev], NULL, CU_CTX_SCHED_BLOCKING_SYNC, cudev);
        if (r == CUDA_SUCCESS)
                context_lower(self->cu, dev);
        else
                self->ctx[dev] = NULL;
        context_log(self->set, self, dev, r);
}

/* Makes the evictor's context on GPU dev current (its own, or the primary
 * one where it has none) and gives its stream there. */
static cudaError_t evictor_enter(struct evictor *self, int dev, cudaStream_t *ret_stream) {
        const struct kvt_cudart *rt = self->set->rt;
        cudaError_t e = cudaSuccess;

        if (!self->ctx_tried[dev])
                context_open(self, dev);
        if (!self->ctx[dev])
                e = rt->cudaSetDevice(dev);
        else if (self->cu->cuCtxSetCurrent(self->ctx[dev]) != CUDA_SUCCESS)
                e = cudaErrorUnknown;
        if (e == cudaSuccess && !self->streams[dev] &&
            (e = rt->cudaStreamCreateWithFlags(&self->streams[dev], cudaStreamNonBlocking)) != cudaSuccess)
                self->streams[dev] = NULL;
        *ret_stream = self->streams[dev];
        return e;
}

static bool is_sample(const struct eviction *e) {
        return e->map == EVICT_MAP_REARM || e->map == EVICT_MAP_PROBE;
}

/* Makes share s: the advice for a whole move, the move of a part, waited
 * for, or a part of a sample.  Not under the lock: the calls may block for
 * the whole copy. */
static cudaError_t evictor_do(struct evictor *self, const struct share *s) {
        const struct eviction *e = s->e; /* its first six fields are fixed while it is queued */
        cudaStream_t stream;
        cudaError_t err = evictor_enter(self, e->device, &stream);

        if (err != cudaSuccess)
                return err;
        if (s->advise)
                return advise_host(self->set, e);
        if (is_sample(e))
                return advise_sample(self->set, (char *)e->ptr + s->off, s->len, e->device, e->map, e->known,
                                     stream);
        err = evictors_prefetch(self->set->rt, (char *)e->ptr + s->off, s->len, e->device,
                                evictors_host_location(e->device, e->host_node), stream);
        return err == cudaSuccess ? self->set->rt->cudaStreamSynchronize(stream) : err;
}

static struct queue *queue_of(struct evictors *set, const struct eviction *e) {
        return &set->queues[is_sample(e) ? QUEUE_SAMPLES : QUEUE_MOVES];
}

/* Takes e, the first of its queue, off it once every part is taken.
 * Under the lock. */
static void queue_pop(struct evictors *set, const struct eviction *e) {
        struct queue *q = queue_of(set, e);

        q->head = q->head->next_queued;
        if (!q->head)
                q->tail = &q->head;
}

/* The eviction an evictor may start on at now: the first sample if it
 * waited SAMPLE_WAIT_MAX_NS, else the first move unless another evictor is
 * advising it, else the first sample; none while the owner holds them
 * back.  Under the lock. */
static struct eviction *queue_next(const struct evictors *set, uint64_t now) {
        const struct eviction *move = set->queues[QUEUE_MOVES].head, *sample = set->queues[QUEUE_SAMPLES].head;

        if (set->held > 0)
                return NULL;
        if (sample && now - sample->queued_ns >= SAMPLE_WAIT_MAX_NS)
                return set->queues[QUEUE_SAMPLES].head;
        if (move && !move->advising)
                return set->queues[QUEUE_MOVES].head;
        return set->queues[QUEUE_SAMPLES].head;
}

/* The bytes of eviction e an evictor takes next: a part, or all that is
 * left of a move where it has no context of its own on e's GPU (there a
 * second evictor would only wait for the first).  Under the lock. */
static size_t evictor_part_len(const struct evictor *self, const struct eviction *e) {
        size_t left = e->len - e->next_off;

        if (!is_sample(e) && self->ctx_tried[e->device] && !self->ctx[e->device])
                return left;
        return MIN(e->part_bytes, left);
}

/* Waits for work and takes the evictor's next share (queue_next()) into
 * *ret: a move's advice, made before any part moves, or a part.  Returns
 * false once stopping with nothing left.  Under the lock. */
static bool evictor_take(struct evictor *self, struct share *ret) {
        struct evictors *set = self->set;
        struct eviction *e;

        while (!(e = queue_next(set, now_ns())) && !set->stopping)
                pthread_cond_wait(&set->cond, &set->lock);
        if (!e)
                return false; /* stopping: the owner drained the queues first */
        set->busy++;
        if (!e->started_ns)
                e->started_ns = now_ns();
        *ret = (struct share){.e = e, .advise = !e->advised};
        if (ret->advise) {
                e->advising = true;
                return true;
        }
        ret->off = e->next_off;
        ret->len = evictor_part_len(self, e);
        e->next_off += ret->len;
        e->parts_moving++;
        if (e->next_off == e->len)
                queue_pop(set, e);
        return true;
}

/* Ends share s with err; an eviction whose parts are all taken and moved
 * is done, and the owner woken.  Under the lock. */
static void evictor_put(struct evictors *set, const struct share *s, cudaError_t err) {
        struct eviction *e = s->e;

        if (s->advise) {
                e->advising = false;
                e->advised = true;
                e->advised_ns = now_ns();
        } else
                e->parts_moving--;
        /* a failed advice or sample part: nothing more of it is started (a
         * move's parts go on: they return pages to the host, the safe side) */
        if (err != cudaSuccess && (s->advise || is_sample(e)) && e->next_off < e->len) {
                e->next_off = e->len;
                queue_pop(set, e); /* parts left: it is the first of its queue */
        }
        if (e->err == cudaSuccess)
                e->err = err;
        set->busy--;
        if (e->next_off == e->len && e->parts_moving == 0 && !e->advising) {
                e->done = true;
                wake_owner(set);
        }
        pthread_cond_broadcast(&set->cond); /* other evictors, and the owner's waits */
}

/* An evictor leaving: its streams and contexts go. */
static void evictor_exit(struct evictor *self) {
        const struct kvt_cudart *rt = self->set->rt;

        for (int d = 0; d < KVT_MAX_GPUS; d++) {
                if (self->streams[d] &&
                    (self->ctx[d] ? self->cu->cuCtxSetCurrent(self->ctx[d]) == CUDA_SUCCESS
                                  : rt->cudaSetDevice(d) == cudaSuccess))
                        (void)rt->cudaStreamDestroy(self->streams[d]);
                if (self->ctx[d])
                        (void)self->cu->cuCtxDestroy_v2(self->ctx[d]);
                self->streams[d] = NULL;
                self->ctx[d] = NULL;
        }
}

static void *evictor_main(void *arg) {
        struct evictor *self = arg;
        struct evictors *set = self->set;
        struct share s;

        pthread_mutex_lock(&set->lock);
        while (evictor_take(self, &s)) {
                cudaError_t err;

                pthread_mutex_unlock(&set->lock);
                if (exit_gate_enter()) {
                        err = evictor_do(self, &s);
                        exit_gate_leave();
                } else
                        err = cudaErrorCudartUnloading; /* the exit cancels it (exit.h) */
                pthread_mutex_lock(&set->lock);
                evictor_put(set, &s, err);
        }
        pthread_mutex_unlock(&set->lock);
        evictor_exit(self);
        return NULL;
}

static void evictors_destroy(struct evictors *set) {
        pthread_mutex_destroy(&set->lock);
        pthread_cond_destroy(&set->cond);
        free(set);
}

/* Stops and joins the first n evictors. */
static void evictors_stop(struct evictors *set, unsigned n) {
        pthread_mutex_lock(&set->lock);
        set->stopping = true;
        pthread_cond_broadcast(&set->cond);
        pthread_mutex_unlock(&set->lock);
        for (unsigned k = 0; k < n; k++)
                pthread_join(set->evictors[k].thread, NULL);
}

int evictors_new(const struct kvt_cudart *rt, unsigned n, int wake_fd, struct evictors **ret) {
        struct evictors *set = calloc(1, sizeof(*set) + n * sizeof(set->evictors[0]));

        if (!set)
                return -ENOMEM;
        set->rt = rt;
        set->wake_fd = wake_fd;
        for (unsigned q = 0; q < _QUEUE_MAX; q++)
                set->queues[q].tail = &set->queues[q].head;
        set->n = n;
        pthread_mutex_init(&set->lock, NULL);
        pthread_cond_init(&set->cond, NULL);
        for (unsigned k = 0; k < n; k++) {
                struct evictor *self = &set->evictors[k];
                int r;

                self->set = set;
                r = kvt_thread_create(&self->thread, NULL, evictor_main, self);
                if (r < 0) {
                        evictors_stop(set, k);
                        evictors_destroy(set);
                        return r;
                }
                pthread_setname_np(self->thread, "kvtier-evict");
        }
        *ret = set;
        return 0;
}

void evictors_free(struct evictors *set) {
        if (!set)
                return;
        evictors_drain(set);
        evictors_stop(set, set->n);
        evictors_destroy(set);
}

void evictors_submit(struct evictors *set, struct eviction *e) {
        size_t share = (e->len / set->n + KVT_CHUNK_BYTES - 1) & ~(size_t)(KVT_CHUNK_BYTES - 1);
        struct queue *q = queue_of(set, e);

        e->next_queued = NULL;
        e->part_bytes = is_sample(e) ? (size_t)SAMPLE_PART_CHUNKS * KVT_CHUNK_BYTES
                                     : MAX(share, EVICT_PART_MIN_BYTES);
        e->next_off = e->parts_moving = 0;
        e->advising = false;
        /* a sample is all parts, no advice of the whole; nor a move whose
         * chunks have their advice */
        e->advised = is_sample(e) || !needs_advice(e);
        e->done = e->len == 0;     /* nothing to move */
        e->err = cudaSuccess;
        e->queued_ns = now_ns();
        e->started_ns = e->advised_ns = 0;
        if (e->done)
                return;
        pthread_mutex_lock(&set->lock);
        *q->tail = e;
        q->tail = &e->next_queued;
        pthread_cond_broadcast(&set->cond);
        pthread_mutex_unlock(&set->lock);
}

cudaError_t evictors_poll(struct evictors *set, struct eviction *e) {
        cudaError_t err;

        pthread_mutex_lock(&set->lock);
        err = e->done ? e->err : cudaErrorNotReady;
        pthread_mutex_unlock(&set->lock);
        return err;
}

cudaError_t evictors_move(struct evictors *set, struct eviction *e) {
        cudaError_t err;

        evictors_submit(set, e);
        pthread_mutex_lock(&set->lock);
        while (!e->done)
                pthread_cond_wait(&set->cond, &set->lock);
        err = e->err;
        pthread_mutex_unlock(&set->lock);
        return err;
}

void evictors_drain(struct evictors *set) {
        pthread_mutex_lock(&set->lock);
        while (set->queues[QUEUE_MOVES].head || set->queues[QUEUE_SAMPLES].head || set->busy)
                pthread_cond_wait(&set->cond, &set->lock);
        pthread_mutex_unlock(&set->lock);
}

void evictors_hold(struct evictors *set) {
        pthread_mutex_lock(&set->lock);
        set->held++;
        pthread_mutex_unlock(&set->lock);
}

void evictors_release(struct evictors *set) {
        pthread_mutex_lock(&set->lock);
        if (--set->held == 0)
                pthread_cond_broadcast(&set->cond);
        pthread_mutex_unlock(&set->lock);
}

int evictors_bind(struct evictors *set, const cpu_set_t *cpus) {
        int r = 0;

        for (unsigned k = 0; k < set->n; k++) {
                int q = pthread_setaffinity_np(set->evictors[k].thread, sizeof(*cpus), cpus);

                if (q != 0 && r == 0)
                        r = -q;
        }
        return r;
}
