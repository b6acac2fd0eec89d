/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "state.h"
#include "trace.h"
#include "util.h"

/* Records buffered between writer passes: 64 Ki x 24 bytes = 1.5 MiB. */
#define RING_RECORDS 65536u
/* The writer wakes this often, or when the ring is half full. */
#define WRITER_PERIOD_MS 20

enum { REC_ACCESS, REC_FREE };

struct record {
        uint64_t time_ns;
        uint32_t region_id;
        uint32_t region_chunks;
        uint32_t first;
        uint32_t type;
};

struct trace {
        pthread_mutex_t lock;
        pthread_cond_t wake;
        struct record *ring;
        uint32_t ring_n[RING_RECORDS]; /* chunks of each access record */
        size_t head, count;            /* ring[head .. head+count) */
        uint64_t dropped;              /* since the last writer pass */
        uint64_t last_ns;              /* times are clamped to be non-decreasing */
        bool stopping;
        pthread_t thread;
        FILE *f;
        /* The writer's only: regions already declared with R, and what it
         * took off the ring to write. */
        uint32_t *declared;
        size_t n_declared, cap_declared;
        struct record batch[RING_RECORDS];
        uint32_t batch_n[RING_RECORDS];
};

static bool declared_has(struct trace *t, uint32_t id) {
        for (size_t i = 0; i < t->n_declared; i++)
                if (t->declared[i] == id)
                        return true;
        return false;
}

static void declared_add(struct trace *t, uint32_t id) {
        if (t->n_declared == t->cap_declared) {
                size_t cap = t->cap_declared ? t->cap_declared * 2 : 64;
                uint32_t *a = realloc(t->declared, cap * sizeof(*a));
                if (!a)
                        return; /* declared again on the next access: harmless */
                t->declared = a;
                t->cap_declared = cap;
        }
        t->declared[t->n_declared++] = id;
}

static void declared_del(struct trace *t, uint32_t id) {
        for (size_t i = 0; i < t->n_declared; i++)
                if (t->declared[i] == id) {
                        t->declared[i] = t->declared[--t->n_declared];
                        return;
                }
}

static void write_record(struct trace *t, const struct record *r, uint32_t n) {
        if (r->type == REC_FREE) {
                if (!declared_has(t, r->region_id))
                        return; /* never accessed: nothing to free in the trace */
                fprintf(t->f, "F %llu %u\n", (unsigned long long)r->time_ns, r->region_id);
                declared_del(t, r->region_id);
                return;
        }
        if (!declared_has(t, r->region_id)) {
                fprintf(t->f, "R %u %u\n", r->region_id, r->region_chunks);
                declared_add(t, r->region_id);
        }
        fprintf(t->f, "A %llu %u %u %u\n", (unsigned long long)r->time_ns, r->region_id, r->first, n);
}

/* Takes what is buffered (lock held by the caller is dropped while writing). */
static void drain_locked(struct trace *t) {
        size_t n = t->count;
        uint64_t dropped = t->dropped;

        for (size_t i = 0; i < n; i++) {
                size_t k = (t->head + i) % RING_RECORDS;
                t->batch[i] = t->ring[k];
                t->batch_n[i] = t->ring_n[k];
        }
        t->head = (t->head + n) % RING_RECORDS;
        t->count = 0;
        t->dropped = 0;
        pthread_mutex_unlock(&t->lock);
        if (dropped)
                fprintf(t->f, "# dropped %llu records: the writer fell behind\n",
                        (unsigned long long)dropped);
        for (size_t i = 0; i < n; i++)
                write_record(t, &t->batch[i], t->batch_n[i]);
        fflush(t->f);
        pthread_mutex_lock(&t->lock);
}

static void *writer(void *arg) {
        struct trace *t = arg;

        pthread_mutex_lock(&t->lock);
        while (!t->stopping) {
                struct timespec until;

                realtime_after_ns(&until, WRITER_PERIOD_MS * 1000000ull);
                if (t->count < RING_RECORDS / 2)
                        pthread_cond_timedwait(&t->wake, &t->lock, &until);
                if (t->count || t->dropped)
                        drain_locked(t);
        }
        if (t->count || t->dropped)
                drain_locked(t);
        pthread_mutex_unlock(&t->lock);
        return NULL;
}

int trace_start(const char *path) {
        struct trace *t = calloc(1, sizeof(*t));
        int r;

        if (!t)
                return -ENOMEM;
        t->ring = calloc(RING_RECORDS, sizeof(*t->ring));
        t->f = fopen(path, "we");
        if (!t->ring || !t->f) {
                r = t->f ? -ENOMEM : -errno;
                if (t->f)
                        fclose(t->f);
                free(t->ring);
                free(t);
                return r;
        }
        pthread_mutex_init(&t->lock, NULL);
        pthread_cond_init(&t->wake, NULL);
        fprintf(t->f,
                "kvtier-trace 1\n# recorded by libkvtier.so; times CLOCK_MONOTONIC ns; chunk %u bytes\n",
                2u << 20);
        /* The writer takes no signal meant for the application. */
        r = kvt_thread_create(&t->thread, NULL, writer, t);
        if (r < 0) {
                fclose(t->f);
                free(t->ring);
                free(t);
                return r;
        }
        __atomic_store_n(&kvt_shim()->trace, t, __ATOMIC_RELEASE);
        return 0;
}

static void push(uint32_t type, uint32_t region_id, uint32_t region_chunks, uint32_t first, uint32_t n) {
        struct trace *t = __atomic_load_n(&kvt_shim()->trace, __ATOMIC_ACQUIRE);
        uint64_t now;
        size_t k;

        if (!t)
                return;
        now = now_ns();
        pthread_mutex_lock(&t->lock);
        if (t->stopping || t->count == RING_RECORDS) {
                t->dropped++;
                pthread_mutex_unlock(&t->lock);
                return;
        }
        now = MAX(now, t->last_ns);
        t->last_ns = now;
        k = (t->head + t->count++) % RING_RECORDS;
        t->ring[k] = (struct record){.time_ns = now,
                                     .region_id = region_id,
                                     .region_chunks = region_chunks,
                                     .first = first,
                                     .type = type};
        t->ring_n[k] = n;
        if (t->count == RING_RECORDS / 2)
                pthread_cond_signal(&t->wake);
        pthread_mutex_unlock(&t->lock);
}

void trace_access(uint32_t region_id, uint32_t region_chunks, uint32_t first, uint32_t n) {
        push(REC_ACCESS, region_id, region_chunks, first, n);
}

void trace_free(uint32_t region_id) {
        push(REC_FREE, region_id, 0, 0, 0);
}

void trace_stop(void) {
        struct trace *t = __atomic_exchange_n(&kvt_shim()->trace, NULL, __ATOMIC_ACQ_REL);

        if (!t)
                return;
        pthread_mutex_lock(&t->lock);
        t->stopping = true;
        pthread_cond_signal(&t->wake);
        pthread_mutex_unlock(&t->lock);
        pthread_join(t->thread, NULL);
        fclose(t->f);
        /* t itself stays: a hook racing with exit may still hold it. */
}

__attribute__((destructor)) static void trace_at_exit(void) {
        trace_stop();
}

void trace_atfork_child(void) {
        /* The writer thread did not come along; the file is the parent's. */
        __atomic_store_n(&kvt_shim()->trace, NULL, __ATOMIC_RELAXED);
}
