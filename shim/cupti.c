/* SPDX-License-Identifier: MIT */
/*
 * CUPTI unified-memory activity as a source of heat: GPU page faults,
 * thrashing and remote-map events carry the address of the page the GPU
 * wanted, and count as accesses of its chunk (heat.c).  HtoD and DtoH
 * transfers are counted per kind but give no heat: most of them are the
 * mover's own prefetches and evictions, and counting those would keep
 * whatever was just moved hot.
 *
 * libcupti is loaded with dlopen when the first heat table is made, never
 * linked: by soname, then next to the loaded libcudart (the CUDA toolkit's
 * extras/CUPTI/lib64, or PyTorch's nvidia/cuda_cupti wheel).
 *
 * Faults are the signal: captures beyond the GRANT start in host memory
 * unmapped, so the GPU's first touch of such a chunk faults once (and maps
 * it); the daemon's samples unmap single pages of chunks (re-arms, probes),
 * whose next touch faults.  On the H200 a GPU_PAGE_FAULT record stands for
 * a whole batch of faults with one address (a kernel faulting on 256
 * probed pages gave 12 records), while a REMOTE_MAP record names the range
 * mapped, its address and size (256 records for the 256 pages): so remote
 * maps are the samples' answers.  The
 * driver's maps that follow the evictors' own SetAccessedBy look the same,
 * on every page but the sample page, which is never accessed-by: remote
 * maps count on that page only (remote_map_touch()), and the daemon discounts what
 * comes just after a mapped eviction all the same (registry.c).  So the
 * counters are on all the time; their
 * cost is measured in tests/bench/RESULTS.md.  Records are handed over every
 * CUPTI_FLUSH_MS, and a flush that counted faults asks the daemon to plan
 * at once (DEMAND).
 */
#include "config.h"

#include <dlfcn.h>
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cupti-abi.h"
#include "client.h"
#include "cupti.h"
#include "heat.h"
#include "launch.h"
#include "log.h"
#include "real.h"
#include "regions.h"
#include "state.h"
#include "sym.h"
#include "util.h"

_Static_assert(sizeof(CUpti_ActivityUnifiedMemoryCounter3) == 104, "UM counter record size");
_Static_assert(offsetof(CUpti_ActivityUnifiedMemoryCounter3, counterKind) == 4, "UM record counterKind");
_Static_assert(offsetof(CUpti_ActivityUnifiedMemoryCounter3, value) == 8, "UM record value");
_Static_assert(offsetof(CUpti_ActivityUnifiedMemoryCounter3, address) == 32, "UM record address");
_Static_assert(offsetof(CUpti_ActivityUnifiedMemoryCounter3, flags) == 56, "UM record flags");
_Static_assert(sizeof(CUpti_ActivityUnifiedMemoryCounterConfig) == 16, "UM counter config size");

/* Activity buffers handed to CUPTI: 1 MiB holds ~10 K records. */
#define BUFFER_BYTES (1u << 20)

static struct {
#define KVT_CUPTI_FIELD(ret, name, args) ret(*name) args;
        KVT_CUPTI_FUNCS(KVT_CUPTI_FIELD)
#undef KVT_CUPTI_FIELD
} cupti;

static const char *const cupti_names[] = {
#define KVT_CUPTI_NAME(ret, name, args) #name,
        KVT_CUPTI_FUNCS(KVT_CUPTI_NAME)
#undef KVT_CUPTI_NAME
};

/* The counters' records are handed over this often: a fault reaches the
 * daemon within about this long (its DEMAND then wakes the planner), so the
 * period bounds how long a demanded chunk is read in place before it can be
 * promoted.  Milliseconds. */
#define CUPTI_FLUSH_MS 10u

/* The sampler's life (run_lock): at exit it is stopped before the CUDA
 * runtime tears down (cupti_stop), never left calling CUPTI into a dead
 * runtime. */

/* Shared-library destructors run after every atexit handler, the CUDA
 * runtime's teardown included: no CUPTI call here, only the statistics of
 * a process whose sampler never started. */
__attribute__((destructor)) static void cupti_at_exit(void) {
        struct shim_cupti *cp = &kvt_shim()->cupti;

        __atomic_store_n(&cp->stopping, true, __ATOMIC_RELEASE);
        if (kvt_shim()->cfg.heat_stats_path && !cp->stats_dumped)
                cupti_dump_stats(kvt_shim()->cfg.heat_stats_path);
}

void cupti_get_stats(struct cupti_stats *ret) {
        struct shim_cupti *cp = &kvt_shim()->cupti;

        for (int k = 0; k < KVT_CUPTI_UM_KINDS; k++) {
                ret->records[k] = __atomic_load_n(&cp->stats.records[k], __ATOMIC_RELAXED);
                ret->attributed[k] = __atomic_load_n(&cp->stats.attributed[k], __ATOMIC_RELAXED);
        }
        ret->other_records = __atomic_load_n(&cp->stats.other_records, __ATOMIC_RELAXED);
        ret->buffers = __atomic_load_n(&cp->stats.buffers, __ATOMIC_RELAXED);
        ret->dropped = __atomic_load_n(&cp->stats.dropped, __ATOMIC_RELAXED);
        ret->enabled_ns = __atomic_load_n(&cp->stats.enabled_ns, __ATOMIC_RELAXED);
        ret->loaded = __atomic_load_n(&cp->loaded, __ATOMIC_ACQUIRE);
}

static void buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
        *buffer = aligned_alloc(8, BUFFER_BYTES);
        *size = *buffer ? BUFFER_BYTES : 0;
        *max_records = 0;
}

/* Faults and remote maps are the heat.  A GPU_PAGE_FAULT record stands
 * for a batch of faults (its address one of them); a REMOTE_MAP record
 * names the range mapped, so the samples' answers come as remote maps.  A
 * first touch that maps a page yields both.  (Remote maps alone made
 * transformers' decode slower and the paged pool no faster on the H200:
 * tests/bench/RESULTS.md.) */
static bool heat_kind(int kind) {
        return kind == CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_GPU_PAGE_FAULT ||
               kind == CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_REMOTE_MAP ||
               kind == CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_THRASHING;
}

/* A remote map counts only on the chunks whose sample page it maps
 * (captured chunks are 2 MiB aligned): the GPU maps that page only when a
 * touch of it faults, where the rest of a chunk a mapped eviction moves
 * (accessed-by, evictors.c) is mapped by the driver as its pages go, which
 * is no use.  A record names a range, [address, address + value): every
 * sample page in it counts, not the first address's alone.  A first touch
 * of the rest of an unmapped chunk faults, and counts as such.  Returns the
 * chunks counted. */
static size_t remote_map_touch(uint64_t address, uint64_t bytes) {
        uintptr_t at = (uintptr_t)address, end = (uintptr_t)(address + (bytes ? bytes : 1));
        size_t counted = 0;

        if (end < at) /* a range past the end of the address space: to its end */
                end = UINTPTR_MAX;
        /* no further than captured memory goes, whatever the record says */
        if (!regions_maybe_captured_range(&at, &end))
                return 0;
        if ((at & (KVT_CHUNK_BYTES - 1)) >= KVT_SAMPLE_PAGE_BYTES) /* from the next chunk's */
                at = (at | (KVT_CHUNK_BYTES - 1)) + 1;
        else
                at &= ~(uintptr_t)(KVT_CHUNK_BYTES - 1);
        /* from a chunk's start, the chunks heat_touch() counts in [at, end)
         * are those whose sample page is in it: a region's at once, and a
         * chunk at a time where none is */
        while (at < end && at != 0) {
                size_t n = heat_touch(at, end - at, 1);

                counted += n;
                at += (n ? n : 1) * KVT_CHUNK_BYTES;
        }
        return counted;
}

/* The chunks a record of a heat kind counts: a remote map's (above), or
 * the chunk of the address. */
static size_t heat_count(int kind, uint64_t address, uint64_t value) {
        if (kind == CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_REMOTE_MAP)
                return remote_map_touch(address, value);
        return heat_touch((uintptr_t)address, 0, 1);
}

static void um_record(const CUpti_ActivityUnifiedMemoryCounter3 *r) {
        struct shim_cupti *cp = &kvt_shim()->cupti;
        int k = r->counterKind;

        if (k < 0 || k >= KVT_CUPTI_UM_KINDS) {
                __atomic_fetch_add(&cp->stats.other_records, 1, __ATOMIC_RELAXED);
                return;
        }
        __atomic_fetch_add(&cp->stats.records[k], 1, __ATOMIC_RELAXED);
        if (heat_kind(k)) {
                if (heat_count(k, r->address, r->value))
                        __atomic_fetch_add(&cp->stats.attributed[k], 1, __ATOMIC_RELAXED);
                return;
        }
        /* Transfers: attributed for the statistics only. */
        if (heat_locate((uintptr_t)r->address))
                __atomic_fetch_add(&cp->stats.attributed[k], 1, __ATOMIC_RELAXED);
}

static void buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid) {
        struct shim_cupti *cp = &kvt_shim()->cupti;
        CUpti_Activity *rec = NULL;
        size_t dropped = 0;

        __atomic_fetch_add(&cp->stats.buffers, 1, __ATOMIC_RELAXED);
        while (buffer && cupti.cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
                if (rec->kind == CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER)
                        um_record((const CUpti_ActivityUnifiedMemoryCounter3 *)rec);
                else
                        __atomic_fetch_add(&cp->stats.other_records, 1, __ATOMIC_RELAXED);
        }
        /* A fault whose record CUPTI had no room for is a use never seen:
         * counted (heat-stats, and the daemon's status through the heat
         * table), so that a lost use is told from an unused chunk (CUPTI
         * resets its count at each call). */
        if (cupti.cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped) == CUPTI_SUCCESS && dropped) {
                __atomic_fetch_add(&cp->stats.dropped, (uint64_t)dropped, __ATOMIC_RELAXED);
                heat_note_lost((uint64_t)dropped);
        }
        free(buffer);
}

static void *try_open(const char *path) {
        return dlopen(path, RTLD_NOW | RTLD_LOCAL);
}

/* libcupti next to the libcudart the shim resolved. */
static void *open_near_cudart(void) {
        static const char *const rel[] = {
                "libcupti.so.13",
                "../extras/CUPTI/lib64/libcupti.so.13",    /* CUDA toolkit: lib64/ */
                "../../extras/CUPTI/lib64/libcupti.so.13", /* targets/<arch>/lib/ */
                "../../cuda_cupti/lib/libcupti.so.13",     /* PyTorch's nvidia/ wheels */
                "../../cu13/lib/libcupti.so.13",
        };
        const struct kvt_cudart *rt = real_cudart();
        char dir[PATH_MAX], path[PATH_MAX + 64];
        Dl_info info;

        if (!rt || !dladdr((const void *)rt->cudaMalloc, &info) || !info.dli_fname)
                return NULL;
        snprintf(dir, sizeof(dir), "%s", info.dli_fname);
        for (size_t i = 0; i < ELEMENTSOF(rel); i++) {
                void *h;

                snprintf(path, sizeof(path), "%s/%s", dirname(dir), rel[i]);
                snprintf(dir, sizeof(dir), "%s", info.dli_fname); /* dirname() wrote into it */
                if ((h = try_open(path)))
                        return h;
        }
        return NULL;
}

static int load(void) {
        static const char *const sonames[] = {"libcupti.so.13", "libcupti.so.12", "libcupti.so"};
        void *h = NULL;
        void **slots = (void **)&cupti;

        /* CUPTI takes one set of activity callbacks per process: under a
         * CUPTI tool (Nsight Systems, Nsight Compute and others inject
         * themselves through CUDA_INJECTION64_PATH) registering ours would
         * take its records away.  Merely loaded is not in use: PyTorch links
         * libcupti for its profiler, which registers its callbacks (and
         * then takes over from ours) only when a profile starts. */
        if (getenv("CUDA_INJECTION64_PATH"))
                return -EBUSY;
        for (size_t i = 0; !h && i < ELEMENTSOF(sonames); i++)
                h = try_open(sonames[i]);
        if (!h)
                h = open_near_cudart();
        if (!h)
                return -ENOENT;
        if (sym_fill(h, cupti_names, slots, ELEMENTSOF(cupti_names)) < ELEMENTSOF(cupti_names))
                return -ENOSYS; /* h stays open: unloading CUPTI is not safe */
        return 0;
}

/* Sleeps ns, or less if the process is exiting; returns false then. */
static bool nap(uint64_t ns) {
        struct shim_cupti *cp = &kvt_shim()->cupti;
        struct timespec until;
        bool go;

        realtime_after_ns(&until, ns);
        pthread_mutex_lock(&cp->run_lock);
        while (!cp->stopping && pthread_cond_timedwait(&cp->run_cond, &cp->run_lock, &until) != ETIMEDOUT)
                ;
        go = !cp->stopping;
        pthread_mutex_unlock(&cp->run_lock);
        return go;
}

/* After a flush that counted faults into the heat table: asks the daemon
 * to plan now rather than at its next tick. */
static void demand_if_faulted(void) {
        struct shim_cupti *cp = &kvt_shim()->cupti;
        uint64_t n = __atomic_load_n(
                             &cp->stats.attributed[CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_GPU_PAGE_FAULT],
                             __ATOMIC_RELAXED) +
                     __atomic_load_n(&cp->stats.attributed[CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_REMOTE_MAP],
                                     __ATOMIC_RELAXED);

        if (n != cp->faults_seen) {
                cp->faults_seen = n;
                client_demand();
        }
}

/* Hands the records over every CUPTI_FLUSH_MS until the process exits. */
static void *sampler_main(void *arg) {
        struct shim_cupti *cp = &kvt_shim()->cupti;
        uint64_t t0 = now_ns();

        while (nap((uint64_t)CUPTI_FLUSH_MS * 1000000ull)) {
                cupti.cuptiActivityFlushAll(0);
                demand_if_faulted();
        }
        __atomic_fetch_add(&cp->stats.enabled_ns, now_ns() - t0, __ATOMIC_RELAXED);
        pthread_mutex_lock(&cp->run_lock);
        cp->sampler_running = false;
        pthread_cond_broadcast(&cp->run_cond);
        pthread_mutex_unlock(&cp->run_lock);
        return arg;
}

/* atexit: registered once the runtime is up (cupti_start makes sure), so
 * it runs before the runtime's own teardown handler.  Stops the sampler (it finishes the CUPTI
 * call it is in, then disables the counters and flushes), takes the last
 * records while CUDA still stands, and writes the statistics.  On the H200
 * an engine whose sampler was left running died with SIGSEGV at exit. */
static void cupti_stop(void) {
        struct shim_cupti *cp = &kvt_shim()->cupti;
        const struct kvt_cudart *rt = real_cudart();
        struct timespec until;
        int dev;

        realtime_after_ns(&until, 2000000000ull); /* a CUPTI call that hangs must not hang exit() */
        pthread_mutex_lock(&cp->run_lock);
        __atomic_store_n(&cp->stopping, true, __ATOMIC_RELEASE);
        pthread_cond_broadcast(&cp->run_cond);
        while (cp->sampler_running &&
               pthread_cond_timedwait(&cp->run_cond, &cp->run_lock, &until) != ETIMEDOUT)
                ;
        pthread_mutex_unlock(&cp->run_lock);
        /* A runtime already unloading (another order of exit handlers) is
         * left alone: the records since the last flush are lost. */
        if (__atomic_load_n(&cp->loaded, __ATOMIC_ACQUIRE) && rt && rt->cudaGetDevice(&dev) == cudaSuccess) {
                cupti.cuptiActivityDisable(CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER);
                cupti.cuptiActivityFlushAll(1); /* CUPTI_ACTIVITY_FLAG_FLUSH_FORCED */
        }
        if (kvt_shim()->cfg.heat_stats_path) {
                cupti_dump_stats(kvt_shim()->cfg.heat_stats_path);
                cp->stats_dumped = true;
        }
}

void cupti_atfork_child(void) {
        struct shim_cupti *cp = &kvt_shim()->cupti;

        if (!cp->started)
                return;
        pthread_mutex_init(&cp->run_lock, NULL);
        pthread_cond_init(&cp->run_cond, NULL);
        cp->sampler_running = false;
        __atomic_store_n(&cp->loaded, false, __ATOMIC_RELEASE);
        cp->stats_dumped = true;
}

static const char *result_string(CUptiResult r) {
        const char *s = NULL;

        if (cupti.cuptiGetResultString && cupti.cuptiGetResultString(r, &s) == CUPTI_SUCCESS && s)
                return s;
        return "unknown CUPTI error";
}

/* Configures the counters of every device we may see.  Returns 0 or -EIO. */
static int configure(void) {
        static const int kinds[] = {
                CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_HTOD,
                CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_DTOH,
                CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_GPU_PAGE_FAULT,
                CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_THRASHING,
                CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_REMOTE_MAP,
        };
        CUpti_ActivityUnifiedMemoryCounterConfig cfg[8 * ELEMENTSOF(kinds)];
        CUptiResult r;
        uint32_t n = 0;

        for (uint32_t dev = 0; dev < 8; dev++)
                for (size_t k = 0; k < ELEMENTSOF(kinds); k++)
                        cfg[n++] = (CUpti_ActivityUnifiedMemoryCounterConfig){
                                .scope = CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_SCOPE_PROCESS_SINGLE_DEVICE,
                                .kind = kinds[k],
                                .deviceId = dev,
                                .enable = 1};
        r = cupti.cuptiActivityConfigureUnifiedMemoryCounter(cfg, n);
        if (r != CUPTI_SUCCESS)
                /* Fewer devices than configured fails on some versions: one device. */
                r = cupti.cuptiActivityConfigureUnifiedMemoryCounter(cfg, (uint32_t)ELEMENTSOF(kinds));
        if (r != CUPTI_SUCCESS)
                return log_warning_errno(
                        EIO,
                        "Failed to configure CUPTI unified-memory counters: %s; no fault heat, ignoring.",
                        result_string(r));
        return 0;
}

/* Loads and configures CUPTI; returns 0 with the counters enabled, or
 * -errno (logged). */
static int setup(void) {
        struct shim_cupti *cp = &kvt_shim()->cupti;

        CUptiResult cr;
        int r;

        r = load();
        if (r == -EBUSY) {
                log_info("CUPTI is in use by a tool (CUDA_INJECTION64_PATH); no fault heat from kvtier.");
                return r;
        }
        if (r < 0) {
                log_info("CUPTI not found (%s); heat from launches and hints only.", strerror(-r));
                return r;
        }
        cr = cupti.cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
        if (cr != CUPTI_SUCCESS)
                return log_warning_errno(EIO,
                                         "Failed to register CUPTI buffers: %s; no fault heat, ignoring.",
                                         result_string(cr));
        r = configure();
        if (r < 0)
                return r;
        cr = cupti.cuptiActivityEnable(CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER);
        if (cr != CUPTI_SUCCESS)
                return log_warning_errno(
                        EIO, "Failed to enable CUPTI unified-memory counters: %s; no fault heat, ignoring.",
                        result_string(cr));
        __atomic_store_n(&cp->loaded, true, __ATOMIC_RELEASE);
        log_debug("CUPTI unified-memory counters on, records every %u ms.", CUPTI_FLUSH_MS);
        return 0;
}

/* cupti_start()'s work, once.  CUPTI is set up on the calling thread, by
 * the first capture before its cudaMallocManaged (under the shim's announce
 * lock: called once at a time): on the H200, with the setup moved to the
 * sampler thread, no record arrived for managed memory allocated while it
 * ran (the counters' cost stayed). */
static int start_sampler(void) {
        struct shim_cupti *cp = &kvt_shim()->cupti;
        const struct kvt_cudart *rt = real_cudart();
        int r;

        /* The runtime up first (cudaFree(NULL) initializes it): its exit-time
         * teardown is then registered before the atexit handler below, and
         * runs after it. */
        if (rt)
                (void)rt->cudaFree(NULL);
        r = setup();
        if (r < 0)
                return r;
        cp->sampler_running = true;
        r = kvt_thread_create(&cp->sampler, NULL, sampler_main, NULL);
        if (r < 0) {
                cp->sampler_running = false;
                return log_warning_errno(r, "Failed to start the CUPTI sampler: %s, ignoring.",
                                         strerror(-r));
        }
        pthread_detach(cp->sampler);
        if (atexit(cupti_stop) != 0)
                log_warning("Failed to register the CUPTI sampler's exit handler, ignoring.");
        return 0;
}

bool cupti_started(void) {
        return __atomic_load_n(&kvt_shim()->cupti.setup_done, __ATOMIC_ACQUIRE);
}

int cupti_start(void) {
        struct shim_cupti *cp = &kvt_shim()->cupti;
        int r;

        if (cp->started)
                return 0;
        cp->started = true;
        r = start_sampler();
        __atomic_store_n(&cp->setup_done, true, __ATOMIC_RELEASE);
        return r;
}

void cupti_dump_stats(const char *path) {
        struct shim_cupti *cp = &kvt_shim()->cupti;
        static const char *const names[KVT_CUPTI_UM_KINDS] = {"unknown",    "htod",       "dtoh",
                                                              "cpu_fault",  "gpu_fault",  "thrashing",
                                                              "throttling", "remote_map", "dtod"};
        struct launch_stats l;
        struct cupti_stats s;
        FILE *f;

        /* Flushed here only while the sampler runs: at exit cupti_stop
         * has flushed, and later CUDA may be gone. */
        if (__atomic_load_n(&cp->loaded, __ATOMIC_ACQUIRE) &&
            !__atomic_load_n(&cp->stopping, __ATOMIC_ACQUIRE))
                cupti.cuptiActivityFlushAll(1); /* CUPTI_ACTIVITY_FLAG_FLUSH_FORCED */
        cupti_get_stats(&s);
        launch_get_stats(&l);
        f = fopen(path, "ae");
        if (!f)
                return;
        fprintf(f,
                "{\"cupti_loaded\": %s, \"flush_ms\": %u, \"enabled_ms\": %llu, "
                "\"buffers\": %llu, \"dropped\": %llu, \"other_records\": %llu",
                s.loaded ? "true" : "false", CUPTI_FLUSH_MS,
                (unsigned long long)(s.enabled_ns / 1000000), (unsigned long long)s.buffers,
                (unsigned long long)s.dropped, (unsigned long long)s.other_records);
        for (int k = 1; k < KVT_CUPTI_UM_KINDS; k++)
                fprintf(f, ", \"%s\": %llu, \"%s_attributed\": %llu", names[k],
                        (unsigned long long)s.records[k], names[k], (unsigned long long)s.attributed[k]);
        fprintf(f,
                ", \"launches\": %llu, \"launches_scanned\": %llu, \"launches_no_layout\": %llu, "
                "\"functions\": %llu, \"functions_unknown\": %llu, \"launch_pointers\": %llu",
                (unsigned long long)l.launches, (unsigned long long)l.scanned,
                (unsigned long long)l.no_layout, (unsigned long long)l.functions,
                (unsigned long long)l.functions_unknown, (unsigned long long)l.pointers);
        fprintf(f, ", \"paced_launches\": %llu, \"paced_wait_ms\": %llu, \"paced_sleep_ms\": %llu",
                (unsigned long long)l.paced, (unsigned long long)(l.paced_wait_ns / 1000000),
                (unsigned long long)(l.paced_sleep_ns / 1000000));
        fprintf(f, ", \"heat_touches\": %llu}\n", (unsigned long long)heat_touch_count());
        fclose(f);
}
