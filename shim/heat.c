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
        __atomic_store_n(&h->table_map, map, __ATOMIC_RELEASE); /* heat_note_lost() reads it unlocked */
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

int heat_region_add(const struct shim_region *r) {
        struct shim_heat *h = &kvt_shim()->heat;
        uint32_t n_chunks = (uint32_t)(r->span_bytes >> KVT_CHUNK_SHIFT);
        struct heat_extent *x;
        int slot, k;

        if (!kvt_shim()->cfg.heat_sources)
                return 0;
        pthread_mutex_lock(&h->write_lock);
        if (h->table_fd < 0 && (k = table_create_locked()) < 0) {
                pthread_mutex_unlock(&h->write_lock);
                return log_warning_errno(
                        k, "Failed to create the heat table: %s; no access heat for the daemon, ignoring.",
                        strerror(-k));
        }
        slot = slot_take_locked();
        k = slot < 0 ? slot : extent_take_locked(n_chunks, (uint32_t)slot, r->id, &x);
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
        memset((char *)h->table_map + x->offset, 0, (size_t)n_chunks * sizeof(uint32_t));
        kvt_heat_slot_publish(h->table_map, (uint32_t)slot, r->id, n_chunks, x->offset);
        regions_set_heat(r->id, x->offset, (uint32_t)slot);
        pthread_mutex_unlock(&h->write_lock);
        return 0;
}

void heat_region_del(uint32_t id) {
        struct shim_heat *h = &kvt_shim()->heat;

        pthread_mutex_lock(&h->write_lock);
        for (size_t i = 0; i < h->n_extents; i++)
                if (h->extents[i].region_id == id) {
                        kvt_heat_slot_clear(h->table_map, h->extents[i].slot);
                        h->slot_used[h->extents[i].slot] = false;
                        h->extents[i].region_id = 0;
                        trace_free(id);
                        break;
                }
        pthread_mutex_unlock(&h->write_lock);
}

uint64_t heat_touch_count(void) {
        struct shim_heat *h = &kvt_shim()->heat;

        return __atomic_load_n(&h->touches, __ATOMIC_RELAXED);
}

bool heat_locate(uintptr_t addr) {
        const struct shim_region *r;
        bool found;

        if (!regions_maybe_captured(addr))
                return false;
        regions_view_lock();
        r = regions_view_find(addr);
        found = r && r->heat;
        regions_view_unlock();
        return found;
}

/* heat_touch(), and where launch, one launch on the region too. */
static size_t touch(uintptr_t addr, size_t len, uint32_t n, bool launch) {
        struct shim_heat *h = &kvt_shim()->heat;
        const struct shim_region *r;
        size_t counted = 0;

        if (!regions_maybe_captured(addr))
                return 0;
        regions_view_lock();
        r = regions_view_find(addr);
        if (r && r->heat) {
                uintptr_t end = r->base + r->span_bytes;
                uintptr_t stop = len && addr + len > addr ? MIN(addr + len, end) : addr + 1;
                uint32_t first = (uint32_t)((addr - r->base) >> KVT_CHUNK_SHIFT);
                uint32_t last = (uint32_t)((stop - 1 - r->base) >> KVT_CHUNK_SHIFT);

                for (uint32_t j = first; j <= last; j++)
                        kvt_heat_counter_add(h->table_map, r->heat_offset, j, n);
                if (launch)
                        kvt_heat_launch_add(h->table_map, r->heat_slot, 1);
                counted = last - first + 1;
                /* Statistics: relaxed load and store, no locked add on the hot path. */
                __atomic_store_n(&h->touches, __atomic_load_n(&h->touches, __ATOMIC_RELAXED) + counted,
                                 __ATOMIC_RELAXED);
                trace_access(r->id, (uint32_t)(r->span_bytes >> KVT_CHUNK_SHIFT), first, (uint32_t)counted);
        }
        regions_view_unlock();
        return counted;
}

size_t heat_touch(uintptr_t addr, size_t len, uint32_t n) {
        return touch(addr, len, n, false);
}

size_t heat_launch(uintptr_t addr) {
        return touch(addr, 0, 1, true);
}

void heat_note_lost(uint64_t n) {
        void *map = __atomic_load_n(&kvt_shim()->heat.table_map, __ATOMIC_ACQUIRE);

        if (map && n) /* never unmapped while CUPTI's thread runs (a fork child, which has
                       * none, drops it): no lock needed */
                kvt_heat_lost_add(map, n);
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

        pthread_mutex_init(&h->write_lock, NULL);
        /* The mapping is shared with the parent: the child must never count
         * into it (regions_atfork_child() takes every region's counters
         * away).  It starts a table of its own if it captures, in arrays of
         * its own (the parent's may have been mid-realloc: left, not freed). */
        h->extents = NULL;
        h->cap_extents = 0;
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
