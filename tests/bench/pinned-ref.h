/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The reference for the mover benchmark: pinned cudaMemcpy of the same
 * bytes, in the same run.  pinned-ref-cuda.cu measures it on a GPU;
 * pinned-ref-fake.c has nothing to measure (CI).
 */

#include <stddef.h>

/* Copies total bytes host to device (up) or device to host between a pinned
 * host buffer and device memory, in calls of piece bytes on one stream;
 * *ret_seconds is the wall time.  Returns 0, -EOPNOTSUPP (no GPU), -ENOMEM
 * or -EIO. */
int pinned_ref(size_t total, size_t piece, int up, double *ret_seconds);
