/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * "kvtier trace v1" (tests/traces/FORMAT.md): chunk accesses over time plus
 * region sizes.  The loader checks everything and names file:line.
 */

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum trace_op { TRACE_REGION = 'R', TRACE_ACCESS = 'A', TRACE_FREE = 'F' };

/* One record; regions are numbered by declaration (0, 1, ...), so an id
 * reused after F names a new region. */
struct trace_event {
        uint64_t time_ns; /* R: the time of the record before it (0 at the start) */
        uint32_t op;      /* enum trace_op */
        uint32_t region;  /* declaration index */
        uint32_t first_chunk, n_chunks; /* A: the run; R: n_chunks is the size */
        uint32_t bytes;                 /* A: bytes read of each chunk of the run (1..2 MiB) */
};

/* A chunk's bytes (KVT_CHUNK_BYTES; the trace format does not include the protocol). */
#define TRACE_CHUNK_BYTES (2u << 20)

struct trace {
        struct trace_event *events;
        size_t n_events;
        uint32_t *region_chunks; /* size of each declared region, by declaration index */
        size_t n_regions;
        uint64_t n_chunk_accesses; /* sum of A runs */
        uint64_t total_chunks;     /* sum of declared sizes */
};

/* Maximum chunks of one region (KVT_MAX_REGION_BYTES / 2 MiB). */
#define TRACE_MAX_REGION_CHUNKS (1u << 23)

/* Loads a trace from f; name is used in errors.  On error, writes
 * "name:line: what" into err and returns -EINVAL (bad input) or -ENOMEM;
 * *ret is left empty. */
int trace_load(FILE *f, const char *name, struct trace *ret, char *err, size_t errlen);

/* Frees a trace's arrays and zeroes it.  Accepts NULL. */
void trace_free(struct trace *t);
