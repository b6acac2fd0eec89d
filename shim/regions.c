/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kvtier.h"
#include "protocol.h"
#include "regions.h"

/*
 * The table is a small array kept sorted by base: lookups are a binary
 * search, inserts and removals a memmove.  Captured regions are large
 * (64 MiB and up), so there are at most thousands of them.
 */
struct slot {
        struct shim_region r;
        unsigned busy;     /* orders running on it */
        uint8_t *standing; /* REGION_STANDING_* per chunk; NULL until the first HOT or PINNED */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t idle = PTHREAD_COND_INITIALIZER;
static struct slot *slots;
static size_t n_slots, cap_slots;
static uint32_t next_id = 1;

/* Index of the first slot with base > p. */
static size_t upper_bound(uintptr_t p) {
        size_t lo = 0, hi = n_slots;

        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                if (slots[mid].r.base <= p)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return lo;
}

static struct slot *find_containing(uintptr_t p) {
        size_t i = upper_bound(p);

        if (i == 0)
                return NULL;
        if (p - slots[i - 1].r.base < slots[i - 1].r.span_bytes)
                return &slots[i - 1];
        return NULL;
}

static struct slot *find_id(uint32_t id) {
        for (size_t i = 0; i < n_slots; i++)
                if (slots[i].r.id == id)
                        return &slots[i];
        return NULL;
}

void regions_add_msg(const struct shim_region *r, struct kvt_region_add *ret) {
        *ret = (struct kvt_region_add){
                .region_id = r->id,
                .device = r->device,
                .base = r->base,
                .size_bytes = r->span_bytes,
                .api = r->api,
                .tier = r->start_vram ? KVT_TIER_VRAM : KVT_TIER_HOST,
                .rule = r->rule,
        };
}

int regions_add(struct shim_region *r) {
        size_t i;

        pthread_mutex_lock(&lock);
        if (n_slots == cap_slots) {
                size_t cap = cap_slots ? cap_slots * 2 : 16;
                struct slot *s = realloc(slots, cap * sizeof(*s));
                if (!s) {
                        pthread_mutex_unlock(&lock);
                        return -ENOMEM;
                }
                slots = s;
                cap_slots = cap;
        }
        r->id = next_id++;
        i = upper_bound(r->base);
        memmove(&slots[i + 1], &slots[i], (n_slots - i) * sizeof(*slots));
        slots[i] = (struct slot){ .r = *r };
        n_slots++;
        pthread_mutex_unlock(&lock);
        return 0;
}

int regions_take(const void *ptr, struct shim_region *ret) {
        struct slot *s;

        pthread_mutex_lock(&lock);
        s = find_containing((uintptr_t)ptr);
        if (!s || s->r.base != (uintptr_t)ptr) {
                pthread_mutex_unlock(&lock);
                return -ENOENT;
        }
        while (s->busy) {
                uintptr_t base = s->r.base;
                pthread_cond_wait(&idle, &lock);
                s = find_containing(base); /* the array may have moved */
        }
        *ret = s->r;
        free(s->standing);
        memmove(s, s + 1, (size_t)(&slots[n_slots] - (s + 1)) * sizeof(*s));
        n_slots--;
        pthread_mutex_unlock(&lock);
        return 0;
}

int regions_lookup(const void *ptr, struct shim_region *ret) {
        struct slot *s;

        pthread_mutex_lock(&lock);
        s = find_containing((uintptr_t)ptr);
        if (s)
                *ret = s->r;
        pthread_mutex_unlock(&lock);
        return s ? 0 : -ENOENT;
}

int regions_acquire(uint32_t id, struct shim_region *ret) {
        struct slot *s;

        pthread_mutex_lock(&lock);
        s = find_id(id);
        if (s) {
                s->busy++;
                *ret = s->r;
        }
        pthread_mutex_unlock(&lock);
        return s ? 0 : -ENOENT;
}

int regions_acquire_unregistered(uint32_t after_id, struct shim_region *ret) {
        struct slot *best = NULL;

        pthread_mutex_lock(&lock);
        for (size_t i = 0; i < n_slots; i++)
                if (!slots[i].r.registered && !slots[i].r.inherited && slots[i].r.id > after_id &&
                    (!best || slots[i].r.id < best->r.id))
                        best = &slots[i];
        if (best) {
                best->busy++;
                *ret = best->r;
        }
        pthread_mutex_unlock(&lock);
        return best ? 0 : -ENOENT;
}

void regions_release(uint32_t id) {
        struct slot *s;

        pthread_mutex_lock(&lock);
        s = find_id(id);
        if (s && s->busy && --s->busy == 0)
                pthread_cond_broadcast(&idle);
        pthread_mutex_unlock(&lock);
}

int regions_note_hint(const void *ptr, uint32_t first, uint32_t n, int kind, struct shim_region *ret) {
        uint8_t set = kind == KVTIER_HINT_HOT      ? REGION_STANDING_HOT
                    : kind == KVTIER_HINT_PINNED   ? REGION_STANDING_PINNED
                                                   : 0;
        uint8_t clear = kind == KVTIER_HINT_COLD   ? REGION_STANDING_HOT
                      : kind == KVTIER_HINT_DONE   ? REGION_STANDING_HOT | REGION_STANDING_PINNED
                                                   : 0;
        struct slot *s;
        uint32_t chunks;
        int r = 0;

        pthread_mutex_lock(&lock);
        s = find_containing((uintptr_t)ptr);
        if (!s) {
                r = -ENOENT;
                goto out;
        }
        chunks = (uint32_t)(s->r.span_bytes >> KVT_CHUNK_SHIFT);
        if (first > chunks || n > chunks - first) {
                r = -EINVAL;
                goto out;
        }
        if (set && !s->standing && !(s->standing = calloc(chunks, 1))) {
                r = -ENOMEM;
                goto out;
        }
        for (uint32_t i = first; s->standing && i < first + n; i++)
                s->standing[i] = (uint8_t)((s->standing[i] & ~clear) | set);
        *ret = s->r;
out:
        pthread_mutex_unlock(&lock);
        return r;
}

int regions_standing_copy(uint32_t id, uint8_t **ret, uint32_t *ret_chunks) {
        struct slot *s;
        int r = 0;

        *ret = NULL;
        *ret_chunks = 0;
        pthread_mutex_lock(&lock);
        s = find_id(id);
        if (!s)
                r = -ENOENT;
        else if (s->standing) {
                uint32_t chunks = (uint32_t)(s->r.span_bytes >> KVT_CHUNK_SHIFT);

                *ret = malloc(chunks);
                if (*ret) {
                        memcpy(*ret, s->standing, chunks);
                        *ret_chunks = chunks;
                } else
                        r = -ENOMEM;
        }
        pthread_mutex_unlock(&lock);
        return r;
}

void regions_mark_registered(uint32_t id) {
        struct slot *s;

        pthread_mutex_lock(&lock);
        s = find_id(id);
        if (s)
                s->r.registered = true;
        pthread_mutex_unlock(&lock);
}

void regions_forget_registration(void) {
        pthread_mutex_lock(&lock);
        for (size_t i = 0; i < n_slots; i++)
                slots[i].r.registered = false;
        pthread_mutex_unlock(&lock);
}

void regions_count(size_t *ret_n, uint64_t *ret_bytes) {
        uint64_t bytes = 0;
        size_t n = 0;

        pthread_mutex_lock(&lock);
        for (size_t i = 0; i < n_slots; i++)
                if (!slots[i].r.inherited) {
                        bytes += slots[i].r.span_bytes;
                        n++;
                }
        *ret_n = n;
        *ret_bytes = bytes;
        pthread_mutex_unlock(&lock);
}

void regions_atfork_child(void) {
        pthread_mutex_init(&lock, NULL);
        pthread_cond_init(&idle, NULL);
        for (size_t i = 0; i < n_slots; i++) {
                slots[i].r.registered = false;
                slots[i].r.inherited = true; /* the child never speaks for them */
                slots[i].busy = 0;           /* the parent's mover did not come along */
        }
}
