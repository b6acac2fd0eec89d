#!/bin/bash
# What an engine's work does to kvtier's evictions, on the GPU machine:
#   bash DIR/evict-load-h200.sh     (DIR built by tests/bench/package-mover.sh)
# mover-bench-cuda moves a 4 GiB managed region down and up through the
# shim's pipeline at 2 MiB, 16 MiB and 256 MiB runs, evicting to mapped host
# memory as the daemon's default orders, and moves every other chunk of it one
# call a chunk and in batches (--scattered), first with the GPU idle, then beside
# each load of gpu_load.py (compute, hbm, zerocopy, h2d) running in another
# process for the whole of it.  The mover's GB/s and the load's own rate go to
# $OUT/evict-load.txt; a table of eviction GB/s by load is printed last.  A
# load not running when its benchmark starts is said so (LOAD NOT RUNNING) and
# its rows are skipped; one that stopped before the benchmark ended is said so
# too, its rows kept.
set -u
C=$(cd "$(dirname "$0")" && pwd)
RET=${OUT:-/tmp/kvtier-out}
mkdir -p "$RET"
log=$RET/evict-load.txt
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader | tee "$log"
echo "binaries from commit $(cat "$C/COMMIT")" | tee -a "$log"
# Each line of mover-bench's stamped with the wall clock, to place it
# against the load's span; mover-bench's exit status (1: a lost write) kept.
bench() {
        local args
        for args in "--runs 2M,16M,256M" "--scattered"; do
                # shellcheck disable=SC2086
                "$C/mover-bench-cuda" --size 4G $args 2>&1 |
                        while IFS= read -r l; do printf '%s %s\n' "$(date +%s.%N | cut -c1-14)" "$l"; done |
                        tee -a "$log"
                echo "mover-bench $args: exit ${PIPESTATUS[0]} (0: no lost write, no failed call)" | tee -a "$log"
        done
}
lp=
trap '[ -n "$lp" ] && kill -TERM $lp 2>/dev/null' EXIT
for load in ${KVT_LOADS:-none compute hbm zerocopy h2d none}; do
        echo "== load $load" | tee -a "$log"
        if [ "$load" = none ]; then
                bench
                continue
        fi
        python3 "$C/gpu_load.py" "$load" 400 >"$RET/load-$load.txt" 2>&1 &
        lp=$!
        # the load's set-up (CuPy's first kernels) done, and a second of it running
        for _ in $(seq 120); do
                grep -q "running from" "$RET/load-$load.txt" && break
                kill -0 $lp 2>/dev/null || break
                sleep 0.5
        done
        sleep 1
        if ! kill -0 $lp 2>/dev/null || ! grep -q "running from" "$RET/load-$load.txt"; then
                echo "LOAD NOT RUNNING: $load; its rows are not measured" | tee -a "$log"
                kill -TERM $lp 2>/dev/null
                wait $lp
                tee -a "$log" <"$RET/load-$load.txt"
                lp=
                continue
        fi
        bench
        kill -0 $lp 2>/dev/null || echo "LOAD NOT RUNNING at the end: $load; its rows may be partly unloaded" | tee -a "$log"
        kill -TERM $lp 2>/dev/null
        wait $lp
        lp=
        tee -a "$log" <"$RET/load-$load.txt"
done
echo "== eviction GB/s by load, run length and kind (one figure a run)"
awk '/^== load/ { load = $3 } /^LOAD NOT RUNNING/ { load = load "(unloaded)" }
     $2 == "evict" && $4 == "run" { key = load " " $5 " MiB " $3; v[key] = v[key] " " $7 }
     END { for (k in v) print k ":" v[k] }' "$log" | sort -k1,1 -k2,2n -k4,4
echo "== scattered chunks, GB/s by load"
awk '/^== load/ { load = $3 } /^LOAD NOT RUNNING/ { load = load "(unloaded)" }
     $2 == "scattered" && $NF == "GB/s" { $1 = ""; print load ":" $0 }' "$log"
