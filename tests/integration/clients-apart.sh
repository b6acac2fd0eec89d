#!/bin/bash
# What one client does never stands for another's.
#
# Its regions are not another's siblings (policy/siblings.h: one client's
# regions of one size speak for each other at one offset; two engines'
# pools of one size are not one engine's layers).
#
# A client that stops answering holds back its own samples, not another's.
# The demand sampler keeps no more than a tick's share of re-arms and
# probes in flight, because a shim makes them in a queue of its own; that
# share is each client's.  Here engine S is stopped (SIGSTOP: a debugger,
# a job suspended with ^Z, a process swapped out) once its captured chunks
# read in place have gone stale, so the re-arms the daemon sends it stay
# unanswered until [daemon] order_timeout_ms (30 s); engine B, started
# after, must still have its own stale chunks re-armed meanwhile.  (While
# the share was the GPU's, S's unanswered re-arms stopped everyone's.)
. "$(dirname "$0")/lib.sh"

# 100 re-arms a second at 20 ms ticks: a share of 2 chunks a tick, which
# S's 60-odd stale chunks keep full for some 30 ticks, so that S is
# stopped while its share is in flight however late the poll below sees
# the first re-arms (at 8 a tick, the sweep could end before it did, on a
# loaded machine).
write_config 64M "[policy]" "rearm_rate = 100"
check "kvtierd starts with a share of 2 re-arms a tick" start_daemon

# client PID FIELD: the field of the client with that pid in the last status.
client() { jq --argjson p "$1" --arg f "$2" '[.clients[] | select(.pid == $p) | .[$f]][0] // -1' <<<"$S"; }

# Three regions of 64M: the first starts in VRAM (the budget), the others
# past it in host memory, which the engine's fill maps and then reads in
# place; its window stays in the first region's first 8M.
ARGS="--regions 3 --region-size 64M --window 8M --steps 20 --step-ms 20"
env LD_PRELOAD="$PRELOAD" KVTIER_SOCKET="$SOCK" "$ENGINE" $ARGS --seed 1 --until "$TMP/s.stop" \
        >"$TMP/s.out" 2>&1 &
S_PID=$!
S=$(status_when "[.clients[] | select(.pid == $S_PID) | .rearmed_chunks > 0] | any" true 10)
check_gt "S's stale chunks are re-armed while it runs" "$(client $S_PID rearmed_chunks)" 0
kill -STOP "$S_PID"
S=$(status_when "[.clients[] | select(.pid == $S_PID) | .rearming_chunks >= 2] | any" true)
check_gt "stopped, S holds re-arms unanswered" "$(client $S_PID rearming_chunks)" 0

env LD_PRELOAD="$PRELOAD" KVTIER_SOCKET="$SOCK" "$ENGINE" $ARGS --seed 2 --until "$TMP/b.stop" \
        >"$TMP/b.out" 2>&1 &
B_PID=$!
S=$(status_when "[.clients[] | select(.pid == $B_PID) | .rearmed_chunks > 0] | any" true)
check_gt "B's stale chunks are re-armed meanwhile" "$(client $B_PID rearmed_chunks)" 0
check_gt "while S still holds them" "$(client $S_PID rearming_chunks)" 0
check "and no order of S's timed out yet" bash -c "! grep -q 'unanswered' '$TMP/kvtierd.log'"
S=$(status_json)
check "S's and B's three regions of one size each are no sibling group" \
        [ "$(jq '.gpus[0].demand.sibling_groups' <<<"$S")" = 0 ]

kill -CONT "$S_PID"
touch "$TMP/s.stop" "$TMP/b.stop"
wait "$S_PID"; s_rc=$?
wait "$B_PID"; b_rc=$?
check "S exits 0 with its pattern intact" rc_and $s_rc grep -q "mismatched words 0" "$TMP/s.out"
check "B exits 0 with its pattern intact" rc_and $b_rc grep -q "mismatched words 0" "$TMP/b.out"
S=$(status_when '.clients | length' 0)
check "no re-arm counted in flight once both are gone" [ "$(jq '.gpus[0].demand.rearming_chunks' <<<"$S")" = 0 ]
check "kvtierd stops cleanly" stop_daemon
done_testing
