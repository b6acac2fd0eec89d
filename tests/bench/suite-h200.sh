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
# KVT_RUNS lists the runs by name (runtag below; a default set otherwise):
#   paged_kv.py: a 16 GiB pool (8 layers, 64 sessions of 256 MiB, one
#     tensor per layer's K or V, or one for all: onepool), batch 4 (1 GiB
#     read a step), 4 GiB budget, the sessions drawn from N of them (the
#     hot set: 8 = half the budget, 16 = all of it, 64 = the whole pool);
#     all-VRAM, zero-copy, kvtier, the engine-side offload (a cache of 16
#     sessions), kvtier without pressure (100 GiB budget)
#   long_context.py: 16 layers, 32K context, 64 new tokens, budget 1G (KV
#     2 GiB): DynamicCache or StaticCache all-VRAM, kvtier, no pressure; HF's
#     offloaded cache
#   two engines under one kvtierd and one 4 GiB budget: paged_kv.py with an
#     8 GiB pool and a 1.5 GiB hot set (6 sessions) each; [client.hi] (uid 0,
#     priority 7) and [client.lo] (gid 4242, priority 0, quota 1G): hi all
#     VRAM, hi alone under the daemon, hi while lo runs; references with
#     both plain at once: two-pairvram (both all-VRAM), two-pairzerocopy
#     (lo reads its pool from host memory)
# KVT_STEP_LOG=1: the paged runs also write each step's wall time
#   (paged_kv.py --step-log: it waits for every step) to steps-TAG.txt
#   in the logs, to see how a run's steps move as kvtier learns; the
#   two-engine pairs, each engine's to steps-TAG-hi.T.txt and -lo.T.txt
#   (T the second it started), to see whether hi's slow steps come with lo's.
# KVT_STATUS_JSON=1: each poll of the daemon's status (every KVT_POLL_S
#   seconds, default 2; the two-engine pairs' every 0.5 s) also saves status
#   --json as status-TAG.N.json (a run repeated in one suite, TAG.rK for
#   its K-th: status-TAG.r2.N.json);
#   with KVT_DAEMON_TS=1 (kvtierd.log's lines after the wall clock) and
#   KVT_DAEMON_EXTRA='[daemon]\nlog_level=debug' (its orders named),
#   tests/bench/residency-report.py DIR TAG reads where a paged run kept
#   its hot and cold KV, and what the orders moved in each phase.
# Results: one JSON line a run in $OUT/results.jsonl; a table last
# (suite-report.py).  Never more managed memory than ~20 GiB at once.
set -u
C=$(cd "$(dirname "$0")" && pwd)
. "$C/bench-lib.sh"
bench_setup results.jsonl

nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader | tee "$RET/gpu.txt"
echo "binaries from commit $(cat "$C/COMMIT" 2>/dev/null || echo unknown)" | tee -a "$RET/gpu.txt"

# poll_tag TAG: sets PTAG to TAG the first time, TAG.rK for its K-th run
# in this suite: what names a run's status polls, so that a repeat keeps
# its own.
declare -A RUNS_OF
poll_tag() {
        RUNS_OF[$1]=$(( ${RUNS_OF[$1]:-0} + 1 ))
        PTAG=$1
        if [ "${RUNS_OF[$1]}" -gt 1 ]; then PTAG=$1.r${RUNS_OF[$1]}; fi
}

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
                echo "== $tag" >>"$RET/kvtierd.log" # residency-report.py finds its run's lines so
                bench_budget_daemon "$budget" || return
                poll_tag "$tag"
                (n=0; while sleep "${KVT_POLL_S:-2}"; do
                        "$CTL" -s "$SOCK" status >>"$RET/status-$tag.txt" 2>&1
                        if [ -n "${KVT_STATUS_JSON:-}" ]; then
                                "$CTL" -s "$SOCK" status --json >"$RET/status-$PTAG.$n.json" 2>/dev/null
                                n=$((n + 1))
                        fi
                done) &
                local poll=$!
                LD_PRELOAD=$C/libkvtier.so KVTIER_SOCKET=$SOCK "$@" >"$T/out" 2>>"$RET/runs.log"
                rc=$?
                kill $poll 2>/dev/null
                "$CTL" -s "$SOCK" status --json >"$RET/status-$tag.json" 2>/dev/null
                "$CTL" -s "$SOCK" status >>"$RET/status-$tag.txt" 2>&1
                bench_stop_daemon
        fi
        cat "$T/out" >>"$RET/runs.log"
        bench_record "$tag" "$rc" "$t0" "$(tail -n 1 "$T/out")"
}

# The two-engine runs: hi and lo, each an 8 GiB pool with 6 hot sessions.
TWO="python3 $C/paged_kv.py --sessions 32 --layers 8 --batch 4 --hot 6 --warmup-turns 1 --bound-budget 4G"
TWO_CONF='[client.lo]\ngid = 4242\npriority = 0\nquota = 1G\n[client.hi]\nuid = 0\npriority = 7'
# KVT_TWO_EXTRA: more configuration lines for the two-engine daemon (a
# *tuned* run, such as '\n[gpu]\nyield_percent = 3').
TWO_CONF="$TWO_CONF${KVT_TWO_EXTRA:-}"
# KVT_HI_TURNS: hi's measured turns, alone and beside lo (4 by default: 256
# steps, about half a second, shorter than the daemon's protection and probe
# windows take to settle; 16 measures 2-3 s of it).
HI_TURNS=${KVT_HI_TURNS:-4}

# vram_peaks FILE [PREFIX]: every 0.5 s until killed, the VRAM each client
# section holds (status), the most seen so far written to FILE as JSON;
# with PREFIX, each status also to PREFIX.N.json (KVT_STATUS_JSON: where
# each engine's chunks were).
vram_peaks() {
        # exec: the background job's pid is the poller's own, so that kill stops it
        exec python3 - "$CTL" "$SOCK" "$1" "${2:-}" <<'EOF'
import json, subprocess, sys, time
ctl, sock, path, prefix = sys.argv[1:5]
peak = {}
n = 0
while True:
    try:
        out = subprocess.run([ctl, "-s", sock, "status", "--json"], capture_output=True, timeout=5).stdout
        st = json.loads(out)
        if prefix:
            with open(f"{prefix}.{n}.json", "wb") as f:
                f.write(out)
            n += 1
        for c in st.get("clients", []):
            k = c.get("section") or "none"
            peak[k] = max(peak.get(k, 0), c.get("vram_bytes", 0))
        with open(path, "w") as f:
            json.dump(peak, f)
    except Exception:
        pass
    time.sleep(0.5)
EOF
}

# run_pair [vram|zerocopy]: lo (gid 4242, so [client.lo]) started first
# with more turns than hi, hi started once lo's measured turns started; both
# lines appended, with the most VRAM each section held while they ran.  The
# references for "within 10% of alone" run both plain at once (no shim, no
# daemon): vram, both all-VRAM (what sharing the GPU costs hi without
# kvtier); zerocopy, lo reading its pool from host memory as its kernels
# would with the KV it cannot hold (what lo's link-bound kernels cost hi).
# Plain all-VRAM lo runs 10 times the turns: its steps are that much faster.
run_pair() {
        local t0 lo_pid hi_rc lo_rc poll="" peaks=$T/peaks.json tag=two-pair${1:-} pre=() lo=(--turns 16) hist=()
        rm -f "$peaks"
        echo "== $tag" | tee -a "$RET/runs.log" "$RET/kvtierd.log"
        case "${1:-}" in
        "")
                KVT_DAEMON_EXTRA=$TWO_CONF bench_budget_daemon 4G || return
                pre=(env LD_PRELOAD=$C/libkvtier.so KVTIER_SOCKET=$SOCK) ;;
        vram) lo=(--turns 160) ;;
        zerocopy) lo=(--turns 24 --pool zerocopy) ;;
        esac
        t0=$(date +%s.%N)
        [ -n "${KVT_STEP_LOG:-}" ] && hist=(--step-log "$RET/steps-$tag-SEC.${t0%.*}.txt")
        if [ -z "${1:-}" ]; then
                poll_tag "$tag"
                vram_peaks "$peaks" ${KVT_STATUS_JSON:+"$RET/status-$PTAG"} &
                poll=$!
        fi
        # under kvtier, each engine's shim statistics at its exit (lo's paced launches,
        # both engines' CUPTI records, those dropped too)
        "${pre[@]}" ${pre:+KVTIER_DEBUG=heat-stats=$RET/heat-$tag-lo.$(date +%s).json} python3 -c \
                'import os, sys; os.setgroups([]); os.setgid(4242); os.execvp(sys.argv[1], sys.argv[1:])' \
                $TWO "${lo[@]}" "${hist[@]/SEC/lo}" --seed 2 >"$T/lo.out" 2>"$T/lo.err" &
        lo_pid=$!
        for _ in $(seq 1200); do grep -q "measured turns start" "$T/lo.err" 2>/dev/null && break; sleep 0.1; done
        grep -q "measured turns start" "$T/lo.err" || echo "$tag: hi starts before lo's measured turns" | tee -a "$RET/runs.log"
        "${pre[@]}" ${pre:+KVTIER_DEBUG=heat-stats=$RET/heat-$tag-hi.$(date +%s).json} $TWO --turns "$HI_TURNS" "${hist[@]/SEC/hi}" \
                >"$T/hi.out" 2>>"$RET/runs.log"
        hi_rc=$?
        grep -q "measured turns end" "$T/lo.err" && echo "lo's measured turns ended before hi's" | tee -a "$RET/runs.log"
        wait $lo_pid
        lo_rc=$?
        if [ -n "$poll" ]; then
                kill $poll 2>/dev/null
                "$CTL" -s "$SOCK" status >>"$RET/status-$tag.txt" 2>&1
                bench_stop_daemon
        fi
        cat "$T/lo.err" >>"$RET/runs.log"
        for sec in hi lo; do
                bench_record "$tag-$sec" "$([ $sec = hi ] && echo $hi_rc || echo $lo_rc)" "$t0" \
                        "$(tail -n 1 "$T/$sec.out")" "$(python3 - "$peaks" "$sec" <<'EOF'
import json, sys
try:
    pk = json.load(open(sys.argv[1]))
except Exception:
    pk = {}
print(json.dumps({"vram_peak_bytes": pk.get(sys.argv[2]), "peaks": pk}))
EOF
)"
        done
}

PAGED="python3 $C/paged_kv.py --sessions 64 --layers 8 --batch 4 --turns 4 --warmup-turns 1 --bound-budget 4G"
# KVT_LONG_EXTRA: more long_context.py options for every long run, words
# split at commas (ab-h200.sh's VARS split at spaces): --op-times, say.
LONG_EXTRA=${KVT_LONG_EXTRA:-}
LONG="python3 $C/long_context.py --context 32768 --new 64 --layers 16 ${LONG_EXTRA//,/ }"

# runtag TAG: one run by its name:
#   paged-LAYOUT-hN-WHAT: LAYOUT contiguous, interleaved or onepool; N
#     sessions drawn (64 = all); WHAT vram, zerocopy, kvtier, offload, nopress,
#     hint (kvtier with the engine's hints a turn ahead: --hint --hint-ahead 64),
#     kvtierwarm (kvtier measured after 12 warm-up turns, not 1; vramwarm its
#     all-VRAM reference)
#   long-CACHE-vram, long-CACHE-vram2 (a second all-VRAM run: does the
#     reference repeat itself?), long-CACHE-kvtier, long-CACHE-nopress (CACHE
#     dynamic, static), long-dynamic-hfoffload; each saves its logits, which
#     long_context.py compare sets against the first all-VRAM run's
runtag() {
        local tag=$1 parts
        # split on '-' without touching IFS: the runs below split words (and
        # run_pair's $(seq ...)) by the default IFS, newlines included
        IFS=- read -r -a parts <<<"$tag"
        set -- "${parts[@]}"
        case "$1" in
        paged)
                local layout=$2 lay h="" what=$4
                lay="--layout $layout"
                [ "$layout" = onepool ] && lay="--layout contiguous --one-pool"
                [ -n "${KVT_STEP_LOG:-}" ] && lay="$lay --step-log $RET/steps-$tag.txt"
                [[ $3 == h* ]] && [ "${3#h}" != 64 ] && h="--hot ${3#h}"
                case "$what" in
                vram) run "$tag" - $PAGED $lay $h ;;
                zerocopy) run "$tag" - $PAGED $lay $h --pool zerocopy ;;
                kvtier) run "$tag" 4G $PAGED $lay $h ;;
                # the same measured after 12 warm-up turns instead of 1: how far
                # the defaults get once they have seen the workload for a while
                kvtierwarm) run "$tag" 4G $PAGED $lay $h --warmup-turns 12 ;;
                vramwarm) run "$tag" - $PAGED $lay $h --warmup-turns 12 ;;
                offload) run "$tag" - $PAGED $lay $h --pool offload --offload-slots 16 ;;
                nopress) run "$tag" 100G $PAGED $lay $h ;;
                hint) run "$tag" 4G $PAGED $lay $h --hint --hint-ahead 64 ;;
                esac ;;
        long)
                local lg="--logits $T/logits-$tag.pt"
                case "$3" in
                vram|vram2) run "$tag" - $LONG --cache "$2" $lg ;;
                kvtier) run "$tag" "${KVT_LONG_BUDGET:-1G}" $LONG --cache "$2" $lg ;;
                hfoffload) run "$tag" - $LONG --cache offloaded $lg ;;
                nopress) run "$tag" 100G $LONG --cache "$2" $lg ;;
                esac ;;
        two)
                case "$2" in
                vram) run "$tag" - $TWO --turns "$HI_TURNS" ;;
                alone) KVT_DAEMON_EXTRA=$TWO_CONF run "$tag" 4G $TWO --turns "$HI_TURNS" ;;
                pair) run_pair ;;
                pairvram) run_pair vram ;;
                pairzerocopy) run_pair zerocopy ;;
                esac ;;
        *) echo "unknown run $tag" ;;
        esac
}

for tag in ${KVT_RUNS:-paged-contiguous-h8-vram paged-contiguous-h8-zerocopy paged-contiguous-h8-kvtier paged-contiguous-h8-offload paged-contiguous-h64-vram paged-contiguous-h64-kvtier paged-contiguous-h64-offload paged-interleaved-h64-vram paged-interleaved-h64-zerocopy paged-interleaved-h64-kvtier long-dynamic-vram long-dynamic-kvtier long-dynamic-hfoffload}; do
        runtag "$tag"
done
for ref in "$T"/logits-long-*-vram.pt; do
        [ -f "$ref" ] || continue
        cache=${ref#"$T"/logits-long-}; cache=${cache%-vram.pt}
        others=$(ls "$T"/logits-long-"$cache"-*.pt "$T"/logits-long-dynamic-hfoffload.pt 2>/dev/null | grep -v -- "-vram.pt" | sort -u)
        [ "$cache" = dynamic ] || others=$(grep -v hfoffload <<<"$others")
        [ -n "$others" ] && python3 "$C/long_context.py" compare "$ref" $others 2>&1 | sed "s|$T/||g" >>"$T/compare.txt"
done
python3 "$C/suite-report.py" "$R" >"$T/report.txt"
cat "$T/compare.txt" >>"$T/report.txt" 2>/dev/null
cp "$T/report.txt" "$RET/"
# The device tool returns at most 8 files: the logs go in one tarball.
(cd "$RET" && tar czf "$T/logs.tar.gz" --exclude=logs.tar.gz --exclude=report.txt --exclude=results.jsonl --exclude=gpu.txt . &&
        mv "$T/logs.tar.gz" . &&
        find . -maxdepth 1 -type f ! -name logs.tar.gz ! -name report.txt ! -name results.jsonl ! -name gpu.txt -delete)
cat "$RET/report.txt"
