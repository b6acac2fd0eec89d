#!/bin/bash
# Access heat through the shared heat table: a fake engine reads a window
# of its oldest allocation through kernel launches and never hints; the
# daemon learns of it only from the table's counters, and promotes that
# window over newer, untouched memory under a budget that cannot hold all.
# With KVTIER_HEAT=off the same run leaves the window out of VRAM.
. "$(dirname "$0")/lib.sh"

ARGS="--regions 4 --region-size 64M --window 16M --steps 50 --step-ms 15"

# run_polled NAME: the engine under the shim while kvtierctl polls; prints
# the VRAM of the engine's first region in the last poll of its decode
# (early polls are skipped: while the first region is alone, the daemon
# promotes it whatever its heat).
run_polled() {
        local name="$1" last=0 v
        run_engine "$name" $ARGS &
        local engine=$!
        while kill -0 $engine 2>/dev/null; do
                v=$(status_json 2>/dev/null |
                    jq 'if ([.clients[].regions | length] | max // 0) == 4
                        then [.clients[].regions[0].vram_bytes] | max else empty end' 2>/dev/null)
                [ -n "$v" ] && last=$v
                sleep 0.02
        done
        wait $engine || { diag "engine $name failed:"; diag "$(cat "$TMP/$name.out")"; }
        echo "$last"
}

write_config 64M
check "kvtierd starts" start_daemon

hot=$(ENGINE_ENV="KVTIER_HEAT=launch" run_polled launch)
check_gt "launch heat: the touched window of the oldest region is in VRAM at the end" "$hot" $((8 << 20))
check "launch heat: pattern intact" grep -q "mismatched words 0" "$TMP/launch.out"

hot=$(ENGINE_ENV="KVTIER_HEAT=launch FAKE_ENGINE_LAUNCH=driver" run_polled driver)
check_gt "cuLaunchKernel heat: the window is in VRAM at the end" "$hot" $((8 << 20))

cold=$(ENGINE_ENV="KVTIER_HEAT=off" run_polled off)
check_le "without heat the window is out of VRAM at the end (newer regions rank first)" "$cold" 0

cold=$(ENGINE_ENV="KVTIER_HEAT=launch FAKE_ENGINE_LAUNCH=direct" run_polled direct)
check_le "kernels not launched through the hooks give no heat" "$cold" 0

check "no peer was dropped for its heat table" [ "$(grep -c 'heat table' "$TMP/kvtierd.log")" -eq 0 ]

# The trace recorder: format, order, bounds.
ENGINE_ENV="KVTIER_HEAT=launch KVTIER_TRACE=$TMP/engine.trace" run_engine traced $ARGS; rc=$?
check "traced run exits 0" [ $rc -eq 0 ]
check "trace starts with its magic line" [ "$(head -1 "$TMP/engine.trace")" = "kvtier-trace 1" ]
check "trace is well formed (R before A, chunks in range, times non-decreasing, F after A)" awk '
        /^#/ || NR == 1 { next }
        $1 == "R" { if (NF != 3 || ($2 in n)) exit 1; n[$2] = $3; next }
        $1 == "A" { if (NF != 5 || !($3 in n) || ($3 in freed) || $2 < t || $4 + $5 > n[$3] || $5 < 1) exit 1;
                    t = $2; a++; next }
        $1 == "F" { if (NF != 3 || !($3 in n) || $2 < t) exit 1; t = $2; freed[$3] = 1; f++; next }
        { exit 1 }
        END { if (a < 50 || f < 1) exit 1 }' "$TMP/engine.trace"
check_gt "trace records the accesses" "$(grep -c '^A ' "$TMP/engine.trace")" 49

check "kvtierd stops cleanly" stop_daemon
done_testing
