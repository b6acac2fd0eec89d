/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <string.h>
#include <lz4.h>
#include <xxhash.h>
#include <zstd.h>
#include <zstd_errors.h>

#include "protocol.h"
#include "ssd-block.h"
#include "util.h"

uint64_t ssd_block_disk_bytes(uint32_t stored_bytes) {
        return ((uint64_t)stored_bytes + KVT_SSD_ALIGN - 1) / KVT_SSD_ALIGN * KVT_SSD_ALIGN;
}

uint64_t ssd_block_hash(const void *p, size_t len) {
        return XXH3_64bits(p, len);
}

size_t ssd_block_compress_bound(size_t raw_len) {
        size_t z = ZSTD_compressBound(raw_len);
        int l = raw_len <= LZ4_MAX_INPUT_SIZE ? LZ4_compressBound((int)raw_len) : 0;

        return l > 0 && (size_t)l > z ? (size_t)l : z;
}

static long lz4_compress(const void *raw, size_t raw_len, void *out, size_t out_cap) {
        int n;

        if (raw_len > LZ4_MAX_INPUT_SIZE)
                return -EINVAL;
        /* at most raw_len - 1 bytes: a block that does not shrink is stored raw */
        n = LZ4_compress_default(raw, out, (int)raw_len, (int)MIN(out_cap, raw_len - 1));
        return n > 0 ? n : -EFBIG;
}

long ssd_block_compress(uint32_t codec, const void *raw, size_t raw_len, void *out, size_t out_cap, int level) {
        size_t n;

        if (raw_len == 0)
                return -EFBIG;
        if (codec == SSD_BLOCK_LZ4)
                return lz4_compress(raw, raw_len, out, out_cap);
        if (codec != SSD_BLOCK_ZSTD)
                return -EINVAL;
        n = ZSTD_compress(out, out_cap, raw, raw_len, level);
        if (ZSTD_isError(n))
                return ZSTD_getErrorCode(n) == ZSTD_error_memory_allocation ? -ENOMEM : -EIO;
        if (n >= raw_len)
                return -EFBIG;
        return (long)n;
}

/* Decodes a compressed block; 0 or -EBADMSG. */
static int decompress(const struct ssd_block *b, const void *stored, void *out) {
        if (b->stored_bytes >= b->raw_bytes)
                return -EBADMSG;
        if (b->flags & SSD_BLOCK_LZ4) {
                int n;

                if (b->raw_bytes > LZ4_MAX_INPUT_SIZE || b->stored_bytes > INT32_MAX)
                        return -EBADMSG;
                n = LZ4_decompress_safe(stored, out, (int)b->stored_bytes, (int)b->raw_bytes);
                return n == (int)b->raw_bytes ? 0 : -EBADMSG;
        } else {
                unsigned long long want = ZSTD_getFrameContentSize(stored, b->stored_bytes);
                size_t n;

                if (want != b->raw_bytes)
                        return -EBADMSG;
                n = ZSTD_decompress(out, b->raw_bytes, stored, b->stored_bytes);
                return ZSTD_isError(n) || n != b->raw_bytes ? -EBADMSG : 0;
        }
}

int ssd_block_decode(const struct ssd_block *b, const void *stored, size_t stored_len, void *out,
                     size_t out_cap) {
        if (b->raw_bytes == 0 || b->raw_bytes > out_cap || b->stored_bytes == 0 ||
            (b->flags & ~(uint32_t)_SSD_BLOCK_FLAGS_ALL) || (b->flags & SSD_BLOCK_CODECS) == SSD_BLOCK_CODECS)
                return -EBADMSG;
        if (stored_len < b->stored_bytes)
                return -ENODATA;
        if (b->flags & SSD_BLOCK_CODECS) {
                if (decompress(b, stored, out) < 0)
                        return -EBADMSG;
        } else {
                if (b->stored_bytes != b->raw_bytes)
                        return -EBADMSG;
                if (stored != out)
                        memmove(out, stored, b->raw_bytes);
        }
        return XXH3_64bits(out, b->raw_bytes) == b->hash ? 0 : -EBADMSG;
}
