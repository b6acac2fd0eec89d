/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The index of one client session's spills, kept next to its data file so
 * that a restarted kvtierd can give the spills back: a header (who owns the
 * session: uid, pid and its start time, the token; the block size), then
 * one record per completed spill (its blocks: where, how long, XXH3, zstd
 * or not) and one tombstone per drop, appended in order.  Every record
 * carries the XXH3-64 of its bytes: a reader takes the records up to the
 * first that is torn, fails its check or contradicts itself, and ignores
 * the rest.  Nothing is fsync()ed: the index is for a daemon restart (the
 * page cache outlives the process), not for a machine crash, after which
 * no client is left to restore anything.
 *
 * Parsing is a pure function of the bytes (fuzzed by tests/fuzz/fuzz-ssd.c);
 * the writers are thin pwrite()s on a descriptor the caller owns.
 */

#include <stddef.h>
#include <stdint.h>

#include "protocol.h"
#include "ssd-block.h"

#define SSD_JOURNAL_MAGIC   0x314a44535354564bull /* "KVTSSDJ1", little-endian */
#define SSD_JOURNAL_VERSION 1u
#define SSD_RECORD_MAGIC    0x52445353u /* "SSDR" */

struct ssd_journal_header {
        uint64_t magic;
        uint32_t version;
        uint32_t uid;
        int32_t pid;
        uint32_t block_bytes; /* of every spill of the session */
        uint64_t start_time; /* the pid's start, /proc/PID/stat field 22 (clock ticks after boot); 0: unknown
                              */
        uint8_t token[KVT_SSD_TOKEN_BYTES];
        uint64_t reserved;
        uint64_t check; /* XXH3-64 of the bytes above */
};
_Static_assert(sizeof(struct ssd_journal_header) == 64, "the journal header is 64 bytes, without padding");

enum ssd_record_type {
        SSD_RECORD_SPILL = 1, /* a spill, whole on disk: n_blocks struct ssd_block follow */
        SSD_RECORD_DROP = 2,  /* the spill handle is gone */
};

/* On disk: this, n_blocks struct ssd_block, then the uint64_t XXH3-64 of both. */
struct ssd_journal_record {
        uint32_t magic;
        uint32_t type; /* enum ssd_record_type */
        uint64_t handle;
        uint64_t size_bytes; /* SPILL: the spill's; DROP: 0 */
        uint32_t n_blocks;   /* SPILL: ceil(size_bytes / block_bytes); DROP: 0 */
        uint32_t reserved;
};
_Static_assert(sizeof(struct ssd_journal_record) == 32, "a journal record is 32 bytes, without padding");
_Static_assert(sizeof(struct ssd_block) == 32, "a block is 32 bytes on disk, without padding");

/* Bytes a record with n_blocks blocks takes in the journal. */
uint64_t ssd_journal_record_bytes(uint32_t n_blocks);

/* Fills in h's magic, version and check (the caller sets the rest). */
void ssd_journal_header_seal(struct ssd_journal_header *h);

/* Copies the header at buf (len bytes) to *ret if it is one: magic,
 * version, check, a block size kvtierd could have used.  Returns 0 or
 * -EBADMSG. */
int ssd_journal_header_read(const void *buf, size_t len, struct ssd_journal_header *ret);

/* What ssd_journal_parse() hands over, record by record.  blocks points
 * into the parsed bytes (not necessarily aligned: copy it out).  A
 * callback returns 0, -ENOMEM (parsing stops with it) or another -errno:
 * the record contradicts what came before (a second spill of one handle,
 * a drop of none) and counts as the first bad one. */
struct ssd_journal_visitor {
        int (*spill)(void *ctx, const struct ssd_journal_record *rec, const void *blocks);
        int (*drop)(void *ctx, uint64_t handle);
        void *ctx;
};

/* Walks the records of a journal (buf, len bytes, header included, read
 * already into *h) and sets *ret_good to the bytes up to the end of the
 * last good one: what follows is torn or damaged and is to be cut off.
 * Every field of a record is checked (its checksum, type, handle range,
 * blocks that tile the spill at h's block size with sane offsets, sizes
 * and flags) before the visitor sees it.  Returns 0, or -ENOMEM from a
 * callback. */
int ssd_journal_parse(const void *buf, size_t len, const struct ssd_journal_header *h,
                      const struct ssd_journal_visitor *v, uint64_t *ret_good);

/* Writes the header at offset 0 of fd.  Returns 0 or -errno. */
int ssd_journal_write_header(int fd, const struct ssd_journal_header *h);

/* Appends a record at *end of fd (blocks: n_blocks of them, NULL for a
 * drop) and moves *end past it.  A failed write is cut off again, so that
 * the journal never holds a torn record the daemon made itself.  Returns 0
 * or -errno (-ENOSPC: the disk). */
int ssd_journal_append(int fd, uint64_t *end, enum ssd_record_type type, uint64_t handle,
                       uint64_t size_bytes, const struct ssd_block *blocks, uint32_t n_blocks);
