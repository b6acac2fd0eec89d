/* SPDX-License-Identifier: MIT */
#pragma once

#include <stdint.h>

#include "cuda-abi.h"

struct kvt_cudart;
struct shim_region;

/* Frees region r and tells the daemon (shim_release()). */
typedef cudaError_t (*deferred_release_fn)(const struct kvt_cudart *rt, const struct shim_region *r);

/* Releases captured region r (already out of the table) through release
 * once stream reaches this point, as cudaFreeAsync would: an event is
 * recorded on the stream and a shim thread releases the memory after the
 * event completes.  Where no event can be recorded, waits for the stream
 * here and releases at once.  Returns what the caller's cudaFreeAsync
 * returns. */
cudaError_t deferred_free(const struct kvt_cudart *rt, const struct shim_region *r, cudaStream_t stream,
                          deferred_release_fn release);

/* In the child of fork(): no reaper came along, and the parent's pending
 * frees (their memory too) are the parent's: forget them. */
void deferred_atfork_child(void);

/* The captured bytes of stream-ordered frees queued and not yet released:
 * free to the engine already (its stream-ordered allocator reuses them). */
uint64_t deferred_pending_bytes(void);
