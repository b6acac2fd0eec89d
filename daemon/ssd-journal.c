/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>
#include <xxhash.h>

#include "ssd-journal.h"
#include "util.h"

/* The bounds of [ssd] block_size (daemon/conf.c's table). */
#define BLOCK_MIN_BYTES (64u << 10)
#define BLOCK_MAX_BYTES (64u << 20)

/* Where blocks may lie: file_alloc() in ssd-book.c stops there. */
#define FILE_MAX_BYTES (1ull << 60)

uint64_t ssd_journal_record_bytes(uint32_t n_blocks) {
        return sizeof(struct ssd_journal_record) + (uint64_t)n_blocks * sizeof(struct ssd_block) +
               sizeof(uint64_t);
}

void ssd_journal_header_seal(struct ssd_journal_header *h) {
        h->magic = SSD_JOURNAL_MAGIC;
        h->version = SSD_JOURNAL_VERSION;
        h->check = XXH3_64bits(h, offsetof(struct ssd_journal_header, check));
}

int ssd_journal_header_read(const void *buf, size_t len, struct ssd_journal_header *ret) {
        struct ssd_journal_header h;

        if (len < sizeof(h))
                return -EBADMSG;
        memcpy(&h, buf, sizeof(h));
        if (h.magic != SSD_JOURNAL_MAGIC || h.version != SSD_JOURNAL_VERSION ||
            h.check != XXH3_64bits(&h, offsetof(struct ssd_journal_header, check)))
                return -EBADMSG;
        if (h.block_bytes < BLOCK_MIN_BYTES || h.block_bytes > BLOCK_MAX_BYTES ||
            h.block_bytes % KVT_SSD_ALIGN || h.pid <= 0)
                return -EBADMSG;
        *ret = h;
        return 0;
}

/* Whether block i of a spill of size_bytes in blocks of bs bytes is one
 * the store could have written. */
static bool block_valid(const struct ssd_block *b, uint64_t size_bytes, uint32_t bs, uint32_t i) {
        uint64_t raw = MIN((uint64_t)bs, size_bytes - (uint64_t)i * bs);

        if (b->raw_bytes != raw || b->stored_bytes == 0 || b->reserved ||
            (b->flags & ~(uint32_t)_SSD_BLOCK_FLAGS_ALL) || (b->flags & SSD_BLOCK_CODECS) == SSD_BLOCK_CODECS)
                return false;
        if ((b->flags & SSD_BLOCK_CODECS) ? b->stored_bytes >= b->raw_bytes : b->stored_bytes != b->raw_bytes)
                return false;
        return b->file_offset % KVT_SSD_ALIGN == 0 && b->file_offset < FILE_MAX_BYTES &&
               b->file_offset + ssd_block_disk_bytes(b->stored_bytes) <= FILE_MAX_BYTES;
}

/* Checks the record at p (left bytes from there).  Returns its length in
 * the journal, or 0 for one that is torn or bad. */
static uint64_t record_check(const unsigned char *p, uint64_t left, const struct ssd_journal_header *h,
                             struct ssd_journal_record *ret) {
        struct ssd_journal_record rec;
        uint64_t len, check;

        if (left < ssd_journal_record_bytes(0))
                return 0;
        memcpy(&rec, p, sizeof(rec));
        if (rec.magic != SSD_RECORD_MAGIC || rec.reserved || rec.handle == 0 ||
            rec.handle > KVT_SSD_MAX_HANDLE)
                return 0;
        if (rec.type == SSD_RECORD_SPILL) {
                if (rec.size_bytes == 0 || rec.size_bytes > KVT_SSD_MAX_SPILL ||
                    rec.n_blocks != (rec.size_bytes + h->block_bytes - 1) / h->block_bytes)
                        return 0;
        } else if (rec.type != SSD_RECORD_DROP || rec.size_bytes || rec.n_blocks)
                return 0;
        len = ssd_journal_record_bytes(rec.n_blocks);
        if (len > left)
                return 0; /* torn: the daemon stopped while writing it */
        memcpy(&check, p + len - sizeof(check), sizeof(check));
        if (check != XXH3_64bits(p, len - sizeof(check)))
                return 0;
        for (uint32_t i = 0; i < rec.n_blocks; i++) {
                struct ssd_block b;

                memcpy(&b, p + sizeof(rec) + (uint64_t)i * sizeof(b), sizeof(b));
                if (!block_valid(&b, rec.size_bytes, h->block_bytes, i))
                        return 0;
        }
        *ret = rec;
        return len;
}

int ssd_journal_parse(const void *buf, size_t len, const struct ssd_journal_header *h,
                      const struct ssd_journal_visitor *v, uint64_t *ret_good) {
        const unsigned char *p = buf;
        uint64_t off = sizeof(*h);

        *ret_good = MIN((uint64_t)len, off);
        while (off < len) {
                struct ssd_journal_record rec;
                uint64_t n = record_check(p + off, len - off, h, &rec);
                int r;

                if (n == 0)
                        break;
                r = rec.type == SSD_RECORD_SPILL ? v->spill(v->ctx, &rec, p + off + sizeof(rec))
                                                 : v->drop(v->ctx, rec.handle);
                if (r == -ENOMEM)
                        return r;
                if (r < 0)
                        break;
                off += n;
                *ret_good = off;
        }
        return 0;
}

/* pwritev() of the whole of iov[0..n) at off, continuing short writes. */
static int pwritev_full(int fd, struct iovec *iov, int n, uint64_t off) {
        while (n > 0) {
                ssize_t k = pwritev(fd, iov, n, (off_t)off);

                if (k < 0 && errno == EINTR)
                        continue;
                if (k < 0)
                        return -errno;
                if (k == 0)
                        return -EIO;
                off += (uint64_t)k;
                while (n > 0 && (size_t)k >= iov->iov_len) {
                        k -= (ssize_t)iov->iov_len;
                        iov++;
                        n--;
                }
                if (n > 0) {
                        iov->iov_base = (char *)iov->iov_base + k;
                        iov->iov_len -= (size_t)k;
                }
        }
        return 0;
}

int ssd_journal_write_header(int fd, const struct ssd_journal_header *h) {
        struct iovec iov = {.iov_base = (void *)h, .iov_len = sizeof(*h)};

        return pwritev_full(fd, &iov, 1, 0);
}

int ssd_journal_append(int fd, uint64_t *end, enum ssd_record_type type, uint64_t handle,
                       uint64_t size_bytes, const struct ssd_block *blocks, uint32_t n_blocks) {
        struct ssd_journal_record rec = {.magic = SSD_RECORD_MAGIC,
                                         .type = type,
                                         .handle = handle,
                                         .size_bytes = size_bytes,
                                         .n_blocks = n_blocks};
        size_t blocks_len = (size_t)n_blocks * sizeof(*blocks);
        XXH3_state_t *st = XXH3_createState();
        uint64_t check;
        struct iovec iov[3];
        int r;

        if (!st)
                return -ENOMEM;
        XXH3_64bits_reset(st);
        XXH3_64bits_update(st, &rec, sizeof(rec));
        if (blocks_len)
                XXH3_64bits_update(st, blocks, blocks_len);
        check = XXH3_64bits_digest(st);
        XXH3_freeState(st);
        iov[0] = (struct iovec){.iov_base = &rec, .iov_len = sizeof(rec)};
        iov[1] = (struct iovec){.iov_base = (void *)blocks, .iov_len = blocks_len};
        iov[2] = (struct iovec){.iov_base = &check, .iov_len = sizeof(check)};
        r = pwritev_full(fd, iov, 3, *end);
        if (r < 0) {
                (void)ftruncate(fd, (off_t)*end);
                return r;
        }
        *end += ssd_journal_record_bytes(n_blocks);
        return 0;
}
