#!/bin/bash
# The SSD tier on the GPU machine (issue 20), in one device call:
#   bash .carry-ssd/ssd-h200.sh      (carry [".carry-ssd"], built by tests/bench/package-ssd.sh)
# Env: KVT_SSD_DIR (default /var/tmp/kvtier-ssd: must be on the NVMe disk, not
# tmpfs), KVT_SSD_BYTES (default 8G), KVT_SSD_SESSION (256M), KVT_SSD_REPS (5),
# KVT_CUDA_LIB (where libcudart.so.13 is; default from ldconfig), KVT_SSD_RUNS
# (which of the runs below, default "A B C"; D and E on request).
# Runs ssd-bench-cuda under the shim with a private kvtierd, three times:
#   A  defaults (compress none), staging in whatever pages the host has free
#   B  the same with 128 2 MiB hugepages reserved on node 0 for the staging
#      buffer (put back as they were afterwards), where sysfs lets us
#   C  compress = zstd (random-looking words: the ratio says little; real KV
#      is for later)
#   D  as A with 4 MiB blocks (a quarter of the ops and checksums per byte)
#   E  as A with 8 blocks in flight instead of 32
# Each run prints raw O_DIRECT write/read of the same bytes in the same
# directory and pinned cudaMemcpy next to spill/restore, then one session's
# restore latency (cold, and after a readahead).  Raw output under $OUT.
set -u
C=$(cd "$(dirname "$0")" && pwd)
RET=${OUT:-/tmp/kvtier-out}
mkdir -p "$RET"
dir=${KVT_SSD_DIR:-/var/tmp/kvtier-ssd}
bytes=$(numfmt --from=iec "${KVT_SSD_BYTES:-8G}")
session=$(numfmt --from=iec "${KVT_SSD_SESSION:-256M}")
reps=${KVT_SSD_REPS:-5}
T=$(mktemp -d)
SOCK=$T/kvtierd.sock
cuda_lib=${KVT_CUDA_LIB:-$(dirname "$(ldconfig -p | awk '/libcudart.so.13 / && /x86-64/ { print $NF; exit }')" 2>/dev/null)}
[ -d "$cuda_lib" ] || cuda_lib=/usr/local/cuda/lib64
mkdir -p "$dir" && chmod 700 "$dir"
{
        echo "binaries from commit $(cat "$C/COMMIT")"
        date -u
        nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader
        df -hT "$dir" | tail -1
        grep -E 'HugePages_(Total|Free)' /proc/meminfo
        cat /sys/kernel/mm/transparent_hugepage/shmem_enabled 2>/dev/null | sed 's/^/shmem THP: /'
} | tee "$RET/env.txt"

run() { # NAME [INI LINES...]
        local name=$1; shift
        rm -rf "$dir/ssd"
        { echo "[daemon]"; echo "socket = $SOCK"; echo "[ssd]"; echo "dir = $dir/ssd"; echo "max_per_uid = 1T"
          for l in "$@"; do echo "$l"; done; } >"$T/$name.conf"
        "$C/bin/kvtierd" -c "$T/$name.conf" >"$RET/$name.kvtierd.log" 2>&1 &
        local dpid=$!
        for _ in $(seq 100); do "$C/bin/kvtierctl" -s "$SOCK" status >/dev/null 2>&1 && break; sleep 0.05; done
        echo "== $name: $*"
        env LD_LIBRARY_PATH="$cuda_lib:$C/lib" LD_PRELOAD="$C/libkvtier.so" KVTIER_SOCKET="$SOCK" KVTIER_MIN_SIZE=64M \
                KVTIER_LOG=debug "$C/ssd-bench-cuda" "$dir" "$bytes" "$session" "$reps" 2>&1 | tee "$RET/$name.txt"
        echo "exit ${PIPESTATUS[0]}"
        "$C/bin/kvtierctl" -s "$SOCK" status | sed -n '/^SSD tier/,$p' | tee -a "$RET/$name.txt"
        kill -TERM $dpid; wait $dpid
}

wanted() { case " ${KVT_SSD_RUNS:-A B C} " in *" $1 "*) return 0 ;; esac; return 1; }
wanted A && run A "queue_depth = 32" "block_size = 1M"
hp=/sys/devices/system/node/node0/hugepages/hugepages-2048kB/nr_hugepages
if ! wanted B; then
        :
elif [ -w "$hp" ]; then
        old=$(cat "$hp")
        echo $((old + 128)) >"$hp"
        echo "hugepages on node 0: $old -> $(cat "$hp")"
        run B "queue_depth = 32" "block_size = 1M"
        echo "$old" >"$hp"
else
        echo "== B skipped: $hp not writable"
fi
wanted C && run C "queue_depth = 32" "block_size = 1M" "compress = zstd"
wanted D && run D "queue_depth = 32" "block_size = 4M"
wanted E && run E "queue_depth = 8" "block_size = 1M"
rm -rf "$dir/ssd" "$T"
