/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * One client session's spills as the SSD store keeps them: a data file and
 * its index (ssd-journal.h) in [ssd] dir, named by a random id (ID.spill,
 * ID.idx, both 0600), the free runs of the data file, and the blocks of
 * every spill.  A book is made for a new session (its files at its first
 * spill) or loaded from the files a stopped kvtierd left (ssd_book_load()),
 * and ends either with its files deleted (the client ended) or kept (the
 * daemon stops: the next one gives them back).  A book has one user at a
 * time (its session's thread, or the store under its lock); the kvtierd
 * that has it holds its index's flock, so that another one sharing the
 * directory leaves it alone.
 */

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "protocol.h"
#include "ssd-block.h"
#include "ssd-journal.h"

/* Hex digits of a book's id (64 random bits), the stem of its file names. */
#define SSD_BOOK_ID_LEN 16

/* Who a book is for, as its index header records it. */
struct ssd_owner {
        uint32_t uid;
        pid_t pid;
        uint64_t start_time; /* identity_pid_start_time(); 0: unknown */
        uint8_t token[KVT_SSD_TOKEN_BYTES];
};

/* One spill: its blocks, in order. */
struct ssd_spill {
        uint64_t handle;
        uint64_t size_bytes;
        uint32_t n_blocks;
        uint32_t n_written; /* blocks written; all of them: the spill is in the index */
        bool recorded;      /* its SPILL record is in the index (a DROP then follows it) */
        struct ssd_block *blocks;
};

struct ssd_book;

/* A new, empty book (no files yet) of block_bytes blocks, with a random id.
 * Returns 0, -ENOMEM or -errno (getrandom). */
int ssd_book_new(int dir_fd, const struct ssd_owner *owner, uint32_t block_bytes, struct ssd_book **ret);

/* Creates the book's files: the data file (O_DIRECT unless the filesystem
 * refuses it or KVTIER_SSD_FAULTS says direct-refused; *ret_direct says)
 * and the index with its header.  Returns 0 or -errno. */
int ssd_book_open_files(struct ssd_book *b, bool *ret_direct);

/* Opens the index of book id (SSD_BOOK_ID_LEN hex digits) in dir_fd, takes
 * its lock and reads its header.  *ret_fd is then the caller's (the lock
 * goes with it), also when the header is bad.  Returns 0, -EBUSY (another
 * kvtierd holds the book: leave it alone), -EBADMSG (no good header: torn,
 * damaged, another version) or -errno. */
int ssd_book_claim(int dir_fd, const char *id, int *ret_fd, struct ssd_journal_header *ret);

/* Loads book id from its files: the index (index_fd, claimed) with its good
 * records (a torn or damaged tail is logged and cut off; its spills are
 * lost, the others kept) and the data file, whose runs that no spill uses
 * are freed.  index_fd is the book's on success, the caller's on failure.
 * Returns 0, -ENOMEM, -EBADMSG, -errno. */
int ssd_book_load(int dir_fd, const char *id, int index_fd, struct ssd_book **ret);

/* Whether name is "ID.suffix" for a book id (then copied to ret_id, of
 * SSD_BOOK_ID_LEN + 1 bytes). */
bool ssd_book_id_of(const char *name, const char *suffix, char *ret_id);

/* Deletes the files of book id (those there are).  Returns 0 or -errno. */
int ssd_book_unlink(int dir_fd, const char *id);

/* Frees the book, closing its files: deleted with delete_files, else left
 * for the next kvtierd.  Accepts NULL. */
void ssd_book_free(struct ssd_book *b, bool delete_files);

const struct ssd_owner *ssd_book_owner(const struct ssd_book *b);
const char *ssd_book_id(const struct ssd_book *b);
uint32_t ssd_book_block_bytes(const struct ssd_book *b);
bool ssd_book_has_files(const struct ssd_book *b);
int ssd_book_data_fd(const struct ssd_book *b);
size_t ssd_book_n_spills(const struct ssd_book *b);
/* Bytes the book's spills stand for, and the bytes of their blocks stored. */
uint64_t ssd_book_live_bytes(const struct ssd_book *b);
uint64_t ssd_book_stored_bytes(const struct ssd_book *b);

/* The next spill's handle is at least next (1 .. KVT_SSD_MAX_HANDLE). */
void ssd_book_raise_next_handle(struct ssd_book *b, uint64_t next);

/* A new spill of size_bytes (no block written).  Returns 0 or -ENOMEM; *ret
 * is valid until the next add or forget. */
int ssd_book_spill_add(struct ssd_book *b, uint64_t size_bytes, struct ssd_spill **ret);

/* The spill of handle, or NULL. */
struct ssd_spill *ssd_book_spill_find(struct ssd_book *b, uint64_t handle);

/* Places a block of stored_bytes in the data file (its disk size rounded
 * up to KVT_SSD_ALIGN): blk's file_offset and stored_bytes are set.
 * Returns 0, -ENOSPC or -EFBIG. */
int ssd_book_block_place(struct ssd_book *b, struct ssd_block *blk, uint32_t stored_bytes);

/* Gives the places of blocks [0, n) back (a write that failed, a spill
 * dropped): they count as never written.  Returns the bytes they stored. */
uint64_t ssd_book_blocks_unwrite(struct ssd_book *b, struct ssd_block *blocks, uint32_t n);

/* n more blocks of sp are written (each written once: a spill is not
 * rewritten); once all are, its record goes to the
 * index.  Returns 0 or -errno (the record could not be written: the n
 * blocks count as not written, as after a failed write; unwrite them). */
int ssd_book_spill_written(struct ssd_book *b, struct ssd_spill *sp, uint32_t n);

/* Forgets sp (a tombstone in the index if it was recorded), frees its
 * blocks and their disk space.  Returns the bytes its blocks had stored. */
uint64_t ssd_book_spill_forget(struct ssd_book *b, struct ssd_spill *sp);
