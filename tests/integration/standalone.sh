#!/bin/bash
# KVTIER_STANDALONE=1: no daemon; the registry, planner and LRU policy run
# inside the engine (shim/standalone.c) under KVTIER_VRAM_BUDGET.
. "$(dirname "$0")/lib.sh"
ARGS="--regions 4 --region-size 64M --window 32M --steps 40 --step-ms 15 --hint"
BUDGET=$((64 << 20))
intact() { grep -q "mismatched words 0" "$TMP/$1.out" || { diag "$(cat "$TMP/$1.out")"; false; }; }

# No daemon anywhere: KVTIER_SOCKET points at nothing.
ENGINE_ENV="KVTIER_STANDALONE=1 KVTIER_VRAM_BUDGET=64M KVTIER_SOCKET=$TMP/none.sock" \
        run_engine standalone $ARGS --max-vram $BUDGET; rc=$?
check "standalone: engine exits 0 (pattern intact, VRAM within --max-vram)" rc_and $rc intact standalone
check "standalone: all four regions captured" [ "$(stat_of standalone managed_allocs)" -eq 4 ]
check_le "standalone: peak managed VRAM by the fake's counters within the budget" \
        "$(stat_of standalone managed_resident_peak_bytes)" $BUDGET
check_gt "standalone: chunks were promoted to VRAM" "$(stat_of standalone h2d_bytes)" 0
check_gt "standalone: chunks were evicted to make room" "$(stat_of standalone d2h_bytes)" 0
check "standalone: no complaint about a missing daemon" bash -c "! grep -q 'kvtierd' '$TMP/standalone.out'"

ENGINE_ENV="KVTIER_SOCKET=$TMP/none.sock" run_engine reference $ARGS; rc=$?
check "without standalone and no daemon: nothing captured (the reference)" \
        [ $rc -eq 0 ] && [ "$(stat_of reference managed_allocs)" -eq 0 ]

ENGINE="$top_builddir/tests/integration/api-engine" \
ENGINE_ENV="KVTIER_STANDALONE=1 KVTIER_VRAM_BUDGET=64M KVTIER_SOCKET=$TMP/none.sock" \
        run_engine standalone-driver --mode procaddr --regions 2 --size 64M; rc=$?
check "standalone, driver API through cuGetProcAddress: engine exits 0, data intact" \
        [ $rc -eq 0 ] && intact standalone-driver
check "standalone, driver API: both regions captured" [ "$(stat_of standalone-driver managed_allocs)" -eq 2 ]

ENGINE_ENV="KVTIER_STANDALONE=1 KVTIER_VRAM_BUDGET=lots KVTIER_SOCKET=$TMP/none.sock" \
        run_engine bad-budget $ARGS; rc=$?
check "a bad KVTIER_VRAM_BUDGET warns" grep -q "Invalid KVTIER_VRAM_BUDGET=lots" "$TMP/bad-budget.out"
check "a bad KVTIER_VRAM_BUDGET: engine exits 0, pattern intact" rc_and $rc intact bad-budget
done_testing
