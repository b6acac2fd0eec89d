/* SPDX-License-Identifier: MIT */
#pragma once

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ELEMENTSOF(a) (sizeof(a) / sizeof((a)[0]))
#define ALIGN_UP(x, a) (((x) + (a) - 1) / (a) * (a))
#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))

/* Parses a byte count: "1048576", "64K", "64M", "8G", "1T", "1.5G" (binary
 * units, optional trailing "B"/"iB").  Returns 0 or -EINVAL / -ERANGE. */
int parse_bytes(const char *s, uint64_t *ret_bytes);

/* Parses "N%" with 0 < N <= 100.  Returns 0, -ENOENT if s has no '%', or -EINVAL. */
int parse_percent(const char *s, unsigned *ret_percent);

/* Formats bytes with a binary unit ("64.0M") into buf.  Returns buf. */
char *format_bytes(char *buf, size_t len, uint64_t bytes);

/* Monotonic clock in nanoseconds. */
uint64_t now_ns(void);

/* The CLOCK_REALTIME time ns nanoseconds from now, for pthread_cond_timedwait()
 * on a condition variable of the default clock. */
struct timespec;
void realtime_after_ns(struct timespec *ret, uint64_t ns);

/* pthread_create() for kvtier's own threads inside an engine: the thread
 * takes none of the process's asynchronous signals (they are the engine's),
 * but not those a fault of its own raises (SIGSEGV, SIGBUS, SIGFPE, SIGILL,
 * SIGTRAP, SIGSYS): blocked, those kill the process instead of reaching a
 * handler that would serve them.  Returns 0 or a negative errno. */
int kvt_thread_create(pthread_t *ret, const pthread_attr_t *attr, void *(*fn)(void *), void *arg);
