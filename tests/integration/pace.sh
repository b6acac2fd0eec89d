#!/bin/bash
# Two engines on one GPU: while a client of higher [client.NAME] priority
# is busy there, the daemon paces each client of lower priority to
# [gpu] yield_percent of the GPU's time (PACE), and lets it go once the
# other has been idle a while; with equal priorities, or yield_percent =
# 100, nobody is paced.  The sections match by group: the low-priority
# engine runs with primary group 65534, which needs root to take.
. "$(dirname "$0")/lib.sh"

if [ "$(id -u)" -ne 0 ]; then echo "1..0 # SKIP needs root to run an engine in another group"; exit 0; fi
command -v setpriv >/dev/null || { echo "1..0 # SKIP no setpriv"; exit 0; }

HI="--regions 2 --region-size 64M --window 16M --steps 100 --step-ms 10"
LO="--regions 2 --region-size 64M --window 16M --steps 250 --step-ms 4"

# lo_bg NAME [ENGINE-ARGS...]: the low-priority engine (group 65534) in the
# background, its launch counters in $TMP/NAME.heat at exit.
lo_bg() {
        local name=$1
        shift
        env LD_PRELOAD="$PRELOAD" KVTIER_SOCKET="$SOCK" KVTIER_DEBUG=heat-stats="$TMP/$name.heat" \
                setpriv --regid=65534 --clear-groups "$ENGINE" $LO "$@" >"$TMP/$name.out" 2>&1 &
        LO_PID=$!
}
# hi_bg NAME: the high-priority engine (group 0) in the background.
hi_bg() {
        env LD_PRELOAD="$PRELOAD" KVTIER_SOCKET="$SOCK" KVTIER_DEBUG=heat-stats="$TMP/$1.heat" \
                "$ENGINE" $HI >"$TMP/$1.out" 2>&1 &
        HI_PID=$!
}
# pace_of GID: the pace_percent of the client in group GID's section, as
# status shows it now ("none" while there is no such client).
pace_of() { status_json | jq -r --arg s "$1" '[.clients[] | select(.section == $s) | .pace_percent][0] // "none"'; }
# pace_when SECTION VALUE: polls pace_of for up to 5 s until it prints VALUE; prints the last.
pace_when() {
        local v
        for _ in $(seq 100); do
                v=$(pace_of "$1")
                [ "$v" = "$2" ] && break
                sleep 0.05
        done
        echo "$v"
}
heat_of() { jq -s "map(.$2 // 0) | max" "$TMP/$1.heat" 2>/dev/null || echo missing; }

SECTIONS=("[client.hi]" "gid = 0" "priority = 7" "[client.lo]" "gid = 65534" "priority = 0")

write_config 512M "yield_percent = 10" "${SECTIONS[@]}"
check "kvtierd starts with two priorities and yield_percent = 10" start_daemon
# The fake's kernels take no time, so pacing hardly slows lo: it steps on
# until told, to be there when hi has gone however long either takes.
lo_bg lo --until "$TMP/lo.stop"
check "the low-priority engine alone is not paced" [ "$(pace_when lo 100)" = 100 ]
hi_bg hi
check "once the high-priority engine is busy, the other is paced to 10%" [ "$(pace_when lo 10)" = 10 ]
check "the high-priority engine is not paced" [ "$(pace_of hi)" = 100 ]
check "the daemon logs the pacing" grep -q "Pacing client .* to 10% of the GPU's time" "$TMP/kvtierd.log"
wait "$HI_PID"; rc=$?
check "the high-priority engine exits 0" [ $rc -eq 0 ]
check "and its pattern is intact" grep -q "mismatched words 0" "$TMP/hi.out"
check "it launched no paced kernel" [ "$(heat_of hi paced_launches)" = 0 ]
check "once it is gone, the other is no longer paced" [ "$(pace_when lo 100)" = 100 ]
check "the daemon logs that too" grep -q "is no longer paced" "$TMP/kvtierd.log"
touch "$TMP/lo.stop"
wait "$LO_PID"; rc=$?
check "the paced engine exits 0" [ $rc -eq 0 ]
check "and its pattern is intact" grep -q "mismatched words 0" "$TMP/lo.out"
check_gt "its shim paced launches" "$(heat_of lo paced_launches)" 0
check "kvtierd stops cleanly" stop_daemon

# The same two engines where nobody is to yield: pacing off, then equal
# priorities.  Each run polls the pace while both engines run.
never_paced() {
        local seen=100 v
        lo_bg "$1-lo"
        hi_bg "$1-hi"
        while kill -0 "$HI_PID" 2>/dev/null; do
                v=$(pace_of lo)
                [ "$v" != 100 ] && [ "$v" != none ] && seen=$v
                sleep 0.05
        done
        wait "$HI_PID" "$LO_PID"
        echo "$seen"
}
: >"$TMP/kvtierd.log"
write_config 512M "yield_percent = 100" "${SECTIONS[@]}"
check "kvtierd starts with yield_percent = 100" start_daemon
check "with yield_percent = 100 the low-priority engine is never paced" [ "$(never_paced off)" = 100 ]
check "and its shim paced no launch" [ "$(heat_of off-lo paced_launches)" = 0 ]
check "kvtierd stops cleanly" stop_daemon

write_config 512M "yield_percent = 10" "[client.hi]" "gid = 0" "priority = 3" "[client.lo]" "gid = 65534" "priority = 3"
check "kvtierd starts with equal priorities" start_daemon
check "with equal priorities nobody is paced" [ "$(never_paced equal)" = 100 ]
check "and no shim paced a launch" [ "$(heat_of equal-lo paced_launches)" = 0 ]
check "nothing was logged as paced" bash -c "! grep -q 'Pacing client' '$TMP/kvtierd.log'"
check "kvtierd stops cleanly" stop_daemon

done_testing
