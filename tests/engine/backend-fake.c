/* SPDX-License-Identifier: MIT */

/*
 * The test engine's kernels on the fake CUDA (tests/fakes/fakecuda.h): they
 * run on the calling thread's current device and go through the fake's
 * residency model, so hits, remote reads and faults are counted there.
 */

#include <errno.h>

#include "backend.h"
#include "fakecuda.h"

int backend_fill(void *ptr, size_t len, uint64_t seed) {
        return fakecuda_kernel_fill(ptr, len, seed) == 0 ? 0 : -EIO;
}

int backend_check(const void *ptr, size_t len, uint64_t seed, uint64_t *ret_bad_words) {
        return fakecuda_kernel_check(ptr, len, seed, ret_bad_words) == 0 ? 0 : -EIO;
}

int backend_read(const void *ptr, size_t len) {
        return fakecuda_kernel_read(ptr, len) == 0 ? 0 : -EIO;
}

int backend_vram_resident(const void *ptr, size_t len, int dev, uint64_t *ret_bytes) {
        return fakecuda_resident_bytes(ptr, len, dev, ret_bytes) == 0 ? 0 : -EIO;
}

int backend_vram_peak(int dev, uint64_t *ret_bytes) {
        struct fakecuda_stats s;

        if (fakecuda_get_stats(dev, &s) != 0)
                return -EIO;
        *ret_bytes = s.managed_resident_peak_bytes;
        return 0;
}
