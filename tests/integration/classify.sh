#!/bin/bash
# Which allocations the shim captures (KVTIER_MIN_SIZE, the daemon's
# [capture] capture_after and max_captured) and the capacity engines are
# shown (KVTIER_CAPACITY).
. "$(dirname "$0")/lib.sh"

ARGS="--regions 4 --region-size 64M --window 32M --steps 4 --step-ms 10"
intact() { grep -q "mismatched words 0" "$TMP/$1.out" || { diag "$(cat "$TMP/$1.out")"; false; }; }
captured() { stat_of "$1" managed_allocs; }

write_config 64M "[host]" "host_budget = 1G"
check "kvtierd starts" start_daemon

run_engine all $ARGS
check "defaults: all four 64 MiB allocations captured" [ "$(captured all)" -eq 4 ]
check "defaults: engine exits 0, pattern intact" intact all
ENGINE_ENV="KVTIER_MIN_SIZE=128M" run_engine min $ARGS
check "KVTIER_MIN_SIZE=128M: none captured" [ "$(captured min)" -eq 0 ]
check "KVTIER_MIN_SIZE=128M: engine exits 0, pattern intact" intact min
check "kvtierd stops cleanly" stop_daemon
write_config 64M "[host]" "host_budget = 1G" "[capture]" "capture_after = 128M"
check "kvtierd with [capture] capture_after = 128M starts" start_daemon
run_engine after $ARGS
check "[capture] capture_after = 128M: the first two allocations stay plain" [ "$(captured after)" -eq 2 ]
check "[capture] capture_after = 128M: engine exits 0, pattern intact" intact after
check "kvtierd stops cleanly" stop_daemon
write_config 64M "[host]" "host_budget = 1G" "[capture]" "max_captured = 128M"
check "kvtierd with [capture] max_captured = 128M starts" start_daemon
run_engine max $ARGS
check "[capture] max_captured = 128M: two captured, the rest plain" [ "$(captured max)" -eq 2 ]
check "[capture] max_captured = 128M: engine exits 0, pattern intact" intact max
check "kvtierd stops cleanly" stop_daemon
write_config 64M "[host]" "host_budget = 1G"
check "kvtierd starts again" start_daemon

meminfo() { sed -n 's/^kv-engine: cudaMemGetInfo free \([0-9]*\) total \([0-9]*\)$/\1 \2/p' "$TMP/$1.out"; }
ENGINE_ENV="FAKECUDA_MEM=1G" run_engine card $ARGS --meminfo
check "without KVTIER_CAPACITY the card's memory is reported" [ "$(meminfo card)" = "$((1 << 30)) $((1 << 30))" ]
ENGINE_ENV="FAKECUDA_MEM=1G KVTIER_CAPACITY=64G" run_engine capacity $ARGS --meminfo; rc=$?
check "KVTIER_CAPACITY=64G is reported as total and free" [ "$(meminfo capacity)" = "$((64 << 30)) $((64 << 30))" ]
check "KVTIER_CAPACITY=64G: engine exits 0" [ $rc -eq 0 ]
ENGINE_ENV="FAKECUDA_MEM=1G KVTIER_CAPACITY=lots" run_engine bad-capacity $ARGS --meminfo
check "a bad KVTIER_CAPACITY warns and changes nothing" \
        grep -q "Invalid KVTIER_CAPACITY=lots" "$TMP/bad-capacity.out"
check "a bad KVTIER_CAPACITY reports the card" [ "$(meminfo bad-capacity)" = "$((1 << 30)) $((1 << 30))" ]
ENGINE_ENV="FAKECUDA_MEM=1G KVTIER_CAPACITY=auto" run_engine auto $ARGS --meminfo; rc=$?
check "KVTIER_CAPACITY=auto: total is the VRAM budget plus the host grant" \
        [ "$(meminfo auto | cut -d' ' -f2)" = "$(((64 << 20) + (1 << 30)))" ]
check "KVTIER_CAPACITY=auto: engine exits 0" [ $rc -eq 0 ]
ENGINE_ENV="FAKECUDA_MEM=1G KVTIER_CAPACITY=auto KVTIER_SOCKET=$TMP/none.sock" run_engine auto-alone $ARGS --meminfo
check "KVTIER_CAPACITY=auto without a daemon reports the card" \
        [ "$(meminfo auto-alone)" = "$((1 << 30)) $((1 << 30))" ]
check "kvtierd stops cleanly" stop_daemon

# Rules from the daemon ([capture]) hold where the environment sets none,
# from the first allocation on; the environment wins where it does.
write_config 64M "[capture]" "min_size = 128M" "max_captured = 192M"
check "kvtierd with [capture] rules starts" start_daemon
run_engine daemon-min $ARGS
check "[capture] min_size = 128M: none of the 64 MiB allocations captured" [ "$(captured daemon-min)" -eq 0 ]
check "[capture] min_size = 128M: engine exits 0, pattern intact" intact daemon-min
ENGINE_ENV="KVTIER_MIN_SIZE=32M" run_engine env-wins $ARGS
check "KVTIER_MIN_SIZE=32M beats [capture] min_size; [capture] max_captured = 192M still holds: 3 captured" \
        [ "$(captured env-wins)" -eq 3 ]
ENGINE_ENV="KVTIER_MIN_SIZE=32M" run_engine big $ARGS --region-size 256M --regions 1 --window 64M
check "a single 256 MiB allocation over [capture] max_captured stays plain" [ "$(captured big)" -eq 0 ]
check "kvtierd stops cleanly" stop_daemon
# A ceiling like a real GPU's (issue 18): a process captures at most its
# VRAM budget plus the host memory kvtierd grants (here 64M + 128M); past
# that an allocation fails with cudaErrorMemoryAllocation, as on a full
# card, instead of falling back to plain cudaMalloc or overcommitting.
write_config 64M "[host]" "host_budget = 128M"
check "kvtierd with a 128M host budget starts" start_daemon
run_engine ceiling $ARGS; rc=$?
check "past the ceiling: the engine's fourth 64 MiB allocation fails" \
        rc_and $((rc == 0)) grep -q "cudaMalloc(67108864) failed: 2$" "$TMP/ceiling.out"
check "past the ceiling: three captured, none plain" [ "$(captured ceiling)" -eq 3 ]
check "past the ceiling: the shim says why" grep -q "refused: .* ceiling of 201326592" "$TMP/ceiling.out"
run_engine under $ARGS --regions 3; rc=$?
check "within the ceiling: exits 0, pattern intact" rc_and $rc intact under
check "kvtierd stops cleanly" stop_daemon
run_engine nodaemon $ARGS; rc=$?
check "no daemon, no ceiling: the four allocations succeed (fail-open)" rc_and $rc intact nodaemon
printf '[capture]\nmin_size = 0\n' >"$TMP/bad-capture.conf"
"$KVTIERD" -c "$TMP/bad-capture.conf" >"$TMP/bad-capture.log" 2>&1; rc=$?
check "[capture] min_size = 0 is a configuration error (exit 2)" [ $rc -eq 2 ]
check "and names file:line" grep -q "bad-capture.conf:2" "$TMP/bad-capture.log"
done_testing
