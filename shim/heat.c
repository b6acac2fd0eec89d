/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "heat-table.h"
#include "heat.h"
#include "log.h"
#include "regions.h"
#include "state.h"
#include "trace.h"
#include "util.h"

/* First file size; it doubles as counters run out, up to KVT_HEAT_MAX_BYTES. */
#define HEAT_INITIAL_BYTES (1ull << 20)

/* A region as the hot path sees it: sorted by base, under table_lock. */
struct heat_entry {
        uintptr_t base, end;
        uint32_t region_id;
        uint32_t n_chunks;
        uint64_t offset; /* of its counters in the table */
};

/* A run of counters in the file, live or free for reuse. */
struct heat_extent {
        uint64_t offset;
        uint32_t n_chunks;
        uint32_t slot;
        uint32_t region_id; /* 0: free */
};

/* Creates the memfd, sealed against shrinking, and maps it.  write_lock held. */
static int table_create_locked(void) {
        struct shim_heat *h = &kvt_shim()->heat;
        void *map;
        int fd, r;

        fd = memfd_create("kvtier-heat", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        if (fd < 0)
                return -errno;
        if (ftruncate(fd, (off_t)HEAT_INITIAL_BYTES) < 0 ||
            fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_SEAL) < 0) {
                r = -errno;
                close(fd);
                return r;
        }
        /* The whole possible size is mapped once, so growing the file never
         * moves the mapping under a concurrent heat_touch(); only the part
         * below file_bytes is ever touched. */
        map = mmap(NULL, KVT_HEAT_MAX_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (map == MAP_FAILED) {
                r = -errno;
                close(fd);
                return r;
        }
        kvt_heat_header_init(map, HEAT_SLOTS, HEAT_INITIAL_BYTES);
        if (kvt_shim()->cfg.trace_path && (r = trace_start(kvt_shim()->cfg.trace_path)) < 0)
                log_warning_errno(r, "Failed to record a trace to %s: %s, ignoring.",
                                  kvt_shim()->cfg.trace_path, strerror(-r));
        h->table_fd = fd;
        h->table_map = map;
        h->file_bytes = HEAT_INITIAL_BYTES;
        h->bump_offset = kvt_heat_counters_offset(HEAT_SLOTS);
        return 0;
}

/* Grows the file so that want bytes are valid.  write_lock held. */
static int table_grow_locked(uint64_t want) {
        struct shim_heat *h = &kvt_shim()->heat;
        uint64_t size = h->file_bytes;
        struct kvt_heat_header *hdr = h->table_map;

        if (want > KVT_HEAT_MAX_BYTES)
                return -ENOSPC;
        while (size < want)
                size *= 2;
        size = MIN(size, KVT_HEAT_MAX_BYTES);
        if (ftruncate(h->table_fd, (off_t)size) < 0)
                return -errno;
        h->file_bytes = size;
        __atomic_store_n(&hdr->size_bytes, size, __ATOMIC_RELEASE);
        return 0;
}

/* Finds counters for n chunks: a free extent big enough, or new ones at the
 * end of the file.  write_lock held. */
static int extent_take_locked(uint32_t n, uint32_t slot, uint32_t region_id, struct heat_extent **ret) {
        struct shim_heat *h = &kvt_shim()->heat;
        uint64_t end;
        int r;

        for (size_t i = 0; i < h->n_extents; i++)
                if (h->extents[i].region_id == 0 && h->extents[i].n_chunks >= n) {
                        h->extents[i].slot = slot;
                        h->extents[i].region_id = region_id;
                        *ret = &h->extents[i];
                        return 0;
                }
        if (h->n_extents == h->cap_extents) {
                size_t cap = h->cap_extents ? h->cap_extents * 2 : 16;
                struct heat_extent *e = realloc(h->extents, cap * sizeof(*e));
                if (!e)
                        return -ENOMEM;
                h->extents = e;
                h->cap_extents = cap;
        }
        end = h->bump_offset + (uint64_t)n * sizeof(uint32_t);
        if (end > h->file_bytes && (r = table_grow_locked(end)) < 0)
                return r;
        h->extents[h->n_extents] = (struct heat_extent){
                .offset = h->bump_offset, .n_chunks = n, .slot = slot, .region_id = region_id};
        h->bump_offset = end;
        *ret = &h->extents[h->n_extents++];
        return 0;
}

static int slot_take_locked(void) {
        struct shim_heat *h = &kvt_shim()->heat;

        for (uint32_t i = 0; i < HEAT_SLOTS; i++)
                if (!h->slot_used[i]) {
                        h->slot_used[i] = true;
                        return (int)i;
                }
        return -ENOSPC;
}

/* Inserts e into the sorted hot-path table.  Takes table_lock. */
static int entry_insert(const struct heat_entry *e) {
        struct shim_heat *h = &kvt_shim()->heat;
        size_t i = 0;

        pthread_rwlock_wrlock(&h->table_lock);
        if (h->n_entries == h->cap_entries) {
                size_t cap = h->cap_entries ? h->cap_entries * 2 : 16;
                struct heat_entry *a = realloc(h->entries, cap * sizeof(*a));
                if (!a) {
                        pthread_rwlock_unlock(&h->table_lock);
                        return -ENOMEM;
                }
                h->entries = a;
                h->cap_entries = cap;
        }
        while (i < h->n_entries && h->entries[i].base < e->base)
                i++;
        memmove(&h->entries[i + 1], &h->entries[i], (h->n_entries - i) * sizeof(*h->entries));
        h->entries[i] = *e;
        h->n_entries++;
        __atomic_store_n(&h->span_lo, MIN(h->span_lo, e->base), __ATOMIC_RELAXED);
        __atomic_store_n(&h->span_hi, MAX(h->span_hi, e->end), __ATOMIC_RELAXED);
        pthread_rwlock_unlock(&h->table_lock);
        return 0;
}

int heat_region_add(const struct shim_region *r) {
        struct shim_heat *h = &kvt_shim()->heat;
        struct heat_entry e = {.base = r->base, .end = r->base + r->span_bytes, .region_id = r->id};
        struct heat_extent *x;
        int slot, k;

        if (!kvt_shim()->cfg.heat_sources)
                return 0;
        e.n_chunks = (uint32_t)(r->span_bytes >> KVT_CHUNK_SHIFT);
        pthread_mutex_lock(&h->write_lock);
        if (h->table_fd < 0 && (k = table_create_locked()) < 0) {
                pthread_mutex_unlock(&h->write_lock);
                return log_warning_errno(
                        k, "Failed to create the heat table: %s; no access heat for the daemon, ignoring.",
                        strerror(-k));
        }
        slot = slot_take_locked();
        k = slot < 0 ? slot : extent_take_locked(e.n_chunks, (uint32_t)slot, r->id, &x);
        if (k < 0) {
                if (slot >= 0)
                        h->slot_used[slot] = false;
                if (!h->full_logged)
                        log_warning("Heat table full (%s): region %u and later ones get no access heat, "
                                    "ignoring.",
                                    strerror(-k), r->id);
                h->full_logged = true;
                pthread_mutex_unlock(&h->write_lock);
                return k;
        }
        memset((char *)h->table_map + x->offset, 0, (size_t)e.n_chunks * sizeof(uint32_t));
        kvt_heat_slot_publish(h->table_map, (uint32_t)slot, r->id, e.n_chunks, x->offset);
        e.offset = x->offset;
        pthread_mutex_unlock(&h->write_lock);
        return entry_insert(&e);
}

void heat_region_del(uint32_t id) {
        struct shim_heat *h = &kvt_shim()->heat;
        bool found = false;

        pthread_rwlock_wrlock(&h->table_lock);
        for (size_t i = 0; i < h->n_entries; i++)
                if (h->entries[i].region_id == id) {
                        memmove(&h->entries[i], &h->entries[i + 1],
                                (h->n_entries - i - 1) * sizeof(*h->entries));
                        h->n_entries--;
                        found = true;
                        break;
                }
        pthread_rwlock_unlock(&h->table_lock);
        if (!found)
                return;
        trace_free(id);
        pthread_mutex_lock(&h->write_lock);
        for (size_t i = 0; i < h->n_extents; i++)
                if (h->extents[i].region_id == id) {
                        kvt_heat_slot_clear(h->table_map, h->extents[i].slot);
                        h->slot_used[h->extents[i].slot] = false;
                        h->extents[i].region_id = 0;
                        break;
                }
        pthread_mutex_unlock(&h->write_lock);
}

bool heat_maybe_captured(uintptr_t addr) {
        struct shim_heat *h = &kvt_shim()->heat;

        return addr >= __atomic_load_n(&h->span_lo, __ATOMIC_RELAXED) &&
               addr < __atomic_load_n(&h->span_hi, __ATOMIC_RELAXED);
}

/* The entry containing addr, table_lock held for reading. */
static const struct heat_entry *entry_find(uintptr_t addr) {
        struct shim_heat *h = &kvt_shim()->heat;
        size_t lo = 0, hi = h->n_entries;

        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                if (h->entries[mid].base <= addr)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        if (lo == 0 || addr >= h->entries[lo - 1].end)
                return NULL;
        return &h->entries[lo - 1];
}

uint64_t heat_touch_count(void) {
        struct shim_heat *h = &kvt_shim()->heat;

        return __atomic_load_n(&h->touches, __ATOMIC_RELAXED);
}

bool heat_locate(uintptr_t addr) {
        struct shim_heat *h = &kvt_shim()->heat;
        bool found;

        if (!heat_maybe_captured(addr))
                return false;
        pthread_rwlock_rdlock(&h->table_lock);
        found = entry_find(addr) != NULL;
        pthread_rwlock_unlock(&h->table_lock);
        return found;
}

size_t heat_touch(uintptr_t addr, size_t len, uint32_t n) {
        struct shim_heat *h = &kvt_shim()->heat;
        const struct heat_entry *e;
        size_t counted = 0;

        if (!heat_maybe_captured(addr))
                return 0;
        pthread_rwlock_rdlock(&h->table_lock);
        e = entry_find(addr);
        if (e) {
                uintptr_t end = len && addr + len > addr ? MIN(addr + len, e->end) : addr + 1;
                uint32_t first = (uint32_t)((addr - e->base) >> KVT_CHUNK_SHIFT);
                uint32_t last = (uint32_t)((end - 1 - e->base) >> KVT_CHUNK_SHIFT);

                for (uint32_t j = first; j <= last; j++)
                        kvt_heat_counter_add(h->table_map, e->offset, j, n);
                counted = last - first + 1;
                /* Statistics: relaxed load and store, no locked add on the hot path. */
                __atomic_store_n(&h->touches, __atomic_load_n(&h->touches, __ATOMIC_RELAXED) + counted,
                                 __ATOMIC_RELAXED);
                trace_access(e->region_id, e->n_chunks, first, (uint32_t)counted);
        }
        pthread_rwlock_unlock(&h->table_lock);
        return counted;
}

int heat_table_fd(struct kvt_heat_table *ret) {
        struct shim_heat *h = &kvt_shim()->heat;
        int fd;

        if (!kvt_shim()->cfg.heat_sources)
                return -1;
        pthread_mutex_lock(&h->write_lock);
        if (h->table_fd < 0 && (fd = table_create_locked()) < 0)
                log_warning_errno(
                        fd, "Failed to create the heat table: %s; no access heat for the daemon, ignoring.",
                        strerror(-fd));
        fd = h->table_fd;
        if (fd >= 0)
                *ret = (struct kvt_heat_table){
                        .version = KVT_HEAT_VERSION, .n_slots = HEAT_SLOTS, .size_bytes = h->file_bytes};
        pthread_mutex_unlock(&h->write_lock);
        return fd;
}

void heat_atfork_child(void) {
        struct shim_heat *h = &kvt_shim()->heat;

        pthread_rwlock_init(&h->table_lock, NULL);
        pthread_mutex_init(&h->write_lock, NULL);
        /* The mapping is shared with the parent: the child must never count
         * into it.  It starts a table of its own if it captures, in arrays
         * of its own (the parent's may have been mid-realloc: left, not
         * freed). */
        h->entries = NULL;
        h->cap_entries = 0;
        h->extents = NULL;
        h->cap_extents = 0;
        h->n_entries = 0;
        h->span_lo = UINTPTR_MAX;
        h->span_hi = 0;
        if (h->table_map)
                munmap(h->table_map, KVT_HEAT_MAX_BYTES);
        if (h->table_fd >= 0)
                close(h->table_fd);
        h->table_map = NULL;
        h->table_fd = -1;
        h->file_bytes = h->bump_offset = 0;
        h->n_extents = 0;
        memset(h->slot_used, 0, sizeof(h->slot_used));
}
