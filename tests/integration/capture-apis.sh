#!/bin/bash
# Every allocation API the shim interposes, through every way an engine
# reaches it (linked symbol, dlsym, cuGetProcAddress, cudaGetDriverEntryPoint):
# captured, shown by kvtierctl with its API and rule, data intact; stream-
# ordered frees wait for the stream; VMM mappings tracked as untiered;
# kvtierd.conf's [capture] apis filter.  api-engine
# (tests/integration/api-engine.c) plays the engines.
. "$(dirname "$0")/lib.sh"
ENGINE="$top_builddir/tests/integration/api-engine"

intact() { grep -q "mismatched words 0" "$TMP/$1.out" || { diag "$(cat "$TMP/$1.out")"; false; }; }
captured() { stat_of "$1" managed_allocs; }

# hold NAME ARGS...: runs the engine in the background until it holds its
# allocations; the status is then in $TMP/NAME.json.  release NAME ends it.
hold() {
        local name="$1"; shift
        rm -f "$TMP/go"
        run_engine "$name" "$@" --hold "$TMP/go" &
        HOLD_PID=$!
        for _ in $(seq 200); do grep -q holding "$TMP/$name.out" 2>/dev/null && break; sleep 0.05; done
        status_json >"$TMP/$name.json"
}
release() { touch "$TMP/go"; wait "$HOLD_PID"; }
regions_of() { jq -c "[.clients[].regions[] | $2]" "$TMP/$1.json"; }

write_config 256M
check "kvtierd starts" start_daemon

for mode in runtime driver dlsym procaddr entrypoint async pool driver-async; do
        run_engine "$mode" --mode "$mode" --regions 2 --size 64M; rc=$?
        check "$mode: engine exits 0, data intact" rc_and $rc intact "$mode"
        check "$mode: both 64 MiB allocations captured" [ "$(captured "$mode")" -eq 2 ]
        case $mode in
        *async|pool) ;; # freed by the shim's thread after the stream: may be pending at exit
        *) check "$mode: everything freed" [ "$(stat_of "$mode" managed_alloc_bytes)" -eq 0 ] ;;
        esac
done

# A start in VRAM is prefetched and advised at the capture (shim.c,
# capture_prepare()) outside the lock that orders captures with the mover's
# registration: a second thread's capture, in host memory past the grant,
# returns while the first one's prefetch is under way (the fake's: 30 ms a
# 2 MiB page, 2.9 s for 192 MiB; the second starts once the first one's
# pages move).  The engine is the daemon's only client, so that its grant
# (the budget and margin, 320M) covers the first and not the second.
for _ in $(seq 100); do [ "$(status_json | jq '.clients | length')" = 0 ] && break; sleep 0.05; done
ENGINE_ENV="FAKECUDA_PREFETCH_DELAY_US=30000 KVTIER_LOG=debug" \
        run_engine overtake --mode runtime --size 192M --overtake; rc=$?
check "overtake: engine exits 0, data intact" rc_and $rc intact overtake
check "overtake: one capture started in VRAM" [ "$(grep -c ', in VRAM\.$' "$TMP/overtake.out")" -eq 1 ]
check "overtake: one capture started in host memory" \
        [ "$(grep -c ', in host memory\.$' "$TMP/overtake.out")" -eq 1 ]
check "overtake: the capture in host memory did not wait for the other's prefetch" \
        grep -q "second allocation returned first" "$TMP/overtake.out"

# Which API and which rule, as kvtierctl shows them.
for pair in runtime:cudaMalloc driver:cuMemAlloc procaddr:cuMemAlloc async:cudaMallocAsync \
        pool:cudaMallocFromPoolAsync driver-async:cuMemAllocAsync; do
        mode=${pair%%:*} api=${pair#*:}
        hold "show-$mode" --mode "$mode" --regions 2 --size 64M
        check "$mode: kvtierctl shows two regions through $api, rule min-size" \
                [ "$(regions_of "show-$mode" '"\(.api)/\(.rule)/\(.untiered)"')" = \
                  "[\"$api/min-size/false\",\"$api/min-size/false\"]" ]
        release "show-$mode"
done

# Stream-ordered frees: nothing is freed while the stream has not got there.
for mode in async pool driver-async; do
        check "$mode: no byte freed while the stream is held" \
                grep -q "freed while stream held 0, freed after release yes" "$TMP/$mode.out"
done
run_engine async-plain --mode async --regions 1 --size 1M
check "uncaptured stream-ordered frees pass straight through" \
        grep -q "freed while stream held 1048576," "$TMP/async-plain.out"

# VMM: tracked, untiered, one warning.
hold show-vmm --mode vmm --regions 3 --size 4M
check "vmm: three mappings shown as cuMemMap, rule vmm, untiered" \
        [ "$(regions_of show-vmm '"\(.api)/\(.rule)/\(.untiered)"')" = \
          '["cuMemMap/vmm/true","cuMemMap/vmm/true","cuMemMap/vmm/true"]' ]
check "vmm: no chunk of them in VRAM or host tiers" \
        [ "$(jq '[.clients[].regions[] | .vram_bytes + .host_mapped_bytes + .host_bytes] | add' "$TMP/show-vmm.json")" -eq 0 ]
"$KVTIERCTL" -s "$SOCK" status >"$TMP/show-vmm.txt"
check "kvtierctl status says untiered" grep -Eq "cuMemMap +vmm +untiered" "$TMP/show-vmm.txt"
release show-vmm; rc=$?
check "vmm: engine exits 0, data intact" rc_and $rc intact show-vmm
check "vmm: warned once, with the PyTorch setting" \
        [ "$(grep -c "expandable_segments:False" "$TMP/show-vmm.out")" -eq 1 ]
status_json >"$TMP/after-vmm.json"
check "vmm: unmapped ranges are gone from kvtierctl" \
        [ "$(jq '[.clients[].regions[]] | length' "$TMP/after-vmm.json")" -eq 0 ]

# A daemon restart under VMM mappings (a process with nothing else: the
# shim must stay connected for them alone): the new daemon lists them again.
ENGINE_ENV="KVTIER_LOG=info" hold restart-vmm --mode vmm --regions 2 --size 4M
kill -KILL "$DAEMON_PID"; wait "$DAEMON_PID" 2>/dev/null; DAEMON_PID=
check "vmm restart: kvtierd starts again" start_daemon
vmm_listed() { status_json | jq -c '[.clients[].regions[] | "\(.api)/\(.untiered)"]'; }
for _ in $(seq 100); do [ "$(vmm_listed)" = '["cuMemMap/true","cuMemMap/true"]' ] && break; sleep 0.05; done
check "vmm restart: the new daemon lists both mappings, untiered, once each" \
        [ "$(vmm_listed)" = '["cuMemMap/true","cuMemMap/true"]' ]
release restart-vmm; rc=$?
check "vmm restart: engine exits 0, data intact" rc_and $rc intact restart-vmm
check "vmm restart: the shim said so" grep -q "Registered 2 untiered VMM mappings" "$TMP/restart-vmm.out"

ENGINE_ENV="KVTIER_DISABLE=1" run_engine disabled --mode procaddr --regions 2 --size 64M
check "KVTIER_DISABLE=1: cuGetProcAddress hands out the driver's own" [ "$(captured disabled)" -eq 0 ]

# Re-entrancy: a runtime that allocates through the driver (as the real
# one does, via cuGetProcAddress) is captured once, at the runtime call.
ENGINE_ENV="FAKECUDA_RUNTIME_VIA_DRIVER=1" hold via-driver --mode runtime --regions 2 --size 64M
check "runtime over the driver: regions show as cudaMalloc only" \
        [ "$(regions_of via-driver .api)" = '["cudaMalloc","cudaMalloc"]' ]
release via-driver; rc=$?
check "runtime over the driver: engine exits 0, data intact" rc_and $rc intact via-driver
check "runtime over the driver: two captures, not four" [ "$(captured via-driver)" -eq 2 ]
check "runtime over the driver: everything freed" [ "$(stat_of via-driver managed_alloc_bytes)" -eq 0 ]

# Many allocating threads, each through its own stream.
for mode in runtime procaddr async; do
        ENGINE_ENV="KVTIER_MIN_SIZE=2M FAKECUDA_RUNTIME_VIA_DRIVER=1" run_engine "threads-$mode" --mode "$mode" --threads 8 --iterations 10 \
                --regions 2 --size 4M; rc=$?
        check "$mode: 8 threads x 10 passes, engine exits 0, data intact" rc_and $rc intact "threads-$mode"
        check "$mode: all 160 allocations captured" [ "$(captured "threads-$mode")" -eq 160 ]
done
status_json >"$TMP/end.json"
check "no engine was dropped by the daemon (no overlapping or duplicate REGION_ADD)" \
        bash -c "! grep -q 'Disconnecting peer' '$TMP/kvtierd.log'"
check "no region left registered after the engines exit" \
        [ "$(jq '[.clients[].regions[]] | length' "$TMP/end.json")" -eq 0 ]
check "kvtierd stops cleanly" stop_daemon

# [capture] apis: the daemon's list holds from the first allocation on.
write_config 256M "[capture]" "apis = runtime"
check "kvtierd with [capture] apis = runtime starts" start_daemon
run_engine conf-driver --mode driver --regions 2 --size 64M; rc=$?
check "[capture] apis = runtime: cuMemAlloc stays plain" [ "$(captured conf-driver)" -eq 0 ]
check "[capture] apis = runtime: driver engine exits 0, data intact" rc_and $rc intact conf-driver
run_engine conf-procaddr --mode procaddr --regions 2 --size 64M
check "[capture] apis = runtime: cuMemAlloc through cuGetProcAddress stays plain" \
        [ "$(captured conf-procaddr)" -eq 0 ]
run_engine conf-async --mode driver-async --regions 2 --size 64M
check "[capture] apis = runtime: cuMemAllocAsync stays plain" [ "$(captured conf-async)" -eq 0 ]
run_engine conf-runtime --mode runtime --regions 2 --size 64M; rc=$?
check "[capture] apis = runtime: cudaMalloc captured" [ "$(captured conf-runtime)" -eq 2 ]
check "[capture] apis = runtime: runtime engine exits 0, data intact" rc_and $rc intact conf-runtime
hold conf-vmm --mode vmm --regions 2 --size 4M
check "[capture] apis = runtime: not even the first VMM mapping is tracked" \
        [ "$(regions_of conf-vmm .api)" = "[]" ]
release conf-vmm
check "kvtierd with [capture] apis stops cleanly" stop_daemon

write_config 256M "[capture]" "apis = driver,async"
check "kvtierd with [capture] apis = driver,async starts" start_daemon
run_engine apis-async --mode async --regions 2 --size 64M
check "[capture] apis = driver,async: cudaMallocAsync captured" [ "$(captured apis-async)" -eq 2 ]
# Re-entrancy: the runtime's own driver calls beneath an excluded
# cudaMalloc are not captured either.
ENGINE_ENV="FAKECUDA_RUNTIME_VIA_DRIVER=1" run_engine via-driver-excluded --mode runtime --regions 2 --size 64M
check "runtime over the driver, [capture] apis = driver,async: the runtime's own driver calls are not captured" \
        [ "$(captured via-driver-excluded)" -eq 0 ]
check "runtime over the driver, [capture] apis = driver,async: engine intact" intact via-driver-excluded
check "kvtierd with [capture] apis = driver,async stops cleanly" stop_daemon

# [capture] capture_after: shown as the region's rule.
write_config 256M "[capture]" "capture_after = 64M"
check "kvtierd with [capture] capture_after starts" start_daemon
hold show-after --mode driver --regions 2 --size 64M
check "[capture] capture_after: the second region shows rule capture-after" \
        [ "$(regions_of show-after .rule)" = '["capture-after"]' ]
"$KVTIERCTL" -s "$SOCK" status >"$TMP/show-after.txt"
check "kvtierctl status lists the region with its API and rule" \
        grep -Eq "cuMemAlloc +capture-after" "$TMP/show-after.txt"
release show-after
check "kvtierd with [capture] capture_after stops cleanly" stop_daemon

printf '[capture]\napis = runtime,bogus\n' >"$TMP/bad-apis.conf"
"$KVTIERD" -c "$TMP/bad-apis.conf" -s "$TMP/bad-apis.sock" >"$TMP/bad-apis.log" 2>&1; rc=$?
check "[capture] apis = runtime,bogus is a configuration error (exit 2)" [ $rc -eq 2 ]
check "and says which key and what it expects" \
        grep -q "bad-apis.conf:2: invalid \[capture\] apis = runtime,bogus: expected" "$TMP/bad-apis.log"
done_testing
