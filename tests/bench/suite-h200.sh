#!/bin/bash
# The issue-16 suite (BENCHMARKS.md, "Measure what a user runs") on the GPU
# machine, in one device call: kvtier with its shipped defaults, no hints,
# no KVTIER_* variable beyond LD_PRELOAD and the socket, a private kvtierd
# whose configuration sets only the socket and the VRAM budget; next to
# all-VRAM, zero-copy host KV, the engine's own CPU offload and Hugging
# Face's offloaded cache, measured in the same call.
#
#   bash .carry/suite-h200.sh        (carry [".carry"], built by tests/bench/package-suite.sh)
#
# KVT_SUITE lists the groups to run (default "paged long"):
#   paged     paged_kv.py, a 16 GiB pool (8 layers, 64 sessions of 256 MiB,
#             one tensor per layer's K or V), batch 4 (1 GiB read a step),
#             4 GiB budget; per layout (KVT_LAYOUTS, default "contiguous
#             interleaved") all-VRAM, zero-copy and kvtier, and per hot set
#             (KVT_HOTS: sessions drawn, default "16 64": 4 GiB = the
#             budget, 16 GiB = all) kvtier and the engine-side offload
#   onepool   the same, one tensor for all layers, hot 16
#   long      long_context.py, 16 layers, 32K context, 64 new tokens, budget
#             1G (KV 2 GiB): DynamicCache all-VRAM, kvtier and HF's
#             offloaded cache; StaticCache all-VRAM and kvtier
#   nopress   kvtier with a 100 GiB budget: paged contiguous and long
#             context dynamic, next to their all-VRAM runs
# Results: one JSON line a run in $OUT/results.jsonl; a table last
# (suite-report.py).  Never more managed memory than ~20 GiB at once.
set -u
C=$(cd "$(dirname "$0")" && pwd)
RET=${OUT:-/tmp/kvtier-out}
T=$(mktemp -d)
mkdir -p "$RET"
export PYTHONUNBUFFERED=1 CUBLAS_WORKSPACE_CONFIG=:4096:8
CTL=$C/bin/kvtierctl SOCK=$T/kvtierd.sock
R=$RET/results.jsonl
: >"$R"
groups=${KVT_SUITE:-paged long}
want() { [[ " $groups " == *" $1 "* ]]; }

nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader | tee "$RET/gpu.txt"
echo "binaries from commit $(cat "$C/COMMIT" 2>/dev/null || echo unknown)" | tee -a "$RET/gpu.txt"

start_daemon() {
        printf '[daemon]\nsocket = %s\n[gpu]\nvram_budget = %s\n' "$SOCK" "$1" >"$T/kvtierd.conf"
        "$C/bin/kvtierd" -c "$T/kvtierd.conf" >>"$RET/kvtierd.log" 2>&1 &
        DPID=$!
        for _ in $(seq 100); do "$CTL" -s "$SOCK" status >/dev/null 2>&1 && return 0; sleep 0.05; done
        echo "kvtierd did not start"; tail "$RET/kvtierd.log"; return 1
}
stop_daemon() { kill -TERM "$DPID" 2>/dev/null; wait "$DPID" 2>/dev/null; }

# run TAG BUDGET|- CMD...: one workload; with a budget under the shim and a
# private kvtierd (status saved at the end).  Appends {"tag":..., result}.
run() {
        local tag=$1 budget=$2 line rc t0
        shift 2
        echo "== $tag" | tee -a "$RET/runs.log"
        t0=$(date +%s.%N)
        if [ "$budget" = - ]; then
                "$@" >"$T/out" 2>>"$RET/runs.log"
                rc=$?
        else
                start_daemon "$budget" || return
                (while sleep 2; do "$CTL" -s "$SOCK" status >>"$RET/status-$tag.txt" 2>&1; done) &
                local poll=$!
                LD_PRELOAD=$C/libkvtier.so KVTIER_SOCKET=$SOCK "$@" >"$T/out" 2>>"$RET/runs.log"
                rc=$?
                kill $poll 2>/dev/null
                "$CTL" -s "$SOCK" status --json >"$RET/status-$tag.json" 2>/dev/null
                "$CTL" -s "$SOCK" status >>"$RET/status-$tag.txt" 2>&1
                stop_daemon
        fi
        line=$(tail -n 1 "$T/out")
        cat "$T/out" >>"$RET/runs.log"
        python3 - "$tag" "$rc" "$t0" "$line" >>"$R" <<'EOF'
import json, sys, time
tag, rc, t0, line = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
try:
    d = json.loads(line)
except ValueError:
    d = {"error": line[-300:]}
d.update(tag=tag, rc=rc, wall_s=round(time.time() - t0, 1))
print(json.dumps(d))
EOF
        tail -n 1 "$R" | cut -c1-240
}

PAGED="python3 $C/paged_kv.py --sessions 64 --layers 8 --batch 4 --turns 4 --warmup-turns 1 --bound-budget 4G"
if want paged; then
        for layout in ${KVT_LAYOUTS:-contiguous interleaved}; do
                run "paged-$layout-vram" - $PAGED --layout "$layout"
                run "paged-$layout-zerocopy" - $PAGED --layout "$layout" --pool zerocopy
                for hot in ${KVT_HOTS:-16 64}; do
                        h="--hot $hot"; [ "$hot" = 64 ] && h=""
                        run "paged-$layout-h$hot-kvtier" 4G $PAGED --layout "$layout" $h
                        run "paged-$layout-h$hot-offload" - $PAGED --layout "$layout" $h --pool offload --offload-slots 16
                done
        done
fi
if want onepool; then
        run "paged-onepool-vram" - $PAGED --one-pool --hot 16
        run "paged-onepool-h16-kvtier" 4G $PAGED --one-pool --hot 16
fi
LONG="python3 $C/long_context.py --context 32768 --new 64 --layers 16"
if want long; then
        run "long-dynamic-vram" - $LONG --cache dynamic
        run "long-dynamic-kvtier" 1G $LONG --cache dynamic
        run "long-dynamic-hfoffload" - $LONG --cache offloaded
        run "long-static-vram" - $LONG --cache static
        run "long-static-kvtier" 1G $LONG --cache static
fi
if want nopress; then
        run "paged-contiguous-vram" - $PAGED --layout contiguous --hot 16
        run "paged-contiguous-h16-nopress" 100G $PAGED --layout contiguous --hot 16
        run "long-dynamic-vram" - $LONG --cache dynamic
        run "long-dynamic-nopress" 100G $LONG --cache dynamic
fi
python3 "$C/suite-report.py" "$R" | tee "$RET/report.txt"
