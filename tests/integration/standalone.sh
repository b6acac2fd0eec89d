#!/bin/bash
# KVTIER_STANDALONE=1: no service.  The shim starts a kvtierd of the engine's
# own as a child (shim/standalone.c) and connects to it as to any daemon; the
# daemon takes KVTIER_STANDALONE=BYTES as its budget and ends with the engine.
. "$(dirname "$0")/lib.sh"
ARGS="--regions 4 --region-size 64M --window 32M --steps 40 --step-ms 15 --hint"
BUDGET=$((64 << 20))
# The private directory goes under $XDG_RUNTIME_DIR: here, inside $TMP.
XDG="$TMP/xdg"
mkdir -m 0700 "$XDG"
SA_ENV="KVTIER_STANDALONE=1 KVTIER_LOG=info XDG_RUNTIME_DIR=$XDG KVTIER_SOCKET=$TMP/none.sock"
intact() { grep -q "mismatched words 0" "$TMP/$1.out" || { diag "$(cat "$TMP/$1.out")"; false; }; }
# What the shim logged of the daemon it started in run NAME.
daemon_pid() { sed -n 's/^kvtier: Started kvtierd (pid \([0-9]*\)) on .*/\1/p' "$TMP/$1.out" | head -1; }
daemon_sock() { sed -n 's/^kvtier: Started kvtierd (pid [0-9]*) on \(.*\)\.$/\1/p' "$TMP/$1.out" | head -1; }
# proc_field PID N: field N of /proc/PID/stat (3 state, 4 ppid, 5 pgrp).
proc_field() { sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f$(($2 - 2)); }
# gone PID: within 10 s, no such process, or a zombie its new parent has not reaped yet.
gone() {
        for _ in $(seq 200); do
                [ -e "/proc/$1" ] && [ "$(proc_field "$1" 3)" != Z ] || return 0
                sleep 0.05
        done
        diag "process $1 is still there: $(tr '\0' ' ' <"/proc/$1/cmdline")"
        false
}
no_private_dirs() { [ -z "$(ls -A "$XDG")" ] || { diag "left in $XDG: $(ls -A "$XDG")"; false; }; }
# wait_started NAME: until the shim of run NAME logged its daemon (at most 10 s).
wait_started() {
        for _ in $(seq 200); do [ -n "$(daemon_pid "$1")" ] && return 0; sleep 0.05; done
        diag "no daemon started: $(cat "$TMP/$1.out")"
        false
}

# The engine runs in the background, so that the daemon can be seen at work;
# fd 7 is open in the engine without close-on-exec, and must not reach it.
ENGINE_ENV="$SA_ENV KVTIER_STANDALONE=64M" \
        run_engine standalone $ARGS --steps 100 --max-vram $BUDGET 7>"$TMP/engine-fd7" &
engine=$!
wait_started standalone
dpid=$(daemon_pid standalone)
dsock=$(daemon_sock standalone)
status=
for _ in $(seq 100); do
        s=$("$KVTIERCTL" -s "$dsock" status --json 2>/dev/null) && status=$s
        [ -n "$status" ] && [ "$(echo "$status" | jq '.migrations.orders_done')" -gt 0 ] && break
        sleep 0.05
done
[ -n "$status" ] || status='{}'
client_pid=$(echo "$status" | jq '.clients[0].pid // 0')
check "standalone: kvtierctl reaches the private daemon, which has the engine as its one client" \
        [ "$(echo "$status" | jq '[.clients[] | select(.name == "kv-engine")] | length')" -eq 1 ]
check "standalone: the daemon is a child of the engine" [ "$(proc_field "$dpid" 4)" = "$client_pid" ]
check "standalone: the daemon runs in a process group of its own" \
        [ "$(proc_field "$dpid" 5)" != "$(proc_field "$client_pid" 5)" ]
check "standalone: KVTIER_STANDALONE=BYTES is the daemon's budget" \
        [ "$(echo "$status" | jq '.gpus[0].budget_bytes')" -eq $BUDGET ]
private_dir() { [ "$(stat -c %a "$(dirname "$dsock")")" = 700 ] && [ "$(dirname "$(dirname "$dsock")")" = "$XDG" ]; }
check "standalone: the daemon's socket is in a private directory of mode 0700 under XDG_RUNTIME_DIR" private_dir
check "standalone: the daemon's environment has no LD_PRELOAD" \
        bash -c "! tr '\\0' '\\n' </proc/$dpid/environ | grep -q '^LD_PRELOAD='"
check "standalone: the engine's fd 7 did not reach the daemon" \
        bash -c "! ls -l /proc/$dpid/fd | grep -q '$TMP/engine-fd7'"
wait $engine; rc=$?
check "standalone: engine exits 0 (pattern intact, VRAM within --max-vram)" rc_and $rc intact standalone
check "standalone: all four regions captured" [ "$(stat_of standalone managed_allocs)" -eq 4 ]
check_le "standalone: peak managed VRAM by the fake's counters within the budget" \
        "$(stat_of standalone managed_resident_peak_bytes)" $BUDGET
check_gt "standalone: the daemon's orders were executed" "$(echo "$status" | jq '.migrations.orders_done')" 0
check_gt "standalone: chunks were promoted to VRAM" "$(stat_of standalone h2d_bytes)" 0
check_gt "standalone: chunks were evicted to make room" "$(stat_of standalone d2h_bytes)" 0
check "standalone: the daemon logs to the engine's stderr" grep -q "^kvtierd: Client 1 connected" "$TMP/standalone.out"
check "standalone: no complaint about a missing daemon" \
        bash -c "! grep -q 'Cannot reach kvtierd\\|Lost kvtierd' '$TMP/standalone.out'"
check "standalone: the daemon exits with the engine" gone "$dpid"
check "standalone: and removes its socket and directory" no_private_dirs

captured() { [ "$(stat_of "$1" managed_allocs)" -eq "$2" ]; }
ENGINE_ENV="KVTIER_SOCKET=$TMP/none.sock" run_engine reference $ARGS; rc=$?
check "without standalone and no daemon: nothing captured (the reference)" rc_and $rc captured reference 0

# An engine that is killed gets no exit handler: the lifeline still ends the daemon.
ENGINE_ENV="$SA_ENV KVTIER_STANDALONE=64M" run_engine killed $ARGS --steps 1000 &
engine=$!
wait_started killed
dpid=$(daemon_pid killed)
kill -KILL "$(proc_field "$dpid" 4)" # the engine: the daemon's parent
wait $engine 2>/dev/null
check "engine SIGKILLed: its daemon exits" gone "$dpid"
check "engine SIGKILLed: the private directory is removed" no_private_dirs

ENGINE="$top_builddir/tests/integration/api-engine" ENGINE_ENV="$SA_ENV KVTIER_STANDALONE=64M" \
        run_engine standalone-driver --mode procaddr --regions 2 --size 64M; rc=$?
check "standalone, driver API through cuGetProcAddress: engine exits 0, data intact" rc_and $rc intact standalone-driver
check "standalone, driver API: both regions captured" captured standalone-driver 2

# fork() after CUDA is initialized: the child may reach the parent's daemon
# as a client of its own, but never starts another.
ENGINE_ENV="$SA_ENV" run_engine forked $ARGS --fork; rc=$?
check "fork: engine exits 0, pattern intact" rc_and $rc intact forked
check "fork: one daemon started" [ "$(grep -c 'Started kvtierd' "$TMP/forked.out")" -eq 1 ]
check "fork: it exits with the parent" gone "$(daemon_pid forked)"

ENGINE_ENV="$SA_ENV KVTIER_STANDALONE=lots" run_engine bad-budget $ARGS; rc=$?
check "a bad KVTIER_STANDALONE=BYTES warns" grep -q "Invalid KVTIER_STANDALONE=lots" "$TMP/bad-budget.out"
check "a bad KVTIER_STANDALONE=BYTES: engine exits 0, pattern intact" rc_and $rc intact bad-budget
check "a bad KVTIER_STANDALONE: no daemon of its own started (the value stays at 0)" \
        bash -c '! grep -q "Started kvtierd" "$1"' _ "$TMP/bad-budget.out"

# KVTIER_STANDALONE=1: the daemon's own configured budget, not a leftover.
ENGINE_ENV="$SA_ENV" run_engine own-budget $ARGS; rc=$?
own_budget() {
        captured own-budget 4 && grep -q "^kvtierd: GPU 0: VRAM budget" "$TMP/own-budget.out" &&
                ! grep -q "VRAM budget 64.0M" "$TMP/own-budget.out"
}
check "KVTIER_STANDALONE=1: engine exits 0, pattern intact" rc_and $rc intact own-budget
check "KVTIER_STANDALONE=1: all four regions tiered by the daemon, on its own budget" own_budget

# A daemon that refuses to start (a budget over [gpu] vram_budget's range):
# its error on the engine's stderr, one warning of the shim's, nothing
# captured, and no wait for the start-up timeout.
start=$(date +%s%N)
ENGINE_ENV="$SA_ENV KVTIER_STANDALONE=20T" run_engine refused $ARGS --steps 4; rc=$?
elapsed_ms=$((($(date +%s%N) - start) / 1000000))
check "daemon refuses to start: engine exits 0, pattern intact" rc_and $rc intact refused
check "daemon refuses to start: nothing captured" captured refused 0
check "daemon refuses to start: its error names the option" \
        grep -q "^kvtierd: -o gpu.vram_budget=21990232555520: .* out of range" "$TMP/refused.out"
check "daemon refuses to start: the shim warns once" [ "$(grep -c 'Cannot reach kvtierd' "$TMP/refused.out")" -eq 1 ]
check_le "daemon refuses to start: the engine was not held up (ms)" $elapsed_ms 4000
check "daemon refuses to start: it removed its socket and directory" no_private_dirs

# No kvtierd to be found: a copy of the shim with none beside it, and none
# installed in $sbindir.
mkdir -p "$TMP/alone/.libs"
cp "$SHIM" "$TMP/alone/.libs/libkvtier.so"
if [ -x "${sbindir:-/nonexistent}/kvtierd" ]; then
        for d in "exits 0, pattern intact" "nothing captured" "the shim warns once, naming what it looked for"; do
                ok "no kvtierd: $d # SKIP a kvtierd is installed in $sbindir"
        done
else
        PRELOAD="${PRELOAD%"$SHIM"}$TMP/alone/.libs/libkvtier.so" ENGINE_ENV="$SA_ENV" run_engine alone $ARGS; rc=$?
        check "no kvtierd: exits 0, pattern intact" rc_and $rc intact alone
        check "no kvtierd: nothing captured" captured alone 0
        check "no kvtierd: the shim warns once, naming what it looked for" \
                [ "$(grep -c "Cannot reach kvtierd at ${sbindir:-}/kvtierd: No such file or directory" "$TMP/alone.out")" -eq 1 ]
fi

# The private daemon shares the engine's stderr, whose reader may go away
# first: a log line is lost, not the daemon.  fd 9: a pipe with no reader.
mkfifo "$TMP/noreader"
exec 8<>"$TMP/noreader" 9>"$TMP/noreader" 8<&-
rm -f "$SOCK"
"$KVTIERD" -c /dev/null -s "$SOCK" --log-level=info 2>&9 &
DAEMON_PID=$!
exec 9>&-
serves() { for _ in $(seq 100); do status_json >/dev/null 2>&1 && return 0; sleep 0.05; done; false; }
check "kvtierd whose stderr has no reader serves" serves
sigterm_exit0() { kill -TERM "$DAEMON_PID" && wait "$DAEMON_PID"; }
check "and exits 0 on SIGTERM" sigterm_exit0
DAEMON_PID=

# kvtierd -o: the config table's validation, the option named, exit 2.
usage_error() { [ "$1" -eq 2 ] && shift && "$@"; }
for bad in gpu.vram_budgt=1G gpu.vram_budget=lots policy.name=fifo gpu.99.vram_budget=1G vram_budget=1G; do
        "$KVTIERD" -c /dev/null -o "$bad" --print-config >/dev/null 2>"$TMP/set.err"; rc=$?
        check "kvtierd -o $bad exits 2, naming it" usage_error $rc grep -q -- "-o $bad" "$TMP/set.err"
done
"$KVTIERD" -c /dev/null -o gpu.vram_budget=1G -o gpu.1.vram_budget=50% -o policy.name=lru -o gpu.vram_budget=3G \
        --print-config >"$TMP/set.conf"; rc=$?
set_applied() {
        grep -q "^vram_budget = 3G" "$TMP/set.conf" && grep -q "^name = lru" "$TMP/set.conf" &&
                grep -A3 '^\[gpu.1\]' "$TMP/set.conf" | grep -q "^vram_budget = 50%"
}
check "kvtierd -o: several, in order, sections with a number kept" rc_and $rc set_applied
"$KVTIERD" -c /dev/null --listen-fd=0 </dev/null 2>"$TMP/listen.err"; rc=$?
check "kvtierd --listen-fd on what is not a listening socket exits 2" usage_error $rc grep -q -- --listen-fd "$TMP/listen.err"
"$KVTIERD" -c /dev/null --lifeline-fd=99 2>"$TMP/lifeline.err"; rc=$?
check "kvtierd --lifeline-fd on a closed fd exits 2" usage_error $rc grep -q -- --lifeline-fd "$TMP/lifeline.err"
done_testing
