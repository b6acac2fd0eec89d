#!/bin/bash
# Issue 4 on a real GPU: does kvtierd, fed by the shim's samples, keep the hot
# window of a real decode in VRAM under a small budget?  The decode is
# tests/gpu/window_decode.py (PyTorch, sliding-window attention, 16 caches of
# 256 MiB, window 32 MiB of each: 512 MiB hot of 4 GiB).  Each variant runs
# it under a fresh kvtierd with `vram_budget = $KVT_WINDOW_BUDGET` (1G), next
# to the same decode all in VRAM, and prints ms per step (the physical
# answer: a window left in host memory is read across PCIe every step) and,
# from kvtierd's chunk maps at the end, how many of the window's chunks are
# in VRAM.  One device call; carry the folder tests/gpu/package-window.sh
# fills, run this script from there.
#   KVT_WINDOW_VARIANTS: names of the variants below to run (default: all);
#   KVT_WINDOW_REFS: all-VRAM runs before them (default 2); KVT_WINDOW_ARGS:
#   more window_decode.py arguments (e.g. --steps 4096).
set -u
C=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-/tmp/kvtier-window-out}
mkdir -p "$OUT"
rm -f "$OUT"/*.txt "$OUT"/*.json "$OUT"/*.log # nothing stale to compare with
T=$(mktemp -d)
CTL=$C/bin/kvtierctl SOCK=$T/kvtierd.sock
BUDGET=${KVT_WINDOW_BUDGET:-1G}
DEC="python3 $C/window_decode.py --max-seconds ${KVT_WINDOW_SECONDS:-25} ${KVT_WINDOW_ARGS:-}"
export PYTHONUNBUFFERED=1
results=()
res() { results+=("$(printf '%-44s %s' "$1" "$2")"); }

echo "binaries from commit $(cat "$C/COMMIT"), $(date -u)"
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader

# name | kvtierd.conf lines after [policy] (\n-separated) | the engine's environment | budget
# (default $BUDGET; a budget that holds everything shows what the sampling costs)
variants=(
        "heat-off||KVTIER_HEAT=off"
        "defaults||"
        "launch||KVTIER_HEAT=launch"
        "cupti||KVTIER_HEAT=cupti"
        "cupti-evict-host|evict_to = host|KVTIER_HEAT=cupti"
        "cupti-lru-evict-host|name = lru\nevict_to = host|KVTIER_HEAT=cupti"
        "cupti-noprefetch-evict-host|prefetch = none\nevict_to = host|KVTIER_HEAT=cupti"
        "cupti-launch-evict-host|evict_to = host|KVTIER_HEAT=cupti,launch"
        "fits-heat-off||KVTIER_HEAT=off|8G"
        "fits-cupti-evict-host|evict_to = host|KVTIER_HEAT=cupti|8G"
)
want() { [ -z "${KVT_WINDOW_VARIANTS:-}" ] || [[ " $KVT_WINDOW_VARIANTS " == *" $1 "* ]]; }
field() { python3 -c 'import json,sys
try: d=json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
except Exception: sys.exit(print("-"))
out = []
for k in sys.argv[2:]:
    v = d
    for p in k.split("."): v = v.get(p, "-") if isinstance(v, dict) else "-"
    out.append(str(round(v, 3) if isinstance(v, float) else v))
print(" ".join(out))' "$@"; }

# KVT_WINDOW_REFS: all-VRAM runs first (default 2: they show how repeatable the sums are)
for i in $(seq "${KVT_WINDOW_REFS:-2}"); do
        $DEC >"$OUT/vram$i.txt" 2>&1
        echo "all-VRAM $i: $(tail -n 1 "$OUT/vram$i.txt" | cut -c1-200)"
        res "all-VRAM $i: steps, ms/step all / last quarter" "$(field "$OUT/vram$i.txt" steps ms_per_step ms_per_step_last_quarter)"
done
[ -e "$OUT/vram1.txt" ] && cp "$OUT/vram1.txt" "$OUT/vram.txt"
ref=$(field "$OUT/vram.txt" ms_per_step_last_quarter)
same() { [ "$(field "$1" "$3")" = "$(field "$2" "$3")" ] && echo same || echo DIFFERS; }
[ -e "$OUT/vram2.txt" ] && res "all-VRAM 1 vs 2: checksum / prefill_sum / cache_sum" \
        "$(same "$OUT/vram1.txt" "$OUT/vram2.txt" checksum) / $(same "$OUT/vram1.txt" "$OUT/vram2.txt" prefill_sum) / $(same "$OUT/vram1.txt" "$OUT/vram2.txt" cache_sum)"

for v in "${variants[@]}"; do
        IFS='|' read -r name pol envs budget <<<"$v"
        want "$name" || continue
        printf '[daemon]\nsocket = %s\nlog_level = debug\n[gpu]\nvram_budget = %s\n[policy]\n%b\n' \
                "$SOCK" "${budget:-$BUDGET}" "$pol" >"$T/kvtierd.conf"
        "$C/bin/kvtierd" -c "$T/kvtierd.conf" >"$OUT/kvtierd-$name.log" 2>&1 &
        dpid=$!
        for _ in $(seq 100); do "$CTL" -s "$SOCK" status >/dev/null 2>&1 && break; sleep 0.05; done
        if ! "$CTL" -s "$SOCK" status >/dev/null 2>&1; then # else the decode runs fail-open, as if all-VRAM
                res "$name" "kvtierd did not start: $(tail -n 1 "$OUT/kvtierd-$name.log")"
                kill $dpid 2>/dev/null; wait $dpid 2>/dev/null
                continue
        fi
        env $envs LD_PRELOAD="$C/libkvtier.so" KVTIER_SOCKET="$SOCK" KVTIER_LOG=notice \
                KVTIER_DEBUG=heat-stats="$OUT/heat-$name.json" \
                $DEC --kvtierctl "$CTL -s $SOCK status --json" >"$OUT/$name.txt" 2>&1
        rc=$?
        "$CTL" -s "$SOCK" status >"$OUT/status-$name.txt" 2>&1
        kill $dpid; wait $dpid
        echo "$name (rc $rc): $(tail -n 1 "$OUT/$name.txt" | cut -c1-300)"
        ms=$(field "$OUT/$name.txt" ms_per_step_last_quarter)
        res "$name: rc, steps, ms/step all / last quarter" "$rc $(field "$OUT/$name.txt" steps ms_per_step) $ms (ratio to all-VRAM $(python3 -c "print(round($ref/$ms, 3))" 2>/dev/null))"
        res "  window chunks in VRAM / of; other VRAM; budget" "$(field "$OUT/$name.txt" books.window_chunks_vram books.window_chunks books.other_chunks_vram books.budget_chunks)"
        res "  gpu_fault/attributed heat_touches launch_ptrs" "$(field "$OUT/heat-$name.json" gpu_fault gpu_fault_attributed heat_touches launch_pointers)"
        if [ ! -e "$OUT/vram.txt" ]; then
                : # no all-VRAM run to compare with (KVT_WINDOW_REFS=0)
        elif [ "$(field "$OUT/$name.txt" steps)" != "$(field "$OUT/vram.txt" steps)" ]; then
                res "  against all-VRAM" "prefill_sum $(same "$OUT/$name.txt" "$OUT/vram.txt" prefill_sum) (stopped early: no other sums)"
        else
                res "  against all-VRAM: checksum / prefill_sum / cache_sum" \
                        "$(same "$OUT/$name.txt" "$OUT/vram.txt" checksum) / $(same "$OUT/$name.txt" "$OUT/vram.txt" prefill_sum) / $(same "$OUT/$name.txt" "$OUT/vram.txt" cache_sum)"
        fi
done
echo; echo "== window results"
printf '%s\n' "${results[@]}" | tee "$OUT/window-summary.txt"
