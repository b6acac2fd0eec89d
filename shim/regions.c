/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kvtier.h"
#include "protocol.h"
#include "regions.h"
#include "state.h"
#include "util.h"

/*
 * The table is a small array kept sorted by base: lookups are a binary
 * search, inserts and removals a memmove.  Captured regions are large
 * (64 MiB and up), so there are at most thousands of them.
 */
struct region_slot {
        struct shim_region r;
        unsigned busy;     /* orders running on it */
        unsigned draining; /* spills waiting for busy to drop to 0 */
        uint8_t *standing; /* REGION_STANDING_* per chunk; NULL until the first HOT, PINNED or spill */
        uint8_t *advised;  /* REGION_ADVISED_* per chunk; NULL: each chunk has r.advised */
};

/* Index of the first slot with base > p. */
static size_t upper_bound(uintptr_t p) {
        struct shim_regions *t = &kvt_shim()->regions;
        size_t lo = 0, hi = t->n_slots;

        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                if (t->slots[mid].r.base <= p)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return lo;
}

/* The captured region containing p (never a mapping). */
static struct region_slot *find_containing(uintptr_t p) {
        struct shim_regions *t = &kvt_shim()->regions;
        size_t i = upper_bound(p);

        if (i == 0 || t->slots[i - 1].r.untiered)
                return NULL;
        if (p - t->slots[i - 1].r.base < t->slots[i - 1].r.span_bytes)
                return &t->slots[i - 1];
        return NULL;
}

/* The region or mapping of id. */
static struct region_slot *find_id(uint32_t id) {
        struct shim_regions *t = &kvt_shim()->regions;

        for (size_t i = 0; i < t->n_slots; i++)
                if (t->slots[i].r.id == id)
                        return &t->slots[i];
        return NULL;
}

/* Takes s out of the array.  Under lock; takes the view's. */
static void slot_remove(struct region_slot *s) {
        struct shim_regions *t = &kvt_shim()->regions;

        free(s->standing);
        free(s->advised);
        pthread_rwlock_wrlock(&t->view_lock);
        memmove(s, s + 1, (size_t)(&t->slots[t->n_slots] - (s + 1)) * sizeof(*s));
        t->n_slots--;
        pthread_rwlock_unlock(&t->view_lock);
}

void regions_add_msg(const struct shim_region *r, struct kvt_region_add *ret) {
        if (r->untiered) {
                uintptr_t base = r->base & ~(uintptr_t)(KVT_CHUNK_BYTES - 1);

                *ret = (struct kvt_region_add){
                        .region_id = r->id,
                        .device = r->device,
                        .base = base,
                        .size_bytes = MIN(ALIGN_UP(r->base + r->size_bytes, KVT_CHUNK_BYTES) - base,
                                          KVT_MAX_REGION_BYTES),
                        .api = KVT_API_CU_MEM_MAP,
                        .tier = KVT_TIER_NONE,
                        .rule = KVT_RULE_VMM,
                        .flags = KVT_REGION_UNTIERED,
                };
                return;
        }
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
        struct shim_regions *t = &kvt_shim()->regions;
        int ret = 0;
        size_t i;

        pthread_mutex_lock(&t->lock);
        pthread_rwlock_wrlock(&t->view_lock);
        if (t->n_slots == t->cap_slots) {
                size_t cap = t->cap_slots ? t->cap_slots * 2 : 16;
                struct region_slot *s = realloc(t->slots, cap * sizeof(*s));

                if (!s) {
                        ret = -ENOMEM;
                        goto out;
                }
                t->slots = s;
                t->cap_slots = cap;
        }
        r->id = t->next_id++;
        r->heat = false; /* regions_set_heat() gives it counters */
        i = upper_bound(r->base);
        memmove(&t->slots[i + 1], &t->slots[i], (t->n_slots - i) * sizeof(*t->slots));
        t->slots[i] = (struct region_slot){.r = *r};
        t->n_slots++;
        if (!r->untiered) {
                __atomic_store_n(&t->span_lo, MIN(t->span_lo, r->base), __ATOMIC_RELAXED);
                __atomic_store_n(&t->span_hi, MAX(t->span_hi, r->base + r->span_bytes), __ATOMIC_RELAXED);
        }
out:
        pthread_rwlock_unlock(&t->view_lock);
        pthread_mutex_unlock(&t->lock);
        return ret;
}

void regions_set_heat(uint32_t id, uint64_t offset, uint32_t slot) {
        struct shim_regions *t = &kvt_shim()->regions;
        struct region_slot *s;

        pthread_mutex_lock(&t->lock);
        pthread_rwlock_wrlock(&t->view_lock);
        s = find_id(id);
        if (s && !s->r.untiered) {
                s->r.heat_offset = offset;
                s->r.heat_slot = slot;
                s->r.heat = true;
        }
        pthread_rwlock_unlock(&t->view_lock);
        pthread_mutex_unlock(&t->lock);
}

void regions_view_lock(void) {
        pthread_rwlock_rdlock(&kvt_shim()->regions.view_lock);
}

void regions_view_unlock(void) {
        pthread_rwlock_unlock(&kvt_shim()->regions.view_lock);
}

const struct shim_region *regions_view_find(uintptr_t addr) {
        struct region_slot *s = find_containing(addr);

        return s ? &s->r : NULL;
}

bool regions_maybe_captured(uintptr_t addr) {
        struct shim_regions *t = &kvt_shim()->regions;

        return addr >= __atomic_load_n(&t->span_lo, __ATOMIC_RELAXED) &&
               addr < __atomic_load_n(&t->span_hi, __ATOMIC_RELAXED);
}

bool regions_maybe_captured_range(uintptr_t *lo, uintptr_t *hi) {
        struct shim_regions *t = &kvt_shim()->regions;
        uintptr_t span_lo = __atomic_load_n(&t->span_lo, __ATOMIC_RELAXED),
                  span_hi = __atomic_load_n(&t->span_hi, __ATOMIC_RELAXED);

        *lo = *lo > span_lo ? *lo : span_lo;
        *hi = *hi < span_hi ? *hi : span_hi;
        return *lo < *hi;
}

int regions_take(const void *ptr, struct shim_region *ret) {
        struct shim_regions *t = &kvt_shim()->regions;
        struct region_slot *s;

        pthread_mutex_lock(&t->lock);
        s = find_containing((uintptr_t)ptr);
        if (!s || s->r.base != (uintptr_t)ptr) {
                pthread_mutex_unlock(&t->lock);
                return -ENOENT;
        }
        while (s->busy) {
                pthread_cond_wait(&t->idle, &t->lock);
                /* the array may have moved, and another thread may have
                 * taken the region meanwhile (a second free of it: an
                 * error, as CUDA's) */
                s = find_containing((uintptr_t)ptr);
                if (!s || s->r.base != (uintptr_t)ptr) {
                        pthread_mutex_unlock(&t->lock);
                        return -ENOENT;
                }
        }
        *ret = s->r;
        slot_remove(s);
        pthread_mutex_unlock(&t->lock);
        return 0;
}

int regions_take_untiered(uintptr_t ptr, size_t len, struct shim_region *ret) {
        struct shim_regions *t = &kvt_shim()->regions;
        int r = -ENOENT;

        pthread_mutex_lock(&t->lock);
        /* from the first slot at or after ptr (upper_bound() gives the
         * first past its argument) */
        for (size_t i = upper_bound(ptr - (ptr > 0)); i < t->n_slots && t->slots[i].r.base - ptr < len; i++)
                if (t->slots[i].r.untiered && t->slots[i].r.base >= ptr) {
                        *ret = t->slots[i].r;
                        slot_remove(&t->slots[i]);
                        r = 0;
                        break;
                }
        pthread_mutex_unlock(&t->lock);
        return r;
}

int regions_lookup(const void *ptr, struct shim_region *ret) {
        struct shim_regions *t = &kvt_shim()->regions;
        struct region_slot *s;

        pthread_mutex_lock(&t->lock);
        s = find_containing((uintptr_t)ptr);
        if (s)
                *ret = s->r;
        pthread_mutex_unlock(&t->lock);
        return s ? 0 : -ENOENT;
}

static bool slot_spilled(const struct region_slot *s, uint32_t first, uint32_t n) {
        uint32_t chunks = (uint32_t)(s->r.span_bytes >> KVT_CHUNK_SHIFT);

        for (uint32_t i = first; s->standing && i < first + n && i < chunks; i++)
                if (s->standing[i] & REGION_STANDING_SPILLED)
                        return true;
        return false;
}

int regions_acquire(uint32_t id, uint32_t first, uint32_t n, struct shim_region *ret) {
        struct shim_regions *t = &kvt_shim()->regions;
        struct region_slot *s;
        int r = -ENOENT;

        pthread_mutex_lock(&t->lock);
        s = find_id(id);
        if (s && s->r.untiered)
                s = NULL; /* no order moves a mapping */
        if (s && (s->draining || slot_spilled(s, first, n)))
                r = -EBUSY;
        else if (s) {
                s->busy++;
                *ret = s->r;
                r = 0;
        }
        pthread_mutex_unlock(&t->lock);
        return r;
}

int regions_acquire_unregistered(uint32_t after_id, struct shim_region *ret) {
        struct shim_regions *t = &kvt_shim()->regions;
        struct region_slot *best = NULL;

        pthread_mutex_lock(&t->lock);
        for (size_t i = 0; i < t->n_slots; i++)
                if (!t->slots[i].r.registered && !t->slots[i].r.inherited && t->slots[i].r.id > after_id &&
                    (!best || t->slots[i].r.id < best->r.id))
                        best = &t->slots[i];
        if (best) {
                best->busy++;
                *ret = best->r;
        }
        pthread_mutex_unlock(&t->lock);
        return best ? 0 : -ENOENT;
}

void regions_release(uint32_t id) {
        struct shim_regions *t = &kvt_shim()->regions;
        struct region_slot *s;

        pthread_mutex_lock(&t->lock);
        s = find_id(id);
        if (s && s->busy && --s->busy == 0)
                pthread_cond_broadcast(&t->idle);
        pthread_mutex_unlock(&t->lock);
}

int regions_note_hint(const void *ptr, uint32_t first, uint32_t n, int kind, struct shim_region *ret) {
        struct shim_regions *t = &kvt_shim()->regions;
        uint8_t set = kind == KVTIER_HINT_HOT      ? REGION_STANDING_HOT
                    : kind == KVTIER_HINT_PINNED   ? REGION_STANDING_PINNED
                                                   : 0;
        uint8_t clear = kind == KVTIER_HINT_COLD   ? REGION_STANDING_HOT
                      : kind == KVTIER_HINT_DONE   ? REGION_STANDING_HOT | REGION_STANDING_PINNED
                                                   : 0;
        struct region_slot *s;
        uint32_t chunks;
        int r = 0;

        pthread_mutex_lock(&t->lock);
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
        pthread_mutex_unlock(&t->lock);
        return r;
}

/* Sets chunks [first, first + n) of s (in range) to bits.  Under lock.
 * Without memory for the array the region's bits become unknown, the safe
 * side: every move then advises in full. */
static void advised_set(struct region_slot *s, uint32_t first, uint32_t n, unsigned bits) {
        uint32_t chunks = (uint32_t)(s->r.span_bytes >> KVT_CHUNK_SHIFT);

        if (!s->advised) {
                if (s->r.advised == bits)
                        return;
                if (!(s->advised = malloc(chunks))) {
                        s->r.advised = 0;
                        return;
                }
                memset(s->advised, s->r.advised, chunks);
        }
        memset(s->advised + first, (int)bits, n);
}

/* The captured region holding the whole chunks [ptr, ptr + len) into
 * *ret, the first of them and their number.  Returns 0, -ENOENT (no
 * captured region at ptr) or -EINVAL (not whole chunks, or past its end).
 * Under lock. */
static int find_chunks(const void *ptr, size_t len, struct region_slot **ret, uint32_t *ret_first,
                       uint32_t *ret_n) {
        struct region_slot *s = find_containing((uintptr_t)ptr);
        uintptr_t off;

        if (!s)
                return -ENOENT;
        off = (uintptr_t)ptr - s->r.base;
        if ((off | len) & (KVT_CHUNK_BYTES - 1) || len > s->r.span_bytes - off)
                return -EINVAL;
        *ret = s;
        *ret_first = (uint32_t)(off >> KVT_CHUNK_SHIFT);
        *ret_n = (uint32_t)(len >> KVT_CHUNK_SHIFT);
        return 0;
}

unsigned regions_advised(const void *ptr, size_t len) {
        struct shim_regions *t = &kvt_shim()->regions;
        struct region_slot *s;
        uint32_t first, n;
        unsigned bits = 0;

        pthread_mutex_lock(&t->lock);
        if (len == 0 || find_chunks(ptr, len, &s, &first, &n) < 0)
                s = NULL;
        if (s && !s->advised)
                bits = s->r.advised;
        else if (s) {
                bits = REGION_ADVISED_HOST | REGION_ADVISED_MAPPED | REGION_ADVISED_UNMAPPED;
                for (uint32_t i = first; i < first + n; i++)
                        bits &= s->advised[i];
        }
        pthread_mutex_unlock(&t->lock);
        return bits;
}

void regions_set_advised(const void *ptr, size_t len, unsigned bits) {
        struct shim_regions *t = &kvt_shim()->regions;
        struct region_slot *s;
        uint32_t first, n;

        pthread_mutex_lock(&t->lock);
        if (find_chunks(ptr, len, &s, &first, &n) == 0)
                advised_set(s, first, n, bits);
        pthread_mutex_unlock(&t->lock);
}

int regions_mark_spilled(const void *ptr, size_t len, bool spilled, struct shim_region *ret) {
        struct shim_regions *t = &kvt_shim()->regions;
        struct region_slot *s;
        uint32_t first, n;
        int r;

        pthread_mutex_lock(&t->lock);
        if ((r = find_chunks(ptr, len, &s, &first, &n)) < 0)
                goto out;
        if (spilled && !s->standing && !(s->standing = calloc(s->r.span_bytes >> KVT_CHUNK_SHIFT, 1))) {
                r = -ENOMEM;
                goto out;
        }
        for (uint32_t i = first; s->standing && i < first + n; i++)
                s->standing[i] = (uint8_t)(spilled ? s->standing[i] | REGION_STANDING_SPILLED
                                                   : s->standing[i] & ~REGION_STANDING_SPILLED);
        if (spilled) {
                uintptr_t base = s->r.base;

                s->draining++;
                while (s->busy) {
                        pthread_cond_wait(&t->idle, &t->lock);
                        /* the array may have moved; the region gone, freed by
                         * another thread, its count went with it */
                        if (!(s = find_containing(base))) {
                                r = -ENOENT;
                                goto out;
                        }
                }
                s->draining--;
        }
        /* once no run is left to book the advice it made */
        advised_set(s, first, n, 0);
        *ret = s->r;
out:
        pthread_mutex_unlock(&t->lock);
        return r;
}

int regions_standing_copy(uint32_t id, uint8_t **ret, uint32_t *ret_chunks) {
        struct shim_regions *t = &kvt_shim()->regions;
        struct region_slot *s;
        int r = 0;

        *ret = NULL;
        *ret_chunks = 0;
        pthread_mutex_lock(&t->lock);
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
        pthread_mutex_unlock(&t->lock);
        return r;
}

void regions_mark_registered(uint32_t id) {
        struct shim_regions *t = &kvt_shim()->regions;
        struct region_slot *s;

        pthread_mutex_lock(&t->lock);
        s = find_id(id);
        if (s)
                s->r.registered = true;
        pthread_mutex_unlock(&t->lock);
}

void regions_forget_registration(void) {
        struct shim_regions *t = &kvt_shim()->regions;

        pthread_mutex_lock(&t->lock);
        for (size_t i = 0; i < t->n_slots; i++)
                t->slots[i].r.registered = false;
        pthread_mutex_unlock(&t->lock);
}

void regions_count(size_t *ret_n, uint64_t *ret_bytes) {
        struct shim_regions *t = &kvt_shim()->regions;
        uint64_t bytes = 0;
        size_t n = 0;

        pthread_mutex_lock(&t->lock);
        for (size_t i = 0; i < t->n_slots; i++)
                if (!t->slots[i].r.inherited) {
                        bytes += t->slots[i].r.span_bytes;
                        n++;
                }
        *ret_n = n;
        *ret_bytes = bytes;
        pthread_mutex_unlock(&t->lock);
}

void regions_atfork_child(void) {
        struct shim_regions *t = &kvt_shim()->regions;

        pthread_cond_init(&t->idle, NULL);
        pthread_rwlock_init(&t->view_lock, NULL);
        for (size_t i = 0; i < t->n_slots; i++) {
                t->slots[i].r.heat = false;     /* the parent's table: never counted into */
                t->slots[i].r.registered = false;
                t->slots[i].r.inherited = true; /* the child never speaks for them */
                t->slots[i].busy = 0;           /* the parent's mover did not come along */
                t->slots[i].draining = 0;       /* nor its spilling threads */
        }
}
