#!/bin/bash
# The launch hooks' cost per launch, on the fake CUDA: launch-bench under
# the shim with KVTIER_HEAT=off (hooks pass through) and with
# KVTIER_HEAT=launch (arguments scanned, chunks counted), alternating, five
# times each, with a private kvtierd so that the memory is captured; the
# difference is the cost of looking.  (Without the shim the memory is plain
# device memory, which the fake reads by another path: printed, not compared.)
#   tests/bench/launch-overhead.sh BUILD_DIR [LAUNCHES]
set -eu
b=$(cd "$1" && pwd) n=${2:-200000}
T=$(mktemp -d)
trap 'kill "$dpid" 2>/dev/null; rm -rf "$T"' EXIT
printf '[daemon]\nsocket = %s/s\ntick_ms = 20\nlog_level = warning\n[gpu]\nvram_budget = 64M\n' "$T" >"$T/c"
"$b/kvtierd" -c "$T/c" >"$T/log" 2>&1 &
dpid=$!
sleep 0.3
export LD_LIBRARY_PATH="$b/tests/fakes/.libs"
run() { env "$@" "$b/tests/bench/launch-bench" "$n"; }
plain=() off=() on=()
for _ in 1 2 3 4 5; do
        plain+=("$(run X=1)")
        off+=("$(run LD_PRELOAD="$b/.libs/libkvtier.so" KVTIER_SOCKET="$T/s" KVTIER_HEAT=off)")
        on+=("$(run LD_PRELOAD="$b/.libs/libkvtier.so" KVTIER_SOCKET="$T/s" KVTIER_HEAT=launch)")
done
med() { printf '%s\n' "$@" | sort -g | sed -n 3p; }
a=$(med "${plain[@]}") o=$(med "${off[@]}") l=$(med "${on[@]}")
echo "ns per launch: plain $a, shim heat off $o, shim heat launch $l (runs: ${plain[*]} / ${off[*]} / ${on[*]})"
awk -v o="$o" -v l="$l" 'BEGIN { printf "argument scan and count: +%.1f ns per launch over the pass-through, ratio %.3f\n", l - o, l / o }'
