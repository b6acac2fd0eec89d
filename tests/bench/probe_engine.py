#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A probe engine in a process of its own, to line up with mover-bench --interfere.

    probe_engine.py run --seconds S --out FILE
        Reads 64 MiB of plain VRAM on a stream of its own and waits for that
        stream, back to back, for S seconds (PyTorch, no kvtier); writes one
        line per step: CLOCK_MONOTONIC start (s), launch (us), step (us).

    probe_engine.py attribute FILE MOVER_OUTPUT
        For every "interfere:" phase of mover-bench's output (each carries its
        monotonic span), the probe's steps inside it: count, median, longest
        launch, and the time lost against the median of its steps in the
        idle phase.

mover-bench's own probe is a thread of the moving process (or, with
KVT_PROBE_CTX=own, a context of its own there); this one shows what a move
does to another process on the same GPU.
"""
import argparse
import re
import statistics
import sys
import time


def run(a):
    import torch

    buf = torch.zeros(64 << 18, dtype=torch.float32, device="cuda")  # 64 MiB
    s = torch.cuda.Stream()
    rows = []
    end = time.monotonic() + a.seconds
    with torch.cuda.stream(s):
        for _ in range(50):  # warm up the kernel and the allocator
            buf.sum()
        s.synchronize()
        while True:
            t0 = time.monotonic()
            if t0 >= end:
                break
            buf.sum()
            t1 = time.monotonic()
            s.synchronize()
            rows.append((t0, (t1 - t0) * 1e6, (time.monotonic() - t0) * 1e6))
    with open(a.out, "w") as f:
        for r in rows:
            f.write(f"{r[0]:.6f} {r[1]:.1f} {r[2]:.1f}\n")


PHASE = re.compile(r"^interfere: (.*?)\s+\d+ steps,.*monotonic ([0-9.]+)-([0-9.]+) s")


def attribute(a):
    rows = [tuple(map(float, line.split())) for line in open(a.file) if line.strip()]
    phases = []
    for line in open(a.mover_output):
        m = PHASE.match(line)
        if m:
            phases.append((m.group(1).strip(), float(m.group(2)), float(m.group(3))))
    if not rows or not phases:
        sys.exit("attribute: no probe steps or no phases")
    idle_steps = [r[2] for r in rows if phases[0][1] <= r[0] <= phases[0][2]]
    if not idle_steps:
        sys.exit("attribute: no probe step in the idle phase")
    idle = statistics.median(idle_steps)
    print(f"probe process: {len(rows)} steps, median {idle:.1f} us in the idle phase")
    for name, lo, hi in phases:
        inside = [r for r in rows if lo <= r[0] <= hi]
        if not inside:
            print(f"probe process: {name:32s} no step")
            continue
        lost = sum(max(r[2] - idle, 0) for r in inside) / 1e3
        print(f"probe process: {name:32s} {len(inside):6d} steps, median {statistics.median(r[2] for r in inside):8.1f} us, "
              f"max {max(r[2] for r in inside):8.1f}, longest launch {max(r[1] for r in inside):8.1f} us; "
              f"lost {lost:7.1f} ms of {(hi - lo) * 1e3:.1f}")


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--seconds", type=float, required=True)
    r.add_argument("--out", required=True)
    t = sub.add_parser("attribute")
    t.add_argument("file")
    t.add_argument("mover_output")
    a = ap.parse_args()
    run(a) if a.cmd == "run" else attribute(a)


if __name__ == "__main__":
    main()
