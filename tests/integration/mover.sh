#!/bin/bash
# The mover's pipeline (shim/pipeline.c, linked into tests/bench/mover-bench)
# against the fake CUDA: a chunk the GPU wrote while read-duplicated in VRAM
# keeps the write through eviction (read on the host, and on the GPU after
# promotion), with read-duplication on and off; adjacent orders that arrive
# together coalesce into one run; the host tier goes to the GPU's NUMA node,
# and to plain host memory where CUDA refuses that node.
. "$(dirname "$0")/lib.sh"

BENCH="$top_builddir/tests/bench/mover-bench"

bench() { # NAME ENV...: runs the check, output in $TMP/NAME.out, stats in $TMP/NAME.stats
        local name=$1; shift
        env FAKECUDA_STATS="$TMP/$name.stats" "$@" "$BENCH" --size 64M --check-only >"$TMP/$name.out" 2>&1
}
lost_none() { grep -q "words lost or wrong: host 0, gpu 0" "$TMP/$1.out"; }

bench readdup KVTIER_MOVER_READ_DUP=1; rc=$?
check "read-duplicated: check exits 0" [ $rc -eq 0 ]
check "read-duplicated: no write lost (host and GPU)" lost_none readdup
[ $rc -eq 0 ] || diag "$(cat "$TMP/readdup.out")"
# 32 chunks: the whole region in VRAM and back with duplicates dropped
# costs no copy for the chunks the GPU did not write
check_gt "read-duplicated: chunks copied to the GPU" "$(stat_of readdup h2d_bytes)" 0

bench migrate KVTIER_MOVER_READ_DUP=0; rc=$?
check "migrating: check exits 0" [ $rc -eq 0 ]
check "migrating: no write lost (host and GPU)" lost_none migrate
# Even chunks stay clean in the second round trip: read-duplication evicts
# them without a copy, so fewer bytes come down than without it.
check_gt "read-duplication copies fewer bytes down than migration" \
        "$(stat_of migrate d2h_bytes)" "$(stat_of readdup d2h_bytes)"

# Batches of 64 single-chunk orders of one region: 32 chunks, so every
# batch of the check is one run.
read -r orders runs < <(sed -n 's/.* \([0-9]*\) orders in \([0-9]*\) runs/\1 \2/p' "$TMP/readdup.out")
check_gt "orders were issued" "${orders:-0}" 0
check_gt "adjacent orders coalesced (orders > runs)" "${orders:-0}" "${runs:-0}"

bench numa FAKECUDA_NUMA_NODES=2 KVTIER_LOG=debug; rc=$?
check "two NUMA nodes: check exits 0" [ $rc -eq 0 ]
check "host tier on the GPU's node (node 1)" grep -q "Host tier of GPU 0: NUMA node 1" "$TMP/numa.out"
check_gt "advice and prefetches named the node" "$(stat_of numa numa_location_calls)" 0

bench nonuma FAKECUDA_NUMA_NODES=2 KVTIER_MOVER_HOST_NUMA=0; rc=$?
check "KVTIER_MOVER_HOST_NUMA=0: check exits 0" [ $rc -eq 0 ]
check "KVTIER_MOVER_HOST_NUMA=0: no NUMA location named" [ "$(stat_of nonuma numa_location_calls)" -eq 0 ]

# A node CUDA refuses (here: one the fake does not have) falls back to
# plain host memory instead of failing every eviction.
bench refused FAKECUDA_HOST_NUMA_ID=5 KVTIER_LOG=info; rc=$?
check "refused NUMA node: check exits 0" [ $rc -eq 0 ]
check "refused NUMA node: no write lost" lost_none refused
check "refused NUMA node: fallback logged" grep -q "refused as a location" "$TMP/refused.out"
[ $rc -eq 0 ] || diag "$(cat "$TMP/refused.out")"

done_testing
