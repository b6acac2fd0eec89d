#!/bin/bash
# The fail-open cases fail-open.sh and restart.sh do not cover: a socket the
# engine may not open (engine as nobody, socket 0660 root), a stopped daemon
# under the driver API path, exec of a child under LD_PRELOAD, and the
# daemon restarted under an engine that allocates through the driver.  In
# each, the engine's output and exit status equal a run without the shim.
. "$(dirname "$0")/lib.sh"
ENGINE="$top_builddir/tests/integration/api-engine"
ARGS="--regions 2 --size 64M"
intact() { grep -q "mismatched words 0" "$TMP/$1.out" || { diag "$(cat "$TMP/$1.out")"; false; }; }

write_config 256M
check "kvtierd starts" start_daemon

# Permission denied: kvtierd's socket is 0660 root; nobody may not connect.
if [ "$(id -u)" -eq 0 ] && command -v setpriv >/dev/null; then
        chmod 0755 "$TMP"
        touch "$TMP/denied.stats"; chmod 0666 "$TMP/denied.stats"
        ENGINE_WRAP="setpriv --reuid=nobody --regid=nogroup --clear-groups" run_engine denied --mode procaddr $ARGS
        rc=$?
        check "socket permission denied: engine exits 0" [ $rc -eq 0 ]
        check "socket permission denied: data intact" intact denied
        check "socket permission denied: said once why" [ "$(grep -c "kvtierd.*Permission denied" "$TMP/denied.out")" -eq 1 ]
        check "socket permission denied: nothing captured" [ "$(stat_of denied managed_allocs)" -eq 0 ]
        chmod 0700 "$TMP"
else
        for _ in 1 2 3 4; do ok "# SKIP socket permission test needs root and setpriv"; done
fi

# exec: a shell under LD_PRELOAD runs the engine; the shim is loaded in
# both, leaves LD_PRELOAD as it was, and the engine is captured as usual.
env LD_PRELOAD="$PRELOAD" KVTIER_SOCKET="$SOCK" FAKECUDA_STATS="$TMP/exec.stats" \
        sh -c 'echo "preload=$LD_PRELOAD"; exec "$0" "$@"' "$ENGINE" --mode driver $ARGS >"$TMP/exec.out" 2>&1
rc=$?
check "exec: engine exits 0, data intact" rc_and $rc intact exec
check "exec: LD_PRELOAD seen by the child unchanged" grep -qxF "preload=$PRELOAD" "$TMP/exec.out"
check "exec: the exec'd engine is captured" [ "$(stat_of exec managed_allocs)" -eq 2 ]

# fork() before CUDA: the child starts with nothing of the parent's and
# registers on its own when it allocates; both keep their data.
rm -f "$TMP/go"
run_engine forked --mode driver $ARGS --fork --hold "$TMP/go" &
engine=$!
for _ in $(seq 200); do [ "$(grep -c holding "$TMP/forked.out" 2>/dev/null)" -ge 2 ] && break; sleep 0.05; done
status_json >"$TMP/forked.json"
touch "$TMP/go"; wait $engine; rc=$?
check "fork: parent and child exit 0, data intact" rc_and $rc [ "$(grep -c "mismatched words 0" "$TMP/forked.out")" -eq 2 ]
check "fork: two clients (parent and child), two regions each" \
        [ "$(jq -c '[.clients[] | select(.name == "api-engine") | (.regions | length)]' "$TMP/forked.json")" = "[2,2]" ]
check "fork: parent and child are different pids" \
        [ "$(jq '[.clients[] | select(.name == "api-engine") | .pid] | unique | length' "$TMP/forked.json")" -eq 2 ]

# fork() while other threads capture and free: the fork handlers take the
# locks of the tables the child keeps (regions, VMM ranges) and start the
# rest afresh, so no child starts with a lock held or a table half-updated
# (before, the VMM table's lock was not reset at all).  Every child exits
# within 5 s.
ENGINE_ENV="KVTIER_MIN_SIZE=2M" run_engine storm --mode runtime --size 4M --threads 3 --fork-storm 60; rc=$?
check "fork storm: 60 children forked mid-capture, each exits 0 within 5 s, none hung" rc_and $rc \
        grep -q "fork storm, 60 children, 0 failed" "$TMP/storm.out"

# A stopped daemon under the driver API path: each call waits at most the timeout.
kill -STOP "$DAEMON_PID"
start=$(date +%s%N)
# Small allocations (KVTIER_MIN_SIZE=2M): the time is the shim's waits, not the engine's work.
ENGINE_ENV="KVTIER_TIMEOUT_MS=300 KVTIER_MIN_SIZE=2M" run_engine stopped --mode procaddr --regions 8 --size 2M; rc=$?
elapsed_ms=$((($(date +%s%N) - start) / 1000000))
kill -CONT "$DAEMON_PID"
check "daemon stopped, driver path: engine exits 0, data intact" rc_and $rc intact stopped
check "daemon stopped, driver path: nothing captured" [ "$(stat_of stopped managed_allocs)" -eq 0 ]
# 8 allocations; one 300 ms wait, then the shim backs off.  5 s catches a
# shim that waits on the daemon for every allocation.
check_le "daemon stopped, driver path: the engine was not held up (ms)" $elapsed_ms 5000

# Restarted several times under an engine holding driver-API regions: they
# are registered again, once each, with their API.
rm -f "$TMP/go"
run_engine restarts --mode procaddr $ARGS --hold "$TMP/go" &
engine=$!
regions() { status_json | jq '[.clients[].regions[] | select(.api == "cuMemAlloc")] | length'; }
wait_regions() { for _ in $(seq 100); do [ "$(regions)" -eq "$1" ] && return 0; sleep 0.05; done; diag "regions: $(regions)"; false; }
check "the daemon lists the engine's 2 cuMemAlloc regions" wait_regions 2
for round in 1 2 3; do
        kill -KILL "$DAEMON_PID"; wait "$DAEMON_PID" 2>/dev/null; DAEMON_PID=
        check "restart $round: kvtierd starts again" start_daemon
        check "restart $round: 2 cuMemAlloc regions registered again, once each" wait_regions 2
done
touch "$TMP/go"; wait $engine; rc=$?
check "restarts: engine exits 0, data intact" rc_and $rc intact restarts

check "kvtierd stops cleanly" stop_daemon
done_testing
