#!/usr/bin/env python3
"""A small decode loop in plain PyTorch, for recording a kvtier trace
(KVTIER_DEBUG=trace) on a real GPU: per layer one K and one V cache tensor
[1, heads, max_seq, head_dim] in bf16 (each large enough to be captured),
then --steps decode steps that append one position to every layer's cache
and attend over what is filled (scaled_dot_product_attention).  The shim's
launch hooks see the kernels' pointers into the caches; its CUPTI sampler
sees the faults.  Prints one JSON line at the end."""
import argparse, json, time

import torch
import torch.nn.functional as F


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--max-seq", type=int, default=32768)
    ap.add_argument("--prefill", type=int, default=4096)
    ap.add_argument("--steps", type=int, default=64)
    a = ap.parse_args()

    torch.manual_seed(0)
    dev = torch.device("cuda")
    shape = (1, a.heads, a.max_seq, a.head_dim)
    ks = [torch.zeros(shape, dtype=torch.bfloat16, device=dev) for _ in range(a.layers)]
    vs = [torch.zeros(shape, dtype=torch.bfloat16, device=dev) for _ in range(a.layers)]
    for k, v in zip(ks, vs):
        k[:, :, : a.prefill].normal_()
        v[:, :, : a.prefill].normal_()
    torch.cuda.synchronize()
    t0 = time.time()
    pos = a.prefill
    out = None
    for _ in range(a.steps):
        x = torch.randn(1, a.heads, 1, a.head_dim, dtype=torch.bfloat16, device=dev)
        for k, v in zip(ks, vs):
            k[:, :, pos : pos + 1] = x
            v[:, :, pos : pos + 1] = x
            out = F.scaled_dot_product_attention(x, k[:, :, : pos + 1], v[:, :, : pos + 1])
            x = out
        pos += 1
    torch.cuda.synchronize()
    dt = time.time() - t0
    print(json.dumps({"steps": a.steps, "layers": a.layers, "ms_per_step": dt / a.steps * 1e3,
                      "cache_bytes_per_tensor": k.numel() * 2, "checksum": float(out.float().sum())}))


if __name__ == "__main__":
    main()
