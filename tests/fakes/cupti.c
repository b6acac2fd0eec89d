/* SPDX-License-Identifier: MIT */

/*
 * Fake libcupti.so.13: the activity API for unified-memory counters, with
 * CUPTI's ABI (shim/cupti-abi.h, checked against the real headers).  The
 * fake CUDA model reports page faults and migrations through
 * fakecuda_set_um_hook(); each becomes a CUpti_ActivityUnifiedMemoryCounter3
 * record in a buffer the client supplied, handed back on
 * cuptiActivityFlushAll() (full buffers wait for the next flush; past
 * MAX_PENDING of them records are dropped, as CUPTI drops them, and
 * counted for cuptiActivityGetNumDroppedRecords(), which resets the count
 * as CUPTI's does; one queue stands for every context and stream).
 *
 * FAKECUPTI_STATS=PATH: at exit, one JSON line with the records made and
 * dropped, for tests.  FAKECUPTI_BUFFER_RECORDS=N: at most N records a
 * buffer, and FAKECUPTI_PENDING=N: at most N full buffers waiting for a
 * flush (0 - MAX_PENDING), so that a test can make records be dropped.
 */

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cupti-abi.h"
#include "fakecuda.h"

#define KVT_CUPTI_PROTO(ret, name, args) ret name args;
KVT_CUPTI_FUNCS(KVT_CUPTI_PROTO)
#undef KVT_CUPTI_PROTO

#define REC_BYTES   sizeof(CUpti_ActivityUnifiedMemoryCounter3)
#define MAX_DEVICES 16
#define MAX_PENDING 16

struct buf {
        uint8_t *data;
        size_t size, used;
};

static struct {
        pthread_mutex_t lock;
        CUpti_BuffersCallbackRequestFunc requested;
        CUpti_BuffersCallbackCompleteFunc completed;
        bool enabled;
        bool hooked;
        uint32_t kinds[MAX_DEVICES]; /* bit k: counter kind k configured */
        struct buf cur;
        struct buf pending[MAX_PENDING];
        size_t n_pending;
        uint64_t made, dropped;
        uint64_t dropped_told;       /* by cuptiActivityGetNumDroppedRecords() */
        size_t max_pending;          /* FAKECUPTI_PENDING */
        size_t max_records;          /* FAKECUPTI_BUFFER_RECORDS; 0: as the buffer holds */
        bool forked; /* this is a fork child of the process that registered */
} c = {.lock = PTHREAD_MUTEX_INITIALIZER, .max_pending = MAX_PENDING};

static void __attribute__((constructor)) fakecupti_limits(void) {
        const char *e;

        if ((e = getenv("FAKECUPTI_PENDING")) && *e) {
                unsigned long n = strtoul(e, NULL, 10);

                c.max_pending = n < MAX_PENDING ? n : MAX_PENDING;
        }
        if ((e = getenv("FAKECUPTI_BUFFER_RECORDS")) && *e)
                c.max_records = strtoul(e, NULL, 10);
}

static void atfork_child(void) {
        pthread_mutex_init(&c.lock, NULL);
        c.forked = true;
}

static uint64_t now_ns(void) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Room for one record in the current buffer, asking the client for one;
 * NULL when records must be dropped. */
static uint8_t *slot_locked(void) {
        if (c.cur.data && (c.cur.used + REC_BYTES > c.cur.size ||
                           (c.max_records && c.cur.used >= c.max_records * REC_BYTES))) {
                if (c.n_pending >= c.max_pending)
                        return NULL;
                c.pending[c.n_pending++] = c.cur;
                c.cur = (struct buf){0};
        }
        if (!c.cur.data) {
                size_t max_records = 0;

                c.requested(&c.cur.data, &c.cur.size, &max_records);
                c.cur.used = 0;
                if (!c.cur.data || c.cur.size < REC_BYTES) {
                        c.cur = (struct buf){0};
                        return NULL;
                }
        }
        c.cur.used += REC_BYTES;
        return c.cur.data + c.cur.used - REC_BYTES;
}

static void um_hook(int kind, uintptr_t addr, uint64_t value, int dev) {
        CUpti_ActivityUnifiedMemoryCounter3 r = {
                .kind = CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER,
                .counterKind = kind,
                .value = value,
                .address = addr,
                .srcId = kind == 2 ? (uint32_t)dev : 0,
                .dstId = kind == 1 ? (uint32_t)dev : 0,
        };
        if (dev < 0 || dev >= MAX_DEVICES)
                return;
        pthread_mutex_lock(&c.lock);
        if (c.enabled && (c.kinds[dev] & (1u << kind))) {
                uint8_t *p;

                r.start = r.end = now_ns();
                p = slot_locked();
                if (p) {
                        memcpy(p, &r, sizeof(r));
                        c.made++;
                } else
                        c.dropped++;
        }
        pthread_mutex_unlock(&c.lock);
}

CUptiResult cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc funcBufferRequested,
                                           CUpti_BuffersCallbackCompleteFunc funcBufferCompleted) {
        if (!funcBufferRequested || !funcBufferCompleted)
                return CUPTI_ERROR_INVALID_PARAMETER;
        pthread_mutex_lock(&c.lock);
        if (!c.requested)
                pthread_atfork(NULL, NULL, atfork_child);
        c.requested = funcBufferRequested;
        c.completed = funcBufferCompleted;
        pthread_mutex_unlock(&c.lock);
        return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityConfigureUnifiedMemoryCounter(CUpti_ActivityUnifiedMemoryCounterConfig *config,
                                                       uint32_t count) {
        if (!config || count == 0)
                return CUPTI_ERROR_INVALID_PARAMETER;
        for (uint32_t i = 0; i < count; i++)
                if (config[i].deviceId >= MAX_DEVICES || config[i].kind <= 0 ||
                    config[i].kind >= KVT_CUPTI_UM_KINDS ||
                    config[i].scope != CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_SCOPE_PROCESS_SINGLE_DEVICE)
                        return CUPTI_ERROR_INVALID_PARAMETER;
        pthread_mutex_lock(&c.lock);
        for (uint32_t i = 0; i < count; i++) {
                uint32_t bit = 1u << config[i].kind;
                c.kinds[config[i].deviceId] = config[i].enable ? c.kinds[config[i].deviceId] | bit
                                                               : c.kinds[config[i].deviceId] & ~bit;
        }
        pthread_mutex_unlock(&c.lock);
        return CUPTI_SUCCESS;
}

/* CUPTI's activity API used after the runtime's teardown, or in a fork
 * child of the process that set it up (its worker thread is not there, its
 * locks may have been copied held): undefined with the real libraries (an
 * H200 run of the shim died with SIGSEGV at exit the first way), so the
 * fake stops the process loudly. */
static void check_alive(const char *fn) {
        if (c.forked) {
                fprintf(stderr, "fakecupti: %s called in a fork child\n", fn);
                abort();
        }
        if (!fakecuda_torn_down())
                return;
        fprintf(stderr, "fakecupti: %s called after the CUDA runtime's teardown\n", fn);
        abort();
}

CUptiResult cuptiActivityEnable(CUpti_ActivityKind kind) {
        check_alive(__func__);
        if (kind != CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER)
                return CUPTI_ERROR_INVALID_KIND;
        pthread_mutex_lock(&c.lock);
        if (!c.requested) {
                pthread_mutex_unlock(&c.lock);
                return CUPTI_ERROR_NOT_INITIALIZED;
        }
        c.enabled = true;
        if (!c.hooked)
                fakecuda_set_um_hook(um_hook);
        c.hooked = true;
        pthread_mutex_unlock(&c.lock);
        return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityDisable(CUpti_ActivityKind kind) {
        check_alive(__func__);
        if (kind != CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER)
                return CUPTI_ERROR_INVALID_KIND;
        pthread_mutex_lock(&c.lock);
        c.enabled = false;
        pthread_mutex_unlock(&c.lock);
        return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityFlushAll(uint32_t flag) {
        struct buf out[MAX_PENDING + 1];
        CUpti_BuffersCallbackCompleteFunc done;
        size_t n;

        check_alive(__func__);
        pthread_mutex_lock(&c.lock);
        memcpy(out, c.pending, c.n_pending * sizeof(*out));
        n = c.n_pending;
        c.n_pending = 0;
        if (c.cur.data)
                out[n++] = c.cur;
        c.cur = (struct buf){0};
        done = c.completed;
        pthread_mutex_unlock(&c.lock);
        for (size_t i = 0; i < n; i++)
                done(NULL, 0, out[i].data, out[i].size, out[i].used);
        return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityGetNextRecord(uint8_t *buffer, size_t validBufferSizeBytes,
                                       CUpti_Activity **record) {
        uint8_t *next;

        if (!buffer || !record)
                return CUPTI_ERROR_INVALID_PARAMETER;
        next = *record ? (uint8_t *)*record + REC_BYTES : buffer;
        if (next + REC_BYTES > buffer + validBufferSizeBytes)
                return CUPTI_ERROR_MAX_LIMIT_REACHED;
        *record = (CUpti_Activity *)next;
        return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityGetNumDroppedRecords(CUcontext context, uint32_t streamId, size_t *dropped) {
        (void)context, (void)streamId;
        if (!dropped)
                return CUPTI_ERROR_INVALID_PARAMETER;
        pthread_mutex_lock(&c.lock);
        *dropped = (size_t)(c.dropped - c.dropped_told);
        c.dropped_told = c.dropped;
        pthread_mutex_unlock(&c.lock);
        return CUPTI_SUCCESS;
}

CUptiResult cuptiGetResultString(CUptiResult result, const char **str) {
        if (!str)
                return CUPTI_ERROR_INVALID_PARAMETER;
        *str = result == CUPTI_SUCCESS ? "CUPTI_SUCCESS" : "CUPTI_ERROR (fake)";
        return CUPTI_SUCCESS;
}

static void __attribute__((destructor)) fakecupti_dump_stats(void) {
        const char *path = getenv("FAKECUPTI_STATS");
        FILE *f;

        if (!path || !(f = fopen(path, "a")))
                return;
        fprintf(f, "{\"made\": %llu, \"dropped\": %llu}\n", (unsigned long long)c.made,
                (unsigned long long)c.dropped);
        fclose(f);
}
