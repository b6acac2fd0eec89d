#!/usr/bin/env python3
"""Allocations the shim captures while the engine captures a CUDA graph or
allocates from several threads at once: the results must be bitwise equal
to a run without the shim.

- graph-MODE: a torch.cuda.graph captured with capture_error_mode MODE
  (global, thread_local, relaxed) whose body allocates tensors of 96 MiB
  (the graph's private pool grows by cudaMalloc during the capture), then
  replayed 8 times on new inputs;
- threads: 8 threads, each on a stream of its own, allocating tensors of
  96-160 MiB and reducing them, 6 rounds.

Prints one JSON line: each check's SHA-256 over its results, and its
error if it raised.  Run it with and without LD_PRELOAD=libkvtier.so and
compare.
"""
import hashlib, json, threading

import torch

MIB = 1 << 20


def digest(ts):
    h = hashlib.sha256()
    for t in ts:
        h.update(t.detach().float().cpu().numpy().tobytes())
    return h.hexdigest()[:16]


def graph(mode):
    n = 96 * MIB // 4
    x = torch.zeros(n, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up outside the capture, as torch asks
        y = (x * 2 + 1).sum()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, capture_error_mode=mode):
        a = x * 3.0 + 1.0           # new 96 MiB tensors inside the capture
        b = torch.sin(a) * a
        y = b.sum() + a[::4096].sum()
    out = []
    for i in range(8):
        x.copy_(torch.arange(n, device="cuda", dtype=torch.float32) * (0.001 * (i + 1)))
        g.replay()
        out.append(y.clone())
    torch.cuda.synchronize()
    return digest(out)


def threads():
    res = [None] * 8
    errs = []

    def work(k):
        try:
            s = torch.cuda.Stream()
            acc = []
            with torch.cuda.stream(s):
                for r in range(6):
                    n = (96 + 8 * ((k + r) % 9)) * MIB // 4
                    t = torch.full((n,), float(k + 1), device="cuda") * (r + 1)
                    acc.append(t[:: 1 << 16].sum() + t[-1])
                    del t
            s.synchronize()
            res[k] = torch.stack(acc)
        except Exception as e:  # reported, not raised: the other threads go on
            errs.append(repr(e))

    ts = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errs:
        raise RuntimeError(errs[0])
    return digest(res)


def main():
    out = {}
    for name, fn in [("graph-global", lambda: graph("global")), ("graph-thread_local", lambda: graph("thread_local")),
                     ("graph-relaxed", lambda: graph("relaxed")), ("threads", threads)]:
        try:
            out[name] = fn()
        except Exception as e:
            out[name] = "error: " + repr(e)[:200]
        torch.cuda.synchronize()
    print(json.dumps(out, sort_keys=True))


if __name__ == "__main__":
    main()
