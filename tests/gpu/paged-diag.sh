#!/bin/bash
# Paged multi-session KV (tests/bench/paged_kv.py) under kvtier with the
# daemon's view recorded every 100 ms, to see where a step's time goes:
# VRAM held, orders in flight, bytes moved per second, next to all-VRAM.
# Run after tests/gpu/package.sh, in the repository root on the GPU machine:
#   bash tests/gpu/paged-diag.sh          (device tool: carry [".carry"])
# KVT_DIAG_POLICIES lists the daemon policies to compare (default "hybrid lru").
set -u
C=$PWD/.carry
RET=${OUT:-/tmp/kvtier-out}
T=$(mktemp -d)
mkdir -p "$RET"
export PYTHONUNBUFFERED=1
CTL=$C/bin/kvtierctl SOCK=$T/kvtierd.sock
P="python3 tests/bench/paged_kv.py --layout contiguous --turns 3"
echo "commit $(cat "$C/COMMIT"), $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader), $(date -u)"

timeout 120 $P --pool torch >"$RET/kv-vram.txt" 2>&1
echo "all-VRAM: $(tail -n 1 "$RET/kv-vram.txt")"

for pol in ${KVT_DIAG_POLICIES:-hybrid lru}; do
        printf '[daemon]\nsocket = %s\n[gpu]\nvram_budget = 2G\n[policy]\nname = %s\n' "$SOCK" "$pol" >"$T/kvtierd.conf"
        "$C/bin/kvtierd" -c "$T/kvtierd.conf" >"$RET/kvtierd-$pol.log" 2>&1 &
        dpid=$!
        for _ in $(seq 100); do "$CTL" -s "$SOCK" status >/dev/null 2>&1 && break; sleep 0.05; done
        env LD_PRELOAD="$C/libkvtier.so" KVTIER_SOCKET="$SOCK" KVTIER_LOG=notice \
                KVTIER_DEBUG="heat-stats=$RET/heat-$pol.json,trace=$RET/trace-$pol.txt" \
                timeout 150 $P --pool torch --hint >"$RET/kv-$pol.txt" 2>&1 &
        epid=$!
        : >"$RET/timeline-$pol.jsonl"
        while kill -0 $epid 2>/dev/null; do
                "$CTL" -s "$SOCK" status --json 2>/dev/null | python3 -c '
import json, sys, time
s = json.load(sys.stdin); g = (s["gpus"] or [{}])[0]; m = s["migrations"]
print(json.dumps({"t": time.time(), "vram": g.get("vram_bytes", 0), "charged": g.get("charged_bytes", 0),
  "inflight": g.get("inflight_orders", 0), "sent": m["orders_sent"], "done": m["orders_done"],
  "failed": m["orders_failed"], "up": m["bytes_to_vram"], "down": m["bytes_to_host"]}))' >>"$RET/timeline-$pol.jsonl"
                sleep 0.1
        done
        wait $epid
        echo "kvtier $pol (rc $?): $(tail -n 1 "$RET/kv-$pol.txt")"
        grep "^paged_kv:" "$RET/kv-$pol.txt"
        python3 -c 'import json,sys; a,b=(json.loads(open(f).read().strip().splitlines()[-1]) for f in sys.argv[1:3]); print("  pool_sum", "EQUAL" if a["pool_sum"]==b["pool_sum"] else "DIFFERS", a["pool_sum"], b["pool_sum"])' \
                "$RET/kv-vram.txt" "$RET/kv-$pol.txt" 2>&1
        "$CTL" -s "$SOCK" status >"$RET/status-$pol.txt" 2>&1
        kill $dpid; wait $dpid
        python3 - "$RET/timeline-$pol.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
if len(rows) < 2:
    sys.exit(print("  no timeline"))
dt = rows[-1]["t"] - rows[0]["t"]
vr = [r["vram"] for r in rows]
print(f"  {len(rows)} polls over {dt:.1f} s: VRAM mean {sum(vr)/len(vr)/2**30:.2f} GiB, max {max(vr)/2**30:.2f};"
      f" in flight mean {sum(r['inflight'] for r in rows)/len(rows):.1f};"
      f" orders {rows[-1]['sent']} sent, {rows[-1]['done']} done, {rows[-1]['failed']} failed;"
      f" moved up {rows[-1]['up']/2**30:.1f} GiB ({rows[-1]['up']/2**30/dt:.2f} GiB/s), down {rows[-1]['down']/2**30:.1f} GiB ({rows[-1]['down']/2**30/dt:.2f} GiB/s)")
# per second: VRAM and bytes moved
last = rows[0]
for r in rows[1:]:
    if r["t"] - last["t"] >= 1.0:
        print(f"  t={r['t']-rows[0]['t']:5.1f}s vram {r['vram']/2**30:.2f} GiB inflight {r['inflight']:3d}"
              f" up {(r['up']-last['up'])/2**30/(r['t']-last['t']):.2f} GiB/s down {(r['down']-last['down'])/2**30/(r['t']-last['t']):.2f} GiB/s")
        last = r
PY
done
cd "$RET" && tar czf diag.tgz ./*.txt ./*.jsonl ./*.json ./*.log 2>/dev/null && rm -f ./trace-*.txt && ls -la "$RET" | head
