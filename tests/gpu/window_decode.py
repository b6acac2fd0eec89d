#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A decode with sliding-window attention in plain PyTorch: the hot window of
a real decode, for kvtier's heat on a real GPU (tests/gpu/window-h200.sh).

Per layer one K and one V cache, token-major [max_seq, heads, head_dim] bf16,
each one allocation the shim captures.  A prefill writes the first --prefill
positions; then every decode step writes one position per cache (the token
it decodes) and attends over the last --window positions only (as
Mistral-style sliding-window attention does).  So each cache has a hot window
of window * heads * head_dim * 2 bytes that slides forward one chunk (2 MiB)
every 2 MiB / (heads * head_dim * 2) steps; behind it the cache goes cold,
ahead of it it is not written yet.

The kernels' pointers name the window's first byte and the written position;
nothing tells kvtier where the window ends but the GPU's own accesses.

Prints one JSON line last: ms per step over all steps and over the last
quarter (steady state), the steps done (--max-seconds may stop it early), a
checksum of the outputs, and per cache its base address and the byte range of
its window at the end, so that a caller can compare kvtierd's chunk map with
where the window is.
"""
import argparse
import json
import shlex
import subprocess
import time

import torch
import torch.nn.functional as F


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--max-seq", type=int, default=32768)
    ap.add_argument("--prefill", type=int, default=8192)
    ap.add_argument("--window", type=int, default=4096)
    ap.add_argument("--steps", type=int, default=2048)
    ap.add_argument("--max-seconds", type=float, default=60.0)
    ap.add_argument("--kvtierctl", help="command that prints kvtierd's status JSON (e.g. 'kvtierctl -s SOCK "
                    "status --json'): run at the end, and the window's chunks are looked up in its chunk maps")
    a = ap.parse_args()
    assert a.window <= a.prefill and a.prefill + a.steps <= a.max_seq

    torch.manual_seed(0)
    dev = torch.device("cuda")
    shape = (a.max_seq, a.heads, a.head_dim)
    caches = []
    for _ in range(a.layers):
        kv = [torch.empty(shape, dtype=torch.bfloat16, device=dev) for _ in range(2)]
        for t in kv:
            t[: a.prefill].normal_()
        caches.append(kv)
    torch.cuda.synchronize()
    gen = torch.Generator(device=dev)
    gen.manual_seed(1)
    scale = 1.0 / a.head_dim ** 0.5
    times = []
    acc = torch.zeros((), dtype=torch.float64, device=dev)
    pos = a.prefill
    t_start = time.perf_counter()
    for _ in range(a.steps):
        t0 = time.perf_counter()
        x = torch.randn(1, a.heads, 1, a.head_dim, dtype=torch.bfloat16, device=dev, generator=gen)
        for k, v in caches:
            k[pos] = x[0, :, 0]
            v[pos] = x[0, :, 0] * 0.5
            lo = pos + 1 - a.window
            kw = k[lo : pos + 1].permute(1, 0, 2).unsqueeze(0)  # [1, H, W, D]
            vw = v[lo : pos + 1].permute(1, 0, 2).unsqueeze(0)
            x = F.scaled_dot_product_attention(x, kw, vw, scale=scale)
        acc += x.double().sum()
        pos += 1
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        if time.perf_counter() - t_start > a.max_seconds:
            break
    total = time.perf_counter() - t_start
    # kvtierd's books first: the checksums below read every cache, and the
    # daemon would move chunks for them.
    books = residency(a.kvtierctl, caches, pos, a.window, a.heads * a.head_dim * 2) if a.kvtierctl else None
    # Exact checksums: of the prefill (seeded data nothing rewrites: equal in
    # every run unless kvtier lost a byte) and of everything written.
    prefill_sum = sum(word_sum(t[: a.prefill]) for kv in caches for t in kv)
    cache_sum = sum(word_sum(t[:pos]) for kv in caches for t in kv)
    n = len(times)
    tail = times[n - max(1, n // 4):]
    token_bytes = a.heads * a.head_dim * 2
    print(json.dumps({
        "steps": n, "ms_per_step": total / n * 1e3, "ms_per_step_last_quarter": sum(tail) / len(tail) * 1e3,
        "checksum": repr(acc.item()), "prefill_sum": prefill_sum, "cache_sum": cache_sum,
        "token_bytes": token_bytes,
        "window_bytes": a.window * token_bytes, "cache_bytes": a.max_seq * token_bytes,
        "caches": [{"base": t.data_ptr(), "window_lo": (pos - a.window) * token_bytes,
                    "window_hi": pos * token_bytes} for kv in caches for t in kv],
        "books": books,
    }))


CHUNK = 2 << 20


def word_sum(t):
    """Exact: sum of the 16-bit words of t times (index % 65521 + 1)."""
    flat = t.reshape(-1).view(torch.int16)
    acc, span = 0, 1 << 26
    for i in range(0, flat.numel(), span):
        x = flat[i:i + span].to(torch.int64)
        w = torch.arange(i, i + x.numel(), device=x.device, dtype=torch.int64) % 65521 + 1
        acc += int((x * w).sum().item())
    return acc


def chunk_tiers(chunk_map):
    """kvtierd's run-length chunk map ("V16 M240 -256") as one letter per chunk."""
    out = []
    for run in chunk_map.split():
        out.append(run[0].upper() * int(run[1:]))
    return "".join(out)


def residency(cmd, caches, pos, window, token_bytes):
    """Per kvtierd's books at the end: of the chunks each cache's window
    touches, how many are in VRAM; and how many VRAM chunks lie outside the
    windows (what the budget holds that the decode no longer reads)."""
    try:
        st = json.loads(subprocess.run(shlex.split(cmd), capture_output=True, text=True, timeout=10).stdout)
    except (OSError, ValueError, subprocess.SubprocessError) as e:
        return {"error": str(e)}
    regions = {int(r["base"], 16): r for c in st.get("clients", []) for r in c["regions"]}
    win_total = win_vram = out_vram = 0
    for kv in caches:
        for t in kv:
            r = regions.get(t.data_ptr() & ~(CHUNK - 1))
            if r is None or "chunk_map" not in r:
                return {"error": "cache at 0x%x not in kvtierd's regions" % t.data_ptr()}
            tiers = chunk_tiers(r["chunk_map"])
            off = t.data_ptr() - int(r["base"], 16)
            lo = (off + (pos - window) * token_bytes) // CHUNK
            hi = (off + pos * token_bytes - 1) // CHUNK
            for i, tier in enumerate(tiers):
                if lo <= i <= hi:
                    win_total += 1
                    win_vram += tier == "V"
                else:
                    out_vram += tier == "V"
    return {"window_chunks": win_total, "window_chunks_vram": win_vram, "other_chunks_vram": out_vram,
            "budget_chunks": sum(g["budget_bytes"] for g in st["gpus"]) // CHUNK}


if __name__ == "__main__":
    main()
