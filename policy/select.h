/* SPDX-License-Identifier: MIT */
#pragma once

/* Order statistics for the planner, internal to policy/. */

#include <stddef.h>
#include <stdint.h>

/* Returns the element that would sit at position t (0-based, ascending) if
 * a[0..n) were sorted; permutes a.  n > t.  Expected O(n). */
uint64_t select_nth(uint64_t *a, size_t n, size_t t);
