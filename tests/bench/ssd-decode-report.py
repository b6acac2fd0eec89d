#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The table of tests/bench/ssd-decode-h200.sh: one line a run of
results.jsonl, each paged run with its ratio to the all-VRAM run (tag vram)
of the same call and its pool checksum against it; the SSD runs with what
they moved and how long the compute stream waited for restores; then the
compression run (kv_compress.py).

    ssd-decode-report.py results.jsonl
"""
import json
import sys

GIB = float(1 << 30)


def load(path):
    with open(path) as f:
        return [json.loads(x) for x in f if x.strip()]


def paged(r, ref):
    line = "%-15s %8.2f ms/step %9.0f tok/s" % (r["tag"], r["step_ms"], r["tok_s"])
    if ref and ref is not r:
        line += "  %6.3f of all-VRAM" % (ref["step_ms"] / r["step_ms"])
        line += "  pool ok" if r.get("pool_sum") == ref.get("pool_sum") else "  POOL DIFFERS"
    if "swaps_in" in r:
        line += "  swaps in %d out %d" % (r["swaps_in"], r["swaps_out"])
    if r.get("pool") == "ssd":
        steps = max(r["steps"], 1)
        sb = r["ssd_session_bytes"]
        line += ("\n%-15s sessions spilled %d, restored %d (%.2f GiB each way), ranges ready at their turn %d/%d;"
                 " stream waited %.0f ms for restores (%.2f ms/step); spills %.2f s (%.2f ms/step)"
                 % ("", r["ssd_sessions_spilled"], r["ssd_sessions_restored"],
                    r["ssd_sessions_restored"] * sb / GIB, r["ssd_ranges_ready"], r["ssd_ranges_restored"],
                    r["ssd_restore_wait_ms"], r["ssd_restore_wait_ms"] / steps, r["ssd_spill_s"],
                    r["ssd_spill_s"] * 1e3 / steps))
        line += ("\n%-15s readahead %d steps; before: %d sessions spilled at %.2f GB/s; after: all restored at"
                 " %.2f GB/s%s"
                 % ("", r["ssd_readahead"], r["ssd_initial_sessions"], r["ssd_initial_spill_gbps"],
                    r["ssd_final_restore_gbps"],
                    "; %d restores not stream-ordered" % r["ssd_unordered"] if r.get("ssd_unordered") else ""))
    return line


def compress(r):
    out = ["%-15s %s, blocks of %s, context %s, %s layers, prefill %.2f s"
           % (r["tag"], r.get("compress"), r.get("block_bytes"), r.get("context"), r.get("layers"),
              r.get("prefill_s", 0))]
    for k in ("kv", "randn", "bytes"):
        s = r.get(k)
        if not s:
            continue
        stored = s.get("stored_bytes")
        out.append("%-15s %-5s %7.3f GiB -> %s  ratio %s  spill %.2f GB/s  restore %.2f GB/s  %s  released %d/%d"
                   % ("", k, s["raw_bytes"] / GIB, "%.3f GiB" % (stored / GIB) if stored else "? (no status)",
                      "%.3f" % s["ratio"] if s.get("ratio") else "?", s["spill_gbps"], s["restore_gbps"],
                      "equal" if s["equal"] else "NOT EQUAL", s["released"], s["tensors"]))
    return "\n".join(out)


def main():
    rows = load(sys.argv[1])
    ref = next((r for r in rows if r["tag"] == "vram" and "step_ms" in r and not r.get("rc")), None)
    out = []
    for r in rows:
        tag = r["tag"]
        rc = "  rc=%s" % r["rc"] if r.get("rc") else ""
        if "error" in r:
            out.append("%-15s FAILED rc=%s %s" % (tag, r.get("rc"), str(r["error"])[:120]))
        elif "step_ms" in r:
            out.append(paged(r, ref) + rc)
        elif "kv" in r:
            out.append(compress(r) + rc)
        else:
            out.append("%-15s %s%s" % (tag, json.dumps(r)[:200], rc))
    print("\n".join(out))


if __name__ == "__main__":
    main()
