/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <string.h>
#include <xxhash.h>
#include <zstd.h>
#include <zstd_errors.h>

#include "protocol.h"
#include "ssd-block.h"

uint64_t ssd_block_disk_bytes(uint32_t stored_bytes) {
        return ((uint64_t)stored_bytes + KVT_SSD_ALIGN - 1) / KVT_SSD_ALIGN * KVT_SSD_ALIGN;
}

uint64_t ssd_block_hash(const void *p, size_t len) {
        return XXH3_64bits(p, len);
}

size_t ssd_block_compress_bound(size_t raw_len) {
        return ZSTD_compressBound(raw_len);
}

long ssd_block_compress(const void *raw, size_t raw_len, void *out, size_t out_cap, int level) {
        size_t n = ZSTD_compress(out, out_cap, raw, raw_len, level);

        if (ZSTD_isError(n))
                return ZSTD_getErrorCode(n) == ZSTD_error_memory_allocation ? -ENOMEM : -EIO;
        if (n >= raw_len)
                return -EFBIG;
        return (long)n;
}

int ssd_block_decode(const struct ssd_block *b, const void *stored, size_t stored_len, void *out,
                     size_t out_cap) {
        if (b->raw_bytes == 0 || b->raw_bytes > out_cap || b->stored_bytes == 0 ||
            (b->flags & ~(uint32_t)_SSD_BLOCK_FLAGS_ALL))
                return -EBADMSG;
        if (stored_len < b->stored_bytes)
                return -ENODATA;
        if (b->flags & SSD_BLOCK_ZSTD) {
                unsigned long long want = ZSTD_getFrameContentSize(stored, b->stored_bytes);
                size_t n;

                if (b->stored_bytes >= b->raw_bytes || want != b->raw_bytes)
                        return -EBADMSG;
                n = ZSTD_decompress(out, b->raw_bytes, stored, b->stored_bytes);
                if (ZSTD_isError(n) || n != b->raw_bytes)
                        return -EBADMSG;
        } else {
                if (b->stored_bytes != b->raw_bytes)
                        return -EBADMSG;
                if (stored != out)
                        memmove(out, stored, b->raw_bytes);
        }
        return XXH3_64bits(out, b->raw_bytes) == b->hash ? 0 : -EBADMSG;
}
