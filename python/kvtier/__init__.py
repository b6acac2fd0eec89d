# SPDX-License-Identifier: MIT
"""kvtier's engine API from Python: hints and the SSD tier (include/kvtier.h).

The functions live in libkvtier.so, the LD_PRELOAD shim; they are looked up
in the running process (ctypes.CDLL(None)), so nothing is loaded here.
Without the shim, ``available()`` is False, ``hint()`` returns
``NOT_AVAILABLE`` and the SSD calls raise ``NotAvailableError``.
"""

import ctypes
import errno as _errno
import os as _os
from collections import namedtuple

__all__ = [
    "HOT", "COLD", "PINNED", "WILL_NEED", "DONE",
    "SPILLED", "RESTORING", "RESTORED",
    "NOT_AVAILABLE", "KvtierError", "NotAvailableError", "ChecksumError", "ShortReadError",
    "StaleError", "QuotaError", "SpillInfo",
    "available", "ssd_available", "hint", "spill", "restore", "restore_wait", "readahead", "drop", "query",
]

# enum kvtier_hint
HOT, COLD, PINNED, WILL_NEED, DONE = 1, 2, 3, 4, 5
# enum kvtier_spill_state
SPILLED, RESTORING, RESTORED = 1, 2, 3

NOT_AVAILABLE = -_errno.ENOSYS  # KVTIER_ENOTAVAIL


class KvtierError(OSError):
    """A kvtier call failed; ``errno`` is the positive errno, ``rc`` the return code."""

    def __init__(self, rc, what):
        super().__init__(-rc, "%s: %s" % (what, _os.strerror(-rc)))
        self.rc = rc


class NotAvailableError(KvtierError):
    """No shim in this process, or no SSD tier in its kvtierd (KVTIER_ENOTAVAIL)."""


class ChecksumError(KvtierError):
    """A block read back failed its checksum (KVTIER_ECHECKSUM): the range was not written."""


class ShortReadError(KvtierError):
    """A short read (KVTIER_ESHORT): the range holds no wrong data."""


class StaleError(KvtierError):
    """The spill did not survive a restart of kvtierd (KVTIER_ESTALE): not kept, not taken back in
    time, or its index record damaged. The data is lost."""


class QuotaError(KvtierError):
    """Over [ssd] max_per_client or max_per_uid (KVTIER_EQUOTA)."""


_ERRORS = {
    -_errno.ENOSYS: NotAvailableError,
    -_errno.EBADMSG: ChecksumError,
    -_errno.ENODATA: ShortReadError,
    -_errno.ESTALE: StaleError,
    -_errno.EDQUOT: QuotaError,
}

SpillInfo = namedtuple("SpillInfo", "size_bytes state last_error released")


class _SpillInfo(ctypes.Structure):
    _fields_ = [
        ("size_bytes", ctypes.c_uint64),
        ("state", ctypes.c_int32),
        ("last_error", ctypes.c_int32),
        ("released", ctypes.c_uint32),
        ("reserved", ctypes.c_uint32 * 7),
    ]


def _lookup():
    try:
        lib = ctypes.CDLL(None)
    except OSError:
        return {}
    sigs = {
        "kvtier_hint": ([ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int], ctypes.c_int),
        "kvtier_spill": ([ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_uint64)], ctypes.c_int),
        "kvtier_restore": ([ctypes.c_uint64, ctypes.c_void_p], ctypes.c_int),
        "kvtier_restore_wait": ([ctypes.c_uint64], ctypes.c_int),
        "kvtier_readahead": ([ctypes.c_uint64], ctypes.c_int),
        "kvtier_drop": ([ctypes.c_uint64], ctypes.c_int),
        "kvtier_query": ([ctypes.c_uint64, ctypes.POINTER(_SpillInfo)], ctypes.c_int),
    }
    found = {}
    for name, (args, res) in sigs.items():
        try:
            f = getattr(lib, name)
        except AttributeError:
            continue
        f.argtypes, f.restype = args, res
        found[name] = f
    return found


_fns = _lookup()


def available():
    """Whether the process runs under the shim (its hint API is there)."""
    return "kvtier_hint" in _fns


def ssd_available():
    """Whether the shim has the SSD tier's calls (kvtierd may still have it off)."""
    return "kvtier_spill" in _fns


def _call(name, what, *args):
    f = _fns.get(name)
    rc = f(*args) if f else NOT_AVAILABLE
    if rc < 0:
        raise _ERRORS.get(rc, KvtierError)(rc, what)
    return rc


def _ptr_len(obj, nbytes):
    """(address, bytes) of a tensor, a CUDA array, a buffer, or an int address."""
    if isinstance(obj, tuple):
        obj, nbytes = obj
    if isinstance(obj, int):
        if nbytes is None:
            raise ValueError("nbytes is needed with a plain address")
        return obj, int(nbytes)
    if hasattr(obj, "data_ptr"):  # torch.Tensor
        n = obj.numel() * obj.element_size()
        return obj.data_ptr(), int(nbytes) if nbytes is not None else n
    cai = getattr(obj, "__cuda_array_interface__", None)
    if cai is not None:  # CuPy, Numba
        n = getattr(obj, "nbytes", None)
        return cai["data"][0], int(nbytes) if nbytes is not None else int(n)
    view = memoryview(obj)
    if view.readonly:
        raise ValueError("a spill's buffer is restored into: it must be writable")
    n = view.nbytes
    addr = ctypes.addressof(ctypes.c_char.from_buffer(view))
    return addr, int(nbytes) if nbytes is not None else n


def _stream(stream):
    if stream is None:
        return None
    for attr in ("cuda_stream", "ptr", "handle"):  # torch, CuPy, cuda-python
        v = getattr(stream, attr, None)
        if isinstance(v, int):
            return v or None
    return int(stream) or None


def hint(ptr, nbytes=None, kind=HOT):
    """Hints a range of captured memory; returns 0 or a negative errno
    (NOT_AVAILABLE without the shim).  Never raises for the shim's absence."""
    f = _fns.get("kvtier_hint")
    if not f:
        return NOT_AVAILABLE
    addr, n = _ptr_len(ptr, nbytes)
    return f(addr, n, kind)


def spill(obj, nbytes=None):
    """Spills a range to the SSD tier; returns its handle.  The range must not
    be touched until restore_wait() (or a stream ordered after restore())."""
    addr, n = _ptr_len(obj, nbytes)
    h = ctypes.c_uint64(0)
    _call("kvtier_spill", "kvtier_spill", addr, n, ctypes.byref(h))
    return h.value


def restore(handle, stream=None):
    """Queues the restore of handle, ordered on stream (torch/CuPy stream, an
    int, or None for the legacy stream)."""
    _call("kvtier_restore", "kvtier_restore", handle, _stream(stream))


def restore_wait(handle):
    """Waits for the restore of handle; raises its error (ChecksumError ...)."""
    _call("kvtier_restore_wait", "kvtier_restore_wait", handle)


def readahead(handle):
    """Starts the restore of handle now, ordered on no stream."""
    _call("kvtier_readahead", "kvtier_readahead", handle)


def drop(handle):
    """Forgets a spill and frees its blocks on disk."""
    _call("kvtier_drop", "kvtier_drop", handle)


def query(handle):
    """A SpillInfo(size_bytes, state, last_error, released) of handle."""
    info = _SpillInfo()
    _call("kvtier_query", "kvtier_query", handle, ctypes.byref(info))
    return SpillInfo(info.size_bytes, info.state, info.last_error, bool(info.released))
