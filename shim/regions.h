/* SPDX-License-Identifier: MIT */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One captured allocation, as the shim knows it. */
struct shim_region {
        uint32_t id;         /* unique within this process; the daemon's key */
        int device;          /* CUDA ordinal it was allocated on */
        uintptr_t base;      /* 2 MiB aligned pointer given to the engine */
        size_t size_bytes;   /* what the engine asked for */
        size_t span_bytes;   /* size rounded up to whole chunks */
        void *alloc_ptr;     /* what cudaMallocManaged returned (freed with it) */
        uint32_t api;        /* enum kvt_alloc_api */
        uint32_t rule;       /* enum kvt_capture_rule */
        bool registered;     /* the daemon of the current connection knows it */
        bool start_vram;     /* started in VRAM under a grant (its REGION_ADD says so) */
        bool inherited;      /* a parent's region, seen after fork(): never registered */
        bool untiered;       /* a VMM mapping (vmm.c): base and sizes as mapped, never moved */
        bool heat;           /* it has counters in the heat table (heat.c), at heat_offset */
        uint8_t advised;     /* REGION_ADVISED_* of every chunk as added (what capture() advised) */
        uint32_t heat_slot;  /* its slot in the heat table, where its launches are counted */
        uint64_t heat_offset;
};

/* Adds a region (copied) and assigns its id into *r.  Returns 0 or -ENOMEM. */
int regions_add(struct shim_region *r);

/* The table holds the captured regions and the VMM mappings tracked as
 * untiered (vmm.c).  Every call below but regions_add(), _take_untiered(),
 * _acquire_unregistered() and the registration calls sees captured regions
 * only: a mapping is never freed, moved, hinted or spilled by kvtier. */

/* Finds the region that starts exactly at ptr, removes it from the table and
 * copies it to *ret, waiting until no order is being carried out on it.
 * Returns 0 or -ENOENT. */
int regions_take(const void *ptr, struct shim_region *ret);

/* Removes the first untiered mapping that starts in [ptr, ptr + len) and
 * copies it to *ret.  Returns 0 or -ENOENT. */
int regions_take_untiered(uintptr_t ptr, size_t len, struct shim_region *ret);

/* Finds the region containing ptr and copies it to *ret.  Returns 0 or -ENOENT. */
int regions_lookup(const void *ptr, struct shim_region *ret);

/* Pins region id against removal while an order on its chunks [first,
 * first + n) runs, and copies it to *ret.  Pair with regions_release().
 * Returns 0, -ENOENT, or -EBUSY when any of those chunks is spilled
 * (REGION_STANDING_SPILLED) or a spill waits to mark some of the region's. */
int regions_acquire(uint32_t id, uint32_t first, uint32_t n, struct shim_region *ret);
void regions_release(uint32_t id);

struct kvt_region_add;

/* Fills the REGION_ADD that registers r with the daemon: in VRAM if it
 * started there, else in host memory, unmapped; a mapping untiered, in the
 * whole chunks that hold it. */
void regions_add_msg(const struct shim_region *r, struct kvt_region_add *ret);

/* The standing hints an engine gave (HOT, PINNED), per chunk: kept in the
 * shim as well as in the daemon's books, so that a daemon that registers the
 * region later (after a restart or an outage) is told them again. */
#define REGION_STANDING_HOT    0x1u
#define REGION_STANDING_PINNED 0x2u
/* The chunk's memory is released to the SSD tier (shim/ssd.c): no order
 * may run on it until it is restored. */
#define REGION_STANDING_SPILLED 0x4u

/* Applies a kvtier_hint() kind to chunks [first, first + n) of the region
 * containing ptr: HOT and PINNED set their standing bit, COLD clears HOT,
 * DONE both, WILL_NEED nothing.  Copies the region to *ret as of the change
 * (so that its registered flag says whether the daemon must be told now).
 * Returns 0, -ENOENT, -EINVAL (range) or -ENOMEM. */
int regions_note_hint(const void *ptr, uint32_t first, uint32_t n, int kind, struct shim_region *ret);

/* Marks the whole chunks [ptr, ptr + len) (2 MiB aligned, in one region)
 * spilled (spilled: their memory is about to be released) or back (not
 * spilled).  Marking waits until no order runs on the region, refusing new
 * ones meanwhile, so that none runs on those chunks while their memory is
 * discarded and refilled.  Either way their advice bits become unknown
 * (the SSD tier advises the chunks it refills).  Copies the region to
 * *ret.  Returns 0, -ENOENT, -EINVAL (range) or -ENOMEM. */
int regions_mark_spilled(const void *ptr, size_t len, bool spilled, struct shim_region *ret);

/* What the shim's advice last left on a chunk, so that a move repeats none
 * of it: the evictors skip advice a chunk already has, and promotions
 * make none (the pages move; the preferred location stays the host).  A
 * bit clear says unknown, never the opposite. */
#define REGION_ADVISED_HOST     0x1u /* preferred location: the host, the whole chunk */
#define REGION_ADVISED_MAPPED   0x2u /* accessed-by the GPU, all of the chunk but its sample page */
#define REGION_ADVISED_UNMAPPED 0x4u /* accessed-by nobody */

/* The REGION_ADVISED_* bits every whole chunk in [ptr, ptr + len) has: 0
 * where any of it lies outside a captured region. */
unsigned regions_advised(const void *ptr, size_t len);

/* Sets the advice bits of the whole chunks in [ptr, ptr + len) of the
 * captured region holding ptr to bits (0 after advice failed: unknown). */
void regions_set_advised(const void *ptr, size_t len, unsigned bits);

/* A malloc'd copy of region id's standing bits (*ret_chunks of them), or
 * *ret = NULL when it has none.  Returns 0, -ENOENT or -ENOMEM. */
int regions_standing_copy(uint32_t id, uint8_t **ret, uint32_t *ret_chunks);

/* Marks region id registered with the daemon (client_register() calls it
 * once the REGION_ADD is sent). */
void regions_mark_registered(uint32_t id);

/* Pins and copies to *ret the unregistered region with the lowest id above
 * after_id (0 to start).  Pair with regions_release().  Returns 0 or -ENOENT. */
int regions_acquire_unregistered(uint32_t after_id, struct shim_region *ret);

/* Marks every region unregistered (the daemon connection was lost). */
void regions_forget_registration(void);

/* Number of regions of this process, mappings included (inherited ones not
 * counted), and their bytes. */
void regions_count(size_t *ret_n, uint64_t *ret_bytes);

/* Gives region id its heat counters, at offset in the heat table, and its
 * slot there. */
void regions_set_heat(uint32_t id, uint64_t offset, uint32_t slot);

/* The hot path's view (heat.c): between regions_view_lock() and _unlock(),
 * regions_view_find() gives the captured region holding addr, or NULL,
 * valid until the unlock; a read lock, so that launches and CUPTI records
 * on many threads never wait for each other. */
void regions_view_lock(void);
void regions_view_unlock(void);
const struct shim_region *regions_view_find(uintptr_t addr);

/* Whether addr might lie in a captured region: a lock-free bounds test, for
 * callers that scan many words (the launch hooks). */
bool regions_maybe_captured(uintptr_t addr);

/* Narrows [*lo, *hi) to the span that captured regions might lie in (the
 * same bounds); false where nothing of it is left. */
bool regions_maybe_captured_range(uintptr_t *lo, uintptr_t *hi);

/* In the child of fork(): resets the locks (another thread may have held
 * them) and marks every region the parent's (inherited), without heat (the
 * table is the parent's). */
void regions_atfork_child(void);
