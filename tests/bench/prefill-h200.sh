#!/bin/bash
# Where a long prefill under kvtier spends its time, on the GPU machine:
# long_context.py's first token (32K context, 16 layers, DynamicCache) with
# its modules timed (--breakdown), all-VRAM and under the shim with a private
# kvtierd, once per settings line.  Carry built by tests/bench/package-suite.sh.
#
#   bash .carry/prefill-h200.sh "LABEL|BUDGET|[policy] lines (\n apart)" ...
#
# BUDGET - runs all-VRAM.  Prints per run: time to first token, the modules
# that took longest, and the daemon's moves and demand counters at the end.
# KVT_LONG_EXTRA adds long_context.py options to every run (--memory: the
# prefill's memory per layer, which costs a synchronize a layer).
set -u
C=$(cd "$(dirname "$0")" && pwd)
. "$C/bench-lib.sh"
bench_setup prefill.jsonl
LONG="python3 $C/long_context.py --context ${KVT_CONTEXT:-32768} --new 2 --layers 16 --cache dynamic --breakdown ${KVT_LONG_EXTRA:-}"

for spec in "$@"; do
        IFS='|' read -r label budget policy <<<"$spec"
        echo "== $label" | tee -a "$RET/runs.log"
        t0=$(date +%s.%N)
        if [ "$budget" = - ]; then
                $LONG >"$T/out" 2>>"$RET/runs.log"
                rc=$?
                echo '{}' >"$T/status.json"
        else
                KVT_POLICY_EXTRA=$policy bench_budget_daemon "$budget" || continue
                LD_PRELOAD=$C/libkvtier.so KVTIER_SOCKET=$SOCK $LONG >"$T/out" 2>>"$RET/runs.log"
                rc=$?
                "$CTL" -s "$SOCK" status --json >"$T/status.json" 2>/dev/null
                "$CTL" -s "$SOCK" status >>"$RET/status-$label.txt" 2>&1
                bench_stop_daemon
        fi
        cat "$T/out" >>"$RET/runs.log"
        bench_record "$label" "$rc" "$t0" "$(tail -n 1 "$T/out")" >/dev/null
        python3 - "$R" "$T/status.json" <<'PY'
import json, sys
r = json.loads(open(sys.argv[1]).read().splitlines()[-1])
print(f"  rc {r['rc']} wall {r['wall_s']} s  ttft {r.get('ttft_s', 0):.3f} s (first full-length {r.get('ttft_first_s', 0):.3f} s)  {r.get('error', '')}")
pm = r.get("prefill_ms") or {}
print("  ", ", ".join(f"{k.replace('model.layers.*.', '')} {v:.0f}" for k, v in list(pm.items())[:12]))
if r.get("prefill_memory"):
    print("   memory (MiB):", ", ".join(f"{k.replace('_bytes', '')} {v / 2**20:.0f}" if k.endswith("bytes") else f"{k} {v}"
                                      for k, v in r["prefill_memory"].items()))
try:
    st = json.load(open(sys.argv[2]))
except Exception:
    st = {}
for g in st.get("gpus", []):
    mv = g.get("moves", {})
    print("   moves: to_vram", mv.get("to_vram", {}).get("orders"), "orders",
          round(mv.get("to_vram", {}).get("bytes", 0) / 2**30, 2), "GiB; to_host", mv.get("to_host", {}).get("orders"),
          "orders", round(mv.get("to_host", {}).get("bytes", 0) / 2**30, 2), "GiB; uses", g.get("chunk_uses"))
    print("   demand:", json.dumps(g.get("demand")))
PY
done
