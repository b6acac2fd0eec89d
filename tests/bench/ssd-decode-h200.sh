#!/bin/bash
# The SSD tier under decode (issue 20), in one device call:
#
#   bash .carry-ssd/ssd-decode-h200.sh    (carry [".carry-ssd"], built by tests/bench/package-ssd.sh)
#
# paged_kv.py, 8 GiB pool (8 layers, 32 sessions of 256 MiB, contiguous),
# batch 4 (1 GiB read a step), turns of KVT_TURN steps (1024), 1 warm-up and
# KVT_TURNS (3) measured, the same seed everywhere (in the order they run):
#   vram            all-VRAM, no shim (the reference)
#   ssd             --pool ssd under the shim, budget KVT_BUDGET (4G): sessions outside the turn
#                   spilled, restored at their turn, no readahead
#   ssd-ra          the same with --ssd-readahead KVT_AHEAD (default a whole turn)
#   compress        kv_compress.py (32K context, 16 layers), [ssd] compress = zstd, budget 100G
#   compress-lz4    the same with compress = lz4
#   offload         the engine's own CPU offload (host pool, VRAM cache of 8 sessions), no shim
#   kvtier          kvtier's host tier with the defaults: --pool torch under the shim, budget KVT_BUDGET
#   ssd-ra-nopress  ssd-ra with a 100G budget: kvtier's host tier never moves anything
# Each shim run has a private kvtierd: [daemon] socket, [gpu] vram_budget,
# [ssd] dir = KVT_SSD_DIR/ssd (default /var/tmp/kvtier-ssd-decode: must be
# on the NVMe disk, not tmpfs), max_per_uid = 1T.  One JSON line a run in
# $OUT/results.jsonl, a table last (ssd-decode-report.py: ratios to the
# all-VRAM run of this call, pool checksums against it) and the SSD section
# of kvtierctl status.  Each run is time-boxed (timeout), the whole within
# KVT_TOTAL_S (330 s): a run that no longer fits is skipped and says so.
#
# KVT_RUNS picks runs by name (the list above, compress included).
# KVT_DRYRUN=1: the same script on a machine without a GPU (--device cpu,
# small sizes, KVT_PYTHON for a Python with torch): a check of the script
# and the logic, not a measurement.
set -u
C=$(cd "$(dirname "$0")" && pwd)
. "$C/bench-lib.sh"
bench_setup results.jsonl
PY=${KVT_PYTHON:-python3}
BUDGET=${KVT_BUDGET:-4G}
DIR=${KVT_SSD_DIR:-/var/tmp/kvtier-ssd-decode}
TURN=${KVT_TURN:-1024}
AHEAD=${KVT_AHEAD:-$TURN}
DEADLINE=$((SECONDS + ${KVT_TOTAL_S:-330}))
if [ "${KVT_DRYRUN:-0}" = 1 ]; then
        TURN=${KVT_TURN:-8} AHEAD=${KVT_AHEAD:-8}
        PAGED="$PY $C/paged_kv.py --device cpu --sessions 12 --blocks-per-session 16 --layers 2 --batch 3 --turn $TURN --turns ${KVT_TURNS:-3} --warmup-turns 1 --layout contiguous"
        COMPRESS="$PY $C/kv_compress.py --device cpu --context 512 --layers 2"
        OFFLOAD_SLOTS=4
else
        PAGED="$PY $C/paged_kv.py --sessions 32 --blocks-per-session 512 --layers 8 --batch 4 --turn $TURN --turns ${KVT_TURNS:-3} --warmup-turns 1 --layout contiguous"
        COMPRESS="$PY $C/kv_compress.py --context 32768 --layers 16"
        OFFLOAD_SLOTS=8
fi

mkdir -p "$DIR" && chmod 700 "$DIR"
{
        command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader
        echo "binaries from commit $(cat "$C/COMMIT" 2>/dev/null || echo unknown)"
        date -u
        df -hT "$DIR" | tail -1
} | tee "$RET/env.txt"

# start_daemon BUDGET [INI LINES...]: a kvtierd of its own for one run,
# its SSD directory emptied (bench-lib.sh).
start_daemon() {
        local budget=$1 l
        shift
        rm -rf "$DIR/ssd"
        { printf '[daemon]\nsocket = %s\n[gpu]\nvram_budget = %s\n[ssd]\ndir = %s\nmax_per_uid = 1T\n' "$SOCK" "$budget" "$DIR/ssd"
          for l in "$@"; do echo "$l"; done; } >"$T/kvtierd.conf"
        { echo "-- kvtierd, budget $budget $*"; cat "$T/kvtierd.conf"; } >>"$RET/kvtierd.log"
        bench_start_daemon "$T/kvtierd.conf"
}
stop_daemon() { bench_stop_daemon; rm -rf "$DIR/ssd"; }

# run TAG LIMIT_S BUDGET|- [INI LINE ...] -- CMD...: one workload, time-boxed;
# with a budget under the shim with a private kvtierd (status polled every
# 2 s while it runs, saved at the end).
run() {
        local tag=$1 limit=$2 budget=$3 ini=() rc t0 left
        shift 3
        while [ $# -gt 0 ] && [ "$1" != -- ]; do ini+=("$1"); shift; done
        shift
        left=$((DEADLINE - SECONDS - 10))
        [ "$left" -lt "$limit" ] && limit=$left
        echo "== $tag" | tee -a "$RET/runs.log"
        t0=$(date +%s.%N)
        if [ "$limit" -lt 20 ]; then
                echo "skipped: ${left} s left of KVT_TOTAL_S" | tee -a "$RET/runs.log"
                bench_record "$tag" 125 "$t0" "skipped: out of time"
                return
        fi
        if [ "$budget" = - ]; then
                timeout -k 5 "$limit" "$@" >"$T/out" 2>>"$RET/runs.log"
                rc=$?
        else
                start_daemon "$budget" ${ini[@]+"${ini[@]}"} || { bench_record "$tag" 126 "$t0" "kvtierd did not start"; return; }
                (while sleep 2; do "$CTL" -s "$SOCK" status >>"$RET/status-$tag.txt" 2>&1; done) &
                local poll=$!
                timeout -k 5 "$limit" env LD_PRELOAD="$C/libkvtier.so" KVTIER_SOCKET="$SOCK" "$@" >"$T/out" 2>>"$RET/runs.log"
                rc=$?
                kill $poll 2>/dev/null; wait $poll 2>/dev/null
                "$CTL" -s "$SOCK" status --json >"$RET/status-$tag.json" 2>/dev/null
                "$CTL" -s "$SOCK" status >"$T/final.txt" 2>&1
                cat "$T/final.txt" >>"$RET/status-$tag.txt"
                { echo "-- $tag, at the end:"; sed -n '/^SSD tier/,/^$/p' "$T/final.txt"
                  # the last poll that showed a client in the SSD tier: its table
                  echo "-- $tag, last seen with its spills:"
                  awk '/^SSD tier/ { b = $0 "\n"; on = 1; live = 0; next }
                       on && /^$/ { on = 0; if (b ~ /\nPID/) any = b; if (live) last = b; next }
                       on { b = b $0 "\n"; if ($1 ~ /^[0-9]+$/ && $4 > 0) live = 1 }
                       END { printf "%s", last != "" ? last : any != "" ? any : "(no SSD client seen)\n" }' "$RET/status-$tag.txt"
                } >>"$T/ssd-sections.txt"
                stop_daemon
        fi
        [ "$rc" = 124 ] || [ "$rc" = 137 ] && echo "$tag: timed out after $limit s" | tee -a "$RET/runs.log"
        cat "$T/out" >>"$RET/runs.log"
        bench_record "$tag" "$rc" "$t0" "$(tail -n 1 "$T/out")"
}

# The SSD rows and compression first: a run that overstays its limit leaves
# less time to the references (offload, kvtier), never to them.
for tag in ${KVT_RUNS:-vram ssd ssd-ra compress compress-lz4 offload kvtier ssd-ra-nopress}; do
        case "$tag" in
        vram) run vram 60 - -- $PAGED ;;
        ssd) run ssd 80 "$BUDGET" -- $PAGED --pool ssd ;;
        ssd-ra) run ssd-ra 80 "$BUDGET" -- $PAGED --pool ssd --ssd-readahead "$AHEAD" ;;
        compress) run compress 100 100G "compress = zstd" -- $COMPRESS --ctl "$CTL" --socket "$SOCK" ;;
        compress-lz4) run compress-lz4 100 100G "compress = lz4" -- $COMPRESS --ctl "$CTL" --socket "$SOCK" ;;
        offload) run offload 60 - -- $PAGED --pool offload --offload-slots $OFFLOAD_SLOTS ;;
        kvtier) run kvtier 80 "$BUDGET" -- $PAGED ;;
        ssd-ra-nopress) run ssd-ra-nopress 80 100G -- $PAGED --pool ssd --ssd-readahead "$AHEAD" ;;
        *) echo "unknown run $tag" ;;
        esac
done
rm -rf "$DIR/ssd"
python3 "$C/ssd-decode-report.py" "$R" >"$T/report.txt" 2>&1
{ echo; echo "kvtierctl status, SSD tier:"; cat "$T/ssd-sections.txt" 2>/dev/null; } >>"$T/report.txt"
cp "$T/report.txt" "$RET/"
# The device tool returns few files: the logs go in one tarball.
(cd "$RET" && tar czf "$T/logs.tar.gz" --exclude=logs.tar.gz --exclude=report.txt --exclude=results.jsonl --exclude=env.txt . &&
        mv "$T/logs.tar.gz" . &&
        find . -maxdepth 1 -type f ! -name logs.tar.gz ! -name report.txt ! -name results.jsonl ! -name env.txt -delete)
rm -rf "$T"
cat "$RET/report.txt"
