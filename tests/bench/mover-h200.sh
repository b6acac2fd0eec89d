#!/bin/bash
# Issue 5 benchmarks on the GPU machine, in one device call:
#   bash .carry-mover/mover-h200.sh      (carry [".carry-mover"], built by
#                                         tests/bench/package-mover.sh)
# KVT_ONLY="0 1" runs only those steps; KVT_MOVER_CONFIGS lists the mover
# settings to compare in step 1 (numa1, numa0: KVTIER_DEBUG=host-numa; default:
# the built-in defaults only).
# KVT_KV_VARIANTS lists step 2's kvtier runs as NAME=CONF, CONF being extra
# kvtierd.conf text, a [section] first, \n for new lines, no spaces (default
# "defaults= ahead64= ahead64ov=[policy]\noverlap=1G nohint"; a NAME starting
# with nohint runs without --hint, one starting with aheadN with --hint-ahead N
# (16 without N: ahead=); CONF may end in +VAR=VALUE items, the shim's
# environment: ahead16nonuma=+KVTIER_DEBUG=host-numa=0);
# KVT_KV_INTER=1 repeats step 2 on the interleaved layout.
# (0) mover-bench-cuda --explore: raw advice/prefetch sequences, timed.
# (1) mover-bench-cuda: an 8 GiB managed region up and down through the
#     shim's pipeline code at run lengths 2 MiB .. 1 GiB, next to pinned
#     cudaMemcpy of the same bytes; then plain host memory instead of the
#     GPU's NUMA node on 4 GiB.  (The read-duplication and stream-count
#     variants went with those settings; RESULTS.md keeps their figures.)
# (2) paged_kv.py: paged multi-session decode, pool 4x a 2 GiB kvtier
#     budget: all-VRAM, plain managed memory, zero-copy host KV, the
#     engine's own CPU offload of whole sessions, then each kvtier variant
#     under its own kvtierd; per run the ratio to all-VRAM, the time over
#     BENCHMARKS.md's bound, the pool checksum against all-VRAM's and what
#     moved (the offload's swaps, the daemon's orders and bytes).
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
for cfg in $KVT_MOVER_CONFIGS; do # numa1, numa0: KVTIER_DEBUG=host-numa=1 or 0
        numa=${cfg##*numa}
        KVTIER_DEBUG=host-numa=$numa "$C/mover-bench-cuda" --size 8G --runs 2M,64M,1G \
                2>&1 | tee "$OUT/mover-$cfg.txt"
        res "mover $cfg: exit (0 = no lost write)" "${PIPESTATUS[0]}"
done
elif want 1; then
echo "== 1. mover microbenchmark"
"$C/mover-bench-cuda" --size 8G 2>&1 | tee "$OUT/mover-default.txt"
res "mover default: exit (0 = no lost write)" "${PIPESTATUS[0]}"
KVTIER_DEBUG=host-numa=0 "$C/mover-bench-cuda" --size 4G --runs 64M,1G 2>&1 | tee "$OUT/mover-nonuma.txt"
res "mover host_numa=0: exit" "${PIPESTATUS[0]}"
fi

start_daemon() { # BUDGET [EXTRA [NAME]]: EXTRA is more kvtierd.conf text (printf %b: \n escapes)
        printf '[daemon]\nsocket = %s\ntick_ms = 20\n[gpu]\nvram_budget = %s\n' "$SOCK" "$1" >"$T/kvtierd.conf"
        [ -n "${2:-}" ] && printf '%b\n' "$2" >>"$T/kvtierd.conf"
        [ -n "${3:-}" ] && { cp "$T/kvtierd.conf" "$OUT/kvtierd-$3.conf"; echo "== kvtierd for $3" >>"$OUT/kvtierd.log"; }
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
        echo "$rc" >"$OUT/kv-$name.rc"
        tail -n 1 "$OUT/kv-$name.txt" >"$OUT/kv-$name.json"
        echo "$name rc=$rc $(cat "$OUT/kv-$name.json")"
}
if want 2; then
echo "== 2. paged multi-session KV, pool 8 GiB, budget 2G"
# Every reference of BENCHMARKS.md, then kvtier: each variant under a fresh
# kvtierd (no placement or heat left over from the run before), with only
# the 1 GiB K/V pools captured (KVTIER_MIN_SIZE=256M: PyTorch's 64 MiB
# gather temporaries stay plain VRAM).  --bound-budget makes every run
# report the bound's extra time for the same budget (computed from its own
# draws, nothing on the GPU).
P="python3 $C/paged_kv.py --bound-budget 2G"
SHIM="env LD_PRELOAD=$C/libkvtier.so KVTIER_SOCKET=$SOCK KVTIER_LOG=notice KVTIER_MIN_SIZE=256M"
# NAME=CONF, CONF extra kvtierd.conf text with \n escapes and no spaces; a
# NAME starting with nohint runs without --hint, one starting with aheadN
# hints the next turn's sessions N steps early (--hint-ahead N, default 16;
# 64 is a whole turn)
read -r -a variants <<<"${KVT_KV_VARIANTS:-defaults= ahead64= ahead64ov=[policy]\noverlap=1G nohint}"
layouts="contig:contiguous:3"
[ "${KVT_KV_INTER:-0}" = 1 ] && layouts+=" inter:interleaved:2"
runs=()
for l in $layouts; do
        IFS=: read -r tag layout turns <<<"$l"
        A="--layout $layout --turns $turns"
        kv "vram-$tag" $P --pool torch $A
        kv "managed-$tag" $P --pool managed $A
        kv "zerocopy-$tag" $P --pool zerocopy --layout "$layout" --turns 1 # 20+ ms a step
        kv "offload-$tag" $P --pool offload $A
        runs+=("$tag:vram-$tag" "$tag:managed-$tag" "$tag:zerocopy-$tag" "$tag:offload-$tag")
        for v in "${variants[@]}"; do
                name=${v%%=*} conf= venv=
                [[ $v == *=* ]] && conf=${v#*=}
                if [[ $conf == *+* ]]; then venv=${conf#*+} conf=${conf%%+*}; fi
                hint=--hint
                [[ $name == nohint* ]] && hint=
                [[ $name =~ ^ahead([0-9]*) ]] && hint="--hint --hint-ahead ${BASH_REMATCH[1]:-16}"
                run="kvtier-$name-$tag"
                runs+=("$tag:$run")
                if ! start_daemon 2G "$conf" "$run"; then
                        echo "$run: kvtierd did not start" | tee "$OUT/kv-$run.txt"
                        echo "no kvtierd" >"$OUT/kv-$run.rc"
                        stop_daemon
                        continue
                fi
                kv "$run" env ${venv//+/ } $SHIM $P --pool torch $A $hint
                # the daemon's counts before it goes (migrations.* in daemon/status.c)
                "$CTL" -s "$SOCK" status --json >"$OUT/status-$run.json" 2>&1
                "$CTL" -s "$SOCK" status >"$OUT/status-$run.txt" 2>&1
                stop_daemon
        done
done
python3 - "$OUT" "${runs[@]}" <<'PY' | tee "$OUT/kv-table.txt"
# ratio: tokens/s over all-VRAM's (same layout); bound: all-VRAM ms/step +
# the run's bound_step_ms_extra (BENCHMARKS.md "The bound to compare with");
# pool_sum against all-VRAM's where the runs wrote the same steps.
import json, sys, os
out = sys.argv[1]
def get(name, pre="kv-", ext=".json"):
    try:
        return json.load(open(os.path.join(out, pre + name + ext)))
    except Exception:
        return None
def rc(name):
    try:
        return open(os.path.join(out, f"kv-{name}.rc")).read().strip()
    except Exception:
        return "?"
# a variant whose extra kvtierd.conf lines the daemon warned about measured
# the defaults (an unknown key is ignored)
ignored, cur = set(), None
try:
    for line in open(os.path.join(out, "kvtierd.log")):
        if line.startswith("== kvtierd for "):
            cur = line.split()[-1]
        elif cur and ("unknown" in line or "invalid" in line.lower()):
            ignored.add(cur)
except OSError:
    pass
print(f"kv {'run':28s} {'tok/s':>9s} {'ms/step':>8s} {'ratio':>6s} {'bound':>7s} {'/bound':>6s}  pool_sum    moves")
for arg in sys.argv[2:]:
    tag, name = arg.split(":", 1)
    x, r = get(name), get(f"vram-{tag}")
    if not x:
        print(f"kv {name:28s} failed (rc {rc(name)}, see kv-{name}.txt)")
        continue
    ratio = x["tok_s"] / r["tok_s"] if r else float("nan")
    extra = x.get("bound_step_ms_extra")
    bound = r["step_ms"] + extra if r and extra is not None else float("nan")
    if not r:
        same = "no ref"
    elif x["steps"] != r["steps"]:
        same = f"-- ({x['steps']} steps)"
    else:
        same = "EQUAL" if x["pool_sum"] == r["pool_sum"] else "DIFFERS"
    moves = ""
    if "swaps_in" in x:
        moves = f"swaps in {x['swaps_in']} out {x['swaps_out']} ({x['offload_slots']} slots)"
    st = get(name, "status-")
    if st:
        m = st.get("migrations", {})
        moves = (f"orders {m.get('orders_sent')} (failed {m.get('orders_failed')}) "
                 f"up {m.get('bytes_to_vram', 0) / 2**30:.1f} GiB down {m.get('bytes_to_host', 0) / 2**30:.1f} GiB")
    elif name.startswith("kvtier-"):
        moves = "no daemon status"
    if name in ignored:
        moves = "CONF NOT TAKEN (kvtierd.log) " + moves
    print(f"kv {name:28s} {x['tok_s']:9.1f} {x['step_ms']:8.2f} {ratio:6.3f} {bound:7.2f} "
          f"{x['step_ms'] / bound:6.2f}  {same:11s} {moves}")
    if name.startswith("vram-") and extra is not None:
        print(f"   bound for {tag}: budget {x['bound_budget'] / 2**30:g} GiB = {x['bound_sessions']} sessions of "
              f"{x['session_bytes'] / 2**20:g} MiB; {x['bound_sessions_in']} must come in over {x['steps']} "
              f"steps under MIN ({x['lru_sessions_in']} under LRU): +{extra:.3f} ms/step at 55.3 GB/s")
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
grep -h "GB/s\|check:" "$OUT"/explore.txt "$OUT"/mover-numa*.txt 2>/dev/null
tar czf "$RET/raw.tgz" -C "$T" out
