#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Workload 2 of BENCHMARKS.md: paged multi-session decode in unmodified PyTorch.

One vLLM-style KV pool per layer (K and V tensors [blocks, block_size, heads,
head_dim], bf16).  B decode slots; each runs one session for a turn of
--turn steps, then takes the next session drawn Zipf-distributed from all
sessions (so the working set, B sessions, fits a VRAM budget a quarter of
the pool, while the pool does not).  Each step appends one token's K/V per
slot (a write into the pool) and runs attention over every block of the
slot's session (gather + scaled_dot_product_attention), for every layer.

--pool: torch (torch.empty on cuda: VRAM, or kvtier's managed memory when
run under libkvtier.so), managed (cudaMallocManaged through CuPy, no advice),
zerocopy (pinned host memory read by the GPU over PCIe).
--layout: contiguous (a session's blocks adjacent) or interleaved (blocks
dealt out round-robin over sessions: every 2 MiB chunk holds blocks of many).
--hint: tell kvtier (kvtier_hint via ctypes) which sessions a turn starts and
ends, as an engine that knows its scheduler would; only under libkvtier.so.
--device cpu: everything on the CPU, small sizes: a check of the logic (pool
sums equal across pools) on a machine without a GPU, not a measurement.

Prints one JSON line last: tokens/s, step time, a digest of all outputs (the
sum of the attention outputs: not bitwise repeatable even all-VRAM, attention
kernels differ in reduction order run to run) and pool_sum, an exact integer
checksum of every K/V pool after the run (seeded data and deterministic
writes: equal across pools and runs unless some KV byte was lost).  Phase
marks (wall-clock time.time()) go to stderr, to line up with a kvtierctl
timeline.
"""
import argparse
import ctypes
import json
import random
import sys
import time

import torch
import torch.nn.functional as F

HINT_HOT, HINT_COLD = 1, 2
CHUNK = 2 << 20
DEVICE = "cuda"  # --device cpu: a smoke test of the logic without a GPU


def sync():
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def zipf_sampler(n, s, rng):
    w = [1.0 / (i + 1) ** s for i in range(n)]
    tot = sum(w)
    cum, acc = [], 0.0
    for x in w:
        acc += x / tot
        cum.append(acc)

    def draw():
        u = rng.random()
        for i, c in enumerate(cum):
            if u <= c:
                return i
        return n - 1
    return draw


def draw_schedule(draw, batch, changes):
    """The sessions of the first turn, then those of every slot after each of
    `changes` turn changes: turn_sets[k] is turn k's slots.  Drawn up front,
    in the order the turns used to draw them as they went (one generator, so
    the same sequence), so that --bound-budget can see the future."""
    slots = []
    for _ in range(batch):
        s = draw()
        while s in slots:
            s = draw()
        slots.append(s)
    turn_sets = [list(slots)]
    for _ in range(changes):
        # every slot ends its turn; the next sessions come by Zipf, none
        # already in a slot (a session that left an earlier slot may return)
        for i in range(batch):
            s = draw()
            while s in slots:
                s = draw()
            slots[i] = s
        turn_sets.append(list(slots))
    return turn_sets


def alloc_pool(kind, shape, dtype):
    if kind == "torch":
        return torch.empty(shape, dtype=dtype, device=DEVICE)
    import cupy
    n = 1
    for d in shape:
        n *= d
    nbytes = n * torch.finfo(dtype).bits // 8
    if kind == "managed":
        ptr = cupy.cuda.malloc_managed(nbytes)
        mem = ptr
    else:  # zerocopy: pinned host memory, same address on the device (UVA)
        host = cupy.cuda.alloc_pinned_memory(nbytes)
        mem = cupy.cuda.UnownedMemory(host.ptr, nbytes, host, 0)
        ptr = cupy.cuda.MemoryPointer(mem, 0)
    arr = cupy.ndarray((nbytes // 2,), dtype=cupy.uint16, memptr=ptr)
    # through __cuda_array_interface__: DLPack names managed memory a device
    # type of its own (kDLCUDAManaged), which torch.from_dlpack refuses
    t = torch.as_tensor(arr, device="cuda").view(torch.bfloat16).view(shape)
    t._keepalive = (mem, arr)
    return t


def pool_checksum(pools):
    """Exact: sum over every 16-bit word w_i of the pools of w_i * (i % 65521 + 1).
    Pools in host memory are summed on the GPU too, a span at a time."""
    acc, span = 0, 1 << 26
    for kv in pools:
        for t in kv:
            flat = t.view(-1).view(torch.int16)
            for i in range(0, flat.numel(), span):
                x = flat[i:i + span].to(DEVICE).to(torch.int64)
                w = torch.arange(i, i + x.numel(), device=DEVICE, dtype=torch.int64) % 65521 + 1
                acc += int((x * w).sum().item())  # < 2^15 * 2^16 * 2^26: no overflow
    return acc


def mark(what):
    print(f"paged_kv: {what} at {time.time():.3f}", file=sys.stderr, flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pool", choices=["torch", "managed", "zerocopy"], default="torch")
    ap.add_argument("--layout", choices=["contiguous", "interleaved"], default="contiguous")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--sessions", type=int, default=32)
    ap.add_argument("--blocks-per-session", type=int, default=512)
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--turn", type=int, default=64)
    ap.add_argument("--zipf", type=float, default=1.2)
    ap.add_argument("--warmup-turns", type=int, default=1)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--hint", action="store_true")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--step-log", help="diagnosis: wait for every step and write its wall time (ms) to this "
                    "file, one line per step: turn, step, ms, end time (changes what it measures)")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                    help="cpu: a smoke test of the logic on a machine without a GPU (--pool torch only)")
    a = ap.parse_args()
    global DEVICE
    DEVICE = a.device
    if DEVICE == "cpu" and (a.pool != "torch" or a.hint):
        ap.error("--device cpu takes --pool torch and no --hint")

    torch.manual_seed(a.seed)
    rng = random.Random(a.seed)
    n_blocks = a.sessions * a.blocks_per_session
    shape = (n_blocks, a.block_size, a.heads, a.head_dim)
    pools = []
    for _ in range(a.layers):
        kv = []
        for _ in range(2):
            t = alloc_pool(a.pool, shape, torch.bfloat16)
            for i in range(0, n_blocks, 4096):
                n = min(4096, n_blocks - i)
                t[i:i + n].copy_(torch.randn((n,) + shape[1:], dtype=torch.bfloat16, device=DEVICE))
            kv.append(t)
        pools.append(kv)
    sync()
    mark("pools filled")
    pool_bytes = 2 * a.layers * pools[0][0].numel() * 2

    # block tables
    if a.layout == "contiguous":
        tables = [list(range(s * a.blocks_per_session, (s + 1) * a.blocks_per_session)) for s in range(a.sessions)]
    else:
        tables = [list(range(s, n_blocks, a.sessions)) for s in range(a.sessions)]
    tables_t = [torch.tensor(t, dtype=torch.long, device=DEVICE) for t in tables]
    block_bytes = a.block_size * a.heads * a.head_dim * 2

    hint = None
    if a.hint:
        hint = ctypes.CDLL(None).kvtier_hint
        hint.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]

    def hint_session(s, kind):
        # the chunks holding the session's blocks, coalesced into ranges
        chunks = sorted({(b * block_bytes) // CHUNK for b in tables[s]} |
                        {((b + 1) * block_bytes - 1) // CHUNK for b in tables[s]})
        ranges, start, prev = [], None, None
        for c in chunks:
            if start is None:
                start = prev = c
            elif c == prev + 1:
                prev = c
            else:
                ranges.append((start, prev))
                start = prev = c
        if start is not None:
            ranges.append((start, prev))
        for kv in pools:
            for t in kv:
                base = t.data_ptr()
                for c0, c1 in ranges:
                    hint(base + c0 * CHUNK, (c1 - c0 + 1) * CHUNK, kind)

    draw = zipf_sampler(a.sessions, a.zipf, rng)
    # a turn change after every turn, the last measured one's too (its hints
    # are sent, as an engine would)
    turn_sets = draw_schedule(draw, a.batch, a.warmup_turns + a.turns)
    slots = list(turn_sets[0])
    if hint:
        for s in slots:
            hint_session(s, HINT_HOT)
    pos = [0] * a.batch
    tokens_per_session = a.blocks_per_session * a.block_size
    q = torch.randn(a.batch, a.heads, 1, a.head_dim, dtype=torch.bfloat16, device=DEVICE)
    newkv = torch.randn(a.batch, a.heads, a.head_dim, dtype=torch.bfloat16, device=DEVICE)
    digest = torch.zeros((), dtype=torch.float64, device=DEVICE)

    def step():
        nonlocal digest
        idx = torch.stack([tables_t[s] for s in slots])  # [B, nblk]
        wb = torch.tensor([tables[s][p // a.block_size] for s, p in zip(slots, pos)], device=DEVICE)
        wo = torch.tensor([p % a.block_size for p in pos], device=DEVICE)
        for kp, vp in pools:
            kp[wb, wo] = newkv
            vp[wb, wo] = newkv
            k = kp[idx].flatten(1, 2).transpose(1, 2)  # [B, H, S, D]
            v = vp[idx].flatten(1, 2).transpose(1, 2)
            o = F.scaled_dot_product_attention(q, k, v)
            digest += o.double().sum()
        for i in range(a.batch):
            pos[i] = (pos[i] + 1) % tokens_per_session

    log = open(a.step_log, "w") if a.step_log else None
    turn_no = 0

    def run_turns(n):
        nonlocal turn_no
        for _ in range(n):
            for j in range(a.turn):
                t0 = time.perf_counter()
                step()
                if log:
                    sync()
                    log.write("%d %d %.3f %.3f\n" % (turn_no, j, (time.perf_counter() - t0) * 1e3, time.time()))
            turn_no += 1
            # every slot ends its turn; the next sessions come by Zipf
            for i in range(a.batch):
                old, s = slots[i], turn_sets[turn_no][i]
                slots[i] = s
                if hint:
                    hint_session(old, HINT_COLD)
                    hint_session(s, HINT_HOT)

    mark("warm-up starts")
    run_turns(a.warmup_turns)
    sync()
    mark("measured turns start")
    t0 = time.perf_counter()
    run_turns(a.turns)
    sync()
    dt = time.perf_counter() - t0
    mark("measured turns end")
    pool_sum = pool_checksum(pools)
    steps = a.turns * a.turn
    print(json.dumps({
        "pool": a.pool, "layout": a.layout, "hint": a.hint, "pool_bytes": pool_bytes,
        "working_set_bytes": a.batch * a.blocks_per_session * block_bytes * 2 * a.layers,
        "steps": steps, "step_ms": dt / steps * 1e3, "tok_s": a.batch * steps / dt,
        "digest": repr(digest.item()), "pool_sum": pool_sum,
    }))


if __name__ == "__main__":
    main()
