/* SPDX-License-Identifier: MIT */
#include "config.h"

#include "select.h"

static void swap_u64(uint64_t *a, uint64_t *b) {
        uint64_t t = *a;
        *a = *b;
        *b = t;
}

static uint64_t median3(uint64_t a, uint64_t b, uint64_t c) {
        if (a > b)
                swap_u64(&a, &b);
        if (b > c)
                swap_u64(&b, &c);
        return a > b ? a : b;
}

/* Returns the element that would sit at position t (0-based, ascending) if
 * a[0..n) were sorted; permutes a.  Expected O(n) (Hoare partition around a
 * median of three, which also handles the common already-sorted input). */
uint64_t select_nth(uint64_t *a, size_t n, size_t t) {
        ptrdiff_t lo = 0, hi = (ptrdiff_t)n - 1, k = (ptrdiff_t)t;

        while (lo < hi) {
                uint64_t pivot = median3(a[lo], a[lo + (hi - lo) / 2], a[hi]);
                ptrdiff_t i = lo, j = hi;

                while (i <= j) {
                        while (a[i] < pivot)
                                i++;
                        while (a[j] > pivot)
                                j--;
                        if (i <= j)
                                swap_u64(&a[i++], &a[j--]);
                }
                if (k <= j)
                        hi = j;
                else if (k >= i)
                        lo = i;
                else
                        return a[k];
        }
        return a[k];
}
