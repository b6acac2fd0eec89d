/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "ssd-book.h"
#include "ssd-io.h"
#include "util.h"

/* The data file grows by fallocate() in steps of this: 256 MiB, one
 * session's KV at a time (the H200 bench's unit), few calls per GiB. */
#define FILE_RESERVE_STEP (256ull << 20)

/* The index is rewritten with the live spills' records only once it is
 * more than twice their size and this much more: 1 MiB, the records of
 * 32768 blocks (32 GiB of 1 MiB blocks) dropped. */
#define INDEX_COMPACT_SLACK (1ull << 20)

/* A free run of the data file. */
struct extent {
        uint64_t offset, len;
};

struct ssd_book {
        int dir_fd; /* the store's */
        char id[SSD_BOOK_ID_LEN + 1];
        struct ssd_owner owner;
        uint32_t block_bytes;
        int data_fd, index_fd;  /* -1 until the first spill */
        uint64_t index_end;     /* bytes of the index */
        uint64_t index_live;    /* of those, the header's and the recorded spills' */
        uint64_t file_end;      /* bytes of the data file in use or free below */
        uint64_t file_reserved; /* bytes fallocate()d */
        struct extent *free_ext;
        size_t n_free, cap_free;
        struct ssd_spill *spills; /* by handle, ascending */
        size_t n_spills, cap_spills;
        uint64_t next_handle; /* the last given */
        uint64_t live_bytes, stored_bytes;
};

/* ------------------------------------------------------------ names */

/* "ID.suffix" into buf. */
static const char *file_name(char *buf, size_t len, const char *id, const char *suffix) {
        snprintf(buf, len, "%s.%s", id, suffix);
        return buf;
}

#define NAME_MAX_BYTES (SSD_BOOK_ID_LEN + 16)

bool ssd_book_id_of(const char *name, const char *suffix, char *ret_id) {
        for (size_t i = 0; i < SSD_BOOK_ID_LEN; i++)
                if (!((name[i] >= '0' && name[i] <= '9') || (name[i] >= 'a' && name[i] <= 'f')))
                        return false;
        if (name[SSD_BOOK_ID_LEN] != '.' || strcmp(name + SSD_BOOK_ID_LEN + 1, suffix) != 0)
                return false;
        memcpy(ret_id, name, SSD_BOOK_ID_LEN);
        ret_id[SSD_BOOK_ID_LEN] = 0;
        return true;
}

int ssd_book_unlink(int dir_fd, const char *id) {
        /* the index last: a data file without one is nobody's (see ssd_book_open_files()) */
        static const char *const suffixes[] = {"spill", "idx.new", "idx"};
        char name[NAME_MAX_BYTES];
        int r = 0;

        for (size_t i = 0; i < ELEMENTSOF(suffixes); i++)
                if (unlinkat(dir_fd, file_name(name, sizeof(name), id, suffixes[i]), 0) < 0 &&
                    errno != ENOENT)
                        r = -errno;
        return r;
}

/* ------------------------------------------------------------ book */

/* The index's lock (flock, held as long as its descriptor is open): the
 * kvtierd that serves or keeps a book holds it, so that another one on the
 * same [ssd] dir leaves the book alone.  Returns 0, -EBUSY or -errno. */
static int index_lock(int fd) {
        if (flock(fd, LOCK_EX | LOCK_NB) == 0)
                return 0;
        return errno == EWOULDBLOCK ? -EBUSY : -errno;
}

int ssd_book_new(int dir_fd, const struct ssd_owner *owner, uint32_t block_bytes, struct ssd_book **ret) {
        struct ssd_book *b = calloc(1, sizeof(*b));
        uint64_t id;

        if (!b)
                return -ENOMEM;
        if (getrandom(&id, sizeof(id), 0) != sizeof(id)) {
                free(b);
                return -errno;
        }
        snprintf(b->id, sizeof(b->id), "%016llx", (unsigned long long)id);
        b->dir_fd = dir_fd;
        b->owner = *owner;
        b->block_bytes = block_bytes;
        b->data_fd = b->index_fd = -1;
        *ret = b;
        return 0;
}

static void header_of(const struct ssd_book *b, struct ssd_journal_header *h) {
        *h = (struct ssd_journal_header){.uid = b->owner.uid,
                                         .pid = b->owner.pid,
                                         .block_bytes = b->block_bytes,
                                         .start_time = b->owner.start_time};
        memcpy(h->token, b->owner.token, sizeof(h->token));
        ssd_journal_header_seal(h);
}

/* Opens a data file (created with create), O_DIRECT where the filesystem
 * takes it (tmpfs, in CI, may not): set afterwards, so that a refusal
 * leaves no file made by the first attempt in the way of the second. */
static int data_open(int dir_fd, const char *name, bool create, bool *ret_direct) {
        int fd = openat(dir_fd, name, O_RDWR | O_CLOEXEC | O_NOFOLLOW | (create ? O_CREAT | O_EXCL : 0),
                        0600);
        int fl;

        if (fd < 0)
                return -errno;
        fl = fcntl(fd, F_GETFL);
        *ret_direct = !ssd_faults_refuse_direct() && fl >= 0 && fcntl(fd, F_SETFL, fl | O_DIRECT) == 0;
        return fd;
}

/* The index is made (and locked) first: a sweep deletes a data file only
 * where it finds no index. */
int ssd_book_open_files(struct ssd_book *b, bool *ret_direct) {
        char name[NAME_MAX_BYTES];
        struct ssd_journal_header h;
        int r;

        b->index_fd = openat(b->dir_fd, file_name(name, sizeof(name), b->id, "idx"),
                             O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
        r = b->index_fd < 0 ? -errno : index_lock(b->index_fd);
        if (r == 0) {
                header_of(b, &h);
                r = ssd_journal_write_header(b->index_fd, &h);
        }
        if (r == 0) {
                b->data_fd = data_open(b->dir_fd, file_name(name, sizeof(name), b->id, "spill"), true,
                                       ret_direct);
                r = b->data_fd < 0 ? b->data_fd : 0;
        }
        if (r < 0) {
                if (b->index_fd >= 0)
                        (void)ssd_book_unlink(b->dir_fd, b->id);
                if (b->index_fd >= 0)
                        close(b->index_fd);
                b->data_fd = b->index_fd = -1;
                return r;
        }
        b->index_end = b->index_live = sizeof(h);
        return 0;
}

void ssd_book_free(struct ssd_book *b, bool delete_files) {
        if (!b)
                return;
        if (delete_files && b->index_fd >= 0) /* under its lock */
                (void)ssd_book_unlink(b->dir_fd, b->id);
        if (b->data_fd >= 0)
                close(b->data_fd);
        if (b->index_fd >= 0)
                close(b->index_fd);
        for (size_t i = 0; i < b->n_spills; i++)
                free(b->spills[i].blocks);
        free(b->spills);
        free(b->free_ext);
        free(b);
}

const struct ssd_owner *ssd_book_owner(const struct ssd_book *b) {
        return &b->owner;
}

const char *ssd_book_id(const struct ssd_book *b) {
        return b->id;
}

uint32_t ssd_book_block_bytes(const struct ssd_book *b) {
        return b->block_bytes;
}

bool ssd_book_has_files(const struct ssd_book *b) {
        return b->data_fd >= 0;
}

int ssd_book_data_fd(const struct ssd_book *b) {
        return b->data_fd;
}

size_t ssd_book_n_spills(const struct ssd_book *b) {
        return b->n_spills;
}

uint64_t ssd_book_live_bytes(const struct ssd_book *b) {
        return b->live_bytes;
}

uint64_t ssd_book_stored_bytes(const struct ssd_book *b) {
        return b->stored_bytes;
}

void ssd_book_raise_next_handle(struct ssd_book *b, uint64_t next) {
        if (next > 0 && next - 1 > b->next_handle)
                b->next_handle = next - 1;
}

/* ------------------------------------------------------------ spills */

/* Where handle is, or would go, in the spills (ascending). */
static size_t spill_pos(const struct ssd_book *b, uint64_t handle) {
        size_t lo = 0, hi = b->n_spills;

        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;

                if (b->spills[mid].handle < handle)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return lo;
}

struct ssd_spill *ssd_book_spill_find(struct ssd_book *b, uint64_t handle) {
        size_t i = spill_pos(b, handle);

        return i < b->n_spills && b->spills[i].handle == handle ? &b->spills[i] : NULL;
}

/* Puts a spill of handle (blocks zeroed) in its place.  Returns 0, -EEXIST
 * or -ENOMEM. */
static int spill_insert(struct ssd_book *b, uint64_t handle, uint64_t size_bytes, struct ssd_spill **ret) {
        size_t i = spill_pos(b, handle);
        uint32_t n = (uint32_t)((size_bytes + b->block_bytes - 1) / b->block_bytes);
        struct ssd_block *blocks;

        if (i < b->n_spills && b->spills[i].handle == handle)
                return -EEXIST;
        if (b->n_spills == b->cap_spills) {
                size_t cap = b->cap_spills ? b->cap_spills * 2 : 16;
                struct ssd_spill *a = realloc(b->spills, cap * sizeof(*a));

                if (!a)
                        return -ENOMEM;
                b->spills = a;
                b->cap_spills = cap;
        }
        blocks = calloc(n, sizeof(*blocks));
        if (!blocks)
                return -ENOMEM;
        memmove(&b->spills[i + 1], &b->spills[i], (b->n_spills - i) * sizeof(*b->spills));
        b->spills[i] = (struct ssd_spill){
                .handle = handle, .size_bytes = size_bytes, .n_blocks = n, .blocks = blocks};
        b->n_spills++;
        b->live_bytes += size_bytes;
        b->next_handle = MAX(b->next_handle, handle);
        *ret = &b->spills[i];
        return 0;
}

/* Takes sp out of the spills (its blocks freed, not their disk space). */
static void spill_remove(struct ssd_book *b, struct ssd_spill *sp) {
        size_t i = (size_t)(sp - b->spills);

        b->live_bytes -= sp->size_bytes;
        free(sp->blocks);
        memmove(&b->spills[i], &b->spills[i + 1], (b->n_spills - i - 1) * sizeof(*b->spills));
        b->n_spills--;
}

int ssd_book_spill_add(struct ssd_book *b, uint64_t size_bytes, struct ssd_spill **ret) {
        if (b->next_handle >= KVT_SSD_MAX_HANDLE)
                return -EOVERFLOW;
        return spill_insert(b, b->next_handle + 1, size_bytes, ret);
}

/* ------------------------------------------------------------ the data file */

static int file_alloc(struct ssd_book *b, uint64_t len, uint64_t *ret_offset) {
        for (size_t i = 0; i < b->n_free; i++)
                if (b->free_ext[i].len >= len) {
                        *ret_offset = b->free_ext[i].offset;
                        b->free_ext[i].offset += len;
                        b->free_ext[i].len -= len;
                        if (b->free_ext[i].len == 0)
                                b->free_ext[i] = b->free_ext[--b->n_free];
                        return 0;
                }
        if (b->file_end + len > (1ull << 60))
                return -EFBIG;
        if (b->file_end + len > b->file_reserved) {
                /* Ahead of the writes, in steps: O_DIRECT writes within the
                 * file's size are not serialized as extending ones are, and a
                 * full disk shows here, before anything is written. */
                uint64_t want = MAX(b->file_end + len, b->file_reserved + FILE_RESERVE_STEP);

                if (fallocate(b->data_fd, 0, (off_t)b->file_reserved, (off_t)(want - b->file_reserved)) == 0)
                        b->file_reserved = want;
                else if (errno == ENOSPC)
                        return -ENOSPC;
                /* else (EOPNOTSUPP ...): the writes extend the file */
        }
        *ret_offset = b->file_end;
        b->file_end += len;
        return 0;
}

int ssd_book_block_place(struct ssd_book *b, struct ssd_block *blk, uint32_t stored_bytes) {
        int r = file_alloc(b, ssd_block_disk_bytes(stored_bytes), &blk->file_offset);

        if (r < 0)
                return r;
        blk->stored_bytes = stored_bytes;
        b->stored_bytes += stored_bytes;
        return 0;
}

/* Adds a free run (its disk space given back already). */
static void free_run_add(struct ssd_book *b, uint64_t offset, uint64_t len) {
        if (b->n_free == b->cap_free) {
                size_t cap = b->cap_free ? b->cap_free * 2 : 64;
                struct extent *a = realloc(b->free_ext, cap * sizeof(*a));

                if (!a)
                        return; /* the run is lost to this book's file, which dies with it */
                b->free_ext = a;
                b->cap_free = cap;
        }
        b->free_ext[b->n_free++] = (struct extent){offset, len};
}

/* Gives a run back, its disk space too (a hole).  Runs are not merged: a
 * run at the end shrinks the file's end instead. */
static void file_release(struct ssd_book *b, uint64_t offset, uint64_t len) {
        if (len == 0)
                return;
        (void)fallocate(b->data_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)offset, (off_t)len);
        if (offset + len == b->file_end)
                b->file_end = offset;
        else
                free_run_add(b, offset, len);
}

/* Their file space goes back a run at a time: a spill's blocks are mostly
 * adjacent in the file, and a hole punched per block cost ~0.27 ms each on
 * the H200 machine (a 4 GiB spill's drop, 1.1 s). */
uint64_t ssd_book_blocks_unwrite(struct ssd_book *b, struct ssd_block *blocks, uint32_t n) {
        uint64_t freed = 0, run_off = 0, run_len = 0;

        for (uint32_t i = 0; i < n; i++) {
                struct ssd_block *blk = &blocks[i];
                uint64_t len = ssd_block_disk_bytes(blk->stored_bytes);

                if (!blk->stored_bytes)
                        continue;
                if (run_len && run_off + run_len == blk->file_offset)
                        run_len += len;
                else {
                        file_release(b, run_off, run_len);
                        run_off = blk->file_offset;
                        run_len = len;
                }
                b->stored_bytes -= blk->stored_bytes;
                freed += blk->stored_bytes;
                blk->stored_bytes = 0;
        }
        file_release(b, run_off, run_len);
        return freed;
}

/* ------------------------------------------------------------ the index */

/* Writes the index anew with the recorded spills only, next to it, and
 * renames it over the old one: a daemon that stops half-way leaves the old
 * index whole (and an ID.idx.new the next sweep deletes). */
static int index_compact(struct ssd_book *b) {
        char tmp[NAME_MAX_BYTES], name[NAME_MAX_BYTES];
        struct ssd_journal_header h;
        uint64_t end = sizeof(h);
        int fd, r;

        fd = openat(b->dir_fd, file_name(tmp, sizeof(tmp), b->id, "idx.new"),
                    O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0)
                return -errno;
        r = index_lock(fd); /* it is the index once renamed */
        header_of(b, &h);
        if (r == 0)
                r = ssd_journal_write_header(fd, &h);
        for (size_t i = 0; i < b->n_spills && r == 0; i++) {
                const struct ssd_spill *sp = &b->spills[i];

                if (sp->recorded)
                        r = ssd_journal_append(fd, &end, SSD_RECORD_SPILL, sp->handle, sp->size_bytes,
                                               sp->blocks, sp->n_blocks);
        }
        if (r == 0 && renameat(b->dir_fd, tmp, b->dir_fd, file_name(name, sizeof(name), b->id, "idx")) < 0)
                r = -errno;
        if (r < 0) {
                close(fd);
                (void)unlinkat(b->dir_fd, tmp, 0);
                return r;
        }
        close(b->index_fd);
        b->index_fd = fd;
        b->index_end = b->index_live = end;
        return 0;
}

int ssd_book_spill_written(struct ssd_book *b, struct ssd_spill *sp, uint32_t n) {
        int r;

        sp->n_written += n;
        if (sp->recorded || sp->n_written < sp->n_blocks)
                return 0;
        /* Before the last write's reply: a spill the client was told is on
         * disk is in the index too. */
        r = ssd_journal_append(b->index_fd, &b->index_end, SSD_RECORD_SPILL, sp->handle, sp->size_bytes,
                               sp->blocks, sp->n_blocks);
        if (r < 0) {
                sp->n_written -= n;
                return r;
        }
        sp->recorded = true;
        b->index_live += ssd_journal_record_bytes(sp->n_blocks);
        return 0;
}

uint64_t ssd_book_spill_forget(struct ssd_book *b, struct ssd_spill *sp) {
        uint64_t freed;
        int r;

        if (sp->recorded) {
                r = ssd_journal_append(b->index_fd, &b->index_end, SSD_RECORD_DROP, sp->handle, 0, NULL, 0);
                if (r < 0)
                        log_warning("Failed to record the drop of SSD spill %llu in %s.idx: %s; a restarted "
                                    "kvtierd would count it until its client ends, ignoring.",
                                    (unsigned long long)sp->handle, b->id, strerror(-r));
                b->index_live -= ssd_journal_record_bytes(sp->n_blocks);
        }
        freed = ssd_book_blocks_unwrite(b, sp->blocks, sp->n_blocks);
        spill_remove(b, sp);
        if (b->index_end > 2 * b->index_live + INDEX_COMPACT_SLACK && (r = index_compact(b)) < 0)
                log_warning("Failed to compact SSD index %s.idx: %s, ignoring.", b->id, strerror(-r));
        return freed;
}

/* ------------------------------------------------------------ loading */

int ssd_book_claim(int dir_fd, const char *id, int *ret_fd, struct ssd_journal_header *ret) {
        char name[NAME_MAX_BYTES];
        unsigned char buf[sizeof(*ret)];
        int fd = openat(dir_fd, file_name(name, sizeof(name), id, "idx"), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
        ssize_t n;
        int r;

        *ret_fd = -1;
        if (fd < 0)
                return -errno;
        r = index_lock(fd);
        if (r < 0) {
                close(fd);
                return r;
        }
        *ret_fd = fd;
        n = pread(fd, buf, sizeof(buf), 0);
        return n < 0 ? -errno : ssd_journal_header_read(buf, (size_t)n, ret);
}

static int load_spill(void *ctx, const struct ssd_journal_record *rec, const void *blocks) {
        struct ssd_book *b = ctx;
        struct ssd_spill *sp;
        int r = spill_insert(b, rec->handle, rec->size_bytes, &sp);

        if (r < 0)
                return r; /* -EEXIST: a second record of one handle, not one the daemon wrote */
        memcpy(sp->blocks, blocks, (size_t)sp->n_blocks * sizeof(*sp->blocks));
        for (uint32_t i = 0; i < sp->n_blocks; i++)
                b->stored_bytes += sp->blocks[i].stored_bytes;
        sp->n_written = sp->n_blocks;
        sp->recorded = true;
        b->index_live += ssd_journal_record_bytes(sp->n_blocks);
        return 0;
}

static int load_drop(void *ctx, uint64_t handle) {
        struct ssd_book *b = ctx;
        struct ssd_spill *sp = ssd_book_spill_find(b, handle);

        b->next_handle = MAX(b->next_handle, handle);
        if (!sp)
                return -ENOENT;
        for (uint32_t i = 0; i < sp->n_blocks; i++)
                b->stored_bytes -= sp->blocks[i].stored_bytes;
        b->index_live -= ssd_journal_record_bytes(sp->n_blocks);
        spill_remove(b, sp); /* its disk space: space_rebuild() */
        return 0;
}

/* Reads the index into b's spills; a bad tail is cut off.  Returns 0,
 * -EBADMSG (no good header), -ENOMEM, -errno. */
static int load_index(struct ssd_book *b, int fd) {
        struct ssd_journal_visitor v = {.spill = load_spill, .drop = load_drop, .ctx = b};
        struct ssd_journal_header h;
        struct stat st;
        uint64_t good = 0;
        void *map;
        int r;

        if (fstat(fd, &st) < 0)
                return -errno;
        if ((uint64_t)st.st_size < sizeof(h))
                return -EBADMSG;
        map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED)
                return -errno;
        r = ssd_journal_header_read(map, (size_t)st.st_size, &h);
        if (r == 0) {
                b->owner = (struct ssd_owner){.uid = h.uid, .pid = h.pid, .start_time = h.start_time};
                memcpy(b->owner.token, h.token, sizeof(h.token));
                b->block_bytes = h.block_bytes;
                b->index_live = sizeof(h);
                r = ssd_journal_parse(map, (size_t)st.st_size, &h, &v, &good);
        }
        munmap(map, (size_t)st.st_size);
        if (r < 0)
                return r;
        if (good < (uint64_t)st.st_size) {
                log_warning(
                        "SSD index %s.idx of pid %d (uid %u): the %llu bytes after its last good record are "
                        "torn or damaged; the spills they held are lost, the other %zu kept, ignoring.",
                        b->id, (int)h.pid, (unsigned)h.uid,
                        (unsigned long long)((uint64_t)st.st_size - good), b->n_spills);
                if (ftruncate(fd, (off_t)good) < 0)
                        return -errno; /* records appended after the damage would never be read */
        }
        b->index_end = good;
        return 0;
}

static int extent_cmp(const void *a, const void *b) {
        const struct extent *x = a, *y = b;

        return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* The free runs of the data file of file_bytes: every gap between the
 * spills' blocks (what a spill that never completed, or a drop whose
 * space was not punched, left there) is freed, the tail cut off. */
static int space_rebuild(struct ssd_book *b, uint64_t file_bytes) {
        size_t n = 0, k = 0;
        struct extent *used;
        uint64_t at = 0;

        for (size_t i = 0; i < b->n_spills; i++)
                n += b->spills[i].n_blocks;
        used = malloc(MAX(n, (size_t)1) * sizeof(*used));
        if (!used)
                return -ENOMEM;
        for (size_t i = 0; i < b->n_spills; i++)
                for (uint32_t j = 0; j < b->spills[i].n_blocks; j++) {
                        const struct ssd_block *blk = &b->spills[i].blocks[j];

                        used[k++] =
                                (struct extent){blk->file_offset, ssd_block_disk_bytes(blk->stored_bytes)};
                }
        qsort(used, n, sizeof(*used), extent_cmp);
        for (size_t i = 0; i < n; i++) {
                if (used[i].offset > at) {
                        (void)fallocate(b->data_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)at,
                                        (off_t)(used[i].offset - at));
                        free_run_add(b, at, used[i].offset - at);
                }
                at = MAX(at, used[i].offset + used[i].len);
        }
        free(used);
        b->file_end = b->file_reserved = at;
        if (file_bytes > at && ftruncate(b->data_fd, (off_t)at) < 0)
                b->file_reserved = file_bytes;
        return 0;
}

int ssd_book_load(int dir_fd, const char *id, int index_fd, struct ssd_book **ret) {
        struct ssd_book *b = calloc(1, sizeof(*b));
        struct stat st;
        bool direct;
        int r;

        if (!b)
                return -ENOMEM;
        snprintf(b->id, sizeof(b->id), "%s", id);
        b->dir_fd = dir_fd;
        b->data_fd = -1;
        b->index_fd = index_fd;
        r = load_index(b, index_fd);
        if (r == 0) {
                char name[NAME_MAX_BYTES];

                b->data_fd = data_open(dir_fd, file_name(name, sizeof(name), id, "spill"), false, &direct);
                r = b->data_fd < 0 ? b->data_fd : fstat(b->data_fd, &st) < 0 ? -errno : 0;
        }
        if (r == 0 && (!S_ISREG(st.st_mode) || st.st_nlink != 1))
                r = -EBADMSG;
        if (r == 0)
                r = space_rebuild(b, (uint64_t)st.st_size);
        if (r < 0) {
                b->index_fd = -1; /* the caller's again */
                ssd_book_free(b, false);
                return r;
        }
        *ret = b;
        return 0;
}
