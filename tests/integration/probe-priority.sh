#!/bin/bash
# Probes go only where they can make room.  The demand sampler probes
# chunks in VRAM (a page of each evicted, to see whether it comes back)
# while demands wait for room, and only in VRAM those demands may take: a
# chunk of a client of higher [client.NAME] priority outranks them however
# cold it is, so its probe would free nothing for them and cost its engine
# a fault if the chunk is in use.
#
# Engine A (priority 7) holds the whole budget with one region; engine L
# (priority 0, primary group 65534, which needs root to take) reads its two
# regions in host memory over and over.  L's demands wait, and A's VRAM
# must not be probed for them.  Then engine B (priority 7) reads two regions
# against the same budget: its own demands wait for its own VRAM, which is
# probed.
. "$(dirname "$0")/lib.sh"

if [ "$(id -u)" -ne 0 ]; then echo "1..0 # SKIP needs root to run an engine in another group"; exit 0; fi
command -v setpriv >/dev/null || { echo "1..0 # SKIP no setpriv"; exit 0; }

write_config 64M "[client.hi]" "gid = 0" "priority = 7" "[client.lo]" "gid = 65534" "priority = 0"
check "kvtierd starts with two priorities" start_daemon

# field SECTION FIELD: the field of the (first) client of that section in
# the status $S; -1 without one.
field() { jq --arg s "$1" --arg f "$2" '[.clients[] | select(.section == $s) | .[$f]][0] // -1' <<<"$S"; }

# A: one region of 64M, the budget, in VRAM; its window slides over it,
# so that most of its chunks go unused for longer than a probe waits.
env LD_PRELOAD="$PRELOAD" KVTIER_SOCKET="$SOCK" "$ENGINE" --regions 1 --region-size 64M --window 4M \
        --step-ms 10 --steps 0 --until "$TMP/a.stop" >"$TMP/a.out" 2>&1 &
A_PID=$!
S=$(status_when "[.clients[] | select(.section == \"hi\") | .vram_bytes] | .[0]" $((64 << 20)) 10)
check "A holds the budget" [ "$(field hi vram_bytes)" = $((64 << 20)) ]

env LD_PRELOAD="$PRELOAD" KVTIER_SOCKET="$SOCK" setpriv --regid=65534 --clear-groups "$ENGINE" --regions 2 \
        --region-size 64M --window 32M --step-ms 4 --steps 0 --until "$TMP/l.stop" >"$TMP/l.out" 2>&1 &
L_PID=$!
S=$(status_when ".gpus[0].demand.held_bytes > 0" true 20)
check_gt "L's demands wait for room" "$(jq '.gpus[0].demand.held_bytes' <<<"$S")" 0
# a second and a half more of them, each tick free to probe
sleep 1.5
S=$(status_json)
check_gt "and still wait" "$(jq '.gpus[0].demand.held_bytes' <<<"$S")" 0
check "status tells the priority they wait at: L's" [ "$(jq '.gpus[0].demand.held_priority' <<<"$S")" = 0 ]
check "L holds no VRAM" [ "$(field lo vram_bytes)" = 0 ]
check "A's VRAM was not probed for them" [ "$(field hi probes)" = 0 ]
check "no chunk on the GPU was" [ "$(jq '.gpus[0].demand.probes' <<<"$S")" = 0 ]

touch "$TMP/a.stop"
wait "$A_PID"; a_rc=$?
check "A exits 0 with its pattern intact" rc_and $a_rc grep -q "mismatched words 0" "$TMP/a.out"

# B: two regions of 64M against the 64M budget, read whole over and over.
env LD_PRELOAD="$PRELOAD" KVTIER_SOCKET="$SOCK" "$ENGINE" --regions 2 --region-size 64M --window 32M \
        --step-ms 4 --steps 0 --until "$TMP/b.stop" >"$TMP/b.out" 2>&1 &
B_PID=$!
S=$(status_when "[.clients[] | select(.section == \"hi\") | .probes > 0] | any" true 20)
check_gt "B's VRAM is probed for its own demands" "$(jq '[.clients[] | select(.section == "hi") | .probes] | max' <<<"$S")" 0
check_gt "B's own prober's interval is shown" "$(jq '[.clients[] | select(.section == "hi") | .probe_every_ms] | max' <<<"$S")" 0
check "L's too, its own" [ "$(field lo probe_every_ms)" -gt 0 ]
check "the GPU's is the shortest of its clients'" \
        [ "$(jq '.gpus[0].demand.probe_every_ms' <<<"$S")" = "$(jq '[.clients[].probe_every_ms] | min' <<<"$S")" ]
check "the grants' margin over the budget is shown" \
        [ "$(jq '.gpus[0].demand.grant_over_bytes | type' <<<"$S")" = '"number"' ]
touch "$TMP/b.stop" "$TMP/l.stop"
wait "$B_PID"; b_rc=$?
wait "$L_PID"; l_rc=$?
check "B exits 0 with its pattern intact" rc_and $b_rc grep -q "mismatched words 0" "$TMP/b.out"
check "L exits 0 with its pattern intact" rc_and $l_rc grep -q "mismatched words 0" "$TMP/l.out"
check "kvtierd stops cleanly" stop_daemon
done_testing
