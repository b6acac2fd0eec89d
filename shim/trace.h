/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The trace recorder (KVTIER_DEBUG=trace=PATH): every access the heat sampler
 * counts, written as text for kvtier-sim (tools/) by a background thread.
 *
 *   kvtier-trace 1                                  first line
 *   # ...                                           comments
 *   R <region_id> <n_chunks>                        a region, before its first access
 *   A <time_ns> <region_id> <first_chunk> <n_chunks> an access to a run of chunks
 *   F <time_ns> <region_id>                         the region is freed
 *
 * Times are CLOCK_MONOTONIC nanoseconds and never decrease.  Hooks only
 * append to a bounded ring under a short lock; when the writer falls behind,
 * records are dropped and counted in a comment, never waited for.
 */

#include <stdint.h>

/* Starts recording to path (truncated).  Returns 0 or -errno. */
int trace_start(const char *path);

/* Records an access of n chunks from first in a region of region_chunks. */
void trace_access(uint32_t region_id, uint32_t region_chunks, uint32_t first, uint32_t n);

/* Records that a region was freed. */
void trace_free(uint32_t region_id);

/* Writes out what is buffered and stops (at exit). */
void trace_stop(void);

/* In the child of fork(): stops recording there (the parent keeps on). */
void trace_atfork_child(void);
