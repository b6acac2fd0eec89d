#!/bin/bash
# The walking skeleton's contract: 256 MiB of KV in four allocations under a
# 64 MiB VRAM budget.  VRAM stays within the budget by the daemon's books and
# by the fake CUDA's own residency counters, the pattern survives the
# migrations, and the engine exits 0 with the daemon, without it, and without
# the shim.
. "$(dirname "$0")/lib.sh"

BUDGET=$((64 << 20))
ARGS="--regions 4 --region-size 64M --window 32M --steps 40 --step-ms 15 --hint"

write_config 64M
check "kvtierd starts" start_daemon

# Poll the daemon while the engine runs: the highest VRAM it ever reported.
run_engine with-daemon $ARGS --max-vram $BUDGET &
engine=$!
# And whether a GRANT past the WELCOME's was sent and answered (GRANT_ACK).
max_vram=0 max_charged=0 polls=0 answered=0
while kill -0 $engine 2>/dev/null; do
        if s=$(status_json 2>/dev/null); then
                v=$(echo "$s" | jq '[.gpus[] | select(.device == 0) | .vram_bytes] | max // 0')
                c=$(echo "$s" | jq '[.gpus[] | select(.device == 0) | .charged_bytes] | max // 0')
                a=$(echo "$s" | jq '[.clients[] | select(.grant.seq > 0 and .grant.acked == .grant.seq)] | length')
                [ "$v" -gt "$max_vram" ] && max_vram=$v
                [ "$c" -gt "$max_charged" ] && max_charged=$c
                [ "$a" -gt 0 ] && answered=1
                polls=$((polls + 1))
        fi
        sleep 0.02
done
wait $engine; rc=$?
check "engine exits 0 under the shim with the daemon" [ $rc -eq 0 ]
[ $rc -eq 0 ] || diag "$(cat "$TMP/with-daemon.out")"
check "pattern intact after migrations" grep -q "mismatched words 0" "$TMP/with-daemon.out"
check_gt "daemon polled while the engine ran" $polls 3
check "the shim answered the daemon's GRANTs (GRANT_ACK)" [ $answered -eq 1 ]
check_gt "daemon saw chunks in VRAM" $max_vram 0
check_le "VRAM by kvtierctl never above the budget" $max_vram $BUDGET
check_le "charged VRAM by kvtierctl never above the budget" $max_charged $BUDGET

s=$(status_json)
check_le "peak charged VRAM reported by the daemon within the budget" \
        "$(echo "$s" | jq '.gpus[] | select(.device == 0) | .peak_charged_bytes')" $BUDGET
check_gt "orders completed" "$(echo "$s" | jq .migrations.orders_done)" 0
check "no order failed" [ "$(echo "$s" | jq .migrations.orders_failed)" -eq 0 ]
check "cancelled orders are counted apart" [ "$(echo "$s" | jq '.migrations.orders_cancelled | type')" = '"number"' ]
check_gt "bytes promoted to VRAM" "$(echo "$s" | jq .migrations.bytes_to_vram)" 0
check_gt "bytes evicted to host" "$(echo "$s" | jq .migrations.bytes_to_host)" 0
check "client gone from status after exit" [ "$(echo "$s" | jq '.clients | length')" -eq 0 ]

peak=$(stat_of with-daemon managed_resident_peak_bytes)
check_le "peak VRAM by the fake CUDA's own counters within the budget" "$peak" $BUDGET
check_gt "regions were captured as managed memory" "$(stat_of with-daemon managed_allocs)" 0
check_gt "chunks were prefetched to the GPU" "$(stat_of with-daemon h2d_bytes)" 0

# Freeing a captured region must release its VRAM before the daemon can give
# that VRAM to another region: with a slow cudaFree (the real one synchronizes
# the device) the daemon gets several ticks to act on the region's release.
ENGINE_ENV="FAKECUDA_FREE_DELAY_US=100000" run_engine slow-free $ARGS; rc=$?
check "slow cudaFree: engine exits 0" [ $rc -eq 0 ]
check_le "slow cudaFree: peak VRAM by the fake's counters, frees included, within the budget" \
        "$(stat_of slow-free managed_resident_peak_bytes)" $BUDGET
check "slow cudaFree: orders on freed regions are cancellations, not failures" \
        [ "$(status_json | jq .migrations.orders_failed)" -eq 0 ]

# A capture that starts in VRAM is placed there at once and advised as its
# first eviction would leave it (shim.c, capture_prepare()): the GPU's first
# touch finds its chunks in VRAM and does not fault, and each chunk but its
# sample page is accessed-by the GPU.  One 64M region within the budget.
ENGINE_ENV="KVTIER_LOG=debug" run_engine prepared --regions 1 --region-size 64M --window 64M --steps 2 \
        --step-ms 10; rc=$?
check "VRAM-start capture: engine exits 0, pattern intact" rc_and $rc grep -q "mismatched words 0" "$TMP/prepared.out"
check "VRAM-start capture: captured in VRAM" grep -q "as region 1, in VRAM" "$TMP/prepared.out"
check "VRAM-start capture: the first touch did not fault" [ "$(stat_of prepared faults)" -eq 0 ]
# one preferred location each way, and 32 chunks accessed-by
check "VRAM-start capture: advised at once, each chunk but its sample page" \
        [ "$(stat_of prepared advise_calls)" -eq 34 ]
# A failure there leaves the rest to the first touch and the first eviction,
# which must make the advice that is missing: two regions in the budget of
# one, so that the first's chunks are evicted, the budget held by the
# fake's own count (a chunk left preferring the GPU would fault back in).
for fail in prefetch:1 advise:2 advise:4; do
        orders=$(status_json | jq .migrations.orders_failed)
        ENGINE_ENV="FAKECUDA_FAIL=$fail" run_engine "prepared-$fail" --regions 2 --region-size 64M --window 32M --hint \
                --steps 40 --step-ms 15 --max-vram $BUDGET; rc=$?
        check "VRAM-start capture, its $fail failing: engine exits 0, pattern intact" \
                rc_and $rc grep -q "mismatched words 0" "$TMP/prepared-$fail.out"
        check_gt "VRAM-start capture, its $fail failing: chunks evicted" "$(stat_of "prepared-$fail" d2h_bytes)" 0
        check_le "VRAM-start capture, its $fail failing: peak VRAM by the fake's counters within the budget" \
                "$(stat_of "prepared-$fail" managed_resident_peak_bytes)" $BUDGET
        check "VRAM-start capture, its $fail failing: no order failed" \
                [ "$(status_json | jq .migrations.orders_failed)" -eq "$orders" ]
done
check_gt "VRAM-start capture, its prefetch failing: the first touch placed it" \
        "$(stat_of prepared-prefetch:1 faults)" 0
check "daemon stops cleanly on SIGTERM" stop_daemon

# Without a daemon the shim fails open: plain cudaMalloc, same result.
run_engine no-daemon $ARGS; rc=$?
check "engine exits 0 under the shim without a daemon" [ $rc -eq 0 ]
check "no region captured without a daemon" [ "$(stat_of no-daemon managed_allocs)" -eq 0 ]
check "the shim says once that the daemon is missing" \
        [ "$(grep -c 'Cannot reach kvtierd' "$TMP/no-daemon.out")" -eq 1 ]

env FAKECUDA_STATS="$TMP/plain.stats" "$ENGINE" $ARGS >"$TMP/plain.out" 2>&1; rc=$?
check "engine exits 0 without the shim" [ $rc -eq 0 ]
same_output() { grep kv-engine: "$1" | grep -v -e VRAM -e 'steps took'; }
check "same output without the shim" diff <(same_output "$TMP/plain.out") <(same_output "$TMP/with-daemon.out")

done_testing
