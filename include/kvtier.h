/* SPDX-License-Identifier: MIT */
#ifndef KVTIER_H
#define KVTIER_H

/*
 * Optional hints from an engine that cooperates with kvtier.  The functions
 * live in libkvtier.so; an engine that must also run without it resolves
 * them with dlsym(RTLD_DEFAULT, "kvtier_hint") and skips them when absent.
 * From Python (the process runs under LD_PRELOAD=libkvtier.so):
 *
 *     import ctypes
 *     kv = ctypes.CDLL(None)          # the preloaded shim's symbols
 *     hint = kv.kvtier_hint
 *     hint.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
 *     HOT, COLD, PINNED, WILL_NEED, DONE = 1, 2, 3, 4, 5
 *     hint(t.data_ptr(), t.numel() * t.element_size(), PINNED)  # a torch tensor
 *
 * WILL_NEED is counted as an access in the shared heat table (no message);
 * HOT, COLD, PINNED and DONE change the daemon's books at once (one message
 * each: hint what a scheduler decides, not every use).  HOT and PINNED are
 * standing orders: the shim keeps them too, and tells them again to a
 * daemon that registers the range later (after a restart or an outage).
 */

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

enum kvtier_hint {
        KVTIER_HINT_HOT = 1,       /* the range is in use now: keep it in VRAM, ahead of what kvtier
                                    * saw itself, until COLD or DONE */
        KVTIER_HINT_COLD = 2,      /* the range will not be used soon: evict it first */
        KVTIER_HINT_PINNED = 3,    /* keep it in VRAM and never evict it, until DONE */
        KVTIER_HINT_WILL_NEED = 4, /* about to be used: bring it into VRAM now */
        KVTIER_HINT_DONE = 5,      /* finished with it: unpin it and evict it first */
};

/* Tells the daemon about [ptr, ptr+len) of a captured allocation; the hint
 * covers every 2 MiB chunk the range touches.  Never blocks longer than the
 * shim's timeout.  Returns 0, -ENOENT if the range is not captured memory,
 * -EINVAL for a bad hint or range, -ENOTCONN if no daemon is connected (a
 * HOT or PINNED is still kept, and told to the next daemon). */
int kvtier_hint(const void *ptr, size_t len, int hint);

#ifdef __cplusplus
}
#endif

#endif
