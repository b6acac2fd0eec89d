#!/bin/bash
# Host budgets per NUMA node, under the fake CUDA with two host nodes and a
# sysfs fixture: evictions from GPU 0 go to its home node 0 while node 0
# has room, then spill to node 1; no eviction ever takes a node over its
# budget; with no room anywhere nothing is evicted, until a live
# `kvtierctl set host_budget` makes room.  Oracles: kvtierctl status
# --json, and the fake CUDA's own bytes per node (FAKECUDA_STATS).
. "$(dirname "$0")/lib.sh"

ARGS="--regions 4 --region-size 64M --window 32M --steps 40 --step-ms 15 --hint"
NODE0=$((200 << 20))
export FAKECUDA_NUMA_NODES=2 FAKECUDA_HOST_NUMA_ID=0 KVTIER_MIN_SIZE=16M

# Two nodes of 1 GiB, 20 apart.
sys="$TMP/sys"
for n in 0 1; do
        mkdir -p "$sys/devices/system/node/node$n"
        printf 'Node %d MemTotal:        1048576 kB\n' $n >"$sys/devices/system/node/node$n/meminfo"
done
echo "10 20" >"$sys/devices/system/node/node0/distance"
echo "20 10" >"$sys/devices/system/node/node1/distance"
export KVTIER_SYSFS_ROOT="$sys"

node() { jq ".nodes[] | select(.node == $2) | .$3" <<<"$1"; }
# numa_stat NAME NODE KEY: the fake CUDA's gauge of a host node from a run's stats.
numa_stat() { jq -s "map(select(.numa_node == $2)) | last | .$3 // 0" "$TMP/$1.stats"; }

# The engine's window moves on within ~120 ms, shorter than the default
# shortest protection: this test of the books protects for 40 ms so that its
# short run evicts.
FAST="[policy]\nprotect_min = 40"

# 256 MiB of KV: 64 MiB start in VRAM (the budget), 192 MiB on node 0, so
# node 0 has 8 MiB of room for evictions, and the rest spills to node 1
# (a chunk evicted there comes back before long, so the host copies of the
# churn at once are a few dozen MiB: 220 of 224 MiB at the most, seen).
write_config 64M "[numa.0]" "host_budget = 200M" "$(printf "$FAST")"
check "kvtierd starts" start_daemon
s=$(status_json)
check "status lists both nodes of the fixture" [ "$(jq '[.nodes[].node] | sort' -c <<<"$s")" = "[0,1]" ]
check "node 0's budget as configured" [ "$(node "$s" 0 budget_bytes)" -eq $NODE0 ]
check "node 1 has no budget (null)" [ "$(node "$s" 1 budget_bytes)" = null ]
# (100 steps: enough evictions to spill even on a loaded machine)
run_engine spill ${ARGS/--steps 40/--steps 100}; rc=$?
check "engine exits 0, pattern intact" rc_and $rc grep -q "mismatched words 0" "$TMP/spill.out"
[ $rc -eq 0 ] || diag "$(cat "$TMP/spill.out")"
s=$(status_json)
check "the daemon learnt GPU 0's home node from the shim" [ "$(jq '.gpus[] | select(.device == 0) | .host_node' <<<"$s")" -eq 0 ]
check_gt "evictions went to the home node while it had room" "$(node "$s" 0 peak_charged_bytes)" 0
check_le "node 0 never over its budget after one of kvtier's evictions" "$(node "$s" 0 peak_charged_bytes)" $NODE0
check_gt "evictions spilled to node 1" "$(node "$s" 1 peak_charged_bytes)" 0
check_gt "the fake CUDA placed host copies on node 1" "$(numa_stat spill 1 host_peak_bytes)" 0
# The fake counts only what prefetches placed on a node by name, a part of
# what the books charge there: never more than the books' peak.
for n in 0 1; do
        check_le "the fake CUDA's bytes placed on node $n within the books' peak for it" \
                "$(numa_stat spill $n host_peak_bytes)" "$(node "$s" $n peak_charged_bytes)"
done
check "the region is gone from node 0's books with the engine" [ "$(node "$s" 0 charged_bytes)" -eq 0 ]
check "and from node 1's, where the spill went" [ "$(node "$s" 1 charged_bytes)" -eq 0 ]
"$KVTIERCTL" -s "$SOCK" metrics >"$TMP/metrics"
check "metrics: node 0's budget gauge" grep -q "^kvtier_node_budget_bytes{node=\"0\"} $NODE0\$" "$TMP/metrics"
check "metrics: no budget gauge for node 1" bash -c "! grep -q '^kvtier_node_budget_bytes{node=\"1\"}' '$TMP/metrics'"
check "metrics: node 1's chunks" grep -q '^kvtier_node_chunks{node="1"} ' "$TMP/metrics"
check "status table has a NODE section" bash -c "'$KVTIERCTL' -s '$SOCK' status | grep -q '^NODE'"
check "stopped" stop_daemon

# No room on any node: nothing is evicted but into the room promotions make
# on node 0, and VRAM keeps what came first.  A budget of 96 MiB: the first
# region starts in VRAM, 32 MiB stay free.
write_config 96M "[numa.0]" "host_budget = 64M" "[numa.1]" "host_budget = 0" "$(printf "$FAST")"
check "kvtierd restarts with both nodes full" start_daemon
run_engine full $ARGS --steps 120 --step-ms 20 & engine=$!
sleep 1
# The first promotions come a few ticks after the engine registers (later
# under the sanitizers): wait up to 5 s more for one.
for _ in $(seq 100); do
        s=$(status_json)
        [ "$(jq .migrations.bytes_to_vram <<<"$s")" -gt 0 ] && break
        sleep 0.05
done
check "all full: no eviction to node 1, which has no room" [ "$(node "$s" 1 peak_charged_bytes)" -eq 0 ]
check_le "all full: nor past node 0's 64M" "$(node "$s" 0 peak_charged_bytes)" $((64 << 20))
check_gt "all full: promotions into free VRAM still went" "$(jq .migrations.bytes_to_vram <<<"$s")" 0
if [ "$(id -u)" -eq 0 ]; then
        "$KVTIERCTL" -s "$SOCK" set host_budget 1 1G; rc=$?
        check "set host_budget 1 1G exits 0" [ $rc -eq 0 ]
        check "status shows node 1's new budget" [ "$(node "$(status_json)" 1 budget_bytes)" -eq $((1 << 30)) ]
fi
wait $engine; rc=$?
check "all full: engine exits 0, pattern intact" rc_and $rc grep -q "mismatched words 0" "$TMP/full.out"
s=$(status_json)
if [ "$(id -u)" -eq 0 ]; then
        check_gt "room made live: evictions went to node 1" "$(node "$s" 1 peak_charged_bytes)" 0
        check_le "and node 1 within its new budget" "$(node "$s" 1 peak_charged_bytes)" $((1 << 30))
fi
# Node 0 starts over its 64M (the KV registered there) and drains as its
# chunks are promoted; whatever it then took, no eviction took it past 64M.
check_le "node 0 never over its 64M after an eviction" "$(node "$s" 0 peak_charged_bytes)" $((64 << 20))
"$KVTIERCTL" -s "$SOCK" set host_budget 1 12Q >/dev/null 2>&1; rc=$?
check "set host_budget with a bad value fails" [ $rc -ne 0 ]
"$KVTIERCTL" -s "$SOCK" set host_budget 5 10% >/dev/null 2>&1; rc=$?
check "set host_budget N% of a node sysfs does not show fails" [ $rc -ne 0 ]
check "stopped" stop_daemon

# A percentage resolves from the node's MemTotal; one of a missing node is a configuration error.
write_config 64M "[numa.1]" "host_budget = 25%"
check "kvtierd starts with a percentage" start_daemon
check "25% of node 1's 1 GiB" [ "$(node "$(status_json)" 1 budget_bytes)" -eq $((256 << 20)) ]
check "stopped" stop_daemon
write_config 64M "[numa.7]" "host_budget = 25%"
"$KVTIERD" -c "$TMP/kvtierd.conf" >"$TMP/bad.out" 2>&1; rc=$?
check "a percentage of a node without MemTotal exits 2" [ $rc -eq 2 ]
check "and says which node" grep -q "numa.7" "$TMP/bad.out"
"$KVTIERD" -c "$TMP/kvtierd.conf" --print-config >"$TMP/print.out" 2>&1; rc=$?
check "--print-config shows [numa.7]" rc_and $rc grep -q "^\[numa.7\]" "$TMP/print.out"

# Two GPUs on two nodes: each GPU's home node comes from its own device.
write_config 64M "[numa.0]" "host_budget = 1G"
check "kvtierd restarts" start_daemon
ENGINE_ENV="FAKECUDA_DEVICES=2 FAKECUDA_HOST_NUMA_ID=0,1" run_engine two $ARGS --devices 2; rc=$?
check "two-GPU engine exits 0" [ $rc -eq 0 ]
s=$(status_json)
check "GPU 0's home is node 0" [ "$(jq '.gpus[] | select(.device == 0) | .host_node' <<<"$s")" -eq 0 ]
check "GPU 1's home is node 1" [ "$(jq '.gpus[] | select(.device == 1) | .host_node' <<<"$s")" -eq 1 ]
check "stopped" stop_daemon

# A node the driver refuses (here the fake CUDA knows only node 0, sysfs
# shows two) costs that node only: evictions named to it land in plain host
# memory, and once node 0 has room they go to node 0 again.  (One refusal
# used to turn the GPU's NUMA placement off for good.)
if [ "$(id -u)" -eq 0 ]; then
        write_config 64M "[numa.0]" "host_budget = 0" "$(printf "$FAST")"
        check "kvtierd starts with node 0 full" start_daemon
        ENGINE_ENV="FAKECUDA_NUMA_NODES=1 KVTIER_LOG=info" run_engine refused $ARGS --steps 120 --step-ms 20 & engine=$!
        for _ in $(seq 100); do
                [ "$(node "$(status_json)" 1 peak_charged_bytes)" -gt 0 ] 2>/dev/null && break
                sleep 0.05
        done
        check_gt "node 0 full: evictions named node 1" "$(node "$(status_json)" 1 peak_charged_bytes)" 0
        "$KVTIERCTL" -s "$SOCK" set host_budget 0 1G
        wait $engine; rc=$?
        check "refused node: engine exits 0, pattern intact" rc_and $rc grep -q "mismatched words 0" "$TMP/refused.out"
        check "the shim said the driver refused node 1" grep -q "node 1 refused" "$TMP/refused.out"
        check_gt "after room on node 0, the fake CUDA placed host copies on node 0" \
                "$(numa_stat refused 0 host_peak_bytes)" 0
        check "stopped" stop_daemon
fi
done_testing
