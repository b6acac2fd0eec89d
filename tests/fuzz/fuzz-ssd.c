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
 */
#include "config.h"

#include <errno.h>
#include <string.h>

#include "fuzz.h"
#include "protocol.h"
#include "ssd-block.h"
#include "util.h"

#define OUT_CAP (64u * 1024u)
#define CANARY  64u

static unsigned char out[OUT_CAP + CANARY];
static unsigned char stored[OUT_CAP * 2];
static unsigned long reached_zstd_ok, reached_raw_ok, reached_checksum;

static uint32_t u32(const uint8_t *p) {
        uint32_t v;
        memcpy(&v, p, 4);
        return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        struct ssd_block b = {0};
        size_t stored_len;
        int r;

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
                long c = raw_len ? ssd_block_compress(raw, raw_len, stored, sizeof(stored), 1) : -EFBIG;

                if (c > 0) {
                        b = (struct ssd_block){.hash = ssd_block_hash(raw, raw_len),
                                               .stored_bytes = (uint32_t)c,
                                               .raw_bytes = (uint32_t)raw_len,
                                               .flags = SSD_BLOCK_ZSTD};
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
                if (!(b.flags & SSD_BLOCK_ZSTD) && memcmp(out, stored, b.raw_bytes) != 0)
                        fuzz_fail("a raw block decoded to other bytes than were stored");
                if (b.flags & SSD_BLOCK_ZSTD)
                        reached_zstd_ok++;
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
        printf("# verified blocks: %lu zstd, %lu raw; rejected: %lu\n", reached_zstd_ok, reached_raw_ok,
               reached_checksum);
}
