#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The table of tests/bench/suite-h200.sh: one line a run of results.jsonl,
each with its ratio to the all-VRAM run of the same workload (same layout and
hot set for paged_kv.py, same cache for long_context.py) measured in the
same call, and the checks that say the run computed what all-VRAM computed
(pool checksum; generated ids).

    suite-report.py results.jsonl
"""
import json
import sys

LINK = 55.3e9  # pinned H2D on the H200 test machine (BENCHMARKS.md)


def load(path):
    with open(path) as f:
        return [json.loads(x) for x in f if x.strip()]


def paged_ref(runs, tag):
    """The all-VRAM run of a paged run: paged-LAYOUT-hN-vram."""
    parts = tag.split("-")
    warm = parts[3:] == ["kvtierwarm"]  # measured after more warm-up turns: its own reference
    return runs.get("-".join(parts[:3] + ["vramwarm" if warm else "vram"]))


def main():
    rows = load(sys.argv[1])
    runs = {r["tag"]: r for r in rows}
    out = []
    for r in rows:
        tag = r["tag"]
        if "error" in r or r.get("rc"):
            out.append(f"{tag:34s} FAILED rc={r.get('rc')} {r.get('error', '')[:80]}")
            continue
        if tag.startswith("paged"):
            ref = paged_ref(runs, tag)
            line = f"{tag:34s} {r['step_ms']:8.2f} ms/step"
            if ref and ref is not r:
                line += f"  {ref['step_ms'] / r['step_ms']:6.3f} of all-VRAM"
                if not tag.endswith("-vramwarm"):  # another schedule than its reference's
                    line += "  pool ok" if r["pool_sum"] == ref["pool_sum"] else "  POOL DIFFERS"
                extra = r.get("bound_step_ms_extra")
                if extra is not None and "kvtier" in tag:
                    b = ref["step_ms"] + extra
                    line += f"  {r['step_ms'] / b:6.2f}x the bound ({b:.2f} ms)"
            if "swaps_in" in r:
                line += f"  swaps {r['swaps_in']}"
            out.append(line)
        elif tag.startswith("long"):
            cache = tag.split("-")[1]
            ref = runs.get(f"long-{cache}-vram")
            line = f"{tag:34s} ttft {r['ttft_s']:7.3f} s  {r['decode_ms_per_token']:7.2f} ms/token"
            if ref and ref is not r:
                line += f"  ttft {r['ttft_s'] / ref['ttft_s']:5.2f}x  decode {ref['decode_ms_per_token'] / r['decode_ms_per_token']:6.3f} of all-VRAM"
                if "kvtier" in tag:
                    link_ms = max(0, r["kv_bytes"] - (1 << 30)) / LINK * 1e3  # the KV outside a 1G budget, once
                    b = ref["decode_ms_per_token"] + link_ms
                    line += f"  {r['decode_ms_per_token'] / b:5.2f}x the bound ({b:.1f} ms)"
                    if cache == "static":
                        # transformers' repeat_kv copies K and V to all heads before an
                        # attention with a mask, reading each byte once per head of a group:
                        # host bytes cross twice (inplace_read.py, thirty-fourth session)
                        f = ref["decode_ms_per_token"] + 2 * link_ms
                        line += f"  {r['decode_ms_per_token'] / f:5.2f}x the floor of repeat_kv's two reads ({f:.1f} ms)"
                line += "  ids equal" if r["ids_sha"] == ref["ids_sha"] else f"  IDS DIFFER {r['ids_head']}"
            if "decode_total_ms_per_token" in r:
                line += f"  (full generate less ttft: {r['decode_total_ms_per_token']:.2f} ms/token)"
            out.append(line)
        elif tag.startswith("two"):
            ref, alone = runs.get("two-vram"), runs.get("two-alone")
            line = f"{tag:34s} {r['step_ms']:8.2f} ms/step"
            if ref and ref is not r:
                line += f"  {ref['step_ms'] / r['step_ms']:6.3f} of all-VRAM"
            if alone and tag == "two-pair-hi":
                line += f"  {alone['step_ms'] / r['step_ms']:6.3f} of hi alone"
            if r.get("vram_peak_bytes") is not None:
                line += f"  VRAM peak {r['vram_peak_bytes'] / 2**30:.2f} GiB"
            if ref and ref is not r and not tag.endswith("-lo"):
                line += "  pool ok" if r["pool_sum"] == ref["pool_sum"] else "  POOL DIFFERS"
            out.append(line)
        else:
            out.append(f"{tag:34s} {json.dumps(r)[:160]}")
    print("\n".join(out))


if __name__ == "__main__":
    main()
