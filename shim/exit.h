/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The process's exit, as the shim's own threads (the mover, the evictors,
 * the reaper) see it.  The CUDA runtime tears its contexts down in an
 * atexit handler; a call another thread is making at that moment may fail,
 * or crash the process.  So the shim's threads make their CUDA calls
 * inside a gate: exit_hook() registers, once the runtime is up (the
 * mover's pipeline or the reaper starts), an atexit handler that runs
 * before the runtime's teardown, closes the gate and waits (EXIT_WAIT_MS at
 * most) for the calls under way to return.  From then on no move, sample
 * or deferred free of theirs starts: what they had left to do is
 * cancelled, its memory going with the process, and the daemon hears of
 * it as cancelled (a promotion whose copy had ended too: its books go
 * with the connection).  The engine's own threads are not gated: their
 * calls are theirs.
 */

#include <stdbool.h>

/* How long the exit waits for the shim's CUDA calls under way: an
 * eviction's part, a sample's, a promotion's copy, or the reaper's wait
 * for the stream of a free.  Past it the exit goes on, as it did before
 * the gate (the engine's exit must not hang on a stream that never ends). */
#define EXIT_WAIT_MS 2000

/* Registers the exit handler once per process (a forked child registers
 * its own); call once the CUDA runtime is up, so that it runs before the
 * runtime's teardown (atexit handlers run last registered first). */
void exit_hook(void);

/* Whether the process has begun to exit. */
bool exit_begun(void);

/* Enters the gate before a CUDA call of a shim thread: false once the exit
 * began (make no call then).  Each true is paired with exit_gate_leave(). */
bool exit_gate_enter(void);
void exit_gate_leave(void);

/* The fork child: no thread of the parent's is inside the gate there. */
void exit_atfork_child(void);
