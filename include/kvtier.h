/* SPDX-License-Identifier: MIT */
#ifndef KVTIER_H
#define KVTIER_H

/*
 * Optional hints from an engine that cooperates with kvtier.  The functions
 * live in libkvtier.so; an engine that must also run without it resolves
 * them with dlsym(RTLD_DEFAULT, "kvtier_hint") and skips them when absent.
 * From Python: ctypes.CDLL(None).kvtier_hint.
 */

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

enum kvtier_hint {
        KVTIER_HINT_HOT = 1,  /* the range is in use now: keep it in VRAM */
        KVTIER_HINT_COLD = 2, /* the range will not be used soon: evict it first */
};

/* Tells the daemon about [ptr, ptr+len) of a captured allocation; the hint
 * covers every 2 MiB chunk the range touches.  Never blocks longer than the
 * shim's timeout.  Returns 0, -ENOENT if the range is not captured memory,
 * -EINVAL for a bad hint or range, -ENOTCONN if no daemon is connected. */
int kvtier_hint(const void *ptr, size_t len, int hint);

#ifdef __cplusplus
}
#endif

#endif
