#!/bin/bash
# Which allocation paths of real programs the shim captures, on a real GPU,
# in one call of the device tool (carry the folder tests/gpu/capture-package.sh
# made; run this script from it).  Each program runs without and with the
# shim (live kvtierd, VRAM budget 1G); results are compared exactly, and
# the regions kvtierctl lists for the process are recorded with their API
# and rule.  At most about 1 GiB of managed memory at a time.
set -u
C=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-/tmp/kvtier-out}
mkdir -p "$OUT"
T=$(mktemp -d)
CTL=$C/bin/kvtierctl SOCK=$T/kvtierd.sock
results=()
res() { results+=("$(printf '%-20s %s' "$1" "$2")"); }

E=$T/err # per-program stderr, gathered into $OUT/cap-errs.txt (few files come back)
mkdir -p "$E"
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader
echo "binaries from commit $(cat "$C/COMMIT")"
printf '[daemon]\nsocket = %s\ntick_ms = 20\n[gpu]\nvram_budget = 1G\n' "$SOCK" >"$T/kvtierd.conf"
"$C/bin/kvtierd" -c "$T/kvtierd.conf" >>"$OUT/kvtierd.log" 2>&1 &
DPID=$!
for _ in $(seq 100); do "$CTL" -s "$SOCK" status >/dev/null 2>&1 && break; sleep 0.05; done

compare() { # plain-json shim-json -> "same|DIFF regions {...} total N"
        python3 -c 'import json,sys
a,b=(json.loads(x) for x in sys.argv[1:3])
print("same" if a["checksum"]==b["checksum"] else "DIFF", "regions", json.dumps(b.get("regions"), sort_keys=True), "total", b.get("total"))' "$1" "$2" 2>/dev/null || echo "failed"
}

for fw in torch torch-expandable cupy jax; do
        f=${fw%-expandable}; env=(); cap=(KVTIER_CAPACITY=400G)
        [ "$fw" = torch-expandable ] && env=(PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True)
        # XLA sizes its pool from free memory: no capacity view for it, and a small fraction.
        [ "$f" = jax ] && env=(XLA_PYTHON_CLIENT_PREALLOCATE=false XLA_PYTHON_CLIENT_MEM_FRACTION=.2) cap=()
        a=$(env "${env[@]}" timeout 150 python3 "$C/capture_probe.py" --framework "$f" 2>"$E/cap-$fw.err" | tail -n 1)
        b=$(env "${env[@]}" "${cap[@]}" LD_PRELOAD="$C/libkvtier.so" KVTIER_SOCKET="$SOCK" KVTIER_LOG=info \
                timeout 150 python3 "$C/capture_probe.py" --framework "$f" --ctl "$CTL" 2>>"$E/cap-$fw.err" | tail -n 1)
        echo "$fw plain: $a"; echo "$fw shim:  $b"
        res "$fw" "$(compare "$a" "$b")"
done

# CUDA graphs captured in each mode while the shim captures their pool's
# segments, and 8 threads allocating at once: results equal or not.
a=$(timeout 150 python3 "$C/graph_probe.py" 2>"$E/cap-graph.err" | tail -n 1)
b=$(KVTIER_CAPACITY=400G LD_PRELOAD="$C/libkvtier.so" KVTIER_SOCKET="$SOCK" KVTIER_LOG=info \
        timeout 150 python3 "$C/graph_probe.py" 2>>"$E/cap-graph.err" | tail -n 1)
echo "graph plain: $a"; echo "graph shim:  $b"
res "graphs, threads" "$([ -n "$a" ] && [ "$a" = "$b" ] && ! grep -q error <<<"$a" && echo same || echo DIFF)"

a=$(timeout 60 "$C/static_probe" 2>"$E/cap-static.err" | tail -n 1)
b=$(KVT_PROBE_STATUS="$CTL -s $SOCK status --json >$T/static.json" LD_PRELOAD="$C/libkvtier.so" KVTIER_SOCKET="$SOCK" \
        KVTIER_LOG=info KVTIER_CAPACITY=400G KVTIER_CUDART="$C/cudart/libcudart.so.13" timeout 60 "$C/static_probe" \
        2>>"$E/cap-static.err" | tail -n 1)
echo "static plain: $a"; echo "static shim:  $b"
cp "$T/static.json" "$OUT/status-static.json" 2>/dev/null
regs=$(python3 -c 'import json,sys
st=json.load(open(sys.argv[1])); pid=json.loads(sys.argv[2])["pid"]; seen={}
for c in st["clients"]:
    if c["pid"]==pid:
        for r in c["regions"]:
            k="%s/%s"%(r["api"],r["rule"]); seen[k]=seen.get(k,0)+1
print(json.dumps(seen, sort_keys=True))' "$T/static.json" "$b" 2>/dev/null || echo "?")
same=$(python3 -c 'import json,sys; a,b=(json.loads(x) for x in sys.argv[1:3]); print("same" if a["checksum"]==b["checksum"] else "DIFF", "total", b["total"])' "$a" "$b" 2>/dev/null || echo failed)
res "static-cudart C" "$same regions $regs"
"$CTL" -s "$SOCK" status >"$OUT/status-end.txt" 2>&1
kill -TERM "$DPID"; wait "$DPID"; echo "kvtierd exit $?"
for f in "$E"/*.err; do echo "== $(basename "$f")"; cat "$f"; done >"$OUT/cap-errs.txt"
echo "== shim messages"; grep -h "kvtier:" "$E"/*.err | sort | uniq -c | sort -rn | head -30
echo; echo "== results"
printf '%s\n' "${results[@]}" | tee "$OUT/summary.txt"
