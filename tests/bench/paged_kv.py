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
zerocopy (pinned host memory read by the GPU over PCIe), offload (the
engine's own CPU offload of whole sessions, BENCHMARKS.md's reference: the
pool in pinned host memory, a VRAM cache of --offload-slots sessions, a
quarter of the pool by default, swapped LRU at turn starts on the compute
stream; see class Offload), ssd (the pool as torch, under libkvtier.so with
a kvtierd whose configuration has an [ssd] section: the engine spills every
session outside the current turn to kvtier's SSD tier and restores it when a
turn picks it; see class SsdTier).
--layout: contiguous (a session's blocks adjacent) or interleaved (blocks
dealt out round-robin over sessions: every 2 MiB chunk holds blocks of many).
--hot N: turns draw from N sessions only (the hot set), spread over the pool.
--one-pool: one tensor (one allocation) for every layer's K and V.
--hint: tell kvtier (kvtier_hint via ctypes) which sessions a turn starts and
ends, as an engine that knows its scheduler would; only under libkvtier.so.
--hint-ahead N: the next turn's new sessions are hinted HOT N steps before
the turn ends, as an engine that knows its queue of waiting requests can
(vLLM's scheduler knows them; LMCache-style loaders start early).
--ssd-readahead N: with --pool ssd, the next turn's new sessions get
kvtier.readahead N steps before the turn ends (the schedule is drawn ahead,
as for --hint-ahead), so that their restores overlap the steps.  A turn
hides them when turn x step time >= the bytes it brings in over the restore
bandwidth: batch 4 of 256 MiB sessions bring in ~3.5 sessions (~0.9 GiB) a
turn, 0.45 s at 2 GB/s, ~375 steps of 1.2 ms (all-VRAM on an H200): use
turns of 512 steps or more and N up to --turn.
--device cpu: everything on the CPU, small sizes: a check of the logic (pool
sums equal across pools) on a machine without a GPU, not a measurement.

Prints one JSON line last: tokens/s, step time, a digest of all outputs (the
sum of the attention outputs: not bitwise repeatable even all-VRAM, attention
kernels differ in reduction order run to run) and pool_sum, an exact integer
checksum of every K/V pool after the run (seeded data and deterministic
writes: equal across pools and runs unless some KV byte was lost; offload
writes its cache back to the host pool first).  --pool offload adds
swaps_in and swaps_out: sessions copied in and written back during the
measured turns; --pool ssd adds the ssd_* fields (SsdTier.report() and
main(): sessions spilled and restored in the measured turns, the compute
stream's wait for restores, the initial spills and the final restores).
Phase marks ("paged_kv: WHAT at TIME pid PID", the wall clock of
time.time()) go to stderr, to line up with a kvtierctl timeline.
"""
import argparse
import ctypes
import json
import os
import random
import re
import sys
import time
from collections import OrderedDict

import torch
import torch.nn.functional as F

HINT_HOT, HINT_COLD = 1, 2
CHUNK = 2 << 20
DEVICE = "cuda"  # --device cpu: a smoke test of the logic without a GPU
LINK_BYTES_S = 55.3e9  # pinned H2D on the H200 test machine (BENCHMARKS.md)


def sync():
    """Waits for the engine's own work: its stream, not the device.  A
    device-wide synchronize would also wait for the moves kvtier's shim
    queues on streams of its own, which no engine waits for (a step that
    needs a page in flight waits for it inside its kernels, on this stream)."""
    if DEVICE == "cuda":
        torch.cuda.current_stream().synchronize()


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


def parse_bytes(v):
    """64M, 2G, 2GiB, 1073741824: binary units, as kvtierd.conf."""
    m = re.fullmatch(r"(\d+)\s*([KMGT]?)(i?B)?", v.strip(), re.I)
    if not m:
        raise argparse.ArgumentTypeError(f"not a size: {v}")
    return int(m.group(1)) << (10 * " KMGT".index(m.group(2).upper() or " "))


def min_sessions_in(turn_sets, cap, first, last):
    """Belady's MIN over whole sessions: how many sessions turns first..last
    must bring in with room for `cap` sessions, from the run's start with
    turn 0's sessions resident.  At each turn, the sessions not resident come
    in, each evicting the resident session outside the turn whose next turn
    is the furthest (one never used again first).  Future uses count up to
    turn `last` only."""
    seq = turn_sets[:last + 1]

    def nxt(k, s):
        return next((j for j in range(k + 1, len(seq)) if s in seq[j]), len(seq))
    resident, n = set(seq[0]), 0
    for k in range(1, last + 1):
        for s in seq[k]:
            if s in resident:
                continue
            if len(resident) >= cap:
                resident.remove(max(resident - set(seq[k]), key=lambda v: nxt(k, v)))
            resident.add(s)
            n += k >= first
    return n


def lru_sessions_in(turn_sets, cap, first, last):
    """The same count for an LRU over whole sessions from a cold start (turn
    0's sessions only), as --pool offload with --offload-slots cap swaps."""
    lru, n = SessionLRU(cap), 0
    for k, t in enumerate(turn_sets[:last + 1]):
        moves = lru.start_turn(t)
        if k >= first:
            n += len(moves)
        lru.end_turn(t)
    return n


class SessionLRU:
    """Whole sessions in `cap` slots, the least recently used out first."""

    def __init__(self, cap):
        self.slot = OrderedDict()  # session -> slot, least recently used first
        self.free = list(range(cap - 1, -1, -1))

    def start_turn(self, active):
        """Makes every session of `active` resident; returns (session, slot,
        victim or None) for each that must come in, in order."""
        moves = []
        for s in active:
            if s in self.slot:
                self.slot.move_to_end(s)
                continue
            victim = None
            if not self.free:
                victim = next(v for v in self.slot if v not in active)
                self.free.append(self.slot.pop(victim))
            self.slot[s] = self.free.pop()
            moves.append((s, self.slot[s], victim))
        return moves

    def end_turn(self, active):
        for s in active:  # read by every step of the turn
            self.slot.move_to_end(s)


class Offload:
    """--pool offload: an engine-side CPU offload of whole sessions.  The pool
    lives in pinned host memory; a VRAM cache of `slots` whole sessions per
    layer's K and V serves the steps, which see block tables remapped to the
    cache.  At the start of a turn each of its sessions not cached comes in:
    the least recently used cached session not in the turn is written back
    to the host pool (every session is appended to while it runs), then the
    new one's blocks are copied into the freed slot.  The copies run on the
    compute stream, one after the other, as the simple offload of the anchor
    in BENCHMARKS.md: no overlap with the steps.  A session whose blocks are
    adjacent in the pool moves as one slice (one DMA copy per layer's K or
    V); any other table is gathered on the CPU into a pinned staging buffer
    (and scattered back from it), which waits for the copies."""

    def __init__(self, host, tables, slots, bps):
        self.host, self.tables, self.bps = host, tables, bps
        shape = (slots * bps,) + tuple(host[0][0].shape[1:])
        self.cache = [[torch.empty(shape, dtype=t.dtype, device=DEVICE) for t in kv] for kv in host]
        self.ctab_t = [torch.arange(c * bps, (c + 1) * bps, device=DEVICE) for c in range(slots)]
        self.lru = SessionLRU(slots)
        self.swaps_in = self.swaps_out = 0
        self.first = {}   # session -> its first pool block, where its blocks are adjacent
        self.idx = {}     # session -> its block table on the CPU, where they are not
        for s, t in enumerate(tables):
            if t == list(range(t[0], t[0] + bps)):
                self.first[s] = t[0]
            else:
                self.idx[s] = torch.tensor(t, dtype=torch.long)
        self.staging = None
        if self.idx:
            self.staging = [[torch.empty((bps,) + shape[1:], dtype=t.dtype, pin_memory=DEVICE == "cuda")
                             for t in kv] for kv in host]

    def slot_of(self, s):
        return self.lru.slot[s]

    def _pairs(self, s, c):
        """(host rows or None, cache slice, staging or None) per K/V tensor."""
        span = slice(c * self.bps, (c + 1) * self.bps)
        for li, kv in enumerate(self.host):
            for ki, h in enumerate(kv):
                cache = self.cache[li][ki][span]
                if s in self.first:
                    yield h[self.first[s]:self.first[s] + self.bps], cache, None
                else:
                    yield h, cache, self.staging[li][ki]

    def write_back(self, s, c):
        self.swaps_out += 1
        for rows, cache, stage in self._pairs(s, c):
            (rows if stage is None else stage).copy_(cache, non_blocking=True)
        if s in self.idx:
            sync()  # the staging buffers hold the session now
            for rows, _, stage in self._pairs(s, c):
                rows.index_copy_(0, self.idx[s], stage)

    def read_in(self, s, c):
        self.swaps_in += 1
        for rows, cache, stage in self._pairs(s, c):
            if stage is None:
                cache.copy_(rows, non_blocking=True)
            else:
                torch.index_select(rows, 0, self.idx[s], out=stage)
                cache.copy_(stage, non_blocking=True)
        if s in self.idx:
            sync()  # before the staging buffers are written again

    def start_turn(self, active):
        for s, c, victim in self.lru.start_turn(active):
            if victim is not None:
                self.write_back(victim, c)
            self.read_in(s, c)

    def end_turn(self, active):
        self.lru.end_turn(active)

    def flush(self):
        """Every cached session back to the host pool (for pool_checksum)."""
        for s, c in list(self.lru.slot.items()):
            self.write_back(s, c)
        sync()


def import_kvtier():
    """The kvtier package: beside this script (a carry directory) or python/ of the tree."""
    here = os.path.dirname(os.path.abspath(__file__))
    for d in (here, os.path.join(here, "..", "..", "python")):
        if os.path.isfile(os.path.join(d, "kvtier", "__init__.py")):
            sys.path.insert(0, d)
            break
    import kvtier
    return kvtier


class SsdTier:
    """--pool ssd: the engine keeps only the current turn's sessions in memory
    and the others on kvtier's SSD tier, through the python package.  Each
    session is 2 * layers ranges (its blocks in each layer's K and V pool,
    adjacent: the contiguous layout only), one spill each.

    - At the start, every session outside turn 0 is spilled.
    - A turn's start restores its sessions that are spilled, ordered on the
      compute stream (kvtier.restore(h, stream): the steps that follow wait
      for the data on the GPU, the CPU does not); two CUDA events around the
      restores time how long the stream waited for them.
    - readahead(): the next turn's new sessions, kvtier.readahead, some steps
      before the turn ends (--ssd-readahead).
    - A turn's end waits for the compute stream (its steps wrote the sessions;
      kvtier.spill copies on a stream of its own), checks and drops the
      handles its start restored, and spills the sessions that leave (not in
      the next turn).  kvtier.spill returns once the data is on disk: the
      engine's thread waits for it.
    - finish(): every session still spilled comes back (readahead, then
      restore_wait), so that pool_checksum sees the whole pool.
    On the CPU (--device cpu, a logic check) host memory has no stream to
    order a restore on: each is waited for (restore_wait) at once; and a
    spilled range is overwritten (as a GPU range's released chunks lose their
    data), so that pool_sum checks what the restores brought back."""

    def __init__(self, kvtier, pools, tables, bps):
        for s, t in enumerate(tables):
            if t != list(range(t[0], t[0] + bps)):
                raise ValueError("--pool ssd needs each session's blocks adjacent (--layout contiguous)")
        self.kv, self.pools, self.tables, self.bps = kvtier, pools, tables, bps
        self.spilled = {}   # session -> its handles (on SSD, or coming back by readahead)
        self.ahead = set()  # sessions whose readahead was issued
        self.restored = []  # handles restored at this turn's start, dropped at its end
        self.waits = []     # (event, event) around each measured turn start's restores
        self.measuring = False
        self.st = dict(sessions_spilled=0, sessions_restored=0, ranges_restored=0, ranges_ready=0,
                       spill_s=0.0, wait_cpu_s=0.0, unordered=0)

    def rows(self, s):
        b0 = self.tables[s][0]
        for kv in self.pools:
            for t in kv:
                yield t[b0:b0 + self.bps]

    def spill(self, s):
        t0 = time.perf_counter()
        self.spilled[s] = [self.kv.spill(r) for r in self.rows(s)]
        if DEVICE == "cpu":  # host memory keeps its pages: lose them as released GPU chunks are lost
            for r in self.rows(s):
                r.fill_(-1.5)
        if self.measuring:
            self.st["sessions_spilled"] += 1
            self.st["spill_s"] += time.perf_counter() - t0

    def start_turn(self, slots):
        need = [s for s in slots if s in self.spilled]
        if not need:
            return
        stream = torch.cuda.current_stream() if DEVICE == "cuda" else None
        if stream is not None:
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record(stream)
        t0 = time.perf_counter()
        for s in need:
            hs = self.spilled.pop(s)
            self.ahead.discard(s)
            for h in hs:
                if self.measuring and self.kv.query(h).state == self.kv.RESTORED:
                    self.st["ranges_ready"] += 1
                try:
                    self.kv.restore(h, stream)
                except self.kv.KvtierError as e:
                    if e.errno != 22:  # EINVAL: not ordered on the stream; waited for below
                        raise
                    self.st["unordered"] += 1
                    self.kv.restore_wait(h)
                if stream is None:
                    self.kv.restore_wait(h)
            self.restored.extend(hs)
            if self.measuring:
                self.st["sessions_restored"] += 1
                self.st["ranges_restored"] += len(hs)
        if stream is not None:
            e1.record(stream)
            if self.measuring:
                self.waits.append((e0, e1))
        elif self.measuring:
            self.st["wait_cpu_s"] += time.perf_counter() - t0

    def readahead(self, sessions):
        for s in sorted(sessions):
            if s in self.spilled and s not in self.ahead:
                for h in self.spilled[s]:
                    self.kv.readahead(h)
                self.ahead.add(s)

    def _drop_restored(self):
        for h in self.restored:
            self.kv.restore_wait(h)  # raises its error: never go on with wrong data
            self.kv.drop(h)
        self.restored = []

    def end_turn(self, leaving):
        sync()
        self._drop_restored()
        for s in leaving:
            self.spill(s)

    def finish(self):
        """Every spilled session back in the pool; returns (seconds, bytes)."""
        sync()
        self._drop_restored()
        t0 = time.perf_counter()
        hs = [h for s in sorted(self.spilled) for h in self.spilled[s]]
        nbytes = sum(self.kv.query(h).size_bytes for h in hs)
        for h in hs:
            self.kv.readahead(h)
        for h in hs:
            self.kv.restore_wait(h)
            self.kv.drop(h)
        self.spilled.clear()
        sync()
        return time.perf_counter() - t0, nbytes

    def report(self):
        st = dict(self.st)
        wait_ms = sum(e0.elapsed_time(e1) for e0, e1 in self.waits) if self.waits else st["wait_cpu_s"] * 1e3
        del st["wait_cpu_s"]
        return {"ssd_" + k: v for k, v in st.items()} | {"ssd_restore_wait_ms": wait_ms}


def alloc_pool(kind, shape, dtype):
    if kind in ("torch", "ssd"):
        return torch.empty(shape, dtype=dtype, device=DEVICE)
    if kind == "offload":  # filled from the GPU like the others: the same bytes
        return torch.empty(shape, dtype=dtype, pin_memory=DEVICE == "cuda")
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


def bound(a, turn_sets, session_bytes, steps):
    """The bound of BENCHMARKS.md, for a VRAM budget of --bound-budget bytes:
    bound step = all-VRAM step + bound_step_ms_extra, where

        bound_step_ms_extra = bound_bytes_in / 55.3e9 B/s / steps * 1e3
        bound_bytes_in = bound_sessions_in * session_bytes

    and bound_sessions_in counts the sessions that the measured turns must
    bring over PCIe with room for cap = budget // session_bytes whole
    sessions, under Belady's MIN (min_sessions_in) on this run's own draws,
    from turn 0's sessions in VRAM.  No policy that fetches a session no
    earlier than the turn change that draws it brings in fewer (none can
    fetch earlier: the draws are random); with sessions of one size and an
    integral cap, keeping parts of sessions does not beat MIN either, and
    reading a session across the link instead costs its bytes every step.
    Only a free, clairvoyant fill of the room left beside turn 0's sessions
    before the run could save more (at most cap - batch sessions).  It
    counts bytes in only: write-backs go the other way on a full-duplex
    link.  Per step it is the measured turns' average, not when they cross.
    The bound is block-granular: it ignores that kvtier moves 2 MiB chunks,
    which in the interleaved layout hold blocks of every session.
    lru_sessions_in is the same count for an LRU over whole sessions (what
    --pool offload with that many slots does).  A budget below the working
    set (cap < --batch) has no such bound here: the fields are null."""
    cap = a.bound_budget // session_bytes
    first, last = a.warmup_turns, a.warmup_turns + a.turns - 1
    r = {"bound_budget": a.bound_budget, "session_bytes": session_bytes, "bound_sessions": cap,
         "link_bytes_s": LINK_BYTES_S, "bound_sessions_in": None, "lru_sessions_in": None,
         "bound_bytes_in": None, "bound_step_ms_extra": None}
    if cap >= a.batch:
        n = min_sessions_in(turn_sets, cap, first, last)
        r.update(bound_sessions_in=n, lru_sessions_in=lru_sessions_in(turn_sets, cap, first, last),
                 bound_bytes_in=n * session_bytes,
                 bound_step_ms_extra=n * session_bytes / LINK_BYTES_S / steps * 1e3)
    return r


def mark(what):
    # the pid tells two engines' marks apart in one log (residency-report.py --client)
    print(f"paged_kv: {what} at {time.time():.3f} pid {os.getpid()}", file=sys.stderr, flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pool", choices=["torch", "managed", "zerocopy", "offload", "ssd"], default="torch",
                    help="ssd: as torch, sessions outside the turn spilled to kvtier's SSD tier (under libkvtier.so, "
                    "a kvtierd with [ssd]; --layout contiguous)")
    ap.add_argument("--offload-slots", type=int,
                    help="--pool offload: sessions the VRAM cache holds (default: a quarter of --sessions)")
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
    ap.add_argument("--hot", type=int, metavar="N",
                    help="turns draw (Zipf) from N sessions only, spread over the pool: a hot set of N sessions "
                    "(default: all of --sessions)")
    ap.add_argument("--one-pool", action="store_true",
                    help="one tensor for every layer's K and V (one allocation) instead of one per layer's K or V")
    ap.add_argument("--warmup-turns", type=int, default=1)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--hint", action="store_true")
    ap.add_argument("--hint-ahead", type=int, default=0, metavar="STEPS",
                    help="with --hint: hint the next turn's new sessions HOT this many steps before the turn "
                    "ends, as an engine that knows its queue of waiting requests can")
    ap.add_argument("--ssd-readahead", type=int, default=0, metavar="STEPS",
                    help="with --pool ssd: kvtier.readahead the next turn's new sessions this many steps before the "
                    "turn ends (at most --turn; a turn hides the restores when turn x step time >= its new sessions' "
                    "bytes over the restore bandwidth: ~375 steps of 1.2 ms for 0.9 GiB at 2 GB/s)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--step-log", help="diagnosis: wait for every step and write its wall time (ms) to this "
                    "file, one line per step: turn, step, ms, end time (changes what it measures)")
    ap.add_argument("--bound-budget", type=parse_bytes, metavar="BYTES",
                    help="report the bound of BENCHMARKS.md for a VRAM budget of BYTES (2G ...): "
                    "see bound() (costs nothing on the GPU)")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                    help="cpu: a smoke test of the logic on a machine without a GPU (--pool torch, offload, or ssd "
                    "under the shim)")
    a = ap.parse_args()
    global DEVICE
    DEVICE = a.device
    if DEVICE == "cpu" and (a.pool not in ("torch", "offload", "ssd") or a.hint):
        ap.error("--device cpu takes --pool torch, offload or ssd, and no --hint")
    if a.pool == "ssd" and (a.hint or a.layout != "contiguous"):
        ap.error("--pool ssd: --layout contiguous (a session's blocks adjacent in each pool) and no --hint")
    if a.ssd_readahead and (a.pool != "ssd" or not 0 < a.ssd_readahead <= a.turn):
        ap.error("--ssd-readahead: with --pool ssd, from 1 to --turn steps")
    if a.pool == "offload" and a.hint:
        ap.error("--pool offload is the engine's own offload: no kvtier to hint")
    if a.offload_slots is None:
        a.offload_slots = max(a.sessions // 4, a.batch)
    if a.pool == "offload" and not a.batch <= a.offload_slots <= a.sessions:
        ap.error("--offload-slots must hold a turn's sessions (--batch) and no more than --sessions")

    if a.hot is not None and not a.batch < a.hot <= a.sessions:
        ap.error("--hot must be more than a turn's sessions (--batch: each turn draws new ones) and at most --sessions")
    if a.one_pool and a.pool == "offload":
        ap.error("--one-pool: the offload keeps its pools per layer")

    torch.manual_seed(a.seed)
    rng = random.Random(a.seed)
    n_blocks = a.sessions * a.blocks_per_session
    shape = (n_blocks, a.block_size, a.heads, a.head_dim)
    pools = []
    whole = alloc_pool(a.pool, (a.layers, 2) + shape, torch.bfloat16) if a.one_pool else None
    for li in range(a.layers):
        kv = []
        for ki in range(2):
            t = whole[li, ki] if a.one_pool else alloc_pool(a.pool, shape, torch.bfloat16)
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
    off = None
    if a.pool == "offload":
        off = Offload(pools, tables, a.offload_slots, a.blocks_per_session)
        mark("offload cache allocated")

    ssd = None
    if a.pool == "ssd":
        kvtier = import_kvtier()
        if not kvtier.ssd_available():
            sys.exit("paged_kv: --pool ssd runs under libkvtier.so (LD_PRELOAD) with a kvtierd that has an [ssd] section")
        ssd = SsdTier(kvtier, pools, tables, a.blocks_per_session)

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

    if a.hot is None:
        draw = zipf_sampler(a.sessions, a.zipf, rng)
    else:  # the hot sessions, spread over the pool
        hot = [k * a.sessions // a.hot for k in range(a.hot)]
        draw_hot = zipf_sampler(a.hot, a.zipf, rng)

        def draw():
            return hot[draw_hot()]
    # a turn change after every turn, the last measured one's too (its hints
    # are sent, as an engine would)
    turn_sets = draw_schedule(draw, a.batch, a.warmup_turns + a.turns)
    slots = list(turn_sets[0])
    if ssd:
        t_spill = time.perf_counter()
        cold = [s for s in range(a.sessions) if s not in slots]
        for s in cold:
            ssd.spill(s)
        t_spill = time.perf_counter() - t_spill
        mark("sessions outside turn 0 spilled")
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
        if off:  # the cache holds every session of the turn, a slot each
            idx = torch.stack([off.ctab_t[off.slot_of(s)] for s in slots])
            wb = [off.slot_of(s) * a.blocks_per_session + p // a.block_size for s, p in zip(slots, pos)]
        else:
            idx = torch.stack([tables_t[s] for s in slots])  # [B, nblk]
            wb = [tables[s][p // a.block_size] for s, p in zip(slots, pos)]
        wb = torch.tensor(wb, device=DEVICE)
        wo = torch.tensor([p % a.block_size for p in pos], device=DEVICE)
        for kp, vp in (off.cache if off else pools):
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
            if off:
                off.start_turn(slots)
            if ssd:
                mark("turn %d starts" % turn_no)
                ssd.start_turn(slots)
            for j in range(a.turn):
                if hint and a.hint_ahead and j == a.turn - a.hint_ahead:
                    for s in set(turn_sets[turn_no + 1]) - set(slots):
                        hint_session(s, HINT_HOT)
                if ssd and a.ssd_readahead and j == a.turn - a.ssd_readahead:
                    ssd.readahead(set(turn_sets[turn_no + 1]) - set(slots))
                t0 = time.perf_counter()
                step()
                if log:
                    sync()
                    log.write("%d %d %.3f %.3f\n" % (turn_no, j, (time.perf_counter() - t0) * 1e3, time.time()))
            if off:
                off.end_turn(slots)
            turn_no += 1
            if ssd:  # the sessions that leave, spilled once the steps that wrote them are done
                ssd.end_turn([s for s in slots if s not in turn_sets[turn_no]])
            # every slot ends its turn; the next sessions come by Zipf
            for i in range(a.batch):
                old, s = slots[i], turn_sets[turn_no][i]
                slots[i] = s
                if hint:
                    if old not in turn_sets[turn_no]:  # a session drawn again stays HOT
                        hint_session(old, HINT_COLD)
                    hint_session(s, HINT_HOT)

    mark("warm-up starts")
    run_turns(a.warmup_turns)
    sync()
    mark("measured turns start")
    swaps0 = (off.swaps_in, off.swaps_out) if off else (0, 0)
    if ssd:
        ssd.measuring = True
    t0 = time.perf_counter()
    run_turns(a.turns)
    sync()
    dt = time.perf_counter() - t0
    if ssd:
        ssd.measuring = False
    mark("measured turns end")
    extra = {}
    if off:
        extra.update(offload_slots=a.offload_slots, swaps_in=off.swaps_in - swaps0[0],
                     swaps_out=off.swaps_out - swaps0[1])
        off.flush()
    if ssd:
        session_bytes = a.blocks_per_session * block_bytes * 2 * a.layers
        extra.update(ssd.report(), ssd_readahead=a.ssd_readahead, ssd_session_bytes=session_bytes,
                     ssd_ranges_per_session=2 * a.layers, ssd_initial_sessions=len(cold),
                     ssd_initial_spill_s=t_spill,
                     ssd_initial_spill_gbps=len(cold) * session_bytes / max(t_spill, 1e-9) / 1e9)
        t_fin, nbytes = ssd.finish()
        mark("every session restored")
        extra.update(ssd_final_restore_s=t_fin, ssd_final_restore_gbps=nbytes / max(t_fin, 1e-9) / 1e9)
    pool_sum = pool_checksum(pools)
    steps = a.turns * a.turn
    if a.bound_budget is not None:
        extra.update(bound(a, turn_sets, a.blocks_per_session * block_bytes * 2 * a.layers, steps))
    print(json.dumps({
        "pool": a.pool, "layout": a.layout, "hint": a.hint, "pool_bytes": pool_bytes, "hot": a.hot,
        "one_pool": a.one_pool,
        "working_set_bytes": a.batch * a.blocks_per_session * block_bytes * 2 * a.layers,
        "steps": steps, "step_ms": dt / steps * 1e3, "tok_s": a.batch * steps / dt,
        "digest": repr(digest.item()), "pool_sum": pool_sum, **extra,
    }))


if __name__ == "__main__":
    main()
