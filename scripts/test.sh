#!/bin/bash
# Builds kvtier and runs every test that needs no GPU (unit and integration
# suites through automake's TAP driver).  --sanitizers: the same under
# AddressSanitizer and UndefinedBehaviorSanitizer, in build-san/.  --tsan:
# the tests that run the shim's threads (mover, evictors, pipeline, CUPTI
# sampler, trace writer, reaper, SSD restores; after fork too) and the daemon's workers
# and SSD sessions
# under ThreadSanitizer, in build-tsan/; any report from any process fails
# the run and is printed.  (restart.sh is left out: under TSan on a loaded
# 2-CPU machine its growing engine once peaked at 128M of VRAM against a
# 64M budget, a slow-daemon overshoot rather than a race.)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh "$@"
dir=build tests=
for a in "$@"; do
        case "$a" in
        --sanitizers) dir=build-san ;;
        --tsan) dir=build-tsan
                tests="tests/unit/test-workers tests/integration/mover.sh tests/integration/robust.sh
                       tests/integration/fail-open.sh tests/integration/budget.sh tests/integration/heat.sh
                       tests/integration/numa.sh tests/integration/capture-apis.sh
                       tests/integration/standalone.sh tests/integration/ssd.sh" ;;
        esac
done
run=()
if [ "$dir" = build-tsan ]; then
        # Every process's reports go to a file of its own: an engine or a
        # kvtierd whose exit status a test does not look at still counts.
        reports="$PWD/$dir/tsan-reports"
        rm -rf "$reports"
        mkdir -p "$reports"
        # The fake CUDA serves CPU faults on managed memory from a SIGSEGV
        # handler of its own (synchronous, so the malloc and free in it are
        # safe): TSan must let it install it and not flag those calls.
        # A forked engine's shim starts its threads in the child (fail-open.sh,
        # standalone.sh): TSan would rather die there than watch them.
        export TSAN_OPTIONS="log_path=$reports/tsan second_deadlock_stack=1 allow_user_segv_handler=1 report_signal_unsafe=0 die_after_fork=0 ${TSAN_OPTIONS:-}"
        # ThreadSanitizer's shadow memory layout does not fit every ASLR
        # layout (GCC 12/13 with vm.mmap_rnd_bits=32 abort at start).
        run=(setarch "$(uname -m)" -R)
fi
log="$dir/test-suite.log"
summary() {
        count() { awk -v k="# $1:" '$1 " " $2 == k { print $3; exit }' "$log"; }
        [ -f "$log" ] && echo "$1: $(count PASS) passed, $(( $(count FAIL) + $(count ERROR) )) failed, $(count SKIP) skipped"
}
rc=0
"${run[@]}" make -C "$dir" -j"$(nproc)" check ${tests:+TESTS="$(echo $tests)"} || rc=$?
if [ $rc -ne 0 ] && [ "$dir" = build-tsan ]; then
        # Under TSan (5-20 times slower) a loaded machine can miss a deadline
        # in a test: the failed tests run once more, and that run counts.
        # ThreadSanitizer reports from both runs count.
        summary tests || true
        echo "test.sh: under ThreadSanitizer, running the failed tests once more:" \
                $(for t in $tests; do grep -q -E '^:test-result: (FAIL|ERROR)' "$dir/${t%.sh}.trs" 2>/dev/null && echo "$t"; done)
        rc=0
        "${run[@]}" make -C "$dir" -j"$(nproc)" recheck ${tests:+TESTS="$(echo $tests)"} || rc=$?
        summary rerun || true
else
        summary tests || true
fi
[ $rc -eq 0 ] || find "$dir/tests" -name '*.log' -newer "$dir/Makefile" -exec grep -l -E '^(not ok|ERROR|FAIL)' {} + | xargs -r tail -n 40
if [ "$dir" = build-tsan ] && [ -n "$(ls -A "$reports")" ]; then
        echo "ThreadSanitizer reports ($(ls "$reports" | wc -l) processes):"
        cat "$reports"/*
        rc=1
fi
exit $rc
