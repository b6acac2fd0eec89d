#!/bin/bash
# Issue 18, rows 3-5: what a client registers is bounded by quotas that
# are checked before the daemon allocates anything for it; orders a client
# never answers are taken back; one liar's device total moves no budget.
. "$(dirname "$0")/lib.sh"

ABUSE="$top_builddir/tests/integration/abuse"
ARGS="--regions 4 --region-size 64M --window 32M --steps 40 --step-ms 15 --hint"

# attack MODE: abuse's attack MODE in the background, its connection held
# until $TMP/hold-MODE exists; returns once it said its piece.
attack() {
        rm -f "$TMP/hold-$1"
        "$ABUSE" "$SOCK" "$1" "$TMP/hold-$1" >"$TMP/$1.out" 2>&1 &
        ATTACK_PID=$!
        for _ in $(seq 200); do
                grep -q "attack sent" "$TMP/$1.out" && return 0
                sleep 0.05
        done
        diag "abuse $1 said nothing"; return 1
}
attack_end() { touch "$TMP/hold-$1"; wait "$ATTACK_PID"; }

rss_kib() { awk '/^VmRSS:/ { print $2 }' "/proc/$DAEMON_PID/status"; }
ms() { echo $(( $(date +%s%N) / 1000000 )); }

# --- Row 3: 40 REGION_ADDs of 16 TiB each ---------------------------------
write_config 64M
check "kvtierd starts" start_daemon
rss0=$(rss_kib)
check "abuse sends 40 REGION_ADDs of 16 TiB" attack huge-adds
t0=$(ms)
s=$(status_json); rc=$?
t1=$(ms)
check "status answers right after the adds" [ $rc -eq 0 ]
check_le "and within 2 s: the adds did not block the event loop" $((t1 - t0)) 2000
check_le "daemon RSS grew by less than 16 MiB" $(( $(rss_kib) - rss0 )) 16384
check "all 40 were refused" [ "$(echo "$s" | jq .connections.regions_refused)" = 40 ]
check "the hostile client stays connected, holding nothing" \
        [ "$(echo "$s" | jq '[.clients[] | select(.name == "huge-adds") | .regions | length] == [0]')" = true ]
check "the refusal is logged, naming the quota" grep -q "past \[daemon\] max_registered" "$TMP/kvtierd.log"
run_engine good $ARGS; rc=$?
check "a good engine beside it exits 0" [ $rc -eq 0 ]
check "its pattern is intact" grep -q "mismatched words 0" "$TMP/good.out"
check_gt "and its regions were tiered" "$(status_json | jq .migrations.orders_done)" 0
attack_end huge-adds
check "kvtierd stops cleanly" stop_daemon

# A quota a real engine runs into: the regions past it stay as CUDA made
# them (fail open), the rest are tiered, the data is intact.
write_config 64M "[daemon]" "max_registered_per_client = 128M"
check "kvtierd starts with max_registered_per_client = 128M" start_daemon
run_engine capped $ARGS; rc=$?
check "an engine past its quota exits 0" [ $rc -eq 0 ]
check "its pattern is intact" grep -q "mismatched words 0" "$TMP/capped.out"
check "two of its four regions were refused" [ "$(status_json | jq .connections.regions_refused)" = 2 ]
check "the shim's REGION_DEL of a refused region is no error" \
        bash -c "! grep -q 'REGION_DEL for unknown region' '$TMP/kvtierd.log'"
check "kvtierd stops cleanly" stop_daemon

# [client.NAME] max_registered: in place of the [daemon] quotas, for its processes.
write_config 64M "[daemon]" "max_registered_per_client = 128M" "[client.capped]" "uid = $(id -u)" \
        "max_registered = 64M"
check "kvtierd starts with [client.capped] max_registered = 64M" start_daemon
run_engine sectioned $ARGS; rc=$?
check "an engine past its section's quota exits 0, pattern intact" \
        rc_and $rc grep -q "mismatched words 0" "$TMP/sectioned.out"
check "three of its four regions were refused" [ "$(status_json | jq .connections.regions_refused)" = 3 ]
check "the refusal names the section's key" grep -q "past \[client.capped\] max_registered" "$TMP/kvtierd.log"
check "kvtierd stops cleanly" stop_daemon

# max_regions_per_client: the 3rd of 4 regions is refused.
write_config 64M "[daemon]" "max_regions_per_client = 2"
check "kvtierd starts with max_regions_per_client = 2" start_daemon
run_engine few $ARGS; rc=$?
check "an engine past its region count exits 0, pattern intact" rc_and $rc grep -q "mismatched words 0" "$TMP/few.out"
check "two of its regions were refused" [ "$(status_json | jq .connections.regions_refused)" = 2 ]
check "the refusal names max_regions_per_client" grep -q "past \[daemon\] max_regions_per_client" "$TMP/kvtierd.log"
check "kvtierd stops cleanly" stop_daemon

# --- Row 4: 1 GiB registered as in VRAM, orders never answered -------------
# wait_for SECONDS JQ: polls status until JQ prints true.
wait_for() {
        local n=$(($1 * 20))
        for _ in $(seq $n); do
                [ "$(status_json 2>/dev/null | jq "$2")" = true ] && return 0
                sleep 0.05
        done
        return 1
}
squat='[.clients[] | select(.name == "vram-squat") | .vram_bytes]'

# The squatter's orders come once a good engine wants VRAM: it runs
# beside it, long enough for the timeouts, while status is polled.
LONG="--regions 4 --region-size 64M --window 64M --steps 200 --step-ms 20 --hint"
squat_run() {
        run_engine "$1" $LONG &
        engine=$!
        good_vram=0 squat_back=false
        while kill -0 $engine 2>/dev/null; do
                s=$(status_json 2>/dev/null) || continue
                v=$(echo "$s" | jq '[.clients[] | select(.name == "kv-engine") | .vram_bytes] | max // 0')
                [ "${v:-0}" -gt "$good_vram" ] && good_vram=$v
                [ "$(echo "$s" | jq "$squat | max // 0")" = 0 ] && squat_back=true
                sleep 0.05
        done
        wait $engine
}

write_config 256M "[daemon]" "order_timeout_ms = 2000" "max_order_timeouts = 1000000"
check "kvtierd starts with order_timeout_ms = 2000" start_daemon
check "abuse registers 1 GiB as already in VRAM" attack vram-squat
check "it is booked in VRAM only as far as its grant: the budget" \
        wait_for 2 "$squat == [$((256 << 20))] and .gpus[0].charged_bytes == $((256 << 20))"
squat_run squatted; rc=$?
check "a good engine beside the squatter exits 0, pattern intact" \
        rc_and $rc grep -q "mismatched words 0" "$TMP/squatted.out"
check "the squatter's unanswered orders were taken back: none of it left in VRAM" $squat_back
check_gt "the good engine got VRAM" "$good_vram" 0
check "the timeouts are counted" wait_for 1 ".connections.order_timeouts > 0"
check "and logged" grep -q "orders unanswered for 2000 ms" "$TMP/kvtierd.log"
check "the squatter is still connected (max_order_timeouts not reached)" \
        bash -c "! grep -q 'dropped by the daemon' '$TMP/vram-squat.out'"
attack_end vram-squat
check "kvtierd stops cleanly" stop_daemon

write_config 256M "[daemon]" "order_timeout_ms = 2000"
check "kvtierd starts with order_timeout_ms = 2000, max_order_timeouts = 3" start_daemon
check "abuse registers 1 GiB as already in VRAM" attack vram-squat
squat_run squatted2; rc=$?
check "a good engine beside it exits 0, pattern intact" rc_and $rc grep -q "mismatched words 0" "$TMP/squatted2.out"
# Orders sent as the good engine ends expire order_timeout_ms after it.
check "at 3 orders unanswered the squatter was disconnected" \
        wait_for 4 "$squat == [] and .connections.dropped_orders == 1"
check "the disconnect is logged" grep -q "max_order_timeouts = 3" "$TMP/kvtierd.log"
attack_end vram-squat
check "the squatter saw the disconnect" grep -q "dropped by the daemon" "$TMP/vram-squat.out"
check "kvtierd stops cleanly" stop_daemon

# --- Row 5: a device total of 2^64-1 --------------------------------------
# 80% of the fake GPU's 256 MiB, as status shows it; with no total known yet, 0.
BUDGET80=$(( (256 << 20) * 80 / 100 ))
budget0() { status_json | jq '[.gpus[] | select(.device == 0) | .budget_bytes] | max // 0'; }
export FAKECUDA_MEM=256M
write_config 80%
check "kvtierd starts with vram_budget = 80%" start_daemon
check "a liar says HELLO and DEVICE with a total of 2^64-1" attack liar-total
check_le "it resolves no budget for GPU 0" "$(budget0)" $BUDGET80
check "the figure is logged as one no GPU has" grep -q "which no GPU has" "$TMP/kvtierd.log"
run_engine honest $ARGS --max-vram $BUDGET80; rc=$?
check "a real engine after it exits 0 within 80% of its GPU" rc_and $rc grep -q "mismatched words 0" "$TMP/honest.out"
check "GPU 0's budget is 80% of the real total" [ "$(budget0)" = $BUDGET80 ]
check_le "the fake's own peak VRAM stays within it" "$(stat_of honest managed_resident_peak_bytes)" $BUDGET80
attack_end liar-total
check "a second liar says the same" attack liar-total
check "the budget shown for GPU 0 does not change" [ "$(budget0)" = $BUDGET80 ]
"$KVTIERCTL" -s "$SOCK" set vram_budget 80% >/dev/null
check "nor when the budget is set again live" [ "$(budget0)" = $BUDGET80 ]
attack_end liar-total
check "kvtierd stops cleanly" stop_daemon
unset FAKECUDA_MEM

done_testing
