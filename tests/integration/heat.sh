#!/bin/bash
# Access heat through the shared heat table: a fake engine reads a window
# of its oldest allocation through kernel launches and never hints; the
# daemon learns of it only from the table's counters, and promotes that
# window over newer, untouched memory under a budget that cannot hold all.
# With KVTIER_HEAT=off the same run leaves the window out of VRAM.
. "$(dirname "$0")/lib.sh"

ARGS="--regions 4 --region-size 64M --window 16M --steps 50 --step-ms 15"

# run_polled NAME [INDEX]: the engine under the shim while kvtierctl polls;
# prints the VRAM of the engine's INDEXth region (default 0, the first) in
# the last poll of its decode (with POLL_MAX=1, the most of any poll) (early polls are skipped: while the first
# region is alone, the daemon promotes it whatever its heat; so are polls
# after the decode, when the engine's final check reads everything).  The window
# (16M) starts in the first region and slides 2M a step into the second.
run_polled() {
        local name="$1" idx="${2:-0}" last= v
        run_engine "$name" $ARGS &
        local engine=$!
        while kill -0 $engine 2>/dev/null; do
                grep -q 'steps took' "$TMP/$name.out" && break
                v=$(status_json 2>/dev/null |
                    jq 'if ([.clients[].regions | length] | max // 0) == '"${REGIONS:-4}"'
                        then [.clients[].regions['"$idx"'].vram_bytes] | max else empty end' 2>/dev/null)
                if [ -n "$v" ] && { [ -z "${POLL_MAX:-}" ] || [ -z "$last" ] || [ "$v" -gt "$last" ]; }; then last=$v; fi
                sleep 0.02
        done
        wait $engine || { diag "engine $name failed:"; diag "$(cat "$TMP/$name.out")"; }
        echo "${last:-no-poll}" # no poll in the decode: no evidence, and every check on it fails
}

# LRU without prefetch places by the last touch alone, so what lands in VRAM
# shows directly which touches the sampler delivered; how the other policies
# weigh them (and what prefetch adds) is tests/unit/test-policy's and
# tests/traces/sim.sh's business.
# Host-mapped eviction (not the default): the checks below are about which
# touches the sampler delivers, and a chunk evicted unmapped faults on its
# next touch (the evict_to checks at the end set that live).
write_config 64M "[policy]" "name = lru" "prefetch = none" "evict_to = host-mapped"
check "kvtierd starts" start_daemon

hot=$(ENGINE_ENV="KVTIER_HEAT=launch" run_polled launch)
check_gt "launch heat: the touched window of the oldest region is in VRAM at the end" "$hot" $((8 << 20))
check "launch heat: pattern intact" grep -q "mismatched words 0" "$TMP/launch.out"

# launch_rates NAME: the engine under the shim while kvtierctl polls;
# prints the most launches a tick (in thousandths) status showed for its
# first region (the window's, launched on every step), its second (the
# window slides into it) and its last (never), and how many polls showed
# all four regions.
launch_rates() {
        local name="$1" first=0 second=0 last=0 polls=0 v a b c
        run_engine "$name" $ARGS &
        local engine=$!
        while kill -0 $engine 2>/dev/null; do
                v=$(status_json 2>/dev/null |
                    jq -r '[.clients[].regions[]] | if length == 4 then
                           "\(.[0].launches_per_tick * 1000 | floor) \(.[1].launches_per_tick * 1000 | floor) \(.[3].launches_per_tick * 1000 | floor)"
                           else empty end' 2>/dev/null)
                if [ -n "$v" ]; then
                        read -r a b c <<<"$v"
                        polls=$((polls + 1))
                        [ "$a" -gt "$first" ] && first=$a
                        [ "$b" -gt "$second" ] && second=$b
                        [ "$c" -gt "$last" ] && last=$c
                fi
                sleep 0.02
        done
        wait $engine || { diag "engine $name failed:"; diag "$(cat "$TMP/$name.out")"; }
        echo "$first $second $last $polls"
}
read -r first second last polls <<<"$(ENGINE_ENV="KVTIER_HEAT=launch" launch_rates rates)"
check_gt "launch counts: status polled with the engine's four regions" "$polls" 0
check_gt "launch counts: status shows the launched region's launches a tick (thousandths)" "$first" 0
check_gt "launch counts: and the next one's, which the window slides into (each region its own slot)" "$second" 0
check_le "launch counts: and none for a region no kernel was launched on" "$last" 0
read -r first second last polls <<<"$(ENGINE_ENV="KVTIER_HEAT=off" launch_rates rates-off)"
check_gt "launch counts, KVTIER_HEAT=off: status polled with the engine's four regions" "$polls" 0
check_le "launch counts: with KVTIER_HEAT=off, none" "$first" 0

hot=$(ENGINE_ENV="KVTIER_HEAT=launch FAKE_ENGINE_LAUNCH=driver" run_polled driver)
check_gt "cuLaunchKernel heat: the window is in VRAM at the end" "$hot" $((8 << 20))

hot=$(ENGINE_ENV="KVTIER_HEAT=launch FAKE_ENGINE_LAUNCH=procaddr" run_polled procaddr)
check_gt "cuLaunchKernel through cuGetProcAddress heat: the window is in VRAM at the end" "$hot" $((8 << 20))

# As the CUDA runtime reaches the driver: libcuda dlopen'd RTLD_LOCAL, its
# cuLaunchKernel fetched through cuGetProcAddress_v2.  The shim's wrapper
# must resolve the real function, not itself (it recursed until the stack
# overflowed, and a real PyTorch-free engine hung on the H200).
env LD_PRELOAD="$PRELOAD" KVTIER_SOCKET="$SOCK" KVTIER_MIN_SIZE=16M KVTIER_HEAT=launch \
        KVTIER_DEBUG=heat-stats="$TMP/local.heat" timeout 30 "$top_builddir/tests/integration/local-driver" \
        >"$TMP/local.out" 2>&1; rc=$?
check "launch through a RTLD_LOCAL driver's cuGetProcAddress: exits 0" [ $rc -eq 0 ]
[ $rc -eq 0 ] || diag "exit $rc: $(cat "$TMP/local.out")"
check_gt "and the shim saw its launches" "$(jq -s 'map(.launches // 0) | max' "$TMP/local.heat" 2>/dev/null || echo 0)" 3
# The engine closes its handle after fetching the launch: the shim's tables
# point into the driver, so the shim keeps it loaded.
"$top_builddir/tests/integration/local-driver" dlclose >"$TMP/local-plain.out" 2>&1
check "without the shim that dlclose unloads the driver" grep -q "is unloaded" "$TMP/local-plain.out"
env LD_PRELOAD="$PRELOAD" KVTIER_SOCKET="$SOCK" KVTIER_MIN_SIZE=16M KVTIER_HEAT=launch \
        timeout 30 "$top_builddir/tests/integration/local-driver" dlclose >"$TMP/local-close.out" 2>&1; rc=$?
check "under the shim the driver stays loaded, and launches go on after the dlclose" [ $rc -eq 0 ]
[ $rc -eq 0 ] || diag "exit $rc: $(cat "$TMP/local-close.out")"

hot=$(ENGINE_ENV="KVTIER_HEAT=launch FAKE_ENGINE_LAUNCH=stub" run_polled stub)
check_gt "__cudaLaunchKernel (CUDA 13 nvcc stubs) heat: the window is in VRAM at the end" "$hot" $((8 << 20))

# A HOT hint stands until COLD or DONE (kvtier.h): the newest region, hinted
# once, keeps the whole budget while launch heat pulls at the window; not
# hinted, it loses VRAM to the window.  (A HOT hint that went to the heat
# table counted as one access, decayed within a half-life and lost.)
ARGS="$ARGS --hot-region 3"
hot=$(ENGINE_ENV="KVTIER_HEAT=launch,hint" run_polled hot-hint 3)
ARGS="${ARGS% --hot-region 3}"
check "HOT hint: pattern intact" grep -q "mismatched words 0" "$TMP/hot-hint.out"
check "HOT hint: the hinted region holds the budget at the end (bytes in VRAM)" [ "$hot" -eq $((64 << 20)) ]
hot=$(ENGINE_ENV="KVTIER_HEAT=launch,hint" run_polled hot-none 3)
check "no hint: the same region lost VRAM to the window" [ "$hot" -lt $((64 << 20)) ]
# The standing order outlives the daemon: one restarted under the engine is
# told HOT again when the shim registers the region with it.
# The daemon goes once the engine has registered its regions (the hint
# follows them at once), not after a fixed second: under ThreadSanitizer the
# engine's set-up alone has taken longer, and a hint first given to the new
# daemon is not told "again".  400 steps of 15 ms outlast the restart and
# the shim's reconnect.
ENGINE_ENV="KVTIER_HEAT=launch,hint KVTIER_LOG=info" run_engine hot-restart $ARGS --hot-region 3 --steps 400 &
engine=$!
status_when '[.clients[].regions | length] | max' 4 >/dev/null
sleep 0.3
kill -KILL "$DAEMON_PID"; wait "$DAEMON_PID" 2>/dev/null
check "kvtierd restarts under the engine" start_daemon
hot=no-poll
while kill -0 $engine 2>/dev/null && ! grep -q 'steps took' "$TMP/hot-restart.out"; do
        v=$(status_json 2>/dev/null | jq '[.clients[].regions | select(length == 4) | .[3].vram_bytes] | max // empty' 2>/dev/null)
        [ -n "$v" ] && hot=$v
        sleep 0.02
done
wait $engine; rc=$?
check "HOT across a daemon restart: engine exits 0" [ $rc -eq 0 ]
check "HOT across a daemon restart: the shim told the new daemon" grep -q "standing hints told to kvtierd again" "$TMP/hot-restart.out"
check "HOT across a daemon restart: the region holds the new daemon's budget at the end" [ "$hot" -eq $((64 << 20)) ]

cold=$(ENGINE_ENV="KVTIER_HEAT=off" run_polled off)
check_le "without heat the window is out of VRAM at the end (newer regions rank first)" "$cold" 0

cold=$(ENGINE_ENV="KVTIER_HEAT=launch FAKE_ENGINE_LAUNCH=direct" run_polled direct)
check_le "kernels not launched through the hooks give no heat" "$cold" 0

# CUPTI, with the daemon's defaults (demand): captures past the budget start
# in host memory, unmapped, and the engine's fill maps them all (a fault a
# chunk, then reads in place); the daemon's sampler re-arms mapped chunks,
# so the window's reads fault again where it goes, and the faults alone are
# the heat (the fake libcupti turns faults and migrations into CUPTI
# records).  The first region starts in VRAM; the window moves on into the
# second, and the first region's chunks it left are known cold only once a
# probe of them went unused for its window (2 x protect_min, 400 ms): the
# window slides at a quarter of the speed (60 ms a step) for that, on a
# loaded machine too.  Three regions, not four: four of one size would be
# siblings (policy/siblings.h), which tell the first region's chunks cold
# without a probe, and the probes are what this run checks
# (tests/unit/test-siblings covers the siblings).
check "kvtierd stops for a run with its defaults" stop_daemon
write_config 64M
check "kvtierd starts with its defaults" start_daemon
ARGS="${ARGS/--step-ms 15/--step-ms 60}"
ARGS="${ARGS/--regions 4/--regions 3}"
hot=$(ENGINE_ENV="KVTIER_HEAT=cupti KVTIER_DEBUG=heat-stats=$TMP/cupti.heat" REGIONS=3 POLL_MAX=1 run_polled cupti 1)
ARGS="${ARGS/--step-ms 60/--step-ms 15}"
check "cupti: pattern intact" grep -q "mismatched words 0" "$TMP/cupti.out"
cs() { jq -s "last | .$1" "$TMP/cupti.heat"; }
check "cupti: libcupti found and configured" [ "$(cs cupti_loaded)" = true ]
check_gt "cupti: GPU fault records attributed to captured chunks" "$(cs gpu_fault_attributed)" 0
check_gt "cupti: HtoD records attributed (statistics only)" "$(cs htod_attributed)" 0
check_gt "cupti: remote-map records attributed (a fault's map names its page)" "$(cs remote_map_attributed)" 0
check "cupti: every heat touch came from a fault or remote-map record" \
        [ "$(cs heat_touches)" -eq "$(( $(cs gpu_fault_attributed) + $(cs remote_map_attributed) ))" ]
check_gt "cupti: re-armed chunks faulted again: more faults than chunks" "$(cs gpu_fault_attributed)" 128
check "cupti: no record dropped (the shim's buffers to spare)" [ "$(cs dropped)" = 0 ]
s=$(status_json)
check_gt "cupti: the daemon re-armed chunks" "$(jq '.gpus[0].demand.rearmed_chunks' <<<"$s")" 0
# once the daemon has seen the engine go, what it had in flight was made or
# forgotten with its regions
gone=$(status_when '.clients | length' 0)
check "cupti: no re-arm counted in flight once the engine is gone" [ "$(jq '.gpus[0].demand.rearming_chunks' <<<"$gone")" = 0 ]
check "cupti: no probe counted in flight once the engine is gone" [ "$(jq '.gpus[0].demand.probing' <<<"$gone")" = 0 ]
check_gt "cupti: probes of chunks in VRAM came back (their page faulted)" "$(jq '.gpus[0].demand.probes_back' <<<"$s")" 0
check "cupti: the sampler's cost is reported (probe time)" [ "$(jq '.gpus[0].demand.probe_ms | type' <<<"$s")" = '"number"' ]
check_gt "cupti: and how often probes go out (one tick in so many, 20 ms ticks)" \
        "$(jq '.gpus[0].demand.probe_every_ms' <<<"$s")" 19
check "cupti: and shown" bash -c "'$KVTIERCTL' -s '$SOCK' status | grep -q 'ms in the shim'"
check "cupti: the samples in flight shown" \
        bash -c "'$KVTIERCTL' -s '$SOCK' status | grep -Eq 'ms in the shim, [0-9]+ chunks and [0-9]+ probes in flight'"
check_gt "cupti: mapped evictions' own remote maps were not taken for uses" \
        "$(jq '.gpus[0].demand.own_maps_ignored' <<<"$s")" 0
check_gt "cupti: fault heat brought the window into VRAM when it was in the second region" "$hot" $((8 << 20))
cold=$(ENGINE_ENV="KVTIER_HEAT=off" REGIONS=3 POLL_MAX=1 run_polled cupti-off 1)
ARGS="${ARGS/--regions 3/--regions 4}"
check_le "cupti off: the window never came into VRAM by the daemon's books" "$cold" 0
check "kvtierd stops" stop_daemon
write_config 64M "[policy]" "name = lru" "prefetch = none" "evict_to = host-mapped"
check "kvtierd starts again with lru" start_daemon

# Records CUPTI had no room for (a buffer of one record, none waiting for a
# flush) are uses never seen: heat-stats counts them, as CUPTI reports them,
# and the daemon shows them while the engine runs (the heat table's header).
ENGINE_ENV="KVTIER_HEAT=cupti FAKECUPTI_BUFFER_RECORDS=1 FAKECUPTI_PENDING=0 FAKECUPTI_STATS=$TMP/drop.fake \
KVTIER_DEBUG=heat-stats=$TMP/drop.heat" run_engine drop $ARGS --until "$TMP/drop.stop" &
drop_pid=$!
s=$(status_when '[.clients[] | .heat.lost_uses > 0] | any' true 20)
check_gt "dropped: the daemon's status shows the uses the engine's shim lost" \
        "$(jq '[.clients[] | .heat.lost_uses] | max // 0' <<<"$s")" 0
check_gt "dropped: and the metrics count them" \
        "$("$KVTIERCTL" -s "$SOCK" metrics | awk '/^kvtier_client_lost_uses_total\{/ { if ($2 > m) m = $2 } END { print m + 0 }')" 0
touch "$TMP/drop.stop"
wait $drop_pid
check "dropped: pattern intact" grep -q "mismatched words 0" "$TMP/drop.out"
check_gt "dropped: heat-stats counts the records CUPTI dropped" "$(jq -s 'last | .dropped' "$TMP/drop.heat")" 0
check_le "dropped: no more than the fake dropped" "$(jq -s 'last | .dropped' "$TMP/drop.heat")" \
        "$(jq -s 'last | .dropped' "$TMP/drop.fake")"

# Under a CUPTI tool (injected through CUDA_INJECTION64_PATH) kvtier keeps
# out; CUPTI merely loaded by the application does not stop it.
ENGINE_ENV="LD_PRELOAD=${PRELOAD// /:}:$FAKES/libcupti.so.13 KVTIER_HEAT=cupti KVTIER_DEBUG=heat-stats=$TMP/loaded.heat" \
        run_engine loaded $ARGS
check "CUPTI loaded by the application: kvtier still samples" \
        [ "$(jq -s 'last | .cupti_loaded' "$TMP/loaded.heat")" = true ]
ENGINE_ENV="CUDA_INJECTION64_PATH=/nonexistent/tool.so KVTIER_HEAT=cupti KVTIER_LOG=info KVTIER_DEBUG=heat-stats=$TMP/busy.heat" \
        run_engine busy $ARGS; rc=$?
check "CUPTI tool injected: engine exits 0" [ $rc -eq 0 ]
check "CUPTI tool injected: kvtier does not take CUPTI over" \
        [ "$(jq -s 'last | .cupti_loaded' "$TMP/busy.heat")" = false ]
check "and says so" grep -q "CUPTI is in use by a tool" "$TMP/busy.out"

# An unmapped host tier ([policy] evict_to = host, set live): chunks the
# daemon evicts lose the GPU's mapping, so when the window comes back to
# them the GPU's first touch faults, an access sample CUPTI reports.
# Evicted to host-mapped, they are mapped but for each chunk's sample page,
# so the window's return faults there too, once a chunk; the driver's maps
# of the rest of the chunk (named from its second page on) are no heat.
WRAP="--regions 4 --region-size 64M --window 16M --steps 200 --step-ms 4"
ENGINE_ENV="KVTIER_HEAT=cupti KVTIER_DEBUG=heat-stats=$TMP/ev-mapped.heat" run_engine ev-mapped $WRAP
check "evict_to host-mapped: engine exits 0, pattern intact" grep -q "mismatched words 0" "$TMP/ev-mapped.out"
check "kvtierctl set policy.evict_to host" "$KVTIERCTL" -s "$SOCK" set policy.evict_to host
check "status shows it" [ "$(status_json | jq -r '.policy_params.evict_to // empty')" = host ]
ENGINE_ENV="KVTIER_HEAT=cupti KVTIER_DEBUG=heat-stats=$TMP/ev-host.heat" run_engine ev-host $WRAP
check "evict_to host: engine exits 0, pattern intact" grep -q "mismatched words 0" "$TMP/ev-host.out"
faults_mapped=$(jq -s 'map(.gpu_fault_attributed) | max' "$TMP/ev-mapped.heat")
check_gt "evicted host-mapped: the window's return faults on the sample pages: more than a first touch a chunk" \
        "$faults_mapped" 128
maps=$(jq -s 'last | .remote_map' "$TMP/ev-mapped.heat")
check_gt "evicted host-mapped: the driver mapped the rest of each evicted chunk" "$maps" 128
check_gt "evicted host-mapped: those maps are no heat (a fault's map of a sample page is): fewer maps counted" \
        "$maps" "$(jq -s 'last | .remote_map_attributed' "$TMP/ev-mapped.heat")"
check_gt "evicted unmapped: the window's return faults too" \
        "$(jq -s 'map(.gpu_fault_attributed) | max' "$TMP/ev-host.heat")" 128
check_le "evicted unmapped: a touch maps, never migrates: the fake's peak within the budget" \
        "$(stat_of ev-host managed_resident_peak_bytes)" $((64 << 20))
check "kvtierctl set policy.evict_to host-mapped" "$KVTIERCTL" -s "$SOCK" set policy.evict_to host-mapped

# Remote-map records the fakes never make on their own (um-records.c): one
# that starts below the captured memory, one whose size runs far past it,
# one off the sample pages.  Counted: the sample pages each covers within
# captured memory, 2 + 31 chunks, and nothing else; at once.
env LD_PRELOAD="$PRELOAD" KVTIER_SOCKET="$SOCK" KVTIER_MIN_SIZE=16M KVTIER_HEAT=cupti \
        KVTIER_DEBUG=heat-stats="$TMP/records.heat" timeout 30 "$top_builddir/tests/integration/um-records" \
        >"$TMP/records.out" 2>&1; rc=$?
check "remote maps of odd ranges: exits 0 at once" [ $rc -eq 0 ]
[ $rc -eq 0 ] || diag "exit $rc: $(cat "$TMP/records.out")"
check "remote maps of odd ranges: the sample pages they cover counted, 33 chunks" \
        [ "$(jq -s 'map(.heat_touches) | max' "$TMP/records.heat" 2>/dev/null)" = 33 ]
check "remote maps of odd ranges: two of the three records counted" \
        [ "$(jq -s 'map(.remote_map_attributed) | max' "$TMP/records.heat" 2>/dev/null)" = 2 ]

check "no peer was dropped for its heat table" [ "$(grep -c 'heat table' "$TMP/kvtierd.log")" -eq 0 ]

# A remote map names a range: on the H200 a kernel's faults come as one
# record, and a record of the maps may cover many chunks (FAKECUDA_FAULT_BATCH
# makes each kernel's maps of adjacent memory one record).  Every chunk whose
# sample page the range covers is touched: the three regions captured beyond
# the 64M grant (96 chunks), each filled by one kernel, count one use a chunk
# at the least.  Counting the record's first address alone saw one chunk a
# region, and the rest of each region stayed unseen, mapped.  No sampler: only
# the fill's first touches are seen.
check "kvtierd stops" stop_daemon
write_config 64M "[policy]" "rearm_rate = 0" "probe_rate = 0"
check "kvtierd restarts without a sampler" start_daemon

# The engine fills each region as soon as it has it: the first touches of
# the 96 chunks captured beyond the grant come before the daemon has bound
# the region's counters (a tick or more after REGION_ADD).  Each is that
# chunk's only fault (it maps the chunk), so each must reach the daemon as a
# use in host memory: counted from zero, not from the counters at the
# binding (73-86 of the 96 were seen that way).
# faults_seen_since N STOP: the daemon's first touches in host memory since
# it counted N, once they reach 96 (or after 10 s, what there is); then
# STOP is made, which ends the engine (it steps on in VRAM until then, so
# that its regions live until the daemon has read their counters).
faults_seen_since() {
        local s
        s=$(status_when "(.gpus[0].demand.demand_faults // 0) - $1 >= 96" true 10)
        touch "$2"
        echo $(($(jq '.gpus[0].demand.demand_faults // 0' <<<"$s") - $1))
}
faults0=$(status_json | jq '.gpus[0].demand.demand_faults // 0')
ENGINE_ENV="KVTIER_HEAT=cupti" run_engine early --regions 4 --region-size 64M --window 2M --steps 0 \
        --until "$TMP/early.stop" &
engine=$!
check_gt "first touches at once: the daemon saw the first touch of every chunk beyond the grant" \
        "$(faults_seen_since "$faults0" "$TMP/early.stop")" 95
wait $engine; rc=$?
check "first touches at once: engine exits 0, pattern intact" rc_and $rc grep -q "mismatched words 0" "$TMP/early.out"
faults0=$(status_json | jq '.gpus[0].demand.demand_faults // 0')
ENGINE_ENV="FAKECUDA_FAULT_BATCH=1 KVTIER_HEAT=cupti KVTIER_DEBUG=heat-stats=$TMP/batch.heat" \
        run_engine batch --regions 4 --region-size 64M --window 2M --steps 0 --until "$TMP/batch.stop" &
engine=$!
check_gt "batched faults: the daemon saw the first touch of every chunk beyond the grant" \
        "$(faults_seen_since "$faults0" "$TMP/batch.stop")" 95
wait $engine; rc=$?
check "batched faults: engine exits 0, pattern intact" rc_and $rc grep -q "mismatched words 0" "$TMP/batch.out"
check_le "batched faults: the fake batched the fill's maps (a record a kernel, not a chunk)" \
        "$(jq -s 'last | .remote_map' "$TMP/batch.heat")" 8

# The trace recorder: format, order, bounds.
ENGINE_ENV="KVTIER_HEAT=launch KVTIER_DEBUG=trace=$TMP/engine.trace" run_engine traced $ARGS; rc=$?
check "traced run exits 0" [ $rc -eq 0 ]
check "trace starts with its magic line" [ "$(head -1 "$TMP/engine.trace")" = "kvtier-trace 1" ]
# trace_ok FILE MIN_A MIN_F: the kvtier-trace 1 format, R before A, chunks in
# range, times non-decreasing, nothing after F.
trace_ok() {
        awk -v min_a="$2" -v min_f="$3" '
        NR == 1 { if ($0 != "kvtier-trace 1") exit 1; next }
        /^#/ { next }
        $1 == "R" { if (NF != 3 || ($2 in n)) exit 1; n[$2] = $3; next }
        $1 == "A" { if (NF != 5 || !($3 in n) || ($3 in freed) || $2 < t || $4 + $5 > n[$3] || $5 < 1) exit 1;
                    t = $2; a++; next }
        $1 == "F" { if (NF != 3 || !($3 in n) || $2 < t) exit 1; t = $2; freed[$3] = 1; f++; next }
        { exit 1 }
        END { if (a < min_a || f < min_f) exit 1 }' "$1"
}
check "trace is well formed (R before A, chunks in range, times non-decreasing, F after A)" \
        trace_ok "$TMP/engine.trace" 50 1
for t in "$top_srcdir"/tests/traces/torch-*.trace; do
        check "checked-in trace $(basename "$t") is well formed" trace_ok "$t" 1 0
done
check_gt "trace records the accesses" "$(grep -c '^A ' "$TMP/engine.trace")" 49

check "kvtierd stops cleanly" stop_daemon
done_testing
