/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <stdlib.h>

#include "protocol.h"
#include "sim.h"

#define NEVER UINT64_MAX

struct heap_entry {
        uint64_t next; /* position of the chunk's next access; NEVER if none */
        uint64_t chunk;
};

/* Max-heap on next, with stale entries skipped on pop (lazy deletion). */
struct heap {
        struct heap_entry *a;
        size_t n, cap;
};

static int heap_push(struct heap *h, struct heap_entry e) {
        size_t i;

        if (h->n == h->cap) {
                size_t cap = h->cap ? h->cap * 2 : 1024;
                struct heap_entry *a = realloc(h->a, cap * sizeof(*a));

                if (!a)
                        return -ENOMEM;
                h->a = a;
                h->cap = cap;
        }
        for (i = h->n++; i > 0 && h->a[(i - 1) / 2].next < e.next; i = (i - 1) / 2)
                h->a[i] = h->a[(i - 1) / 2];
        h->a[i] = e;
        return 0;
}

static void heap_pop(struct heap *h) {
        struct heap_entry last = h->a[--h->n];
        size_t i = 0;

        for (;;) {
                size_t c = 2 * i + 1;

                if (c >= h->n)
                        break;
                if (c + 1 < h->n && h->a[c + 1].next > h->a[c].next)
                        c++;
                if (h->a[c].next <= last.next)
                        break;
                h->a[i] = h->a[c];
                i = c;
        }
        if (h->n)
                h->a[i] = last;
}

/* Drops stale tops: entries whose chunk left the cache or has a newer next. */
static void heap_clean(struct heap *h, const uint64_t *cur_next, const uint8_t *cached) {
        while (h->n && (!cached[h->a[0].chunk] || cur_next[h->a[0].chunk] != h->a[0].next))
                heap_pop(h);
}

/* Global chunk id of each declared region's chunk 0. */
static uint64_t *region_bases(const struct trace *t) {
        uint64_t *base = malloc((t->n_regions + 1) * sizeof(*base));

        if (!base)
                return NULL;
        base[0] = 0;
        for (size_t r = 0; r < t->n_regions; r++)
                base[r + 1] = base[r] + t->region_chunks[r];
        return base;
}

/* next[i]: position of the next access to the chunk of access i, or NEVER. */
static uint64_t *next_uses(const struct trace *t, const uint64_t *base) {
        uint64_t *next = malloc((t->n_chunk_accesses ? t->n_chunk_accesses : 1) * sizeof(*next));
        uint64_t *seen = malloc((t->total_chunks ? t->total_chunks : 1) * sizeof(*seen));
        uint64_t pos = t->n_chunk_accesses;

        if (!next || !seen) {
                free(next);
                free(seen);
                return NULL;
        }
        for (uint64_t g = 0; g < t->total_chunks; g++)
                seen[g] = NEVER;
        for (size_t e = t->n_events; e-- > 0;) {
                const struct trace_event *ev = &t->events[e];

                if (ev->op != TRACE_ACCESS)
                        continue;
                for (uint32_t k = ev->n_chunks; k-- > 0;) {
                        uint64_t g = base[ev->region] + ev->first_chunk + k;

                        next[--pos] = seen[g];
                        seen[g] = pos;
                }
        }
        free(seen);
        return next;
}

static int opt_replay(const struct trace *t, const uint64_t *base, const uint64_t *next, uint64_t cap,
                      struct sim_result *res) {
        uint64_t *cur = calloc(t->total_chunks ? t->total_chunks : 1, sizeof(*cur));
        uint8_t *cached = calloc(t->total_chunks ? t->total_chunks : 1, 1);
        struct heap h = {0};
        uint64_t pos = 0, size = 0;
        int r = -ENOMEM;

        if (!cur || !cached)
                goto out;
        for (size_t e = 0; e < t->n_events; e++) {
                const struct trace_event *ev = &t->events[e];

                if (ev->op != TRACE_ACCESS)
                        continue;
                for (uint32_t k = 0; k < ev->n_chunks; k++, pos++) {
                        uint64_t g = base[ev->region] + ev->first_chunk + k;

                        res->accesses++;
                        if (cached[g]) {
                                res->hits++;
                        } else {
                                if (size >= cap) {
                                        heap_clean(&h, cur, cached);
                                        if (cap == 0 || h.n == 0 || h.a[0].next <= next[pos])
                                                continue; /* bypass: the newcomer is needed last */
                                        cached[h.a[0].chunk] = 0;
                                        heap_pop(&h);
                                        size--;
                                }
                                cached[g] = 1;
                                size++;
                                res->bytes_to_vram += KVT_CHUNK_BYTES;
                        }
                        cur[g] = next[pos];
                        if (heap_push(&h, (struct heap_entry){.next = next[pos], .chunk = g}) < 0)
                                goto out;
                }
        }
        r = 0;
out:
        free(cur);
        free(cached);
        free(h.a);
        return r;
}

int sim_run_opt(const struct trace *t, const struct sim_config *cfg, struct sim_result *ret) {
        uint64_t *base = region_bases(t), *next = NULL;
        int r = -ENOMEM;

        *ret = (struct sim_result){.consistent = true};
        if (!base)
                return -ENOMEM;
        next = next_uses(t, base);
        if (next)
                r = opt_replay(t, base, next, cfg->budget_bytes / KVT_CHUNK_BYTES, ret);
        if (r == 0)
                ret->stall_ns = (uint64_t)((double)(ret->accesses - ret->hits) * KVT_CHUNK_BYTES /
                                           cfg->mapped_gbps);
        free(base);
        free(next);
        return r;
}
