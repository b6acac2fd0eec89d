#!/bin/bash
# The SSD tier (issue 20): spill, restore, drop through include/kvtier.h,
# a private kvtierd with [ssd] dir in a temporary directory, the fake CUDA.
# Round trips of random ranges with every word checked; faults injected
# under the daemon's I/O (KVTIER_SSD_FAULTS) with the outcome each must
# have and never wrong data; quotas; a client killed mid-spill.
. "$(dirname "$0")/lib.sh"

SSD_ENGINE="$top_builddir/tests/integration/ssd-engine"
SSD_DIR="$TMP/ssd"

# ssd_run NAME ARGS...: the SSD engine under the shim.
ssd_run() {
        local name="$1"; shift
        env LD_PRELOAD="$PRELOAD" KVTIER_SOCKET="$SOCK" KVTIER_MIN_SIZE=4M ${ENGINE_ENV:-} \
                "$SSD_ENGINE" "$@" >"$TMP/$name.out" 2>&1
}

# restart_with FAULTS [INI LINES...]: a fresh daemon with those faults injected.
restart_with() {
        local faults="$1"; shift
        [ -n "$DAEMON_PID" ] && stop_daemon
        write_config 64M "[ssd]" "dir = $SSD_DIR" "$@"
        KVTIER_SSD_FAULTS="$faults" start_daemon
}

files_in_dir() { find "$SSD_DIR" -type f | wc -l; }

# Under ThreadSanitizer (5-20 times slower) fewer ranges: the same threads run.
n_rt=24 n_small=12
[ -n "$tsan" ] && n_rt=8 n_small=4

# --- round trips
restart_with "" "block_size = 1M" "queue_depth = 8"
ssd_run rt roundtrip $n_rt 0x5eed; rc=$?
check "$n_rt random ranges round-trip, every word checked" [ $rc -eq 0 ]
[ $rc -eq 0 ] || diag "$(cat "$TMP/rt.out")"
check "captured ranges with whole chunks were released at spill" grep -q '^released' "$TMP/rt.out"
json=$(status_json)
check "status shows the SSD tier" [ "$(echo "$json" | jq -r '.ssd.enabled')" = true ]
check "status counts the spills and restores" \
        [ "$(echo "$json" | jq '.ssd.totals.spills')" -ge $n_rt -a "$(echo "$json" | jq '.ssd.totals.restores')" -ge $n_rt ]
check "nothing is left spilled or on disk after the drops" \
        [ "$(echo "$json" | jq '[.ssd.clients[].bytes] | add // 0')" -eq 0 -a "$(files_in_dir)" -eq 0 ]

restart_with "" "compress = zstd" "block_size = 256K"
ssd_run rtz roundtrip $n_small 0x2a; rc=$?
check "round trips with compress = zstd" [ $rc -eq 0 ]
[ $rc -eq 0 ] || diag "$(cat "$TMP/rtz.out")"

restart_with "" "compress = lz4" "block_size = 256K"
ssd_run rtl roundtrip $n_small 0x4c; rc=$?
check "round trips with compress = lz4" [ $rc -eq 0 ]
[ $rc -eq 0 ] || diag "$(cat "$TMP/rtl.out")"
check "lz4: status names it" [ "$(status_json | jq -r .ssd.compress)" = lz4 ]
# 64 MiB ranges of one byte repeated (ssd-engine hang): stored far smaller
env LD_PRELOAD="$PRELOAD" KVTIER_SOCKET="$SOCK" "$SSD_ENGINE" hang >"$TMP/lz4hang.out" 2>&1 &
hang_pid=$!
for _ in $(seq 200); do grep -q "spilling 2" "$TMP/lz4hang.out" && break; sleep 0.05; done
lz4=$(status_json | jq -r '.ssd.clients[0] | "\(.bytes) \(.stored_bytes)"')
kill -KILL $hang_pid; wait $hang_pid 2>/dev/null
check "lz4: a repeated byte is stored in under a tenth of its size ($lz4)" \
        eval '[ "${lz4% *}" -ge $((128 << 20)) ] && [ "${lz4#* }" -lt $(( ${lz4% *} / 10 )) ]'

restart_with "" "compress = zstd" "block_size = 64M"
ssd_run rt64 roundtrip $((n_small / 2)) 0x64; rc=$?
check "round trips in 64 MiB blocks (two a piece of the staging buffer), zstd" [ $rc -eq 0 ]
[ $rc -eq 0 ] || diag "$(cat "$TMP/rt64.out")"

# --- a filesystem that refuses O_DIRECT (tmpfs before Linux 6.6; here the
# refusal is injected): buffered I/O, the same results
restart_with "direct-refused@1" "block_size = 1M"
ssd_run buffered roundtrip 6 77; rc=$?
check "O_DIRECT refused: round trips through buffered I/O" [ $rc -eq 0 ]
check "O_DIRECT refused: status says buffered (direct false)" [ "$(status_json | jq -r '.ssd.direct')" = false ]
check "O_DIRECT refused: kvtierd says so once" [ "$(grep -c "refuses O_DIRECT" "$TMP/kvtierd.log")" -eq 1 ]

# --- the daemon's books: a released range is charged nowhere and moved by
# nobody until restored; restored within the grant it is back in VRAM
# step_books STEP: waits for the books engine to reach STEP; prints its
# region's chunk map (the last region: a filler comes first) and GPU 0's
# charged bytes as the daemon books them
step_books() {
        for _ in $(seq 400); do [ -e "$steps/$1" ] && break; sleep 0.05; done
        sleep 0.2 # the engine's HINT reaches the daemon in order, but on its own socket
        # SPILL_BOOKED: once spilled, wait until the daemon has booked it so
        # (nothing charged) and its grant has reached the shim (a tick)
        if [ "$1" = spilled ] && [ -n "${SPILL_BOOKED:-}" ]; then
                status_when ".gpus[0].charged_bytes == 0" true 10 >/dev/null
                sleep 0.5
        fi
        status_json | jq -r "\"\\(.clients[0].regions[${RANGE_AT:--1}].chunk_map) \\(.gpus[0].charged_bytes)\""
        touch "$steps/$1.go"
}
# books NAME [FILLER_MIB]: the engine's steps, into $filled, $spilled, $restored
books() {
        steps="$TMP/steps-$1"; mkdir -p "$steps"
        env LD_PRELOAD="$PRELOAD" KVTIER_SOCKET="$SOCK" KVTIER_MIN_SIZE=4M "$SSD_ENGINE" books "$steps" ${2:-} \
                >"$TMP/$1.out" 2>&1 &
        local pid=$!
        filled=$(step_books filled); spilled=$(step_books spilled); restored=$(step_books restored)
        wait $pid; rc=$?
        check "$1: the engine's spill and restore come back, every word" [ $rc -eq 0 ]
        [ $rc -eq 0 ] || diag "$(cat "$TMP/$1.out")"
}
# in_tiers "MAP CHARGED" LETTERS N CHARGED: the map's runs are all of
# LETTERS (host memory may show as H, or R once the GPU mapped a chunk at a
# use; lower case while the sampler re-arms it) and N chunks in all, and
# CHARGED is as given
in_tiers() {
        local map=${1% *} charged=${1##* } n=0 run
        for run in $map; do
                case "${run:0:1}" in [$2]) n=$((n + ${run:1})) ;; *) return 1 ;; esac
        done
        [ "$n" -eq "$3" ] && [ "$charged" = "$4" ]
}
# (a long hysteresis: nothing the daemon plans moves the chunks meanwhile)
restart_with "" "block_size = 1M" "[policy]" "hysteresis_ticks = 100000"
books books
check "books: filled, its 16 chunks are in VRAM, charged ($filled)" [ "$filled" = "V16 $((32 << 20))" ]
check "books: spilled, they are booked as released, charged nowhere ($spilled)" [ "$spilled" = "S16 0" ]
check "books: spilled, the range holds no VRAM" grep -q '^spilled: 0 bytes in VRAM' "$TMP/books.out"
check "books: restored within the grant, they are in VRAM again, charged ($restored)" \
        [ "$restored" = "V16 $((32 << 20))" ]
check "books: restored, the range was prefetched to VRAM before its copy" \
        grep -q "^restored: $((32 << 20)) bytes in VRAM" "$TMP/books.out"
restart_with "" "block_size = 1M" "[policy]" "hysteresis_ticks = 100000"
books books-full 64
check "books, budget full: the range started in host memory ($filled)" in_tiers "$filled" HRhr 16 $((64 << 20))
check "books, budget full: spilled, booked as released ($spilled)" [ "$spilled" = "S16 $((64 << 20))" ]
check "books, budget full: restored to host memory, no VRAM charged ($restored)" \
        in_tiers "$restored" HRhr 16 $((64 << 20))
check "books, budget full: the restored range holds no VRAM" grep -q '^restored: 0 bytes in VRAM' "$TMP/books-full.out"
# A range that started in VRAM was advised at its capture as a mapped
# eviction leaves it (accessed-by the GPU); restored to host memory, its
# grant taken while it was spilled, it is booked unmapped, and must be so:
# a mapping left in place would let the GPU read it unseen.  The filler is
# captured once the daemon has booked the spill and told the shim (else it
# could start in host memory and leave the range the grant, as it did once
# under ThreadSanitizer), and takes the whole budget (no capture margin).
restart_with "" "block_size = 1M" "[policy]" "hysteresis_ticks = 100000" "[gpu]" "capture_margin = 0"
SPILL_BOOKED=1 RANGE_AT=0 books books-late "64 late" # the filler comes after the range
check "books, grant taken while spilled: the range started in VRAM, accessed-by ($filled)" \
        grep -q "^filled: $((32 << 20)) bytes in VRAM, 16 pages accessed-by" "$TMP/books-late.out"
check "books, grant taken while spilled: restored to host memory ($restored)" \
        in_tiers "$restored" HRhr 16 $((64 << 20))
check "books, grant taken while spilled: the restored range is not mapped by the GPU" \
        grep -q '^restored: 0 bytes in VRAM, 0 pages accessed-by' "$TMP/books-late.out"

# --- a restore's waiters go on before the SSD copy is dropped: with the
# daemon's drop held 5 s, kvtier_restore_wait() has returned while the spill
# is still on disk
restart_with "drop-slow@1" "block_size = 1M"
steps="$TMP/steps-early"; mkdir -p "$steps"
env LD_PRELOAD="$PRELOAD" KVTIER_SOCKET="$SOCK" KVTIER_MIN_SIZE=4M "$SSD_ENGINE" early "$steps" \
        >"$TMP/early.out" 2>&1 &
early_pid=$!
for _ in $(seq 400); do [ -e "$steps/restored" ] && break; sleep 0.05; done
held=$(status_json | jq '[.ssd.clients[].bytes] | add // 0')
touch "$steps/restored.go"
wait $early_pid; rc=$?
check "early: restored, every word" [ $rc -eq 0 ]
[ $rc -eq 0 ] || diag "$(cat "$TMP/early.out")"
check "early: kvtier_restore_wait() returned before the daemon dropped the spill ($held bytes held)" \
        [ "$held" -eq $((8 << 20)) ]

# --- faults under the I/O: each with its outcome, never wrong data
# (a 40 MiB range in 1 MiB blocks: reads and writes 1..32 are its first
# 32 MiB piece, 33..40 the second)
fault_case() {
        local desc="$1" faults="$2" mode="$3" where="$4" want="$5"
        restart_with "$faults" "block_size = 1M" "queue_depth = 4"
        ssd_run fault fault${mode:+-$mode} "$where" "$want"; rc=$?
        check "$desc" [ $rc -eq 0 ]
        [ $rc -eq 0 ] || diag "$(cat "$TMP/fault.out")"
}
# (under ThreadSanitizer, 5-20 times slower, the device cases only: the host
# ones run the same threads)
where="device host"
[ -n "$tsan" ] && where=device
for w in $where; do
        fault_case "$w: a flipped byte fails the restore with EBADMSG, range as the spill left it" "read-flip@3" "" $w -74
        fault_case "$w: a flipped byte in the second piece: EBADMSG, no word wrong" "read-flip@35" "" $w -74
        fault_case "$w: a short read fails the restore with ENODATA, no word wrong" "read-short@37" "" $w -61
        fault_case "$w: EIO on every attempt fails the restore with EIO, no word wrong" "read-eio@2x*" "" $w -5
        fault_case "$w: ENOSPC fails the spill with ENOSPC, nothing changed" "write-enospc@7" spill $w -28
        fault_case "$w: EIO on every write attempt fails the spill with EIO" "write-eio@9x*" spill $w -5
done
fault_case "one EIO on a read is retried: the restore succeeds" "read-eio@5" "" device 0
fault_case "EAGAIN twice on a read is retried: the restore succeeds" "read-eagain@2x2" "" device 0
fault_case "one EIO on a write is retried: the spill succeeds, every word back" "write-eio@3" spill device 0
fault_case "short and interrupted writes are continued: every word back" "write-short@2,write-eintr@4" spill host 0
json=$(status_json)
check "retries are counted in status" [ "$(echo "$json" | jq '.ssd.totals.retries')" -ge 1 ]
check "retries are logged once per client" grep -q "retried .* transient SSD I/O errors" "$TMP/kvtierd.log"

# --- the checksum failure is counted
restart_with "read-flip@1" "block_size = 1M"
ssd_run cs fault device -74
check "a checksum failure is counted in status" [ "$(status_json | jq '.ssd.totals.checksum_failures')" -eq 1 ]

# --- quotas
restart_with "" "max_per_client = 8M" "max_per_uid = 16M"
ssd_run q1 quota $((8 << 20)) 0
check "a spill within max_per_client succeeds" [ $? -eq 0 ]
ssd_run q2 quota $((9 << 20)) -122
check "a spill past max_per_client fails with EDQUOT" [ $? -eq 0 ]
check "the refusal is counted" [ "$(status_json | jq '.ssd.totals.refused')" -eq 1 ]
restart_with "" "max_per_uid = 0"
ssd_run off quota 4096 -38
check "with max_per_uid = 0 a spill is not available (ENOSYS)" [ $? -eq 0 ]

# --- a client killed mid-spill: its file goes, the daemon serves on
restart_with "" "block_size = 1M"
: >"$TMP/hang.out"
env LD_PRELOAD="$PRELOAD" KVTIER_SOCKET="$SOCK" "$SSD_ENGINE" hang >"$TMP/hang.out" 2>&1 &
hang_pid=$!
for _ in $(seq 200); do grep -q "spilling 3" "$TMP/hang.out" && break; sleep 0.05; done
check "the client spills and holds a file" [ "$(status_json | jq '.ssd.clients | length')" -eq 1 ]
"$KVTIERCTL" -s "$SOCK" status >"$TMP/status.txt" 2>&1
check "kvtierctl status shows the SSD tier and the client's row" \
        eval 'grep -q "^SSD tier: $SSD_DIR" "$TMP/status.txt" && grep -q "^$hang_pid " "$TMP/status.txt"'
"$KVTIERCTL" -s "$SOCK" metrics >"$TMP/metrics.txt" 2>&1
check "kvtierctl metrics has the SSD tier's lines" \
        eval 'grep -q "^kvtier_ssd_client_bytes{pid=\"$hang_pid\"" "$TMP/metrics.txt" && grep -q "^kvtier_ssd_spills_total " "$TMP/metrics.txt"'
kill -KILL $hang_pid; wait $hang_pid 2>/dev/null
check "killed mid-spill: its session and file are gone" \
        [ "$(status_when '.ssd.clients | length' 0 | jq '.ssd.clients | length')" -eq 0 -a "$(files_in_dir)" -eq 0 ]
ssd_run after roundtrip 3 9
check "the daemon serves the next client" [ $? -eq 0 ]

# --- fork(): the child's SSD tier is its own
ssd_run forked fork; rc=$?
check "after fork() the child sees none of the parent's spills and has its own; the parent's restore intact" \
        [ $rc -eq 0 ]
[ $rc -eq 0 ] || diag "$(cat "$TMP/forked.out")"

# --- [host] hugepages raises the node's pool (a sysfs fixture)
stop_daemon
sys="$TMP/sys"; hp="$sys/devices/system/node/node0/hugepages/hugepages-2048kB"
mkdir -p "$hp"
printf 'Node 0 MemTotal:        1048576 kB\n' >"$sys/devices/system/node/node0/meminfo"
echo 10 >"$sys/devices/system/node/node0/distance"
echo 4 >"$hp/nr_hugepages"
write_config 64M "[ssd]" "dir = $SSD_DIR" "[host]" "hugepages = 32"
KVTIER_SYSFS_ROOT="$sys" start_daemon
check "[host] hugepages = 32 raised node 0's pool from 4 to 32" [ "$(cat "$hp/nr_hugepages")" -eq 32 ]
restart_with "" "block_size = 1M"

# --- the GPU benchmark's program, small, against the fakes (ssd-h200.sh runs it big)
env LD_PRELOAD="$PRELOAD" KVTIER_SOCKET="$SOCK" KVTIER_MIN_SIZE=4M \
        "$top_builddir/tests/bench/ssd-bench" "$TMP" $((64 << 20)) $((16 << 20)) 2 >"$TMP/bench.out" 2>&1
rc=$?
check "ssd-bench runs: spill, restore and session figures, data checked" \
        rc_and $rc grep -q "^readahead-restore" "$TMP/bench.out"
[ $rc -eq 0 ] || diag "$(cat "$TMP/bench.out")"

# --- without a daemon, without the shim
stop_daemon
ssd_run nod absent -107
check "without a daemon kvtier_spill says ENOTCONN" [ $? -eq 0 ]
"$SSD_ENGINE" absent -38 >"$TMP/noshim.out" 2>&1
check "without the shim kvtier_try_spill says KVTIER_ENOTAVAIL" [ $? -eq 0 ]
done_testing
