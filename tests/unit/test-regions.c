/* SPDX-License-Identifier: MIT */
/* The shim's one region table (shim/regions.c): captured regions and the
 * VMM mappings vmm.c tracks as untiered side by side, and which calls see
 * which. */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <time.h>

#include "protocol.h"
#include "regions.h"
#include "tap.h"

#define MIB (1ull << 20)

/* A captured region of 64 MiB at 1 GiB, and a mapping of 3 MiB at 1.25 GiB
 * plus 1 MiB (mappings need not be chunk-aligned). */
static struct shim_region captured = {.device = 0, .base = 1024 * MIB, .size_bytes = 64 * MIB, .span_bytes = 64 * MIB};
static struct shim_region mapping = {.device = 0,
                                     .base = 1281 * MIB,
                                     .size_bytes = 3 * MIB,
                                     .span_bytes = 3 * MIB,
                                     .untiered = true};

static void test_lookups_see_captured_only(void) {
        struct shim_region r;
        uint8_t *bits;
        uint32_t n;

        TAP_EQ_INT(regions_lookup((void *)(captured.base + 5 * MIB), &r), 0, "lookup finds the captured region");
        TAP_EQ_INT(r.id, captured.id, "its id");
        TAP_EQ_INT(regions_lookup((void *)(mapping.base + MIB), &r), -ENOENT, "lookup never finds a mapping");
        TAP_EQ_INT(regions_acquire(mapping.id, 0, 1, &r), -ENOENT, "no order may pin a mapping");
        TAP_EQ_INT(regions_acquire(captured.id, 0, 1, &r), 0, "an order pins the captured region");
        regions_release(captured.id);
        TAP_EQ_INT(regions_note_hint((void *)mapping.base, 0, 1, 1, &r), -ENOENT, "a hint on a mapping: not ours");
        TAP_EQ_INT(regions_mark_spilled((void *)(1280 * MIB), 2 * MIB, true, &r), -ENOENT,
                   "a spill of a mapping's chunk: not ours");
        TAP_EQ_INT(regions_standing_copy(mapping.id, &bits, &n), 0, "a mapping has no standing hints");
        TAP_OK(bits == NULL, "none copied");
        TAP_EQ_INT(regions_take((void *)mapping.base, &r), -ENOENT, "a cudaFree of a mapping's base is not ours");
}

/* What heat_touch() sees: the captured region, with the counters it was
 * given; a mapping is outside the hot path's bounds and never found. */
static void test_view(void) {
        const struct shim_region *v;

        TAP_OK(regions_maybe_captured(captured.base + 63 * MIB), "inside the captured region: maybe captured");
        TAP_OK(!regions_maybe_captured(captured.base + 64 * MIB), "past its end: not");
        TAP_OK(!regions_maybe_captured(mapping.base), "a mapping: not");
        regions_view_lock();
        v = regions_view_find(captured.base + MIB);
        TAP_OK(v && v->id == captured.id && !v->heat, "the view finds the captured region, without counters yet");
        TAP_OK(regions_view_find(mapping.base) == NULL, "the view never finds a mapping");
        regions_view_unlock();
        regions_set_heat(captured.id, 4096, 0);
        regions_set_heat(mapping.id, 8192, 1);
        regions_view_lock();
        v = regions_view_find(captured.base);
        TAP_OK(v && v->heat && v->heat_offset == 4096, "its counters, as set");
        regions_view_unlock();
}

static void test_messages(void) {
        struct kvt_region_add add;

        regions_add_msg(&mapping, &add);
        TAP_EQ_U64(add.base, 1280 * MIB, "a mapping registers from the chunk that holds its start");
        TAP_EQ_U64(add.size_bytes, 4 * MIB, "to the end of the chunk that holds its end");
        TAP_EQ_INT(add.flags, KVT_REGION_UNTIERED, "untiered");
        TAP_EQ_INT(add.tier, KVT_TIER_NONE, "in no tier");
        TAP_EQ_INT(add.api, KVT_API_CU_MEM_MAP, "as cuMemMap");
        TAP_EQ_INT(add.rule, KVT_RULE_VMM, "by the vmm rule");
        regions_add_msg(&captured, &add);
        TAP_EQ_U64(add.base, captured.base, "a captured region registers at its base");
        TAP_EQ_INT(add.flags, 0, "tiered");
        TAP_EQ_INT(add.tier, KVT_TIER_HOST, "in host memory (it did not start in VRAM)");
}

static void test_registration(void) {
        struct shim_region r;
        size_t n;
        uint64_t bytes;

        regions_count(&n, &bytes);
        TAP_EQ_INT(n, 2, "both counted");
        TAP_EQ_U64(bytes, 67 * MIB, "their bytes");
        TAP_EQ_INT(regions_acquire_unregistered(0, &r), 0, "the registration pass finds the captured region");
        TAP_EQ_INT(r.id, captured.id, "first");
        regions_release(r.id);
        TAP_EQ_INT(regions_acquire_unregistered(captured.id, &r), 0, "and the mapping");
        TAP_OK(r.id == mapping.id && r.untiered, "untiered");
        regions_release(r.id);
        regions_mark_registered(mapping.id);
        TAP_EQ_INT(regions_acquire_unregistered(captured.id, &r), -ENOENT, "a registered mapping is not found again");
        regions_forget_registration();
        TAP_EQ_INT(regions_acquire_unregistered(captured.id, &r), 0, "a lost daemon: the mapping is unregistered");
        regions_release(r.id);
}

static void test_unmap(void) {
        struct shim_region r;

        TAP_EQ_INT(regions_take_untiered(mapping.base + MIB, 8 * MIB, &r), -ENOENT,
                   "an unmap past a mapping's start does not take it");
        TAP_EQ_INT(regions_take_untiered(captured.base, 64 * MIB, &r), -ENOENT,
                   "an unmap never takes a captured region");
        TAP_EQ_INT(regions_take_untiered(1280 * MIB, 8 * MIB, &r), 0, "an unmap over the mapping takes it");
        TAP_EQ_INT(r.id, mapping.id, "the mapping");
        TAP_EQ_INT(regions_take_untiered(1280 * MIB, 8 * MIB, &r), -ENOENT, "once");
        TAP_EQ_INT(regions_lookup((void *)(captured.base), &r), 0, "the captured region stays");
}

static void test_fork(void) {
        struct shim_region r;

        mapping.registered = false;
        TAP_EQ_INT(regions_add(&mapping), 0, "a mapping again");
        regions_atfork_child();
        TAP_EQ_INT(regions_acquire_unregistered(0, &r), -ENOENT,
                   "in a child of fork() neither region nor mapping is registered: the parent's");
        regions_view_lock();
        TAP_OK(regions_view_find(captured.base) && !regions_view_find(captured.base)->heat,
               "nor counted into the parent's heat table");
        regions_view_unlock();
}

static void *take_thread(void *arg) {
        struct shim_region r;

        *(int *)arg = regions_take((const void *)(uintptr_t)(2048 * MIB), &r);
        return NULL;
}

/* Two frees of one region while an order holds it: both wait, one takes
 * it, the other finds it gone (CUDA's error for a second free), never a
 * crash on the slot that went away while it waited. */
static void test_double_free_while_busy(void) {
        struct shim_region busy = {.device = 0, .base = 2048 * MIB, .size_bytes = 4 * MIB, .span_bytes = 4 * MIB};
        struct timespec pause = {.tv_nsec = 100 * 1000 * 1000};
        struct shim_region r;
        pthread_t th[2];
        int rc[2] = {1, 1};

        TAP_EQ_INT(regions_add(&busy), 0, "a region added");
        TAP_EQ_INT(regions_acquire(busy.id, 0, 2, &r), 0, "an order holds it");
        for (int i = 0; i < 2; i++)
                pthread_create(&th[i], NULL, take_thread, &rc[i]);
        nanosleep(&pause, NULL); /* both wait on the order, as far as a pause can tell */
        regions_release(busy.id);
        for (int i = 0; i < 2; i++)
                pthread_join(th[i], NULL);
        TAP_OK((rc[0] == 0 && rc[1] == -ENOENT) || (rc[0] == -ENOENT && rc[1] == 0),
               "one free takes it, the other finds it gone (%d, %d)", rc[0], rc[1]);
        TAP_EQ_INT(regions_lookup((void *)(uintptr_t)busy.base, &r), -ENOENT, "it is gone");
}

/* The advice bits a move reads (regions_advised()): each chunk's as
 * captured, then as set, and the bits every chunk of a range has; unknown
 * (0) for what is not whole chunks of one captured region, after a failed
 * advice, and after a spill (the SSD tier advises what it refills). */
static void test_advised(void) {
        const unsigned hu = REGION_ADVISED_HOST | REGION_ADVISED_UNMAPPED,
                       hm = REGION_ADVISED_HOST | REGION_ADVISED_MAPPED;
        struct shim_region host = {.device = 0,
                                   .base = 4096 * MIB,
                                   .size_bytes = 8 * MIB,
                                   .span_bytes = 8 * MIB,
                                   .advised = (uint8_t)hu};
        struct shim_region r;
        char *base;

        TAP_EQ_INT(regions_add(&host), 0, "a region captured in host memory");
        base = (char *)host.base;
        TAP_EQ_INT(regions_advised(base, 8 * MIB), hu, "each chunk as captured: host, accessed-by nobody");
        regions_set_advised(base + 2 * MIB, 4 * MIB, hm);
        TAP_EQ_INT(regions_advised(base + 2 * MIB, 4 * MIB), hm, "two chunks as a mapped eviction left them");
        TAP_EQ_INT(regions_advised(base, 8 * MIB), REGION_ADVISED_HOST, "all four: what each has");
        TAP_EQ_INT(regions_advised(base + 6 * MIB, 2 * MIB), hu, "the last one: as captured");
        TAP_EQ_INT(regions_advised(base + MIB, 2 * MIB), 0, "not whole chunks: unknown");
        TAP_EQ_INT(regions_advised(base + 6 * MIB, 4 * MIB), 0, "past the region's end: unknown");
        TAP_EQ_INT(regions_advised((void *)(uintptr_t)(1280 * MIB), 2 * MIB), 0, "a mapping's chunk: unknown");
        regions_set_advised(base + 2 * MIB, 2 * MIB, 0);
        TAP_EQ_INT(regions_advised(base + 2 * MIB, 2 * MIB), 0, "after a failed advice: unknown");
        TAP_EQ_INT(regions_advised(base + 4 * MIB, 2 * MIB), hm, "its neighbour kept its bits");
        TAP_EQ_INT(regions_mark_spilled(base + 4 * MIB, 2 * MIB, true, &r), 0, "that chunk spilled");
        TAP_EQ_INT(regions_mark_spilled(base + 4 * MIB, 2 * MIB, false, &r), 0, "and restored");
        TAP_EQ_INT(regions_advised(base + 4 * MIB, 2 * MIB), 0, "a restored chunk: unknown");
        TAP_EQ_INT(regions_take(base, &r), 0, "the region freed");
        TAP_EQ_INT(regions_advised(base, 2 * MIB), 0, "a freed region: unknown");
}

int main(void) {
        TAP_EQ_INT(regions_add(&captured), 0, "a captured region added");
        TAP_EQ_INT(regions_add(&mapping), 0, "a mapping added");
        TAP_OK(captured.id != mapping.id, "ids of one table: distinct");
        test_lookups_see_captured_only();
        test_view();
        test_messages();
        test_registration();
        test_unmap();
        test_double_free_while_busy();
        test_advised();
        test_fork();
        return tap_done();
}
