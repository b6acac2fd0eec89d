#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""How fast the kernels of a long context's decode read a layer's K and V
where kvtier leaves them: in VRAM, or in host memory read in place (managed
memory, preferred location host, mapped for the GPU: what an evicted chunk
is).  No kvtier: the memory is allocated and advised here, through the
driver API.  For each kernel, the bytes it reads over its time (CUDA
events, median of --reps after warm-ups), in both places, and the
migration of the same bytes by prefetch for comparison.  One JSON line a
kernel, then one with the prefetch speeds.  Besides VRAM and host, two
placements kvtier makes: "alternate" (even 2 MiB chunks in VRAM, odd ones
in host memory: a tensor split by chunk) and "rearmed" (host memory whose
every chunk kvtier's sampler has re-armed before each run, as the shim
does: read duplication set and unset on the chunk's first 4 KiB page, so
that the kernel's first touch of that page faults); and "rearmed_chunk",
the same advice on the whole 2 MiB chunk (what a sample of the whole chunk
would cost: every page of it faults)."""
import argparse
import ctypes
import json
import statistics

import torch
import torch.nn.functional as F

ADVISE_READ_MOSTLY, ADVISE_UNSET_READ_MOSTLY, ADVISE_PREFERRED, ADVISE_ACCESSED_BY = 1, 2, 3, 5
CHUNK = 2 << 20
SAMPLE_PAGE = 4096  # the shim's sample page (KVT_SAMPLE_PAGE_BYTES)
LOC_DEVICE, LOC_HOST = 1, 2


class Loc(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


def loc(where):
    """Device 0 for "vram", the host otherwise."""
    return Loc(LOC_DEVICE, 0) if where == "vram" else Loc(LOC_HOST, 0)


class Managed:
    """n bytes of managed memory, placed by place()."""

    def __init__(self, cu, n):
        self.cu, self.n, self.ptr = cu, n, ctypes.c_uint64()
        check(cu.cuMemAllocManaged(ctypes.byref(self.ptr), ctypes.c_size_t(n), ctypes.c_uint(1)), "cuMemAllocManaged")
        self.__cuda_array_interface__ = {"shape": (n,), "typestr": "|u1", "data": (self.ptr.value, False),
                                         "version": 3}

    def place(self, where):
        if where == "alternate":
            for off in range(0, self.n, CHUNK):
                self.place_range(off, min(CHUNK, self.n - off), "vram" if off // CHUNK % 2 == 0 else "host")
        else:
            self.place_range(0, self.n, "host" if where.startswith("rearmed") else where)

    def place_range(self, off, n, where):
        cu, p, n = self.cu, ctypes.c_uint64(self.ptr.value + off), ctypes.c_size_t(n)
        torch.cuda.synchronize()
        check(cu.cuMemAdvise_v2(p, n, ADVISE_PREFERRED, loc(where)), "advise")
        if where != "vram":
            check(cu.cuMemAdvise_v2(p, n, ADVISE_ACCESSED_BY, loc("vram")), "advise")
        check(cu.cuMemPrefetchAsync_v2(p, n, loc(where), 0, None), "prefetch")
        check(cu.cuCtxSynchronize(), "sync")

    def rearm(self, size):
        """What kvtier's sampler does to each mapped host chunk it re-arms
        (size SAMPLE_PAGE), or the same on size bytes of it: the next GPU
        access of those bytes faults."""
        torch.cuda.synchronize()
        for off in range(0, self.n, CHUNK):
            p, n = ctypes.c_uint64(self.ptr.value + off), ctypes.c_size_t(min(size, self.n - off))
            check(self.cu.cuMemAdvise_v2(p, n, ADVISE_READ_MOSTLY, loc("vram")), "advise")
            check(self.cu.cuMemAdvise_v2(p, n, ADVISE_UNSET_READ_MOSTLY, loc("vram")), "advise")

    def prefetch_ms(self, where):
        p, n = ctypes.c_uint64(self.ptr.value), ctypes.c_size_t(self.n)
        torch.cuda.synchronize()
        return elapsed_ms(lambda: check(self.cu.cuMemPrefetchAsync_v2(p, n, loc(where), 0, None), "prefetch"))


def check(rc, what):
    if rc != 0:
        raise RuntimeError("%s failed: CUresult %d" % (what, rc))


def elapsed_ms(fn):
    """The GPU time of what fn puts on the current stream, by CUDA events."""
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    fn()
    b.record()
    b.synchronize()
    return a.elapsed_time(b)


def timed(fn, reps, before=None):
    """The median GPU time of fn over reps runs after two warm-ups; before()
    (untimed) ahead of each."""
    times = []
    for i in range(reps + 2):
        if before:
            before()
        ms = elapsed_ms(fn)
        if i >= 2:
            times.append(ms)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--context", type=int, default=32768)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--reps", type=int, default=7)
    a = ap.parse_args()
    torch.zeros(1, device="cuda")  # the primary context, current on this thread
    cu = ctypes.CDLL("libcuda.so.1")
    shape = (1, a.kv_heads, a.context, a.head_dim)
    nbytes = 2 * a.kv_heads * a.context * a.head_dim
    bufs = [Managed(cu, nbytes) for _ in range(2)]
    k, v = (torch.as_tensor(b, device="cuda").view(torch.bfloat16).view(shape) for b in bufs)
    for b in bufs:
        b.place("vram")
    k.normal_()
    v.normal_()
    q = torch.randn(1, a.heads, 1, a.head_dim, device="cuda", dtype=torch.bfloat16)
    mask = torch.ones(1, 1, 1, a.context, device="cuda", dtype=torch.bool)
    k_new = torch.randn(1, a.kv_heads, 1, a.head_dim, device="cuda", dtype=torch.bfloat16)
    dst = torch.empty(shape, device="cuda", dtype=torch.bfloat16)
    kernels = {
        # DynamicCache's decode: attention over K and V, no mask
        "sdpa": (lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True), 2 * nbytes),
        # the same with a mask over the whole cache (transformers' sdpa path
        # with a mask copies K and V to all heads first, repeat_kv: not timed)
        "sdpa_mask": (lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True), 2 * nbytes),
        # DynamicCache's update: the cache and one token into a new tensor (in VRAM here)
        "cat": (lambda: torch.cat([k, k_new], dim=2), nbytes),
        # a copy into VRAM (torch's copy_: a copy engine or a kernel)
        "copy": (lambda: dst.copy_(k), nbytes),
        # transformers' repeat_kv: K expanded to all query heads, copied
        # (what an attention with a mask reads instead of the cache)
        "repeat_kv": (lambda: k[:, :, None].expand(1, a.kv_heads, a.heads // a.kv_heads, a.context, a.head_dim)
                      .reshape(1, a.heads, a.context, a.head_dim), nbytes),
        # a reduction: every SM streaming the bytes
        "sum": (lambda: k.sum(dtype=torch.float32), nbytes),
    }
    ref = {name: fn() for name, (fn, _) in kernels.items() if name in ("sdpa", "sdpa_mask")}
    for name, (fn, read) in kernels.items():
        row = {"kernel": name, "read_bytes": read}
        for where in ("vram", "host", "alternate", "rearmed", "rearmed_chunk"):
            for b in bufs:
                b.place(where)
            size = {"rearmed": SAMPLE_PAGE, "rearmed_chunk": CHUNK}.get(where)
            rearm = (lambda: [b.rearm(size) for b in bufs]) if size else None
            ms = timed(fn, a.reps, rearm)
            row[where + "_ms"] = round(ms, 3)
            row[where + "_gbs"] = round(read / ms / 1e6, 1)
            if name in ref:
                row[where + "_same"] = bool(torch.equal(fn(), ref[name]))
        row["host_over_vram"] = round(row["host_ms"] / row["vram_ms"], 2)
        print(json.dumps(row), flush=True)
    moves = {}
    for where in ("vram", "host", "vram", "host"):
        ms = bufs[0].prefetch_ms(where)
        moves.setdefault("to_" + where + "_gbs", []).append(round(nbytes / ms / 1e6, 1))
    print(json.dumps({"kernel": "prefetch", "bytes": nbytes, **moves}), flush=True)


if __name__ == "__main__":
    main()
