#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The SSD tier's compression on real KV (issue 20): how much `[ssd] compress
= zstd` saves on a transformer's K/V cache, and at what speed.

Builds tests/bench/long_context.py's model (its build(): random 16-layer
Llama, hidden 2048, 8 KV heads, bf16, fixed seed), prefills --context tokens
of its random prompt into a DynamicCache, and spills every layer's K and V
tensor with the kvtier package (one spill each), reads the daemon's stored
bytes for this process from `kvtierctl status --json` (ssd.clients[]: bytes,
stored_bytes) while they are spilled, restores them all on the compute
stream, waits, checks each against a copy taken before (torch.equal of
their 16-bit words) and drops them.  The same for two controls with the
KV's shapes: `randn` (normal bf16 with each K/V tensor's own standard
deviation: the same value distribution without the model's structure) and
`bytes` (uniform random 16-bit words: nothing to compress).  The weights
are random, not trained: a trained model's KV may compress differently.

Runs under libkvtier.so (LD_PRELOAD, KVTIER_SOCKET) with a kvtierd that has
an [ssd] section; --ctl is its kvtierctl (run without LD_PRELOAD).  Prints,
last, one JSON line: per set (kv, randn, bytes) raw_bytes, spilled_bytes and
stored_bytes (the daemon's), ratio (raw / stored), spill_gbps and
restore_gbps (this process's wall time: kvtier.spill's calls; kvtier.restore
of all, then the stream and restore_wait), equal (every tensor restored
bitwise), released (ranges whose memory the spill gave back).

--device cpu: a logic check without a GPU (host tensors; each spilled tensor
is overwritten before its restore, so that `equal` checks what came back),
with small --context and --layers.
"""
import argparse
import json
import os
import subprocess
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import long_context  # noqa: E402
from paged_kv import import_kvtier  # noqa: E402

DEVICE = "cuda"


def sync():
    if DEVICE == "cuda":
        torch.cuda.current_stream().synchronize()


def cache_tensors(cache):
    """[(name, tensor)] of every layer's K and V in a transformers cache (5.x
    layers[], 4.x key_cache/value_cache, or the legacy tuples)."""
    if hasattr(cache, "layers"):
        pairs = [(lay.keys, lay.values) for lay in cache.layers]
    elif hasattr(cache, "key_cache"):
        pairs = list(zip(cache.key_cache, cache.value_cache))
    else:
        pairs = [(cache[i][0], cache[i][1]) for i in range(len(cache))]
    out = []
    for i, (k, v) in enumerate(pairs):
        out += [("k%d" % i, k), ("v%d" % i, v)]
    return out


def span(t):
    """(address, bytes) of a tensor whose elements fill one range, else None."""
    extent = 1 + sum((n - 1) * st for n, st in zip(t.shape, t.stride()) if n > 0)
    if t.numel() == 0 or extent != t.numel():
        return None
    return t.data_ptr(), t.numel() * t.element_size()


def ssd_status(ctl, sock):
    """(the status's ssd object, this process's client in it) or (None, None)."""
    if not ctl or not sock:
        return None, None
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}  # kvtierctl without the shim
    try:
        r = subprocess.run([ctl, "-s", sock, "status", "--json"], env=env, capture_output=True, text=True,
                           timeout=30)
        ssd = json.loads(r.stdout).get("ssd") or {}
    except (OSError, ValueError, subprocess.TimeoutExpired) as e:
        print("kv_compress: kvtierctl status: %s" % e, file=sys.stderr)
        return None, None
    clients = ssd.get("clients") or []
    me = next((c for c in clients if c.get("pid") == os.getpid()), None)
    if me is None and len(clients) == 1:  # another pid namespace
        me = clients[0]
    return ssd, me


def measure(kv, name, tensors, ctl, sock):
    copies = 0
    for i, t in enumerate(tensors):
        if span(t) is None:
            tensors[i] = t.contiguous()
            copies += 1
    refs = [t.clone() for t in tensors]
    raw = sum(t.numel() * t.element_size() for t in tensors)
    sync()
    _, before = ssd_status(ctl, sock)
    t0 = time.perf_counter()
    hs = [kv.spill(span(t)) for t in tensors]
    spill_s = time.perf_counter() - t0
    released = sum(kv.query(h).released for h in hs)
    if DEVICE == "cpu":  # host memory keeps its pages: lose them as released GPU chunks are lost
        for t in tensors:
            t.fill_(-1.5)
    _, me = ssd_status(ctl, sock)
    stored = spilled = None
    if me is not None:
        spilled = me.get("bytes", 0) - (before or {}).get("bytes", 0)
        stored = me.get("stored_bytes", 0) - (before or {}).get("stored_bytes", 0)
    stream = torch.cuda.current_stream() if DEVICE == "cuda" else None
    t0 = time.perf_counter()
    for h in hs:
        kv.restore(h, stream)
    sync()
    for h in hs:
        kv.restore_wait(h)
    restore_s = time.perf_counter() - t0
    # bitwise: random words hold NaNs, which torch.equal of bf16 calls unequal
    equal = all(torch.equal(t.view(torch.int16), r.view(torch.int16)) for t, r in zip(tensors, refs))
    for h in hs:
        kv.drop(h)
    r = {"tensors": len(tensors), "raw_bytes": raw, "spilled_bytes": spilled, "stored_bytes": stored,
         "ratio": raw / stored if stored else None, "spill_s": spill_s, "restore_s": restore_s,
         "spill_gbps": raw / spill_s / 1e9, "restore_gbps": raw / restore_s / 1e9, "equal": equal,
         "released": released, "copies": copies}
    print("kv_compress: %s: %s" % (name, json.dumps(r)), file=sys.stderr, flush=True)
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--context", type=int, default=32768)
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ctl", default=os.environ.get("KVTIER_CTL", "kvtierctl"),
                    help="kvtierctl, for the daemon's stored bytes (default $KVTIER_CTL or kvtierctl)")
    ap.add_argument("--socket", default=os.environ.get("KVTIER_SOCKET"),
                    help="kvtierd's socket (default $KVTIER_SOCKET)")
    ap.add_argument("--controls", default="randn,bytes", help="comma-separated: randn, bytes (or none)")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                    help="cpu: a logic check without a GPU (small --context and --layers)")
    a = ap.parse_args()
    global DEVICE
    DEVICE = a.device
    controls = [c for c in a.controls.split(",") if c and c != "none"]
    if set(controls) - {"randn", "bytes"}:
        ap.error("--controls: randn, bytes or none")
    kv = import_kvtier()
    if not kv.ssd_available():
        sys.exit("kv_compress: runs under libkvtier.so (LD_PRELOAD) with a kvtierd that has an [ssd] section")

    # new=64: the config (max_position_embeddings) of long_context.py's default run
    cfg, model, ids = long_context.build(a.layers, a.context, 64, a.seed, device=a.device)
    t0 = time.perf_counter()
    with torch.no_grad():
        try:
            out = model(ids, use_cache=True, logits_to_keep=1)
        except TypeError:
            out = model(ids, use_cache=True)
    sync()
    prefill_s = time.perf_counter() - t0
    cache = out.past_key_values
    del out
    named = cache_tensors(cache)
    tensors = [t for _, t in named]
    ssd, _ = ssd_status(a.ctl, a.socket)
    res = {"context": a.context, "layers": a.layers, "prefill_s": prefill_s,
           "compress": (ssd or {}).get("compress"), "block_bytes": (ssd or {}).get("block_bytes"),
           "dtype": str(tensors[0].dtype), "shape": list(tensors[0].shape)}
    res["kv"] = measure(kv, "kv", tensors, a.ctl, a.socket)
    stds = [float(t.float().std()) for t in tensors]
    shapes = [t.shape for t in tensors]
    del tensors, named
    g = torch.Generator(device=a.device).manual_seed(a.seed + 2)
    for c in controls:
        if c == "randn":
            ctl_t = [(torch.randn(sh, generator=g, device=a.device) * sd).to(torch.bfloat16)
                     for sh, sd in zip(shapes, stds)]
        else:
            ctl_t = [torch.randint(0, 256, (sh.numel() * 2,), generator=g, dtype=torch.uint8, device=a.device)
                     .view(torch.bfloat16).view(sh) for sh in shapes]
        res[c] = measure(kv, c, ctl_t, a.ctl, a.socket)
        del ctl_t
    res["ok"] = all(res[k]["equal"] for k in ["kv"] + controls)
    print(json.dumps(res))
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
