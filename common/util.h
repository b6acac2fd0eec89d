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

/* Copies the string s into buf (size bytes, always NUL-terminated) with
 * every byte a terminal or a log reader could take for more than text
 * written as a C escape: \n \r \t, other C0 controls, DEL, C1 controls,
 * bytes that are not UTF-8 as \xNN, and a backslash as \\.  Valid UTF-8
 * otherwise passes through.  What does not fit is cut at a whole escape or
 * character.  For peer-supplied strings (names, control text).  Returns buf. */
char *kvt_escape(const char *s, char *buf, size_t size);

/* As kvt_escape(), but backslashes stay as they are: for a whole log line
 * whose peer strings were escaped already. */
char *kvt_escape_controls(const char *s, char *buf, size_t size);

/* Whether kvt_escape() would change s. */
bool kvt_escape_needed(const char *s);

/* At most burst events per interval_ns (systemd's RateLimit).  Zero-initialise
 * begin_ns, n and suppressed; interval_ns 0 means no limit. */
struct ratelimit {
        uint64_t interval_ns;
        unsigned burst;
        uint64_t begin_ns;
        unsigned n;
        unsigned suppressed;
};

/* Whether an event at now_ns may happen (is counted); one that may not is
 * counted as suppressed.  When a new interval starts, *ret_suppressed
 * (may be NULL) gets what the previous one suppressed, else 0. */
bool ratelimit_below(struct ratelimit *rl, uint64_t now_ns, unsigned *ret_suppressed);
