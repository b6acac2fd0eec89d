/* SPDX-License-Identifier: MIT */
#pragma once

#include "cuda-abi.h"

struct kvt_cudart;
struct shim_region;

/* Frees captured region r (already out of the table) once stream reaches
 * this point, as cudaFreeAsync would: an event is recorded on the stream and
 * a shim thread frees the memory after the event completes.  Where no event
 * can be recorded, waits for the stream here and frees at once.  Returns
 * what the caller's cudaFreeAsync returns. */
cudaError_t deferred_free(const struct kvt_cudart *rt, const struct shim_region *r, cudaStream_t stream);
