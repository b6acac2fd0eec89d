/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "heat-table.h"
#include "heat-reader.h"
#include "log.h"
#include "util.h"

/* A region of the client and where its counters are, once found. */
struct binding {
        uint32_t region_id;
        uint32_t region_chunks; /* from the registry, not the table */
        uint32_t slot;
        uint32_t generation; /* of the slot when bound */
        uint64_t offset;
        uint32_t *last; /* counter values last seen; NULL while unbound */
        uint64_t last_launches; /* the slot's launch count last seen */
        bool seen;      /* the region still exists (this tick) */
        bool was_bound; /* bound before: a new binding counts from the values then */
        bool first_read; /* bound from zero, not read since: what it finds is one use a chunk */
};

struct heat_table {
        int fd;
        const void *map;
        uint64_t mapped_bytes;
        uint32_t n_slots;
        struct binding *b; /* sorted by region_id */
        size_t n_b, cap_b;
        uint32_t *scratch; /* one region's counters, read before they count */
        uint64_t scratch_launches; /* and its slot's launch count */
        size_t cap_scratch;
        bool want_scan;
        bool bad_logged;
        struct heat_table_stats stats;
};

static int check_fd(int fd, const struct kvt_heat_table *msg, uint64_t *ret_size, const char **ret_why) {
        struct statfs sfs;
        struct stat st;
        int seals;

        if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
                *ret_why = "not a regular file";
                return -EBADF;
        }
        /* Only shmem: a hugetlbfs file could fault (SIGBUS) on a read when
         * no huge page is left, and other file systems cannot be sealed. */
        if (fstatfs(fd, &sfs) < 0 || sfs.f_type != TMPFS_MAGIC) {
                *ret_why = "not a memfd (shmem) file";
                return -EBADF;
        }
        seals = fcntl(fd, F_GET_SEALS);
        if (seals < 0 || !(seals & F_SEAL_SHRINK)) {
                *ret_why = "not sealed against shrinking (F_SEAL_SHRINK)";
                return -EPERM;
        }
        if ((uint64_t)st.st_size < msg->size_bytes ||
            (uint64_t)st.st_size < kvt_heat_counters_offset(msg->n_slots)) {
                *ret_why = "file smaller than announced";
                return -EBADMSG;
        }
        *ret_size = MIN((uint64_t)st.st_size, KVT_HEAT_MAX_BYTES);
        return 0;
}

int heat_table_new(int fd, const struct kvt_heat_table *msg, struct heat_table **ret, const char **ret_why) {
        const struct kvt_heat_header *h;
        struct heat_table *t;
        uint64_t size;
        void *map;
        int r;

        *ret_why = NULL;
        r = check_fd(fd, msg, &size, ret_why);
        if (r < 0)
                return r;
        map = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
        if (map == MAP_FAILED) {
                *ret_why = "cannot be mapped";
                return -errno;
        }
        h = map;
        if (h->magic != KVT_HEAT_MAGIC || h->version != KVT_HEAT_VERSION || h->n_slots != msg->n_slots) {
                munmap(map, size);
                *ret_why = "header disagrees with the message";
                return -EBADMSG;
        }
        t = calloc(1, sizeof(*t));
        if (!t) {
                munmap(map, size);
                return -ENOMEM;
        }
        *t = (struct heat_table){.fd = fd, .map = map, .mapped_bytes = size, .n_slots = msg->n_slots};
        *ret = t;
        return 0;
}

struct heat_table *heat_table_free(struct heat_table *t) {
        if (!t)
                return NULL;
        for (size_t i = 0; i < t->n_b; i++)
                free(t->b[i].last);
        free(t->b);
        free(t->scratch);
        munmap((void *)t->map, t->mapped_bytes);
        close(t->fd);
        free(t);
        return NULL;
}

const struct heat_table_stats *heat_table_stats(const struct heat_table *t) {
        return &t->stats;
}

/* Maps what the file has grown to (by fstat, never by the header: the seal
 * guarantees the file never gets smaller than that).  Returns 1 if the
 * mapping grew, 0 if not, -errno. */
static int table_remap(struct heat_table *t) {
        struct stat st;
        uint64_t size;
        void *map;

        if (fstat(t->fd, &st) < 0)
                return -errno;
        size = (uint64_t)st.st_size;
        if (size > KVT_HEAT_MAX_BYTES)
                size = KVT_HEAT_MAX_BYTES;
        if (size <= t->mapped_bytes)
                return 0;
        map = mremap((void *)t->map, t->mapped_bytes, size, MREMAP_MAYMOVE);
        if (map == MAP_FAILED)
                return -errno;
        t->map = map;
        t->mapped_bytes = size;
        t->stats.remaps++;
        return 1;
}

static struct binding *binding_find(struct heat_table *t, uint32_t id, size_t *ret_pos) {
        size_t lo = 0, hi = t->n_b;

        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                if (t->b[mid].region_id < id)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        if (ret_pos)
                *ret_pos = lo;
        return lo < t->n_b && t->b[lo].region_id == id ? &t->b[lo] : NULL;
}

static int binding_get(struct heat_table *t, uint32_t id, uint32_t region_chunks, struct binding **ret) {
        size_t pos;
        struct binding *b = binding_find(t, id, &pos);

        if (b) {
                *ret = b;
                return 0;
        }
        if (t->n_b == t->cap_b) {
                size_t cap = t->cap_b ? t->cap_b * 2 : 16;
                struct binding *a = realloc(t->b, cap * sizeof(*a));
                if (!a)
                        return -ENOMEM;
                t->b = a;
                t->cap_b = cap;
        }
        memmove(&t->b[pos + 1], &t->b[pos], (t->n_b - pos) * sizeof(*t->b));
        t->b[pos] = (struct binding){.region_id = id, .region_chunks = region_chunks};
        t->n_b++;
        *ret = &t->b[pos];
        return 0;
}

static void binding_unbind(struct binding *b) {
        free(b->last);
        b->last = NULL;
}

void heat_table_tick_begin(struct heat_table *t) {
        for (size_t i = 0; i < t->n_b; i++)
                t->b[i].seen = false;
        t->want_scan = false;
        t->stats.lost_uses = kvt_heat_lost_load(t->map); /* shown, never acted on */
}

/* Reads a bound region's counters into t->scratch; false if its slot was
 * rewritten meanwhile (the values may belong to another region then). */
static bool read_counters(struct heat_table *t, const struct binding *b) {
        for (uint32_t j = 0; j < b->region_chunks; j++)
                t->scratch[j] = kvt_heat_counter_load(t->map, b->offset, j);
        t->scratch_launches = kvt_heat_launch_load(t->map, b->slot);
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        return kvt_heat_slot_generation(t->map, b->slot) == b->generation;
}

static int scratch_reserve(struct heat_table *t, uint32_t n) {
        uint32_t *a;

        if (n <= t->cap_scratch)
                return 0;
        a = realloc(t->scratch, (size_t)n * sizeof(*a));
        if (!a)
                return -ENOMEM;
        t->scratch = a;
        t->cap_scratch = n;
        return 0;
}

int heat_table_collect(struct heat_table *t, struct registry *r, struct region *reg) {
        struct binding *b;
        int k;

        k = binding_get(t, region_id(reg), region_n_chunks(reg), &b);
        if (k < 0)
                return k;
        b->seen = true;
        if (!b->last) {
                t->want_scan = true;
                return 0;
        }
        k = scratch_reserve(t, b->region_chunks);
        if (k < 0)
                return k;
        if (kvt_heat_slot_generation(t->map, b->slot) != b->generation || !read_counters(t, b)) {
                binding_unbind(b); /* freed or reused: found again by the next scan */
                t->want_scan = true;
                return 0;
        }
        for (uint32_t j = 0; j < b->region_chunks; j++) {
                uint32_t d = t->scratch[j] - b->last[j]; /* modulo 2^32 */

                if (!d)
                        continue;
                b->last[j] = t->scratch[j];
                /* since the capture, or since long before (a region registered
                 * again): that it was touched is known, not when nor how often */
                if (b->first_read)
                        d = 1;
                registry_chunk_touch(r, reg, j, d);
                t->stats.accesses += d;
        }
        /* a launch count that went back (no honest shim's) counts none */
        registry_region_launched(r, reg, t->scratch_launches >= b->last_launches
                                                 ? t->scratch_launches - b->last_launches : 0);
        b->last_launches = t->scratch_launches;
        b->first_read = false;
        return 0;
}

static void note_bad_slot(struct heat_table *t, uint32_t i, const char *why) {
        t->stats.bad_slots++;
        if (!t->bad_logged)
                log_warning("Heat table slot %u %s; further bad slots are counted, not logged, ignoring.", i,
                            why);
        t->bad_logged = true;
}

/* Binds b to the slot in view v.  The first binding of a region counts
 * from zero: the shim zeroes a region's counters at its capture, and the
 * binding comes a tick or more after the registration, while an engine
 * that fills what it just allocated touches it at once.  A first touch of a
 * chunk in host memory is its only fault (it maps the chunk): lost, the
 * chunk stayed booked unmapped, and mapped it was never seen again.  A
 * region registered again on a new connection (a restarted daemon, or this
 * one after it dropped the client) brings what it counted before: the GPU
 * still maps what it faulted on then (the move back to host memory leaves
 * a fault's mapping), and those chunks are booked mapped by it, to be
 * re-armed.  The first read passes one use a chunk on, whatever the count.
 * A binding made again, its slot rewritten under it (which the shim does
 * only for a new region, under a new id), takes the counters then as its
 * baseline: what they hold is not known to be this region's. */
static int binding_bind(struct heat_table *t, struct binding *b, uint32_t slot,
                        const struct kvt_heat_slot_view *v) {
        b->last = malloc((size_t)b->region_chunks * sizeof(uint32_t));
        if (!b->last)
                return -ENOMEM;
        b->slot = slot;
        b->generation = v->generation;
        b->offset = v->offset;
        if (!read_counters(t, b)) {
                binding_unbind(b);
                return 0;
        }
        if (b->was_bound)
                memcpy(b->last, t->scratch, (size_t)b->region_chunks * sizeof(uint32_t));
        else
                memset(b->last, 0, (size_t)b->region_chunks * sizeof(uint32_t));
        /* Launches count from the binding on, whatever the slot counted
         * before (a region registered again brings its whole past): a
         * rate, unlike a first touch, is not lost by a tick's delay. */
        b->last_launches = t->scratch_launches;
        b->first_read = !b->was_bound;
        b->was_bound = true;
        t->stats.regions_bound++;
        return 0;
}

static int scan_slots(struct heat_table *t) {
        bool remapped = false;

        for (uint32_t i = 0; i < t->n_slots; i++) {
                struct kvt_heat_slot_view v;
                struct binding *b;
                int k = kvt_heat_slot_read(t->map, t->mapped_bytes, t->n_slots, i, &v);

                if (k == -ERANGE && !remapped) {
                        remapped = true;
                        if (table_remap(t) > 0)
                                k = kvt_heat_slot_read(t->map, t->mapped_bytes, t->n_slots, i, &v);
                }
                if (k == -EAGAIN || k == -ENOENT)
                        continue;
                if (k < 0) {
                        note_bad_slot(t, i, k == -ERANGE ? "points past the file" : "is malformed");
                        continue;
                }
                b = binding_find(t, v.region_id, NULL);
                if (!b || b->last || !b->seen)
                        continue; /* unknown to the registry, or bound already */
                if (v.n_chunks != b->region_chunks) {
                        note_bad_slot(t, i, "disagrees with its region's size");
                        continue;
                }
                k = scratch_reserve(t, b->region_chunks);
                if (k >= 0)
                        k = binding_bind(t, b, i, &v);
                if (k < 0)
                        return k;
        }
        return 0;
}

int heat_table_tick_end(struct heat_table *t) {
        size_t w = 0;

        for (size_t i = 0; i < t->n_b; i++) {
                if (!t->b[i].seen) {
                        binding_unbind(&t->b[i]);
                        continue;
                }
                t->b[w++] = t->b[i];
        }
        t->n_b = w;
        return t->want_scan ? scan_slots(t) : 0;
}
