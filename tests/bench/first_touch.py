#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Whether kvtier sees the GPU's first touch of memory captured beyond its
grant: allocates --regions tensors of --mib MiB (each its own cudaMalloc,
captured), fills each on the GPU (--fill: a kernel; or copies from a 32 MiB
tensor in VRAM or pinned host memory, too small to be captured, which the
copy engines do), waits --settle seconds (for the shim's
CUPTI flush and the daemon's tick), reads them all once, waits again.
Prints a line at each step ("first_touch: STEP at T") for the driver,
which reads the daemon's chunk maps in between (first-touch-h200.sh), and
the read's bandwidth: a chunk the GPU mapped unseen is read across the
link with no fault."""
import argparse
import sys
import time

import torch


def mark(step):
    print("first_touch: %s at %.3f" % (step, time.time()), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--regions", type=int, default=8)
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--settle", type=float, default=1.0)
    ap.add_argument("--fill", choices=("kernel", "copy", "host"), default="kernel")
    a = ap.parse_args()
    n = a.mib << 20
    ts = [torch.empty(n, dtype=torch.uint8, device="cuda") for _ in range(a.regions)]
    torch.cuda.synchronize()
    mark("allocated")
    time.sleep(a.settle)
    piece = 32 << 20
    if a.fill != "kernel":
        src = torch.empty(piece, dtype=torch.uint8, device="cuda" if a.fill == "copy" else "cpu",
                          pin_memory=a.fill == "host")
    for i, t in enumerate(ts):
        if a.fill == "kernel":
            t.fill_(i + 1)
            continue
        src.fill_(i + 1)
        for o in range(0, n, piece):
            m = min(piece, n - o)
            t[o:o + m].copy_(src[:m], non_blocking=True)
        torch.cuda.synchronize()  # before src is refilled
    torch.cuda.synchronize()
    mark("filled")
    time.sleep(a.settle)
    t0 = time.perf_counter()
    s = sum(int(t[:: 1 << 20].sum()) for t in ts)  # a read of every 1 MiB's first byte
    for t in ts:
        t.view(torch.float32).sum()  # and of every byte, with no temporary of its size
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    mark("read")
    print("first_touch: read %d MiB in %.3f s (%.1f GB/s), check %d" % (a.regions * a.mib, dt,
                                                                      a.regions * n / dt / 1e9, s), flush=True)
    time.sleep(a.settle)
    mark("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
