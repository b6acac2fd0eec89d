#!/usr/bin/env python3
"""Unmodified PyTorch under kvtier: results must be bitwise equal to a run
without the shim.

Allocates a KV-like pool of --pool-gib GiB in tensors of --tensor-mib MiB
(the caching allocator calls cudaMalloc per segment, so the shim captures
them), fills it from a seeded generator, runs attention-like reads over a
sliding window, and prints a SHA-256 of every result.  Run it with and
without LD_PRELOAD=libkvtier.so and compare the digests.  With --ctl, it
runs kvtierctl status --json while the pool is alive and prints the number
of regions the daemon sees for this process.
"""
import argparse, hashlib, json, os, subprocess, sys, time

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pool-gib", type=float, default=4.0)
    ap.add_argument("--tensor-mib", type=int, default=256)
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--ctl", default=None, help="kvtierctl binary to query")
    a = ap.parse_args()

    torch.use_deterministic_algorithms(True)
    torch.manual_seed(1234)
    dev = torch.device("cuda")
    n = int(a.pool_gib * 1024 / a.tensor_mib)
    elems = a.tensor_mib * (1 << 20) // 2  # bf16
    heads, dim = 8, 128
    rows = elems // (heads * dim)
    pool = []
    gen = torch.Generator(device=dev).manual_seed(99)
    for _ in range(n):
        t = torch.empty(rows, heads, dim, dtype=torch.bfloat16, device=dev)
        t.normal_(generator=gen)
        pool.append(t)
    q = torch.randn(1, heads, 1, dim, dtype=torch.bfloat16, device=dev, generator=gen)
    digest = hashlib.sha256()
    window = max(1, n // 4)
    torch.cuda.synchronize()
    t0 = time.time()
    for s in range(a.steps):
        for k in range(window):
            kv = pool[(s + k) % n][:4096].transpose(0, 1).unsqueeze(0)  # [1, heads, 4096, dim]
            out = torch.nn.functional.scaled_dot_product_attention(q, kv, kv)
            digest.update(out.float().cpu().numpy().tobytes())
        sums = torch.stack([t.float().sum() for t in pool[s % n : s % n + 1]])
        digest.update(sums.cpu().numpy().tobytes())
    torch.cuda.synchronize()
    dt = time.time() - t0
    regions = None
    if a.ctl:
        st = json.loads(subprocess.run([a.ctl, "status", "--json"], capture_output=True, text=True, check=True).stdout)
        mine = [c for c in st["clients"] if c["pid"] == os.getpid()]
        regions = sum(len(c["regions"]) for c in mine)
    print(json.dumps({"digest": digest.hexdigest(), "tensors": n, "steps": a.steps, "seconds": round(dt, 3),
                      "kvtier_regions": regions}))


if __name__ == "__main__":
    sys.exit(main())
