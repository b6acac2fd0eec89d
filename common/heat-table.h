/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The heat table: per-chunk access counters a shim publishes to the daemon
 * in shared memory (a sealed memfd passed once per connection with
 * KVT_MSG_HEAT_TABLE), so that sampled accesses never cost a message each.
 *
 * Layout, all little-endian host order, offsets in bytes:
 *
 *   0                       struct kvt_heat_header (64 bytes)
 *   64                      n_slots x struct kvt_heat_slot (32 bytes each):
 *                           the directory, one slot per captured region
 *   kvt_heat_counters_offset(n_slots)
 *                           uint32_t counters, one per chunk; a region's run
 *                           starts at its slot's offset
 *
 * The shim is the only writer.  Counters only grow (modulo 2^32), from zero
 * at the region's capture, with relaxed atomic adds; the daemon reads them
 * with aligned 32-bit atomic loads and turns the difference since its last
 * read (since zero, at its first) into accesses.
 * A slot is a seqlock: its generation is odd while the shim rewrites it and
 * changes on every rewrite, so the daemon reads {region_id, n_chunks,
 * offset} only as a consistent triple and notices a slot reused for
 * another region.  The file grows (ftruncate, size_bytes raised after) but
 * never shrinks: the shim seals it with F_SEAL_SHRINK, and the daemon
 * refuses a table without that seal, so a read inside what it mapped can
 * never fault.  The daemon trusts none of the contents: every offset and
 * count is checked against what it mapped before use.
 */

#include <stddef.h>
#include <stdint.h>

#define KVT_HEAT_MAGIC   0x4854564bu /* "KVTH" */
#define KVT_HEAT_VERSION 1u

/* Directory sizes a table may have: enough for a process's captured
 * regions (64 MiB and up each), small enough to scan in a tick. */
#define KVT_HEAT_MIN_SLOTS 16u
#define KVT_HEAT_MAX_SLOTS 16384u
/* Largest table the daemon maps: 16 M counters, 32 TiB of chunks. */
#define KVT_HEAT_MAX_BYTES (64ull << 20)

struct kvt_heat_header {
        uint32_t magic;
        uint32_t version;
        uint32_t n_slots;
        uint32_t reserved0;
        uint64_t size_bytes; /* bytes of the file in use now; only grows */
        uint64_t lost_uses;  /* uses the shim's sources lost (CUPTI records dropped for want
                              * of buffer room); only grows.  0 in a shim that counts none */
        uint64_t reserved[4];
};

struct kvt_heat_slot {
        uint32_t generation; /* odd: being written; 0: never used */
        uint32_t region_id;  /* 0: free */
        uint32_t n_chunks;
        uint32_t reserved0;
        uint64_t offset;   /* of the region's first counter, 4-byte aligned */
        uint64_t launches; /* kernels launched with a pointer into the region, one a pointer;
                            * only grows, from 0 at each publish.  0 in a shim that counts none */
};

_Static_assert(sizeof(struct kvt_heat_header) == 64, "heat header is 64 bytes on the wire");
_Static_assert(sizeof(struct kvt_heat_slot) == 32, "heat slot is 32 bytes on the wire");

/* Where the counters start in a table of n_slots slots. */
static inline uint64_t kvt_heat_counters_offset(uint32_t n_slots) {
        return sizeof(struct kvt_heat_header) + (uint64_t)n_slots * sizeof(struct kvt_heat_slot);
}

/* A slot as read consistently by kvt_heat_slot_read(). */
struct kvt_heat_slot_view {
        uint32_t generation;
        uint32_t region_id;
        uint32_t n_chunks;
        uint64_t offset;
};

/* Reads slot i of a table of n_slots slots mapped at base for mapped_bytes
 * (the reader's own numbers, never the header's).  Returns 0 and a view
 * whose counters lie inside the mapping, -EAGAIN while the shim rewrites
 * the slot, -ENOENT for a free slot, -ERANGE if the counters lie beyond
 * mapped_bytes (the table may have grown: map more and retry), or
 * -EBADMSG for a slot no honest shim writes. */
int kvt_heat_slot_read(const void *base, uint64_t mapped_bytes, uint32_t n_slots, uint32_t i,
                       struct kvt_heat_slot_view *ret);

/* Generation of slot i now (acquire), for checking a view is still current. */
uint32_t kvt_heat_slot_generation(const void *base, uint32_t i);

/* Counter j of the run at offset (checked by kvt_heat_slot_read()). */
static inline uint32_t kvt_heat_counter_load(const void *base, uint64_t offset, uint32_t j) {
        const uint32_t *c = (const uint32_t *)((const char *)base + offset);
        return __atomic_load_n(&c[j], __ATOMIC_RELAXED);
}

/* Writer side (the shim).  Fills the header of a fresh table. */
void kvt_heat_header_init(void *base, uint32_t n_slots, uint64_t size_bytes);

/* Publishes slot i for a region whose n_chunks counters at offset were
 * zeroed by the caller; clear empties it.  Single writer only. */
void kvt_heat_slot_publish(void *base, uint32_t i, uint32_t region_id, uint32_t n_chunks, uint64_t offset);
void kvt_heat_slot_clear(void *base, uint32_t i);

/* Counts n uses lost before they reached the table (writer side). */
static inline void kvt_heat_lost_add(void *base, uint64_t n) {
        __atomic_fetch_add(&((struct kvt_heat_header *)base)->lost_uses, n, __ATOMIC_RELAXED);
}

/* The uses the shim says it lost so far: a figure to show, nothing to
 * decide by (the daemon trusts none of the table's contents). */
static inline uint64_t kvt_heat_lost_load(const void *base) {
        return __atomic_load_n(&((const struct kvt_heat_header *)base)->lost_uses, __ATOMIC_RELAXED);
}

/* Counts n launches on the region of slot i (writer side). */
static inline void kvt_heat_launch_add(void *base, uint32_t i, uint64_t n) {
        struct kvt_heat_slot *s = (struct kvt_heat_slot *)((char *)base + sizeof(struct kvt_heat_header)) + i;
        __atomic_fetch_add(&s->launches, n, __ATOMIC_RELAXED);
}

/* The launch count of slot i (reader side: belongs to the region of a view
 * only while the slot's generation is the view's). */
static inline uint64_t kvt_heat_launch_load(const void *base, uint32_t i) {
        const struct kvt_heat_slot *s =
                (const struct kvt_heat_slot *)((const char *)base + sizeof(struct kvt_heat_header)) + i;
        return __atomic_load_n(&s->launches, __ATOMIC_RELAXED);
}

/* Counts n accesses of counter j of the run at offset. */
static inline void kvt_heat_counter_add(void *base, uint64_t offset, uint32_t j, uint32_t n) {
        uint32_t *c = (uint32_t *)((char *)base + offset);
        __atomic_fetch_add(&c[j], n, __ATOMIC_RELAXED);
}
