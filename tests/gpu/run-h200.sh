#!/bin/bash
# kvtier on a real GPU, in one call of the device tool (carry .carry, made by
# tests/gpu/package.sh).  Prints a short table last; logs go to $OUT.
#  1. the test engine on plain cudaMalloc (no shim): the reference, and a
#     check that the residency probe sees all of it in VRAM;
#  2. the same engine under the shim with a live kvtierd and a VRAM budget a
#     quarter of its pool: pattern intact, budget held by the daemon's books
#     and by the probe;
#  3. unmodified PyTorch with and without the shim: digests bitwise equal.
# Never allocates more managed memory than the card has free: 8 GiB here.
set -u
cd "$(dirname "$0")/../.."
C=$PWD/.carry
OUT=${OUT:-/tmp/kvtier-out}
mkdir -p "$OUT"
T=$(mktemp -d)
CTL=$C/bin/kvtierctl
export CUBLAS_WORKSPACE_CONFIG=:4096:8
SOCK=$T/kvtierd.sock
BUDGET=2G BUDGET_BYTES=$((2 << 30))
ENGINE_ARGS="--regions 8 --region-size 1G --window 1G --steps 64 --step-ms 40 --probe-every 16"
results=()
# KVT_ONLY="4 6" runs only those steps.
only=${KVT_ONLY:-}
want() { [ -z "$only" ] || [[ " $only " == *" $1 "* ]]; }
res() { results+=("$(printf '%-58s %s' "$1" "$2")"); }

nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader | tee "$OUT/gpu.txt"
echo "binaries from commit $(cat "$C/COMMIT" 2>/dev/null || echo unknown)"

start_daemon() {
        printf '[daemon]\nsocket = %s\ntick_ms = 20\n[gpu]\nvram_budget = %s\n' "$SOCK" "$1" >"$T/kvtierd.conf"
        "$C/bin/kvtierd" -c "$T/kvtierd.conf" >>"$OUT/kvtierd.log" 2>&1 &
        DPID=$!
        for _ in $(seq 100); do "$CTL" -s "$SOCK" status >/dev/null 2>&1 && return 0; sleep 0.05; done
        echo "kvtierd did not start"; cat "$OUT/kvtierd.log"; return 1
}
stop_daemon() { kill -TERM "$DPID"; wait "$DPID"; echo "kvtierd exit $?"; }

# poll_while PID: highest vram_bytes / charged_bytes kvtierctl reports while PID runs.
poll_while() {
        local max_v=0 max_c=0 v c
        while kill -0 "$1" 2>/dev/null; do
                s=$("$CTL" -s "$SOCK" status --json 2>/dev/null) || { sleep 0.05; continue; }
                v=$(python3 -c 'import json,sys; print(max([g["vram_bytes"] for g in json.load(sys.stdin)["gpus"]] or [0]))' <<<"$s")
                c=$(python3 -c 'import json,sys; print(max([g["charged_bytes"] for g in json.load(sys.stdin)["gpus"]] or [0]))' <<<"$s")
                [ "$v" -gt "$max_v" ] && max_v=$v; [ "$c" -gt "$max_c" ] && max_c=$c
                sleep 0.05
        done
        echo "$max_v $max_c"
}

if want 1; then
echo "== 1. engine, plain cudaMalloc"
"$C/kv-engine-cuda" $ENGINE_ARGS 2>&1 | tee "$OUT/engine-plain.txt"
res "engine plain: exit" "${PIPESTATUS[0]}"
res "engine plain: probed VRAM (expect 8 GiB)" "$(awk '/probes/ { print $(NF-1) }' "$OUT/engine-plain.txt")"
res "engine plain: decode steps ms" "$(awk '/steps took/ { print $(NF-1) }' "$OUT/engine-plain.txt")"

fi
if want 2; then
echo "== 2. engine under the shim, budget $BUDGET"
start_daemon $BUDGET || exit 1
LD_PRELOAD=$C/libkvtier.so KVTIER_SOCKET=$SOCK KVTIER_LOG=info \
        "$C/kv-engine-cuda" $ENGINE_ARGS --hint --max-vram $BUDGET_BYTES >"$OUT/engine-shim.txt" 2>&1 &
epid=$!
read -r max_v max_c < <(poll_while $epid)
wait $epid; rc=$?
cat "$OUT/engine-shim.txt"
"$CTL" -s "$SOCK" status | tee "$OUT/status-after-engine.txt"
"$CTL" -s "$SOCK" status --json >"$OUT/status-after-engine.json"
res "engine shim: exit (0 = pattern intact, probe <= budget)" "$rc"
res "engine shim: probed VRAM (budget $BUDGET_BYTES)" "$(awk '/probes/ { print $(NF-1) }' "$OUT/engine-shim.txt")"
res "engine shim: max vram_bytes by kvtierctl" "$max_v"
res "engine shim: max charged_bytes by kvtierctl" "$max_c"
res "engine shim: decode steps ms" "$(awk '/steps took/ { print $(NF-1) }' "$OUT/engine-shim.txt")"

fi
if want 3; then
echo "== 3. PyTorch, budget 1G"
stop_daemon; start_daemon 1G || exit 1
python3 tests/gpu/torch_check.py >"$OUT/torch-plain.txt" 2>&1; rc_a=$?
LD_PRELOAD=$C/libkvtier.so KVTIER_SOCKET=$SOCK KVTIER_LOG=info \
        python3 tests/gpu/torch_check.py --ctl "$CTL" >"$OUT/torch-shim.txt" 2>&1; rc_b=$?
KVTIER_SOCKET=$T/none.sock LD_PRELOAD=$C/libkvtier.so \
        python3 tests/gpu/torch_check.py >"$OUT/torch-nodaemon.txt" 2>&1; rc_c=$?
tail -n 3 "$OUT"/torch-*.txt
"$CTL" -s "$SOCK" status | tee "$OUT/status-after-torch.txt"
stop_daemon
dig() { python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])[sys.argv[2]])' "$1" "$2" 2>/dev/null; }
res "torch plain / shim / shim-no-daemon exit" "$rc_a / $rc_b / $rc_c"
res "torch digests equal (plain vs shim)" "$([ "$(dig "$OUT/torch-plain.txt" digest)" = "$(dig "$OUT/torch-shim.txt" digest)" ] && echo yes || echo NO)"
res "torch digests equal (plain vs no daemon)" "$([ "$(dig "$OUT/torch-plain.txt" digest)" = "$(dig "$OUT/torch-nodaemon.txt" digest)" ] && echo yes || echo NO)"
res "torch regions seen by kvtierctl during the run" "$(dig "$OUT/torch-shim.txt" kvtier_regions)"
res "torch seconds plain / shim" "$(dig "$OUT/torch-plain.txt" seconds) / $(dig "$OUT/torch-shim.txt" seconds)"

fi
if want 4; then
echo "== 4. daemon SIGKILLed and restarted under the running engine, budget $BUDGET"
start_daemon $BUDGET || exit 1
LD_PRELOAD=$C/libkvtier.so KVTIER_SOCKET=$SOCK KVTIER_LOG=info \
        "$C/kv-engine-cuda" $ENGINE_ARGS --steps 160 --hint --max-vram $BUDGET_BYTES >"$OUT/engine-restart.txt" 2>&1 &
epid=$!
sleep 3
kill -KILL "$DPID"; wait "$DPID" 2>/dev/null
sleep 1
start_daemon $BUDGET || exit 1
rereg=0
for _ in $(seq 100); do
        rereg=$("$CTL" -s "$SOCK" status --json | python3 -c 'import json,sys; print(sum(len(c["regions"]) for c in json.load(sys.stdin)["clients"]))')
        [ "$rereg" -ge 8 ] && break; sleep 0.1
done
read -r max_v max_c < <(poll_while $epid)
wait $epid; rc=$?
cat "$OUT/engine-restart.txt"
stop_daemon
res "restart: engine exit (0 = intact, probe <= budget)" "$rc"
res "restart: regions listed by the new daemon (expect 8)" "$rereg"
res "restart: probed VRAM / max kvtierctl vram" "$(awk '/probes/ { print $(NF-1) }' "$OUT/engine-restart.txt") / $max_v"

fi
if want 5; then
echo "== 5. capture paths of real frameworks (512 MiB each), budget 1G"
start_daemon 1G || exit 1
for fw in torch torch-expandable cupy jax; do
        f=${fw%-expandable}; env=()
        [ "$fw" = torch-expandable ] && env=(PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True)
        [ "$f" = jax ] && env=(XLA_PYTHON_CLIENT_PREALLOCATE=false)
        a=$(env "${env[@]}" python3 tests/gpu/capture_probe.py --framework "$f" 2>"$OUT/cap-$fw.err" | tail -n 1)
        b=$(env "${env[@]}" LD_PRELOAD=$C/libkvtier.so KVTIER_SOCKET=$SOCK KVTIER_CAPACITY=400G \
                python3 tests/gpu/capture_probe.py --framework "$f" --ctl "$CTL" 2>>"$OUT/cap-$fw.err" | tail -n 1)
        echo "$fw plain: $a"; echo "$fw shim:  $b"
        same=$(python3 -c 'import json,sys; a,b=(json.loads(x) for x in sys.argv[1:3]); print("same" if a["checksum"]==b["checksum"] else "DIFF", "regions", b["regions"], "total", b.get("total"))' "$a" "$b" 2>/dev/null || echo failed)
        res "capture $fw: checksum / regions / reported total" "$same"
done
stop_daemon

fi
if want 6; then
echo "== 6. shim overhead: uncaptured cudaMalloc/cudaFree pairs, and a compute-bound PyTorch loop"
tests/bench/alloc-overhead.sh "$C/alloc-bench-cuda" "$C/libkvtier.so" 20000 | tee "$OUT/alloc-overhead.txt"
res "alloc/free overhead (real CUDA)" "$(tail -n 1 "$OUT/alloc-overhead.txt")"
loop='import torch,time
a=torch.randn(8192,8192,dtype=torch.bfloat16,device="cuda"); b=torch.randn_like(a)
for _ in range(10): c=a@b
ts=[]
for _ in range(5):
    torch.cuda.synchronize(); t=time.time()
    for _ in range(50): c=a@b
    torch.cuda.synchronize(); ts.append(time.time()-t)
print(sorted(ts)[2]*1e3)'
p1=$(python3 -c "$loop"); s1=$(KVTIER_SOCKET=$T/none.sock KVTIER_MIN_SIZE=1T LD_PRELOAD=$C/libkvtier.so python3 -c "$loop")
p2=$(python3 -c "$loop"); s2=$(KVTIER_SOCKET=$T/none.sock KVTIER_MIN_SIZE=1T LD_PRELOAD=$C/libkvtier.so python3 -c "$loop")
res "matmul loop ms plain / shim (two rounds)" "$p1 $p2 / $s1 $s2"
fi
echo; echo "== results"
printf '%s\n' "${results[@]}" | tee "$OUT/summary.txt"
