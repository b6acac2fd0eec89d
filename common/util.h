/* SPDX-License-Identifier: MIT */
#pragma once

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
