/* SPDX-License-Identifier: MIT */
/* The daemon's reader of heat tables (daemon/heat.c) against a registry:
 * deltas become touches, wrap-around, slot reuse, growth, lies, refusals. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include "conf.h"
#include "heat-table.h"
#include "heat-reader.h"
#include "registry.h"
#include "tap.h"

#define SLOTS 16u
#define BIG   (1u << 20)

static struct registry *reg;
static struct client *cl;
static void *map; /* the writer's view, BIG bytes reserved */
static int mfd;

static struct region *region_by_id(uint32_t id) {
        for (struct region *r = registry_regions(reg); r; r = region_next(r))
                if (region_id(r) == id)
                        return r;
        return NULL;
}

static void add_region(uint32_t id, uint64_t base, uint32_t chunks) {
        struct kvt_region_add a = {.region_id = id,
                                   .device = 0,
                                   .base = base,
                                   .size_bytes = (uint64_t)chunks * KVT_CHUNK_BYTES,
                                   .api = KVT_API_CUDA_MALLOC,
                                   .tier = KVT_TIER_HOST_MAPPED};

        if (registry_region_add(reg, cl, &a) < 0)
                exit(99);
}

static void tick(struct heat_table *t) {
        registry_advance_tick(reg);
        heat_table_tick_begin(t);
        for (struct region *r = registry_regions(reg); r; r = region_next(r))
                heat_table_collect(t, reg, r);
        heat_table_tick_end(t);
}

static uint32_t *ctr(uint64_t offset) {
        return (uint32_t *)((char *)map + offset);
}

/* A fresh sealed memfd of size bytes with a header, mapped at map. */
static int new_table(uint64_t size, int seals) {
        int fd = memfd_create("test-heat", MFD_CLOEXEC | MFD_ALLOW_SEALING);

        if (fd < 0 || ftruncate(fd, (off_t)size) < 0)
                exit(99);
        if (map)
                munmap(map, BIG);
        map = mmap(NULL, BIG, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (map == MAP_FAILED)
                exit(99);
        kvt_heat_header_init(map, SLOTS, size);
        if (seals)
                fcntl(fd, F_ADD_SEALS, seals);
        return fd;
}

static void test_refusals(void) {
        struct kvt_heat_table m = {.version = KVT_HEAT_VERSION, .n_slots = SLOTS, .size_bytes = 4096};
        struct heat_table *t = NULL;
        const char *why;
        int fd;
        FILE *f;

        fd = new_table(4096, 0);
        TAP_EQ_INT(heat_table_new(fd, &m, &t, &why), -EPERM, "unsealed memfd refused (%s)", why);
        close(fd);
        fd = new_table(4096, F_SEAL_SHRINK);
        m.size_bytes = 8192;
        TAP_EQ_INT(heat_table_new(fd, &m, &t, &why), -EBADMSG, "file smaller than announced refused (%s)",
                   why);
        m.size_bytes = 4096;
        m.n_slots = SLOTS * 2;
        TAP_EQ_INT(heat_table_new(fd, &m, &t, &why), -EBADMSG,
                   "header disagreeing with the message refused");
        close(fd);
        f = tmpfile();
        m.n_slots = SLOTS;
        if (f && ftruncate(fileno(f), 4096) == 0) {
                int r = heat_table_new(fileno(f), &m, &t, &why);
                /* /tmp may be tmpfs: then the missing seal is what refuses it. */
                TAP_OK(r == -EBADF || r == -EPERM, "a plain file refused (%d, %s)", r, why);
        }
        if (f)
                fclose(f);
}

static void test_reader(void) {
        struct kvt_heat_table m = {.version = KVT_HEAT_VERSION, .n_slots = SLOTS, .size_bytes = 4096};
        const uint64_t off = kvt_heat_counters_offset(SLOTS);
        const struct heat_table_stats *st;
        struct heat_table *t;
        const char *why;
        struct region *r5;
        uint64_t before;

        add_region(5, 0x7f0000000000ull, 8);
        r5 = region_by_id(5);
        mfd = new_table(4096, F_SEAL_SHRINK);
        kvt_heat_slot_publish(map, 0, 5, 8, off);
        TAP_EQ_INT(heat_table_new(mfd, &m, &t, &why), 0, "sealed memfd accepted");
        st = heat_table_stats(t);

        ctr(off)[1] = 2; /* touched before the daemon bound it: a capture filled at once */
        ctr(off)[2] = 70000; /* or long before: a region registered again */
        tick(t);
        TAP_EQ_U64(st->regions_bound, 1, "first tick binds the region");
        TAP_EQ_U64(st->accesses, 0, "nothing is passed on by the binding itself");
        TAP_EQ_U64(st->lost_uses, 0, "no use lost in a fresh table");
        kvt_heat_lost_add(map, 7);
        tick(t);
        TAP_EQ_U64(st->lost_uses, 7, "the uses the shim lost are read from the header");
        TAP_EQ_U64(st->accesses, 2,
                   "a first binding counts from zero: each chunk touched before it is passed on, as one use");
        TAP_EQ_INT(region_chunks(r5)[1].last_use, registry_tick(reg), "the chunk touched before it is used");

        ctr(off)[3] += 5;
        before = region_chunks(r5)[4].last_use;
        tick(t);
        TAP_EQ_U64(st->accesses, 7, "then a delta of 5 is passed on whole");
        TAP_EQ_INT(region_chunks(r5)[3].last_use, registry_tick(reg), "the touched chunk is hot now");
        TAP_EQ_INT(region_chunks(r5)[4].last_use, before, "its neighbour is not");
        tick(t);
        TAP_EQ_U64(st->accesses, 7, "no change, no access");

        /* Launches: the slot's count moves the region's launch average on,
         * by whole ticks; model is what it should be. */
        struct policy_launch_avg model = {0};

        TAP_EQ_U64(region_launch_rate(r5), 0, "no launches counted: no launch rate");
        kvt_heat_launch_add(map, 0, 3);
        tick(t);
        TAP_EQ_U64(region_launch_rate(r5), 0, "launches are counted in their tick, averaged when it is over");
        kvt_heat_launch_add(map, 0, 1);
        heat_table_collect(t, reg, r5); /* read again within the tick (a demand's re-plan) */
        kvt_heat_launch_add(map, 0, 4);
        tick(t);
        policy_launch_avg_tick(&model, 4);
        TAP_EQ_U64(region_launch_rate(r5), 0, "one tick averaged: no rate known yet");
        for (unsigned k = 1; k < POLICY_LAUNCH_FIRST_TICKS; k++) {
                tick(t);
                policy_launch_avg_tick(&model, k == 1 ? 4 : 0);
        }
        TAP_OK(region_launch_rate(r5) == policy_launch_avg_rate(&model) && region_launch_rate(r5) > 0,
               "3 and 1 read in one tick count as one tick's 4, then 4, then none: the mean of %u ticks (%u)",
               POLICY_LAUNCH_FIRST_TICKS, region_launch_rate(r5));
        TAP_OK(region_launch_rate(r5) > POLICY_LAUNCH_ONE - 8 && region_launch_rate(r5) <= POLICY_LAUNCH_ONE,
               "8 launches over 8 ticks: one a tick");
        ((struct kvt_heat_slot *)((char *)map + sizeof(struct kvt_heat_header)))->launches = 1; /* a lie */
        tick(t);
        tick(t);
        policy_launch_avg_tick(&model, 0);
        policy_launch_avg_tick(&model, 0);
        TAP_EQ_U64(region_launch_rate(r5), policy_launch_avg_rate(&model), "a count that went back counts no launch");
        kvt_heat_launch_add(map, 0, 6);
        tick(t);
        tick(t);
        policy_launch_avg_tick(&model, 0);
        policy_launch_avg_tick(&model, 6);
        TAP_EQ_U64(region_launch_rate(r5), policy_launch_avg_rate(&model), "then launches count from where it went back to");

        ctr(off)[4] = 0xfffffffeu;
        tick(t);
        ctr(off)[4] += 3; /* wraps to 1 */
        tick(t);
        TAP_EQ_U64(st->accesses - 7 - 0xfffffffeu, 3, "counters wrap modulo 2^32");

        /* The slot rewritten for the same region elsewhere (freed and
         * captured again): no delta across the change, a new baseline. */
        ctr(off + 64)[0] = 1000;
        kvt_heat_slot_publish(map, 0, 5, 8, off + 64);
        before = st->accesses;
        tick(t);
        tick(t);
        TAP_EQ_U64(st->accesses, before, "a rewritten slot is bound again with a fresh baseline");
        TAP_EQ_U64(st->regions_bound, 2, "and counted as a new binding");
        ctr(off + 64)[0] += 2;
        tick(t);
        TAP_EQ_U64(st->accesses, before + 2, "deltas flow from the new counters");

        /* Growth: a second region whose counters lie past the first mapping. */
        add_region(6, 0x7f0100000000ull, 4);
        if (ftruncate(mfd, BIG) < 0)
                exit(99);
        kvt_heat_slot_publish(map, 1, 6, 4, BIG - 64);
        kvt_heat_launch_add(map, 1, 1000000); /* counted before this daemon bound it */
        tick(t);
        tick(t);
        TAP_EQ_U64(st->remaps, 1, "the grown file was mapped again");
        ctr(BIG - 64)[1] += 7;
        tick(t);
        TAP_EQ_U64(st->accesses, before + 2 + 7, "counters past the first mapping are read");
        tick(t);
        TAP_EQ_U64(region_launch_rate(region_by_id(6)), 0,
                   "launches a slot counted before its binding are no rate: they count from it");

        /* A slot lying about its region's size is refused, not read. */
        add_region(7, 0x7f0200000000ull, 2);
        kvt_heat_slot_publish(map, 2, 7, 200, off + 256);
        tick(t);
        tick(t);
        TAP_OK(st->bad_slots > 0, "a slot whose size disagrees with the region is a bad slot");
        TAP_EQ_U64(st->regions_bound, 3, "and not bound");

        /* The region gone from the registry: its binding is dropped. */
        TAP_EQ_INT(registry_region_del(reg, cl, 5), 0, "region 5 deleted");
        ctr(off + 64)[0] += 9;
        before = st->accesses;
        tick(t);
        TAP_EQ_U64(st->accesses, before, "a deleted region's counters are not read");
        heat_table_free(t);
}

static int hint(uint32_t id, uint32_t first, uint32_t n, uint32_t kind) {
        struct kvt_hint h = {.region_id = id, .first_chunk = first, .n_chunks = n, .kind = kind};

        return registry_hint(reg, cl, &h);
}

/* Hints: the kinds the protocol accepts and what they do to the books. */
static void test_hints(void) {
        struct {
                struct kvt_msg_hdr hdr;
                struct kvt_hint h;
        } m = {{KVT_PROTO_MAGIC, KVT_PROTO_VERSION, KVT_MSG_HINT, sizeof(struct kvt_hint), 1},
               {.region_id = 9, .first_chunk = 0, .n_chunks = 1}};
        const struct policy_chunk *ch;

        /* 1-5 kvtier_hint()'s, 6-8 the shim's SSD tier's (spilled, restored) */
        for (uint32_t k = 1; k <= 9; k++) {
                m.h.kind = k;
                TAP_EQ_INT(kvt_msg_check((const struct kvt_msg *)&m, sizeof(m)), k <= 8 ? 0 : -EBADMSG,
                           "HINT kind %u %s", k, k <= 8 ? "accepted" : "refused");
        }
        add_region(9, 0x7f0300000000ull, 4);
        ch = region_chunks(region_by_id(9));
        registry_advance_tick(reg);
        TAP_EQ_INT(hint(9, 0, 2, KVT_HINT_PINNED), 0, "PINNED applied");
        TAP_OK((ch[0].flags & CHUNK_PINNED) && (ch[1].flags & CHUNK_PINNED) && !(ch[2].flags & CHUNK_PINNED),
               "PINNED sets CHUNK_PINNED on its chunks only");
        TAP_EQ_INT(ch[0].last_use, registry_tick(reg), "PINNED chunks are hot");
        TAP_EQ_INT(hint(9, 0, 1, KVT_HINT_COLD), 0, "COLD applied");
        TAP_OK(ch[0].last_use == 0 && (ch[0].flags & CHUNK_PINNED),
               "COLD makes it cold but leaves it pinned");
        TAP_EQ_INT(hint(9, 0, 2, KVT_HINT_DONE), 0, "DONE applied");
        TAP_OK(ch[1].last_use == 0 && !(ch[0].flags & CHUNK_PINNED) && !(ch[1].flags & CHUNK_PINNED),
               "DONE makes them cold and unpinned");
        registry_advance_tick(reg);
        TAP_EQ_INT(hint(9, 2, 2, KVT_HINT_WILL_NEED), 0, "WILL_NEED applied");
        TAP_OK(ch[3].last_use == registry_tick(reg) && !(ch[3].flags & CHUNK_PINNED),
               "WILL_NEED makes them hot");
        TAP_OK(!(ch[3].flags & CHUNK_HOT), "WILL_NEED is a touch, not a standing HOT");
        TAP_EQ_INT(hint(9, 0, 3, KVT_HINT_HOT), 0, "HOT applied");
        TAP_OK((ch[0].flags & CHUNK_HOT) && (ch[2].flags & CHUNK_HOT) && !(ch[3].flags & CHUNK_HOT),
               "HOT sets CHUNK_HOT on its chunks only");
        TAP_EQ_INT(hint(9, 0, 1, KVT_HINT_COLD), 0, "COLD after HOT applied");
        TAP_OK(!(ch[0].flags & CHUNK_HOT) && (ch[1].flags & CHUNK_HOT), "COLD clears CHUNK_HOT on its chunks");
        TAP_EQ_INT(hint(9, 1, 1, KVT_HINT_DONE), 0, "DONE after HOT applied");
        TAP_OK(!(ch[1].flags & CHUNK_HOT) && (ch[2].flags & CHUNK_HOT), "DONE clears CHUNK_HOT on its chunks");
        TAP_EQ_INT(hint(9, 3, 2, KVT_HINT_PINNED), -ERANGE, "a hint past the region is refused");
        TAP_EQ_INT(registry_region_del(reg, cl, 9), 0, "region 9 deleted");
}

int main(void) {
        struct kvt_hello h = {.proto_version = KVT_PROTO_VERSION, .device = 0, .name = "test"};
        struct conf *conf;

        if (conf_new(&conf) < 0 || registry_new(conf, &reg) < 0 ||
            registry_client_new(reg, 1, 0, &h, NULL, &cl) < 0)
                return 99;
        test_refusals();
        test_reader();
        test_hints();
        registry_free(reg);
        conf_free(conf);
        munmap(map, BIG);
        return tap_done();
}
