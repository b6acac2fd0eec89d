#!/bin/bash
# kvtier-sim over every checked-in trace: per trace, each policy's hit rate
# as a fraction of Belady's MIN (OPT) and of LRU, printed as figures, the
# policies seeing what the daemon sees on a GPU (kvtier-sim's default
# observation model).  Asserted: the simulator's invariants (budget never
# exceeded by more than the capture margin, bytes moved consistent with
# residency, every access counted).  The default policy's share of OPT's
# hit rate is reported, not asserted: what is asserted of its speed is in
# workloads.sh, on the benchmark suite's shapes.  OPT is
# Belady's demand-paging MIN, which is a bound only for demand-paging
# policies; kvtier's are not: the daemon promotes a new region's chunks before
# their first access, prefetches streams, and serves a miss by reading the
# host copy over the link without fetching it.  So a policy can beat MIN's hit
# rate (first accesses that hit) and fetch less than MIN (misses read
# remotely); both are noted beside the figures, not failed.
. "$(dirname "$0")/../integration/lib.sh"

SIM="$top_builddir/kvtier-sim"
DEFAULT=demand

# field LINE KEY: the value of KEY=... in a kvtier-sim output line.
field() { sed -n "s/.* $2=\([^ ]*\).*/\1/p" <<<" $1"; }
ge() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a >= b) }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.3f", a / b; else print "inf" }'; }

n_traces=0
below_lru=0
for trace in "$top_srcdir"/tests/traces/*.trace; do
        name=$(basename "$trace" .trace)
        budget=$(sed -n 's/^# budget: //p' "$trace" | head -n 1)
        n_traces=$((n_traces + 1))
        if ! out=$("$SIM" --budget="${budget:-1G}" "$trace" 2>&1); then
                not_ok "$name: kvtier-sim runs"
                diag "$out"
                continue
        fi
        ok "$name: kvtier-sim runs (budget ${budget:-1G})"
        opt=$(field "$(grep '^policy=opt ' <<<"$out")" hit_rate)
        lru=$(field "$(grep '^policy=lru ' <<<"$out")" hit_rate)
        while read -r line; do
                p=$(field "$line" policy)
                [ "$p" = opt ] && continue
                hr=$(field "$line" hit_rate)
                diag "$name $p: hit rate $hr, policy/OPT $(ratio "$hr" "$opt"), policy/LRU $(ratio "$hr" "$lru")," \
                        "to VRAM $(field "$line" to_vram_bytes) B, to host $(field "$line" to_host_bytes) B," \
                        "stall $(field "$line" stall_ms) ms"
                check "$name $p: budget never exceeded but by the capture margin" \
                        [ "$(field "$line" peak_charged_bytes)" -le $(($(field "$line" budget_bytes) + $(field "$line" margin_bytes))) ]
                check "$name $p: bytes moved consistent with residency" [ "$(field "$line" consistent)" = yes ]
                check "$name $p: every access counted" \
                        [ "$(field "$line" accesses)" = "$(field "$(grep '^policy=opt ' <<<"$out")" accesses)" ]
                ge "$opt" "$hr" || diag "$name $p: hit rate above demand-paging MIN ($hr > $opt): loaded ahead of use"

        done < <(grep '^policy=' <<<"$out")
        hr=$(field "$(grep "^policy=$DEFAULT " <<<"$out")" hit_rate)
        diag "$name: $DEFAULT at $(ratio "$hr" "$opt") of OPT's hit rate"
        ge "$hr" "$lru" || below_lru=$((below_lru + 1))
done
check "there are traces" [ "$n_traces" -ge 5 ]
diag "$DEFAULT is below LRU on $below_lru of $n_traces traces"

# [policy] overlap on zipf-sessions, where every session switch evicts a
# session before the next one fits: promotions that run ahead of those
# evictions hit more, and VRAM goes over the budget by at most the overlap.
# With every access seen (--observe=all) and no capture margin, as the
# overlap was measured; hybrid, the policy that uses it most.
zipf=$top_srcdir/tests/traces/zipf-sessions.trace
zb=$(sed -n 's/^# budget: //p' "$zipf" | head -n 1)
OV="--observe=all --margin=0 -p hybrid"
base=$("$SIM" --budget="$zb" $OV "$zipf" | grep "^policy=hybrid ")
over=$("$SIM" --budget="$zb" --overlap=64M $OV "$zipf" | grep "^policy=hybrid ")
zopt=$(field "$("$SIM" --budget="$zb" $OV "$zipf" | grep '^policy=opt ')" hit_rate)
diag "zipf-sessions hybrid, overlap 64M: hit rate $(field "$over" hit_rate) ($(ratio "$(field "$over" hit_rate)" "$zopt") of OPT)" \
        "against $(field "$base" hit_rate) without; peak $(field "$over" peak_charged_bytes) B, budget $(field "$over" budget_bytes) B"
check "overlap: hit rate above the same run without it" ge "$(field "$over" hit_rate)" "$(awk -v h="$(field "$base" hit_rate)" 'BEGIN { print h + 0.01 }')"
check "overlap: VRAM went over the budget" [ "$(field "$over" peak_charged_bytes)" -gt "$(field "$over" budget_bytes)" ]
check "overlap: by at most the overlap" [ "$(field "$over" peak_charged_bytes)" -le $(($(field "$over" budget_bytes) + (64 << 20))) ]
check "overlap: bytes moved consistent with residency" [ "$(field "$over" consistent)" = yes ]

# Exact figures on a trace small enough to work out by hand: 4 chunks read
# twice, 100 ms apart, budget 4 chunks.  Under the oracle model regions
# start in host memory: the first reads miss (nothing is in VRAM yet), the
# second hit for OPT and for any policy that promoted them.
printf 'kvtier-trace 1\nR 1 4\nA 0 1 0 4\nA 100000000 1 0 4\n' >"$TMP/tiny.trace"
out=$("$SIM" --budget=8M --observe=all -p lru,hybrid "$TMP/tiny.trace")
check "tiny: OPT hit rate is 0.5 (4 compulsory misses, 4 hits)" \
        [ "$(field "$(grep '^policy=opt ' <<<"$out")" hit_rate)" = 0.5000 ]
check "tiny: lru hit rate is 0.5" [ "$(field "$(grep '^policy=lru ' <<<"$out")" hit_rate)" = 0.5000 ]
check "tiny: lru moved exactly the 4 chunks in" \
        [ "$(field "$(grep '^policy=lru ' <<<"$out")" to_vram_bytes)" = $((4 << 21)) ]
out=$("$SIM" --budget=4M --observe=all -p lru "$TMP/tiny.trace")
check "tiny: with 2 chunks of budget OPT keeps 2 (hit rate 0.25)" \
        [ "$(field "$(grep '^policy=opt ' <<<"$out")" hit_rate)" = 0.2500 ]
# What the daemon sees: a region that fits the budget starts in VRAM, where
# every read hits and nothing faults or moves.
line=$("$SIM" --budget=8M -p demand "$TMP/tiny.trace" | grep '^policy=demand ')
check "tiny, signals: a region within the budget starts in VRAM: hit rate 1" [ "$(field "$line" hit_rate)" = 1.0000 ]
nothing_moved() { [ "$(field "$line" faults)" = 0 ] && [ "$(field "$line" to_vram_bytes)" = 0 ] && [ "$(field "$line" to_host_bytes)" = 0 ]; }
check "tiny, signals: nothing faulted or moved" nothing_moved
# ... and beyond it in host memory: the first read of each chunk faults (a
# use the daemon sees a signal delay later) and maps it.  Two chunks go into
# the two free chunks of the budget, the other two are read in place and
# fault again each time they are re-armed: they are demands, but the first
# region's two chunks, never used, sit in VRAM, and nothing seen of a chunk
# in VRAM proves it cold.  Without probes they stay: every later read hits
# two chunks of four.
printf 'kvtier-trace 1\nR 1 2\nR 2 4\n' >"$TMP/tiny2.trace"
for t in 0 400 800 1200 1600; do printf 'A %d 2 0 4\n' $((t * 1000000)) >>"$TMP/tiny2.trace"; done
line=$("$SIM" --budget=8M --margin=0 --probes=0 -p demand "$TMP/tiny2.trace" | grep '^policy=demand ')
faults_rearmed() { [ "$(field "$line" faults)" = 12 ] && [ "$(field "$line" rearmed)" = 8 ]; }
check "tiny, signals: past the budget a region starts in host memory: 4 first touches, 8 re-armed touches fault" \
        faults_rearmed
two_in() { [ "$(field "$line" to_vram_bytes)" = $((2 << 21)) ] && [ "$(field "$line" to_host_bytes)" = 0 ]; }
check "tiny, signals, no probes: two promoted into the free room, the unused region not displaced" two_in
check "tiny, signals, no probes: two of four hit in each later read" [ "$(field "$line" hits)" = 8 ]
# With probes (the default) one of the first region's chunks is evicted as a
# probe, goes unused past its window, and its cohort is found cold: the
# demands displace it and the last reads hit all four.
line=$("$SIM" --budget=8M --margin=0 -p demand "$TMP/tiny2.trace" | grep '^policy=demand ')
check "tiny, signals, probes: a probe of the unused region expired" [ "$(field "$line" probes_expired)" -ge 1 ]
check "tiny, signals, probes: more hits than without (12 of 20)" [ "$(field "$line" hits)" = 12 ]
check "tiny, signals, probes: bytes moved consistent with residency" [ "$(field "$line" consistent)" = yes ]

# A mapped eviction leaves its chunks' sample pages unmapped: their next use
# faults with no re-arm.  Region 2 (host memory) is used until it displaces
# region 1 (VRAM, unused, found cold by a probe), which goes to mapped host
# memory.  Without a later read of region 1, every re-arm is one of region
# 2's, each followed by a fault beyond their 2 first touches, but for one
# of each of region 1's two chunks, which verifies its eviction
# (policy_chunk_unverified()).  A read of region 1 at the end faults once a
# chunk, and no other re-arm comes before it.
printf 'kvtier-trace 1\nR 1 2\nR 2 2\n' >"$TMP/armed.trace"
for t in 0 400 800 1200 1600; do printf 'A %d 2 0 2\n' $((t * 1000000)) >>"$TMP/armed.trace"; done
base=$("$SIM" --budget=4M --margin=0 -p demand "$TMP/armed.trace" | grep '^policy=demand ')
printf 'A 2400000000 1 0 2\n' >>"$TMP/armed.trace"
line=$("$SIM" --budget=4M --margin=0 -p demand "$TMP/armed.trace" | grep '^policy=demand ')
check "armed: region 1 was evicted" [ "$(field "$base" to_host_bytes)" = $((2 << 21)) ]
check "armed: every re-arm was region 2's, followed by a fault, or verified region 1's eviction once" \
        [ "$(field "$base" rearmed)" = $(($(field "$base" faults) - 2 + 2)) ]
check "armed: region 1's read faults once a chunk" [ "$(field "$line" faults)" = $(($(field "$base" faults) + 2)) ]
check "armed: with no re-arm before it but the verifying one" [ "$(field "$line" rearmed)" = "$(field "$base" rearmed)" ]

# A use within a mapped eviction's quiet window (POLICY_EVICT_QUIET_MS after
# it) is taken for the eviction's own mapping, as the registry takes it
# (policy_own_mapping()): no use, no refault (the chunk is booked mapped).
# Region 2 (host memory), read every 10 ms, displaces region 1 (VRAM,
# unused, found cold by a probe) at 440-450 ms of this trace.  A read of
# region 1 at 470 ms is in the window, one at 550 ms past it: a refault.
quiet_run() {
        { printf 'kvtier-trace 1\nR 1 2\nR 2 2\n'
          { for t in $(seq 0 10 1500); do printf 'A %d 2 0 2\n' $((t * 1000000)); done
            printf 'A %d 1 0 2\n' $(($1 * 1000000)); } | sort -k2,2n; } >"$TMP/quiet.trace"
        "$SIM" --budget=4M --margin=0 -p demand "$TMP/quiet.trace" | grep '^policy=demand '
}
maps_refaults() { [ "$(field "$line" own_maps)" = "$1" ] && [ "$(field "$line" refaults)" = "$2" ]; }
line=$(quiet_run 470)
check "quiet window: region 1 was evicted" [ "$(field "$line" to_host_bytes)" = $((2 << 21)) ]
check "quiet window: a read 20-30 ms after it is the eviction's own mapping, no refault" maps_refaults 2 0
line=$(quiet_run 550)
check "quiet window: a read 100-110 ms after the eviction is a refault" maps_refaults 0 2

# An eviction's advice is paid once a chunk, at its first eviction (the
# shim keeps it): two halves of a region of 4 chunks take turns in a budget
# of 2, every chunk goes out several times, and 4 evictions are advised.
{ printf 'kvtier-trace 1\nR 1 4\n'; for k in $(seq 0 9); do printf 'A %d 1 %d 2\n' $((k * 100000000)) $(((k % 2) * 2)); done; } \
        >"$TMP/twice.trace"
line=$("$SIM" --budget=4M --margin=0 --observe=all -p lru "$TMP/twice.trace" | grep '^policy=lru ')
check_gt "advice once: chunks evicted more than once" "$(($(field "$line" to_host_bytes) >> 21))" 4
check "advice once: 4 evictions advised, one a chunk" [ "$(field "$line" advised)" = 4 ]
# A region that starts in VRAM was advised at its capture: two regions of 4
# chunks in a budget of 4 take turns, and only the second's chunks (which
# started in host memory) are advised, at their first eviction.
{ printf 'kvtier-trace 1\nR 1 4\nR 2 4\n'; for k in $(seq 0 9); do printf 'A %d %d 0 4\n' $((k * 100000000)) $((k % 2 + 1)); done; } \
        >"$TMP/prepared.trace"
line=$("$SIM" --budget=8M --margin=0 -p lru "$TMP/prepared.trace" | grep '^policy=lru ')
check_gt "advice at the capture: both regions' chunks evicted" "$(($(field "$line" to_host_bytes) >> 21))" 8
check "advice at the capture: the 4 chunks that started in host memory advised, none of the others" \
        [ "$(field "$line" advised)" = 4 ]

# Samples wait in the evictors' queue, as the shim makes them, and a tick
# orders no more probe cohorts than its share (8) beside those in flight,
# as the daemon's planner: region 1 in VRAM and region 2 in host memory,
# 256 chunks each, both read every 10 ms for 2 s, so that region 2's
# demands wait and region 1 is probed.  At 100 ms a probed chunk, no more
# than 20 chunks are made in the run, so at most 8 cohorts of 8 chunks
# beside them are ordered (the old model, making them at once: 256).  A
# probe is timed from its making: region 1 is in use, none of its probes
# expires, however long it queued.
{ printf 'kvtier-trace 1\nR 1 256\nR 2 256\n'
  for t in $(seq 0 10 1990); do printf 'A %d 1 0 256\nA %d 2 0 256\n' $((t * 1000000)) $((t * 1000000)); done; } \
        >"$TMP/queue.trace"
slow=$("$SIM" --budget=512M --margin=0 -p demand --probe-us=100000 "$TMP/queue.trace" | grep '^policy=demand ')
fast=$("$SIM" --budget=512M --margin=0 -p demand "$TMP/queue.trace" | grep '^policy=demand ')
check_gt "sample queue: probed" "$(field "$slow" probes)" 0
check "sample queue: slow probes, no more ordered than made and a share in flight" \
        [ "$(field "$slow" probes)" -le $((20 + 8 * 8)) ]
check_gt "sample queue: more probes where they are made sooner" "$(field "$fast" probes)" "$(field "$slow" probes)"
check "sample queue: a probe is timed from its making, none of a region in use expires" \
        [ "$(field "$slow" probes_expired)" = 0 ]
check "sample queue: every sample ordered is made (its counts balance)" [ "$(field "$slow" consistent)" = yes ]

# Probes sweep VRAM on a lap of their own: region 1 (128 chunks) fills the
# budget, its first 96 chunks read every 10 ms and its last 32 never again;
# region 2 (64 chunks, in host memory) is read as often, its demands
# waiting for room.  The probes must reach past the twelve cohorts in use
# to the four cold ones: all 32 cold chunks found (expired) and replaced by
# demands.  With probes taken near the re-arms' cursor, 8 were found.
{ printf 'kvtier-trace 1\nR 1 128\nR 2 64\n'
  for t in $(seq 0 10 1990); do printf 'A %d 1 0 96\nA %d 2 0 64\n' $((t * 1000000)) $((t * 1000000)); done; } \
        >"$TMP/sweep.trace"
line=$("$SIM" --budget=256M --margin=0 -p demand "$TMP/sweep.trace" | grep '^policy=demand ')
check "probe sweep: the 32 cold chunks found past the cohorts in use" [ "$(field "$line" probes_expired)" -ge 32 ]
check "probe sweep: and their room given to demands" [ "$(field "$line" to_vram_bytes)" -ge $((32 << 21)) ]

# A measured window counts only the accesses the trace times within it:
# five reads of four chunks 400 ms apart, from 300 to 1300 ms: the reads at
# 400, 800 and 1200 (12 chunk accesses) over a span of 1000 ms.
line=$("$SIM" --budget=8M --margin=0 -p demand --measure-ms=300:1300 "$TMP/tiny2.trace" | grep '^policy=demand ')
check "measure: only the window's accesses count" [ "$(field "$line" accesses)" = 12 ]
check "measure: the window's span" [ "$(field "$line" span_ms)" = 1000.000 ]
all=$("$SIM" --budget=8M --margin=0 -p demand "$TMP/tiny2.trace" | grep '^policy=demand ')
check "measure: the whole trace otherwise" [ "$(field "$all" accesses)" = 20 ]
check "open loop: the trace's times as they are" [ "$(field "$all" delay_ms)" = 0.000 ]
# Closed loop: each record comes later by the stalls before it, so that the
# run's delay is all its stalls.  A region of 64 chunks past a budget of
# 8 that another fills, read whole every millisecond for 500: open, the
# reads outrun the ticks that would find the other cold; closed, each
# read's stalls give the daemon its ticks (232 hits against 2,984).
{ printf 'kvtier-trace 1\nR 1 8\nR 2 64\n'; for t in $(seq 0 499); do printf 'A %d 2 0 64\n' $((t * 1000000)); done; } >"$TMP/slow.trace"
open=$("$SIM" --budget=16M --margin=0 -p demand "$TMP/slow.trace" | grep '^policy=demand ')
closed=$("$SIM" --budget=16M --margin=0 -p demand --closed-loop "$TMP/slow.trace" | grep '^policy=demand ')
check "closed loop: the delay is the run's stalls" [ "$(field "$closed" delay_ms)" = "$(field "$closed" stall_ms)" ]
check_gt "closed loop: the stalls delayed the run" "$(field "$closed" delay_ms | cut -d. -f1)" 0
check_gt "closed loop: more ticks, more of the region in VRAM when read" \
        "$(field "$closed" hits)" "$(field "$open" hits)"
for bad in 5:3 x 3: -1 5:-2; do
        "$SIM" --measure-ms=$bad "$TMP/tiny2.trace" >/dev/null 2>&1
        check "measure: --measure-ms=$bad is a usage error" [ $? = 2 ]
done

# A bad trace is an error that names file:line.
printf 'kvtier-trace 1\nR 1 4\nA 10 1 3 2\n' >"$TMP/bad.trace"
out=$("$SIM" "$TMP/bad.trace" 2>&1); rc=$?
named() { [ $rc -eq 1 ] && grep -q "bad.trace:3:.*outside" <<<"$out"; }
check "a run outside its region is rejected with file:line" named
printf 'kvtier-trace 1\nR 1 4\nA 10 1 0 1\nA 9 1 0 1\n' >"$TMP/back.trace"
out=$("$SIM" "$TMP/back.trace" 2>&1); rc=$?
named() { [ $rc -eq 1 ] && grep -q "back.trace:4:.*goes back" <<<"$out"; }
check "time going back is rejected with file:line" named
printf 'kvtier-trace 2\n' >"$TMP/v2.trace"
out=$("$SIM" "$TMP/v2.trace" 2>&1); rc=$?
check "another version is rejected" [ $rc -eq 1 ]
"$SIM" --budget=lots "$TMP/bad.trace" >/dev/null 2>&1; rc=$?
check "a bad option exits 2" [ $rc -eq 2 ]
done_testing
