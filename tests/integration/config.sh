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

# A misspelt section warns as an unknown key does, naming the section once.
try_conf "[deamon]\ntick_ms = 5\nlog_level = debug\n[gpu]\nvram_budget = 1G\n"
section_warned() { [ $rc -eq 0 ] && [ "$(grep -c "kvtierd.conf:1: unknown section \[deamon\] (did you mean \[daemon\]?)" <<<"$out")" -eq 1 ]; }
check "a misspelt section warns once with file:line and a suggestion, and the daemon runs" section_warned

# --check-config: strict, every problem as FILE:LINE: at the start of a line, exit 2.
printf '[deamon]\ntick_ms = 5\n[policy]\nnmae = lru\n[gpu]\nvram_budget = 17T\n[daemon]\ntick_ms = 0\n' >"$conf"
"$KVTIERD" --check-config -c "$conf" >"$TMP/out" 2>&1; rc=$?
out=$(cat "$TMP/out")
check "--check-config exits 2 on problems" [ $rc -eq 2 ]
check "--check-config names the misspelt section by file:line" grep -qx "$conf:1: unknown section \[deamon\] (did you mean \[daemon\]?)." "$TMP/out"
check "--check-config names the unknown key by file:line" grep -qx "$conf:4: unknown key \[policy\] nmae (did you mean name?)." "$TMP/out"
check "--check-config names the out-of-range budget" grep -qx "$conf:6: \[gpu\] vram_budget = 17T is out of range 0..16T." "$TMP/out"
check "--check-config goes on past the first bad value" grep -q "^$conf:8: \[daemon\] tick_ms = 0 is out of range 1..10000" "$TMP/out"
"$KVTIERD" --check-config -c "$conf" -o policy.windwo=1G >"$TMP/out" 2>&1; rc=$?
check "--check-config checks -o too" rc_and $((rc != 2)) grep -q "^-o policy.windwo=1G: unknown key \[policy\] windwo (did you mean window?)" "$TMP/out"
printf '[daemon]\ntick_ms = 5\n[gpu.1]\nvram_budget = 12G\n' >"$conf"
"$KVTIERD" --check-config -c "$conf" >"$TMP/out" 2>&1; rc=$?
check "--check-config exits 0 on a valid file and says so" rc_and $rc grep -qx "$conf: valid." "$TMP/out"
"$KVTIERD" --check-config -c "$top_builddir/systemd/kvtierd.conf" >"$TMP/out" 2>&1; rc=$?
check "the kvtierd.conf that make install puts in place passes --check-config" rc_and $rc grep -q "valid." "$TMP/out"
[ $rc -eq 0 ] || diag "$(cat "$TMP/out")"
"$KVTIERD" --check-config -c "$TMP" >"$TMP/out" 2>&1; rc=$?
check "--check-config of a directory exits 2" rc_and $((rc != 2)) grep -q "Is a directory" "$TMP/out"

# -c naming a directory or a file kvtierd cannot read: an error, not the built-in defaults.
timeout -k 2 5 "$KVTIERD" -c "$TMP" -s "$SOCK" >"$TMP/out" 2>&1; rc=$?
check "-c DIRECTORY exits 2 with a clear message" \
        rc_and $((rc != 2)) grep -q "Failed to read config file $TMP: Is a directory" "$TMP/out"
printf '[daemon]\ntick_ms = 5\n' >"$TMP/secret.conf"
chmod 600 "$TMP/secret.conf"
chmod 755 "$TMP"
if [ "$(id -u)" -eq 0 ] && setpriv --reuid=65534 --regid=65534 --clear-groups true 2>/dev/null; then
        timeout -k 2 5 setpriv --reuid=65534 --regid=65534 --clear-groups "$KVTIERD" -c "$TMP/secret.conf" \
                -s "$TMP/nobody.sock" >"$TMP/out" 2>&1; rc=$?
        check "-c FILE that cannot be read exits 2 with a clear message" \
                rc_and $((rc != 2)) grep -q "Failed to open config file $TMP/secret.conf: Permission denied" "$TMP/out"
else
        ok "# SKIP -c FILE that cannot be read (needs root to run kvtierd as nobody)"
fi

# --print-config: every section once, the configured [gpu.N] and [client.NAME]
# among them, and what it prints is a valid configuration.
printf '[gpu.1]\nvram_budget = 12G\n[client.vllm]\nuid = 0\npriority = 3\n[numa.0]\nhost_budget = 1G\n[policy]\nname = lru\n' >"$conf"
"$KVTIERD" --print-config -c "$conf" >"$TMP/print.conf" 2>"$TMP/out"; rc=$?
check "--print-config exits 0" [ $rc -eq 0 ]
check "--print-config prints each section once" \
        [ "$(grep '^\[' "$TMP/print.conf" | sort | uniq -d | wc -l)" -eq 0 ]
for sec in daemon gpu gpu.1 policy host numa.0 capture client.vllm; do
        check "--print-config prints [$sec]" grep -qx "\[$sec\]" "$TMP/print.conf"
done
check "--print-config shows the [gpu.1] budget" \
        [ "$(awk '/^\[/ { s = $0 } s == "[gpu.1]" && $1 == "vram_budget" { print $3 }' "$TMP/print.conf")" = 12G ]
"$KVTIERD" --check-config -c "$TMP/print.conf" >"$TMP/out" 2>&1; rc=$?
check "what --print-config prints passes --check-config" rc_and $rc grep -q "valid" "$TMP/out"
[ $rc -eq 0 ] || diag "$(cat "$TMP/out")"

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
