#!/bin/bash
# Several GPUs in one host (fake CUDA with two devices): budgets, books and
# placement per GPU.  Two engines on two GPUs with different budgets, and one
# engine driving both GPUs; a percentage budget of a GPU that is not the
# process's first one resolves from that GPU's size.
. "$(dirname "$0")/lib.sh"

B0=$((64 << 20)) B1=$((32 << 20))
ARGS="--regions 4 --region-size 32M --window 24M --steps 40 --step-ms 15 --hint"
export FAKECUDA_DEVICES=2 KVTIER_MIN_SIZE=16M

# stat_dev NAME DEVICE KEY: a fake CUDA counter of one device from a run's stats.
stat_dev() { jq -s "map(select(.device == $2)) | last | .$3 // 0" "$TMP/$1.stats"; }

write_config 64M "[gpu.1]" "vram_budget = 32M"
check "kvtierd starts" start_daemon

run_engine gpu0 $ARGS --device 0 --max-vram $B0 & e0=$!
run_engine gpu1 $ARGS --device 1 --max-vram $B1 --seed 7 & e1=$!
max0=0 max1=0 both=0
while kill -0 $e0 2>/dev/null || kill -0 $e1 2>/dev/null; do
        if s=$(status_json 2>/dev/null); then
                v0=$(echo "$s" | jq '[.gpus[] | select(.device == 0) | .vram_bytes] | max // 0')
                v1=$(echo "$s" | jq '[.gpus[] | select(.device == 1) | .vram_bytes] | max // 0')
                [ "$v0" -gt "$max0" ] && max0=$v0
                [ "$v1" -gt "$max1" ] && max1=$v1
                [ "$(echo "$s" | jq '[.clients[].device] | unique | length')" -eq 2 ] && both=1
        fi
        sleep 0.02
done
wait $e0; rc0=$?
wait $e1; rc1=$?
check "engine on GPU 0 exits 0, pattern intact" rc_and $rc0 grep -q "mismatched words 0" "$TMP/gpu0.out"
check "engine on GPU 1 exits 0, pattern intact" rc_and $rc1 grep -q "mismatched words 0" "$TMP/gpu1.out"
[ $rc0 -eq 0 ] && [ $rc1 -eq 0 ] || diag "$(cat "$TMP/gpu0.out" "$TMP/gpu1.out")"
check "kvtierctl showed one client per GPU" [ $both -eq 1 ]
check_le "GPU 0: VRAM by kvtierctl within its 64M budget" $max0 $B0
check_le "GPU 1: VRAM by kvtierctl within its 32M budget" $max1 $B1
s=$(status_json)
check_gt "GPU 0's larger budget let it hold more at its peak than GPU 1" \
        "$(echo "$s" | jq '.gpus[] | select(.device == 0) | .peak_charged_bytes')" \
        "$(echo "$s" | jq '.gpus[] | select(.device == 1) | .peak_charged_bytes')"
# The daemon's peaks, not what the poller caught: a loaded machine can
# poll too seldom to see a short residency.
check_gt "GPU 0 held chunks in VRAM" "$(echo "$s" | jq '.gpus[] | select(.device == 0) | .peak_charged_bytes')" 0
check_gt "GPU 1 held chunks in VRAM" "$(echo "$s" | jq '.gpus[] | select(.device == 1) | .peak_charged_bytes')" 0
check_le "GPU 0: peak charged within budget" "$(echo "$s" | jq '.gpus[] | select(.device == 0) | .peak_charged_bytes')" $B0
check_le "GPU 1: peak charged within budget" "$(echo "$s" | jq '.gpus[] | select(.device == 1) | .peak_charged_bytes')" $B1
check_le "GPU 1: fake's own peak residency within budget" "$(stat_dev gpu1 1 managed_resident_peak_bytes)" $B1
check "GPU 1's engine left GPU 0 alone" [ "$(stat_dev gpu1 0 managed_resident_peak_bytes)" -eq 0 ]

# One process, both GPUs: regions alternate between the devices.
run_engine both $ARGS --devices 2 --regions 6 & e=$!
# (frees at the end shrink the lists again: remember what was seen at the top)
regs=0 gpus=0
while kill -0 $e 2>/dev/null; do
        r=$(status_json 2>/dev/null | jq -c '[.clients[].regions[].device] | group_by(.) | map(length)')
        [ "$r" = "[3,3]" ] && regs=1
        g=$("$KVTIERCTL" -s "$SOCK" status 2>/dev/null | awk '$1 ~ /^[0-9]+$/ && $3 == "kv-engine" { print $4 }')
        [ "$g" = "0,1" ] && gpus=1
        sleep 0.02
done
wait $e; rc=$?
check "two-GPU engine exits 0, pattern intact" rc_and $rc grep -q "mismatched words 0" "$TMP/both.out"
[ $rc -eq 0 ] || diag "$(cat "$TMP/both.out")"
check "kvtierctl placed the client's regions per GPU (3 + 3)" [ $regs -eq 1 ]
check "kvtierctl status lists both GPUs for the client" [ $gpus -eq 1 ]
check_gt "two-GPU engine: GPU 0 used" "$(stat_dev both 0 managed_resident_peak_bytes)" 0
check_gt "two-GPU engine: GPU 1 used" "$(stat_dev both 1 managed_resident_peak_bytes)" 0
check_le "two-GPU engine: GPU 0 within 64M" "$(stat_dev both 0 managed_resident_peak_bytes)" $B0
check_le "two-GPU engine: GPU 1 within 32M" "$(stat_dev both 1 managed_resident_peak_bytes)" $B1
check "stopped" stop_daemon

# A percentage budget of GPU 1 while the process announced GPU 0 first: the
# daemon learns GPU 1's size from the shim and resolves 25% of 1 GiB.
write_config 64M "[gpu.1]" "vram_budget = 25%"
check "kvtierd restarts" start_daemon
ENGINE_ENV="FAKECUDA_MEM=1G" run_engine pct $ARGS --devices 2; rc=$?
check "percentage engine exits 0" [ $rc -eq 0 ]
check "GPU 1's 25% budget resolved from its size" \
        [ "$(status_json | jq '.gpus[] | select(.device == 1) | .budget_bytes')" -eq $((256 << 20)) ]
check_gt "GPU 1's chunks were promoted under the resolved budget" "$(stat_dev pct 1 h2d_bytes)" 0
check "stopped" stop_daemon
done_testing
