/* SPDX-License-Identifier: MIT */
/*
 * The exit gate (exit.h).  A count of the shim threads' CUDA calls under
 * way and the exiting flag, both sequentially consistent: a thread counts
 * itself in, then looks at the flag; the exit sets the flag, then looks at
 * the count.  So either the thread sees the exit and makes no call, or the
 * exit sees the thread and waits for it.
 */
#include "config.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "exit.h"
#include "log.h"
#include "state.h"
#include "util.h"

/* The gate entries of the calling thread: an exit that starts on a thread
 * inside the gate (a log or a signal handler's exit()) does not wait for
 * itself. */
static _Thread_local unsigned inside;

/* The atexit handler: closes the gate, then waits for the calls under way
 * (those of the exiting thread aside), EXIT_WAIT_MS at most. */
static void at_exit(void) {
        struct kvt_shim *st = kvt_shim();
        uint64_t deadline = now_ns() + (uint64_t)EXIT_WAIT_MS * 1000000;
        unsigned left;

        atomic_store(&st->exiting, true);
        while ((left = atomic_load(&st->cuda_calls) - inside) > 0 && now_ns() < deadline)
                usleep(500);
        if (left > 0)
                log_debug("The process exits with %u of the shim's CUDA calls under way after %d ms.", left,
                          EXIT_WAIT_MS);
}

void exit_hook(void) {
        struct kvt_shim *st = kvt_shim();
        pid_t me = getpid(), was = atomic_load(&st->exit_hook_pid);

        /* once per process, whichever thread comes first */
        if (was == me || !atomic_compare_exchange_strong(&st->exit_hook_pid, &was, me))
                return;
        if (atexit(at_exit) != 0)
                log_debug("Could not register the shim's exit handler: its threads' CUDA calls may meet the "
                          "runtime's teardown, and moves it cuts short count as failed.");
}

bool exit_begun(void) {
        return atomic_load(&kvt_shim()->exiting);
}

bool exit_gate_enter(void) {
        struct kvt_shim *st = kvt_shim();

        atomic_fetch_add(&st->cuda_calls, 1);
        if (!atomic_load(&st->exiting)) {
                inside++;
                return true;
        }
        atomic_fetch_sub(&st->cuda_calls, 1);
        return false;
}

void exit_gate_leave(void) {
        inside--;
        atomic_fetch_sub(&kvt_shim()->cuda_calls, 1);
}

void exit_atfork_child(void) {
        atomic_store(&kvt_shim()->cuda_calls, inside);
}
