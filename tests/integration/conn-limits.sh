#!/bin/bash
# Issue 18, rows 1, 2 and 8: what one ordinary user's connections may take
# of kvtierd.  Connections that never say HELLO fill at most that user's
# share and are closed at the HELLO deadline; with the descriptors gone,
# accepts pause instead of spinning; control peers that never read their
# replies are closed.  Root's kvtierctl and other users' engines keep
# being served throughout.  The attacker is uid 65534 (needs root).
. "$(dirname "$0")/lib.sh"
HOSTILE="${KVT_HOSTILE:-$top_builddir/tests/integration/hostile}"

if [ "$(id -u)" -ne 0 ]; then echo "1..0 # SKIP needs root to act as another user"; exit 0; fi

start_open() { start_daemon && chmod 0755 "$TMP" && chmod 0666 "$SOCK"; }
conns() { status_json | jq -r ".connections.$1"; }
# cpu_ticks PID: user + system clock ticks the process has used.
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
# wait_for FILE PATTERN: up to 10 s for PATTERN in FILE.
wait_for() {
        for _ in $(seq 200); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.05; done
        diag "no '$2' in $1: $(cat "$1" 2>/dev/null)"; return 1
}
status_within() { timeout "$1" "$KVTIERCTL" -s "$SOCK" status --json >/dev/null; }
log_lines() { wc -l <"$TMP/kvtierd.log"; }

# Row 1: 2000 connections of uid 65534 that never send HELLO.
write_config 256M "[daemon]" "hello_timeout_ms = 1000"
check "kvtierd starts" start_open
lines0=$(log_lines)
"$HOSTILE" --as 65534 --hold 3000 "$SOCK" conns 2000 >"$TMP/row1.out" 2>&1 &
attack=$!
wait_for "$TMP/row1.out" opened
check "row 1: root's kvtierctl status is served during the attack" status_within 3
run_engine good --regions 1 --region-size 64M --window 32M --steps 20 --step-ms 5; rc=$?
check "row 1: root's engine runs under the shim, captured" rc_and $rc [ "$(stat_of good managed_allocs)" -ge 1 ]
check "row 1: another user's client gets its WELCOME" sh -c "'$HOSTILE' --as 65533 '$SOCK' hello other | grep -q welcome"
check_le "row 1: uid 65534 holds at most max_connections_per_uid (128)" "$(conns open)" 129
check_gt "row 1: the rest were refused" "$(conns refused)" 1000
wait $attack
check "row 1: every connection of the attack was closed (HELLO deadline or refusal)" \
        grep -q "closed \([0-9]*\) of \1$" "$TMP/row1.out"
check_gt "row 1: the HELLO deadline closed the accepted ones" "$(conns hello_timeouts)" 127
check_le "row 1: what the attack logged is rate-limited (lines)" $(($(log_lines) - lines0)) 400
check "row 1: a refusal says which limit" grep -q "Refusing a connection from pid .* (uid 65534.*max_connections_per_uid" \
        "$TMP/kvtierd.log"
check "kvtierd stops cleanly" stop_daemon

# Row 2: the same with few descriptors (LimitNOFILE=64): accepts pause, not spin.
write_config 256M "[daemon]" "hello_timeout_ms = 1000" "max_connections_per_uid = 1000"
: >"$TMP/kvtierd.log"
DAEMON_WRAP="prlimit --nofile=64:64" check "kvtierd starts with 64 descriptors" start_open
check "the descriptor limit is warned of at start" grep -q "RLIMIT_NOFILE is 64" "$TMP/kvtierd.log"
lines0=$(log_lines)
t0=$(cpu_ticks "$DAEMON_PID")
"$HOSTILE" --as 65534 --hold 3000 "$SOCK" conns 300 >"$TMP/row2.out" 2>&1 &
attack=$!
wait_for "$TMP/row2.out" opened
check "row 2: root's kvtierctl status is served while descriptors are out (the spare one)" status_within 2
wait $attack
sleep 0.5
t1=$(cpu_ticks "$DAEMON_PID")
# 3.5 s of attack is 350 ticks at 100 Hz; a spinning accept loop uses them all.
check_le "row 2: kvtierd used under a third of a CPU (ticks)" $((t1 - t0)) 120
check_le "row 2: the accept failures are rate-limited (lines)" \
        "$(grep -c "Failed to accept a connection" "$TMP/kvtierd.log")" 10
check_gt "row 2: accepts paused" "$(conns accept_pauses)" 0
check_le "row 2: what the attack logged in all (lines)" $(($(log_lines) - lines0)) 400
check "row 2: kvtierd serves once the attack is over" status_within 3
check "kvtierd stops cleanly" stop_daemon

# Row 8: control peers that ask for status and never read the replies.
write_config 256M "[daemon]" "send_timeout_ms = 1500"
check "kvtierd starts" start_open
"$HOSTILE" --as 65534 --hold 3500 "$SOCK" noread 50 >"$TMP/row8.out" 2>&1 &
attack=$!
wait_for "$TMP/row8.out" asked
check "row 8: root's kvtierctl status is served meanwhile" status_within 3
wait $attack
check "row 8: all 50 were closed for not reading" grep -q "closed 50 of 50" "$TMP/row8.out"
check_gt "row 8: counted as stalled" "$(conns dropped_stalled)" 49
check "row 8: the drop says why" grep -q "it read nothing for 1500 ms (\[daemon\] send_timeout_ms)" "$TMP/kvtierd.log"
check "kvtierd stops cleanly" stop_daemon
done_testing
