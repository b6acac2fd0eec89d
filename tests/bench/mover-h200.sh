#!/bin/bash
# Issue 5 benchmarks on the GPU machine, in one device call:
#   bash .carry-mover/mover-h200.sh      (carry [".carry-mover"], built by
#                                         tests/bench/package-mover.sh)
# KVT_ONLY="0 1" runs only those steps; KVT_MOVER_CONFIGS lists the mover
# settings to compare in steps 1-2 (default: the built-in defaults only).
# (0) mover-bench-cuda --explore: raw advice/prefetch sequences, timed.
# (1) mover-bench-cuda: an 8 GiB managed region up and down through the
#     shim's pipeline code at run lengths 2 MiB .. 1 GiB, next to pinned
#     cudaMemcpy of the same bytes; then variants (read-duplication off, one
#     stream, plain host instead of the GPU's NUMA node) on 4 GiB.
# (2) paged_kv.py: paged multi-session decode, pool 4x a 2 GiB kvtier
#     budget, against all-VRAM, plain managed memory and zero-copy host KV.
# Ratios last.  Raw output under $OUT.  Never more than ~10 GiB of managed
# memory at once on a 140 GiB card.
set -u
C=$(cd "$(dirname "$0")" && pwd)
# The device tool returns at most 8 files: raw output goes to one tarball.
RET=${OUT:-/tmp/kvtier-out}
T=$(mktemp -d)
OUT=$T/out
mkdir -p "$RET" "$OUT"
export PYTHONUNBUFFERED=1
CTL=$C/bin/kvtierctl SOCK=$T/kvtierd.sock
only=${KVT_ONLY:-}
want() { [ -z "$only" ] || [[ " $only " == *" $1 "* ]]; }
results=()
res() { results+=("$(printf '%-62s %s' "$1" "$2")"); }

nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader | tee "$OUT/gpu.txt"
echo "binaries from commit $(cat "$C/COMMIT")" | tee "$OUT/commit.txt"
date -u | tee "$OUT/date.txt"

if want 0; then
echo "== 0. explore eviction and promotion paths"
"$C/mover-bench-cuda" --size 4G --explore 2>&1 | tee "$OUT/explore.txt"
res "explore: exit" "${PIPESTATUS[0]}"
fi

if want 1 && [ -n "${KVT_MOVER_CONFIGS:-}" ]; then
echo "== 1. mover microbenchmark, configs: $KVT_MOVER_CONFIGS"
for cfg in $KVT_MOVER_CONFIGS; do # e.g. rd0-numa1: KVTIER_MOVER_READ_DUP=0 KVTIER_MOVER_HOST_NUMA=1
        rd=${cfg#rd}; rd=${rd%%-*}; numa=${cfg##*numa}
        KVTIER_MOVER_READ_DUP=$rd KVTIER_MOVER_HOST_NUMA=$numa "$C/mover-bench-cuda" --size 8G --runs 2M,64M,1G \
                2>&1 | tee "$OUT/mover-$cfg.txt"
        res "mover $cfg: exit (0 = no lost write)" "${PIPESTATUS[0]}"
done
elif want 1; then
echo "== 1. mover microbenchmark"
"$C/mover-bench-cuda" --size 8G 2>&1 | tee "$OUT/mover-default.txt"
res "mover default: exit (0 = no lost write)" "${PIPESTATUS[0]}"
KVTIER_MOVER_READ_DUP=0 "$C/mover-bench-cuda" --size 4G --runs 2M,64M,1G 2>&1 | tee "$OUT/mover-noreaddup.txt"
res "mover read_dup=0: exit" "${PIPESTATUS[0]}"
KVTIER_MOVER_STREAMS=1 "$C/mover-bench-cuda" --size 4G --runs 2M,8M,64M 2>&1 | tee "$OUT/mover-1stream.txt"
res "mover 1 stream: exit" "${PIPESTATUS[0]}"
KVTIER_MOVER_STREAMS=4 "$C/mover-bench-cuda" --size 4G --runs 2M,8M,64M 2>&1 | tee "$OUT/mover-4streams.txt"
res "mover 4 streams: exit" "${PIPESTATUS[0]}"
KVTIER_MOVER_HOST_NUMA=0 "$C/mover-bench-cuda" --size 4G --runs 64M,1G 2>&1 | tee "$OUT/mover-nonuma.txt"
res "mover host_numa=0: exit" "${PIPESTATUS[0]}"
fi

start_daemon() {
        printf '[daemon]\nsocket = %s\ntick_ms = 20\n[gpu]\nvram_budget = %s\n' "$SOCK" "$1" >"$T/kvtierd.conf"
        "$C/bin/kvtierd" -c "$T/kvtierd.conf" >>"$OUT/kvtierd.log" 2>&1 &
        DPID=$!
        for _ in $(seq 100); do "$CTL" -s "$SOCK" status >/dev/null 2>&1 && return 0; sleep 0.05; done
        return 1
}
stop_daemon() { kill "$DPID" 2>/dev/null; wait "$DPID" 2>/dev/null; }

kv() { # NAME ARGS...: one paged_kv run; its JSON line into $OUT/kv-NAME.json
        local name=$1; shift
        timeout 150 "$@" >"$OUT/kv-$name.txt" 2>&1
        local rc=$?
        tail -n 1 "$OUT/kv-$name.txt" >"$OUT/kv-$name.json"
        echo "$name rc=$rc $(cat "$OUT/kv-$name.json")"
}
if want 2; then
echo "== 2. paged multi-session KV, pool 8 GiB, budget 2G"
P="python3 $C/paged_kv.py"
kv vram-contig $P --pool torch --layout contiguous
kv managed-contig $P --pool managed --layout contiguous
if [ -z "${KVT_MOVER_CONFIGS:-}" ]; then
kv vram-inter $P --pool torch --layout interleaved
kv zerocopy-contig $P --pool zerocopy --layout contiguous --turns 2
fi
start_daemon 2G
SHIM="env LD_PRELOAD=$C/libkvtier.so KVTIER_SOCKET=$SOCK KVTIER_LOG=notice"
[ -z "${KVT_MOVER_CONFIGS:-}" ] && kv kvtier-contig $SHIM $P --pool torch --layout contiguous --turns 2
kv kvtier-hint-contig $SHIM $P --pool torch --layout contiguous --hint
for cfg in ${KVT_MOVER_CONFIGS:-}; do
        rd=${cfg#rd}; rd=${rd%%-*}; numa=${cfg##*numa}
        kv "kvtier-hint-contig-$cfg" $SHIM KVTIER_MOVER_READ_DUP=$rd KVTIER_MOVER_HOST_NUMA=$numa \
                $P --pool torch --layout contiguous --hint
done
"$CTL" -s "$SOCK" status --json >"$OUT/status-after-contig.json" 2>&1
kv kvtier-hint-inter $SHIM $P --pool torch --layout interleaved --hint --turns 2
"$CTL" -s "$SOCK" status >"$OUT/status-after-inter.txt" 2>&1
stop_daemon
python3 - "$OUT" <<'PY' | tee "$OUT/kv-table.txt"
import json, sys, os
out = sys.argv[1]
def get(n):
    try:
        return json.load(open(os.path.join(out, f"kv-{n}.json")))
    except Exception:
        return None
for layout, ref in (("contig", "vram-contig"), ("inter", "vram-inter")):
    r = get(ref)
    names = [ref, f"managed-{layout}", f"zerocopy-{layout}", f"kvtier-{layout}", f"kvtier-hint-{layout}"]
    names += sorted(f[3:-5] for f in os.listdir(out) if f.startswith(f"kv-kvtier-hint-{layout}-") and f.endswith(".json"))
    for n in names:
        x = get(n)
        if not x:
            continue
        ratio = x["tok_s"] / r["tok_s"] if r else float("nan")
        same = "digest same" if r and x["digest"] == r["digest"] else "digest DIFFERS"
        print(f"kv {n:32s} {x['tok_s']:10.1f} tok/s  {x['step_ms']:8.2f} ms/step  ratio {ratio:.3f}  {same}")
PY
fi
if want 3; then
echo "== 3. long-context greedy generation, 32K context, KV 2 GiB, budget 1G"
L="python3 $C/long_context.py --context 32768 --new 64"
export CUBLAS_WORKSPACE_CONFIG=:4096:8
kv lc-vram-static $L --cache static
kv lc-vram-static-again $L --cache static
kv lc-vram-dynamic $L --cache dynamic
kv lc-offloaded $L --cache offloaded
start_daemon 1G
kv lc-kvtier-static env LD_PRELOAD=$C/libkvtier.so KVTIER_SOCKET=$SOCK KVTIER_LOG=notice KVTIER_MIN_SIZE=48M \
        $L --cache static
"$CTL" -s "$SOCK" status >"$OUT/status-after-lc.txt" 2>&1
stop_daemon
python3 - "$OUT" <<'PY' | tee "$OUT/lc-table.txt"
import json, sys, os
out = sys.argv[1]
def get(n):
    try:
        return json.load(open(os.path.join(out, f"kv-{n}.json")))
    except Exception:
        return None
ref = get("lc-vram-static")
for n in ("lc-vram-static", "lc-vram-static-again", "lc-vram-dynamic", "lc-offloaded", "lc-kvtier-static"):
    x = get(n)
    if not x:
        print(f"{n:22s} failed"); continue
    r = x["decode_tok_s"] / ref["decode_tok_s"] if ref else float("nan")
    same = "ids same" if ref and x["ids_sha"] == ref["ids_sha"] else "ids DIFFER"
    print(f"{n:22s} ttft {x['ttft_s']*1e3:8.1f} ms  decode {x['decode_ms_per_token']:7.2f} ms/tok "
          f"{x['decode_tok_s']:7.1f} tok/s  ratio {r:.3f}  {same} {x['ids_head']}")
PY
fi
echo
echo "== summary"
printf '%s\n' "${results[@]}"
grep -h "ratio\|check:" "$OUT"/mover-default.txt 2>/dev/null | sed 's/^/default 8G: /'
[ -f "$OUT/kv-table.txt" ] && cat "$OUT/kv-table.txt"
[ -f "$OUT/lc-table.txt" ] && cat "$OUT/lc-table.txt"
grep -h "GB/s\|check:" "$OUT"/explore.txt "$OUT"/mover-rd*.txt 2>/dev/null
tar czf "$RET/raw.tgz" -C "$T" out
