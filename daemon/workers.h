/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The threads a policy tick's per-chunk passes share (policy_input.workers):
 * n - 1 threads started once, each waiting on a condition variable for the
 * next job, and the caller's own.  The planner owns one; a job runs its
 * parts on whichever threads get to them first, the caller's included.
 * Independent of the rest of the daemon, so that tests and benchmarks use
 * the same pool.
 */

#include "policy.h"

struct workers;

/* Threads of a pool for a [policy] threads setting: itself (at most
 * POLICY_THREADS_MAX), or for 0 (auto) the CPUs this process may run on, at
 * most POLICY_THREADS_AUTO_MAX. */
unsigned workers_threads_for(unsigned threads);

/* Starts a pool of n threads, the caller's included (n - 1 started, n at
 * most POLICY_THREADS_MAX).  A thread that cannot be started leaves the pool
 * smaller, down to the caller alone: see workers_n().  Returns 0 and the
 * pool in *ret, or -ENOMEM. */
int workers_new(unsigned n, struct workers **ret);

/* Stops and joins w's threads and frees it.  Accepts NULL; returns NULL. */
struct workers *workers_free(struct workers *w);

/* Threads w runs on, the caller's included (>= 1). */
unsigned workers_n(const struct workers *w);

/* Calls fn(arg, part) once for each part in [0, n_parts), on w's threads
 * and the calling one, and returns when all have returned (their writes
 * then visible to the caller).  One caller at a time. */
void workers_run(struct workers *w, void (*fn)(void *arg, unsigned part), void *arg, unsigned n_parts);

/* w as the policy takes it (policy_input.workers), valid while w lives. */
const struct policy_workers *workers_policy(const struct workers *w);
