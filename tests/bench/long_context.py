#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Workload 3 of BENCHMARKS.md: long-context greedy generation in transformers.

A randomly initialised Llama-style model (fixed seed, nothing downloaded):
16 layers, hidden 2048, 16 heads, 8 KV heads, bf16.  A random prompt of
--context tokens, greedy generation of --new tokens.  Deterministic settings
(torch.use_deterministic_algorithms, CUBLAS_WORKSPACE_CONFIG from the caller).

--cache: dynamic (DynamicCache), static (StaticCache, one allocation per layer:
what kvtier can tier), offloaded (Hugging Face's own CPU-offloaded
DynamicCache).  Run it plain (all-VRAM), or under libkvtier.so with a VRAM
budget below the KV size.

Prints one JSON line last: time to first token (a generate of one token),
decode tokens/s and ms a token, and the generated ids.  Decode is timed
within the full generate, from its first token to its last (a stopping
criterion that waits for the stream and reads the clock at each token),
so that the full generate's own prefill is not in it; decode_total_ms_per_token
is the older figure, the full generate less the timed first token, over
the tokens after the first (a prefill slower or faster than the timed one
moves it).
--logits FILE also saves the full generate's logits (float32, one row per
generated token) for `long_context.py compare`, which tells a difference in
the engine's arithmetic from a near-tie that flips one greedy choice:

    long_context.py compare REF.pt OTHER.pt ...

prints, per other file, the first step whose choice differs, how far apart
the reference's two best logits were there, and the largest logit
difference over the steps before it (0 means bitwise equal).
"""
import argparse
import contextlib
import ctypes
import hashlib
import json
import sys
import time

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import LlamaConfig, LlamaForCausalLM, StoppingCriteria, StoppingCriteriaList


def sync():
    """Waits for the engine's stream, not the device: a device-wide
    synchronize would also wait for moves kvtier's shim queues on streams of
    its own, which generation never waits for (paged_kv.py does the same)."""
    torch.cuda.current_stream().synchronize()


def build(layers, context, new, seed, device="cuda"):
    """The model and the prompt: (config, model, ids [1, context]).  Also
    tests/bench/kv_compress.py's."""
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    cfg = LlamaConfig(vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_hidden_layers=layers,
                      num_attention_heads=16, num_key_value_heads=8,
                      max_position_embeddings=context + new + 64)
    torch.manual_seed(seed)
    with torch.device(device):
        model = LlamaForCausalLM(cfg).to(torch.bfloat16).eval()
    g = torch.Generator(device="cpu").manual_seed(seed + 1)
    ids = torch.randint(0, cfg.vocab_size, (1, context), generator=g).to(device)
    return cfg, model, ids


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cache", choices=["dynamic", "static", "offloaded"], default="static")
    ap.add_argument("--context", type=int, default=32768)
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--logits", help="save the full generate's logits here (torch.save)")
    ap.add_argument("--breakdown", action="store_true",
                    help="time the timed first token's modules (CUDA events): their sums by name, in ms, as "
                         "prefill_ms in the JSON line (where a slow prefill spends its time)")
    ap.add_argument("--memory", action="store_true",
                    help="the timed first token's memory (torch's allocator): bytes allocated at its start, "
                         "its peak, and the largest rise within one decoder layer, as prefill_memory in the "
                         "JSON line (what one layer's prefill needs in VRAM at once, beside what it keeps)")
    ap.add_argument("--step-footprint", type=int, metavar="K",
                    help="record torch's allocations through decode step K of the full generate (its memory "
                         "history) and report them as step_footprint in the JSON line: what one token allocates "
                         "and where, beside what torch held before it (the bytes a step touches that kvtier must "
                         "place); K from 1 to NEW - 1")
    ap.add_argument("--op-times", action="store_true",
                    help="time every aten op (CUDA events around it) of the timed first token and of the full "
                         "generate's decode steps from token 8 on; their sums by op and the size of the storage of "
                         "its first tensor argument (MiB), ms (decode: ms a step), largest first, as op_ms in the JSON line (which kernels "
                         "a slow step spends its time in)")
    ap.add_argument("--hint-kv-cold", type=int, metavar="LAG",
                    help="tuned, an oracle of cold evidence: during every prefill, before decoder layer i runs, "
                         "hint the K and V of layer i - LAG COLD, or with LAG 0 of every layer the GPU has finished "
                         "(kvtier_hint; nothing without the shim)")
    a = ap.parse_args()
    if a.step_footprint is not None and not 1 <= a.step_footprint < a.new:
        ap.error("--step-footprint K needs 1 <= K < --new (%d)" % a.new)

    cfg, model, ids = build(a.layers, a.context, a.new, a.seed)
    kv_bytes = 2 * a.layers * cfg.num_key_value_heads * (cfg.hidden_size // cfg.num_attention_heads) * \
        (a.context + a.new) * 2

    def gen(inp, n, logits=False, clock=None):
        kw = dict(max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=0,
                  cache_implementation=a.cache)
        if clock is not None:
            kw["stopping_criteria"] = StoppingCriteriaList([clock])
        if logits:
            kw.update(output_logits=True, return_dict_in_generate=True)
        with torch.no_grad():
            try:
                return model.generate(inp, disable_compile=True, **kw)
            except TypeError:
                return model.generate(inp, **kw)

    cold = KvColdHints(model, a.hint_kv_cold) if a.hint_kv_cold is not None else None
    gen(ids[:, :256], 2)  # warm up kernels and allocator
    timer = ModuleTimer(model) if a.breakdown else None
    memory = LayerMemory(model) if a.memory else None
    # The first generate at full length also sets up its cache (under kvtier:
    # captures and registers it), which is not time to first token: time
    # the second.
    ops = OpTimer() if a.op_times else None
    ttfts = []
    for k in range(2):
        sync()
        if timer and k == 1:
            timer.start()
        if ops and k == 1:
            ops.start("prefill")
        if memory and k == 1:
            memory.start()
        t0 = time.perf_counter()
        gen(ids, 1)
        sync()
        ttft = time.perf_counter() - t0
        ttfts.append(ttft)
    prefill_ms = timer.stop() if timer else None
    prefill_memory = memory.stop() if memory else None
    if ops:
        ops.stop()
    clock = StepClock(a.step_footprint, ops)
    t0 = time.perf_counter()
    with ops or contextlib.nullcontext():
        out = gen(ids, a.new, logits=bool(a.logits), clock=clock)
    sync()
    total = time.perf_counter() - t0
    if a.logits:
        torch.save(torch.stack([x[0].float().cpu() for x in out.logits]), a.logits)
        out = out.sequences
    new_ids = out[0, a.context:].tolist()
    decode_total_s = max(total - ttft, 1e-9)
    steps = clock.steps_ms()
    timed_by = "clock" if len(steps) == a.new - 1 else "total"  # a clock that missed a token: the old figure
    decode_s = sum(steps) / 1e3 if timed_by == "clock" else decode_total_s
    print(json.dumps({
        "cache": a.cache, "context": a.context, "new": a.new, "kv_bytes": kv_bytes,
        "ttft_s": ttft, "ttft_first_s": ttfts[0], "total_s": total, "decode_ms_per_token": decode_s / (a.new - 1) * 1e3,
        "decode_tok_s": (a.new - 1) / decode_s,
        "decode_total_ms_per_token": decode_total_s / (a.new - 1) * 1e3, "decode_timed_by": timed_by,
        "full_prefill_s": clock.first_s(t0), "decode_step_ms": [round(x, 2) for x in steps],
        "ids_sha": hashlib.sha256(json.dumps(new_ids).encode()).hexdigest()[:16], "ids_head": new_ids[:8],
        **({"prefill_ms": prefill_ms} if prefill_ms else {}),
        **({"prefill_memory": prefill_memory} if prefill_memory else {}),
        **({"cold_hints": cold.n} if cold else {}),
        **({"step_footprint": clock.footprint} if clock.footprint else {}),
        **({"op_ms": ops.report(len(clock.stamps) - OpTimer.FROM_TOKEN)} if ops else {}),
    }))


def step_footprint(snapshot, live_before):
    """What the allocations of one recorded decode step add up to: their
    count and bytes (those of 1 MiB or more apart), the bytes of distinct
    addresses they used (a block reused within the step counts once), the
    largest sizes, and the bytes torch held before the step (the model's
    weights and the cache)."""
    allocs = [e for trace in snapshot["device_traces"] for e in trace if e["action"] == "alloc"]
    big = [e for e in allocs if e["size"] >= 1 << 20]
    spans = sorted((e["addr"], e["addr"] + e["size"]) for e in big)
    distinct, end = 0, 0
    for lo, hi in spans:
        if hi > end:
            distinct += hi - max(lo, end)
            end = hi
    sizes = sorted((e["size"] for e in big), reverse=True)
    return {"allocs": len(allocs), "bytes": sum(e["size"] for e in allocs), "big_allocs": len(big),
            "big_bytes": sum(sizes), "big_distinct_bytes": distinct, "largest": sizes[:8],
            "live_before_bytes": live_before}


class StepClock(StoppingCriteria):
    """A stopping criterion that never stops: at each generated token it
    waits for the engine's stream and reads the clock, so that decode can
    be timed from the first token to the last without the prefill before
    it.  generate already waits for the GPU at each token (to test whether
    to stop), so the wait adds no sync the engine did not have."""

    def __init__(self, footprint_step=None, ops=None):
        self.stamps = []
        self.footprint_step, self.footprint = footprint_step, None
        self.ops = ops

    def __call__(self, input_ids, scores, **kwargs):
        sync()
        self.stamps.append(time.perf_counter())
        k = len(self.stamps)  # the token just made; the next call ends step k
        if self.ops and k == OpTimer.FROM_TOKEN:
            self.ops.start("decode")
        if self.footprint_step is not None and k == self.footprint_step:
            torch.cuda.memory._record_memory_history(enabled="all", context=None, max_entries=1 << 20)
            self.live_before = torch.cuda.memory_allocated()
        elif self.footprint_step is not None and k == self.footprint_step + 1:
            self.footprint = step_footprint(torch.cuda.memory._snapshot(), self.live_before)
            torch.cuda.memory._record_memory_history(enabled=None)
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)

    def steps_ms(self):
        """The time of each token after the first, ms."""
        return [(b - a) * 1e3 for a, b in zip(self.stamps, self.stamps[1:])]

    def first_s(self, t0):
        """The time from t0 to the first token: the full generate's prefill."""
        return self.stamps[0] - t0 if self.stamps else None


class ModuleTimer:
    """CUDA events around every module's forward; stop() syncs and sums the
    time by the module's name with the layer index taken out
    ("model.layers.*.mlp.down_proj"), largest first."""

    def __init__(self, model):
        self.on, self.marks, self.handles = False, [], []
        for name, mod in model.named_modules():
            if not name:
                continue
            key = ".".join("*" if p.isdigit() else p for p in name.split("."))
            self.handles.append(mod.register_forward_pre_hook(self._pre))
            self.handles.append(mod.register_forward_hook(self._post(key)))
        self.open = {}  # a module's start events not yet closed, by id (a module may nest in itself)

    def _pre(self, mod, args):
        if self.on:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            self.open.setdefault(id(mod), []).append(ev)

    def _post(self, key):
        def hook(mod, args, out):
            if self.on and self.open.get(id(mod)):
                ev = torch.cuda.Event(enable_timing=True)
                ev.record()
                self.marks.append((key, self.open[id(mod)].pop(), ev))
        return hook

    def start(self):
        self.on, self.marks = True, []

    def stop(self):
        self.on = False
        torch.cuda.synchronize()
        sums = {}
        for key, a, b in self.marks:
            sums[key] = sums.get(key, 0.0) + a.elapsed_time(b)
        for h in self.handles:
            h.remove()
        return {k: round(v, 2) for k, v in sorted(sums.items(), key=lambda kv: -kv[1])}


class OpTimer(TorchDispatchMode):
    """--op-times: CUDA events around every aten op while on, summed by
    phase, op and the size of the storage of the op's first tensor argument
    (MiB: a view of a cache tensor counts the whole tensor).  The
    prefill phase is the timed first token's (the mode entered there by
    start()); the decode phase runs from token FROM_TOKEN of the full
    generate to its end (StepClock starts it).  An event pair measures the
    op's kernels when the GPU is behind the CPU (a slow step); on a
    launch-bound step it also counts the launch."""
    FROM_TOKEN = 8

    def __init__(self):
        super().__init__()
        self.phase, self.marks = None, []

    def start(self, phase):
        if phase == "prefill":
            self.__enter__()
        self.phase = phase

    def stop(self):
        self.phase = None
        self.__exit__(None, None, None)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if self.phase is None:
            return func(*args, **(kwargs or {}))
        first = next((x for x in args if isinstance(x, torch.Tensor)), None)
        try:
            mib = first.untyped_storage().nbytes() >> 20 if first is not None and first.is_cuda else 0
        except RuntimeError:  # a tensor with no storage
            mib = 0
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        out = func(*args, **(kwargs or {}))
        b.record()
        self.marks.append((self.phase, "%s %dM" % (func, mib), a, b))
        return out

    def report(self, decode_steps):
        torch.cuda.synchronize()
        sums = {}
        for phase, key, a, b in self.marks:
            d = sums.setdefault(phase, {})
            d[key] = d.get(key, 0.0) + a.elapsed_time(b)
        per = {"prefill": 1, "decode": max(decode_steps, 1)}
        out = {}
        for phase, d in sums.items():
            top = sorted(d.items(), key=lambda kv: -kv[1])
            out[phase] = {"total": round(sum(d.values()) / per[phase], 3),
                          **{k: round(v / per[phase], 3) for k, v in top[:16]}}
        return out


class KvColdHints:
    """--hint-kv-cold LAG: what placement could do for a prefill if kvtier
    knew which KV is finished.  Before decoder layer i runs a prefill (more
    than one token), the K and V the cache holds for layer i - LAG are
    hinted KVTIER_HINT_COLD.  The hint is given when the layer is launched,
    which may be ahead of the GPU: LAG keeps it behind the kernels that
    still read that KV.  LAG 0 waits for the GPU instead: each layer's end
    is an event, and the KV of every layer whose event has completed is
    hinted (a prefill reads a layer's KV in that layer only).  A tuned run,
    not a default: an unmodified engine gives no hints."""

    def __init__(self, model, lag):
        self.lag, self.n, self.ends = lag, 0, []
        try:
            self.fn = ctypes.CDLL(None).kvtier_hint
            self.fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        except AttributeError:  # no shim: nothing to hint
            self.fn = None
            return
        for mod in model.model.layers:
            mod.register_forward_pre_hook(self._pre, with_kwargs=True)
            if lag == 0:
                mod.register_forward_hook(self._post, with_kwargs=True)

    @staticmethod
    def _prefill(args, kwargs):
        hs = args[0] if args else kwargs.get("hidden_states")
        cache = kwargs.get("cache", kwargs.get("past_key_values"))
        return cache if hs is not None and hs.shape[1] > 1 and hasattr(cache, "layers") else None

    def _hint(self, cache, i):
        layer = cache.layers[i] if 0 <= i < len(cache.layers) else None
        for t in (getattr(layer, "keys", None), getattr(layer, "values", None)):
            if t is not None and t.numel():
                self.fn(t.data_ptr(), t.numel() * t.element_size(), 2)  # KVTIER_HINT_COLD
                self.n += 1

    def _pre(self, mod, args, kwargs):
        cache = self._prefill(args, kwargs)
        if cache is None:
            return
        if self.lag:
            self._hint(cache, mod.self_attn.layer_idx - self.lag)
            return
        while self.ends and self.ends[0][2].query():
            c, i, _ = self.ends.pop(0)
            if c is cache:
                self._hint(cache, i)

    def _post(self, mod, args, kwargs, out):
        cache = self._prefill(args, kwargs)
        if cache is None:
            return
        if mod.self_attn.layer_idx == 0:
            self.ends = []  # a new prefill: the last one's layers are gone
        ev = torch.cuda.Event()
        ev.record()
        self.ends.append((cache, mod.self_attn.layer_idx, ev))


class LayerMemory:
    """Torch's allocated bytes around each decoder layer's forward: the
    largest rise above the layer's start (its activations and the K and V
    it adds), the layer's start at that layer, and the whole pass's peak.
    The peak counter is reset at each layer's start, so the pass's peak is
    the largest of the layers' and of what follows the last."""

    def __init__(self, model):
        self.on, self.handles = False, []
        for mod in model.model.layers:
            self.handles.append(mod.register_forward_pre_hook(self._pre))
            self.handles.append(mod.register_forward_hook(self._post))

    def _pre(self, mod, args):
        if self.on:
            torch.cuda.synchronize()
            self.at = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()

    def _post(self, mod, args, out):
        if self.on:
            torch.cuda.synchronize()
            peak = torch.cuda.max_memory_allocated()
            self.peak = max(self.peak, peak)
            if peak - self.at > self.rise:
                self.rise, self.rise_from = peak - self.at, self.at
            self.layers += 1

    def start(self):
        torch.cuda.synchronize()
        self.on, self.layers, self.rise, self.rise_from = True, 0, 0, 0
        self.begin = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        self.peak = 0

    def stop(self):
        self.on = False
        torch.cuda.synchronize()
        self.peak = max(self.peak, torch.cuda.max_memory_allocated())
        for h in self.handles:
            h.remove()
        return {"start_bytes": self.begin, "peak_bytes": self.peak, "layer_rise_bytes": self.rise,
                "layer_rise_from_bytes": self.rise_from, "layers": self.layers,
                "end_bytes": torch.cuda.memory_allocated()}


def compare(ref_path, others):
    ref = torch.load(ref_path)
    top = ref.topk(2, dim=-1).values
    for path in others:
        x = torch.load(path)
        n = min(len(ref), len(x))
        differ = (ref[:n].argmax(-1) != x[:n].argmax(-1)).nonzero()
        k = int(differ[0]) if len(differ) else n
        before = float((ref[:k] - x[:k]).abs().max()) if k else 0.0
        where = (f"first differing choice at step {k}, where the reference's best two logits were "
                 f"{float(top[k, 0] - top[k, 1]):.4g} apart" if k < n else f"same choice at all {n} steps")
        print(f"compare {path}: {where}; largest logit difference before it {before:.4g}")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "compare":
        compare(sys.argv[2], sys.argv[3:])
    else:
        main()
