/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The "kernels" the test engine runs on device memory.  backend-fake.c
 * implements them with the fake CUDA's kernel entry points (CI);
 * tests/gpu/backend-cuda.cu with real CUDA kernels (GPU machine).  All
 * return 0 or a negative errno; CUDA failures map to -EIO.
 */

#include <stddef.h>
#include <stdint.h>

/* The test pattern: the 64-bit word at byte offset off (a multiple of 8) of
 * a buffer filled with seed.  Offsets differ per word, so a chunk moved to
 * the wrong place or lost reads back wrong. */
static inline uint64_t backend_pattern(uint64_t seed, uint64_t off) {
        uint64_t x = seed ^ (off * 0x9e3779b97f4a7c15ull);
        x ^= x >> 31;
        x *= 0xbf58476d1ce4e5b9ull;
        x ^= x >> 29;
        return x;
}

/* Writes the pattern of seed over [ptr, ptr+len); len a multiple of 8. */
int backend_fill(void *ptr, size_t len, uint64_t seed);

/* Reads [ptr, ptr+len) on the device and counts the 64-bit words that
 * differ from the pattern of seed into *ret_bad_words. */
int backend_check(const void *ptr, size_t len, uint64_t seed, uint64_t *ret_bad_words);

/* Reads [ptr, ptr+len) on the device (a touch, as a decode step would). */
int backend_read(const void *ptr, size_t len);

/* One step of an engine that is not the one moving memory: reads [ptr,
 * ptr+len) on a stream of its own and waits for that stream only.  Sets
 * the time the launch call took and the whole step took, in microseconds. */
int backend_probe(const void *ptr, size_t len, double *ret_launch_us, double *ret_total_us);

/* Bytes of managed range [ptr, ptr+len) resident in device dev's memory now,
 * as the backend can tell (the fake's model; on a real GPU a timed probe).
 * Returns -EOPNOTSUPP if it cannot tell. */
int backend_vram_resident(const void *ptr, size_t len, int dev, uint64_t *ret_bytes);

/* Largest number of managed bytes that were resident on device dev at once
 * since start.  Returns -EOPNOTSUPP if the backend cannot tell. */
int backend_vram_peak(int dev, uint64_t *ret_bytes);
