#!/bin/bash
# Does kvtier see the GPU's first touch of memory captured beyond the grant?
# first_touch.py under the shim with a private kvtierd of budget BUDGET
# (default 512M): the daemon's chunk maps of its regions after allocation,
# after the fill, after a read of everything, by letter (V in VRAM, H host
# unmapped never seen since capture or its last arm, R host mapped at a use
# seen, M mapped eviction), with the sampler off (KVT_POLICY_EXTRA), and the
# moves ordered so far: the planner still moves chunks, so an H after the
# fill is a chunk never seen or one moved out of VRAM since (to_host).  The
# uses seen in host memory count each chunk's first use there once (twice if
# it was moved out and used again).  Carry built by
# tests/bench/package-suite.sh.
#   bash .carry/first-touch-h200.sh [BUDGET] [first_touch.py options]
set -u
C=$(cd "$(dirname "$0")" && pwd)
. "$C/bench-lib.sh"
bench_setup first-touch.jsonl
budget=${1:-512M}
shift || true
# no samples: a chunk booked H after the fill was never seen or moved out, not re-armed
export KVT_POLICY_EXTRA=${KVT_POLICY_EXTRA-'rearm_rate = 0\nprobe_rate = 0'}
bench_budget_daemon "$budget" || exit 1
maps() { # STEP: the letters of every chunk of the client's regions, counted
        "$CTL" -s "$SOCK" status --json | python3 -c '
import json, sys
s = json.load(sys.stdin)
count = {}
for c in s.get("clients", []):
    for r in c.get("regions", []):
        for tok in (r.get("chunk_map") or "").split():
            count[tok[0]] = count.get(tok[0], 0) + int(tok[1:])
g = (s.get("gpus") or [{}])[0]
mv = g.get("moves") or {}
print("  %-10s chunks by letter %s; uses seen in host memory %s; moves to_vram %s to_host %s" % (sys.argv[1],
      dict(sorted(count.items())), (g.get("demand") or {}).get("demand_faults"),
      (mv.get("to_vram") or {}).get("orders"), (mv.get("to_host") or {}).get("orders")))' "$1"
}
LD_PRELOAD=$C/libkvtier.so KVTIER_SOCKET=$SOCK KVTIER_DEBUG=heat-stats=$RET/heat.json \
        python3 "$C/first_touch.py" "$@" >"$T/out" 2>&1 &
pid=$!
seen=""
while kill -0 $pid 2>/dev/null; do
        for step in allocated filled read; do
                case " $seen " in *" $step "*) continue ;; esac
                if grep -q "first_touch: $step at" "$T/out"; then
                        sleep 0.5
                        maps "$step"
                        seen="$seen $step"
                fi
        done
        sleep 0.05
done
wait $pid
echo "  rc $?"
grep 'read .* MiB' "$T/out"
python3 -c 'import json,sys; d=json.loads(open(sys.argv[1]).read().splitlines()[-1]); print("  heat-stats:", {k: d[k] for k in ("gpu_fault", "gpu_fault_attributed", "remote_map", "remote_map_attributed", "dropped")})' "$RET/heat.json" 2>/dev/null
bench_stop_daemon
