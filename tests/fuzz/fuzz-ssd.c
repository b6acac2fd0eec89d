/* SPDX-License-Identifier: MIT */
/*
 * Fuzzes the SSD store's restore path for one block (daemon/ssd-block.c):
 * the block's metadata (where it is, how many bytes are stored and stand
 * for, its flags and checksum) against the bytes read back.  The first
 * byte picks a mode: raw bytes as they come, or a real zstd frame of the
 * input with metadata that is right, or right but for one fuzzed field, so
 * that inputs reach the decompressor and the checksum.  Invariants: nothing
 * is written past the output buffer; success only when the output's XXH3
 * equals the block's hash and the output holds raw_bytes; a block that
 * claims more stored bytes than were read is -ENODATA.
 *
 * A first byte with its top bit set fuzzes the spills' index instead
 * (daemon/ssd-journal.c): the input decides a journal, written through
 * the daemon's own writer into a memfd (so its checksums are right), then
 * cut or flipped at one place, and parsed.  Invariants: every record the
 * parser hands over is one the writer wrote, intact, with blocks that tile
 * its spill; an untouched journal parses whole; one damaged at byte P
 * parses to at most the last record that ends before P.
 */
#include "config.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz.h"
#include "protocol.h"
#include "ssd-block.h"
#include "ssd-journal.h"
#include "util.h"

#define OUT_CAP (64u * 1024u)
#define CANARY  64u

static unsigned char out[OUT_CAP + CANARY];
static unsigned char stored[OUT_CAP * 2];
static unsigned long reached_zstd_ok, reached_lz4_ok, reached_raw_ok, reached_checksum;

static uint32_t u32(const uint8_t *p) {
        uint32_t v;
        memcpy(&v, p, 4);
        return v;
}

/* ------------------------------------------------------------ the index */

#define J_MAX_RECORDS 64
#define J_MAX_BLOCKS  4

static unsigned char jbuf[1u << 16];
static uint64_t jends[J_MAX_RECORDS + 1]; /* where each record the writer wrote ends */
static size_t j_written, j_seen;
static unsigned long reached_whole, reached_cut;

static uint16_t u16(const uint8_t *p) {
        uint16_t v;
        memcpy(&v, p, 2);
        return v;
}

/* Blocks that tile a spill of size bytes in blocks of bs, zstd or not by bits. */
static uint32_t blocks_for(struct ssd_block *blk, uint64_t size, uint32_t bs, uint8_t bits, uint16_t at) {
        uint32_t n = (uint32_t)((size + bs - 1) / bs);

        for (uint32_t i = 0; i < n; i++) {
                uint32_t raw = (uint32_t)MIN((uint64_t)bs, size - (uint64_t)i * bs);
                bool zstd = (bits >> i) & 1 && raw > 1;

                blk[i] = (struct ssd_block){.file_offset = ((uint64_t)at + i) * KVT_SSD_ALIGN,
                                            .hash = size ^ i,
                                            .stored_bytes = zstd ? raw / 2 : raw,
                                            .raw_bytes = raw,
                                            .flags = zstd ? SSD_BLOCK_ZSTD : 0};
        }
        return n;
}

static int seen_spill(void *ctx, const struct ssd_journal_record *rec, const void *blocks) {
        const struct ssd_journal_header *h = ctx;
        struct ssd_block blk[J_MAX_BLOCKS];

        if (rec->type != SSD_RECORD_SPILL || rec->n_blocks == 0 || rec->n_blocks > J_MAX_BLOCKS ||
            rec->n_blocks != (rec->size_bytes + h->block_bytes - 1) / h->block_bytes)
                fuzz_fail("handed over a spill record of %u blocks for %llu bytes", rec->n_blocks,
                          (unsigned long long)rec->size_bytes);
        memcpy(blk, blocks, rec->n_blocks * sizeof(*blk));
        for (uint32_t i = 0; i < rec->n_blocks; i++)
                if (blk[i].raw_bytes !=
                            MIN((uint64_t)h->block_bytes, rec->size_bytes - (uint64_t)i * h->block_bytes) ||
                    blk[i].stored_bytes == 0 || blk[i].file_offset % KVT_SSD_ALIGN)
                        fuzz_fail("handed over a block that does not tile its spill");
        j_seen++;
        return 0;
}

static int seen_drop(void *ctx, uint64_t handle) {
        (void)ctx;
        if (handle == 0 || handle > KVT_SSD_MAX_HANDLE)
                fuzz_fail("handed over a drop of handle %llu", (unsigned long long)handle);
        j_seen++;
        return 0;
}

/* Writes the journal the input says into a memfd; returns its bytes in jbuf. */
static size_t journal_write(const uint8_t *d, size_t n, struct ssd_journal_header *h) {
        int fd = memfd_create("fuzz-ssd-journal", MFD_CLOEXEC);
        uint64_t end = sizeof(*h);
        ssize_t got;

        if (fd < 0)
                return 0;
        *h = (struct ssd_journal_header){
                .uid = d[0], .pid = 1 + d[1], .block_bytes = (64u << 10) << (d[2] % 11)};
        ssd_journal_header_seal(h);
        if (ssd_journal_write_header(fd, h) < 0)
                fuzz_fail("the header could not be written");
        j_written = 0;
        jends[0] = end;
        for (size_t i = 3; i + 10 <= n && j_written < J_MAX_RECORDS; i += 10) {
                const uint8_t *c = d + i;
                uint64_t handle = 1 + u16(c + 1);
                uint64_t size = 1 + u32(c + 3) % ((uint64_t)J_MAX_BLOCKS * h->block_bytes);
                struct ssd_block blk[J_MAX_BLOCKS];
                int r = c[0] & 1 ? ssd_journal_append(fd, &end, SSD_RECORD_DROP, handle, 0, NULL, 0)
                                 : ssd_journal_append(
                                           fd, &end, SSD_RECORD_SPILL, handle, size, blk,
                                           blocks_for(blk, size, h->block_bytes, c[7], u16(c + 8)));

                if (r < 0)
                        fuzz_fail("append failed: %d", r);
                jends[++j_written] = end;
        }
        got = end <= sizeof(jbuf) ? pread(fd, jbuf, end, 0) : -1;
        close(fd);
        if (got != (ssize_t)end)
                fuzz_fail("read back %zd of %llu bytes", got, (unsigned long long)end);
        return (size_t)end;
}

static int fuzz_journal(const uint8_t *d, size_t n) {
        struct ssd_journal_header h, back;
        struct ssd_journal_visitor v = {.spill = seen_spill, .drop = seen_drop, .ctx = &h};
        size_t len, at;
        uint64_t good = 0, limit;
        int damage;

        if (n < 8)
                return 0;
        len = journal_write(d + 4, n - 4, &h);
        if (len == 0)
                return 0;
        damage = d[0] % 3; /* 0: none, 1: cut at, 2: one byte flipped at */
        at = sizeof(h) + u16(d + 1) % (len - sizeof(h) + 1);
        if (damage == 1)
                len = at;
        else if (damage == 2 && at < len)
                jbuf[at] ^= (uint8_t)(d[3] | 1);
        else
                damage = 0;
        if (ssd_journal_header_read(jbuf, len, &back) != 0 || memcmp(&back, &h, sizeof(h)) != 0)
                fuzz_fail("the header did not read back");
        j_seen = 0;
        if (ssd_journal_parse(jbuf, len, &back, &v, &good) != 0)
                fuzz_fail("parse failed");
        /* the records that end before the damage (cut there, or the byte
         * flipped there), exactly: every byte of a record is checked */
        limit = 0;
        for (size_t i = 0; i <= j_written; i++)
                if (damage == 0 || jends[i] <= at)
                        limit = i;
        if (good != jends[limit] || j_seen != limit)
                fuzz_fail("parsed %zu records to %llu, expected %llu records to %llu", j_seen,
                          (unsigned long long)good, (unsigned long long)limit,
                          (unsigned long long)jends[limit]);
        if (damage)
                reached_cut++;
        else
                reached_whole++;
        return 0;
}

/* ------------------------------------------------------------ a block */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        struct ssd_block b = {0};
        size_t stored_len;
        int r;

        if (size >= 1 && (data[0] & 0x80))
                return fuzz_journal(data + 1, size - 1);
        if (size < 9)
                return 0;
        memset(out + OUT_CAP, 0xa5, CANARY);
        if (data[0] & 1) {
                /* a real frame of the rest (repeated: it compresses), with
                 * fuzzed metadata on top */
                static uint8_t raw[OUT_CAP];
                size_t raw_len = MIN((size - 9) * (1 + data[8] % 8), (size_t)OUT_CAP);

                for (size_t i = 0; i < raw_len; i++)
                        raw[i] = data[9 + i % (size - 9)];
                uint32_t codec = data[8] & 0x80 ? SSD_BLOCK_LZ4 : SSD_BLOCK_ZSTD;
                long c = raw_len ? ssd_block_compress(codec, raw, raw_len, stored, sizeof(stored), 1) : -EFBIG;

                if (c > 0) {
                        b = (struct ssd_block){.hash = ssd_block_hash(raw, raw_len),
                                               .stored_bytes = (uint32_t)c,
                                               .raw_bytes = (uint32_t)raw_len,
                                               .flags = codec};
                        stored_len = (size_t)c;
                } else {
                        memcpy(stored, raw, raw_len);
                        b = (struct ssd_block){.hash = ssd_block_hash(raw, raw_len),
                                               .stored_bytes = (uint32_t)raw_len,
                                               .raw_bytes = (uint32_t)raw_len};
                        stored_len = raw_len;
                }
                switch (data[1] % 6) { /* 0: right; else one field wrong */
                case 1:
                        b.stored_bytes = u32(data + 2);
                        break;
                case 2:
                        b.raw_bytes = u32(data + 2);
                        break;
                case 3:
                        b.flags = u32(data + 2);
                        break;
                case 4:
                        b.hash ^= (uint64_t)u32(data + 2) << (data[6] % 33);
                        break;
                case 5:
                        if (stored_len)
                                stored[u32(data + 2) % stored_len] ^= (uint8_t)(data[6] | 1);
                        break;
                }
                if (data[7] & 1)
                        stored_len -= MIN(stored_len, (size_t)data[8]);
        } else {
                /* everything from the input */
                if (size < 25)
                        return 0;
                memcpy(&b.hash, data + 1, 8);
                b.stored_bytes = u32(data + 9) % (2 * OUT_CAP);
                b.raw_bytes = u32(data + 13) % (2 * OUT_CAP);
                b.flags = u32(data + 17) & 3;
                stored_len = MIN(size - 25, sizeof(stored));
                memcpy(stored, data + 25, stored_len);
        }
        r = ssd_block_decode(&b, stored, stored_len, out, OUT_CAP);
        for (unsigned i = 0; i < CANARY; i++)
                if (out[OUT_CAP + i] != 0xa5)
                        fuzz_fail("decode wrote past the output buffer");
        if (r == 0) {
                if (b.raw_bytes == 0 || b.raw_bytes > OUT_CAP)
                        fuzz_fail("accepted a block of %u raw bytes", b.raw_bytes);
                if (ssd_block_hash(out, b.raw_bytes) != b.hash)
                        fuzz_fail("accepted output whose checksum is not the block's");
                if (!(b.flags & SSD_BLOCK_CODECS) && memcmp(out, stored, b.raw_bytes) != 0)
                        fuzz_fail("a raw block decoded to other bytes than were stored");
                if ((b.flags & SSD_BLOCK_CODECS) == SSD_BLOCK_CODECS)
                        fuzz_fail("accepted a block with both codecs' flags");
                if (b.flags & SSD_BLOCK_ZSTD)
                        reached_zstd_ok++;
                else if (b.flags & SSD_BLOCK_LZ4)
                        reached_lz4_ok++;
                else
                        reached_raw_ok++;
        } else if (r == -EBADMSG)
                reached_checksum++;
        else if (r != -ENODATA)
                fuzz_fail("unexpected result %d", r);
        else if (stored_len >= b.stored_bytes)
                fuzz_fail("ENODATA with all %u stored bytes there", b.stored_bytes);
        return 0;
}

void fuzz_report(void) {
        printf("# verified blocks: %lu zstd, %lu lz4, %lu raw; rejected: %lu\n", reached_zstd_ok, reached_lz4_ok,
               reached_raw_ok, reached_checksum);
        printf("# indexes parsed: %lu whole, %lu cut or flipped\n", reached_whole, reached_cut);
}
