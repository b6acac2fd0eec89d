/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The daemon's side of a shim's heat table (common/heat-table.h): the memfd
 * mapped read-only, and per region the counter values last seen, so that
 * each tick turns counter deltas into registry_chunk_touch() calls.
 *
 * Nothing in the table is trusted.  The memfd must be a shmem file sealed
 * against shrinking (so no read inside the mapping can fault), the mapping
 * is bounded by KVT_HEAT_MAX_BYTES, every slot is read as a seqlock and
 * checked against the mapping and against the region the registry holds.
 *
 * A tick: heat_table_tick_begin() on every table, heat_table_collect() for
 * every region of the table's client, heat_table_tick_end() on every table.
 */

#include "protocol.h"
#include "registry.h"

struct heat_table;

/* Takes a table announced by HEAT_TABLE with memfd fd.  On success the table
 * owns fd.  Returns 0, or -EBADF (not a regular shmem file), -EPERM (not
 * sealed against shrinking), -EBADMSG (size or header disagree with the
 * message), -ENOMEM or another -errno; *ret_why says what was wrong. */
int heat_table_new(int fd, const struct kvt_heat_table *msg, struct heat_table **ret, const char **ret_why);

/* Unmaps and closes.  Accepts NULL; returns NULL. */
struct heat_table *heat_table_free(struct heat_table *t);

void heat_table_tick_begin(struct heat_table *t);

/* Touches the chunks of reg counted since the last tick.  Returns 0 or -ENOMEM. */
int heat_table_collect(struct heat_table *t, struct registry *r, struct region *reg);

/* Binds regions that were not found in the directory yet, and forgets
 * regions that are gone.  Returns 0 or -ENOMEM. */
int heat_table_tick_end(struct heat_table *t);

/* Counters read and accesses passed on, for status and tests. */
struct heat_table_stats {
        uint64_t regions_bound;
        uint64_t accesses;  /* sum of deltas passed to registry_chunk_touch() */
        uint64_t bad_slots; /* slots ignored as malformed */
        uint64_t remaps;    /* the file grew and was mapped again */
        uint64_t lost_uses; /* uses the shim says its sources lost (the header's), last read */
};
const struct heat_table_stats *heat_table_stats(const struct heat_table *t);
