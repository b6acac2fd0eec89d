/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * One block of a spill as the SSD store keeps it: where it is in the
 * session's file, how many bytes are stored there (rounded up to
 * KVT_SSD_ALIGN on disk), how many it stands for, and the XXH3-64 of those
 * raw bytes.  Encoding (optional zstd or LZ4) and the verified decoding of a block
 * read back are pure functions: no I/O, no state, fuzzed by
 * tests/fuzz/fuzz-ssd.c.
 */

#include <stddef.h>
#include <stdint.h>

enum {
        SSD_BLOCK_ZSTD = 1u << 0, /* stored bytes are one zstd frame */
        SSD_BLOCK_LZ4 = 1u << 1,  /* stored bytes are one LZ4 block (raw_bytes decoded) */
        SSD_BLOCK_CODECS = SSD_BLOCK_ZSTD | SSD_BLOCK_LZ4, /* compressed: at most one of them */
        _SSD_BLOCK_FLAGS_ALL = SSD_BLOCK_CODECS,
};

struct ssd_block {
        uint64_t file_offset;  /* KVT_SSD_ALIGN aligned; valid when stored_bytes > 0 */
        uint64_t hash;         /* XXH3_64bits of the raw bytes */
        uint32_t stored_bytes; /* 0: not written yet */
        uint32_t raw_bytes;
        uint32_t flags; /* SSD_BLOCK_* */
        uint32_t reserved;
};

/* Bytes a block occupies on disk: stored_bytes rounded up to KVT_SSD_ALIGN. */
uint64_t ssd_block_disk_bytes(uint32_t stored_bytes);

/* XXH3_64bits of len bytes. */
uint64_t ssd_block_hash(const void *p, size_t len);

/* Most bytes ssd_block_compress() may write for raw_len bytes, either codec. */
size_t ssd_block_compress_bound(size_t raw_len);

/* Compresses raw into out (out_cap bytes, at least the bound) with codec
 * (SSD_BLOCK_ZSTD at level, or SSD_BLOCK_LZ4).  Returns the compressed size,
 * or -EFBIG when it would not be smaller than raw_len (store raw instead),
 * or -EINVAL / -ENOMEM / -EIO. */
long ssd_block_compress(uint32_t codec, const void *raw, size_t raw_len, void *out, size_t out_cap, int level);

/* Turns the bytes read back for block b (stored, stored_len of them valid)
 * into its raw bytes at out (out_cap bytes), and checks them against b's
 * hash.  For an uncompressed block stored may equal out.  Returns 0, or
 * -EBADMSG (checksum, a frame that does not decode to raw_bytes, metadata
 * that contradicts itself) or -ENODATA (fewer bytes than stored_bytes).
 * Never writes past out + out_cap. */
int ssd_block_decode(const struct ssd_block *b, const void *stored, size_t stored_len, void *out,
                     size_t out_cap);
