#!/bin/bash
# kvtierd's command line and configuration: bad input is a clear error that
# names file:line and exits 2; warnings continue; budgets resolve as written.
. "$(dirname "$0")/lib.sh"

conf="$TMP/kvtierd.conf"
# try_conf TEXT: runs kvtierd on TEXT until it is ready or exits; sets rc and out.
try_conf() {
        printf '%b' "$1" >"$conf"
        timeout -k 2 5 "$KVTIERD" -c "$conf" -s "$SOCK" >"$TMP/out" 2>&1 &
        local pid=$!
        for _ in $(seq 40); do
                kill -0 $pid 2>/dev/null || break
                "$KVTIERCTL" -s "$SOCK" status >/dev/null 2>&1 && { kill -TERM $pid; break; }
                sleep 0.05
        done
        wait $pid; rc=$?
        out=$(cat "$TMP/out")
}
# rejected DESC TEXT PATTERN: exit 2 and a message matching PATTERN.
rejected() {
        try_conf "$2"
        if [ $rc -eq 2 ] && grep -qE "$3" <<<"$out"; then ok "$1"; else not_ok "$1"; diag "rc=$rc: $out"; fi
}

rejected "tick_ms = 0 is out of range, named by file:line" "[daemon]\ntick_ms = 0\n" "kvtierd.conf:2"
rejected "a budget that is not a size" "[gpu]\nvram_budget = 12Q\n" "kvtierd.conf:2.*vram_budget"
rejected "a percentage over 100" "[gpu]\nvram_budget = 150%\n" "kvtierd.conf:2"
rejected "a GPU section out of range" "[gpu.64]\nvram_budget = 1G\n" "gpu.64"
rejected "an unknown policy" "[policy]\nname = magic\n" "kvtierd.conf:2.*name"
rejected "a syntax error" "[daemon\n" "kvtierd.conf:1"

try_conf "[daemon]\nfrobnicate = 1\n[gpu]\nvram_budget = 1G\n"
warned_and_ran() { [ $rc -eq 0 ] && grep -q "kvtierd.conf:2.*unknown key" <<<"$out"; }
check "an unknown key warns with file:line and the daemon runs" warned_and_ran

"$KVTIERD" -c "$TMP/absent.conf" >"$TMP/out" 2>&1; rc=$?
check "a missing -c file exits 2" [ $rc -eq 2 ]
"$KVTIERD" --no-such-option >/dev/null 2>&1; rc=$?
check "an unknown option exits 2" [ $rc -eq 2 ]
"$KVTIERD" --help >"$TMP/out" 2>&1; rc=$?
helped() { [ $rc -eq 0 ] && grep -qi "exit" "$TMP/out"; }
check "--help exits 0 and documents the exit codes" helped

# A percentage resolves against the GPU size the first client reports.
write_config 25%
check "kvtierd starts with a 25% budget" start_daemon
ENGINE_ENV="FAKECUDA_MEM=1G" run_engine pct --regions 2 --region-size 64M --window 16M --steps 10 --step-ms 20 &
engine=$!
budget=0
for _ in $(seq 100); do
        budget=$(status_json | jq '[.gpus[] | select(.device == 0) | .budget_bytes] | max // 0')
        [ "$budget" -gt 0 ] && break
        sleep 0.02
done
wait $engine
check "25% of a 1 GiB GPU is 256 MiB" [ "$budget" -eq $((256 << 20)) ]

"$KVTIERD" -c "$TMP/kvtierd.conf" >"$TMP/second.out" 2>&1; rc=$?
check "a second daemon on a live socket exits 1" [ $rc -eq 1 ]
check "the first daemon still serves" eval 'status_json >/dev/null'
check "kvtierd stops cleanly" stop_daemon
check "the socket is gone after a clean stop" [ ! -e "$SOCK" ]

"$KVTIERCTL" -s "$SOCK" status >/dev/null 2>&1; rc=$?
check "kvtierctl without a daemon exits 1" [ $rc -eq 1 ]
"$KVTIERCTL" frobnicate >/dev/null 2>&1; rc=$?
check "kvtierctl with an unknown command exits 2" [ $rc -eq 2 ]
done_testing
