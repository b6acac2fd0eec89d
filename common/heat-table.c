/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>

#include "heat-table.h"
#include "protocol.h"

static struct kvt_heat_slot *slot_at(void *base, uint32_t i) {
        return (struct kvt_heat_slot *)((char *)base + sizeof(struct kvt_heat_header)) + i;
}

static const struct kvt_heat_slot *slot_at_const(const void *base, uint32_t i) {
        return (const struct kvt_heat_slot *)((const char *)base + sizeof(struct kvt_heat_header)) + i;
}

uint32_t kvt_heat_slot_generation(const void *base, uint32_t i) {
        return __atomic_load_n(&slot_at_const(base, i)->generation, __ATOMIC_ACQUIRE);
}

/* Checks a consistent slot against the reader's own bounds. */
static int slot_check(const struct kvt_heat_slot_view *v, uint64_t mapped_bytes, uint32_t n_slots) {
        uint64_t end;

        if (v->region_id == 0)
                return v->n_chunks == 0 && v->offset == 0 ? -ENOENT : -EBADMSG;
        if (v->n_chunks == 0 || v->n_chunks > (KVT_MAX_REGION_BYTES >> KVT_CHUNK_SHIFT))
                return -EBADMSG;
        if (v->offset % sizeof(uint32_t) || v->offset < kvt_heat_counters_offset(n_slots) ||
            v->offset > KVT_HEAT_MAX_BYTES)
                return -EBADMSG;
        end = v->offset + (uint64_t)v->n_chunks * sizeof(uint32_t);
        if (end > KVT_HEAT_MAX_BYTES)
                return -EBADMSG;
        return end > mapped_bytes ? -ERANGE : 0;
}

int kvt_heat_slot_read(const void *base, uint64_t mapped_bytes, uint32_t n_slots, uint32_t i,
                       struct kvt_heat_slot_view *ret) {
        const struct kvt_heat_slot *s;
        struct kvt_heat_slot_view v;
        uint32_t g2;

        if (i >= n_slots || kvt_heat_counters_offset(n_slots) > mapped_bytes)
                return -EBADMSG;
        s = slot_at_const(base, i);
        v.generation = __atomic_load_n(&s->generation, __ATOMIC_ACQUIRE);
        if (v.generation & 1u)
                return -EAGAIN;
        if (v.generation == 0)
                return -ENOENT;
        v.region_id = __atomic_load_n(&s->region_id, __ATOMIC_RELAXED);
        v.n_chunks = __atomic_load_n(&s->n_chunks, __ATOMIC_RELAXED);
        v.offset = __atomic_load_n(&s->offset, __ATOMIC_RELAXED);
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        g2 = __atomic_load_n(&s->generation, __ATOMIC_RELAXED);
        if (g2 != v.generation)
                return -EAGAIN;
        *ret = v;
        return slot_check(&v, mapped_bytes, n_slots);
}

void kvt_heat_header_init(void *base, uint32_t n_slots, uint64_t size_bytes) {
        struct kvt_heat_header *h = base;

        *h = (struct kvt_heat_header){
                .magic = KVT_HEAT_MAGIC,
                .version = KVT_HEAT_VERSION,
                .n_slots = n_slots,
        };
        __atomic_store_n(&h->size_bytes, size_bytes, __ATOMIC_RELEASE);
}

/* Seqlock write: generation odd, fields, generation even and new. */
static void slot_write(void *base, uint32_t i, uint32_t region_id, uint32_t n_chunks, uint64_t offset) {
        struct kvt_heat_slot *s = slot_at(base, i);
        uint32_t g = __atomic_load_n(&s->generation, __ATOMIC_RELAXED);

        __atomic_store_n(&s->generation, g | 1u, __ATOMIC_RELAXED);
        __atomic_thread_fence(__ATOMIC_RELEASE);
        __atomic_store_n(&s->region_id, region_id, __ATOMIC_RELAXED);
        __atomic_store_n(&s->n_chunks, n_chunks, __ATOMIC_RELAXED);
        __atomic_store_n(&s->offset, offset, __ATOMIC_RELAXED);
        __atomic_store_n(&s->launches, 0, __ATOMIC_RELAXED);
        /* Even, never 0 (0 means never used), different from g. */
        g = (g | 1u) == UINT32_MAX ? 2u : (g | 1u) + 1u;
        __atomic_store_n(&s->generation, g, __ATOMIC_RELEASE);
}

void kvt_heat_slot_publish(void *base, uint32_t i, uint32_t region_id, uint32_t n_chunks, uint64_t offset) {
        slot_write(base, i, region_id, n_chunks, offset);
}

void kvt_heat_slot_clear(void *base, uint32_t i) {
        slot_write(base, i, 0, 0, 0);
}
