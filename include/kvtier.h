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
#include <stdint.h>

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

/*
 * The SSD tier: an engine that knows a range is cold until it asks for it
 * again (a finished session kept for prefix reuse, a paused conversation)
 * spills it to kvtierd's files and restores it later.  Explicit, because a
 * GPU touch of memory kvtier dropped cannot be caught: the caller promises
 * not to touch [ptr, ptr+len) from kvtier_spill() until its restore is done.
 *
 *     uint64_t h;
 *     if (kvtier_try_spill(p, len, &h) == 0) {   // [p, p+len) untouched from here
 *             ...
 *             kvtier_try_restore(h, stream);      // stream-ordered: later work on stream sees the data
 *             if (kvtier_try_restore_wait(h) < 0) // the outcome; never wrong data
 *                     recompute(p, len);
 *             kvtier_try_drop(h);
 *     }
 *
 * Spills outlive a restart of kvtierd (an upgrade, a crash and systemd's
 * Restart=): the daemon keeps a running process's spills on disk and gives
 * them back, under the same handles, when the shim reconnects with the
 * session's token from the same uid and pid.  They end with the process:
 * a client that exits, or whose connection to kvtierd ends, has its spills
 * deleted, and a restarted daemon deletes those of processes that ended
 * while it was down, and those not taken back within [ssd] reattach_grace.
 *
 * All return 0 or a negative errno.  The kvtier_try_* forms below resolve
 * the shim's symbols at run time (dlsym(RTLD_DEFAULT)) and return
 * KVTIER_ENOTAVAIL without the shim, so that an engine runs unchanged; the
 * shim returns it too when kvtierd has no SSD tier ([ssd] dir unusable, or
 * max_per_uid = 0).
 */
#define KVTIER_ENOTAVAIL  (-38)  /* -ENOSYS: no shim, or no SSD tier in the daemon */
#define KVTIER_ECHECKSUM  (-74)  /* -EBADMSG: a block read back failed its checksum (or did not decompress) */
#define KVTIER_ESHORT     (-61)  /* -ENODATA: a short read, or blocks that were never written */
#define KVTIER_ESTALE     (-116) /* -ESTALE: the spill did not survive a restart of kvtierd (not kept, not
                                  * taken back in time, or its index record damaged): data lost */
#define KVTIER_EQUOTA     (-122) /* -EDQUOT: over [ssd] max_per_client or max_per_uid, or 65536 spills held */

enum kvtier_spill_state {
        KVTIER_SPILLED = 1,   /* on SSD; the range's memory released where kvtier could */
        KVTIER_RESTORING = 2, /* a restore is queued or running */
        KVTIER_RESTORED = 3,  /* back in the range; the SSD copy is gone: drop the handle */
};

struct kvtier_spill_info {
        uint64_t size_bytes;
        int32_t state;      /* enum kvtier_spill_state */
        int32_t last_error; /* of the last restore: 0 or -errno (KVTIER_ECHECKSUM ...) */
        uint32_t released;  /* 1: the range's memory was given back (discarded) at spill */
        uint32_t reserved[7];
};

/* Copies [ptr, ptr+len) (device, managed or host memory) to the SSD tier
 * and, where it is memory kvtier captured, releases it (discards whole 2 MiB
 * chunks: counted nowhere until restored).  Blocks until the data is on
 * disk with its checksums.  *ret_handle names it.  Returns 0, -EINVAL,
 * KVTIER_EQUOTA, -ENOSPC, -EIO, -ENOTCONN (no daemon), KVTIER_ENOTAVAIL. */
int kvtier_spill(const void *ptr, size_t len, uint64_t *ret_handle);

/* Queues the restore of a spill into its range and returns: the data is
 * back before any later work on stream (a cudaStream_t, NULL for the legacy
 * stream) runs.  Issue it ahead of need to overlap it with compute.  A
 * restore that fails (checksum, short read, I/O) leaves the range as the
 * spill left it and the spill in place (state SPILLED, last_error set):
 * check kvtier_restore_wait() or kvtier_query() before trusting the data.
 * One that fails with -ENOTCONN (kvtierd away or restarting) may be retried
 * later: the spill waits for the daemon.  A restore already in flight (a
 * readahead) or done is not repeated; stream is ordered after it all the
 * same.  A released range comes back where a new allocation would start: in
 * VRAM while the daemon's grant to this process has room, else in host
 * memory, from where kvtier promotes it when it is used.  Returns 0,
 * -ENOENT, -errno. */
int kvtier_restore(uint64_t handle, void *stream);

/* Waits for the restore of handle to end; returns its outcome: 0 or -errno. */
int kvtier_restore_wait(uint64_t handle);

/* Forgets a spill (after its restore, or instead of it): frees its blocks
 * on disk.  Waits for a restore in flight.  Dropped instead of restored, the
 * range is the engine's again with indeterminate contents (write it before
 * reading it).  Returns 0 or -ENOENT. */
int kvtier_drop(uint64_t handle);

/* Fills *ret with what is known of handle.  Returns 0 or -ENOENT. */
int kvtier_query(uint64_t handle, struct kvtier_spill_info *ret);

/* Readahead: the spill will be restored soon; its restore starts now,
 * ordered on no stream (the range may be written from now on), and a
 * kvtier_restore() of it later orders its stream after it.  Returns 0,
 * -ENOENT or -errno. */
int kvtier_readahead(uint64_t handle);

#ifndef KVTIER_NO_TRY
#include <dlfcn.h>
/* dlsym(RTLD_DEFAULT, name), without needing _GNU_SOURCE. */
#define KVTIER__SYM(name) dlsym((void *)0, name)
#define KVTIER__TRY(ret, name, params, args)                                                       \
        static inline ret kvtier_try_##name params {                                               \
                ret(*f) params = (ret(*) params)KVTIER__SYM("kvtier_" #name);                      \
                return f ? f args : KVTIER_ENOTAVAIL;                                              \
        }
KVTIER__TRY(int, spill, (const void *ptr, size_t len, uint64_t *ret_handle), (ptr, len, ret_handle))
KVTIER__TRY(int, restore, (uint64_t handle, void *stream), (handle, stream))
KVTIER__TRY(int, restore_wait, (uint64_t handle), (handle))
KVTIER__TRY(int, drop, (uint64_t handle), (handle))
KVTIER__TRY(int, query, (uint64_t handle, struct kvtier_spill_info *ret), (handle, ret))
KVTIER__TRY(int, readahead, (uint64_t handle), (handle))
KVTIER__TRY(int, hint, (const void *ptr, size_t len, int hint), (ptr, len, hint))
#undef KVTIER__TRY
#endif

#ifdef __cplusplus
}
#endif

#endif
