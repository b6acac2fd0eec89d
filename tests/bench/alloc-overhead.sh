#!/bin/bash
# Shim overhead on uncaptured allocations: alloc-bench with and without
# LD_PRELOAD=libkvtier.so, alternating, three times each; prints ns per
# cudaMalloc/cudaFree pair, the added ns and the ratio.
#   tests/bench/alloc-overhead.sh BENCH SHIM [PAIRS]
set -eu
bench=$1 shim=$2 pairs=${3:-200000}
plain=() shimmed=()
for _ in 1 2 3; do
        plain+=("$("$bench" "$pairs")")
        shimmed+=("$(KVTIER_SOCKET=/nonexistent/kvtierd.sock LD_PRELOAD="$shim" "$bench" "$pairs")")
done
med() { printf '%s\n' "$@" | sort -g | sed -n 2p; }
a=$(med "${plain[@]}") b=$(med "${shimmed[@]}")
echo "alloc/free pair, uncaptured 1 MiB: plain ${a} ns, under the shim ${b} ns (runs: ${plain[*]} / ${shimmed[*]})"
awk -v a="$a" -v b="$b" 'BEGIN { printf "added %.1f ns per pair, ratio %.3f\n", b - a, b / a }'
