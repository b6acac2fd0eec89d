#!/bin/bash
# The daemon restarted under a running engine, several times: the shim
# reconnects in the background, registers each region once with the new
# daemon (no duplicates), the budget holds throughout by the fake CUDA's own
# counters, and the engine's data and exit status are untouched.
. "$(dirname "$0")/lib.sh"

BUDGET=$((64 << 20))
write_config 64M
check "kvtierd starts" start_daemon
ENGINE_ENV="KVTIER_LOG=info" run_engine restarts --regions 4 --region-size 64M --window 32M --steps 250 \
        --step-ms 20 --hint &
engine=$!

# regions_of_engine: the number of regions the daemon lists for the engine.
regions_of_engine() {
        status_json | jq '[.clients[] | select(.name == "kv-engine") | .regions | length] | add // 0'
}
# wait_regions N: up to 5 s for the daemon to list N regions of the engine.
wait_regions() {
        for _ in $(seq 100); do
                [ "$(regions_of_engine 2>/dev/null)" = "$1" ] && return 0
                sleep 0.05
        done
        diag "the daemon lists $(regions_of_engine 2>/dev/null) regions of the engine, expected $1"
        return 1
}

check "the first daemon lists the engine's 4 regions" wait_regions 4
for round in 1 2 3; do
        kill -KILL "$DAEMON_PID"; wait "$DAEMON_PID" 2>/dev/null; DAEMON_PID=
        sleep 0.3
        check "restart $round: kvtierd starts again on the stale socket" start_daemon
        check "restart $round: the engine's 4 regions are registered again, once each" wait_regions 4
        s=$(status_json)
        check_le "restart $round: charged VRAM within the budget" \
                "$(echo "$s" | jq '[.gpus[] | .charged_bytes] | max // 0')" $BUDGET
done
# The first orders complete a few ticks after re-registration (later under
# the sanitizers): wait up to 5 s instead of reading one snapshot.
done_orders=0
for _ in $(seq 100); do
        done_orders=$(status_json | jq .migrations.orders_done)
        [ "$done_orders" -gt 0 ] && break
        sleep 0.05
done
check_gt "restart 3: the new daemon moves chunks again" "$done_orders" 0
check "the engine still runs after the restarts" kill -0 $engine
wait $engine; rc=$?
check "engine exits 0" [ $rc -eq 0 ]
check "pattern intact" grep -q "mismatched words 0" "$TMP/restarts.out"
check "the shim re-registered in the background" grep -q "Registered 4 captured regions" "$TMP/restarts.out"
check_le "peak VRAM by the fake CUDA's own counters within the budget" \
        "$(stat_of restarts managed_resident_peak_bytes)" $BUDGET

# An engine that allocates while the daemon is away: what it captures then
# lands in host memory, uncharged, and is registered when a daemon is back,
# so the budget holds across the restart.  (Plain cudaMalloc, as before a
# daemon was ever reached, would put it in VRAM outside the budget.)
ENGINE_ENV="KVTIER_LOG=info" run_engine grows --regions 4 --region-size 64M --window 32M --steps 150 \
        --step-ms 20 --alloc-ms 400 --hint &
engine=$!
check "growing engine: the daemon lists its first region" wait_regions 1
kill -KILL "$DAEMON_PID"; wait "$DAEMON_PID" 2>/dev/null; DAEMON_PID=
sleep 1
check "growing engine: kvtierd starts again" start_daemon
check "growing engine: all 4 regions registered with the new daemon, those allocated while it was away too" \
        wait_regions 4
wait $engine; rc=$?
check "growing engine exits 0, pattern intact" rc_and $rc grep -q "mismatched words 0" "$TMP/grows.out"
check "growing engine: all 4 regions are managed memory, none plain cudaMalloc" \
        [ "$(stat_of grows managed_allocs)" -eq 4 ]
check_le "growing engine: peak VRAM by the fake CUDA's own counters within the budget" \
        "$(stat_of grows managed_resident_peak_bytes)" $BUDGET
# A GRANT's room is held from promotions until the shim acknowledges it
# (protocol.h); kvtierd logs a shim that leaves one unanswered for 2 s.
check "the shims acknowledged every GRANT in time" \
        bash -c "! grep -q 'did not acknowledge its GRANT' '$TMP/kvtierd.log'"

# A daemon lost while the process has nothing captured (its first 64 MiB
# stay plain by [capture] capture_after): the mover ends, then the next
# allocation is captured in the outage; nothing else is allocated after it,
# so only a mover started for it can register it with the next daemon.
check "kvtierd stops cleanly" stop_daemon
write_config 64M "[capture]" "capture_after = 64M"
check "kvtierd with [capture] capture_after = 64M starts" start_daemon
ENGINE_ENV="KVTIER_LOG=info" run_engine late --regions 2 --region-size 64M \
        --window 32M --steps 150 --step-ms 20 --alloc-ms 700 &
engine=$!
engine_connected() { [ "$(status_json | jq '[.clients[] | select(.name == "kv-engine")] | length')" -ge 1 ]; }
for _ in $(seq 100); do engine_connected 2>/dev/null && break; sleep 0.02; done
check "late capture: the engine connected, nothing captured yet" [ "$(regions_of_engine)" = 0 ]
kill -KILL "$DAEMON_PID"; wait "$DAEMON_PID" 2>/dev/null; DAEMON_PID=
sleep 1.2
check "late capture: kvtierd starts again after the capture" start_daemon
check "late capture: the region captured in the outage is registered with the new daemon" wait_regions 1
wait $engine; rc=$?
check "late capture: engine exits 0, pattern intact" rc_and $rc grep -q "mismatched words 0" "$TMP/late.out"

# Across a restart the GPU keeps the mappings it made at its faults: the
# move that returns each region to host memory before it is registered
# again leaves them.  The new daemon counts a region's uses from zero at
# its first read, so the chunks touched before are passed on as used and
# booked mapped, to be re-armed; booked unmapped, their reads would never
# be seen.  An engine fills four 64M regions (the 96 chunks beyond the
# grant fault; the first region, placed in VRAM at its capture, does not),
# reads all of them once and touches nothing for 8 s: in that time the new
# daemon must have seen the 96 (none, with the counters zeroed at the
# re-registration).  It gets no VRAM to promote them into: each one it sees
# is one demand.
check "kvtierd stops cleanly" stop_daemon
write_config 64M
check "kvtierd starts for the mapped-across-a-restart check" start_daemon
ENGINE_ENV="KVTIER_HEAT=cupti" run_engine mapped --regions 4 --region-size 64M --window 256M --steps 1 \
        --step-ms 8000 &
engine=$!
# faults_reach N SECONDS: the daemon's demand faults once they reach N, or
# what there are after SECONDS.
faults_reach() {
        status_when "(.gpus[0].demand.demand_faults // 0) >= $1" true "$2" | jq '.gpus[0].demand.demand_faults // 0'
}
check_gt "whole-pool reader: the first daemon saw its fill fault the 96 chunks beyond the grant" \
        "$(faults_reach 96 10)" 95
kill -KILL "$DAEMON_PID"; wait "$DAEMON_PID" 2>/dev/null; DAEMON_PID=
write_config 0
check "whole-pool reader: kvtierd starts again, with no VRAM to give" start_daemon
check "whole-pool reader: its 4 regions are registered again" wait_regions 4
check_gt "whole-pool reader: the new daemon saw the uses of the chunks mapped before the restart" \
        "$(faults_reach 96 2)" 95
wait $engine; rc=$?
check "whole-pool reader exits 0, pattern intact" rc_and $rc grep -q "mismatched words 0" "$TMP/mapped.out"
check "kvtierd stops cleanly" stop_daemon

# A daemon lost while a capture that started in VRAM is being prefetched
# there (outside the shim's announce lock; the fake's prefetch 150 ms a
# 2 MiB page, 4.8 s for the region): its grant came from the daemon that is
# gone, and the mover, with nothing in the table, ends.  The new daemon
# grants no VRAM (budget 0), so the capture returns the region to host
# memory, all of it (the fake's count of bytes moved to the host; nothing
# else moves in this run), and starts a mover, which registers it with the
# new daemon, once.
write_config 64M
check "kvtierd starts for the restart-during-a-capture check" start_daemon
ENGINE_ENV="FAKECUDA_PREFETCH_DELAY_US=150000 KVTIER_LOG=debug" run_engine midcapture --regions 1 \
        --region-size 64M --window 32M --steps 100 --step-ms 20 &
engine=$!
for _ in $(seq 250); do engine_connected 2>/dev/null && break; sleep 0.02; done
check "mid-capture: the engine connected" engine_connected
check "mid-capture: its capture not registered yet" [ "$(regions_of_engine)" = 0 ]
kill -KILL "$DAEMON_PID"; wait "$DAEMON_PID" 2>/dev/null; DAEMON_PID=
write_config 0
check "mid-capture: kvtierd starts again, with no VRAM to give" start_daemon
for _ in $(seq 300); do [ "$(regions_of_engine 2>/dev/null)" = 1 ] && break; sleep 0.05; done
check "mid-capture: the region is registered with the new daemon" [ "$(regions_of_engine)" = 1 ]
wait $engine; rc=$?
check "mid-capture: engine exits 0, pattern intact" rc_and $rc grep -q "mismatched words 0" "$TMP/midcapture.out"
check_gt "mid-capture: the capture's pages went to VRAM first" "$(stat_of midcapture h2d_bytes)" $(((64 << 20) - 1))
check_gt "mid-capture: all of them were moved back to host memory" "$(stat_of midcapture d2h_bytes)" $(((64 << 20) - 1))
check "mid-capture: the region was registered in host memory, once" \
        [ "$(grep -c -e 'in host memory\.$' -e 'Registered 1 captured regions' "$TMP/midcapture.out")" -eq 2 ]
check "kvtierd stops cleanly" stop_daemon

# The same, with the connection back before the first capture ends: a
# second thread's capture (api-engine --overtake) reconnects to the new
# daemon while the first one's 192 MiB are still being prefetched (60 ms a
# page), and the mover's pass for that connection is over before the first
# region is in the table.  So the capture itself returns it to host memory
# (the new daemon grants no VRAM), all of it, and registers it.  The first
# daemon's budget grants the first capture a start in VRAM.
write_config 256M
check "kvtierd starts for the reconnected-during-a-capture check" start_daemon
API_ENGINE="$top_builddir/tests/integration/api-engine"
rm -f "$TMP/go"
ENGINE_ENV="FAKECUDA_PREFETCH_DELAY_US=60000 KVTIER_LOG=debug" ENGINE="$API_ENGINE" \
        run_engine reconnected --mode runtime --size 192M --overtake --hold "$TMP/go" &
engine=$!
api_connected() { [ "$(status_json | jq '[.clients[] | select(.name == "api-engine")] | length')" -ge 1 ]; }
for _ in $(seq 250); do api_connected 2>/dev/null && break; sleep 0.02; done
check "reconnected: the engine connected" api_connected
for _ in $(seq 250); do grep -q holding "$TMP/reconnected.out" 2>/dev/null && break; sleep 0.02; done
check "reconnected: the first capture is being prefetched" grep -q holding "$TMP/reconnected.out"
kill -KILL "$DAEMON_PID"; wait "$DAEMON_PID" 2>/dev/null; DAEMON_PID=
write_config 0
check "reconnected: kvtierd starts again, with no VRAM to give" start_daemon
touch "$TMP/go"
wait $engine; rc=$?
check "reconnected: engine exits 0, data intact" rc_and $rc grep -q "mismatched words 0" "$TMP/reconnected.out"
check "reconnected: the second capture returned first" grep -q "second allocation returned first" "$TMP/reconnected.out"
check "reconnected: both captures registered in host memory" \
        [ "$(grep -c 'in host memory\.$' "$TMP/reconnected.out")" -eq 2 ]
check_gt "reconnected: the first was moved back to host memory, all of it" \
        "$(stat_of reconnected d2h_bytes)" $(((192 << 20) - 1))
check "kvtierd stops cleanly" stop_daemon
done_testing
