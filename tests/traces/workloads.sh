#!/bin/bash
# kvtier-sim on the benchmark suite's shapes (gen-workloads: what
# tests/bench/suite-h200.sh runs on the H200), the policy seeing what the
# daemon sees.  Asserted, of the default policy (demand) in the model: never
# slower than reading host memory in place (zero-copy) on any of them, faster
# than lru on the paged pool whose hot set is a quarter or half the budget,
# and there within the span of the H200's runs of the shipped defaults (a
# model that strays from what the GPU does is no guide to a policy change;
# tests/bench/RESULTS.md sets the figures side by side), and the budget
# exceeded by no more than the capture margin.
. "$(dirname "$0")/../integration/lib.sh"

SIM="$top_builddir/kvtier-sim"
GEN="$top_builddir/tests/traces/gen-workloads"

field() { sed -n "s/.* $2=\([^ ]*\).*/\1/p" <<<" $1"; }
ge() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a >= b) }'; }
gt() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a > b) }'; }

# sim NAME BUDGET GEN-ARGS...: the lines of demand and lru into $demand, $lru.
sim() {
        local name=$1 budget=$2 out
        shift 2
        if ! out=$("$GEN" "$@" | "$SIM" --budget="$budget" -p demand,lru - 2>&1); then
                not_ok "$name: kvtier-sim runs"
                diag "$out"
                return 1
        fi
        demand=$(grep '^policy=demand ' <<<"$out")
        lru=$(grep '^policy=lru ' <<<"$out")
        diag "$name: demand speed $(field "$demand" speed) (hit rate $(field "$demand" hit_rate)," \
                "held at most $(field "$demand" held_max) chunks, protection up to $(field "$demand" protect_max) ticks)," \
                "lru $(field "$lru" speed), zero-copy $(field "$demand" zerocopy_speed)"
        check "$name: demand at least as fast as zero-copy" ge "$(field "$demand" speed)" "$(field "$demand" zerocopy_speed)"
        check "$name: budget exceeded by no more than the margin" \
                [ "$(field "$demand" peak_charged_bytes)" -le $(($(field "$demand" budget_bytes) + $(field "$demand" margin_bytes))) ]
        check "$name: bytes moved consistent with residency" [ "$(field "$demand" consistent)" = yes ]
}

# HOT:NAME:LOW: the hot set, and the least fraction of all-VRAM (the same
# call's all-VRAM run) the H200 ran it at with sibling regions and no
# hints, less a fifth (RESULTS.md, 2026-12-03, twelfth session: hot 5
# 0.70-0.84, hot 8 0.43-0.55).  This shape, timed over the whole trace, is
# not what the suite times: the span on both sides is asserted below, on
# the suite's own runs.  (Above it here since the captures are advised at
# once: hot 8 0.78, where the H100 ran the suite at 0.55-0.62,
# twenty-fourth session.)
for hot in 5:a-quarter:0.56 8:half:0.34; do
        IFS=: read -r n name low <<<"$hot"
        if sim "paged contiguous, hot set $name of the budget" 4G paged-contiguous 10 "$n"; then
                speed=$(field "$demand" speed)
                check "paged contiguous, hot set $name of the budget: demand at least $low of all-VRAM" \
                        ge "$speed" "$low"
                check "paged contiguous, hot set $name of the budget: demand faster than lru" \
                        ge "$speed" "$(field "$lru" speed)"
        fi
done
sim "paged contiguous, hot set the budget" 4G paged-contiguous 10 16
sim "paged contiguous, hot set 4x the budget" 4G paged-contiguous 10 64
sim "paged interleaved, hot set the budget" 4G paged-interleaved 10 16
sim "paged interleaved, hot set 4x the budget" 4G paged-interleaved 10 64
sim "long context by concatenation, KV 2x the budget" 1G long-context 64
sim "long context, StaticCache (repeat_kv), KV 2x the budget" 1G long-static 64
sim "long context, StaticCache in the engine's own segments, KV 2x the budget" 1G long-static-engine 64

# launch_run on|off WORKLOAD [SIM-ARGS...]: the demand line of WORKLOAD's 64
# steps at 1G, closed loop, with launches seen or not.
launch_run() {
        local launches=$1 workload=$2
        shift 2
        "$GEN" "$workload" 64 | "$SIM" --budget=1G -p demand --closed-loop --launches="$launches" "$@" - 2>&1 |
                grep '^policy=demand '
}
# launch_gain NAME FACTOR WHAT WORKLOAD [SIM-ARGS...]: launch_run with
# launches seen and with none; launches seen must make WHAT at least FACTOR
# times as fast (they are the only difference between the two runs).
launch_gain() {
        local name=$1 factor=$2 what=$3 workload=$4 seen unseen
        shift 4
        seen=$(launch_run on "$workload" "$@")
        unseen=$(launch_run off "$workload" "$@")
        diag "$name, closed loop: demand speed $(field "$seen" speed) with launches seen," \
                "$(field "$unseen" speed) without, zero-copy $(field "$seen" zerocopy_speed)"
        check "$name: the model runs with launches seen and without" \
                [ -n "$(field "$seen" speed)" -a -n "$(field "$unseen" speed)" ]
        check "$name: launches seen make $what at least ${factor}x as fast" \
                ge "$(field "$seen" speed)" "$(awk -v u="$(field "$unseen" speed)" -v f="$factor" 'BEGIN { print f * u }')"
        check "$name, launches seen: bytes moved consistent with residency" [ "$(field "$seen" consistent)" = yes ]
}

# Launch density: demand ranks fresh chunks by their region's launches a
# chunk before residence, so that on the static cache's decode the repeated
# K and V, written and read by every layer, take VRAM from KV each layer
# reads once (RESULTS.md, thirty-second session: 0.1777 without, 0.4286
# with).  Without launches seen (kernels the shim cannot see) the plans are
# what they were before launches were counted, but for chunks unused for
# over 5.4 minutes (32767 ticks), whose recency now ranks alike.
launch_gain StaticCache 1.5 demand long-static

# The same decode laid out as the H100's run was (long-static-engine: the
# copies share the caching allocator's segments with KV tensors), its
# decode alone (from 256 ms): the ranking's gain is smaller there than on
# the shape above (RESULTS.md, thirty-third and thirty-fifth sessions; the
# GPU gave 1.16 times, thirty-second session).  Asserted as the model's own
# check of the ranking: at least 1.25x.
launch_gain "StaticCache in the engine's segments" 1.25 decode long-static-engine --measure-ms=256

# Its prefill (the trace's first 256 ms), where the H100 was furthest from
# all-VRAM: the attention reads each layer's K and V 256 times, across the
# link while they lie in host memory.  Asserted: never slower than reading
# host memory in place, and within the span of the H100's runs of the
# defaults widened by a fifth each way (RESULTS.md, thirty-fourth session:
# first token 9.36-9.99 s against all-VRAM's 0.269-0.287, 0.027-0.031 of it;
# the model without the attention's reads gave 0.14, thirty-fifth session).
prefill=$(launch_run on long-static-engine --measure-ms=0:256)
diag "StaticCache in the engine's segments, prefill, closed loop: demand speed $(field "$prefill" speed)," \
        "zero-copy $(field "$prefill" zerocopy_speed)"
check "StaticCache in the engine's segments, prefill: demand at least as fast as zero-copy" \
        ge "$(field "$prefill" speed)" "$(field "$prefill" zerocopy_speed)"
check "StaticCache in the engine's segments, prefill: within the H100's span widened by a fifth, 0.022-0.037" \
        ge "$(field "$prefill" speed)" 0.022
check "StaticCache in the engine's segments, prefill: ... and not above" ge 0.037 "$(field "$prefill" speed)"

# A daemon that binds a region's heat counters late loses the first touches
# of a pool filled as soon as it is captured (paged_kv.py does so; kvtierd
# took the counters at its binding as the baseline until it counted from
# zero): those chunks stay mapped, booked unmapped, never seen.  The model
# with such a loss (--bind-delay-us) against the same trace without it.
lost_run() {
        "$GEN" paged-contiguous 10 5 at-fill | "$SIM" --budget=4G -p demand --bind-delay-us="$1" - 2>&1 |
                grep '^policy=demand '
}
whole=$(lost_run 0)
late=$(lost_run 40000)
diag "paged contiguous, hot 5, captured at each fill: demand speed $(field "$whole" speed) with every first" \
        "touch seen, $(field "$late" speed) with $(field "$late" faults_lost) of them lost (bound 40 ms late)"
check "captured at each fill: the model runs, bound at once and bound late" [ -n "$whole" -a -n "$late" ]
check "bound 40 ms late: first touches lost" [ "$(field "$late" faults_lost)" -gt 0 ]
check "bound 40 ms late: slower than bound at once" gt "$(field "$whole" speed)" "$(field "$late" speed)"
check "bound 40 ms late: bytes moved consistent with residency" [ "$(field "$late" consistent)" = yes ]

# The suite's own runs, as the model sees them: each pool captured at its
# fill (16 pools of 64 ms of trace time: the steps start at 1024 ms), the
# engine waiting for its stalls (--closed-loop: a slow step gives the
# daemon its ticks, as on the GPU), and only the measured turns counted:
# turns 1-4 after one warm-up turn (--measure-ms=1088:1344), or 12-15 after
# twelve (kvtierwarm, 1792:2048).  Asserted: within the span the GPU ran
# them at, widened by a fifth each way (RESULTS.md, twentieth and
# twenty-first sessions: hot 5 0.75-0.82 on an H100; hot 8 0.51-0.54 on an
# H100, 0.63-0.71 on an H200, and 0.55-0.62 on an H100 with the captures
# advised at once, twenty-fourth session; hot 16 after twelve turns 0.77 on
# an H200).  Hot 16 in the suite's window is reported, not asserted: the
# H200 ran it at 0.13-0.20 and the H100 at 0.26-0.27, 0.33-0.50 with the
# captures advised, where the model says more.
suite_run() {
        "$GEN" paged-contiguous 2 "$1" at-fill |
                "$SIM" --budget=4G -p demand --closed-loop --measure-ms="$2" - 2>&1 | grep '^policy=demand '
}
for run in 5:1088:1344:0.60:0.98 8:1088:1344:0.41:0.85 16:1792:2048:0.61:0.92; do
        IFS=: read -r hot from to low high <<<"$run"
        line=$(suite_run "$hot" "$from:$to")
        speed=$(field "$line" speed)
        diag "the suite's hot $hot, turns from $from ms, closed loop: demand speed $speed"
        check "the suite's hot $hot, measured from $from ms: within the GPU's span, $low-$high of all-VRAM" \
                ge "$speed" "$low"
        check "the suite's hot $hot, measured from $from ms: ... and not above" ge "$high" "$speed"
done
line=$(suite_run 16 1088:1344)
diag "the suite's hot 16, turns from 1088 ms, closed loop: demand speed $(field "$line" speed)" \
        "(the GPU: 0.13-0.50)"

# model-suite.sh, the same shapes side by side for several builds: a
# header and 16 rows, every cell a speed (two columns of this build)
if table=$(bash "$top_srcdir/tests/traces/model-suite.sh" -g "$GEN" a="$SIM" b="$SIM" 2>&1); then
        diag "$table"
        check "model-suite.sh: a header and 16 rows" [ "$(wc -l <<<"$table")" -eq 17 ]
        check "model-suite.sh: every cell a speed, the same in both columns" \
                awk 'NR > 1 && !($(NF - 1) ~ /^[0-9.]+$/ && $NF == $(NF - 1)) { bad = 1 } END { exit bad }' <<<"$table"
else
        not_ok "model-suite.sh runs"
        diag "$table"
fi
check "model-suite.sh: a build that is no kvtier-sim is a usage error" \
        sh -c 'bash "$1" a=/nonexistent >/dev/null 2>&1; [ $? -eq 2 ]' _ "$top_srcdir/tests/traces/model-suite.sh"
done_testing
