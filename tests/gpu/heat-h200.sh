#!/bin/bash
# kvtier's heat sampling on a real GPU, in one call of the device tool
# (carry the folder tests/gpu/package-heat.sh fills; run this script from
# there).  Prints a short table last; raw output goes to $OUT.
#  1. cost of CUPTI unified-memory counters on fault-heavy reads: no shim,
#     shim with launch heat only, CUPTI always on, CUPTI at a 10% duty cycle;
#  2. CUPTI records per kind and attributed to captured chunks, and the
#     daemon fed by them under a 2G budget (the test engine, pages unmapped
#     so that its reads fault), polled with kvtierctl;
#  3. a real PyTorch decode recorded with KVTIER_DEBUG=trace.
# Managed memory in use stays under 10 GiB (the card has ~140).
set -u
C=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-/tmp/kvtier-heat-out}
mkdir -p "$OUT"
T=$(mktemp -d)
CTL=$C/bin/kvtierctl SOCK=$T/kvtierd.sock
results=()
res() { results+=("$(printf '%-62s %s' "$1" "$2")"); }
only=${KVT_ONLY:-}
want() { [ -z "$only" ] || [[ " $only " == *" $1 "* ]]; }

date -u | tee "$OUT/gpu.txt"
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader | tee -a "$OUT/gpu.txt"
echo "binaries from commit $(cat "$C/COMMIT")"
echo "libcupti candidates:"; ls /usr/local/cuda/extras/CUPTI/lib64/libcupti.so* /usr/local/cuda/lib64/libcupti.so* 2>/dev/null
python3 -c 'import nvidia, os; print(os.path.dirname(nvidia.__path__[0]))' 2>/dev/null

start_daemon() {
        printf '[daemon]\nsocket = %s\ntick_ms = 20\n[gpu]\nvram_budget = %s\n' "$SOCK" "$1" >"$T/kvtierd.conf"
        # KVT_DAEMON_EXTRA: more of kvtierd.conf, e.g. '[policy]\nevict_to = host\n'
        printf '%b' "${KVT_DAEMON_EXTRA:-}" >>"$T/kvtierd.conf"
        "$C/bin/kvtierd" -c "$T/kvtierd.conf" >>"$OUT/kvtierd.log" 2>&1 &
        DPID=$!
        for _ in $(seq 100); do "$CTL" -s "$SOCK" status >/dev/null 2>&1 && return 0; sleep 0.05; done
        echo "kvtierd did not start"; tail "$OUT/kvtierd.log"; return 1
}
stop_daemon() { kill -TERM "$DPID"; wait "$DPID"; }
shim() { env LD_PRELOAD="$C/libkvtier.so" KVTIER_SOCKET="$SOCK" KVTIER_LOG=info "$@"; }
kv() { python3 -c 'import json,sys; d=json.loads(open(sys.argv[1]).read().strip().splitlines()[-1]); print(" ".join(str(d.get(k)) for k in sys.argv[2:]))' "$@" 2>/dev/null; }

if want 1; then
echo "== 1. fault-heavy reads, 4 GiB, CUPTI off / on / throttled"
start_daemon 1G || exit 1
gb() { awk '/median/ { print $7 }' "$1"; }
FB="4 7"
"$C/fault-bench" $FB >"$OUT/fb-plain1.txt" 2>&1
shim KVTIER_HEAT=launch "$C/fault-bench" $FB >"$OUT/fb-launch.txt" 2>&1
for d in 100:100 10:100 2:1000 1:1000; do
        shim KVTIER_HEAT=cupti KVTIER_CUPTI_DUTY=${d%:*} KVTIER_CUPTI_PERIOD_MS=${d#*:} \
                KVTIER_DEBUG=heat-stats=$OUT/fb-cupti-${d%:*}.json "$C/fault-bench" $FB >"$OUT/fb-cupti-${d%:*}.txt" 2>&1
done
"$C/fault-bench" $FB >"$OUT/fb-plain2.txt" 2>&1
cat "$OUT"/fb-*.txt
ref=$(python3 -c "print(($(gb "$OUT/fb-plain1.txt")+$(gb "$OUT/fb-plain2.txt"))/2)")
res "fault reads GB/s, no shim (mean of runs before and after)" "$ref ($(gb "$OUT/fb-plain1.txt"), $(gb "$OUT/fb-plain2.txt"))"
for v in launch cupti-100 cupti-10 cupti-2 cupti-1; do
        g=$(gb "$OUT/fb-$v.txt")
        res "fault reads GB/s: $v (ratio to no shim)" "$g ($(python3 -c "print(round($g/$ref,3))"))"
done
for v in 100 10 2 1; do
        res "  cupti-$v stats: gpu_fault htod dtoh enabled_ms" "$(kv "$OUT/fb-cupti-$v.json" gpu_fault htod dtoh enabled_ms cupti_loaded)"
done
stop_daemon
fi

# poll PID FILE: kvtierctl --json every 100 ms while PID runs: heat and VRAM per region (GiB regions).
poll() {
        while kill -0 "$1" 2>/dev/null; do
                "$CTL" -s "$SOCK" status --json 2>/dev/null | python3 -c '
import json,sys,time
d=json.load(sys.stdin)
for c in d["clients"]:
    print(json.dumps({"t":round(time.time(),2),"heat":c.get("heat"),"vram_mib":[r["vram_bytes"]>>20 for r in c["regions"]]}))' >>"$2"
                sleep 0.1
        done
}

if want 2; then
echo "== 2. the test engine, 8 x 1 GiB, window 1G sliding 128M a step, budget 2G"
start_daemon 2G || exit 1
EARGS="--regions 8 --region-size 1G --window 1G --steps 48 --step-ms 60"
for v in off:"KVTIER_HEAT=off" launch:"KVTIER_HEAT=launch" cupti:"KVTIER_HEAT=cupti KVTIER_CUPTI_DUTY=10" \
         unmap10:"KVTIER_HEAT=unmap KVTIER_CUPTI_DUTY=10 KVTIER_CUPTI_PERIOD_MS=100" \
         unmap2:"KVTIER_HEAT=unmap KVTIER_CUPTI_DUTY=2 KVTIER_CUPTI_PERIOD_MS=500" \
         faults100:"KVTIER_HEAT=cupti KVTIER_CUPTI_DUTY=100 --unmap" off2:"KVTIER_HEAT=off"; do
        name=${v%%:*}; set -- ${v#*:}; envs=(); args=()
        for x in "$@"; do case $x in --*) args+=("$x") ;; *) envs+=("$x") ;; esac; done
        shim "${envs[@]}" KVTIER_DEBUG=heat-stats=$OUT/eng-$name.json "$C/kv-engine-cuda" $EARGS "${args[@]}" >"$OUT/eng-$name.txt" 2>&1 &
        epid=$!; poll $epid "$OUT/eng-$name.poll"; wait $epid; rc=$?
        tail -n 4 "$OUT/eng-$name.txt"
        last=$(tail -n 3 "$OUT/eng-$name.poll" | head -n 1)
        ms=$(awk '/steps took/ { print $(NF-1) }' "$OUT/eng-$name.txt")
        res "engine $name: exit / decode ms / ms over the 48 x 60 ms of sleep" "$rc / $ms / $(python3 -c "print(round($ms-48*60))")"
        res "  $name: gpu_fault/attr htod/attr dtoh unmaps launches/scanned/ptrs" "$(kv "$OUT/eng-$name.json" gpu_fault gpu_fault_attributed htod htod_attributed dtoh unmaps launches launches_scanned launch_pointers)"
        res "  $name: near the end: daemon heat / VRAM MiB per region" "$last"
done
stop_daemon
fi

if want 3; then
TB=${KVT_TORCH_BUDGET:-1G} # under the caches' 512 MiB, e.g. 128M, to see which chunks the daemon keeps
echo "== 3. PyTorch decode with KVTIER_DEBUG=trace, budget $TB"
start_daemon "$TB" || exit 1
python3 "$C/torch_decode.py" >"$OUT/torch-plain.txt" 2>&1
shim KVTIER_HEAT=launch,cupti KVTIER_DEBUG=trace=$OUT/torch-decode.trace,heat-stats=$OUT/torch.json \
        python3 "$C/torch_decode.py" >"$OUT/torch-shim.txt" 2>&1 &
epid=$!; poll $epid "$OUT/torch-shim.poll"; wait $epid
shim KVTIER_HEAT=launch,unmap KVTIER_CUPTI_DUTY=10 KVTIER_DEBUG=trace=$OUT/torch-unmap.trace,heat-stats=$OUT/torch-unmap.json \
        python3 "$C/torch_decode.py" >"$OUT/torch-unmap.txt" 2>&1
stop_daemon
tail -n 2 "$OUT"/torch-*.txt
res "torch decode ms/step plain / shim" "$(kv "$OUT/torch-plain.txt" ms_per_step) / $(kv "$OUT/torch-shim.txt" ms_per_step)"
res "torch shim: near the end: daemon heat / VRAM MiB per region" "$(tail -n 3 "$OUT/torch-shim.poll" | head -n 1)"
res "torch checksum plain / shim" "$(kv "$OUT/torch-plain.txt" checksum) / $(kv "$OUT/torch-shim.txt" checksum)"
res "torch trace: bytes / R / A / F lines" "$(wc -c <"$OUT/torch-decode.trace") / $(grep -c '^R' "$OUT/torch-decode.trace") / $(grep -c '^A' "$OUT/torch-decode.trace") / $(grep -c '^F' "$OUT/torch-decode.trace")"
res "torch stats: heat_touches gpu_fault htod launches/scanned/fns/unknown/ptrs" "$(kv "$OUT/torch.json" heat_touches gpu_fault htod launches launches_scanned functions functions_unknown launch_pointers)"
res "torch+unmap: ms/step, trace A lines, heat_touches gpu_fault unmaps" "$(kv "$OUT/torch-unmap.txt" ms_per_step) $(grep -c '^A' "$OUT/torch-unmap.trace") $(kv "$OUT/torch-unmap.json" heat_touches gpu_fault gpu_fault_attributed unmaps)"
fi
if want 4; then
echo "== 4. launch heat from the real-CUDA test engine (CUDA 13 nvcc stubs), budget 2G"
start_daemon 2G || exit 1
for v in launch off; do
        shim KVTIER_HEAT=$v KVTIER_DEBUG=heat-stats=$OUT/eng4-$v.json "$C/kv-engine-cuda" --regions 8 --region-size 1G \
                --window 1G --steps 48 --step-ms 60 >"$OUT/eng4-$v.txt" 2>&1 &
        epid=$!; poll $epid "$OUT/eng4-$v.poll"; wait $epid; rc=$?
        ms=$(awk '/steps took/ { print $(NF-1) }' "$OUT/eng4-$v.txt")
        res "engine4 $v: exit / decode ms / over sleep" "$rc / $ms / $(python3 -c "print(round($ms-48*60))")"
        res "  $v: launches/scanned/fns/unknown/ptrs heat_touches" "$(kv "$OUT/eng4-$v.json" launches launches_scanned functions functions_unknown launch_pointers heat_touches)"
done
stop_daemon
fi
echo; echo "== results"
printf '%s\n' "${results[@]}" | tee "$OUT/summary.txt"
# The device tool brings back 8 files: the raw output travels as one archive.
(cd "$OUT" && tar czf /tmp/heat-raw.tgz --exclude='*.trace' . && mv /tmp/heat-raw.tgz raw.tgz &&
        find . -maxdepth 1 -type f ! -name raw.tgz ! -name summary.txt ! -name '*.trace' ! -name run.log -delete)
