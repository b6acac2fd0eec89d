#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Whether kvtier sees the GPU's first touch of memory captured beyond its
grant: allocates --regions tensors of --mib MiB (each its own cudaMalloc,
captured), fills each on the GPU, waits --settle seconds (for the shim's
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
    a = ap.parse_args()
    n = a.mib << 20
    ts = [torch.empty(n, dtype=torch.uint8, device="cuda") for _ in range(a.regions)]
    torch.cuda.synchronize()
    mark("allocated")
    time.sleep(a.settle)
    for i, t in enumerate(ts):
        t.fill_(i + 1)
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
