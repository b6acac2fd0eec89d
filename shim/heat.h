/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The shim's side of the heat table (common/heat-table.h): a sealed memfd
 * with one counter per captured chunk, created at the first capture and
 * passed to every new daemon connection.  Sources of heat (launch hooks,
 * CUPTI records, hot hints) call heat_touch(); it costs a read lock, a
 * binary search over the captured regions and relaxed atomic adds, never
 * an allocation or a message.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "protocol.h"

struct shim_region;

/* Gives r a slot and zeroed counters (creating the table on first use).
 * Returns 0, -ENOSPC when the table is full (r simply has no heat), or -errno. */
int heat_region_add(const struct shim_region *r);

/* Drops region id's slot; its counters are reused later.  Waits out any
 * heat_touch() in progress on it. */
void heat_region_del(uint32_t id);

/* Counts n accesses on every chunk of [addr, addr + len) that lies in a
 * captured region (len 0: the chunk holding addr).  Returns the number of
 * chunks counted. */
size_t heat_touch(uintptr_t addr, size_t len, uint32_t n);

/* A kernel launched with addr among its arguments: heat_touch(addr, 0, 1),
 * and one launch counted on addr's region (its slot's launches), from
 * which the daemon learns how densely each region is used. */
size_t heat_launch(uintptr_t addr);

/* Counts n uses a source lost (CUPTI records dropped) in the table's
 * header, for the daemon's status; nothing before the table exists. */
void heat_note_lost(uint64_t n);

/* Whether addr lies in a region with heat counters (takes the read lock). */
bool heat_locate(uintptr_t addr);

/* Chunk accesses counted so far by heat_touch(), for statistics. */
uint64_t heat_touch_count(void);

/* The table's memfd and its announcement, or -1 when there is no table. */
int heat_table_fd(struct kvt_heat_table *ret);

/* In the child of fork(): the table is the parent's; forget it. */
void heat_atfork_child(void);
