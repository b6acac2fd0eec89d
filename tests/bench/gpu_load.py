#!/usr/bin/env python3
"""gpu_load.py KIND SECONDS: keeps the GPU busy one way for SECONDS (or until
SIGTERM), to time what kvtier's mover does beside an engine
(tests/bench/evict-load-h200.sh).

  compute   fp16 matrix products on 64 MiB operands in VRAM (no PCIe traffic)
  hbm       sums of a 4 GiB array in VRAM (HBM-bound, no PCIe traffic)
  zerocopy  sums of 1 GiB of pinned host memory mapped into the GPU: kernels
            reading host memory in place over the link, as an engine does
            with kvtier's host-mapped chunks
  h2d       cudaMemcpyAsync of 1 GiB pinned host memory to VRAM (copy engine)

Prints the kind, the iterations and the GB/s (or TFLOP/s) it kept up, on
one line, when done.  Needs CuPy."""
import signal, sys, time
import cupy as cp

kind, secs = sys.argv[1], float(sys.argv[2])
GiB = 1 << 30
if kind == "compute":
    a = cp.random.random((4096, 8192), dtype=cp.float32).astype(cp.float16)
    b = cp.random.random((8192, 4096), dtype=cp.float32).astype(cp.float16)
    step, unit = lambda: a @ b, 2 * 4096 * 8192 * 4096 / 1e12
elif kind == "hbm":
    x = cp.ones(4 * GiB // 4, dtype=cp.float32)
    step, unit = lambda: x.sum(), 4 * GiB / 1e9
elif kind == "zerocopy":
    mem = cp.cuda.alloc_pinned_memory(GiB)  # cudaHostAlloc, portable and mapped on 64-bit
    dptr = mem.ptr  # cudaHostAlloc memory: with unified addressing its device pointer is its host pointer
    um = cp.cuda.UnownedMemory(dptr, GiB, mem)
    x = cp.ndarray((GiB // 4,), dtype=cp.float32, memptr=cp.cuda.MemoryPointer(um, 0))
    x.fill(1)
    step, unit = lambda: x.sum(), GiB / 1e9
elif kind == "h2d":
    h = cp.cuda.alloc_pinned_memory(GiB)
    d = cp.empty(GiB, dtype=cp.uint8)
    s = cp.cuda.Stream(non_blocking=True)
    step = lambda: cp.cuda.runtime.memcpyAsync(d.data.ptr, h.ptr, GiB, cp.cuda.runtime.memcpyHostToDevice, s.ptr)
    unit = GiB / 1e9
else:
    sys.exit(f"unknown kind {kind}")
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
print(f"load {kind}: running from {time.time():.3f} (wall clock)", flush=True)
n, t0 = 0, time.monotonic()
while time.monotonic() - t0 < secs and not stop:
    for _ in range(4):
        step()
        n += 1
    cp.cuda.runtime.deviceSynchronize()
dt = time.monotonic() - t0
print(f"load {kind}: until {time.time():.3f}, {n} iterations in {dt:.2f} s, {n * unit / dt:.1f} {'TFLOP/s' if kind == 'compute' else 'GB/s'}",
      flush=True)
