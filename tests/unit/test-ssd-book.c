/* SPDX-License-Identifier: MIT */
/* ssd-book.c and ssd-journal.c: a session's spills kept in files and read
 * back as a restarted daemon reads them; a torn or damaged index tail; the
 * index compacted; the data file's free runs rebuilt. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ssd-book.h"
#include "tap.h"
#include "util.h"

#define MIB (1ull << 20)

static int dir_fd = -1;
static char dir_path[64];

static const struct ssd_owner owner = {
        .uid = 1234, .pid = 4321, .start_time = 777, .token = {1, 2, 3, 4, 5}};

/* A spill of size bytes whose blocks are placed (metadata only: the data
 * is not the book's business) and written.  Returns its handle, 0 on error. */
static uint64_t spill(struct ssd_book *b, uint64_t size) {
        struct ssd_spill *sp;
        uint64_t h;

        if (ssd_book_spill_add(b, size, &sp) < 0)
                return 0;
        h = sp->handle;
        for (uint32_t i = 0; i < sp->n_blocks; i++) {
                struct ssd_block *blk = &sp->blocks[i];

                blk->raw_bytes =
                        (uint32_t)MIN(ssd_book_block_bytes(b), size - (uint64_t)i * ssd_book_block_bytes(b));
                blk->hash = h * 1000 + i;
                if (ssd_book_block_place(b, blk, blk->raw_bytes) < 0)
                        return 0;
        }
        return ssd_book_spill_written(b, sp, sp->n_blocks) == 0 ? h : 0;
}

static void forget(struct ssd_book *b, uint64_t h) {
        struct ssd_spill *sp = ssd_book_spill_find(b, h);

        if (sp)
                (void)ssd_book_spill_forget(b, sp);
}

/* Claims and loads book id, as the next daemon's sweep does. */
static int load(const char *id, struct ssd_book **ret) {
        struct ssd_journal_header h;
        int fd, r = ssd_book_claim(dir_fd, id, &fd, &h);

        if (r == 0 && (r = ssd_book_load(dir_fd, id, fd, ret)) == 0)
                return 0;
        if (fd >= 0)
                close(fd);
        return r;
}

/* Keeps b's files, loads them as the next daemon would. */
static struct ssd_book *reload(struct ssd_book *b) {
        char id[SSD_BOOK_ID_LEN + 1];
        struct ssd_book *back = NULL;

        snprintf(id, sizeof(id), "%s", ssd_book_id(b));
        ssd_book_free(b, false);
        return load(id, &back) == 0 ? back : NULL;
}

static off_t index_size(const char *id) {
        char name[64];
        struct stat st;

        snprintf(name, sizeof(name), "%s.idx", id);
        return fstatat(dir_fd, name, &st, 0) == 0 ? st.st_size : -1;
}

static void damage_index(const char *id, bool cut) {
        char name[64];
        int fd;
        off_t n;
        unsigned char c;

        snprintf(name, sizeof(name), "%s.idx", id);
        fd = openat(dir_fd, name, O_RDWR);
        n = lseek(fd, 0, SEEK_END);
        if (cut) {
                (void)!ftruncate(fd, n - 5);
        } else if (pread(fd, &c, 1, n - 20) == 1) {
                c ^= 0x10;
                (void)!pwrite(fd, &c, 1, n - 20);
        }
        close(fd);
}

/* A book loaded again: the place and handle of a dropped spill. */
static void test_reuse(struct ssd_book *b, uint64_t h1) {
        struct ssd_spill *sp;
        char id[SSD_BOOK_ID_LEN + 1];

        forget(b, h1);
        ssd_book_raise_next_handle(b, 1);
        TAP_EQ_U64(spill(b, MIB), 3, "a handle is never given twice: the next is 3");
        /* spill 1's first 4 MiB are free again: a new block goes there */
        b = reload(b);
        TAP_OK(b && ssd_book_n_spills(b) == 2 && !ssd_book_spill_find(b, h1), "its drop was recorded");
        if (!b)
                return;
        sp = ssd_book_spill_find(b, 3);
        TAP_OK(sp && sp->blocks[0].file_offset < 4 * MIB, "spill 3 took the place spill 1 left");
        forget(b, 3);
        b = reload(b);
        TAP_OK(b != NULL, "loaded again");
        if (!b)
                return;
        ssd_book_raise_next_handle(b, 100);
        TAP_EQ_U64(spill(b, MIB), 100, "the next handle is raised to what the client holds");
        {
                struct ssd_block blk = {0};

                TAP_EQ_INT(ssd_book_block_place(b, &blk, 4096), 0, "a block placed");
                TAP_OK(blk.file_offset < 4 * MIB, "in the runs freed when loading");
                (void)ssd_book_blocks_unwrite(b, &blk, 1);
        }
        snprintf(id, sizeof(id), "%s", ssd_book_id(b));
        ssd_book_free(b, true);
        TAP_EQ_INT(index_size(id), -1, "deleted with its files");
}

static void test_round_trip(void) {
        struct ssd_book *b = NULL;
        struct ssd_journal_header h;
        struct ssd_spill *sp;
        bool direct;
        uint64_t h1, h2;
        char id[SSD_BOOK_ID_LEN + 1];

        TAP_EQ_INT(ssd_book_new(dir_fd, &owner, 1 * MIB, &b), 0, "a new book");
        TAP_EQ_INT(ssd_book_open_files(b, &direct), 0, "its files are made");
        h1 = spill(b, 3 * MIB + 5);
        h2 = spill(b, 2 * MIB);
        TAP_OK(h1 == 1 && h2 == 2, "two spills, handles 1 and 2");
        snprintf(id, sizeof(id), "%s", ssd_book_id(b));
        {
                int fd;

                TAP_EQ_INT(ssd_book_claim(dir_fd, id, &fd, &h), -EBUSY, "a book in use cannot be claimed");
                TAP_EQ_INT(fd, -1, "and gives no descriptor");
        }
        b = reload(b);
        TAP_OK(b && memcmp(ssd_book_owner(b)->token, owner.token, sizeof(owner.token)) == 0 &&
                       ssd_book_owner(b)->uid == owner.uid && ssd_book_owner(b)->pid == owner.pid &&
                       ssd_book_owner(b)->start_time == 777 && ssd_book_block_bytes(b) == MIB,
               "its index header has the owner, token and block size");
        b = reload(b);
        TAP_OK(b != NULL, "a stopped daemon's book loads");
        if (!b)
                return;
        TAP_EQ_INT(ssd_book_n_spills(b), 2, "with both spills");
        TAP_EQ_U64(ssd_book_live_bytes(b), 5 * MIB + 5, "and their bytes");
        sp = ssd_book_spill_find(b, h1);
        TAP_OK(sp && sp->n_blocks == 4 && sp->recorded && sp->blocks[3].raw_bytes == 5 &&
                       sp->blocks[2].hash == 1002,
               "spill 1's blocks are as written");
        test_reuse(b, h1);
}

static void test_damage(bool cut) {
        const char *what = cut ? "torn" : "flipped";
        struct ssd_book *b = NULL;
        bool direct;
        char id[SSD_BOOK_ID_LEN + 1];
        off_t before;

        if (ssd_book_new(dir_fd, &owner, 1 * MIB, &b) < 0 || ssd_book_open_files(b, &direct) < 0)
                return;
        spill(b, 2 * MIB);
        spill(b, 3 * MIB);
        before = index_size(ssd_book_id(b));
        spill(b, 4 * MIB);
        snprintf(id, sizeof(id), "%s", ssd_book_id(b));
        ssd_book_free(b, false);
        damage_index(id, cut);
        TAP_EQ_INT(load(id, &b), 0, "%s tail: the book loads", what);
        TAP_OK(ssd_book_n_spills(b) == 2 && ssd_book_spill_find(b, 1) && ssd_book_spill_find(b, 2) &&
                       !ssd_book_spill_find(b, 3),
               "%s tail: the damaged spill is lost, the others kept", what);
        TAP_EQ_INT(index_size(id), before, "%s tail: the index is cut back to its last good record", what);
        ssd_book_raise_next_handle(b, 4); /* the client's SSD_HELLO: it holds handle 3 */
        TAP_EQ_U64(spill(b, MIB), 4, "%s tail: a spill after it (handle 4, not 3 again)", what);
        b = reload(b);
        TAP_OK(b && ssd_book_n_spills(b) == 3 && ssd_book_spill_find(b, 4),
               "%s tail: what was appended after the cut is read back", what);
        ssd_book_free(b, true);
}

static void test_compaction(void) {
        struct ssd_book *b = NULL;
        bool direct;
        uint64_t keep;
        char id[SSD_BOOK_ID_LEN + 1];

        /* 64 KiB blocks: a 64 MiB spill's record is 32 KiB */
        if (ssd_book_new(dir_fd, &owner, 64 << 10, &b) < 0 || ssd_book_open_files(b, &direct) < 0)
                return;
        keep = spill(b, 64 * MIB);
        for (int i = 0; i < 200; i++)
                forget(b, spill(b, 64 * MIB));
        snprintf(id, sizeof(id), "%s", ssd_book_id(b));
        TAP_OK(index_size(id) < 4 * (off_t)MIB, "200 spills dropped: the index was compacted (%lld bytes)",
               (long long)index_size(id));
        b = reload(b);
        TAP_OK(b && ssd_book_n_spills(b) == 1 && ssd_book_spill_find(b, keep), "the compacted index loads");
        TAP_EQ_U64(b ? spill(b, MIB) : 0, 202, "and hands out no old handle");
        ssd_book_free(b, true);
}

/* A dropped spill's blocks go back as one run where they were adjacent:
 * four 256 KiB blocks freed between two spills hold a 1 MiB block after
 * (freed a block at a time, they would not, and it went to the file's end). */
static void test_runs(void) {
        struct ssd_book *b = NULL;
        struct ssd_spill *sp;
        struct ssd_block blk = {0};
        bool direct;
        uint64_t h1;

        if (ssd_book_new(dir_fd, &owner, 1 * MIB, &b) < 0 || ssd_book_open_files(b, &direct) < 0)
                abort();
        if (ssd_book_spill_add(b, 4 * MIB, &sp) < 0)
                abort();
        h1 = sp->handle;
        for (uint32_t i = 0; i < 4; i++) { /* compressed to a quarter each */
                sp->blocks[i].raw_bytes = MIB;
                if (ssd_book_block_place(b, &sp->blocks[i], MIB / 4) < 0)
                        abort();
        }
        TAP_OK(sp->blocks[3].file_offset == sp->blocks[0].file_offset + 3 * MIB / 4, "runs: four adjacent blocks");
        TAP_OK(spill(b, 2 * MIB) != 0, "runs: a spill after them");
        forget(b, h1);
        TAP_EQ_INT(ssd_book_block_place(b, &blk, MIB), 0, "runs: a 1 MiB block placed");
        TAP_EQ_U64(blk.file_offset, 0, "runs: where the four were, as one run");
        (void)ssd_book_blocks_unwrite(b, &blk, 1);
        ssd_book_free(b, true);
}

int main(void) {
        char id[SSD_BOOK_ID_LEN + 1];

        snprintf(dir_path, sizeof(dir_path), "%s/kvtier-ssd-book.XXXXXX", "/tmp");
        if (!mkdtemp(dir_path) || (dir_fd = open(dir_path, O_RDONLY | O_DIRECTORY)) < 0)
                return 99;
        TAP_OK(ssd_book_id_of("0123456789abcdef.idx", "idx", id) && strcmp(id, "0123456789abcdef") == 0,
               "a book's index name");
        TAP_OK(!ssd_book_id_of("0123456789abcdef.idx.new", "idx", id), "not its compaction's");
        TAP_OK(!ssd_book_id_of("0123456789ABCDEF.idx", "idx", id) && !ssd_book_id_of("abc.idx", "idx", id),
               "nor another's");
        test_round_trip();
        test_damage(true);
        test_damage(false);
        test_compaction();
        test_runs();
        close(dir_fd);
        TAP_EQ_INT(rmdir(dir_path), 0, "nothing left in the directory");
        return tap_done();
}
