/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The SSD store's I/O: batches of reads and writes at file offsets, at most
 * queue_depth in flight, through io_uring (liburing), or pread/pwrite where
 * io_uring cannot be set up (a seccomp filter, a kernel without it: one
 * warning).  Transient errors (EAGAIN, EINTR, EIO) are retried with bounded
 * exponential backoff; a short write is continued; a short read is an error
 * of its own (-ENODATA): the store only reads what it wrote.
 *
 * A fault-injection layer sits over every completion, for tests: the
 * environment variable KVTIER_SSD_FAULTS (read once, by ssd_faults_from_env())
 * lists faults as KIND@N[xM] separated by commas: the N-th read (or write)
 * of the process, counted from 1, and M attempts in a row from there
 * (default 1; "x*": every attempt).  KIND: read-short, read-eio, read-eagain,
 * read-flip (one byte of the data read flipped), write-eio, write-eintr,
 * write-short, write-enospc; direct-refused@1: opening a file with
 * O_DIRECT fails with EINVAL, as on a filesystem without it; and
 * drop-slow@N: the N-th drop of a spill the process serves waits 5 s first,
 * as a disk slow to free its blocks would.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ssd_io;

struct ssd_io_op {
        int fd;
        bool write;
        void *buf;
        uint64_t len;
        uint64_t offset;
        int result;       /* out: 0 or -errno */
        unsigned retries; /* out: transient errors retried */
        /* private */
        uint64_t done;
        unsigned attempts;
};

/* Most retries of one operation, and the first backoff (doubling each time):
 * 1+2+4+8+16 ms at most, long enough for a controller reset to be seen. */
#define SSD_IO_MAX_RETRIES 5
#define SSD_IO_BACKOFF_MS  1

/* Parses KVTIER_SSD_FAULTS (once per process).  Returns 0, or -EINVAL for a
 * spec it cannot read (logged), after which no fault is injected. */
int ssd_faults_from_env(void);

/* Whether KVTIER_SSD_FAULTS has direct-refused. */
bool ssd_faults_refuse_direct(void);

/* Before a drop of a spill is served: waits where KVTIER_SSD_FAULTS has
 * drop-slow for this one. */
void ssd_faults_drop(void);

/* Creates an I/O context with queue_depth (1..4096) operations in flight.
 * Returns 0 or -errno; *ret_uring says whether io_uring is used. */
int ssd_io_new(unsigned queue_depth, struct ssd_io **ret, bool *ret_uring);

/* Accepts NULL; returns NULL. */
struct ssd_io *ssd_io_free(struct ssd_io *io);

/* What the caller does around each operation, while others are in flight:
 * prepare(ctx, i, op) right before op i is first submitted (fill in fd,
 * buf, len, offset, write: hash or compress what it writes), complete(ctx,
 * i, op) once op i succeeded (verify what it read).  Either returns 0 or
 * -errno, which fails op i.  Either may be NULL. */
struct ssd_io_hooks {
        int (*prepare)(void *ctx, size_t i, struct ssd_io_op *op);
        int (*complete)(void *ctx, size_t i, struct ssd_io_op *op);
        void *ctx;
};

/* Runs the n operations to completion; each gets its result.  After the
 * first failure no further operation starts (those in flight finish).
 * Returns 0 when all succeeded, else the first failed one's -errno; ops
 * never started have result -ECANCELED. */
int ssd_io_run(struct ssd_io *io, struct ssd_io_op *ops, size_t n, const struct ssd_io_hooks *hooks);
